/* test_rpc_batch.c -- the RPC server answers in batches and takes turns.
 *
 * Replies made while the loop reads are gathered per connection and written
 * once per loop iteration (rpc_output.c), and a connection has at most
 * RPC_BATCH_REQUESTS frames dispatched per read or turn (rpc_conn_io.c).
 * These tests pin what must survive that: replies in request order for a
 * pipelined burst (plain and TLS), every one of many connections answered,
 * a reply larger than the socket buffers delivered whole behind and before
 * small ones, a client that goes away with replies pending, and a client
 * pipelining thousands of requests not starving single calls on other
 * connections.
 *
 * A real rpc_server runs on a libuv loop in its own thread, on 127.0.0.1
 * (ephemeral port; TLS with a self-signed certificate the openssl CLI makes
 * in the test's directory for the TLS fixture) and a Unix socket under
 * /tmp; the test thread talks to it with rpcc_* over real sockets. The
 * "stall" method holds the loop thread until the test releases it, so that
 * several connections have requests waiting at once: what is then asserted
 * is the order things were served in, never a time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "rpc.h"
#include "rpc_tls.h"
#include "rpc_client.h"
#include "rpc_envelope.h"

#define SVC 200
#define M_ECHO 1   /* replies its body */
#define M_TICK 2   /* counts itself (a pipelined request), replies its body */
#define M_COUNT 3  /* replies the uint32 number of M_TICKs served so far */
#define M_STALL 4  /* holds the loop thread until the test releases it */
#define M_BIG 5    /* body: uint32 n; replies n bytes of 'B' */
#define M_STATS 6  /* replies the server's rpc_server_stats */

#define MAX_FRAME (2u << 20)

typedef struct fixture {
    uv_loop_t loop;
    uv_async_t stop;
    uv_thread_t thread;
    rpc_server *srv;
    char tcp_ep[64];
    char unix_path[108];
    char unix_ep[128];
    uint32_t ticks;          /* loop thread */
    atomic_int stalled;      /* the stall handler is holding the loop */
    atomic_int release;      /* the test lets it go */
} fixture;

static char g_dir[256], g_cert[320], g_key[320];

/* -- Service (loop thread) ------------------------------------------------- */

static int handle(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    fixture *fx = ctx;
    switch (call->method) {
    case M_TICK:
        fx->ticks++;
        return rpc_reply(call, 0, body, len);
    case M_COUNT:
        return rpc_reply(call, 0, (const uint8_t *)&fx->ticks, sizeof(fx->ticks));
    case M_STALL:
        atomic_store(&fx->stalled, 1);
        while (!atomic_load(&fx->release))
            usleep(1000);
        return rpc_reply(call, 0, NULL, 0);
    case M_BIG: {
        uint32_t n;
        uint8_t *buf;
        int rc;
        if (len != sizeof(n)) return SMP_EINVAL;
        memcpy(&n, body, sizeof(n));
        if (n > MAX_FRAME - 64 || (buf = malloc(n ? n : 1)) == NULL) return SMP_EINVAL;
        memset(buf, 'B', n);
        rc = rpc_reply(call, 0, buf, n);
        free(buf);
        return rc;
    }
    case M_STATS: {
        rpc_server_stats st;
        rpc_server_get_stats(fx->srv, &st);
        return rpc_reply(call, 0, (const uint8_t *)&st, sizeof(st));
    }
    default:
        return rpc_reply(call, 0, body, len);
    }
}

static const smp_rpc_method methods[] = {
    {sizeof(smp_rpc_method), M_ECHO, "echo", handle, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), M_TICK, "tick", handle, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), M_COUNT, "count", handle, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), M_STALL, "stall", handle, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), M_BIG, "big", handle, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), M_STATS, "stats", handle, SMP_ROLE_ADMIN},
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

