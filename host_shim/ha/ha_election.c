/* ha_election.c -- leader election and the master registry on etcd.
 *
 * Two threads per master talk to etcd (ha_election.h says what they
 * decide); the loop thread only reads what they published under a mutex and
 * gets their reports through a uv_async. One renews the lease, every fifth of
 * the TTL, and does nothing else, so no other call can hold a renewal back.
 * The other, every HA_CYCLE_MS, campaigns with a create-if-absent
 * transaction on the leader key (or, when it may not, just reads who leads;
 * a key found under this master's own lease is its own term, won by a
 * create whose answer was lost) and refreshes this master's registry entry
 * and reads the registry back. A leader that finds its key
 * gone or its lease expired is deposed at once; one whose renewals stop
 * succeeding is deposed by the loop-side timer when the time its lease is
 * certainly valid for has passed, even if the thread is stuck in a call.
 *
 * Both the leader key and registry entries hold a packed MasterInfo
 * (proto/host_rpc.proto). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "etcd_client.h"
#include "ha_election.h"
#include "ha_exit_watch.h"
#include "host_rpc.pb-c.h"
#include "store_plugin.h"

#define HA_CYCLE_MS 100u          /* one cycle of the thread */
#define HA_REGISTRY_MS 500u       /* registry refresh and read-back */
#define HA_MAX_MEMBERS 64u
#define HA_CHECK_MS 20u           /* the loop-side validity check */
#define HA_RENEW_POLL_MS 20u      /* the renewal thread's look at the clock */
#define HA_START_GRANT_MS 10000u  /* how long a starting master asks for its lease */

struct ha_election {
    uv_loop_t *loop;
    uv_async_t async;
    uv_timer_t check;
    int handles_open;
    pthread_t thread;             /* campaign and registry */
    pthread_t keepalive;          /* lease renewals */
    int thread_started;
    etcd_client *etcd;
    ha_exit_watch *exit_watch;     /* NULL: ha.fast_failover off */

    /* Fixed at start. */
    char *prefix;
    char *id;
    char *endpoint;
    uint32_t ttl_s;
    char leader_key[300];
    char member_key[400];
    ha_election_events ev;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Written by the loop, read by the thread. */
    int stop;
    int eligible;
    char role[16];
    uint64_t applied_seq;
    int ready;
    char reason[160];
    uint32_t types[HA_MAX_TYPES];
    size_t n_types;
    char plugins[16][160];
    size_t n_plugins;
    /* Written by the thread, read by the loop. */
    int64_t lease_id;
    int leader;                    /* the thread holds the term */
    int64_t create_revision;
    int elected_pending;
    int deposed_pending;
    char deposed_why[200];
    int leader_pending;
    char leader_id[65];
    char leader_endpoint[256];
    int64_t leader_lease;          /* the lease of the leader key seen, 0: none */
    int64_t exited_lease;          /* the lease of the last leader whose exit was noticed */
    ha_member members[HA_MAX_MEMBERS];
    size_t n_members;
    uint64_t members_read;         /* registry reads so far */
    /* Monotonic ms up to which the term's lease is certainly valid. */
    _Atomic uint64_t valid_until_ms;
    /* Send time of the lease's last grant or renewal; 0: no lease. */
    _Atomic uint64_t renewed_at_ms;
    /* Monotonic ms of etcd's last answer to a grant, renewal or registry
     * read (etcd_err under mu: the last failure's cause). */
    _Atomic uint64_t etcd_ok_ms;
    char etcd_err[256];
    /* Leader exits the watcher noticed (it clears the leader at once); the
     * loop learns of each at its next turn (exits_applied). Between the two
     * the loop's view still names the dead leader: ha_election_leader_gone. */
    _Atomic uint64_t exits_noticed;

    /* Loop thread only. */
    int loop_leader;               /* elected reported, not yet deposed */
    char seen_endpoint[256];
    uint64_t exits_applied;        /* exits_noticed as of the last leader change applied */
};

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The safety margin kept between a leader's step-down and the expiry of its
 * lease in etcd: a quarter of the TTL. */
static uint64_t validity_ms(const ha_election *e)
{
    uint64_t ttl = (uint64_t)e->ttl_s * 1000u;
    return ttl - ttl / 4;
}

/* -- encoding of the leader key and registry entries ------------------------ */

