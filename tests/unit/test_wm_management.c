/* test_wm_management.c -- the management RPCs against a scripted host.
 *
 * weight_management.c and weight_lifecycle.c run on a fake host API
 * (wm_scripted_host.h) whose OpLog appends and group-flag changes stay
 * queued until the test delivers their completion, so the order of effects
 * is visible: nothing is answered or visible before its record is
 * durable, a failed append changes nothing and answers DURABILITY_FAILED,
 * the HA gate's refusal names the flag, a second mutation of a revision in
 * flight is BUSY, a lease on an AUTO revision observed COLD is granted only
 * after its promotion record, the guard answers from the revision's state,
 * and bodies that do not decode never crash a handler. */
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
    wmh_setup(0);
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
/* ------------------------------------------------------------------------ */

/* Begin marks the group managed first, then appends the IMPORTING record,
 * and answers only when that record is durable; until then the revision is
 * not visible, and a second begin of the same identity is BUSY. */
static void test_begin_answers_after_durable_record(void **state)
{
    (void)state;
    wm_identity w;
    smp_rpc_call c1, c2;
    wmt_identity(&w, "m", 1);
    begin(&w, &c1);
    assert_int_equal(c1.answered, 0);
    assert_int_equal(H.nq, 1); /* the group flag */
    begin(&w, &c2);
    assert_int_equal(c2.answered, 1);
    assert_int_equal(c2.status, WM_EBUSY);
    assert_int_equal(deliver(SMP_OK), 0);
    assert_int_equal(c1.answered, 0);
    assert_null(wm_store_get(P.store, &w)); /* not durable yet: invisible */
    assert_int_equal(deliver(SMP_OK), WM_OP_METADATA_UPSERT);
    assert_int_equal(c1.answered, 1);
    assert_int_equal(c1.status, SMP_OK);
    Wmrpc__ImportBeginResponse *r = wmrpc__import_begin_response__unpack(NULL, c1.len, (uint8_t *)c1.body);
    assert_non_null(r);
    assert_int_equal(r->metadata->availability, WM_AVAIL_IMPORTING);
    assert_int_equal(r->metadata->policy->preferred_residency, WM_RES_MIXED); /* built-in default */
    wmrpc__import_begin_response__free_unpacked(r, NULL);
    assert_non_null(wm_store_get(P.store, &w));
}

/* A record that never becomes durable answers DURABILITY_FAILED and leaves
 * nothing behind; an append refused by the HA gate answers SMP_EGATE naming
 * the flag; a standby says so. */
static void test_failed_appends_change_nothing(void **state)
{
    (void)state;
    wm_identity w;
    smp_rpc_call c;
    wmt_identity(&w, "m", 1);
    begin(&w, &c);
    deliver(SMP_OK);
    deliver(SMP_EDURABILITY);
    assert_int_equal(c.status, WM_EDURABILITY_FAILED);
    assert_non_null(strstr(c.body, "durable"));
    assert_null(wm_store_get(P.store, &w));

    H.append_rc = SMP_EGATE;
    begin(&w, &c);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_EGATE);
    assert_non_null(strstr(c.body, WM_GATE_MANAGEMENT));
    H.append_rc = SMP_ENOTLEADER;
    begin(&w, &c);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_ENOTLEADER);
    assert_non_null(strstr(c.body, "standby"));
    assert_null(wm_store_get(P.store, &w));
    assert_int_equal(H.nq, 0);
}

/* Put a READY revision straight into the store. */
static void seed_ready(const char *name, wm_residency res, wm_migration_mode mode, wm_revision *out)
{
    static const uint64_t bytes[2] = {100, 200};
    wm_affinity aff = {0};
    wm_metadata_upsert u;
    char msg[256];
    memset(&u, 0, sizeof(u));
    wmt_ready_revision(&u.revision, &aff, name, 1, bytes, 2);
    u.revision.residency = res;
    u.revision.observed_hot_ratio = res == WM_RES_HOT ? 1.0 : res == WM_RES_MIXED ? 0.5 : 0.0;
    u.revision.policy.preferred = WM_RES_HOT;
    u.revision.policy.mode = mode;
    u.has_affinity = 1;
    u.affinity = aff;
    if (wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
    *out = u.revision;
    wm_affinity_clear(&aff);
}

/* A lease on an AUTO revision observed COLD: the promotion (MIGRATING toward
 * preferred) and the lease are one durable record, and only then is the
 * lease granted, fenced on the generation after the promotion. */
static void test_lease_on_cold_auto_revision_promotes_first(void **state)
{
    (void)state;
    wm_revision rev;
    smp_rpc_call c;
    seed_ready("cold", WM_RES_COLD, WM_MODE_AUTO, &rev);
    Wmrpc__LeaseRequest req = WMRPC__LEASE_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, &rev.id);
    req.identity = &id;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &req.base, &c);
    assert_int_equal(c.answered, 0);
    assert_int_equal(H.nq, 1);
    assert_int_equal(H.q[0].type, WM_OP_METADATA_UPSERT);
    assert_int_equal(c.answered, 0); /* not granted before the record */
    assert_int_equal(deliver(SMP_OK), WM_OP_METADATA_UPSERT);
    const wm_revision *r = wm_store_get(P.store, &rev.id);
    assert_int_equal(r->metadata_generation, 2);
    const wm_operation *op = wm_store_operation(P.store, r->operation_id);
    assert_non_null(op);
    assert_int_equal(op->kind, WM_OPK_MIGRATING);
    assert_int_equal(op->target, WM_RES_HOT);
    assert_int_equal(r->lease_count, 1);
    assert_int_equal(H.nq, 0);
    assert_int_equal(c.status, SMP_OK);
    Wmrpc__LeaseResponse *lr = wmrpc__lease_response__unpack(NULL, c.len, (uint8_t *)c.body);
    assert_non_null(lr->lease);
    assert_int_equal(lr->lease->metadata_generation, 2);
    assert_int_equal(lr->metadata->active_leases, 1);
    wmrpc__lease_response__free_unpacked(lr, NULL);
    assert_int_equal(P.auto_triggers[WM_AUTO_PROMOTE_ON_ACCESS], 1);

    /* A MANUAL revision observed COLD gets its lease without promotion. */
    seed_ready("manual", WM_RES_COLD, WM_MODE_MANUAL, &rev);
    wmt_pb_identity(&id, &rev.id);
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &req.base, &c);
    assert_int_equal(H.q[0].type, WM_OP_LEASE_UPSERT);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
}

/* The migration cooldown holds an access promotion: an AUTO revision
 * updated (demoted) less than weight_migration_cooldown_ms ago gets its
 * lease alone -- a lease record, no new generation, no operation -- and
 * the first grant after the cooldown promotes it (a revision demoted under
 * memory pressure went straight back HOT on the next read; trial). */
