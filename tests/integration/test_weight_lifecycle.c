/* test_weight_lifecycle.c -- the reconcile tick on a real master with the
 * real weight_mgmt.so and real nodes.
 *
 * Revisions are published with raw service-16 RPCs and kv_client uploads
 * (weight_rpc.c, shared with test_weight_publish.c); then the lifecycle is
 * watched from outside: GET_METADATA / GET_OPERATION polling with a generous
 * bound, and the replicas of every member through kvc_get. Pinned here: READY
 * is published HOT and converges to the preferred residency; every explicit
 * HOT / COLD / MIXED path; the manifest keeps its memory replica; a lease
 * keeps memory replicas during a migration to COLD and blocks removal; removal
 * runs to a queryable tombstone with an empty group; a cold write that fails
 * keeps the revision READY and the operation retrying until the disk is usable
 * again, and ends FAILED after repair_max_attempts (the revision READY at
 * the residency its replicas have, removable), the residency following the
 * replicas meanwhile; a killed node makes a revision DEGRADED and its return makes it
 * READY; a migration whose revision lost its only replicas ends FAILED (the
 * revision DEGRADED, removable); a new preferred residency while an
 * operation runs is BUSY, nothing changed; SIGKILL of the master in the middle of a migration, of a deletion and
 * of an import; AUTO demotion under memory pressure, least recently used
 * first (renewals and releases count, and survive a SIGKILL); no promotion
 * on access within the migration cooldown. Rounds are small (2 members) and ticks fast (50 ms) so large
 * operations take several rounds. */
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

#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "node_cold.h"
#include "weight_model.h" /* wx_weightctl */
#include "weight_rpc.h"

/* ------------------------------------------------------------------------ */
/* Lifecycle helpers                                                         */
/* ------------------------------------------------------------------------ */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

#define WAIT_MS 30000 /* generous: the machine is shared */

/* Write the config start_lc describes, with weight_migration_cooldown_ms
 * `cooldown` (hx_init done). */
static void config_lc(wr_fixture *f, unsigned members, unsigned cooldown, const char *extra)
{
    char cfg[2048];
    snprintf(cfg, sizeof(cfg),
             "node:\n  segment_dir: \"%s/shm\"\n  segment_bytes: 33554432\n"
             "  cold_dir: \"%s/cold\"\n  poll_ms: 10\n"
             "cluster:\n  weight_migration_cooldown_ms: %u\n"
             "  weight_migration_max_members_per_round: %u\n"
             "  weight_migration_max_bytes_per_round: 1048576\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    config:\n      tick_period_ms: 50\n%s",
             f->m.dir, f->m.dir, cooldown, members, BUILD_DIR, extra ? extra : "");
    assert_int_equal(hx_reconfigure(&f->m, cfg), 0);
}

/* The embedded node with its cold files in <dir>/cold, fast polls, rounds of
 * `members` members, a 100 ms migration cooldown and a 50 ms tick; `extra`
 * is appended. */
static void start_lc(wr_fixture *f, const char *name, unsigned members, const char *extra)
{
    assert_int_equal(hx_init(&f->m, name, NULL), 0);
    config_lc(f, members, 100, extra);
    assert_int_equal(hx_start(&f->m, 10000), 0);
    wr_connect(f);
}

/* Memory and cold replicas of key as the master serves them (complete, on
 * live nodes). -1, -1 when the key does not exist. */
static void replicas(wr_fixture *f, const char *key, int *mem, int *cold)
{
    kvc_object o;
    *mem = *cold = 0;
    int rc = kvc_get(f->kv, key, &o);
    if (rc == SMP_ENOTFOUND) {
        *mem = *cold = -1;
        return;
    }
    if (rc != 0) return;
    for (size_t i = 0; i < o.n_replicas; i++) {
        if (o.replicas[i].status != 1) continue; /* complete only */
        if (o.replicas[i].kind == SMP_REPLICA_MEMORY) (*mem)++;
        else (*cold)++;
    }
}

/* The group holds no object any more (a deleted revision leaves nothing). */
static void assert_group_empty(wr_fixture *f, const char *group)
{
    char **keys = NULL, *next = NULL;
    size_t n = 0;
    assert_int_equal(kvc_list(f->kv, group, NULL, 100, &keys, &n, &next), 0);
    assert_int_equal(n, 0);
    kvc_list_free(keys, n, next);
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

/* Explicit migration at the current generation (retried while another
 * mutation of the revision is being made durable); waits for the end and
 * checks it SUCCEEDED. Returns the metadata afterwards. */
static Wmrpc__MetadataResponse *migrate_and_wait(wr_fixture *f, const Wmrpc__WeightIdentity *id, int target)
{
    Wmrpc__MetadataResponse *r = NULL;
    int st = WR_E_BUSY;
    for (int i = 0; i < 200 && st == WR_E_BUSY; i++) {
        Wmrpc__MetadataResponse *md = wr_get_md(f, id);
        st = wr_migrate(f, id, target, md->metadata->metadata_generation, &r);
        wmrpc__metadata_response__free_unpacked(md, NULL);
        if (st == WR_E_BUSY || st == WR_E_STALE_GENERATION) {
            st = WR_E_BUSY;
            sleep_ms(20);
        }
    }
    if (st != 0) fail_msg("migrate to %d: %d %s", target, st, f->last_error);
    uint64_t op_id = r->metadata->operation_id;
    assert_true(op_id > 0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    Wmrpc__OperationResponse *op = wr_wait_op(f, op_id, WAIT_MS);
    assert_int_equal(op->operation->state, 2); /* SUCCEEDED */
    assert_int_equal(op->operation->members_done, op->operation->members_total);
    wmrpc__operation_response__free_unpacked(op, NULL);
    return wait_state(f, id, WR_AV_READY, target);
}

/* Every payload of u is where `res` says (HOT: memory; COLD: cold and no
 * memory), the manifest keeps a memory replica; returns the bytes of the
 * payloads in memory. */
static uint64_t check_replicas(wr_fixture *f, const wr_upload *u, int res)
{
    uint64_t hot = 0;
    char key[1200];
    int mem, cold;
    for (size_t i = 0; i < u->n; i++) {
        wr_payload_key(u, i, key, sizeof(key));
        replicas(f, key, &mem, &cold);
        if (res == WR_RS_HOT && mem == 0) fail_msg("%s has no memory replica", key);
        if (res == WR_RS_COLD && (mem != 0 || cold == 0))
            fail_msg("%s: %d memory and %d cold replicas (wanted cold only)", key, mem, cold);
        if (res == WR_RS_MIXED && !((mem > 0 && cold == 0) || (mem == 0 && cold > 0) || (mem > 0 && cold > 0)))
            fail_msg("%s is not readable", key);
        if (mem > 0) hot += u->sizes[i];
    }
    replicas(f, u->manifest, &mem, &cold);
    if (mem == 0) fail_msg("the manifest %s lost its memory replica", u->manifest);
    return hot;
}

/* check_replicas of a revision that came back after its node lost its
 * memory: the manifest's memory replica is restored from its cold copy by
 * the plugin's manifest care, apart from the payloads' repair and possibly
 * after the revision is READY again (readable meanwhile from the cold
 * copy), so it is waited for first. */
static uint64_t check_replicas_after_a_loss(wr_fixture *f, const wr_upload *u, int res)
{
    int mem, cold;
    uint64_t end = mono_ms() + WAIT_MS;
    for (replicas(f, u->manifest, &mem, &cold); mem == 0; replicas(f, u->manifest, &mem, &cold)) {
        if (mono_ms() > end) fail_msg("the manifest %s got no memory replica back", u->manifest);
        sleep_ms(20);
    }
    return check_replicas(f, u, res);
}

static uint64_t generation_of(wr_fixture *f, const Wmrpc__WeightIdentity *id)
{
    Wmrpc__MetadataResponse *md = wr_get_md(f, id);
    uint64_t g = md->metadata->metadata_generation;
    wmrpc__metadata_response__free_unpacked(md, NULL);
    return g;
}

static void release_lease(wr_fixture *f, const Wmrpc__WeightIdentity *id, uint64_t lease_id)
{
    int st = WR_E_BUSY;
    for (int i = 0; i < 200 && st == WR_E_BUSY; i++) {
        st = wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, id, lease_id, 0, NULL);
        if (st == WR_E_BUSY) sleep_ms(20);
    }
    assert_int_equal(st, 0);
}

static uint64_t acquire_lease(wr_fixture *f, const Wmrpc__WeightIdentity *id)
{
    Wmrpc__LeaseResponse *lr = NULL;
    int st = WR_E_BUSY;
    for (int i = 0; i < 200 && st == WR_E_BUSY; i++) {
        st = wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, id, 0, 60000, &lr);
        if (st == WR_E_BUSY) sleep_ms(20);
    }
    if (st != 0) fail_msg("lease: %d %s", st, f->last_error);
    uint64_t lid = lr->lease->id;
    wmrpc__lease_response__free_unpacked(lr, NULL);
    return lid;
}

