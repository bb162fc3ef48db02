/* master_nodes.c -- the nodes as the master sees them (RPC service 3).
 *
 * A node registers (its segment is mounted durably if the master did not know
 * it, with its capacity), and the master reconciles what it persisted with
 * what the node really holds: a cold replica whose file the node did not
 * report (or reported with another checksum) is dropped, a memory replica in
 * a segment that did not survive the node's restart is dropped, and memory
 * replicas in a surviving segment are checked with VERIFY tasks; every drop
 * is a durable record and a replica-lost event for the plugins, and the node
 * is up (counted, served, handed tasks) only once its drops are durable, so
 * no client is sent to a replica the node is known to lack; a cold file
 * the node reported that no replica names is deleted (master_reclaim.c).
 * A large inventory arrives before its registration, in pages
 * (master_inventory.c).
 * Then the node polls: each poll is a heartbeat, says how full its cold
 * directory is (as the registration does; master_cold_usage.h), reports finished tasks,
 * and is answered (deferred) as soon as tasks are queued for the node or
 * poll_ms ran out; a node still running the tasks of an earlier answer
 * (however long one of them takes) polls "busy" every poll_ms and is
 * answered at once, with no task. A node silent for node.timeout_ms is
 * marked down: its replicas stop being served, its tasks fail, and the
 * plugins get node-down and
 * replica-lost events. Silence is the node's, not the master's: it starts
 * at the node's last request or at the answer to its last poll, whichever
 * is later (a node cannot poll while the master holds its poll), and ends
 * when the loop last read its sockets (master_internal.h's I/O clock), so a
 * loop stalled for longer than the timeout (a snapshot captured on it, a
 * long tick) marks no live node down. Liveness is soft state: after a
 * master restart no node is up until it registers again, and a node holding
 * a segment is given up (down, the same events) once it was silent for
 * node.timeout_ms since serving began -- a node whose inventory pages are
 * arriving (tens of thousands of cold files take longer than that) or whose
 * registration is running is not silent; one whose registration was refused
 * for what a retry does not change is, whatever it sends after.
 *
 * Tenants: a node may be dedicated to a tenant (it registers with the
 * tenant and the Unix socket that hands its segment to that tenant's local
 * peers, node_local.h). The object store's place hook keeps every other
 * tenant's objects off it, a registration whose segment still holds another
 * tenant's bytes is refused, and replica locations name its socket, never
 * its segment file. A shared node's segment file is named to clients only
 * while authentication is off.
 *
 * Tickets: a node registers with its ticket key and the key's id; the master
 * signs the node's WRITE tickets (put start) and READ tickets (get replicas)
 * with it, for node.ticket_ttl_ms. A node that rotated its key reports the
 * new one in a poll; from that poll on the master signs with it, and the
 * answer names the key in use (the node's acknowledgment). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "host_uthash.h"
#include "master_cold_usage.h"
#include "master_internal.h"
#include "host_rpc.pb-c.h"
#include "node_rpc.pb-c.h"
#include "node_ticket.h"

#define NODE_TASKS_PER_POLL 64

typedef struct master_task {
    uint64_t id;
    TaskKind kind;
    char *key;
    uint64_t offset;
    uint64_t length;
    uint8_t sha256[32];
    char *cold_name;
    uint64_t *ranges;     /* SCAN / SCRUB: offset, length pairs */
    size_t n_ranges;
    char *after;          /* SCAN: the page's cursor (NULL: "") */
    uint32_t page_bytes;  /* SCAN: the page bound (0: one answer) */
    int segment_only;     /* SCAN: no cold file */
    uint64_t deep_bytes;  /* SCAN deep: a page's reading (0: the node's default) */
    int deep;             /* SCAN: hash the cold files' data too */
    int remove_stale_tmp; /* SCAN: delete the stale temporary files (fsck --repair) */
    master_task_cb cb;
    void *arg;
    struct master_task *next;
} master_task;

/* The check of a kept segment's memory replicas after a registration: a
 * walk of the node's complete memory replicas in key order, sent to the
 * node as VERIFY tasks VERIFY_WINDOW at a time, the next ones as answers
 * come in. The queue holds where the walk is, not the replicas: at a
 * million replicas, noting each at the registration took some 160 MB of
 * the master's memory, and tasks made all at once 190 MB more and put
 * every later task of the node (a persist, a scrub) behind a million
 * checks. A replica put on the node after the registration is met by the
 * walk as well and checked like the others. Dropped (gen moves) when the
 * node goes down or registers again; that registration starts its own. */
#define VERIFY_WINDOW 1024
typedef struct verify_ctx verify_ctx;
typedef struct verify_queue {
    char *after;      /* the walk goes on after this key (NULL: from the first) */
    int walking;      /* the walk may meet replicas still */
    int active;       /* a walk runs or waits for answers: its outcome is said */
    size_t met;       /* replicas the walk met: sent, or not checkable */
    size_t inflight;  /* sent, not yet answered */
    size_t lost;      /* answered: the bytes were not the replica's */
    size_t unchecked; /* not sent, or the task failed: served unchecked */
    uint64_t gen;     /* moves whenever the queue is dropped or replaced */
} verify_queue;

struct master_node {
    char *id;
    char *data_addr;
    char *segment_path;
    char *tenant;                /* dedicated to it; "" shared (node_local.h) */
    char *local_socket;          /* dedicated: where the node hands out its segment */
    ticket_secret secret;
    uint32_t key_id;             /* the id of secret, named in every ticket */
    int data_tls;                /* its data server speaks TLS only */
    char *cold_dir;              /* as it registered ("" none) */
    master_cold_usage cold;      /* its cold tier, as it last reported it */
    int up;
    uint64_t registrations;      /* registrations received: the newest one wins */
    uint64_t last_seen_ms;       /* its last request */
    uint64_t answered_ms;        /* the master's answer to its last poll */
    uint64_t sweep_due_ms;       /* the second sweep after a registration (0: none) */
    smp_rpc_call *poll;          /* a deferred poll, or NULL */
    uint64_t poll_since_ms;
    master_task *queue;          /* to send, in order */
    master_task *queue_tail;
    master_task *inflight;       /* sent, awaiting a result */
    verify_queue verify;         /* its kept segment's replicas still to check */
    UT_hash_handle hh;
};

static int ids_has(const master_node_ids *s, const char *node)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->ids[i], node) == 0) return 1;
    return 0;
}

/* Add node to s (once). Without memory it is not added: the caller's rule
 * then holds at a later round, or never. */
static void ids_add(master_node_ids *s, const char *node)
{
    if (ids_has(s, node)) return;
    char **v = realloc(s->ids, (s->n + 1) * sizeof(*v));
    if (v == NULL) return;
    s->ids = v;
    if ((v[s->n] = strdup(node)) != NULL) s->n++;
}

static void ids_clear(master_node_ids *s)
{
    for (size_t i = 0; i < s->n; i++) free(s->ids[i]);
    free(s->ids);
    s->ids = NULL;
    s->n = 0;
}

master_node *master_node_find(const master *m, const char *id)
{
    master_node *n = NULL;
    if (id) HASH_FIND_STR(m->nodes, id, n);
    return n;
}

/* Mark n up or down. What a plugin's object_get counts as readable depends
 * on it, so a change moves the objects' readable version (and going down
 * their loss version). */
static void node_set_up(master *m, master_node *n, int up)
{
    if (n->up == up) return;
    n->up = up;
    obj_readable_changed(master_objs(m), !up);
}

