/* test_auth_limits.c -- the limits against abuse of auth.limits on a real
 * store_master with authentication on (issue 19).
 *
 * Each test starts its own master (auth_fixture.c) with one kind of limit
 * and drives it through the ordinary client transport:
 *  - request rate: tenant b's bucket (4 requests a second, burst 2) runs
 *    dry, and its next requests -- a put among them -- are refused SMP_EAGAIN
 *    naming the limit and saying when the same request may pass; a call
 *    whose timeout is shorter gets the refusal (the put created nothing),
 *    one with time to spare is sent again by the transport and succeeds, so
 *    a publish of many objects through libweightclient goes through a
 *    limit far below its request count; tenant a, without a rate limit, is
 *    never refused;
 *  - in-flight bytes: a put request larger than tenant a's cap is refused
 *    SMP_ERANGE before its bytes are buffered, nothing is created, and the
 *    same connection then puts an ordinary revision;
 *  - revisions: tenant a may hold 2 live revisions: the third put is refused
 *    SMP_ENOSPC naming the count and the limit, with nothing created; after
 *    one revision is removed the third goes in; tenant b (its own limit of
 *    3) is unaffected;
 *  - connection limits: a connection that never authenticated runs its own
 *    bucket dry (SMP_EAUTH answers, then SMP_EAGAIN), while the admin's
 *    connection is never limited;
 * and every refusal shows in store_rpc_refused_total{reason,tenant} of
 * /metrics. The refusals of bad auth.limits keys and values are in
 * tests/unit/test_auth_config.c; here a master given one refuses to start,
 * naming the key. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "auth_fixture.h"
#include "weight_model.h"

#define WAIT_MS 15000

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A list request of the connected tenant: its status (0 or a refusal),
 * and on success the number of revisions listed in *n (may be NULL). */
static int try_list(wr_fixture *f, size_t *n)
{
    Wmrpc__ListRequest q = WMRPC__LIST_REQUEST__INIT;
    Wmrpc__ListResponse *lr = NULL;
    int rc = wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &q.base, &wmrpc__list_response__descriptor,
                     (ProtobufCMessage **)&lr);
    if (lr != NULL) {
        if (n != NULL) *n = lr->n_revisions;
        wmrpc__list_response__free_unpacked(lr, NULL);
    }
    return rc;
}

/* The revisions the connected tenant lists, asking again while its rate
 * limit refuses (up to WAIT_MS). */
static size_t listed(wr_fixture *f)
{
    size_t n = 0;
    int rc, waited = 0;
    while ((rc = try_list(f, &n)) == SMP_EAGAIN && waited < WAIT_MS) {
        sleep_ms(50);
        waited += 50;
    }
    if (rc != 0) fail_msg("list: %d %s", rc, f->last_error);
    return n;
}

static double refused(wr_fixture *f, const char *reason, const char *tenant)
{
    char series[160];
    snprintf(series, sizeof(series), "store_rpc_refused_total{reason=\"%s\",tenant=\"%s\"}", reason,
             tenant);
    return hx_metric(&f->m, series);
}

/* Tenant b's requests run its bucket dry and are refused SMP_EAGAIN with
 * when the same request may pass: a call whose timeout is shorter than that
 * gets the refusal (a put among them creating nothing), while a call of
 * this project's transport with time to spare waits and sends it again, so
 * a burst of them all succeed, each refusal counted. Tenant a has no rate
 * limit. */
static void test_auth_limits_rate_refused_then_recovered(void **state)
{
    wr_fixture *f = *state;
    af_start_with(f, "auth-limits-rate", "  limits:\n    tenants:\n      b: {rate: 4, burst: 2}\n");
    assert_int_equal(refused(f, "rate", "b"), 0);
    af_as(f, AF_B_WRITER);
    rpcc_set_timeout(f->rpc, 100); /* below the 250 ms a request of 4 a second takes */
    int rc = 0, sent = 0;
    while (rc == 0 && sent < 50) {
        rc = try_list(f, NULL);
        sent++;
    }
    assert_int_equal(rc, SMP_EAGAIN);
    assert_true(hx_says(f->last_error, "rate limit: tenant b may send 4 requests a second (burst 2"));
    /* a put while the bucket is dry: refused, nothing begun */
    Wmrpc__ImportBeginRequest req = WMRPC__IMPORT_BEGIN_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "", "ns", "throttled", 1);
    req.identity = &id;
    assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_BEGIN, &req.base, NULL, NULL),
                     SMP_EAGAIN);
    double before = refused(f, "rate", "b");
    assert_true(before >= 2);
    /* with the usual timeout the transport waits as told: 12 lists in a
     * row (6 times the burst) all succeed, and nothing was begun */
    rpcc_set_timeout(f->rpc, 10000);
    for (int i = 0; i < 12; i++) {
        size_t n = 99;
        assert_int_equal(try_list(f, &n), 0);
        assert_int_equal(n, 0);
    }
    assert_true(refused(f, "rate", "b") > before);
    /* tenant a is not limited: a burst of its requests all succeed */
    af_as(f, AF_A_WRITER);
    for (int i = 0; i < 20; i++) assert_int_equal(try_list(f, NULL), 0);
    assert_int_equal(refused(f, "rate", "a"), 0);
}

