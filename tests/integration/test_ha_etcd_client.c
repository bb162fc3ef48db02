/* test_ha_etcd_client.c -- the etcd client against real etcd members.
 *
 * A 1-member etcd (etcd_fixture.c) serves the KV, Txn, Lease, Watch,
 * Compact and Status tests, each under its own key prefix; failover is
 * pinned with a dead endpoint listed first, a SIGSTOPped member (the call
 * fails with SMP_EIO instead of hanging) and a 3-member cluster that loses
 * one member to SIGKILL and keeps serving. Every bad argument is
 * SMP_EINVAL. No wall-clock thresholds: waits are bounded polls. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "etcd_client.h"
#include "etcd_fixture.h"
#include "fault_proxy.h"
#include "store_plugin.h"

#define START_MS 20000

typedef struct suite {
    etcd_fixture f;
    etcd_client *c;
} suite;

static char err[1024];

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int group_setup(void **state)
{
    static suite s;
    if (etcd_fixture_start(&s.f, "client", 1, START_MS) < 0) return -1;
    etcd_client_options o = {.endpoints = etcd_fixture_endpoints(&s.f), .timeout_ms = 2000};
    if (etcd_client_open(&o, &s.c, err, sizeof(err)) < 0) {
        fprintf(stderr, "etcd_client_open: %s\n", err);
        etcd_fixture_cleanup(&s.f);
        return -1;
    }
    *state = &s;
    return 0;
}

static int group_teardown(void **state)
{
    suite *s = *state;
    if (s == NULL) return 0; /* the setup failed and cleaned up */
    etcd_client_close(s->c);
    etcd_fixture_cleanup(&s->f);
    return 0;
}

static void put_str(etcd_client *c, const char *k, const char *v, int64_t lease, int64_t *rev)
{
    int rc = etcd_put(c, k, strlen(k), v, strlen(v), lease, rev, err, sizeof(err));
    if (rc != 0) fprintf(stderr, "etcd_put %s: %s\n", k, err);
    assert_int_equal(rc, 0);
}

/* Range over every key starting with prefix. */
static void range_prefix(etcd_client *c, const char *prefix, int64_t limit, int keys_only,
                         etcd_range_result *r)
{
    char end[256];
    size_t n = strlen(prefix);
    memcpy(end, prefix, n);
    end[n - 1]++;
    int rc = etcd_range(c, prefix, n, end, n, limit, 0, keys_only, r, err, sizeof(err));
    if (rc != 0) fprintf(stderr, "etcd_range %s: %s\n", prefix, err);
    assert_int_equal(rc, 0);
}

static void assert_kv(const etcd_kv *kv, const char *key, const char *value)
{
    assert_int_equal(kv->key_len, strlen(key));
    assert_memory_equal(kv->key, key, kv->key_len);
    if (value == NULL) {
        assert_null(kv->value);
    } else {
        assert_non_null(kv->value);
        assert_int_equal(kv->value_len, strlen(value));
        assert_memory_equal(kv->value, value, kv->value_len);
    }
}

/* -- KV ------------------------------------------------------------------- */

/* A put is read back as the one key with its revisions and version; a
 * range with "\0" as the end returns every key from the start on, sorted;
 * a missing key is an empty result, not an error. */
static void test_put_and_range(void **state)
{
    suite *s = *state;
    etcd_range_result r;
    int64_t rev1 = 0, rev2 = 0, rev3 = 0;
    put_str(s->c, "/kv/a", "alpha", 0, &rev1);
    put_str(s->c, "/kv/b", "beta", 0, &rev2);
    put_str(s->c, "/kv/a", "alpha2", 0, &rev3);
    assert_true(rev1 > 0 && rev2 > rev1 && rev3 > rev2);

    assert_int_equal(etcd_range(s->c, "/kv/a", 5, NULL, 0, 0, 0, 0, &r, err, sizeof(err)), 0);
    assert_int_equal(r.n, 1);
    assert_kv(&r.kvs[0], "/kv/a", "alpha2");
    assert_int_equal(r.kvs[0].create_revision, rev1);
    assert_int_equal(r.kvs[0].mod_revision, rev3);
    assert_int_equal(r.kvs[0].version, 2);
    assert_int_equal(r.kvs[0].lease, 0);
    assert_int_equal(r.count, 1);
    assert_int_equal(r.more, 0);
    assert_true(r.revision >= rev3);
    etcd_range_result_free(&r);

    /* "\0": every key >= "/kv/" (nothing in this etcd sorts after /kv/b
     * but keys of later tests, so only the first two are checked) */
    assert_int_equal(etcd_range(s->c, "/kv/", 4, "\0", 1, 0, 0, 0, &r, err, sizeof(err)), 0);
    assert_true(r.n >= 2);
    assert_kv(&r.kvs[0], "/kv/a", "alpha2");
    assert_kv(&r.kvs[1], "/kv/b", "beta");
    etcd_range_result_free(&r);

    assert_int_equal(etcd_range(s->c, "/kv/none", 8, NULL, 0, 0, 0, 0, &r, err, sizeof(err)), 0);
    assert_int_equal(r.n, 0);
    assert_int_equal(r.count, 0);
    assert_null(r.kvs);
    etcd_range_result_free(&r);

    /* binary keys and values, an empty value */
    const uint8_t bk[] = {'/', 'b', 'i', 'n', 0, 0xff, 1};
    const uint8_t bv[] = {0, 1, 2, 0xfe, 0};
    assert_int_equal(etcd_put(s->c, bk, sizeof(bk), bv, sizeof(bv), 0, NULL, err, sizeof(err)), 0);
    assert_int_equal(etcd_range(s->c, bk, sizeof(bk), NULL, 0, 0, 0, 0, &r, err, sizeof(err)), 0);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.kvs[0].value_len, sizeof(bv));
    assert_memory_equal(r.kvs[0].value, bv, sizeof(bv));
    etcd_range_result_free(&r);
    assert_int_equal(etcd_put(s->c, "/empty", 6, NULL, 0, 0, NULL, err, sizeof(err)), 0);
    assert_int_equal(etcd_range(s->c, "/empty", 6, NULL, 0, 0, 0, 0, &r, err, sizeof(err)), 0);
    assert_int_equal(r.n, 1);
    assert_non_null(r.kvs[0].value);
    assert_int_equal(r.kvs[0].value_len, 0);
    etcd_range_result_free(&r);
}

/* limit cuts the answer and says there is more (count is the whole range);
 * keys_only leaves values out; a range at an older revision sees the store
 * as it was then. */
static void test_range_limit_keys_only_revision(void **state)
{
    suite *s = *state;
    etcd_range_result r;
    int64_t rev_before = 0;
    put_str(s->c, "/lim/1", "one", 0, NULL);
    put_str(s->c, "/lim/2", "two", 0, NULL);
    put_str(s->c, "/lim/3", "three", 0, &rev_before);
    put_str(s->c, "/lim/4", "four", 0, NULL);
    put_str(s->c, "/lim/1", "uno", 0, NULL);

    range_prefix(s->c, "/lim/", 2, 0, &r);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.more, 1);
    assert_int_equal(r.count, 4);
    assert_kv(&r.kvs[0], "/lim/1", "uno");
    assert_kv(&r.kvs[1], "/lim/2", "two");
    etcd_range_result_free(&r);

    range_prefix(s->c, "/lim/", 0, 1, &r);
    assert_int_equal(r.n, 4);
    assert_int_equal(r.more, 0);
    for (size_t i = 0; i < r.n; i++) assert_null(r.kvs[i].value);
    assert_kv(&r.kvs[3], "/lim/4", NULL);
    etcd_range_result_free(&r);

    assert_int_equal(etcd_range(s->c, "/lim/", 5, "/lim0", 5, 0, rev_before, 0, &r, err,
                                sizeof(err)), 0);
    assert_int_equal(r.n, 3);
    assert_kv(&r.kvs[0], "/lim/1", "one");
    assert_kv(&r.kvs[2], "/lim/3", "three");
    etcd_range_result_free(&r);
}

