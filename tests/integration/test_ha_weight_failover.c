/* test_ha_weight_failover.c -- weight operations across a failover of the
 * leader of a real HA cluster.
 *
 * Every test starts Debian's etcd (one member, etcd_fixture), three
 * store_master processes in HA mode with the real weight_mgmt.so (no
 * embedded node, a 50 ms reconcile tick, rounds of 2 members with a 100 ms
 * cooldown so an operation on 60 payloads takes many rounds, both capability
 * gates confirmed) and one store_node given the list of the three masters.
 * The test's clients are given the same list (the wr_* helpers of
 * weight_rpc.c and libweightclient) and follow SMP_ENOTLEADER to whichever
 * master leads. In the middle of an import, a cold migration, a deletion and
 * an upsert of either mode the LEADER is killed with SIGKILL; the assertions
 * then read what the NEW leader -- another process, elected once the old
 * lease expired -- answers: the same import (same group and generation), the
 * same operation id with no less progress than was acknowledged, the same
 * upsert claim (request id and creation time), each driven to the same end
 * state as without a failover, and nothing acknowledged before the kill
 * lost. HA_TEST=pattern runs only the matching tests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ha_cluster_fixture.h"
#include "harness.h"
#include "weight_rpc.h"
#include "weight_check.h"
#include "weightclient.h"

#define N_MASTERS HC_MASTERS
#define WAIT_MS 20000

typedef struct cluster {
    hc_cluster hc;
    /* The weight clients: f.m is a view of master 0 whose socket is the
     * list of all three (never started or cleaned up through it). */
    wr_fixture f;
    weight_store *s;         /* libweightclient on the same list (tenant acme) */
} cluster;

/* Writers of killed leaders: never committed nor aborted (reachable). */
static weight_writer *g_dead[8];
static size_t g_n_dead;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* -- the cluster ------------------------------------------------------------------ */

/* Master i's config: HA on the cluster's etcd, the weight plugin with a fast
 * tick and a small migration budget. */
static int write_config(cluster *c, int i)
{
    char extra[1024];
    snprintf(extra, sizeof(extra),
             "cluster:\n  weight_management_oplog_capability_confirmed: true\n"
             "  weight_lineage_oplog_capability_confirmed: true\n"
             "  default_weight_preferred_residency: hot\n"
             "  weight_migration_cooldown_ms: 100\n"
             "  weight_migration_max_members_per_round: 2\n"
             "  weight_migration_max_bytes_per_round: 1048576\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    config:\n"
             "      tick_period_ms: 50\n",
             BUILD_DIR);
    return hc_configure(&c->hc, i, extra);
}

static int setup(void **state)
{
    cluster *c = calloc(1, sizeof(*c));
    if (c == NULL) return -1;
    *state = c;
    if (hc_init(&c->hc, "ha-weight-failover", 1) < 0) {
        free(c);
        *state = NULL;
        return -1;
    }
    return hc_list_view(&c->hc, &c->f.m);
}

/* Closes the clients, kills node, masters and etcd, removes every directory
 * (also after a failed test). */
static int teardown(void **state)
{
    cluster *c = *state;
    if (c == NULL) return 0;
    weight_store_close(c->s);
    wr_disconnect(&c->f);
    hc_cleanup(&c->hc);
    free(c);
    return 0;
}

/* The one master that leads; fails the test after WAIT_MS. */
static int wait_leader(cluster *c)
{
    int leader = hc_wait_leader(&c->hc, -1, WAIT_MS);
    if (leader < 0) fail_msg("no single leader within %d ms", WAIT_MS);
    return leader;
}

/* Wait until the leader has the node registered. */
static void wait_node(cluster *c, int leader)
{
    if (hc_wait_node(&c->hc, leader, WAIT_MS) < 0)
        fail_msg("node not registered with master %d", leader);
}

static void open_clients(cluster *c)
{
    char err[256];
    wr_connect(&c->f);
    int rc = weight_store_open(c->hc.masters, "acme", NULL, &c->s, err, sizeof err);
    if (rc != 0) fail_msg("weight_store_open(%s): %s", c->hc.masters, err);
}

