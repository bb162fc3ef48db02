/* rpc_test_server.h -- a real rpc_server for the unit programs of
 * host_shim/rpc (test_rpc, test_rpc_hold), and the client helpers they share.
 *
 * fixture_start runs an rpc_server on a libuv loop in its own thread,
 * listening on 127.0.0.1 (ephemeral port) and on a Unix socket under /tmp,
 * with two test services: "echo" (answers at once, fails on demand, reports
 * the server's counters, holds and releases a call, logs in, reroutes) and
 * "deferred" (answers from a uv timer). The test thread talks to it with
 * rpcc_* and, for malformed frames, with raw sockets. Counters are read
 * over RPC, so only the loop thread ever touches the server. teardown
 * closes the server from the loop thread and requires the loop to end with
 * no handle left (uv_loop_close). Header-only (static functions); the unit
 * test glob picks up test_*.c only. */
#ifndef RPC_TEST_SERVER_H
#define RPC_TEST_SERVER_H

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>
#include <time.h>

#include <cmocka.h>
#include <uv.h>

#include "rpc.h"
#include "rpc_limits.h"
#include "rpc.pb-c.h"
#include "rpc_client.h"
#define SVC_ECHO 100
#define SVC_DEFER 101
#define M_ECHO 1
#define M_FAIL 2        /* returns SMP_EBUSY without replying */
#define M_FAIL_MSG 3    /* replies SMP_EVETO with a message */
#define M_STATS 4       /* body: the server's rpc_server_stats */
#define M_BIG 5         /* body: uint32 n; replies n bytes */
#define M_HOLD 6        /* keeps the call unanswered (one at a time) */
#define M_RELEASE 7     /* answers the held call, then itself */
#define M_LOGIN 8       /* the connection becomes tenant "t", a writer (rpc_server_authenticate) */
#define M_REROUTE 9     /* routes itself again with an empty body at NULL, then echoes */
#define M_DEFER 1       /* body: uint32 delay_ms + payload; replies payload later */

#define TEST_MAX_FRAME (1u << 20)

typedef struct fixture {
    uv_loop_t loop;
    uv_async_t stop;
    uv_thread_t thread;
    rpc_server *srv;
    int port;
    char tcp_ep[64];
    char unix_path[108];
    char unix_ep[128];
    int stop_sent; /* test thread only */
    smp_rpc_call *held; /* M_HOLD's call (loop thread) */
} fixture;

/* Limits the next fixture_start sets on its server (NULL: none). */
static const rpc_limits_config *g_limits;

struct fixture;
/* Called by fixture_start on the server before its loop thread starts
 * (NULL: nothing): more services, an admission function. */
static void (*g_before_run)(struct fixture *fx);

typedef struct deferred {
    uv_timer_t timer;
    smp_rpc_call *call;
    uint8_t *payload;
    size_t len;
} deferred;

/* -- Test services (loop thread) ------------------------------------------- */

/* Set when a handler was given a NULL body (store_plugin.h: never). */
static atomic_int echo_null_body;

static inline int echo_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    (void)ctx;
    if (body == NULL) atomic_store(&echo_null_body, 1);
    return rpc_reply(call, 0, body, len);
}

static inline int fail_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    (void)ctx;
    (void)call;
    (void)body;
    (void)len;
    return SMP_EBUSY;
}

static inline int fail_msg_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    (void)ctx;
    (void)body;
    (void)len;
    return rpc_reply_error(call, SMP_EVETO, "vetoed by test");
}

static inline int stats_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    fixture *fx = ctx;
    rpc_server_stats st;
    (void)body;
    (void)len;
    rpc_server_get_stats(fx->srv, &st);
    return rpc_reply(call, 0, (const uint8_t *)&st, sizeof(st));
}

static inline int big_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    uint32_t n;
    uint8_t *buf;
    int rc;
    (void)ctx;
    if (len != sizeof(n))
        return SMP_EINVAL;
    memcpy(&n, body, sizeof(n));
    if (n > 2 * TEST_MAX_FRAME)
        return SMP_EINVAL;
    if ((buf = calloc(1, n ? n : 1)) == NULL)
        return SMP_ENOMEM;
    rc = rpc_reply(call, 0, buf, n);
    free(buf);
    return rc;
}

