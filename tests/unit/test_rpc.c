/* test_rpc.c -- the RPC server and its blocking client, end to end.
 *
 * Each test starts a real rpc_server on a libuv loop running in its own
 * thread, listening on 127.0.0.1 (ephemeral port) and on a Unix socket under
 * /tmp, with three test services: "echo" (answers at once, fails on demand,
 * reports the server's counters), "deferred" (answers from a uv timer) and
 * nothing else. The test thread talks to it with rpcc_* and, for malformed
 * frames, with raw sockets. Counters are read over RPC, so only the loop
 * thread ever touches the server. Teardown closes the server from the loop
 * thread and requires the loop to end with no handle left (uv_loop_close). */
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

#include "full_backlog.h"
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

typedef struct deferred {
    uv_timer_t timer;
    smp_rpc_call *call;
    uint8_t *payload;
    size_t len;
} deferred;

/* -- Test services (loop thread) ------------------------------------------- */

/* Set when a handler was given a NULL body (store_plugin.h: never). */
static atomic_int echo_null_body;

static int echo_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    (void)ctx;
    if (body == NULL) atomic_store(&echo_null_body, 1);
    return rpc_reply(call, 0, body, len);
}

static int fail_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    (void)ctx;
    (void)call;
    (void)body;
    (void)len;
    return SMP_EBUSY;
}

static int fail_msg_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    (void)ctx;
    (void)body;
    (void)len;
    return rpc_reply_error(call, SMP_EVETO, "vetoed by test");
}

static int stats_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    fixture *fx = ctx;
    rpc_server_stats st;
    (void)body;
    (void)len;
    rpc_server_get_stats(fx->srv, &st);
    return rpc_reply(call, 0, (const uint8_t *)&st, sizeof(st));
}

static int big_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
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

static int hold_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    fixture *fx = ctx;
    (void)body;
    (void)len;
    if (fx->held != NULL)
        return SMP_EBUSY;
    fx->held = call;
    return SMP_OK;
}

static int release_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
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

static int login_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    int rc;
    (void)ctx;
    (void)body;
    (void)len;
    if ((rc = rpc_server_authenticate(call, "t", SMP_ROLE_WRITER)) < 0)
        return rc;
    return rpc_reply(call, 0, NULL, 0);
}

static void on_deferred_closed(uv_handle_t *h)
{
    deferred *d = h->data;
    free(d->payload);
    free(d);
}

static void on_deferred_timer(uv_timer_t *t)
{
    deferred *d = t->data;
    rpc_reply(d->call, 0, d->payload, d->len);
    uv_close((uv_handle_t *)&d->timer, on_deferred_closed);
}

static int defer_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
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
static int reroute_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
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

static void loop_thread(void *arg)
{
    fixture *fx = arg;
    uv_run(&fx->loop, UV_RUN_DEFAULT);
}

static void on_stop(uv_async_t *a)
{
    fixture *fx = a->data;
    rpc_server_close(fx->srv);
    fx->srv = NULL;
    uv_close((uv_handle_t *)a, NULL);
}

static int fixture_start(void **state, const rpc_server_options *extra)
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

static int setup(void **state)
{
    return fixture_start(state, NULL);
}

static int setup_limited(void **state)
{
    rpc_server_options opt;
    memset(&opt, 0, sizeof(opt));
    opt.max_connections = 2;
    opt.max_inflight = 4;
    opt.max_output_bytes = 4096;
    return fixture_start(state, &opt);
}

/* fixture_start with limits cfg set on the server (tenant "t" has a token). */
static int start_limited(void **state, const rpc_limits_config *cfg)
{
    int rc;
    g_limits = cfg;
    rc = fixture_start(state, NULL);
    g_limits = NULL;
    return rc;
}

/* Each connection may have 4096 request bytes unanswered. */
static int setup_inflight(void **state)
{
    static const rpc_limits_config cfg = {.connection = {.inflight_bytes = 4096}};
    return start_limited(state, &cfg);
}

/* Tenant "t" (M_LOGIN) may have 4096 request bytes unanswered over all its
 * connections; a connection alone is not limited. */
static int setup_tenant_inflight(void **state)
{
    static const rpc_limits_config cfg = {.tenant = {.inflight_bytes = 4096}};
    return start_limited(state, &cfg);
}

/* Each connection may send 1 request a second, 3 at once. */
static int setup_rate(void **state)
{
    static const rpc_limits_config cfg = {.connection = {.rate = 1, .burst = 3}};
    return start_limited(state, &cfg);
}

/* Ask the loop thread to close the server (once). */
static void fixture_stop(fixture *fx)
{
    if (!fx->stop_sent) {
        fx->stop_sent = 1;
        uv_async_send(&fx->stop);
    }
}

static int teardown(void **state)
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

static rpcc_conn *open_client(const char *ep)
{
    rpcc_options o = {.timeout_ms = 5000, .max_frame_bytes = 0};
    rpcc_conn *c = NULL;
    char err[256];
    if (rpcc_connect(ep, &o, &c, err, sizeof(err)) != SMP_OK)
        fail_msg("connect %s: %s", ep, err);
    return c;
}

static void expect_echo(rpcc_conn *c, const char *text)
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
static rpc_server_stats get_stats_on(rpcc_conn *c)
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
static rpc_server_stats get_stats(fixture *fx)
{
    rpcc_conn *c = open_client(fx->tcp_ep);
    rpc_server_stats st = get_stats_on(c);
    rpcc_close(c);
    return st;
}

