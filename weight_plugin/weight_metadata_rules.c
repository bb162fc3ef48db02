/* weight_metadata_rules.c -- which revision records and changes may exist.
 *
 * The pure core of the metadata store: the availability transition table,
 * the per-record invariant checks (revision, operation, lease, lineage
 * claim) that every mutation, replay and snapshot load runs before a record
 * is accepted, the mutation check (before -> after), the lineage claim's
 * phase order, and the compare-and-set fence on the metadata generation.
 * Nothing here keeps state or calls the host; the tables that apply the
 * records are weight_metadata_store.c. */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "weight_management.h"

/* ------------------------------------------------------------------------ */
/* Availability transitions                                                  */
/* ------------------------------------------------------------------------ */

/* allowed[from][to], indexed by wm_availability (row and column 0 unused). */
static const unsigned char wm_transitions[6][6] = {
    /*              -  IMP RDY DEG DLG DLD */
    /* -   */      {0, 0,  0,  0,  0,  0},
    /* IMPORTING */{0, 1,  1,  0,  1,  1},
    /* READY */    {0, 0,  1,  1,  1,  0},
    /* DEGRADED */ {0, 0,  1,  1,  1,  0},
    /* DELETING */ {0, 0,  0,  0,  1,  1},
    /* DELETED */  {0, 0,  0,  0,  0,  1},
};

int wm_availability_transition_ok(int from, int to)
{
    if (!wm_availability_valid(from) || !wm_availability_valid(to)) return 0;
    return wm_transitions[from][to];
}

int wm_cas_check(uint64_t expected, uint64_t current)
{
    return expected == current ? WM_OK : WM_ESTALE_GENERATION;
}

/* ------------------------------------------------------------------------ */
/* Combination invariants                                                    */
/* ------------------------------------------------------------------------ */

/* Which residencies an availability may be observed with (bit per value). */
static unsigned wm_residency_allowed(wm_availability a)
{
#define B(r) (1u << (r))
    switch (a) {
    case WM_AVAIL_IMPORTING: return B(WM_RES_UNKNOWN);
    case WM_AVAIL_READY: return B(WM_RES_HOT) | B(WM_RES_COLD) | B(WM_RES_MIXED);
    case WM_AVAIL_DEGRADED: return B(WM_RES_HOT) | B(WM_RES_COLD) | B(WM_RES_MIXED) | B(WM_RES_ABSENT);
    case WM_AVAIL_DELETING:
        return B(WM_RES_UNKNOWN) | B(WM_RES_HOT) | B(WM_RES_COLD) | B(WM_RES_MIXED) |
               B(WM_RES_ABSENT);
    case WM_AVAIL_DELETED: return B(WM_RES_ABSENT);
    }
    return 0;
#undef B
}

static int wm_is_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0) return 0;
    return 1;
}

/* The sealed summary of a published revision must be complete. */
static int wm_summary_check(const wm_revision *rev, char *msg, size_t cap)
{
    const char *av = wm_availability_name((int)rev->availability);
    if (rev->payload_count == 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "%s revision has no payload (sealed summary required)", av);
    if (rev->affinity_count == 0 || rev->affinity_count > rev->payload_count)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "%s revision has %" PRIu64 " affinity units for %" PRIu64
                       " payloads (need 1..payload_count)",
                       av, rev->affinity_count, rev->payload_count);
    if (wm_is_zero(rev->manifest_sha256, WM_SHA256_LEN) ||
        wm_is_zero(rev->payload_keys_sha256, WM_SHA256_LEN) ||
        wm_is_zero(rev->affinity_sha256, WM_SHA256_LEN))
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "%s revision lacks a manifest, payload-key or affinity digest", av);
    return WM_OK;
}

