/* master_replicas.c -- the replica tasks behind the plugin ABI's ensure_cold,
 * ensure_memory and release_memory.
 *
 * Each one ends in a durable record of the object's new replica list, made
 * only once the node reported the physical step done:
 *   ensure_cold    a node holding a complete memory replica persists it to a
 *                  cold file (written to a temporary file, fsynced, renamed,
 *                  the directory fsynced, read back and checked against the
 *                  object's SHA-256); then the COMPLETE cold replica is added.
 *   ensure_memory  a range is reserved on the node holding the cold file, the
 *                  node loads the file into it checking the SHA-256, and the
 *                  memory replica is added. A node registers with the
 *                  master after a crash of this one only once a running
 *                  load ends (it drops the tasks not started), and with
 *                  write zones on the range is also named in a durable
 *                  WRITE_ZONES record before the node is sent the load
 *                  (obj_store_zones.c), which that master holds back as a
 *                  second guard. A file that fails the check is a
 *                  lost cold replica (dropped durably, replica-lost emitted)
 *                  and is never served.
 *   release_memory drops the memory replicas -- refused (SMP_ESTATE) unless
 *                  a COMPLETE cold replica exists on a live node, and only
 *                  once its node hashed that file whole and found the
 *                  object's bytes (CHECK_COLD) -- unless this master wrote
 *                  and read it back in the last MASTER_FRESH_COLD_MS. A file
 *                  that rotted since it was written is dropped as a corrupt
 *                  replica and the memory kept: releasing it would lose the
 *                  only good copy. The caller's next ensure_cold persists
 *                  anew.
 * A cold file a client's read found corrupt or missing (the node reports it
 * with a poll) is dropped as a failed load's is (master_cold_corrupt).
 * A goal that already holds completes on the next loop turn: callbacks never
 * run inside the call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_uthash.h"
#include "master_internal.h"
#include "node_rpc.pb-c.h"

#define REPS_MAX 16

/* Keys with an ensure_cold job between its PERSIST task and the durable
 * record of the file: their file may exist before a replica names it, so
 * fsck must not take it for an orphan. */
struct master_busy_key {
    UT_hash_handle hh;
    unsigned count;
    char key[]; /* one allocation with the entry */
};

static int busy_add(master *m, const char *key)
{
    master_busy_key *b = NULL;
    HASH_FIND_STR(m->persisting, key, b);
    if (b == NULL) {
        size_t len = strlen(key);
        if ((b = calloc(1, sizeof(*b) + len + 1)) == NULL) return SMP_ENOMEM;
        memcpy(b->key, key, len + 1);
        HASH_ADD_KEYPTR(hh, m->persisting, b->key, len, b);
    }
    b->count++;
    return SMP_OK;
}

static void busy_del(master *m, const char *key)
{
    master_busy_key *b = NULL;
    HASH_FIND_STR(m->persisting, key, b);
    if (b == NULL || --b->count > 0) return;
    HASH_DEL(m->persisting, b);
    free(b);
}

int master_persist_in_flight(const master *m, const char *key)
{
    master_busy_key *b = NULL;
    HASH_FIND_STR(m->persisting, key, b);
    return b != NULL;
}

/* A cold file this master's persist wrote, read back and verified: a
 * release of memory within MASTER_FRESH_COLD_MS relies on it without having
 * it hashed again (the hash would read the bytes the persist just checked).
 * One entry per key, the newest; uthash keeps insertion order, which is time
 * order, so the expired ones are at the head. */
#define MASTER_FRESH_COLD_MS 60000

struct master_fresh_cold {
    UT_hash_handle hh;
    uint64_t at_ms;
    char *node;
    char *name;
    char key[]; /* one allocation with the entry */
};

static void fresh_del(master *m, master_fresh_cold *f)
{
    HASH_DEL(m->fresh_cold, f);
    free(f->node);
    free(f->name);
    free(f);
}

static void fresh_expire(master *m, uint64_t now)
{
    while (m->fresh_cold != NULL && m->fresh_cold->at_ms + MASTER_FRESH_COLD_MS <= now)
        fresh_del(m, m->fresh_cold);
}

