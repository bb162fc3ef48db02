/* wm_reply_encode.c -- the replies of the identity reads, packed by hand:
 * the MetadataResponse and the IsExistResponse.
 *
 * Every weight_get_metadata, and every mutation that answers with the
 * revision, replies with a MetadataResponse: the revision's WeightMetadata
 * (with its WeightIdentity and WeightPolicy) and its active WeightOperation
 * when it has one. protobuf-c packs a message by walking its descriptors and
 * sizes each nested message again for each length prefix it writes (the
 * identity three times, the metadata twice): that was some 5,700 of the
 * 11,800 instructions the master's loop spent on a read (callgrind, in
 * bench/JOURNAL.md's "Reads: did the master's CPU per read rise since
 * 3bac787?"). Here the lengths of the strings are taken once, the nested
 * sizes computed from them and the bytes written in one pass: each message
 * has a *_measure function that fills its plan (lengths and sizes) and a
 * *_put function that writes it from the plan.
 *
 * The bytes are those protobuf_c_message_pack gives for the wire views
 * wm_pb_meta_set and wm_pb_op_set fill (test_wm_reply_encode compares
 * them), by protobuf-c 1.4's rules for these proto3 fields: fields in
 * number order; a number, a double or a string at its zero value (0, 0.0
 * or -0.0, NULL or "") is left out, a NaN is written; a bytes field is
 * written when it has data; a sub-message is written whenever it is there,
 * even empty; uint32 fields are varints of the 32-bit value. A field added
 * to these messages in proto/weight_rpc.proto must be added here too (the
 * test fills every field the wire views set). */
#include <stdint.h>
#include <string.h>

#include "pb_wire.h"
#include "wm_mgmt.h"

/* Size of a varint field (0: left out). */
static size_t sz_u64(unsigned num, uint64_t v)
{
    return v != 0 ? pbw_tag_len(num) + pbw_varint_len(v) : 0;
}

static size_t sz_dbl(unsigned num, double v)
{
    return v != 0 ? pbw_tag_len(num) + 8 : 0; /* NaN != 0: written */
}

/* A length-delimited field of len bytes (present decides, not len). */
static size_t sz_len(unsigned num, size_t len)
{
    return pbw_tag_len(num) + pbw_varint_len(len) + len;
}

static uint8_t *put_u64(uint8_t *p, unsigned num, uint64_t v)
{
    if (v == 0) return p;
    p = pbw_put_tag(p, num, PBW_VARINT);
    return pbw_put_varint(p, v);
}

static uint8_t *put_dbl(uint8_t *p, unsigned num, double v)
{
    uint64_t bits;
    if (v == 0) return p;
    memcpy(&bits, &v, sizeof(bits));
    p = pbw_put_tag(p, num, PBW_64BIT);
    for (int i = 0; i < 8; i++) *p++ = (uint8_t)(bits >> (8 * i));
    return p;
}

static uint8_t *put_len(uint8_t *p, unsigned num, size_t len)
{
    p = pbw_put_tag(p, num, PBW_LEN);
    return pbw_put_varint(p, len);
}

/* A string field: left out when NULL or "". */
static uint8_t *put_str(uint8_t *p, unsigned num, const char *s, size_t len)
{
    if (len == 0) return p;
    p = put_len(p, num, len);
    memcpy(p, s, len);
    return p + len;
}

static size_t str_len(const char *s)
{
    return s != NULL ? strlen(s) : 0;
}

static size_t sz_str(unsigned num, size_t len)
{
    return len != 0 ? sz_len(num, len) : 0;
}

/* -- WeightIdentity --------------------------------------------------------- */

typedef struct id_plan {
    size_t len[4]; /* tenant, namespace, resource, revision */
    size_t size;   /* the message's bytes */
} id_plan;

/* Fill *ip for id: its strings' lengths and the message's size. */
static void id_measure(id_plan *ip, const wm_identity *id)
{
    const char *s[4] = {id->tenant_id, id->ns, id->resource_id, id->revision};
    ip->size = 0;
    for (unsigned i = 0; i < 4; i++) {
        ip->len[i] = str_len(s[i]);
        ip->size += sz_str(i + 1, ip->len[i]);
    }
    ip->size += sz_u64(5, id->weight_generation);
}

