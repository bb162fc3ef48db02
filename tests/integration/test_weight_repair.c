/* test_weight_repair.c -- revisions through the loss of memory, on a real
 * master with the real weight_mgmt.so and its embedded node.
 *
 * Revisions are published and read with libweightclient; the loss of
 * memory is what a reboot does to /dev/shm: the master (and its node) stop,
 * the node's segment file is deleted, and they start again on the same
 * data_dir and cold directory. Pinned here: a COLD revision is READY again
 * and reads back exactly (SHA-256 of every tensor) -- its manifest had its
 * verified cold copy; a HOT revision whose payloads kept cold copies is
 * repaired by a REPAIRING operation the tick starts by itself (READY + HOT,
 * counted on /metrics); a HOT revision with nothing on disk is DEGRADED,
 * not READY; `weightctl repair` starts a repair explicitly and refuses a
 * stale --expect. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "weight_check.h"
#include "weightclient.h"

#define WAIT_MS 30000 /* generous: the machine is shared */

/* -- a small model --------------------------------------------------------------- */

typedef struct rtensor {
    const char *name;
    uint64_t shape[2];
    uint8_t data[4096];
} rtensor;

static rtensor model[] = {
    {"embed.weight", {32, 32}, {0}},
    {"layers.0.w", {16, 64}, {0}},
    {"layers.1.w", {64, 16}, {0}},
};
#define N_MODEL (sizeof(model) / sizeof(model[0]))

static void model_init(void)
{
    for (size_t i = 0; i < N_MODEL; i++)
        for (size_t b = 0; b < sizeof(model[i].data); b++)
            model[i].data[b] = (uint8_t)((b * 131 + i * 17 + (b >> 7)) & 0xff);
}

/* -- the master -------------------------------------------------------------------- */

typedef struct fixture {
    hx_master m;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    char cfg[1024];
    model_init();
    if (f == NULL || hx_init(&f->m, "repair", NULL) < 0) return -1;
    snprintf(cfg, sizeof(cfg),
             "node:\n  segment_dir: \"%s/shm\"\n  segment_bytes: 33554432\n"
             "  cold_dir: \"%s/cold\"\n  poll_ms: 10\n"
             "cluster:\n  default_weight_preferred_residency: hot\n"
             "  weight_migration_cooldown_ms: 100\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    config:\n      tick_period_ms: 50\n",
             f->m.dir, f->m.dir, BUILD_DIR);
    if (hx_reconfigure(&f->m, cfg) < 0 || hx_start(&f->m, 20000) < 0) return -1;
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

static weight_store *open_store(fixture *f)
{
    weight_store *s = NULL;
    char err[256];
    int rc = weight_store_open(f->m.socket, "acme", NULL, &s, err, sizeof err);
    if (rc != 0) fail_msg("weight_store_open: %s", err);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_PAYLOAD_BYTES, 4096), 0);
    return s;
}

static void sleep_ms(long ms)
{
    usleep((useconds_t)ms * 1000);
}

/* Publish the model as id (HOT, MANUAL: only explicit migrations move it). */
static void put_model(weight_store *s, const weight_identity *id)
{
    weight_writer *w = NULL;
    weight_policy pol = {WEIGHT_RES_HOT, 0.0, WEIGHT_MODE_MANUAL};
    CHECK(s, weight_put_begin(s, id, &pol, &w));
    for (size_t i = 0; i < N_MODEL; i++)
        CHECK(s, weight_writer_add_tensor(w, model[i].name, "F32", 2, model[i].shape, model[i].data));
    weight_metadata md;
    CHECK(s, weight_writer_commit(w, &md));
    assert_int_equal(md.availability, WEIGHT_READY);
}

/* Poll until id is in availability av (and residency res when >= 0) with no
 * active operation; returns its metadata. */
static weight_metadata wait_state(weight_store *s, const weight_identity *id, int av, int res)
{
    weight_metadata md;
    for (int i = 0; i * 20 < WAIT_MS; i++) {
        CHECK(s, weight_get_metadata(s, id, &md, NULL));
        if ((int)md.availability == av && (res < 0 || (int)md.residency == res) && md.operation_id == 0)
            return md;
        sleep_ms(20);
    }
    fail_msg("%s: %s %s operation %llu after %d ms (wanted %s %s)", id->resource_id,
             weight_availability_name((int)md.availability), weight_residency_name((int)md.residency),
             (unsigned long long)md.operation_id, WAIT_MS, weight_availability_name(av),
             res < 0 ? "" : weight_residency_name(res));
    return md;
}

