/* test_node_refusals.c -- a node the master will not take says why, once.
 *
 * A real store_master with authentication on (auth_fixture.c) and real
 * store_node processes that cannot register:
 *  - a token the master does not know (refused by auth.HELLO while the
 *    node connects: it used to retry in silence forever);
 *  - a writer's token (the registration refused SMP_EFORBIDDEN: it used to
 *    be logged on every retry, five lines a second); as the embedded node's
 *    auth.node_token_file it stops the master's start, naming the key;
 *  - a TLS port reached without a CA, with a token (the master's plaintext
 *    refusal answers the HELLO) and without one (it answers the
 *    registration).
 * Each time the node's log names the cause as weightctl would -- "auth.HELLO: the token is not known to this
 * master", "needs role admin", "speaks TLS" -- exactly once, while the
 * master counts the node's attempts go on (store_rpc_auth_hellos_total,
 * store_rpc_auth_refusals_total, the connections a relay in front of the
 * TLS port saw): the cause is logged when it first occurs, not per retry.
 * No node registers. Waits are bounded on the monotonic clock, never timed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "auth_fixture.h"
#include "fault_proxy.h"

#define WAIT_MS 30000
#define ATTEMPTS 4 /* retries seen before the log is counted */

static hx_node g_node;        /* killed by teardown, also after a failed assertion */
static fault_proxy *g_proxy;

static int setup(void **state)
{
    memset(&g_node, 0, sizeof(g_node));
    g_proxy = NULL;
    return wr_setup(state);
}

