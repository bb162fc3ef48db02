/* test_node_ticket.c -- HMAC-SHA256 write and read tickets.
 *
 * A minted ticket verifies and decodes to what was signed; a forged one
 * (other secret), a tampered one (any byte flipped), an expired one, a
 * truncated or padded one are refused with their own codes; use outside the
 * ticket's op, segment or range is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "node_ticket.h"

static ticket_secret g_secret;

static int setup(void **state)
{
    (void)state;
    return ticket_secret_generate(&g_secret, 32) == SMP_OK ? 0 : -1;
}

static size_t mint(uint8_t op, const char *seg, uint64_t off, uint64_t len, uint64_t expiry,
                   uint8_t *out)
{
    ticket_claims c;
    size_t n = 0;
    memset(&c, 0, sizeof(c));
    c.op = op;
    snprintf(c.segment, sizeof(c.segment), "%s", seg);
    snprintf(c.key, sizeof(c.key), "weights/t/ns/r/1/1/payload/0");
    c.offset = off;
    c.length = len;
    c.expiry_ms = expiry;
    assert_int_equal(ticket_mint(&g_secret, &c, out, TICKET_MAX_BYTES, &n), SMP_OK);
    return n;
}

/* The MAC is standard HMAC-SHA256 of every byte before it, whichever secret
 * the thread used last (the keyed context is cached per thread). */
static void test_mac_is_hmac_sha256(void **state)
{
    uint8_t t[TICKET_MAX_BYTES], other_t[TICKET_MAX_BYTES], want[32];
    unsigned int wlen = 0;
    ticket_secret other;
    ticket_claims c;
    size_t n, on = 0;
    (void)state;
    assert_int_equal(ticket_secret_generate(&other, 24), SMP_OK);
    memset(&c, 0, sizeof(c));
    c.op = TICKET_OP_WRITE;
    snprintf(c.segment, sizeof(c.segment), "seg");
    c.length = 1;
    c.expiry_ms = ticket_now_ms() + 60000;
    for (int round = 0; round < 3; round++) {
        n = mint(TICKET_OP_WRITE, "node1-seg0", 0, 64, ticket_now_ms() + 60000, t);
        assert_non_null(HMAC(EVP_sha256(), g_secret.bytes, (int)g_secret.len, t, n - 32, want, &wlen));
        assert_memory_equal(t + n - 32, want, 32);
        /* re-keying for another secret in between changes nothing */
        assert_int_equal(ticket_mint(&other, &c, other_t, sizeof(other_t), &on), SMP_OK);
        assert_non_null(HMAC(EVP_sha256(), other.bytes, (int)other.len, other_t, on - 32, want, &wlen));
        assert_memory_equal(other_t + on - 32, want, 32);
        assert_int_equal(ticket_verify(&g_secret, t, n, ticket_now_ms(), NULL), SMP_OK);
        assert_int_equal(ticket_verify(&g_secret, other_t, on, ticket_now_ms(), NULL), SMP_EINVAL);
    }
}

/* A ticket round-trips: every claim comes back as signed. */
static void test_mint_and_verify(void **state)
{
    uint8_t t1[TICKET_MAX_BYTES], t2[TICKET_MAX_BYTES];
    uint64_t now = ticket_now_ms();
    ticket_claims c;
    size_t n1 = mint(TICKET_OP_WRITE, "node1-seg0", 4096, 1 << 20, now + 60000, t1);
    size_t n2 = mint(TICKET_OP_WRITE, "node1-seg0", 4096, 1 << 20, now + 60000, t2);
    (void)state;
    assert_int_equal(ticket_verify(&g_secret, t1, n1, now, &c), SMP_OK);
    assert_int_equal(c.op, TICKET_OP_WRITE);
    assert_string_equal(c.segment, "node1-seg0");
    assert_string_equal(c.key, "weights/t/ns/r/1/1/payload/0");
    assert_int_equal(c.offset, 4096);
    assert_int_equal(c.length, 1 << 20);
    assert_int_equal(c.expiry_ms, now + 60000);
    /* two tickets for the same range differ (nonce) */
    assert_int_equal(n1, n2);
    assert_memory_not_equal(t1, t2, n1);
    assert_int_equal(ticket_check_use(&c, TICKET_OP_WRITE, "node1-seg0", 4096, 1 << 20), SMP_OK);
}

