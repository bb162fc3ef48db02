/* test_weight_put_digests.c -- the digests weight_put records are those of
 * the bytes it stored, computed here independently of libweightclient.
 *
 * weight_put copies the caller's tensors into payload objects and hashes
 * them in the same pass, block by block (the SHA-256 of each object, which
 * put end records and the manifest carries, and the XXH3-64 of each 1 MiB
 * chunk). The model here makes the blocks, chunks, tensors and objects
 * cross each other's boundaries: objects bounded at 2.5 MiB hold several
 * tensors, a 3 MiB tensor is cut into rows across objects, every object
 * spans several checksum chunks, and the TP 4 writer's fragments (as small
 * as 192 KiB) are gathered into blocks on the TCP path. The revision is
 * published co-located (through the mapped segment) and over TCP (the
 * node's data server); for each, every payload object is read back through
 * the object service and its SHA-256 (OpenSSL, one call over the whole
 * object) and per-chunk XXH3-64 (one call per chunk) are compared with the
 * manifest and with what put end recorded, and a weight_get returns the
 * tensors byte for byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/sha.h>
#include <xxhash.h>

#include "harness.h"
#include "kv_client.h"
#include "wc_manifest.h"
#include "weight_check.h"
#include "weightclient.h"

#define BOUND (5ull << 19)  /* 2.5 MiB payload objects */
#define CHUNK (1ull << 20)  /* the manifest's checksum chunk */
#define TP 4

typedef struct dtensor {
    const char *name;
    const char *dtype;
    uint32_t item;
    uint64_t rows, cols;
    uint8_t *data;
} dtensor;

static dtensor model[] = {
    {"a.weight", "BF16", 2, 384, 1024, NULL},    /* 768 KiB: fragments of 192 KiB */
    {"b.weight", "F32", 4, 300, 1000, NULL},     /* 1,200,000 B */
    {"c.weight", "BF16", 2, 1536, 1024, NULL},   /* 3 MiB: over the bound, cut in rows */
    {"d.weight", "I8", 1, 780, 1001, NULL},      /* 780,780 B: odd sizes */
    {"e.weight", "F32", 4, 4, 5, NULL},          /* 80 B */
};
#define N_MODEL (sizeof(model) / sizeof(model[0]))

static uint64_t tensor_bytes(const dtensor *t)
{
    return t->rows * t->cols * t->item;
}

typedef struct fixture {
    hx_master m;
    kvc *kv;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    char err[256];
    if (f == NULL) return -1;
    *state = f; /* teardown frees what a failed setup leaves */
    for (size_t i = 0; i < N_MODEL; i++) {
        uint64_t n = tensor_bytes(&model[i]);
        model[i].data = malloc(n);
        uint64_t x = 0x9E3779B97F4A7C15ull ^ i;
        for (uint64_t b = 0; b < n; b++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            model[i].data[b] = (uint8_t)x;
        }
    }
    if (hx_init(&f->m, "weight-put-digests",
                "cluster:\n  default_weight_preferred_residency: hot\n") < 0 ||
        hx_start(&f->m, 20000) < 0 ||
        kvc_connect(f->m.socket, 10000, &f->kv, err, sizeof err) < 0) {
        hx_print_log(&f->m);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f == NULL) return 0;
    kvc_close(f->kv);
    hx_cleanup(&f->m);
    for (size_t i = 0; i < N_MODEL; i++) free(model[i].data);
    free(f);
    return 0;
}

/* Publish the model: whole tensors, or the dim-0 fragments of a TP 4 writer. */
static void put_model(weight_store *s, const weight_identity *id, int fragments)
{
    weight_writer *w = NULL;
    CHECK(s, weight_put_begin(s, id, NULL, &w));
    for (size_t i = 0; i < N_MODEL; i++) {
        dtensor *t = &model[i];
        uint64_t shape[2] = {t->rows, t->cols};
        if (!fragments) {
            CHECK(s, weight_writer_add_tensor(w, t->name, t->dtype, 2, shape, t->data));
            continue;
        }
        for (uint64_t r = 0; r < TP; r++) {
            uint64_t rows = t->rows / TP;
            uint64_t off[2] = {r * rows, 0}, local[2] = {rows, t->cols};
            CHECK(s, weight_writer_add_fragment(w, t->name, t->dtype, 2, shape, off, local,
                                                t->data + r * rows * t->cols * t->item));
        }
    }
    CHECK(s, weight_writer_commit(w, NULL));
}

/* Every payload object's stored bytes against the manifest and put end;
 * returns how many objects span more than one checksum chunk. */
