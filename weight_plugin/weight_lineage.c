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
 * no-op; anything else out of order is refused (replay fails closed). That
 * part (wm_lineage_claim_step) is pure.
 *
 * The second half is the plugin's side of weight_upsert on the active
 * master: UPSERT_BEGIN / UPSERT_STATUS, the fence that retires a base (no
 * new leases or renewals), the gate that holds a DELETE_FIRST target import
 * until the base is gone, and the driver the reconcile tick runs to walk
 * each open claim through its mode's phases (see the table below). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weight_lineage.h"
#include "weight_rpc.pb-c.h"
#include "wm_plugin.h"

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
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "lineage claim is missing");
    if (wm_claim_check(c, why, sizeof(why)) < 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "%s", why);
    if (!wm_identity_in_lineage(&c->base, &e->lineage))
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "claim %s names another lineage than its entry", c->request_id);
    if (c->committed_watermark < e->committed_watermark)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "claim %s would lower the lineage watermark from %" PRIu64
                       " to %" PRIu64,
                       c->request_id, e->committed_watermark, c->committed_watermark);
    if (c->phase != WM_PHASE_COMMITTED && c->committed_watermark != e->committed_watermark)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "claim %s in phase %s carries watermark %" PRIu64
                       " but the lineage's is %" PRIu64,
                       c->request_id, wm_phase_name((int)c->phase), c->committed_watermark,
                       e->committed_watermark);

    if (e->has_claim && strcmp(e->claim.request_id, c->request_id) == 0) {
        const wm_lineage_claim *cur = &e->claim;
        if (!wm_claim_same_args(cur, c))
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "claim %s is recorded with other arguments", c->request_id);
        if (cur->phase == c->phase) {
            if (c->phase == WM_PHASE_COMMITTED && cur->committed_watermark != c->committed_watermark)
                return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                               "claim %s committed twice with different watermarks",
                               c->request_id);
            return WM_OK; /* duplicate: the entry already holds this state */
        }
        if (!wm_claim_phase_next_ok((int)c->mode, (int)cur->phase, (int)c->phase))
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "claim %s cannot move from %s to %s under %s (out of order)",
                           c->request_id, wm_phase_name((int)cur->phase),
                           wm_phase_name((int)c->phase), wm_upsert_mode_name((int)c->mode));
        if (c->updated_ms < cur->updated_ms)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "claim %s moves its update time backwards", c->request_id);
    } else {
        if (e->has_claim && !wm_claim_terminal(&e->claim))
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "lineage already has the open claim %s (%s); claim %s would be a "
                           "second successor",
                           e->claim.request_id, wm_phase_name((int)e->claim.phase),
                           c->request_id);
        if (c->phase != WM_PHASE_CLAIMED)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "claim %s is unknown and does not start at CLAIMED (%s)",
                           c->request_id, wm_phase_name((int)c->phase));
        if (c->target.weight_generation <= e->committed_watermark)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
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

/* ======================================================================== */
/* The plugin's side: RPCs, fence, import gate and the claim driver          */
/* ======================================================================== */
/*
 * PUT_FIRST   CLAIMED -(target exists)-> IMPORTING_TARGET -(target READY)->
 *             BASE_FENCED -> DRAINING_BASE -(no base lease, op or write in
 *             flight)-> DELETING_BASE -(base DELETING, then DELETED)->
 *             COMMITTED (watermark = target generation).
 *             IMPORTING_TARGET -(target aborted: DELETING, DELETED or
 *             gone)-> ABORTED; CLAIMED -(no target within import_ttl_ms)->
 *             ABORTED; the base was never touched.
 * DELETE_FIRST CLAIMED (the base is fenced from here on) -(base idle)->
 *             DELETING_BASE -(base DELETED)-> BASE_DELETED -(target
 *             exists)-> IMPORTING_TARGET -(target READY)-> COMMITTED.
 * Every step is one durable claim record, appended only when the previous
 * one is applied, and the base's deletion is an ordinary DELETING operation
 * the lifecycle runs. After a restart the driver re-derives the next step
 * from the persisted phase and the revisions' states, so each step is
 * resumed, never repeated with another successor. */


/* One claim record between append and durability. */
typedef struct wm_lin_rec {
    wm_plugin *p;
    wm_lineage_claim claim;       /* base and target point into the bufs below */
    wm_identity_buf base_ids;
    wm_identity_buf target_ids;
    smp_rpc_call *call;           /* UPSERT_BEGIN waiting for it, or NULL */
    struct wm_lin_rec *next;
} wm_lin_rec;

#define WM_MODES 3  /* indexed by wm_upsert_mode */
#define WM_PHASES 9 /* indexed by wm_claim_phase */

struct wm_lin {
    wm_lin_rec *pending;
    int recovered_counted;        /* open claims found at start were counted */
    uint64_t claims[WM_MODES];
    uint64_t failures[WM_MODES][WM_PHASES];
    uint64_t recoveries[WM_MODES][WM_PHASES];
    smp_metric *m_claims;         /* counter {mode} */
    smp_metric *m_failures;       /* counter {mode, phase} */
    smp_metric *m_recoveries;     /* counter {mode, phase} */
    smp_metric *m_open;           /* gauge {mode, phase} */
    smp_metric *m_unavailable;    /* gauge: DELETE_FIRST lineages with no readable revision */
};

static void wm_lin_count_recovered(wm_plugin *p);

static int wm_lin_pending(const wm_plugin *p, const wm_lineage *lin)
{
    if (p->lin == NULL) return 0;
    for (const wm_lin_rec *r = p->lin->pending; r != NULL; r = r->next)
        if (wm_identity_in_lineage(&r->claim.base, lin)) return 1;
    return 0;
}

