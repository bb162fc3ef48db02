/* test_wm_store.c -- the weight plugin's revision store (weight_metadata_store.c).
 *
 * The tables as the live path and replay both change them: records applied
 * once or twice give the same tables (compared through their section bytes),
 * an older record changes nothing, the section round-trips and rebuilds the
 * group index, a damaged section is refused without touching the store, the
 * generation fence and the one-active-operation rule hold, records that
 * would leave tables unable to save are refused, and lease counts follow the
 * lease records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "weight_metadata_store.h"
#include "wm_codec.h"
#include "wm_test_records.h"

/* Encoded records of one revision's life: begin, commit (+ migration), a
 * lease grant, a renew, a lease end, the migration finished. */
typedef struct history {
    uint8_t *rec[8];
    size_t len[8];
    uint16_t type[8];
    size_t n;
} history;

static void push(history *h, uint16_t type, uint8_t *buf, size_t len)
{
    h->type[h->n] = type;
    h->rec[h->n] = buf;
    h->len[h->n] = len;
    h->n++;
}

static void history_free(history *h)
{
    for (size_t i = 0; i < h->n; i++) free(h->rec[i]);
}

static void encode_upsert(history *h, const wm_revision *rev, const wm_operation *ops, size_t n_ops,
                          const wm_affinity *aff)
{
    wm_metadata_upsert u;
    uint8_t *buf = NULL;
    size_t len = 0;
    char msg[256] = "";
    memset(&u, 0, sizeof(u));
    u.revision = *rev;
    u.operations = (wm_operation *)ops;
    u.n_operations = n_ops;
    if (aff) {
        u.has_affinity = 1;
        u.affinity = *aff;
    }
    if (wm_encode_metadata_upsert(&u, &buf, &len, msg, sizeof(msg)) != WM_OK) fail_msg("encode: %s", msg);
    push(h, WM_OP_METADATA_UPSERT, buf, len);
}

static void build_history(history *h, wm_affinity *aff)
{
    static const uint64_t bytes[3] = {100, 200, 300};
    wm_revision ready, imp, done;
    wm_operation mig, fin;
    wm_lease l;
    uint8_t *buf = NULL;
    size_t len = 0;
    memset(h, 0, sizeof(*h));

    wmt_ready_revision(&ready, aff, "model", 1, bytes, 3);
    wmt_importing_revision(&imp, "model", 1);
    imp.policy = ready.policy;
    encode_upsert(h, &imp, NULL, 0, NULL);

    ready.metadata_generation = 2;
    ready.created_ms = imp.created_ms;
    wmt_migration(&mig, &ready, 1);
    encode_upsert(h, &ready, &mig, 1, aff);

    wmt_lease(&l, &ready, 1);
    assert_int_equal(wm_encode_lease_upsert(&l, &buf, &len, NULL, 0), WM_OK);
    push(h, WM_OP_LEASE_UPSERT, buf, len);
    l.expiry_ms += 1000; /* renewed */
    assert_int_equal(wm_encode_lease_upsert(&l, &buf, &len, NULL, 0), WM_OK);
    push(h, WM_OP_LEASE_UPSERT, buf, len);
    wm_lease_delete end = {l.id, l.id_of, WM_LEASE_RELEASED};
    assert_int_equal(wm_encode_lease_delete(&end, &buf, &len, NULL, 0), WM_OK);
    push(h, WM_OP_LEASE_DELETE, buf, len);

    done = ready;
    done.metadata_generation = 3;
    done.residency = WM_RES_COLD;
    done.observed_hot_ratio = 0.0;
    done.operation_id = 0;
    done.updated_ms = 3000;
    fin = mig;
    fin.state = WM_OPS_SUCCEEDED;
    fin.members_done = fin.members_total;
    fin.bytes_done = fin.bytes_total;
    fin.updated_ms = 3000;
    encode_upsert(h, &done, &fin, 1, NULL);
}

static void replay_all(wm_store *st, const history *h, size_t upto)
{
    char msg[512] = "";
    for (size_t i = 0; i < upto; i++)
        if (wm_store_replay(st, h->type[i], h->rec[i], h->len[i], msg, sizeof(msg)) != WM_OK)
            fail_msg("record %zu: %s", i, msg);
}

static void section_of(const wm_store *st, uint8_t **buf, size_t *len)
{
    char msg[512] = "";
    if (wm_store_save(st, buf, len, msg, sizeof(msg)) != WM_OK) fail_msg("save: %s", msg);
}

/* Replaying every prefix of the history twice over gives the same tables as
 * replaying it once: every record carries the complete state. */
static void test_replay_is_idempotent(void **state)
{
    (void)state;
    history h;
    wm_affinity aff = {0};
    build_history(&h, &aff);
    for (size_t k = 1; k <= h.n; k++) {
        wm_store *once = NULL, *twice = NULL;
        assert_int_equal(wm_store_create(&once), WM_OK);
        assert_int_equal(wm_store_create(&twice), WM_OK);
        replay_all(once, &h, k);
        replay_all(twice, &h, k);
        replay_all(twice, &h, k);
        uint8_t *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        section_of(once, &a, &la);
        section_of(twice, &b, &lb);
        assert_int_equal(la, lb);
        assert_memory_equal(a, b, la);
        free(a);
        free(b);
        wm_store_free(once);
        wm_store_free(twice);
    }
    history_free(&h);
    wm_affinity_clear(&aff);
}

