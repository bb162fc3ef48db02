/* wc_digest.c -- payload-key and affinity digests, chunk checksums.
 *
 * See wc_digest.h. SHA-256 through OpenSSL's EVP interface, XXH3 through
 * libxxhash; the formats are the plugin's (weight_management.h). */
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wc_digest.h"
#include "wc_xxh3.h"

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int wc_payload_keys_digest(const char *const *keys, size_t n, uint8_t out[32])
{
    int rc = SMP_OK;
    const char **sorted = NULL;
    EVP_MD_CTX *ctx = NULL;
    unsigned len = 0;
    if (out == NULL || (n > 0 && keys == NULL)) return SMP_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (keys[i] == NULL || strchr(keys[i], '\n') != NULL) return SMP_EINVAL;
    if ((sorted = malloc((n ? n : 1) * sizeof *sorted)) == NULL) return SMP_ENOMEM;
    if (n > 0) memcpy(sorted, keys, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_str_ptr);
    if ((ctx = EVP_MD_CTX_new()) == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        rc = SMP_ENOMEM;
        goto free_all;
    }
    for (size_t i = 0; i < n; i++)
        if (EVP_DigestUpdate(ctx, sorted[i], strlen(sorted[i])) != 1 ||
            EVP_DigestUpdate(ctx, "\n", 1) != 1) {
            rc = SMP_ENOMEM;
            goto free_all;
        }
    if (EVP_DigestFinal_ex(ctx, out, &len) != 1) rc = SMP_ENOMEM;
free_all:
    EVP_MD_CTX_free(ctx);
    free(sorted);
    return rc;
}

int wc_affinity_digest(const wc_manifest *m, uint8_t out[32])
{
    int rc = SMP_OK;
    EVP_MD_CTX *ctx = NULL;
    unsigned len = 0;
    char line[80];
    if (m == NULL || out == NULL) return SMP_EINVAL;
    for (size_t i = 0; i < m->n_units; i++)
        for (uint32_t j = 0; j < m->units[i].n; j++) {
            uint32_t o = m->units[i].objects[j];
            if (o >= m->n_objects || strchr(m->objects[o].key, '\n') != NULL) return SMP_EINVAL;
        }
    if ((ctx = EVP_MD_CTX_new()) == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        rc = SMP_ENOMEM;
        goto free_ctx;
    }
    for (size_t i = 0; i < m->n_units; i++) {
        const wc_affinity_unit *u = &m->units[i];
        int n = snprintf(line, sizeof line, "unit %" PRIu64 " %u\n", u->logical_bytes, u->n);
        if (EVP_DigestUpdate(ctx, line, (size_t)n) != 1) {
            rc = SMP_ENOMEM;
            goto free_ctx;
        }
        for (uint32_t j = 0; j < u->n; j++) {
            const char *k = m->objects[u->objects[j]].key;
            if (EVP_DigestUpdate(ctx, k, strlen(k)) != 1 || EVP_DigestUpdate(ctx, "\n", 1) != 1) {
                rc = SMP_ENOMEM;
                goto free_ctx;
            }
        }
    }
    if (EVP_DigestFinal_ex(ctx, out, &len) != 1) rc = SMP_ENOMEM;
free_ctx:
    EVP_MD_CTX_free(ctx);
    return rc;
}

uint64_t wc_xxh3(const void *data, size_t len)
{
    return (uint64_t)XXH3_64bits(data, len);
}

void wc_chunk_sums(const void *data, uint64_t len, uint64_t chunk_bytes, uint64_t *sums)
{
    const uint8_t *p = data;
    for (uint64_t off = 0, i = 0; off < len; off += chunk_bytes, i++) {
        uint64_t n = len - off < chunk_bytes ? len - off : chunk_bytes;
        sums[i] = wc_xxh3(p + off, (size_t)n);
    }
}