static void wm_lin_pending_remove(wm_plugin *p, wm_lin_rec *rec)
{
    for (wm_lin_rec **pp = &p->lin->pending; *pp != NULL; pp = &(*pp)->next)
        if (*pp == rec) {
            *pp = rec->next;
            return;
        }
}

static const wm_lineage_entry *wm_lin_entry(const wm_plugin *p, const wm_identity *id)
{
    wm_lineage lin;
    wm_identity_lineage(id, &lin);
    return wm_store_lineage(p->store, &lin);
}

static const wm_lineage_claim *wm_lin_open_claim(const wm_plugin *p, const wm_identity *id)
{
    const wm_lineage_entry *e = wm_lin_entry(p, id);
    if (e == NULL || !e->has_claim || wm_claim_terminal(&e->claim)) return NULL;
    return &e->claim;
}

int wm_revision_fenced(const wm_plugin *p, const wm_revision *rev)
{
    /* A DELETE_FIRST claim fences its base from the moment its record is
     * appended: no lease may slip in before it is durable. */
    for (const wm_lin_rec *r = p->lin ? p->lin->pending : NULL; r != NULL; r = r->next) {
        if (wm_identity_cmp(&r->claim.base, &rev->id) != 0) continue;
        if (r->claim.mode == WM_UPSERT_DELETE_FIRST) return 1;
        /* So does the PUT_FIRST record that retires it: a lease granted or
         * renewed meanwhile would outlive the fence. */
        if (r->claim.phase == WM_PHASE_BASE_FENCED || r->claim.phase == WM_PHASE_DRAINING_BASE ||
            r->claim.phase == WM_PHASE_DELETING_BASE)
            return 1;
    }
    const wm_lineage_claim *c = wm_lin_open_claim(p, &rev->id);
    if (c == NULL || wm_identity_cmp(&c->base, &rev->id) != 0) return 0;
    if (c->mode == WM_UPSERT_DELETE_FIRST) return 1;
    return c->phase == WM_PHASE_BASE_FENCED || c->phase == WM_PHASE_DRAINING_BASE ||
           c->phase == WM_PHASE_DELETING_BASE;
}

int wm_lineage_import_check(const wm_plugin *p, const wm_identity *id, char *msg, size_t cap)
{
    const wm_lineage_claim *c = wm_lin_open_claim(p, id);
    if (c == NULL) {
        /* The committed watermark never goes down, so nothing at or below
         * it may be published again, with or without a claim. */
        const wm_lineage_entry *e = wm_lin_entry(p, id);
        if (e != NULL && id->weight_generation <= e->committed_watermark)
            return wm_fail(WM_ESTALE_GENERATION, msg, cap,
                           "lineage %s/%s/%s/%s committed generation %" PRIu64
                           " (its watermark); generation %" PRIu64
                           " is not above it and cannot be imported",
                           id->tenant_id, id->ns, id->resource_id, id->revision,
                           e->committed_watermark, id->weight_generation);
        return WM_OK;
    }
    if (wm_identity_cmp(&c->target, id) != 0)
        return wm_fail(WM_ECONFLICT, msg, cap,
                       "lineage %s/%s/%s/%s has the open replacement claim %s (target "
                       "generation %" PRIu64 "); no other generation may be imported",
                       id->tenant_id, id->ns, id->resource_id, id->revision, c->request_id,
                       c->target.weight_generation);
    if (c->mode == WM_UPSERT_DELETE_FIRST && c->phase != WM_PHASE_BASE_DELETED &&
        c->phase != WM_PHASE_IMPORTING_TARGET)
        return wm_fail(WM_EBUSY, msg, cap,
                       "claim %s is DELETE_FIRST and in phase %s: the target may be "
                       "imported only once the base is deleted",
                       c->request_id, wm_phase_name((int)c->phase));
    return WM_OK;
}

int wm_lineage_target_open(const wm_plugin *p, const wm_identity *id)
{
    const wm_lineage_claim *c = wm_lin_open_claim(p, id);
    return c != NULL && wm_identity_cmp(&c->target, id) == 0;
}

const wm_policy *wm_lineage_base_policy(const wm_plugin *p, const wm_identity *id)
{
    const wm_lineage_claim *c = wm_lin_open_claim(p, id);
    if (c == NULL || wm_identity_cmp(&c->target, id) != 0) return NULL;
    const wm_revision *base = wm_store_get(p->store, &c->base);
    return base != NULL ? &base->policy : NULL;
}

int wm_lineage_abort_check(const wm_plugin *p, const wm_identity *id, char *msg, size_t cap)
{
    const wm_lineage_claim *c = wm_lin_open_claim(p, id);
    if (c == NULL || c->mode != WM_UPSERT_DELETE_FIRST || wm_identity_cmp(&c->target, id) != 0 ||
        (c->phase != WM_PHASE_BASE_DELETED && c->phase != WM_PHASE_IMPORTING_TARGET))
        return WM_OK;
    return wm_fail(WM_ECONFLICT, msg, cap,
                   "the base of DELETE_FIRST claim %s is already deleted; its target import "
                   "cannot be rolled back and is resumed by the same request",
                   c->request_id);
}

/* -- replies --------------------------------------------------------------- */

static void wm_lin_pb_identity(Wmrpc__WeightIdentity *m, const wm_identity *id)
{
    wmrpc__weight_identity__init(m);
    m->tenant = (char *)id->tenant_id;
    m->namespace_id = (char *)id->ns;
    m->resource_id = (char *)id->resource_id;
    m->revision = (char *)id->revision;
    m->generation = id->weight_generation;
}

