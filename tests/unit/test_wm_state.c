/* test_wm_state.c -- the revision state machine of weight_metadata_store.c.
 *
 * Every one of the 25 availability pairs against the table the RFC implies
 * (plus out-of-range values), each combination invariant of a revision
 * record with the invariant named in the message, the CAS fence, and the
 * checks of operations, leases and replacement claims. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "weight_management.h"
#include "wm_test_records.h"

/* ------------------------------------------------------------------------ */
/* Availability transitions                                                  */
/* ------------------------------------------------------------------------ */

static void test_every_availability_transition(void **state)
{
    (void)state;
    /* The transitions a revision may make; anything else is refused. */
    static const int allowed[][2] = {
        {WM_AVAIL_IMPORTING, WM_AVAIL_IMPORTING}, {WM_AVAIL_IMPORTING, WM_AVAIL_READY},
        {WM_AVAIL_IMPORTING, WM_AVAIL_DELETING},  {WM_AVAIL_IMPORTING, WM_AVAIL_DELETED},
        {WM_AVAIL_READY, WM_AVAIL_READY},         {WM_AVAIL_READY, WM_AVAIL_DEGRADED},
        {WM_AVAIL_READY, WM_AVAIL_DELETING},      {WM_AVAIL_DEGRADED, WM_AVAIL_DEGRADED},
        {WM_AVAIL_DEGRADED, WM_AVAIL_READY},      {WM_AVAIL_DEGRADED, WM_AVAIL_DELETING},
        {WM_AVAIL_DELETING, WM_AVAIL_DELETING},   {WM_AVAIL_DELETING, WM_AVAIL_DELETED},
        {WM_AVAIL_DELETED, WM_AVAIL_DELETED},
    };
    int n_allowed = 0;
    for (int from = WM_AVAIL_IMPORTING; from <= WM_AVAIL_DELETED; from++) {
        for (int to = WM_AVAIL_IMPORTING; to <= WM_AVAIL_DELETED; to++) {
            int expect = 0;
            for (size_t k = 0; k < sizeof(allowed) / sizeof(allowed[0]); k++)
                if (allowed[k][0] == from && allowed[k][1] == to) expect = 1;
            n_allowed += expect;
            if (wm_availability_transition_ok(from, to) != expect)
                fail_msg("%s -> %s: expected %s", wm_availability_name(from),
                         wm_availability_name(to), expect ? "allowed" : "refused");
        }
    }
    assert_int_equal(n_allowed, 13);
}

static void test_named_invalid_transitions(void **state)
{
    (void)state;
    /* READY is never reached without a commit, a tombstone is final, and a
     * deletion never turns back. */
    assert_false(wm_availability_transition_ok(WM_AVAIL_DELETED, WM_AVAIL_READY));
    assert_false(wm_availability_transition_ok(WM_AVAIL_DELETED, WM_AVAIL_IMPORTING));
    assert_false(wm_availability_transition_ok(WM_AVAIL_DELETING, WM_AVAIL_READY));
    assert_false(wm_availability_transition_ok(WM_AVAIL_READY, WM_AVAIL_IMPORTING));
    assert_false(wm_availability_transition_ok(WM_AVAIL_READY, WM_AVAIL_DELETED));
    assert_false(wm_availability_transition_ok(WM_AVAIL_IMPORTING, WM_AVAIL_DEGRADED));
    assert_false(wm_availability_transition_ok(0, WM_AVAIL_READY));
    assert_false(wm_availability_transition_ok(WM_AVAIL_READY, 6));
    assert_false(wm_availability_transition_ok(-1, -1));
    assert_false(wm_availability_transition_ok(1000, 1000));
}

static void test_cas_refuses_stale_and_future_generations(void **state)
{
    (void)state;
    assert_int_equal(wm_cas_check(5, 5), WM_OK);
    assert_int_equal(wm_cas_check(4, 5), WM_ESTALE_GENERATION);
    assert_int_equal(wm_cas_check(6, 5), WM_ESTALE_GENERATION);
    assert_int_equal(wm_cas_check(0, UINT64_MAX), WM_ESTALE_GENERATION);
    assert_string_equal(wm_error_name(wm_cas_check(1, 2)), "STALE_GENERATION");
}

/* ------------------------------------------------------------------------ */
/* Combination invariants                                                    */
/* ------------------------------------------------------------------------ */

