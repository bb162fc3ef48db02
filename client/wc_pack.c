/* wc_pack.c -- the writer's packing of tensors into bounded payload objects.
 *
 * One pass over the tensors in name order fills objects next-fit, producing
 * manifest fragments and the matching puts; because a tensor's fragments go
 * to consecutive objects, the objects a tensor spans form a range, and the
 * affinity units are the maximal runs of objects joined by such ranges. The
 * manifest's own validation (wc_manifest_finalize) then checks what the caller
 * gave us (fragments covering each tensor exactly, ties of equal tensors), so
 * those rules are stated once. See wc_pack.h for the packing rules. */
#include "wc_pack.h"
#include "wm_errbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct packer {
    wc_manifest *m;
    uint64_t bound;
    uint64_t fill;             /* bytes in the open object (0: none open) */
    uint32_t n_closed;         /* objects closed so far = index of the open one */
    wc_pack_put *puts;
    size_t n_puts;
    size_t cap_puts;
    char *key;                 /* scratch for object keys */
    size_t key_cap;
} packer;

/* Bytes left in the open object (0 when a row over the bound overfilled it). */
static uint64_t room(const packer *p)
{
    return p->fill >= p->bound ? 0 : p->bound - p->fill;
}

/* Close the open object (if any): add it to the manifest with its fill. */
static int close_object(packer *p)
{
    if (p->fill == 0) return SMP_OK;
    if (p->n_closed >= WC_NONE - 1) return SMP_ERANGE;
    snprintf(p->key, p->key_cap, "%s/payload/%u", p->m->group, p->n_closed);
    int rc = wc_manifest_add_object(p->m, p->key, p->fill, NULL);
    if (rc < 0) return rc;
    p->n_closed++;
    p->fill = 0;
    return SMP_OK;
}

/* Put one fragment of bytes at the end of the open object (opening it). */
static int place(packer *p, uint32_t mtensor, uint32_t in_tensor, uint32_t source,
                 const uint64_t *offset, const uint64_t *shape, uint64_t bytes,
                 uint64_t source_offset)
{
    int rc = wc_manifest_add_fragment(p->m, mtensor, offset, shape, p->n_closed, p->fill,
                                      bytes);
    if (rc < 0) return rc;
    if (p->n_puts == p->cap_puts) {
        size_t ncap = p->cap_puts ? p->cap_puts * 2 : 64;
        wc_pack_put *np = realloc(p->puts, ncap * sizeof *np);
        if (np == NULL) return SMP_ENOMEM;
        p->puts = np;
        p->cap_puts = ncap;
    }
    wc_pack_put *put = &p->puts[p->n_puts++];
    put->object = p->n_closed;
    put->tensor = in_tensor;
    put->source = source;
    put->object_offset = p->fill;
    put->source_offset = source_offset;
    put->bytes = bytes;
    p->fill += bytes;
    return SMP_OK;
}

typedef struct named {
    const char *name;
    uint32_t idx;
    int attachment;
} named;