/* Answer an UpsertResponse for entry e (NULL: no claim, watermark 0). */
static int wm_lin_reply(wm_plugin *p, smp_rpc_call *call, const wm_lineage_entry *e)
{
    Wmrpc__UpsertResponse resp;
    Wmrpc__UpsertClaim cm;
    Wmrpc__WeightIdentity base, target;
    wmrpc__upsert_response__init(&resp);
    if (e != NULL) {
        resp.committed_watermark = e->committed_watermark;
        if (e->has_claim) {
            const wm_lineage_claim *c = &e->claim;
            wmrpc__upsert_claim__init(&cm);
            wm_lin_pb_identity(&base, &c->base);
            wm_lin_pb_identity(&target, &c->target);
            cm.request_id = (char *)c->request_id;
            cm.base_identity = &base;
            cm.target_identity = &target;
            cm.mode = (uint32_t)c->mode;
            cm.phase = (uint32_t)c->phase;
            cm.expected_metadata_generation = c->expected_metadata_generation;
            cm.committed_watermark = e->committed_watermark;
            cm.error = (char *)c->error;
            cm.created_ms = c->created_ms;
            cm.updated_ms = c->updated_ms;
            resp.claim = &cm;
        }
    }
    size_t n = wmrpc__upsert_response__get_packed_size(&resp);
    uint8_t *buf = malloc(n > 0 ? n : 1);
    if (buf == NULL) return wm_reply_error(p, call, SMP_ENOMEM, "out of memory packing the reply");
    wmrpc__upsert_response__pack(&resp, buf);
    p->api->rpc_reply(call, SMP_OK, buf, n);
    free(buf);
    return SMP_OK;
}

/* -- appending claim records ----------------------------------------------- */

static void wm_lin_durable(void *arg, int status, uint64_t seq)
{
    wm_lin_rec *rec = arg;
    wm_plugin *p = rec->p;
    wm_lin *L = p->lin;
    const wm_lineage_claim *c = &rec->claim;
    char why[512] = "";
    (void)seq;
    wm_lin_pending_remove(p, rec);
    if (status < 0) {
        L->failures[c->mode][c->phase]++;
        p->api->log(p->host, SMP_LOG_ERROR,
                    "replacement claim %s (%s) did not become durable: %s", c->request_id,
                    wm_phase_name((int)c->phase), smp_strerror(status));
        if (rec->call != NULL)
            wm_reply_error(p, rec->call, WM_EDURABILITY_FAILED,
                           "the OpLog could not make claim %s durable (%s); nothing changed",
                           c->request_id, smp_strerror(status));
        goto free_rec;
    }
    int rc = wm_store_apply_claim(p->store, c, why, sizeof(why));
    if (rc < 0) {
        /* Records are checked against the table before the append: a bug. */
        L->failures[c->mode][c->phase]++;
        p->api->log(p->host, SMP_LOG_ERROR, "durable replacement claim %s does not apply: %s",
                    c->request_id, why);
        if (rec->call != NULL)
            wm_reply_error(p, rec->call, SMP_ESTATE, "durable claim %s does not apply: %s",
                           c->request_id, why);
        goto free_rec;
    }
    if (c->phase == WM_PHASE_CLAIMED) L->claims[c->mode]++;
    p->api->log(p->host, SMP_LOG_INFO,
                "replacement claim %s (%s, %s/%s/%s/%s@%" PRIu64 " -> @%" PRIu64 "): %s%s%s",
                c->request_id, wm_upsert_mode_name((int)c->mode), c->base.tenant_id, c->base.ns,
                c->base.resource_id, c->base.revision, c->base.weight_generation,
                c->target.weight_generation, wm_phase_name((int)c->phase), c->error[0] ? ": " : "",
                c->error);
    if (rec->call != NULL) wm_lin_reply(p, rec->call, wm_lin_entry(p, &c->base));
    rec->call = NULL;
    wm_lineage_metrics(p);
    wm_lineage_kick(p); /* its next phase may be due now */
free_rec:
    free(rec);
}

/* Check c against its lineage's entry (the rules replay applies) and append
 * it. On success the record is in flight and the lineage busy until its
 * callback; on failure nothing is in flight and the sentence is in msg. */
static int wm_lin_append(wm_plugin *p, const wm_lineage_claim *c, smp_rpc_call *call, char *msg,
                         size_t cap)
{
    int rc;
    uint8_t *buf = NULL;
    size_t len = 0;
    wm_lineage_entry e;
    const wm_lineage_entry *cur = wm_lin_entry(p, &c->base);
    if (cur != NULL) {
        e = *cur;
    } else {
        memset(&e, 0, sizeof(e));
        wm_identity_lineage(&c->base, &e.lineage);
    }
    if ((rc = wm_lineage_claim_step(&e, c, msg, cap)) < 0) return rc;
    if ((rc = wm_encode_lineage_claim(c, &buf, &len, msg, cap)) < 0) return rc;
    wm_lin_rec *rec = calloc(1, sizeof(*rec));
    if (rec == NULL) {
        free(buf);
        return SMP_ENOMEM;
    }
    rec->p = p;
    rec->claim = *c;
    wm_identity_buf_set(&rec->base_ids, &c->base);
    wm_identity_buf_set(&rec->target_ids, &c->target);
    rec->claim.base = rec->base_ids.id;
    rec->claim.target = rec->target_ids.id;
    rec->call = call;
    rec->next = p->lin->pending;
    p->lin->pending = rec;
    rc = p->api->oplog_append(p->host, WM_OP_LINEAGE_CLAIM, WM_RECORD_ENCVER, buf, len,
                              wm_lin_durable, rec);
    free(buf);
    if (rc < 0) {
        wm_lin_pending_remove(p, rec);
        free(rec);
        if (rc == SMP_EGATE)
            snprintf(msg, cap,
                     "weight_upsert refused: %s is not confirmed; lineage claims (OpLog type 12) "
                     "fail closed in HA mode until every standby replays them and the flag is "
                     "set (every other weight call keeps working)",
                     WM_GATE_LINEAGE);
        else if (rc == SMP_ENOTLEADER)
            snprintf(msg, cap, "weight_upsert refused: this master is a standby");
        else
            snprintf(msg, cap, "the OpLog append of claim %s failed (%s)", c->request_id,
                     smp_strerror(rc));
    }
    return rc;
}

