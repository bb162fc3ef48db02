/* test_tenant_isolation.c -- two tenants on one master with authentication
 * on: each publishes a revision and stores a plain object, and neither can
 * list, info, exists, lease, get, replace or delete the other's (issue 19).
 *
 * The tenant a request acts for comes from its connection's token, never
 * from the request: an identity without a tenant is the token's tenant's,
 * and one naming the other tenant is answered as if it did not exist
 * (NOT_FOUND for a revision, an empty list, exists false, a plain object
 * NOT_FOUND), so the answers tell one tenant nothing about the other. After
 * every refused attempt the other tenant's revision is READY at the same
 * metadata generation and its objects read back byte for byte. A reader
 * reads and leases its own tenant's revision but may not remove it; the
 * admin sees both tenants. Neither tenant can end the other's read lease. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "auth_fixture.h"

typedef struct tenant_view {
    const char *name;
    af_who writer;
    Wmrpc__WeightIdentity id;   /* as its writer named it */
    wr_upload u;
    uint64_t gen;               /* metadata generation after publication */
    char plain_key[64];
    char payload_key[1200];
} tenant_view;

static void publish(wr_fixture *f, tenant_view *t, const char *wire_tenant)
{
    af_as(f, t->writer);
    wr_set_identity(&t->id, wire_tenant, "ns", "model", 1);
    memset(&t->u, 0, sizeof(t->u));
    t->u.n = 2;
    t->u.sizes[0] = 8192;
    t->u.sizes[1] = 4096;
    Wmrpc__MetadataResponse *r = wr_publish(f, &t->id, WR_RS_HOT, WR_MODE_MANUAL, &t->u);
    assert_string_equal(r->metadata->identity->tenant, t->name);
    t->gen = r->metadata->metadata_generation;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    wr_payload_key(&t->u, 0, t->payload_key, sizeof(t->payload_key));
    char expect[64];
    snprintf(expect, sizeof(expect), "weights/%s/", t->name);
    assert_int_equal(strncmp(t->payload_key, expect, strlen(expect)), 0);
    snprintf(t->plain_key, sizeof(t->plain_key), "%s/notes.txt", t->name);
    assert_int_equal(kvc_put_bytes(f->kv, t->plain_key, t->name, strlen(t->name), SMP_DATA_KV, "", 0,
                                   NULL),
                     0);
}

/* Every way `me` could touch `other`'s revision and objects is answered as
 * absent, and nothing of other's changes. */
static void cannot_touch(wr_fixture *f, tenant_view *me, tenant_view *other)
{
    Wmrpc__WeightIdentity theirs;
    int exists = 1;
    kvc_object obj;
    af_as(f, me->writer);
    wr_set_identity(&theirs, other->name, "ns", "model", 1);

    /* list: its own tenant without naming it; the other's is empty */
    Wmrpc__ListRequest q = WMRPC__LIST_REQUEST__INIT;
    Wmrpc__ListResponse *lr = NULL;
    assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &q.base,
                             &wmrpc__list_response__descriptor, (ProtobufCMessage **)&lr),
                     0);
    assert_int_equal(lr->n_revisions, 1);
    assert_string_equal(lr->revisions[0]->identity->tenant, me->name);
    wmrpc__list_response__free_unpacked(lr, NULL);
    q.tenant = (char *)other->name;
    assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &q.base,
                             &wmrpc__list_response__descriptor, (ProtobufCMessage **)&lr),
                     0);
    assert_int_equal(lr->n_revisions, 0);
    wmrpc__list_response__free_unpacked(lr, NULL);

    /* info, exists, size, lease */
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, &theirs, 0, NULL),
                     WR_E_NOT_FOUND);
    assert_non_null(strstr(f->last_error, "no revision"));
    /* it says the connection acts for its own tenant only, and says the
     * same of a revision of the other tenant that does not exist */
    char said[sizeof(f->last_error)], *gen_at;
    snprintf(said, sizeof(said), "%s", f->last_error);
    assert_non_null(strstr(said, "it acts for its own tenant only"));
    Wmrpc__WeightIdentity none;
    wr_set_identity(&none, other->name, "ns", "model", 9);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, &none, 0, NULL),
                     WR_E_NOT_FOUND);
    assert_non_null(gen_at = strstr(said, "@1 "));
    gen_at[1] = '9';
    assert_string_equal(f->last_error, said);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_IS_EXIST, &theirs, 0, NULL),
                     WR_E_NOT_FOUND);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_SIZE, &theirs, 0, NULL),
                     WR_E_NOT_FOUND);
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &theirs, 0, 0, NULL),
                     WR_E_NOT_FOUND);

    /* get: the payload and the plain object are not there for me */
    assert_int_equal(kvc_get(f->kv, other->payload_key, &obj), SMP_ENOTFOUND);
    assert_int_equal(kvc_get(f->kv, other->plain_key, &obj), SMP_ENOTFOUND);
    assert_int_equal(kvc_exists(f->kv, other->plain_key, &exists), 0);
    assert_false(exists);
    char **keys = NULL, *next = NULL;
    size_t n = 0;
    assert_int_equal(kvc_list(f->kv, "", NULL, 1000, &keys, &n, &next), 0);
    assert_true(n > 0);
    for (size_t i = 0; i < n; i++) {
        char mine[64], mine_w[64];
        snprintf(mine, sizeof(mine), "%s/", me->name);
        snprintf(mine_w, sizeof(mine_w), "weights/%s/", me->name);
        if (strncmp(keys[i], mine, strlen(mine)) != 0 && strncmp(keys[i], mine_w, strlen(mine_w)) != 0)
            fail_msg("tenant %s lists %s", me->name, keys[i]);
    }
    kvc_list_free(keys, n, next);

    /* replace (upsert), change, delete: refused as absent */
    Wmrpc__UpsertBeginRequest ub = WMRPC__UPSERT_BEGIN_REQUEST__INIT;
    ub.base_identity = &theirs;
    ub.target_generation = 2;
    ub.request_id = "steal-1";
    ub.expected_metadata_generation = other->gen;
    assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_UPSERT_BEGIN, &ub.base, NULL, NULL),
                     WR_E_NOT_FOUND);
    assert_int_equal(wr_migrate(f, &theirs, WR_RS_COLD, other->gen, NULL), WR_E_NOT_FOUND);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &theirs, other->gen, NULL),
                     WR_E_NOT_FOUND);
    assert_int_equal(kvc_remove(f->kv, other->plain_key), SMP_ENOTFOUND);
    assert_int_equal(kvc_remove(f->kv, other->payload_key), SMP_ENOTFOUND);
    /* and nothing can be put into the other's namespace */
    assert_int_equal(kvc_put_bytes(f->kv, other->plain_key, "x", 1, SMP_DATA_KV, "", 1, NULL),
                     SMP_EFORBIDDEN);
    assert_non_null(strstr(kvc_error(f->kv), "may only put keys"));

    /* the other tenant finds everything as it left it */
    af_as(f, other->writer);
    Wmrpc__MetadataResponse *md = wr_get_md(f, &other->id);
    assert_int_equal(md->metadata->availability, WR_AV_READY);
    assert_int_equal(md->metadata->metadata_generation, other->gen);
    wmrpc__metadata_response__free_unpacked(md, NULL);
    char buf[64];
    uint64_t len = 0;
    assert_int_equal(kvc_get_into(f->kv, other->plain_key, buf, sizeof(buf), &len, 1), 0);
    assert_int_equal(len, strlen(other->name));
    assert_memory_equal(buf, other->name, len);
}

