/* wm_codec_dec.h -- the per-record decoders of wm_codec.c that a section
 * decode shares: each takes one protobuf-c message of
 * proto/weight_records.proto, checks it as wm_codec.h says and writes the
 * plain record. The section decoder (wm_section_decode.c) hands them
 * messages it decoded by hand; the tests' protobuf-c reference decode of a
 * section (tests/unit/wm_section_same.h) hands them protobuf-c's, so both
 * refuse a record with the same sentence. Internal to weight_plugin/ and its
 * tests. */
#ifndef WM_CODEC_DEC_H
#define WM_CODEC_DEC_H

#include <stddef.h>

#include "weight_records.pb-c.h"
#include "wm_codec.h"

/* The bytes wm_dec_identity writes for m (its four strings and NULs; 0 for
 * a missing identity). */
size_t wm_dec_id_len(const Wmrec__Identity *m);
/* The bytes wm_dec_revision writes to its key storage for m. */
size_t wm_dec_keys_len(const Wmrec__Revision *m);
/* The bytes wm_dec_claim writes to its string storage for m. */
size_t wm_dec_claim_len(const Wmrec__LineageClaim *m);

/* Decode and check a revision into *out (written only on success); its
 * identity strings, group and manifest keys and request id are copied to
 * *keys, which is advanced past them. SMP_EPROTO with a sentence. */
int wm_dec_revision(const Wmrec__Revision *m, wm_revision *out, char **keys, char *msg,
                    size_t cap);
/* Decode a summary into fresh memory (*out, owned on success; nothing is
 * left on failure). SMP_EPROTO, SMP_ENOMEM. */
int wm_dec_affinity(const Wmrec__AffinitySummary *m, wm_affinity *out, char *msg, size_t cap);
/* The same checks, the summary placed in one block of the exact size from
 * alloc(ctx, bytes) (aligned for a pointer; never freed here): *out is then
 * borrowed (wm_affinity.borrowed). alloc NULL: wm_dec_affinity. SMP_EPROTO,
 * SMP_ENOMEM (alloc returned NULL). */
int wm_dec_affinity_in(const Wmrec__AffinitySummary *m, wm_affinity *out,
                       void *(*alloc)(void *ctx, size_t len), void *ctx, char *msg, size_t cap);
/* Decode and check an operation, a lease, a lineage entry; their identity
 * strings go to *strs, which is advanced past them. SMP_EPROTO. */
int wm_dec_operation(const Wmrec__Operation *m, wm_operation *out, char **strs, char *msg,
                     size_t cap);
int wm_dec_lease(const Wmrec__Lease *m, wm_lease *out, char **strs, char *msg, size_t cap);
int wm_dec_lineage_entry(const Wmrec__LineageEntry *m, wm_lineage_entry *out, char **strs,
                         char *msg, size_t cap);

#endif /* WM_CODEC_DEC_H */