/* Note that node's cold file name holds key's bytes, verified now. Out of
 * memory only costs a check later. */
static void fresh_note(master *m, const char *key, const char *node, const char *name)
{
    master_fresh_cold *f = NULL;
    uint64_t now = master_now_ms();
    fresh_expire(m, now);
    HASH_FIND_STR(m->fresh_cold, key, f);
    if (f != NULL) fresh_del(m, f);
    size_t len = strlen(key);
    if ((f = calloc(1, sizeof(*f) + len + 1)) == NULL) return;
    memcpy(f->key, key, len + 1);
    f->node = strdup(node);
    f->name = strdup(name);
    f->at_ms = now;
    if (f->node == NULL || f->name == NULL) {
        free(f->node);
        free(f->name);
        free(f);
        return;
    }
    HASH_ADD_KEYPTR(hh, m->fresh_cold, f->key, len, f);
}

/* 1 (and forgotten) when rep is the file fresh_note noted for key less than
 * MASTER_FRESH_COLD_MS ago. */
static int fresh_take(master *m, const char *key, const obj_replica *rep)
{
    master_fresh_cold *f = NULL;
    fresh_expire(m, master_now_ms());
    HASH_FIND_STR(m->fresh_cold, key, f);
    if (f == NULL || rep->path == NULL || strcmp(f->node, rep->node) != 0 || strcmp(f->name, rep->path) != 0)
        return 0;
    fresh_del(m, f);
    return 1;
}

void master_replicas_free(master *m)
{
    master_busy_key *b, *tmp;
    master_fresh_cold *f, *ftmp;
    HASH_ITER(hh, m->persisting, b, tmp) {
        HASH_DEL(m->persisting, b);
        free(b);
    }
    HASH_ITER(hh, m->fresh_cold, f, ftmp) fresh_del(m, f);
}

typedef struct replica_job {
    master *m;
    char *key;
    smp_done_cb cb;
    void *arg;
    uv_timer_t timer;     /* for completions that need no work */
    int status;
    char *node;           /* the node doing the work */
    char *cold_name;      /* LOAD: the file */
    obj_put_ticket where; /* LOAD: the reserved range */
    char *segment;
    uint64_t size;        /* LOAD: the object's, and its SHA-256 */
    uint8_t checksum[32];
    int persisting;       /* counted in m->persisting */
} replica_job;

static replica_job *job_new(master *m, const char *key, smp_done_cb cb, void *arg)
{
    replica_job *j = calloc(1, sizeof(*j));
    if (j == NULL) return NULL;
    j->key = strdup(key);
    if (j->key == NULL) {
        free(j);
        return NULL;
    }
    j->m = m;
    j->cb = cb;
    j->arg = arg;
    return j;
}

static void job_free(replica_job *j)
{
    if (j->persisting) busy_del(j->m, j->key);
    free(j->key);
    free(j->node);
    free(j->cold_name);
    free(j->segment);
    free(j);
}

static void job_done(replica_job *j, int status)
{
    j->cb(j->arg, status);
    job_free(j);
}

static void on_timer_closed(uv_handle_t *h)
{
    replica_job *j = h->data;
    job_done(j, j->status);
}

static void on_timer(uv_timer_t *t)
{
    uv_close((uv_handle_t *)t, on_timer_closed);
}

/* Complete on the next loop turn (the goal already holds). */
static int job_later(replica_job *j, int status)
{
    j->status = status;
    uv_timer_init(&j->m->loop, &j->timer);
    j->timer.data = j;
    uv_timer_start(&j->timer, on_timer, 0, 0);
    return SMP_OK;
}

/* The object's replicas, and which of them are complete on live nodes. */
typedef struct replicas {
    obj_replica v[REPS_MAX];
    size_t n;
    int memory;     /* index of a live complete memory replica, or -1 */
    int cold;       /* index of a live complete cold replica, or -1 */
    smp_object_info info;
} replicas;

