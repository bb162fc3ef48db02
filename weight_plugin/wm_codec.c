/* wm_codec.c -- the weight plugin's records to and from protobuf-c.
 *
 * Encoding builds the messages of proto/weight_records.proto on the stack,
 * pointing into the caller's records (no copies), after checking the record
 * against the same invariants the decoder enforces. Decoding unpacks a buffer
 * that came from disk or a peer and trusts none of it: a missing identity, an
 * out-of-range enum, a string with a NUL or bad UTF-8, a key that is not the
 * canonical one, a digest of the wrong length or a record that breaks an
 * invariant of weight_metadata_rules.c is SMP_EPROTO with a sentence, and
 * whatever was allocated on the way is released. The snapshot section is
 * decoded by hand in wm_section_decode.c, through the per-record decoders
 * here (wm_codec_dec.h). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weight_records.pb-c.h"
#include "wm_bulk.h"
#include "wm_codec.h"
#include "wm_codec_dec.h"

static char wm_no_text[] = "";

/* ------------------------------------------------------------------------ */
/* Encoding: records -> messages                                             */
/* ------------------------------------------------------------------------ */

static ProtobufCBinaryData wm_bin_str(const char *s)
{
    ProtobufCBinaryData b = {strlen(s), (uint8_t *)s};
    return b;
}

static ProtobufCBinaryData wm_bin_digest(const uint8_t *d)
{
    ProtobufCBinaryData b = {0, NULL};
    for (size_t i = 0; i < WM_SHA256_LEN; i++) {
        if (d[i] != 0) {
            b.len = WM_SHA256_LEN;
            b.data = (uint8_t *)d;
            break;
        }
    }
    return b;
}

static void wm_enc_identity(Wmrec__Identity *m, const wm_identity *id)
{
    wmrec__identity__init(m);
    m->tenant_id = wm_bin_str(id->tenant_id);
    m->namespace_ = wm_bin_str(id->ns);
    m->resource_id = wm_bin_str(id->resource_id);
    m->revision = wm_bin_str(id->revision);
    m->weight_generation = id->weight_generation;
}

typedef struct wm_pb_revision {
    Wmrec__Revision m;
    Wmrec__Identity id;
    Wmrec__Policy policy;
} wm_pb_revision;

static void wm_enc_revision(wm_pb_revision *h, const wm_revision *r)
{
    wmrec__revision__init(&h->m);
    wmrec__policy__init(&h->policy);
    wm_enc_identity(&h->id, &r->id);
    h->policy.preferred_residency = (uint32_t)r->policy.preferred;
    h->policy.mixed_hot_ratio = r->policy.mixed_hot_ratio;
    h->policy.migration_mode = (uint32_t)r->policy.mode;
    h->m.identity = &h->id;
    h->m.policy = &h->policy;
    h->m.availability = (uint32_t)r->availability;
    h->m.residency = (uint32_t)r->residency;
    h->m.observed_hot_ratio = r->observed_hot_ratio;
    h->m.metadata_generation = r->metadata_generation;
    h->m.operation_id = r->operation_id;
    h->m.group_key = (char *)r->group_key;
    h->m.manifest_key = (char *)r->manifest_key;
    h->m.manifest_sha256 = wm_bin_digest(r->manifest_sha256);
    h->m.payload_count = r->payload_count;
    h->m.logical_bytes = r->logical_bytes;
    h->m.payload_keys_sha256 = wm_bin_digest(r->payload_keys_sha256);
    h->m.affinity_count = r->affinity_count;
    h->m.affinity_sha256 = wm_bin_digest(r->affinity_sha256);
    h->m.created_ms = r->created_ms;
    h->m.updated_ms = r->updated_ms;
    h->m.last_access_ms = r->last_access_ms;
    h->m.lease_count = r->lease_count;
    h->m.request_id = (char *)(r->request_id != NULL ? r->request_id : wm_no_text);
    h->m.request_digest = r->request_digest;
    h->m.request_base_generation = r->request_base_generation;
    h->m.request_operation_id = r->request_operation_id;
    h->m.degraded_from = (uint32_t)r->degraded_from;
    h->m.degraded_from_hot_ratio = r->degraded_from_hot_ratio;
}

typedef struct wm_pb_operation {
    Wmrec__Operation m;
    Wmrec__Identity id;
} wm_pb_operation;

static void wm_enc_operation(wm_pb_operation *h, const wm_operation *op)
{
    wmrec__operation__init(&h->m);
    wm_enc_identity(&h->id, &op->id_of);
    h->m.id = op->id;
    h->m.kind = (uint32_t)op->kind;
    h->m.identity = &h->id;
    h->m.target_residency = (uint32_t)op->target;
    h->m.target_hot_ratio = op->target_hot_ratio;
    h->m.members_done = op->members_done;
    h->m.members_total = op->members_total;
    h->m.bytes_done = op->bytes_done;
    h->m.bytes_total = op->bytes_total;
    h->m.cursor = (char *)op->cursor;
    h->m.state = (uint32_t)op->state;
    h->m.error = (char *)op->error;
    h->m.attempts = op->attempts;
    h->m.created_ms = op->created_ms;
    h->m.updated_ms = op->updated_ms;
}

/* An affinity summary as a message; the unit arrays are allocated and
 * released by wm_pb_affinity_free(). */
typedef struct wm_pb_affinity {
    Wmrec__AffinitySummary m;
    Wmrec__AffinityUnit *units;
    Wmrec__AffinityUnit **ptrs;
} wm_pb_affinity;

static int wm_enc_affinity(wm_pb_affinity *h, const wm_affinity *a)
{
    wmrec__affinity_summary__init(&h->m);
    h->units = NULL;
    h->ptrs = NULL;
    if (a->n_units == 0) return WM_OK;
    h->units = calloc(a->n_units, sizeof(*h->units));
    h->ptrs = calloc(a->n_units, sizeof(*h->ptrs));
    if (h->units == NULL || h->ptrs == NULL) {
        free(h->units);
        free(h->ptrs);
        h->units = NULL;
        h->ptrs = NULL;
        return SMP_ENOMEM;
    }
    for (size_t i = 0; i < a->n_units; i++) {
        wmrec__affinity_unit__init(&h->units[i]);
        h->units[i].n_members = a->units[i].n_members;
        h->units[i].members = a->units[i].members;
        h->units[i].logical_bytes = a->units[i].logical_bytes;
        h->ptrs[i] = &h->units[i];
    }
    h->m.n_units = a->n_units;
    h->m.units = h->ptrs;
    return WM_OK;
}

static void wm_pb_affinity_free(wm_pb_affinity *h)
{
    free(h->units);
    free(h->ptrs);
    h->units = NULL;
    h->ptrs = NULL;
}

typedef struct wm_pb_lease {
    Wmrec__Lease m;
    Wmrec__Identity id;
} wm_pb_lease;

static void wm_enc_lease(wm_pb_lease *h, const wm_lease *l)
{
    wmrec__lease__init(&h->m);
    wm_enc_identity(&h->id, &l->id_of);
    h->m.id = l->id;
    h->m.identity = &h->id;
    h->m.metadata_generation = l->metadata_generation;
    h->m.granted_ms = l->granted_ms;
    h->m.expiry_ms = l->expiry_ms;
}

typedef struct wm_pb_claim {
    Wmrec__LineageClaim m;
    Wmrec__Identity base;
    Wmrec__Identity target;
} wm_pb_claim;

