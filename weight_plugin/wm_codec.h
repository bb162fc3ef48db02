/* wm_codec.h -- the weight plugin's records on disk.
 *
 * Converts between the plain records of weight_management.h and the
 * protobuf-c messages of proto/weight_records.proto: the payloads of OpLog
 * types 8-12 and the `weight_metadata` snapshot section. Encoding refuses a
 * record that breaks an invariant (nothing invalid is ever written); decoding
 * trusts nothing: every enum, identity, key, digest length, count and the
 * invariants of weight_metadata_rules.c are checked, and a failure is
 * SMP_EPROTO with a sentence naming the fault. No function here calls the
 * host. */
#ifndef WM_CODEC_H
#define WM_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "weight_management.h"

/* Type 8: a revision record, the operations the same mutation created or
 * changed, and the affinity summary when it is first recorded. */
typedef struct wm_metadata_upsert {
    wm_revision revision;
    wm_operation *operations; /* owned when decoded */
    size_t n_operations;
    int has_affinity;
    wm_affinity affinity;     /* owned when decoded */
    /* Appended: a lease granted by the same mutation (a promotion on access),
     * fenced on the revision's metadata generation in this record. */
    int has_lease;
    wm_lease lease;
    /* Appended (issue 20): when decoded, the storage revision.group_key,
     * revision.manifest_key and the strings of every identity of the record
     * point into (owned; NULL otherwise). */
    char *keys;
} wm_metadata_upsert;

/* Type 9: the record leaves the table (with the listed ended operations). */
typedef struct wm_metadata_delete {
    wm_identity id;
    uint64_t metadata_generation;
    wm_delete_reason reason;
    uint64_t *operation_ids;  /* owned when decoded */
    size_t n_operation_ids;
    /* Appended (issue 20): when decoded, the storage id's strings point
     * into (owned; NULL otherwise). */
    char *strs;
} wm_metadata_delete;

/* Type 11: a lease ends. */
typedef struct wm_lease_delete {
    uint64_t lease_id;
    wm_identity id_of;
    wm_lease_end reason;
} wm_lease_delete;

/* The whole weight table as the snapshot section holds it. affinities is
 * parallel to revisions (an empty summary where none is recorded). Owned when
 * decoded; release with wm_section_image_clear(). */
typedef struct wm_section_image {
    wm_revision *revisions;
    wm_affinity *affinities;
    size_t n_revisions;
    wm_operation *operations;
    size_t n_operations;
    wm_lease *leases;
    size_t n_leases;
    wm_lineage_entry *lineages;
    size_t n_lineages;
    uint64_t next_operation_id;
    uint64_t next_lease_id;
    /* When decoded, the storage every revision's identity strings,
     * group_key and manifest_key point into (owned; NULL otherwise). */
    char *keys;
    /* When decoded, revisions is a wm_bulk mapping of this many bytes
     * (wm_bulk.h); 0: malloc'ed (or not owned). */
    size_t revisions_len;
    /* 0: revisions and affinities are arrays. Otherwise the i-th revision
     * and the i-th affinity are each stride bytes after the one before: the
     * decode placed them in the caller's storage (wm_decode_section_placed),
     * which the image does not own (nor keys). Read them through
     * wm_image_revision and wm_image_affinity. */
    size_t stride;
    /* When decoded, the storage the identity strings of the operations and
     * leases point into (owned; NULL otherwise). Lineage claims borrow their
     * entry's lineage (wm_lineage_entry_bind). */
    char *strs;
    /* 1: every revision passed wm_metadata_check as it was decoded (the
     * hand decoder, wm_decode_section_placed), so wm_section_check does not
     * check each again; 0: it does. */
    int revisions_checked;
} wm_section_image;

/* The i-th revision of img (i < n_revisions). */
static inline wm_revision *wm_image_revision(const wm_section_image *img, size_t i)
{
    return img->stride ? (wm_revision *)((char *)img->revisions + i * img->stride)
                       : &img->revisions[i];
}

/* The i-th affinity summary of img, NULL when the image has none. */
static inline wm_affinity *wm_image_affinity(const wm_section_image *img, size_t i)
{
    if (img->affinities == NULL) return NULL;
    return img->stride ? (wm_affinity *)((char *)img->affinities + i * img->stride)
                       : &img->affinities[i];
}

/* Where wm_decode_section_placed decodes the revisions: into the caller's
 * records (a store's entries), so a snapshot load does not decode them into
 * an array first and copy each into its entry. */
