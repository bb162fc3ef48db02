/* test_obj_zones.c -- unit tests of the write zones
 * (host_shim/master/obj_store_zones.c): puts under OBJ_ZONE_PUT_MAX placed in
 * their segment's arena, whose WRITE_ZONES record names where unrecorded
 * writers may be; a store that replays the records (or loads a snapshot)
 * holding those bytes back from its own puts until a stale put's time has
 * passed, then giving them back through the abandon hook; ranges reserved
 * for replicas named the same way; a stopping
 * master's record that drops them; malformed records refused with nothing
 * changed.
 *
 * States are built through prepare + apply, the master's way
 * (obj_test_store.h). */
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

#define SEG_BYTES (64u << 20) /* its arenas are 4 MiB: a sixteenth */
#define TIMEOUT_MS 60000u      /* a stale put's time */

/* Start a put of size bytes of key at now, the master's way: when its
 * range is in a zone whose record is not durable yet, that record is
 * prepared and applied (logged when g_log is set) before the answer.
 * *zoned gets whether it had to be (may be NULL). */
static void start_put(obj_store *st, const char *key, uint64_t size, uint64_t now,
                      obj_put_ticket *t, int *zoned)
{
    obj_put_params p = {key, size, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(st, &p, now, t), SMP_OK);
    if (zoned) *zoned = t->zone_wait;
    if (t->zone_wait) {
        obj_record r = {0};
        assert_int_equal(obj_prepare_write_zones(st, t->segment, 0, &r), SMP_OK);
        assert_int_equal(r.type, OBJ_REC_SEGMENT_UPDATE);
        assert_int_equal(r.encver, OBJ_REC_ZONES_ENCVER);
        apply_rec(st, &r);
    }
}

/* 1 when [a, a+alen) and [b, b+blen) share a byte. */
static int overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
    return a < b + blen && b < a + alen;
}

/* The ranges of segment s0 in a WRITE_ZONES record r (unpacked; the caller
 * frees it with hostrec__write_zone_record__free_unpacked). */
static Hostrec__WriteZoneRecord *unpack_zones(const obj_record *r)
{
    Hostrec__WriteZoneRecord *m = hostrec__write_zone_record__unpack(NULL, r->len, r->buf);
    assert_non_null(m);
    return m;
}

/* 1 when one range of z covers [off, off+len). */
static int zones_cover(const Hostrec__WriteZones *z, uint64_t off, uint64_t len)
{
    for (size_t i = 0; i < z->n_offsets; i++)
        if (z->offsets[i] <= off && off + len <= z->offsets[i] + z->lengths[i]) return 1;
    return 0;
}

/* A store of one 64 MiB segment "s0" with zones on (records logged in
 * *log): kv/done complete, and kv/open (8 KiB) started in a zone and left
 * open, its range in *t. */
static obj_store *store_with_open_small_put(rec_log *log, obj_put_ticket *t)
{
    g_log = log;
    obj_store *st = new_store(NULL);
    obj_zones_enable(st, 1);
    mount(st, "s0", "n0", SEG_BYTES);
    obj_record r = {0};
    uint8_t sum[32] = {1};
    int zoned = 0;
    start_put(st, "kv/done", 4096, 10, t, &zoned);
    assert_true(zoned);
    assert_int_equal(obj_prepare_put_end(st, "kv/done", sum, 10, &r), SMP_OK);
    apply_rec(st, &r);
    start_put(st, "kv/open", 8192, 20, t, &zoned);
    assert_false(zoned); /* kv/done's put opened the arena and recorded it */
    g_log = NULL;
    return st;
}

/* Counts what the abandon hook is told. */
typedef struct abandoned {
    int calls;
    uint64_t bytes;
} abandoned;

static void on_abandon(void *ctx, const char *node, const char *segment, uint64_t offset,
                       uint64_t length)
{
    abandoned *a = ctx;
    (void)node;
    (void)segment;
    (void)offset;
    a->calls++;
    a->bytes += length;
}

/* ------------------------------------------------------------------------ */