/* Wait until every payload of u has a cold replica (a migration to COLD
 * under a lease gets this far and no further). */
static void wait_cold_copies(wr_fixture *f, const wr_upload *u)
{
    char key[1200];
    int mem, cold;
    uint64_t end = mono_ms() + WAIT_MS;
    for (size_t i = 0; i < u->n;) {
        wr_payload_key(u, i, key, sizeof(key));
        replicas(f, key, &mem, &cold);
        if (cold > 0) {
            i++;
            continue;
        }
        if (mono_ms() > end) fail_msg("%s got no cold replica", key);
        sleep_ms(20);
    }
}

/* Publish u HOT (MANUAL), take a lease (*lease) and start a migration to
 * COLD; return its operation id once every payload has its cold copy -- the
 * lease then holds the operation RUNNING (memory is not released under a
 * lease). */
static uint64_t leased_cold_migration(wr_fixture *f, const Wmrpc__WeightIdentity *id,
                                      wr_upload *u, uint64_t *lease)
{
    Wmrpc__MetadataResponse *r = wr_publish(f, id, WR_RS_HOT, WR_MODE_MANUAL, u);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    *lease = acquire_lease(f, id);
    r = NULL;
    assert_int_equal(wr_migrate(f, id, WR_RS_COLD, generation_of(f, id), &r), 0);
    uint64_t op_id = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    wait_cold_copies(f, u);
    return op_id;
}

static void sizes_fill(wr_upload *u, size_t n, uint64_t base)
{
    u->n = n;
    for (size_t i = 0; i < n; i++) u->sizes[i] = base + 100 * i;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                     */
/* ------------------------------------------------------------------------ */

/* Published READY + HOT, then converged by the tick: preferred COLD leaves
 * every payload with a verified cold replica and no memory replica (the
 * manifest keeps its memory replica); preferred MIXED keeps complete units
 * HOT nearest the ratio and reports it. PINNED converges too and then
 * refuses changes; MANUAL converges and then accepts an explicit one. */
static void test_publish_converges_to_preferred(void **state)
{
    wr_fixture *f = *state;
    start_lc(f, "wl-conv", 4, NULL);
    struct {
        const char *name;
        int pref, mode;
    } cases[] = {
        {"cold-auto", WR_RS_COLD, WR_MODE_AUTO},
        {"mixed-auto", WR_RS_MIXED, WR_MODE_AUTO},
        {"cold-pinned", WR_RS_COLD, WR_MODE_PINNED},
        {"mixed-manual", WR_RS_MIXED, WR_MODE_MANUAL},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        Wmrpc__WeightIdentity id;
        wr_set_identity(&id, "t1", "conv", cases[k].name, 1);
        wr_upload u = {.n = 4, .sizes = {1000, 2000, 3000, 4000}, .per_unit = 1};
        Wmrpc__MetadataResponse *r = wr_publish(f, &id, cases[k].pref, cases[k].mode, &u);
        assert_int_equal(r->metadata->availability, WR_AV_READY);
        assert_int_equal(r->metadata->residency, WR_RS_HOT);
        uint64_t op_id = r->metadata->operation_id;
        assert_true(op_id > 0);
        wmrpc__metadata_response__free_unpacked(r, NULL);
        Wmrpc__OperationResponse *op = wr_wait_op(f, op_id, WAIT_MS);
        assert_int_equal(op->operation->state, 2);
        assert_int_equal(op->operation->bytes_done, 10000);
        wmrpc__operation_response__free_unpacked(op, NULL);
        r = wait_state(f, &id, WR_AV_READY, cases[k].pref);
        uint64_t hot = check_replicas(f, &u, cases[k].pref);
        if (cases[k].pref == WR_RS_MIXED) {
            assert_true(r->metadata->observed_hot_ratio == 0.5);
            assert_int_equal(hot, 5000); /* units 1000 + 4000 or 2000 + 3000 */
        } else {
            assert_true(r->metadata->observed_hot_ratio == 0.0);
            assert_int_equal(hot, 0);
        }
        assert_int_equal(wr_is_exist(f, &id), 1);
        if (cases[k].mode == WR_MODE_PINNED)
            assert_int_equal(wr_migrate(f, &id, WR_RS_HOT, r->metadata->metadata_generation, NULL),
                             WR_E_POLICY_UNSATISFIABLE);
        wmrpc__metadata_response__free_unpacked(r, NULL);
        if (cases[k].mode == WR_MODE_MANUAL) {
            r = migrate_and_wait(f, &id, WR_RS_HOT);
            check_replicas(f, &u, WR_RS_HOT);
            wmrpc__metadata_response__free_unpacked(r, NULL);
        }
    }
    char *metrics = NULL;
    assert_int_equal(hx_http_get(&f->m, "/metrics", &metrics), 200);
    assert_non_null(strstr(metrics, "weight_migrations_completed_total"));
    assert_non_null(strstr(metrics, "weight_migration_processed_bytes_total"));
    assert_non_null(strstr(metrics, "weight_revisions_by_residency{residency=\"COLD\"} 2\n"));
    free(metrics);
}

/* Every explicit path: HOT -> COLD -> HOT, HOT -> MIXED -> COLD and
 * COLD -> MIXED -> HOT, the replicas following each step. */
static void test_every_explicit_path(void **state)
{
    wr_fixture *f = *state;
    start_lc(f, "wl-paths", 2, NULL);
    int paths[3][3] = {{WR_RS_HOT, WR_RS_COLD, WR_RS_HOT},
                       {WR_RS_HOT, WR_RS_MIXED, WR_RS_COLD},
                       {WR_RS_COLD, WR_RS_MIXED, WR_RS_HOT}};
    for (int k = 0; k < 3; k++) {
        Wmrpc__WeightIdentity id;
        char name[32];
        snprintf(name, sizeof(name), "path-%d", k);
        wr_set_identity(&id, "t1", "paths", name, 1);
        wr_upload u = {.n = 6, .sizes = {100, 200, 300, 400, 500, 600}, .per_unit = 2};
        Wmrpc__MetadataResponse *r = wr_publish(f, &id, paths[k][0], WR_MODE_MANUAL, &u);
        wmrpc__metadata_response__free_unpacked(r, NULL);
        r = wait_state(f, &id, WR_AV_READY, paths[k][0]);
        wmrpc__metadata_response__free_unpacked(r, NULL);
        check_replicas(f, &u, paths[k][0]);
        for (int s = 1; s < 3; s++) {
            r = migrate_and_wait(f, &id, paths[k][s]);
            uint64_t hot = check_replicas(f, &u, paths[k][s]);
            if (paths[k][s] == WR_RS_MIXED) {
                /* Units of two payloads: 300, 700, 1100 bytes of 2100;
                 * 1000 and 1100 are equally near 1050: the smaller wins. */
                assert_true(r->metadata->observed_hot_ratio > 0.0 && r->metadata->observed_hot_ratio < 1.0);
                assert_int_equal(hot, 1000);
            }
            wmrpc__metadata_response__free_unpacked(r, NULL);
            assert_int_equal(wr_is_exist(f, &id), 1);
        }
    }
}

/* A lease held across a migration to COLD keeps every memory replica while
 * the cold replicas are created; the operation stays RUNNING and removal is
 * BUSY. Once the lease is released the memory replicas go and the
 * operation completes. */
static void test_lease_blocks_memory_release_during_cold_migration(void **state)
{
    wr_fixture *f = *state;
    start_lc(f, "wl-lease", 2, NULL);
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t1", "lease", "held", 1);
    wr_upload u = {.per_unit = 1};
    sizes_fill(&u, 5, 1000);
    uint64_t lease, op_id = leased_cold_migration(f, &id, &u, &lease);
    Wmrpc__MetadataResponse *r;
    char key[1200];
    int mem, cold;
    sleep_ms(500); /* several more rounds */
    for (size_t i = 0; i < u.n; i++) {
        wr_payload_key(&u, i, key, sizeof(key));
        replicas(f, key, &mem, &cold);
        if (mem == 0) fail_msg("%s lost its memory replica while a lease is held", key);
    }
    int st;
    Wmrpc__OperationResponse *op = wr_get_op(f, op_id, &st);
    assert_int_equal(op->operation->state, 1);
    wmrpc__operation_response__free_unpacked(op, NULL);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, generation_of(f, &id), NULL),
                     WR_E_BUSY);

    release_lease(f, &id, lease);
    op = wr_wait_op(f, op_id, WAIT_MS);
    assert_int_equal(op->operation->state, 2);
    wmrpc__operation_response__free_unpacked(op, NULL);
    r = wait_state(f, &id, WR_AV_READY, WR_RS_COLD);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    check_replicas(f, &u, WR_RS_COLD);
}

