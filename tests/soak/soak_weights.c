/* soak_weights.c -- the weight lifecycle under random kills and memory loss.
 *
 * A real store_master (weight_mgmt.so, no embedded node) and two real
 * store_node processes. A workload thread publishes revisions of random
 * tensors (HOT, some migrated to COLD), reads random ones back, migrates and
 * removes some, while the main thread, every few seconds, does one of:
 *   - SIGKILL the master and start it again;
 *   - SIGKILL a node and start it again;
 *   - stop a node, delete its segment file (what a reboot does to /dev/shm)
 *     and start it again (memory lost, cold files kept);
 *   - a clean restart of the master.
 * After each recovery the workload pauses and the program checks, once the
 * store is quiet (no IMPORTING revision, no running operation):
 *   - every revision whose commit was acknowledged and that was not
 *     removed still exists; every READY one reads back with the SHA-256 of
 *     each tensor equal to what was published (DEGRADED is allowed only after
 *     a memory loss: payloads that had no cold copy yet);
 *   - nothing is orphaned: the .cold files in the nodes' cold directories
 *     are exactly as many as the cold replicas the master counts
 *     (store_replicas{kind="cold"}), and `weightctl fsck` (read-only) finds
 *     no cold file and no segment byte that nothing owns (after a memory
 *     loss it may name objects without a replica: those of DEGRADED
 *     revisions, and nothing else).
 * The workload keeps at most MAX_REVS revisions that may exist; a removed
 * one's slot takes a new revision, so it publishes for the whole run.
 * Any violation stops the run with a message naming the revision or the
 * count, the tail of the master's log and exit status 1. Everything is
 * removed at the end, also after a failure.
 *
 * With --ha the store is an HA cluster instead: three store_master
 * processes on a real 3-member etcd (the etcd OpLog, a shared snapshot
 * directory), the nodes and the workload given the list of all three. Its
 * faults are those of an HA fleet:
 *   - SIGKILL of the leader, or of a standby, and its start again;
 *   - SIGTERM of the leader (it hands leadership over) and its start again;
 *   - SIGSTOP of the leader for longer than its lease, then SIGCONT (it
 *     must stand down, and is started again if it exits);
 *   - SIGKILL of an etcd member and its start again;
 *   - SIGKILL of every etcd member, and their start again seconds later;
 *   - the leader cut off from etcd past its lease, then let through again
 *     (each master reaches etcd through a fault_proxy of its own); it must
 *     stand down;
 *   - SIGKILL of every master at once and their start again;
 *   - SIGHUP of every master: each reloads its plugins under the workload
 *     (and, with --etcd-auth, its etcd TLS files);
 *   - a node's SIGKILL and a node's memory lost, as above.
 * After each, the program waits until exactly one master leads and the
 * other two are standbys, and checks as above through the leader. With
 * --etcd-auth as well, etcd serves TLS with its auth on, its tokens expiring
 * after ETCD_TOKEN_TTL_S unused, and the masters log in with a password
 * (ha.etcd_tls_ca, ha.etcd_user, ha.etcd_password_file) as a user whose
 * role reads and writes their prefix only; one more fault then rotates
 * that password: a new one in the masters' file, then in etcd (every
 * token turns old), with no master restarted.
 * Every round also waits, before its fault, until the workload has had a
 * write acknowledged (a put, migration or remove) since the last
 * recovery: a store that only answers reads after a fault fails.
 *
 * Usage: soak_weights [--ha [--etcd-auth]] [SECONDS (600)] [SEED (time)];
 * `make soak` runs it for SOAK_SECONDS, and with --ha --etcd-auth for
 * SOAK_HA_SECONDS. With SOAK_KEEP set
 * in the environment a failed run keeps its masters' directories (logs,
 * data) for inspection. */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fault_proxy.h"
#include "ha_cluster_fixture.h"
#include "harness.h"
#include "weightclient.h"

#define MAX_REVS 4096
#define N_TENSORS 3
#define SEGMENT_BYTES (64ull << 20)
#define QUIET_MS 60000
#define WRITES_MS 30000    /* after a recovery, the first write the workload has acknowledged */
#define UP_MS 120000       /* a process's start, a leader, the nodes registered */
#define HA_LEASE_S 2       /* ha.lease_ttl_s of the HA masters */
#define AWAY_MS (HA_LEASE_S * 1000 + 1500) /* a leader paused or cut off: past its lease */
#define ETCD_TOKEN_TTL_S 2 /* --etcd-auth: etcd's --auth-token-ttl */

/* What the workload knows of one revision. */
typedef enum rev_state {
    R_NONE = 0,
    R_UNKNOWN,   /* a put was attempted and not acknowledged (it may exist) */
    R_ACKED,     /* its commit was acknowledged */
    R_REMOVING,  /* a remove was attempted (it may be gone) */
} rev_state;

/* A slot of the table: one revision, named after its serial (model-N).
 * A slot whose revision is gone for sure (R_NONE) takes the next one, so
 * the workload publishes for the whole run, not only until MAX_REVS. */
typedef struct rev {
    rev_state state;
    uint32_t seed;
    int cold;                  /* migrated to COLD (acknowledged) */
    int serial;                /* its name's number */
} rev;