int master_node_readable(const master *m, const char *id)
{
    const master_node *n = master_node_find(m, id);
    return n != NULL && n->up;
}

const char *master_node_data_addr(const master *m, const char *id)
{
    const master_node *n = master_node_find(m, id);
    return n && n->data_addr ? n->data_addr : "";
}

int master_node_data_tls(const master *m, const char *id)
{
    const master_node *n = master_node_find(m, id);
    return n != NULL && n->data_tls;
}

int master_node_place_ok(void *ctx, const char *node, const char *tenant)
{
    const master *m = ctx;
    const master_node *n = master_node_find(m, node);
    /* a node not heard from since this start: while it is waited for, a
     * reservation placed there fails its task unless it comes (it may come
     * any moment); a put start, whose ticket it could not have, is placed
     * on a registered node or waits (master_node_wait.c); once the nodes
     * settled without it, it is down and takes nothing */
    if (n == NULL) return !m->nodes_settled && !m->placing_put;
    /* one that went down takes nothing until it registers again: its
     * segment, emptier than the rest, would take every put and fail it */
    if (!n->up) return 0;
    if (n->tenant == NULL || n->tenant[0] == '\0') return 1;
    return tenant != NULL && strcmp(n->tenant, tenant) == 0;
}

size_t master_nodes_down(const master *m)
{
    size_t k = 0;
    for (const master_node *n = m->nodes; n != NULL; n = n->hh.next) k += !n->up;
    return k;
}

size_t master_nodes_closed_to(const master *m, const char *tenant)
{
    size_t k = 0;
    for (const master_node *n = m->nodes; n != NULL; n = n->hh.next)
        k += n->tenant != NULL && n->tenant[0] != '\0' &&
             (tenant == NULL || strcmp(n->tenant, tenant) != 0);
    return k;
}

void master_node_locate(const master *m, const char *id, const char *tenant, int auth_enabled,
                        struct ReplicaLocation *loc)
{
    const master_node *n = master_node_find(m, id);
    loc->segment_path = (char *)"";
    loc->local_socket = (char *)"";
    if (n == NULL) return;
    if (n->tenant != NULL && n->tenant[0] != '\0') {
        if (tenant != NULL && strcmp(n->tenant, tenant) == 0 && n->local_socket != NULL)
            loc->local_socket = n->local_socket;
    } else if (!auth_enabled && n->segment_path != NULL) {
        loc->segment_path = n->segment_path;
    }
}

size_t master_nodes_open_up(const master *m, const char *tenant)
{
    size_t k = 0;
    for (const master_node *n = m->nodes; n != NULL; n = n->hh.next)
        k += n->up && (n->tenant == NULL || n->tenant[0] == '\0' ||
                       (tenant != NULL && strcmp(n->tenant, tenant) == 0));
    return k;
}

void master_nodes_each(const master *m, master_node_visit_fn fn, void *arg)
{
    for (const master_node *n = m->nodes; n != NULL; n = n->hh.next)
        fn(arg, n->id, n->up, n->cold_dir ? n->cold_dir : "", &n->cold);
}

size_t master_nodes_up(const master *m)
{
    size_t k = 0;
    for (const master_node *n = m->nodes; n != NULL; n = n->hh.next) k += n->up != 0;
    return k;
}

/* Copy src (NULL: "") into dst[cap] as snprintf's "%s" would (cut to
 * cap - 1 bytes), without its format parsing: three of these are on every
 * put start's path. */
static void claim_copy(char *dst, size_t cap, const char *src)
{
    size_t n = src != NULL ? strnlen(src, cap - 1) : 0;
    if (n > 0) memcpy(dst, src, n);
    dst[n] = '\0';
}

int master_mint_ticket(const master *m,
                       const master_ticket_req *t,
                       uint8_t *out,
                       size_t cap,
                       size_t *len)
{
    const master_node *n = master_node_find(m, t->node);
    if (n == NULL || !n->up) return SMP_EAGAIN;
    ticket_claims c = {.op = t->op, .offset = t->offset, .length = t->length,
                       .key_id = n->key_id,
                       .expiry_ms = ticket_now_ms() + m->cfg->node_ticket_ttl_ms};
    claim_copy(c.segment, sizeof(c.segment), t->segment);
    claim_copy(c.key, sizeof(c.key), t->key);
    claim_copy(c.tenant, sizeof(c.tenant), t->tenant);
    return ticket_mint(&n->secret, &c, out, cap, len);
}

/* -- tasks ------------------------------------------------------------------ */

static void task_free(master_task *t)
{
    free(t->key);
    free(t->cold_name);
    free(t->ranges);
    free(t->after);
    free(t);
}

static void task_finish(master *m, master_task *t, int status, const struct TaskResult *res)
{
    if (t->cb) t->cb(m, t->arg, status, res);
    task_free(t);
}

/* Fail every queued and in-flight task of n (node gone or restarted). */
static void fail_tasks(master *m, master_node *n, int inflight_only)
{
    master_task *t = n->inflight;
    n->inflight = NULL;
    while (t) {
        master_task *next = t->next;
        task_finish(m, t, SMP_EIO, NULL);
        t = next;
    }
    if (inflight_only) return;
    t = n->queue;
    n->queue = n->queue_tail = NULL;
    while (t) {
        master_task *next = t->next;
        task_finish(m, t, SMP_EIO, NULL);
        t = next;
    }
}

static void answer_poll(master *m, master_node *n);

/* Answer every node's deferred poll now, with the tasks queued for it (or
 * none): a master that drains (master_drain.c) does not wait out their
 * poll_ms, and refuses the nodes' next polls. */
void master_nodes_answer_polls(master *m)
{
    for (master_node *n = m->nodes; n != NULL; n = n->hh.next)
        if (n->poll != NULL) answer_poll(m, n);
}

int master_node_task(master *m,
                     const char *node_id,
                     int kind,
                     const char *key,
                     uint64_t offset,
                     uint64_t length,
                     const uint8_t sha256[32],
                     const char *cold_name,
                     master_task_cb cb,
                     void *arg)
{
    return master_node_task_ranges(m, node_id, kind, key, offset, length, sha256, cold_name, NULL,
                                   0, cb, arg);
}

/* Queue a task (scan: a SCAN page's fields, else NULL) for node_id and
 * answer its waiting poll. SMP_OK, SMP_EAGAIN (not up), SMP_ENOMEM. */
