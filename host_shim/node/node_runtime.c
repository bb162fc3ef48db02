/* node_runtime.c -- see node_runtime.h.
 *
 * Three threads besides the caller's: the data thread runs a libuv loop
 * with the data server (reads and ticketed writes of segment ranges), the
 * control thread talks to the master with the blocking RPC client, and the
 * task thread runs the replica tasks the master hands out, in order (disk
 * I/O never touches the data loop, and a persist of a multi-GiB object
 * never keeps the control thread from polling: the master would take the
 * node for dead). The segment mapping is shared: the master hands out
 * ranges so that a client's write, a persist and a load never touch the
 * same bytes at once. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <uv.h>

#include "node_cold.h"
#include "node_cold_watch.h"
#include "node_data.h"
#include "node_fsck.h"
#include "node_rpc.pb-c.h"
#include "node_runtime.h"
#include "node_segment.h"
#include "node_ticket.h"
#include "rpc_client.h"
#include "rpc_tls.h"
#include "wm_errbuf.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#define NODE_SERVICE 3
#define RESULTS_MAX 256
#define WRITES_MAX 64 /* running writes reported with one poll */
#define ROTATE_MARGIN_MS 1000 /* beyond the ticket life, before a key may be forgotten */
#define NODE_TMP_STALE_MS 60000u /* a temporary cold file this old is a dead write's */
#define NODE_TMP_SWEEP_MS 10000u /* the idle task thread removes those this often */

struct node_runtime {
    char *master, *node_id, *segment_dir, *cold_dir, *data_listen;
    char *tls_ca, *tls_cert, *tls_key; /* NULL: not given */
    int data_tls;             /* the data port speaks TLS (told to the master) */
    char *data_tls_cert, *data_tls_key, *data_tls_key_prefix; /* its files: a reload reads them */
    char *token;              /* NULL: WEIGHT_TOKEN (rpcc_options.token) */
    uint64_t segment_bytes;
    unsigned persist_flags;   /* cold_persist flags */
    seg_segment *seg;
    int seg_survived;
    cold_watch *cold_watch;   /* how full the cold tier is, read on its own thread */
    char *tenant;             /* "": shared */
    char *local_socket;       /* dedicated: node_local's path */
    node_local *local;        /* dedicated: serving local_socket */
    cold_tier *cold;
    cold_faults *faults;      /* cold files the data server found corrupt, for the master */
    char data_addr[160];

    /* Ticket keys, under key_lock: keys is what the data server checks
     * once keys_async installed it on its loop (served_id: the current key
     * id it checks, keys.current_id or, until then, keys.previous_id; the
     * master hears only of a key the data server checks); acked_id is the
     * key the master said it signs with, since acked_at_ms (monotonic). */
    pthread_mutex_t key_lock;
    ticket_keyring keys;
    uint32_t served_id;
    uint32_t acked_id;
    uint64_t acked_at_ms;
    uint64_t ticket_ttl_ms;

    uv_loop_t loop;
    uv_async_t stop_async;
    uv_async_t keys_async;
    uv_async_t tls_async;     /* installs tls_pending (under key_lock) in the data server */
    SSL_CTX *tls_pending;
    data_server *data;
    pthread_t data_thread;
    int data_started;

    pthread_t ctl_thread;
    int ctl_started;
    atomic_int stopping;
    uint32_t poll_ms;

    /* The task thread and what it shares with the control thread, under
     * task_lock: the answer whose tasks are not all run, whether
     * a task runs now, and the results not yet reported. task_cv wakes the
     * task thread (work, room for results, stop); done_cv the control
     * thread (a result, the thread idle). */
    pthread_t task_thread;
    int task_started;
    pthread_mutex_t task_lock;
    pthread_cond_t task_cv, done_cv;
    NodePollResponse *held;   /* the answer whose tasks run, or NULL */
    size_t held_next;         /* its first task not started */
    int task_running;
    uint64_t tmps_swept_ms;   /* when the task thread last swept the cold tier's temporaries */
    TaskResult *results[RESULTS_MAX]; /* finished, not yet reported */
    size_t n_results;

    data_write writes[WRITES_MAX];    /* running writes, copied for a poll */
    node_fsck *fsck;                  /* SCAN and SCRUB tasks */

    /* The control thread's alone: why the node is not registered (ctl_note)
     * -- the step and code of the cause logged last (0: none since the
     * last registration), when, how often it came again since -- and the
     * pause before the next attempt after a refusal that will not change by
     * itself (ctl_back_off). */
    int note_step;
    int note_rc;
    uint64_t note_ms;
    unsigned note_repeats;
    uint32_t retry_ms;
};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* -- the data thread -------------------------------------------------------- */

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void on_stop(uv_async_t *h)
{
    node_runtime *n = h->data;
    data_server_close(n->data);
    n->data = NULL;
    uv_close((uv_handle_t *)&n->stop_async, NULL);
    uv_close((uv_handle_t *)&n->keys_async, NULL);
    uv_close((uv_handle_t *)&n->tls_async, NULL);
}

/* A reloaded certificate, into the data server's next connections. */
static void on_tls(uv_async_t *h)
{
    node_runtime *n = h->data;
    pthread_mutex_lock(&n->key_lock);
    SSL_CTX *ctx = n->tls_pending;
    n->tls_pending = NULL;
    pthread_mutex_unlock(&n->key_lock);
    if (ctx != NULL && n->data != NULL) data_server_set_tls(n->data, ctx);
    SSL_CTX_free(ctx); /* the server holds its own reference */
}

/* A rotated keyring is installed in the data server before the master hears
 * of it (the control thread reports a key only once served_id names it). */
static void on_keys(uv_async_t *h)
{
    node_runtime *n = h->data;
    pthread_mutex_lock(&n->key_lock);
    if (n->data != NULL && data_server_set_keys(n->data, &n->keys) == SMP_OK)
        n->served_id = n->keys.current_id;
    pthread_mutex_unlock(&n->key_lock);
}