typedef struct fixture {
    wm_revision ready;
    wm_affinity aff;
} fixture;

static int setup(void **state)
{
    static const uint64_t bytes[] = {100, 200, 300, 400};
    fixture *f = calloc(1, sizeof(*f));
    if (f == NULL) return -1;
    wmt_ready_revision(&f->ready, &f->aff, "model", 3, bytes, 4);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    wm_affinity_clear(&f->aff);
    free(f);
    return 0;
}

/* Check r and expect a violation whose message mentions `needle`. */
static void expect_violation(const wm_revision *r, const char *needle)
{
    char msg[256] = "";
    int rc = wm_metadata_check(r, msg, sizeof(msg));
    if (rc != WM_EINVALID_ARGUMENT) fail_msg("expected a violation about \"%s\", got %d", needle, rc);
    if (strstr(msg, needle) == NULL) fail_msg("message \"%s\" does not mention \"%s\"", msg, needle);
}

static void test_valid_records_pass(void **state)
{
    fixture *f = *state;
    char msg[256] = "";
    wm_revision r = f->ready;
    assert_int_equal(wm_metadata_check(&r, msg, sizeof(msg)), WM_OK);
    r.residency = WM_RES_MIXED;
    r.observed_hot_ratio = 0.3;
    assert_int_equal(wm_metadata_check(&r, msg, sizeof(msg)), WM_OK);
    r.residency = WM_RES_COLD;
    r.observed_hot_ratio = 0.0;
    r.lease_count = 2;
    assert_int_equal(wm_metadata_check(&r, msg, sizeof(msg)), WM_OK);
    r.availability = WM_AVAIL_DEGRADED;
    r.residency = WM_RES_ABSENT;
    assert_int_equal(wm_metadata_check(&r, msg, sizeof(msg)), WM_OK);
    wm_revision imp;
    wmt_importing_revision(&imp, "model", 4);
    assert_int_equal(wm_metadata_check(&imp, msg, sizeof(msg)), WM_OK);
    /* An aborted import is cleaned up by DELETING with residency unknown. */
    imp.availability = WM_AVAIL_DELETING;
    assert_int_equal(wm_metadata_check(&imp, msg, sizeof(msg)), WM_OK);
    wm_revision tomb = f->ready;
    tomb.availability = WM_AVAIL_DELETED;
    tomb.residency = WM_RES_ABSENT;
    tomb.observed_hot_ratio = 0.0;
    assert_int_equal(wm_metadata_check(&tomb, msg, sizeof(msg)), WM_OK);
}

static void test_importing_goes_with_unknown(void **state)
{
    fixture *f = *state;
    wm_revision r;
    wmt_importing_revision(&r, "model", 4);
    r.residency = WM_RES_HOT;
    r.observed_hot_ratio = 1.0;
    expect_violation(&r, "IMPORTING cannot have residency HOT");
    wmt_importing_revision(&r, "model", 4);
    r.lease_count = 1;
    expect_violation(&r, "leases");
    /* UNKNOWN residency belongs to an import (or its cleanup) only. */
    r = f->ready;
    r.residency = WM_RES_UNKNOWN;
    r.observed_hot_ratio = 0.0;
    expect_violation(&r, "READY cannot have residency UNKNOWN");
    r.availability = WM_AVAIL_DEGRADED;
    expect_violation(&r, "DEGRADED cannot have residency UNKNOWN");
    r.availability = WM_AVAIL_DELETED;
    expect_violation(&r, "DELETED cannot have residency UNKNOWN");
}

static void test_ready_only_hot_cold_mixed(void **state)
{
    fixture *f = *state;
    wm_revision r = f->ready;
    r.residency = WM_RES_ABSENT;
    r.observed_hot_ratio = 0.0;
    expect_violation(&r, "READY cannot have residency ABSENT");
    r = f->ready;
    r.payload_count = 0;
    expect_violation(&r, "no payload");
    r = f->ready;
    r.affinity_count = 5;
    expect_violation(&r, "affinity units");
    r = f->ready;
    memset(r.manifest_sha256, 0, sizeof(r.manifest_sha256));
    expect_violation(&r, "digest");
}

