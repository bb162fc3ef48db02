/* test_weight_e2e.c -- libweightclient and weightctl end to end on a real
 * master with the real weight_mgmt.so.
 *
 * Revisions are published through the C API (whole tensors at TP 1, or the
 * fragments a TP 4 writer holds) and through `weightctl put` from generated
 * safetensors files (BF16, F16, I8, F8_E4M3, F32; a tied embedding stored
 * once as an alias group; a tensor bigger than the payload bound, which is
 * set small). They are read back at TP 1, 2 and 4, split along dimension 0
 * and along dimension 1, and every shard is compared byte for byte with a
 * slice computed here element by element (independently of the planner).
 * The master is restarted between steps. Removal leaves a DELETED tombstone;
 * a manifest or payload altered in the store makes weight_get fail with
 * DIGEST_MISMATCH. The migration round trip (COLD / MIXED and back) waits
 * for the lifecycle: it runs when WM_E2E_MIGRATION=1 and is skipped
 * otherwise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "seg_map.h"
#include "wc_safetensors.h"
#include "weightclient.h"

#define BOUND (64u << 10) /* payload objects of 64 KiB: the big tensor spans several */

/* -- the test model ---------------------------------------------------------- */

typedef struct tmodel_tensor {
    const char *name;
    const char *dtype;
    uint32_t item;
    uint32_t ndim;
    uint64_t shape[4];
    const char *alias_of;
    uint8_t *data;      /* global bytes */
    uint64_t bytes;
} tmodel_tensor;

static tmodel_tensor model[] = {
    {"embed.weight", "BF16", 2, 2, {96, 40}, NULL, NULL, 0},
    {"lm_head.weight", "BF16", 2, 2, {96, 40}, "embed.weight", NULL, 0},
    {"layers.0.attn.q.weight", "F16", 2, 2, {64, 48}, NULL, NULL, 0},
    {"layers.0.mlp.up.weight", "F32", 4, 2, {160, 120}, NULL, NULL, 0}, /* 76800 B > BOUND */
    {"layers.0.mlp.scale", "I8", 1, 2, {30, 17}, NULL, NULL, 0},
    {"layers.0.fp8.weight", "F8_E4M3", 1, 3, {8, 12, 10}, NULL, NULL, 0},
    {"layers.0.norm.weight", "F32", 4, 1, {40}, NULL, NULL, 0},
    {"step", "I8", 1, 0, {0}, NULL, NULL, 0},
};
#define N_MODEL (sizeof(model) / sizeof(model[0]))

static void model_init(void)
{
    for (size_t i = 0; i < N_MODEL; i++) {
        tmodel_tensor *t = &model[i];
        uint64_t n = t->item;
        for (uint32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
        t->bytes = n;
        if (t->data) continue;
        if (t->alias_of) {
            for (size_t k = 0; k < N_MODEL; k++)
                if (strcmp(model[k].name, t->alias_of) == 0) t->data = model[k].data;
            continue;
        }
        t->data = malloc(n);
        uint32_t x = 2166136261u ^ (uint32_t)i;
        for (uint64_t b = 0; b < n; b++) {
            x ^= (uint32_t)b;
            x *= 16777619u;
            t->data[b] = (uint8_t)(x >> 13);
        }
    }
}

static tmodel_tensor *model_find(const char *name)
{
    for (size_t i = 0; i < N_MODEL; i++)
        if (strcmp(model[i].name, name) == 0) return &model[i];
    return NULL;
}

/* The box of part r of p along dim: S / p each, one more for the first S % p. */
static void box_of(const tmodel_tensor *t, int split, uint32_t dim, uint32_t parts, uint32_t r,
                   uint64_t off[4], uint64_t shp[4])
{
    for (uint32_t d = 0; d < t->ndim; d++) {
        off[d] = 0;
        shp[d] = t->shape[d];
    }
    if (!split) return;
    uint64_t S = t->shape[dim], q = S / parts, rem = S % parts;
    shp[dim] = q + (r < rem ? 1 : 0);
    off[dim] = r * q + (r < rem ? r : rem);
}

/* Slice the global bytes of t to a box, element by element. */
static uint8_t *slice(const tmodel_tensor *t, const uint64_t off[4], const uint64_t shp[4],
                      uint64_t *out_bytes)
{
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->ndim; d++) n *= shp[d];
    uint8_t *out = malloc(n * t->item + 1);
    uint64_t idx[4] = {0, 0, 0, 0};
    for (uint64_t e = 0; e < n; e++) {
        uint64_t g = 0;
        for (uint32_t d = 0; d < t->ndim; d++) g = g * t->shape[d] + off[d] + idx[d];
        memcpy(out + e * t->item, t->data + g * t->item, t->item);
        for (int d = (int)t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < shp[d]) break;
            idx[d] = 0;
        }
    }
    *out_bytes = n * t->item;
    return out;
}

/* -- the master ---------------------------------------------------------------- */

