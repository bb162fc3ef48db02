/* wc_pack.h -- the writer's packing: which bytes of which tensor go where in
 * which payload object.
 *
 * Given the tensors of a revision (name, dtype, global shape, and the source
 * fragments the caller holds them in -- one whole tensor, or the shards of
 * several tensor-parallel ranks) and a bound on payload object size, wc_pack
 * decides the payload objects "<group>/payload/<n>", the manifest that
 * describes them, and the list of contiguous copies ("puts") the writer
 * performs from its source buffers into the objects. Pure: no I/O.
 *
 * The rules:
 *  - tensors are placed in name order (so the result does not depend on the
 *    order the caller listed them in), each tensor's fragments in the order
 *    of their global offset; objects are filled in order, and a new object is
 *    opened when the next tensor does not fit in what is left;
 *  - a tensor no bigger than the bound is never split across objects;
 *  - a bigger tensor starts a fresh object and its fragments are cut into
 *    chunks of whole rows along dimension 0 that fill objects up to the
 *    bound (a chunk is still a fragment: a box of the tensor). A single row
 *    bigger than the bound makes a chunk (and an object) of one row, over
 *    the bound: rows are never cut;
 *  - a tensor tied to another (tied_to) is stored once: it becomes a member
 *    of the other's alias group and has no fragments of its own;
 *  - affinity units are the connected components of objects under "holds a
 *    fragment of the same tensor" (alias groups share their storage tensor's
 *    fragments, so they follow), numbered by their lowest object; an object
 *    holding only whole small tensors is a unit of its own;
 *  - no padding: logical bytes are the sum of the stored tensors' bytes.
 * The same input always gives the same manifest, byte for byte. */
#ifndef WC_PACK_H
#define WC_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "wc_manifest.h"

/* One source fragment the caller holds, row-major and contiguous. */
typedef struct wc_pack_fragment {
    const uint64_t *offset;     /* global offset, the tensor's ndim entries */
    const uint64_t *shape;      /* local shape, the tensor's ndim entries */
} wc_pack_fragment;

typedef struct wc_pack_tensor {
    const char *name;
    wc_dtype dtype;
    uint32_t ndim;
    const uint64_t *shape;                 /* global shape */
    const wc_pack_fragment *fragments;     /* must cover the tensor exactly */
    size_t n_fragments;                    /* 0: the tensor is one whole fragment */
    const char *tied_to;                   /* non-NULL: the name of the tensor whose
                                              bytes this one shares (same dtype and
                                              shape, itself not tied); fragments of a
                                              tied tensor are ignored */
    int attachment;                        /* a file of the model directory (U8,
                                              [bytes], whole, untied): placed after
                                              every tensor in the manifest */
} wc_pack_tensor;

/* One contiguous copy from a source fragment into a payload object. */
typedef struct wc_pack_put {
    uint32_t object;            /* index in manifest.objects */
    uint32_t tensor;            /* index in the caller's tensor array */
    uint32_t source;            /* index in that tensor's fragments (0: whole) */
    uint64_t object_offset;
    uint64_t source_offset;     /* bytes into the source fragment's buffer */
    uint64_t bytes;
} wc_pack_put;

typedef struct wc_pack_result {
    wc_manifest manifest;       /* finalized */
    wc_pack_put *puts;          /* by object, then object_offset */
    size_t n_puts;
} wc_pack_result;

/* Pack n tensors for revision id into objects of at most object_bound bytes
 * (see the rules above). On success *out holds the finalized manifest and the
 * puts (free with wc_pack_result_free); on failure *out needs no freeing.
 * Returns SMP_OK, SMP_EINVAL with a message naming the tensor (duplicate or
 * empty name, unknown dtype, bad rank, a fragment outside its tensor, fragments
 * that overlap or leave holes, a tie to a missing, tied or different tensor,
 * object_bound 0), SMP_ERANGE (a size overflows) or SMP_ENOMEM. */
int wc_pack(const wc_identity *id,
            const wc_pack_tensor *tensors,
            size_t n,
            uint64_t object_bound,
            wc_pack_result *out,
            char *err,
            size_t errlen);

/* Free what wc_pack returned and zero it; NULL or zeroed is a no-op. */
void wc_pack_result_free(wc_pack_result *r);

#endif /* WC_PACK_H */