/* The names of the HA_FEATURE_* bits, in bit order. */
static const char *const ha_feature_names[] = {"put_handoff", "write_zones"};
#define HA_N_FEATURES (sizeof(ha_feature_names) / sizeof(ha_feature_names[0]))

/* Pack a MasterInfo into a malloc'd buffer; NULL on ENOMEM. e (may be NULL)
 * adds what this master can replay and the features of this build; the
 * caller holds e->mu then. */
static uint8_t *pack_info(const ha_election *e, const char *id, const char *role,
                          const char *endpoint, uint64_t applied, int ready, const char *reason,
                          size_t *len)
{
    MasterInfo mi = MASTER_INFO__INIT;
    char *plugins[16];
    if (e != NULL) {
        mi.replay_types = (uint32_t *)e->types;
        mi.n_replay_types = e->n_types;
        for (size_t i = 0; i < e->n_plugins; i++) plugins[i] = (char *)e->plugins[i];
        mi.plugins = plugins;
        mi.n_plugins = e->n_plugins;
        mi.features = (char **)ha_feature_names;
        mi.n_features = HA_N_FEATURES;
    }
    mi.id = (char *)id;
    mi.role = (char *)role;
    mi.endpoint = (char *)endpoint;
    mi.applied_seq = applied;
    mi.ready = ready != 0;
    mi.reason = (char *)reason;
    *len = master_info__get_packed_size(&mi);
    uint8_t *buf = malloc(*len ? *len : 1);
    if (buf != NULL) master_info__pack(&mi, buf);
    return buf;
}

/* Decode a MasterInfo value into *m. 0, or -1 when it does not decode (a key
 * some other program wrote: it is skipped, never trusted). */
static int unpack_info(const uint8_t *v, size_t len, ha_member *m)
{
    MasterInfo *mi = master_info__unpack(NULL, len, v);
    if (mi == NULL) return -1;
    memset(m, 0, sizeof(*m));
    snprintf(m->id, sizeof(m->id), "%s", mi->id);
    snprintf(m->role, sizeof(m->role), "%s", mi->role);
    snprintf(m->endpoint, sizeof(m->endpoint), "%s", mi->endpoint);
    m->applied_seq = mi->applied_seq;
    m->ready = mi->ready;
    snprintf(m->reason, sizeof(m->reason), "%s", mi->reason);
    for (size_t i = 0; i < mi->n_replay_types && m->n_types < HA_MAX_TYPES; i++)
        if (mi->replay_types[i] <= UINT16_MAX) m->types[m->n_types++] = (uint16_t)mi->replay_types[i];
    for (size_t i = 0; i < mi->n_features; i++)
        for (size_t f = 0; f < HA_N_FEATURES; f++)
            if (strcmp(mi->features[i], ha_feature_names[f]) == 0) m->features |= 1u << f;
    master_info__free_unpacked(mi, NULL);
    return 0;
}

/* -- the thread ---------------------------------------------------------------- */

/* Hand a report to the loop thread. Called with mu held. */
static void wake_loop(ha_election *e)
{
    uv_async_send(&e->async);
}

/* Record who leads as read from the leader key (kv NULL: nobody), and watch
 * for the exit of any leader but this master. A key of the lease of a
 * leader whose exit was noticed is nobody's: read before the revoke
 * deleted it (a campaign's read, a watch event in flight), it would name
 * the dead leader to clients again. mu held. */
static void see_leader(ha_election *e, const etcd_kv *kv)
{
    ha_member m;
    if (kv != NULL && kv->lease != 0 && kv->lease == e->exited_lease) kv = NULL;
    memset(&m, 0, sizeof(m));
    if (kv != NULL && unpack_info(kv->value, kv->value_len, &m) < 0) {
        snprintf(m.id, sizeof(m.id), "?");
    }
    int64_t lease = kv != NULL ? kv->lease : 0;
    int self = kv != NULL && strcmp(m.id, e->id) == 0;
    ha_exit_watch_set(e->exit_watch, self ? "" : m.endpoint, self ? 0 : lease);
    if (strcmp(m.id, e->leader_id) == 0 && strcmp(m.endpoint, e->leader_endpoint) == 0 &&
        lease == e->leader_lease)
        return;
    snprintf(e->leader_id, sizeof(e->leader_id), "%s", m.id);
    snprintf(e->leader_endpoint, sizeof(e->leader_endpoint), "%s", m.endpoint);
    e->leader_lease = lease;
    e->leader_pending = 1;
    wake_loop(e);
}

