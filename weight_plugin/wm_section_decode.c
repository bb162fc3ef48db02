/* wm_section_decode.c -- the `weight_metadata` snapshot section
 * (wmrec.WeightMetadataSection) decoded by hand, each revision straight into
 * the storage the caller placed it in (wm_decode_section_placed).
 *
 * protobuf-c's unpack of the whole section built every message of it in an
 * arena of 4x the section's size (at 100,000 revisions tens of MB, faulted
 * in page by page), and the revisions were then copied out of it. Here the
 * bytes are walked twice: once over the top-level framing only (the counts,
 * which size the caller's storage, and the format), then record by record.
 * A RevisionEntry is decoded into protobuf-c's structs on the stack, its
 * strings copied into scratch storage reused by the next entry, and checked
 * by the same wm_dec_revision and wm_dec_affinity (wm_codec_dec.h) that
 * write it into its slab entry and its keys. Operations, leases and lineage
 * entries are few (at most one active operation a revision, leases per
 * reader): each goes through protobuf-c's unpack of that record alone.
 *
 * A section loads or fails exactly as it did through
 * wmrec__weight_metadata_section__unpack (tests/unit/wm_section_same.h
 * holds both decodes against each other; fuzz_snapshot runs it on every
 * input):
 *  - the bytes' rules are protobuf-c 1.4's (protobuf-c.c): a tag is at most
 *    5 bytes, its first byte must carry field bits, its number is taken in
 *    32 bits; a varint is at most 10 bytes, a length prefix at most 5 bytes
 *    and INT_MAX and must fit in what remains; wire types 3, 4, 6 and 7
 *    fail; a message of more than 16 * (2^23 - 1) fields fails; an unknown
 *    field is skipped; a known one of the wrong wire type fails; a uint32 is
 *    the low 32 bits of its varint, a double the 8 bytes little-endian;
 *  - a field given twice in one message keeps the last value (empty bytes
 *    are {0, NULL}); a repeated field appends; a message field given twice is
 *    merged as protobuf-c's merge_messages does, the earlier into the later:
 *    the later's scalars (0 when it lacks them), its strings when it has them
 *    (empty ones too), its bytes when it has them non-empty, the earlier's
 *    otherwise; sub-messages merged the same way; repeated fields
 *    concatenated;
 *  - any byte protobuf-c refuses, anywhere in the section, is "does not
 *    decode", whatever else is wrong; then a format other than 1; then the
 *    first record that fails its check, revisions first, then operations,
 *    leases and lineages, each kind in the order of the bytes (protobuf-c
 *    gathered each repeated field in byte order and the checks ran kind by
 *    kind); then the whole-table check. */
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "pb_wire.h"
#include "weight_records.pb-c.h"
#include "wm_bulk.h"
#include "wm_codec.h"
#include "wm_codec_dec.h"

/* Scratch storage reused from one revision entry to the next: its strings
 * (NUL-terminated), its affinity units and their members. Reserved from the
 * entry's length before it is decoded, so nothing moves while it is: a
 * string costs at least two bytes of framing (twice the entry's length
 * holds them all with their NULs), a unit or a member at least two. */
typedef struct wm_sd_scratch {
    char *str;
    size_t strcap;
    size_t at;
    Wmrec__AffinityUnit *units;
    Wmrec__AffinityUnit **unitp;
    size_t unitcap;
    size_t n_units;
    char **members;
    size_t memcap;
    size_t n_members;
} wm_sd_scratch;

