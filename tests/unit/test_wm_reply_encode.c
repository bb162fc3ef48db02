/* test_wm_reply_encode.c -- the MetadataResponse packed by hand.
 *
 * wm_pack_metadata_response must give, byte for byte, what
 * protobuf_c_message_pack gives for the wire views wm_pb_meta_set and
 * wm_pb_op_set fill (what weight_get_metadata answered before). Pinned here
 * over revisions and operations whose every field takes values at the
 * edges of its encoding: zero (left out), one-byte and two-byte varints,
 * the largest 32- and 64-bit values, doubles 0, -0.0, NaN and infinities,
 * strings NULL, empty, of 127 and 128 bytes (a one- and a two-byte length)
 * and of the longest key, sealed and unsealed revisions (the digests only
 * for the sealed), with and without an operation, and the empty response;
 * a buffer too small is not written and the size it needs is returned; and
 * the bytes decode back with protobuf-c to the revision's values. The
 * IsExistResponse packed by hand (wm_pack_is_exist_response) is
 * protobuf-c's bytes for both answers. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "weight_rpc.pb-c.h"
#include "wm_mgmt.h"

/* What protobuf-c packs for the same response. *n gets the size; the
 * caller frees the bytes. */
static uint8_t *pack_reference(const wm_revision *rev, const wm_operation *o, size_t *n)
{
    Wmrpc__MetadataResponse resp = WMRPC__METADATA_RESPONSE__INIT;
    wm_pb_meta meta;
    wm_pb_op op;
    if (rev != NULL) {
        wm_pb_meta_set(&meta, rev);
        resp.metadata = &meta.m;
        if (o != NULL) {
            wm_pb_op_set(&op, o);
            resp.operation = &op.m;
        }
    }
    *n = protobuf_c_message_get_packed_size(&resp.base);
    uint8_t *b = malloc(*n + 1);
    assert_non_null(b);
    protobuf_c_message_pack(&resp.base, b);
    return b;
}

/* The hand-packed bytes equal protobuf-c's, and a buffer one byte short is
 * left as it was. */
static void expect_same(const wm_revision *rev, const wm_operation *o)
{
    size_t ref_n, n;
    uint8_t *ref = pack_reference(rev, o, &ref_n);
    uint8_t *got = malloc(ref_n + 16);
    assert_non_null(got);
    memset(got, 0xA5, ref_n + 16);
    n = wm_pack_metadata_response(rev, o, got, ref_n + 16);
    assert_int_equal(n, ref_n);
    assert_memory_equal(got, ref, ref_n);
    assert_int_equal(got[ref_n], 0xA5); /* nothing written past the size */
    if (ref_n > 0) {
        memset(got, 0xA5, ref_n + 16);
        assert_int_equal(wm_pack_metadata_response(rev, o, got, ref_n - 1), ref_n);
        for (size_t i = 0; i < ref_n + 16; i++) assert_int_equal(got[i], 0xA5);
    }
    assert_int_equal(wm_pack_metadata_response(rev, o, NULL, 0), ref_n);
    free(got);
    free(ref);
}

static const uint64_t u64s[] = {0, 1, 127, 128, 16383, 16384, 4294967295ull, 4294967296ull,
                                (1ull << 63), UINT64_MAX};
#define N_U64 (sizeof(u64s) / sizeof(u64s[0]))
static const uint32_t u32s[] = {0, 1, 3, 127, 128, 65535, UINT32_MAX};
#define N_U32 (sizeof(u32s) / sizeof(u32s[0]))

static double dbl_at(unsigned i)
{
    switch (i % 8) {
    case 0: return 0.0;
    case 1: return -0.0;
    case 2: return 0.5;
    case 3: return 1e-300;
    case 4: return NAN;
    case 5: return INFINITY;
    case 6: return -INFINITY;
    default: return 0.999999;
    }
}

static char long_key[WM_KEY_MAX + 1];
static char s127[128], s128[129];

static const char *str_at(unsigned i)
{
    switch (i % 6) {
    case 0: return NULL;
    case 1: return "";
    case 2: return "a";
    case 3: return s127;
    case 4: return s128;
    default: return long_key;
    }
}

