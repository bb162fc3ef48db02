/* test_ha_oplog_etcd.c -- the etcd OpLog against a real etcd.
 *
 * One 1-member etcd (etcd_fixture) serves the whole program; each test
 * writes under its own prefix and has its own uv loop. The election is a
 * stand-in written here: grant a lease, put the leader key with it in a
 * create-if-absent txn, and take the put's revision as the key's create
 * revision -- the fence the etcd backend checks in every batch. Waits are
 * bounded (10 s) and poll the loop; nothing depends on wall-clock speed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_client.h"
#include "etcd_fixture.h"
#include "oplog.h"

#define MAX_RECS 4096
#define WAIT_NS (10ull * 1000000000ull)

static etcd_fixture fx;
static etcd_client *cli;

/* -- the loop ---------------------------------------------------------------- */

typedef struct env {
    uv_loop_t loop;
    uv_timer_t tick;   /* keeps uv_run(ONCE) from spinning while we poll */
    char prefix[64];
    char leader_key[96];
    char lines[16][512];
    int nlines;
} env;

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

static void env_init(env *e, const char *name)
{
    memset(e, 0, sizeof(*e));
    assert_int_equal(uv_loop_init(&e->loop), 0);
    uv_timer_init(&e->loop, &e->tick);
    uv_timer_start(&e->tick, on_tick, 2, 2);
    snprintf(e->prefix, sizeof(e->prefix), "/oplog_test/%s/", name);
    snprintf(e->leader_key, sizeof(e->leader_key), "/oplog_test/%s/leader", name);
}

static void env_fini(env *e)
{
    uv_close((uv_handle_t *)&e->tick, NULL);
    uv_run(&e->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&e->loop), 0);
}

static void spin(env *e)
{
    uv_run(&e->loop, UV_RUN_ONCE);
}

#define WAIT_FOR(e, cond)                                                  \
    do {                                                                   \
        uint64_t deadline_ = uv_hrtime() + WAIT_NS;                        \
        while (!(cond) && uv_hrtime() < deadline_)                         \
            spin(e);                                                       \
        assert_true(cond);                                                 \
    } while (0)

static pthread_mutex_t lines_mu = PTHREAD_MUTEX_INITIALIZER;

static void log_to_env(void *arg, const char *line)
{
    env *e = arg;
    pthread_mutex_lock(&lines_mu); /* any thread */
    if (e->nlines < 16)
        snprintf(e->lines[e->nlines++], sizeof(e->lines[0]), "%s", line);
    pthread_mutex_unlock(&lines_mu);
}

/* 1 when a log line so far contains needle. */
static int logged(env *e, const char *needle)
{
    int found = 0;
    pthread_mutex_lock(&lines_mu);
    for (int i = 0; i < e->nlines && !found; i++)
        found = strstr(e->lines[i], needle) != NULL;
    pthread_mutex_unlock(&lines_mu);
    return found;
}

typedef struct fenced_seen {
    int n;
    char why[512];
} fenced_seen;

static void on_fenced(void *arg, const char *why)
{
    fenced_seen *f = arg;
    f->n++;
    snprintf(f->why, sizeof(f->why), "%s", why);
}

static uint32_t next_unreachable_ms; /* for the next open_log; 0: default */

static oplog *open_log(env *e, fenced_seen *fs)
{
    oplog_etcd_options o = {0};
    o.unreachable_ms = next_unreachable_ms;
    oplog *log = NULL;
    char err[256] = "";
    o.client = cli;
    o.prefix = e->prefix;
    o.log_line = log_to_env;
    o.log_arg = e;
    o.on_fenced = on_fenced;
    o.fenced_arg = fs;
    int rc = oplog_etcd_open(&e->loop, &o, &log, err, sizeof(err));
    if (rc != 0)
        fail_msg("oplog_etcd_open: %s: %s", smp_strerror(rc), err);
    return log;
}

static void close_log(env *e, oplog *log)
{
    oplog_close(log);
    uv_run(&e->loop, UV_RUN_NOWAIT);
}

/* -- the election stand-in ------------------------------------------------- */

typedef struct term {
    int64_t lease;
    int64_t create_rev;
    oplog_etcd_fence fence;
} term;

/* Become leader of e's election as `who`: grant a lease of ttl_s, put the
 * leader key with it if nobody holds it. Returns 0, or -1 when the key is
 * held. */
static int elect(env *e, const char *who, int64_t ttl_s, term *t)
{
    char err[256];
    etcd_compare cmp = {.target = ETCD_CMP_VERSION, .result = ETCD_CMP_EQUAL,
                        .key = e->leader_key, .key_len = strlen(e->leader_key),
                        .number = 0};
    etcd_op put = {.type = ETCD_OP_PUT, .key = e->leader_key,
                   .key_len = strlen(e->leader_key), .value = who,
                   .value_len = strlen(who)};
    etcd_txn_result res;
    int ok;
    memset(t, 0, sizeof(*t));
    assert_int_equal(etcd_lease_grant(cli, ttl_s, &t->lease, NULL, err, sizeof(err)), 0);
    put.lease = t->lease;
    if (etcd_txn(cli, &cmp, 1, &put, 1, NULL, 0, &res, err, sizeof(err)) != 0)
        fail_msg("election txn: %s", err);
    ok = res.succeeded;
    t->create_rev = res.revision;
    etcd_txn_result_free(&res);
    t->fence.leader_key = e->leader_key;
    t->fence.leader_key_len = strlen(e->leader_key);
    t->fence.lease_id = t->lease;
    t->fence.create_revision = t->create_rev;
    t->fence.lease_ttl_ms = (uint32_t)ttl_s * 1000;
    return ok ? 0 : -1;
}

static void revoke_term(term *t)
{
    char err[256] = "";
    int rc = etcd_lease_revoke(cli, t->lease, err, sizeof(err));
    if (rc != 0) fail_msg("etcd_lease_revoke: %s: %s", smp_strerror(rc), err);
}

/* -- records ------------------------------------------------------------------ */

/* The payload of record seq: deterministic bytes of a length that varies. */
static size_t payload_of(uint64_t seq, uint8_t *buf)
{
    size_t len = (size_t)(seq * 37 % 300);
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(seq * 131 + i * 7);
    return len;
}

