/* test_node_slow_inventory.c -- a node whose cold-file inventory takes
 * longer than node.timeout_ms to reach a restarted master is not given up
 * while its pages arrive; a node that never comes, stops in the middle of
 * its pages, or is refused, still is.
 *
 * A master without its embedded node (node.timeout_ms 3000) listens on a
 * loopback TCP port; node-b reaches it through fault_proxy, which the test
 * throttles to 1 MiB/s after the node holds four HOT revisions: a real
 * slow link. node-b's cold directory (in /dev/shm, linked from the test's
 * own, so that thousands of persists cost no disk syncs) gets 6,500 cold
 * files of 900-byte keys no master knows -- an inventory of about 6.6 MB,
 * 26 pages of 256 KiB, over six seconds on the link: twice the timeout,
 * while a page takes a quarter of a second, a twelfth of it. Then the
 * master restarts (SIGKILL) and the node registers again through the slow
 * link. The master writes nothing for a node it
 * waits for: its OpLog appends (oplog_appends_total, a count from this
 * start) and the DEGRADED revisions of /metrics show whether it gave the
 * node up (every revision's replicas lost, a DEGRADED record each) or not. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "etcd_fixture.h"
#include "fault_proxy.h"
#include "harness.h"
#include "node_cold.h"
#include "node_runtime.h"
#include "weight_rpc.h"

#define TIMEOUT_MS 3000
#define SEGMENT (16ull << 20)
#define REVISIONS 4
#define KEY_BYTES 900
#define FILLER_FILES 6500
#define LINK_BYTES_PER_S (1ul << 20)
#define DEGRADED "weight_revisions{availability=\"DEGRADED\"}"
#define GIVEN_UP "down (not heard from since the start)"

typedef struct fx {
    wr_fixture w;
    fault_proxy *proxy;
    char link[64];        /* the proxy's address: node-b's master */
    hx_node b;
    char shm_cold[128];   /* node-b's cold files */
    Wmrpc__WeightIdentity ids[REVISIONS];
    char names[REVISIONS][16];
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    wr_disconnect(&f->w);
    hx_node_kill(&f->b);
    fault_proxy_stop(f->proxy);
    if (f->shm_cold[0] != '\0') hx_remove_dir(f->shm_cold);
    hx_cleanup(&f->w.m);
    free(f);
    return 0;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The master on a TCP port, node-b through the proxy holding REVISIONS
 * HOT revisions, its cold directory filled; the link then throttled. */
static void start_with_slow_node(fx *f, const char *name)
{
    char cfg[1024], tcp[64], link[400];
    assert_int_equal(hx_init(&f->w.m, name, NULL), 0);
    snprintf(tcp, sizeof(tcp), "127.0.0.1:%d", etcd_fixture_free_port());
    snprintf(f->w.m.listen_tcp, sizeof(f->w.m.listen_tcp), "%s", tcp);
    snprintf(cfg, sizeof(cfg),
             "node:\n  embedded: false\n  timeout_ms: %d\n  poll_ms: 50\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    config:\n      tick_period_ms: 50\n",
             TIMEOUT_MS, BUILD_DIR);
    assert_int_equal(hx_reconfigure(&f->w.m, cfg), 0);
    assert_int_equal(hx_start(&f->w.m, 10000), 0);
    assert_int_equal(fault_proxy_start(tcp, &f->proxy, f->link, sizeof(f->link)), 0);

    snprintf(f->shm_cold, sizeof(f->shm_cold), "/dev/shm/wm-slowinv-%d", (int)getpid());
    hx_remove_dir(f->shm_cold);
    assert_int_equal(mkdir(f->shm_cold, 0700), 0);
    assert_int_equal(hx_own_dir(f->shm_cold), 0);
    snprintf(link, sizeof(link), "%s/cold-node-b", f->w.m.dir);
    assert_int_equal(symlink(f->shm_cold, link), 0);
    const char *args[] = {"--master", f->link, NULL};
    assert_int_equal(hx_node_start_args(&f->w.m, &f->b, "node-b", SEGMENT, args), 0);
    assert_int_equal(hx_wait_nodes(&f->w.m, 1, 20000), 0);

    wr_connect(&f->w);
    for (int i = 0; i < REVISIONS; i++) {
        snprintf(f->names[i], sizeof(f->names[i]), "model-%d", i);
        wr_set_identity(&f->ids[i], "t1", "slow", f->names[i], 1);
        wr_upload u = {.n = 2, .sizes = {3000, 5000}, .per_unit = 1};
        Wmrpc__MetadataResponse *r = wr_publish(&f->w, &f->ids[i], WR_RS_HOT, WR_MODE_MANUAL, &u);
        assert_int_equal(r->metadata->availability, WR_AV_READY);
        wmrpc__metadata_response__free_unpacked(r, NULL);
    }
    assert_int_equal(hx_cold_fill(f->shm_cold, "filler", FILLER_FILES, KEY_BYTES), 0);
    /* each entry: key, 64-hex name + ".cold", length, sha256, tags */
    size_t inventory = (size_t)FILLER_FILES * (KEY_BYTES + 69 + 32 + 16);
    assert_true(inventory > 2 * LINK_BYTES_PER_S * TIMEOUT_MS / 1000);        /* > 2 x the timeout */
    assert_true(12 * NODE_INVENTORY_PAGE_BYTES <= LINK_BYTES_PER_S * TIMEOUT_MS / 1000); /* a page */
    fault_proxy_throttle(f->proxy, LINK_BYTES_PER_S);
}

