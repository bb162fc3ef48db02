/* test_restart_ride.c -- a client of a master alone waits out the master's
 * restart: a real store_master (the weight plugin, its embedded node)
 * stopped with SIGTERM and started again on the same data dir and socket.
 *
 * test_loads_and_publishes_ride_a_restart: libweightclient, which awaits
 * restarts. A reader calls weight_get_metadata and weight_is_exist of a
 * published revision without a pause, on its own store, while the master
 * drains, is down for half a second and serves again; a publisher starts a
 * new revision once the drain began, and a lookup goes on a connection of
 * the transport without a resend flag (a lease renewal's kind). No call
 * fails: the master's drain
 * refused some of them (its log counts them), the client sent those again
 * once a master was back, and the new revision is READY with its bytes.
 *
 * test_a_mutation_after_an_idle_restart_goes_at_once: a store idle across
 * a restart updates a policy (a call that is not sent twice) at once,
 * without an error.
 *
 * test_a_master_that_stays_down_fails_the_call_naming_both: the object
 * client with await_restart and a 3 s timeout. A put sent while the master
 * drains, which then stays down, fails when the call's time is spent,
 * saying that no master answered at the endpoint (after several attempts)
 * after it said it was stopping; a query after it fails the same way; after
 * a restart the refused put is not there. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "harness.h"
#include "host_rpc.pb-c.h"
#include "rpc_client.h"
#include "weight_check.h"
#include "weight_model.h"
#include "weightclient.h"

static wx_tensor model[] = {
    {"embed.weight", {32, 32}, {0}},
    {"layers.0.w", {16, 64}, {0}},
};
static wx_tensor model2[] = {
    {"embed.weight", {32, 32}, {0}},
    {"layers.0.w", {16, 64}, {0}},
};
#define N_MODEL (sizeof(model) / sizeof(model[0]))

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* K of the master's last "drained in N ms, every call answered, K new
 * calls refused" line; -1 without one. */
static long refused_in_drain(const hx_master *m)
{
    char line[512];
    long k = -1;
    FILE *fp = fopen(m->log, "r");
    if (fp == NULL) return -1;
    while (fgets(line, sizeof(line), fp) != NULL) {
        const char *at = strstr(line, "every call answered, ");
        if (at != NULL && strstr(at, " refused") != NULL)
            k = atol(at + strlen("every call answered, "));
    }
    fclose(fp);
    return k;
}

typedef struct reader {
    weight_store *s;
    weight_identity id;
    volatile int stop;
    long ok, failed;
    char first_error[512];
} reader;

static void *reader_main(void *arg)
{
    reader *r = arg;
    while (!r->stop) {
        weight_metadata md;
        int exists = 0;
        int rc = weight_get_metadata(r->s, &r->id, &md, NULL);
        if (rc == WEIGHT_OK) rc = weight_is_exist(r->s, &r->id, &exists);
        if (rc == WEIGHT_OK && exists == 1) {
            r->ok++;
        } else {
            if (r->failed++ == 0)
                snprintf(r->first_error, sizeof r->first_error, "%s (exists %d): %s",
                         weight_error_name(rc), exists, weight_store_last_error(r->s));
        }
    }
    return NULL;
}

/* One object lookup on an await_restart connection of the transport,
 * with no resend flag (as a lease renewal goes): once its master said it is
 * stopping, the loss of the stream is no doubt about the request either. */
typedef struct raw_call {
    rpcc_conn *c;
    int rc, status;
    char error[512];
} raw_call;

static void *raw_call_main(void *arg)
{
    raw_call *r = arg;
    KeyRequest req = KEY_REQUEST__INIT;
    ExistsResponse *resp = NULL;
    char *msg = NULL;
    req.key = "kv/not-there";
    r->rc = rpcc_call_msg(r->c, HOST_SERVICE__HOST_SERVICE_OBJECTS, OBJECTS_METHOD__OBJ_EXISTS,
                          &req.base, &exists_response__descriptor, (ProtobufCMessage **)&resp,
                          &r->status, NULL, NULL, &msg);
    snprintf(r->error, sizeof r->error, "%s", r->rc < 0 ? rpcc_last_error(r->c) : msg ? msg : "");
    if (resp != NULL) exists_response__free_unpacked(resp, NULL);
    free(msg);
    return NULL;
}