typedef struct soak {
    int ha;                    /* --ha: three masters on etcd */
    int etcd_auth;             /* --etcd-auth: etcd on TLS, its auth on, a password */
    char password_file[400];   /* --etcd-auth: the masters' ha.etcd_password_file */
    int passwords;             /* --etcd-auth: rotations of that password so far */
    hx_master m;               /* one-master mode: the master */
    hc_cluster hc;             /* HA mode: etcd and the masters */
    hx_master *home;           /* what nodes and clients are given: m, or a view
                                * of the HA masters whose socket lists all three */
    hx_master *lead;           /* the master that serves: m, or the HA leader */
    hx_master view;            /* HA mode: that view */
    fault_proxy *proxy[HC_MASTERS][ETCD_FIXTURE_MAX_MEMBERS]; /* master i's way to etcd member e */
    char etcd_via[HC_MASTERS][200]; /* master i's ha.etcd_endpoints: its proxies */
    hx_node nodes[2];
    rev revs[MAX_REVS];
    int n_revs;                /* slots used so far */
    int serials;               /* revisions named so far */
    pthread_mutex_t lock;      /* revs, n_revs, serials */
    _Atomic int pause;         /* workload: stop issuing requests */
    _Atomic int idle;          /* workload: acknowledged the pause */
    _Atomic int stop;
    _Atomic long puts, gets, migrations, removes, failures;
    _Atomic long not_ready;    /* requests refused: the revision is not READY */
    _Atomic long no_room;      /* puts refused: no segment had room */
    _Atomic int full;          /* the last put found no room, in the segments or in
                                * revs: remove, not put */
    int memory_lost;           /* a segment was deleted since the start */
    uint64_t rng;
} soak;

static uint64_t next_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void sleep_ms(long ms)
{
    usleep((useconds_t)ms * 1000);
}

/* -- revision contents --------------------------------------------------------- */

/* Tensor t of the revision with seed `seed`: its element count and bytes. */
static uint64_t tensor_elems(uint32_t seed, int t)
{
    return 256 + ((seed * 2654435761u + (uint32_t)t * 40503u) % 8192);
}

static void tensor_fill(uint32_t seed, int t, float *out, uint64_t n)
{
    uint64_t x = ((uint64_t)seed << 8) ^ (uint64_t)(t + 1) ^ 0x9e3779b97f4a7c15ull;
    for (uint64_t i = 0; i < n; i++) out[i] = (float)(next_rand(&x) % 100000) / 7.0f;
}

static void identity_of(weight_identity *id, int k)
{
    char res[32];
    snprintf(res, sizeof(res), "model-%05d", k);
    weight_identity_set(id, NULL, "soak", res, "main", 1);
}

/* -- the store under test ---------------------------------------------------------- */

static weight_store *open_store(soak *s)
{
    weight_store *st = NULL;
    char err[256];
    if (weight_store_open(s->home->socket, NULL, NULL, &st, err, sizeof(err)) != WEIGHT_OK) return NULL;
    weight_store_set_option(st, WEIGHT_OPT_PAYLOAD_BYTES, 16384);
    return st;
}

static int put_revision(weight_store *st, int k, uint32_t seed)
{
    weight_identity id;
    weight_writer *w = NULL;
    weight_policy pol = {WEIGHT_RES_HOT, 0.0, WEIGHT_MODE_MANUAL};
    float *data[N_TENSORS] = {NULL};
    int rc;
    identity_of(&id, k);
    if ((rc = weight_put_begin(st, &id, &pol, &w)) != WEIGHT_OK) return rc;
    for (int t = 0; t < N_TENSORS && rc == WEIGHT_OK; t++) {
        uint64_t n = tensor_elems(seed, t);
        char name[16];
        snprintf(name, sizeof(name), "t%d", t);
        if ((data[t] = malloc(n * sizeof(float))) == NULL) {
            rc = WEIGHT_ENOMEM;
            break;
        }
        tensor_fill(seed, t, data[t], n);
        rc = weight_writer_add_tensor(w, name, "F32", 1, &n, data[t]);
    }
    if (rc == WEIGHT_OK) rc = weight_writer_commit(w, NULL);
    else weight_writer_abort(w);
    for (int t = 0; t < N_TENSORS; t++) free(data[t]);
    return rc;
}

typedef struct getbuf {
    float *t[N_TENSORS];
    uint64_t bytes[N_TENSORS];
} getbuf;

static int place_cb(void *ctx, const weight_tensor_info *t, weight_tensor_place *out)
{
    (void)ctx, (void)t;
    out->kind = WEIGHT_PLACE_REPLICATED;
    return 0;
}

static int provide_cb(void *ctx, const weight_tensor_info *t, const weight_tensor_place *p,
                      const uint64_t *shape, uint64_t bytes, void **out)
{
    getbuf *g = ctx;
    (void)p, (void)shape;
    int i = t->name[0] == 't' ? atoi(t->name + 1) : -1;
    if (i < 0 || i >= N_TENSORS || g->t[i] != NULL) return WEIGHT_EINVALID_ARGUMENT;
    g->t[i] = malloc(bytes ? bytes : 1);
    g->bytes[i] = bytes;
    *out = g->t[i];
    return g->t[i] ? 0 : WEIGHT_ENOMEM;
}

/* Read revision k and compare every tensor's SHA-256 with what was
 * published. WEIGHT_OK, the client's error, or -1000 when bytes differ (why
 * written to msg). */
static int get_and_compare(weight_store *st, int k, uint32_t seed, char *msg, size_t cap)
{
    weight_identity id;
    getbuf g;
    memset(&g, 0, sizeof(g));
    weight_placement pl = {place_cb, &g};
    weight_bindings bd = {NULL, 0, provide_cb, &g};
    identity_of(&id, k);
    int rc = weight_get(st, &id, &pl, &bd, NULL);
    for (int t = 0; t < N_TENSORS && rc == WEIGHT_OK; t++) {
        uint64_t n = tensor_elems(seed, t);
        float *want = malloc(n * sizeof(float));
        unsigned char a[32], b[32];
        if (want == NULL) return WEIGHT_ENOMEM;
        tensor_fill(seed, t, want, n);
        hx_sha256(want, n * sizeof(float), a);
        if (g.t[t] != NULL) hx_sha256(g.t[t], g.bytes[t], b);
        if (g.t[t] == NULL || g.bytes[t] != n * sizeof(float) || memcmp(a, b, 32) != 0) {
            snprintf(msg, cap, "model-%05d tensor t%d: %llu bytes read, SHA-256 %s the published one",
                     k, t, (unsigned long long)g.bytes[t], g.t[t] ? "differs from" : "missing for");
            rc = -1000;
        }
        free(want);
    }
    for (int t = 0; t < N_TENSORS; t++) free(g.t[t]);
    return rc;
}

