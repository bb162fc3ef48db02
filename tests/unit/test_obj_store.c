/* test_obj_store.c -- unit tests of the master's object metadata state
 * (host_shim/obj_store.c): puts, the segment allocator, leases, removal with
 * and without a guard around managed groups, eviction planning, stale put
 * cleanup, prefix listing, OpLog records (encode, apply, idempotence,
 * malformed payloads), snapshots (round trip, invalid input), adding a
 * memory replica to a complete object (reservations, add-replica records
 * and their races) and the replica queries for the node data plane.
 *
 * Every durable change goes through the same path the master uses: prepare a
 * record, then apply it. State equality is checked by comparing snapshots,
 * which are deterministic. */
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

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

#define TEST_OWNER "owner_plugin" /* the plugin that owns managed groups here */

typedef struct test_guard {
    int veto;          /* answer SMP_GUARD_VETO to everything */
    int loaded;        /* the owning plugin has a guard (asked) */
    int calls;
    int calls_by_reason[SMP_GUARD_REASON_MAX + 1];
    int owner_absent;  /* every group owner is absent or disabled */
    char last_owner[64]; /* the owner of the last call ("" for none) */
} test_guard;

static int test_guard_check(void *ctx, const char *owner, const smp_guard_request *req, int *asked)
{
    test_guard *g = ctx;
    *asked = g->loaded ? 1 : 0;
    if (!g->loaded) return SMP_GUARD_ALLOW;
    g->calls++;
    snprintf(g->last_owner, sizeof(g->last_owner), "%s", owner ? owner : "");
    if (req->reason >= 1 && req->reason <= SMP_GUARD_REASON_MAX) g->calls_by_reason[req->reason]++;
    return g->veto ? SMP_GUARD_VETO : SMP_GUARD_ALLOW;
}

static int test_guard_active(void *ctx, const char *owner)
{
    (void)owner;
    return !((test_guard *)ctx)->owner_absent;
}

static obj_store *new_store(test_guard *g)
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

static void apply_rec(obj_store *st, obj_record *r)
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

static void apply_list(obj_store *st, obj_record_list *l)
{
    for (size_t i = 0; i < l->n; i++) apply_rec(st, &l->recs[i]);
    obj_record_list_free(l);
}

static void mount(obj_store *st, const char *id, const char *node, uint64_t cap)
{
    obj_record r = {0};
    assert_int_equal(obj_prepare_segment_mount(st, id, node, cap, &r), SMP_OK);
    apply_rec(st, &r);
}

static void set_managed(obj_store *st, const char *group, int managed)
{
    obj_record r = {0};
    assert_int_equal(obj_prepare_group_managed(st, group, TEST_OWNER, managed, &r), SMP_OK);
    apply_rec(st, &r);
}

static void sum_of(const char *key, uint8_t out[32])
{
    memset(out, 0, 32);
    size_t n = strlen(key);
    memcpy(out, key, n < 32 ? n : 32);
}

/* Put start + put end + apply, the master's order. */
static int put_full(obj_store *st,
                    const char *key,
                    uint64_t size,
                    const char *group,
                    const char *tenant,
                    uint64_t now)
{
    obj_put_params p = {key, size, SMP_DATA_KV, group, tenant, 0, 0, NULL};
    int rc = obj_put_start(st, &p, now, NULL);
    if (rc < 0) return rc;
    uint8_t sum[32];
    sum_of(key, sum);
    obj_record r = {0};
    assert_int_equal(obj_prepare_put_end(st, key, sum, now, &r), SMP_OK);
    apply_rec(st, &r);
    return SMP_OK;
}

static void remove_key(obj_store *st, const char *key, uint64_t now)
{
    obj_record r = {0};
    assert_int_equal(obj_prepare_remove(st, key, now, &r), SMP_OK);
    apply_rec(st, &r);
}

typedef struct buf {
    uint8_t *p;
    size_t n;
    size_t cap;
} buf;

static int buf_write(void *ctx, const void *data, size_t len)
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

static buf save(const obj_store *st)
{
    buf b = {0};
    assert_int_equal(obj_store_save(st, buf_write, &b), SMP_OK);
    return b;
}

static void assert_same_state(const obj_store *a, const obj_store *b)
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

static uint64_t used_of(const obj_store *st)
{
    uint64_t u;
    obj_memory_usage(st, &u, NULL);
    return u;
}

/* ------------------------------------------------------------------------ */
/* Puts and the allocator                                                     */
/* ------------------------------------------------------------------------ */

/* A put reserves memory at start, becomes a complete object only when its
 * PUT_END record is applied, and a revoke gives the range back. */
static void test_put_start_end_revoke(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "seg0", "node0", 4096);

    obj_put_params p = {"a/1", 100, SMP_DATA_WEIGHT, "", "t1", 0, 0, NULL};
    obj_put_ticket t;
    assert_int_equal(obj_put_start(st, &p, 10, &t), SMP_OK);
    assert_string_equal(t.segment, "seg0");
    assert_string_equal(t.node, "node0");
    assert_int_equal(t.offset, 0);
    assert_int_equal(t.length, 100);
    assert_int_equal(used_of(st), 128);
    assert_false(obj_exists(st, "a/1"));
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(st, "a/1", &info), SMP_OK);
    assert_int_equal(info.complete, 0);
    /* A second start of the same key while in flight is refused. */
    assert_int_equal(obj_put_start(st, &p, 11, NULL), SMP_EBUSY);

    uint8_t sum[32];
    memset(sum, 0xab, sizeof(sum));
    obj_record r = {0};
    assert_int_equal(obj_prepare_put_end(st, "a/1", sum, 20, &r), SMP_OK);
    assert_int_equal(r.type, OBJ_REC_PUT_END);
    assert_false(obj_exists(st, "a/1")); /* prepare changes nothing */
    apply_rec(st, &r);
    assert_true(obj_exists(st, "a/1"));
    assert_int_equal(obj_object_info(st, "a/1", &info), SMP_OK);
    assert_int_equal(info.complete, 1);
    assert_int_equal(info.size, 100);
    assert_int_equal(info.data_type, SMP_DATA_WEIGHT);
    assert_int_equal(info.memory_replicas_readable, 1);
    assert_memory_equal(info.checksum, sum, 32);
    assert_int_equal(used_of(st), 128);
    uint64_t objs, bytes;
    obj_tenant_usage(st, "t1", &objs, &bytes);
    assert_int_equal(objs, 1);
    assert_int_equal(bytes, 100);

    /* Complete key: EEXIST without overwrite. */
    assert_int_equal(obj_put_start(st, &p, 30, NULL), SMP_EEXIST);

    /* Revoke. */
    obj_put_params q = {"b", 1, SMP_DATA_KV, NULL, NULL, 0, 0, NULL};
    assert_int_equal(obj_put_start(st, &q, 30, &t), SMP_OK);
    assert_int_equal(t.offset, 128);
    assert_int_equal(used_of(st), 192);
    assert_int_equal(obj_prepare_put_revoke(st, "b", &r), SMP_OK);
    assert_int_equal(r.type, OBJ_REC_PUT_REVOKE);
    apply_rec(st, &r);
    assert_int_equal(used_of(st), 128);
    assert_int_equal(obj_prepare_put_end(st, "b", sum, 31, &r), SMP_ENOTFOUND);
    assert_int_equal(obj_prepare_put_revoke(st, "b", &r), SMP_ENOTFOUND);
    assert_int_equal(obj_object_info(st, "b", &info), SMP_ENOTFOUND);

    /* Overwrite: the new bytes replace the old range. */
    p.overwrite = 1;
    p.size = 200;
    assert_int_equal(obj_put_start(st, &p, 40, &t), SMP_OK);
    assert_int_equal(used_of(st), 128 + 256);
    assert_int_equal(obj_prepare_put_end(st, "a/1", sum, 41, &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(used_of(st), 256);
    assert_int_equal(obj_object_info(st, "a/1", &info), SMP_OK);
    assert_int_equal(info.size, 200);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.objects_by_type[SMP_DATA_WEIGHT], 1);
    assert_int_equal(s.bytes_by_type[SMP_DATA_WEIGHT], 200);
    assert_int_equal(s.puts_in_flight, 0);
    obj_store_destroy(st);
}

/* fsck's view of a segment: the unoccupied ranges in offset order; a hold
 * takes only a wholly unoccupied, aligned range (counted as used, nothing
 * is allocated there) until it is released. */