/* Poll the counter at byte offset off until it reaches at least want. */
static uint64_t wait_stat(fixture *fx, size_t off, uint64_t want)
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

static size_t defer_body(uint8_t *buf, uint32_t delay_ms, const char *payload)
{
    memcpy(buf, &delay_ms, sizeof(delay_ms));
    memcpy(buf + sizeof(delay_ms), payload, strlen(payload));
    return sizeof(delay_ms) + strlen(payload);
}

/* Raw sockets for frames the client library would never send. */
static int raw_connect(const fixture *fx)
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

static void raw_send(int fd, const void *p, size_t n)
{
    assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static void raw_send_header(int fd, uint32_t len)
{
    uint8_t h[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
    raw_send(fd, h, 4);
}

static int raw_read_all(int fd, uint8_t *p, size_t n)
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
static RpcResponse *raw_read_response(int fd)
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
static void raw_expect_closed(int fd)
{
    uint8_t b;
    ssize_t r = recv(fd, &b, 1, 0);
    assert_true(r == 0 || (r < 0 && errno == ECONNRESET));
}

/* -- Tests: the happy paths ------------------------------------------------ */

/* One call over TCP comes back with the same body and status 0. */
static void test_round_trip_over_tcp(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    expect_echo(c, "hello over tcp");
    expect_echo(c, "x");
    rpcc_close(c);
}

/* The same over the Unix socket, with both spellings of the endpoint. */
static void test_round_trip_over_unix_socket(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->unix_ep);
    expect_echo(c, "hello over unix");
    rpcc_close(c);
    c = open_client(fx->unix_path);
    expect_echo(c, "hello over /path");
    rpcc_close(c);
}

/* An empty request body is legal and comes back empty; the handler gets
 * it at an address, not NULL, also when the call is routed again
 * (rpc_server_redispatch). */
static void test_empty_body_round_trip(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    int status = 1;
    uint8_t *body = (uint8_t *)"not touched";
    size_t len = 99;
    atomic_store(&echo_null_body, 0);
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, NULL, 0, &status, &body, &len, NULL), SMP_OK);
    assert_int_equal(atomic_load(&echo_null_body), 0);
    assert_int_equal(status, 0);
    assert_null(body);
    assert_int_equal(len, 0);
    status = 1;
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_REROUTE, NULL, 0, &status, &body, &len, NULL),
                     SMP_OK);
    assert_int_equal(atomic_load(&echo_null_body), 0);
    assert_int_equal(status, 0);
    assert_null(body);
    assert_int_equal(len, 0);
    rpcc_close(c);
}

/* 100 requests sent back to back on one connection are each answered once,
 * with the body of the request that carried that id. */
static void test_pipelined_100_requests_answered_by_id(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    uint64_t ids[100];
    int seen[100] = {0};
    char text[32];

    for (int i = 0; i < 100; i++) {
        snprintf(text, sizeof(text), "request-%d", i);
        assert_int_equal(rpcc_send(c, SVC_ECHO, M_ECHO, (const uint8_t *)text, strlen(text), &ids[i]),
                         SMP_OK);
    }
    for (int n = 0; n < 100; n++) {
        uint64_t got = 0;
        int status = 1, idx = -1;
        uint8_t *body = NULL;
        size_t len = 0;
        assert_int_equal(rpcc_recv(c, 0, &got, &status, &body, &len, NULL), SMP_OK);
        for (int i = 0; i < 100; i++)
            if (ids[i] == got)
                idx = i;
        assert_true(idx >= 0);
        assert_int_equal(seen[idx], 0);
        seen[idx] = 1;
        snprintf(text, sizeof(text), "request-%d", idx);
        assert_int_equal(status, 0);
        assert_int_equal(len, strlen(text));
        assert_memory_equal(body, text, len);
        free(body);
    }
    expect_echo(c, "still fine");
    rpcc_close(c);
}

/* A deferred reply to an earlier request arrives after the immediate reply
 * to a later one: responses leave in completion order. */
static void test_deferred_reply_arrives_after_later_immediate_one(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    uint8_t req[64];
    size_t n = defer_body(req, 150, "late");
    uint64_t id_late, id_early, got = 0;
    uint8_t *body = NULL;
    size_t len = 0;
    int status = 1;

    assert_int_equal(rpcc_send(c, SVC_DEFER, M_DEFER, req, n, &id_late), SMP_OK);
    assert_int_equal(rpcc_send(c, SVC_ECHO, M_ECHO, (const uint8_t *)"early", 5, &id_early), SMP_OK);
    assert_int_equal(rpcc_recv(c, 0, &got, &status, &body, &len, NULL), SMP_OK);
    assert_true(got == id_early);
    assert_int_equal(len, 5);
    assert_memory_equal(body, "early", 5);
    free(body);
    assert_int_equal(rpcc_recv(c, 0, &got, &status, &body, &len, NULL), SMP_OK);
    assert_true(got == id_late);
    assert_int_equal(status, 0);
    assert_int_equal(len, 4);
    assert_memory_equal(body, "late", 4);
    free(body);
    rpcc_close(c);
}

