/* test_wm_complexity.c -- the work of the weight plugin's read paths does not
 * grow with the number of revisions it holds.
 *
 * The same questions are asked of a store holding 1,000 and then 10,000
 * READY revisions: a weight_list page of 100 from the first page and from a
 * page token in the middle, weight_get_metadata and weight_is_exist of one
 * revision, and one reconcile tick with nothing to do (every object has its
 * memory and cold replica, no revision is DEGRADED, no claim is open, and
 * the sweeps that follow a change went round once): it must look at no
 * revision at all. The work is counted, not timed: the program is linked with
 * --wrap for the two functions every scan goes through (identity compares
 * and positional reads of the ordered table), so each call below counts
 * them. A page costs its binary search plus the revisions it examines; a
 * lookup a hash probe. The 10k/1k ratio of each count must stay under 1.3,
 * so a regression to a linear walk (10x) fails here, on any machine, without
 * a clock. (bench_metadata_reads reports the same costs in time at 1k, 10k
 * and 100k.) weight_is_exist is also held to the lookups of the revision it
 * names: one hash probe of the store, as weight_get_metadata, and one host
 * object_get per key of the revision (its manifest and its payload), at any
 * count. A node going down reports every replica it held, one
 * SMP_EVENT_REPLICA_LOST each in one loop turn: each report is held to a
 * constant number of string compares, however many are already kept (it
 * walked the kept ones: 4,096 compares a report once full). */
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

/* -- counted functions (see the --wrap link options in tests/CMakeLists.txt) */

static uint64_t g_work;

int __real_wm_identity_cmp(const wm_identity *a, const wm_identity *b);
int __wrap_wm_identity_cmp(const wm_identity *a, const wm_identity *b)
{
    g_work++;
    return __real_wm_identity_cmp(a, b);
}

const wm_revision *__real_wm_store_revision_at(const wm_store *st, size_t i);
const wm_revision *__wrap_wm_store_revision_at(const wm_store *st, size_t i)
{
    g_work++;
    return __real_wm_store_revision_at(st, i);
}

static uint64_t g_strcmp;

int __real_strcmp(const char *a, const char *b);
int __wrap_strcmp(const char *a, const char *b)
{
    g_strcmp++;
    return __real_strcmp(a, b);
}

/* -- a host that only answers RPCs ---------------------------------------- */

struct smp_rpc_call {
    int status;
    uint8_t body[1 << 16];
    size_t len;
};

static int f_rpc_reply(smp_rpc_call *call, int status, const uint8_t *body, size_t len)
{
    call->status = status;
    call->len = len < sizeof(call->body) ? len : sizeof(call->body);
    if (body != NULL) memcpy(call->body, body, call->len);
    return SMP_OK;
}

static uint64_t g_object_gets;

static int f_object_get(smp_host *h, const char *key, smp_object_info *out)
{
    (void)h, (void)key;
    g_object_gets++;
    memset(out, 0, sizeof(*out));
    out->struct_size = sizeof(*out);
    out->complete = 1;
    out->memory_replicas_readable = 1;
    out->cold_replicas_readable = 1;
    return SMP_OK;
}

static void f_log(smp_host *h, smp_log_level l, const char *fmt, ...)
{
    (void)h, (void)l, (void)fmt;
}

static uint64_t g_now = 10000;

static uint64_t f_now(smp_host *h)
{
    (void)h;
    return g_now;
}

static void f_metric_set(smp_metric *m, const char *const *labels, double v)
{
    (void)m, (void)labels, (void)v;
}

static smp_host_api API;
static wm_plugin P;
static smp_rpc_call CALL;

static int setup(void **state)
{
    (void)state;
    memset(&API, 0, sizeof(API));
    API.struct_size = sizeof(API);
    API.rpc_reply = f_rpc_reply;
    API.object_get = f_object_get;
    API.log = f_log;
    API.now_ms = f_now;
    API.wall_ms = f_now;
    API.metric_set = f_metric_set;
    memset(&P, 0, sizeof(P));
    P.api = &API;
    assert_int_equal(wm_store_create(&P.store), WM_OK);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    wm_mgmt_release(&P);
    wm_store_free(P.store);
    return 0;
}