static int fixture_start(void **state, int tls)
{
    fixture *fx = calloc(1, sizeof(*fx));
    rpc_server_options opt;
    SSL_CTX *ctx = NULL;
    char err[256];

    assert_non_null(fx);
    memset(&opt, 0, sizeof(opt));
    snprintf(fx->unix_path, sizeof(fx->unix_path), "/tmp/wm-test-rpcb-%d.sock", (int)getpid());
    snprintf(fx->unix_ep, sizeof(fx->unix_ep), "unix:%s", fx->unix_path);
    opt.listen_tcp = "127.0.0.1:0";
    opt.listen_unix = fx->unix_path;
    opt.max_frame_bytes = MAX_FRAME;
    if (tls) {
        rpc_tls_config tc = {.cert = g_cert, .key = g_key};
        if (rpc_tls_server_ctx(&tc, &ctx, err, sizeof(err)) != SMP_OK)
            fail_msg("rpc_tls_server_ctx: %s", err);
        opt.tls = ctx;
    }
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    assert_int_equal(rpc_server_create(&fx->loop, &opt, &fx->srv, err, sizeof(err)), SMP_OK);
    SSL_CTX_free(ctx); /* the server holds its own reference */
    assert_int_equal(rpc_server_add_service(fx->srv, SVC, "batch", methods,
                                            sizeof(methods) / sizeof(methods[0]), fx),
                     SMP_OK);
    if (rpc_server_start(fx->srv, err, sizeof(err)) != SMP_OK)
        fail_msg("rpc_server_start: %s", err);
    snprintf(fx->tcp_ep, sizeof(fx->tcp_ep), "127.0.0.1:%d", rpc_server_tcp_port(fx->srv));
    assert_int_equal(uv_async_init(&fx->loop, &fx->stop, on_stop), 0);
    fx->stop.data = fx;
    assert_int_equal(uv_thread_create(&fx->thread, loop_thread, fx), 0);
    *state = fx;
    return 0;
}

static int setup(void **state)
{
    return fixture_start(state, 0);
}

static int setup_tls(void **state)
{
    return fixture_start(state, 1);
}

static int teardown(void **state)
{
    fixture *fx = *state;
    atomic_store(&fx->release, 1); /* a failed test may have left the loop held */
    uv_async_send(&fx->stop);
    uv_thread_join(&fx->thread);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
    free(fx);
    return 0;
}

/* -- Client helpers -------------------------------------------------------- */

static rpcc_conn *open_client(const char *ep, int tls)
{
    rpcc_options o = {.timeout_ms = 20000, .max_frame_bytes = MAX_FRAME};
    rpcc_conn *c = NULL;
    char err[256];
    o.tls_ca = tls ? g_cert : NULL;
    o.token = "";
    if (rpcc_connect(ep, &o, &c, err, sizeof(err)) != SMP_OK)
        fail_msg("connect %s: %s", ep, err);
    return c;
}

/* n frames of method m, request_id first_id.., each body the 4 bytes of its
 * id, in one buffer (sent with one write; caller frees). */
static uint8_t *burst(uint32_t m, uint64_t first_id, size_t n, size_t *out_len)
{
    size_t cap = n * 32, len = 0;
    uint8_t *buf = malloc(cap);
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++) {
        uint64_t id = first_id + i;
        uint32_t body = (uint32_t)id;
        size_t size = rpc_env_request_size(id, SVC, m, sizeof(body));
        assert_true(len + 4 + size <= cap);
        buf[len] = (uint8_t)(size >> 24);
        buf[len + 1] = (uint8_t)(size >> 16);
        buf[len + 2] = (uint8_t)(size >> 8);
        buf[len + 3] = (uint8_t)size;
        rpc_env_encode_request(buf + len + 4, id, SVC, m, (const uint8_t *)&body, sizeof(body));
        len += 4 + size;
    }
    *out_len = len;
    return buf;
}

/* Read n replies of a burst from first_id: in request order, each carrying
 * its own id as body. */
static void expect_burst_in_order(rpcc_conn *c, uint64_t first_id, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t got = 0;
        uint8_t *body = NULL;
        size_t len = 0;
        int status = 1;
        uint32_t v;
        if (rpcc_recv(c, 0, &got, &status, &body, &len, NULL) != SMP_OK)
            fail_msg("reply %zu of the burst: %s", i, rpcc_last_error(c));
        if (got != first_id + i)
            fail_msg("reply %zu carries request_id %llu, wanted %llu (out of order)", i,
                     (unsigned long long)got, (unsigned long long)(first_id + i));
        assert_int_equal(status, 0);
        assert_int_equal(len, sizeof(v));
        memcpy(&v, body, sizeof(v));
        assert_int_equal(v, (uint32_t)got);
        free(body);
    }
}