static void test_deleted_is_absent_without_lease_or_operation(void **state)
{
    fixture *f = *state;
    wm_revision r = f->ready;
    r.availability = WM_AVAIL_DELETED;
    r.residency = WM_RES_HOT;
    expect_violation(&r, "DELETED cannot have residency HOT");
    r.residency = WM_RES_ABSENT;
    r.observed_hot_ratio = 0.0;
    r.lease_count = 1;
    expect_violation(&r, "tombstone holds none");
    r.lease_count = 0;
    r.operation_id = 9;
    expect_violation(&r, "active operation 9");
    /* ABSENT belongs to DEGRADED, DELETING and DELETED only. */
    r = f->ready;
    r.availability = WM_AVAIL_DELETING;
    r.lease_count = 1;
    expect_violation(&r, "DELETING revision holds 1 leases");
}

static void test_ratio_matches_residency(void **state)
{
    fixture *f = *state;
    wm_revision r = f->ready;
    r.observed_hot_ratio = 0.5;
    expect_violation(&r, "HOT residency with observed_hot_ratio 0.5");
    r.residency = WM_RES_MIXED;
    r.observed_hot_ratio = 0.0;
    expect_violation(&r, "MIXED residency");
    r.observed_hot_ratio = 1.0;
    expect_violation(&r, "MIXED residency");
    r.residency = WM_RES_COLD;
    r.observed_hot_ratio = 0.1;
    expect_violation(&r, "COLD residency");
    r.observed_hot_ratio = NAN;
    expect_violation(&r, "outside [0, 1]");
}

/* degraded_from: only a DEGRADED record keeps where it was before the loss,
 * a payload residency with the ratio that residency allows; every change
 * of availability goes through wm_revision_set_availability, which records
 * it on the way in, keeps it while DEGRADED and clears it on the way out. */
static void test_degraded_from_belongs_to_degraded(void **state)
{
    fixture *f = *state;
    char msg[256] = "";
    wm_revision ready = f->ready, r;
    ready.residency = WM_RES_MIXED;
    ready.observed_hot_ratio = 0.25;

    r = ready;
    wm_revision_set_availability(&r, &ready, NULL, WM_AVAIL_DEGRADED);
    r.residency = WM_RES_ABSENT; /* what survived: nothing */
    r.observed_hot_ratio = 0.0;
    assert_int_equal(r.degraded_from, WM_RES_MIXED);
    assert_true(r.degraded_from_hot_ratio == 0.25);
    assert_int_equal(wm_metadata_check(&r, msg, sizeof(msg)), WM_OK);

    wm_revision again = r; /* still DEGRADED, some replica back: kept */
    wm_revision_set_availability(&again, &r, NULL, WM_AVAIL_DEGRADED);
    again.residency = WM_RES_COLD;
    assert_int_equal(again.degraded_from, WM_RES_MIXED);
    assert_true(again.degraded_from_hot_ratio == 0.25);

    wm_revision back = r;
    wm_revision_set_availability(&back, &r, NULL, WM_AVAIL_READY);
    assert_int_equal(back.degraded_from, WM_RES_UNKNOWN);
    assert_true(back.degraded_from_hot_ratio == 0.0);
    wm_revision gone = r;
    wm_revision_set_availability(&gone, &r, NULL, WM_AVAIL_DELETING);
    assert_int_equal(gone.degraded_from, WM_RES_UNKNOWN);

    /* Lost on the way somewhere: where its operation was taking it (a
     * repair back to HOT that had restored nothing yet, with the READY
     * record saying COLD; a migration toward MIXED 0.3), not where the
     * record says; a DELETING operation is no residency. */
    wm_revision cold = f->ready;
    cold.residency = WM_RES_COLD;
    cold.observed_hot_ratio = 0.0;
    wm_operation op;
    memset(&op, 0, sizeof(op));
    op.kind = WM_OPK_REPAIRING;
    op.target = WM_RES_HOT;
    wm_revision lost = cold;
    wm_revision_set_availability(&lost, &cold, &op, WM_AVAIL_DEGRADED);
    assert_int_equal(lost.degraded_from, WM_RES_HOT);
    assert_true(lost.degraded_from_hot_ratio == 1.0);
    op.kind = WM_OPK_MIGRATING;
    op.target = WM_RES_MIXED;
    op.target_hot_ratio = 0.3;
    wm_revision_set_availability(&lost, &cold, &op, WM_AVAIL_DEGRADED);
    assert_int_equal(lost.degraded_from, WM_RES_MIXED);
    assert_true(lost.degraded_from_hot_ratio == 0.3);
    op.kind = WM_OPK_DELETING;
    wm_revision_set_availability(&lost, &cold, &op, WM_AVAIL_DEGRADED);
    assert_int_equal(lost.degraded_from, WM_RES_COLD);
    assert_true(lost.degraded_from_hot_ratio == 0.0);
    /* A policy update while DEGRADED: MIXED without a usable ratio takes
     * the policy's. */
    lost.policy.mixed_hot_ratio = 0.6;
    wm_revision_degraded_toward(&lost, WM_RES_MIXED, 0.0);
    assert_int_equal(lost.degraded_from, WM_RES_MIXED);
    assert_true(lost.degraded_from_hot_ratio == 0.6);
    wm_revision_degraded_toward(&lost, WM_RES_COLD, 0.6);
    assert_true(lost.degraded_from_hot_ratio == 0.0);

    /* A DEGRADED record from before the field: nothing recorded, valid. */
    r.degraded_from = WM_RES_UNKNOWN;
    r.degraded_from_hot_ratio = 0.0;
    assert_int_equal(wm_metadata_check(&r, msg, sizeof(msg)), WM_OK);

    r.degraded_from = WM_RES_ABSENT;
    expect_violation(&r, "DEGRADED revision was ABSENT before the loss");
    r.degraded_from = WM_RES_HOT;
    r.degraded_from_hot_ratio = 0.5;
    expect_violation(&r, "HOT residency with degraded_from_hot_ratio 0.5");
    r.degraded_from = WM_RES_MIXED;
    r.degraded_from_hot_ratio = 1.0;
    expect_violation(&r, "MIXED residency with degraded_from_hot_ratio 1");
    r.degraded_from_hot_ratio = NAN;
    expect_violation(&r, "degraded_from_hot_ratio nan is outside [0, 1]");

    r = ready;
    r.degraded_from = WM_RES_COLD;
    expect_violation(&r, "READY revision records a residency before a loss (COLD");
    r = ready;
    r.degraded_from_hot_ratio = 0.5;
    expect_violation(&r, "READY revision records a residency before a loss");
}

