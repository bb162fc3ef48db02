/* wm_mgmt_query.c -- the read-only management RPCs (GET_METADATA, IS_EXIST,
 * GET_SIZE, LIST, GET_OPERATION).
 *
 * They answer from the revision store without appending anything: a
 * revision in any state, whether a READY revision is readable right now
 * (asked of the host key by key, or a true answer kept while the host's
 * objects loss version has not moved), its sealed size, a bounded page of a
 * tenant's revisions in identity order, an operation by id (ended ones
 * included). None reads a manifest. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weight_lineage.h"
#include "weight_residency_planner.h"
#include "wm_bulk.h"
#include "wm_mgmt.h"

/* ------------------------------------------------------------------------ */
/* Queries                                                                   */
/* ------------------------------------------------------------------------ */

/* The identity reads (GET_METADATA, IS_EXIST, GET_SIZE) decode their
 * IdentityRequest by hand into a wm_id_request on the handler's stack
 * (wm_request_decode.c): no protobuf-c unpack, no malloc for an identity
 * within its limits. */

/* Decode an IdentityRequest into *r; NULL with SMP_EPROTO (or SMP_ENOMEM)
 * answered when it does not. Release with wm_id_request_fini(r). */
static const Wmrpc__IdentityRequest *wm_decode_identity_request(wm_plugin *p, smp_rpc_call *call,
                                                                wm_id_request *r,
                                                                const uint8_t *body, size_t len)
{
    int rc = wm_id_request_decode(r, body, len);
    if (rc == SMP_ENOMEM) {
        wm_reply_error(p, call, SMP_ENOMEM, "out of memory decoding the request");
        return NULL;
    }
    if (rc < 0) {
        wm_reply_error(p, call, SMP_EPROTO, "request body does not decode as %s",
                       "Wmrpc__IdentityRequest");
        return NULL;
    }
    return &r->m;
}

/* The revision in any state (tombstones included) and its active
 * operation. NOT_FOUND for an unknown identity. */
