/* test_wm_request_decode.c -- the IdentityRequest decoded by hand.
 *
 * wm_id_request_decode (weight_plugin/wm_request_decode.c) must accept and
 * refuse exactly what wmrpc__identity_request__unpack does, and give the
 * same fields (wm_request_same.h compares the two). Pinned here on
 * requests built byte by byte: well-formed ones, with and without the
 * identity, with empty and long strings (past the decoder's inline room),
 * and with unknown fields of every wire type at both levels; every prefix of
 * a request (truncated); each known field with a wrong wire type; lengths
 * past the end and above INT_MAX; tags and varints longer than protobuf-c
 * allows; a field number 0 and wire types 3, 4, 6 and 7; fields given twice
 * (the last wins, an identity given twice is merged, the earlier's strings
 * filling what the later lacks); a string with a NUL byte. The values of
 * the duplicated and merged requests are also checked against what the
 * test expects, not only against protobuf-c. And the handlers of the three
 * identity reads answer a body that does not decode with SMP_EPROTO and the
 * sentence naming the message. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pb_wire.h"
#include "weight_rpc.pb-c.h"
#include "wm_mgmt.h"
#include "wm_plugin.h"
#include "wm_request_same.h"

/* -- building requests byte by byte --------------------------------------- */

typedef struct bytes {
    uint8_t b[8192];
    size_t n;
} bytes;

static void put_raw(bytes *o, const void *p, size_t n)
{
    assert_true(o->n + n <= sizeof(o->b));
    memcpy(o->b + o->n, p, n);
    o->n += n;
}

static void put_varint(bytes *o, uint64_t v)
{
    uint8_t t[10];
    put_raw(o, t, (size_t)(pbw_put_varint(t, v) - t));
}

static void put_tag(bytes *o, unsigned num, unsigned wt)
{
    put_varint(o, ((uint64_t)num << 3) | wt);
}

static void put_len_field(bytes *o, unsigned num, const void *p, size_t n)
{
    put_tag(o, num, PBW_LEN);
    put_varint(o, n);
    put_raw(o, p, n);
}

static void put_str(bytes *o, unsigned num, const char *s)
{
    put_len_field(o, num, s, strlen(s));
}

static void put_u64(bytes *o, unsigned num, uint64_t v)
{
    put_tag(o, num, PBW_VARINT);
    put_varint(o, v);
}

/* A WeightIdentity message of the four strings (NULL: left out) and the
 * generation (0: left out). */
static bytes identity(const char *tenant, const char *ns, const char *res, const char *rev,
                      uint64_t gen)
{
    bytes m = {.n = 0};
    const char *s[4] = {tenant, ns, res, rev};
    for (unsigned i = 0; i < 4; i++)
        if (s[i] != NULL) put_str(&m, i + 1, s[i]);
    if (gen != 0) put_u64(&m, 5, gen);
    return m;
}

static void put_identity(bytes *o, const bytes *id)
{
    put_len_field(o, 1, id->b, id->n);
}

/* A plain request: the identity "t/llm/model/r1@3". */
static bytes plain_request(void)
{
    bytes o = {.n = 0};
    bytes id = identity("t", "llm", "model", "r1", 3);
    put_identity(&o, &id);
    return o;
}

/* -- checks --------------------------------------------------------------- */

/* The two decoders agree on b; returns whether it decodes. */
static int same(const bytes *b)
{
    char why[256];
    int decoded = 0;
    if (wmr_same(b->b, b->n, &decoded, why, sizeof(why)) < 0) fail_msg("%s", why);
    return decoded;
}

static void expect_refused(const bytes *b)
{
    assert_int_equal(same(b), 0);
}

static void expect_decoded(const bytes *b)
{
    assert_int_equal(same(b), 1);
}

/* Decode b by hand (it must decode) into *r; release with wm_id_request_fini. */
static void decode_ok(wm_id_request *r, const bytes *b)
{
    assert_int_equal(wm_id_request_decode(r, b->b, b->n), 0);
}

/* -- well-formed requests ------------------------------------------------- */

