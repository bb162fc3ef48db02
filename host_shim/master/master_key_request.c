/* master_key_request.c -- the KeyRequest of the one-key object RPCs
 * (OBJ_REMOVE, OBJ_PUT_REVOKE, OBJ_GET_REPLICAS, OBJ_EXISTS) decoded by
 * hand.
 *
 * protobuf-c's unpack of this one-string message walks its descriptor and
 * allocates the message and the string from the handler's arena: some 380
 * of the master's 9,300 instructions per durable remove (callgrind,
 * bench/JOURNAL.md "Durable removes: what the master let go of, told as it
 * goes"). Here the fields are scanned with proto/pb_wire.h and the key that
 * wins is copied once, NUL-terminated, into the caller's master_key_req.
 *
 * A body decodes or is refused exactly as key_request__unpack does it
 * (protobuf-c 1.4; tests/unit/test_master_key_request.c holds the two
 * against each other on crafted and random bodies):
 *  - the bytes' rules are pbw_next's: a bad tag or varint, a length past
 *    the end, wire types 3, 4, 6, 7, too many fields: refused;
 *  - field 1 of another wire type than length-delimited is refused; an
 *    unknown field of any wire type is skipped;
 *  - field 1 given twice keeps the last; absent, the key is "";
 *  - the key is not checked for UTF-8 (protobuf-c 1.4 does not), and one
 *    with a NUL byte reads, as a C string, up to that byte. */
#include <stdlib.h>
#include <string.h>

#include "master_internal.h"
#include "pb_wire.h"

int master_key_req_decode(master_key_req *r, const uint8_t *body, size_t len)
{
    const uint8_t *key = NULL;
    size_t key_len = 0;
    pbw_rd rd = pbw_reader(body, len);
    pbw_fld f;
    r->key = "";
    r->heap = NULL;
    while (rd.p < rd.end) {
        if (pbw_next(&rd, &f) < 0) return -1;
        if (f.tag != 1) continue;
        if (f.wt != PBW_LEN) return -1;
        key = pbw_body(&f);
        key_len = pbw_body_len(&f);
    }
    if (key == NULL) return 0;
    char *at = r->room;
    if (key_len >= sizeof(r->room)) {
        if ((r->heap = malloc(key_len + 1)) == NULL) return SMP_ENOMEM;
        at = r->heap;
    }
    if (key_len > 0) memcpy(at, key, key_len);
    at[key_len] = '\0';
    r->key = at;
    return 0;
}

void master_key_req_free(master_key_req *r)
{
    free(r->heap);
    r->heap = NULL;
}
