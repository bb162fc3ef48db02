/* test_wm_integrity.c -- the integrity rules of issue 17 against a scripted
 * host.
 *
 * The management RPCs, the lineage driver and the reconcile tick run on a
 * fake host API (wm_scripted_host.h, shared with test_wm_management.c:
 * OpLog appends, group-flag changes and object removals stay queued until
 * the test delivers them, the wall clock is the test's) so each rule is
 * checked at the record
 * level: a plain import at or below a lineage's committed watermark is
 * STALE_GENERATION; a lease grant records the access without a new metadata
 * generation and a promotion on access is one record carrying the lease;
 * lease renewals are fenced on the generation they were granted at and on
 * a replacement fencing the base; migrate, update_policy and remove retried
 * with the same request id answer the first result, also after a restart;
 * an import idle past its TTL is aborted by the tick, its objects freed and
 * its name free again; tombstones and ended operations leave the table
 * after the retention, a bounded number per tick. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "weight_rpc.pb-c.h"
#include "weight_lineage.h"
#include "wm_plugin.h"
#include "wm_scripted_host.h"
#include "wm_test_records.h"

static int setup(void **state)
{
    (void)state;
    wmh_setup(1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    wmh_teardown();
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                     */

/* A READY revision of resource `name` at weight generation gen, observed
 * res, of mode `mode`, preferring HOT, straight into the store. */
