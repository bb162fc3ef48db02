/* test_wm_client_digests.c -- the client's commit digests are the plugin's.
 *
 * weight_put computes the payload-key digest and the affinity digest itself
 * (client/wc_digest.c) and the master recomputes them from the commit
 * (weight_plugin/wm_identity.c); a single differing byte refuses every
 * commit. These tests pack real models with wc_pack and compare both sides
 * byte for byte, and check that the client's canonical group key is the
 * plugin's for identities that need percent-encoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "wc_digest.h"
#include "wc_pack.h"
#include "weight_management.h"

/* Pack n tensors of the given byte sizes (1-dim U8) under a small bound. */
static void pack_model(const wc_identity *id, const uint64_t *sizes, size_t n, uint64_t bound,
                       wc_pack_result *out)
{
    wc_pack_tensor *t = calloc(n, sizeof *t);
    char (*names)[32] = calloc(n, sizeof *names);
    char err[256];
    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], "t%03zu", i);
        t[i].name = names[i];
        t[i].dtype = WC_DTYPE_U8;
        t[i].ndim = 1;
        t[i].shape = &sizes[i];
    }
    int rc = wc_pack(id, t, n, bound, out, err, sizeof err);
    if (rc != 0) fprintf(stderr, "wc_pack: %s\n", err);
    assert_int_equal(rc, 0);
    free(t);
    free(names);
}

/* The affinity summary the plugin would receive for m. */
static void plugin_affinity(const wc_manifest *m, wm_affinity *a)
{
    a->n_units = m->n_units;
    a->borrowed = 0;
    a->units = calloc(m->n_units, sizeof *a->units);
    for (size_t u = 0; u < m->n_units; u++) {
        a->units[u].n_members = m->units[u].n;
        a->units[u].logical_bytes = m->units[u].logical_bytes;
        a->units[u].members = calloc(m->units[u].n, sizeof(char *));
        for (uint32_t j = 0; j < m->units[u].n; j++)
            a->units[u].members[j] = strdup(m->objects[m->units[u].objects[j]].key);
    }
}

static void check_model(const char *tenant, const char *ns, const char *res, const char *rev,
                        const uint64_t *sizes, size_t n, uint64_t bound)
{
    wc_identity id = {(char *)tenant, (char *)ns, (char *)res, (char *)rev, 7};
    wc_pack_result r;
    memset(&r, 0, sizeof r);
    pack_model(&id, sizes, n, bound, &r);
    const wc_manifest *m = &r.manifest;

    /* Group key: the client's is the plugin's. */
    wm_identity_buf wid;
    char key[WM_KEY_MAX + 1];
    assert_int_equal(wm_identity_set(&wid, tenant, ns, res, rev, 7), WM_OK);
    assert_true(wm_group_key(&wid.id, key, sizeof key) > 0);
    assert_string_equal(m->group, key);
    for (size_t i = 0; i < m->n_objects; i++) {
        char pk[WM_KEY_MAX + 1];
        assert_true(wm_payload_key(&wid.id, i, pk, sizeof pk) > 0);
        assert_string_equal(m->objects[i].key, pk);
    }

    /* Payload keys in a shuffled order: the digest sorts. */
    const char **keys = calloc(m->n_objects, sizeof *keys);
    for (size_t i = 0; i < m->n_objects; i++) keys[i] = m->objects[(i * 7 + 3) % m->n_objects].key;
    if (m->n_objects % 7 == 0) /* the stride must be a permutation */
        for (size_t i = 0; i < m->n_objects; i++) keys[i] = m->objects[m->n_objects - 1 - i].key;
    uint8_t a[32], b[32];
    assert_int_equal(wc_payload_keys_digest(keys, m->n_objects, a), 0);
    assert_int_equal(wm_payload_keys_digest(keys, m->n_objects, b), WM_OK);
    assert_memory_equal(a, b, 32);

    wm_affinity aff;
    plugin_affinity(m, &aff);
    assert_int_equal(wc_affinity_digest(m, a), 0);
    assert_int_equal(wm_affinity_digest(&aff, b), WM_OK);
    assert_memory_equal(a, b, 32);

    /* And the plugin's own check of the summary accepts it. */
    wm_revision rev_rec;
    memset(&rev_rec, 0, sizeof rev_rec);
    rev_rec.id = wid.id;
    rev_rec.group_key = key;
    rev_rec.payload_count = m->n_objects;
    for (size_t i = 0; i < m->n_objects; i++) rev_rec.logical_bytes += m->objects[i].bytes;
    rev_rec.affinity_count = m->n_units;
    memcpy(rev_rec.affinity_sha256, b, 32);
    char msg[256] = "";
    int rc = wm_affinity_check(&aff, &rev_rec, msg, sizeof msg);
    if (rc != WM_OK) fprintf(stderr, "wm_affinity_check: %s\n", msg);
    assert_int_equal(rc, WM_OK);

    wm_affinity_clear(&aff);
    free(keys);
    wc_pack_result_free(&r);
}

/* Small tensors sharing objects, and tensors over the bound spanning several. */
static void test_digests_match_the_plugin_for_packed_models(void **state)
{
    (void)state;
    const uint64_t small[] = {100, 200, 300, 4000, 5000, 10, 1};
    check_model("default", "llm", "tiny", "v1", small, 7, 4096);
    const uint64_t big[] = {10000, 50, 9000, 70000, 1, 4096, 4097};
    check_model("acme", "llm", "big", "main", big, 7, 4096);
    uint64_t many[40];
    for (size_t i = 0; i < 40; i++) many[i] = 1 + (i * 977) % 3000;
    check_model("t", "n", "r", "v", many, 40, 2048);
}

/* Components with '/', '@', '%', spaces and UTF-8 encode identically. */
static void test_group_keys_with_reserved_characters_match(void **state)
{
    (void)state;
    const uint64_t sizes[] = {64, 64};
    check_model("ten ant", "org/team", "model@v2", "rev%20x", sizes, 2, 4096);
    check_model("t", "\xc3\xa9t\xc3\xa9", "r\xe2\x82\xac", "~a-b_c.d", sizes, 2, 4096);
}

/* Chunk sums: one per chunk, the last one short, equal to one-shot XXH3. */
static void test_chunk_sums_cover_every_chunk(void **state)
{
    (void)state;
    uint8_t buf[10000];
    uint64_t sums[4];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(i * 31);
    wc_chunk_sums(buf, sizeof buf, 4096, sums);
    assert_true(sums[0] == wc_xxh3(buf, 4096));
    assert_true(sums[1] == wc_xxh3(buf + 4096, 4096));
    assert_true(sums[2] == wc_xxh3(buf + 8192, 10000 - 8192));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_digests_match_the_plugin_for_packed_models),
        cmocka_unit_test(test_group_keys_with_reserved_characters_match),
        cmocka_unit_test(test_chunk_sums_cover_every_chunk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