/* The exit watcher's report: the leader's process is gone. Revoke its lease
 * (the leader key goes with it) and campaign at once instead of waiting for
 * the lease to expire. Revoking a lease that is already gone is harmless;
 * revoking a live leader's only deposes it (ha_exit_watch.h). Watcher
 * thread. */
static void on_leader_exit(void *arg, const char *endpoint, int64_t lease)
{
    ha_election *e = arg;
    char err[256];
    /* From now on nobody leads as far as this master knows: it stops naming
     * the dead leader to the clients that ask it (they wait for the next
     * one instead of trying the dead one's endpoint). The key's deletion,
     * when the watch reports it, changes nothing more. */
    pthread_mutex_lock(&e->mu);
    if (e->leader_lease == lease && e->leader_endpoint[0] != '\0') {
        e->leader_id[0] = '\0';
        e->leader_endpoint[0] = '\0';
        e->exited_lease = lease;
        e->leader_lease = 0;
        e->leader_pending = 1;
        atomic_fetch_add(&e->exits_noticed, 1);
        wake_loop(e);
    }
    pthread_mutex_unlock(&e->mu);
    int rc = etcd_lease_revoke(e->etcd, lease, err, sizeof(err));
    if (rc != 0 && rc != SMP_ENOTFOUND) {
        /* Not revoked: its key stays until the lease expires, and a leader
         * that is alive after all may renew it -- read again, it names
         * the leader. */
        pthread_mutex_lock(&e->mu);
        if (e->exited_lease == lease) e->exited_lease = 0;
        pthread_mutex_unlock(&e->mu);
    }
    if (rc == 0 || rc == SMP_ENOTFOUND)
        fprintf(stderr, "store_master: ha: the leader at %s closed its connection (its process "
                "is gone); its lease %" PRIx64 " is revoked\n", endpoint, (uint64_t)lease);
    else
        fprintf(stderr, "store_master: ha: the leader at %s closed its connection, but its "
                "lease could not be revoked (%s); waiting for it to expire\n", endpoint, err);
    pthread_mutex_lock(&e->mu);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* The thread lost the term (mu held). */
static void lose_term(ha_election *e, const char *why)
{
    if (!e->leader) return;
    e->leader = 0;
    atomic_store(&e->valid_until_ms, 0);
    snprintf(e->deposed_why, sizeof(e->deposed_why), "%s", why);
    e->deposed_pending = 1;
    wake_loop(e);
}

/* etcd answered a call of this election (any answer, errors of etcd's own
 * included), or did not (err: why). */
static void etcd_answered(ha_election *e)
{
    atomic_store(&e->etcd_ok_ms, mono_ms());
}

static void etcd_silent(ha_election *e, const char *err)
{
    pthread_mutex_lock(&e->mu);
    snprintf(e->etcd_err, sizeof(e->etcd_err), "%s", err);
    pthread_mutex_unlock(&e->mu);
}

/* Grant a fresh lease (at start, or after the old one expired). */
static void grant_lease(ha_election *e)
{
    char err[256];
    int64_t id = 0;
    uint64_t sent = mono_ms();
    int rc = etcd_lease_grant(e->etcd, e->ttl_s, &id, NULL, err, sizeof(err));
    if (rc == SMP_EIO) etcd_silent(e, err);
    else etcd_answered(e);
    if (rc < 0) return;
    pthread_mutex_lock(&e->mu);
    e->lease_id = id;
    pthread_mutex_unlock(&e->mu);
    atomic_store(&e->renewed_at_ms, sent);
}

/* Renew the lease; on success move the validity forward. */
static void renew(ha_election *e)
{
    char err[256];
    uint64_t sent = mono_ms();
    pthread_mutex_lock(&e->mu);
    int64_t lease = e->lease_id;
    pthread_mutex_unlock(&e->mu);
    int rc = etcd_lease_keepalive(e->etcd, lease, NULL, err, sizeof(err));
    if (rc == SMP_EIO) etcd_silent(e, err);
    else etcd_answered(e);
    if (rc == 0) {
        atomic_store(&e->renewed_at_ms, sent);
        pthread_mutex_lock(&e->mu);
        if (e->leader) atomic_store(&e->valid_until_ms, sent + validity_ms(e));
        pthread_mutex_unlock(&e->mu);
        return;
    }
    if (rc != SMP_ENOTFOUND) return; /* etcd slow or away: retried; the loop-side check decides */
    pthread_mutex_lock(&e->mu);
    lose_term(e, "the leader lease expired in etcd");
    pthread_mutex_unlock(&e->mu);
    atomic_store(&e->renewed_at_ms, 0); /* a new lease next */
}

/* Wait on the condition variable for up to ms (or until stopped). Returns
 * 1 when the election is stopping. */
static int nap(ha_election *e, unsigned ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)ms * 1000000L;
    while (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&e->mu);
    if (!e->stop) pthread_cond_timedwait(&e->cv, &e->mu, &until);
    int stop = e->stop;
    pthread_mutex_unlock(&e->mu);
    return stop;
}