/* Another secret, or any flipped byte, is a bad signature (or malformed). */
static void test_forged_and_tampered_are_refused(void **state)
{
    uint8_t t[TICKET_MAX_BYTES];
    uint64_t now = ticket_now_ms();
    ticket_secret other;
    size_t n = mint(TICKET_OP_WRITE, "s", 0, 64, now + 60000, t);
    (void)state;
    assert_int_equal(ticket_secret_generate(&other, 32), SMP_OK);
    assert_int_equal(ticket_verify(&other, t, n, now, NULL), SMP_EINVAL);
    for (size_t i = 0; i < n; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            int rc;
            t[i] ^= (uint8_t)(1u << bit);
            rc = ticket_verify(&g_secret, t, n, now, NULL);
            assert_true(rc == SMP_EINVAL || rc == SMP_EPROTO);
            t[i] ^= (uint8_t)(1u << bit);
        }
    }
    assert_int_equal(ticket_verify(&g_secret, t, n, now, NULL), SMP_OK);
}

/* An expired ticket is refused even with a good signature. */
static void test_expired_is_refused(void **state)
{
    uint8_t t[TICKET_MAX_BYTES];
    uint64_t now = ticket_now_ms();
    size_t n = mint(TICKET_OP_WRITE, "s", 0, 64, now - 1, t);
    (void)state;
    assert_int_equal(ticket_verify(&g_secret, t, n, now, NULL), SMP_ESTATE);
    n = mint(TICKET_OP_WRITE, "s", 0, 64, now, t);
    assert_int_equal(ticket_verify(&g_secret, t, n, now, NULL), SMP_ESTATE);
    assert_int_equal(ticket_verify(&g_secret, t, n, now - 1, NULL), SMP_OK);
}

/* Truncated, padded, empty and absurd inputs never verify and never crash. */
static void test_malformed_is_refused(void **state)
{
    uint8_t t[TICKET_MAX_BYTES + 8];
    uint64_t now = ticket_now_ms();
    size_t n = mint(TICKET_OP_READ, "seg", 0, 64, now + 1000, t);
    (void)state;
    assert_int_equal(ticket_verify(&g_secret, NULL, 0, now, NULL), SMP_EPROTO);
    for (size_t k = 0; k < n; k++)
        assert_int_not_equal(ticket_verify(&g_secret, t, k, now, NULL), SMP_OK);
    t[n] = 0;
    assert_int_equal(ticket_verify(&g_secret, t, n + 1, now, NULL), SMP_EPROTO);
    memset(t, 0xff, sizeof(t));
    assert_int_equal(ticket_verify(&g_secret, t, sizeof(t), now, NULL), SMP_EPROTO);
    assert_int_equal(ticket_verify(&g_secret, t, 100, now, NULL), SMP_EPROTO);
}

/* A write ticket allows exactly its range; a read ticket any range inside
 * its own; neither allows the other op or another segment. */
static void test_use_is_bounded(void **state)
{
    uint8_t t[TICKET_MAX_BYTES];
    uint64_t now = ticket_now_ms();
    ticket_claims c;
    size_t n = mint(TICKET_OP_WRITE, "seg", 1024, 4096, now + 1000, t);
    (void)state;
    assert_int_equal(ticket_verify(&g_secret, t, n, now, &c), SMP_OK);
    assert_int_equal(ticket_check_use(&c, TICKET_OP_WRITE, "seg", 1024, 4095), SMP_ERANGE);
    assert_int_equal(ticket_check_use(&c, TICKET_OP_WRITE, "seg", 1025, 4096), SMP_ERANGE);
    assert_int_equal(ticket_check_use(&c, TICKET_OP_WRITE, "seg2", 1024, 4096), SMP_EINVAL);
    assert_int_equal(ticket_check_use(&c, TICKET_OP_READ, "seg", 1024, 4096), SMP_EINVAL);

    n = mint(TICKET_OP_READ, "seg", 1024, 4096, now + 1000, t);
    assert_int_equal(ticket_verify(&g_secret, t, n, now, &c), SMP_OK);
    assert_int_equal(ticket_check_use(&c, TICKET_OP_READ, "seg", 1024, 4096), SMP_OK);
    assert_int_equal(ticket_check_use(&c, TICKET_OP_READ, "seg", 2048, 100), SMP_OK);
    assert_int_equal(ticket_check_use(&c, TICKET_OP_READ, "seg", 5000, 121), SMP_ERANGE);
    assert_int_equal(ticket_check_use(&c, TICKET_OP_READ, "seg", 1000, 10), SMP_ERANGE);
    assert_int_equal(ticket_check_use(&c, TICKET_OP_READ, "seg", 2048, UINT64_MAX), SMP_ERANGE);
    assert_int_equal(ticket_check_use(&c, TICKET_OP_WRITE, "seg", 1024, 4096), SMP_EINVAL);
}

