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
 * DIGEST_MISMATCH. A migration round trip (COLD, MIXED, HOT) reads every
 * state back byte for byte, a COLD revision straight from its cold files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "seg_map.h"
#include "wc_safetensors.h"
#include "weight_check.h"
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
    /* weight_metadata_more: a READY revision goes back nowhere; a caller
     * built with a larger struct gets the fields this library does not know
     * zeroed; one below the first version is refused, nothing written. */
    struct {
        weight_metadata_more more;
        uint64_t newer;
    } big;
    memset(&big, 0xa5, sizeof big);
    big.more.struct_size = sizeof big;
    weight_metadata md2;
    CHECK(s, weight_get_metadata_more(s, &id, &md2, NULL, &big.more));
    assert_int_equal(md2.metadata_generation, md.metadata_generation);
    assert_int_equal(big.more.degraded_from, WEIGHT_RES_UNKNOWN);
    assert_true(big.more.degraded_from_hot_ratio == 0.0);
    assert_int_equal(big.newer, 0);
    weight_metadata_more small;
    memset(&small, 0xa5, sizeof small);
    small.struct_size = 4;
    assert_int_equal(weight_get_metadata_more(s, &id, &md2, NULL, &small), WEIGHT_EINVALID_ARGUMENT);
    assert_non_null(strstr(weight_store_last_error(s), "weight_metadata_more: struct_size 4 is below "
                                                       "the first version's 16"));
    assert_int_equal(small.degraded_from, (weight_residency)0xa5a5a5a5);
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
/* Flip a byte of key's memory replica in its segment; returns how many
 * replicas the object has (memory and cold). */
static size_t corrupt_object(fixture *f, const char *key, uint64_t at)
{
    kvc *c = hx_client(&f->m);
    kvc_object obj;
    assert_int_equal(kvc_get(c, key, &obj), 0);
    const kvc_replica *mem = NULL;
    for (size_t r = 0; r < obj.n_replicas; r++)
        if (obj.replicas[r].kind == SMP_REPLICA_MEMORY) mem = &obj.replicas[r];
    assert_non_null(mem);
    seg_map map;
    char err[256];
    assert_int_equal(seg_map_writable(mem->segment_path, 0, &map, err, sizeof err), 0);
    map.base[mem->offset + at] ^= 0x5A;
    seg_map_close(&map);
    kvc_close(c);
    return obj.n_replicas;
}

/* Migrate id to target and wait until the operation succeeded. One
 * operation at a time: the initial convergence (or a previous migration's
 * tail) is let finish first. */
static void migrate_and_wait(weight_store *s, const weight_identity *id, weight_residency target)
{
    weight_operation op;
    weight_metadata cur;
    for (int i = 0; i < 600; i++) {
        CHECK(s, weight_get_metadata(s, id, &cur, NULL));
        if (cur.operation_id == 0) break;
        usleep(50000);
    }
    assert_int_equal(cur.operation_id, 0);
    CHECK(s, weight_migrate(s, id, target, 0, cur.metadata_generation, &op));
    for (int i = 0; i < 600 && op.state == 1; i++) {
        usleep(50000);
        CHECK(s, weight_get_operation(s, op.id, &op));
    }
    assert_int_equal(op.state, 2);
}

/* Wait until the master has confirmed `confirmed` reported replicas corrupt
 * (store_corrupt_reports_total) and, with repairs > 0, until that many
 * repairs succeeded; then until id is READY (repaired) or DEGRADED (nothing
 * to repair from) with no operation. */
static void wait_checked(fixture *f, weight_store *s, const weight_identity *id, double confirmed,
                         double repairs, weight_availability av)
{
    weight_metadata md;
    long long until = hx_now_ms() + 30000;
    while (hx_metric(&f->m, "store_corrupt_reports_total{result=\"confirmed\"}") < confirmed ||
           (repairs > 0 && hx_metric(&f->m, "weight_repairs_total{result=\"succeeded\"}") < repairs)) {
        if (hx_now_ms() > until) {
            hx_print_log(&f->m);
            fail_msg("the reported replica was not dropped (and repaired)");
        }
        usleep(20000);
    }
    for (;;) {
        CHECK(s, weight_get_metadata(s, id, &md, NULL));
        if (md.availability == av && md.operation_id == 0 &&
            (av != WEIGHT_READY || md.residency == WEIGHT_RES_HOT))
            return;
        if (hx_now_ms() > until) fail_msg("%s: %s", id->resource_id, weight_availability_name(md.availability));
        usleep(20000);
    }
}

/* A payload whose memory replica was altered in the store but that also
 * has a cold replica (it came back from COLD): weight_get reads the altered
 * part from the cold file instead, through the mapping and over TCP, and
 * every byte loaded is exact. */