static int queue_task(master *m,
                      const char *node_id,
                      int kind,
                      const char *key,
                      uint64_t offset,
                      uint64_t length,
                      const uint8_t sha256[32],
                      const char *cold_name,
                      const uint64_t *ranges,
                      size_t n_ranges,
                      const master_scan_page *scan,
                      master_task_cb cb,
                      void *arg)
{
    master_node *n = master_node_find(m, node_id);
    if (n == NULL || !n->up) return SMP_EAGAIN;
    /* ranges freed before this task are zeroed before it runs */
    if (kind != TASK_KIND__TASK_SCRUB) master_scrub_flush_node(m, node_id);
    master_task *t = calloc(1, sizeof(*t));
    if (t == NULL) return SMP_ENOMEM;
    t->id = ++m->next_task_id;
    t->kind = (TaskKind)kind;
    t->key = strdup(key ? key : "");
    t->cold_name = strdup(cold_name ? cold_name : "");
    if (t->key == NULL || t->cold_name == NULL) {
        task_free(t);
        return SMP_ENOMEM;
    }
    t->offset = offset;
    t->length = length;
    if (sha256) memcpy(t->sha256, sha256, 32);
    t->cb = cb;
    t->arg = arg;
    if (ranges != NULL && n_ranges > 0) {
        if ((t->ranges = malloc(n_ranges * 2 * sizeof(uint64_t))) == NULL) {
            task_free(t);
            return SMP_ENOMEM;
        }
        memcpy(t->ranges, ranges, n_ranges * 2 * sizeof(uint64_t));
        t->n_ranges = n_ranges;
    }
    if (scan != NULL) {
        if ((t->after = strdup(scan->after ? scan->after : "")) == NULL) {
            task_free(t);
            return SMP_ENOMEM;
        }
        t->page_bytes = scan->page_bytes;
        t->segment_only = scan->segment_only;
        t->deep = scan->deep;
        t->deep_bytes = scan->deep_bytes;
        t->remove_stale_tmp = scan->remove_stale_tmp;
    }
    if (n->queue_tail) n->queue_tail->next = t;
    else n->queue = t;
    n->queue_tail = t;
    if (n->poll) answer_poll(m, n);
    return SMP_OK;
}

int master_node_task_ranges(master *m,
                            const char *node_id,
                            int kind,
                            const char *key,
                            uint64_t offset,
                            uint64_t length,
                            const uint8_t sha256[32],
                            const char *cold_name,
                            const uint64_t *ranges,
                            size_t n_ranges,
                            master_task_cb cb,
                            void *arg)
{
    return queue_task(m, node_id, kind, key, offset, length, sha256, cold_name, ranges, n_ranges,
                      NULL, cb, arg);
}

int master_node_task_scan(master *m,
                          const char *node_id,
                          const master_scan_page *p,
                          master_task_cb cb,
                          void *arg)
{
    return queue_task(m, node_id, TASK_KIND__TASK_SCAN, "", 0, 0, NULL, NULL, p->ranges,
                      p->n_ranges, p, cb, arg);
}

/* Send the queued tasks (or nothing) as the answer to the deferred poll. */
static void answer_poll(master *m, master_node *n)
{
    NodeTask msgs[NODE_TASKS_PER_POLL];
    NodeTask *ptrs[NODE_TASKS_PER_POLL];
    SegmentRange *rmsgs[NODE_TASKS_PER_POLL] = {NULL};
    SegmentRange **rptrs[NODE_TASKS_PER_POLL] = {NULL};
    size_t k = 0;
    smp_rpc_call *call = n->poll;
    n->poll = NULL;
    n->answered_ms = master_now_ms();
    (void)m;
    for (master_task *t = n->queue; t && k < NODE_TASKS_PER_POLL; t = t->next, k++) {
        node_task__init(&msgs[k]);
        msgs[k].id = t->id;
        msgs[k].kind = t->kind;
        msgs[k].key = t->key;
        msgs[k].offset = t->offset;
        msgs[k].length = t->length;
        msgs[k].sha256.data = t->sha256;
        msgs[k].sha256.len = 32;
        msgs[k].cold_name = t->cold_name;
        if (t->after != NULL) msgs[k].after = t->after;
        msgs[k].page_bytes = t->page_bytes;
        msgs[k].segment_only = t->segment_only;
        msgs[k].deep = t->deep;
        msgs[k].deep_bytes = t->deep_bytes;
        msgs[k].remove_stale_tmp = t->remove_stale_tmp;
        if (t->n_ranges > 0) {
            rmsgs[k] = calloc(t->n_ranges, sizeof(SegmentRange));
            rptrs[k] = calloc(t->n_ranges, sizeof(SegmentRange *));
            for (size_t i = 0; rmsgs[k] && rptrs[k] && i < t->n_ranges; i++) {
                segment_range__init(&rmsgs[k][i]);
                rmsgs[k][i].offset = t->ranges[2 * i];
                rmsgs[k][i].length = t->ranges[2 * i + 1];
                rptrs[k][i] = &rmsgs[k][i];
            }
            /* without memory the node answers with an empty scan or scrub */
            msgs[k].n_ranges = rmsgs[k] && rptrs[k] ? t->n_ranges : 0;
            msgs[k].ranges = rptrs[k];
        }
        ptrs[k] = &msgs[k];
    }
    NodePollResponse resp = NODE_POLL_RESPONSE__INIT;
    resp.n_tasks = k;
    resp.tasks = ptrs;
    resp.ticket_key_id = n->key_id;
    master_reply_msg(call, &resp.base);
    for (size_t i = 0; i < k; i++) {
        free(rmsgs[i]);
        free(rptrs[i]);
    }
    /* Move what was sent to in-flight. */
    for (size_t i = 0; i < k; i++) {
        master_task *t = n->queue;
        n->queue = t->next;
        t->next = n->inflight;
        n->inflight = t;
    }
    if (n->queue == NULL) n->queue_tail = NULL;
}

/* -- replica loss ------------------------------------------------------------ */

typedef struct lost_ctx {
    char *key;
    smp_replica_kind kind;
    master_commit_cb done;
    void *arg;
} lost_ctx;

static void on_replicas_dropped(master *m, void *arg, int status, uint64_t seq)
{
    lost_ctx *c = arg;
    (void)seq;
    if (status == SMP_OK) {
        smp_object_info info = {.struct_size = sizeof(info)};
        const char *group = obj_object_info(master_objs(m), c->key, &info) == SMP_OK ? info.group : "";
        smp_event ev = {.struct_size = sizeof(ev), .type = SMP_EVENT_REPLICA_LOST, .key = c->key,
                        .group = group, .replica_kind = c->kind};
        master_emit(m, &ev);
    }
    if (c->done) c->done(m, c->arg, status, seq);
    free(c->key);
    free(c);
}

/* Durably drop from key every replica matching (node, kind[, segment offset
 * or cold path]), tell the plugins, then call done (may be NULL). */
int master_drop_replica(master *m, const char *key, const obj_replica *lost,
                        master_commit_cb done, void *arg)
{
    obj_replica reps[16];
    size_t n = 0, kept = 0;
    obj_record rec = {0};
    int rc = obj_object_replicas(master_objs(m), key, reps, 16, &n);
    if (rc < 0) return rc;
    if (n > 16) n = 16;
    for (size_t i = 0; i < n; i++) {
        int same = reps[i].kind == lost->kind && strcmp(reps[i].node, lost->node) == 0 &&
                   (reps[i].kind == SMP_REPLICA_MEMORY
                        ? reps[i].offset == lost->offset && strcmp(reps[i].segment, lost->segment) == 0
                        : strcmp(reps[i].path, lost->path) == 0);
        if (!same) reps[kept++] = reps[i];
    }
    if (kept == n) return SMP_ENOTFOUND; /* nothing to drop */
    if ((rc = obj_prepare_set_replicas(master_objs(m), key, reps, kept, &rec)) < 0) return rc;
    lost_ctx *c = calloc(1, sizeof(*c));
    if (c == NULL || (c->key = strdup(key)) == NULL) {
        free(c);
        obj_record_free(&rec);
        return SMP_ENOMEM;
    }
    c->kind = lost->kind;
    c->done = done;
    c->arg = arg;
    if ((rc = master_commit(m, &rec, NULL, on_replicas_dropped, c)) < 0) {
        free(c->key);
        free(c);
    }
    return rc;
}