static void close_clients(cluster *c)
{
    weight_store_close(c->s);
    c->s = NULL;
    wr_disconnect(&c->f);
}

/* Three masters, the node on their list, the clients; the leader's index. */
static int start_cluster(cluster *c)
{
    for (int i = 0; i < N_MASTERS; i++) {
        assert_int_equal(write_config(c, i), 0);
        if (hx_start(&c->hc.m[i], WAIT_MS) < 0) fail_msg("master %d did not start (%s)", i, c->hc.m[i].log);
    }
    int leader = wait_leader(c);
    assert_int_equal(hc_node_start(&c->hc, "n1", 32u << 20), 0);
    wait_node(c, leader);
    open_clients(c);
    return leader;
}

/* SIGKILL the leader; wait for another master to lead and for the node to
 * register with it; reconnect the clients. Returns the new leader. */
static int kill_leader(cluster *c, int leader)
{
    pid_t old = c->hc.m[leader].pid;
    close_clients(c);
    hx_kill(&c->hc.m[leader]);
    int next = wait_leader(c);
    assert_int_not_equal(next, leader);
    assert_true(c->hc.m[next].pid != old && c->hc.m[next].pid > 0);
    wait_node(c, next);
    open_clients(c);
    return next;
}

/* -- weight helpers (as test_weight_lifecycle.c) ----------------------------------- */

static void sizes_fill(wr_upload *u, size_t n, uint64_t base)
{
    u->n = n;
    for (size_t i = 0; i < n; i++) u->sizes[i] = base + 100 * i;
}

static uint64_t generation_of(wr_fixture *f, const Wmrpc__WeightIdentity *id)
{
    Wmrpc__MetadataResponse *md = wr_get_md(f, id);
    uint64_t g = md->metadata->metadata_generation;
    wmrpc__metadata_response__free_unpacked(md, NULL);
    return g;
}

/* Poll until the revision has availability `av` (and, when res >= 0, that
 * residency) with no active operation; returns its metadata response. */
static Wmrpc__MetadataResponse *wait_state(wr_fixture *f, const Wmrpc__WeightIdentity *id, int av, int res)
{
    uint64_t end = mono_ms() + WAIT_MS;
    for (;;) {
        Wmrpc__MetadataResponse *r = wr_get_md(f, id);
        if ((int)r->metadata->availability == av && (res < 0 || (int)r->metadata->residency == res) &&
            r->metadata->operation_id == 0)
            return r;
        if (mono_ms() > end)
            fail_msg("%s: availability %u residency %u operation %llu after %d ms (wanted %d/%d)",
                     r->metadata->group_key, r->metadata->availability, r->metadata->residency,
                     (unsigned long long)r->metadata->operation_id, WAIT_MS, av, res);
        wmrpc__metadata_response__free_unpacked(r, NULL);
        sleep_ms(20);
    }
}

/* The group holds no object any more. */
static void assert_group_empty(wr_fixture *f, const char *group)
{
    char **keys = NULL, *next = NULL;
    size_t n = 0;
    assert_int_equal(kvc_list(f->kv, group, NULL, 100, &keys, &n, &next), 0);
    assert_int_equal(n, 0);
    kvc_list_free(keys, n, next);
}

/* Memory and cold replicas of key (complete ones); -1, -1 when it does not
 * exist. */
static void replicas(wr_fixture *f, const char *key, int *mem, int *cold)
{
    kvc_object o;
    *mem = *cold = 0;
    int rc = kvc_get(f->kv, key, &o);
    if (rc == SMP_ENOTFOUND) {
        *mem = *cold = -1;
        return;
    }
    if (rc != 0) fail_msg("kvc_get %s: %d %s", key, rc, kvc_error(f->kv));
    for (size_t i = 0; i < o.n_replicas; i++) {
        if (o.replicas[i].status != 1) continue; /* complete only */
        if (o.replicas[i].kind == SMP_REPLICA_MEMORY) (*mem)++;
        else (*cold)++;
    }
}

