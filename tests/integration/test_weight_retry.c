/* test_weight_retry.c -- idempotent management calls end to end (issue 17).
 *
 * libweightclient against a master running the real weight_mgmt.so (50 ms
 * tick). A client whose reply was lost calls weight_migrate_request,
 * weight_update_policy_request or weight_remove_request again with the same
 * request id, arguments and expected generation: it gets the first result
 * (the same operation; the policy it set; the same deletion) instead of
 * STALE_GENERATION, also after a clean restart and after a SIGKILL of the
 * master (the id is persisted with the revision's record); the same id with
 * other arguments is CONFLICT, a call without an id meets the generation
 * fence as before. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "harness.h"
#include "weight_check.h"
#include "weightclient.h"

typedef struct fixture {
    hx_master m;
    weight_store *s;
} fixture;

static void open_store(fixture *f)
{
    char err[256];
    int rc = weight_store_open(f->m.socket, "acme", NULL, &f->s, err, sizeof err);
    if (rc != 0) fprintf(stderr, "weight_store_open: %s\n", err);
    assert_int_equal(rc, 0);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    char cfg[1024];
    if (f == NULL || hx_init(&f->m, "weight-retry", NULL) < 0) return -1;
    snprintf(cfg, sizeof cfg,
             "cluster:\n  default_weight_preferred_residency: hot\n"
             "  default_weight_migration_mode: manual\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    config:\n      tick_period_ms: 50\n",
             BUILD_DIR);
    if (hx_reconfigure(&f->m, cfg) < 0 || hx_start(&f->m, 20000) < 0) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    weight_store_close(f->s);
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

/* Publish acme/llm/<res>/main@1 with two small tensors. */
static weight_identity publish(weight_store *s, const char *res)
{
    static const uint64_t shape[2] = {16, 32};
    static uint8_t data[2][16 * 32 * 2];
    weight_identity id;
    weight_writer *w = NULL;
    for (size_t i = 0; i < sizeof data[0]; i++) {
        data[0][i] = (uint8_t)i;
        data[1][i] = (uint8_t)(i * 7);
    }
    assert_int_equal(weight_identity_set(&id, "acme", "llm", res, "main", 1), 0);
    CHECK(s, weight_put_begin(s, &id, NULL, &w));
    CHECK(s, weight_writer_add_tensor(w, "a.weight", "BF16", 2, shape, data[0]));
    CHECK(s, weight_writer_add_tensor(w, "b.weight", "BF16", 2, shape, data[1]));
    CHECK(s, weight_writer_commit(w, NULL));
    return id;
}

static void restart(fixture *f, int kill)
{
    weight_store_close(f->s);
    f->s = NULL;
    if (kill) hx_kill(&f->m);
    else assert_int_equal(hx_stop(&f->m), 0);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    open_store(f);
}

/* A migration, a policy update and a removal, each retried with its request
 * id after its reply was "lost": the first result, across a clean restart
 * and a SIGKILL; CONFLICT with other arguments; STALE_GENERATION without. */