static inline int hold_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    fixture *fx = ctx;
    (void)body;
    (void)len;
    if (fx->held != NULL)
        return SMP_EBUSY;
    fx->held = call;
    return SMP_OK;
}

static inline int release_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    fixture *fx = ctx;
    (void)body;
    (void)len;
    if (fx->held == NULL)
        return SMP_ENOTFOUND;
    rpc_reply(fx->held, 0, (const uint8_t *)"released", 8);
    fx->held = NULL;
    return rpc_reply(call, 0, NULL, 0);
}

static inline int login_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    int rc;
    (void)ctx;
    (void)body;
    (void)len;
    if ((rc = rpc_server_authenticate(call, "t", SMP_ROLE_WRITER)) < 0)
        return rc;
    return rpc_reply(call, 0, NULL, 0);
}

static inline void on_deferred_closed(uv_handle_t *h)
{
    deferred *d = h->data;
    free(d->payload);
    free(d);
}

static inline void on_deferred_timer(uv_timer_t *t)
{
    deferred *d = t->data;
    rpc_reply(d->call, 0, d->payload, d->len);
    uv_close((uv_handle_t *)&d->timer, on_deferred_closed);
}

static inline int defer_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    fixture *fx = ctx;
    deferred *d;
    uint32_t delay;
    if (len < sizeof(delay))
        return SMP_EINVAL;
    memcpy(&delay, body, sizeof(delay));
    if (delay > 10000)
        return SMP_EINVAL;
    if ((d = calloc(1, sizeof(*d))) == NULL)
        return SMP_ENOMEM;
    d->len = len - sizeof(delay);
    if ((d->payload = malloc(d->len ? d->len : 1)) == NULL) {
        free(d);
        return SMP_ENOMEM;
    }
    memcpy(d->payload, body + sizeof(delay), d->len);
    d->call = call;
    uv_timer_init(&fx->loop, &d->timer);
    d->timer.data = d;
    uv_timer_start(&d->timer, on_deferred_timer, delay, 0);
    return SMP_OK;
}

/* Routes its call again through rpc_server_redispatch, as the host does
 * with a call parked while a plugin reloads, with an empty body at NULL;
 * the second pass echoes it (echo_handler notes a NULL body). */
static inline int reroute_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    fixture *fx = ctx;
    static int again; /* loop thread */
    if (again) return echo_handler(ctx, call, body, len);
    again = 1;
    rpc_server_redispatch(fx->srv, call, NULL, 0);
    again = 0;
    return SMP_OK;
}

static const smp_rpc_method echo_methods[] = {
    {sizeof(smp_rpc_method), M_ECHO, "echo", echo_handler, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), M_FAIL, "fail", fail_handler, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), M_FAIL_MSG, "fail_msg", fail_msg_handler, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), M_STATS, "stats", stats_handler, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), M_BIG, "big", big_handler, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), M_HOLD, "hold", hold_handler, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), M_RELEASE, "release", release_handler, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), M_LOGIN, "login", login_handler, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), M_REROUTE, "reroute", reroute_handler, SMP_ROLE_ADMIN},
};

static const smp_rpc_method defer_methods[] = {
    {sizeof(smp_rpc_method), M_DEFER, "defer", defer_handler, SMP_ROLE_ADMIN},
};

/* -- Fixture --------------------------------------------------------------- */

static inline void loop_thread(void *arg)
{
    fixture *fx = arg;
    uv_run(&fx->loop, UV_RUN_DEFAULT);
}

static inline void on_stop(uv_async_t *a)
{
    fixture *fx = a->data;
    rpc_server_close(fx->srv);
    fx->srv = NULL;
    uv_close((uv_handle_t *)a, NULL);
}

