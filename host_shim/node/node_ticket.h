/* node_ticket.h -- signed tickets that let a client write (or read) one
 * range of one segment on a node.
 *
 * The master allocates a range for a put and mints a ticket for it with a
 * secret it shares with its nodes; the client carries the ticket as opaque
 * bytes to the node's data server, which verifies it and then accepts a
 * write of exactly that range. A ticket binds: the operation, the segment
 * id, the offset and length, the object key, an expiry (milliseconds of wall
 * clock since the epoch, since master and node are different hosts), and a
 * 16-byte nonce that makes every ticket distinct. It is signed with
 * HMAC-SHA256 (OpenSSL) and compared in constant time (CRYPTO_memcmp).
 *
 * Wire format (all integers big-endian), TICKET_FIXED + S + K + 32 bytes:
 *   0  u8   version (TICKET_VERSION = 1)
 *   1  u8   op (TICKET_OP_WRITE = 1, TICKET_OP_READ = 2)
 *   2  u16  S: bytes of the segment id (1..256)
 *   4  u64  offset
 *   12 u64  length
 *   20 u64  expiry, ms since the epoch
 *   28 16B  nonce
 *   44 u16  K: bytes of the key (0..1024)
 *   46 S    segment id, then K bytes of key
 *   ..  32B HMAC-SHA256(secret, every byte before it)
 *
 * Reads: a node serves reads of any range of its segments without a ticket
 * by default, because what a client may read is governed by the read lease
 * the master grants with the replica list, and nodes sit on the cluster's
 * private network. A data server can be configured to demand READ tickets
 * (node_data.h); a read ticket covers every range inside its own.
 *
 * A ticket can be replayed until it expires; a replay writes the same bytes
 * into the same still-pending range, which is harmless, so nodes keep no
 * nonce cache. Keep expiries short (seconds to minutes). */
#ifndef HOST_NODE_TICKET_H
#define HOST_NODE_TICKET_H

#include <stddef.h>
#include <stdint.h>

#include "store_plugin.h"

#define TICKET_VERSION 1
#define TICKET_OP_WRITE 1
#define TICKET_OP_READ 2
#define TICKET_FIXED 46
#define TICKET_MAC_BYTES 32
#define TICKET_SEGMENT_MAX 256
#define TICKET_KEY_MAX 1024
#define TICKET_MAX_BYTES (TICKET_FIXED + TICKET_SEGMENT_MAX + TICKET_KEY_MAX + TICKET_MAC_BYTES)
#define TICKET_SECRET_MIN 16
#define TICKET_SECRET_MAX 64

/* The shared secret of a master and its nodes. */
typedef struct ticket_secret {
    uint8_t bytes[TICKET_SECRET_MAX];
    size_t len;
} ticket_secret;

/* What a ticket says. Strings are NUL-terminated copies. */
typedef struct ticket_claims {
    uint8_t op;
    char segment[TICKET_SEGMENT_MAX + 1];
    uint64_t offset;
    uint64_t length;
    uint64_t expiry_ms;
    uint8_t nonce[16];
    char key[TICKET_KEY_MAX + 1];
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

/* Sign a ticket for c (op, segment, offset, length, expiry_ms, key; the
 * nonce of c is ignored: a fresh one is made from a random per-thread salt
 * and a counter) into out (cap bytes;
 * TICKET_MAX_BYTES always suffices) and set *out_len. SMP_OK; SMP_EINVAL
 * (unknown op, empty or too long segment, too long key, bad secret),
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
int ticket_check_use(const ticket_claims *c,
                     uint8_t op,
                     const char *segment,
                     uint64_t offset,
                     uint64_t length);

#endif /* HOST_NODE_TICKET_H */
