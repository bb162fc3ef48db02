/* test_corrupt_reports.c -- a reader that meets a corrupt memory replica
 * reports it, and the master checks the replica itself before it drops it
 * (objects.report_corrupt, master_corrupt_reports.c), on a real master with
 * the real weight_mgmt.so, its embedded node and a cold tier.
 *
 * Pinned here: one byte of a HOT revision's memory replica flipped in the
 * node's segment file (/dev/shm) makes a co-located weight_get fail with
 * DIGEST_MISMATCH, and that get reports the replica; the master has the
 * node hash it, finds it corrupt, drops it naming the key, the node and the
 * reporter, and the plugin repairs the revision from its cold copy: READY
 * + HOT again and every byte read back from memory, without an operator's
 * fsck. (Before, the revision stayed READY and every get failed the same
 * way until `weightctl fsck --deep --repair`.) The master never takes the
 * reader's word: a report of a sound replica drops nothing (the object
 * still reads from the same replica, counted refuted); an unknown key, a
 * place that is no replica of the key, and a half-named place are refused
 * naming the cause, changing nothing; and a flood of reports of one key is
 * one check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <fcntl.h>
#include <unistd.h>

#include "harness.h"
#include "host_rpc.pb-c.h"
#include "rpc_client.h"
#include "weight_check.h"
#include "weight_model.h"
#include "weightclient.h"

#define WAIT_MS 30000 /* generous: the machine is shared */

static wx_tensor model[] = {
    {"embed.weight", {32, 32}, {0}},
    {"layers.0.w", {16, 64}, {0}},
    {"layers.1.w", {64, 16}, {0}},
};
#define N_MODEL (sizeof(model) / sizeof(model[0]))

typedef struct fixture {
    hx_master m;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    char cfg[1400];
    wx_model_fill(model, N_MODEL, 977);
    if (f == NULL || hx_init(&f->m, "corrupt", NULL) < 0) return -1;
    snprintf(cfg, sizeof(cfg),
             "node:\n  segment_dir: \"%s/shm\"\n  segment_bytes: 33554432\n"
             "  cold_dir: \"%s/cold\"\n  poll_ms: 10\n"
             "cluster:\n  default_weight_preferred_residency: hot\n"
             "  weight_migration_cooldown_ms: 100\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    config:\n      tick_period_ms: 50\n",
             f->m.dir, f->m.dir, BUILD_DIR);
    if (hx_reconfigure(&f->m, cfg) < 0 || hx_start(&f->m, 20000) < 0) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

/* Flip the bits of mask in the byte at `at` of the file at path. */
static void flip_byte(const char *path, uint64_t at, unsigned char mask)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b = 0;
    assert_int_equal(pread(fd, &b, 1, (off_t)at), 1);
    b ^= mask;
    assert_int_equal(pwrite(fd, &b, 1, (off_t)at), 1);
    close(fd);
}

/* The memory replica of key as the master lists it now, into *out (the
 * lookup's read lease goes with the connection). */
static void memory_replica(fixture *f, const char *key, kvc_replica *out)
{
    kvc *c = hx_client(&f->m);
    kvc_object o;
    int found = 0;
    assert_non_null(c);
    assert_int_equal(kvc_get(c, key, &o), 0);
    kvc_close(c);
    for (size_t i = 0; i < o.n_replicas; i++)
        if (o.replicas[i].kind == SMP_REPLICA_MEMORY) {
            *out = o.replicas[i];
            found++;
        }
    assert_int_equal(found, 1);
    assert_true(out->segment_path[0] != '\0'); /* co-located: the test flips its bytes */
}

/* The /metrics series store_corrupt_reports_total{result="RESULT"}. */
static double reports(fixture *f, const char *result)
{
    char series[128];
    snprintf(series, sizeof(series), "store_corrupt_reports_total{result=\"%s\"}", result);
    return hx_metric(&f->m, series);
}

/* Wait until store_corrupt_reports_total{result} is at least want. */
static void wait_reports(fixture *f, const char *result, double want)
{
    long long until = hx_now_ms() + WAIT_MS;
    while (reports(f, result) < want) {
        if (hx_now_ms() > until) {
            hx_print_log(&f->m);
            fail_msg("store_corrupt_reports_total{result=\"%s\"} stayed at %g, below %g", result,
                     reports(f, result), want);
        }
        usleep(20000);
    }
}

static int place_cb(void *ctx, const weight_tensor_info *t, weight_tensor_place *out)
{
    (void)ctx;
    (void)t;
    out->kind = WEIGHT_PLACE_REPLICATED;
    return 0;
}

