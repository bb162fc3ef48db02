/* master_corrupt_reports.c -- OBJ_REPORT_CORRUPT: a reader says a memory
 * replica's bytes did not match the object's digest; the master checks it
 * itself and drops the replica only when the node's hash agrees.
 *
 * A client verifies every chunk it reads (the manifest's XXH3-64, or the
 * object's SHA-256); when bytes read from a memory replica -- through the
 * segment's mapping or from the node's data server -- fail, it reports the
 * key and the replica it read (node, segment, offset), best effort. The
 * report is a claim, never a verdict: a buggy or hostile reader must not be
 * able to make the master drop good replicas. So the master has the node
 * that holds each replica named hash it (TASK_VERIFY, the same task fsck
 * --deep sends, one object's range), and drops it (master_drop_replica: the
 * plugin that owns the object hears of the loss and repairs it from the
 * cold copy or another replica) only when the hash disagrees with the
 * object's recorded SHA-256 and the replica is still the object's -- the
 * object may have been removed and put again while the node hashed. The
 * drop is one log line naming the key, the replica, the node and who
 * reported it; a report of a sound replica changes nothing and is logged
 * at most a few lines a minute (log_limit).
 *
 * Reports are bounded, per key and replica named (a report that names
 * none checks every memory replica of the key, and counts as one more):
 * one queued, being checked, or checked in the last REPORT_RECHECK_MS and
 * found sound is not checked again (a flood of reports of one replica, a
 * get per reader of a popular revision, is one check; one whose check
 * dropped a replica is forgotten, so that the replica the repair makes --
 * often at the same place -- is checked when it is reported in turn); at
 * most REPORT_CHECKING_MAX are hashed at once and REPORT_QUEUE_MAX wait,
 * beyond which a report is refused SMP_EAGAIN (nothing queued); the table
 * remembers at most REPORT_KEYS_MAX, those checked longest ago forgotten
 * first. As a report must name a complete memory replica of a known key,
 * a flood of made-up places costs one refusal each, and no check. A report whose key is unknown, still being put, has no
 * memory replica, or names a place that is no memory replica of the key, is
 * refused with the cause and changes nothing. Counted in
 * store_corrupt_reports_total{result}. Soft state of the loop thread; a
 * check still out when the master stops ends with its task. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_rpc.pb-c.h"
#include "host_uthash.h"
#include "log_limit.h"
#include "master_internal.h"
#include "node_rpc.pb-c.h"

#define REPORT_RECHECK_MS 30000u /* a key checked is not checked again before */
#define REPORT_CHECKING_MAX 4    /* keys whose replicas are being hashed at once */
#define REPORT_QUEUE_MAX 256     /* keys waiting for their check */
#define REPORT_KEYS_MAX 4096     /* keys remembered (waiting, checking, checked) */
#define REPORT_REPLICAS_MAX 16   /* replicas of one object looked at */

typedef enum report_state { REPORT_QUEUED = 1, REPORT_CHECKING, REPORT_CHECKED } report_state;

typedef struct report_key {
    UT_hash_handle hh;
    report_state state;
    uint64_t checked_ms;      /* when its last check ended (master_now_ms) */
    unsigned outstanding;     /* VERIFY tasks out */
    int dropped;              /* its check dropped a replica */
    char *reporter;           /* who reported it (the report that queued the check) */
    char *node, *segment;     /* the replica the report named (NULL: every memory replica) */
    uint64_t offset;
    struct report_key *next;  /* the queue */
    size_t id_len;            /* of id: key, NUL, node, NUL, segment, NUL, offset (8 bytes) */
    char *key;                /* the object's key: the start of id */
    char id[];                /* what the table finds it by (report_id) */
} report_key;

struct master_reports {
    report_key *keys;
    report_key *head, *tail;  /* waiting, oldest first */
    size_t queued, checking;
    uint64_t counts[MASTER_REPORT_RESULTS];
    log_limit sound_log;      /* "holds its bytes" lines */
};

/* One replica of a reported key being hashed on its node. */
typedef struct replica_check {
    report_key *rk;
    char *node, *segment;
    uint64_t offset, length;
    uint8_t sha[32];          /* the object's when the check began */
} replica_check;

static master_reports *reports_of(master *m)
{
    if (m->reports == NULL && (m->reports = calloc(1, sizeof(*m->reports))) != NULL) {
        m->reports->sound_log.burst = 5;
        m->reports->sound_log.window_ms = 60000;
    }
    return m->reports;
}

