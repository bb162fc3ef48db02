/* test_wm_lifecycle.c -- the reconcile tick against a scripted host.
 *
 * weight_lifecycle.c runs on a fake host whose objects carry a memory and a
 * cold replica flag, whose replica tasks, OpLog appends and group-flag
 * changes stay queued until the test completes them, and whose clocks the
 * test moves. So every effect of a round is visible in order: which members
 * a round touches (complete units, at least one even when it exceeds the
 * byte limit), the cursor persisted after each batch and resumed from after
 * a restart, a lease that lets cold replicas be created but no memory be
 * released, a failure that keeps the revision READY and is retried, the
 * deletion order (payloads, the manifest last, the tombstone only once the
 * group is empty), DEGRADED on a lost member and back, and the choice of
 * AUTO demotions under memory pressure with their cooldown. */
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
#include "wm_suspects.h"
#include "wm_test_records.h"

/* ------------------------------------------------------------------------ */
/* The scripted host                                                         */
/* ------------------------------------------------------------------------ */

enum { T_COLD = 1, T_MEMORY, T_RELEASE, T_REMOVE, T_APPEND, T_GROUP };

typedef struct effect {
    int kind;
    char key[1100];
    uint16_t type;
    smp_durable_cb dcb;
    smp_done_cb cb;
    void *arg;
} effect;

typedef struct fobj {
    char key[1100];
    char group[1100];
    uint64_t size;
    int mem, cold;
    int live;
} fobj;

static struct {
    effect q[512];
    size_t nq;
    fobj objs[64];
    size_t nobjs;
    uint64_t wall, mono;
    uint64_t used, cap;
    uint64_t cooldown;
    int64_t repair_max;  /* plugin key repair_max_attempts; 0: absent */
    uint64_t object_gets; /* object_get calls so far */
    int unmanaged;
} H;

static void push(int kind, const char *key, uint16_t type, smp_durable_cb dcb, smp_done_cb cb, void *arg)
{
    assert_true(H.nq < sizeof(H.q) / sizeof(H.q[0]));
    effect *e = &H.q[H.nq++];
    memset(e, 0, sizeof(*e));
    e->kind = kind;
    if (key) snprintf(e->key, sizeof(e->key), "%s", key);
    e->type = type;
    e->dcb = dcb;
    e->cb = cb;
    e->arg = arg;
}

static fobj *find(const char *key)
{
    for (size_t i = 0; i < H.nobjs; i++)
        if (H.objs[i].live && strcmp(H.objs[i].key, key) == 0) return &H.objs[i];
    return NULL;
}

static int f_append(smp_host *h, uint16_t type, uint16_t encver, const void *payload, size_t len,
                    smp_durable_cb cb, void *arg)
{
    (void)h, (void)encver, (void)payload, (void)len;
    push(T_APPEND, NULL, type, cb, NULL, arg);
    return SMP_OK;
}

static int f_set_managed(smp_host *h, const char *group, int managed, smp_done_cb cb, void *arg)
{
    (void)h;
    assert_int_equal(managed, 0);
    push(T_GROUP, group, 0, NULL, cb, arg);
    return SMP_OK;
}

static int f_ensure_cold(smp_host *h, const char *key, smp_done_cb cb, void *arg)
{
    (void)h;
    fobj *o = find(key);
    if (o == NULL) return SMP_ENOTFOUND;
    if (!o->mem && !o->cold) return SMP_EAGAIN;
    push(T_COLD, key, 0, NULL, cb, arg);
    return SMP_OK;
}

static int f_ensure_memory(smp_host *h, const char *key, smp_done_cb cb, void *arg)
{
    (void)h;
    fobj *o = find(key);
    if (o == NULL) return SMP_ENOTFOUND;
    if (!o->mem && !o->cold) return SMP_EAGAIN; /* nothing readable to load from */
    push(T_MEMORY, key, 0, NULL, cb, arg);
    return SMP_OK;
}

static int f_release(smp_host *h, const char *key, smp_done_cb cb, void *arg)
{
    (void)h;
    fobj *o = find(key);
    if (o == NULL) return SMP_ENOTFOUND;
    if (!o->cold) return SMP_ESTATE; /* the last readable copy stays */
    push(T_RELEASE, key, 0, NULL, cb, arg);
    return SMP_OK;
}

static int f_remove(smp_host *h, const char *key, smp_done_cb cb, void *arg)
{
    (void)h;
    if (find(key) == NULL) return SMP_ENOTFOUND;
    push(T_REMOVE, key, 0, NULL, cb, arg);
    return SMP_OK;
}

/* Complete queued effect i with status (a successful task takes effect). */
static int deliver_at(size_t i, int status)
{
    assert_true(i < H.nq);
    effect e = H.q[i];
    memmove(&H.q[i], &H.q[i + 1], (H.nq - i - 1) * sizeof(H.q[0]));
    H.nq--;
    fobj *o = e.key[0] ? find(e.key) : NULL;
    if (status == SMP_OK && o != NULL) {
        if (e.kind == T_COLD) o->cold = 1;
        if (e.kind == T_MEMORY) o->mem = 1;
        if (e.kind == T_RELEASE) o->mem = 0;
        if (e.kind == T_REMOVE) o->live = 0;
    }
    if (status == SMP_OK && e.kind == T_GROUP) H.unmanaged++;
    if (e.kind == T_APPEND) e.dcb(e.arg, status, 1);
    else e.cb(e.arg, status);
    return e.kind;
}

/* Index of the first queued effect of kind, or -1. */
static long first_of(int kind)
{
    for (size_t i = 0; i < H.nq; i++)
        if (H.q[i].kind == kind) return (long)i;
    return -1;
}

static size_t count_of(int kind)
{
    size_t n = 0;
    for (size_t i = 0; i < H.nq; i++) n += H.q[i].kind == kind;
    return n;
}

/* Complete everything queued (and what that queues), successfully. */
static void drain(void)
{
    for (int guard = 0; H.nq > 0 && guard < 10000; guard++) deliver_at(0, SMP_OK);
    assert_int_equal(H.nq, 0);
}

static int f_object_get(smp_host *h, const char *key, smp_object_info *out)
{
    (void)h;
    H.object_gets++;
    fobj *o = find(key);
    if (o == NULL) return SMP_ENOTFOUND;
    out->key = o->key;
    out->group = o->group;
    out->size = o->size;
    out->complete = 1;
    out->memory_replicas_readable = (uint32_t)o->mem;
    out->cold_replicas_readable = (uint32_t)o->cold;
    return SMP_OK;
}

static int f_group_list(smp_host *h, const char *group, const char *after, size_t max,
                        smp_object_visit_fn fn, void *arg)
{
    (void)h;
    int n = 0;
    for (size_t i = 0; i < H.nobjs && (size_t)n < max; i++) {
        fobj *o = &H.objs[i];
        if (!o->live || strcmp(o->group, group) != 0) continue;
        if (after && strcmp(o->key, after) <= 0) continue;
        smp_object_info info;
        memset(&info, 0, sizeof(info));
        info.struct_size = sizeof(info);
        f_object_get(NULL, o->key, &info);
        n++;
        if (fn(arg, &info)) break;
    }
    return n;
}

static uint64_t f_group_count(smp_host *h, const char *group)
{
    (void)h;
    uint64_t n = 0;
    for (size_t i = 0; i < H.nobjs; i++) n += H.objs[i].live && strcmp(H.objs[i].group, group) == 0;
    return n;
}

static int f_config_get(smp_host *h, smp_config_scope s, const char *k, smp_config_value *out)
{
    (void)h;
    if (s == SMP_CONFIG_CLUSTER && strcmp(k, "weight_migration_cooldown_ms") == 0) {
        out->type = SMP_CONFIG_INT;
        out->i = (int64_t)H.cooldown;
        out->d = (double)H.cooldown;
        return SMP_OK;
    }
    if (s == SMP_CONFIG_PLUGIN && strcmp(k, "repair_max_attempts") == 0 && H.repair_max != 0) {
        out->type = SMP_CONFIG_INT;
        out->i = H.repair_max;
        return SMP_OK;
    }
    return SMP_ENOTFOUND;
}

static uint64_t f_wall(smp_host *h)
{
    (void)h;
    return H.wall;
}

static uint64_t f_mono(smp_host *h)
{
    (void)h;
    return H.mono;
}

