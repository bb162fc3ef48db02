/* weight_management.c -- the weight plugin's management RPCs (service 16).
 *
 * Import (begin, commit, abort), queries (metadata, existence, size, list,
 * operation), policy updates, leases and the creation of migration and
 * deletion operations. Every handler decodes its protobuf-c request, checks
 * it against the revision store, and for a mutation prepares the complete
 * post-mutation record, appends it to the OpLog and answers only from the
 * durable callback, after the record has been applied to the store by the
 * same function replay uses (prepare -> append -> publish). While a record of
 * a revision is in flight, other mutations of that revision answer BUSY, so
 * each record advances the metadata generation by exactly one. Errors travel
 * as the reply status (WM_E* or SMP_E*) with a UTF-8 sentence naming the
 * cause as the reply body (see proto/weight_rpc.proto). The lifecycle
 * (weight_lifecycle.c) executes the operations created here. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weight_lineage.h"
#include "weight_rpc.pb-c.h"
#include "weight_residency_planner.h"
#include "wm_plugin.h"

/* ------------------------------------------------------------------------ */
/* Mutations in flight                                                       */
/* ------------------------------------------------------------------------ */

typedef enum wm_txn_kind {
    WM_TXN_UPSERT = 1,
    WM_TXN_DELETE = 2,
    WM_TXN_LEASE_UPSERT = 3,
    WM_TXN_LEASE_DELETE = 4
} wm_txn_kind;

/* What the durable callback answers. */
typedef enum wm_reply_kind {
    WM_REPLY_NONE = 0,
    WM_REPLY_BEGIN = 1,     /* ImportBeginResponse */
    WM_REPLY_METADATA = 2,  /* MetadataResponse */
    WM_REPLY_LEASE = 3,     /* LeaseResponse */
    WM_REPLY_DELETED = 4    /* MetadataResponse without metadata (record gone) */
} wm_reply_kind;

/* One prepared record and who waits for it. Owned by the pending list from
 * append to the durable callback. */
struct wm_txn {
    wm_plugin *p;
    wm_txn_kind kind;
    wm_reply_kind reply;
    smp_rpc_call *call;          /* NULL: nobody waits */
    char group_key[WM_KEY_MAX + 1];
    uint64_t lease_end_id;       /* LEASE_DELETE: the lease */
    wm_metadata_upsert up;       /* operations point into ops[] */
    wm_operation ops[2];
    int owns_affinity;
    wm_metadata_delete del;
    uint64_t del_ops[1];
    wm_lease lease;
    wm_lease_delete lease_end;
    wm_txn *then;                /* appended after this one is durable */
    wm_applied_fn applied;       /* lifecycle callback, or NULL */
    void *applied_arg;
    wm_txn *next;                /* pending list */
};

/* Free a record and the chain after it (with any affinity it owns). */
static void wm_txn_free(wm_txn *t)
{
    while (t != NULL) {
        wm_txn *then = t->then;
        if (t->owns_affinity) wm_affinity_clear(&t->up.affinity);
        free(t);
        t = then;
    }
}

/* A zeroed record of `kind` for the revision of group_key; NULL on OOM. */
static wm_txn *wm_txn_new(wm_plugin *p, wm_txn_kind kind, const char *group_key)
{
    wm_txn *t = calloc(1, sizeof(*t));
    if (t == NULL) return NULL;
    t->p = p;
    t->kind = kind;
    snprintf(t->group_key, sizeof(t->group_key), "%s", group_key);
    return t;
}

int wm_pending_metadata(const wm_plugin *p, const char *group_key)
{
    for (const wm_txn *t = p->pending; t != NULL; t = t->next)
        if ((t->kind == WM_TXN_UPSERT || t->kind == WM_TXN_DELETE) &&
            strcmp(t->group_key, group_key) == 0)
            return 1;
    return 0;
}

int wm_pending_lease_grants(const wm_plugin *p, const char *group_key)
{
    for (const wm_txn *t = p->pending; t != NULL; t = t->next)
        if (t->kind == WM_TXN_LEASE_UPSERT && strcmp(t->group_key, group_key) == 0) return 1;
    return 0;
}

int wm_pending_lease_end(const wm_plugin *p, uint64_t lease_id)
{
    for (const wm_txn *t = p->pending; t != NULL; t = t->next)
        if (t->kind == WM_TXN_LEASE_DELETE && t->lease_end_id == lease_id) return 1;
    return 0;
}

static void wm_pending_remove(wm_plugin *p, wm_txn *t)
{
    for (wm_txn **pp = &p->pending; *pp != NULL; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            return;
        }
}

void wm_mgmt_release(wm_plugin *p)
{
    wm_lifecycle_release(p);
    wm_lineage_release(p);
    while (p->pending != NULL) {
        wm_txn *t = p->pending;
        p->pending = t->next;
        wm_txn_free(t);
    }
}

const char *wm_status_name(int rc)
{
    return wm_error_name(rc);
}

/* ------------------------------------------------------------------------ */
/* Replies                                                                   */
/* ------------------------------------------------------------------------ */

/* Answer an error: the status and a sentence as the body. */
int wm_reply_error(wm_plugin *p, smp_rpc_call *call, int rc, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof(msg)) n = (int)sizeof(msg) - 1;
    p->api->rpc_reply(call, rc, (const uint8_t *)msg, (size_t)n);
    return SMP_OK;
}

/* The message text for an append that failed before it was queued. */
static int wm_reply_append_error(wm_plugin *p, smp_rpc_call *call, int rc, const char *what)
{
    if (rc == SMP_EGATE)
        return wm_reply_error(p, call, rc,
                              "%s refused: %s is not confirmed; weight metadata mutations "
                              "(OpLog types 8-11) fail closed in HA mode until every standby "
                              "replays them and the flag is set (reads keep working)",
                              what, WM_GATE_MANAGEMENT);
    if (rc == SMP_ENOTLEADER)
        return wm_reply_error(p, call, rc, "%s refused: this master is a standby", what);
    return wm_reply_error(p, call, WM_EDURABILITY_FAILED, "%s: the OpLog append failed (%s)", what,
                          smp_strerror(rc));
}

static int wm_reply_packed(wm_plugin *p, smp_rpc_call *call, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n > 0 ? n : 1);
    if (buf == NULL) return wm_reply_error(p, call, SMP_ENOMEM, "out of memory packing the reply");
    protobuf_c_message_pack(m, buf);
    p->api->rpc_reply(call, SMP_OK, buf, n);
    free(buf);
    return SMP_OK;
}

/* Wire views of the records; they borrow the strings of the record. */
typedef struct wm_pb_identity {
    Wmrpc__WeightIdentity m;
} wm_pb_identity;

static void wm_pb_identity_set(Wmrpc__WeightIdentity *m, const wm_identity *id)
{
    wmrpc__weight_identity__init(m);
    m->tenant = (char *)id->tenant_id;
    m->namespace_id = (char *)id->ns;
    m->resource_id = (char *)id->resource_id;
    m->revision = (char *)id->revision;
    m->generation = id->weight_generation;
}

typedef struct wm_pb_meta {
    Wmrpc__WeightMetadata m;
    Wmrpc__WeightIdentity id;
    Wmrpc__WeightPolicy policy;
} wm_pb_meta;

static void wm_pb_meta_set(wm_pb_meta *v, const wm_revision *r)
{
    wmrpc__weight_metadata__init(&v->m);
    wmrpc__weight_policy__init(&v->policy);
    wm_pb_identity_set(&v->id, &r->id);
    v->policy.preferred_residency = (uint32_t)r->policy.preferred;
    v->policy.mixed_hot_ratio = r->policy.mixed_hot_ratio;
    v->policy.migration_mode = (uint32_t)r->policy.mode;
    v->m.identity = &v->id;
    v->m.policy = &v->policy;
    v->m.availability = (uint32_t)r->availability;
    v->m.residency = (uint32_t)r->residency;
    v->m.observed_hot_ratio = r->observed_hot_ratio;
    v->m.metadata_generation = r->metadata_generation;
    v->m.operation_id = r->operation_id;
    v->m.group_key = (char *)r->group_key;
    v->m.manifest_key = (char *)r->manifest_key;
    int sealed = r->availability != WM_AVAIL_IMPORTING && r->payload_count > 0;
    if (sealed) {
        v->m.manifest_sha256.data = (uint8_t *)r->manifest_sha256;
        v->m.manifest_sha256.len = WM_SHA256_LEN;
        v->m.payload_keys_sha256.data = (uint8_t *)r->payload_keys_sha256;
        v->m.payload_keys_sha256.len = WM_SHA256_LEN;
        v->m.affinity_sha256.data = (uint8_t *)r->affinity_sha256;
        v->m.affinity_sha256.len = WM_SHA256_LEN;
    }
    v->m.payload_count = r->payload_count;
    v->m.logical_bytes = r->logical_bytes;
    v->m.affinity_count = r->affinity_count;
    v->m.created_ms = r->created_ms;
    v->m.updated_ms = r->updated_ms;
    v->m.last_access_ms = r->last_access_ms;
    v->m.active_leases = r->lease_count;
}

typedef struct wm_pb_op {
    Wmrpc__WeightOperation m;
    Wmrpc__WeightIdentity id;
} wm_pb_op;

static void wm_pb_op_set(wm_pb_op *v, const wm_operation *op)
{
    wmrpc__weight_operation__init(&v->m);
    wm_pb_identity_set(&v->id, &op->id_of);
    v->m.id = op->id;
    v->m.identity = &v->id;
    v->m.kind = (uint32_t)op->kind;
    v->m.target_residency = (uint32_t)op->target;
    v->m.target_hot_ratio = op->target_hot_ratio;
    v->m.state = (uint32_t)op->state;
    v->m.members_done = op->members_done;
    v->m.members_total = op->members_total;
    v->m.bytes_done = op->bytes_done;
    v->m.bytes_total = op->bytes_total;
    v->m.cursor = (char *)op->cursor;
    v->m.error = (char *)op->error;
    v->m.attempts = op->attempts;
    v->m.created_ms = op->created_ms;
    v->m.updated_ms = op->updated_ms;
}