static void test_identity_keys_and_generation(void **state)
{
    fixture *f = *state;
    wm_revision r = f->ready;
    r.metadata_generation = 0;
    expect_violation(&r, "metadata_generation");
    r = f->ready;
    r.group_key = "weights/other";
    expect_violation(&r, "group key");
    r.group_key = NULL; /* keys never bound */
    expect_violation(&r, "group key");
    r = f->ready;
    char bad[WM_KEY_MAX + 1];
    snprintf(bad, sizeof(bad), "%s", r.manifest_key);
    bad[strlen(bad) - 1] = 'X';
    r.manifest_key = bad;
    expect_violation(&r, "manifest key");
    r.manifest_key = r.group_key; /* the group key alone */
    expect_violation(&r, "manifest key");
    r.manifest_key = NULL;
    expect_violation(&r, "manifest key");
    r = f->ready;
    r.id.resource_id = "";
    expect_violation(&r, "identity: resource_id is empty");
    r = f->ready;
    char too_long[WM_ID_COMPONENT_MAX + 2];
    memset(too_long, 'a', sizeof(too_long) - 1);
    too_long[sizeof(too_long) - 1] = '\0';
    r.id.revision = too_long; /* one byte above the limit */
    expect_violation(&r, "identity");
    r = f->ready;
    r.id.ns = NULL; /* a zeroed identity's strings */
    expect_violation(&r, "identity: namespace is missing");
    r = f->ready;
    r.policy.mixed_hot_ratio = 1.0;
    expect_violation(&r, "policy: mixed_hot_ratio");
    r = f->ready;
    r.availability = (wm_availability)42;
    expect_violation(&r, "availability 42");
    r = f->ready;
    r.residency = (wm_residency)-3;
    expect_violation(&r, "residency -3");
    r = f->ready;
    r.created_ms = r.updated_ms + 1;
    expect_violation(&r, "created_ms");
    assert_int_equal(wm_metadata_check(NULL, NULL, 0), WM_EINVALID_ARGUMENT);
}