/* Add READY revisions "model-<from>" .. "model-<to - 1>". */
static void seed(long from, long to)
{
    char msg[256];
    if (wmt_seed_ready(P.store, "model-", from, to, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
}

typedef int (*handler)(void *, smp_rpc_call *, const uint8_t *, size_t);

/* Pack msg, call h, check it answered OK; the work counted during the call. */
static uint64_t work_of(handler h, const ProtobufCMessage *msg)
{
    uint8_t buf[4096];
    size_t n = protobuf_c_message_get_packed_size(msg);
    assert_true(n <= sizeof(buf));
    protobuf_c_message_pack(msg, buf);
    memset(&CALL, 0, sizeof(CALL));
    CALL.status = 1;
    uint64_t before = g_work;
    h(&P, &CALL, buf, n);
    assert_int_equal(CALL.status, SMP_OK);
    return g_work - before;
}

/* A list page of 100 from the token `after` ("" for the first page); checks
 * a full page came back. */
static uint64_t list_work(const char *after)
{
    Wmrpc__ListRequest req = WMRPC__LIST_REQUEST__INIT;
    req.tenant = (char *)"tenant-a";
    req.namespace_id = (char *)"llm";
    req.limit = 100;
    req.page_token = (char *)after;
    uint64_t w = work_of(wm_rpc_list, &req.base);
    Wmrpc__ListResponse *resp = wmrpc__list_response__unpack(NULL, CALL.len, CALL.body);
    assert_non_null(resp);
    assert_int_equal(resp->n_revisions, 100);
    wmrpc__list_response__free_unpacked(resp, NULL);
    return w;
}

/* get_metadata (or is_exist) of revision i. */
static uint64_t lookup_work(long i, int exists)
{
    char name[32];
    wm_identity w;
    snprintf(name, sizeof(name), "model-%07ld", i);
    wmt_identity(&w, name, 1);
    Wmrpc__WeightIdentity id = WMRPC__WEIGHT_IDENTITY__INIT;
    id.tenant = (char *)w.tenant_id;
    id.namespace_id = (char *)w.ns;
    id.resource_id = (char *)w.resource_id;
    id.revision = (char *)w.revision;
    id.generation = w.weight_generation;
    Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
    req.identity = &id;
    return work_of(exists ? wm_rpc_is_exist : wm_rpc_get_metadata, &req.base);
}

/* One reconcile tick with nothing to do, a second after the last (every
 * periodic pass is due). Before it, ticks run until one does no counted
 * work, at most n / 16 + 16 of them: a change of the table (the seeding)
 * sends the bounded sweeps -- manifest care, reclaim, the validation after
 * a start -- round the revisions once, and then they rest. */
static uint64_t tick_work(long n)
{
    uint64_t cursor = 0, before;
    for (long i = 0; i < n / 16 + 16; i++) {
        g_now += 1000;
        before = g_work;
        wm_lifecycle_tick(&P, NULL, &cursor);
        if (g_work == before) break;
    }
    before = g_work;
    g_now += 1000;
    wm_lifecycle_tick(&P, NULL, &cursor);
    return g_work - before;
}

typedef struct costs {
    uint64_t first_page, middle_page, get_metadata, is_exist, tick;
    uint64_t is_exist_object_gets; /* host object_get calls of one is_exist */
} costs;

/* The costs with n revisions in the store. */
static costs measure(long n)
{
    costs c;
    const wm_revision *mid = wm_store_revision_at(P.store, (size_t)n / 2);
    char token[WM_KEY_MAX + 1];
    snprintf(token, sizeof(token), "%s", mid->group_key);
    c.first_page = list_work("");
    c.middle_page = list_work(token);
    c.get_metadata = lookup_work(n / 2, 0);
    uint64_t gets = g_object_gets;
    c.is_exist = lookup_work(n / 2, 1);
    c.is_exist_object_gets = g_object_gets - gets;
    c.tick = tick_work(n);
    return c;
}

static void assert_flat(const char *what, uint64_t small, uint64_t big)
{
    printf("%-13s 1k: %5llu   10k: %5llu   x%.2f\n", what, (unsigned long long)small,
           (unsigned long long)big, small ? (double)big / (double)small : 0.0);
    if (small == 0 || (double)big > 1.3 * (double)small)
        fail_msg("%s: %llu counted steps at 10,000 revisions vs %llu at 1,000 (> 1.3x)", what,
                 (unsigned long long)big, (unsigned long long)small);
}

/* The four read paths and an idle tick do (nearly) the same work at 10x
 * the revisions. */
static void test_read_paths_do_not_grow_with_the_revision_count(void **state)
{
    (void)state;
    seed(0, 1000);
    costs small = measure(1000);
    seed(1000, 10000);
    costs big = measure(10000);
    assert_flat("first page", small.first_page, big.first_page);
    assert_flat("middle page", small.middle_page, big.middle_page);
    assert_flat("get_metadata", small.get_metadata + 1, big.get_metadata + 1);
    assert_flat("is_exist", small.is_exist + 1, big.is_exist + 1);
    assert_flat("idle tick", small.tick + 1, big.tick + 1);
    /* is_exist probes the store once, as get_metadata (it probed twice: the
     * revision, then its affinity), and asks the host once per key. */
    assert_int_equal(small.get_metadata, 1);
    assert_int_equal(small.is_exist, small.get_metadata);
    assert_int_equal(big.is_exist, big.get_metadata);
    assert_int_equal(small.is_exist_object_gets, 2);
    assert_int_equal(big.is_exist_object_gets, 2);
    /* Idle, the tick looks at no revision at all (it looked at 321 of them
     * per tick, at any count, in bounded sweeps that never rested). */
    assert_int_equal(small.tick, 0);
    assert_int_equal(big.tick, 0);
}

/* The counter sees a linear walk: a control that the guard above can fail. */
static void test_the_counter_sees_a_linear_walk(void **state)
{
    (void)state;
    seed(0, 1000);
    uint64_t before = g_work;
    for (size_t i = 0; i < wm_store_revision_count(P.store); i++) (void)wm_store_revision_at(P.store, i);
    assert_int_equal(g_work - before, 1000);
}

/* String compares of the replica-lost reports of revisions from .. to - 1
 * (their manifests), as a node going down sends them. */
static uint64_t lost_reports_work(long from, long to)
{
    uint64_t before = g_strcmp;
    for (long i = from; i < to; i++) {
        const wm_revision *rev = wm_store_revision_at(P.store, (size_t)i);
        smp_event ev = {.struct_size = sizeof(ev), .type = SMP_EVENT_REPLICA_LOST,
                        .key = rev->manifest_key, .group = rev->group_key,
                        .replica_kind = SMP_REPLICA_MEMORY};
        wm_lifecycle_event(&P, &ev);
    }
    return g_strcmp - before;
}

/* The first 1,000 reports of a node going down cost what 1,000 reports do
 * once 9,000 came before them (the set of members to look at is full). */
static void test_replica_lost_reports_do_not_grow_with_those_kept(void **state)
{
    (void)state;
    seed(0, 10000);
    uint64_t first = lost_reports_work(0, 1000);
    (void)lost_reports_work(1000, 9000);
    uint64_t last = lost_reports_work(9000, 10000);
    assert_flat("lost reports", first + 1, last + 1);
    /* a lookup each: no walk of the kept members */
    if (first > 2 * 1000 || last > 2 * 1000)
        fail_msg("replica-lost reports: %llu and %llu string compares per 1,000 reports",
                 (unsigned long long)first, (unsigned long long)last);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_read_paths_do_not_grow_with_the_revision_count, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_the_counter_sees_a_linear_walk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replica_lost_reports_do_not_grow_with_those_kept, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
