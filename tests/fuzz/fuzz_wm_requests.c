/* fuzz_wm_requests.c -- fuzz target: the IdentityRequest of the identity
 * reads (GET_METADATA, IS_EXIST, GET_SIZE), which the weight plugin decodes
 * by hand (weight_plugin/wm_request_decode.c).
 *
 * The input is a request body as a client sends it. The hand decoder must
 * accept and refuse exactly what protobuf-c's wmrpc__identity_request__unpack
 * does, and agree with it on every field it gives
 * (../unit/wm_request_same.h): a difference is a bug of the decoder, printed
 * and aborted on so the fuzzer keeps the input. Seeds are requests packed
 * by protobuf-c as libweightclient packs them: plain, with every field,
 * with an identity given twice, with unknown fields. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "weight_rpc.pb-c.h"

#include "../unit/wm_request_same.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[256];
    int decoded = 0;
    if (wmr_same(data, size, &decoded, why, sizeof(why)) < 0) {
        fprintf(stderr, "fuzz_wm_requests: the hand decoder differs from protobuf-c: %s\n", why);
        abort();
    }
    return 0;
}

/* Write req packed, then extra bytes appended (a field protobuf-c never
 * packs twice, an unknown one). 1 or 0. */
static int seed_req(const char *dir, const char *name, const Wmrpc__IdentityRequest *req,
                    const uint8_t *extra, size_t extra_len)
{
    size_t n = protobuf_c_message_get_packed_size(&req->base);
    uint8_t *buf = malloc(n + extra_len + 1);
    if (buf == NULL) abort();
    protobuf_c_message_pack(&req->base, buf);
    if (extra_len > 0) memcpy(buf + n, extra, extra_len);
    int k = fuzz_seed(dir, name, buf, n + extra_len);
    free(buf);
    return k < 0 ? 0 : k;
}

int fuzz_seeds(const char *dir)
{
    Wmrpc__WeightIdentity id = WMRPC__WEIGHT_IDENTITY__INIT;
    Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
    int n = 0;
    id.tenant = (char *)"tenant-a";
    id.namespace_id = (char *)"llm";
    id.resource_id = (char *)"model-0000042";
    id.revision = (char *)"r1";
    id.generation = 1;
    req.identity = &id;
    n += seed_req(dir, "plain", &req, NULL, 0);

    req.expected_metadata_generation = 300;
    req.request_id = (char *)"req-0001";
    n += seed_req(dir, "every-field", &req, NULL, 0);

    /* a second identity lacking the tenant and the generation (merged) */
    static const uint8_t again[] = {0x0a, 0x0b, 0x12, 0x03, 'o', 'p', 's', 0x1a, 0x04,
                                    'm', 'o', 'd', 'l'};
    n += seed_req(dir, "identity-twice", &req, again, sizeof(again));

    /* unknown fields: a varint, a fixed64, a fixed32, bytes */
    static const uint8_t unknown[] = {0x38, 0x01, 0x41, 1, 2, 3, 4, 5, 6, 7, 8,
                                      0x4d, 1, 2, 3, 4, 0x52, 0x02, 'x', 'y'};
    n += seed_req(dir, "unknown-fields", &req, unknown, sizeof(unknown));

    id.tenant = (char *)"";
    id.generation = 0;
    req.expected_metadata_generation = 0;
    req.request_id = (char *)"";
    n += seed_req(dir, "default-tenant", &req, NULL, 0);
    return n;
}