/* -- the workload -------------------------------------------------------------------- */

/* A slot for a new revision (lock held): the next unused one, else a free
 * one from a random place; -1 when every slot holds a revision that may
 * exist. */
static int free_slot(soak *s, uint64_t from)
{
    if (s->n_revs < MAX_REVS) return s->n_revs++;
    for (int i = 0; i < MAX_REVS; i++) {
        int k = (int)((from + (uint64_t)i) % MAX_REVS);
        if (s->revs[k].state == R_NONE) return k;
    }
    return -1;
}

/* Slot k's state, if it still holds revision serial. */
static void set_state(soak *s, int k, int serial, rev_state state)
{
    pthread_mutex_lock(&s->lock);
    if (s->revs[k].serial == serial) s->revs[k].state = state;
    pthread_mutex_unlock(&s->lock);
}

static void *workload(void *arg)
{
    soak *s = arg;
    uint64_t x = s->rng ^ 0xabcdef;
    weight_store *st = NULL;
    char msg[256];
    while (!atomic_load(&s->stop)) {
        if (atomic_load(&s->pause)) {
            weight_store_close(st); /* the master may restart meanwhile */
            st = NULL;
            atomic_store(&s->idle, 1);
            sleep_ms(20);
            continue;
        }
        atomic_store(&s->idle, 0);
        if (st == NULL && (st = open_store(s)) == NULL) {
            sleep_ms(50);
            continue;
        }
        uint64_t dice = next_rand(&x) % 100;
        if (dice < 40 && atomic_load(&s->full)) dice = 96; /* a remove instead */
        pthread_mutex_lock(&s->lock);
        int n = s->n_revs;
        int k = n > 0 ? (int)(next_rand(&x) % (uint64_t)n) : -1;
        rev r = k >= 0 ? s->revs[k] : (rev){0};
        pthread_mutex_unlock(&s->lock);
        int rc = WEIGHT_OK;
        if (dice < 40) { /* publish a new revision, in a free slot */
            uint32_t seed = (uint32_t)next_rand(&x);
            int serial;
            pthread_mutex_lock(&s->lock);
            k = free_slot(s, next_rand(&x));
            if (k >= 0) s->revs[k] = (rev){R_UNKNOWN, seed, 0, serial = s->serials++};
            pthread_mutex_unlock(&s->lock);
            if (k < 0) { /* every slot holds a revision that may exist: remove, not put */
                atomic_store(&s->full, 1);
                continue;
            }
            rc = put_revision(st, serial, seed);
            if (rc == WEIGHT_OK) {
                pthread_mutex_lock(&s->lock);
                s->revs[k].state = R_ACKED;
                pthread_mutex_unlock(&s->lock);
                atomic_fetch_add(&s->puts, 1);
            }
        } else if (dice < 80 && r.state == R_ACKED) { /* read one back */
            rc = get_and_compare(st, r.serial, r.seed, msg, sizeof(msg));
            if (rc == -1000) {
                fprintf(stderr, "soak: FAILED: a read during the workload: %s\n", msg);
                exit(1);
            }
            if (rc == WEIGHT_OK) atomic_fetch_add(&s->gets, 1);
        } else if (dice < 92 && r.state == R_ACKED && !r.cold) { /* migrate to COLD */
            weight_identity id;
            weight_metadata md;
            weight_operation op;
            identity_of(&id, r.serial);
            if ((rc = weight_get_metadata(st, &id, &md, NULL)) == WEIGHT_OK && md.availability == WEIGHT_READY &&
                md.operation_id == 0 &&
                (rc = weight_migrate(st, &id, WEIGHT_RES_COLD, 0, md.metadata_generation, &op)) == WEIGHT_OK) {
                pthread_mutex_lock(&s->lock);
                s->revs[k].cold = 1;
                pthread_mutex_unlock(&s->lock);
                atomic_fetch_add(&s->migrations, 1);
            }
        } else if (r.state != R_NONE && (r.state == R_ACKED || dice >= 96)) {
            /* remove one -- now and then one whose put or remove met a
             * kill, which may exist -- and free its slot once it is gone */
            weight_identity id;
            weight_metadata md;
            identity_of(&id, r.serial);
            rc = weight_get_metadata(st, &id, &md, NULL);
            if (rc == WEIGHT_ENOT_FOUND || (rc == WEIGHT_OK && md.availability == WEIGHT_DELETED)) {
                if (r.state != R_ACKED) { /* never was, or already went */
                    set_state(s, k, r.serial, R_NONE);
                    rc = WEIGHT_OK;
                }
            } else if (rc == WEIGHT_OK && md.operation_id == 0) {
                set_state(s, k, r.serial, R_REMOVING);
                if ((rc = weight_remove(st, &id, md.metadata_generation, NULL)) == WEIGHT_OK) {
                    set_state(s, k, r.serial, R_NONE);
                    atomic_fetch_add(&s->removes, 1);
                    atomic_store(&s->full, 0);
                }
            }
        }
        if (rc != WEIGHT_OK) {
            if (rc == WEIGHT_ENOT_READY) { /* e.g. a read of a revision DEGRADED by a memory loss */
                atomic_fetch_add(&s->not_ready, 1);
                continue;
            }
            if (rc == WEIGHT_ENOSPC) { /* the segments are full: remove until a put fits */
                atomic_fetch_add(&s->no_room, 1);
                atomic_store(&s->full, 1);
                continue;
            }
            atomic_fetch_add(&s->failures, 1); /* expected around kills: counted */
            weight_store_close(st);              /* a fresh connection next time */
            st = NULL;
        }
    }
    weight_store_close(st);
    return NULL;
}