/* -- registration ------------------------------------------------------------- */

struct verify_ctx {
    char *key;
    obj_replica rep;
    char *node, *segment;
    uint8_t sha[32];
    uint64_t size;
    uint64_t gen;     /* the node's verify_queue.gen when it was sent */
};

typedef struct reconcile_ctx {
    master *m;
    master_node *node;
    const NodeRegisterRequest *req;
    InventoryFile **by_name;   /* the node's cold files sorted by name; NULL: unsorted */
    size_t n_lost;
    char **lost_keys;
    obj_replica *lost;
} reconcile_ctx;

static int cmp_file_name(const void *a, const void *b)
{
    return strcmp((*(InventoryFile *const *)a)->name, (*(InventoryFile *const *)b)->name);
}

/* 1 when the node's inventory holds the cold file path of key with sha: a
 * binary search by name (a node registers with every file it has, tens of
 * thousands at scale, each looked up once per cold replica), or a scan when
 * the sorted copy could not be made. */
static int has_cold_file(const reconcile_ctx *c, const char *key, const char *path,
                         const uint8_t *sha)
{
    const InventoryFile *f = NULL;
    if (c->by_name != NULL) {
        InventoryFile probe = {.name = (char *)path}, *pp = &probe;
        InventoryFile **hit = bsearch(&pp, c->by_name, c->req->n_cold_files, sizeof(*c->by_name),
                                      cmp_file_name);
        f = hit != NULL ? *hit : NULL;
    } else {
        for (size_t i = 0; i < c->req->n_cold_files && f == NULL; i++)
            if (strcmp(c->req->cold_files[i]->name, path) == 0) f = c->req->cold_files[i];
    }
    return f != NULL && strcmp(f->key, key) == 0 && f->sha256.len == 32 &&
           memcmp(f->sha256.data, sha, 32) == 0;
}

static void verify_free(verify_ctx *v)
{
    free(v->key);
    free(v->node);
    free(v->segment);
    free(v);
}

/* End n's walk and start none (gen moves: the answers of what it sent are
 * no longer counted). */
static void verify_queue_drop(master_node *n)
{
    verify_queue *q = &n->verify;
    free(q->after);
    uint64_t gen = q->gen + 1;
    memset(q, 0, sizeof(*q));
    q->gen = gen;
}

/* One step of a verify walk: the replicas it collects to send. */
typedef struct verify_step {
    master *m;
    size_t want;     /* replicas to collect (an object is never split) */
    verify_ctx **v;
    size_t n, cap;
    size_t unchecked; /* met, but no context could be made: served unchecked */
    const char *last; /* the key of the last replica met (the store's) */
    int stopped;      /* the visit stopped before the last object */
} verify_step;

/* A VERIFY context of key's replica rep, or NULL (out of memory). */
static verify_ctx *verify_new(const char *key, const obj_replica *rep, const smp_object_info *info)
{
    verify_ctx *v = calloc(1, sizeof(*v));
    if (v == NULL) return NULL;
    v->key = strdup(key);
    v->node = strdup(rep->node);
    v->segment = strdup(rep->segment ? rep->segment : "");
    v->rep = *rep;
    v->rep.node = v->node;
    v->rep.segment = v->segment;
    v->rep.path = NULL;
    memcpy(v->sha, info->checksum, 32);
    v->size = info->size;
    if (!v->key || !v->node || !v->segment) {
        verify_free(v);
        return NULL;
    }
    return v;
}

static int collect_verify(void *arg, const char *key, const obj_replica *rep)
{
    verify_step *w = arg;
    if (rep->kind != SMP_REPLICA_MEMORY || rep->status != OBJ_REPLICA_COMPLETE) return 0;
    if (w->n + w->unchecked >= w->want && strcmp(w->last, key) != 0) {
        w->stopped = 1; /* the next step starts at this object */
        return 1;
    }
    w->last = key;
    smp_object_info info = {.struct_size = sizeof(info)};
    verify_ctx *v = NULL;
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        verify_ctx **vv = realloc(w->v, cap * sizeof(*vv));
        if (vv != NULL) {
            w->v = vv;
            w->cap = cap;
        }
    }
    if (w->n < w->cap && obj_object_info(master_objs(w->m), key, &info) == SMP_OK)
        v = verify_new(key, rep, &info);
    if (v == NULL) w->unchecked++;
    else w->v[w->n++] = v;
    return 0;
}

static void on_verified(master *m, void *arg, int status, const TaskResult *res);

/* Once no more than half of VERIFY_WINDOW are out, walk n's replicas on
 * from where the walk stopped and send their VERIFY tasks until
 * VERIFY_WINDOW are out (a step seeks its cursor in the key order: half a
 * window a step, not one per answer); once the walk is over and the last is
 * answered, say how it went. */
static void verify_pump(master *m, master_node *n)
{
    verify_queue *q = &n->verify;
    int refill = q->inflight <= VERIFY_WINDOW / 2;
    while (refill && q->walking && q->inflight < VERIFY_WINDOW) {
        verify_step w = {.m = m, .want = VERIFY_WINDOW - q->inflight};
        obj_visit_replicas_after(master_objs(m), n->id, q->after, collect_verify, &w);
        char *after = w.last != NULL ? strdup(w.last) : NULL;
        if (w.last != NULL && after == NULL) {
            /* Nowhere to go on from: what is left is served unchecked, as a
             * replica whose context could not be made. */
            fprintf(stderr, "store_master: node %s: out of memory: the check of its kept "
                    "segment's replicas ends after %zu\n", n->id, q->met + w.n + w.unchecked);
            w.stopped = 0;
        } else if (after != NULL) {
            free(q->after);
            q->after = after;
        }
        q->walking = w.stopped;
        q->met += w.n + w.unchecked;
        q->unchecked += w.unchecked;
        for (size_t i = 0; i < w.n; i++) {
            verify_ctx *v = w.v[i];
            v->gen = q->gen;
            if (master_node_task(m, n->id, TASK_KIND__TASK_VERIFY, v->key, v->rep.offset, v->size,
                                 v->sha, NULL, on_verified, v) < 0) {
                verify_free(v); /* served unchecked, as when it could not be noted */
                q->unchecked++;
                continue;
            }
            q->inflight++;
        }
        free(w.v);
    }
    if (q->active && !q->walking && q->inflight == 0) {
        fprintf(stderr, "store_master: node %s: %zu memory replicas of its kept segment checked: "
                "%zu held their bytes, %zu did not, %zu could not be checked\n", n->id, q->met,
                q->met - q->lost - q->unchecked, q->lost, q->unchecked);
        verify_queue_drop(n);
    }
}

static void on_verified(master *m, void *arg, int status, const TaskResult *res)
{
    verify_ctx *v = arg;
    int lost = status == SMP_OK && (res == NULL || res->status != 0 || res->sha256.len != 32 ||
                                    memcmp(res->sha256.data, v->sha, 32) != 0);
    if (lost) {
        fprintf(stderr, "store_master: node %s: memory replica of %s does not hold its bytes\n",
                v->node, v->key);
        master_drop_replica(m, v->key, &v->rep, NULL, NULL);
    }
    master_node *n = master_node_find(m, v->node);
    int counted = n != NULL && n->verify.gen == v->gen && n->verify.inflight > 0;
    verify_free(v);
    if (!counted) return; /* its queue was dropped meanwhile */
    n->verify.inflight--;
    n->verify.lost += lost;
    n->verify.unchecked += status != SMP_OK;
    verify_pump(m, n);
}