/* rpcc_recv for a given id keeps the responses to other ids for later. */
static void test_recv_by_id_keeps_other_responses(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->unix_ep);
    uint64_t a, b, got = 0;
    uint8_t *body = NULL;
    size_t len = 0;

    assert_int_equal(rpcc_send(c, SVC_ECHO, M_ECHO, (const uint8_t *)"a", 1, &a), SMP_OK);
    assert_int_equal(rpcc_send(c, SVC_ECHO, M_ECHO, (const uint8_t *)"b", 1, &b), SMP_OK);
    assert_int_equal(rpcc_recv(c, b, &got, NULL, &body, &len, NULL), SMP_OK);
    assert_true(got == b);
    assert_memory_equal(body, "b", 1);
    free(body);
    assert_int_equal(rpcc_recv(c, a, &got, NULL, &body, &len, NULL), SMP_OK);
    assert_true(got == a);
    assert_memory_equal(body, "a", 1);
    free(body);
    rpcc_close(c);
}

/* A client timeout leaves the connection usable: the late response is
 * still delivered by a later rpcc_recv. */
static void test_client_timeout_then_resume(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    uint8_t req[64];
    size_t n = defer_body(req, 300, "slow");
    uint64_t id;
    uint8_t *body = NULL;
    size_t len = 0;

    rpcc_set_timeout(c, 50);
    assert_int_equal(rpcc_send(c, SVC_DEFER, M_DEFER, req, n, &id), SMP_OK);
    assert_int_equal(rpcc_recv(c, id, NULL, NULL, &body, &len, NULL), SMP_EAGAIN);
    assert_non_null(strstr(rpcc_last_error(c), "50 ms"));
    rpcc_set_timeout(c, 5000);
    assert_int_equal(rpcc_recv(c, id, NULL, NULL, &body, &len, NULL), SMP_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(body, "slow", 4);
    free(body);
    expect_echo(c, "after timeout");
    rpcc_close(c);
}

/* -- Tests: errors that keep the connection -------------------------------- */

/* An unknown service is answered with SMP_ENOTFOUND naming the ids; the
 * connection keeps working. */
static void test_unknown_service_answered_and_connection_kept(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    int status = 0;
    char *msg = NULL;
    assert_int_equal(rpcc_call(c, 999, 7, NULL, 0, &status, NULL, NULL, &msg), SMP_OK);
    assert_int_equal(status, SMP_ENOTFOUND);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "999"));
    assert_non_null(strstr(msg, "7"));
    free(msg);
    /* 65536 + SVC_ECHO must not alias the 16-bit service id */
    assert_int_equal(rpcc_call(c, 65536 + SVC_ECHO, M_ECHO, NULL, 0, &status, NULL, NULL, NULL), SMP_OK);
    assert_int_equal(status, SMP_ENOTFOUND);
    expect_echo(c, "still served");
    assert_true(get_stats(fx).err_unknown_service >= 2);
    rpcc_close(c);
}

/* An unknown method of a known service: SMP_ENOTFOUND naming the service and
 * the method; the connection keeps working. */
static void test_unknown_method_answered_and_connection_kept(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->unix_ep);
    int status = 0;
    char *msg = NULL;
    assert_int_equal(rpcc_call(c, SVC_ECHO, 42, NULL, 0, &status, NULL, NULL, &msg), SMP_OK);
    assert_int_equal(status, SMP_ENOTFOUND);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "echo"));
    assert_non_null(strstr(msg, "42"));
    free(msg);
    expect_echo(c, "still served");
    assert_true(get_stats(fx).err_unknown_method >= 1);
    rpcc_close(c);
}

/* A handler that returns a negative code without replying has that code
 * sent as the status with a message naming it; rpc_reply_error carries the
 * handler's own message. */
static void test_handler_error_status_propagated(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    int status = 0;
    char *msg = NULL;
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_FAIL, NULL, 0, &status, NULL, NULL, &msg), SMP_OK);
    assert_int_equal(status, SMP_EBUSY);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "SMP_EBUSY"));
    assert_non_null(strstr(msg, "fail"));
    free(msg);
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_FAIL_MSG, NULL, 0, &status, NULL, NULL, &msg), SMP_OK);
    assert_int_equal(status, SMP_EVETO);
    assert_string_equal(msg, "vetoed by test");
    free(msg);
    expect_echo(c, "still served");
    assert_true(get_stats(fx).err_handler >= 1);
    rpcc_close(c);
}

/* A reply larger than max_frame_bytes is replaced by SMP_ERANGE naming both
 * sizes; the connection stays usable. */
static void test_reply_over_max_frame_becomes_erange(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    uint32_t n = TEST_MAX_FRAME + 10;
    int status = 0;
    char *msg = NULL;
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_BIG, (const uint8_t *)&n, sizeof(n), &status, NULL,
                               NULL, &msg),
                     SMP_OK);
    assert_int_equal(status, SMP_ERANGE);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "1048576"));
    free(msg);
    n = 200000; /* a large reply within bounds crosses several reads */
    {
        uint8_t *body = NULL;
        size_t len = 0;
        assert_int_equal(rpcc_call(c, SVC_ECHO, M_BIG, (const uint8_t *)&n, sizeof(n), &status,
                                   &body, &len, NULL),
                         SMP_OK);
        assert_int_equal(status, 0);
        assert_int_equal(len, n);
        free(body);
    }
    expect_echo(c, "still served");
    rpcc_close(c);
}

/* The client refuses to send a request over its own max_frame_bytes and the
 * connection is not harmed. */
static void test_client_refuses_oversized_request(void **state)
{
    fixture *fx = *state;
    rpcc_options o = {.timeout_ms = 5000, .max_frame_bytes = 1024};
    rpcc_conn *c = NULL;
    uint8_t big[2048];
    memset(big, 'z', sizeof(big));
    assert_int_equal(rpcc_connect(fx->tcp_ep, &o, &c, NULL, 0), SMP_OK);
    assert_int_equal(rpcc_send(c, SVC_ECHO, M_ECHO, big, sizeof(big), NULL), SMP_ERANGE);
    assert_non_null(strstr(rpcc_last_error(c), "1024"));
    expect_echo(c, "small is fine");
    rpcc_close(c);
}

