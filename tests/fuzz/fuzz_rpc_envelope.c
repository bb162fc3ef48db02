/* fuzz_rpc_envelope.c -- fuzz target: the RPC envelope decoders
 * (client/rpc_envelope.h), which read every request the master gets and
 * every response a client gets, against protobuf-c's own unpack.
 *
 * The first byte says which message the rest is (even: RpcRequest, odd:
 * RpcResponse). The promise checked is the one the header makes: the
 * decoder accepts exactly what protobuf-c accepts, with the same values, and
 * what it accepts encodes again to bytes that decode to the same values. A
 * broken promise aborts so the fuzzer keeps the input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "rpc.pb-c.h"
#include "rpc_envelope.h"

static void broken(const char *what)
{
    fprintf(stderr, "fuzz_rpc_envelope: %s\n", what);
    abort();
}

static int same_bytes(const void *a, size_t alen, const void *b, size_t blen)
{
    return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

static void check_request(const uint8_t *data, size_t size)
{
    rpc_env_request mine, again;
    int rc = rpc_env_decode_request(data, size, &mine);
    RpcRequest *ref = rpc_request__unpack(NULL, size, data);
    if ((rc == 0) != (ref != NULL)) broken("request: verdict differs from protobuf-c");
    if (ref == NULL) return;
    if (mine.request_id != ref->request_id || mine.service != ref->service ||
        mine.method != ref->method ||
        !same_bytes(mine.body, mine.body_len, ref->body.data, ref->body.len))
        broken("request: values differ from protobuf-c");
    rpc_request__free_unpacked(ref, NULL);

    size_t n = rpc_env_request_size(mine.request_id, mine.service, mine.method, mine.body_len);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL) broken("out of memory");
    if (rpc_env_encode_request(buf, mine.request_id, mine.service, mine.method, mine.body,
                               mine.body_len) != n)
        broken("request: encoded size differs from the size announced");
    if (rpc_env_decode_request(buf, n, &again) != 0 || again.request_id != mine.request_id ||
        again.service != mine.service || again.method != mine.method ||
        !same_bytes(again.body, again.body_len, mine.body, mine.body_len))
        broken("request: re-encoding does not decode to the same values");
    free(buf);
}

static void check_response(const uint8_t *data, size_t size)
{
    rpc_env_response mine, again;
    int rc = rpc_env_decode_response(data, size, &mine);
    RpcResponse *ref = rpc_response__unpack(NULL, size, data);
    if ((rc == 0) != (ref != NULL)) broken("response: verdict differs from protobuf-c");
    if (ref == NULL) return;
    size_t elen = mine.error ? strnlen(mine.error, mine.error_len) : 0;
    size_t llen = mine.leader ? strnlen(mine.leader, mine.leader_len) : 0;
    if (mine.request_id != ref->request_id || mine.status != ref->status ||
        mine.retry_after_ms != ref->retry_after_ms || mine.stopping != (ref->stopping != 0) ||
        !same_bytes(mine.error, elen, ref->error, strlen(ref->error)) ||
        !same_bytes(mine.leader, llen, ref->leader, strlen(ref->leader)) ||
        !same_bytes(mine.body, mine.body_len, ref->body.data, ref->body.len))
        broken("response: values differ from protobuf-c");
    rpc_response__free_unpacked(ref, NULL);

    size_t n = rpc_env_response_size_leader(mine.request_id, mine.status, mine.error_len,
                                            mine.body_len, mine.leader_len);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL) broken("out of memory");
    if (rpc_env_encode_response_leader(buf, mine.request_id, mine.status, mine.error,
                                       mine.error_len, mine.body, mine.body_len, mine.leader,
                                       mine.leader_len) != n)
        broken("response: encoded size differs from the size announced");
    if (rpc_env_decode_response(buf, n, &again) != 0 || again.request_id != mine.request_id ||
        again.status != mine.status ||
        !same_bytes(again.error, again.error_len, mine.error, mine.error_len) ||
        !same_bytes(again.leader, again.leader_len, mine.leader, mine.leader_len) ||
        !same_bytes(again.body, again.body_len, mine.body, mine.body_len))
        broken("response: re-encoding does not decode to the same values");
    free(buf);

    /* a refusal with its retry_after_ms and stopping (no body, no leader) */
    n = rpc_env_response_size_refusal(mine.request_id, mine.status, mine.error_len,
                                      mine.retry_after_ms, mine.stopping);
    if ((buf = malloc(n ? n : 1)) == NULL) broken("out of memory");
    if (rpc_env_encode_response_refusal(buf, mine.request_id, mine.status, mine.error,
                                        mine.error_len, mine.retry_after_ms, mine.stopping) != n)
        broken("refusal: encoded size differs from the size announced");
    if (rpc_env_decode_response(buf, n, &again) != 0 || again.request_id != mine.request_id ||
        again.status != mine.status || again.retry_after_ms != mine.retry_after_ms ||
        again.stopping != mine.stopping ||
        !same_bytes(again.error, again.error_len, mine.error, mine.error_len) ||
        again.body_len != 0 || again.leader_len != 0)
        broken("refusal: re-encoding does not decode to the same values");
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    if (data[0] % 2 == 0) check_request(data + 1, size - 1);
    else check_response(data + 1, size - 1);
    return 0;
}

int fuzz_seeds(const char *dir)
{
    uint8_t buf[256];
    const uint8_t body[] = {0x0a, 0x03, 'k', '/', '1'};
    int n = 0;
    buf[0] = 0;
    size_t len = rpc_env_encode_request(buf + 1, 42, 1, 7, body, sizeof(body));
    if (fuzz_seed(dir, "request", buf, 1 + len) < 0) return -1;
    n++;
    buf[0] = 1;
    len = rpc_env_encode_response(buf + 1, 42, -6, "busy", 4, body, sizeof(body));
    if (fuzz_seed(dir, "response", buf, 1 + len) < 0) return -1;
    n++;
    len = rpc_env_encode_response(buf + 1, 0, -22, "frame too large", 15, NULL, 0);
    if (fuzz_seed(dir, "refusal", buf, 1 + len) < 0) return -1;
    n++;
    len = rpc_env_encode_response_leader(buf + 1, 42, -16, "not the leader", 14, NULL, 0,
                                         "10.0.0.2:7600", 13);
    if (fuzz_seed(dir, "redirect", buf, 1 + len) < 0) return -1;
    return n + 1;
}
