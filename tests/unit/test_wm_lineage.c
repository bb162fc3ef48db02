/* test_wm_lineage.c -- the lineage table (weight_lineage.c, weight_metadata_store.c).
 *
 * The claim state machine as the live path and replay both drive it through
 * type-12 records: each mode walks its phases in order, a duplicate record is
 * a no-op, a record out of order is refused, a second open successor and a
 * generation not above the watermark are refused, the watermark never goes
 * down, a request id cannot change its arguments, and the entries survive the
 * weight_metadata section. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "weight_lineage.h"
#include "weight_metadata_store.h"
#include "wm_codec.h"
#include "wm_test_records.h"

/* A fresh PUT_FIRST claim 1 -> 2 at CLAIMED. */
static void fresh_claim(wm_lineage_claim *c, wm_upsert_mode mode)
{
    wmt_claim(c, "llama");
    c->mode = mode;
    c->phase = WM_PHASE_CLAIMED;
    c->committed_watermark = 0;
}

/* Encode the claim and replay it, as recovery does. A record the encoder
 * refuses on its own (never written) is applied directly, so the table's
 * rules are what is tested. */
static int replay_claim(wm_store *st, const wm_lineage_claim *c)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    char why[256];
    if (wm_encode_lineage_claim(c, &buf, &len, why, sizeof(why)) < 0)
        return wm_store_apply_claim(st, c, why, sizeof(why));
    int rc = wm_store_replay(st, WM_OP_LINEAGE_CLAIM, buf, len, why, sizeof(why));
    free(buf);
    return rc;
}

/* The store's count of claims in progress (the tick walks the lineages
 * only while it is not zero). */
static uint64_t open_claims(const wm_store *st)
{
    wm_store_stats s;
    wm_store_stats_get(st, &s);
    return s.open_claims;
}

static const wm_lineage_entry *entry_of(const wm_store *st, const wm_lineage_claim *c)
{
    wm_lineage lin;
    wm_identity_lineage(&c->base, &lin);
    return wm_store_lineage(st, &lin);
}

/* Walk every phase of seq; each record twice (the duplicate is a no-op). */
static void walk(wm_store *st, wm_lineage_claim *c, const wm_claim_phase *seq, size_t n)
{
    uint64_t others = open_claims(st); /* c's lineage has no claim yet */
    for (size_t i = 0; i < n; i++) {
        c->phase = seq[i];
        c->updated_ms = 200 + i;
        if (seq[i] == WM_PHASE_COMMITTED) c->committed_watermark = c->target.weight_generation;
        assert_int_equal(replay_claim(st, c), WM_OK);
        assert_int_equal(replay_claim(st, c), WM_OK);
        const wm_lineage_entry *e = entry_of(st, c);
        assert_non_null(e);
        assert_int_equal(e->claim.phase, seq[i]);
        assert_int_equal(open_claims(st), others + (seq[i] == WM_PHASE_COMMITTED ? 0 : 1));
    }
}

static void test_put_first_walks_its_phases_and_commits_the_watermark(void **state)
{
    (void)state;
    wm_store *st;
    wm_lineage_claim c;
    assert_int_equal(wm_store_create(&st), WM_OK);
    fresh_claim(&c, WM_UPSERT_PUT_FIRST);
    static const wm_claim_phase seq[] = {WM_PHASE_CLAIMED, WM_PHASE_IMPORTING_TARGET,
                                         WM_PHASE_BASE_FENCED, WM_PHASE_DRAINING_BASE,
                                         WM_PHASE_DELETING_BASE, WM_PHASE_COMMITTED};
    walk(st, &c, seq, 6);
    assert_int_equal(entry_of(st, &c)->committed_watermark, 2);
    assert_int_equal(wm_store_lineage_count(st), 1);
    wm_store_free(st);
}

