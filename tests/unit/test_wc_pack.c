/* test_wc_pack.c -- the writer's packing: the object bound, big tensors cut
 * into row chunks, tied tensors stored once, affinity units, determinism, and
 * the refusals of inputs that cannot make a valid manifest. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "wc_pack.h"

static const wc_identity ident = {"acme", "llm", "tiny", "main", 2};

/* A 2-d F32 tensor of rows x cols, whole. */
static wc_pack_tensor t2(const char *name, uint64_t *shape, uint64_t rows, uint64_t cols)
{
    shape[0] = rows;
    shape[1] = cols;
    wc_pack_tensor t = {name, WC_DTYPE_F32, 2, shape, NULL, 0, NULL, 0};
    return t;
}

/* Objects a tensor's fragments live in: first and last index. */
static void tensor_objects(const wc_manifest *m, const char *name, uint32_t *first,
                           uint32_t *last)
{
    uint32_t ti = wc_manifest_find_tensor(m, name);
    assert_int_not_equal(ti, WC_NONE);
    const wc_tensor *t = &m->tensors[ti];
    *first = UINT32_MAX;
    *last = 0;
    for (size_t k = 0; k < t->frag_count; k++) {
        uint32_t o = m->fragments[t->frag_first + k].object;
        if (o < *first) *first = o;
        if (o > *last) *last = o;
    }
}

/* Small tensors fill objects up to the bound and are never split. */
static void test_bound_is_respected_and_small_tensors_stay_whole(void **state)
{
    (void)state;
    uint64_t sh[10][2];
    wc_pack_tensor in[10];
    char names[10][16];
    for (int i = 0; i < 10; i++) {
        snprintf(names[i], sizeof names[i], "layer.%02d", i);
        in[i] = t2(names[i], sh[i], 5 + (uint64_t)i * 3, 8);   /* 160 .. 1024 bytes */
    }
    wc_pack_result r;
    char err[256];
    assert_int_equal(wc_pack(&ident, in, 10, 1200, &r, err, sizeof err), SMP_OK);
    const wc_manifest *m = &r.manifest;
    uint64_t total = 0;
    for (size_t o = 0; o < m->n_objects; o++) {
        assert_true(m->objects[o].bytes <= 1200);
        total += m->objects[o].bytes;
        char want[128];
        snprintf(want, sizeof want, "weights/acme/llm/tiny/main/2/payload/%zu", o);
        assert_string_equal(m->objects[o].key, want);
    }
    uint64_t sum = 0;
    for (int i = 0; i < 10; i++) {
        uint32_t a, b;
        tensor_objects(m, names[i], &a, &b);
        assert_int_equal(a, b);
        sum += (5 + (uint64_t)i * 3) * 8 * 4;
    }
    assert_int_equal(total, sum);                      /* no padding */
    assert_int_equal(m->n_units, m->n_objects);        /* every object its own unit */
    /* puts are ordered and tile the objects */
    uint64_t at = 0;
    uint32_t obj = 0;
    for (size_t i = 0; i < r.n_puts; i++) {
        if (r.puts[i].object != obj) {
            assert_int_equal(at, m->objects[obj].bytes);
            obj = r.puts[i].object;
            at = 0;
        }
        assert_int_equal(r.puts[i].object_offset, at);
        at += r.puts[i].bytes;
    }
    wc_pack_result_free(&r);
}

/* A tensor bigger than the bound starts a fresh object and is cut into chunks
 * of whole rows along dimension 0, each a fragment, filling objects. */