typedef struct publisher {
    weight_store *s;
    weight_identity id;
    int rc;
    char error[512];
} publisher;

static void *publisher_main(void *arg)
{
    publisher *p = arg;
    weight_writer *w = NULL;
    weight_policy pol = {WEIGHT_RES_HOT, 0.0, WEIGHT_MODE_MANUAL};
    weight_metadata md;
    p->rc = weight_put_begin(p->s, &p->id, &pol, &w);
    for (size_t i = 0; p->rc == WEIGHT_OK && i < N_MODEL; i++)
        p->rc = weight_writer_add_tensor(w, model2[i].name, "F32", 2, model2[i].shape,
                                         model2[i].data);
    if (p->rc == WEIGHT_OK)
        p->rc = weight_writer_commit(w, &md);
    else if (w != NULL)
        weight_writer_abort(w);
    if (p->rc != WEIGHT_OK)
        snprintf(p->error, sizeof p->error, "%s: %s", weight_error_name(p->rc),
                 weight_store_last_error(p->s));
    return NULL;
}

static void test_loads_and_publishes_ride_a_restart(void **state)
{
    (void)state;
    wx_published *f = wx_published_new("restart-ride", NULL, NULL, model, N_MODEL, 41);
    assert_non_null(f);
    wx_model_fill(model2, N_MODEL, 42);
    reader r = {.s = wx_open_store(&f->m), .id = f->id};
    publisher p = {.s = wx_open_store(&f->m), .id = f->id, .rc = -1};
    snprintf(p.id.revision, sizeof p.id.revision, "v2");
    raw_call raw = {.rc = -1};
    rpcc_options opt = {.timeout_ms = 20000, .await_restart = 1};
    char err[256];
    assert_int_equal(rpcc_connect(f->m.socket, &opt, &raw.c, err, sizeof err), 0);
    pthread_t rt, pt, wt;
    assert_int_equal(pthread_create(&rt, NULL, reader_main, &r), 0);
    while (r.ok < 20 && r.failed == 0) sleep_ms(5);

    assert_int_equal(kill(f->m.pid, SIGTERM), 0);
    assert_true(hx_wait_log(&f->m, "stopping: new calls are refused", 20000));
    assert_int_equal(pthread_create(&pt, NULL, publisher_main, &p), 0);
    assert_int_equal(pthread_create(&wt, NULL, raw_call_main, &raw), 0);
    assert_int_equal(hx_wait_exit(&f->m, 20000), 0);
    /* the reader's calls were refused while it drained: not one was lost */
    assert_true(refused_in_drain(&f->m) >= 1);
    long ok_before = r.ok;
    sleep_ms(500); /* down: nothing listens */
    assert_int_equal(hx_start(&f->m, 20000), 0);
    while (r.ok < ok_before + 20 && r.failed == 0) sleep_ms(5);
    r.stop = 1;
    assert_int_equal(pthread_join(rt, NULL), 0);
    assert_int_equal(pthread_join(pt, NULL), 0);
    assert_int_equal(pthread_join(wt, NULL), 0);
    rpcc_close(raw.c);
    if (r.failed != 0) fail_msg("%ld reads failed, the first: %s", r.failed, r.first_error);
    if (raw.rc != 0 || raw.status != 0)
        fail_msg("the lookup without a resend flag: rc %d status %d: %s", raw.rc, raw.status,
                 raw.error);
    if (p.rc != WEIGHT_OK) fail_msg("the publish across the restart failed: %s", p.error);

    /* the revision published across the restart is there, byte for byte */
    weight_metadata md = wx_wait_state(f->s, &p.id, WEIGHT_READY, -1);
    assert_int_equal(md.availability, WEIGHT_READY);
    wx_get_and_compare(f->s, &p.id, model2, N_MODEL);
    weight_store_close(r.s);
    weight_store_close(p.s);
    wx_published_free(f);
}

/* A mutation is the first call of an idle store after its master restarted:
 * the connection it goes on was closed by the old master, which the
 * transport sees before the request leaves, so it goes to the new master
 * at once instead of failing as a request whose fate is unknown. */