/* The renewal thread: nothing but the lease, a fifth of the TTL apart (the
 * lease is still certainly valid for three quarters of the TTL after a
 * renewal, so a slow member or a failed attempt leaves several more), so
 * that no campaign or registry call can hold a renewal back. */
static void *keepalive_thread(void *arg)
{
    ha_election *e = arg;
    unsigned every = e->ttl_s * 1000u / 5u;
    do {
        uint64_t at = atomic_load(&e->renewed_at_ms);
        if (at == 0)
            grant_lease(e);
        else if (mono_ms() - at >= every)
            renew(e);
    } while (!nap(e, HA_RENEW_POLL_MS));
    return NULL;
}

/* Delete the leader key if it still stands under this master's lease: a
 * master out of the election (it cannot replay) that won by a create whose
 * answer was lost holds the key that every other master waits for. The
 * next round of every master campaigns again. */
static void give_back(ha_election *e)
{
    char err[256];
    size_t klen = strlen(e->leader_key);
    etcd_compare mine = {.target = ETCD_CMP_LEASE, .result = ETCD_CMP_EQUAL,
                         .key = e->leader_key, .key_len = klen, .number = e->lease_id};
    etcd_op del = {.type = ETCD_OP_DELETE, .key = e->leader_key, .key_len = klen};
    etcd_txn_result r;
    if (etcd_txn(e->etcd, &mine, 1, &del, 1, NULL, 0, &r, err, sizeof(err)) < 0) {
        fprintf(stderr, "store_master: ha: the leader key stands under this master's own lease, "
                "which is out of the election; giving it back failed (%s): tried again next "
                "round\n", err);
        return;
    }
    if (r.succeeded)
        fprintf(stderr, "store_master: ha: the leader key stood under this master's own lease "
                "%" PRId64 " (a campaign whose answer was lost), but it is out of the election: "
                "the key is given back\n", e->lease_id);
    etcd_txn_result_free(&r);
}

/* One campaign round: create the leader key if absent, else read it. */
static void campaign(ha_election *e, int eligible, uint64_t renewed_at)
{
    char err[256];
    size_t vlen = 0;
    uint8_t *val = pack_info(NULL, e->id, "leader", e->endpoint, 0, 1, "", &vlen);
    if (val == NULL) return;
    size_t klen = strlen(e->leader_key);
    etcd_compare cmp = {.target = ETCD_CMP_VERSION, .result = ETCD_CMP_EQUAL,
                        .key = e->leader_key, .key_len = klen, .number = 0};
    etcd_op put = {.type = ETCD_OP_PUT, .key = e->leader_key, .key_len = klen,
                   .value = val, .value_len = vlen, .lease = e->lease_id};
    etcd_op get = {.type = ETCD_OP_RANGE, .key = e->leader_key, .key_len = klen};
    etcd_txn_result r;
    int rc;
    if (eligible)
        rc = etcd_txn(e->etcd, &cmp, 1, &put, 1, &get, 1, &r, err, sizeof(err));
    else
        rc = etcd_txn(e->etcd, NULL, 0, &get, 1, NULL, 0, &r, err, sizeof(err));
    free(val);
    if (rc < 0) return;
    const etcd_kv *kv = r.n_ranges > 0 && r.ranges[0].n > 0 ? &r.ranges[0].kvs[0] : NULL;
    /* The key already stands under this master's own lease: an earlier
     * round's create was applied but its answer was lost (a deadline while
     * etcd was slow: SMP_EIO, "it may have been applied"). Only this master
     * holds its lease, so the term is its own. Seen as another's, nobody
     * would lead: the others wait for a key that this master's renewals
     * keep alive. */
    int own = kv != NULL && e->lease_id != 0 && kv->lease == e->lease_id;
    int won_unanswered = eligible && !r.succeeded && own;
    if (won_unanswered)
        fprintf(stderr, "store_master: ha: the leader key stands under this master's own lease "
                "%" PRId64 " (a campaign whose answer was lost): it leads\n", e->lease_id);
    if (!eligible && own) { /* won so, then left the election: not its key to keep */
        give_back(e);
        kv = NULL;
    }
    pthread_mutex_lock(&e->mu);
    if (eligible && (r.succeeded || won_unanswered)) {
        e->leader = 1;
        e->create_revision = r.succeeded ? r.revision : kv->create_revision;
        atomic_store(&e->valid_until_ms, renewed_at + validity_ms(e));
        e->elected_pending = 1;
        snprintf(e->leader_id, sizeof(e->leader_id), "%s", e->id);
        snprintf(e->leader_endpoint, sizeof(e->leader_endpoint), "%s", e->endpoint);
        e->leader_lease = e->lease_id;
        ha_exit_watch_set(e->exit_watch, "", 0);
        e->leader_pending = 1;
        wake_loop(e);
    } else {
        see_leader(e, kv);
    }
    pthread_mutex_unlock(&e->mu);
    etcd_txn_result_free(&r);
}

