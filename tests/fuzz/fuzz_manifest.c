/* fuzz_manifest.c -- fuzz target: the client's manifest decoder
 * (client/wc_manifest.h). weight_get reads the manifest back from the store,
 * so a corrupted stored manifest must be refused, never crash the client or
 * let through something the planner cannot read.
 *
 * The input is the stored manifest bytes. What decodes must keep the
 * decoder's promises: the model is finalized (it encodes), every tensor is
 * found by its name, its encoding decodes again and encodes to the same
 * bytes (the encoding of a model is deterministic). Then the reader's next
 * step, the reshard planner (client/wc_plan.h, "a manifest that passes can
 * be planned without further bounds checks"): for a replicated and a split
 * placement derived from the input, the plan must build, copy exactly the
 * bytes of each target box, stay inside objects and bindings
 * (wc_plan_apply), and put into every element of every box the bytes the
 * fragment holding that element stores. A broken promise is a bug: the
 * target says which and aborts so the fuzzer keeps the input. Refusals are
 * the expected outcome. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "wc_manifest.h"
#include "wc_plan.h"

/* Plans are made and executed only for manifests this small (bytes of all
 * tensors, and of all objects), so every run stays fast. */
#define PLAN_TENSOR_BYTES_MAX (256u << 10)
#define PLAN_OBJECT_BYTES_MAX (4u << 20)

/* A promise was broken: say which and abort so the input is kept. */
static void broken(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_manifest: %s%s%s\n", what, detail && *detail ? ": " : "",
            detail ? detail : "");
    abort();
}

/* ------------------------------------------------------------------------ */
/* Planning what was decoded                                                 */
/* ------------------------------------------------------------------------ */

/* The byte stored at offset `at` of object `o` (a pattern that tells
 * objects and offsets apart). */
static uint8_t object_byte(uint32_t o, uint64_t at)
{
    uint64_t x = (at + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)o + 1) * 0xC2B2AE3D27D4EB4Full;
    return (uint8_t)(x >> 56);
}

/* Every element of tensor ti's target box (to, ts) in binding holds what the
 * fragment of its storage tensor that covers it stores in its object. The
 * reference walks each fragment element by element, independently of the
 * planner's coalescing. */
static void check_binding(const wc_manifest *m, size_t ti, const uint64_t *to,
                          const uint64_t *ts, const uint8_t *binding,
                          uint8_t *const *objects)
{
    const wc_tensor *t = &m->tensors[ti];
    const wc_tensor *s = &m->tensors[t->storage];
    uint32_t nd = t->ndim;
    for (size_t k = 0; k < s->frag_count; k++) {
        const wc_fragment *f = &m->fragments[s->frag_first + k];
        uint64_t idx[WC_MAX_NDIM] = {0};
        for (;;) {
            uint64_t local = 0, dst = 0;
            int inside = 1;
            for (uint32_t d = 0; d < nd; d++) {
                uint64_t g = f->offset[d] + idx[d];
                if (g < to[d] || g >= to[d] + ts[d]) inside = 0;
                local = local * f->shape[d] + idx[d];
                dst = dst * ts[d] + (g - to[d]);
            }
            if (inside &&
                memcmp(binding + dst * t->item_size,
                       objects[f->object] + f->object_offset + local * t->item_size,
                       t->item_size) != 0)
                broken("a planned copy put other bytes into an element", t->name);
            /* Next element of the fragment (row-major odometer). */
            uint32_t d = nd;
            while (d > 0 && ++idx[d - 1] == f->shape[d - 1]) idx[--d] = 0;
            if (d == 0) break;
        }
    }
}

/* Plan placements pl over m, execute the plan on patterned objects, and
 * check every byte of every binding. */