static void test_big_tensor_is_cut_into_row_chunks(void **state)
{
    (void)state;
    uint64_t sh[2][2];
    wc_pack_tensor in[2] = {t2("a.small", sh[0], 2, 16), t2("b.big", sh[1], 100, 16)};
    wc_pack_result r;
    char err[256];
    /* rows of 64 bytes, 15 per 1000-byte object: 6 x 15 + 10 rows */
    assert_int_equal(wc_pack(&ident, in, 2, 1000, &r, err, sizeof err), SMP_OK);
    const wc_manifest *m = &r.manifest;
    assert_int_equal(m->n_objects, 8);
    assert_int_equal(m->objects[0].bytes, 128);        /* a.small alone */
    for (int o = 1; o < 7; o++) assert_int_equal(m->objects[o].bytes, 960);
    assert_int_equal(m->objects[7].bytes, 640);
    uint32_t ti = wc_manifest_find_tensor(m, "b.big");
    const wc_tensor *t = &m->tensors[ti];
    assert_int_equal(t->frag_count, 7);
    for (size_t k = 0; k < 7; k++) {
        const wc_fragment *f = &m->fragments[t->frag_first + k];
        assert_int_equal(f->offset[0], k * 15);
        assert_int_equal(f->offset[1], 0);
        assert_int_equal(f->shape[0], k < 6 ? 15 : 10);
        assert_int_equal(f->shape[1], 16);
        assert_int_equal(f->object, k + 1);
        assert_int_equal(f->object_offset, 0);
    }
    /* the chunks' puts read consecutive rows of the source */
    for (size_t i = 0; i < r.n_puts; i++)
        if (r.puts[i].tensor == 1)
            assert_int_equal(r.puts[i].source_offset, (r.puts[i].object - 1) * 960);
    assert_int_equal(m->n_units, 2);
    assert_int_equal(m->units[1].n, 7);
    assert_int_equal(m->units[1].logical_bytes, 6400);
    wc_pack_result_free(&r);

    /* A row over the bound is one chunk of one row: rows are never cut. */
    uint64_t s3[2];
    wc_pack_tensor wide = t2("wide", s3, 3, 100);
    assert_int_equal(wc_pack(&ident, &wide, 1, 100, &r, err, sizeof err), SMP_OK);
    assert_int_equal(r.manifest.n_objects, 3);
    for (int o = 0; o < 3; o++) assert_int_equal(r.manifest.objects[o].bytes, 400);
    assert_int_equal(r.manifest.n_units, 1);
    wc_pack_result_free(&r);
}

/* Tied weights are stored once: one alias group, no fragments for the tie. */
static void test_tied_weights_are_stored_once(void **state)
{
    (void)state;
    uint64_t sh[3][2];
    wc_pack_tensor in[3] = {t2("lm_head", sh[0], 32, 8), t2("embed", sh[1], 32, 8),
                            t2("norm", sh[2], 1, 8)};
    in[0].tied_to = "embed";
    wc_pack_result r;
    char err[256];
    assert_int_equal(wc_pack(&ident, in, 3, 1 << 20, &r, err, sizeof err), SMP_OK);
    const wc_manifest *m = &r.manifest;
    assert_int_equal(m->n_objects, 1);
    assert_int_equal(m->objects[0].bytes, 32 * 8 * 4 + 8 * 4);
    assert_int_equal(m->n_alias_groups, 1);
    assert_int_equal(m->alias_groups[0].n, 2);
    uint32_t e = wc_manifest_find_tensor(m, "embed"), l = wc_manifest_find_tensor(m, "lm_head");
    assert_int_equal(m->alias_groups[0].tensors[0], e);
    assert_int_equal(m->alias_groups[0].tensors[1], l);
    assert_int_equal(m->tensors[l].frag_count, 0);
    assert_int_equal(m->tensors[l].storage, e);
    for (size_t i = 0; i < r.n_puts; i++) assert_int_not_equal(r.puts[i].tensor, 0);
    wc_pack_result_free(&r);
}

/* Attachments (files of a model directory) follow every tensor in the
 * manifest whatever their names, are marked, and cannot be tie targets. */
static void test_attachments_come_after_the_tensors(void **state)
{
    (void)state;
    uint64_t sh[2][2], one[1] = {5};
    wc_pack_tensor in[3] = {t2("z.weight", sh[0], 2, 2), t2("b.weight", sh[1], 2, 2),
                            {"a.json", WC_DTYPE_U8, 1, one, NULL, 0, NULL, 1}};
    wc_pack_result r;
    char err[256];
    assert_int_equal(wc_pack(&ident, in, 3, 1 << 20, &r, err, sizeof err), SMP_OK);
    const wc_manifest *m = &r.manifest;
    assert_int_equal(m->n_tensors, 3);
    assert_string_equal(m->tensors[0].name, "b.weight");
    assert_string_equal(m->tensors[1].name, "z.weight");
    assert_string_equal(m->tensors[2].name, "a.json");
    assert_true(m->tensors[2].attachment);
    assert_int_equal(wc_manifest_n_plain(m), 2);
    wc_pack_result_free(&r);
    in[0].tied_to = "a.json";
    in[0].ndim = 1;
    in[0].dtype = WC_DTYPE_U8;
    in[0].shape = one;
    assert_int_equal(wc_pack(&ident, in, 3, 1 << 20, &r, err, sizeof err), SMP_EINVAL);
    assert_non_null(strstr(err, "tied to 'a.json', which is not in the revision"));
}