static void test_altered_memory_replica_falls_back_to_cold(void **state)
{
    fixture *f = *state;
    weight_store *s = open_store(f);
    weight_identity id;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "tamper", "both", 1), 0);
    put_model(s, &id, 1);
    migrate_and_wait(s, &id, WEIGHT_RES_COLD);
    migrate_and_wait(s, &id, WEIGHT_RES_HOT);
    weight_metadata md;
    CHECK(s, weight_get_metadata(s, &id, &md, NULL));
    assert_int_equal(md.residency, WEIGHT_RES_HOT);
    char key[1100];
    snprintf(key, sizeof key, "%.*s/payload/1", (int)(strlen(md.manifest_key) - strlen("/manifest")),
             md.manifest_key);
    assert_int_equal(corrupt_object(f, key, 100), 2); /* memory and cold */
    get_and_compare(s, &id, 1, 0);
    get_and_compare(s, &id, 2, 1);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_TRANSPORT, 2), 0);
    get_and_compare(s, &id, 2, 0);
    weight_store_close(s);
}

/* A payload or a manifest altered in the store: weight_get fails with
 * DIGEST_MISMATCH (for the manifest: before writing anything), and reports
 * the replica; the master drops it once its node's hash agrees: the
 * revision whose payload has no cold copy turns DEGRADED, the other stays
 * READY (every manifest keeps a cold copy). */
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
    wait_checked(f, s, &a, 1, 0, WEIGHT_DEGRADED);

    CHECK(s, weight_get_metadata(s, &b, &md, NULL));
    corrupt_object(f, md.manifest_key, 10);
    memset(&g, 0, sizeof g);
    g.tp = 1;
    rc = weight_get(s, &b, &pl, &bd, NULL);
    assert_int_equal(rc, WEIGHT_EDIGEST_MISMATCH);
    for (size_t i = 0; i < N_MODEL; i++) assert_null(g.bufs[i]); /* nothing was asked for */
    assert_non_null(strstr(weight_store_last_error(s), "(reported to the master"));
    /* the manifest, which has a cold copy, stays readable: READY */
    wait_checked(f, s, &b, 2, 0, WEIGHT_READY);
    /* The lease was released on the failing paths: the revision can go
     * (once a change the repair's end made is durable: BUSY saying so, and
     * never naming a lease, until then). */
    weight_metadata bm;
    for (long long until = hx_now_ms() + 30000;;) {
        CHECK(s, weight_get_metadata(s, &b, &bm, NULL));
        int rc = weight_remove(s, &b, bm.metadata_generation, NULL);
        if (rc == 0) break;
        if (rc != WEIGHT_EBUSY || strstr(weight_store_last_error(s), "being made durable") == NULL ||
            hx_now_ms() > until)
            fail_msg("weight_remove: %d %s", rc, weight_store_last_error(s));
        usleep(20000);
    }
    weight_store_close(s);
}


/* Placement of the chunked-object test: TP tp along dim 1 (rank 0), or whole. */
static int place_dim1_cb(void *ctx, const weight_tensor_info *t, weight_tensor_place *out)
{
    const uint32_t *tp = ctx;
    (void)t;
    if (*tp > 1) *out = (weight_tensor_place){WEIGHT_PLACE_SPLIT, 1, *tp, 0};
    else *out = (weight_tensor_place){WEIGHT_PLACE_REPLICATED, 0, 1, 0};
    return 0;
}

/* weight_get of rank 0 of a TP tp split along dim 1 of the one tensor of id
 * into dst (want bytes); returns its code, stats in *st. */
static int get_chunked(weight_store *s, const weight_identity *id, uint32_t tp, uint8_t *dst,
                       uint64_t want, weight_get_stats *st)
{
    weight_placement pl = {place_dim1_cb, &tp};
    weight_binding b = {"big", dst, want};
    weight_bindings bd = {&b, 1, NULL, NULL};
    return weight_get(s, id, &pl, &bd, st);
}

/* Verification fused into the scatter (each block of a 1 MiB chunk copied,
 * then hashed): a byte altered anywhere in a chunk fails the get with
 * DIGEST_MISMATCH naming that chunk -- in a later block of a middle chunk,
 * in the short last chunk, and in bytes a TP 2 split along dim 1 does not
 * copy (the whole chunk is hashed, not only what is scattered). The gets
 * read through the mapping only (no cold fallback); each reports the
 * replica, which the master drops and the plugin repairs from the
 * revision's cold copy: then the same gets succeed and every byte is
 * exact. */
