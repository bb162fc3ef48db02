/* test_ha_graceful_stop.c -- a rolling restart of the leader (SIGTERM)
 * under a put load is as transparent as no restart at all.
 *
 * Debian's etcd (one member, etcd_fixture), three store_master processes
 * in HA mode with the real weight_mgmt.so and one store_node given the list
 * of the three (ha_cluster_fixture.c). Two client threads, each with its own
 * libweightclient store on the same list, publish revisions without pause
 * (four 4 KiB payload objects and a manifest each: put start and put end
 * calls, which are not sent twice, most of the time), and a third puts
 * plain 2 KiB objects through kv_client, which never puts again by itself
 * (without the leader's drain, each SIGTERM failed one or two of its puts
 * with "connection closed by the server"). The leader is stopped
 * with SIGTERM -- and, once another leads and the old one is back as a
 * standby, the new leader too -- while they put. A leader that closed its
 * connections with put ends in them (their answer lost, the import failed
 * and left IMPORTING) failed this test; one that lets the calls it took end,
 * refuses new ones SMP_ENOTLEADER and then resigns does not: every put
 * returns success, every revision is READY and reads back byte for byte
 * (SHA-256 per tensor), none is left IMPORTING, every plain object reads
 * back byte for byte, and each stopped leader
 * exits 0 saying it drained with every call answered. A writer's batch of
 * put starts cut in two by the drain (one started before it, the next
 * refused) once held the drain to its 5 s cap, and the writer, moved to the
 * next leader, wrote its first put's range, which that leader had given to
 * another object: a plain object or a payload lost its bytes (CI). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ha_cluster_fixture.h"
#include "kv_client.h"
#include "harness.h"
#include "weight_check.h"
#include "weight_model.h"
#include "weightclient.h"

#define WAIT_MS 20000
#define N_LOADERS 2
#define N_TENSORS 4
#define MAX_PUTS 2000 /* per loader */
#define BEFORE 10     /* puts each loader returned before a signal */
#define AFTER 10      /* and after the next leader took over */
#define ROUNDS 2      /* leaders stopped */
#define KV_BYTES 2048 /* a plain object of the kv loader */

/* One client thread publishing llm/l<k>/r<i>@1, i = 0, 1, ... -- or, the
 * last one, plain objects kv/o<i> through kv_client (no retry of its own). */
typedef struct loader {
    int k;
    weight_store *s;
    kvc *kv;
    pthread_t th;
    atomic_int stop;
    atomic_int done;          /* puts returned */
    int failures;
    char first_failure[700];  /* the first failed put and why */
} loader;

typedef struct fixture {
    hc_cluster hc;
    hx_master view;           /* master 0 with the list of all three */
    loader l[N_LOADERS + 1];
    int started;              /* loader threads running */
} fixture;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static weight_identity ident(int k, int i)
{
    weight_identity id;
    char ns[16], res[16];
    snprintf(ns, sizeof ns, "l%d", k);
    snprintf(res, sizeof res, "r%d", i);
    weight_identity_set(&id, "acme", ns, res, "main", 1);
    return id;
}

/* The tensors of loader k's revision i (a pattern of both). */
static void model_of(int k, int i, wx_tensor *t)
{
    static const char *names[N_TENSORS] = {"a.weight", "b.weight", "c.weight", "d.weight"};
    for (int j = 0; j < N_TENSORS; j++) {
        t[j].name = names[j];
        t[j].shape[0] = 16;
        t[j].shape[1] = 64;
    }
    wx_model_fill(t, N_TENSORS, (unsigned)(k * 100000 + i + 1));
}

/* Publish revisions until told to stop; no cmocka call here (not thread
 * safe): failures are counted and the first one kept. */
static void *loader_main(void *arg)
{
    loader *l = arg;
    wx_tensor t[N_TENSORS];
    weight_policy pol = {WEIGHT_RES_HOT, 0.0, WEIGHT_MODE_MANUAL};
    for (int i = 0; i < MAX_PUTS && !atomic_load(&l->stop); i++) {
        weight_identity id = ident(l->k, i);
        weight_writer *w = NULL;
        weight_metadata md;
        const char *step = "weight_put_begin";
        model_of(l->k, i, t);
        int rc = weight_put_begin(l->s, &id, &pol, &w);
        for (int j = 0; rc == 0 && j < N_TENSORS; j++) {
            step = "weight_writer_add_tensor";
            rc = weight_writer_add_tensor(w, t[j].name, "F32", 2, t[j].shape, t[j].data);
        }
        if (rc == 0) {
            step = "weight_writer_commit";
            rc = weight_writer_commit(w, &md);
            w = NULL;
            if (rc == 0 && md.availability != WEIGHT_READY) rc = -1000;
        }
        if (w != NULL) weight_writer_abort(w);
        if (rc != 0 && l->failures++ == 0)
            snprintf(l->first_failure, sizeof l->first_failure, "l%d/r%d: %s -> %s: %s", l->k, i,
                     step, rc == -1000 ? "not READY" : weight_error_name(rc),
                     weight_store_last_error(l->s));
        atomic_fetch_add(&l->done, 1);
    }
    return NULL;
}