/* Removal is BUSY while a lease is held; after its release it is accepted
 * and runs to a DELETED + ABSENT tombstone that stays queryable, with the
 * operation SUCCEEDED and nothing left of the group. */
static void test_remove_runs_to_tombstone(void **state)
{
    wr_fixture *f = *state;
    start_lc(f, "wl-remove", 2, NULL);
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t1", "rm", "gone", 1);
    wr_upload u = {.per_unit = 1};
    sizes_fill(&u, 7, 500);
    Wmrpc__MetadataResponse *r = wr_publish(f, &id, WR_RS_HOT, WR_MODE_AUTO, &u);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    uint64_t lease = acquire_lease(f, &id);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, generation_of(f, &id), NULL),
                     WR_E_BUSY);
    assert_non_null(strstr(f->last_error, "lease"));
    release_lease(f, &id, lease);
    r = NULL;
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, generation_of(f, &id), &r), 0);
    assert_int_equal(r->metadata->availability, WR_AV_DELETING);
    uint64_t op_id = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    Wmrpc__OperationResponse *op = wr_wait_op(f, op_id, WAIT_MS);
    assert_int_equal(op->operation->state, 2);
    assert_int_equal(op->operation->members_done, 8);
    wmrpc__operation_response__free_unpacked(op, NULL);
    r = wait_state(f, &id, WR_AV_DELETED, WR_RS_ABSENT);
    assert_int_equal(r->metadata->active_leases, 0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_is_exist(f, &id), 0);
    assert_group_empty(f, u.group);
    int mem, cold;
    replicas(f, u.manifest, &mem, &cold);
    assert_int_equal(mem, -1);
}

/* Make the cold write of payload i of u fail: a directory (holding a file,
 * in path and inner) sits where the node must rename its verified cold
 * file. key gets the payload's key. */
static void block_cold_file(wr_fixture *f, const wr_upload *u, size_t i, char key[1200], char path[1600],
                            char inner[1700])
{
    /* The bytes of payload i as put_some wrote them, and its cold name. */
    char name[COLD_NAME_MAX];
    unsigned char sha[32];
    unsigned char *data = malloc(u->sizes[i]);
    assert_non_null(data);
    for (uint64_t b = 0; b < u->sizes[i]; b++) data[b] = (unsigned char)(i * 31 + b);
    hx_sha256(data, u->sizes[i], sha);
    free(data);
    wr_payload_key(u, i, key, 1200);
    assert_int_equal(cold_name_for(key, sha, name), 0);
    snprintf(path, 1600, "%s/cold/%s", f->m.dir, name);
    snprintf(inner, 1700, "%s/blocker", path);
    assert_int_equal(mkdir(path, 0700), 0);
    FILE *bf = fopen(inner, "w");
    assert_non_null(bf);
    fclose(bf);
}

/* A cold write that fails (a directory sits where the node must rename the
 * verified cold file of payload 1) leaves the READY revision readable and
 * the operation RUNNING with the error and growing attempts; once the
 * obstacle is gone the operation completes. */
static void test_cold_write_failure_retries(void **state)
{
    wr_fixture *f = *state;
    start_lc(f, "wl-fail", 2, NULL);
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t1", "fail", "disk", 1);
    wr_upload u = {.per_unit = 1};
    sizes_fill(&u, 3, 700);
    Wmrpc__MetadataResponse *r = wr_publish(f, &id, WR_RS_HOT, WR_MODE_MANUAL, &u);
    wmrpc__metadata_response__free_unpacked(r, NULL);

    char key[1200], path[1600], inner[1700];
    block_cold_file(f, &u, 1, key, path, inner);

    r = NULL;
    assert_int_equal(wr_migrate(f, &id, WR_RS_COLD, generation_of(f, &id), &r), 0);
    uint64_t op_id = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    uint64_t end = mono_ms() + WAIT_MS;
    for (;;) {
        int st;
        Wmrpc__OperationResponse *op = wr_get_op(f, op_id, &st);
        assert_int_equal(st, 0);
        int enough = op->operation->attempts > 1 && op->operation->error && op->operation->error[0];
        if (enough) {
            assert_int_equal(op->operation->state, 1);
            assert_non_null(strstr(op->operation->error, "cold replica"));
        }
        wmrpc__operation_response__free_unpacked(op, NULL);
        if (enough) break;
        if (mono_ms() > end) fail_msg("the failing cold write was not retried");
        sleep_ms(20);
    }
    Wmrpc__MetadataResponse *md = wr_get_md(f, &id);
    assert_int_equal(md->metadata->availability, WR_AV_READY);
    assert_int_equal(md->metadata->operation_id, op_id);
    wmrpc__metadata_response__free_unpacked(md, NULL);
    assert_int_equal(wr_is_exist(f, &id), 1);
    int mem, cold;
    replicas(f, key, &mem, &cold);
    assert_true(mem > 0);
    char *metrics = NULL;
    assert_int_equal(hx_http_get(&f->m, "/metrics", &metrics), 200);
    assert_null(strstr(metrics, "weight_operation_failures_total 0\n"));
    free(metrics);

    assert_int_equal(unlink(inner), 0);
    assert_int_equal(rmdir(path), 0);
    Wmrpc__OperationResponse *op = wr_wait_op(f, op_id, WAIT_MS);
    assert_int_equal(op->operation->state, 2);
    assert_true(op->operation->attempts > 1);
    wmrpc__operation_response__free_unpacked(op, NULL);
    r = wait_state(f, &id, WR_AV_READY, WR_RS_COLD);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    check_replicas(f, &u, WR_RS_COLD);
}

/* The lines of the master's log holding both a and b. */
static int log_lines(wr_fixture *f, const char *a, const char *b)
{
    char *line = NULL;
    size_t cap = 0;
    int n = 0;
    FILE *lf = fopen(f->m.log, "r");
    assert_non_null(lf);
    while (getline(&line, &cap, lf) > 0) n += strstr(line, a) != NULL && strstr(line, b) != NULL;
    free(line);
    fclose(lf);
    return n;
}

/* A migration to COLD whose cold write keeps failing ends FAILED after
 * repair_max_attempts (3 here) failed batches, with the last error: the
 * revision stays READY with no operation at the residency its replicas
 * have (payload 0 went COLD, payload 1 kept its memory: MIXED) and nothing
 * dropped; another migration and then the removal are accepted (it retried
 * for ever and held the revision BUSY; trial). */
static void test_failing_migration_gives_up(void **state)
{
    wr_fixture *f = *state;
    start_lc(f, "wl-giveup", 2, "      repair_max_attempts: 3\n");
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t1", "giveup", "disk", 1);
    wr_upload u = {.per_unit = 1};
    sizes_fill(&u, 3, 700);
    wmrpc__metadata_response__free_unpacked(wr_publish(f, &id, WR_RS_HOT, WR_MODE_MANUAL, &u), NULL);
    char key[1200], path[1600], inner[1700];
    block_cold_file(f, &u, 1, key, path, inner);

    Wmrpc__MetadataResponse *r = NULL;
    assert_int_equal(wr_migrate(f, &id, WR_RS_COLD, generation_of(f, &id), &r), 0);
    const uint64_t mig_id = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    Wmrpc__OperationResponse *op = wr_wait_op(f, mig_id, WAIT_MS);
    assert_int_equal(op->operation->state, 3); /* FAILED */
    assert_int_equal(op->operation->attempts, 3);
    if (strstr(op->operation->error, "gave up after 3 attempts (repair_max_attempts)") == NULL ||
        strstr(op->operation->error, "cold replica") == NULL)
        fail_msg("ended with: %s", op->operation->error);
    wmrpc__operation_response__free_unpacked(op, NULL);
    r = wait_state(f, &id, WR_AV_READY, WR_RS_MIXED);
    assert_true(r->metadata->observed_hot_ratio > 0.0 && r->metadata->observed_hot_ratio < 1.0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_is_exist(f, &id), 1);
    check_replicas(f, &u, WR_RS_MIXED); /* every payload readable, the manifest in memory */
    int mem, cold, hot = 0;
    for (size_t i = 0; i < u.n; i++) {
        wr_payload_key(&u, i, key, sizeof(key));
        replicas(f, key, &mem, &cold);
        if (i == 1) assert_true(mem > 0 && cold == 0); /* its cold write never succeeded */
        hot += mem > 0 && cold == 0;
    }
    assert_true(hot < 3); /* another payload went COLD: the residency is MIXED */

    wmrpc__metadata_response__free_unpacked(migrate_and_wait(f, &id, WR_RS_HOT), NULL);
    check_replicas(f, &u, WR_RS_HOT);
    r = NULL;
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, generation_of(f, &id), &r), 0);
    uint64_t op_id = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    op = wr_wait_op(f, op_id, WAIT_MS);
    assert_int_equal(op->operation->state, 2);
    wmrpc__operation_response__free_unpacked(op, NULL);
    wmrpc__metadata_response__free_unpacked(wait_state(f, &id, WR_AV_DELETED, WR_RS_ABSENT), NULL);
    /* One line per failed attempt, one for the end, none after it. */
    char want[128];
    snprintf(want, sizeof(want), "operation %llu on ", (unsigned long long)mig_id);
    assert_int_equal(log_lines(f, want, "(attempt "), 3);
    snprintf(want, sizeof(want), "migration %llu of ", (unsigned long long)mig_id);
    assert_int_equal(log_lines(f, want, "gave up after 3 attempts"), 1);
    assert_int_equal(unlink(inner), 0);
    assert_int_equal(rmdir(path), 0);
}