static void f_memory(smp_host *h, uint64_t *used, uint64_t *cap)
{
    (void)h;
    *used = H.used;
    *cap = H.cap;
}

static void f_log(smp_host *h, smp_log_level l, const char *fmt, ...)
{
    (void)h, (void)l, (void)fmt;
}

/* An RPC call of the REPAIR method (wm_rpc_repair): its answer. */
struct smp_rpc_call {
    int answered;
    int status;
    uint8_t body[1024];
    size_t len;
};

static int f_rpc_reply(smp_rpc_call *call, int status, const uint8_t *body, size_t len)
{
    call->answered = 1;
    call->status = status;
    call->len = len <= sizeof(call->body) ? len : 0;
    if (call->len) memcpy(call->body, body, call->len);
    return SMP_OK;
}

static smp_host_api API;
static wm_plugin P;

static int setup(void **state)
{
    (void)state;
    memset(&H, 0, sizeof(H));
    memset(&API, 0, sizeof(API));
    API.struct_size = sizeof(API);
    API.host_caps = SMP_HOST_CAPS_V1;
    API.oplog_append = f_append;
    API.group_set_managed = f_set_managed;
    API.object_get = f_object_get;
    API.group_list = f_group_list;
    API.group_count = f_group_count;
    API.config_get = f_config_get;
    API.wall_ms = f_wall;
    API.now_ms = f_mono;
    API.log = f_log;
    API.ensure_cold = f_ensure_cold;
    API.ensure_memory = f_ensure_memory;
    API.release_memory = f_release;
    API.remove_object = f_remove;
    API.memory_usage = f_memory;
    API.rpc_reply = f_rpc_reply;
    H.wall = 100000;
    H.mono = 5000;
    H.cap = 1000;
    H.cooldown = 30000;
    memset(&P, 0, sizeof(P));
    P.host = NULL;
    P.api = &API;
    assert_int_equal(wm_store_create(&P.store), WM_OK);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    while (H.nq > 0) deliver_at(0, SMP_ECANCELED);
    wm_mgmt_release(&P);
    wm_store_free(P.store);
    return 0;
}

static smp_tick_budget B = {sizeof(smp_tick_budget), 64, 1 << 30, 0};

static int tick(void)
{
    uint64_t cursor = 0;
    return wm_lifecycle_tick(&P, &B, &cursor);
}

/* Ticks and completions until nothing is left to do (time moves on so
 * backoffs pass). */
static void run(int rounds)
{
    for (int i = 0; i < rounds; i++) {
        tick();
        drain();
        H.mono += 1000;
        H.wall += 1000;
    }
}

/* A READY + HOT revision of n units (unit i: payload i, bytes[i]) with its
 * objects in the fake host, memory replicas only but for the manifest's
 * cold copy; policy mode as given. */
