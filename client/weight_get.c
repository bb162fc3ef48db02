/* weight_get.c -- the load of libweightclient: a revision into the caller's
 * buffers, resharded, under a revision lease.
 *
 * The sequence is the RFC's: acquire a generation-fenced lease (the reply
 * carries the metadata: manifest key and SHA-256) -> start a helper thread
 * that renews the lease at a third of its TTL while the load runs
 * (wc_lease_keeper.c) -> read the manifest and verify its SHA-256 and
 * identity (a mismatch is WEIGHT_EDIGEST_MISMATCH and nothing is written)
 * -> ask the caller's placement for each tensor's target box and its
 * bindings for the buffers -> wc_plan_build -> transfer (wc_transfer.c) ->
 * give back the read leases the object lookups took
 * (kvc_release_read_leases) and release the lease (on success, error and
 * cancellation alike; a crashed caller's lease expires by TTL, its read
 * leases end when its connection closes).
 *
 * Also here, for weight_get_mapped.c too: the manifest's load and check,
 * a tensor's public description, and the replica lookup that survives a
 * master restart (wc_get.h). weight_get_mapped, the load without a
 * transfer, is weight_get_mapped.c. */
#include <inttypes.h>
#include <openssl/sha.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wc_get.h"
#include "wc_reported.h"

#define M(name) WMRPC__WEIGHT_METHOD__WEIGHT_##name

/* kvc_get, once more on a new connection when the first one was lost (a
 * master restart): a replica lookup may be repeated. */
int wc_kv_get(weight_store *s, const char *key, kvc_object *obj)
{
    int rc = kvc_get(s->kv, key, obj);
    if (rc < 0 && kvc_transport_failed(s->kv) && wc_kv_reconnect(s) == SMP_OK)
        rc = kvc_get(s->kv, key, obj);
    return rc;
}

int wc_report_corrupt(weight_store *s, const char *key, const char *node, const char *segment,
                      uint64_t offset)
{
    int rc = kvc_report_corrupt(s->kv, key, node, segment, offset, NULL);
    if (rc < 0 && kvc_transport_failed(s->kv) && wc_kv_reconnect(s) == SMP_OK)
        rc = kvc_report_corrupt(s->kv, key, node, segment, offset, NULL);
    if (rc < 0) return rc;
    wc_reported_note(key, node, segment, offset);
    return WEIGHT_OK;
}

void weight_store_cancel(weight_store *s)
{
    if (s != NULL) atomic_store(&s->cancel, 1);
}

/* -- placement and bindings ------------------------------------------------------ */

void wc_tensor_info(const wc_manifest *m, size_t i, weight_tensor_info *ti)
{
    const wc_tensor *t = &m->tensors[i];
    ti->name = t->name;
    ti->dtype = wc_dtype_name(t->dtype);
    ti->item_size = t->item_size;
    ti->ndim = t->ndim;
    ti->shape = t->shape;
    ti->alias_of = t->storage != i ? m->tensors[t->storage].name : NULL;
    ti->attachment = t->attachment;
}

static const weight_binding *find_binding(const weight_bindings *b, const char *name)
{
    for (size_t i = 0; b && i < b->n_buffers; i++)
        if (b->buffers[i].name && strcmp(b->buffers[i].name, name) == 0) return &b->buffers[i];
    return NULL;
}

/* Hand the file metadata to its callback, ask for the placements and
 * bindings, build the plan. */