static int load_replicas(master *m, const char *key, replicas *r)
{
    int rc = obj_object_replicas(master_objs(m), key, r->v, REPS_MAX, &r->n);
    if (rc < 0) return rc;
    if (r->n > REPS_MAX) return SMP_ERANGE;
    r->info = (smp_object_info){.struct_size = sizeof(r->info)};
    if ((rc = obj_object_info(master_objs(m), key, &r->info)) < 0) return rc;
    r->memory = r->cold = -1;
    for (size_t i = 0; i < r->n; i++) {
        if (r->v[i].status != OBJ_REPLICA_COMPLETE || !master_node_readable(m, r->v[i].node)) continue;
        if (r->v[i].kind == SMP_REPLICA_MEMORY && r->memory < 0) r->memory = (int)i;
        if (r->v[i].kind == SMP_REPLICA_COLD && r->cold < 0) r->cold = (int)i;
    }
    return SMP_OK;
}

static void on_committed(master *m, void *arg, int status, uint64_t seq)
{
    (void)m;
    (void)seq;
    job_done(arg, status);
}

/* -- ensure cold -------------------------------------------------------------- */

/* Why a persist failed, for its log line: the node's words, or what is
 * known when it gave none (no answer at all: it went down or stopped
 * polling before it answered -- SMP_EIO with no result). */
static const char *persist_why(int status, const struct TaskResult *res)
{
    if (res != NULL && res->error != NULL && res->error[0] != '\0') return res->error;
    if (res == NULL)
        return status == SMP_EIO ? "the node did not answer (it went down or stopped polling, and was "
                                   "marked down)"
                                 : "the task never reached the node";
    return "the node gave no cause";
}

static void on_persisted(master *m, void *arg, int status, const struct TaskResult *res)
{
    replica_job *j = arg;
    replicas r;
    obj_record rec = {0};
    if (status == SMP_OK && res->status != 0) status = res->status;
    if (status < 0) {
        fprintf(stderr, "store_master: persisting %s on %s failed: %s: %s\n", j->key, j->node,
                smp_strerror(status), persist_why(status, res));
        job_done(j, status);
        return;
    }
    /* The object may have changed meanwhile: add the file to what is there. */
    if ((status = load_replicas(m, j->key, &r)) < 0 || r.n >= REPS_MAX) {
        /* removed while the file was written: no replica will name it */
        if (status == SMP_ENOTFOUND) master_reclaim_cold_file(m, j->node, j->key, res->cold_name);
        job_done(j, status < 0 ? status : SMP_ERANGE);
        return;
    }
    r.v[r.n++] = (obj_replica){.kind = SMP_REPLICA_COLD, .status = OBJ_REPLICA_COMPLETE,
                               .node = j->node, .length = r.info.size, .path = res->cold_name};
    fresh_note(m, j->key, j->node, res->cold_name);
    if ((status = obj_prepare_set_replicas(master_objs(m), j->key, r.v, r.n, &rec)) < 0 ||
        (status = master_commit(m, &rec, NULL, on_committed, j)) < 0)
        job_done(j, status);
}

int master_ensure_cold(void *ctx, const char *key, smp_done_cb cb, void *arg)
{
    master *m = ctx;
    replicas r;
    int rc;
    if (cb == NULL) return SMP_EINVAL;
    if ((rc = load_replicas(m, key, &r)) < 0) return rc;
    replica_job *j = job_new(m, key, cb, arg);
    if (j == NULL) return SMP_ENOMEM;
    if (r.cold >= 0) return job_later(j, SMP_OK);
    if (r.memory < 0) {
        job_free(j);
        return SMP_EAGAIN; /* nothing readable to persist from */
    }
    const obj_replica *src = &r.v[r.memory];
    if ((j->node = strdup(src->node)) == NULL) {
        job_free(j);
        return SMP_ENOMEM;
    }
    if (busy_add(m, key) < 0) {
        job_free(j);
        return SMP_ENOMEM;
    }
    j->persisting = 1;
    rc = master_node_task(m, src->node, TASK_KIND__TASK_PERSIST, key, src->offset, r.info.size,
                          r.info.checksum, NULL, on_persisted, j);
    if (rc < 0) job_free(j);
    return rc;
}

