/* test_weight_upsert.c -- weight_upsert end to end on a real master.
 *
 * libweightclient and weightctl against a master running the real
 * weight_mgmt.so (reconcile tick 50 ms). Readers hold revision leases on the
 * base through raw LEASE_ACQUIRE calls. Pinned here: PUT_FIRST keeps the
 * base readable until the target is READY, then refuses new base leases and
 * renewals, waits for the existing ones and deletes the base; DELETE_FIRST
 * is BUSY while a lease exists and imports the target only after the base
 * is gone; a target failure under PUT_FIRST aborts the claim and leaves the
 * base READY; a retry after a lost reply gets the same claim; a competing
 * request and a generation not above the watermark are refused; in HA mode
 * (one master on a real etcd) upsert fails closed until weight_lineage_oplog_capability_confirmed while
 * the other weight calls work; SIGKILL of the master in every phase of both
 * modes (twice after a snapshot, so the claim also comes back from the
 * weight_metadata section), then a restart, resumes the same claim and ends
 * with exactly one successor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "etcd_fixture.h"
#include "harness.h"
#include "kv_client.h"
#include "rpc_client.h"
#include "weight_rpc.pb-c.h"
#include "weight_rpc.h"
#include "weight_check.h"
#include "weightclient.h"

#define SVC 16
#define SMP_EGATE_CODE -12

typedef struct fixture {
    hx_master m;
    weight_store *s;
    rpcc_conn *rpc;
    etcd_fixture etcd;   /* HA tests: the master's etcd */
    int ha;
    unsigned tick_ms;    /* the plugin's tick_period_ms (0: 50) */
} fixture;

/* Write the master's config: the HOT default, the plugin with a 50 ms tick
 * (or f->tick_ms),
 * `cluster` lines (may be NULL) and, for an HA fixture, the master as the
 * one member of an HA cluster on the fixture's etcd. */
static int write_cfg(fixture *f, const char *cluster)
{
    char cfg[2048], ha[1024] = "";
    if (f->ha && hx_ha_yaml(&f->m, "m1", etcd_fixture_endpoints(&f->etcd), "/wm-upsert/", NULL, 0,
                            ha, sizeof ha) < 0)
        return -1;
    snprintf(cfg, sizeof cfg,
             "cluster:\n  default_weight_preferred_residency: hot\n%s%s"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    config:\n      tick_period_ms: %u\n",
             cluster ? cluster : "", ha, BUILD_DIR, f->tick_ms ? f->tick_ms : 50);
    return hx_reconfigure(&f->m, cfg);
}

/* Stop and remove what the fixture started (cmocka runs no teardown after
 * a setup that failed, so setup_cfg calls this itself then). */
static void fixture_free(fixture *f)
{
    weight_store_close(f->s);
    rpcc_close(f->rpc);
    hx_cleanup(&f->m);
    if (f->ha) etcd_fixture_cleanup(&f->etcd);
    free(f);
}

static int setup_cfg(void **state, const char *name, const char *cluster, int ha, unsigned tick_ms)
{
    fixture *f = calloc(1, sizeof *f);
    if (f == NULL) return -1;
    f->tick_ms = tick_ms;
    if (hx_init(&f->m, name, NULL) < 0) {
        free(f);
        return -1;
    }
    if (ha && etcd_fixture_start(&f->etcd, name, 1, 20000) < 0) goto fail;
    f->ha = ha;
    if (write_cfg(f, cluster) < 0 || hx_start(&f->m, 20000) < 0) goto fail;
    *state = f;
    return 0;
fail:
    fixture_free(f);
    return -1;
}

static int setup(void **state)
{
    return setup_cfg(state, "weight-upsert", NULL, 0, 0);
}

/* The plugin's tick every minute: what runs sooner is brought by tick_soon. */
static int setup_slow_tick(void **state)
{
    return setup_cfg(state, "weight-upsert-slow", NULL, 0, 60000);
}

/* One master of an HA cluster on a real etcd, the weight gate confirmed
 * and the lineage gate not. */
static int setup_ha(void **state)
{
    return setup_cfg(state, "weight-upsert-ha",
                     "  weight_management_oplog_capability_confirmed: true\n", 1, 0);
}

static void close_clients(fixture *f)
{
    weight_store_close(f->s);
    f->s = NULL;
    rpcc_close(f->rpc);
    f->rpc = NULL;
}

static int teardown(void **state)
{
    fixture_free(*state);
    return 0;
}