/* Room for an entry of len bytes (len <= INT_MAX). SMP_ENOMEM. */
static int wm_sd_reserve(wm_sd_scratch *s, size_t len)
{
    s->at = 0;
    s->n_units = 0;
    s->n_members = 0;
    if (len * 2 + 1 > s->strcap) {
        char *str = realloc(s->str, len * 2 + 1);
        if (str == NULL) return SMP_ENOMEM;
        s->str = str;
        s->strcap = len * 2 + 1;
    }
    size_t n = len / 2 + 1;
    if (n > s->unitcap) {
        Wmrec__AffinityUnit *units = realloc(s->units, n * sizeof(*units));
        if (units == NULL) return SMP_ENOMEM;
        s->units = units;
        Wmrec__AffinityUnit **unitp = realloc(s->unitp, n * sizeof(*unitp));
        if (unitp == NULL) return SMP_ENOMEM;
        s->unitp = unitp;
        s->unitcap = n;
    }
    if (n > s->memcap) {
        char **members = realloc(s->members, n * sizeof(*members));
        if (members == NULL) return SMP_ENOMEM;
        s->members = members;
        s->memcap = n;
    }
    return SMP_OK;
}

static void wm_sd_scratch_fini(wm_sd_scratch *s)
{
    free(s->str);
    free(s->units);
    free(s->unitp);
    free(s->members);
    memset(s, 0, sizeof(*s));
}

/* Copy a string field into the scratch and point *out at it. -1 when not
 * length-delimited. */