static void test_tenant_cannot_see_or_touch_another_tenants_weights(void **state)
{
    wr_fixture *f = *state;
    tenant_view a = {.name = "a", .writer = AF_A_WRITER};
    tenant_view b = {.name = "b", .writer = AF_B_WRITER};
    af_start(f, "tenant-iso");
    publish(f, &a, "a");
    publish(f, &b, ""); /* no tenant named: the token's */

    cannot_touch(f, &a, &b);
    cannot_touch(f, &b, &a);

    /* a reader of a: reads and leases its own, may not remove it */
    af_as(f, AF_A_READER);
    Wmrpc__MetadataResponse *md = wr_get_md(f, &a.id);
    wmrpc__metadata_response__free_unpacked(md, NULL);
    Wmrpc__LeaseResponse *lease = NULL;
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &a.id, 0, 0, &lease),
                     0);
    assert_int_equal(wr_lease_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, &a.id,
                                   lease->lease->id, 0, NULL),
                     0);
    wmrpc__lease_response__free_unpacked(lease, NULL);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &a.id, a.gen, NULL),
                     SMP_EFORBIDDEN);
    kvc_object obj;
    assert_int_equal(kvc_get(f->kv, a.payload_key, &obj), 0);
    assert_int_equal(kvc_remove(f->kv, a.plain_key), SMP_EFORBIDDEN);

    /* the admin sees both tenants */
    af_as(f, AF_ADMIN);
    const char *names[] = {"a", "b"};
    for (int i = 0; i < 2; i++) {
        Wmrpc__ListRequest q = WMRPC__LIST_REQUEST__INIT;
        Wmrpc__ListResponse *lr = NULL;
        q.tenant = (char *)names[i];
        assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &q.base,
                                 &wmrpc__list_response__descriptor, (ProtobufCMessage **)&lr),
                         0);
        assert_int_equal(lr->n_revisions, 1);
        wmrpc__list_response__free_unpacked(lr, NULL);
    }
    int exists = 0;
    assert_int_equal(kvc_exists(f->kv, b.plain_key, &exists), 0);
    assert_true(exists);
}

/* A tenant cannot end another tenant's read lease: tenant b's release of
 * the key tenant a's connection looked up is answered as absent (the key
 * is not b's to name) and the lease stays -- a's own removal of the object
 * is still refused as leased until a gives the lease back itself. */
static void test_tenant_cannot_release_another_tenants_read_lease(void **state)
{
    wr_fixture *f = *state;
    tenant_view a = {.name = "a", .writer = AF_A_WRITER};
    kvc_object obj;
    uint32_t released = 0;
    af_start(f, "tenant-rlease");
    publish(f, &a, "a");
    const char *keys[1] = {a.plain_key};
    assert_int_equal(kvc_get(f->kv, a.plain_key, &obj), 0);
    kvc *mine = f->kv; /* a's connection, which holds the lease */
    f->kv = NULL;

    af_as(f, AF_B_WRITER);
    assert_int_equal(kvc_release_keys(f->kv, keys, 1, NULL, NULL), SMP_ENOTFOUND);
    assert_true(hx_says(kvc_error(f->kv), "release read leases 'a/notes.txt'"));
    assert_int_equal(kvc_remove(mine, a.plain_key), SMP_EBUSY);

    assert_int_equal(kvc_release_keys(mine, keys, 1, &released, NULL), 0);
    assert_int_equal(released, 1);
    assert_int_equal(kvc_remove(mine, a.plain_key), 0);
    kvc_close(mine);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tenant_cannot_see_or_touch_another_tenants_weights,
                                        wr_setup, wr_teardown),
        cmocka_unit_test_setup_teardown(test_tenant_cannot_release_another_tenants_read_lease,
                                        wr_setup, wr_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