typedef struct seen {
    int n;
    uint64_t seq[MAX_RECS];
    int bad;            /* a record whose bytes are not payload_of(seq) */
    int out_of_order;
    uint64_t stop_at;   /* return SMP_EPROTO at this seq; 0: never */
    int stops;
    int stop_status;
    char stop_why[512];
} seen;

static int on_record(void *arg, const oplog_record *r)
{
    seen *s = arg;
    uint8_t want[512];
    size_t len = payload_of(r->seq, want);
    if (s->stop_at != 0 && r->seq == s->stop_at)
        return SMP_EPROTO;
    if (r->len != len || memcmp(r->payload, want, len) != 0 ||
        r->type != (uint16_t)(r->seq % 7 + 1) || r->encver != 3)
        s->bad++;
    if (s->n > 0 && r->seq != s->seq[s->n - 1] + 1)
        s->out_of_order++;
    if (s->n < MAX_RECS)
        s->seq[s->n++] = r->seq;
    return 0;
}

static void on_follow_stop(void *arg, int status, const char *why)
{
    seen *s = arg;
    s->stops++;
    s->stop_status = status;
    snprintf(s->stop_why, sizeof(s->stop_why), "%s", why);
}

typedef struct acks {
    int n;
    int failed;
    int out_of_order;
    uint64_t last;
    int status[MAX_RECS];
} acks;

static void on_durable(void *arg, int status, uint64_t seq)
{
    acks *a = arg;
    if (a->last != 0 && seq != a->last + 1)
        a->out_of_order++;
    a->last = seq;
    if (a->n < MAX_RECS)
        a->status[a->n] = status;
    a->n++;
    if (status != 0)
        a->failed++;
}

/* Append records first..first+n-1 (their payload_of bytes). */
static void append_n(oplog *log, uint64_t first, int n, acks *a)
{
    uint8_t buf[512];
    for (int i = 0; i < n; i++) {
        uint64_t seq = first + (uint64_t)i, got = 0;
        size_t len = payload_of(seq, buf);
        int rc = oplog_append(log, (uint16_t)(seq % 7 + 1), 3, buf, len, on_durable, a, &got);
        if (rc != 0)
            fail_msg("append %" PRIu64 ": %s", seq, smp_strerror(rc));
        assert_int_equal(got, seq);
    }
}

typedef struct promoted {
    int done;
    int status;
} promoted;

static void on_promoted(void *arg, int status)
{
    promoted *p = arg;
    p->done++;
    p->status = status;
}

/* Promote log with t's fence and wait for the outcome. */
static int promote(env *e, oplog *log, term *t, seen *s)
{
    promoted p = {0};
    assert_int_equal(oplog_etcd_promote(log, &t->fence, on_record, s, on_promoted, &p), 0);
    WAIT_FOR(e, p.done == 1);
    return p.status;
}

/* How many record keys etcd holds under e's prefix, and whether seq's exists. */
static int64_t count_records(env *e)
{
    char begin[128], end[128], err[256];
    etcd_range_result r;
    snprintf(begin, sizeof(begin), "%slog/", e->prefix);
    snprintf(end, sizeof(end), "%slog0", e->prefix);
    assert_int_equal(etcd_range(cli, begin, strlen(begin), end, strlen(end), 0, 0, 1, &r,
                                err, sizeof(err)), 0);
    int64_t n = r.count;
    etcd_range_result_free(&r);
    return n;
}

static int record_exists(env *e, uint64_t seq)
{
    char key[128], err[256];
    etcd_range_result r;
    snprintf(key, sizeof(key), "%slog/%020" PRIu64, e->prefix, seq);
    assert_int_equal(etcd_range(cli, key, strlen(key), NULL, 0, 0, 0, 1, &r, err,
                                sizeof(err)), 0);
    int n = (int)r.n;
    etcd_range_result_free(&r);
    return n;
}

static uint64_t etcd_head(env *e)
{
    char key[128], err[256], val[32] = "0";
    etcd_range_result r;
    snprintf(key, sizeof(key), "%slog_head", e->prefix);
    assert_int_equal(etcd_range(cli, key, strlen(key), NULL, 0, 0, 0, 0, &r, err,
                                sizeof(err)), 0);
    if (r.n == 1 && r.kvs[0].value_len < sizeof(val)) {
        memcpy(val, r.kvs[0].value, r.kvs[0].value_len);
        val[r.kvs[0].value_len] = '\0';
    }
    etcd_range_result_free(&r);
    return strtoull(val, NULL, 10);
}

/* Open, promote and write records 1..n through a fresh writer (closed). */
static void write_log(env *e, int n)
{
    fenced_seen fs = {0};
    seen s = {0};
    acks a = {0};
    term t;
    oplog *w = open_log(e, &fs);
    assert_int_equal(elect(e, "writer", 10, &t), 0);
    assert_int_equal(promote(e, w, &t, &s), 0);
    append_n(w, oplog_last_seq(w) + 1, n, &a);
    WAIT_FOR(e, a.n == n);
    assert_int_equal(a.failed, 0);
    close_log(e, w);
    revoke_term(&t);
}

/* -- tests ------------------------------------------------------------------- */

/* A promoted log takes 1000 appends made in one burst from the loop; their
 * callbacks come in order with status 0, several records share one txn, and
 * a second log replays every record byte for byte. */