/* ------------------------------------------------------------------------ */
/* Mutations                                                                 */
/* ------------------------------------------------------------------------ */

static void test_mutation_check(void **state)
{
    fixture *f = *state;
    char msg[256] = "";
    wm_revision imp, before = f->ready, after;

    /* Creation: IMPORTING at generation 1 only. */
    wmt_importing_revision(&imp, "model", 3);
    assert_int_equal(wm_metadata_mutation_check(NULL, &imp, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_metadata_mutation_check(NULL, &before, msg, sizeof(msg)), WM_ECONFLICT);

    /* Commit: IMPORTING -> READY seals the summary. */
    after = before;
    before = imp;
    after.metadata_generation = 2;
    after.created_ms = imp.created_ms;
    assert_int_equal(wm_metadata_mutation_check(&before, &after, msg, sizeof(msg)), WM_OK);

    /* A policy update on READY. */
    before = f->ready;
    after = before;
    after.metadata_generation++;
    after.policy.mode = WM_MODE_PINNED;
    assert_int_equal(wm_metadata_mutation_check(&before, &after, msg, sizeof(msg)), WM_OK);

    /* Stale or skipped generations. */
    after.metadata_generation = before.metadata_generation;
    assert_int_equal(wm_metadata_mutation_check(&before, &after, msg, sizeof(msg)),
                     WM_ESTALE_GENERATION);
    after.metadata_generation = before.metadata_generation + 2;
    assert_int_equal(wm_metadata_mutation_check(&before, &after, msg, sizeof(msg)),
                     WM_ESTALE_GENERATION);

    /* The sealed summary is immutable after READY. */
    after = before;
    after.metadata_generation++;
    after.logical_bytes++;
    assert_int_equal(wm_metadata_mutation_check(&before, &after, msg, sizeof(msg)), WM_ECONFLICT);
    assert_non_null(strstr(msg, "sealed"));
    after = before;
    after.metadata_generation++;
    after.manifest_sha256[5] ^= 0x40;
    assert_int_equal(wm_metadata_mutation_check(&before, &after, msg, sizeof(msg)), WM_ECONFLICT);

    /* No way back from a tombstone, no skipping DELETING. */
    after = before;
    after.metadata_generation++;
    after.availability = WM_AVAIL_DELETED;
    after.residency = WM_RES_ABSENT;
    after.observed_hot_ratio = 0.0;
    assert_int_equal(wm_metadata_mutation_check(&before, &after, msg, sizeof(msg)), WM_ECONFLICT);
    assert_non_null(strstr(msg, "READY to DELETED"));
    before = after;
    before.metadata_generation--;
    after = f->ready;
    after.metadata_generation = before.metadata_generation + 1;
    assert_int_equal(wm_metadata_mutation_check(&before, &after, msg, sizeof(msg)), WM_ECONFLICT);

    /* Identity and clocks. */
    before = f->ready;
    after = before;
    after.metadata_generation++;
    after.updated_ms = before.updated_ms - 1;
    assert_int_equal(wm_metadata_mutation_check(&before, &after, msg, sizeof(msg)), WM_ECONFLICT);
    after = before;
    after.metadata_generation++;
    after.created_ms--;
    assert_int_equal(wm_metadata_mutation_check(&before, &after, msg, sizeof(msg)), WM_ECONFLICT);
    after = before;
    after.metadata_generation++;
    after.id.weight_generation++;
    assert_int_equal(wm_metadata_mutation_check(&before, &after, msg, sizeof(msg)),
                     WM_EINVALID_ARGUMENT);
    /* The result must itself be a valid record. */
    after = before;
    after.metadata_generation++;
    after.residency = WM_RES_UNKNOWN;
    assert_int_equal(wm_metadata_mutation_check(&before, &after, msg, sizeof(msg)),
                     WM_EINVALID_ARGUMENT);
}

/* ------------------------------------------------------------------------ */
/* Operations, leases, claims                                                */
/* ------------------------------------------------------------------------ */

static void test_operation_fits_its_revision(void **state)
{
    fixture *f = *state;
    char msg[256] = "";
    wm_revision r = f->ready;
    wm_operation op;
    wmt_migration(&op, &r, 7);
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_operation_check(&op, NULL, msg, sizeof(msg)), WM_OK);

    op.kind = WM_OPK_DELETING; /* DELETING op on a READY revision */
    op.target = WM_RES_UNKNOWN;
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "cannot be active on a READY"));
    r.availability = WM_AVAIL_DELETING;
    r.lease_count = 0;
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_OK);

    r = f->ready;
    wmt_migration(&op, &r, 7);
    op.state = WM_OPS_SUCCEEDED; /* the active op must be RUNNING */
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    r.operation_id = 0; /* an ended op is fine once the revision forgot it */
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_OK);
    op.state = WM_OPS_RUNNING; /* but a RUNNING op must be the active one */
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "not the revision's active one"));

    r = f->ready;
    wmt_migration(&op, &r, 7);
    op.members_done = op.members_total + 1;
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "progress"));
    op.members_done = 1;
    assert_int_equal(wm_payload_key(&r.id, 0, op.cursor, sizeof(op.cursor)) > 0, 1);
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_OK);
    strcpy(op.cursor, "weights/not/this/one/x/1/payload/0");
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "cursor"));
    op.cursor[0] = '\0';
    op.target = WM_RES_ABSENT;
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    op.target = WM_RES_MIXED;
    op.target_hot_ratio = 0.0;
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    op.target_hot_ratio = 0.4;
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_OK);
    op.kind = WM_OPK_REPAIRING; /* a repair names the residency it restores */
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_OK);
    op.target = WM_RES_UNKNOWN;
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "REPAIRING"));
    op.target = WM_RES_MIXED;
    op.kind = WM_OPK_DELETING; /* only MIGRATING and REPAIRING name a target */
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    op.kind = (wm_op_kind)9;
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    op.kind = WM_OPK_MIGRATING;
    op.id = 0;
    assert_int_equal(wm_operation_check(&op, &r, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);

    wm_revision other;
    wm_affinity aff;
    static const uint64_t b[] = {1};
    wmt_ready_revision(&other, &aff, "other", 1, b, 1);
    wmt_migration(&op, &r, 7);
    other.operation_id = 7;
    assert_int_equal(wm_operation_check(&op, &other, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "another revision"));
    wm_affinity_clear(&aff);
}