/* Only the first put in an arena waits for a record; a put of 1 MiB or
 * more is never placed in one; a full arena opens the next, whose record
 * names every zoned put still open. */
static void test_small_puts_are_placed_in_a_recorded_zone(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    obj_zones_enable(st, 1);
    mount(st, "s0", "n0", SEG_BYTES);
    obj_put_ticket t1, t2, big;
    int zoned;
    start_put(st, "kv/1", 300, 1, &t1, &zoned);
    assert_true(zoned);
    start_put(st, "kv/2", 5000, 1, &t2, &zoned);
    assert_false(zoned); /* its arena is durable now */
    start_put(st, "kv/big", OBJ_ZONE_PUT_MAX, 1, &big, &zoned);
    assert_false(zoned);

    obj_record r = {0};
    assert_int_equal(obj_prepare_write_zones(st, "s0", 0, &r), SMP_OK);
    Hostrec__WriteZoneRecord *m = unpack_zones(&r);
    assert_int_equal(m->n_segments, 1);
    assert_string_equal(m->segments[0]->segment, "s0");
    assert_true(zones_cover(m->segments[0], t1.offset, 320));
    assert_true(zones_cover(m->segments[0], t2.offset, 5056));
    /* the arena alone (kv/big's range is its own business: recorded) */
    assert_int_equal(m->segments[0]->n_offsets, 1);
    assert_int_equal(m->segments[0]->lengths[0], SEG_BYTES / 16);
    hostrec__write_zone_record__free_unpacked(m, NULL);
    obj_record_free(&r);

    /* Fill the 4 MiB arena: the put that does not fit opens the next one,
     * and that record still names kv/1, open in the first. */
    char key[32];
    obj_put_ticket t;
    int opened = 0;
    for (int i = 0; i < 8 && !opened; i++) {
        snprintf(key, sizeof(key), "kv/fill-%d", i);
        start_put(st, key, OBJ_ZONE_PUT_MAX - 1, 1, &t, &opened);
    }
    assert_true(opened);
    assert_int_equal(obj_prepare_write_zones(st, "s0", 0, &r), SMP_OK);
    m = unpack_zones(&r);
    assert_true(zones_cover(m->segments[0], t.offset, OBJ_ZONE_PUT_MAX));
    assert_true(zones_cover(m->segments[0], t1.offset, 320));
    assert_true(zones_cover(m->segments[0], t2.offset, 5056));
    hostrec__write_zone_record__free_unpacked(m, NULL);
    obj_record_free(&r);

    /* zones off: placed anywhere, no record asked */
    obj_zones_enable(st, 0);
    start_put(st, "kv/off", 300, 1, &t, &zoned);
    assert_false(zoned);
    assert_int_equal(obj_prepare_write_zones(st, "nope", 0, &r), SMP_ENOTFOUND);
    obj_store_destroy(st);
}

/* The master after a crash replays the log: its first put of kv/open's size
 * would land on kv/open's range by first fit, where kv/open's writer may
 * still copy. It is placed elsewhere; the held bytes go back (abandon hook)
 * only once a stale put's time has passed since it took the zones over. */