static void test_delete_first_walks_its_phases(void **state)
{
    (void)state;
    wm_store *st;
    wm_lineage_claim c;
    assert_int_equal(wm_store_create(&st), WM_OK);
    fresh_claim(&c, WM_UPSERT_DELETE_FIRST);
    static const wm_claim_phase seq[] = {WM_PHASE_CLAIMED, WM_PHASE_DELETING_BASE,
                                         WM_PHASE_BASE_DELETED, WM_PHASE_IMPORTING_TARGET,
                                         WM_PHASE_COMMITTED};
    walk(st, &c, seq, 5);
    assert_int_equal(entry_of(st, &c)->committed_watermark, 2);
    wm_store_free(st);
}

static void test_records_out_of_order_are_refused(void **state)
{
    (void)state;
    wm_store *st;
    wm_lineage_claim c;
    assert_int_equal(wm_store_create(&st), WM_OK);
    fresh_claim(&c, WM_UPSERT_PUT_FIRST);

    /* An unknown claim that does not start at CLAIMED. */
    c.phase = WM_PHASE_BASE_FENCED;
    assert_int_equal(replay_claim(st, &c), WM_EINVALID_ARGUMENT);
    assert_null(entry_of(st, &c));

    c.phase = WM_PHASE_CLAIMED;
    assert_int_equal(replay_claim(st, &c), WM_OK);
    /* Skipping IMPORTING_TARGET. */
    c.phase = WM_PHASE_BASE_FENCED;
    assert_int_equal(replay_claim(st, &c), WM_EINVALID_ARGUMENT);
    c.phase = WM_PHASE_IMPORTING_TARGET;
    assert_int_equal(replay_claim(st, &c), WM_OK);
    /* Going back. */
    c.phase = WM_PHASE_CLAIMED;
    assert_int_equal(replay_claim(st, &c), WM_EINVALID_ARGUMENT);
    assert_int_equal(entry_of(st, &c)->claim.phase, WM_PHASE_IMPORTING_TARGET);
    /* ABORTED is fine before the base is fenced, and final. */
    c.phase = WM_PHASE_ABORTED;
    assert_int_equal(replay_claim(st, &c), WM_OK);
    c.phase = WM_PHASE_BASE_FENCED;
    assert_int_equal(replay_claim(st, &c), WM_EINVALID_ARGUMENT);
    assert_int_equal(entry_of(st, &c)->committed_watermark, 0);

    /* DELETE_FIRST cannot abort once the base is being deleted. */
    wm_lineage_claim d;
    fresh_claim(&d, WM_UPSERT_DELETE_FIRST);
    strcpy(d.request_id, "df-1");
    assert_int_equal(replay_claim(st, &d), WM_OK);
    d.phase = WM_PHASE_DELETING_BASE;
    assert_int_equal(replay_claim(st, &d), WM_OK);
    d.phase = WM_PHASE_ABORTED;
    assert_int_equal(replay_claim(st, &d), WM_EINVALID_ARGUMENT);
    wm_store_free(st);
}

static void test_one_open_successor_per_lineage(void **state)
{
    (void)state;
    wm_store *st;
    wm_lineage_claim a, b;
    assert_int_equal(wm_store_create(&st), WM_OK);
    fresh_claim(&a, WM_UPSERT_PUT_FIRST);
    assert_int_equal(replay_claim(st, &a), WM_OK);
    b = a;
    strcpy(b.request_id, "competitor");
    b.target.weight_generation = 3;
    assert_int_equal(replay_claim(st, &b), WM_EINVALID_ARGUMENT);
    /* The same request id with other arguments is refused too. */
    b = a;
    b.target.weight_generation = 3;
    assert_int_equal(replay_claim(st, &b), WM_EINVALID_ARGUMENT);
    assert_int_equal(entry_of(st, &a)->claim.target.weight_generation, 2);

    /* Another lineage is independent. */
    wm_lineage_claim other;
    wmt_claim(&other, "mistral");
    other.phase = WM_PHASE_CLAIMED;
    assert_int_equal(replay_claim(st, &other), WM_OK);
    assert_int_equal(wm_store_lineage_count(st), 2);
    wm_store_free(st);
}

