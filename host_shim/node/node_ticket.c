/* node_ticket.c -- minting and verifying HMAC-SHA256 range tickets.
 *
 * The encoding is fixed-layout big-endian (see node_ticket.h) so that a
 * verifier can bound every length before touching a byte and a ticket has
 * exactly one encoding. Verification recomputes the MAC over the bytes as
 * received and compares with CRYPTO_memcmp before it believes any field;
 * only then are expiry and use checked. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "node_ticket.h"

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

static int secret_ok(const ticket_secret *s)
{
    return s != NULL && s->len >= TICKET_SECRET_MIN && s->len <= TICKET_SECRET_MAX;
}

int ticket_secret_generate(ticket_secret *s, size_t len)
{
    if (s == NULL || len < TICKET_SECRET_MIN || len > TICKET_SECRET_MAX)
        return SMP_EINVAL;
    if (RAND_bytes(s->bytes, (int)len) != 1)
        return SMP_EIO;
    s->len = len;
    return SMP_OK;
}

int ticket_secret_set(ticket_secret *s, const void *bytes, size_t len)
{
    if (s == NULL || bytes == NULL || len < TICKET_SECRET_MIN || len > TICKET_SECRET_MAX)
        return SMP_EINVAL;
    memcpy(s->bytes, bytes, len);
    s->len = len;
    return SMP_OK;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int ticket_secret_from_hex(ticket_secret *s, const char *hex)
{
    size_t n;
    uint8_t tmp[TICKET_SECRET_MAX];
    if (s == NULL || hex == NULL)
        return SMP_EINVAL;
    n = strlen(hex);
    if (n % 2 != 0 || n / 2 < TICKET_SECRET_MIN || n / 2 > TICKET_SECRET_MAX)
        return SMP_EINVAL;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return SMP_EINVAL;
        tmp[i] = (uint8_t)(hi << 4 | lo);
    }
    return ticket_secret_set(s, tmp, n / 2);
}

uint64_t ticket_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Each thread that mints or verifies keeps one HMAC context keyed with the
 * secret it last used (keying and fetching the algorithm cost more than the
 * MAC of a ticket), and a nonce source: 8 random bytes drawn once, then a
 * counter. The state is freed when the thread exits. */
typedef struct mac_state {
    EVP_MAC *mac;
    EVP_MAC_CTX *ctx;         /* keyed with key[0..keylen), or NULL */
    uint8_t key[TICKET_SECRET_MAX];
    size_t keylen;
    uint8_t salt[8];
    uint64_t counter;
} mac_state;

static pthread_key_t g_mac_key;
static pthread_once_t g_mac_once = PTHREAD_ONCE_INIT;
static int g_mac_key_ok;

static void mac_state_free(void *p)
{
    mac_state *st = p;
    if (st == NULL)
        return;
    EVP_MAC_CTX_free(st->ctx);
    EVP_MAC_free(st->mac);
    OPENSSL_cleanse(st, sizeof(*st));
    free(st);
}

static void mac_key_create(void)
{
    g_mac_key_ok = pthread_key_create(&g_mac_key, mac_state_free) == 0;
}

/* This thread's state, created on first use. NULL when out of memory or
 * when OpenSSL has no HMAC or no random bytes. */
static mac_state *mac_state_get(void)
{
    mac_state *st;
    pthread_once(&g_mac_once, mac_key_create);
    if (!g_mac_key_ok)
        return NULL;
    if ((st = pthread_getspecific(g_mac_key)) != NULL)
        return st;
    if ((st = calloc(1, sizeof(*st))) == NULL)
        return NULL;
    if ((st->mac = EVP_MAC_fetch(NULL, "HMAC", NULL)) == NULL ||
        RAND_bytes(st->salt, sizeof(st->salt)) != 1 || pthread_setspecific(g_mac_key, st) != 0) {
        mac_state_free(st);
        return NULL;
    }
    return st;
}