static void test_fused_verify_fails_on_any_altered_chunk_byte(void **state)
{
    fixture *f = *state;
    weight_store *s = open_store(f);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_PAYLOAD_BYTES, 8u << 20), 0);
    const uint64_t rows = 800, cols = 1024, bytes = rows * cols * 4; /* F32: 3.125 MiB, 4 chunks */
    uint64_t shape[2] = {rows, cols};
    uint8_t *data = malloc(bytes), *dst = malloc(bytes), *half = malloc(bytes / 2);
    assert_non_null(data);
    assert_non_null(dst);
    assert_non_null(half);
    for (uint64_t i = 0; i < bytes; i++) data[i] = (uint8_t)(i * 2654435761u >> 7);
    for (uint64_t r = 0; r < rows; r++) memcpy(half + r * cols * 2, data + r * cols * 4, cols * 2);
    weight_identity id;
    weight_writer *w = NULL;
    weight_metadata md;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "fused", "v1", 1), 0);
    CHECK(s, weight_put_begin(s, &id, NULL, &w));
    CHECK(s, weight_writer_add_tensor(w, "big", "F32", 2, shape, data));
    CHECK(s, weight_writer_commit(w, &md));
    migrate_and_wait(s, &id, WEIGHT_RES_COLD);
    migrate_and_wait(s, &id, WEIGHT_RES_HOT); /* its cold copy stays: what the repair reads */
    weight_store *local = open_store(f);
    assert_int_equal(weight_store_set_option(local, WEIGHT_OPT_TRANSPORT, 1), 0);
    char key[1100];
    snprintf(key, sizeof key, "%.*s/payload/0", (int)(strlen(md.manifest_key) - strlen("/manifest")),
             md.manifest_key);
    const struct {
        uint64_t at;
        uint32_t tp;
        const char *chunk;
    } cases[] = {
        {(2u << 20) - 7, 1, "(chunk 1)"},                  /* last block of a middle chunk */
        {bytes - 1, 1, "(chunk 3)"},                       /* the short last chunk */
        {(2u << 20) + 5 * cols * 4 + 3000, 2, "(chunk 2)"}, /* a byte rank 0 does not copy */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint64_t want = cases[c].tp == 1 ? bytes : bytes / 2;
        weight_get_stats st;
        assert_int_equal(corrupt_object(f, key, cases[c].at), 2); /* memory and cold */
        assert_int_equal(get_chunked(local, &id, cases[c].tp, dst, want, &st),
                         WEIGHT_EDIGEST_MISMATCH);
        const char *err = weight_store_last_error(local);
        if (strstr(err, "payload/0") == NULL || strstr(err, cases[c].chunk) == NULL)
            fail_msg("case %zu: %s", c, err);
        wait_checked(f, s, &id, (double)(c + 1), (double)(c + 1), WEIGHT_READY);
        memset(dst, 0xEE, bytes);
        CHECK(local, get_chunked(local, &id, cases[c].tp, dst, want, &st));
        assert_int_equal(st.verified_bytes, bytes); /* every chunk, copied from or not */
        assert_int_equal(st.bytes, want);
        assert_memory_equal(dst, cases[c].tp == 1 ? data : half, want);
    }
    CHECK(s, weight_get_metadata(s, &id, &md, NULL));
    assert_int_equal(md.availability, WEIGHT_READY);
    free(data);
    free(dst);
    free(half);
    weight_store_close(local);
    weight_store_close(s);
}

/* Over the node's TCP data server instead of the mapped segment (as a
 * client on another host): put and get at TP 1, 2 and 4 along dim 0 and 1,
 * and a payload altered in the store is still a DIGEST_MISMATCH. */
static void test_remote_transport_put_and_get(void **state)
{
    fixture *f = *state;
    weight_store *s = open_store(f);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_TRANSPORT, 2), 0);
    weight_identity id;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "tiny", "remote", 1), 0);
    put_model(s, &id, 1);
    for (uint32_t tp = 1; tp <= 4; tp *= 2) {
        get_and_compare(s, &id, tp, 0);
        get_and_compare(s, &id, tp, 1);
    }
    weight_get_stats st;
    getctx g;
    memset(&g, 0, sizeof g);
    g.tp = 1;
    weight_placement pl = {place_cb, &g};
    weight_bindings bd = {NULL, 0, provide_cb, &g};
    CHECK(s, weight_get(s, &id, &pl, &bd, &st));
    assert_int_equal(st.local_bytes, 0); /* nothing came through a mapping */
    assert_true(st.verified_bytes >= st.bytes - model_find("lm_head.weight")->bytes);
    for (size_t i = 0; i < N_MODEL; i++) free(g.bufs[i]);

    weight_identity w4;
    assert_int_equal(weight_identity_set(&w4, NULL, "llm", "tiny", "remote-tp4", 1), 0);
    put_model(s, &w4, 4);
    get_and_compare(s, &w4, 2, 1);

    weight_metadata md;
    CHECK(s, weight_get_metadata(s, &id, &md, NULL));
    char key[1100];
    snprintf(key, sizeof key, "%.*s/payload/0", (int)(strlen(md.manifest_key) - strlen("/manifest")),
             md.manifest_key);
    corrupt_object(f, key, 5);
    memset(&g, 0, sizeof g);
    g.tp = 1;
    assert_int_equal(weight_get(s, &id, &pl, &bd, NULL), WEIGHT_EDIGEST_MISMATCH);
    for (size_t i = 0; i < N_MODEL; i++) free(g.bufs[i]);
    weight_store_close(s);
}

/* The dead writer pid exited 0, leaving id IMPORTING; a new put of the
 * same identity publishes a revision that reads back exactly. */
static void assert_resumed(fixture *f, const weight_identity *id, pid_t pid)
{
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    weight_store *s = open_store(f);
    weight_metadata md;
    CHECK(s, weight_get_metadata(s, id, &md, NULL));
    assert_int_equal(md.availability, WEIGHT_IMPORTING);
    put_model(s, id, 1);
    get_and_compare(s, id, 2, 1);
    weight_store_close(s);
}

/* A writer that died after writing part of an import (no abort): a new
 * weight_put of the same identity resumes the open import, replaces what
 * was left, and publishes a revision that reads back exactly. */
