/* test_obj_records.c -- unit tests of the object store's durable forms
 * (host_shim/master/obj_store_records.c, obj_store_snapshot.c): OpLog
 * records (encode, apply, replay, idempotence, malformed payloads, their
 * one-line descriptions, records that lose a race with a later change, the
 * PUT_HANDOFF of a master's open puts),
 * snapshots (round trip, the slab of a load changed object by object,
 * invalid input), and randomised operations and a delayed-OpLog pipeline
 * that must replay to the same state.
 *
 * Every durable change goes through the same path the master uses: prepare a
 * record, then apply it. State equality is checked by comparing snapshots,
 * which are deterministic (obj_test_store.h). */
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
/* Records                                                                   */
/* ------------------------------------------------------------------------ */

/* A store with kv/done (logged in *log when log is not NULL) and two puts
 * in flight, not logged: kv/open-1 (300 bytes, tenant tA) and kv/open-2
 * (5000 bytes, group g, pinned); their ranges in *t1 and *t2. */
static obj_store *two_open_puts(rec_log *log, obj_put_ticket *t1, obj_put_ticket *t2)
{
    g_log = log;
    obj_store *a = new_store(NULL);
    mount(a, "s0", "n0", 1 << 16);
    assert_int_equal(put_full(a, "kv/done", 1000, "", "", 10), SMP_OK);
    g_log = NULL;
    obj_put_params p1 = {"kv/open-1", 300, SMP_DATA_KV, "", "tA", 0, 0, NULL, 7};
    obj_put_params p2 = {"kv/open-2", 5000, SMP_DATA_WEIGHT, "g", "", 1, 0, NULL, 7};
    assert_int_equal(obj_put_start(a, &p1, 20, t1), SMP_OK);
    assert_int_equal(obj_put_start(a, &p2, 20, t2), SMP_OK);
    return a;
}