static int visit_node_replica(void *arg, const char *key, const obj_replica *rep)
{
    reconcile_ctx *c = arg;
    int lost;
    if (rep->kind == SMP_REPLICA_COLD) {
        smp_object_info info = {.struct_size = sizeof(info)};
        if (obj_object_info(master_objs(c->m), key, &info) < 0) return 0;
        lost = rep->status == OBJ_REPLICA_COMPLETE &&
               !has_cold_file(c, key, rep->path, info.checksum);
    } else {
        /* Gone with its segment; on a kept one, a complete replica is
         * checked by a VERIFY task once the node is up
         * (reconcile_verify_and_reclaim). */
        lost = !c->req->segment_survived;
    }
    if (!lost) return 0;
    obj_replica *l = realloc(c->lost, (c->n_lost + 1) * sizeof(*l));
    char **keys = realloc(c->lost_keys, (c->n_lost + 1) * sizeof(*keys));
    if (l) c->lost = l;
    if (keys) c->lost_keys = keys;
    if (!l || !keys) return 1;
    c->lost_keys[c->n_lost] = strdup(key);
    obj_replica r = *rep;
    r.node = strdup(rep->node ? rep->node : "");
    r.segment = rep->segment ? strdup(rep->segment) : NULL;
    r.path = rep->path ? strdup(rep->path) : NULL;
    c->lost[c->n_lost++] = r;
    return 0;
}

typedef struct register_ctx {
    smp_rpc_call *call;
    NodeRegisterRequest *req;
    master_inventory *inv;      /* the pages req->cold_files borrows, or NULL */
    uint64_t registration;      /* the node's registrations when this one came */
    size_t drops_pending;       /* drops not yet durable, +1 while they are issued */
} register_ctx;

static void complete_register(master *m, register_ctx *r);

/* A drop of the registration's reconcile is durable (or failed: the
 * replica then stays listed, as the verify of a memory replica that fails
 * to drop does): once the last one is, the node comes up. */
static void on_register_drop(master *m, void *arg, int status, uint64_t seq)
{
    register_ctx *r = arg;
    (void)seq;
    if (status < 0)
        fprintf(stderr, "store_master: node %s: a lost replica could not be dropped: %s\n",
                r->req->node_id, smp_strerror(status));
    if (--r->drops_pending == 0) complete_register(m, r);
}

/* Compare what the master persisted about node with its inventory: drop
 * every replica the node no longer holds (each drop a durable record and a
 * replica-lost event, r's drops_pending counting them) and note in r the
 * memory replicas to verify. The node stays down meanwhile: a client is
 * never sent to a replica the node is known to lack. */
static void reconcile(master *m, master_node *node, register_ctx *r)
{
    const NodeRegisterRequest *req = r->req;
    reconcile_ctx c = {m, node, req, NULL, 0, NULL, NULL};
    if (req->n_cold_files > 0 &&
        (c.by_name = malloc(req->n_cold_files * sizeof(*c.by_name))) != NULL) {
        memcpy(c.by_name, req->cold_files, req->n_cold_files * sizeof(*c.by_name));
        qsort(c.by_name, req->n_cold_files, sizeof(*c.by_name), cmp_file_name);
    }
    obj_visit_replicas(master_objs(m), node->id, visit_node_replica, &c);
    free(c.by_name);
    for (size_t i = 0; i < c.n_lost; i++) {
        if (c.lost_keys[i]) {
            fprintf(stderr, "store_master: node %s: %s replica of %s is gone\n", node->id,
                    c.lost[i].kind == SMP_REPLICA_COLD ? "cold" : "memory", c.lost_keys[i]);
            r->drops_pending++;
            if (master_drop_replica(m, c.lost_keys[i], &c.lost[i], on_register_drop, r) < 0)
                r->drops_pending--;
        }
        free(c.lost_keys[i]);
        free((char *)c.lost[i].node);
        free((char *)c.lost[i].segment);
        free((char *)c.lost[i].path);
    }
    free(c.lost_keys);
    free(c.lost);
}

/* The node is up: VERIFY the complete memory replicas of a kept segment
 * (verify_pump's walk), and delete the files of its inventory no replica
 * names -- their replica was dropped while the node was away, or the master
 * stopped between the record and the unlink. */
static void reconcile_verify_and_reclaim(master *m, master_node *node, register_ctx *r)
{
    const NodeRegisterRequest *req = r->req;
    verify_queue_drop(node);
    node->verify.walking = node->verify.active = req->segment_survived;
    verify_pump(m, node);
    const char **keys = calloc(req->n_cold_files + 1, sizeof(*keys));
    const char **names = calloc(req->n_cold_files + 1, sizeof(*names));
    uint64_t *lengths = calloc(req->n_cold_files + 1, sizeof(*lengths));
    if (keys != NULL && names != NULL && lengths != NULL) {
        for (size_t i = 0; i < req->n_cold_files; i++) {
            keys[i] = req->cold_files[i]->key;
            names[i] = req->cold_files[i]->name;
            lengths[i] = req->cold_files[i]->length;
        }
        master_reclaim_inventory(m, node->id, keys, names, lengths, req->n_cold_files);
    }
    free(keys);
    free(names);
    free(lengths);
}

/* Free a registration request and the paged inventory it borrows. */
static void request_free(NodeRegisterRequest *req, master_inventory *inv)
{
    if (inv != NULL) {
        req->cold_files = NULL;
        req->n_cold_files = 0;
        master_inventory_free(inv);
    }
    node_register_request__free_unpacked(req, NULL);
}

static void register_free(register_ctx *r)
{
    request_free(r->req, r->inv);
    free(r);
}

/* The segment is durable: reconcile, and bring the node up once the drops
 * that found are durable too (at once when there are none). */
static void finish_register(master *m, void *arg, int status, uint64_t seq)
{
    register_ctx *r = arg;
    (void)seq;
    master_node *n = master_node_find(m, r->req->node_id);
    if (status < 0 || n == NULL) {
        rpc_reply_error(r->call, status < 0 ? status : SMP_ENOTFOUND,
                        "node register: the segment could not be mounted durably");
        register_free(r);
        return;
    }
    r->drops_pending = 1; /* held while the drops are issued */
    reconcile(m, n, r);
    if (--r->drops_pending == 0) complete_register(m, r);
}

/* Every drop of the registration is durable: the node is up, answered, and
 * its kept segment swept. A registration overtaken by a newer one of the
 * same node (it restarted again meanwhile) is refused instead. */