static void test_the_next_master_holds_the_zones_back(void **state)
{
    (void)state;
    static rec_log log;
    obj_put_ticket open, t;
    obj_store *a = store_with_open_small_put(&log, &open);

    /* Without the WRITE_ZONES records, first fit gives kv/open's range. */
    obj_store *bare = new_store(NULL);
    for (size_t i = 0; i < log.n; i++)
        if (log.recs[i].encver != OBJ_REC_ZONES_ENCVER)
            assert_int_equal(obj_apply_record(bare, log.recs[i].type, log.recs[i].encver,
                                              log.recs[i].buf, log.recs[i].len), SMP_OK);
    start_put(bare, "kv/next", 8192, 1000, &t, NULL);
    assert_int_equal(t.offset, open.offset);
    obj_store_destroy(bare);

    obj_store *b = replay_log(&log, 0, log.n, NULL);
    abandoned ab = {0};
    obj_store_set_abandon_hook(b, on_abandon, &ab);
    obj_zones_enable(b, 1);
    obj_stats s;
    obj_store_stats(b, &s);
    assert_int_equal(s.zone_bytes_held, 0); /* taken over at its first placement */
    start_put(b, "kv/next", 8192, 1000, &t, NULL);
    assert_false(overlap(t.offset, 8192, open.offset, 8192));
    obj_store_stats(b, &s);
    assert_int_equal(s.zone_bytes_held, (4u << 20) - 4096); /* the arena but kv/done */
    uint64_t held = s.zone_bytes_held;

    /* Its own record names what it holds back, so a third master would too. */
    obj_record r = {0};
    assert_int_equal(obj_prepare_write_zones(b, "s0", 0, &r), SMP_OK);
    Hostrec__WriteZoneRecord *m = unpack_zones(&r);
    assert_true(zones_cover(m->segments[0], open.offset, 8192));
    hostrec__write_zone_record__free_unpacked(m, NULL);
    obj_record_free(&r);

    assert_int_equal(obj_cleanup_stale_puts(b, 1000 + TIMEOUT_MS - 1, TIMEOUT_MS), 0);
    obj_store_stats(b, &s);
    assert_int_equal(s.zone_bytes_held, held);
    assert_int_equal(ab.calls, 0);
    /* kv/next, stale too, is the one put freed (held bytes are not counted) */
    assert_int_equal(obj_cleanup_stale_puts(b, 1000 + TIMEOUT_MS, TIMEOUT_MS), 1);
    obj_store_stats(b, &s);
    assert_int_equal(s.zone_bytes_held, 0);
    assert_true(ab.calls >= 2);
    assert_int_equal(ab.bytes, held + 8192);
    /* given back: first fit reaches kv/open's range again */
    obj_zones_enable(b, 0);
    start_put(b, "kv/later", 8192, 1000 + TIMEOUT_MS, &t, NULL);
    assert_int_equal(t.offset, open.offset);

    free_log(&log);
    obj_store_destroy(a);
    obj_store_destroy(b);
}

/* A snapshot carries the zones: a store loaded from it holds them back
 * the same way, and saves them again. */
static void test_a_snapshot_carries_the_zones(void **state)
{
    (void)state;
    static rec_log log;
    obj_put_ticket open, t;
    obj_store *a = store_with_open_small_put(&log, &open);
    free_log(&log);
    obj_record r = {0};
    assert_int_equal(obj_prepare_put_revoke(a, "kv/open", &r), SMP_OK);
    apply_rec(a, &r); /* not handed on in the snapshot: the zones alone tell */
    buf s = save(a);
    Hostrec__HostSnapshot *hs = hostrec__host_snapshot__unpack(NULL, s.n, s.p);
    assert_non_null(hs);
    assert_int_equal(hs->n_zones, 1);
    assert_true(zones_cover(hs->zones[0], open.offset, 8192));
    hostrec__host_snapshot__free_unpacked(hs, NULL);

    obj_store *b = new_store(NULL);
    assert_int_equal(obj_store_load(b, s.p, s.n), SMP_OK);
    assert_same_state(a, b);
    obj_zones_enable(b, 1);
    start_put(b, "kv/next", 8192, 1000, &t, NULL);
    assert_false(overlap(t.offset, 8192, open.offset, 8192));
    obj_stats st;
    obj_store_stats(b, &st);
    assert_true(st.zone_bytes_held > 0);
    free(s.p);
    obj_store_destroy(a);
    obj_store_destroy(b);
}

/* A stopping master hands its open puts on, then drops its zones: the next
 * one holds nothing back, keeps the handed put's range, and takes its put
 * end. What the stopping master itself held back is named still. */