static void open_clients(fixture *f)
{
    char err[256];
    int rc = weight_store_open(f->m.socket, "acme", NULL, &f->s, err, sizeof err);
    if (rc != 0) fprintf(stderr, "weight_store_open: %s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(rpcc_connect(f->m.socket, NULL, &f->rpc, err, sizeof err), 0);
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* -- the model: two small tensors whose bytes depend on the generation ------ */

static uint8_t g_data[2][4096];

static void fill(uint64_t gen)
{
    for (int t = 0; t < 2; t++)
        for (size_t i = 0; i < sizeof g_data[t]; i++) g_data[t][i] = (uint8_t)(i * 7 + gen * 31 + t);
}

static void add_model(weight_store *s, weight_writer *w, uint64_t gen)
{
    static const uint64_t shape[2] = {32, 64};
    fill(gen);
    CHECK(s, weight_writer_add_tensor(w, "a.weight", "BF16", 2, shape, g_data[0]));
    CHECK(s, weight_writer_add_tensor(w, "b.weight", "BF16", 2, shape, g_data[1]));
}

static weight_identity ident(const char *res, uint64_t gen)
{
    weight_identity id;
    assert_int_equal(weight_identity_set(&id, "acme", "llm", res, "main", gen), 0);
    return id;
}

static void put(fixture *f, const char *res, uint64_t gen)
{
    weight_store *s = f->s;
    weight_writer *w = NULL;
    weight_identity id = ident(res, gen);
    CHECK(s, weight_put_begin(s, &id, NULL, &w));
    add_model(s, w, gen);
    CHECK(s, weight_writer_commit(w, NULL));
}

/* The metadata generation of res@gen now: the fence a mutation passes. */
static uint64_t fence_of(fixture *f, const char *res, uint64_t gen)
{
    weight_metadata md;
    weight_identity id = ident(res, gen);
    assert_int_equal(weight_get_metadata(f->s, &id, &md, NULL), 0);
    return md.metadata_generation;
}

static int availability(fixture *f, const char *res, uint64_t gen)
{
    weight_metadata md;
    weight_identity id = ident(res, gen);
    int rc = weight_get_metadata(f->s, &id, &md, NULL);
    return rc < 0 ? rc : (int)md.availability;
}

/* The lineage's claim now. */
static weight_upsert_claim status(fixture *f, const char *res)
{
    weight_upsert_claim c;
    weight_identity id = ident(res, 1);
    weight_store *s = f->s;
    CHECK(s, weight_upsert_status(s, &id, &c));
    return c;
}

/* Poll until the claim reaches phase (or a final one); returns the last. */
static weight_upsert_claim wait_phase(fixture *f, const char *res, int phase, int timeout_ms)
{
    weight_upsert_claim c;
    for (int waited = 0;; waited += 20) {
        c = status(f, res);
        if (c.phase == phase || c.phase == WEIGHT_PHASE_COMMITTED || c.phase == WEIGHT_PHASE_ABORTED)
            return c;
        if (waited >= timeout_ms) return c;
        sleep_ms(20);
    }
}

/* -- raw leases (a reader holding the base) ---------------------------------- */

static int lease_call(fixture *f, uint32_t method, const char *res, uint64_t gen, uint64_t lease_id,
                      uint64_t *out_id)
{
    Wmrpc__LeaseRequest req = WMRPC__LEASE_REQUEST__INIT;
    Wmrpc__WeightIdentity wid = WMRPC__WEIGHT_IDENTITY__INIT;
    wid.tenant = "acme";
    wid.namespace_id = "llm";
    wid.resource_id = (char *)res;
    wid.revision = "main";
    wid.generation = gen;
    req.identity = &wid;
    req.lease_id = lease_id;
    req.ttl_ms = 60000;
    size_t n = protobuf_c_message_get_packed_size(&req.base);
    uint8_t buf[2048], *body = NULL;
    size_t blen = 0;
    int st = -1;
    char *msg = NULL;
    assert_true(n <= sizeof buf);
    protobuf_c_message_pack(&req.base, buf);
    assert_int_equal(rpcc_call(f->rpc, SVC, method, buf, n, &st, &body, &blen, &msg), 0);
    free(msg);
    if (st == 0 && out_id != NULL) {
        Wmrpc__LeaseResponse *r = wmrpc__lease_response__unpack(NULL, blen, body);
        assert_non_null(r);
        *out_id = r->lease ? r->lease->id : 0;
        wmrpc__lease_response__free_unpacked(r, NULL);
    }
    free(body);
    return st;
}

static uint64_t lease_acquire(fixture *f, const char *res, uint64_t gen)
{
    uint64_t id = 0;
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, res, gen, 0, &id), 0);
    assert_true(id > 0);
    return id;
}

/* Exactly one live successor: the base is a DELETED tombstone, the target
 * READY, no other generation of the lineage exists, the claim COMMITTED
 * with the target's generation as watermark. */
static void assert_one_successor(fixture *f, const char *res, uint64_t base, uint64_t target)
{
    weight_list_query q = {"llm", res, 0, 1};
    weight_metadata *list = NULL;
    size_t n = 0;
    char next[256];
    weight_store *s = f->s;
    CHECK(s, weight_list(s, &q, "", &list, &n, next, sizeof next));
    int live = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t g = list[i].identity.generation;
        assert_true(g == base || g == target);
        if (list[i].availability == WEIGHT_READY) {
            live++;
            assert_int_equal(g, target);
        }
    }
    weight_list_free(list);
    assert_int_equal(live, 1);
    assert_int_equal(availability(f, res, base), WEIGHT_DELETED);
    weight_upsert_claim c = status(f, res);
    assert_int_equal(c.phase, WEIGHT_PHASE_COMMITTED);
    assert_int_equal(c.committed_watermark, target);
    assert_int_equal(c.target.generation, target);
}

/* -- tests ------------------------------------------------------------------- */

/* PUT_FIRST with a reader on the base: the base stays readable until the
 * target is READY; then no new lease or renewal, the reader's lease is
 * waited for, and only its release lets the base go. */