/* Build a varied state through prepare + apply, logging the records. */
static obj_store *build_logged_state(rec_log *log)
{
    g_log = log;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 1 << 16);
    mount(st, "s1", "n1", 1 << 12);
    set_managed(st, "rev", 1);
    set_managed(st, "empty-managed", 1);
    test_guard allow = {.veto = 0, .loaded = 1};
    obj_guard_ops ops = {test_guard_check, test_guard_active, &allow};
    obj_store_set_guard(st, &ops);
    char key[32];
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "obj/%02d", i);
        assert_int_equal(put_full(st, key, (uint64_t)(i * 100), i < 6 ? "rev" : (i < 10 ? "g" : ""),
                                  i % 3 ? "tA" : "tB", (uint64_t)(1000 - i)), SMP_OK);
    }
    obj_store_set_guard(st, NULL);
    obj_record r = {0};
    assert_int_equal(obj_prepare_set_pin(st, "obj/07", 1, &r), SMP_OK);
    apply_rec(st, &r);
    obj_replica reps[3];
    size_t n;
    assert_int_equal(obj_get_replica_list(st, "obj/08", 2000, 0, reps, 3, &n), SMP_OK);
    reps[1] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_PENDING, "n1", NULL, 0, 800, "/c/8"};
    assert_int_equal(obj_prepare_set_replicas(st, "obj/08", reps, 2, &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(obj_reserve_replica(st, "obj/09", "n1", 2500, NULL), SMP_OK);
    assert_int_equal(obj_prepare_add_replica(st, "obj/09", NULL, &r), SMP_OK);
    apply_rec(st, &r);
    remove_key(st, "obj/15", 3000);
    obj_put_params p = {"obj/16", 10, SMP_DATA_METADATA, "", "", 0, 1, NULL, 0};
    assert_int_equal(obj_put_start(st, &p, 3000, NULL), SMP_OK);
    uint8_t sum[32] = {1};
    assert_int_equal(obj_prepare_put_end(st, "obj/16", sum, 3001, &r), SMP_OK);
    apply_rec(st, &r);
    p.key = "revoked";
    assert_int_equal(obj_put_start(st, &p, 3000, NULL), SMP_OK);
    assert_int_equal(obj_prepare_put_revoke(st, "revoked", &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(obj_prepare_segment_update(st, "s0", 1 << 17, &r), SMP_OK);
    apply_rec(st, &r);
    set_managed(st, "g", 1);
    set_managed(st, "g", 0);
    g_log = NULL;
    return st;
}

/* Replaying the records gives the same state; each applied twice in a row
 * too (idempotence). */
static void test_records_replay_and_idempotence(void **state)
{
    (void)state;
    static rec_log log;
    obj_store *a = build_logged_state(&log);
    assert_true(log.n > 30);

    obj_store *b = new_store(NULL);
    for (size_t i = 0; i < log.n; i++)
        assert_int_equal(obj_apply_record(b, log.recs[i].type, log.recs[i].encver,
                                          log.recs[i].buf, log.recs[i].len), SMP_OK);
    assert_same_state(a, b);

    obj_store *c = new_store(NULL);
    for (size_t i = 0; i < log.n; i++) {
        for (int k = 0; k < 2; k++)
            assert_int_equal(obj_apply_record(c, log.recs[i].type, log.recs[i].encver,
                                              log.recs[i].buf, log.recs[i].len), SMP_OK);
    }
    assert_same_state(a, c);
    assert_int_equal(obj_group_count(c, "rev"), 6);
    assert_true(obj_group_is_managed(c, "rev"));
    assert_false(obj_group_is_managed(c, "g"));
    uint64_t objs, bytes;
    obj_tenant_usage(c, "tA", &objs, &bytes);
    uint64_t objs_a, bytes_a;
    obj_tenant_usage(a, "tA", &objs_a, &bytes_a);
    assert_int_equal(objs, objs_a);
    assert_int_equal(bytes, bytes_a);

    /* An unmount record, twice. */
    obj_record r = {0};
    assert_int_equal(obj_prepare_segment_unmount(a, "s1", &r), SMP_OK);
    assert_int_equal(obj_apply_record(c, r.type, r.encver, r.buf, r.len), SMP_OK);
    assert_int_equal(obj_apply_record(c, r.type, r.encver, r.buf, r.len), SMP_OK);
    apply_rec(a, &r);
    assert_same_state(a, c);

    free_log(&log);
    obj_store_destroy(a);
    obj_store_destroy(b);
    obj_store_destroy(c);
}

/* Malformed payloads are refused with SMP_EPROTO (unknown types with
 * SMP_ENOTFOUND) and change nothing; truncations never crash. */
static void test_records_malformed(void **state)
{
    (void)state;
    static rec_log log;
    obj_store *st = build_logged_state(&log);
    free_log(&log);

    const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x80};
    for (uint16_t t = 1; t <= 7; t++) {
        if (t == 4) continue;
        expect_rejected(st, t, garbage, sizeof(garbage), SMP_EPROTO);
    }
    expect_rejected(st, 4, garbage, 0, SMP_ENOTFOUND);
    expect_rejected(st, 8, garbage, 0, SMP_ENOTFOUND);
    expect_rejected(st, 0, garbage, 0, SMP_ENOTFOUND);
    assert_int_equal(obj_apply_record(st, OBJ_REC_REMOVE, 2, NULL, 0), SMP_EPROTO);
    expect_rejected(st, OBJ_REC_PUT_END, NULL, 0, SMP_EPROTO); /* empty key */
    expect_rejected(st, OBJ_REC_SEGMENT_UPDATE, NULL, 0, SMP_EPROTO); /* no change */

    /* Well-formed protobuf, invalid content. */
    uint8_t sum[32] = {0};
    Hostrec__Replica rep = HOSTREC__REPLICA__INIT;
    Hostrec__Replica *reps[1] = {&rep};
    Hostrec__ObjectRecord m = HOSTREC__OBJECT_RECORD__INIT;
    m.key = "bad";
    m.checksum.data = sum;
    m.checksum.len = 32;
    uint8_t *b;
    size_t len;
    m.data_type = 7;
    pack_object(&m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    m.data_type = 0;
    m.checksum.len = 5;
    pack_object(&m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    m.checksum.len = 32;
    m.key = "bad\xc3\x28";
    pack_object(&m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    m.key = "bad";
    m.n_replicas = 1;
    m.replicas = reps;
    rep.node = "n0";
    rep.segment = "s0";
    rep.length = 10;
    rep.offset = 33; /* unaligned */
    pack_object(&m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    rep.offset = 0;
    rep.kind = 9;
    pack_object(&m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);

    /* Every truncation of a valid record: no crash, and no change on error. */
    obj_record r = {0};
    assert_int_equal(obj_prepare_set_pin(st, "obj/08", 1, &r), SMP_OK);
    for (size_t cut = 0; cut < r.len; cut++) {
        buf before = save(st);
        int rc = obj_apply_record(st, r.type, r.encver, r.buf, cut);
        if (rc != SMP_OK) {
            buf after = save(st);
            assert_int_equal(before.n, after.n);
            assert_memory_equal(before.p, after.p, before.n);
            free(after.p);
        }
        free(before.p);
    }
    obj_record_free(&r);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Snapshots                                                                 */
/* ------------------------------------------------------------------------ */

/* build_logged_state without its log, returned, and a new store loaded from
 * its snapshot in *copy, checked to have the same state; the snapshot's
 * bytes in *snap when snap is not NULL (the caller frees them). */
static obj_store *build_state_and_load(obj_store **copy, buf *snap)
{
    static rec_log log;
    obj_store *a = build_logged_state(&log);
    free_log(&log);
    buf s = save(a);
    obj_store *b = new_store(NULL);
    assert_int_equal(obj_store_load(b, s.p, s.n), SMP_OK);
    assert_same_state(a, b);
    *copy = b;
    if (snap) *snap = s;
    else free(s.p);
    return a;
}

static void test_snapshot_round_trip(void **state)
{
    (void)state;
    obj_store *b = NULL;
    buf s = {0};
    obj_store *a = build_state_and_load(&b, &s);
    assert_int_equal(obj_store_load(b, s.p, s.n), SMP_ESTATE); /* not empty */
    assert_true(obj_group_is_managed(b, "empty-managed"));
    assert_int_equal(obj_group_count(b, "rev"), 6);
    smp_object_info ia = {.struct_size = sizeof(ia)}, ib = {.struct_size = sizeof(ib)};
    assert_int_equal(obj_object_info(a, "obj/08", &ia), SMP_OK);
    assert_int_equal(obj_object_info(b, "obj/08", &ib), SMP_OK);
    assert_int_equal(ia.size, ib.size);
    assert_int_equal(ia.hard_pinned, ib.hard_pinned);
    assert_memory_equal(ia.checksum, ib.checksum, 32);
    /* The loaded allocator is live: a put lands in free space only. */
    obj_put_params p = {"fresh", 50000, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(b, &p, 5000, NULL), SMP_OK);
    assert_int_equal(obj_put_start(a, &p, 5000, NULL), SMP_OK);
    uint64_t ua, ub;
    obj_memory_usage(a, &ua, NULL);
    obj_memory_usage(b, &ub, NULL);
    assert_int_equal(ua, ub);
    free(s.p);

    /* An empty store round-trips too. */
    obj_store *e = new_store(NULL), *f = new_store(NULL);
    s = save(e);
    assert_int_equal(obj_store_load(f, s.p, s.n), SMP_OK);
    assert_same_state(e, f);
    free(s.p);
    obj_store_destroy(a);
    obj_store_destroy(b);
    obj_store_destroy(e);
    obj_store_destroy(f);
}

/* The puts in flight when a snapshot is taken are in it (after the
 * objects): a store loaded from it holds their ranges as a PUT_HANDOFF's
 * (their time from its first sweep), takes their put ends, and gives new
 * puts other ranges; a snapshot whose open put is not free in its own
 * image is refused whole. */
static void test_snapshot_carries_open_puts(void **state)
{
    (void)state;
    obj_put_ticket t1, t2;
    obj_store *a = two_open_puts(NULL, &t1, &t2);
    buf s = save(a);
    obj_store *b = new_store(NULL);
    assert_int_equal(obj_store_load(b, s.p, s.n), SMP_OK);
    assert_same_state(a, b);
    obj_stats sb;
    obj_store_stats(b, &sb);
    assert_int_equal(sb.puts_in_flight, 2);
    assert_string_equal(obj_put_group(b, "kv/open-2"), "g");
    /* a new put goes elsewhere, with a later incarnation */
    obj_put_params p3 = {"kv/new", 300, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    obj_put_ticket t3;
    assert_int_equal(obj_put_start(b, &p3, 30, &t3), SMP_OK);
    assert_true(t3.offset >= t2.offset + 5056 || t3.offset + 320 <= t1.offset);
    obj_record r = {0};
    uint8_t sum[32] = {5};
    assert_int_equal(obj_prepare_put_end(b, "kv/new", sum, 40, &r), SMP_OK);
    apply_rec(b, &r);
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(b, "kv/new", &info), SMP_OK);
    /* the writer's put end, as a prepared there, completes at b */
    assert_int_equal(obj_prepare_put_end(a, "kv/open-2", sum, 40, &r), SMP_OK);
    apply_rec(b, &r);
    obj_replica reps[2];
    size_t nr = 0;
    assert_int_equal(obj_object_replicas(b, "kv/open-2", reps, 2, &nr), SMP_OK);
    assert_int_equal(reps[0].offset, t2.offset);
    /* the other one's time runs from b's first sweep */
    assert_int_equal(obj_cleanup_stale_puts(b, 500000, 1000), 0);
    assert_int_equal(obj_cleanup_stale_puts(b, 501000, 1000), 1);
    obj_store_stats(b, &sb);
    assert_int_equal(sb.puts_in_flight, 0);

    /* an open put over kv/done's range: refused, the store left empty */
    obj_replica done;
    assert_int_equal(obj_object_replicas(a, "kv/done", &done, 1, &nr), SMP_OK);
    Hostrec__HandedPut h = HOSTREC__HANDED_PUT__INIT;
    h.key = "kv/over";
    h.size = 64;
    h.group = "";
    h.tenant = "";
    h.segment = "s0";
    h.offset = done.offset;
    h.put_id = 99;
    uint8_t field[128];
    size_t n = hostrec__handed_put__get_packed_size(&h);
    assert_true(n < 120);
    field[0] = 0x2a;
    field[1] = (uint8_t)n;
    hostrec__handed_put__pack(&h, field + 2);
    buf bad = {0};
    assert_int_equal(buf_write(&bad, s.p, s.n), 0);
    assert_int_equal(buf_write(&bad, field, n + 2), 0);
    obj_store *c = new_store(NULL);
    assert_int_equal(obj_store_load(c, bad.p, bad.n), SMP_EPROTO);
    obj_stats sc;
    obj_store_stats(c, &sc);
    assert_int_equal(sc.puts_in_flight, 0);
    assert_int_equal(used_of(c), 0);
    /* or on a segment the snapshot lacks: refused as well */
    bad.n = s.n;
    h.segment = "s9";
    n = hostrec__handed_put__get_packed_size(&h);
    field[1] = (uint8_t)n;
    hostrec__handed_put__pack(&h, field + 2);
    assert_int_equal(buf_write(&bad, field, n + 2), 0);
    assert_int_equal(obj_store_load(c, bad.p, bad.n), SMP_EPROTO);
    obj_store_stats(c, &sc);
    assert_int_equal(sc.puts_in_flight, 0);
    assert_int_equal(used_of(c), 0);
    h.segment = "s0";
    /* the same put elsewhere loads */
    obj_store *d = new_store(NULL);
    bad.n = s.n;
    h.offset = 60032; /* free, and 64-aligned */
    n = hostrec__handed_put__get_packed_size(&h);
    field[1] = (uint8_t)n;
    hostrec__handed_put__pack(&h, field + 2);
    assert_int_equal(buf_write(&bad, field, n + 2), 0);
    assert_int_equal(obj_store_load(d, bad.p, bad.n), SMP_OK);
    obj_store_stats(d, &sc);
    assert_int_equal(sc.puts_in_flight, 3);
    free(bad.p);
    free(s.p);
    obj_store_destroy(a);
    obj_store_destroy(b);
    obj_store_destroy(c);
    obj_store_destroy(d);
}

/* The objects of a load live in one slab (obj_store_snapshot.c): each is
 * still replaced, given a replica and removed on its own, and the store
 * loaded from a snapshot stays the same as the one saved through all of it
 * (ASan and valgrind check each object is freed once and the slab goes with
 * the last). */
static void test_loaded_objects_changed_and_removed_one_by_one(void **state)
{
    (void)state;
    obj_store *b = NULL;
    obj_store *a = build_state_and_load(&b, NULL);
    test_guard allow = {.veto = 0, .loaded = 1};
    obj_guard_ops ops = {test_guard_check, test_guard_active, &allow};
    obj_store *both[2] = {a, b};
    obj_record r = {0};
    for (int k = 0; k < 2; k++) {
        obj_store *st = both[k];
        obj_store_set_guard(st, &ops);
        /* A replica added to a loaded object moves its list off the slab. */
        assert_int_equal(obj_reserve_replica(st, "obj/02", "n0", 4000, NULL), SMP_OK);
        assert_int_equal(obj_prepare_add_replica(st, "obj/02", NULL, &r), SMP_OK);
        apply_rec(st, &r);
    }
    assert_same_state(a, b);
    for (int k = 0; k < 2; k++) {
        obj_store *st = both[k];
        /* A loaded object replaced by a new incarnation (its put id is the
         * store's next, which a load takes from the objects it holds: the
         * two stores differ in it until the object is removed). */
        obj_put_params p = {"obj/03", 123, SMP_DATA_KV, "rev", "tA", 0, 1, NULL, 0};
        assert_int_equal(obj_put_start(st, &p, 4001, NULL), SMP_OK);
        uint8_t sum[32] = {3};
        assert_int_equal(obj_prepare_put_end(st, "obj/03", sum, 4001, &r), SMP_OK);
        apply_rec(st, &r);
    }
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(b, "obj/03", &info), SMP_OK);
    assert_int_equal(info.size, 123);
    char key[32];
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "obj/%02d", i);
        int ra = obj_prepare_remove(a, key, 5000, &r);
        if (ra == SMP_OK) apply_rec(a, &r);
        int rb = obj_prepare_remove(b, key, 5000, &r);
        if (rb == SMP_OK) apply_rec(b, &r);
        assert_int_equal(ra, rb);
        if (i >= 3) assert_same_state(a, b);
        int want = ra == SMP_OK ? SMP_ENOTFOUND : obj_object_info(a, key, &info);
        assert_int_equal(obj_object_info(b, key, &info), want);
    }
    obj_store_destroy(a);
    obj_store_destroy(b);
}

/* The group an object reads, of a name the group holds once for all its
 * members. key's group is want (NULL: none) and, when same is given, the
 * very string same's group is. */
static void assert_group_of(const obj_store *st, const char *key, const char *want, const char *same)
{
    smp_object_info ik = {.struct_size = sizeof(ik)}, is = {.struct_size = sizeof(is)};
    assert_int_equal(obj_object_info(st, key, &ik), SMP_OK);
    assert_string_equal(ik.group, want ? want : "");
    if (!same) return;
    assert_int_equal(obj_object_info(st, same, &is), SMP_OK);
    assert_ptr_equal(ik.group, is.group);
}

/* Put key again (an upsert) into group at now, prepare + apply. */
static void upsert_into(obj_store *st, const char *key, const char *group, uint64_t now)
{
    obj_put_params p = {key, 100, SMP_DATA_KV, group, "tA", 0, 1, NULL, 0};
    assert_int_equal(obj_put_start(st, &p, now, NULL), SMP_OK);
    uint8_t sum[32] = {1};
    obj_record r = {0};
    assert_int_equal(obj_prepare_put_end(st, key, sum, now, &r), SMP_OK);
    apply_rec(st, &r);
}

/* Objects share their group's name (one copy per group, not per object;
 * issue 20): it is never the record's they were applied from (freed after
 * the apply), it follows an object into another group and stays right for
 * the members left when a group goes with its last member, and a snapshot
 * load shares it the same way. Run under ASan and valgrind, a read of a
 * freed name fails it. */
static void test_objects_share_their_groups_name(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 1 << 16);
    assert_int_equal(put_full(st, "a", 100, "g1", "tA", 1), SMP_OK);
    assert_int_equal(put_full(st, "b", 100, "g1", "tA", 2), SMP_OK);
    assert_int_equal(put_full(st, "c", 100, "", "tA", 3), SMP_OK);
    assert_group_of(st, "a", "g1", "b");
    assert_group_of(st, "c", NULL, NULL);

    /* a moves to g2; b to g3, which leaves g1 without members. */
    upsert_into(st, "a", "g2", 4);
    assert_int_equal(obj_group_count(st, "g1"), 1);
    upsert_into(st, "b", "g3", 5);
    assert_int_equal(obj_group_count(st, "g1"), 0);
    assert_group_of(st, "a", "g2", NULL);
    assert_group_of(st, "b", "g3", NULL);
    assert_int_equal(put_full(st, "d", 100, "g3", "tA", 6), SMP_OK);
    upsert_into(st, "c", "g3", 7); /* joins one */
    assert_group_of(st, "d", "g3", "b");
    assert_group_of(st, "c", "g3", "b");

    /* g2 goes with a; the members of g3 do not move when b leaves. */
    remove_key(st, "a", 8);
    assert_int_equal(obj_group_count(st, "g2"), 0);
    remove_key(st, "b", 9);
    assert_group_of(st, "d", "g3", "c");

    buf s = save(st);
    obj_store *l = new_store(NULL);
    assert_int_equal(obj_store_load(l, s.p, s.n), SMP_OK);
    free(s.p);
    assert_same_state(st, l);
    assert_group_of(l, "d", "g3", "c");
    upsert_into(l, "c", "", 10); /* leaves it */
    assert_group_of(l, "c", NULL, NULL);
    assert_group_of(l, "d", "g3", NULL);
    obj_store_destroy(l);
    obj_store_destroy(st);
}

static void assert_empty(obj_store *st)
{
    obj_store *e = new_store(NULL);
    assert_same_state(st, e);
    obj_store_destroy(e);
    const char *keys[1];
    size_t n;
    assert_int_equal(obj_list_prefix(st, "", NULL, NULL, 1, keys, &n, NULL), SMP_OK);
    assert_int_equal(n, 0);
}

/* An invalid snapshot is refused and leaves the store empty. */
static void test_snapshot_invalid(void **state)
{
    (void)state;
    const uint8_t garbage[] = {0x08, 0x01, 0x12, 0xff, 0xff, 0x03};
    obj_store *st = new_store(NULL);
    assert_int_equal(obj_store_load(st, garbage, sizeof(garbage)), SMP_EPROTO);
    assert_empty(st);
    const uint8_t wrong_format[] = {0x08, 0x02};
    assert_int_equal(obj_store_load(st, wrong_format, sizeof(wrong_format)), SMP_EPROTO);
    assert_empty(st);

    /* Valid protobuf, but an object on a segment the snapshot lacks (after
     * valid segments and objects, which must be undone). */
    static rec_log log;
    obj_store *a = build_logged_state(&log);
    free_log(&log);
    buf s = save(a);
    uint8_t sum[32] = {0};
    Hostrec__Replica rep = HOSTREC__REPLICA__INIT;
    Hostrec__Replica *reps[1] = {&rep};
    rep.node = "n9";
    rep.segment = "s9";
    rep.length = 1;
    Hostrec__ObjectRecord m = HOSTREC__OBJECT_RECORD__INIT;
    m.key = "zzz/last";
    m.checksum.data = sum;
    m.checksum.len = 32;
    m.n_replicas = 1;
    m.replicas = reps;
    uint8_t *b;
    size_t len;
    pack_object(&m, &b, &len);
    uint8_t hdr[2] = {0x22, (uint8_t)len};
    assert_true(len < 128);
    buf_write(&s, hdr, 2);
    buf_write(&s, b, len);
    free(b);
    assert_int_equal(obj_store_load(st, s.p, s.n), SMP_EPROTO);
    assert_empty(st);

    /* A duplicate key. */
    s.n -= 2 + len;
    buf one = {0};
    obj_store *single = new_store(NULL);
    mount(single, "s0", "n0", 1 << 16);
    assert_int_equal(put_full(single, "dup", 1, "", "", 1), SMP_OK);
    one = save(single);
    buf two = {0};
    buf_write(&two, one.p, one.n);
    buf_write(&two, one.p + 2, one.n - 2); /* segments and the object again */
    assert_int_equal(obj_store_load(st, two.p, two.n), SMP_EPROTO);
    assert_empty(st);

    /* The object's key again alone (a cold replica: nothing overlaps), of
     * an older, the same and a newer incarnation: each is refused whole,
     * the older one too although a replay would skip it. */
    for (uint64_t put_id = 0; put_id <= 2; put_id++) {
        Hostrec__Replica cold = HOSTREC__REPLICA__INIT;
        Hostrec__Replica *coldp[1] = {&cold};
        cold.kind = SMP_REPLICA_COLD;
        cold.node = "n0";
        cold.path = "dup.cold";
        cold.length = 1;
        Hostrec__ObjectRecord d = HOSTREC__OBJECT_RECORD__INIT;
        d.key = "dup";
        d.size = 1;
        d.checksum.data = sum;
        d.checksum.len = 32;
        d.n_replicas = 1;
        d.replicas = coldp;
        d.put_id = put_id;
        uint8_t *db;
        size_t dlen;
        pack_object(&d, &db, &dlen);
        assert_true(dlen < 128);
        buf again = {0};
        buf_write(&again, one.p, one.n);
        uint8_t dh[2] = {0x22, (uint8_t)dlen};
        buf_write(&again, dh, 2);
        buf_write(&again, db, dlen);
        free(db);
        assert_int_equal(obj_store_load(st, again.p, again.n), SMP_EPROTO);
        assert_empty(st);
        /* without the second record the same bytes load */
        assert_int_equal(obj_store_load(st, one.p, one.n), SMP_OK);
        assert_true(obj_exists(st, "dup"));
        obj_store_destroy(st);
        st = new_store(NULL);
        free(again.p);
    }

    /* Every truncation: loads or fails with the store left empty. */
    for (size_t cut = 0; cut < s.n; cut += 7) {
        int rc = obj_store_load(st, s.p, cut);
        if (rc == SMP_OK) {
            obj_store_destroy(st);
            st = new_store(NULL);
        } else {
            assert_int_equal(rc, SMP_EPROTO);
            assert_empty(st);
        }
    }
    free(one.p);
    free(two.p);
    free(s.p);
    obj_store_destroy(single);
    obj_store_destroy(a);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Describing records                                                        */
/* ------------------------------------------------------------------------ */

/* Bytes arriving for obj_store_load_fed: each wait lets in what it asks for
 * and `step` more (as a reader ahead of the decoder), up to `stop`. */
typedef struct feeder {
    size_t avail, step, stop;
    int waits;
} feeder;

static size_t feed_wait(void *arg, size_t upto)
{
    feeder *f = arg;
    f->waits++;
    if (upto > f->avail) f->avail = upto + f->step;
    if (f->avail > f->stop) f->avail = f->stop;
    return f->avail;
}

/* s with the two bytes tail after it is refused (SMP_EPROTO) by the whole
 * load and by the fed one, each leaving the empty store b empty. */
static void assert_refused_with_tail(obj_store *b, const buf *s, const uint8_t tail[2])
{
    buf x = {0};
    buf_write(&x, s->p, s->n);
    buf_write(&x, tail, 2);
    assert_int_equal(obj_store_load(b, x.p, x.n), SMP_EPROTO);
    assert_empty(b);
    feeder f = {0, 4096, x.n, 0};
    assert_int_equal(obj_store_load_fed(b, x.p, x.n, feed_wait, &f), SMP_EPROTO);
    assert_empty(b);
    free(x.p);
}

/* A store of 16,000 objects in 1,000 groups (some managed): a section of
 * some 2 MB, more than the fed load samples before it starts. */
static obj_store *big_state(void)
{
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", (uint64_t)16000 * 64);
    char key[64], group[32];
    for (int g = 0; g < 1000; g++) {
        snprintf(group, sizeof(group), "model/rev-%04d", g);
        for (int t = 0; t < 16; t++) {
            snprintf(key, sizeof(key), "%s/tensor-%03d", group, t);
            assert_int_equal(put_full(st, key, 1, group, "", (uint64_t)(g * 16 + t)), SMP_OK);
        }
        if (g % 7 == 0) set_managed(st, group, 1);
    }
    return st;
}

/* obj_store_load_fed takes a section as its bytes arrive and builds the
 * store the whole load builds: in a save's order, in one pass while the
 * bytes come (it waited many times, never for all of them at once); a
 * group record after the objects, or the segment after the objects whose
 * replicas it holds (other orders), is loaded again whole once all is in; bytes that stop short, a format other than the store's at the
 * end, and a field that does not decode are refused (SMP_EPROTO) with the
 * store left empty, as the whole load refuses them. */
static void test_snapshot_loads_as_its_bytes_arrive(void **state)
{
    (void)state;
    obj_store *a = big_state();
    buf s = save(a);
    assert_true(s.n > ((size_t)3 << 19));

    obj_store *b = new_store(NULL);
    feeder f = {0, 4096, s.n, 0};
    assert_int_equal(obj_store_load_fed(b, s.p, s.n, feed_wait, &f), SMP_OK);
    assert_same_state(a, b);
    assert_true(f.waits > 100);
    obj_store_destroy(b);

    /* A managed group after the objects. */
    obj_store *g = new_store(NULL);
    set_managed(g, "zzz-late", 1);
    buf gs = save(g);
    buf late = {0};
    buf_write(&late, s.p, s.n);
    buf_write(&late, gs.p + 2, gs.n - 2); /* without its format field */
    obj_store *whole = new_store(NULL);
    assert_int_equal(obj_store_load(whole, late.p, late.n), SMP_OK);
    assert_true(obj_group_is_managed(whole, "zzz-late"));
    b = new_store(NULL);
    f = (feeder){0, 4096, late.n, 0};
    assert_int_equal(obj_store_load_fed(b, late.p, late.n, feed_wait, &f), SMP_OK);
    assert_same_state(whole, b);
    obj_store_destroy(b);
    obj_store_destroy(whole);

    /* The segment after the objects whose replicas are in it: one pass in
     * the order of the bytes would drop every replica. */
    assert_int_equal(s.p[2], 0x12); /* the segment, right after the format */
    size_t seg_len = 2 + (size_t)s.p[3];
    assert_true(s.p[3] < 0x80);
    buf moved = {0};
    buf_write(&moved, s.p, 2);
    buf_write(&moved, s.p + 2 + seg_len, s.n - 2 - seg_len);
    buf_write(&moved, s.p + 2, seg_len);
    b = new_store(NULL);
    f = (feeder){0, 4096, moved.n, 0};
    assert_int_equal(obj_store_load_fed(b, moved.p, moved.n, feed_wait, &f), SMP_OK);
    assert_same_state(a, b);
    obj_store_destroy(b);

    /* The bytes stop halfway. */
    b = new_store(NULL);
    f = (feeder){0, 4096, s.n / 2, 0};
    assert_int_equal(obj_store_load_fed(b, s.p, s.n, feed_wait, &f), SMP_EPROTO);
    assert_empty(b);

    /* A second format field at the end, of another format (the last
     * wins); a field after the last record of a wire type protobuf-c
     * refuses (a tag of wire type 7). The whole load finds either before
     * it applies anything, the fed one after it applied everything. */
    const uint8_t other_format[2] = {0x08, 0x02}, wire_type_7[2] = {0x0f, 0x00};
    assert_refused_with_tail(b, &s, other_format);
    assert_refused_with_tail(b, &s, wire_type_7);

    /* Then the store still loads. */
    f = (feeder){0, 1 << 16, s.n, 0};
    assert_int_equal(obj_store_load_fed(b, s.p, s.n, feed_wait, &f), SMP_OK);
    assert_same_state(a, b);
    free(s.p);
    free(gs.p);
    free(late.p);
    free(moved.p);
    obj_store_destroy(a);
    obj_store_destroy(b);
    obj_store_destroy(g);
}

/* Every host record describes itself in one line naming its type. */
static void test_describe_records(void **state)
{
    (void)state;
    static rec_log log;
    obj_store *st = build_logged_state(&log);
    char line[256];
    for (size_t i = 0; i < log.n; i++) {
        const obj_record *r = &log.recs[i];
        int need = obj_describe_record(r->type, r->encver, r->buf, r->len, NULL, 0);
        assert_true(need > 0);
        int got = obj_describe_record(r->type, r->encver, r->buf, r->len, line, sizeof(line));
        assert_int_equal(got, need);
        assert_non_null(strstr(line, obj_record_type_name(r->type)));
    }
    /* Truncated payloads and a tiny buffer: an error or a cut line, no crash. */
    for (size_t i = 0; i < log.n; i++) {
        const obj_record *r = &log.recs[i];
        for (size_t cut = 0; cut < r->len; cut++) {
            int rc = obj_describe_record(r->type, r->encver, r->buf, cut, line, 8);
            assert_true(rc == SMP_EPROTO || (rc >= 0 && strlen(line) <= 7));
        }
    }
    const uint8_t garbage[] = {0xff, 0xff, 0xff};
    assert_int_equal(obj_describe_record(OBJ_REC_REMOVE, 1, garbage, 3, line, sizeof(line)),
                     SMP_EPROTO);
    assert_int_equal(obj_describe_record(9, 1, garbage, 0, line, sizeof(line)), SMP_ENOTFOUND);
    assert_string_equal(obj_record_type_name(4), "UNKNOWN");
    free_log(&log);
    obj_store_destroy(st);
}

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
/* Records that lose a race                                                  */
/* ------------------------------------------------------------------------ */

/* Records prepared against an older incarnation (pin, remove, eviction to
 * cold) that are applied after an upsert change nothing; a put end applied
 * after its segment was unmounted creates the object without the lost
 * replica instead of failing (replay would stop there). Replaying the log
 * makes the same choices. */
static void test_records_that_lose_races(void **state)
{
    (void)state;
    static rec_log log;
    g_log = &log;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 1 << 16);
    mount(st, "s1", "n1", 1 << 10);
    assert_int_equal(put_full(st, "k", 100, "", "", 1), SMP_OK);
    obj_replica reps[2];
    size_t n;
    assert_int_equal(obj_get_replica_list(st, "k", 2, 0, reps, 2, &n), SMP_OK);
    reps[1] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_COMPLETE, "n0", NULL, 0, 100, "/c/k"};
    obj_record r = {0};
    assert_int_equal(obj_prepare_set_replicas(st, "k", reps, 2, &r), SMP_OK);
    apply_rec(st, &r);

    obj_record pin = {0}, rm = {0};
    assert_int_equal(obj_prepare_set_pin(st, "k", 1, &pin), SMP_OK);
    assert_int_equal(obj_prepare_remove(st, "k", 3, &rm), SMP_OK);
    obj_record_list evict = {0};
    assert_int_equal(obj_plan_eviction(st, 0.0, 0.0, 3, &evict, NULL), SMP_OK);
    assert_int_equal(evict.n, 1); /* keeps the cold copy: an update record */

    /* The master holds the keys of appended records: no new read leases. */
    obj_held *held = NULL;
    assert_non_null(rm.held); /* built while encoding: taken, not decoded */
    assert_int_equal(obj_hold_record(st, &rm, &held), SMP_OK);
    assert_non_null(held);
    assert_null(rm.held);
    assert_int_equal(obj_get_replica_list(st, "k", 4, 100, reps, 2, &n), SMP_EBUSY);
    obj_release_hold(st, held);
    assert_int_equal(obj_get_replica_list(st, "k", 4, 0, reps, 2, &n), SMP_OK);

    /* The upsert lands first. */
    obj_put_params p = {"k", 300, SMP_DATA_KV, "", "", 0, 1, NULL, 0};
    assert_int_equal(obj_put_start(st, &p, 5, NULL), SMP_OK);
    uint8_t sum[32] = {7};
    assert_int_equal(obj_prepare_put_end(st, "k", sum, 6, &r), SMP_OK);
    apply_rec(st, &r);
    buf before = save(st);
    apply_rec(st, &pin);
    apply_rec(st, &rm);
    apply_rec(st, &evict.recs[0]);
    obj_record_list_free(&evict);
    buf after = save(st);
    assert_int_equal(before.n, after.n);
    assert_memory_equal(before.p, after.p, before.n);
    free(before.p);
    free(after.p);
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(st, "k", &info), SMP_OK);
    assert_int_equal(info.size, 300);
    assert_int_equal(info.hard_pinned, 0);
    assert_int_equal(info.memory_replicas_readable, 1);
    assert_int_equal(used_of(st), 320);

    /* A put end appended after the unmount of its segment. */
    p = (obj_put_params){"u", 10, SMP_DATA_KV, "", "", 0, 0, "n1", 0};
    obj_put_ticket t;
    assert_int_equal(obj_put_start(st, &p, 7, &t), SMP_OK);
    assert_string_equal(t.segment, "s1");
    obj_record unmount = {0}, end = {0};
    assert_int_equal(obj_prepare_segment_unmount(st, "s1", &unmount), SMP_OK);
    assert_int_equal(obj_prepare_put_end(st, "u", sum, 8, &end), SMP_OK);
    apply_rec(st, &unmount);
    apply_rec(st, &end);
    assert_true(obj_exists(st, "u"));
    assert_int_equal(obj_object_info(st, "u", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 0);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.replicas_dropped, 1);
    assert_int_equal(s.puts_in_flight, 0);

    /* A PUT_END naming the range of another in-flight put takes it: the put
     * is cancelled (replay, which has no puts, agrees). */
    p = (obj_put_params){"v", 10, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(st, &p, 9, &t), SMP_OK);
    assert_int_equal(obj_prepare_put_end(st, "v", sum, 9, &end), SMP_OK);
    assert_int_equal(obj_prepare_put_revoke(st, "v", &r), SMP_OK);
    apply_rec(st, &r);
    p.key = "w";
    obj_put_ticket t2;
    assert_int_equal(obj_put_start(st, &p, 9, &t2), SMP_OK);
    assert_int_equal(t2.offset, t.offset); /* first fit reuses the range */
    apply_rec(st, &end);
    assert_true(obj_exists(st, "v"));
    assert_int_equal(obj_prepare_put_end(st, "w", sum, 10, &r), SMP_ENOTFOUND);
    obj_store_stats(st, &s);
    assert_int_equal(s.puts_cancelled, 1);
    assert_int_equal(s.puts_in_flight, 0);

    /* A crafted PUT_END listing the same range twice, while its own put is
     * in flight: the duplicate is dropped, nothing else is touched. */
    p.key = "x";
    assert_int_equal(obj_put_start(st, &p, 11, &t), SMP_OK);
    assert_int_equal(obj_prepare_put_end(st, "x", sum, 11, &end), SMP_OK);
    Hostrec__ObjectRecord *om = hostrec__object_record__unpack(NULL, end.len, end.buf);
    assert_non_null(om);
    Hostrec__Replica *two[2] = {om->replicas[0], om->replicas[0]};
    Hostrec__Replica **saved_reps = om->replicas;
    om->replicas = two;
    om->n_replicas = 2;
    obj_record_free(&end);
    end.type = OBJ_REC_PUT_END;
    end.encver = OBJ_REC_ENCVER;
    end.len = hostrec__object_record__get_packed_size(om);
    end.buf = malloc(end.len);
    assert_non_null(end.buf);
    hostrec__object_record__pack(om, end.buf);
    om->replicas = saved_reps;
    om->n_replicas = 1;
    hostrec__object_record__free_unpacked(om, NULL);
    uint64_t used_before = used_of(st);
    apply_rec(st, &end);
    assert_int_equal(used_of(st), used_before);
    assert_int_equal(obj_object_info(st, "x", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 1);
    obj_store_stats(st, &s);
    assert_int_equal(s.replicas_dropped, 2);
    assert_int_equal(s.puts_in_flight, 0);
    g_log = NULL;

    assert_log_replays(st, &log);
    obj_store_destroy(st);
}

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

/* The REMOVE record written by hand is protobuf-c's bytes for the same
 * RemoveRecord: no key, one, keys and put ids of every varint length (a key
 * of 200 bytes, ids up to UINT64_MAX), and a batch long enough that the
 * packed ids' length takes two bytes. */
static void test_remove_record_is_protobuf_c_s_bytes(void **state)
{
    (void)state;
    enum { MANY = 300 };
    static char long_key[201];
    static char many_keys[MANY][16];
    const char *keys[MANY];
    uint64_t ids[MANY];
    memset(long_key, 'L', 200);
    const char *k3[] = {"a", long_key, "weights/ns/r/1/t.bin"};
    const uint64_t i3[] = {0, 128, UINT64_MAX};
    for (size_t i = 0; i < MANY; i++) {
        snprintf(many_keys[i], sizeof(many_keys[i]), "k/%zu", i);
        keys[i] = many_keys[i];
        ids[i] = (uint64_t)1 << (i % 64);
    }
    const struct {
        const char *const *keys;
        const uint64_t *ids;
        size_t n;
    } cases[] = {{NULL, NULL, 0}, {k3, i3, 1}, {k3, i3, 3}, {keys, ids, MANY}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        obj_record r = {0};
        assert_int_equal(obj_encode_remove(cases[c].keys, cases[c].ids, cases[c].n, &r), SMP_OK);
        Hostrec__RemoveRecord m = HOSTREC__REMOVE_RECORD__INIT;
        m.n_keys = m.n_put_ids = cases[c].n;
        m.keys = (char **)cases[c].keys;
        m.put_ids = (uint64_t *)cases[c].ids;
        size_t len = hostrec__remove_record__get_packed_size(&m);
        uint8_t *want = malloc(len ? len : 1);
        assert_non_null(want);
        hostrec__remove_record__pack(&m, want);
        assert_int_equal(r.type, OBJ_REC_REMOVE);
        assert_int_equal(r.encver, OBJ_REC_ENCVER);
        assert_int_equal(r.len, len);
        assert_memory_equal(r.buf, want, len);
        free(want);
        obj_record_free(&r);
    }
}

/* ------------------------------------------------------------------------ */
/* PUT_HANDOFF                                                               */
/* ------------------------------------------------------------------------ */

/* Apply r at its own type and version to st, expecting want. */
static void apply_expect(obj_store *st, const obj_record *r, int want)
{
    assert_int_equal(obj_apply_record(st, r->type, r->encver, r->buf, r->len), want);
}

/* A PUT_HANDOFF gives the master that replays it the puts its writer is
 * still filling: the same ranges, in flight (so nobody else gets them), and
 * their put ends complete there. Applying it twice, or on the store that
 * wrote it, changes nothing; a put whose range or key is taken meanwhile is
 * not taken over, but puts an older handoff gave give way to a later one;
 * its time runs from the first sweep after. */
static void test_put_handoff_carries_open_puts(void **state)
{
    (void)state;
    static rec_log log;
    obj_put_ticket t1, t2;
    obj_store *a = two_open_puts(&log, &t1, &t2);
    obj_put_params p1 = {"kv/open-1", 300, SMP_DATA_KV, "", "tA", 0, 0, NULL, 7};
    uint64_t off1 = t1.offset, off2 = t2.offset;

    obj_record h = {0};
    size_t n = 0;
    assert_int_equal(obj_prepare_put_handoff(a, &h, &n), SMP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(h.type, OBJ_REC_PUT_REVOKE);
    assert_int_equal(h.encver, OBJ_REC_HANDOFF_ENCVER);
    char line[256];
    assert_true(obj_describe_record(h.type, h.encver, h.buf, h.len, line, sizeof(line)) > 0);
    assert_string_equal(line, "PUT_HANDOFF puts=2 first=kv/open-1 segment=s0 offset=1024 "
                              "size=300 put_id=2");
    /* on the store that wrote it: nothing changes */
    obj_stats sa;
    apply_expect(a, &h, SMP_OK);
    obj_store_stats(a, &sa);
    assert_int_equal(sa.puts_in_flight, 2);
    assert_int_equal(sa.puts_taken_over + sa.puts_not_taken_over, 0);

    /* the next master: the durable state, then the record, twice */
    obj_store *b = replay_log(&log, 0, log.n, NULL);
    obj_stats sb;
    apply_expect(b, &h, SMP_OK);
    apply_expect(b, &h, SMP_OK);
    obj_store_stats(b, &sb);
    assert_int_equal(sb.puts_in_flight, 2);
    assert_int_equal(sb.puts_taken_over, 0); /* counted once it leads (sweeps) */
    assert_int_equal(sb.puts_not_taken_over, 0);
    assert_int_equal(used_of(b), used_of(a));
    assert_int_equal(obj_put_touch(b, "kv/open-1", "s0", off1, 30), SMP_OK);
    assert_string_equal(obj_put_group(b, "kv/open-2"), "g");
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(b, "kv/open-2", &info), SMP_OK);
    assert_int_equal(info.size, 5000);
    assert_int_equal(info.hard_pinned, 1);
    assert_false(info.complete);
    /* the keys are busy, and a new put goes elsewhere */
    assert_int_equal(obj_put_start(b, &p1, 30, NULL), SMP_EBUSY);
    obj_put_params p3 = {"kv/new", 300, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    obj_put_ticket t3;
    assert_int_equal(obj_put_start(b, &p3, 30, &t3), SMP_OK);
    assert_true(t3.offset + 320 <= off1 || t3.offset >= off1 + 320);
    assert_true(t3.offset + 320 <= off2 || t3.offset >= off2 + 5056);

    /* the writer's put end completes at b, at the range a gave */
    obj_record r = {0};
    uint8_t sum[32] = {9};
    assert_int_equal(obj_prepare_put_end(b, "kv/open-1", sum, 40, &r), SMP_OK);
    apply_rec(b, &r);
    obj_replica reps[2];
    size_t nr = 0;
    assert_int_equal(obj_object_replicas(b, "kv/open-1", reps, 2, &nr), SMP_OK);
    assert_int_equal(nr, 1);
    assert_int_equal(reps[0].offset, off1);
    /* a's own put end, replayed at b, consumes b's handed put too */
    assert_int_equal(obj_prepare_put_end(a, "kv/open-2", sum, 40, &r), SMP_OK);
    apply_expect(b, &r, SMP_OK);
    apply_rec(a, &r);
    obj_store_stats(b, &sb);
    assert_int_equal(sb.puts_in_flight, 1); /* kv/new */

    /* a handed put's time runs from the first sweep after the handoff */
    obj_store *c = replay_log(&log, 0, log.n, NULL);
    apply_expect(c, &h, SMP_OK);
    assert_int_equal(obj_cleanup_stale_puts(c, 100000, 1000), 0);
    obj_stats scs;
    obj_store_stats(c, &scs);
    assert_int_equal(scs.puts_taken_over, 2);
    assert_int_equal(obj_cleanup_stale_puts(c, 100999, 1000), 0);
    assert_int_equal(obj_cleanup_stale_puts(c, 101000, 1000), 2);

    /* a range or key taken meanwhile is not taken over */
    obj_store *d = replay_log(&log, 0, log.n, NULL);
    obj_put_params other = {"kv/other", 300, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    obj_put_ticket to;
    assert_int_equal(obj_put_start(d, &other, 50, &to), SMP_OK);
    assert_int_equal(to.offset, off1); /* the same state gives the same first fit */
    obj_put_params same_key = {"kv/open-2", 64, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(d, &same_key, 50, NULL), SMP_OK);
    obj_stats sd;
    apply_expect(d, &h, SMP_OK);
    obj_store_stats(d, &sd);
    assert_int_equal(sd.puts_taken_over, 0);
    assert_int_equal(sd.puts_not_taken_over, 2);
    assert_int_equal(sd.puts_in_flight, 2);
    assert_int_equal(obj_put_touch(d, "kv/other", "s0", off1, 60), SMP_OK);

    /* A later handoff supersedes the puts an older one gave where they are
     * in its way: b, which took h, freed them (their writers went stale)
     * and gave their ranges and one key again; a standby (c2, which took h
     * and never swept) takes the later record whole. */
    obj_store *b2 = replay_log(&log, 0, log.n, NULL), *c2 = replay_log(&log, 0, log.n, NULL);
    apply_expect(b2, &h, SMP_OK);
    apply_expect(c2, &h, SMP_OK);
    assert_int_equal(obj_cleanup_stale_puts(b2, 200000, 1000), 0);
    assert_int_equal(obj_cleanup_stale_puts(b2, 201000, 1000), 2);
    obj_put_params q = {"kv/q", 300, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    obj_put_ticket tq, tp;
    assert_int_equal(obj_put_start(b2, &q, 201001, &tq), SMP_OK);
    assert_int_equal(tq.offset, off1); /* kv/open-1's range */
    obj_put_params again = {"kv/open-2", 100, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(b2, &again, 201001, &tp), SMP_OK);
    obj_record h2 = {0};
    assert_int_equal(obj_prepare_put_handoff(b2, &h2, &n), SMP_OK);
    assert_int_equal(n, 2);
    obj_stats s2;
    obj_store_stats(c2, &s2);
    uint64_t cancelled = s2.puts_cancelled;
    apply_expect(c2, &h2, SMP_OK);
    obj_store_stats(c2, &s2);
    assert_int_equal(s2.puts_taken_over, 0); /* a standby never sweeps */
    assert_int_equal(s2.puts_not_taken_over, 0);
    assert_int_equal(s2.puts_in_flight, 2);
    assert_int_equal(s2.puts_cancelled, cancelled + 2);
    assert_int_equal(obj_put_touch(c2, "kv/q", "s0", off1, 201002), SMP_OK);
    assert_int_equal(obj_put_touch(c2, "kv/open-2", "s0", tp.offset, 201002), SMP_OK);
    assert_int_equal(obj_put_touch(c2, "kv/open-1", "s0", off1, 201002), SMP_ENOTFOUND);
    assert_int_equal(used_of(c2), used_of(b2));
    /* but never a put of the replaying master's own */
    obj_store *own = replay_log(&log, 0, log.n, NULL);
    obj_put_params mine = {"kv/mine", 300, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(own, &mine, 10, &to), SMP_OK);
    assert_int_equal(to.offset, off1);
    apply_expect(own, &h2, SMP_OK);
    assert_int_equal(obj_put_touch(own, "kv/mine", "s0", off1, 20), SMP_OK);
    assert_int_equal(obj_put_touch(own, "kv/q", "s0", off1, 20), SMP_ENOTFOUND);
    obj_record_free(&h2);
    obj_store_destroy(b2);
    obj_store_destroy(c2);
    obj_store_destroy(own);

    /* nothing in flight: nothing to hand on */
    obj_store *e = replay_log(&log, 0, log.n, NULL);
    assert_int_equal(obj_prepare_put_handoff(e, &r, &n), SMP_ENOTFOUND);
    assert_int_equal(n, 0);

    obj_record_free(&h);
    free_log(&log);
    obj_store_destroy(a);
    obj_store_destroy(b);
    obj_store_destroy(c);
    obj_store_destroy(d);
    obj_store_destroy(e);
}

static int g_abandoned;

static void count_abandon(void *ctx, const char *node, const char *segment, uint64_t offset,
                          uint64_t len)
{
    (void)ctx, (void)node, (void)segment, (void)offset, (void)len;
    g_abandoned++;
}

/* The record of a large put's start (obj_prepare_put_open) is a PUT_HANDOFF
 * of that put alone: a no-op where it was written, the one put taken
 * elsewhere, consumed by its put end; a durable object over its range (its
 * writer went stale and the range was given again) cancels it without the
 * scrub of the range, where that object lies. */
static void test_put_open_record_holds_one_put(void **state)
{
    (void)state;
    static rec_log log;
    obj_put_ticket t1, t2;
    obj_store *a = two_open_puts(&log, &t1, &t2); /* kv/open-2 is the large one */

    obj_record h = {0};
    assert_int_equal(obj_prepare_put_open(a, "kv/open-2", &h), SMP_OK);
    assert_int_equal(h.type, OBJ_REC_PUT_REVOKE);
    assert_int_equal(h.encver, OBJ_REC_HANDOFF_ENCVER);
    char line[256];
    assert_true(obj_describe_record(h.type, h.encver, h.buf, h.len, line, sizeof(line)) > 0);
    char want[256];
    snprintf(want, sizeof(want), "PUT_HANDOFF puts=1 first=kv/open-2 segment=s0 offset=%llu "
             "size=5000 put_id=3", (unsigned long long)t2.offset);
    assert_string_equal(line, want);
    obj_stats sa;
    apply_expect(a, &h, SMP_OK);
    obj_store_stats(a, &sa);
    assert_int_equal(sa.puts_in_flight, 2);
    assert_int_equal(sa.puts_taken_over + sa.puts_not_taken_over, 0);

    /* a master that replays it holds that put alone, and its put end
     * completes there at the range */
    obj_store *b = replay_log(&log, 0, log.n, NULL);
    obj_stats sb;
    apply_expect(b, &h, SMP_OK);
    obj_store_stats(b, &sb);
    assert_int_equal(sb.puts_in_flight, 1);
    assert_int_equal(sb.puts_taken_over, 0);
    assert_int_equal(obj_put_touch(b, "kv/open-1", "s0", t1.offset, 30), SMP_ENOTFOUND);
    obj_record r = {0};
    uint8_t sum[32] = {3};
    assert_int_equal(obj_prepare_put_end(a, "kv/open-2", sum, 40, &r), SMP_OK);
    apply_expect(b, &r, SMP_OK);
    apply_rec(a, &r);
    obj_store_stats(b, &sb);
    assert_int_equal(sb.puts_in_flight, 0);
    obj_replica reps[2];
    size_t nr = 0;
    assert_int_equal(obj_object_replicas(b, "kv/open-2", reps, 2, &nr), SMP_OK);
    assert_int_equal(nr, 1);
    assert_int_equal(reps[0].offset, t2.offset);

    /* c holds it; the writer goes stale at the leader (x), which gives the
     * range to an object: applied at c, it cancels the held put unscrubbed */
    obj_store *c = replay_log(&log, 0, log.n, NULL);
    obj_store *x = replay_log(&log, 0, log.n, NULL);
    apply_expect(c, &h, SMP_OK);
    obj_store_set_abandon_hook(c, count_abandon, NULL);
    g_abandoned = 0;
    obj_put_params q1 = {"kv/q1", 300, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    obj_put_params q2 = {"kv/q2", 5000, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    obj_put_ticket u1, u2;
    assert_int_equal(obj_put_start(x, &q1, 50, &u1), SMP_OK);
    assert_int_equal(obj_put_start(x, &q2, 50, &u2), SMP_OK);
    assert_int_equal(u2.offset, t2.offset); /* the same state, the same first fit */
    assert_int_equal(obj_prepare_put_end(x, "kv/q2", sum, 60, &r), SMP_OK);
    obj_stats sc;
    obj_store_stats(c, &sc);
    uint64_t cancelled = sc.puts_cancelled;
    apply_expect(c, &r, SMP_OK);
    apply_rec(x, &r);
    obj_store_stats(c, &sc);
    assert_int_equal(sc.puts_in_flight, 0);
    assert_int_equal(sc.puts_cancelled, cancelled + 1);
    assert_int_equal(g_abandoned, 0);
    assert_int_equal(obj_object_replicas(c, "kv/q2", reps, 2, &nr), SMP_OK);
    assert_int_equal(nr, 1);
    assert_int_equal(reps[0].offset, t2.offset);
    assert_int_equal(obj_object_replicas(c, "kv/open-2", reps, 2, &nr), SMP_ENOTFOUND);

    /* nothing of key in flight, or no key */
    assert_int_equal(obj_prepare_put_open(a, "kv/open-2", &r), SMP_ENOTFOUND);
    assert_int_equal(obj_prepare_put_open(a, "", &r), SMP_EINVAL);

    obj_record_free(&h);
    free_log(&log);
    obj_store_destroy(a);
    obj_store_destroy(b);
    obj_store_destroy(c);
    obj_store_destroy(x);
}

/* A PUT_HANDOFF that does not decode, or names a put that cannot be, is
 * refused whole (SMP_EPROTO) and changes nothing; only type 2 has a version
 * 2. */
static void test_put_handoff_malformed(void **state)
{
    (void)state;
    obj_store *st = store_with_object();
    Hostrec__HandedPut ok = HOSTREC__HANDED_PUT__INIT, bad = HOSTREC__HANDED_PUT__INIT;
    ok.key = "kv/ok";
    ok.size = 10;
    ok.segment = "s0";
    ok.offset = 1024;
    bad = ok;
    Hostrec__HandedPut *puts[2] = {&ok, &bad};
    Hostrec__PutHandoffRecord m = HOSTREC__PUT_HANDOFF_RECORD__INIT;
    m.puts = puts;
    m.n_puts = 2;
    struct {
        const char *key, *segment;
        uint64_t size, offset;
        uint32_t data_type;
    } cases[] = {
        {"", "s0", 10, 1024, 0},        /* no key */
        {"kv/b", "", 10, 1024, 0},      /* no segment */
        {"kv/b", "s0", 10, 1000, 0},    /* unaligned */
        {"kv/b", "s0", 10, 1024, 9},    /* no such data type */
        {"kv/\xc3\x28", "s0", 10, 1024, 0}, /* not UTF-8 */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bad.key = (char *)cases[i].key;
        bad.segment = (char *)cases[i].segment;
        bad.size = cases[i].size;
        bad.offset = cases[i].offset;
        bad.data_type = cases[i].data_type;
        size_t len = hostrec__put_handoff_record__get_packed_size(&m);
        uint8_t *b = malloc(len);
        assert_non_null(b);
        hostrec__put_handoff_record__pack(&m, b);
        obj_stats before;
        obj_store_stats(st, &before);
        assert_int_equal(obj_apply_record(st, OBJ_REC_PUT_REVOKE, OBJ_REC_HANDOFF_ENCVER, b, len),
                         SMP_EPROTO);
        obj_stats after;
        obj_store_stats(st, &after);
        assert_int_equal(after.puts_in_flight, before.puts_in_flight); /* kv/ok not taken */
        free(b);
    }
    const uint8_t garbage[] = {0xff, 0xff, 0xff};
    assert_int_equal(obj_apply_record(st, OBJ_REC_PUT_REVOKE, OBJ_REC_HANDOFF_ENCVER, garbage,
                                      sizeof(garbage)), SMP_EPROTO);
    for (uint16_t t = 1; t <= 7; t++)
        if (t != OBJ_REC_PUT_REVOKE)
            assert_int_not_equal(obj_apply_record(st, t, OBJ_REC_HANDOFF_ENCVER, NULL, 0), SMP_OK);
    assert_int_equal(obj_apply_record(st, OBJ_REC_PUT_REVOKE, 3, NULL, 0), SMP_EPROTO);
    obj_store_destroy(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records_replay_and_idempotence),
        cmocka_unit_test(test_remove_record_is_protobuf_c_s_bytes),
        cmocka_unit_test(test_records_malformed),
        cmocka_unit_test(test_snapshot_round_trip),
        cmocka_unit_test(test_loaded_objects_changed_and_removed_one_by_one),
        cmocka_unit_test(test_objects_share_their_groups_name),
        cmocka_unit_test(test_snapshot_invalid),
        cmocka_unit_test(test_snapshot_loads_as_its_bytes_arrive),
        cmocka_unit_test(test_describe_records),
        cmocka_unit_test(test_random_ops_consistent),
        cmocka_unit_test(test_records_that_lose_races),
        cmocka_unit_test(test_random_pipeline_consistent),
        cmocka_unit_test(test_put_handoff_carries_open_puts),
        cmocka_unit_test(test_put_handoff_malformed),
        cmocka_unit_test(test_put_open_record_holds_one_put),
        cmocka_unit_test(test_snapshot_carries_open_puts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