static void test_a_stopping_master_drops_its_zones(void **state)
{
    (void)state;
    static rec_log log;
    obj_put_ticket open, t;
    obj_store *a = store_with_open_small_put(&log, &open);
    obj_record r = {0};
    size_t n = 0;
    g_log = &log;
    assert_int_equal(obj_prepare_put_handoff(a, &r, &n), SMP_OK);
    assert_int_equal(n, 1);
    apply_rec(a, &r);
    assert_int_equal(obj_prepare_write_zones(a, NULL, 1, &r), SMP_OK);
    Hostrec__WriteZoneRecord *m = unpack_zones(&r);
    assert_int_equal(m->n_segments, 1);
    assert_int_equal(m->segments[0]->n_offsets, 0);
    hostrec__write_zone_record__free_unpacked(m, NULL);
    apply_rec(a, &r);
    g_log = NULL;

    obj_store *b = replay_log(&log, 0, log.n, NULL);
    obj_zones_enable(b, 1);
    start_put(b, "kv/next", 8192, 1000, &t, NULL);
    assert_false(overlap(t.offset, 8192, open.offset, 8192)); /* the handed put's */
    obj_stats s;
    obj_store_stats(b, &s);
    assert_int_equal(s.zone_bytes_held, 0);
    uint8_t sum[32] = {7};
    assert_int_equal(obj_prepare_put_end(b, "kv/open", sum, 1001, &r), SMP_OK);
    apply_rec(b, &r);
    assert_true(obj_exists(b, "kv/open"));

    /* A store that holds the zones of the master before back still names
     * them when it stops; its own arena it drops. */
    free_log(&log);
    obj_store *c = store_with_open_small_put(&log, &open);
    obj_store *d = replay_log(&log, 0, log.n, NULL);
    obj_zones_enable(d, 1);
    start_put(d, "kv/next", 8192, 1000, &t, NULL);
    assert_int_equal(obj_prepare_write_zones(d, NULL, 1, &r), SMP_OK);
    m = unpack_zones(&r);
    assert_int_equal(m->n_segments, 1);
    assert_true(zones_cover(m->segments[0], open.offset, 8192));
    assert_false(zones_cover(m->segments[0], t.offset, 8192)); /* its own arena goes */
    hostrec__write_zone_record__free_unpacked(m, NULL);
    obj_record_free(&r);
    free_log(&log);
    obj_store_destroy(a);
    obj_store_destroy(b);
    obj_store_destroy(c);
    obj_store_destroy(d);
}

/* A range reserved for a replica, which a node fills from a cold file with
 * no record, asks for a zone record naming it (also when the master stops:
 * the node may still be loading), and the next master holds it back. */
static void test_a_reserved_range_is_named_in_the_zones(void **state)
{
    (void)state;
    enum { BIG = 2 << 20 };
    static rec_log log;
    g_log = &log;
    obj_store *a = new_store(NULL);
    obj_zones_enable(a, 1);
    mount(a, "s0", "n0", SEG_BYTES);
    assert_int_equal(put_full(a, "kv/obj", BIG, "", "", 10), SMP_OK);
    obj_put_ticket t, u;
    assert_int_equal(obj_reserve_replica(a, "kv/obj", NULL, 20, &t), SMP_OK);
    assert_true(t.zone_wait);
    assert_int_equal(obj_reservation_holds(a, "kv/obj", "s0", t.offset), 1);
    assert_int_equal(obj_reservation_holds(a, "kv/obj", "s0", t.offset + 64), 0);
    assert_int_equal(obj_reservation_holds(a, "kv/none", "s0", t.offset), 0);
    obj_record r = {0};
    assert_int_equal(obj_prepare_write_zones(a, NULL, 1, &r), SMP_OK); /* stopping */
    Hostrec__WriteZoneRecord *m = unpack_zones(&r);
    assert_true(zones_cover(m->segments[0], t.offset, BIG));
    hostrec__write_zone_record__free_unpacked(m, NULL);
    obj_record_free(&r);
    assert_int_equal(obj_prepare_write_zones(a, "s0", 0, &r), SMP_OK);
    apply_rec(a, &r);
    g_log = NULL;

    /* the next master: a put of its size is not placed over the range */
    obj_store *b = replay_log(&log, 0, log.n, NULL);
    start_put(b, "kv/next", BIG, 1000, &u, NULL);
    assert_false(overlap(u.offset, BIG, t.offset, BIG));
    obj_stats s;
    obj_store_stats(b, &s);
    assert_true(s.zone_bytes_held >= BIG);

    /* zones off: no record asked */
    obj_zones_enable(a, 0);
    assert_int_equal(obj_release_reservation(a, "kv/obj"), SMP_OK);
    assert_int_equal(obj_reserve_replica(a, "kv/obj", NULL, 30, &t), SMP_OK);
    assert_false(t.zone_wait);
    free_log(&log);
    obj_store_destroy(a);
    obj_store_destroy(b);
}