static rpc_server_stats get_stats(const fixture *fx)
{
    rpcc_conn *c = open_client(fx->unix_ep, 0);
    rpc_server_stats st;
    uint8_t *body = NULL;
    size_t len = 0;
    int status = 1;
    assert_int_equal(rpcc_call(c, SVC, M_STATS, NULL, 0, &status, &body, &len, NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(len, sizeof(st));
    memcpy(&st, body, sizeof(st));
    free(body);
    rpcc_close(c);
    return st;
}

/* Hold the loop thread: c's stall call is dispatched and waits. */
static uint64_t stall_loop(fixture *fx, rpcc_conn *c)
{
    uint64_t id = 0;
    atomic_store(&fx->release, 0);
    atomic_store(&fx->stalled, 0);
    assert_int_equal(rpcc_send(c, SVC, M_STALL, NULL, 0, &id), SMP_OK);
    while (!atomic_load(&fx->stalled))
        usleep(1000);
    return id;
}

/* -- Tests ----------------------------------------------------------------- */

/* 5,000 requests written at once on one connection (many reads, many turns
 * of RPC_BATCH_REQUESTS) are answered in request order, each its own. */
static void test_pipelined_burst_answered_in_order(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->unix_ep, 0);
    size_t len;
    uint8_t *b = burst(M_ECHO, 1, 5000, &len);
    assert_int_equal(rpcc_send_raw(c, b, len), SMP_OK);
    free(b);
    expect_burst_in_order(c, 1, 5000);
    rpcc_close(c);
}

/* 50 connections with a request each waiting at once (the loop held while
 * they arrive): every one is answered with its own reply. */
static void test_many_connections_each_answered(void **state)
{
    fixture *fx = *state;
    rpcc_conn *hold = open_client(fx->unix_ep, 0);
    rpcc_conn *c[50];
    uint64_t ids[50];
    uint64_t stall_id = stall_loop(fx, hold);
    for (int i = 0; i < 50; i++) {
        uint32_t v = 1000u + (uint32_t)i;
        c[i] = open_client(i % 2 ? fx->unix_ep : fx->tcp_ep, 0);
        assert_int_equal(rpcc_send(c[i], SVC, M_ECHO, (const uint8_t *)&v, sizeof(v), &ids[i]),
                         SMP_OK);
    }
    atomic_store(&fx->release, 1);
    assert_int_equal(rpcc_recv(hold, stall_id, NULL, NULL, NULL, NULL, NULL), SMP_OK);
    for (int i = 0; i < 50; i++) {
        uint8_t *body = NULL;
        size_t len = 0;
        int status = 1;
        uint32_t v;
        assert_int_equal(rpcc_recv(c[i], ids[i], NULL, &status, &body, &len, NULL), SMP_OK);
        assert_int_equal(status, 0);
        assert_int_equal(len, sizeof(v));
        memcpy(&v, body, sizeof(v));
        assert_int_equal(v, 1000u + (uint32_t)i);
        free(body);
        rpcc_close(c[i]);
    }
    rpcc_close(hold);
}

/* A 1.5 MiB reply -- more than the socket takes at once -- between small
 * ones on the same connection arrives whole and in its place. */
static void test_reply_larger_than_socket_buffer_delivered_whole(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep, 0);
    uint32_t n = 3u << 19;
    uint64_t id_small1, id_big, id_small2;
    uint64_t got = 0;
    uint8_t *body = NULL;
    size_t len = 0;
    int status = 1;
    uint32_t v = 7;
    assert_int_equal(rpcc_send(c, SVC, M_ECHO, (const uint8_t *)&v, sizeof(v), &id_small1), SMP_OK);
    assert_int_equal(rpcc_send(c, SVC, M_BIG, (const uint8_t *)&n, sizeof(n), &id_big), SMP_OK);
    assert_int_equal(rpcc_send(c, SVC, M_ECHO, (const uint8_t *)&v, sizeof(v), &id_small2), SMP_OK);
    assert_int_equal(rpcc_recv(c, 0, &got, &status, &body, &len, NULL), SMP_OK);
    assert_true(got == id_small1 && len == sizeof(v));
    free(body);
    assert_int_equal(rpcc_recv(c, 0, &got, &status, &body, &len, NULL), SMP_OK);
    assert_true(got == id_big);
    assert_int_equal(status, 0);
    assert_int_equal(len, n);
    assert_true(body[0] == 'B' && body[n / 2] == 'B' && body[n - 1] == 'B');
    free(body);
    assert_int_equal(rpcc_recv(c, 0, &got, &status, &body, &len, NULL), SMP_OK);
    assert_true(got == id_small2 && len == sizeof(v));
    free(body);
    rpcc_close(c);
}

/* A client that asks for 200 replies of 64 KiB and closes without reading
 * them leaves the master serving: its pending and queued output is dropped
 * with the connection (ASan and valgrind check nothing is touched after),
 * and the next connection is answered. */
