/* node_data_wire.h -- the frames of a node's data protocol (TCP ranges).
 *
 * Shared by the node's data server (host_shim/node_data.c) and the blocking
 * client (client/node_data_client.c). A binary, fixed-layout framing rather
 * than protobuf, because a frame is followed by up to gigabytes of raw bytes
 * that must go from a mapping into a socket (and back) without re-encoding.
 * All integers are big-endian.
 *
 * Request: NDW_REQ_HDR bytes, then S bytes of segment id, then T bytes of
 * ticket (opaque to the client, node_ticket.h):
 *   0  4B  magic "WMD1"
 *   4  u8  op: NDW_OP_READ 1, NDW_OP_WRITE 2, NDW_OP_READ_COLD 3,
 *              NDW_OP_CHECK_COLD 4
 *   5  u8  flags (0)
 *   6  u16 S (1..NDW_SEGMENT_MAX)
 *   8  u64 offset
 *   16 u64 length
 *   24 u32 T (0..NDW_TICKET_MAX)
 *   28 u32 reserved (0)
 * Response: NDW_RESP_HDR bytes, then M bytes of message (UTF-8, no NUL),
 * then the payload:
 *   0  4B  magic "WMR1"
 *   4  i32 status: 0 or a negative SMP_E* code
 *   8  u64 payload bytes that follow the message
 *   16 u16 M (0..NDW_MESSAGE_MAX)
 *   18 u8  kind: NDW_KIND_FINAL 0, NDW_KIND_CONTINUE 1
 *   19 5B  reserved (0)
 *
 * READ: the server answers FINAL with status 0 and `length` payload bytes,
 * or FINAL with an error and none. WRITE is two-phase so that a refused write
 * costs no payload transfer and the stream stays in sync: the server checks
 * the ticket and the range and answers CONTINUE (status 0) or FINAL with an
 * error; after CONTINUE the client sends exactly `length` bytes and the
 * server answers FINAL once they are in the segment. One request at a time
 * per connection. A request whose header does not parse gets a FINAL
 * SMP_EPROTO and the connection is closed.
 *
 * READ_COLD (added after READ and WRITE; a node that predates it does not
 * parse the op and answers FINAL SMP_EPROTO, closing the connection): the
 * "segment id" bytes carry the bare name of a cold file ("<64 hex>.cold",
 * no directory), offset and length address the object's data (the file's
 * header is not counted). Answered like READ: FINAL status 0 and `length`
 * bytes, or FINAL with an error and none. The node checks the file's
 * header and size but does not hash the range: the reader verifies the
 * bytes (the object's SHA-256). If the file fails mid-transfer the node
 * closes the connection, so a short payload is never taken for a whole one.
 *
 * CHECK_COLD (added after READ_COLD; an older node answers FINAL SMP_EPROTO
 * and closes, as above): a client whose READ_COLD did not verify asks the
 * node to hash the whole file against its header. Named and ticketed as a
 * READ_COLD (the ticket is checked for the range the request names, e.g.
 * [0, +0)); no payload either way. FINAL status 0: the file is intact;
 * SMP_EPROTO: it is corrupt, and the node reports it to the master with its
 * next poll; SMP_EBUSY: the node is checking as many files as it allows, so
 * try again; refusals as for READ_COLD otherwise. The message says which. */
#ifndef WM_NODE_DATA_WIRE_H
#define WM_NODE_DATA_WIRE_H

#include <stdint.h>
#include <string.h>

#define NDW_REQ_MAGIC "WMD1"
#define NDW_RESP_MAGIC "WMR1"
#define NDW_REQ_HDR 32
#define NDW_RESP_HDR 24
#define NDW_OP_READ 1
#define NDW_OP_WRITE 2
#define NDW_OP_READ_COLD 3
#define NDW_OP_CHECK_COLD 4
#define NDW_KIND_FINAL 0
#define NDW_KIND_CONTINUE 1
#define NDW_SEGMENT_MAX 256
#define NDW_TICKET_MAX 2048   /* >= TICKET_MAX_BYTES of node_ticket.h */
#define NDW_MESSAGE_MAX 1024

typedef struct ndw_request {
    uint8_t op;
    uint16_t seg_len;
    uint64_t offset;
    uint64_t length;
    uint32_t ticket_len;
} ndw_request;

typedef struct ndw_response {
    int32_t status;
    uint64_t payload;
    uint16_t msg_len;
    uint8_t kind;
} ndw_response;

static inline void ndw_put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline void ndw_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--) { p[i] = (uint8_t)v; v >>= 8; }
}
static inline void ndw_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) { p[i] = (uint8_t)v; v >>= 8; }
}
static inline uint16_t ndw_get_u16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline uint32_t ndw_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t ndw_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

static inline void ndw_encode_request(uint8_t h[NDW_REQ_HDR], const ndw_request *r)
{
    memset(h, 0, NDW_REQ_HDR);
    memcpy(h, NDW_REQ_MAGIC, 4);
    h[4] = r->op;
    ndw_put_u16(h + 6, r->seg_len);
    ndw_put_u64(h + 8, r->offset);
    ndw_put_u64(h + 16, r->length);
    ndw_put_u32(h + 24, r->ticket_len);
}

/* 0 when h is a well-formed request header (limits checked), else -1. */
static inline int ndw_decode_request(const uint8_t h[NDW_REQ_HDR], ndw_request *r)
{
    if (memcmp(h, NDW_REQ_MAGIC, 4) != 0 || h[5] != 0 || ndw_get_u32(h + 28) != 0)
        return -1;
    r->op = h[4];
    r->seg_len = ndw_get_u16(h + 6);
    r->offset = ndw_get_u64(h + 8);
    r->length = ndw_get_u64(h + 16);
    r->ticket_len = ndw_get_u32(h + 24);
    if ((r->op != NDW_OP_READ && r->op != NDW_OP_WRITE && r->op != NDW_OP_READ_COLD &&
         r->op != NDW_OP_CHECK_COLD) ||
        r->seg_len == 0 ||
        r->seg_len > NDW_SEGMENT_MAX || r->ticket_len > NDW_TICKET_MAX)
        return -1;
    return 0;
}

static inline void ndw_encode_response(uint8_t h[NDW_RESP_HDR], const ndw_response *r)
{
    memset(h, 0, NDW_RESP_HDR);
    memcpy(h, NDW_RESP_MAGIC, 4);
    ndw_put_u32(h + 4, (uint32_t)r->status);
    ndw_put_u64(h + 8, r->payload);
    ndw_put_u16(h + 16, r->msg_len);
    h[18] = r->kind;
}

/* 0 when h is a well-formed response header, else -1. */
static inline int ndw_decode_response(const uint8_t h[NDW_RESP_HDR], ndw_response *r)
{
    if (memcmp(h, NDW_RESP_MAGIC, 4) != 0)
        return -1;
    r->status = (int32_t)ndw_get_u32(h + 4);
    r->payload = ndw_get_u64(h + 8);
    r->msg_len = ndw_get_u16(h + 16);
    r->kind = h[18];
    if (r->status > 0 || r->msg_len > NDW_MESSAGE_MAX ||
        (r->kind != NDW_KIND_FINAL && r->kind != NDW_KIND_CONTINUE))
        return -1;
    return 0;
}

#endif /* WM_NODE_DATA_WIRE_H */