/* -- UPSERT_BEGIN / UPSERT_STATUS ------------------------------------------ */

/* The leases on rev (its volatile ones, with no end known, count as one) and
 * when the last durable one ends, on the wall clock (0: none known). */
static size_t wm_lin_base_leases(const wm_plugin *p, const wm_revision *rev, uint64_t *last_end)
{
    size_t n = 0;
    *last_end = 0;
    for (size_t i = 0; i < wm_store_lease_count(p->store); i++) {
        const wm_lease *l = wm_store_lease_at(p->store, i);
        if (wm_identity_cmp(&l->id_of, &rev->id) != 0) continue;
        n++;
        if (l->expiry_ms > *last_end) *last_end = l->expiry_ms;
    }
    return n + (size_t)wm_vleases_on(p, rev->group_key);
}

void wm_claim_waits_for(wm_plugin *p, const wm_lineage_claim *c, char *out, size_t cap)
{
    const wm_revision *base = wm_store_get(p->store, &c->base);
    uint64_t now = p->api->wall_ms(p->host), ttl = wm_import_ttl_ms(p), last_end = 0;
    switch (c->phase) {
    case WM_PHASE_CLAIMED:
        if (c->mode == WM_UPSERT_PUT_FIRST) {
            uint64_t left = c->updated_ms + ttl > now ? c->updated_ms + ttl - now : 0;
            snprintf(out, cap, "it waits for its target's import to begin, %" PRIu64 " s more "
                     "at most (import_ttl_ms); `weightctl upsert abort` ends it now, the base "
                     "intact", left / 1000);
        } else {
            snprintf(out, cap, "it waits for the base's leases and operation to end");
        }
        return;
    case WM_PHASE_IMPORTING_TARGET:
        if (c->mode == WM_UPSERT_PUT_FIRST)
            snprintf(out, cap, "it waits for its target's import to be committed by its writer "
                     "(the same request resumes it; `weightctl upsert abort` aborts it, the base "
                     "intact)");
        else
            snprintf(out, cap, "it waits for its target's import to be committed; the base is "
                     "gone, so the same request resumes it (it cannot be aborted)");
        return;
    case WM_PHASE_DRAINING_BASE: {
        size_t n = base != NULL ? wm_lin_base_leases(p, base, &last_end) : 0;
        if (n > 0 && last_end > now)
            snprintf(out, cap, "it waits for %zu lease%s on the base, the last ending in %" PRIu64
                     " s unless renewed (renewals are refused: readers let go or their leases "
                     "expire)", n, n == 1 ? "" : "s", (last_end - now + 999) / 1000);
        else if (n > 0)
            snprintf(out, cap, "it waits for %zu lease%s on the base to end", n,
                     n == 1 ? "" : "s");
        else
            snprintf(out, cap, "it waits for the base's operation to end");
        return;
    }
    case WM_PHASE_DELETING_BASE:
        snprintf(out, cap, "the base is being deleted");
        return;
    case WM_PHASE_BASE_DELETED:
        snprintf(out, cap, "the base is deleted; it waits for the target's import to begin "
                 "(the same request resumes it)");
        return;
    default:
        snprintf(out, cap, "its next step is being made durable");
        return;
    }
}

/* A wire identity of a lineage, of tenant (wm_tenant_of; NULL: a tenant the
 * caller may not see, refused WM_ENOT_FOUND). */
static int wm_lin_id_from_pb(const Wmrpc__WeightIdentity *in, const char *tenant, uint64_t gen,
                             int use_gen, wm_identity_buf *out, char *msg, size_t cap)
{
    if (in == NULL) return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "identity is missing");
    if (tenant == NULL)
        return wm_fail(WM_ENOT_FOUND, msg, cap, "no lineage %s/%s/%s/%s", in->tenant,
                       in->namespace_id ? in->namespace_id : "",
                       in->resource_id ? in->resource_id : "", in->revision ? in->revision : "");
    const char *ns = in->namespace_id ? in->namespace_id : "";
    const char *res = in->resource_id ? in->resource_id : "";
    const char *rv = in->revision ? in->revision : "";
    if (strlen(tenant) > WM_ID_COMPONENT_MAX || strlen(ns) > WM_ID_COMPONENT_MAX ||
        strlen(res) > WM_ID_COMPONENT_MAX || strlen(rv) > WM_ID_COMPONENT_MAX)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "an identity component is longer than %d bytes", WM_ID_COMPONENT_MAX);
    if (wm_identity_set(out, tenant, ns, res, rv, use_gen ? gen : in->generation) < 0) {
        const wm_identity tmp = {tenant, ns, res, rv, use_gen ? gen : in->generation};
        wm_identity_check(&tmp, msg, cap);
        return WM_EINVALID_ARGUMENT;
    }
    return WM_OK;
}

