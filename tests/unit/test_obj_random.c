/* test_obj_random.c -- randomised runs of the object store
 * (host_shim/master/obj_store*.c): random puts, ends, revokes, removals,
 * evictions, cold copies and stale records applied at once, and the
 * master's pipeline with a slow OpLog (records held, applied some steps
 * later). Each run's log must replay -- once, and with every record applied
 * twice -- to the same state as the store and its snapshot.
 *
 * Seeds are fixed, so a failure repeats (obj_test_store.h has the helpers). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "host_records.pb-c.h"
#include "obj_store.h"
#include "obj_store_internal.h"
#include "obj_test_store.h"

/* ------------------------------------------------------------------------ */
/* Randomised consistency                                                    */
/* ------------------------------------------------------------------------ */

typedef struct dyn_log {
    obj_record *recs;
    size_t n, cap;
} dyn_log;

/* Apply r -- from its hold's decoded message when held is given, as the
 * master does, else from its bytes, as replay does -- and log it. */
static void dyn_apply_held(obj_store *st, dyn_log *log, obj_record *r, const obj_held *held)
{
    if (held)
        assert_int_equal(obj_apply_held(st, held), SMP_OK);
    else
        assert_int_equal(obj_apply_record(st, r->type, r->encver, r->buf, r->len), SMP_OK);
    if (log->n == log->cap) {
        log->cap = log->cap ? log->cap * 2 : 64;
        log->recs = realloc(log->recs, log->cap * sizeof(*log->recs));
        assert_non_null(log->recs);
    }
    log->recs[log->n++] = *r; /* the log takes the buffer */
    memset(r, 0, sizeof(*r));
}

static void dyn_apply(obj_store *st, dyn_log *log, obj_record *r)
{
    dyn_apply_held(st, log, r, NULL);
}

/* The log replays to st's state -- once, and with each record applied twice
 * -- and so does st's snapshot loaded into a new store; the log's records
 * are freed. */
static void assert_dyn_log_replays(const obj_store *st, dyn_log *log)
{
    obj_store *a = new_store(NULL), *b = new_store(NULL), *c = new_store(NULL);
    for (size_t i = 0; i < log->n; i++) {
        const obj_record *q = &log->recs[i];
        assert_int_equal(obj_apply_record(a, q->type, q->encver, q->buf, q->len), SMP_OK);
        assert_int_equal(obj_apply_record(b, q->type, q->encver, q->buf, q->len), SMP_OK);
        assert_int_equal(obj_apply_record(b, q->type, q->encver, q->buf, q->len), SMP_OK);
    }
    assert_same_state(st, a);
    assert_same_state(st, b);
    buf snap = save(st);
    assert_int_equal(obj_store_load(c, snap.p, snap.n), SMP_OK);
    assert_same_state(st, c);
    free(snap.p);
    for (size_t i = 0; i < log->n; i++) obj_record_free(&log->recs[i]);
    free(log->recs);
    obj_store_destroy(a);
    obj_store_destroy(b);
    obj_store_destroy(c);
}

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static uint64_t ext_of(uint64_t size)
{
    return size == 0 ? 64 : (size + 63) / 64 * 64;
}

#define RKEYS 40

/* Random puts, ends, revokes, removals, evictions, cold copies and stale
 * cleanups: memory use always equals what objects and puts hold, and the
 * log replays (once, or each record twice) to the same state. */