static wm_revision seed(const char *name, const uint64_t *bytes, size_t n, wm_migration_mode mode)
{
    wm_affinity aff = {0};
    wm_metadata_upsert u;
    char msg[256];
    memset(&u, 0, sizeof(u));
    wmt_ready_revision(&u.revision, &aff, name, 1, bytes, n);
    u.revision.policy.preferred = WM_RES_HOT;
    u.revision.policy.mode = mode;
    u.has_affinity = 1;
    u.affinity = aff;
    if (wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
    for (size_t i = 0; i <= n; i++) {
        fobj *o = &H.objs[H.nobjs++];
        memset(o, 0, sizeof(*o));
        if (i < n) snprintf(o->key, sizeof(o->key), "%s", aff.units[i].members[0]);
        else snprintf(o->key, sizeof(o->key), "%s", u.revision.manifest_key);
        snprintf(o->group, sizeof(o->group), "%s", u.revision.group_key);
        o->size = i < n ? bytes[i] : 10;
        o->mem = 1;
        o->cold = i == n; /* a published manifest has its cold copy (wm_repair.c) */
        o->live = 1;
    }
    wm_affinity_clear(&aff);
    return u.revision;
}

/* Make a RUNNING operation of kind active on rev (straight into the store). */
static uint64_t start_op(const wm_revision *rev, wm_op_kind kind, wm_residency target, double ratio)
{
    wm_metadata_upsert u;
    wm_operation op;
    char msg[256];
    memset(&u, 0, sizeof(u));
    u.revision = *wm_store_get(P.store, &rev->id);
    wmt_migration(&op, &u.revision, wm_store_reserve_operation_id(P.store));
    op.kind = kind;
    op.target = kind == WM_OPK_MIGRATING ? target : WM_RES_UNKNOWN;
    op.target_hot_ratio = target == WM_RES_MIXED ? ratio : 0.0;
    if (kind == WM_OPK_DELETING) {
        u.revision.availability = WM_AVAIL_DELETING;
        op.members_total = rev->payload_count + 1;
    }
    u.revision.metadata_generation++;
    u.operations = &op;
    u.n_operations = 1;
    if (wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
    return op.id;
}

static const wm_revision *cur(const wm_revision *rev)
{
    return wm_store_get(P.store, &rev->id);
}

static char *pkey(const wm_revision *rev, uint64_t n)
{
    static char key[WM_KEY_MAX + 1];
    wm_payload_key(&rev->id, n, key, sizeof(key));
    return key;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                     */
/* ------------------------------------------------------------------------ */

/* A round takes whole units while the byte limit holds; a unit larger than
 * the limit still goes alone in its round; after each batch the cursor and
 * progress are persisted with the revision at its generation; a restart
 * (the working state dropped) resumes after the persisted cursor. */
static void test_batches_bounded_and_cursor_persisted(void **state)
{
    (void)state;
    static const uint64_t bytes[4] = {100, 5000, 100, 100};
    wm_revision rev = seed("big", bytes, 4, WM_MODE_MANUAL);
    uint64_t op_id = start_op(&rev, WM_OPK_MIGRATING, WM_RES_COLD, 0);
    B.max_bytes = 1000;
    assert_int_equal(tick(), SMP_TICK_MORE);
    /* Unit 0 fits; unit 1 (5000) would exceed the limit: not this round. */
    assert_int_equal(count_of(T_COLD), 1);
    assert_string_equal(H.q[0].key, pkey(&rev, 0));
    deliver_at(0, SMP_OK);
    /* Cold verified: now the memory replica goes. */
    assert_int_equal(H.q[0].kind, T_RELEASE);
    deliver_at(0, SMP_OK);
    assert_int_equal(H.q[0].kind, T_APPEND);
    deliver_at(0, SMP_OK);
    const wm_operation *op = wm_store_operation(P.store, op_id);
    assert_string_equal(op->cursor, pkey(&rev, 0));
    assert_int_equal(op->members_done, 1);
    assert_int_equal(op->bytes_done, 100);
    assert_int_equal(op->state, WM_OPS_RUNNING);
    assert_int_equal(cur(&rev)->metadata_generation, 2); /* progress repeats it */

    /* The next round: the 5000-byte unit alone, though above the limit. */
    tick();
    assert_int_equal(count_of(T_COLD), 1);
    assert_string_equal(H.q[0].key, pkey(&rev, 1));
    drain();
    assert_string_equal(wm_store_operation(P.store, op_id)->cursor, pkey(&rev, 1));

    /* Restart: the working state is gone; the same operation resumes after
     * its persisted cursor (payload 2 and 3 fit one round now). */
    wm_lifecycle_release(&P);
    tick();
    assert_int_equal(count_of(T_COLD), 2);
    assert_string_equal(H.q[0].key, pkey(&rev, 2));
    assert_string_equal(H.q[1].key, pkey(&rev, 3));
    drain();
    run(3);
    op = wm_store_operation(P.store, op_id);
    assert_int_equal(op->state, WM_OPS_SUCCEEDED);
    assert_int_equal(op->members_done, 4);
    assert_int_equal(op->bytes_done, 5300);
    assert_int_equal(cur(&rev)->operation_id, 0);
    assert_int_equal(cur(&rev)->residency, WM_RES_COLD);
    assert_int_equal(cur(&rev)->metadata_generation, 3);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(find(pkey(&rev, i))->mem, 0);
        assert_int_equal(find(pkey(&rev, i))->cold, 1);
    }
    assert_int_equal(find(rev.manifest_key)->mem, 1); /* the manifest stays */
    assert_true(P.migration_bytes_processed >= 5300);
    assert_int_equal(P.migrations_completed, 1);
    B.max_bytes = 1 << 30;
}

/* After a restart the persisted cursor is not trusted alone: a member
 * behind the cursor whose cold replica is gone is handled again before the
 * operation can end. */
static void test_actual_replicas_override_stale_progress(void **state)
{
    (void)state;
    static const uint64_t bytes[3] = {100, 100, 100};
    wm_revision rev = seed("stale", bytes, 3, WM_MODE_MANUAL);
    uint64_t op_id = start_op(&rev, WM_OPK_MIGRATING, WM_RES_COLD, 0);
    B.max_members = 1;
    tick();
    drain();
    assert_string_equal(wm_store_operation(P.store, op_id)->cursor, pkey(&rev, 0));
    /* Failover: payload 0 is back in memory only (its cold file lost). */
    wm_lifecycle_release(&P);
    find(pkey(&rev, 0))->cold = 0;
    find(pkey(&rev, 0))->mem = 1;
    run(10);
    assert_int_equal(wm_store_operation(P.store, op_id)->state, WM_OPS_SUCCEEDED);
    assert_int_equal(find(pkey(&rev, 0))->cold, 1);
    assert_int_equal(find(pkey(&rev, 0))->mem, 0);
    assert_int_equal(cur(&rev)->residency, WM_RES_COLD);
    B.max_members = 64;
}

/* A lease held across a migration to COLD: cold replicas are created, no
 * memory replica is released, the operation stays RUNNING; once the lease
 * ends the releases happen and the operation completes. */
static void test_lease_blocks_release_but_not_creation(void **state)
{
    (void)state;
    static const uint64_t bytes[2] = {100, 200};
    wm_revision rev = seed("leased", bytes, 2, WM_MODE_MANUAL);
    uint64_t op_id = start_op(&rev, WM_OPK_MIGRATING, WM_RES_COLD, 0);
    wm_lease l;
    char msg[256];
    wmt_lease(&l, cur(&rev), 1);
    l.expiry_ms = H.wall + 3600000; /* not swept while the test runs */
    assert_int_equal(wm_store_apply_lease_upsert(P.store, &l, msg, sizeof(msg)), WM_OK);
    for (int i = 0; i < 6; i++) {
        tick();
        assert_int_equal(count_of(T_RELEASE), 0);
        drain();
        H.mono += 1000;
    }
    assert_int_equal(find(pkey(&rev, 0))->cold, 1);
    assert_int_equal(find(pkey(&rev, 1))->cold, 1);
    assert_int_equal(find(pkey(&rev, 0))->mem, 1);
    assert_int_equal(find(pkey(&rev, 1))->mem, 1);
    assert_int_equal(wm_store_operation(P.store, op_id)->state, WM_OPS_RUNNING);
    assert_int_equal(cur(&rev)->operation_id, op_id);

    wm_lease_delete d = {l.id, l.id_of, WM_LEASE_RELEASED};
    assert_int_equal(wm_store_apply_lease_delete(P.store, &d, msg, sizeof(msg)), WM_OK);
    run(6);
    assert_int_equal(wm_store_operation(P.store, op_id)->state, WM_OPS_SUCCEEDED);
    assert_int_equal(find(pkey(&rev, 0))->mem, 0);
    assert_int_equal(find(pkey(&rev, 1))->mem, 0);
    assert_int_equal(cur(&rev)->residency, WM_RES_COLD);
}

/* A cold write that fails leaves the revision READY with its memory
 * replicas; the operation stays RUNNING with the error and attempts, is
 * retried after a backoff, and completes when the write works. */
static void test_failure_keeps_ready_and_retries(void **state)
{
    (void)state;
    static const uint64_t bytes[1] = {100};
    wm_revision rev = seed("fails", bytes, 1, WM_MODE_MANUAL);
    uint64_t op_id = start_op(&rev, WM_OPK_MIGRATING, WM_RES_COLD, 0);
    for (uint32_t attempt = 1; attempt <= 2; attempt++) {
        tick();
        assert_int_equal(first_of(T_COLD), 0);
        deliver_at(0, SMP_EIO);
        assert_int_equal(count_of(T_RELEASE), 0);
        deliver_at((size_t)first_of(T_APPEND), SMP_OK);
        const wm_operation *op = wm_store_operation(P.store, op_id);
        assert_int_equal(op->state, WM_OPS_RUNNING);
        assert_int_equal(op->attempts, attempt);
        assert_non_null(strstr(op->error, "SMP_EIO"));
        assert_int_equal(cur(&rev)->availability, WM_AVAIL_READY);
        assert_int_equal(find(pkey(&rev, 0))->mem, 1);
        /* Backoff: nothing before it passes. */
        tick();
        assert_int_equal(count_of(T_COLD), 0);
        H.mono += 10000;
    }
    assert_int_equal(P.op_failures, 2);
    run(4);
    assert_int_equal(P.op_retries, 2);
    assert_int_equal(wm_store_operation(P.store, op_id)->state, WM_OPS_SUCCEEDED);
    assert_int_equal(cur(&rev)->residency, WM_RES_COLD);
}

/* A memory release the host refuses BUSY (a reader leased the member
 * after the plugin looked) is a wait, not a failed attempt: no attempt,
 * no error, counted as a read-lease wait, and with repair_max_attempts 1
 * the migration still ends SUCCEEDED COLD once the release goes through. */
static void test_release_refused_busy_is_a_wait(void **state)
{
    (void)state;
    static const uint64_t bytes[1] = {100};
    H.repair_max = 1;
    wm_revision rev = seed("leased", bytes, 1, WM_MODE_MANUAL);
    uint64_t op_id = start_op(&rev, WM_OPK_MIGRATING, WM_RES_COLD, 0);
    tick();
    deliver_at((size_t)first_of(T_COLD), SMP_OK);
    assert_true(first_of(T_RELEASE) >= 0);
    deliver_at((size_t)first_of(T_RELEASE), SMP_EBUSY);
    while (first_of(T_APPEND) >= 0) deliver_at((size_t)first_of(T_APPEND), SMP_OK);
    const wm_operation *op = wm_store_operation(P.store, op_id);
    assert_int_equal(op->state, WM_OPS_RUNNING);
    assert_int_equal(op->attempts, 0);
    assert_string_equal(op->error, "");
    assert_int_equal(P.op_failures, 0);
    assert_int_equal(P.release_lease_waits, 1);
    assert_int_equal(find(pkey(&rev, 0))->mem, 1);
    H.mono += 10000;
    run(4);
    assert_int_equal(wm_store_operation(P.store, op_id)->state, WM_OPS_SUCCEEDED);
    assert_int_equal(cur(&rev)->residency, WM_RES_COLD);
    assert_int_equal(find(pkey(&rev, 0))->mem, 0);
}

/* To MIXED: the planner's complete units are promoted or demoted and the
 * observed ratio is recorded; then back to HOT. */
static void test_mixed_then_hot(void **state)
{
    (void)state;
    static const uint64_t bytes[4] = {100, 200, 300, 400};
    wm_revision rev = seed("mixed", bytes, 4, WM_MODE_MANUAL);
    uint64_t op_id = start_op(&rev, WM_OPK_MIGRATING, WM_RES_MIXED, 0.5);
    run(6);
    assert_int_equal(wm_store_operation(P.store, op_id)->state, WM_OPS_SUCCEEDED);
    assert_int_equal(cur(&rev)->residency, WM_RES_MIXED);
    assert_true(cur(&rev)->observed_hot_ratio == 0.5);
    uint64_t hot = 0;
    for (size_t i = 0; i < 4; i++) {
        fobj *o = find(pkey(&rev, i));
        assert_true(o->mem != o->cold); /* each unit either HOT or COLD only */
        if (o->mem) hot += bytes[i];
    }
    assert_int_equal(hot, 500);
    op_id = start_op(cur(&rev), WM_OPK_MIGRATING, WM_RES_HOT, 0);
    run(6);
    assert_int_equal(wm_store_operation(P.store, op_id)->state, WM_OPS_SUCCEEDED);
    assert_int_equal(cur(&rev)->residency, WM_RES_HOT);
    for (size_t i = 0; i < 4; i++) assert_int_equal(find(pkey(&rev, i))->mem, 1);
}

/* Deletion removes payloads in bounded batches, the manifest only after
 * every payload, unmanages the group only once it is empty and then writes
 * the DELETED + ABSENT tombstone with the operation SUCCEEDED. A failed
 * removal keeps DELETING and its progress. */
static void test_deletion_order(void **state)
{
    (void)state;
    static const uint64_t bytes[3] = {100, 100, 100};
    wm_revision rev = seed("gone", bytes, 3, WM_MODE_AUTO);
    uint64_t op_id = start_op(&rev, WM_OPK_DELETING, WM_RES_UNKNOWN, 0);
    B.max_members = 2;
    tick();
    assert_int_equal(count_of(T_REMOVE), 2);
    for (size_t i = 0; i < H.nq; i++) assert_null(strstr(H.q[i].key, "manifest"));
    deliver_at(0, SMP_OK);
    deliver_at(0, SMP_EIO); /* the second removal fails */
    deliver_at((size_t)first_of(T_APPEND), SMP_OK);
    const wm_operation *op = wm_store_operation(P.store, op_id);
    assert_int_equal(op->members_done, 1);
    assert_int_equal(op->attempts, 1);
    assert_int_equal(cur(&rev)->availability, WM_AVAIL_DELETING);
    H.mono += 10000;
    tick();
    /* The remaining two payloads; still not the manifest. */
    assert_int_equal(count_of(T_REMOVE), 2);
    for (size_t i = 0; i < H.nq; i++) assert_null(strstr(H.q[i].key, "manifest"));
    drain();
    tick();
    assert_int_equal(count_of(T_REMOVE), 1);
    assert_non_null(strstr(H.q[0].key, "manifest"));
    assert_int_equal(H.unmanaged, 0);
    drain();
    tick();
    assert_int_equal(count_of(T_GROUP), 1); /* the group is empty now */
    assert_int_equal(count_of(T_APPEND), 0); /* no tombstone before */
    drain();
    run(2);
    assert_int_equal(H.unmanaged, 1);
    assert_int_equal(cur(&rev)->availability, WM_AVAIL_DELETED);
    assert_int_equal(cur(&rev)->residency, WM_RES_ABSENT);
    assert_int_equal(cur(&rev)->operation_id, 0);
    op = wm_store_operation(P.store, op_id);
    assert_int_equal(op->state, WM_OPS_SUCCEEDED);
    assert_int_equal(op->members_done, 4);
    B.max_members = 64;
}

/* A member that lost every readable replica makes the READY revision
 * DEGRADED (durably); when it is readable again the revision is READY. */
static void test_degraded_on_loss_and_back(void **state)
{
    (void)state;
    static const uint64_t bytes[2] = {100, 100};
    wm_revision rev = seed("lossy", bytes, 2, WM_MODE_MANUAL);
    run(1); /* the first round after the start validates: nothing to do */
    assert_int_equal(cur(&rev)->metadata_generation, 1);
    smp_event ev = {sizeof(ev), SMP_EVENT_REPLICA_LOST, pkey(&rev, 1), rev.group_key, NULL,
                    SMP_REPLICA_MEMORY, 0, 0, 0, 0};
    find(pkey(&rev, 1))->mem = 0;
    wm_lifecycle_event(&P, &ev);
    tick();
    assert_int_equal(cur(&rev)->availability, WM_AVAIL_READY); /* not before durable */
    drain();
    assert_int_equal(cur(&rev)->availability, WM_AVAIL_DEGRADED);
    run(2);
    assert_int_equal(cur(&rev)->availability, WM_AVAIL_DEGRADED);

    find(pkey(&rev, 1))->mem = 1;
    smp_event up = {sizeof(up), SMP_EVENT_NODE_UP, NULL, NULL, "node-a", SMP_REPLICA_MEMORY, 0, 0, 0, 0};
    wm_lifecycle_event(&P, &up);
    tick();
    drain();
    assert_int_equal(cur(&rev)->availability, WM_AVAIL_READY);
    assert_int_equal(cur(&rev)->residency, WM_RES_HOT);
}

/* Put rev into the store as DEGRADED (its objects stay readable). */
static void degrade(const wm_revision *rev)
{
    wm_metadata_upsert u;
    char msg[256];
    memset(&u, 0, sizeof(u));
    u.revision = *cur(rev);
    u.revision.availability = WM_AVAIL_DEGRADED;
    u.revision.metadata_generation++;
    if (wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
}

/* Three READY + HOT one-unit revisions "<prefix>-a", "-b", "-c", past the
 * validation after the start (nothing to do). */
static void seed_three(const char *prefix, wm_revision rev[3])
{
    static const uint64_t bytes[1] = {100};
    char name[64];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof(name), "%s-%c", prefix, 'a' + i);
        rev[i] = seed(name, bytes, 1, WM_MODE_MANUAL);
    }
    run(1);
}

/* The DEGRADED recheck respects the round's deadline: past it, a round
 * looks at one DEGRADED revision and the next round goes on from there
 * (a cursor), so the last revision in identity order is reached too; the
 * tick asks for another round meanwhile. Replica-lost reports past the
 * deadline wait for the next round the same way. */
static void test_degraded_recheck_and_suspects_respect_the_deadline(void **state)
{
    (void)state;
    wm_revision rev[3];
    seed_three("slow", rev);
    for (int i = 0; i < 3; i++) degrade(&rev[i]);
    smp_tick_budget late = B;
    late.deadline_ms = 1; /* already past */
    uint64_t cursor = 0;
    smp_event up = {sizeof(up), SMP_EVENT_NODE_UP, NULL, NULL, "node-a", SMP_REPLICA_MEMORY, 0, 0, 0, 0};
    wm_lifecycle_event(&P, &up);
    for (int round = 0; round < 3; round++) {
        int more = wm_lifecycle_tick(&P, &late, &cursor);
        drain();
        for (int i = 0; i < 3; i++)
            assert_int_equal(cur(&rev[i])->availability,
                             i <= round ? WM_AVAIL_READY : WM_AVAIL_DEGRADED);
        if (round < 2) assert_int_equal(more, SMP_TICK_MORE);
    }

    /* Two reports past the deadline: one handled per round. */
    find(pkey(&rev[0], 0))->mem = 0;
    find(pkey(&rev[1], 0))->mem = 0;
    smp_event lost = {sizeof(lost), SMP_EVENT_REPLICA_LOST, pkey(&rev[0], 0), rev[0].group_key,
                      NULL, SMP_REPLICA_MEMORY, 0, 0, 0, 0};
    wm_lifecycle_event(&P, &lost);
    lost.key = pkey(&rev[1], 0);
    lost.group = rev[1].group_key;
    wm_lifecycle_event(&P, &lost);
    assert_int_equal(wm_lifecycle_tick(&P, &late, &cursor), SMP_TICK_MORE);
    drain();
    assert_int_equal(cur(&rev[0])->availability, WM_AVAIL_DEGRADED);
    assert_int_equal(cur(&rev[1])->availability, WM_AVAIL_READY);
    wm_lifecycle_tick(&P, &late, &cursor);
    drain();
    assert_int_equal(cur(&rev[1])->availability, WM_AVAIL_DEGRADED);
}

/* More replica-lost reports than the suspects set keeps (WM_SUSPECTS_MAX,
 * 4,096: a node that held more members came back without its memory): the
 * report past them, of revision b's only member, is not kept, and starts
 * the validation of every revision instead, so b (nothing readable left)
 * turns DEGRADED in the next rounds rather than staying READY until a read
 * misses. */
static void test_reports_past_the_suspects_kept_are_validated(void **state)
{
    (void)state;
    wm_revision rev[3];
    char key[64];
    seed_three("many", rev);
    find(pkey(&rev[1], 0))->mem = 0; /* b's member: nothing readable left */
    smp_event lost = {sizeof(lost), SMP_EVENT_REPLICA_LOST, key, rev[0].group_key, NULL,
                      SMP_REPLICA_MEMORY, 0, 0, 0, 0};
    for (int i = 0; i < WM_SUSPECTS_MAX; i++) { /* keys under a's group, no member of it */
        snprintf(key, sizeof(key), "%s/lost/%d", rev[0].group_key, i);
        wm_lifecycle_event(&P, &lost);
    }
    lost.key = pkey(&rev[1], 0);
    lost.group = rev[1].group_key;
    wm_lifecycle_event(&P, &lost);
    run(8);
    assert_int_equal(cur(&rev[0])->availability, WM_AVAIL_READY); /* its one member is there */
    assert_int_equal(cur(&rev[1])->availability, WM_AVAIL_DEGRADED);
    assert_int_equal(cur(&rev[2])->availability, WM_AVAIL_READY);
}

/* The validation after a start or a role change respects the round's
 * deadline too: past it, one revision is validated per round and the walk
 * goes on from its cursor. (It validated every revision its object reads
 * allowed, 2048 members a round, whatever the time: ticks of 1-3.4 s after
 * a restart with 100,000 revisions, each validation that found a change
 * appending a record.) */
static void test_validation_respects_the_deadline(void **state)
{
    (void)state;
    wm_revision rev[3];
    seed_three("val", rev);
    for (int i = 0; i < 3; i++) find(pkey(&rev[i], 0))->mem = 0; /* nothing readable left */
    smp_event rc = {sizeof(rc), SMP_EVENT_ROLE_CHANGE, NULL, NULL, NULL, SMP_REPLICA_MEMORY, 0, 0, 0, 1};
    wm_lifecycle_event(&P, &rc);
    smp_tick_budget late = B;
    late.deadline_ms = 1; /* already past */
    uint64_t cursor = 0;
    for (int round = 0; round < 3; round++) {
        wm_lifecycle_tick(&P, &late, &cursor);
        assert_int_equal(count_of(T_APPEND), 1); /* one validation, one DEGRADED record */
        drain();
        for (int i = 0; i < 3; i++)
            assert_int_equal(cur(&rev[i])->availability, i <= round ? WM_AVAIL_DEGRADED : WM_AVAIL_READY);
    }
}

/* Under memory pressure the eligible AUTO revision accessed longest ago is
 * demoted one step (HOT -> MIXED) first, one at a time; MANUAL revisions and
 * revisions inside their cooldown are left alone; the trigger is counted;
 * once usage drops, nothing more is demoted. */
static void test_auto_candidates_and_cooldown(void **state)
{
    (void)state;
    static const uint64_t bytes[2] = {100, 100};
    wm_revision a = seed("a-recent", bytes, 2, WM_MODE_AUTO);
    wm_revision b = seed("b-old", bytes, 2, WM_MODE_AUTO);
    wm_revision m = seed("c-manual", bytes, 2, WM_MODE_MANUAL);
    /* b was accessed longest ago; a is recent. */
    wm_metadata_upsert u;
    char msg[256];
    memset(&u, 0, sizeof(u));
    u.revision = *cur(&a);
    u.revision.metadata_generation++;
    u.revision.last_access_ms = 90000;
    u.revision.updated_ms = 90000;
    assert_int_equal(wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)), WM_OK);
    (void)m;

    H.used = 990;
    smp_event ev = {sizeof(ev), SMP_EVENT_MEMORY_PRESSURE, NULL, NULL, NULL, SMP_REPLICA_MEMORY, 0, 990,
                    1000, 0};
    wm_lifecycle_event(&P, &ev);
    /* Cooldown: a (updated at 90000) is inside it at wall 100000; b is not. */
    tick();
    assert_int_equal(count_of(T_APPEND), 1);
    deliver_at(0, SMP_OK);
    const wm_revision *rb = cur(&b);
    assert_true(rb->operation_id != 0);
    assert_int_equal(wm_store_operation(P.store, rb->operation_id)->target, WM_RES_MIXED);
    assert_int_equal(cur(&a)->operation_id, 0);
    assert_int_equal(cur(&m)->operation_id, 0);
    assert_int_equal(P.auto_triggers[WM_AUTO_DEMOTE_ON_PRESSURE], 1);
    /* One at a time: while b's demotion runs, nothing else starts. */
    H.wall += 50000; /* a's cooldown is over now */
    tick();
    assert_int_equal(count_of(T_APPEND), 0);
    drain();
    run(4); /* b reaches MIXED; pressure persists: the next one starts */
    assert_int_equal(cur(&b)->residency, WM_RES_MIXED);
    assert_true(P.auto_triggers[WM_AUTO_DEMOTE_ON_PRESSURE] >= 2);
    assert_int_equal(cur(&m)->residency, WM_RES_HOT);
    assert_int_equal(cur(&m)->operation_id, 0);

    /* Usage drops well below where the pressure ended: no new demotion;
     * the demoted AUTO revisions converge back to preferred (HOT), one at
     * a time, each after its cooldown; the MANUAL one was never touched. */
    H.used = 100;
    H.cooldown = 2000;
    uint64_t n = P.auto_triggers[WM_AUTO_DEMOTE_ON_PRESSURE];
    run(30);
    assert_int_equal(P.auto_triggers[WM_AUTO_DEMOTE_ON_PRESSURE], n);
    assert_true(P.auto_triggers[WM_AUTO_PROMOTE_ON_RELIEF] >= 1);
    assert_int_equal(cur(&a)->residency, WM_RES_HOT);
    assert_int_equal(cur(&b)->residency, WM_RES_HOT);
    assert_int_equal(cur(&m)->residency, WM_RES_HOT);
    assert_int_equal(cur(&m)->metadata_generation, 1);
}