static void test_put_first_waits_for_readers_of_the_base(void **state)
{
    fixture *f = *state;
    open_clients(f);
    weight_store *s = f->s;
    put(f, "pf", 1);
    uint64_t lease = lease_acquire(f, "pf", 1);

    weight_identity base = ident("pf", 1);
    weight_upsert_claim c;
    weight_writer *w = NULL;
    CHECK(s, weight_upsert(s, &base, 2, WEIGHT_UPSERT_PUT_FIRST, NULL, fence_of(f, "pf", 1), NULL, 0,
                           &c, &w));
    assert_non_null(w);
    assert_int_equal(c.phase, WEIGHT_PHASE_CLAIMED);
    assert_int_equal(strncmp(c.request_id, "wu-", 3), 0);
    /* Before the target is READY the base takes new leases. */
    uint64_t l2 = lease_acquire(f, "pf", 1);
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, "pf", 1, l2, NULL), 0);
    add_model(s, w, 2);
    CHECK(s, weight_writer_commit(w, NULL));

    c = wait_phase(f, "pf", WEIGHT_PHASE_DRAINING_BASE, 5000);
    assert_int_equal(c.phase, WEIGHT_PHASE_DRAINING_BASE);
    sleep_ms(200); /* ticks pass: the lease still holds the base */
    assert_int_equal(status(f, "pf").phase, WEIGHT_PHASE_DRAINING_BASE);
    assert_int_equal(availability(f, "pf", 1), WEIGHT_READY);
    assert_int_equal(availability(f, "pf", 2), WEIGHT_READY);
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, "pf", 1, 0, NULL),
                     WEIGHT_ENOT_READY);
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, "pf", 1, lease, NULL),
                     WEIGHT_ELEASE_EXPIRED);
    /* The retired base takes no new lease, so nothing can load it: it does
     * not exist to weight_is_exist, while its metadata still says READY. */
    int exists = -1;
    weight_identity tgt = ident("pf", 2);
    CHECK(s, weight_is_exist(s, &base, &exists));
    assert_int_equal(exists, 0);
    CHECK(s, weight_is_exist(s, &tgt, &exists));
    assert_int_equal(exists, 1);
    /* A second successor is refused, saying what the open claim waits for. */
    weight_upsert_claim other;
    weight_writer *w3 = NULL;
    assert_int_equal(weight_upsert(s, &base, 3, WEIGHT_UPSERT_PUT_FIRST, NULL, fence_of(f, "pf", 1),
                                   NULL, 0, &other, &w3),
                     WEIGHT_ECONFLICT);
    assert_null(w3);
    if (strstr(weight_store_last_error(s), "phase DRAINING_BASE: it waits for 1 lease on the base, "
                                           "the last ending in ") == NULL)
        fail_msg("refused with: %s", weight_store_last_error(s));
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, "pf", 1, lease, NULL), 0);

    c = wait_phase(f, "pf", WEIGHT_PHASE_COMMITTED, 10000);
    assert_int_equal(c.phase, WEIGHT_PHASE_COMMITTED);
    assert_one_successor(f, "pf", 1, 2);
    /* A retry of the same request answers the committed claim. */
    weight_upsert_claim again;
    CHECK(s, weight_upsert(s, &base, 2, WEIGHT_UPSERT_PUT_FIRST, c.request_id,
                           c.expected_metadata_generation, NULL, 0, &again, &w));
    assert_null(w);
    assert_int_equal(again.phase, WEIGHT_PHASE_COMMITTED);
    assert_true(hx_log_contains(&f->m, "COMMITTED"));
    /* The log names the base revision whole. */
    assert_true(hx_log_contains(&f->m, "(PUT_FIRST, acme/llm/pf/main@1 -> @2): COMMITTED"));
}

/* An upsert without a policy keeps the base's, even from a store opened
 * with a default policy (that default is for new puts); one with a policy
 * gives the target that one. */
static void test_upsert_target_keeps_the_base_policy(void **state)
{
    fixture *f = *state;
    open_clients(f);
    char err[256];
    weight_policy manual = {WEIGHT_RES_HOT, 0, WEIGHT_MODE_MANUAL};
    weight_policy pinned = {WEIGHT_RES_HOT, 0, WEIGHT_MODE_PINNED};
    weight_store *s = NULL;
    assert_int_equal(weight_store_open(f->m.socket, "acme", &pinned, &s, err, sizeof err), 0);
    weight_identity base = ident("pol", 1);
    weight_writer *w = NULL;
    CHECK(s, weight_put_begin(s, &base, &manual, &w));
    add_model(s, w, 1);
    CHECK(s, weight_writer_commit(w, NULL));

    weight_upsert_claim c;
    CHECK(s, weight_upsert(s, &base, 2, WEIGHT_UPSERT_PUT_FIRST, NULL, fence_of(f, "pol", 1), NULL,
                           0, &c, &w));
    add_model(s, w, 2);
    CHECK(s, weight_writer_commit(w, NULL));
    weight_metadata md;
    weight_identity target = ident("pol", 2);
    CHECK(s, weight_get_metadata(s, &target, &md, NULL));
    assert_int_equal(md.policy.mode, WEIGHT_MODE_MANUAL);
    assert_int_equal(wait_phase(f, "pol", WEIGHT_PHASE_COMMITTED, 10000).phase,
                     WEIGHT_PHASE_COMMITTED);

    /* A policy given to the upsert is the target's. */
    weight_identity second = ident("pol", 2);
    CHECK(s, weight_upsert(s, &second, 3, WEIGHT_UPSERT_PUT_FIRST, NULL, fence_of(f, "pol", 2),
                           &pinned, 0, &c, &w));
    add_model(s, w, 3);
    CHECK(s, weight_writer_commit(w, NULL));
    weight_identity third = ident("pol", 3);
    CHECK(s, weight_get_metadata(s, &third, &md, NULL));
    assert_int_equal(md.policy.mode, WEIGHT_MODE_PINNED);
    weight_store_close(s);
}

/* DELETE_FIRST: BUSY (and no claim) while a reader holds the base; without
 * one the base is deleted first, the window is visible, then the target is
 * imported and the claim commits. */
