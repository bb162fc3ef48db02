/* test_ha_put_handoff.c -- a leader stopped (SIGTERM) while a writer is
 * still copying a put hands the put on to the next leader (PUT_HANDOFF).
 *
 * Debian's etcd (one member), three store_master processes in HA mode and
 * one store_node given the list of the three (ha_cluster_fixture.c). A
 * client starts a put through the master list and copies half of its bytes
 * into the node's segment, as a co-located writer does through its
 * mapping; the leader is sent SIGTERM and its drain ends at the 5 s cap
 * with the put open. It must log the handoff and exit 0. The next leader
 * must keep the range from a new put (the same durable state otherwise
 * places the new put exactly there: the writer's late bytes overwrote an
 * object acknowledged meanwhile; its /metrics counts the put taken over)
 * and take the writer's put end; both objects read back byte for byte.
 *
 * A registered master that does not advertise the feature (a registry
 * entry as an older build writes it) keeps the leader from writing the
 * record, which that master could not replay: the leader says so, and the
 * next leader does not know the put (its put end is refused ENOTFOUND);
 * nor are large puts' starts recorded meanwhile (the leader says so once,
 * and once again when they are recorded again, m9 gone).
 *
 * A leader killed (SIGKILL) drains nothing: a put of 1 MiB or more was
 * answered only once its own PUT_HANDOFF was durable, so the next leader
 * keeps its range all the same and takes its put end. A smaller put was
 * placed in a write zone recorded (WRITE_ZONES) before its answer: the
 * next leader holds the zone's free bytes back, so a writer stalled past
 * the failover damages no put it placed since; and after a second failover
 * the third leader still holds the first one's zone (the second named it
 * in its own record), and the second's. While the old build's entry
 * is registered, small puts are not placed in zones (the leader says so
 * once, and once again when they are again). */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "etcd_client.h"
#include "ha_cluster_fixture.h"
#include "harness.h"
#include "host_rpc.pb-c.h"
#include "kv_client.h"

#define WAIT_MS 20000
#define LEN 8192
#define TAKEN "store_puts_taken_over_total{result=\"taken\"}"

typedef struct fixture {
    hc_cluster hc;
    hx_master view; /* master 0 with the list of all three */
    int leader;
} fixture;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (f == NULL) return -1;
    *state = f;
    if (hc_init(&f->hc, "ha-handoff", 1) < 0) {
        free(f);
        *state = NULL;
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f == NULL) return 0;
    hc_cleanup(&f->hc);
    free(f);
    return 0;
}

/* Three masters, the node on their list; f->leader leads it. */
static void start_cluster(fixture *f)
{
    for (int i = 0; i < HC_MASTERS; i++) {
        assert_int_equal(hc_configure(&f->hc, i, ""), 0);
        if (hx_start(&f->hc.m[i], WAIT_MS) < 0) fail_msg("master %d did not start", i);
    }
    if ((f->leader = hc_wait_leader(&f->hc, -1, WAIT_MS)) < 0) fail_msg("no leader");
    assert_int_equal(hc_node_start(&f->hc, "n1", 16u << 20), 0);
    if (hc_wait_node(&f->hc, f->leader, WAIT_MS) < 0) fail_msg("the node did not register");
    assert_int_equal(hc_list_view(&f->hc, &f->view), 0);
}

/* Start kv/long, copy its first half, SIGTERM the leader and wait for it to
 * exit 0 and for another master to lead (and have the node). The writer's
 * client is closed; *where is its range. */
static void stop_leader_during_a_put(fixture *f, const uint8_t *data, kvc_replica *where)
{
    kvc *c = hx_client(&f->view);
    assert_non_null(c);
    assert_int_equal(kvc_put_start(c, "kv/long", LEN, SMP_DATA_KV, NULL, 0, where), 0);
    if (where->segment_path[0] == '\0') fail_msg("the put start names no segment file");
    assert_int_equal(hx_write_segment(where->segment_path, where->offset, data, LEN / 2), 0);
    hx_master *old = &f->hc.m[f->leader];
    assert_int_equal(kill(old->pid, SIGTERM), 0);
    assert_int_equal(hx_wait_exit(old, WAIT_MS), 0);
    assert_true(hx_log_contains(old, " and 1 put still open"));
    kvc_close(c);
    int next = hc_wait_leader(&f->hc, f->leader, WAIT_MS);
    if (next < 0) fail_msg("no next leader");
    f->leader = next;
    if (hc_wait_node(&f->hc, next, WAIT_MS) < 0) fail_msg("the node did not register again");
}