/* MetadataResponse: the revision and its active operation, if any. rev NULL:
 * an empty response (the record left the table). */
static int wm_reply_metadata(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev)
{
    Wmrpc__MetadataResponse resp = WMRPC__METADATA_RESPONSE__INIT;
    wm_pb_meta meta;
    wm_pb_op op;
    if (rev != NULL) {
        wm_pb_meta_set(&meta, rev);
        resp.metadata = &meta.m;
        const wm_operation *o = rev->operation_id ? wm_store_operation(p->store, rev->operation_id)
                                                  : NULL;
        if (o != NULL) {
            wm_pb_op_set(&op, o);
            resp.operation = &op.m;
        }
    }
    return wm_reply_packed(p, call, &resp.base);
}

static int wm_reply_begin(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev)
{
    Wmrpc__ImportBeginResponse resp = WMRPC__IMPORT_BEGIN_RESPONSE__INIT;
    wm_pb_meta meta;
    wm_pb_meta_set(&meta, rev);
    resp.metadata = &meta.m;
    return wm_reply_packed(p, call, &resp.base);
}

static int wm_reply_lease(wm_plugin *p, smp_rpc_call *call, const wm_lease *l, const wm_revision *rev)
{
    Wmrpc__LeaseResponse resp = WMRPC__LEASE_RESPONSE__INIT;
    Wmrpc__WeightLease lm = WMRPC__WEIGHT_LEASE__INIT;
    Wmrpc__WeightIdentity lid;
    wm_pb_meta meta;
    if (l != NULL) {
        wm_pb_identity_set(&lid, &l->id_of);
        lm.id = l->id;
        lm.identity = &lid;
        lm.metadata_generation = l->metadata_generation;
        lm.expires_ms = l->expiry_ms;
        resp.lease = &lm;
    }
    if (rev != NULL) {
        wm_pb_meta_set(&meta, rev);
        resp.metadata = &meta.m;
    }
    return wm_reply_packed(p, call, &resp.base);
}

/* ------------------------------------------------------------------------ */
/* Append and publish                                                        */
/* ------------------------------------------------------------------------ */

static int wm_txn_append(wm_plugin *p, wm_txn *t);

/* Durable callback: apply the record with the replay code, then answer. */
static void wm_txn_durable(void *arg, int status, uint64_t seq)
{
    wm_txn *t = arg;
    wm_plugin *p = t->p;
    char why[512] = "";
    int rc = WM_OK;
    (void)seq;

    wm_pending_remove(p, t);
    if (status < 0) {
        p->api->log(p->host, SMP_LOG_ERROR, "weight record for %s did not become durable: %s",
                    t->group_key, smp_strerror(status));
        if (t->call != NULL)
            wm_reply_error(p, t->call, WM_EDURABILITY_FAILED,
                           "the OpLog could not make the record for %s durable (%s); nothing "
                           "changed",
                           t->group_key, smp_strerror(status));
        rc = WM_EDURABILITY_FAILED;
        goto free_txn;
    }
    switch (t->kind) {
    case WM_TXN_UPSERT: rc = wm_store_apply_upsert(p->store, &t->up, why, sizeof(why)); break;
    case WM_TXN_DELETE: rc = wm_store_apply_delete(p->store, &t->del, why, sizeof(why)); break;
    case WM_TXN_LEASE_UPSERT:
        rc = wm_store_apply_lease_upsert(p->store, &t->lease, why, sizeof(why));
        break;
    case WM_TXN_LEASE_DELETE:
        rc = wm_store_apply_lease_delete(p->store, &t->lease_end, why, sizeof(why));
        break;
    }
    if (rc < 0) {
        /* Prepared records are checked before the append; this is a bug. */
        p->api->log(p->host, SMP_LOG_ERROR, "durable weight record for %s does not apply: %s",
                    t->group_key, why);
        if (t->call != NULL)
            wm_reply_error(p, t->call, SMP_ESTATE, "durable record for %s does not apply: %s",
                           t->group_key, why);
        goto free_txn;
    }
    if (t->kind == WM_TXN_LEASE_DELETE && t->lease_end.reason == WM_LEASE_EXPIRED)
        p->leases_expired++;
    wm_metrics_refresh(p);

    if (t->then != NULL) {
        /* The next record of the chain carries the reply. */
        wm_txn *next = t->then;
        t->then = NULL;
        next->call = t->call;
        t->call = NULL;
        if ((rc = wm_txn_append(p, next)) < 0) {
            if (next->call != NULL) wm_reply_append_error(p, next->call, rc, "lease grant");
            wm_txn_free(next);
        }
        goto free_txn;
    }
    if (t->call == NULL) goto free_txn;

    const wm_identity *id = NULL;
    switch (t->kind) {
    case WM_TXN_UPSERT: id = &t->up.revision.id; break;
    case WM_TXN_DELETE: id = &t->del.id; break;
    case WM_TXN_LEASE_UPSERT: id = &t->lease.id_of; break;
    case WM_TXN_LEASE_DELETE: id = &t->lease_end.id_of; break;
    }
    const wm_revision *rev = wm_store_get(p->store, id);
    switch (t->reply) {
    case WM_REPLY_BEGIN: wm_reply_begin(p, t->call, rev); break;
    case WM_REPLY_METADATA: wm_reply_metadata(p, t->call, rev); break;
    case WM_REPLY_DELETED: wm_reply_metadata(p, t->call, NULL); break;
    case WM_REPLY_LEASE:
        wm_reply_lease(p, t->call,
                       t->kind == WM_TXN_LEASE_UPSERT ? wm_store_lease(p->store, t->lease.id) : NULL,
                       rev);
        break;
    case WM_REPLY_NONE: p->api->rpc_reply(t->call, SMP_OK, NULL, 0); break;
    }
    t->call = NULL;
free_txn:
    if (t->applied != NULL) t->applied(p, t->applied_arg, rc);
    wm_txn_free(t);
}

/* Encode t's record and append it; on success t is on the pending list and
 * owned by the durable callback. On failure t is untouched and still the
 * caller's. Returns SMP_OK or the append's code (SMP_EGATE, ...). */
static int wm_txn_append(wm_plugin *p, wm_txn *t)
{
    int rc;
    uint8_t *buf = NULL;
    size_t len = 0;
    uint16_t type = 0;
    char why[512] = "";

    switch (t->kind) {
    case WM_TXN_UPSERT:
        t->up.operations = t->up.n_operations ? t->ops : NULL;
        rc = wm_store_check_upsert(p->store, &t->up, why, sizeof(why));
        if (rc == WM_OK) rc = wm_encode_metadata_upsert(&t->up, &buf, &len, why, sizeof(why));
        type = WM_OP_METADATA_UPSERT;
        break;
    case WM_TXN_DELETE:
        t->del.operation_ids = t->del.n_operation_ids ? t->del_ops : NULL;
        rc = wm_store_check_delete(p->store, &t->del, why, sizeof(why));
        if (rc == WM_OK) rc = wm_encode_metadata_delete(&t->del, &buf, &len, why, sizeof(why));
        type = WM_OP_METADATA_DELETE;
        break;
    case WM_TXN_LEASE_UPSERT:
        rc = wm_encode_lease_upsert(&t->lease, &buf, &len, why, sizeof(why));
        type = WM_OP_LEASE_UPSERT;
        break;
    case WM_TXN_LEASE_DELETE:
        rc = wm_encode_lease_delete(&t->lease_end, &buf, &len, why, sizeof(why));
        type = WM_OP_LEASE_DELETE;
        break;
    default: return SMP_EINVAL;
    }
    if (rc < 0) {
        /* a bug in the transition that prepared it: nothing is appended */
        p->api->log(p->host, SMP_LOG_ERROR, "weight record for %s refused before the append: %s",
                    t->group_key, why);
        return rc == SMP_ENOMEM ? rc : SMP_ESTATE;
    }
    t->next = p->pending;
    p->pending = t;
    rc = p->api->oplog_append(p->host, type, WM_RECORD_ENCVER, buf, len, wm_txn_durable, t);
    free(buf);
    if (rc < 0) wm_pending_remove(p, t);
    return rc;
}

/* Append t for a waiting call; on failure answer the call and free t. */
static int wm_submit(wm_plugin *p, wm_txn *t, smp_rpc_call *call, wm_reply_kind reply,
                     const char *what)
{
    t->call = call;
    t->reply = reply;
    int rc = wm_txn_append(p, t);
    if (rc < 0) {
        wm_txn_free(t);
        return wm_reply_append_error(p, call, rc, what);
    }
    return SMP_OK;
}

int wm_submit_lease_end(wm_plugin *p, const wm_lease *l, wm_lease_end reason)
{
    wm_txn *t = wm_txn_new(p, WM_TXN_LEASE_DELETE, "");
    if (t == NULL) return SMP_ENOMEM;
    const wm_revision *rev = wm_store_get(p->store, &l->id_of);
    if (rev != NULL) snprintf(t->group_key, sizeof(t->group_key), "%s", rev->group_key);
    t->lease_end_id = l->id;
    t->lease_end.lease_id = l->id;
    t->lease_end.id_of = l->id_of;
    t->lease_end.reason = reason;
    int rc = wm_txn_append(p, t);
    if (rc < 0) wm_txn_free(t);
    return rc;
}