static void test_access_promotion_waits_for_the_cooldown(void **state)
{
    (void)state;
    wm_revision rev;
    smp_rpc_call c;
    H.cooldown_ms = 5000;
    seed_ready("cool", WM_RES_COLD, WM_MODE_AUTO, &rev);
    H.wall = rev.updated_ms + 4999;
    Wmrpc__LeaseRequest req = WMRPC__LEASE_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, &rev.id);
    req.identity = &id;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &req.base, &c);
    assert_int_equal(H.nq, 1);
    assert_int_equal(H.q[0].type, WM_OP_LEASE_UPSERT);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    const wm_revision *r = wm_store_get(P.store, &rev.id);
    assert_int_equal(r->metadata_generation, rev.metadata_generation);
    assert_int_equal(r->operation_id, 0);
    assert_int_equal(r->residency, WM_RES_COLD);
    assert_int_equal(P.auto_triggers[WM_AUTO_PROMOTE_ON_ACCESS], 0);

    H.wall = rev.updated_ms + 5000; /* the cooldown is over */
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &req.base, &c);
    assert_int_equal(H.nq, 1);
    assert_int_equal(H.q[0].type, WM_OP_METADATA_UPSERT);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    r = wm_store_get(P.store, &rev.id);
    assert_int_equal(r->metadata_generation, rev.metadata_generation + 1);
    const wm_operation *op = wm_store_operation(P.store, r->operation_id);
    assert_non_null(op);
    assert_int_equal(op->target, WM_RES_HOT);
    assert_int_equal(P.auto_triggers[WM_AUTO_PROMOTE_ON_ACCESS], 1);
}

/* While a record of a revision is in flight, other mutations of it are BUSY
 * and a removal waits for in-flight lease grants; the lease sweep ends an
 * expired lease with a durable record. */
static void test_in_flight_mutations_and_lease_sweep(void **state)
{
    (void)state;
    wm_revision rev;
    smp_rpc_call c1, c2;
    seed_ready("busy", WM_RES_HOT, WM_MODE_AUTO, &rev);
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, &rev.id);

    Wmrpc__LeaseRequest lreq = WMRPC__LEASE_REQUEST__INIT;
    lreq.identity = &id;
    lreq.ttl_ms = 100;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &lreq.base, &c1);
    Wmrpc__IdentityRequest rm = WMRPC__IDENTITY_REQUEST__INIT;
    rm.identity = &id;
    rm.expected_metadata_generation = 1;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &rm.base, &c2);
    assert_int_equal(c2.status, WM_EBUSY); /* a lease is being granted */
    deliver(SMP_OK);
    assert_int_equal(c1.status, SMP_OK);

    Wmrpc__MigrateRequest mig = WMRPC__MIGRATE_REQUEST__INIT;
    mig.identity = &id;
    mig.target_residency = WM_RES_COLD;
    mig.expected_metadata_generation = 1;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_MIGRATE, &mig.base, &c1);
    assert_int_equal(c1.answered, 0);
    Wmrpc__UpdatePolicyRequest up = WMRPC__UPDATE_POLICY_REQUEST__INIT;
    Wmrpc__WeightPolicy pol = WMRPC__WEIGHT_POLICY__INIT;
    pol.migration_mode = WM_MODE_MANUAL;
    up.identity = &id;
    up.policy = &pol;
    up.expected_metadata_generation = 1;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_UPDATE_POLICY, &up.base, &c2);
    assert_int_equal(c2.status, WM_EBUSY);
    /* A second migration meanwhile: BUSY naming the change on its way (the
     * operation is not applied yet, so there is no operation id to name). */
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_MIGRATE, &mig.base, &c2);
    assert_int_equal(c2.status, WM_EBUSY);
    assert_non_null(strstr(c2.body, "already has a change being made durable"));
    deliver(SMP_OK);
    assert_int_equal(c1.status, SMP_OK);
    /* Once applied, the operation is named with its kind. */
    mig.expected_metadata_generation = 2;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_MIGRATE, &mig.base, &c2);
    assert_int_equal(c2.status, WM_EBUSY);
    assert_non_null(strstr(c2.body, "already has active operation "));
    assert_non_null(strstr(c2.body, " (MIGRATING)"));
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_UPDATE_POLICY, &up.base, &c2);
    assert_int_equal(c2.status, WM_ESTALE_GENERATION);
    assert_non_null(strstr(c2.body, "generation 2"));

    /* The lease (ttl 100 ms) expires: the sweep appends its end once (the
     * migration's first batch is in flight meanwhile: more to do). */
    H.wall += 1000;
    smp_tick_budget b = {sizeof(b), 64, 1 << 20, 0};
    uint64_t cursor = 0;
    assert_int_equal(wm_lifecycle_tick(&P, &b, &cursor), SMP_TICK_MORE);
    assert_int_equal(H.nq, 1);
    assert_int_equal(H.q[0].type, WM_OP_LEASE_DELETE);
    cursor = 0;
    wm_lifecycle_tick(&P, &b, &cursor);
    assert_int_equal(H.nq, 1); /* already in flight: not twice */
    deliver(SMP_OK);
    assert_int_equal(wm_store_get(P.store, &rev.id)->lease_count, 0);
    assert_int_equal(P.leases_expired, 1);
}

/* While the gate refuses lease records (an HA upgrade), a lease is granted
 * at once and held in memory only: nothing appended, no durable lease, but
 * it protects the revision (removal BUSY), renews and releases in memory and
 * ends on expiry; once appends work again the tick makes a live one durable
 * under its id, and it is protected by the pending grant meanwhile. */
static void test_volatile_leases_while_the_gate_is_closed(void **state)
{
    (void)state;
    wm_revision rev;
    smp_rpc_call c, c2;
    seed_ready("vol", WM_RES_COLD, WM_MODE_AUTO, &rev); /* would promote */
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, &rev.id);
    Wmrpc__LeaseRequest req = WMRPC__LEASE_REQUEST__INIT;
    req.identity = &id;
    req.ttl_ms = 1000;
    H.append_rc = SMP_EGATE;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &req.base, &c);
    assert_int_equal(c.status, SMP_OK);
    assert_int_equal(H.nq, 0); /* nothing appended */
    Wmrpc__LeaseResponse *lr = wmrpc__lease_response__unpack(NULL, c.len, (uint8_t *)c.body);
    assert_non_null(lr->lease);
    uint64_t lid = lr->lease->id;
    assert_int_equal(lr->lease->metadata_generation, 1); /* no promotion */
    wmrpc__lease_response__free_unpacked(lr, NULL);
    assert_null(wm_store_lease(P.store, lid));
    assert_int_equal(wm_store_get(P.store, &rev.id)->lease_count, 0);
    assert_int_equal(P.auto_triggers[WM_AUTO_PROMOTE_ON_ACCESS], 0);
    assert_true(wm_pending_lease_grants(&P, rev.group_key));

    Wmrpc__IdentityRequest rm = WMRPC__IDENTITY_REQUEST__INIT;
    rm.identity = &id;
    rm.expected_metadata_generation = 1;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &rm.base, &c2);
    assert_int_equal(c2.status, WM_EBUSY);

    /* Renewed in memory; a second one released in memory. */
    req.lease_id = lid;
    req.ttl_ms = 5000;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, &req.base, &c);
    assert_int_equal(c.status, SMP_OK);
    assert_int_equal(H.nq, 0);
    req.lease_id = 0;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &req.base, &c);
    lr = wmrpc__lease_response__unpack(NULL, c.len, (uint8_t *)c.body);
    uint64_t lid2 = lr->lease->id;
    wmrpc__lease_response__free_unpacked(lr, NULL);
    assert_int_not_equal(lid2, lid);
    assert_int_equal(P.n_vleases, 2);
    req.lease_id = lid2;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, &req.base, &c);
    assert_int_equal(c.status, SMP_OK);
    assert_int_equal(P.n_vleases, 1);

    /* A third one expires in memory. */
    req.lease_id = 0;
    req.ttl_ms = 100;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &req.base, &c);
    assert_int_equal(P.n_vleases, 2);
    H.wall += 1000;
    wm_vleases_tick(&P); /* the gate is still closed: expired one dropped, nothing appended */
    assert_int_equal(P.n_vleases, 1);
    assert_int_equal(H.nq, 0);

    /* The gate opens: the live lease becomes durable under its id. */
    H.append_rc = 0;
    wm_vleases_tick(&P);
    assert_int_equal(P.n_vleases, 0);
    assert_int_equal(H.nq, 1);
    assert_int_equal(H.q[0].type, WM_OP_LEASE_UPSERT);
    assert_true(wm_pending_lease_grants(&P, rev.group_key)); /* protected while in flight */
    deliver(SMP_OK);
    assert_non_null(wm_store_lease(P.store, lid));
    assert_int_equal(wm_store_get(P.store, &rev.id)->lease_count, 1);
    req.lease_id = lid;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, &req.base, &c);
    assert_int_equal(H.q[0].type, WM_OP_LEASE_DELETE);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    assert_int_equal(wm_store_get(P.store, &rev.id)->lease_count, 0);
}