/* Write id as field num (tag, length, fields) at p; returns the end. */
static uint8_t *id_put(uint8_t *p, unsigned num, const id_plan *ip, const wm_identity *id)
{
    const char *s[4] = {id->tenant_id, id->ns, id->resource_id, id->revision};
    p = put_len(p, num, ip->size);
    for (unsigned i = 0; i < 4; i++) p = put_str(p, i + 1, s[i], ip->len[i]);
    return put_u64(p, 5, id->weight_generation);
}

/* -- WeightMetadata (with its WeightPolicy) -------------------------------- */

typedef struct meta_plan {
    id_plan id;
    size_t policy, group, manifest, sha; /* sha: 32 when sealed, else 0 */
    size_t size;
} meta_plan;

/* The three digests are written only for a sealed revision (wm_pb_meta_set). */
static int meta_sealed(const wm_revision *r)
{
    return r->availability != WM_AVAIL_IMPORTING && r->payload_count > 0;
}

/* Fill *mp for r: its identity's plan, the policy's size, the keys'
 * lengths, whether the digests go out, and the message's size. */
static void meta_measure(meta_plan *mp, const wm_revision *r)
{
    id_measure(&mp->id, &r->id);
    mp->policy = sz_u64(1, (uint32_t)r->policy.preferred) + sz_dbl(2, r->policy.mixed_hot_ratio) +
                 sz_u64(3, (uint32_t)r->policy.mode);
    mp->group = str_len(r->group_key);
    mp->manifest = str_len(r->manifest_key);
    mp->sha = meta_sealed(r) ? WM_SHA256_LEN : 0;
    mp->size = sz_len(1, mp->id.size) + sz_len(2, mp->policy) +
               sz_u64(3, (uint32_t)r->availability) + sz_u64(4, (uint32_t)r->residency) +
               sz_dbl(5, r->observed_hot_ratio) + sz_u64(6, r->metadata_generation) +
               sz_u64(7, r->operation_id) + sz_str(8, mp->group) + sz_str(9, mp->manifest) +
               sz_u64(11, r->payload_count) + sz_u64(12, r->logical_bytes) +
               sz_u64(14, r->affinity_count) + sz_u64(16, r->created_ms) +
               sz_u64(17, r->updated_ms) + sz_u64(18, r->last_access_ms) +
               sz_u64(19, r->lease_count) + sz_u64(20, (uint32_t)r->degraded_from) +
               sz_dbl(21, r->degraded_from_hot_ratio);
    if (mp->sha) mp->size += sz_len(10, mp->sha) + sz_len(13, mp->sha) + sz_len(15, mp->sha);
}

/* A digest field: len bytes, left out when len is 0 (an unsealed revision). */
static uint8_t *put_sha(uint8_t *p, unsigned num, const uint8_t *sha, size_t len)
{
    if (len == 0) return p;
    p = put_len(p, num, len);
    memcpy(p, sha, len);
    return p + len;
}

/* Write r's WeightMetadata as field num at p; returns the end. */
static uint8_t *meta_put(uint8_t *p, unsigned num, const meta_plan *mp, const wm_revision *r)
{
    p = put_len(p, num, mp->size);
    p = id_put(p, 1, &mp->id, &r->id);
    p = put_len(p, 2, mp->policy);
    p = put_u64(p, 1, (uint32_t)r->policy.preferred);
    p = put_dbl(p, 2, r->policy.mixed_hot_ratio);
    p = put_u64(p, 3, (uint32_t)r->policy.mode);
    p = put_u64(p, 3, (uint32_t)r->availability);
    p = put_u64(p, 4, (uint32_t)r->residency);
    p = put_dbl(p, 5, r->observed_hot_ratio);
    p = put_u64(p, 6, r->metadata_generation);
    p = put_u64(p, 7, r->operation_id);
    p = put_str(p, 8, r->group_key, mp->group);
    p = put_str(p, 9, r->manifest_key, mp->manifest);
    p = put_sha(p, 10, r->manifest_sha256, mp->sha);
    p = put_u64(p, 11, r->payload_count);
    p = put_u64(p, 12, r->logical_bytes);
    p = put_sha(p, 13, r->payload_keys_sha256, mp->sha);
    p = put_u64(p, 14, r->affinity_count);
    p = put_sha(p, 15, r->affinity_sha256, mp->sha);
    p = put_u64(p, 16, r->created_ms);
    p = put_u64(p, 17, r->updated_ms);
    p = put_u64(p, 18, r->last_access_ms);
    p = put_u64(p, 19, r->lease_count);
    p = put_u64(p, 20, (uint32_t)r->degraded_from);
    return put_dbl(p, 21, r->degraded_from_hot_ratio);
}