typedef struct fixture {
    hx_master m;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    model_init();
    if (hx_init(&f->m, "weight-e2e",
                "cluster:\n  default_weight_preferred_residency: hot\n") < 0 ||
        hx_start(&f->m, 20000) < 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

static void restart(fixture *f)
{
    assert_int_equal(hx_stop(&f->m), 0);
    assert_int_equal(hx_start(&f->m, 20000), 0);
}

static weight_store *open_store(fixture *f)
{
    weight_store *s = NULL;
    char err[256];
    int rc = weight_store_open(f->m.socket, "acme", NULL, &s, err, sizeof err);
    if (rc != 0) fprintf(stderr, "weight_store_open: %s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_PAYLOAD_BYTES, BOUND), 0);
    return s;
}

#define CHECK(s, call)                                                                  \
    do {                                                                                \
        int rc_ = (call);                                                               \
        if (rc_ != 0)                                                                   \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,        \
                    weight_error_name(rc_), weight_store_last_error(s));                \
        assert_int_equal(rc_, 0);                                                       \
    } while (0)

/* -- publishing ------------------------------------------------------------------ */

/* The whole model through the C API: whole tensors, or (tp > 1) the
 * fragments of a tp-way writer split along dim 0 (1-dim and scalars whole). */
static void put_model(weight_store *s, const weight_identity *id, uint32_t tp)
{
    weight_writer *w = NULL;
    uint8_t *parts[64]; /* the fragments stay the caller's until commit */
    size_t n_parts = 0;
    CHECK(s, weight_put_begin(s, id, NULL, &w));
    for (size_t i = 0; i < N_MODEL; i++) {
        tmodel_tensor *t = &model[i];
        if (t->alias_of) {
            CHECK(s, weight_writer_alias(w, t->name, t->alias_of));
        } else if (tp == 1 || t->ndim < 2) {
            CHECK(s, weight_writer_add_tensor(w, t->name, t->dtype, t->ndim, t->shape, t->data));
        } else {
            for (uint32_t r = 0; r < tp; r++) {
                uint64_t off[4], shp[4], n;
                box_of(t, 1, 0, tp, r, off, shp);
                uint8_t *part = slice(t, off, shp, &n);
                assert_true(n_parts < 64);
                parts[n_parts++] = part;
                CHECK(s, weight_writer_add_fragment(w, t->name, t->dtype, t->ndim, t->shape, off,
                                                    shp, part));
            }
        }
    }
    weight_metadata md;
    CHECK(s, weight_writer_commit(w, &md));
    for (size_t i = 0; i < n_parts; i++) free(parts[i]);
    assert_int_equal(md.availability, WEIGHT_READY);
    assert_int_equal(md.residency, WEIGHT_RES_HOT);
    assert_true(md.payload_count >= 3);
}

/* -- reading --------------------------------------------------------------------- */

typedef struct getctx {
    uint32_t tp, rank, dim;
    uint8_t *bufs[N_MODEL];
    uint64_t sizes[N_MODEL];
} getctx;

static int place_cb(void *ctx, const weight_tensor_info *t, weight_tensor_place *out)
{
    getctx *g = ctx;
    if (t->ndim >= 2 && g->tp > 1) {
        out->kind = WEIGHT_PLACE_SPLIT;
        out->dim = g->dim;
        out->parts = g->tp;
        out->rank = g->rank;
    } else {
        out->kind = WEIGHT_PLACE_REPLICATED;
    }
    return 0;
}

static int provide_cb(void *ctx, const weight_tensor_info *t, const weight_tensor_place *p,
                      const uint64_t *shape, uint64_t bytes, void **out)
{
    getctx *g = ctx;
    (void)p;
    (void)shape;
    tmodel_tensor *mt = model_find(t->name);
    if (mt == NULL) return WEIGHT_EINVALID_ARGUMENT;
    size_t i = (size_t)(mt - model);
    g->bufs[i] = malloc(bytes + 1);
    memset(g->bufs[i], 0xEE, bytes + 1);
    g->sizes[i] = bytes;
    *out = g->bufs[i];
    return 0;
}

/* Read every rank of a tp-way split along dim and compare each shard. */
static void get_and_compare(weight_store *s, const weight_identity *id, uint32_t tp, uint32_t dim)
{
    for (uint32_t r = 0; r < tp; r++) {
        getctx g;
        memset(&g, 0, sizeof g);
        g.tp = tp;
        g.rank = r;
        g.dim = dim;
        weight_placement pl = {place_cb, &g};
        weight_bindings bd = {NULL, 0, provide_cb, &g};
        weight_get_stats st;
        CHECK(s, weight_get(s, id, &pl, &bd, &st));
        for (size_t i = 0; i < N_MODEL; i++) {
            tmodel_tensor *t = &model[i];
            uint64_t off[4], shp[4], n;
            int split = t->ndim >= 2 && tp > 1;
            box_of(t, split, dim, tp, r, off, shp);
            uint8_t *want = slice(t, off, shp, &n);
            assert_non_null(g.bufs[i]);
            assert_int_equal(g.sizes[i], n);
            if (memcmp(g.bufs[i], want, n) != 0)
                fail_msg("tensor %s tp %u rank %u dim %u differs", t->name, tp, r, dim);
            assert_int_equal(g.bufs[i][n], 0xEE); /* nothing past the box */
            free(want);
            free(g.bufs[i]);
        }
        assert_int_equal(st.tensors, N_MODEL);
    }
}

/* -- tests ----------------------------------------------------------------------- */

/* A TP 1 revision published through the C API reads back at TP 1, 2 and 4
 * along dim 0 and dim 1, before and after a restart; metadata, size and
 * existence say what was committed. */
static void test_put_tp1_get_resharded_across_restart(void **state)
{
    fixture *f = *state;
    weight_store *s = open_store(f);
    weight_identity id;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "tiny", "v1", 1), 0);
    put_model(s, &id, 1);
    get_and_compare(s, &id, 1, 0);
    weight_store_close(s);
    restart(f);
    s = open_store(f);
    weight_metadata md;
    weight_operation op;
    CHECK(s, weight_get_metadata(s, &id, &md, &op));
    assert_int_equal(md.availability, WEIGHT_READY);
    assert_string_equal(md.identity.tenant_id, "acme");
    uint64_t total = 0, size = 0;
    for (size_t i = 0; i < N_MODEL; i++)
        if (!model[i].alias_of) total += model[i].bytes;
    CHECK(s, weight_get_size(s, &id, &size));
    assert_int_equal(size, total);
    int exists = 0;
    CHECK(s, weight_is_exist(s, &id, &exists));
    assert_int_equal(exists, 1);
    for (uint32_t tp = 1; tp <= 4; tp *= 2) {
        get_and_compare(s, &id, tp, 0);
        get_and_compare(s, &id, tp, 1);
    }
    weight_store_close(s);
}

