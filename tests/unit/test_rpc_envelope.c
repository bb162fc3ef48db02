/* test_rpc_envelope.c -- the hand-written envelope codec against protobuf-c.
 *
 * Pins: every frame protobuf-c's unpack accepts, the envelope decoders
 * accept with the same values, and every frame it refuses they refuse
 * (random requests and responses, the same with unknown, repeated and
 * mistyped fields added, then cut, flipped and spliced, and plain noise);
 * the named malformations each get SMP_EPROTO; and both messages are written
 * byte for byte as protobuf-c's pack writes them, with their size known
 * beforehand -- a response's leader (field 5, a standby's redirect)
 * included. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rpc.pb-c.h"
#include "rpc_envelope.h"
#include "store_plugin.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A number of any width: zero, small, or up to all 64 bits. */
static uint64_t some_number(void)
{
    switch (next() % 4) {
    case 0: return 0;
    case 1: return next() % 200;
    case 2: return next() & 0xffffffffu;
    default: return next();
    }
}

/* Decode data both ways as a request and require the same verdict and
 * values. */
static void agree(const uint8_t *data, size_t len)
{
    rpc_env_request mine;
    int rc = rpc_env_decode_request(data, len, &mine);
    RpcRequest *ref = rpc_request__unpack(NULL, len, data);
    if (ref == NULL) {
        assert_int_equal(rc, SMP_EPROTO);
        return;
    }
    assert_int_equal(rc, SMP_OK);
    assert_true(mine.request_id == ref->request_id);
    assert_int_equal(mine.service, ref->service);
    assert_int_equal(mine.method, ref->method);
    assert_int_equal(mine.body_len, ref->body.len);
    if (ref->body.len > 0) assert_memory_equal(mine.body, ref->body.data, ref->body.len);
    else assert_null(mine.body);
    rpc_request__free_unpacked(ref, NULL);
}

/* A decoded string field against protobuf-c's C string, which ends at its
 * first NUL; the decoded one carries its length. */
static void agree_string(const char *mine, size_t mine_len, const char *ref)
{
    size_t len = strlen(ref);
    assert_true(len <= mine_len);
    if (mine_len > 0) {
        assert_memory_equal(mine, ref, len);
        if (len < mine_len) assert_int_equal(mine[len], '\0');
    } else {
        assert_null(mine);
    }
}

/* The same for a response. */
static void agree_response(const uint8_t *data, size_t len)
{
    rpc_env_response mine;
    int rc = rpc_env_decode_response(data, len, &mine);
    RpcResponse *ref = rpc_response__unpack(NULL, len, data);
    if (ref == NULL) {
        assert_int_equal(rc, SMP_EPROTO);
        return;
    }
    assert_int_equal(rc, SMP_OK);
    assert_true(mine.request_id == ref->request_id);
    assert_int_equal(mine.status, ref->status);
    agree_string(mine.error, mine.error_len, ref->error);
    agree_string(mine.leader, mine.leader_len, ref->leader);
    assert_int_equal(mine.retry_after_ms, ref->retry_after_ms);
    assert_int_equal(mine.stopping, ref->stopping != 0);
    assert_int_equal(mine.body_len, ref->body.len);
    if (ref->body.len > 0) assert_memory_equal(mine.body, ref->body.data, ref->body.len);
    else assert_null(mine.body);
    rpc_response__free_unpacked(ref, NULL);
}

typedef struct frame {
    uint8_t b[2048];
    size_t n;
} frame;

static void put_byte(frame *f, uint8_t v)
{
    if (f->n < sizeof(f->b)) f->b[f->n++] = v;
}