/* delete_range counts what it removed: one key, a prefix, nothing. */
static void test_delete_range_counts(void **state)
{
    suite *s = *state;
    int64_t deleted = -1;
    etcd_range_result r;
    put_str(s->c, "/del/a", "1", 0, NULL);
    put_str(s->c, "/del/b", "2", 0, NULL);
    put_str(s->c, "/del/c", "3", 0, NULL);
    assert_int_equal(etcd_delete_range(s->c, "/del/a", 6, NULL, 0, &deleted, err, sizeof(err)), 0);
    assert_int_equal(deleted, 1);
    assert_int_equal(etcd_delete_range(s->c, "/del/", 5, "/del0", 5, &deleted, err, sizeof(err)),
                     0);
    assert_int_equal(deleted, 2);
    assert_int_equal(etcd_delete_range(s->c, "/del/", 5, "/del0", 5, &deleted, err, sizeof(err)),
                     0);
    assert_int_equal(deleted, 0);
    assert_int_equal(etcd_delete_range(s->c, "/del/x", 6, NULL, 0, NULL, err, sizeof(err)), 0);
    range_prefix(s->c, "/del/", 0, 0, &r);
    assert_int_equal(r.n, 0);
    etcd_range_result_free(&r);
}

/* -- Txn ------------------------------------------------------------------ */

/* A txn whose compares hold runs the success ops; one whose compare fails
 * is a result (succeeded 0, no error) and returns the failure branch's
 * RANGE results in order. */
static void test_txn_success_and_failed_compare(void **state)
{
    suite *s = *state;
    etcd_txn_result t;
    etcd_range_result r;
    int64_t rev = 0;
    put_str(s->c, "/txn/k", "v1", 0, &rev);

    etcd_compare cmp = {ETCD_CMP_MOD, ETCD_CMP_EQUAL, "/txn/k", 6, rev, NULL, 0};
    etcd_op ok[] = {
        {ETCD_OP_PUT, "/txn/k", 6, NULL, 0, "v2", 2, 0},
        {ETCD_OP_PUT, "/txn/other", 10, NULL, 0, "o", 1, 0},
        {ETCD_OP_RANGE, "/txn/k", 6, NULL, 0, NULL, 0, 0},
    };
    etcd_op ko[] = {
        {ETCD_OP_RANGE, "/txn/k", 6, NULL, 0, NULL, 0, 0},
        {ETCD_OP_DELETE, "/txn/none", 9, NULL, 0, NULL, 0, 0},
        {ETCD_OP_RANGE, "/txn/", 5, "/txn0", 5, NULL, 0, 0},
    };
    assert_int_equal(etcd_txn(s->c, &cmp, 1, ok, 3, ko, 3, &t, err, sizeof(err)), 0);
    assert_int_equal(t.succeeded, 1);
    assert_true(t.revision > rev);
    assert_int_equal(t.n_ranges, 1);
    assert_int_equal(t.ranges[0].n, 1);
    assert_kv(&t.ranges[0].kvs[0], "/txn/k", "v2");
    int64_t after = t.revision;
    etcd_txn_result_free(&t);

    /* the same compare again: the key moved on, the compare fails */
    assert_int_equal(etcd_txn(s->c, &cmp, 1, ok, 3, ko, 3, &t, err, sizeof(err)), 0);
    assert_int_equal(t.succeeded, 0);
    assert_int_equal(t.revision, after);
    assert_int_equal(t.n_ranges, 2);
    assert_int_equal(t.ranges[0].n, 1);
    assert_kv(&t.ranges[0].kvs[0], "/txn/k", "v2");
    assert_int_equal(t.ranges[1].n, 2);
    assert_kv(&t.ranges[1].kvs[0], "/txn/k", "v2");
    assert_kv(&t.ranges[1].kvs[1], "/txn/other", "o");
    etcd_txn_result_free(&t);

    /* no compares, no failure branch: the success ops run */
    etcd_op del = {ETCD_OP_DELETE, "/txn/", 5, "/txn0", 5, NULL, 0, 0};
    assert_int_equal(etcd_txn(s->c, NULL, 0, &del, 1, NULL, 0, &t, err, sizeof(err)), 0);
    assert_int_equal(t.succeeded, 1);
    assert_int_equal(t.n_ranges, 0);
    etcd_txn_result_free(&t);
    range_prefix(s->c, "/txn/", 0, 0, &r);
    assert_int_equal(r.n, 0);
    etcd_range_result_free(&r);
}

static int txn_cmp_holds(etcd_client *c, const etcd_compare *cmp)
{
    etcd_txn_result t;
    int rc = etcd_txn(c, cmp, 1, NULL, 0, NULL, 0, &t, err, sizeof(err));
    if (rc != 0) fprintf(stderr, "etcd_txn: %s\n", err);
    assert_int_equal(rc, 0);
    int ok = t.succeeded;
    etcd_txn_result_free(&t);
    return ok;
}

/* Compares on VERSION 0 (create if absent), CREATE, MOD, VALUE and LEASE. */
static void test_txn_compare_targets(void **state)
{
    suite *s = *state;
    etcd_txn_result t;
    etcd_range_result r;
    const char *k = "/cmp/k";

    /* create-if-absent: the first wins, the second finds the key */
    etcd_compare absent = {ETCD_CMP_VERSION, ETCD_CMP_EQUAL, k, 6, 0, NULL, 0};
    etcd_op create1 = {ETCD_OP_PUT, k, 6, NULL, 0, "first", 5, 0};
    etcd_op create2 = {ETCD_OP_PUT, k, 6, NULL, 0, "second", 6, 0};
    assert_int_equal(etcd_txn(s->c, &absent, 1, &create1, 1, NULL, 0, &t, err, sizeof(err)), 0);
    assert_int_equal(t.succeeded, 1);
    int64_t created = t.revision;
    etcd_txn_result_free(&t);
    assert_int_equal(etcd_txn(s->c, &absent, 1, &create2, 1, NULL, 0, &t, err, sizeof(err)), 0);
    assert_int_equal(t.succeeded, 0);
    etcd_txn_result_free(&t);
    assert_int_equal(etcd_range(s->c, k, 6, NULL, 0, 0, 0, 0, &r, err, sizeof(err)), 0);
    assert_kv(&r.kvs[0], k, "first");
    etcd_range_result_free(&r);

    etcd_compare c;
    c = (etcd_compare){ETCD_CMP_VERSION, ETCD_CMP_GREATER, k, 6, 0, NULL, 0};
    assert_true(txn_cmp_holds(s->c, &c));
    c = (etcd_compare){ETCD_CMP_CREATE, ETCD_CMP_EQUAL, k, 6, created, NULL, 0};
    assert_true(txn_cmp_holds(s->c, &c));
    c = (etcd_compare){ETCD_CMP_MOD, ETCD_CMP_EQUAL, k, 6, created, NULL, 0};
    assert_true(txn_cmp_holds(s->c, &c));
    c = (etcd_compare){ETCD_CMP_MOD, ETCD_CMP_LESS, k, 6, created, NULL, 0};
    assert_false(txn_cmp_holds(s->c, &c));
    c = (etcd_compare){ETCD_CMP_MOD, ETCD_CMP_NOT_EQUAL, k, 6, created + 1, NULL, 0};
    assert_true(txn_cmp_holds(s->c, &c));
    c = (etcd_compare){ETCD_CMP_VALUE, ETCD_CMP_EQUAL, k, 6, 0, "first", 5};
    assert_true(txn_cmp_holds(s->c, &c));
    c = (etcd_compare){ETCD_CMP_VALUE, ETCD_CMP_EQUAL, k, 6, 0, "second", 6};
    assert_false(txn_cmp_holds(s->c, &c));

    /* LEASE: 0 until the key is put with a lease */
    int64_t lease = 0;
    assert_int_equal(etcd_lease_grant(s->c, 60, &lease, NULL, err, sizeof(err)), 0);
    c = (etcd_compare){ETCD_CMP_LEASE, ETCD_CMP_EQUAL, k, 6, 0, NULL, 0};
    assert_true(txn_cmp_holds(s->c, &c));
    put_str(s->c, k, "leased", lease, NULL);
    assert_false(txn_cmp_holds(s->c, &c));
    c = (etcd_compare){ETCD_CMP_LEASE, ETCD_CMP_EQUAL, k, 6, lease, NULL, 0};
    assert_true(txn_cmp_holds(s->c, &c));
    assert_int_equal(etcd_lease_revoke(s->c, lease, err, sizeof(err)), 0);
}