/* The tables after the whole history: the revision COLD at generation 3,
 * the finished operation queryable but not active, no lease. An older
 * record replayed afterwards changes nothing. */
static void test_apply_history_and_stale_record(void **state)
{
    (void)state;
    history h;
    wm_affinity aff = {0};
    wm_store *st = NULL;
    wm_identity id;
    wm_store_stats s;
    build_history(&h, &aff);
    assert_int_equal(wm_store_create(&st), WM_OK);

    replay_all(st, &h, 3); /* begin, commit, lease */
    wmt_identity(&id, "model", 1);
    const wm_revision *r = wm_store_get(st, &id);
    assert_non_null(r);
    assert_int_equal(r->availability, WM_AVAIL_READY);
    assert_int_equal(r->lease_count, 1);
    assert_int_equal(r->operation_id, 1);
    wm_store_stats_get(st, &s);
    assert_int_equal(s.by_availability[WM_AVAIL_READY], 1);
    assert_int_equal(s.by_residency[WM_RES_HOT], 1);
    assert_int_equal(s.active_operations, 1);
    assert_int_equal(s.leases, 1);

    replay_all(st, &h, h.n);
    r = wm_store_get(st, &id);
    assert_int_equal(r->metadata_generation, 3);
    assert_int_equal(r->residency, WM_RES_COLD);
    assert_int_equal(r->operation_id, 0);
    assert_int_equal(r->lease_count, 0);
    const wm_operation *op = wm_store_operation(st, 1);
    assert_non_null(op);
    assert_int_equal(op->state, WM_OPS_SUCCEEDED);
    assert_non_null(wm_store_affinity(st, &id));
    assert_int_equal(wm_store_affinity(st, &id)->n_units, 3);
    wm_store_stats_get(st, &s);
    assert_int_equal(s.by_availability[WM_AVAIL_READY], 1);
    assert_int_equal(s.by_residency[WM_RES_COLD], 1);
    assert_int_equal(s.by_residency[WM_RES_HOT], 0);
    assert_int_equal(s.active_operations, 0);

    /* The commit record (generation 2) again: stale, ignored. */
    char msg[256];
    assert_int_equal(wm_store_replay(st, h.type[1], h.rec[1], h.len[1], msg, sizeof(msg)), WM_OK);
    r = wm_store_get(st, &id);
    assert_int_equal(r->metadata_generation, 3);
    assert_int_equal(r->residency, WM_RES_COLD);
    assert_int_equal(wm_store_operation(st, 1)->state, WM_OPS_SUCCEEDED);

    /* Fresh ids stay above every id seen. */
    assert_true(wm_store_reserve_operation_id(st) > 1);
    assert_true(wm_store_reserve_lease_id(st) > 1);

    /* A type-8 body under type 12, an unknown type and garbage are refused,
     * naming the cause. */
    assert_int_equal(wm_store_replay(st, WM_OP_LINEAGE_CLAIM, h.rec[0], h.len[0], msg, sizeof(msg)),
                     SMP_EPROTO);
    assert_int_equal(wm_store_replay(st, 13, h.rec[0], h.len[0], msg, sizeof(msg)), SMP_ENOTSUP);
    static const uint8_t junk[] = {0xff, 0xff, 0xff};
    assert_true(wm_store_replay(st, WM_OP_METADATA_UPSERT, junk, sizeof(junk), msg, sizeof(msg)) < 0);
    wm_store_free(st);
    history_free(&h);
    wm_affinity_clear(&aff);
}

/* Save, load into another store, save again: the same bytes; the group
 * index and the identity order are rebuilt; ids continue above the loaded
 * ones. An empty section is an empty store. */
