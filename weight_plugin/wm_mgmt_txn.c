/* wm_mgmt_txn.c -- how a management RPC becomes a durable record.
 *
 * Every mutation the RPCs make is a prepared record (wm_txn): the complete
 * post-mutation state of one revision or lease. This file keeps the list of
 * records appended but not yet durable, appends them, applies each from its
 * durable callback with the same function replay uses and only then answers
 * the waiting call (prepare -> append -> publish). While a record of
 * a revision is in flight, other mutations of that revision answer BUSY, so
 * each record advances the metadata generation by exactly one. It also
 * holds what every handler needs around that: the reply encoders, request
 * decoding (identity, policy), the lookup and CAS fences, and the builders
 * of the next record of a revision. Errors travel as the reply status (WM_E*
 * or SMP_E*) with a UTF-8 sentence naming the cause as the body. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weight_lineage.h"
#include "weight_residency_planner.h"
#include "wm_mgmt.h"

/* ------------------------------------------------------------------------ */
/* Mutations in flight                                                       */
/* ------------------------------------------------------------------------ */

/* Free a record (with any affinity it owns). NULL is a no-op. */
void wm_txn_free(wm_txn *t)
{
    if (t == NULL) return;
    if (t->owns_affinity) wm_affinity_clear(&t->up.affinity);
    free(t->strs);
    free(t);
}

int wm_txn_own_ids(wm_txn *t)
{
    wm_identity *ids[4];
    size_t n = 0, len = 0;
    switch (t->kind) {
    case WM_TXN_UPSERT:
        ids[n++] = &t->up.revision.id;
        for (size_t i = 0; i < t->up.n_operations && i < 2; i++) ids[n++] = &t->ops[i].id_of;
        if (t->up.has_lease) ids[n++] = &t->up.lease.id_of;
        break;
    case WM_TXN_DELETE: ids[n++] = &t->del.id; break;
    case WM_TXN_LEASE_UPSERT: ids[n++] = &t->lease.id_of; break;
    case WM_TXN_LEASE_DELETE: ids[n++] = &t->lease_end.id_of; break;
    }
    for (size_t i = 0; i < n; i++) len += wm_identity_packed_len(ids[i]);
    /* An upsert's revision carries its request id the same way. */
    const char *rid = t->kind == WM_TXN_UPSERT ? t->up.revision.request_id : NULL;
    size_t rid_len = rid != NULL ? strlen(rid) + 1 : 0;
    char *strs = malloc(len + rid_len + 1), *at = strs;
    if (strs == NULL) return SMP_ENOMEM;
    for (size_t i = 0; i < n; i++) at = wm_identity_pack(ids[i], at, ids[i]);
    if (rid != NULL) {
        memcpy(at, rid, rid_len);
        t->up.revision.request_id = at;
    }
    free(t->strs);
    t->strs = strs;
    return SMP_OK;
}

/* A zeroed record of `kind` for the revision of group_key; NULL on OOM. */
wm_txn *wm_txn_new(wm_plugin *p, wm_txn_kind kind, const char *group_key)
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

int wm_busy_reason(const wm_plugin *p, const wm_revision *rev, char *out, size_t n)
{
    const wm_operation *op;
    if (rev->operation_id != 0) {
        op = wm_store_operation(p->store, rev->operation_id);
        if (op != NULL)
            snprintf(out, n, "active operation %" PRIu64 " (%s)", rev->operation_id,
                     wm_op_kind_name((int)op->kind));
        else
            snprintf(out, n, "active operation %" PRIu64, rev->operation_id);
        return 1;
    }
    if (wm_pending_metadata(p, rev->group_key)) {
        snprintf(out, n, "a change being made durable (retry in a moment)");
        return 1;
    }
    snprintf(out, n, "no operation");
    return 0;
}

int wm_pending_lease_grants(const wm_plugin *p, const char *group_key)
{
    for (const wm_txn *t = p->pending; t != NULL; t = t->next)
        if ((t->kind == WM_TXN_LEASE_UPSERT || (t->kind == WM_TXN_UPSERT && t->up.has_lease)) &&
            strcmp(t->group_key, group_key) == 0)
            return 1;
    return wm_vleases_on(p, group_key);
}

int wm_pending_delete_op(const wm_plugin *p, uint64_t op_id)
{
    for (const wm_txn *t = p->pending; t != NULL; t = t->next)
        if (t->kind == WM_TXN_DELETE && t->del.n_operation_ids > 0 && t->del_ops[0] == op_id)
            return 1;
    return 0;
}

