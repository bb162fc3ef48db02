/* test_obj_records.c -- unit tests of the object store's OpLog records
 * (host_shim/master/obj_store_records.c): encode, apply, replay and
 * idempotence, malformed payloads, their one-line descriptions, records that
 * lose a race with a later change, the REMOVE record written by hand, and
 * the PUT_HANDOFF of a master's open puts and of a large put's start.
 * Snapshots are test_obj_snapshots.c's, randomised runs test_obj_random.c's.
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
/* Describing records                                                        */
/* ------------------------------------------------------------------------ */

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
    /* version 2 of another type is refused (but type 7's, WRITE_ZONES) */
    for (uint16_t t = 1; t < OBJ_REC_SEGMENT_UPDATE; t++)
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
        cmocka_unit_test(test_describe_records),
        cmocka_unit_test(test_records_that_lose_races),
        cmocka_unit_test(test_put_handoff_carries_open_puts),
        cmocka_unit_test(test_put_handoff_malformed),
        cmocka_unit_test(test_put_open_record_holds_one_put),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