static void seed(const char *name, uint64_t gen, wm_residency res, wm_migration_mode mode,
                 wm_revision *out)
{
    static const uint64_t bytes[2] = {100, 200};
    wm_affinity aff = {0};
    wm_metadata_upsert u;
    char msg[256];
    memset(&u, 0, sizeof(u));
    wmt_ready_revision(&u.revision, &aff, name, gen, bytes, 2);
    u.revision.residency = res;
    u.revision.observed_hot_ratio = res == WM_RES_HOT ? 1.0 : res == WM_RES_MIXED ? 0.5 : 0.0;
    u.revision.policy.preferred = WM_RES_HOT;
    u.revision.policy.mode = mode;
    u.has_affinity = 1;
    u.affinity = aff;
    if (wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
    *out = u.revision;
    /* Its objects, where its residency says (the manifest in memory with
     * its cold copy), so the tick's validation finds it as recorded. */
    for (size_t i = 0; i <= aff.n_units; i++) {
        fake_obj *o = &H.objs[H.nobjs++];
        memset(o, 0, sizeof(*o));
        snprintf(o->key, sizeof(o->key), "%s",
                 i < aff.n_units ? aff.units[i].members[0] : u.revision.manifest_key);
        snprintf(o->group, sizeof(o->group), "%s", u.revision.group_key);
        o->size = i < aff.n_units ? bytes[i] : 10;
        o->no_memory = i < aff.n_units && res == WM_RES_COLD;
        o->cold = i == aff.n_units || res == WM_RES_COLD;
    }
    wm_affinity_clear(&aff);
}

/* Walk a PUT_FIRST claim of `name` from generation 1 to `target` through
 * every phase straight in the store, so the lineage's watermark is target. */
static void commit_watermark(const char *name, uint64_t target)
{
    static const wm_claim_phase walk[] = {WM_PHASE_CLAIMED, WM_PHASE_IMPORTING_TARGET,
                                          WM_PHASE_BASE_FENCED, WM_PHASE_DRAINING_BASE,
                                          WM_PHASE_DELETING_BASE, WM_PHASE_COMMITTED};
    wm_lineage_claim c;
    char msg[256];
    wmt_claim(&c, name);
    c.target.weight_generation = target;
    c.expected_metadata_generation = 1;
    for (size_t i = 0; i < sizeof(walk) / sizeof(walk[0]); i++) {
        c.phase = walk[i];
        c.committed_watermark = walk[i] == WM_PHASE_COMMITTED ? target : 0;
        if (wm_store_apply_claim(P.store, &c, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
    }
}

static void lease_req(uint32_t method, const wm_identity *w, uint64_t lease_id, smp_rpc_call *c)
{
    Wmrpc__LeaseRequest req = WMRPC__LEASE_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, w);
    req.identity = &id;
    req.lease_id = lease_id;
    invoke(method, &req.base, c);
}

/* The lease an answered LEASE_ACQUIRE / LEASE_RENEW carries (0: none). */
static uint64_t answered_lease(const smp_rpc_call *c, uint64_t *gen)
{
    assert_int_equal(c->answered, 1);
    assert_int_equal(c->status, SMP_OK);
    Wmrpc__LeaseResponse *r = wmrpc__lease_response__unpack(NULL, c->len, (const uint8_t *)c->body);
    assert_non_null(r);
    uint64_t id = r->lease ? r->lease->id : 0;
    if (gen != NULL) *gen = r->lease ? r->lease->metadata_generation : 0;
    wmrpc__lease_response__free_unpacked(r, NULL);
    return id;
}

/* ------------------------------------------------------------------------ */
/* Watermark                                                                 */
/* ------------------------------------------------------------------------ */

/* Once a lineage committed generation 3, a plain import (no claim open) of
 * generation 3 or below is STALE_GENERATION before anything is written; a
 * generation above the watermark begins as usual. */
static void test_plain_import_at_or_below_watermark_is_stale(void **state)
{
    (void)state;
    wm_identity w;
    smp_rpc_call c;
    commit_watermark("wmk", 3);
    for (uint64_t g = 1; g <= 3; g++) {
        wmt_identity(&w, "wmk", g);
        begin(&w, &c);
        assert_int_equal(c.answered, 1);
        assert_int_equal(c.status, WM_ESTALE_GENERATION);
        assert_non_null(strstr(c.body, "watermark"));
        assert_int_equal(H.nq, 0);
    }
    wmt_identity(&w, "wmk", 4);
    begin(&w, &c);
    assert_int_equal(c.answered, 0);
    assert_int_equal(H.nq, 1); /* the group flag: the import is under way */
    deliver(SMP_OK);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
}

/* ------------------------------------------------------------------------ */
/* CAS and generation hygiene                                                */
/* ------------------------------------------------------------------------ */

/* A lease grant that promotes nothing is one lease record: the revision
 * keeps its metadata generation (a writer's expected generation stays
 * valid) and its last access moves to the grant time. */
static void test_lease_grant_records_access_without_new_generation(void **state)
{
    (void)state;
    wm_revision rev;
    smp_rpc_call c;
    seed("acc", 1, WM_RES_HOT, WM_MODE_AUTO, &rev);
    H.wall = 50000;
    lease_req(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &rev.id, 0, &c);
    assert_int_equal(H.nq, 1);
    assert_int_equal(deliver(SMP_OK), WM_OP_LEASE_UPSERT);
    uint64_t gen = 0;
    assert_true(answered_lease(&c, &gen) > 0);
    assert_int_equal(gen, 1);
    const wm_revision *r = wm_store_get(P.store, &rev.id);
    assert_int_equal(r->metadata_generation, 1);
    assert_int_equal(r->last_access_ms, 50000);
    assert_int_equal(r->lease_count, 1);
}

/* A lease on an AUTO revision observed COLD: the promotion and the lease are
 * one durable record (type 8 carrying the lease); the answer follows it, the
 * lease fenced on the one generation the promotion made. */
static void test_promotion_on_access_is_one_record(void **state)
{
    (void)state;
    wm_revision rev;
    smp_rpc_call c;
    seed("one", 1, WM_RES_COLD, WM_MODE_AUTO, &rev);
    lease_req(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &rev.id, 0, &c);
    assert_int_equal(H.nq, 1);
    /* Written at encoding version 2: a replica that would drop the lease
     * refuses the record instead. */
    assert_int_equal(H.q[0].encver, WM_RECORD_ENCVER_2);
    assert_int_equal(deliver(SMP_OK), WM_OP_METADATA_UPSERT);
    assert_int_equal(H.nq, 0); /* nothing chained after it */
    uint64_t gen = 0;
    uint64_t lid = answered_lease(&c, &gen);
    assert_true(lid > 0);
    assert_int_equal(gen, 2);
    const wm_revision *r = wm_store_get(P.store, &rev.id);
    assert_int_equal(r->metadata_generation, 2);
    assert_int_equal(r->lease_count, 1);
    assert_non_null(wm_store_lease(P.store, lid));
    const wm_operation *op = wm_store_operation(P.store, r->operation_id);
    assert_non_null(op);
    assert_int_equal(op->target, WM_RES_HOT);

    /* The record replays to the same state: the lease is in it. */
    wm_store *saved = P.store;
    uint8_t *img = NULL;
    size_t n = 0;
    char msg[256];
    assert_int_equal(wm_store_save(saved, &img, &n, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_store_create(&P.store), WM_OK);
    assert_int_equal(wm_store_load(P.store, img, n, msg, sizeof(msg)), WM_OK);
    assert_non_null(wm_store_lease(P.store, lid));
    free(img);
    wm_store_free(P.store);
    P.store = saved;
}

/* ------------------------------------------------------------------------ */
/* Lease fencing                                                             */
/* ------------------------------------------------------------------------ */

/* PUT_FIRST: once the record that fences the base is appended, a renewal of
 * a lease on the base (or a new lease) is refused, even before that record
 * is durable -- no lease can be extended across the replacement. */
static void test_lease_renewal_fails_once_base_fence_is_in_flight(void **state)
{
    (void)state;
    wm_revision base, target;
    smp_rpc_call c;
    seed("fen", 1, WM_RES_HOT, WM_MODE_MANUAL, &base);
    Wmrpc__UpsertBeginRequest req = WMRPC__UPSERT_BEGIN_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, &base.id);
    req.base_identity = &id;
    req.target_generation = 2;
    req.mode = WM_UPSERT_PUT_FIRST;
    req.request_id = (char *)"f1";
    req.expected_metadata_generation = 1;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_UPSERT_BEGIN, &req.base, &c);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    seed("fen", 2, WM_RES_HOT, WM_MODE_MANUAL, &target);
    wm_lineage_drive(&P); /* -> IMPORTING_TARGET */
    assert_int_equal(deliver(SMP_OK), WM_OP_LINEAGE_CLAIM);
    lease_req(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &base.id, 0, &c);
    deliver(SMP_OK);
    uint64_t lid = answered_lease(&c, NULL);

    wm_lineage_drive(&P); /* the fence (BASE_FENCED) is appended */
    assert_int_equal(H.nq, 1);
    lease_req(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, &base.id, lid, &c);
    assert_int_equal(c.answered, 1);
    assert_int_equal(c.status, WM_ELEASE_EXPIRED);
    lease_req(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &base.id, 0, &c);
    assert_int_equal(c.status, WM_ENOT_READY);
    assert_int_equal(H.nq, 1); /* only the fence */
    deliver(SMP_OK);
    lease_req(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, &base.id, lid, &c);
    assert_int_equal(c.status, WM_ELEASE_EXPIRED);
}

/* A renewal names the generation its lease was granted at: another one
 * (a lease of an earlier incarnation, a confused client) is refused
 * without a record; the right one extends the lease. */
static void test_lease_renewal_fenced_on_granted_generation(void **state)
{
    (void)state;
    wm_revision rev;
    smp_rpc_call c;
    uint64_t gen = 0;
    seed("gen", 1, WM_RES_COLD, WM_MODE_AUTO, &rev);
    lease_req(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &rev.id, 0, &c);
    while (H.nq > 0) deliver(SMP_OK);
    uint64_t lid = answered_lease(&c, &gen);
    assert_int_equal(gen, 2);

    Wmrpc__LeaseRequest req = WMRPC__LEASE_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, &rev.id);
    req.identity = &id;
    req.lease_id = lid;
    req.metadata_generation = 1; /* not the generation it was granted at */
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, &req.base, &c);
    assert_int_equal(c.answered, 1);
    assert_int_equal(c.status, WM_ELEASE_EXPIRED);
    assert_non_null(strstr(c.body, "generation"));
    assert_int_equal(H.nq, 0);
    req.metadata_generation = 2;
    H.wall += 1000;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, &req.base, &c);
    assert_int_equal(deliver(SMP_OK), WM_OP_LEASE_UPSERT);
    assert_int_equal(answered_lease(&c, &gen), lid);
    assert_int_equal(gen, 2);
    assert_int_equal(wm_store_lease(P.store, lid)->expiry_ms, H.wall + WM_LEASE_TTL_DEFAULT_MS);
}