static void kv_bytes(int i, uint8_t *b)
{
    for (size_t j = 0; j < KV_BYTES; j++) b[j] = (uint8_t)(j * 13 + (size_t)i * 7 + 1);
}

/* Put plain objects until told to stop (as loader_main). */
static void *kv_loader_main(void *arg)
{
    loader *l = arg;
    uint8_t b[KV_BYTES];
    char key[64];
    for (int i = 0; i < MAX_PUTS && !atomic_load(&l->stop); i++) {
        snprintf(key, sizeof key, "kv/o%d", i);
        kv_bytes(i, b);
        int rc = kvc_put_bytes(l->kv, key, b, sizeof b, SMP_DATA_KV, NULL, 0, NULL);
        if (rc != 0 && l->failures++ == 0)
            snprintf(l->first_failure, sizeof l->first_failure, "put %s -> %s: %s", key,
                     smp_strerror(rc), kvc_error(l->kv));
        atomic_fetch_add(&l->done, 1);
    }
    return NULL;
}

static int write_config(fixture *f, int i)
{
    char extra[1024];
    snprintf(extra, sizeof(extra),
             "cluster:\n  weight_management_oplog_capability_confirmed: true\n"
             "  weight_lineage_oplog_capability_confirmed: true\n"
             "  default_weight_preferred_residency: hot\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n",
             BUILD_DIR);
    return hc_configure(&f->hc, i, extra);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (f == NULL) return -1;
    *state = f;
    if (hc_init(&f->hc, "ha-graceful-stop", 1) < 0 || hc_list_view(&f->hc, &f->view) < 0) {
        hc_cleanup(&f->hc);
        free(f);
        *state = NULL;
        return -1;
    }
    return 0;
}

static void stop_loaders(fixture *f)
{
    if (!f->started) return;
    for (int k = 0; k <= N_LOADERS; k++) atomic_store(&f->l[k].stop, 1);
    for (int k = 0; k <= N_LOADERS; k++) pthread_join(f->l[k].th, NULL);
    f->started = 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f == NULL) return 0;
    stop_loaders(f);
    for (int k = 0; k < N_LOADERS; k++) weight_store_close(f->l[k].s);
    kvc_close(f->l[N_LOADERS].kv);
    hc_cleanup(&f->hc);
    free(f);
    return 0;
}

/* Wait until every loader returned at least `want` puts (fails the test
 * after WAIT_MS, naming how far each got). */
static void wait_puts(fixture *f, const int *want)
{
    long long until = hx_now_ms() + WAIT_MS;
    for (;;) {
        int behind = 0;
        for (int k = 0; k <= N_LOADERS; k++) behind |= atomic_load(&f->l[k].done) < want[k];
        if (!behind) return;
        if (hx_now_ms() > until)
            fail_msg("the loaders returned %d, %d and %d puts within %d ms, not %d, %d and %d",
                     atomic_load(&f->l[0].done), atomic_load(&f->l[1].done),
                     atomic_load(&f->l[2].done), WAIT_MS, want[0], want[1], want[2]);
        sleep_ms(5);
    }
}

/* 1 when master i's log says it drained before it stopped, with every call
 * answered -- not held to the drain's cap by a put that never ended there
 * (a writer whose batch's next put start was refused, and whose earlier
 * puts were then left to the old leader, failed this in 1 run of 8 beside
 * the suite's other tests). */
static int log_says_drained(const hx_master *m)
{
    FILE *fp = fopen(m->log, "r");
    char line[1024];
    int found = 0;
    if (fp == NULL) return 0;
    while (fgets(line, sizeof line, fp) != NULL)
        if (strstr(line, "store_master: drained") != NULL ||
            strstr(line, "store_master: leader stopping") != NULL) {
            found = strstr(line, "drained in ") != NULL;
            print_message("m: %s", line);
        }
    fclose(fp);
    return found;
}