static void test_section_round_trip_rebuilds_indexes(void **state)
{
    (void)state;
    history h;
    wm_affinity aff = {0};
    wm_store *st = NULL, *copy = NULL;
    char msg[512] = "";
    build_history(&h, &aff);
    assert_int_equal(wm_store_create(&st), WM_OK);
    replay_all(st, &h, 3);
    /* A second revision, IMPORTING, sorts before "model". */
    wm_revision imp;
    wmt_importing_revision(&imp, "alpha", 4);
    wm_metadata_upsert u;
    memset(&u, 0, sizeof(u));
    u.revision = imp;
    assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_OK);

    uint8_t *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    section_of(st, &a, &la);
    assert_int_equal(wm_store_create(&copy), WM_OK);
    if (wm_store_load(copy, a, la, msg, sizeof(msg)) != WM_OK) fail_msg("load: %s", msg);
    section_of(copy, &b, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);

    assert_int_equal(wm_store_revision_count(copy), 2);
    assert_string_equal(wm_store_revision_at(copy, 0)->id.resource_id, "alpha");
    assert_string_equal(wm_store_revision_at(copy, 1)->id.resource_id, "model");
    const wm_revision *r = wm_store_get_group(copy, imp.group_key);
    assert_non_null(r);
    assert_int_equal(r->availability, WM_AVAIL_IMPORTING);
    wm_identity id;
    wmt_identity(&id, "model", 1);
    r = wm_store_get(copy, &id);
    assert_non_null(r);
    assert_non_null(wm_store_get_group(copy, r->group_key));
    assert_int_equal(r->lease_count, 1);
    assert_int_equal(wm_store_lease_count(copy), 1);
    assert_true(wm_store_reserve_operation_id(copy) >= 2);
    assert_true(wm_store_reserve_lease_id(copy) >= 2);

    wm_store *empty = NULL;
    assert_int_equal(wm_store_create(&empty), WM_OK);
    assert_int_equal(wm_store_load(empty, NULL, 0, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_store_revision_count(empty), 0);
    wm_store_free(empty);
    free(a);
    free(b);
    wm_store_free(st);
    wm_store_free(copy);
    history_free(&h);
    wm_affinity_clear(&aff);
}

/* A damaged section fails closed with a sentence and leaves the store as it
 * was. */
static void test_invalid_section_refused(void **state)
{
    (void)state;
    history h;
    wm_affinity aff = {0};
    wm_store *st = NULL, *target = NULL;
    char msg[512] = "";
    build_history(&h, &aff);
    assert_int_equal(wm_store_create(&st), WM_OK);
    replay_all(st, &h, 2);
    uint8_t *a = NULL;
    size_t la = 0;
    section_of(st, &a, &la);

    assert_int_equal(wm_store_create(&target), WM_OK);
    wm_revision imp;
    wmt_importing_revision(&imp, "keep-me", 1);
    wm_metadata_upsert u;
    memset(&u, 0, sizeof(u));
    u.revision = imp;
    assert_int_equal(wm_store_apply_upsert(target, &u, msg, sizeof(msg)), WM_OK);

    int refused = 0;
    for (size_t i = 0; i < la; i++) {
        uint8_t *bad = malloc(la);
        memcpy(bad, a, la);
        bad[i] ^= 0x5a;
        msg[0] = '\0';
        int rc = wm_store_load(target, bad, la, msg, sizeof(msg));
        free(bad);
        if (rc < 0) {
            refused++;
            assert_int_equal(rc, SMP_EPROTO);
            assert_true(msg[0] != '\0');
            assert_int_equal(wm_store_revision_count(target), 1);
            assert_non_null(wm_store_get_group(target, imp.group_key));
        } else {
            /* A flip that still decodes to a valid table (e.g. in a string)
             * replaced the table; put the reference state back. */
            assert_int_equal(wm_store_load(target, NULL, 0, msg, sizeof(msg)), WM_OK);
            assert_int_equal(wm_store_apply_upsert(target, &u, msg, sizeof(msg)), WM_OK);
        }
    }
    assert_true(refused > 0);
    static const uint8_t junk[] = {0x0a, 0xff, 0x01};
    assert_int_equal(wm_store_load(target, junk, sizeof(junk), msg, sizeof(msg)), SMP_EPROTO);
    free(a);
    wm_store_free(st);
    wm_store_free(target);
    history_free(&h);
    wm_affinity_clear(&aff);
}

/* The generation fence and the one-active-operation rule. */
static void test_cas_and_one_active_operation(void **state)
{
    (void)state;
    static const uint64_t bytes[2] = {10, 20};
    wm_revision before, after;
    wm_affinity aff = {0};
    wm_operation a, b;
    wm_store *st = NULL;
    char msg[256];

    wmt_ready_revision(&before, &aff, "cas", 1, bytes, 2);
    assert_int_equal(wm_cas_check(1, 1), WM_OK);
    assert_int_equal(wm_cas_check(1, 2), WM_ESTALE_GENERATION);
    after = before;
    after.metadata_generation = 3; /* skips one */
    assert_int_equal(wm_metadata_mutation_check(&before, &after, msg, sizeof(msg)), WM_ESTALE_GENERATION);
    after.metadata_generation = 2;
    assert_int_equal(wm_metadata_mutation_check(&before, &after, msg, sizeof(msg)), WM_OK);
    after.logical_bytes += 1; /* the sealed summary never changes */
    assert_int_equal(wm_metadata_mutation_check(&before, &after, msg, sizeof(msg)), WM_ECONFLICT);

    assert_int_equal(wm_store_create(&st), WM_OK);
    wm_metadata_upsert u;
    memset(&u, 0, sizeof(u));
    u.revision = before;
    u.has_affinity = 1;
    u.affinity = aff;
    assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_OK);

    /* A revision naming an operation the record does not carry and the store
     * does not hold is refused. */
    u.revision.metadata_generation = 2;
    u.revision.operation_id = 9;
    u.has_affinity = 0;
    assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    /* Two RUNNING operations for one revision: the second is not the active
     * one, refused. */
    wm_revision r2 = before;
    r2.metadata_generation = 2;
    wmt_migration(&a, &r2, 1);
    b = a;
    b.id = 2;
    wm_operation both[2] = {a, b};
    u.revision = r2;
    u.operations = both;
    u.n_operations = 2;
    assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "not the revision's active one"));
    assert_int_equal(wm_store_get(st, &before.id)->metadata_generation, 1);
    u.n_operations = 1;
    assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_store_get(st, &before.id)->operation_id, 1);

    /* READY without any affinity summary held or carried is refused. */
    wm_revision lone;
    wm_affinity aff2 = {0};
    wmt_ready_revision(&lone, &aff2, "lone", 1, bytes, 2);
    memset(&u, 0, sizeof(u));
    u.revision = lone;
    assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    wm_affinity_clear(&aff2);
    wm_affinity_clear(&aff);
    wm_store_free(st);
}

