/* node_ticket.h -- signed tickets that let a client write (or read) one
 * range of one segment on a node.
 *
 * The master allocates a range for a put and mints a ticket for it with a
 * secret it shares with its nodes; the client carries the ticket as opaque
 * bytes to the node's data server, which verifies it and then accepts a
 * write of exactly that range (or a read inside it). A ticket binds: the
 * operation, the segment id, the offset and length, the object key and its
 * tenant, the id of the signing key, an expiry (milliseconds of wall
 * clock since the epoch, since master and node are different hosts), and a
 * 16-byte nonce that makes every ticket distinct. It is signed with
 * HMAC-SHA256 (OpenSSL) and compared in constant time (CRYPTO_memcmp).
 *
 * Wire format (all integers big-endian), TICKET_FIXED + S + K + T + 32 bytes:
 *   0  u8   version (TICKET_VERSION = 2; version 1 had no key id and tenant
 *           and is refused as malformed)
 *   1  u8   op (TICKET_OP_WRITE = 1, TICKET_OP_READ = 2)
 *   2  u16  S: bytes of the segment id (1..256)
 *   4  u64  offset
 *   12 u64  length
 *   20 u64  expiry, ms since the epoch
 *   28 16B  nonce
 *   44 u16  K: bytes of the key (0..1024)
 *   46 u32  key id: which of the node's keys signed it (ticket_keyring)
 *   50 u16  T: bytes of the tenant (0..256)
 *   52 S    segment id, then K bytes of object key, then T bytes of tenant
 *   ..  32B HMAC-SHA256(secret, every byte before it)
 *
 * Reads and writes both need a ticket by default (node_data.h): the master
 * mints a WRITE ticket with each put start's range and a READ ticket with
 * each replica it hands out (a memory range, or a cold file's data, whose
 * "segment" is the file's bare name); a read ticket covers every range
 * inside its own. A node can be told to serve reads without tickets only
 * with an explicit insecure setting.
 *
 * Keys and rotation: a node holds two keys at most, the current one and the
 * previous one, each with a 32-bit id; tickets name the id of the key that
 * signed them, so a ticket minted just before a rotation still verifies
 * after it. A ticket signed by a key the node no longer holds is refused as
 * a bad signature (SMP_EINVAL).
 *
 * Replay: a READ ticket may be used any number of times until it expires
 * (a reader fetches its range in windows and retries after a lost
 * connection; a read changes nothing). A WRITE ticket is single use: the
 * node remembers the nonce of each completed write until the ticket
 * expires and refuses the same ticket again (SMP_EEXIST), so a captured
 * ticket cannot overwrite a range after the client's write. A write that
 * did not complete (connection lost in the middle) does not consume the
 * ticket, so the client may write the range again. Keep expiries short
 * (seconds to minutes). */
#ifndef HOST_NODE_TICKET_H
#define HOST_NODE_TICKET_H

#include <stddef.h>
#include <stdint.h>

#include "store_plugin.h"

#define TICKET_VERSION 2
#define TICKET_OP_WRITE 1
#define TICKET_OP_READ 2
#define TICKET_FIXED 52
#define TICKET_TENANT_MAX 256
#define TICKET_MAC_BYTES 32
#define TICKET_SEGMENT_MAX 256
#define TICKET_KEY_MAX 1024
#define TICKET_MAX_BYTES \
    (TICKET_FIXED + TICKET_SEGMENT_MAX + TICKET_KEY_MAX + TICKET_TENANT_MAX + TICKET_MAC_BYTES)
#define TICKET_SECRET_MIN 16
#define TICKET_SECRET_MAX 64

/* The shared secret of a master and its nodes. */
typedef struct ticket_secret {
    uint8_t bytes[TICKET_SECRET_MAX];
    size_t len;
} ticket_secret;

/* A node's keys: the current one (what the master signs with once the node
 * reported it) and, after a rotation, the previous one. */
typedef struct ticket_keyring {
    uint32_t current_id;
    ticket_secret current;
    uint32_t previous_id;
    ticket_secret previous;   /* len 0: none */
} ticket_keyring;

