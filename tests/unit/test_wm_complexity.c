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
 * walked the kept ones: 4,096 compares a report once full).
 *
 * A list page is also held to what it touches (the link wraps the store's
 * two cache hints too): the revisions it returns and the next one, one host
 * call (its reply), and every row asked of the cache before it is read, so
 * that at 100,000 revisions, where each row is a cache miss, the misses
 * overlap; and every page of a walk answers byte for byte what the table
 * says it must (rows in identity order, the token of the last examined).
 *
 * weight_get_metadata packs its reply by hand (wm_reply_encode.c): the link
 * wraps protobuf-c's pack and size calls too, and the handler makes none of
 * them (2 before: the reply's size, then its pack, which walked the nested
 * messages' descriptors again). weight_is_exist packs its reply by hand too,
 * and both decode their IdentityRequest by hand (wm_request_decode.c): the
 * link wraps protobuf-c's unpack, and neither handler calls it (1 each
 * before, some 1,700 instructions of the 7,300 a get_metadata cost the
 * master). */
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

/* protobuf-c pack, size and unpack calls made from the plugin; those of
 * the last handler called by work_of. */
static uint64_t g_pb_calls, g_handler_pb_calls;

size_t __real_protobuf_c_message_get_packed_size(const ProtobufCMessage *m);
size_t __wrap_protobuf_c_message_get_packed_size(const ProtobufCMessage *m)
{
    g_pb_calls++;
    return __real_protobuf_c_message_get_packed_size(m);
}

ProtobufCMessage *__real_protobuf_c_message_unpack(const ProtobufCMessageDescriptor *d,
                                                   ProtobufCAllocator *a, size_t len,
                                                   const uint8_t *data);
ProtobufCMessage *__wrap_protobuf_c_message_unpack(const ProtobufCMessageDescriptor *d,
                                                   ProtobufCAllocator *a, size_t len,
                                                   const uint8_t *data)
{
    g_pb_calls++;
    return __real_protobuf_c_message_unpack(d, a, len, data);
}

size_t __real_protobuf_c_message_pack(const ProtobufCMessage *m, uint8_t *out);
size_t __wrap_protobuf_c_message_pack(const ProtobufCMessage *m, uint8_t *out)
{
    g_pb_calls++;
    return __real_protobuf_c_message_pack(m, out);
}

/* The distinct revisions a list page reads (positional reads), and the rows
 * it asked the cache for ahead of reading them (weight_metadata_store.h). */
#define ROWS_MAX 4096
static const wm_revision *g_rows[ROWS_MAX];
static size_t g_n_rows;
static size_t g_hinted[ROWS_MAX]; /* positions whose keys (after their fields) were asked for */
static size_t g_n_hinted, g_n_fields, g_n_keys;
static size_t g_rows_unhinted; /* positional reads of a position not hinted before */

static void note_row(const wm_revision *r)
{
    for (size_t k = 0; k < g_n_rows; k++)
        if (g_rows[k] == r) return;
    if (g_n_rows < ROWS_MAX) g_rows[g_n_rows++] = r;
}

static void rows_reset(void)
{
    g_n_rows = g_rows_unhinted = g_n_hinted = g_n_fields = g_n_keys = 0;
}

static uint64_t g_cmps; /* identity compares alone */

int __real_wm_identity_cmp(const wm_identity *a, const wm_identity *b);
int __wrap_wm_identity_cmp(const wm_identity *a, const wm_identity *b)
{
    g_work++;
    g_cmps++;
    return __real_wm_identity_cmp(a, b);
}

const wm_revision *__real_wm_store_revision_at(const wm_store *st, size_t i);
const wm_revision *__wrap_wm_store_revision_at(const wm_store *st, size_t i)
{
    g_work++;
    const wm_revision *r = __real_wm_store_revision_at(st, i);
    if (r != NULL) {
        size_t k = 0;
        while (k < g_n_hinted && g_hinted[k] != i) k++;
        if (k == g_n_hinted) g_rows_unhinted++;
        note_row(r);
    }
    return r;
}