static inline int fixture_start(void **state, const rpc_server_options *extra)
{
    fixture *fx = calloc(1, sizeof(*fx));
    rpc_server_options opt;
    char err[256];

    assert_non_null(fx);
    memset(&opt, 0, sizeof(opt));
    if (extra != NULL)
        opt = *extra;
    snprintf(fx->unix_path, sizeof(fx->unix_path), "/tmp/wm-test-rpc-%d.sock", (int)getpid());
    snprintf(fx->unix_ep, sizeof(fx->unix_ep), "unix:%s", fx->unix_path);
    opt.listen_tcp = "127.0.0.1:0";
    opt.listen_unix = fx->unix_path;
    if (opt.max_frame_bytes == 0)
        opt.max_frame_bytes = TEST_MAX_FRAME;
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    assert_int_equal(rpc_server_create(&fx->loop, &opt, &fx->srv, err, sizeof(err)), SMP_OK);
    assert_int_equal(rpc_server_add_service(fx->srv, SVC_ECHO, "echo", echo_methods,
                                            sizeof(echo_methods) / sizeof(echo_methods[0]), fx),
                     SMP_OK);
    assert_int_equal(rpc_server_add_service(fx->srv, SVC_DEFER, "deferred", defer_methods, 1, fx),
                     SMP_OK);
    if (g_limits != NULL) {
        rpc_limits *l = NULL;
        rpc_auth_token tok;
        memset(&tok, 0, sizeof(tok));
        strcpy(tok.tenant, "t");
        tok.role = SMP_ROLE_WRITER;
        assert_int_equal(rpc_limits_create(g_limits, &tok, 1, &l), SMP_OK);
        rpc_server_set_limits(fx->srv, l);
    }
    if (g_before_run != NULL)
        g_before_run(fx);
    if (rpc_server_start(fx->srv, err, sizeof(err)) != SMP_OK)
        fail_msg("rpc_server_start: %s", err);
    fx->port = rpc_server_tcp_port(fx->srv);
    assert_true(fx->port > 0);
    snprintf(fx->tcp_ep, sizeof(fx->tcp_ep), "127.0.0.1:%d", fx->port);
    assert_int_equal(uv_async_init(&fx->loop, &fx->stop, on_stop), 0);
    fx->stop.data = fx;
    assert_int_equal(uv_thread_create(&fx->thread, loop_thread, fx), 0);
    *state = fx;
    return 0;
}

static inline int setup(void **state)
{
    return fixture_start(state, NULL);
}

static inline int setup_limited(void **state)
{
    rpc_server_options opt;
    memset(&opt, 0, sizeof(opt));
    opt.max_connections = 2;
    opt.max_inflight = 4;
    opt.max_output_bytes = 4096;
    return fixture_start(state, &opt);
}

/* fixture_start with limits cfg set on the server (tenant "t" has a token). */
static inline int start_limited(void **state, const rpc_limits_config *cfg)
{
    int rc;
    g_limits = cfg;
    rc = fixture_start(state, NULL);
    g_limits = NULL;
    return rc;
}

/* Each connection may have 4096 request bytes unanswered. */
static inline int setup_inflight(void **state)
{
    static const rpc_limits_config cfg = {.connection = {.inflight_bytes = 4096}};
    return start_limited(state, &cfg);
}

/* Tenant "t" (M_LOGIN) may have 4096 request bytes unanswered over all its
 * connections; a connection alone is not limited. */
static inline int setup_tenant_inflight(void **state)
{
    static const rpc_limits_config cfg = {.tenant = {.inflight_bytes = 4096}};
    return start_limited(state, &cfg);
}

/* Each connection may send 1 request a second, 3 at once. */
static inline int setup_rate(void **state)
{
    static const rpc_limits_config cfg = {.connection = {.rate = 1, .burst = 3}};
    return start_limited(state, &cfg);
}

/* Ask the loop thread to close the server (once). */
static inline void fixture_stop(fixture *fx)
{
    if (!fx->stop_sent) {
        fx->stop_sent = 1;
        uv_async_send(&fx->stop);
    }
}

static inline int teardown(void **state)
{
    fixture *fx = *state;
    fixture_stop(fx);
    uv_thread_join(&fx->thread);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
    assert_int_equal(access(fx->unix_path, F_OK), -1); /* socket file removed */
    free(fx);
    return 0;
}

/* -- Client helpers -------------------------------------------------------- */