int wm_submit_upsert(wm_plugin *p, const wm_revision *rev, const wm_operation *ops, size_t n_ops,
                     wm_applied_fn cb, void *arg)
{
    char why[512] = "";
    int rc;
    if (rev == NULL || n_ops > 2 || (n_ops > 0 && ops == NULL)) return WM_EINVALID_ARGUMENT;
    wm_txn *t = wm_txn_new(p, WM_TXN_UPSERT, rev->group_key);
    if (t == NULL) return SMP_ENOMEM;
    t->up.revision = *rev;
    for (size_t i = 0; i < n_ops; i++) t->ops[i] = ops[i];
    t->up.n_operations = n_ops;
    t->up.operations = n_ops ? t->ops : NULL;
    /* What the store would refuse is refused now, before anything is
     * written: the record alone, and with the summary the store holds. */
    const wm_affinity *held = wm_store_affinity(p->store, &rev->id);
    if ((rc = wm_metadata_check(&t->up.revision, why, sizeof(why))) == WM_OK &&
        (rev->availability == WM_AVAIL_READY || rev->availability == WM_AVAIL_DEGRADED) &&
        (held == NULL || held->n_units == 0)) {
        snprintf(why, sizeof(why), "%.200s has no sealed affinity summary", rev->group_key);
        rc = WM_EINVALID_ARGUMENT;
    }
    for (size_t i = 0; rc == WM_OK && i < n_ops; i++)
        rc = wm_operation_check(&t->ops[i], &t->up.revision, why, sizeof(why));
    if (rc < 0) {
        p->api->log(p->host, SMP_LOG_ERROR, "lifecycle record for %s refused: %s", rev->group_key,
                    why);
        wm_txn_free(t);
        return WM_EINVALID_ARGUMENT;
    }
    t->applied = cb;
    t->applied_arg = arg;
    if ((rc = wm_txn_append(p, t)) < 0) wm_txn_free(t);
    return rc;
}

int wm_submit_delete(wm_plugin *p, const wm_metadata_delete *d, wm_applied_fn cb, void *arg)
{
    if (d == NULL || d->n_operation_ids > 1 || (d->n_operation_ids > 0 && d->operation_ids == NULL))
        return WM_EINVALID_ARGUMENT;
    const wm_revision *rev = wm_store_get(p->store, &d->id);
    wm_txn *t = wm_txn_new(p, WM_TXN_DELETE, rev ? rev->group_key : "");
    if (t == NULL) return SMP_ENOMEM;
    t->del = *d;
    if (d->n_operation_ids) t->del_ops[0] = d->operation_ids[0];
    t->applied = cb;
    t->applied_arg = arg;
    int rc = wm_txn_append(p, t);
    if (rc < 0) wm_txn_free(t);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Request decoding                                                          */
/* ------------------------------------------------------------------------ */

/* A wire identity as a checked wm_identity ("" tenant is "default"). */
static int wm_identity_from_pb(const Wmrpc__WeightIdentity *in, wm_identity *out, char *msg,
                               size_t cap)
{
    if (in == NULL) {
        snprintf(msg, cap, "identity is missing");
        return WM_EINVALID_ARGUMENT;
    }
    const char *tenant = in->tenant && in->tenant[0] ? in->tenant : "default";
    const char *parts[4] = {tenant, in->namespace_id, in->resource_id, in->revision};
    char *dst[4] = {out->tenant_id, out->ns, out->resource_id, out->revision};
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < 4; i++) {
        size_t n = parts[i] ? strlen(parts[i]) : 0;
        if (n > WM_ID_COMPONENT_MAX) {
            snprintf(msg, cap, "identity component %d is %zu bytes (at most %d)", i, n,
                     WM_ID_COMPONENT_MAX);
            return WM_EINVALID_ARGUMENT;
        }
        memcpy(dst[i], parts[i] ? parts[i] : "", n);
    }
    out->weight_generation = in->generation;
    return wm_identity_check(out, msg, cap);
}

#define WM_DECODE(var, type, fn, p, call, body, len)                                     \
    type *var = fn(NULL, len, body);                                                    \
    if (var == NULL)                                                                    \
        return wm_reply_error(p, call, SMP_EPROTO, "request body does not decode as %s", \
                              #type)

static const char *wm_id_text(const wm_identity *id, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s/%s/%s@%" PRIu64, id->tenant_id, id->ns, id->resource_id,
             id->revision, id->weight_generation);
    return buf;
}

/* The checked identity of a request into *id: 1, or 0 with INVALID_ARGUMENT
 * ("invalid identity: ...") answered. */
static int wm_identity_in(wm_plugin *p, smp_rpc_call *call, const Wmrpc__WeightIdentity *pid,
                          wm_identity *id)
{
    char msg[256];
    if (wm_identity_from_pb(pid, id, msg, sizeof(msg)) < 0) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "invalid identity: %s", msg);
        return 0;
    }
    return 1;
}

/* The revision of a request, or an answered NOT_FOUND / INVALID_ARGUMENT. */
static const wm_revision *wm_lookup(wm_plugin *p, smp_rpc_call *call,
                                    const Wmrpc__WeightIdentity *pid, wm_identity *id)
{
    char idt[1200];
    if (!wm_identity_in(p, call, pid, id)) return NULL;
    const wm_revision *rev = wm_store_get(p->store, id);
    if (rev == NULL)
        wm_reply_error(p, call, WM_ENOT_FOUND, "no revision %s", wm_id_text(id, idt, sizeof(idt)));
    return rev;
}

static uint64_t wm_now(wm_plugin *p, const wm_revision *rev)
{
    uint64_t now = p->api->wall_ms(p->host);
    return rev != NULL && rev->updated_ms > now ? rev->updated_ms : now;
}

/* A mutation of rev may start: nothing of it in flight. */
static int wm_check_idle(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev)
{
    if (wm_pending_metadata(p, rev->group_key)) {
        wm_reply_error(p, call, WM_EBUSY,
                       "a mutation of %s is being made durable; retry with the generation it "
                       "returns",
                       rev->group_key);
        return 0;
    }
    return 1;
}

static int wm_check_cas(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev, uint64_t expected)
{
    if (wm_cas_check(expected, rev->metadata_generation) < 0) {
        wm_reply_error(p, call, WM_ESTALE_GENERATION,
                       "expected_metadata_generation %" PRIu64
                       " is stale: %s is at metadata generation %" PRIu64,
                       expected, rev->group_key, rev->metadata_generation);
        return 0;
    }
    return 1;
}

/* wm_lookup, then the CAS on expected (wm_check_cas): the revision, or NULL
 * with the refusal answered. */
static const wm_revision *wm_lookup_cas(wm_plugin *p, smp_rpc_call *call,
                                        const Wmrpc__WeightIdentity *pid, wm_identity *id,
                                        uint64_t expected)
{
    const wm_revision *rev = wm_lookup(p, call, pid, id);
    if (rev == NULL || !wm_check_cas(p, call, rev, expected)) return NULL;
    return rev;
}

/* The fence of a mutation of rev: nothing of it in flight (wm_check_idle),
 * then the CAS on expected (wm_check_cas). 1, or 0 with the refusal
 * answered. */
static int wm_check_fence(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev,
                          uint64_t expected)
{
    return wm_check_idle(p, call, rev) && wm_check_cas(p, call, rev, expected);
}

/* A request policy over the cluster default: absent fields (0) come from the
 * cluster default, then the whole is validated. */
static int wm_policy_from_pb(const wm_plugin *p, const Wmrpc__WeightPolicy *in, const wm_policy *base,
                             wm_policy *out, char *msg, size_t cap)
{
    *out = base ? *base : p->cluster_policy;
    if (in == NULL) return WM_OK;
    if (in->preferred_residency != 0) {
        if (in->preferred_residency > WM_RES_MIXED) {
            snprintf(msg, cap, "preferred_residency %" PRIu32 " is not HOT (1), COLD (2) or MIXED (3)",
                     in->preferred_residency);
            return WM_EINVALID_ARGUMENT;
        }
        out->preferred = (wm_residency)in->preferred_residency;
    }
    if (in->mixed_hot_ratio != 0.0) out->mixed_hot_ratio = in->mixed_hot_ratio;
    if (in->migration_mode != 0) {
        if (!wm_mode_valid((int)in->migration_mode)) {
            snprintf(msg, cap, "migration_mode %" PRIu32 " is not PINNED (1), MANUAL (2) or AUTO (3)",
                     in->migration_mode);
            return WM_EINVALID_ARGUMENT;
        }
        out->mode = (wm_migration_mode)in->migration_mode;
    }
    return wm_policy_check(out, msg, cap);
}

/* ------------------------------------------------------------------------ */
/* IMPORT_BEGIN                                                              */
/* ------------------------------------------------------------------------ */

/* The group is managed (durable): now append the IMPORTING record. */
static void wm_begin_managed(void *arg, int status)
{
    wm_txn *t = arg;
    wm_plugin *p = t->p;
    wm_pending_remove(p, t);
    if (status < 0) {
        wm_reply_error(p, t->call, WM_EDURABILITY_FAILED,
                       "could not mark group %s managed (%s); nothing changed", t->group_key,
                       smp_strerror(status));
        wm_txn_free(t);
        return;
    }
    smp_rpc_call *call = t->call;
    wm_submit(p, t, call, WM_REPLY_BEGIN, "import begin");
}

/* Begin an import: validate identity and policy, mark the group managed
 * (durable), then persist the IMPORTING record and answer. A retry for an
 * identity already IMPORTING answers that revision; any other state is
 * CONFLICT. */
