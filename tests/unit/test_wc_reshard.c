/* test_wc_reshard.c -- the reshard planner against an independent slicer.
 *
 * Synthetic tensors (every byte a function of the tensor and its position) are
 * stored through wc_pack from a single whole fragment, from four shards along
 * dimension 0 and from four shards along dimension 1; each layout is then read
 * for tensor parallelism 1, 2 and 4 along dimension 0 and dimension 1, every
 * rank, by executing the plan with memcpy (wc_plan_apply). The bytes must
 * equal, byte for byte, a slice of the global tensor cut by a naive
 * element-by-element loop written here with its own split arithmetic. Also:
 * the coalescing counts, aliases, uneven and empty parts, bad placements. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "wc_pack.h"
#include "wc_plan.h"

static const wc_identity ident = {"acme", "llm", "tiny", "main", 1};

/* ---- synthetic tensors and the naive slicer -------------------------------- */

typedef struct gtensor {
    const char *name;
    wc_dtype dtype;
    uint32_t ndim;
    uint64_t shape[WC_MAX_NDIM];
    uint8_t *data;                   /* global, row-major */
    uint64_t bytes;
} gtensor;

static uint64_t volume(const uint64_t *shape, uint32_t nd)
{
    uint64_t v = 1;
    for (uint32_t d = 0; d < nd; d++) v *= shape[d];
    return v;
}

static void gtensor_fill(gtensor *g, uint32_t seed)
{
    g->bytes = volume(g->shape, g->ndim) * wc_dtype_size(g->dtype);
    g->data = malloc(g->bytes ? g->bytes : 1);
    assert_non_null(g->data);
    for (uint64_t i = 0; i < g->bytes; i++)
        g->data[i] = (uint8_t)((i * 2654435761u + seed * 97u + (i >> 8)) & 0xff);
}

/* Copy the box (off, shp) of g into a fresh row-major buffer, one element at a
 * time, by decoding every linear index of the box into coordinates. */
static uint8_t *naive_slice(const gtensor *g, const uint64_t *off, const uint64_t *shp,
                            uint64_t *out_bytes)
{
    uint32_t item = wc_dtype_size(g->dtype);
    uint64_t n = volume(shp, g->ndim);
    uint8_t *out = malloc(n * item + 1);
    assert_non_null(out);
    for (uint64_t e = 0; e < n; e++) {
        uint64_t rem = e, gidx = 0;
        uint64_t coord[WC_MAX_NDIM] = {0};
        for (int d = (int)g->ndim - 1; d >= 0; d--) {
            coord[d] = rem % shp[d];
            rem /= shp[d];
        }
        for (uint32_t d = 0; d < g->ndim; d++) gidx = gidx * g->shape[d] + off[d] + coord[d];
        memcpy(out + e * item, g->data + gidx * item, item);
    }
    *out_bytes = n * item;
    return out;
}

/* The test's own split rule: the first size % parts parts get one more. */
static void naive_part(uint64_t size, uint32_t parts, uint32_t rank, uint64_t *off,
                       uint64_t *len)
{
    uint64_t start = 0;
    for (uint32_t r = 0; r < rank; r++) start += size / parts + (r < size % parts);
    *off = start;
    *len = size / parts + (rank < size % parts);
}

/* ---- storing through wc_pack ----------------------------------------------- */

typedef struct stored {
    wc_pack_result res;
    uint8_t **objects;
    uint64_t *object_bytes;
    /* source shards, kept for the puts */
    uint64_t (*offs)[WC_MAX_NDIM];
    uint64_t (*shps)[WC_MAX_NDIM];
    wc_pack_fragment *frags;
} stored;

/* Store tensors g[0..n) sharded into `shards` parts along dimension `dim`
 * (shards 1: one whole fragment), objects of at most bound bytes. */
