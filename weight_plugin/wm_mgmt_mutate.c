/* wm_mgmt_mutate.c -- the management RPCs that change a published revision
 * (UPDATE_POLICY, MIGRATE, REMOVE).
 *
 * Each is fenced by the caller's expected metadata generation and by the
 * records of the revision in flight, prepares the next record (a new
 * policy, a MIGRATING operation, DELETING with its operation) and submits
 * it through wm_mgmt_txn.c; the lifecycle (weight_lifecycle.c) executes the
 * operations created here. Each may carry a request id: the record stamps
 * it on the revision (persisted), so a retry after a lost reply answers the
 * first result instead of STALE_GENERATION (wm_request_replayed). */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weight_lineage.h"
#include "weight_residency_planner.h"
#include "wm_mgmt.h"

/* ------------------------------------------------------------------------ */
/* UPDATE_POLICY, MIGRATE, REMOVE                                            */
/* ------------------------------------------------------------------------ */

/* 1 when the new policy names another preferred residency (or, for MIXED,
 * another ratio) than the revision's, whatever its mode: an operation
 * active on the revision ends at its own target, so a new preferred
 * residency accepted meanwhile would never be converged to. */
static int wm_policy_retargets(const wm_revision *rev, const wm_policy *pol)
{
    return pol->preferred != rev->policy.preferred ||
           (pol->preferred == WM_RES_MIXED && pol->mixed_hot_ratio != rev->policy.mixed_hot_ratio);
}

/* 1 when the new policy of an AUTO or MANUAL revision rev asks for another
 * residency than the old one (wm_policy_retargets). */
static int wm_policy_moves(const wm_revision *rev, const wm_policy *pol)
{
    return (pol->mode == WM_MODE_AUTO || pol->mode == WM_MODE_MANUAL) && wm_policy_retargets(rev, pol);
}

/* 1 when the new policy moves a READY revision that is not already there:
 * the update then starts converging toward it (wm_rpc_update_policy). */
static int wm_policy_converges(const wm_revision *rev, const wm_policy *pol)
{
    if (rev->availability != WM_AVAIL_READY || !wm_policy_moves(rev, pol)) return 0;
    return pol->preferred == WM_RES_MIXED || pol->preferred != rev->residency;
}

/* 1 when the new policy moves a DEGRADED revision: no migration can start
 * while it is DEGRADED, so the record says it belongs there now
 * (degraded_from), and it goes there once its manifest and members are readable again
 * (wm_repair.c). */
static int wm_policy_moves_degraded(const wm_revision *rev, const wm_policy *pol)
{
    return rev->availability == WM_AVAIL_DEGRADED && wm_policy_moves(rev, pol);
}

/* Replace the policy of one revision (absent fields keep the revision's
 * current value). Allowed while IMPORTING, READY or DEGRADED. A new
 * preferred residency of a READY AUTO or MANUAL revision starts converging
 * toward it: the record carries a MIGRATING operation toward it, as
 * weight_migrate would (wm_policy_converges). While an operation is active,
 * any new preferred residency (or MIXED ratio) is BUSY naming the operation,
 * nothing changed -- even one the revision seems to have already, as its
 * residency moves with the operation (wm_policy_retargets); a change of
 * mode alone is taken. (An IMPORTING revision converges
 * at its commit anyway; a DEGRADED one goes there once its members are
 * readable again: wm_policy_moves_degraded.) */
