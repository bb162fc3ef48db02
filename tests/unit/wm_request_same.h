/* wm_request_same.h -- the IdentityRequest decoded by hand
 * (wm_id_request_decode, weight_plugin/wm_request_decode.c) against
 * protobuf-c's wmrpc__identity_request__unpack, for test_wm_request_decode
 * and the fuzz target fuzz_wm_requests.
 *
 * Both decode the same bytes; they must agree on whether the bytes decode
 * and, when they do, on every field as the handlers read it: whether the
 * identity is there, each string as a C string and whether it was given
 * (protobuf-c leaves a string that was not given at protobuf_c_empty_string,
 * the pointer its merge of a repeated identity looks at), the generation,
 * the expected metadata generation and the request id. Header-only (static
 * functions); the unit test glob picks up test_*.c only. */
#ifndef WM_REQUEST_SAME_H
#define WM_REQUEST_SAME_H

#include <stdio.h>
#include <string.h>

#include "weight_rpc.pb-c.h"
#include "wm_mgmt.h"

/* One string of each side: the same text, and given on both or on neither.
 * 0, or -1 with the difference in why. */
static int wmr_same_str(const char *what, const char *ref, const char *got, char *why,
                        size_t cap)
{
    int ref_given = ref != protobuf_c_empty_string, got_given = got != protobuf_c_empty_string;
    if (ref == NULL || got == NULL) {
        snprintf(why, cap, "%s: NULL string (protobuf-c %s, by hand %s)", what,
                 ref == NULL ? "NULL" : "set", got == NULL ? "NULL" : "set");
        return -1;
    }
    if (ref_given != got_given) {
        snprintf(why, cap, "%s: given for %s only", what, ref_given ? "protobuf-c" : "the hand decoder");
        return -1;
    }
    if (strcmp(ref, got) != 0) {
        snprintf(why, cap, "%s: \"%.40s\" by protobuf-c, \"%.40s\" by hand", what, ref, got);
        return -1;
    }
    return 0;
}

/* Decode body[0, len) both ways. 0 when they agree (*decoded: whether the
 * bytes decode), -1 with the difference in why. */
static int wmr_same(const uint8_t *body, size_t len, int *decoded, char *why, size_t cap)
{
    static wm_id_request got; /* static: a wm_id_request holds its strings' room */
    Wmrpc__IdentityRequest *ref = wmrpc__identity_request__unpack(NULL, len, body);
    int rc = wm_id_request_decode(&got, body, len);
    int status = -1;
    why[0] = '\0';
    if (rc == SMP_ENOMEM) {
        snprintf(why, cap, "the hand decoder ran out of memory");
        goto free_ref;
    }
    if ((ref != NULL) != (rc == 0)) {
        snprintf(why, cap, "protobuf-c %s, the hand decoder %s", ref ? "decodes" : "refuses",
                 rc == 0 ? "decodes" : "refuses");
        goto fini;
    }
    *decoded = ref != NULL;
    if (ref == NULL) {
        status = 0;
        goto fini;
    }
    if ((ref->identity != NULL) != (got.m.identity != NULL)) {
        snprintf(why, cap, "identity present for %s only", ref->identity ? "protobuf-c" : "the hand decoder");
        goto fini;
    }
    if (ref->identity != NULL) {
        const Wmrpc__WeightIdentity *a = ref->identity, *b = got.m.identity;
        if (wmr_same_str("tenant", a->tenant, b->tenant, why, cap) < 0 ||
            wmr_same_str("namespace_id", a->namespace_id, b->namespace_id, why, cap) < 0 ||
            wmr_same_str("resource_id", a->resource_id, b->resource_id, why, cap) < 0 ||
            wmr_same_str("revision", a->revision, b->revision, why, cap) < 0)
            goto fini;
        if (a->generation != b->generation) {
            snprintf(why, cap, "generation %llu by protobuf-c, %llu by hand",
                     (unsigned long long)a->generation, (unsigned long long)b->generation);
            goto fini;
        }
    }
    if (ref->expected_metadata_generation != got.m.expected_metadata_generation) {
        snprintf(why, cap, "expected_metadata_generation %llu by protobuf-c, %llu by hand",
                 (unsigned long long)ref->expected_metadata_generation,
                 (unsigned long long)got.m.expected_metadata_generation);
        goto fini;
    }
    if (wmr_same_str("request_id", ref->request_id, got.m.request_id, why, cap) < 0) goto fini;
    status = 0;
fini:
    if (rc == 0) wm_id_request_fini(&got);
free_ref:
    if (ref != NULL) wmrpc__identity_request__free_unpacked(ref, NULL);
    return status;
}

#endif /* WM_REQUEST_SAME_H */