static void *f_alloc(size_t n)
{
    return malloc(n);
}

/* A reload hands the volatile leases to the next instance (they are in no
 * record and no snapshot): the new instance holds them, on the same
 * revision, and they still protect it. A format 1 handoff (without them)
 * is still read; a truncated lease part is refused with a sentence. */
static void test_volatile_leases_survive_a_reload_handoff(void **state)
{
    (void)state;
    wm_revision rev;
    smp_rpc_call c;
    char why[256] = "";
    wm_plugin next;
    seed_ready("handed", WM_RES_HOT, WM_MODE_MANUAL, &rev);
    API.alloc = f_alloc;
    smp_handoff before = {.struct_size = sizeof(before)}; /* no volatile lease yet */
    assert_int_equal(wm_handoff_export(&P, &before), SMP_OK);

    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, &rev.id);
    Wmrpc__LeaseRequest req = WMRPC__LEASE_REQUEST__INIT;
    req.identity = &id;
    req.ttl_ms = 60000;
    H.append_rc = SMP_EGATE;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &req.base, &c);
    assert_int_equal(c.status, SMP_OK);
    assert_int_equal(P.n_vleases, 1);
    uint64_t lid = P.vleases[0].lease.id;
    smp_handoff h = {.struct_size = sizeof(h)};
    assert_int_equal(wm_handoff_export(&P, &h), SMP_OK);
    assert_int_equal(h.format, WM_HANDOFF_FORMAT);

    /* The next instance holds the lease on the same revision. */
    memset(&next, 0, sizeof(next));
    next.api = &API;
    assert_int_equal(wm_store_create(&next.store), WM_OK);
    assert_int_equal(wm_handoff_import(&next, &h, why, sizeof(why)), SMP_OK);
    assert_int_equal(wm_handoff_self_check(&next, why, sizeof(why)), SMP_OK);
    assert_int_equal(next.n_vleases, 1);
    assert_int_equal(next.vleases[0].lease.id, lid);
    assert_string_equal(next.vleases[0].group_key, rev.group_key);
    assert_true(wm_vleases_on(&next, rev.group_key));
    wm_vleases_free(&next);
    wm_store_free(next.store);

    /* Format 1 (an older exporter): the bytes before the lease count. */
    smp_handoff old = before;
    old.format = 1;
    old.len = before.len - 4;
    memset(&next, 0, sizeof(next));
    next.api = &API;
    assert_int_equal(wm_store_create(&next.store), WM_OK);
    assert_int_equal(wm_handoff_import(&next, &old, why, sizeof(why)), SMP_OK);
    assert_int_equal(wm_handoff_self_check(&next, why, sizeof(why)), SMP_OK);
    assert_int_equal(next.n_vleases, 0);
    assert_non_null(wm_store_get(next.store, &rev.id));
    wm_store_free(next.store);

    /* Format 2 cut inside its lease: refused, naming it; nothing held. */
    smp_handoff cut = h;
    cut.len = h.len - 3;
    memset(&next, 0, sizeof(next));
    next.api = &API;
    assert_int_equal(wm_store_create(&next.store), WM_OK);
    assert_int_equal(wm_handoff_import(&next, &cut, why, sizeof(why)), SMP_EPROTO);
    assert_non_null(strstr(why, "volatile lease 0 of 1 is truncated"));
    assert_int_equal(next.n_vleases, 0);
    wm_vleases_free(&next);
    wm_store_free(next.store);
    free(before.data);
    free(h.data);
}

/* The guard: puts only into an IMPORTING revision's group, only its own
 * keys, not while its commit is in flight; stale puts of an open import may
 * be revoked; everything else on a managed group is refused and counted;
 * unmanaged groups are not the plugin's business. */