static weight_writer *g_dead_writer; /* reachable: the dead writer's memory is not a leak */
static void test_put_resumes_an_import_left_by_a_dead_writer(void **state)
{
    fixture *f = *state;
    weight_identity id;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "tiny", "resumed", 1), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        weight_store *s = NULL;
        weight_writer *w = NULL;
        char err[256], junk[5000];
        if (weight_store_open(f->m.socket, "acme", NULL, &s, err, sizeof err) != 0 ||
            weight_put_begin(s, &id, NULL, &w) != 0)
            _exit(1);
        g_dead_writer = w;
        kvc *c = hx_client(&f->m);
        memset(junk, 0x77, sizeof junk);
        if (c == NULL || kvc_put_bytes(c, "weights/acme/llm/tiny/resumed/1/payload/0", junk,
                                       sizeof junk, SMP_DATA_WEIGHT,
                                       "weights/acme/llm/tiny/resumed/1", 0, NULL) != 0)
            _exit(2);
        kvc_close(c);
        _exit(0); /* dies: no abort, no commit */
    }
    assert_resumed(f, &id, pid);
}

/* A writer that died in the middle of a payload object (SIGKILL: its put
 * started, never ended nor revoked): a new weight_put of the same identity
 * revokes that put, puts the object again and publishes a revision that
 * reads back exactly -- at once, not after node.put_timeout_ms (before,
 * the put start was refused SMP_EBUSY, the retry aborted the import, and
 * every retry failed the same way until the master took the put back). */
static void test_put_resumes_an_import_whose_writer_died_mid_object(void **state)
{
    fixture *f = *state;
    weight_identity id;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "tiny", "midput", 1), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        weight_store *s = NULL;
        weight_writer *w = NULL;
        kvc_replica where;
        char err[256];
        if (weight_store_open(f->m.socket, "acme", NULL, &s, err, sizeof err) != 0 ||
            weight_put_begin(s, &id, NULL, &w) != 0)
            _exit(1);
        g_dead_writer = w;
        kvc *c = hx_client(&f->m);
        if (c == NULL || kvc_put_start(c, "weights/acme/llm/tiny/midput/1/payload/0", 5000,
                                       SMP_DATA_WEIGHT, "weights/acme/llm/tiny/midput/1", 1,
                                       &where) != 0)
            _exit(2);
        _exit(0); /* dies with the put in flight: no put end, no revoke, no abort */
    }
    assert_resumed(f, &id, pid);
}

/* A canceled commit (what weightctl put does on Ctrl-C) aborts its import:
 * WEIGHT_ECANCELED, the revision is not left IMPORTING (nothing held until
 * the import TTL), and the same identity is published again at once. The
 * cancel comes before the commit here, so that the test does not depend on
 * timing; a cancel during the copy takes the same abort path. */
static void test_canceled_put_aborts_its_import(void **state)
{
    fixture *f = *state;
    weight_identity id;
    weight_writer *w = NULL;
    weight_metadata md;
    int rc;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "tiny", "canceled", 1), 0);
    weight_store *s = open_store(f);
    CHECK(s, weight_put_begin(s, &id, NULL, &w));
    for (size_t i = 0; i < N_MODEL; i++)
        if (model[i].alias_of == NULL)
            CHECK(s, weight_writer_add_tensor(w, model[i].name, model[i].dtype, model[i].ndim,
                                              model[i].shape, model[i].data));
    weight_store_cancel(s);
    assert_int_equal(weight_writer_commit(w, NULL), WEIGHT_ECANCELED);
    for (int i = 0;; i++) { /* the abort is durable when the commit returns; its objects go after */
        rc = weight_get_metadata(s, &id, &md, NULL);
        if (rc == WEIGHT_ENOT_FOUND || (rc == WEIGHT_OK && md.availability == WEIGHT_DELETED)) break;
        if (rc == WEIGHT_OK && md.availability == WEIGHT_IMPORTING)
            fail_msg("the canceled import is still open");
        if (i == 500) fail_msg("the canceled import did not end: %d", rc);
        usleep(20000);
    }
    put_model(s, &id, 1);
    get_and_compare(s, &id, 2, 1);
    weight_store_close(s);
}

/* A store handle outlives a master restart: its next calls reconnect (reads
 * and the idempotent calls are sent again), so a load, a query and a new
 * put just work. A SIGKILL too. */
static void test_store_survives_master_restart(void **state)
{
    fixture *f = *state;
    weight_store *s = open_store(f);
    weight_identity a, b;
    assert_int_equal(weight_identity_set(&a, NULL, "llm", "tiny", "survivor", 1), 0);
    assert_int_equal(weight_identity_set(&b, NULL, "llm", "tiny", "survivor", 2), 0);
    put_model(s, &a, 1);
    get_and_compare(s, &a, 2, 0);
    restart(f);
    get_and_compare(s, &a, 2, 1);
    weight_metadata md;
    CHECK(s, weight_get_metadata(s, &a, &md, NULL));
    assert_int_equal(md.availability, WEIGHT_READY);
    hx_kill(&f->m);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    put_model(s, &b, 4);
    get_and_compare(s, &b, 4, 1);
    weight_store_close(s);
}

/* -- the lease during a long load ---------------------------------------------- */

typedef struct slowctx {
    getctx g;
    fixture *f;
    const weight_identity *id;
    int checked;
    uint32_t leases_during;
    int remove_rc;
} slowctx;