static void rk_free(report_key *rk)
{
    free(rk->reporter);
    free(rk->node);
    free(rk->segment);
    free(rk);
}

static void rc_free(replica_check *c)
{
    free(c->node);
    free(c->segment);
    free(c);
}

void master_reports_free(master *m)
{
    master_reports *r = m->reports;
    if (r == NULL) return;
    report_key *rk, *tmp;
    HASH_ITER(hh, r->keys, rk, tmp) {
        HASH_DEL(r->keys, rk);
        rk_free(rk);
    }
    free(r);
    m->reports = NULL;
}

void master_reports_counts(const master *m, uint64_t out[MASTER_REPORT_RESULTS])
{
    for (int i = 0; i < MASTER_REPORT_RESULTS; i++) out[i] = m->reports ? m->reports->counts[i] : 0;
}

/* Forget checked keys whose recheck time is over (all of them at need), the
 * oldest first, until the table has room for one more. 1 when it has. */
static int make_room(master_reports *r, uint64_t now)
{
    report_key *rk, *tmp, *oldest = NULL;
    if (HASH_COUNT(r->keys) < REPORT_KEYS_MAX) return 1;
    HASH_ITER(hh, r->keys, rk, tmp) {
        if (rk->state != REPORT_CHECKED) continue;
        if (now - rk->checked_ms >= REPORT_RECHECK_MS) {
            HASH_DEL(r->keys, rk);
            rk_free(rk);
        } else if (oldest == NULL || rk->checked_ms < oldest->checked_ms) {
            oldest = rk;
        }
    }
    if (HASH_COUNT(r->keys) >= REPORT_KEYS_MAX && oldest != NULL) {
        HASH_DEL(r->keys, oldest);
        rk_free(oldest);
    }
    return HASH_COUNT(r->keys) < REPORT_KEYS_MAX;
}

/* Who made call, for the log: its tenant and role with authentication on,
 * and its connection. */
static void describe_reporter(const smp_rpc_call *call, char *out, size_t cap)
{
    static const char *const roles[] = {"none", "reader", "writer", "admin"};
    smp_caller who = {.struct_size = sizeof(who)};
    unsigned long long conn = (unsigned long long)rpc_server_call_conn(call);
    if (rpc_server_call_caller(call, &who) < 0 || !who.auth_enabled)
        snprintf(out, cap, "a client on connection %llu", conn);
    else
        snprintf(out, cap, "tenant %.100s (%s) on connection %llu", who.tenant ? who.tenant : "?",
                 (unsigned)who.role < 4 ? roles[who.role] : "?", conn);
}

/* 1 when rep is a complete memory replica that rk's report covers (the one
 * it named, or any when it named none). */
static int covered(const report_key *rk, const obj_replica *rep)
{
    if (rep->kind != SMP_REPLICA_MEMORY || rep->status != OBJ_REPLICA_COMPLETE || rep->node == NULL ||
        rep->segment == NULL)
        return 0;
    return rk->node == NULL || (strcmp(rep->node, rk->node) == 0 &&
                                strcmp(rep->segment, rk->segment) == 0 && rep->offset == rk->offset);
}

/* 1 when key still has c's memory replica and still hashes to c->sha: a
 * hash that disagrees is judged only then (a replica removed or replaced
 * while its node hashed it is nobody's fault). */
static int still_there(master *m, const char *key, const replica_check *c)
{
    obj_replica reps[REPORT_REPLICAS_MAX];
    size_t n = 0;
    smp_object_info info = {.struct_size = sizeof(info)};
    if (obj_object_info(master_objs(m), key, &info) < 0 || !info.complete ||
        memcmp(info.checksum, c->sha, 32) != 0 ||
        obj_object_replicas(master_objs(m), key, reps, REPORT_REPLICAS_MAX, &n) < 0)
        return 0;
    for (size_t i = 0; i < n && i < REPORT_REPLICAS_MAX; i++)
        if (reps[i].kind == SMP_REPLICA_MEMORY && reps[i].status == OBJ_REPLICA_COMPLETE &&
            reps[i].offset == c->offset && strcmp(reps[i].node, c->node) == 0 &&
            strcmp(reps[i].segment, c->segment) == 0)
            return 1;
    return 0;
}

static void pump(master *m);

/* The table's id of a report of key naming node/segment/offset (node ""
 * when it names none): its length, written to out when it fits in cap. */