static void store(stored *s, gtensor *g, size_t n, uint32_t shards, uint32_t dim,
                  uint64_t bound, const char *const *tied_to)
{
    char err[256] = "";
    wc_pack_tensor *pt = calloc(n, sizeof *pt);
    memset(s, 0, sizeof *s);
    s->offs = calloc(n * shards, sizeof *s->offs);
    s->shps = calloc(n * shards, sizeof *s->shps);
    s->frags = calloc(n * shards, sizeof *s->frags);
    assert_non_null(pt);
    for (size_t i = 0; i < n; i++) {
        pt[i].name = g[i].name;
        pt[i].dtype = g[i].dtype;
        pt[i].ndim = g[i].ndim;
        pt[i].shape = g[i].shape;
        pt[i].tied_to = tied_to ? tied_to[i] : NULL;
        if (shards == 1) continue;
        uint32_t sd = dim < g[i].ndim ? dim : 0;
        for (uint32_t r = 0; r < shards; r++) {
            size_t k = i * shards + r;
            for (uint32_t d = 0; d < g[i].ndim; d++) {
                s->offs[k][d] = 0;
                s->shps[k][d] = g[i].shape[d];
            }
            naive_part(g[i].shape[sd], shards, r, &s->offs[k][sd], &s->shps[k][sd]);
            s->frags[k].offset = s->offs[k];
            s->frags[k].shape = s->shps[k];
        }
        pt[i].fragments = &s->frags[i * shards];
        pt[i].n_fragments = shards;
    }
    int rc = wc_pack(&ident, pt, n, bound, &s->res, err, sizeof err);
    if (rc != SMP_OK) fail_msg("wc_pack: %d %s", rc, err);
    const wc_manifest *m = &s->res.manifest;
    s->objects = calloc(m->n_objects + 1, sizeof *s->objects);
    s->object_bytes = calloc(m->n_objects + 1, sizeof *s->object_bytes);
    for (size_t o = 0; o < m->n_objects; o++) {
        s->object_bytes[o] = m->objects[o].bytes;
        s->objects[o] = calloc(1, m->objects[o].bytes);
    }
    /* The writer: each put copies from a source shard into an object. */
    for (size_t i = 0; i < s->res.n_puts; i++) {
        const wc_pack_put *p = &s->res.puts[i];
        const gtensor *gt = &g[p->tensor];
        uint64_t sb;
        uint8_t *buf;
        if (shards == 1) {
            buf = gt->data;
            sb = gt->bytes;
        } else {
            size_t k = p->tensor * shards + p->source;
            buf = naive_slice(gt, s->offs[k], s->shps[k], &sb);
        }
        assert_true(p->source_offset + p->bytes <= sb);
        assert_true(p->object_offset + p->bytes <= s->object_bytes[p->object]);
        memcpy(s->objects[p->object] + p->object_offset, buf + p->source_offset, p->bytes);
        if (buf != gt->data) free(buf);
    }
    free(pt);
}

static void stored_free(stored *s)
{
    for (size_t o = 0; o < s->res.manifest.n_objects; o++) free(s->objects[o]);
    free(s->objects);
    free(s->object_bytes);
    free(s->offs);
    free(s->shps);
    free(s->frags);
    wc_pack_result_free(&s->res);
}

/* Read every tensor of s as part `rank` of `parts` along `dim` (replicated when
 * parts is 1 and dim is UINT32_MAX) and compare with the naive slice. Returns
 * the number of ops of the plan. */
static size_t read_and_check(stored *s, gtensor *g, size_t n, uint32_t parts, uint32_t dim,
                             uint32_t rank)
{
    const wc_manifest *m = &s->res.manifest;
    wc_placement *pl = calloc(m->n_tensors, sizeof *pl);
    uint8_t **bind = calloc(m->n_tensors, sizeof *bind);
    wc_plan plan = {0};
    char err[256] = "";
    for (size_t i = 0; i < n; i++) {
        uint32_t ti = wc_manifest_find_tensor(m, g[i].name);
        assert_int_not_equal(ti, WC_NONE);
        if (dim == UINT32_MAX) {
            pl[ti].kind = WC_PLACE_REPLICATED;
        } else {
            pl[ti].kind = WC_PLACE_SPLIT;
            pl[ti].dim = dim < g[i].ndim ? dim : 0;
            pl[ti].parts = parts;
            pl[ti].rank = rank;
        }
    }
    int rc = wc_plan_build(m, pl, &plan, err, sizeof err);
    if (rc != SMP_OK) fail_msg("plan: %d %s", rc, err);
    for (size_t t = 0; t < m->n_tensors; t++) {
        bind[t] = malloc(plan.dst_bytes[t] + 1);
        memset(bind[t], 0xEE, plan.dst_bytes[t] + 1);
    }
    assert_int_equal(wc_plan_apply(&plan, (const uint8_t *const *)s->objects, s->object_bytes,
                                   m->n_objects, bind), SMP_OK);
    for (size_t i = 0; i < n; i++) {
        uint32_t ti = wc_manifest_find_tensor(m, g[i].name);
        uint64_t off[WC_MAX_NDIM], shp[WC_MAX_NDIM], want_bytes;
        for (uint32_t d = 0; d < g[i].ndim; d++) {
            off[d] = 0;
            shp[d] = g[i].shape[d];
        }
        if (dim != UINT32_MAX) {
            uint32_t sd = dim < g[i].ndim ? dim : 0;
            naive_part(g[i].shape[sd], parts, rank, &off[sd], &shp[sd]);
        }
        uint8_t *want = naive_slice(&g[i], off, shp, &want_bytes);
        assert_int_equal(plan.dst_bytes[ti], want_bytes);
        if (memcmp(bind[ti], want, want_bytes) != 0)
            fail_msg("tensor %s: parts %u dim %u rank %u differs", g[i].name, parts, dim, rank);
        assert_int_equal(bind[ti][want_bytes], 0xEE);      /* nothing written past */
        free(want);
    }
    size_t n_ops = plan.n_ops;
    for (size_t t = 0; t < m->n_tensors; t++) free(bind[t]);
    free(bind);
    free(pl);
    wc_plan_free(&plan);
    return n_ops;
}