typedef struct bufs {
    uint8_t *b[N_MODEL];
} bufs;

static int provide_cb(void *ctx, const weight_tensor_info *t, const weight_tensor_place *p,
                      const uint64_t *shape, uint64_t bytes, void **out)
{
    bufs *g = ctx;
    (void)p;
    (void)shape;
    for (size_t i = 0; i < N_MODEL; i++)
        if (strcmp(model[i].name, t->name) == 0) {
            g->b[i] = calloc(1, bytes ? bytes : 1);
            *out = g->b[i];
            return g->b[i] ? 0 : WEIGHT_ENOMEM;
        }
    return WEIGHT_EINVALID_ARGUMENT;
}

/* weight_get of id into fresh buffers: its code, the store's message in err. */
static int try_get(weight_store *s, const weight_identity *id, char *err, size_t cap)
{
    bufs g;
    memset(&g, 0, sizeof(g));
    weight_placement pl = {place_cb, NULL};
    weight_bindings bd = {NULL, 0, provide_cb, &g};
    int rc = weight_get(s, id, &pl, &bd, NULL);
    snprintf(err, cap, "%s", weight_store_last_error(s));
    for (size_t i = 0; i < N_MODEL; i++) free(g.b[i]);
    return rc;
}

/* A store that reads memory replicas through the segment mapping only: no
 * TCP, so no fallback to the cold copy either -- the corrupt replica is
 * all it can read. */
static weight_store *local_store(fixture *f)
{
    weight_store *s = wx_open_store(&f->m);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_TRANSPORT, 1), WEIGHT_OK);
    return s;
}

/* -- tests --------------------------------------------------------------------- */

/* One byte of a payload's memory replica flipped: a co-located weight_get
 * fails DIGEST_MISMATCH naming the payload and saying the replica was
 * reported; the master has the node hash it, drops it (one log line: key,
 * place, node, reporter; counted confirmed), and the plugin's repair brings
 * the revision back READY + HOT from its cold copy; the next get reads
 * every byte from memory, and fsck --deep is clean. The repaired replica,
 * corrupted in turn at once, is checked and repaired again (a drop forgets
 * the key: no wait for the recheck time). */
static void test_a_corrupt_memory_replica_a_reader_meets_is_checked_and_repaired(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity id;
    const char *key = "weights/acme/llm/heal/v1/1/payload/0";
    char err[2048], want[600], out[8192];
    kvc_replica mem;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "heal", "v1", 1), 0);
    wx_put_model(s, &id, model, N_MODEL);
    wx_migrate_and_wait(s, &id, WEIGHT_RES_COLD);
    wx_migrate_and_wait(s, &id, WEIGHT_RES_HOT); /* its cold files stay */
    memory_replica(f, key, &mem);
    flip_byte(mem.segment_path, mem.offset + 100, 0x5a);

    weight_store *local = local_store(f);
    int rc = try_get(local, &id, err, sizeof(err));
    if (rc != WEIGHT_EDIGEST_MISMATCH || strstr(err, key) == NULL ||
        strstr(err, "reported to the master") == NULL)
        fail_msg("the get of the corrupt replica returned %s: %s", weight_error_name(rc), err);

    wait_reports(f, "confirmed", 1);
    snprintf(want, sizeof(want), "store_master: memory replica of %s at %s+%llu on node %s does "
             "not hold its bytes (reported by a client on connection ", key, mem.segment,
             (unsigned long long)mem.offset, mem.node);
    long long until = hx_now_ms() + WAIT_MS;
    while (!hx_log_contains(&f->m, want) || !hx_log_contains(&f->m, "its replica is dropped")) {
        if (hx_now_ms() > until) {
            hx_print_log(&f->m);
            fail_msg("the master did not log the drop: %s", want);
        }
        usleep(20000);
    }
    assert_int_equal(reports(f, "refuted"), 0);
    for (until = hx_now_ms() + WAIT_MS; wx_metric(&f->m, "weight_repairs_total{result=\"succeeded\"}") < 1;) {
        if (hx_now_ms() > until) {
            hx_print_log(&f->m);
            fail_msg("no repair succeeded");
        }
        usleep(20000);
    }
    wx_wait_state(s, &id, WEIGHT_READY, WEIGHT_RES_HOT);
    assert_int_equal(wx_get_and_compare(local, &id, model, N_MODEL), N_MODEL * 4096); /* from memory */
    if (wx_weightctl(&f->m, out, sizeof(out), "fsck --deep") != 0) fail_msg("fsck --deep said: %s", out);

    /* The repair's replica loses a byte in turn, right away: the key was
       forgotten with the drop, so this report is checked too (not held
       back as a key checked a moment ago). */
    memory_replica(f, key, &mem);
    flip_byte(mem.segment_path, mem.offset + 3000, 0x22);
    assert_int_equal(try_get(local, &id, err, sizeof(err)), WEIGHT_EDIGEST_MISMATCH);
    wait_reports(f, "confirmed", 2);
    for (until = hx_now_ms() + WAIT_MS; wx_metric(&f->m, "weight_repairs_total{result=\"succeeded\"}") < 2;) {
        if (hx_now_ms() > until) {
            hx_print_log(&f->m);
            fail_msg("no second repair succeeded");
        }
        usleep(20000);
    }
    wx_wait_state(s, &id, WEIGHT_READY, WEIGHT_RES_HOT);
    assert_int_equal(wx_get_and_compare(local, &id, model, N_MODEL), N_MODEL * 4096);
    assert_int_equal(reports(f, "refuted"), 0);
    weight_store_close(local);
    weight_store_close(s);
}