/* Payload i of u as wr_put_some writes it: bytes (i * 31 + b) & 0xff. */
static unsigned char *payload_bytes(const wr_upload *u, size_t i)
{
    unsigned char *data = malloc(u->sizes[i]);
    assert_non_null(data);
    for (uint64_t b = 0; b < u->sizes[i]; b++) data[b] = (unsigned char)(i * 31 + b);
    return data;
}

/* Payload i of u reads back byte for byte (verified against its SHA-256). */
static void assert_payload(wr_fixture *f, const wr_upload *u, size_t i)
{
    char key[1200];
    uint64_t len = 0;
    wr_payload_key(u, i, key, sizeof(key));
    unsigned char *want = payload_bytes(u, i), *got = malloc(u->sizes[i] + 16);
    assert_non_null(got);
    int rc = kvc_get_into(f->kv, key, got, u->sizes[i] + 16, &len, 1);
    if (rc != 0) fail_msg("acknowledged %s unreadable after failover: %d %s", key, rc, kvc_error(f->kv));
    assert_int_equal(len, u->sizes[i]);
    assert_memory_equal(got, want, u->sizes[i]);
    free(want);
    free(got);
}

/* A revision of n payloads published READY + HOT (MANUAL); u is filled. */
static void publish(cluster *c, const Wmrpc__WeightIdentity *id, wr_upload *u, size_t n)
{
    u->per_unit = 1;
    sizes_fill(u, n, 256);
    Wmrpc__MetadataResponse *r = wr_publish(&c->f, id, WR_RS_HOT, WR_MODE_MANUAL, u);
    assert_int_equal(r->metadata->availability, WR_AV_READY);
    wmrpc__metadata_response__free_unpacked(r, NULL);
}

/* -- upsert helpers (as test_weight_upsert.c) --------------------------------------- */

static uint8_t g_data[2][4096];

static void add_model(weight_store *s, weight_writer *w, uint64_t gen)
{
    static const uint64_t shape[2] = {32, 64};
    for (int t = 0; t < 2; t++)
        for (size_t i = 0; i < sizeof g_data[t]; i++) g_data[t][i] = (uint8_t)(i * 7 + gen * 31 + t);
    CHECK(s, weight_writer_add_tensor(w, "a.weight", "BF16", 2, shape, g_data[0]));
    CHECK(s, weight_writer_add_tensor(w, "b.weight", "BF16", 2, shape, g_data[1]));
}

static weight_identity ident(const char *res, uint64_t gen)
{
    weight_identity id;
    assert_int_equal(weight_identity_set(&id, "acme", "llm", res, "main", gen), 0);
    return id;
}

static weight_upsert_claim claim_of(cluster *c, const char *res)
{
    weight_upsert_claim cl;
    weight_identity id = ident(res, 1);
    weight_store *s = c->s;
    CHECK(s, weight_upsert_status(s, &id, &cl));
    return cl;
}

/* Poll until the claim reaches `phase` (or a later one); returns it. */
static weight_upsert_claim wait_claim(cluster *c, const char *res, weight_upsert_mode mode, int phase)
{
    uint64_t end = mono_ms() + WAIT_MS;
    for (;;) {
        weight_upsert_claim cl = claim_of(c, res);
        if (wr_upsert_phase_order(mode, cl.phase) >= wr_upsert_phase_order(mode, phase)) return cl;
        if (mono_ms() > end) fail_msg("claim on %s still in phase %d after %d ms (wanted %d)", res,
                                      cl.phase, WAIT_MS, phase);
        sleep_ms(5);
    }
}

/* The same claim as `before` (request id, mode, creation), in its phase or
 * a later one, not ended. */
static void assert_same_claim(const weight_upsert_claim *before, const weight_upsert_claim *after)
{
    assert_string_equal(after->request_id, before->request_id);
    assert_int_equal(after->mode, before->mode);
    assert_int_equal(after->created_ms, before->created_ms);
    assert_int_equal(after->target.generation, before->target.generation);
    assert_true(wr_upsert_phase_order(after->mode, after->phase) >=
                wr_upsert_phase_order(before->mode, before->phase));
    assert_true(after->phase != WEIGHT_PHASE_ABORTED);
}