static void *data_main(void *arg)
{
    node_runtime *n = arg;
    uv_run(&n->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* -- tasks ------------------------------------------------------------------ */

/* Strings left at their protobuf-c default point to a static "". */
static void free_string(char *s)
{
    if (s != protobuf_c_empty_string) free(s);
}

static void free_inventory_file(InventoryFile *f)
{
    if (f == NULL) return;
    free_string(f->key);
    free_string(f->name);
    free(f->sha256.data);
    free(f);
}

static void free_result(TaskResult *r)
{
    if (r == NULL) return;
    free_string(r->error);
    free_string(r->cold_name);
    free_string(r->after);
    free(r->sha256.data);
    for (size_t i = 0; i < r->n_files; i++) free_inventory_file(r->files[i]);
    free(r->files);
    for (size_t i = 0; i < r->n_dirty; i++) free(r->dirty[i]);
    free(r->dirty);
    for (size_t i = 0; i < r->n_stale_tmps; i++) {
        free_string(r->stale_tmps[i]->name);
        free_string(r->stale_tmps[i]->error);
        free(r->stale_tmps[i]);
    }
    free(r->stale_tmps);
    free(r);
}

/* How full the cold tier is, into u for a registration or a poll (why holds
 * u->error's text: cap bytes): the watch's last reading, so a file system
 * that hangs never holds the heartbeat (node_cold_watch.h). */
static void cold_usage_msg(node_runtime *n, ColdTierUsage *u, char *why, size_t cap)
{
    cold_usage cu;
    cold_watch_get(n->cold_watch, &cu, NULL); /* never waits on the file system */
    cold_tier_usage__init(u);
    u->total_bytes = cu.total_bytes;
    u->free_bytes = cu.free_bytes;
    u->used_bytes = cu.used_bytes;
    u->write_failures_no_space = cu.write_failures_no_space;
    u->write_failures_other = cu.write_failures_other;
    why[0] = '\0';
    if (cu.error != 0) snprintf(why, cap, "statvfs of %s: %s", n->cold_dir, strerror(cu.error));
    u->error = why;
}

static TaskResult *run_task(node_runtime *n, const NodeTask *t)
{
    char err[512] = "";
    char name[COLD_NAME_MAX] = "";
    uint8_t sha[32];
    int rc = SMP_OK;
    TaskResult *r = calloc(1, sizeof(*r));
    if (r == NULL) return NULL;
    task_result__init(r);
    r->id = t->id;
    int sha_ok = t->sha256.len == 32;
    uint8_t *ptr = seg_ptr(n->seg, t->offset, t->length);
    switch (t->kind) {
    case TASK_KIND__TASK_PERSIST:
        if (ptr == NULL || !sha_ok) {
            rc = SMP_ERANGE;
            wm_errbuf(err, sizeof(err), "persist %s: range %llu+%llu outside the segment", t->key,
                      (unsigned long long)t->offset, (unsigned long long)t->length);
            break;
        }
        rc = cold_persist(n->cold, t->key, ptr, t->length, t->sha256.data, n->persist_flags, name,
                          err, sizeof(err));
        if (rc == SMP_OK) r->cold_name = strdup(name);
        break;
    case TASK_KIND__TASK_LOAD:
        if (ptr == NULL || !sha_ok) {
            rc = SMP_ERANGE;
            wm_errbuf(err, sizeof(err), "load %s: range outside the segment", t->key);
            break;
        }
        rc = cold_load(n->cold, t->cold_name, t->key, ptr, t->length, t->sha256.data, err,
                       sizeof(err));
        break;
    case TASK_KIND__TASK_CHECK_COLD:
        if (!sha_ok) {
            rc = SMP_EINVAL;
            wm_errbuf(err, sizeof(err), "check %s: no SHA-256 to check against", t->cold_name);
            break;
        }
        rc = cold_verify(n->cold, t->cold_name, t->key, t->length, t->sha256.data, err, sizeof(err));
        break;
    case TASK_KIND__TASK_DELETE_COLD:
        rc = cold_delete(n->cold, t->cold_name);
        if (rc == SMP_ENOTFOUND) rc = SMP_OK; /* already gone: the goal holds */
        if (rc < 0)
            wm_errbuf(err, sizeof(err), "delete %s: %s", t->cold_name,
                      rc == SMP_EIO ? strerror(errno) : smp_strerror(rc));
        break;
    case TASK_KIND__TASK_VERIFY:
        rc = seg_sha256(n->seg, t->offset, t->length, sha);
        if (rc == SMP_OK) {
            r->sha256.data = malloc(32);
            if (r->sha256.data) {
                memcpy(r->sha256.data, sha, 32);
                r->sha256.len = 32;
            }
        }
        break;
    case TASK_KIND__TASK_SCAN:
        rc = node_fsck_scan(n->fsck, t, r, err, sizeof(err));
        break;
    case TASK_KIND__TASK_SCRUB:
        rc = node_fsck_scrub(n->fsck, t, err, sizeof(err));
        break;
    default:
        rc = SMP_ENOTSUP;
        wm_errbuf(err, sizeof(err), "task kind %d is not known to this node", (int)t->kind);
    }
    r->status = rc;
    if (err[0]) r->error = strdup(err);
    return r;
}

#define PERSIST_BATCH_BYTES (1u << 20) /* a persist this small shares its fsyncs */

/* 1 when t is a persist that may join a batch (cold_persist_batch). */
static int batchable(const NodeTask *t)
{
    return t->kind == TASK_KIND__TASK_PERSIST && t->length <= PERSIST_BATCH_BYTES;
}

/* Run the persists t[0..n) (batchable, n <= COLD_BATCH_MAX) as one batch:
 * each gets its own result in out[] (NULL when out of memory), as run_task
 * would give, but their files share the durable steps (one directory
 * fsync, the file fsyncs at once). */
static void run_persists(node_runtime *n, NodeTask *const *t, size_t k, TaskResult **out)
{
    cold_item items[COLD_BATCH_MAX];
    size_t at[COLD_BATCH_MAX], m = 0;
    for (size_t i = 0; i < k; i++) {
        out[i] = calloc(1, sizeof(*out[i]));
        if (out[i] == NULL) continue;
        task_result__init(out[i]);
        out[i]->id = t[i]->id;
        uint8_t *ptr = seg_ptr(n->seg, t[i]->offset, t[i]->length);
        if (ptr == NULL || t[i]->sha256.len != 32) {
            char err[512];
            wm_errbuf(err, sizeof(err), "persist %s: range %llu+%llu outside the segment", t[i]->key,
                      (unsigned long long)t[i]->offset, (unsigned long long)t[i]->length);
            out[i]->status = SMP_ERANGE;
            out[i]->error = strdup(err);
            continue;
        }
        items[m] = (cold_item){.key = t[i]->key, .data = ptr, .len = t[i]->length,
                               .sha256 = t[i]->sha256.data};
        at[m++] = i;
    }
    if (m > 0) (void)cold_persist_batch(n->cold, items, m, n->persist_flags);
    for (size_t j = 0; j < m; j++) {
        TaskResult *r = out[at[j]];
        r->status = items[j].rc;
        if (items[j].rc == SMP_OK) r->cold_name = strdup(items[j].name);
        else if (items[j].err[0]) r->error = strdup(items[j].err);
    }
}

/* -- the control thread ----------------------------------------------------- */

/* What the control thread was doing when it failed (ctl_note). */
enum { STEP_CONNECT = 1, STEP_INVENTORY, STEP_REGISTER };

#define NOTE_REMIND_MS 60000 /* a cause that persists is logged again this often */
#define RETRY_FIRST_MS 200   /* the first pause after a refusal, doubling ... */
#define RETRY_MAX_MS 10000   /* ... up to this */

/* Log why the node is not registered -- "store_node ID: " and the sentence
 * fmt makes -- when the cause is news: another step or code than the one
 * logged last. The same cause again is counted, not logged, but for a
 * reminder with the count once NOTE_REMIND_MS passed since its last line: a
 * node refused for its token retries for as long as it runs, and a line
 * per attempt flooded the log. ctl_note_clear (a registration) makes the
 * next failure news again. Control thread only. */
static void ctl_note(node_runtime *n, int step, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void ctl_note(node_runtime *n, int step, int rc, const char *fmt, ...)
{
    char line[1024];
    uint64_t now = mono_ms();
    int again = n->note_step == step && n->note_rc == rc;
    if (again) {
        n->note_repeats++;
        if (now - n->note_ms < NOTE_REMIND_MS) return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (again)
        fprintf(stderr, "store_node %s: %s (the same %u more times in %llu s; retrying)\n",
                n->node_id, line, n->note_repeats, (unsigned long long)((now - n->note_ms) / 1000));
    else
        fprintf(stderr, "store_node %s: %s\n", n->node_id, line);
    n->note_step = step;
    n->note_rc = rc;
    n->note_ms = now;
    n->note_repeats = 0;
}

static void ctl_note_clear(node_runtime *n)
{
    n->note_step = 0;
    n->note_rc = 0;
    n->note_repeats = 0;
    n->retry_ms = RETRY_FIRST_MS;
}

/* Sleep ms, in steps of at most 100 ms, or until a stop. */
static void pause_unless_stopping(node_runtime *n, uint32_t ms)
{
    while (ms > 0 && !atomic_load(&n->stopping)) {
        uint32_t step = ms < 100 ? ms : 100;
        sleep_ms((int)step);
        ms -= step;
    }
}

/* After a failure that will not go away by itself -- the master refused
 * the node's credentials, or speaks another protocol (a plaintext node on
 * a TLS port, a TLS handshake refused) -- wait before the next attempt:
 * RETRY_FIRST_MS, doubling with each such failure in a row up to
 * RETRY_MAX_MS (it may still change: a master restarted with the token
 * added). Anything else is retried at once as before (ctl_main): a lost
 * master is looked for without delay, and a failover stays fast. */
static int settled_failure(int rc, int lost)
{
    return rc == SMP_EAUTH || rc == SMP_EFORBIDDEN || (lost && rc == SMP_EPROTO);
}

static void ctl_back_off(node_runtime *n)
{
    if (n->retry_ms < RETRY_FIRST_MS) n->retry_ms = RETRY_FIRST_MS;
    pause_unless_stopping(n, n->retry_ms);
    n->retry_ms = n->retry_ms >= RETRY_MAX_MS / 2 ? RETRY_MAX_MS : n->retry_ms * 2;
}

/* The cold files being scanned for a registration. Once they pass one
 * page, they go to the master in NODE_INVENTORY pages while the scan goes
 * on (send_page): the master hears the node from its first page on, not
 * only once every file was read. */
typedef struct inventory {
    InventoryFile **files;
    size_t n, cap;
    node_runtime *node;
    rpcc_conn *c;
    int *lost;
    uint64_t session;         /* of the pages sent; 0: none sent */
    size_t sent;              /* files[0..sent) went in pages */
    size_t pages;
    size_t unsent_bytes;      /* encoded size of files[sent..n) */
    int whole;                /* the master takes no pages: all ride in the registration */
} inventory;

static int send_page(inventory *inv);

static int collect_file(void *arg, const cold_entry *e)
{
    inventory *inv = arg;
    if (e->status != SMP_OK || e->key == NULL) return 0; /* corrupt: not offered */
    if (inv->n == inv->cap) {
        size_t cap = inv->cap ? inv->cap * 2 : 64;
        InventoryFile **v = realloc(inv->files, cap * sizeof(*v));
        if (v == NULL) return SMP_ENOMEM;
        inv->files = v;
        inv->cap = cap;
    }
    InventoryFile *f = calloc(1, sizeof(*f));
    if (f == NULL) return SMP_ENOMEM;
    inventory_file__init(f);
    f->key = strdup(e->key);
    f->name = strdup(e->name);
    f->length = e->length;
    f->sha256.data = malloc(32);
    if (f->key == NULL || f->name == NULL || f->sha256.data == NULL) {
        free(f->key);
        free(f->name);
        free(f->sha256.data);
        free(f);
        return SMP_ENOMEM;
    }
    memcpy(f->sha256.data, e->sha256, 32);
    f->sha256.len = 32;
    inv->files[inv->n++] = f;
    inv->unsent_bytes += inventory_file__get_packed_size(f) + 8; /* + tag and length */
    if (!inv->whole && inv->unsent_bytes >= NODE_INVENTORY_PAGE_BYTES)
        return send_page(inv);
    return 0;
}

static void inventory_free(inventory *inv)
{
    for (size_t i = 0; i < inv->n; i++) {
        free(inv->files[i]->key);
        free(inv->files[i]->name);
        free(inv->files[i]->sha256.data);
        free(inv->files[i]);
    }
    free(inv->files);
}

/* One RPC of the node service: SMP_OK, the master's status when it
 * refused, or the transport's error with *lost set (the link is to be
 * taken up again). A standby's NOT_LEADER answer is followed to the leader
 * by the transport itself. */
static int call(rpcc_conn *c, uint32_t method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp, char **msg,
                int *lost)
{
    int status = 0;
    int rc = rpcc_call_msg(c, NODE_SERVICE, method, req, desc, resp, &status, NULL, NULL, msg);
    *lost = rc < 0;
    return rc < 0 ? rc : status;
}

/* (Re)connect through the master list with short connects (a stop is not
 * kept waiting long), calls then wait up to 10 s (a registration longer:
 * node_register_call_ms). */
#define NODE_CONNECT_MS 2000
#define NODE_CALL_MS 10000
/* The longest pause of the node's search for a new leader (through
 * standbys that answer NOT_LEADER): every write after a failover waits for
 * the node to register with the new leader, and a cluster has few nodes,
 * so they ask every 20 ms where a client doubles to 100. */
#define NODE_FOLLOW_PAUSE_MS 20
/* How long past node.poll_ms (the longest the master holds a poll) a poll
 * on a list of masters waits in silence before the transport asks another
 * master whether the one polled still leads. A paused or hung leader still
 * has its connection accepted by the kernel; the others replace it within
 * its lease (ha.lease_ttl_s, 2 s by default), and a node that waited its
 * whole poll there would leave the new leader without it, and its replicas
 * unreadable, for most of ten seconds. A leader that is only slow is still
 * named by the standbys: the poll waits on, and the node does not register
 * again. */
#define NODE_POLL_QUIET_SLACK_MS 2000

uint32_t node_register_call_ms(size_t n_cold_files)
{
    uint64_t most = (uint64_t)(NODE_REGISTER_CALL_MAX_MS - NODE_CALL_MS) * 1000 /
                    NODE_REGISTER_US_PER_FILE;
    if ((uint64_t)n_cold_files >= most) return NODE_REGISTER_CALL_MAX_MS;
    return (uint32_t)(NODE_CALL_MS + (uint64_t)n_cold_files * NODE_REGISTER_US_PER_FILE / 1000);
}

uint32_t node_inventory_page_call_ms(size_t n_files_sent)
{
    return node_register_call_ms(n_files_sent);
}

/* Send the files not sent yet (files[sent..n)) as the next NODE_INVENTORY
 * page of the inventory's session (a new one, non-zero, at the first page),
 * for a registration that names it. SMP_OK (0); else non-zero, which stops
 * the scan: SMP_ENOTFOUND when the master has no such method at the first
 * page (an older master: inv->whole is set, the scan goes on and every file
 * rides in the registration -- returns 0 then); the master's refusal or the
 * transport's error (*lost set).
 *
 * A page waits for its answer as long as a registration of the files sent
 * so far would (node_inventory_page_call_ms): the master answers it from
 * the loop that is still busy with its own start. */
static int send_page(inventory *inv)
{
    node_runtime *n = inv->node;
    rpcc_conn *c = inv->c;
    char *msg = NULL;
    NodeInventoryRequest req = NODE_INVENTORY_REQUEST__INIT;
    NodeInventoryResponse *resp = NULL;
    int rc;
    if (inv->session == 0) {
        do {
            if (RAND_bytes((unsigned char *)&inv->session, sizeof(inv->session)) != 1)
                return SMP_EIO;
        } while (inv->session == 0);
    }
    req.node_id = n->node_id;
    req.session = inv->session;
    req.cold_files = inv->files + inv->sent;
    req.n_cold_files = inv->n - inv->sent;
    rpcc_set_timeout(c, (int)node_inventory_page_call_ms(inv->n));
    rc = call(c, NODE_METHOD__NODE_INVENTORY, &req.base, &node_inventory_response__descriptor,
              (ProtobufCMessage **)&resp, &msg, inv->lost);
    rpcc_set_timeout(c, NODE_CALL_MS);
    if (rc == SMP_OK && resp->files != inv->n) {
        rc = SMP_EPROTO; /* a page lost or counted twice: start over */
        fprintf(stderr, "store_node %s: inventory page %zu: the master holds %llu files of the "
                "session, %zu sent\n", n->node_id, inv->pages + 1, (unsigned long long)resp->files,
                inv->n);
    } else if (rc == SMP_ENOTFOUND && !*inv->lost && inv->pages == 0) {
        /* A master from before NODE_INVENTORY: all in one message. */
        fprintf(stderr, "store_node %s: the master at %s takes no inventory pages; its "
                "registration will carry every cold file\n", n->node_id, rpcc_endpoint(c));
        inv->whole = 1;
        inv->session = 0;
        rc = SMP_OK;
    } else if (rc < 0 && !*inv->lost) {
        ctl_note(n, STEP_INVENTORY, rc, "inventory page %zu refused by %s: %s (%s)",
                 inv->pages + 1, rpcc_endpoint(c), smp_strerror(rc), msg ? msg : "");
    } else if (rc < 0) {
        ctl_note(n, STEP_INVENTORY, rc, "inventory page %zu at %s: %s", inv->pages + 1,
                 rpcc_endpoint(c), rpcc_last_error(c));
    } else {
        inv->pages++;
        inv->sent = inv->n;
        inv->unsent_bytes = 0;
    }
    if (resp != NULL) node_inventory_response__free_unpacked(resp, NULL);
    free(msg);
    return rc;
}

/* One line, however many temporary cold files a sweep removed. */
static void say_tmps_removed(const node_runtime *n, const cold_inventory_stats *st)
{
    if (st->tmps_removed > 0)
        fprintf(stderr, "store_node %s: removed %llu temporary cold file(s), %llu bytes, left by "
                "writes that did not finish (older than %u s) in %s\n", n->node_id,
                (unsigned long long)st->tmps_removed, (unsigned long long)st->tmp_bytes_removed,
                NODE_TMP_STALE_MS / 1000, cold_dir(n->cold));
}

/* Register with the master: scan the cold tier, sending the inventory in
 * pages while the scan runs once it passes one page (or in the
 * registration when it fits one), then the registration itself. SMP_OK,
 * the master's refusal, or the transport's error with *lost set. */
static int do_register(node_runtime *n, rpcc_conn *c, int *lost)
{
    inventory inv = {.node = n, .c = c, .lost = lost};
    cold_inventory_stats st;
    char *msg = NULL;
    NodeRegisterResponse *resp = NULL;
    uint64_t began = mono_ms();
    int rc = cold_inventory(n->cold, NODE_TMP_STALE_MS, 0, collect_file, &inv, &st);
    if (rc < 0) goto free_inventory;
    say_tmps_removed(n, &st);
    /* The rest of a paged inventory: one last page, however small. */
    if (inv.session != 0 && inv.sent < inv.n && (rc = send_page(&inv)) < 0) goto free_inventory;
    uint64_t session = inv.session;
    if (session != 0)
        fprintf(stderr, "store_node %s: inventory of %zu cold files sent in %zu pages (%llu ms "
                "from the scan's start)\n", n->node_id, inv.n, inv.pages,
                (unsigned long long)(mono_ms() - began));
    NodeRegisterRequest req = NODE_REGISTER_REQUEST__INIT;
    req.node_id = n->node_id;
    req.data_addr = n->data_addr;
    req.segment_id = n->node_id;
    req.segment_path = (char *)seg_path(n->seg);
    /* the size asked for: below the file's when shrinking, which the master
     * allows only when nothing lies past it */
    req.segment_bytes = seg_requested_size(n->seg);
    req.cold_dir = n->cold_dir;
    ColdTierUsage usage;
    char usage_why[600];
    cold_usage_msg(n, &usage, usage_why, sizeof(usage_why));
    req.cold_usage = &usage;
    if (session != 0) {
        req.inventory_session = session;
        req.inventory_files = inv.n;
    } else {
        req.n_cold_files = inv.n;
        req.cold_files = inv.files;
    }
    req.segment_survived = n->seg_survived;
    req.tenant = n->tenant;
    req.local_socket = n->local_socket;
    ticket_secret key;
    pthread_mutex_lock(&n->key_lock);
    /* the key the data server checks: a key rotated a moment ago is
       reported by a poll once it is installed */
    int fresh = n->served_id == n->keys.current_id;
    key = fresh ? n->keys.current : n->keys.previous;
    req.ticket_key_id = fresh ? n->keys.current_id : n->keys.previous_id;
    pthread_mutex_unlock(&n->key_lock);
    req.ticket_secret.data = key.bytes;
    req.ticket_secret.len = key.len;
    req.data_tls = n->data_tls;
    /* The master checks every cold file against its replicas before it
     * answers: a large inventory gets the time it needs. */
    rpcc_set_timeout(c, node_register_call_ms(inv.n));
    rc = call(c, NODE_METHOD__NODE_REGISTER, &req.base, &node_register_response__descriptor,
              (ProtobufCMessage **)&resp, &msg, lost);
    rpcc_set_timeout(c, NODE_CALL_MS);
    OPENSSL_cleanse(&key, sizeof(key));
    if (rc == SMP_OK) {
        fprintf(stderr, "store_node %s: registered with the master at %s\n", n->node_id,
                rpcc_endpoint(c));
        ctl_note_clear(n);
        n->poll_ms = resp->poll_ms ? resp->poll_ms : 200;
        pthread_mutex_lock(&n->key_lock);
        n->ticket_ttl_ms = resp->ticket_ttl_ms ? resp->ticket_ttl_ms : 60000;
        if (n->acked_id != req.ticket_key_id) {
            n->acked_id = req.ticket_key_id;
            n->acked_at_ms = mono_ms();
        }
        pthread_mutex_unlock(&n->key_lock);
        node_register_response__free_unpacked(resp, NULL);
        if (seg_size(n->seg) > seg_requested_size(n->seg)) {
            char err[512];
            uint64_t was = seg_size(n->seg);
            if (seg_shrink(n->seg, seg_requested_size(n->seg), err, sizeof(err)) == SMP_OK)
                fprintf(stderr, "store_node %s: segment shrunk from %llu to %llu bytes (nothing "
                        "lay past it)\n", n->node_id, (unsigned long long)was,
                        (unsigned long long)seg_requested_size(n->seg));
            else
                fprintf(stderr, "store_node %s: %s\n", n->node_id, err);
        }
        /* From now on the segment's contents are the master's to judge. */
        n->seg_survived = 1;
    } else if (*lost) {
        ctl_note(n, STEP_REGISTER, rc, "register at %s: %s", rpcc_endpoint(c),
                 rpcc_last_error(c));
    } else {
        ctl_note(n, STEP_REGISTER, rc, "register refused by %s: %s (%s)", rpcc_endpoint(c),
                 smp_strerror(rc), msg ? msg : "");
    }
    free(msg);
free_inventory:
    inventory_free(&inv);
    return rc;
}

/* The idle task thread's sweep (task_lock held, no answer held): the
 * temporary cold files of writes that did not finish are removed once
 * NODE_TMP_STALE_MS old, every NODE_TMP_SWEEP_MS -- not only at a
 * registration, where a node restarted right after a crash finds them too
 * young and would keep them until the next one. task_running is set
 * meanwhile: no persist of this node writes one (they run on this thread),
 * and a registration, which sweeps as well, waits. Returns with the lock
 * held again. */
static void sweep_tmps(node_runtime *n)
{
    cold_inventory_stats st;
    n->task_running = 1;
    pthread_mutex_unlock(&n->task_lock);
    if (n->cold != NULL && cold_sweep_tmps(n->cold, NODE_TMP_STALE_MS, &st) == SMP_OK)
        say_tmps_removed(n, &st);
    pthread_mutex_lock(&n->task_lock);
    n->task_running = 0;
    n->tmps_swept_ms = mono_ms();
    pthread_cond_broadcast(&n->done_cv);
}

/* Wait on task_cv (task_lock held) for work, room for results or the
 * stop -- with nothing held, until the next sweep is due at most. */
static void wait_for_work(node_runtime *n)
{
    uint64_t due = n->tmps_swept_ms + NODE_TMP_SWEEP_MS, now = mono_ms();
    if (n->held != NULL) {
        pthread_cond_wait(&n->task_cv, &n->task_lock);
        return;
    }
    if (now >= due) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* task_cv's clock */
    uint64_t left = due - now;
    ts.tv_sec += (time_t)(left / 1000);
    ts.tv_nsec += (long)(left % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&n->task_cv, &n->task_lock, &ts);
}

/* The task thread: run the held answer's tasks in order, one at a time --
 * but for consecutive small persists, run as one batch that shares its
 * fsyncs (run_persists) -- adding each result for the control thread to
 * report. It waits while
 * RESULTS_MAX results are unreported (the control thread polls at once
 * then) and ends at stop. */
static void *task_main(void *arg)
{
    node_runtime *n = arg;
    prctl(PR_SET_NAME, "node-tasks"); /* what an operator (or a test) finds it by */
    pthread_mutex_lock(&n->task_lock);
    n->tmps_swept_ms = mono_ms(); /* the registration sweeps first */
    while (!atomic_load(&n->stopping)) {
        NodePollResponse *h = n->held;
        if (h == NULL && mono_ms() - n->tmps_swept_ms >= NODE_TMP_SWEEP_MS) {
            sweep_tmps(n);
            continue;
        }
        if (h == NULL || n->n_results >= RESULTS_MAX) {
            wait_for_work(n);
            continue;
        }
        /* consecutive small persists go as one batch (their fsyncs shared),
           as many as the results have room for */
        size_t k = 1;
        if (batchable(h->tasks[n->held_next]))
            while (k < COLD_BATCH_MAX && n->held_next + k < h->n_tasks &&
                   n->n_results + k < RESULTS_MAX && batchable(h->tasks[n->held_next + k]))
                k++;
        NodeTask *const *t = &h->tasks[n->held_next];
        n->held_next += k;
        n->task_running = 1;
        pthread_mutex_unlock(&n->task_lock);
        TaskResult *r[COLD_BATCH_MAX];
        if (k > 1) run_persists(n, t, k, r);
        else r[0] = run_task(n, t[0]);
        pthread_mutex_lock(&n->task_lock);
        n->task_running = 0;
        for (size_t i = 0; i < k; i++)
            if (r[i]) n->results[n->n_results++] = r[i];
        /* still held: the control thread drops it only while no task runs */
        if (n->held_next >= h->n_tasks) {
            node_poll_response__free_unpacked(h, NULL);
            n->held = NULL;
        }
        pthread_cond_broadcast(&n->done_cv);
    }
    pthread_mutex_unlock(&n->task_lock);
    return NULL;
}

/* Hand an answer's tasks to the task thread. The master gives tasks only
 * to a poll that is not busy, which the node sends only once the task
 * thread is idle, so the slot is free; should it not be, this waits. */
static void hold_answer(node_runtime *n, NodePollResponse *resp)
{
    pthread_mutex_lock(&n->task_lock);
    while (n->held != NULL && !atomic_load(&n->stopping))
        pthread_cond_wait(&n->done_cv, &n->task_lock);
    if (n->held == NULL) {
        n->held = resp;
        n->held_next = 0;
        resp = NULL;
        pthread_cond_signal(&n->task_cv);
    }
    pthread_mutex_unlock(&n->task_lock);
    if (resp != NULL) node_poll_response__free_unpacked(resp, NULL); /* stopping */
}

/* Forget the tasks not started (a new registration: the master failed them
 * already) once the running one, if any, is done, so that no task touches
 * the cold tier while the node takes its inventory. */
static void drop_held(node_runtime *n)
{
    pthread_mutex_lock(&n->task_lock);
    while (n->task_running) pthread_cond_wait(&n->done_cv, &n->task_lock);
    if (n->held != NULL) node_poll_response__free_unpacked(n->held, NULL);
    n->held = NULL;
    pthread_mutex_unlock(&n->task_lock);
}

/* Wait, after a poll answered at answered_ms, until the node should poll
 * again: at once when the task thread is idle (the master holds an idle
 * node's poll itself); while it works, when poll_ms has passed (a busy
 * poll: the master hears from the node however long one task takes) or
 * RESULTS_MAX results wait. Returns whether tasks are still to run. */
static int wait_to_poll(node_runtime *n, uint64_t answered_ms)
{
    pthread_mutex_lock(&n->task_lock);
    for (;;) {
        int busy = n->held != NULL || n->task_running;
        uint64_t now = mono_ms();
        if (!busy || n->n_results >= RESULTS_MAX || atomic_load(&n->stopping) ||
            now - answered_ms >= n->poll_ms) {
            pthread_mutex_unlock(&n->task_lock);
            return busy;
        }
        /* at most 100 ms at a time: a stop only sets the flag */
        uint64_t left = answered_ms + n->poll_ms - now;
        if (left > 100) left = 100;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(left * 1000000u);
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&n->done_cv, &n->task_lock, &ts);
    }
}

/* Poll until the link breaks (*lost set), the master asks to register
 * again, or the answers come from another master than the one registered
 * with (the connection followed a standby's NOT_LEADER to a new leader:
 * the node registers there, and that master reconciles its inventory).
 * The task thread runs the answers' tasks in order; while it works the
 * node polls "busy" every poll_ms with the results so far, and such a poll
 * is answered at once with no new task. */
static int poll_loop(node_runtime *n, rpcc_conn *c, int *lost)
{
    uint64_t registered_moves = rpcc_moves(c);
    int busy = 0;
    int rc = SMP_OK;
    while (!atomic_load(&n->stopping)) {
        NodePollRequest req = NODE_POLL_REQUEST__INIT;
        NodePollResponse *resp = NULL;
        TaskResult *sent[RESULTS_MAX];
        char *msg = NULL;
        ticket_secret key = {.len = 0};
        req.node_id = n->node_id;
        pthread_mutex_lock(&n->task_lock);
        size_t n_sent = n->n_results;
        memcpy(sent, n->results, n_sent * sizeof(*sent));
        pthread_mutex_unlock(&n->task_lock);
        req.n_results = n_sent;
        req.results = sent;
        req.busy = busy;
        /* The writes running now: the master keeps their puts, however
         * long a slow client takes (beyond WRITES_MAX the rest go with a
         * later poll, or are taken back after node.put_timeout_ms). */
        NodeWrite wmsg[WRITES_MAX], *wptr[WRITES_MAX];
        size_t nw = n->data ? data_server_writing(n->data, n->writes, WRITES_MAX) : 0;
        if (nw > WRITES_MAX) nw = WRITES_MAX;
        for (size_t i = 0; i < nw; i++) {
            node_write__init(&wmsg[i]);
            wmsg[i].key = n->writes[i].key;
            wmsg[i].segment = n->writes[i].segment;
            wmsg[i].offset = n->writes[i].offset;
            wptr[i] = &wmsg[i];
        }
        req.n_writing = nw;
        req.writing = wptr;
        /* Cold files a read found corrupt: the master drops their replicas.
           Noted again when the poll does not reach it. */
        char corrupt[COLD_FAULTS_MAX][COLD_NAME_MAX], *cptr[COLD_FAULTS_MAX];
        size_t nc = cold_faults_take(n->faults, corrupt, COLD_FAULTS_MAX);
        for (size_t i = 0; i < nc; i++) cptr[i] = corrupt[i];
        req.n_corrupt_cold = nc;
        req.corrupt_cold = cptr;
        ColdTierUsage usage;
        char usage_why[600];
        cold_usage_msg(n, &usage, usage_why, sizeof(usage_why));
        req.cold_usage = &usage;
        /* A key the master has not acknowledged goes with every poll until
         * it is, once the data server checks tickets with it. */
        pthread_mutex_lock(&n->key_lock);
        if (n->keys.current_id != n->acked_id && n->served_id == n->keys.current_id) {
            key = n->keys.current;
            req.ticket_key_id = n->keys.current_id;
            req.ticket_secret.data = key.bytes;
            req.ticket_secret.len = key.len;
        }
        pthread_mutex_unlock(&n->key_lock);
        /* the master holds a poll up to poll_ms */
        char polled[256];
        snprintf(polled, sizeof(polled), "%s", rpcc_endpoint(c)[0] ? rpcc_endpoint(c) : "?");
        rpcc_set_timeout(c, (int)n->poll_ms + NODE_CALL_MS);
        rpcc_set_quiet(c, (int)n->poll_ms + NODE_POLL_QUIET_SLACK_MS);
        rc = call(c, NODE_METHOD__NODE_POLL, &req.base, &node_poll_response__descriptor,
                  (ProtobufCMessage **)&resp, &msg, lost);
        rpcc_set_timeout(c, NODE_CALL_MS);
        rpcc_set_quiet(c, 0);
        OPENSSL_cleanse(&key, sizeof(key));
        free(msg);
        for (size_t i = 0; rc != SMP_OK && i < nc; i++) cold_faults_note(n->faults, corrupt[i]);
        if (rc == SMP_OK) {
            pthread_mutex_lock(&n->key_lock);
            if (resp->ticket_key_id == n->keys.current_id && n->acked_id != resp->ticket_key_id) {
                n->acked_id = resp->ticket_key_id;
                n->acked_at_ms = mono_ms();
                fprintf(stderr, "store_node %s: the master signs tickets with key %u\n",
                        n->node_id, (unsigned)n->acked_id);
            }
            pthread_mutex_unlock(&n->key_lock);
        }
        if (rc < 0 && *lost && !atomic_load(&n->stopping)) /* not our own stop's close */
            fprintf(stderr, "store_node %s: lost the master at %s (%s); registering again\n",
                    n->node_id, polled, rpcc_last_error(c));
        if (rc < 0) break;
        uint64_t answered_ms = mono_ms();
        /* The results went to whoever answered; a new leader ignores the
         * results of tasks it did not hand out. Those finished meanwhile
         * move up for the next poll. */
        pthread_mutex_lock(&n->task_lock);
        for (size_t i = 0; i < n_sent; i++) free_result(n->results[i]);
        n->n_results -= n_sent;
        memmove(n->results, n->results + n_sent, n->n_results * sizeof(*n->results));
        pthread_cond_signal(&n->task_cv); /* room for results again */
        pthread_mutex_unlock(&n->task_lock);
        int again = resp->reregister || rpcc_moves(c) != registered_moves;
        if (resp->n_tasks > 0)
            hold_answer(n, resp);
        else
            node_poll_response__free_unpacked(resp, NULL);
        if (again) {
            fprintf(stderr, "store_node %s: registering again at %s\n", n->node_id,
                    rpcc_endpoint(c));
            rc = SMP_ENOTFOUND;
            break;
        }
        busy = wait_to_poll(n, answered_ms);
    }
    drop_held(n);
    return rc < 0 ? rc : SMP_OK;
}


/* Connect (the first time) or reconnect *c. SMP_OK, or the transport's
 * error -- also the master's refusal of the token (auth.HELLO) or of the
 * protocol (a TLS port without a CA) -- noted with its cause (ctl_note). */
static int link_up(node_runtime *n, rpcc_conn **c)
{
    char err[512] = "";
    int rc;
    if (*c == NULL) {
        rpcc_options o = {.timeout_ms = NODE_CONNECT_MS, .tls_ca = n->tls_ca,
                          .tls_cert = n->tls_cert, .tls_key = n->tls_key, .token = n->token,
                          .follow_pause_max_ms = NODE_FOLLOW_PAUSE_MS};
        rc = rpcc_connect(n->master, &o, c, err, sizeof(err));
    } else {
        rpcc_set_timeout(*c, NODE_CONNECT_MS);
        rc = rpcc_reconnect(*c);
        if (rc < 0) snprintf(err, sizeof(err), "%s", rpcc_last_error(*c));
    }
    if (rc == SMP_OK) {
        rpcc_set_timeout(*c, NODE_CALL_MS);
        return rc;
    }
    /* the transport's sentence names the endpoint as a rule */
    const char *at = strstr(err, n->master) != NULL ? "" : n->master;
    ctl_note(n, STEP_CONNECT, rc, "cannot connect to the master%s%s: %s (%s)", at[0] ? " at " : "",
             at, err[0] ? err : "no cause given", smp_strerror(rc));
    return rc;
}

/* Register, poll, and register again after a lost link, a master's request
 * or a change of leader -- one connection for the node's life, which the
 * transport moves between the masters of the list. Why it cannot is
 * logged once per cause (ctl_note); a refusal that will not change by
 * itself is retried ever more slowly (ctl_back_off), the rest as before: a
 * connect every 50 ms, a refused registration after 200 ms (2 s for a
 * refused shrink, which waits for the operator), a lost link at once. */
static void *ctl_main(void *arg)
{
    node_runtime *n = arg;
    rpcc_conn *c = NULL;
    int lost = 1;
    ctl_note_clear(n);
    while (!atomic_load(&n->stopping)) {
        int rc;
        if (lost && (rc = link_up(n, &c)) < 0) {
            if (settled_failure(rc, 1)) {
                ctl_back_off(n);
            } else {
                n->retry_ms = RETRY_FIRST_MS;
                sleep_ms(50);
            }
            continue;
        }
        lost = 0;
        if ((rc = do_register(n, c, &lost)) == SMP_OK) {
            poll_loop(n, c, &lost);
        } else if (settled_failure(rc, lost)) {
            ctl_back_off(n);
        } else if (!lost) {
            n->retry_ms = RETRY_FIRST_MS;
            pause_unless_stopping(n, rc == SMP_ERANGE ? 2000 : 200);
        }
    }
    rpcc_close(c);
    return NULL;
}

/* -- life ------------------------------------------------------------------- */

static char *dup_or_empty(const char *s)
{
    return strdup(s ? s : "");
}

static int advertise(node_runtime *n, const char *host_override)
{
    char host[128] = "127.0.0.1";
    const char *colon = strrchr(n->data_listen, ':');
    if (host_override && host_override[0]) {
        snprintf(host, sizeof(host), "%s", host_override);
    } else if (colon && colon != n->data_listen && (size_t)(colon - n->data_listen) < sizeof(host)) {
        memcpy(host, n->data_listen, (size_t)(colon - n->data_listen));
        host[colon - n->data_listen] = '\0';
        if (strcmp(host, "0.0.0.0") == 0 || host[0] == '\0') strcpy(host, "127.0.0.1");
    }
    snprintf(n->data_addr, sizeof(n->data_addr), "%s:%d", host, data_server_tcp_port(n->data));
    return SMP_OK;
}

int node_runtime_rotate_ticket_key(node_runtime *n, char *err, size_t errlen)
{
    int rc = SMP_OK;
    uint64_t now = mono_ms(), ready;
    pthread_mutex_lock(&n->key_lock);
    ready = n->acked_at_ms + n->ticket_ttl_ms + ROTATE_MARGIN_MS;
    /* A rotation forgets the previous key, so it waits while that key may
     * still sign live tickets: the master signs with it until it takes the
     * current one, and its tickets live ticket_ttl_ms after that. With no
     * previous key (none rotated since the start) nothing is forgotten: the
     * current key stays accepted as the previous one. */
    if (n->keys.previous.len > 0 && n->acked_id != n->keys.current_id) {
        rc = SMP_EBUSY;
        wm_errbuf(err, errlen, "node %s: ticket key %u is not yet confirmed by the master, "
                  "which may still sign with key %u; a rotation now would forget that key",
                  n->node_id, (unsigned)n->keys.current_id, (unsigned)n->keys.previous_id);
    } else if (n->keys.previous.len > 0 && now < ready) {
        rc = SMP_EBUSY;
        wm_errbuf(err, errlen, "node %s: tickets signed with key %u may live %llu ms more and a "
                  "rotation forgets that key; rotate after that", n->node_id,
                  (unsigned)n->keys.previous_id, (unsigned long long)(ready - now));
    } else if ((rc = ticket_keyring_rotate(&n->keys)) < 0) {
        wm_errbuf(err, errlen, "node %s: no random bytes for a ticket key", n->node_id);
    }
    uint32_t id = n->keys.current_id;
    pthread_mutex_unlock(&n->key_lock);
    if (rc < 0) return rc;
    uv_async_send(&n->keys_async);
    fprintf(stderr, "store_node %s: ticket key rotated to key %u (key %u still accepted)\n",
            n->node_id, (unsigned)id, (unsigned)(id - 1));
    return SMP_OK;
}

uint32_t node_runtime_ticket_key_id(node_runtime *n)
{
    pthread_mutex_lock(&n->key_lock);
    uint32_t id = n->acked_id;
    pthread_mutex_unlock(&n->key_lock);
    return id;
}

void node_runtime_signal_stop(node_runtime *n)
{
    if (n) atomic_store(&n->stopping, 1);
}

void node_runtime_stop(node_runtime *n)
{
    if (n == NULL) return;
    atomic_store(&n->stopping, 1);
    pthread_mutex_lock(&n->task_lock);
    pthread_cond_broadcast(&n->task_cv);
    pthread_cond_broadcast(&n->done_cv);
    pthread_mutex_unlock(&n->task_lock);
    if (n->ctl_started) pthread_join(n->ctl_thread, NULL);
    if (n->task_started) pthread_join(n->task_thread, NULL); /* after its running task */
    if (n->held != NULL) node_poll_response__free_unpacked(n->held, NULL);
    for (size_t i = 0; i < n->n_results; i++) free_result(n->results[i]);
    if (n->data_started) {
        uv_async_send(&n->stop_async);
        pthread_join(n->data_thread, NULL);
        uv_loop_close(&n->loop);
    }
    node_local_stop(n->local); /* before the segment it hands out */
    node_fsck_free(n->fsck);
    cold_faults_free(n->faults); /* after the data server that notes them */
    cold_watch_stop(n->cold_watch);
    cold_close(n->cold);
    seg_close(n->seg);
    pthread_mutex_destroy(&n->key_lock);
    pthread_mutex_destroy(&n->task_lock);
    pthread_cond_destroy(&n->task_cv);
    pthread_cond_destroy(&n->done_cv);
    OPENSSL_cleanse(&n->keys, sizeof(n->keys));
    free(n->master);
    free(n->token);
    free(n->node_id);
    free(n->tenant);
    free(n->local_socket);
    free(n->segment_dir);
    free(n->cold_dir);
    free(n->data_listen);
    free(n->tls_ca);
    free(n->tls_cert);
    free(n->tls_key);
    free(n->data_tls_cert);
    free(n->data_tls_key);
    free(n->data_tls_key_prefix);
    SSL_CTX_free(n->tls_pending);
    free(n);
}

/* The TLS context of the data port from opt's data_tls_cert / data_tls_key
 * (*out NULL when neither is given). SMP_EINVAL names the setting, the file
 * and the cause: one without the other, missing, not PEM, key not matching. */
static int data_tls_ctx(const node_runtime_options *opt, SSL_CTX **out, char *err, size_t errlen)
{
    const char *kp = opt->data_tls_key_prefix != NULL ? opt->data_tls_key_prefix : "--data-tls-";
    int have_cert = opt->data_tls_cert != NULL && opt->data_tls_cert[0] != '\0';
    int have_key = opt->data_tls_key != NULL && opt->data_tls_key[0] != '\0';
    *out = NULL;
    if (!have_cert && !have_key)
        return SMP_OK;
    if (have_cert != have_key) {
        wm_errbuf(err, errlen, "node %s: %scert needs %skey (and the other way round)",
                  opt->node_id, kp, kp);
        return SMP_EINVAL;
    }
    return data_server_tls_ctx(opt->data_tls_cert, opt->data_tls_key, kp, out, err, errlen);
}

int node_runtime_start(const node_runtime_options *opt,
                       node_runtime **out,
                       char *err,
                       size_t errlen)
{
    char path[4096];
    struct stat st;
    int rc;
    node_runtime *n = calloc(1, sizeof(*n));
    if (n == NULL) return SMP_ENOMEM;
    pthread_mutex_init(&n->key_lock, NULL);
    pthread_mutex_init(&n->task_lock, NULL);
    pthread_cond_init(&n->task_cv, NULL);
    pthread_cond_init(&n->done_cv, NULL);
    n->ticket_ttl_ms = 60000;
    n->master = dup_or_empty(opt->master);
    if (opt->token != NULL && (n->token = strdup(opt->token)) == NULL) {
        rc = SMP_ENOMEM;
        goto fail;
    }
    n->node_id = dup_or_empty(opt->node_id);
    n->tenant = dup_or_empty(opt->tenant);
    n->local_socket = dup_or_empty(opt->local_socket);
    n->segment_dir = dup_or_empty(opt->segment_dir);
    n->cold_dir = dup_or_empty(opt->cold_dir);
    n->data_listen = dup_or_empty(opt->data_listen);
    n->tls_ca = opt->tls_ca ? strdup(opt->tls_ca) : NULL;
    n->tls_cert = opt->tls_cert ? strdup(opt->tls_cert) : NULL;
    n->tls_key = opt->tls_key ? strdup(opt->tls_key) : NULL;
    n->segment_bytes = opt->segment_bytes;
    n->persist_flags = opt->cold_verify_from_device ? COLD_VERIFY_FROM_DISK : 0;
    if (!n->master || !n->node_id || !n->segment_dir || !n->cold_dir || !n->data_listen ||
        !n->tenant || !n->local_socket) {
        rc = SMP_ENOMEM;
        goto fail;
    }
    if ((rc = seg_path_for(n->segment_dir, n->node_id, path, sizeof(path))) < 0) {
        wm_errbuf(err, errlen, "node %s: no segment path in %s", n->node_id, n->segment_dir);
        goto fail;
    }
    n->seg_survived = stat(path, &st) == 0;
    seg_options so = {.dir = n->segment_dir, .id = n->node_id, .size = n->segment_bytes,
                      .preallocate = 1, .prefault = opt->segment_prefault};
    if ((rc = seg_open(&so, &n->seg, err, errlen)) < 0) goto fail;
    char pages[96];
    if (seg_mount_pages(NULL, n->segment_dir, pages, sizeof(pages)) == 1)
        fprintf(stderr, "store_node %s: segment %s is on a tmpfs of 4 KiB pages: every process "
                "that maps it faults each page once; a tmpfs mounted with huge=always gives it "
                "2 MiB pages (node.segment_dir)\n", n->node_id, seg_path(n->seg));
    if (seg_grown_from(n->seg) > 0)
        fprintf(stderr, "store_node %s: segment grown in place from %llu to %llu bytes (every "
                "replica kept)\n", n->node_id, (unsigned long long)seg_grown_from(n->seg),
                (unsigned long long)seg_size(n->seg));
    if ((rc = cold_open(n->cold_dir, &n->cold, err, errlen)) < 0) goto fail;
    if ((rc = node_fsck_new(n->seg, n->cold, n->cold_dir, &n->fsck)) < 0) goto fail;
    if ((rc = cold_watch_start(n->cold, &n->cold_watch)) < 0) goto fail;
    if ((n->faults = cold_faults_new()) == NULL) {
        rc = SMP_ENOMEM;
        wm_errbuf(err, errlen, "node %s: out of memory", n->node_id);
        goto fail;
    }
    if (n->tenant[0] != '\0') {
        node_local_peers none = {0};
        if ((rc = node_local_start(n->local_socket, n->node_id, n->tenant,
                                   opt->local_peers ? opt->local_peers : &none, n->seg, &n->local,
                                   err, errlen)) < 0)
            goto fail;
    }
    if ((rc = ticket_keyring_init(&n->keys)) < 0) {
        wm_errbuf(err, errlen, "node %s: cannot generate a ticket key", n->node_id);
        goto fail;
    }
    n->served_id = n->keys.current_id; /* the data server starts with it */
    if (uv_loop_init(&n->loop) != 0) {
        rc = SMP_EIO;
        goto fail;
    }
    data_server_options dso = {.listen_tcp = n->data_listen,
                               .keys = &n->keys,
                               .allow_unticketed_reads = opt->allow_unticketed_reads,
                               .socket_buffer_bytes = 4 << 20};
    if ((rc = data_tls_ctx(opt, &dso.tls, err, errlen)) < 0) {
        uv_loop_close(&n->loop);
        goto fail;
    }
    n->data_tls = dso.tls != NULL;
    if (n->data_tls &&
        ((n->data_tls_cert = strdup(opt->data_tls_cert)) == NULL ||
         (n->data_tls_key = strdup(opt->data_tls_key)) == NULL ||
         (n->data_tls_key_prefix = strdup(opt->data_tls_key_prefix != NULL
                                              ? opt->data_tls_key_prefix : "--data-tls-")) == NULL)) {
        SSL_CTX_free(dso.tls);
        uv_loop_close(&n->loop);
        rc = SMP_ENOMEM;
        goto fail;
    }
    rc = data_server_create(&n->loop, &dso, &n->data, err, errlen);
    SSL_CTX_free(dso.tls); /* the server holds its own reference */
    if (rc == SMP_OK) {
        /* Clients read cold-only objects here; a file they find corrupt
           goes to the master with a poll (node_cold_faults.h). */
        data_server_set_cold(n->data, n->cold, n->faults);
        if ((rc = data_server_add_segment(n->data, n->seg)) == SMP_OK)
            rc = data_server_start(n->data, err, errlen);
    }
    if (rc < 0) {
        if (n->data) data_server_close(n->data);
        uv_run(&n->loop, UV_RUN_DEFAULT);
        uv_loop_close(&n->loop);
        goto fail;
    }
    advertise(n, opt->advertise_host);
    uv_async_init(&n->loop, &n->stop_async, on_stop);
    n->stop_async.data = n;
    uv_async_init(&n->loop, &n->keys_async, on_keys);
    n->keys_async.data = n;
    uv_async_init(&n->loop, &n->tls_async, on_tls);
    n->tls_async.data = n;
    if (pthread_create(&n->data_thread, NULL, data_main, n) != 0) {
        data_server_close(n->data);
        uv_close((uv_handle_t *)&n->stop_async, NULL);
        uv_close((uv_handle_t *)&n->keys_async, NULL);
        uv_close((uv_handle_t *)&n->tls_async, NULL);
        uv_run(&n->loop, UV_RUN_DEFAULT);
        uv_loop_close(&n->loop);
        rc = SMP_EIO;
        goto fail;
    }
    n->data_started = 1;
    if (pthread_create(&n->task_thread, NULL, task_main, n) != 0) {
        rc = SMP_EIO;
        goto fail;
    }
    n->task_started = 1;
    if (pthread_create(&n->ctl_thread, NULL, ctl_main, n) != 0) {
        rc = SMP_EIO;
        goto fail;
    }
    n->ctl_started = 1;
    *out = n;
    return SMP_OK;
fail:
    if (err && err[0] == '\0') wm_errbuf(err, errlen, "node: %s", smp_strerror(rc));
    node_runtime_stop(n);
    return rc;
}

int node_runtime_reload_tls(node_runtime *n, char *what, size_t whatlen, char *err, size_t errlen)
{
    SSL_CTX *ctx = NULL;
    int rc;
    if (!n->data_tls) return 0;
    if ((rc = data_server_tls_ctx(n->data_tls_cert, n->data_tls_key, n->data_tls_key_prefix, &ctx,
                                  err, errlen)) < 0)
        return rc;
    if (what != NULL) rpc_tls_describe(ctx, what, whatlen);
    pthread_mutex_lock(&n->key_lock);
    SSL_CTX_free(n->tls_pending); /* a reload the loop has not taken yet: this one wins */
    n->tls_pending = ctx;
    pthread_mutex_unlock(&n->key_lock);
    uv_async_send(&n->tls_async);
    return 1;
}

int node_runtime_data_port(const node_runtime *n)
{
    const char *colon = strrchr(n->data_addr, ':');
    return colon ? atoi(colon + 1) : -1;
}
