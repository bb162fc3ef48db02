/* weight_lifecycle.c -- what the weight plugin does on its own.
 *
 * The object guard that keeps the generic store lifecycle away from managed
 * weight groups, and the reconcile tick the host calls on the active master.
 * Today the tick ends expired leases (a bounded number per round, each with a
 * durable type-11 record); executing the MIGRATING and DELETING operations
 * the management RPCs create, and AUTO demotion, belong here too and are the
 * lifecycle part of issue 5 (see the store API note in
 * weight_metadata_store.c). */
#include <inttypes.h>
#include <string.h>

#include "wm_plugin.h"

/* The guard. A managed group is a revision's lifecycle boundary:
 *  - a put or overwrite into it is allowed only while its revision is
 *    IMPORTING, no commit of it is in flight, and the key is the manifest or
 *    a payload key of that revision;
 *  - the revocation of a put that never finished (stale-put cleanup) is
 *    allowed while the revision is IMPORTING or DELETING, refused otherwise;
 *  - every other generic action on a member (eviction, quota eviction,
 *    removal by key, prefix or all, cold-replica eviction) is refused: the
 *    plugin removes members itself with remove_object, which bypasses the
 *    guard.
 * Objects outside managed groups are not the plugin's business. Refusals are
 * counted per reason (published by wm_metrics_refresh; the guard must not
 * call the host). */
int wm_guard_check(wm_plugin *p, const smp_guard_request *req)
{
    if (req == NULL) return SMP_GUARD_VETO;
    if (!req->group_managed) return SMP_GUARD_ALLOW;
    unsigned reason = (unsigned)req->reason;
    const wm_revision *rev = req->group ? wm_store_get_group(p->store, req->group) : NULL;
    /* An upload that never finished is not a member: while the import is
     * open (or being aborted) its revocation frees space and removes nothing
     * of the revision. Once READY it stays refused, as the generic cleanup
     * must not touch a published group. */
    if (reason == SMP_GUARD_STALE_PUT_CLEANUP && rev != NULL &&
        (rev->availability == WM_AVAIL_IMPORTING || rev->availability == WM_AVAIL_DELETING))
        return SMP_GUARD_ALLOW;
    if (reason == SMP_GUARD_PUT_INTO_GROUP || reason == SMP_GUARD_UPSERT_INTO_GROUP) {
        wm_identity kid;
        wm_key_kind kind;
        if (rev != NULL && rev->availability == WM_AVAIL_IMPORTING &&
            !wm_pending_metadata(p, rev->group_key) && req->key != NULL &&
            wm_key_parse(req->key, &kid, &kind, NULL) == WM_OK && kind != WM_KEY_GROUP &&
            wm_identity_cmp(&kid, &rev->id) == 0)
            return SMP_GUARD_ALLOW;
    }
    if (reason <= SMP_GUARD_REASON_MAX) p->guard_skips[reason]++;
    return SMP_GUARD_VETO;
}

int wm_revision_fenced(const wm_plugin *p, const wm_revision *rev)
{
    /* Generation replacement (its own issue) retires a base here. */
    (void)p;
    (void)rev;
    return 0;
}

/* End expired leases, at most min(budget, WM_LEASE_SWEEP_MAX) per round, in
 * lease-id order from *cursor (the next id to look at). */
static int wm_sweep_leases(wm_plugin *p, const smp_tick_budget *budget, uint64_t *cursor)
{
    uint64_t now = p->api->wall_ms(p->host);
    uint64_t max = budget && budget->max_members ? budget->max_members : WM_LEASE_SWEEP_MAX;
    if (max > WM_LEASE_SWEEP_MAX) max = WM_LEASE_SWEEP_MAX;
    size_t i = wm_store_lease_lower_bound(p->store, *cursor);
    uint64_t done = 0;
    for (; i < wm_store_lease_count(p->store) && done < max; i++) {
        const wm_lease *l = wm_store_lease_at(p->store, i);
        *cursor = l->id + 1;
        if (l->expiry_ms > now || wm_pending_lease_end(p, l->id)) continue;
        wm_lease copy = *l;
        int rc = wm_submit_lease_end(p, &copy, WM_LEASE_EXPIRED);
        if (rc < 0) {
            p->api->log(p->host, SMP_LOG_WARN, "lease %" PRIu64 " expired but its end record "
                        "could not be appended: %s", copy.id, smp_strerror(rc));
            return SMP_TICK_DONE; /* next period */
        }
        done++;
    }
    if (i < wm_store_lease_count(p->store)) return SMP_TICK_MORE;
    *cursor = 0;
    return SMP_TICK_DONE;
}

int wm_lifecycle_tick(wm_plugin *p, const smp_tick_budget *budget, uint64_t *cursor)
{
    int r = wm_sweep_leases(p, budget, cursor);
    wm_metrics_refresh(p);
    return r;
}