static int wm_rpc_import_begin(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    int rc;
    wm_identity id;
    wm_policy pol;
    WM_DECODE(req, Wmrpc__ImportBeginRequest, wmrpc__import_begin_request__unpack, p, call, body,
              len);

    if (!wm_identity_in(p, call, req->identity, &id)) goto free_req;
    if (wm_policy_from_pb(p, req->policy, NULL, &pol, msg, sizeof(msg)) < 0) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "invalid policy: %s", msg);
        goto free_req;
    }
    const wm_revision *rev = wm_store_get(p->store, &id);
    if (rev != NULL) {
        if (rev->availability == WM_AVAIL_IMPORTING && !wm_pending_metadata(p, rev->group_key))
            wm_reply_begin(p, call, rev);
        else if (rev->availability == WM_AVAIL_IMPORTING)
            wm_reply_error(p, call, WM_EBUSY, "%s is changing; retry", rev->group_key);
        else
            wm_reply_error(p, call, WM_ECONFLICT,
                           "revision %s already exists and is %s (a new import needs a new "
                           "weight_generation)",
                           rev->group_key, wm_availability_name((int)rev->availability));
        goto free_req;
    }

    if ((rc = wm_lineage_import_check(p, &id, msg, sizeof(msg))) < 0) {
        wm_reply_error(p, call, rc, "%s", msg);
        goto free_req;
    }
    wm_txn *t = wm_txn_new(p, WM_TXN_UPSERT, "");
    if (t == NULL) {
        wm_reply_error(p, call, SMP_ENOMEM, "out of memory");
        goto free_req;
    }
    wm_revision *r = &t->up.revision;
    r->id = id;
    r->policy = pol;
    r->availability = WM_AVAIL_IMPORTING;
    r->residency = WM_RES_UNKNOWN;
    r->metadata_generation = 1;
    if (wm_group_key(&id, r->group_key, sizeof(r->group_key)) < 0 ||
        wm_manifest_key(&id, r->manifest_key, sizeof(r->manifest_key)) < 0) {
        wm_txn_free(t);
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT,
                       "the identity's keys exceed %d bytes once percent-encoded", WM_KEY_MAX);
        goto free_req;
    }
    snprintf(t->group_key, sizeof(t->group_key), "%s", r->group_key);
    r->created_ms = r->updated_ms = r->last_access_ms = wm_now(p, NULL);
    if (wm_pending_metadata(p, t->group_key)) {
        wm_reply_error(p, call, WM_EBUSY, "an import of %s is starting; retry", t->group_key);
        wm_txn_free(t);
        goto free_req;
    }
    if ((rc = wm_metadata_mutation_check(NULL, r, msg, sizeof(msg))) < 0) {
        wm_txn_free(t);
        wm_reply_error(p, call, rc, "%s", msg);
        goto free_req;
    }
    /* Hold the revision while the group flag becomes durable. */
    t->call = call;
    t->next = p->pending;
    p->pending = t;
    if ((rc = p->api->group_set_managed(p->host, t->group_key, 1, wm_begin_managed, t)) < 0) {
        wm_pending_remove(p, t);
        wm_txn_free(t);
        wm_reply_append_error(p, call, rc, "import begin (marking the group managed)");
    }
free_req:
    wmrpc__import_begin_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* ------------------------------------------------------------------------ */
/* IMPORT_COMMIT                                                             */
/* ------------------------------------------------------------------------ */

typedef struct wm_member_seen {
    char *key;
    uint64_t size;
    smp_data_type type;
    int complete;
    uint8_t checksum[32];
} wm_member_seen;

typedef struct wm_group_scan {
    wm_member_seen *v;
    size_t n, cap;
    size_t limit;        /* stop after this many (more means extra objects) */
    int oom;
    char last[WM_KEY_MAX + 2];
} wm_group_scan;

static int wm_scan_visit(void *arg, const smp_object_info *o)
{
    wm_group_scan *s = arg;
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        wm_member_seen *nv = realloc(s->v, nc * sizeof(*nv));
        if (nv == NULL) {
            s->oom = 1;
            return 1;
        }
        s->v = nv;
        s->cap = nc;
    }
    wm_member_seen *m = &s->v[s->n];
    m->key = strdup(o->key ? o->key : "");
    if (m->key == NULL) {
        s->oom = 1;
        return 1;
    }
    m->size = o->size;
    m->type = o->data_type;
    m->complete = o->complete;
    memcpy(m->checksum, o->checksum, 32);
    snprintf(s->last, sizeof(s->last), "%s", m->key);
    s->n++;
    return s->n >= s->limit ? 1 : 0;
}

static void wm_scan_free(wm_group_scan *s)
{
    for (size_t i = 0; i < s->n; i++) free(s->v[i].key);
    free(s->v);
}

static void wm_hex(const uint8_t *d, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[d[i] >> 4];
        out[2 * i + 1] = hx[d[i] & 15];
    }
    out[2 * n] = '\0';
}

/* Validate the group against the commit request and fill the sealed summary
 * of *r and the affinity *aff (owned by the caller). WM_OK or
 * WM_EINVALID_ARGUMENT with a sentence naming the mismatch. */
static int wm_commit_validate(wm_plugin *p, const Wmrpc__ImportCommitRequest *req, wm_revision *r,
                              wm_affinity *aff, char *msg, size_t cap)
{
    int rc = WM_OK;
    wm_group_scan scan;
    uint64_t *sizes = NULL;
    unsigned char *seen = NULL;
    char **keys = NULL;
    uint64_t count = req->payload_count;
    char hex[65];

    memset(&scan, 0, sizeof(scan));
    if (count == 0 || count > WM_COMMIT_MAX_PAYLOADS) {
        snprintf(msg, cap, "payload_count %" PRIu64 " is outside 1..%u", count, WM_COMMIT_MAX_PAYLOADS);
        return WM_EINVALID_ARGUMENT;
    }
    if (req->manifest_key == NULL || strcmp(req->manifest_key, r->manifest_key) != 0) {
        snprintf(msg, cap, "manifest_key \"%.200s\" is not the revision's canonical manifest key %.200s",
                 req->manifest_key ? req->manifest_key : "", r->manifest_key);
        return WM_EINVALID_ARGUMENT;
    }
    if (req->manifest_sha256.len != WM_SHA256_LEN || req->payload_keys_sha256.len != WM_SHA256_LEN ||
        req->affinity_sha256.len != WM_SHA256_LEN) {
        snprintf(msg, cap, "manifest_sha256, payload_keys_sha256 and affinity_sha256 must be 32 bytes");
        return WM_EINVALID_ARGUMENT;
    }
    if (req->n_units == 0) {
        snprintf(msg, cap, "the affinity summary has no unit");
        return WM_EINVALID_ARGUMENT;
    }
    uint64_t in_group = p->api->group_count(p->host, r->group_key);
    if (in_group != count + 1) {
        snprintf(msg, cap,
                 "group %.200s holds %" PRIu64 " objects; payload_count %" PRIu64
                 " and the manifest make %" PRIu64,
                 r->group_key, in_group, count, count + 1);
        return WM_EINVALID_ARGUMENT;
    }

    /* Read the group in bounded pages. */
    scan.limit = (size_t)count + 2;
    for (;;) {
        size_t before = scan.n;
        size_t page = scan.limit - scan.n < 256 ? scan.limit - scan.n : 256;
        size_t stop = scan.n + page;
        size_t keep_limit = scan.limit;
        scan.limit = stop;
        p->api->group_list(p->host, r->group_key, before ? scan.last : NULL, page, wm_scan_visit,
                           &scan);
        scan.limit = keep_limit;
        if (scan.oom) {
            rc = SMP_ENOMEM;
            goto free_all;
        }
        /* A short page is the end of the group (listing is in key order). */
        if (scan.n - before < page || scan.n >= scan.limit) break;
    }

    sizes = calloc((size_t)count, sizeof(*sizes));
    seen = calloc((size_t)count, 1);
    keys = calloc((size_t)count, sizeof(*keys));
    if (sizes == NULL || seen == NULL || keys == NULL) {
        rc = SMP_ENOMEM;
        goto free_all;
    }
    int manifest_seen = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < scan.n; i++) {
        const wm_member_seen *m = &scan.v[i];
        if (!m->complete) {
            snprintf(msg, cap, "object %.200s in the group is not complete", m->key);
            rc = WM_EINVALID_ARGUMENT;
            goto free_all;
        }
        if (strcmp(m->key, r->manifest_key) == 0) {
            if (m->type != SMP_DATA_METADATA) {
                snprintf(msg, cap, "manifest %.200s is not a METADATA object", m->key);
                rc = WM_EINVALID_ARGUMENT;
                goto free_all;
            }
            if (memcmp(m->checksum, req->manifest_sha256.data, WM_SHA256_LEN) != 0) {
                wm_hex(m->checksum, 32, hex);
                snprintf(msg, cap, "manifest %.200s has SHA-256 %.200s, not the manifest_sha256 committed",
                         m->key, hex);
                rc = WM_EINVALID_ARGUMENT;
                goto free_all;
            }
            manifest_seen = 1;
            continue;
        }
        wm_identity mid;
        wm_key_kind kind;
        uint64_t n = 0;
        if (wm_key_parse(m->key, &mid, &kind, &n) < 0 || kind != WM_KEY_PAYLOAD ||
            wm_identity_cmp(&mid, &r->id) != 0 || n >= count) {
            snprintf(msg, cap, "extra object %.200s in group %.200s (not the manifest nor payload 0..%" PRIu64 ")",
                     m->key, r->group_key, count - 1);
            rc = WM_EINVALID_ARGUMENT;
            goto free_all;
        }
        if (m->type != SMP_DATA_WEIGHT) {
            snprintf(msg, cap, "payload %.200s is not a WEIGHT object", m->key);
            rc = WM_EINVALID_ARGUMENT;
            goto free_all;
        }
        seen[n] = 1;
        sizes[n] = m->size;
        bytes += m->size;
    }
    if (!manifest_seen) {
        snprintf(msg, cap, "manifest %.200s is missing from the group", r->manifest_key);
        rc = WM_EINVALID_ARGUMENT;
        goto free_all;
    }
    for (uint64_t n = 0; n < count; n++) {
        char key[WM_KEY_MAX + 1];
        if (wm_payload_key(&r->id, n, key, sizeof(key)) < 0) {
            snprintf(msg, cap, "payload key %" PRIu64 " exceeds the key limit", n);
            rc = WM_EINVALID_ARGUMENT;
            goto free_all;
        }
        if (!seen[n]) {
            snprintf(msg, cap, "payload %.200s is missing from the group", key);
            rc = WM_EINVALID_ARGUMENT;
            goto free_all;
        }
        if ((keys[n] = strdup(key)) == NULL) {
            rc = SMP_ENOMEM;
            goto free_all;
        }
    }
    if (bytes != req->logical_bytes) {
        snprintf(msg, cap, "payloads hold %" PRIu64 " logical bytes, the commit says %" PRIu64, bytes,
                 req->logical_bytes);
        rc = WM_EINVALID_ARGUMENT;
        goto free_all;
    }
    uint8_t digest[WM_SHA256_LEN];
    if ((rc = wm_payload_keys_digest((const char *const *)keys, (size_t)count, digest)) < 0) goto free_all;
    if (memcmp(digest, req->payload_keys_sha256.data, WM_SHA256_LEN) != 0) {
        snprintf(msg, cap, "payload_keys_sha256 does not match the SHA-256 of the sorted payload keys");
        rc = WM_EINVALID_ARGUMENT;
        goto free_all;
    }

    /* The affinity summary: every unit's bytes from its members' sizes. */
    aff->units = calloc(req->n_units, sizeof(*aff->units));
    if (aff->units == NULL) {
        rc = SMP_ENOMEM;
        goto free_all;
    }
    aff->n_units = req->n_units;
    for (size_t u = 0; u < req->n_units; u++) {
        const Wmrpc__AffinityUnit *in = req->units[u];
        wm_affinity_unit *out = &aff->units[u];
        uint64_t ub = 0;
        if (in == NULL || in->n_members == 0) {
            snprintf(msg, cap, "affinity unit %zu has no member", u);
            rc = WM_EINVALID_ARGUMENT;
            goto free_all;
        }
        out->members = calloc(in->n_members, sizeof(char *));
        if (out->members == NULL) {
            rc = SMP_ENOMEM;
            goto free_all;
        }
        out->n_members = in->n_members;
        out->logical_bytes = in->logical_bytes;
        for (size_t j = 0; j < in->n_members; j++) {
            wm_identity mid;
            wm_key_kind kind;
            uint64_t n = 0;
            const char *mk = in->members[j] ? in->members[j] : "";
            if (wm_key_parse(mk, &mid, &kind, &n) < 0 || kind != WM_KEY_PAYLOAD ||
                wm_identity_cmp(&mid, &r->id) != 0 || n >= count) {
                snprintf(msg, cap, "affinity unit %zu member \"%.200s\" is not a payload of the revision", u,
                         mk);
                rc = WM_EINVALID_ARGUMENT;
                goto free_all;
            }
            if ((out->members[j] = strdup(mk)) == NULL) {
                rc = SMP_ENOMEM;
                goto free_all;
            }
            ub += sizes[n];
        }
        if (ub != in->logical_bytes) {
            snprintf(msg, cap, "affinity unit %zu says %" PRIu64 " logical bytes, its members hold %" PRIu64,
                     u, in->logical_bytes, ub);
            rc = WM_EINVALID_ARGUMENT;
            goto free_all;
        }
    }
    memcpy(r->manifest_sha256, req->manifest_sha256.data, WM_SHA256_LEN);
    memcpy(r->payload_keys_sha256, req->payload_keys_sha256.data, WM_SHA256_LEN);
    memcpy(r->affinity_sha256, req->affinity_sha256.data, WM_SHA256_LEN);
    r->payload_count = count;
    r->logical_bytes = bytes;
    r->affinity_count = req->n_units;
    if ((rc = wm_affinity_check(aff, r, msg, cap)) < 0) goto free_all;