/* ------------------------------------------------------------------------ */
/* Idempotent retries                                                        */
/* ------------------------------------------------------------------------ */

static void migrate_req(const wm_identity *w, wm_residency to, uint64_t expected, const char *rid,
                        smp_rpc_call *c)
{
    Wmrpc__MigrateRequest req = WMRPC__MIGRATE_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, w);
    req.identity = &id;
    req.target_residency = (uint32_t)to;
    req.expected_metadata_generation = expected;
    req.request_id = (char *)rid;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_MIGRATE, &req.base, c);
}

static void policy_req(const wm_identity *w, wm_migration_mode mode, uint64_t expected,
                       const char *rid, smp_rpc_call *c)
{
    Wmrpc__UpdatePolicyRequest req = WMRPC__UPDATE_POLICY_REQUEST__INIT;
    Wmrpc__WeightPolicy pol = WMRPC__WEIGHT_POLICY__INIT;
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, w);
    pol.migration_mode = (uint32_t)mode;
    req.identity = &id;
    req.policy = &pol;
    req.expected_metadata_generation = expected;
    req.request_id = (char *)rid;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_UPDATE_POLICY, &req.base, c);
}

static void remove_req(const wm_identity *w, uint64_t expected, const char *rid, smp_rpc_call *c)
{
    Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, w);
    req.identity = &id;
    req.expected_metadata_generation = expected;
    req.request_id = (char *)rid;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &req.base, c);
}

/* The metadata generation and active operation an answered
 * MetadataResponse carries. */