/* Objects joined by a tensor that spans them form one unit; the rest stand
 * alone. Small tensors after a big one share its last object and unit. */
static void test_affinity_units_are_connected_objects(void **state)
{
    (void)state;
    uint64_t sh[4][2];
    /* bound 1000: a+b (800) | c: 1000, 1000, 500 | d joins c's tail (800) */
    wc_pack_tensor in[4] = {t2("a", sh[0], 10, 10), t2("b", sh[1], 10, 10),
                            t2("c", sh[2], 25, 25), t2("d", sh[3], 3, 25)};
    wc_pack_result r;
    char err[256];
    assert_int_equal(wc_pack(&ident, in, 4, 1000, &r, err, sizeof err), SMP_OK);
    const wc_manifest *m = &r.manifest;
    assert_int_equal(m->n_objects, 4);
    assert_int_equal(m->objects[0].bytes, 800);
    assert_int_equal(m->objects[3].bytes, 500 + 300);
    assert_int_equal(m->n_units, 2);
    assert_int_equal(m->units[0].n, 1);
    assert_int_equal(m->units[0].objects[0], 0);
    assert_int_equal(m->units[0].logical_bytes, 800);
    assert_int_equal(m->units[1].n, 3);
    assert_int_equal(m->units[1].objects[0], 1);
    assert_int_equal(m->units[1].objects[2], 3);
    assert_int_equal(m->units[1].logical_bytes, 2800);
    wc_pack_result_free(&r);
}

/* Sharded input (four ranks along dimension 1) keeps the four fragments, in
 * one object; the result does not depend on the order of the input. */
static void test_sharded_input_and_determinism(void **state)
{
    (void)state;
    uint64_t shape[2] = {8, 16};
    uint64_t off[4][2], shp[4][2];
    wc_pack_fragment fr[4];
    for (int r = 0; r < 4; r++) {
        off[r][0] = 0;
        off[r][1] = (uint64_t)(3 - r) * 4;            /* given out of order */
        shp[r][0] = 8;
        shp[r][1] = 4;
        fr[r].offset = off[r];
        fr[r].shape = shp[r];
    }
    uint64_t sh2[2][2];
    wc_pack_tensor in[3] = {{"w", WC_DTYPE_BF16, 2, shape, fr, 4, NULL, 0},
                            t2("x", sh2[0], 4, 4), t2("y", sh2[1], 2, 2)};
    wc_pack_tensor rev[3] = {in[2], in[0], in[1]};
    wc_pack_result r1, r2;
    char err[256];
    assert_int_equal(wc_pack(&ident, in, 3, 4096, &r1, err, sizeof err), SMP_OK);
    assert_int_equal(wc_pack(&ident, rev, 3, 4096, &r2, err, sizeof err), SMP_OK);
    const wc_manifest *m = &r1.manifest;
    const wc_tensor *w = &m->tensors[wc_manifest_find_tensor(m, "w")];
    assert_int_equal(w->frag_count, 4);
    for (size_t k = 0; k < 4; k++) {
        const wc_fragment *f = &m->fragments[w->frag_first + k];
        assert_int_equal(f->offset[1], k * 4);
        assert_int_equal(f->object_offset, k * 64);   /* placed in offset order */
    }
    /* puts name the caller's fragment index */
    assert_int_equal(r1.puts[0].tensor, 0);
    assert_int_equal(r1.puts[0].source, 3);
    uint8_t *b1, *b2;
    size_t l1, l2;
    assert_int_equal(wc_manifest_encode(&r1.manifest, &b1, &l1), SMP_OK);
    assert_int_equal(wc_manifest_encode(&r2.manifest, &b2, &l2), SMP_OK);
    assert_int_equal(l1, l2);
    assert_memory_equal(b1, b2, l1);
    free(b1);
    free(b2);
    wc_pack_result_free(&r1);
    wc_pack_result_free(&r2);
}