typedef struct wm_section_place {
    /* Called once the section's counts are known, before any revision is
     * decoded: storage for n records of stride bytes, the i-th holding its
     * wm_revision at rev_off and its wm_affinity at aff_off, and keys_len
     * bytes where the revisions' group and manifest keys are copied (*keys).
     * Returns the first record, NULL when it cannot (the decode then fails
     * with SMP_ENOMEM). The storage stays the caller's on success and on
     * failure; the decode writes every revision whole and zeroes every
     * affinity before it fills it. */
    void *(*alloc)(void *ctx, size_t n, size_t keys_len, char **keys);
    void *ctx;
    size_t stride;
    size_t rev_off;
    size_t aff_off;
    /* Called after alloc, once for each affinity summary: len bytes aligned
     * for a pointer, which stay the caller's (never freed by the decode or
     * by wm_affinity_clear: the summaries are borrowed) and must outlive
     * them; NULL when it cannot (the decode then fails with SMP_ENOMEM).
     * NULL: each summary is malloc'ed and owned by its wm_affinity. */
    void *(*aff_alloc)(void *ctx, size_t len);
} wm_section_place;

#define WM_SECTION_FORMAT 1

/* Release what a decode allocated and zero the value. NULL is a no-op. */
void wm_metadata_upsert_clear(wm_metadata_upsert *u);
void wm_metadata_delete_clear(wm_metadata_delete *d);
void wm_section_image_clear(wm_section_image *img);

/* Encoders. On success *out is a malloc'ed buffer of *out_len bytes the
 * caller frees (free()). WM_EINVALID_ARGUMENT (with msg, may be NULL) when
 * the record breaks an invariant the decoder would refuse; SMP_ENOMEM. */
int wm_encode_metadata_upsert(const wm_metadata_upsert *in, uint8_t **out, size_t *out_len,
                              char *msg, size_t cap);
int wm_encode_metadata_delete(const wm_metadata_delete *in, uint8_t **out, size_t *out_len,
                              char *msg, size_t cap);
int wm_encode_lease_upsert(const wm_lease *in, uint8_t **out, size_t *out_len,
                           char *msg, size_t cap);
int wm_encode_lease_delete(const wm_lease_delete *in, uint8_t **out, size_t *out_len,
                           char *msg, size_t cap);
int wm_encode_lineage_claim(const wm_lineage_claim *in, uint8_t **out, size_t *out_len,
                            char *msg, size_t cap);
int wm_encode_section(const wm_section_image *in, uint8_t **out, size_t *out_len,
                      char *msg, size_t cap);

/* Decoders. *out is written only on success and then owns its arrays.
 * SMP_EPROTO with a sentence in msg (may be NULL) for anything malformed or
 * invalid; SMP_ENOMEM. An empty section buffer decodes as an empty table
 * (the snapshot had no section). */
int wm_decode_metadata_upsert(const uint8_t *buf, size_t len, wm_metadata_upsert *out,
                              char *msg, size_t cap);
int wm_decode_metadata_delete(const uint8_t *buf, size_t len, wm_metadata_delete *out,
                              char *msg, size_t cap);
/* The next three copy the record's identity strings into *ids, which must
 * outlive every use of *out (a claim's base and target, one lineage, share
 * them). */
int wm_decode_lease_upsert(const uint8_t *buf, size_t len, wm_lease *out,
                           wm_identity_buf *ids, char *msg, size_t cap);
int wm_decode_lease_delete(const uint8_t *buf, size_t len, wm_lease_delete *out,
                           wm_identity_buf *ids, char *msg, size_t cap);
int wm_decode_lineage_claim(const uint8_t *buf, size_t len, wm_lineage_claim *out,
                            wm_identity_buf *ids, char *msg, size_t cap);
int wm_decode_section(const uint8_t *buf, size_t len, wm_section_image *out,
                      char *msg, size_t cap);
/* wm_decode_section with the revisions and their affinity summaries decoded
 * into place's storage (place NULL: as wm_decode_section). On success *out
 * owns the affinities until the caller takes them (it then sets
 * out->n_revisions to 0 before wm_section_image_clear); on failure nothing
 * is left to release but the caller's storage. */
int wm_decode_section_placed(const uint8_t *buf, size_t len, const wm_section_place *place,
                             wm_section_image *out, char *msg, size_t cap);

/* Check the cross-record invariants of a whole table (what a section decode
 * runs after each record passed on its own): unique identities, operation,
 * lease and lineage ids; every active operation present and RUNNING; every
 * RUNNING operation active; leases only on READY or DEGRADED revisions and
 * lease_count equal to the leases naming the revision; an affinity summary
 * for every READY and DEGRADED revision; claims in their lineage with the
 * entry's watermark; next ids above every id. WM_OK or WM_EINVALID_ARGUMENT
 * with a sentence; SMP_ENOMEM. */
int wm_section_check(const wm_section_image *img, char *msg, size_t cap);

#endif /* WM_CODEC_H */