/* The observed ratio must agree with the observed residency. */
static int wm_ratio_check(wm_residency res, double r, const char *what, char *msg, size_t cap)
{
    if (!isfinite(r) || r < 0.0 || r > 1.0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "%s %g is outside [0, 1]", what, r);
    switch (res) {
    case WM_RES_HOT:
        if (r != 1.0)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "HOT residency with %s %g (must be 1)",
                           what, r);
        break;
    case WM_RES_MIXED:
        if (!(r > 0.0 && r < 1.0))
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "MIXED residency with %s %g (must be in (0, 1))", what, r);
        break;
    default:
        if (r != 0.0)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "%s residency with %s %g (must be 0)",
                           wm_residency_name((int)res), what, r);
        break;
    }
    return WM_OK;
}

/* degraded_from: set only while DEGRADED, to a payload residency. */
static int wm_degraded_from_check(const wm_revision *rev, char *msg, size_t cap)
{
    wm_residency d = rev->degraded_from;
    if (rev->availability != WM_AVAIL_DEGRADED) {
        if (d != WM_RES_UNKNOWN || rev->degraded_from_hot_ratio != 0.0)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "%s revision records a residency before a loss (%s; only DEGRADED does)",
                           wm_availability_name((int)rev->availability), wm_residency_name((int)d));
        return WM_OK;
    }
    if (d != WM_RES_UNKNOWN && d != WM_RES_HOT && d != WM_RES_COLD && d != WM_RES_MIXED)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "DEGRADED revision was %s before the loss (HOT, COLD or MIXED only)",
                       wm_residency_name((int)d));
    return wm_ratio_check(d, rev->degraded_from_hot_ratio, "degraded_from_hot_ratio", msg, cap);
}

double wm_residency_hot_ratio(wm_residency to, double mixed_ratio)
{
    return to == WM_RES_HOT ? 1.0 : to == WM_RES_MIXED ? mixed_ratio : 0.0;
}

void wm_revision_degraded_toward(wm_revision *next, wm_residency to, double mixed_ratio)
{
    int usable = isfinite(mixed_ratio) && mixed_ratio > 0.0 && mixed_ratio < 1.0;
    next->degraded_from = to;
    next->degraded_from_hot_ratio =
        wm_residency_hot_ratio(to, usable ? mixed_ratio : next->policy.mixed_hot_ratio);
}

void wm_revision_set_availability(wm_revision *next, const wm_revision *rev,
                                  const wm_operation *active, wm_availability a)
{
    next->availability = a;
    if (a != WM_AVAIL_DEGRADED) {
        next->degraded_from = WM_RES_UNKNOWN;
        next->degraded_from_hot_ratio = 0.0;
    } else if (rev->availability == WM_AVAIL_DEGRADED) {
        next->degraded_from = rev->degraded_from;
        next->degraded_from_hot_ratio = rev->degraded_from_hot_ratio;
    } else if (active != NULL && (active->kind == WM_OPK_MIGRATING || active->kind == WM_OPK_REPAIRING) &&
               (active->target == WM_RES_HOT || active->target == WM_RES_COLD ||
                active->target == WM_RES_MIXED)) {
        wm_revision_degraded_toward(next, active->target, active->target_hot_ratio);
    } else if (rev->residency == WM_RES_HOT || rev->residency == WM_RES_COLD ||
               rev->residency == WM_RES_MIXED) {
        next->degraded_from = rev->residency;
        next->degraded_from_hot_ratio = rev->observed_hot_ratio;
    } else {
        next->degraded_from = WM_RES_UNKNOWN;
        next->degraded_from_hot_ratio = 0.0;
    }
}

int wm_metadata_check(const wm_revision *rev, char *msg, size_t cap)
{
    char why[160];
    if (rev == NULL) return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "revision is missing");
    if (wm_identity_check(&rev->id, why, sizeof(why)) < 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "identity: %s", why);
    return wm_metadata_check_fields(rev, msg, cap);
}