/* The first buffer request stalls the load well past the lease TTL and
 * looks at the revision from a second store meanwhile. */
static int slow_provide(void *ctx, const weight_tensor_info *t, const weight_tensor_place *p,
                        const uint64_t *shape, uint64_t bytes, void **out)
{
    slowctx *sc = ctx;
    if (!sc->checked) {
        sc->checked = 1;
        usleep(2500 * 1000);
        weight_store *other = open_store(sc->f);
        weight_metadata md;
        CHECK(other, weight_get_metadata(other, sc->id, &md, NULL));
        sc->leases_during = md.active_leases;
        sc->remove_rc = weight_remove(other, sc->id, md.metadata_generation, NULL);
        weight_store_close(other);
    }
    return provide_cb(&sc->g, t, p, shape, bytes, out);
}

/* A load that outlives the lease TTL keeps its lease (renewed by the helper
 * thread): the revision cannot be removed meanwhile (BUSY), the load
 * succeeds, and the lease is gone afterwards. */
static void test_lease_is_renewed_during_a_long_load(void **state)
{
    fixture *f = *state;
    weight_store *s = open_store(f);
    weight_identity id;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "tiny", "slow", 1), 0);
    put_model(s, &id, 1);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_LEASE_TTL_MS, 400), 0);
    slowctx sc;
    memset(&sc, 0, sizeof sc);
    sc.g.tp = 1;
    sc.f = f;
    sc.id = &id;
    weight_placement pl = {place_cb, &sc.g};
    weight_bindings bd = {NULL, 0, slow_provide, &sc};
    CHECK(s, weight_get(s, &id, &pl, &bd, NULL));
    assert_int_equal(sc.leases_during, 1);
    assert_int_equal(sc.remove_rc, WEIGHT_EBUSY);
    for (size_t i = 0; i < N_MODEL; i++) free(sc.g.bufs[i]);
    weight_metadata md;
    CHECK(s, weight_get_metadata(s, &id, &md, NULL));
    assert_int_equal(md.active_leases, 0);
    assert_int_equal(md.availability, WEIGHT_READY);
    weight_store_close(s);
}

typedef struct cancelctx {
    getctx g;
    weight_store *s;
} cancelctx;

static int cancel_provide(void *ctx, const weight_tensor_info *t, const weight_tensor_place *p,
                          const uint64_t *shape, uint64_t bytes, void **out)
{
    cancelctx *cc = ctx;
    weight_store_cancel(cc->s);
    return provide_cb(&cc->g, t, p, shape, bytes, out);
}

/* A canceled load returns CANCELED and releases its lease; the next load
 * on the same store runs normally. */
static void test_cancel_releases_the_lease(void **state)
{
    fixture *f = *state;
    weight_store *s = open_store(f);
    weight_identity id;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "tiny", "cancel", 1), 0);
    put_model(s, &id, 1);
    cancelctx cc;
    memset(&cc, 0, sizeof cc);
    cc.g.tp = 1;
    cc.s = s;
    weight_placement pl = {place_cb, &cc.g};
    weight_bindings bd = {NULL, 0, cancel_provide, &cc};
    assert_int_equal(weight_get(s, &id, &pl, &bd, NULL), WEIGHT_ECANCELED);
    for (size_t i = 0; i < N_MODEL; i++) free(cc.g.bufs[i]);
    weight_metadata md;
    CHECK(s, weight_get_metadata(s, &id, &md, NULL));
    assert_int_equal(md.active_leases, 0);
    get_and_compare(s, &id, 2, 1);
    weight_store_close(s);
}

/* -- weightctl --------------------------------------------------------------------- */

/* Run weightctl with args against f's master; stdout into out (may be NULL),
 * stderr into <dir>/stderr. Returns the exit status. */
static int ctl(fixture *f, char *out, size_t cap, const char *fmt, ...)
{
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s/bin/weightctl --master %s --tenant acme %s 2>%s/stderr",
             BUILD_DIR, f->m.socket, args, f->m.dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = 0;
    char sink[4096];
    while (1) {
        size_t got = out ? fread(out + n, 1, cap - 1 - n, p) : fread(sink, 1, sizeof sink, p);
        if (got == 0) break;
        if (out) n += got;
    }
    if (out) out[n] = '\0';
    int st = pclose(p);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    if (code != 0) { /* show why, for a failing assertion */
        char path[400], line[1024];
        snprintf(path, sizeof path, "%s/stderr", f->m.dir);
        FILE *e = fopen(path, "r");
        while (e && fgets(line, sizeof line, e)) fprintf(stderr, "  weightctl %s: %s", args, line);
        if (e) fclose(e);
    }
    return code;
}

static void ctl_stderr(fixture *f, char *out, size_t cap)
{
    char path[400];
    snprintf(path, sizeof path, "%s/stderr", f->m.dir);
    FILE *e = fopen(path, "r");
    size_t n = e ? fread(out, 1, cap - 1, e) : 0;
    out[n] = '\0';
    if (e) fclose(e);
}

/* Write the model (lm_head as a byte-identical copy, as a checkpoint that
 * did not dedupe it) into two safetensors files. */