void __real_wm_store_prefetch_fields(const wm_store *st, size_t i);
void __wrap_wm_store_prefetch_fields(const wm_store *st, size_t i)
{
    g_n_fields++;
    __real_wm_store_prefetch_fields(st, i);
}

/* Keys are asked for after the fields (at a smaller distance): a position
 * whose keys were asked for is one the walk hinted completely. */
void __real_wm_store_prefetch_keys(const wm_store *st, size_t i);
void __wrap_wm_store_prefetch_keys(const wm_store *st, size_t i)
{
    g_n_keys++;
    if (g_n_hinted < ROWS_MAX) g_hinted[g_n_hinted++] = i;
    __real_wm_store_prefetch_keys(st, i);
}

/* Every call the plugin makes of the host below (the test's host API). */
static uint64_t g_host_calls;

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
    g_host_calls++;
    call->status = status;
    call->len = len < sizeof(call->body) ? len : sizeof(call->body);
    if (body != NULL) memcpy(call->body, body, call->len);
    return SMP_OK;
}

static uint64_t g_object_gets;

static int f_object_get(smp_host *h, const char *key, smp_object_info *out)
{
    (void)h, (void)key;
    g_host_calls++;
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
    g_host_calls++;
}

static uint64_t g_now = 10000;

static uint64_t f_now(smp_host *h)
{
    (void)h;
    g_host_calls++;
    return g_now;
}

static void f_metric_set(smp_metric *m, const char *const *labels, double v)
{
    (void)m, (void)labels, (void)v;
    g_host_calls++;
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
    uint64_t before = g_work, pb = g_pb_calls;
    h(&P, &CALL, buf, n);
    g_handler_pb_calls = g_pb_calls - pb;
    assert_int_equal(CALL.status, SMP_OK);
    return g_work - before;
}

/* What a list page touched besides its counted steps. */
typedef struct page_touch {
    size_t rows;       /* distinct revisions read through positional reads */
    size_t unhinted;   /* positional reads of rows not asked of the cache before */
    size_t fields, keys; /* rows whose fields, keys were asked of the cache */
    uint64_t host_calls;
} page_touch;

/* A list page of 100 from the token `after` ("" for the first page); checks
 * a full page came back. *t: what it touched (NULL: not wanted). */
static uint64_t list_work(const char *after, page_touch *t)
{
    Wmrpc__ListRequest req = WMRPC__LIST_REQUEST__INIT;
    req.tenant = (char *)"tenant-a";
    req.namespace_id = (char *)"llm";
    req.limit = 100;
    req.page_token = (char *)after;
    rows_reset();
    uint64_t calls = g_host_calls;
    uint64_t w = work_of(wm_rpc_list, &req.base);
    if (t != NULL) {
        t->rows = g_n_rows;
        t->unhinted = g_rows_unhinted;
        t->fields = g_n_fields;
        t->keys = g_n_keys;
        t->host_calls = g_host_calls - calls;
    }
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
    page_touch first, middle; /* what the two pages touched */
    uint64_t is_exist_object_gets; /* host object_get calls of one is_exist */
    uint64_t get_metadata_pb_calls; /* protobuf-c pack, size and unpack calls of one get_metadata */
    uint64_t is_exist_pb_calls;     /* ... of one is_exist */
} costs;

