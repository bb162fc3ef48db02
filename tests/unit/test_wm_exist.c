/* test_wm_exist.c -- weight_is_exist's memo of a revision's objects.
 *
 * is_exist answers true only for a READY revision whose manifest and every
 * payload have a readable replica. It asks the host (object_get) once per
 * key, and remembers the answer with the host's objects_version (ABI 1.5):
 * while the version stays the same the memo answers and the host is not
 * asked. Each way the answer can flip is pinned here against a fake host
 * whose objects and version the test moves: an object that becomes
 * unreadable or readable again (a replica lost or added, a node down or
 * up, an object removed -- the host moves its version for each), a change
 * of the revision's own state (an apply clears the memo even when the
 * version stays), and a host without objects_version (asked every time). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "weight_rpc.pb-c.h"
#include "wm_mgmt.h"
#include "wm_plugin.h"
#include "wm_test_records.h"

/* -- a fake host: objects by key with a readable flag, a version ---------- */

struct smp_rpc_call {
    int status;
    uint8_t body[4096];
    size_t len;
};

#define MAX_KEYS 8

static struct {
    char key[WM_KEY_MAX + 1];
    int complete, readable;
} g_objs[MAX_KEYS];
static size_t g_n_objs;
static uint64_t g_version = 1;
static uint64_t g_gets; /* object_get calls */

static int f_rpc_reply(smp_rpc_call *call, int status, const uint8_t *body, size_t len)
{
    call->status = status;
    call->len = len < sizeof(call->body) ? len : sizeof(call->body);
    if (body != NULL) memcpy(call->body, body, call->len);
    return SMP_OK;
}

static int f_object_get(smp_host *h, const char *key, smp_object_info *out)
{
    (void)h;
    g_gets++;
    for (size_t i = 0; i < g_n_objs; i++) {
        if (strcmp(g_objs[i].key, key) != 0) continue;
        memset(out, 0, sizeof(*out));
        out->struct_size = sizeof(*out);
        out->complete = g_objs[i].complete;
        out->memory_replicas_readable = g_objs[i].readable ? 1 : 0;
        return SMP_OK;
    }
    return SMP_ENOTFOUND;
}

static uint64_t f_objects_version(smp_host *h)
{
    (void)h;
    return g_version;
}

static void f_log(smp_host *h, smp_log_level l, const char *fmt, ...)
{
    (void)h, (void)l, (void)fmt;
}

static uint64_t f_now(smp_host *h)
{
    (void)h;
    return 10000;
}

static smp_host_api API;
static wm_plugin P;
static smp_rpc_call CALL;
static wm_identity ID;
static wm_revision REV; /* as last applied */
static wm_affinity AFF;

static void set_object(const char *key, int complete, int readable)
{
    for (size_t i = 0; i < g_n_objs; i++) {
        if (strcmp(g_objs[i].key, key) == 0) {
            g_objs[i].complete = complete;
            g_objs[i].readable = readable;
            return;
        }
    }
    assert_true(g_n_objs < MAX_KEYS);
    snprintf(g_objs[g_n_objs].key, sizeof(g_objs[0].key), "%s", key);
    g_objs[g_n_objs].complete = complete;
    g_objs[g_n_objs].readable = readable;
    g_n_objs++;
}

static void drop_object(const char *key)
{
    for (size_t i = 0; i < g_n_objs; i++)
        if (strcmp(g_objs[i].key, key) == 0) g_objs[i] = g_objs[--g_n_objs];
}

