/* obj_test_store.h -- the object store driven the master's way, shared by
 * the unit programs of host_shim/master/obj_store*.c (test_obj_store,
 * test_obj_records, test_obj_snapshots, test_obj_random, test_obj_replicas,
 * test_obj_hold, test_obj_loading, test_obj_zones), and two states built
 * that way.
 *
 * A guard the test controls, stores created with it, every durable change as
 * prepare + apply (with an optional log of the records applied, replayed
 * into a new store), puts run start to end, snapshots saved to memory and
 * states compared by their snapshots (deterministic), memory use and
 * statistics; a malformed record checked to change nothing. Header-only
 * (static functions); the unit test glob picks up test_*.c only. */
#ifndef OBJ_TEST_STORE_H
#define OBJ_TEST_STORE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "host_records.pb-c.h"
#include "obj_store.h"

#define TEST_OWNER "owner_plugin" /* the plugin that owns managed groups here */

/* The guard the store asks about managed groups, played by the test: what it
 * answers, whether the owner is there, and what it was asked. */
typedef struct test_guard {
    int veto;          /* answer SMP_GUARD_VETO to everything */
    int loaded;        /* the owning plugin has a guard (asked) */
    int calls;
    int calls_by_reason[SMP_GUARD_REASON_MAX + 1];
    int owner_absent;  /* every group owner is absent or disabled */
    char last_owner[64]; /* the owner of the last call ("" for none) */
} test_guard;

/* obj_guard_ops.check over a test_guard: counts the call by reason and
 * owner when loaded; allows when not loaded (*asked 0). */
static inline int test_guard_check(void *ctx,
                                   const char *owner,
                                   const smp_guard_request *req,
                                   int *asked)
{
    test_guard *g = ctx;
    *asked = g->loaded ? 1 : 0;
    if (!g->loaded) return SMP_GUARD_ALLOW;
    g->calls++;
    snprintf(g->last_owner, sizeof(g->last_owner), "%s", owner ? owner : "");
    if (req->reason >= 1 && req->reason <= SMP_GUARD_REASON_MAX) g->calls_by_reason[req->reason]++;
    return g->veto ? SMP_GUARD_VETO : SMP_GUARD_ALLOW;
}

static inline int test_guard_active(void *ctx, const char *owner)
{
    (void)owner;
    return !((test_guard *)ctx)->owner_absent;
}

/* A new empty store asking g (NULL: no guard); fails the test if it
 * cannot be created. */
static inline obj_store *new_store(test_guard *g)
{
    obj_store *st = NULL;
    obj_guard_ops ops = {test_guard_check, test_guard_active, g};
    assert_int_equal(obj_store_create(&st, g ? &ops : NULL), SMP_OK);
    return st;
}

/* A log of every record applied, for replay tests. */
typedef struct rec_log {
    obj_record recs[512];
    size_t n;
} rec_log;

static rec_log *g_log; /* when set, apply_rec keeps a copy */

/* Apply r, which must succeed, and free it (a copy of its bytes goes to
 * g_log when set). */
static inline void apply_rec(obj_store *st, obj_record *r)
{
    assert_int_equal(obj_apply_record(st, r->type, r->encver, r->buf, r->len), SMP_OK);
    if (g_log) {
        assert_true(g_log->n < 512);
        obj_record *c = &g_log->recs[g_log->n++];
        *c = *r;
        c->held = NULL; /* the log keeps the bytes only */
        c->buf = malloc(r->len ? r->len : 1);
        assert_non_null(c->buf);
        memcpy(c->buf, r->buf, r->len);
    }
    obj_record_free(r);
}

/* A store with one segment "s0" of node "n0" (8,192 bytes) and one
 * complete 500-byte object "k" (no guard). */
static inline obj_store *store_with_object(void)
{
    obj_store *st = NULL;
    obj_record r = {0};
    uint8_t sum[32] = {1};
    assert_int_equal(obj_store_create(&st, NULL), SMP_OK);
    assert_int_equal(obj_prepare_segment_mount(st, "s0", "n0", 8192, &r), SMP_OK);
    apply_rec(st, &r);
    obj_put_params p = {"k", 500, SMP_DATA_KV, "", "", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_OK);
    assert_int_equal(obj_prepare_put_end(st, "k", sum, 1, &r), SMP_OK);
    apply_rec(st, &r);
    return st;
}

static inline void apply_list(obj_store *st, obj_record_list *l)
{
    for (size_t i = 0; i < l->n; i++) apply_rec(st, &l->recs[i]);
    obj_record_list_free(l);
}

/* Mount segment id of cap bytes on node, prepare + apply. */
static inline void mount(obj_store *st, const char *id, const char *node, uint64_t cap)
{
    obj_record r = {0};
    assert_int_equal(obj_prepare_segment_mount(st, id, node, cap, &r), SMP_OK);
    apply_rec(st, &r);
}

