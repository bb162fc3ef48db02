/* test_key_space.c -- the weight plugin's key space "weights/" (ABI 1.9,
 * claim_key_space) is closed to clients' plain object changes, on a real
 * store_master with the real weight_mgmt.so and its embedded node.
 *
 * With revision llm/x/v1@1 of tenant acme published: a put of a key no
 * revision has (no group, or a group the plugin does not own), an upsert of
 * a member, and a remove of a member are refused with SMP_EVETO naming the
 * key, "weights/" and weight_mgmt (a remove of a key that holds nothing is
 * not found, as anywhere), and a remove by prefix or remove-all skips the
 * revision's objects (counted skipped, none removed); nothing on the master
 * changes (every key, size and SHA-256
 * as before), the revision reads back byte for byte. Reads of the key space
 * (get, exists, ls), keys outside it ("weights" itself, "weightsX/...") and
 * a prefix removal that meets it where it holds nothing work as before;
 * weightctl's kv commands print the same refusals. The weight flows go on:
 * weightctl put (its payloads are puts into the revision's managed group,
 * decided by the plugin's guard), get, upsert, migrate, repair, fsck and rm
 * of a revision succeed. Disabled (weightctl plugin disable), the plugin
 * keeps its key space closed, the refusal saying it is disabled; enabled
 * again, the revision reads back. Objects put under weights/ while the
 * plugin was not loaded (no claim then) stay readable once the plugin runs
 * and cannot be overwritten, but they are nobody's: an operator removes
 * them, one key or by prefix, while the revision's objects stay. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <sys/stat.h>

#include "harness.h"
#include "weight_check.h"
#include "weight_model.h"
#include "weightclient.h"

static wx_tensor model[] = {
    {"embed.weight", {32, 32}, {0}},
    {"layers.0.w", {16, 64}, {0}},
};
#define N_MODEL (sizeof(model) / sizeof(model[0]))

#define GROUP "weights/acme/llm/x/v1/1"
#define MANIFEST GROUP "/manifest"
#define PAYLOAD0 GROUP "/payload/0"
#define ZZ "weights/default/c/r/zz/1/manifest" /* a key of no revision */
#define SPACE_OF(key) "key '" key "' is in the key space 'weights/' of plugin weight_mgmt"
#define CHANGE_THROUGH ": change it through that plugin's calls"

typedef wx_published fixture;

/* A master ticking every 50 ms with llm/x/v1@1 of tenant acme published
 * HOT (two payload objects and the manifest). */
static int setup(void **state)
{
    *state = wx_published_new("keyspace", NULL, "      tick_period_ms: 50\n", model, N_MODEL, 23);
    return *state != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    wx_published_free(*state);
    return 0;
}

/* What the master holds: every key with its size and SHA-256, one line
 * each, in key order (malloc'd). Read on a connection of its own, closed
 * after, so the read leases its lookups took end with it. */
static char *holdings(const hx_master *m)
{
    kvc *c = hx_client(m);
    char *text = NULL, *cursor = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(c);
    assert_non_null(out);
    do {
        char **keys = NULL, *next = NULL;
        size_t n = 0;
        assert_int_equal(kvc_list(c, "", cursor ? cursor : "", 100, &keys, &n, &next), 0);
        for (size_t i = 0; i < n; i++) {
            kvc_object obj;
            assert_int_equal(kvc_get(c, keys[i], &obj), 0);
            fprintf(out, "%s %llu ", keys[i], (unsigned long long)obj.size);
            for (int b = 0; b < 32; b++) fprintf(out, "%02x", obj.sha256[b]);
            fputc('\n', out);
        }
        free(cursor);
        cursor = next != NULL && next[0] != '\0' ? strdup(next) : NULL;
        kvc_list_free(keys, n, next);
    } while (cursor != NULL);
    fclose(out);
    kvc_close(c);
    return text;
}

static int exists(kvc *c, const char *key)
{
    int e = 0;
    assert_int_equal(kvc_exists(c, key, &e), 0);
    return e;
}