/* A put of many payload objects -- far more requests than the tenant's
 * burst -- through libweightclient succeeds under a rate limit (a user's
 * weightctl put failed at the first refusal and its import was dropped),
 * and reads back whole; its refusals are counted. */
static void test_auth_limits_rate_paces_a_put(void **state)
{
    wr_fixture *f = *state;
    af_start_with(f, "auth-limits-put", "  limits:\n    tenants:\n      b: {rate: 50, burst: 10}\n");
    af_as(f, AF_B_WRITER); /* sets WEIGHT_TOKEN, which the store presents */
    enum { N = 24 };
    static wx_tensor t[N];
    static char names[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "t%02d", i);
        t[i] = (wx_tensor){.name = names[i], .shape = {32, 32}};
    }
    wx_model_fill(t, N, 5);
    weight_store *s = NULL;
    weight_identity wid;
    char err[256];
    assert_int_equal(weight_store_open(f->m.socket, NULL, NULL, &s, err, sizeof(err)), 0);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_PAYLOAD_BYTES, 4096), 0);
    assert_int_equal(weight_identity_set(&wid, NULL, "llm", "paced", "v1", 1), 0);
    wx_put_model(s, &wid, t, N); /* one payload object per tensor */
    assert_true(refused(f, "rate", "b") >= 1);
    wx_get_and_compare(s, &wid, t, N);
    weight_store_close(s);
}

/* A put request larger than tenant a's in-flight cap is refused SMP_ERANGE
 * before the master buffers it, and nothing is begun; the same connection
 * then puts an ordinary revision. */
static void test_auth_limits_inflight_large_put_refused(void **state)
{
    wr_fixture *f = *state;
    af_start_with(f, "auth-limits-inflight",
                  "  limits:\n    tenant: {inflight_bytes: 65536}\n");
    af_as(f, AF_A_WRITER);
    size_t big_len = 200000;
    char *big = malloc(big_len + 1);
    assert_non_null(big);
    memset(big, 'x', big_len);
    big[big_len] = '\0';
    Wmrpc__ImportBeginRequest req = WMRPC__IMPORT_BEGIN_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "", "ns", big, 1);
    req.identity = &id;
    assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_BEGIN, &req.base, NULL, NULL),
                     SMP_ERANGE);
    free(big);
    assert_true(hx_says(f->last_error, "in-flight limit: a request of "));
    assert_true(hx_says(f->last_error, "is larger than the 65536 request bytes"));
    assert_int_equal(listed(f), 0);
    assert_int_equal(refused(f, "inflight", "a"), 1);
    /* the connection goes on, and a put of ordinary size is accepted */
    af_publish(f, "small");
    assert_int_equal(listed(f), 1);
    assert_int_equal(refused(f, "inflight", "a"), 1);
    assert_int_equal(refused(f, "inflight", "b"), 0);
}

/* Tenant a may hold 2 live revisions: the third put, and a PUT_FIRST
 * replacement, are refused SMP_ENOSPC with nothing begun; after one is
 * removed the third goes in. Tenant b has
 * its own limit (3) and is not affected by a's. */
