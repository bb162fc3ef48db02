/* wc_plan.c -- the reshard planner: target boxes, box intersection, coalesced
 * and strided copy operations, and a memcpy executor for mapped payloads.
 *
 * For each intersection of a target box with a stored fragment, the suffix of
 * dimensions the intersection spans fully in both the fragment and the target
 * is contiguous on both sides; together with the partial dimension just before
 * it, that is one run. The dimension before that becomes the op's count and
 * strides, and any dimensions further out are walked one op each. The plan
 * trusts the manifest's validation (boxes inside tensors, fragments inside
 * objects) and does no bounds checks of its own. See wc_plan.h. */
#include "wc_plan.h"
#include "wm_errbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int wc_plan_box(const wc_tensor *t, const wc_placement *p, uint64_t offset[WC_MAX_NDIM],
                uint64_t shape[WC_MAX_NDIM])
{
    if (t == NULL || p == NULL) return SMP_EINVAL;
    if (p->kind == WC_PLACE_SPLIT) {
        if (p->dim >= t->ndim || p->parts == 0 || p->rank >= p->parts) return SMP_EINVAL;
    } else if (p->kind != WC_PLACE_REPLICATED) {
        return SMP_EINVAL;
    }
    for (uint32_t d = 0; d < t->ndim; d++) {
        offset[d] = 0;
        shape[d] = t->shape[d];
    }
    if (p->kind == WC_PLACE_SPLIT) {
        uint64_t size = t->shape[p->dim];
        uint64_t q = size / p->parts, rem = size % p->parts;
        offset[p->dim] = q * p->rank + (p->rank < rem ? p->rank : rem);
        shape[p->dim] = q + (p->rank < rem ? 1 : 0);
    }
    return SMP_OK;
}

int wc_plan_dst_shape(const wc_tensor *t, const wc_placement *p, uint64_t shape[WC_MAX_NDIM],
                      uint64_t *bytes)
{
    uint64_t offset[WC_MAX_NDIM];
    int rc = wc_plan_box(t, p, offset, shape);
    if (rc < 0) return rc;
    /* Inside the tensor, whose size was checked when it was finalized. */
    if (bytes != NULL) wc_shape_bytes(shape, t->ndim, t->item_size, bytes);
    return SMP_OK;
}

/* Append op to the plan, merging it into the previous op when it continues
 * it in both object and binding. */
static int emit(wc_plan *plan, const wc_copy_op *op)
{
    if (plan->n_ops > 0) {
        wc_copy_op *last = &plan->ops[plan->n_ops - 1];
        if (last->object == op->object && last->dst == op->dst) {
            if (last->count == 1 && op->count == 1 &&
                last->src_offset + last->bytes == op->src_offset &&
                last->dst_offset + last->bytes == op->dst_offset) {
                last->bytes += op->bytes;
                last->src_stride = last->dst_stride = last->bytes;
                return SMP_OK;
            }
            if (last->count > 1 && last->bytes == op->bytes &&
                (op->count == 1 ||
                 (op->src_stride == last->src_stride && op->dst_stride == last->dst_stride)) &&
                op->src_offset == last->src_offset + last->count * last->src_stride &&
                op->dst_offset == last->dst_offset + last->count * last->dst_stride) {
                last->count += op->count;
                return SMP_OK;
            }
        }
    }
    if (plan->n_ops == plan->cap_ops_) {
        size_t ncap = plan->cap_ops_ ? plan->cap_ops_ * 2 : 256;
        wc_copy_op *n = realloc(plan->ops, ncap * sizeof *n);
        if (n == NULL) return SMP_ENOMEM;
        plan->ops = n;
        plan->cap_ops_ = ncap;
    }
    plan->ops[plan->n_ops++] = *op;
    return SMP_OK;
}

/* Emit the copies of the intersection of target box (to, ts; row-major
 * strides dstr) with fragment f of tensor t, into binding ti. */
static int plan_intersection(wc_plan *plan, const wc_tensor *t, uint32_t ti,
                             const wc_fragment *f, const uint64_t *to, const uint64_t *ts,
                             const uint64_t *dstr)
{
    uint32_t nd = t->ndim;
    uint64_t lo[WC_MAX_NDIM], is[WC_MAX_NDIM], sstr[WC_MAX_NDIM];
    wc_copy_op op;

    op.object = f->object;
    op.dst = ti;
    if (nd == 0) {                       /* a scalar: the fragment is the tensor */
        op.src_offset = f->object_offset;
        op.dst_offset = 0;
        op.bytes = op.src_stride = op.dst_stride = t->item_size;
        op.count = 1;
        return emit(plan, &op);
    }
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t a = f->offset[d] > to[d] ? f->offset[d] : to[d];
        uint64_t fe = f->offset[d] + f->shape[d], te = to[d] + ts[d];
        uint64_t b = fe < te ? fe : te;
        if (a >= b) return SMP_OK;       /* no intersection */
        lo[d] = a;
        is[d] = b - a;
    }
    sstr[nd - 1] = t->item_size;
    for (uint32_t d = nd - 1; d > 0; d--) sstr[d - 1] = sstr[d] * f->shape[d];

    uint32_t j = nd - 1;
    while (j > 0 && is[j] == f->shape[j] && is[j] == ts[j]) j--;
    uint64_t src0 = f->object_offset, dst0 = 0;
    for (uint32_t d = 0; d < nd; d++) {
        src0 += (lo[d] - f->offset[d]) * sstr[d];
        dst0 += (lo[d] - to[d]) * dstr[d];
    }
    op.bytes = is[j] * sstr[j];
    if (j == 0) {
        op.src_offset = src0;
        op.dst_offset = dst0;
        op.count = 1;
        op.src_stride = op.dst_stride = op.bytes;
        return emit(plan, &op);
    }
    op.count = is[j - 1];
    op.src_stride = sstr[j - 1];
    op.dst_stride = dstr[j - 1];
    if (op.count == 1) op.src_stride = op.dst_stride = op.bytes;
    /* Walk dimensions 0 .. j-2 (an odometer), one op per position. */
    uint64_t idx[WC_MAX_NDIM] = {0};
    for (;;) {
        uint64_t s = src0, dd = dst0;
        for (uint32_t d = 0; d + 1 < j; d++) {
            s += idx[d] * sstr[d];
            dd += idx[d] * dstr[d];
        }
        op.src_offset = s;
        op.dst_offset = dd;
        int rc = emit(plan, &op);
        if (rc < 0) return rc;
        uint32_t d = j - 1;
        while (d > 0) {
            d--;
            if (++idx[d] < is[d]) break;
            idx[d] = 0;
            if (d == 0) return SMP_OK;
        }
        if (j - 1 == 0) return SMP_OK;   /* no outer dimensions to walk */
    }
}

