/* test_weight_publish.c -- publishing, querying, leasing and removing weight
 * revisions on a real master with the real weight_mgmt.so.
 *
 * Payloads (WEIGHT) and the manifest (METADATA) travel through the node data
 * path with kv_client into the group IMPORT_BEGIN names; every weight call is
 * a raw service-16 RPC (weight_rpc.c), so the wire contract of
 * proto/weight_rpc.proto is what is pinned: statuses (WM_E* / SMP_E*), the
 * error sentence in the reply body, and the messages. The digests the commit
 * carries are computed in weight_rpc.c from their definition (sorted payload
 * keys, affinity lines), independently of the plugin's code. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "etcd_fixture.h"
#include "harness.h"
#include "weight_rpc.h"

/* ------------------------------------------------------------------------ */
/* Tests                                                                     */
/* ------------------------------------------------------------------------ */

/* A HOT revision is published READY + HOT with no operation; its metadata,
 * size and existence answer; retries of begin (CONFLICT once READY) and of
 * commit (the same result, no operation) change nothing; a payload put into
 * its group after READY is refused by the guard and counted. */
static void test_publish_hot_revision(void **state)
{
    wr_fixture *f = *state;
    wr_start(f, "wp-hot", NULL);
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t1", "llm", "llama", 1);
    wr_upload u = {.n = 3, .sizes = {1000, 2000, 3000}, .per_unit = 2};

    Wmrpc__WeightMetadata *md = NULL;
    assert_int_equal(wr_begin(f, &id, WR_RS_HOT, 0, WR_MODE_MANUAL, &md), 0);
    assert_int_equal(md->availability, WR_AV_IMPORTING);
    assert_int_equal(md->residency, WR_RS_UNKNOWN);
    assert_int_equal(md->metadata_generation, 1);
    assert_string_equal(md->group_key, "weights/t1/llm/llama/main/1");
    assert_string_equal(md->manifest_key, "weights/t1/llm/llama/main/1/manifest");
    assert_int_equal(wr_is_exist(f, &id), 0); /* IMPORTING is not readable */

    /* A retried begin while IMPORTING answers the same revision. */
    Wmrpc__WeightMetadata *again = NULL;
    assert_int_equal(wr_begin(f, &id, WR_RS_HOT, 0, WR_MODE_MANUAL, &again), 0);
    assert_string_equal(again->group_key, md->group_key);
    assert_int_equal(again->metadata_generation, 1);
    wmrpc__weight_metadata__free_unpacked(again, NULL);

    wr_put_all(f, &u, md);
    Wmrpc__MetadataResponse *r = NULL;
    assert_int_equal(wr_commit(f, &id, 1, &u, NULL, &r), 0);
    assert_int_equal(r->metadata->availability, WR_AV_READY);
    assert_int_equal(r->metadata->residency, WR_RS_HOT);
    assert_int_equal(r->metadata->metadata_generation, 2);
    assert_int_equal(r->metadata->operation_id, 0);
    assert_null(r->operation);
    assert_int_equal(r->metadata->payload_count, 3);
    assert_int_equal(r->metadata->logical_bytes, 6000);
    assert_int_equal(r->metadata->affinity_count, 2);
    assert_memory_equal(r->metadata->manifest_sha256.data, u.manifest_sha, 32);
    wmrpc__metadata_response__free_unpacked(r, NULL);

    assert_int_equal(wr_is_exist(f, &id), 1);
    Wmrpc__IdentityRequest sreq = WMRPC__IDENTITY_REQUEST__INIT;
    sreq.identity = &id;
    Wmrpc__SizeResponse *sz = NULL;
    assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_SIZE, &sreq.base,
                             &wmrpc__size_response__descriptor, (ProtobufCMessage **)&sz),
                     0);
    assert_int_equal(sz->logical_bytes, 6000);
    wmrpc__size_response__free_unpacked(sz, NULL);

    /* Retried commit: the committed result, same generation, no operation. */
    r = NULL;
    assert_int_equal(wr_commit(f, &id, 1, &u, NULL, &r), 0);
    assert_int_equal(r->metadata->metadata_generation, 2);
    assert_int_equal(r->metadata->operation_id, 0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    /* Retried begin once READY: CONFLICT naming the state. */
    assert_int_equal(wr_begin(f, &id, WR_RS_HOT, 0, WR_MODE_MANUAL, NULL), WR_E_CONFLICT);
    assert_non_null(strstr(f->last_error, "READY"));

    /* The group is sealed: no new payload, no overwrite. */
    char key[1200];
    snprintf(key, sizeof(key), "%s/payload/3", u.group);
    assert_int_equal(kvc_put_bytes(f->kv, key, "x", 1, SMP_DATA_WEIGHT, u.group, 0, NULL), SMP_EVETO);
    snprintf(key, sizeof(key), "%s/payload/0", u.group);
    assert_int_equal(kvc_put_bytes(f->kv, key, "x", 1, SMP_DATA_WEIGHT, u.group, 1, NULL), SMP_EVETO);
    /* A removal is refused by the host before the guard is asked: the key
     * is in the plugin's key space (ABI 1.9). */
    assert_int_equal(kvc_remove(f->kv, key), SMP_EVETO);
    assert_non_null(strstr(kvc_error(f->kv), "is in the key space 'weights/' of plugin weight_mgmt"));
    /* The guard's counts reach /metrics with the next tick (the guard may
     * not call the host itself): a tick between the two puts shows the
     * first count before the second, so both are waited for. */
    char *metrics = NULL;
    int seen = 0;
    for (int i = 0; i < 100 && !seen; i++) {
        free(metrics);
        metrics = NULL;
        assert_int_equal(hx_http_get(&f->m, "/metrics", &metrics), 200);
        seen = strstr(metrics, "weight_guard_skips_total{reason=\"put_into_group\"} 1\n") != NULL &&
               strstr(metrics, "weight_guard_skips_total{reason=\"upsert_into_group\"} 1\n") != NULL;
        if (!seen) {
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    if (!seen) fail_msg("not both guard skips in /metrics:\n%s", metrics);
    assert_non_null(strstr(metrics, "weight_guard_skips_total{reason=\"remove_key\"} 0\n"));
    assert_non_null(strstr(metrics, "weight_revisions{availability=\"READY\"} 1\n"));
    free(metrics);

    /* Unknown revision: NOT_FOUND naming it. */
    Wmrpc__WeightIdentity other;
    wr_set_identity(&other, "t1", "llm", "llama", 7);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, &other, 0, NULL),
                     WR_E_NOT_FOUND);
    assert_non_null(strstr(f->last_error, "llama"));
    wmrpc__weight_metadata__free_unpacked(md, NULL);
}