static size_t report_id(const char *key, const char *node, const char *segment, uint64_t offset,
                        char *out, size_t cap)
{
    size_t kl = strlen(key) + 1, nl = strlen(node) + 1, sl = strlen(segment) + 1;
    size_t len = kl + nl + sl + sizeof(offset);
    if (len > cap) return len;
    memcpy(out, key, kl);
    memcpy(out + kl, node, nl);
    memcpy(out + kl + nl, segment, sl);
    memcpy(out + kl + nl + sl, &offset, sizeof(offset));
    return len;
}

/* A check of rk ended (every task answered, or none could be sent). A
 * check that dropped a replica forgets the key: the replica it judged is
 * gone, and a report after it is about another one (the repair's, maybe at
 * the same place), checked at once. Otherwise the key is not checked again
 * before REPORT_RECHECK_MS. */
static void check_ended(master *m, report_key *rk)
{
    m->reports->checking--;
    if (rk->dropped) {
        HASH_DEL(m->reports->keys, rk);
        rk_free(rk);
    } else {
        rk->state = REPORT_CHECKED;
        rk->checked_ms = master_now_ms();
    }
    pump(m);
}

typedef struct drop_note {
    char *key;
    char *node;
} drop_note;

static void on_dropped(master *m, void *arg, int status, uint64_t seq)
{
    drop_note *d = arg;
    (void)m;
    (void)seq;
    if (status < 0)
        fprintf(stderr, "store_master: report corrupt: dropping the memory replica of %s on node %s "
                "failed: %s (the next report checks it again)\n", d->key, d->node,
                smp_strerror(status));
    free(d->key);
    free(d->node);
    free(d);
}

/* A replica of a reported key hashed: dropped when its bytes do not hash to
 * the object's SHA-256 and it is still the object's replica (in this turn of
 * the loop, so nothing changes in between); left alone otherwise. */
static void on_verified(master *m, void *arg, int status, const TaskResult *res)
{
    replica_check *c = arg;
    report_key *rk = c->rk;
    master_reports *r = m->reports;
    int rc = status == SMP_OK ? res->status : status;
    uint64_t left_out = 0;
    if (rc < 0) {
        r->counts[MASTER_REPORT_FAILED]++;
        const char *why = status == SMP_OK && res->error != NULL && res->error[0] ? res->error
                                                                                 : smp_strerror(rc);
        if (!m->stopping) /* a stop fails every task: nothing to say */
            fprintf(stderr, "store_master: report corrupt: the memory replica of %s at %s+%llu on "
                    "node %s could not be hashed: %s (not checked; reported by %s)\n", rk->key,
                    c->segment, (unsigned long long)c->offset, c->node, why, rk->reporter);
    } else if (res->sha256.len == 32 && memcmp(res->sha256.data, c->sha, 32) == 0) {
        r->counts[MASTER_REPORT_REFUTED]++;
        if (log_limit_admit(&r->sound_log, master_now_ms(), &left_out)) {
            if (left_out > 0)
                fprintf(stderr, "store_master: report corrupt: %llu more reported replicas held "
                        "their bytes\n", (unsigned long long)left_out);
            fprintf(stderr, "store_master: report corrupt: the memory replica of %s at %s+%llu on "
                    "node %s holds its bytes (its node hashed it): reported by %s, left alone\n",
                    rk->key, c->segment, (unsigned long long)c->offset, c->node, rk->reporter);
        }
    } else if (!still_there(m, rk->key, c)) {
        r->counts[MASTER_REPORT_REFUTED]++;
        fprintf(stderr, "store_master: report corrupt: the memory replica of %s at %s+%llu on node "
                "%s was removed or replaced while it was hashed: left alone (reported by %s)\n",
                rk->key, c->segment, (unsigned long long)c->offset, c->node, rk->reporter);
    } else {
        r->counts[MASTER_REPORT_CONFIRMED]++;
        obj_replica bad = {.kind = SMP_REPLICA_MEMORY, .node = c->node, .segment = c->segment,
                           .offset = c->offset, .length = c->length};
        drop_note *d = calloc(1, sizeof(*d));
        if (d != NULL && ((d->key = strdup(rk->key)) == NULL || (d->node = strdup(c->node)) == NULL)) {
            free(d->key);
            free(d);
            d = NULL;
        }
        int drc = d == NULL ? SMP_ENOMEM : master_drop_replica(m, rk->key, &bad, on_dropped, d);
        rk->dropped |= drc == SMP_OK;
        if (drc < 0 && d != NULL) on_dropped(m, d, SMP_OK, 0); /* not called back: frees it */
        fprintf(stderr, "store_master: memory replica of %s at %s+%llu on node %s does not hold its "
                "bytes (reported by %s, its node's hash disagrees with the object's SHA-256): %s\n",
                rk->key, c->segment, (unsigned long long)c->offset, c->node, rk->reporter,
                drc == SMP_OK ? "its replica is dropped" : smp_strerror(drc));
    }
    rc_free(c);
    if (--rk->outstanding == 0) check_ended(m, rk);
}