/* The base's deletion operation, once the claim started it: its id, after
 * it did at least `at` members (the progress acknowledged to this test). */
static uint64_t base_deletion(cluster *c, const Wmrpc__WeightIdentity *base, uint64_t at,
                              uint64_t *done)
{
    uint64_t end = mono_ms() + WAIT_MS, op_id = 0;
    while (op_id == 0) {
        Wmrpc__MetadataResponse *r = wr_get_md(&c->f, base);
        if (r->metadata->availability == WR_AV_DELETING) op_id = r->metadata->operation_id;
        wmrpc__metadata_response__free_unpacked(r, NULL);
        if (op_id == 0) {
            if (mono_ms() > end) fail_msg("the base's deletion never started");
            sleep_ms(5);
        }
    }
    *done = wr_wait_progress(&c->f, op_id, at, WAIT_MS);
    return op_id;
}

/* The operation op_id on the new leader: the same one, RUNNING or
 * SUCCEEDED, with at least `before` members done; then waited for to
 * SUCCEEDED with every member done. */
static void assert_resumed_to_success(cluster *c, uint64_t op_id, uint64_t before)
{
    int st;
    Wmrpc__OperationResponse *op = wr_get_op(&c->f, op_id, &st);
    if (st != 0) fail_msg("operation %llu unknown to the new leader: %d %s", (unsigned long long)op_id, st,
                          c->f.last_error);
    assert_int_equal(op->operation->id, op_id);
    assert_true(op->operation->state == 1 || op->operation->state == 2);
    if (op->operation->members_done < before)
        fail_msg("operation %llu: %llu members done on the new leader, %llu acknowledged before",
                 (unsigned long long)op_id, (unsigned long long)op->operation->members_done,
                 (unsigned long long)before);
    wmrpc__operation_response__free_unpacked(op, NULL);
    op = wr_wait_op(&c->f, op_id, WAIT_MS);
    assert_int_equal(op->operation->state, 2); /* SUCCEEDED */
    assert_int_equal(op->operation->members_done, op->operation->members_total);
    wmrpc__operation_response__free_unpacked(op, NULL);
}

/* UPSERT_BEGIN alone (the client's follow-up, the target import, is not
 * made); the claim it answers must be accepted. */
static void begin_raw(cluster *c, const char *res, weight_upsert_mode mode, const char *rid,
                      uint64_t expected)
{
    Wmrpc__UpsertBeginRequest req = WMRPC__UPSERT_BEGIN_REQUEST__INIT;
    Wmrpc__WeightIdentity wid;
    wr_set_identity(&wid, "acme", "llm", res, 1);
    req.base_identity = &wid;
    req.target_generation = 2;
    req.mode = (uint32_t)mode;
    req.request_id = (char *)rid;
    req.expected_metadata_generation = expected;
    Wmrpc__UpsertResponse *r = NULL;
    int st = wr_call(&c->f, WMRPC__WEIGHT_METHOD__WEIGHT_UPSERT_BEGIN, &req.base,
                     &wmrpc__upsert_response__descriptor, (ProtobufCMessage **)&r);
    if (st != 0) fail_msg("upsert begin: %d %s", st, c->f.last_error);
    wmrpc__upsert_response__free_unpacked(r, NULL);
}

/* Exactly one live successor: the base a DELETED tombstone with an empty
 * group, the target READY with the model's bytes, no other generation, the
 * claim COMMITTED with the target as watermark. */
