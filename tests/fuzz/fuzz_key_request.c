/* fuzz_key_request.c -- fuzz target: the KeyRequest of the one-key object
 * RPCs (OBJ_REMOVE, OBJ_PUT_REVOKE, OBJ_GET_REPLICAS, OBJ_EXISTS), which
 * the master decodes by hand (host_shim/master/master_key_request.c).
 *
 * The input is a request body as a client sends it. The hand decoder must
 * accept and refuse exactly what protobuf-c's key_request__unpack does, and
 * give the same key (../unit/master_key_request_same.h): a difference is a
 * bug of the decoder, printed and aborted on so the fuzzer keeps the
 * input. Seeds are requests packed by protobuf-c as the client library
 * packs them: a key, the empty key, a key past the decoder's inline room,
 * a key given twice, unknown fields around it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#include "../unit/master_key_request_same.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[256];
    int decoded = 0;
    if (mkr_same(data, size, &decoded, why, sizeof(why)) < 0) {
        fprintf(stderr, "fuzz_key_request: the hand decoder differs from protobuf-c: %s\n", why);
        abort();
    }
    return 0;
}

/* Write a KeyRequest of key packed, then extra bytes appended. 1 or 0. */
static int seed_key(const char *dir, const char *name, const char *key, const uint8_t *extra,
                    size_t extra_len)
{
    KeyRequest req = KEY_REQUEST__INIT;
    req.key = (char *)key;
    size_t n = key_request__get_packed_size(&req);
    uint8_t *buf = malloc(n + extra_len + 1);
    if (buf == NULL) abort();
    key_request__pack(&req, buf);
    if (extra_len > 0) memcpy(buf + n, extra, extra_len);
    int k = fuzz_seed(dir, name, buf, n + extra_len);
    free(buf);
    return k < 0 ? 0 : k;
}

int fuzz_seeds(const char *dir)
{
    int n = 0;
    n += seed_key(dir, "plain", "kv/demo/hello", NULL, 0);
    n += seed_key(dir, "empty", "", NULL, 0);

    char long_key[600];
    for (size_t i = 0; i + 1 < sizeof(long_key); i++) long_key[i] = (char)('a' + i % 26);
    long_key[sizeof(long_key) - 1] = '\0';
    n += seed_key(dir, "long-key", long_key, NULL, 0);

    static const uint8_t again[] = {0x0a, 0x03, 'k', 'e', 'y'};
    n += seed_key(dir, "key-twice", "first", again, sizeof(again));

    /* unknown fields: a varint, a fixed64, a fixed32, bytes */
    static const uint8_t unknown[] = {0x10, 0x01, 0x19, 1, 2, 3, 4, 5, 6, 7, 8,
                                      0x25, 1, 2, 3, 4, 0x22, 0x02, 'x', 'y'};
    n += seed_key(dir, "unknown-fields", "wm/obj/0", unknown, sizeof(unknown));
    return n;
}