/* While a migration to COLD is held by a failing cold write (payload 4 of
 * 6), the revision's residency follows its replicas: MIXED with a hot ratio
 * in (0, 1) once members went COLD, with the operation still active (it
 * read HOT 1.000 until the operation ended; trial); once the obstacle is
 * gone it ends COLD. */
static void test_residency_follows_a_migration_in_progress(void **state)
{
    wr_fixture *f = *state;
    start_lc(f, "wl-partial", 2, NULL);
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t1", "partial", "disk", 1);
    wr_upload u = {.per_unit = 1};
    sizes_fill(&u, 6, 700);
    wmrpc__metadata_response__free_unpacked(wr_publish(f, &id, WR_RS_HOT, WR_MODE_MANUAL, &u), NULL);
    char key[1200], path[1600], inner[1700];
    block_cold_file(f, &u, 4, key, path, inner);

    Wmrpc__MetadataResponse *r = NULL;
    assert_int_equal(wr_migrate(f, &id, WR_RS_COLD, generation_of(f, &id), &r), 0);
    uint64_t op_id = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    for (uint64_t end = mono_ms() + WAIT_MS;;) {
        r = wr_get_md(f, &id);
        assert_int_equal(r->metadata->operation_id, op_id); /* still RUNNING */
        int mixed = r->metadata->residency == WR_RS_MIXED;
        double ratio = r->metadata->observed_hot_ratio;
        if (!mixed && r->metadata->residency != WR_RS_HOT)
            fail_msg("residency %u during the migration", r->metadata->residency);
        wmrpc__metadata_response__free_unpacked(r, NULL);
        if (mixed) {
            assert_true(ratio > 0.0 && ratio < 1.0);
            break;
        }
        if (mono_ms() > end) fail_msg("the revision still reads HOT with members released");
        sleep_ms(20);
    }
    int mem, cold;
    replicas(f, key, &mem, &cold);
    assert_true(mem > 0 && cold == 0);

    assert_int_equal(unlink(inner), 0);
    assert_int_equal(rmdir(path), 0);
    Wmrpc__OperationResponse *op = wr_wait_op(f, op_id, WAIT_MS);
    assert_int_equal(op->operation->state, 2);
    wmrpc__operation_response__free_unpacked(op, NULL);
    r = wait_state(f, &id, WR_AV_READY, WR_RS_COLD);
    assert_true(r->metadata->observed_hot_ratio == 0.0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    check_replicas(f, &u, WR_RS_COLD);
}

/* A master with the weight plugin and no embedded node (the test starts its
 * store_node processes), which takes a node for down after timeout_ms of
 * silence. */
static void start_without_node(wr_fixture *f, const char *name, int timeout_ms, const char *plugin_extra)
{
    char cfg[1024];
    assert_int_equal(hx_init(&f->m, name, NULL), 0);
    snprintf(cfg, sizeof(cfg),
             "node:\n  embedded: false\n  timeout_ms: %d\n  poll_ms: 50\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    config:\n      tick_period_ms: 50\n%s",
             timeout_ms, BUILD_DIR, plugin_extra ? plugin_extra : "");
    assert_int_equal(hx_reconfigure(&f->m, cfg), 0);
    assert_int_equal(hx_start(&f->m, 10000), 0);
}

/* start_without_node with one store_node, "node-a", registered (*a), and a
 * client connected; then a revision t1/ns/v@1 of 4 payloads (1,000 bytes
 * and up, a unit each) published HOT, MANUAL, into *id and *u. */
static void one_node_and_a_hot_revision(wr_fixture *f, const char *name, const char *plugin_extra,
                                        hx_node *a, const char *ns, Wmrpc__WeightIdentity *id,
                                        wr_upload *u)
{
    start_without_node(f, name, 600, plugin_extra);
    assert_int_equal(hx_node_start(&f->m, a, "node-a", 16u << 20), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    wr_connect(f);
    wr_set_identity(id, "t1", ns, "v", 1);
    memset(u, 0, sizeof(*u));
    u->per_unit = 1;
    sizes_fill(u, 4, 1000);
    wmrpc__metadata_response__free_unpacked(wr_publish(f, id, WR_RS_HOT, WR_MODE_MANUAL, u), NULL);
}

/* Two store_node processes: killing the node that holds a payload makes the
 * READY revision DEGRADED (not is_exist); restarting it on its segment makes
 * the revision READY again. */
static void test_killed_node_degrades_then_recovers(void **state)
{
    wr_fixture *f = *state;
    start_without_node(f, "wl-node", 600, NULL);
    hx_node a, b;
    assert_int_equal(hx_node_start(&f->m, &a, "node-a", 16u << 20), 0);
    assert_int_equal(hx_node_start(&f->m, &b, "node-b", 16u << 20), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, 10000), 0);
    wr_connect(f);

    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t1", "node", "lost", 1);
    wr_upload u = {.per_unit = 1};
    sizes_fill(&u, 6, 1000);
    Wmrpc__MetadataResponse *r = wr_publish(f, &id, WR_RS_HOT, WR_MODE_MANUAL, &u);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_is_exist(f, &id), 1);

    /* Kill the node holding payload 0. */
    char key[1200];
    kvc_object o;
    wr_payload_key(&u, 0, key, sizeof(key));
    assert_int_equal(kvc_get(f->kv, key, &o), 0);
    hx_node *victim = strcmp(o.replicas[0].node, "node-a") == 0 ? &a : &b;
    hx_node_kill(victim);
    r = wait_state(f, &id, WR_AV_DEGRADED, -1);
    /* the residency the surviving replicas show, not HOT as before the loss */
    if (r->metadata->residency == WR_RS_HOT || r->metadata->observed_hot_ratio >= 1.0)
        fail_msg("DEGRADED with residency %u, hot ratio %g", r->metadata->residency,
                 r->metadata->observed_hot_ratio);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_is_exist(f, &id), 0);

    assert_int_equal(hx_node_start(&f->m, victim, victim == &a ? "node-a" : "node-b", 16u << 20), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, 10000), 0);
    r = wait_state(f, &id, WR_AV_READY, WR_RS_HOT);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_is_exist(f, &id), 1);
    wr_disconnect(f);
    hx_node_kill(&a);
    hx_node_kill(&b);
}

/* A migration whose revision loses its only replicas on the way: the node
 * is stopped (SIGSTOP: no cold copy can be made) right after a migration to
 * COLD is accepted, then killed and started on a new segment file (its
 * memory lost). The revision is DEGRADED, and the migration, which could
 * only wait for members that no longer exist, ends FAILED after
 * degraded_migration_wait_ms with an error saying so; the revision stays
 * DEGRADED with no operation, so it can be removed. (Before, the migration
 * stayed RUNNING for good and the removal was refused BUSY.) */