/* Many small objects in a zone, every other one removed: the next master
 * holds each free piece between the survivors (in one pass over the free
 * list), names the zone itself in its own record (a few ranges, not the
 * pieces), and gives the pieces back whole: its memory use is then what
 * it was before the takeover. */
static void test_a_fragmented_zone_is_held_whole(void **state)
{
    (void)state;
    enum { N = 4000 };
    static rec_log log;
    char key[32];
    obj_store *a = new_store(NULL);
    obj_zones_enable(a, 1);
    mount(a, "s0", "n0", SEG_BYTES);
    /* the zone's record, logged; the objects are applied unlogged (the
     * log holds 512 records): replayed from a's snapshot below */
    obj_put_ticket t;
    g_log = &log;
    start_put(a, "kv/zone", 64, 1, &t, NULL);
    g_log = NULL;
    obj_record r = {0};
    uint8_t sum[32] = {3};
    assert_int_equal(obj_prepare_put_end(a, "kv/zone", sum, 1, &r), SMP_OK);
    apply_rec(a, &r);
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "kv/%05d", i);
        start_put(a, key, 64, 2, &t, NULL);
        assert_int_equal(obj_prepare_put_end(a, key, sum, 2, &r), SMP_OK);
        apply_rec(a, &r);
    }
    for (int i = 0; i < N; i += 2) {
        snprintf(key, sizeof(key), "kv/%05d", i);
        remove_key(a, key, 3);
    }
    buf snap = save(a);
    obj_store *b = new_store(NULL);
    assert_int_equal(obj_store_load(b, snap.p, snap.n), SMP_OK);
    uint64_t before = used_of(b);
    assert_int_equal(obj_zones_take_over(b, 100), SMP_OK);
    obj_stats s;
    obj_store_stats(b, &s);
    /* the 2,000 holes of 64 bytes, and the arena's free rest */
    assert_int_equal(s.zone_bytes_held, SEG_BYTES / 16 - 64 - (N / 2) * 64);
    assert_int_equal(used_of(b), before + s.zone_bytes_held);
    obj_zones_enable(b, 1);
    start_put(b, "kv/next", 64, 100, &t, NULL);
    assert_true(t.offset >= SEG_BYTES / 16); /* past the held arena */
    assert_int_equal(obj_prepare_write_zones(b, "s0", 0, &r), SMP_OK);
    Hostrec__WriteZoneRecord *m = unpack_zones(&r);
    assert_true(m->segments[0]->n_offsets <= 2); /* the old zone, its own arena */
    hostrec__write_zone_record__free_unpacked(m, NULL);
    obj_record_free(&r);
    obj_cleanup_stale_puts(b, 100 + TIMEOUT_MS, TIMEOUT_MS);
    obj_store_stats(b, &s);
    assert_int_equal(s.zone_bytes_held, 0);
    assert_int_equal(used_of(b), before); /* kv/next went stale too */
    /* the free list is whole again: the holes take puts */
    obj_zones_enable(b, 0);
    start_put(b, "kv/hole", 64, 200, &t, NULL);
    assert_true(t.offset < SEG_BYTES / 16);
    free(snap.p);
    free_log(&log);
    obj_store_destroy(a);
    obj_store_destroy(b);
}

