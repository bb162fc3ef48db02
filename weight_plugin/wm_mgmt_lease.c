/* wm_mgmt_lease.c -- revision leases (RPCs LEASE_ACQUIRE, LEASE_RENEW,
 * LEASE_RELEASE) and volatile leases.
 *
 * A lease protects a READY revision from deletion and its readable replicas
 * from release until it expires. A grant on an AUTO revision that is not
 * HOT first makes a promotion durable (unless its migration cooldown still
 * runs: wm_in_cooldown); renewals extend a live lease; a
 * release of a lease already gone succeeds. The tick (weight_lifecycle.c)
 * ends expired leases. Every grant, renewal and release is an access of the
 * revision for AUTO's least-recently-used order: a grant's record carries
 * it; the others are noted in memory and persisted lazily (wm_access.c).
 *
 * Volatile leases keep reads going during an HA upgrade: while the gate of
 * the lease records is closed (oplog_append answers SMP_EGATE), a grant is
 * held in the leader's memory only -- not logged, not in the snapshot -- and
 * a promotion is skipped. Nothing a lease protects can happen meanwhile:
 * deletion and the plugin's state changes need type-8 records the same gate
 * refuses, and the lifecycle's own release and removal checks count a
 * volatile lease as a pending grant (wm_pending_lease_grants). Renewal and
 * release work on them in memory. A failover drops them (the new leader
 * never saw them), which is safe for the same reason. Once the gate is open
 * the tick makes each live one durable under its id. */
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
/* Leases                                                                    */
/* ------------------------------------------------------------------------ */

static int wm_ttl(const Wmrpc__LeaseRequest *req, uint64_t *out, char *msg, size_t cap)
{
    uint64_t ttl = req->ttl_ms ? req->ttl_ms : WM_LEASE_TTL_DEFAULT_MS;
    if (ttl > WM_LEASE_TTL_MAX_MS) {
        snprintf(msg, cap, "ttl_ms %" PRIu64 " is above the maximum %d", ttl, WM_LEASE_TTL_MAX_MS);
        return WM_EINVALID_ARGUMENT;
    }
    *out = ttl;
    return WM_OK;
}

/* -- volatile leases --------------------------------------------------------- */

static wm_vlease *wm_vlease_find(wm_plugin *p, uint64_t lease_id)
{
    for (size_t i = 0; i < p->n_vleases; i++)
        if (p->vleases[i].lease.id == lease_id) return &p->vleases[i];
    return NULL;
}

static void wm_vlease_drop(wm_plugin *p, wm_vlease *v)
{
    size_t i = (size_t)(v - p->vleases);
    free(v->strs);
    memmove(v, v + 1, (p->n_vleases - i - 1) * sizeof(*v));
    p->n_vleases--;
}

int wm_vleases_on(const wm_plugin *p, const char *group_key)
{
    for (size_t i = 0; i < p->n_vleases; i++)
        if (strcmp(p->vleases[i].group_key, group_key) == 0) return 1;
    return 0;
}

int wm_vlease_add(wm_plugin *p, const wm_lease *l, const char *group_key)
{
    if (p->n_vleases == p->cap_vleases) {
        size_t cap = p->cap_vleases ? p->cap_vleases * 2 : 16;
        wm_vlease *v = realloc(p->vleases, cap * sizeof(*v));
        if (v == NULL) return SMP_ENOMEM;
        p->vleases = v;
        p->cap_vleases = cap;
    }
    char *strs = malloc(wm_identity_packed_len(&l->id_of));
    if (strs == NULL) return SMP_ENOMEM;
    wm_vlease *v = &p->vleases[p->n_vleases++];
    v->lease = *l;
    v->strs = strs;
    wm_identity_pack(&l->id_of, strs, &v->lease.id_of);
    snprintf(v->group_key, sizeof(v->group_key), "%s", group_key);
    return SMP_OK;
}

/* Hold lease l on rev in memory and answer call with it (the gate refused
 * its record). Answers SMP_ENOMEM when the table cannot grow. */
