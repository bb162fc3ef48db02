/* pb_wire.h -- the protobuf wire format's primitives, for the hand-written
 * codecs of the hot paths.
 *
 * Most messages go through protobuf-c (the .proto files here, compiled into
 * build/proto). A few paths decode or encode by hand because protobuf-c's
 * generic walk cost them too much: the snapshot's objects section
 * (host_shim/master/obj_snap_decode.c), the weight section
 * (weight_plugin/wm_section_decode.c), the metadata reply
 * (weight_plugin/wm_reply_encode.c) and the RPC envelope
 * (client/rpc_envelope.c). They share the pieces below, so a field is
 * scanned and a varint written one way everywhere.
 *
 * The reader accepts exactly what protobuf-c 1.4's unpack scans: a field
 * number of 0, a tag or varint longer than protobuf-c allows, a length past
 * the end or over INT_MAX, a wire type it does not know, and more fields in
 * one message than its scan can hold are refused. Each hand decoder's test
 * holds its answers against protobuf-c's own (an oracle), and its fuzzer
 * does the same on random bytes.
 *
 * Header-only (static inline): the master, the plugin and the client
 * library each get their own copy, with no symbol between them. */
#ifndef PB_WIRE_H
#define PB_WIRE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

/* Wire types. */
enum { PBW_VARINT = 0, PBW_64BIT = 1, PBW_LEN = 2, PBW_32BIT = 5 };

/* protobuf-c scans at most this many fields of one message (its slabs of
 * scanned members: 16 << 0 up to 16 << 22 of them). */
#define PBW_MAX_FIELDS ((size_t)16 * ((1u << 23) - 1))

/* -- reading --------------------------------------------------------------- */

/* A reader over bytes [p, end), counting the fields read (start n at 0). */
typedef struct pbw_rd {
    const uint8_t *p;
    const uint8_t *end;
    size_t n;
} pbw_rd;

/* A reader over the len bytes at p. p may be NULL when len is 0 (an empty
 * body or section, as the host and protobuf-c hand them over): no
 * arithmetic is done on it then, since even NULL + 0 is undefined. */
static inline pbw_rd pbw_reader(const uint8_t *p, size_t len)
{
    pbw_rd r = {p, len > 0 ? p + len : p, 0};
    return r;
}

/* One field as protobuf-c scans it: its bytes (a length prefix included)
 * and the prefix's length; a varint's value (low 64 bits) read on the way. */
typedef struct pbw_fld {
    uint32_t tag;
    unsigned wt;
    const uint8_t *data;
    size_t len;
    size_t pref;
    uint64_t v;
} pbw_fld;

/* Read the next field's tag and value extent (not its meaning); r->p must
 * be before r->end. 0, or -1 on bytes protobuf-c refuses.
 *
 * Nearly every field of the hand-decoded messages has a one-byte tag (field
 * numbers up to 15) and, when length-delimited, a length under 16 Ki: those
 * are read without the general loops (a field cost some 60 instructions, a
 * fifth of a snapshot load's objects section). The loops give the same
 * answers for them. */