/* No promotion back while the revision's promotion would bring usage near
 * the mark where the pressure ended. */
static void test_auto_relief_keeps_headroom(void **state)
{
    (void)state;
    static const uint64_t bytes[2] = {300, 300};
    wm_revision a = seed("wide", bytes, 2, WM_MODE_AUTO);
    H.cooldown = 0;
    H.used = 900;
    smp_event ev = {sizeof(ev), SMP_EVENT_MEMORY_PRESSURE, NULL, NULL, NULL, SMP_REPLICA_MEMORY, 0, 900,
                    1000, 0};
    wm_lifecycle_event(&P, &ev);
    run(6); /* HOT -> MIXED, then (pressure stays) -> COLD */
    assert_int_equal(cur(&a)->residency, WM_RES_COLD);
    /* Pressure ends below 0.8; the mark is 0.7; 500 + 600 would cross it. */
    H.used = 500;
    run(6);
    assert_int_equal(cur(&a)->residency, WM_RES_COLD);
    assert_int_equal(P.auto_triggers[WM_AUTO_PROMOTE_ON_RELIEF], 0);
    H.used = 50; /* 50 + 600 < 700 */
    run(6);
    assert_int_equal(cur(&a)->residency, WM_RES_HOT);
    assert_int_equal(P.auto_triggers[WM_AUTO_PROMOTE_ON_RELIEF], 1);
}