/* A leader checks that its key still stands, under its lease. */
static void check_term(ha_election *e)
{
    char err[256];
    etcd_range_result r;
    if (etcd_range(e->etcd, e->leader_key, strlen(e->leader_key), NULL, 0, 0, 0, 0, &r, err,
                   sizeof(err)) < 0)
        return;
    pthread_mutex_lock(&e->mu);
    if (r.n == 0)
        lose_term(e, "the leader key is gone from etcd");
    else if (r.kvs[0].lease != e->lease_id || r.kvs[0].create_revision != e->create_revision)
        lose_term(e, "another master holds the leader key");
    pthread_mutex_unlock(&e->mu);
    etcd_range_result_free(&r);
}

static int member_cmp(const void *a, const void *b)
{
    return strcmp(((const ha_member *)a)->id, ((const ha_member *)b)->id);
}

/* Write this master's registry entry, under its lease. */
static void write_registry(ha_election *e)
{
    char err[256];
    size_t vlen = 0;
    pthread_mutex_lock(&e->mu);
    uint8_t *val = pack_info(e, e->id, e->leader ? "leader" : e->role, e->endpoint,
                             e->applied_seq, e->ready, e->reason, &vlen);
    int64_t lease = e->lease_id;
    pthread_mutex_unlock(&e->mu);
    if (val == NULL) return;
    (void)etcd_put(e->etcd, e->member_key, strlen(e->member_key), val, vlen, lease, NULL, err,
                   sizeof(err));
    free(val);
}

/* Read every registry entry back (entries that do not decode are skipped). */
static void read_registry(ha_election *e)
{
    char err[256], start[400], end[400];
    int n = snprintf(start, sizeof(start), "%smasters/", e->prefix);
    memcpy(end, start, (size_t)n);
    end[n - 1] = '/' + 1;
    etcd_range_result r;
    int rc = etcd_range(e->etcd, start, (size_t)n, end, (size_t)n, HA_MAX_MEMBERS, 0, 0, &r, err,
                        sizeof(err));
    if (rc == SMP_EIO) etcd_silent(e, err);
    else etcd_answered(e);
    if (rc < 0) return;
    ha_member tmp[HA_MAX_MEMBERS];
    size_t k = 0;
    for (size_t i = 0; i < r.n && k < HA_MAX_MEMBERS; i++) {
        if (unpack_info(r.kvs[i].value, r.kvs[i].value_len, &tmp[k]) == 0) k++;
    }
    qsort(tmp, k, sizeof(tmp[0]), member_cmp);
    pthread_mutex_lock(&e->mu);
    memcpy(e->members, tmp, k * sizeof(tmp[0]));
    e->n_members = k;
    e->members_read++;
    pthread_mutex_unlock(&e->mu);
    etcd_range_result_free(&r);
}

/* The campaign thread: campaign (or, leading, check the term), and keep the
 * registry entry fresh; the lease is the renewal thread's. */
static void *election_thread(void *arg)
{
    ha_election *e = arg;
    uint64_t last_registry = 0;
    do {
        pthread_mutex_lock(&e->mu);
        int eligible = e->eligible, leader = e->leader;
        pthread_mutex_unlock(&e->mu);
        uint64_t renewed_at = atomic_load(&e->renewed_at_ms);
        if (renewed_at == 0) continue; /* no lease yet */
        if (leader)
            check_term(e);
        else
            campaign(e, eligible, renewed_at);
        uint64_t now = mono_ms();
        if (now - last_registry >= HA_REGISTRY_MS) {
            write_registry(e);
            read_registry(e);
            last_registry = now;
        }
    } while (!nap(e, HA_CYCLE_MS));
    return NULL;
}