static void plan_and_check(const wc_manifest *m, const wc_placement *pl, const char *which)
{
    char err[256] = "";
    wc_plan plan;
    uint8_t **objects = calloc(m->n_objects + 1, sizeof(*objects));
    uint64_t *object_bytes = calloc(m->n_objects + 1, sizeof(*object_bytes));
    uint8_t **bindings = calloc(m->n_tensors + 1, sizeof(*bindings));
    if (objects == NULL || object_bytes == NULL || bindings == NULL) abort();

    memset(&plan, 0, sizeof(plan));
    if (wc_plan_build(m, pl, &plan, err, sizeof(err)) != SMP_OK)
        broken(which, err);
    if (plan.n_dst != m->n_tensors) broken("the plan has a binding per tensor", which);
    uint64_t want = 0, copied = 0;
    for (size_t i = 0; i < m->n_tensors; i++) want += plan.dst_bytes[i];
    if (want != plan.total_bytes) broken("total_bytes is not the sum of the bindings", which);
    for (size_t i = 0; i < plan.n_ops; i++) copied += plan.ops[i].count * plan.ops[i].bytes;
    if (copied != plan.total_bytes)
        broken("the plan does not copy each byte of the boxes exactly once", which);

    for (size_t o = 0; o < m->n_objects; o++) {
        object_bytes[o] = m->objects[o].bytes;
        objects[o] = malloc(object_bytes[o] ? object_bytes[o] : 1);
        if (objects[o] == NULL) abort();
        for (uint64_t b = 0; b < object_bytes[o]; b++) objects[o][b] = object_byte((uint32_t)o, b);
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        if (pl[i].kind == WC_PLACE_SKIP) continue;
        bindings[i] = calloc(1, plan.dst_bytes[i] ? plan.dst_bytes[i] : 1);
        if (bindings[i] == NULL) abort();
    }
    if (wc_plan_apply(&plan, (const uint8_t *const *)objects, object_bytes, m->n_objects,
                      bindings) != SMP_OK)
        broken("the plan leaves an object or a binding", which);
    for (size_t i = 0; i < m->n_tensors; i++) {
        uint64_t to[WC_MAX_NDIM], ts[WC_MAX_NDIM];
        if (pl[i].kind == WC_PLACE_SKIP) continue;
        if (wc_plan_box(&m->tensors[i], &pl[i], to, ts) != SMP_OK)
            broken("wc_plan_box refuses a placement the plan took", which);
        check_binding(m, i, to, ts, bindings[i], objects);
    }

    for (size_t i = 0; i < m->n_tensors; i++) free(bindings[i]);
    for (size_t o = 0; o < m->n_objects; o++) free(objects[o]);
    free(bindings);
    free(object_bytes);
    free(objects);
    wc_plan_free(&plan);
}

/* A replicated read of everything, then a split read chosen by h: each
 * tensor skipped, replicated, or split along one dimension into 2..4 parts,
 * this rank holding one of them. */
static void plan_decoded(const wc_manifest *m, uint64_t h)
{
    uint64_t tensor_bytes = 0, object_bytes = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        if (m->tensors[i].bytes > PLAN_TENSOR_BYTES_MAX - tensor_bytes) return;
        tensor_bytes += m->tensors[i].bytes;
    }
    for (size_t o = 0; o < m->n_objects; o++) {
        if (m->objects[o].bytes > PLAN_OBJECT_BYTES_MAX - object_bytes) return;
        object_bytes += m->objects[o].bytes;
    }
    wc_placement *pl = calloc(m->n_tensors + 1, sizeof(*pl));
    if (pl == NULL) abort();
    for (size_t i = 0; i < m->n_tensors; i++) pl[i].kind = WC_PLACE_REPLICATED;
    plan_and_check(m, pl, "a replicated read does not plan");
    for (size_t i = 0; i < m->n_tensors; i++) {
        const wc_tensor *t = &m->tensors[i];
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(h >> 33);
        if (r % 5 == 0) {
            pl[i].kind = WC_PLACE_SKIP;
        } else if (t->ndim == 0 || r % 5 == 1) {
            pl[i].kind = WC_PLACE_REPLICATED;
        } else {
            pl[i].kind = WC_PLACE_SPLIT;
            pl[i].dim = (r >> 3) % t->ndim;
            pl[i].parts = 2 + (r >> 8) % 3;
            pl[i].rank = (r >> 12) % pl[i].parts;
        }
    }
    plan_and_check(m, pl, "a split read does not plan");
    free(pl);
}

