/* rpc_envelope.h -- the RPC envelope (RpcRequest in, RpcResponse out, see
 * proto/rpc.proto) read and written straight on the protobuf wire format.
 *
 * Every request the master serves passes through the envelope, and its four
 * fields cost protobuf-c's generic unpack about 950 instructions (a scan of
 * the fields, an allocation of the message and a copy of the body) and the
 * reply's get_packed_size and pack about 480: a fifth of the master's own
 * work per durable remove. The envelope never changes shape (the services'
 * bodies are the messages that evolve, and they stay with protobuf-c), so it
 * is read and written here: the decoded body points into the frame, nothing
 * is allocated, and a reply is written in one pass.
 *
 * The decoder accepts exactly what protobuf-c's rpc_request__unpack accepts
 * and gives the same values (fields in any order, the last of a repeated
 * scalar wins, unknown fields skipped, over-long varints truncated as
 * protobuf-c does); tests/unit/test_rpc_envelope.c checks the two against
 * each other on random and mutated frames. The encoder writes the bytes
 * rpc_response__pack writes. */
#ifndef HOST_RPC_ENVELOPE_H
#define HOST_RPC_ENVELOPE_H

#include <stddef.h>
#include <stdint.h>

/* A decoded RpcRequest; body points into the frame it was decoded from. */
typedef struct rpc_env_request {
    uint64_t request_id;
    uint32_t service;
    uint32_t method;
    const uint8_t *body; /* NULL when body_len is 0 */
    size_t body_len;
} rpc_env_request;

/* Decode frame[0, len) as an RpcRequest into *out. SMP_OK, or SMP_EPROTO
 * when protobuf-c would refuse it (a truncated field, a varint of more than
 * ten bytes, a tag of 0, a group or reserved wire type, a known field with
 * the wrong wire type); *out is then unspecified. */
int rpc_env_decode_request(const uint8_t *frame, size_t len, rpc_env_request *out);

/* The bytes rpc_env_encode_response writes for these fields. */
size_t rpc_env_response_size(uint64_t request_id, int32_t status, size_t error_len,
                             size_t body_len);

/* Write the RpcResponse {request_id, status, error[0, error_len),
 * body[0, body_len)} to out, which has room for rpc_env_response_size()
 * bytes; fields at their default (0, empty) are left out, as protobuf-c
 * does for proto3. Returns the bytes written. */
size_t rpc_env_encode_response(uint8_t *out,
                               uint64_t request_id,
                               int32_t status,
                               const char *error,
                               size_t error_len,
                               const uint8_t *body,
                               size_t body_len);

#endif /* HOST_RPC_ENVELOPE_H */