static void test_guard_answers_from_revision_state(void **state)
{
    (void)state;
    wm_identity w;
    smp_rpc_call c;
    char payload[WM_KEY_MAX + 1], group[WM_KEY_MAX + 1];
    wmt_identity(&w, "g", 1);
    begin(&w, &c);
    deliver(SMP_OK);
    deliver(SMP_OK);
    wm_group_key(&w, group, sizeof(group));
    wm_payload_key(&w, 0, payload, sizeof(payload));
    smp_guard_request g = {sizeof(g), SMP_GUARD_PUT_INTO_GROUP, payload, group, 1, SMP_DATA_WEIGHT,
                           SMP_REPLICA_MEMORY};
    assert_int_equal(wm_guard_check(&P, &g), SMP_GUARD_ALLOW);
    g.key = "elsewhere/key";
    assert_int_equal(wm_guard_check(&P, &g), SMP_GUARD_VETO);
    g.key = payload;
    g.reason = SMP_GUARD_STALE_PUT_CLEANUP;
    assert_int_equal(wm_guard_check(&P, &g), SMP_GUARD_ALLOW);
    for (int r = SMP_GUARD_BATCH_EVICT; r <= SMP_GUARD_COLD_EVICT; r++) {
        if (r == SMP_GUARD_STALE_PUT_CLEANUP) continue;
        g.reason = (smp_guard_reason)r;
        assert_int_equal(wm_guard_check(&P, &g), SMP_GUARD_VETO);
        assert_int_equal(P.guard_skips[r], 1);
    }
    g.group_managed = 0;
    assert_int_equal(wm_guard_check(&P, &g), SMP_GUARD_ALLOW);

    /* A commit in flight closes the group to new puts. */
    /* Listed in key order, as the host does: the manifest sorts first. */
    memset(H.objs, 0, 2 * sizeof(H.objs[0]));
    strcpy(H.objs[1].key, payload);
    strcpy(H.objs[1].group, group);
    H.objs[1].size = 5;
    H.objs[1].type = SMP_DATA_WEIGHT;
    wm_manifest_key(&w, H.objs[0].key, sizeof(H.objs[0].key));
    strcpy(H.objs[0].group, group);
    H.objs[0].size = 3;
    H.objs[0].type = SMP_DATA_METADATA;
    memset(H.objs[0].sha, 7, 32);
    H.nobjs = 2;
    wm_affinity aff = {0};
    aff.n_units = 1;
    aff.units = calloc(1, sizeof(*aff.units));
    aff.units[0].members = calloc(1, sizeof(char *));
    aff.units[0].members[0] = strdup(payload);
    aff.units[0].n_members = 1;
    aff.units[0].logical_bytes = 5;
    uint8_t keys_sha[32], aff_sha[32];
    const char *keys[1] = {payload};
    wm_payload_keys_digest(keys, 1, keys_sha);
    wm_affinity_digest(&aff, aff_sha);
    Wmrpc__ImportCommitRequest req = WMRPC__IMPORT_COMMIT_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    Wmrpc__AffinityUnit unit = WMRPC__AFFINITY_UNIT__INIT;
    Wmrpc__AffinityUnit *units[1] = {&unit};
    wmt_pb_identity(&id, &w);
    unit.n_members = 1;
    unit.members = aff.units[0].members;
    unit.logical_bytes = 5;
    req.identity = &id;
    req.expected_metadata_generation = 1;
    req.payload_count = 1;
    req.logical_bytes = 5;
    req.payload_keys_sha256 = (ProtobufCBinaryData){32, keys_sha};
    req.manifest_key = H.objs[0].key;
    req.manifest_sha256 = (ProtobufCBinaryData){32, H.objs[0].sha};
    req.n_units = 1;
    req.units = units;
    req.affinity_sha256 = (ProtobufCBinaryData){32, aff_sha};
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_COMMIT, &req.base, &c);
    if (c.answered) fail_msg("commit answered %d: %.*s", c.status, (int)c.len, c.body);
    g.group_managed = 1;
    g.reason = SMP_GUARD_PUT_INTO_GROUP;
    assert_int_equal(wm_guard_check(&P, &g), SMP_GUARD_VETO);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    assert_int_equal(wm_store_get(P.store, &w)->availability, WM_AVAIL_READY);
    assert_int_equal(wm_guard_check(&P, &g), SMP_GUARD_VETO);
    /* An unfinished put is not a member (the host asks again at put end):
     * freeing it is allowed even once the revision is READY. */
    g.reason = SMP_GUARD_STALE_PUT_CLEANUP;
    assert_int_equal(wm_guard_check(&P, &g), SMP_GUARD_ALLOW);
    /* The default policy (MIXED) published HOT with its migration. */
    const wm_revision *r = wm_store_get(P.store, &w);
    assert_int_equal(r->residency, WM_RES_HOT);
    assert_int_equal(wm_store_operation(P.store, r->operation_id)->target, WM_RES_MIXED);
    wm_affinity_clear(&aff);
}

static int obj_cmp(const void *a, const void *b)
{
    return strcmp(((const fake_obj *)a)->key, ((const fake_obj *)b)->key);
}

/* A commit over a group larger than one listing page (600 payloads, pages
 * of 256) sees every member once: it publishes, and the same group with one
 * payload's size changed is refused for its bytes. */
static void test_commit_pages_through_a_large_group(void **state)
{
    (void)state;
    enum { N = 600 };
    wm_identity w;
    smp_rpc_call c;
    char group[WM_KEY_MAX + 1];
    static char keys[N][WM_KEY_MAX + 1];
    const char *kp[N];
    wmt_identity(&w, "big", 1);
    begin(&w, &c);
    deliver(SMP_OK);
    deliver(SMP_OK);
    wm_group_key(&w, group, sizeof(group));
    memset(H.objs, 0, sizeof(H.objs));
    for (int i = 0; i < N; i++) {
        wm_payload_key(&w, (uint64_t)i, keys[i], sizeof(keys[i]));
        kp[i] = keys[i];
        strcpy(H.objs[i].key, keys[i]);
        strcpy(H.objs[i].group, group);
        H.objs[i].size = (uint64_t)i + 1;
        H.objs[i].type = SMP_DATA_WEIGHT;
    }
    wm_manifest_key(&w, H.objs[N].key, sizeof(H.objs[N].key));
    strcpy(H.objs[N].group, group);
    H.objs[N].size = 9;
    H.objs[N].type = SMP_DATA_METADATA;
    memset(H.objs[N].sha, 3, 32);
    uint8_t man_sha[32];
    memset(man_sha, 3, 32);
    char man_key[WM_KEY_MAX + 1];
    strcpy(man_key, H.objs[N].key);
    H.nobjs = N + 1;
    qsort(H.objs, H.nobjs, sizeof(H.objs[0]), obj_cmp);

    /* Two payloads per unit. */
    wm_affinity aff = {0};
    aff.n_units = N / 2;
    aff.units = calloc(N / 2, sizeof(*aff.units));
    Wmrpc__AffinityUnit *units = calloc(N / 2, sizeof(*units));
    Wmrpc__AffinityUnit **uptr = calloc(N / 2, sizeof(*uptr));
    uint64_t total = 0;
    for (int u = 0; u < N / 2; u++) {
        aff.units[u].members = calloc(2, sizeof(char *));
        aff.units[u].members[0] = strdup(keys[2 * u]);
        aff.units[u].members[1] = strdup(keys[2 * u + 1]);
        aff.units[u].n_members = 2;
        aff.units[u].logical_bytes = (uint64_t)(2 * u + 1) + (uint64_t)(2 * u + 2);
        total += aff.units[u].logical_bytes;
        wmrpc__affinity_unit__init(&units[u]);
        units[u].members = aff.units[u].members;
        units[u].n_members = 2;
        units[u].logical_bytes = aff.units[u].logical_bytes;
        uptr[u] = &units[u];
    }
    uint8_t keys_sha[32], aff_sha[32];
    assert_int_equal(wm_payload_keys_digest(kp, N, keys_sha), WM_OK);
    assert_int_equal(wm_affinity_digest(&aff, aff_sha), WM_OK);
    Wmrpc__ImportCommitRequest req = WMRPC__IMPORT_COMMIT_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, &w);
    req.identity = &id;
    req.expected_metadata_generation = 1;
    req.payload_count = N;
    req.logical_bytes = total;
    req.payload_keys_sha256 = (ProtobufCBinaryData){32, keys_sha};
    req.manifest_key = man_key;
    req.manifest_sha256 = (ProtobufCBinaryData){32, man_sha};
    req.n_units = N / 2;
    req.units = uptr;
    req.affinity_sha256 = (ProtobufCBinaryData){32, aff_sha};

    /* One payload larger than declared: refused, naming the bytes. */
    for (size_t i = 0; i < H.nobjs; i++)
        if (strcmp(H.objs[i].key, keys[599]) == 0) H.objs[i].size += 1;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_COMMIT, &req.base, &c);
    assert_int_equal(c.status, WM_EINVALID_ARGUMENT);
    assert_non_null(strstr(c.body, "logical bytes"));
    for (size_t i = 0; i < H.nobjs; i++)
        if (strcmp(H.objs[i].key, keys[599]) == 0) H.objs[i].size -= 1;

    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_COMMIT, &req.base, &c);
    if (c.answered) fail_msg("commit answered %d: %.*s", c.status, (int)c.len, c.body);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    const wm_revision *r = wm_store_get(P.store, &w);
    assert_int_equal(r->availability, WM_AVAIL_READY);
    assert_int_equal(r->payload_count, N);
    assert_int_equal(r->logical_bytes, total);
    assert_int_equal(wm_store_affinity(P.store, &w)->n_units, N / 2);
    free(units);
    free(uptr);
    wm_affinity_clear(&aff);
}