/* The master's log and node-b's, for a failure. */
static void print_logs(const fx *f)
{
    size_t len = 0;
    char *node = (char *)hx_read_file(f->b.log, &len);
    hx_print_log(&f->w.m);
    fprintf(stderr, "--- node-b's log:\n%.*s\n", (int)len, node ? node : "");
    free(node);
}

/* SIGKILL and start the master again. The link is cut meanwhile, so that
 * node-b's next connection reaches the new master, not the dying one or a
 * port nobody listens on yet. */
static void restart_master(fx *f)
{
    wr_disconnect(&f->w);
    fault_proxy_cut(f->proxy, 1);
    hx_kill(&f->w.m);
    assert_int_equal(hx_start(&f->w.m, 20000), 0);
    fault_proxy_cut(f->proxy, 0);
    wr_connect(&f->w);
}

/* The master restarts; node-b's inventory takes more than twice
 * node.timeout_ms to arrive: the node is waited for, never given up, and
 * registers with every file. Not one record is written meanwhile (no
 * revision DEGRADED), and every revision is READY and readable after. */
static void test_a_node_whose_inventory_is_arriving_is_not_given_up(void **state)
{
    fx *f = *state;
    start_with_slow_node(f, "slowinv-wait");
    restart_master(f);
    uint64_t started = mono_ms();
    double most_degraded = 0;
    kvc *c = hx_client(&f->w.m);
    assert_non_null(c);
    kvc_status st = {0};
    while (kvc_status_get(c, &st) == 0 && st.nodes == 0 && mono_ms() - started < 60000) {
        double d = hx_metric(&f->w.m, DEGRADED);
        if (d > most_degraded) most_degraded = d;
        usleep(50 * 1000);
    }
    kvc_close(c);
    uint64_t took = mono_ms() - started;
    if (st.nodes != 1) {
        print_logs(f);
        fail_msg("node-b did not register within 60 s");
    }
    /* The link made the inventory longer than the timeout (else this test
     * tests nothing). */
    if (took <= TIMEOUT_MS) fail_msg("node-b registered after %llu ms", (unsigned long long)took);
    if (!hx_file_contains(f->b.log, "cold files sent in")) fail_msg("node-b sent no pages");
    if (hx_log_contains(&f->w.m, GIVEN_UP)) {
        print_logs(f);
        fail_msg("node-b was given up while its pages arrived");
    }
    assert_true(most_degraded == 0);
    for (int i = 0; i < REVISIONS; i++) {
        Wmrpc__MetadataResponse *r = wr_get_md(&f->w, &f->ids[i]);
        assert_int_equal(r->metadata->availability, WR_AV_READY);
        wmrpc__metadata_response__free_unpacked(r, NULL);
        assert_int_equal(wr_is_exist(&f->w, &f->ids[i]), 1);
    }
    assert_true(hx_metric(&f->w.m, DEGRADED) == 0);
    assert_true(hx_metric(&f->w.m, "oplog_appends_total") == 0);
    /* Said at the first housekeeping round after the registration (every
     * 50 ms), which may come after the checks above. */
    int settled = 0;
    for (int i = 0; i < 200 && !(settled = hx_log_contains(&f->w.m, "every node holding a segment "
                                                            "has registered")); i++)
        usleep(50 * 1000);
    assert_true(settled);
}