static void test_random_ops_consistent(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    dyn_log log = {0};
    obj_record r = {0};
    const char *segs[3] = {"s0", "s1", "s2"};
    const uint64_t caps[3] = {4096, 8192, 2048};
    for (int i = 0; i < 3; i++) {
        char node[8];
        snprintf(node, sizeof(node), "n%d", i);
        assert_int_equal(obj_prepare_segment_mount(st, segs[i], node, caps[i], &r), SMP_OK);
        dyn_apply(st, &log, &r);
    }
    int64_t inflight[RKEYS];
    uint64_t started[RKEYS];
    for (int i = 0; i < RKEYS; i++) inflight[i] = -1;
    uint64_t x = 12345, now = 1;
    size_t evictions = 0;
    char key[16];
    for (int step = 0; step < 4000; step++, now++) {
        int k = (int)(rnd(&x) % RKEYS);
        snprintf(key, sizeof(key), "r/%02d", k);
        int op = (int)(rnd(&x) % 8);
        if (op == 0) {
            obj_put_params p = {key, rnd(&x) % 700, (smp_data_type)(rnd(&x) % 3), "",
                                (rnd(&x) & 1) ? "ta" : "", 0, (int)(rnd(&x) & 1), NULL, 0};
            int rc = obj_put_start(st, &p, now, NULL);
            if (rc == SMP_OK) {
                inflight[k] = (int64_t)p.size;
                started[k] = now;
            } else {
                assert_true(rc == SMP_EEXIST || rc == SMP_EBUSY || rc == SMP_ENOSPC);
            }
        } else if (op == 1 || op == 2) {
            uint8_t sum[32] = {(uint8_t)k};
            int rc = op == 1 ? obj_prepare_put_end(st, key, sum, now, &r)
                             : obj_prepare_put_revoke(st, key, &r);
            assert_int_equal(rc, inflight[k] >= 0 ? SMP_OK : SMP_ENOTFOUND);
            if (rc == SMP_OK) {
                dyn_apply(st, &log, &r);
                inflight[k] = -1;
            }
        } else if (op == 3) {
            int rc = obj_prepare_remove(st, key, now, &r);
            assert_int_equal(rc, obj_exists(st, key) ? SMP_OK : SMP_ENOTFOUND);
            if (rc == SMP_OK) dyn_apply(st, &log, &r);
        } else if (op == 4) {
            obj_record_list l = {0};
            assert_int_equal(obj_plan_eviction(st, 0.6, 0.3, now, &l, NULL), SMP_OK);
            evictions += l.n;
            for (size_t i = 0; i < l.n; i++) dyn_apply(st, &log, &l.recs[i]);
            obj_record_list_free(&l);
        } else if (op == 5 && obj_exists(st, key)) {
            obj_replica reps[4];
            size_t n = 0;
            int rc = obj_get_replica_list(st, key, 0, 0, reps, 4, &n); /* now 0: no touch */
            if (rc == SMP_OK && n < 4) {
                reps[n] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_COMPLETE, "n0", NULL, 0,
                                        1, "/cold"};
                assert_int_equal(obj_prepare_set_replicas(st, key, reps, n + 1, &r), SMP_OK);
                dyn_apply(st, &log, &r);
            }
        } else if (op == 6) {
            int freed = obj_cleanup_stale_puts(st, now, 200);
            int expect = 0;
            for (int i = 0; i < RKEYS; i++) {
                if (inflight[i] >= 0 && now - started[i] >= 200) {
                    inflight[i] = -1;
                    expect++;
                }
            }
            assert_int_equal(freed, expect);
        }
        /* Memory use is exactly what complete memory replicas and puts hold. */
        uint64_t want = 0;
        for (int i = 0; i < RKEYS; i++) {
            char kk[16];
            snprintf(kk, sizeof(kk), "r/%02d", i);
            smp_object_info info = {.struct_size = sizeof(info)};
            if (obj_exists(st, kk)) {
                assert_int_equal(obj_object_info(st, kk, &info), SMP_OK);
                want += ext_of(info.size) * info.memory_replicas_readable;
            }
            if (inflight[i] >= 0) want += ext_of((uint64_t)inflight[i]);
        }
        assert_int_equal(used_of(st), want);
    }
    assert_true(log.n > 300);
    assert_true(evictions > 0);

    /* Drop the puts (soft state) and compare with replays and a snapshot. */
    obj_cleanup_stale_puts(st, now, 0);
    assert_dyn_log_replays(st, &log);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* A pipeline with a slow OpLog                                             */