static void assert_one_successor(cluster *c, const char *res, const char *base_group)
{
    weight_list_query q = {"llm", res, 0, 1};
    weight_metadata *list = NULL;
    size_t n = 0;
    char next[256];
    weight_store *s = c->s;
    CHECK(s, weight_list(s, &q, "", &list, &n, next, sizeof next));
    int live = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t g = list[i].identity.generation;
        assert_true(g == 1 || g == 2);
        if (list[i].availability == WEIGHT_READY) {
            live++;
            assert_int_equal(g, 2);
        }
    }
    weight_list_free(list);
    assert_int_equal(live, 1);
    weight_metadata md;
    weight_identity base = ident(res, 1);
    CHECK(s, weight_get_metadata(s, &base, &md, NULL));
    assert_int_equal(md.availability, WEIGHT_DELETED);
    weight_upsert_claim cl = claim_of(c, res);
    assert_int_equal(cl.phase, WEIGHT_PHASE_COMMITTED);
    assert_int_equal(cl.committed_watermark, 2);
    assert_int_equal(cl.target.generation, 2);
    assert_group_empty(&c->f, base_group);
    /* The successor holds the model's bytes. */
    weight_identity target = ident(res, 2);
    weight_mapped *v = NULL;
    CHECK(s, weight_get_mapped(s, &target, &v));
    assert_int_equal(weight_mapped_count(v), 2);
    for (size_t i = 0; i < 2; i++) {
        weight_mapped_tensor t;
        const void *data = NULL;
        assert_int_equal(weight_mapped_get_tensor(v, i, &t), 0);
        assert_int_equal(weight_mapped_data(v, i, &data), 0);
        assert_non_null(data);
        int which = strcmp(t.name, "a.weight") == 0 ? 0 : 1;
        assert_int_equal(t.bytes, sizeof g_data[which]);
        for (size_t b = 0; b < sizeof g_data[which]; b++)
            if (((const uint8_t *)data)[b] != (uint8_t)(b * 7 + 2 * 31 + which))
                fail_msg("%s@2 %s: byte %zu differs", res, t.name, b);
    }
    weight_mapped_release(v);
}

/* -- tests ------------------------------------------------------------------------ */

/* An import begun and partly uploaded on the leader survives its SIGKILL:
 * on the new leader the revision is still IMPORTING (not readable), the
 * acknowledged uploads are there byte for byte, a retry of IMPORT_BEGIN with
 * the same identity answers the same group and generation, the missing
 * payload is uploaded and the commit publishes it READY with the right
 * bytes. A second import never committed stays IMPORTING, never published. */
static void test_ha_import_resumes_on_the_new_leader(void **state)
{
    cluster *c = *state;
    int leader = start_cluster(c);
    wr_fixture *f = &c->f;

    Wmrpc__WeightIdentity id, never;
    wr_set_identity(&id, "t1", "imp", "resumed", 1);
    wr_set_identity(&never, "t1", "imp", "never", 1);
    Wmrpc__WeightMetadata *md = NULL, *md_never = NULL;
    assert_int_equal(wr_begin(f, &id, WR_RS_HOT, 0.5, WR_MODE_MANUAL, &md), 0);
    assert_int_equal(md->availability, WR_AV_IMPORTING);
    wr_upload u = {.per_unit = 1}, un = {.per_unit = 1};
    sizes_fill(&u, 6, 300);
    sizes_fill(&un, 4, 300);
    wr_put_some(f, &u, md, 5, -1); /* payload 5 not uploaded yet */
    uint64_t gen = md->metadata_generation;
    assert_int_equal(wr_begin(f, &never, WR_RS_HOT, 0.5, WR_MODE_MANUAL, &md_never), 0);
    wr_put_some(f, &un, md_never, 2, -1);

    kill_leader(c, leader);

    /* The same import, still open, on another process. */
    Wmrpc__MetadataResponse *r = wr_get_md(f, &id);
    assert_int_equal(r->metadata->availability, WR_AV_IMPORTING);
    assert_int_equal(r->metadata->metadata_generation, gen);
    assert_string_equal(r->metadata->group_key, md->group_key);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_is_exist(f, &id), 0);
    Wmrpc__WeightMetadata *again = NULL;
    assert_int_equal(wr_begin(f, &id, WR_RS_HOT, 0.5, WR_MODE_MANUAL, &again), 0);
    assert_string_equal(again->group_key, md->group_key);
    assert_string_equal(again->manifest_key, md->manifest_key);
    assert_int_equal(again->metadata_generation, gen);
    assert_int_equal(again->availability, WR_AV_IMPORTING);
    wmrpc__weight_metadata__free_unpacked(again, NULL);
    for (size_t i = 0; i < 5; i++) assert_payload(f, &u, i);

    /* The upload completes and the commit publishes it. */
    char key[1200];
    wr_payload_key(&u, 5, key, sizeof(key));
    unsigned char *data = payload_bytes(&u, 5);
    int rc = kvc_put_bytes(f->kv, key, data, u.sizes[5], SMP_DATA_WEIGHT, u.group, 0, NULL);
    if (rc != 0) fail_msg("put %s on the new leader: %d %s", key, rc, kvc_error(f->kv));
    free(data);
    r = NULL;
    rc = wr_commit(f, &id, gen, &u, NULL, &r);
    if (rc != 0) fail_msg("commit on the new leader: %d %s", rc, f->last_error);
    assert_int_equal(r->metadata->availability, WR_AV_READY);
    assert_int_equal(r->metadata->residency, WR_RS_HOT);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_is_exist(f, &id), 1);
    for (size_t i = 0; i < u.n; i++) assert_payload(f, &u, i);
    char man[64];
    uint64_t len = 0;
    assert_int_equal(kvc_get_into(f->kv, u.manifest, man, sizeof(man), &len, 1), 0);
    assert_int_equal(len, strlen(u.manifest_body));
    assert_memory_equal(man, u.manifest_body, len);

    /* The import nobody committed is never published, by any leader. */
    sleep_ms(300); /* several ticks of the new leader */
    r = wr_get_md(f, &never);
    assert_int_equal(r->metadata->availability, WR_AV_IMPORTING);
    assert_string_equal(r->metadata->group_key, md_never->group_key);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_is_exist(f, &never), 0);
    wmrpc__weight_metadata__free_unpacked(md, NULL);
    wmrpc__weight_metadata__free_unpacked(md_never, NULL);
}