static gtensor *make_tensors(size_t *n)
{
    static const struct {
        const char *name;
        wc_dtype dt;
        uint32_t nd;
        uint64_t shape[4];
    } spec[] = {
        {"attn.qkv", WC_DTYPE_BF16, 2, {12, 10}},
        {"attn.out", WC_DTYPE_F32, 2, {10, 6}},
        {"mlp.up", WC_DTYPE_F8_E4M3, 2, {16, 8}},
        {"conv", WC_DTYPE_F16, 3, {4, 6, 5}},
        {"norm", WC_DTYPE_F32, 1, {9}},
        {"odd", WC_DTYPE_I64, 2, {7, 5}},
        {"four_d", WC_DTYPE_F16, 4, {3, 4, 2, 6}},
    };
    *n = sizeof spec / sizeof spec[0];
    gtensor *g = calloc(*n, sizeof *g);
    for (size_t i = 0; i < *n; i++) {
        g[i].name = spec[i].name;
        g[i].dtype = spec[i].dt;
        g[i].ndim = spec[i].nd;
        memcpy(g[i].shape, spec[i].shape, sizeof spec[i].shape);
        gtensor_fill(&g[i], (uint32_t)i + 1);
    }
    return g;
}

static void free_tensors(gtensor *g, size_t n)
{
    for (size_t i = 0; i < n; i++) free(g[i].data);
    free(g);
}

/* ---- tests ----------------------------------------------------------------- */

/* Every source layout read into every target layout equals the naive slice. */
static void test_any_layout_reads_into_any_other(void **state)
{
    (void)state;
    size_t n;
    gtensor *g = make_tensors(&n);
    static const struct {
        uint32_t shards, dim;
        uint64_t bound;
    } src[] = {{1, 0, 1 << 20}, {4, 0, 1 << 20}, {4, 1, 1 << 20}, {1, 0, 64}, {4, 1, 100}};
    for (size_t s = 0; s < sizeof src / sizeof src[0]; s++) {
        stored st;
        store(&st, g, n, src[s].shards, src[s].dim, src[s].bound, NULL);
        read_and_check(&st, g, n, 1, UINT32_MAX, 0);
        for (uint32_t dim = 0; dim < 2; dim++)
            for (uint32_t tp = 1; tp <= 4; tp *= 2)
                for (uint32_t r = 0; r < tp; r++) read_and_check(&st, g, n, tp, dim, r);
        /* dimensions 2 and 3 of the 3-d and 4-d tensors (others fall back to
         * dimension 0): runs walked over two outer dimensions */
        for (uint32_t r = 0; r < 4; r++) read_and_check(&st, g, n, 4, 2, r);
        for (uint32_t r = 0; r < 4; r++) read_and_check(&st, g, n, 4, 3, r);
        stored_free(&st);
    }
    free_tensors(g, n);
}

/* How many tensors have a non-empty part `rank` of `parts` along dim (or 0). */
static size_t nonempty(const gtensor *g, size_t n, uint32_t parts, uint32_t dim, uint32_t rank)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t off, len;
        naive_part(g[i].shape[dim < g[i].ndim ? dim : 0], parts, rank, &off, &len);
        k += len > 0;
    }
    return k;
}

/* A dimension-0 split of a single stored fragment is one copy per tensor;
 * reading TP4 dimension-0 shards as TP2 merges the two shards of each rank
 * into one copy too; a dimension-1 split is one strided op per tensor. */