int wc_plan_build(const wc_manifest *m, const wc_placement *placements, wc_plan *plan,
                  char *err, size_t errlen)
{
    int rc;
    plan->n_ops = 0;
    plan->n_dst = 0;
    plan->total_bytes = 0;
    if (m == NULL || !m->finalized_) {
        wm_errbuf(err, errlen, "plan: the manifest is not finalized");
        return SMP_ESTATE;
    }
    if (m->n_tensors > 0 && placements == NULL) {
        wm_errbuf(err, errlen, "plan: no placements");
        return SMP_EINVAL;
    }
    if (plan->cap_dst_ < m->n_tensors) {
        uint64_t *n = realloc(plan->dst_bytes, m->n_tensors * sizeof *n);
        if (n == NULL) return SMP_ENOMEM;
        plan->dst_bytes = n;
        plan->cap_dst_ = m->n_tensors;
    }
    for (size_t ti = 0; ti < m->n_tensors; ti++) {
        const wc_tensor *t = &m->tensors[ti];
        const wc_placement *p = &placements[ti];
        uint64_t to[WC_MAX_NDIM], ts[WC_MAX_NDIM], dstr[WC_MAX_NDIM];
        plan->dst_bytes[ti] = 0;
        if (p->kind == WC_PLACE_SKIP) continue;
        if (wc_plan_box(t, p, to, ts) < 0) {
            wm_errbuf(err, errlen, "tensor '%s': bad placement (kind %d, dimension %u of %u, "
                    "part %u of %u)", t->name, (int)p->kind, p->dim, t->ndim, p->rank,
                    p->parts);
            rc = SMP_EINVAL;
            goto empty_plan;
        }
        wc_shape_bytes(ts, t->ndim, t->item_size, &plan->dst_bytes[ti]);
        plan->total_bytes += plan->dst_bytes[ti];
        if (plan->dst_bytes[ti] == 0) continue;
        if (t->ndim > 0) {
            dstr[t->ndim - 1] = t->item_size;
            for (uint32_t d = t->ndim - 1; d > 0; d--) dstr[d - 1] = dstr[d] * ts[d];
        }
        const wc_tensor *s = &m->tensors[t->storage];
        for (size_t k = 0; k < s->frag_count; k++) {
            const wc_fragment *f = &m->fragments[s->frag_first + k];
            if (t->ndim > 0 && f->offset[0] >= to[0] + ts[0]) break;   /* sorted by dim 0 */
            rc = plan_intersection(plan, t, (uint32_t)ti, f, to, ts, dstr);
            if (rc < 0) goto empty_plan;
        }
    }
    plan->n_dst = m->n_tensors;
    return SMP_OK;
empty_plan:
    plan->n_ops = 0;
    plan->total_bytes = 0;
    return rc;
}

void wc_plan_free(wc_plan *plan)
{
    if (plan == NULL) return;
    free(plan->ops);
    free(plan->dst_bytes);
    memset(plan, 0, sizeof *plan);
}

/* The end (exclusive) of an op's last run: base + (count-1)*stride + bytes;
 * 0 on overflow (never a valid end, since bytes > 0). */
static uint64_t op_end(uint64_t base, uint64_t count, uint64_t stride, uint64_t bytes)
{
    uint64_t span, end;
    if (count == 0 || __builtin_mul_overflow(count - 1, stride, &span) ||
        __builtin_add_overflow(base, span, &end) || __builtin_add_overflow(end, bytes, &end))
        return 0;
    return end;
}

int wc_plan_apply(const wc_plan *plan, const uint8_t *const *objects,
                  const uint64_t *object_bytes, size_t n_objects, uint8_t *const *bindings)
{
    for (size_t i = 0; i < plan->n_ops; i++) {
        const wc_copy_op *op = &plan->ops[i];
        if (op->object >= n_objects || objects[op->object] == NULL || op->dst >= plan->n_dst ||
            bindings[op->dst] == NULL)
            return SMP_ERANGE;
        uint64_t se = op_end(op->src_offset, op->count, op->src_stride, op->bytes);
        uint64_t de = op_end(op->dst_offset, op->count, op->dst_stride, op->bytes);
        if (se == 0 || se > object_bytes[op->object] || de == 0 || de > plan->dst_bytes[op->dst])
            return SMP_ERANGE;
    }
    for (size_t i = 0; i < plan->n_ops; i++) {
        const wc_copy_op *op = &plan->ops[i];
        const uint8_t *src = objects[op->object] + op->src_offset;
        uint8_t *dst = bindings[op->dst] + op->dst_offset;
        for (uint64_t k = 0; k < op->count; k++)
            memcpy(dst + k * op->dst_stride, src + k * op->src_stride, op->bytes);
    }
    return SMP_OK;
}