static void write_files(fixture *f, char paths[2][400])
{
    char err[256];
    for (int k = 0; k < 2; k++) {
        wc_st_entry e[N_MODEL];
        size_t n = 0;
        for (size_t i = 0; i < N_MODEL; i++) {
            if ((int)(i % 2) != k) continue;
            tmodel_tensor *t = &model[i];
            e[n].name = t->name;
            e[n].dtype = wc_dtype_from_name(t->dtype, strlen(t->dtype));
            e[n].ndim = t->ndim;
            e[n].shape = t->shape;
            e[n].data = t->data;
            e[n].bytes = t->bytes;
            n++;
        }
        snprintf(paths[k], 400, "%s/part%d.safetensors", f->m.dir, k);
        int fd = open(paths[k], O_WRONLY | O_CREAT | O_TRUNC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(wc_st_write_fd(fd, e, n, NULL, 0, err, sizeof err), 0);
        close(fd);
    }
}

/* Compare DIR/rank<r>-of-<tp>.safetensors with independent slices. */
static void compare_file(fixture *f, const char *dir, uint32_t tp, uint32_t r, uint32_t dim)
{
    char path[600], err[256];
    wc_st_file file;
    snprintf(path, sizeof path, "%s/%s/rank%u-of-%u.safetensors", f->m.dir, dir, r, tp);
    assert_int_equal(wc_st_open(path, &file, err, sizeof err), 0);
    assert_int_equal(file.header.n_tensors, N_MODEL);
    for (size_t i = 0; i < N_MODEL; i++) {
        tmodel_tensor *t = &model[i];
        long k = wc_st_find(&file.header, t->name);
        assert_true(k >= 0);
        uint64_t off[4], shp[4], n;
        box_of(t, t->ndim >= 2 && tp > 1, dim, tp, r, off, shp);
        uint8_t *want = slice(t, off, shp, &n);
        const wc_st_tensor *st = &file.header.tensors[k];
        assert_int_equal(st->bytes, n);
        assert_string_equal(wc_dtype_name(st->dtype), t->dtype);
        for (uint32_t d = 0; d < t->ndim; d++) assert_int_equal(st->shape[d], shp[d]);
        if (memcmp(file.base + st->offset, want, n) != 0)
            fail_msg("%s: tensor %s differs (tp %u rank %u dim %u)", path, t->name, tp, r, dim);
        free(want);
    }
    wc_st_close(&file);
}

/* weightctl end to end: put from safetensors (the tied lm_head stored once),
 * ls through pages of one, info, exists, size, get at TP 1, 2, 4 along dim
 * 0 (the default) and dim 1 (--split), across a restart; rm leaves a
 * tombstone and get then fails naming NOT_READY. */
static void test_weightctl_put_ls_info_get_rm(void **state)
{
    fixture *f = *state;
    char paths[2][400], out[65536], err[4096];
    write_files(f, paths);
    for (int v = 1; v <= 3; v++)
        assert_int_equal(ctl(f, out, sizeof out,
                             "put --namespace cli --resource tiny --revision v%d --payload-bytes %u "
                             "--policy hot --mode manual %s %s", v, BOUND, paths[0], paths[1]), 0);
    assert_non_null(strstr(out, "published cli/tiny/v3@1"));
    restart(f);

    /* ls, one revision per page: every revision exactly once. */
    char token[1024] = "";
    int seen[4] = {0, 0, 0, 0}, pages = 0;
    do {
        assert_int_equal(ctl(f, out, sizeof out, "--json ls --namespace cli --limit 1 --page-token '%s'",
                             token), 0);
        for (int v = 1; v <= 3; v++) {
            char needle[64];
            snprintf(needle, sizeof needle, "\"id\":\"cli/tiny/v%d@1\"", v);
            if (strstr(out, needle)) seen[v]++;
        }
        const char *t = strstr(out, "\"next_page_token\":\"");
        assert_non_null(t);
        t += strlen("\"next_page_token\":\"");
        size_t n = strcspn(t, "\"");
        assert_true(n < sizeof token);
        memcpy(token, t, n);
        token[n] = '\0';
        pages++;
    } while (token[0] && pages < 10);
    assert_int_equal(seen[1], 1);
    assert_int_equal(seen[2], 1);
    assert_int_equal(seen[3], 1);
    assert_int_equal(ctl(f, out, sizeof out, "ls"), 0);
    assert_non_null(strstr(out, "cli/tiny/v2@1"));

    /* info, size, exists */
    uint64_t total = 0;
    for (size_t i = 0; i < N_MODEL; i++)
        if (!model[i].alias_of) total += model[i].bytes;
    char needle[128];
    assert_int_equal(ctl(f, out, sizeof out, "--json info cli/tiny/v1@1"), 0);
    assert_non_null(strstr(out, "\"availability\":\"READY\""));
    assert_non_null(strstr(out, "\"residency\":\"HOT\""));
    assert_non_null(strstr(out, "\"mode\":\"MANUAL\""));
    snprintf(needle, sizeof needle, "\"logical_bytes\":%llu", (unsigned long long)total);
    assert_non_null(strstr(out, needle));
    assert_int_equal(ctl(f, out, sizeof out, "info cli/tiny/v1"), 0); /* newest generation */
    assert_non_null(strstr(out, "availability  READY"));
    assert_non_null(strstr(out, "manifest      weights/acme/cli/tiny/v1/1/manifest"));
    assert_int_equal(ctl(f, out, sizeof out, "size cli/tiny/v1@1"), 0);
    assert_int_equal(strtoull(out, NULL, 10), total);
    assert_int_equal(ctl(f, out, sizeof out, "exists cli/tiny/v1@1"), 0);
    assert_int_equal(ctl(f, out, sizeof out, "exists cli/tiny/v1@2"), 1);

    /* get at TP 1, 2, 4: dim 0 by default, dim 1 with --split */
    for (uint32_t tp = 1; tp <= 4; tp *= 2)
        for (uint32_t r = 0; r < tp; r++) {
            assert_int_equal(ctl(f, out, sizeof out, "get cli/tiny/v2@1 --out %s/d0 --tp %u --rank %u --allow-uneven",
                                 f->m.dir, tp, r), 0);
            compare_file(f, "d0", tp, r, 0);
            assert_int_equal(ctl(f, out, sizeof out,
                                 "get cli/tiny/v2@1 --out %s/d1 --tp %u --rank %u --split '*=1' "
                                 "--replicate '*norm*' --allow-uneven", f->m.dir, tp, r), 0);
            if (tp > 1) {
                /* 1-dim tensors are replicated by the default rule anyway */
                compare_file(f, "d1", tp, r, 1);
            }
        }

    /* put --tp: the rank files get wrote, joined again by the same rules,
     * read back whole; bad rank sets are refused naming file and tensor,
     * and publish nothing */
    assert_int_equal(ctl(f, out, sizeof out,
                         "put --namespace cli --resource tiny --revision tp2 --payload-bytes %u "
                         "--tp 2 --tie lm_head.weight=embed.weight %s/d0/rank0-of-2.safetensors "
                         "%s/d0/rank1-of-2.safetensors", BOUND, f->m.dir, f->m.dir), 0);
    assert_int_equal(ctl(f, out, sizeof out,
                         "put --namespace cli --resource tiny --revision tp4 --payload-bytes %u "
                         "--tp 4 --split '*=1' --replicate '*norm*' %s/d1/rank0-of-4.safetensors "
                         "%s/d1/rank1-of-4.safetensors %s/d1/rank2-of-4.safetensors "
                         "%s/d1/rank3-of-4.safetensors", BOUND, f->m.dir, f->m.dir, f->m.dir,
                         f->m.dir), 0);
    for (int v = 0; v < 2; v++) {
        assert_int_equal(ctl(f, out, sizeof out, "get cli/tiny/%s@1 --out %s/whole%d",
                             v ? "tp4" : "tp2", f->m.dir, v), 0);
        compare_file(f, v ? "whole1" : "whole0", 1, 0, 0);
    }
    assert_int_equal(ctl(f, out, sizeof out, "--json info cli/tiny/tp2@1"), 0);
    snprintf(needle, sizeof needle, "\"logical_bytes\":%llu", (unsigned long long)total);
    assert_non_null(strstr(out, needle)); /* the tied lm_head stored once */
    assert_int_equal(ctl(f, out, sizeof out,
                         "put --namespace cli --resource tiny --revision bad --tp 2 "
                         "--replicate '*' %s/d0/rank0-of-2.safetensors %s/d0/rank1-of-2.safetensors",
                         f->m.dir, f->m.dir), 1);
    ctl_stderr(f, err, sizeof err);
    assert_non_null(strstr(err, "INVALID_ARGUMENT"));
    assert_non_null(strstr(err, "rank0-of-2.safetensors: tensor "));
    assert_non_null(strstr(err, "the --split / --replicate rules given replicate it"));
    assert_int_equal(ctl(f, out, sizeof out,
                         "put --namespace cli --resource tiny --revision bad --tp 2 "
                         "%s/d0/rank0-of-2.safetensors %s/d0/rank1-of-4.safetensors",
                         f->m.dir, f->m.dir), 1);
    ctl_stderr(f, err, sizeof err);
    assert_non_null(strstr(err, "cut for --tp 4 (weight_mgmt.tp in its __metadata__), not --tp 2"));
    assert_int_equal(ctl(f, out, sizeof out,
                         "put --namespace cli --resource tiny --revision bad --tp 2 "
                         "%s/d0/rank0-of-2.safetensors", f->m.dir), 2);
    ctl_stderr(f, err, sizeof err);
    assert_non_null(strstr(err, "one file per rank"));
    assert_int_equal(ctl(f, out, sizeof out,
                         "put --namespace cli --resource tiny --revision bad --split '*=1' %s",
                         paths[0]), 2);
    ctl_stderr(f, err, sizeof err);
    assert_non_null(strstr(err, "give --tp N"));
    assert_int_equal(ctl(f, out, sizeof out, "exists cli/tiny/bad@1"), 1);
    assert_int_equal(ctl(f, out, sizeof out, "--json ls --namespace cli --resource tiny --all"), 0);
    assert_null(strstr(out, "cli/tiny/bad"));

    /* rm: a tombstone, then no reads */
    assert_int_equal(ctl(f, out, sizeof out, "rm cli/tiny/v3@1"), 0);
    assert_true(strstr(out, "DELETING") || strstr(out, "DELETED"));
    for (int i = 0; i < 300; i++) {
        assert_int_equal(ctl(f, out, sizeof out, "info cli/tiny/v3@1"), 0);
        if (strstr(out, "availability  DELETED")) break;
        usleep(100000);
    }
    assert_non_null(strstr(out, "availability  DELETED")); /* the lifecycle ran the deletion */
    assert_int_equal(ctl(f, out, sizeof out, "ls --all"), 0);
    assert_non_null(strstr(out, "cli/tiny/v3@1"));
    assert_int_equal(ctl(f, out, sizeof out, "exists cli/tiny/v3@1"), 1);
    assert_int_equal(ctl(f, out, sizeof out, "get cli/tiny/v3@1 --out %s/gone", f->m.dir), 1);
    ctl_stderr(f, err, sizeof err);
    assert_non_null(strstr(err, "NOT_READY"));
    restart(f);
    assert_int_equal(ctl(f, out, sizeof out, "--json info cli/tiny/v3@1"), 0);
    assert_true(strstr(out, "\"availability\":\"DELETING\"") ||
                strstr(out, "\"availability\":\"DELETED\""));
}

/* Residency round trip: HOT -> COLD -> MIXED -> HOT, each migration waited
 * for, and every state reads back byte for byte at TP 2. Needs the
 * lifecycle's migrations; COLD is read from the cold files through the nodes. */
static void test_migrations_keep_reads_exact(void **state)
{
    fixture *f = *state;
    weight_store *s = open_store(f);
    weight_identity id;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "tiny", "migrating", 1), 0);
    put_model(s, &id, 1);
    const weight_residency targets[] = {WEIGHT_RES_COLD, WEIGHT_RES_MIXED, WEIGHT_RES_HOT};
    for (size_t k = 0; k < 3; k++) {
        migrate_and_wait(s, &id, targets[k]);
        weight_metadata md;
        CHECK(s, weight_get_metadata(s, &id, &md, NULL));
        assert_int_equal(md.residency, targets[k]);
        get_and_compare(s, &id, 2, 0);
        restart(f);
        weight_store_close(s);
        s = open_store(f);
        get_and_compare(s, &id, 2, 1);
    }
    weight_store_close(s);
}

