/* wc_manifest.h -- the in-memory StoredWeightManifest, its encoding and its
 * validation.
 *
 * A manifest says what a revision holds (tensors: name, dtype, global shape),
 * where each byte lives (fragments: a box of a tensor stored row-major and
 * contiguous at a byte range of one payload object), which tensors share one
 * storage (alias groups: tied weights stored once), the payload objects, and
 * the affinity units the residency planner moves whole. The wire form is
 * proto/manifest.proto; this is the model the writer (wc_pack) fills and the
 * reader (wc_plan) plans from. Nothing here does I/O.
 *
 * A model is built with wc_manifest_init and the wc_manifest_add_* calls, then
 * wc_manifest_finalize sorts it into canonical order (fragments by tensor, then
 * by global offset), derives the index fields and validates it. Encoding needs
 * a finalized model; decoding validates everything before it returns. The
 * rules, each refused with a message naming the tensor or object:
 *
 *  - identity components are non-empty and group is wc_group_key(identity);
 *  - tensor names are non-empty and unique; dtype is known and item_size is
 *    its size; at most WC_MAX_NDIM dimensions; byte size fits 64 bits;
 *  - object keys are non-empty, unique and inside the group ("<group>/...");
 *  - a fragment lies inside its tensor's global shape, has no empty
 *    dimension, bytes = product(local shape) * item_size, and its byte range
 *    lies inside its object; no two fragments share payload bytes;
 *  - the fragments of a tensor do not overlap and cover it exactly (their
 *    volumes add up to the tensor's); a tensor with zero elements has none;
 *  - an alias group has at least two members, each tensor is in at most one
 *    group, all members have the first member's dtype and shape, and only the
 *    first member (the storage tensor) has fragments;
 *  - affinity units partition the objects, logical_bytes is the sum of their
 *    object sizes, and all fragments of a tensor lie in one unit;
 *  - an attachment (wc_manifest_set_attachment) is U8 with one dimension of
 *    at most WC_ATTACHMENT_MAX_BYTES, named like a file (no '/', not "." or
 *    ".."), in no alias group, and after every tensor (so the tensors are
 *    tensors[0 .. wc_manifest_n_plain(m))); a manifest with one encodes as
 *    format_version 2;
 *  - file metadata (the source files' safetensors __metadata__ pairs) has
 *    non-empty, unique UTF-8 keys and UTF-8 values, at most
 *    WC_FILE_META_MAX_PAIRS pairs of WC_FILE_META_MAX_BYTES bytes in all.
 *
 * Errors: SMP_EINVAL for a model built here that breaks a rule, SMP_EPROTO for
 * bytes that do not decode or break one, SMP_ENOMEM, SMP_ESTATE for encoding a
 * model that is not finalized. Messages go to (err, errlen) when err is not
 * NULL. */
#ifndef WC_MANIFEST_H
#define WC_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "store_plugin.h"
#include "wc_dtype.h"

#define WC_MANIFEST_FORMAT_VERSION 1u
/* The format of a manifest with attachments; readers of version 1 refuse it
 * rather than take its files for tensors. */
#define WC_MANIFEST_FORMAT_ATTACHMENTS 2u
/* The largest attachment (a file of the model directory). */
#define WC_ATTACHMENT_MAX_BYTES (64ull << 20)
#define WC_NONE UINT32_MAX

/* The five-part revision identity. Strings are owned by whoever owns the
 * struct (the manifest for its own copy). */
typedef struct wc_identity {
    char *tenant_id;
    char *namespace_id;
    char *resource_id;
    char *revision;
    uint64_t generation;
} wc_identity;

typedef struct wc_tensor {
    char *name;
    wc_dtype dtype;
    uint32_t item_size;
    uint32_t ndim;
    uint64_t shape[WC_MAX_NDIM];
    /* Derived by wc_manifest_finalize: */
    uint64_t bytes;          /* product(shape) * item_size */
    uint32_t alias_group;    /* index in alias_groups, or WC_NONE */
    uint32_t storage;        /* tensor whose fragments hold the bytes: itself,
                                or its alias group's first member */
    size_t frag_first;       /* its fragments: fragments[frag_first ..  */
    size_t frag_count;       /*   .. frag_first + frag_count) */
    int attachment;          /* a file of the model directory (U8, [bytes]) */
} wc_tensor;

