/* test_obj_store.c -- unit tests of the master's object metadata state
 * (host_shim/master/obj_store*.c) as puts and removals change it: puts, the
 * segment allocator, read leases, removal with and without a guard around
 * managed groups (and their owners), eviction planning, stale put cleanup,
 * prefix and group listing, key validation and put placement.
 *
 * OpLog records are test_obj_records', snapshots test_obj_snapshots',
 * randomised runs test_obj_random', adding a memory replica and the replica
 * queries test_obj_replicas'; the helpers they share are in
 * obj_test_store.h. */
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
#include "utf8_offsets.h"

/* ------------------------------------------------------------------------ */
/* Puts and the allocator                                                     */
/* ------------------------------------------------------------------------ */

/* A put reserves memory at start, becomes a complete object only when its
 * PUT_END record is applied, and a revoke gives the range back; while in
 * flight it is its owner's (obj_puts_owned). */
static void test_put_start_end_revoke(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "seg0", "node0", 4096);

    obj_put_params p = {"a/1", 100, SMP_DATA_WEIGHT, "", "t1", 0, 0, NULL, 0};
    obj_put_ticket t;
    assert_int_equal(obj_put_start(st, &p, 10, &t), SMP_OK);
    assert_string_equal(t.segment, "seg0");
    assert_string_equal(t.node, "node0");
    assert_int_equal(t.offset, 0);
    assert_int_equal(t.length, 100);
    assert_int_equal(used_of(st), 128);
    assert_false(obj_exists(st, "a/1"));
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(st, "a/1", &info), SMP_OK);
    assert_int_equal(info.complete, 0);
    /* A second start of the same key while in flight is refused. */
    assert_int_equal(obj_put_start(st, &p, 11, NULL), SMP_EBUSY);

    uint8_t sum[32];
    memset(sum, 0xab, sizeof(sum));
    obj_record r = {0};
    assert_int_equal(obj_prepare_put_end(st, "a/1", sum, 20, &r), SMP_OK);
    assert_int_equal(r.type, OBJ_REC_PUT_END);
    assert_false(obj_exists(st, "a/1")); /* prepare changes nothing */
    apply_rec(st, &r);
    assert_true(obj_exists(st, "a/1"));
    assert_int_equal(obj_object_info(st, "a/1", &info), SMP_OK);
    assert_int_equal(info.complete, 1);
    assert_int_equal(info.size, 100);
    assert_int_equal(info.data_type, SMP_DATA_WEIGHT);
    assert_int_equal(info.memory_replicas_readable, 1);
    assert_memory_equal(info.checksum, sum, 32);
    assert_int_equal(used_of(st), 128);
    uint64_t objs, bytes;
    obj_tenant_usage(st, "t1", &objs, &bytes);
    assert_int_equal(objs, 1);
    assert_int_equal(bytes, 100);

    /* Complete key: EEXIST without overwrite. */
    assert_int_equal(obj_put_start(st, &p, 30, NULL), SMP_EEXIST);

    /* Revoke; a put knows who started it while it is in flight. */
    obj_put_params q = {"b", 1, SMP_DATA_KV, NULL, NULL, 0, 0, NULL, 7};
    assert_false(obj_puts_owned(st, 7));
    assert_int_equal(obj_put_start(st, &q, 30, &t), SMP_OK);
    assert_int_equal(t.offset, 128);
    assert_int_equal(used_of(st), 192);
    assert_true(obj_puts_owned(st, 7));
    assert_false(obj_puts_owned(st, 8));
    assert_false(obj_puts_owned(st, 0)); /* 0: nobody, whatever was started without one */
    assert_int_equal(obj_prepare_put_revoke(st, "b", &r), SMP_OK);
    assert_int_equal(r.type, OBJ_REC_PUT_REVOKE);
    apply_rec(st, &r);
    assert_int_equal(used_of(st), 128);
    assert_false(obj_puts_owned(st, 7));
    assert_int_equal(obj_prepare_put_end(st, "b", sum, 31, &r), SMP_ENOTFOUND);
    assert_int_equal(obj_prepare_put_revoke(st, "b", &r), SMP_ENOTFOUND);
    assert_int_equal(obj_object_info(st, "b", &info), SMP_ENOTFOUND);

    /* Overwrite: the new bytes replace the old range. */
    p.overwrite = 1;
    p.size = 200;
    assert_int_equal(obj_put_start(st, &p, 40, &t), SMP_OK);
    assert_int_equal(used_of(st), 128 + 256);
    assert_int_equal(obj_prepare_put_end(st, "a/1", sum, 41, &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(used_of(st), 256);
    assert_int_equal(obj_object_info(st, "a/1", &info), SMP_OK);
    assert_int_equal(info.size, 200);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.objects_by_type[SMP_DATA_WEIGHT], 1);
    assert_int_equal(s.bytes_by_type[SMP_DATA_WEIGHT], 200);
    assert_int_equal(s.puts_in_flight, 0);
    obj_store_destroy(st);
}

/* fsck's view of a segment: the unoccupied ranges in offset order; a hold
 * takes only a wholly unoccupied, aligned range (nothing is allocated
 * there) until it is released, and is not memory in use: eviction does not
 * free objects for it. */