static void test_coalescing_counts(void **state)
{
    (void)state;
    size_t n;
    gtensor *g = make_tensors(&n);
    stored st;
    store(&st, g, n, 1, 0, 1 << 20, NULL);
    for (uint32_t tp = 1; tp <= 4; tp *= 2)
        for (uint32_t r = 0; r < tp; r++)
            assert_int_equal(read_and_check(&st, g, n, tp, 0, r), nonempty(g, n, tp, 0, r));
    assert_int_equal(read_and_check(&st, g, n, 1, UINT32_MAX, 0), n);
    /* dim 1: "norm" (1-d) falls back to dim 0; every other tensor is one
     * strided op (e.g. "conv" [4,6,5]: 4 runs of 3 x 5 elements). */
    size_t ops = read_and_check(&st, g, n, 2, 1, 0);
    assert_int_equal(ops, n);
    stored_free(&st);

    store(&st, g, n, 4, 0, 1 << 20, NULL);
    for (uint32_t r = 0; r < 2; r++) assert_int_equal(read_and_check(&st, g, n, 2, 0, r), n);
    /* reading the whole tensor from four shards: still one copy each */
    assert_int_equal(read_and_check(&st, g, n, 1, UINT32_MAX, 0), n);
    stored_free(&st);
    free_tensors(g, n);
}

/* The shape of the buffer a rank binds, with uneven and empty parts. */
static void test_uneven_and_empty_parts(void **state)
{
    (void)state;
    wc_tensor t = {0};
    t.ndim = 2;
    t.shape[0] = 10;
    t.shape[1] = 3;
    t.item_size = 2;
    t.dtype = WC_DTYPE_BF16;
    uint64_t shape[WC_MAX_NDIM], bytes, off[WC_MAX_NDIM];
    const uint64_t want[4] = {3, 3, 2, 2}, want_off[4] = {0, 3, 6, 8};
    for (uint32_t r = 0; r < 4; r++) {
        wc_placement p = {WC_PLACE_SPLIT, 0, 4, r};
        assert_int_equal(wc_plan_dst_shape(&t, &p, shape, &bytes), SMP_OK);
        assert_int_equal(shape[0], want[r]);
        assert_int_equal(shape[1], 3);
        assert_int_equal(bytes, want[r] * 3 * 2);
        assert_int_equal(wc_plan_box(&t, &p, off, shape), SMP_OK);
        assert_int_equal(off[0], want_off[r]);
    }
    t.shape[1] = 2;                       /* 2 columns into 4 parts: 1, 1, 0, 0 */
    for (uint32_t r = 0; r < 4; r++) {
        wc_placement p = {WC_PLACE_SPLIT, 1, 4, r};
        assert_int_equal(wc_plan_dst_shape(&t, &p, shape, &bytes), SMP_OK);
        assert_int_equal(shape[1], r < 2 ? 1 : 0);
        assert_int_equal(bytes, r < 2 ? 20 : 0);
    }

    /* Reading the empty part plans nothing for it and still succeeds. */
    gtensor g = {"w", WC_DTYPE_F32, 2, {5, 2}, NULL, 0};
    gtensor_fill(&g, 7);
    stored st;
    store(&st, &g, 1, 1, 0, 1 << 20, NULL);
    for (uint32_t r = 0; r < 4; r++) read_and_check(&st, &g, 1, 4, 1, r);
    assert_int_equal(read_and_check(&st, &g, 1, 8, 0, 6), 0);
    stored_free(&st);
    free(g.data);
}

/* A tied tensor reads its storage tensor's bytes under its own placement. */
static void test_alias_reads_storage_bytes(void **state)
{
    (void)state;
    gtensor g[2] = {{"embed", WC_DTYPE_BF16, 2, {8, 4}, NULL, 0},
                    {"lm_head", WC_DTYPE_BF16, 2, {8, 4}, NULL, 0}};
    gtensor_fill(&g[0], 3);
    g[1].bytes = g[0].bytes;
    g[1].data = g[0].data;               /* tied: the same values */
    const char *tied[2] = {NULL, "embed"};
    stored st;
    store(&st, g, 2, 2, 0, 1 << 20, tied);
    assert_int_equal(st.res.manifest.n_fragments, 2);   /* stored once */
    for (uint32_t r = 0; r < 2; r++) {
        read_and_check(&st, g, 2, 2, 0, r);
        read_and_check(&st, g, 2, 2, 1, r);
    }
    stored_free(&st);
    free(g[0].data);
}