/* Set or clear group's managed flag as TEST_OWNER, prepare + apply. */
static inline void set_managed(obj_store *st, const char *group, int managed)
{
    obj_record r = {0};
    assert_int_equal(obj_prepare_group_managed(st, group, TEST_OWNER, managed, &r), SMP_OK);
    apply_rec(st, &r);
}

/* A checksum made from key's bytes (not a digest: enough to tell keys
 * apart). */
static inline void sum_of(const char *key, uint8_t out[32])
{
    memset(out, 0, 32);
    size_t n = strlen(key);
    memcpy(out, key, n < 32 ? n : 32);
}

/* Put start + put end + apply, the master's order. */
static inline int put_full(obj_store *st,
                    const char *key,
                    uint64_t size,
                    const char *group,
                    const char *tenant,
                    uint64_t now)
{
    obj_put_params p = {key, size, SMP_DATA_KV, group, tenant, 0, 0, NULL, 0};
    int rc = obj_put_start(st, &p, now, NULL);
    if (rc < 0) return rc;
    uint8_t sum[32];
    sum_of(key, sum);
    obj_record r = {0};
    assert_int_equal(obj_prepare_put_end(st, key, sum, now, &r), SMP_OK);
    apply_rec(st, &r);
    return SMP_OK;
}

/* Remove key (guarded), which must succeed, prepare + apply. */
static inline void remove_key(obj_store *st, const char *key, uint64_t now)
{
    obj_record r = {0};
    assert_int_equal(obj_prepare_remove(st, key, now, &r), SMP_OK);
    apply_rec(st, &r);
}

/* A growing byte buffer: a snapshot saved to memory. */
typedef struct buf {
    uint8_t *p;
    size_t n;
    size_t cap;
} buf;

static inline int buf_write(void *ctx, const void *data, size_t len)
{
    buf *b = ctx;
    if (b->n + len > b->cap) {
        size_t ncap = (b->n + len) * 2 + 64;
        uint8_t *np = realloc(b->p, ncap);
        if (!np) return SMP_ENOMEM;
        b->p = np;
        b->cap = ncap;
    }
    memcpy(b->p + b->n, data, len);
    b->n += len;
    return 0;
}

/* The store's snapshot (the caller frees .p). */
static inline buf save(const obj_store *st)
{
    buf b = {0};
    assert_int_equal(obj_store_save(st, buf_write, &b), SMP_OK);
    return b;
}

/* a and b have the same snapshot bytes, memory use and object, byte and
 * replica counts. */
static inline void assert_same_state(const obj_store *a, const obj_store *b)
{
    buf x = save(a), y = save(b);
    assert_int_equal(x.n, y.n);
    assert_memory_equal(x.p, y.p, x.n);
    free(x.p);
    free(y.p);
    uint64_t ua, ca, ub, cb;
    obj_memory_usage(a, &ua, &ca);
    obj_memory_usage(b, &ub, &cb);
    assert_int_equal(ua, ub);
    assert_int_equal(ca, cb);
    obj_stats sa, sb;
    obj_store_stats(a, &sa);
    obj_store_stats(b, &sb);
    assert_memory_equal(sa.objects_by_type, sb.objects_by_type, sizeof(sa.objects_by_type));
    assert_memory_equal(sa.bytes_by_type, sb.bytes_by_type, sizeof(sa.bytes_by_type));
    assert_memory_equal(sa.replicas_by_kind, sb.replicas_by_kind, sizeof(sa.replicas_by_kind));
}

/* The bytes in use in the store's segments (obj_memory_usage). */
static inline uint64_t used_of(const obj_store *st)
{
    uint64_t u;
    obj_memory_usage(st, &u, NULL);
    return u;
}

/* Free the records a log kept and empty it. */
static inline void free_log(rec_log *log)
{
    for (size_t i = 0; i < log->n; i++) obj_record_free(&log->recs[i]);
    log->n = 0;
}

/* Apply records [from, to) of log to st (NULL: a new store), each of which
 * must succeed; returns st. */
static inline obj_store *replay_log(const rec_log *log, size_t from, size_t to, obj_store *st)
{
    if (!st) st = new_store(NULL);
    for (size_t i = from; i < to; i++)
        assert_int_equal(obj_apply_record(st, log->recs[i].type, log->recs[i].encver,
                                          log->recs[i].buf, log->recs[i].len), SMP_OK);
    return st;
}

/* A new store that replays every record of log has st's state; the log is
 * emptied (free_log). */