/* A revision whose fields are picked by k from the edge values. */
static void revision_of(wm_revision *r, unsigned k)
{
    memset(r, 0, sizeof(*r));
    r->id.tenant_id = str_at(k);
    r->id.ns = str_at(k / 2 + 1);
    r->id.resource_id = str_at(k / 3 + 2);
    r->id.revision = str_at(k / 5 + 3);
    r->id.weight_generation = u64s[k % N_U64];
    r->policy.preferred = (wm_residency)(k % 4);
    r->policy.mixed_hot_ratio = dbl_at(k / 3);
    r->policy.mode = (wm_migration_mode)(k / 4 % 4);
    r->availability = (wm_availability)(k % 6);
    r->residency = (wm_residency)(k / 6 % 5);
    r->observed_hot_ratio = dbl_at(k);
    r->metadata_generation = u64s[(k + 1) % N_U64];
    r->operation_id = u64s[(k + 2) % N_U64];
    r->group_key = str_at(k / 7);
    r->manifest_key = str_at(k / 11 + 4);
    for (unsigned i = 0; i < WM_SHA256_LEN; i++) {
        r->manifest_sha256[i] = (uint8_t)(k + i);
        r->payload_keys_sha256[i] = (uint8_t)(k * 3 + i);
        r->affinity_sha256[i] = (uint8_t)(k * 7 + i);
    }
    r->payload_count = u64s[(k / 2) % N_U64];
    r->logical_bytes = u64s[(k + 3) % N_U64];
    r->affinity_count = u64s[(k + 4) % N_U64];
    r->created_ms = u64s[(k + 5) % N_U64];
    r->updated_ms = u64s[(k + 6) % N_U64];
    r->last_access_ms = u64s[(k + 7) % N_U64];
    r->lease_count = u32s[k % N_U32];
    r->degraded_from = (wm_residency)(k / 5 % 5);
    r->degraded_from_hot_ratio = dbl_at(k / 2 + 1);
}

static void operation_of(wm_operation *o, unsigned k)
{
    memset(o, 0, sizeof(*o));
    o->id = u64s[(k + 8) % N_U64];
    o->kind = (wm_op_kind)(k % 4);
    o->id_of.tenant_id = str_at(k + 1);
    o->id_of.ns = str_at(k / 2);
    o->id_of.resource_id = str_at(k / 3 + 5);
    o->id_of.revision = str_at(k / 4);
    o->id_of.weight_generation = u64s[(k + 9) % N_U64];
    o->target = (wm_residency)(k / 2 % 4);
    o->target_hot_ratio = dbl_at(k + 1);
    o->members_done = u64s[k % N_U64];
    o->members_total = u64s[(k + 1) % N_U64];
    o->bytes_done = u64s[(k + 2) % N_U64];
    o->bytes_total = u64s[(k + 3) % N_U64];
    const char *c = str_at(k / 3);
    snprintf(o->cursor, sizeof(o->cursor), "%s", c != NULL ? c : "");
    o->state = (wm_op_state)(k % 4);
    const char *e = str_at(k / 5 + 1);
    snprintf(o->error, sizeof(o->error), "%.*s", (int)(sizeof(o->error) - 1), e != NULL ? e : "");
    o->attempts = u32s[(k + 2) % N_U32];
    o->created_ms = u64s[(k + 4) % N_U64];
    o->updated_ms = u64s[(k + 5) % N_U64];
}

static int setup(void **state)
{
    (void)state;
    memset(long_key, 'k', WM_KEY_MAX);
    long_key[WM_KEY_MAX] = '\0';
    memset(s127, 'x', 127);
    s127[127] = '\0';
    memset(s128, 'y', 128);
    s128[128] = '\0';
    return 0;
}

/* Every combination of edge values packs as protobuf-c packs it, with and
 * without an operation. */
static void test_metadata_response_is_protobuf_c_s_bytes(void **state)
{
    (void)state;
    for (unsigned k = 0; k < 2000; k++) {
        wm_revision r;
        wm_operation o;
        revision_of(&r, k);
        operation_of(&o, k);
        expect_same(&r, NULL);
        expect_same(&r, &o);
    }
}

/* A revision with every field at zero still writes its identity and policy
 * (empty sub-messages); no revision is the empty response, whatever the
 * operation. */