static int place_and_bind(weight_store *s, const wc_manifest *m, const weight_placement *placement,
                          const weight_bindings *bindings, wc_placement *pl, uint8_t **bufs,
                          wc_plan *plan, uint64_t *n_placed)
{
    char err[512] = "";
    int rc;
    *n_placed = 0;
    for (size_t i = 0; s->file_meta && i < m->n_file_meta; i++) {
        rc = s->file_meta(s->file_meta_ctx, m->file_meta[i].key, m->file_meta[i].value);
        if (rc < 0) return wc_fail(s, rc, "file metadata '%s' refused (%s)", m->file_meta[i].key,
                                   weight_error_name(rc));
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        weight_tensor_info ti;
        weight_tensor_place tp = {WEIGHT_PLACE_REPLICATED, 0, 1, 0};
        wc_tensor_info(m, i, &ti);
        if (ti.attachment && !s->attachments) {
            tp.kind = WEIGHT_PLACE_SKIP; /* not asked for */
        } else if (placement && placement->place) {
            rc = placement->place(placement->ctx, &ti, &tp);
            if (rc < 0) return wc_fail(s, rc, "placement of '%s' refused (%s)", ti.name,
                                       weight_error_name(rc));
        }
        if (tp.kind != WEIGHT_PLACE_SKIP && tp.kind != WEIGHT_PLACE_REPLICATED &&
            tp.kind != WEIGHT_PLACE_SPLIT)
            return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "tensor '%s': unknown placement kind %d",
                           ti.name, (int)tp.kind);
        pl[i].kind = (wc_place_kind)tp.kind;
        pl[i].dim = tp.dim;
        pl[i].parts = tp.parts;
        pl[i].rank = tp.rank;
    }
    if ((rc = wc_plan_build(m, pl, plan, err, sizeof err)) < 0)
        return wc_fail(s, rc == SMP_ENOMEM ? WEIGHT_ENOMEM : WEIGHT_EINVALID_ARGUMENT, "%s", err);
    for (size_t i = 0; i < m->n_tensors; i++) {
        if (pl[i].kind == WC_PLACE_SKIP) continue;
        (*n_placed)++;
        weight_tensor_info ti;
        weight_tensor_place tp = {(weight_place_kind)pl[i].kind, pl[i].dim, pl[i].parts, pl[i].rank};
        uint64_t shape[WC_MAX_NDIM], bytes = plan->dst_bytes[i];
        wc_tensor_info(m, i, &ti);
        wc_plan_dst_shape(&m->tensors[i], &pl[i], shape, NULL);
        const weight_binding *b = find_binding(bindings, ti.name);
        void *buf = NULL;
        if (b != NULL) {
            if (b->bytes < bytes || (bytes > 0 && b->data == NULL))
                return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "tensor '%s': buffer of %" PRIu64
                               " bytes, the placement needs %" PRIu64, ti.name, b->bytes, bytes);
            buf = b->data;
        } else if (bindings && bindings->provide) {
            rc = bindings->provide(bindings->ctx, &ti, &tp, shape, bytes, &buf);
            if (rc < 0) return wc_fail(s, rc, "no buffer for '%s' (%s)", ti.name,
                                       weight_error_name(rc));
            if (buf == NULL && bytes > 0)
                return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "no buffer for '%s'", ti.name);
        } else {
            return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "tensor '%s' is placed but has no buffer",
                           ti.name);
        }
        bufs[i] = buf;
    }
    return WEIGHT_OK;
}

/* -- the manifest ------------------------------------------------------------------ */

/* Read and verify the manifest named by md into *m. */
int wc_load_manifest(weight_store *s, const weight_metadata *md, const char *tenant,
                     const weight_identity *id, wc_manifest *m)
{
    kvc_object obj;
    uint8_t *buf = NULL;
    uint64_t len = 0;
    uint8_t sha[32];
    char err[512] = "";
    int rc = wc_kv_get(s, md->manifest_key, &obj);
    if (rc == SMP_ENOTFOUND) return wc_fail(s, WEIGHT_ENOT_READY, "manifest %s is missing", md->manifest_key);
    if (rc < 0) return wc_fail(s, rc, "manifest %s: %s", md->manifest_key, kvc_error(s->kv));
    if (obj.size == 0 || obj.size > (1ull << 31))
        return wc_fail(s, WEIGHT_EDIGEST_MISMATCH, "manifest %s has %" PRIu64 " bytes",
                       md->manifest_key, obj.size);
    if ((buf = malloc(obj.size)) == NULL) return wc_fail(s, WEIGHT_ENOMEM, "out of memory");
    rc = kvc_get_into(s->kv, md->manifest_key, buf, obj.size, &len, 0);
    if (rc < 0) {
        rc = wc_fail(s, rc == SMP_EAGAIN ? WEIGHT_ENOT_READY : rc, "manifest %s: %s",
                     md->manifest_key, kvc_error(s->kv));
        goto free_buf;
    }
    SHA256(buf, (size_t)len, sha);
    if (memcmp(sha, md->manifest_sha256, 32) != 0) {
        /* the replica read is not known here: the master checks each of
           the manifest's memory replicas (a cold one read was checked by
           kvc_get_into's node only when verifying) */
        int reported = wc_report_corrupt(s, md->manifest_key, "", "", 0) == WEIGHT_OK;
        rc = wc_fail(s, WEIGHT_EDIGEST_MISMATCH, "manifest %s does not match the SHA-256 sealed "
                     "at commit%s", md->manifest_key,
                     reported ? " (reported to the master, which has its memory replicas checked)"
                              : "");
        goto free_buf;
    }
    if ((rc = wc_manifest_decode(buf, (size_t)len, m, err, sizeof err)) < 0) {
        rc = wc_fail(s, rc == SMP_ENOMEM ? WEIGHT_ENOMEM : WEIGHT_EPROTO, "manifest %s: %s",
                     md->manifest_key, err);
        goto free_buf;
    }
    if (strcmp(m->identity.tenant_id, tenant) != 0 ||
        strcmp(m->identity.namespace_id, id->namespace_id) != 0 ||
        strcmp(m->identity.resource_id, id->resource_id) != 0 ||
        strcmp(m->identity.revision, id->revision) != 0 || m->identity.generation != id->generation) {
        wc_manifest_free(m);
        rc = wc_fail(s, WEIGHT_EDIGEST_MISMATCH, "manifest %s describes another revision",
                     md->manifest_key);
    }
free_buf:
    free(buf);
    return rc;
}