static int applied_calls, applied_status;
static void on_applied(wm_plugin *p, void *arg, int status)
{
    (void)p;
    assert_ptr_equal(arg, &applied_calls);
    applied_calls++;
    applied_status = status;
}

/* The lifecycle's way to change a revision: wm_submit_upsert holds the
 * revision busy while the record is in flight, applies it when durable and
 * then calls back; a record the store would refuse is refused before the
 * append; a failed append calls back with DURABILITY_FAILED and changes
 * nothing. */
static void test_lifecycle_submit(void **state)
{
    (void)state;
    wm_revision rev;
    smp_rpc_call c;
    seed_ready("life", WM_RES_HOT, WM_MODE_AUTO, &rev);
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, &rev.id);

    /* Start a migration to COLD through the RPC. */
    Wmrpc__MigrateRequest mig = WMRPC__MIGRATE_REQUEST__INIT;
    mig.identity = &id;
    mig.target_residency = WM_RES_COLD;
    mig.expected_metadata_generation = 1;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_MIGRATE, &mig.base, &c);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    const wm_revision *cur = wm_store_get(P.store, &rev.id);
    wm_operation op = *wm_store_operation(P.store, cur->operation_id);

    /* Progress only: the revision at its generation, the operation moved. */
    op.members_done = 1;
    op.bytes_done = 100;
    op.updated_ms = 20000;
    applied_calls = 0;
    assert_int_equal(wm_submit_upsert(&P, cur, &op, 1, on_applied, &applied_calls), WM_OK);
    assert_true(wm_pending_metadata(&P, rev.group_key));
    Wmrpc__IdentityRequest rm = WMRPC__IDENTITY_REQUEST__INIT;
    rm.identity = &id;
    rm.expected_metadata_generation = 2;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &rm.base, &c);
    assert_int_equal(c.status, WM_EBUSY);
    deliver(SMP_OK);
    assert_int_equal(applied_calls, 1);
    assert_int_equal(applied_status, WM_OK);
    assert_int_equal(wm_store_operation(P.store, op.id)->bytes_done, 100);
    assert_int_equal(wm_store_get(P.store, &rev.id)->metadata_generation, 2);

    /* Finishing: COLD, the operation SUCCEEDED and no longer active. */
    wm_revision next = *wm_store_get(P.store, &rev.id);
    next.metadata_generation = 3;
    next.residency = WM_RES_COLD;
    next.observed_hot_ratio = 0.0;
    next.operation_id = 0;
    next.updated_ms = 30000;
    op.state = WM_OPS_SUCCEEDED;
    op.members_done = op.members_total;
    op.bytes_done = op.bytes_total;
    /* An operation still RUNNING while the revision no longer names it is
     * refused before anything is appended. */
    wm_operation still_running = op;
    still_running.state = WM_OPS_RUNNING;
    assert_int_equal(wm_submit_upsert(&P, &next, &still_running, 1, on_applied, &applied_calls),
                     WM_EINVALID_ARGUMENT);
    assert_int_equal(H.nq, 0);
    H.append_rc = SMP_EGATE;
    assert_int_equal(wm_submit_upsert(&P, &next, &op, 1, on_applied, &applied_calls), SMP_EGATE);
    H.append_rc = 0;
    assert_int_equal(wm_submit_upsert(&P, &next, &op, 1, on_applied, &applied_calls), WM_OK);
    deliver(SMP_EDURABILITY);
    assert_int_equal(applied_calls, 2);
    assert_int_equal(applied_status, WM_EDURABILITY_FAILED);
    assert_int_equal(wm_store_get(P.store, &rev.id)->residency, WM_RES_HOT);
    assert_int_equal(wm_submit_upsert(&P, &next, &op, 1, on_applied, &applied_calls), WM_OK);
    deliver(SMP_OK);
    assert_int_equal(applied_calls, 3);
    assert_int_equal(applied_status, WM_OK);
    cur = wm_store_get(P.store, &rev.id);
    assert_int_equal(cur->residency, WM_RES_COLD);
    assert_int_equal(cur->operation_id, 0);
    assert_int_equal(wm_store_operation(P.store, op.id)->state, WM_OPS_SUCCEEDED);
}

/* Bodies that do not decode, or decode to nonsense, are answered with an
 * error and never crash a handler. */