/* Bad endpoints and refused connections are errors with messages. */
static void test_client_connect_errors(void **state)
{
    char err[256] = "";
    rpcc_conn *c = NULL;
    (void)state;
    assert_int_equal(rpcc_connect("no-port-here", NULL, &c, err, sizeof(err)), SMP_EINVAL);
    assert_null(c);
    assert_non_null(strstr(err, "no-port-here"));
    assert_int_equal(rpcc_connect("unix:/tmp/wm-test-rpc-nonexistent.sock", NULL, &c, err,
                                  sizeof(err)),
                     SMP_EIO);
    assert_non_null(strstr(err, "nonexistent"));
}

typedef struct connect_call {
    const char *endpoint;
    int timeout_ms;
    int rc;
    char err[512];
} connect_call;

static void connect_main(void *arg)
{
    connect_call *cc = arg;
    rpcc_options opt = {.timeout_ms = cc->timeout_ms};
    rpcc_conn *c = NULL;
    cc->rc = rpcc_connect(cc->endpoint, &opt, &c, cc->err, sizeof(cc->err));
    rpcc_close(c);
}

/* A connect to a Unix socket whose server never accepts (its backlog is
 * full) ends at the connection's timeout with SMP_EAGAIN "timed out", as a
 * TCP connect does, instead of waiting for an accept that never comes. The
 * call runs on a thread given 30 s (100 times its timeout) to end; a
 * connect still waiting then fails the test, and closing the listener
 * ends it. */
static void test_unix_connect_to_a_full_backlog_ends_at_its_timeout(void **state)
{
    char path[108], ep[128];
    int queued[FULL_BACKLOG_MAX];
    size_t n_queued = 0;
    bg_call bg;
    connect_call cc = {.endpoint = ep, .timeout_ms = 300};
    (void)state;
    snprintf(path, sizeof(path), "/tmp/wm-test-rpc-full-%d.sock", (int)getpid());
    snprintf(ep, sizeof(ep), "unix:%s", path);
    int l = full_unix_listener(path, queued, &n_queued);
    assert_true(l >= 0);
    assert_int_equal(bg_call_start(&bg, connect_main, &cc), 0);
    int ended = bg_call_wait(&bg, 30);
    full_backlog_close(l, queued, &n_queued); /* a connect still waiting is refused now */
    bg_call_join(&bg);
    unlink(path);
    if (!ended) fail_msg("rpcc_connect to a full backlog still waited after 30 s (timeout 300 ms)");
    assert_int_equal(cc.rc, SMP_EAGAIN);
    assert_non_null(strstr(cc.err, "timed out"));
    assert_non_null(strstr(cc.err, path));
}

/* -- Tests: bad frames close only their own connection --------------------- */

/* A peer that closes in the middle of a frame is just closed; a client
 * connected before keeps being served. */
static void test_truncated_frame_closes_only_that_connection(void **state)
{
    fixture *fx = *state;
    rpcc_conn *bystander = open_client(fx->tcp_ep);
    uint64_t before = get_stats(fx).err_truncated_frame;
    int fd = raw_connect(fx);
    uint8_t part[10] = {0};
    raw_send_header(fd, 100);
    raw_send(fd, part, sizeof(part));
    close(fd);
    wait_stat(fx, STAT(err_truncated_frame), before + 1);
    expect_echo(bystander, "bystander after truncated frame");
    rpcc_close(bystander);
}

/* A frame longer than max_frame_bytes gets SMP_ERANGE naming both sizes,
 * without the body being read, and the connection is closed. */
static void test_oversized_frame_answered_and_closed(void **state)
{
    fixture *fx = *state;
    rpcc_conn *bystander = open_client(fx->unix_ep);
    int fd = raw_connect(fx);
    RpcResponse *m;
    raw_send_header(fd, 2u * TEST_MAX_FRAME);
    m = raw_read_response(fd);
    assert_true(m->request_id == 0);
    assert_int_equal(m->status, SMP_ERANGE);
    assert_non_null(strstr(m->error, "2097152"));
    assert_non_null(strstr(m->error, "1048576"));
    rpc_response__free_unpacked(m, NULL);
    raw_expect_closed(fd);
    close(fd);
    expect_echo(bystander, "bystander after oversized frame");
    assert_true(get_stats(fx).err_oversized_frame >= 1);
    rpcc_close(bystander);
}

/* The client library reports the server's connection-level refusal as the
 * return code with the server's message. */
static void test_client_sees_oversized_refusal_as_erange(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    uint8_t *big = calloc(1, TEST_MAX_FRAME + 100);
    int status = 0;
    assert_non_null(big);
    /* the client accepts up to 64 MiB, the server only 1 MiB */
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, big, TEST_MAX_FRAME + 100, &status, NULL, NULL,
                               NULL),
                     SMP_ERANGE);
    assert_non_null(strstr(rpcc_last_error(c), "max_frame_bytes"));
    /* the connection is gone for good */
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, NULL, 0, &status, NULL, NULL, NULL), SMP_ERANGE);
    free(big);
    rpcc_close(c);
}