/* -- chaos ----------------------------------------------------------------------------- */

static int start_node(soak *s, int i)
{
    char id[16];
    snprintf(id, sizeof(id), "n%d", i);
    return hx_node_start(s->home, &s->nodes[i], id, SEGMENT_BYTES);
}

/* HA mode: 0 once exactly one master leads, the other two answer as
 * standbys (each has caught up with the OpLog) and s->lead is the leader;
 * -1 after UP_MS, every master's role and log tail printed. */
static int wait_roles(soak *s)
{
    long long end = hx_now_ms() + UP_MS;
    int leader = -1;
    for (;; sleep_ms(100)) {
        int standbys = 0;
        leader = hc_wait_leader(&s->hc, -1, 0);
        for (int i = 0; i < HC_MASTERS; i++) {
            char *r = hc_role(&s->hc.m[i]);
            standbys += r != NULL && strcmp(r, "standby") == 0;
            free(r);
        }
        if (leader >= 0 && standbys == HC_MASTERS - 1) break;
        if (hx_now_ms() >= end) {
            fprintf(stderr, "soak: no leader with two standbys within %d s\n", UP_MS / 1000);
            for (int i = 0; i < HC_MASTERS; i++) {
                char *r = hc_role(&s->hc.m[i]);
                fprintf(stderr, "soak: master %d: %s\n", i, r ? r : "(no answer)");
                free(r);
                hc_print_tail(s->hc.m[i].log);
            }
            return -1;
        }
    }
    s->lead = &s->hc.m[leader];
    return 0;
}

/* Both nodes registered with the master that serves (in HA mode once the
 * roles are settled). 0 or -1. */
static int wait_up(soak *s)
{
    if (s->ha && wait_roles(s) < 0) return -1;
    return hx_wait_nodes(s->lead, 2, UP_MS);
}

/* HA mode: master i, which led and was stopped or cut off from etcd past
 * its lease, runs again. 0 once it no longer answers as leader (or exited
 * and was started again) and another master leads; -1 when it still leads
 * after 10 s, or two do. */
static int stood_down(soak *s, int i)
{
    hx_master *m = &s->hc.m[i];
    for (long long end = hx_now_ms() + 10000; hx_alive(m) && hx_now_ms() < end; sleep_ms(100)) {
        char *r = hc_role(m);
        int led = r == NULL || strcmp(r, "leader") == 0;
        free(r);
        if (!led) break;
    }
    if (!hx_alive(m) && hx_start(m, UP_MS) < 0) return -1;
    if (wait_roles(s) < 0) return -1;
    if (s->lead == m) {
        fprintf(stderr, "soak: master %d still leads after %d ms out of reach, past its %d s lease\n", i,
                AWAY_MS, HA_LEASE_S);
        return -1;
    }
    return 0;
}

/* --etcd-auth: a new password for the masters' user, written to their
 * password file first and then set in etcd (etcdctl user passwd), which
 * makes every token old: the masters' next logins must read the file
 * again. 0 or -1 (why printed). */
static int rotate_password(soak *s)
{
    char pw[64], args[600];
    snprintf(pw, sizeof(pw), "the-soaks-password-%d\n", ++s->passwords);
    if (hx_replace_file(s->password_file, pw) < 0) return -1;
    snprintf(args, sizeof(args), "user passwd soak --interactive=false < '%s'", s->password_file);
    if (etcd_fixture_etcdctl(&s->hc.etcd, "root:root-of-the-soak", args) < 0) {
        fprintf(stderr, "soak: etcdctl user passwd failed (%s/etcdctl.log)\n", s->hc.etcd.dir);
        return -1;
    }
    return 0;
}

/* HA mode: SIGHUP to every master, as an operator's renewal of files does:
 * each reloads its plugins (the weight plugin's state handed over under
 * the workload) and, with --etcd-auth, its etcd TLS files (new channels to
 * etcd while calls run). Waits until each master's log says both are done.
 * 0, or -1 (why printed). */
static int hang_up_all(soak *s)
{
    static const char *const done[] = {"SIGHUP: every plugin looked at",
                                       "SIGHUP: etcd TLS files reloaded"};
    size_t kinds = s->etcd_auth ? 2 : 1;
    int before[HC_MASTERS][2];
    for (int i = 0; i < HC_MASTERS; i++) {
        for (size_t k = 0; k < kinds; k++) before[i][k] = hx_file_count(s->hc.m[i].log, done[k]);
        if (kill(s->hc.m[i].pid, SIGHUP) < 0) {
            perror("soak: SIGHUP");
            return -1;
        }
    }
    for (int i = 0; i < HC_MASTERS; i++)
        for (size_t k = 0; k < kinds; k++)
            for (long long end = hx_now_ms() + UP_MS;
                 hx_file_count(s->hc.m[i].log, done[k]) <= before[i][k]; sleep_ms(50))
                if (hx_now_ms() >= end) {
                    fprintf(stderr, "soak: master %d never logged \"%s\" after SIGHUP\n", i,
                            done[k]);
                    return -1;
                }
    return 0;
}

/* HA mode: one random fault of the masters or of etcd, and the restart of
 * what it stopped. 0, or -1 when a process does not come back. */