/* Begin (or resume) a replacement. Order of the checks: arguments; the
 * lineage's claim (same request and arguments: answered as it is; same
 * request, other arguments, or another open request: CONFLICT; a record of
 * the lineage in flight: BUSY); the watermark (STALE_GENERATION); the base
 * (NOT_FOUND, NOT_READY, STALE_GENERATION on the CAS); the target must not
 * exist (CONFLICT); DELETE_FIRST: no lease, operation or write on the base
 * (BUSY); PUT_FIRST: room for one more live revision of the tenant
 * (SMP_ENOSPC, auth.limits max_revisions). Then the CLAIMED record is made
 * durable and answered. Nothing is written before every check passed. */
int wm_rpc_upsert_begin(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    int rc;
    wm_lineage_claim c;
    wm_identity_buf base_b, target_b;
    if (p->lin == NULL)
        return wm_reply_error(p, call, SMP_ESTATE, "generation replacement is not initialized");
    Wmrpc__UpsertBeginRequest *req = wmrpc__upsert_begin_request__unpack(NULL, len, body);
    if (req == NULL)
        return wm_reply_error(p, call, SMP_EPROTO,
                              "request body does not decode as UpsertBeginRequest");
    wm_lin_count_recovered(p);
    memset(&c, 0, sizeof(c));
    const char *tenant =
        wm_tenant_of(p, call, req->base_identity != NULL ? req->base_identity->tenant : NULL);
    if ((rc = wm_lin_id_from_pb(req->base_identity, tenant, 0, 0, &base_b, msg, sizeof(msg))) < 0) {
        if (rc == WM_ENOT_FOUND) wm_reply_error(p, call, rc, "%s", msg);
        else wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "invalid base identity: %s", msg);
        goto free_req;
    }
    if (wm_lin_id_from_pb(req->base_identity, tenant, req->target_generation, 1, &target_b, msg,
                          sizeof(msg)) < 0) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "invalid target identity: %s", msg);
        goto free_req;
    }
    c.base = base_b.id;
    c.target = target_b.id;
    if (c.target.weight_generation <= c.base.weight_generation) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT,
                       "target generation %" PRIu64 " is not above base generation %" PRIu64,
                       c.target.weight_generation, c.base.weight_generation);
        goto free_req;
    }
    c.mode = req->mode == 0 ? WM_UPSERT_PUT_FIRST : (wm_upsert_mode)req->mode;
    if (!wm_upsert_mode_valid((int)c.mode)) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT,
                       "mode %" PRIu32 " is not PUT_FIRST (1) or DELETE_FIRST (2)", req->mode);
        goto free_req;
    }
    size_t rl = req->request_id ? strlen(req->request_id) : 0;
    if (rl == 0 || rl > WM_REQUEST_ID_MAX || wm_text_check(req->request_id, rl) < 0) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT,
                       "request_id must be 1..%d bytes of UTF-8 (the client derives one)",
                       WM_REQUEST_ID_MAX);
        goto free_req;
    }
    memcpy(c.request_id, req->request_id, rl);
    c.expected_metadata_generation = req->expected_metadata_generation;
    if (c.expected_metadata_generation == 0) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT,
                       "expected_metadata_generation of the base is required");
        goto free_req;
    }

    wm_lineage lin;
    wm_identity_lineage(&c.base, &lin);
    const wm_lineage_entry *e = wm_store_lineage(p->store, &lin);
    if (wm_lin_pending(p, &lin)) {
        wm_reply_error(p, call, WM_EBUSY,
                       "a replacement claim of this lineage is being made durable; retry");
        goto free_req;
    }
    if (e != NULL && e->has_claim && strcmp(e->claim.request_id, c.request_id) == 0) {
        const wm_lineage_claim *cur = &e->claim;
        if (wm_identity_cmp(&cur->base, &c.base) == 0 &&
            wm_identity_cmp(&cur->target, &c.target) == 0 && cur->mode == c.mode &&
            cur->expected_metadata_generation == c.expected_metadata_generation) {
            wm_lin_reply(p, call, e); /* the same request: its claim as it is */
            goto free_req;
        }
        wm_reply_error(p, call, WM_ECONFLICT,
                       "request_id %s is already the claim %s@%" PRIu64 " -> %" PRIu64
                       " (%s); the same request id must carry the same arguments",
                       c.request_id, cur->base.resource_id, cur->base.weight_generation,
                       cur->target.weight_generation, wm_upsert_mode_name((int)cur->mode));
        goto free_req;
    }
    if (e != NULL && e->has_claim && !wm_claim_terminal(&e->claim)) {
        char waits[320];
        wm_claim_waits_for(p, &e->claim, waits, sizeof(waits));
        wm_reply_error(p, call, WM_ECONFLICT,
                       "lineage already has the open replacement claim %s (target generation "
                       "%" PRIu64 ", phase %s: %s); a second successor is refused",
                       e->claim.request_id, e->claim.target.weight_generation,
                       wm_phase_name((int)e->claim.phase), waits);
        goto free_req;
    }
    c.committed_watermark = e != NULL ? e->committed_watermark : 0;
    if (c.target.weight_generation <= c.committed_watermark) {
        wm_reply_error(p, call, WM_ESTALE_GENERATION,
                       "target generation %" PRIu64
                       " is not above the lineage's committed watermark %" PRIu64,
                       c.target.weight_generation, c.committed_watermark);
        goto free_req;
    }
    const wm_revision *base = wm_store_get(p->store, &c.base);
    if (base == NULL) {
        wm_reply_error(p, call, WM_ENOT_FOUND, "no base revision %s@%" PRIu64,
                       c.base.resource_id, c.base.weight_generation);
        goto free_req;
    }
    if (base->availability != WM_AVAIL_READY && base->availability != WM_AVAIL_DEGRADED) {
        wm_reply_error(p, call, WM_ENOT_READY, "base %s is %s; only a READY or DEGRADED revision "
                       "can be replaced", base->group_key,
                       wm_availability_name((int)base->availability));
        goto free_req;
    }
    if (wm_cas_check(c.expected_metadata_generation, base->metadata_generation) < 0) {
        wm_reply_error(p, call, WM_ESTALE_GENERATION,
                       "expected_metadata_generation %" PRIu64
                       " is stale: %s is at metadata generation %" PRIu64,
                       c.expected_metadata_generation, base->group_key,
                       base->metadata_generation);
        goto free_req;
    }
    if (wm_store_get(p->store, &c.target) != NULL) {
        wm_reply_error(p, call, WM_ECONFLICT,
                       "target generation %" PRIu64 " already exists; a replacement imports a "
                       "new generation", c.target.weight_generation);
        goto free_req;
    }
    if (c.mode == WM_UPSERT_DELETE_FIRST &&
        (base->lease_count > 0 || wm_pending_lease_grants(p, base->group_key) ||
         base->operation_id != 0 || wm_pending_metadata(p, base->group_key))) {
        char op[96];
        wm_busy_reason(p, base, op, sizeof(op));
        wm_reply_error(p, call, WM_EBUSY,
                       "DELETE_FIRST needs a base without leases or operations: %s has %" PRIu32
                       " lease(s) and %s; nothing was changed",
                       base->group_key, base->lease_count, op);
        goto free_req;
    }
    /* PUT_FIRST holds the base and the target at once: one more revision */
    if (c.mode == WM_UPSERT_PUT_FIRST && !wm_tenant_admit_revision(p, call, c.base.tenant_id))
        goto free_req;
    c.phase = WM_PHASE_CLAIMED;
    c.created_ms = c.updated_ms = p->api->wall_ms(p->host);
    if ((rc = wm_lin_append(p, &c, call, msg, sizeof(msg))) < 0) {
        if (p->lin != NULL) p->lin->failures[c.mode][WM_PHASE_CLAIMED]++;
        wm_reply_error(p, call, rc == SMP_EGATE || rc == SMP_ENOTLEADER ? rc :
                                rc == WM_EINVALID_ARGUMENT ? WM_ECONFLICT : WM_EDURABILITY_FAILED,
                       "%s", msg);
    }
