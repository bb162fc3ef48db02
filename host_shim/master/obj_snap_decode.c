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
 *    so do more fields in one message than protobuf-c's scan holds (the
 *    field scanner is pb_wire.h's, shared with the weight section's);
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
 * with their NULs); a bytes field points into the section itself. An open
 * put (field 5: the puts in flight, a few at most) is unpacked by protobuf-c
 * itself. */
#include "obj_snap_decode.h"

#include "pb_wire.h"
#include "store_plugin.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Copy a string field into the scratch at *at (room reserved by the
 * caller) and point *out at it. -1 when not length-delimited. */
static int snap_str(const pbw_fld *f, char *scratch, size_t *at, char **out)
{
    if (f->wt != PBW_LEN) return -1;
    size_t n = pbw_body_len(f);
    char *s = scratch + *at;
    memcpy(s, pbw_body(f), n);
    s[n] = '\0';
    *at += n + 1;
    *out = s;
    return 0;
}

/* Decode a Replica from [p, end). 0 or -1. */
static int snap_replica(const uint8_t *p, const uint8_t *end, char *scratch, size_t *at,
                        Hostrec__Replica *m)
{
    static const Hostrec__Replica init = HOSTREC__REPLICA__INIT;
    *m = init;
    pbw_rd r = {p, end, 0};
    pbw_fld f;
    while (r.p < r.end) {
        if (pbw_next(&r, &f) < 0) return -1;
        int bad = 0;
        switch (f.tag) {
        case 1: bad = pbw_u32(&f, &m->kind); break;
        case 2: bad = pbw_u32(&f, &m->status); break;
        case 3: bad = snap_str(&f, scratch, at, &m->node); break;
        case 4: bad = snap_str(&f, scratch, at, &m->segment); break;
        case 5: bad = pbw_u64(&f, &m->offset); break;
        case 6: bad = pbw_u64(&f, &m->length); break;
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
    pbw_rd r = {p, end, 0};
    pbw_fld f;
    while (r.p < r.end) {
        if (pbw_next(&r, &f) < 0) return SMP_EPROTO;
        int bad = 0;
        switch (f.tag) {
        case 1: bad = snap_str(&f, d->str, &at, &m->key); break;
        case 2: bad = pbw_u64(&f, &m->size); break;
        case 3: bad = pbw_u32(&f, &m->data_type); break;
        case 4: bad = snap_str(&f, d->str, &at, &m->group); break;
        case 5: bad = snap_str(&f, d->str, &at, &m->tenant); break;
        case 6: bad = pbw_bytes(&f, &m->checksum); break;
        case 7: m->hard_pinned = pbw_bool(&f); break;
        case 8: bad = pbw_u64(&f, &m->last_access_ms); break;
        case 9:
            if (f.wt != PBW_LEN) return SMP_EPROTO;
            if (snap_reps_reserve(d, n + 1) < 0) return SMP_ENOMEM;
            bad = snap_replica(f.data + f.pref, f.data + f.len, d->str, &at, &d->reps[n]);
            n++;
            break;
        case 10: bad = pbw_u64(&f, &m->put_id); break;
        case 11: m->update_only = pbw_bool(&f); break;
        case 12:
            /* Checked like any message, then only reported present. */
            if (f.wt != PBW_LEN) return SMP_EPROTO;
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
    pbw_rd r = {p, end, 0};
    pbw_fld f;
    while (r.p < r.end) {
        if (pbw_next(&r, &f) < 0) return SMP_EPROTO;
        int bad = 0;
        switch (f.tag) {
        case 1: bad = snap_str(&f, d->str, &at, &m->id); break;
        case 2: bad = snap_str(&f, d->str, &at, &m->node); break;
        case 3: bad = pbw_u64(&f, &m->capacity); break;
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
    pbw_rd r = {p, end, 0};
    pbw_fld f;
    while (r.p < r.end) {
        if (pbw_next(&r, &f) < 0) return SMP_EPROTO;
        int bad = 0;
        switch (f.tag) {
        case 1: bad = snap_str(&f, d->str, &at, &m->name); break;
        case 2: m->managed = pbw_bool(&f); break;
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

/* Decode one top-level record of kind what from [p, end) and hand it to fn. */
static int snap_record(obj_snap_dec *d, unsigned what, const uint8_t *p, const uint8_t *end,
                       obj_snap_fn fn, void *arg)
{
    int rc;
    if ((rc = snap_str_reserve(d, (size_t)(end - p))) < 0) return rc;
    if (what == OBJ_SNAP_OBJECTS) {
        Hostrec__ObjectRecord m;
        if ((rc = snap_object(d, p, end, &m)) < 0) return rc;
        return fn ? fn(arg, what, &m.base) : SMP_OK;
    }
    if (what == OBJ_SNAP_SEGMENTS) {
        Hostrec__SegmentRecord m;
        if ((rc = snap_segment(d, p, end, &m)) < 0) return rc;
        return fn ? fn(arg, what, &m.base) : SMP_OK;
    }
    if (what == OBJ_SNAP_OPEN_PUTS) {
        /* a few at most (the puts in flight): protobuf-c's own unpack */
        Hostrec__HandedPut *m = hostrec__handed_put__unpack(NULL, (size_t)(end - p), p);
        if (m == NULL) return SMP_EPROTO;
        rc = fn ? fn(arg, what, &m->base) : SMP_OK;
        hostrec__handed_put__free_unpacked(m, NULL);
        return rc;
    }
    if (what == OBJ_SNAP_ZONES) {
        /* one per segment at most: protobuf-c's own unpack */
        Hostrec__WriteZones *m = hostrec__write_zones__unpack(NULL, (size_t)(end - p), p);
        if (m == NULL) return SMP_EPROTO;
        rc = fn ? fn(arg, what, &m->base) : SMP_OK;
        hostrec__write_zones__free_unpacked(m, NULL);
        return rc;
    }
    Hostrec__GroupRecord m;
    if ((rc = snap_group(d, p, end, &m)) < 0) return rc;
    return fn ? fn(arg, what, &m.base) : SMP_OK;
}

/* The OBJ_SNAP_* bit of a top-level field number; 0 for another. */
static unsigned snap_kind(uint32_t tag)
{
    return tag == 2   ? OBJ_SNAP_SEGMENTS
           : tag == 3 ? OBJ_SNAP_GROUPS
           : tag == 4 ? OBJ_SNAP_OBJECTS
           : tag == 5 ? OBJ_SNAP_OPEN_PUTS
           : tag == 6 ? OBJ_SNAP_ZONES
                      : 0;
}

/* A top-level field's tag and length (or varint) lie in its first bytes:
 * a tag of at most 5, a value of at most 10. */
#define SNAP_FIELD_HEAD 16

/* The walk of obj_snap_decode and obj_snap_decode_fed: wait NULL means
 * every byte is in (and fields selects the records); else the bytes are
 * waited for and every record is decoded, in kind order. */
static int snap_decode_walk(obj_snap_dec *d, const uint8_t *data, size_t len, unsigned fields,
                            uint32_t *format, obj_snap_wait wait, void *warg, obj_snap_fn fn,
                            void *arg)
{
    int rc;
    if (format) *format = 0;
    if (len == 0) return SMP_OK;
    if (data == NULL) return SMP_EINVAL;
    size_t avail = len;
    unsigned last = 0;
    if (wait != NULL) avail = 0;
    pbw_rd r = pbw_reader(data, len);
    pbw_fld f;
    while (r.p < r.end) {
        if (wait != NULL) {
            size_t at = (size_t)(r.p - data);
            size_t head = len - at < SNAP_FIELD_HEAD ? len : at + SNAP_FIELD_HEAD;
            if (avail < head && (avail = wait(warg, head)) < head) return SMP_EPROTO;
        }
        if (pbw_next(&r, &f) < 0) return SMP_EPROTO;
        if (wait != NULL) {
            size_t end = (size_t)(r.p - data);
            if (avail < end && (avail = wait(warg, end)) < end) return SMP_EPROTO;
        }
        if (f.tag == 1) {
            uint32_t v;
            if (pbw_u32(&f, &v) < 0) return SMP_EPROTO;
            if (format) *format = v;
            continue;
        }
        unsigned what = snap_kind(f.tag);
        if (what == 0) continue; /* unknown: skipped */
        if (f.wt != PBW_LEN) return SMP_EPROTO;
        if (!(fields & what)) continue;
        if (wait != NULL) {
            if (what < last) return OBJ_SNAP_OUT_OF_ORDER;
            last = what;
        }
        if ((rc = snap_record(d, what, f.data + f.pref, f.data + f.len, fn, arg)) < 0) return rc;
    }
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
    return snap_decode_walk(d, data, len, fields, format, NULL, NULL, fn, arg);
}

int obj_snap_decode_fed(obj_snap_dec *d,
                        const uint8_t *data,
                        size_t len,
                        uint32_t *format,
                        obj_snap_wait wait,
                        void *warg,
                        obj_snap_fn fn,
                        void *arg)
{
    if (wait == NULL) return SMP_EINVAL;
    return snap_decode_walk(d, data, len, OBJ_SNAP_ALL, format, wait, warg, fn, arg);
}

/* How far ahead of the framing walk its bytes are fetched. */
#define OBJ_SNAP_AHEAD 4096

/* obj_snap_frame_scan over the fields lying whole in data[0..avail). */
static int snap_frame_walk(const uint8_t *data, size_t len, size_t avail, obj_snap_frame *out,
                           size_t *used)
{
    memset(out, 0, sizeof(*out));
    out->in_kind_order = 1;
    *used = 0;
    if (len == 0) return SMP_OK;
    if (data == NULL) return SMP_EINVAL;
    size_t last = 0; /* the kind of the last record (1 segments .. 5 zones) */
    pbw_rd r = pbw_reader(data, len);
    pbw_fld f;
    while (r.p < r.end) {
        size_t at = (size_t)(r.p - data);
        if (avail < len && avail - at < SNAP_FIELD_HEAD) break; /* its head is not in */
        /* Each field's framing is read where the one before ends: at some
         * 150 bytes a record, a cache miss each on a section just read
         * into memory, one after another. The lines some 4 KiB ahead are
         * asked for now (a hint; the walk goes where the bytes say). */
        if ((size_t)(r.end - r.p) > OBJ_SNAP_AHEAD + 192) {
            __builtin_prefetch(r.p + OBJ_SNAP_AHEAD);
            __builtin_prefetch(r.p + OBJ_SNAP_AHEAD + 64);
            __builtin_prefetch(r.p + OBJ_SNAP_AHEAD + 128);
        }
        if (pbw_next(&r, &f) < 0) return SMP_EPROTO;
        if ((size_t)(r.p - data) > avail) break; /* its body is not all in */
        *used = (size_t)(r.p - data);
        if (f.tag == 1) {
            if (pbw_u32(&f, &out->format) < 0) return SMP_EPROTO;
            continue;
        }
        if (f.tag < 2 || f.tag > 6) continue; /* unknown: skipped */
        if (f.wt != PBW_LEN) return SMP_EPROTO;
        size_t kind = f.tag - 1;
        if (kind < last) out->in_kind_order = 0;
        last = kind;
        out->n[kind - 1]++;
    }
    return SMP_OK;
}

int obj_snap_frame_scan(const uint8_t *data, size_t len, obj_snap_frame *out)
{
    size_t used;
    return snap_frame_walk(data, len, len, out, &used);
}

int obj_snap_frame_scan_prefix(const uint8_t *data,
                               size_t len,
                               size_t avail,
                               obj_snap_frame *out,
                               size_t *used)
{
    if (avail > len) return SMP_EINVAL;
    return snap_frame_walk(data, len, avail, out, used);
}

void obj_snap_dec_fini(obj_snap_dec *d)
{
    free(d->str);
    free(d->reps);
    free(d->repp);
    memset(d, 0, sizeof(*d));
}