/* A get through the default transport reads the corrupt chunk again from
 * the cold copy and succeeds -- what the caller gets is unchanged -- and
 * still reports the memory replica: it is dropped and repaired, and the
 * next co-located get reads every byte from memory. */
static void test_a_get_that_falls_back_to_the_cold_copy_reports_too(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity id;
    kvc_replica mem;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "heal", "v2", 1), 0);
    wx_put_model(s, &id, model, N_MODEL);
    wx_migrate_and_wait(s, &id, WEIGHT_RES_COLD);
    wx_migrate_and_wait(s, &id, WEIGHT_RES_HOT);
    memory_replica(f, "weights/acme/llm/heal/v2/1/payload/1", &mem);
    flip_byte(mem.segment_path, mem.offset + 4000, 0x01);

    assert_true(wx_get_and_compare(s, &id, model, N_MODEL) < N_MODEL * 4096); /* one from cold */
    wait_reports(f, "confirmed", 1);
    long long until = hx_now_ms() + WAIT_MS;
    while (wx_metric(&f->m, "weight_repairs_total{result=\"succeeded\"}") < 1) {
        if (hx_now_ms() > until) {
            hx_print_log(&f->m);
            fail_msg("no repair succeeded");
        }
        usleep(20000);
    }
    wx_wait_state(s, &id, WEIGHT_READY, WEIGHT_RES_HOT);
    weight_store *local = local_store(f);
    assert_int_equal(wx_get_and_compare(local, &id, model, N_MODEL), N_MODEL * 4096);
    weight_store_close(local);
    weight_store_close(s);
}

/* The tensors of a view in place: how many are NULL (their object failed
 * its verification), the others compared with the model's bytes. */
static size_t view_unreadable(weight_mapped *v)
{
    size_t unreadable = 0;
    assert_int_equal(weight_mapped_count(v), N_MODEL);
    assert_int_equal(weight_mapped_verify(v, NULL, 0), WEIGHT_OK);
    for (size_t i = 0; i < N_MODEL; i++) {
        weight_mapped_tensor t;
        const void *data = NULL;
        assert_int_equal(weight_mapped_get_tensor(v, i, &t), WEIGHT_OK);
        assert_int_equal(weight_mapped_data(v, i, &data), WEIGHT_OK);
        if (data == NULL) {
            unreadable++;
            continue;
        }
        for (size_t k = 0; k < N_MODEL; k++)
            if (strcmp(model[k].name, t.name) == 0) assert_memory_equal(data, model[k].data, 4096);
    }
    return unreadable;
}

/* A view in place (weight_get_mapped) verifies each object before it hands
 * out a pointer: the corrupt one's tensor is NULL, and the view reports the
 * replica (on its lease's connection); it is checked, dropped and
 * repaired, and a new view reads every tensor in place. */