static uint64_t answered_generation(const smp_rpc_call *c, uint64_t *op_id)
{
    assert_int_equal(c->answered, 1);
    assert_int_equal(c->status, SMP_OK);
    Wmrpc__MetadataResponse *r = wmrpc__metadata_response__unpack(NULL, c->len, (const uint8_t *)c->body);
    assert_non_null(r);
    assert_non_null(r->metadata);
    uint64_t g = r->metadata->metadata_generation;
    if (op_id != NULL) *op_id = r->operation ? r->operation->id : 0;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    return g;
}

/* Replace the store by what its snapshot section loads to (a restart). */
static void restart_store(void)
{
    uint8_t *img = NULL;
    size_t n = 0;
    char msg[256];
    assert_int_equal(wm_store_save(P.store, &img, &n, msg, sizeof(msg)), WM_OK);
    wm_store_free(P.store);
    assert_int_equal(wm_store_create(&P.store), WM_OK);
    if (wm_store_load(P.store, img, n, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
    free(img);
}

/* A migration retried with its request id after the reply was lost gets the
 * first answer (the revision with the operation it created) -- nothing is
 * appended -- also after a restart; the same id with another target is
 * CONFLICT; without the id the retry is STALE_GENERATION as before. */
static void test_migrate_retry_with_request_id_returns_first_answer(void **state)
{
    (void)state;
    wm_revision rev;
    smp_rpc_call c;
    uint64_t op1 = 0, op2 = 0;
    seed("mig", 1, WM_RES_HOT, WM_MODE_MANUAL, &rev);
    migrate_req(&rev.id, WM_RES_COLD, 1, "mig-7", &c);
    deliver(SMP_OK);
    assert_int_equal(answered_generation(&c, &op1), 2); /* this reply is "lost" */
    assert_true(op1 > 0);

    migrate_req(&rev.id, WM_RES_COLD, 1, "mig-7", &c);
    assert_int_equal(H.nq, 0);
    assert_int_equal(answered_generation(&c, &op2), 2);
    assert_int_equal(op2, op1);
    migrate_req(&rev.id, WM_RES_MIXED, 1, "mig-7", &c);
    assert_int_equal(c.status, WM_ECONFLICT);
    migrate_req(&rev.id, WM_RES_COLD, 1, NULL, &c);
    assert_int_equal(c.status, WM_ESTALE_GENERATION);
    migrate_req(&rev.id, WM_RES_COLD, 1, "mig-8", &c);
    assert_int_equal(c.status, WM_ESTALE_GENERATION);

    restart_store();
    migrate_req(&rev.id, WM_RES_COLD, 1, "mig-7", &c);
    assert_int_equal(H.nq, 0);
    assert_int_equal(answered_generation(&c, &op2), 2);
    assert_int_equal(op2, op1);

    /* Once the migration has ended, the retry still names it. */
    wm_metadata_upsert u;
    wm_operation op = *wm_store_operation(P.store, op1);
    char msg[256];
    memset(&u, 0, sizeof(u));
    u.revision = *wm_store_get(P.store, &rev.id);
    u.revision.metadata_generation = 3;
    u.revision.operation_id = 0;
    u.revision.residency = WM_RES_COLD;
    u.revision.observed_hot_ratio = 0.0;
    op.state = WM_OPS_SUCCEEDED;
    u.operations = &op;
    u.n_operations = 1;
    if (wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
    migrate_req(&rev.id, WM_RES_COLD, 1, "mig-7", &c);
    assert_int_equal(H.nq, 0);
    assert_int_equal(answered_generation(&c, &op2), 3);
    assert_int_equal(op2, op1);
}

/* A policy update retried with its request id answers the revision as the
 * first one left it, without a second record; after another mutation the
 * old request id no longer matches and the CAS decides (STALE). */
static void test_update_policy_retry_with_request_id_returns_first_answer(void **state)
{
    (void)state;
    wm_revision rev;
    smp_rpc_call c;
    seed("pol", 1, WM_RES_HOT, WM_MODE_AUTO, &rev);
    policy_req(&rev.id, WM_MODE_MANUAL, 1, "pol-1", &c);
    deliver(SMP_OK);
    assert_int_equal(answered_generation(&c, NULL), 2);
    policy_req(&rev.id, WM_MODE_MANUAL, 1, "pol-1", &c);
    assert_int_equal(H.nq, 0);
    assert_int_equal(answered_generation(&c, NULL), 2);
    assert_int_equal(wm_store_get(P.store, &rev.id)->policy.mode, WM_MODE_MANUAL);
    policy_req(&rev.id, WM_MODE_PINNED, 1, "pol-1", &c);
    assert_int_equal(c.status, WM_ECONFLICT);

    policy_req(&rev.id, WM_MODE_PINNED, 2, "pol-2", &c);
    deliver(SMP_OK);
    assert_int_equal(answered_generation(&c, NULL), 3);
    policy_req(&rev.id, WM_MODE_MANUAL, 1, "pol-1", &c);
    assert_int_equal(c.status, WM_ESTALE_GENERATION);
}

/* A removal carries its request id into the DELETING record (persisted),
 * and its retry answers the revision as it is, without a record. */
static void test_remove_retry_with_request_id_returns_first_answer(void **state)
{
    (void)state;
    wm_revision rev;
    smp_rpc_call c;
    seed("rm", 1, WM_RES_HOT, WM_MODE_MANUAL, &rev);
    remove_req(&rev.id, 1, "rm-1", &c);
    deliver(SMP_OK);
    assert_int_equal(answered_generation(&c, NULL), 2);
    assert_string_equal(wm_store_get(P.store, &rev.id)->request_id, "rm-1");
    restart_store();
    assert_string_equal(wm_store_get(P.store, &rev.id)->request_id, "rm-1");
    remove_req(&rev.id, 1, "rm-1", &c);
    assert_int_equal(H.nq, 0);
    assert_int_equal(answered_generation(&c, NULL), 2);
}

/* ------------------------------------------------------------------------ */
/* Reclamation                                                               */
/* ------------------------------------------------------------------------ */

static smp_tick_budget TB = {sizeof(smp_tick_budget), 64, 1 << 30, 0};

/* A retry with the request id while the operation it started writes its
 * progress (a record of the revision in flight) answers the first result
 * at once -- not BUSY -- and appends nothing. */
static void test_retry_answers_while_the_operation_writes_progress(void **state)
{
    (void)state;
    wm_revision rev;
    smp_rpc_call c;
    uint64_t cursor = 0;
    seed("rm-busy", 1, WM_RES_HOT, WM_MODE_MANUAL, &rev);
    remove_req(&rev.id, 1, "rm-2", &c);
    deliver(SMP_OK);
    assert_int_equal(answered_generation(&c, NULL), 2);
    wm_lifecycle_tick(&P, &TB, &cursor);
    for (int g = 0; g < 32 && !wm_pending_metadata(&P, rev.group_key); g++) {
        if (H.nq == 0) wm_lifecycle_tick(&P, &TB, &cursor);
        else deliver(SMP_OK);
    }
    assert_true(wm_pending_metadata(&P, rev.group_key)); /* the deletion's progress */
    size_t before = H.nq;
    remove_req(&rev.id, 1, "rm-2", &c);
    assert_int_equal(H.nq, before);
    assert_int_equal(answered_generation(&c, NULL), 2);
}

/* One tick, then every effect it queued delivered (and what those queue). */
static void tick_and_deliver(void)
{
    uint64_t cursor = 0;
    wm_lifecycle_tick(&P, &TB, &cursor);
    for (int guard = 0; H.nq > 0 && guard < 256; guard++) deliver(SMP_OK);
}

static void add_obj(const char *key, const char *group)
{
    fake_obj *o = &H.objs[H.nobjs++];
    memset(o, 0, sizeof(*o));
    snprintf(o->key, sizeof(o->key), "%s", key);
    snprintf(o->group, sizeof(o->group), "%s", group);
    o->size = 64;
    o->type = SMP_DATA_WEIGHT;
}

/* An import that makes no progress for longer than import_ttl_ms is aborted
 * by the tick; one that keeps uploading is not. Its objects are removed, and
 * once the abort has finished the record is gone (no tombstone): the same
 * identity begins again. */
static void test_idle_import_aborted_after_ttl_and_objects_freed(void **state)
{
    (void)state;
    wm_identity w;
    smp_rpc_call c;
    char group[WM_KEY_MAX + 1], key[WM_KEY_MAX + 1];
    H.import_ttl_ms = 1000;
    wmt_identity(&w, "ttl", 1);
    begin(&w, &c);
    deliver(SMP_OK);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    wm_group_key(&w, group, sizeof(group));
    wm_payload_key(&w, 0, key, sizeof(key));
    add_obj(key, group);

    tick_and_deliver();
    H.wall += 600;
    wm_payload_key(&w, 1, key, sizeof(key));
    add_obj(key, group); /* progress */
    tick_and_deliver();
    H.wall += 600; /* 1200 since the begin, 600 since the progress */
    tick_and_deliver();
    assert_int_equal(wm_store_get(P.store, &w)->availability, WM_AVAIL_IMPORTING);

    H.wall += 500; /* 1100 without progress */
    tick_and_deliver();
    const wm_revision *r = wm_store_get(P.store, &w);
    assert_non_null(r);
    assert_int_equal(r->availability, WM_AVAIL_DELETING);
    assert_int_equal(P.imports_expired, 1);
    for (int i = 0; i < 20 && wm_store_get(P.store, &w) != NULL; i++) {
        H.wall += 1000;
        tick_and_deliver();
    }
    assert_null(wm_store_get(P.store, &w));
    assert_int_equal(f_group_count(NULL, group), 0);
    assert_int_equal(P.records_pruned[WM_DEL_IMPORT_ABORTED], 1);

    begin(&w, &c);
    deliver(SMP_OK);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    assert_int_equal(wm_store_get(P.store, &w)->availability, WM_AVAIL_IMPORTING);
}

/* An import aborted before any upload leaves no record: the abort answers
 * an empty metadata response and the same identity begins again. */
static void test_aborted_import_does_not_burn_the_name(void **state)
{
    (void)state;
    wm_identity w;
    smp_rpc_call c;
    wmt_identity(&w, "again", 1);
    begin(&w, &c);
    deliver(SMP_OK);
    deliver(SMP_OK);
    Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, &w);
    req.identity = &id;
    req.expected_metadata_generation = 1;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_ABORT, &req.base, &c);
    while (H.nq > 0) deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    Wmrpc__MetadataResponse *mr = wmrpc__metadata_response__unpack(NULL, c.len, (uint8_t *)c.body);
    assert_non_null(mr);
    assert_null(mr->metadata);
    wmrpc__metadata_response__free_unpacked(mr, NULL);
    assert_null(wm_store_get(P.store, &w));

    begin(&w, &c);
    deliver(SMP_OK);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
}

/* A DELETED tombstone and ended operations leave the table with type-9
 * records once record_retention_ms has passed since their last update, at
 * most the round's member budget per tick, counted in the metrics; 0 keeps
 * them forever; after a restart the pruning goes on from what is persisted. */
static void test_tombstones_and_ended_operations_pruned_after_retention(void **state)
{
    (void)state;
    wm_revision a, b;
    smp_rpc_call c;
    char msg[256];
    seed("tomb", 1, WM_RES_HOT, WM_MODE_MANUAL, &a);
    remove_req(&a.id, 1, NULL, &c);
    deliver(SMP_OK);
    for (int i = 0; i < 20 && wm_store_get(P.store, &a.id)->availability != WM_AVAIL_DELETED; i++) {
        H.wall += 100;
        tick_and_deliver();
    }
    assert_int_equal(wm_store_get(P.store, &a.id)->availability, WM_AVAIL_DELETED);
    /* Three ended operations of a live revision. */
    seed("live", 1, WM_RES_HOT, WM_MODE_MANUAL, &b);
    uint64_t ended[3];
    for (int k = 0; k < 3; k++) {
        wm_metadata_upsert u;
        wm_operation op;
        memset(&u, 0, sizeof(u));
        u.revision = *wm_store_get(P.store, &b.id);
        wmt_migration(&op, &u.revision, wm_store_reserve_operation_id(P.store));
        op.state = WM_OPS_SUCCEEDED;
        op.updated_ms = H.wall;
        u.revision.operation_id = 0;
        u.revision.metadata_generation++;
        u.revision.updated_ms = H.wall;
        u.operations = &op;
        u.n_operations = 1;
        if (wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
        ended[k] = op.id;
    }
    wm_store_stats st0;
    wm_store_stats_get(P.store, &st0);
    assert_int_equal(st0.operations, 4); /* the deletion's and three */

    H.retention_ms = 0; /* keep forever */
    H.wall += 100000000;
    tick_and_deliver();
    assert_non_null(wm_store_get(P.store, &a.id));
    H.retention_ms = 5000;
    H.wall -= 100000000;
    H.wall += 4000;
    tick_and_deliver(); /* not yet */
    assert_non_null(wm_store_get(P.store, &a.id));
    assert_non_null(wm_store_operation(P.store, ended[0]));

    H.wall += 2000;
    TB.max_members = 2;
    uint64_t cursor = 0;
    wm_lifecycle_tick(&P, &TB, &cursor);
    assert_int_equal(H.nq, 2); /* bounded by the round */
    assert_int_equal(H.q[0].type, WM_OP_METADATA_DELETE);
    assert_int_equal(H.q[1].type, WM_OP_METADATA_DELETE);
    assert_int_equal(H.q[0].encver + H.q[1].encver >= 3, 1); /* OPERATIONS_EXPIRED: 2 */
    while (H.nq > 0) deliver(SMP_OK);
    restart_store();
    for (int i = 0; i < 5; i++) tick_and_deliver();
    TB.max_members = 64;
    assert_null(wm_store_get(P.store, &a.id));
    assert_non_null(wm_store_get(P.store, &b.id));
    for (int k = 0; k < 3; k++) assert_null(wm_store_operation(P.store, ended[k]));
    wm_store_stats st;
    wm_store_stats_get(P.store, &st);
    assert_int_equal(st.operations, 0);
    assert_int_equal(P.records_pruned[WM_DEL_TOMBSTONE_EXPIRED], 1);
    assert_int_equal(P.records_pruned[WM_DEL_OPERATIONS_EXPIRED], 4);
}

static const wm_lineage_claim *claim_of(const wm_identity *id)
{
    wm_lineage lin;
    wm_identity_lineage(id, &lin);
    const wm_lineage_entry *e = wm_store_lineage(P.store, &lin);
    return e && e->has_claim ? &e->claim : NULL;
}

/* A PUT_FIRST claim whose target import never begins is ABORTED once
 * import_ttl_ms has passed since its last step; one whose target import
 * idles past the TTL ends ABORTED too (the tick aborts the import, the
 * claim sees it fail, then the target record is forgotten); the base stays
 * READY throughout and the lineage takes a new request. */
static void test_claim_without_progress_aborted_after_ttl(void **state)
{
    (void)state;
    wm_revision base;
    smp_rpc_call c;
    H.import_ttl_ms = 1000;
    seed("stuck", 1, WM_RES_HOT, WM_MODE_MANUAL, &base);
    Wmrpc__UpsertBeginRequest req = WMRPC__UPSERT_BEGIN_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, &base.id);
    req.base_identity = &id;
    req.target_generation = 2;
    req.mode = WM_UPSERT_PUT_FIRST;
    req.request_id = (char *)"s1";
    req.expected_metadata_generation = 1;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_UPSERT_BEGIN, &req.base, &c);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    H.wall += 500;
    tick_and_deliver();
    assert_int_equal(claim_of(&base.id)->phase, WM_PHASE_CLAIMED);
    H.wall += 600; /* 1100 since the claim, no target */
    tick_and_deliver();
    assert_int_equal(claim_of(&base.id)->phase, WM_PHASE_ABORTED);
    assert_non_null(strstr(claim_of(&base.id)->error, "import_ttl_ms"));

    /* A second request: its target begins, then idles. */
    req.request_id = (char *)"s2";
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_UPSERT_BEGIN, &req.base, &c);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    wm_identity tid = base.id;
    tid.weight_generation = 2;
    begin(&tid, &c);
    deliver(SMP_OK);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    tick_and_deliver();
    assert_int_equal(claim_of(&base.id)->phase, WM_PHASE_IMPORTING_TARGET);
    for (int i = 0; i < 20 && wm_store_get(P.store, &tid) != NULL; i++) {
        H.wall += 600;
        tick_and_deliver();
    }
    assert_int_equal(claim_of(&base.id)->phase, WM_PHASE_ABORTED);
    assert_null(wm_store_get(P.store, &tid));
    const wm_revision *b = wm_store_get(P.store, &base.id);
    assert_int_equal(b->availability, WM_AVAIL_READY);
    assert_int_equal(b->metadata_generation, 1);
}