/* A migration HOT -> COLD killed with its leader mid-way is resumed by the
 * new leader: the same operation id, no fewer members done than were
 * acknowledged, SUCCEEDED with every member done, the revision READY +
 * COLD with every payload cold only (the manifest keeps its memory
 * replica) and every byte readable. */
static void test_ha_cold_migration_resumes_on_the_new_leader(void **state)
{
    cluster *c = *state;
    int leader = start_cluster(c);
    wr_fixture *f = &c->f;
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t1", "mig", "cold", 1);
    wr_upload u;
    memset(&u, 0, sizeof(u));
    publish(c, &id, &u, 60);

    Wmrpc__MetadataResponse *r = NULL;
    assert_int_equal(wr_migrate(f, &id, WR_RS_COLD, generation_of(f, &id), &r), 0);
    uint64_t op_id = r->metadata->operation_id;
    assert_true(op_id > 0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    uint64_t before = wr_wait_progress(f, op_id, 4, WAIT_MS);

    kill_leader(c, leader);

    assert_resumed_to_success(c, op_id, before);
    r = wait_state(f, &id, WR_AV_READY, WR_RS_COLD);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    char key[1200];
    int mem, cold;
    for (size_t i = 0; i < u.n; i++) {
        wr_payload_key(&u, i, key, sizeof(key));
        replicas(f, key, &mem, &cold);
        if (mem != 0 || cold == 0) fail_msg("%s: %d memory and %d cold replicas (wanted cold only)", key, mem, cold);
    }
    replicas(f, u.manifest, &mem, &cold);
    assert_true(mem > 0);
    for (size_t i = 0; i < u.n; i++) assert_payload(f, &u, i);
}

/* A removal killed with its leader mid-way is resumed by the new leader:
 * the same DELETING operation, no fewer members done than acknowledged,
 * SUCCEEDED, the revision a DELETED + ABSENT tombstone, not readable, its
 * group empty. */
static void test_ha_deletion_resumes_on_the_new_leader(void **state)
{
    cluster *c = *state;
    int leader = start_cluster(c);
    wr_fixture *f = &c->f;
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t1", "del", "gone", 1);
    wr_upload u;
    memset(&u, 0, sizeof(u));
    publish(c, &id, &u, 60);

    Wmrpc__MetadataResponse *r = NULL;
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, generation_of(f, &id), &r), 0);
    assert_int_equal(r->metadata->availability, WR_AV_DELETING);
    uint64_t op_id = r->metadata->operation_id;
    assert_true(op_id > 0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    uint64_t before = wr_wait_progress(f, op_id, 4, WAIT_MS);

    kill_leader(c, leader);

    r = wr_get_md(f, &id);
    assert_true(r->metadata->availability == WR_AV_DELETING || r->metadata->availability == WR_AV_DELETED);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_is_exist(f, &id), 0);
    assert_resumed_to_success(c, op_id, before);
    r = wait_state(f, &id, WR_AV_DELETED, WR_RS_ABSENT);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_is_exist(f, &id), 0);
    assert_group_empty(f, u.group);
}