free_all:
    if (keys != NULL)
        for (uint64_t n = 0; n < count; n++) free(keys[n]);
    free(keys);
    free(seen);
    free(sizes);
    wm_scan_free(&scan);
    return rc;
}

/* The commit repeats an already sealed summary exactly. */
static int wm_commit_same(const wm_revision *r, const Wmrpc__ImportCommitRequest *req)
{
    return req->payload_count == r->payload_count && req->logical_bytes == r->logical_bytes &&
           req->manifest_sha256.len == WM_SHA256_LEN &&
           memcmp(req->manifest_sha256.data, r->manifest_sha256, WM_SHA256_LEN) == 0 &&
           req->payload_keys_sha256.len == WM_SHA256_LEN &&
           memcmp(req->payload_keys_sha256.data, r->payload_keys_sha256, WM_SHA256_LEN) == 0 &&
           req->affinity_sha256.len == WM_SHA256_LEN &&
           memcmp(req->affinity_sha256.data, r->affinity_sha256, WM_SHA256_LEN) == 0 &&
           req->n_units == r->affinity_count;
}

/* Fill a new MIGRATING operation toward `target`. */
static void wm_op_migrating(wm_plugin *p, wm_operation *op, const wm_revision *r, wm_residency target,
                            double ratio, uint64_t now)
{
    memset(op, 0, sizeof(*op));
    op->id = wm_store_reserve_operation_id(p->store);
    op->kind = WM_OPK_MIGRATING;
    op->id_of = r->id;
    op->target = target;
    op->target_hot_ratio = target == WM_RES_MIXED ? ratio : 0.0;
    op->state = WM_OPS_RUNNING;
    op->created_ms = op->updated_ms = now;
}

/* A new UPSERT record of rev for a waiting call: a copy of rev one metadata
 * generation on, updated now (wm_now). NULL with "out of memory" answered. */
static wm_txn *wm_txn_next(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev)
{
    wm_txn *t = wm_txn_new(p, WM_TXN_UPSERT, rev->group_key);
    if (t == NULL) {
        wm_reply_error(p, call, SMP_ENOMEM, "out of memory");
        return NULL;
    }
    wm_revision *r = &t->up.revision;
    *r = *rev;
    r->metadata_generation = rev->metadata_generation + 1;
    r->updated_ms = wm_now(p, rev);
    return t;
}

/* Attach to t's revision its one operation: MIGRATING toward target over
 * all its payloads and bytes, created at the revision's updated_ms. */
static void wm_txn_migrating(wm_plugin *p, wm_txn *t, wm_residency target, double ratio)
{
    wm_revision *r = &t->up.revision;
    wm_op_migrating(p, &t->ops[0], r, target, ratio, r->updated_ms);
    t->ops[0].members_total = r->payload_count;
    t->ops[0].bytes_total = r->logical_bytes;
    r->operation_id = t->ops[0].id;
    t->up.n_operations = 1;
}

/* Make t's revision DELETING with its one operation: DELETING over members
 * objects and bytes logical bytes, created at the revision's updated_ms. */
static void wm_txn_deleting(wm_plugin *p, wm_txn *t, uint64_t members, uint64_t bytes)
{
    wm_revision *r = &t->up.revision;
    wm_operation *op = &t->ops[0];
    r->availability = WM_AVAIL_DELETING;
    memset(op, 0, sizeof(*op));
    op->id = wm_store_reserve_operation_id(p->store);
    op->kind = WM_OPK_DELETING;
    op->id_of = r->id;
    op->state = WM_OPS_RUNNING;
    op->members_total = members;
    op->bytes_total = bytes;
    op->created_ms = op->updated_ms = r->updated_ms;
    r->operation_id = op->id;
    t->up.n_operations = 1;
}

/* The prepared record t may follow rev (wm_metadata_mutation_check, its
 * sentence into msg[cap]): 1, or 0 with t freed and the refusal answered as
 * "<noun> of <group> refused: <why>". */
static int wm_mutation_ok(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev, wm_txn *t,
                          const char *noun, char *msg, size_t cap)
{
    int rc = wm_metadata_mutation_check(rev, &t->up.revision, msg, cap);
    if (rc < 0) {
        wm_txn_free(t);
        wm_reply_error(p, call, rc, "%s of %s refused: %s", noun, rev->group_key, msg);
        return 0;
    }
    return 1;
}

/* Check the prepared record t against rev (wm_mutation_ok), then submit it
 * for call with a MetadataResponse (wm_submit, `what` naming an append
 * failure). t is consumed either way; the call is always answered. */
static void wm_check_submit(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev, wm_txn *t,
                            const char *noun, const char *what, char *msg, size_t cap)
{
    if (wm_mutation_ok(p, call, rev, t, noun, msg, cap))
        wm_submit(p, t, call, WM_REPLY_METADATA, what);
}

/* Seal and publish an import: CAS on the IMPORTING revision, validate the
 * group against the summary (wm_commit_validate), then one durable record
 * carries READY + HOT, the sealed summary and affinity, and -- when the
 * preferred residency is not HOT -- the initial MIGRATING operation toward
 * it. A retry on a published revision with the same summary answers it
 * unchanged; a different summary is CONFLICT. A mismatch is
 * INVALID_ARGUMENT naming it and changes nothing. */