/* A revision written as TP 4 fragments reads back whole and at TP 2 and 4. */
static void test_put_tp4_fragments_get_any_tp(void **state)
{
    fixture *f = *state;
    weight_store *s = open_store(f);
    weight_identity id;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "tiny", "v1-tp4", 1), 0);
    put_model(s, &id, 4);
    weight_store_close(s);
    restart(f);
    s = open_store(f);
    for (uint32_t tp = 1; tp <= 4; tp *= 2) {
        get_and_compare(s, &id, tp, 0);
        get_and_compare(s, &id, tp, 1);
    }
    weight_store_close(s);
}

/* Flip one byte of key's memory replica through the node's segment file. */
static void corrupt_object(fixture *f, const char *key, uint64_t at)
{
    kvc *c = hx_client(&f->m);
    kvc_object obj;
    assert_int_equal(kvc_get(c, key, &obj), 0);
    assert_true(obj.n_replicas >= 1);
    seg_map map;
    char err[256];
    assert_int_equal(seg_map_writable(obj.replicas[0].segment_path, 0, &map, err, sizeof err), 0);
    map.base[obj.replicas[0].offset + at] ^= 0x5A;
    seg_map_close(&map);
    kvc_close(c);
}

/* A payload or a manifest altered in the store: weight_get fails with
 * DIGEST_MISMATCH (for the manifest: before writing anything). */
static void test_altered_bytes_fail_with_digest_mismatch(void **state)
{
    fixture *f = *state;
    weight_store *s = open_store(f);
    weight_identity a, b;
    assert_int_equal(weight_identity_set(&a, NULL, "llm", "tamper", "payload", 1), 0);
    assert_int_equal(weight_identity_set(&b, NULL, "llm", "tamper", "manifest", 1), 0);
    put_model(s, &a, 1);
    put_model(s, &b, 1);
    weight_metadata md;
    CHECK(s, weight_get_metadata(s, &a, &md, NULL));
    char key[1100];
    snprintf(key, sizeof key, "%.*s/payload/1", (int)(strlen(md.manifest_key) - strlen("/manifest")),
             md.manifest_key);
    corrupt_object(f, key, 100);
    getctx g;
    memset(&g, 0, sizeof g);
    g.tp = 1;
    weight_placement pl = {place_cb, &g};
    weight_bindings bd = {NULL, 0, provide_cb, &g};
    int rc = weight_get(s, &a, &pl, &bd, NULL);
    assert_int_equal(rc, WEIGHT_EDIGEST_MISMATCH);
    assert_non_null(strstr(weight_store_last_error(s), "payload/1"));
    for (size_t i = 0; i < N_MODEL; i++) free(g.bufs[i]);

    CHECK(s, weight_get_metadata(s, &b, &md, NULL));
    corrupt_object(f, md.manifest_key, 10);
    memset(&g, 0, sizeof g);
    g.tp = 1;
    rc = weight_get(s, &b, &pl, &bd, NULL);
    assert_int_equal(rc, WEIGHT_EDIGEST_MISMATCH);
    for (size_t i = 0; i < N_MODEL; i++) assert_null(g.bufs[i]); /* nothing was asked for */
    /* The lease was released on the failing paths: the revision can go. */
    CHECK(s, weight_remove(s, &b, 0, NULL));
    weight_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_tp1_get_resharded_across_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_tp4_fragments_get_any_tp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_altered_bytes_fail_with_digest_mismatch, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