static void test_fsck_free_ranges_and_holds(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s", "n", 640);
    for (int i = 0; i < 4; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(put_full(st, key, 64, "", "", (uint64_t)i), SMP_OK);
    }
    remove_key(st, "k1", 5);
    uint64_t *v = NULL, used = 0, cap = 0;
    size_t n = 0;
    assert_int_equal(obj_segment_free_ranges(st, "s", &v, &n, &used, &cap), SMP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(v[0], 64);
    assert_int_equal(v[1], 64);
    assert_int_equal(v[2], 256);
    assert_int_equal(v[3], 384);
    assert_int_equal(used, 192);
    assert_int_equal(cap, 640);
    free(v);
    assert_int_equal(obj_segment_free_ranges(st, "none", &v, &n, NULL, NULL), SMP_ENOTFOUND);
    assert_int_equal(obj_segment_hold_range(st, "s", 0, 64), SMP_ESTATE);   /* k0 */
    assert_int_equal(obj_segment_hold_range(st, "s", 64, 128), SMP_ESTATE); /* runs into k2 */
    assert_int_equal(obj_segment_hold_range(st, "s", 70, 64), SMP_EINVAL);
    assert_int_equal(obj_segment_hold_range(st, "s", 64, 64), SMP_OK);
    assert_int_equal(used_of(st), 256);
    obj_put_params p = {"x", 64, SMP_DATA_KV, "", "", 0, 0, NULL};
    obj_put_ticket t;
    assert_int_equal(obj_put_start(st, &p, 6, &t), SMP_OK);
    assert_true(t.offset >= 256); /* not in the held range */
    obj_segment_release_range(st, "s", 64, 64);
    assert_int_equal(used_of(st), 256);
    obj_store_destroy(st);
}

/* First fit with coalescing: fill a segment, free a run, reuse it; a
 * fragmented segment refuses a request larger than every hole. */
static void test_allocator_fill_free_coalesce_enospc(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s", "n", 64 * 10 + 5); /* rounded down to 640 */
    uint64_t used, cap;
    obj_memory_usage(st, &used, &cap);
    assert_int_equal(cap, 640);
    char key[16];
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(put_full(st, key, i == 0 ? 0 : 64, "", "", (uint64_t)i), SMP_OK);
    }
    assert_int_equal(used_of(st), 640);
    assert_int_equal(put_full(st, "more", 1, "", "", 20), SMP_ENOSPC);

    remove_key(st, "k2", 21);
    remove_key(st, "k3", 21);
    remove_key(st, "k4", 21);
    obj_put_params p = {"big", 192, SMP_DATA_KV, "", "", 0, 0, NULL};
    obj_put_ticket t;
    assert_int_equal(obj_put_start(st, &p, 22, &t), SMP_OK);
    assert_int_equal(t.offset, 128);
    obj_record r = {0};
    assert_int_equal(obj_prepare_put_revoke(st, "big", &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(used_of(st), 640 - 192);

    /* Holes of 192 (k2..k4), then 64 (k6) and 64 (k8). */
    remove_key(st, "k6", 23);
    remove_key(st, "k8", 23);
    p.size = 200; /* needs 256: no hole is that large */
    assert_int_equal(obj_put_start(st, &p, 24, NULL), SMP_ENOSPC);
    remove_key(st, "k7", 25); /* 6..8 coalesce to 192; still < 256 */
    assert_int_equal(obj_put_start(st, &p, 26, NULL), SMP_ENOSPC);
    remove_key(st, "k5", 27); /* 2..8 coalesce to 448 */
    assert_int_equal(obj_put_start(st, &p, 28, &t), SMP_OK);
    assert_int_equal(t.offset, 128);
    assert_int_equal(obj_prepare_put_revoke(st, "big", &r), SMP_OK);
    apply_rec(st, &r);

    /* A segment grows, and shrinks only over its free tail: below the end
     * of the last occupied range (k9 ends at 640) is refused; the free tail
     * of the old capacity coalesces with new space. */
    uint64_t tail = 0;
    assert_int_equal(obj_segment_tail_used(st, "s", &tail), SMP_OK);
    assert_int_equal(tail, 640);
    assert_int_equal(obj_prepare_segment_update(st, "s", 128, &r), SMP_ERANGE);
    assert_int_equal(obj_prepare_segment_update(st, "s", 0, &r), SMP_ERANGE);
    obj_record grow_small = {0};
    assert_int_equal(obj_prepare_segment_update(st, "s", 1280, &grow_small), SMP_OK);
    assert_int_equal(obj_prepare_segment_update(st, "s", 6400, &r), SMP_OK);
    apply_rec(st, &r);
    obj_memory_usage(st, &used, &cap);
    assert_int_equal(cap, 6400);
    apply_rec(st, &grow_small); /* the tail past 1280 is free: cut */
    obj_memory_usage(st, &used, &cap);
    assert_int_equal(cap, 1280);
    assert_int_equal(obj_prepare_segment_update(st, "s", 6400, &r), SMP_OK);
    apply_rec(st, &r);
    obj_memory_usage(st, &used, &cap);
    assert_int_equal(cap, 6400);
    p.size = 64 * 90;
    assert_int_equal(obj_put_start(st, &p, 29, &t), SMP_OK);
    assert_int_equal(t.offset, 640);
    assert_int_equal(obj_prepare_put_revoke(st, "big", &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(obj_prepare_segment_update(st, "nope", 640, &r), SMP_ENOTFOUND);

    /* Puts go to the segment with the most free bytes. */
    mount(st, "t", "n2", 1 << 20);
    p.size = 10;
    assert_int_equal(obj_put_start(st, &p, 30, &t), SMP_OK);
    assert_string_equal(t.segment, "t");
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Reads and leases                                                          */
/* ------------------------------------------------------------------------ */

/* A read lease from get-replica-list blocks removal until it expires. */
static void test_replica_list_lease_blocks_remove(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s", "n", 4096);
    assert_int_equal(put_full(st, "k", 100, "", "", 1), SMP_OK);
    obj_replica reps[4];
    size_t n = 0;
    assert_int_equal(obj_get_replica_list(st, "k", 1000, 500, reps, 4, &n), SMP_OK);
    assert_int_equal(n, 1);
    assert_int_equal(reps[0].kind, SMP_REPLICA_MEMORY);
    assert_int_equal(reps[0].status, OBJ_REPLICA_COMPLETE);
    assert_string_equal(reps[0].segment, "s");
    assert_string_equal(reps[0].node, "n");
    assert_int_equal(reps[0].length, 100);
    assert_int_equal(obj_get_replica_list(st, "nope", 1000, 500, reps, 4, &n), SMP_ENOTFOUND);

    obj_record r = {0};
    assert_int_equal(obj_prepare_remove(st, "k", 1200, &r), SMP_EBUSY);
    /* Overwriting a leased object is refused too. */
    obj_put_params p = {"k", 1, SMP_DATA_KV, "", "", 0, 1, NULL};
    assert_int_equal(obj_put_start(st, &p, 1200, NULL), SMP_EBUSY);
    /* Prefix removal skips it. */
    obj_record_list l = {0};
    obj_remove_report rep;
    assert_int_equal(obj_prepare_remove_prefix(st, "", 1200, &l, &rep), SMP_OK);
    assert_int_equal(l.n, 0);
    assert_int_equal(rep.skipped_leased, 1);
    assert_int_equal(obj_prepare_remove(st, "k", 1500, &r), SMP_OK);
    apply_rec(st, &r);
    assert_false(obj_exists(st, "k"));
    assert_int_equal(obj_prepare_remove(st, "k", 1500, &r), SMP_ENOTFOUND);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Managed groups, removal and the guard                                     */
/* ------------------------------------------------------------------------ */

/* g1 (managed) has a member outside "w/"; g2 (managed) lies wholly under it;
 * g3 is an ordinary group; "w/plain" is in no group. */
static obj_store *managed_fixture(test_guard *g)
{
    obj_store *st = new_store(g);
    mount(st, "s", "n", 1 << 20);
    set_managed(st, "g1", 1);
    set_managed(st, "g2", 1);
    /* Fill managed groups with the plugin "present" so the puts pass. */
    int saved = g ? g->loaded : 0, veto = g ? g->veto : 0;
    if (g) {
        g->loaded = 1;
        g->veto = 0;
    }
    test_guard tmp = {.veto = 0, .loaded = 1};
    obj_guard_ops allow = {test_guard_check, test_guard_active, &tmp};
    obj_store_set_guard(st, &allow);
    assert_int_equal(put_full(st, "w/g1/0", 10, "g1", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "w/g1/1", 10, "g1", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "z/g1/2", 10, "g1", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "w/g2/0", 10, "g2", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "w/g2/1", 10, "g2", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "w/g3/0", 10, "g3", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "w/plain", 10, "", "", 1), SMP_OK);
    if (g) {
        obj_guard_ops ops = {test_guard_check, test_guard_active, g};
        obj_store_set_guard(st, &ops);
        g->loaded = saved;
        g->veto = veto;
    } else {
        obj_store_set_guard(st, NULL);
    }
    return st;
}

/* With no plugin guard, the host refuses single-key removal of a managed
 * member, never removes part of a managed group by prefix, and removes a
 * managed group only whole. */
static void test_remove_prefix_managed_group_without_guard(void **state)
{
    (void)state;
    obj_store *st = managed_fixture(NULL);
    obj_record r = {0};
    assert_int_equal(obj_prepare_remove(st, "w/g1/0", 5, &r), SMP_EVETO);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.host_refusals[SMP_GUARD_REMOVE_KEY], 1);
    assert_int_equal(s.guard_vetoes[SMP_GUARD_REMOVE_KEY], 0);

    obj_record_list l = {0};
    obj_remove_report rep;
    assert_int_equal(obj_prepare_remove_prefix(st, "w/", 5, &l, &rep), SMP_OK);
    assert_int_equal(rep.removed, 4); /* g2 whole, g3 member, plain */
    assert_int_equal(rep.skipped_partial, 3);
    apply_list(st, &l);
    assert_int_equal(obj_group_count(st, "g1"), 3);
    assert_true(obj_exists(st, "w/g1/0"));
    assert_true(obj_exists(st, "w/g1/1"));
    assert_int_equal(obj_group_count(st, "g2"), 0);
    assert_true(obj_group_is_managed(st, "g2")); /* the flag outlives members */
    assert_false(obj_exists(st, "w/plain"));
    assert_false(obj_exists(st, "w/g3/0"));
    obj_store_stats(st, &s);
    assert_int_equal(s.host_refusals[SMP_GUARD_REMOVE_PATTERN], 3);
    obj_store_destroy(st);
}

/* A vetoing guard: nothing it is asked about is removed; counted as plugin
 * vetoes, not host refusals. */
static void test_remove_prefix_with_veto_guard(void **state)
{
    (void)state;
    test_guard g = {.veto = 1, .loaded = 1};
    obj_store *st = managed_fixture(&g);
    obj_record r = {0};
    assert_int_equal(obj_prepare_remove(st, "w/g1/0", 5, &r), SMP_EVETO);
    assert_int_equal(obj_prepare_remove(st, "w/plain", 5, &r), SMP_EVETO);
    obj_record_list l = {0};
    obj_remove_report rep;
    assert_int_equal(obj_prepare_remove_prefix(st, "w/", 5, &l, &rep), SMP_OK);
    assert_int_equal(l.n, 0);
    assert_int_equal(rep.removed, 0);
    assert_int_equal(rep.skipped_partial, 3);
    assert_int_equal(rep.skipped_vetoed, 2 + 2); /* g2 whole, g3, plain */
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.guard_vetoes[SMP_GUARD_REMOVE_KEY], 2);
    assert_true(s.guard_vetoes[SMP_GUARD_REMOVE_PATTERN] >= 3);
    assert_int_equal(s.host_refusals[SMP_GUARD_REMOVE_KEY], 0);
    assert_int_equal(obj_group_count(st, "g1"), 3);
    assert_int_equal(obj_group_count(st, "g2"), 2);
    obj_store_destroy(st);
}

/* An allowing guard lets single members go, but a prefix still never takes
 * part of a managed group. */
static void test_remove_prefix_with_allow_guard(void **state)
{
    (void)state;
    test_guard g = {.veto = 0, .loaded = 1};
    obj_store *st = managed_fixture(&g);
    obj_record_list l = {0};
    obj_remove_report rep;
    assert_int_equal(obj_prepare_remove_prefix(st, "w/", 5, &l, &rep), SMP_OK);
    assert_int_equal(rep.removed, 4);
    assert_int_equal(rep.skipped_partial, 3);
    assert_true(g.calls_by_reason[SMP_GUARD_REMOVE_PATTERN] >= 4);
    apply_list(st, &l);
    assert_int_equal(obj_group_count(st, "g1"), 3);
    assert_int_equal(obj_group_count(st, "g2"), 0);

    /* The plugin may remove a single member explicitly. */
    remove_key(st, "z/g1/2", 6);
    assert_int_equal(obj_group_count(st, "g1"), 2);
    assert_int_equal(g.calls_by_reason[SMP_GUARD_REMOVE_KEY], 1);

    /* Now g1 lies wholly under "w/" and goes whole. */
    assert_int_equal(obj_prepare_remove_prefix(st, "w/", 7, &l, &rep), SMP_OK);
    assert_int_equal(rep.removed, 2);
    assert_int_equal(l.n, 1);
    apply_list(st, &l);
    assert_int_equal(obj_group_count(st, "g1"), 0);
    obj_store_destroy(st);
}

/* A managed group whose owner is absent or disabled: the host refuses every
 * guarded action on its members -- removal by key, by prefix (even of the
 * whole group), remove-all, put into, overwrite and eviction -- without
 * asking any guard, and nothing changes; objects in no managed group stay
 * plain KV. */
static void test_owner_absent_protects_groups(void **state)
{
    (void)state;
    test_guard g = {.veto = 0, .loaded = 1}; /* a guard that would allow all */
    obj_store *st = managed_fixture(&g);
    g.owner_absent = 1;
    g.calls = 0;
    buf before = save(st);
    obj_record r = {0};
    assert_int_equal(obj_prepare_remove(st, "w/g2/0", 5, &r), SMP_EVETO);
    obj_record_list l = {0};
    obj_remove_report rep;
    assert_int_equal(obj_prepare_remove_prefix(st, "w/g2/", 5, &l, &rep), SMP_OK);
    assert_int_equal(l.n, 0); /* g2 lies wholly under the prefix: still refused */
    assert_int_equal(rep.skipped_vetoed, 2);
    obj_put_params p = {"w/g2/new", 10, SMP_DATA_WEIGHT, "g2", "", 0, 0, NULL};
    assert_int_equal(obj_put_start(st, &p, 5, NULL), SMP_EVETO);
    obj_put_params ow = {"w/g2/0", 10, SMP_DATA_KV, "", "", 0, 1, NULL};
    assert_int_equal(obj_put_start(st, &ow, 5, NULL), SMP_EVETO);
    assert_int_equal(g.calls, 0); /* no guard was asked about the groups */
    uint64_t planned = 0;
    assert_int_equal(obj_plan_eviction(st, 0.0, 0.0, 5, &l, &planned), SMP_OK);
    assert_int_equal(g.calls, 2); /* only about w/g3/0 and w/plain, with no owner */
    assert_string_equal(g.last_owner, "");
    for (size_t i = 0; i < l.n; i++) {
        char text[256];
        assert_true(obj_describe_record(l.recs[i].type, l.recs[i].encver, l.recs[i].buf, l.recs[i].len, text,
                                        sizeof(text)) > 0);
        assert_null(strstr(text, "g1/"));
        assert_null(strstr(text, "g2/"));
    }
    obj_record_list_free(&l);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.host_refusals[SMP_GUARD_REMOVE_KEY], 1);
    assert_int_equal(s.host_refusals[SMP_GUARD_PUT_INTO_GROUP], 1);
    assert_int_equal(s.host_refusals[SMP_GUARD_UPSERT_INTO_GROUP], 1);
    assert_int_equal(s.host_refusals[SMP_GUARD_BATCH_EVICT], 5);
    buf after = save(st);
    assert_int_equal(before.n, after.n);
    assert_memory_equal(before.p, after.p, before.n);
    free(after.p);

    /* Remove-all takes the plain objects and leaves both groups whole. */
    assert_int_equal(obj_prepare_remove_prefix(st, "", 6, &l, &rep), SMP_OK);
    assert_int_equal(rep.removed, 2); /* w/g3/0 and w/plain */
    assert_int_equal(rep.skipped_partial + rep.skipped_vetoed, 5);
    apply_list(st, &l);
    assert_int_equal(obj_group_count(st, "g1"), 3);
    assert_int_equal(obj_group_count(st, "g2"), 2);
    assert_false(obj_exists(st, "w/plain"));

    /* Back: the owner's guard decides again, and is told the owner. */
    g.owner_absent = 0;
    assert_int_equal(obj_prepare_remove(st, "w/g2/0", 7, &r), SMP_OK);
    obj_record_free(&r);
    assert_string_equal(g.last_owner, TEST_OWNER);
    assert_int_equal(g.calls, 5); /* 2 evictions, 2 remove-all, this one */
    free(before.p);
    obj_store_destroy(st);
}

/* The owner of a managed group is durable: in its record (a record from
 * before owners existed means OBJ_OWNER_DEFAULT) and in the snapshot; only
 * the owner changes the flag. */
static void test_group_owner_persisted(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    set_managed(st, "mine", 1);
    assert_string_equal(obj_group_owner(st, "mine"), TEST_OWNER);
    assert_null(obj_group_owner(st, "nobody"));
    obj_record r = {0};
    assert_int_equal(obj_prepare_group_managed(st, "mine", "other_plugin", 1, &r), SMP_EVETO);
    assert_int_equal(obj_prepare_group_managed(st, "mine", "other_plugin", 0, &r), SMP_EVETO);
    assert_int_equal(obj_prepare_group_managed(st, "mine", "", 1, &r), SMP_EINVAL);
    assert_int_equal(obj_prepare_group_managed(st, "mine", NULL, 1, &r), SMP_EINVAL);
    assert_string_equal(obj_group_owner(st, "mine"), TEST_OWNER);
    assert_int_equal(obj_prepare_group_managed(st, "mine", TEST_OWNER, 1, &r), SMP_OK);
    char text[256];
    assert_true(obj_describe_record(r.type, r.encver, r.buf, r.len, text, sizeof(text)) > 0);
    assert_string_equal(text, "SEGMENT_UPDATE group=mine managed=1 owner=" TEST_OWNER);
    obj_record_free(&r);

    /* A record written before owners existed. */
    Hostrec__GroupRecord gr = HOSTREC__GROUP_RECORD__INIT;
    gr.name = "old";
    gr.managed = 1;
    Hostrec__UpdateRecord u = HOSTREC__UPDATE_RECORD__INIT;
    u.change_case = HOSTREC__UPDATE_RECORD__CHANGE_GROUP;
    u.group = &gr;
    uint8_t bytes[128];
    size_t n = hostrec__update_record__pack(&u, bytes);
    assert_int_equal(obj_apply_record(st, OBJ_REC_SEGMENT_UPDATE, OBJ_REC_ENCVER, bytes, n),
                     SMP_OK);
    assert_string_equal(obj_group_owner(st, "old"), OBJ_OWNER_DEFAULT);

    buf b = save(st);
    obj_store *c = new_store(NULL);
    assert_int_equal(obj_store_load(c, b.p, b.n), SMP_OK);
    assert_string_equal(obj_group_owner(c, "mine"), TEST_OWNER);
    assert_string_equal(obj_group_owner(c, "old"), OBJ_OWNER_DEFAULT);
    obj_store_destroy(c);
    free(b.p);

    /* A snapshot written before owners existed. */
    Hostrec__GroupRecord og = HOSTREC__GROUP_RECORD__INIT;
    og.name = "legacy";
    og.managed = 1;
    Hostrec__GroupRecord *groups[1] = {&og};
    Hostrec__HostSnapshot hs = HOSTREC__HOST_SNAPSHOT__INIT;
    hs.format = OBJ_SNAPSHOT_FORMAT;
    hs.n_groups = 1;
    hs.groups = groups;
    n = hostrec__host_snapshot__pack(&hs, bytes);
    c = new_store(NULL);
    assert_int_equal(obj_store_load(c, bytes, n), SMP_OK);
    assert_string_equal(obj_group_owner(c, "legacy"), OBJ_OWNER_DEFAULT);
    obj_store_destroy(c);

    /* The owner clears it; the group entry goes. */
    assert_int_equal(obj_prepare_group_managed(st, "mine", TEST_OWNER, 0, &r), SMP_OK);
    apply_rec(st, &r);
    assert_null(obj_group_owner(st, "mine"));
    assert_false(obj_group_is_managed(st, "mine"));
    obj_store_destroy(st);
}

/* Puts and upserts into a managed group: refused by the host without a
 * guard, asked of the guard with one. */
static void test_put_into_managed_group(void **state)
{
    (void)state;
    test_guard g = {.veto = 0, .loaded = 0};
    obj_store *st = new_store(&g);
    mount(st, "s", "n", 1 << 16);
    set_managed(st, "rev", 1);
    obj_put_params p = {"rev/0", 10, SMP_DATA_WEIGHT, "rev", "", 0, 0, NULL};
    assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_EVETO);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.host_refusals[SMP_GUARD_PUT_INTO_GROUP], 1);
    assert_int_equal(g.calls, 0);

    g.loaded = 1;
    g.veto = 1;
    assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_EVETO);
    obj_store_stats(st, &s);
    assert_int_equal(s.guard_vetoes[SMP_GUARD_PUT_INTO_GROUP], 1);
    g.veto = 0;
    assert_int_equal(put_full(st, "rev/0", 10, "rev", "", 1), SMP_OK);
    /* Asked at the start and again at the end of the put. */
    assert_int_equal(g.calls_by_reason[SMP_GUARD_PUT_INTO_GROUP], 3);

    p.overwrite = 1;
    g.veto = 1;
    assert_int_equal(obj_put_start(st, &p, 2, NULL), SMP_EVETO);
    assert_int_equal(g.calls_by_reason[SMP_GUARD_UPSERT_INTO_GROUP], 1);
    g.loaded = 0;
    assert_int_equal(obj_put_start(st, &p, 2, NULL), SMP_EVETO);
    obj_store_stats(st, &s);
    assert_int_equal(s.host_refusals[SMP_GUARD_UPSERT_INTO_GROUP], 1);
    /* An unmanaged group needs no permission. */
    assert_int_equal(put_full(st, "free/0", 10, "free", "", 1), SMP_OK);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Eviction                                                                  */
/* ------------------------------------------------------------------------ */

/* Above the high watermark the plan brings use to at most the low one, oldest
 * first, never touching pinned, leased or managed-group objects; an object
 * with a cold copy keeps living from it. */
static void test_eviction_plan(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s", "n", 64 * 100);
    set_managed(st, "rev", 1);
    char key[32];
    test_guard allow = {.veto = 0, .loaded = 1};
    obj_guard_ops ops = {test_guard_check, test_guard_active, &allow};
    obj_store_set_guard(st, &ops); /* to fill the managed group */
    for (int i = 0; i < 90; i++) {
        snprintf(key, sizeof(key), "k%02d", i);
        const char *group = (i >= 5 && i < 15) ? "rev" : "";
        assert_int_equal(put_full(st, key, 64, group, "", (uint64_t)(100 + i)), SMP_OK);
    }
    obj_store_set_guard(st, NULL);
    /* 0..4 pinned, 5..14 managed, 15..19 leased, 20 has a cold copy. */
    obj_record r = {0};
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof(key), "k%02d", i);
        assert_int_equal(obj_prepare_set_pin(st, key, 1, &r), SMP_OK);
        apply_rec(st, &r);
    }
    obj_replica reps[2];
    size_t n;
    for (int i = 15; i < 20; i++) {
        snprintf(key, sizeof(key), "k%02d", i);
        /* Read at the original access time: the LRU order stays. */
        assert_int_equal(obj_get_replica_list(st, key, 100 + (uint64_t)i, 100000, reps, 2, &n),
                         SMP_OK);
    }
    assert_int_equal(obj_get_replica_list(st, "k20", 120, 0, reps, 2, &n), SMP_OK);
    reps[1] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_COMPLETE, "n", NULL, 0, 64, "/cold/k20"};
    assert_int_equal(obj_prepare_set_replicas(st, "k20", reps, 2, &r), SMP_OK);
    apply_rec(st, &r);

    obj_record_list l = {0};
    uint64_t planned = 0;
    assert_int_equal(obj_plan_eviction(st, 0.95, 0.5, 1000, &l, &planned), SMP_OK);
    assert_int_equal(l.n, 0); /* 90% is under the high watermark */
    assert_int_equal(obj_plan_eviction(st, 0.8, 0.5, 1000, &l, &planned), SMP_OK);
    assert_true(l.n > 0);
    assert_int_equal(planned, 40 * 64);
    apply_list(st, &l);
    assert_true(used_of(st) <= 64 * 50);
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "k%02d", i);
        assert_true(obj_exists(st, key));
    }
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(st, "k20", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 0);
    assert_int_equal(info.cold_replicas_readable, 1);
    for (int i = 21; i < 60; i++) { /* the oldest evictable go first */
        snprintf(key, sizeof(key), "k%02d", i);
        assert_false(obj_exists(st, key));
    }
    assert_true(obj_exists(st, "k60"));
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.host_refusals[SMP_GUARD_BATCH_EVICT], 10);
    assert_int_equal(s.replicas_by_kind[SMP_REPLICA_COLD], 1);

    /* With a vetoing guard nothing is evicted. */
    test_guard veto = {.veto = 1, .loaded = 1};
    obj_guard_ops vops = {test_guard_check, test_guard_active, &veto};
    obj_store_set_guard(st, &vops);
    assert_int_equal(obj_plan_eviction(st, 0.1, 0.05, 1000, &l, &planned), SMP_OK);
    assert_int_equal(l.n, 0);
    assert_true(veto.calls_by_reason[SMP_GUARD_BATCH_EVICT] > 0);
    assert_int_equal(obj_plan_eviction(st, 0.5, 0.6, 1000, &l, NULL), SMP_EINVAL);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Stale puts                                                                */