static void complete_register(master *m, register_ctx *r)
{
    master_node *n = master_node_find(m, r->req->node_id);
    if (n == NULL || n->registrations != r->registration) {
        fprintf(stderr, "store_master: node %s: registration refused: %s\n", r->req->node_id,
                n == NULL ? "the master forgot the node meanwhile"
                          : "a newer one came while its drops were made durable");
        rpc_reply_error(r->call, SMP_ESTATE,
                        n == NULL ? "node register: the master forgot the node meanwhile"
                                  : "node register: a newer registration of this node came "
                                    "meanwhile");
        register_free(r);
        return;
    }
    node_set_up(m, n, 1);
    n->last_seen_ms = master_now_ms();
    master_node_wait_wake(m); /* lookups and puts waiting for a node */
    reconcile_verify_and_reclaim(m, n, r);
    smp_event ev = {.struct_size = sizeof(ev), .type = SMP_EVENT_NODE_UP, .node = n->id};
    master_emit(m, &ev);
    size_t pages = 0;
    if (r->inv != NULL) (void)master_inventory_files(r->inv, NULL, &pages);
    char paged[48] = "";
    if (pages > 0) snprintf(paged, sizeof(paged), " in %zu pages", pages);
    if (n->tenant[0] != '\0')
        fprintf(stderr, "store_master: node %s up (data %s, segment %s, %zu cold files%s, "
                "dedicated to tenant %s, local socket %s)\n", n->id, n->data_addr,
                n->segment_path, r->req->n_cold_files, paged, n->tenant, n->local_socket);
    else
        fprintf(stderr, "store_master: node %s up (data %s, segment %s, %zu cold files%s)\n",
                n->id, n->data_addr, n->segment_path, r->req->n_cold_files, paged);
    NodeRegisterResponse resp = NODE_REGISTER_RESPONSE__INIT;
    resp.poll_ms = m->cfg->node_poll_ms;
    resp.ticket_ttl_ms = m->cfg->node_ticket_ttl_ms;
    master_reply_msg(r->call, &resp.base);
    /* A kept segment may hold bytes nothing owns: puts the master lost when
     * it stopped, or freed ranges whose zeroing the node's stop cut off. A
     * client that was writing into a put the old master (or the old segment
     * file: it maps the path again) gave out may still be copying, also
     * into a new file: a second sweep, MASTER_RESWEEP_MS later, takes what
     * it left (anything later still waits for `weightctl fsck --repair`). A
     * new file holds nothing yet: only the second sweep is worth its scan. */
    if (r->req->segment_survived && master_fsck_sweep_node(m, n->id) < 0)
        fprintf(stderr, "store_master: node %s: no sweep of its segment (out of memory)\n", n->id);
    n->sweep_due_ms = master_now_ms() + MASTER_RESWEEP_MS;
    register_free(r);
}

/* Take node n's report u (registration: the first since it started, or
 * since a restart of the master) and log what an operator should read. */
static void cold_usage_take(master_node *n, const ColdTierUsage *u, int registration)
{
    master_cold_usage before = n->cold;
    char line[320];
    if (registration) before.reported = 0; /* a fresh start: only a full tier is said */
    master_cold_usage_take(&n->cold, u);
    if (master_cold_usage_change(&before, &n->cold, line, sizeof(line)))
        fprintf(stderr, "store_master: node %s: %s\n", n->id, line);
}

static int set_str(char **dst, const char *src)
{
    char *s = strdup(src);
    if (s == NULL) return SMP_ENOMEM;
    free(*dst);
    *dst = s;
    return SMP_OK;
}

static int h_register(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    char msg[1024];
    obj_record rec = {0};
    master_inventory *inv = NULL;
    int rc;
    NodeRegisterRequest *req = node_register_request__unpack(NULL, len, body);
    if (req == NULL) return rpc_reply_error(call, SMP_EPROTO, "body does not decode as NodeRegisterRequest");
    if (req->node_id[0] == '\0' || strcmp(req->node_id, req->segment_id) != 0 ||
        req->ticket_secret.len < TICKET_SECRET_MIN || req->ticket_secret.len > TICKET_SECRET_MAX) {
        snprintf(msg, sizeof(msg), "node register: bad node id '%.64s', segment '%.64s' or secret",
                 req->node_id, req->segment_id);
        rc = SMP_EINVAL;
        goto refuse;
    }
    if (req->inventory_session != 0) {
        /* The inventory came before, in pages: they become the request's. */
        if (req->n_cold_files != 0) {
            snprintf(msg, sizeof(msg), "node register: node %.64s names inventory session "
                     "%016llx and carries %zu cold files too", req->node_id,
                     (unsigned long long)req->inventory_session, req->n_cold_files);
            rc = SMP_EINVAL;
            goto refuse;
        }
        if ((rc = master_inventory_take(m, req->node_id, req->inventory_session,
                                        req->inventory_files, &inv, msg, sizeof(msg))) < 0)
            goto refuse;
        req->cold_files = master_inventory_files(inv, &req->n_cold_files, NULL);
    }
    const char *foreign = obj_segment_foreign_key(master_objs(m), req->segment_id, req->tenant);
    if (req->tenant[0] != '\0' && (req->local_socket[0] == '\0' || foreign != NULL)) {
        if (foreign != NULL)
            snprintf(msg, sizeof(msg), "node register: node %.64s is dedicated to tenant %.64s but "
                     "its segment holds '%.256s' of another tenant: remove or migrate it first, "
                     "or start the node shared", req->node_id, req->tenant, foreign);
        else
            snprintf(msg, sizeof(msg), "node register: node %.64s is dedicated to tenant %.64s "
                     "but names no local socket", req->node_id, req->tenant);
        rc = SMP_EINVAL;
        goto refuse;
    }
    const char *owner = NULL;
    uint64_t have = 0;
    int known = obj_segment_info(master_objs(m), req->segment_id, &owner, &have) == SMP_OK;
    if (known && strcmp(owner, req->node_id) != 0) {
        snprintf(msg, sizeof(msg), "node register: segment %s belongs to node %s", req->segment_id, owner);
        rc = SMP_EEXIST;
        goto refuse;
    }
    uint64_t want = req->segment_bytes / OBJ_ALIGN * OBJ_ALIGN;
    rc = !known ? obj_prepare_segment_mount(master_objs(m), req->segment_id, req->node_id, want, &rec)
         : have != want ? obj_prepare_segment_update(master_objs(m), req->segment_id, want, &rec)
                        : SMP_OK;
    uint64_t tail = 0;
    if (rc == SMP_ERANGE && known && want < have &&
        obj_segment_tail_used(master_objs(m), req->segment_id, &tail) == SMP_OK) {
        snprintf(msg, sizeof(msg),
                 "node register: segment %s: node.segment_bytes %llu is below the bytes in use "
                 "(replicas occupy it up to byte %llu of %llu); shrinking would cut them: raise "
                 "node.segment_bytes to at least %llu, or delete revisions first",
                 req->segment_id, (unsigned long long)req->segment_bytes, (unsigned long long)tail,
                 (unsigned long long)have, (unsigned long long)tail);
        goto refuse;
    }
    if (rc < 0) {
        snprintf(msg, sizeof(msg), "node register: segment %s of %llu bytes (known: %llu): %s",
                 req->segment_id, (unsigned long long)want, (unsigned long long)have, smp_strerror(rc));
        goto refuse;
    }
    master_node *n = master_node_find(m, req->node_id);
    if (n == NULL) {
        n = calloc(1, sizeof(*n));
        if (n == NULL || (n->id = strdup(req->node_id)) == NULL) {
            free(n);
            rc = SMP_ENOMEM;
            snprintf(msg, sizeof(msg), "node register: out of memory");
            goto refuse;
        }
        HASH_ADD_KEYPTR(hh, m->nodes, n->id, strlen(n->id), n);
    }
    /* A word from it: a node not registered since the start is waited for
     * while its registration runs (master_nodes_settled). */
    n->last_seen_ms = master_now_ms();
    uint64_t registration = ++n->registrations; /* an older one still running loses */
    verify_queue_drop(n); /* this registration starts its own check once the node is up */
    /* A node that registers again restarted: what it had in flight is gone;
     * with a new segment file, so are the bytes of puts into the old one and
     * every queued task that would read or write the old file's ranges (a
     * persist would copy zeros, a verify or scrub would check the wrong
     * file): those fail too, and their owners retry against what exists. */
    if (n->poll) answer_poll(m, n);
    fail_tasks(m, n, req->segment_survived);
    if (!req->segment_survived) {
        int cancelled = obj_segment_cancel_puts(master_objs(m), req->segment_id);
        if (cancelled > 0)
            fprintf(stderr, "store_master: node %s: new segment file, %d put(s) into the old one "
                    "cancelled\n", req->node_id, cancelled);
    }
    if (set_str(&n->data_addr, req->data_addr) < 0 || set_str(&n->segment_path, req->segment_path) < 0 ||
        set_str(&n->tenant, req->tenant) < 0 || set_str(&n->local_socket, req->local_socket) < 0 ||
        set_str(&n->cold_dir, req->cold_dir) < 0) {
        rc = SMP_ENOMEM;
        snprintf(msg, sizeof(msg), "node register: out of memory");
        goto refuse;
    }
    ticket_secret_set(&n->secret, req->ticket_secret.data, req->ticket_secret.len);
    n->key_id = req->ticket_key_id ? req->ticket_key_id : 1;
    n->data_tls = req->data_tls;
    cold_usage_take(n, req->cold_usage, 1); /* none: a node from before the report */
    node_set_up(m, n, 0); /* up once the segment is durable and reconciled */
    register_ctx *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        rc = SMP_ENOMEM;
        snprintf(msg, sizeof(msg), "node register: out of memory");
        goto refuse;
    }
    r->call = call;
    r->req = req;
    r->inv = inv;
    r->registration = registration;
    if (rec.buf == NULL) {
        finish_register(m, r, SMP_OK, 0);
        return SMP_OK;
    }
    if ((rc = master_commit(m, &rec, NULL, finish_register, r)) < 0) {
        free(r);
        snprintf(msg, sizeof(msg), "node register: %s", smp_strerror(rc));
        goto refuse_no_record;
    }
    return SMP_OK;