static void wm_vlease_grant(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev,
                            const wm_lease *l)
{
    if (wm_vlease_add(p, l, rev->group_key) < 0) {
        wm_reply_error(p, call, SMP_ENOMEM, "out of memory");
        return;
    }
    wm_access_note(p, &rev->id, l->granted_ms); /* no record carries it yet */
    if (p->vleases_granted++ == 0)
        p->api->log(p->host, SMP_LOG_INFO,
                    "lease %" PRIu64 " on %s held in memory only: the gate of the lease records "
                    "is closed (an upgrade in progress); leases stay volatile until it opens",
                    l->id, rev->group_key);
    wm_reply_lease(p, call, l, rev);
}

void wm_vleases_tick(wm_plugin *p)
{
    uint64_t now = p->api->wall_ms(p->host);
    for (size_t i = 0; i < p->n_vleases;) {
        if (p->vleases[i].lease.expiry_ms > now) {
            i++;
            continue;
        }
        p->leases_expired++;
        wm_vlease_drop(p, &p->vleases[i]);
    }
    while (p->n_vleases > 0) {
        wm_vlease *v = &p->vleases[0];
        wm_txn *t = wm_txn_new(p, WM_TXN_LEASE_UPSERT, v->group_key);
        if (t == NULL) return;
        t->lease = v->lease;
        int rc = wm_txn_submit_quiet(p, t);
        if (rc == SMP_EGATE || rc == SMP_ENOTLEADER) return; /* still closed: keep them all */
        if (rc < 0)
            p->api->log(p->host, SMP_LOG_WARN,
                        "volatile lease %" PRIu64 " on %s could not be made durable (%s); "
                        "it ends now", v->lease.id, v->group_key, smp_strerror(rc));
        wm_vlease_drop(p, v); /* durable from now (its pending grant protects), or ended */
    }
}

void wm_vleases_free(wm_plugin *p)
{
    for (size_t i = 0; i < p->n_vleases; i++) free(p->vleases[i].strs);
    free(p->vleases);
    p->vleases = NULL;
    p->n_vleases = p->cap_vleases = 0;
}

/* -- RPCs --------------------------------------------------------------------- */

/* 1 while rev's migration cooldown (weight_migration_cooldown_ms, counted
 * from its last update: a demotion's end, say) runs at wall clock now. An
 * access then promotes nothing: a revision demoted under memory pressure
 * and read right after went straight back HOT, freeing nothing (trial). */
static int wm_in_cooldown(wm_plugin *p, const wm_revision *rev, uint64_t now)
{
    uint64_t cooldown = wm_migration_cooldown_ms(p);
    return rev->updated_ms + cooldown > now;
}

/* Grant a lease on a READY revision, fenced on its metadata generation. For
 * an AUTO revision observed COLD or MIXED without an active operation, whose
 * cooldown is over (wm_in_cooldown), the
 * promotion (MIGRATING toward the preferred residency) and the lease are one
 * type-8 record, the lease fenced on the generation the promotion makes;
 * otherwise the grant is a type-10 record alone and the revision keeps its
 * metadata generation (the store moves its last access). The answer follows
 * the durable record. When the gate refuses the record (SMP_EGATE) the
 * lease is granted volatile, at the revision's generation, without the
 * promotion. */