static void test_client_closing_with_replies_pending(void **state)
{
    fixture *fx = *state;
    for (int round = 0; round < 3; round++) {
        rpcc_conn *c = open_client(round == 1 ? fx->tcp_ep : fx->unix_ep, 0);
        uint32_t n = 64u << 10;
        for (int i = 0; i < 200; i++)
            assert_int_equal(rpcc_send(c, SVC, M_BIG, (const uint8_t *)&n, sizeof(n), NULL),
                             SMP_OK);
        rpcc_close(c);
    }
    for (int i = 0; i < 100; i++) { /* until the server saw the three go */
        if (get_stats(fx).connections_open == 1) break;
        usleep(10 * 1000);
    }
    assert_int_equal(get_stats(fx).connections_open, 1);
    rpcc_conn *c = open_client(fx->unix_ep, 0);
    size_t len;
    uint8_t *b = burst(M_ECHO, 1, 100, &len);
    assert_int_equal(rpcc_send_raw(c, b, len), SMP_OK);
    free(b);
    expect_burst_in_order(c, 1, 100);
    rpcc_close(c);
}

/* One connection pipelines 4,000 requests while eight others each send one
 * call; all of it waits at once (the loop held). Every single call is
 * answered while the pipeline is still in flight -- the count of pipelined
 * requests served when it ran is below 4,000 -- and the pipeline's replies
 * still come back complete and in order. Without turns the first read of
 * the pipelining connection dispatched everything it had sent. */
static void test_pipelining_client_does_not_starve_single_calls(void **state)
{
    fixture *fx = *state;
    const size_t n = 4000;
    rpcc_conn *hold = open_client(fx->unix_ep, 0);
    rpcc_conn *piper = open_client(fx->unix_ep, 0);
    rpcc_conn *single[8];
    uint64_t ids[8];
    size_t len;
    uint8_t *b = burst(M_TICK, 1, n, &len);
    uint64_t stall_id;

    for (int i = 0; i < 8; i++)
        single[i] = open_client(fx->unix_ep, 0);
    stall_id = stall_loop(fx, hold);
    assert_int_equal(rpcc_send_raw(piper, b, len), SMP_OK); /* fits the socket's buffer */
    free(b);
    for (int i = 0; i < 8; i++)
        assert_int_equal(rpcc_send(single[i], SVC, M_COUNT, NULL, 0, &ids[i]), SMP_OK);
    atomic_store(&fx->release, 1);
    assert_int_equal(rpcc_recv(hold, stall_id, NULL, NULL, NULL, NULL, NULL), SMP_OK);
    for (int i = 0; i < 8; i++) {
        uint8_t *body = NULL;
        size_t blen = 0;
        int status = 1;
        uint32_t served;
        assert_int_equal(rpcc_recv(single[i], ids[i], NULL, &status, &body, &blen, NULL), SMP_OK);
        assert_int_equal(status, 0);
        assert_int_equal(blen, sizeof(served));
        memcpy(&served, body, sizeof(served));
        free(body);
        if (served >= n)
            fail_msg("single call %d ran after all %zu pipelined requests", i, n);
        rpcc_close(single[i]);
    }
    expect_burst_in_order(piper, 1, n);
    rpcc_close(piper);
    rpcc_close(hold);
}

/* The same pipelined burst over TLS: records decrypted across many turns,
 * replies encrypted a batch at a time, all in order. */
static void test_tls_pipelined_burst_answered_in_order(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep, 1);
    size_t len;
    uint8_t *b = burst(M_ECHO, 1, 3000, &len);
    assert_int_equal(rpcc_send_raw(c, b, len), SMP_OK);
    free(b);
    expect_burst_in_order(c, 1, 3000);
    assert_true(get_stats(fx).tls_handshakes >= 1);
    rpcc_close(c);
}

int main(void)
{
    char cmd[1400];
    int rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pipelined_burst_answered_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_connections_each_answered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reply_larger_than_socket_buffer_delivered_whole,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_closing_with_replies_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipelining_client_does_not_starve_single_calls, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_tls_pipelined_burst_answered_in_order, setup_tls,
                                        teardown),
    };
    snprintf(g_dir, sizeof(g_dir), "/tmp/wm-test-rpcb-%d", (int)getpid());
    snprintf(g_cert, sizeof(g_cert), "%s/server.pem", g_dir);
    snprintf(g_key, sizeof(g_key), "%s/server.key", g_dir);
    snprintf(cmd, sizeof(cmd),
             "mkdir -p '%s' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
             "-nodes -days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 "
             "-keyout '%s' -out '%s' >'%s/openssl.log' 2>&1", g_dir, g_key, g_cert, g_dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "test_rpc_batch: openssl could not make a certificate (%s/openssl.log)\n",
                g_dir);
        return 1;
    }
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "test_rpc_batch: could not remove %s\n", g_dir);
    return rc;
}