/* A body that does not decode as RpcRequest: SMP_EPROTO, then closed. */
static void test_garbage_body_answered_eproto_and_closed(void **state)
{
    fixture *fx = *state;
    rpcc_conn *bystander = open_client(fx->tcp_ep);
    int fd = raw_connect(fx);
    uint8_t garbage[11];
    RpcResponse *m;
    memset(garbage, 0xff, sizeof(garbage)); /* a varint tag that never ends */
    raw_send_header(fd, sizeof(garbage));
    raw_send(fd, garbage, sizeof(garbage));
    m = raw_read_response(fd);
    assert_true(m->request_id == 0);
    assert_int_equal(m->status, SMP_EPROTO);
    assert_non_null(strstr(m->error, "RpcRequest"));
    rpc_response__free_unpacked(m, NULL);
    raw_expect_closed(fd);
    close(fd);
    expect_echo(bystander, "bystander after garbage");
    assert_true(get_stats(fx).err_bad_request >= 1);
    rpcc_close(bystander);
}

/* A zero-length frame: SMP_EPROTO, then closed. */
static void test_zero_length_frame_answered_eproto_and_closed(void **state)
{
    fixture *fx = *state;
    rpcc_conn *bystander = open_client(fx->unix_ep);
    int fd = raw_connect(fx);
    RpcResponse *m;
    raw_send_header(fd, 0);
    m = raw_read_response(fd);
    assert_true(m->request_id == 0);
    assert_int_equal(m->status, SMP_EPROTO);
    assert_non_null(strstr(m->error, "zero-length"));
    rpc_response__free_unpacked(m, NULL);
    raw_expect_closed(fd);
    close(fd);
    expect_echo(bystander, "bystander after zero-length frame");
    assert_true(get_stats(fx).err_empty_frame >= 1);
    rpcc_close(bystander);
}

/* Requests that precede a bad frame in the same read are still answered
 * before the connection is refused. */
static void test_good_request_before_bad_frame_is_answered(void **state)
{
    fixture *fx = *state;
    int fd = raw_connect(fx);
    RpcRequest req = RPC_REQUEST__INIT;
    uint8_t buf[128];
    size_t n;
    RpcResponse *m;
    req.request_id = 7;
    req.service = SVC_ECHO;
    req.method = M_ECHO;
    req.body.data = (uint8_t *)"ok";
    req.body.len = 2;
    n = rpc_request__get_packed_size(&req);
    buf[0] = 0;
    buf[1] = 0;
    buf[2] = 0;
    buf[3] = (uint8_t)n;
    rpc_request__pack(&req, buf + 4);
    memset(buf + 4 + n, 0, 4); /* then a zero-length frame */
    raw_send(fd, buf, 4 + n + 4);
    m = raw_read_response(fd);
    assert_true(m->request_id == 7);
    assert_int_equal(m->status, 0);
    rpc_response__free_unpacked(m, NULL);
    m = raw_read_response(fd);
    assert_true(m->request_id == 0);
    assert_int_equal(m->status, SMP_EPROTO);
    rpc_response__free_unpacked(m, NULL);
    raw_expect_closed(fd);
    close(fd);
}

/* Random byte streams (random lengths, random bodies, cut anywhere) never
 * bring the server down; a client connected before keeps being served. */
static void test_random_bytes_never_crash_the_server(void **state)
{
    fixture *fx = *state;
    rpcc_conn *bystander = open_client(fx->unix_ep);
    unsigned seed = 12345;
    uint8_t buf[300];
    for (int i = 0; i < 200; i++) {
        int fd = raw_connect(fx);
        size_t n = 1 + (size_t)(rand_r(&seed) % sizeof(buf));
        for (size_t k = 0; k < n; k++)
            buf[k] = (uint8_t)rand_r(&seed);
        if (i % 2 == 0) {
            /* a plausible length so that the body is parsed */
            uint32_t len = (uint32_t)(rand_r(&seed) % 64);
            buf[0] = 0;
            buf[1] = 0;
            buf[2] = 0;
            buf[3] = (uint8_t)len;
        }
        send(fd, buf, n, MSG_NOSIGNAL);
        close(fd);
    }
    expect_echo(bystander, "bystander after random bytes");
    rpcc_close(bystander);
}

/* -- Tests: lifetimes ------------------------------------------------------ */

/* The client disconnects while its deferred call is outstanding; the later
 * reply is dropped, the call freed, and the server carries on (ASan and
 * valgrind check there is no use after free and no leak). */
static void test_disconnect_with_deferred_call_outstanding(void **state)
{
    fixture *fx = *state;
    rpc_server_stats st = get_stats(fx);
    uint64_t dropped = st.replies_dropped;
    rpcc_conn *c = open_client(fx->tcp_ep);
    uint8_t req[64];
    size_t n = defer_body(req, 300, "nobody listens");
    assert_int_equal(rpcc_send(c, SVC_DEFER, M_DEFER, req, n, NULL), SMP_OK);
    /* the deferred call is dispatched (the stats call itself is the other) */
    wait_stat(fx, STAT(calls_outstanding), 2);
    rpcc_close(c);
    wait_stat(fx, STAT(replies_dropped), dropped + 1);
    st = get_stats(fx);
    assert_true(st.calls_outstanding == 1); /* only the stats call itself */
    c = open_client(fx->tcp_ep);
    expect_echo(c, "server still fine");
    rpcc_close(c);
}

/* A client that sends requests and vanishes without reading its answers:
 * the server's writes fail (EPIPE or reset, never a fatal SIGPIPE), that
 * connection is closed and the server keeps serving. */