/* -- Lease ---------------------------------------------------------------- */

/* A granted lease holds keys; a keepalive restarts its TTL; revoking it
 * deletes its keys; renewing or revoking it afterwards is SMP_ENOTFOUND. */
static void test_lease_grant_keepalive_revoke(void **state)
{
    suite *s = *state;
    int64_t id = 0, ttl = 0;
    etcd_range_result r;
    assert_int_equal(etcd_lease_grant(s->c, 30, &id, &ttl, err, sizeof(err)), 0);
    assert_true(id > 0);
    assert_int_equal(ttl, 30);
    put_str(s->c, "/lease/a", "x", id, NULL);
    put_str(s->c, "/lease/b", "y", id, NULL);
    put_str(s->c, "/lease/free", "z", 0, NULL);
    assert_int_equal(etcd_range(s->c, "/lease/a", 8, NULL, 0, 0, 0, 0, &r, err, sizeof(err)), 0);
    assert_int_equal(r.kvs[0].lease, id);
    etcd_range_result_free(&r);

    int64_t renewed = 0;
    assert_int_equal(etcd_lease_keepalive(s->c, id, &renewed, err, sizeof(err)), 0);
    assert_int_equal(renewed, 30);
    assert_int_equal(etcd_lease_keepalive(s->c, id, NULL, err, sizeof(err)), 0);

    assert_int_equal(etcd_lease_revoke(s->c, id, err, sizeof(err)), 0);
    range_prefix(s->c, "/lease/", 0, 0, &r);
    assert_int_equal(r.n, 1);
    assert_kv(&r.kvs[0], "/lease/free", "z");
    etcd_range_result_free(&r);

    assert_int_equal(etcd_lease_keepalive(s->c, id, &renewed, err, sizeof(err)), SMP_ENOTFOUND);
    assert_int_equal(etcd_lease_revoke(s->c, id, err, sizeof(err)), SMP_ENOTFOUND);
    assert_non_null(strstr(err, "lease not found"));
    /* a lease etcd never granted */
    assert_int_equal(etcd_lease_keepalive(s->c, 0x7eadbeef, NULL, err, sizeof(err)),
                     SMP_ENOTFOUND);
}

/* A lease that is not renewed expires with its keys; its keepalive is
 * then SMP_ENOTFOUND. */
static void test_lease_expires(void **state)
{
    suite *s = *state;
    int64_t id = 0;
    etcd_range_result r;
    assert_int_equal(etcd_lease_grant(s->c, 1, &id, NULL, err, sizeof(err)), 0);
    put_str(s->c, "/expire/k", "v", id, NULL);
    long long deadline = now_ms() + 15000;
    int gone = 0;
    while (!gone && now_ms() < deadline) {
        assert_int_equal(etcd_range(s->c, "/expire/k", 9, NULL, 0, 0, 0, 0, &r, err,
                                    sizeof(err)), 0);
        gone = r.n == 0;
        etcd_range_result_free(&r);
        if (!gone) sleep_ms(100);
    }
    assert_true(gone);
    assert_int_equal(etcd_lease_keepalive(s->c, id, NULL, err, sizeof(err)), SMP_ENOTFOUND);
}

/* -- Watch ---------------------------------------------------------------- */

typedef struct seen_event {
    etcd_event_type type;
    char key[32];
    char value[32];
    int64_t mod_revision;
} seen_event;

/* Collect up to want events from w (bounded wait). Returns how many. */
static size_t watch_collect(etcd_watch *w, seen_event *out, size_t want)
{
    size_t n = 0;
    long long deadline = now_ms() + 10000;
    while (n < want && now_ms() < deadline) {
        etcd_watch_batch b;
        int rc = etcd_watch_next(w, 500, &b, err, sizeof(err));
        if (rc < 0) fprintf(stderr, "etcd_watch_next: %s\n", err);
        assert_true(rc >= 0);
        if (rc == 0) {
            assert_int_equal(b.n, 0);
            continue;
        }
        assert_true(b.n > 0);
        assert_true(b.revision > 0);
        for (size_t i = 0; i < b.n && n < want; i++, n++) {
            out[n].type = b.events[i].type;
            snprintf(out[n].key, sizeof(out[n].key), "%.*s", (int)b.events[i].kv.key_len,
                     (const char *)b.events[i].kv.key);
            snprintf(out[n].value, sizeof(out[n].value), "%.*s",
                     (int)b.events[i].kv.value_len,
                     b.events[i].kv.value ? (const char *)b.events[i].kv.value : "");
            out[n].mod_revision = b.events[i].kv.mod_revision;
        }
        etcd_watch_batch_free(&b);
    }
    return n;
}

/* A watch from a revision in the past replays the puts and deletes since
 * then in order, then delivers new ones; keys outside the range are not
 * seen; nothing new is a 0 return. */
static void test_watch_from_past_revision(void **state)
{
    suite *s = *state;
    etcd_watch *w = NULL;
    seen_event ev[8];
    int64_t first = 0;
    put_str(s->c, "/watch/a", "1", 0, &first);
    put_str(s->c, "/watch/b", "2", 0, NULL);
    put_str(s->c, "/elsewhere", "x", 0, NULL);
    assert_int_equal(etcd_delete_range(s->c, "/watch/a", 8, NULL, 0, NULL, err, sizeof(err)), 0);

    assert_int_equal(etcd_watch_open(s->c, "/watch/", 7, "/watch0", 7, first, &w, err,
                                     sizeof(err)), 0);
    assert_int_equal(watch_collect(w, ev, 3), 3);
    assert_int_equal(ev[0].type, ETCD_EVENT_PUT);
    assert_string_equal(ev[0].key, "/watch/a");
    assert_string_equal(ev[0].value, "1");
    assert_int_equal(ev[0].mod_revision, first);
    assert_int_equal(ev[1].type, ETCD_EVENT_PUT);
    assert_string_equal(ev[1].key, "/watch/b");
    assert_int_equal(ev[2].type, ETCD_EVENT_DELETE);
    assert_string_equal(ev[2].key, "/watch/a");
    assert_true(ev[2].mod_revision > ev[1].mod_revision);

    etcd_watch_batch b;
    assert_int_equal(etcd_watch_next(w, 200, &b, err, sizeof(err)), 0);
    assert_int_equal(b.n, 0);

    put_str(s->c, "/watch/c", "3", 0, NULL);
    assert_int_equal(watch_collect(w, ev, 1), 1);
    assert_string_equal(ev[0].key, "/watch/c");
    assert_string_equal(ev[0].value, "3");
    etcd_watch_close(w);

    /* from now on (0): only what happens after the open */
    assert_int_equal(etcd_watch_open(s->c, "/watch/", 7, "/watch0", 7, 0, &w, err, sizeof(err)),
                     0);
    put_str(s->c, "/watch/d", "4", 0, NULL);
    assert_int_equal(watch_collect(w, ev, 1), 1);
    assert_string_equal(ev[0].key, "/watch/d");
    etcd_watch_close(w);

    /* a future revision is fine: nothing until the store gets there */
    int64_t now = 0;
    put_str(s->c, "/watch/e", "5", 0, &now);
    assert_int_equal(etcd_watch_open(s->c, "/watch/", 7, "/watch0", 7, now + 2, &w, err,
                                     sizeof(err)), 0);
    put_str(s->c, "/watch/f", "6", 0, NULL);
    put_str(s->c, "/watch/g", "7", 0, NULL);
    assert_int_equal(watch_collect(w, ev, 1), 1);
    assert_string_equal(ev[0].key, "/watch/g");
    etcd_watch_close(w);
    etcd_watch_close(NULL);
}

/* A watch (or a range) from a revision that etcd_compact removed is
 * SMP_ERANGE; an open watch behind a compaction keeps working. */