static void test_zero_revision_and_the_empty_response(void **state)
{
    (void)state;
    wm_revision r;
    wm_operation o;
    memset(&r, 0, sizeof(r));
    memset(&o, 0, sizeof(o));
    expect_same(&r, NULL);
    expect_same(&r, &o);
    expect_same(NULL, NULL);
    expect_same(NULL, &o);
    uint8_t b[4] = {7, 7, 7, 7};
    assert_int_equal(wm_pack_metadata_response(NULL, &o, b, sizeof(b)), 0);
    assert_int_equal(b[0], 7);
}

/* The bytes decode back to the revision a ready weight holds: what a client
 * reads is what it read before. */
static void test_packed_bytes_decode_to_the_revision(void **state)
{
    (void)state;
    wm_revision r;
    memset(&r, 0, sizeof(r));
    r.id = (wm_identity){"tenant-a", "ns", "model-0001", "r1", 3};
    r.policy = (wm_policy){WM_RES_MIXED, 0.25, WM_MODE_AUTO};
    r.availability = WM_AVAIL_READY;
    r.residency = WM_RES_HOT;
    r.observed_hot_ratio = 1.0;
    r.metadata_generation = 9;
    r.group_key = "weights/tenant-a/ns/model-0001/r1/3";
    r.manifest_key = "weights/tenant-a/ns/model-0001/r1/3/manifest";
    memset(r.manifest_sha256, 0x11, WM_SHA256_LEN);
    r.payload_count = 2;
    r.logical_bytes = 1 << 20;
    r.affinity_count = 1;
    r.created_ms = 1764700000000ull;
    r.updated_ms = r.created_ms + 5;
    r.lease_count = 2;
    r.degraded_from = WM_RES_MIXED;
    r.degraded_from_hot_ratio = 0.5;
    uint8_t b[1024];
    size_t n = wm_pack_metadata_response(&r, NULL, b, sizeof(b));
    Wmrpc__MetadataResponse *m = wmrpc__metadata_response__unpack(NULL, n, b);
    assert_non_null(m);
    assert_non_null(m->metadata);
    assert_null(m->operation);
    assert_string_equal(m->metadata->identity->resource_id, "model-0001");
    assert_int_equal(m->metadata->identity->generation, 3);
    assert_int_equal(m->metadata->policy->preferred_residency, WM_RES_MIXED);
    assert_true(m->metadata->policy->mixed_hot_ratio == 0.25);
    assert_int_equal(m->metadata->availability, WM_AVAIL_READY);
    assert_string_equal(m->metadata->manifest_key, r.manifest_key);
    assert_int_equal(m->metadata->manifest_sha256.len, WM_SHA256_LEN);
    assert_int_equal(m->metadata->logical_bytes, 1 << 20);
    assert_int_equal(m->metadata->updated_ms, r.updated_ms);
    assert_int_equal(m->metadata->active_leases, 2);
    assert_int_equal(m->metadata->degraded_from, WM_RES_MIXED);
    assert_true(m->metadata->degraded_from_hot_ratio == 0.5);
    wmrpc__metadata_response__free_unpacked(m, NULL);
}

/* exists false is the empty message, true the one field; both as
 * protobuf-c packs them. */
static void test_is_exist_response_is_protobuf_c_s_bytes(void **state)
{
    (void)state;
    for (int exists = 0; exists <= 1; exists++) {
        Wmrpc__IsExistResponse resp = WMRPC__IS_EXIST_RESPONSE__INIT;
        uint8_t ref[8], got[WM_IS_EXIST_RESPONSE_MAX];
        resp.exists = exists;
        size_t ref_n = protobuf_c_message_get_packed_size(&resp.base);
        assert_true(ref_n <= sizeof(ref));
        protobuf_c_message_pack(&resp.base, ref);
        size_t n = wm_pack_is_exist_response(exists, got);
        assert_int_equal(n, ref_n);
        assert_memory_equal(got, ref, n);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metadata_response_is_protobuf_c_s_bytes),
        cmocka_unit_test(test_zero_revision_and_the_empty_response),
        cmocka_unit_test(test_packed_bytes_decode_to_the_revision),
        cmocka_unit_test(test_is_exist_response_is_protobuf_c_s_bytes),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