/* Pack a WRITE_ZONES record of segment seg with n ranges. */
static uint8_t *pack_zones(const char *seg, uint64_t *off, uint64_t *len, size_t noff,
                           size_t nlen, size_t *out)
{
    Hostrec__WriteZones z = HOSTREC__WRITE_ZONES__INIT, *zp = &z;
    Hostrec__WriteZoneRecord m = HOSTREC__WRITE_ZONE_RECORD__INIT;
    z.segment = (char *)seg;
    z.offsets = off;
    z.n_offsets = noff;
    z.lengths = len;
    z.n_lengths = nlen;
    m.segments = &zp;
    m.n_segments = 1;
    *out = hostrec__write_zone_record__get_packed_size(&m);
    uint8_t *b = malloc(*out ? *out : 1);
    assert_non_null(b);
    hostrec__write_zone_record__pack(&m, b);
    return b;
}

/* Apply a zones record that must be refused, and check nothing changed. */
static void expect_zones_refused(obj_store *st, const uint8_t *p, size_t n)
{
    buf before = save(st);
    assert_int_equal(obj_apply_record(st, OBJ_REC_SEGMENT_UPDATE, OBJ_REC_ZONES_ENCVER, p, n),
                     SMP_EPROTO);
    buf after = save(st);
    assert_int_equal(before.n, after.n);
    assert_memory_equal(before.p, after.p, before.n);
    free(before.p);
    free(after.p);
}

/* Malformed ranges are refused with nothing changed; an unknown segment's
 * entry is skipped (unmounted since); a range past the capacity is cut. */
static void test_malformed_zone_records_change_nothing(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 1 << 20);
    uint64_t off[2] = {64, 128}, len[2] = {64, 64};
    size_t n;
    uint8_t *b;
    struct {
        const char *why;
        uint64_t off, len;
        size_t noff, nlen;
    } bad[] = {
        {"an offset not 64-aligned", 65, 64, 1, 1},
        {"a length not 64-aligned", 64, 100, 1, 1},
        {"an empty range", 64, 0, 1, 1},
        {"a range past 2^64", UINT64_MAX - 63, 128, 1, 1},
        {"offsets and lengths that do not pair", 64, 64, 2, 1},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        off[0] = bad[i].off;
        len[0] = bad[i].len;
        b = pack_zones("s0", off, len, bad[i].noff, bad[i].nlen, &n);
        expect_zones_refused(st, b, n);
        free(b);
    }
    const uint8_t garbage[] = {0x0a, 0x05, 0x0a};
    expect_zones_refused(st, garbage, sizeof(garbage));

    /* skipped: a segment this store does not have */
    off[0] = 64;
    len[0] = 64;
    b = pack_zones("gone", off, len, 1, 1, &n);
    buf before = save(st);
    assert_int_equal(obj_apply_record(st, OBJ_REC_SEGMENT_UPDATE, OBJ_REC_ZONES_ENCVER, b, n),
                     SMP_OK);
    buf after = save(st);
    assert_int_equal(before.n, after.n);
    free(before.p);
    free(after.p);
    free(b);

    /* cut at the capacity: the held bytes end there */
    off[0] = (1 << 20) - 4096;
    len[0] = 1 << 20;
    b = pack_zones("s0", off, len, 1, 1, &n);
    assert_int_equal(obj_apply_record(st, OBJ_REC_SEGMENT_UPDATE, OBJ_REC_ZONES_ENCVER, b, n),
                     SMP_OK);
    free(b);
    assert_int_equal(obj_cleanup_stale_puts(st, 5, TIMEOUT_MS), 0);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.zone_bytes_held, 4096);
    assert_int_equal(used_of(st), 4096);
    obj_store_destroy(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_puts_are_placed_in_a_recorded_zone),
        cmocka_unit_test(test_the_next_master_holds_the_zones_back),
        cmocka_unit_test(test_a_snapshot_carries_the_zones),
        cmocka_unit_test(test_a_stopping_master_drops_its_zones),
        cmocka_unit_test(test_a_reserved_range_is_named_in_the_zones),
        cmocka_unit_test(test_a_fragmented_zone_is_held_whole),
        cmocka_unit_test(test_malformed_zone_records_change_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