static void test_delete_first_deletes_the_base_before_the_import(void **state)
{
    fixture *f = *state;
    open_clients(f);
    weight_store *s = f->s;
    put(f, "df", 1);
    uint64_t lease = lease_acquire(f, "df", 1);
    weight_identity base = ident("df", 1);
    weight_upsert_claim c;
    weight_writer *w = NULL;
    assert_int_equal(weight_upsert(s, &base, 2, WEIGHT_UPSERT_DELETE_FIRST, NULL, fence_of(f, "df", 1),
                                   NULL, 0, &c, &w),
                     WEIGHT_EBUSY);
    if (strstr(weight_store_last_error(s), "has 1 lease(s) and no operation; nothing was changed") == NULL)
        fail_msg("refused with: %s", weight_store_last_error(s));
    assert_null(w);
    assert_int_equal(weight_upsert_status(s, &base, &c), WEIGHT_ENOT_FOUND);
    assert_int_equal(availability(f, "df", 1), WEIGHT_READY);
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, "df", 1, lease, NULL), 0);

    CHECK(s, weight_upsert(s, &base, 2, WEIGHT_UPSERT_DELETE_FIRST, NULL, fence_of(f, "df", 1), NULL, 0,
                           &c, &w));
    assert_non_null(w);
    assert_int_equal(c.phase, WEIGHT_PHASE_BASE_DELETED);
    /* The unavailable window: the base is gone, the target not READY. */
    assert_int_equal(availability(f, "df", 1), WEIGHT_DELETED);
    assert_int_equal(availability(f, "df", 2), WEIGHT_IMPORTING);
    char *body = NULL;
    assert_int_equal(hx_http_get(&f->m, "/metrics", &body), 200);
    assert_non_null(strstr(body, "weight_upsert_unavailable_lineages 1"));
    free(body);
    add_model(s, w, 2);
    CHECK(s, weight_writer_commit(w, NULL));
    c = wait_phase(f, "df", WEIGHT_PHASE_COMMITTED, 10000);
    assert_one_successor(f, "df", 1, 2);
    assert_int_equal(hx_http_get(&f->m, "/metrics", &body), 200);
    assert_non_null(strstr(body, "weight_upsert_unavailable_lineages 0"));
    assert_non_null(strstr(body, "weight_upsert_claims_total{mode=\"DELETE_FIRST\"} 1"));
    free(body);
}

/* A claim takes each phase as soon as what it waits for is durable, not at
 * the plugin's next tick (ABI 1.10, tick_soon): with a tick every 60 s, a
 * PUT_FIRST claim whose base a reader holds commits once the reader lets
 * go, and a DELETE_FIRST one goes from the claim to its commit, each in
 * far less than one tick period (the waits below end at 20 s; the ticks'
 * pace alone would take a minute a phase). */
static void test_claims_step_without_waiting_for_the_tick(void **state)
{
    fixture *f = *state;
    open_clients(f);
    weight_store *s = f->s;
    weight_upsert_claim c;
    weight_writer *w = NULL;

    put(f, "soon", 1);
    uint64_t lease = lease_acquire(f, "soon", 1);
    weight_identity base = ident("soon", 1);
    CHECK(s, weight_upsert(s, &base, 2, WEIGHT_UPSERT_PUT_FIRST, NULL, fence_of(f, "soon", 1), NULL,
                           0, &c, &w));
    add_model(s, w, 2);
    CHECK(s, weight_writer_commit(w, NULL));
    c = wait_phase(f, "soon", WEIGHT_PHASE_DRAINING_BASE, 20000);
    assert_int_equal(c.phase, WEIGHT_PHASE_DRAINING_BASE); /* the reader holds the base */
    assert_int_equal(availability(f, "soon", 1), WEIGHT_READY);
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, "soon", 1, lease, NULL),
                     0);
    c = wait_phase(f, "soon", WEIGHT_PHASE_COMMITTED, 20000);
    assert_int_equal(c.phase, WEIGHT_PHASE_COMMITTED);
    assert_one_successor(f, "soon", 1, 2);

    base = ident("soon", 2);
    CHECK(s, weight_upsert(s, &base, 3, WEIGHT_UPSERT_DELETE_FIRST, NULL, fence_of(f, "soon", 2), NULL,
                           0, &c, &w));
    assert_non_null(w);
    assert_int_equal(c.phase, WEIGHT_PHASE_BASE_DELETED);
    add_model(s, w, 3);
    CHECK(s, weight_writer_commit(w, NULL));
    c = wait_phase(f, "soon", WEIGHT_PHASE_COMMITTED, 20000);
    assert_int_equal(c.phase, WEIGHT_PHASE_COMMITTED);
    assert_int_equal(availability(f, "soon", 2), WEIGHT_DELETED);
    assert_int_equal(availability(f, "soon", 3), WEIGHT_READY);
}

/* DELETE_FIRST: a target failure cannot bring the deleted base back; the
 * import stays open (its abort is refused) and the same request resumes it
 * to COMMITTED. */
static void test_delete_first_target_failure_resumes(void **state)
{
    fixture *f = *state;
    open_clients(f);
    weight_store *s = f->s;
    put(f, "dr", 1);
    weight_identity base = ident("dr", 1), target = ident("dr", 2);
    weight_upsert_claim c;
    weight_writer *w = NULL;
    CHECK(s, weight_upsert(s, &base, 2, WEIGHT_UPSERT_DELETE_FIRST, "dr-1", fence_of(f, "dr", 1), NULL, 0,
                           &c, &w));
    uint64_t expected = c.expected_metadata_generation;
    static const uint64_t shape[1] = {4};
    static const uint8_t bytes[8];
    assert_true(weight_writer_add_tensor(w, "bad", "NOT_A_DTYPE", 1, shape, bytes) < 0);
    assert_true(weight_writer_commit(w, NULL) < 0);
    assert_int_equal(availability(f, "dr", 2), WEIGHT_IMPORTING);
    w = NULL;
    CHECK(s, weight_put_begin(s, &target, NULL, &w));
    weight_writer_abort(w); /* refused by the master: still IMPORTING */
    assert_int_equal(availability(f, "dr", 2), WEIGHT_IMPORTING);
    c = wait_phase(f, "dr", WEIGHT_PHASE_IMPORTING_TARGET, 5000);
    assert_int_equal(c.phase, WEIGHT_PHASE_IMPORTING_TARGET);
    CHECK(s, weight_upsert(s, &base, 2, WEIGHT_UPSERT_DELETE_FIRST, "dr-1", expected, NULL, 0, &c, &w));
    assert_non_null(w);
    add_model(s, w, 2);
    CHECK(s, weight_writer_commit(w, NULL));
    c = wait_phase(f, "dr", WEIGHT_PHASE_COMMITTED, 10000);
    assert_one_successor(f, "dr", 1, 2);
}

/* A target that fails before READY under PUT_FIRST ends the claim; the base
 * is untouched, READY and leasable, and a new request can start over. */