static void test_watermark_never_goes_down(void **state)
{
    (void)state;
    wm_store *st;
    wm_lineage_claim c;
    assert_int_equal(wm_store_create(&st), WM_OK);
    fresh_claim(&c, WM_UPSERT_PUT_FIRST);
    static const wm_claim_phase seq[] = {WM_PHASE_CLAIMED, WM_PHASE_IMPORTING_TARGET,
                                         WM_PHASE_BASE_FENCED, WM_PHASE_DRAINING_BASE,
                                         WM_PHASE_DELETING_BASE, WM_PHASE_COMMITTED};
    walk(st, &c, seq, 6);

    /* A new claim at or below the watermark is refused. */
    wm_lineage_claim n = c;
    strcpy(n.request_id, "second");
    n.phase = WM_PHASE_CLAIMED;
    n.base.weight_generation = 1;
    n.target.weight_generation = 2;
    n.committed_watermark = 2;
    assert_int_equal(replay_claim(st, &n), WM_EINVALID_ARGUMENT);
    /* A record carrying a lower watermark is refused. */
    n.target.weight_generation = 5;
    n.committed_watermark = 0;
    assert_int_equal(replay_claim(st, &n), WM_EINVALID_ARGUMENT);
    /* The next claim above it is fine and keeps the watermark. */
    n.base.weight_generation = 2;
    n.committed_watermark = 2;
    assert_int_equal(replay_claim(st, &n), WM_OK);
    assert_int_equal(entry_of(st, &n)->committed_watermark, 2);
    /* The old claim's final record, replayed again, does not apply. */
    assert_int_equal(replay_claim(st, &c), WM_EINVALID_ARGUMENT);
    assert_string_equal(entry_of(st, &n)->claim.request_id, "second");
    wm_store_free(st);
}

static void test_section_keeps_claims_and_watermarks(void **state)
{
    (void)state;
    wm_store *st, *back;
    wm_lineage_claim c, o;
    uint8_t *buf = NULL, *buf2 = NULL;
    size_t len = 0, len2 = 0;
    char why[256];
    assert_int_equal(wm_store_create(&st), WM_OK);
    assert_int_equal(wm_store_create(&back), WM_OK);
    wmt_claim(&o, "zeta");
    o.phase = WM_PHASE_CLAIMED;
    assert_int_equal(replay_claim(st, &o), WM_OK);
    fresh_claim(&c, WM_UPSERT_DELETE_FIRST);
    static const wm_claim_phase seq[] = {WM_PHASE_CLAIMED, WM_PHASE_DELETING_BASE,
                                         WM_PHASE_BASE_DELETED, WM_PHASE_IMPORTING_TARGET,
                                         WM_PHASE_COMMITTED};
    walk(st, &c, seq, 5);
    assert_int_equal(wm_store_save(st, &buf, &len, why, sizeof(why)), WM_OK);
    assert_int_equal(wm_store_load(back, buf, len, why, sizeof(why)), WM_OK);
    assert_int_equal(wm_store_save(back, &buf2, &len2, why, sizeof(why)), WM_OK);
    assert_int_equal(len, len2);
    assert_memory_equal(buf, buf2, len);
    assert_int_equal(wm_store_lineage_count(back), 2);
    assert_int_equal(entry_of(back, &c)->committed_watermark, 2);
    assert_int_equal(entry_of(back, &o)->claim.phase, WM_PHASE_CLAIMED);
    assert_int_equal(open_claims(st), 1); /* "zeta" is open, c committed */
    assert_int_equal(open_claims(back), 1);
    /* The loaded table enforces the same rules. */
    c.phase = WM_PHASE_CLAIMED;
    strcpy(c.request_id, "late");
    c.committed_watermark = 2;
    assert_int_equal(replay_claim(back, &c), WM_EINVALID_ARGUMENT);
    free(buf);
    free(buf2);
    wm_store_free(st);
    wm_store_free(back);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_first_walks_its_phases_and_commits_the_watermark),
        cmocka_unit_test(test_delete_first_walks_its_phases),
        cmocka_unit_test(test_records_out_of_order_are_refused),
        cmocka_unit_test(test_one_open_successor_per_lineage),
        cmocka_unit_test(test_watermark_never_goes_down),
        cmocka_unit_test(test_section_keeps_claims_and_watermarks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