/* ------------------------------------------------------------------------ */

/* A put its node reports being written counts as started at that report:
 * only the exact range is touched, and a silent put still goes. */
static void test_put_touched_by_its_write_is_kept(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s", "n", 4096);
    obj_put_params p = {"slow", 100, SMP_DATA_KV, "", "", 0, 0, NULL};
    obj_put_ticket t;
    assert_int_equal(obj_put_start(st, &p, 100, &t), SMP_OK);
    p.key = "silent";
    assert_int_equal(obj_put_start(st, &p, 100, NULL), SMP_OK);
    assert_int_equal(obj_put_touch(st, "slow", "s", t.offset + 64, 900), SMP_ENOTFOUND);
    assert_int_equal(obj_put_touch(st, "slow", "other", t.offset, 900), SMP_ENOTFOUND);
    assert_int_equal(obj_put_touch(st, "nope", "s", t.offset, 900), SMP_ENOTFOUND);
    assert_int_equal(obj_put_touch(st, "slow", "s", t.offset, 900), SMP_OK);
    assert_int_equal(obj_cleanup_stale_puts(st, 1000, 600), 1); /* "silent" only */
    uint8_t sum[32] = {0};
    obj_record r = {0};
    assert_int_equal(obj_prepare_put_end(st, "silent", sum, 1000, &r), SMP_ENOTFOUND);
    assert_int_equal(obj_prepare_put_end(st, "slow", sum, 1000, &r), SMP_OK);
    obj_record_free(&r);
    assert_int_equal(obj_cleanup_stale_puts(st, 1600, 600), 1); /* then silent too */
    obj_store_destroy(st);
}