static void test_migration_of_a_revision_that_lost_its_memory_fails(void **state)
{
    wr_fixture *f = *state;
    char seg[700];
    hx_node a;
    Wmrpc__WeightIdentity id;
    wr_upload u;
    Wmrpc__MetadataResponse *r;
    one_node_and_a_hot_revision(f, "wl-lostmig", "      degraded_migration_wait_ms: 500\n", &a, "lostmig",
                                &id, &u);

    assert_int_equal(kill(a.pid, SIGSTOP), 0);
    r = NULL;
    assert_int_equal(wr_migrate(f, &id, WR_RS_COLD, generation_of(f, &id), &r), 0);
    uint64_t op_id = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_true(op_id != 0);
    hx_node_kill(&a); /* SIGKILL ends a stopped process too */
    snprintf(seg, sizeof(seg), "%s/node-a.seg", a.segment_dir);
    assert_int_equal(unlink(seg), 0);
    assert_int_equal(hx_node_start(&f->m, &a, "node-a", 16u << 20), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);

    Wmrpc__OperationResponse *op = wr_wait_op(f, op_id, WAIT_MS);
    assert_int_equal(op->operation->state, 3); /* FAILED */
    if (strstr(op->operation->error, "DEGRADED") == NULL) fail_msg("error: %s", op->operation->error);
    wmrpc__operation_response__free_unpacked(op, NULL);
    r = wait_state(f, &id, WR_AV_DEGRADED, -1);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    r = NULL;
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, generation_of(f, &id), &r), 0);
    assert_int_equal(r->metadata->availability, WR_AV_DELETING);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    r = wait_state(f, &id, WR_AV_DELETED, WR_RS_ABSENT);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    wr_disconnect(f);
    hx_node_kill(&a);
}

/* Migrate the HOT revision id to COLD and back: HOT again, its payloads'
 * cold files kept (what a repair of its memory copies from). */
static void hot_with_cold_copies(wr_fixture *f, const Wmrpc__WeightIdentity *id)
{
    wmrpc__metadata_response__free_unpacked(migrate_and_wait(f, id, WR_RS_COLD), NULL);
    wmrpc__metadata_response__free_unpacked(migrate_and_wait(f, id, WR_RS_HOT), NULL);
}

/* Kill node *a (the revision id turns DEGRADED + ABSENT: nothing is
 * readable), then start it again on a new segment file: its memory is
 * gone, its cold files are back. */
static void lose_the_node_and_its_memory(wr_fixture *f, hx_node *a, const Wmrpc__WeightIdentity *id)
{
    char seg[700];
    hx_node_kill(a);
    Wmrpc__MetadataResponse *r = wait_state(f, id, WR_AV_DEGRADED, WR_RS_ABSENT);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    snprintf(seg, sizeof(seg), "%s/node-a.seg", a->segment_dir);
    assert_int_equal(unlink(seg), 0);
    assert_int_equal(hx_node_start(&f->m, a, "node-a", 16u << 20), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
}

/* A revision lost with its node comes back where it was before the loss,
 * not where the surviving replicas happen to be. HOT (MANUAL), COLD once
 * so its payloads keep cold files: its node dies (DEGRADED + ABSENT, the
 * record keeps HOT as where it was) and returns with its memory emptied;
 * only cold replicas remain, and the revision is repaired back to HOT
 * (before, it was recorded READY + COLD and stayed there). Then migrated
 * to COLD explicitly (the policy still prefers HOT): the same loss brings
 * it back COLD -- where it was, not what the policy prefers. */
static void test_a_lost_revision_comes_back_where_it_was(void **state)
{
    wr_fixture *f = *state;
    hx_node a;
    Wmrpc__WeightIdentity id;
    wr_upload u;
    Wmrpc__MetadataResponse *r;
    one_node_and_a_hot_revision(f, "wl-back", NULL, &a, "back", &id, &u);
    hot_with_cold_copies(f, &id);

    lose_the_node_and_its_memory(f, &a, &id);
    if (!hx_log_contains(&f->m, "becomes DEGRADED (it belongs HOT: it goes there")) {
        hx_print_log(&f->m);
        fail_msg("the master did not say where the revision belongs");
    }
    r = wait_state(f, &id, WR_AV_READY, WR_RS_HOT);
    assert_int_equal(r->metadata->policy->preferred_residency, WR_RS_HOT);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    check_replicas_after_a_loss(f, &u, WR_RS_HOT);

    wmrpc__metadata_response__free_unpacked(migrate_and_wait(f, &id, WR_RS_COLD), NULL);
    lose_the_node_and_its_memory(f, &a, &id);
    r = wait_state(f, &id, WR_AV_READY, WR_RS_COLD);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    check_replicas_after_a_loss(f, &u, WR_RS_COLD);
    wr_disconnect(f);
    hx_node_kill(&a);
}

/* A MIXED revision lost with its node comes back MIXED at the ratio it had
 * (before, the repair compared the ratio it found with the DEGRADED
 * record's, 0, and recorded it READY + COLD). */
static void test_a_mixed_revision_comes_back_mixed(void **state)
{
    wr_fixture *f = *state;
    hx_node a;
    Wmrpc__WeightIdentity id;
    wr_upload u;
    one_node_and_a_hot_revision(f, "wl-mixed", NULL, &a, "mixed", &id, &u);
    wmrpc__metadata_response__free_unpacked(migrate_and_wait(f, &id, WR_RS_COLD), NULL);
    Wmrpc__MetadataResponse *r = migrate_and_wait(f, &id, WR_RS_MIXED);
    double ratio = r->metadata->observed_hot_ratio;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_true(ratio > 0.0 && ratio < 1.0);

    lose_the_node_and_its_memory(f, &a, &id);
    r = wait_state(f, &id, WR_AV_READY, WR_RS_MIXED);
    if (r->metadata->observed_hot_ratio != ratio)
        fail_msg("back at ratio %g, not %g", r->metadata->observed_hot_ratio, ratio);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    check_replicas_after_a_loss(f, &u, WR_RS_MIXED);
    wr_disconnect(f);
    hx_node_kill(&a);
}

/* weightctl ARGS exits 0 and its output holds want. */
static void info_says(wr_fixture *f, const char *args, const char *want)
{
    char out[8192];
    if (wx_weightctl(&f->m, out, sizeof(out), args) != 0 || strstr(out, want) == NULL)
        fail_msg("weightctl %s said: %s (wanted: %s)", args, out, want);
}

/* While a revision is DEGRADED with its node away: an explicit repair,
 * which has nothing to copy from, is refused NOT_READY with the reason and
 * nothing changes (before, it was accepted, failed its attempts for some
 * 25 s holding the revision BUSY, and its giving up then kept the revision
 * from coming back where it was); a policy update to COLD is accepted, and
 * when the node returns with its memory intact the revision goes where the
 * policy now says -- a migration releases the memory a repair would keep
 * (before, it came back HOT, preferred COLD, and stayed so). `weightctl
 * info` says where the revision goes back, before and after the update,
 * and nothing of it once the revision is READY. */
static void test_a_degraded_revision_follows_a_new_policy(void **state)
{
    wr_fixture *f = *state;
    hx_node a;
    Wmrpc__WeightIdentity id;
    wr_upload u;
    one_node_and_a_hot_revision(f, "wl-degpol", NULL, &a, "degpol", &id, &u);
    hot_with_cold_copies(f, &id);
    hx_node_kill(&a);
    Wmrpc__MetadataResponse *r = wait_state(f, &id, WR_AV_DEGRADED, WR_RS_ABSENT);
    assert_int_equal(r->metadata->degraded_from, WR_RS_HOT);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    info_says(f, "--tenant t1 info degpol/v/main@1", "goes back to  HOT once its manifest and members are readable\n");

    uint64_t gen = generation_of(f, &id);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REPAIR, &id, gen, NULL), WR_E_NOT_READY);
    if (strstr(f->last_error, "4 member(s) and the manifest have no readable replica to repair from") == NULL)
        fail_msg("the repair was refused with: %s", f->last_error);
    assert_int_equal(generation_of(f, &id), gen);
    /* Its objects are on a node that is down, not lost: fsck says the node
     * was not checked (exit 1), and neither "clean" nor "no replica left". */
    char out[8192];
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "fsck"), 1);
    if (strstr(out, "1 nodes holding a segment are not up: not checked\n") == NULL ||
        strstr(out, "no replica left") != NULL || strstr(out, "\nclean\n") != NULL ||
        strstr(out, "clean where checked (exit 1: not everything was)\n") == NULL)
        fail_msg("fsck with the node down said: %s", out);

    assert_int_equal(wr_update_policy(f, &id, WR_RS_COLD, WR_MODE_MANUAL, gen, NULL), 0);
    info_says(f, "--tenant t1 info degpol/v/main@1", "goes back to  COLD once its manifest and members are readable\n");
    info_says(f, "--tenant t1 --json info degpol/v/main@1",
              ",\"degraded_from\":{\"residency\":\"COLD\",\"hot_ratio\":0}");
    assert_int_equal(hx_node_start(&f->m, &a, "node-a", 16u << 20), 0); /* its segment kept */
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    r = wait_state(f, &id, WR_AV_READY, WR_RS_COLD);
    assert_int_equal(r->metadata->policy->preferred_residency, WR_RS_COLD);
    assert_int_equal(r->metadata->degraded_from, 0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wx_weightctl(&f->m, out, sizeof(out), "--tenant t1 info degpol/v/main@1"), 0);
    if (strstr(out, "goes back to") != NULL) fail_msg("a READY revision's info says: %s", out);
    check_replicas_after_a_loss(f, &u, WR_RS_COLD);
    if (!hx_log_contains(&f->m, "it belongs COLD (ratio 0.000): migrating")) {
        hx_print_log(&f->m);
        fail_msg("the master did not say it migrates the revision where it belongs");
    }
    wr_disconnect(f);
    hx_node_kill(&a);
}