/* weight_upsert PUT_FIRST across two failovers. Killed while the target is
 * being imported: the new leader holds the same claim (request id,
 * creation) in IMPORTING_TARGET and the base is kept READY and readable;
 * the same request resumes the import and commits the target. Killed again
 * while the claim deletes the base: the third leader holds the same claim
 * and the same deletion of the base with no less progress, and the lineage
 * ends with exactly one successor (the base a tombstone, its group empty,
 * the target READY with its bytes). */
static void test_ha_upsert_put_first_resumes_on_the_new_leader(void **state)
{
    cluster *c = *state;
    int leader = start_cluster(c);
    const char *res = "pf";
    Wmrpc__WeightIdentity base_id;
    wr_set_identity(&base_id, "acme", "llm", res, 1);
    wr_upload u;
    memset(&u, 0, sizeof(u));
    publish(c, &base_id, &u, 60);
    weight_identity base = ident(res, 1);
    uint64_t expected = generation_of(&c->f, &base_id);

    weight_store *s = c->s;
    weight_upsert_claim cl, before;
    weight_writer *w = NULL;
    CHECK(s, weight_upsert(s, &base, 2, WEIGHT_UPSERT_PUT_FIRST, "ha-pf", expected, NULL, 0, &cl, &w));
    assert_non_null(w);
    before = wait_claim(c, res, WEIGHT_UPSERT_PUT_FIRST, WEIGHT_PHASE_IMPORTING_TARGET);
    assert_int_equal(before.phase, WEIGHT_PHASE_IMPORTING_TARGET);
    g_dead[g_n_dead++] = w; /* its import dies with the leader */

    leader = kill_leader(c, leader);
    s = c->s;
    weight_upsert_claim after = claim_of(c, res);
    assert_same_claim(&before, &after);
    assert_int_equal(after.phase, WEIGHT_PHASE_IMPORTING_TARGET);
    assert_int_equal(wr_is_exist(&c->f, &base_id), 1); /* PUT_FIRST keeps the base */
    w = NULL;
    CHECK(s, weight_upsert(s, &base, 2, WEIGHT_UPSERT_PUT_FIRST, "ha-pf", expected, NULL, 0, &cl, &w));
    assert_string_equal(cl.request_id, "ha-pf");
    assert_int_equal(cl.created_ms, before.created_ms);
    assert_non_null(w);
    add_model(s, w, 2);
    CHECK(s, weight_writer_commit(w, NULL));

    /* The base is deleted in rounds: kill the leader in the middle. */
    uint64_t done = 0, op_id = base_deletion(c, &base_id, 4, &done);
    before = claim_of(c, res);
    assert_int_equal(before.phase, WEIGHT_PHASE_DELETING_BASE);
    kill_leader(c, leader);
    s = c->s;
    after = claim_of(c, res);
    assert_same_claim(&before, &after);
    assert_int_equal(wr_is_exist(&c->f, &base_id), 0);
    assert_resumed_to_success(c, op_id, done);
    cl = wait_claim(c, res, WEIGHT_UPSERT_PUT_FIRST, WEIGHT_PHASE_COMMITTED);
    assert_int_equal(cl.phase, WEIGHT_PHASE_COMMITTED);
    assert_string_equal(cl.request_id, "ha-pf");
    assert_int_equal(cl.created_ms, before.created_ms);
    assert_one_successor(c, res, u.group);
}