static void test_stale_put_cleanup(void **state)
{
    (void)state;
    test_guard g = {.veto = 1, .loaded = 0};
    obj_store *st = new_store(&g);
    mount(st, "s", "n", 4096);
    obj_put_params p = {"old", 100, SMP_DATA_KV, "", "", 0, 0, NULL};
    assert_int_equal(obj_put_start(st, &p, 100, NULL), SMP_OK);
    p.key = "new";
    assert_int_equal(obj_put_start(st, &p, 500, NULL), SMP_OK);
    assert_int_equal(used_of(st), 256);

    g.loaded = 1; /* a vetoing guard keeps them */
    assert_int_equal(obj_cleanup_stale_puts(st, 1000, 600), 0);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.guard_vetoes[SMP_GUARD_STALE_PUT_CLEANUP], 1);
    g.loaded = 0;
    assert_int_equal(obj_cleanup_stale_puts(st, 1000, 600), 1);
    assert_int_equal(used_of(st), 128);
    uint8_t sum[32] = {0};
    obj_record r = {0};
    assert_int_equal(obj_prepare_put_end(st, "old", sum, 1000, &r), SMP_ENOTFOUND);
    assert_int_equal(obj_prepare_put_end(st, "new", sum, 1000, &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(obj_cleanup_stale_puts(st, 100000, 1), 0);
    assert_int_equal(used_of(st), 128);
    obj_store_stats(st, &s);
    assert_int_equal(s.puts_in_flight, 0);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Listing                                                                   */
/* ------------------------------------------------------------------------ */

/* Paging through a prefix with the cursor returns every key exactly once, in
 * order, and nothing outside the prefix. */
static void test_list_prefix_pagination(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s", "n", 1 << 20);
    char key[32];
    for (int i = 0; i < 250; i++) {
        snprintf(key, sizeof(key), "p/%03d", (i * 37) % 250); /* out of order */
        assert_int_equal(put_full(st, key, 1, "", (i % 2) ? "odd" : "even", 1), SMP_OK);
    }
    assert_int_equal(put_full(st, "p", 1, "", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "o/x", 1, "", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "p0", 1, "", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "q/y", 1, "", "", 1), SMP_OK);

    int seen[250] = {0};
    char cursor[64] = "";
    const char *keys[7];
    size_t n, total = 0;
    int more = 1, pages = 0;
    while (more) {
        assert_int_equal(obj_list_prefix(st, "p/", NULL, cursor[0] ? cursor : NULL, 7, keys,
                                         &n, &more), SMP_OK);
        for (size_t i = 0; i < n; i++) {
            int v = -1;
            assert_int_equal(sscanf(keys[i], "p/%d", &v), 1);
            assert_true(v >= 0 && v < 250);
            assert_int_equal(seen[v], 0);
            seen[v] = 1;
            if (i || cursor[0]) assert_true(strcmp(keys[i], i ? keys[i - 1] : cursor) > 0);
        }
        total += n;
        if (n) snprintf(cursor, sizeof(cursor), "%s", keys[n - 1]);
        pages++;
        assert_true(pages < 100);
    }
    assert_int_equal(total, 250);
    assert_int_equal(pages, 36);

    /* Filtered by tenant. */
    total = 0;
    cursor[0] = 0;
    more = 1;
    while (more) {
        assert_int_equal(obj_list_prefix(st, "p/", "odd", cursor[0] ? cursor : NULL, 7, keys,
                                         &n, &more), SMP_OK);
        total += n;
        if (n) snprintf(cursor, sizeof(cursor), "%s", keys[n - 1]);
    }
    assert_int_equal(total, 125);
    uint64_t objs;
    obj_tenant_usage(st, "odd", &objs, NULL);
    assert_int_equal(objs, 125);

    /* A cursor before the prefix starts at the prefix. */
    assert_int_equal(obj_list_prefix(st, "p/", NULL, "a", 2, keys, &n, &more), SMP_OK);
    assert_int_equal(n, 2);
    assert_string_equal(keys[0], "p/000");
    assert_int_equal(more, 1);
    assert_int_equal(obj_list_prefix(st, "", NULL, NULL, 2, keys, &n, &more), SMP_OK);
    assert_string_equal(keys[0], "o/x");
    obj_store_destroy(st);
}

/* Puts and removes in random order keep the ordered index exact: every
 * listing (whole, and from a cursor in the middle) returns exactly the live
 * keys in order, and a removed key is neither listed nor found. */
static void test_random_puts_and_removes_keep_order(void **state)
{
    (void)state;
    enum { N = 600 };
    obj_store *st = new_store(NULL);
    int live[N] = {0};
    char key[32];
    const char *keys[N + 1];
    size_t n;
    int more;
    uint64_t x = 88172645463325252ull;
    mount(st, "s", "n", 1 << 24);
    for (int round = 0; round < 6000; round++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int k = (int)(x % N);
        snprintf(key, sizeof(key), "k/%04d", k);
        if (live[k]) {
            remove_key(st, key, 1);
            live[k] = 0;
            assert_int_equal(obj_exists(st, key), 0);
        } else {
            assert_int_equal(put_full(st, key, 1, (k % 3) ? "" : "g", "", 1), SMP_OK);
            live[k] = 1;
        }
        if (round % 500 != 499) continue;
        assert_int_equal(obj_list_prefix(st, "k/", NULL, NULL, N + 1, keys, &n, &more), SMP_OK);
        size_t want = 0;
        for (int i = 0; i < N; i++) {
            if (!live[i]) continue;
            snprintf(key, sizeof(key), "k/%04d", i);
            assert_true(want < n);
            assert_string_equal(keys[want], key);
            want++;
        }
        assert_int_equal(n, want);
        assert_int_equal(obj_list_prefix(st, "k/", NULL, "k/0300", N + 1, keys, &n, &more), SMP_OK);
        for (size_t i = 0; i < n; i++) {
            int v = -1;
            assert_int_equal(sscanf(keys[i], "k/%d", &v), 1);
            assert_true(v > 300 && live[v]);
        }
    }
    obj_store_destroy(st);
}

/* Group listing is in key order after a cursor, bounded by max. */
static int collect_keys(void *arg, const smp_object_info *info)
{
    char **out = arg;
    while (*out) out++;
    *out = strdup(info->key);
    return 0;
}

static void test_group_queries_and_metrics(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s", "n", 1 << 20);
    const char *members[] = {"m/3", "m/1", "m/2", "m/0"};
    for (int i = 0; i < 4; i++)
        assert_int_equal(put_full(st, members[i], 100, "grp", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "other", 5, "", "", 1), SMP_OK);
    assert_int_equal(obj_group_count(st, "grp"), 4);
    assert_int_equal(obj_group_count(st, "none"), 0);
    char *got[8] = {0};
    assert_int_equal(obj_group_list(st, "grp", "m/0", 2, collect_keys, got), 2);
    assert_string_equal(got[0], "m/1");
    assert_string_equal(got[1], "m/2");
    assert_null(got[2]);
    for (int i = 0; got[i]; i++) free(got[i]);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.objects_by_type[SMP_DATA_KV], 5);
    assert_int_equal(s.bytes_by_type[SMP_DATA_KV], 405);
    assert_int_equal(s.replicas_by_kind[SMP_REPLICA_MEMORY], 5);
    assert_int_equal(s.replica_bytes_by_kind[SMP_REPLICA_MEMORY], 405);
    assert_int_equal(s.memory_used, 4 * 128 + 64);
    assert_int_equal(s.memory_capacity, 1 << 20);

    /* Unmounting the segment drops its replicas but keeps the objects. */
    obj_record r = {0};
    assert_int_equal(obj_prepare_segment_unmount(st, "s", &r), SMP_OK);
    apply_rec(st, &r);
    assert_true(obj_exists(st, "m/1"));
    obj_replica reps[2];
    size_t n;
    assert_int_equal(obj_get_replica_list(st, "m/1", 5, 10, reps, 2, &n), SMP_EAGAIN);
    obj_store_stats(st, &s);
    assert_int_equal(s.replicas_by_kind[SMP_REPLICA_MEMORY], 0);
    assert_int_equal(s.memory_capacity, 0);
    assert_int_equal(obj_prepare_segment_unmount(st, "s", &r), SMP_ENOTFOUND);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Records                                                                   */
/* ------------------------------------------------------------------------ */

/* Build a varied state through prepare + apply, logging the records. */
static obj_store *build_logged_state(rec_log *log)
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
    obj_put_params p = {"obj/16", 10, SMP_DATA_METADATA, "", "", 0, 1, NULL};
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

static void free_log(rec_log *log)
{
    for (size_t i = 0; i < log->n; i++) obj_record_free(&log->recs[i]);
    log->n = 0;
}

/* Replaying the records gives the same state; each applied twice in a row
 * too (idempotence). */
static void test_records_replay_and_idempotence(void **state)
{
    (void)state;
    static rec_log log;
    obj_store *a = build_logged_state(&log);
    assert_true(log.n > 30);

    obj_store *b = new_store(NULL);
    for (size_t i = 0; i < log.n; i++)
        assert_int_equal(obj_apply_record(b, log.recs[i].type, log.recs[i].encver,
                                          log.recs[i].buf, log.recs[i].len), SMP_OK);
    assert_same_state(a, b);

    obj_store *c = new_store(NULL);
    for (size_t i = 0; i < log.n; i++) {
        for (int k = 0; k < 2; k++)
            assert_int_equal(obj_apply_record(c, log.recs[i].type, log.recs[i].encver,
                                              log.recs[i].buf, log.recs[i].len), SMP_OK);
    }
    assert_same_state(a, c);
    assert_int_equal(obj_group_count(c, "rev"), 6);
    assert_true(obj_group_is_managed(c, "rev"));
    assert_false(obj_group_is_managed(c, "g"));
    uint64_t objs, bytes;
    obj_tenant_usage(c, "tA", &objs, &bytes);
    uint64_t objs_a, bytes_a;
    obj_tenant_usage(a, "tA", &objs_a, &bytes_a);
    assert_int_equal(objs, objs_a);
    assert_int_equal(bytes, bytes_a);

    /* An unmount record, twice. */
    obj_record r = {0};
    assert_int_equal(obj_prepare_segment_unmount(a, "s1", &r), SMP_OK);
    assert_int_equal(obj_apply_record(c, r.type, r.encver, r.buf, r.len), SMP_OK);
    assert_int_equal(obj_apply_record(c, r.type, r.encver, r.buf, r.len), SMP_OK);
    apply_rec(a, &r);
    assert_same_state(a, c);

    free_log(&log);
    obj_store_destroy(a);
    obj_store_destroy(b);
    obj_store_destroy(c);
}

static void expect_rejected(obj_store *st, uint16_t type, const void *payload, size_t len, int want)
{
    buf before = save(st);
    assert_int_equal(obj_apply_record(st, type, OBJ_REC_ENCVER, payload, len), want);
    buf after = save(st);
    assert_int_equal(before.n, after.n);
    assert_memory_equal(before.p, after.p, before.n);
    free(before.p);
    free(after.p);
}

static void pack_object(const Hostrec__ObjectRecord *m, uint8_t **out, size_t *len)
{
    *len = hostrec__object_record__get_packed_size(m);
    *out = malloc(*len ? *len : 1);
    assert_non_null(*out);
    hostrec__object_record__pack(m, *out);
}

/* Malformed payloads are refused with SMP_EPROTO (unknown types with
 * SMP_ENOTFOUND) and change nothing; truncations never crash. */
static void test_records_malformed(void **state)
{
    (void)state;
    static rec_log log;
    obj_store *st = build_logged_state(&log);
    free_log(&log);

    const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x80};
    for (uint16_t t = 1; t <= 7; t++) {
        if (t == 4) continue;
        expect_rejected(st, t, garbage, sizeof(garbage), SMP_EPROTO);
    }
    expect_rejected(st, 4, garbage, 0, SMP_ENOTFOUND);
    expect_rejected(st, 8, garbage, 0, SMP_ENOTFOUND);
    expect_rejected(st, 0, garbage, 0, SMP_ENOTFOUND);
    assert_int_equal(obj_apply_record(st, OBJ_REC_REMOVE, 2, NULL, 0), SMP_EPROTO);
    expect_rejected(st, OBJ_REC_PUT_END, NULL, 0, SMP_EPROTO); /* empty key */
    expect_rejected(st, OBJ_REC_SEGMENT_UPDATE, NULL, 0, SMP_EPROTO); /* no change */

    /* Well-formed protobuf, invalid content. */
    uint8_t sum[32] = {0};
    Hostrec__Replica rep = HOSTREC__REPLICA__INIT;
    Hostrec__Replica *reps[1] = {&rep};
    Hostrec__ObjectRecord m = HOSTREC__OBJECT_RECORD__INIT;
    m.key = "bad";
    m.checksum.data = sum;
    m.checksum.len = 32;
    uint8_t *b;
    size_t len;
    m.data_type = 7;
    pack_object(&m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    m.data_type = 0;
    m.checksum.len = 5;
    pack_object(&m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    m.checksum.len = 32;
    m.key = "bad\xc3\x28";
    pack_object(&m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    m.key = "bad";
    m.n_replicas = 1;
    m.replicas = reps;
    rep.node = "n0";
    rep.segment = "s0";
    rep.length = 10;
    rep.offset = 33; /* unaligned */
    pack_object(&m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    rep.offset = 0;
    rep.kind = 9;
    pack_object(&m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);

    /* Every truncation of a valid record: no crash, and no change on error. */
    obj_record r = {0};
    assert_int_equal(obj_prepare_set_pin(st, "obj/08", 1, &r), SMP_OK);
    for (size_t cut = 0; cut < r.len; cut++) {
        buf before = save(st);
        int rc = obj_apply_record(st, r.type, r.encver, r.buf, cut);
        if (rc != SMP_OK) {
            buf after = save(st);
            assert_int_equal(before.n, after.n);
            assert_memory_equal(before.p, after.p, before.n);
            free(after.p);
        }
        free(before.p);
    }
    obj_record_free(&r);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Snapshots                                                                 */
/* ------------------------------------------------------------------------ */

static void test_snapshot_round_trip(void **state)
{
    (void)state;
    static rec_log log;
    obj_store *a = build_logged_state(&log);
    free_log(&log);
    buf s = save(a);
    obj_store *b = new_store(NULL);
    assert_int_equal(obj_store_load(b, s.p, s.n), SMP_OK);
    assert_same_state(a, b);
    assert_int_equal(obj_store_load(b, s.p, s.n), SMP_ESTATE); /* not empty */
    assert_true(obj_group_is_managed(b, "empty-managed"));
    assert_int_equal(obj_group_count(b, "rev"), 6);
    smp_object_info ia = {.struct_size = sizeof(ia)}, ib = {.struct_size = sizeof(ib)};
    assert_int_equal(obj_object_info(a, "obj/08", &ia), SMP_OK);
    assert_int_equal(obj_object_info(b, "obj/08", &ib), SMP_OK);
    assert_int_equal(ia.size, ib.size);
    assert_int_equal(ia.hard_pinned, ib.hard_pinned);
    assert_memory_equal(ia.checksum, ib.checksum, 32);
    /* The loaded allocator is live: a put lands in free space only. */
    obj_put_params p = {"fresh", 50000, SMP_DATA_KV, "", "", 0, 0, NULL};
    assert_int_equal(obj_put_start(b, &p, 5000, NULL), SMP_OK);
    assert_int_equal(obj_put_start(a, &p, 5000, NULL), SMP_OK);
    uint64_t ua, ub;
    obj_memory_usage(a, &ua, NULL);
    obj_memory_usage(b, &ub, NULL);
    assert_int_equal(ua, ub);
    free(s.p);

    /* An empty store round-trips too. */
    obj_store *e = new_store(NULL), *f = new_store(NULL);
    s = save(e);
    assert_int_equal(obj_store_load(f, s.p, s.n), SMP_OK);
    assert_same_state(e, f);
    free(s.p);
    obj_store_destroy(a);
    obj_store_destroy(b);
    obj_store_destroy(e);
    obj_store_destroy(f);
}

/* The objects of a load live in one slab (obj_store_snapshot.c): each is
 * still replaced, given a replica and removed on its own, and the store
 * loaded from a snapshot stays the same as the one saved through all of it
 * (ASan and valgrind check each object is freed once and the slab goes with
 * the last). */
static void test_loaded_objects_changed_and_removed_one_by_one(void **state)
{
    (void)state;
    static rec_log log;
    obj_store *a = build_logged_state(&log);
    free_log(&log);
    buf s = save(a);
    obj_store *b = new_store(NULL);
    assert_int_equal(obj_store_load(b, s.p, s.n), SMP_OK);
    free(s.p);
    assert_same_state(a, b);
    test_guard allow = {.veto = 0, .loaded = 1};
    obj_guard_ops ops = {test_guard_check, test_guard_active, &allow};
    obj_store *both[2] = {a, b};
    obj_record r = {0};
    for (int k = 0; k < 2; k++) {
        obj_store *st = both[k];
        obj_store_set_guard(st, &ops);
        /* A replica added to a loaded object moves its list off the slab. */
        assert_int_equal(obj_reserve_replica(st, "obj/02", "n0", 4000, NULL), SMP_OK);
        assert_int_equal(obj_prepare_add_replica(st, "obj/02", NULL, &r), SMP_OK);
        apply_rec(st, &r);
    }
    assert_same_state(a, b);
    for (int k = 0; k < 2; k++) {
        obj_store *st = both[k];
        /* A loaded object replaced by a new incarnation (its put id is the
         * store's next, which a load takes from the objects it holds: the
         * two stores differ in it until the object is removed). */
        obj_put_params p = {"obj/03", 123, SMP_DATA_KV, "rev", "tA", 0, 1, NULL};
        assert_int_equal(obj_put_start(st, &p, 4001, NULL), SMP_OK);
        uint8_t sum[32] = {3};
        assert_int_equal(obj_prepare_put_end(st, "obj/03", sum, 4001, &r), SMP_OK);
        apply_rec(st, &r);
    }
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(b, "obj/03", &info), SMP_OK);
    assert_int_equal(info.size, 123);
    char key[32];
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "obj/%02d", i);
        int ra = obj_prepare_remove(a, key, 5000, &r);
        if (ra == SMP_OK) apply_rec(a, &r);
        int rb = obj_prepare_remove(b, key, 5000, &r);
        if (rb == SMP_OK) apply_rec(b, &r);
        assert_int_equal(ra, rb);
        if (i >= 3) assert_same_state(a, b);
        int want = ra == SMP_OK ? SMP_ENOTFOUND : obj_object_info(a, key, &info);
        assert_int_equal(obj_object_info(b, key, &info), want);
    }
    obj_store_destroy(a);
    obj_store_destroy(b);
}

static void assert_empty(obj_store *st)
{
    obj_store *e = new_store(NULL);
    assert_same_state(st, e);
    obj_store_destroy(e);
    const char *keys[1];
    size_t n;
    assert_int_equal(obj_list_prefix(st, "", NULL, NULL, 1, keys, &n, NULL), SMP_OK);
    assert_int_equal(n, 0);
}

/* An invalid snapshot is refused and leaves the store empty. */
static void test_snapshot_invalid(void **state)
{
    (void)state;
    const uint8_t garbage[] = {0x08, 0x01, 0x12, 0xff, 0xff, 0x03};
    obj_store *st = new_store(NULL);
    assert_int_equal(obj_store_load(st, garbage, sizeof(garbage)), SMP_EPROTO);
    assert_empty(st);
    const uint8_t wrong_format[] = {0x08, 0x02};
    assert_int_equal(obj_store_load(st, wrong_format, sizeof(wrong_format)), SMP_EPROTO);
    assert_empty(st);

    /* Valid protobuf, but an object on a segment the snapshot lacks (after
     * valid segments and objects, which must be undone). */
    static rec_log log;
    obj_store *a = build_logged_state(&log);
    free_log(&log);
    buf s = save(a);
    uint8_t sum[32] = {0};
    Hostrec__Replica rep = HOSTREC__REPLICA__INIT;
    Hostrec__Replica *reps[1] = {&rep};
    rep.node = "n9";
    rep.segment = "s9";
    rep.length = 1;
    Hostrec__ObjectRecord m = HOSTREC__OBJECT_RECORD__INIT;
    m.key = "zzz/last";
    m.checksum.data = sum;
    m.checksum.len = 32;
    m.n_replicas = 1;
    m.replicas = reps;
    uint8_t *b;
    size_t len;
    pack_object(&m, &b, &len);
    uint8_t hdr[2] = {0x22, (uint8_t)len};
    assert_true(len < 128);
    buf_write(&s, hdr, 2);
    buf_write(&s, b, len);
    free(b);
    assert_int_equal(obj_store_load(st, s.p, s.n), SMP_EPROTO);
    assert_empty(st);

    /* A duplicate key. */
    s.n -= 2 + len;
    buf one = {0};
    obj_store *single = new_store(NULL);
    mount(single, "s0", "n0", 1 << 16);
    assert_int_equal(put_full(single, "dup", 1, "", "", 1), SMP_OK);
    one = save(single);
    buf two = {0};
    buf_write(&two, one.p, one.n);
    buf_write(&two, one.p + 2, one.n - 2); /* segments and the object again */
    assert_int_equal(obj_store_load(st, two.p, two.n), SMP_EPROTO);
    assert_empty(st);

    /* Every truncation: loads or fails with the store left empty. */
    for (size_t cut = 0; cut < s.n; cut += 7) {
        int rc = obj_store_load(st, s.p, cut);
        if (rc == SMP_OK) {
            obj_store_destroy(st);
            st = new_store(NULL);
        } else {
            assert_int_equal(rc, SMP_EPROTO);
            assert_empty(st);
        }
    }
    free(one.p);
    free(two.p);
    free(s.p);
    obj_store_destroy(single);
    obj_store_destroy(a);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Keys                                                                      */
/* ------------------------------------------------------------------------ */

static void test_bad_keys_refused(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s", "n", 1 << 16);
    char longkey[OBJ_KEY_MAX + 2];
    memset(longkey, 'k', sizeof(longkey));
    longkey[OBJ_KEY_MAX + 1] = 0;
    const char *bad[] = {"", longkey, "a\xc3\x28", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                         "trunc\xe6\xa8", "\xff"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(obj_validate_key(bad[i]), SMP_EINVAL);
        obj_put_params p = {bad[i], 1, SMP_DATA_KV, "", "", 0, 0, NULL};
        assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_EINVAL);
    }
    assert_int_equal(obj_validate_key(NULL), SMP_EINVAL);
    obj_put_params p = {NULL, 1, SMP_DATA_KV, "", "", 0, 0, NULL};
    assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_EINVAL);
    p.key = "ok";
    p.data_type = (smp_data_type)3;
    assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_EINVAL);
    p.data_type = SMP_DATA_KV;
    p.group = "bad\xff";
    assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_EINVAL);

    longkey[OBJ_KEY_MAX] = 0; /* exactly the limit */
    assert_int_equal(put_full(st, longkey, 1, "", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "模型/权重/\xf0\x9f\x98\x80", 1, "", "", 1), SMP_OK);
    assert_true(obj_exists(st, "模型/权重/\xf0\x9f\x98\x80"));
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.puts_in_flight, 0);
    assert_int_equal(s.objects_by_type[SMP_DATA_KV], 2);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Placement, plugin removal, describe                                       */
/* ------------------------------------------------------------------------ */

