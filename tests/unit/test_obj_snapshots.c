/* test_obj_snapshots.c -- unit tests of the object store's snapshots
 * (host_shim/master/obj_store_snapshot.c): the round trip, the puts in
 * flight a snapshot carries, the slab of a load changed object by object,
 * group names shared by their objects, invalid input refused with nothing
 * kept, and a load fed as its bytes arrive.
 *
 * States are built through prepare + apply and compared by their snapshots,
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

/* The snapshot s with one more open put, h, appended as HostSnapshot's
 * field 5 (the caller frees the bytes). */
static buf with_open_put(const buf *s, const Hostrec__HandedPut *h)
{
    uint8_t field[128];
    size_t n = hostrec__handed_put__get_packed_size(h);
    assert_true(n < 120);
    field[0] = 0x2a; /* field 5, length-delimited */
    field[1] = (uint8_t)n;
    hostrec__handed_put__pack(h, field + 2);
    buf out = {0};
    assert_int_equal(buf_write(&out, s->p, s->n), 0);
    assert_int_equal(buf_write(&out, field, n + 2), 0);
    return out;
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
    buf bad = with_open_put(&s, &h);
    obj_store *c = new_store(NULL);
    assert_int_equal(obj_store_load(c, bad.p, bad.n), SMP_EPROTO);
    obj_stats sc;
    obj_store_stats(c, &sc);
    assert_int_equal(sc.puts_in_flight, 0);
    assert_int_equal(used_of(c), 0);
    free(bad.p);
    /* or on a segment the snapshot lacks: refused as well */
    h.segment = "s9";
    bad = with_open_put(&s, &h);
    assert_int_equal(obj_store_load(c, bad.p, bad.n), SMP_EPROTO);
    obj_store_stats(c, &sc);
    assert_int_equal(sc.puts_in_flight, 0);
    assert_int_equal(used_of(c), 0);
    free(bad.p);
    h.segment = "s0";
    /* the same put elsewhere loads */
    obj_store *d = new_store(NULL);
    h.offset = 60032; /* free, and 64-aligned */
    bad = with_open_put(&s, &h);
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
/* Loading while the bytes arrive                                           */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot_round_trip),
        cmocka_unit_test(test_loaded_objects_changed_and_removed_one_by_one),
        cmocka_unit_test(test_objects_share_their_groups_name),
        cmocka_unit_test(test_snapshot_invalid),
        cmocka_unit_test(test_snapshot_loads_as_its_bytes_arrive),
        cmocka_unit_test(test_snapshot_carries_open_puts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