/* weight_upsert DELETE_FIRST across two failovers. Killed while the claim
 * deletes the base: the new leader holds the same claim and the same
 * deletion with no less progress, the base is not readable any more (gone,
 * as the mode says, before any target exists). The same request then gets
 * the target's writer; killed again before its commit: the third leader
 * holds the same claim in IMPORTING_TARGET, the same request resumes the
 * import, and the lineage ends with exactly one successor. */
static void test_ha_upsert_delete_first_resumes_on_the_new_leader(void **state)
{
    cluster *c = *state;
    int leader = start_cluster(c);
    const char *res = "df";
    Wmrpc__WeightIdentity base_id;
    wr_set_identity(&base_id, "acme", "llm", res, 1);
    wr_upload u;
    memset(&u, 0, sizeof(u));
    publish(c, &base_id, &u, 60);
    weight_identity base = ident(res, 1);
    uint64_t expected = generation_of(&c->f, &base_id);

    begin_raw(c, res, WEIGHT_UPSERT_DELETE_FIRST, "ha-df", expected);
    uint64_t done = 0, op_id = base_deletion(c, &base_id, 4, &done);
    weight_upsert_claim before = claim_of(c, res), after, cl;
    assert_int_equal(before.phase, WEIGHT_PHASE_DELETING_BASE);

    leader = kill_leader(c, leader);
    weight_store *s = c->s;
    after = claim_of(c, res);
    assert_same_claim(&before, &after);
    assert_int_equal(wr_is_exist(&c->f, &base_id), 0); /* DELETE_FIRST: the base goes first */
    assert_resumed_to_success(c, op_id, done);

    weight_writer *w = NULL;
    CHECK(s, weight_upsert(s, &base, 2, WEIGHT_UPSERT_DELETE_FIRST, "ha-df", expected, NULL, 0, &cl, &w));
    assert_string_equal(cl.request_id, "ha-df");
    assert_int_equal(cl.created_ms, before.created_ms);
    assert_non_null(w);
    before = wait_claim(c, res, WEIGHT_UPSERT_DELETE_FIRST, WEIGHT_PHASE_IMPORTING_TARGET);
    assert_int_equal(before.phase, WEIGHT_PHASE_IMPORTING_TARGET);
    g_dead[g_n_dead++] = w;

    kill_leader(c, leader);
    s = c->s;
    after = claim_of(c, res);
    assert_same_claim(&before, &after);
    assert_int_equal(after.phase, WEIGHT_PHASE_IMPORTING_TARGET);
    assert_int_equal(wr_is_exist(&c->f, &base_id), 0);
    w = NULL;
    CHECK(s, weight_upsert(s, &base, 2, WEIGHT_UPSERT_DELETE_FIRST, "ha-df", expected, NULL, 0, &cl, &w));
    assert_string_equal(cl.request_id, "ha-df");
    assert_non_null(w);
    add_model(s, w, 2);
    CHECK(s, weight_writer_commit(w, NULL));
    cl = wait_claim(c, res, WEIGHT_UPSERT_DELETE_FIRST, WEIGHT_PHASE_COMMITTED);
    assert_int_equal(cl.phase, WEIGHT_PHASE_COMMITTED);
    assert_int_equal(cl.created_ms, before.created_ms);
    assert_one_successor(c, res, u.group);
}

int main(void)
{
    /* HA_TEST=pattern runs only the matching tests (cmocka's filter). */
    if (getenv("HA_TEST") != NULL) cmocka_set_test_filter(getenv("HA_TEST"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ha_import_resumes_on_the_new_leader, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ha_cold_migration_resumes_on_the_new_leader, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ha_deletion_resumes_on_the_new_leader, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ha_upsert_put_first_resumes_on_the_new_leader, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ha_upsert_delete_first_resumes_on_the_new_leader, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
