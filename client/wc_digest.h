/* wc_digest.h -- the digests a weight commit carries, computed by the client.
 *
 * The master seals a revision with the SHA-256 of its sorted payload keys
 * and of its affinity summary; it computes both from what the commit says
 * (weight_plugin/weight_management.h, wm_payload_keys_digest and
 * wm_affinity_digest) and refuses a commit whose digests differ. These are
 * the client's own implementations of the same byte formats, so the two
 * sides agree byte for byte (tests/unit/test_wc_digest.c checks it against
 * the plugin's code). Also the per-chunk XXH3-64 checksums weight_put stores
 * in the manifest for each payload object and weight_get verifies. Pure. */
#ifndef WC_DIGEST_H
#define WC_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include "wc_manifest.h"

/* SHA-256 over the keys sorted byte-wise, each followed by '\n'. SMP_OK,
 * SMP_EINVAL (a NULL key or one holding '\n'), SMP_ENOMEM. */
int wc_payload_keys_digest(const char *const *keys, size_t n, uint8_t out[32]);

/* SHA-256 over the affinity units of finalized m in order: for each, the line
 * "unit <logical_bytes> <n_members>\n" then each member's key (its objects
 * in ascending index order) and '\n'. SMP_OK, SMP_EINVAL, SMP_ENOMEM. */
int wc_affinity_digest(const wc_manifest *m, uint8_t out[32]);

/* XXH3-64 of each chunk_bytes-sized chunk of len bytes at data into sums
 * (ceil(len / chunk_bytes) entries). */
void wc_chunk_sums(const void *data, uint64_t len, uint64_t chunk_bytes, uint64_t *sums);

/* XXH3-64 of one buffer. */
uint64_t wc_xxh3(const void *data, size_t len);

#endif /* WC_DIGEST_H */