/* COLD and MIXED revisions are published READY + HOT too, with the initial
 * MIGRATING operation toward the preferred residency in the same record; a
 * retried commit answers the same operation; the operation is queryable;
 * is_exist stays true while it runs. */
static void test_publish_cold_and_mixed_start_migration(void **state)
{
    wr_fixture *f = *state;
    wr_start(f, "wp-cold", NULL);
    int prefs[2] = {WR_RS_COLD, WR_RS_MIXED};
    for (int k = 0; k < 2; k++) {
        Wmrpc__WeightIdentity id;
        wr_set_identity(&id, "t1", "llm", k ? "mixed" : "cold", 1);
        wr_upload u = {.n = 4, .sizes = {100, 200, 300, 400}, .per_unit = 1};
        Wmrpc__MetadataResponse *r = wr_publish(f, &id, prefs[k], WR_MODE_AUTO, &u);
        assert_int_equal(r->metadata->availability, WR_AV_READY);
        assert_int_equal(r->metadata->residency, WR_RS_HOT);
        assert_true(r->metadata->operation_id > 0);
        assert_non_null(r->operation);
        assert_int_equal(r->operation->id, r->metadata->operation_id);
        assert_int_equal(r->operation->kind, WR_OPK_MIGRATING);
        assert_int_equal(r->operation->target_residency, prefs[k]);
        assert_int_equal(r->operation->state, 1);
        if (prefs[k] == WR_RS_MIXED) assert_true(r->operation->target_hot_ratio == 0.5);
        uint64_t op_id = r->operation->id;
        wmrpc__metadata_response__free_unpacked(r, NULL);

        Wmrpc__MetadataResponse *again = NULL;
        assert_int_equal(wr_commit(f, &id, 1, &u, NULL, &again), 0);
        assert_int_equal(again->metadata->operation_id, op_id);
        assert_int_equal(again->metadata->metadata_generation, 2);
        wmrpc__metadata_response__free_unpacked(again, NULL);

        int st;
        Wmrpc__OperationResponse *op = wr_get_op(f, op_id, &st);
        assert_int_equal(st, 0);
        assert_int_equal(op->operation->target_residency, prefs[k]);
        wmrpc__operation_response__free_unpacked(op, NULL);
        assert_int_equal(wr_is_exist(f, &id), 1);

        /* One active operation: an explicit migration is BUSY meanwhile. */
        assert_int_equal(wr_migrate(f, &id, WR_RS_HOT, 2, NULL), WR_E_BUSY);
    }
    int st;
    assert_null(wr_get_op(f, 999, &st));
    assert_int_equal(st, WR_E_NOT_FOUND);
}