/* -- the loop side ---------------------------------------------------------------- */

/* Depose on the loop thread (once per term). */
static void loop_depose(ha_election *e, const char *why)
{
    if (!e->loop_leader) return;
    e->loop_leader = 0;
    if (e->ev.on_deposed) e->ev.on_deposed(e->ev.arg, why);
}

static void on_async(uv_async_t *a)
{
    ha_election *e = a->data;
    int elected = 0, deposed = 0, leader_changed = 0;
    char why[200], id[65], endpoint[256];
    ha_term term = {.leader_key = e->leader_key, .leader_key_len = strlen(e->leader_key)};

    pthread_mutex_lock(&e->mu);
    if (e->deposed_pending) {
        deposed = 1;
        e->deposed_pending = 0;
        snprintf(why, sizeof(why), "%s", e->deposed_why);
    }
    if (e->elected_pending) {
        e->elected_pending = 0;
        if (e->leader) {
            elected = 1;
            term.lease_id = e->lease_id;
            term.create_revision = e->create_revision;
        }
    }
    if (e->leader_pending) {
        e->leader_pending = 0;
        leader_changed = 1;
        snprintf(id, sizeof(id), "%s", e->leader_id);
        snprintf(endpoint, sizeof(endpoint), "%s", e->leader_endpoint);
        e->exits_applied = atomic_load(&e->exits_noticed); /* under mu: what this change saw */
    }
    pthread_mutex_unlock(&e->mu);

    if (deposed) loop_depose(e, why);
    if (leader_changed) {
        snprintf(e->seen_endpoint, sizeof(e->seen_endpoint), "%s", endpoint);
        if (e->ev.on_leader) e->ev.on_leader(e->ev.arg, id, endpoint);
    }
    if (elected && !e->loop_leader) {
        e->loop_leader = 1;
        if (e->ev.on_elected) e->ev.on_elected(e->ev.arg, &term);
    }
}

/* A leader whose lease is no longer certainly valid steps down, whatever the
 * thread is doing. */
static void on_check(uv_timer_t *t)
{
    ha_election *e = t->data;
    if (!e->loop_leader) return;
    uint64_t until = atomic_load(&e->valid_until_ms);
    if (mono_ms() < until) return;
    char why[160];
    snprintf(why, sizeof(why), "the leader lease could not be renewed within %" PRIu64 " ms",
             validity_ms(e));
    pthread_mutex_lock(&e->mu);
    if (e->leader) {
        e->leader = 0; /* the thread campaigns afresh once the old lease is gone */
        atomic_store(&e->valid_until_ms, 0);
    }
    pthread_mutex_unlock(&e->mu);
    loop_depose(e, why);
}

static void free_election(ha_election *e)
{
    ha_exit_watch_stop(e->exit_watch);
    etcd_client_close(e->etcd);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e->prefix);
    free(e->id);
    free(e->endpoint);
    free(e);
}

static void on_handle_closed(uv_handle_t *h)
{
    ha_election *e = h->data;
    if (--e->handles_open == 0) free_election(e);
}

/* The lease a starting master campaigns with. etcd may answer a grant
 * late (a loaded machine, a member still electing), so a grant that timed
 * out or found no member is asked again until HA_START_GRANT_MS, each
 * failure logged. Asking again is safe: a lease whose answer was lost has
 * no key attached and etcd drops it after ttl_s. Any other error, or the
 * last one, is returned with err set. */
static int grant_first_lease(etcd_client *etcd, int64_t ttl_s, int64_t *lease, char *err,
                             size_t errlen)
{
    uint64_t give_up = mono_ms() + HA_START_GRANT_MS;
    for (;;) {
        int rc = etcd_lease_grant(etcd, ttl_s, lease, NULL, err, errlen);
        if (rc == 0 || rc != SMP_EIO || mono_ms() >= give_up) return rc;
        fprintf(stderr, "store_master: ha: asking etcd for a lease again: %s\n", err);
        struct timespec pause = {0, HA_CYCLE_MS * 1000000L};
        nanosleep(&pause, NULL);
    }
}