/* -- WeightOperation -------------------------------------------------------- */

typedef struct op_plan {
    id_plan id;
    size_t cursor, error;
    size_t size;
} op_plan;

/* Fill *op for o: its identity's plan, the texts' lengths, the size. */
static void op_measure(op_plan *op, const wm_operation *o)
{
    id_measure(&op->id, &o->id_of);
    op->cursor = strlen(o->cursor);
    op->error = strlen(o->error);
    op->size = sz_u64(1, o->id) + sz_len(2, op->id.size) + sz_u64(3, (uint32_t)o->kind) +
               sz_u64(4, (uint32_t)o->target) + sz_dbl(5, o->target_hot_ratio) +
               sz_u64(6, (uint32_t)o->state) + sz_u64(7, o->members_done) +
               sz_u64(8, o->members_total) + sz_u64(9, o->bytes_done) +
               sz_u64(10, o->bytes_total) + sz_str(11, op->cursor) + sz_str(12, op->error) +
               sz_u64(13, o->attempts) + sz_u64(14, o->created_ms) + sz_u64(15, o->updated_ms);
}

/* Write o's WeightOperation as field num at p; returns the end. */
static uint8_t *op_put(uint8_t *p, unsigned num, const op_plan *op, const wm_operation *o)
{
    p = put_len(p, num, op->size);
    p = put_u64(p, 1, o->id);
    p = id_put(p, 2, &op->id, &o->id_of);
    p = put_u64(p, 3, (uint32_t)o->kind);
    p = put_u64(p, 4, (uint32_t)o->target);
    p = put_dbl(p, 5, o->target_hot_ratio);
    p = put_u64(p, 6, (uint32_t)o->state);
    p = put_u64(p, 7, o->members_done);
    p = put_u64(p, 8, o->members_total);
    p = put_u64(p, 9, o->bytes_done);
    p = put_u64(p, 10, o->bytes_total);
    p = put_str(p, 11, o->cursor, op->cursor);
    p = put_str(p, 12, o->error, op->error);
    p = put_u64(p, 13, o->attempts);
    p = put_u64(p, 14, o->created_ms);
    return put_u64(p, 15, o->updated_ms);
}

/* -- MetadataResponse ------------------------------------------------------- */

size_t wm_pack_metadata_response(const wm_revision *rev, const wm_operation *o, uint8_t *buf,
                                 size_t cap)
{
    meta_plan mp;
    op_plan op;
    size_t n = 0;
    if (rev == NULL) return 0; /* the empty response: no field */
    meta_measure(&mp, rev);
    n += sz_len(1, mp.size);
    if (o != NULL) {
        op_measure(&op, o);
        n += sz_len(2, op.size);
    }
    if (n > cap || buf == NULL) return n;
    uint8_t *p = meta_put(buf, 1, &mp, rev);
    if (o != NULL) p = op_put(p, 2, &op, o);
    (void)p; /* p == buf + n */
    return n;
}

/* -- IsExistResponse -------------------------------------------------------- */

size_t wm_pack_is_exist_response(int exists, uint8_t out[WM_IS_EXIST_RESPONSE_MAX])
{
    if (!exists) return 0; /* false, proto3's zero value, is left out */
    uint8_t *p = pbw_put_tag(out, 1, PBW_VARINT);
    *p++ = 1;
    return (size_t)(p - out);
}