static void test_watch_from_compacted_revision(void **state)
{
    suite *s = *state;
    etcd_watch *w = NULL;
    etcd_range_result r;
    int64_t old = 0, cut = 0;
    put_str(s->c, "/compact/a", "1", 0, &old);
    put_str(s->c, "/compact/a", "2", 0, NULL);
    put_str(s->c, "/compact/a", "3", 0, &cut);
    assert_int_equal(etcd_compact(s->c, cut, err, sizeof(err)), 0);

    assert_int_equal(etcd_watch_open(s->c, "/compact/", 9, "/compact0", 9, old, &w, err,
                                     sizeof(err)), SMP_ERANGE);
    assert_null(w);
    assert_non_null(strstr(err, "compacted"));
    assert_int_equal(etcd_range(s->c, "/compact/a", 10, NULL, 0, 0, old, 0, &r, err,
                                sizeof(err)), SMP_ERANGE);
    assert_int_equal(r.n, 0);
    /* compacting again at the same revision */
    assert_int_equal(etcd_compact(s->c, cut, err, sizeof(err)), SMP_ERANGE);

    /* from the compaction revision itself: fine */
    assert_int_equal(etcd_watch_open(s->c, "/compact/", 9, "/compact0", 9, cut, &w, err,
                                     sizeof(err)), 0);
    seen_event ev[2];
    assert_int_equal(watch_collect(w, ev, 1), 1);
    assert_string_equal(ev[0].value, "3");
    etcd_watch_close(w);
}

/* -- Maintenance and failover -------------------------------------------- */

/* Status names the member, its leader (itself, alone) and the revision. */
static void test_member_status(void **state)
{
    suite *s = *state;
    etcd_member_status st;
    int64_t rev = 0;
    put_str(s->c, "/status/k", "v", 0, &rev);
    assert_int_equal(etcd_member_status_get(s->c, etcd_fixture_endpoint(&s->f, 0), &st, err,
                                            sizeof(err)), 0);
    assert_true(st.member_id != 0);
    assert_int_equal(st.leader_id, st.member_id);
    assert_true(st.raft_term >= 1);
    assert_true(st.revision >= rev);
    assert_true(st.db_size > 0);

    /* an endpoint the client was not given, and one nobody listens on */
    int port = etcd_fixture_free_port();
    char dead[64];
    snprintf(dead, sizeof(dead), "127.0.0.1:%d", port);
    assert_int_equal(etcd_member_status_get(s->c, dead, &st, err, sizeof(err)), SMP_EIO);
    assert_non_null(strstr(err, dead));
    assert_int_equal(st.member_id, 0);
}

/* A client whose first endpoint is dead finds the live second one, for
 * reads and for writes (a write that never left may be retried). */
static void test_failover_from_dead_endpoint(void **state)
{
    suite *s = *state;
    char eps[160];
    etcd_client *c = NULL;
    etcd_range_result r;
    int64_t rev = 0;
    snprintf(eps, sizeof(eps), "127.0.0.1:%d,%s", etcd_fixture_free_port(),
             etcd_fixture_endpoint(&s->f, 0));
    etcd_client_options o = {.endpoints = eps, .timeout_ms = 1000};
    assert_int_equal(etcd_client_open(&o, &c, err, sizeof(err)), 0);
    assert_int_equal(etcd_put(c, "/fo/k", 5, "v", 1, 0, &rev, err, sizeof(err)), 0);
    assert_int_equal(etcd_range(c, "/fo/k", 5, NULL, 0, 0, 0, 0, &r, err, sizeof(err)), 0);
    assert_int_equal(r.n, 1);
    etcd_range_result_free(&r);
    etcd_txn_result t;
    etcd_op get = {ETCD_OP_RANGE, "/fo/k", 5, NULL, 0, NULL, 0, 0};
    assert_int_equal(etcd_txn(c, NULL, 0, &get, 1, NULL, 0, &t, err, sizeof(err)), 0);
    etcd_txn_result_free(&t);
    etcd_client_close(c);

    /* a fresh client starts on the dead member again: a txn fails over too */
    assert_int_equal(etcd_client_open(&o, &c, err, sizeof(err)), 0);
    assert_int_equal(etcd_txn(c, NULL, 0, &get, 1, NULL, 0, &t, err, sizeof(err)), 0);
    assert_int_equal(t.n_ranges, 1);
    etcd_txn_result_free(&t);
    etcd_watch *w = NULL;
    etcd_client_close(c);
    assert_int_equal(etcd_client_open(&o, &c, err, sizeof(err)), 0);
    assert_int_equal(etcd_watch_open(c, "/fo/", 4, "/fo0", 4, rev, &w, err, sizeof(err)), 0);
    seen_event ev[1];
    assert_int_equal(watch_collect(w, ev, 1), 1);
    etcd_watch_close(w);
    etcd_client_close(c);

    /* only dead members: SMP_EIO naming one */
    snprintf(eps, sizeof(eps), "127.0.0.1:%d", etcd_fixture_free_port());
    o.endpoints = eps;
    assert_int_equal(etcd_client_open(&o, &c, err, sizeof(err)), 0);
    assert_int_equal(etcd_range(c, "/fo/k", 5, NULL, 0, 0, 0, 0, &r, err, sizeof(err)), SMP_EIO);
    assert_non_null(strstr(err, eps));
    etcd_client_close(c);

    /* two dead members: the error names both attempts */
    char dead1[32], dead2[32];
    snprintf(dead1, sizeof(dead1), "127.0.0.1:%d", etcd_fixture_free_port());
    snprintf(dead2, sizeof(dead2), "127.0.0.1:%d", etcd_fixture_free_port());
    snprintf(eps, sizeof(eps), "%s,%s", dead1, dead2);
    assert_int_equal(etcd_client_open(&o, &c, err, sizeof(err)), 0);
    assert_int_equal(etcd_put(c, "/fo/k", 5, "v", 1, 0, NULL, err, sizeof(err)), SMP_EIO);
    assert_non_null(strstr(err, dead1));
    assert_non_null(strstr(err, dead2));
    etcd_client_close(c);
}

/* A call to a SIGSTOPped single member fails with SMP_EIO once the
 * deadline passes instead of hanging; after SIGCONT it is served again. */
static void test_paused_member_fails_in_time(void **state)
{
    suite *s = *state;
    etcd_client *c = NULL;
    etcd_range_result r;
    etcd_member_status st;
    etcd_client_options o = {.endpoints = etcd_fixture_endpoints(&s->f), .timeout_ms = 500};
    assert_int_equal(etcd_client_open(&o, &c, err, sizeof(err)), 0);
    assert_int_equal(etcd_range(c, "/p", 2, NULL, 0, 0, 0, 0, &r, err, sizeof(err)), 0);
    etcd_range_result_free(&r);

    assert_int_equal(etcd_fixture_pause(&s->f, 0), 0);
    assert_int_equal(etcd_range(c, "/p", 2, NULL, 0, 0, 0, 0, &r, err, sizeof(err)), SMP_EIO);
    assert_non_null(strstr(err, "DEADLINE_EXCEEDED"));
    assert_int_equal(etcd_put(c, "/p", 2, "v", 1, 0, NULL, err, sizeof(err)), SMP_EIO);
    assert_int_equal(etcd_member_status_get(c, etcd_fixture_endpoint(&s->f, 0), &st, err,
                                            sizeof(err)), SMP_EIO);
    etcd_watch *w = NULL;
    assert_int_equal(etcd_watch_open(c, "/p", 2, NULL, 0, 0, &w, err, sizeof(err)), SMP_EIO);
    assert_null(w);
    assert_int_equal(etcd_fixture_resume(&s->f, 0), 0);

    long long deadline = now_ms() + 10000;
    int rc = SMP_EIO;
    while (rc != 0 && now_ms() < deadline) {
        rc = etcd_range(c, "/p", 2, NULL, 0, 0, 0, 0, &r, err, sizeof(err));
        if (rc == 0) etcd_range_result_free(&r);
    }
    assert_int_equal(rc, 0);
    etcd_client_close(c);
}

