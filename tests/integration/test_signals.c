/* test_signals.c -- what signals do to a real store_master.
 *
 * SIGHUP, which operators and terminal hang-ups send, must never take the
 * master down: it reloads the plugins in place (test_plugin_reload has the
 * details), and three in a row leave it serving.
 * SIGTERM shuts it down cleanly (exit 0), after a drain: the calls and puts
 * it had accepted end first (a put started before the signal is ended and
 * durable, and so are the puts its connection starts while it has one open
 * there: a writer's batch), new calls are refused SMP_EAGAIN saying it is
 * stopping, status
 * is still answered and /health says 503 stopping; a call sent a moment
 * after the last answer is refused too, not met by a closed connection,
 * and a client polling the status does not keep the drain from ending;
 * a put still being written when the drain ends is handed on to the
 * master restarted (PUT_HANDOFF), which keeps its range and takes its put
 * end; a second signal stops it at once. SIGKILL gives no drain: a put of
 * 1 MiB or more is answered only once its start is durable (a PUT_HANDOFF
 * of it), so the master restarted keeps its range too, also from a
 * snapshot taken while the put was open. A smaller put's start writes no
 * record of its own: it is placed in a write zone whose WRITE_ZONES record
 * was durable first, and the master restarted (from the OpLog, or from a
 * snapshot) holds the zone's free bytes back, so the writer's late bytes
 * damage no put placed since; a master that drained dropped its zones
 * first and holds nothing back. */
#include <limits.h>
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

#include "harness.h"

/* The free bytes of the write zones of the master before held back. */
#define HELD "store_write_zone_held_bytes"