/* A DEGRADED revision whose migration still runs refuses a new preferred
 * residency BUSY, as a READY one does: its migration would take it to its
 * own target when the members return, and the update would be lost (a
 * trial found it accepted and then ignored). A change of mode alone, which
 * moves nothing, is accepted. */
static void test_a_degraded_revision_with_an_operation_refuses_a_new_residency(void **state)
{
    wr_fixture *f = *state;
    hx_node a;
    Wmrpc__WeightIdentity id;
    wr_upload u;
    Wmrpc__MetadataResponse *r = NULL;
    one_node_and_a_hot_revision(f, "wl-degbusy", NULL, &a, "degbusy", &id, &u);
    assert_int_equal(kill(a.pid, SIGSTOP), 0); /* no cold copy can be made */
    assert_int_equal(wr_migrate(f, &id, WR_RS_COLD, generation_of(f, &id), &r), 0);
    uint64_t op_id = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    for (uint64_t end = mono_ms() + WAIT_MS;;) {
        r = wr_get_md(f, &id);
        int degraded = r->metadata->availability == WR_AV_DEGRADED;
        assert_int_equal(r->metadata->operation_id, op_id);
        wmrpc__metadata_response__free_unpacked(r, NULL);
        if (degraded) break;
        if (mono_ms() > end) fail_msg("the revision did not turn DEGRADED with its node stopped");
        sleep_ms(20);
    }
    uint64_t gen = generation_of(f, &id);
    assert_int_equal(wr_update_policy(f, &id, WR_RS_MIXED, WR_MODE_MANUAL, gen, NULL), WR_E_BUSY);
    if (strstr(f->last_error, "has active operation") == NULL) fail_msg("refused with: %s", f->last_error);
    assert_int_equal(generation_of(f, &id), gen);
    assert_int_equal(wr_update_policy(f, &id, WR_RS_HOT, WR_MODE_AUTO, gen, NULL), 0);
    wr_disconnect(f);
    hx_node_kill(&a); /* SIGKILL ends a stopped process too */
}

/* Update the policy of id at its current generation (retried while another
 * mutation of it is being made durable); 0 or the refusal's status. */
static int update_policy_now(wr_fixture *f, const Wmrpc__WeightIdentity *id, int preferred, int mode)
{
    int st = WR_E_BUSY;
    for (int i = 0; i < 200; i++) {
        st = wr_update_policy(f, id, preferred, mode, generation_of(f, id), NULL);
        if (!(st == WR_E_STALE_GENERATION ||
              (st == WR_E_BUSY && strstr(f->last_error, "being made durable") != NULL)))
            break;
        sleep_ms(20);
    }
    return st;
}

/* A new preferred residency while an operation is active is BUSY naming the
 * operation (id, kind, target), nothing changed -- also when the revision
 * already shows that residency: a revision preferring COLD, now HOT, with a
 * migration to COLD held RUNNING by a lease, refuses preferred HOT (it was
 * taken, and the migration then left it COLD with preferred HOT for ever;
 * trial). A change of mode alone is taken; once the operation ended the
 * same update is accepted and converged to. */
static void test_a_new_residency_during_an_operation_is_busy(void **state)
{
    wr_fixture *f = *state;
    start_lc(f, "wl-polbusy", 2, NULL);
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t1", "polbusy", "r", 1);
    wr_upload u = {.per_unit = 1};
    sizes_fill(&u, 3, 700);
    wmrpc__metadata_response__free_unpacked(wr_publish(f, &id, WR_RS_COLD, WR_MODE_MANUAL, &u), NULL);
    wmrpc__metadata_response__free_unpacked(wait_state(f, &id, WR_AV_READY, WR_RS_COLD), NULL);
    wmrpc__metadata_response__free_unpacked(migrate_and_wait(f, &id, WR_RS_HOT), NULL);

    uint64_t lease = acquire_lease(f, &id);
    Wmrpc__MetadataResponse *r = NULL;
    assert_int_equal(wr_migrate(f, &id, WR_RS_COLD, generation_of(f, &id), &r), 0);
    uint64_t op_id = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    wait_cold_copies(f, &u); /* the lease now holds the operation RUNNING */

    uint64_t gen = generation_of(f, &id);
    assert_int_equal(wr_update_policy(f, &id, WR_RS_HOT, WR_MODE_MANUAL, gen, NULL), WR_E_BUSY);
    char want[64];
    snprintf(want, sizeof(want), "active operation %llu (MIGRATING to COLD)", (unsigned long long)op_id);
    if (strstr(f->last_error, want) == NULL || strstr(f->last_error, "nothing was changed") == NULL)
        fail_msg("refused with: %s", f->last_error);
    assert_int_equal(wr_update_policy(f, &id, WR_RS_MIXED, WR_MODE_MANUAL, gen, NULL), WR_E_BUSY);
    r = wr_get_md(f, &id);
    assert_int_equal(r->metadata->metadata_generation, gen);
    assert_int_equal(r->metadata->policy->preferred_residency, WR_RS_COLD);
    assert_int_equal(r->metadata->operation_id, op_id);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(update_policy_now(f, &id, WR_RS_COLD, WR_MODE_AUTO), 0); /* mode only */

    release_lease(f, &id, lease);
    Wmrpc__OperationResponse *op = wr_wait_op(f, op_id, WAIT_MS);
    assert_int_equal(op->operation->state, 2);
    wmrpc__operation_response__free_unpacked(op, NULL);
    r = wait_state(f, &id, WR_AV_READY, WR_RS_COLD);
    assert_int_equal(r->metadata->policy->preferred_residency, WR_RS_COLD);
    assert_int_equal(r->metadata->policy->migration_mode, WR_MODE_AUTO);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(update_policy_now(f, &id, WR_RS_HOT, WR_MODE_MANUAL), 0);
    wmrpc__metadata_response__free_unpacked(wait_state(f, &id, WR_AV_READY, WR_RS_HOT), NULL);
    check_replicas(f, &u, WR_RS_HOT);
}

static void restart_master(wr_fixture *f)
{
    wr_disconnect(f);
    hx_kill(&f->m);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    wr_connect(f);
}

/* The value of the metric line starting with `line` (-1: absent). */
static double metric_value(wr_fixture *f, const char *line)
{
    char *metrics = NULL;
    assert_int_equal(hx_http_get(&f->m, "/metrics", &metrics), 200);
    const char *at = strstr(metrics, line);
    double v = at != NULL ? strtod(at + strlen(line), NULL) : -1.0;
    free(metrics);
    return v;
}

/* The migration cooldown holds an access promotion: an AUTO revision
 * preferring HOT, moved COLD, is read (a lease) within its 10-minute
 * cooldown: the lease is granted alone -- no operation, no new generation,
 * COLD, promote/access 0 (a revision demoted under memory pressure went
 * straight back HOT on the next read, freeing nothing; trial). The same
 * master restarted with a cooldown of 0 promotes it on the next read. */
