/* wc_plan.h -- the reshard planner of weight_get: which payload byte ranges
 * go where in the caller's buffers.
 *
 * The caller says, per tensor of a (validated) manifest, how this rank wants
 * it: not at all, replicated (the whole tensor), or split along one dimension
 * into N parts of which it holds part r. That defines a target box per tensor;
 * the caller binds one row-major buffer per tensor holding exactly that box.
 * The planner intersects each target box with the stored fragments of the
 * tensor (an alias reads its storage tensor's fragments) and emits copy
 * operations from payload object ranges straight into the buffers -- no
 * staging copy. Whatever layout the writer stored (one whole tensor, or the
 * shards of any tensor-parallel degree) can be read into any other.
 *
 * Copies are coalesced: an intersection that is contiguous in both the
 * fragment and the target (e.g. whole fragments of a split along dimension 0)
 * is one run, and consecutive runs contiguous in both are merged, so reading a
 * dimension-0 split of a writer's single fragment is one copy per tensor. An
 * intersection that is contiguous in neither (e.g. a split along dimension 1)
 * is a strided op: count runs of bytes, src_stride and dst_stride apart, one
 * op per row band rather than one per row.
 *
 * Uneven splits: a dimension of size S split into N parts gives part r
 * S / N elements, plus one more for the first S % N parts. Pure: no I/O. */
#ifndef WC_PLAN_H
#define WC_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "wc_manifest.h"

typedef enum wc_place_kind {
    WC_PLACE_SKIP = 0,          /* not loaded on this rank */
    WC_PLACE_REPLICATED = 1,    /* the whole tensor */
    WC_PLACE_SPLIT = 2          /* part `rank` of `parts` along `dim` */
} wc_place_kind;

typedef struct wc_placement {
    wc_place_kind kind;
    uint32_t dim;
    uint32_t parts;
    uint32_t rank;
} wc_placement;

/* Copy count runs of bytes: run k goes from object bytes
 * [src_offset + k * src_stride, + bytes) to binding bytes
 * [dst_offset + k * dst_stride, + bytes). count == 1 for a plain copy, and
 * then the strides equal bytes. */
typedef struct wc_copy_op {
    uint32_t object;            /* index in manifest objects (its key there) */
    uint32_t dst;               /* binding = manifest tensor index */
    uint64_t src_offset;
    uint64_t dst_offset;
    uint64_t bytes;
    uint64_t count;
    uint64_t src_stride;
    uint64_t dst_stride;
} wc_copy_op;

typedef struct wc_plan {
    wc_copy_op *ops;            /* by tensor, then by fragment order */
    size_t n_ops;
    uint64_t *dst_bytes;        /* per manifest tensor: binding size (0: skipped) */
    size_t n_dst;
    uint64_t total_bytes;       /* sum of dst_bytes: bytes the plan copies */
    size_t cap_ops_;
    size_t cap_dst_;
} wc_plan;

/* The target box of tensor t under placement p: offset and shape, t->ndim
 * entries each. Returns SMP_OK or SMP_EINVAL (skip, an unknown kind, dim not
 * below t->ndim, parts 0, rank not below parts). */
int wc_plan_box(const wc_tensor *t,
                const wc_placement *p,
                uint64_t offset[WC_MAX_NDIM],
                uint64_t shape[WC_MAX_NDIM]);

/* The shape of the buffer this rank binds for t under p (t->ndim entries) and
 * its size in bytes (may be NULL). Errors as wc_plan_box. */
int wc_plan_dst_shape(const wc_tensor *t,
                      const wc_placement *p,
                      uint64_t shape[WC_MAX_NDIM],
                      uint64_t *bytes);

/* Plan the copies that fill this rank's buffers from finalized manifest m,
 * placements[i] applying to m->tensors[i]. plan must be zeroed or hold a
 * previous plan, whose memory is reused. On failure the plan is empty (n_ops
 * 0) but keeps its memory for wc_plan_free. Returns SMP_OK, SMP_ESTATE (m not
 * finalized), SMP_EINVAL (a bad placement, with a message naming the tensor)
 * or SMP_ENOMEM. */
int wc_plan_build(const wc_manifest *m,
                  const wc_placement *placements,
                  wc_plan *plan,
                  char *err,
                  size_t errlen);

/* Free the plan's memory and zero it; NULL is a no-op. */
void wc_plan_free(wc_plan *plan);

/* Execute plan with memcpy: objects[i] is the mapped payload of manifest
 * object i (the co-located HOT path: a node's segment mapped by the client),
 * bindings[t] the caller's buffer for tensor t, at least plan->dst_bytes[t]
 * bytes (unused entries of skipped tensors may be NULL). Checks that every op
 * stays inside its object (object_bytes[i]) and binding; SMP_ERANGE, without
 * copying anything, if one does not. */
int wc_plan_apply(const wc_plan *plan,
                  const uint8_t *const *objects,
                  const uint64_t *object_bytes,
                  size_t n_objects,
                  uint8_t *const *bindings);

#endif /* WC_PLAN_H */
