/* wm_request_decode.c -- the IdentityRequest of the identity reads
 * (GET_METADATA, IS_EXIST, GET_SIZE) decoded by hand.
 *
 * protobuf-c's unpack of this three-field request walked its descriptors
 * for the request and again for the nested WeightIdentity, allocating each
 * message and string from the handler's arena: some 1,700 of the 7,300
 * instructions the master's loop spent on a weight_get_metadata (callgrind,
 * bench/JOURNAL.md "Reads: the identity request decoded by hand"). Here the
 * fields are scanned with the wire primitives of proto/pb_wire.h into views
 * of the body, and the strings that win are copied once, NUL-terminated,
 * into the caller's wm_id_request: the same Wmrpc__IdentityRequest and
 * Wmrpc__WeightIdentity protobuf-c would have given, for the handlers'
 * identity checks to read unchanged.
 *
 * A body decodes or is refused exactly as wmrpc__identity_request__unpack
 * does it (protobuf-c 1.4; tests/unit/test_wm_request_decode.c and the
 * fuzz target fuzz_wm_requests hold the two against each other):
 *  - the bytes' rules are pb_wire.h's (pbw_next): a bad tag or varint, a
 *    length past the end, wire types 3, 4, 6, 7, too many fields: refused,
 *    in the request and in every WeightIdentity it carries;
 *  - a known field of the wrong wire type is refused; an unknown field of
 *    any wire type is skipped;
 *  - a field given twice keeps the last value; a WeightIdentity given
 *    twice is merged as protobuf-c's merge_messages does, the earlier into
 *    the later: the later's strings where the later has them (empty ones
 *    too), the earlier's otherwise, and the later's generation (0 when it
 *    lacks it: proto3 scalars are not merged);
 *  - strings are not checked for UTF-8 (protobuf-c 1.4 does not), and one
 *    with a NUL byte reads, as a C string, up to that byte, as protobuf-c's
 *    copy does. */
#include <stdlib.h>
#include <string.h>

#include "pb_wire.h"
#include "wm_mgmt.h"

/* A string field's bytes in the body; s NULL when not given. */
typedef struct wm_rd_str {
    const uint8_t *s;
    size_t len;
} wm_rd_str;

/* The WeightIdentity fields, as views. */
typedef struct wm_rd_ident {
    wm_rd_str str[4]; /* tenant, namespace_id, resource_id, revision */
    uint64_t generation;
} wm_rd_ident;

/* A string field f into *out: -1 when it is not length-delimited. */
static int wm_rd_string(const pbw_fld *f, wm_rd_str *out)
{
    if (f->wt != PBW_LEN) return -1;
    out->s = pbw_body(f);
    out->len = pbw_body_len(f);
    return 0;
}

/* Decode one occurrence of a WeightIdentity from [p, end) over *m, which
 * holds what the earlier occurrences gave: merge_messages' result is, for
 * each string, the last occurrence that gave it, and the generation of
 * this occurrence (0 when it lacks it). -1 on bytes protobuf-c refuses. */
static int wm_rd_identity(const uint8_t *p, const uint8_t *end, wm_rd_ident *m)
{
    pbw_rd r = {p, end, 0};
    pbw_fld f;
    m->generation = 0;
    while (r.p < r.end) {
        if (pbw_next(&r, &f) < 0) return -1;
        int bad = 0;
        switch (f.tag) {
        case 1:
        case 2:
        case 3:
        case 4: bad = wm_rd_string(&f, &m->str[f.tag - 1]); break;
        case 5: bad = pbw_u64(&f, &m->generation); break;
        default: break;
        }
        if (bad) return -1;
    }
    return 0;
}

/* Copy a string that was given into r's storage (NUL-terminated) and
 * point *out at it; one that was not stays protobuf-c's empty string. */
static void wm_rd_put(char **at, const wm_rd_str *v, char **out)
{
    if (v->s == NULL) {
        *out = (char *)protobuf_c_empty_string;
        return;
    }
    if (v->len > 0) memcpy(*at, v->s, v->len);
    (*at)[v->len] = '\0';
    *out = *at;
    *at += v->len + 1;
}

int wm_id_request_decode(wm_id_request *r, const uint8_t *body, size_t len)
{
    static const Wmrpc__IdentityRequest req_init = WMRPC__IDENTITY_REQUEST__INIT;
    static const Wmrpc__WeightIdentity id_init = WMRPC__WEIGHT_IDENTITY__INIT;
    wm_rd_ident ident = {{{NULL, 0}, {NULL, 0}, {NULL, 0}, {NULL, 0}}, 0};
    wm_rd_str request_id = {NULL, 0};
    int has_identity = 0;
    pbw_rd rd = pbw_reader(body, len);
    pbw_fld f;

    r->m = req_init;
    r->id = id_init;
    r->heap = NULL;
    while (rd.p < rd.end) {
        if (pbw_next(&rd, &f) < 0) return -1;
        int bad = 0;
        switch (f.tag) {
        case 1: /* given again: merged (wm_rd_identity) */
            if (f.wt != PBW_LEN || wm_rd_identity(pbw_body(&f), f.data + f.len, &ident) < 0)
                return -1;
            has_identity = 1;
            break;
        case 2: bad = pbw_u64(&f, &r->m.expected_metadata_generation); break;
        case 3: bad = wm_rd_string(&f, &request_id); break;
        default: break;
        }
        if (bad) return -1;
    }

    /* The strings that won, each once with its NUL: they fit in the body's
     * length plus five bytes. */
    size_t need = 5;
    if (has_identity)
        for (int i = 0; i < 4; i++) need += ident.str[i].len;
    need += request_id.len;
    char *at = r->room;
    if (need > sizeof(r->room)) {
        if ((r->heap = malloc(need)) == NULL) return SMP_ENOMEM;
        at = r->heap;
    }
    if (has_identity) {
        wm_rd_put(&at, &ident.str[0], &r->id.tenant);
        wm_rd_put(&at, &ident.str[1], &r->id.namespace_id);
        wm_rd_put(&at, &ident.str[2], &r->id.resource_id);
        wm_rd_put(&at, &ident.str[3], &r->id.revision);
        r->id.generation = ident.generation;
        r->m.identity = &r->id;
    }
    wm_rd_put(&at, &request_id, &r->m.request_id);
    return 0;
}

void wm_id_request_fini(wm_id_request *r)
{
    free(r->heap);
    r->heap = NULL;
}