static void test_access_promotion_waits_for_the_cooldown(void **state)
{
    wr_fixture *f = *state;
    assert_int_equal(hx_init(&f->m, "wl-cool", NULL), 0);
    config_lc(f, 2, 600000, NULL);
    assert_int_equal(hx_start(&f->m, 10000), 0);
    wr_connect(f);
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t1", "cool", "r", 1);
    wr_upload u = {.per_unit = 1};
    sizes_fill(&u, 3, 700);
    wmrpc__metadata_response__free_unpacked(wr_publish(f, &id, WR_RS_HOT, WR_MODE_AUTO, &u), NULL);
    wmrpc__metadata_response__free_unpacked(migrate_and_wait(f, &id, WR_RS_COLD), NULL);

    const char *promoted = "weight_auto_migrations_total{direction=\"promote\",reason=\"access\"} ";
    uint64_t gen = generation_of(f, &id);
    uint64_t lease = acquire_lease(f, &id);
    Wmrpc__MetadataResponse *r = wr_get_md(f, &id);
    assert_int_equal(r->metadata->operation_id, 0);
    assert_int_equal(r->metadata->metadata_generation, gen);
    assert_int_equal(r->metadata->residency, WR_RS_COLD);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_true(metric_value(f, promoted) == 0.0);
    release_lease(f, &id, lease);
    check_replicas(f, &u, WR_RS_COLD);

    config_lc(f, 2, 0, NULL);
    restart_master(f);
    lease = acquire_lease(f, &id);
    r = wr_get_md(f, &id);
    assert_true(r->metadata->operation_id != 0);
    assert_true(r->metadata->metadata_generation > gen);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_true(metric_value(f, promoted) == 1.0);
    release_lease(f, &id, lease);
    wmrpc__metadata_response__free_unpacked(wait_state(f, &id, WR_AV_READY, WR_RS_HOT), NULL);
}

/* SIGKILL of the master in the middle of a migration to COLD and then of a
 * deletion: after the restart the same operation (same id, progress not
 * below what was persisted) resumes from its cursor and completes. */
static void test_master_killed_mid_migration_and_deletion(void **state)
{
    wr_fixture *f = *state;
    start_lc(f, "wl-kill", 2, NULL);
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t1", "kill", "big", 1);
    wr_upload u = {.per_unit = 1};
    sizes_fill(&u, 60, 256);
    Wmrpc__MetadataResponse *r = wr_publish(f, &id, WR_RS_HOT, WR_MODE_MANUAL, &u);
    wmrpc__metadata_response__free_unpacked(r, NULL);

    r = NULL;
    assert_int_equal(wr_migrate(f, &id, WR_RS_COLD, generation_of(f, &id), &r), 0);
    uint64_t op_id = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    uint64_t before = wr_wait_progress(f, op_id, 4, WAIT_MS);
    restart_master(f);
    int st;
    Wmrpc__OperationResponse *op = wr_get_op(f, op_id, &st);
    assert_int_equal(st, 0);
    assert_true(op->operation->members_done >= before);
    assert_true(op->operation->members_done < op->operation->members_total ||
                op->operation->state == 2);
    wmrpc__operation_response__free_unpacked(op, NULL);
    op = wr_wait_op(f, op_id, WAIT_MS);
    assert_int_equal(op->operation->state, 2);
    assert_int_equal(op->operation->members_done, 60);
    wmrpc__operation_response__free_unpacked(op, NULL);
    r = wait_state(f, &id, WR_AV_READY, WR_RS_COLD);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    /* (No kvc_get here: its per-object read leases would hold the
     * removal below back until they expire.) */
    assert_int_equal(wr_is_exist(f, &id), 1);

    r = NULL;
    int rs = WR_E_BUSY;
    for (int i = 0; i < 200 && rs == WR_E_BUSY; i++) {
        rs = wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, generation_of(f, &id), &r);
        if (rs == WR_E_BUSY) sleep_ms(20);
    }
    assert_int_equal(rs, 0);
    op_id = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    before = wr_wait_progress(f, op_id, 4, WAIT_MS);
    restart_master(f);
    op = wr_get_op(f, op_id, &st);
    assert_int_equal(st, 0);
    assert_true(op->operation->members_done >= before);
    wmrpc__operation_response__free_unpacked(op, NULL);
    op = wr_wait_op(f, op_id, WAIT_MS);
    assert_int_equal(op->operation->state, 2);
    wmrpc__operation_response__free_unpacked(op, NULL);
    r = wait_state(f, &id, WR_AV_DELETED, WR_RS_ABSENT);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_group_empty(f, u.group);
}

/* After a restart the reconcile ticks wait until the node holding the
 * replicas has registered again (node.timeout_ms at most): a migration left
 * RUNNING resumes on the replicas the node really reports instead of judging
 * members nobody has heard about, and the revision is not marked DEGRADED.
 * A node that stays silent past the timeout is lost, and treated so: its
 * revisions become DEGRADED, and READY again when it is back. */
static void test_restart_waits_for_the_nodes(void **state)
{
    wr_fixture *f = *state;
    hx_node a;
    start_without_node(f, "wl-settle", 2000, NULL);
    assert_int_equal(hx_node_start(&f->m, &a, "node-a", 16u << 20), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    wr_connect(f);

    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t1", "settle", "model", 1);
    wr_upload u = {.per_unit = 1};
    sizes_fill(&u, 4, 1000);
    uint64_t lease, op_id = leased_cold_migration(f, &id, &u, &lease);
    Wmrpc__MetadataResponse *r;

    /* The master restarts while the node is away: for half the timeout the
     * revision stays READY with its migration RUNNING. */
    hx_node_kill(&a);
    restart_master(f);
    char *health = NULL;
    assert_int_equal(hx_http_get(&f->m, "/health", &health), 200);
    assert_non_null(strstr(health, "reconcile waits for the nodes"));
    free(health);
    uint64_t end = mono_ms() + 1000;
    while (mono_ms() < end) {
        r = wr_get_md(f, &id);
        assert_int_equal(r->metadata->availability, WR_AV_READY);
        assert_int_equal(r->metadata->operation_id, op_id);
        wmrpc__metadata_response__free_unpacked(r, NULL);
        sleep_ms(50);
    }
    /* The node comes back: the migration completes once the lease ends. */
    assert_int_equal(hx_node_start(&f->m, &a, "node-a", 16u << 20), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    release_lease(f, &id, lease);
    assert_int_equal(hx_http_get(&f->m, "/health", &health), 200);
    assert_int_equal(strncmp(health, "ok\n", 3), 0); /* the verdict; the loop lag follows */
    free(health);
    Wmrpc__OperationResponse *op = wr_wait_op(f, op_id, WAIT_MS);
    assert_int_equal(op->operation->state, 2);
    wmrpc__operation_response__free_unpacked(op, NULL);
    r = wait_state(f, &id, WR_AV_READY, WR_RS_COLD);
    wmrpc__metadata_response__free_unpacked(r, NULL);

    /* A restart after which the node never comes back: lost after the
     * timeout (DEGRADED), READY again once it registers. */
    hx_node_kill(&a);
    restart_master(f);
    r = wait_state(f, &id, WR_AV_DEGRADED, -1);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(hx_node_start(&f->m, &a, "node-a", 16u << 20), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    r = wait_state(f, &id, WR_AV_READY, WR_RS_COLD);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    wr_disconnect(f);
    hx_node_kill(&a);
}

/* SIGKILL during an import (payloads uploaded, no commit): after the
 * restart the revision is still IMPORTING -- never READY, not listed, not
 * readable; aborting it removes its uploads and then forgets it (no
 * tombstone: the same identity can be imported again). */
static void test_master_killed_during_import_never_publishes(void **state)
{
    wr_fixture *f = *state;
    start_lc(f, "wl-import", 2, NULL);
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t1", "imp", "partial", 1);
    Wmrpc__WeightMetadata *md = NULL;
    assert_int_equal(wr_begin(f, &id, WR_RS_COLD, 0.5, WR_MODE_AUTO, &md), 0);
    wr_upload u = {.per_unit = 1};
    sizes_fill(&u, 5, 300);
    wr_put_some(f, &u, md, 3, -1); /* payload 3 never uploaded */
    wmrpc__weight_metadata__free_unpacked(md, NULL);
    restart_master(f);
    Wmrpc__MetadataResponse *r = wr_get_md(f, &id);
    assert_int_equal(r->metadata->availability, WR_AV_IMPORTING);
    uint64_t gen = r->metadata->metadata_generation;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_is_exist(f, &id), 0);
    sleep_ms(300); /* the tick never publishes it */
    r = wr_get_md(f, &id);
    assert_int_equal(r->metadata->availability, WR_AV_IMPORTING);
    wmrpc__metadata_response__free_unpacked(r, NULL);

    r = NULL;
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_ABORT, &id, gen, &r), 0);
    assert_int_equal(r->metadata->availability, WR_AV_DELETING);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_wait_md(f, &id, 0, WAIT_MS), 0);
    assert_group_empty(f, u.group);
    assert_int_equal(wr_begin(f, &id, WR_RS_COLD, 0.5, WR_MODE_AUTO, NULL), 0);
}

/* A master whose 1 MiB segment is under memory pressure past half full
 * (high watermark 0.5, low 0.2), ticking every 50 ms; f is connected. */
