/* test_obj_replicas.c -- unit tests of the object store's memory replicas
 * beyond the first (host_shim/master/obj_store*.c): reserving and adding one
 * to a complete object (add-replica records, their races with removal,
 * overwrite, puts and unmounts, malformed ones), the COLD -> HOT path, where
 * a reservation is placed, and the replica queries of the node data plane
 * (visit by node, an object's replicas).
 *
 * Every durable change goes through prepare + apply (obj_test_store.h);
 * replays and snapshots are compared with the state they came from. */
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
#include "obj_test_store.h"

/* ------------------------------------------------------------------------ */
/* Adding a memory replica, replica queries                                  */
/* ------------------------------------------------------------------------ */

static obj_stats stats_of(const obj_store *st)
{
    obj_stats s;
    obj_store_stats(st, &s);
    return s;
}

/* Reserve and commit one more memory replica of key; returns the ticket. */
static obj_put_ticket add_replica(obj_store *st, const char *key, const char *node, uint64_t now)
{
    obj_put_ticket t;
    assert_int_equal(obj_reserve_replica(st, key, node, now, &t), SMP_OK);
    obj_record r = {0};
    assert_int_equal(obj_prepare_add_replica(st, key, &t, &r), SMP_OK);
    apply_rec(st, &r);
    return t;
}

static void assert_same_bytes(const buf *a, const buf *b)
{
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->p, b->p, a->n);
}

/* A reservation plus its add-replica record give the object a second memory
 * replica, both counted in memory use; applying the record again changes
 * nothing; replay (fresh, doubled, and snapshot + the log's tail) and a
 * snapshot of the result agree. The record holds nothing. */