/* The costs with n revisions in the store. */
static costs measure(long n)
{
    costs c;
    const wm_revision *mid = wm_store_revision_at(P.store, (size_t)n / 2);
    char token[WM_KEY_MAX + 1];
    snprintf(token, sizeof(token), "%s", mid->group_key);
    c.first_page = list_work("", &c.first);
    c.middle_page = list_work(token, &c.middle);
    c.get_metadata = lookup_work(n / 2, 0);
    c.get_metadata_pb_calls = g_handler_pb_calls;
    uint64_t gets = g_object_gets;
    c.is_exist = lookup_work(n / 2, 1);
    c.is_exist_pb_calls = g_handler_pb_calls;
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

/* What a list page of 100 touches: its rows and nothing else of the table
 * but its binary search (counted by assert_flat), the host once (the reply:
 * nothing is asked of the host per row), and each row's fields and keys
 * asked of the cache before the row is read, so that at 100,000 revisions
 * the misses of many rows overlap (the token's own row is compared by the
 * store's search, not read by the page). What it asks ahead is bounded by
 * the page, not by the table: at most one page more. */
static void assert_page_touch(const char *what, const page_touch *t, int after_token)
{
    printf("%-13s rows read %zu (%zu not asked ahead), fields asked %zu, keys asked %zu, "
           "host calls %llu\n",
           what, t->rows, t->unhinted, t->fields, t->keys, (unsigned long long)t->host_calls);
    if (t->host_calls != 1)
        fail_msg("%s: %llu host calls for a page of 100 (the reply is the only one)", what,
                 (unsigned long long)t->host_calls);
    if (t->rows < 100 || t->rows > 100 + 1 + (size_t)after_token)
        fail_msg("%s: %zu revisions read for a page of 100", what, t->rows);
    if (t->unhinted != 0)
        fail_msg("%s: %zu rows read without being asked of the cache first", what, t->unhinted);
    if (t->fields < 100 || t->fields > 200 || t->keys < 100 || t->keys > 200)
        fail_msg("%s: fields of %zu rows and keys of %zu asked ahead for a page of 100", what,
                 t->fields, t->keys);
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
    assert_page_touch("first page", &small.first, 0);
    assert_page_touch("middle page", &small.middle, 1);
    assert_page_touch("first page", &big.first, 0);
    assert_page_touch("middle page", &big.middle, 1);
    assert_int_equal(small.middle.rows, big.middle.rows);
    assert_int_equal(small.middle.fields, big.middle.fields);
    assert_int_equal(small.middle.keys, big.middle.keys);
    /* is_exist probes the store once, as get_metadata (it probed twice: the
     * revision, then its affinity), and asks the host once per key. */
    assert_int_equal(small.get_metadata, 1);
    assert_int_equal(small.is_exist, small.get_metadata);
    assert_int_equal(big.is_exist, big.get_metadata);
    assert_int_equal(small.is_exist_object_gets, 2);
    assert_int_equal(big.is_exist_object_gets, 2);
    /* get_metadata's and is_exist's requests are decoded and their replies
     * packed by hand: no protobuf-c unpack, pack or size. */
    assert_int_equal(small.get_metadata_pb_calls, 0);
    assert_int_equal(big.get_metadata_pb_calls, 0);
    assert_int_equal(small.is_exist_pb_calls, 0);
    assert_int_equal(big.is_exist_pb_calls, 0);
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

/* Revisions "model-<i>" READY for i from .. to - 1, each third one with an
 * IMPORTING revision "model-<i>-next" after it (never listed). */
static void seed_with_imports(long from, long to)
{
    char msg[256], name[64];
    for (long i = from; i < to; i++) {
        seed(i, i + 1);
        if (i % 3 != 1) continue;
        wm_metadata_upsert u;
        memset(&u, 0, sizeof(u));
        snprintf(name, sizeof(name), "model-%07ld-next", i);
        wmt_importing_revision(&u.revision, name, 1);
        if (wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
    }
}

/* The answer a page of `limit` from position *at must be, built straight
 * from the table: the visible revisions in identity order, the group key of
 * the last one examined as the token while more follow. *at moves past the
 * revisions examined. The packed bytes into out; their length. */
static size_t expected_page(size_t *at, uint32_t limit, uint8_t *out, size_t cap)
{
    static wm_pb_meta metas[100];
    Wmrpc__WeightMetadata *ptrs[100];
    Wmrpc__ListResponse resp = WMRPC__LIST_RESPONSE__INIT;
    size_t n = 0, examined = 0, total = wm_store_revision_count(P.store);
    const wm_revision *last = NULL;
    assert_true(limit <= 100);
    for (; *at < total && n < limit && examined < (size_t)limit * 8; (*at)++, examined++) {
        last = wm_store_revision_at(P.store, *at);
        if (last->availability == WM_AVAIL_IMPORTING) continue;
        wm_pb_meta_set(&metas[n], last);
        ptrs[n] = &metas[n].m;
        n++;
    }
    resp.n_revisions = n;
    resp.revisions = ptrs;
    resp.next_page_token = *at < total && last != NULL ? (char *)last->group_key : (char *)"";
    size_t len = protobuf_c_message_get_packed_size(&resp.base);
    assert_true(len <= cap);
    protobuf_c_message_pack(&resp.base, out);
    return len;
}

/* Walk every page of `limit` by token; each must be, byte for byte, what
 * expected_page builds from the table. */
static void walk_and_compare(uint32_t limit)
{
    static uint8_t want[1 << 16];
    char token[WM_KEY_MAX + 1] = "";
    size_t at = 0, pages = 0, rows = 0;
    do {
        Wmrpc__ListRequest req = WMRPC__LIST_REQUEST__INIT;
        req.tenant = (char *)"tenant-a";
        req.namespace_id = (char *)"llm";
        req.limit = limit;
        req.page_token = token;
        (void)work_of(wm_rpc_list, &req.base);
        size_t len = expected_page(&at, limit, want, sizeof(want));
        assert_int_equal(CALL.len, len);
        assert_memory_equal(CALL.body, want, len);
        Wmrpc__ListResponse *resp = wmrpc__list_response__unpack(NULL, CALL.len, CALL.body);
        assert_non_null(resp);
        rows += resp->n_revisions;
        snprintf(token, sizeof(token), "%s", resp->next_page_token);
        wmrpc__list_response__free_unpacked(resp, NULL);
        pages++;
    } while (token[0] != '\0');
    assert_int_equal(rows, 1000);
    assert_int_equal(at, wm_store_revision_count(P.store));
    assert_int_equal(pages, (1000 + limit - 1) / limit);
}

/* Every page of a walk by token answers, byte for byte, the visible
 * revisions in identity order and the token of the last one examined: what
 * the list answered before it asked the cache for rows ahead (an IMPORTING
 * revision every few rows, pages of 100 and of 7, the last page short) --
 * on a store built by applies and on the same store loaded from its
 * section (entries and keys in a slab, laid out differently). */
static void test_list_pages_answer_the_rows_in_identity_order(void **state)
{
    (void)state;
    char msg[256];
    uint8_t *section = NULL;
    size_t len = 0;
    wm_store *loaded = NULL;
    seed_with_imports(0, 1000);
    walk_and_compare(100);
    walk_and_compare(7);
    assert_int_equal(wm_store_save(P.store, &section, &len, msg, sizeof(msg)), WM_OK);
    assert_int_equal(wm_store_create(&loaded), WM_OK);
    assert_int_equal(wm_store_load(loaded, section, len, msg, sizeof(msg)), WM_OK);
    free(section);
    wm_store_free(P.store);
    P.store = loaded; /* teardown frees it */
    walk_and_compare(100);
    walk_and_compare(7);
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

/* A list page of 100 from token; its next token into next. The identity
 * compares it took. */
static uint64_t page_cmps(const char *token, char next[WM_KEY_MAX + 1])
{
    Wmrpc__ListRequest req = WMRPC__LIST_REQUEST__INIT;
    req.tenant = (char *)"tenant-a";
    req.namespace_id = (char *)"llm";
    req.limit = 100;
    req.page_token = (char *)token;
    uint64_t before = g_cmps;
    (void)work_of(wm_rpc_list, &req.base);
    uint64_t cmps = g_cmps - before;
    Wmrpc__ListResponse *resp = wmrpc__list_response__unpack(NULL, CALL.len, CALL.body);
    assert_non_null(resp);
    assert_int_equal(resp->n_revisions, 100);
    snprintf(next, WM_KEY_MAX + 1, "%s", resp->next_page_token);
    wmrpc__list_response__free_unpacked(resp, NULL);
    return cmps;
}

/* The page after token must be, byte for byte, what the table says. */
static void assert_page_after(const char *token)
{
    static uint8_t want[1 << 16];
    size_t at = 0;
    while (strcmp(wm_store_revision_at(P.store, at)->group_key, token) != 0) at++;
    at++;
    size_t len = expected_page(&at, 100, want, sizeof(want));
    assert_int_equal(CALL.len, len);
    assert_memory_equal(CALL.body, want, len);
}

/* A page that goes on from the one before it finds where to start with one
 * identity compare (the walk noted where it stopped), where a token it did
 * not come from is searched for (some log2 n compares, each a cache miss at
 * a random place at 100,000 revisions). Revisions added before the noted
 * place move it: the next page is then searched for and answers exactly
 * the rows after its token. More walks at once than are noted (8): the
 * oldest is searched for again, with the same answer. */
static void test_a_walk_goes_on_where_it_stopped(void **state)
{
    (void)state;
    char t[10][WM_KEY_MAX + 1], next[WM_KEY_MAX + 1], msg[256];
    seed(0, 10000);
    (void)page_cmps("", t[0]);
    assert_int_equal(page_cmps(t[0], t[1]), 1);
    assert_page_after(t[0]);
    assert_int_equal(page_cmps(t[1], next), 1);
    assert_page_after(t[1]);

    /* A token from elsewhere (the middle revision's group key) is searched for. */
    const char *mid = wm_store_revision_at(P.store, 5000)->group_key;
    snprintf(t[2], sizeof(t[2]), "%s", mid);
    assert_true(page_cmps(t[2], next) >= 13);
    assert_page_after(t[2]);

    /* Two revisions before the place the first walk noted: it moved. */
    for (int k = 0; k < 2; k++) {
        wm_metadata_upsert u;
        memset(&u, 0, sizeof(u));
        char name[64];
        snprintf(name, sizeof(name), "model-0000001-early%d", k);
        wmt_importing_revision(&u.revision, name, 1);
        if (wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
    }
    snprintf(t[1], sizeof(t[1]), "%s", next); /* the first walk's third page ended here */
    (void)page_cmps("", t[3]);                /* (a walk of its own, from the start) */
    assert_true(page_cmps(t[1], next) >= 13);
    assert_page_after(t[1]);

    /* Nine walks, each one page in; then each goes on: the other eight's
     * places were kept, the first one's was forgotten (searched for). */
    char starts[9][WM_KEY_MAX + 1];
    for (int w = 0; w < 9; w++) {
        snprintf(starts[w], sizeof(starts[w]), "%s",
                 wm_store_revision_at(P.store, (size_t)(1000 * w + 7))->group_key);
        (void)page_cmps(starts[w], t[w % 10]);
        snprintf(starts[w], sizeof(starts[w]), "%s", t[w % 10]);
    }
    for (int w = 1; w < 9; w++) {
        assert_int_equal(page_cmps(starts[w], next), 1);
        assert_page_after(starts[w]);
    }
    assert_true(page_cmps(starts[0], next) >= 13);
    assert_page_after(starts[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_read_paths_do_not_grow_with_the_revision_count, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_the_counter_sees_a_linear_walk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_pages_answer_the_rows_in_identity_order, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_walk_goes_on_where_it_stopped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replica_lost_reports_do_not_grow_with_those_kept, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
