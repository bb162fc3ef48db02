/* test_wm_exist.c -- weight_is_exist and the host's objects version.
 *
 * wm_rpc_is_exist runs against a host that answers object_get from a
 * script (every key readable unless the test says otherwise), counts those
 * calls, and moves its objects version (smp_host_api.objects_version, ABI
 * 1.5) when the test changes an object or a node. Pinned here: a true
 * answer is given again without a single object_get while the version
 * stays; a payload that is not readable, or a node down that takes every
 * replica with it, answers false as soon as the version moved, and true
 * again once it is back; a false answer is never kept; the revision applied
 * again (DEGRADED, then READY) is asked about again even at the same
 * version; and a host without the version (0, a NULL member, or a table of
 * ABI 1.4 that ends before it) is asked about every key on every read. A
 * host with the objects loss version (ABI 1.7) has a true answer kept while
 * only the objects version moves, and asked again once the loss version
 * moved. wm_exist_refresh, called when a revision turns READY, keeps the
 * answer for the first read. */
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

/* -- the scripted host ------------------------------------------------------ */

static struct {
    uint64_t version;      /* what objects_version answers */
    uint64_t loss;         /* what objects_loss_version answers */
    uint64_t object_gets;  /* object_get calls so far */
    char unreadable[1100]; /* a key with no readable replica ("" none) */
    int node_down;         /* every replica is on the one node, which is down */
    int hold;              /* what rpc_wait_for_nodes answers */
    int waits;             /* rpc_wait_for_nodes calls so far */
    char wait_key[1100];   /* the key of the last one */
    size_t wait_len;       /* and its body's length */
} H;

static int f_rpc_wait_for_nodes(smp_host *h, smp_rpc_call *call, const char *key,
                                const uint8_t *body, size_t len)
{
    (void)h, (void)call, (void)body;
    H.waits++;
    snprintf(H.wait_key, sizeof(H.wait_key), "%s", key);
    H.wait_len = len;
    return H.hold;
}

static int f_object_get(smp_host *h, const char *key, smp_object_info *out)
{
    (void)h;
    H.object_gets++;
    int readable = !H.node_down && strcmp(key, H.unreadable) != 0;
    out->complete = 1;
    out->memory_replicas_readable = (uint32_t)readable;
    out->cold_replicas_readable = 0;
    return SMP_OK;
}

static uint64_t f_objects_version(smp_host *h)
{
    (void)h;
    return H.version;
}

static uint64_t f_objects_loss_version(smp_host *h)
{
    (void)h;
    return H.loss;
}

struct smp_rpc_call {
    int status;
    uint8_t body[1024];
    size_t len;
};