/* The tables as bytes, for "nothing changed" checks. */
static int same_section(const wm_store *st, const uint8_t *before, size_t before_len)
{
    uint8_t *now = NULL;
    size_t len = 0;
    section_of(st, &now, &len);
    int same = len == before_len && memcmp(now, before, len) == 0;
    free(now);
    return same;
}

/* Records that replay must refuse, found by fuzzing (tests/fuzz/regress/
 * fuzz_wm_records): each would leave tables that no longer save. Every one is
 * refused with a sentence naming the cause, and the tables stay as they were;
 * a delete of an absent revision changes nothing at all. */
static void test_records_that_would_break_the_tables(void **state)
{
    (void)state;
    static const uint64_t bytes[2] = {10, 20};
    wm_revision a, c;
    wm_affinity aff_a = {0}, aff_c = {0};
    wm_operation mig;
    wm_store *st = NULL;
    uint8_t *snap = NULL;
    size_t snap_len = 0;
    char msg[256];
    wm_metadata_upsert u;

    /* a: READY with its migration 1 running; c: READY, idle. */
    assert_int_equal(wm_store_create(&st), WM_OK);
    wmt_ready_revision(&a, &aff_a, "model-a", 1, bytes, 2);
    wmt_migration(&mig, &a, 1);
    memset(&u, 0, sizeof(u));
    u.revision = a;
    u.operations = &mig;
    u.n_operations = 1;
    u.has_affinity = 1;
    u.affinity = aff_a;
    assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_OK);
    wmt_ready_revision(&c, &aff_c, "model-c", 1, bytes, 2);
    memset(&u, 0, sizeof(u));
    u.revision = c;
    u.has_affinity = 1;
    u.affinity = aff_c;
    assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_OK);
    section_of(st, &snap, &snap_len);

    /* A delete of c listing a's operation. */
    uint64_t foreign[1] = {1};
    wm_metadata_delete d = {c.id, 2, WM_DEL_TOMBSTONE_EXPIRED, foreign, 1, NULL};
    assert_int_equal(wm_store_check_delete(st, &d, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_store_apply_delete(st, &d, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "belongs to another revision"));
    assert_true(same_section(st, snap, snap_len));
    /* A delete of a revision that does not exist, listing a's operation. */
    wm_identity ghost;
    wmt_identity(&ghost, "ghost", 1);
    d.id = ghost;
    assert_int_equal(wm_store_apply_delete(st, &d, msg, sizeof(msg)), WM_OK);
    assert_true(same_section(st, snap, snap_len));
    assert_non_null(wm_store_operation(st, 1));

    /* An upsert of READY a without a summary that changes its sealed digest. */
    memset(&u, 0, sizeof(u));
    u.revision = a;
    u.revision.metadata_generation = 2;
    u.revision.affinity_sha256[0] ^= 1;
    assert_int_equal(wm_store_check_upsert(st, &u, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "sealed manifest reference"));
    assert_true(same_section(st, snap, snap_len));

    /* An upsert of a that drops its running migration without ending it. */
    u.revision = a;
    u.revision.metadata_generation = 2;
    u.revision.operation_id = 0;
    assert_int_equal(wm_store_check_upsert(st, &u, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "without ending it"));
    assert_true(same_section(st, snap, snap_len));

    /* An upsert of c carrying a's operation as its own. */
    wm_operation stolen;
    u.revision = c;
    u.revision.metadata_generation = 2;
    wmt_migration(&stolen, &u.revision, 1);
    u.operations = &stolen;
    u.n_operations = 1;
    assert_int_equal(wm_store_check_upsert(st, &u, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "belongs to another revision"));
    assert_true(same_section(st, snap, snap_len));

    /* Ending the migration in the same record is how it is done. */
    wm_operation fin = mig;
    fin.state = WM_OPS_SUCCEEDED;
    memset(&u, 0, sizeof(u));
    u.revision = a;
    u.revision.metadata_generation = 2;
    u.revision.operation_id = 0;
    u.operations = &fin;
    u.n_operations = 1;
    assert_int_equal(wm_store_check_upsert(st, &u, msg, sizeof(msg)), WM_OK);
    assert_true(same_section(st, snap, snap_len)); /* checking changes nothing */
    assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_store_get(st, &a.id)->operation_id, 0);

    free(snap);
    wm_affinity_clear(&aff_a);
    wm_affinity_clear(&aff_c);
    wm_store_free(st);
}