typedef struct wc_fragment {
    uint32_t tensor;                 /* index in tensors */
    uint32_t object;                 /* index in objects */
    uint64_t offset[WC_MAX_NDIM];    /* global offset, tensor's ndim entries */
    uint64_t shape[WC_MAX_NDIM];     /* local shape */
    uint64_t object_offset;
    uint64_t bytes;
} wc_fragment;

typedef struct wc_alias_group {
    uint32_t *tensors;       /* tensors[0] holds the storage */
    uint32_t n;
} wc_alias_group;

typedef struct wc_object {
    char *key;
    uint64_t bytes;
    uint32_t unit;           /* derived: its affinity unit, WC_NONE if none */
    /* Integrity (wc_manifest_set_object_check); absent when has_sha256 is 0
     * and n_chunks is 0. */
    int has_sha256;
    uint8_t sha256[32];      /* of the whole object */
    uint64_t chunk_bytes;    /* chunk size of chunk_xxh3 (> 0 when n_chunks) */
    uint64_t *chunk_xxh3;    /* XXH3-64 of each chunk, owned */
    size_t n_chunks;         /* ceil(bytes / chunk_bytes) when present */
} wc_object;

typedef struct wc_affinity_unit {
    uint32_t *objects;       /* ascending object indices */
    uint32_t n;
    uint64_t logical_bytes;
} wc_affinity_unit;

/* One pair of the source files' safetensors __metadata__. */
typedef struct wc_file_meta {
    char *key;
    char *value;
} wc_file_meta;

/* Bounds of the file metadata of one manifest. */
#define WC_FILE_META_MAX_PAIRS 1024u
#define WC_FILE_META_MAX_BYTES (1u << 20)

typedef struct wc_manifest {
    wc_identity identity;
    char *group;
    wc_tensor *tensors;
    size_t n_tensors;
    wc_fragment *fragments;
    size_t n_fragments;
    wc_alias_group *alias_groups;
    size_t n_alias_groups;
    wc_object *objects;
    size_t n_objects;
    wc_affinity_unit *units;
    size_t n_units;
    wc_file_meta *file_meta;  /* sorted by key (byte order), unique keys */
    size_t n_file_meta;
    /* Private: capacities, the name index, the finalized flag. */
    size_t cap_tensors_;
    size_t cap_fragments_;
    size_t cap_alias_groups_;
    size_t cap_objects_;
    size_t cap_units_;
    size_t cap_file_meta_;
    size_t file_meta_bytes_;
    uint32_t *name_slots_;
    size_t n_name_slots_;
    int finalized_;
} wc_manifest;

/* The canonical group key of id,
 * "weights/<tenant>/<namespace>/<resource>/<revision>/<generation>", each
 * string component percent-encoded (every byte but A-Z a-z 0-9 - . _ ~
 * becomes %XX, so UTF-8 passes through byte-wise). *out is malloc'd (caller
 * frees). Returns SMP_OK, SMP_EINVAL (a NULL or empty component) or
 * SMP_ENOMEM. */
int wc_group_key(const wc_identity *id, char **out);

/* Start an empty model for id (copied) with group = wc_group_key(id). m is
 * overwritten; on failure it needs no wc_manifest_free. Returns SMP_OK,
 * SMP_EINVAL (bad identity), SMP_ENOMEM. */
int wc_manifest_init(wc_manifest *m,
                     const wc_identity *id,
                     char *err,
                     size_t errlen);

/* Free everything m owns and zero it. NULL or a zeroed m is a no-op. */
void wc_manifest_free(wc_manifest *m);

/* Append a tensor (name copied); *out_index (may be NULL) is its index.
 * Only argument shape is checked here (NULL name, unknown dtype, ndim over
 * WC_MAX_NDIM: SMP_EINVAL); the rest at finalize. */
int wc_manifest_add_tensor(wc_manifest *m,
                           const char *name,
                           wc_dtype dtype,
                           uint32_t ndim,
                           const uint64_t *shape,   /* ndim entries */
                           uint32_t *out_index);

/* Mark tensor `index` as an attachment (see the rules above; checked at
 * finalize). SMP_OK or SMP_EINVAL for an index out of range. */
