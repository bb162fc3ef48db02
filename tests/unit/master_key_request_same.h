/* master_key_request_same.h -- the KeyRequest decoded by hand
 * (master_key_req_decode, host_shim/master/master_key_request.c) against
 * protobuf-c's key_request__unpack, for test_master_key_request and the
 * fuzz target fuzz_key_request.
 *
 * Both decode the same bytes; they must agree on whether the bytes decode
 * and, when they do, on the key as the handlers read it (a C string).
 * Header-only (a static function); the unit test glob picks up test_*.c
 * only. */
#ifndef MASTER_KEY_REQUEST_SAME_H
#define MASTER_KEY_REQUEST_SAME_H

#include <stdio.h>
#include <string.h>

#include "host_rpc.pb-c.h"
#include "master_internal.h"

/* Decode body[0..len) both ways. *decoded is 1 when both accepted it, 0
 * when both refused it. 0, or -1 with the difference (and the body's first
 * bytes in hex) in why. */
static int mkr_same(const uint8_t *body, size_t len, int *decoded, char *why, size_t cap)
{
    KeyRequest *want = key_request__unpack(NULL, len, body);
    master_key_req got;
    int rc = master_key_req_decode(&got, body, len), out = 0;
    *decoded = 0;
    if ((want == NULL) != (rc != 0)) {
        char hex[3 * 32 + 1] = "";
        for (size_t i = 0; i < len && i < 32; i++) snprintf(hex + 3 * i, 4, "%02x ", body[i]);
        snprintf(why, cap, "protobuf-c %s, the hand decoder %s (rc %d): %zu bytes: %s",
                 want ? "accepts" : "refuses", rc == 0 ? "accepts" : "refuses", rc, len, hex);
        out = -1;
    } else if (want != NULL && strcmp(want->key, got.key) != 0) {
        snprintf(why, cap, "key \"%.40s\" from protobuf-c, \"%.40s\" by hand", want->key, got.key);
        out = -1;
    } else {
        *decoded = want != NULL;
    }
    if (want != NULL) key_request__free_unpacked(want, NULL);
    if (rc == 0) master_key_req_free(&got);
    return out;
}

#endif /* MASTER_KEY_REQUEST_SAME_H */