static int wm_rpc_import_commit(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[768];
    int rc;
    wm_identity id;
    WM_DECODE(req, Wmrpc__ImportCommitRequest, wmrpc__import_commit_request__unpack, p, call, body,
              len);
    const wm_revision *rev = wm_lookup(p, call, req->identity, &id);
    if (rev == NULL) goto free_req;
    if (rev->availability != WM_AVAIL_IMPORTING) {
        if ((rev->availability == WM_AVAIL_READY || rev->availability == WM_AVAIL_DEGRADED) &&
            wm_commit_same(rev, req))
            wm_reply_metadata(p, call, rev); /* a retry: the committed result */
        else
            wm_reply_error(p, call, WM_ECONFLICT,
                           "revision %s is %s; only an IMPORTING revision can be committed (a "
                           "retry must repeat the committed summary)",
                           rev->group_key, wm_availability_name((int)rev->availability));
        goto free_req;
    }
    if (!wm_check_fence(p, call, rev, req->expected_metadata_generation)) goto free_req;

    wm_txn *t = wm_txn_new(p, WM_TXN_UPSERT, rev->group_key);
    if (t == NULL) {
        wm_reply_error(p, call, SMP_ENOMEM, "out of memory");
        goto free_req;
    }
    wm_revision *r = &t->up.revision;
    *r = *rev;
    msg[0] = '\0';
    if ((rc = wm_commit_validate(p, req, r, &t->up.affinity, msg, sizeof(msg))) < 0) {
        wm_affinity_clear(&t->up.affinity);
        wm_txn_free(t);
        if (rc == SMP_ENOMEM) wm_reply_error(p, call, rc, "out of memory validating the group");
        else wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "commit of %s refused: %s", rev->group_key, msg);
        goto free_req;
    }
    t->owns_affinity = 1;
    t->up.has_affinity = 1;
    uint64_t now = wm_now(p, rev);
    r->availability = WM_AVAIL_READY;
    r->residency = WM_RES_HOT;
    r->observed_hot_ratio = 1.0;
    r->metadata_generation = rev->metadata_generation + 1;
    r->updated_ms = now;
    if (r->policy.preferred != WM_RES_HOT)
        wm_txn_migrating(p, t, r->policy.preferred, r->policy.mixed_hot_ratio);
    wm_check_submit(p, call, rev, t, "commit", "import commit", msg, sizeof(msg));
free_req:
    wmrpc__import_commit_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* ------------------------------------------------------------------------ */
/* IMPORT_ABORT                                                              */
/* ------------------------------------------------------------------------ */

/* Abort an import. An empty group: the revision becomes a DELETED + ABSENT
 * tombstone at once (queryable; the identity is spent, a new import needs a
 * new weight_generation). A group holding uploads: DELETING with a DELETING
 * operation the lifecycle runs (members removed with remove_object, then the
 * tombstone). A retry on a DELETING or DELETED revision answers it as it is.
 * Record 9 (the record leaving the table) is kept for tombstone expiry. */
static int wm_rpc_import_abort(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    int rc;
    wm_identity id;
    WM_DECODE(req, Wmrpc__IdentityRequest, wmrpc__identity_request__unpack, p, call, body, len);
    const wm_revision *rev = wm_lookup(p, call, req->identity, &id);
    if (rev == NULL) goto free_req;
    if (rev->availability == WM_AVAIL_DELETING || rev->availability == WM_AVAIL_DELETED) {
        wm_reply_metadata(p, call, rev);
        goto free_req;
    }
    if (rev->availability != WM_AVAIL_IMPORTING) {
        wm_reply_error(p, call, WM_ECONFLICT, "revision %s is %s; only an import can be aborted",
                       rev->group_key, wm_availability_name((int)rev->availability));
        goto free_req;
    }
    if ((rc = wm_lineage_abort_check(p, &id, msg, sizeof(msg))) < 0) {
        wm_reply_error(p, call, rc, "%s", msg);
        goto free_req;
    }
    if (!wm_check_fence(p, call, rev, req->expected_metadata_generation)) goto free_req;
    uint64_t members = p->api->group_count(p->host, rev->group_key);
    wm_txn *t = wm_txn_next(p, call, rev);
    if (t == NULL) goto free_req;
    if (members == 0) {
        /* Nothing was uploaded: straight to the tombstone. */
        t->up.revision.availability = WM_AVAIL_DELETED;
        t->up.revision.residency = WM_RES_ABSENT;
    } else {
        wm_txn_deleting(p, t, members, 0);
    }
    wm_check_submit(p, call, rev, t, "abort", "import abort", msg, sizeof(msg));
free_req:
    wmrpc__identity_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* ------------------------------------------------------------------------ */
/* Queries                                                                   */
/* ------------------------------------------------------------------------ */

/* The revision in any state (tombstones included) and its active
 * operation. NOT_FOUND for an unknown identity. */
static int wm_rpc_get_metadata(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    wm_identity id;
    WM_DECODE(req, Wmrpc__IdentityRequest, wmrpc__identity_request__unpack, p, call, body, len);
    const wm_revision *rev = wm_lookup(p, call, req->identity, &id);
    if (rev != NULL) wm_reply_metadata(p, call, rev);
    wmrpc__identity_request__free_unpacked(req, NULL);
    return SMP_OK;
}

static int wm_key_readable(wm_plugin *p, const char *key)
{
    smp_object_info info;
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    if (p->api->object_get(p->host, key, &info) < 0) return 0;
    return info.complete && info.memory_replicas_readable + info.cold_replicas_readable > 0;
}

/* True only for a READY revision whose manifest and every payload have a
 * readable replica now (whatever the residency, during a migration too). */
static int wm_rpc_is_exist(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    wm_identity id;
    Wmrpc__IsExistResponse resp = WMRPC__IS_EXIST_RESPONSE__INIT;
    WM_DECODE(req, Wmrpc__IdentityRequest, wmrpc__identity_request__unpack, p, call, body, len);
    if (!wm_identity_in(p, call, req->identity, &id)) goto free_req;
    const wm_revision *rev = wm_store_get(p->store, &id);
    if (rev != NULL && rev->availability == WM_AVAIL_READY) {
        const wm_affinity *aff = wm_store_affinity(p->store, &id);
        int ok = aff != NULL && aff->n_units > 0 && wm_key_readable(p, rev->manifest_key);
        for (size_t u = 0; ok && u < aff->n_units; u++)
            for (size_t j = 0; ok && j < aff->units[u].n_members; j++)
                ok = wm_key_readable(p, aff->units[u].members[j]);
        resp.exists = ok;
    }
    wm_reply_packed(p, call, &resp.base);
free_req:
    wmrpc__identity_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* The logical bytes sealed at commit; NOT_READY before READY or once
 * deletion started. */
static int wm_rpc_get_size(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    wm_identity id;
    Wmrpc__SizeResponse resp = WMRPC__SIZE_RESPONSE__INIT;
    WM_DECODE(req, Wmrpc__IdentityRequest, wmrpc__identity_request__unpack, p, call, body, len);
    const wm_revision *rev = wm_lookup(p, call, req->identity, &id);
    if (rev != NULL) {
        if (rev->availability == WM_AVAIL_READY || rev->availability == WM_AVAIL_DEGRADED) {
            resp.logical_bytes = rev->logical_bytes;
            wm_reply_packed(p, call, &resp.base);
        } else {
            wm_reply_error(p, call, WM_ENOT_READY, "revision %s is %s; its size is known once READY",
                           rev->group_key, wm_availability_name((int)rev->availability));
        }
    }
    wmrpc__identity_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* Whether a revision is shown by LIST: never while IMPORTING (not
 * discoverable), tombstones only on request. */
static int wm_list_visible(const wm_revision *r, int include_deleted)
{
    if (r->availability == WM_AVAIL_IMPORTING) return 0;
    if (r->availability == WM_AVAIL_DELETED) return include_deleted;
    return 1;
}

/* LIST: revisions of a tenant, optionally of one namespace and resource, in
 * identity order. The page token is the group key of the last revision
 * returned (stable across inserts and deletes). A page examines at most
 * 8 x limit records, so a page may be short with a token to go on. */
static int wm_rpc_list(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    Wmrpc__ListResponse resp = WMRPC__LIST_RESPONSE__INIT;
    wm_pb_meta *metas = NULL;
    Wmrpc__WeightMetadata **ptrs = NULL;
    char token[WM_KEY_MAX + 1] = "";
    WM_DECODE(req, Wmrpc__ListRequest, wmrpc__list_request__unpack, p, call, body, len);

    const char *tenant = req->tenant && req->tenant[0] ? req->tenant : "default";
    const char *ns = req->namespace_id ? req->namespace_id : "";
    const char *res = req->resource_id ? req->resource_id : "";
    if (res[0] && !ns[0]) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "resource_id filter needs namespace_id");
        goto free_req;
    }
    if (strlen(tenant) > WM_ID_COMPONENT_MAX || strlen(ns) > WM_ID_COMPONENT_MAX ||
        strlen(res) > WM_ID_COMPONENT_MAX) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "a list filter is longer than %d bytes",
                       WM_ID_COMPONENT_MAX);
        goto free_req;
    }
    uint32_t limit = req->limit ? req->limit : WM_LIST_LIMIT_DEFAULT;
    if (limit > WM_LIST_LIMIT_MAX) limit = WM_LIST_LIMIT_MAX;

    wm_identity start;
    memset(&start, 0, sizeof(start));
    snprintf(start.tenant_id, sizeof(start.tenant_id), "%s", tenant);
    snprintf(start.ns, sizeof(start.ns), "%s", ns);
    snprintf(start.resource_id, sizeof(start.resource_id), "%s", res);
    size_t i;
    if (req->page_token && req->page_token[0]) {
        wm_identity after;
        wm_key_kind kind;
        if (wm_key_parse(req->page_token, &after, &kind, NULL) < 0 || kind != WM_KEY_GROUP ||
            strcmp(after.tenant_id, tenant) != 0 || (ns[0] && strcmp(after.ns, ns) != 0) ||
            (res[0] && strcmp(after.resource_id, res) != 0)) {
            wm_reply_error(p, call, WM_EINVALID_ARGUMENT,
                           "page_token is not a token of this listing");
            goto free_req;
        }
        i = wm_store_revision_lower_bound(p->store, &after);
        const wm_revision *at = wm_store_revision_at(p->store, i);
        if (at != NULL && wm_identity_cmp(&at->id, &after) == 0) i++;
    } else {
        i = wm_store_revision_lower_bound(p->store, &start);
    }

    metas = calloc(limit, sizeof(*metas));
    ptrs = calloc(limit, sizeof(*ptrs));
    if (metas == NULL || ptrs == NULL) {
        wm_reply_error(p, call, SMP_ENOMEM, "out of memory");
        goto free_req;
    }
    size_t examined = 0, n = 0, total = wm_store_revision_count(p->store);
    for (; i < total && n < limit; i++) {
        const wm_revision *r = wm_store_revision_at(p->store, i);
        if (strcmp(r->id.tenant_id, tenant) != 0 || (ns[0] && strcmp(r->id.ns, ns) != 0) ||
            (res[0] && strcmp(r->id.resource_id, res) != 0))
            break; /* past the filtered range (identity order) */
        examined++;
        if (wm_list_visible(r, req->include_deleted)) {
            wm_pb_meta_set(&metas[n], r);
            ptrs[n] = &metas[n].m;
            n++;
        }
        snprintf(token, sizeof(token), "%s", r->group_key);
        if (examined >= (size_t)limit * 8) {
            i++;
            break;
        }
    }
    /* More may follow when the scan stopped inside the range. */
    int more = 0;
    if (i < total) {
        const wm_revision *r = wm_store_revision_at(p->store, i);
        more = strcmp(r->id.tenant_id, tenant) == 0 && (!ns[0] || strcmp(r->id.ns, ns) == 0) &&
               (!res[0] || strcmp(r->id.resource_id, res) == 0);
    }
    resp.n_revisions = n;
    resp.revisions = ptrs;
    resp.next_page_token = more ? token : (char *)"";
    wm_reply_packed(p, call, &resp.base);