static void test_append_1000_then_replay_byte_identical(void **state)
{
    env e;
    fenced_seen fs = {0};
    seen s = {0}, r = {0};
    acks a = {0};
    term t;
    oplog_stats st;
    char err[256] = "";
    (void)state;
    env_init(&e, "append1000");
    oplog *w = open_log(&e, &fs);
    assert_int_equal(oplog_last_seq(w), 0);
    assert_int_equal(elect(&e, "master-a", 10, &t), 0);
    assert_int_equal(promote(&e, w, &t, &s), 0);
    append_n(w, 1, 1000, &a);
    WAIT_FOR(&e, a.n == 1000);
    assert_int_equal(a.failed, 0);
    assert_int_equal(a.out_of_order, 0);
    assert_int_equal(a.last, 1000);
    assert_int_equal(oplog_durable_seq(w), 1000);
    assert_int_equal(oplog_etcd_head(w), 1000);
    oplog_stats_get(w, &st);
    assert_int_equal(st.appends, 1000);
    assert_int_equal(st.durable_count, 1000);
    assert_true(st.batches < st.appends);       /* group commit */
    assert_true(st.max_batch > 1 && st.max_batch <= 127);
    assert_int_equal(st.syncs, st.batches);
    assert_int_equal(etcd_head(&e), 1000);
    assert_int_equal(count_records(&e), 1000);

    oplog *rd = open_log(&e, &fs);
    assert_int_equal(oplog_last_seq(rd), 1000);
    assert_int_equal(oplog_etcd_head(rd), 1000);
    assert_int_equal(oplog_replay(rd, 0, on_record, &r, err, sizeof(err)), 0);
    assert_int_equal(r.n, 1000);
    assert_int_equal(r.bad, 0);
    assert_int_equal(r.out_of_order, 0);
    assert_int_equal(r.seq[0], 1);
    /* Again, from the middle: replay works any number of times. */
    memset(&r, 0, sizeof(r));
    assert_int_equal(oplog_replay(rd, 990, on_record, &r, err, sizeof(err)), 0);
    assert_int_equal(r.n, 10);
    assert_int_equal(r.seq[0], 991);
    /* A standby cannot append or truncate. */
    assert_int_equal(oplog_append(rd, 1, 1, "x", 1, NULL, NULL, NULL), SMP_ENOTLEADER);
    assert_int_equal(oplog_truncate_before(rd, 10), SMP_ESTATE);
    close_log(&e, rd);
    close_log(&e, w);
    revoke_term(&t);
    env_fini(&e);
}

/* A second log following from 0 sees every record in order while the first
 * writes them, in bursts from the loop and re-appends from callbacks. */
static void test_follower_sees_every_record_in_order(void **state)
{
    env e;
    fenced_seen fs = {0};
    seen s = {0}, f = {0};
    acks a = {0};
    term t;
    (void)state;
    env_init(&e, "follow");
    write_log(&e, 30); /* some before the follower starts */
    oplog *w = open_log(&e, &fs);
    oplog *fl = open_log(&e, &fs);
    assert_int_equal(oplog_etcd_follow(fl, 0, on_record, &f, on_follow_stop, &f), 0);
    assert_int_equal(oplog_etcd_follow(fl, 0, on_record, &f, on_follow_stop, &f), SMP_ESTATE);
    assert_int_equal(oplog_replay(fl, 0, on_record, &f, NULL, 0), SMP_ESTATE);
    assert_int_equal(elect(&e, "master-a", 10, &t), 0);
    assert_int_equal(promote(&e, w, &t, &s), 0);
    assert_int_equal(s.n, 0); /* opened at head 30: nothing to catch up on */
    assert_int_equal(oplog_last_seq(w), 30);
    for (int burst = 0; burst < 10; burst++) {
        append_n(w, 31 + (uint64_t)burst * 50, 50, &a);
        WAIT_FOR(&e, a.n == (burst + 1) * 50);
    }
    WAIT_FOR(&e, f.n == 530);
    assert_int_equal(a.failed, 0);
    assert_int_equal(f.bad, 0);
    assert_int_equal(f.out_of_order, 0);
    assert_int_equal(f.seq[0], 1);
    assert_int_equal(f.seq[529], 530);
    assert_int_equal(f.stops, 0);
    assert_int_equal(oplog_last_seq(fl), 530);
    assert_int_equal(oplog_etcd_head(fl), 530);
    close_log(&e, fl);
    assert_int_equal(f.stops, 0); /* close is not a stop */
    close_log(&e, w);
    revoke_term(&t);
    env_fini(&e);
}

/* After the writer's lease is revoked, its next append's callback gets
 * SMP_EDURABILITY, on_fenced names the cause, nothing of it is in etcd, and
 * later appends fail. */
static void test_revoked_lease_fences_the_writer(void **state)
{
    env e;
    fenced_seen fs = {0};
    seen s = {0};
    acks a = {0}, b = {0};
    term t;
    (void)state;
    env_init(&e, "revoked");
    oplog *w = open_log(&e, &fs);
    assert_int_equal(elect(&e, "master-a", 10, &t), 0);
    assert_int_equal(promote(&e, w, &t, &s), 0);
    append_n(w, 1, 10, &a);
    WAIT_FOR(&e, a.n == 10);
    assert_int_equal(a.failed, 0);
    revoke_term(&t);
    append_n(w, 11, 3, &b);
    WAIT_FOR(&e, b.n == 3);
    assert_int_equal(b.failed, 3);
    assert_int_equal(b.status[0], SMP_EDURABILITY);
    assert_int_equal(b.out_of_order, 0);
    WAIT_FOR(&e, fs.n == 1);
    assert_non_null(strstr(fs.why, "is gone"));
    assert_int_equal(record_exists(&e, 11), 0);
    assert_int_equal(count_records(&e), 10);
    assert_int_equal(etcd_head(&e), 10);
    assert_int_equal(oplog_append(w, 1, 1, "x", 1, NULL, NULL, NULL), SMP_EDURABILITY);
    assert_int_equal(oplog_truncate_before(w, 5), SMP_EDURABILITY);
    assert_int_equal(oplog_durable_seq(w), 10);
    close_log(&e, w);
    env_fini(&e);
}

/* A writer paused past its lease (SIGSTOP-like: the lease expired, another
 * master was elected and wrote) cannot append when it resumes with its old
 * fence: its records fail, the new leader's stay, on_fenced names the
 * holder. */