static void migrate_and_wait(weight_store *s, const weight_identity *id, weight_residency target)
{
    weight_operation op;
    weight_metadata md = wait_state(s, id, WEIGHT_READY, -1);
    CHECK(s, weight_migrate(s, id, target, 0, md.metadata_generation, &op));
    for (int i = 0; i * 20 < WAIT_MS && op.state == 1; i++) {
        sleep_ms(20);
        CHECK(s, weight_get_operation(s, op.id, &op));
    }
    assert_int_equal(op.state, 2);
    wait_state(s, id, WEIGHT_READY, (int)target);
}

typedef struct getctx {
    uint8_t *bufs[N_MODEL];
    uint64_t sizes[N_MODEL];
} getctx;

static int place_cb(void *ctx, const weight_tensor_info *t, weight_tensor_place *out)
{
    (void)ctx;
    (void)t;
    out->kind = WEIGHT_PLACE_REPLICATED;
    return 0;
}

static int provide_cb(void *ctx, const weight_tensor_info *t, const weight_tensor_place *p,
                      const uint64_t *shape, uint64_t bytes, void **out)
{
    getctx *g = ctx;
    (void)p;
    (void)shape;
    for (size_t i = 0; i < N_MODEL; i++)
        if (strcmp(model[i].name, t->name) == 0) {
            g->bufs[i] = calloc(1, bytes ? bytes : 1);
            g->sizes[i] = bytes;
            *out = g->bufs[i];
            return g->bufs[i] ? 0 : WEIGHT_ENOMEM;
        }
    return WEIGHT_EINVALID_ARGUMENT;
}

/* weight_get of the whole revision; every tensor's SHA-256 is compared with
 * the SHA-256 of what was published. Returns the bytes copied from mapped
 * memory replicas (the rest came from cold files). */
static uint64_t get_and_compare(weight_store *s, const weight_identity *id)
{
    getctx g;
    memset(&g, 0, sizeof(g));
    weight_placement pl = {place_cb, &g};
    weight_bindings bd = {NULL, 0, provide_cb, &g};
    weight_get_stats st;
    CHECK(s, weight_get(s, id, &pl, &bd, &st));
    for (size_t i = 0; i < N_MODEL; i++) {
        unsigned char want[32], got[32];
        assert_non_null(g.bufs[i]);
        assert_int_equal(g.sizes[i], sizeof(model[i].data));
        hx_sha256(model[i].data, sizeof(model[i].data), want);
        hx_sha256(g.bufs[i], g.sizes[i], got);
        if (memcmp(want, got, 32) != 0) fail_msg("%s: tensor %s differs", id->resource_id, model[i].name);
        free(g.bufs[i]);
    }
    return st.local_bytes;
}

/* Stop the master and its embedded node, delete the segment files (what a
 * reboot does to /dev/shm), start again on the same data and cold files. */
static void reboot_without_memory(fixture *f)
{
    char dir[400], path[700];
    assert_int_equal(hx_stop(&f->m), 0);
    snprintf(dir, sizeof(dir), "%s/shm", f->m.dir);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int removed = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        assert_int_equal(unlink(path), 0);
        removed++;
    }
    closedir(d);
    assert_true(removed > 0);
    assert_int_equal(hx_start(&f->m, 20000), 0);
}

/* The value of a /metrics line that starts with `series ` (-1: none). */
static long metric(fixture *f, const char *series)
{
    char *body = NULL, needle[256];
    long v = -1;
    assert_int_equal(hx_http_get(&f->m, "/metrics", &body), 200);
    snprintf(needle, sizeof(needle), "\n%s ", series);
    const char *at = strstr(body, needle);
    if (at != NULL) v = strtol(at + strlen(needle), NULL, 10);
    free(body);
    return v;
}

/* -- tests --------------------------------------------------------------------- */

/* COLD survives the loss of memory, and HOT revisions with cold replicas
 * are repaired: after a reboot without the segment, the COLD revision is
 * READY and reads back exactly; the HOT one that once was COLD is brought
 * back to READY + HOT by a REPAIRING operation nobody asked for, and reads
 * back exactly; the HOT one that never had a cold payload is DEGRADED (its
 * payloads are gone) and not readable. */