/* ------------------------------------------------------------------------ */
/* The target                                                                */
/* ------------------------------------------------------------------------ */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256] = "";
    wc_manifest m, m2;
    uint8_t *enc = NULL, *enc2 = NULL;
    size_t enc_len = 0, enc2_len = 0;

    if (wc_manifest_decode(data, size, &m, err, sizeof(err)) != SMP_OK) return 0;

    for (size_t i = 0; i < m.n_tensors; i++)
        if (wc_manifest_find_tensor(&m, m.tensors[i].name) != i)
            broken("a decoded tensor is not found by its name", m.tensors[i].name);

    if (wc_manifest_encode(&m, &enc, &enc_len) != SMP_OK)
        broken("a decoded manifest does not encode", NULL);
    if (wc_manifest_decode(enc, enc_len, &m2, err, sizeof(err)) != SMP_OK)
        broken("a re-encoded manifest does not decode", err);
    if (wc_manifest_encode(&m2, &enc2, &enc2_len) != SMP_OK)
        broken("a manifest decoded twice does not encode", NULL);
    if (enc2_len != enc_len || memcmp(enc, enc2, enc_len) != 0)
        broken("decode -> encode is not stable", NULL);
    free(enc2);
    wc_manifest_free(&m2);
    free(enc);

    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 1099511628211ull;
    plan_decoded(&m, h);
    wc_manifest_free(&m);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Seeds                                                                     */
/* ------------------------------------------------------------------------ */

/* Adders must accept what the seeds build; a refusal is a bug of this file. */
static void must(int rc, const char *what)
{
    if (rc != SMP_OK) {
        fprintf(stderr, "fuzz_manifest: seed step %s failed (%d)\n", what, rc);
        abort();
    }
}

/* The key of payload object n of m's group (static buffer). */
static const char *payload_key(const wc_manifest *m, int n)
{
    static char key[512];
    snprintf(key, sizeof(key), "%s/payload/%d", m->group, n);
    return key;
}

/* Finalize, encode and write m as seed `name`, then free it. */
static int seed_manifest(const char *dir, const char *name, wc_manifest *m)
{
    char err[256] = "";
    uint8_t *buf = NULL;
    size_t len = 0;
    if (wc_manifest_finalize(m, err, sizeof(err)) != SMP_OK) {
        fprintf(stderr, "fuzz_manifest: seed %s does not finalize: %s\n", name, err);
        abort();
    }
    must(wc_manifest_encode(m, &buf, &len), "encode");
    int rc = fuzz_seed(dir, name, buf, len);
    free(buf);
    wc_manifest_free(m);
    return rc < 0 ? 0 : rc;
}

static const wc_identity seed_id = {"acme", "llm", "llama-7b", "main", 3};
static const uint64_t emb_shape[2] = {16, 8};  /* BF16, 256 bytes */
static const uint64_t up_shape[2] = {8, 4};    /* F32, 128 bytes */
static const uint64_t norm_shape[1] = {8};     /* F32, 32 bytes */
static const uint64_t empty_shape[2] = {0, 4}; /* F16, no element */

/* The tensors both layouts share; lm_head is tied to the embedding. */
static void seed_tensors(wc_manifest *m, uint32_t t[6])
{
    must(wc_manifest_add_tensor(m, "model.embed_tokens.weight", WC_DTYPE_BF16, 2, emb_shape,
                                &t[0]), "tensor");
    must(wc_manifest_add_tensor(m, "lm_head.weight", WC_DTYPE_BF16, 2, emb_shape, &t[1]),
         "tensor");
    must(wc_manifest_add_tensor(m, "model.layers.0.mlp.up_proj.weight", WC_DTYPE_F32, 2,
                                up_shape, &t[2]), "tensor");
    must(wc_manifest_add_tensor(m, "model.norm.weight", WC_DTYPE_F32, 1, norm_shape, &t[3]),
         "tensor");
    must(wc_manifest_add_tensor(m, "scale", WC_DTYPE_F64, 0, NULL, &t[4]), "tensor");
    must(wc_manifest_add_tensor(m, "empty", WC_DTYPE_F16, 2, empty_shape, &t[5]), "tensor");
    const uint32_t tied[2] = {t[0], t[1]};
    must(wc_manifest_add_alias_group(m, tied, 2), "alias group");
}