static void test_add_replica_reserve_and_add(void **state)
{
    (void)state;
    static rec_log log;
    g_log = &log;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 4096);
    mount(st, "s1", "n1", 4096);
    assert_int_equal(put_full(st, "k", 100, "g", "t", 5), SMP_OK);
    assert_int_equal(put_full(st, "other", 10, "", "", 6), SMP_OK);
    assert_int_equal(used_of(st), 128 + 64);
    buf before_add = save(st);
    size_t log_before_add = log.n;

    obj_put_ticket t;
    assert_int_equal(obj_reserve_replica(st, "k", "n1", 7, &t), SMP_OK);
    assert_string_equal(t.segment, "s1");
    assert_string_equal(t.node, "n1");
    assert_int_equal(t.offset % OBJ_ALIGN, 0);
    assert_int_equal(t.length, 100);
    assert_int_equal(used_of(st), 128 + 64 + 128);
    assert_int_equal(stats_of(st).reservations_in_flight, 1);
    assert_int_equal(obj_reserve_replica(st, "k", "n1", 7, NULL), SMP_EBUSY);
    /* The reservation is soft: nothing durable changed yet. */
    buf reserved = save(st);
    assert_same_bytes(&before_add, &reserved);
    free(reserved.p);

    obj_record r = {0};
    obj_put_ticket wrong = t;
    wrong.offset += OBJ_ALIGN;
    assert_int_equal(obj_prepare_add_replica(st, "k", &wrong, &r), SMP_EINVAL);
    wrong = t;
    wrong.segment = "s0";
    assert_int_equal(obj_prepare_add_replica(st, "k", &wrong, &r), SMP_EINVAL);
    assert_int_equal(obj_prepare_add_replica(st, "other", NULL, &r), SMP_ENOTFOUND);
    assert_int_equal(obj_prepare_add_replica(st, "nope", NULL, &r), SMP_ENOTFOUND);
    assert_int_equal(obj_prepare_add_replica(st, "k", &t, &r), SMP_OK);
    assert_int_equal(r.type, OBJ_REC_PUT_END);
    char line[256];
    assert_true(obj_describe_record(r.type, r.encver, r.buf, r.len, line, sizeof(line)) > 0);
    assert_non_null(strstr(line, "PUT_END add_replica key=k"));
    assert_non_null(strstr(line, "segment=s1"));

    /* Adding a copy removes nothing: no hold, reads go on. */
    obj_replica reps[4];
    size_t n;
    obj_held *held = NULL;
    assert_int_equal(obj_hold_record(st, &r, &held), SMP_OK);
    assert_null(held); /* an add-replica record removes nothing */
    assert_int_equal(obj_get_replica_list(st, "k", 0, 0, reps, 4, &n), SMP_OK);
    obj_release_hold(st, held);
    obj_record again = {r.type, r.encver, malloc(r.len ? r.len : 1), r.len, NULL};
    assert_non_null(again.buf);
    memcpy(again.buf, r.buf, r.len);
    apply_rec(st, &r);

    assert_int_equal(obj_object_replicas(st, "k", reps, 4, &n), SMP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(reps[0].kind, SMP_REPLICA_MEMORY);
    assert_string_equal(reps[0].segment, "s0");
    assert_int_equal(reps[1].kind, SMP_REPLICA_MEMORY);
    assert_int_equal(reps[1].status, OBJ_REPLICA_COMPLETE);
    assert_string_equal(reps[1].segment, "s1");
    assert_string_equal(reps[1].node, "n1");
    assert_int_equal(reps[1].offset, t.offset);
    assert_int_equal(reps[1].length, 100);
    assert_int_equal(obj_get_replica_list(st, "k", 0, 0, reps, 4, &n), SMP_OK);
    assert_int_equal(n, 2);
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(st, "k", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 2);
    uint64_t objs, bytes;
    obj_tenant_usage(st, "t", &objs, &bytes); /* an object's bytes, not its copies' */
    assert_int_equal(objs, 1);
    assert_int_equal(bytes, 100);
    assert_int_equal(obj_group_count(st, "g"), 1);
    obj_stats s = stats_of(st);
    assert_int_equal(s.replicas_by_kind[SMP_REPLICA_MEMORY], 3);
    assert_int_equal(s.replica_bytes_by_kind[SMP_REPLICA_MEMORY], 210);
    assert_int_equal(s.reservations_in_flight, 0);
    assert_int_equal(s.replicas_dropped, 0);
    assert_int_equal(used_of(st), 128 + 64 + 128);
    assert_int_equal(obj_prepare_add_replica(st, "k", NULL, &r), SMP_ENOTFOUND); /* consumed */
    assert_int_equal(obj_release_reservation(st, "k"), SMP_ENOTFOUND);

    /* Applying the record twice adds nothing. */
    buf once = save(st);
    apply_rec(st, &again);
    buf twice = save(st);
    assert_same_bytes(&once, &twice);
    free(twice.p);
    assert_int_equal(used_of(st), 128 + 64 + 128);
    assert_int_equal(stats_of(st).replicas_by_kind[SMP_REPLICA_MEMORY], 3);
    g_log = NULL;

    /* Replay: fresh, every record twice, and snapshot before the add + tail. */
    obj_store *a = replay_log(&log, 0, log.n, NULL);
    assert_same_state(st, a);
    obj_store *b = new_store(NULL);
    for (size_t i = 0; i < log.n; i++) replay_log(&log, i, i + 1, replay_log(&log, i, i + 1, b));
    assert_same_state(st, b);
    obj_store *c = new_store(NULL);
    assert_int_equal(obj_store_load(c, before_add.p, before_add.n), SMP_OK);
    replay_log(&log, log_before_add, log.n, c);
    assert_same_state(st, c);
    /* Snapshot after the add, round trip, and a log overlapping it. */
    obj_store *d = new_store(NULL);
    assert_int_equal(obj_store_load(d, once.p, once.n), SMP_OK);
    assert_same_state(st, d);
    assert_int_equal(used_of(d), 128 + 64 + 128);
    replay_log(&log, log_before_add, log.n, d);
    assert_same_state(st, d);
    /* The loaded allocator knows the added range. */
    obj_put_params p = {"fill", 4096 - 128 + 1, SMP_DATA_KV, "", "", 0, 0, "n1", 0};
    assert_int_equal(obj_put_start(d, &p, 9, NULL), SMP_ENOSPC);
    p.size = 4096 - 128;
    assert_int_equal(obj_put_start(d, &p, 9, NULL), SMP_OK);

    free(once.p);
    free(before_add.p);
    free_log(&log);
    obj_store_destroy(a);
    obj_store_destroy(b);
    obj_store_destroy(c);
    obj_store_destroy(d);
    obj_store_destroy(st);
}

/* The COLD -> HOT path: an object evicted to its cold replica gets a memory
 * replica back, becomes readable from memory and evictable again. */