static void wm_enc_claim(wm_pb_claim *h, const wm_lineage_claim *c)
{
    wmrec__lineage_claim__init(&h->m);
    wm_enc_identity(&h->base, &c->base);
    wm_enc_identity(&h->target, &c->target);
    h->m.request_id = (char *)c->request_id;
    h->m.base_identity = &h->base;
    h->m.target_identity = &h->target;
    h->m.mode = (uint32_t)c->mode;
    h->m.phase = (uint32_t)c->phase;
    h->m.expected_metadata_generation = c->expected_metadata_generation;
    h->m.committed_watermark = c->committed_watermark;
    h->m.error = (char *)c->error;
    h->m.created_ms = c->created_ms;
    h->m.updated_ms = c->updated_ms;
}

/* Pack a message into a fresh malloc'ed buffer. */
static int wm_pack(const ProtobufCMessage *m, uint8_t **out, size_t *out_len)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(n > 0 ? n : 1);
    if (b == NULL) return SMP_ENOMEM;
    size_t w = protobuf_c_message_pack(m, b);
    if (w != n) {
        free(b);
        return SMP_EPROTO;
    }
    *out = b;
    *out_len = n;
    return WM_OK;
}

/* Invariants an upsert must hold beyond its revision alone. */
static int wm_upsert_check(const wm_metadata_upsert *u, char *msg, size_t cap)
{
    int rc;
    if ((rc = wm_metadata_check(&u->revision, msg, cap)) < 0) return rc;
    if (u->n_operations > 0 && u->operations == NULL)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "operations are missing");
    for (size_t i = 0; i < u->n_operations; i++) {
        if ((rc = wm_operation_check(&u->operations[i], &u->revision, msg, cap)) < 0) return rc;
        for (size_t j = 0; j < i; j++)
            if (u->operations[j].id == u->operations[i].id)
                return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                               "operation %" PRIu64 " appears twice", u->operations[i].id);
    }
    if (u->has_affinity) {
        if (u->revision.affinity_count == 0)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "affinity summary recorded before the revision is sealed");
        if ((rc = wm_affinity_check(&u->affinity, &u->revision, msg, cap)) < 0) return rc;
    }
    if (u->has_lease) {
        if ((rc = wm_lease_check(&u->lease, msg, cap)) < 0) return rc;
        if (wm_identity_cmp(&u->lease.id_of, &u->revision.id) != 0)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "lease %" PRIu64 " in the record names another revision", u->lease.id);
        if (u->revision.availability != WM_AVAIL_READY &&
            u->revision.availability != WM_AVAIL_DEGRADED)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "lease %" PRIu64 " granted on a %s revision", u->lease.id,
                           wm_availability_name((int)u->revision.availability));
        if (u->lease.metadata_generation != u->revision.metadata_generation)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "lease %" PRIu64 " is fenced on generation %" PRIu64
                           ", not the record's %" PRIu64,
                           u->lease.id, u->lease.metadata_generation,
                           u->revision.metadata_generation);
    }
    return WM_OK;
}

int wm_encode_metadata_upsert(const wm_metadata_upsert *in, uint8_t **out, size_t *out_len,
                              char *msg, size_t cap)
{
    int rc;
    wm_pb_revision rev;
    wm_pb_operation *ops = NULL;
    Wmrec__Operation **op_ptrs = NULL;
    wm_pb_affinity aff;
    wm_pb_lease lease;
    Wmrec__MetadataUpsert m = WMREC__METADATA_UPSERT__INIT;

    if (in == NULL || out == NULL || out_len == NULL) return WM_EINVALID_ARGUMENT;
    if ((rc = wm_upsert_check(in, msg, cap)) < 0) return rc;
    wm_enc_revision(&rev, &in->revision);
    m.revision = &rev.m;
    if (in->n_operations > 0) {
        ops = calloc(in->n_operations, sizeof(*ops));
        op_ptrs = calloc(in->n_operations, sizeof(*op_ptrs));
        if (ops == NULL || op_ptrs == NULL) {
            rc = SMP_ENOMEM;
            goto free_ops;
        }
        for (size_t i = 0; i < in->n_operations; i++) {
            wm_enc_operation(&ops[i], &in->operations[i]);
            op_ptrs[i] = &ops[i].m;
        }
        m.n_operations = in->n_operations;
        m.operations = op_ptrs;
    }
    if (in->has_affinity) {
        if ((rc = wm_enc_affinity(&aff, &in->affinity)) < 0) goto free_ops;
        m.affinity = &aff.m;
    }
    if (in->has_lease) {
        wm_enc_lease(&lease, &in->lease);
        m.lease = &lease.m;
    }
    rc = wm_pack(&m.base, out, out_len);
    if (in->has_affinity) wm_pb_affinity_free(&aff);
free_ops:
    free(ops);
    free(op_ptrs);
    return rc;
}

static int wm_delete_check(const wm_metadata_delete *d, char *msg, size_t cap)
{
    int rc;
    if ((rc = wm_identity_check(&d->id, msg, cap)) < 0) return rc;
    if (d->metadata_generation == 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "delete names metadata generation 0");
    if (d->reason != WM_DEL_IMPORT_ABORTED && d->reason != WM_DEL_TOMBSTONE_EXPIRED &&
        d->reason != WM_DEL_OPERATIONS_EXPIRED)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "delete reason %d is not a reason",
                       (int)d->reason);
    if (d->n_operation_ids > 0 && d->operation_ids == NULL)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "operation ids are missing");
    for (size_t i = 0; i < d->n_operation_ids; i++)
        if (d->operation_ids[i] == 0)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "delete names operation id 0");
    if (d->reason == WM_DEL_OPERATIONS_EXPIRED && d->n_operation_ids == 0)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "an operations-expired delete lists none");
    return WM_OK;
}

int wm_encode_metadata_delete(const wm_metadata_delete *in, uint8_t **out, size_t *out_len,
                              char *msg, size_t cap)
{
    int rc;
    Wmrec__Identity id;
    Wmrec__MetadataDelete m = WMREC__METADATA_DELETE__INIT;
    if (in == NULL || out == NULL || out_len == NULL) return WM_EINVALID_ARGUMENT;
    if ((rc = wm_delete_check(in, msg, cap)) < 0) return rc;
    wm_enc_identity(&id, &in->id);
    m.identity = &id;
    m.metadata_generation = in->metadata_generation;
    m.reason = (uint32_t)in->reason;
    m.n_operation_ids = in->n_operation_ids;
    m.operation_ids = in->operation_ids;
    return wm_pack(&m.base, out, out_len);
}

int wm_encode_lease_upsert(const wm_lease *in, uint8_t **out, size_t *out_len, char *msg, size_t cap)
{
    int rc;
    wm_pb_lease l;
    Wmrec__LeaseUpsert m = WMREC__LEASE_UPSERT__INIT;
    if (in == NULL || out == NULL || out_len == NULL) return WM_EINVALID_ARGUMENT;
    if ((rc = wm_lease_check(in, msg, cap)) < 0) return rc;
    wm_enc_lease(&l, in);
    m.lease = &l.m;
    return wm_pack(&m.base, out, out_len);
}

static int wm_lease_end_valid(int v)
{
    return v >= WM_LEASE_RELEASED && v <= WM_LEASE_REVOKED;
}

int wm_encode_lease_delete(const wm_lease_delete *in, uint8_t **out, size_t *out_len,
                           char *msg, size_t cap)
{
    int rc;
    Wmrec__Identity id;
    Wmrec__LeaseDelete m = WMREC__LEASE_DELETE__INIT;
    if (in == NULL || out == NULL || out_len == NULL) return WM_EINVALID_ARGUMENT;
    if (in->lease_id == 0) return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "lease id is 0");
    if ((rc = wm_identity_check(&in->id_of, msg, cap)) < 0) return rc;
    if (!wm_lease_end_valid((int)in->reason))
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "lease end reason %d is not a reason",
                       (int)in->reason);
    wm_enc_identity(&id, &in->id_of);
    m.lease_id = in->lease_id;
    m.identity = &id;
    m.reason = (uint32_t)in->reason;
    return wm_pack(&m.base, out, out_len);
}