/* What a ticket says. Strings are NUL-terminated copies. */
typedef struct ticket_claims {
    uint8_t op;
    char segment[TICKET_SEGMENT_MAX + 1];
    uint64_t offset;
    uint64_t length;
    uint64_t expiry_ms;
    uint8_t nonce[16];
    char key[TICKET_KEY_MAX + 1];
    uint32_t key_id;          /* the id of the signing key */
    char tenant[TICKET_TENANT_MAX + 1]; /* the object's tenant ("" = none) */
} ticket_claims;

/* Fill *s with len random bytes (RAND_bytes). SMP_EINVAL for a len outside
 * TICKET_SECRET_MIN..TICKET_SECRET_MAX, SMP_EIO when the RNG failed. */
int ticket_secret_generate(ticket_secret *s, size_t len);

/* Copy len bytes into *s. SMP_EINVAL when len is out of bounds. */
int ticket_secret_set(ticket_secret *s, const void *bytes, size_t len);

/* Parse a secret from hex (2 * len characters, TICKET_SECRET_MIN..MAX
 * bytes), as it would appear in a config file. SMP_EINVAL. */
int ticket_secret_from_hex(ticket_secret *s, const char *hex);

/* Wall clock in ms since the epoch (what expiries are measured against). */
uint64_t ticket_now_ms(void);

/* Sign a ticket for c (op, segment, offset, length, expiry_ms, key,
 * key_id, tenant; the
 * nonce of c is ignored: a fresh one is made from a random per-thread salt
 * and a counter) into out (cap bytes;
 * TICKET_MAX_BYTES always suffices) and set *out_len. SMP_OK; SMP_EINVAL
 * (unknown op, empty or too long segment, too long key or tenant, bad
 * secret),
 * SMP_ERANGE (cap too small), SMP_EIO (RNG or HMAC failed). */
int ticket_mint(const ticket_secret *secret,
                const ticket_claims *c,
                uint8_t *out,
                size_t cap,
                size_t *out_len);

/* Check a ticket's form and signature and that it has not expired at now_ms,
 * and decode it into *out (may be NULL). The signature is checked before any
 * claim is believed. Returns SMP_OK, or:
 *   SMP_EPROTO  malformed (short, lengths that do not add up, bad version,
 *               unknown op, NUL or empty segment)
 *   SMP_EINVAL  the signature does not match (forged, tampered, other key)
 *   SMP_ESTATE  expired (expiry_ms <= now_ms)
 * Never reads outside tok[0..len). */
int ticket_verify(const ticket_secret *secret,
                  const uint8_t *tok,
                  size_t len,
                  uint64_t now_ms,
                  ticket_claims *out);

/* Check that verified claims allow op on [offset, offset + length) of
 * segment: a WRITE ticket allows exactly its own range, a READ ticket any
 * range inside its own. SMP_OK, SMP_EINVAL (other op or segment), SMP_ERANGE
 * (range not allowed). */
/* Start a keyring with a fresh random current key of id 1 and no previous
 * key. SMP_OK or SMP_EIO. */
int ticket_keyring_init(ticket_keyring *r);

/* Rotate: the current key becomes the previous one (the old previous key is
 * forgotten) and a fresh random key of the next id becomes current.
 * SMP_OK or SMP_EIO (nothing changed). */
int ticket_keyring_rotate(ticket_keyring *r);

/* ticket_verify with the key of r the ticket names by id (current or
 * previous). A ticket naming another id is SMP_EINVAL (bad signature:
 * signed with a key this node does not hold). */
int ticket_verify_ring(const ticket_keyring *r,
                       const uint8_t *tok,
                       size_t len,
                       uint64_t now_ms,
                       ticket_claims *out);

int ticket_check_use(const ticket_claims *c,
                     uint8_t op,
                     const char *segment,
                     uint64_t offset,
                     uint64_t length);

#endif /* HOST_NODE_TICKET_H */