/* A put prefers the segments of the requested node, else the emptiest. */
static void test_put_prefers_node(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "small", "n0", 1024);
    mount(st, "large", "n1", 1 << 20);
    obj_put_params p = {"a", 10, SMP_DATA_KV, "", "", 0, 0, "n0"};
    obj_put_ticket t;
    assert_int_equal(obj_put_start(st, &p, 1, &t), SMP_OK);
    assert_string_equal(t.segment, "small");
    p.key = "b";
    p.prefer_node = NULL;
    assert_int_equal(obj_put_start(st, &p, 1, &t), SMP_OK);
    assert_string_equal(t.segment, "large");
    p.key = "c";
    p.size = 4096; /* does not fit the preferred node: goes elsewhere */
    p.prefer_node = "n0";
    assert_int_equal(obj_put_start(st, &p, 1, &t), SMP_OK);
    assert_string_equal(t.segment, "large");
    obj_store_destroy(st);
}

/* The plugin's own remove_object bypasses the guard and the host rule, but
 * not a read lease. */
static void test_unguarded_remove(void **state)
{
    (void)state;
    obj_store *st = managed_fixture(NULL);
    obj_record r = {0};
    assert_int_equal(obj_prepare_remove(st, "z/g1/2", 5, &r), SMP_EVETO);
    obj_replica reps[1];
    size_t n;
    assert_int_equal(obj_get_replica_list(st, "z/g1/2", 5, 10, reps, 1, &n), SMP_OK);
    assert_int_equal(obj_prepare_remove_unguarded(st, "z/g1/2", 6, &r), SMP_EBUSY);
    assert_int_equal(obj_prepare_remove_unguarded(st, "z/g1/2", 15, &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(obj_group_count(st, "g1"), 2);
    assert_int_equal(obj_prepare_remove_unguarded(st, "z/g1/2", 15, &r), SMP_ENOTFOUND);
    obj_store_destroy(st);
}

/* Every host record describes itself in one line naming its type. */
static void test_describe_records(void **state)
{
    (void)state;
    static rec_log log;
    obj_store *st = build_logged_state(&log);
    char line[256];
    for (size_t i = 0; i < log.n; i++) {
        const obj_record *r = &log.recs[i];
        int need = obj_describe_record(r->type, r->encver, r->buf, r->len, NULL, 0);
        assert_true(need > 0);
        int got = obj_describe_record(r->type, r->encver, r->buf, r->len, line, sizeof(line));
        assert_int_equal(got, need);
        assert_non_null(strstr(line, obj_record_type_name(r->type)));
    }
    /* Truncated payloads and a tiny buffer: an error or a cut line, no crash. */
    for (size_t i = 0; i < log.n; i++) {
        const obj_record *r = &log.recs[i];
        for (size_t cut = 0; cut < r->len; cut++) {
            int rc = obj_describe_record(r->type, r->encver, r->buf, cut, line, 8);
            assert_true(rc == SMP_EPROTO || (rc >= 0 && strlen(line) <= 7));
        }
    }
    const uint8_t garbage[] = {0xff, 0xff, 0xff};
    assert_int_equal(obj_describe_record(OBJ_REC_REMOVE, 1, garbage, 3, line, sizeof(line)),
                     SMP_EPROTO);
    assert_int_equal(obj_describe_record(9, 1, garbage, 0, line, sizeof(line)), SMP_ENOTFOUND);
    assert_string_equal(obj_record_type_name(4), "UNKNOWN");
    free_log(&log);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Randomised consistency                                                    */
/* ------------------------------------------------------------------------ */

typedef struct dyn_log {
    obj_record *recs;
    size_t n, cap;
} dyn_log;

/* Apply r -- from its hold's decoded message when held is given, as the
 * master does, else from its bytes, as replay does -- and log it. */
static void dyn_apply_held(obj_store *st, dyn_log *log, obj_record *r, const obj_held *held)
{
    if (held)
        assert_int_equal(obj_apply_held(st, held), SMP_OK);
    else
        assert_int_equal(obj_apply_record(st, r->type, r->encver, r->buf, r->len), SMP_OK);
    if (log->n == log->cap) {
        log->cap = log->cap ? log->cap * 2 : 64;
        log->recs = realloc(log->recs, log->cap * sizeof(*log->recs));
        assert_non_null(log->recs);
    }
    log->recs[log->n++] = *r; /* the log takes the buffer */
    memset(r, 0, sizeof(*r));
}

static void dyn_apply(obj_store *st, dyn_log *log, obj_record *r)
{
    dyn_apply_held(st, log, r, NULL);
}

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static uint64_t ext_of(uint64_t size)
{
    return size == 0 ? 64 : (size + 63) / 64 * 64;
}

#define RKEYS 40

/* Random puts, ends, revokes, removals, evictions, cold copies and stale
 * cleanups: memory use always equals what objects and puts hold, and the
 * log replays (once, or each record twice) to the same state. */
static void test_random_ops_consistent(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    dyn_log log = {0};
    obj_record r = {0};
    const char *segs[3] = {"s0", "s1", "s2"};
    const uint64_t caps[3] = {4096, 8192, 2048};
    for (int i = 0; i < 3; i++) {
        char node[8];
        snprintf(node, sizeof(node), "n%d", i);
        assert_int_equal(obj_prepare_segment_mount(st, segs[i], node, caps[i], &r), SMP_OK);
        dyn_apply(st, &log, &r);
    }
    int64_t inflight[RKEYS];
    uint64_t started[RKEYS];
    for (int i = 0; i < RKEYS; i++) inflight[i] = -1;
    uint64_t x = 12345, now = 1;
    size_t evictions = 0;
    char key[16];
    for (int step = 0; step < 4000; step++, now++) {
        int k = (int)(rnd(&x) % RKEYS);
        snprintf(key, sizeof(key), "r/%02d", k);
        int op = (int)(rnd(&x) % 8);
        if (op == 0) {
            obj_put_params p = {key, rnd(&x) % 700, (smp_data_type)(rnd(&x) % 3), "",
                                (rnd(&x) & 1) ? "ta" : "", 0, (int)(rnd(&x) & 1), NULL};
            int rc = obj_put_start(st, &p, now, NULL);
            if (rc == SMP_OK) {
                inflight[k] = (int64_t)p.size;
                started[k] = now;
            } else {
                assert_true(rc == SMP_EEXIST || rc == SMP_EBUSY || rc == SMP_ENOSPC);
            }
        } else if (op == 1 || op == 2) {
            uint8_t sum[32] = {(uint8_t)k};
            int rc = op == 1 ? obj_prepare_put_end(st, key, sum, now, &r)
                             : obj_prepare_put_revoke(st, key, &r);
            assert_int_equal(rc, inflight[k] >= 0 ? SMP_OK : SMP_ENOTFOUND);
            if (rc == SMP_OK) {
                dyn_apply(st, &log, &r);
                inflight[k] = -1;
            }
        } else if (op == 3) {
            int rc = obj_prepare_remove(st, key, now, &r);
            assert_int_equal(rc, obj_exists(st, key) ? SMP_OK : SMP_ENOTFOUND);
            if (rc == SMP_OK) dyn_apply(st, &log, &r);
        } else if (op == 4) {
            obj_record_list l = {0};
            assert_int_equal(obj_plan_eviction(st, 0.6, 0.3, now, &l, NULL), SMP_OK);
            evictions += l.n;
            for (size_t i = 0; i < l.n; i++) dyn_apply(st, &log, &l.recs[i]);
            obj_record_list_free(&l);
        } else if (op == 5 && obj_exists(st, key)) {
            obj_replica reps[4];
            size_t n = 0;
            int rc = obj_get_replica_list(st, key, 0, 0, reps, 4, &n); /* now 0: no touch */
            if (rc == SMP_OK && n < 4) {
                reps[n] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_COMPLETE, "n0", NULL, 0,
                                        1, "/cold"};
                assert_int_equal(obj_prepare_set_replicas(st, key, reps, n + 1, &r), SMP_OK);
                dyn_apply(st, &log, &r);
            }
        } else if (op == 6) {
            int freed = obj_cleanup_stale_puts(st, now, 200);
            int expect = 0;
            for (int i = 0; i < RKEYS; i++) {
                if (inflight[i] >= 0 && now - started[i] >= 200) {
                    inflight[i] = -1;
                    expect++;
                }
            }
            assert_int_equal(freed, expect);
        }
        /* Memory use is exactly what complete memory replicas and puts hold. */
        uint64_t want = 0;
        for (int i = 0; i < RKEYS; i++) {
            char kk[16];
            snprintf(kk, sizeof(kk), "r/%02d", i);
            smp_object_info info = {.struct_size = sizeof(info)};
            if (obj_exists(st, kk)) {
                assert_int_equal(obj_object_info(st, kk, &info), SMP_OK);
                want += ext_of(info.size) * info.memory_replicas_readable;
            }
            if (inflight[i] >= 0) want += ext_of((uint64_t)inflight[i]);
        }
        assert_int_equal(used_of(st), want);
    }
    assert_true(log.n > 300);
    assert_true(evictions > 0);

    /* Drop the puts (soft state) and compare with replays and a snapshot. */
    obj_cleanup_stale_puts(st, now, 0);
    obj_store *a = new_store(NULL), *b = new_store(NULL), *c = new_store(NULL);
    for (size_t i = 0; i < log.n; i++) {
        const obj_record *q = &log.recs[i];
        assert_int_equal(obj_apply_record(a, q->type, q->encver, q->buf, q->len), SMP_OK);
        assert_int_equal(obj_apply_record(b, q->type, q->encver, q->buf, q->len), SMP_OK);
        assert_int_equal(obj_apply_record(b, q->type, q->encver, q->buf, q->len), SMP_OK);
    }
    assert_same_state(st, a);
    assert_same_state(st, b);
    buf snap = save(st);
    assert_int_equal(obj_store_load(c, snap.p, snap.n), SMP_OK);
    assert_same_state(st, c);
    free(snap.p);
    for (size_t i = 0; i < log.n; i++) obj_record_free(&log.recs[i]);
    free(log.recs);
    obj_store_destroy(a);
    obj_store_destroy(b);
    obj_store_destroy(c);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Records that lose a race                                                  */
/* ------------------------------------------------------------------------ */

/* Records prepared against an older incarnation (pin, remove, eviction to
 * cold) that are applied after an upsert change nothing; a put end applied
 * after its segment was unmounted creates the object without the lost
 * replica instead of failing (replay would stop there). Replaying the log
 * makes the same choices. */
static void test_records_that_lose_races(void **state)
{
    (void)state;
    static rec_log log;
    g_log = &log;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 1 << 16);
    mount(st, "s1", "n1", 1 << 10);
    assert_int_equal(put_full(st, "k", 100, "", "", 1), SMP_OK);
    obj_replica reps[2];
    size_t n;
    assert_int_equal(obj_get_replica_list(st, "k", 2, 0, reps, 2, &n), SMP_OK);
    reps[1] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_COMPLETE, "n0", NULL, 0, 100, "/c/k"};
    obj_record r = {0};
    assert_int_equal(obj_prepare_set_replicas(st, "k", reps, 2, &r), SMP_OK);
    apply_rec(st, &r);

    obj_record pin = {0}, rm = {0};
    assert_int_equal(obj_prepare_set_pin(st, "k", 1, &pin), SMP_OK);
    assert_int_equal(obj_prepare_remove(st, "k", 3, &rm), SMP_OK);
    obj_record_list evict = {0};
    assert_int_equal(obj_plan_eviction(st, 0.0, 0.0, 3, &evict, NULL), SMP_OK);
    assert_int_equal(evict.n, 1); /* keeps the cold copy: an update record */

    /* The master holds the keys of appended records: no new read leases. */
    obj_held *held = NULL;
    assert_non_null(rm.held); /* built while encoding: taken, not decoded */
    assert_int_equal(obj_hold_record(st, &rm, &held), SMP_OK);
    assert_non_null(held);
    assert_null(rm.held);
    assert_int_equal(obj_get_replica_list(st, "k", 4, 100, reps, 2, &n), SMP_EBUSY);
    obj_release_hold(st, held);
    assert_int_equal(obj_get_replica_list(st, "k", 4, 0, reps, 2, &n), SMP_OK);

    /* The upsert lands first. */
    obj_put_params p = {"k", 300, SMP_DATA_KV, "", "", 0, 1, NULL};
    assert_int_equal(obj_put_start(st, &p, 5, NULL), SMP_OK);
    uint8_t sum[32] = {7};
    assert_int_equal(obj_prepare_put_end(st, "k", sum, 6, &r), SMP_OK);
    apply_rec(st, &r);
    buf before = save(st);
    apply_rec(st, &pin);
    apply_rec(st, &rm);
    apply_rec(st, &evict.recs[0]);
    obj_record_list_free(&evict);
    buf after = save(st);
    assert_int_equal(before.n, after.n);
    assert_memory_equal(before.p, after.p, before.n);
    free(before.p);
    free(after.p);
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(st, "k", &info), SMP_OK);
    assert_int_equal(info.size, 300);
    assert_int_equal(info.hard_pinned, 0);
    assert_int_equal(info.memory_replicas_readable, 1);
    assert_int_equal(used_of(st), 320);

    /* A put end appended after the unmount of its segment. */
    p = (obj_put_params){"u", 10, SMP_DATA_KV, "", "", 0, 0, "n1"};
    obj_put_ticket t;
    assert_int_equal(obj_put_start(st, &p, 7, &t), SMP_OK);
    assert_string_equal(t.segment, "s1");
    obj_record unmount = {0}, end = {0};
    assert_int_equal(obj_prepare_segment_unmount(st, "s1", &unmount), SMP_OK);
    assert_int_equal(obj_prepare_put_end(st, "u", sum, 8, &end), SMP_OK);
    apply_rec(st, &unmount);
    apply_rec(st, &end);
    assert_true(obj_exists(st, "u"));
    assert_int_equal(obj_object_info(st, "u", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 0);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.replicas_dropped, 1);
    assert_int_equal(s.puts_in_flight, 0);

    /* A PUT_END naming the range of another in-flight put takes it: the put
     * is cancelled (replay, which has no puts, agrees). */
    p = (obj_put_params){"v", 10, SMP_DATA_KV, "", "", 0, 0, NULL};
    assert_int_equal(obj_put_start(st, &p, 9, &t), SMP_OK);
    assert_int_equal(obj_prepare_put_end(st, "v", sum, 9, &end), SMP_OK);
    assert_int_equal(obj_prepare_put_revoke(st, "v", &r), SMP_OK);
    apply_rec(st, &r);
    p.key = "w";
    obj_put_ticket t2;
    assert_int_equal(obj_put_start(st, &p, 9, &t2), SMP_OK);
    assert_int_equal(t2.offset, t.offset); /* first fit reuses the range */
    apply_rec(st, &end);
    assert_true(obj_exists(st, "v"));
    assert_int_equal(obj_prepare_put_end(st, "w", sum, 10, &r), SMP_ENOTFOUND);
    obj_store_stats(st, &s);
    assert_int_equal(s.puts_cancelled, 1);
    assert_int_equal(s.puts_in_flight, 0);

    /* A crafted PUT_END listing the same range twice, while its own put is
     * in flight: the duplicate is dropped, nothing else is touched. */
    p.key = "x";
    assert_int_equal(obj_put_start(st, &p, 11, &t), SMP_OK);
    assert_int_equal(obj_prepare_put_end(st, "x", sum, 11, &end), SMP_OK);
    Hostrec__ObjectRecord *om = hostrec__object_record__unpack(NULL, end.len, end.buf);
    assert_non_null(om);
    Hostrec__Replica *two[2] = {om->replicas[0], om->replicas[0]};
    Hostrec__Replica **saved_reps = om->replicas;
    om->replicas = two;
    om->n_replicas = 2;
    obj_record_free(&end);
    end.type = OBJ_REC_PUT_END;
    end.encver = OBJ_REC_ENCVER;
    end.len = hostrec__object_record__get_packed_size(om);
    end.buf = malloc(end.len);
    assert_non_null(end.buf);
    hostrec__object_record__pack(om, end.buf);
    om->replicas = saved_reps;
    om->n_replicas = 1;
    hostrec__object_record__free_unpacked(om, NULL);
    uint64_t used_before = used_of(st);
    apply_rec(st, &end);
    assert_int_equal(used_of(st), used_before);
    assert_int_equal(obj_object_info(st, "x", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 1);
    obj_store_stats(st, &s);
    assert_int_equal(s.replicas_dropped, 2);
    assert_int_equal(s.puts_in_flight, 0);
    g_log = NULL;

    obj_store *replica = new_store(NULL);
    for (size_t i = 0; i < log.n; i++)
        assert_int_equal(obj_apply_record(replica, log.recs[i].type, log.recs[i].encver,
                                          log.recs[i].buf, log.recs[i].len), SMP_OK);
    assert_same_state(st, replica);
    free_log(&log);
    obj_store_destroy(replica);
    obj_store_destroy(st);
}

/* The master's pipeline with a slow OpLog: records are prepared against the
 * current state, appended to a queue (and held), and applied a few steps
 * later, while puts, reads with leases, cleanups and segment changes go on.
 * Every apply succeeds, memory use always matches what is held, and the log
 * of applied records replays to the same state. */
typedef struct pipe_q {
    obj_record *recs;
    obj_held **held;
    size_t head, n, cap;
} pipe_q;

static void pipe_push(obj_store *st, pipe_q *q, obj_record *r)
{
    if (q->n == q->cap) {
        q->cap = q->cap ? q->cap * 2 : 64;
        q->recs = realloc(q->recs, q->cap * sizeof(*q->recs));
        q->held = realloc(q->held, q->cap * sizeof(*q->held));
        assert_non_null(q->recs);
        assert_non_null(q->held);
    }
    assert_int_equal(obj_hold_record(st, r, &q->held[q->n]), SMP_OK);
    q->recs[q->n++] = *r;
    memset(r, 0, sizeof(*r));
}

static void pipe_apply_one(obj_store *st, pipe_q *q, dyn_log *log)
{
    if (q->head == q->n) return;
    obj_held *held = q->held[q->head];
    obj_record *r = &q->recs[q->head++];
    obj_record copy = *r;
    memset(r, 0, sizeof(*r));
    /* every other held record applies from its hold (the master's way),
     * the rest from its bytes; the log replays to the same state either way */
    dyn_apply_held(st, log, &copy, q->head % 2 ? held : NULL);
    obj_release_hold(st, held);
}

static void test_random_pipeline_consistent(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    dyn_log log = {0};
    pipe_q q = {0};
    obj_record r = {0};
    const char *segs[3] = {"s0", "s1", "s2"};
    for (int i = 0; i < 3; i++) {
        char node[8];
        snprintf(node, sizeof(node), "n%d", i);
        assert_int_equal(obj_prepare_segment_mount(st, segs[i], node, 2048u << i, &r), SMP_OK);
        dyn_apply(st, &log, &r);
    }
    set_managed(st, "grp", 0);
    uint64_t x = 987654321, now = 1;
    size_t adds = 0;
    char key[16];
    for (int step = 0; step < 6000; step++, now++) {
        snprintf(key, sizeof(key), "r/%02d", (int)(rnd(&x) % 12));
        switch (rnd(&x) % 11) {
        case 0:
        case 1: {
            char node[8];
            snprintf(node, sizeof(node), "n%d", (int)(rnd(&x) % 3));
            obj_put_params p = {key, rnd(&x) % 600, (smp_data_type)(rnd(&x) % 3),
                                (rnd(&x) % 4) ? "" : "grp", "", 0, (int)(rnd(&x) & 1),
                                (rnd(&x) & 1) ? node : NULL};
            int rc = obj_put_start(st, &p, now, NULL);
            assert_true(rc == SMP_OK || rc == SMP_EEXIST || rc == SMP_EBUSY ||
                        rc == SMP_ENOSPC || rc == SMP_EVETO); /* grp managed, no guard */
            break;
        }
        case 2: {
            uint8_t sum[32] = {(uint8_t)now};
            if (obj_prepare_put_end(st, key, sum, now, &r) == SMP_OK) pipe_push(st, &q, &r);
            break;
        }
        case 3:
            if (obj_prepare_put_revoke(st, key, &r) == SMP_OK) pipe_push(st, &q, &r);
            break;
        case 4:
            if (obj_prepare_remove(st, key, now, &r) == SMP_OK) pipe_push(st, &q, &r);
            break;
        case 5: {
            obj_record_list l = {0};
            assert_int_equal(obj_plan_eviction(st, 0.5, 0.25, now, &l, NULL), SMP_OK);
            for (size_t i = 0; i < l.n; i++) pipe_push(st, &q, &l.recs[i]);
            obj_record_list_free(&l);
            break;
        }
        case 6: {
            obj_replica reps[4];
            size_t n = 0;
            /* now 0: no access refresh (soft, not logged); lease until now+20 */
            int rc = obj_get_replica_list(st, key, 0, now + 20, reps, 4, &n);
            if (rc == SMP_OK && n < 4 && (rnd(&x) & 1)) {
                reps[n] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_COMPLETE, "n0", NULL, 0,
                                        1, "/cold"};
                assert_int_equal(obj_prepare_set_replicas(st, key, reps, n + 1, &r), SMP_OK);
                pipe_push(st, &q, &r);
            }
            break;
        }
        case 7:
            if (obj_prepare_set_pin(st, key, (int)(rnd(&x) & 1), &r) == SMP_OK)
                pipe_push(st, &q, &r);
            break;
        case 8:
            obj_cleanup_stale_puts(st, now, 10); /* shorter than the OpLog's delay */
            break;
        case 10: {
            /* One more memory copy: reserve, then commit or release. */
            char node[8];
            snprintf(node, sizeof(node), "n%d", (int)(rnd(&x) % 3));
            int rc = obj_reserve_replica(st, key, node, now, NULL);
            assert_true(rc == SMP_OK || rc == SMP_ENOTFOUND || rc == SMP_EBUSY ||
                        rc == SMP_ENOSPC);
            if (rnd(&x) % 4 == 0) {
                rc = obj_release_reservation(st, key);
                assert_true(rc == SMP_OK || rc == SMP_ENOTFOUND);
            } else if (obj_prepare_add_replica(st, key, NULL, &r) == SMP_OK) {
                pipe_push(st, &q, &r);
                adds++;
            }
            break;
        }
        case 9:
            if (rnd(&x) % 8 == 0) {
                /* Against the applied state: the queue may hold the opposite. */
                int rc = obj_prepare_segment_unmount(st, "s2", &r);
                if (rc == SMP_ENOTFOUND) rc = obj_prepare_segment_mount(st, "s2", "n2", 8192, &r);
                assert_int_equal(rc, SMP_OK);
                pipe_push(st, &q, &r);
            } else if (rnd(&x) % 8 == 0) {
                assert_int_equal(obj_prepare_group_managed(st, "grp", TEST_OWNER, (int)(rnd(&x) & 1), &r),
                                 SMP_OK);
                pipe_push(st, &q, &r);
            }
            break;
        default:
            break;
        }
        if (rnd(&x) % 25 == 0) /* the OpLog makes a burst durable */
            while (q.head < q.n) pipe_apply_one(st, &q, &log);
    }
    while (q.head < q.n) pipe_apply_one(st, &q, &log);
    free(q.recs);
    free(q.held);
    obj_cleanup_stale_puts(st, now, 0);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.puts_in_flight, 0);
    assert_int_equal(s.reservations_in_flight, 0);
    assert_true(adds > 20);
    assert_true(log.n > 400);
    assert_true(s.replicas_dropped > 0); /* the races did happen */
    assert_true(s.puts_cancelled > 0);

    /* Memory use is what the objects' memory replicas hold; no holds left. */
    uint64_t want = 0;
    for (int i = 0; i < RKEYS; i++) {
        snprintf(key, sizeof(key), "r/%02d", i);
        smp_object_info info = {.struct_size = sizeof(info)};
        if (obj_object_info(st, key, &info) != SMP_OK) continue;
        want += ext_of(info.size) * info.memory_replicas_readable;
        obj_replica reps[4];
        size_t n;
        assert_int_not_equal(obj_get_replica_list(st, key, 0, 0, reps, 4, &n), SMP_EBUSY);
    }
    assert_int_equal(used_of(st), want);

    obj_store *a = new_store(NULL), *b = new_store(NULL), *c = new_store(NULL);
    for (size_t i = 0; i < log.n; i++) {
        const obj_record *rr = &log.recs[i];
        assert_int_equal(obj_apply_record(a, rr->type, rr->encver, rr->buf, rr->len), SMP_OK);
        assert_int_equal(obj_apply_record(b, rr->type, rr->encver, rr->buf, rr->len), SMP_OK);
        assert_int_equal(obj_apply_record(b, rr->type, rr->encver, rr->buf, rr->len), SMP_OK);
    }
    assert_same_state(st, a);
    assert_same_state(st, b);
    buf snap = save(st);
    assert_int_equal(obj_store_load(c, snap.p, snap.n), SMP_OK);
    assert_same_state(st, c);
    free(snap.p);
    for (size_t i = 0; i < log.n; i++) obj_record_free(&log.recs[i]);
    free(log.recs);
    obj_store_destroy(a);
    obj_store_destroy(b);
    obj_store_destroy(c);
    obj_store_destroy(st);
}