/* ------------------------------------------------------------------------ */

/* The master's pipeline with a slow OpLog: records are prepared against the
 * current state, appended to a queue (and held), and applied a few steps
 * later, while puts, reads with leases, cleanups and segment changes go on.
 * Every apply succeeds, memory use always matches what is held, and the log
 * of applied records replays to the same state. */
typedef struct pipe_q {
    obj_record *recs;
    obj_held **held;
    size_t head, n, cap;
} pipe_q;

static void pipe_push(obj_store *st, pipe_q *q, obj_record *r)
{
    if (q->n == q->cap) {
        q->cap = q->cap ? q->cap * 2 : 64;
        q->recs = realloc(q->recs, q->cap * sizeof(*q->recs));
        q->held = realloc(q->held, q->cap * sizeof(*q->held));
        assert_non_null(q->recs);
        assert_non_null(q->held);
    }
    assert_int_equal(obj_hold_record(st, r, &q->held[q->n]), SMP_OK);
    q->recs[q->n++] = *r;
    memset(r, 0, sizeof(*r));
}

static void pipe_apply_one(obj_store *st, pipe_q *q, dyn_log *log)
{
    if (q->head == q->n) return;
    obj_held *held = q->held[q->head];
    obj_record *r = &q->recs[q->head++];
    obj_record copy = *r;
    memset(r, 0, sizeof(*r));
    /* every other held record applies from its hold (the master's way),
     * the rest from its bytes; the log replays to the same state either way */
    dyn_apply_held(st, log, &copy, q->head % 2 ? held : NULL);
    obj_release_hold(st, held);
}