static void test_well_formed_requests_decode_as_protobuf_c(void **state)
{
    (void)state;
    bytes o = plain_request();
    expect_decoded(&o);

    wm_id_request r;
    decode_ok(&r, &o);
    assert_non_null(r.m.identity);
    assert_string_equal(r.m.identity->tenant, "t");
    assert_string_equal(r.m.identity->namespace_id, "llm");
    assert_string_equal(r.m.identity->resource_id, "model");
    assert_string_equal(r.m.identity->revision, "r1");
    assert_int_equal(r.m.identity->generation, 3);
    assert_ptr_equal(r.m.request_id, protobuf_c_empty_string);
    wm_id_request_fini(&r);

    /* the empty body, an empty identity, strings given empty */
    bytes empty = {.n = 0};
    expect_decoded(&empty);
    decode_ok(&r, &empty);
    assert_null(r.m.identity);
    wm_id_request_fini(&r);
    bytes e = {.n = 0};
    bytes none = identity(NULL, NULL, NULL, NULL, 0);
    put_identity(&e, &none);
    expect_decoded(&e);
    bytes g = {.n = 0};
    bytes blanks = identity("", "", "", "", 0);
    put_identity(&g, &blanks);
    expect_decoded(&g);

    /* every field, the largest numbers */
    bytes all = {.n = 0};
    bytes id = identity("tenant-a", "llm", "model", "r1", UINT64_MAX);
    put_identity(&all, &id);
    put_u64(&all, 2, UINT64_MAX);
    put_str(&all, 3, "req-1");
    expect_decoded(&all);
    decode_ok(&r, &all);
    assert_int_equal(r.m.expected_metadata_generation, UINT64_MAX);
    assert_string_equal(r.m.request_id, "req-1");
    wm_id_request_fini(&r);

    /* unknown fields of every wire type, at both levels, are skipped */
    bytes unk = {.n = 0};
    bytes idu = identity("t", "llm", "model", "r1", 3);
    put_u64(&idu, 9, 12345);
    put_tag(&idu, 10, PBW_64BIT);
    put_raw(&idu, "12345678", 8);
    put_tag(&idu, 11, PBW_32BIT);
    put_raw(&idu, "1234", 4);
    put_str(&idu, 12, "x");
    put_u64(&unk, 7, 1);
    put_identity(&unk, &idu);
    put_tag(&unk, 1000, PBW_64BIT);
    put_raw(&unk, "abcdefgh", 8);
    put_tag(&unk, 536870911, PBW_32BIT); /* the largest field number */
    put_raw(&unk, "abcd", 4);
    put_str(&unk, 4, "not a field of this message");
    expect_decoded(&unk);

    /* strings past the inline room go to the heap */
    char big[3000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    bytes lg = {.n = 0};
    bytes idl = identity(big, big + 1000, "model", "r1", 1);
    put_identity(&lg, &idl);
    put_str(&lg, 3, big + 2000);
    expect_decoded(&lg);
    decode_ok(&r, &lg);
    assert_non_null(r.heap);
    assert_int_equal(strlen(r.m.identity->tenant), sizeof(big) - 1);
    wm_id_request_fini(&r);
}

/* A NUL inside a string ends it as a C string, as protobuf-c's copy does. */
static void test_a_string_with_a_nul_reads_up_to_it(void **state)
{
    (void)state;
    bytes o = {.n = 0}, id = {.n = 0};
    put_len_field(&id, 1, "te\0nant", 7);
    put_str(&id, 2, "llm");
    put_identity(&o, &id);
    expect_decoded(&o);
    wm_id_request r;
    decode_ok(&r, &o);
    assert_string_equal(r.m.identity->tenant, "te");
    wm_id_request_fini(&r);
}

/* -- malformed requests ---------------------------------------------------- */

/* Every proper prefix of a request with every field: those that cut a
 * field are refused, those that end between fields decode -- by both. */
static void test_every_truncation_is_judged_as_protobuf_c_does(void **state)
{
    (void)state;
    bytes all = {.n = 0};
    bytes id = identity("tenant-a", "llm", "model", "r1", 300);
    put_identity(&all, &id);
    put_u64(&all, 2, 1u << 20);
    put_str(&all, 3, "req-1");
    int refused = 0;
    for (size_t n = 0; n < all.n; n++) {
        bytes cut = all;
        cut.n = n;
        if (!same(&cut)) refused++;
    }
    assert_true(refused > 0);
    /* cut inside the identity: the identity's own length is then past the end */
    bytes cut = all;
    cut.n = 5;
    expect_refused(&cut);
}

/* Field num with wire type wt and a small value of that type. */
static void put_any(bytes *o, unsigned num, unsigned wt)
{
    put_tag(o, num, wt);
    switch (wt) {
    case PBW_VARINT: put_varint(o, 1); break;
    case PBW_64BIT: put_raw(o, "12345678", 8); break;
    case PBW_LEN: put_varint(o, 0); break;
    default: put_raw(o, "1234", 4); break;
    }
}

/* A known field with another wire type than its own is refused, at both
 * levels; the right wire type decodes. */
static void test_a_wrong_wire_type_is_refused(void **state)
{
    (void)state;
    static const unsigned wts[] = {PBW_VARINT, PBW_64BIT, PBW_LEN, PBW_32BIT};
    for (unsigned f = 1; f <= 3; f++) {
        for (size_t w = 0; w < 4; w++) {
            bytes o = {.n = 0};
            put_any(&o, f, wts[w]);
            assert_int_equal(same(&o), wts[w] == (f == 2 ? PBW_VARINT : PBW_LEN));
        }
    }
    for (unsigned f = 1; f <= 5; f++) {
        for (size_t w = 0; w < 4; w++) {
            bytes o = {.n = 0}, id = {.n = 0};
            put_any(&id, f, wts[w]);
            put_identity(&o, &id);
            assert_int_equal(same(&o), wts[w] == (f == 5 ? PBW_VARINT : PBW_LEN));
        }
    }
}

/* Lengths past the end or above INT_MAX, tags and varints too long, field
 * number 0, the group wire types and 6 and 7: refused. */
static void test_bad_lengths_tags_and_varints_are_refused(void **state)
{
    (void)state;
    bytes o = {.n = 0};
    put_tag(&o, 1, PBW_LEN); /* one byte more announced than there is */
    put_varint(&o, 4);
    put_raw(&o, "abc", 3);
    expect_refused(&o);

    bytes big = {.n = 0};
    put_tag(&big, 3, PBW_LEN);
    put_varint(&big, (uint64_t)INT_MAX + 1);
    put_raw(&big, "abc", 3);
    expect_refused(&big);

    bytes pre = {.n = 0}; /* a length prefix of 6 bytes */
    put_tag(&pre, 3, PBW_LEN);
    put_raw(&pre, "\x81\x80\x80\x80\x80\x00", 6);
    expect_refused(&pre);

    bytes tag = {.n = 0}; /* a tag of 6 bytes */
    put_raw(&tag, "\x88\x80\x80\x80\x80\x00\x01", 7);
    expect_refused(&tag);

    bytes var = {.n = 0}; /* a varint of 11 bytes */
    put_tag(&var, 2, PBW_VARINT);
    put_raw(&var, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11);
    expect_refused(&var);
    bytes var10 = {.n = 0}; /* 10 bytes: the longest protobuf-c reads */
    put_tag(&var10, 2, PBW_VARINT);
    put_raw(&var10, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 10);
    expect_decoded(&var10);

    bytes zero = {.n = 0};
    put_raw(&zero, "\x02\x00", 2); /* field 0 */
    expect_refused(&zero);

    for (unsigned wt = 3; wt <= 7; wt++) {
        if (wt == PBW_32BIT) continue;
        bytes g = {.n = 0};
        put_tag(&g, 9, wt); /* unknown field, bad wire type */
        put_raw(&g, "\x00\x00\x00\x00\x00\x00\x00\x00", 8);
        expect_refused(&g);
        bytes gi = {.n = 0}, id = {.n = 0}; /* the same inside the identity */
        put_tag(&id, 9, wt);
        put_raw(&id, "\x00\x00\x00\x00\x00\x00\x00\x00", 8);
        put_identity(&gi, &id);
        expect_refused(&gi);
    }

    /* truncated fixed-width fields */
    bytes f64 = {.n = 0};
    put_tag(&f64, 9, PBW_64BIT);
    put_raw(&f64, "1234567", 7);
    expect_refused(&f64);
    bytes f32 = {.n = 0};
    put_tag(&f32, 9, PBW_32BIT);
    put_raw(&f32, "123", 3);
    expect_refused(&f32);
}

/* -- duplicated fields ----------------------------------------------------- */

/* A scalar or a string given twice keeps the last value; an identity given
 * twice is merged: the later's strings where it has them (an empty one
 * too), the earlier's otherwise, and the later's generation (0 when the
 * later lacks it). */
static void test_duplicated_fields_last_wins_identities_merge(void **state)
{
    (void)state;
    bytes o = {.n = 0};
    put_u64(&o, 2, 5);
    put_str(&o, 3, "first");
    bytes a = identity("ta", "na", "ra", NULL, 7);
    bytes b = identity(NULL, "", "rb", "vb", 0);
    put_identity(&o, &a);
    put_u64(&o, 2, 9);
    put_identity(&o, &b);
    put_str(&o, 3, "second");
    expect_decoded(&o);

    wm_id_request r;
    decode_ok(&r, &o);
    assert_int_equal(r.m.expected_metadata_generation, 9);
    assert_string_equal(r.m.request_id, "second");
    const Wmrpc__WeightIdentity *id = r.m.identity;
    assert_non_null(id);
    assert_string_equal(id->tenant, "ta");    /* the later lacks it */
    assert_string_equal(id->namespace_id, ""); /* the later's, empty */
    assert_string_equal(id->resource_id, "rb");
    assert_string_equal(id->revision, "vb");
    assert_int_equal(id->generation, 0); /* scalars are not merged */
    wm_id_request_fini(&r);

    /* three identities: merged in order */
    bytes c = identity(NULL, NULL, NULL, NULL, 4);
    bytes t = o;
    put_identity(&t, &c);
    expect_decoded(&t);
    decode_ok(&r, &t);
    assert_string_equal(r.m.identity->tenant, "ta");
    assert_string_equal(r.m.identity->resource_id, "rb");
    assert_int_equal(r.m.identity->generation, 4);
    wm_id_request_fini(&r);

    /* a later identity that does not decode fails the whole request */
    bytes bad = o;
    put_len_field(&bad, 1, "\x0a\x05" "ab", 4);
    expect_refused(&bad);
}

/* An empty body decodes as protobuf-c decodes zero bytes (a request with
 * no identity), at NULL as well as at an address: no arithmetic on a NULL
 * body (clang's UBSan stopped the master on NULL + 0 here, fuzz_rpc). */
static void test_an_empty_body_decodes_as_protobuf_c(void **state)
{
    (void)state;
    static const uint8_t none[1];
    char why[256];
    int decoded = 0;
    assert_int_equal(wmr_same(NULL, 0, &decoded, why, sizeof(why)), 0);
    assert_int_equal(decoded, 1);
    decoded = 0;
    assert_int_equal(wmr_same(none, 0, &decoded, why, sizeof(why)), 0);
    assert_int_equal(decoded, 1);
}

/* -- the handlers ---------------------------------------------------------- */

struct smp_rpc_call {
    int status;
    char body[1024];
    size_t len;
};

static int f_rpc_reply(smp_rpc_call *call, int status, const uint8_t *body, size_t len)
{
    call->status = status;
    call->len = len < sizeof(call->body) - 1 ? len : sizeof(call->body) - 1;
    if (call->len) memcpy(call->body, body, call->len);
    call->body[call->len] = '\0';
    return SMP_OK;
}

/* A body that does not decode is answered SMP_EPROTO, naming the message,
 * by each identity read, and an empty one INVALID_ARGUMENT naming the
 * missing identity; a well-formed request for an unknown revision (with
 * unknown fields in it) gets past the decode. */
static void test_the_reads_answer_a_body_that_does_not_decode(void **state)
{
    (void)state;
    smp_host_api api;
    wm_plugin p;
    smp_rpc_call call;
    memset(&api, 0, sizeof(api));
    api.struct_size = sizeof(api);
    api.rpc_reply = f_rpc_reply;
    memset(&p, 0, sizeof(p));
    p.api = &api;
    assert_int_equal(wm_store_create(&p.store), WM_OK);

    static int (*const reads[])(void *, smp_rpc_call *, const uint8_t *, size_t) = {
        wm_rpc_get_metadata, wm_rpc_is_exist, wm_rpc_get_size};
    bytes o = plain_request();
    bytes cut = o;
    cut.n -= 1;
    for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) {
        memset(&call, 0, sizeof(call));
        reads[i](&p, &call, NULL, 0); /* empty: decodes, names what is missing */
        assert_int_equal(call.status, WM_EINVALID_ARGUMENT);
        assert_string_equal(call.body, "invalid identity: identity is missing");

        memset(&call, 0, sizeof(call));
        reads[i](&p, &call, cut.b, cut.n);
        assert_int_equal(call.status, SMP_EPROTO);
        assert_string_equal(call.body, "request body does not decode as Wmrpc__IdentityRequest");

        bytes ok = o;
        put_u64(&ok, 99, 1);
        memset(&call, 0, sizeof(call));
        reads[i](&p, &call, ok.b, ok.n);
        if (reads[i] == wm_rpc_is_exist) {
            assert_int_equal(call.status, SMP_OK); /* an unknown identity: exists false */
        } else {
            assert_int_equal(call.status, WM_ENOT_FOUND);
            assert_non_null(strstr(call.body, "no revision t/llm/model/r1@3"));
        }
    }
    wm_store_free(p.store);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_well_formed_requests_decode_as_protobuf_c),
        cmocka_unit_test(test_a_string_with_a_nul_reads_up_to_it),
        cmocka_unit_test(test_every_truncation_is_judged_as_protobuf_c_does),
        cmocka_unit_test(test_a_wrong_wire_type_is_refused),
        cmocka_unit_test(test_bad_lengths_tags_and_varints_are_refused),
        cmocka_unit_test(test_duplicated_fields_last_wins_identities_merge),
        cmocka_unit_test(test_an_empty_body_decodes_as_protobuf_c),
        cmocka_unit_test(test_the_reads_answer_a_body_that_does_not_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