static void test_client_vanishing_with_replies_in_flight(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    uint8_t body[8000];
    uint32_t big = 500000;
    memset(body, 'v', sizeof(body));
    for (int i = 0; i < 20; i++) {
        assert_int_equal(rpcc_send(c, SVC_ECHO, M_ECHO, body, sizeof(body), NULL), SMP_OK);
        assert_int_equal(rpcc_send(c, SVC_ECHO, M_BIG, (const uint8_t *)&big, sizeof(big), NULL),
                         SMP_OK);
    }
    rpcc_close(c);
    c = open_client(fx->tcp_ep);
    expect_echo(c, "server survived");
    for (int i = 0; i < 500 && get_stats_on(c).connections_open != 1; i++)
        usleep(10 * 1000);
    assert_true(get_stats_on(c).connections_open == 1); /* the vanished one is gone */
    rpcc_close(c);
}

/* The server is closed while a deferred call is outstanding: the loop ends
 * once the timer has answered (reply dropped) and everything is freed. */
static void test_server_close_with_deferred_call_outstanding(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->unix_ep);
    uint8_t req[64];
    size_t n = defer_body(req, 300, "too late");
    uint64_t id;
    uint8_t *body = NULL;
    size_t len = 0;
    assert_int_equal(rpcc_send(c, SVC_DEFER, M_DEFER, req, n, &id), SMP_OK);
    wait_stat(fx, STAT(calls_outstanding), 2); /* the deferred call is dispatched */
    fixture_stop(fx);
    assert_int_equal(rpcc_recv(c, id, NULL, NULL, &body, &len, NULL), SMP_EIO);
    rpcc_close(c);
    /* teardown joins the loop thread: it ends after the timer fires */
}

/* -- Tests: limits (setup_limited) ----------------------------------------- */

/* Beyond max_connections a connection is refused with SMP_EAGAIN; the ones
 * within the limit keep working and a slot frees up when one closes. */
static void test_max_connections_refuses_extra(void **state)
{
    fixture *fx = *state;
    rpcc_conn *a = open_client(fx->tcp_ep);
    rpcc_conn *b = open_client(fx->unix_ep);
    rpcc_conn *extra;
    int status = 0;
    expect_echo(a, "a");
    expect_echo(b, "b");
    extra = open_client(fx->tcp_ep);
    assert_int_equal(rpcc_call(extra, SVC_ECHO, M_ECHO, NULL, 0, &status, NULL, NULL, NULL),
                     SMP_EAGAIN);
    assert_non_null(strstr(rpcc_last_error(extra), "max_connections 2"));
    rpcc_close(extra);
    expect_echo(a, "a again");
    rpcc_close(b);
    /* b's slot frees once the server has seen it go; retry until then */
    for (int i = 0; i < 200; i++) {
        extra = open_client(fx->tcp_ep);
        if (rpcc_call(extra, SVC_ECHO, M_ECHO, NULL, 0, &status, NULL, NULL, NULL) == SMP_OK)
            break;
        rpcc_close(extra);
        extra = NULL;
        usleep(10 * 1000);
    }
    assert_non_null(extra);
    rpcc_close(extra);
    rpcc_close(a);
}

/* More calls in flight than max_inflight: reading pauses until replies go
 * out, and every request is still answered. */
static void test_inflight_bound_pauses_reading(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    uint8_t req[64];
    size_t n = defer_body(req, 20, "slowly");
    int status;
    for (int i = 0; i < 20; i++)
        assert_int_equal(rpcc_send(c, SVC_DEFER, M_DEFER, req, n, NULL), SMP_OK);
    for (int i = 0; i < 20; i++) {
        status = 1;
        assert_int_equal(rpcc_recv(c, 0, NULL, &status, NULL, NULL, NULL), SMP_OK);
        assert_int_equal(status, 0);
    }
    assert_true(get_stats_on(c).backpressure_pauses >= 1);
    rpcc_close(c);
}

/* Unsent output over max_output_bytes pauses reading; all answers arrive.
 * (Replies this large always go through the write queue; small ones are
 * written straight to the socket when nothing is queued before them.) */
static void test_output_bound_pauses_reading(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->unix_ep);
    uint8_t body[6000];
    uint64_t before;
    int status;
    memset(body, 'o', sizeof(body));
    before = get_stats_on(c).backpressure_pauses;
    for (int i = 0; i < 30; i++)
        assert_int_equal(rpcc_send(c, SVC_ECHO, M_ECHO, body, sizeof(body), NULL), SMP_OK);
    for (int i = 0; i < 30; i++) {
        uint8_t *got = NULL;
        size_t len = 0;
        status = 1;
        assert_int_equal(rpcc_recv(c, 0, NULL, &status, &got, &len, NULL), SMP_OK);
        assert_int_equal(status, 0);
        assert_int_equal(len, sizeof(body));
        free(got);
    }
    assert_true(get_stats_on(c).backpressure_pauses > before);
    rpcc_close(c);
}

/* Small replies written straight to the socket never cut into a large one
 * still queued: pipelined echoes of mixed sizes all come back whole. */