static size_t check_objects(fixture *f, weight_store *s, const weight_identity *id)
{
    weight_metadata md;
    wc_manifest m;
    uint64_t len = 0;
    char err[256];
    size_t multi = 0;
    CHECK(s, weight_get_metadata(s, id, &md, NULL));
    uint8_t *mbytes = malloc(1 << 20);
    assert_int_equal(kvc_get_into(f->kv, md.manifest_key, mbytes, 1 << 20, &len, 1), 0);
    if (wc_manifest_decode(mbytes, (size_t)len, &m, err, sizeof err) != 0) fail_msg("%s", err);
    free(mbytes);
    assert_int_equal(m.n_objects, md.payload_count);
    assert_true(m.n_objects >= 3);
    for (size_t i = 0; i < m.n_objects; i++) {
        const wc_object *o = &m.objects[i];
        kvc_object ko;
        uint8_t sha[32];
        uint8_t *buf = malloc(o->bytes);
        assert_int_equal(kvc_get(f->kv, o->key, &ko), 0);
        assert_int_equal(ko.size, o->bytes);
        assert_int_equal(kvc_get_into(f->kv, o->key, buf, o->bytes, &len, 0), 0);
        assert_int_equal(len, o->bytes);
        SHA256(buf, (size_t)o->bytes, sha);
        assert_true(o->has_sha256);
        assert_memory_equal(o->sha256, sha, 32);  /* the manifest's */
        assert_memory_equal(ko.sha256, sha, 32);  /* put end's */
        assert_int_equal(o->chunk_bytes, CHUNK);
        assert_int_equal(o->n_chunks, (o->bytes + CHUNK - 1) / CHUNK);
        for (size_t c = 0; c < o->n_chunks; c++) {
            uint64_t at = c * CHUNK, n = o->bytes - at < CHUNK ? o->bytes - at : CHUNK;
            if (o->chunk_xxh3[c] != (uint64_t)XXH3_64bits(buf + at, (size_t)n))
                fail_msg("%s: chunk %zu sum differs", o->key, c);
        }
        if (o->n_chunks > 1) multi++;
        free(buf);
    }
    wc_manifest_free(&m);
    return multi;
}

typedef struct getctx {
    uint8_t *bufs[N_MODEL];
} getctx;

static int place_whole(void *ctx, const weight_tensor_info *t, weight_tensor_place *out)
{
    (void)ctx;
    (void)t;
    out->kind = WEIGHT_PLACE_REPLICATED;
    return 0;
}

static int provide(void *ctx, const weight_tensor_info *t, const weight_tensor_place *p,
                   const uint64_t *shape, uint64_t bytes, void **out)
{
    getctx *g = ctx;
    (void)p;
    (void)shape;
    for (size_t i = 0; i < N_MODEL; i++)
        if (strcmp(model[i].name, t->name) == 0 && bytes == tensor_bytes(&model[i])) {
            g->bufs[i] = malloc(bytes);
            *out = g->bufs[i];
            return 0;
        }
    return WEIGHT_EINVALID_ARGUMENT;
}

static void get_and_compare(weight_store *s, const weight_identity *id)
{
    getctx g;
    memset(&g, 0, sizeof g);
    weight_placement pl = {place_whole, &g};
    weight_bindings bd = {NULL, 0, provide, &g};
    CHECK(s, weight_get(s, id, &pl, &bd, NULL));
    for (size_t i = 0; i < N_MODEL; i++) {
        assert_non_null(g.bufs[i]);
        assert_memory_equal(g.bufs[i], model[i].data, tensor_bytes(&model[i]));
        free(g.bufs[i]);
    }
}

static weight_store *open_store(fixture *f, int transport)
{
    weight_store *s = NULL;
    char err[256];
    if (weight_store_open(f->m.socket, "acme", NULL, &s, err, sizeof err) != 0)
        fail_msg("weight_store_open: %s", err);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_PAYLOAD_BYTES, BOUND), 0);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_TRANSPORT, (uint64_t)transport), 0);
    return s;
}

/* Publish the model through transport (1 co-located, 2 TCP) as whole
 * tensors (revision rev) and as TP 4 fragments (rev-tp4), and check the
 * digests of every object and a get of each. */
static void put_and_check(fixture *f, int transport, const char *rev)
{
    weight_store *s = open_store(f, transport);
    weight_identity id;
    char tp4[64];
    snprintf(tp4, sizeof tp4, "%s-tp4", rev);
    for (int fragments = 0; fragments <= 1; fragments++) {
        assert_int_equal(weight_identity_set(&id, NULL, "llm", "digests", fragments ? tp4 : rev, 1), 0);
        put_model(s, &id, fragments);
        assert_true(check_objects(f, s, &id) >= 2);
        get_and_compare(s, &id);
    }
    weight_store_close(s);
}

/* Co-located, whole tensors and TP 4 fragments: the objects' SHA-256 and
 * chunk sums are OpenSSL's and XXH3's over the stored bytes. */
static void test_colocated_put_digests_are_those_of_the_bytes(void **state)
{
    put_and_check(*state, 1, "local");
}

/* Over TCP, whole tensors and TP 4 fragments gathered into blocks: the
 * same. */
static void test_tcp_put_digests_are_those_of_the_bytes(void **state)
{
    put_and_check(*state, 2, "tcp");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_colocated_put_digests_are_those_of_the_bytes),
        cmocka_unit_test(test_tcp_put_digests_are_those_of_the_bytes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