static void test_a_view_in_place_reports_the_object_that_failed(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity id;
    weight_mapped *v = NULL;
    kvc_replica mem;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "view", "v1", 1), 0);
    wx_put_model(s, &id, model, N_MODEL);
    wx_migrate_and_wait(s, &id, WEIGHT_RES_COLD);
    wx_migrate_and_wait(s, &id, WEIGHT_RES_HOT);
    memory_replica(f, "weights/acme/llm/view/v1/1/payload/1", &mem);
    flip_byte(mem.segment_path, mem.offset + 2048, 0x10);

    CHECK(s, weight_get_mapped(s, &id, &v));
    assert_int_equal(view_unreadable(v), 1);
    wait_reports(f, "confirmed", 1);
    weight_mapped_release(v);
    long long until = hx_now_ms() + WAIT_MS;
    while (wx_metric(&f->m, "weight_repairs_total{result=\"succeeded\"}") < 1) {
        if (hx_now_ms() > until) {
            hx_print_log(&f->m);
            fail_msg("no repair succeeded");
        }
        usleep(20000);
    }
    wx_wait_state(s, &id, WEIGHT_READY, WEIGHT_RES_HOT);
    CHECK(s, weight_get_mapped(s, &id, &v));
    assert_int_equal(view_unreadable(v), 0);
    weight_mapped_release(v);
    weight_store_close(s);
}

/* A HOT revision with no cold copy whose only replica of a payload is
 * found corrupt has nothing left to read it from: once the replica is
 * dropped the revision is DEGRADED, not READY (a get would fail NOT_READY
 * rather than hand out bytes that do not verify). */
static void test_a_revision_left_with_nothing_readable_is_degraded(void **state)
{
    fixture *f = *state;
    weight_store *s = wx_open_store(&f->m);
    weight_identity id;
    char err[2048];
    kvc_replica mem;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "lost", "v1", 1), 0);
    wx_put_model(s, &id, model, N_MODEL);
    memory_replica(f, "weights/acme/llm/lost/v1/1/payload/2", &mem);
    flip_byte(mem.segment_path, mem.offset + 7, 0x80);

    int rc = try_get(s, &id, err, sizeof(err));
    if (rc != WEIGHT_EDIGEST_MISMATCH) fail_msg("the get returned %s: %s", weight_error_name(rc), err);
    wait_reports(f, "confirmed", 1);
    wx_wait_state(s, &id, WEIGHT_DEGRADED, -1);
    weight_store_close(s);
}

/* The copying get of test_a_get_after_a_view_reported_says_so, at its
 * start (progress 0: its tickets in hand, no byte read yet): a view in
 * place on another store of the process refuses the corrupt object and
 * reports it, and the master drops the replica before the get reads it. */
typedef struct view_first {
    fixture *f;
    const weight_identity *id;
    int ran;
} view_first;

static void report_by_a_view_first(void *ctx, uint64_t done, uint64_t total)
{
    view_first *r = ctx;
    (void)total;
    if (done != 0 || r->ran) return;
    r->ran = 1;
    weight_store *s2 = wx_open_store(&r->f->m);
    weight_mapped *v = NULL;
    CHECK(s2, weight_get_mapped(s2, r->id, &v));
    assert_int_equal(view_unreadable(v), 1);
    wait_reports(r->f, "confirmed", 1);
    weight_mapped_release(v);
    wx_wait_state(s2, r->id, WEIGHT_DEGRADED, -1); /* the replica is dropped */
    weight_store_close(s2);
}

/* A get that meets bytes a view of this process already reported -- and
 * the master already dropped, so it refuses the get's own report (no such
 * replica) -- fails DIGEST_MISMATCH saying the replica was reported all the
 * same (Python's zero-copy load does this: the view refuses the object,
 * then the copy reads it; before, its message lacked the sentence when
 * the drop came first). */
static void test_a_get_after_a_view_reported_says_so(void **state)
{
    fixture *f = *state;
    weight_store *s = local_store(f);
    weight_identity id;
    char err[2048];
    kvc_replica mem;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "viewfirst", "v1", 1), 0);
    wx_put_model(s, &id, model, N_MODEL);
    memory_replica(f, "weights/acme/llm/viewfirst/v1/1/payload/2", &mem);
    flip_byte(mem.segment_path, mem.offset + 7, 0x80);

    view_first r = {f, &id, 0};
    weight_store_set_progress(s, report_by_a_view_first, &r);
    int rc = try_get(s, &id, err, sizeof(err));
    weight_store_set_progress(s, NULL, NULL);
    assert_int_equal(r.ran, 1);
    if (rc != WEIGHT_EDIGEST_MISMATCH) fail_msg("the get returned %s: %s", weight_error_name(rc), err);
    if (strstr(err, "was reported to the master") == NULL)
        fail_msg("the get's message does not say the replica was reported: %s", err);
    weight_store_close(s);
}