static int ha_chaos(soak *s, uint64_t dice, const char **what)
{
    int lead = (int)(s->lead - s->hc.m);
    int other = (lead + 1 + (int)(next_rand(&s->rng) % 2)) % HC_MASTERS;
    hx_master *l = &s->hc.m[lead];
    switch (dice) {
    case 0:
        *what = "SIGKILL of the leader";
        hx_kill(l);
        return hx_start(&s->hc.m[lead], UP_MS);
    case 1:
        *what = "SIGKILL of a standby";
        hx_kill(&s->hc.m[other]);
        return hx_start(&s->hc.m[other], UP_MS);
    case 2:
        *what = "SIGTERM of the leader (handoff)";
        if (hx_stop(l) != 0) return -1;
        return hx_start(&s->hc.m[lead], UP_MS);
    case 3:
        /* Past its lease a standby takes over; the paused leader, once it
         * runs again, must find that out before it answers as leader. */
        *what = "SIGSTOP of the leader past its lease";
        kill(l->pid, SIGSTOP);
        sleep_ms(AWAY_MS);
        kill(l->pid, SIGCONT);
        return stood_down(s, lead);
    case 4:
        *what = "the leader cut off from etcd past its lease";
        for (size_t e = 0; e < s->hc.etcd.n; e++) fault_proxy_cut(s->proxy[lead][e], 1);
        sleep_ms(AWAY_MS);
        for (size_t e = 0; e < s->hc.etcd.n; e++) fault_proxy_cut(s->proxy[lead][e], 0);
        return stood_down(s, lead);
    case 5:
        *what = "SIGKILL of every etcd member";
        for (size_t e = 0; e < s->hc.etcd.n; e++)
            if (etcd_fixture_kill(&s->hc.etcd, e) < 0) return -1;
        sleep_ms(1000 + (long)(next_rand(&s->rng) % 3000));
        return etcd_fixture_restart_all(&s->hc.etcd, UP_MS);
    case 6: {
        *what = "SIGKILL of an etcd member";
        size_t e = (size_t)(next_rand(&s->rng) % s->hc.etcd.n);
        if (etcd_fixture_kill(&s->hc.etcd, e) < 0) return -1;
        sleep_ms(1000 + (long)(next_rand(&s->rng) % 2000));
        return etcd_fixture_restart(&s->hc.etcd, e, UP_MS);
    }
    case 7:
        *what = "SIGKILL of every master";
        for (int i = 0; i < HC_MASTERS; i++) hx_kill(&s->hc.m[i]);
        for (int i = 0; i < HC_MASTERS; i++)
            if (hx_start(&s->hc.m[i], UP_MS) < 0) return -1;
        return 0;
    case 8:
        *what = "SIGHUP of every master (reloads)";
        return hang_up_all(s);
    default: /* --etcd-auth only */
        *what = "the masters' etcd password rotated";
        return rotate_password(s);
    }
}

/* Writes the workload had acknowledged so far: puts, migrations, removes. */
static long writes(soak *s)
{
    return atomic_load(&s->puts) + atomic_load(&s->migrations) + atomic_load(&s->removes);
}

/* Wait, the workload running, until it has had a write acknowledged past
 * `since` (writes()). 0, or -1 after WRITES_MS without one. */
static int writes_taken(soak *s, long since)
{
    for (long long end = hx_now_ms() + WRITES_MS; writes(s) <= since;) {
        if (hx_now_ms() >= end) return -1;
        sleep_ms(50);
    }
    return 0;
}

/* One random fault and the recovery from it. 0, or -1 when a process does
 * not come back. */
static int chaos(soak *s, const char **what)
{
    /* the nodes' two faults; in one-master mode the master's two, in HA
     * mode the masters' and etcd's nine, and with --etcd-auth the
     * password's rotation (ha_chaos) */
    uint64_t dice = next_rand(&s->rng) % (s->ha ? 11u + (unsigned)s->etcd_auth : 4u);
    int i = (int)(next_rand(&s->rng) % 2);
    char path[600];
    switch (dice) {
    case 0:
        *what = "SIGKILL of a node";
        hx_node_kill(&s->nodes[i]);
        if (start_node(s, i) < 0) return -1;
        break;
    case 1:
        *what = "a node's memory lost (segment file deleted)";
        hx_node_kill(&s->nodes[i]);
        snprintf(path, sizeof(path), "%s/n%d.seg", s->nodes[i].segment_dir, i);
        if (unlink(path) < 0) perror("soak: unlink segment");
        s->memory_lost = 1;
        if (start_node(s, i) < 0) return -1;
        break;
    default:
        if (s->ha) {
            if (ha_chaos(s, dice - 2, what) < 0) return -1;
        } else if (dice == 2) {
            *what = "SIGKILL of the master";
            hx_kill(&s->m);
            if (hx_start(&s->m, UP_MS) < 0) return -1;
        } else {
            *what = "clean restart of the master";
            if (hx_stop(&s->m) != 0 || hx_start(&s->m, UP_MS) < 0) return -1;
        }
    }
    return wait_up(s);
}

/* -- checks -------------------------------------------------------------------------------- */

static long count_cold_files(const char *dir)
{
    DIR *d = opendir(dir);
    long n = 0;
    if (d == NULL) return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t l = strlen(e->d_name);
        if (l > 5 && strcmp(e->d_name + l - 5, ".cold") == 0) n++;
    }
    closedir(d);
    return n;
}

/* Wait until no revision is IMPORTING and none has an operation running
 * (repairs and migrations settle). 0, or -1 after QUIET_MS. */
static int wait_quiet(soak *s, weight_store *st)
{
    int busy = -1;
    for (int waited = 0; waited < QUIET_MS; waited += 200) {
        int n = s->n_revs;
        busy = -1;
        for (int k = 0; k < n && busy < 0; k++) {
            weight_identity id;
            weight_metadata md;
            if (s->revs[k].state == R_NONE) continue;
            identity_of(&id, s->revs[k].serial);
            int rc = weight_get_metadata(st, &id, &md, NULL);
            if (rc == WEIGHT_OK && (md.operation_id != 0 || md.availability == WEIGHT_IMPORTING))
                busy = s->revs[k].serial;
            else if (rc != WEIGHT_OK && rc != WEIGHT_ENOT_FOUND)
                busy = s->revs[k].serial;
        }
        double active = hx_metric(s->lead, "weight_operations_active");
        if (busy < 0 && active == 0) return 0;
        sleep_ms(200);
    }
    if (busy >= 0) { /* what keeps it busy, for the report */
        char cmd[700];
        snprintf(cmd, sizeof(cmd), "%s/bin/weightctl --master '%s' info soak/model-%05d/main@1 >&2", BUILD_DIR,
                 s->lead->socket, busy);
        fprintf(stderr, "soak: model-%05d is still busy:\n", busy);
        if (system(cmd) != 0) fprintf(stderr, "soak: (weightctl info failed)\n");
    }
    return -1;
}