/* Holds the relay HANDSHAKE_STALL_MS at the first bytes of the first
 * connection it relays: the HTTP/2 preface of a client's first connection
 * to the member, the handshake of a member that is slow to answer (just
 * resumed, a loaded machine, a long way off). */
#define HANDSHAKE_STALL_MS 1300
static void stall_first_handshake(void *ctx, unsigned conn, unsigned long long at,
                                  unsigned char *buf, size_t n)
{
    int *stalled = ctx;
    (void)buf;
    (void)n;
    if (conn == 1 && at == 0 && !*stalled) {
        *stalled = 1;
        sleep_ms(HANDSHAKE_STALL_MS);
    }
}

/* The only member answers its first connection's handshake after gRPC's
 * connect timeout (1 s): the connection attempt fails, and with no other
 * member to try the client attempts again within the call's deadline (3 s)
 * -- the call is served instead of failing with "no connection". */
static void test_slow_handshake_of_the_only_member_is_waited_for(void **state)
{
    suite *s = *state;
    fault_proxy *proxy = NULL;
    char relay[64];
    int stalled = 0;
    etcd_client *c = NULL;
    etcd_range_result r;
    assert_int_equal(fault_proxy_start(etcd_fixture_endpoints(&s->f), &proxy, relay,
                                       sizeof(relay)), 0);
    fault_proxy_set_filter(proxy, stall_first_handshake, &stalled);
    etcd_client_options o = {.endpoints = relay, .timeout_ms = 3000};
    assert_int_equal(etcd_client_open(&o, &c, err, sizeof(err)), 0);
    int rc = etcd_range(c, "/slow", 5, NULL, 0, 0, 0, 0, &r, err, sizeof(err));
    if (rc != 0) fail_msg("etcd_range through a slow handshake: %s: %s", smp_strerror(rc), err);
    etcd_range_result_free(&r);
    assert_true(stalled);
    etcd_client_close(c);
    fault_proxy_stop(proxy);
}

/* A watch on a member that stops answering (SIGSTOP) is broken by the
 * transport's keepalive: etcd_watch_next returns SMP_EIO (bounded wait)
 * instead of reporting "nothing new" forever; a new watch from the last
 * revision seen + 1 delivers what happened meanwhile. */
static void test_watch_on_paused_member_breaks(void **state)
{
    suite *s = *state;
    etcd_watch *w = NULL;
    etcd_watch_batch b;
    seen_event ev[1];
    int64_t rev = 0;
    put_str(s->c, "/wp/a", "1", 0, &rev);
    assert_int_equal(etcd_watch_open(s->c, "/wp/", 4, "/wp0", 4, rev, &w, err, sizeof(err)), 0);
    assert_int_equal(watch_collect(w, ev, 1), 1);
    assert_int_equal(etcd_fixture_pause(&s->f, 0), 0);
    long long deadline = now_ms() + 60000;
    int rc = 0;
    while (rc == 0 && now_ms() < deadline) rc = etcd_watch_next(w, 1000, &b, err, sizeof(err));
    assert_int_equal(rc, SMP_EIO);
    assert_int_equal(b.n, 0);
    /* broken stays broken */
    assert_int_equal(etcd_watch_next(w, 10, &b, err, sizeof(err)), SMP_EIO);
    etcd_watch_close(w);
    assert_int_equal(etcd_fixture_resume(&s->f, 0), 0);

    int64_t later = 0;
    deadline = now_ms() + 10000;
    rc = SMP_EIO;
    while (rc != 0 && now_ms() < deadline)
        rc = etcd_put(s->c, "/wp/b", 5, "2", 1, 0, &later, err, sizeof(err));
    assert_int_equal(rc, 0);
    /* The watch may meet the resumed member before its streams answer again
     * (seen under ASan on a loaded machine: SMP_EIO once the put had
     * passed): it is opened again until the same deadline. */
    rc = SMP_EIO;
    while (rc != 0 && now_ms() < deadline)
        rc = etcd_watch_open(s->c, "/wp/", 4, "/wp0", 4, rev + 1, &w, err, sizeof(err));
    if (rc != 0) fprintf(stderr, "watch open after the resume: %s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(watch_collect(w, ev, 1), 1);
    assert_string_equal(ev[0].key, "/wp/b");
    /* An attempt that timed out while etcd recovered may still have been
     * applied: the first event is that put or the one acknowledged. */
    assert_true(ev[0].mod_revision > rev && ev[0].mod_revision <= later);
    etcd_watch_close(w);
}

/* -- threads ---------------------------------------------------------------- */

#define THREADS 4
#define ROUNDS 25

typedef struct worker {
    etcd_client *c;
    int id;
    int failures;
    char err[512];
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < ROUNDS; i++) {
        char key[64], value[64];
        etcd_range_result r;
        etcd_txn_result t;
        snprintf(key, sizeof(key), "/mt/%d/%03d", w->id, i);
        snprintf(value, sizeof(value), "v%d.%d", w->id, i);
        if (etcd_put(w->c, key, strlen(key), value, strlen(value), 0, NULL, w->err,
                     sizeof(w->err)) != 0) {
            w->failures++;
            continue;
        }
        if (etcd_range(w->c, key, strlen(key), NULL, 0, 0, 0, 0, &r, w->err, sizeof(w->err)) != 0 ||
            r.n != 1 || strcmp((const char *)r.kvs[0].value, value) != 0)
            w->failures++;
        etcd_range_result_free(&r);
        etcd_compare cmp = {ETCD_CMP_VALUE, ETCD_CMP_EQUAL, key, strlen(key), 0, value,
                            strlen(value)};
        etcd_op del = {ETCD_OP_DELETE, key, strlen(key), NULL, 0, NULL, 0, 0};
        if (etcd_txn(w->c, &cmp, 1, &del, 1, NULL, 0, &t, w->err, sizeof(w->err)) != 0 ||
            !t.succeeded)
            w->failures++;
        etcd_txn_result_free(&t);
    }
    return NULL;
}

/* One client used by several threads at once: every call is answered and
 * nothing crosses between threads. */
static void test_threads_share_a_client(void **state)
{
    suite *s = *state;
    pthread_t th[THREADS];
    worker w[THREADS];
    etcd_range_result r;
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){s->c, i, 0, ""};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        if (w[i].failures) fprintf(stderr, "worker %d: %s\n", i, w[i].err);
        assert_int_equal(w[i].failures, 0);
    }
    range_prefix(s->c, "/mt/", 0, 1, &r);
    assert_int_equal(r.n, 0);
    etcd_range_result_free(&r);
}

/* -- a fake member that answers badly ------------------------------------------ */

/* A gRPC server in this process standing in for an etcd member: every call,
 * whatever its method, reads one request and gets `answer` (no message when
 * NULL) and `status`. Runs on its own thread with its own queue. */
typedef struct fake_member {
    grpc_server *server;
    grpc_completion_queue *cq;
    pthread_t thread;
    char endpoint[64];
    const uint8_t *answer;
    size_t answer_len;
    grpc_status_code status;
    const char *details;
    int calls;
} fake_member;

#define FAKE_NEW ((void *)1)
#define FAKE_DONE ((void *)2)
#define FAKE_SHUTDOWN ((void *)3)