/* Secrets: bounds, hex parsing; minting refuses bad claims. */
static void test_secrets_and_bad_claims(void **state)
{
    ticket_secret s;
    ticket_claims c;
    uint8_t out[TICKET_MAX_BYTES];
    size_t n;
    (void)state;
    assert_int_equal(ticket_secret_generate(&s, 8), SMP_EINVAL);
    assert_int_equal(ticket_secret_from_hex(&s, "00112233445566778899aabbccddeeff"), SMP_OK);
    assert_int_equal(s.len, 16);
    assert_int_equal(s.bytes[15], 0xff);
    assert_int_equal(ticket_secret_from_hex(&s, "0011"), SMP_EINVAL);
    assert_int_equal(ticket_secret_from_hex(&s, "zz112233445566778899aabbccddeeff"), SMP_EINVAL);
    memset(&c, 0, sizeof(c));
    c.op = TICKET_OP_WRITE;
    assert_int_equal(ticket_mint(&g_secret, &c, out, sizeof(out), &n), SMP_EINVAL); /* no segment */
    strcpy(c.segment, "s");
    c.op = 9;
    assert_int_equal(ticket_mint(&g_secret, &c, out, sizeof(out), &n), SMP_EINVAL);
    c.op = TICKET_OP_WRITE;
    assert_int_equal(ticket_mint(&g_secret, &c, out, 40, &n), SMP_ERANGE);
}

/* Key id and tenant travel signed; a keyring verifies tickets of its
 * current and previous key by id and refuses a key it no longer holds; a
 * version-1 ticket is malformed. */
static void test_key_ids_tenant_and_rotation(void **state)
{
    ticket_keyring ring;
    ticket_claims c, out;
    uint8_t t1[TICKET_MAX_BYTES], t2[TICKET_MAX_BYTES];
    size_t n1 = 0, n2 = 0;
    uint64_t now = ticket_now_ms();
    (void)state;
    assert_int_equal(ticket_keyring_init(&ring), SMP_OK);
    assert_int_equal(ring.current_id, 1);
    memset(&c, 0, sizeof(c));
    c.op = TICKET_OP_READ;
    snprintf(c.segment, sizeof(c.segment), "seg");
    snprintf(c.key, sizeof(c.key), "weights/team-a/ns/r/1/1/payload/0");
    snprintf(c.tenant, sizeof(c.tenant), "team-a");
    c.length = 64;
    c.expiry_ms = now + 60000;
    c.key_id = ring.current_id;
    assert_int_equal(ticket_mint(&ring.current, &c, t1, sizeof(t1), &n1), SMP_OK);
    assert_int_equal(ticket_verify_ring(&ring, t1, n1, now, &out), SMP_OK);
    assert_int_equal(out.key_id, 1);
    assert_string_equal(out.tenant, "team-a");
    assert_string_equal(out.key, c.key);

    assert_int_equal(ticket_keyring_rotate(&ring), SMP_OK);
    assert_int_equal(ring.current_id, 2);
    assert_int_equal(ring.previous_id, 1);
    c.key_id = ring.current_id;
    assert_int_equal(ticket_mint(&ring.current, &c, t2, sizeof(t2), &n2), SMP_OK);
    assert_int_equal(ticket_verify_ring(&ring, t1, n1, now, NULL), SMP_OK); /* previous */
    assert_int_equal(ticket_verify_ring(&ring, t2, n2, now, NULL), SMP_OK);
    /* key 1 signed with key 2's secret: the id picks key 1, the MAC fails */
    c.key_id = 1;
    assert_int_equal(ticket_mint(&ring.current, &c, t2, sizeof(t2), &n2), SMP_OK);
    assert_int_equal(ticket_verify_ring(&ring, t2, n2, now, NULL), SMP_EINVAL);

    assert_int_equal(ticket_keyring_rotate(&ring), SMP_OK); /* key 1 forgotten */
    assert_int_equal(ticket_verify_ring(&ring, t1, n1, now, NULL), SMP_EINVAL);

    /* a changed tenant breaks the signature */
    assert_int_equal(ticket_keyring_init(&ring), SMP_OK);
    c.key_id = 1;
    assert_int_equal(ticket_mint(&ring.current, &c, t1, sizeof(t1), &n1), SMP_OK);
    t1[n1 - 33] ^= 1; /* the tenant's last byte */
    assert_int_equal(ticket_verify_ring(&ring, t1, n1, now, NULL), SMP_EINVAL);
    t1[n1 - 33] ^= 1;
    t1[0] = 1; /* version 1 */
    assert_int_equal(ticket_verify_ring(&ring, t1, n1, now, NULL), SMP_EPROTO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mint_and_verify),
        cmocka_unit_test(test_mac_is_hmac_sha256),
        cmocka_unit_test(test_forged_and_tampered_are_refused),
        cmocka_unit_test(test_expired_is_refused),
        cmocka_unit_test(test_malformed_is_refused),
        cmocka_unit_test(test_use_is_bounded),
        cmocka_unit_test(test_secrets_and_bad_claims),
        cmocka_unit_test(test_key_ids_tenant_and_rotation),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
