/* rpc_envelope.h -- the RPC envelope (RpcRequest, RpcResponse of
 * proto/rpc.proto) read and written straight on the protobuf wire format,
 * by the master (rpc_server.c) and by the client transport (rpc_client.c).
 *
 * Every request passes through the envelope, and its four fields cost
 * protobuf-c's generic unpack about 950 instructions (a scan of the fields,
 * an allocation of the message and a copy of the body) and a reply's
 * get_packed_size and pack about 480: a fifth of the master's own work per
 * durable remove, plus three allocations per response on the client. The
 * envelope barely changes shape (the services' bodies are the messages that
 * evolve, and they stay with protobuf-c; the envelope only gained the
 * response's leader, field 5, for HA, its retry_after_ms, field 6, for
 * auth.limits, and stopping, field 7, for a master alone's drain), so it is
 * read and written here: a
 * decoded body, error or leader points into the frame, nothing is
 * allocated, and a message is written in one pass.
 *
 * The decoders accept exactly what protobuf-c's unpack accepts and give the
 * same values (fields in any order, the last of a repeated field wins,
 * unknown fields skipped, over-long varints truncated as protobuf-c does,
 * strings not checked for UTF-8); the encoders write the bytes protobuf-c's
 * pack writes. tests/unit/test_rpc_envelope.c holds the two against each
 * other on random, mutated and noise frames. */
#ifndef WM_RPC_ENVELOPE_H
#define WM_RPC_ENVELOPE_H

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

/* A decoded RpcResponse; error, body and leader point into the frame.
 * error and leader are not NUL-terminated (error_len / leader_len bytes;
 * protobuf-c's C string would end at the first NUL inside them). leader is
 * what a standby sends with SMP_ENOTLEADER: the leader's RPC endpoint. */
typedef struct rpc_env_response {
    uint64_t request_id;
    int32_t status;
    const char *error; /* NULL when error_len is 0 */
    size_t error_len;
    const uint8_t *body; /* NULL when body_len is 0 */
    size_t body_len;
    const char *leader; /* NULL when leader_len is 0 */
    size_t leader_len;
    uint32_t retry_after_ms; /* a refusal by auth.limits: when to send it again (0: none) */
    int stopping;            /* a refusal by a master alone that is stopping (field 7) */
} rpc_env_response;

/* Decode frame[0, len) into *out. SMP_OK, or SMP_EPROTO when protobuf-c
 * would refuse it (a truncated field, a varint of more than ten bytes, a
 * field number of 0, a group or reserved wire type, a known field with the
 * wrong wire type); *out is then unspecified. */
int rpc_env_decode_request(const uint8_t *frame, size_t len, rpc_env_request *out);
int rpc_env_decode_response(const uint8_t *frame, size_t len, rpc_env_response *out);

/* The bytes the matching encoder writes for these fields (no leader). */
size_t rpc_env_request_size(uint64_t request_id, uint32_t service, uint32_t method,
                            size_t body_len);
size_t rpc_env_response_size(uint64_t request_id, int32_t status, size_t error_len,
                             size_t body_len);

/* Write the message to out, which has room for the size above; fields at
 * their default (0, empty) are left out, as protobuf-c does for proto3.
 * Returns the bytes written. */
size_t rpc_env_encode_request(uint8_t *out,
                              uint64_t request_id,
                              uint32_t service,
                              uint32_t method,
                              const uint8_t *body,
                              size_t body_len);
size_t rpc_env_encode_response(uint8_t *out,
                               uint64_t request_id,
                               int32_t status,
                               const char *error,
                               size_t error_len,
                               const uint8_t *body,
                               size_t body_len);

/* A response that also names the leader (field 5; a standby's answer with
 * SMP_ENOTLEADER): the same bytes as above, then the leader when
 * leader_len is not 0, as protobuf-c writes it. */
size_t rpc_env_response_size_leader(uint64_t request_id, int32_t status, size_t error_len,
                                    size_t body_len, size_t leader_len);
size_t rpc_env_encode_response_leader(uint8_t *out,
                                      uint64_t request_id,
                                      int32_t status,
                                      const char *error,
                                      size_t error_len,
                                      const uint8_t *body,
                                      size_t body_len,
                                      const char *leader,
                                      size_t leader_len);

/* A refusal without a body: the bytes of the response above, then
 * retry_after_ms (field 6: with SMP_EAGAIN from auth.limits, when the same
 * request may pass) and stopping (field 7: with SMP_EAGAIN from a master
 * alone that is stopping) when they are not 0, as protobuf-c writes them. */
size_t rpc_env_response_size_refusal(uint64_t request_id, int32_t status, size_t error_len,
                                     uint32_t retry_after_ms, int stopping);
size_t rpc_env_encode_response_refusal(uint8_t *out,
                                       uint64_t request_id,
                                       int32_t status,
                                       const char *error,
                                       size_t error_len,
                                       uint32_t retry_after_ms,
                                       int stopping);
#endif /* WM_RPC_ENVELOPE_H */