int wm_metadata_check_fields(const wm_revision *rev, char *msg, size_t cap)
{
    int rc;
    char key[WM_KEY_MAX + 1];
    char why[160];

    if (wm_policy_check(&rev->policy, why, sizeof(why)) < 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "policy: %s", why);
    if (!wm_availability_valid((int)rev->availability))
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "availability %d is not a state",
                       (int)rev->availability);
    if (!wm_residency_valid((int)rev->residency))
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "residency %d is not a state",
                       (int)rev->residency);
    if (rev->metadata_generation == 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "metadata_generation is 0 (must be >= 1)");

    int n = wm_group_key_checked(&rev->id, key, sizeof(key)); /* the identity passed above */
    if (n < 0 || rev->group_key == NULL || strcmp(key, rev->group_key) != 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "group key is not the canonical key of the identity");
    /* The manifest key is the group key and "/manifest" (wm_manifest_key). */
    if (rev->manifest_key == NULL || (size_t)n + 9 > WM_KEY_MAX ||
        strncmp(rev->manifest_key, key, (size_t)n) != 0 ||
        strcmp(rev->manifest_key + n, "/manifest") != 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "manifest key is not the canonical key of the identity");

    const char *av = wm_availability_name((int)rev->availability);
    const char *rs = wm_residency_name((int)rev->residency);
    if ((wm_residency_allowed(rev->availability) & (1u << rev->residency)) == 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "availability %s cannot have residency %s", av, rs);
    if ((rc = wm_ratio_check(rev->residency, rev->observed_hot_ratio, "observed_hot_ratio", msg,
                             cap)) < 0 ||
        (rc = wm_degraded_from_check(rev, msg, cap)) < 0)
        return rc;

    if (rev->availability == WM_AVAIL_DELETED && rev->lease_count != 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "DELETED revision holds %" PRIu32 " leases (a tombstone holds none)",
                       rev->lease_count);
    if (rev->availability == WM_AVAIL_DELETED && rev->operation_id != 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "DELETED revision has active operation %" PRIu64
                       " (a tombstone has none)",
                       rev->operation_id);
    if ((rev->availability == WM_AVAIL_IMPORTING || rev->availability == WM_AVAIL_DELETING) &&
        rev->lease_count != 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "%s revision holds %" PRIu32 " leases (it cannot be read)", av,
                       rev->lease_count);
    if (rev->availability == WM_AVAIL_READY || rev->availability == WM_AVAIL_DEGRADED)
        if ((rc = wm_summary_check(rev, msg, cap)) < 0) return rc;
    if (rev->created_ms > rev->updated_ms)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "created_ms %" PRIu64 " is after updated_ms %" PRIu64,
                       rev->created_ms, rev->updated_ms);
    size_t rid = rev->request_id != NULL ? strnlen(rev->request_id, WM_REQUEST_ID_MAX + 1) : 0;
    if (rid > WM_REQUEST_ID_MAX || wm_text_check(rev->request_id, rid) < 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "request id is not 0..%d bytes of UTF-8", WM_REQUEST_ID_MAX);
    if (rid == 0 ? rev->request_digest != 0 || rev->request_base_generation != 0 ||
                       rev->request_operation_id != 0
                 : rev->request_base_generation == 0 ||
                       rev->request_base_generation >= rev->metadata_generation)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "request %s names base generation %" PRIu64 " at metadata generation %" PRIu64,
                       rid ? rev->request_id : "(none)", rev->request_base_generation,
                       rev->metadata_generation);
    return WM_OK;
}

/* 1 when the manifest reference and payload summary -- what an import
 * commit seals -- are the same in a and b. */
int wm_sealed_equal(const wm_revision *a, const wm_revision *b)
{
    return strcmp(a->manifest_key, b->manifest_key) == 0 &&
           strcmp(a->group_key, b->group_key) == 0 &&
           memcmp(a->manifest_sha256, b->manifest_sha256, WM_SHA256_LEN) == 0 &&
           a->payload_count == b->payload_count && a->logical_bytes == b->logical_bytes &&
           memcmp(a->payload_keys_sha256, b->payload_keys_sha256, WM_SHA256_LEN) == 0 &&
           a->affinity_count == b->affinity_count &&
           memcmp(a->affinity_sha256, b->affinity_sha256, WM_SHA256_LEN) == 0;
}