static void test_cold_survives_the_loss_of_memory(void **state)
{
    fixture *f = *state;
    weight_store *s = open_store(f);
    weight_identity cold, back, hot;
    assert_int_equal(weight_identity_set(&cold, NULL, "llm", "cold", "v1", 1), 0);
    assert_int_equal(weight_identity_set(&back, NULL, "llm", "back", "v1", 1), 0);
    assert_int_equal(weight_identity_set(&hot, NULL, "llm", "hot", "v1", 1), 0);
    put_model(s, &cold);
    put_model(s, &back);
    put_model(s, &hot);
    migrate_and_wait(s, &cold, WEIGHT_RES_COLD);
    migrate_and_wait(s, &back, WEIGHT_RES_COLD);
    migrate_and_wait(s, &back, WEIGHT_RES_HOT);
    get_and_compare(s, &cold);
    get_and_compare(s, &back);
    /* Every manifest has its cold copy (the hot one's too, from the tick). */
    for (int i = 0; metric(f, "weight_manifest_replica_tasks_total{task=\"cold_copy\"}") < 3; i++) {
        if (i * 20 > WAIT_MS) fail_msg("the manifests got no cold copies");
        sleep_ms(20);
    }
    weight_store_close(s);

    reboot_without_memory(f);
    s = open_store(f);
    /* The hot revision without cold payloads shows the loss was seen. */
    wait_state(s, &hot, WEIGHT_DEGRADED, -1);
    for (int i = 0; metric(f, "weight_repairs_total{result=\"succeeded\"}") < 1; i++) {
        if (i * 20 > WAIT_MS) fail_msg("no repair succeeded");
        sleep_ms(20);
    }
    assert_true(metric(f, "weight_repairs_total{result=\"started\"}") >= 1);
    weight_metadata md = wait_state(s, &cold, WEIGHT_READY, WEIGHT_RES_COLD);
    assert_int_equal(get_and_compare(s, &cold), 0); /* from the cold files */
    md = wait_state(s, &back, WEIGHT_READY, WEIGHT_RES_HOT);
    assert_true(md.observed_hot_ratio == 1.0);
    assert_int_equal(get_and_compare(s, &back), 3 * 4096); /* memory again */
    int exists = 1;
    CHECK(s, weight_is_exist(s, &hot, &exists));
    assert_int_equal(exists, 0);
    weight_store_close(s);
}

/* Run weightctl against the master; stdout into out. Returns the exit
 * status. */
static int ctl(fixture *f, char *out, size_t cap, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s/bin/weightctl --master %s --tenant acme %s 2>&1", BUILD_DIR,
             f->m.socket, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* weightctl repair starts a REPAIRING operation on a READY revision at the
 * generation it read (printed), or at --expect N; a stale --expect is
 * refused with STALE_GENERATION and changes nothing. */
static void test_weightctl_repair(void **state)
{
    fixture *f = *state;
    weight_store *s = open_store(f);
    weight_identity id;
    char out[4096];
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "cli", "v1", 1), 0);
    put_model(s, &id);
    weight_metadata md = wait_state(s, &id, WEIGHT_READY, WEIGHT_RES_HOT);
    char arg[256];
    snprintf(arg, sizeof(arg), "repair llm/cli/v1@1 --expect %llu",
             (unsigned long long)(md.metadata_generation + 5));
    assert_int_equal(ctl(f, out, sizeof(out), arg), 1);
    if (strstr(out, "STALE_GENERATION") == NULL) fail_msg("weightctl repair said: %s", out);
    weight_metadata same;
    CHECK(s, weight_get_metadata(s, &id, &same, NULL));
    assert_int_equal(same.metadata_generation, md.metadata_generation);

    assert_int_equal(ctl(f, out, sizeof(out), "repair llm/cli/v1@1"), 0);
    char used[64];
    snprintf(used, sizeof(used), "generation %llu", (unsigned long long)md.metadata_generation);
    if (strstr(out, used) == NULL || strstr(out, "REPAIRING") == NULL)
        fail_msg("weightctl repair said: %s", out);
    md = wait_state(s, &id, WEIGHT_READY, WEIGHT_RES_HOT);
    assert_int_equal(md.metadata_generation, same.metadata_generation + 2);
    get_and_compare(s, &id);
    weight_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cold_survives_the_loss_of_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_weightctl_repair, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