/* A commit that disagrees with the group in any way is INVALID_ARGUMENT
 * naming what, and the revision stays IMPORTING; the truthful commit then
 * publishes. */
static void test_commit_refuses_mismatches(void **state)
{
    wr_fixture *f = *state;
    wr_start(f, "wp-bad", NULL);
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "", "llm", "bad", 3);
    wr_upload u = {.n = 3, .sizes = {10, 20, 30}, .per_unit = 1};
    Wmrpc__WeightMetadata *md = NULL;
    assert_int_equal(wr_begin(f, &id, WR_RS_HOT, 0, WR_MODE_AUTO, &md), 0);
    assert_string_equal(md->group_key, "weights/default/llm/bad/main/3");

    /* Before the manifest is there: the group has too few objects. */
    Wmrpc__MetadataResponse *r = NULL;
    assert_int_equal(wr_commit(f, &id, 1, &u, NULL, NULL), WR_E_INVALID_ARGUMENT);
    wr_put_all(f, &u, md);

    struct {
        wr_lies l;
        const char *needle;
    } cases[] = {
        {{.count_delta = 1}, "objects"},
        {{.count_delta = -1}, "objects"},
        {{.bytes_delta = 1}, "logical bytes"},
        {{.bad_keys_digest = 1}, "payload_keys_sha256"},
        {{.bad_manifest_sha = 1}, "SHA-256"},
        {{.bad_affinity_digest = 1}, "affinity"},
        {{.bad_unit_bytes = 1}, "affinity unit 0"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int st = wr_commit(f, &id, 1, &u, &cases[i].l, NULL);
        if (st != WR_E_INVALID_ARGUMENT || strstr(f->last_error, cases[i].needle) == NULL)
            fail_msg("case %zu: status %d, message \"%s\" (wanted \"%s\")", i, st, f->last_error,
                     cases[i].needle);
        r = wr_get_md(f, &id);
        assert_int_equal(r->metadata->availability, WR_AV_IMPORTING);
        assert_int_equal(r->metadata->metadata_generation, 1);
        wmrpc__metadata_response__free_unpacked(r, NULL);
    }
    /* A stale generation is refused before anything else. */
    assert_int_equal(wr_commit(f, &id, 5, &u, NULL, NULL), WR_E_STALE_GENERATION);
    r = NULL;
    assert_int_equal(wr_commit(f, &id, 1, &u, NULL, &r), 0);
    assert_int_equal(r->metadata->availability, WR_AV_READY);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    wmrpc__weight_metadata__free_unpacked(md, NULL);

    /* Payload 1 missing and payload 3 there instead: the right count of
     * objects, but an extra one. */
    Wmrpc__WeightIdentity id2;
    wr_set_identity(&id2, "", "llm", "gap", 1);
    md = NULL;
    assert_int_equal(wr_begin(f, &id2, WR_RS_HOT, 0, WR_MODE_AUTO, &md), 0);
    wr_upload g = {.n = 3, .sizes = {10, 20, 30}, .per_unit = 1};
    wr_put_some(f, &g, md, 1, 3);
    assert_int_equal(wr_commit(f, &id2, 1, &g, NULL, NULL), WR_E_INVALID_ARGUMENT);
    assert_non_null(strstr(f->last_error, "extra object"));
    assert_non_null(strstr(f->last_error, "payload/3"));
    r = wr_get_md(f, &id2);
    assert_int_equal(r->metadata->availability, WR_AV_IMPORTING);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    /* An object outside the revision's keys is refused at put time. */
    assert_int_equal(kvc_put_bytes(f->kv, "stray", "x", 1, SMP_DATA_WEIGHT, g.group, 0, NULL),
                     SMP_EVETO);
    wmrpc__weight_metadata__free_unpacked(md, NULL);

    /* Bad identity and policy at begin. */
    Wmrpc__WeightIdentity bad;
    wr_set_identity(&bad, "t", "", "x", 1);
    assert_int_equal(wr_begin(f, &bad, WR_RS_HOT, 0, WR_MODE_AUTO, NULL), WR_E_INVALID_ARGUMENT);
    assert_non_null(strstr(f->last_error, "identity"));
    wr_set_identity(&bad, "t", "n", "x", 1);
    assert_int_equal(wr_begin(f, &bad, WR_RS_MIXED, 1.5, WR_MODE_AUTO, NULL), WR_E_INVALID_ARGUMENT);
    assert_non_null(strstr(f->last_error, "policy"));
    assert_int_equal(wr_begin(f, &bad, 9, 0, WR_MODE_AUTO, NULL), WR_E_INVALID_ARGUMENT);
    /* Generation 0 (generations start at 1; a client library took it and
     * weightctl could list the revision but not name it): nothing begun. */
    wr_set_identity(&bad, "t", "n", "g0", 0);
    assert_int_equal(wr_begin(f, &bad, WR_RS_HOT, 0, WR_MODE_AUTO, NULL), WR_E_INVALID_ARGUMENT);
    assert_non_null(strstr(f->last_error, "weight_generation 0: generations start at 1"));
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, &bad, 0, NULL),
                     WR_E_NOT_FOUND);
}