/* -- ensure memory ------------------------------------------------------------ */

/* The corrupt cold replica is durably gone: now report the load's failure. */
static void on_corrupt_dropped(master *m, void *arg, int status, uint64_t seq)
{
    (void)m;
    (void)status;
    (void)seq;
    job_done(arg, SMP_EPROTO);
}

static void on_loaded(master *m, void *arg, int status, const struct TaskResult *res)
{
    replica_job *j = arg;
    obj_record rec = {0};
    if (status == SMP_OK && res->status != 0) status = res->status;
    if (status < 0) {
        obj_release_reservation(master_objs(m), j->key);
        fprintf(stderr, "store_master: loading %s from %s on %s failed: %s (%s)\n", j->key,
                j->cold_name, j->node, smp_strerror(status), res && res->error ? res->error : "");
        if (res != NULL && res->status == SMP_EPROTO) {
            /* The file does not hold the object's bytes: never serve it. */
            obj_replica bad = {.kind = SMP_REPLICA_COLD, .node = j->node, .path = j->cold_name};
            if (master_drop_replica(m, j->key, &bad, on_corrupt_dropped, j) == SMP_OK) return;
        }
        job_done(j, status);
        return;
    }
    if ((status = obj_prepare_add_replica(master_objs(m), j->key, &j->where, &rec)) < 0 ||
        (status = master_commit(m, &rec, NULL, on_committed, j)) < 0)
        job_done(j, status);
}

/* Send j's node the task that loads its cold file into its range. */
static int send_load(master *m, replica_job *j)
{
    return master_node_task(m, j->node, TASK_KIND__TASK_LOAD, j->key, j->where.offset, j->size,
                            j->checksum, j->cold_name, on_loaded, j);
}

/* The write zone naming j's range is durable (or not): load, or give up. */
static void on_load_zoned(master *m, void *arg, int status, uint64_t seq)
{
    replica_job *j = arg;
    (void)seq;
    if (!obj_reservation_holds(master_objs(m), j->key, j->segment, j->where.offset)) {
        job_done(j, SMP_EAGAIN); /* given up meanwhile (its segment went): ask again */
        return;
    }
    if (status == SMP_OK) status = send_load(m, j);
    if (status < 0) {
        obj_release_reservation(master_objs(m), j->key);
        job_done(j, status);
    }
}

int master_ensure_memory(void *ctx, const char *key, smp_done_cb cb, void *arg)
{
    master *m = ctx;
    replicas r;
    int rc;
    if (cb == NULL) return SMP_EINVAL;
    if ((rc = load_replicas(m, key, &r)) < 0) return rc;
    replica_job *j = job_new(m, key, cb, arg);
    if (j == NULL) return SMP_ENOMEM;
    if (r.memory >= 0) return job_later(j, SMP_OK);
    if (r.cold < 0) {
        job_free(j);
        return SMP_EAGAIN; /* nothing readable to load from */
    }
    const obj_replica *src = &r.v[r.cold];
    j->node = strdup(src->node);
    j->cold_name = strdup(src->path);
    if (j->node == NULL || j->cold_name == NULL) {
        job_free(j);
        return SMP_ENOMEM;
    }
    if ((rc = obj_reserve_replica(master_objs(m), key, src->node, master_now_ms(), &j->where)) < 0) {
        job_free(j);
        return rc;
    }
    /* The file is read where it lies: the range must be on the same node. */
    if (strcmp(j->where.node, src->node) != 0) {
        obj_release_reservation(master_objs(m), key);
        job_free(j);
        return SMP_ENOSPC;
    }
    if ((j->segment = strdup(j->where.segment)) == NULL) {
        obj_release_reservation(master_objs(m), key);
        job_free(j);
        return SMP_ENOMEM;
    }
    j->where.segment = j->segment;
    j->where.node = j->node;
    j->size = r.info.size;
    memcpy(j->checksum, r.info.checksum, sizeof(j->checksum));
    if (j->where.zone_wait) {
        /* the node fills the range with no record of it: a write zone
         * names it first, so a master after a crash of this one holds it */
        obj_record rec = {0};
        if ((rc = obj_prepare_write_zones(master_objs(m), j->segment, 0, &rec)) == SMP_OK)
            rc = master_commit(m, &rec, NULL, on_load_zoned, j);
    } else {
        rc = send_load(m, j);
    }
    if (rc < 0) {
        obj_release_reservation(master_objs(m), key);
        job_free(j);
    }
    return rc;
}