/* Write len bytes of data to path. */
static void write_file(const char *path, const void *data, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

/* A safetensors file at path: one F32 tensor "w" of 8 x 8 values of seed. */
static void write_safetensors(const char *path, unsigned seed)
{
    char header[96];
    uint8_t file[8 + sizeof(header) + 256];
    int n = snprintf(header, sizeof(header),
                     "{\"w\":{\"dtype\":\"F32\",\"shape\":[8,8],\"data_offsets\":[0,256]}}");
    while (n % 8 != 0) header[n++] = ' ';
    uint64_t hlen = (uint64_t)n;
    for (int i = 0; i < 8; i++) file[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(file + 8, header, (size_t)n);
    for (int i = 0; i < 64; i++) {
        float v = (float)(seed * 100 + (unsigned)i);
        memcpy(file + 8 + n + 4 * i, &v, 4);
    }
    write_file(path, file, 8 + (size_t)n + 256);
}

/* -- tests ----------------------------------------------------------------------- */

/* Every plain change a client asks in weights/ is refused, naming the key,
 * the key space and the plugin, and changes nothing; reads and keys
 * outside it work. */
static void test_plain_changes_in_the_key_space_are_refused(void **state)
{
    fixture *f = *state;
    uint64_t removed = 7, skipped = 7;
    kvc *c = hx_client(&f->m);
    assert_non_null(c);
    char *before = holdings(&f->m);
    assert_non_null(strstr(before, PAYLOAD0 " "));

    /* put of a key no revision has: no group, a group of nobody's */
    assert_int_equal(kvc_put_bytes(c, ZZ, "x", 1, SMP_DATA_KV, NULL, 0, NULL), SMP_EVETO);
    assert_true(hx_says(kvc_error(c), "put start: SMP_EVETO: " SPACE_OF(ZZ) CHANGE_THROUGH));
    assert_int_equal(kvc_put_bytes(c, ZZ, "x", 1, SMP_DATA_METADATA, "mine", 0, NULL), SMP_EVETO);
    assert_true(hx_says(kvc_error(c), SPACE_OF(ZZ) CHANGE_THROUGH));
    /* upsert (overwrite) of a member, outside its group; inside it the
     * plugin's guard refuses, as before: the revision is published */
    assert_int_equal(kvc_put_bytes(c, PAYLOAD0, "x", 1, SMP_DATA_WEIGHT, NULL, 1, NULL), SMP_EVETO);
    assert_true(hx_says(kvc_error(c), SPACE_OF(PAYLOAD0) CHANGE_THROUGH));
    assert_int_equal(kvc_put_bytes(c, PAYLOAD0, "x", 1, SMP_DATA_WEIGHT, GROUP, 1, NULL), SMP_EVETO);
    assert_true(hx_says(kvc_error(c), "belongs to group '" GROUP "', which plugin weight_mgmt manages"));
    /* remove of a member; of a key that is not there: not found, as
       anywhere (nothing could be removed) */
    assert_int_equal(kvc_remove(c, PAYLOAD0), SMP_EVETO);
    assert_true(hx_says(kvc_error(c), "remove: SMP_EVETO: " SPACE_OF(PAYLOAD0) CHANGE_THROUGH));
    assert_int_equal(kvc_remove(c, "weights/acme/nothing"), SMP_ENOTFOUND);
    assert_false(hx_says(kvc_error(c), "key space"));
    /* remove by a prefix inside it, above it, and remove-all: the key
     * space's objects are skipped (as vetoed), nothing removed */
    const char *prefixes[] = {"weights/acme/", "w", ""};
    for (size_t i = 0; i < 3; i++) {
        removed = skipped = 7;
        assert_int_equal(kvc_remove_prefix(c, prefixes[i], &removed, &skipped), 0);
        assert_int_equal(removed, 0);
        assert_int_equal(skipped, 3);
    }

    /* reads of it answer */
    assert_false(exists(c, ZZ));
    assert_true(exists(c, PAYLOAD0));
    char **keys = NULL, *next = NULL;
    size_t n = 0;
    assert_int_equal(kvc_list(c, "weights/", "", 100, &keys, &n, &next), 0);
    assert_int_equal(n, 3);
    assert_string_equal(keys[0], MANIFEST);
    kvc_list_free(keys, n, next);

    /* nothing changed: every key, size and SHA-256; the revision reads back */
    char *after = holdings(&f->m);
    assert_string_equal(after, before);
    free(after);
    wx_get_and_compare(f->s, &f->id, model, N_MODEL);

    /* outside it: plain keys come and go; a prefix removal meeting the key
     * space where it holds nothing goes through */
    assert_int_equal(kvc_put_bytes(c, "acme/notes.txt", "hello", 5, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(kvc_put_bytes(c, "weights", "w", 1, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(kvc_put_bytes(c, "weightsX/a", "a", 1, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(kvc_put_bytes(c, "weightsX/a", "b", 1, SMP_DATA_KV, NULL, 1, NULL), 0);
    assert_int_equal(kvc_remove_prefix(c, "weights/nobody/", &removed, &skipped), 0);
    assert_int_equal(removed, 0);
    assert_int_equal(kvc_remove_prefix(c, "weightsX/", &removed, &skipped), 0);
    assert_int_equal(removed, 1);
    assert_int_equal(kvc_remove(c, "weights"), 0);
    assert_int_equal(kvc_remove(c, "acme/notes.txt"), 0);
    after = holdings(&f->m);
    assert_string_equal(after, before);
    free(after);

    /* weightctl's kv commands say the same */
    char out[4096], args[1024], file[400];
    snprintf(file, sizeof(file), "%s/hello.txt", f->m.dir);
    write_file(file, "hello", 5);
    snprintf(args, sizeof(args), "kv put " ZZ " %s", file);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), args), 1);
    assert_true(hx_says(out, SPACE_OF(ZZ) CHANGE_THROUGH));
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "kv rm " PAYLOAD0), 1);
    assert_true(hx_says(out, SPACE_OF(PAYLOAD0) CHANGE_THROUGH));
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "kv ls weights/"), 0);
    assert_true(hx_says(out, PAYLOAD0));
    snprintf(args, sizeof(args), "kv get " PAYLOAD0 " %s/payload0", f->m.dir);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), args), 0);
    snprintf(args, sizeof(args), "kv put demo/hello %s", file);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), args), 0);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "kv rm demo/hello"), 0);
    after = holdings(&f->m);
    assert_string_equal(after, before);
    free(after);
    free(before);
    kvc_close(c);
}