/* ------------------------------------------------------------------------ */
/* Adding a memory replica, replica queries                                  */
/* ------------------------------------------------------------------------ */

static obj_stats stats_of(const obj_store *st)
{
    obj_stats s;
    obj_store_stats(st, &s);
    return s;
}

/* Reserve and commit one more memory replica of key; returns the ticket. */
static obj_put_ticket add_replica(obj_store *st, const char *key, const char *node, uint64_t now)
{
    obj_put_ticket t;
    assert_int_equal(obj_reserve_replica(st, key, node, now, &t), SMP_OK);
    obj_record r = {0};
    assert_int_equal(obj_prepare_add_replica(st, key, &t, &r), SMP_OK);
    apply_rec(st, &r);
    return t;
}

static void assert_same_bytes(const buf *a, const buf *b)
{
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->p, b->p, a->n);
}

static obj_store *replay_log(const rec_log *log, size_t from, size_t to, obj_store *st)
{
    if (!st) st = new_store(NULL);
    for (size_t i = from; i < to; i++)
        assert_int_equal(obj_apply_record(st, log->recs[i].type, log->recs[i].encver,
                                          log->recs[i].buf, log->recs[i].len), SMP_OK);
    return st;
}

/* A reservation plus its add-replica record give the object a second memory
 * replica, both counted in memory use; applying the record again changes
 * nothing; replay (fresh, doubled, and snapshot + the log's tail) and a
 * snapshot of the result agree. The record holds nothing. */