static void fake_serve_one(fake_member *fm, grpc_call *call)
{
    grpc_op ops[5];
    grpc_byte_buffer *req = NULL, *resp = NULL;
    grpc_slice details = grpc_slice_from_copied_string(fm->details);
    int cancelled = 0;
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &req;
    if (fm->answer != NULL) {
        grpc_slice body = grpc_slice_from_copied_buffer((const char *)fm->answer, fm->answer_len);
        resp = grpc_raw_byte_buffer_create(&body, 1);
        grpc_slice_unref(body);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = resp;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = fm->status;
    ops[n++].data.send_status_from_server.status_details = &details;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &cancelled;
    if (grpc_call_start_batch(call, ops, n, FAKE_DONE, NULL) == GRPC_CALL_OK) {
        grpc_event ev;
        do {
            ev = grpc_completion_queue_next(fm->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        } while (ev.type == GRPC_OP_COMPLETE && ev.tag != FAKE_DONE);
    }
    if (req) grpc_byte_buffer_destroy(req);
    if (resp) grpc_byte_buffer_destroy(resp);
    grpc_slice_unref(details);
}

static void *fake_main(void *arg)
{
    fake_member *fm = arg;
    for (;;) {
        grpc_call *call = NULL;
        grpc_call_details cd;
        grpc_metadata_array md;
        grpc_call_details_init(&cd);
        grpc_metadata_array_init(&md);
        int requested = grpc_server_request_call(fm->server, &call, &cd, &md, fm->cq, fm->cq,
                                                 FAKE_NEW) == GRPC_CALL_OK;
        grpc_event ev = grpc_completion_queue_next(fm->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                                   NULL);
        int stop = !requested || ev.type != GRPC_OP_COMPLETE || ev.tag == FAKE_SHUTDOWN ||
                   !ev.success;
        if (!stop) {
            fm->calls++;
            fake_serve_one(fm, call);
        }
        if (call) grpc_call_unref(call);
        grpc_call_details_destroy(&cd);
        grpc_metadata_array_destroy(&md);
        if (stop) break;
    }
    return NULL;
}

static void fake_start(fake_member *fm, const void *answer, size_t answer_len,
                       grpc_status_code status, const char *details)
{
    memset(fm, 0, sizeof(*fm));
    fm->answer = answer;
    fm->answer_len = answer_len;
    fm->status = status;
    fm->details = details;
    grpc_init();
    fm->cq = grpc_completion_queue_create_for_next(NULL);
    fm->server = grpc_server_create(NULL, NULL);
    grpc_server_register_completion_queue(fm->server, fm->cq, NULL);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(fm->server, "127.0.0.1:0", creds);
    grpc_server_credentials_release(creds);
    assert_true(port > 0);
    snprintf(fm->endpoint, sizeof(fm->endpoint), "127.0.0.1:%d", port);
    grpc_server_start(fm->server);
    assert_int_equal(pthread_create(&fm->thread, NULL, fake_main, fm), 0);
}

static void fake_stop(fake_member *fm)
{
    grpc_server_shutdown_and_notify(fm->server, fm->cq, FAKE_SHUTDOWN);
    grpc_server_cancel_all_calls(fm->server);
    pthread_join(fm->thread, NULL);
    /* the thread stopped at the first of the two events; drain the rest */
    grpc_completion_queue_shutdown(fm->cq);
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(fm->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                                   NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    }
    grpc_server_destroy(fm->server);
    grpc_completion_queue_destroy(fm->cq);
    grpc_shutdown();
}

/* Every call on a member that answers bytes that do not decode. */
static void expect_every_call(const char *endpoint, int rc_kv, int rc_lease, int rc_watch)
{
    etcd_client *c = NULL;
    etcd_range_result r;
    etcd_txn_result t;
    etcd_member_status st;
    etcd_watch *w = NULL;
    int64_t id = 0;
    etcd_client_options o = {.endpoints = endpoint, .timeout_ms = 2000};
    assert_int_equal(etcd_client_open(&o, &c, err, sizeof(err)), 0);
    assert_int_equal(etcd_range(c, "k", 1, NULL, 0, 0, 0, 0, &r, err, sizeof(err)), rc_kv);
    assert_int_equal(r.n, 0);
    assert_int_equal(etcd_put(c, "k", 1, "v", 1, 0, NULL, err, sizeof(err)), rc_kv);
    assert_int_equal(etcd_delete_range(c, "k", 1, NULL, 0, NULL, err, sizeof(err)), rc_kv);
    etcd_op get = {ETCD_OP_RANGE, "k", 1, NULL, 0, NULL, 0, 0};
    assert_int_equal(etcd_txn(c, NULL, 0, &get, 1, NULL, 0, &t, err, sizeof(err)), rc_kv);
    assert_int_equal(t.n_ranges, 0);
    assert_int_equal(etcd_compact(c, 5, err, sizeof(err)), rc_kv);
    assert_int_equal(etcd_lease_grant(c, 5, &id, NULL, err, sizeof(err)), rc_kv);
    assert_int_equal(etcd_lease_keepalive(c, 7, NULL, err, sizeof(err)), rc_lease);
    assert_int_equal(etcd_lease_revoke(c, 7, err, sizeof(err)), rc_lease);
    assert_int_equal(etcd_member_status_get(c, endpoint, &st, err, sizeof(err)), rc_kv);
    assert_int_equal(etcd_watch_open(c, "k", 1, NULL, 0, 0, &w, err, sizeof(err)), rc_watch);
    assert_null(w);
    etcd_client_close(c);
}

/* Bytes from the network never crash the client: an answer that does not
 * decode is SMP_EPROTO, an OK status without an answer too, and a status
 * is mapped (NOT_FOUND -> SMP_ENOTFOUND, OUT_OF_RANGE -> SMP_ERANGE,
 * UNAVAILABLE -> SMP_EIO, anything else SMP_EPROTO) with its text in err. */
static void test_bad_answers(void **state)
{
    (void)state;
    fake_member fm;
    /* field 1, length 5, one byte: truncated */
    static const uint8_t garbage[] = {0x0a, 0x05, 0x01};
    fake_start(&fm, garbage, sizeof(garbage), GRPC_STATUS_OK, "");
    expect_every_call(fm.endpoint, SMP_EPROTO, SMP_EPROTO, SMP_EPROTO);
    assert_non_null(strstr(err, "does not decode"));
    fake_stop(&fm);
    assert_int_equal(fm.calls, 10); /* each call reached the fake once: no retry */

    fake_start(&fm, NULL, 0, GRPC_STATUS_OK, "");
    expect_every_call(fm.endpoint, SMP_EPROTO, SMP_EPROTO, SMP_EIO);
    fake_stop(&fm);

    fake_start(&fm, NULL, 0, GRPC_STATUS_NOT_FOUND, "etcdserver: requested lease not found");
    expect_every_call(fm.endpoint, SMP_ENOTFOUND, SMP_ENOTFOUND, SMP_ENOTFOUND);
    assert_non_null(strstr(err, "requested lease not found"));
    fake_stop(&fm);

    fake_start(&fm, NULL, 0, GRPC_STATUS_OUT_OF_RANGE, "mvcc: required revision has been compacted");
    expect_every_call(fm.endpoint, SMP_ERANGE, SMP_ERANGE, SMP_ERANGE);
    fake_stop(&fm);

    fake_start(&fm, NULL, 0, GRPC_STATUS_FAILED_PRECONDITION, "etcdserver: something odd");
    expect_every_call(fm.endpoint, SMP_EPROTO, SMP_EPROTO, SMP_EPROTO);
    assert_non_null(strstr(err, "FAILED_PRECONDITION"));
    assert_non_null(strstr(err, fm.endpoint));
    fake_stop(&fm);

    fake_start(&fm, NULL, 0, GRPC_STATUS_UNAVAILABLE, "etcdserver: no leader");
    expect_every_call(fm.endpoint, SMP_EIO, SMP_EIO, SMP_EIO);
    fake_stop(&fm);
}

/* -- bad arguments ----------------------------------------------------------- */

static void test_bad_arguments(void **state)
{
    suite *s = *state;
    etcd_client *c = s->c, *out = NULL;
    etcd_range_result r;
    etcd_txn_result t;
    etcd_watch *w = NULL;
    etcd_watch_batch b;
    etcd_member_status st;
    int64_t id;

    /* open */
    etcd_client_options o = {.endpoints = NULL, .timeout_ms = 0};
    assert_int_equal(etcd_client_open(NULL, &out, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_client_open(&o, &out, err, sizeof(err)), SMP_EINVAL);
    const char *bad_eps[] = {"", ",", "127.0.0.1", "127.0.0.1:", ":2379", "127.0.0.1:0",
                             "127.0.0.1:65536", "127.0.0.1:12a", "h:1,,h:2", "h:1,",
                             "http://127.0.0.1:2379", "127.0.0.1:123456"};
    for (size_t i = 0; i < sizeof(bad_eps) / sizeof(bad_eps[0]); i++) {
        o.endpoints = bad_eps[i];
        assert_int_equal(etcd_client_open(&o, &out, err, sizeof(err)), SMP_EINVAL);
        assert_null(out);
    }
    o.endpoints = "127.0.0.1:1";
    assert_int_equal(etcd_client_open(&o, NULL, err, sizeof(err)), SMP_EINVAL);
    o.endpoints = " 127.0.0.1:1 , localhost:2 ";
    assert_int_equal(etcd_client_open(&o, &out, NULL, 0), 0);
    etcd_client_close(out);
    etcd_client_close(NULL);

    /* range */
    assert_int_equal(etcd_range(NULL, "k", 1, NULL, 0, 0, 0, 0, &r, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_range(c, NULL, 1, NULL, 0, 0, 0, 0, &r, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_range(c, "k", 0, NULL, 0, 0, 0, 0, &r, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_range(c, "k", 1, "", 0, 0, 0, 0, &r, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_range(c, "k", 1, NULL, 0, -1, 0, 0, &r, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_range(c, "k", 1, NULL, 0, 0, -1, 0, &r, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_range(c, "k", 1, NULL, 0, 0, 0, 0, NULL, err, sizeof(err)), SMP_EINVAL);

    /* put, delete, compact */
    assert_int_equal(etcd_put(NULL, "k", 1, "v", 1, 0, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_put(c, NULL, 1, "v", 1, 0, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_put(c, "k", 0, "v", 1, 0, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_put(c, "k", 1, NULL, 1, 0, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_put(c, "k", 1, "v", 1, -1, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_delete_range(NULL, "k", 1, NULL, 0, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_delete_range(c, NULL, 1, NULL, 0, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_delete_range(c, "k", 0, NULL, 0, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_delete_range(c, "k", 1, "", 0, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_compact(NULL, 1, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_compact(c, 0, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_compact(c, -5, err, sizeof(err)), SMP_EINVAL);

    /* txn */
    etcd_compare good_cmp = {ETCD_CMP_VERSION, ETCD_CMP_EQUAL, "k", 1, 0, NULL, 0};
    etcd_op good_op = {ETCD_OP_RANGE, "k", 1, NULL, 0, NULL, 0, 0};
    assert_int_equal(etcd_txn(NULL, &good_cmp, 1, &good_op, 1, NULL, 0, &t, err, sizeof(err)),
                     SMP_EINVAL);
    assert_int_equal(etcd_txn(c, &good_cmp, 1, &good_op, 1, NULL, 0, NULL, err, sizeof(err)),
                     SMP_EINVAL);
    assert_int_equal(etcd_txn(c, NULL, 1, &good_op, 1, NULL, 0, &t, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_txn(c, &good_cmp, 1, NULL, 1, NULL, 0, &t, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_txn(c, &good_cmp, 1, &good_op, 1, NULL, 1, &t, err, sizeof(err)),
                     SMP_EINVAL);
    /* counts that would wrap around when added */
    assert_int_equal(etcd_txn(c, NULL, 0, &good_op, SIZE_MAX, &good_op, 2, &t, err, sizeof(err)),
                     SMP_EINVAL);
    assert_int_equal(etcd_txn(c, &good_cmp, SIZE_MAX, NULL, 0, NULL, 0, &t, err, sizeof(err)),
                     SMP_EINVAL);
    etcd_compare bad_cmps[] = {
        {(etcd_cmp_target)5, ETCD_CMP_EQUAL, "k", 1, 0, NULL, 0},
        {ETCD_CMP_VERSION, (etcd_cmp_result)4, "k", 1, 0, NULL, 0},
        {ETCD_CMP_VERSION, ETCD_CMP_EQUAL, NULL, 1, 0, NULL, 0},
        {ETCD_CMP_VERSION, ETCD_CMP_EQUAL, "k", 0, 0, NULL, 0},
        {ETCD_CMP_VALUE, ETCD_CMP_EQUAL, "k", 1, 0, NULL, 3},
    };
    for (size_t i = 0; i < sizeof(bad_cmps) / sizeof(bad_cmps[0]); i++) {
        etcd_compare two[2] = {good_cmp, bad_cmps[i]};
        assert_int_equal(etcd_txn(c, two, 2, &good_op, 1, NULL, 0, &t, err, sizeof(err)),
                         SMP_EINVAL);
        assert_non_null(strstr(err, "compare 1"));
    }
    etcd_op bad_ops[] = {
        {(etcd_op_type)3, "k", 1, NULL, 0, NULL, 0, 0},
        {ETCD_OP_RANGE, NULL, 1, NULL, 0, NULL, 0, 0},
        {ETCD_OP_RANGE, "k", 0, NULL, 0, NULL, 0, 0},
        {ETCD_OP_DELETE, "k", 1, "", 0, NULL, 0, 0},
        {ETCD_OP_PUT, "k", 1, NULL, 0, NULL, 2, 0},
        {ETCD_OP_PUT, "k", 1, NULL, 0, "v", 1, -1},
        {ETCD_OP_PUT, "k", 1, "l", 1, "v", 1, 0},
    };
    for (size_t i = 0; i < sizeof(bad_ops) / sizeof(bad_ops[0]); i++) {
        assert_int_equal(etcd_txn(c, NULL, 0, &good_op, 1, &bad_ops[i], 1, &t, err, sizeof(err)),
                         SMP_EINVAL);
        assert_non_null(strstr(err, "failure op 0"));
        assert_int_equal(etcd_txn(c, NULL, 0, &bad_ops[i], 1, NULL, 0, &t, err, sizeof(err)),
                         SMP_EINVAL);
    }
    /* etcd's own refusal of an argument: two puts of one key */
    etcd_op dup[2] = {{ETCD_OP_PUT, "/dup", 4, NULL, 0, "a", 1, 0},
                      {ETCD_OP_PUT, "/dup", 4, NULL, 0, "b", 1, 0}};
    assert_int_equal(etcd_txn(c, NULL, 0, dup, 2, NULL, 0, &t, err, sizeof(err)), SMP_EINVAL);
    assert_non_null(strstr(err, "INVALID_ARGUMENT"));

    /* lease */
    assert_int_equal(etcd_lease_grant(NULL, 10, &id, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_lease_grant(c, 0, &id, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_lease_grant(c, -1, &id, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_lease_grant(c, 10, NULL, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_lease_keepalive(NULL, 1, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_lease_keepalive(c, 0, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_lease_keepalive(c, -1, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_lease_revoke(NULL, 1, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_lease_revoke(c, 0, err, sizeof(err)), SMP_EINVAL);

    /* watch */
    assert_int_equal(etcd_watch_open(NULL, "k", 1, NULL, 0, 0, &w, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_watch_open(c, NULL, 1, NULL, 0, 0, &w, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_watch_open(c, "k", 0, NULL, 0, 0, &w, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_watch_open(c, "k", 1, "", 0, 0, &w, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_watch_open(c, "k", 1, NULL, 0, -1, &w, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_watch_open(c, "k", 1, NULL, 0, 0, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_watch_next(NULL, 10, &b, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_watch_open(c, "k", 1, NULL, 0, 0, &w, err, sizeof(err)), 0);
    assert_int_equal(etcd_watch_next(w, 10, NULL, err, sizeof(err)), SMP_EINVAL);
    etcd_watch_close(w);

    /* status */
    assert_int_equal(etcd_member_status_get(NULL, "127.0.0.1:1", &st, err, sizeof(err)),
                     SMP_EINVAL);
    assert_int_equal(etcd_member_status_get(c, NULL, &st, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_member_status_get(c, "127.0.0.1:1", NULL, err, sizeof(err)),
                     SMP_EINVAL);
    assert_int_equal(etcd_member_status_get(c, "nohost", &st, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(etcd_member_status_get(c, "h:1,h:2", &st, err, sizeof(err)), SMP_EINVAL);

    /* the frees take NULL */
    etcd_range_result_free(NULL);
    etcd_txn_result_free(NULL);
    etcd_watch_batch_free(NULL);
}

/* -- a 3-member cluster --------------------------------------------------------- */

/* With all three endpoints, the client keeps reading and writing after
 * any one member is killed (the one it was using first, here), and a
 * watch opened afterwards sees the writes; the member comes back. */
static int three_setup(void **state)
{
    static etcd_fixture f;
    if (etcd_fixture_start(&f, "three", 3, START_MS) < 0) return -1;
    *state = &f;
    return 0;
}

static int three_teardown(void **state)
{
    if (*state != NULL) etcd_fixture_cleanup(*state);
    return 0;
}

/* A client whose first endpoint is a SIGSTOPped follower: a read waits out
 * the deadline there and is answered by the next member in the same call;
 * a txn that reached the paused member is not repeated elsewhere (SMP_EIO,
 * "may have been applied") and the next txn starts on another member. */
static void test_paused_follower(void **state)
{
    etcd_fixture *f = *state;
    etcd_member_status st;
    etcd_client *c = NULL;
    etcd_range_result r;
    etcd_txn_result t;
    char eps[256];
    size_t paused = 0;

    assert_int_equal(etcd_client_open(&(etcd_client_options){.endpoints = etcd_fixture_endpoints(f), .timeout_ms = 2000}, &c,
                                      err, sizeof(err)), 0);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(etcd_member_status_get(c, etcd_fixture_endpoint(f, i), &st, err,
                                                sizeof(err)), 0);
        if (st.member_id != st.leader_id) paused = i;
    }
    etcd_client_close(c);
    assert_true(st.leader_id != 0);
    snprintf(eps, sizeof(eps), "%s,%s,%s", etcd_fixture_endpoint(f, paused),
             etcd_fixture_endpoint(f, (paused + 1) % 3), etcd_fixture_endpoint(f, (paused + 2) % 3));
    etcd_client_options o = {.endpoints = eps, .timeout_ms = 1000};
    etcd_client *c2 = NULL;
    assert_int_equal(etcd_client_open(&o, &c, err, sizeof(err)), 0);
    assert_int_equal(etcd_client_open(&o, &c2, err, sizeof(err)), 0);
    /* both connected to the follower: it comes first */
    put_str(c, "/pf/k", "v", 0, NULL);
    put_str(c2, "/pf/k", "v", 0, NULL);

    assert_int_equal(etcd_fixture_pause(f, paused), 0);
    assert_int_equal(etcd_range(c2, "/pf/k", 5, NULL, 0, 0, 0, 0, &r, err, sizeof(err)), 0);
    assert_int_equal(r.n, 1);
    etcd_range_result_free(&r);
    etcd_client_close(c2);

    etcd_op put = {ETCD_OP_PUT, "/pf/k", 5, NULL, 0, "w", 1, 0};
    assert_int_equal(etcd_txn(c, NULL, 0, &put, 1, NULL, 0, &t, err, sizeof(err)), SMP_EIO);
    assert_non_null(strstr(err, "may have been applied"));
    assert_non_null(strstr(err, etcd_fixture_endpoint(f, paused)));
    assert_int_equal(etcd_txn(c, NULL, 0, &put, 1, NULL, 0, &t, err, sizeof(err)), 0);
    assert_int_equal(t.succeeded, 1);
    etcd_txn_result_free(&t);
    assert_int_equal(etcd_fixture_resume(f, paused), 0);
    etcd_client_close(c);
}

static void test_three_members_survive_a_kill(void **state)
{
    etcd_fixture *f = *state;
    etcd_client *c = NULL;
    etcd_range_result r;
    etcd_txn_result t;
    int64_t rev = 0;
    etcd_client_options o = {.endpoints = etcd_fixture_endpoints(f), .timeout_ms = 1000};
    assert_int_equal(etcd_client_open(&o, &c, err, sizeof(err)), 0);
    put_str(c, "/ha/before", "1", 0, &rev);

    assert_int_equal(etcd_fixture_kill(f, 0), 0);
    /* Writes may meet a leader election (the killed member may have been
     * the leader): retried, bounded. */
    long long deadline = now_ms() + 15000;
    int rc = SMP_EIO;
    while (rc != 0 && now_ms() < deadline) {
        etcd_compare absent = {ETCD_CMP_VERSION, ETCD_CMP_EQUAL, "/ha/after", 9, 0, NULL, 0};
        etcd_op put = {ETCD_OP_PUT, "/ha/after", 9, NULL, 0, "2", 1, 0};
        rc = etcd_txn(c, &absent, 1, &put, 1, NULL, 0, &t, err, sizeof(err));
        if (rc == 0) etcd_txn_result_free(&t);
        else sleep_ms(100);
    }
    if (rc != 0) fprintf(stderr, "txn after the kill: %s\n", err);
    assert_int_equal(rc, 0);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(etcd_range(c, "/ha/", 4, "/ha0", 4, 0, 0, 0, &r, err, sizeof(err)), 0);
        assert_int_equal(r.n, 2);
        etcd_range_result_free(&r);
        put_str(c, "/hz/loop", "x", 0, NULL);
    }
    int64_t lease = 0;
    assert_int_equal(etcd_lease_grant(c, 10, &lease, NULL, err, sizeof(err)), 0);
    assert_int_equal(etcd_lease_keepalive(c, lease, NULL, err, sizeof(err)), 0);
    etcd_watch *w = NULL;
    assert_int_equal(etcd_watch_open(c, "/ha/", 4, "/ha0", 4, rev, &w, err, sizeof(err)), 0);
    seen_event ev[2];
    assert_int_equal(watch_collect(w, ev, 2), 2);
    assert_string_equal(ev[0].key, "/ha/before");
    assert_string_equal(ev[1].key, "/ha/after");
    etcd_watch_close(w);
    etcd_member_status st;
    assert_int_equal(etcd_member_status_get(c, etcd_fixture_endpoint(f, 1), &st, err,
                                            sizeof(err)), 0);
    assert_true(st.leader_id != 0);

    /* the killed member restarts on its data and catches up */
    assert_int_equal(etcd_fixture_restart(f, 0, START_MS), 0);
    deadline = now_ms() + 10000;
    int64_t seen = 0;
    while (now_ms() < deadline) {
        if (etcd_member_status_get(c, etcd_fixture_endpoint(f, 0), &st, err, sizeof(err)) == 0 &&
            (seen = st.revision) >= rev + 11)
            break;
        sleep_ms(100);
    }
    assert_true(seen >= rev + 11);
    etcd_client_close(c);
}

int main(void)
{
    const struct CMUnitTest one_member[] = {
        cmocka_unit_test(test_put_and_range),
        cmocka_unit_test(test_range_limit_keys_only_revision),
        cmocka_unit_test(test_delete_range_counts),
        cmocka_unit_test(test_txn_success_and_failed_compare),
        cmocka_unit_test(test_txn_compare_targets),
        cmocka_unit_test(test_lease_grant_keepalive_revoke),
        cmocka_unit_test(test_lease_expires),
        cmocka_unit_test(test_watch_from_past_revision),
        cmocka_unit_test(test_watch_from_compacted_revision),
        cmocka_unit_test(test_member_status),
        cmocka_unit_test(test_failover_from_dead_endpoint),
        cmocka_unit_test(test_threads_share_a_client),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_paused_member_fails_in_time),
        cmocka_unit_test(test_watch_on_paused_member_breaks),
        cmocka_unit_test(test_slow_handshake_of_the_only_member_is_waited_for),
    };
    const struct CMUnitTest no_etcd[] = {
        cmocka_unit_test(test_bad_answers),
    };
    const struct CMUnitTest three_members[] = {
        cmocka_unit_test(test_paused_follower),
        cmocka_unit_test(test_three_members_survive_a_kill),
    };
    int failed = cmocka_run_group_tests_name("etcd client, 1 member", one_member, group_setup,
                                             group_teardown);
    failed += cmocka_run_group_tests_name("etcd client, a fake member", no_etcd, NULL, NULL);
    failed += cmocka_run_group_tests_name("etcd client, 3 members", three_members, three_setup,
                                          three_teardown);
    return failed;
}