static void test_paused_writer_cannot_append_after_new_leader(void **state)
{
    env e;
    fenced_seen fs_old = {0}, fs_new = {0};
    seen s_old = {0}, s_new = {0};
    acks a = {0}, b = {0}, c = {0};
    term t_old, t_new;
    char err[256];
    (void)state;
    env_init(&e, "paused");
    oplog *old = open_log(&e, &fs_old);
    oplog *nw = open_log(&e, &fs_new);
    assert_int_equal(elect(&e, "master-old", 10, &t_old), 0);
    assert_int_equal(promote(&e, old, &t_old, &s_old), 0);
    append_n(old, 1, 20, &a);
    WAIT_FOR(&e, a.n == 20);
    assert_int_equal(a.failed, 0);
    /* The old master "pauses"; its lease runs out (revoked here). */
    revoke_term(&t_old);
    assert_int_equal(elect(&e, "master-new", 10, &t_new), 0);
    assert_int_equal(promote(&e, nw, &t_new, &s_new), 0);
    assert_int_equal(s_new.n, 20); /* caught up through its fn */
    assert_int_equal(oplog_last_seq(nw), 20);
    append_n(nw, 21, 5, &b);
    WAIT_FOR(&e, b.n == 5);
    assert_int_equal(b.failed, 0);
    /* The old master resumes and appends with its old fence. */
    append_n(old, 21, 2, &c);
    WAIT_FOR(&e, c.n == 2);
    assert_int_equal(c.failed, 2);
    WAIT_FOR(&e, fs_old.n == 1);
    assert_non_null(strstr(fs_old.why, "master-new"));
    assert_int_equal(fs_new.n, 0);
    assert_int_equal(etcd_head(&e), 25);
    /* Every record in etcd is the new leader's or from before. */
    seen r = {0};
    oplog *rd = open_log(&e, &fs_old);
    assert_int_equal(oplog_replay(rd, 0, on_record, &r, err, sizeof(err)), 0);
    assert_int_equal(r.n, 25);
    assert_int_equal(r.bad, 0);
    close_log(&e, rd);
    /* A promote of the old master with its old fence is refused. */
    oplog *again = open_log(&e, &fs_old);
    seen s2 = {0};
    assert_int_equal(promote(&e, again, &t_old, &s2), SMP_ENOTLEADER);
    close_log(&e, again);
    close_log(&e, old);
    close_log(&e, nw);
    revoke_term(&t_new);
    env_fini(&e);
}

/* A promote with a fence that does not hold (wrong create revision, a
 * revoked lease) fails with SMP_ENOTLEADER; the log stays a standby. */
static void test_promote_with_stale_fence_is_refused(void **state)
{
    env e;
    fenced_seen fs = {0};
    seen s = {0};
    term t, stale;
    (void)state;
    env_init(&e, "stale");
    oplog *w = open_log(&e, &fs); /* opened at head 0 */
    write_log(&e, 5);
    assert_int_equal(elect(&e, "master-a", 10, &t), 0);
    stale = t;
    stale.fence.create_revision = t.create_rev - 1;
    assert_int_equal(promote(&e, w, &stale, &s), SMP_ENOTLEADER);
    assert_int_equal(oplog_append(w, 1, 1, "x", 1, NULL, NULL, NULL), SMP_ENOTLEADER);
    stale = t;
    stale.fence.lease_id = t.lease + 1;
    assert_int_equal(promote(&e, w, &stale, &s), SMP_ENOTLEADER);
    /* The right fence works after the refusals, and catches up. */
    assert_int_equal(promote(&e, w, &t, &s), 0);
    assert_int_equal(s.n, 5); /* written after it opened: caught up through fn */
    assert_int_equal(s.bad, 0);
    assert_int_equal(oplog_last_seq(w), 5);
    close_log(&e, w);
    revoke_term(&t);
    /* The lease revoked: the same fence is stale now. */
    oplog *w2 = open_log(&e, &fs);
    seen s2 = {0};
    assert_int_equal(promote(&e, w2, &t, &s2), SMP_ENOTLEADER);
    close_log(&e, w2);
    env_fini(&e);
}

/* truncate_before deletes the record keys below it; replay from before them
 * fails naming garbage collection, from after them works; following from a
 * collected position stops with SMP_ERANGE. */
static void test_truncate_then_replay_and_follow(void **state)
{
    env e;
    fenced_seen fs = {0};
    seen s = {0}, r = {0}, f = {0};
    acks a = {0};
    term t;
    char err[256] = "";
    (void)state;
    env_init(&e, "truncate");
    oplog *w = open_log(&e, &fs);
    assert_int_equal(elect(&e, "master-a", 10, &t), 0);
    assert_int_equal(promote(&e, w, &t, &s), 0);
    append_n(w, 1, 100, &a);
    WAIT_FOR(&e, a.n == 100);
    assert_int_equal(oplog_truncate_before(w, 51), 0);
    WAIT_FOR(&e, count_records(&e) == 50);
    assert_int_equal(record_exists(&e, 50), 0);
    assert_int_equal(record_exists(&e, 51), 1);

    oplog *rd = open_log(&e, &fs);
    assert_int_equal(oplog_replay(rd, 0, on_record, &r, err, sizeof(err)), SMP_EPROTO);
    assert_non_null(strstr(err, "records before 51 were garbage-collected"));
    assert_int_equal(r.n, 0);
    assert_int_equal(oplog_replay(rd, 49, on_record, &r, err, sizeof(err)), SMP_EPROTO);
    assert_int_equal(oplog_replay(rd, 50, on_record, &r, err, sizeof(err)), 0);
    assert_int_equal(r.n, 50);
    assert_int_equal(r.seq[0], 51);
    assert_int_equal(r.bad, 0);
    memset(&r, 0, sizeof(r));
    assert_int_equal(oplog_replay(rd, 100, on_record, &r, err, sizeof(err)), 0);
    assert_int_equal(r.n, 0);
    assert_int_equal(oplog_replay(rd, 101, on_record, &r, err, sizeof(err)), SMP_EPROTO);

    assert_int_equal(oplog_etcd_follow(rd, 10, on_record, &f, on_follow_stop, &f), 0);
    WAIT_FOR(&e, f.stops == 1);
    assert_int_equal(f.stop_status, SMP_ERANGE);
    assert_non_null(strstr(f.stop_why, "garbage-collected"));
    assert_int_equal(f.n, 0);
    /* Following from a position the log holds works after that. */
    memset(&f, 0, sizeof(f));
    assert_int_equal(oplog_etcd_follow(rd, 60, on_record, &f, on_follow_stop, &f), 0);
    WAIT_FOR(&e, f.n == 40);
    assert_int_equal(f.seq[0], 61);
    close_log(&e, rd);
    /* Everything deleted up to the head: replay after the head still works. */
    assert_int_equal(oplog_truncate_before(w, 1000), 0);
    WAIT_FOR(&e, count_records(&e) == 0);
    assert_int_equal(etcd_head(&e), 100);
    close_log(&e, w);
    oplog *rd2 = open_log(&e, &fs);
    memset(&r, 0, sizeof(r));
    assert_int_equal(oplog_replay(rd2, 100, on_record, &r, err, sizeof(err)), 0);
    assert_int_equal(oplog_replay(rd2, 99, on_record, &r, err, sizeof(err)), SMP_EPROTO);
    assert_non_null(strstr(err, "garbage-collected"));
    close_log(&e, rd2);
    revoke_term(&t);
    env_fini(&e);
}