static void test_put_first_target_failure_leaves_the_base(void **state)
{
    fixture *f = *state;
    open_clients(f);
    weight_store *s = f->s;
    put(f, "tf", 1);
    weight_identity base = ident("tf", 1);
    weight_upsert_claim c;
    weight_writer *w = NULL;
    CHECK(s, weight_upsert(s, &base, 2, 0, "attempt-1", fence_of(f, "tf", 1), NULL, 0, &c, &w));
    static const uint64_t shape[1] = {4};
    static const uint8_t bytes[8];
    assert_true(weight_writer_add_tensor(w, "bad", "NOT_A_DTYPE", 1, shape, bytes) < 0);
    assert_true(weight_writer_commit(w, NULL) < 0); /* aborts the target import */
    c = wait_phase(f, "tf", WEIGHT_PHASE_ABORTED, 5000);
    assert_int_equal(c.phase, WEIGHT_PHASE_ABORTED);
    assert_non_null(strstr(c.error, "base is intact"));
    assert_int_equal(c.committed_watermark, 0);
    assert_int_equal(availability(f, "tf", 1), WEIGHT_READY);
    uint64_t l = lease_acquire(f, "tf", 1);
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, "tf", 1, l, NULL), 0);
    /* The aborted request stays aborted; another one replaces the base. */
    uint64_t g = fence_of(f, "tf", 1);
    assert_int_equal(weight_upsert(s, &base, 3, 0, "attempt-1", g, NULL, 0, &c, &w), WEIGHT_ECONFLICT);
    CHECK(s, weight_upsert(s, &base, 3, 0, "attempt-2", g, NULL, 0, &c, &w));
    add_model(s, w, 3);
    CHECK(s, weight_writer_commit(w, NULL));
    c = wait_phase(f, "tf", WEIGHT_PHASE_COMMITTED, 10000);
    assert_int_equal(c.phase, WEIGHT_PHASE_COMMITTED);
    assert_int_equal(c.committed_watermark, 3);
}

/* reachable: not a leak. volatile: a static only ever written is dropped by
 * GCC from -O1 on, and LeakSanitizer then reports the writer as leaked. */
static weight_writer *volatile g_lost;

/* A retry after a lost reply derives the same request id and gets the same
 * claim; a competing request is refused; a generation not above the
 * watermark is refused. */
static void test_retry_competitor_and_watermark(void **state)
{
    fixture *f = *state;
    open_clients(f);
    weight_store *s = f->s;
    put(f, "rw", 1);
    put(f, "rw", 2);
    weight_identity base = ident("rw", 1);
    weight_upsert_claim c1, c2;
    weight_writer *w1 = NULL, *w2 = NULL;
    uint64_t g1 = fence_of(f, "rw", 1), g2 = fence_of(f, "rw", 2);
    CHECK(s, weight_upsert(s, &base, 3, 0, NULL, g1, NULL, 0, &c1, &w1));
    g_lost = w1; /* the reply was "lost": the caller never saw this writer */
    /* The same call again. */
    CHECK(s, weight_upsert(s, &base, 3, 0, NULL, g1, NULL, 0, &c2, &w2));
    assert_string_equal(c1.request_id, c2.request_id);
    assert_int_equal(c1.created_ms, c2.created_ms);
    /* A competitor: another request id, or another target. */
    weight_writer *w3 = NULL;
    weight_upsert_claim c3;
    assert_int_equal(weight_upsert(s, &base, 4, 0, "other", g1, NULL, 0, &c3, &w3), WEIGHT_ECONFLICT);
    assert_non_null(strstr(weight_store_last_error(s), "second successor"));
    /* ... naming the way out of a claim whose writer died. */
    assert_non_null(strstr(weight_store_last_error(s), "`weightctl upsert abort`"));
    weight_identity b2 = ident("rw", 2);
    assert_int_equal(weight_upsert(s, &b2, 5, 0, NULL, g2, NULL, 0, &c3, &w3), WEIGHT_ECONFLICT);
    /* A plain import of another generation of the lineage is refused too. */
    weight_identity g9 = ident("rw", 9);
    assert_int_equal(weight_put_begin(s, &g9, NULL, &w3), WEIGHT_ECONFLICT);
    /* The second writer (the same import) completes. */
    add_model(s, w2, 3);
    CHECK(s, weight_writer_commit(w2, NULL));
    c1 = wait_phase(f, "rw", WEIGHT_PHASE_COMMITTED, 10000);
    assert_int_equal(c1.phase, WEIGHT_PHASE_COMMITTED);
    assert_int_equal(availability(f, "rw", 3), WEIGHT_READY);
    /* Watermark 3: a replacement of generation 2 by 3 is stale. */
    assert_int_equal(weight_upsert(s, &b2, 3, 0, NULL, fence_of(f, "rw", 2), NULL, 0, &c3, &w3),
                     WEIGHT_ESTALE_GENERATION);
    assert_non_null(strstr(weight_store_last_error(s), "watermark 3"));
    assert_int_equal(availability(f, "rw", 2), WEIGHT_READY);
}

/* weightctl upsert: reads the base's metadata generation, writes the target
 * from safetensors files and waits for the commit, telling on stderr each
 * phase it waits in (a reader's lease holds the base in DRAINING_BASE until
 * the test releases it). */
/* A minimal safetensors file, one BF16 tensor [2,2], at path. */
static void tiny_safetensors(const char *path)
{
    const char *hdr = "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}";
    uint64_t hl = strlen(hdr);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fwrite(&hl, 8, 1, fp);
    fwrite(hdr, 1, hl, fp);
    fwrite("abcdefgh", 1, 8, fp);
    fclose(fp);
}