/* A change of role drops the working state: tasks still in flight finish
 * into the discarded job without persisting anything, and the operation is
 * picked up again from what the store holds. */
static void test_role_change_drops_working_state(void **state)
{
    (void)state;
    static const uint64_t bytes[3] = {100, 100, 100};
    wm_revision rev = seed("term", bytes, 3, WM_MODE_MANUAL);
    uint64_t op_id = start_op(&rev, WM_OPK_MIGRATING, WM_RES_COLD, 0);
    B.max_members = 1;
    tick();
    assert_int_equal(count_of(T_COLD), 1);
    smp_event rc = {sizeof(rc), SMP_EVENT_ROLE_CHANGE, NULL, NULL, NULL, SMP_REPLICA_MEMORY, 0, 0, 0, 1};
    wm_lifecycle_event(&P, &rc);
    deliver_at(0, SMP_OK);
    assert_int_equal(H.nq, 0); /* no release, no progress record from the old term */
    assert_string_equal(wm_store_operation(P.store, op_id)->cursor, "");
    run(10);
    assert_int_equal(wm_store_operation(P.store, op_id)->state, WM_OPS_SUCCEEDED);
    assert_int_equal(cur(&rev)->residency, WM_RES_COLD);
    B.max_members = 64;
}

/* A migration whose member has nothing readable left fails its batch and
 * makes the revision DEGRADED; the operation waits (RUNNING) until the
 * member is back, then completes. */
static void test_unreadable_member_degrades_migration(void **state)
{
    (void)state;
    static const uint64_t bytes[2] = {100, 100};
    wm_revision rev = seed("hole", bytes, 2, WM_MODE_MANUAL);
    uint64_t op_id = start_op(&rev, WM_OPK_MIGRATING, WM_RES_COLD, 0);
    find(pkey(&rev, 1))->mem = 0; /* lost, no cold copy either */
    run(3);
    assert_int_equal(cur(&rev)->availability, WM_AVAIL_DEGRADED);
    assert_int_equal(cur(&rev)->operation_id, op_id);
    assert_int_equal(wm_store_operation(P.store, op_id)->state, WM_OPS_RUNNING);
    assert_true(wm_store_operation(P.store, op_id)->attempts >= 1);
    find(pkey(&rev, 1))->mem = 1;
    smp_event up = {sizeof(up), SMP_EVENT_NODE_UP, NULL, NULL, "node-a", SMP_REPLICA_MEMORY, 0, 0, 0, 0};
    wm_lifecycle_event(&P, &up);
    run(8);
    assert_int_equal(cur(&rev)->availability, WM_AVAIL_READY);
    assert_int_equal(wm_store_operation(P.store, op_id)->state, WM_OPS_SUCCEEDED);
    assert_int_equal(cur(&rev)->residency, WM_RES_COLD);
}

