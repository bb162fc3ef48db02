/* obj_snap_decode.c -- the host objects section of a snapshot decoded by
 * hand, record by record, into scratch storage reused from one record to the
 * next (see obj_snap_decode.h for why and for the contract).
 *
 * The rules are protobuf-c 1.4's (protobuf-c.c, protobuf_c_message_unpack),
 * so that a section loads or fails exactly as it did through
 * hostrec__host_snapshot__unpack:
 *  - a tag is at most 5 bytes, its first byte must carry field bits (0x00-0x07
 *    fail), and its number is accumulated in 32 bits;
 *  - a varint is at most 10 bytes; a length prefix at most 5 bytes and at
 *    most INT_MAX, and must fit in what remains; wire types 3, 4, 6 and 7 fail;
 *  - an unknown field is skipped; a known one of the wrong wire type fails,
 *    except a bool, which is true when any byte of its value (a length
 *    prefix included) has one of its low 7 bits set;
 *  - a uint32 is the low 32 bits of the varint, a uint64 its low 64;
 *  - a scalar, string or bytes field given twice keeps the last value; a
 *    string is copied with a NUL added (bytes after an embedded NUL are
 *    there but unseen by C string functions, as before); empty bytes are
 *    {0, NULL}; a repeated message field appends.
 * A string of a record is copied into d->str, whose size is reserved from
 * the record's length before it is decoded (each string occurrence costs at
 * least two bytes of framing, so twice the record's length holds them all
 * with their NULs); a bytes field points into the section itself. */
#include "obj_snap_decode.h"

#include "store_plugin.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Wire types. */
enum { WT_VARINT = 0, WT_64BIT = 1, WT_LEN = 2, WT_32BIT = 5 };

/* A reader over bytes [p, end). */
typedef struct snap_rd {
    const uint8_t *p;
    const uint8_t *end;
} snap_rd;

/* One field as protobuf-c scans it: its bytes (a length prefix included)
 * and the prefix's length. */
typedef struct snap_fld {
    uint32_t tag;
    unsigned wt;
    const uint8_t *data;
    size_t len;
    size_t pref;
} snap_fld;

/* Read the next field's tag and value extent (not its meaning). 0, or -1 on
 * bytes protobuf-c refuses. */
static int snap_next(snap_rd *r, snap_fld *f)
{
    size_t rem = (size_t)(r->end - r->p);
    const uint8_t *p = r->p;
    if ((p[0] & 0xf8) == 0) return -1; /* 0 is not a field number */
    f->wt = p[0] & 7;
    uint32_t tag = (uint32_t)(p[0] & 0x7f) >> 3;
    size_t used = 1;
    if (p[0] & 0x80) {
        size_t max = rem > 5 ? 5 : rem;
        unsigned shift = 4;
        for (used = 1; used < max; used++) {
            if (p[used] & 0x80) {
                tag |= (uint32_t)(p[used] & 0x7f) << shift;
                shift += 7;
            } else {
                tag |= (uint32_t)p[used] << shift;
                break;
            }
        }
        if (used == max) return -1;
        used++;
    }
    f->tag = tag;
    p += used;
    rem -= used;
    f->data = p;
    f->pref = 0;
    switch (f->wt) {
    case WT_VARINT: {
        size_t max = rem < 10 ? rem : 10, i;
        for (i = 0; i < max && (p[i] & 0x80); i++)
            ;
        if (i == max) return -1;
        f->len = i + 1;
        break;
    }
    case WT_64BIT:
        if (rem < 8) return -1;
        f->len = 8;
        break;
    case WT_LEN: {
        size_t max = rem < 5 ? rem : 5, i, val = 0;
        for (i = 0; i < max; i++) {
            val |= ((size_t)p[i] & 0x7f) << (7 * i);
            if ((p[i] & 0x80) == 0) break;
        }
        if (i == max) return -1;
        f->pref = i + 1;
        if (val > INT_MAX || f->pref + val > rem) return -1;
        f->len = f->pref + val;
        break;
    }
    case WT_32BIT:
        if (rem < 4) return -1;
        f->len = 4;
        break;
    default:
        return -1;
    }
    r->p = p + f->len;
    return 0;
}

/* A varint field's value (low 64 bits). -1 when not a varint. */
static int snap_u64(const snap_fld *f, uint64_t *v)
{
    if (f->wt != WT_VARINT) return -1;
    uint64_t x = 0;
    for (size_t i = 0; i < f->len; i++) x |= (uint64_t)(f->data[i] & 0x7f) << (7 * i);
    *v = x;
    return 0;
}

static int snap_u32(const snap_fld *f, uint32_t *v)
{
    uint64_t x;
    if (snap_u64(f, &x) < 0) return -1;
    *v = (uint32_t)x;
    return 0;
}