free_req:
    wmrpc__upsert_begin_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* The lineage's current or last claim and its watermark; an empty response
 * for a lineage that never had one. */
int wm_rpc_upsert_status(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    wm_identity_buf id;
    Wmrpc__UpsertStatusRequest *req = wmrpc__upsert_status_request__unpack(NULL, len, body);
    if (req == NULL)
        return wm_reply_error(p, call, SMP_EPROTO,
                              "request body does not decode as UpsertStatusRequest");
    int rc = wm_lin_id_from_pb(req->lineage,
                               wm_tenant_of(p, call, req->lineage ? req->lineage->tenant : NULL),
                               1, 1, &id, msg, sizeof(msg));
    if (rc == WM_ENOT_FOUND)
        wm_reply_error(p, call, rc, "%s", msg);
    else if (rc < 0)
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "invalid lineage: %s", msg);
    else
        wm_lin_reply(p, call, wm_lin_entry(p, &id.id));
    wmrpc__upsert_status_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* -- the driver ------------------------------------------------------------- */

/* Append the claim's next phase (error text for ABORTED). */
static void wm_lin_advance(wm_plugin *p, const wm_lineage_claim *cur, wm_claim_phase next,
                           uint64_t watermark, const char *error)
{
    char msg[512];
    wm_lineage_claim c = *cur;
    c.phase = next;
    c.committed_watermark = watermark;
    uint64_t now = p->api->wall_ms(p->host);
    c.updated_ms = now > cur->updated_ms ? now : cur->updated_ms;
    if (error != NULL) snprintf(c.error, sizeof(c.error), "%s", error);
    if (next == WM_PHASE_ABORTED) p->lin->failures[c.mode][cur->phase]++;
    if (wm_lin_append(p, &c, NULL, msg, sizeof(msg)) < 0)
        p->api->log(p->host, SMP_LOG_WARN, "replacement claim %s: %s -> %s not appended: %s",
                    c.request_id, wm_phase_name((int)cur->phase), wm_phase_name((int)next), msg);
}

/* Start the base's deletion (READY/DEGRADED -> DELETING with a DELETING
 * operation the lifecycle runs), when nothing holds it. */