int wm_pending_lease_end(const wm_plugin *p, uint64_t lease_id)
{
    for (const wm_txn *t = p->pending; t != NULL; t = t->next)
        if (t->kind == WM_TXN_LEASE_DELETE && t->lease_end_id == lease_id) return 1;
    return 0;
}

void wm_pending_remove(wm_plugin *p, wm_txn *t)
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
    wm_reclaim_release(p);
    wm_repair_release(p);
    wm_access_release(p);
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
int wm_reply_append_error(wm_plugin *p, smp_rpc_call *call, int rc, const char *what)
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

#define WM_REPLY_SMALL 2048

int wm_reply_packed(wm_plugin *p, smp_rpc_call *call, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t small[WM_REPLY_SMALL]; /* a revision's metadata fits: no malloc per reply */
    uint8_t *buf = n <= sizeof(small) ? small : malloc(n);
    if (buf == NULL) return wm_reply_error(p, call, SMP_ENOMEM, "out of memory packing the reply");
    protobuf_c_message_pack(m, buf);
    p->api->rpc_reply(call, SMP_OK, buf, n);
    if (buf != small) free(buf);
    return SMP_OK;
}

void wm_pb_identity_set(Wmrpc__WeightIdentity *m, const wm_identity *id)
{
    wmrpc__weight_identity__init(m);
    m->tenant = (char *)id->tenant_id;
    m->namespace_id = (char *)id->ns;
    m->resource_id = (char *)id->resource_id;
    m->revision = (char *)id->revision;
    m->generation = id->weight_generation;
}

void wm_pb_meta_set(wm_pb_meta *v, const wm_revision *r)
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
    v->m.degraded_from = (uint32_t)r->degraded_from;
    v->m.degraded_from_hot_ratio = r->degraded_from_hot_ratio;
}

void wm_pb_op_set(wm_pb_op *v, const wm_operation *op)
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
int wm_reply_metadata(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev)
{
    const wm_operation *o = rev != NULL && rev->operation_id
                                ? wm_store_operation(p->store, rev->operation_id)
                                : NULL;
    return wm_reply_metadata_op(p, call, rev, o);
}

int wm_reply_metadata_op(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev,
                         const wm_operation *o)
{
    /* Packed by hand (wm_reply_encode.c): the reply of every metadata read. */
    uint8_t small[WM_REPLY_SMALL];
    size_t n = wm_pack_metadata_response(rev, o, small, sizeof(small));
    uint8_t *buf = small;
    if (n > sizeof(small)) {
        if ((buf = malloc(n)) == NULL)
            return wm_reply_error(p, call, SMP_ENOMEM, "out of memory packing the reply");
        wm_pack_metadata_response(rev, o, buf, n);
    }
    p->api->rpc_reply(call, SMP_OK, buf, n);
    if (buf != small) free(buf);
    return SMP_OK;
}

int wm_reply_begin(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev)
{
    Wmrpc__ImportBeginResponse resp = WMRPC__IMPORT_BEGIN_RESPONSE__INIT;
    wm_pb_meta meta;
    wm_pb_meta_set(&meta, rev);
    resp.metadata = &meta.m;
    return wm_reply_packed(p, call, &resp.base);
}

int wm_reply_lease(wm_plugin *p, smp_rpc_call *call, const wm_lease *l, const wm_revision *rev)
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

/* What record t is, for a log line: its kind and the revision (and lease)
 * it is for. An identity that is empty (a lease ended by expiry whose
 * revision is gone) says so. */
static void txn_what(const wm_txn *t, char *out, size_t cap)
{
    const wm_identity *id = NULL;
    char lease[64] = "";
    const char *kind = "?";
    switch (t->kind) {
    case WM_TXN_UPSERT: kind = "the metadata of"; id = &t->up.revision.id; break;
    case WM_TXN_DELETE: kind = "the deletion of"; id = &t->del.id; break;
    case WM_TXN_LEASE_UPSERT:
        kind = "a lease on";
        id = &t->lease.id_of;
        snprintf(lease, sizeof(lease), " (lease %" PRIu64 ")", t->lease.id);
        break;
    case WM_TXN_LEASE_DELETE:
        kind = "the end of a lease on";
        id = &t->lease_end.id_of;
        snprintf(lease, sizeof(lease), " (lease %" PRIu64 ")", t->lease_end.lease_id);
        break;
    }
    if (id != NULL && id->resource_id != NULL && id->resource_id[0] != '\0')
        snprintf(out, cap, "%s %s/%s/%s@%s gen %" PRIu64 "%s", kind,
                 id->tenant_id ? id->tenant_id : "", id->ns ? id->ns : "", id->resource_id,
                 id->revision ? id->revision : "", id->weight_generation, lease);
    else
        snprintf(out, cap, "%s %s%s", kind, t->group_key[0] ? t->group_key : "(unknown revision)",
                 lease);
}