/* Bad placements are refused with the tensor's name, and leave an empty plan. */
static void test_bad_placements_are_refused(void **state)
{
    (void)state;
    gtensor g = {"mlp.down", WC_DTYPE_F32, 2, {4, 4}, NULL, 0};
    gtensor_fill(&g, 1);
    stored st;
    store(&st, &g, 1, 1, 0, 1 << 20, NULL);
    const wc_placement bad[] = {
        {WC_PLACE_SPLIT, 2, 2, 0},        /* dimension out of range */
        {WC_PLACE_SPLIT, 0, 0, 0},        /* zero parts */
        {WC_PLACE_SPLIT, 0, 2, 2},        /* rank not below parts */
        {(wc_place_kind)7, 0, 1, 0},      /* unknown kind */
    };
    wc_plan plan = {0};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        assert_int_equal(wc_plan_build(&st.res.manifest, &bad[i], &plan, err, sizeof err),
                         SMP_EINVAL);
        assert_non_null(strstr(err, "mlp.down"));
        assert_int_equal(plan.n_ops, 0);
    }
    wc_manifest unfinished = {0};
    assert_int_equal(wc_plan_build(&unfinished, bad, &plan, NULL, 0), SMP_ESTATE);
    wc_plan_free(&plan);
    stored_free(&st);
    free(g.data);
}

/* wc_plan_apply refuses, before copying anything, an object smaller than the
 * plan reads or a missing buffer. */
static void test_apply_checks_ranges(void **state)
{
    (void)state;
    gtensor g = {"w", WC_DTYPE_U8, 2, {4, 4}, NULL, 0};
    gtensor_fill(&g, 1);
    stored st;
    store(&st, &g, 1, 1, 0, 1 << 20, NULL);
    wc_placement p = {WC_PLACE_REPLICATED, 0, 0, 0};
    wc_plan plan = {0};
    assert_int_equal(wc_plan_build(&st.res.manifest, &p, &plan, NULL, 0), SMP_OK);
    uint8_t buf[16] = {0};
    uint8_t *bind[1] = {buf};
    uint64_t small = 15;
    assert_int_equal(wc_plan_apply(&plan, (const uint8_t *const *)st.objects, &small, 1, bind),
                     SMP_ERANGE);
    assert_int_equal(buf[0], 0);
    uint8_t *none[1] = {NULL};
    assert_int_equal(wc_plan_apply(&plan, (const uint8_t *const *)st.objects, st.object_bytes,
                                   1, none), SMP_ERANGE);
    assert_int_equal(wc_plan_apply(&plan, (const uint8_t *const *)st.objects, st.object_bytes,
                                   1, bind), SMP_OK);
    assert_memory_equal(buf, g.data, 16);
    wc_plan_free(&plan);
    stored_free(&st);
    free(g.data);
}

/* Random shapes, dtypes, source shardings, object bounds and target
 * placements, bounded: every read equals the slicer. */
static void test_random_layouts_match_the_slicer(void **state)
{
    (void)state;
    static const wc_dtype dts[] = {WC_DTYPE_U8, WC_DTYPE_BF16, WC_DTYPE_F32, WC_DTYPE_I64};
    static const char *names[3] = {"r0", "r1", "r2"};
    uint32_t seed = 4242;
#define RND(n) ((seed = seed * 1103515245u + 12345u), (seed >> 8) % (n))
    for (int iter = 0; iter < 150; iter++) {
        gtensor g[3];
        memset(g, 0, sizeof g);
        uint32_t nd = 1 + RND(4);               /* same rank: shards share a dim */
        for (int i = 0; i < 3; i++) {
            g[i].name = names[i];
            g[i].dtype = dts[RND(4)];
            g[i].ndim = nd;
            for (uint32_t d = 0; d < nd; d++) g[i].shape[d] = 1 + RND(7);
            gtensor_fill(&g[i], (uint32_t)(iter * 3 + i));
        }
        uint32_t shards = 1 + RND(5), sdim = RND(nd);
        uint64_t bound = RND(3) == 0 ? 8 + RND(64) : 1 << 20;
        stored st;
        store(&st, g, 3, shards, sdim, bound, NULL);
        for (int k = 0; k < 4; k++) {
            uint32_t parts = 1 + RND(6), dim = RND(nd), rank = RND(parts);
            if (RND(5) == 0) read_and_check(&st, g, 3, 1, UINT32_MAX, 0);
            else read_and_check(&st, g, 3, parts, dim, rank);
        }
        stored_free(&st);
        for (int i = 0; i < 3; i++) free(g[i].data);
    }
#undef RND
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_any_layout_reads_into_any_other),
        cmocka_unit_test(test_coalescing_counts),
        cmocka_unit_test(test_uneven_and_empty_parts),
        cmocka_unit_test(test_alias_reads_storage_bytes),
        cmocka_unit_test(test_bad_placements_are_refused),
        cmocka_unit_test(test_apply_checks_ranges),
        cmocka_unit_test(test_random_layouts_match_the_slicer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