static int f_rpc_reply(smp_rpc_call *call, int status, const uint8_t *body, size_t len)
{
    call->status = status;
    call->len = len < sizeof(call->body) ? len : 0;
    if (call->len) memcpy(call->body, body, call->len);
    return SMP_OK;
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

#define N_PAYLOADS 3

static int setup(void **state)
{
    (void)state;
    memset(&H, 0, sizeof(H));
    H.version = 7;
    memset(&API, 0, sizeof(API));
    API.struct_size = sizeof(API);
    API.rpc_reply = f_rpc_reply;
    API.object_get = f_object_get;
    API.objects_version = f_objects_version;
    API.rpc_wait_for_nodes = f_rpc_wait_for_nodes;
    API.log = f_log;
    API.now_ms = f_now;
    API.wall_ms = f_now;
    memset(&P, 0, sizeof(P));
    P.api = &API;
    assert_int_equal(wm_store_create(&P.store), WM_OK);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    wm_store_free(P.store);
    return 0;
}

/* Apply the revision "model" (N_PAYLOADS payloads, one unit each) in
 * availability av at metadata generation mgen. */
static void apply_model(wm_availability av, uint64_t mgen)
{
    static const uint64_t bytes[N_PAYLOADS] = {16, 16, 16};
    char msg[256];
    wm_affinity aff = {0};
    wm_metadata_upsert u;
    memset(&u, 0, sizeof(u));
    wmt_ready_revision(&u.revision, &aff, "model", 1, bytes, N_PAYLOADS);
    u.revision.availability = av;
    u.revision.metadata_generation = mgen;
    u.has_affinity = 1;
    u.affinity = aff;
    if (wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
    wm_affinity_clear(&aff);
}

/* The key of payload i of "model". */
static void payload_key(size_t i, char *out, size_t cap)
{
    wm_identity id;
    wmt_identity(&id, "model", 1);
    assert_true(wm_payload_key(&id, i, out, cap) >= 0);
}

/* weight_is_exist of "model" on call, its body's length in *len. */
static void ask_is_exist(smp_rpc_call *call, size_t *len)
{
    wm_identity w;
    wmt_identity(&w, "model", 1);
    Wmrpc__WeightIdentity id = WMRPC__WEIGHT_IDENTITY__INIT;
    id.tenant = (char *)w.tenant_id;
    id.namespace_id = (char *)w.ns;
    id.resource_id = (char *)w.resource_id;
    id.revision = (char *)w.revision;
    id.generation = w.weight_generation;
    Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
    req.identity = &id;
    uint8_t buf[2048];
    size_t n = protobuf_c_message_get_packed_size(&req.base);
    assert_true(n <= sizeof(buf));
    protobuf_c_message_pack(&req.base, buf);
    *len = n;
    assert_int_equal(wm_rpc_is_exist(&P, call, buf, n), SMP_OK);
}

/* weight_is_exist of "model": the answer; *gets the object_get calls it made. */
static int is_exist(uint64_t *gets)
{
    smp_rpc_call call = {.status = 1};
    size_t len = 0;
    uint64_t before = H.object_gets;
    ask_is_exist(&call, &len);
    *gets = H.object_gets - before;
    assert_int_equal(call.status, SMP_OK);
    Wmrpc__IsExistResponse *r = wmrpc__is_exist_response__unpack(NULL, call.len, call.body);
    assert_non_null(r);
    int exists = r->exists ? 1 : 0;
    wmrpc__is_exist_response__free_unpacked(r, NULL);
    return exists;
}

/* -- tests -------------------------------------------------------------------- */

/* The first read asks about the manifest and every payload; the reads after
 * it, at the same version, ask about none and still answer true. */
static void test_a_true_answer_is_kept_while_the_version_stays(void **state)
{
    (void)state;
    uint64_t gets;
    apply_model(WM_AVAIL_READY, 1);
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(gets, 1 + N_PAYLOADS);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(is_exist(&gets), 1);
        assert_int_equal(gets, 0);
    }
}

/* One payload loses its last readable replica (the version moves with it):
 * false at once, asked again on every read while it lasts (a false answer
 * is not kept), and true again once the payload is readable again. */
static void test_a_payload_not_readable_answers_false(void **state)
{
    (void)state;
    uint64_t gets;
    apply_model(WM_AVAIL_READY, 1);
    assert_int_equal(is_exist(&gets), 1);

    payload_key(1, H.unreadable, sizeof(H.unreadable));
    H.version++;
    assert_int_equal(is_exist(&gets), 0);
    assert_int_equal(gets, 3); /* the manifest, payload 0, payload 1 */
    assert_int_equal(is_exist(&gets), 0);
    assert_int_equal(gets, 3);

    H.unreadable[0] = '\0';
    H.version++;
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(gets, 1 + N_PAYLOADS);
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(gets, 0);
}

/* The node holding every replica goes down: false (the manifest is asked
 * about and is not readable); back up: true. */
static void test_a_node_down_answers_false_and_back_up_true(void **state)
{
    (void)state;
    uint64_t gets;
    apply_model(WM_AVAIL_READY, 1);
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(gets, 0);

    H.node_down = 1;
    H.version++;
    assert_int_equal(is_exist(&gets), 0);
    assert_int_equal(gets, 1);

    H.node_down = 0;
    H.version++;
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(gets, 1 + N_PAYLOADS);
}

/* The revision applied again keeps nothing from before, even while the
 * host's version stays: DEGRADED answers false without asking the host,
 * READY again asks about every key. */
static void test_a_revision_applied_again_is_asked_about_again(void **state)
{
    (void)state;
    uint64_t gets;
    apply_model(WM_AVAIL_READY, 1);
    assert_int_equal(is_exist(&gets), 1);
    apply_model(WM_AVAIL_DEGRADED, 2);
    assert_int_equal(is_exist(&gets), 0);
    assert_int_equal(gets, 0);
    apply_model(WM_AVAIL_READY, 3);
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(gets, 1 + N_PAYLOADS);
}

/* A host that cannot tell -- the version 0, no member, or a table from
 * before ABI 1.5 that ends before the member -- is asked about every key
 * on every read. */
static void test_without_a_version_every_read_asks(void **state)
{
    (void)state;
    uint64_t gets;
    apply_model(WM_AVAIL_READY, 1);

    H.version = 0;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(is_exist(&gets), 1);
        assert_int_equal(gets, 1 + N_PAYLOADS);
    }
    H.version = 9;
    API.objects_version = NULL;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(is_exist(&gets), 1);
        assert_int_equal(gets, 1 + N_PAYLOADS);
    }
    API.objects_version = f_objects_version;
    API.struct_size = (uint32_t)offsetof(smp_host_api, objects_version);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(is_exist(&gets), 1);
        assert_int_equal(gets, 1 + N_PAYLOADS);
    }
}

/* A host with the loss version (ABI 1.7) keeps a true answer while only
 * the objects version moves (other revisions published, cold copies made)
 * and asks about every key again once the loss version moved. A table that
 * ends before the member is read by the objects version, as before. */