/* The plugin's own flows put and remove objects in its key space: a put's
 * payloads and manifest go into the revision's managed group (the guard
 * decides), everything else through the plugin's calls. */
static void test_weight_flows_still_work(void **state)
{
    fixture *f = *state;
    char out[8192], args[1200], st[400], st2[400], got[400];
    snprintf(st, sizeof(st), "%s/a.safetensors", f->m.dir);
    snprintf(st2, sizeof(st2), "%s/b.safetensors", f->m.dir);
    snprintf(got, sizeof(got), "%s/got", f->m.dir);
    write_safetensors(st, 1);
    write_safetensors(st2, 2);

    snprintf(args, sizeof(args), "--tenant acme put --namespace llm --resource cli --revision v1 %s", st);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), args), 0);
    snprintf(args, sizeof(args), "--tenant acme get llm/cli/v1@1 --out %s", got);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), args), 0);
    struct stat sb;
    char rank[450];
    snprintf(rank, sizeof(rank), "%s/rank0-of-1.safetensors", got);
    assert_int_equal(stat(rank, &sb), 0);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "fsck"), 0);
    snprintf(args, sizeof(args), "--tenant acme upsert llm/cli/v1@1 --generation 2 --wait %s", st2);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), args), 0);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out),
                                  "--tenant acme migrate llm/cli/v1@2 --to cold --wait"), 0);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "--tenant acme repair llm/cli/v1@2"), 0);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "--tenant acme exists llm/cli/v1@2"), 0);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out),
                                  "--tenant acme rm llm/cli/v1@2 --wait --timeout 60"), 0);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "--tenant acme exists llm/cli/v1@2"), 1);
    /* the revision published by the library beside them is untouched */
    wx_get_and_compare(f->s, &f->id, model, N_MODEL);
}

/* Disabled, the plugin keeps its key space: every change there is refused
 * saying so, its managed group included; plain keys work; enabled again,
 * the revision reads back and the refusal no longer says disabled. */
static void test_a_disabled_plugin_keeps_its_key_space_closed(void **state)
{
    fixture *f = *state;
    char out[4096];
    uint64_t removed = 7, skipped = 7;
    char *before = holdings(&f->m);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "plugin disable weight_mgmt"), 0);
    kvc *c = hx_client(&f->m);
    assert_non_null(c);

#define DISABLED ", which is disabled: refused until `weightctl plugin enable weight_mgmt`"
    assert_int_equal(kvc_put_bytes(c, ZZ, "x", 1, SMP_DATA_KV, NULL, 0, NULL), SMP_EVETO);
    assert_true(hx_says(kvc_error(c), SPACE_OF(ZZ) DISABLED));
    assert_int_equal(kvc_put_bytes(c, PAYLOAD0, "x", 1, SMP_DATA_WEIGHT, GROUP, 1, NULL), SMP_EVETO);
    assert_true(hx_says(kvc_error(c), SPACE_OF(PAYLOAD0) DISABLED));
    assert_int_equal(kvc_remove(c, PAYLOAD0), SMP_EVETO);
    assert_true(hx_says(kvc_error(c), SPACE_OF(PAYLOAD0) DISABLED));
    assert_int_equal(kvc_remove_prefix(c, "", &removed, &skipped), 0);
    assert_int_equal(removed, 0);
    assert_int_equal(skipped, 3);
    assert_int_equal(kvc_put_bytes(c, "kv/while-disabled", "x", 1, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(kvc_remove(c, "kv/while-disabled"), 0);
    char *after = holdings(&f->m);
    assert_string_equal(after, before);
    free(after);

    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "plugin enable weight_mgmt"), 0);
    wx_get_and_compare(f->s, &f->id, model, N_MODEL);
    assert_int_equal(kvc_put_bytes(c, ZZ, "x", 1, SMP_DATA_KV, NULL, 0, NULL), SMP_EVETO);
    assert_true(hx_says(kvc_error(c), SPACE_OF(ZZ) CHANGE_THROUGH));
    free(before);
    kvc_close(c);
}