int wm_metadata_mutation_check(const wm_revision *before,
                               const wm_revision *after,
                               char *msg,
                               size_t cap)
{
    int rc;
    if (after == NULL) return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "new record is missing");
    if ((rc = wm_metadata_check(after, msg, cap)) < 0) return rc;
    if (before == NULL) {
        if (after->availability != WM_AVAIL_IMPORTING || after->metadata_generation != 1)
            return wm_fail(WM_ECONFLICT, msg, cap,
                           "a new revision starts IMPORTING at metadata generation 1, not %s at %" PRIu64,
                           wm_availability_name((int)after->availability),
                           after->metadata_generation);
        return WM_OK;
    }
    if (wm_identity_cmp(&before->id, &after->id) != 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "a mutation cannot change the identity");
    if (before->metadata_generation == UINT64_MAX ||
        after->metadata_generation != before->metadata_generation + 1)
        return wm_fail(WM_ESTALE_GENERATION, msg, cap,
                       "metadata generation %" PRIu64 " does not follow %" PRIu64,
                       after->metadata_generation, before->metadata_generation);
    if (!wm_availability_transition_ok((int)before->availability, (int)after->availability))
        return wm_fail(WM_ECONFLICT, msg, cap, "availability cannot go from %s to %s",
                       wm_availability_name((int)before->availability),
                       wm_availability_name((int)after->availability));
    if (before->availability != WM_AVAIL_IMPORTING && !wm_sealed_equal(before, after))
        return wm_fail(WM_ECONFLICT, msg, cap,
                       "the sealed manifest reference and payload summary cannot change");
    if (before->created_ms != after->created_ms)
        return wm_fail(WM_ECONFLICT, msg, cap, "created_ms cannot change");
    if (after->updated_ms < before->updated_ms || after->last_access_ms < before->last_access_ms)
        return wm_fail(WM_ECONFLICT, msg, cap, "updated_ms and last_access_ms never go back");
    return WM_OK;
}

/* Whether an active operation of this kind fits the revision's state. */
static int wm_op_fits(wm_op_kind kind, wm_availability a)
{
    switch (kind) {
    case WM_OPK_IMPORTING: return a == WM_AVAIL_IMPORTING;
    case WM_OPK_DELETING: return a == WM_AVAIL_DELETING;
    case WM_OPK_MIGRATING:
    case WM_OPK_REPAIRING: return a == WM_AVAIL_READY || a == WM_AVAIL_DEGRADED;
    }
    return 0;
}