static void test_sigterm_of_the_leader_hands_on_a_put_still_written(void **state)
{
    fixture *f = *state;
    static uint8_t a[LEN], b[LEN];
    char why[512];
    memset(a, 0xa1, sizeof(a));
    memset(b, 0xb2, sizeof(b));
    start_cluster(f);
    int old = f->leader;
    kvc_replica where;
    stop_leader_during_a_put(f, a, &where);
    assert_true(hx_log_contains(&f->hc.m[old],
                                "store_master: 1 open put handed on (PUT_HANDOFF, record "));
    /* the next leader says it took the put on */
    assert_int_equal(hx_wait_metric(&f->hc.m[f->leader], TAKEN, 1, WAIT_MS), 0);
    kvc *d = hx_client(&f->view);
    assert_non_null(d);
    if (hx_finish_handed_put(d, "kv/long", &where, a, "kv/other", b, LEN, why, sizeof(why)) < 0)
        fail_msg("the next leader: %s", why);
    kvc_close(d);
}

/* Remove the registry entry of id. 0, or -1. */
static int unregister_master(fixture *f, const char *id)
{
    char err[256] = "", key[200];
    etcd_client_options o = {.endpoints = etcd_fixture_endpoints(&f->hc.etcd)};
    etcd_client *ec = NULL;
    int rc = -1;
    snprintf(key, sizeof(key), "%smasters/%s", f->hc.prefix, id);
    if (etcd_client_open(&o, &ec, err, sizeof(err)) == 0)
        rc = etcd_delete_range(ec, key, strlen(key), NULL, 0, NULL, err, sizeof(err)) < 0 ? -1 : 0;
    if (rc < 0) fprintf(stderr, "unregister_master: %s\n", err);
    etcd_client_close(ec);
    return rc;
}

/* Wait until the leader (asked itself: a standby answers a status for
 * itself, and master 0 need not lead) lists id in its registry (listed 1)
 * or no longer does (0); fails the test after WAIT_MS. */
static void wait_listed(fixture *f, kvc *c, const char *id, int listed)
{
    for (long long end = hx_now_ms() + WAIT_MS;; sleep_ms(100)) {
        kvc_status st;
        int seen = 0;
        memset(&st, 0, sizeof(st));
        assert_int_equal(kvc_status_get(c, &st), 0);
        for (size_t i = 0; i < st.n_masters; i++) seen |= strcmp(st.masters[i].id, id) == 0;
        if (seen == listed && strcmp(st.role, "leader") == 0) return;
        if (hx_now_ms() > end)
            fail_msg("m%d (%s, %zu masters) %s %s", f->leader, st.role, st.n_masters,
                     listed ? "never listed" : "still lists", id);
    }
}

/* The OpLog's last sequence at the master c is connected to. */
static uint64_t last_seq(kvc *c)
{
    kvc_status st;
    assert_int_equal(kvc_status_get(c, &st), 0);
    return st.oplog_last_seq;
}

/* SIGKILL the leader (closing c, its client, after), wait for the next
 * one and for the node to register with it (what names the step). */
static void next_leader(fixture *f, kvc *c, const char *what)
{
    int old = f->leader;
    hx_kill(&f->hc.m[old]);
    kvc_close(c);
    if ((f->leader = hc_wait_leader(&f->hc, old, WAIT_MS)) < 0) fail_msg("no %s leader", what);
    if (hc_wait_node(&f->hc, f->leader, WAIT_MS) < 0) fail_msg("the node did not register again");
}

/* A registry entry for id as a build without the feature writes it (no
 * lease: it stays until the cluster's keys go). 0, or -1. */
static int register_old_master(fixture *f, const char *id)
{
    char err[256] = "", key[200];
    etcd_client_options o = {.endpoints = etcd_fixture_endpoints(&f->hc.etcd)};
    etcd_client *ec = NULL;
    MasterInfo mi = MASTER_INFO__INIT;
    uint32_t types[] = {1, 2, 3, 4, 5, 6, 7};
    mi.id = (char *)id;
    mi.role = "standby";
    mi.endpoint = "/nonexistent/old.sock";
    mi.reason = "";
    mi.replay_types = types;
    mi.n_replay_types = sizeof(types) / sizeof(types[0]);
    size_t vlen = master_info__get_packed_size(&mi);
    uint8_t *val = malloc(vlen ? vlen : 1);
    int rc = -1;
    if (val == NULL) return -1;
    master_info__pack(&mi, val);
    if (etcd_client_open(&o, &ec, err, sizeof(err)) == 0) {
        snprintf(key, sizeof(key), "%smasters/%s", f->hc.prefix, id);
        rc = etcd_put(ec, key, strlen(key), val, vlen, 0, NULL, err, sizeof(err)) < 0 ? -1 : 0;
    }
    if (rc < 0) fprintf(stderr, "register_old_master: %s\n", err);
    etcd_client_close(ec);
    free(val);
    return rc;
}