refuse:
    obj_record_free(&rec);
refuse_no_record:
    /* Refused for what retrying does not change (its ids, tenant or segment
     * size) before it registered since the start: its pages and retries no
     * longer keep the master waiting for it (master_nodes_settled). An
     * inventory that must be sent again (SMP_ESTATE) or a lack of memory
     * is not such a refusal. */
    if ((rc == SMP_EINVAL || rc == SMP_EEXIST || rc == SMP_ERANGE) && !m->nodes_settled &&
        !master_node_readable(m, req->node_id))
        ids_add(&m->nodes_refused, req->node_id);
    request_free(req, inv);
    return rpc_reply_error(call, rc, msg);
}

/* -- polls ------------------------------------------------------------------ */

static void take_results(master *m, master_node *n, const NodePollRequest *req)
{
    for (size_t i = 0; i < req->n_results; i++) {
        const TaskResult *res = req->results[i];
        master_task **pp = &n->inflight;
        while (*pp && (*pp)->id != res->id) pp = &(*pp)->next;
        if (*pp == NULL) continue; /* failed already (the node was down) */
        master_task *t = *pp;
        *pp = t->next;
        task_finish(m, t, SMP_OK, res);
    }
}

static int h_poll(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    NodePollRequest *req = node_poll_request__unpack(NULL, len, body);
    if (req == NULL) return rpc_reply_error(call, SMP_EPROTO, "body does not decode as NodePollRequest");
    master_node *n = master_node_find(m, req->node_id);
    if (n == NULL || !n->up) {
        node_poll_request__free_unpacked(req, NULL);
        NodePollResponse resp = NODE_POLL_RESPONSE__INIT;
        resp.reregister = 1;
        master_reply_msg(call, &resp.base);
        return SMP_OK;
    }
    n->last_seen_ms = master_now_ms();
    if (req->ticket_key_id != 0 && req->ticket_key_id != n->key_id) {
        /* A rotated key: tickets minted from now on name it. The node holds
         * the one before as well, so tickets already out stay valid. */
        if (ticket_secret_set(&n->secret, req->ticket_secret.data, req->ticket_secret.len) == SMP_OK) {
            n->key_id = req->ticket_key_id;
            fprintf(stderr, "store_master: node %s: tickets are signed with its key %u from now on\n",
                    n->id, (unsigned)n->key_id);
        } else {
            fprintf(stderr, "store_master: node %s: a rotated ticket key of %zu bytes refused; "
                    "signing with key %u still\n", n->id, req->ticket_secret.len, (unsigned)n->key_id);
        }
    }
    if (n->poll) answer_poll(m, n); /* an older poll: superseded */
    /* A put whose bytes the node is still receiving is alive, however slow
     * its client: its range is not taken back while this goes on. */
    for (size_t i = 0; i < req->n_writing; i++)
        obj_put_touch(master_objs(m), req->writing[i]->key, req->writing[i]->segment,
                      req->writing[i]->offset, n->last_seen_ms);
    take_results(m, n, req);
    master_cold_corrupt(m, n->id, req->corrupt_cold, req->n_corrupt_cold);
    if (req->cold_usage != NULL) cold_usage_take(n, req->cold_usage, 0);
    int busy = req->busy;
    node_poll_request__free_unpacked(req, NULL);
    if (busy) {
        /* Still running the tasks of an earlier answer: it polled to be
         * heard. Answered at once and with no task (the queue waits for
         * its next poll). */
        NodePollResponse resp = NODE_POLL_RESPONSE__INIT;
        resp.ticket_key_id = n->key_id;
        n->answered_ms = master_now_ms();
        master_reply_msg(call, &resp.base);
        return SMP_OK;
    }
    n->poll = call;
    n->poll_since_ms = n->last_seen_ms;
    if (n->queue) answer_poll(m, n);
    return SMP_OK;
}

/* -- liveness ------------------------------------------------------------------ */

/* How long node n has been silent as far as the loop could hear it: from
 * its last request or the answer to its last poll, whichever is later, to
 * the time the loop last read its sockets (m->io_heard_ms). A stall of the
 * loop counts as silence only once the loop has read again and found
 * nothing from the node. */
static uint64_t node_silence_ms(const master *m, const master_node *n)
{
    uint64_t since = n->last_seen_ms > n->answered_ms ? n->last_seen_ms : n->answered_ms;
    return m->io_heard_ms > since ? m->io_heard_ms - since : 0;
}

typedef struct down_ctx {
    master *m;
} down_ctx;

static int emit_lost(void *arg, const char *key, const obj_replica *rep)
{
    down_ctx *c = arg;
    smp_object_info info = {.struct_size = sizeof(info)};
    const char *group = obj_object_info(master_objs(c->m), key, &info) == SMP_OK ? info.group : "";
    smp_event ev = {.struct_size = sizeof(ev), .type = SMP_EVENT_REPLICA_LOST, .key = key,
                    .group = group, .replica_kind = rep->kind};
    master_emit(c->m, &ev);
    return 0;
}

uint64_t master_node_wait_ends_ms(uint64_t serving_since_ms, uint64_t heard_ms,
                                  uint32_t timeout_ms)
{
    uint64_t from = heard_ms > serving_since_ms ? heard_ms : serving_since_ms;
    return from + timeout_ms;
}