static void test_garbage_bodies_never_crash(void **state)
{
    (void)state;
    uint8_t buf[64];
    uint32_t seed = 12345;
    for (int round = 0; round < 400; round++) {
        size_t n = (size_t)(round % 64);
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            buf[i] = (uint8_t)(seed >> 16);
        }
        for (size_t m = 0; m < H.svc->n_methods; m++) {
            smp_rpc_call c;
            memset(&c, 0, sizeof(c));
            H.svc->methods[m].handler(&P, &c, buf, n);
            if (!c.answered) {
                /* A mutation may be waiting for its record: finish it. */
                while (H.nq > 0) deliver(SMP_OK);
            }
            assert_int_equal(c.answered, 1);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Generation replacement (weight_lineage.c)                                 */
/* ------------------------------------------------------------------------ */

/* A READY revision of resource `name` at weight generation gen. */
static void seed_gen(const char *name, uint64_t gen, wm_revision *out)
{
    static const uint64_t bytes[2] = {100, 200};
    wm_affinity aff = {0};
    wm_metadata_upsert u;
    char msg[256];
    memset(&u, 0, sizeof(u));
    wmt_ready_revision(&u.revision, &aff, name, gen, bytes, 2);
    u.revision.policy.preferred = WM_RES_HOT;
    u.revision.policy.mode = WM_MODE_MANUAL;
    u.has_affinity = 1;
    u.affinity = aff;
    if (wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
    *out = u.revision;
    wm_affinity_clear(&aff);
}

static void upsert_begin(const wm_identity *base, uint64_t target, wm_upsert_mode mode,
                         const char *rid, uint64_t expected, smp_rpc_call *call)
{
    Wmrpc__UpsertBeginRequest req = WMRPC__UPSERT_BEGIN_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, base);
    req.base_identity = &id;
    req.target_generation = target;
    req.mode = (uint32_t)mode;
    req.request_id = (char *)rid;
    req.expected_metadata_generation = expected;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_UPSERT_BEGIN, &req.base, call);
}

/* The phase an answered UPSERT_BEGIN / UPSERT_STATUS carries. */
static int answered_phase(const smp_rpc_call *c, char *rid_out)
{
    assert_int_equal(c->answered, 1);
    assert_int_equal(c->status, SMP_OK);
    Wmrpc__UpsertResponse *r = wmrpc__upsert_response__unpack(NULL, c->len, (const uint8_t *)c->body);
    assert_non_null(r);
    assert_non_null(r->claim);
    int phase = (int)r->claim->phase;
    if (rid_out) strcpy(rid_out, r->claim->request_id);
    wmrpc__upsert_response__free_unpacked(r, NULL);
    return phase;
}

static const wm_lineage_claim *claim_of(const wm_identity *id)
{
    wm_lineage lin;
    wm_identity_lineage(id, &lin);
    const wm_lineage_entry *e = wm_store_lineage(P.store, &lin);
    return e && e->has_claim ? &e->claim : NULL;
}

/* Drive once; the claim record appended (if any) is made durable. Returns
 * the type of what was appended (0: nothing). */
static uint16_t drive_step(void)
{
    size_t before = H.nq;
    wm_lineage_drive(&P);
    if (H.nq == before) return 0;
    assert_int_equal(H.nq, before + 1);
    /* While it is in flight another round appends nothing more. */
    wm_lineage_drive(&P);
    assert_int_equal(H.nq, before + 1);
    return deliver(SMP_OK);
}

static int lease_acquire_status(const wm_identity *id, int deliver_it)
{
    smp_rpc_call c;
    Wmrpc__LeaseRequest req = WMRPC__LEASE_REQUEST__INIT;
    Wmrpc__WeightIdentity wid;
    wmt_pb_identity(&wid, id);
    req.identity = &wid;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &req.base, &c);
    if (!c.answered && deliver_it) deliver(SMP_OK);
    assert_int_equal(c.answered, 1);
    return c.status;
}

/* Forget a revision record (as a tombstone expiry would): its lineage's
 * driver then sees it gone. */
static void forget(const wm_identity *id)
{
    wm_metadata_delete d;
    char msg[256];
    memset(&d, 0, sizeof(d));
    d.id = *id;
    d.metadata_generation = wm_store_get(P.store, id)->metadata_generation;
    d.reason = WM_DEL_TOMBSTONE_EXPIRED;
    uint64_t op = wm_store_get(P.store, id)->operation_id;
    d.operation_ids = op ? &op : NULL;
    d.n_operation_ids = op ? 1 : 0;
    assert_int_equal(wm_store_apply_delete(P.store, &d, msg, sizeof(msg)), WM_OK);
}

/* PUT_FIRST: the claim is answered only once durable; a retry gets it as it
 * is, a competitor CONFLICT (BUSY while a record is in flight); the driver
 * waits for the target, fences the base only after the target is READY,
 * waits for the base's lease, deletes the base, then commits the
 * watermark -- one durable record per step. */
static void test_upsert_put_first_steps(void **state)
{
    (void)state;
    wm_revision base, target;
    smp_rpc_call c, c2;
    char rid[200];
    seed_gen("up", 1, &base);
    upsert_begin(&base.id, 2, WM_UPSERT_PUT_FIRST, "r1", base.metadata_generation, &c);
    assert_int_equal(c.answered, 0);
    assert_int_equal(H.nq, 1);
    assert_int_equal(H.q[0].type, WM_OP_LINEAGE_CLAIM);
    assert_null(claim_of(&base.id));
    upsert_begin(&base.id, 3, WM_UPSERT_PUT_FIRST, "r2", base.metadata_generation, &c2);
    assert_int_equal(c2.status, WM_EBUSY);
    assert_int_equal(deliver(SMP_OK), WM_OP_LINEAGE_CLAIM);
    assert_int_equal(answered_phase(&c, rid), WM_PHASE_CLAIMED);
    assert_string_equal(rid, "r1");

    upsert_begin(&base.id, 2, WM_UPSERT_PUT_FIRST, "r1", base.metadata_generation, &c);
    assert_int_equal(answered_phase(&c, NULL), WM_PHASE_CLAIMED);
    assert_int_equal(H.nq, 0);
    upsert_begin(&base.id, 3, WM_UPSERT_PUT_FIRST, "r2", base.metadata_generation, &c);
    assert_int_equal(c.status, WM_ECONFLICT);
    upsert_begin(&base.id, 3, WM_UPSERT_PUT_FIRST, "r1", base.metadata_generation, &c);
    assert_int_equal(c.status, WM_ECONFLICT); /* same id, other arguments */

    assert_int_equal(drive_step(), 0); /* no target yet */
    seed_gen("up", 2, &target);
    assert_int_equal(drive_step(), WM_OP_LINEAGE_CLAIM);
    assert_int_equal(claim_of(&base.id)->phase, WM_PHASE_IMPORTING_TARGET);
    /* Not fenced yet: a reader gets a lease on the base. */
    assert_int_equal(lease_acquire_status(&base.id, 1), SMP_OK);
    assert_int_equal(drive_step(), WM_OP_LINEAGE_CLAIM);
    assert_int_equal(claim_of(&base.id)->phase, WM_PHASE_BASE_FENCED);
    assert_int_equal(lease_acquire_status(&base.id, 0), WM_ENOT_READY);
    assert_int_equal(drive_step(), WM_OP_LINEAGE_CLAIM);
    assert_int_equal(claim_of(&base.id)->phase, WM_PHASE_DRAINING_BASE);
    assert_int_equal(drive_step(), 0); /* the lease holds the base */
    assert_int_equal(drive_step(), 0);
    const wm_lease *l = wm_store_lease_at(P.store, 0);
    wm_lease_delete ld = {l->id, l->id_of, WM_LEASE_RELEASED};
    char msg[256];
    assert_int_equal(wm_store_apply_lease_delete(P.store, &ld, msg, sizeof(msg)), WM_OK);
    assert_int_equal(drive_step(), WM_OP_LINEAGE_CLAIM);
    assert_int_equal(claim_of(&base.id)->phase, WM_PHASE_DELETING_BASE);
    assert_int_equal(drive_step(), WM_OP_METADATA_UPSERT);
    assert_int_equal(wm_store_get(P.store, &base.id)->availability, WM_AVAIL_DELETING);
    assert_int_equal(drive_step(), 0); /* the lifecycle deletes it */
    forget(&base.id);
    assert_int_equal(drive_step(), WM_OP_LINEAGE_CLAIM);
    const wm_lineage_claim *cl = claim_of(&base.id);
    assert_int_equal(cl->phase, WM_PHASE_COMMITTED);
    assert_int_equal(cl->committed_watermark, 2);
    assert_int_equal(drive_step(), 0);
    /* Below or at the watermark: refused before anything is written. */
    upsert_begin(&target.id, 2, WM_UPSERT_PUT_FIRST, "r3", target.metadata_generation, &c);
    assert_int_equal(c.status, WM_EINVALID_ARGUMENT);
    wm_revision g1;
    seed_gen("up", 1, &g1);
    upsert_begin(&g1.id, 2, WM_UPSERT_PUT_FIRST, "r4", g1.metadata_generation, &c);
    assert_int_equal(c.status, WM_ESTALE_GENERATION);
    assert_int_equal(H.nq, 0);
}