static inline int pbw_next(pbw_rd *r, pbw_fld *f)
{
    size_t rem = (size_t)(r->end - r->p);
    const uint8_t *p = r->p;
    unsigned b0 = p[0];
    if (++r->n > PBW_MAX_FIELDS) return -1;
    uint32_t tag = (uint32_t)(b0 & 0x7f) >> 3;
    size_t used = 1;
    if (__builtin_expect(b0 < 0x80, 1)) {
        if (tag == 0) return -1; /* 0 is not a field number */
    } else {
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
    f->wt = b0 & 7;
    p += used;
    rem -= used;
    f->data = p;
    f->pref = 0;
    f->v = 0; /* read only for a varint; set anyway, as GCC -O3 cannot tell */
    switch (f->wt) {
    case PBW_VARINT: {
        /* The value is gathered as the end is looked for (one pass). */
        size_t max = rem < 10 ? rem : 10, i;
        uint64_t v = 0;
        for (i = 0; i < max; i++) {
            v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
            if ((p[i] & 0x80) == 0) break;
        }
        if (i == max) return -1;
        f->v = v;
        f->len = i + 1;
        break;
    }
    case PBW_64BIT:
        if (rem < 8) return -1;
        f->len = 8;
        break;
    case PBW_LEN: {
        size_t val;
        if (rem >= 1 && p[0] < 0x80) {
            val = p[0];
            f->pref = 1;
        } else if (rem >= 2 && p[1] < 0x80) {
            val = (size_t)(p[0] & 0x7f) | (size_t)p[1] << 7;
            f->pref = 2;
        } else {
            size_t max = rem < 5 ? rem : 5, i;
            val = 0;
            for (i = 0; i < max; i++) {
                val |= ((size_t)p[i] & 0x7f) << (7 * i);
                if ((p[i] & 0x80) == 0) break;
            }
            if (i == max) return -1;
            f->pref = i + 1;
            if (val > INT_MAX) return -1;
        }
        if (val > rem - f->pref) return -1;
        f->len = f->pref + val;
        break;
    }
    case PBW_32BIT:
        if (rem < 4) return -1;
        f->len = 4;
        break;
    default:
        return -1;
    }
    r->p = p + f->len;
    return 0;
}

/* A length-delimited field's content and its length. */
static inline const uint8_t *pbw_body(const pbw_fld *f)
{
    return f->data + f->pref;
}

static inline size_t pbw_body_len(const pbw_fld *f)
{
    return f->len - f->pref;
}

/* A varint field's value (low 64 bits). -1 when not a varint. */
static inline int pbw_u64(const pbw_fld *f, uint64_t *v)
{
    if (f->wt != PBW_VARINT) return -1;
    *v = f->v;
    return 0;
}

/* Its low 32 bits, as protobuf-c keeps a uint32 or an enum. */
static inline int pbw_u32(const pbw_fld *f, uint32_t *v)
{
    uint64_t x;
    if (pbw_u64(f, &x) < 0) return -1;
    *v = (uint32_t)x;
    return 0;
}

/* A bool: true when any of the varint's bits is set (protobuf-c's rule).
 * The caller has checked the wire type. */
static inline protobuf_c_boolean pbw_bool(const pbw_fld *f)
{
    for (size_t i = 0; i < f->len; i++)
        if (f->data[i] & 0x7f) return 1;
    return 0;
}

/* A double (fixed 64 bits, little-endian). -1 for another wire type. */
static inline int pbw_double(const pbw_fld *f, double *v)
{
    if (f->wt != PBW_64BIT) return -1;
    uint64_t x = 0;
    for (size_t i = 0; i < 8; i++) x |= (uint64_t)f->data[i] << (8 * i);
    memcpy(v, &x, sizeof(*v));
    return 0;
}

/* A bytes field, pointing into the input (NULL data when empty, as
 * protobuf-c leaves it). -1 when not length-delimited. */
static inline int pbw_bytes(const pbw_fld *f, ProtobufCBinaryData *out)
{
    if (f->wt != PBW_LEN) return -1;
    out->len = pbw_body_len(f);
    out->data = out->len ? (uint8_t *)pbw_body(f) : NULL;
    return 0;
}

/* -- writing --------------------------------------------------------------- */

/* Bytes of v as a varint (1 to 10). */
static inline size_t pbw_varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Write v as a varint at p; the byte after it. */
static inline uint8_t *pbw_put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Bytes of field num's tag, and the tag written at p (the byte after it). */
static inline size_t pbw_tag_len(unsigned num)
{
    return pbw_varint_len((uint64_t)num << 3);
}

static inline uint8_t *pbw_put_tag(uint8_t *p, unsigned num, unsigned wt)
{
    return pbw_put_varint(p, ((uint64_t)num << 3) | wt);
}

#endif