/* Inputs that cannot make a valid manifest are refused with the name. */
static void test_bad_inputs_are_refused(void **state)
{
    (void)state;
    uint64_t sh[3][2];
    wc_pack_tensor in[3];
    wc_pack_result r;
    char err[256];

    in[0] = t2("dup", sh[0], 2, 2);
    in[1] = t2("dup", sh[1], 2, 2);
    assert_int_equal(wc_pack(&ident, in, 2, 100, &r, err, sizeof err), SMP_EINVAL);
    assert_non_null(strstr(err, "dup"));

    in[0] = t2("a", sh[0], 2, 2);
    in[1] = t2("b", sh[1], 2, 2);
    in[1].tied_to = "missing";
    assert_int_equal(wc_pack(&ident, in, 2, 100, &r, err, sizeof err), SMP_EINVAL);
    assert_non_null(strstr(err, "'b'"));

    in[1].tied_to = "a";
    in[2] = t2("c", sh[2], 2, 2);
    in[2].tied_to = "b";                                  /* tie to a tie */
    assert_int_equal(wc_pack(&ident, in, 3, 100, &r, err, sizeof err), SMP_EINVAL);
    assert_non_null(strstr(err, "'c'"));

    in[1] = t2("b", sh[1], 2, 3);                         /* tied, other shape */
    in[1].tied_to = "a";
    assert_int_equal(wc_pack(&ident, in, 2, 100, &r, err, sizeof err), SMP_EINVAL);
    assert_non_null(strstr(err, "'b'"));

    /* shards that leave a hole, that overlap, that leave the tensor */
    uint64_t shape[2] = {4, 4};
    uint64_t o0[2] = {0, 0}, s0[2] = {2, 4}, o1[2] = {3, 0}, s1[2] = {1, 4};
    uint64_t o2[2] = {1, 0}, s2[2] = {3, 4}, o3[2] = {2, 0}, s3[2] = {3, 4};
    wc_pack_fragment hole[2] = {{o0, s0}, {o1, s1}}, lap[2] = {{o0, s0}, {o2, s2}},
                     out[2] = {{o0, s0}, {o3, s3}};
    wc_pack_tensor w = {"sharded", WC_DTYPE_F32, 2, shape, hole, 2, NULL, 0};
    assert_int_equal(wc_pack(&ident, &w, 1, 1000, &r, err, sizeof err), SMP_EINVAL);
    assert_non_null(strstr(err, "sharded"));
    w.fragments = lap;
    assert_int_equal(wc_pack(&ident, &w, 1, 1000, &r, err, sizeof err), SMP_EINVAL);
    assert_non_null(strstr(err, "sharded"));
    w.fragments = out;
    assert_int_equal(wc_pack(&ident, &w, 1, 1000, &r, err, sizeof err), SMP_EINVAL);
    assert_non_null(strstr(err, "sharded"));

    w.fragments = NULL;
    w.n_fragments = 0;
    assert_int_equal(wc_pack(&ident, &w, 1, 0, &r, err, sizeof err), SMP_EINVAL);
    w.dtype = WC_DTYPE_INVALID;
    assert_int_equal(wc_pack(&ident, &w, 1, 10, &r, err, sizeof err), SMP_EINVAL);
    wc_identity bad = {"", "llm", "x", "y", 1};
    w.dtype = WC_DTYPE_F32;
    assert_int_equal(wc_pack(&bad, &w, 1, 10, &r, err, sizeof err), SMP_EINVAL);
}

/* Zero-size tensors and an empty revision pack to valid manifests. */
static void test_empty_tensors_and_revision(void **state)
{
    (void)state;
    uint64_t sh[2][2];
    wc_pack_tensor in[2] = {t2("empty", sh[0], 0, 8), t2("scalar", sh[1], 1, 1)};
    in[1].ndim = 0;
    wc_pack_result r;
    char err[256];
    assert_int_equal(wc_pack(&ident, in, 2, 100, &r, err, sizeof err), SMP_OK);
    assert_int_equal(r.manifest.n_fragments, 1);
    assert_int_equal(r.manifest.n_objects, 1);
    assert_int_equal(r.manifest.objects[0].bytes, 4);
    wc_pack_result_free(&r);
    assert_int_equal(wc_pack(&ident, NULL, 0, 100, &r, err, sizeof err), SMP_OK);
    assert_int_equal(r.manifest.n_objects, 0);
    wc_pack_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bound_is_respected_and_small_tensors_stay_whole),
        cmocka_unit_test(test_big_tensor_is_cut_into_row_chunks),
        cmocka_unit_test(test_tied_weights_are_stored_once),
        cmocka_unit_test(test_attachments_come_after_the_tensors),
        cmocka_unit_test(test_affinity_units_are_connected_objects),
        cmocka_unit_test(test_sharded_input_and_determinism),
        cmocka_unit_test(test_bad_inputs_are_refused),
        cmocka_unit_test(test_empty_tensors_and_revision),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