/* Apply REV (with AFF) as the store's next record of the revision. */
static void apply_rev(void)
{
    char msg[256];
    wm_metadata_upsert u;
    memset(&u, 0, sizeof(u));
    u.revision = REV;
    u.has_affinity = 1;
    u.affinity = AFF;
    if (wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
}

/* A READY revision with a manifest and two payloads, all readable. */
static int setup(void **state)
{
    (void)state;
    static const uint64_t bytes[2] = {16, 32};
    memset(&API, 0, sizeof(API));
    API.struct_size = sizeof(API);
    API.rpc_reply = f_rpc_reply;
    API.object_get = f_object_get;
    API.objects_version = f_objects_version;
    API.log = f_log;
    API.now_ms = f_now;
    API.wall_ms = f_now;
    memset(&P, 0, sizeof(P));
    P.api = &API;
    g_n_objs = 0;
    g_version = 1;
    g_gets = 0;
    assert_int_equal(wm_store_create(&P.store), WM_OK);
    memset(&AFF, 0, sizeof(AFF));
    wmt_ready_revision(&REV, &AFF, "exist", 1, bytes, 2);
    ID = REV.id;
    apply_rev();
    set_object(REV.manifest_key, 1, 1);
    for (size_t u = 0; u < AFF.n_units; u++) set_object(AFF.units[u].members[0], 1, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    wm_affinity_clear(&AFF);
    wm_mgmt_release(&P);
    wm_store_free(P.store);
    return 0;
}

/* is_exist of the revision: its answer; *gets the object_get calls it made. */
static int is_exist(uint64_t *gets)
{
    uint8_t buf[2048];
    Wmrpc__WeightIdentity id = WMRPC__WEIGHT_IDENTITY__INIT;
    id.tenant = ID.tenant_id;
    id.namespace_id = ID.ns;
    id.resource_id = ID.resource_id;
    id.revision = ID.revision;
    id.generation = ID.weight_generation;
    Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
    req.identity = &id;
    size_t n = protobuf_c_message_get_packed_size(&req.base);
    assert_true(n <= sizeof(buf));
    protobuf_c_message_pack(&req.base, buf);
    memset(&CALL, 0, sizeof(CALL));
    CALL.status = 1;
    uint64_t before = g_gets;
    wm_rpc_is_exist(&P, &CALL, buf, n);
    assert_int_equal(CALL.status, SMP_OK);
    if (gets != NULL) *gets = g_gets - before;
    Wmrpc__IsExistResponse *resp = wmrpc__is_exist_response__unpack(NULL, CALL.len, CALL.body);
    assert_non_null(resp);
    int exists = resp->exists;
    wmrpc__is_exist_response__free_unpacked(resp, NULL);
    return exists;
}

/* The first read asks the host for each of the three keys; the next ones,
 * with nothing changed, ask nothing and answer the same. */
static void test_unchanged_objects_are_not_asked_again(void **state)
{
    (void)state;
    uint64_t gets;
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(gets, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(is_exist(&gets), 1);
        assert_int_equal(gets, 0);
    }
}

/* A payload that loses its last readable replica (a replica lost, its node
 * down) flips the answer to false once the host moves its version, and back
 * to true when a replica is readable again (a replica added, the node up). */
static void test_payload_unreadable_then_readable_again(void **state)
{
    (void)state;
    uint64_t gets;
    const char *payload = AFF.units[1].members[0];
    assert_int_equal(is_exist(NULL), 1);
    set_object(payload, 1, 0);
    g_version++;
    assert_int_equal(is_exist(&gets), 0);
    assert_true(gets > 0);
    assert_int_equal(is_exist(&gets), 0); /* remembered too */
    assert_int_equal(gets, 0);
    set_object(payload, 1, 1);
    g_version++;
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(gets, 3);
}

/* The manifest removed (not found) or replaced by a put not yet ended
 * (incomplete) is not readable; put back, it is. */
static void test_manifest_removed_or_incomplete(void **state)
{
    (void)state;
    assert_int_equal(is_exist(NULL), 1);
    drop_object(REV.manifest_key);
    g_version++;
    assert_int_equal(is_exist(NULL), 0);
    set_object(REV.manifest_key, 0, 0);
    g_version++;
    assert_int_equal(is_exist(NULL), 0);
    set_object(REV.manifest_key, 1, 1);
    g_version++;
    assert_int_equal(is_exist(NULL), 1);
}

/* A change of the revision itself clears its memo even when the host's
 * version stays: DELETING is not existing at once, READY again asks the
 * host afresh (and sees what it says now, not what was remembered). */
static void test_revision_state_change_clears_the_memo(void **state)
{
    (void)state;
    uint64_t gets;
    assert_int_equal(is_exist(NULL), 1);
    REV.availability = WM_AVAIL_DEGRADED;
    REV.metadata_generation++;
    apply_rev();
    assert_int_equal(is_exist(&gets), 0);
    assert_int_equal(gets, 0);
    /* the objects change without a version move (the memo must not hide
     * that the record cleared it) */
    set_object(AFF.units[0].members[0], 1, 0);
    REV.availability = WM_AVAIL_READY;
    REV.metadata_generation++;
    apply_rev();
    assert_int_equal(is_exist(&gets), 0);
    assert_true(gets > 0);
}

/* A host without objects_version (an older table, or one that says 0) is
 * asked on every read. */
static void test_host_without_a_version_is_asked_every_time(void **state)
{
    (void)state;
    uint64_t gets;
    API.struct_size = offsetof(smp_host_api, objects_version);
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(gets, 3);
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(gets, 3);
    API.struct_size = sizeof(API);
    g_version = 0;
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(gets, 3);
    set_object(REV.manifest_key, 1, 0);
    assert_int_equal(is_exist(&gets), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unchanged_objects_are_not_asked_again, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_payload_unreadable_then_readable_again, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_manifest_removed_or_incomplete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_revision_state_change_clears_the_memo, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_host_without_a_version_is_asked_every_time, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