static void wm_lin_delete_base(wm_plugin *p, const wm_revision *base)
{
    char msg[512];
    if (base->lease_count > 0 || wm_pending_lease_grants(p, base->group_key) ||
        base->operation_id != 0 || wm_pending_metadata(p, base->group_key))
        return; /* wait: leases drain, the operation ends */
    wm_revision r = *base;
    wm_operation op;
    uint64_t now = p->api->wall_ms(p->host);
    if (now < base->updated_ms) now = base->updated_ms;
    wm_revision_set_availability(&r, base, NULL, WM_AVAIL_DELETING);
    r.metadata_generation = base->metadata_generation + 1;
    r.updated_ms = now;
    memset(&op, 0, sizeof(op));
    op.id = wm_store_reserve_operation_id(p->store);
    op.kind = WM_OPK_DELETING;
    op.id_of = r.id;
    op.state = WM_OPS_RUNNING;
    op.members_total = r.payload_count + 1;
    op.bytes_total = r.logical_bytes;
    op.created_ms = op.updated_ms = now;
    r.operation_id = op.id;
    if (wm_metadata_mutation_check(base, &r, msg, sizeof(msg)) < 0) {
        p->api->log(p->host, SMP_LOG_ERROR, "replacement: deletion of base %s refused: %s",
                    base->group_key, msg);
        return;
    }
    int rc = wm_submit_upsert(p, &r, &op, 1, NULL, NULL);
    if (rc < 0)
        p->api->log(p->host, SMP_LOG_WARN, "replacement: deletion of base %s not appended: %s",
                    base->group_key, wm_status_name(rc));
}

static int wm_lin_gone(const wm_revision *r)
{
    return r == NULL || r->availability == WM_AVAIL_DELETED;
}

/* One step of one open claim. */
static void wm_lin_step(wm_plugin *p, const wm_lineage_entry *e)
{
    const wm_lineage_claim *c = &e->claim;
    const wm_revision *base = wm_store_get(p->store, &c->base);
    const wm_revision *tgt = wm_store_get(p->store, &c->target);
    int tgt_ready = tgt != NULL && (tgt->availability == WM_AVAIL_READY ||
                                    tgt->availability == WM_AVAIL_DEGRADED);
    int tgt_failed = tgt == NULL || tgt->availability == WM_AVAIL_DELETING ||
                     tgt->availability == WM_AVAIL_DELETED;
    uint64_t wm = e->committed_watermark;

    switch (c->phase) {
    case WM_PHASE_CLAIMED:
        if (c->mode == WM_UPSERT_PUT_FIRST) {
            uint64_t ttl = wm_import_ttl_ms(p), now = p->api->wall_ms(p->host);
            if (tgt != NULL)
                wm_lin_advance(p, c, WM_PHASE_IMPORTING_TARGET, wm, NULL);
            else if (ttl > 0 && now >= c->updated_ms && now - c->updated_ms >= ttl)
                wm_lin_advance(p, c, WM_PHASE_ABORTED, wm,
                               "no target import began within import_ttl_ms; the base is intact");
        } else if (wm_lin_gone(base) || base->availability == WM_AVAIL_DELETING) {
            wm_lin_advance(p, c, WM_PHASE_DELETING_BASE, wm, NULL);
        } else if (base->lease_count == 0 && !wm_pending_lease_grants(p, base->group_key) &&
                   base->operation_id == 0 && !wm_pending_metadata(p, base->group_key)) {
            wm_lin_advance(p, c, WM_PHASE_DELETING_BASE, wm, NULL);
        }
        break;
    case WM_PHASE_IMPORTING_TARGET:
        if (tgt_ready) {
            if (c->mode == WM_UPSERT_PUT_FIRST)
                wm_lin_advance(p, c, WM_PHASE_BASE_FENCED, wm, NULL);
            else
                wm_lin_advance(p, c, WM_PHASE_COMMITTED, c->target.weight_generation, NULL);
        } else if (tgt_failed && c->mode == WM_UPSERT_PUT_FIRST) {
            wm_lin_advance(p, c, WM_PHASE_ABORTED, wm,
                           "the target import was aborted before READY; the base is intact");
        }
        break;
    case WM_PHASE_BASE_FENCED:
        wm_lin_advance(p, c, WM_PHASE_DRAINING_BASE, wm, NULL);
        break;
    case WM_PHASE_DRAINING_BASE:
        if (wm_lin_gone(base) || base->availability == WM_AVAIL_DELETING ||
            (base->lease_count == 0 && !wm_pending_lease_grants(p, base->group_key) &&
             base->operation_id == 0 && !wm_pending_metadata(p, base->group_key)))
            wm_lin_advance(p, c, WM_PHASE_DELETING_BASE, wm, NULL);
        break;
    case WM_PHASE_DELETING_BASE:
        if (wm_lin_gone(base)) {
            if (c->mode == WM_UPSERT_PUT_FIRST)
                wm_lin_advance(p, c, WM_PHASE_COMMITTED, c->target.weight_generation, NULL);
            else
                wm_lin_advance(p, c, WM_PHASE_BASE_DELETED, wm, NULL);
        } else if (base->availability == WM_AVAIL_READY ||
                   base->availability == WM_AVAIL_DEGRADED) {
            wm_lin_delete_base(p, base);
        }
        break;
    case WM_PHASE_BASE_DELETED:
        if (tgt != NULL) wm_lin_advance(p, c, WM_PHASE_IMPORTING_TARGET, wm, NULL);
        break;
    default:
        break;
    }
}

/* The first time the active master looks at the table, every open claim
 * it finds was recovered (snapshot and OpLog replay): count it once. */
static void wm_lin_count_recovered(wm_plugin *p)
{
    wm_lin *L = p->lin;
    if (L == NULL || L->recovered_counted) return;
    L->recovered_counted = 1;
    size_t n = wm_store_lineage_count(p->store);
    for (size_t i = 0; i < n; i++) {
        const wm_lineage_entry *e = wm_store_lineage_at(p->store, i);
        if (!e->has_claim || wm_claim_terminal(&e->claim)) continue;
        L->recoveries[e->claim.mode][e->claim.phase]++;
        p->api->log(p->host, SMP_LOG_INFO, "replacement claim %s resumes in phase %s",
                    e->claim.request_id, wm_phase_name((int)e->claim.phase));
    }
}