static void test_retries_with_request_id_answer_the_first_result(void **state)
{
    fixture *f = *state;
    open_store(f);
    weight_store *s = f->s;
    weight_identity id = publish(s, "retry");
    weight_metadata md;
    weight_operation op1, op2;
    CHECK(s, weight_get_metadata(s, &id, &md, NULL));
    uint64_t g = md.metadata_generation;

    CHECK(s, weight_migrate_request(s, &id, WEIGHT_RES_COLD, 0, g, "mig-1", &op1));
    assert_true(op1.id > 0);
    CHECK(s, weight_migrate_request(s, &id, WEIGHT_RES_COLD, 0, g, "mig-1", &op2));
    assert_int_equal(op2.id, op1.id);
    assert_int_equal(weight_migrate_request(s, &id, WEIGHT_RES_MIXED, 0, g, "mig-1", &op2),
                     WEIGHT_ECONFLICT);
    assert_int_equal(weight_migrate(s, &id, WEIGHT_RES_COLD, 0, g, &op2), WEIGHT_ESTALE_GENERATION);

    for (int round = 0; round < 2; round++) {
        restart(f, round);
        s = f->s;
        memset(&op2, 0, sizeof op2);
        CHECK(s, weight_migrate_request(s, &id, WEIGHT_RES_COLD, 0, g, "mig-1", &op2));
        assert_int_equal(op2.id, op1.id); /* running or ended, the same operation */
    }

    /* Wait for the migration to end, then the policy and the removal. */
    for (int i = 0; i < 400; i++) {
        CHECK(s, weight_get_metadata(s, &id, &md, NULL));
        if (md.operation_id == 0) break;
        struct timespec ts = {0, 25 * 1000000L};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(md.operation_id, 0);
    g = md.metadata_generation;
    weight_policy pol = {WEIGHT_RES_COLD, 0, WEIGHT_MODE_PINNED};
    weight_metadata m1, m2;
    CHECK(s, weight_update_policy_request(s, &id, &pol, g, "pol-1", &m1));
    CHECK(s, weight_update_policy_request(s, &id, &pol, g, "pol-1", &m2));
    assert_int_equal(m2.metadata_generation, m1.metadata_generation);
    assert_int_equal(m2.policy.mode, WEIGHT_MODE_PINNED);
    restart(f, 1);
    s = f->s;
    CHECK(s, weight_update_policy_request(s, &id, &pol, g, "pol-1", &m2));
    assert_int_equal(m2.policy.mode, WEIGHT_MODE_PINNED);
    assert_int_equal(weight_update_policy(s, &id, &pol, g, &m2), WEIGHT_ESTALE_GENERATION);

    g = m1.metadata_generation;
    CHECK(s, weight_remove_request(s, &id, g, "rm-1", &m1));
    assert_true(m1.availability == WEIGHT_DELETING || m1.availability == WEIGHT_DELETED);
    restart(f, 1);
    s = f->s;
    CHECK(s, weight_remove_request(s, &id, g, "rm-1", &m2));
    assert_true(m2.availability == WEIGHT_DELETING || m2.availability == WEIGHT_DELETED);
}

/* Strict CAS: every mutation of the C API refuses
 * expected_metadata_generation 0 with INVALID_ARGUMENT (it never reads the
 * fence for the caller) and nothing changes; weightctl reads it, says which
 * one it used, and --expect fences on the caller's. */
static void test_strict_cas_refuses_generation_zero(void **state)
{
    fixture *f = *state;
    open_store(f);
    weight_store *s = f->s;
    weight_identity id = publish(s, "strict");
    weight_metadata before, after;
    weight_operation op;
    weight_upsert_claim c;
    weight_writer *w = NULL;
    weight_policy pol = {WEIGHT_RES_COLD, 0, WEIGHT_MODE_MANUAL};
    for (int i = 0; i < 400; i++) {
        CHECK(s, weight_get_metadata(s, &id, &before, NULL));
        if (before.operation_id == 0) break;
        struct timespec ts = {0, 25 * 1000000L};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(weight_update_policy(s, &id, &pol, 0, NULL), WEIGHT_EINVALID_ARGUMENT);
    assert_non_null(strstr(weight_store_last_error(s), "expected_metadata_generation 0"));
    assert_int_equal(weight_update_policy_request(s, &id, &pol, 0, "p0", NULL), WEIGHT_EINVALID_ARGUMENT);
    assert_int_equal(weight_migrate(s, &id, WEIGHT_RES_COLD, 0, 0, &op), WEIGHT_EINVALID_ARGUMENT);
    assert_int_equal(weight_migrate_request(s, &id, WEIGHT_RES_COLD, 0, 0, "m0", &op),
                     WEIGHT_EINVALID_ARGUMENT);
    assert_int_equal(weight_remove(s, &id, 0, NULL), WEIGHT_EINVALID_ARGUMENT);
    assert_int_equal(weight_remove_request(s, &id, 0, "r0", NULL), WEIGHT_EINVALID_ARGUMENT);
    assert_int_equal(weight_repair(s, &id, 0, &op), WEIGHT_EINVALID_ARGUMENT);
    assert_int_equal(weight_upsert(s, &id, 2, WEIGHT_UPSERT_PUT_FIRST, NULL, 0, NULL, 0, &c, &w),
                     WEIGHT_EINVALID_ARGUMENT);
    assert_null(w);
    CHECK(s, weight_get_metadata(s, &id, &after, NULL));
    assert_int_equal(after.metadata_generation, before.metadata_generation);
    assert_int_equal(after.availability, WEIGHT_READY);
    assert_int_equal(after.operation_id, 0);
    assert_int_equal(weight_upsert_status(s, &id, &c), WEIGHT_ENOT_FOUND);

    /* weightctl: a stale --expect is refused; without it the current
     * generation is read and named. */
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd,
             "%s/bin/weightctl --master %s --tenant acme migrate llm/strict/main@1 --to cold "
             "--expect %llu 2>&1",
             BUILD_DIR, f->m.socket, (unsigned long long)before.metadata_generation + 3);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    assert_int_not_equal(pclose(p), 0);
    if (strstr(out, "STALE_GENERATION") == NULL) fail_msg("weightctl migrate said: %s", out);
    snprintf(cmd, sizeof cmd,
             "%s/bin/weightctl --master %s --tenant acme migrate llm/strict/main@1 --to cold 2>&1",
             BUILD_DIR, f->m.socket);
    p = popen(cmd, "r");
    n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    assert_int_equal(pclose(p), 0);
    char used[64];
    snprintf(used, sizeof used, "at metadata generation %llu",
             (unsigned long long)before.metadata_generation);
    if (strstr(out, used) == NULL) fail_msg("weightctl migrate said: %s", out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_retries_with_request_id_answer_the_first_result, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_strict_cas_refuses_generation_zero, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