static void test_no_handoff_while_a_registered_master_cannot_replay_it(void **state)
{
    fixture *f = *state;
    static uint8_t a[LEN];
    uint8_t sha[32];
    memset(a, 0xa1, sizeof(a));
    hx_sha256(a, LEN, sha);
    start_cluster(f);
    assert_int_equal(register_old_master(f, "m9"), 0);
    kvc *c = hx_client(&f->hc.m[f->leader]);
    assert_non_null(c);
    wait_listed(f, c, "m9", 1);
    /* nor is a large put's start recorded: the leader says so once */
    const char *not_recorded = "store_master: the starts of puts of 1 MiB or more are not "
                               "recorded (master m9 runs a build that does not advertise it)";
    const char *again = "store_master: the starts of puts of 1 MiB or more are recorded again";
    const char *zones_off = "store_master: puts under 1 MiB are not placed in write zones "
                            "(master m9 runs a build that does not advertise it)";
    const char *zones_on = "store_master: puts under 1 MiB are placed in write zones again";
    const char *log = f->hc.m[f->leader].log;
    uint64_t seq = last_seq(c);
    assert_int_equal(kvc_put_start(c, "kv/big", 2 << 20, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(kvc_put_start(c, "kv/big2", 2 << 20, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(last_seq(c), seq);
    assert_int_equal(hx_file_count(log, not_recorded), 1);
    /* nor are small puts placed in write zones (no record either) */
    assert_int_equal(kvc_put_start(c, "kv/little", 100, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(last_seq(c), seq);
    assert_int_equal(hx_file_count(log, zones_off), 1);
    assert_int_equal(kvc_put_revoke(c, "kv/big"), 0);
    assert_int_equal(kvc_put_revoke(c, "kv/big2"), 0);
    assert_int_equal(kvc_put_revoke(c, "kv/little"), 0);
    /* m9 gone (upgraded), they are again, and the log says so */
    assert_int_equal(unregister_master(f, "m9"), 0);
    wait_listed(f, c, "m9", 0);
    seq = last_seq(c);
    assert_int_equal(kvc_put_start(c, "kv/big", 2 << 20, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(last_seq(c), seq + 1);
    assert_int_equal(hx_file_count(log, again), 1);
    assert_int_equal(kvc_put_revoke(c, "kv/big"), 0);
    /* and small puts in zones */
    seq = last_seq(c);
    assert_int_equal(kvc_put_start(c, "kv/little", 100, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(last_seq(c), seq + 1); /* its zone's record */
    assert_int_equal(hx_file_count(log, zones_on), 1);
    assert_int_equal(kvc_put_revoke(c, "kv/little"), 0);
    /* m9 back for the rest */
    assert_int_equal(register_old_master(f, "m9"), 0);
    wait_listed(f, c, "m9", 1);
    kvc_close(c);
    int old = f->leader;
    kvc_replica where;
    stop_leader_during_a_put(f, a, &where);
    assert_true(hx_log_contains(&f->hc.m[old], "store_master: the open puts are not handed on "
                                               "(master m9 runs a build that does not advertise "
                                               "it): the next master does not know their "
                                               "ranges"));
    assert_false(hx_log_contains(&f->hc.m[old], "handed on (PUT_HANDOFF"));
    kvc *d = hx_client(&f->view);
    assert_non_null(d);
    assert_int_equal(kvc_put_end(d, "kv/long", sha, NULL), SMP_ENOTFOUND);
    kvc_close(d);
}

static void test_sigkill_of_the_leader_keeps_a_large_put_s_range(void **state)
{
    fixture *f = *state;
    enum { BIG = 2 << 20 };
    static uint8_t a[BIG], b[BIG];
    char why[512];
    memset(a, 0xa5, sizeof(a));
    memset(b, 0xb6, sizeof(b));
    start_cluster(f);
    kvc *c = hx_client(&f->view);
    assert_non_null(c);
    kvc_replica where;
    assert_int_equal(kvc_put_start(c, "kv/small", (1 << 20) - 1, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(kvc_put_start(c, "kv/big", BIG, SMP_DATA_KV, NULL, 0, &where), 0);
    assert_int_equal(hx_write_segment(where.segment_path, where.offset, a, BIG / 2), 0);
    next_leader(f, c, "next");
    /* it counts kv/big, open when it began to lead (kv/small has no record
     * of its own: its write zone has) */
    assert_int_equal(hx_wait_metric(&f->hc.m[f->leader], TAKEN, 1, WAIT_MS), 0);
    /* first fit would place a put of kv/big's size over kv/big's range */
    kvc *d = hx_client(&f->view);
    assert_non_null(d);
    if (hx_finish_handed_put(d, "kv/big", &where, a, "kv/other", b, BIG, why, sizeof(why)) < 0)
        fail_msg("the next leader: %s", why);
    kvc_close(d);
}

/* A put under 1 MiB has no record of its own: the leader recorded the
 * write zone it placed it in before its answer. Killed while that put's
 * writer is half way, the leader is replaced within a lease; the writer,
 * stalled longer than that, copies the rest late. The next leader held
 * the zone's free bytes back, so the new put it placed meanwhile is not
 * damaged (first fit puts it exactly over the old range otherwise), and
 * it refuses the put end it never heard of (the writer starts again). */
static void test_sigkill_of_the_leader_keeps_a_small_put_s_zone(void **state)
{
    fixture *f = *state;
    static uint8_t a[LEN], b[LEN];
    char why[512];
    memset(a, 0xa7, sizeof(a));
    memset(b, 0xb8, sizeof(b));
    start_cluster(f);
    kvc *c = hx_client(&f->view);
    assert_non_null(c);
    kvc_replica where;
    assert_int_equal(kvc_put_start(c, "kv/small", LEN, SMP_DATA_KV, NULL, 0, &where), 0);
    assert_int_equal(hx_write_segment(where.segment_path, where.offset, a, LEN / 2), 0);
    next_leader(f, c, "next");
    kvc *d = hx_client(&f->view);
    assert_non_null(d);
    if (hx_finish_unknown_put(d, "kv/small", &where, a, "kv/other", b, LEN, why, sizeof(why)) < 0)
        fail_msg("the next leader: %s", why);
    assert_true(hx_metric(&f->hc.m[f->leader], "store_write_zone_held_bytes") > 0);
    kvc_close(d);
}

/* Two failovers: the second leader held the first's zone back and wrote
 * its own record when it placed a small put (kv/second, left open), which
 * names what it holds as well as its own zone. Killed in turn, the third
 * leader holds both: its new put lands on neither the first leader's
 * half-written put nor the second's, and the first writer's late bytes
 * damage nothing. */
static void test_two_failovers_keep_both_zones(void **state)
{
    fixture *f = *state;
    static uint8_t a[LEN], b[LEN];
    char why[512];
    memset(a, 0xa9, sizeof(a));
    memset(b, 0xba, sizeof(b));
    start_cluster(f);
    kvc *c = hx_client(&f->view);
    assert_non_null(c);
    kvc_replica where, second, other;
    assert_int_equal(kvc_put_start(c, "kv/small", LEN, SMP_DATA_KV, NULL, 0, &where), 0);
    assert_int_equal(hx_write_segment(where.segment_path, where.offset, a, LEN / 2), 0);
    next_leader(f, c, "second");
    kvc *d = hx_client(&f->view);
    assert_non_null(d);
    assert_int_equal(kvc_put_start(d, "kv/second", LEN, SMP_DATA_KV, NULL, 0, &second), 0);
    if (hx_ranges_meet(&second, &where, LEN))
        fail_msg("the second leader placed kv/second over kv/small");
    next_leader(f, d, "third");
    kvc *e = hx_client(&f->view);
    assert_non_null(e);
    /* a put of their size lands on neither (first fit: on kv/small) */
    assert_int_equal(kvc_put_start(e, "kv/probe", LEN, SMP_DATA_KV, NULL, 0, &other), 0);
    if (hx_ranges_meet(&other, &second, LEN))
        fail_msg("the third leader placed kv/probe over kv/second");
    if (hx_ranges_meet(&other, &where, LEN))
        fail_msg("the third leader placed kv/probe over kv/small");
    if (hx_finish_unknown_put(e, "kv/small", &where, a, "kv/other", b, LEN, why, sizeof(why)) < 0)
        fail_msg("the third leader: %s", why);
    assert_true(hx_metric(&f->hc.m[f->leader], "store_write_zone_held_bytes") > 0);
    kvc_close(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sigterm_of_the_leader_hands_on_a_put_still_written,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_handoff_while_a_registered_master_cannot_replay_it,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigkill_of_the_leader_keeps_a_large_put_s_range,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigkill_of_the_leader_keeps_a_small_put_s_zone,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_failovers_keep_both_zones, setup, teardown),
    };
    if (getenv("HA_TEST") != NULL) cmocka_set_test_filter(getenv("HA_TEST"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