/* The master restarts and node-b never comes: given up node.timeout_ms
 * after the start, its revisions DEGRADED, as before pages counted. */
static void test_a_node_that_never_comes_is_given_up(void **state)
{
    fx *f = *state;
    start_with_slow_node(f, "slowinv-never");
    hx_node_kill(&f->b);
    restart_master(f);
    for (int i = 0; i < REVISIONS; i++)
        assert_int_equal(wr_wait_md(&f->w, &f->ids[i], WR_AV_DEGRADED, 20000), 0);
    assert_true(hx_log_contains(&f->w.m, "node node-b " GIVEN_UP));
    assert_true(hx_log_contains(&f->w.m, "node.timeout_ms passed; reconcile ticks start"));
    assert_true(hx_metric(&f->w.m, DEGRADED) == REVISIONS);
}

/* node-b dies in the middle of its pages: given up once node.timeout_ms
 * passed after the last page that arrived, its revisions DEGRADED. */
static void test_a_node_that_stops_sending_pages_is_given_up(void **state)
{
    fx *f = *state;
    start_with_slow_node(f, "slowinv-stop");
    restart_master(f);
    /* Past the timeout and well before the last page (at 6 s or later):
     * the node is paging, not given up. */
    usleep((TIMEOUT_MS + 500) * 1000);
    kvc *c = hx_client(&f->w.m);
    assert_non_null(c);
    kvc_status st = {0};
    assert_int_equal(kvc_status_get(c, &st), 0);
    kvc_close(c);
    if (st.nodes != 0 || hx_log_contains(&f->w.m, GIVEN_UP)) {
        print_logs(f);
        fail_msg("node-b was %s while its pages arrived", st.nodes != 0 ? "registered" : "given up");
    }
    hx_node_kill(&f->b);
    for (int i = 0; i < REVISIONS; i++)
        assert_int_equal(wr_wait_md(&f->w, &f->ids[i], WR_AV_DEGRADED, 20000), 0);
    assert_true(hx_log_contains(&f->w.m, "node node-b " GIVEN_UP));
}

/* node-b comes back dedicated to another tenant than the bytes its segment
 * holds: each registration is refused, and the node keeps scanning and
 * sending its pages (the link no longer slow: a round every half second).
 * A refused node is not coming as it is -- its pages do not keep the
 * master waiting: given up node.timeout_ms after the start, its revisions
 * DEGRADED. */
static void test_a_refused_node_is_given_up_despite_its_pages(void **state)
{
    fx *f = *state;
    char sock[400], peer[32];
    start_with_slow_node(f, "slowinv-refused");
    fault_proxy_throttle(f->proxy, 0);
    hx_node_kill(&f->b);
    restart_master(f);
    snprintf(sock, sizeof(sock), "%s/node-b.sock", f->w.m.dir);
    snprintf(peer, sizeof(peer), "uid:%u", (unsigned)getuid());
    const char *args[] = {"--master", f->link, "--tenant", "t2", "--local-socket", sock,
                          "--local-peer", peer, NULL};
    assert_int_equal(hx_node_start_args(&f->w.m, &f->b, "node-b", SEGMENT, args), 0);
    for (int i = 0; i < REVISIONS; i++)
        assert_int_equal(wr_wait_md(&f->w, &f->ids[i], WR_AV_DEGRADED, 20000), 0);
    assert_true(hx_log_contains(&f->w.m, "node node-b " GIVEN_UP));
    /* refused after its pages, again and again */
    assert_true(hx_file_contains(f->b.log, "of another tenant"));
    assert_true(hx_file_contains(f->b.log, "cold files sent in"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_node_whose_inventory_is_arriving_is_not_given_up,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_node_that_never_comes_is_given_up, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_node_that_stops_sending_pages_is_given_up, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_refused_node_is_given_up_despite_its_pages, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