static void test_sighup_never_kills_the_master(void **state)
{
    (void)state;
    hx_master m;
    assert_int_equal(hx_init(&m, "signals", NULL), 0);
    assert_int_equal(hx_start(&m, 20000), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(kill(m.pid, SIGHUP), 0);
    assert_true(hx_wait_log(&m, "SIGHUP: every plugin looked at; serving on", 10000));
    assert_true(hx_alive(&m));
    kvc *c = hx_client(&m);
    assert_non_null(c);
    assert_int_equal(kvc_put_bytes(c, "kv/after-hup", "x", 1, SMP_DATA_KV, NULL, 0, NULL), 0);
    kvc_close(c);
    assert_int_equal(hx_stop(&m), 0);
    hx_cleanup(&m);
}

/* N of the master's "drained in N ms" line, or INT_MAX without one. */
static int drained_ms(const hx_master *m)
{
    char line[512];
    int ms = INT_MAX;
    FILE *fp = fopen(m->log, "r");
    if (fp == NULL) return INT_MAX;
    while (fgets(line, sizeof(line), fp) != NULL) {
        const char *at = strstr(line, "store_master: drained in ");
        if (at != NULL) ms = atoi(at + strlen("store_master: drained in "));
    }
    fclose(fp);
    return ms;
}

/* A put started before SIGTERM holds the stop: a new call is refused
 * SMP_EAGAIN naming the stop (nothing applied), status is answered, the
 * put's end is taken and answered durable, and so is a put its connection
 * starts meanwhile (the rest of a batch, whose writer ends none of its puts
 * before all started), while another connection's put start is refused;
 * then the master exits 0 saying every call was answered, well before the
 * drain's cap, and after a restart the objects are there and the refused
 * puts are not. */
static void test_sigterm_lets_an_open_put_end(void **state)
{
    (void)state;
    hx_master m;
    kvc_status st;
    uint8_t sha[32];
    int exists = -1;
    assert_int_equal(hx_init(&m, "signals-drain", NULL), 0);
    assert_int_equal(hx_start(&m, 20000), 0);
    kvc *c = hx_client(&m), *other = hx_client(&m);
    assert_non_null(c);
    assert_non_null(other);
    assert_int_equal(kvc_put_bytes(c, "kv/before", "b", 1, SMP_DATA_KV, NULL, 0, NULL), 0);
    hx_sha256("", 0, sha);
    assert_int_equal(kvc_put_start(c, "kv/open", 0, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(kill(m.pid, SIGTERM), 0);
    assert_true(
        hx_wait_log(&m, "stopping: new calls are refused; 0 open calls and 1 put in flight", 20000));
    /* a new call: refused, not applied -- a put start too, from a
     * connection with no put open here */
    assert_int_equal(kvc_put_start(other, "kv/refused", 1, SMP_DATA_KV, NULL, 0, NULL), SMP_EAGAIN);
    assert_non_null(strstr(kvc_error(other), "store_master is stopping"));
    kvc_close(other);
    assert_int_equal(kvc_exists(c, "kv/before", &exists), SMP_EAGAIN);
    /* the rest of c's batch: taken */
    assert_int_equal(kvc_put_start(c, "kv/batch", 0, SMP_DATA_KV, NULL, 0, NULL), 0);
    memset(&st, 0, sizeof(st));
    assert_int_equal(kvc_status_get(c, &st), 0);
    char *body = NULL; /* a load balancer sends no more */
    assert_int_equal(hx_http_get(&m, "/health", &body), 503);
    assert_non_null(strstr(body, "stopping: new calls are refused"));
    free(body);
    assert_int_equal(kvc_put_end(c, "kv/open", sha, NULL), 0);
    assert_int_equal(kvc_put_end(c, "kv/batch", sha, NULL), 0);
    /* with none open, c's next put start is a new call */
    assert_int_equal(kvc_put_start(c, "kv/late", 1, SMP_DATA_KV, NULL, 0, NULL), SMP_EAGAIN);
    /* Nothing is open now, but a client's next call a moment after its
     * answer still finds the connection open and is refused, not reset. */
    struct timespec turn = {0, 20 * 1000000L};
    nanosleep(&turn, NULL);
    assert_int_equal(kvc_exists(c, "kv/before", &exists), SMP_EAGAIN);
    assert_non_null(strstr(kvc_error(c), "store_master is stopping"));
    /* A client polling the status meanwhile is answered, and its answers do
     * not hold the drain open until its 5 s cap. */
    struct timespec tick = {0, 10 * 1000000L};
    for (int i = 0; i < 1000 && kvc_status_get(c, &st) == 0; i++) nanosleep(&tick, NULL);
    kvc_close(c);
    assert_int_equal(hx_wait_exit(&m, 20000), 0);
    assert_true(drained_ms(&m) < 4000);
    /* the put start and the exists, and the embedded node's polls */
    assert_true(hx_log_contains(&m, "every call answered, "));
    assert_true(hx_log_contains(&m, " new calls refused: stopping"));
    assert_false(hx_log_contains(&m, "every call answered, 0 new calls"));
    assert_false(hx_log_contains(&m, "every call answered, 1 new call "));
    assert_int_equal(hx_start(&m, 20000), 0);
    c = hx_client(&m);
    assert_non_null(c);
    assert_int_equal(kvc_exists(c, "kv/open", &exists), 0);
    assert_int_equal(exists, 1);
    assert_int_equal(kvc_exists(c, "kv/batch", &exists), 0);
    assert_int_equal(exists, 1);
    assert_int_equal(kvc_exists(c, "kv/late", &exists), 0);
    assert_int_equal(exists, 0);
    assert_int_equal(kvc_exists(c, "kv/before", &exists), 0);
    assert_int_equal(exists, 1);
    assert_int_equal(kvc_exists(c, "kv/refused", &exists), 0);
    assert_int_equal(exists, 0);
    kvc_close(c);
    assert_int_equal(hx_stop(&m), 0);
    hx_cleanup(&m);
}

/* A put still being written when the drain's 5 s end is handed on: the
 * master logs the PUT_HANDOFF and exits 0; restarted, it keeps the put's
 * range from a new put (which the same state would otherwise place exactly
 * there) and takes the writer's put end; both objects read back whole. */
static void test_sigterm_hands_on_a_put_still_written(void **state)
{
    (void)state;
    enum { LEN = 8192 };
    static uint8_t a[LEN], b[LEN];
    char why[512];
    memset(a, 0xa1, sizeof(a));
    memset(b, 0xb2, sizeof(b));
    hx_master m;
    kvc_replica where;
    assert_int_equal(hx_init(&m, "signals-handoff", NULL), 0);
    assert_int_equal(hx_start(&m, 20000), 0);
    kvc *c = hx_client(&m);
    assert_non_null(c);
    assert_int_equal(kvc_put_start(c, "kv/long", LEN, SMP_DATA_KV, NULL, 0, &where), 0);
    assert_true(where.segment_path[0] != '\0');
    assert_int_equal(hx_write_segment(where.segment_path, where.offset, a, LEN / 2), 0);
    assert_int_equal(kill(m.pid, SIGTERM), 0);
    assert_int_equal(hx_wait_exit(&m, 20000), 0);
    assert_true(hx_log_contains(&m, " and 1 put still open"));
    assert_true(hx_log_contains(&m, "store_master: 1 open put handed on (PUT_HANDOFF, record "));
    assert_true(hx_log_contains(&m, "store_master: write zones dropped (WRITE_ZONES, record "));
    kvc_close(c);

    /* restarted, it is the master the put was handed on to, and holds no
     * zone back (its first sweep, within a second, would take them) */
    assert_int_equal(hx_start(&m, 20000), 0);
    kvc *d = hx_client(&m);
    assert_non_null(d);
    struct timespec sweep = {1, 200 * 1000000L};
    nanosleep(&sweep, NULL);
    assert_true(hx_metric(&m, HELD) == 0);
    if (hx_finish_handed_put(d, "kv/long", &where, a, "kv/other", b, LEN, why, sizeof(why)) < 0)
        fail_msg("the master restarted: %s", why);
    kvc_close(d);
    assert_int_equal(hx_stop(&m), 0);
    hx_cleanup(&m);
}

static uint64_t last_seq(kvc *c)
{
    kvc_status st;
    assert_int_equal(kvc_status_get(c, &st), 0);
    return st.oplog_last_seq;
}

/* Start a put of 2 MiB (and a smaller one), copy half of it, take a
 * snapshot first when snapshot is set (the restart then starts from it,
 * the put open in it), SIGKILL the master and restart it: the range is
 * kept and the put end taken. */
static void sigkill_during_a_large_put(const char *name, int snapshot)
{
    enum { LEN = 2 << 20, SMALL = (1 << 20) - 1 };
    static uint8_t a[LEN], b[LEN];
    char why[512];
    memset(a, 0xa3, sizeof(a));
    memset(b, 0xb4, sizeof(b));
    hx_master m;
    kvc_replica where;
    assert_int_equal(hx_init(&m, name, NULL), 0);
    assert_int_equal(hx_start(&m, 20000), 0);
    kvc *c = hx_client(&m);
    assert_non_null(c);
    uint64_t seq = last_seq(c);
    /* a put under 1 MiB records its write zone, not itself (below) */
    assert_int_equal(kvc_put_start(c, "kv/small", SMALL, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(last_seq(c), seq + 1);
    assert_int_equal(kvc_put_start(c, "kv/long", LEN, SMP_DATA_KV, NULL, 0, &where), 0);
    assert_int_equal(last_seq(c), seq + 2);
    assert_true(where.segment_path[0] != '\0');
    assert_int_equal(hx_write_segment(where.segment_path, where.offset, a, LEN / 2), 0);
    if (snapshot) {
        uint64_t at = 0;
        assert_int_equal(kvc_snapshot(c, &at), 0);
        assert_true(at >= seq + 2);
    }
    hx_kill(&m);
    kvc_close(c);

    /* restarted: kv/long's range is not given to a new put (first fit
     * would place a put of its size over both ranges, kv/small's free
     * again after the OpLog alone) */
    assert_int_equal(hx_start(&m, 20000), 0);
    /* it counts the puts it took on once it sweeps: kv/long, and kv/small
     * too from the snapshot, which carries every open put */
    assert_int_equal(hx_wait_metric(&m, "store_puts_taken_over_total{result=\"taken\"}",
                                    snapshot ? 2 : 1, 20000),
                     0);
    kvc *d = hx_client(&m);
    assert_non_null(d);
    if (hx_finish_handed_put(d, "kv/long", &where, a, "kv/other", b, LEN, why, sizeof(why)) < 0)
        fail_msg("the master restarted%s: %s", snapshot ? " from the snapshot" : "", why);
    kvc_close(d);
    assert_int_equal(hx_stop(&m), 0);
    hx_cleanup(&m);
}

static void test_sigkill_keeps_a_large_put_s_range(void **state)
{
    (void)state;
    sigkill_during_a_large_put("signals-kill", 0);
}

static void test_sigkill_keeps_a_large_put_s_range_in_a_snapshot(void **state)
{
    (void)state;
    sigkill_during_a_large_put("signals-kill-snap", 1);
}

/* SIGKILL while a put under 1 MiB is half copied (with snapshot set, the
 * restart starts from a snapshot taken after the zone's record and before
 * that put's start): no record names that put, only its write zone's,
 * which the first put of the zone made durable before its answer (the
 * OpLog's last sequence moves by one, and by none for the next put there).
 * The restarted master holds the zone's free bytes back, so a new put of
 * the same size is not placed over the old range (first fit would place it
 * exactly there); the old writer copying its second half late damages
 * nothing: the new object reads back whole, and the old put's end is
 * refused (its client starts that put again). */
static void sigkill_during_a_small_put(const char *name, int snapshot)
{
    enum { LEN = 64 << 10 };
    static uint8_t a[LEN], b[LEN];
    char why[512];
    memset(a, 0xa5, sizeof(a));
    memset(b, 0xb6, sizeof(b));
    hx_master m;
    kvc_replica where;
    assert_int_equal(hx_init(&m, name, NULL), 0);
    assert_int_equal(hx_start(&m, 20000), 0);
    kvc *c = hx_client(&m);
    assert_non_null(c);
    uint64_t seq = last_seq(c);
    assert_int_equal(kvc_put_start(c, "kv/first", LEN, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(last_seq(c), seq + 1);
    if (snapshot) { /* the restart finds the zone there, and no record after */
        uint64_t at = 0;
        assert_int_equal(kvc_snapshot(c, &at), 0);
        assert_true(at >= seq + 1);
    }
    assert_int_equal(kvc_put_start(c, "kv/small", LEN, SMP_DATA_KV, NULL, 0, &where), 0);
    assert_int_equal(last_seq(c), seq + 1);
    assert_int_equal(hx_write_segment(where.segment_path, where.offset, a, LEN / 2), 0);
    hx_kill(&m);
    kvc_close(c);

    assert_int_equal(hx_start(&m, 20000), 0);
    kvc *d = hx_client(&m);
    assert_non_null(d);
    if (hx_finish_unknown_put(d, "kv/small", &where, a, "kv/other", b, LEN, why, sizeof(why)) < 0)
        fail_msg("the master restarted%s: %s", snapshot ? " from the snapshot" : "", why);
    assert_true(hx_metric(&m, HELD) > 0);
    kvc_close(d);
    assert_int_equal(hx_stop(&m), 0);
    hx_cleanup(&m);
}

static void test_sigkill_keeps_a_small_put_s_zone(void **state)
{
    (void)state;
    sigkill_during_a_small_put("signals-kill-small", 0);
}

static void test_sigkill_keeps_a_small_put_s_zone_in_a_snapshot(void **state)
{
    (void)state;
    sigkill_during_a_small_put("signals-kill-small-snap", 1);
}

/* A second SIGTERM during a drain stops the master at once: the open put
 * does not hold it for the drain's 5 s. */
static void test_second_sigterm_stops_at_once(void **state)
{
    (void)state;
    hx_master m;
    assert_int_equal(hx_init(&m, "signals-twice", NULL), 0);
    assert_int_equal(hx_start(&m, 20000), 0);
    kvc *c = hx_client(&m);
    assert_non_null(c);
    assert_int_equal(kvc_put_start(c, "kv/open", 1, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(kill(m.pid, SIGTERM), 0);
    assert_true(hx_wait_log(&m, "stopping: new calls are refused", 20000));
    assert_int_equal(kill(m.pid, SIGTERM), 0);
    assert_int_equal(hx_wait_exit(&m, 20000), 0);
    assert_false(hx_log_contains(&m, "drained"));
    kvc_close(c);
    hx_cleanup(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sighup_never_kills_the_master),
        cmocka_unit_test(test_sigterm_lets_an_open_put_end),
        cmocka_unit_test(test_sigterm_hands_on_a_put_still_written),
        cmocka_unit_test(test_second_sigterm_stops_at_once),
        cmocka_unit_test(test_sigkill_keeps_a_large_put_s_range),
        cmocka_unit_test(test_sigkill_keeps_a_large_put_s_range_in_a_snapshot),
        cmocka_unit_test(test_sigkill_keeps_a_small_put_s_zone),
        cmocka_unit_test(test_sigkill_keeps_a_small_put_s_zone_in_a_snapshot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