/* When the master last heard from node, which has not registered since
 * serving began: its newest inventory page or registration request (0:
 * never). A registration in progress has its record already. */
static uint64_t node_heard_ms(const master *m, const char *node)
{
    const master_node *n = master_node_find(m, node);
    uint64_t page = master_inventory_heard_ms(m, node);
    return n != NULL && n->last_seen_ms > page ? n->last_seen_ms : page;
}

static void forget_given_up(master *m)
{
    ids_clear(&m->nodes_given_up);
    ids_clear(&m->nodes_refused);
}

/* A node holding a segment, silent since the start for node.timeout_ms:
 * down, as if it had stopped polling (node-down and replica-lost events; no
 * tasks to fail). Remembered, so that it is told once; without the memory
 * to remember it, it is told again at the next round. */
static void give_up(master *m, const char *node)
{
    ids_add(&m->nodes_given_up, node);
    fprintf(stderr, "store_master: node %s down (not heard from since the start)\n", node);
    smp_event ev = {.struct_size = sizeof(ev), .type = SMP_EVENT_NODE_DOWN, .node = node};
    master_emit(m, &ev);
    down_ctx c = {m};
    obj_visit_replicas(master_objs(m), node, emit_lost, &c);
}

typedef struct settle_walk {
    master *m;
    uint64_t heard_until; /* the I/O clock (node_silence_ms), at most now */
    int act;          /* give up the nodes whose wait ended */
    size_t waiting;   /* nodes still waited for */
    size_t seen;      /* nodes looked at (a segment's, the embedded one) */
} settle_walk;

/* The end of the wait for node, not up and not given up since serving
 * began. */
static uint64_t wait_ends(const master *m, const char *node)
{
    /* A node refused is not coming as it is: its pages do not count. */
    uint64_t heard = ids_has(&m->nodes_refused, node) ? 0 : node_heard_ms(m, node);
    return master_node_wait_ends_ms(m->serving_since_ms, heard, m->cfg->node_timeout_ms);
}

static int settle_segment(void *arg, const char *segment, const char *node)
{
    settle_walk *w = arg;
    (void)segment;
    w->seen++;
    if (master_node_readable(w->m, node) || ids_has(&w->m->nodes_given_up, node)) return 0;
    if (w->heard_until < wait_ends(w->m, node)) w->waiting++;
    else if (w->act) give_up(w->m, node);
    return 0;
}

/* The node embedded in this master (node.embedded, without HA) is awaited
 * as a node holding a segment is, even on the first start, when the state
 * knows no segment of it yet: it registers a few milliseconds after the
 * master serves, and a put that came first would otherwise be refused
 * "no node is up". Counted twice when it holds a segment: only whether any
 * is waited for counts, and a node is given up once. */
static void settle_embedded(settle_walk *w)
{
    if (w->m->cfg->node_embedded && !w->m->cfg->ha_enabled)
        settle_segment(w, NULL, w->m->cfg->node_id);
}

int master_node_awaited(const master *m, const char *node, uint64_t now)
{
    if (m->nodes_settled || node == NULL || master_node_readable(m, node) ||
        ids_has(&m->nodes_given_up, node))
        return 0;
    uint64_t heard_until = now < m->io_heard_ms ? now : m->io_heard_ms;
    return heard_until < wait_ends(m, node);
}

int master_nodes_waiting(master *m, uint64_t now)
{
    settle_walk w = {m, now < m->io_heard_ms ? now : m->io_heard_ms, 0, 0, 0};
    if (m->nodes_settled) return 0;
    obj_visit_segments(master_objs(m), settle_segment, &w);
    settle_embedded(&w);
    return w.waiting > 0;
}

int master_nodes_settled(master *m, uint64_t now)
{
    settle_walk w = {m, now < m->io_heard_ms ? now : m->io_heard_ms, 1, 0, 0};
    if (m->nodes_settled) return 1;
    obj_visit_segments(master_objs(m), settle_segment, &w);
    settle_embedded(&w);
    if (w.waiting > 0) return 0;
    if (w.seen == 0)
        fprintf(stderr, "store_master: no node holds a segment yet (none to wait for); "
                        "reconcile ticks start\n");
    else if (m->nodes_given_up.n == 0)
        fprintf(stderr, "store_master: every node holding a segment has registered; "
                        "reconcile ticks start\n");
    else
        fprintf(stderr, "store_master: node.timeout_ms passed; reconcile ticks start\n");
    forget_given_up(m);
    m->nodes_settled = 1;
    return 1;
}

void master_nodes_unsettle(master *m)
{
    forget_given_up(m);
    m->nodes_settled = 0;
    m->serving_since_ms = master_now_ms();
}

void master_nodes_tick(master *m, uint64_t now)
{
    master_inventory_expire(m, now);
    for (master_node *n = m->nodes; n != NULL; n = n->hh.next) {
        if (n->poll && now - n->poll_since_ms >= m->cfg->node_poll_ms) answer_poll(m, n);
        if (n->up && n->sweep_due_ms != 0 && now >= n->sweep_due_ms) {
            n->sweep_due_ms = 0;
            if (master_fsck_sweep_node(m, n->id) < 0)
                fprintf(stderr, "store_master: node %s: no second sweep (out of memory)\n", n->id);
        }
        uint64_t silent = node_silence_ms(m, n);
        if (n->up && silent > m->cfg->node_timeout_ms) {
            node_set_up(m, n, 0);
            fprintf(stderr, "store_master: node %s down (silent for %llu ms)\n", n->id,
                    (unsigned long long)silent);
            verify_queue_drop(n);
            fail_tasks(m, n, 0);
            smp_event ev = {.struct_size = sizeof(ev), .type = SMP_EVENT_NODE_DOWN, .node = n->id};
            master_emit(m, &ev);
            down_ctx c = {m};
            obj_visit_replicas(master_objs(m), n->id, emit_lost, &c);
        }
    }
}

void master_nodes_free(master *m)
{
    master_node *n, *tmp;
    master_inventory_clear(m);
    forget_given_up(m);
    HASH_ITER(hh, m->nodes, n, tmp) {
        HASH_DEL(m->nodes, n);
        if (n->poll) answer_poll(m, n);
        verify_queue_drop(n);
        fail_tasks(m, n, 0);
        free(n->id);
        free(n->data_addr);
        free(n->segment_path);
        free(n->tenant);
        free(n->local_socket);
        free(n->cold_dir);
        free(n);
    }
}

static const smp_rpc_method node_methods[] = {
    {sizeof(smp_rpc_method), NODE_METHOD__NODE_REGISTER, "register", h_register, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), NODE_METHOD__NODE_POLL, "poll", h_poll, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), NODE_METHOD__NODE_INVENTORY, "inventory", master_inventory_h_page,
     SMP_ROLE_ADMIN},
};

int master_nodes_register(master *m)
{
    /* A node hands its results to whichever master answers its next poll,
     * results of tasks an earlier master gave it among them (a task that
     * ran across the change). Task ids start at a random point of 2^62, so
     * such a result is never taken for one of this master's tasks: counted
     * from 1 by both, the ids would meet. */
    uint64_t base = 0;
    if (getrandom(&base, sizeof(base), 0) == (ssize_t)sizeof(base)) m->next_task_id = base >> 2;
    return rpc_server_add_service(m->rpc, MASTER_SERVICE_NODES, "nodes", node_methods,
                                  sizeof(node_methods) / sizeof(node_methods[0]), m);
}