static void test_lease_check(void **state)
{
    fixture *f = *state;
    wm_lease l;
    char msg[200];
    wmt_lease(&l, &f->ready, 1);
    assert_int_equal(wm_lease_check(&l, msg, sizeof(msg)), WM_OK);
    l.expiry_ms = l.granted_ms - 1;
    assert_int_equal(wm_lease_check(&l, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    wmt_lease(&l, &f->ready, 0);
    assert_int_equal(wm_lease_check(&l, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    wmt_lease(&l, &f->ready, 1);
    l.metadata_generation = 0;
    assert_int_equal(wm_lease_check(&l, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
}

static void test_claim_check(void **state)
{
    (void)state;
    wm_lineage_claim c;
    char msg[256];
    wmt_claim(&c, "model");
    assert_int_equal(wm_claim_check(&c, msg, sizeof(msg)), WM_OK);

    c.target.weight_generation = 1; /* not above the base */
    assert_int_equal(wm_claim_check(&c, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "not above base"));
    wmt_claim(&c, "model");
    wmt_identity(&c.target, "another", 2);
    assert_int_equal(wm_claim_check(&c, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "lineage"));

    wmt_claim(&c, "model");
    c.committed_watermark = 2; /* target not above the watermark */
    assert_int_equal(wm_claim_check(&c, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "watermark"));
    c.phase = WM_PHASE_COMMITTED;
    assert_int_equal(wm_claim_check(&c, msg, sizeof(msg)), WM_OK);
    c.committed_watermark = 1;
    assert_int_equal(wm_claim_check(&c, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);

    wmt_claim(&c, "model");
    c.mode = WM_UPSERT_DELETE_FIRST;
    c.phase = WM_PHASE_BASE_FENCED; /* a PUT_FIRST phase */
    assert_int_equal(wm_claim_check(&c, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(msg, "BASE_FENCED does not belong to mode DELETE_FIRST"));
    c.phase = WM_PHASE_BASE_DELETED;
    assert_int_equal(wm_claim_check(&c, msg, sizeof(msg)), WM_OK);
    c.mode = WM_UPSERT_PUT_FIRST;
    assert_int_equal(wm_claim_check(&c, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    c.mode = (wm_upsert_mode)3;
    assert_int_equal(wm_claim_check(&c, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);

    wmt_claim(&c, "model");
    c.request_id[0] = '\0';
    assert_int_equal(wm_claim_check(&c, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    strcpy(c.request_id, "bad\xFF");
    assert_int_equal(wm_claim_check(&c, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
    wmt_claim(&c, "model");
    c.expected_metadata_generation = 0;
    assert_int_equal(wm_claim_check(&c, msg, sizeof(msg)), WM_EINVALID_ARGUMENT);
}

static void test_claim_phases_follow_their_mode(void **state)
{
    (void)state;
    /* Every allowed move, per mode; everything else is refused. */
    static const int put_first[][2] = {
        {WM_PHASE_CLAIMED, WM_PHASE_IMPORTING_TARGET},
        {WM_PHASE_IMPORTING_TARGET, WM_PHASE_BASE_FENCED},
        {WM_PHASE_BASE_FENCED, WM_PHASE_DRAINING_BASE},
        {WM_PHASE_DRAINING_BASE, WM_PHASE_DELETING_BASE},
        {WM_PHASE_DELETING_BASE, WM_PHASE_COMMITTED},
        {WM_PHASE_CLAIMED, WM_PHASE_ABORTED},
        {WM_PHASE_IMPORTING_TARGET, WM_PHASE_ABORTED},
    };
    static const int delete_first[][2] = {
        {WM_PHASE_CLAIMED, WM_PHASE_DELETING_BASE},
        {WM_PHASE_DELETING_BASE, WM_PHASE_BASE_DELETED},
        {WM_PHASE_BASE_DELETED, WM_PHASE_IMPORTING_TARGET},
        {WM_PHASE_IMPORTING_TARGET, WM_PHASE_COMMITTED},
        {WM_PHASE_CLAIMED, WM_PHASE_ABORTED},
    };
    static const unsigned put_phases = (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4) | (1u << 5) |
                                       (1u << 7) | (1u << 8);
    static const unsigned del_phases = (1u << 1) | (1u << 2) | (1u << 5) | (1u << 6) | (1u << 7) |
                                       (1u << 8);
    for (int mode = WM_UPSERT_PUT_FIRST; mode <= WM_UPSERT_DELETE_FIRST; mode++) {
        const int(*moves)[2] = mode == WM_UPSERT_PUT_FIRST ? put_first : delete_first;
        size_t n_moves = mode == WM_UPSERT_PUT_FIRST ? sizeof(put_first) / sizeof(put_first[0])
                                                     : sizeof(delete_first) / sizeof(delete_first[0]);
        unsigned phases = mode == WM_UPSERT_PUT_FIRST ? put_phases : del_phases;
        for (int from = 0; from <= 9; from++) {
            for (int to = 0; to <= 9; to++) {
                int expect = from == to && (phases & (1u << from)) != 0;
                for (size_t k = 0; k < n_moves; k++)
                    if (moves[k][0] == from && moves[k][1] == to) expect = 1;
                if (wm_claim_phase_next_ok(mode, from, to) != expect)
                    fail_msg("%s: %s -> %s expected %s", wm_upsert_mode_name(mode),
                             wm_phase_name(from), wm_phase_name(to), expect ? "allowed" : "refused");
            }
        }
    }
    assert_false(wm_claim_phase_next_ok(0, WM_PHASE_CLAIMED, WM_PHASE_IMPORTING_TARGET));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_availability_transition),
        cmocka_unit_test(test_named_invalid_transitions),
        cmocka_unit_test(test_cas_refuses_stale_and_future_generations),
        cmocka_unit_test_setup_teardown(test_valid_records_pass, setup, teardown),
        cmocka_unit_test_setup_teardown(test_importing_goes_with_unknown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ready_only_hot_cold_mixed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deleted_is_absent_without_lease_or_operation, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ratio_matches_residency, setup, teardown),
        cmocka_unit_test_setup_teardown(test_degraded_from_belongs_to_degraded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_identity_keys_and_generation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mutation_check, setup, teardown),
        cmocka_unit_test_setup_teardown(test_operation_fits_its_revision, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_check, setup, teardown),
        cmocka_unit_test(test_claim_check),
        cmocka_unit_test(test_claim_phases_follow_their_mode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