/* Lease bookkeeping: grants count on the revision, a renew replaces the
 * expiry without counting twice, ends are idempotent, leases are refused on
 * a revision that cannot be read or on a generation it never had, and
 * deleting a revision drops its leases. */
static void test_lease_bookkeeping(void **state)
{
    (void)state;
    static const uint64_t bytes[1] = {64};
    wm_revision rev, imp;
    wm_affinity aff = {0};
    wm_lease l1, l2, bad;
    wm_store *st = NULL;
    char msg[256];

    wmt_ready_revision(&rev, &aff, "lease", 1, bytes, 1);
    wmt_importing_revision(&imp, "imp", 1);
    assert_int_equal(wm_store_create(&st), WM_OK);
    wm_metadata_upsert u;
    memset(&u, 0, sizeof(u));
    u.revision = rev;
    u.has_affinity = 1;
    u.affinity = aff;
    assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_OK);
    memset(&u, 0, sizeof(u));
    u.revision = imp;
    assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_OK);

    wmt_lease(&l1, &rev, 3);
    wmt_lease(&l2, &rev, 8);
    assert_int_equal(wm_store_apply_lease_upsert(st, &l2, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_store_apply_lease_upsert(st, &l1, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_store_get(st, &rev.id)->lease_count, 2);
    l1.expiry_ms += 5000;
    assert_int_equal(wm_store_apply_lease_upsert(st, &l1, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_store_get(st, &rev.id)->lease_count, 2);
    assert_int_equal(wm_store_lease(st, 3)->expiry_ms, l1.expiry_ms);
    /* In id order for the expiry sweep. */
    assert_int_equal(wm_store_lease_at(st, 0)->id, 3);
    assert_int_equal(wm_store_lease_at(st, 1)->id, 8);
    assert_int_equal(wm_store_lease_lower_bound(st, 4), 1);
    assert_true(wm_store_reserve_lease_id(st) > 8);

    wmt_lease(&bad, &imp, 20);
    assert_int_equal(wm_store_apply_lease_upsert(st, &bad, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    wmt_lease(&bad, &rev, 21);
    bad.metadata_generation = 5;
    assert_int_equal(wm_store_apply_lease_upsert(st, &bad, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);

    wm_lease_delete end = {3, rev.id, WM_LEASE_EXPIRED};
    assert_int_equal(wm_store_apply_lease_delete(st, &end, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_store_apply_lease_delete(st, &end, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_store_get(st, &rev.id)->lease_count, 1);
    assert_null(wm_store_lease(st, 3));

    /* Type 9 drops the revision and its leases; an older delete is ignored. */
    wm_metadata_delete d;
    memset(&d, 0, sizeof(d));
    d.id = rev.id;
    d.metadata_generation = 1;
    d.reason = WM_DEL_TOMBSTONE_EXPIRED;
    assert_int_equal(wm_store_apply_delete(st, &d, msg, sizeof(msg)), WM_OK);
    assert_null(wm_store_get(st, &rev.id));
    assert_null(wm_store_get_group(st, rev.group_key));
    assert_int_equal(wm_store_lease_count(st), 0);
    assert_int_equal(wm_store_revision_count(st), 1);
    assert_int_equal(wm_store_apply_delete(st, &d, msg, sizeof(msg)), WM_OK);
    wm_affinity_clear(&aff);
    wm_store_free(st);
}

/* Many revisions: the hash chains grow and every lookup still finds its
 * revision, by identity and by group; the order stays sorted. */
static void test_many_revisions(void **state)
{
    (void)state;
    wm_store *st = NULL;
    char msg[256], name[32];
    assert_int_equal(wm_store_create(&st), WM_OK);
    for (int i = 999; i >= 0; i--) {
        wm_revision r;
        snprintf(name, sizeof(name), "m%04d", i);
        wmt_importing_revision(&r, name, 1);
        wm_metadata_upsert u;
        memset(&u, 0, sizeof(u));
        u.revision = r;
        assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_OK);
    }
    assert_int_equal(wm_store_revision_count(st), 1000);
    for (size_t i = 1; i < 1000; i++)
        assert_true(wm_identity_cmp(&wm_store_revision_at(st, i - 1)->id,
                                    &wm_store_revision_at(st, i)->id) < 0);
    for (int i = 0; i < 1000; i++) {
        wm_identity id;
        snprintf(name, sizeof(name), "m%04d", i);
        wmt_identity(&id, name, 1);
        const wm_revision *r = wm_store_get(st, &id);
        assert_non_null(r);
        assert_true(wm_store_get_group(st, r->group_key) == r);
    }
    wm_store_stats s;
    wm_store_stats_get(st, &s);
    assert_int_equal(s.by_availability[WM_AVAIL_IMPORTING], 1000);
    wm_store_free(st);
}

/* The entries of a loaded section share one mapping (a slab): deleting
 * them one by one, with entries of later upserts among them, leaves every
 * other entry readable, and the last delete and the free release the rest
 * (ASan and valgrind see any access to a released entry or its keys). */
static void test_loaded_revisions_deleted_one_by_one(void **state)
{
    (void)state;
    enum { N = 300 };
    wm_store *st = NULL, *copy = NULL;
    char msg[256], name[32];
    uint8_t *a = NULL;
    size_t la = 0;
    assert_int_equal(wm_store_create(&st), WM_OK);
    for (int i = 0; i < N; i++) {
        wm_revision r;
        snprintf(name, sizeof(name), "m%04d", i);
        wmt_importing_revision(&r, name, 1);
        wm_metadata_upsert u;
        memset(&u, 0, sizeof(u));
        u.revision = r;
        assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_OK);
    }
    section_of(st, &a, &la);
    assert_int_equal(wm_store_create(&copy), WM_OK);
    if (wm_store_load(copy, a, la, msg, sizeof(msg)) != WM_OK) fail_msg("load: %s", msg);
    assert_int_equal(wm_store_revision_count(copy), N);
    /* One entry from malloc among the slab's. */
    wm_revision extra;
    wmt_importing_revision(&extra, "m0150x", 1);
    wm_metadata_upsert u;
    memset(&u, 0, sizeof(u));
    u.revision = extra;
    assert_int_equal(wm_store_apply_upsert(copy, &u, msg, sizeof(msg)), WM_OK);
    for (int i = 0; i < N; i++) {
        wm_identity id;
        snprintf(name, sizeof(name), "m%04d", i);
        wmt_identity(&id, name, 1);
        wm_metadata_delete d = {id, 1, WM_DEL_IMPORT_ABORTED, NULL, 0, NULL};
        if (wm_store_apply_delete(copy, &d, msg, sizeof(msg)) != WM_OK) fail_msg("delete: %s", msg);
        assert_null(wm_store_get(copy, &id));
        for (int k = i + 1; k < N; k += 37) {
            snprintf(name, sizeof(name), "m%04d", k);
            wmt_identity(&id, name, 1);
            const wm_revision *r = wm_store_get(copy, &id);
            assert_non_null(r);
            assert_true(wm_store_get_group(copy, r->group_key) == r);
        }
    }
    assert_int_equal(wm_store_revision_count(copy), 1);
    const wm_revision *r = wm_store_get(copy, &extra.id);
    assert_non_null(r);
    assert_string_equal(r->group_key, extra.group_key);
    /* A second load replaces the tables: the first load's slab entries and
     * the malloc'ed one are released with them. */
    if (wm_store_load(copy, a, la, msg, sizeof(msg)) != WM_OK) fail_msg("load: %s", msg);
    assert_int_equal(wm_store_revision_count(copy), N);
    assert_null(wm_store_get(copy, &extra.id));
    free(a);
    wm_store_free(copy);
    wm_store_free(st);
}

/* Point id's strings at copies in b (wm_identity_buf_set): a caller's buffer
 * the test overwrites afterwards. */
static void id_in(wm_identity *id, wm_identity_buf *b)
{
    wm_identity_buf_set(b, id);
    *id = b->id;
}

/* A stored revision owns its request id at the length it has: one applied
 * from a caller's buffer that is then overwritten reads back unchanged, a
 * later record moves it to another id and then to none, and a save and
 * load keeps it; a record whose request id is one byte over the limit is
 * refused by name with the store unchanged. */
static void test_store_owns_the_request_id_it_keeps(void **state)
{
    (void)state;
    wm_store *st = NULL, *loaded = NULL;
    wm_revision rev;
    char msg[256] = "", rid[WM_REQUEST_ID_MAX + 2];
    uint8_t *a = NULL, *b = NULL;
    size_t alen = 0, blen = 0;
    assert_int_equal(wm_store_create(&st), WM_OK);
    wmt_importing_revision(&rev, "rid", 1);
    wm_metadata_upsert u;
    memset(&u, 0, sizeof(u));
    u.revision = rev;
    if (wm_store_apply_upsert(st, &u, msg, sizeof(msg)) != WM_OK) fail_msg("begin: %s", msg);
    assert_null(wm_store_get(st, &rev.id)->request_id);
    /* set by the next record, from a buffer overwritten afterwards */
    snprintf(rid, sizeof(rid), "req-first");
    u.revision.metadata_generation = 2;
    u.revision.request_id = rid;
    u.revision.request_digest = 11;
    u.revision.request_base_generation = 1;
    if (wm_store_apply_upsert(st, &u, msg, sizeof(msg)) != WM_OK) fail_msg("rid: %s", msg);
    memset(rid, 'x', 20);
    assert_string_equal(wm_store_get(st, &rev.id)->request_id, "req-first");
    /* the same record again (equal generation) keeps it */
    snprintf(rid, sizeof(rid), "req-first");
    if (wm_store_apply_upsert(st, &u, msg, sizeof(msg)) != WM_OK) fail_msg("again: %s", msg);
    assert_string_equal(wm_store_get(st, &rev.id)->request_id, "req-first");
    /* a longer one, the longest allowed */
    memset(rid, 'r', WM_REQUEST_ID_MAX);
    rid[WM_REQUEST_ID_MAX] = '\0';
    u.revision.metadata_generation = 3;
    u.revision.request_base_generation = 2;
    if (wm_store_apply_upsert(st, &u, msg, sizeof(msg)) != WM_OK) fail_msg("long: %s", msg);
    memset(rid, 'y', WM_REQUEST_ID_MAX);
    assert_int_equal(strlen(wm_store_get(st, &rev.id)->request_id), WM_REQUEST_ID_MAX);
    assert_int_equal(wm_store_get(st, &rev.id)->request_id[0], 'r');
    /* one byte over: refused by name, nothing changed */
    assert_int_equal(wm_store_save(st, &a, &alen, msg, sizeof(msg)), WM_OK);
    memset(rid, 'o', WM_REQUEST_ID_MAX + 1);
    rid[WM_REQUEST_ID_MAX + 1] = '\0';
    u.revision.metadata_generation = 4;
    u.revision.request_base_generation = 3;
    assert_int_equal(wm_store_apply_upsert(st, &u, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "request id"));
    assert_int_equal(wm_store_save(st, &b, &blen, msg, sizeof(msg)), WM_OK);
    assert_int_equal(alen, blen);
    assert_memory_equal(a, b, alen);
    free(b);
    b = NULL;
    /* saved and loaded */
    assert_int_equal(wm_store_create(&loaded), WM_OK);
    if (wm_store_load(loaded, a, alen, msg, sizeof(msg)) != WM_OK) fail_msg("load: %s", msg);
    assert_int_equal(strlen(wm_store_get(loaded, &rev.id)->request_id), WM_REQUEST_ID_MAX);
    assert_int_equal(wm_store_get(loaded, &rev.id)->request_id[0], 'r');
    /* moved to another id on the loaded (slab) entry, then cleared */
    snprintf(rid, sizeof(rid), "req-second");
    u.revision.request_digest = 12;
    if (wm_store_apply_upsert(loaded, &u, msg, sizeof(msg)) != WM_OK) fail_msg("second: %s", msg);
    rid[0] = 'Z';
    assert_string_equal(wm_store_get(loaded, &rev.id)->request_id, "req-second");
    u.revision.metadata_generation = 5;
    u.revision.request_id = NULL;
    u.revision.request_digest = 0;
    u.revision.request_base_generation = 0;
    if (wm_store_apply_upsert(loaded, &u, msg, sizeof(msg)) != WM_OK) fail_msg("none: %s", msg);
    const char *none = wm_store_get(loaded, &rev.id)->request_id;
    assert_true(none == NULL || none[0] == '\0');
    free(a);
    wm_store_free(loaded);
    wm_store_free(st);
}

/* An identity's strings are borrowed (weight_management.h): the store keeps
 * its own copy of every identity it holds. A revision, its operation, a
 * lease and a lineage claim applied from buffers the caller then overwrites
 * are found again by their identity and read back unchanged, and so after a
 * save and load. */
static void test_store_owns_the_identities_it_keeps(void **state)
{
    (void)state;
    static const uint64_t bytes[2] = {100, 200};
    wm_store *st = NULL, *copy = NULL;
    wm_affinity aff = {0};
    wm_revision rev;
    wm_operation op;
    wm_lease l;
    wm_lineage_claim c;
    wm_identity_buf rb, ob, lb, cb, tb;
    char msg[256] = "";
    assert_int_equal(wm_store_create(&st), WM_OK);
    wmt_ready_revision(&rev, &aff, "owned", 1, bytes, 2);
    wmt_migration(&op, &rev, 7);
    id_in(&rev.id, &rb);
    id_in(&op.id_of, &ob);
    wm_metadata_upsert u;
    memset(&u, 0, sizeof(u));
    u.revision = rev;
    u.operations = &op;
    u.n_operations = 1;
    u.has_affinity = 1;
    u.affinity = aff;
    if (wm_store_apply_upsert(st, &u, msg, sizeof(msg)) != WM_OK) fail_msg("upsert: %s", msg);
    wmt_lease(&l, &rev, 3);
    id_in(&l.id_of, &lb);
    if (wm_store_apply_lease_upsert(st, &l, msg, sizeof(msg)) != WM_OK)
        fail_msg("lease: %s", msg);
    wmt_claim(&c, "owned");
    id_in(&c.base, &cb);
    id_in(&c.target, &tb);
    c.phase = WM_PHASE_CLAIMED;
    c.committed_watermark = 0;
    if (wm_store_apply_claim(st, &c, msg, sizeof(msg)) != WM_OK) fail_msg("claim: %s", msg);
    wm_identity_buf *bufs[] = {&rb, &ob, &lb, &cb, &tb};
    for (size_t i = 0; i < 5; i++) memset(bufs[i]->s, 'X', sizeof(bufs[i]->s) - 1);

    uint8_t *a = NULL;
    size_t la = 0;
    section_of(st, &a, &la);
    assert_int_equal(wm_store_create(&copy), WM_OK);
    if (wm_store_load(copy, a, la, msg, sizeof(msg)) != WM_OK) fail_msg("load: %s", msg);
    wm_store *both[] = {st, copy};
    for (size_t k = 0; k < 2; k++) {
        wm_identity id;
        wmt_identity(&id, "owned", 1);
        const wm_revision *r = wm_store_get(both[k], &id);
        assert_non_null(r);
        assert_string_equal(r->id.tenant_id, "tenant-a");
        assert_string_equal(r->id.resource_id, "owned");
        assert_string_equal(r->id.revision, "main");
        const wm_operation *o = wm_store_operation(both[k], 7);
        assert_non_null(o);
        assert_int_equal(wm_identity_cmp(&o->id_of, &id), 0);
        const wm_lease *sl = wm_store_lease(both[k], 3);
        assert_non_null(sl);
        assert_int_equal(wm_identity_cmp(&sl->id_of, &id), 0);
        assert_int_equal(wm_store_lineage_count(both[k]), 1);
        const wm_lineage_entry *e = wm_store_lineage_at(both[k], 0);
        assert_int_equal(wm_identity_cmp(&e->claim.base, &id), 0);
        assert_string_equal(e->claim.target.resource_id, "owned");
        assert_int_equal(e->claim.target.weight_generation, 2);
    }
    free(a);
    wm_store_free(copy);
    wm_store_free(st);
    wm_affinity_clear(&aff);
}

/* A loaded section's affinity summaries live in its slab (borrowed): an
 * upsert that brings the summary again (a copy of its own) replaces one
 * without freeing it,
 * the others stay readable, and a second load and the free release both
 * kinds (ASan and valgrind see a borrowed summary freed, or an owned one
 * leaked). */
static void test_loaded_summaries_replaced_by_upserts(void **state)
{
    (void)state;
    enum { N = 300 };
    static const uint64_t bytes16[1] = {16};
    wm_store *st = NULL, *copy = NULL;
    char msg[256], name[32];
    uint8_t *a = NULL;
    size_t la = 0;
    assert_int_equal(wm_store_create(&st), WM_OK);
    if (wmt_seed_ready(st, "s", 0, N, msg, sizeof(msg)) != WM_OK) fail_msg("seed: %s", msg);
    section_of(st, &a, &la);
    assert_int_equal(wm_store_create(&copy), WM_OK);
    if (wm_store_load(copy, a, la, msg, sizeof(msg)) != WM_OK) fail_msg("load: %s", msg);
    for (int i = 0; i < N; i += 3) {
        wm_affinity aff = {0};
        wm_metadata_upsert u;
        memset(&u, 0, sizeof(u));
        snprintf(name, sizeof(name), "s%07d", i);
        wmt_ready_revision(&u.revision, &aff, name, 1, bytes16, 1);
        u.revision.metadata_generation = 2;
        u.has_affinity = 1;
        u.affinity = aff;
        int rc = wm_store_apply_upsert(copy, &u, msg, sizeof(msg));
        wm_affinity_clear(&aff);
        if (rc != WM_OK) fail_msg("upsert: %s", msg);
    }
    for (int i = 0; i < N; i++) {
        wm_identity id;
        snprintf(name, sizeof(name), "s%07d", i);
        wmt_identity(&id, name, 1);
        const wm_affinity *got = wm_store_affinity(copy, &id);
        assert_non_null(got);
        assert_int_equal(got->n_units, 1);
        assert_int_equal(got->units[0].n_members, 1);
        assert_int_equal(got->units[0].logical_bytes, 16);
        assert_int_equal(got->borrowed, i % 3 == 0 ? 0 : 1);
        const wm_revision *r = wm_store_get(copy, &id);
        assert_non_null(r);
        assert_int_equal(strncmp(got->units[0].members[0], r->group_key, strlen(r->group_key)), 0);
    }
    if (wm_store_load(copy, a, la, msg, sizeof(msg)) != WM_OK) fail_msg("load: %s", msg);
    assert_int_equal(wm_store_revision_count(copy), N);
    free(a);
    wm_store_free(copy);
    wm_store_free(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_is_idempotent),
        cmocka_unit_test(test_store_owns_the_identities_it_keeps),
        cmocka_unit_test(test_store_owns_the_request_id_it_keeps),
        cmocka_unit_test(test_apply_history_and_stale_record),
        cmocka_unit_test(test_section_round_trip_rebuilds_indexes),
        cmocka_unit_test(test_invalid_section_refused),
        cmocka_unit_test(test_cas_and_one_active_operation),
        cmocka_unit_test(test_records_that_would_break_the_tables),
        cmocka_unit_test(test_lease_bookkeeping),
        cmocka_unit_test(test_many_revisions),
        cmocka_unit_test(test_loaded_revisions_deleted_one_by_one),
        cmocka_unit_test(test_loaded_summaries_replaced_by_upserts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