static uint64_t txn_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Log that t did not become durable: the first WM_DURABILITY_LOG_BURST in
 * each WM_DURABILITY_LOG_WINDOW_MS, the others counted and summed up in one
 * line when the next window opens (an etcd outage fails every record). */
#define WM_DURABILITY_LOG_BURST 5u
#define WM_DURABILITY_LOG_WINDOW_MS 10000u
static void log_not_durable(wm_plugin *p, const wm_txn *t, int status)
{
    char what[1400];
    uint64_t left_out = 0;
    p->durability_log.burst = WM_DURABILITY_LOG_BURST;
    p->durability_log.window_ms = WM_DURABILITY_LOG_WINDOW_MS;
    int say = log_limit_admit(&p->durability_log, txn_mono_ms(), &left_out);
    if (left_out > 0)
        p->api->log(p->host, SMP_LOG_ERROR, "%" PRIu64 " more weight records did not become "
                    "durable in the last %u s (not logged one by one)", left_out,
                    WM_DURABILITY_LOG_WINDOW_MS / 1000u);
    if (!say) return;
    txn_what(t, what, sizeof(what));
    p->api->log(p->host, SMP_LOG_ERROR, "weight record for %s did not become durable: %s%s", what,
                smp_strerror(status),
                p->durability_log.logged == p->durability_log.burst
                    ? " (more such lines are counted, at most 5 logged every 10 s)" : "");
}

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
        log_not_durable(p, t, status);
        if (t->call != NULL)
            wm_reply_error(p, t->call, WM_EDURABILITY_FAILED,
                           "the OpLog could not make the record for %s durable (%s); nothing "
                           "changed",
                           t->group_key, smp_strerror(status));
        rc = WM_EDURABILITY_FAILED;
        goto free_txn;
    }
    const wm_revision *before = t->kind == WM_TXN_UPSERT ? wm_store_get(p->store, &t->up.revision.id) : NULL;
    int was_ready = before != NULL && before->availability == WM_AVAIL_READY;
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
    if (t->kind == WM_TXN_UPSERT && !was_ready) {
        const wm_revision *after = wm_store_get(p->store, &t->up.revision.id);
        if (after != NULL && after->availability == WM_AVAIL_READY) {
            wm_repair_ready(p, after->group_key); /* its manifest's cold copy, without a lap */
            (void)wm_exist_refresh(p, &t->up.revision.id); /* weight_is_exist's answer, kept */
        }
    }
    if (t->kind == WM_TXN_LEASE_DELETE && t->lease_end.reason == WM_LEASE_EXPIRED)
        p->leases_expired++;
    if (t->kind == WM_TXN_DELETE && (unsigned)t->del.reason < WM_DEL_REASONS)
        p->records_pruned[t->del.reason]++;
    wm_metrics_refresh(p);
    wm_lineage_kick(p); /* a claim may wait for what just changed */

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
    case WM_REPLY_LEASE: {
        const wm_lease *l = NULL;
        if (t->kind == WM_TXN_LEASE_UPSERT) l = wm_store_lease(p->store, t->lease.id);
        else if (t->kind == WM_TXN_UPSERT && t->up.has_lease) l = wm_store_lease(p->store, t->up.lease.id);
        wm_reply_lease(p, t->call, l, rev);
        break;
    }
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

    if (t->kind == WM_TXN_UPSERT && t->up.n_operations > 2) return SMP_EINVAL;
    if ((rc = wm_txn_own_ids(t)) < 0) return rc;
    switch (t->kind) {
    case WM_TXN_UPSERT:
        t->up.operations = t->up.n_operations ? t->ops : NULL;
        /* The record may outlive the revision its keys were borrowed from. */
        rc = wm_revision_bind_keys(&t->up.revision, &t->keys);
        if (rc < 0) snprintf(why, sizeof(why), "the identity has no canonical keys");
        if (rc == WM_OK) rc = wm_store_check_upsert(p->store, &t->up, why, sizeof(why));
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
        rc = wm_store_check_lease_upsert(p->store, &t->lease, why, sizeof(why));
        if (rc == WM_OK) rc = wm_encode_lease_upsert(&t->lease, &buf, &len, why, sizeof(why));
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
    uint16_t encver = WM_RECORD_ENCVER;
    if ((t->kind == WM_TXN_UPSERT && t->up.has_lease) ||
        (t->kind == WM_TXN_DELETE && t->del.reason == WM_DEL_OPERATIONS_EXPIRED))
        encver = WM_RECORD_ENCVER_2; /* an older replica must refuse it, not half-apply it */
    rc = p->api->oplog_append(p->host, type, encver, buf, len, wm_txn_durable, t);
    free(buf);
    if (rc < 0) wm_pending_remove(p, t);
    return rc;
}