static void test_add_replica_cold_to_hot(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 1024);
    assert_int_equal(put_full(st, "w", 300, "", "", 1), SMP_OK);
    obj_replica reps[3];
    size_t n;
    assert_int_equal(obj_object_replicas(st, "w", reps, 3, &n), SMP_OK);
    reps[1] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_COMPLETE, "n0", NULL, 0, 300, "/c/w"};
    obj_record r = {0};
    assert_int_equal(obj_prepare_set_replicas(st, "w", reps, 2, &r), SMP_OK);
    apply_rec(st, &r);
    obj_record_list l = {0};
    assert_int_equal(obj_plan_eviction(st, 0.0, 0.0, 2, &l, NULL), SMP_OK);
    assert_int_equal(l.n, 1);
    apply_list(st, &l);
    assert_int_equal(used_of(st), 0);
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(st, "w", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 0);
    assert_int_equal(info.cold_replicas_readable, 1);

    obj_put_ticket t = add_replica(st, "w", "n0", 3);
    assert_string_equal(t.segment, "s0");
    assert_int_equal(used_of(st), 320);
    assert_int_equal(obj_object_info(st, "w", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 1);
    assert_int_equal(info.cold_replicas_readable, 1);
    assert_int_equal(obj_object_replicas(st, "w", reps, 3, &n), SMP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(reps[0].kind, SMP_REPLICA_COLD); /* kept, in place */
    assert_string_equal(reps[0].path, "/c/w");
    assert_int_equal(reps[1].kind, SMP_REPLICA_MEMORY);
    /* Back on the LRU list: an eviction plan drops the memory copy again. */
    assert_int_equal(obj_plan_eviction(st, 0.0, 0.0, 4, &l, NULL), SMP_OK);
    assert_int_equal(l.n, 1);
    apply_list(st, &l);
    assert_int_equal(used_of(st), 0);
    obj_store_destroy(st);
}

/* memory.evict_without_cold_copy: false -- an eviction drops the memory
 * replica of an object with a cold copy and leaves one without alone, even
 * when that leaves use above the watermark; by default it removes it. */
static void test_eviction_can_keep_objects_without_a_cold_copy(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 1024);
    assert_int_equal(put_full(st, "plain", 300, "", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "copied", 300, "", "", 2), SMP_OK);
    obj_replica reps[3];
    size_t n;
    assert_int_equal(obj_object_replicas(st, "copied", reps, 3, &n), SMP_OK);
    reps[n] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_COMPLETE, "n0", NULL, 0, 300, "/c/c"};
    obj_record r = {0};
    assert_int_equal(obj_prepare_set_replicas(st, "copied", reps, n + 1, &r), SMP_OK);
    apply_rec(st, &r);
    uint64_t before = used_of(st);

    obj_store_keep_uncopied(st, 1);
    obj_record_list l = {0};
    uint64_t planned = 0;
    assert_int_equal(obj_plan_eviction(st, 0.0, 0.0, 3, &l, &planned), SMP_OK);
    assert_int_equal(l.n, 1);
    apply_list(st, &l);
    assert_true(used_of(st) < before && used_of(st) > 0);
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(st, "plain", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 1);
    assert_int_equal(obj_object_info(st, "copied", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 0);
    assert_int_equal(info.cold_replicas_readable, 1);
    /* nothing more it may evict: no plan */
    assert_int_equal(obj_plan_eviction(st, 0.0, 0.0, 4, &l, &planned), SMP_OK);
    assert_int_equal(l.n, 0);
    assert_int_equal(planned, 0);

    obj_store_keep_uncopied(st, 0);
    assert_int_equal(obj_plan_eviction(st, 0.0, 0.0, 5, &l, NULL), SMP_OK);
    assert_int_equal(l.n, 1);
    apply_list(st, &l);
    assert_int_equal(obj_object_info(st, "plain", &info), SMP_ENOTFOUND);
    assert_int_equal(used_of(st), 0);
    obj_store_destroy(st);
}

/* An add-replica record about a removed or replaced incarnation is a no-op:
 * it adds nothing, frees its own reservation, and frees no reservation of
 * the new incarnation even when that one holds the very same range. */