static int cmp_named(const void *a, const void *b)
{
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* Tensors by name, then the attachments by name (they come last). */
static int cmp_named_attachments_last(const void *a, const void *b)
{
    const named *x = a, *y = b;
    if (x->attachment != y->attachment) return x->attachment - y->attachment;
    return strcmp(x->name, y->name);
}

typedef struct src_frag {
    const uint64_t *offset;
    uint32_t ndim;
    uint32_t idx;
} src_frag;

static int cmp_src_frag(const void *a, const void *b)
{
    const src_frag *x = a, *y = b;
    for (uint32_t d = 0; d < x->ndim; d++)
        if (x->offset[d] != y->offset[d]) return x->offset[d] < y->offset[d] ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

typedef struct tie_pair {
    uint32_t storage;          /* manifest index */
    uint32_t member;           /* manifest index */
} tie_pair;

static int cmp_tie(const void *a, const void *b)
{
    const tie_pair *x = a, *y = b;
    if (x->storage != y->storage) return x->storage < y->storage ? -1 : 1;
    return x->member < y->member ? -1 : x->member > y->member;
}

/* Place the fragments of one stored tensor t (caller's index in_t, manifest
 * index mt); records the object range it spans in *first_obj / *last_obj
 * (unchanged when it holds no bytes). */
static int place_tensor(packer *p, const wc_pack_tensor *t, uint32_t in_t, uint32_t mt,
                        src_frag *scratch, uint32_t *first_obj, uint32_t *last_obj,
                        char *err, size_t errlen)
{
    static const uint64_t zeros[WC_MAX_NDIM];
    uint32_t item = wc_dtype_size(t->dtype);
    uint64_t tbytes;
    size_t nf = t->n_fragments ? t->n_fragments : 1;
    int rc;

    if (wc_shape_bytes(t->shape, t->ndim, item, &tbytes) < 0) {
        wm_errbuf(err, errlen, "tensor '%s': size overflows 64 bits", t->name);
        return SMP_ERANGE;
    }
    if (tbytes == 0) return SMP_OK;        /* nothing to store */
    for (size_t i = 0; i < nf; i++) {
        const uint64_t *off = t->n_fragments ? t->fragments[i].offset : zeros;
        const uint64_t *shp = t->n_fragments ? t->fragments[i].shape : t->shape;
        if (t->ndim > 0 && (off == NULL || shp == NULL)) {
            wm_errbuf(err, errlen, "tensor '%s': fragment %zu has no offset or shape",
                    t->name, i);
            return SMP_EINVAL;
        }
        for (uint32_t d = 0; d < t->ndim; d++) {
            if (off[d] > t->shape[d] || shp[d] > t->shape[d] - off[d]) {
                wm_errbuf(err, errlen, "tensor '%s': fragment %zu leaves the tensor along "
                        "dimension %u", t->name, i, d);
                return SMP_EINVAL;
            }
        }
        scratch[i].offset = off;
        scratch[i].ndim = t->ndim;
        scratch[i].idx = (uint32_t)i;
    }
    qsort(scratch, nf, sizeof *scratch, cmp_src_frag);

    int big = tbytes > p->bound;
    if (p->fill > 0 && (big || tbytes > room(p)))
        if ((rc = close_object(p)) < 0) return rc;
    *first_obj = p->n_closed;
    for (size_t k = 0; k < nf; k++) {
        uint32_t src = scratch[k].idx;
        const uint64_t *off = t->n_fragments ? t->fragments[src].offset : zeros;
        const uint64_t *shp = t->n_fragments ? t->fragments[src].shape : t->shape;
        uint64_t fbytes;
        wc_shape_bytes(shp, t->ndim, item, &fbytes);   /* inside the tensor: no overflow */
        if (fbytes == 0) continue;                      /* an empty shard holds nothing */
        if (!big) {
            rc = place(p, mt, in_t, src, off, shp, fbytes, 0);
            if (rc < 0) return rc;
            continue;
        }
        /* Cut into chunks of whole rows along dimension 0. */
        uint64_t rows = t->ndim ? shp[0] : 1;
        uint64_t row_bytes = fbytes / rows;
        uint64_t done = 0;
        uint64_t coff[WC_MAX_NDIM], cshp[WC_MAX_NDIM];
        if (t->ndim > 0) {
            memcpy(coff, off, t->ndim * sizeof *off);
            memcpy(cshp, shp, t->ndim * sizeof *shp);
        }
        while (done < rows) {
            if (p->fill > 0 && room(p) < row_bytes)
                if ((rc = close_object(p)) < 0) return rc;
            uint64_t k_rows = room(p) / row_bytes;
            if (k_rows == 0) k_rows = 1;
            if (k_rows > rows - done) k_rows = rows - done;
            if (t->ndim > 0) {
                coff[0] = off[0] + done;
                cshp[0] = k_rows;
            }
            rc = place(p, mt, in_t, src, coff, cshp, k_rows * row_bytes, done * row_bytes);
            if (rc < 0) return rc;
            done += k_rows;
        }
    }
    *last_obj = p->n_closed;
    return SMP_OK;
}

/* Affinity units: runs of objects joined by tensors that span them. */
static int add_units(wc_manifest *m, const uint8_t *joined)
{
    int rc = SMP_OK;
    size_t n = m->n_objects;
    uint32_t *members = malloc((n ? n : 1) * sizeof *members);
    if (members == NULL) return SMP_ENOMEM;
    size_t start = 0;
    while (start < n) {
        size_t end = start;
        uint64_t bytes = m->objects[start].bytes;
        while (end + 1 < n && joined[end]) {
            end++;
            bytes += m->objects[end].bytes;
        }
        for (size_t k = start; k <= end; k++) members[k - start] = (uint32_t)k;
        rc = wc_manifest_add_unit(m, members, (uint32_t)(end - start + 1), bytes);
        if (rc < 0) break;
        start = end + 1;
    }
    free(members);
    return rc;
}

void wc_pack_result_free(wc_pack_result *r)
{
    if (r == NULL) return;
    wc_manifest_free(&r->manifest);
    free(r->puts);
    memset(r, 0, sizeof *r);
}

int wc_pack(const wc_identity *id, const wc_pack_tensor *tensors, size_t n,
            uint64_t object_bound, wc_pack_result *out, char *err, size_t errlen)
{
    int rc;
    packer p;
    named *order = NULL;
    tie_pair *ties = NULL;
    uint32_t *storage_of = NULL;       /* by manifest index: WC_NONE or storage */
    src_frag *scratch = NULL;
    uint8_t *joined = NULL;
    uint32_t *spans = NULL;            /* by manifest index: object range spanned */
    size_t n_ties = 0, max_frags = 1, n_plain = n; /* order[0 .. n_plain): not attachments */

    memset(out, 0, sizeof *out);
    memset(&p, 0, sizeof p);
    if (object_bound == 0 || (n > 0 && tensors == NULL) || n >= WC_NONE) {
        wm_errbuf(err, errlen, "pack: object bound must be positive and tensors given");
        return SMP_EINVAL;
    }
    if ((rc = wc_manifest_init(&out->manifest, id, err, errlen)) < 0) return rc;
    p.m = &out->manifest;
    p.bound = object_bound;
    rc = SMP_ENOMEM;
    p.key_cap = strlen(p.m->group) + 32;
    order = malloc((n ? n : 1) * sizeof *order);
    storage_of = malloc((n ? n : 1) * sizeof *storage_of);
    ties = malloc((n ? n : 1) * sizeof *ties);
    p.key = malloc(p.key_cap);
    if (order == NULL || storage_of == NULL || ties == NULL || p.key == NULL)
        goto free_scratch;

    /* Manifest tensors in name order, the attachments after them. */
    for (size_t i = 0; i < n; i++) {
        if (tensors[i].name == NULL || tensors[i].name[0] == '\0') {
            wm_errbuf(err, errlen, "pack: tensor %zu has no name", i);
            rc = SMP_EINVAL;
            goto free_scratch;
        }
        order[i].name = tensors[i].name;
        order[i].idx = (uint32_t)i;
        order[i].attachment = tensors[i].attachment != 0;
        if (tensors[i].n_fragments > max_frags) max_frags = tensors[i].n_fragments;
    }
    qsort(order, n, sizeof *order, cmp_named_attachments_last);
    n_plain = 0;
    while (n_plain < n && !order[n_plain].attachment) n_plain++;
    for (size_t k = 0; k < n; k++) {
        const wc_pack_tensor *t = &tensors[order[k].idx];
        if (k > 0 && strcmp(order[k - 1].name, t->name) == 0) {
            wm_errbuf(err, errlen, "tensor '%s' appears twice", t->name);
            rc = SMP_EINVAL;
            goto free_scratch;
        }
        if (wc_dtype_size(t->dtype) == 0 || t->ndim > WC_MAX_NDIM ||
            (t->ndim > 0 && t->shape == NULL)) {
            wm_errbuf(err, errlen, "tensor '%s': unknown dtype, or rank over %d", t->name,
                    WC_MAX_NDIM);
            rc = SMP_EINVAL;
            goto free_scratch;
        }
        if ((rc = wc_manifest_add_tensor(p.m, t->name, t->dtype, t->ndim, t->shape, NULL)) < 0)
            goto free_scratch;
        if (t->attachment && (rc = wc_manifest_set_attachment(p.m, (uint32_t)k)) < 0)
            goto free_scratch;
    }

    /* Ties: a (storage, member) pair per tied tensor, grouped by storage. */
    for (size_t k = 0; k < n; k++) {
        const wc_pack_tensor *t = &tensors[order[k].idx];
        storage_of[k] = WC_NONE;
        if (t->tied_to == NULL) continue;
        named key = {t->tied_to, 0, 0};
        const named *hit = t->attachment ? NULL
                                         : bsearch(&key, order, n_plain, sizeof *order, cmp_named);
        if (hit == NULL || tensors[hit->idx].tied_to != NULL) {
            wm_errbuf(err, errlen, "tensor '%s': tied to '%s', which is %s", t->name,
                    t->tied_to, hit == NULL ? "not in the revision" : "itself tied");
            rc = SMP_EINVAL;
            goto free_scratch;
        }
        storage_of[k] = (uint32_t)(hit - order);
        ties[n_ties].storage = storage_of[k];
        ties[n_ties].member = (uint32_t)k;
        n_ties++;
    }
    qsort(ties, n_ties, sizeof *ties, cmp_tie);
    for (size_t a = 0; a < n_ties;) {
        size_t b = a;
        while (b < n_ties && ties[b].storage == ties[a].storage) b++;
        uint32_t *members = malloc((b - a + 1) * sizeof *members);
        if (members == NULL) {
            rc = SMP_ENOMEM;
            goto free_scratch;
        }
        members[0] = ties[a].storage;
        for (size_t k = a; k < b; k++) members[k - a + 1] = ties[k].member;
        rc = wc_manifest_add_alias_group(p.m, members, (uint32_t)(b - a + 1));
        free(members);
        if (rc < 0) goto free_scratch;
        a = b;
    }

    /* Fill objects. */
    scratch = malloc(max_frags * sizeof *scratch);
    if (scratch == NULL) {
        rc = SMP_ENOMEM;
        goto free_scratch;
    }
    spans = malloc(2 * (n ? n : 1) * sizeof *spans);
    if (spans == NULL) {
        rc = SMP_ENOMEM;
        goto free_scratch;
    }
    for (size_t k = 0; k < n; k++) {
        spans[2 * k] = spans[2 * k + 1] = WC_NONE;
        if (storage_of[k] != WC_NONE) continue;
        rc = place_tensor(&p, &tensors[order[k].idx], order[k].idx, (uint32_t)k, scratch,
                          &spans[2 * k], &spans[2 * k + 1], err, errlen);
        if (rc < 0) goto free_scratch;
    }
    if ((rc = close_object(&p)) < 0) goto free_scratch;
    joined = calloc(p.m->n_objects ? p.m->n_objects : 1, 1);
    if (joined == NULL) {
        rc = SMP_ENOMEM;
        goto free_scratch;
    }
    for (size_t k = 0; k < n; k++)
        if (spans[2 * k] != WC_NONE)
            for (uint32_t o = spans[2 * k]; o < spans[2 * k + 1]; o++) joined[o] = 1;
    if ((rc = add_units(p.m, joined)) < 0) goto free_scratch;

    if ((rc = wc_manifest_finalize(p.m, err, errlen)) < 0) goto free_scratch;
    out->puts = p.puts;
    out->n_puts = p.n_puts;
    p.puts = NULL;
    rc = SMP_OK;
free_scratch:
    free(spans);
    free(joined);
    free(scratch);
    free(p.key);
    free(ties);
    free(storage_of);
    free(order);
    free(p.puts);
    if (rc < 0) wc_manifest_free(&out->manifest);
    return rc;
}