/* Changes a revision's policy over and over from its own store until told
 * to stop: every change is a durable metadata mutation of the revision. */
typedef struct flipper {
    fixture *f;
    weight_identity id;
    volatile int stop;
    int changes;
    int failed;
} flipper;

static void *flip_main(void *arg)
{
    flipper *fl = arg;
    weight_store *s = NULL;
    char err[256];
    if (weight_store_open(fl->f->m.socket, "acme", NULL, &s, err, sizeof err) != 0) {
        fl->failed = 1;
        return NULL;
    }
    for (int i = 0; !fl->stop; i++) {
        weight_policy pol = {WEIGHT_RES_HOT, i % 2 ? 0.25 : 0.75, WEIGHT_MODE_DEFAULT};
        weight_metadata cur;
        int rc = weight_get_metadata(s, &fl->id, &cur, NULL);
        if (rc == 0) rc = weight_update_policy(s, &fl->id, &pol, cur.metadata_generation, NULL);
        if (rc == 0) fl->changes++;
        else if (rc != WEIGHT_ESTALE_GENERATION && rc != WEIGHT_EBUSY) fl->failed = rc;
        usleep(1000); /* in flight a good part of the time, not all of it */
    }
    weight_store_close(s);
    return NULL;
}

/* Readers are not failed by a change of the revision's metadata that is
 * being made durable while they ask for their lease (a migration step, a
 * reconcile after a restart, here a policy change in a loop): weight_get
 * waits it out and every load is exact. */