/* Send rk's VERIFY tasks: one per memory replica its report covers, as the
 * object is now. None sent (the object or the replica gone, its node not
 * up): the check ends at once. */
static void start_check(master *m, report_key *rk)
{
    obj_replica reps[REPORT_REPLICAS_MAX];
    size_t n = 0;
    smp_object_info info = {.struct_size = sizeof(info)};
    m->reports->checking++;
    rk->state = REPORT_CHECKING;
    rk->dropped = 0;
    rk->outstanding = 1; /* held until every task is sent */
    if (obj_object_info(master_objs(m), rk->key, &info) == SMP_OK && info.complete &&
        obj_object_replicas(master_objs(m), rk->key, reps, REPORT_REPLICAS_MAX, &n) == SMP_OK) {
        for (size_t i = 0; i < n && i < REPORT_REPLICAS_MAX; i++) {
            if (!covered(rk, &reps[i])) continue;
            replica_check *c = calloc(1, sizeof(*c));
            if (c == NULL || (c->node = strdup(reps[i].node)) == NULL ||
                (c->segment = strdup(reps[i].segment)) == NULL) {
                if (c != NULL) rc_free(c);
                m->reports->counts[MASTER_REPORT_FAILED]++;
                continue;
            }
            c->rk = rk;
            c->offset = reps[i].offset;
            c->length = info.size;
            memcpy(c->sha, info.checksum, 32);
            int rc = master_node_task(m, c->node, TASK_KIND__TASK_VERIFY, rk->key, c->offset,
                                      c->length, c->sha, NULL, on_verified, c);
            if (rc < 0) {
                m->reports->counts[MASTER_REPORT_FAILED]++;
                fprintf(stderr, "store_master: report corrupt: the memory replica of %s on node %s "
                        "is not checked: %s (reported by %s)\n", rk->key, c->node,
                        rc == SMP_EAGAIN ? "the node is not up" : smp_strerror(rc), rk->reporter);
                rc_free(c);
                continue;
            }
            rk->outstanding++;
        }
    }
    if (--rk->outstanding == 0) check_ended(m, rk);
}

/* Start the checks of waiting keys while fewer than REPORT_CHECKING_MAX run
 * (none once the master is stopping: master_reports_free forgets them). */
static void pump(master *m)
{
    master_reports *r = m->reports;
    while (!m->stopping && r->head != NULL && r->checking < REPORT_CHECKING_MAX) {
        report_key *rk = r->head;
        if ((r->head = rk->next) == NULL) r->tail = NULL;
        rk->next = NULL;
        r->queued--;
        start_check(m, rk);
    }
}

/* Validate req against the state: SMP_OK when key is a complete object
 * with a memory replica the report covers (the named one), else the
 * refusal with its cause in why. */
static int validate(master *m, const ReportCorruptRequest *req, char *why, size_t cap)
{
    obj_replica reps[REPORT_REPLICAS_MAX];
    size_t n = 0;
    int memory = 0, named = 0;
    smp_object_info info = {.struct_size = sizeof(info)};
    const char *key = req->key;
    if (key == NULL || key[0] == '\0') {
        snprintf(why, cap, "report corrupt: no key given");
        return SMP_EINVAL;
    }
    if ((req->node[0] != '\0') != (req->segment[0] != '\0')) {
        snprintf(why, cap, "report corrupt: '%.512s': a replica is named by its node and its "
                 "segment together (got node '%.64s', segment '%.64s')", key, req->node,
                 req->segment);
        return SMP_EINVAL;
    }
    if (obj_object_info(master_objs(m), key, &info) < 0) {
        snprintf(why, cap, "report corrupt: no object '%.512s' (removed since it was read?)", key);
        return SMP_ENOTFOUND;
    }
    if (!info.complete) {
        snprintf(why, cap, "report corrupt: '%.512s' is still being put: it has no replica to "
                 "check yet", key);
        return SMP_ESTATE;
    }
    if (obj_object_replicas(master_objs(m), key, reps, REPORT_REPLICAS_MAX, &n) < 0) n = 0;
    for (size_t i = 0; i < n && i < REPORT_REPLICAS_MAX; i++) {
        if (reps[i].kind != SMP_REPLICA_MEMORY || reps[i].status != OBJ_REPLICA_COMPLETE) continue;
        memory = 1;
        named |= req->node[0] != '\0' && strcmp(reps[i].node, req->node) == 0 &&
                 strcmp(reps[i].segment, req->segment) == 0 && reps[i].offset == req->offset;
    }
    if (!memory) {
        snprintf(why, cap, "report corrupt: '%.512s' has no memory replica to check (dropped "
                 "since it was read?)", key);
        return SMP_EINVAL;
    }
    if (req->node[0] != '\0' && !named) {
        snprintf(why, cap, "report corrupt: '%.512s' has no memory replica at %.64s+%llu on node "
                 "%.64s (dropped or moved since it was read?)", key, req->segment,
                 (unsigned long long)req->offset, req->node);
        return SMP_EINVAL;
    }
    return SMP_OK;
}