static inline rpcc_conn *open_client(const char *ep)
{
    rpcc_options o = {.timeout_ms = 5000, .max_frame_bytes = 0};
    rpcc_conn *c = NULL;
    char err[256];
    if (rpcc_connect(ep, &o, &c, err, sizeof(err)) != SMP_OK)
        fail_msg("connect %s: %s", ep, err);
    return c;
}

static inline void expect_echo(rpcc_conn *c, const char *text)
{
    int status = 1;
    uint8_t *body = NULL;
    size_t len = 0;
    char *msg = NULL;
    int rc = rpcc_call(c, SVC_ECHO, M_ECHO, (const uint8_t *)text, strlen(text),
                       &status, &body, &len, &msg);
    if (rc != SMP_OK)
        fail_msg("echo: %s (%s)", smp_strerror(rc), rpcc_last_error(c));
    assert_int_equal(status, 0);
    assert_null(msg);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(body, text, len);
    free(body);
}

/* The server's counters, asked over c (the loop thread reads them). */
static inline rpc_server_stats get_stats_on(rpcc_conn *c)
{
    rpc_server_stats st;
    int status = 1;
    uint8_t *body = NULL;
    size_t len = 0;
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_STATS, NULL, 0, &status, &body, &len, NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(len, sizeof(st));
    memcpy(&st, body, sizeof(st));
    free(body);
    return st;
}

/* The same over a connection of its own. */
static inline rpc_server_stats get_stats(fixture *fx)
{
    rpcc_conn *c = open_client(fx->tcp_ep);
    rpc_server_stats st = get_stats_on(c);
    rpcc_close(c);
    return st;
}

/* Poll the counter at byte offset off until it reaches at least want. */
static inline uint64_t wait_stat(fixture *fx, size_t off, uint64_t want)
{
    uint64_t v = 0;
    for (int i = 0; i < 500; i++) {
        rpc_server_stats st = get_stats(fx);
        memcpy(&v, (const char *)&st + off, sizeof(v));
        if (v >= want)
            return v;
        usleep(10 * 1000);
    }
    fail_msg("counter at offset %zu stayed at %llu, wanted %llu", off,
             (unsigned long long)v, (unsigned long long)want);
    return v;
}

#define STAT(field) offsetof(rpc_server_stats, field)

static inline size_t defer_body(uint8_t *buf, uint32_t delay_ms, const char *payload)
{
    memcpy(buf, &delay_ms, sizeof(delay_ms));
    memcpy(buf + sizeof(delay_ms), payload, strlen(payload));
    return sizeof(delay_ms) + strlen(payload);
}

/* Raw sockets for frames the client library would never send. */
static inline int raw_connect(const fixture *fx)
{
    struct sockaddr_in sa;
    struct timeval tv = {.tv_sec = 5, .tv_usec = 0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)fx->port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static inline void raw_send(int fd, const void *p, size_t n)
{
    assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static inline void raw_send_header(int fd, uint32_t len)
{
    uint8_t h[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
    raw_send(fd, h, 4);
}

static inline int raw_read_all(int fd, uint8_t *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, p + got, n - got, 0);
        if (r <= 0)
            return r == 0 ? 0 : -1;
        got += (size_t)r;
    }
    return 1;
}

/* Read one response frame (caller frees with rpc_response__free_unpacked). */
static inline RpcResponse *raw_read_response(int fd)
{
    uint8_t h[4];
    uint32_t len;
    uint8_t *buf;
    RpcResponse *m;
    assert_int_equal(raw_read_all(fd, h, 4), 1);
    len = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
    assert_true(len > 0 && len < 4096);
    buf = malloc(len);
    assert_non_null(buf);
    assert_int_equal(raw_read_all(fd, buf, len), 1);
    m = rpc_response__unpack(NULL, len, buf);
    free(buf);
    assert_non_null(m);
    return m;
}

/* The server closed the connection: the next read sees end of stream. */
static inline void raw_expect_closed(int fd)
{
    uint8_t b;
    ssize_t r = recv(fd, &b, 1, 0);
    assert_true(r == 0 || (r < 0 && errno == ECONNRESET));
}

#endif
