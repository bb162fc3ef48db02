/* test_upgrade_read_lease_release.c -- a new client against a master that
 * does not know objects.release_read_leases, the client's side of a rolling
 * upgrade.
 *
 * The master is store_master_no_lease_release (tests/CMakeLists.txt): the
 * real master with the real weight_mgmt.so and its embedded node, built
 * without method 10 of the object service, so a release is answered as an
 * unknown method ("service 1 (objects) has no method 10", NOT_FOUND) -- what
 * a client meets when its connection moved from a new master to an older
 * one. Its lookups still say it takes releases, so the client does send
 * one. Pinned, with what the master counted (rpc_errors_total: the replies
 * with an error status), never the clock:
 *  - weight_get completes byte for byte with no error, three times on one
 *    store, and only the first get's release is sent: the client remembers,
 *    for that connection, that the master does not know the method;
 *  - the object client's kvc_release_read_leases answers SMP_OK (the
 *    leases expire on their own, as an older master's do), later lookups on
 *    that connection are not noted, and a new connection asks once again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"
#include "weight_check.h"
#include "weight_model.h"
#include "weightclient.h"

static wx_tensor model[] = {
    {"embed.weight", {32, 32}, {0}},
    {"layers.0.w", {16, 64}, {0}},
};
#define N_MODEL (sizeof(model) / sizeof(model[0]))

#define PAYLOAD0 "weights/acme/llm/x/v1/1/payload/0"
#define PAYLOAD1 "weights/acme/llm/x/v1/1/payload/1"
#define ERRORS "rpc_errors_total"

typedef wx_published fixture;

/* The master without the method, with revision llm/x/v1@1 of tenant acme
 * published HOT (two payload objects and the manifest). */
static int setup(void **state)
{
    *state = wx_published_new("upg-release", BUILD_DIR "/tests/store_master_no_lease_release", NULL, model, N_MODEL, 23);
    return *state != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    wx_published_free(*state);
    return 0;
}

/* The master does not know the method: a release sent to it is refused as
 * unknown (the premise of the tests below). */
static void assert_method_unknown(fixture *f)
{
    kvc *c = hx_client(&f->m);
    const char *const key = PAYLOAD0;
    assert_non_null(c);
    assert_int_equal(kvc_release_keys(c, &key, 1, NULL, NULL), SMP_ENOTFOUND);
    assert_true(hx_says(kvc_error(c), "has no method 10"));
    kvc_close(c);
}

/* weight_get against it completes byte for byte and reports nothing, each
 * time; the store's connection sends the release once (the first get's,
 * answered as unknown) and no more. */
static void test_upgrade_get_completes_and_sends_one_release(void **state)
{
    fixture *f = *state;
    assert_method_unknown(f);
    long long before = wx_metric(&f->m, ERRORS);
    assert_true(before >= 1);
    for (int i = 0; i < 3; i++) {
        wx_get_and_compare(f->s, &f->id, model, N_MODEL);
        assert_string_equal(weight_store_last_error(f->s), "");
    }
    /* the first get's release only: the next two sent none */
    assert_int_equal(wx_metric(&f->m, ERRORS) - before, 1);
}

/* The object client: the release is not an error, the connection stops
 * noting lookups for a master that cannot take them back, and another
 * connection asks once again. */
static void test_upgrade_object_client_stops_asking_on_that_connection(void **state)
{
    fixture *f = *state;
    kvc *c = hx_client(&f->m), *other = NULL;
    kvc_object obj;
    uint32_t released = 7;
    assert_non_null(c);
    long long before = wx_metric(&f->m, ERRORS);
    kvc_track_read_leases(c, 1);
    assert_int_equal(kvc_get(c, PAYLOAD0, &obj), 0);
    assert_int_equal(kvc_get(c, PAYLOAD1, &obj), 0);
    assert_int_equal(kvc_read_leases_noted(c), 2); /* the lookups say it takes releases */
    assert_int_equal(kvc_release_read_leases(c, &released), 0);
    assert_int_equal(released, 0);
    assert_int_equal(kvc_read_leases_noted(c), 0);
    assert_int_equal(wx_metric(&f->m, ERRORS) - before, 1);

    /* that connection knows now: nothing noted, nothing sent */
    assert_int_equal(kvc_get(c, PAYLOAD0, &obj), 0);
    assert_int_equal(kvc_read_leases_noted(c), 0);
    assert_int_equal(kvc_release_read_leases(c, &released), 0);
    assert_int_equal(wx_metric(&f->m, ERRORS) - before, 1);

    /* another connection does not know yet: one release, refused once */
    other = hx_client(&f->m);
    assert_non_null(other);
    kvc_track_read_leases(other, 1);
    assert_int_equal(kvc_get(other, PAYLOAD1, &obj), 0);
    assert_int_equal(kvc_read_leases_noted(other), 1);
    assert_int_equal(kvc_release_read_leases(other, NULL), 0);
    assert_int_equal(kvc_get(other, PAYLOAD1, &obj), 0);
    assert_int_equal(kvc_read_leases_noted(other), 0);
    assert_int_equal(wx_metric(&f->m, ERRORS) - before, 2);
    kvc_close(other);
    kvc_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_upgrade_get_completes_and_sends_one_release, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_upgrade_object_client_stops_asking_on_that_connection,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