static void test_mixed_reply_sizes_stay_framed(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->unix_ep);
    static uint8_t big[6000];
    uint8_t small[16];
    uint64_t ids[60];
    int status;
    memset(big, 'B', sizeof(big));
    memset(small, 's', sizeof(small));
    for (int i = 0; i < 60; i++) {
        const uint8_t *b = i % 3 == 0 ? big : small;
        size_t n = i % 3 == 0 ? sizeof(big) : sizeof(small);
        assert_int_equal(rpcc_send(c, SVC_ECHO, M_ECHO, b, n, &ids[i]), SMP_OK);
    }
    for (int i = 0; i < 60; i++) {
        uint8_t *got = NULL;
        size_t len = 0;
        status = 1;
        assert_int_equal(rpcc_recv(c, ids[i], NULL, &status, &got, &len, NULL), SMP_OK);
        assert_int_equal(status, 0);
        assert_int_equal(len, i % 3 == 0 ? sizeof(big) : sizeof(small));
        assert_int_equal(got[0], i % 3 == 0 ? 'B' : 's');
        assert_int_equal(got[len - 1], i % 3 == 0 ? 'B' : 's');
        free(got);
    }
    rpcc_close(c);
}

/* -- Tests: registration --------------------------------------------------- */

/* -- Tests: limits (rpc_limits.h) ----------------------------------------- */

/* A request larger than the connection's in-flight cap is refused SMP_ERANGE
 * under its own request_id (rpcc_call matches it) without being buffered,
 * and the connection goes on. */
static void test_inflight_cap_refuses_larger_request_keeps_connection(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    static uint8_t big[9000];
    int status = 0;
    char *msg = NULL;
    memset(big, 'b', sizeof(big));
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, big, sizeof(big), &status, NULL, NULL, &msg),
                     SMP_OK);
    assert_int_equal(status, SMP_ERANGE);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "is larger than the 4096 request bytes this connection"));
    free(msg);
    expect_echo(c, "still fine");
    rpcc_close(c);
}

/* The bytes of an unanswered call count: a request that would take the
 * connection over the cap is refused SMP_EAGAIN while the held call is
 * unanswered, and accepted once it is answered. */
static void test_inflight_cap_counts_unanswered_calls(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->unix_ep);
    static uint8_t part[2500];
    uint64_t hold_id = 0, got = 0;
    int status = 0;
    char *msg = NULL;
    uint8_t *body = NULL;
    size_t len = 0;
    memset(part, 'p', sizeof(part));
    assert_int_equal(rpcc_send(c, SVC_ECHO, M_HOLD, part, sizeof(part), &hold_id), SMP_OK);
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, part, sizeof(part), &status, NULL, NULL, &msg),
                     SMP_OK);
    assert_int_equal(status, SMP_EAGAIN);
    assert_non_null(strstr(msg, "retry once they are answered"));
    free(msg);
    /* small requests still fit beside the held one */
    expect_echo(c, "small");
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_RELEASE, NULL, 0, &status, NULL, NULL, NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(rpcc_recv(c, hold_id, &got, &status, &body, &len, NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(len, 8);
    free(body);
    status = 1;
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, part, sizeof(part), &status, NULL, NULL, NULL),
                     SMP_OK);
    assert_int_equal(status, 0);
    rpcc_close(c);
}

/* A tenant's connections share its in-flight bytes: while one holds a call,
 * the other's request that would take the tenant over the cap is refused
 * SMP_EAGAIN; once the call is answered it is accepted. Before the login a
 * connection has no tenant and is not held to the tenant's cap. */