/* PUT_FIRST: a target import that ends before READY aborts the claim and
 * leaves the base as it was. */
static void test_upsert_put_first_target_failure_aborts(void **state)
{
    (void)state;
    wm_revision base, target;
    smp_rpc_call c;
    seed_gen("ab", 1, &base);
    upsert_begin(&base.id, 2, WM_UPSERT_PUT_FIRST, "r1", base.metadata_generation, &c);
    deliver(SMP_OK);
    seed_gen("ab", 2, &target);
    assert_int_equal(drive_step(), WM_OP_LINEAGE_CLAIM);
    forget(&target.id); /* the import went away */
    assert_int_equal(drive_step(), WM_OP_LINEAGE_CLAIM);
    const wm_lineage_claim *cl = claim_of(&base.id);
    assert_int_equal(cl->phase, WM_PHASE_ABORTED);
    assert_non_null(strstr(cl->error, "intact"));
    const wm_revision *b = wm_store_get(P.store, &base.id);
    assert_int_equal(b->availability, WM_AVAIL_READY);
    assert_int_equal(b->metadata_generation, base.metadata_generation);
    assert_int_equal(lease_acquire_status(&base.id, 1), SMP_OK);
}

/* DELETE_FIRST: BUSY with a lease on the base and nothing written; the HA
 * gate refusal names the lineage flag; the target import waits until the
 * base is deleted; another generation is CONFLICT while the claim is open. */
static void test_upsert_delete_first_steps_and_gate(void **state)
{
    (void)state;
    wm_revision base, target;
    smp_rpc_call c;
    wm_lease l;
    char msg[256];
    seed_gen("df", 1, &base);
    wmt_lease(&l, &base, 7);
    assert_int_equal(wm_store_apply_lease_upsert(P.store, &l, msg, sizeof(msg)), WM_OK);
    upsert_begin(&base.id, 2, WM_UPSERT_DELETE_FIRST, "d1", base.metadata_generation, &c);
    assert_int_equal(c.status, WM_EBUSY);
    assert_int_equal(H.nq, 0);
    assert_null(claim_of(&base.id));
    wm_lease_delete ld = {l.id, l.id_of, WM_LEASE_RELEASED};
    assert_int_equal(wm_store_apply_lease_delete(P.store, &ld, msg, sizeof(msg)), WM_OK);

    H.append_rc = SMP_EGATE;
    upsert_begin(&base.id, 2, WM_UPSERT_DELETE_FIRST, "d1", base.metadata_generation, &c);
    assert_int_equal(c.status, SMP_EGATE);
    assert_non_null(strstr(c.body, WM_GATE_LINEAGE));
    assert_null(claim_of(&base.id));
    H.append_rc = 0;

    upsert_begin(&base.id, 2, WM_UPSERT_DELETE_FIRST, "d1", base.metadata_generation, &c);
    /* While the claim record is in flight the base is already fenced. */
    assert_int_equal(lease_acquire_status(&base.id, 0), WM_ENOT_READY);
    deliver(SMP_OK);
    assert_int_equal(answered_phase(&c, NULL), WM_PHASE_CLAIMED);
    wm_identity tid = base.id, other = base.id;
    tid.weight_generation = 2;
    other.weight_generation = 5;
    assert_int_equal(wm_lineage_import_check(&P, &tid, msg, sizeof(msg)), WM_EBUSY);
    assert_int_equal(wm_lineage_import_check(&P, &other, msg, sizeof(msg)), WM_ECONFLICT);
    begin(&tid, &c);
    assert_int_equal(c.status, WM_EBUSY);
    assert_int_equal(lease_acquire_status(&base.id, 0), WM_ENOT_READY); /* fenced */

    assert_int_equal(drive_step(), WM_OP_LINEAGE_CLAIM);
    assert_int_equal(claim_of(&base.id)->phase, WM_PHASE_DELETING_BASE);
    assert_int_equal(wm_lineage_import_check(&P, &tid, msg, sizeof(msg)), WM_EBUSY);
    assert_int_equal(drive_step(), WM_OP_METADATA_UPSERT);
    forget(&base.id);
    assert_int_equal(drive_step(), WM_OP_LINEAGE_CLAIM);
    assert_int_equal(claim_of(&base.id)->phase, WM_PHASE_BASE_DELETED);
    assert_int_equal(wm_lineage_import_check(&P, &tid, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_lineage_abort_check(&P, &tid, msg, sizeof(msg)), WM_ECONFLICT);
    assert_int_equal(wm_lineage_abort_check(&P, &other, msg, sizeof(msg)), WM_OK);
    assert_int_equal(drive_step(), 0); /* waits for the import */
    seed_gen("df", 2, &target);
    assert_int_equal(drive_step(), WM_OP_LINEAGE_CLAIM);
    assert_int_equal(claim_of(&base.id)->phase, WM_PHASE_IMPORTING_TARGET);
    assert_int_equal(drive_step(), WM_OP_LINEAGE_CLAIM);
    assert_int_equal(claim_of(&base.id)->phase, WM_PHASE_COMMITTED);
    assert_int_equal(claim_of(&base.id)->committed_watermark, 2);

    /* Status of a lineage without a claim: an empty answer. */
    Wmrpc__UpsertStatusRequest sreq = WMRPC__UPSERT_STATUS_REQUEST__INIT;
    Wmrpc__WeightIdentity wid;
    wm_identity none = base.id;
    none.resource_id = "nothing";
    wmt_pb_identity(&wid, &none);
    sreq.lineage = &wid;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_UPSERT_STATUS, &sreq.base, &c);
    assert_int_equal(c.status, SMP_OK);
    Wmrpc__UpsertResponse *r = wmrpc__upsert_response__unpack(NULL, c.len, (uint8_t *)c.body);
    assert_non_null(r);
    assert_null(r->claim);
    wmrpc__upsert_response__free_unpacked(r, NULL);
}

/* UPDATE_POLICY on rev at its generation with the given policy fields
 * (0: keep the revision's); the call is answered once durable. */
static void update_policy(const wm_revision *rev, wm_residency pref, double ratio, wm_migration_mode mode,
                          smp_rpc_call *c)
{
    Wmrpc__UpdatePolicyRequest req = WMRPC__UPDATE_POLICY_REQUEST__INIT;
    Wmrpc__WeightPolicy pol = WMRPC__WEIGHT_POLICY__INIT;
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, &rev->id);
    pol.preferred_residency = (uint32_t)pref;
    pol.mixed_hot_ratio = ratio;
    pol.migration_mode = (uint32_t)mode;
    req.identity = &id;
    req.policy = &pol;
    req.expected_metadata_generation = wm_store_get(P.store, &rev->id)->metadata_generation;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_UPDATE_POLICY, &req.base, c);
}

