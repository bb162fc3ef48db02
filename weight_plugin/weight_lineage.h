/* weight_lineage.h -- generation replacement: the lineage table's rules and
 * the claim driver.
 *
 * A lineage (tenant, namespace, resource, revision) holds at most one
 * non-terminal replacement claim and a committed generation watermark
 * (weight_management.h: wm_lineage_entry). This header declares the pure
 * step that decides whether one claim record (OpLog type 12, the complete
 * post-mutation claim) may follow the entry it lands on -- the live path and
 * replay both run it, so replay can never lower a watermark or create a
 * second successor -- and the plugin's side of weight_upsert: the two RPCs,
 * the fence on the base, the import gate on the target and the reconcile
 * step that walks each open claim through its mode's phases. */
#ifndef WEIGHT_LINEAGE_H
#define WEIGHT_LINEAGE_H

#include <stddef.h>
#include <stdint.h>

#include "weight_management.h"

/* Apply claim record c to the lineage entry e (a zeroed entry with the
 * lineage filled in when the lineage has no entry yet). On WM_OK *e holds
 * the new state, or is unchanged for a duplicate of the record it already
 * holds (idempotent). Refused with WM_EINVALID_ARGUMENT and a sentence (e
 * unchanged):
 *   - a record that fails wm_claim_check or names another lineage;
 *   - a watermark below the entry's (replay never lowers it), or a
 *     non-COMMITTED record whose watermark differs from the entry's;
 *   - for the entry's own claim (same request id): other immutable
 *     arguments (base, target, mode, expected generation, created_ms), or a
 *     phase that is not the next one of its mode (out of order);
 *   - a new claim while the entry's claim is still open (a second
 *     successor), a new claim that does not start at CLAIMED, or a target
 *     generation not above the watermark. */
int wm_lineage_claim_step(wm_lineage_entry *e, const wm_lineage_claim *c, char *msg, size_t cap);

/* 1 when the claim is final (COMMITTED or ABORTED). */
int wm_claim_terminal(const wm_lineage_claim *c);

/* -- the plugin's side (needs wm_plugin.h) --------------------------------- */

struct wm_plugin;
struct smp_rpc_call;

/* Create the working state and register the upsert metrics. Only inside
 * init (from wm_mgmt_register). SMP_ENOMEM or the host's registration
 * error (nothing is left allocated then). */
int wm_lineage_register(struct wm_plugin *p);

/* Free the working state and every claim record still in flight (at fini;
 * their callbacks will not run any more). */
void wm_lineage_release(struct wm_plugin *p);

/* RPC methods 15 and 16 (weight_rpc.proto). */
int wm_rpc_upsert_begin(void *plugin, struct smp_rpc_call *call, const uint8_t *body, size_t len);
int wm_rpc_upsert_status(void *plugin, struct smp_rpc_call *call, const uint8_t *body, size_t len);

/* May an import of `id` begin? WM_OK when its lineage has no open claim, or
 * id is the open claim's target and the claim allows the import (PUT_FIRST:
 * before the target is READY; DELETE_FIRST: only once the base is deleted,
 * else WM_EBUSY). Another generation while a claim is open: WM_ECONFLICT.
 * Without an open claim, a generation at or below the lineage's committed
 * watermark: WM_ESTALE_GENERATION. A sentence in msg on refusal. */
int wm_lineage_import_check(const struct wm_plugin *p, const wm_identity *id, char *msg,
                            size_t cap);

/* 1 when id is the target of its lineage's open claim. An aborted target
 * stays in the table (DELETING) until the claim has seen it fail and ended
 * (the claim's driver tells a failed target from one not begun yet by its
 * record). */
int wm_lineage_target_open(const struct wm_plugin *p, const wm_identity *id);

/* The policy the import of `id` starts from when id is the target of its
 * lineage's open claim: the base revision's (its DELETED tombstone keeps it
 * after a DELETE_FIRST deletion). NULL otherwise, or when the base's record
 * is gone (pruned): then the cluster default. */
const wm_policy *wm_lineage_base_policy(const struct wm_plugin *p, const wm_identity *id);

/* May the import of `id` be aborted? WM_OK, except for the target of an
 * open DELETE_FIRST claim whose base is already deleted: WM_ECONFLICT (the
 * RFC: a target failure cannot be rolled back to the deleted base; the
 * same request resumes the import). */
int wm_lineage_abort_check(const struct wm_plugin *p, const wm_identity *id, char *msg,
                           size_t cap);

/* Move every open claim one step when its condition holds (target READY,
 * base leases drained, base deleted, ...), appending the next type-12 record
 * or the base's deletion; a claim with a record in flight waits. Called by
 * the reconcile tick (which wm_lineage_kick brings at once); a standby never
 * runs it. */
void wm_lineage_drive(struct wm_plugin *p);

/* Whether any claim is open or a claim record is on its way (cheap: a
 * counter), so that callers on hot paths ask wm_revision_fenced only then. */
int wm_lineage_claims_open(const struct wm_plugin *p);

/* Something a claim may wait for just happened (a claim record or a weight
 * record became durable, a lease ended): while any claim is open, ask the
 * host for the reconcile tick at once (ABI 1.10, tick_soon), so that each
 * phase follows the last as soon as it is durable instead of one tick
 * period later. No-op without open claims or on a host without tick_soon. */
void wm_lineage_kick(struct wm_plugin *p);

/* What an open claim c waits for, in one clause for messages (the CONFLICT
 * of a second successor names it): its target's import (with the time
 * import_ttl_ms leaves it and the abort command, where abort applies), the
 * base's leases (how many, and when the last ends), the base's deletion. */
void wm_claim_waits_for(struct wm_plugin *p, const wm_lineage_claim *c, char *out, size_t cap);

/* Publish the upsert metrics. */
void wm_lineage_metrics(struct wm_plugin *p);

#endif /* WEIGHT_LINEAGE_H */