/* LIST pages through a tenant in identity order with a stable token, filters
 * by namespace and resource, hides IMPORTING revisions and shows tombstones
 * only when asked. */
static void test_list_pagination_and_filters(void **state)
{
    wr_fixture *f = *state;
    wr_start(f, "wp-list", NULL);
    const char *res[] = {"a", "b", "c", "d", "e"};
    for (int i = 0; i < 5; i++) {
        Wmrpc__WeightIdentity id;
        wr_set_identity(&id, "t", i < 3 ? "ns1" : "ns2", res[i], 1);
        wr_upload u = {.n = 1, .sizes = {64}, .per_unit = 1};
        wmrpc__metadata_response__free_unpacked(wr_publish(f, &id, WR_RS_HOT, WR_MODE_AUTO, &u), NULL);
    }
    Wmrpc__WeightIdentity other, imp, gone;
    wr_set_identity(&other, "u", "ns1", "a", 1);
    wr_upload u = {.n = 1, .sizes = {64}, .per_unit = 1};
    wmrpc__metadata_response__free_unpacked(wr_publish(f, &other, WR_RS_HOT, WR_MODE_AUTO, &u), NULL);
    wr_set_identity(&imp, "t", "ns1", "zz-importing", 1);
    assert_int_equal(wr_begin(f, &imp, WR_RS_HOT, 0, WR_MODE_AUTO, NULL), 0);
    wr_set_identity(&gone, "t", "ns1", "b", 2);
    wr_upload gu = {.n = 1, .sizes = {64}, .per_unit = 1};
    Wmrpc__MetadataResponse *ab = wr_publish(f, &gone, WR_RS_HOT, WR_MODE_MANUAL, &gu);
    uint64_t gone_gen = ab->metadata->metadata_generation;
    wmrpc__metadata_response__free_unpacked(ab, NULL);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &gone, gone_gen, NULL), 0);
    assert_int_equal(wr_wait_md(f, &gone, WR_AV_DELETED, 10000), 0); /* a tombstone */
    /* An aborted import leaves nothing to list, even with tombstones. */
    Wmrpc__WeightIdentity aborted;
    wr_set_identity(&aborted, "t", "ns1", "b", 3);
    assert_int_equal(wr_begin(f, &aborted, WR_RS_HOT, 0, WR_MODE_AUTO, NULL), 0);
    ab = NULL;
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_ABORT, &aborted, 1, &ab), 0);
    assert_null(ab->metadata);
    wmrpc__metadata_response__free_unpacked(ab, NULL);

    struct {
        const char *ns, *res;
        int deleted;
        const char *want;
    } cases[] = {
        {"", "", 0, "ns1/a ns1/b ns1/c ns2/d ns2/e "},
        {"", "", 1, "ns1/a ns1/b ns1/b ns1/c ns2/d ns2/e "},
        {"ns1", "", 0, "ns1/a ns1/b ns1/c "},
        {"ns2", "e", 0, "ns2/e "},
        {"ns3", "", 0, ""},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char got[512] = "", token[1100] = "";
        int pages = 0;
        do {
            Wmrpc__ListRequest req = WMRPC__LIST_REQUEST__INIT;
            req.tenant = (char *)"t";
            req.namespace_id = (char *)cases[c].ns;
            req.resource_id = (char *)cases[c].res;
            req.page_token = token;
            req.limit = 2;
            req.include_deleted = cases[c].deleted;
            Wmrpc__ListResponse *lr = NULL;
            assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &req.base,
                                     &wmrpc__list_response__descriptor, (ProtobufCMessage **)&lr),
                             0);
            assert_non_null(lr);
            assert_true(lr->n_revisions <= 2);
            for (size_t i = 0; i < lr->n_revisions; i++) {
                assert_true(lr->revisions[i]->availability != WR_AV_IMPORTING);
                snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s/%s ",
                         lr->revisions[i]->identity->namespace_id,
                         lr->revisions[i]->identity->resource_id);
            }
            snprintf(token, sizeof(token), "%s", lr->next_page_token);
            wmrpc__list_response__free_unpacked(lr, NULL);
            assert_true(++pages < 10);
        } while (token[0]);
        if (strcmp(got, cases[c].want) != 0)
            fail_msg("case %zu: listed \"%s\", wanted \"%s\"", c, got, cases[c].want);
    }
    Wmrpc__ListRequest bad = WMRPC__LIST_REQUEST__INIT;
    bad.tenant = (char *)"t";
    bad.resource_id = (char *)"a";
    assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &bad.base, NULL, NULL),
                     WR_E_INVALID_ARGUMENT);
    bad.resource_id = (char *)"";
    bad.page_token = (char *)"garbage";
    assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &bad.base, NULL, NULL),
                     WR_E_INVALID_ARGUMENT);
}