static void test_random_pipeline_consistent(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    dyn_log log = {0};
    pipe_q q = {0};
    obj_record r = {0};
    const char *segs[3] = {"s0", "s1", "s2"};
    for (int i = 0; i < 3; i++) {
        char node[8];
        snprintf(node, sizeof(node), "n%d", i);
        assert_int_equal(obj_prepare_segment_mount(st, segs[i], node, 2048u << i, &r), SMP_OK);
        dyn_apply(st, &log, &r);
    }
    set_managed(st, "grp", 0);
    uint64_t x = 987654321, now = 1;
    size_t adds = 0;
    char key[16];
    for (int step = 0; step < 6000; step++, now++) {
        snprintf(key, sizeof(key), "r/%02d", (int)(rnd(&x) % 12));
        switch (rnd(&x) % 11) {
        case 0:
        case 1: {
            char node[8];
            snprintf(node, sizeof(node), "n%d", (int)(rnd(&x) % 3));
            obj_put_params p = {key, rnd(&x) % 600, (smp_data_type)(rnd(&x) % 3),
                                (rnd(&x) % 4) ? "" : "grp", "", 0, (int)(rnd(&x) & 1),
                                (rnd(&x) & 1) ? node : NULL, 0};
            int rc = obj_put_start(st, &p, now, NULL);
            assert_true(rc == SMP_OK || rc == SMP_EEXIST || rc == SMP_EBUSY ||
                        rc == SMP_ENOSPC || rc == SMP_EVETO); /* grp managed, no guard */
            break;
        }
        case 2: {
            uint8_t sum[32] = {(uint8_t)now};
            if (obj_prepare_put_end(st, key, sum, now, &r) == SMP_OK) pipe_push(st, &q, &r);
            break;
        }
        case 3:
            if (obj_prepare_put_revoke(st, key, &r) == SMP_OK) pipe_push(st, &q, &r);
            break;
        case 4:
            if (obj_prepare_remove(st, key, now, &r) == SMP_OK) pipe_push(st, &q, &r);
            break;
        case 5: {
            obj_record_list l = {0};
            assert_int_equal(obj_plan_eviction(st, 0.5, 0.25, now, &l, NULL), SMP_OK);
            for (size_t i = 0; i < l.n; i++) pipe_push(st, &q, &l.recs[i]);
            obj_record_list_free(&l);
            break;
        }
        case 6: {
            obj_replica reps[4];
            size_t n = 0;
            /* now 0: no access refresh (soft, not logged); lease until now+20 */
            int rc = obj_get_replica_list(st, key, 0, now + 20, reps, 4, &n);
            if (rc == SMP_OK && n < 4 && (rnd(&x) & 1)) {
                reps[n] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_COMPLETE, "n0", NULL, 0,
                                        1, "/cold"};
                assert_int_equal(obj_prepare_set_replicas(st, key, reps, n + 1, &r), SMP_OK);
                pipe_push(st, &q, &r);
            }
            break;
        }
        case 7:
            if (obj_prepare_set_pin(st, key, (int)(rnd(&x) & 1), &r) == SMP_OK)
                pipe_push(st, &q, &r);
            break;
        case 8:
            obj_cleanup_stale_puts(st, now, 10); /* shorter than the OpLog's delay */
            break;
        case 10: {
            /* One more memory copy: reserve, then commit or release. */
            char node[8];
            snprintf(node, sizeof(node), "n%d", (int)(rnd(&x) % 3));
            int rc = obj_reserve_replica(st, key, node, now, NULL);
            assert_true(rc == SMP_OK || rc == SMP_ENOTFOUND || rc == SMP_EBUSY ||
                        rc == SMP_ENOSPC);
            if (rnd(&x) % 4 == 0) {
                rc = obj_release_reservation(st, key);
                assert_true(rc == SMP_OK || rc == SMP_ENOTFOUND);
            } else if (obj_prepare_add_replica(st, key, NULL, &r) == SMP_OK) {
                pipe_push(st, &q, &r);
                adds++;
            }
            break;
        }
        case 9:
            if (rnd(&x) % 8 == 0) {
                /* Against the applied state: the queue may hold the opposite. */
                int rc = obj_prepare_segment_unmount(st, "s2", &r);
                if (rc == SMP_ENOTFOUND) rc = obj_prepare_segment_mount(st, "s2", "n2", 8192, &r);
                assert_int_equal(rc, SMP_OK);
                pipe_push(st, &q, &r);
            } else if (rnd(&x) % 8 == 0) {
                assert_int_equal(obj_prepare_group_managed(st, "grp", TEST_OWNER, (int)(rnd(&x) & 1), &r),
                                 SMP_OK);
                pipe_push(st, &q, &r);
            }
            break;
        default:
            break;
        }
        if (rnd(&x) % 25 == 0) /* the OpLog makes a burst durable */
            while (q.head < q.n) pipe_apply_one(st, &q, &log);
    }
    while (q.head < q.n) pipe_apply_one(st, &q, &log);
    free(q.recs);
    free(q.held);
    obj_cleanup_stale_puts(st, now, 0);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.puts_in_flight, 0);
    assert_int_equal(s.reservations_in_flight, 0);
    assert_true(adds > 20);
    assert_true(log.n > 400);
    assert_true(s.replicas_dropped > 0); /* the races did happen */
    assert_true(s.puts_cancelled > 0);

    /* Memory use is what the objects' memory replicas hold; no holds left. */
    uint64_t want = 0;
    for (int i = 0; i < RKEYS; i++) {
        snprintf(key, sizeof(key), "r/%02d", i);
        smp_object_info info = {.struct_size = sizeof(info)};
        if (obj_object_info(st, key, &info) != SMP_OK) continue;
        want += ext_of(info.size) * info.memory_replicas_readable;
        obj_replica reps[4];
        size_t n;
        assert_int_not_equal(obj_get_replica_list(st, key, 0, 0, reps, 4, &n), SMP_EBUSY);
    }
    assert_int_equal(used_of(st), want);

    assert_dyn_log_replays(st, &log);
    obj_store_destroy(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_ops_consistent),
        cmocka_unit_test(test_random_pipeline_consistent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