/* A record value damaged in etcd: replay fails with SMP_EPROTO naming the
 * record, following delivers what is before it and stops with SMP_EPROTO;
 * a damaged record arriving through the watch stops a follower too. */
static void test_corrupted_record_fails_closed(void **state)
{
    env e;
    fenced_seen fs = {0};
    seen r = {0}, f = {0}, g = {0};
    char err[256] = "", key[128];
    etcd_range_result kv;
    (void)state;
    env_init(&e, "corrupt");
    write_log(&e, 20);
    snprintf(key, sizeof(key), "%slog/%020d", e.prefix, 10);
    assert_int_equal(etcd_range(cli, key, strlen(key), NULL, 0, 0, 0, 0, &kv, err,
                                sizeof(err)), 0);
    assert_int_equal(kv.n, 1);
    uint8_t *bad = malloc(kv.kvs[0].value_len);
    size_t bad_len = kv.kvs[0].value_len;
    memcpy(bad, kv.kvs[0].value, bad_len);
    etcd_range_result_free(&kv);
    bad[bad_len - 9] ^= 0x40; /* a payload or header byte: the checksum breaks */
    assert_int_equal(etcd_put(cli, key, strlen(key), bad, bad_len, 0, NULL, err,
                              sizeof(err)), 0);

    oplog *rd = open_log(&e, &fs);
    assert_int_equal(oplog_replay(rd, 0, on_record, &r, err, sizeof(err)), SMP_EPROTO);
    assert_non_null(strstr(err, "record 10"));
    assert_int_equal(r.n, 9);
    assert_int_equal(oplog_etcd_follow(rd, 0, on_record, &f, on_follow_stop, &f), 0);
    WAIT_FOR(&e, f.stops == 1);
    assert_int_equal(f.stop_status, SMP_EPROTO);
    assert_non_null(strstr(f.stop_why, "record 10"));
    assert_int_equal(f.n, 9);
    /* Garbage committed as record 21 (with the head) while a follower waits
     * for it. */
    assert_int_equal(oplog_etcd_follow(rd, 20, on_record, &g, on_follow_stop, &g), 0);
    snprintf(key, sizeof(key), "%slog/%020d", e.prefix, 21);
    char head_key[128];
    snprintf(head_key, sizeof(head_key), "%slog_head", e.prefix);
    etcd_op ops[2] = {
        {.type = ETCD_OP_PUT, .key = key, .key_len = strlen(key), .value = "garbage",
         .value_len = 7},
        {.type = ETCD_OP_PUT, .key = head_key, .key_len = strlen(head_key), .value = "21",
         .value_len = 2},
    };
    etcd_txn_result tr;
    assert_int_equal(etcd_txn(cli, NULL, 0, ops, 2, NULL, 0, &tr, err, sizeof(err)), 0);
    etcd_txn_result_free(&tr);
    WAIT_FOR(&e, g.stops == 1);
    assert_int_equal(g.stop_status, SMP_EPROTO);
    assert_non_null(strstr(g.stop_why, "record 21"));
    assert_int_equal(g.n, 0);
    memset(&r, 0, sizeof(r));
    /* Record 11's bytes under key 12's name are refused as well. */
    snprintf(key, sizeof(key), "%slog/%020d", e.prefix, 11);
    assert_int_equal(etcd_range(cli, key, strlen(key), NULL, 0, 0, 0, 0, &kv, err,
                                sizeof(err)), 0);
    snprintf(key, sizeof(key), "%slog/%020d", e.prefix, 12);
    assert_int_equal(etcd_put(cli, key, strlen(key), kv.kvs[0].value, kv.kvs[0].value_len,
                              0, NULL, err, sizeof(err)), 0);
    etcd_range_result_free(&kv);
    assert_int_equal(oplog_replay(rd, 10, on_record, &r, err, sizeof(err)), SMP_EPROTO);
    assert_non_null(strstr(err, "key of record 12 holds record 11"));
    assert_int_equal(r.n, 1);
    free(bad);
    close_log(&e, rd);
    env_fini(&e);
}

/* A follower promoted while following: its fn gets every record up to the
 * head before the promote's callback, following stops, and it continues
 * the log at head + 1 while the old writer is fenced. */