static void test_tenant_inflight_shared_by_its_connections(void **state)
{
    fixture *fx = *state;
    rpcc_conn *a = open_client(fx->tcp_ep), *b = open_client(fx->unix_ep);
    static uint8_t part[2500], big[6000];
    uint64_t hold_id = 0;
    int status = 1;
    char *msg = NULL;
    memset(part, 'p', sizeof(part));
    memset(big, 'g', sizeof(big));
    /* no tenant yet: the tenant's cap does not apply */
    assert_int_equal(rpcc_call(b, SVC_ECHO, M_ECHO, big, sizeof(big), &status, NULL, NULL, NULL),
                     SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(rpcc_call(a, SVC_ECHO, M_LOGIN, NULL, 0, &status, NULL, NULL, NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(rpcc_call(b, SVC_ECHO, M_LOGIN, NULL, 0, &status, NULL, NULL, NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(rpcc_send(a, SVC_ECHO, M_HOLD, part, sizeof(part), &hold_id), SMP_OK);
    /* wait until the server holds a's call (its bytes are charged then) */
    for (int i = 0; i < 500; i++) {
        assert_int_equal(rpcc_call(b, SVC_ECHO, M_ECHO, part, sizeof(part), &status, NULL, NULL, &msg),
                         SMP_OK);
        if (status != 0)
            break;
        usleep(10 * 1000);
    }
    assert_int_equal(status, SMP_EAGAIN);
    assert_non_null(strstr(msg, "this tenant's connections"));
    free(msg);
    assert_int_equal(rpcc_call(b, SVC_ECHO, M_RELEASE, NULL, 0, &status, NULL, NULL, NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(rpcc_recv(a, hold_id, NULL, &status, NULL, NULL, NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(rpcc_call(b, SVC_ECHO, M_ECHO, part, sizeof(part), &status, NULL, NULL, NULL),
                     SMP_OK);
    assert_int_equal(status, 0);
    rpcc_close(a);
    rpcc_close(b);
}

/* The bucket runs dry after its burst: the next request is refused
 * SMP_EAGAIN and the connection stays usable; once the bucket refills
 * (polled, no time threshold) requests succeed again. */
static void test_rate_limit_refuses_then_recovers(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    int status = 0, sent = 0;
    char *msg = NULL;
    while (status == 0 && sent < 100) {
        assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, (const uint8_t *)"x", 1, &status, NULL, NULL,
                                   &msg),
                         SMP_OK);
        sent++;
    }
    assert_int_equal(status, SMP_EAGAIN);
    assert_true(sent >= 3); /* the burst went through */
    assert_non_null(strstr(msg, "rate limit: this connection may send 1 requests a second (burst 3"));
    free(msg);
    msg = NULL;
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, (const uint8_t *)"y", 1, &status, NULL, NULL,
                                   NULL),
                         SMP_OK);
        if (status == 0)
            break;
        assert_int_equal(status, SMP_EAGAIN);
        usleep(20 * 1000);
    }
    assert_int_equal(status, 0);
    rpcc_close(c);
}

static void test_add_service_validates_methods(void **state)
{
    uv_loop_t loop;
    rpc_server *s = NULL;
    smp_rpc_method bad[2] = {
        {sizeof(smp_rpc_method), 1, "a", echo_handler, SMP_ROLE_ADMIN},
        {sizeof(smp_rpc_method), 1, "dup", echo_handler, SMP_ROLE_ADMIN},
    };
    smp_rpc_method nohandler = {sizeof(smp_rpc_method), 1, "x", NULL, SMP_ROLE_ADMIN};
    smp_rpc_method tiny = {4, 1, "x", echo_handler, SMP_ROLE_ADMIN};
    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(rpc_server_create(&loop, NULL, &s, NULL, 0), SMP_OK);
    assert_int_equal(rpc_server_add_service(s, 20, "dup", bad, 2, NULL), SMP_EINVAL);
    assert_int_equal(rpc_server_add_service(s, 20, "nh", &nohandler, 1, NULL), SMP_EINVAL);
    assert_int_equal(rpc_server_add_service(s, 20, "tiny", &tiny, 1, NULL), SMP_EINVAL);
    assert_int_equal(rpc_server_add_service(s, 20, "ok", bad, 1, NULL), SMP_OK);
    assert_int_equal(rpc_server_add_service(s, 20, "again", bad, 1, NULL), SMP_EEXIST);
    assert_int_equal(rpc_server_remove_service(s, 20), SMP_OK);
    assert_int_equal(rpc_server_remove_service(s, 20), SMP_ENOTFOUND);
    assert_int_equal(rpc_server_add_service(s, 20, "back", bad, 1, NULL), SMP_OK);
    assert_int_equal(rpc_server_start(s, NULL, 0), SMP_OK); /* no endpoints: nothing listens */
    assert_int_equal(rpc_server_tcp_port(s), -1);
    rpc_server_close(s);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* A listen address that cannot be parsed, or a max_frame_bytes above the
 * limit, is refused with a message. */
static void test_bad_listen_address_refused(void **state)
{
    uv_loop_t loop;
    rpc_server *s = NULL;
    rpc_server_options o;
    char err[256] = "";
    (void)state;
    memset(&o, 0, sizeof(o));
    o.listen_tcp = "not-an-address";
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(rpc_server_create(&loop, &o, &s, err, sizeof(err)), SMP_OK);
    assert_int_equal(rpc_server_start(s, err, sizeof(err)), SMP_EINVAL);
    assert_non_null(strstr(err, "not-an-address"));
    rpc_server_close(s);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    o.listen_tcp = NULL;
    o.max_frame_bytes = RPC_MAX_FRAME_LIMIT + 1;
    s = NULL;
    assert_int_equal(rpc_server_create(&loop, &o, &s, err, sizeof(err)), SMP_ERANGE);
    assert_null(s);
    assert_non_null(strstr(err, "max_frame_bytes"));
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_over_tcp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_trip_over_unix_socket, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_body_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_100_requests_answered_by_id, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deferred_reply_arrives_after_later_immediate_one, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_recv_by_id_keeps_other_responses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_timeout_then_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_service_answered_and_connection_kept, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unknown_method_answered_and_connection_kept, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_handler_error_status_propagated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reply_over_max_frame_becomes_erange, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_refuses_oversized_request, setup, teardown),
        cmocka_unit_test(test_client_connect_errors),
        cmocka_unit_test(test_unix_connect_to_a_full_backlog_ends_at_its_timeout),
        cmocka_unit_test_setup_teardown(test_truncated_frame_closes_only_that_connection, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_oversized_frame_answered_and_closed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_sees_oversized_refusal_as_erange, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_garbage_body_answered_eproto_and_closed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_zero_length_frame_answered_eproto_and_closed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_good_request_before_bad_frame_is_answered, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_random_bytes_never_crash_the_server, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disconnect_with_deferred_call_outstanding, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_client_vanishing_with_replies_in_flight, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_server_close_with_deferred_call_outstanding, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_max_connections_refuses_extra, setup_limited, teardown),
        cmocka_unit_test_setup_teardown(test_inflight_bound_pauses_reading, setup_limited, teardown),
        cmocka_unit_test_setup_teardown(test_mixed_reply_sizes_stay_framed, setup_limited, teardown),
        cmocka_unit_test_setup_teardown(test_output_bound_pauses_reading, setup_limited, teardown),
        cmocka_unit_test_setup_teardown(test_inflight_cap_refuses_larger_request_keeps_connection,
                                        setup_inflight, teardown),
        cmocka_unit_test_setup_teardown(test_inflight_cap_counts_unanswered_calls, setup_inflight,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_rate_limit_refuses_then_recovers, setup_rate, teardown),
        cmocka_unit_test_setup_teardown(test_tenant_inflight_shared_by_its_connections,
                                        setup_tenant_inflight, teardown),
        cmocka_unit_test(test_add_service_validates_methods),
        cmocka_unit_test(test_bad_listen_address_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