free_req:
    free(metas);
    free(ptrs);
    wmrpc__list_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* An operation by id, active or ended. NOT_FOUND when unknown. */
static int wm_rpc_get_operation(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    Wmrpc__OperationResponse resp = WMRPC__OPERATION_RESPONSE__INIT;
    wm_pb_op op;
    WM_DECODE(req, Wmrpc__OperationRequest, wmrpc__operation_request__unpack, p, call, body, len);
    const wm_operation *o = wm_store_operation(p->store, req->operation_id);
    if (o == NULL) {
        wm_reply_error(p, call, WM_ENOT_FOUND, "no operation %" PRIu64, req->operation_id);
    } else {
        wm_pb_op_set(&op, o);
        resp.operation = &op.m;
        wm_reply_packed(p, call, &resp.base);
    }
    wmrpc__operation_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* ------------------------------------------------------------------------ */
/* UPDATE_POLICY, MIGRATE, REMOVE                                            */
/* ------------------------------------------------------------------------ */

/* Replace the policy of one revision (absent fields keep the revision's
 * current value). Allowed while IMPORTING, READY or DEGRADED. */
static int wm_rpc_update_policy(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    wm_identity id;
    wm_policy pol;
    WM_DECODE(req, Wmrpc__UpdatePolicyRequest, wmrpc__update_policy_request__unpack, p, call, body,
              len);
    const wm_revision *rev =
        wm_lookup_cas(p, call, req->identity, &id, req->expected_metadata_generation);
    if (rev == NULL) goto free_req;
    if (req->policy == NULL) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "policy is missing");
        goto free_req;
    }
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
    wm_txn *t = wm_txn_next(p, call, rev);
    if (t == NULL) goto free_req;
    t->up.revision.policy = pol;
    wm_check_submit(p, call, rev, t, "policy update", "policy update", msg, sizeof(msg));
free_req:
    wmrpc__update_policy_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* Create an explicit migration. READY revisions only; one active operation
 * (BUSY); PINNED revisions refuse any residency change once their initial
 * convergence is over (POLICY_UNSATISFIABLE: the policy, not the state, is
 * what forbids it). */
static int wm_rpc_migrate(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    wm_identity id;
    WM_DECODE(req, Wmrpc__MigrateRequest, wmrpc__migrate_request__unpack, p, call, body, len);
    const wm_revision *rev =
        wm_lookup_cas(p, call, req->identity, &id, req->expected_metadata_generation);
    if (rev == NULL) goto free_req;
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
    if (rev->operation_id != 0 || wm_pending_metadata(p, rev->group_key)) {
        wm_reply_error(p, call, WM_EBUSY, "revision %s already has active operation %" PRIu64,
                       rev->group_key, rev->operation_id);
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
    wm_check_submit(p, call, rev, t, "migration", "migrate", msg, sizeof(msg));
free_req:
    wmrpc__migrate_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* Accept an explicit removal: READY/DEGRADED -> DELETING with a DELETING
 * operation the lifecycle executes. BUSY while a lease or an operation is
 * active. A retry on DELETING or DELETED answers the revision as it is. */
static int wm_rpc_remove(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    wm_identity id;
    WM_DECODE(req, Wmrpc__IdentityRequest, wmrpc__identity_request__unpack, p, call, body, len);
    const wm_revision *rev = wm_lookup(p, call, req->identity, &id);
    if (rev == NULL) goto free_req;
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
    if (rev->operation_id != 0 || wm_pending_metadata(p, rev->group_key)) {
        wm_reply_error(p, call, WM_EBUSY, "revision %s has active operation %" PRIu64, rev->group_key,
                       rev->operation_id);
        goto free_req;
    }
    wm_txn *t = wm_txn_next(p, call, rev);
    if (t == NULL) goto free_req;
    wm_txn_deleting(p, t, rev->payload_count + 1, rev->logical_bytes);
    wm_check_submit(p, call, rev, t, "removal", "remove", msg, sizeof(msg));
free_req:
    wmrpc__identity_request__free_unpacked(req, NULL);
    return SMP_OK;
}

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

/* Grant a lease on a READY revision, fenced on its metadata generation. For
 * an AUTO revision observed COLD or MIXED without an active operation, a
 * promotion (MIGRATING toward the preferred residency) is made durable
 * first, then the lease record; the answer follows the lease record. */
static int wm_rpc_lease_acquire(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    wm_identity id;
    uint64_t ttl;
    WM_DECODE(req, Wmrpc__LeaseRequest, wmrpc__lease_request__unpack, p, call, body, len);
    const wm_revision *rev = wm_lookup(p, call, req->identity, &id);
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
        (rev->residency == WM_RES_COLD || rev->residency == WM_RES_MIXED))
        promote = wm_auto_promotion_target(rev->residency, rev->policy.preferred);
    if (promote == WM_RES_UNKNOWN) {
        wm_submit(p, lt, call, WM_REPLY_LEASE, "lease acquire");
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
    lt->lease.metadata_generation = r->metadata_generation;
    lt->call = NULL;
    lt->reply = WM_REPLY_LEASE;
    t->then = lt;
    p->auto_triggers[WM_AUTO_PROMOTE_ON_ACCESS]++;
    wm_submit(p, t, call, WM_REPLY_LEASE, "lease acquire (promotion)");
free_req:
    wmrpc__lease_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* Extend a live lease of the named revision (new expiry: now + ttl).
 * LEASE_EXPIRED when the lease is unknown, expired (even if not swept yet),
 * ending, of another revision, or its revision is retired by a
 * replacement (wm_revision_fenced). Durable before the answer. */
static int wm_rpc_lease_renew(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    wm_identity id;
    uint64_t ttl;
    WM_DECODE(req, Wmrpc__LeaseRequest, wmrpc__lease_request__unpack, p, call, body, len);
    if (!wm_identity_in(p, call, req->identity, &id)) goto free_req;
    if (wm_ttl(req, &ttl, msg, sizeof(msg)) < 0) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "%s", msg);
        goto free_req;
    }
    uint64_t now = wm_now(p, NULL);
    const wm_lease *l = wm_store_lease(p->store, req->lease_id);
    if (l == NULL || wm_identity_cmp(&l->id_of, &id) != 0 || l->expiry_ms <= now ||
        wm_pending_lease_end(p, l->id)) {
        wm_reply_error(p, call, WM_ELEASE_EXPIRED, "lease %" PRIu64 " is expired or unknown",
                       req->lease_id);
        goto free_req;
    }
    const wm_revision *rev = wm_store_get(p->store, &id);
    if (rev == NULL || wm_revision_fenced(p, rev)) {
        wm_reply_error(p, call, WM_ELEASE_EXPIRED,
                       "lease %" PRIu64 " cannot be renewed: the revision is retired",
                       req->lease_id);
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
 * succeeds with an empty response: the caller's goal holds. */
static int wm_rpc_lease_release(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    wm_identity id;
    WM_DECODE(req, Wmrpc__LeaseRequest, wmrpc__lease_request__unpack, p, call, body, len);
    if (!wm_identity_in(p, call, req->identity, &id)) goto free_req;
    const wm_lease *l = wm_store_lease(p->store, req->lease_id);
    if (l == NULL || wm_pending_lease_end(p, l->id)) {
        wm_reply_lease(p, call, NULL, wm_store_get(p->store, &id));
        goto free_req;
    }
    if (wm_identity_cmp(&l->id_of, &id) != 0) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "lease %" PRIu64 " belongs to another revision",
                       req->lease_id);
        goto free_req;
    }
    const wm_revision *rev = wm_store_get(p->store, &id);
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

/* ------------------------------------------------------------------------ */
/* Registration and metrics                                                  */
/* ------------------------------------------------------------------------ */

#define M(id, name, fn) {sizeof(smp_rpc_method), id, name, fn}
static const smp_rpc_method wm_methods[] = {
    M(WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_BEGIN, "IMPORT_BEGIN", wm_rpc_import_begin),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_COMMIT, "IMPORT_COMMIT", wm_rpc_import_commit),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_ABORT, "IMPORT_ABORT", wm_rpc_import_abort),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, "GET_METADATA", wm_rpc_get_metadata),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_IS_EXIST, "IS_EXIST", wm_rpc_is_exist),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_GET_SIZE, "GET_SIZE", wm_rpc_get_size),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_LIST, "LIST", wm_rpc_list),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_UPDATE_POLICY, "UPDATE_POLICY", wm_rpc_update_policy),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, "LEASE_ACQUIRE", wm_rpc_lease_acquire),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, "LEASE_RENEW", wm_rpc_lease_renew),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, "LEASE_RELEASE", wm_rpc_lease_release),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_MIGRATE, "MIGRATE", wm_rpc_migrate),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_GET_OPERATION, "GET_OPERATION", wm_rpc_get_operation),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, "REMOVE", wm_rpc_remove),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_UPSERT_BEGIN, "UPSERT_BEGIN", wm_rpc_upsert_begin),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_UPSERT_STATUS, "UPSERT_STATUS", wm_rpc_upsert_status),
};
#undef M