int wm_operation_check(const wm_operation *op, const wm_revision *rev, char *msg, size_t cap)
{
    char why[160];
    if (op == NULL) return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "operation is missing");
    if (op->id == 0) return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "operation id is 0");
    if (!wm_op_kind_valid((int)op->kind))
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "operation %" PRIu64
                       " has kind %d, not an operation kind", op->id, (int)op->kind);
    if (!wm_op_state_valid((int)op->state))
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "operation %" PRIu64
                       " has state %d, not an operation state", op->id, (int)op->state);
    if (wm_identity_check(&op->id_of, why, sizeof(why)) < 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "operation %" PRIu64 " identity: %s",
                       op->id, why);
    if (op->kind == WM_OPK_MIGRATING || op->kind == WM_OPK_REPAIRING) {
        /* A migration moves toward its target; a repair restores it. */
        if (op->target != WM_RES_HOT && op->target != WM_RES_COLD && op->target != WM_RES_MIXED)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "%s operation %" PRIu64 " targets %s (not HOT, COLD or MIXED)",
                           wm_op_kind_name((int)op->kind), op->id,
                           wm_residency_name((int)op->target));
        if (op->target == WM_RES_MIXED &&
            !(isfinite(op->target_hot_ratio) && op->target_hot_ratio > 0.0 &&
              op->target_hot_ratio < 1.0))
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "%s operation %" PRIu64 " to MIXED has ratio %g outside (0, 1)",
                           wm_op_kind_name((int)op->kind), op->id, op->target_hot_ratio);
    } else if (op->target != WM_RES_UNKNOWN) {
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "%s operation %" PRIu64
                       " has a target residency (only MIGRATING and REPAIRING have one)",
                       wm_op_kind_name((int)op->kind), op->id);
    }
    if (op->members_done > op->members_total || op->bytes_done > op->bytes_total)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "operation %" PRIu64 " progress exceeds its total", op->id);
    if (strnlen(op->cursor, sizeof(op->cursor)) > WM_KEY_MAX ||
        strnlen(op->error, sizeof(op->error)) > WM_ERROR_TEXT_MAX)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "operation %" PRIu64 " cursor or error is unterminated", op->id);
    if (op->cursor[0] != '\0') {
        wm_identity_buf cid;
        wm_key_kind kind;
        if (wm_key_parse(op->cursor, &cid, &kind, NULL) < 0 || kind == WM_KEY_GROUP ||
            wm_identity_cmp(&cid.id, &op->id_of) != 0)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "operation %" PRIu64 " cursor is not a member key of its revision",
                           op->id);
    }
    if (op->created_ms > op->updated_ms)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "operation %" PRIu64 " was created after its last update", op->id);
    if (rev == NULL) return WM_OK;

    if (wm_identity_cmp(&op->id_of, &rev->id) != 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "operation %" PRIu64 " belongs to another revision", op->id);
    if (rev->operation_id == op->id) {
        if (op->state != WM_OPS_RUNNING)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "active operation %" PRIu64 " is %s (an active one is RUNNING)",
                           op->id, wm_op_state_name((int)op->state));
        if (!wm_op_fits(op->kind, rev->availability))
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "a %s operation cannot be active on a %s revision",
                           wm_op_kind_name((int)op->kind),
                           wm_availability_name((int)rev->availability));
    } else if (op->state == WM_OPS_RUNNING) {
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "operation %" PRIu64 " is RUNNING but not the revision's active one",
                       op->id);
    }
    return WM_OK;
}

int wm_lease_check(const wm_lease *l, char *msg, size_t cap)
{
    char why[160];
    if (l == NULL) return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "lease is missing");
    if (l->id == 0) return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "lease id is 0");
    if (wm_identity_check(&l->id_of, why, sizeof(why)) < 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "lease %" PRIu64 " identity: %s",
                       l->id, why);
    if (l->metadata_generation == 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "lease %" PRIu64 " is fenced on metadata generation 0", l->id);
    if (l->granted_ms > l->expiry_ms)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "lease %" PRIu64 " expires before it was granted", l->id);
    return WM_OK;
}

/* Phases each mode may be in (bit per wm_claim_phase). */
static unsigned wm_phases_of(wm_upsert_mode mode)
{
#define B(p) (1u << (p))
    unsigned common = B(WM_PHASE_CLAIMED) | B(WM_PHASE_IMPORTING_TARGET) |
                      B(WM_PHASE_DELETING_BASE) | B(WM_PHASE_COMMITTED) | B(WM_PHASE_ABORTED);
    if (mode == WM_UPSERT_PUT_FIRST) return common | B(WM_PHASE_BASE_FENCED) | B(WM_PHASE_DRAINING_BASE);
    if (mode == WM_UPSERT_DELETE_FIRST) return common | B(WM_PHASE_BASE_DELETED);
    return 0;
#undef B
}

/* The forward sequence of each mode, ending in COMMITTED. */
static const wm_claim_phase wm_put_first_seq[] = {
    WM_PHASE_CLAIMED, WM_PHASE_IMPORTING_TARGET, WM_PHASE_BASE_FENCED,
    WM_PHASE_DRAINING_BASE, WM_PHASE_DELETING_BASE, WM_PHASE_COMMITTED};