int wm_encode_lineage_claim(const wm_lineage_claim *in, uint8_t **out, size_t *out_len,
                            char *msg, size_t cap)
{
    int rc;
    wm_pb_claim c;
    if (in == NULL || out == NULL || out_len == NULL) return WM_EINVALID_ARGUMENT;
    if ((rc = wm_claim_check(in, msg, cap)) < 0) return rc;
    wm_enc_claim(&c, in);
    return wm_pack(&c.m.base, out, out_len);
}

typedef struct wm_pb_rev_entry {
    Wmrec__RevisionEntry m;
    wm_pb_revision rev;
    wm_pb_affinity aff;
} wm_pb_rev_entry;

typedef struct wm_pb_lineage_entry {
    Wmrec__LineageEntry m;
    Wmrec__Lineage lin;
    wm_pb_claim claim;
} wm_pb_lineage_entry;

int wm_encode_section(const wm_section_image *in, uint8_t **out, size_t *out_len,
                      char *msg, size_t cap)
{
    int rc;
    Wmrec__WeightMetadataSection m = WMREC__WEIGHT_METADATA_SECTION__INIT;
    wm_pb_rev_entry *revs = NULL;
    Wmrec__RevisionEntry **rev_ptrs = NULL;
    wm_pb_operation *ops = NULL;
    Wmrec__Operation **op_ptrs = NULL;
    wm_pb_lease *leases = NULL;
    Wmrec__Lease **lease_ptrs = NULL;
    wm_pb_lineage_entry *lins = NULL;
    Wmrec__LineageEntry **lin_ptrs = NULL;
    size_t n_aff = 0;

    if (in == NULL || out == NULL || out_len == NULL) return WM_EINVALID_ARGUMENT;
    if ((rc = wm_section_check(in, msg, cap)) < 0) return rc;
    /* calloc(n, s) with n == 0 may return NULL: ask for at least one. */
    revs = calloc(in->n_revisions + 1, sizeof(*revs));
    rev_ptrs = calloc(in->n_revisions + 1, sizeof(*rev_ptrs));
    ops = calloc(in->n_operations + 1, sizeof(*ops));
    op_ptrs = calloc(in->n_operations + 1, sizeof(*op_ptrs));
    leases = calloc(in->n_leases + 1, sizeof(*leases));
    lease_ptrs = calloc(in->n_leases + 1, sizeof(*lease_ptrs));
    lins = calloc(in->n_lineages + 1, sizeof(*lins));
    lin_ptrs = calloc(in->n_lineages + 1, sizeof(*lin_ptrs));
    if (revs == NULL || rev_ptrs == NULL || ops == NULL || op_ptrs == NULL || leases == NULL ||
        lease_ptrs == NULL || lins == NULL || lin_ptrs == NULL) {
        rc = SMP_ENOMEM;
        goto free_holders;
    }
    for (size_t i = 0; i < in->n_revisions; i++) {
        wm_pb_rev_entry *e = &revs[i];
        wmrec__revision_entry__init(&e->m);
        wm_enc_revision(&e->rev, wm_image_revision(in, i));
        e->m.revision = &e->rev.m;
        const wm_affinity *a = wm_image_affinity(in, i);
        if (a != NULL && a->n_units > 0) {
            if ((rc = wm_enc_affinity(&e->aff, a)) < 0) goto free_affinities;
            n_aff = i + 1;
            e->m.affinity = &e->aff.m;
        }
        rev_ptrs[i] = &e->m;
    }
    for (size_t i = 0; i < in->n_operations; i++) {
        wm_enc_operation(&ops[i], &in->operations[i]);
        op_ptrs[i] = &ops[i].m;
    }
    for (size_t i = 0; i < in->n_leases; i++) {
        wm_enc_lease(&leases[i], &in->leases[i]);
        lease_ptrs[i] = &leases[i].m;
    }
    for (size_t i = 0; i < in->n_lineages; i++) {
        wm_pb_lineage_entry *e = &lins[i];
        const wm_lineage_entry *src = &in->lineages[i];
        wmrec__lineage_entry__init(&e->m);
        wmrec__lineage__init(&e->lin);
        e->lin.tenant_id = wm_bin_str(src->lineage.tenant_id);
        e->lin.namespace_ = wm_bin_str(src->lineage.ns);
        e->lin.resource_id = wm_bin_str(src->lineage.resource_id);
        e->lin.revision = wm_bin_str(src->lineage.revision);
        e->m.lineage = &e->lin;
        e->m.committed_watermark = src->committed_watermark;
        if (src->has_claim) {
            wm_enc_claim(&e->claim, &src->claim);
            e->m.claim = &e->claim.m;
        }
        lin_ptrs[i] = &e->m;
    }
    m.format = WM_SECTION_FORMAT;
    m.n_revisions = in->n_revisions;
    m.revisions = rev_ptrs;
    m.n_operations = in->n_operations;
    m.operations = op_ptrs;
    m.n_leases = in->n_leases;
    m.leases = lease_ptrs;
    m.n_lineages = in->n_lineages;
    m.lineages = lin_ptrs;
    m.next_operation_id = in->next_operation_id;
    m.next_lease_id = in->next_lease_id;
    rc = wm_pack(&m.base, out, out_len);
free_affinities:
    for (size_t i = 0; i < n_aff; i++) wm_pb_affinity_free(&revs[i].aff);
free_holders:
    free(revs);
    free(rev_ptrs);
    free(ops);
    free(op_ptrs);
    free(leases);
    free(lease_ptrs);
    free(lins);
    free(lin_ptrs);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Decoding: messages -> records                                             */
/* ------------------------------------------------------------------------ */

/* Values above this are never an enum of ours; keeps casts to int safe. */
#define WM_ENUM_CEILING 1024u

static int wm_dec_enum(uint32_t v, int (*valid)(int), int *out)
{
    if (v > WM_ENUM_CEILING || !valid((int)v)) return -1;
    *out = (int)v;
    return 0;
}

static int wm_dec_component(const ProtobufCBinaryData *b, char *dst, const char *what,
                            const char *field, char *msg, size_t cap)
{
    if (b->len == 0) return wm_fail(SMP_EPROTO, msg, cap, "%s: %s is missing", what, field);
    if (wm_component_check((const char *)b->data, b->len) < 0)
        return wm_fail(SMP_EPROTO, msg, cap,
                       "%s: %s is not 1..%d bytes of UTF-8 without NUL", what, field,
                       WM_ID_COMPONENT_MAX);
    memcpy(dst, b->data, b->len);
    dst[b->len] = '\0';
    return WM_OK;
}

static int wm_dec_strings(const ProtobufCBinaryData *t,
                          const ProtobufCBinaryData *n,
                          const ProtobufCBinaryData *r,
                          const ProtobufCBinaryData *v,
                          char *dt, char *dn, char *dr, char *dv,
                          const char *what, char *msg, size_t cap)
{
    int rc;
    if ((rc = wm_dec_component(t, dt, what, "tenant_id", msg, cap)) < 0) return rc;
    if ((rc = wm_dec_component(n, dn, what, "namespace", msg, cap)) < 0) return rc;
    if ((rc = wm_dec_component(r, dr, what, "resource_id", msg, cap)) < 0) return rc;
    return wm_dec_component(v, dv, what, "revision", msg, cap);
}

/* The bytes wm_dec_identity writes for m: its four strings and their NULs
 * (0 for a missing identity, which it refuses). */
size_t wm_dec_id_len(const Wmrec__Identity *m)
{
    if (m == NULL) return 0;
    return m->tenant_id.len + m->namespace_.len + m->resource_id.len + m->revision.len + 4;
}

/* Decode and check an identity. Its strings are copied to *strs, which is
 * advanced past them (the caller sized the storage with wm_dec_id_len), and
 * out's strings point there. */
static int wm_dec_identity(const Wmrec__Identity *m, wm_identity *out, char **strs,
                           const char *what, char *msg, size_t cap)
{
    int rc;
    char why[160];
    if (m == NULL) return wm_fail(SMP_EPROTO, msg, cap, "%s: identity is missing", what);
    char *t = *strs, *n = t + m->tenant_id.len + 1, *r = n + m->namespace_.len + 1,
         *v = r + m->resource_id.len + 1;
    if ((rc = wm_dec_strings(&m->tenant_id, &m->namespace_, &m->resource_id, &m->revision, t, n,
                             r, v, what, msg, cap)) < 0)
        return rc;
    out->tenant_id = t;
    out->ns = n;
    out->resource_id = r;
    out->revision = v;
    out->weight_generation = m->weight_generation;
    *strs = v + m->revision.len + 1;
    if (wm_identity_check(out, why, sizeof(why)) < 0)
        return wm_fail(SMP_EPROTO, msg, cap, "%s: %s", what, why);
    return WM_OK;
}

/* Copy a decoded string into a fixed buffer of dstcap bytes. */
static int wm_dec_text(const char *s, char *dst, size_t dstcap, const char *what, char *msg,
                       size_t cap)
{
    if (s == NULL) s = wm_no_text;
    size_t len = strlen(s);
    if (len >= dstcap)
        return wm_fail(SMP_EPROTO, msg, cap, "%s is %zu bytes, above %zu", what, len, dstcap - 1);
    if (wm_text_check(s, len) < 0) return wm_fail(SMP_EPROTO, msg, cap, "%s is not UTF-8", what);
    memcpy(dst, s, len + 1);
    return WM_OK;
}

static int wm_dec_digest(const ProtobufCBinaryData *b, uint8_t *out, const char *what,
                         char *msg, size_t cap)
{
    if (b->len == 0) {
        memset(out, 0, WM_SHA256_LEN);
        return WM_OK;
    }
    if (b->len != WM_SHA256_LEN)
        return wm_fail(SMP_EPROTO, msg, cap, "%s is %zu bytes, not %d", what, b->len,
                       WM_SHA256_LEN);
    memcpy(out, b->data, WM_SHA256_LEN);
    return WM_OK;
}

/* The bytes the identity strings, the group and manifest keys and the
 * request id of m take in a decoder's key storage, NULs included (what
 * wm_dec_revision consumes). */
size_t wm_dec_keys_len(const Wmrec__Revision *m)
{
    if (m == NULL) return 0;
    return wm_dec_id_len(m->identity) + strlen(m->group_key ? m->group_key : wm_no_text) + 1 +
           strlen(m->manifest_key ? m->manifest_key : wm_no_text) + 1 +
           strlen(m->request_id ? m->request_id : wm_no_text) + 1;
}

/* Decode and check a revision into *out. Its identity strings and keys are
 * copied to *keys, which is advanced past them (the caller sized the
 * storage with wm_dec_keys_len), and out's pointers point there. */
int wm_dec_revision(const Wmrec__Revision *m, wm_revision *out, char **keys, char *msg,
                    size_t cap)
{
    int rc, v;
    char why[256];
    wm_revision r;

    if (m == NULL) return wm_fail(SMP_EPROTO, msg, cap, "revision is missing");
    memset(&r, 0, sizeof(r));
    if ((rc = wm_dec_identity(m->identity, &r.id, keys, "revision", msg, cap)) < 0) return rc;
    if (m->policy == NULL) return wm_fail(SMP_EPROTO, msg, cap, "revision: policy is missing");
    if (wm_dec_enum(m->policy->preferred_residency, wm_residency_valid, &v) < 0)
        return wm_fail(SMP_EPROTO, msg, cap, "revision: preferred residency %" PRIu32 " is unknown",
                       m->policy->preferred_residency);
    r.policy.preferred = (wm_residency)v;
    if (wm_dec_enum(m->policy->migration_mode, wm_mode_valid, &v) < 0)
        return wm_fail(SMP_EPROTO, msg, cap, "revision: migration mode %" PRIu32 " is unknown",
                       m->policy->migration_mode);
    r.policy.mode = (wm_migration_mode)v;
    r.policy.mixed_hot_ratio = m->policy->mixed_hot_ratio;
    if (wm_dec_enum(m->availability, wm_availability_valid, &v) < 0)
        return wm_fail(SMP_EPROTO, msg, cap, "revision: availability %" PRIu32 " is unknown",
                       m->availability);
    r.availability = (wm_availability)v;
    if (wm_dec_enum(m->residency, wm_residency_valid, &v) < 0)
        return wm_fail(SMP_EPROTO, msg, cap, "revision: residency %" PRIu32 " is unknown",
                       m->residency);
    r.residency = (wm_residency)v;
    r.observed_hot_ratio = m->observed_hot_ratio;
    r.metadata_generation = m->metadata_generation;
    r.operation_id = m->operation_id;
    char *gk = *keys;
    if ((rc = wm_dec_text(m->group_key, gk, WM_KEY_MAX + 1, "revision group key", msg, cap)) < 0)
        return rc;
    char *mk = gk + strlen(gk) + 1;
    if ((rc = wm_dec_text(m->manifest_key, mk, WM_KEY_MAX + 1, "revision manifest key", msg,
                          cap)) < 0)
        return rc;
    r.group_key = gk;
    r.manifest_key = mk;
    if (
        (rc = wm_dec_digest(&m->manifest_sha256, r.manifest_sha256, "manifest_sha256", msg,
                            cap)) < 0 ||
        (rc = wm_dec_digest(&m->payload_keys_sha256, r.payload_keys_sha256,
                            "payload_keys_sha256", msg, cap)) < 0 ||
        (rc = wm_dec_digest(&m->affinity_sha256, r.affinity_sha256, "affinity_sha256", msg,
                            cap)) < 0)
        return rc;
    r.payload_count = m->payload_count;
    r.logical_bytes = m->logical_bytes;
    r.affinity_count = m->affinity_count;
    r.created_ms = m->created_ms;
    r.updated_ms = m->updated_ms;
    r.last_access_ms = m->last_access_ms;
    r.lease_count = m->lease_count;
    char *rq = mk + strlen(mk) + 1;
    if ((rc = wm_dec_text(m->request_id, rq, WM_REQUEST_ID_MAX + 1, "revision request id", msg,
                          cap)) < 0)
        return rc;
    r.request_id = rq;
    r.request_digest = m->request_digest;
    r.request_base_generation = m->request_base_generation;
    r.request_operation_id = m->request_operation_id;
    if (wm_dec_enum(m->degraded_from, wm_residency_valid, &v) < 0)
        return wm_fail(SMP_EPROTO, msg, cap, "revision: residency before the loss %" PRIu32 " is unknown",
                       m->degraded_from);
    r.degraded_from = (wm_residency)v;
    r.degraded_from_hot_ratio = m->degraded_from_hot_ratio;
    /* The identity passed wm_identity_check in wm_dec_identity above. */
    if (wm_metadata_check_fields(&r, why, sizeof(why)) < 0)
        return wm_fail(SMP_EPROTO, msg, cap, "revision: %s", why);
    *keys = rq + strlen(rq) + 1;
    *out = r;
    return WM_OK;
}

/* Decode and check an operation; its identity strings go to *strs (see
 * wm_dec_identity). */
int wm_dec_operation(const Wmrec__Operation *m, wm_operation *out, char **strs, char *msg,
                     size_t cap)
{
    int rc, v;
    char why[256];
    wm_operation op;

    if (m == NULL) return wm_fail(SMP_EPROTO, msg, cap, "operation is missing");
    memset(&op, 0, sizeof(op));
    op.id = m->id;
    if (wm_dec_enum(m->kind, wm_op_kind_valid, &v) < 0)
        return wm_fail(SMP_EPROTO, msg, cap, "operation %" PRIu64 ": kind %" PRIu32 " is unknown",
                       m->id, m->kind);
    op.kind = (wm_op_kind)v;
    if ((rc = wm_dec_identity(m->identity, &op.id_of, strs, "operation", msg, cap)) < 0)
        return rc;
    if (wm_dec_enum(m->target_residency, wm_residency_valid, &v) < 0)
        return wm_fail(SMP_EPROTO, msg, cap,
                       "operation %" PRIu64 ": target residency %" PRIu32 " is unknown", m->id,
                       m->target_residency);
    op.target = (wm_residency)v;
    op.target_hot_ratio = m->target_hot_ratio;
    op.members_done = m->members_done;
    op.members_total = m->members_total;
    op.bytes_done = m->bytes_done;
    op.bytes_total = m->bytes_total;
    if (wm_dec_enum(m->state, wm_op_state_valid, &v) < 0)
        return wm_fail(SMP_EPROTO, msg, cap, "operation %" PRIu64 ": state %" PRIu32 " is unknown",
                       m->id, m->state);
    op.state = (wm_op_state)v;
    if ((rc = wm_dec_text(m->cursor, op.cursor, sizeof(op.cursor), "operation cursor", msg,
                          cap)) < 0 ||
        (rc = wm_dec_text(m->error, op.error, sizeof(op.error), "operation error", msg, cap)) < 0)
        return rc;
    op.attempts = m->attempts;
    op.created_ms = m->created_ms;
    op.updated_ms = m->updated_ms;
    if (wm_operation_check(&op, NULL, why, sizeof(why)) < 0)
        return wm_fail(SMP_EPROTO, msg, cap, "%s", why);
    *out = op;
    return WM_OK;
}

/* Decode a summary into fresh memory; the caller checks it against its
 * revision. */
int wm_dec_affinity(const Wmrec__AffinitySummary *m, wm_affinity *out, char *msg,
                    size_t cap)
{
    int rc = WM_OK;
    wm_affinity a = {NULL, 0, 0};

    if (m->n_units == 0) return wm_fail(SMP_EPROTO, msg, cap, "affinity summary has no unit");
    a.units = calloc(m->n_units, sizeof(*a.units));
    if (a.units == NULL) return SMP_ENOMEM;
    for (size_t i = 0; i < m->n_units; i++) {
        const Wmrec__AffinityUnit *u = m->units[i];
        a.n_units = i + 1;
        if (u == NULL || u->n_members == 0) {
            rc = wm_fail(SMP_EPROTO, msg, cap, "affinity unit %zu has no member", i);
            goto free_summary;
        }
        a.units[i].logical_bytes = u->logical_bytes;
        a.units[i].members = calloc(u->n_members, sizeof(char *));
        if (a.units[i].members == NULL) {
            rc = SMP_ENOMEM;
            goto free_summary;
        }
        for (size_t j = 0; j < u->n_members; j++) {
            const char *k = u->members[j] != NULL ? u->members[j] : wm_no_text;
            size_t len = strlen(k);
            a.units[i].n_members = j + 1;
            if (len == 0 || len > WM_KEY_MAX || wm_text_check(k, len) < 0) {
                rc = wm_fail(SMP_EPROTO, msg, cap, "affinity unit %zu member %zu is not a key", i,
                             j);
                goto free_summary;
            }
            if ((a.units[i].members[j] = strdup(k)) == NULL) {
                rc = SMP_ENOMEM;
                goto free_summary;
            }
        }
    }
    *out = a;
    return WM_OK;
free_summary:
    wm_affinity_clear(&a);
    return rc;
}

int wm_dec_affinity_in(const Wmrec__AffinitySummary *m, wm_affinity *out,
                       void *(*alloc)(void *ctx, size_t len), void *ctx, char *msg, size_t cap)
{
    size_t n_members = 0, key_bytes = 0;

    if (alloc == NULL) return wm_dec_affinity(m, out, msg, cap);
    /* The checks of wm_dec_affinity, in its order, before anything is
     * placed: then one block of the exact size. */
    if (m->n_units == 0) return wm_fail(SMP_EPROTO, msg, cap, "affinity summary has no unit");
    for (size_t i = 0; i < m->n_units; i++) {
        const Wmrec__AffinityUnit *u = m->units[i];
        if (u == NULL || u->n_members == 0)
            return wm_fail(SMP_EPROTO, msg, cap, "affinity unit %zu has no member", i);
        for (size_t j = 0; j < u->n_members; j++) {
            const char *k = u->members[j] != NULL ? u->members[j] : wm_no_text;
            size_t len = strlen(k);
            if (len == 0 || len > WM_KEY_MAX || wm_text_check(k, len) < 0)
                return wm_fail(SMP_EPROTO, msg, cap, "affinity unit %zu member %zu is not a key",
                               i, j);
            key_bytes += len + 1;
        }
        n_members += u->n_members;
    }
    /* Units, then every unit's member array, then the keys: each part's
     * size keeps the next aligned (a unit is a multiple of a pointer). */
    wm_affinity_unit *units =
        alloc(ctx, m->n_units * sizeof(*units) + n_members * sizeof(char *) + key_bytes);
    if (units == NULL) return SMP_ENOMEM;
    char **members = (char **)(units + m->n_units);
    char *keys = (char *)(members + n_members);
    for (size_t i = 0; i < m->n_units; i++) {
        const Wmrec__AffinityUnit *u = m->units[i];
        units[i].logical_bytes = u->logical_bytes;
        units[i].n_members = u->n_members;
        units[i].members = members;
        for (size_t j = 0; j < u->n_members; j++) {
            const char *k = u->members[j] != NULL ? u->members[j] : wm_no_text;
            size_t len = strlen(k) + 1;
            *members++ = memcpy(keys, k, len);
            keys += len;
        }
    }
    *out = (wm_affinity){units, m->n_units, 1};
    return WM_OK;
}

/* Decode and check a lease; its identity strings go to *strs (see
 * wm_dec_identity). */
int wm_dec_lease(const Wmrec__Lease *m, wm_lease *out, char **strs, char *msg, size_t cap)
{
    int rc;
    char why[256];
    wm_lease l;
    if (m == NULL) return wm_fail(SMP_EPROTO, msg, cap, "lease is missing");
    memset(&l, 0, sizeof(l));
    l.id = m->id;
    if ((rc = wm_dec_identity(m->identity, &l.id_of, strs, "lease", msg, cap)) < 0) return rc;
    l.metadata_generation = m->metadata_generation;
    l.granted_ms = m->granted_ms;
    l.expiry_ms = m->expiry_ms;
    if (wm_lease_check(&l, why, sizeof(why)) < 0) return wm_fail(SMP_EPROTO, msg, cap, "%s", why);
    *out = l;
    return WM_OK;
}

/* The bytes wm_dec_claim writes to its string storage. */
size_t wm_dec_claim_len(const Wmrec__LineageClaim *m)
{
    return m == NULL ? 0 : wm_dec_id_len(m->base_identity) + wm_dec_id_len(m->target_identity);
}

/* Decode and check a claim; its identities' strings go to *strs (see
 * wm_dec_identity). */
static int wm_dec_claim(const Wmrec__LineageClaim *m, wm_lineage_claim *out, char **strs,
                        char *msg, size_t cap)
{
    int rc, v;
    char why[256];
    wm_lineage_claim c;
    if (m == NULL) return wm_fail(SMP_EPROTO, msg, cap, "claim is missing");
    memset(&c, 0, sizeof(c));
    if ((rc = wm_dec_text(m->request_id, c.request_id, sizeof(c.request_id), "claim request_id",
                          msg, cap)) < 0)
        return rc;
    if ((rc = wm_dec_identity(m->base_identity, &c.base, strs, "claim base", msg, cap)) < 0)
        return rc;
    if ((rc = wm_dec_identity(m->target_identity, &c.target, strs, "claim target", msg, cap)) < 0)
        return rc;
    if (wm_dec_enum(m->mode, wm_upsert_mode_valid, &v) < 0)
        return wm_fail(SMP_EPROTO, msg, cap, "claim: mode %" PRIu32 " is unknown", m->mode);
    c.mode = (wm_upsert_mode)v;
    if (wm_dec_enum(m->phase, wm_phase_valid, &v) < 0)
        return wm_fail(SMP_EPROTO, msg, cap, "claim: phase %" PRIu32 " is unknown", m->phase);
    c.phase = (wm_claim_phase)v;
    c.expected_metadata_generation = m->expected_metadata_generation;
    c.committed_watermark = m->committed_watermark;
    if ((rc = wm_dec_text(m->error, c.error, sizeof(c.error), "claim error", msg, cap)) < 0)
        return rc;
    c.created_ms = m->created_ms;
    c.updated_ms = m->updated_ms;
    if (wm_claim_check(&c, why, sizeof(why)) < 0) return wm_fail(SMP_EPROTO, msg, cap, "%s", why);
    *out = c;
    return WM_OK;
}

void wm_metadata_upsert_clear(wm_metadata_upsert *u)
{
    if (u == NULL) return;
    free(u->operations);
    wm_affinity_clear(&u->affinity);
    free(u->keys);
    memset(u, 0, sizeof(*u));
}

void wm_metadata_delete_clear(wm_metadata_delete *d)
{
    if (d == NULL) return;
    free(d->operation_ids);
    free(d->strs);
    memset(d, 0, sizeof(*d));
}

void wm_section_image_clear(wm_section_image *img)
{
    if (img == NULL) return;
    if (img->affinities != NULL)
        for (size_t i = 0; i < img->n_revisions; i++) wm_affinity_clear(wm_image_affinity(img, i));
    free(img->strs);
    if (img->stride > 0) { /* placed: the storage is the caller's */
        free(img->operations);
        free(img->leases);
        free(img->lineages);
        memset(img, 0, sizeof(*img));
        return;
    }
    if (img->revisions_len > 0)
        wm_bulk_free(img->revisions, img->revisions_len);
    else
        free(img->revisions);
    free(img->affinities);
    free(img->operations);
    free(img->leases);
    free(img->lineages);
    free(img->keys);
    memset(img, 0, sizeof(*img));
}

int wm_decode_metadata_upsert(const uint8_t *buf, size_t len, wm_metadata_upsert *out,
                              char *msg, size_t cap)
{
    int rc;
    char why[256];
    wm_metadata_upsert u;
    Wmrec__MetadataUpsert *m;

    if (out == NULL || (buf == NULL && len > 0)) return WM_EINVALID_ARGUMENT;
    m = wmrec__metadata_upsert__unpack(NULL, len, buf);
    if (m == NULL) return wm_fail(SMP_EPROTO, msg, cap, "metadata upsert does not decode");
    memset(&u, 0, sizeof(u));
    size_t keys_len = wm_dec_keys_len(m->revision) + 1;
    for (size_t i = 0; i < m->n_operations; i++)
        if (m->operations[i] != NULL) keys_len += wm_dec_id_len(m->operations[i]->identity);
    if (m->lease != NULL) keys_len += wm_dec_id_len(m->lease->identity);
    u.keys = malloc(keys_len);
    if (u.keys == NULL) {
        rc = SMP_ENOMEM;
        goto free_message;
    }
    char *keys = u.keys;
    if ((rc = wm_dec_revision(m->revision, &u.revision, &keys, msg, cap)) < 0) goto free_record;
    if (m->n_operations > 0) {
        u.operations = calloc(m->n_operations, sizeof(*u.operations));
        if (u.operations == NULL) {
            rc = SMP_ENOMEM;
            goto free_message;
        }
        for (size_t i = 0; i < m->n_operations; i++) {
            if ((rc = wm_dec_operation(m->operations[i], &u.operations[i], &keys, msg, cap)) < 0)
                goto free_record;
            u.n_operations = i + 1;
        }
    }
    if (m->affinity != NULL) {
        if ((rc = wm_dec_affinity(m->affinity, &u.affinity, msg, cap)) < 0) goto free_record;
        u.has_affinity = 1;
    }
    if (m->lease != NULL) {
        if ((rc = wm_dec_lease(m->lease, &u.lease, &keys, msg, cap)) < 0) goto free_record;
        u.has_lease = 1;
    }
    if (wm_upsert_check(&u, why, sizeof(why)) < 0) {
        rc = wm_fail(SMP_EPROTO, msg, cap, "%s", why);
        goto free_record;
    }
    *out = u;
    wmrec__metadata_upsert__free_unpacked(m, NULL);
    return WM_OK;
free_record:
    wm_metadata_upsert_clear(&u);
free_message:
    wmrec__metadata_upsert__free_unpacked(m, NULL);
    return rc;
}

int wm_decode_metadata_delete(const uint8_t *buf, size_t len, wm_metadata_delete *out,
                              char *msg, size_t cap)
{
    int rc, v;
    char why[256];
    wm_metadata_delete d;
    Wmrec__MetadataDelete *m;

    if (out == NULL || (buf == NULL && len > 0)) return WM_EINVALID_ARGUMENT;
    m = wmrec__metadata_delete__unpack(NULL, len, buf);
    if (m == NULL) return wm_fail(SMP_EPROTO, msg, cap, "metadata delete does not decode");
    memset(&d, 0, sizeof(d));
    d.strs = malloc(wm_dec_id_len(m->identity) + 1);
    if (d.strs == NULL) {
        rc = SMP_ENOMEM;
        goto free_message;
    }
    char *strs = d.strs;
    if ((rc = wm_dec_identity(m->identity, &d.id, &strs, "metadata delete", msg, cap)) < 0)
        goto free_record;
    d.metadata_generation = m->metadata_generation;
    if (m->reason > WM_ENUM_CEILING) {
        rc = wm_fail(SMP_EPROTO, msg, cap, "metadata delete: reason %" PRIu32 " is unknown",
                     m->reason);
        goto free_record;
    }
    v = (int)m->reason;
    d.reason = (wm_delete_reason)v;
    if (m->n_operation_ids > 0) {
        d.operation_ids = malloc(m->n_operation_ids * sizeof(*d.operation_ids));
        if (d.operation_ids == NULL) {
            rc = SMP_ENOMEM;
            goto free_record;
        }
        memcpy(d.operation_ids, m->operation_ids, m->n_operation_ids * sizeof(*d.operation_ids));
        d.n_operation_ids = m->n_operation_ids;
    }
    if (wm_delete_check(&d, why, sizeof(why)) < 0) {
        rc = wm_fail(SMP_EPROTO, msg, cap, "metadata delete: %s", why);
        goto free_record;
    }
    *out = d;
    rc = WM_OK;
    goto free_message;
free_record:
    wm_metadata_delete_clear(&d);
free_message:
    wmrec__metadata_delete__free_unpacked(m, NULL);
    return rc;
}

int wm_decode_lease_upsert(const uint8_t *buf, size_t len, wm_lease *out, wm_identity_buf *ids,
                           char *msg, size_t cap)
{
    int rc;
    wm_lease l;
    Wmrec__LeaseUpsert *m;
    if (out == NULL || ids == NULL || (buf == NULL && len > 0)) return WM_EINVALID_ARGUMENT;
    m = wmrec__lease_upsert__unpack(NULL, len, buf);
    if (m == NULL) return wm_fail(SMP_EPROTO, msg, cap, "lease upsert does not decode");
    char *tmp = malloc((m->lease != NULL ? wm_dec_id_len(m->lease->identity) : 0) + 1);
    char *strs = tmp;
    if (tmp == NULL) {
        rc = SMP_ENOMEM;
    } else if ((rc = wm_dec_lease(m->lease, &l, &strs, msg, cap)) == WM_OK) {
        wm_identity_buf_set(ids, &l.id_of);
        l.id_of = ids->id;
        *out = l;
    }
    free(tmp);
    wmrec__lease_upsert__free_unpacked(m, NULL);
    return rc;
}

int wm_decode_lease_delete(const uint8_t *buf, size_t len, wm_lease_delete *out,
                           wm_identity_buf *ids, char *msg, size_t cap)
{
    int rc;
    wm_lease_delete d;
    char *tmp = NULL, *strs;
    Wmrec__LeaseDelete *m;
    if (out == NULL || ids == NULL || (buf == NULL && len > 0)) return WM_EINVALID_ARGUMENT;
    m = wmrec__lease_delete__unpack(NULL, len, buf);
    if (m == NULL) return wm_fail(SMP_EPROTO, msg, cap, "lease delete does not decode");
    memset(&d, 0, sizeof(d));
    d.lease_id = m->lease_id;
    if ((strs = tmp = malloc(wm_dec_id_len(m->identity) + 1)) == NULL) {
        rc = SMP_ENOMEM;
        goto free_message;
    }
    if ((rc = wm_dec_identity(m->identity, &d.id_of, &strs, "lease delete", msg, cap)) < 0)
        goto free_message;
    if (m->lease_id == 0 || m->reason > WM_ENUM_CEILING || !wm_lease_end_valid((int)m->reason)) {
        rc = wm_fail(SMP_EPROTO, msg, cap, "lease delete: lease id %" PRIu64 " or reason %" PRIu32
                     " is invalid", m->lease_id, m->reason);
        goto free_message;
    }
    d.reason = (wm_lease_end)m->reason;
    wm_identity_buf_set(ids, &d.id_of);
    d.id_of = ids->id;
    *out = d;
free_message:
    free(tmp);
    wmrec__lease_delete__free_unpacked(m, NULL);
    return rc;
}

int wm_decode_lineage_claim(const uint8_t *buf, size_t len, wm_lineage_claim *out,
                            wm_identity_buf *ids, char *msg, size_t cap)
{
    int rc;
    wm_lineage_claim c;
    Wmrec__LineageClaim *m;
    if (out == NULL || ids == NULL || (buf == NULL && len > 0)) return WM_EINVALID_ARGUMENT;
    m = wmrec__lineage_claim__unpack(NULL, len, buf);
    if (m == NULL) return wm_fail(SMP_EPROTO, msg, cap, "lineage claim does not decode");
    char *tmp = malloc(wm_dec_claim_len(m) + 1), *strs = tmp;
    if (tmp == NULL)
        rc = SMP_ENOMEM;
    else if ((rc = wm_dec_claim(m, &c, &strs, msg, cap)) == WM_OK) {
        /* wm_claim_check passed: base and target are one lineage. */
        wm_identity_buf_set(ids, &c.base);
        c.base = ids->id;
        uint64_t tgen = c.target.weight_generation;
        c.target = ids->id;
        c.target.weight_generation = tgen;
        *out = c;
    }
    free(tmp);
    wmrec__lineage_claim__free_unpacked(m, NULL);
    return rc;
}

/* Decode a lineage entry; its claim's strings go to *strs (see
 * wm_dec_identity) until the table is checked and the claim bound to the
 * entry (wm_lineage_entry_bind). */
int wm_dec_lineage_entry(const Wmrec__LineageEntry *m, wm_lineage_entry *out, char **strs,
                         char *msg, size_t cap)
{
    int rc;
    char why[256];
    if (m == NULL || m->lineage == NULL)
        return wm_fail(SMP_EPROTO, msg, cap, "lineage entry without lineage");
    memset(out, 0, sizeof(*out));
    if ((rc = wm_dec_strings(&m->lineage->tenant_id, &m->lineage->namespace_,
                             &m->lineage->resource_id, &m->lineage->revision,
                             out->lineage.tenant_id, out->lineage.ns, out->lineage.resource_id,
                             out->lineage.revision, "lineage", msg, cap)) < 0)
        return rc;
    if (wm_lineage_check(&out->lineage, why, sizeof(why)) < 0)
        return wm_fail(SMP_EPROTO, msg, cap, "lineage: %s", why);
    out->committed_watermark = m->committed_watermark;
    if (m->claim != NULL) {
        if ((rc = wm_dec_claim(m->claim, &out->claim, strs, msg, cap)) < 0) return rc;
        out->has_claim = 1;
    }
    return WM_OK;
}

/* ------------------------------------------------------------------------ */
/* Whole-table invariants                                                    */
/* ------------------------------------------------------------------------ */

static int wm_rev_ptr_cmp(const void *a, const void *b)
{
    const wm_revision *x = *(const wm_revision *const *)a;
    const wm_revision *y = *(const wm_revision *const *)b;
    return wm_identity_cmp(&x->id, &y->id);
}

static int wm_rev_key_cmp(const void *key, const void *elem)
{
    const wm_revision *y = *(const wm_revision *const *)elem;
    return wm_identity_cmp(key, &y->id);
}

static int wm_op_ptr_cmp(const void *a, const void *b)
{
    uint64_t x = (*(const wm_operation *const *)a)->id, y = (*(const wm_operation *const *)b)->id;
    return x < y ? -1 : x > y;
}

static int wm_op_key_cmp(const void *key, const void *elem)
{
    uint64_t x = *(const uint64_t *)key, y = (*(const wm_operation *const *)elem)->id;
    return x < y ? -1 : x > y;
}

static int wm_lease_ptr_cmp(const void *a, const void *b)
{
    uint64_t x = (*(const wm_lease *const *)a)->id, y = (*(const wm_lease *const *)b)->id;
    return x < y ? -1 : x > y;
}

static int wm_lin_ptr_cmp(const void *a, const void *b)
{
    const wm_lineage_entry *x = *(const wm_lineage_entry *const *)a;
    const wm_lineage_entry *y = *(const wm_lineage_entry *const *)b;
    return wm_lineage_cmp(&x->lineage, &y->lineage);
}

/* Pointer indexes over the table's records, each sorted by its key: elem
 * is the address of record k_. One allocation of n + 1 so an empty table
 * still gets a pointer. A table is saved in key order, so one pass usually
 * finds it sorted and the qsort (n log n compares, of four strings each for
 * revisions) is skipped. */
#define WM_INDEX(type, elem, n, cmp, out)                                   \
    do {                                                                    \
        (out) = malloc(((n) + 1) * sizeof(const type *));                   \
        if ((out) != NULL) {                                                \
            size_t k_ = 0;                                                  \
            for (k_ = 0; k_ < (n); k_++)                                    \
                (out)[k_] = (elem);                                         \
            for (k_ = 1; k_ < (n); k_++)                                    \
                if (cmp(&(out)[k_ - 1], &(out)[k_]) > 0) break;             \
            if (k_ < (n)) qsort((out), (n), sizeof(const type *), cmp);     \
        }                                                                   \
    } while (0)

/* The position of revision r in img. */
static size_t wm_image_index(const wm_section_image *img, const wm_revision *r)
{
    if (img->stride == 0) return (size_t)(r - img->revisions);
    return (size_t)((const char *)r - (const char *)img->revisions) / img->stride;
}

int wm_section_check(const wm_section_image *img, char *msg, size_t cap)
{
    int rc = WM_OK;
    char why[256];
    const wm_revision **revs = NULL;
    const wm_operation **ops = NULL;
    const wm_lease **leases = NULL;
    const wm_lineage_entry **lins = NULL;
    uint32_t *counts = NULL;

    if (img == NULL) return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "table is missing");
    if ((img->n_revisions > 0 && img->revisions == NULL) ||
        (img->n_operations > 0 && img->operations == NULL) ||
        (img->n_leases > 0 && img->leases == NULL) ||
        (img->n_lineages > 0 && img->lineages == NULL))
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "table arrays are missing");

    for (size_t i = 0; i < img->n_revisions; i++) {
        const wm_revision *r = wm_image_revision(img, i);
        const wm_affinity *a = wm_image_affinity(img, i);
        if (!img->revisions_checked && wm_metadata_check(r, why, sizeof(why)) < 0)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "revision %zu: %s", i, why);
        if (a != NULL && a->n_units > 0) {
            /* r passed wm_metadata_check (in the decode or just above): its
             * group key is the identity's canonical one. */
            if ((rc = wm_affinity_check_keyed(a, r, r->group_key, why, sizeof(why))) < 0)
                return rc == SMP_ENOMEM ? rc
                                        : wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "revision %zu: %s",
                                                  i, why);
        } else if (r->availability == WM_AVAIL_READY || r->availability == WM_AVAIL_DEGRADED) {
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "revision %zu is %s without an affinity summary", i,
                           wm_availability_name((int)r->availability));
        }
    }

    WM_INDEX(wm_revision, wm_image_revision(img, k_), img->n_revisions, wm_rev_ptr_cmp, revs);
    WM_INDEX(wm_operation, &img->operations[k_], img->n_operations, wm_op_ptr_cmp, ops);
    WM_INDEX(wm_lease, &img->leases[k_], img->n_leases, wm_lease_ptr_cmp, leases);
    WM_INDEX(wm_lineage_entry, &img->lineages[k_], img->n_lineages, wm_lin_ptr_cmp, lins);
    counts = calloc(img->n_revisions + 1, sizeof(*counts));
    if (revs == NULL || ops == NULL || leases == NULL || lins == NULL || counts == NULL) {
        rc = SMP_ENOMEM;
        goto free_indexes;
    }
    for (size_t i = 1; i < img->n_revisions; i++)
        if (wm_identity_cmp(&revs[i - 1]->id, &revs[i]->id) == 0) {
            rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "two records of revision %s/%s/%s/%s/%" PRIu64,
                         revs[i]->id.tenant_id, revs[i]->id.ns, revs[i]->id.resource_id,
                         revs[i]->id.revision, revs[i]->id.weight_generation);
            goto free_indexes;
        }

    for (size_t i = 0; i < img->n_operations; i++) {
        const wm_operation *op = ops[i];
        if (i > 0 && ops[i - 1]->id == op->id) {
            rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "two operations with id %" PRIu64, op->id);
            goto free_indexes;
        }
        const wm_revision **hit = bsearch(&op->id_of, revs, img->n_revisions, sizeof(*revs),
                                          wm_rev_key_cmp);
        if (wm_operation_check(op, hit != NULL ? *hit : NULL, why, sizeof(why)) < 0) {
            rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "%s", why);
            goto free_indexes;
        }
        if (hit == NULL && op->state == WM_OPS_RUNNING) {
            rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                         "operation %" PRIu64 " is RUNNING on a revision that has no record", op->id);
            goto free_indexes;
        }
    }
    if (img->n_operations > 0 && img->next_operation_id <= ops[img->n_operations - 1]->id) {
        rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                     "next operation id %" PRIu64 " is not above operation %" PRIu64,
                     img->next_operation_id, ops[img->n_operations - 1]->id);
        goto free_indexes;
    }
    for (size_t i = 0; i < img->n_revisions; i++) {
        const wm_revision *r = wm_image_revision(img, i);
        if (r->operation_id != 0 &&
            bsearch(&r->operation_id, ops, img->n_operations, sizeof(*ops), wm_op_key_cmp) == NULL) {
            rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                         "revision %zu names operation %" PRIu64 ", which has no record", i,
                         r->operation_id);
            goto free_indexes;
        }
    }

    for (size_t i = 0; i < img->n_leases; i++) {
        const wm_lease *l = leases[i];
        if (i > 0 && leases[i - 1]->id == l->id) {
            rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "two leases with id %" PRIu64, l->id);
            goto free_indexes;
        }
        if (wm_lease_check(l, why, sizeof(why)) < 0) {
            rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "%s", why);
            goto free_indexes;
        }
        const wm_revision **hit = bsearch(&l->id_of, revs, img->n_revisions, sizeof(*revs),
                                          wm_rev_key_cmp);
        if (hit == NULL || ((*hit)->availability != WM_AVAIL_READY &&
                            (*hit)->availability != WM_AVAIL_DEGRADED)) {
            rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                         "lease %" PRIu64 " protects a revision that is not READY or DEGRADED", l->id);
            goto free_indexes;
        }
        if (l->metadata_generation > (*hit)->metadata_generation) {
            rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                         "lease %" PRIu64 " is fenced on a generation the revision never had", l->id);
            goto free_indexes;
        }
        counts[wm_image_index(img, *hit)]++;
    }
    if (img->n_leases > 0 && img->next_lease_id <= leases[img->n_leases - 1]->id) {
        rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                     "next lease id %" PRIu64 " is not above lease %" PRIu64, img->next_lease_id,
                     leases[img->n_leases - 1]->id);
        goto free_indexes;
    }
    for (size_t i = 0; i < img->n_revisions; i++) {
        if (counts[i] != wm_image_revision(img, i)->lease_count) {
            rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                         "revision %zu counts %" PRIu32 " leases, the table holds %" PRIu32, i,
                         wm_image_revision(img, i)->lease_count, counts[i]);
            goto free_indexes;
        }
    }

    for (size_t i = 0; i < img->n_lineages; i++) {
        const wm_lineage_entry *e = lins[i];
        if (i > 0 && wm_lineage_cmp(&lins[i - 1]->lineage, &e->lineage) == 0) {
            rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "two entries for lineage %s/%s/%s/%s",
                         e->lineage.tenant_id, e->lineage.ns, e->lineage.resource_id,
                         e->lineage.revision);
            goto free_indexes;
        }
        if (wm_lineage_check(&e->lineage, why, sizeof(why)) < 0) {
            rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "lineage: %s", why);
            goto free_indexes;
        }
        if (!e->has_claim) continue;
        if (wm_claim_check(&e->claim, why, sizeof(why)) < 0) {
            rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "%s", why);
            goto free_indexes;
        }
        if (!wm_identity_in_lineage(&e->claim.base, &e->lineage) ||
            e->claim.committed_watermark != e->committed_watermark) {
            rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                         "claim %s is not in its lineage or disagrees on the watermark",
                         e->claim.request_id);
            goto free_indexes;
        }
    }
    if (img->next_operation_id == 0 || img->next_lease_id == 0)
        rc = wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "next operation and lease ids start at 1");
free_indexes:
    free(revs);
    free(ops);
    free(leases);
    free(lins);
    free(counts);
    return rc;
}