static void put_varint(frame *f, uint64_t v)
{
    while (v >= 0x80) {
        put_byte(f, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    put_byte(f, (uint8_t)v);
}

/* A request packed by protobuf-c. */
static void packed_request(frame *f)
{
    uint8_t body[300];
    RpcRequest req = RPC_REQUEST__INIT;
    req.request_id = some_number();
    req.service = (uint32_t)some_number();
    req.method = (uint32_t)some_number();
    req.body.len = next() % 3 == 0 ? 0 : next() % sizeof(body);
    for (size_t i = 0; i < req.body.len; i++) body[i] = (uint8_t)next();
    req.body.data = body;
    f->n = rpc_request__pack(&req, f->b);
}

/* A response packed by protobuf-c; a third of them name a leader, a
 * quarter say when to retry. */
static void packed_response(frame *f)
{
    uint8_t body[300];
    char error[64], leader[64];
    RpcResponse resp = RPC_RESPONSE__INIT;
    resp.request_id = some_number();
    resp.status = (int32_t)some_number();
    size_t elen = next() % 2 ? 0 : next() % sizeof(error);
    for (size_t i = 0; i < elen; i++) error[i] = (char)(1 + next() % 255);
    error[elen] = '\0';
    resp.error = error;
    resp.body.len = next() % 3 == 0 ? 0 : next() % sizeof(body);
    for (size_t i = 0; i < resp.body.len; i++) body[i] = (uint8_t)next();
    resp.body.data = body;
    size_t llen = next() % 3 ? 0 : next() % sizeof(leader);
    for (size_t i = 0; i < llen; i++) leader[i] = (char)(1 + next() % 255);
    leader[llen] = '\0';
    resp.leader = leader;
    resp.retry_after_ms = next() % 4 ? 0 : (uint32_t)some_number();
    resp.stopping = next() % 4 == 0;
    f->n = rpc_response__pack(&resp, f->b);
}

/* Append one field of any number (known or not) and any wire type,
 * well-formed or not: unknown fields, repeats, wrong types, groups,
 * padded varints and over-long lengths. */
static void add_field(frame *f)
{
    static const uint32_t fields[] = {1, 2, 3, 4, 5, 6, 7, 15, 16, 2047, 536870911};
    uint32_t field = next() % 8 == 0 ? (uint32_t)next() : fields[next() % 11];
    unsigned wire = next() % 5 == 0 ? (unsigned)(next() % 8) : (unsigned)(next() % 3 == 0 ? 2 : 0);
    put_varint(f, (uint64_t)field << 3 | wire);
    switch (wire) {
    case 0:
        if (next() % 6 == 0) { /* over-long: continuation bytes, maybe too many */
            size_t pad = next() % 12;
            for (size_t i = 0; i < pad; i++) put_byte(f, 0x80 | (uint8_t)next());
            put_byte(f, (uint8_t)(next() & 0x7f));
        } else {
            put_varint(f, some_number());
        }
        break;
    case 1:
    case 5:
        for (unsigned i = 0; i < (wire == 1 ? 8u : 4u); i++) put_byte(f, (uint8_t)next());
        break;
    case 2: {
        size_t n = next() % 40;
        put_varint(f, next() % 10 == 0 ? n + next() % 5 : n); /* sometimes too long */
        for (size_t i = 0; i < n; i++) put_byte(f, (uint8_t)next());
        break;
    }
    default:
        break;
    }
}

static void mutate(frame *f)
{
    switch (next() % 4) {
    case 0: /* cut */
        f->n = f->n ? next() % f->n : 0;
        break;
    case 1: /* flip a byte */
        if (f->n) f->b[next() % f->n] ^= (uint8_t)(1u << (next() % 8));
        break;
    case 2: /* set a byte */
        if (f->n) f->b[next() % f->n] = (uint8_t)next();
        break;
    default: /* splice in noise */
        if (f->n + 8 < sizeof(f->b)) {
            size_t at = f->n ? next() % f->n : 0, k = 1 + next() % 6;
            memmove(f->b + at + k, f->b + at, f->n - at);
            for (size_t i = 0; i < k; i++) f->b[at + i] = (uint8_t)next();
            f->n += k;
        }
        break;
    }
}

static void test_valid_messages_decode_as_protobuf_c_decodes_them(void **state)
{
    (void)state;
    frame f;
    for (int i = 0; i < 20000; i++) {
        packed_request(&f);
        agree(f.b, f.n);
        rpc_env_request r;
        assert_int_equal(rpc_env_decode_request(f.b, f.n, &r), SMP_OK);
    }
    agree(NULL, 0); /* the empty frame: every field at its default */
    for (int i = 0; i < 20000; i++) {
        packed_response(&f);
        agree_response(f.b, f.n);
    }
    agree_response(NULL, 0);
}

static void test_odd_and_broken_messages_get_the_same_verdict(void **state)
{
    (void)state;
    frame f;
    int refused = 0, accepted = 0;
    for (int i = 0; i < 100000; i++) {
        packed_request(&f);
        int extra = (int)(next() % 4);
        for (int k = 0; k < extra; k++) add_field(&f);
        int cuts = (int)(next() % 3);
        for (int k = 0; k < cuts; k++) mutate(&f);
        agree(f.b, f.n);
        rpc_env_request r;
        if (rpc_env_decode_request(f.b, f.n, &r) == SMP_OK) accepted++;
        else refused++;
    }
    for (int i = 0; i < 100000; i++) { /* the same for responses */
        packed_response(&f);
        int extra = (int)(next() % 4);
        for (int k = 0; k < extra; k++) add_field(&f);
        int cuts = (int)(next() % 3);
        for (int k = 0; k < cuts; k++) mutate(&f);
        agree_response(f.b, f.n);
    }
    for (int i = 0; i < 20000; i++) { /* noise */
        f.n = next() % 24;
        for (size_t k = 0; k < f.n; k++) f.b[k] = (uint8_t)next();
        agree(f.b, f.n);
        agree_response(f.b, f.n);
    }
    /* both sides of the verdict were exercised */
    assert_true(refused > 1000);
    assert_true(accepted > 1000);
}

/* frame decodes, as protobuf-c decodes it, with stopping as want. */
static void stopping_reads(const uint8_t *frame, size_t len, int want)
{
    rpc_env_response resp;
    assert_int_equal(rpc_env_decode_response(frame, len, &resp), SMP_OK);
    assert_int_equal(resp.stopping, want);
    agree_response(frame, len);
}

static void test_named_malformations_are_refused(void **state)
{
    (void)state;
    rpc_env_request r;
    const uint8_t cut_body[] = {0x08, 0x07, 0x22, 0x05, 'a', 'b'};
    const uint8_t cut_varint[] = {0x08, 0xff, 0xff};
    const uint8_t eleven_byte_varint[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                          0xff, 0xff, 0xff, 0xff, 0x01};
    const uint8_t field_zero[] = {0x00, 0x01};
    const uint8_t group[] = {0x0b, 0x0c};              /* field 1, start group */
    const uint8_t reserved_wire[] = {0x0e, 0x01};       /* field 1, wire type 6 */
    const uint8_t id_as_bytes[] = {0x0a, 0x01, 0x01};   /* field 1 length-delimited */
    const uint8_t body_as_number[] = {0x20, 0x05};      /* field 4 varint */
    const uint8_t cut_fixed64[] = {0x29, 1, 2, 3};      /* field 5, 64-bit, 3 bytes */
    const uint8_t six_byte_key[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x00};
    const struct {
        const uint8_t *b;
        size_t n;
    } bad[] = {
        {cut_body, sizeof(cut_body)},
        {cut_varint, sizeof(cut_varint)},
        {eleven_byte_varint, sizeof(eleven_byte_varint)},
        {field_zero, sizeof(field_zero)},
        {group, sizeof(group)},
        {reserved_wire, sizeof(reserved_wire)},
        {id_as_bytes, sizeof(id_as_bytes)},
        {body_as_number, sizeof(body_as_number)},
        {cut_fixed64, sizeof(cut_fixed64)},
        {six_byte_key, sizeof(six_byte_key)},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(rpc_env_decode_request(bad[i].b, bad[i].n, &r), SMP_EPROTO);
        agree(bad[i].b, bad[i].n); /* and protobuf-c refuses them too */
    }

    rpc_env_response resp;
    const uint8_t status_as_bytes[] = {0x12, 0x01, 0x01};
    const uint8_t error_as_number[] = {0x18, 0x01};
    const uint8_t cut_error[] = {0x1a, 0x04, 'n', 'o'};
    assert_int_equal(rpc_env_decode_response(status_as_bytes, 3, &resp), SMP_EPROTO);
    assert_int_equal(rpc_env_decode_response(error_as_number, 2, &resp), SMP_EPROTO);
    assert_int_equal(rpc_env_decode_response(cut_error, 4, &resp), SMP_EPROTO);
    agree_response(status_as_bytes, 3);
    agree_response(error_as_number, 2);
    agree_response(cut_error, 4);
    const uint8_t leader_as_number[] = {0x28, 0x01};  /* field 5 varint */
    const uint8_t cut_leader[] = {0x2a, 0x05, '/', 't'};
    assert_int_equal(rpc_env_decode_response(leader_as_number, 2, &resp), SMP_EPROTO);
    assert_int_equal(rpc_env_decode_response(cut_leader, 4, &resp), SMP_EPROTO);
    agree_response(leader_as_number, 2);
    agree_response(cut_leader, 4);
    const uint8_t retry_as_bytes[] = {0x32, 0x01, 'x'}; /* field 6 length-delimited */
    assert_int_equal(rpc_env_decode_response(retry_as_bytes, 3, &resp), SMP_EPROTO);
    agree_response(retry_as_bytes, 3);
    /* A request has no field 5: the same bytes are an unknown field there. */
    assert_int_equal(rpc_env_decode_request(leader_as_number, 2, &r), SMP_OK);
    agree(leader_as_number, 2);

    /* A standby's answer: status SMP_ENOTLEADER and the leader's endpoint. */
    const uint8_t redirect[] = {0x08, 0x07, 0x10, 0x1f, 0x2a, 0x06, '/', 't', '/', 'm', '.', 's'};
    assert_int_equal(rpc_env_decode_response(redirect, sizeof(redirect), &resp), SMP_OK);
    assert_int_equal(resp.status, SMP_ENOTLEADER);
    assert_int_equal(resp.leader_len, 6);
    assert_memory_equal(resp.leader, "/t/m.s", 6);
    assert_null(resp.error);
    agree_response(redirect, sizeof(redirect));

    const uint8_t refusal[] = {0x10, 0x03, 0x1a, 0x02, 'n', 'o'}; /* status -2 */
    assert_int_equal(rpc_env_decode_response(refusal, sizeof(refusal), &resp), SMP_OK);
    assert_int_equal(resp.status, -2);
    assert_true(resp.request_id == 0);
    assert_int_equal(resp.error_len, 2);
    assert_memory_equal(resp.error, "no", 2);
    assert_null(resp.leader);
    assert_int_equal(resp.leader_len, 0);
    assert_int_equal(resp.retry_after_ms, 0);
    /* a rate limit's refusal: status SMP_EAGAIN, retry after 250 ms */
    const uint8_t retry[] = {0x10, 0x13, 0x1a, 0x02, 'n', 'o', 0x30, 0xfa, 0x01};
    assert_int_equal(rpc_env_decode_response(retry, sizeof(retry), &resp), SMP_OK);
    assert_int_equal(resp.status, SMP_EAGAIN);
    assert_int_equal(resp.retry_after_ms, 250);
    assert_int_equal(resp.stopping, 0);
    agree_response(retry, sizeof(retry));
    /* a stopping master alone's refusal: status SMP_EAGAIN, stopping */
    const uint8_t stopping[] = {0x10, 0x13, 0x1a, 0x02, 'n', 'o', 0x38, 0x01};
    assert_int_equal(rpc_env_decode_response(stopping, sizeof(stopping), &resp), SMP_OK);
    assert_int_equal(resp.status, SMP_EAGAIN);
    assert_int_equal(resp.retry_after_ms, 0);
    assert_int_equal(resp.stopping, 1);
    agree_response(stopping, sizeof(stopping));
    /* a bool is true when any byte of its varint has a payload bit, also
     * one past 64 bits that the number itself loses, and false at 0;
     * protobuf-c takes it in any wire type but a group's, reading every
     * byte after the key (a length prefix too) */
    const uint8_t wide_bool[] = {0x38, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02};
    const uint8_t zero_bool[] = {0x38, 0x80, 0x00};
    const uint8_t len_bool[] = {0x3a, 0x01, 0x00}, empty_bool[] = {0x3a, 0x00};
    const uint8_t fixed_bool[] = {0x3d, 0x80, 0, 0, 0}, wide_fixed[] = {0x39, 0, 0, 0, 0, 0, 0, 0, 1};
    const uint8_t group_bool[] = {0x3b};
    stopping_reads(wide_bool, sizeof(wide_bool), 1);
    stopping_reads(zero_bool, sizeof(zero_bool), 0);
    stopping_reads(len_bool, sizeof(len_bool), 1);
    stopping_reads(empty_bool, sizeof(empty_bool), 0);
    stopping_reads(fixed_bool, sizeof(fixed_bool), 0);
    stopping_reads(wide_fixed, sizeof(wide_fixed), 1);
    assert_int_equal(rpc_env_decode_response(group_bool, sizeof(group_bool), &resp), SMP_EPROTO);
    agree_response(group_bool, sizeof(group_bool));

    /* The last of a repeated field wins; unknown fields are skipped. */
    const uint8_t repeated[] = {0x08, 0x01, 0x2a, 0x01, 'x', 0x08, 0x02,
                                0x22, 0x01, 'a', 0x22, 0x02, 'b', 'c'};
    assert_int_equal(rpc_env_decode_request(repeated, sizeof(repeated), &r), SMP_OK);
    assert_true(r.request_id == 2);
    assert_int_equal(r.body_len, 2);
    assert_memory_equal(r.body, "bc", 2);
    agree(repeated, sizeof(repeated));

    /* Field 2^29 + 4 is not field 4 (body), whatever its low bits say:
     * skipped as unknown, not refused as a body sent as a number. */
    const uint8_t high_field[] = {0xa0, 0x80, 0x80, 0x80, 0x10, 0x05};
    assert_int_equal(rpc_env_decode_request(high_field, sizeof(high_field), &r), SMP_OK);
    assert_int_equal(r.body_len, 0);
    agree(high_field, sizeof(high_field));
}

static void test_messages_are_written_as_protobuf_c_packs_them(void **state)
{
    (void)state;
    uint8_t mine[1024], ref[1024], body[300];
    char error[200], leader[100];
    for (int i = 0; i < 20000; i++) {
        RpcResponse resp = RPC_RESPONSE__INIT;
        resp.request_id = some_number();
        int32_t status = (int32_t)(next() % 3 == 0 ? 0 : (int64_t)(next() % 2000) - 1000);
        if (next() % 20 == 0) status = next() % 2 ? INT32_MIN : INT32_MAX;
        resp.status = status;
        size_t elen = next() % 3 == 0 ? 0 : next() % (sizeof(error) - 1);
        for (size_t k = 0; k < elen; k++) error[k] = (char)('a' + next() % 26);
        error[elen] = '\0';
        resp.error = error;
        resp.body.len = next() % 2 ? 0 : next() % sizeof(body);
        for (size_t k = 0; k < resp.body.len; k++) body[k] = (uint8_t)next();
        resp.body.data = body;

        size_t want = rpc_response__pack(&resp, ref);
        size_t size = rpc_env_response_size(resp.request_id, status, elen, resp.body.len);
        size_t got = rpc_env_encode_response(mine, resp.request_id, status, error, elen, body,
                                             resp.body.len);
        assert_int_equal(size, want);
        assert_int_equal(got, want);
        assert_memory_equal(mine, ref, want);
        /* the same with no leader through the leader's encoder */
        memset(mine, 0xee, sizeof(mine));
        assert_int_equal(rpc_env_response_size_leader(resp.request_id, status, elen,
                                                      resp.body.len, 0), want);
        assert_int_equal(rpc_env_encode_response_leader(mine, resp.request_id, status, error,
                                                        elen, body, resp.body.len, NULL, 0),
                         want);
        assert_memory_equal(mine, ref, want);

        /* and naming a leader */
        size_t llen = next() % 4 == 0 ? 0 : next() % (sizeof(leader) - 1);
        for (size_t k = 0; k < llen; k++) leader[k] = (char)('!' + next() % 90);
        leader[llen] = '\0';
        resp.leader = leader;
        want = rpc_response__pack(&resp, ref);
        size = rpc_env_response_size_leader(resp.request_id, status, elen, resp.body.len, llen);
        got = rpc_env_encode_response_leader(mine, resp.request_id, status, error, elen, body,
                                             resp.body.len, leader, llen);
        assert_int_equal(size, want);
        assert_int_equal(got, want);
        assert_memory_equal(mine, ref, want);
        rpc_env_response back;
        assert_int_equal(rpc_env_decode_response(mine, got, &back), SMP_OK);
        assert_int_equal(back.leader_len, llen);
        if (llen) assert_memory_equal(back.leader, leader, llen);

        /* a refusal saying when to retry, or that the master is stopping
         * (no body, no leader) */
        RpcResponse refusal = RPC_RESPONSE__INIT;
        refusal.request_id = resp.request_id;
        refusal.status = status;
        refusal.error = error;
        refusal.retry_after_ms = next() % 5 == 0 ? 0 : (uint32_t)some_number();
        refusal.stopping = next() % 2;
        want = rpc_response__pack(&refusal, ref);
        size = rpc_env_response_size_refusal(resp.request_id, status, elen,
                                             refusal.retry_after_ms, refusal.stopping);
        got = rpc_env_encode_response_refusal(mine, resp.request_id, status, error, elen,
                                              refusal.retry_after_ms, refusal.stopping);
        assert_int_equal(size, want);
        assert_int_equal(got, want);
        assert_memory_equal(mine, ref, want);
        assert_int_equal(rpc_env_decode_response(mine, got, &back), SMP_OK);
        assert_int_equal(back.retry_after_ms, refusal.retry_after_ms);
        assert_int_equal(back.stopping, refusal.stopping);

        RpcRequest req = RPC_REQUEST__INIT;
        req.request_id = some_number();
        req.service = (uint32_t)some_number();
        req.method = (uint32_t)some_number();
        req.body = resp.body;
        want = rpc_request__pack(&req, ref);
        size = rpc_env_request_size(req.request_id, req.service, req.method, req.body.len);
        got = rpc_env_encode_request(mine, req.request_id, req.service, req.method, body,
                                     req.body.len);
        assert_int_equal(size, want);
        assert_int_equal(got, want);
        assert_memory_equal(mine, ref, want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_messages_decode_as_protobuf_c_decodes_them),
        cmocka_unit_test(test_odd_and_broken_messages_get_the_same_verdict),
        cmocka_unit_test(test_named_malformations_are_refused),
        cmocka_unit_test(test_messages_are_written_as_protobuf_c_packs_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