static void test_fsck_free_ranges_and_holds(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s", "n", 640);
    for (int i = 0; i < 4; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(put_full(st, key, 64, "", "", (uint64_t)i), SMP_OK);
    }
    remove_key(st, "k1", 5);
    uint64_t *v = NULL, used = 0, cap = 0;
    size_t n = 0;
    assert_int_equal(obj_segment_free_ranges(st, "s", &v, &n, &used, &cap), SMP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(v[0], 64);
    assert_int_equal(v[1], 64);
    assert_int_equal(v[2], 256);
    assert_int_equal(v[3], 384);
    assert_int_equal(used, 192);
    assert_int_equal(cap, 640);
    free(v);
    assert_int_equal(obj_segment_free_ranges(st, "none", &v, &n, NULL, NULL), SMP_ENOTFOUND);
    assert_int_equal(obj_segment_hold_range(st, "s", 0, 64), SMP_ESTATE);   /* k0 */
    assert_int_equal(obj_segment_hold_range(st, "s", 64, 128), SMP_ESTATE); /* runs into k2 */
    assert_int_equal(obj_segment_hold_range(st, "s", 70, 64), SMP_EINVAL);
    assert_int_equal(obj_segment_hold_range(st, "s", 64, 64), SMP_OK);
    assert_int_equal(used_of(st), 192);
    obj_put_params p = {"x", 64, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    obj_put_ticket t;
    assert_int_equal(obj_put_start(st, &p, 6, &t), SMP_OK);
    assert_true(t.offset >= 256); /* not in the held range */
    assert_int_equal(used_of(st), 256);
    /* Held to the end: 256 of 640 bytes in use, 40%, with 100% allocated;
     * an eviction above 90% finds nothing to do. */
    assert_int_equal(obj_segment_hold_range(st, "s", 320, 320), SMP_OK);
    assert_int_equal(used_of(st), 256);
    obj_record_list l = {0};
    assert_int_equal(obj_plan_eviction(st, 0.9, 0.5, 7, &l, NULL), SMP_OK);
    assert_int_equal(l.n, 0);
    obj_segment_release_range(st, "s", 320, 320);
    obj_segment_release_range(st, "s", 64, 64);
    assert_int_equal(used_of(st), 256);
    /* A release of bytes the segment does not hold (once more, or a range
     * the put took) frees nothing. */
    obj_segment_release_range(st, "s", 64, 64);
    obj_segment_release_range(st, "s", t.offset, 64);
    assert_int_equal(used_of(st), 256);
    assert_int_equal(obj_segment_hold_range(st, "s", t.offset, 64), SMP_ESTATE);
    obj_store_destroy(st);
}

/* First fit with coalescing: fill a segment, free a run, reuse it; a
 * fragmented segment refuses a request larger than every hole. */
static void test_allocator_fill_free_coalesce_enospc(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s", "n", 64 * 10 + 5); /* rounded down to 640 */
    uint64_t used, cap;
    obj_memory_usage(st, &used, &cap);
    assert_int_equal(cap, 640);
    char key[16];
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(put_full(st, key, i == 0 ? 0 : 64, "", "", (uint64_t)i), SMP_OK);
    }
    assert_int_equal(used_of(st), 640);
    assert_int_equal(put_full(st, "more", 1, "", "", 20), SMP_ENOSPC);

    remove_key(st, "k2", 21);
    remove_key(st, "k3", 21);
    remove_key(st, "k4", 21);
    obj_put_params p = {"big", 192, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    obj_put_ticket t;
    assert_int_equal(obj_put_start(st, &p, 22, &t), SMP_OK);
    assert_int_equal(t.offset, 128);
    obj_record r = {0};
    assert_int_equal(obj_prepare_put_revoke(st, "big", &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(used_of(st), 640 - 192);

    /* Holes of 192 (k2..k4), then 64 (k6) and 64 (k8). */
    remove_key(st, "k6", 23);
    remove_key(st, "k8", 23);
    p.size = 200; /* needs 256: no hole is that large */
    assert_int_equal(obj_put_start(st, &p, 24, NULL), SMP_ENOSPC);
    remove_key(st, "k7", 25); /* 6..8 coalesce to 192; still < 256 */
    assert_int_equal(obj_put_start(st, &p, 26, NULL), SMP_ENOSPC);
    remove_key(st, "k5", 27); /* 2..8 coalesce to 448 */
    assert_int_equal(obj_put_start(st, &p, 28, &t), SMP_OK);
    assert_int_equal(t.offset, 128);
    assert_int_equal(obj_prepare_put_revoke(st, "big", &r), SMP_OK);
    apply_rec(st, &r);

    /* A segment grows, and shrinks only over its free tail: below the end
     * of the last occupied range (k9 ends at 640) is refused; the free tail
     * of the old capacity coalesces with new space. */
    uint64_t tail = 0;
    assert_int_equal(obj_segment_tail_used(st, "s", &tail), SMP_OK);
    assert_int_equal(tail, 640);
    assert_int_equal(obj_prepare_segment_update(st, "s", 128, &r), SMP_ERANGE);
    assert_int_equal(obj_prepare_segment_update(st, "s", 0, &r), SMP_ERANGE);
    obj_record grow_small = {0};
    assert_int_equal(obj_prepare_segment_update(st, "s", 1280, &grow_small), SMP_OK);
    assert_int_equal(obj_prepare_segment_update(st, "s", 6400, &r), SMP_OK);
    apply_rec(st, &r);
    obj_memory_usage(st, &used, &cap);
    assert_int_equal(cap, 6400);
    apply_rec(st, &grow_small); /* the tail past 1280 is free: cut */
    obj_memory_usage(st, &used, &cap);
    assert_int_equal(cap, 1280);
    assert_int_equal(obj_prepare_segment_update(st, "s", 6400, &r), SMP_OK);
    apply_rec(st, &r);
    obj_memory_usage(st, &used, &cap);
    assert_int_equal(cap, 6400);
    p.size = 64 * 90;
    assert_int_equal(obj_put_start(st, &p, 29, &t), SMP_OK);
    assert_int_equal(t.offset, 640);
    assert_int_equal(obj_prepare_put_revoke(st, "big", &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(obj_prepare_segment_update(st, "nope", 640, &r), SMP_ENOTFOUND);

    /* Puts go to the segment with the most free bytes. */
    mount(st, "t", "n2", 1 << 20);
    p.size = 10;
    assert_int_equal(obj_put_start(st, &p, 30, &t), SMP_OK);
    assert_string_equal(t.segment, "t");
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Reads and leases                                                          */
/* ------------------------------------------------------------------------ */

/* A read lease from get-replica-list blocks removal until it expires. */
static void test_replica_list_lease_blocks_remove(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s", "n", 4096);
    assert_int_equal(put_full(st, "k", 100, "", "", 1), SMP_OK);
    obj_replica reps[4];
    size_t n = 0;
    assert_int_equal(obj_get_replica_list(st, "k", 1000, 500, reps, 4, &n), SMP_OK);
    assert_int_equal(n, 1);
    assert_int_equal(reps[0].kind, SMP_REPLICA_MEMORY);
    assert_int_equal(reps[0].status, OBJ_REPLICA_COMPLETE);
    assert_string_equal(reps[0].segment, "s");
    assert_string_equal(reps[0].node, "n");
    assert_int_equal(reps[0].length, 100);
    assert_int_equal(obj_get_replica_list(st, "nope", 1000, 500, reps, 4, &n), SMP_ENOTFOUND);

    obj_record r = {0};
    assert_int_equal(obj_prepare_remove(st, "k", 1200, &r), SMP_EBUSY);
    /* Overwriting a leased object is refused too. */
    obj_put_params p = {"k", 1, SMP_DATA_KV, "", "", 0, 1, NULL, 0};
    assert_int_equal(obj_put_start(st, &p, 1200, NULL), SMP_EBUSY);
    /* Prefix removal skips it. */
    obj_record_list l = {0};
    obj_remove_report rep;
    assert_int_equal(obj_prepare_remove_prefix(st, "", 1200, &l, &rep), SMP_OK);
    assert_int_equal(l.n, 0);
    assert_int_equal(rep.skipped_leased, 1);
    assert_int_equal(obj_prepare_remove(st, "k", 1500, &r), SMP_OK);
    apply_rec(st, &r);
    assert_false(obj_exists(st, "k"));
    assert_int_equal(obj_prepare_remove(st, "k", 1500, &r), SMP_ENOTFOUND);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Managed groups, removal and the guard                                     */
/* ------------------------------------------------------------------------ */

/* g1 (managed) has a member outside "w/"; g2 (managed) lies wholly under it;
 * g3 is an ordinary group; "w/plain" is in no group. */
static obj_store *managed_fixture(test_guard *g)
{
    obj_store *st = new_store(g);
    mount(st, "s", "n", 1 << 20);
    set_managed(st, "g1", 1);
    set_managed(st, "g2", 1);
    /* Fill managed groups with the plugin "present" so the puts pass. */
    int saved = g ? g->loaded : 0, veto = g ? g->veto : 0;
    if (g) {
        g->loaded = 1;
        g->veto = 0;
    }
    test_guard tmp = {.veto = 0, .loaded = 1};
    obj_guard_ops allow = {test_guard_check, test_guard_active, &tmp};
    obj_store_set_guard(st, &allow);
    assert_int_equal(put_full(st, "w/g1/0", 10, "g1", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "w/g1/1", 10, "g1", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "z/g1/2", 10, "g1", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "w/g2/0", 10, "g2", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "w/g2/1", 10, "g2", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "w/g3/0", 10, "g3", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "w/plain", 10, "", "", 1), SMP_OK);
    if (g) {
        obj_guard_ops ops = {test_guard_check, test_guard_active, g};
        obj_store_set_guard(st, &ops);
        g->loaded = saved;
        g->veto = veto;
    } else {
        obj_store_set_guard(st, NULL);
    }
    return st;
}

/* With no plugin guard, the host refuses single-key removal of a managed
 * member, never removes part of a managed group by prefix, and removes a
 * managed group only whole. */
static void test_remove_prefix_managed_group_without_guard(void **state)
{
    (void)state;
    obj_store *st = managed_fixture(NULL);
    obj_record r = {0};
    assert_int_equal(obj_prepare_remove(st, "w/g1/0", 5, &r), SMP_EVETO);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.host_refusals[SMP_GUARD_REMOVE_KEY], 1);
    assert_int_equal(s.guard_vetoes[SMP_GUARD_REMOVE_KEY], 0);

    obj_record_list l = {0};
    obj_remove_report rep;
    assert_int_equal(obj_prepare_remove_prefix(st, "w/", 5, &l, &rep), SMP_OK);
    assert_int_equal(rep.removed, 4); /* g2 whole, g3 member, plain */
    assert_int_equal(rep.skipped_partial, 3);
    apply_list(st, &l);
    assert_int_equal(obj_group_count(st, "g1"), 3);
    assert_true(obj_exists(st, "w/g1/0"));
    assert_true(obj_exists(st, "w/g1/1"));
    assert_int_equal(obj_group_count(st, "g2"), 0);
    assert_true(obj_group_is_managed(st, "g2")); /* the flag outlives members */
    assert_false(obj_exists(st, "w/plain"));
    assert_false(obj_exists(st, "w/g3/0"));
    obj_store_stats(st, &s);
    assert_int_equal(s.host_refusals[SMP_GUARD_REMOVE_PATTERN], 3);
    obj_store_destroy(st);
}

/* A vetoing guard: nothing it is asked about is removed; counted as plugin
 * vetoes, not host refusals. */
static void test_remove_prefix_with_veto_guard(void **state)
{
    (void)state;
    test_guard g = {.veto = 1, .loaded = 1};
    obj_store *st = managed_fixture(&g);
    obj_record r = {0};
    assert_int_equal(obj_prepare_remove(st, "w/g1/0", 5, &r), SMP_EVETO);
    assert_int_equal(obj_prepare_remove(st, "w/plain", 5, &r), SMP_EVETO);
    obj_record_list l = {0};
    obj_remove_report rep;
    assert_int_equal(obj_prepare_remove_prefix(st, "w/", 5, &l, &rep), SMP_OK);
    assert_int_equal(l.n, 0);
    assert_int_equal(rep.removed, 0);
    assert_int_equal(rep.skipped_partial, 3);
    assert_int_equal(rep.skipped_vetoed, 2 + 2); /* g2 whole, g3, plain */
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.guard_vetoes[SMP_GUARD_REMOVE_KEY], 2);
    assert_true(s.guard_vetoes[SMP_GUARD_REMOVE_PATTERN] >= 3);
    assert_int_equal(s.host_refusals[SMP_GUARD_REMOVE_KEY], 0);
    assert_int_equal(obj_group_count(st, "g1"), 3);
    assert_int_equal(obj_group_count(st, "g2"), 2);
    obj_store_destroy(st);
}

/* An allowing guard lets single members go, but a prefix still never takes
 * part of a managed group. */
static void test_remove_prefix_with_allow_guard(void **state)
{
    (void)state;
    test_guard g = {.veto = 0, .loaded = 1};
    obj_store *st = managed_fixture(&g);
    obj_record_list l = {0};
    obj_remove_report rep;
    assert_int_equal(obj_prepare_remove_prefix(st, "w/", 5, &l, &rep), SMP_OK);
    assert_int_equal(rep.removed, 4);
    assert_int_equal(rep.skipped_partial, 3);
    assert_true(g.calls_by_reason[SMP_GUARD_REMOVE_PATTERN] >= 4);
    apply_list(st, &l);
    assert_int_equal(obj_group_count(st, "g1"), 3);
    assert_int_equal(obj_group_count(st, "g2"), 0);

    /* The plugin may remove a single member explicitly. */
    remove_key(st, "z/g1/2", 6);
    assert_int_equal(obj_group_count(st, "g1"), 2);
    assert_int_equal(g.calls_by_reason[SMP_GUARD_REMOVE_KEY], 1);

    /* Now g1 lies wholly under "w/" and goes whole. */
    assert_int_equal(obj_prepare_remove_prefix(st, "w/", 7, &l, &rep), SMP_OK);
    assert_int_equal(rep.removed, 2);
    assert_int_equal(l.n, 1);
    apply_list(st, &l);
    assert_int_equal(obj_group_count(st, "g1"), 0);
    obj_store_destroy(st);
}

/* A managed group whose owner is absent or disabled: the host refuses every
 * guarded action on its members -- removal by key, by prefix (even of the
 * whole group), remove-all, put into, overwrite and eviction -- without
 * asking any guard, and nothing changes; objects in no managed group stay
 * plain KV. */
static void test_owner_absent_protects_groups(void **state)
{
    (void)state;
    test_guard g = {.veto = 0, .loaded = 1}; /* a guard that would allow all */
    obj_store *st = managed_fixture(&g);
    g.owner_absent = 1;
    g.calls = 0;
    buf before = save(st);
    obj_record r = {0};
    assert_int_equal(obj_prepare_remove(st, "w/g2/0", 5, &r), SMP_EVETO);
    obj_record_list l = {0};
    obj_remove_report rep;
    assert_int_equal(obj_prepare_remove_prefix(st, "w/g2/", 5, &l, &rep), SMP_OK);
    assert_int_equal(l.n, 0); /* g2 lies wholly under the prefix: still refused */
    assert_int_equal(rep.skipped_vetoed, 2);
    obj_put_params p = {"w/g2/new", 10, SMP_DATA_WEIGHT, "g2", "", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(st, &p, 5, NULL), SMP_EVETO);
    obj_put_params ow = {"w/g2/0", 10, SMP_DATA_KV, "", "", 0, 1, NULL, 0};
    assert_int_equal(obj_put_start(st, &ow, 5, NULL), SMP_EVETO);
    assert_int_equal(g.calls, 0); /* no guard was asked about the groups */
    uint64_t planned = 0;
    assert_int_equal(obj_plan_eviction(st, 0.0, 0.0, 5, &l, &planned), SMP_OK);
    assert_int_equal(g.calls, 2); /* only about w/g3/0 and w/plain, with no owner */
    assert_string_equal(g.last_owner, "");
    for (size_t i = 0; i < l.n; i++) {
        char text[256];
        assert_true(obj_describe_record(l.recs[i].type, l.recs[i].encver, l.recs[i].buf, l.recs[i].len, text,
                                        sizeof(text)) > 0);
        assert_null(strstr(text, "g1/"));
        assert_null(strstr(text, "g2/"));
    }
    obj_record_list_free(&l);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.host_refusals[SMP_GUARD_REMOVE_KEY], 1);
    assert_int_equal(s.host_refusals[SMP_GUARD_PUT_INTO_GROUP], 1);
    assert_int_equal(s.host_refusals[SMP_GUARD_UPSERT_INTO_GROUP], 1);
    assert_int_equal(s.host_refusals[SMP_GUARD_BATCH_EVICT], 5);
    buf after = save(st);
    assert_int_equal(before.n, after.n);
    assert_memory_equal(before.p, after.p, before.n);
    free(after.p);

    /* Remove-all takes the plain objects and leaves both groups whole. */
    assert_int_equal(obj_prepare_remove_prefix(st, "", 6, &l, &rep), SMP_OK);
    assert_int_equal(rep.removed, 2); /* w/g3/0 and w/plain */
    assert_int_equal(rep.skipped_partial + rep.skipped_vetoed, 5);
    apply_list(st, &l);
    assert_int_equal(obj_group_count(st, "g1"), 3);
    assert_int_equal(obj_group_count(st, "g2"), 2);
    assert_false(obj_exists(st, "w/plain"));

    /* Back: the owner's guard decides again, and is told the owner. */
    g.owner_absent = 0;
    assert_int_equal(obj_prepare_remove(st, "w/g2/0", 7, &r), SMP_OK);
    obj_record_free(&r);
    assert_string_equal(g.last_owner, TEST_OWNER);
    assert_int_equal(g.calls, 5); /* 2 evictions, 2 remove-all, this one */
    free(before.p);
    obj_store_destroy(st);
}

/* The owner of a managed group is durable: in its record (a record from
 * before owners existed means OBJ_OWNER_DEFAULT) and in the snapshot; only
 * the owner changes the flag. */
static void test_group_owner_persisted(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    set_managed(st, "mine", 1);
    assert_string_equal(obj_group_owner(st, "mine"), TEST_OWNER);
    assert_null(obj_group_owner(st, "nobody"));
    obj_record r = {0};
    assert_int_equal(obj_prepare_group_managed(st, "mine", "other_plugin", 1, &r), SMP_EVETO);
    assert_int_equal(obj_prepare_group_managed(st, "mine", "other_plugin", 0, &r), SMP_EVETO);
    assert_int_equal(obj_prepare_group_managed(st, "mine", "", 1, &r), SMP_EINVAL);
    assert_int_equal(obj_prepare_group_managed(st, "mine", NULL, 1, &r), SMP_EINVAL);
    assert_string_equal(obj_group_owner(st, "mine"), TEST_OWNER);
    assert_int_equal(obj_prepare_group_managed(st, "mine", TEST_OWNER, 1, &r), SMP_OK);
    char text[256];
    assert_true(obj_describe_record(r.type, r.encver, r.buf, r.len, text, sizeof(text)) > 0);
    assert_string_equal(text, "SEGMENT_UPDATE group=mine managed=1 owner=" TEST_OWNER);
    obj_record_free(&r);

    /* A record written before owners existed. */
    Hostrec__GroupRecord gr = HOSTREC__GROUP_RECORD__INIT;
    gr.name = "old";
    gr.managed = 1;
    Hostrec__UpdateRecord u = HOSTREC__UPDATE_RECORD__INIT;
    u.change_case = HOSTREC__UPDATE_RECORD__CHANGE_GROUP;
    u.group = &gr;
    uint8_t bytes[128];
    size_t n = hostrec__update_record__pack(&u, bytes);
    assert_int_equal(obj_apply_record(st, OBJ_REC_SEGMENT_UPDATE, OBJ_REC_ENCVER, bytes, n),
                     SMP_OK);
    assert_string_equal(obj_group_owner(st, "old"), OBJ_OWNER_DEFAULT);

    buf b = save(st);
    obj_store *c = new_store(NULL);
    assert_int_equal(obj_store_load(c, b.p, b.n), SMP_OK);
    assert_string_equal(obj_group_owner(c, "mine"), TEST_OWNER);
    assert_string_equal(obj_group_owner(c, "old"), OBJ_OWNER_DEFAULT);
    obj_store_destroy(c);
    free(b.p);

    /* A snapshot written before owners existed. */
    Hostrec__GroupRecord og = HOSTREC__GROUP_RECORD__INIT;
    og.name = "legacy";
    og.managed = 1;
    Hostrec__GroupRecord *groups[1] = {&og};
    Hostrec__HostSnapshot hs = HOSTREC__HOST_SNAPSHOT__INIT;
    hs.format = OBJ_SNAPSHOT_FORMAT;
    hs.n_groups = 1;
    hs.groups = groups;
    n = hostrec__host_snapshot__pack(&hs, bytes);
    c = new_store(NULL);
    assert_int_equal(obj_store_load(c, bytes, n), SMP_OK);
    assert_string_equal(obj_group_owner(c, "legacy"), OBJ_OWNER_DEFAULT);
    obj_store_destroy(c);

    /* The owner clears it; the group entry goes. */
    assert_int_equal(obj_prepare_group_managed(st, "mine", TEST_OWNER, 0, &r), SMP_OK);
    apply_rec(st, &r);
    assert_null(obj_group_owner(st, "mine"));
    assert_false(obj_group_is_managed(st, "mine"));
    obj_store_destroy(st);
}

/* Puts and upserts into a managed group: refused by the host without a
 * guard, asked of the guard with one. */
static void test_put_into_managed_group(void **state)
{
    (void)state;
    test_guard g = {.veto = 0, .loaded = 0};
    obj_store *st = new_store(&g);
    mount(st, "s", "n", 1 << 16);
    set_managed(st, "rev", 1);
    obj_put_params p = {"rev/0", 10, SMP_DATA_WEIGHT, "rev", "", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_EVETO);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.host_refusals[SMP_GUARD_PUT_INTO_GROUP], 1);
    assert_int_equal(g.calls, 0);

    g.loaded = 1;
    g.veto = 1;
    assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_EVETO);
    obj_store_stats(st, &s);
    assert_int_equal(s.guard_vetoes[SMP_GUARD_PUT_INTO_GROUP], 1);
    g.veto = 0;
    assert_int_equal(put_full(st, "rev/0", 10, "rev", "", 1), SMP_OK);
    /* Asked at the start and again at the end of the put. */
    assert_int_equal(g.calls_by_reason[SMP_GUARD_PUT_INTO_GROUP], 3);

    p.overwrite = 1;
    g.veto = 1;
    assert_int_equal(obj_put_start(st, &p, 2, NULL), SMP_EVETO);
    assert_int_equal(g.calls_by_reason[SMP_GUARD_UPSERT_INTO_GROUP], 1);
    g.loaded = 0;
    assert_int_equal(obj_put_start(st, &p, 2, NULL), SMP_EVETO);
    obj_store_stats(st, &s);
    assert_int_equal(s.host_refusals[SMP_GUARD_UPSERT_INTO_GROUP], 1);
    /* An unmanaged group needs no permission. */
    assert_int_equal(put_full(st, "free/0", 10, "free", "", 1), SMP_OK);
    obj_store_destroy(st);
}

/* A group sealed while a put into it was in flight: the put end is asked
 * again and refused, nothing becomes a member, and the put can be revoked. */
static void test_put_end_into_sealed_group_is_refused(void **state)
{
    (void)state;
    test_guard g = {.loaded = 1};
    obj_store *st = new_store(&g);
    mount(st, "s", "n", 1 << 16);
    set_managed(st, "rev", 1);
    obj_put_params p = {"rev/late", 10, SMP_DATA_WEIGHT, "rev", "", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_OK);
    g.veto = 1; /* the owner sealed the group */
    uint8_t sum[32];
    sum_of("rev/late", sum);
    obj_record r = {0};
    assert_int_equal(obj_prepare_put_end(st, "rev/late", sum, 2, &r), SMP_EVETO);
    assert_null(r.buf);
    assert_int_equal(obj_exists(st, "rev/late"), 0);
    assert_int_equal(obj_group_count(st, "rev"), 0);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.guard_vetoes[SMP_GUARD_PUT_INTO_GROUP], 1);
    assert_int_equal(s.puts_in_flight, 1);
    assert_int_equal(obj_prepare_put_revoke(st, "rev/late", &r), SMP_OK);
    apply_rec(st, &r);
    obj_store_stats(st, &s);
    assert_int_equal(s.puts_in_flight, 0);
    assert_int_equal(s.memory_used, 0);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Eviction                                                                  */
/* ------------------------------------------------------------------------ */

/* Above the high watermark the plan brings use to at most the low one, oldest
 * first, never touching pinned, leased or managed-group objects; an object
 * with a cold copy keeps living from it. */
static void test_eviction_plan(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s", "n", 64 * 100);
    set_managed(st, "rev", 1);
    char key[32];
    test_guard allow = {.veto = 0, .loaded = 1};
    obj_guard_ops ops = {test_guard_check, test_guard_active, &allow};
    obj_store_set_guard(st, &ops); /* to fill the managed group */
    for (int i = 0; i < 90; i++) {
        snprintf(key, sizeof(key), "k%02d", i);
        const char *group = (i >= 5 && i < 15) ? "rev" : "";
        assert_int_equal(put_full(st, key, 64, group, "", (uint64_t)(100 + i)), SMP_OK);
    }
    obj_store_set_guard(st, NULL);
    /* 0..4 pinned, 5..14 managed, 15..19 leased, 20 has a cold copy. */
    obj_record r = {0};
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof(key), "k%02d", i);
        assert_int_equal(obj_prepare_set_pin(st, key, 1, &r), SMP_OK);
        apply_rec(st, &r);
    }
    obj_replica reps[2];
    size_t n;
    for (int i = 15; i < 20; i++) {
        snprintf(key, sizeof(key), "k%02d", i);
        /* Read at the original access time: the LRU order stays. */
        assert_int_equal(obj_get_replica_list(st, key, 100 + (uint64_t)i, 100000, reps, 2, &n),
                         SMP_OK);
    }
    assert_int_equal(obj_get_replica_list(st, "k20", 120, 0, reps, 2, &n), SMP_OK);
    reps[1] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_COMPLETE, "n", NULL, 0, 64, "/cold/k20"};
    assert_int_equal(obj_prepare_set_replicas(st, "k20", reps, 2, &r), SMP_OK);
    apply_rec(st, &r);

    obj_record_list l = {0};
    uint64_t planned = 0;
    assert_int_equal(obj_plan_eviction(st, 0.95, 0.5, 1000, &l, &planned), SMP_OK);
    assert_int_equal(l.n, 0); /* 90% is under the high watermark */
    assert_int_equal(obj_plan_eviction(st, 0.8, 0.5, 1000, &l, &planned), SMP_OK);
    assert_true(l.n > 0);
    assert_int_equal(planned, 40 * 64);
    apply_list(st, &l);
    assert_true(used_of(st) <= 64 * 50);
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "k%02d", i);
        assert_true(obj_exists(st, key));
    }
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(st, "k20", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 0);
    assert_int_equal(info.cold_replicas_readable, 1);
    for (int i = 21; i < 60; i++) { /* the oldest evictable go first */
        snprintf(key, sizeof(key), "k%02d", i);
        assert_false(obj_exists(st, key));
    }
    assert_true(obj_exists(st, "k60"));
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.host_refusals[SMP_GUARD_BATCH_EVICT], 10);
    assert_int_equal(s.replicas_by_kind[SMP_REPLICA_COLD], 1);

    /* With a vetoing guard nothing is evicted. */
    test_guard veto = {.veto = 1, .loaded = 1};
    obj_guard_ops vops = {test_guard_check, test_guard_active, &veto};
    obj_store_set_guard(st, &vops);
    assert_int_equal(obj_plan_eviction(st, 0.1, 0.05, 1000, &l, &planned), SMP_OK);
    assert_int_equal(l.n, 0);
    assert_true(veto.calls_by_reason[SMP_GUARD_BATCH_EVICT] > 0);
    assert_int_equal(obj_plan_eviction(st, 0.5, 0.6, 1000, &l, NULL), SMP_EINVAL);
    obj_store_destroy(st);
}