void master_report_corrupt(master *m, smp_rpc_call *call, const ReportCorruptRequest *req)
{
    char why[1400], who[200];
    master_reports *r = reports_of(m);
    ReportCorruptResponse resp = REPORT_CORRUPT_RESPONSE__INIT;
    uint64_t now = master_now_ms();
    int rc;
    if (r == NULL) {
        rpc_reply_error(call, SMP_ENOMEM, "report corrupt: out of memory");
        return;
    }
    if ((rc = validate(m, req, why, sizeof(why))) < 0) {
        rpc_reply_error(call, rc, why);
        return;
    }
    r->counts[MASTER_REPORT_RECEIVED]++;
    report_key *rk = NULL;
    char idbuf[1600];
    size_t id_len = report_id(req->key, req->node, req->segment, req->offset, idbuf, sizeof(idbuf));
    char *id = id_len <= sizeof(idbuf) ? idbuf : malloc(id_len);
    if (id == NULL) {
        rpc_reply_error(call, SMP_ENOMEM, "report corrupt: out of memory");
        return;
    }
    if (id != idbuf) report_id(req->key, req->node, req->segment, req->offset, id, id_len);
    HASH_FIND(hh, r->keys, id, id_len, rk);
    if (rk != NULL && (rk->state != REPORT_CHECKED || now - rk->checked_ms < REPORT_RECHECK_MS)) {
        master_reply_msg(call, &resp.base); /* queued, being checked, or checked just now */
        goto free_id;
    }
    if (r->queued >= REPORT_QUEUE_MAX || (rk == NULL && !make_room(r, now))) {
        snprintf(why, sizeof(why), "report corrupt: %zu reported replicas are waiting for their "
                 "check; '%.512s' is not queued (report it again later)", r->queued, req->key);
        rpc_reply_error(call, SMP_EAGAIN, why);
        goto free_id;
    }
    describe_reporter(call, who, sizeof(who));
    char *reporter = strdup(who);
    char *node = req->node[0] ? strdup(req->node) : NULL;
    char *segment = req->segment[0] ? strdup(req->segment) : NULL;
    if (rk == NULL && (rk = calloc(1, sizeof(*rk) + id_len)) != NULL) {
        memcpy(rk->id, id, id_len);
        rk->id_len = id_len;
        rk->key = rk->id;
        HASH_ADD_KEYPTR(hh, r->keys, rk->id, id_len, rk);
    }
    if (rk == NULL || reporter == NULL || (req->node[0] && (node == NULL || segment == NULL))) {
        free(reporter);
        free(node);
        free(segment);
        if (rk != NULL && rk->state == 0) {
            HASH_DEL(r->keys, rk);
            rk_free(rk);
        }
        rpc_reply_error(call, SMP_ENOMEM, "report corrupt: out of memory");
        goto free_id;
    }
    free(rk->reporter);
    free(rk->node);
    free(rk->segment);
    rk->reporter = reporter;
    rk->node = node;
    rk->segment = segment;
    rk->offset = req->offset;
    rk->state = REPORT_QUEUED;
    rk->next = NULL;
    if (r->tail != NULL) r->tail->next = rk;
    else r->head = rk;
    r->tail = rk;
    r->queued++;
    resp.check_queued = 1;
    master_reply_msg(call, &resp.base);
    pump(m);
free_id:
    if (id != idbuf) free(id);
}