/* weightctl repair: REPAIR starts a REPAIRING operation toward the
 * recorded residency under CAS, answered once durable; a second one while
 * it runs is BUSY, a stale generation STALE_GENERATION, a deleted revision
 * NOT_READY -- and a refused request appends nothing. */
static void test_repair_rpc_starts_repairing_under_cas(void **state)
{
    (void)state;
    wm_revision rev, gone;
    smp_rpc_call c;
    seed("fix", 1, WM_RES_COLD, WM_MODE_MANUAL, &rev);
    Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, &rev.id);
    req.identity = &id;
    req.expected_metadata_generation = 2;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_REPAIR, &req.base, &c);
    assert_int_equal(c.status, WM_ESTALE_GENERATION);
    assert_int_equal(H.nq, 0);
    req.expected_metadata_generation = 1;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_REPAIR, &req.base, &c);
    assert_int_equal(c.answered, 0); /* not before durable */
    deliver(SMP_OK);
    uint64_t op_id = 0;
    assert_int_equal(answered_generation(&c, &op_id), 2);
    const wm_operation *op = wm_store_operation(P.store, op_id);
    assert_non_null(op);
    assert_int_equal(op->kind, WM_OPK_REPAIRING);
    assert_int_equal(op->target, WM_RES_COLD);
    req.expected_metadata_generation = 2;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_REPAIR, &req.base, &c);
    assert_int_equal(c.status, WM_EBUSY);
    assert_int_equal(H.nq, 0);

    seed("fix-gone", 1, WM_RES_HOT, WM_MODE_MANUAL, &gone);
    remove_req(&gone.id, 1, NULL, &c);
    deliver(SMP_OK);
    wmt_pb_identity(&id, &gone.id);
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_REPAIR, &req.base, &c);
    assert_int_equal(c.status, WM_ENOT_READY);
    assert_int_equal(H.nq, 0);
    assert_int_equal(wm_store_get(P.store, &gone.id)->metadata_generation, 2);
}