int wm_rpc_lease_acquire(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    wm_identity_buf idb;
    uint64_t ttl;
    WM_DECODE(req, Wmrpc__LeaseRequest, wmrpc__lease_request__unpack, p, call, body, len);
    const wm_revision *rev = wm_lookup(p, call, req->identity, &idb);
    if (rev == NULL) goto free_req;
    if (wm_ttl(req, &ttl, msg, sizeof(msg)) < 0) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "%s", msg);
        goto free_req;
    }
    if (rev->availability != WM_AVAIL_READY) {
        wm_reply_error(p, call, WM_ENOT_READY, "revision %s is %s; leases are granted on READY only",
                       rev->group_key, wm_availability_name((int)rev->availability));
        goto free_req;
    }
    if (wm_revision_fenced(p, rev)) {
        wm_reply_error(p, call, WM_ENOT_READY, "revision %s is retired by a replacement",
                       rev->group_key);
        goto free_req;
    }
    if (!wm_check_idle(p, call, rev)) goto free_req;

    uint64_t now = wm_now(p, NULL);
    wm_txn *lt = wm_txn_new(p, WM_TXN_LEASE_UPSERT, rev->group_key);
    if (lt == NULL) {
        wm_reply_error(p, call, SMP_ENOMEM, "out of memory");
        goto free_req;
    }
    lt->lease.id = wm_store_reserve_lease_id(p->store);
    lt->lease.id_of = rev->id;
    lt->lease.granted_ms = now;
    lt->lease.expiry_ms = now + ttl;
    lt->lease.metadata_generation = rev->metadata_generation;

    wm_residency promote = WM_RES_UNKNOWN;
    if (rev->policy.mode == WM_MODE_AUTO && rev->operation_id == 0 &&
        (rev->residency == WM_RES_COLD || rev->residency == WM_RES_MIXED) &&
        !wm_in_cooldown(p, rev, now))
        promote = wm_auto_promotion_target(rev->residency, rev->policy.preferred);
    wm_lease granted = lt->lease;
    int rc;
    if (promote == WM_RES_UNKNOWN) {
        rc = wm_submit_try(p, lt, call, WM_REPLY_LEASE);
        if (rc == SMP_EGATE) wm_vlease_grant(p, call, rev, &granted);
        else if (rc < 0) wm_reply_append_error(p, call, rc, "lease acquire");
        goto free_req;
    }
    wm_txn *t = wm_txn_next(p, call, rev);
    if (t == NULL) {
        wm_txn_free(lt);
        goto free_req;
    }
    wm_revision *r = &t->up.revision;
    r->last_access_ms = r->updated_ms > rev->last_access_ms ? r->updated_ms : rev->last_access_ms;
    wm_txn_migrating(p, t, promote, rev->policy.mixed_hot_ratio);
    if (!wm_mutation_ok(p, call, rev, t, "promotion", msg, sizeof(msg))) {
        wm_txn_free(lt);
        goto free_req;
    }
    /* One record: the promotion and the lease it is made for, fenced on
     * the generation the promotion makes. */
    t->up.has_lease = 1;
    t->up.lease = lt->lease;
    t->up.lease.metadata_generation = r->metadata_generation;
    wm_txn_free(lt);
    rc = wm_submit_try(p, t, call, WM_REPLY_LEASE);
    if (rc == SMP_EGATE) wm_vlease_grant(p, call, rev, &granted);
    else if (rc < 0) wm_reply_append_error(p, call, rc, "lease acquire (promotion)");
    else p->auto_triggers[WM_AUTO_PROMOTE_ON_ACCESS]++;
free_req:
    wmrpc__lease_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* Extend a live lease of the named revision (new expiry: now + ttl).
 * LEASE_EXPIRED when the lease is unknown, expired (even if not swept yet),
 * ending, of another revision, granted at another metadata generation than
 * the one the request names (when it names one), or when its revision is
 * retired by a replacement (wm_revision_fenced, a fence record in flight
 * included), no longer READY or DEGRADED, or below the lease's generation.
 * The renewal keeps the lease's generation (its fence). Durable before the
 * answer -- except a volatile lease's, which is extended in memory (the
 * tick makes it durable once the gate opens). */