static int teardown(void **state)
{
    hx_node_kill(&g_node);
    fault_proxy_stop(g_proxy);
    g_proxy = NULL;
    unsetenv("WM_TLS_CA");
    unsetenv("WM_TLS_CERT");
    unsetenv("WM_TLS_KEY");
    return wr_teardown(state);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Wait until the master's metric series reaches at least want. */
static int wait_metric_at_least(const hx_master *m, const char *series, double want)
{
    for (long long end = hx_now_ms() + WAIT_MS; hx_now_ms() < end; sleep_ms(50))
        if (hx_metric(m, series) >= want) return 1;
    fprintf(stderr, "%s stayed at %g, below %g\n", series, hx_metric(m, series), want);
    return 0;
}

/* A file in f's directory holding who's token; its path into path. */
static void token_file(wr_fixture *f, af_who who, char *path, size_t cap)
{
    snprintf(path, cap, "%s/token-%d", f->m.dir, (int)who);
    FILE *tf = fopen(path, "w");
    assert_non_null(tf);
    fprintf(tf, "%s\n", af_token(who));
    assert_int_equal(fclose(tf), 0);
}

/* The node's log says needle exactly once (printed otherwise). */
static void says_once(const char *log, const char *needle)
{
    int k = hx_file_count(log, needle);
    if (k != 1) {
        char text[8192];
        hx_read_text(log, text, sizeof(text));
        fail_msg("\"%s\" is in %s %d times, not once:\n%s", needle, log, k, text);
    }
}

/* An unknown token is refused at connect (auth.HELLO): the node says so
 * once while it keeps trying. */
static void test_unknown_token_named_once(void **state)
{
    wr_fixture *f = *state;
    char tok[400];
    af_start_with(f, "node-refusals-hello", "node:\n  embedded: false\n");
    token_file(f, AF_WRONG, tok, sizeof(tok));
    const char *args[] = {"--token-file", tok, NULL};
    assert_int_equal(hx_node_start_args(&f->m, &g_node, "n-wrong", 4u << 20, args), 0);
    assert_true(wait_metric_at_least(&f->m, "store_rpc_auth_hellos_total{result=\"refused\"}",
                                     ATTEMPTS));
    says_once(g_node.log, "auth.HELLO: the token is not known to this master");
    assert_true(hx_file_contains(g_node.log, "cannot connect to the master"));
    assert_false(hx_file_contains(g_node.log, "registered with"));
    assert_int_equal(hx_wait_nodes(&f->m, 0, 1000), 0);
}

/* A writer's token passes auth.HELLO; the registration is refused for its
 * role, and the node says so once. */
static void test_writer_token_refusal_named_once(void **state)
{
    wr_fixture *f = *state;
    char tok[400];
    af_start_with(f, "node-refusals-role", "node:\n  embedded: false\n");
    token_file(f, AF_A_WRITER, tok, sizeof(tok));
    const char *args[] = {"--token-file", tok, NULL};
    assert_int_equal(hx_node_start_args(&f->m, &g_node, "n-writer", 4u << 20, args), 0);
    assert_true(wait_metric_at_least(&f->m, "store_rpc_auth_refusals_total{reason=\"forbidden\"}",
                                     ATTEMPTS));
    says_once(g_node.log, "register refused by");
    assert_true(hx_file_contains(g_node.log, "needs role admin"));
    assert_int_equal(hx_wait_nodes(&f->m, 0, 1000), 0);
}

/* The embedded node with a writer's token (auth.node_token_file) is not
 * started at all: the master refuses the config, naming the key, before it
 * creates anything (test_check.sh checks --check says the same). */
static void test_embedded_writer_token_refused_at_start(void **state)
{
    wr_fixture *f = *state;
    char path[400];
    af_start(f, "node-refusals-embedded");
    wr_disconnect(f);
    assert_int_equal(hx_stop(&f->m), 0);
    snprintf(path, sizeof(path), "%s/node.token", f->m.dir); /* af_start's node token */
    FILE *tf = fopen(path, "w");
    assert_non_null(tf);
    fprintf(tf, "%s\n", af_token(AF_A_WRITER));
    assert_int_equal(fclose(tf), 0);
    assert_int_not_equal(hx_start(&f->m, 15000), 0);
    assert_true(hx_log_contains(&f->m, "auth.node_token_file: the token in "));
    assert_true(hx_log_contains(&f->m, "(tenant a, role writer), so the embedded node's "
                                       "registration would be refused (nodes.register needs role "
                                       "admin)"));
}

typedef struct conn_count {
    atomic_uint most; /* the highest connection number the relay saw send */
} conn_count;

static conn_count g_cc; /* the relay's thread may call count_conn until teardown */

static void count_conn(void *ctx, unsigned conn, unsigned long long at, unsigned char *buf,
                       size_t n)
{
    conn_count *cc = ctx;
    (void)at;
    (void)buf;
    (void)n;
    unsigned seen = atomic_load(&cc->most);
    while (conn > seen && !atomic_compare_exchange_weak(&cc->most, &seen, conn)) {
    }
}

/* A node without a CA (nor WM_TLS_*) given the master's TLS port through a
 * relay that counts its connections: the node says once that the port
 * speaks TLS, with token (the refusal answers its auth.HELLO) or without
 * (it answers the registration). */
static void plaintext_on_tls_port(void **state, int with_token)
{
    wr_fixture *f = *state;
    char tcp[64], yaml[8192], via[64], tok[400];
    af_start_certs(f, with_token ? "node-refusals-tls" : "node-refusals-tls-nt", tcp, sizeof(tcp),
                   yaml, sizeof(yaml));
    assert_int_equal(fault_proxy_start(tcp, &g_proxy, via, sizeof(via)), 0);
    atomic_store(&g_cc.most, 0);
    fault_proxy_set_filter(g_proxy, count_conn, &g_cc);
    unsetenv("WM_TLS_CA");
    unsetenv("WM_TLS_CERT");
    unsetenv("WM_TLS_KEY");
    unsetenv("WEIGHT_TOKEN");
    snprintf(tok, sizeof(tok), "%s/node.token", f->m.dir); /* the admin's */
    const char *args[] = {"--master", via, with_token ? "--token-file" : NULL, tok, NULL};
    assert_int_equal(hx_node_start_args(&f->m, &g_node, "n-plain", 4u << 20, args), 0);
    long long end = hx_now_ms() + WAIT_MS;
    while (atomic_load(&g_cc.most) < ATTEMPTS && hx_now_ms() < end) sleep_ms(50);
    if (atomic_load(&g_cc.most) < ATTEMPTS) fail_msg("%u connections", atomic_load(&g_cc.most));
    hx_node_kill(&g_node);
    says_once(g_node.log, "speaks TLS");
    assert_false(hx_file_contains(g_node.log, "registered with"));
}

static void test_plaintext_with_token_on_tls_port_named_once(void **state)
{
    plaintext_on_tls_port(state, 1);
}

static void test_plaintext_without_token_on_tls_port_named_once(void **state)
{
    plaintext_on_tls_port(state, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unknown_token_named_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_token_refusal_named_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_embedded_writer_token_refused_at_start, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_plaintext_with_token_on_tls_port_named_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_plaintext_without_token_on_tls_port_named_once, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