/* Changing preferred on an AUTO or MANUAL revision starts convergence
 * toward it: the policy and a MIGRATING operation toward the new preferred
 * are one record, answered with the operation. A change of mode alone, a
 * PINNED revision, or a preferred it already has starts nothing; while an
 * operation is active a new preferred is BUSY and nothing is written. */
static void test_preferred_change_starts_convergence(void **state)
{
    (void)state;
    wm_revision man, aut, pin;
    smp_rpc_call c;
    seed_ready("conv-m", WM_RES_HOT, WM_MODE_MANUAL, &man);
    seed_ready("conv-a", WM_RES_HOT, WM_MODE_AUTO, &aut);
    seed_ready("conv-p", WM_RES_HOT, WM_MODE_PINNED, &pin);

    update_policy(&man, WM_RES_COLD, 0.0, 0, &c);
    assert_int_equal(c.answered, 0); /* not before durable */
    assert_int_equal(deliver(SMP_OK), WM_OP_METADATA_UPSERT);
    assert_int_equal(c.status, SMP_OK);
    const wm_revision *r = wm_store_get(P.store, &man.id);
    assert_int_equal(r->policy.preferred, WM_RES_COLD);
    assert_true(r->operation_id != 0);
    const wm_operation *op = wm_store_operation(P.store, r->operation_id);
    assert_int_equal(op->kind, WM_OPK_MIGRATING);
    assert_int_equal(op->target, WM_RES_COLD);
    assert_int_equal(op->state, WM_OPS_RUNNING);
    /* Another preferred while that migration runs: BUSY, nothing written. */
    uint64_t gen = r->metadata_generation;
    update_policy(&man, WM_RES_MIXED, 0.5, 0, &c);
    assert_int_equal(c.status, WM_EBUSY);
    assert_int_equal(H.nq, 0);
    assert_int_equal(wm_store_get(P.store, &man.id)->metadata_generation, gen);

    update_policy(&aut, WM_RES_MIXED, 0.25, 0, &c);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    r = wm_store_get(P.store, &aut.id);
    op = wm_store_operation(P.store, r->operation_id);
    assert_non_null(op);
    assert_int_equal(op->target, WM_RES_MIXED);
    assert_true(op->target_hot_ratio == 0.25);

    /* Nothing to converge to: mode alone, PINNED, already there. */
    update_policy(&pin, WM_RES_COLD, 0.0, 0, &c);
    deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    assert_int_equal(wm_store_get(P.store, &pin.id)->operation_id, 0);
    assert_int_equal(wm_store_get(P.store, &pin.id)->policy.preferred, WM_RES_COLD);
    wm_revision hot;
    seed_ready("conv-h", WM_RES_HOT, WM_MODE_MANUAL, &hot);
    update_policy(&hot, 0, 0.0, WM_MODE_AUTO, &c);
    deliver(SMP_OK);
    assert_int_equal(wm_store_get(P.store, &hot.id)->operation_id, 0);
    assert_int_equal(wm_store_get(P.store, &hot.id)->policy.mode, WM_MODE_AUTO);
}

/* An upsert keeps the base's policy unless the request gives one: the
 * target's import begin without a policy takes the base's (preferred,
 * ratio and mode, not the cluster default); a field the request gives
 * wins over the base's, the others still come from the base. */
static void test_upsert_keeps_the_base_policy(void **state)
{
    (void)state;
    wm_revision base;
    smp_rpc_call c;
    char msg[256];
    seed_gen("keep", 1, &base);
    {
        wm_metadata_upsert u;
        memset(&u, 0, sizeof(u));
        u.revision = *wm_store_get(P.store, &base.id);
        u.revision.policy.preferred = WM_RES_COLD;
        u.revision.policy.mixed_hot_ratio = 0.25;
        u.revision.policy.mode = WM_MODE_MANUAL;
        u.revision.metadata_generation++;
        assert_int_equal(wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)), WM_OK);
    }
    assert_true(P.cluster_policy.preferred != WM_RES_COLD && P.cluster_policy.mode != WM_MODE_MANUAL);
    upsert_begin(&base.id, 2, WM_UPSERT_PUT_FIRST, "keep-1", 2, &c);
    deliver(SMP_OK);
    assert_int_equal(answered_phase(&c, NULL), WM_PHASE_CLAIMED);
    wm_identity tid = base.id;
    tid.weight_generation = 2;
    begin(&tid, &c);
    while (!c.answered && H.nq > 0) deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    const wm_revision *t = wm_store_get(P.store, &tid);
    assert_non_null(t);
    assert_int_equal(t->policy.preferred, WM_RES_COLD);
    assert_true(t->policy.mixed_hot_ratio == 0.25);
    assert_int_equal(t->policy.mode, WM_MODE_MANUAL);

    /* The request's field wins; the rest is the base's. */
    wm_revision b2;
    seed_gen("keep2", 1, &b2);
    {
        wm_metadata_upsert u;
        memset(&u, 0, sizeof(u));
        u.revision = *wm_store_get(P.store, &b2.id);
        u.revision.policy.preferred = WM_RES_COLD;
        u.revision.policy.mode = WM_MODE_MANUAL;
        u.revision.metadata_generation++;
        assert_int_equal(wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)), WM_OK);
    }
    upsert_begin(&b2.id, 2, WM_UPSERT_PUT_FIRST, "keep-2", 2, &c);
    deliver(SMP_OK);
    wm_identity t2 = b2.id;
    t2.weight_generation = 2;
    Wmrpc__ImportBeginRequest req = WMRPC__IMPORT_BEGIN_REQUEST__INIT;
    Wmrpc__WeightPolicy wp = WMRPC__WEIGHT_POLICY__INIT;
    Wmrpc__WeightIdentity wid;
    wmt_pb_identity(&wid, &t2);
    wp.preferred_residency = WM_RES_HOT;
    req.identity = &wid;
    req.policy = &wp;
    invoke(WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_BEGIN, &req.base, &c);
    while (!c.answered && H.nq > 0) deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    t = wm_store_get(P.store, &t2);
    assert_int_equal(t->policy.preferred, WM_RES_HOT);
    assert_int_equal(t->policy.mode, WM_MODE_MANUAL);

    /* A plain import (no claim) starts from the cluster default. */
    wm_identity plain = base.id;
    plain.resource_id = "plain";
    begin(&plain, &c);
    while (!c.answered && H.nq > 0) deliver(SMP_OK);
    assert_int_equal(c.status, SMP_OK);
    t = wm_store_get(P.store, &plain);
    assert_int_equal(t->policy.preferred, P.cluster_policy.preferred);
    assert_int_equal(t->policy.mode, P.cluster_policy.mode);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_begin_answers_after_durable_record, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_appends_change_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_on_cold_auto_revision_promotes_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_access_promotion_waits_for_the_cooldown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_in_flight_mutations_and_lease_sweep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_volatile_leases_while_the_gate_is_closed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_volatile_leases_survive_a_reload_handoff, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_guard_answers_from_revision_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_commit_pages_through_a_large_group, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lifecycle_submit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage_bodies_never_crash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upsert_put_first_steps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upsert_put_first_target_failure_aborts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upsert_delete_first_steps_and_gate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preferred_change_starts_convergence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upsert_keeps_the_base_policy, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
