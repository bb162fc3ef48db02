/* weight_lineage.c -- the rules of the lineage table (generation replacement).
 *
 * One function decides whether a replacement-claim record may land on a
 * lineage entry: the same one runs when the active master applies a record it
 * made durable and when OpLog replay or a standby applies it, so both build
 * the same table. It keeps the RFC's promises for the lineage: at most one
 * non-terminal claim, a claim walks its mode's phase order one step at a time
 * (wm_claim_phase_next_ok), the same request id always carries the same
 * arguments, and the committed watermark only grows. Records are complete
 * post-mutation claims, so a duplicate of the record the entry holds is a
 * no-op; anything else out of order is refused (replay fails closed). Pure:
 * nothing here calls the host. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "weight_lineage.h"

__attribute__((format(printf, 4, 5)))
static int wm_lin_refuse(int rc, char *msg, size_t cap, const char *fmt, ...)
{
    if (msg != NULL && cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, cap, fmt, ap);
        va_end(ap);
    }
    return rc;
}

int wm_claim_terminal(const wm_lineage_claim *c)
{
    return c->phase == WM_PHASE_COMMITTED || c->phase == WM_PHASE_ABORTED;
}

/* The arguments a request id is bound to. 1 when equal. */
static int wm_claim_same_args(const wm_lineage_claim *a, const wm_lineage_claim *b)
{
    return wm_identity_cmp(&a->base, &b->base) == 0 &&
           wm_identity_cmp(&a->target, &b->target) == 0 && a->mode == b->mode &&
           a->expected_metadata_generation == b->expected_metadata_generation &&
           a->created_ms == b->created_ms;
}

int wm_lineage_claim_step(wm_lineage_entry *e, const wm_lineage_claim *c, char *msg, size_t cap)
{
    char why[200];
    if (e == NULL || c == NULL)
        return wm_lin_refuse(WM_EINVALID_ARGUMENT, msg, cap, "lineage claim is missing");
    if (wm_claim_check(c, why, sizeof(why)) < 0)
        return wm_lin_refuse(WM_EINVALID_ARGUMENT, msg, cap, "%s", why);
    if (!wm_identity_in_lineage(&c->base, &e->lineage))
        return wm_lin_refuse(WM_EINVALID_ARGUMENT, msg, cap,
                             "claim %s names another lineage than its entry", c->request_id);
    if (c->committed_watermark < e->committed_watermark)
        return wm_lin_refuse(WM_EINVALID_ARGUMENT, msg, cap,
                             "claim %s would lower the lineage watermark from %" PRIu64
                             " to %" PRIu64,
                             c->request_id, e->committed_watermark, c->committed_watermark);
    if (c->phase != WM_PHASE_COMMITTED && c->committed_watermark != e->committed_watermark)
        return wm_lin_refuse(WM_EINVALID_ARGUMENT, msg, cap,
                             "claim %s in phase %s carries watermark %" PRIu64
                             " but the lineage's is %" PRIu64,
                             c->request_id, wm_phase_name((int)c->phase), c->committed_watermark,
                             e->committed_watermark);

    if (e->has_claim && strcmp(e->claim.request_id, c->request_id) == 0) {
        const wm_lineage_claim *cur = &e->claim;
        if (!wm_claim_same_args(cur, c))
            return wm_lin_refuse(WM_EINVALID_ARGUMENT, msg, cap,
                                 "claim %s is recorded with other arguments", c->request_id);
        if (cur->phase == c->phase) {
            if (c->phase == WM_PHASE_COMMITTED && cur->committed_watermark != c->committed_watermark)
                return wm_lin_refuse(WM_EINVALID_ARGUMENT, msg, cap,
                                     "claim %s committed twice with different watermarks",
                                     c->request_id);
            return WM_OK; /* duplicate: the entry already holds this state */
        }
        if (!wm_claim_phase_next_ok((int)c->mode, (int)cur->phase, (int)c->phase))
            return wm_lin_refuse(WM_EINVALID_ARGUMENT, msg, cap,
                                 "claim %s cannot move from %s to %s under %s (out of order)",
                                 c->request_id, wm_phase_name((int)cur->phase),
                                 wm_phase_name((int)c->phase), wm_upsert_mode_name((int)c->mode));
        if (c->updated_ms < cur->updated_ms)
            return wm_lin_refuse(WM_EINVALID_ARGUMENT, msg, cap,
                                 "claim %s moves its update time backwards", c->request_id);
    } else {
        if (e->has_claim && !wm_claim_terminal(&e->claim))
            return wm_lin_refuse(WM_EINVALID_ARGUMENT, msg, cap,
                                 "lineage already has the open claim %s (%s); claim %s would be a "
                                 "second successor",
                                 e->claim.request_id, wm_phase_name((int)e->claim.phase),
                                 c->request_id);
        if (c->phase != WM_PHASE_CLAIMED)
            return wm_lin_refuse(WM_EINVALID_ARGUMENT, msg, cap,
                                 "claim %s is unknown and does not start at CLAIMED (%s)",
                                 c->request_id, wm_phase_name((int)c->phase));
        if (c->target.weight_generation <= e->committed_watermark)
            return wm_lin_refuse(WM_EINVALID_ARGUMENT, msg, cap,
                                 "claim %s target generation %" PRIu64
                                 " is not above the lineage watermark %" PRIu64,
                                 c->request_id, c->target.weight_generation,
                                 e->committed_watermark);
    }
    e->claim = *c;
    e->has_claim = 1;
    if (c->committed_watermark > e->committed_watermark)
        e->committed_watermark = c->committed_watermark;
    return WM_OK;
}