/* AUTO is LRU for real: a lease renewal and a release are accesses too.
 * Each moves the revision's last access in memory at once, with no record
 * and no new metadata generation; the tick persists them lazily -- not
 * before the batch delay, then one type-8 record repeating the revision's
 * generation (updated_ms kept, so no cooldown restarts), which does not
 * hold the revision busy (a lease acquire meanwhile is not BUSY). Replaying
 * the log after the snapshot taken before them gives the same last access:
 * it survives a restart. */
static void test_lease_accesses_persisted_lazily(void **state)
{
    (void)state;
    wm_revision rev;
    smp_rpc_call c, c2;
    char msg[256];
    seed("lru", 1, WM_RES_HOT, WM_MODE_AUTO, &rev);
    H.wall = 50000;
    lease_req(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &rev.id, 0, &c);
    deliver(SMP_OK);
    uint64_t lid = answered_lease(&c, NULL);
    const wm_revision *r = wm_store_get(P.store, &rev.id);
    uint64_t updated = r->updated_ms;
    uint8_t *img = NULL;
    size_t n = 0;
    assert_int_equal(wm_store_save(P.store, &img, &n, msg, sizeof(msg)), WM_OK);

    H.logging = 1;
    H.wall = 60000;
    lease_req(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, &rev.id, lid, &c);
    assert_int_equal(wm_store_get(P.store, &rev.id)->last_access_ms, 60000);
    assert_int_equal(deliver(SMP_OK), WM_OP_LEASE_UPSERT);
    assert_int_equal(answered_lease(&c, NULL), lid);
    tick_and_deliver(); /* inside the batch delay: nothing written */
    assert_int_equal(H.nlog, 1);
    H.wall = 70000;
    lease_req(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, &rev.id, lid, &c);
    assert_int_equal(deliver(SMP_OK), WM_OP_LEASE_DELETE);
    r = wm_store_get(P.store, &rev.id);
    assert_int_equal(r->last_access_ms, 70000);
    assert_int_equal(r->metadata_generation, 1);

    uint64_t cursor = 0;
    wm_lifecycle_tick(&P, &TB, &cursor);
    assert_int_equal(H.nq, 1); /* one record for both accesses */
    assert_int_equal(P.access_records, 0); /* counted once applied, not when queued */
    lease_req(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &rev.id, 0, &c2);
    assert_int_equal(c2.answered, 0); /* not BUSY: appended behind it */
    assert_int_equal(H.nq, 2);
    assert_int_equal(deliver(SMP_OK), WM_OP_METADATA_UPSERT);
    H.logging = 0;
    deliver(SMP_OK);
    answered_lease(&c2, NULL);
    r = wm_store_get(P.store, &rev.id);
    assert_int_equal(r->metadata_generation, 1);
    assert_int_equal(r->updated_ms, updated);
    assert_int_equal(P.access_records, 1);
    tick_and_deliver(); /* nothing more to persist */
    assert_int_equal(H.nlog, 3);

    /* A restart: the snapshot from before, then the log. */
    wm_store *st = NULL;
    assert_int_equal(wm_store_create(&st), WM_OK);
    if (wm_store_load(st, img, n, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
    free(img);
    for (size_t i = 0; i < H.nlog; i++)
        if (wm_store_replay(st, H.log[i].type, H.log[i].payload, H.log[i].len, msg, sizeof(msg)) < 0)
            fail_msg("%s", msg);
    r = wm_store_get(st, &rev.id);
    assert_int_equal(r->last_access_ms, 70000);
    assert_int_equal(r->metadata_generation, 1);
    assert_int_equal(r->updated_ms, updated);
    wm_store_free(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_plain_import_at_or_below_watermark_is_stale, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_grant_records_access_without_new_generation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_promotion_on_access_is_one_record, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_renewal_fails_once_base_fence_is_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_renewal_fenced_on_granted_generation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migrate_retry_with_request_id_returns_first_answer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_update_policy_retry_with_request_id_returns_first_answer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_retry_with_request_id_returns_first_answer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle_import_aborted_after_ttl_and_objects_freed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_aborted_import_does_not_burn_the_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tombstones_and_ended_operations_pruned_after_retention, setup, teardown),
        cmocka_unit_test_setup_teardown(test_claim_without_progress_aborted_after_ttl, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_rpc_starts_repairing_under_cas, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_accesses_persisted_lazily, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retry_answers_while_the_operation_writes_progress, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