static void test_sigterm_of_the_leader_fails_no_put(void **state)
{
    fixture *f = *state;
    for (int i = 0; i < HC_MASTERS; i++) {
        assert_int_equal(write_config(f, i), 0);
        if (hx_start(&f->hc.m[i], WAIT_MS) < 0) fail_msg("master %d did not start", i);
    }
    int leader = hc_wait_leader(&f->hc, -1, WAIT_MS);
    if (leader < 0) fail_msg("no single leader within %d ms", WAIT_MS);
    assert_int_equal(hc_node_start(&f->hc, "n1", 32u << 20), 0);
    assert_int_equal(hc_wait_node(&f->hc, leader, WAIT_MS), 0);

    for (int k = 0; k < N_LOADERS; k++) {
        f->l[k].k = k;
        f->l[k].s = wx_open_store(&f->view);
    }
    f->l[N_LOADERS].k = N_LOADERS;
    if ((f->l[N_LOADERS].kv = hx_client(&f->view)) == NULL) fail_msg("no kv client on the list");
    for (int k = 0; k <= N_LOADERS; k++)
        assert_int_equal(pthread_create(&f->l[k].th, NULL, k < N_LOADERS ? loader_main
                                                                        : kv_loader_main,
                                        &f->l[k]), 0);
    f->started = 1;

    int want[N_LOADERS + 1] = {BEFORE, BEFORE, BEFORE}, drained = 0;
    for (int round = 0; round < ROUNDS; round++) {
        wait_puts(f, want);
        /* SIGTERM while both loaders put, and wait for the exit. */
        int status = hx_stop(&f->hc.m[leader]);
        if (status != 0) fail_msg("leader m%d exited %d after SIGTERM", leader, status);
        drained += log_says_drained(&f->hc.m[leader]);
        int next = hc_wait_leader(&f->hc, leader, WAIT_MS);
        if (next < 0) fail_msg("no new leader within %d ms after m%d stopped", WAIT_MS, leader);
        assert_int_equal(hc_wait_node(&f->hc, next, WAIT_MS), 0);
        /* The old leader comes back (a rolling restart) as a standby. */
        if (hx_start(&f->hc.m[leader], WAIT_MS) < 0) fail_msg("m%d did not start again", leader);
        assert_int_equal(hc_wait_role(&f->hc, leader, "standby", WAIT_MS), 0);
        for (int k = 0; k <= N_LOADERS; k++) want[k] = atomic_load(&f->l[k].done) + AFTER;
        wait_puts(f, want);
        leader = next;
    }
    stop_loaders(f);
    print_message("puts returned: %d, %d and %d\n", atomic_load(&f->l[0].done),
                  atomic_load(&f->l[1].done), atomic_load(&f->l[2].done));

    for (int k = 0; k <= N_LOADERS; k++)
        if (f->l[k].failures != 0)
            fail_msg("loader %d: %d of %d puts failed; the first: %s", k, f->l[k].failures,
                     atomic_load(&f->l[k].done), f->l[k].first_failure);
    assert_int_equal(drained, ROUNDS); /* each stopped leader said so */

    /* Every revision READY and exactly what was put, read from a new store. */
    weight_store *s = wx_open_store(&f->view);
    wx_tensor t[N_TENSORS];
    for (int k = 0; k < N_LOADERS; k++) {
        int n = atomic_load(&f->l[k].done);
        for (int i = 0; i < n; i++) {
            weight_identity id = ident(k, i);
            weight_metadata md;
            CHECK(s, weight_get_metadata(s, &id, &md, NULL));
            if (md.availability != WEIGHT_READY)
                fail_msg("l%d/r%d is %s, not READY", k, i, weight_availability_name(md.availability));
            model_of(k, i, t);
            wx_get_and_compare(s, &id, t, N_TENSORS);
        }
        /* Nothing left IMPORTING, and nothing beyond what was put. */
        char ns[16], token[512] = "", next[512];
        snprintf(ns, sizeof ns, "l%d", k);
        weight_list_query q = {.namespace_id = ns, .limit = 100,
                               .include_deleted = WEIGHT_LIST_DELETED | WEIGHT_LIST_IMPORTING};
        int listed = 0;
        do {
            weight_metadata *page = NULL;
            size_t np = 0;
            CHECK(s, weight_list(s, &q, token, &page, &np, next, sizeof next));
            for (size_t j = 0; j < np; j++)
                if (page[j].availability != WEIGHT_READY)
                    fail_msg("%s/%s is %s after the restarts", page[j].identity.namespace_id,
                             page[j].identity.resource_id,
                             weight_availability_name(page[j].availability));
            listed += (int)np;
            weight_list_free(page);
            memcpy(token, next, sizeof token);
        } while (token[0] != '\0');
        assert_int_equal(listed, n);
    }
    weight_store_close(s);

    /* Every plain object there, byte for byte. */
    kvc *kv = hx_client(&f->view);
    assert_non_null(kv);
    uint8_t want_b[KV_BYTES], got[KV_BYTES];
    for (int i = 0; i < atomic_load(&f->l[N_LOADERS].done); i++) {
        char key[64];
        uint64_t len = 0;
        snprintf(key, sizeof key, "kv/o%d", i);
        kv_bytes(i, want_b);
        int rc = kvc_get_into(kv, key, got, sizeof got, &len, 1);
        if (rc != 0) fail_msg("get %s -> %s: %s", key, smp_strerror(rc), kvc_error(kv));
        assert_int_equal(len, KV_BYTES);
        assert_memory_equal(got, want_b, KV_BYTES);
    }
    kvc_close(kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sigterm_of_the_leader_fails_no_put, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