/* Leases: acquire on READY, renew, BUSY on remove while held, remove after
 * release goes DELETING with a DELETING operation; no lease on DELETING;
 * is_exist false from DELETING on; the tombstone stays queryable and a
 * remove of it answers it; an aborted empty import leaves no record (its
 * name is free again). Policy updates and migrations are
 * CAS-fenced and PINNED refuses migration. */
static void test_leases_remove_and_tombstones(void **state)
{
    wr_fixture *f = *state;
    wr_start(f, "wp-lease", NULL);
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t", "llm", "m", 1);
    wr_upload u = {.n = 2, .sizes = {500, 600}, .per_unit = 2};
    wmrpc__metadata_response__free_unpacked(wr_publish(f, &id, WR_RS_HOT, WR_MODE_MANUAL, &u), NULL);

    Wmrpc__LeaseResponse *lr = NULL;
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &id, 0, 0, &lr), 0);
    assert_non_null(lr->lease);
    uint64_t lease = lr->lease->id;
    uint64_t exp1 = lr->lease->expires_ms;
    assert_int_equal(lr->lease->metadata_generation, 2);
    assert_int_equal(lr->metadata->active_leases, 1);
    wmrpc__lease_response__free_unpacked(lr, NULL);

    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, &id, lease, 60000, &lr), 0);
    assert_true(lr->lease->expires_ms > exp1);
    wmrpc__lease_response__free_unpacked(lr, NULL);
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, &id, 4242, 0, NULL),
                     WR_E_LEASE_EXPIRED);
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &id, 0, 3600000, NULL),
                     WR_E_INVALID_ARGUMENT);

    /* CAS: a stale generation cannot overwrite; the current one can. */
    Wmrpc__MetadataResponse *r = NULL;
    assert_int_equal(wr_update_policy(f, &id, WR_RS_COLD, 0, 1, NULL), WR_E_STALE_GENERATION);
    assert_non_null(strstr(f->last_error, "generation 2"));
    assert_int_equal(wr_update_policy(f, &id, 0, WR_MODE_PINNED, 2, &r), 0);
    assert_int_equal(r->metadata->metadata_generation, 3);
    assert_int_equal(r->metadata->policy->migration_mode, WR_MODE_PINNED);
    assert_int_equal(r->metadata->policy->preferred_residency, WR_RS_HOT);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_migrate(f, &id, WR_RS_COLD, 3, NULL), WR_E_POLICY_UNSATISFIABLE);
    assert_non_null(strstr(f->last_error, "PINNED"));

    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, 3, NULL), WR_E_BUSY);
    assert_non_null(strstr(f->last_error, "lease"));
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, &id, lease, 0, NULL), 0);
    /* Releasing again is harmless. */
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, &id, lease, 0, NULL), 0);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, 2, NULL),
                     WR_E_STALE_GENERATION);
    r = NULL;
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, 3, &r), 0);
    assert_int_equal(r->metadata->availability, WR_AV_DELETING);
    assert_non_null(r->operation);
    assert_int_equal(r->operation->kind, WR_OPK_DELETING);
    uint64_t del_op = r->operation->id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    /* A retried remove answers the same deletion. */
    r = NULL;
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, 3, &r), 0);
    assert_int_equal(r->metadata->operation_id, del_op);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_is_exist(f, &id), 0);
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &id, 0, 0, NULL),
                     WR_E_NOT_READY);
    Wmrpc__IdentityRequest sreq = WMRPC__IDENTITY_REQUEST__INIT;
    sreq.identity = &id;
    assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_SIZE, &sreq.base, NULL, NULL),
                     WR_E_NOT_READY);

    /* An import aborted before any upload leaves no record: its name is
     * free again (issue 17). */
    Wmrpc__WeightIdentity t;
    wr_set_identity(&t, "t", "llm", "tomb", 1);
    assert_int_equal(wr_begin(f, &t, WR_RS_HOT, 0, WR_MODE_AUTO, NULL), 0);
    r = NULL;
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_ABORT, &t, 1, &r), 0);
    assert_null(r->metadata);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, &t, 0, NULL),
                     WR_E_NOT_FOUND);
    assert_int_equal(wr_begin(f, &t, WR_RS_HOT, 0, WR_MODE_AUTO, NULL), 0);

    /* The tombstone of the removed revision stays queryable; a remove of it
     * answers it; its identity is spent. */
    assert_int_equal(wr_wait_md(f, &id, WR_AV_DELETED, 10000), 0);
    r = wr_get_md(f, &id);
    assert_int_equal(r->metadata->availability, WR_AV_DELETED);
    assert_int_equal(r->metadata->residency, WR_RS_ABSENT);
    uint64_t tomb_gen = r->metadata->metadata_generation;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_is_exist(f, &id), 0);
    r = NULL;
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, tomb_gen, &r), 0);
    assert_int_equal(r->metadata->availability, WR_AV_DELETED);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_begin(f, &id, WR_RS_HOT, 0, WR_MODE_AUTO, NULL), WR_E_CONFLICT);
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &id, 0, 0, NULL),
                     WR_E_NOT_READY);

    /* A short lease expires by the tick and can no longer be renewed. */
    Wmrpc__WeightIdentity s;
    wr_set_identity(&s, "t", "llm", "short", 1);
    wr_upload su = {.n = 1, .sizes = {64}, .per_unit = 1};
    wmrpc__metadata_response__free_unpacked(wr_publish(f, &s, WR_RS_HOT, WR_MODE_AUTO, &su), NULL);
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &s, 0, 50, &lr), 0);
    uint64_t short_lease = lr->lease->id;
    wmrpc__lease_response__free_unpacked(lr, NULL);
    int gone = 0;
    for (int i = 0; i < 300 && !gone; i++) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
        r = wr_get_md(f, &s);
        gone = r->metadata->active_leases == 0;
        wmrpc__metadata_response__free_unpacked(r, NULL);
    }
    assert_true(gone);
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, &s, short_lease, 0, NULL),
                     WR_E_LEASE_EXPIRED);
    r = wr_get_md(f, &s);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &s, r->metadata->metadata_generation,
                                   NULL),
                     0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
}