int wm_rpc_lease_renew(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    wm_identity_buf idb;
    uint64_t ttl;
    WM_DECODE(req, Wmrpc__LeaseRequest, wmrpc__lease_request__unpack, p, call, body, len);
    if (!wm_identity_in(p, call, req->identity, &idb)) goto free_req;
    if (wm_ttl(req, &ttl, msg, sizeof(msg)) < 0) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "%s", msg);
        goto free_req;
    }
    uint64_t now = wm_now(p, NULL);
    const wm_lease *l = wm_store_lease(p->store, req->lease_id);
    wm_vlease *v = l == NULL ? wm_vlease_find(p, req->lease_id) : NULL;
    if (v != NULL) l = &v->lease;
    if (l == NULL || wm_identity_cmp(&l->id_of, &idb.id) != 0 || l->expiry_ms <= now ||
        wm_pending_lease_end(p, l->id)) {
        wm_reply_error(p, call, WM_ELEASE_EXPIRED, "lease %" PRIu64 " is expired or unknown",
                       req->lease_id);
        goto free_req;
    }
    if (req->metadata_generation != 0 && req->metadata_generation != l->metadata_generation) {
        wm_reply_error(p, call, WM_ELEASE_EXPIRED,
                       "lease %" PRIu64 " was granted at metadata generation %" PRIu64
                       ", not %" PRIu64 "; it is not the lease the caller holds",
                       req->lease_id, l->metadata_generation, req->metadata_generation);
        goto free_req;
    }
    const wm_revision *rev = wm_store_get(p->store, &idb.id);
    if (rev == NULL || wm_revision_fenced(p, rev)) {
        wm_reply_error(p, call, WM_ELEASE_EXPIRED,
                       "lease %" PRIu64 " cannot be renewed: the revision is retired",
                       req->lease_id);
        goto free_req;
    }
    /* The lease is fenced on the revision it was granted on: still readable
     * and not below the lease's generation (a record that left the table
     * took its leases along, so a later incarnation never inherits one). */
    if ((rev->availability != WM_AVAIL_READY && rev->availability != WM_AVAIL_DEGRADED) ||
        rev->metadata_generation < l->metadata_generation) {
        wm_reply_error(p, call, WM_ELEASE_EXPIRED,
                       "lease %" PRIu64 " cannot be renewed: %s is %s at metadata generation "
                       "%" PRIu64 ", not the revision it was granted on at generation %" PRIu64,
                       req->lease_id, rev->group_key, wm_availability_name((int)rev->availability),
                       rev->metadata_generation, l->metadata_generation);
        goto free_req;
    }
    wm_access_note(p, &idb.id, now); /* a renewal is an access: persisted by the tick */
    rev = wm_store_get(p->store, &idb.id);
    if (v != NULL) {
        v->lease.expiry_ms = now + ttl;
        wm_reply_lease(p, call, &v->lease, rev);
        goto free_req;
    }
    wm_txn *t = wm_txn_new(p, WM_TXN_LEASE_UPSERT, rev->group_key);
    if (t == NULL) {
        wm_reply_error(p, call, SMP_ENOMEM, "out of memory");
        goto free_req;
    }
    t->lease = *l;
    t->lease.expiry_ms = now + ttl;
    wm_submit(p, t, call, WM_REPLY_LEASE, "lease renew");
free_req:
    wmrpc__lease_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* Release a lease. Releasing one that is already gone (released, expired)
 * succeeds with an empty response: the caller's goal holds. A volatile
 * lease is dropped from memory. */
int wm_rpc_lease_release(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    wm_identity_buf idb;
    WM_DECODE(req, Wmrpc__LeaseRequest, wmrpc__lease_request__unpack, p, call, body, len);
    if (!wm_identity_in(p, call, req->identity, &idb)) goto free_req;
    const wm_lease *l = wm_store_lease(p->store, req->lease_id);
    wm_vlease *v = l == NULL ? wm_vlease_find(p, req->lease_id) : NULL;
    if (v != NULL) {
        if (wm_identity_cmp(&v->lease.id_of, &idb.id) != 0) {
            wm_reply_error(p, call, WM_EINVALID_ARGUMENT,
                           "lease %" PRIu64 " belongs to another revision", req->lease_id);
            goto free_req;
        }
        wm_vlease_drop(p, v);
        wm_access_note(p, &idb.id, wm_now(p, NULL)); /* the end of a read is an access */
        wm_reply_lease(p, call, NULL, wm_store_get(p->store, &idb.id));
        wm_lineage_kick(p); /* a draining base may have lost its last lease */
        goto free_req;
    }
    if (l == NULL || wm_pending_lease_end(p, l->id)) {
        wm_reply_lease(p, call, NULL, wm_store_get(p->store, &idb.id));
        goto free_req;
    }
    if (wm_identity_cmp(&l->id_of, &idb.id) != 0) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "lease %" PRIu64 " belongs to another revision",
                       req->lease_id);
        goto free_req;
    }
    wm_access_note(p, &idb.id, wm_now(p, NULL)); /* the end of a read is an access */
    const wm_revision *rev = wm_store_get(p->store, &idb.id);
    wm_txn *t = wm_txn_new(p, WM_TXN_LEASE_DELETE, rev ? rev->group_key : "");
    if (t == NULL) {
        wm_reply_error(p, call, SMP_ENOMEM, "out of memory");
        goto free_req;
    }
    t->lease_end_id = l->id;
    t->lease_end.lease_id = l->id;
    t->lease_end.id_of = l->id_of;
    t->lease_end.reason = WM_LEASE_RELEASED;
    wm_submit(p, t, call, WM_REPLY_LEASE, "lease release");
free_req:
    wmrpc__lease_request__free_unpacked(req, NULL);
    return SMP_OK;
}