static const wm_claim_phase wm_delete_first_seq[] = {
    WM_PHASE_CLAIMED, WM_PHASE_DELETING_BASE, WM_PHASE_BASE_DELETED,
    WM_PHASE_IMPORTING_TARGET, WM_PHASE_COMMITTED};

int wm_claim_phase_next_ok(int mode, int from, int to)
{
    const wm_claim_phase *seq;
    size_t n;
    if (!wm_phase_valid(from) || !wm_phase_valid(to)) return 0;
    if (mode == WM_UPSERT_PUT_FIRST) {
        seq = wm_put_first_seq;
        n = sizeof(wm_put_first_seq) / sizeof(wm_put_first_seq[0]);
    } else if (mode == WM_UPSERT_DELETE_FIRST) {
        seq = wm_delete_first_seq;
        n = sizeof(wm_delete_first_seq) / sizeof(wm_delete_first_seq[0]);
    } else {
        return 0;
    }
    if ((wm_phases_of((wm_upsert_mode)mode) & (1u << from)) == 0 ||
        (wm_phases_of((wm_upsert_mode)mode) & (1u << to)) == 0)
        return 0;
    if (from == to) return 1;
    if (from == WM_PHASE_COMMITTED || from == WM_PHASE_ABORTED) return 0;
    if (to == WM_PHASE_ABORTED)
        return from == WM_PHASE_CLAIMED ||
               (mode == WM_UPSERT_PUT_FIRST && from == WM_PHASE_IMPORTING_TARGET);
    for (size_t i = 0; i + 1 < n; i++)
        if (seq[i] == (wm_claim_phase)from) return seq[i + 1] == (wm_claim_phase)to;
    return 0;
}

int wm_claim_check(const wm_lineage_claim *c, char *msg, size_t cap)
{
    char why[160];
    if (c == NULL) return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "claim is missing");
    size_t rl = strnlen(c->request_id, sizeof(c->request_id));
    if (rl == 0 || rl > WM_REQUEST_ID_MAX || wm_component_check(c->request_id, rl) < 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "request_id must be 1..%d bytes of UTF-8", WM_REQUEST_ID_MAX);
    if (wm_identity_check(&c->base, why, sizeof(why)) < 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "claim base: %s", why);
    if (wm_identity_check(&c->target, why, sizeof(why)) < 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "claim target: %s", why);
    wm_lineage lin;
    wm_identity_lineage(&c->base, &lin);
    if (!wm_identity_in_lineage(&c->target, &lin))
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "claim target is not in the base's lineage");
    if (c->target.weight_generation <= c->base.weight_generation)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "claim target generation %" PRIu64 " is not above base generation %" PRIu64,
                       c->target.weight_generation, c->base.weight_generation);
    if (!wm_upsert_mode_valid((int)c->mode))
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "claim mode %d is not an upsert mode",
                       (int)c->mode);
    if (!wm_phase_valid((int)c->phase) || (wm_phases_of(c->mode) & (1u << c->phase)) == 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "phase %s does not belong to mode %s",
                       wm_phase_name((int)c->phase), wm_upsert_mode_name((int)c->mode));
    if (c->expected_metadata_generation == 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "claim expects base metadata generation 0");
    if (c->phase == WM_PHASE_COMMITTED && c->committed_watermark != c->target.weight_generation)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "committed claim leaves watermark %" PRIu64 ", not its target %" PRIu64,
                       c->committed_watermark, c->target.weight_generation);
    if (c->phase != WM_PHASE_COMMITTED && c->committed_watermark >= c->target.weight_generation)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "claim target %" PRIu64 " is not above the lineage watermark %" PRIu64,
                       c->target.weight_generation, c->committed_watermark);
    if (strnlen(c->error, sizeof(c->error)) > WM_ERROR_TEXT_MAX)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "claim error text is unterminated");
    if (c->created_ms > c->updated_ms)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "claim was created after its last update");
    return WM_OK;
}