static const smp_rpc_service wm_service = {
    sizeof(smp_rpc_service), WM_RPC_SERVICE_ID, "weight", wm_methods,
    sizeof(wm_methods) / sizeof(wm_methods[0]),
};

static const char *const wm_l_availability[] = {"availability", NULL};
static const char *const wm_l_residency[] = {"residency", NULL};
static const char *const wm_l_reason[] = {"reason", NULL};
static const char *const wm_l_auto[] = {"direction", "reason", NULL};

typedef struct wm_metric_spec {
    smp_metric_kind kind;
    const char *name;
    const char *help;
    const char *const *labels;
    size_t offset;
} wm_metric_spec;

static const wm_metric_spec wm_metric_specs[] = {
    {SMP_METRIC_GAUGE, "weight_revisions", "Weight revisions by availability", wm_l_availability,
     offsetof(wm_plugin, m_revisions)},
    {SMP_METRIC_GAUGE, "weight_revisions_by_residency", "Weight revisions by observed residency",
     wm_l_residency, offsetof(wm_plugin, m_residency)},
    {SMP_METRIC_GAUGE, "weight_operations_active", "Weight revisions with an active operation", NULL,
     offsetof(wm_plugin, m_active_ops)},
    {SMP_METRIC_COUNTER, "weight_operation_failures_total", "Weight operation attempts that failed",
     NULL, offsetof(wm_plugin, m_op_failures)},
    {SMP_METRIC_COUNTER, "weight_operation_retries_total", "Weight operation attempts retried", NULL,
     offsetof(wm_plugin, m_op_retries)},
    {SMP_METRIC_COUNTER, "weight_migration_processed_bytes_total",
     "Logical bytes moved by weight migrations", NULL, offsetof(wm_plugin, m_mig_processed)},
    {SMP_METRIC_GAUGE, "weight_migration_remaining_bytes",
     "Logical bytes active weight migrations still have to move", NULL,
     offsetof(wm_plugin, m_mig_remaining)},
    {SMP_METRIC_GAUGE, "weight_leases_active", "Active weight revision leases", NULL,
     offsetof(wm_plugin, m_leases_active)},
    {SMP_METRIC_COUNTER, "weight_leases_expired_total", "Weight revision leases ended by expiry",
     NULL, offsetof(wm_plugin, m_leases_expired)},
    {SMP_METRIC_COUNTER, "weight_auto_migrations_total",
     "AUTO promotions and demotions by trigger", wm_l_auto, offsetof(wm_plugin, m_auto_triggers)},
    {SMP_METRIC_COUNTER, "weight_guard_skips_total",
     "Generic store actions on managed weight groups refused by the guard", wm_l_reason,
     offsetof(wm_plugin, m_guard_skips)},
    {SMP_METRIC_COUNTER, "weight_migrations_completed_total",
     "Weight migrations that reached their target", NULL, offsetof(wm_plugin, m_mig_completed)},
    {SMP_METRIC_COUNTER, "weight_migration_duration_seconds_total",
     "Time from creation to completion of weight migrations, summed", NULL,
     offsetof(wm_plugin, m_mig_duration)},
};

static const char *const wm_guard_reason_names[SMP_GUARD_REASON_MAX + 1] = {
    "none", "batch_evict", "quota_evict", "remove_key", "remove_all", "remove_pattern",
    "stale_put_cleanup", "cold_evict", "put_into_group", "upsert_into_group",
};

void wm_metrics_refresh(wm_plugin *p)
{
    const smp_host_api *a = p->api;
    wm_store_stats s;
    if (p->m_revisions == NULL) return;
    wm_store_stats_get(p->store, &s);
    for (int v = WM_AVAIL_IMPORTING; v <= WM_AVAIL_DELETED; v++) {
        const char *l[1] = {wm_availability_name(v)};
        a->metric_set(p->m_revisions, l, (double)s.by_availability[v]);
    }
    for (int v = WM_RES_UNKNOWN; v <= WM_RES_ABSENT; v++) {
        const char *l[1] = {wm_residency_name(v)};
        a->metric_set(p->m_residency, l, (double)s.by_residency[v]);
    }
    a->metric_set(p->m_active_ops, NULL, (double)s.active_operations);
    a->metric_set(p->m_op_failures, NULL, (double)p->op_failures);
    a->metric_set(p->m_op_retries, NULL, (double)p->op_retries);
    a->metric_set(p->m_mig_processed, NULL, (double)p->migration_bytes_processed);
    uint64_t remaining = 0;
    size_t n = wm_store_revision_count(p->store);
    for (size_t i = 0; i < n; i++) {
        const wm_revision *r = wm_store_revision_at(p->store, i);
        const wm_operation *o = r->operation_id ? wm_store_operation(p->store, r->operation_id) : NULL;
        if (o != NULL && o->kind == WM_OPK_MIGRATING) remaining += o->bytes_total - o->bytes_done;
    }
    a->metric_set(p->m_mig_remaining, NULL, (double)remaining);
    a->metric_set(p->m_mig_completed, NULL, (double)p->migrations_completed);
    a->metric_set(p->m_mig_duration, NULL, (double)p->migration_ms_total / 1000.0);
    a->metric_set(p->m_leases_active, NULL, (double)s.leases);
    a->metric_set(p->m_leases_expired, NULL, (double)p->leases_expired);
    {
        const char *l[2] = {"promote", "access"};
        a->metric_set(p->m_auto_triggers, l, (double)p->auto_triggers[WM_AUTO_PROMOTE_ON_ACCESS]);
        l[0] = "demote";
        l[1] = "memory_pressure";
        a->metric_set(p->m_auto_triggers, l, (double)p->auto_triggers[WM_AUTO_DEMOTE_ON_PRESSURE]);
        l[0] = "promote";
        l[1] = "pressure_relief";
        a->metric_set(p->m_auto_triggers, l, (double)p->auto_triggers[WM_AUTO_PROMOTE_ON_RELIEF]);
    }
    for (int r = 1; r <= SMP_GUARD_REASON_MAX; r++) {
        const char *l[1] = {wm_guard_reason_names[r]};
        a->metric_set(p->m_guard_skips, l, (double)p->guard_skips[r]);
    }
    wm_lineage_metrics(p);
}

/* The cluster default policy from the master's configuration. */
static int wm_read_cluster_policy(wm_plugin *p)
{
    smp_config_value pref, ratio, mode;
    char msg[256];
    memset(&pref, 0, sizeof(pref));
    memset(&ratio, 0, sizeof(ratio));
    memset(&mode, 0, sizeof(mode));
    pref.struct_size = ratio.struct_size = mode.struct_size = sizeof(smp_config_value);
    p->cluster_policy = wm_policy_default();
    if (p->api->config_get(p->host, SMP_CONFIG_CLUSTER, "default_weight_preferred_residency", &pref) < 0 ||
        p->api->config_get(p->host, SMP_CONFIG_CLUSTER, "default_weight_mixed_hot_ratio", &ratio) < 0 ||
        p->api->config_get(p->host, SMP_CONFIG_CLUSTER, "default_weight_migration_mode", &mode) < 0)
        return WM_OK; /* a host without the keys: the built-in default */
    if (wm_policy_from_names(pref.s, ratio.d, mode.s, &p->cluster_policy, msg, sizeof(msg)) < 0) {
        p->api->log(p->host, SMP_LOG_ERROR, "cluster default weight policy refused: %s", msg);
        return WM_EINVALID_ARGUMENT;
    }
    return WM_OK;
}

int wm_mgmt_register(wm_plugin *p)
{
    int rc;
    if ((rc = wm_read_cluster_policy(p)) < 0) return rc;
    if ((p->api->host_caps & SMP_HOST_CAP_RPC_DISPATCH) &&
        (rc = p->api->register_rpc_service(p->host, &wm_service)) < 0)
        return rc;
    if (p->api->host_caps & SMP_HOST_CAP_METRICS) {
        for (size_t i = 0; i < sizeof(wm_metric_specs) / sizeof(wm_metric_specs[0]); i++) {
            const wm_metric_spec *s = &wm_metric_specs[i];
            smp_metric_desc d = {sizeof(smp_metric_desc), s->kind, s->name, s->help, s->labels};
            smp_metric **slot = (smp_metric **)((char *)p + s->offset);
            if ((rc = p->api->register_metric(p->host, &d, slot)) < 0) return rc;
        }
    }
    return wm_lineage_register(p); /* last: nothing after it can fail */
}