static protobuf_c_boolean snap_bool(const snap_fld *f)
{
    for (size_t i = 0; i < f->len; i++)
        if (f->data[i] & 0x7f) return 1;
    return 0;
}

/* Copy a string field into the scratch at *at (room reserved by the
 * caller) and point *out at it. -1 when not length-delimited. */
static int snap_str(const snap_fld *f, char *scratch, size_t *at, char **out)
{
    if (f->wt != WT_LEN) return -1;
    size_t n = f->len - f->pref;
    char *s = scratch + *at;
    memcpy(s, f->data + f->pref, n);
    s[n] = '\0';
    *at += n + 1;
    *out = s;
    return 0;
}

static int snap_bytes(const snap_fld *f, ProtobufCBinaryData *out)
{
    if (f->wt != WT_LEN) return -1;
    out->len = f->len - f->pref;
    out->data = out->len ? (uint8_t *)(f->data + f->pref) : NULL;
    return 0;
}

/* Decode a Replica from [p, end). 0 or -1. */
static int snap_replica(const uint8_t *p, const uint8_t *end, char *scratch, size_t *at,
                        Hostrec__Replica *m)
{
    static const Hostrec__Replica init = HOSTREC__REPLICA__INIT;
    *m = init;
    snap_rd r = {p, end};
    snap_fld f;
    while (r.p < r.end) {
        if (snap_next(&r, &f) < 0) return -1;
        int bad = 0;
        switch (f.tag) {
        case 1: bad = snap_u32(&f, &m->kind); break;
        case 2: bad = snap_u32(&f, &m->status); break;
        case 3: bad = snap_str(&f, scratch, at, &m->node); break;
        case 4: bad = snap_str(&f, scratch, at, &m->segment); break;
        case 5: bad = snap_u64(&f, &m->offset); break;
        case 6: bad = snap_u64(&f, &m->length); break;
        case 7: bad = snap_str(&f, scratch, at, &m->path); break;
        default: break;
        }
        if (bad) return -1;
    }
    return 0;
}

/* Room for n more replicas in d. SMP_ENOMEM. */
static int snap_reps_reserve(obj_snap_dec *d, size_t n)
{
    if (n <= d->repcap) return SMP_OK;
    size_t cap = d->repcap ? d->repcap : 8;
    while (cap < n) cap *= 2;
    Hostrec__Replica *reps = realloc(d->reps, cap * sizeof(*reps));
    if (reps == NULL) return SMP_ENOMEM;
    d->reps = reps;
    Hostrec__Replica **repp = realloc(d->repp, cap * sizeof(*repp));
    if (repp == NULL) return SMP_ENOMEM;
    d->repp = repp;
    d->repcap = cap;
    return SMP_OK;
}

/* Decode an ObjectRecord from [p, end) into m. SMP_OK, SMP_EPROTO,
 * SMP_ENOMEM. */
static int snap_object(obj_snap_dec *d, const uint8_t *p, const uint8_t *end,
                       Hostrec__ObjectRecord *m)
{
    static const Hostrec__ObjectRecord init = HOSTREC__OBJECT_RECORD__INIT;
    *m = init;
    size_t at = 0, n = 0;
    snap_rd r = {p, end};
    snap_fld f;
    while (r.p < r.end) {
        if (snap_next(&r, &f) < 0) return SMP_EPROTO;
        int bad = 0;
        switch (f.tag) {
        case 1: bad = snap_str(&f, d->str, &at, &m->key); break;
        case 2: bad = snap_u64(&f, &m->size); break;
        case 3: bad = snap_u32(&f, &m->data_type); break;
        case 4: bad = snap_str(&f, d->str, &at, &m->group); break;
        case 5: bad = snap_str(&f, d->str, &at, &m->tenant); break;
        case 6: bad = snap_bytes(&f, &m->checksum); break;
        case 7: m->hard_pinned = snap_bool(&f); break;
        case 8: bad = snap_u64(&f, &m->last_access_ms); break;
        case 9:
            if (f.wt != WT_LEN) return SMP_EPROTO;
            if (snap_reps_reserve(d, n + 1) < 0) return SMP_ENOMEM;
            bad = snap_replica(f.data + f.pref, f.data + f.len, d->str, &at, &d->reps[n]);
            n++;
            break;
        case 10: bad = snap_u64(&f, &m->put_id); break;
        case 11: m->update_only = snap_bool(&f); break;
        case 12:
            /* Checked like any message, then only reported present. */
            if (f.wt != WT_LEN) return SMP_EPROTO;
            bad = snap_replica(f.data + f.pref, f.data + f.len, d->str, &at, &d->add);
            m->add_replica = &d->add;
            break;
        default: break;
        }
        if (bad) return SMP_EPROTO;
    }
    for (size_t i = 0; i < n; i++) d->repp[i] = &d->reps[i];
    m->n_replicas = n;
    m->replicas = n ? d->repp : NULL;
    return SMP_OK;
}