static int wm_sd_str(wm_sd_scratch *s, const pbw_fld *f, char **out)
{
    if (f->wt != PBW_LEN) return -1;
    size_t n = pbw_body_len(f);
    char *d = s->str + s->at;
    memcpy(d, pbw_body(f), n);
    d[n] = '\0';
    s->at += n + 1;
    *out = d;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* A RevisionEntry                                                           */
/* ------------------------------------------------------------------------ */

/* A Revision and the sub-messages it points to. */
typedef struct wm_sd_rev {
    Wmrec__Revision m;
    Wmrec__Identity id;
    Wmrec__Policy policy;
} wm_sd_rev;

static int wm_sd_identity(const uint8_t *p, const uint8_t *end, Wmrec__Identity *m)
{
    static const Wmrec__Identity init = WMREC__IDENTITY__INIT;
    *m = init;
    pbw_rd r = {p, end, 0};
    pbw_fld f;
    while (r.p < r.end) {
        if (pbw_next(&r, &f) < 0) return -1;
        int bad = 0;
        switch (f.tag) {
        case 1: bad = pbw_bytes(&f, &m->tenant_id); break;
        case 2: bad = pbw_bytes(&f, &m->namespace_); break;
        case 3: bad = pbw_bytes(&f, &m->resource_id); break;
        case 4: bad = pbw_bytes(&f, &m->revision); break;
        case 5: bad = pbw_u64(&f, &m->weight_generation); break;
        default: break;
        }
        if (bad) return -1;
    }
    return 0;
}

static int wm_sd_policy(const uint8_t *p, const uint8_t *end, Wmrec__Policy *m)
{
    static const Wmrec__Policy init = WMREC__POLICY__INIT;
    *m = init;
    pbw_rd r = {p, end, 0};
    pbw_fld f;
    while (r.p < r.end) {
        if (pbw_next(&r, &f) < 0) return -1;
        int bad = 0;
        switch (f.tag) {
        case 1: bad = pbw_u32(&f, &m->preferred_residency); break;
        case 2: bad = pbw_double(&f, &m->mixed_hot_ratio); break;
        case 3: bad = pbw_u32(&f, &m->migration_mode); break;
        default: break;
        }
        if (bad) return -1;
    }
    return 0;
}

/* merge_messages' rule for a bytes field without a default: the later's
 * value unless it is empty and the earlier's is not. */
static void wm_sd_merge_bytes(const ProtobufCBinaryData *earlier, ProtobufCBinaryData *later)
{
    if (earlier->data != NULL && later->data == NULL) *later = *earlier;
}

/* ... for a string field: the later's unless it lacks the field. */
static void wm_sd_merge_str(char *earlier, char **later)
{
    if (earlier != protobuf_c_empty_string && *later == protobuf_c_empty_string) *later = earlier;
}

static void wm_sd_merge_identity(const Wmrec__Identity *e, Wmrec__Identity *l)
{
    wm_sd_merge_bytes(&e->tenant_id, &l->tenant_id);
    wm_sd_merge_bytes(&e->namespace_, &l->namespace_);
    wm_sd_merge_bytes(&e->resource_id, &l->resource_id);
    wm_sd_merge_bytes(&e->revision, &l->revision);
}

/* The earlier occurrence e of a Revision merged into the later l. */
static void wm_sd_merge_revision(const wm_sd_rev *e, wm_sd_rev *l)
{
    if (e->m.identity != NULL) {
        if (l->m.identity != NULL) {
            wm_sd_merge_identity(&e->id, &l->id);
        } else {
            l->id = e->id;
            l->m.identity = &l->id;
        }
    }
    if (e->m.policy != NULL && l->m.policy == NULL) { /* a Policy has only scalars */
        l->policy = e->policy;
        l->m.policy = &l->policy;
    }
    wm_sd_merge_str(e->m.group_key, &l->m.group_key);
    wm_sd_merge_str(e->m.manifest_key, &l->m.manifest_key);
    wm_sd_merge_str(e->m.request_id, &l->m.request_id);
    wm_sd_merge_bytes(&e->m.manifest_sha256, &l->m.manifest_sha256);
    wm_sd_merge_bytes(&e->m.payload_keys_sha256, &l->m.payload_keys_sha256);
    wm_sd_merge_bytes(&e->m.affinity_sha256, &l->m.affinity_sha256);
}

/* Decode one occurrence of a Revision into out (its strings into s). */
static int wm_sd_revision(wm_sd_scratch *s, const uint8_t *p, const uint8_t *end, wm_sd_rev *out)
{
    static const Wmrec__Revision init = WMREC__REVISION__INIT;
    wm_sd_rev *o = out;
    o->m = init; /* identity and policy NULL until given */
    pbw_rd r = {p, end, 0};
    pbw_fld f;
    Wmrec__Revision *m = &o->m;
    while (r.p < r.end) {
        if (pbw_next(&r, &f) < 0) return -1;
        int bad = 0;
        switch (f.tag) {
        case 1: {
            Wmrec__Identity id;
            if (f.wt != PBW_LEN ||
                wm_sd_identity(pbw_body(&f), f.data + f.len, &id) < 0)
                return -1;
            if (m->identity != NULL) wm_sd_merge_identity(&o->id, &id);
            o->id = id;
            m->identity = &o->id;
            break;
        }
        case 2: /* a Policy given twice: merged, the later's scalars win */
            if (f.wt != PBW_LEN ||
                wm_sd_policy(pbw_body(&f), f.data + f.len, &o->policy) < 0)
                return -1;
            m->policy = &o->policy;
            break;
        case 3: bad = pbw_u32(&f, &m->availability); break;
        case 4: bad = pbw_u32(&f, &m->residency); break;
        case 5: bad = pbw_double(&f, &m->observed_hot_ratio); break;
        case 6: bad = pbw_u64(&f, &m->metadata_generation); break;
        case 7: bad = pbw_u64(&f, &m->operation_id); break;
        case 8: bad = wm_sd_str(s, &f, &m->group_key); break;
        case 9: bad = wm_sd_str(s, &f, &m->manifest_key); break;
        case 10: bad = pbw_bytes(&f, &m->manifest_sha256); break;
        case 11: bad = pbw_u64(&f, &m->payload_count); break;
        case 12: bad = pbw_u64(&f, &m->logical_bytes); break;
        case 13: bad = pbw_bytes(&f, &m->payload_keys_sha256); break;
        case 14: bad = pbw_u64(&f, &m->affinity_count); break;
        case 15: bad = pbw_bytes(&f, &m->affinity_sha256); break;
        case 16: bad = pbw_u64(&f, &m->created_ms); break;
        case 17: bad = pbw_u64(&f, &m->updated_ms); break;
        case 18: bad = pbw_u64(&f, &m->last_access_ms); break;
        case 19: bad = pbw_u32(&f, &m->lease_count); break;
        case 20: bad = wm_sd_str(s, &f, &m->request_id); break;
        case 21: bad = pbw_u64(&f, &m->request_digest); break;
        case 22: bad = pbw_u64(&f, &m->request_base_generation); break;
        case 23: bad = pbw_u64(&f, &m->request_operation_id); break;
        case 24: bad = pbw_u32(&f, &m->degraded_from); break;
        case 25: bad = pbw_double(&f, &m->degraded_from_hot_ratio); break;
        default: break;
        }
        if (bad) return -1;
    }
    return 0;
}

/* Decode an AffinityUnit into the next unit of s, its members appended to
 * s's. */
static int wm_sd_unit(wm_sd_scratch *s, const uint8_t *p, const uint8_t *end)
{
    static const Wmrec__AffinityUnit init = WMREC__AFFINITY_UNIT__INIT;
    Wmrec__AffinityUnit *u = &s->units[s->n_units];
    *u = init;
    size_t first = s->n_members;
    pbw_rd r = {p, end, 0};
    pbw_fld f;
    while (r.p < r.end) {
        if (pbw_next(&r, &f) < 0) return -1;
        int bad = 0;
        switch (f.tag) {
        case 1: bad = wm_sd_str(s, &f, &s->members[s->n_members]); if (!bad) s->n_members++; break;
        case 2: bad = pbw_u64(&f, &u->logical_bytes); break;
        default: break;
        }
        if (bad) return -1;
    }
    u->n_members = s->n_members - first;
    u->members = u->n_members ? &s->members[first] : NULL;
    s->unitp[s->n_units] = u;
    s->n_units++;
    return 0;
}

/* Decode one occurrence of an AffinitySummary: its units are appended to
 * s's (occurrences merged are their units concatenated). */
static int wm_sd_summary(wm_sd_scratch *s, const uint8_t *p, const uint8_t *end)
{
    pbw_rd r = {p, end, 0};
    pbw_fld f;
    while (r.p < r.end) {
        if (pbw_next(&r, &f) < 0) return -1;
        if (f.tag != 1) continue;
        if (f.wt != PBW_LEN || wm_sd_unit(s, pbw_body(&f), f.data + f.len) < 0) return -1;
    }
    return 0;
}

/* A decoded RevisionEntry: rev and aff are NULL when the entry lacks them. */
typedef struct wm_sd_entry {
    wm_sd_rev rev;
    const Wmrec__Revision *revp;
    Wmrec__AffinitySummary aff;
    const Wmrec__AffinitySummary *affp;
} wm_sd_entry;

/* Decode a RevisionEntry of [p, end) into e, its strings and units into s
 * (reserved for it). -1 on bytes protobuf-c refuses. */
static int wm_sd_entry_decode(wm_sd_scratch *s, const uint8_t *p, const uint8_t *end,
                              wm_sd_entry *e)
{
    static const Wmrec__AffinitySummary init = WMREC__AFFINITY_SUMMARY__INIT;
    e->revp = NULL;
    e->affp = NULL;
    e->aff = init;
    pbw_rd r = {p, end, 0};
    pbw_fld f;
    while (r.p < r.end) {
        if (pbw_next(&r, &f) < 0) return -1;
        if (f.tag == 1) {
            wm_sd_rev later;
            if (f.wt != PBW_LEN || wm_sd_revision(s, pbw_body(&f), f.data + f.len, &later) < 0)
                return -1;
            if (e->revp != NULL) wm_sd_merge_revision(&e->rev, &later);
            e->rev = later;
            if (e->rev.m.identity != NULL) e->rev.m.identity = &e->rev.id;
            if (e->rev.m.policy != NULL) e->rev.m.policy = &e->rev.policy;
            e->revp = &e->rev.m;
        } else if (f.tag == 2) {
            if (f.wt != PBW_LEN || wm_sd_summary(s, pbw_body(&f), f.data + f.len) < 0)
                return -1;
            e->affp = &e->aff;
        }
    }
    e->aff.n_units = s->n_units;
    e->aff.units = s->n_units ? s->unitp : NULL;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The section                                                               */
/* ------------------------------------------------------------------------ */

/* What the top-level framing says: counts and the scalars (last wins), and
 * bounds of the strings the records' decodes write. */
typedef struct wm_sd_frame {
    uint32_t format;
    uint64_t next_operation_id;
    uint64_t next_lease_id;
    size_t n[4];     /* revisions, operations, leases, lineages */
    size_t keys_len; /* >= what wm_dec_revision writes for every revision */
    size_t strs_len; /* >= what the other records' decodes write */
} wm_sd_frame;

/* Walk the section's top-level fields. -1 on bytes protobuf-c refuses
 * there (the records' own bytes are read by the second walk). */
static int wm_sd_frame_scan(const uint8_t *buf, size_t len, wm_sd_frame *fr)
{
    memset(fr, 0, sizeof(*fr));
    fr->keys_len = 1;
    fr->strs_len = 1;
    pbw_rd r = pbw_reader(buf, len);
    pbw_fld f;
    while (r.p < r.end) {
        if (pbw_next(&r, &f) < 0) return -1;
        switch (f.tag) {
        case 1:
            if (pbw_u32(&f, &fr->format) < 0) return -1;
            break;
        case 2:
        case 3:
        case 4:
        case 5:
            if (f.wt != PBW_LEN) return -1;
            fr->n[f.tag - 2]++;
            /* A string the decode writes costs its bytes and a NUL, which its
             * framing pays for; a revision's three text fields may be absent
             * (an empty string each). The sums stay below 3x len. */
            if (f.tag == 2)
                fr->keys_len += pbw_body_len(&f) + 3;
            else
                fr->strs_len += pbw_body_len(&f);
            break;
        case 6:
            if (pbw_u64(&f, &fr->next_operation_id) < 0) return -1;
            break;
        case 7:
            if (pbw_u64(&f, &fr->next_lease_id) < 0) return -1;
            break;
        default:
            break;
        }
    }
    return 0;
}

/* The second walk: every record decoded; into img when not NULL (its arrays
 * sized from the frame), otherwise only read. */
typedef struct wm_sd_walk {
    wm_sd_scratch s;
    const wm_section_place *place; /* NULL: the image's own arrays */
    wm_section_image *img;
    char *keys;
    char *strs;
    int err[4];       /* the first refusal of each kind of record, 0: none */
    char why[4][512]; /* and its sentence */
} wm_sd_walk;

/* Whether records of kind k (0 revisions .. 3 lineages) are still decoded
 * into the image: not once a refusal of its kind or an earlier one is
 * recorded (only that refusal can be the answer). */
static int wm_sd_live(const wm_sd_walk *w, int k)
{
    if (w->img == NULL) return 0;
    for (int i = 0; i <= k; i++)
        if (w->err[i]) return 0;
    return 1;
}

/* A revision entry: decoded, and when live checked into its slot. */
static int wm_sd_walk_revision(wm_sd_walk *w, const pbw_fld *f)
{
    int rc;
    wm_sd_entry e;
    if ((rc = wm_sd_reserve(&w->s, pbw_body_len(f))) < 0) return rc;
    if (wm_sd_entry_decode(&w->s, pbw_body(f), f->data + f->len, &e) < 0) return SMP_EPROTO;
    if (!wm_sd_live(w, 0)) return SMP_OK;
    wm_section_image *img = w->img;
    size_t i = img->n_revisions;
    wm_affinity *aff = wm_image_affinity(img, i);
    memset(aff, 0, sizeof(*aff));
    img->n_revisions = i + 1;
    rc = wm_dec_revision(e.revp, wm_image_revision(img, i), &w->keys, w->why[0],
                         sizeof(w->why[0]));
    if (rc == SMP_OK && e.affp != NULL)
        rc = wm_dec_affinity_in(e.affp, aff, w->place ? w->place->aff_alloc : NULL,
                                w->place ? w->place->ctx : NULL, w->why[0], sizeof(w->why[0]));
    if (rc == SMP_ENOMEM) return rc;
    if (rc < 0) w->err[0] = rc;
    return SMP_OK;
}

/* An operation, a lease or a lineage entry (kind 1, 2, 3): unpacked by
 * protobuf-c, and when live checked into the image. */
static int wm_sd_walk_other(wm_sd_walk *w, int kind, const pbw_fld *f)
{
    static const ProtobufCMessageDescriptor *const desc[4] = {
        NULL, &wmrec__operation__descriptor, &wmrec__lease__descriptor,
        &wmrec__lineage_entry__descriptor};
    int rc = SMP_OK;
    ProtobufCMessage *m =
        protobuf_c_message_unpack(desc[kind], NULL, pbw_body_len(f), pbw_body(f));
    if (m == NULL) return SMP_EPROTO;
    if (wm_sd_live(w, kind)) {
        wm_section_image *img = w->img;
        char *why = w->why[kind];
        size_t cap = sizeof(w->why[kind]);
        if (kind == 1) {
            rc = wm_dec_operation((const Wmrec__Operation *)m, &img->operations[img->n_operations],
                                  &w->strs, why, cap);
            if (rc == SMP_OK) img->n_operations++;
        } else if (kind == 2) {
            rc = wm_dec_lease((const Wmrec__Lease *)m, &img->leases[img->n_leases], &w->strs, why,
                              cap);
            if (rc == SMP_OK) img->n_leases++;
        } else {
            rc = wm_dec_lineage_entry((const Wmrec__LineageEntry *)m,
                                      &img->lineages[img->n_lineages], &w->strs, why, cap);
            if (rc == SMP_OK) img->n_lineages++;
        }
        if (rc < 0 && rc != SMP_ENOMEM) {
            w->err[kind] = rc;
            rc = SMP_OK;
        }
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

/* Walk every record. SMP_OK (refusals of records are in w->err),
 * SMP_EPROTO on bytes protobuf-c refuses, SMP_ENOMEM. */
static int wm_sd_walk_all(wm_sd_walk *w, const uint8_t *buf, size_t len)
{
    int rc;
    pbw_rd r = pbw_reader(buf, len);
    pbw_fld f;
    while (r.p < r.end) {
        if (pbw_next(&r, &f) < 0) return SMP_EPROTO; /* read once already */
        if (f.tag == 2)
            rc = wm_sd_walk_revision(w, &f);
        else if (f.tag >= 3 && f.tag <= 5)
            rc = wm_sd_walk_other(w, (int)f.tag - 2, &f);
        else
            continue;
        if (rc < 0) return rc;
    }
    return SMP_OK;
}

/* The image's storage for the frame's records, as the protobuf-c decode
 * allocated it (place: the caller's for the revisions). SMP_ENOMEM. */
static int wm_sd_image_alloc(const wm_sd_frame *fr, const wm_section_place *place,
                             wm_section_image *img)
{
    size_t n_revs = fr->n[0];
    if (place != NULL) {
        char *first = place->alloc(place->ctx, n_revs, fr->keys_len, &img->keys);
        if (first != NULL) {
            img->revisions = (wm_revision *)(first + place->rev_off);
            img->affinities = (wm_affinity *)(first + place->aff_off);
            img->stride = place->stride;
        }
    } else {
        /* Not zeroed: each is written whole by its decode before it is read. */
        img->revisions_len = (n_revs + 1) * sizeof(*img->revisions);
        img->revisions = wm_bulk_alloc(img->revisions_len);
        if (img->revisions == NULL) img->revisions_len = 0;
        img->affinities = calloc(n_revs + 1, sizeof(*img->affinities));
        img->keys = malloc(fr->keys_len);
    }
    img->operations = calloc(fr->n[1] + 1, sizeof(*img->operations));
    img->leases = calloc(fr->n[2] + 1, sizeof(*img->leases));
    img->lineages = calloc(fr->n[3] + 1, sizeof(*img->lineages));
    img->strs = malloc(fr->strs_len);
    if (img->revisions == NULL || img->affinities == NULL || img->operations == NULL ||
        img->leases == NULL || img->lineages == NULL || img->keys == NULL || img->strs == NULL)
        return SMP_ENOMEM;
    return SMP_OK;
}

int wm_decode_section(const uint8_t *buf, size_t len, wm_section_image *out, char *msg,
                      size_t cap)
{
    return wm_decode_section_placed(buf, len, NULL, out, msg, cap);
}

int wm_decode_section_placed(const uint8_t *buf, size_t len, const wm_section_place *place,
                             wm_section_image *out, char *msg, size_t cap)
{
    int rc;
    char why[256];
    wm_section_image img;
    wm_sd_frame fr;
    wm_sd_walk *w;

    if (out == NULL || (buf == NULL && len > 0)) return WM_EINVALID_ARGUMENT;
    memset(&img, 0, sizeof(img));
    if (len == 0) {
        img.next_operation_id = 1;
        img.next_lease_id = 1;
        *out = img;
        return WM_OK;
    }
    if ((w = calloc(1, sizeof(*w))) == NULL) return SMP_ENOMEM;
    if (wm_sd_frame_scan(buf, len, &fr) < 0) {
        rc = SMP_EPROTO;
        goto not_decoded;
    }
    if (fr.format != WM_SECTION_FORMAT) {
        /* Refused for its format only once every byte decodes. */
        if ((rc = wm_sd_walk_all(w, buf, len)) < 0) goto not_decoded;
        rc = wm_fail(SMP_EPROTO, msg, cap, "section %s has format %" PRIu32 ", this build reads %d",
                     WM_SECTION_NAME, fr.format, WM_SECTION_FORMAT);
        goto free_walk;
    }
    if ((rc = wm_sd_image_alloc(&fr, place, &img)) < 0) goto free_image;
    w->img = &img;
    w->place = place;
    w->keys = img.keys;
    w->strs = img.strs;
    if ((rc = wm_sd_walk_all(w, buf, len)) < 0) goto not_decoded;
    for (int k = 0; k < 4; k++) {
        if (w->err[k]) {
            rc = wm_fail(w->err[k], msg, cap, "%s", w->why[k]);
            goto free_image;
        }
    }
    img.next_operation_id = fr.next_operation_id;
    img.next_lease_id = fr.next_lease_id;
    img.revisions_checked = 1; /* each by wm_dec_revision, or the load failed above */
    if ((rc = wm_section_check(&img, why, sizeof(why))) < 0) {
        rc = rc == SMP_ENOMEM ? rc : wm_fail(SMP_EPROTO, msg, cap, "section %s: %s",
                                             WM_SECTION_NAME, why);
        goto free_image;
    }
    /* Checked: each claim is of its entry's lineage, which it now borrows. */
    for (size_t i = 0; i < img.n_lineages; i++) wm_lineage_entry_bind(&img.lineages[i]);
    *out = img;
    wm_sd_scratch_fini(&w->s);
    free(w);
    return WM_OK;
not_decoded:
    if (rc == SMP_EPROTO)
        rc = wm_fail(SMP_EPROTO, msg, cap, "section %s does not decode", WM_SECTION_NAME);
free_image:
    wm_section_image_clear(&img);
free_walk:
    wm_sd_scratch_fini(&w->s);
    free(w);
    return rc;
}