/* The state of one revision as a comparable line. */
static void describe(wr_fixture *f, const Wmrpc__WeightIdentity *id, char *out, size_t cap)
{
    Wmrpc__MetadataResponse *r = NULL;
    int st = wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, id, 0, &r);
    if (st == WR_E_NOT_FOUND) { /* forgotten (an aborted import) */
        snprintf(out, cap, "absent");
        return;
    }
    if (st != 0) fail_msg("get_metadata: %d %s", st, f->last_error);
    snprintf(out, cap, "av=%u res=%u gen=%llu op=%llu leases=%u bytes=%llu opstate=%u",
             r->metadata->availability, r->metadata->residency,
             (unsigned long long)r->metadata->metadata_generation,
             (unsigned long long)r->metadata->operation_id, r->metadata->active_leases,
             (unsigned long long)r->metadata->logical_bytes, r->operation ? r->operation->state : 0);
    wmrpc__metadata_response__free_unpacked(r, NULL);
}

/* Every acknowledged state survives a clean restart (replay), a snapshot
 * followed by more changes and a SIGKILL (snapshot + replay): revisions in
 * every state, operations, leases and tombstones; ids keep growing. */
static void test_restart_keeps_acknowledged_state(void **state)
{
    wr_fixture *f = *state;
    wr_start(f, "wp-restart", NULL);
    Wmrpc__WeightIdentity ids[5];
    wr_set_identity(&ids[0], "t", "llm", "hot", 1);
    wr_set_identity(&ids[1], "t", "llm", "cold", 1);
    wr_set_identity(&ids[2], "t", "llm", "importing", 1);
    wr_set_identity(&ids[3], "t", "llm", "tomb", 1);
    wr_set_identity(&ids[4], "t", "llm", "deleting", 1);
    wr_upload u0 = {.n = 2, .sizes = {100, 200}, .per_unit = 1};
    wr_upload u1 = {.n = 3, .sizes = {100, 200, 300}, .per_unit = 1};
    wr_upload u4 = {.n = 1, .sizes = {100}, .per_unit = 1};
    wmrpc__metadata_response__free_unpacked(wr_publish(f, &ids[0], WR_RS_HOT, WR_MODE_AUTO, &u0), NULL);
    wmrpc__metadata_response__free_unpacked(wr_publish(f, &ids[1], WR_RS_COLD, WR_MODE_AUTO, &u1), NULL);
    assert_int_equal(wr_begin(f, &ids[2], WR_RS_HOT, 0, WR_MODE_AUTO, NULL), 0);
    assert_int_equal(wr_begin(f, &ids[3], WR_RS_HOT, 0, WR_MODE_AUTO, NULL), 0);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_ABORT, &ids[3], 1, NULL), 0);
    wmrpc__metadata_response__free_unpacked(wr_publish(f, &ids[4], WR_RS_HOT, WR_MODE_AUTO, &u4), NULL);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &ids[4], 2, NULL), 0);
    /* The deletion runs to its tombstone first: a state the tick is still
     * changing is not one to compare across restarts. */
    assert_int_equal(wr_wait_md(f, &ids[4], WR_AV_DELETED, 10000), 0);
    /* Likewise the COLD revision's first migration runs to its end. */
    assert_int_equal(wr_wait_md(f, &ids[1], WR_AV_READY, 10000), 0);
    Wmrpc__LeaseResponse *lr = NULL;
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &ids[0], 0, 300000, &lr), 0);
    uint64_t lease = lr->lease->id;
    wmrpc__lease_response__free_unpacked(lr, NULL);

    char before[5][256], after[256];
    for (int i = 0; i < 5; i++) describe(f, &ids[i], before[i], sizeof(before[i]));

    for (int round = 0; round < 3; round++) {
        wr_disconnect(f);
        if (round == 0) {
            assert_int_equal(hx_stop(&f->m), 0);
        } else {
            hx_kill(&f->m);
        }
        assert_int_equal(hx_start(&f->m, 10000), 0);
        wr_connect(f);
        for (int i = 0; i < 5; i++) {
            describe(f, &ids[i], after, sizeof(after));
            if (strcmp(before[i], after) != 0)
                fail_msg("round %d revision %d: before \"%s\", after \"%s\"", round, i, before[i], after);
        }
        /* The lease is still held: renewable, and remove is BUSY. */
        assert_int_equal(
            wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, &ids[0], lease, 300000, NULL), 0);
        assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &ids[0], 2, NULL), WR_E_BUSY);
        /* The importing revision still takes uploads and commits. */
        if (round == 0) {
            assert_int_equal(kvc_snapshot(f->kv, NULL), 0);
            Wmrpc__MetadataResponse *imp = wr_get_md(f, &ids[2]);
            wr_upload u2 = {.n = 1, .sizes = {77}, .per_unit = 1};
            wr_put_all(f, &u2, imp->metadata);
            wmrpc__metadata_response__free_unpacked(imp, NULL);
            Wmrpc__MetadataResponse *r = NULL;
            assert_int_equal(wr_commit(f, &ids[2], 1, &u2, NULL, &r), 0);
            assert_int_equal(r->metadata->availability, WR_AV_READY);
            wmrpc__metadata_response__free_unpacked(r, NULL);
            describe(f, &ids[2], before[2], sizeof(before[2]));
        }
        if (round == 1) assert_int_equal(kvc_snapshot(f->kv, NULL), 0);
    }
    /* New ids are above every id handed out before the restarts. */
    Wmrpc__MetadataResponse *r = wr_get_md(f, &ids[1]);
    uint64_t old_op = r->metadata->operation_id;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    r = NULL;
    assert_int_equal(wr_migrate(f, &ids[2], WR_RS_COLD, 2, &r), 0);
    assert_true(r->metadata->operation_id > old_op);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &ids[0], 0, 0, &lr), 0);
    assert_true(lr->lease->id > lease);
    wmrpc__lease_response__free_unpacked(lr, NULL);
}