static void test_promote_while_following_takes_over(void **state)
{
    env e;
    fenced_seen fs_a = {0}, fs_b = {0};
    seen s_a = {0}, f = {0};
    acks a = {0}, b = {0};
    term t_a, t_b;
    promoted p = {0};
    (void)state;
    env_init(&e, "takeover");
    oplog *wa = open_log(&e, &fs_a);
    oplog *sb = open_log(&e, &fs_b);
    assert_int_equal(oplog_etcd_follow(sb, 0, on_record, &f, on_follow_stop, &f), 0);
    assert_int_equal(elect(&e, "master-a", 10, &t_a), 0);
    assert_int_equal(promote(&e, wa, &t_a, &s_a), 0);
    append_n(wa, 1, 200, &a);
    WAIT_FOR(&e, a.n == 200);
    revoke_term(&t_a);
    assert_int_equal(elect(&e, "master-b", 10, &t_b), 0);
    assert_int_equal(oplog_etcd_promote(sb, &t_b.fence, NULL, NULL, on_promoted, &p), 0);
    assert_int_equal(oplog_etcd_promote(sb, &t_b.fence, NULL, NULL, on_promoted, &p),
                     SMP_ESTATE);
    WAIT_FOR(&e, p.done == 1);
    assert_int_equal(p.status, 0);
    assert_int_equal(f.n, 200);
    assert_int_equal(f.bad, 0);
    assert_int_equal(f.out_of_order, 0);
    assert_int_equal(f.stops, 0);
    assert_int_equal(oplog_last_seq(sb), 200);
    assert_int_equal(oplog_etcd_follow(sb, 0, on_record, &f, on_follow_stop, &f), SMP_ESTATE);
    append_n(sb, 201, 10, &b);
    WAIT_FOR(&e, b.n == 10);
    assert_int_equal(b.failed, 0);
    assert_int_equal(etcd_head(&e), 210);
    /* Demote: appends refused, the log is not fenced. */
    oplog_etcd_demote(sb);
    assert_int_equal(oplog_append(sb, 1, 1, "x", 1, NULL, NULL, NULL), SMP_ENOTLEADER);
    assert_int_equal(fs_b.n, 0);
    close_log(&e, sb);
    close_log(&e, wa);
    revoke_term(&t_b);
    env_fini(&e);
}

/* Records queued before a demote are still written and called back. */
static void test_demote_writes_what_is_queued(void **state)
{
    env e;
    fenced_seen fs = {0};
    seen s = {0};
    acks a = {0};
    term t;
    (void)state;
    env_init(&e, "demote");
    oplog *w = open_log(&e, &fs);
    assert_int_equal(elect(&e, "master-a", 10, &t), 0);
    assert_int_equal(promote(&e, w, &t, &s), 0);
    append_n(w, 1, 50, &a);
    oplog_etcd_demote(w);
    assert_int_equal(oplog_append(w, 1, 1, "x", 1, NULL, NULL, NULL), SMP_ENOTLEADER);
    WAIT_FOR(&e, a.n == 50);
    assert_int_equal(a.failed, 0);
    assert_int_equal(etcd_head(&e), 50);
    /* Appended then closed at once: close writes them and calls back. */
    close_log(&e, w);
    oplog *w2 = open_log(&e, &fs);
    seen s2 = {0};
    acks b = {0};
    assert_int_equal(promote(&e, w2, &t, &s2), 0);
    append_n(w2, 51, 20, &b);
    oplog_close(w2);
    assert_int_equal(b.n, 20);
    assert_int_equal(b.failed, 0);
    uv_run(&e.loop, UV_RUN_NOWAIT);
    assert_int_equal(etcd_head(&e), 70);
    revoke_term(&t);
    env_fini(&e);
}