static void test_auth_limits_revisions_per_tenant(void **state)
{
    wr_fixture *f = *state;
    af_start_with(f, "auth-limits-revisions",
                  "  limits:\n    tenant: {max_revisions: 3}\n"
                  "    tenants:\n      a: {max_revisions: 2}\n");
    af_as(f, AF_A_WRITER);
    uint64_t gen_one = af_publish(f, "one");
    af_publish(f, "two");
    Wmrpc__WeightIdentity third;
    wr_set_identity(&third, "", "ns", "three", 1);
    assert_int_equal(wr_begin(f, &third, WR_RS_HOT, 0.5, WR_MODE_MANUAL, NULL), SMP_ENOSPC);
    assert_true(hx_says(f->last_error, "revision limit: tenant a holds 2 live revisions"));
    assert_true(hx_says(f->last_error, "may hold 2 (auth.limits max_revisions)"));
    assert_int_equal(listed(f), 2);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, &third, 0, NULL),
                     WR_E_NOT_FOUND);
    assert_int_equal(refused(f, "revisions", "a"), 1);
    /* a PUT_FIRST replacement would hold base and target at once: refused
     * before its claim, the base untouched */
    Wmrpc__WeightIdentity one;
    wr_set_identity(&one, "", "ns", "one", 1);
    Wmrpc__UpsertBeginRequest ub = WMRPC__UPSERT_BEGIN_REQUEST__INIT;
    ub.base_identity = &one;
    ub.target_generation = 2;
    ub.request_id = "limits-1";
    ub.mode = 1; /* PUT_FIRST */
    ub.expected_metadata_generation = gen_one;
    assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_UPSERT_BEGIN, &ub.base, NULL, NULL),
                     SMP_ENOSPC);
    assert_true(hx_says(f->last_error, "revision limit: tenant a holds 2 live revisions"));
    assert_int_equal(refused(f, "revisions", "a"), 2);
    Wmrpc__MetadataResponse *md = wr_get_md(f, &one);
    assert_int_equal(md->metadata->availability, WR_AV_READY);
    assert_int_equal(md->metadata->metadata_generation, gen_one);
    wmrpc__metadata_response__free_unpacked(md, NULL);

    /* tenant b: three revisions of its own while a is full */
    af_as(f, AF_B_WRITER);
    af_publish(f, "one");
    af_publish(f, "two");
    af_publish(f, "three");
    assert_int_equal(listed(f), 3);
    assert_int_equal(refused(f, "revisions", "b"), 0);

    /* a removes one and the third goes in */
    af_as(f, AF_A_WRITER);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &one, gen_one, NULL), 0);
    af_publish(f, "three");
    assert_int_equal(refused(f, "revisions", "a"), 2);
}

/* The connection limits hold a connection that never authenticated: its
 * requests are refused SMP_EAUTH while its bucket lasts, then SMP_EAGAIN,
 * counted under tenant "". Admin connections (the embedded node, the
 * harness) are not limited. */
static void test_auth_limits_unauthenticated_connection_rate(void **state)
{
    wr_fixture *f = *state;
    af_start_with(f, "auth-limits-anon", "  limits:\n    connection: {rate: 1, burst: 2}\n");
    rpcc_conn *c = af_raw(f);
    rpcc_set_timeout(c, 100); /* the refusal itself, not the request sent again a second later */
    int status = 0, sent = 0;
    char *msg = NULL;
    do {
        free(msg);
        msg = NULL;
        assert_int_equal(rpcc_call(c, WR_SVC, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, NULL, 0, &status,
                                   NULL, NULL, &msg),
                         0);
        sent++;
    } while (status == SMP_EAUTH && sent < 50);
    assert_int_equal(status, SMP_EAGAIN);
    assert_true(sent >= 3);
    assert_true(hx_says(msg, "rate limit: this connection may send 1 requests a second (burst 2"));
    free(msg);
    rpcc_close(c);
    assert_true(refused(f, "rate", "") >= 1);
    /* the admin's connection is not limited: many requests in a row */
    for (int i = 0; i < 20; i++) assert_int_equal(try_list(f, NULL), 0);
}

/* A master given a bad auth.limits refuses to start and names the key. */
static void test_auth_limits_bad_config_refused_at_start(void **state)
{
    wr_fixture *f = *state;
    char yaml[4096];
    assert_int_equal(hx_init(&f->m, "auth-limits-bad", NULL), 0);
    af_auth_yaml("unused.token", "  limits:\n    tenant: {max_requests: 5}\n", yaml, sizeof(yaml));
    assert_int_equal(hx_reconfigure(&f->m, yaml), 0);
    assert_true(hx_run_to_exit(&f->m, WAIT_MS) > 0);
    assert_true(hx_log_contains(&f->m, "auth.limits.tenant.max_requests: unknown key"));
    af_auth_yaml("unused.token", "  limits:\n    tenants:\n      c: {rate: 5}\n", yaml, sizeof(yaml));
    assert_int_equal(hx_reconfigure(&f->m, yaml), 0);
    assert_true(hx_run_to_exit(&f->m, WAIT_MS) > 0);
    assert_true(hx_log_contains(&f->m, "auth.limits.tenants.c: no token of auth.tokens (nor entry of auth.certificates) has tenant"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_auth_limits_rate_paces_a_put, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_auth_limits_rate_refused_then_recovered, wr_setup,
                                        wr_teardown),
        cmocka_unit_test_setup_teardown(test_auth_limits_inflight_large_put_refused, wr_setup,
                                        wr_teardown),
        cmocka_unit_test_setup_teardown(test_auth_limits_revisions_per_tenant, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_auth_limits_unauthenticated_connection_rate, wr_setup,
                                        wr_teardown),
        cmocka_unit_test_setup_teardown(test_auth_limits_bad_config_refused_at_start, wr_setup,
                                        wr_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