static void test_weightctl_upsert(void **state)
{
    fixture *f = *state;
    open_clients(f);
    put(f, "ctl", 1);
    uint64_t lease = lease_acquire(f, "ctl", 1);
    char path[400], cmd[2048], out[4096], said[400];
    snprintf(path, sizeof path, "%s/m.safetensors", f->m.dir);
    tiny_safetensors(path);
    snprintf(cmd, sizeof cmd,
             "%s/bin/weightctl --master %s --tenant acme --json upsert llm/ctl/main@1 --generation 2 "
             "--wait --request-id ctl-2 %s",
             BUILD_DIR, f->m.socket, path);
    snprintf(said, sizeof said, "%s/upsert.err", f->m.dir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        hx_child_setup(said);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; !hx_file_contains(said, "weightctl: upsert: claim ctl-2: DRAINING_BASE\n"); i++) {
        if (i * 20 > 20000) fail_msg("weightctl did not tell it waits for the base's leases");
        sleep_ms(20);
    }
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, "ctl", 1, lease, NULL), 0);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    hx_read_text(said, out, sizeof out);
    assert_non_null(strstr(out, "\"phase\":\"COMMITTED\""));
    assert_non_null(strstr(out, "\"committed_watermark\":2"));
    assert_int_equal(availability(f, "ctl", 1), WEIGHT_DELETED);
    assert_int_equal(availability(f, "ctl", 2), WEIGHT_READY);
    /* Again with another request: it cannot start (the base is gone). */
    snprintf(cmd, sizeof cmd,
             "%s/bin/weightctl --master %s --tenant acme upsert llm/ctl/main@1 --generation 2 %s "
             "2>&1",
             BUILD_DIR, f->m.socket, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    st = pclose(p);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) != 0);
}

/* The claim a weightctl upsert's arguments name (no --request-id) ended
 * ABORTED -- its target import was lost, as with a master gone mid-way:
 * the same command again says so and starts a new claim, which commits;
 * it is not refused as a conflict. */
static void test_weightctl_upsert_starts_over_after_an_aborted_claim(void **state)
{
    fixture *f = *state;
    open_clients(f);
    weight_store *s = f->s;
    put(f, "ab", 1);
    weight_identity base = ident("ab", 1);
    weight_upsert_claim c;
    weight_writer *w = NULL;
    CHECK(s, weight_upsert(s, &base, 2, WEIGHT_UPSERT_PUT_FIRST, NULL, fence_of(f, "ab", 1), NULL,
                           0, &c, &w));
    char aborted[160];
    snprintf(aborted, sizeof aborted, "%s", c.request_id);
    add_model(s, w, 2);
    weight_writer_abort(w); /* as a put lost with its master: the import aborted */
    assert_int_equal(wait_phase(f, "ab", WEIGHT_PHASE_ABORTED, 5000).phase, WEIGHT_PHASE_ABORTED);
    for (int i = 0; availability(f, "ab", 2) != WEIGHT_ENOT_FOUND; i++) { /* its objects go */
        if (i * 20 > 20000) fail_msg("the aborted target ab@2 is still there");
        sleep_ms(20);
    }

    char path[400], cmd[2048], out[4096], want[300];
    snprintf(path, sizeof path, "%s/ab.safetensors", f->m.dir);
    tiny_safetensors(path);
    snprintf(cmd, sizeof cmd,
             "%s/bin/weightctl --master %s --tenant acme upsert llm/ab/main@1 --generation 2 "
             "--wait %s 2>&1",
             BUILD_DIR, f->m.socket, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("weightctl upsert again (status %d): %s", st, out);
    snprintf(want, sizeof want, "weightctl: upsert: claim %s of these arguments was aborted (", aborted);
    if (strstr(out, want) == NULL || strstr(out, "): a new claim ") == NULL)
        fail_msg("weightctl upsert again: %s", out);
    assert_int_equal(availability(f, "ab", 2), WEIGHT_READY);
    assert_int_equal(availability(f, "ab", 1), WEIGHT_DELETED);
}

/* HA mode without the lineage flag: upsert fails closed naming it, every
 * other weight call keeps working; with the flag it succeeds. */
static void test_ha_gate_refuses_upsert_only(void **state)
{
    fixture *f = *state;
    open_clients(f);
    weight_store *s = f->s;
    put(f, "ha", 1);
    uint64_t l = lease_acquire(f, "ha", 1);
    assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, "ha", 1, l, NULL), 0);
    weight_identity base = ident("ha", 1);
    weight_upsert_claim c;
    weight_writer *w = NULL;
    assert_int_equal(weight_upsert(s, &base, 2, 0, NULL, fence_of(f, "ha", 1), NULL, 0, &c, &w),
                     SMP_EGATE_CODE);
    assert_non_null(strstr(weight_store_last_error(s), "weight_lineage_oplog_capability_confirmed"));
    assert_null(w);
    assert_int_equal(availability(f, "ha", 1), WEIGHT_READY);
    assert_int_equal(availability(f, "ha", 2), WEIGHT_ENOT_FOUND);
    put(f, "ha", 7); /* ordinary mutations keep working */

    close_clients(f);
    assert_int_equal(hx_stop(&f->m), 0);
    assert_int_equal(write_cfg(f, "  weight_management_oplog_capability_confirmed: true\n"
                                  "  weight_lineage_oplog_capability_confirmed: true\n"),
                     0);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    open_clients(f);
    s = f->s;
    CHECK(s, weight_upsert(s, &base, 8, 0, NULL, fence_of(f, "ha", 1), NULL, 0, &c, &w));
    assert_non_null(w);
    weight_writer_abort(w);
}

/* -- SIGKILL in every phase ---------------------------------------------------- */

static weight_writer *g_dead[16]; /* writers of killed masters: never aborted */
static size_t g_n_dead;

static void kill_and_restart(fixture *f)
{
    close_clients(f);
    hx_kill(&f->m);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    open_clients(f);
}