int wm_rpc_update_policy(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    wm_identity_buf idb;
    wm_policy pol;
    WM_DECODE(req, Wmrpc__UpdatePolicyRequest, wmrpc__update_policy_request__unpack, p, call, body,
              len);
    const wm_revision *rev = wm_lookup(p, call, req->identity, &idb);
    if (rev == NULL) goto free_req;
    if (req->policy == NULL) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "policy is missing");
        goto free_req;
    }
    uint64_t ratio_bits;
    memcpy(&ratio_bits, &req->policy->mixed_hot_ratio, sizeof(ratio_bits));
    const uint64_t args[3] = {req->policy->preferred_residency, ratio_bits,
                              req->policy->migration_mode};
    uint64_t digest = wm_request_digest(WMRPC__WEIGHT_METHOD__WEIGHT_UPDATE_POLICY, args, 3);
    if (wm_request_replayed(p, call, rev, req->request_id, digest,
                            req->expected_metadata_generation) ||
        !wm_check_cas(p, call, rev, req->expected_metadata_generation))
        goto free_req;
    if (wm_policy_from_pb(p, req->policy, &rev->policy, &pol, msg, sizeof(msg)) < 0) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "invalid policy: %s", msg);
        goto free_req;
    }
    if (rev->availability == WM_AVAIL_DELETING || rev->availability == WM_AVAIL_DELETED) {
        wm_reply_error(p, call, WM_ECONFLICT, "revision %s is %s; its policy is final",
                       rev->group_key, wm_availability_name((int)rev->availability));
        goto free_req;
    }
    if (!wm_check_idle(p, call, rev)) goto free_req;
    int converge = wm_policy_converges(rev, &pol);
    int moves_degraded = wm_policy_moves_degraded(rev, &pol);
    if (rev->operation_id != 0 && wm_policy_retargets(rev, &pol)) {
        /* The operation ends at its own target (a DEGRADED revision's when
         * its members return): the new residency would be recorded and
         * then never converged to, whether or not the revision already
         * looks like it (its residency moves with the operation). */
        const wm_operation *op = wm_store_operation(p->store, rev->operation_id);
        char what[64] = "";
        if (op != NULL && op->kind == WM_OPK_MIGRATING)
            snprintf(what, sizeof(what), " (%s to %s)", wm_op_kind_name((int)op->kind),
                     wm_residency_name((int)op->target));
        else if (op != NULL)
            snprintf(what, sizeof(what), " (%s)", wm_op_kind_name((int)op->kind));
        wm_reply_error(p, call, WM_EBUSY,
                       "revision %s has active operation %" PRIu64 "%s; a new preferred residency "
                       "would not be converged to once it ends, so retry then; nothing was changed",
                       rev->group_key, rev->operation_id, what);
        goto free_req;
    }
    wm_txn *t = wm_txn_next(p, call, rev);
    if (t == NULL) goto free_req;
    t->up.revision.policy = pol;
    if (converge) wm_txn_migrating(p, t, pol.preferred, pol.mixed_hot_ratio);
    if (moves_degraded) wm_revision_degraded_toward(&t->up.revision, pol.preferred, pol.mixed_hot_ratio);
    wm_txn_request(t, req->request_id, digest, req->expected_metadata_generation);
    wm_check_submit(p, call, rev, t, "policy update", "policy update", msg, sizeof(msg));
free_req:
    wmrpc__update_policy_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* Create an explicit migration. READY revisions only; one active operation
 * (BUSY); PINNED revisions refuse any residency change once their initial
 * convergence is over (POLICY_UNSATISFIABLE: the policy, not the state, is
 * what forbids it). */