/* -- weight_get ------------------------------------------------------------------- */

int weight_get(weight_store *s, const weight_identity *id, const weight_placement *placement,
               const weight_bindings *bindings, weight_get_stats *stats)
{
    wc_lease_keeper k;
    weight_metadata md;
    wc_manifest m;
    wc_plan plan;
    wc_placement *pl = NULL;
    uint8_t **bufs = NULL;
    uint64_t n_placed = 0;
    char tenant[WEIGHT_ID_MAX + 1];
    Wmrpc__LeaseResponse *lr = NULL;
    int rc;

    if (s == NULL) return WEIGHT_EINVALID_ARGUMENT;
    s->err[0] = '\0';
    if (stats) memset(stats, 0, sizeof *stats);
    if (id == NULL || !id->namespace_id[0] || !id->resource_id[0] || !id->revision[0])
        return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "weight_get: incomplete identity");
    snprintf(tenant, sizeof tenant, "%s", id->tenant_id[0] ? id->tenant_id : s->tenant);
    memset(&k, 0, sizeof k);
    memset(&m, 0, sizeof m);
    memset(&plan, 0, sizeof plan);

    /* 1. The lease (its reply carries the metadata). */
    rc = wc_lease_call(s, &s->rpc, M(LEASE_ACQUIRE), id, 0, 0, s->lease_ttl_ms, &lr);
    if (rc < 0) return rc;
    if (lr->lease == NULL || lr->lease->id == 0 || lr->metadata == NULL) {
        wmrpc__lease_response__free_unpacked(lr, NULL);
        return wc_fail(s, WEIGHT_EPROTO, "lease reply without lease or metadata");
    }
    k.id = *id;
    k.lease_id = lr->lease->id;
    k.lease_gen = lr->lease->metadata_generation;
    k.ttl_ms = s->lease_ttl_ms;
    k.interval_ms = wc_lease_renew_interval(s, lr->lease->expires_ms);
    wc_from_wire_metadata(lr->metadata, &md);
    wmrpc__lease_response__free_unpacked(lr, NULL);

    /* 2. The store's renewer keeps it while the load runs. */
    if ((rc = wc_lease_keeper_start(s, &k)) < 0) goto release;

    /* 3. The manifest, verified. */
    if ((rc = wc_load_manifest(s, &md, tenant, id, &m)) < 0) goto stop_keeper;

    /* 4. Placement, bindings, plan. */
    pl = calloc(m.n_tensors ? m.n_tensors : 1, sizeof *pl);
    bufs = calloc(m.n_tensors ? m.n_tensors : 1, sizeof *bufs);
    if (pl == NULL || bufs == NULL) {
        rc = wc_fail(s, WEIGHT_ENOMEM, "out of memory");
        goto free_plan;
    }
    if ((rc = place_and_bind(s, &m, placement, bindings, pl, bufs, &plan, &n_placed)) < 0)
        goto free_plan;

    if (atomic_exchange(&s->cancel, 0)) {
        rc = wc_fail(s, WEIGHT_ECANCELED, "weight_get canceled");
        goto free_plan;
    }

    /* 5. Transfer. */
    rc = wc_transfer(s, &m, &plan, bufs, &k, n_placed, stats);
free_plan:
    free(pl);
    free(bufs);
    wc_plan_free(&plan);
    wc_manifest_free(&m);
stop_keeper:
    wc_lease_keeper_stop(&k, 0); /* released below, on the caller's connection */
release:
    {
        char saved[sizeof s->err];
        memcpy(saved, s->err, sizeof saved);
        /* The objects' read leases first, so that a removal waiting for the
         * revision lease finds nothing leased once that ends. A failure
         * only leaves them to expire. */
        (void)kvc_release_read_leases(s->kv, NULL);
        int rr = wc_lease_call(s, &s->rpc, M(LEASE_RELEASE), id, k.lease_id, 0, 0, NULL);
        if (rc == 0 && rr < 0 && rr != WEIGHT_ENOT_FOUND) rc = rr; /* keep its message */
        else memcpy(s->err, saved, sizeof saved);
    }
    return rc;
}