/* UPSERT_BEGIN without the client's follow-up (no target import). */
static void begin_raw(fixture *f, const char *res, weight_upsert_mode mode, const char *rid,
                      uint64_t expected)
{
    Wmrpc__UpsertBeginRequest req = WMRPC__UPSERT_BEGIN_REQUEST__INIT;
    Wmrpc__WeightIdentity wid = WMRPC__WEIGHT_IDENTITY__INIT;
    wid.tenant = "acme";
    wid.namespace_id = "llm";
    wid.resource_id = (char *)res;
    wid.revision = "main";
    wid.generation = 1;
    req.base_identity = &wid;
    req.target_generation = 2;
    req.mode = (uint32_t)mode;
    req.request_id = (char *)rid;
    req.expected_metadata_generation = expected;
    uint8_t buf[2048], *body = NULL;
    size_t n = protobuf_c_message_get_packed_size(&req.base), blen = 0;
    int st = -1;
    char *msg = NULL;
    protobuf_c_message_pack(&req.base, buf);
    assert_int_equal(rpcc_call(f->rpc, SVC, WMRPC__WEIGHT_METHOD__WEIGHT_UPSERT_BEGIN, buf, n, &st,
                               &body, &blen, &msg), 0);
    if (st != 0) fprintf(stderr, "upsert begin: %.*s\n", (int)blen, body ? (char *)body : "");
    assert_int_equal(st, 0);
    free(msg);
    free(body);
}

/* The sum of weight_upsert_recoveries_total over mode's phases from `from`
 * to `to` in a /metrics body; -1 when a phase outside that range counted
 * one for this mode. */
static long recoveries_between(const char *body, weight_upsert_mode mode, int from, int to)
{
    const char *mname = mode == WEIGHT_UPSERT_PUT_FIRST ? "PUT_FIRST" : "DELETE_FIRST";
    long sum = 0;
    for (int phase = WEIGHT_PHASE_CLAIMED; phase <= WEIGHT_PHASE_ABORTED; phase++) {
        char needle[160];
        const char *at;
        snprintf(needle, sizeof needle, "weight_upsert_recoveries_total{mode=\"%s\",phase=\"%s\"} ",
                 mname, weight_upsert_phase_name(phase));
        if ((at = strstr(body, needle)) == NULL) continue;
        long v = strtol(at + strlen(needle), NULL, 10);
        if (v == 0) continue;
        int pos = wr_upsert_phase_order(mode, phase);
        if (pos < wr_upsert_phase_order(mode, from) || pos > wr_upsert_phase_order(mode, to))
            return -1;
        sum += v;
    }
    return sum;
}

/* Import res@2 through w, or through the writer the same request rid gets
 * back when w is NULL (its first writer died with a master), and commit it. */
static void finish_replacement(fixture *f, const char *res, weight_upsert_mode mode,
                               const char *rid, uint64_t expected, weight_writer *w)
{
    weight_store *s = f->s;
    if (w == NULL) {
        weight_identity base = ident(res, 1);
        weight_upsert_claim c;
        CHECK(s, weight_upsert(s, &base, 2, mode, rid, expected, NULL, 0, &c, &w));
        assert_string_equal(c.request_id, rid);
        assert_non_null(w);
    }
    add_model(s, w, 2);
    CHECK(s, weight_writer_commit(w, NULL));
}

/* Replace res@1 by res@2 in mode; SIGKILL the master as soon as the claim is
 * seen in phase kill_at; restart; the same claim is back in that phase (or
 * one the tick moved it to since), the same request resumes it, and the
 * lineage ends with exactly one successor. Returns 1 when it did; 0 when the
 * tick moved the claim past kill_at before the first status saw it (a
 * transient phase under load): nothing was killed, the replacement was
 * finished, and the caller tries again on another lineage. */
static int replace_killed_at_once(fixture *f, const char *res, weight_upsert_mode mode,
                                  int kill_at)
{
    weight_store *s = f->s;
    weight_identity base = ident(res, 1);
    weight_upsert_claim c;
    weight_metadata md;
    weight_writer *w = NULL;
    char rid[64];
    put(f, res, 1);
    CHECK(s, weight_get_metadata(s, &base, &md, NULL));
    uint64_t expected = md.metadata_generation;
    snprintf(rid, sizeof rid, "kill-%s", res);
    int hold = mode == WEIGHT_UPSERT_PUT_FIRST &&
               (kill_at == WEIGHT_PHASE_BASE_FENCED || kill_at == WEIGHT_PHASE_DRAINING_BASE);
    uint64_t lease = hold ? lease_acquire(f, res, 1) : 0;
    int raw = kill_at == WEIGHT_PHASE_CLAIMED ||
              (mode == WEIGHT_UPSERT_DELETE_FIRST && kill_at != WEIGHT_PHASE_IMPORTING_TARGET);
    int committed_target = 0;
    if (raw) {
        begin_raw(f, res, mode, rid, expected);
    } else {
        CHECK(s, weight_upsert(s, &base, 2, mode, rid, expected, NULL, 0, &c, &w));
        assert_non_null(w);
        if (mode == WEIGHT_UPSERT_PUT_FIRST && kill_at != WEIGHT_PHASE_IMPORTING_TARGET) {
            add_model(s, w, 2);
            CHECK(s, weight_writer_commit(w, NULL));
            w = NULL;
            committed_target = 1;
        }
    }
    /* Catch the phase: status calls back to back, then 1 ms apart. A phase
     * whose next step waits for nothing (BASE_FENCED) lasts only until the
     * next claim record is durable, one append and fsync, since each record
     * brings the tick at once. */
    for (int i = 0; i < 20000; i++) {
        c = status(f, res);
        if (wr_upsert_phase_order(mode, c.phase) >= wr_upsert_phase_order(mode, kill_at)) break;
        if (i >= 10000) sleep_ms(1);
    }
    if (c.phase != kill_at) {
        assert_true(wr_upsert_phase_order(mode, c.phase) > wr_upsert_phase_order(mode, kill_at));
        fprintf(stderr, "%s: the claim was in %s before %s was seen; trying another lineage\n",
                res, weight_upsert_phase_name(c.phase), weight_upsert_phase_name(kill_at));
        if (lease)
            assert_int_equal(
                lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, res, 1, lease, NULL), 0);
        /* Finished here, so the next restart recovers no claim of it. */
        if (!committed_target) finish_replacement(f, res, mode, rid, expected, w);
        assert_int_equal(wait_phase(f, res, WEIGHT_PHASE_COMMITTED, 15000).phase,
                         WEIGHT_PHASE_COMMITTED);
        return 0;
    }
    if (kill_at == WEIGHT_PHASE_DRAINING_BASE || kill_at == WEIGHT_PHASE_BASE_DELETED) {
        /* Here the claim comes back from the weight_metadata section. */
        kvc *kv = hx_client(&f->m);
        assert_non_null(kv);
        assert_int_equal(kvc_snapshot(kv, NULL), 0);
        kvc_close(kv);
    }
    if (w != NULL) g_dead[g_n_dead++] = w; /* dies with the master */
    kill_and_restart(f);
    s = f->s;

    weight_upsert_claim after = status(f, res);
    assert_string_equal(after.request_id, rid);
    assert_true(wr_upsert_phase_order(mode, after.phase) >= wr_upsert_phase_order(mode, kill_at));
    assert_true(after.phase != WEIGHT_PHASE_ABORTED && after.phase != WEIGHT_PHASE_COMMITTED);
    /* The first tick counts the recovered claim, by the phase it found: one
     * from kill_at up to the phase seen now (the tick may have moved it on
     * before the status above was read). */
    char *body = NULL;
    int seen = 0;
    for (int i = 0; i < 250 && !seen; i++) {
        assert_int_equal(hx_http_get(&f->m, "/metrics", &body), 200);
        seen = recoveries_between(body, mode, kill_at, after.phase) == 1;
        if (!seen && i == 249) fprintf(stderr, "recoveries not counted once:\n%s\n", body);
        free(body);
        if (!seen) sleep_ms(20);
    }
    assert_true(seen);
    if (lease) {
        /* The reader's lease survived; the base stays retired. */
        assert_int_equal(lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, res, 1, 0, NULL),
                         WEIGHT_ENOT_READY);
        assert_int_equal(
            lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, res, 1, lease, NULL), 0);
    }
    if (!committed_target) finish_replacement(f, res, mode, rid, expected, NULL);
    c = wait_phase(f, res, WEIGHT_PHASE_COMMITTED, 15000);
    assert_int_equal(c.phase, WEIGHT_PHASE_COMMITTED);
    assert_string_equal(c.request_id, rid);
    assert_one_successor(f, res, 1, 2);
    return 1;
}