static void test_reads_while_metadata_changes(void **state)
{
    fixture *f = *state;
    weight_store *s = open_store(f);
    flipper fl;
    pthread_t th;
    memset(&fl, 0, sizeof fl);
    fl.f = f;
    assert_int_equal(weight_identity_set(&fl.id, NULL, "llm", "tiny", "busy", 1), 0);
    put_model(s, &fl.id, 1);
    assert_int_equal(pthread_create(&th, NULL, flip_main, &fl), 0);
    for (int i = 0; i < 40; i++) get_and_compare(s, &fl.id, 1, 0);
    fl.stop = 1;
    pthread_join(th, NULL);
    assert_int_equal(fl.failed, 0);
    assert_true(fl.changes > 0);
    weight_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_tp1_get_resharded_across_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reads_while_metadata_changes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_tp4_fragments_get_any_tp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_altered_bytes_fail_with_digest_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fused_verify_fails_on_any_altered_chunk_byte, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_altered_memory_replica_falls_back_to_cold, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_remote_transport_put_and_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_resumes_an_import_left_by_a_dead_writer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_resumes_an_import_whose_writer_died_mid_object,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_survives_master_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_is_renewed_during_a_long_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_releases_the_lease, setup, teardown),
        cmocka_unit_test_setup_teardown(test_canceled_put_aborts_its_import, setup, teardown),
        cmocka_unit_test_setup_teardown(test_weightctl_put_ls_info_get_rm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migrations_keep_reads_exact, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