/* `kv get` (kvc_get_into, the object's SHA-256) of a plain object whose
 * only replica -- memory -- lost a byte fails naming the SHA-256 and
 * reports the replica; the master confirms and drops it, and the object
 * is then left with no replica (nothing repairs a plain object): a get no
 * longer returns bytes that do not verify. */
static void test_a_kv_get_reports_the_memory_replica_it_read(void **state)
{
    fixture *f = *state;
    kvc *c = hx_client(&f->m);
    uint8_t bytes[1024], back[1024];
    uint64_t len = 0;
    kvc_replica mem;
    kvc_object o;
    assert_non_null(c);
    for (size_t i = 0; i < sizeof(bytes); i++) bytes[i] = (uint8_t)(i * 3 + 11);
    assert_int_equal(kvc_put_bytes(c, "plain/rot", bytes, sizeof(bytes), SMP_DATA_KV, NULL, 0, NULL), 0);
    memory_replica(f, "plain/rot", &mem);
    flip_byte(mem.segment_path, mem.offset + 500, 0x04);

    assert_int_equal(kvc_get_into(c, "plain/rot", back, sizeof(back), &len, 1), SMP_EPROTO);
    assert_true(hx_says(kvc_error(c), "plain/rot: the bytes read do not match its SHA-256 (the "
                                      "memory replica read was reported to the master"));
    wait_reports(f, "confirmed", 1);
    long long until = hx_now_ms() + WAIT_MS;
    for (;;) {
        int rc = kvc_get(c, "plain/rot", &o);
        if (rc < 0 || o.n_replicas == 0) break;
        if (hx_now_ms() > until) fail_msg("plain/rot still lists %zu replicas", o.n_replicas);
        usleep(20000);
    }
    kvc_close(c);
}

/* The master does not take the reader's word: a report naming a sound
 * replica is queued and checked, and changes nothing -- the object keeps
 * the same replica and reads back, counted refuted, logged as left alone.
 * An unknown key (NOT_FOUND), a place that is no replica of the key, a
 * node without its segment, no key (INVALID_ARGUMENT) and a body that does
 * not decode (PROTO) are refused naming the cause, and nothing is counted
 * or checked for them. */
static void test_a_report_of_a_sound_replica_changes_nothing(void **state)
{
    fixture *f = *state;
    kvc *c = hx_client(&f->m);
    uint8_t good[2048], back[2048];
    uint64_t len = 0;
    int queued = -1;
    kvc_replica mem, after;
    assert_non_null(c);
    for (size_t i = 0; i < sizeof(good); i++) good[i] = (uint8_t)(i * 31 + 7);
    assert_int_equal(kvc_put_bytes(c, "plain/sound", good, sizeof(good), SMP_DATA_KV, NULL, 0, NULL), 0);
    memory_replica(f, "plain/sound", &mem);

    assert_int_equal(kvc_report_corrupt(c, "plain/nothing", mem.node, mem.segment, mem.offset, &queued),
                     SMP_ENOTFOUND);
    assert_true(hx_says(kvc_error(c), "report corrupt: no object 'plain/nothing'"));
    assert_int_equal(kvc_report_corrupt(c, "plain/sound", mem.node, mem.segment, mem.offset + 64,
                                        &queued),
                     SMP_EINVAL);
    assert_true(hx_says(kvc_error(c), "has no memory replica at"));
    assert_int_equal(kvc_report_corrupt(c, "plain/sound", mem.node, "", 0, &queued), SMP_EINVAL);
    assert_true(hx_says(kvc_error(c), "by its node and its segment together"));
    assert_int_equal(kvc_report_corrupt(c, "", NULL, NULL, 0, &queued), SMP_EINVAL);
    assert_true(hx_says(kvc_error(c), "no key given"));
    rpcc_conn *raw = NULL;
    int status = 0;
    char *msg = NULL;
    const uint8_t garbage[] = {0x0a, 0x7f, 'x'}; /* field 1 says 127 bytes follow: 1 does */
    rpcc_options ro = {.timeout_ms = 10000};
    assert_int_equal(rpcc_connect(f->m.socket, &ro, &raw, NULL, 0), 0);
    assert_int_equal(rpcc_call(raw, HOST_SERVICE__HOST_SERVICE_OBJECTS, OBJECTS_METHOD__OBJ_REPORT_CORRUPT,
                               garbage, sizeof(garbage), &status, NULL, NULL, &msg),
                     0);
    assert_int_equal(status, SMP_EPROTO);
    assert_true(hx_says(msg, "request body does not decode as ReportCorruptRequest"));
    free(msg);
    rpcc_close(raw);
    assert_int_equal(reports(f, "received"), 0);

    assert_int_equal(kvc_report_corrupt(c, "plain/sound", mem.node, mem.segment, mem.offset, &queued), 0);
    assert_int_equal(queued, 1);
    wait_reports(f, "refuted", 1);
    assert_int_equal(reports(f, "received"), 1);
    assert_int_equal(reports(f, "confirmed"), 0);
    if (!hx_log_contains(&f->m, "report corrupt: the memory replica of plain/sound at ") ||
        !hx_log_contains(&f->m, "holds its bytes (its node hashed it): reported by a client on "
                                "connection ")) {
        hx_print_log(&f->m);
        fail_msg("the master did not say it left the sound replica alone");
    }
    memory_replica(f, "plain/sound", &after);
    assert_string_equal(after.node, mem.node);
    assert_string_equal(after.segment, mem.segment);
    assert_int_equal(after.offset, mem.offset);
    assert_int_equal(kvc_get_into(c, "plain/sound", back, sizeof(back), &len, 1), 0);
    assert_int_equal(len, sizeof(good));
    assert_memory_equal(back, good, sizeof(good));
    kvc_close(c);
}