int wc_manifest_set_attachment(wc_manifest *m, uint32_t index);

/* The number of tensors before the first attachment (all of them when
 * there is none). For a finalized or decoded manifest. */
size_t wc_manifest_n_plain(const wc_manifest *m);

/* Check one pair of file metadata on its own: a non-empty key, key and
 * value valid UTF-8. SMP_OK or SMP_EINVAL with a message naming the key. */
int wc_file_meta_check(const char *key, const char *value, char *err, size_t errlen);

/* Add one pair of the source files' safetensors __metadata__ (copied) in
 * key order; it does not change finalization (a finalized model may take
 * it). SMP_OK, SMP_EINVAL (wc_file_meta_check, a key already there, more
 * than WC_FILE_META_MAX_PAIRS pairs or WC_FILE_META_MAX_BYTES bytes; with a
 * message) or SMP_ENOMEM. */
int wc_manifest_add_file_meta(wc_manifest *m,
                              const char *key,
                              const char *value,
                              char *err,
                              size_t errlen);

/* Append a payload object (key copied); *out_index may be NULL. */
int wc_manifest_add_object(wc_manifest *m,
                           const char *key,
                           uint64_t bytes,
                           uint32_t *out_index);

/* Attach the integrity data of object `object`: the SHA-256 of its bytes
 * (may be NULL: none) and the XXH3-64 of each chunk_bytes-sized chunk
 * (n_chunks must be ceil(bytes / chunk_bytes); sums copied; n_chunks 0:
 * none). Does not change finalization. SMP_OK, SMP_EINVAL (index out of
 * range, a chunk count that does not fit the object) or SMP_ENOMEM. */
int wc_manifest_set_object_check(wc_manifest *m,
                                 uint32_t object,
                                 const uint8_t *sha256,
                                 uint64_t chunk_bytes,
                                 const uint64_t *chunk_xxh3,
                                 size_t n_chunks);

/* Append a fragment of tensor (an index already added). offset and shape have
 * the tensor's ndim entries. SMP_EINVAL for a tensor index out of range. */
int wc_manifest_add_fragment(wc_manifest *m,
                             uint32_t tensor,
                             const uint64_t *offset,
                             const uint64_t *shape,
                             uint32_t object,
                             uint64_t object_offset,
                             uint64_t bytes);

/* Append an alias group of n tensor indices (copied); tensors[0] holds the
 * storage. */
int wc_manifest_add_alias_group(wc_manifest *m,
                                const uint32_t *tensors,
                                uint32_t n);

/* Append an affinity unit of n object indices (copied, sorted ascending). */
int wc_manifest_add_unit(wc_manifest *m,
                         const uint32_t *objects,
                         uint32_t n,
                         uint64_t logical_bytes);

/* Sort fragments into canonical order, derive the index fields and validate
 * every rule above. Returns SMP_OK (m is finalized), SMP_EINVAL with a message,
 * or SMP_ENOMEM. Adding anything afterwards un-finalizes m. */
int wc_manifest_finalize(wc_manifest *m,
                         char *err,
                         size_t errlen);

/* The index of the tensor called name, or WC_NONE. Needs a finalized m. */
uint32_t wc_manifest_find_tensor(const wc_manifest *m, const char *name);

/* Encode a finalized m into *out (malloc'd, caller frees), *out_len bytes.
 * The encoding of a given model is deterministic. Returns SMP_OK, SMP_ESTATE
 * (not finalized) or SMP_ENOMEM. */
int wc_manifest_encode(const wc_manifest *m,
                       uint8_t **out,
                       size_t *out_len);

/* Decode and validate len bytes into *m (overwritten; on success the caller
 * wc_manifest_free's it, on failure nothing is left to free). Returns SMP_OK,
 * SMP_EPROTO (does not decode, unknown format_version, or a rule broken, with
 * a message naming the tensor or object) or SMP_ENOMEM. */
int wc_manifest_decode(const uint8_t *buf,
                       size_t len,
                       wc_manifest *m,
                       char *err,
                       size_t errlen);

/* SHA-256 of len bytes (the manifest's stored bytes) into out. */
void wc_manifest_sha256(const uint8_t *buf, size_t len, uint8_t out[32]);

#endif /* WC_MANIFEST_H */
