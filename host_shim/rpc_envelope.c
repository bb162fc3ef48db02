/* rpc_envelope.c -- the RPC envelope on the protobuf wire format (see
 * rpc_envelope.h for why it is not left to protobuf-c). */
#include "rpc_envelope.h"

#include <string.h>

#include "store_plugin.h"

/* Field numbers of proto/rpc.proto. */
enum {
    ENV_REQUEST_ID = 1,
    ENV_SERVICE = 2,    /* request */
    ENV_METHOD = 3,     /* request */
    ENV_STATUS = 2,     /* response */
    ENV_ERROR = 3,      /* response */
    ENV_BODY = 4
};

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

/* Read a varint of at most max bytes at *p (before end) into *v, keeping
 * the low 64 bits as protobuf-c does. 0, or -1 when it runs past end or
 * past max bytes. */
static int get_varint(const uint8_t **p, const uint8_t *end, unsigned max, uint64_t *v)
{
    const uint8_t *q = *p;
    uint64_t x = 0;
    for (unsigned i = 0, shift = 0; i < max && q < end; i++, shift += 7) {
        uint8_t b = *q++;
        if (shift < 64) x |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *p = q;
            *v = x;
            return 0;
        }
    }
    return -1;
}

int rpc_env_decode_request(const uint8_t *frame, size_t len, rpc_env_request *out)
{
    const uint8_t *p = frame, *end = frame + len;
    memset(out, 0, sizeof(*out));
    while (p < end) {
        uint64_t key, v;
        if ((*p & 0xf8) == 0) return SMP_EPROTO; /* field number 0 */
        if (get_varint(&p, end, 5, &key) < 0) return SMP_EPROTO;
        uint32_t field = (uint32_t)(key >> 3);
        switch (key & 7) {
        case WIRE_VARINT:
            if (get_varint(&p, end, 10, &v) < 0) return SMP_EPROTO;
            if (field == ENV_REQUEST_ID) out->request_id = v;
            else if (field == ENV_SERVICE) out->service = (uint32_t)v;
            else if (field == ENV_METHOD) out->method = (uint32_t)v;
            else if (field == ENV_BODY) return SMP_EPROTO; /* bytes as a varint */
            break;
        case WIRE_LEN:
            if (get_varint(&p, end, 5, &v) < 0 || v > (uint64_t)(end - p)) return SMP_EPROTO;
            if (field == ENV_BODY) {
                out->body = v ? p : NULL;
                out->body_len = (size_t)v;
            } else if (field == ENV_REQUEST_ID || field == ENV_SERVICE || field == ENV_METHOD) {
                return SMP_EPROTO; /* a number as bytes */
            }
            p += v;
            break;
        case WIRE_I64:
        case WIRE_I32: {
            size_t n = (key & 7) == WIRE_I64 ? 8 : 4;
            if (field >= ENV_REQUEST_ID && field <= ENV_BODY) return SMP_EPROTO;
            if (n > (size_t)(end - p)) return SMP_EPROTO;
            p += n;
            break;
        }
        default: /* groups and the reserved wire types */
            return SMP_EPROTO;
        }
    }
    return SMP_OK;
}

/* Bytes of v as a varint. */
static size_t varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static uint32_t zigzag32(int32_t v)
{
    return ((uint32_t)v << 1) ^ (uint32_t)(v >> 31);
}

size_t rpc_env_response_size(uint64_t request_id, int32_t status, size_t error_len,
                             size_t body_len)
{
    size_t n = 0;
    if (request_id) n += 1 + varint_size(request_id);
    if (status) n += 1 + varint_size(zigzag32(status));
    if (error_len) n += 1 + varint_size(error_len) + error_len;
    if (body_len) n += 1 + varint_size(body_len) + body_len;
    return n;
}

/* Write a length-delimited field: key, length, bytes. */
static uint8_t *put_bytes(uint8_t *p, unsigned field, const void *data, size_t len)
{
    *p++ = (uint8_t)(field << 3 | WIRE_LEN);
    p = put_varint(p, len);
    memcpy(p, data, len);
    return p + len;
}

size_t rpc_env_encode_response(uint8_t *out,
                               uint64_t request_id,
                               int32_t status,
                               const char *error,
                               size_t error_len,
                               const uint8_t *body,
                               size_t body_len)
{
    uint8_t *p = out;
    if (request_id) {
        *p++ = ENV_REQUEST_ID << 3 | WIRE_VARINT;
        p = put_varint(p, request_id);
    }
    if (status) {
        *p++ = ENV_STATUS << 3 | WIRE_VARINT;
        p = put_varint(p, zigzag32(status));
    }
    if (error_len) p = put_bytes(p, ENV_ERROR, error, error_len);
    if (body_len) p = put_bytes(p, ENV_BODY, body, body_len);
    return (size_t)(p - out);
}