/* In HA mode (one master of an HA cluster on a real etcd) weight mutations
 * fail closed until the capability flag is confirmed (SMP_EGATE naming it);
 * reads keep working; with the flag on the same mutation succeeds. */
static void test_ha_gate_fails_mutations_closed(void **state)
{
    wr_fixture *f = *state;
    etcd_fixture etcd;
    char ha[1024], cfg[1400];
    assert_int_equal(etcd_fixture_start(&etcd, "wp-gate", 1, 20000), 0);
    assert_int_equal(hx_init(&f->m, "wp-gate", NULL), 0);
    assert_true(hx_ha_yaml(&f->m, "m1", etcd_fixture_endpoints(&etcd), "/wp-gate/", NULL, 0, ha,
                           sizeof ha) > 0);
    assert_int_equal(hx_reconfigure(&f->m, ha), 0);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    wr_connect(f);
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t", "llm", "gated", 1);
    assert_int_equal(wr_begin(f, &id, WR_RS_HOT, 0, WR_MODE_AUTO, NULL), SMP_EGATE);
    assert_non_null(strstr(f->last_error, "weight_management_oplog_capability_confirmed"));
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, &id, 0, NULL),
                     WR_E_NOT_FOUND);
    Wmrpc__ListRequest lreq = WMRPC__LIST_REQUEST__INIT;
    assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &lreq.base, NULL, NULL), 0);
    /* Plain KV keeps working. */
    assert_int_equal(kvc_put_bytes(f->kv, "kv/one", "abc", 3, SMP_DATA_KV, NULL, 0, NULL), 0);

    wr_disconnect(f);
    assert_int_equal(hx_stop(&f->m), 0);
    snprintf(cfg, sizeof cfg, "%scluster:\n  weight_management_oplog_capability_confirmed: true\n",
             ha);
    assert_int_equal(hx_reconfigure(&f->m, cfg), 0);
    assert_int_equal(hx_start(&f->m, 20000), 0);
    wr_connect(f);
    assert_int_equal(wr_begin(f, &id, WR_RS_HOT, 0, WR_MODE_AUTO, NULL), 0);
    wr_disconnect(f);
    hx_cleanup(&f->m);
    etcd_fixture_cleanup(&etcd);
}