/* A flood of reports of one replica is one check: the first report queues
 * it, the next 199 (while it is queued, being checked, and right after)
 * queue nothing, nor do 20 more once it was found sound. A report naming
 * no replica checks every memory replica of the key: 20 of them, one check.
 * Another key's report is its own check. All are counted received; one
 * replica hashed per check. */
static void test_a_flood_of_reports_of_one_key_is_one_check(void **state)
{
    fixture *f = *state;
    kvc *c = hx_client(&f->m);
    uint8_t bytes[512];
    int queued = -1, first = 0, more = 0;
    kvc_replica mem;
    assert_non_null(c);
    for (size_t i = 0; i < sizeof(bytes); i++) bytes[i] = (uint8_t)(i * 5 + 1);
    assert_int_equal(kvc_put_bytes(c, "plain/flood", bytes, sizeof(bytes), SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(kvc_put_bytes(c, "plain/any", bytes, sizeof(bytes), SMP_DATA_KV, NULL, 0, NULL), 0);
    memory_replica(f, "plain/flood", &mem);
    for (int i = 0; i < 200; i++) {
        assert_int_equal(kvc_report_corrupt(c, "plain/flood", mem.node, mem.segment, mem.offset,
                                            &queued), 0);
        if (i == 0) first = queued;
        else more += queued;
    }
    assert_int_equal(first, 1);
    assert_int_equal(more, 0);
    wait_reports(f, "refuted", 1);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(kvc_report_corrupt(c, "plain/flood", mem.node, mem.segment, mem.offset,
                                            &queued), 0);
        more += queued;
    }
    assert_int_equal(more, 0);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(kvc_report_corrupt(c, "plain/flood", NULL, NULL, 0, &queued), 0);
        if (i == 0) first = queued;
        else more += queued;
    }
    assert_int_equal(first, 1);
    assert_int_equal(more, 0);
    wait_reports(f, "refuted", 2);
    assert_int_equal(kvc_report_corrupt(c, "plain/any", NULL, NULL, 0, &queued), 0);
    assert_int_equal(queued, 1);
    wait_reports(f, "refuted", 3);
    assert_int_equal(reports(f, "received"), 241);
    assert_int_equal(reports(f, "refuted"), 3); /* one replica hashed a check, flood or not */
    assert_int_equal(reports(f, "confirmed"), 0);
    assert_int_equal(reports(f, "failed"), 0);
    /* a report queued as the master stops is forgotten with it, cleanly */
    memory_replica(f, "plain/any", &mem);
    assert_int_equal(kvc_report_corrupt(c, "plain/any", mem.node, mem.segment, mem.offset, &queued), 0);
    assert_int_equal(queued, 1);
    kvc_close(c);
    assert_int_equal(hx_stop(&f->m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_corrupt_memory_replica_a_reader_meets_is_checked_and_repaired,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_get_that_falls_back_to_the_cold_copy_reports_too,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_revision_left_with_nothing_readable_is_degraded,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_view_in_place_reports_the_object_that_failed,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_get_after_a_view_reported_says_so, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_kv_get_reports_the_memory_replica_it_read, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_report_of_a_sound_replica_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_flood_of_reports_of_one_key_is_one_check, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
