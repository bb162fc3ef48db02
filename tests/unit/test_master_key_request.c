/* test_master_key_request.c -- the KeyRequest decoded by hand
 * (master_key_request.c) answers as protobuf-c's key_request__unpack does:
 * the same key for every body it accepts, a refusal for every body it
 * refuses. Crafted bodies for each rule, then random ones (mutations of
 * valid bodies and plain noise) held against the oracle. The fuzz target
 * fuzz_key_request does the same with coverage-guided bodies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "master_key_request_same.h"

/* Hold the hand decoder against protobuf-c on body[0..len)
 * (master_key_request_same.h); returns 1 when both accepted it, 0 when
 * both refused it. */
static int same_as_protobuf_c(const uint8_t *body, size_t len)
{
    char why[256];
    int decoded = 0;
    if (mkr_same(body, len, &decoded, why, sizeof(why)) < 0) fail_msg("%s", why);
    return decoded;
}

/* What the hand decoder gives for body (which must decode). */
static void expect_key(const uint8_t *body, size_t len, const char *key)
{
    assert_int_equal(same_as_protobuf_c(body, len), 1);
    master_key_req r;
    assert_int_equal(master_key_req_decode(&r, body, len), 0);
    assert_string_equal(r.key, key);
    master_key_req_free(&r);
}

static void test_keys_as_protobuf_c_gives_them(void **state)
{
    (void)state;
    expect_key(NULL, 0, "");                                     /* no field: "" */
    expect_key((const uint8_t *)"\x0a\x00", 2, "");              /* given empty */
    expect_key((const uint8_t *)"\x0a\x03" "abc", 5, "abc");
    expect_key((const uint8_t *)"\x0a\x01" "a" "\x0a\x02" "bc", 7, "bc"); /* the last wins */
    expect_key((const uint8_t *)"\x0a\x03" "a\0c", 5, "a");      /* a C string stops at NUL */
    /* unknown fields of every wire type are skipped, before and after */
    static const uint8_t skipped[] = {0x10, 0x96, 0x01,                   /* 2: varint */
                                      0x19, 1, 2, 3, 4, 5, 6, 7, 8,       /* 3: 64-bit */
                                      0x0a, 0x02, 'k', '1',               /* 1: the key */
                                      0x22, 0x01, 'x',                    /* 4: bytes */
                                      0x2d, 1, 2, 3, 4,                   /* 5: 32-bit */
                                      0xf8, 0xff, 0xff, 0xff, 0x0f, 0x01}; /* a large field number */
    expect_key(skipped, sizeof(skipped), "k1");
}

/* Keys longer than the decoder's room go to the heap; the boundary both
 * ways. */
static void test_long_keys(void **state)
{
    (void)state;
    static const size_t lens[] = {254, 255, 256, 257, 1024, 70000};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        size_t n = lens[i];
        uint8_t *body = malloc(n + 8);
        char *key = malloc(n + 1);
        assert_non_null(body);
        assert_non_null(key);
        uint8_t *p = body;
        *p++ = 0x0a;
        size_t v = n;
        while (v >= 0x80) {
            *p++ = (uint8_t)(v | 0x80);
            v >>= 7;
        }
        *p++ = (uint8_t)v;
        for (size_t k = 0; k < n; k++) key[k] = (char)('a' + k % 26);
        key[n] = '\0';
        memcpy(p, key, n);
        expect_key(body, (size_t)(p - body) + n, key);
        free(body);
        free(key);
    }
}

static void test_bodies_protobuf_c_refuses_are_refused(void **state)
{
    (void)state;
    static const struct {
        const char *what;
        const char *bytes;
        size_t len;
    } bad[] = {
        {"field 1 as a varint", "\x08\x05", 2},
        {"field 1 as 32 bits", "\x0d\x01\x02\x03\x04", 5},
        {"a length past the end", "\x0a\x05" "ab", 4},
        {"a truncated varint", "\x10\x80", 2},
        {"wire type 3 (group start)", "\x0b", 1},
        {"wire type 7", "\x0f", 1},
        {"field number 0", "\x02\x00", 2},
        {"a truncated tag", "\x80", 1},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (same_as_protobuf_c((const uint8_t *)bad[i].bytes, bad[i].len) != 0)
            fail_msg("%s was accepted", bad[i].what);
    }
}

/* Random bodies: valid ones with bytes changed, inserted or cut, and
 * noise; the two decoders must agree on each. */
static void test_random_bodies_agree(void **state)
{
    (void)state;
    static const uint8_t seeds[][12] = {
        {0x0a, 0x03, 'a', 'b', 'c'},
        {0x10, 0x01, 0x0a, 0x01, 'z', 0x1a, 0x00},
        {0x0a, 0x00, 0x0a, 0x02, 'q', 'r'},
        {0x25, 1, 2, 3, 4, 0x0a, 0x01, 'k'},
    };
    static const size_t seed_len[] = {5, 7, 6, 8};
    uint64_t x = 0x9e3779b97f4a7c15ull; /* xorshift: the same bodies every run */
    size_t accepted = 0, refused = 0;
    for (int round = 0; round < 200000; round++) {
        uint8_t body[24];
        size_t len;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (x % 4 == 0) { /* noise */
            len = (size_t)(x >> 8) % sizeof(body);
            for (size_t i = 0; i < len; i++) body[i] = (uint8_t)(x >> ((i % 7) * 8)) ^ (uint8_t)i;
        } else {
            size_t s = (size_t)(x >> 4) % 4;
            len = seed_len[s];
            memcpy(body, seeds[s], len);
            size_t at = (size_t)(x >> 12) % len;
            switch ((x >> 20) % 3) {
            case 0: body[at] = (uint8_t)(x >> 28); break;                 /* a byte changed */
            case 1: len = at; break;                                      /* cut */
            default:                                                      /* a byte inserted */
                memmove(body + at + 1, body + at, len - at);
                body[at] = (uint8_t)(x >> 36);
                len++;
            }
        }
        if (same_as_protobuf_c(len ? body : NULL, len)) accepted++;
        else refused++;
    }
    /* both outcomes were exercised many times */
    assert_true(accepted > 10000);
    assert_true(refused > 10000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_as_protobuf_c_gives_them),
        cmocka_unit_test(test_long_keys),
        cmocka_unit_test(test_bodies_protobuf_c_refuses_are_refused),
        cmocka_unit_test(test_random_bodies_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