/* A put started while the import was open and ended after the commit
 * published the revision is refused at its end: the published group gains
 * no member, the summary is unchanged, and the put can be revoked. */
static void test_put_ending_after_publication_is_refused(void **state)
{
    wr_fixture *f = *state;
    wr_start(f, "wp-late", NULL);
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, "t1", "llm", "late", 1);
    wr_upload u = {.n = 2, .sizes = {1000, 2000}, .per_unit = 1};
    Wmrpc__WeightMetadata *md = NULL;
    assert_int_equal(wr_begin(f, &id, WR_RS_HOT, 0, WR_MODE_MANUAL, &md), 0);
    wr_put_all(f, &u, md);
    char late[1200];
    snprintf(late, sizeof(late), "%s/payload/7", md->group_key);
    assert_int_equal(kvc_put_start(f->kv, late, 100, SMP_DATA_WEIGHT, md->group_key, 0, NULL), 0);
    Wmrpc__MetadataResponse *r = NULL;
    assert_int_equal(wr_commit(f, &id, 1, &u, NULL, &r), 0);
    assert_int_equal(r->metadata->availability, WR_AV_READY);
    wmrpc__metadata_response__free_unpacked(r, NULL);

    unsigned char sha[32] = {0};
    assert_int_equal(kvc_put_end(f->kv, late, sha, NULL), SMP_EVETO);
    int exists = 1;
    assert_int_equal(kvc_exists(f->kv, late, &exists), 0);
    assert_int_equal(exists, 0);
    r = wr_get_md(f, &id);
    assert_int_equal(r->metadata->availability, WR_AV_READY);
    assert_int_equal(r->metadata->payload_count, 2);
    assert_int_equal(r->metadata->logical_bytes, 3000);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    assert_int_equal(wr_is_exist(f, &id), 1);
    assert_int_equal(kvc_put_revoke(f->kv, late), 0);
    wmrpc__weight_metadata__free_unpacked(md, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_publish_hot_revision, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_put_ending_after_publication_is_refused, wr_setup,
                                        wr_teardown),
        cmocka_unit_test_setup_teardown(test_publish_cold_and_mixed_start_migration, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_commit_refuses_mismatches, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_list_pagination_and_filters, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_leases_remove_and_tombstones, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_restart_keeps_acknowledged_state, wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_ha_gate_fails_mutations_closed, wr_setup, wr_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