/* 1 when the fsck report at path finds nothing orphaned and only objects
 * without a replica left: what a node's lost memory leaves of the HOT
 * revisions that had no cold copy yet (DEGRADED). Any other line of the
 * report -- an orphaned file or byte, cold bytes on disk the replicas do
 * not account for, anything else it names -- is 0. */
static int fsck_found_only_lost_objects(const char *path)
{
    char line[1024];
    int ok = 1;
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    while (ok && fgets(line, sizeof(line), f) != NULL) {
        unsigned long long disk = 0, replicas = 1;
        if (strncmp(line, "node ", 5) == 0) ok = strstr(line, "; 0 orphaned\n") != NULL;
        else if (strncmp(line, "segment ", 8) == 0) ok = strstr(line, "; 0 orphaned bytes") != NULL;
        else if (sscanf(line, "cold bytes on disk %llu, cold replica bytes %llu", &disk, &replicas) == 2)
            ok = disk == replicas;
        else
            ok = strstr(line, " objects have no replica left") != NULL ||
                 strncmp(line, "  no replica: ", 14) == 0 || strncmp(line, "  ... and ", 10) == 0;
    }
    fclose(f);
    return ok;
}

/* Check every revision and the cold files; 0, or -1 with the cause printed. */
static int check(soak *s, int *degraded)
{
    weight_store *st = open_store(s);
    char msg[256];
    int rc = -1;
    *degraded = 0;
    if (st == NULL) {
        fprintf(stderr, "soak: FAILED: cannot connect to the master after recovery\n");
        return -1;
    }
    if (wait_quiet(s, st) < 0) {
        fprintf(stderr, "soak: FAILED: the store was not quiet %d s after recovery\n", QUIET_MS / 1000);
        goto close;
    }
    for (int k = 0; k < s->n_revs; k++) {
        rev r = s->revs[k];
        weight_identity id;
        weight_metadata md;
        if (r.state == R_NONE) continue;
        identity_of(&id, r.serial);
        int g = weight_get_metadata(st, &id, &md, NULL);
        if (g == WEIGHT_ENOT_FOUND || (g == WEIGHT_OK && md.availability == WEIGHT_DELETED)) {
            if (r.state == R_ACKED) {
                fprintf(stderr, "soak: FAILED: model-%05d was acknowledged and is gone\n", r.serial);
                goto close;
            }
            continue;
        }
        if (g != WEIGHT_OK) {
            fprintf(stderr, "soak: FAILED: model-%05d: get_metadata: %s\n", r.serial,
                    weight_store_last_error(st));
            goto close;
        }
        if (md.availability == WEIGHT_DEGRADED) {
            /* Only memory can be lost here (cold files are never deleted),
             * and a revision migrated to COLD may have lost it before its
             * payloads reached the disk. */
            if (!s->memory_lost) {
                fprintf(stderr, "soak: FAILED: model-%05d is DEGRADED and no memory was lost\n",
                        r.serial);
                goto close;
            }
            (*degraded)++;
            continue;
        }
        if (md.availability != WEIGHT_READY) continue; /* DELETING: going */
        int c = get_and_compare(st, r.serial, r.seed, msg, sizeof(msg));
        /* A member whose last replica went with a node's memory is noticed
         * by the master's next tick or by this very read (a read miss):
         * the revision must then turn DEGRADED, or read back once repaired. */
        for (int waited = 0; c != WEIGHT_OK && c != -1000 && s->memory_lost && waited < 10000; waited += 200) {
            sleep_ms(200);
            if (weight_get_metadata(st, &id, &md, NULL) != WEIGHT_OK) continue;
            if (md.availability == WEIGHT_DEGRADED) break;
            if (md.availability == WEIGHT_READY && md.operation_id == 0)
                c = get_and_compare(st, r.serial, r.seed, msg, sizeof(msg));
        }
        if (c != WEIGHT_OK && md.availability == WEIGHT_DEGRADED) {
            (*degraded)++;
            continue;
        }
        if (c != WEIGHT_OK) {
            fprintf(stderr, "soak: FAILED: READY %s\n",
                    c == -1000 ? msg : weight_store_last_error(st));
            goto close;
        }
    }
    /* Cold files on disk against the master's cold replicas. The counts may
     * only differ while a node's inventory is being reconciled; give it time. */
    for (int waited = 0;; waited += 200) {
        char dir0[400];
        long files = 0;
        for (int i = 0; i < 2; i++) {
            snprintf(dir0, sizeof(dir0), "%s", s->nodes[i].cold_dir);
            files += count_cold_files(dir0);
        }
        double replicas = hx_metric(s->lead, "store_replicas{kind=\"cold\"}");
        if ((double)files == replicas) break;
        if (waited >= QUIET_MS) {
            fprintf(stderr, "soak: FAILED: %ld cold files on disk, the master counts %.0f cold replicas\n",
                    files, replicas);
            goto close;
        }
        sleep_ms(200);
    }
    /* Nothing orphaned anywhere: weightctl fsck, read-only, exits 0 when
     * no cold file and no segment byte is left that nothing owns. A node
     * that registered again is swept by the master in the background (what
     * a crash left in its free ranges is zeroed) at once and 5 s later (what
     * a writer of the dead master's put copied meanwhile), and a node
     * removes a killed persist's temporary files every 10 s once they are
     * a minute old, as old as fsck takes them for stale: give that time.
     * Once memory was lost, fsck also names the objects of DEGRADED
     * revisions, which have no replica left (exit 1): that alone passes. */
    char cmd[1100], out[400];
    snprintf(out, sizeof(out), "%s/fsck.out", s->home->dir);
    snprintf(cmd, sizeof(cmd), "%s/bin/weightctl --master '%s' fsck > '%s' 2>&1", BUILD_DIR,
             s->lead->socket, out);
    int fsck_rc = system(cmd);
    /* past the master's second sweep (5 s) and a node's sweep of the
     * temporary files a killed persist left (every 10 s, once 60 s old) */
    for (int tries = 0; fsck_rc != 0 && tries < 15; tries++) {
        if (s->memory_lost && fsck_found_only_lost_objects(out)) {
            fsck_rc = 0;
            break;
        }
        sleep_ms(1000);
        fsck_rc = system(cmd);
    }
    if (fsck_rc != 0 && s->memory_lost && fsck_found_only_lost_objects(out)) fsck_rc = 0;
    if (fsck_rc != 0) {
        fprintf(stderr, "soak: FAILED: weightctl fsck found orphans or failed:\n");
        snprintf(cmd, sizeof(cmd), "cat '%s' >&2", out);
        if (system(cmd) != 0) fprintf(stderr, "soak: (no fsck output)\n");
        goto close;
    }
    rc = 0;
close:
    weight_store_close(st);
    return rc;
}