/* Start m on a config with weight_mgmt loaded or not (enabled: false). */
static void start_plain(hx_master *m, int plugin)
{
    char cfg[1024];
    snprintf(cfg, sizeof(cfg),
             "node:\n  segment_dir: \"%s/shm\"\n  segment_bytes: 8388608\n  poll_ms: 10\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    enabled: %s\n",
             m->dir, BUILD_DIR, plugin ? "true" : "false");
    assert_int_equal(hx_reconfigure(m, cfg), 0);
    assert_int_equal(hx_start(m, 20000), 0);
}

/* Without the plugin nothing is claimed: plain keys under weights/ are put
 * as before. Once the plugin runs, those objects stay readable and cannot
 * be overwritten; but they belong to no revision, so an operator can clear
 * them -- one key, or by a prefix that also meets a published revision,
 * whose objects stay (skipped) and read back. Before, nothing could ever
 * remove them. */
static void test_objects_from_before_the_claim_can_be_cleared(void **state)
{
    hx_master *mp = *state;
    uint64_t removed = 7, skipped = 7;
    char back[8];
    uint64_t len = 0;
    start_plain(mp, 0);
    kvc *c = hx_client(mp);
    assert_non_null(c);
    assert_int_equal(kvc_put_bytes(c, "weights/legacy/a", "old", 3, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(kvc_put_bytes(c, "weights/legacy/b", "bb", 2, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(kvc_put_bytes(c, "weights/legacy/c", "c", 1, SMP_DATA_KV, NULL, 0, NULL), 0);
    kvc_close(c);
    assert_int_equal(hx_stop(mp), 0);

    start_plain(mp, 1);
    weight_store *s = wx_open_store(mp);
    weight_identity id;
    assert_int_equal(weight_identity_set(&id, "legacy", "llm", "x", "v1", 1), 0);
    wx_put_model(s, &id, model, N_MODEL); /* its keys: weights/legacy/llm/x/v1/1/... */
    c = hx_client(mp);
    assert_non_null(c);
    kvc_track_read_leases(c, 1);
    assert_int_equal(kvc_get_into(c, "weights/legacy/a", back, sizeof(back), &len, 1), 0);
    assert_int_equal(len, 3);
    assert_memory_equal(back, "old", 3);
    assert_int_equal(kvc_release_read_leases(c, NULL), 0); /* no lease holds a removal back */
    assert_int_equal(kvc_put_bytes(c, "weights/legacy/a", "new", 3, SMP_DATA_KV, NULL, 1, NULL),
                     SMP_EVETO);
    assert_true(hx_says(kvc_error(c), SPACE_OF("weights/legacy/a") CHANGE_THROUGH));
    assert_int_equal(kvc_remove(c, "weights/legacy/a"), 0);
    assert_false(exists(c, "weights/legacy/a"));
    assert_int_equal(kvc_remove_prefix(c, "weights/legacy/", &removed, &skipped), 0);
    assert_int_equal(removed, 2);
    assert_int_equal(skipped, 3); /* the revision's two payloads and manifest */
    assert_false(exists(c, "weights/legacy/b"));
    assert_false(exists(c, "weights/legacy/c"));
    wx_get_and_compare(s, &id, model, N_MODEL);
    kvc_close(c);
    weight_store_close(s);
}

static int setup_plain(void **state)
{
    hx_master *m = calloc(1, sizeof(*m));
    if (m == NULL || hx_init(m, "keyspace-old", NULL) < 0) {
        free(m);
        return -1;
    }
    *state = m;
    return 0;
}

static int teardown_plain(void **state)
{
    hx_cleanup(*state);
    free(*state);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_plain_changes_in_the_key_space_are_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_weight_flows_still_work, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_disabled_plugin_keeps_its_key_space_closed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_objects_from_before_the_claim_can_be_cleared, setup_plain,
                                        teardown_plain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