/* Plan the eviction that brings st (21 slots of 64 bytes) to 85%, apply
 * it, and check that exactly the n keys of gone[] went. */
static void evict_to_85(obj_store *st, const char *const *gone, size_t n)
{
    obj_record_list l = {0};
    uint64_t planned = 0;
    assert_int_equal(obj_plan_eviction(st, 0.9, 0.85, 1000, &l, &planned), SMP_OK);
    assert_int_equal(planned, n * 64);
    apply_list(st, &l);
    for (size_t i = 0; i < n; i++) assert_false(obj_exists(st, gone[i]));
}

/* The LRU order a load or a bulk replay leaves is by last access, then key,
 * whether or not the list had to be sorted at its end: a snapshot saved in
 * key order is sorted; a bulk replay that appends nothing out of order
 * keeps that order, one that does is sorted again. */
static void test_lru_order_after_load_and_bulk_replay(void **state)
{
    (void)state;
    obj_store *a = new_store(NULL);
    mount(a, "s", "n", 64 * 21);
    char key[32];
    for (int i = 0; i < 18; i++) { /* newest first: key order is not LRU order */
        snprintf(key, sizeof(key), "k%02d", i);
        assert_int_equal(put_full(a, key, 64, "", "", (uint64_t)(200 - i)), SMP_OK);
    }
    /* The oldest two, a tie, put in the order opposite to their keys. */
    assert_int_equal(put_full(a, "k19", 64, "", "", 100), SMP_OK);
    assert_int_equal(put_full(a, "k18", 64, "", "", 100), SMP_OK);
    buf s = save(a);
    obj_store_destroy(a);

    obj_store *b = new_store(NULL);
    assert_int_equal(obj_store_load(b, s.p, s.n), SMP_OK);
    obj_store_bulk_begin(b); /* a log tail with nothing in it */
    assert_int_equal(obj_store_bulk_end(b), SMP_OK);
    static const char *const oldest3[] = {"k18", "k19", "k17"};
    evict_to_85(b, oldest3, 3);
    obj_store_destroy(b);

    obj_store *c = new_store(NULL);
    assert_int_equal(obj_store_load(c, s.p, s.n), SMP_OK);
    obj_store_bulk_begin(c); /* a log tail whose put is older than every object */
    assert_int_equal(put_full(c, "k20", 64, "", "", 50), SMP_OK);
    assert_int_equal(obj_store_bulk_end(c), SMP_OK);
    static const char *const oldest4[] = {"k20", "k18", "k19", "k17"};
    evict_to_85(c, oldest4, 4);
    assert_true(obj_exists(c, "k16"));
    obj_store_destroy(c);
    free(s.p);
}