/* The weight plugin and the node timings of every master: fast ticks and
 * node timeouts, so that a round's faults are noticed in seconds. In HA
 * mode the plugin's records go to the etcd OpLog, which its capability
 * gate asks to be confirmed. */
static void store_yaml(char *out, size_t cap, int ha)
{
    snprintf(out, cap,
             "node:\n  embedded: false\n  timeout_ms: 1500\n  poll_ms: 20\n"
             "cluster:\n  weight_migration_cooldown_ms: 100\n%s"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    config:\n      tick_period_ms: 50\n"
             "      import_ttl_ms: 5000\n",
             ha ? "  weight_management_oplog_capability_confirmed: true\n" : "", BUILD_DIR);
}

/* --etcd-auth: turn etcd's auth on (its members restarted with a short
 * token TTL first) with users root and soak, whose one role reads and
 * writes the cluster's prefix, and write the soak's password to a file;
 * out gets the ha: keys that log the masters in. 0 or -1 (why printed). */
static int etcd_auth(soak *s, char *out, size_t cap)
{
    char grant[256];
    etcd_fixture *f = &s->hc.etcd;
    f->auth_token_ttl_s = ETCD_TOKEN_TTL_S;
    for (size_t e = 0; e < f->n; e++)
        if (etcd_fixture_kill(f, e) < 0) return -1;
    if (etcd_fixture_restart_all(f, UP_MS) < 0) return -1;
    snprintf(grant, sizeof(grant), "role grant-permission soak readwrite '%s' --prefix=true",
             s->hc.prefix);
    const char *steps[] = {"user add root --new-user-password=root-of-the-soak",
                           "user add soak --new-user-password=the-soaks-password", "role add soak",
                           grant, "user grant-role soak soak", "auth enable"};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
        if (etcd_fixture_etcdctl(f, NULL, steps[i]) < 0) {
            fprintf(stderr, "soak: etcdctl %s failed (%s/etcdctl.log)\n", steps[i], f->dir);
            return -1;
        }
    snprintf(s->password_file, sizeof(s->password_file), "%s/soak.password", f->dir);
    if (hx_replace_file(s->password_file, "the-soaks-password\n") < 0) return -1;
    snprintf(out, cap, "  etcd_tls_ca: \"%s/ca.pem\"\n  etcd_user: soak\n  etcd_password_file: \"%s\"\n",
             f->certs, s->password_file);
    return 0;
}

/* Start the store: the master, or etcd and the three HA masters; then the
 * two nodes, and wait until they serve. 0 or -1 (why printed). */
static int start_store(soak *s)
{
    char cfg[1024];
    store_yaml(cfg, sizeof(cfg), s->ha);
    if (!s->ha) {
        if (hx_init(&s->m, "soak", cfg) < 0) return -1;
        s->m.expect_nodes = 0;
        s->home = s->lead = &s->m;
        if (hx_start(&s->m, UP_MS) < 0) return -1;
    } else {
        char ha[2600] = ""; /* the ha: keys of --etcd-auth, then cfg */
        if ((s->etcd_auth ? hc_init_tls(&s->hc, "soak-ha", 3, 0) : hc_init(&s->hc, "soak-ha", 3)) < 0)
            return -1;
        s->hc.lease_ttl_s = HA_LEASE_S;
        if (s->etcd_auth && etcd_auth(s, ha, sizeof(ha)) < 0) return -1;
        size_t used = strlen(ha);
        snprintf(ha + used, sizeof(ha) - used, "%s", cfg);
        for (int i = 0; i < HC_MASTERS; i++) { /* each master's own way to etcd */
            size_t used = 0;
            for (size_t e = 0; e < s->hc.etcd.n; e++) {
                char via[64];
                if (fault_proxy_start(etcd_fixture_endpoint(&s->hc.etcd, e), &s->proxy[i][e], via,
                                      sizeof(via)) < 0)
                    return -1;
                used += (size_t)snprintf(s->etcd_via[i] + used, sizeof(s->etcd_via[i]) - used, "%s%s",
                                         e ? "," : "", via);
            }
            s->hc.etcd_endpoints[i] = s->etcd_via[i];
        }
        if (hc_list_view(&s->hc, &s->view) < 0) return -1;
        s->home = &s->view;
        for (int i = 0; i < HC_MASTERS; i++)
            if (hc_configure(&s->hc, i, ha) < 0 || hx_start(&s->hc.m[i], UP_MS) < 0) return -1;
        if (wait_roles(s) < 0) return -1;
    }
    if (start_node(s, 0) < 0 || start_node(s, 1) < 0) return -1;
    if (!s->ha) s->m.expect_nodes = 2; /* hx_start waits for them from now on */
    return wait_up(s);
}