void wm_lineage_drive(wm_plugin *p)
{
    wm_lin *L = p->lin;
    if (L == NULL) return;
    wm_lin_count_recovered(p);
    wm_store_stats stats;
    wm_store_stats_get(p->store, &stats);
    /* Every lineage that ever had a claim keeps its entry: walk them only
     * while a claim is in progress. */
    size_t n = stats.open_claims > 0 ? wm_store_lineage_count(p->store) : 0;
    for (size_t i = 0; i < n; i++) {
        const wm_lineage_entry *e = wm_store_lineage_at(p->store, i);
        if (!e->has_claim || wm_claim_terminal(&e->claim)) continue;
        if (wm_lin_pending(p, &e->lineage)) continue;
        wm_lineage_entry copy = *e; /* the step may append; keep ours stable */
        wm_lin_step(p, &copy);
    }
    wm_lineage_metrics(p);
}

int wm_lineage_claims_open(const wm_plugin *p)
{
    wm_store_stats stats;
    wm_store_stats_get(p->store, &stats);
    return stats.open_claims > 0 || (p->lin != NULL && p->lin->pending != NULL);
}

void wm_lineage_kick(wm_plugin *p)
{
    if (!SMP_HOST_HAS(p->api, tick_soon) || p->api->tick_soon == NULL) return;
    if (wm_lineage_claims_open(p)) (void)p->api->tick_soon(p->host);
}

/* -- registration, metrics, release ----------------------------------------- */

static const char *const wm_l_mode[] = {"mode", NULL};
static const char *const wm_l_mode_phase[] = {"mode", "phase", NULL};

int wm_lineage_register(wm_plugin *p)
{
    int rc;
    wm_lin *L = calloc(1, sizeof(*L));
    if (L == NULL) return SMP_ENOMEM;
    p->lin = L;
    if (!(p->api->host_caps & SMP_HOST_CAP_METRICS)) return SMP_OK;
    const struct {
        smp_metric_kind kind;
        const char *name, *help;
        const char *const *labels;
        smp_metric **slot;
    } specs[] = {
        {SMP_METRIC_COUNTER, "weight_upsert_claims_total", "Replacement claims created by mode",
         wm_l_mode, &L->m_claims},
        {SMP_METRIC_COUNTER, "weight_upsert_failures_total",
         "Replacement claims refused, aborted or not made durable, by mode and phase",
         wm_l_mode_phase, &L->m_failures},
        {SMP_METRIC_COUNTER, "weight_upsert_recoveries_total",
         "Open replacement claims resumed after a master start or failover, by mode and phase",
         wm_l_mode_phase, &L->m_recoveries},
        {SMP_METRIC_GAUGE, "weight_upsert_claims_open", "Open replacement claims by mode and phase",
         wm_l_mode_phase, &L->m_open},
        {SMP_METRIC_GAUGE, "weight_upsert_unavailable_lineages",
         "DELETE_FIRST replacements between base deletion and target READY (nothing readable)",
         NULL, &L->m_unavailable},
    };
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        smp_metric_desc d = {sizeof(smp_metric_desc), specs[i].kind, specs[i].name, specs[i].help,
                             specs[i].labels};
        if ((rc = p->api->register_metric(p->host, &d, specs[i].slot)) < 0) {
            wm_lineage_release(p);
            return rc;
        }
    }
    return SMP_OK;
}

void wm_lineage_metrics(wm_plugin *p)
{
    wm_lin *L = p->lin;
    const smp_host_api *a = p->api;
    if (L == NULL || L->m_claims == NULL) return;
    uint64_t open[WM_MODES][WM_PHASES];
    uint64_t unavailable = 0;
    memset(open, 0, sizeof(open));
    wm_store_stats stats;
    wm_store_stats_get(p->store, &stats);
    size_t n = stats.open_claims > 0 ? wm_store_lineage_count(p->store) : 0;
    for (size_t i = 0; i < n; i++) {
        const wm_lineage_entry *e = wm_store_lineage_at(p->store, i);
        if (!e->has_claim || wm_claim_terminal(&e->claim)) continue;
        open[e->claim.mode][e->claim.phase]++;
        if (e->claim.mode == WM_UPSERT_DELETE_FIRST && e->claim.phase != WM_PHASE_CLAIMED)
            unavailable++;
    }
    for (int m = WM_UPSERT_PUT_FIRST; m <= WM_UPSERT_DELETE_FIRST; m++) {
        const char *lm[1] = {wm_upsert_mode_name(m)};
        a->metric_set(L->m_claims, lm, (double)L->claims[m]);
        for (int ph = WM_PHASE_CLAIMED; ph <= WM_PHASE_ABORTED; ph++) {
            const char *l[2] = {wm_upsert_mode_name(m), wm_phase_name(ph)};
            a->metric_set(L->m_failures, l, (double)L->failures[m][ph]);
            a->metric_set(L->m_recoveries, l, (double)L->recoveries[m][ph]);
            a->metric_set(L->m_open, l, (double)open[m][ph]);
        }
    }
    a->metric_set(L->m_unavailable, NULL, (double)unavailable);
}

void wm_lineage_release(wm_plugin *p)
{
    wm_lin *L = p->lin;
    if (L == NULL) return;
    while (L->pending != NULL) {
        wm_lin_rec *r = L->pending;
        L->pending = r->next;
        free(r);
    }
    free(L);
    p->lin = NULL;
}