static void test_a_mutation_after_an_idle_restart_goes_at_once(void **state)
{
    (void)state;
    wx_published *f = wx_published_new("restart-idle", NULL, NULL, model, N_MODEL, 43);
    assert_non_null(f);
    weight_metadata md;
    CHECK(f->s, weight_get_metadata(f->s, &f->id, &md, NULL));
    assert_int_equal(kill(f->m.pid, SIGTERM), 0);
    assert_int_equal(hx_wait_exit(&f->m, 20000), 0);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    weight_policy pol = {WEIGHT_RES_HOT, 0.0, WEIGHT_MODE_AUTO};
    weight_metadata after;
    CHECK(f->s, weight_update_policy(f->s, &f->id, &pol, md.metadata_generation, &after));
    assert_int_equal(after.policy.mode, WEIGHT_MODE_AUTO);
    assert_true(after.metadata_generation > md.metadata_generation);
    wx_published_free(f);
}

/* The call's error names the endpoint's silence, over more than one
 * attempt ("(N attempts in M ms)"), and, when said, the master's word that
 * it was stopping. */
static void assert_stayed_down(const kvc *c, const hx_master *m, int said_stopping)
{
    const char *e = kvc_error(c);
    char at[400], said[400];
    snprintf(at, sizeof at, "no master answered at %s (", m->socket);
    snprintf(said, sizeof said, "after: %s said it is stopping", m->socket);
    if (strstr(e, at) == NULL || strstr(e, " attempts in ") == NULL ||
        (said_stopping && strstr(e, said) == NULL))
        fail_msg("unexpected error: %s", e);
}

static void test_a_master_that_stays_down_fails_the_call_naming_both(void **state)
{
    (void)state;
    hx_master m;
    char err[256];
    int exists = -1;
    assert_int_equal(hx_init(&m, "restart-down", NULL), 0);
    assert_int_equal(hx_start(&m, 20000), 0);
    rpcc_options opt = {.timeout_ms = 3000, .await_restart = 1};
    kvc *c = NULL, *q = NULL;
    assert_int_equal(kvc_connect_opts(m.socket, &opt, NULL, &c, err, sizeof err), 0);
    assert_int_equal(kvc_connect_opts(m.socket, &opt, NULL, &q, err, sizeof err), 0);
    assert_int_equal(kvc_put_bytes(c, "kv/before", "b", 1, SMP_DATA_KV, NULL, 0, NULL), 0);
    /* an open put holds the drain, so both calls below meet it */
    uint8_t sha[32];
    hx_sha256("", 0, sha);
    assert_int_equal(kvc_put_start(c, "kv/open", 0, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(kill(m.pid, SIGTERM), 0);
    assert_true(hx_wait_log(&m, "stopping: new calls are refused", 20000));
    assert_int_equal(kvc_put_end(c, "kv/open", sha, NULL), 0);

    int rc = kvc_put_bytes(q, "kv/never", "n", 1, SMP_DATA_KV, NULL, 0, NULL);
    assert_true(rc < 0);
    assert_stayed_down(q, &m, 1);
    /* the next call finds the master still down (no new word from it) */
    rc = kvc_exists(q, "kv/before", &exists);
    assert_true(rc < 0);
    assert_stayed_down(q, &m, 0);
    assert_int_equal(hx_wait_exit(&m, 20000), 0);
    kvc_close(c);
    kvc_close(q);

    /* nothing of the refused put was applied */
    assert_int_equal(hx_start(&m, 20000), 0);
    c = hx_client(&m);
    assert_non_null(c);
    assert_int_equal(kvc_exists(c, "kv/never", &exists), 0);
    assert_int_equal(exists, 0);
    assert_int_equal(kvc_exists(c, "kv/open", &exists), 0);
    assert_int_equal(exists, 1);
    kvc_close(c);
    assert_int_equal(hx_stop(&m), 0);
    hx_cleanup(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loads_and_publishes_ride_a_restart),
        cmocka_unit_test(test_a_master_that_stays_down_fails_the_call_naming_both),
        cmocka_unit_test(test_a_mutation_after_an_idle_restart_goes_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