static void test_a_true_answer_outlives_gains_and_not_a_loss(void **state)
{
    (void)state;
    uint64_t gets;
    API.objects_loss_version = f_objects_loss_version;
    H.loss = 3;
    apply_model(WM_AVAIL_READY, 1);
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(gets, 1 + N_PAYLOADS);
    for (int i = 0; i < 3; i++) {
        H.version++;
        assert_int_equal(is_exist(&gets), 1);
        assert_int_equal(gets, 0);
    }

    H.loss++;
    payload_key(2, H.unreadable, sizeof(H.unreadable));
    assert_int_equal(is_exist(&gets), 0);
    assert_int_equal(gets, 1 + N_PAYLOADS);
    H.unreadable[0] = '\0';
    assert_int_equal(is_exist(&gets), 1); /* the false answer was not kept */
    assert_int_equal(gets, 1 + N_PAYLOADS);

    API.struct_size = (uint32_t)offsetof(smp_host_api, objects_loss_version);
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(gets, 1 + N_PAYLOADS); /* kept at the loss version, read by the other */
    H.loss++;
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(gets, 0); /* the objects version stayed */
    H.version++;
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(gets, 1 + N_PAYLOADS);
}

/* wm_exist_refresh (called when a revision turns READY) asks the host about
 * every key even at an unchanged version and keeps a true answer: the
 * first weight_is_exist after it asks nothing. A revision not readable
 * then keeps nothing, and one not READY is not asked about. */
static void test_a_refresh_keeps_the_answer_for_the_first_read(void **state)
{
    (void)state;
    uint64_t gets;
    wm_identity id;
    wmt_identity(&id, "model", 1);
    apply_model(WM_AVAIL_DEGRADED, 1);
    uint64_t before = H.object_gets;
    assert_int_equal(wm_exist_refresh(&P, &id), 0);
    assert_int_equal(H.object_gets, before);

    apply_model(WM_AVAIL_READY, 2);
    assert_int_equal(wm_exist_refresh(&P, &id), 1);
    assert_int_equal(H.object_gets - before, 1 + N_PAYLOADS);
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(gets, 0);
    before = H.object_gets;
    assert_int_equal(wm_exist_refresh(&P, &id), 1); /* fresh: asked again */
    assert_int_equal(H.object_gets - before, 1 + N_PAYLOADS);

    payload_key(0, H.unreadable, sizeof(H.unreadable));
    assert_int_equal(wm_exist_refresh(&P, &id), 0);
    H.unreadable[0] = '\0';
    assert_int_equal(is_exist(&gets), 1); /* nothing was kept: asked */
    assert_int_equal(gets, 1 + N_PAYLOADS);
}

/* Right after a start or a failover a payload is unreadable because its
 * node has not registered again: the host is asked to hold the call
 * (rpc_wait_for_nodes, ABI 1.8) for that payload's key, with the request's
 * body, and a held call is not answered. One the host does not hold is
 * answered false; a readable revision, and one not READY, never ask; a host
 * of ABI 1.7 has nothing to ask and answers false. */
static void test_an_unreadable_payload_may_wait_for_its_node(void **state)
{
    (void)state;
    uint64_t gets;
    size_t len = 0;
    char key[1100];
    apply_model(WM_AVAIL_READY, 1);
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(H.waits, 0);

    payload_key(2, H.unreadable, sizeof(H.unreadable));
    H.version++;
    H.hold = 1;
    smp_rpc_call call = {.status = 1};
    ask_is_exist(&call, &len);
    assert_int_equal(call.status, 1); /* held: not answered */
    assert_int_equal(H.waits, 1);
    payload_key(2, key, sizeof(key));
    assert_string_equal(H.wait_key, key);
    assert_int_equal(H.wait_len, len);

    H.hold = 0;
    assert_int_equal(is_exist(&gets), 0); /* not held: answered false */
    assert_int_equal(H.waits, 2);

    H.node_down = 1; /* the manifest is the first key found unreadable */
    assert_int_equal(is_exist(&gets), 0);
    assert_int_equal(H.waits, 3);
    assert_non_null(strstr(H.wait_key, "manifest"));
    H.node_down = 0;

    API.struct_size = (uint32_t)offsetof(smp_host_api, rpc_wait_for_nodes);
    H.hold = 1;
    assert_int_equal(is_exist(&gets), 0); /* ABI 1.7: nothing to ask */
    assert_int_equal(H.waits, 3);
    API.struct_size = sizeof(API);

    apply_model(WM_AVAIL_DEGRADED, 2);
    assert_int_equal(is_exist(&gets), 0);
    assert_int_equal(H.waits, 3); /* not READY: nothing to wait for */
    H.unreadable[0] = '\0';
    apply_model(WM_AVAIL_READY, 3);
    H.version++;
    assert_int_equal(is_exist(&gets), 1);
    assert_int_equal(H.waits, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_true_answer_is_kept_while_the_version_stays, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_payload_not_readable_answers_false, setup, teardown),
        cmocka_unit_test_setup_teardown(test_an_unreadable_payload_may_wait_for_its_node, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_node_down_answers_false_and_back_up_true, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_revision_applied_again_is_asked_about_again, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_without_a_version_every_read_asks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_true_answer_outlives_gains_and_not_a_loss, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_refresh_keeps_the_answer_for_the_first_read, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