/* Append t for a waiting call; on failure answer the call and free t. */
int wm_submit(wm_plugin *p, wm_txn *t, smp_rpc_call *call, wm_reply_kind reply,
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

int wm_submit_try(wm_plugin *p, wm_txn *t, smp_rpc_call *call, wm_reply_kind reply)
{
    t->call = call;
    t->reply = reply;
    int rc = wm_txn_append(p, t);
    if (rc < 0) wm_txn_free(t);
    return rc;
}

int wm_txn_submit_quiet(wm_plugin *p, wm_txn *t)
{
    t->call = NULL;
    int rc = wm_txn_append(p, t);
    if (rc < 0) wm_txn_free(t);
    return rc;
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

/* wm_submit_upsert, and wm_submit_access with holds 0: the record does not
 * count as a pending mutation of the revision (wm_pending_metadata). */
static int wm_submit_upsert_as(wm_plugin *p, const wm_revision *rev, const wm_operation *ops,
                               size_t n_ops, wm_applied_fn cb, void *arg, int holds)
{
    char why[512] = "";
    int rc;
    if (rev == NULL || n_ops > 2 || (n_ops > 0 && ops == NULL)) return WM_EINVALID_ARGUMENT;
    wm_txn *t = wm_txn_new(p, WM_TXN_UPSERT, holds ? rev->group_key : "");
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

int wm_submit_upsert(wm_plugin *p, const wm_revision *rev, const wm_operation *ops, size_t n_ops,
                     wm_applied_fn cb, void *arg)
{
    return wm_submit_upsert_as(p, rev, ops, n_ops, cb, arg, 1);
}

/* An access record applied: counted once it is durable, so that
 * weight_access_records_total never counts a record a crash can lose. */
static void wm_access_applied(wm_plugin *p, void *arg, int status)
{
    (void)arg;
    if (status == WM_OK) p->access_records++;
}

int wm_submit_access(wm_plugin *p, const wm_revision *rev)
{
    return wm_submit_upsert_as(p, rev, NULL, 0, wm_access_applied, NULL, 0);
}

int wm_submit_delete(wm_plugin *p, const wm_metadata_delete *d, wm_applied_fn cb, void *arg)
{
    if (d == NULL || d->n_operation_ids > 1 || (d->n_operation_ids > 0 && d->operation_ids == NULL))
        return WM_EINVALID_ARGUMENT;
    const wm_revision *rev = wm_store_get(p->store, &d->id);
    /* Forgetting ended operations changes nothing of the revision: it does
     * not hold the revision busy. */
    int holds = rev != NULL && d->reason != WM_DEL_OPERATIONS_EXPIRED;
    wm_txn *t = wm_txn_new(p, WM_TXN_DELETE, holds ? rev->group_key : "");
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

/* A wire identity as a checked identity in *out, of tenant (wm_tenant_of). */
static int wm_identity_from_pb(const Wmrpc__WeightIdentity *in, const char *tenant,
                               wm_identity_buf *out, char *msg, size_t cap)
{
    if (in == NULL) {
        snprintf(msg, cap, "identity is missing");
        return WM_EINVALID_ARGUMENT;
    }
    const char *parts[4] = {tenant, in->namespace_id, in->resource_id, in->revision};
    size_t len[4];
    for (int i = 0; i < 4; i++) {
        len[i] = parts[i] ? strlen(parts[i]) : 0;
        if (len[i] > WM_ID_COMPONENT_MAX) {
            snprintf(msg, cap, "identity component %d is %zu bytes (at most %d)", i, len[i],
                     WM_ID_COMPONENT_MAX);
            return WM_EINVALID_ARGUMENT;
        }
    }
    /* what wm_identity_buf_set does, with the lengths just taken: NULL
     * parts become empty, refused below */
    for (int i = 0; i < 4; i++) {
        if (len[i] > 0) memcpy(out->s[i], parts[i], len[i]);
        out->s[i][len[i]] = '\0';
    }
    out->id = (wm_identity){out->s[0], out->s[1], out->s[2], out->s[3], in->generation};
    return wm_identity_check_len(&out->id, len, msg, cap);
}

const char *wm_id_text(const wm_identity *id, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s/%s/%s@%" PRIu64, id->tenant_id, id->ns, id->resource_id,
             id->revision, id->weight_generation);
    return buf;
}

/* The checked identity of a request into *id: 1, or 0 with INVALID_ARGUMENT
 * ("invalid identity: ...") answered, or NOT_FOUND ("no revision ...") when
 * it names a tenant the caller may not see (wm_tenant.c). */
int wm_identity_in(wm_plugin *p, smp_rpc_call *call, const Wmrpc__WeightIdentity *pid,
                          wm_identity_buf *id)
{
    char msg[256];
    const char *tenant = wm_tenant_of(p, call, pid != NULL ? pid->tenant : NULL);
    if (tenant == NULL) {
        /* the same whether it exists or not: that the caller named
         * another tenant is all it says (and which tenant the connection
         * acts for, its own, so nobody takes the named one for it) */
        wm_reply_error(p, call, WM_ENOT_FOUND,
                       "no revision %s/%s/%s/%s@%" PRIu64 " for this connection of tenant %s: it "
                       "acts for its own tenant only (an admin's may name another)", pid->tenant,
                       pid->namespace_id ? pid->namespace_id : "",
                       pid->resource_id ? pid->resource_id : "",
                       pid->revision ? pid->revision : "", pid->generation,
                       wm_caller_tenant(p, call));
        return 0;
    }
    if (wm_identity_from_pb(pid, tenant, id, msg, sizeof(msg)) < 0) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT, "invalid identity: %s", msg);
        return 0;
    }
    return 1;
}

/* The revision of a request, or an answered NOT_FOUND / INVALID_ARGUMENT. */
const wm_revision *wm_lookup(wm_plugin *p, smp_rpc_call *call,
                                    const Wmrpc__WeightIdentity *pid, wm_identity_buf *id)
{
    char idt[1200];
    if (!wm_identity_in(p, call, pid, id)) return NULL;
    const wm_revision *rev = wm_store_get(p->store, &id->id);
    if (rev == NULL)
        wm_reply_error(p, call, WM_ENOT_FOUND, "no revision %s",
                       wm_id_text(&id->id, idt, sizeof(idt)));
    return rev;
}

uint64_t wm_now(wm_plugin *p, const wm_revision *rev)
{
    uint64_t now = p->api->wall_ms(p->host);
    return rev != NULL && rev->updated_ms > now ? rev->updated_ms : now;
}

/* A mutation of rev may start: nothing of it in flight. */
int wm_check_idle(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev)
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

int wm_check_cas(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev, uint64_t expected)
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
const wm_revision *wm_lookup_cas(wm_plugin *p, smp_rpc_call *call,
                                        const Wmrpc__WeightIdentity *pid, wm_identity_buf *id,
                                        uint64_t expected)
{
    const wm_revision *rev = wm_lookup(p, call, pid, id);
    if (rev == NULL || !wm_check_cas(p, call, rev, expected)) return NULL;
    return rev;
}

/* The fence of a mutation of rev: nothing of it in flight (wm_check_idle),
 * then the CAS on expected (wm_check_cas). 1, or 0 with the refusal
 * answered. */
int wm_check_fence(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev,
                          uint64_t expected)
{
    return wm_check_idle(p, call, rev) && wm_check_cas(p, call, rev, expected);
}

/* A request policy over the cluster default: absent fields (0) come from the
 * cluster default, then the whole is validated. */
int wm_policy_from_pb(const wm_plugin *p, const Wmrpc__WeightPolicy *in, const wm_policy *base,
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
/* Preparing records                                                         */
/* ------------------------------------------------------------------------ */

/* Fill a new MIGRATING operation toward `target`. */
void wm_op_migrating(wm_plugin *p, wm_operation *op, const wm_revision *r, wm_residency target,
                            double ratio, uint64_t now)
{
    memset(op, 0, sizeof(*op));
    op->id = wm_store_reserve_operation_id(p->store);
    op->kind = WM_OPK_MIGRATING;
    op->id_of = r->id;
    op->target = target;
    op->target_hot_ratio = target == WM_RES_MIXED ? ratio : 0.0;
    op->state = WM_OPS_RUNNING;
    op->members_total = r->payload_count;
    op->bytes_total = r->logical_bytes;
    op->created_ms = op->updated_ms = now;
}

/* A new UPSERT record of rev for a waiting call: a copy of rev one metadata
 * generation on, updated now (wm_now). NULL with "out of memory" answered. */
wm_txn *wm_txn_next(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev)
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
void wm_txn_migrating(wm_plugin *p, wm_txn *t, wm_residency target, double ratio)
{
    wm_revision *r = &t->up.revision;
    wm_op_migrating(p, &t->ops[0], r, target, ratio, r->updated_ms);
    r->operation_id = t->ops[0].id;
    t->up.n_operations = 1;
}

/* Make t's revision DELETING with its one operation: DELETING over members
 * objects and bytes logical bytes, created at the revision's updated_ms. */
void wm_txn_deleting(wm_plugin *p, wm_txn *t, uint64_t members, uint64_t bytes)
{
    wm_revision *r = &t->up.revision;
    wm_operation *op = &t->ops[0];
    wm_revision_set_availability(r, r, NULL, WM_AVAIL_DELETING);
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
int wm_mutation_ok(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev, wm_txn *t,
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
void wm_check_submit(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev, wm_txn *t,
                            const char *noun, const char *what, char *msg, size_t cap)
{
    if (wm_mutation_ok(p, call, rev, t, noun, msg, cap))
        wm_submit(p, t, call, WM_REPLY_METADATA, what);
}

/* ------------------------------------------------------------------------ */
/* Request ids                                                               */
/* ------------------------------------------------------------------------ */

uint64_t wm_request_digest(uint32_t method, const uint64_t *args, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    uint64_t words[1 + 8];
    size_t k = n < 8 ? n : 8;
    words[0] = method;
    if (k > 0) memcpy(&words[1], args, k * sizeof(*args));
    const unsigned char *b = (const unsigned char *)words;
    for (size_t i = 0; i < (k + 1) * sizeof(uint64_t); i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h ? h : 1; /* 0 means "no request" in the record */
}

int wm_request_replayed(wm_plugin *p, smp_rpc_call *call, const wm_revision *rev, const char *rid,
                        uint64_t digest, uint64_t expected)
{
    if (rid == NULL || rid[0] == '\0') return 0;
    size_t n = strlen(rid);
    if (n > WM_REQUEST_ID_MAX || wm_text_check(rid, n) < 0) {
        wm_reply_error(p, call, WM_EINVALID_ARGUMENT,
                       "request_id must be 1..%d bytes of UTF-8 (%zu given)", WM_REQUEST_ID_MAX, n);
        return 1;
    }
    if (rev->request_id == NULL || strcmp(rev->request_id, rid) != 0) return 0;
    if (rev->request_digest != digest || rev->request_base_generation != expected) {
        wm_reply_error(p, call, WM_ECONFLICT,
                       "request_id %s already changed %s (from metadata generation %" PRIu64
                       ") with other arguments; a new request needs a new id",
                       rid, rev->group_key, rev->request_base_generation);
        return 1;
    }
    /* The first answer: the revision as it is now, with the operation the
     * request created even if it has ended since. What is answered is the
     * applied (durable) state, so a record of the revision still in flight
     * -- the tick's progress of the very deletion or migration the request
     * started -- does not make the retry BUSY (it would be for as long as
     * the operation writes progress). */
    const wm_operation *op = rev->operation_id ? wm_store_operation(p->store, rev->operation_id)
                                               : NULL;
    if (op == NULL && rev->request_operation_id)
        op = wm_store_operation(p->store, rev->request_operation_id);
    wm_reply_metadata_op(p, call, rev, op);
    return 1;
}

void wm_txn_request(wm_txn *t, const char *rid, uint64_t digest, uint64_t expected)
{
    wm_revision *r = &t->up.revision;
    r->request_id = NULL;
    r->request_digest = 0;
    r->request_base_generation = 0;
    r->request_operation_id = 0;
    if (rid == NULL || rid[0] == '\0') return;
    r->request_id = rid; /* borrowed until the submit copies it (wm_txn_own_ids) */
    r->request_digest = digest;
    r->request_base_generation = expected;
    if (t->up.n_operations > 0 && r->operation_id == t->ops[0].id)
        r->request_operation_id = t->ops[0].id;
}