static inline void assert_log_replays(const obj_store *st, rec_log *log)
{
    obj_store *a = replay_log(log, 0, log->n, NULL);
    assert_same_state(st, a);
    free_log(log);
    obj_store_destroy(a);
}

/* Apply a record of type and payload that must be refused with want, and
 * check the store's snapshot is byte for byte what it was. */
static inline void expect_rejected(obj_store *st,
                                   uint16_t type,
                                   const void *payload,
                                   size_t len,
                                   int want)
{
    buf before = save(st);
    assert_int_equal(obj_apply_record(st, type, OBJ_REC_ENCVER, payload, len), want);
    buf after = save(st);
    assert_int_equal(before.n, after.n);
    assert_memory_equal(before.p, after.p, before.n);
    free(before.p);
    free(after.p);
}

/* Pack m into a new buffer *out (the caller frees it) of *len bytes. */
static inline void pack_object(const Hostrec__ObjectRecord *m, uint8_t **out, size_t *len)
{
    *len = hostrec__object_record__get_packed_size(m);
    *out = malloc(*len ? *len : 1);
    assert_non_null(*out);
    hostrec__object_record__pack(m, *out);
}

/* A store with kv/done (logged in *log when log is not NULL) and two puts
 * in flight, not logged: kv/open-1 (300 bytes, tenant tA) and kv/open-2
 * (5000 bytes, group g, pinned); their ranges in *t1 and *t2. */
static inline obj_store *two_open_puts(rec_log *log, obj_put_ticket *t1, obj_put_ticket *t2)
{
    g_log = log;
    obj_store *a = new_store(NULL);
    mount(a, "s0", "n0", 1 << 16);
    assert_int_equal(put_full(a, "kv/done", 1000, "", "", 10), SMP_OK);
    g_log = NULL;
    obj_put_params p1 = {"kv/open-1", 300, SMP_DATA_KV, "", "tA", 0, 0, NULL, 7};
    obj_put_params p2 = {"kv/open-2", 5000, SMP_DATA_WEIGHT, "g", "", 1, 0, NULL, 7};
    assert_int_equal(obj_put_start(a, &p1, 20, t1), SMP_OK);
    assert_int_equal(obj_put_start(a, &p2, 20, t2), SMP_OK);
    return a;
}

/* Build a varied state through prepare + apply, logging the records. */
static inline obj_store *build_logged_state(rec_log *log)
{
    g_log = log;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 1 << 16);
    mount(st, "s1", "n1", 1 << 12);
    set_managed(st, "rev", 1);
    set_managed(st, "empty-managed", 1);
    test_guard allow = {.veto = 0, .loaded = 1};
    obj_guard_ops ops = {test_guard_check, test_guard_active, &allow};
    obj_store_set_guard(st, &ops);
    char key[32];
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "obj/%02d", i);
        assert_int_equal(put_full(st, key, (uint64_t)(i * 100), i < 6 ? "rev" : (i < 10 ? "g" : ""),
                                  i % 3 ? "tA" : "tB", (uint64_t)(1000 - i)), SMP_OK);
    }
    obj_store_set_guard(st, NULL);
    obj_record r = {0};
    assert_int_equal(obj_prepare_set_pin(st, "obj/07", 1, &r), SMP_OK);
    apply_rec(st, &r);
    obj_replica reps[3];
    size_t n;
    assert_int_equal(obj_get_replica_list(st, "obj/08", 2000, 0, reps, 3, &n), SMP_OK);
    reps[1] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_PENDING, "n1", NULL, 0, 800, "/c/8"};
    assert_int_equal(obj_prepare_set_replicas(st, "obj/08", reps, 2, &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(obj_reserve_replica(st, "obj/09", "n1", 2500, NULL), SMP_OK);
    assert_int_equal(obj_prepare_add_replica(st, "obj/09", NULL, &r), SMP_OK);
    apply_rec(st, &r);
    remove_key(st, "obj/15", 3000);
    obj_put_params p = {"obj/16", 10, SMP_DATA_METADATA, "", "", 0, 1, NULL, 0};
    assert_int_equal(obj_put_start(st, &p, 3000, NULL), SMP_OK);
    uint8_t sum[32] = {1};
    assert_int_equal(obj_prepare_put_end(st, "obj/16", sum, 3001, &r), SMP_OK);
    apply_rec(st, &r);
    p.key = "revoked";
    assert_int_equal(obj_put_start(st, &p, 3000, NULL), SMP_OK);
    assert_int_equal(obj_prepare_put_revoke(st, "revoked", &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(obj_prepare_segment_update(st, "s0", 1 << 17, &r), SMP_OK);
    apply_rec(st, &r);
    set_managed(st, "g", 1);
    set_managed(st, "g", 0);
    g_log = NULL;
    return st;
}

#endif /* OBJ_TEST_STORE_H */