/* ------------------------------------------------------------------------ */
/* Stale puts                                                                */
/* ------------------------------------------------------------------------ */

/* A put its node reports being written counts as started at that report:
 * only the exact range is touched, and a silent put still goes. */
static void test_put_touched_by_its_write_is_kept(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s", "n", 4096);
    obj_put_params p = {"slow", 100, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    obj_put_ticket t;
    assert_int_equal(obj_put_start(st, &p, 100, &t), SMP_OK);
    p.key = "silent";
    assert_int_equal(obj_put_start(st, &p, 100, NULL), SMP_OK);
    assert_int_equal(obj_put_touch(st, "slow", "s", t.offset + 64, 900), SMP_ENOTFOUND);
    assert_int_equal(obj_put_touch(st, "slow", "other", t.offset, 900), SMP_ENOTFOUND);
    assert_int_equal(obj_put_touch(st, "nope", "s", t.offset, 900), SMP_ENOTFOUND);
    assert_int_equal(obj_put_touch(st, "slow", "s", t.offset, 900), SMP_OK);
    assert_int_equal(obj_cleanup_stale_puts(st, 1000, 600), 1); /* "silent" only */
    uint8_t sum[32] = {0};
    obj_record r = {0};
    assert_int_equal(obj_prepare_put_end(st, "silent", sum, 1000, &r), SMP_ENOTFOUND);
    assert_int_equal(obj_prepare_put_end(st, "slow", sum, 1000, &r), SMP_OK);
    obj_record_free(&r);
    assert_int_equal(obj_cleanup_stale_puts(st, 1600, 600), 1); /* then silent too */
    obj_store_destroy(st);
}

static void test_stale_put_cleanup(void **state)
{
    (void)state;
    test_guard g = {.veto = 1, .loaded = 0};
    obj_store *st = new_store(&g);
    mount(st, "s", "n", 4096);
    obj_put_params p = {"old", 100, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(st, &p, 100, NULL), SMP_OK);
    p.key = "new";
    assert_int_equal(obj_put_start(st, &p, 500, NULL), SMP_OK);
    assert_int_equal(used_of(st), 256);

    g.loaded = 1; /* a vetoing guard keeps them */
    assert_int_equal(obj_cleanup_stale_puts(st, 1000, 600), 0);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.guard_vetoes[SMP_GUARD_STALE_PUT_CLEANUP], 1);
    g.loaded = 0;
    assert_int_equal(obj_cleanup_stale_puts(st, 1000, 600), 1);
    assert_int_equal(used_of(st), 128);
    uint8_t sum[32] = {0};
    obj_record r = {0};
    assert_int_equal(obj_prepare_put_end(st, "old", sum, 1000, &r), SMP_ENOTFOUND);
    assert_int_equal(obj_prepare_put_end(st, "new", sum, 1000, &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(obj_cleanup_stale_puts(st, 100000, 1), 0);
    assert_int_equal(used_of(st), 128);
    obj_store_stats(st, &s);
    assert_int_equal(s.puts_in_flight, 0);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Listing                                                                   */
/* ------------------------------------------------------------------------ */

/* Paging through a prefix with the cursor returns every key exactly once, in
 * order, and nothing outside the prefix. */
static void test_list_prefix_pagination(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s", "n", 1 << 20);
    char key[32];
    for (int i = 0; i < 250; i++) {
        snprintf(key, sizeof(key), "p/%03d", (i * 37) % 250); /* out of order */
        assert_int_equal(put_full(st, key, 1, "", (i % 2) ? "odd" : "even", 1), SMP_OK);
    }
    assert_int_equal(put_full(st, "p", 1, "", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "o/x", 1, "", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "p0", 1, "", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "q/y", 1, "", "", 1), SMP_OK);

    int seen[250] = {0};
    char cursor[64] = "";
    const char *keys[7];
    size_t n, total = 0;
    int more = 1, pages = 0;
    while (more) {
        assert_int_equal(obj_list_prefix(st, "p/", NULL, cursor[0] ? cursor : NULL, 7, keys,
                                         &n, &more), SMP_OK);
        for (size_t i = 0; i < n; i++) {
            int v = -1;
            assert_int_equal(sscanf(keys[i], "p/%d", &v), 1);
            assert_true(v >= 0 && v < 250);
            assert_int_equal(seen[v], 0);
            seen[v] = 1;
            if (i || cursor[0]) assert_true(strcmp(keys[i], i ? keys[i - 1] : cursor) > 0);
        }
        total += n;
        if (n) snprintf(cursor, sizeof(cursor), "%s", keys[n - 1]);
        pages++;
        assert_true(pages < 100);
    }
    assert_int_equal(total, 250);
    assert_int_equal(pages, 36);

    /* Filtered by tenant. */
    total = 0;
    cursor[0] = 0;
    more = 1;
    while (more) {
        assert_int_equal(obj_list_prefix(st, "p/", "odd", cursor[0] ? cursor : NULL, 7, keys,
                                         &n, &more), SMP_OK);
        total += n;
        if (n) snprintf(cursor, sizeof(cursor), "%s", keys[n - 1]);
    }
    assert_int_equal(total, 125);
    uint64_t objs;
    obj_tenant_usage(st, "odd", &objs, NULL);
    assert_int_equal(objs, 125);

    /* A cursor before the prefix starts at the prefix. */
    assert_int_equal(obj_list_prefix(st, "p/", NULL, "a", 2, keys, &n, &more), SMP_OK);
    assert_int_equal(n, 2);
    assert_string_equal(keys[0], "p/000");
    assert_int_equal(more, 1);
    assert_int_equal(obj_list_prefix(st, "", NULL, NULL, 2, keys, &n, &more), SMP_OK);
    assert_string_equal(keys[0], "o/x");
    obj_store_destroy(st);
}

/* Puts and removes in random order keep the ordered index exact: every
 * listing (whole, and from a cursor in the middle) returns exactly the live
 * keys in order, and a removed key is neither listed nor found. */
static void test_random_puts_and_removes_keep_order(void **state)
{
    (void)state;
    enum { N = 600 };
    obj_store *st = new_store(NULL);
    int live[N] = {0};
    char key[32];
    const char *keys[N + 1];
    size_t n;
    int more;
    uint64_t x = 88172645463325252ull;
    mount(st, "s", "n", 1 << 24);
    for (int round = 0; round < 6000; round++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int k = (int)(x % N);
        snprintf(key, sizeof(key), "k/%04d", k);
        if (live[k]) {
            remove_key(st, key, 1);
            live[k] = 0;
            assert_int_equal(obj_exists(st, key), 0);
        } else {
            assert_int_equal(put_full(st, key, 1, (k % 3) ? "" : "g", "", 1), SMP_OK);
            live[k] = 1;
        }
        if (round % 500 != 499) continue;
        assert_int_equal(obj_list_prefix(st, "k/", NULL, NULL, N + 1, keys, &n, &more), SMP_OK);
        size_t want = 0;
        for (int i = 0; i < N; i++) {
            if (!live[i]) continue;
            snprintf(key, sizeof(key), "k/%04d", i);
            assert_true(want < n);
            assert_string_equal(keys[want], key);
            want++;
        }
        assert_int_equal(n, want);
        assert_int_equal(obj_list_prefix(st, "k/", NULL, "k/0300", N + 1, keys, &n, &more), SMP_OK);
        for (size_t i = 0; i < n; i++) {
            int v = -1;
            assert_int_equal(sscanf(keys[i], "k/%d", &v), 1);
            assert_true(v > 300 && live[v]);
        }
    }
    obj_store_destroy(st);
}

/* Group listing is in key order after a cursor, bounded by max. */
static int collect_keys(void *arg, const smp_object_info *info)
{
    char **out = arg;
    while (*out) out++;
    *out = strdup(info->key);
    return 0;
}

static void test_group_queries_and_metrics(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s", "n", 1 << 20);
    const char *members[] = {"m/3", "m/1", "m/2", "m/0"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(put_full(st, members[i], 100, "grp", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "other", 5, "", "", 1), SMP_OK);
    assert_int_equal(obj_group_count(st, "grp"), 4);
    assert_int_equal(obj_group_count(st, "none"), 0);
    char *got[8] = {0};
    assert_int_equal(obj_group_list(st, "grp", "m/0", 2, collect_keys, got), 2);
    assert_string_equal(got[0], "m/1");
    assert_string_equal(got[1], "m/2");
    assert_null(got[2]);
    for (int i = 0; got[i]; i++) free(got[i]);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.objects_by_type[SMP_DATA_KV], 5);
    assert_int_equal(s.bytes_by_type[SMP_DATA_KV], 405);
    assert_int_equal(s.replicas_by_kind[SMP_REPLICA_MEMORY], 5);
    assert_int_equal(s.replica_bytes_by_kind[SMP_REPLICA_MEMORY], 405);
    assert_int_equal(s.memory_used, 4 * 128 + 64);
    assert_int_equal(s.memory_capacity, 1 << 20);

    /* Unmounting the segment drops its replicas but keeps the objects. */
    obj_record r = {0};
    assert_int_equal(obj_prepare_segment_unmount(st, "s", &r), SMP_OK);
    apply_rec(st, &r);
    assert_true(obj_exists(st, "m/1"));
    obj_replica reps[2];
    size_t n;
    assert_int_equal(obj_get_replica_list(st, "m/1", 5, 10, reps, 2, &n), SMP_EAGAIN);
    obj_store_stats(st, &s);
    assert_int_equal(s.replicas_by_kind[SMP_REPLICA_MEMORY], 0);
    assert_int_equal(s.memory_capacity, 0);
    assert_int_equal(obj_prepare_segment_unmount(st, "s", &r), SMP_ENOTFOUND);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Keys                                                                      */
/* ------------------------------------------------------------------------ */

/* A bad or good multi-byte sequence in a key is judged alike at every
 * offset of an ASCII run (the check takes eight ASCII bytes at a time). */
static int key_accepts(const char *s, size_t len)
{
    (void)len;
    return obj_validate_key(s) == SMP_OK;
}

static void test_key_utf8_judged_alike_at_every_offset(void **state)
{
    (void)state;
    char why[128];
    if (utf8_judged_at_every_offset(key_accepts, why, sizeof(why)) != 0) fail_msg("%s", why);
}

static void test_bad_keys_refused(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s", "n", 1 << 16);
    char longkey[OBJ_KEY_MAX + 2];
    memset(longkey, 'k', sizeof(longkey));
    longkey[OBJ_KEY_MAX + 1] = 0;
    const char *bad[] = {"", longkey, "a\xc3\x28", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                         "trunc\xe6\xa8", "\xff"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(obj_validate_key(bad[i]), SMP_EINVAL);
        obj_put_params p = {bad[i], 1, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
        assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_EINVAL);
    }
    assert_int_equal(obj_validate_key(NULL), SMP_EINVAL);
    obj_put_params p = {NULL, 1, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_EINVAL);
    p.key = "ok";
    p.data_type = (smp_data_type)3;
    assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_EINVAL);
    p.data_type = SMP_DATA_KV;
    p.group = "bad\xff";
    assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_EINVAL);

    longkey[OBJ_KEY_MAX] = 0; /* exactly the limit */
    assert_int_equal(put_full(st, longkey, 1, "", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "模型/权重/\xf0\x9f\x98\x80", 1, "", "", 1), SMP_OK);
    assert_true(obj_exists(st, "模型/权重/\xf0\x9f\x98\x80"));
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.puts_in_flight, 0);
    assert_int_equal(s.objects_by_type[SMP_DATA_KV], 2);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Placement and plugin removal                                             */
/* ------------------------------------------------------------------------ */

/* A put prefers the segments of the requested node, else the emptiest. */
static void test_put_prefers_node(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "small", "n0", 1024);
    mount(st, "large", "n1", 1 << 20);
    obj_put_params p = {"a", 10, SMP_DATA_KV, "", "", 0, 0, "n0", 0};
    obj_put_ticket t;
    assert_int_equal(obj_put_start(st, &p, 1, &t), SMP_OK);
    assert_string_equal(t.segment, "small");
    p.key = "b";
    p.prefer_node = NULL;
    assert_int_equal(obj_put_start(st, &p, 1, &t), SMP_OK);
    assert_string_equal(t.segment, "large");
    p.key = "c";
    p.size = 4096; /* does not fit the preferred node: goes elsewhere */
    p.prefer_node = "n0";
    assert_int_equal(obj_put_start(st, &p, 1, &t), SMP_OK);
    assert_string_equal(t.segment, "large");
    obj_store_destroy(st);
}

/* The plugin's own remove_object bypasses the guard and the host rule, but
 * not a read lease. */
static void test_unguarded_remove(void **state)
{
    (void)state;
    obj_store *st = managed_fixture(NULL);
    obj_record r = {0};
    assert_int_equal(obj_prepare_remove(st, "z/g1/2", 5, &r), SMP_EVETO);
    obj_replica reps[1];
    size_t n;
    assert_int_equal(obj_get_replica_list(st, "z/g1/2", 5, 10, reps, 1, &n), SMP_OK);
    assert_int_equal(obj_prepare_remove_unguarded(st, "z/g1/2", 6, &r), SMP_EBUSY);
    assert_int_equal(obj_prepare_remove_unguarded(st, "z/g1/2", 15, &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(obj_group_count(st, "g1"), 2);
    assert_int_equal(obj_prepare_remove_unguarded(st, "z/g1/2", 15, &r), SMP_ENOTFOUND);
    obj_store_destroy(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_start_end_revoke),
        cmocka_unit_test(test_allocator_fill_free_coalesce_enospc),
        cmocka_unit_test(test_fsck_free_ranges_and_holds),
        cmocka_unit_test(test_replica_list_lease_blocks_remove),
        cmocka_unit_test(test_remove_prefix_managed_group_without_guard),
        cmocka_unit_test(test_remove_prefix_with_veto_guard),
        cmocka_unit_test(test_remove_prefix_with_allow_guard),
        cmocka_unit_test(test_owner_absent_protects_groups),
        cmocka_unit_test(test_group_owner_persisted),
        cmocka_unit_test(test_put_into_managed_group),
        cmocka_unit_test(test_put_end_into_sealed_group_is_refused),
        cmocka_unit_test(test_eviction_plan),
        cmocka_unit_test(test_lru_order_after_load_and_bulk_replay),
        cmocka_unit_test(test_stale_put_cleanup),
        cmocka_unit_test(test_put_touched_by_its_write_is_kept),
        cmocka_unit_test(test_list_prefix_pagination),
        cmocka_unit_test(test_random_puts_and_removes_keep_order),
        cmocka_unit_test(test_group_queries_and_metrics),
        cmocka_unit_test(test_bad_keys_refused),
        cmocka_unit_test(test_key_utf8_judged_alike_at_every_offset),
        cmocka_unit_test(test_put_prefers_node),
        cmocka_unit_test(test_unguarded_remove),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