/* -- release memory ------------------------------------------------------------ */

/* Load key's replicas for a release: r without its memory replicas (*kept
 * of them left, *kept == r->n: nothing to release). SMP_ESTATE when no
 * complete cold replica is on a live node (the last readable copy stays),
 * SMP_EBUSY while a reader's read lease on key runs (it copies out of the
 * memory replica until then, as for a removal). */
static int release_plan(master *m, const char *key, replicas *r, size_t *kept)
{
    int rc;
    if ((rc = load_replicas(m, key, r)) < 0) return rc;
    if (r->cold < 0) return SMP_ESTATE;
    *kept = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->v[i].kind != SMP_REPLICA_MEMORY) r->v[(*kept)++] = r->v[i];
    if (*kept < r->n && obj_lease_end(master_objs(m), key, master_now_ms()) != 0) return SMP_EBUSY;
    return SMP_OK;
}

/* Commit the replica list without the memory replicas; j completes with
 * the commit. */
static int release_commit(master *m, replica_job *j, const replicas *r, size_t kept)
{
    obj_record rec = {0};
    int rc = obj_prepare_set_replicas(master_objs(m), j->key, r->v, kept, &rec);
    if (rc == SMP_OK) rc = master_commit(m, &rec, j->key, on_committed, j);
    return rc;
}

/* The node hashed the cold file the release relies on. Intact: release, if
 * the file is still a complete replica and no read lease began meanwhile.
 * Not the object's bytes (or gone): drop the replica durably and keep the
 * memory (SMP_EPROTO). Not checked (node down, a node from before
 * CHECK_COLD, a read error): keep the memory, with the cause. */
static void on_release_checked(master *m, void *arg, int status, const struct TaskResult *res)
{
    replica_job *j = arg;
    replicas r;
    size_t kept = 0;
    if (status == SMP_OK && res->status != 0) status = res->status;
    const char *why = res != NULL && res->error != NULL && res->error[0] ? res->error : smp_strerror(status);
    if (status == SMP_EPROTO || status == SMP_ENOTFOUND || status == SMP_ERANGE || status == SMP_EINVAL) {
        m->release_checks[MASTER_RELEASE_CHECK_CORRUPT]++;
        fprintf(stderr, "store_master: node %s: cold file %s of %s does not hold its bytes (%s): its "
                "replica is dropped and the memory replicas kept\n", j->node, j->cold_name, j->key, why);
        obj_replica bad = {.kind = SMP_REPLICA_COLD, .node = j->node, .path = j->cold_name};
        if (master_drop_replica(m, j->key, &bad, on_corrupt_dropped, j) != SMP_OK) job_done(j, SMP_EPROTO);
        return;
    }
    if (status < 0) {
        m->release_checks[MASTER_RELEASE_CHECK_FAILED]++;
        fprintf(stderr, "store_master: node %s: cold file %s of %s could not be checked before its "
                "memory replicas are released (%s%s): they are kept\n", j->node, j->cold_name, j->key,
                why, status == SMP_ENOTSUP ? "; the node predates CHECK_COLD: upgrade it" : "");
        job_done(j, status);
        return;
    }
    m->release_checks[MASTER_RELEASE_CHECK_INTACT]++;
    if ((status = release_plan(m, j->key, &r, &kept)) < 0) {
        job_done(j, status);
        return;
    }
    int still = 0;
    for (size_t i = 0; i < kept; i++)
        still |= r.v[i].kind == SMP_REPLICA_COLD && r.v[i].status == OBJ_REPLICA_COMPLETE &&
                 r.v[i].path != NULL && strcmp(r.v[i].node, j->node) == 0 &&
                 strcmp(r.v[i].path, j->cold_name) == 0;
    if (!still) { /* replaced meanwhile: what was checked is not what stays */
        job_done(j, SMP_ESTATE);
        return;
    }
    if (kept == r.n) {
        job_done(j, SMP_OK);
        return;
    }
    if ((status = release_commit(m, j, &r, kept)) < 0) job_done(j, status);
}