int ha_election_start(uv_loop_t *loop,
                      const ha_election_options *o,
                      ha_election **out,
                      char *err,
                      size_t errlen)
{
    int rc;
    if (loop == NULL || o == NULL || out == NULL || o->etcd.endpoints == NULL || o->prefix == NULL ||
        o->id == NULL || o->endpoint == NULL || o->ttl_s == 0 || o->id[0] == '\0')
        return SMP_EINVAL;
    ha_election *e = calloc(1, sizeof(*e));
    if (e == NULL) return SMP_ENOMEM;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->loop = loop;
    e->ttl_s = o->ttl_s;
    e->ev = o->events;
    e->prefix = strdup(o->prefix);
    e->id = strdup(o->id);
    e->endpoint = strdup(o->endpoint);
    snprintf(e->role, sizeof(e->role), "candidate");
    if (e->prefix == NULL || e->id == NULL || e->endpoint == NULL) {
        rc = SMP_ENOMEM;
        goto free_e;
    }
    snprintf(e->leader_key, sizeof(e->leader_key), "%sleader", o->prefix);
    snprintf(e->member_key, sizeof(e->member_key), "%smasters/%s", o->prefix, o->id);

    /* Calls are short: a renewal must fail fast enough to be retried within
     * the lease's validity. */
    uint32_t timeout = o->ttl_s * 1000u / 4u;
    etcd_client_options eo = o->etcd;
    eo.timeout_ms = timeout < 200 ? 200 : timeout;
    if ((rc = etcd_client_open(&eo, &e->etcd, err, errlen)) < 0) goto free_e;
    int64_t lease = 0;
    if ((rc = grant_first_lease(e->etcd, o->ttl_s, &lease, err, errlen)) < 0) goto free_e;
    e->lease_id = lease;
    atomic_store(&e->renewed_at_ms, mono_ms());
    atomic_store(&e->etcd_ok_ms, mono_ms());
    if (o->fast_failover && (rc = ha_exit_watch_start(on_leader_exit, e, &e->exit_watch)) < 0) {
        snprintf(err, errlen, "ha: cannot start the leader exit watch: %s", smp_strerror(rc));
        goto free_e;
    }

    uv_async_init(loop, &e->async, on_async);
    uv_timer_init(loop, &e->check);
    e->async.data = e->check.data = e;
    e->handles_open = 2;
    uv_timer_start(&e->check, on_check, HA_CHECK_MS, HA_CHECK_MS);
    if (pthread_create(&e->keepalive, NULL, keepalive_thread, e) != 0) {
        snprintf(err, errlen, "ha: cannot start the lease renewal thread: %s", strerror(errno));
        e->stop = 1;
        uv_close((uv_handle_t *)&e->async, on_handle_closed);
        uv_close((uv_handle_t *)&e->check, on_handle_closed);
        return SMP_ENOMEM;
    }
    if (pthread_create(&e->thread, NULL, election_thread, e) != 0) {
        snprintf(err, errlen, "ha: cannot start the election thread: %s", strerror(errno));
        pthread_mutex_lock(&e->mu);
        e->stop = 1;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->keepalive, NULL);
        uv_close((uv_handle_t *)&e->async, on_handle_closed);
        uv_close((uv_handle_t *)&e->check, on_handle_closed);
        return SMP_ENOMEM;
    }
    e->thread_started = 1;
    *out = e;
    return 0;

free_e:
    free_election(e);
    return rc;
}

int ha_election_reload_tls(ha_election *e, const char *ca_pem, const char *cert_pem,
                           const char *key_pem, char *err, size_t errlen)
{
    return etcd_client_reload_tls(e->etcd, ca_pem, cert_pem, key_pem, err, errlen);
}