/* HMAC-SHA256 of msg under secret into mac. SMP_OK or SMP_EIO. */
static int compute_mac(const ticket_secret *secret, const uint8_t *msg, size_t len,
                       uint8_t mac[TICKET_MAC_BYTES])
{
    mac_state *st = mac_state_get();
    size_t maclen = 0;
    if (st == NULL)
        return SMP_EIO;
    if (st->ctx == NULL || st->keylen != secret->len ||
        CRYPTO_memcmp(st->key, secret->bytes, secret->len) != 0) {
        OSSL_PARAM params[] = {
            OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
            OSSL_PARAM_construct_end(),
        };
        EVP_MAC_CTX_free(st->ctx);
        st->keylen = 0;
        if ((st->ctx = EVP_MAC_CTX_new(st->mac)) == NULL ||
            EVP_MAC_init(st->ctx, secret->bytes, secret->len, params) != 1) {
            EVP_MAC_CTX_free(st->ctx);
            st->ctx = NULL;
            return SMP_EIO;
        }
        memcpy(st->key, secret->bytes, secret->len);
        st->keylen = secret->len;
    } else if (EVP_MAC_init(st->ctx, NULL, 0, NULL) != 1) { /* same key, fresh MAC */
        return SMP_EIO;
    }
    if (EVP_MAC_update(st->ctx, msg, len) != 1 ||
        EVP_MAC_final(st->ctx, mac, &maclen, TICKET_MAC_BYTES) != 1 || maclen != TICKET_MAC_BYTES)
        return SMP_EIO;
    return SMP_OK;
}

/* A nonce no other ticket of this process carries: the thread's random salt
 * and its counter. SMP_OK or SMP_EIO. */
static int next_nonce(uint8_t nonce[16])
{
    mac_state *st = mac_state_get();
    if (st == NULL)
        return SMP_EIO;
    memcpy(nonce, st->salt, sizeof(st->salt));
    put_u64(nonce + 8, ++st->counter);
    return SMP_OK;
}

int ticket_mint(const ticket_secret *secret,
                const ticket_claims *c,
                uint8_t *out,
                size_t cap,
                size_t *out_len)
{
    size_t seglen, keylen, tenlen, body;
    if (!secret_ok(secret) || c == NULL || out == NULL || out_len == NULL)
        return SMP_EINVAL;
    if (c->op != TICKET_OP_WRITE && c->op != TICKET_OP_READ)
        return SMP_EINVAL;
    seglen = strnlen(c->segment, sizeof(c->segment));
    keylen = strnlen(c->key, sizeof(c->key));
    tenlen = strnlen(c->tenant, sizeof(c->tenant));
    if (seglen == 0 || seglen > TICKET_SEGMENT_MAX || keylen > TICKET_KEY_MAX ||
        tenlen > TICKET_TENANT_MAX)
        return SMP_EINVAL;
    body = TICKET_FIXED + seglen + keylen + tenlen;
    if (cap < body + TICKET_MAC_BYTES)
        return SMP_ERANGE;
    out[0] = TICKET_VERSION;
    out[1] = c->op;
    put_u16(out + 2, (uint16_t)seglen);
    put_u64(out + 4, c->offset);
    put_u64(out + 12, c->length);
    put_u64(out + 20, c->expiry_ms);
    if (next_nonce(out + 28) < 0)
        return SMP_EIO;
    put_u16(out + 44, (uint16_t)keylen);
    put_u32(out + 46, c->key_id);
    put_u16(out + 50, (uint16_t)tenlen);
    memcpy(out + TICKET_FIXED, c->segment, seglen);
    memcpy(out + TICKET_FIXED + seglen, c->key, keylen);
    memcpy(out + TICKET_FIXED + seglen + keylen, c->tenant, tenlen);
    if (compute_mac(secret, out, body, out + body) < 0)
        return SMP_EIO;
    *out_len = body + TICKET_MAC_BYTES;
    return SMP_OK;
}