/* ------------------------------------------------------------------------ */
/* Repair (wm_repair.c)                                                      */
/* ------------------------------------------------------------------------ */

/* Give every payload of rev a cold copy too (it came back from COLD). */
static void with_cold_copies(const wm_revision *rev)
{
    for (uint64_t i = 0; i < rev->payload_count; i++) find(pkey(rev, i))->cold = 1;
}

static void lose_memory(const wm_revision *rev, uint64_t n)
{
    find(pkey(rev, n))->mem = 0;
    smp_event ev = {sizeof(ev), SMP_EVENT_REPLICA_LOST, pkey(rev, n), rev->group_key, NULL,
                    SMP_REPLICA_MEMORY, 0, 0, 0, 0};
    wm_lifecycle_event(&P, &ev);
}

/* COLD survives the loss of memory: a manifest without a cold copy gets
 * one from the tick, and a migration to COLD releases no payload memory
 * before that copy is verified; the manifest keeps its memory replica. */
static void test_cold_survives_the_loss_of_memory(void **state)
{
    (void)state;
    static const uint64_t bytes[3] = {100, 100, 100};
    wm_revision rev = seed("coldman", bytes, 3, WM_MODE_MANUAL);
    fobj *man = find(rev.manifest_key);
    man->cold = 0;
    uint64_t op_id = start_op(&rev, WM_OPK_MIGRATING, WM_RES_COLD, 0);
    tick();
    long at = -1;
    for (size_t i = 0; i < H.nq; i++)
        if (H.q[i].kind == T_COLD && strcmp(H.q[i].key, rev.manifest_key) == 0) at = (long)i;
    assert_true(at >= 0); /* the manifest's cold copy is asked for */
    assert_int_equal(count_of(T_COLD), 4);
    /* Every payload's cold copy is verified first: nothing is released. */
    for (int k = 0; k < 3; k++) {
        long i = first_of(T_COLD);
        if (strcmp(H.q[i].key, rev.manifest_key) == 0) i++;
        assert_int_equal(H.q[i].kind, T_COLD);
        deliver_at((size_t)i, SMP_OK);
    }
    assert_int_equal(count_of(T_RELEASE), 0);
    while (H.nq > 0 && first_of(T_COLD) < 0) deliver_at(0, SMP_OK);
    assert_int_equal(count_of(T_RELEASE), 0);
    deliver_at((size_t)first_of(T_COLD), SMP_OK); /* the manifest's copy */
    assert_int_equal(man->cold, 1);
    drain();
    run(4);
    const wm_operation *op = wm_store_operation(P.store, op_id);
    assert_int_equal(op->state, WM_OPS_SUCCEEDED);
    assert_int_equal(cur(&rev)->residency, WM_RES_COLD);
    for (uint64_t i = 0; i < 3; i++) assert_int_equal(find(pkey(&rev, i))->mem, 0);
    assert_int_equal(man->mem, 1);
    assert_int_equal(man->cold, 1);
    assert_int_equal(P.manifest_cold_copies, 1);

    /* Nothing changed: the manifest scan rests (an idle tick looks at no
     * manifest), so a loss the host does not report is not seen ... */
    run(200);
    man->mem = 0;
    run(2);
    assert_int_equal(man->mem, 0);
    /* ... and the loss the host reports (replica lost) is: the manifest's
     * memory replica is restored from its cold copy. */
    smp_event lost = {sizeof(lost), SMP_EVENT_REPLICA_LOST, rev.manifest_key, rev.group_key, NULL,
                      SMP_REPLICA_MEMORY, 0, 0, 0, 0};
    wm_lifecycle_event(&P, &lost);
    run(2);
    assert_int_equal(man->mem, 1);
    assert_int_equal(P.manifest_memory_restores, 1);
}

/* A revision that becomes READY by its record gets its manifest's cold
 * copy asked for in the next round, by a lookup: no lap of the store. A
 * publish counted as a change of the table that sent the manifest scan
 * round every revision, 64 a round (and a round a second when nothing was
 * in flight): at 100,000 revisions most manifests waited minutes. */