static void test_add_replica_reserve_and_add(void **state)
{
    (void)state;
    static rec_log log;
    g_log = &log;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 4096);
    mount(st, "s1", "n1", 4096);
    assert_int_equal(put_full(st, "k", 100, "g", "t", 5), SMP_OK);
    assert_int_equal(put_full(st, "other", 10, "", "", 6), SMP_OK);
    assert_int_equal(used_of(st), 128 + 64);
    buf before_add = save(st);
    size_t log_before_add = log.n;

    obj_put_ticket t;
    assert_int_equal(obj_reserve_replica(st, "k", "n1", 7, &t), SMP_OK);
    assert_string_equal(t.segment, "s1");
    assert_string_equal(t.node, "n1");
    assert_int_equal(t.offset % OBJ_ALIGN, 0);
    assert_int_equal(t.length, 100);
    assert_int_equal(used_of(st), 128 + 64 + 128);
    assert_int_equal(stats_of(st).reservations_in_flight, 1);
    assert_int_equal(obj_reserve_replica(st, "k", "n1", 7, NULL), SMP_EBUSY);
    /* The reservation is soft: nothing durable changed yet. */
    buf reserved = save(st);
    assert_same_bytes(&before_add, &reserved);
    free(reserved.p);

    obj_record r = {0};
    obj_put_ticket wrong = t;
    wrong.offset += OBJ_ALIGN;
    assert_int_equal(obj_prepare_add_replica(st, "k", &wrong, &r), SMP_EINVAL);
    wrong = t;
    wrong.segment = "s0";
    assert_int_equal(obj_prepare_add_replica(st, "k", &wrong, &r), SMP_EINVAL);
    assert_int_equal(obj_prepare_add_replica(st, "other", NULL, &r), SMP_ENOTFOUND);
    assert_int_equal(obj_prepare_add_replica(st, "nope", NULL, &r), SMP_ENOTFOUND);
    assert_int_equal(obj_prepare_add_replica(st, "k", &t, &r), SMP_OK);
    assert_int_equal(r.type, OBJ_REC_PUT_END);
    char line[256];
    assert_true(obj_describe_record(r.type, r.encver, r.buf, r.len, line, sizeof(line)) > 0);
    assert_non_null(strstr(line, "PUT_END add_replica key=k"));
    assert_non_null(strstr(line, "segment=s1"));

    /* Adding a copy removes nothing: no hold, reads go on. */
    obj_replica reps[4];
    size_t n;
    obj_held *held = NULL;
    assert_int_equal(obj_hold_record(st, &r, &held), SMP_OK);
    assert_null(held); /* an add-replica record removes nothing */
    assert_int_equal(obj_get_replica_list(st, "k", 0, 0, reps, 4, &n), SMP_OK);
    obj_release_hold(st, held);
    obj_record again = {r.type, r.encver, malloc(r.len ? r.len : 1), r.len, NULL};
    assert_non_null(again.buf);
    memcpy(again.buf, r.buf, r.len);
    apply_rec(st, &r);

    assert_int_equal(obj_object_replicas(st, "k", reps, 4, &n), SMP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(reps[0].kind, SMP_REPLICA_MEMORY);
    assert_string_equal(reps[0].segment, "s0");
    assert_int_equal(reps[1].kind, SMP_REPLICA_MEMORY);
    assert_int_equal(reps[1].status, OBJ_REPLICA_COMPLETE);
    assert_string_equal(reps[1].segment, "s1");
    assert_string_equal(reps[1].node, "n1");
    assert_int_equal(reps[1].offset, t.offset);
    assert_int_equal(reps[1].length, 100);
    assert_int_equal(obj_get_replica_list(st, "k", 0, 0, reps, 4, &n), SMP_OK);
    assert_int_equal(n, 2);
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(st, "k", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 2);
    uint64_t objs, bytes;
    obj_tenant_usage(st, "t", &objs, &bytes); /* an object's bytes, not its copies' */
    assert_int_equal(objs, 1);
    assert_int_equal(bytes, 100);
    assert_int_equal(obj_group_count(st, "g"), 1);
    obj_stats s = stats_of(st);
    assert_int_equal(s.replicas_by_kind[SMP_REPLICA_MEMORY], 3);
    assert_int_equal(s.replica_bytes_by_kind[SMP_REPLICA_MEMORY], 210);
    assert_int_equal(s.reservations_in_flight, 0);
    assert_int_equal(s.replicas_dropped, 0);
    assert_int_equal(used_of(st), 128 + 64 + 128);
    assert_int_equal(obj_prepare_add_replica(st, "k", NULL, &r), SMP_ENOTFOUND); /* consumed */
    assert_int_equal(obj_release_reservation(st, "k"), SMP_ENOTFOUND);

    /* Applying the record twice adds nothing. */
    buf once = save(st);
    apply_rec(st, &again);
    buf twice = save(st);
    assert_same_bytes(&once, &twice);
    free(twice.p);
    assert_int_equal(used_of(st), 128 + 64 + 128);
    assert_int_equal(stats_of(st).replicas_by_kind[SMP_REPLICA_MEMORY], 3);
    g_log = NULL;

    /* Replay: fresh, every record twice, and snapshot before the add + tail. */
    obj_store *a = replay_log(&log, 0, log.n, NULL);
    assert_same_state(st, a);
    obj_store *b = new_store(NULL);
    for (size_t i = 0; i < log.n; i++) replay_log(&log, i, i + 1, replay_log(&log, i, i + 1, b));
    assert_same_state(st, b);
    obj_store *c = new_store(NULL);
    assert_int_equal(obj_store_load(c, before_add.p, before_add.n), SMP_OK);
    replay_log(&log, log_before_add, log.n, c);
    assert_same_state(st, c);
    /* Snapshot after the add, round trip, and a log overlapping it. */
    obj_store *d = new_store(NULL);
    assert_int_equal(obj_store_load(d, once.p, once.n), SMP_OK);
    assert_same_state(st, d);
    assert_int_equal(used_of(d), 128 + 64 + 128);
    replay_log(&log, log_before_add, log.n, d);
    assert_same_state(st, d);
    /* The loaded allocator knows the added range. */
    obj_put_params p = {"fill", 4096 - 128 + 1, SMP_DATA_KV, "", "", 0, 0, "n1"};
    assert_int_equal(obj_put_start(d, &p, 9, NULL), SMP_ENOSPC);
    p.size = 4096 - 128;
    assert_int_equal(obj_put_start(d, &p, 9, NULL), SMP_OK);

    free(once.p);
    free(before_add.p);
    free_log(&log);
    obj_store_destroy(a);
    obj_store_destroy(b);
    obj_store_destroy(c);
    obj_store_destroy(d);
    obj_store_destroy(st);
}

/* The COLD -> HOT path: an object evicted to its cold replica gets a memory
 * replica back, becomes readable from memory and evictable again. */