/* replace_killed_at_once on res, then on res-2, res-3, ... while the tick
 * outran the poll: up to REPLACE_TRIES lineages, one of which must be caught
 * in kill_at. A phase that waits for nothing lasts one append and fsync
 * (each record brings the next step at once): a poll on a loaded machine
 * (two suites at once, sanitizers) misses it now and then, so there are
 * many tries, each a fraction of a second when it misses. */
#define REPLACE_TRIES 20
static void replace_killed_at(fixture *f, const char *res, weight_upsert_mode mode, int kill_at)
{
    char name[64];
    for (int attempt = 1; attempt <= REPLACE_TRIES; attempt++) {
        if (attempt == 1)
            snprintf(name, sizeof name, "%s", res);
        else
            snprintf(name, sizeof name, "%s-%d", res, attempt);
        if (replace_killed_at_once(f, name, mode, kill_at)) return;
    }
    fail_msg("%s: the claim was never seen in %s in %d lineages", res,
             weight_upsert_phase_name(kill_at), REPLACE_TRIES);
}

static void test_sigkill_in_every_put_first_phase(void **state)
{
    fixture *f = *state;
    open_clients(f);
    replace_killed_at(f, "kp-claimed", WEIGHT_UPSERT_PUT_FIRST, WEIGHT_PHASE_CLAIMED);
    replace_killed_at(f, "kp-importing", WEIGHT_UPSERT_PUT_FIRST, WEIGHT_PHASE_IMPORTING_TARGET);
    replace_killed_at(f, "kp-fenced", WEIGHT_UPSERT_PUT_FIRST, WEIGHT_PHASE_BASE_FENCED);
    replace_killed_at(f, "kp-draining", WEIGHT_UPSERT_PUT_FIRST, WEIGHT_PHASE_DRAINING_BASE);
    replace_killed_at(f, "kp-deleting", WEIGHT_UPSERT_PUT_FIRST, WEIGHT_PHASE_DELETING_BASE);
}

static void test_sigkill_in_every_delete_first_phase(void **state)
{
    fixture *f = *state;
    open_clients(f);
    replace_killed_at(f, "kd-claimed", WEIGHT_UPSERT_DELETE_FIRST, WEIGHT_PHASE_CLAIMED);
    replace_killed_at(f, "kd-deleting", WEIGHT_UPSERT_DELETE_FIRST, WEIGHT_PHASE_DELETING_BASE);
    replace_killed_at(f, "kd-deleted", WEIGHT_UPSERT_DELETE_FIRST, WEIGHT_PHASE_BASE_DELETED);
    replace_killed_at(f, "kd-importing", WEIGHT_UPSERT_DELETE_FIRST, WEIGHT_PHASE_IMPORTING_TARGET);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_first_waits_for_readers_of_the_base, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upsert_target_keeps_the_base_policy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete_first_deletes_the_base_before_the_import, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_put_first_target_failure_leaves_the_base, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete_first_target_failure_resumes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retry_competitor_and_watermark, setup, teardown),
        cmocka_unit_test_setup_teardown(test_claims_step_without_waiting_for_the_tick,
                                        setup_slow_tick, teardown),
        cmocka_unit_test_setup_teardown(test_weightctl_upsert_starts_over_after_an_aborted_claim,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_weightctl_upsert, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ha_gate_refuses_upsert_only, setup_ha, teardown),
        cmocka_unit_test_setup_teardown(test_sigkill_in_every_put_first_phase, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigkill_in_every_delete_first_phase, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