int ticket_verify(const ticket_secret *secret,
                  const uint8_t *tok,
                  size_t len,
                  uint64_t now_ms,
                  ticket_claims *out)
{
    size_t seglen, keylen, tenlen, body;
    uint8_t mac[TICKET_MAC_BYTES];
    uint64_t expiry;

    if (!secret_ok(secret))
        return SMP_EINVAL;
    if (tok == NULL || len < TICKET_FIXED + 1 + TICKET_MAC_BYTES || len > TICKET_MAX_BYTES)
        return SMP_EPROTO;
    seglen = get_u16(tok + 2);
    keylen = get_u16(tok + 44);
    tenlen = get_u16(tok + 50);
    if (tok[0] != TICKET_VERSION || seglen == 0 || seglen > TICKET_SEGMENT_MAX ||
        keylen > TICKET_KEY_MAX || tenlen > TICKET_TENANT_MAX)
        return SMP_EPROTO;
    body = TICKET_FIXED + seglen + keylen + tenlen;
    if (len != body + TICKET_MAC_BYTES)
        return SMP_EPROTO;
    if (compute_mac(secret, tok, body, mac) < 0)
        return SMP_EIO;
    if (CRYPTO_memcmp(mac, tok + body, TICKET_MAC_BYTES) != 0)
        return SMP_EINVAL;
    /* authentic from here on: the master wrote these bytes */
    if (tok[1] != TICKET_OP_WRITE && tok[1] != TICKET_OP_READ)
        return SMP_EPROTO;
    if (memchr(tok + TICKET_FIXED, '\0', seglen) != NULL ||
        memchr(tok + TICKET_FIXED + seglen, '\0', keylen) != NULL ||
        memchr(tok + TICKET_FIXED + seglen + keylen, '\0', tenlen) != NULL)
        return SMP_EPROTO;
    expiry = get_u64(tok + 20);
    if (expiry <= now_ms)
        return SMP_ESTATE;
    if (out != NULL) {
        memset(out, 0, sizeof(*out));
        out->op = tok[1];
        out->offset = get_u64(tok + 4);
        out->length = get_u64(tok + 12);
        out->expiry_ms = expiry;
        memcpy(out->nonce, tok + 28, 16);
        memcpy(out->segment, tok + TICKET_FIXED, seglen);
        memcpy(out->key, tok + TICKET_FIXED + seglen, keylen);
        out->key_id = get_u32(tok + 46);
        memcpy(out->tenant, tok + TICKET_FIXED + seglen + keylen, tenlen);
    }
    return SMP_OK;
}

int ticket_keyring_init(ticket_keyring *r)
{
    ticket_keyring k;
    if (r == NULL)
        return SMP_EINVAL;
    memset(&k, 0, sizeof(k));
    if (ticket_secret_generate(&k.current, 32) < 0)
        return SMP_EIO;
    k.current_id = 1;
    *r = k;
    OPENSSL_cleanse(&k, sizeof(k));
    return SMP_OK;
}

int ticket_keyring_rotate(ticket_keyring *r)
{
    ticket_secret fresh;
    if (r == NULL)
        return SMP_EINVAL;
    if (ticket_secret_generate(&fresh, 32) < 0)
        return SMP_EIO;
    r->previous = r->current;
    r->previous_id = r->current_id;
    r->current = fresh;
    r->current_id++;
    OPENSSL_cleanse(&fresh, sizeof(fresh));
    return SMP_OK;
}

int ticket_verify_ring(const ticket_keyring *r,
                       const uint8_t *tok,
                       size_t len,
                       uint64_t now_ms,
                       ticket_claims *out)
{
    uint32_t id;
    if (r == NULL)
        return SMP_EINVAL;
    if (tok == NULL || len < TICKET_FIXED + 1 + TICKET_MAC_BYTES || len > TICKET_MAX_BYTES)
        return SMP_EPROTO;
    /* The id only picks the key; the MAC covers it, so a changed id fails
     * the signature like any other tampered byte. */
    id = get_u32(tok + 46);
    if (id == r->current_id)
        return ticket_verify(&r->current, tok, len, now_ms, out);
    if (r->previous.len > 0 && id == r->previous_id)
        return ticket_verify(&r->previous, tok, len, now_ms, out);
    return SMP_EINVAL;
}

int ticket_check_use(const ticket_claims *c,
                     uint8_t op,
                     const char *segment,
                     uint64_t offset,
                     uint64_t length)
{
    if (c == NULL || segment == NULL || c->op != op || strcmp(c->segment, segment) != 0)
        return SMP_EINVAL;
    if (op == TICKET_OP_WRITE)
        return offset == c->offset && length == c->length ? SMP_OK : SMP_ERANGE;
    /* READ: inside [c->offset, c->offset + c->length), overflow-safe */
    if (offset < c->offset || offset - c->offset > c->length ||
        length > c->length - (offset - c->offset))
        return SMP_ERANGE;
    return SMP_OK;
}