static void test_add_replica_cold_to_hot(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 1024);
    assert_int_equal(put_full(st, "w", 300, "", "", 1), SMP_OK);
    obj_replica reps[3];
    size_t n;
    assert_int_equal(obj_object_replicas(st, "w", reps, 3, &n), SMP_OK);
    reps[1] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_COMPLETE, "n0", NULL, 0, 300, "/c/w"};
    obj_record r = {0};
    assert_int_equal(obj_prepare_set_replicas(st, "w", reps, 2, &r), SMP_OK);
    apply_rec(st, &r);
    obj_record_list l = {0};
    assert_int_equal(obj_plan_eviction(st, 0.0, 0.0, 2, &l, NULL), SMP_OK);
    assert_int_equal(l.n, 1);
    apply_list(st, &l);
    assert_int_equal(used_of(st), 0);
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(st, "w", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 0);
    assert_int_equal(info.cold_replicas_readable, 1);

    obj_put_ticket t = add_replica(st, "w", "n0", 3);
    assert_string_equal(t.segment, "s0");
    assert_int_equal(used_of(st), 320);
    assert_int_equal(obj_object_info(st, "w", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 1);
    assert_int_equal(info.cold_replicas_readable, 1);
    assert_int_equal(obj_object_replicas(st, "w", reps, 3, &n), SMP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(reps[0].kind, SMP_REPLICA_COLD); /* kept, in place */
    assert_string_equal(reps[0].path, "/c/w");
    assert_int_equal(reps[1].kind, SMP_REPLICA_MEMORY);
    /* Back on the LRU list: an eviction plan drops the memory copy again. */
    assert_int_equal(obj_plan_eviction(st, 0.0, 0.0, 4, &l, NULL), SMP_OK);
    assert_int_equal(l.n, 1);
    apply_list(st, &l);
    assert_int_equal(used_of(st), 0);
    obj_store_destroy(st);
}

/* An add-replica record about a removed or replaced incarnation is a no-op:
 * it adds nothing, frees its own reservation, and frees no reservation of
 * the new incarnation even when that one holds the very same range. */
static void test_add_replica_after_remove_or_overwrite(void **state)
{
    (void)state;
    static rec_log log;
    g_log = &log;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 1024);
    mount(st, "s1", "n1", 1024);
    uint8_t sum[32] = {3};
    obj_record r = {0}, add = {0};

    /* Removed between prepare and apply. */
    assert_int_equal(put_full(st, "gone", 100, "", "", 1), SMP_OK);
    assert_int_equal(obj_reserve_replica(st, "gone", "n1", 2, NULL), SMP_OK);
    assert_int_equal(obj_prepare_add_replica(st, "gone", NULL, &add), SMP_OK);
    remove_key(st, "gone", 3);
    assert_int_equal(used_of(st), 128); /* only the reservation */
    assert_int_equal(obj_prepare_add_replica(st, "gone", NULL, &r), SMP_ENOTFOUND);
    apply_rec(st, &add);
    assert_false(obj_exists(st, "gone"));
    assert_int_equal(used_of(st), 0);
    assert_int_equal(stats_of(st).reservations_in_flight, 0);
    assert_int_equal(stats_of(st).replicas_dropped, 0);

    /* Overwritten between prepare and apply. */
    assert_int_equal(put_full(st, "k", 100, "", "", 4), SMP_OK);
    assert_int_equal(obj_reserve_replica(st, "k", "n1", 5, NULL), SMP_OK);
    assert_int_equal(obj_prepare_add_replica(st, "k", NULL, &add), SMP_OK);
    obj_put_params p = {"k", 200, SMP_DATA_KV, "", "", 0, 1, "n0"};
    assert_int_equal(obj_put_start(st, &p, 6, NULL), SMP_OK);
    assert_int_equal(obj_prepare_put_end(st, "k", sum, 6, &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(used_of(st), 256 + 128);
    assert_int_equal(obj_prepare_add_replica(st, "k", NULL, &r), SMP_ENOTFOUND);
    apply_rec(st, &add);
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(st, "k", &info), SMP_OK);
    assert_int_equal(info.size, 200);
    assert_int_equal(info.memory_replicas_readable, 1);
    assert_int_equal(used_of(st), 256);
    assert_int_equal(stats_of(st).reservations_in_flight, 0);

    /* The stale record names the range a reservation of the new incarnation
     * holds now: it is left alone, and the new one's record adds it. */
    obj_put_ticket t1, t2;
    assert_int_equal(obj_reserve_replica(st, "k", "n1", 7, &t1), SMP_OK);
    assert_int_equal(obj_prepare_add_replica(st, "k", &t1, &add), SMP_OK);
    assert_int_equal(obj_release_reservation(st, "k"), SMP_OK);
    assert_int_equal(used_of(st), 256);
    p.overwrite = 1;
    p.size = 150;
    assert_int_equal(obj_put_start(st, &p, 8, NULL), SMP_OK);
    assert_int_equal(obj_prepare_put_end(st, "k", sum, 8, &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(obj_reserve_replica(st, "k", "n1", 9, &t2), SMP_OK);
    assert_string_equal(t2.segment, t1.segment);
    assert_int_equal(t2.offset, t1.offset);
    uint64_t used = used_of(st);
    apply_rec(st, &add); /* stale: incarnation of the 200-byte object */
    assert_int_equal(used_of(st), used);
    assert_int_equal(stats_of(st).reservations_in_flight, 1);
    assert_int_equal(obj_object_info(st, "k", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 1);
    assert_int_equal(obj_prepare_add_replica(st, "k", &t2, &add), SMP_OK);
    apply_rec(st, &add);
    assert_int_equal(obj_object_info(st, "k", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 2);
    assert_int_equal(used_of(st), used);
    assert_int_equal(stats_of(st).reservations_in_flight, 0);
    g_log = NULL;

    obj_store *a = replay_log(&log, 0, log.n, NULL);
    assert_same_state(st, a);
    free_log(&log);
    obj_store_destroy(a);
    obj_store_destroy(st);
}

/* Reservations are soft state: ENOSPC with no room, released on a failed
 * load, cleaned up when stale (no guard asked), dropped with their segment,
 * and yielding to records that claim their range. A record whose
 * reservation is gone still adds the replica when the range is free, taking
 * it from an in-flight put as replay would. */
static void test_add_replica_reservations(void **state)
{
    (void)state;
    static rec_log log;
    g_log = &log;
    test_guard g = {.veto = 1, .loaded = 1}; /* loaded, vetoes everything */
    obj_store *st = new_store(&g);
    mount(st, "s0", "n0", 256);
    obj_put_params p = {"k", 200, SMP_DATA_KV, "", "", 0, 0, NULL};
    assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_OK);
    uint8_t sum[32] = {5};
    obj_record r = {0}, add = {0};
    assert_int_equal(obj_prepare_put_end(st, "k", sum, 1, &r), SMP_OK);
    apply_rec(st, &r);

    assert_int_equal(obj_reserve_replica(st, "nope", NULL, 2, NULL), SMP_ENOTFOUND);
    assert_int_equal(obj_reserve_replica(st, "", NULL, 2, NULL), SMP_EINVAL);
    assert_int_equal(obj_release_reservation(st, "k"), SMP_ENOTFOUND);
    buf full = save(st);
    assert_int_equal(obj_reserve_replica(st, "k", "n0", 2, NULL), SMP_ENOSPC);
    assert_int_equal(used_of(st), 256);
    assert_int_equal(stats_of(st).reservations_in_flight, 0);
    buf after = save(st);
    assert_same_bytes(&full, &after);
    free(full.p);
    free(after.p);

    /* Elsewhere when the preferred node is full; a release frees it. */
    mount(st, "s1", "n1", 1024);
    obj_put_ticket t;
    assert_int_equal(obj_reserve_replica(st, "k", "n0", 2, &t), SMP_OK);
    assert_string_equal(t.segment, "s1");
    assert_int_equal(used_of(st), 512);
    assert_int_equal(obj_release_reservation(st, "k"), SMP_OK);
    assert_int_equal(used_of(st), 256);
    assert_int_equal(obj_release_reservation(st, "k"), SMP_ENOTFOUND);
    assert_int_equal(obj_prepare_add_replica(st, "k", NULL, &r), SMP_ENOTFOUND);

    /* Stale cleanup frees it without asking the (vetoing) guard. */
    assert_int_equal(obj_reserve_replica(st, "k", NULL, 100, NULL), SMP_OK);
    assert_int_equal(obj_cleanup_stale_puts(st, 150, 100), 0);
    assert_int_equal(used_of(st), 512);
    int calls = g.calls;
    assert_int_equal(obj_cleanup_stale_puts(st, 200, 100), 1);
    assert_int_equal(g.calls, calls);
    assert_int_equal(used_of(st), 256);
    assert_int_equal(stats_of(st).reservations_in_flight, 0);

    /* Its record still applies after the cleanup: the range is free. */
    assert_int_equal(obj_reserve_replica(st, "k", NULL, 300, &t), SMP_OK);
    assert_int_equal(obj_prepare_add_replica(st, "k", &t, &add), SMP_OK);
    assert_int_equal(obj_cleanup_stale_puts(st, 1000, 10), 1);
    assert_int_equal(used_of(st), 256);
    apply_rec(st, &add);
    assert_int_equal(used_of(st), 512);
    smp_object_info info = {.struct_size = sizeof(info)};
    assert_int_equal(obj_object_info(st, "k", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 2);

    /* A record whose released range a put took meanwhile cancels the put. */
    obj_replica reps[4];
    size_t n;
    assert_int_equal(obj_object_replicas(st, "k", reps, 4, &n), SMP_OK);
    assert_int_equal(n, 2);
    reps[0] = reps[1]; /* keep only the copy in s1 */
    assert_int_equal(obj_prepare_set_replicas(st, "k", reps, 1, &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(used_of(st), 256);
    assert_int_equal(obj_reserve_replica(st, "k", "n0", 1001, &t), SMP_OK);
    assert_string_equal(t.segment, "s0");
    assert_int_equal(obj_prepare_add_replica(st, "k", &t, &add), SMP_OK);
    assert_int_equal(obj_release_reservation(st, "k"), SMP_OK);
    g.loaded = 0;
    obj_put_params q = {"p", 10, SMP_DATA_KV, "", "", 0, 0, "n0"};
    obj_put_ticket qt;
    assert_int_equal(obj_put_start(st, &q, 1002, &qt), SMP_OK);
    assert_string_equal(qt.segment, "s0");
    assert_int_equal(qt.offset, t.offset);
    apply_rec(st, &add);
    obj_stats s = stats_of(st);
    assert_int_equal(s.puts_cancelled, 1);
    assert_int_equal(s.puts_in_flight, 0);
    assert_int_equal(obj_prepare_put_end(st, "p", sum, 1003, &r), SMP_ENOTFOUND);
    assert_int_equal(obj_object_info(st, "k", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 2);

    /* A PUT_END claiming a reserved range cancels the reservation. */
    assert_int_equal(obj_prepare_set_replicas(st, "k", reps, 1, &r), SMP_OK);
    apply_rec(st, &r); /* s0 free again */
    obj_record end = {0};
    assert_int_equal(obj_put_start(st, &q, 1004, &qt), SMP_OK);
    assert_int_equal(obj_prepare_put_end(st, "p", sum, 1004, &end), SMP_OK);
    assert_int_equal(obj_prepare_put_revoke(st, "p", &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(obj_reserve_replica(st, "k", "n0", 1005, &t), SMP_OK);
    assert_string_equal(t.segment, "s0");
    assert_int_equal(t.offset, qt.offset);
    apply_rec(st, &end);
    s = stats_of(st);
    assert_int_equal(s.reservations_cancelled, 1);
    assert_int_equal(s.reservations_in_flight, 0);
    assert_int_equal(obj_prepare_add_replica(st, "k", &t, &r), SMP_ENOTFOUND);
    assert_true(obj_exists(st, "p"));

    /* Unmounting its segment drops a reservation. */
    mount(st, "s2", "n2", 1024);
    assert_int_equal(obj_reserve_replica(st, "k", "n2", 1006, &t), SMP_OK);
    assert_string_equal(t.segment, "s2");
    assert_int_equal(obj_prepare_add_replica(st, "k", &t, &add), SMP_OK);
    assert_int_equal(obj_prepare_segment_unmount(st, t.segment, &r), SMP_OK);
    apply_rec(st, &r);
    assert_int_equal(stats_of(st).reservations_in_flight, 0);
    uint64_t dropped = stats_of(st).replicas_dropped;
    apply_rec(st, &add); /* its segment is gone: nothing added */
    assert_int_equal(stats_of(st).replicas_dropped, dropped + 1);
    assert_int_equal(obj_object_info(st, "k", &info), SMP_OK);
    assert_int_equal(info.memory_replicas_readable, 1);
    g_log = NULL;

    obj_store *a = replay_log(&log, 0, log.n, NULL);
    assert_same_state(st, a);
    free_log(&log);
    obj_store_destroy(a);
    obj_store_destroy(st);
}

/* Malformed add-replica records are refused and change nothing. */
static void test_add_replica_malformed(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 4096);
    assert_int_equal(put_full(st, "k", 100, "", "", 1), SMP_OK);
    obj_record add = {0};
    assert_int_equal(obj_reserve_replica(st, "k", NULL, 2, NULL), SMP_OK);
    assert_int_equal(obj_prepare_add_replica(st, "k", NULL, &add), SMP_OK);
    Hostrec__ObjectRecord *m = hostrec__object_record__unpack(NULL, add.len, add.buf);
    assert_non_null(m);
    assert_non_null(m->add_replica);
    assert_true(m->update_only);
    assert_int_equal(m->n_replicas, 2); /* the whole list, for older readers */
    uint8_t *b;
    size_t len;

    m->update_only = 0;
    pack_object(m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    m->update_only = 1;
    m->add_replica->kind = SMP_REPLICA_COLD;
    pack_object(m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    m->add_replica->kind = SMP_REPLICA_MEMORY;
    m->add_replica->length = 99;
    pack_object(m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    m->add_replica->length = 100;
    m->add_replica->offset += 1;
    pack_object(m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    m->add_replica->offset -= 1;
    char *seg = m->add_replica->segment;
    m->add_replica->segment = "";
    pack_object(m, &b, &len);
    expect_rejected(st, OBJ_REC_PUT_END, b, len, SMP_EPROTO);
    free(b);
    m->add_replica->segment = seg;
    hostrec__object_record__free_unpacked(m, NULL);
    assert_int_equal(stats_of(st).reservations_in_flight, 1);
    apply_rec(st, &add);
    assert_int_equal(stats_of(st).reservations_in_flight, 0);
    obj_store_destroy(st);
}

typedef struct seen_rep {
    char key[16];
    smp_replica_kind kind;
    obj_replica_status status;
    char node[8];
} seen_rep;

typedef struct seen_list {
    seen_rep v[16];
    size_t n;
    size_t stop_after; /* 0: never */
} seen_list;

static int collect_replica(void *arg, const char *key, const obj_replica *rep)
{
    seen_list *l = arg;
    assert_true(l->n < 16);
    seen_rep *s = &l->v[l->n++];
    snprintf(s->key, sizeof(s->key), "%s", key);
    snprintf(s->node, sizeof(s->node), "%s", rep->node);
    s->kind = rep->kind;
    s->status = rep->status;
    if (rep->kind == SMP_REPLICA_MEMORY) assert_non_null(rep->segment);
    else assert_non_null(rep->path);
    return l->stop_after && l->n == l->stop_after;
}

/* Replica queries see every replica, memory and cold, of any status, in key
 * order; obj_object_replicas touches neither leases nor access times and is
 * not refused by holds. */
static void test_visit_and_object_replicas(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 4096);
    mount(st, "s1", "n1", 4096);
    obj_put_params p = {"c", 100, SMP_DATA_KV, "", "", 0, 0, "n0"};
    uint8_t sum[32] = {1};
    obj_record r = {0};
    const char *keys[3] = {"c", "a", "b"};
    const char *nodes[3] = {"n0", "n0", "n1"};
    for (int i = 0; i < 3; i++) {
        p.key = keys[i];
        p.prefer_node = nodes[i];
        assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_OK);
        assert_int_equal(obj_prepare_put_end(st, keys[i], sum, 1, &r), SMP_OK);
        apply_rec(st, &r);
    }
    /* a: memory on n0 + complete cold on n1; c: memory n0 + n1, failed cold n0. */
    obj_replica reps[4];
    size_t n;
    assert_int_equal(obj_object_replicas(st, "a", reps, 4, &n), SMP_OK);
    assert_int_equal(n, 1);
    reps[1] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_COMPLETE, "n1", NULL, 0, 100, "/c/a"};
    assert_int_equal(obj_prepare_set_replicas(st, "a", reps, 2, &r), SMP_OK);
    apply_rec(st, &r);
    add_replica(st, "c", "n1", 2);
    assert_int_equal(obj_object_replicas(st, "c", reps, 4, &n), SMP_OK);
    assert_int_equal(n, 2);
    reps[2] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_FAILED, "n0", NULL, 0, 100, "/c/c"};
    assert_int_equal(obj_prepare_set_replicas(st, "c", reps, 3, &r), SMP_OK);
    apply_rec(st, &r);
    p.key = "d"; /* in flight only: not visited */
    assert_int_equal(obj_put_start(st, &p, 3, NULL), SMP_OK);

    seen_list l = {0};
    assert_int_equal(obj_visit_replicas(st, "n1", collect_replica, &l), 3);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.v[0].key, "a");
    assert_int_equal(l.v[0].kind, SMP_REPLICA_COLD);
    assert_string_equal(l.v[1].key, "b");
    assert_int_equal(l.v[1].kind, SMP_REPLICA_MEMORY);
    assert_string_equal(l.v[2].key, "c");
    assert_int_equal(l.v[2].kind, SMP_REPLICA_MEMORY);
    for (size_t i = 0; i < l.n; i++) assert_string_equal(l.v[i].node, "n1");

    memset(&l, 0, sizeof(l));
    assert_int_equal(obj_visit_replicas(st, "n0", collect_replica, &l), 3);
    assert_string_equal(l.v[0].key, "a");
    assert_string_equal(l.v[1].key, "c");
    assert_int_equal(l.v[1].kind, SMP_REPLICA_MEMORY);
    assert_string_equal(l.v[2].key, "c");
    assert_int_equal(l.v[2].kind, SMP_REPLICA_COLD);
    assert_int_equal(l.v[2].status, OBJ_REPLICA_FAILED);

    memset(&l, 0, sizeof(l));
    assert_int_equal(obj_visit_replicas(st, NULL, collect_replica, &l), 6);
    memset(&l, 0, sizeof(l));
    l.stop_after = 2;
    assert_int_equal(obj_visit_replicas(st, NULL, collect_replica, &l), 2);
    assert_int_equal(l.n, 2);
    memset(&l, 0, sizeof(l));
    assert_int_equal(obj_visit_replicas(st, "n9", collect_replica, &l), 0);
    assert_int_equal(obj_visit_replicas(st, NULL, NULL, NULL), SMP_EINVAL);

    /* Every status, a short buffer, no lease, no access refresh, no hold. */
    buf before = save(st);
    assert_int_equal(obj_object_replicas(st, "c", reps, 2, &n), SMP_OK);
    assert_int_equal(n, 3);
    assert_string_equal(reps[1].segment, "s1");
    assert_int_equal(obj_object_replicas(st, "c", NULL, 0, &n), SMP_OK);
    assert_int_equal(n, 3);
    assert_int_equal(obj_object_replicas(st, "c", reps, 4, NULL), SMP_OK);
    assert_int_equal(reps[2].status, OBJ_REPLICA_FAILED);
    assert_string_equal(reps[2].path, "/c/c");
    assert_null(reps[2].segment);
    assert_int_equal(obj_object_replicas(st, "d", reps, 4, &n), SMP_ENOTFOUND);
    assert_int_equal(obj_object_replicas(st, "zz", reps, 4, &n), SMP_ENOTFOUND);
    assert_int_equal(obj_object_replicas(st, "", reps, 4, &n), SMP_EINVAL);
    assert_int_equal(obj_prepare_remove(st, "c", 0, &r), SMP_OK);
    obj_held *held = NULL;
    assert_int_equal(obj_hold_record(st, &r, &held), SMP_OK);
    assert_int_equal(obj_object_replicas(st, "c", reps, 4, &n), SMP_OK);
    assert_int_equal(obj_get_replica_list(st, "c", 50, 0, reps, 4, &n), SMP_EBUSY);
    obj_release_hold(st, held);
    obj_record_free(&r);
    buf after = save(st);
    assert_same_bytes(&before, &after);
    free(before.p);
    free(after.p);
    assert_int_equal(obj_prepare_remove(st, "c", 0, &r), SMP_OK); /* no lease taken */
    obj_record_free(&r);
    obj_store_destroy(st);
}

/* A reservation goes to the preferred node when it has room, else to the
 * segment with the most free bytes, segments already holding a memory copy
 * of the object last. */
static void test_reserve_replica_placement(void **state)
{
    (void)state;
    obj_store *st = new_store(NULL);
    mount(st, "big", "n0", 8192);
    mount(st, "small", "n1", 1024);
    assert_int_equal(put_full(st, "k", 500, "", "", 1), SMP_OK);
    obj_replica rep;
    size_t n;
    assert_int_equal(obj_object_replicas(st, "k", &rep, 1, &n), SMP_OK);
    assert_string_equal(rep.segment, "big");
    obj_put_ticket t;
    assert_int_equal(obj_reserve_replica(st, "k", NULL, 2, &t), SMP_OK);
    assert_string_equal(t.segment, "small"); /* not next to the copy it has */
    assert_int_equal(obj_release_reservation(st, "k"), SMP_OK);
    assert_int_equal(obj_reserve_replica(st, "k", "n0", 2, &t), SMP_OK);
    assert_string_equal(t.segment, "big"); /* the caller's preference first */
    assert_int_equal(obj_release_reservation(st, "k"), SMP_OK);
    obj_put_params p = {"fill", 1024 - 64, SMP_DATA_KV, "", "", 0, 0, "n1"};
    assert_int_equal(obj_put_start(st, &p, 3, &t), SMP_OK);
    assert_string_equal(t.segment, "small");
    assert_int_equal(obj_reserve_replica(st, "k", "n1", 4, &t), SMP_OK);
    assert_string_equal(t.segment, "big"); /* the preferred node has no room */
    assert_int_equal(obj_release_reservation(st, "k"), SMP_OK);
    assert_int_equal(used_of(st), 512 + 960); /* k and the put in flight */
    obj_store_destroy(st);
}

/* A group sealed while a put into it was in flight: the put end is asked
 * again and refused, nothing becomes a member, and the put can be revoked. */
static void test_put_end_into_sealed_group_is_refused(void **state)
{
    (void)state;
    test_guard g = {.loaded = 1};
    obj_store *st = new_store(&g);
    mount(st, "s", "n", 1 << 16);
    set_managed(st, "rev", 1);
    obj_put_params p = {"rev/late", 10, SMP_DATA_WEIGHT, "rev", "", 0, 0, NULL};
    assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_OK);
    g.veto = 1; /* the owner sealed the group */
    uint8_t sum[32];
    sum_of("rev/late", sum);
    obj_record r = {0};
    assert_int_equal(obj_prepare_put_end(st, "rev/late", sum, 2, &r), SMP_EVETO);
    assert_null(r.buf);
    assert_int_equal(obj_exists(st, "rev/late"), 0);
    assert_int_equal(obj_group_count(st, "rev"), 0);
    obj_stats s;
    obj_store_stats(st, &s);
    assert_int_equal(s.guard_vetoes[SMP_GUARD_PUT_INTO_GROUP], 1);
    assert_int_equal(s.puts_in_flight, 1);
    assert_int_equal(obj_prepare_put_revoke(st, "rev/late", &r), SMP_OK);
    apply_rec(st, &r);
    obj_store_stats(st, &s);
    assert_int_equal(s.puts_in_flight, 0);
    assert_int_equal(s.memory_used, 0);
    obj_store_destroy(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_start_end_revoke),
        cmocka_unit_test(test_allocator_fill_free_coalesce_enospc),
        cmocka_unit_test(test_fsck_free_ranges_and_holds),
        cmocka_unit_test(test_replica_list_lease_blocks_remove),
        cmocka_unit_test(test_remove_prefix_managed_group_without_guard),
        cmocka_unit_test(test_remove_prefix_with_veto_guard),
        cmocka_unit_test(test_remove_prefix_with_allow_guard),
        cmocka_unit_test(test_owner_absent_protects_groups),
        cmocka_unit_test(test_group_owner_persisted),
        cmocka_unit_test(test_put_into_managed_group),
        cmocka_unit_test(test_put_end_into_sealed_group_is_refused),
        cmocka_unit_test(test_eviction_plan),
        cmocka_unit_test(test_stale_put_cleanup),
        cmocka_unit_test(test_put_touched_by_its_write_is_kept),
        cmocka_unit_test(test_list_prefix_pagination),
        cmocka_unit_test(test_random_puts_and_removes_keep_order),
        cmocka_unit_test(test_group_queries_and_metrics),
        cmocka_unit_test(test_records_replay_and_idempotence),
        cmocka_unit_test(test_records_malformed),
        cmocka_unit_test(test_snapshot_round_trip),
        cmocka_unit_test(test_loaded_objects_changed_and_removed_one_by_one),
        cmocka_unit_test(test_snapshot_invalid),
        cmocka_unit_test(test_bad_keys_refused),
        cmocka_unit_test(test_put_prefers_node),
        cmocka_unit_test(test_unguarded_remove),
        cmocka_unit_test(test_describe_records),
        cmocka_unit_test(test_random_ops_consistent),
        cmocka_unit_test(test_records_that_lose_races),
        cmocka_unit_test(test_random_pipeline_consistent),
        cmocka_unit_test(test_add_replica_reserve_and_add),
        cmocka_unit_test(test_add_replica_cold_to_hot),
        cmocka_unit_test(test_add_replica_after_remove_or_overwrite),
        cmocka_unit_test(test_add_replica_reservations),
        cmocka_unit_test(test_add_replica_malformed),
        cmocka_unit_test(test_visit_and_object_replicas),
        cmocka_unit_test(test_reserve_replica_placement),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