static void test_add_replica_after_remove_or_overwrite(void **state)
{
    (void)state;
    static rec_log log;
    g_log = &log;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 1024);
    mount(st, "s1", "n1", 1024);
    uint8_t sum[32] = {3};
    obj_record r = {0}, add = {0};

    /* Removed between prepare and apply. */
    assert_int_equal(put_full(st, "gone", 100, "", "", 1), SMP_OK);
    assert_int_equal(obj_reserve_replica(st, "gone", "n1", 2, NULL), SMP_OK);
    assert_int_equal(obj_prepare_add_replica(st, "gone", NULL, &add), SMP_OK);
    remove_key(st, "gone", 3);
    assert_int_equal(used_of(st), 128); /* only the reservation */
    assert_int_equal(obj_prepare_add_replica(st, "gone", NULL, &r), SMP_ENOTFOUND);
    apply_rec(st, &add);
    assert_false(obj_exists(st, "gone"));
    assert_int_equal(used_of(st), 0);
    assert_int_equal(stats_of(st).reservations_in_flight, 0);
    assert_int_equal(stats_of(st).replicas_dropped, 0);

    /* Overwritten between prepare and apply. */
    assert_int_equal(put_full(st, "k", 100, "", "", 4), SMP_OK);
    assert_int_equal(obj_reserve_replica(st, "k", "n1", 5, NULL), SMP_OK);
    assert_int_equal(obj_prepare_add_replica(st, "k", NULL, &add), SMP_OK);
    obj_put_params p = {"k", 200, SMP_DATA_KV, "", "", 0, 1, "n0", 0};
    assert_int_equal(obj_put_start(st, &p, 6, NULL), SMP_OK);
    assert_int_equal(obj_prepare_put_end(st, "k", sum, 6, &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(used_of(st), 256 + 128);
    assert_int_equal(obj_prepare_add_replica(st, "k", NULL, &r), SMP_ENOTFOUND);
    apply_rec(st, &add);
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(st, "k", &info), SMP_OK);
    assert_int_equal(info.size, 200);
    assert_int_equal(info.memory_replicas_readable, 1);
    assert_int_equal(used_of(st), 256);
    assert_int_equal(stats_of(st).reservations_in_flight, 0);

    /* The stale record names the range a reservation of the new incarnation
     * holds now: it is left alone, and the new one's record adds it. */
    obj_put_ticket t1, t2;
    assert_int_equal(obj_reserve_replica(st, "k", "n1", 7, &t1), SMP_OK);
    assert_int_equal(obj_prepare_add_replica(st, "k", &t1, &add), SMP_OK);
    assert_int_equal(obj_release_reservation(st, "k"), SMP_OK);
    assert_int_equal(used_of(st), 256);
    p.overwrite = 1;
    p.size = 150;
    assert_int_equal(obj_put_start(st, &p, 8, NULL), SMP_OK);
    assert_int_equal(obj_prepare_put_end(st, "k", sum, 8, &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(obj_reserve_replica(st, "k", "n1", 9, &t2), SMP_OK);
    assert_string_equal(t2.segment, t1.segment);
    assert_int_equal(t2.offset, t1.offset);
    uint64_t used = used_of(st);
    apply_rec(st, &add); /* stale: incarnation of the 200-byte object */
    assert_int_equal(used_of(st), used);
    assert_int_equal(stats_of(st).reservations_in_flight, 1);
    assert_int_equal(obj_object_info(st, "k", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 1);
    assert_int_equal(obj_prepare_add_replica(st, "k", &t2, &add), SMP_OK);
    apply_rec(st, &add);
    assert_int_equal(obj_object_info(st, "k", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 2);
    assert_int_equal(used_of(st), used);
    assert_int_equal(stats_of(st).reservations_in_flight, 0);
    g_log = NULL;

    assert_log_replays(st, &log);
    obj_store_destroy(st);
}

/* Reservations are soft state: ENOSPC with no room, released on a failed
 * load, cleaned up when stale (no guard asked), dropped with their segment,
 * and yielding to records that claim their range. A record whose
 * reservation is gone still adds the replica when the range is free, taking
 * it from an in-flight put as replay would. */
static void test_add_replica_reservations(void **state)
{
    (void)state;
    static rec_log log;
    g_log = &log;
    test_guard g = {.veto = 1, .loaded = 1}; /* loaded, vetoes everything */
    obj_store *st = new_store(&g);
    mount(st, "s0", "n0", 256);
    obj_put_params p = {"k", 200, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_OK);
    uint8_t sum[32] = {5};
    obj_record r = {0}, add = {0};
    assert_int_equal(obj_prepare_put_end(st, "k", sum, 1, &r), SMP_OK);
    apply_rec(st, &r);

    assert_int_equal(obj_reserve_replica(st, "nope", NULL, 2, NULL), SMP_ENOTFOUND);
    assert_int_equal(obj_reserve_replica(st, "", NULL, 2, NULL), SMP_EINVAL);
    assert_int_equal(obj_release_reservation(st, "k"), SMP_ENOTFOUND);
    buf full = save(st);
    assert_int_equal(obj_reserve_replica(st, "k", "n0", 2, NULL), SMP_ENOSPC);
    assert_int_equal(used_of(st), 256);
    assert_int_equal(stats_of(st).reservations_in_flight, 0);
    buf after = save(st);
    assert_same_bytes(&full, &after);
    free(full.p);
    free(after.p);

    /* Elsewhere when the preferred node is full; a release frees it. */
    mount(st, "s1", "n1", 1024);
    obj_put_ticket t;
    assert_int_equal(obj_reserve_replica(st, "k", "n0", 2, &t), SMP_OK);
    assert_string_equal(t.segment, "s1");
    assert_int_equal(used_of(st), 512);
    assert_int_equal(obj_release_reservation(st, "k"), SMP_OK);
    assert_int_equal(used_of(st), 256);
    assert_int_equal(obj_release_reservation(st, "k"), SMP_ENOTFOUND);
    assert_int_equal(obj_prepare_add_replica(st, "k", NULL, &r), SMP_ENOTFOUND);

    /* Stale cleanup frees it without asking the (vetoing) guard. */
    assert_int_equal(obj_reserve_replica(st, "k", NULL, 100, NULL), SMP_OK);
    assert_int_equal(obj_cleanup_stale_puts(st, 150, 100), 0);
    assert_int_equal(used_of(st), 512);
    int calls = g.calls;
    assert_int_equal(obj_cleanup_stale_puts(st, 200, 100), 1);
    assert_int_equal(g.calls, calls);
    assert_int_equal(used_of(st), 256);
    assert_int_equal(stats_of(st).reservations_in_flight, 0);

    /* Its record still applies after the cleanup: the range is free. */
    assert_int_equal(obj_reserve_replica(st, "k", NULL, 300, &t), SMP_OK);
    assert_int_equal(obj_prepare_add_replica(st, "k", &t, &add), SMP_OK);
    assert_int_equal(obj_cleanup_stale_puts(st, 1000, 10), 1);
    assert_int_equal(used_of(st), 256);
    apply_rec(st, &add);
    assert_int_equal(used_of(st), 512);
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(st, "k", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 2);

    /* A record whose released range a put took meanwhile cancels the put. */
    obj_replica reps[4];
    size_t n;
    assert_int_equal(obj_object_replicas(st, "k", reps, 4, &n), SMP_OK);
    assert_int_equal(n, 2);
    reps[0] = reps[1]; /* keep only the copy in s1 */
    assert_int_equal(obj_prepare_set_replicas(st, "k", reps, 1, &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(used_of(st), 256);
    assert_int_equal(obj_reserve_replica(st, "k", "n0", 1001, &t), SMP_OK);
    assert_string_equal(t.segment, "s0");
    assert_int_equal(obj_prepare_add_replica(st, "k", &t, &add), SMP_OK);
    assert_int_equal(obj_release_reservation(st, "k"), SMP_OK);
    g.loaded = 0;
    obj_put_params q = {"p", 10, SMP_DATA_KV, "", "", 0, 0, "n0", 0};
    obj_put_ticket qt;
    assert_int_equal(obj_put_start(st, &q, 1002, &qt), SMP_OK);
    assert_string_equal(qt.segment, "s0");
    assert_int_equal(qt.offset, t.offset);
    apply_rec(st, &add);
    obj_stats s = stats_of(st);
    assert_int_equal(s.puts_cancelled, 1);
    assert_int_equal(s.puts_in_flight, 0);
    assert_int_equal(obj_prepare_put_end(st, "p", sum, 1003, &r), SMP_ENOTFOUND);
    assert_int_equal(obj_object_info(st, "k", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 2);

    /* A PUT_END claiming a reserved range cancels the reservation. */
    assert_int_equal(obj_prepare_set_replicas(st, "k", reps, 1, &r), SMP_OK);
    apply_rec(st, &r); /* s0 free again */
    obj_record end = {0};
    assert_int_equal(obj_put_start(st, &q, 1004, &qt), SMP_OK);
    assert_int_equal(obj_prepare_put_end(st, "p", sum, 1004, &end), SMP_OK);
    assert_int_equal(obj_prepare_put_revoke(st, "p", &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(obj_reserve_replica(st, "k", "n0", 1005, &t), SMP_OK);
    assert_string_equal(t.segment, "s0");
    assert_int_equal(t.offset, qt.offset);
    apply_rec(st, &end);
    s = stats_of(st);
    assert_int_equal(s.reservations_cancelled, 1);
    assert_int_equal(s.reservations_in_flight, 0);
    assert_int_equal(obj_prepare_add_replica(st, "k", &t, &r), SMP_ENOTFOUND);
    assert_true(obj_exists(st, "p"));

    /* Unmounting its segment drops a reservation. */
    mount(st, "s2", "n2", 1024);
    assert_int_equal(obj_reserve_replica(st, "k", "n2", 1006, &t), SMP_OK);
    assert_string_equal(t.segment, "s2");
    assert_int_equal(obj_prepare_add_replica(st, "k", &t, &add), SMP_OK);
    assert_int_equal(obj_prepare_segment_unmount(st, t.segment, &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(stats_of(st).reservations_in_flight, 0);
    uint64_t dropped = stats_of(st).replicas_dropped;
    apply_rec(st, &add); /* its segment is gone: nothing added */
    assert_int_equal(stats_of(st).replicas_dropped, dropped + 1);
    assert_int_equal(obj_object_info(st, "k", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 1);
    g_log = NULL;

    assert_log_replays(st, &log);
    obj_store_destroy(st);
}

/* Malformed add-replica records are refused and change nothing. */
static void test_add_replica_malformed(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 4096);
    assert_int_equal(put_full(st, "k", 100, "", "", 1), SMP_OK);
    obj_record add = {0};
    assert_int_equal(obj_reserve_replica(st, "k", NULL, 2, NULL), SMP_OK);
    assert_int_equal(obj_prepare_add_replica(st, "k", NULL, &add), SMP_OK);
    Hostrec__ObjectRecord *m = hostrec__object_record__unpack(NULL, add.len, add.buf);
    assert_non_null(m);
    assert_non_null(m->add_replica);
    assert_true(m->update_only);
    assert_int_equal(m->n_replicas, 2); /* the whole list, for older readers */
    uint8_t *b;
    size_t len;

    m->update_only = 0;
    pack_object(m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    m->update_only = 1;
    m->add_replica->kind = SMP_REPLICA_COLD;
    pack_object(m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    m->add_replica->kind = SMP_REPLICA_MEMORY;
    m->add_replica->length = 99;
    pack_object(m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    m->add_replica->length = 100;
    m->add_replica->offset += 1;
    pack_object(m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    m->add_replica->offset -= 1;
    char *seg = m->add_replica->segment;
    m->add_replica->segment = "";
    pack_object(m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    m->add_replica->segment = seg;
    hostrec__object_record__free_unpacked(m, NULL);
    assert_int_equal(stats_of(st).reservations_in_flight, 1);
    apply_rec(st, &add);
    assert_int_equal(stats_of(st).reservations_in_flight, 0);
    obj_store_destroy(st);
}

typedef struct seen_rep {
    char key[16];
    smp_replica_kind kind;
    obj_replica_status status;
    char node[8];
} seen_rep;

typedef struct seen_list {
    seen_rep v[16];
    size_t n;
    size_t stop_after; /* 0: never */
} seen_list;

static int collect_replica(void *arg, const char *key, const obj_replica *rep)
{
    seen_list *l = arg;
    assert_true(l->n < 16);
    seen_rep *s = &l->v[l->n++];
    snprintf(s->key, sizeof(s->key), "%s", key);
    snprintf(s->node, sizeof(s->node), "%s", rep->node);
    s->kind = rep->kind;
    s->status = rep->status;
    if (rep->kind == SMP_REPLICA_MEMORY) assert_non_null(rep->segment);
    else assert_non_null(rep->path);
    return l->stop_after && l->n == l->stop_after;
}

/* Replica queries see every replica, memory and cold, of any status, in key
 * order; obj_object_replicas touches neither leases nor access times and is
 * not refused by holds. */
static void test_visit_and_object_replicas(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 4096);
    mount(st, "s1", "n1", 4096);
    obj_put_params p = {"c", 100, SMP_DATA_KV, "", "", 0, 0, "n0", 0};
    uint8_t sum[32] = {1};
    obj_record r = {0};
    const char *keys[3] = {"c", "a", "b"};
    const char *nodes[3] = {"n0", "n0", "n1"};
    for (int i = 0; i < 3; i++) {
        p.key = keys[i];
        p.prefer_node = nodes[i];
        assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_OK);
        assert_int_equal(obj_prepare_put_end(st, keys[i], sum, 1, &r), SMP_OK);
        apply_rec(st, &r);
    }
    /* a: memory on n0 + complete cold on n1; c: memory n0 + n1, failed cold n0. */
    obj_replica reps[4];
    size_t n;
    assert_int_equal(obj_object_replicas(st, "a", reps, 4, &n), SMP_OK);
    assert_int_equal(n, 1);
    reps[1] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_COMPLETE, "n1", NULL, 0, 100, "/c/a"};
    assert_int_equal(obj_prepare_set_replicas(st, "a", reps, 2, &r), SMP_OK);
    apply_rec(st, &r);
    add_replica(st, "c", "n1", 2);
    assert_int_equal(obj_object_replicas(st, "c", reps, 4, &n), SMP_OK);
    assert_int_equal(n, 2);
    reps[2] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_FAILED, "n0", NULL, 0, 100, "/c/c"};
    assert_int_equal(obj_prepare_set_replicas(st, "c", reps, 3, &r), SMP_OK);
    apply_rec(st, &r);
    p.key = "d"; /* in flight only: not visited */
    assert_int_equal(obj_put_start(st, &p, 3, NULL), SMP_OK);

    seen_list l = {0};
    assert_int_equal(obj_visit_replicas(st, "n1", collect_replica, &l), 3);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.v[0].key, "a");
    assert_int_equal(l.v[0].kind, SMP_REPLICA_COLD);
    assert_string_equal(l.v[1].key, "b");
    assert_int_equal(l.v[1].kind, SMP_REPLICA_MEMORY);
    assert_string_equal(l.v[2].key, "c");
    assert_int_equal(l.v[2].kind, SMP_REPLICA_MEMORY);
    for (size_t i = 0; i < l.n; i++) assert_string_equal(l.v[i].node, "n1");

    memset(&l, 0, sizeof(l));
    assert_int_equal(obj_visit_replicas(st, "n0", collect_replica, &l), 3);
    assert_string_equal(l.v[0].key, "a");
    assert_string_equal(l.v[1].key, "c");
    assert_int_equal(l.v[1].kind, SMP_REPLICA_MEMORY);
    assert_string_equal(l.v[2].key, "c");
    assert_int_equal(l.v[2].kind, SMP_REPLICA_COLD);
    assert_int_equal(l.v[2].status, OBJ_REPLICA_FAILED);

    memset(&l, 0, sizeof(l));
    assert_int_equal(obj_visit_replicas(st, NULL, collect_replica, &l), 6);
    memset(&l, 0, sizeof(l));
    l.stop_after = 2;
    assert_int_equal(obj_visit_replicas(st, NULL, collect_replica, &l), 2);
    assert_int_equal(l.n, 2);
    memset(&l, 0, sizeof(l));
    assert_int_equal(obj_visit_replicas(st, "n9", collect_replica, &l), 0);
    assert_int_equal(obj_visit_replicas(st, NULL, NULL, NULL), SMP_EINVAL);

    /* A visit goes on after a key: from the next object in key order,
     * whether the key is an object's ("a") or lies between two ("bb");
     * nothing after the last; NULL from the first. */
    memset(&l, 0, sizeof(l));
    assert_int_equal(obj_visit_replicas_after(st, "n0", "a", collect_replica, &l), 2);
    assert_string_equal(l.v[0].key, "c");
    assert_string_equal(l.v[1].key, "c");
    memset(&l, 0, sizeof(l));
    assert_int_equal(obj_visit_replicas_after(st, "n1", "a", collect_replica, &l), 2);
    assert_string_equal(l.v[0].key, "b");
    assert_string_equal(l.v[1].key, "c");
    memset(&l, 0, sizeof(l));
    assert_int_equal(obj_visit_replicas_after(st, NULL, "bb", collect_replica, &l), 3);
    for (size_t i = 0; i < l.n; i++) assert_string_equal(l.v[i].key, "c");
    memset(&l, 0, sizeof(l));
    assert_int_equal(obj_visit_replicas_after(st, NULL, "c", collect_replica, &l), 0);
    assert_int_equal(obj_visit_replicas_after(st, NULL, NULL, collect_replica, &l), 6);
    assert_int_equal(obj_visit_replicas_after(st, NULL, "a", NULL, NULL), SMP_EINVAL);

    /* Every status, a short buffer, no lease, no access refresh, no hold. */
    buf before = save(st);
    assert_int_equal(obj_object_replicas(st, "c", reps, 2, &n), SMP_OK);
    assert_int_equal(n, 3);
    assert_string_equal(reps[1].segment, "s1");
    assert_int_equal(obj_object_replicas(st, "c", NULL, 0, &n), SMP_OK);
    assert_int_equal(n, 3);
    assert_int_equal(obj_object_replicas(st, "c", reps, 4, NULL), SMP_OK);
    assert_int_equal(reps[2].status, OBJ_REPLICA_FAILED);
    assert_string_equal(reps[2].path, "/c/c");
    assert_null(reps[2].segment);
    assert_int_equal(obj_object_replicas(st, "d", reps, 4, &n), SMP_ENOTFOUND);
    assert_int_equal(obj_object_replicas(st, "zz", reps, 4, &n), SMP_ENOTFOUND);
    assert_int_equal(obj_object_replicas(st, "", reps, 4, &n), SMP_EINVAL);
    assert_int_equal(obj_prepare_remove(st, "c", 0, &r), SMP_OK);
    obj_held *held = NULL;
    assert_int_equal(obj_hold_record(st, &r, &held), SMP_OK);
    assert_int_equal(obj_object_replicas(st, "c", reps, 4, &n), SMP_OK);
    assert_int_equal(obj_get_replica_list(st, "c", 50, 0, reps, 4, &n), SMP_EBUSY);
    obj_release_hold(st, held);
    obj_record_free(&r);
    buf after = save(st);
    assert_same_bytes(&before, &after);
    free(before.p);
    free(after.p);
    assert_int_equal(obj_prepare_remove(st, "c", 0, &r), SMP_OK); /* no lease taken */
    obj_record_free(&r);
    obj_store_destroy(st);
}

/* A reservation goes to the preferred node when it has room, else to the
 * segment with the most free bytes, segments already holding a memory copy
 * of the object last. */
static void test_reserve_replica_placement(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "big", "n0", 8192);
    mount(st, "small", "n1", 1024);
    assert_int_equal(put_full(st, "k", 500, "", "", 1), SMP_OK);
    obj_replica rep;
    size_t n;
    assert_int_equal(obj_object_replicas(st, "k", &rep, 1, &n), SMP_OK);
    assert_string_equal(rep.segment, "big");
    obj_put_ticket t;
    assert_int_equal(obj_reserve_replica(st, "k", NULL, 2, &t), SMP_OK);
    assert_string_equal(t.segment, "small"); /* not next to the copy it has */
    assert_int_equal(obj_release_reservation(st, "k"), SMP_OK);
    assert_int_equal(obj_reserve_replica(st, "k", "n0", 2, &t), SMP_OK);
    assert_string_equal(t.segment, "big"); /* the caller's preference first */
    assert_int_equal(obj_release_reservation(st, "k"), SMP_OK);
    obj_put_params p = {"fill", 1024 - 64, SMP_DATA_KV, "", "", 0, 0, "n1", 0};
    assert_int_equal(obj_put_start(st, &p, 3, &t), SMP_OK);
    assert_string_equal(t.segment, "small");
    assert_int_equal(obj_reserve_replica(st, "k", "n1", 4, &t), SMP_OK);
    assert_string_equal(t.segment, "big"); /* the preferred node has no room */
    assert_int_equal(obj_release_reservation(st, "k"), SMP_OK);
    assert_int_equal(used_of(st), 512 + 960); /* k and the put in flight */
    obj_store_destroy(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_replica_reserve_and_add),
        cmocka_unit_test(test_add_replica_cold_to_hot),
        cmocka_unit_test(test_eviction_can_keep_objects_without_a_cold_copy),
        cmocka_unit_test(test_add_replica_after_remove_or_overwrite),
        cmocka_unit_test(test_add_replica_reservations),
        cmocka_unit_test(test_add_replica_malformed),
        cmocka_unit_test(test_visit_and_object_replicas),
        cmocka_unit_test(test_reserve_replica_placement),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