static void test_a_revision_made_ready_gets_its_manifest_copy_without_a_lap(void **state)
{
    (void)state;
    static const uint64_t bytes[1] = {10};
    char msg[256];
    wm_revision rev = seed("zz-fresh", bytes, 1, WM_MODE_MANUAL);
    run(2); /* the validation and the lap after the start go round and rest */
    /* in the store only: nothing to care for */
    if (wmt_seed_ready(P.store, "bulk-", 0, 2000, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
    assert_int_equal(count_of(T_COLD), 0);
    /* It turns DEGRADED, loses its manifest's cold copy, and its record
     * makes it READY again (as a publish does an IMPORTING one). */
    wm_metadata_upsert u;
    memset(&u, 0, sizeof(u));
    u.revision = *cur(&rev);
    u.revision.availability = WM_AVAIL_DEGRADED;
    u.revision.metadata_generation++;
    if (wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
    find(rev.manifest_key)->cold = 0;
    wm_revision ready = *cur(&rev);
    ready.availability = WM_AVAIL_READY;
    ready.metadata_generation++;
    assert_int_equal(wm_submit_upsert(&P, &ready, NULL, 0, NULL, NULL), SMP_OK);
    drain();
    assert_int_equal(cur(&rev)->availability, WM_AVAIL_READY);
    uint64_t gets = H.object_gets;
    tick();
    long at = first_of(T_COLD);
    assert_true(at >= 0);
    assert_string_equal(H.q[at].key, rev.manifest_key);
    if (H.object_gets - gets > 4)
        fail_msg("the round looked at %llu objects to find one manifest",
                 (unsigned long long)(H.object_gets - gets));
    drain();
    assert_int_equal(find(rev.manifest_key)->cold, 1);
}

/* REPAIRING is real: a HOT revision whose members lost their memory
 * replicas but kept cold copies starts a persisted REPAIRING operation in
 * the record that says what it observes (MIXED), restores memory from cold
 * in batches with progress, retries a failed task, resumes after a restart
 * from the persisted operation, never releases anything, and ends READY +
 * HOT with the operation SUCCEEDED. */
static void test_repairing_is_real(void **state)
{
    (void)state;
    static const uint64_t bytes[3] = {100, 200, 300};
    wm_revision rev = seed("fixme", bytes, 3, WM_MODE_MANUAL);
    with_cold_copies(&rev);
    run(1);
    assert_int_equal(cur(&rev)->metadata_generation, 1);
    lose_memory(&rev, 0);
    lose_memory(&rev, 1);
    tick();
    assert_int_equal(count_of(T_APPEND), 1);
    assert_int_equal(cur(&rev)->operation_id, 0); /* not before durable */
    drain();
    const wm_revision *r = cur(&rev);
    assert_int_equal(r->availability, WM_AVAIL_READY);
    assert_int_equal(r->residency, WM_RES_MIXED);
    assert_true(r->observed_hot_ratio > 0.49 && r->observed_hot_ratio < 0.51);
    uint64_t op_id = r->operation_id;
    const wm_operation *op = wm_store_operation(P.store, op_id);
    assert_non_null(op);
    assert_int_equal(op->kind, WM_OPK_REPAIRING);
    assert_int_equal(op->target, WM_RES_HOT);
    assert_int_equal(op->state, WM_OPS_RUNNING);
    assert_int_equal(P.repairs_started, 1);

    /* One batch: memory back from cold for both; one task fails. */
    tick();
    assert_int_equal(count_of(T_MEMORY), 2);
    assert_int_equal(count_of(T_COLD) + count_of(T_RELEASE), 0);
    deliver_at((size_t)first_of(T_MEMORY), SMP_EIO);
    deliver_at((size_t)first_of(T_MEMORY), SMP_OK);
    drain(); /* the progress record */
    op = wm_store_operation(P.store, op_id);
    assert_int_equal(op->attempts, 1);
    assert_non_null(strstr(op->error, "memory replica"));

    /* Restart: the working state is gone; the operation resumes. */
    wm_lifecycle_release(&P);
    H.mono += 10000;
    for (int i = 0; i < 6; i++) {
        tick();
        assert_int_equal(count_of(T_RELEASE), 0);
        drain();
        H.mono += 1000;
        H.wall += 1000;
    }
    op = wm_store_operation(P.store, op_id);
    assert_int_equal(op->state, WM_OPS_SUCCEEDED);
    assert_int_equal(op->members_done, 3);
    r = cur(&rev);
    assert_int_equal(r->availability, WM_AVAIL_READY);
    assert_int_equal(r->residency, WM_RES_HOT);
    assert_int_equal(r->operation_id, 0);
    for (uint64_t i = 0; i < 3; i++) {
        assert_int_equal(find(pkey(&rev, i))->mem, 1);
        assert_int_equal(find(pkey(&rev, i))->cold, 1);
    }
    assert_int_equal(P.repairs_succeeded, 1);
    assert_int_equal(op->attempts, 1); /* the failed task, retried */
    assert_true(P.repair_bytes_processed >= 100);
}

/* A repair whose member loses its last replica makes the revision
 * DEGRADED and keeps retrying; once the replica is back the repair ends
 * and the revision is READY again without anyone asking. */
static void test_repair_degraded_then_ready_without_user_action(void **state)
{
    (void)state;
    static const uint64_t bytes[2] = {100, 100};
    wm_revision rev = seed("flaky", bytes, 2, WM_MODE_MANUAL);
    with_cold_copies(&rev);
    run(1);
    lose_memory(&rev, 0);
    tick();
    drain();
    uint64_t op_id = cur(&rev)->operation_id;
    assert_true(op_id > 0);
    find(pkey(&rev, 0))->cold = 0; /* the cold file goes too */
    run(3);
    assert_int_equal(cur(&rev)->availability, WM_AVAIL_DEGRADED);
    assert_int_equal(cur(&rev)->operation_id, op_id);
    const wm_operation *op = wm_store_operation(P.store, op_id);
    assert_int_equal(op->state, WM_OPS_RUNNING);
    assert_true(op->attempts >= 1);

    find(pkey(&rev, 0))->cold = 1; /* its node is back */
    run(8);
    op = wm_store_operation(P.store, op_id);
    assert_int_equal(op->state, WM_OPS_SUCCEEDED);
    assert_int_equal(cur(&rev)->availability, WM_AVAIL_READY);
    assert_int_equal(cur(&rev)->residency, WM_RES_HOT);
    assert_int_equal(find(pkey(&rev, 0))->mem, 1);
}

/* READY is re-validated after a start: the first round checks every
 * revision against its replicas -- a HOT one that lost memory but kept cold
 * copies is repaired, a COLD one whose members are all in memory too is
 * recorded HOT, a HOT one with a member gone is DEGRADED -- and a role
 * change checks them all again (nothing changed: no record). */
static void test_ready_revalidated_after_start(void **state)
{
    (void)state;
    static const uint64_t bytes[2] = {100, 100};
    wm_revision h = seed("val-h", bytes, 2, WM_MODE_MANUAL);
    wm_revision c = seed("val-c", bytes, 2, WM_MODE_MANUAL);
    wm_revision m = seed("val-m", bytes, 2, WM_MODE_MANUAL);
    with_cold_copies(&h);
    for (uint64_t i = 0; i < 2; i++) find(pkey(&h, i))->mem = 0;
    {
        /* c is recorded COLD (straight into the store). */
        wm_metadata_upsert u;
        char msg[256];
        memset(&u, 0, sizeof(u));
        u.revision = *cur(&c);
        u.revision.residency = WM_RES_COLD;
        u.revision.observed_hot_ratio = 0.0;
        u.revision.metadata_generation++;
        if (wm_store_apply_upsert(P.store, &u, msg, sizeof(msg)) != WM_OK) fail_msg("%s", msg);
        with_cold_copies(&c);
    }
    find(pkey(&m, 1))->mem = 0;
    tick();
    assert_int_equal(count_of(T_APPEND), 3);
    drain();
    assert_int_equal(wm_store_operation(P.store, cur(&h)->operation_id)->kind, WM_OPK_REPAIRING);
    assert_int_equal(cur(&c)->residency, WM_RES_HOT);
    assert_true(cur(&c)->observed_hot_ratio == 1.0);
    assert_int_equal(cur(&c)->operation_id, 0);
    assert_int_equal(cur(&m)->availability, WM_AVAIL_DEGRADED);
    run(6);
    assert_int_equal(cur(&h)->residency, WM_RES_HOT);
    assert_int_equal(cur(&h)->operation_id, 0);

    uint64_t gh = cur(&h)->metadata_generation, gc = cur(&c)->metadata_generation;
    smp_event rc = {sizeof(rc), SMP_EVENT_ROLE_CHANGE, NULL, NULL, NULL, SMP_REPLICA_MEMORY, 0, 0, 0, 0};
    wm_lifecycle_event(&P, &rc);
    run(2);
    assert_int_equal(cur(&h)->metadata_generation, gh);
    assert_int_equal(cur(&c)->metadata_generation, gc);
}


static void read_miss(const char *key, const char *group)
{
    smp_event ev = {sizeof(ev), SMP_EVENT_READ_MISS, key, group, NULL, SMP_REPLICA_MEMORY, 0, 0, 0, 0};
    wm_lifecycle_event(&P, &ev);
}

/* READY is re-validated on a read miss: no replica-lost report came, but a
 * read found a member missing. The revision is checked member by member:
 * one whose member has nothing readable left is DEGRADED (the host did not
 * know the object: its revision is found from the key); one whose member
 * lost memory but kept its cold copy gets its residency and hot ratio
 * recomputed (MIXED, 1/3) and a REPAIRING operation, which brings it back
 * to HOT. A miss on a revision whose replicas are as recorded, or on a key
 * of no revision, writes nothing. */
static void test_ready_revalidated_on_a_read_miss(void **state)
{
    (void)state;
    static const uint64_t bytes[3] = {100, 100, 100};
    wm_revision x = seed("miss-x", bytes, 3, WM_MODE_MANUAL);
    wm_revision y = seed("miss-y", bytes, 3, WM_MODE_MANUAL);
    wm_revision z = seed("miss-z", bytes, 3, WM_MODE_MANUAL);
    with_cold_copies(&y);
    run(1); /* the validation after the start: nothing to do */
    uint64_t gz = cur(&z)->metadata_generation;

    find(pkey(&x, 1))->mem = 0;  /* gone, no report */
    find(pkey(&y, 0))->mem = 0;  /* gone from memory, its cold copy left */
    read_miss(pkey(&x, 1), "");  /* unknown to the host: found by its key */
    read_miss(pkey(&y, 0), y.group_key);
    read_miss(pkey(&z, 2), z.group_key); /* z is as recorded */
    read_miss("plain/key", "");
    assert_int_equal(P.read_misses, 3);
    tick();
    assert_int_equal(cur(&x)->availability, WM_AVAIL_READY); /* not before durable */
    drain();
    assert_int_equal(cur(&x)->availability, WM_AVAIL_DEGRADED);
    const wm_revision *r = cur(&y);
    assert_int_equal(r->availability, WM_AVAIL_READY);
    assert_int_equal(r->residency, WM_RES_MIXED);
    assert_true(r->observed_hot_ratio > 0.66 && r->observed_hot_ratio < 0.67);
    uint64_t op_id = r->operation_id;
    assert_true(op_id > 0);
    assert_int_equal(wm_store_operation(P.store, op_id)->kind, WM_OPK_REPAIRING);
    assert_int_equal(wm_store_operation(P.store, op_id)->target, WM_RES_HOT);
    assert_int_equal(cur(&z)->metadata_generation, gz);
    run(6);
    assert_int_equal(wm_store_operation(P.store, op_id)->state, WM_OPS_SUCCEEDED);
    assert_int_equal(cur(&y)->residency, WM_RES_HOT);
    assert_int_equal(find(pkey(&y, 0))->mem, 1);
    assert_int_equal(cur(&x)->availability, WM_AVAIL_DEGRADED);
    assert_int_equal(cur(&z)->metadata_generation, gz);
}


/* LEASE_ACQUIRE / RENEW / RELEASE of rev, answered once its record is
 * durable; the lease id the answer carries (0: none). */
static uint64_t lease_rpc(uint32_t method, const wm_revision *rev, uint64_t lease_id)
{
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, &rev->id);
    Wmrpc__LeaseRequest req = WMRPC__LEASE_REQUEST__INIT;
    req.identity = &id;
    req.lease_id = lease_id;
    uint8_t body[2048];
    size_t len = wmrpc__lease_request__pack(&req, body);
    smp_rpc_call call;
    memset(&call, 0, sizeof(call));
    int rc = method == WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE ? wm_rpc_lease_acquire(&P, &call, body, len)
             : method == WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW ? wm_rpc_lease_renew(&P, &call, body, len)
                                                                 : wm_rpc_lease_release(&P, &call, body, len);
    assert_int_equal(rc, SMP_OK);
    while (!call.answered && first_of(T_APPEND) >= 0) deliver_at((size_t)first_of(T_APPEND), SMP_OK);
    assert_true(call.answered);
    assert_int_equal(call.status, SMP_OK);
    Wmrpc__LeaseResponse *r = wmrpc__lease_response__unpack(NULL, call.len, call.body);
    assert_non_null(r);
    uint64_t got = r->lease ? r->lease->id : 0;
    wmrpc__lease_response__free_unpacked(r, NULL);
    return got;
}

/* AUTO is LRU for real: under memory pressure the AUTO revision used least
 * recently is demoted first, and renewals and releases count as uses, not
 * only grants. a was leased first but renewed and released last; b was
 * leased and released in between: b is demoted, a stays HOT. The accesses
 * moved last access in memory without a new metadata generation. */
static void test_auto_demotes_the_least_recently_used(void **state)
{
    (void)state;
    static const uint64_t bytes[2] = {100, 100};
    wm_revision a = seed("lru-a", bytes, 2, WM_MODE_AUTO);
    wm_revision b = seed("lru-b", bytes, 2, WM_MODE_AUTO);
    run(1);
    H.wall = 200000;
    uint64_t la = lease_rpc(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &a, 0);
    assert_true(la > 0);
    H.wall = 210000;
    uint64_t lb = lease_rpc(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, &b, 0);
    lease_rpc(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, &b, lb);
    H.wall = 220000;
    assert_int_equal(lease_rpc(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, &a, la), la);
    lease_rpc(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, &a, la);
    assert_int_equal(cur(&a)->last_access_ms, 220000);
    assert_int_equal(cur(&b)->last_access_ms, 210000);
    assert_int_equal(cur(&a)->metadata_generation, 1);
    assert_int_equal(cur(&b)->metadata_generation, 1);

    H.used = 990;
    smp_event ev = {sizeof(ev), SMP_EVENT_MEMORY_PRESSURE, NULL, NULL, NULL, SMP_REPLICA_MEMORY, 0, 990,
                    1000, 0};
    wm_lifecycle_event(&P, &ev);
    tick();
    drain();
    assert_true(cur(&b)->operation_id != 0);
    assert_int_equal(wm_store_operation(P.store, cur(&b)->operation_id)->target, WM_RES_MIXED);
    assert_int_equal(cur(&a)->operation_id, 0);
    assert_int_equal(cur(&a)->residency, WM_RES_HOT);
}

/* weightctl repair on rev at its current generation (wm_rpc_repair),
 * answered once its record is durable; the call's status. */
static int repair_rpc(const wm_revision *rev)
{
    const wm_revision *r = cur(rev);
    Wmrpc__WeightIdentity id;
    wmt_pb_identity(&id, &r->id);
    Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
    req.identity = &id;
    req.expected_metadata_generation = r->metadata_generation;
    uint8_t body[2048];
    size_t len = wmrpc__identity_request__pack(&req, body);
    smp_rpc_call call;
    memset(&call, 0, sizeof(call));
    wm_rpc_repair(&P, &call, body, len);
    while (!call.answered && first_of(T_APPEND) >= 0) deliver_at((size_t)first_of(T_APPEND), SMP_OK);
    assert_true(call.answered);
    return call.status;
}

/* Repair retries are bounded: a repair whose member cannot be restored
 * (its only replica lost meanwhile) retries with backoff, and after
 * repair_max_attempts failed batches ends FAILED with the reason, the
 * revision DEGRADED, counted as gave_up; the tick starts no new repair of
 * it by itself and appends nothing more. An explicit repair then starts a
 * new operation toward the target of the one that gave up and, with the
 * replica back, restores the revision to READY + HOT. */
static void test_repair_retries_are_bounded(void **state)
{
    (void)state;
    static const uint64_t bytes[2] = {100, 100};
    wm_revision rev = seed("capped", bytes, 2, WM_MODE_MANUAL);
    with_cold_copies(&rev);
    run(1);
    H.repair_max = 3;
    lose_memory(&rev, 0);
    tick();
    drain();
    uint64_t op_id = cur(&rev)->operation_id;
    assert_true(op_id > 0);
    assert_int_equal(wm_store_operation(P.store, op_id)->kind, WM_OPK_REPAIRING);
    find(pkey(&rev, 0))->cold = 0; /* its cold file goes too: nothing to restore from */
    uint32_t seen = 0;
    for (int round = 0; round < 40 && cur(&rev)->operation_id == op_id; round++) {
        const wm_operation *op = wm_store_operation(P.store, op_id);
        assert_true(op->attempts >= seen); /* each failure counted, persisted */
        seen = op->attempts;
        assert_true(op->attempts <= 3);
        run(1);
    }
    const wm_operation *op = wm_store_operation(P.store, op_id);
    assert_int_equal(op->state, WM_OPS_FAILED);
    assert_int_equal(op->attempts, 3);
    assert_non_null(strstr(op->error, "gave up after 3 attempts (repair_max_attempts)"));
    const wm_revision *r = cur(&rev);
    assert_int_equal(r->operation_id, 0);
    assert_int_equal(r->availability, WM_AVAIL_DEGRADED);
    assert_int_equal(P.repairs_gave_up, 1);
    assert_int_equal(P.repairs_failed, 1);

    /* No new repair by itself, nothing appended. */
    uint64_t gen = r->metadata_generation;
    for (int i = 0; i < 5; i++) {
        tick();
        assert_int_equal(count_of(T_APPEND), 0);
        assert_int_equal(count_of(T_MEMORY), 0);
        drain();
        H.mono += 1000;
        H.wall += 1000;
    }
    assert_int_equal(cur(&rev)->metadata_generation, gen);
    assert_int_equal(cur(&rev)->operation_id, 0);

    /* weightctl repair: a new operation, toward HOT again. */
    find(pkey(&rev, 0))->cold = 1; /* the replica is back */
    assert_int_equal(repair_rpc(&rev), SMP_OK);
    uint64_t again = cur(&rev)->operation_id;
    assert_true(again > op_id);
    assert_int_equal(wm_store_operation(P.store, again)->kind, WM_OPK_REPAIRING);
    assert_int_equal(wm_store_operation(P.store, again)->target, WM_RES_HOT);
    run(8);
    assert_int_equal(wm_store_operation(P.store, again)->state, WM_OPS_SUCCEEDED);
    assert_int_equal(cur(&rev)->availability, WM_AVAIL_READY);
    assert_int_equal(cur(&rev)->residency, WM_RES_HOT);
    assert_int_equal(find(pkey(&rev, 0))->mem, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_batches_bounded_and_cursor_persisted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_actual_replicas_override_stale_progress, setup, teardown),
        cmocka_unit_test_setup_teardown(test_role_change_drops_working_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_blocks_release_but_not_creation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failure_keeps_ready_and_retries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_refused_busy_is_a_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mixed_then_hot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deletion_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_degraded_on_loss_and_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reports_past_the_suspects_kept_are_validated, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_degraded_recheck_and_suspects_respect_the_deadline,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_validation_respects_the_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unreadable_member_degrades_migration, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auto_candidates_and_cooldown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auto_relief_keeps_headroom, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cold_survives_the_loss_of_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repairing_is_real, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_degraded_then_ready_without_user_action, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ready_revalidated_after_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair_retries_are_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ready_revalidated_on_a_read_miss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auto_demotes_the_least_recently_used, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_revision_made_ready_gets_its_manifest_copy_without_a_lap,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