int master_release_memory(void *ctx, const char *key, smp_done_cb cb, void *arg)
{
    master *m = ctx;
    replicas r;
    size_t kept = 0;
    int rc;
    if (cb == NULL) return SMP_EINVAL;
    if ((rc = release_plan(m, key, &r, &kept)) < 0) return rc;
    replica_job *j = job_new(m, key, cb, arg);
    if (j == NULL) return SMP_ENOMEM;
    if (kept == r.n) return job_later(j, SMP_OK);
    const obj_replica *cold = &r.v[0];
    for (size_t i = 0; i < kept; i++)
        if (r.v[i].kind == SMP_REPLICA_COLD && r.v[i].status == OBJ_REPLICA_COMPLETE &&
            master_node_readable(m, r.v[i].node)) {
            cold = &r.v[i];
            break;
        }
    if (fresh_take(m, key, cold)) {
        if ((rc = release_commit(m, j, &r, kept)) < 0) job_free(j);
        return rc;
    }
    /* The file may have rotted since it was written: have its node hash it
       before the last memory copy goes. */
    j->node = strdup(cold->node);
    j->cold_name = strdup(cold->path ? cold->path : "");
    if (j->node == NULL || j->cold_name == NULL) {
        job_free(j);
        return SMP_ENOMEM;
    }
    rc = master_node_task(m, j->node, TASK_KIND__TASK_CHECK_COLD, key, 0, r.info.size, r.info.checksum,
                          j->cold_name, on_release_checked, j);
    if (rc < 0) job_free(j);
    return rc;
}

/* -- cold files found corrupt (or missing) by a read ------------------------------------------ */

typedef struct corrupt_scan {
    char *const *names;  /* the node's report (bare names, as replicas record them) */
    size_t n_names;
    char **keys;         /* found: the key whose replica names names[i], or NULL */
} corrupt_scan;

static int note_corrupt_owner(void *arg, const char *key, const obj_replica *rep)
{
    corrupt_scan *cs = arg;
    if (rep->kind != SMP_REPLICA_COLD || rep->path == NULL) return 0;
    for (size_t i = 0; i < cs->n_names; i++)
        if (cs->keys[i] == NULL && strcmp(rep->path, cs->names[i]) == 0)
            return (cs->keys[i] = strdup(key)) == NULL; /* out of memory stops the visit */
    return 0;
}

void master_cold_corrupt(master *m, const char *node, char *const *names, size_t n)
{
    corrupt_scan cs = {names, n, NULL};
    if (n == 0) return;
    if ((cs.keys = calloc(n, sizeof(*cs.keys))) == NULL ||
        obj_visit_replicas(master_objs(m), node, note_corrupt_owner, &cs) < 0) {
        fprintf(stderr, "store_master: node %s reported %zu unreadable cold files; out of memory "
                "finding their replicas (the next read reports them again)\n", node, n);
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        if (cs.keys[i] == NULL) {
            /* a replica dropped meanwhile (a node serves a read of a
               name only with the master's ticket for it) */
            fprintf(stderr, "store_master: node %s: cold file %s, found corrupt or missing by a "
                    "read, is no replica's: nothing to drop\n", node, names[i]);
            continue;
        }
        obj_replica bad = {.kind = SMP_REPLICA_COLD, .node = node, .path = names[i]};
        int rc = master_drop_replica(m, cs.keys[i], &bad, NULL, NULL);
        fprintf(stderr, "store_master: node %s: cold file %s of %s found corrupt or missing by a "
                "read (the node's log says which): %s\n", node, names[i], cs.keys[i],
                rc == SMP_OK ? "its replica is dropped" : smp_strerror(rc));
    }
cleanup:
    for (size_t i = 0; cs.keys != NULL && i < n; i++) free(cs.keys[i]);
    free(cs.keys);
}