void ha_election_set_eligible(ha_election *e, int eligible)
{
    pthread_mutex_lock(&e->mu);
    e->eligible = eligible != 0;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void ha_election_set_status(ha_election *e, const char *role, uint64_t applied_seq, int ready,
                            const char *reason)
{
    pthread_mutex_lock(&e->mu);
    snprintf(e->role, sizeof(e->role), "%s", role != NULL ? role : "");
    e->applied_seq = applied_seq;
    e->ready = ready != 0;
    snprintf(e->reason, sizeof(e->reason), "%s", reason != NULL ? reason : "");
    pthread_mutex_unlock(&e->mu);
}

void ha_election_set_replay(ha_election *e, const uint16_t *types, size_t n_types,
                            const char *const *plugins, size_t n_plugins)
{
    pthread_mutex_lock(&e->mu);
    e->n_types = n_types < HA_MAX_TYPES ? n_types : HA_MAX_TYPES;
    for (size_t i = 0; i < e->n_types; i++) e->types[i] = types[i];
    e->n_plugins = n_plugins < 16 ? n_plugins : 16;
    for (size_t i = 0; i < e->n_plugins; i++)
        snprintf(e->plugins[i], sizeof(e->plugins[i]), "%s", plugins[i]);
    pthread_mutex_unlock(&e->mu);
}

int ha_election_is_leader(const ha_election *e)
{
    return e->loop_leader && mono_ms() < atomic_load(&((ha_election *)e)->valid_until_ms);
}

const char *ha_election_leader_endpoint(const ha_election *e)
{
    return e->seen_endpoint;
}

int ha_election_leader_gone(const ha_election *e)
{
    return atomic_load(&((ha_election *)e)->exits_noticed) != e->exits_applied;
}

uint64_t ha_election_etcd_silent_ms(ha_election *e, char *why, size_t cap)
{
    uint64_t ttl_ms = (uint64_t)e->ttl_s * 1000u, bound = ttl_ms / 2 > 1000 ? ttl_ms / 2 : 1000;
    uint64_t now = mono_ms(), ok = atomic_load(&e->etcd_ok_ms);
    if (why != NULL && cap > 0) why[0] = '\0';
    if (now <= ok || now - ok < bound) return 0;
    if (why != NULL && cap > 0) {
        pthread_mutex_lock(&e->mu);
        snprintf(why, cap, "%s", e->etcd_err[0] ? e->etcd_err : "no answer");
        pthread_mutex_unlock(&e->mu);
    }
    return now - ok;
}

size_t ha_election_members(ha_election *e, ha_member *out, size_t cap)
{
    pthread_mutex_lock(&e->mu);
    size_t n = e->n_members;
    memcpy(out, e->members, (n < cap ? n : cap) * sizeof(*out));
    pthread_mutex_unlock(&e->mu);
    return n;
}

uint64_t ha_election_members_read(ha_election *e)
{
    pthread_mutex_lock(&e->mu);
    uint64_t n = e->members_read;
    pthread_mutex_unlock(&e->mu);
    return n;
}

size_t ha_rows_with(ha_member *rows, size_t n, size_t cap, const ha_member *self)
{
    size_t at = 0;
    if (n > cap) n = cap;
    if (cap == 0) return n;
    for (; at < n; at++) {
        int c = strcmp(rows[at].id, self->id);
        if (c == 0) return n;
        if (c > 0) break;
    }
    if (n == cap) { /* the last row gives way */
        n--;
        if (at > n) at = n;
    }
    memmove(&rows[at + 1], &rows[at], (n - at) * sizeof(*rows));
    rows[at] = *self;
    return n + 1;
}

void ha_election_self(ha_election *e, ha_member *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&e->mu);
    snprintf(out->id, sizeof(out->id), "%s", e->id);
    snprintf(out->role, sizeof(out->role), "%s", e->leader ? "leader" : e->role);
    snprintf(out->endpoint, sizeof(out->endpoint), "%s", e->endpoint);
    out->applied_seq = e->applied_seq;
    out->ready = e->ready;
    snprintf(out->reason, sizeof(out->reason), "%s", e->reason);
    for (size_t i = 0; i < e->n_types && out->n_types < HA_MAX_TYPES; i++)
        out->types[out->n_types++] = (uint16_t)e->types[i];
    out->features = (1u << HA_N_FEATURES) - 1;
    pthread_mutex_unlock(&e->mu);
}

void ha_election_stop(ha_election *e)
{
    if (e == NULL) return;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->thread_started) {
        pthread_join(e->thread, NULL);
        pthread_join(e->keepalive, NULL);
        ha_exit_watch_stop(e->exit_watch); /* its callback uses etcd */
        e->exit_watch = NULL;
        /* Resign: the leader key goes with the lease. */
        char err[256];
        if (e->lease_id != 0) (void)etcd_lease_revoke(e->etcd, e->lease_id, err, sizeof(err));
    }
    e->thread_started = 0;
    uv_timer_stop(&e->check);
    uv_close((uv_handle_t *)&e->async, on_handle_closed);
    uv_close((uv_handle_t *)&e->check, on_handle_closed);
}