/* The end of every master's log, after a failure. */
static void print_logs(soak *s)
{
    char cmd[400];
    for (int i = 0; i < (s->ha ? HC_MASTERS : 1); i++) {
        const hx_master *m = s->ha ? &s->hc.m[i] : &s->m;
        fprintf(stderr, "soak: the log of %s ends with:\n", m->log);
        snprintf(cmd, sizeof(cmd), "grep -v 'WARN operation' '%s' | tail -n %d >&2", m->log,
                 s->ha ? 30 : 60);
        if (system(cmd) != 0) fprintf(stderr, "soak: (no log)\n");
    }
}

/* Stop every process and remove what the run made, except, when keep is
 * set, the masters' directories (logs, data, the nodes' files). */
static void stop_store(soak *s, int keep)
{
    for (int i = 0; i < 2; i++) hx_node_kill(&s->nodes[i]);
    for (int i = 0; keep && i < (s->ha ? HC_MASTERS : 1); i++) {
        hx_master *m = s->ha ? &s->hc.m[i] : &s->m;
        if (m->pid > 0) kill(m->pid, SIGCONT);
        hx_kill(m);
        hx_disown_dir(m->dir);
        fprintf(stderr, "soak: SOAK_KEEP is set: %s is kept for inspection\n", m->dir);
        m->dir[0] = '\0'; /* hc_cleanup passes it by */
    }
    if (s->ha) hc_cleanup(&s->hc); /* and etcd */
    else if (!keep) hx_cleanup(&s->m);
    for (int i = 0; i < HC_MASTERS; i++)
        for (int e = 0; e < ETCD_FIXTURE_MAX_MEMBERS; e++) fault_proxy_stop(s->proxy[i][e]);
}

int main(int argc, char **argv)
{
    static soak s;
    int status = 1, rounds = 0, a = 1;
    pthread_t th;
    if (argc > a && strcmp(argv[a], "--ha") == 0) {
        s.ha = 1;
        a++;
    }
    if (s.ha && argc > a && strcmp(argv[a], "--etcd-auth") == 0) {
        s.etcd_auth = 1;
        a++;
    }
    double seconds = argc > a ? atof(argv[a]) : 600;
    uint64_t seed = argc > a + 1 ? strtoull(argv[a + 1], NULL, 10) : (uint64_t)time(NULL);
    if (seconds <= 0) {
        fprintf(stderr, "usage: %s [--ha [--etcd-auth]] [SECONDS] [SEED]\n", argv[0]);
        return 2;
    }
    s.rng = seed * 2654435761ull + 1;
    pthread_mutex_init(&s.lock, NULL);
    if (start_store(&s) < 0) {
        fprintf(stderr, "soak: FAILED: the store or a node did not start\n");
        goto cleanup;
    }
    printf("soak%s%s: %.0f s, seed %llu, directory %s\n", s.ha ? " --ha" : "",
           s.etcd_auth ? " --etcd-auth" : "", seconds,
           (unsigned long long)seed, s.home->dir);
    fflush(stdout);
    pthread_create(&th, NULL, workload, &s);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        double el = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9;
        if (el >= seconds) break;
        long before = writes(&s);
        sleep_ms(1000 + (long)(next_rand(&s.rng) % 3000)); /* the workload runs */
        if (writes_taken(&s, before) < 0) {
            fprintf(stderr, "soak: FAILED: no write acknowledged in %d s after %s (seed %llu)\n",
                    WRITES_MS / 1000, rounds ? "the last recovery" : "the start",
                    (unsigned long long)seed);
            goto stop_workload;
        }
        const char *what = "";
        long long fault_at = hx_now_ms();
        if (chaos(&s, &what) < 0) {
            fprintf(stderr, "soak: FAILED: no recovery from %s\n", what);
            goto stop_workload;
        }
        atomic_store(&s.pause, 1);
        while (!atomic_load(&s.idle)) sleep_ms(10);
        int degraded = 0;
        long long check_at = hx_now_ms();
        if (check(&s, &degraded) < 0) {
            fprintf(stderr, "soak: after round %d (%s), seed %llu\n", rounds + 1, what,
                    (unsigned long long)seed);
            goto stop_workload;
        }
        rounds++;
        clock_gettime(CLOCK_MONOTONIC, &t);
        el = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9;
        printf("soak: round %3d at %4.0f s: %-44s (up %4.1f s, checked %4.1f s) ok: %ld puts, %ld gets, "
               "%ld migrations, %ld removes, %ld failed requests, %ld refused as not READY, %ld puts found no room, "
               "%d DEGRADED\n",
               rounds, el, what, (double)(check_at - fault_at) / 1e3, (double)(hx_now_ms() - check_at) / 1e3,
               atomic_load(&s.puts), atomic_load(&s.gets), atomic_load(&s.migrations),
               atomic_load(&s.removes), atomic_load(&s.failures), atomic_load(&s.not_ready),
               atomic_load(&s.no_room), degraded);
        fflush(stdout);
        atomic_store(&s.pause, 0);
    }
    status = rounds > 0 ? 0 : 1;
    printf("soak: %s: %d rounds of faults, every check held\n", status == 0 ? "passed" : "FAILED", rounds);
stop_workload:
    atomic_store(&s.stop, 1);
    atomic_store(&s.pause, 0);
    pthread_join(th, NULL);
cleanup:
    if (status != 0) print_logs(&s);
    stop_store(&s, status != 0 && getenv("SOAK_KEEP") != NULL);
    return status;
}