int wm_rpc_get_metadata(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    wm_identity_buf idb;
    wm_id_request r;
    const Wmrpc__IdentityRequest *req = wm_decode_identity_request(p, call, &r, body, len);
    if (req == NULL) return SMP_OK;
    const wm_revision *rev = wm_lookup(p, call, req->identity, &idb);
    if (rev != NULL) wm_reply_metadata(p, call, rev);
    wm_id_request_fini(&r);
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

/* The host's version that a true weight_is_exist answer is kept with: its
 * objects' loss version (ABI 1.7), which only moves when a complete replica
 * may be gone, else its objects version (ABI 1.5), which moves with every
 * change; 0 when it has neither. */
static uint64_t wm_exist_version(const wm_plugin *p)
{
    if (SMP_HOST_HAS(p->api, objects_loss_version) && p->api->objects_loss_version != NULL)
        return p->api->objects_loss_version(p->host);
    if (!SMP_HOST_HAS(p->api, objects_version) || p->api->objects_version == NULL) return 0;
    return p->api->objects_version(p->host);
}

/* Whether the manifest and every payload of a READY revision have a
 * readable replica now: one object_get per key. When not, *unreadable (may
 * be NULL) is the first key found without one (NULL: the revision has no
 * members). */
static int wm_keys_readable(wm_plugin *p, const wm_revision *rev, const wm_affinity *aff,
                            const char **unreadable)
{
    const char *key = NULL;
    int ok = aff != NULL && aff->n_units > 0;
    if (ok && !(ok = wm_key_readable(p, rev->manifest_key))) key = rev->manifest_key;
    for (size_t u = 0; ok && u < aff->n_units; u++)
        for (size_t j = 0; ok && j < aff->units[u].n_members; j++)
            if (!(ok = wm_key_readable(p, aff->units[u].members[j]))) key = aff->units[u].members[j];
    if (unreadable != NULL) *unreadable = ok ? NULL : key;
    return ok;
}

/* True only for a READY revision whose manifest and every payload have a
 * readable replica now (whatever the residency, during a migration too),
 * and that no replacement has retired (wm_revision_fenced: it grants no
 * new lease, so a get of it fails).
 * A true answer is kept with the host's version it was found at
 * (wm_exist_version): while it has not moved, no object lost a readable
 * replica and no node went down, and the answer is given again without
 * asking the host about each key, however many other revisions were
 * published meanwhile. A false answer is never kept, and a host without
 * either version (0) is asked every time. fresh: ask the host even while
 * the version stays (wm_exist_refresh, when the revision turns READY). */
static int wm_exist_answer(wm_plugin *p, const wm_identity *id, int fresh, const char **unreadable)
{
    const wm_affinity *aff;
    uint64_t *readable_at;
    const wm_revision *rev = wm_store_get_exist(p->store, id, &aff, &readable_at);
    if (unreadable != NULL) *unreadable = NULL;
    if (rev == NULL || rev->availability != WM_AVAIL_READY) return 0;
    /* A base a replacement retired takes no new lease: nothing can load it. */
    if (wm_lineage_claims_open(p) && wm_revision_fenced(p, rev)) return 0;
    uint64_t version = wm_exist_version(p);
    if (!fresh && version != 0 && *readable_at == version) return 1;
    int exists = wm_keys_readable(p, rev, aff, unreadable);
    *readable_at = exists ? version : 0;
    return exists;
}

int wm_exist_refresh(wm_plugin *p, const wm_identity *id)
{
    return wm_exist_answer(p, id, 1, NULL);
}

/* A READY revision found unreadable for want of key's replica: 1 when the
 * host holds the call until the node holding it registers (ABI 1.8,
 * rpc_wait_for_nodes: right after a start or a failover), to be asked
 * again then; 0 to answer now. */
static int wm_exist_waits(wm_plugin *p, smp_rpc_call *call, const char *key, const uint8_t *body,
                          size_t len)
{
    return key != NULL && SMP_HOST_HAS(p->api, rpc_wait_for_nodes) &&
           p->api->rpc_wait_for_nodes != NULL &&
           p->api->rpc_wait_for_nodes(p->host, call, key, body, len) == 1;
}

/* weight_is_exist: wm_exist_answer's; a READY revision unreadable only
 * because a node has not registered again yet is answered once it has. */
int wm_rpc_is_exist(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    wm_identity_buf idb;
    int exists = 0;
    const char *unreadable = NULL;
    wm_id_request r;
    const Wmrpc__IdentityRequest *req = wm_decode_identity_request(p, call, &r, body, len);
    if (req == NULL) return SMP_OK;
    if (!wm_identity_in(p, call, req->identity, &idb)) goto free_req;
    exists = wm_exist_answer(p, &idb.id, 0, &unreadable);
    if (!exists && wm_exist_waits(p, call, unreadable, body, len)) goto free_req;
    /* packed by hand (wm_reply_encode.c): no protobuf-c size and pack */
    uint8_t out[WM_IS_EXIST_RESPONSE_MAX];
    p->api->rpc_reply(call, SMP_OK, out, wm_pack_is_exist_response(exists, out));
free_req:
    wm_id_request_fini(&r);
    return SMP_OK;
}

/* The logical bytes sealed at commit; NOT_READY before READY or once
 * deletion started. */
int wm_rpc_get_size(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    wm_identity_buf idb;
    Wmrpc__SizeResponse resp = WMRPC__SIZE_RESPONSE__INIT;
    wm_id_request r;
    const Wmrpc__IdentityRequest *req = wm_decode_identity_request(p, call, &r, body, len);
    if (req == NULL) return SMP_OK;
    const wm_revision *rev = wm_lookup(p, call, req->identity, &idb);
    if (rev != NULL) {
        if (rev->availability == WM_AVAIL_READY || rev->availability == WM_AVAIL_DEGRADED) {
            resp.logical_bytes = rev->logical_bytes;
            wm_reply_packed(p, call, &resp.base);
        } else {
            wm_reply_error(p, call, WM_ENOT_READY, "revision %s is %s; its size is known once READY",
                           rev->group_key, wm_availability_name((int)rev->availability));
        }
    }
    wm_id_request_fini(&r);
    return SMP_OK;
}

/* Whether a revision is shown by LIST: IMPORTING ones (not discoverable for
 * loading, but a put that died leaves one holding segment bytes until it is
 * aborted) and tombstones only on request. */
static int wm_list_visible(const wm_revision *r, int include_deleted, int include_importing)
{
    if (r->availability == WM_AVAIL_IMPORTING) return include_importing;
    if (r->availability == WM_AVAIL_DELETED) return include_deleted;
    return 1;
}

/* How many rows ahead of the one it reads LIST asks for keys (and twice as
 * many for fields): enough misses in flight to cover a row's encoding. */
#define WM_LIST_AHEAD 4

/* LIST: revisions of a tenant, optionally of one namespace and resource, in
 * identity order. The page token is the group key of the last revision
 * returned (stable across inserts and deletes). A page examines at most
 * 8 x limit records, so a page may be short with a token to go on. */
int wm_rpc_list(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    Wmrpc__ListResponse resp = WMRPC__LIST_RESPONSE__INIT;
    wm_pb_meta *metas = NULL;
    Wmrpc__WeightMetadata **ptrs = NULL;
    char token[WM_KEY_MAX + 1] = "";
    WM_DECODE(req, Wmrpc__ListRequest, wmrpc__list_request__unpack, p, call, body, len);

    /* another tenant's revisions are not there for this caller: an empty page */
    const char *tenant = wm_tenant_of(p, call, req->tenant);
    if (tenant == NULL) {
        wm_reply_packed(p, call, &resp.base);
        goto free_req;
    }
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

    const wm_identity start = {tenant, ns, res, "", 0};
    size_t i;
    int walk = -1; /* the walk this page goes on with (wm_store_revision_after) */
    if (req->page_token && req->page_token[0]) {
        wm_identity_buf ab;
        const wm_identity *after = &ab.id;
        wm_key_kind kind;
        if (wm_key_parse(req->page_token, &ab, &kind, NULL) < 0 || kind != WM_KEY_GROUP ||
            strcmp(after->tenant_id, tenant) != 0 || (ns[0] && strcmp(after->ns, ns) != 0) ||
            (res[0] && strcmp(after->resource_id, res) != 0)) {
            wm_reply_error(p, call, WM_EINVALID_ARGUMENT,
                           "page_token is not a token of this listing");
            goto free_req;
        }
        i = wm_store_revision_after(p->store, after, &walk);
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
    const wm_revision *last = NULL; /* the last revision examined: the token */
    /* Each row's fields are asked for 2 x WM_LIST_AHEAD rows before it is
     * read and its keys WM_LIST_AHEAD rows before, so the misses of many
     * rows overlap instead of each row waiting for its own (the last few
     * asked for may lie past the page: the next page's first rows). */
    for (size_t k = i; k < i + 2 * WM_LIST_AHEAD; k++) wm_store_prefetch_fields(p->store, k);
    for (size_t k = i; k < i + WM_LIST_AHEAD; k++) wm_store_prefetch_keys(p->store, k);
    for (; i < total && n < limit; i++) {
        wm_store_prefetch_fields(p->store, i + 2 * WM_LIST_AHEAD);
        wm_store_prefetch_keys(p->store, i + WM_LIST_AHEAD);
        const wm_revision *r = wm_store_revision_at(p->store, i);
        if (strcmp(r->id.tenant_id, tenant) != 0 || (ns[0] && strcmp(r->id.ns, ns) != 0) ||
            (res[0] && strcmp(r->id.resource_id, res) != 0))
            break; /* past the filtered range (identity order) */
        examined++;
        if (wm_list_visible(r, req->include_deleted, req->include_importing)) {
            wm_pb_meta_set(&metas[n], r);
            ptrs[n] = &metas[n].m;
            n++;
        }
        last = r;
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
    if (last != NULL) {
        snprintf(token, sizeof(token), "%s", last->group_key);
        wm_store_walk_note(p->store, i - 1, walk); /* last: the next page goes on after it */
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
int wm_rpc_get_operation(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    Wmrpc__OperationResponse resp = WMRPC__OPERATION_RESPONSE__INIT;
    wm_pb_op op;
    WM_DECODE(req, Wmrpc__OperationRequest, wmrpc__operation_request__unpack, p, call, body, len);
    const wm_operation *o = wm_store_operation(p->store, req->operation_id);
    if (o == NULL || !wm_tenant_visible(p, call, o->id_of.tenant_id)) {
        wm_reply_error(p, call, WM_ENOT_FOUND, "no operation %" PRIu64, req->operation_id);
    } else {
        wm_pb_op_set(&op, o);
        resp.operation = &op.m;
        wm_reply_packed(p, call, &resp.base);
    }
    wmrpc__operation_request__free_unpacked(req, NULL);
    return SMP_OK;
}