int wm_rpc_migrate(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    wm_identity_buf idb;
    WM_DECODE(req, Wmrpc__MigrateRequest, wmrpc__migrate_request__unpack, p, call, body, len);
    const wm_revision *rev = wm_lookup(p, call, req->identity, &idb);
    if (rev == NULL) goto free_req;
    uint64_t ratio_bits;
    memcpy(&ratio_bits, &req->mixed_hot_ratio, sizeof(ratio_bits));
    const uint64_t args[2] = {req->target_residency, ratio_bits};
    uint64_t digest = wm_request_digest(WMRPC__WEIGHT_METHOD__WEIGHT_MIGRATE, args, 2);
    if (wm_request_replayed(p, call, rev, req->request_id, digest,
                            req->expected_metadata_generation) ||
        !wm_check_cas(p, call, rev, req->expected_metadata_generation))
        goto free_req;
    if (rev->availability != WM_AVAIL_READY) {
        wm_reply_error(p, call, WM_ENOT_READY, "revision %s is %s; only a READY revision migrates",
                       rev->group_key, wm_availability_name((int)rev->availability));
        goto free_req;
    }
    if (req->target_residency != WM_RES_HOT && req->target_residency != WM_RES_COLD &&
        req->target_residency != WM_RES_MIXED) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT,
                       "target_residency %" PRIu32 " is not HOT (1), COLD (2) or MIXED (3)",
                       req->target_residency);
        goto free_req;
    }
    double ratio = req->mixed_hot_ratio != 0.0 ? req->mixed_hot_ratio : rev->policy.mixed_hot_ratio;
    if (req->target_residency == WM_RES_MIXED && !(isfinite(ratio) && ratio > 0.0 && ratio < 1.0)) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "mixed_hot_ratio %g is outside (0, 1)", ratio);
        goto free_req;
    }
    char busy[96];
    if (wm_busy_reason(p, rev, busy, sizeof(busy))) {
        wm_reply_error(p, call, WM_EBUSY, "revision %s already has %s", rev->group_key, busy);
        goto free_req;
    }
    if (rev->policy.mode == WM_MODE_PINNED) {
        wm_reply_error(p, call, WM_EPOLICY_UNSATISFIABLE,
                       "revision %s is PINNED: its residency is fixed after initial convergence "
                       "(update the policy first)",
                       rev->group_key);
        goto free_req;
    }
    wm_txn *t = wm_txn_next(p, call, rev);
    if (t == NULL) goto free_req;
    wm_txn_migrating(p, t, (wm_residency)req->target_residency, ratio);
    wm_txn_request(t, req->request_id, digest, req->expected_metadata_generation);
    wm_check_submit(p, call, rev, t, "migration", "migrate", msg, sizeof(msg));
free_req:
    wmrpc__migrate_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* Accept an explicit removal: READY/DEGRADED -> DELETING with a DELETING
 * operation the lifecycle executes. BUSY while a lease or an operation is
 * active. A retry on DELETING or DELETED answers the revision as it is. */
int wm_rpc_remove(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    wm_identity_buf idb;
    WM_DECODE(req, Wmrpc__IdentityRequest, wmrpc__identity_request__unpack, p, call, body, len);
    const wm_revision *rev = wm_lookup(p, call, req->identity, &idb);
    if (rev == NULL) goto free_req;
    uint64_t digest = wm_request_digest(WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, NULL, 0);
    if (wm_request_replayed(p, call, rev, req->request_id, digest,
                            req->expected_metadata_generation))
        goto free_req;
    if (rev->availability == WM_AVAIL_DELETING || rev->availability == WM_AVAIL_DELETED) {
        wm_reply_metadata(p, call, rev);
        goto free_req;
    }
    if (rev->availability == WM_AVAIL_IMPORTING) {
        wm_reply_error(p, call, WM_ECONFLICT, "revision %s is IMPORTING; abort the import instead",
                       rev->group_key);
        goto free_req;
    }
    if (!wm_check_cas(p, call, rev, req->expected_metadata_generation)) goto free_req;
    if (rev->lease_count > 0 || wm_pending_lease_grants(p, rev->group_key)) {
        wm_reply_error(p, call, WM_EBUSY, "revision %s has %" PRIu32 " active lease(s)", rev->group_key,
                       rev->lease_count);
        goto free_req;
    }
    char busy[96];
    if (wm_busy_reason(p, rev, busy, sizeof(busy))) {
        wm_reply_error(p, call, WM_EBUSY, "revision %s has %s", rev->group_key, busy);
        goto free_req;
    }
    wm_txn *t = wm_txn_next(p, call, rev);
    if (t == NULL) goto free_req;
    wm_txn_deleting(p, t, rev->payload_count + 1, rev->logical_bytes);
    wm_txn_request(t, req->request_id, digest, req->expected_metadata_generation);
    wm_check_submit(p, call, rev, t, "removal", "remove", msg, sizeof(msg));
free_req:
    wmrpc__identity_request__free_unpacked(req, NULL);
    return SMP_OK;
}