static void start_under_pressure(wr_fixture *f, const char *name)
{
    char cfg[2048];
    assert_int_equal(hx_init(&f->m, name, NULL), 0);
    snprintf(cfg, sizeof(cfg),
             "node:\n  segment_dir: \"%s/shm\"\n  segment_bytes: 1048576\n"
             "  cold_dir: \"%s/cold\"\n  poll_ms: 10\n"
             "memory:\n  high_watermark: 0.5\n  low_watermark: 0.2\n"
             "cluster:\n  weight_migration_cooldown_ms: 100\n"
             "  weight_migration_max_members_per_round: 2\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    config:\n      tick_period_ms: 50\n",
             f->m.dir, f->m.dir, BUILD_DIR);
    assert_int_equal(hx_reconfigure(&f->m, cfg), 0);
    assert_int_equal(hx_start(&f->m, 10000), 0);
    wr_connect(f);
}

/* AUTO under real memory pressure (1 MiB segment, high watermark 0.5): the
 * AUTO revision is demoted (first to MIXED) by the tick without any client
 * call, the trigger is counted in /metrics; the MANUAL revision beside it
 * stays HOT. */
static void test_auto_demotes_under_memory_pressure(void **state)
{
    wr_fixture *f = *state;
    start_under_pressure(f, "wl-auto");

    Wmrpc__WeightIdentity man, aut;
    wr_set_identity(&man, "t1", "auto", "manual", 1);
    wr_set_identity(&aut, "t1", "auto", "auto", 1);
    wr_upload um = {.n = 2, .sizes = {100000, 100000}, .per_unit = 1};
    wr_upload ua = {.n = 4, .sizes = {100000, 100000, 100000, 100000}, .per_unit = 1};
    Wmrpc__MetadataResponse *r = wr_publish(f, &man, WR_RS_HOT, WR_MODE_MANUAL, &um);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    r = wr_publish(f, &aut, WR_RS_HOT, WR_MODE_AUTO, &ua);
    wmrpc__metadata_response__free_unpacked(r, NULL);

    uint64_t end = mono_ms() + WAIT_MS;
    for (;;) {
        Wmrpc__MetadataResponse *md = wr_get_md(f, &aut);
        int demoted = md->metadata->residency != WR_RS_HOT && md->metadata->operation_id == 0;
        wmrpc__metadata_response__free_unpacked(md, NULL);
        if (demoted) break;
        if (mono_ms() > end) fail_msg("the AUTO revision was not demoted under memory pressure");
        sleep_ms(20);
    }
    r = wr_get_md(f, &man);
    assert_int_equal(r->metadata->residency, WR_RS_HOT);
    assert_int_equal(r->metadata->operation_id, 0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    check_replicas(f, &um, WR_RS_HOT);
    check_replicas(f, &ua, WR_RS_MIXED);
    char *metrics = NULL;
    assert_int_equal(hx_http_get(&f->m, "/metrics", &metrics), 200);
    if (strstr(metrics, "weight_auto_migrations_total{direction=\"demote\",reason=\"memory_pressure\"} 0\n") ||
        !strstr(metrics, "weight_auto_migrations_total{direction=\"demote\",reason=\"memory_pressure\"}"))
        fail_msg("no AUTO demotion counted:\n%s", metrics);
    free(metrics);
}

static uint64_t last_access_of(wr_fixture *f, const Wmrpc__WeightIdentity *id, uint64_t *gen)
{
    Wmrpc__MetadataResponse *md = wr_get_md(f, id);
    uint64_t t = md->metadata->last_access_ms;
    if (gen != NULL) *gen = md->metadata->metadata_generation;
    wmrpc__metadata_response__free_unpacked(md, NULL);
    return t;
}

/* AUTO is LRU for real, end to end: revision `early` is leased before
 * `later` is published, then renewed and released after it, so it is the
 * one used last -- though its grant is older. The renewal and the release
 * move its last access without a new metadata generation; the tick writes
 * it down (weight_access_records_total) and it is there after a SIGKILL of
 * the master. When memory pressure comes (a MANUAL revision fills the 1 MiB
 * segment past its high watermark) the AUTO revision used least recently,
 * `later`, is demoted; `early` stays HOT. */
static void test_auto_demotes_the_least_recently_used(void **state)
{
    wr_fixture *f = *state;
    start_under_pressure(f, "wl-lru");

    Wmrpc__WeightIdentity early, later, fill;
    wr_set_identity(&early, "t1", "lru", "early", 1);
    wr_set_identity(&later, "t1", "lru", "later", 1);
    wr_set_identity(&fill, "t1", "lru", "fill", 1);
    wr_upload ue = {.n = 2, .sizes = {100000, 100000}, .per_unit = 1};
    wr_upload ul = {.n = 2, .sizes = {100000, 100000}, .per_unit = 1};
    wr_upload uf = {.n = 2, .sizes = {100000, 100000}, .per_unit = 1};
    Wmrpc__MetadataResponse *r = wr_publish(f, &early, WR_RS_HOT, WR_MODE_AUTO, &ue);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    Wmrpc__LeaseResponse *lr = NULL;
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &early, 0, 60000, &lr), 0);
    uint64_t lid = lr->lease->id;
    wmrpc__lease_response__free_unpacked(lr, NULL);
    uint64_t gen_early = 0;
    uint64_t granted = last_access_of(f, &early, &gen_early);
    sleep_ms(20);
    r = wr_publish(f, &later, WR_RS_HOT, WR_MODE_AUTO, &ul);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    uint64_t later_access = last_access_of(f, &later, NULL);
    assert_true(later_access > granted);
    sleep_ms(20);
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, &early, lid, 60000, NULL), 0);
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, &early, lid, 0, NULL), 0);
    uint64_t gen = 0;
    uint64_t used = last_access_of(f, &early, &gen);
    assert_true(used > later_access);
    assert_int_equal(gen, gen_early); /* an access is no new generation */

    /* Written down by the tick, then on disk across a SIGKILL. */
    uint64_t end = mono_ms() + WAIT_MS;
    for (;;) {
        char *metrics = NULL;
        assert_int_equal(hx_http_get(&f->m, "/metrics", &metrics), 200);
        int written = strstr(metrics, "weight_access_records_total 0\n") == NULL &&
                      strstr(metrics, "weight_access_records_total") != NULL;
        free(metrics);
        if (written) break;
        if (mono_ms() > end) fail_msg("the access was never written down");
        sleep_ms(50);
    }
    restart_master(f);
    assert_int_equal(last_access_of(f, &early, &gen), used);
    assert_int_equal(gen, gen_early);

    r = wr_publish(f, &fill, WR_RS_HOT, WR_MODE_MANUAL, &uf);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    end = mono_ms() + WAIT_MS;
    for (;;) {
        Wmrpc__MetadataResponse *md = wr_get_md(f, &later);
        int demoted = md->metadata->residency != WR_RS_HOT && md->metadata->operation_id == 0;
        wmrpc__metadata_response__free_unpacked(md, NULL);
        if (demoted) break;
        if (mono_ms() > end) fail_msg("the least recently used AUTO revision was not demoted");
        sleep_ms(20);
    }
    r = wr_get_md(f, &early);
    assert_int_equal(r->metadata->residency, WR_RS_HOT);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    check_replicas(f, &ue, WR_RS_HOT);
}

int main(void)
{
    if (getenv("WL_TEST") != NULL) cmocka_set_test_filter(getenv("WL_TEST")); /* one test by name */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_publish_converges_to_preferred, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_every_explicit_path, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_lease_blocks_memory_release_during_cold_migration, wr_setup,
                                        wr_teardown),
        cmocka_unit_test_setup_teardown(test_remove_runs_to_tombstone, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_cold_write_failure_retries, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_failing_migration_gives_up, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_residency_follows_a_migration_in_progress, wr_setup,
                                        wr_teardown),
        cmocka_unit_test_setup_teardown(test_killed_node_degrades_then_recovers, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_migration_of_a_revision_that_lost_its_memory_fails, wr_setup,
                                        wr_teardown),
        cmocka_unit_test_setup_teardown(test_a_lost_revision_comes_back_where_it_was, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_a_mixed_revision_comes_back_mixed, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_a_degraded_revision_follows_a_new_policy, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_a_degraded_revision_with_an_operation_refuses_a_new_residency,
                                        wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_a_new_residency_during_an_operation_is_busy, wr_setup,
                                        wr_teardown),
        cmocka_unit_test_setup_teardown(test_master_killed_mid_migration_and_deletion, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_restart_waits_for_the_nodes, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_master_killed_during_import_never_publishes, wr_setup,
                                        wr_teardown),
        cmocka_unit_test_setup_teardown(test_auto_demotes_under_memory_pressure, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_auto_demotes_the_least_recently_used, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_access_promotion_waits_for_the_cooldown, wr_setup, wr_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