int fuzz_seeds(const char *dir)
{
    int n = 0;
    char err[256] = "";
    wc_manifest m;
    uint32_t t[6], o0, o1;
    static const uint64_t zero[2] = {0, 0};

    /* TP1: whole tensors in two objects, two units, integrity data on one. */
    if (wc_manifest_init(&m, &seed_id, err, sizeof(err)) != SMP_OK) abort();
    seed_tensors(&m, t);
    must(wc_manifest_add_object(&m, payload_key(&m, 0), 384, &o0), "object");
    must(wc_manifest_add_object(&m, payload_key(&m, 1), 40, &o1), "object");
    must(wc_manifest_add_fragment(&m, t[0], zero, emb_shape, o0, 0, 256), "fragment");
    must(wc_manifest_add_fragment(&m, t[2], zero, up_shape, o0, 256, 128), "fragment");
    must(wc_manifest_add_fragment(&m, t[3], zero, norm_shape, o1, 0, 32), "fragment");
    must(wc_manifest_add_fragment(&m, t[4], NULL, NULL, o1, 32, 8), "fragment");
    {
        uint8_t sha[32];
        const uint64_t sums[3] = {0x1111, 0x2222, 0x3333};
        for (int i = 0; i < 32; i++) sha[i] = (uint8_t)(i * 7 + 1);
        must(wc_manifest_set_object_check(&m, o0, sha, 128, sums, 3), "object check");
        must(wc_manifest_set_object_check(&m, o1, sha, 0, NULL, 0), "object check");
    }
    const uint32_t u0[1] = {0}, u1[1] = {1}, both[2] = {0, 1};
    must(wc_manifest_add_unit(&m, u0, 1, 384), "unit");
    must(wc_manifest_add_unit(&m, u1, 1, 40), "unit");
    n += seed_manifest(dir, "tp1", &m);

    /* TP2: the writer's two ranks, one object each; the embedding split by
     * rows, up_proj by columns, norm and scale stored once by rank 0. All
     * fragments of a tensor share a unit, so both objects form one. */
    if (wc_manifest_init(&m, &seed_id, err, sizeof(err)) != SMP_OK) abort();
    seed_tensors(&m, t);
    must(wc_manifest_add_object(&m, payload_key(&m, 0), 232, &o0), "object");
    must(wc_manifest_add_object(&m, payload_key(&m, 1), 192, &o1), "object");
    {
        const uint64_t rows[2] = {8, 8}, second[2] = {8, 0};
        const uint64_t cols[2] = {8, 2}, right[2] = {0, 2};
        must(wc_manifest_add_fragment(&m, t[0], zero, rows, o0, 0, 128), "fragment");
        must(wc_manifest_add_fragment(&m, t[0], second, rows, o1, 0, 128), "fragment");
        must(wc_manifest_add_fragment(&m, t[2], right, cols, o1, 128, 64), "fragment");
        must(wc_manifest_add_fragment(&m, t[2], zero, cols, o0, 128, 64), "fragment");
        must(wc_manifest_add_fragment(&m, t[3], zero, norm_shape, o0, 192, 32), "fragment");
        must(wc_manifest_add_fragment(&m, t[4], NULL, NULL, o0, 224, 8), "fragment");
    }
    must(wc_manifest_add_unit(&m, both, 2, 424), "unit");
    n += seed_manifest(dir, "tp2", &m);

    /* A revision that holds nothing at all. */
    if (wc_manifest_init(&m, &seed_id, err, sizeof(err)) != SMP_OK) abort();
    n += seed_manifest(dir, "empty", &m);
    return n;
}