static int snap_segment(obj_snap_dec *d, const uint8_t *p, const uint8_t *end,
                        Hostrec__SegmentRecord *m)
{
    static const Hostrec__SegmentRecord init = HOSTREC__SEGMENT_RECORD__INIT;
    *m = init;
    size_t at = 0;
    snap_rd r = {p, end};
    snap_fld f;
    while (r.p < r.end) {
        if (snap_next(&r, &f) < 0) return SMP_EPROTO;
        int bad = 0;
        switch (f.tag) {
        case 1: bad = snap_str(&f, d->str, &at, &m->id); break;
        case 2: bad = snap_str(&f, d->str, &at, &m->node); break;
        case 3: bad = snap_u64(&f, &m->capacity); break;
        default: break;
        }
        if (bad) return SMP_EPROTO;
    }
    return SMP_OK;
}

static int snap_group(obj_snap_dec *d, const uint8_t *p, const uint8_t *end,
                      Hostrec__GroupRecord *m)
{
    static const Hostrec__GroupRecord init = HOSTREC__GROUP_RECORD__INIT;
    *m = init;
    size_t at = 0;
    snap_rd r = {p, end};
    snap_fld f;
    while (r.p < r.end) {
        if (snap_next(&r, &f) < 0) return SMP_EPROTO;
        int bad = 0;
        switch (f.tag) {
        case 1: bad = snap_str(&f, d->str, &at, &m->name); break;
        case 2: m->managed = snap_bool(&f); break;
        case 3: bad = snap_str(&f, d->str, &at, &m->owner); break;
        default: break;
        }
        if (bad) return SMP_EPROTO;
    }
    return SMP_OK;
}

/* Room in d->str for the strings of a record of len bytes. SMP_ENOMEM. */
static int snap_str_reserve(obj_snap_dec *d, size_t len)
{
    size_t need = len * 2 + 1; /* len <= INT_MAX: no overflow */
    if (need <= d->strcap) return SMP_OK;
    char *s = realloc(d->str, need);
    if (s == NULL) return SMP_ENOMEM;
    d->str = s;
    d->strcap = need;
    return SMP_OK;
}

int obj_snap_decode(obj_snap_dec *d,
                    const uint8_t *data,
                    size_t len,
                    unsigned fields,
                    uint32_t *format,
                    obj_snap_fn fn,
                    void *arg)
{
    int rc;
    if (format) *format = 0;
    if (len == 0) return SMP_OK;
    if (data == NULL) return SMP_EINVAL;
    snap_rd r = {data, data + len};
    snap_fld f;
    while (r.p < r.end) {
        if (snap_next(&r, &f) < 0) return SMP_EPROTO;
        if (f.tag == 1) {
            uint32_t v;
            if (snap_u32(&f, &v) < 0) return SMP_EPROTO;
            if (format) *format = v;
            continue;
        }
        unsigned what = f.tag == 2 ? OBJ_SNAP_SEGMENTS
                        : f.tag == 3 ? OBJ_SNAP_GROUPS
                        : f.tag == 4 ? OBJ_SNAP_OBJECTS
                                     : 0;
        if (what == 0) continue; /* unknown: skipped */
        if (f.wt != WT_LEN) return SMP_EPROTO;
        if (!(fields & what)) continue;
        const uint8_t *p = f.data + f.pref, *end = f.data + f.len;
        if ((rc = snap_str_reserve(d, (size_t)(end - p))) < 0) return rc;
        if (what == OBJ_SNAP_OBJECTS) {
            Hostrec__ObjectRecord m;
            if ((rc = snap_object(d, p, end, &m)) < 0) return rc;
            if (fn && (rc = fn(arg, what, &m.base)) < 0) return rc;
        } else if (what == OBJ_SNAP_SEGMENTS) {
            Hostrec__SegmentRecord m;
            if ((rc = snap_segment(d, p, end, &m)) < 0) return rc;
            if (fn && (rc = fn(arg, what, &m.base)) < 0) return rc;
        } else {
            Hostrec__GroupRecord m;
            if ((rc = snap_group(d, p, end, &m)) < 0) return rc;
            if (fn && (rc = fn(arg, what, &m.base)) < 0) return rc;
        }
    }
    return SMP_OK;
}

void obj_snap_dec_fini(obj_snap_dec *d)
{
    free(d->str);
    free(d->reps);
    free(d->repp);
    memset(d, 0, sizeof(*d));
}