/* Bad arguments: SMP_EINVAL, never a crash. */
static void test_bad_arguments(void **state)
{
    env e;
    fenced_seen fs = {0};
    seen s = {0};
    term t;
    oplog_etcd_options o = {0};
    oplog *log = NULL;
    char err[256] = "";
    (void)state;
    env_init(&e, "badargs");
    o.client = cli;
    o.prefix = e.prefix;
    assert_int_equal(oplog_etcd_open(NULL, &o, &log, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(oplog_etcd_open(&e.loop, NULL, &log, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(oplog_etcd_open(&e.loop, &o, NULL, err, sizeof(err)), SMP_EINVAL);
    o.client = NULL;
    assert_int_equal(oplog_etcd_open(&e.loop, &o, &log, err, sizeof(err)), SMP_EINVAL);
    o.client = cli;
    o.prefix = NULL;
    assert_int_equal(oplog_etcd_open(&e.loop, &o, &log, err, sizeof(err)), SMP_EINVAL);
    o.prefix = e.prefix;
    o.max_batch_records = 128;
    assert_int_equal(oplog_etcd_open(&e.loop, &o, &log, err, sizeof(err)), SMP_EINVAL);
    assert_non_null(strstr(err, "max_batch_records 128"));
    assert_null(log);

    oplog *rd = open_log(&e, &fs);
    assert_int_equal(oplog_etcd_follow(NULL, 0, on_record, &s, NULL, NULL), SMP_EINVAL);
    assert_int_equal(oplog_etcd_follow(rd, 0, NULL, &s, NULL, NULL), SMP_EINVAL);
    assert_int_equal(elect(&e, "master-a", 10, &t), 0);
    assert_int_equal(oplog_etcd_promote(rd, NULL, on_record, &s, on_promoted, NULL),
                     SMP_EINVAL);
    assert_int_equal(oplog_etcd_promote(rd, &t.fence, NULL, NULL, on_promoted, NULL),
                     SMP_EINVAL);
    assert_int_equal(oplog_etcd_promote(rd, &t.fence, on_record, &s, NULL, NULL),
                     SMP_EINVAL);
    oplog_etcd_fence nokey = t.fence;
    nokey.leader_key = NULL;
    assert_int_equal(oplog_etcd_promote(rd, &nokey, on_record, &s, on_promoted, NULL),
                     SMP_EINVAL);
    assert_int_equal(oplog_append(rd, 1, 1, NULL, 5, NULL, NULL, NULL), SMP_EINVAL);
    assert_int_equal(oplog_replay(rd, 0, NULL, NULL, err, sizeof(err)), SMP_EINVAL);
    assert_int_equal(oplog_etcd_head(NULL), 0);
    oplog_etcd_demote(NULL);
    /* A payload over max_batch_bytes is SMP_ERANGE on a writer. */
    assert_int_equal(promote(&e, rd, &t, &s), 0);
    uint8_t *big = calloc(1, (1u << 20) + 1);
    assert_int_equal(oplog_append(rd, 1, 1, big, (1u << 20) + 1, NULL, NULL, NULL),
                     SMP_ERANGE);
    free(big);
    assert_int_equal(oplog_etcd_promote(rd, &t.fence, on_record, &s, on_promoted, NULL),
                     SMP_ESTATE);
    close_log(&e, rd);
    revoke_term(&t);
    env_fini(&e);
}

/* etcd paused while a batch is in flight: the txn's outcome is unknown
 * (the client's deadline passes), the writer reads it back once etcd
 * answers again and the records are durable exactly once. A pause longer
 * than the fence's lease TTL fails the batch as fenced. */
static void test_unknown_outcome_is_read_back(void **state)
{
    env e;
    fenced_seen fs = {0};
    seen s = {0}, r = {0};
    acks a = {0}, b = {0}, c = {0};
    term t;
    char err[256] = "";
    (void)state;
    env_init(&e, "unknown");
    oplog *w = open_log(&e, &fs);
    assert_int_equal(elect(&e, "master-a", 60, &t), 0);
    assert_int_equal(promote(&e, w, &t, &s), 0);
    append_n(w, 1, 10, &a);
    WAIT_FOR(&e, a.n == 10);
    assert_int_equal(etcd_fixture_pause(&fx, 0), 0);
    append_n(w, 11, 5, &b);
    WAIT_FOR(&e, logged(&e, "is unknown"));
    assert_int_equal(b.n, 0);
    assert_int_equal(etcd_fixture_resume(&fx, 0), 0);
    WAIT_FOR(&e, b.n == 5);
    assert_int_equal(b.failed, 0);
    assert_int_equal(b.out_of_order, 0);
    assert_int_equal(fs.n, 0);
    assert_int_equal(etcd_head(&e), 15);
    close_log(&e, w);

    oplog *rd = open_log(&e, &fs);
    assert_int_equal(oplog_replay(rd, 0, on_record, &r, err, sizeof(err)), 0);
    assert_int_equal(r.n, 15);
    assert_int_equal(r.bad, 0);
    assert_int_equal(r.out_of_order, 0);
    close_log(&e, rd);

    /* Unknown for longer than the fence's TTL (shortened here): fenced. */
    oplog *w2 = open_log(&e, &fs);
    seen s2 = {0};
    t.fence.lease_ttl_ms = 1;
    assert_int_equal(promote(&e, w2, &t, &s2), 0);
    assert_int_equal(etcd_fixture_pause(&fx, 0), 0);
    append_n(w2, 16, 2, &c);
    WAIT_FOR(&e, c.n == 2);
    assert_int_equal(etcd_fixture_resume(&fx, 0), 0);
    assert_int_equal(c.failed, 2);
    WAIT_FOR(&e, fs.n == 1);
    assert_non_null(strstr(fs.why, "stayed unknown"));
    assert_int_equal(oplog_append(w2, 1, 1, "x", 1, NULL, NULL, NULL), SMP_EDURABILITY);
    close_log(&e, w2);
    revoke_term(&t);
    env_fini(&e);
}

/* Three etcd members: the writer and a follower go on across a SIGKILL of
 * the member their client talks to first (a txn in flight may end with an
 * unknown outcome, read back through another member). Every append is
 * called back 0 in order, the follower sees each record once in order, and
 * a replay after the member's restart reads exactly the acknowledged
 * records. */
static void test_three_members_survive_a_member_kill(void **state)
{
    etcd_fixture fx3;
    etcd_client *saved = cli;
    etcd_client_options co = {0};
    env e;
    fenced_seen fs = {0};
    seen s = {0}, f = {0}, r = {0};
    acks a = {0};
    term t;
    char err[256] = "";
    (void)state;
    assert_int_equal(etcd_fixture_start(&fx3, "ha_oplog_etcd3", 3, 30000), 0);
    co.endpoints = etcd_fixture_endpoints(&fx3);
    assert_int_equal(etcd_client_open(&co, &cli, err, sizeof(err)), 0);
    env_init(&e, "three");
    oplog *w = open_log(&e, &fs);
    oplog *fl = open_log(&e, &fs);
    assert_int_equal(oplog_etcd_follow(fl, 0, on_record, &f, on_follow_stop, &f), 0);
    assert_int_equal(elect(&e, "master-a", 30, &t), 0);
    assert_int_equal(promote(&e, w, &t, &s), 0);
    append_n(w, 1, 200, &a);
    WAIT_FOR(&e, a.n == 200);
    append_n(w, 201, 200, &a);
    assert_int_equal(etcd_fixture_kill(&fx3, 0), 0);
    WAIT_FOR(&e, a.n == 400);
    append_n(w, 401, 200, &a);
    WAIT_FOR(&e, a.n == 600);
    assert_int_equal(a.failed, 0);
    assert_int_equal(a.out_of_order, 0);
    assert_int_equal(fs.n, 0);
    WAIT_FOR(&e, f.n == 600);
    assert_int_equal(f.bad, 0);
    assert_int_equal(f.out_of_order, 0);
    assert_int_equal(f.stops, 0);
    assert_int_equal(etcd_fixture_restart(&fx3, 0, 30000), 0);
    oplog *rd = open_log(&e, &fs);
    assert_int_equal(oplog_replay(rd, 0, on_record, &r, err, sizeof(err)), 0);
    assert_int_equal(r.n, 600);
    assert_int_equal(r.bad, 0);
    assert_int_equal(r.out_of_order, 0);
    close_log(&e, rd);
    close_log(&e, fl);
    close_log(&e, w);
    revoke_term(&t);
    env_fini(&e);
    etcd_client_close(cli);
    cli = saved;
    etcd_fixture_cleanup(&fx3);
}

/* The caller's fn refusing a record stops following with its code (on_stop
 * once, nothing after the record); following again from the last record
 * applied works; a promote whose catch-up fn refuses a record fails with
 * that code and leaves a standby. */
static void test_refusing_fn_stops_follow_and_promote(void **state)
{
    env e;
    fenced_seen fs = {0};
    seen f = {0}, g = {0}, p = {0};
    term t;
    promoted pr = {0};
    (void)state;
    env_init(&e, "refuse");
    oplog *fl = open_log(&e, &fs); /* at head 0 */
    write_log(&e, 10);
    f.stop_at = 5;
    f.stop_status = 0;
    assert_int_equal(oplog_etcd_follow(fl, 0, on_record, &f, on_follow_stop, &f), 0);
    WAIT_FOR(&e, f.stops == 1);
    assert_int_equal(f.stop_status, SMP_EPROTO);
    assert_non_null(strstr(f.stop_why, "seq 5"));
    assert_int_equal(f.n, 4);
    assert_int_equal(oplog_last_seq(fl), 4);
    assert_int_equal(oplog_etcd_follow(fl, 4, on_record, &g, on_follow_stop, &g), 0);
    WAIT_FOR(&e, g.n == 6);
    assert_int_equal(g.seq[0], 5);
    assert_int_equal(g.stops, 0);
    close_log(&e, fl);

    oplog *w = open_log(&e, &fs);
    seen r = {0};
    char err[256];
    assert_int_equal(oplog_replay(w, 0, on_record, &r, err, sizeof(err)), 0);
    write_log(&e, 5); /* 11..15 */
    assert_int_equal(elect(&e, "master-b", 10, &t), 0);
    p.stop_at = 13;
    assert_int_equal(oplog_etcd_promote(w, &t.fence, on_record, &p, on_promoted, &pr), 0);
    WAIT_FOR(&e, pr.done == 1);
    assert_int_equal(pr.status, SMP_EPROTO);
    assert_int_equal(p.n, 2); /* 11, 12 */
    assert_int_equal(oplog_append(w, 1, 1, "x", 1, NULL, NULL, NULL), SMP_ENOTLEADER);
    /* Again, with a fn that takes everything: caught up from 13. */
    p.stop_at = 0;
    memset(&pr, 0, sizeof(pr));
    assert_int_equal(oplog_etcd_promote(w, &t.fence, on_record, &p, on_promoted, &pr), 0);
    WAIT_FOR(&e, pr.done == 1);
    assert_int_equal(pr.status, 0);
    assert_int_equal(p.n, 5);
    assert_int_equal(p.seq[2], 13);
    assert_int_equal(p.out_of_order, 0);
    assert_int_equal(oplog_last_seq(w), 15);
    close_log(&e, w);
    revoke_term(&t);
    env_fini(&e);
}

/* etcd not answering a promote: SMP_EIO, and a standby that was following
 * goes on following once etcd answers again. */
static void test_promote_while_etcd_is_silent_fails_with_eio(void **state)
{
    env e;
    fenced_seen fs = {0};
    seen f = {0};
    term t;
    promoted pr = {0};
    (void)state;
    env_init(&e, "silent");
    write_log(&e, 3);
    oplog *sb = open_log(&e, &fs);
    assert_int_equal(oplog_etcd_follow(sb, 0, on_record, &f, on_follow_stop, &f), 0);
    WAIT_FOR(&e, f.n == 3);
    assert_int_equal(elect(&e, "master-b", 30, &t), 0);
    assert_int_equal(etcd_fixture_pause(&fx, 0), 0);
    assert_int_equal(oplog_etcd_promote(sb, &t.fence, NULL, NULL, on_promoted, &pr), 0);
    WAIT_FOR(&e, pr.done == 1);
    assert_int_equal(etcd_fixture_resume(&fx, 0), 0);
    assert_int_equal(pr.status, SMP_EIO);
    assert_int_equal(f.stops, 0);
    revoke_term(&t);
    write_log(&e, 4); /* 4..7 by another writer */
    WAIT_FOR(&e, f.n == 7);
    assert_int_equal(f.out_of_order, 0);
    assert_int_equal(f.bad, 0);
    close_log(&e, sb);
    env_fini(&e);
}

/* A follower whose etcd is gone for longer than unreachable_ms stops with
 * SMP_EIO; a brief outage is ridden out. Kills and restarts the member, so
 * it runs last. */
static void test_follow_gives_up_when_etcd_stays_unreachable(void **state)
{
    env e;
    fenced_seen fs = {0};
    seen f = {0};
    (void)state;
    env_init(&e, "unreachable");
    write_log(&e, 3);
    next_unreachable_ms = 1500;
    oplog *fl = open_log(&e, &fs);
    next_unreachable_ms = 0;
    assert_int_equal(oplog_etcd_follow(fl, 0, on_record, &f, on_follow_stop, &f), 0);
    WAIT_FOR(&e, f.n == 3);
    assert_int_equal(etcd_fixture_kill(&fx, 0), 0);
    WAIT_FOR(&e, f.stops == 1);
    assert_int_equal(f.stop_status, SMP_EIO);
    assert_non_null(strstr(f.stop_why, "unreachable"));
    assert_int_equal(f.n, 3);
    assert_int_equal(etcd_fixture_restart(&fx, 0, 20000), 0);
    close_log(&e, fl);
    env_fini(&e);
}

static int group_setup(void **state)
{
    char err[256];
    etcd_client_options o = {0};
    (void)state;
    if (etcd_fixture_start(&fx, "ha_oplog_etcd", 1, 20000) != 0)
        return -1;
    o.endpoints = etcd_fixture_endpoints(&fx);
    if (etcd_client_open(&o, &cli, err, sizeof(err)) != 0) {
        fprintf(stderr, "etcd_client_open: %s\n", err);
        etcd_fixture_cleanup(&fx);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    etcd_client_close(cli);
    etcd_fixture_cleanup(&fx);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_1000_then_replay_byte_identical),
        cmocka_unit_test(test_follower_sees_every_record_in_order),
        cmocka_unit_test(test_revoked_lease_fences_the_writer),
        cmocka_unit_test(test_paused_writer_cannot_append_after_new_leader),
        cmocka_unit_test(test_promote_with_stale_fence_is_refused),
        cmocka_unit_test(test_truncate_then_replay_and_follow),
        cmocka_unit_test(test_corrupted_record_fails_closed),
        cmocka_unit_test(test_promote_while_following_takes_over),
        cmocka_unit_test(test_demote_writes_what_is_queued),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_refusing_fn_stops_follow_and_promote),
        cmocka_unit_test(test_promote_while_etcd_is_silent_fails_with_eio),
        cmocka_unit_test(test_unknown_outcome_is_read_back),
        cmocka_unit_test(test_three_members_survive_a_member_kill),
        cmocka_unit_test(test_follow_gives_up_when_etcd_stays_unreachable),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
