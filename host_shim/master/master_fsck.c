/* master_fsck.c -- ADMIN_FSCK: what the nodes hold that nothing owns.
 *
 * The master knows which replicas exist and which segment ranges are
 * occupied (memory replicas, in-flight puts, replica reservations); a node
 * knows its cold files and the bytes of its segment. A check sends every
 * up node a SCAN carrying the unoccupied ranges of its segment; the node
 * answers with the non-zero 64-byte blocks of those ranges and every .cold
 * file in its directory -- in pages of FSCK_PAGE_BYTES, a cold tier of a
 * million files being far more than one frame (listen.max_frame_bytes): each
 * page holds the names after the last of the page before, in order, and says
 * whether more follow; the master asks for the next until none do. A page
 * that does not answer the page asked, is larger than asked, has names out
 * of order, or comes from a node without pages after the first, ends that
 * node's check with the cause (nothing repaired there); a node from before
 * pages answers the first with every file, taken as the whole. Each page's
 * files are counted as they come, and a file whose object's replica on the
 * node names it is settled then; the others are judged at the end, on the
 * master's state then (the scan took time):
 *   - a cold file is an orphan when no replica of the node names it and no
 *     ensure_cold job of its key is between writing the file and recording
 *     it (master_persist_in_flight);
 *   - a non-zero block is orphaned segment bytes when its range is still
 *     wholly unoccupied (bytes a put wrote before the master lost it, or an
 *     object's bytes left when it went: data no object owns);
 *   - a cold file whose header or size is bad but which a replica of the
 *     node names is a corrupt replica: reported with the replica's key;
 *   - a complete cold replica of the node (at the check's start, and still
 *     at its end) whose file no page listed is a missing replica -- its
 *     file was deleted under it -- reported with the corrupt ones (a
 *     FsckColdFile of length 0 marked missing; the log says "missing") and
 *     dropped by repair as they are (judge_missing; not in a sweep or a
 *     background run);
 *   - with deep, once its pages are judged, each memory replica in the
 *     node's segment is hashed there (VERIFY, FSCK_VERIFY_WINDOW out at a
 *     time): one whose bytes do not hash to its object's SHA-256, and that
 *     is still the object's replica when the answer comes, is a corrupt
 *     memory replica.
 * The first page also names the node's stale temporary cold files (writes
 * a crash cut off; master_fsck_tmp.h): a check reports them, and only with
 * repair does the node delete them as it scans.
 * Read-only by default. With repair, every orphan file gets a DELETE_COLD
 * task, every corrupt replica (cold or memory) is dropped durably (master_drop_replica: the
 * plugins hear of the loss, and the file, no replica's any more, is
 * deleted by the reclaim that follows every record), and the orphaned ranges are first held in the allocator (so no put
 * or load is given them meanwhile; a range taken since the scan is left
 * alone and counted) and then zeroed by one SCRUB task, after which the
 * holds are released. The reply waits for every task. Nodes that are not up
 * are counted, not checked. The report also counts the objects left with no
 * complete replica on any node (a dropped only replica; repair cannot
 * bring those back, a plugin or a removal must), naming the first
 * FSCK_REPORT_LOST_MAX. Runs on the leader only.
 * The same run, with repair and for segment bytes only, sweeps a node when
 * it registers and again 5 s later (master_fsck_sweep_node): what a
 * master's crash, a node's stop or a writer of a put they lost left in its
 * free ranges is zeroed without an operator, and logged.
 * A background run (master_fsck_background_start, on fsck.every_s) is the
 * deep check of the cold files alone, paced: after each page the next is
 * asked only once the page's bytes over fsck.bytes_per_s have passed
 * (master_fsck_background_tick), so rot in a cold copy is found while the
 * memory copy it would be repaired from still exists. It repairs only what
 * it must -- a corrupt replica is dropped, as its page comes, and the
 * plugin that owns it hears of the loss -- and leaves orphan files and
 * segment bytes to the registration's
 * reclaim, the sweeps and `weightctl fsck --repair`; it logs what it found
 * and hands its caller the totals and the nodes it still owes a check:
 * down at its start, or whose check ended in an error, each with the last
 * file read (a later run over those alone goes on there). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_rpc.pb-c.h"
#include "host_uthash.h"
#include "master_fsck_tmp.h"
#include "master_internal.h"
#include "node_cold.h" /* COLD_HEADER_BYTES */
#include "node_rpc.pb-c.h"

/* The bound of a SCAN page's encoded answer, well under any frame limit. */
#define FSCK_PAGE_BYTES (256u << 10)
/* Replicas of one object looked at to settle a file at once (more: judged at the end). */
#define FSCK_SETTLE_REPLICAS 16
/* Orphan files a report names per node (all are counted, and --repair
 * deletes all): a cold tier that is nearly all orphans (a wiped master)
 * would otherwise make a report past listen.max_frame_bytes. */
#define FSCK_REPORT_FILES_MAX 10000
/* Keys of objects with no replica left a report names (all are counted). */
#define FSCK_REPORT_LOST_MAX 1000

typedef struct fsck_file {
    char *name;
    char *key;
    uint64_t length;
    int corrupt;
    int missing;        /* a replica names it, but the node listed no such file */
} fsck_file;

/* fsck --deep: a memory replica of the node whose bytes did not hash to
 * its object's SHA-256 (a stray write into the mapped segment). */
typedef struct fsck_mem {
    char *key;
    uint64_t offset, length;
    uint8_t sha[32];    /* the object's when it was judged */
    int only;           /* the object's only complete replica then */
} fsck_mem;

typedef struct fsck_run fsck_run;

typedef struct fsck_node {
    fsck_run *run;
    char *node;
    char *segment;
    char *error;
    int error_in_repair; /* error arose while repairing (the check went through) */
    uint64_t cold_files, cold_bytes;
    fsck_file *orphans; /* while the pages come: the files not settled (candidates) */
    size_t n_orphans, cap_orphans;
    fsck_file *corrupt; /* judged: corrupt files a replica names (key: its object), and
                           the files replicas name that the node does not have (missing) */
    size_t n_corrupt;
    size_t corrupt_asked; /* of them, the first ones whose replica's drop was asked */
    uint64_t replicas_dropped;
    char *after;        /* the last cold name of the pages so far ("" before the first) */
    uint32_t pages;     /* pages taken */
    /* A check (not a sweep, not a background run): the paths the node's
     * complete cold replicas named at its start, each crossed off as the
     * pages list its file; those left at the end are judged missing. */
    struct named_path *expect;
    uint64_t *dirty;    /* the first page's non-zero (offset, length) pairs */
    size_t n_dirty;
    uint64_t capacity, used;
    uint64_t *ranges; /* orphaned (offset, length) pairs */
    size_t n_ranges;
    uint64_t orphan_bytes;
    uint64_t *held;   /* repair: pairs held in the allocator */
    size_t n_held;
    uint64_t files_removed, zeroed, skipped;
    master_fsck_tmps tmps; /* the stale temporary files its first page reported */
    uint64_t page_due_ms; /* background: the next page is asked then (0: not waiting) */
    int finished;         /* background: its pages are over (or its check ended) */
    /* --deep: the memory replicas, hashed on the node FSCK_VERIFY_WINDOW at a time */
    char *mem_after;    /* the walk goes on after this key (NULL: from the first) */
    int mem_walking;    /* replicas left to send */
    int mem_done;       /* the walk ended and every answer came */
    size_t mem_inflight;
    uint64_t mem_checked;
    fsck_mem *mem_bad;  /* those that did not hold their bytes */
    size_t n_mem_bad, cap_mem_bad;
    uint64_t mem_dropped;
} fsck_node;

struct fsck_run {
    master *m;
    smp_rpc_call *call; /* NULL: a sweep (master_fsck_sweep_node), logged */
    int repair;
    int deep;           /* fsck --deep: the nodes hash every cold file's data */
    int segment_only;   /* a sweep leaves files to the registration's reclaim */
    fsck_node *nodes;
    size_t n_nodes, cap_nodes;
    uint32_t nodes_down;
    size_t outstanding; /* tasks not yet answered (and background pages waiting) */
    const char *only_node; /* a sweep's node */
    /* A background run: paced by bytes_per_s, the cold files alone, only
     * corrupt replicas repaired; done is told the totals (not when it was
     * abandoned: the master is stopping). */
    int background, abandoned;
    uint64_t bytes_per_s;
    master_fsck_done_fn done;
    master_fsck_progress_fn progress; /* after each page: the nodes it still owes */
    const master_fsck_cursor *only;   /* at the start: the nodes it checks (borrowed; NULL: all) */
    size_t n_only;
    master_fsck_cursor *down; /* nodes owed, down at the start (owned strings) */
    size_t n_down;
};

/* A cold path named by a replica of the node being judged, and the key of
 * the first object whose replica names it. */
typedef struct named_path {
    UT_hash_handle hh;
    char *key;     /* in the same allocation, after path */
    char path[];
} named_path;

static void free_files(fsck_file *v, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        free(v[k].name);
        free(v[k].key);
    }
    free(v);
}

static void named_free(named_path **set);

static void run_free(fsck_run *r)
{
    for (size_t i = 0; i < r->n_nodes; i++) {
        fsck_node *n = &r->nodes[i];
        free_files(n->orphans, n->n_orphans);
        free_files(n->corrupt, n->n_corrupt);
        free(n->node);
        free(n->segment);
        free(n->error);
        free(n->ranges);
        free(n->held);
        free(n->after);
        free(n->dirty);
        free(n->mem_after);
        named_free(&n->expect);
        master_fsck_tmps_free(&n->tmps);
        for (size_t k = 0; k < n->n_mem_bad; k++) free(n->mem_bad[k].key);
        free(n->mem_bad);
    }
    master_fsck_owed_free(r->down, r->n_down);
    free(r->nodes);
    free(r);
}

/* A sweep's outcome, logged when it found or failed anything. */
static void sweep_log(const fsck_run *r)
{
    for (size_t i = 0; i < r->n_nodes; i++) {
        const fsck_node *n = &r->nodes[i];
        if (n->error != NULL)
            fprintf(stderr, "store_master: node %s: sweep of segment %s: %s; `weightctl fsck --repair` "
                    "retries\n", n->node, n->segment, n->error);
        else if (n->orphan_bytes > 0)
            fprintf(stderr, "store_master: node %s: sweep of segment %s: %llu orphaned bytes in %zu "
                    "range(s), %llu zeroed, %llu taken meanwhile\n", n->node, n->segment,
                    (unsigned long long)n->orphan_bytes, n->n_ranges, (unsigned long long)n->zeroed,
                    (unsigned long long)n->skipped);
    }
}

/* The keys of objects without a replica a report names (borrowed from
 * the store until the reply is encoded: nothing changes it meanwhile). */
typedef struct lost_keys {
    char *keys[FSCK_REPORT_LOST_MAX];
    size_t n;
} lost_keys;

static int note_lost(void *arg, const char *key)
{
    lost_keys *l = arg;
    if (l->n < FSCK_REPORT_LOST_MAX) l->keys[l->n++] = (char *)key;
    return 0;
}

/* The nodes a background run still owes a check, each after the last file
 * of its last page (where a later run over them goes on): those paging,
 * those whose check ended in an error before they were judged (the node
 * went down, a page was refused), and those down at the start. NULL when
 * out of memory; the strings are borrowed from r. */
static master_fsck_cursor *owed_of(const fsck_run *r, size_t *n_owed)
{
    master_fsck_cursor *c = calloc(r->n_nodes + r->n_down + 1, sizeof(*c));
    size_t k = 0;
    if (c == NULL) return NULL;
    for (size_t i = 0; i < r->n_nodes; i++) {
        const fsck_node *n = &r->nodes[i];
        if (!n->finished || (n->error != NULL && !n->error_in_repair))
            c[k++] = (master_fsck_cursor){n->node, n->after, n->error != NULL};
    }
    for (size_t i = 0; i < r->n_down; i++) c[k++] = r->down[i];
    *n_owed = k;
    return c;
}

/* A background run's outcome: a line per node, and the totals to done. */
static void background_end(fsck_run *r)
{
    master *m = r->m;
    master_fsck_summary sum = {.nodes_down = r->nodes_down};
    for (size_t i = 0; i < r->n_nodes; i++) {
        const fsck_node *n = &r->nodes[i];
        sum.nodes++;
        sum.cold_files += n->cold_files;
        sum.cold_bytes += n->cold_bytes;
        sum.corrupt += n->n_corrupt;
        sum.dropped += n->replicas_dropped;
        sum.orphans += n->n_orphans;
        if (n->error != NULL) {
            sum.nodes_failed++;
            fprintf(stderr, "store_master: background fsck: node %s: %s%s\n", n->node, n->error,
                    n->error_in_repair ? "" : " (its check ended there: nothing judged)");
        }
        if (n->n_corrupt > 0 || n->n_orphans > 0 || (n->error == NULL && n->pages > 1))
            fprintf(stderr, "store_master: background fsck: node %s: %llu cold files, %llu bytes "
                    "read in %u pages: %zu corrupt (%llu replicas dropped), %zu files no replica "
                    "names (`weightctl fsck --repair` deletes them)\n",
                    n->node, (unsigned long long)n->cold_files, (unsigned long long)n->cold_bytes,
                    (unsigned)n->pages, n->n_corrupt, (unsigned long long)n->replicas_dropped,
                    n->n_orphans);
        if (n->tmps.total > 0)
            fprintf(stderr, "store_master: background fsck: node %s: %llu stale temporary cold "
                    "files, %llu bytes (`weightctl fsck --repair` deletes them)\n", n->node,
                    (unsigned long long)n->tmps.total, (unsigned long long)n->tmps.bytes);
    }
    sum.objects_without_replica = obj_visit_unreplicated(master_objs(m), NULL, NULL);
    master_fsck_cursor *owed = owed_of(r, &sum.n_owed); /* NULL: none kept (out of memory) */
    sum.owed = owed;
    r->done(m, &sum);
    free(owed);
}

/* Answer the call with the report (a sweep: log it) and free the run. */
static void run_reply(fsck_run *r)
{
    master *m = r->m;
    obj_stats os;
    if (r->background) {
        if (m->fsck_background == r) m->fsck_background = NULL;
        if (!r->abandoned) background_end(r);
        run_free(r);
        return;
    }
    if (r->call == NULL) {
        sweep_log(r);
        run_free(r);
        return;
    }
    FsckReport rep = FSCK_REPORT__INIT;
    FsckNode *nodes = calloc(r->n_nodes ? r->n_nodes : 1, sizeof(*nodes));
    FsckNode **nptrs = calloc(r->n_nodes ? r->n_nodes : 1, sizeof(*nptrs));
    lost_keys *lost = calloc(1, sizeof(*lost));
    if (nodes == NULL || nptrs == NULL || lost == NULL) {
        rpc_reply_error(r->call, SMP_ENOMEM, "fsck: out of memory for the report");
        goto free_all;
    }
    for (size_t i = 0; i < r->n_nodes; i++) {
        fsck_node *n = &r->nodes[i];
        FsckNode *o = &nodes[i];
        fsck_node__init(o);
        o->node = n->node;
        o->error = n->error ? n->error : "";
        o->repair_error = n->error && n->error_in_repair ? n->error : "";
        o->cold_files = n->cold_files;
        o->cold_bytes = n->cold_bytes;
        o->segment = n->segment;
        o->segment_capacity = n->capacity;
        o->segment_used = n->used;
        o->orphan_segment_bytes = n->orphan_bytes;
        o->files_removed = n->files_removed;
        o->segment_bytes_zeroed = n->zeroed;
        o->skipped_in_use = n->skipped;
        o->orphan_files_total = n->n_orphans;
        o->replicas_dropped = n->replicas_dropped;
        o->memory_replicas_checked = n->mem_checked;
        o->memory_replicas_dropped = n->mem_dropped;
        master_fsck_tmps_report(&n->tmps, o);
        o->corrupt_memory_replicas = calloc(n->n_mem_bad ? n->n_mem_bad : 1, sizeof(FsckMemoryReplica *));
        for (size_t k = 0; o->corrupt_memory_replicas != NULL && k < n->n_mem_bad &&
                           k < FSCK_REPORT_FILES_MAX; k++) {
            FsckMemoryReplica *g = malloc(sizeof(*g));
            if (g == NULL) break;
            fsck_memory_replica__init(g);
            g->key = n->mem_bad[k].key;
            g->offset = n->mem_bad[k].offset;
            g->length = n->mem_bad[k].length;
            g->only_replica = n->mem_bad[k].only;
            o->corrupt_memory_replicas[o->n_corrupt_memory_replicas++] = g;
        }
        size_t listed = n->n_orphans < FSCK_REPORT_FILES_MAX ? n->n_orphans : FSCK_REPORT_FILES_MAX;
        o->orphan_files = calloc(listed ? listed : 1, sizeof(FsckColdFile *));
        o->orphan_ranges = calloc(n->n_ranges ? n->n_ranges : 1, sizeof(FsckRange *));
        size_t n_bad = n->n_corrupt < FSCK_REPORT_FILES_MAX ? n->n_corrupt : FSCK_REPORT_FILES_MAX;
        o->corrupt_replicas = calloc(n_bad ? n_bad : 1, sizeof(FsckColdFile *));
        if (o->orphan_files == NULL || o->orphan_ranges == NULL || o->corrupt_replicas == NULL) continue;
        for (size_t k = 0; k < n_bad; k++) {
            FsckColdFile *f = malloc(sizeof(*f));
            if (f == NULL) break;
            fsck_cold_file__init(f);
            f->name = n->corrupt[k].name;
            f->key = n->corrupt[k].key;
            f->length = n->corrupt[k].length;
            f->corrupt = 1;
            f->missing = n->corrupt[k].missing != 0;
            o->corrupt_replicas[o->n_corrupt_replicas++] = f;
        }
        for (size_t k = 0; k < listed; k++) {
            FsckColdFile *f = malloc(sizeof(*f));
            if (f == NULL) break;
            fsck_cold_file__init(f);
            f->name = n->orphans[k].name;
            f->key = n->orphans[k].key;
            f->length = n->orphans[k].length;
            f->corrupt = n->orphans[k].corrupt;
            o->orphan_files[o->n_orphan_files++] = f;
        }
        for (size_t k = 0; k < n->n_ranges; k++) {
            FsckRange *g = malloc(sizeof(*g));
            if (g == NULL) break;
            fsck_range__init(g);
            g->offset = n->ranges[2 * k];
            g->length = n->ranges[2 * k + 1];
            o->orphan_ranges[o->n_orphan_ranges++] = g;
        }
        nptrs[i] = o;
    }
    obj_store_stats(master_objs(m), &os);
    rep.n_nodes = r->n_nodes;
    rep.nodes = nptrs;
    rep.repaired = r->repair;
    rep.cold_replica_bytes = os.replica_bytes_by_kind[SMP_REPLICA_COLD];
    rep.memory_used = os.memory_used;
    rep.nodes_down = r->nodes_down;
    rep.objects_without_replica = obj_visit_unreplicated(master_objs(m), note_lost, lost);
    rep.n_objects_without_replica_keys = lost->n;
    rep.objects_without_replica_keys = lost->keys;
    master_reply_msg(r->call, &rep.base);
free_all:
    free(lost);
    for (size_t i = 0; nodes != NULL && i < r->n_nodes; i++) {
        for (size_t k = 0; k < nodes[i].n_orphan_files; k++) free(nodes[i].orphan_files[k]);
        for (size_t k = 0; k < nodes[i].n_orphan_ranges; k++) free(nodes[i].orphan_ranges[k]);
        for (size_t k = 0; k < nodes[i].n_corrupt_replicas; k++) free(nodes[i].corrupt_replicas[k]);
        for (size_t k = 0; k < nodes[i].n_corrupt_memory_replicas; k++)
            free(nodes[i].corrupt_memory_replicas[k]);
        free(nodes[i].corrupt_memory_replicas);
        master_fsck_tmps_report_free(&nodes[i]);
        free(nodes[i].corrupt_replicas);
        free(nodes[i].orphan_files);
        free(nodes[i].orphan_ranges);
    }
    free(nodes);
    free(nptrs);
    run_free(r);
}

static void task_ended(fsck_run *r)
{
    if (--r->outstanding == 0) run_reply(r);
}

/* The node's error (its first): the status, then why ("" or NULL: none). */
static void set_error_why(fsck_node *n, int status, const char *why)
{
    char buf[600];
    if (n->error != NULL) return;
    snprintf(buf, sizeof(buf), "%s%s%s", smp_strerror(status), why && why[0] ? ": " : "",
             why ? why : "");
    n->error = strdup(buf);
}

static void set_error(fsck_node *n, int status, const TaskResult *res)
{
    set_error_why(n, status, res ? res->error : NULL);
}

/* Why a node task ended in error, for the report: the node's words when it
 * answered; when it did not (status SMP_EIO, no result: it stopped polling
 * and was marked down, or went away), that; else NULL (the code alone). */
static const char *task_why(int status, const TaskResult *res)
{
    if (status == SMP_OK && res != NULL && res->error != NULL && res->error[0] != '\0') return res->error;
    if (status == SMP_EIO && res == NULL) return "the node stopped answering during the check (marked down)";
    return NULL;
}

/* set_error_why for a step of the repair. */
static void set_repair_error(fsck_node *n, int status, const char *why)
{
    if (n->error != NULL) return;
    set_error_why(n, status, why);
    n->error_in_repair = 1;
}

/* -- repair ------------------------------------------------------------------------ */

static void on_file_deleted(master *m, void *arg, int status, const TaskResult *res)
{
    fsck_node *n = arg;
    if (status == SMP_OK && res != NULL && res->status == 0) {
        n->files_removed++;
        host_metric_add(m->m.cold_reclaimed, NULL, 1);
    } else {
        set_repair_error(n, status < 0 ? status : res ? res->status : SMP_EIO, task_why(status, res));
    }
    task_ended(n->run);
}

static void on_scrubbed(master *m, void *arg, int status, const TaskResult *res)
{
    fsck_node *n = arg;
    int ok = status == SMP_OK && res != NULL && res->status == 0;
    for (size_t k = 0; k < n->n_held; k++) {
        if (ok) n->zeroed += n->held[2 * k + 1];
        obj_segment_release_range(master_objs(m), n->segment, n->held[2 * k], n->held[2 * k + 1]);
    }
    if (!ok) set_repair_error(n, status < 0 ? status : res ? res->status : SMP_EIO, task_why(status, res));
    task_ended(n->run);
}

static void on_replica_dropped(master *m, void *arg, int status, uint64_t seq)
{
    fsck_node *n = arg;
    (void)m;
    (void)seq;
    if (status == SMP_OK) n->replicas_dropped++;
    else set_repair_error(n, status, "dropping a corrupt replica");
    task_ended(n->run);
}

/* Drop the replicas of n's corrupt files not asked yet (one gone
 * meanwhile is not an error); a background run logs each as it goes. */
static void drop_corrupt(master *m, fsck_node *n)
{
    for (; n->corrupt_asked < n->n_corrupt; n->corrupt_asked++) {
        fsck_file *c = &n->corrupt[n->corrupt_asked];
        if (n->run->background)
            fprintf(stderr, "store_master: background fsck: node %s: cold file %s of %s is "
                    "corrupt: its replica is dropped\n", n->node, c->name, c->key);
        obj_replica bad = {.kind = SMP_REPLICA_COLD, .node = n->node, .path = c->name};
        n->run->outstanding++;
        int rc = master_drop_replica(m, c->key, &bad, on_replica_dropped, n);
        if (rc < 0) {
            n->run->outstanding--;
            if (rc != SMP_ENOTFOUND) set_repair_error(n, rc, "dropping a corrupt replica");
        }
    }
}

/* What a repair of a corrupt memory replica was doing when it failed. */
#define MEM_DROPPING "dropping a memory replica that did not hold its bytes"
#define MEM_REHASHING "hashing a corrupt memory replica again before dropping it"

static void on_memory_dropped(master *m, void *arg, int status, uint64_t seq)
{
    fsck_node *n = arg;
    (void)m;
    (void)seq;
    if (status == SMP_OK) n->mem_dropped++;
    else set_repair_error(n, status, MEM_DROPPING);
    task_ended(n->run);
}

static void mem_repair(master *m, fsck_node *n);

/* Drop the corrupt replicas (cold files and, after --deep, memory ranges:
 * mem_repair), delete the orphan files and zero the orphaned ranges still
 * unoccupied. */
static void repair_node(master *m, fsck_node *n)
{
    fsck_run *r = n->run;
    mem_repair(m, n);
    if (!r->segment_only) drop_corrupt(m, n);
    for (size_t k = 0; k < n->n_orphans && !r->segment_only && !r->background; k++) {
        r->outstanding++;
        int rc = master_node_task(m, n->node, TASK_KIND__TASK_DELETE_COLD, n->orphans[k].key, 0, 0,
                                  NULL, n->orphans[k].name, on_file_deleted, n);
        if (rc < 0) {
            r->outstanding--;
            set_repair_error(n, rc, "deleting an orphan cold file");
        }
    }
    if (n->n_ranges == 0) return;
    if ((n->held = malloc(n->n_ranges * 2 * sizeof(uint64_t))) == NULL) {
        set_repair_error(n, SMP_ENOMEM, "zeroing orphaned segment bytes");
        return;
    }
    for (size_t k = 0; k < n->n_ranges; k++) {
        uint64_t off = n->ranges[2 * k], len = n->ranges[2 * k + 1];
        if (obj_segment_hold_range(master_objs(m), n->segment, off, len) != SMP_OK) {
            n->skipped++; /* taken since the scan: its bytes are someone's now */
            continue;
        }
        n->held[2 * n->n_held] = off;
        n->held[2 * n->n_held + 1] = len;
        n->n_held++;
    }
    if (n->n_held == 0) return;
    r->outstanding++;
    int rc = master_node_task_ranges(m, n->node, TASK_KIND__TASK_SCRUB, "", 0, 0, NULL, NULL, n->held,
                                     n->n_held, on_scrubbed, n);
    if (rc < 0) {
        r->outstanding--;
        for (size_t k = 0; k < n->n_held; k++)
            obj_segment_release_range(master_objs(m), n->segment, n->held[2 * k], n->held[2 * k + 1]);
        n->n_held = 0;
        set_repair_error(n, rc, "zeroing orphaned segment bytes");
    }
}

/* -- judging a scan ---------------------------------------------------------------- */

static int note_named(void *arg, const char *key, const obj_replica *rep)
{
    named_path **set = arg;
    named_path *p = NULL;
    if (rep->kind != SMP_REPLICA_COLD || rep->path == NULL) return 0;
    HASH_FIND_STR(*set, rep->path, p);
    if (p != NULL) return 0;
    size_t len = strlen(rep->path), klen = strlen(key);
    if ((p = calloc(1, sizeof(*p) + len + 1 + klen + 1)) == NULL) return 1;
    memcpy(p->path, rep->path, len + 1);
    p->key = p->path + len + 1;
    memcpy(p->key, key, klen + 1);
    HASH_ADD_KEYPTR(hh, *set, p->path, len, p);
    return 0;
}

/* 1 when a cold replica on node of f's object names f now (settled, not
 * an orphan). */
static int settled(master *m, const char *node, const InventoryFile *f)
{
    obj_replica reps[FSCK_SETTLE_REPLICAS];
    size_t total = 0;
    if (obj_object_replicas(master_objs(m), f->key, reps, FSCK_SETTLE_REPLICAS, &total) != SMP_OK) return 0;
    for (size_t i = 0; i < total && i < FSCK_SETTLE_REPLICAS; i++)
        if (reps[i].kind == SMP_REPLICA_COLD && reps[i].node != NULL && reps[i].path != NULL &&
            strcmp(reps[i].node, node) == 0 && strcmp(reps[i].path, f->name) == 0)
            return 1;
    return 0;
}

/* Count a page's files and keep those not settled as candidates.
 * SMP_OK or SMP_ENOMEM. */
static int take_files(master *m, fsck_node *n, const TaskResult *res)
{
    if (n->n_orphans + res->n_files > n->cap_orphans) {
        size_t cap = n->cap_orphans ? n->cap_orphans : 64;
        while (cap < n->n_orphans + res->n_files) cap *= 2;
        fsck_file *v = realloc(n->orphans, cap * sizeof(*v));
        if (v == NULL) return SMP_ENOMEM;
        n->orphans = v;
        n->cap_orphans = cap;
    }
    for (size_t i = 0; i < res->n_files; i++) {
        const InventoryFile *f = res->files[i];
        int corrupt = f->sha256.len != 32;
        named_path *p = NULL;
        n->cold_files++;
        HASH_FIND_STR(n->expect, f->name, p);
        if (p != NULL) { /* its file is there: not missing */
            HASH_DEL(n->expect, p);
            free(p);
        }
        /* A corrupt file's length is its size: its data bytes follow the
           header, as a sound one's do (a rotted replica still counts, so the
           bytes on disk keep agreeing with the replicas' bytes). */
        if (!corrupt) n->cold_bytes += f->length;
        else if (f->length > COLD_HEADER_BYTES) n->cold_bytes += f->length - COLD_HEADER_BYTES;
        if (!corrupt && settled(m, n->node, f)) continue;
        fsck_file *o = &n->orphans[n->n_orphans];
        o->name = strdup(f->name);
        o->key = strdup(f->key);
        o->length = f->length;
        o->corrupt = corrupt;
        o->missing = 0;
        if (o->name == NULL || o->key == NULL) {
            free(o->name);
            free(o->key);
            return SMP_ENOMEM;
        }
        n->n_orphans++;
    }
    return SMP_OK;
}

/* Keep the first page's non-zero ranges for judge_ranges. */
static int take_dirty(fsck_node *n, const TaskResult *res)
{
    if (res->n_dirty == 0) return SMP_OK;
    if ((n->dirty = malloc(res->n_dirty * 2 * sizeof(uint64_t))) == NULL) return SMP_ENOMEM;
    for (size_t i = 0; i < res->n_dirty; i++) {
        n->dirty[2 * i] = res->dirty[i]->offset;
        n->dirty[2 * i + 1] = res->dirty[i]->length;
    }
    n->n_dirty = res->n_dirty;
    return SMP_OK;
}

static void named_free(named_path **set)
{
    named_path *p, *tmp;
    HASH_ITER(hh, *set, p, tmp) {
        HASH_DEL(*set, p);
        free(p);
    }
}

/* The cold paths the replicas of node name now, into *set (NULL before).
 * SMP_OK, or SMP_ENOMEM with *set freed. */
static int named_of(master *m, const char *node, named_path **set)
{
    if (obj_visit_replicas(master_objs(m), node, note_named, set) >= 0) return SMP_OK;
    named_free(set);
    return SMP_ENOMEM;
}

/* Of the candidates, keep as orphans those no replica of the node names now
 * and whose key has no persist between writing its file and recording it;
 * a corrupt one a replica names goes to the corrupt replicas, with that
 * replica's key. */
static int judge_files(master *m, fsck_node *n)
{
    named_path *set = NULL, *p;
    size_t kept = 0;
    if (n->n_orphans == 0) return SMP_OK;
    fsck_file *v = realloc(n->corrupt, (n->n_corrupt + n->n_orphans) * sizeof(*v));
    if (v == NULL) return SMP_ENOMEM;
    n->corrupt = v;
    if (named_of(m, n->node, &set) < 0) return SMP_ENOMEM;
    for (size_t i = 0; i < n->n_orphans; i++) {
        fsck_file o = n->orphans[i];
        HASH_FIND_STR(set, o.name, p);
        char *owner = p != NULL && o.corrupt ? strdup(p->key) : NULL;
        if (owner != NULL) {
            free(o.key);
            o.key = owner;
            n->corrupt[n->n_corrupt++] = o;
            continue;
        }
        if (p != NULL || (!o.corrupt && master_persist_in_flight(m, o.key))) {
            free(o.name);
            free(o.key);
            continue;
        }
        n->orphans[kept++] = o;
    }
    n->n_orphans = kept;
    named_free(&set);
    return SMP_OK;
}

/* note_named for the complete cold replicas alone (one being written has
 * no file to find yet). */
static int note_expected(void *arg, const char *key, const obj_replica *rep)
{
    if (rep->status != OBJ_REPLICA_COMPLETE) return 0;
    return note_named(arg, key, rep);
}

/* 1 when key still has a complete cold replica on node naming path, and no
 * persist of key is between writing a file and recording it. */
static int still_expected(master *m, const char *node, const char *key, const char *path)
{
    obj_replica reps[FSCK_SETTLE_REPLICAS];
    size_t total = 0;
    if (master_persist_in_flight(m, key) ||
        obj_object_replicas(master_objs(m), key, reps, FSCK_SETTLE_REPLICAS, &total) != SMP_OK)
        return 0;
    for (size_t i = 0; i < total && i < FSCK_SETTLE_REPLICAS; i++)
        if (reps[i].kind == SMP_REPLICA_COLD && reps[i].status == OBJ_REPLICA_COMPLETE &&
            reps[i].node != NULL && reps[i].path != NULL && strcmp(reps[i].node, node) == 0 &&
            strcmp(reps[i].path, path) == 0)
            return 1;
    return 0;
}

/* The replicas whose file no page listed (n->expect, every page taken):
 * those that still name it now are missing replicas -- the file was
 * deleted under them -- judged with the corrupt ones (--repair drops them,
 * and the plugins hear of the loss). A replica dropped or a persist begun
 * since the start is left alone. SMP_OK or SMP_ENOMEM. */
static int judge_missing(master *m, fsck_node *n)
{
    named_path *p, *tmp;
    size_t left = HASH_COUNT(n->expect);
    if (left == 0) return SMP_OK;
    fsck_file *v = realloc(n->corrupt, (n->n_corrupt + left) * sizeof(*v));
    if (v == NULL) return SMP_ENOMEM;
    n->corrupt = v;
    HASH_ITER(hh, n->expect, p, tmp) {
        if (still_expected(m, n->node, p->key, p->path)) {
            fsck_file *o = &n->corrupt[n->n_corrupt];
            *o = (fsck_file){.name = strdup(p->path), .key = strdup(p->key), .corrupt = 1, .missing = 1};
            if (o->name == NULL || o->key == NULL) {
                free(o->name);
                free(o->key);
                return SMP_ENOMEM;
            }
            n->n_corrupt++;
            fprintf(stderr, "store_master: fsck: node %s: cold replica of %s names file %s, which "
                    "the node does not have (missing)\n", n->node, p->key, p->path);
        }
        HASH_DEL(n->expect, p);
        free(p);
    }
    return SMP_OK;
}

/* A background run drops the replicas of the corrupt files of a page as it
 * comes (candidates from index from on): a check of a large tier takes
 * hours, and the revision is repaired or marked meanwhile. A corrupt file
 * names no key, so the replicas of the node are walked to find whose it is
 * -- only for a page that holds one. A corrupt file no replica names stays
 * a candidate (an orphan). SMP_OK or SMP_ENOMEM. */
static int judge_corrupt_now(master *m, fsck_node *n, size_t from)
{
    named_path *set = NULL, *p;
    size_t kept = from, bad = 0;
    for (size_t i = from; i < n->n_orphans; i++) bad += n->orphans[i].corrupt;
    if (bad == 0) return SMP_OK;
    fsck_file *v = realloc(n->corrupt, (n->n_corrupt + bad) * sizeof(*v));
    if (v == NULL) return SMP_ENOMEM;
    n->corrupt = v;
    if (named_of(m, n->node, &set) < 0) return SMP_ENOMEM;
    for (size_t i = from; i < n->n_orphans; i++) {
        fsck_file o = n->orphans[i];
        HASH_FIND_STR(set, o.name, p);
        char *owner = p != NULL && o.corrupt ? strdup(p->key) : NULL;
        if (owner == NULL) {
            n->orphans[kept++] = o;
            continue;
        }
        free(o.key);
        o.key = owner;
        n->corrupt[n->n_corrupt++] = o;
    }
    n->n_orphans = kept;
    named_free(&set);
    drop_corrupt(m, n); /* after the walk: a drop changes the replicas it walked */
    return SMP_OK;
}

/* Keep the dirty ranges that are still wholly unoccupied (probed by
 * holding and releasing them at once: nothing runs in between). */
static int judge_ranges(master *m, fsck_node *n)
{
    uint64_t *free_v = NULL;
    size_t n_free = 0;
    int rc = obj_segment_free_ranges(master_objs(m), n->segment, &free_v, &n_free, &n->used, &n->capacity);
    free(free_v);
    if (rc < 0) return rc;
    if ((n->ranges = malloc((n->n_dirty + 1) * 2 * sizeof(uint64_t))) == NULL) return SMP_ENOMEM;
    for (size_t i = 0; i < n->n_dirty; i++) {
        uint64_t off = n->dirty[2 * i], len = n->dirty[2 * i + 1];
        if (obj_segment_hold_range(master_objs(m), n->segment, off, len) != SMP_OK) continue;
        obj_segment_release_range(master_objs(m), n->segment, off, len);
        n->ranges[2 * n->n_ranges] = off;
        n->ranges[2 * n->n_ranges + 1] = len;
        n->n_ranges++;
        n->orphan_bytes += len;
    }
    return SMP_OK;
}

/* Whether res is a page n may take (SMP_OK), or why not (SMP_EPROTO or
 * SMP_ERANGE, why filled): it answers the page asked (its `after`), keeps
 * the bound asked, its names sort after the cursor and each other, it does
 * not claim more with no file, and only the first page carries the
 * segment's blocks. An answer without pages (a node from before them) is
 * every file: taken as the first and only page. */
static int page_check(const fsck_node *n, const TaskResult *res, char *why, size_t cap)
{
    unsigned page = n->pages + 1;
    size_t bytes;
    const char *prev = n->after;
    if (n->run->deep && !n->run->segment_only && !res->deep) {
        /* A node from before deep checks reads headers only: not a deep check. */
        snprintf(why, cap, "scan page %u: the node did not hash its cold files' data (a "
                 "store_node from before fsck --deep?); nothing of it is judged", page);
        return SMP_ENOTSUP;
    }
    if (res->page_bytes == 0) {
        if (n->pages == 0) return SMP_OK;
        snprintf(why, cap, "scan page %u came from a node without scan pages (a store_node from "
                 "before them since page 1?); run fsck again", page);
        return SMP_EPROTO;
    }
    if (res->page_bytes != FSCK_PAGE_BYTES) {
        snprintf(why, cap, "scan page %u kept pages of %u bytes, not the %u asked", page,
                 (unsigned)res->page_bytes, FSCK_PAGE_BYTES);
        return SMP_EPROTO;
    }
    if (strcmp(res->after, n->after) != 0) {
        snprintf(why, cap, "scan page %u answers the page after '%.80s', not the one asked (after "
                 "'%.80s')", page, res->after, n->after);
        return SMP_EPROTO;
    }
    if ((bytes = task_result__get_packed_size(res)) > FSCK_PAGE_BYTES) {
        snprintf(why, cap, "scan page %u is %zu bytes, more than the %u asked", page, bytes,
                 FSCK_PAGE_BYTES);
        return SMP_ERANGE;
    }
    for (size_t i = 0; i < res->n_files; prev = res->files[i++]->name) {
        if (strcmp(res->files[i]->name, prev) > 0) continue;
        snprintf(why, cap, "scan page %u: cold file '%.80s' does not sort after '%.80s' (names "
                 "out of order)", page, res->files[i]->name, prev);
        return SMP_EPROTO;
    }
    if (res->more && res->n_files == 0) {
        snprintf(why, cap, "scan page %u says more files follow but holds none", page);
        return SMP_EPROTO;
    }
    if (n->pages > 0 && res->n_dirty > 0) {
        snprintf(why, cap, "scan page %u carries segment ranges (only the first page scans the "
                 "segment)", page);
        return SMP_EPROTO;
    }
    return SMP_OK;
}

/* -- --deep: the memory replicas ---------------------------------------------------- */

/* VERIFY tasks out per node at most; the walk sends more once half came back. */
#define FSCK_VERIFY_WINDOW 256

/* One VERIFY out: a memory replica of key and what it must hash to. */
typedef struct mem_check {
    fsck_node *n;
    char *key;
    uint64_t offset, length;
    uint8_t sha[32];
} mem_check;

typedef struct mem_walk {
    master *m;
    fsck_node *n;
    mem_check **v;
    size_t count, want;
    const char *last;   /* the key of the last object taken (the store's) */
    int stopped;        /* more objects follow */
    int failed;         /* out of memory */
} mem_walk;

/* Take rep when it is a complete memory replica in n's segment, until want
 * objects were taken; stops at the next object's first replica then. */
static int mem_collect(void *arg, const char *key, const obj_replica *rep)
{
    mem_walk *w = arg;
    if (rep->kind != SMP_REPLICA_MEMORY || rep->status != OBJ_REPLICA_COMPLETE || rep->segment == NULL ||
        strcmp(rep->segment, w->n->segment) != 0)
        return 0;
    if (w->count >= w->want) { /* the next object starts the next step */
        w->stopped = strcmp(w->last, key) != 0;
        return w->stopped;
    }
    smp_object_info info = {.struct_size = sizeof(info)};
    mem_check *c = calloc(1, sizeof(*c));
    if (c == NULL || obj_object_info(master_objs(w->m), key, &info) < 0 || (c->key = strdup(key)) == NULL) {
        free(c);
        w->failed = 1;
        return 1;
    }
    c->n = w->n;
    c->offset = rep->offset;
    c->length = info.size;
    memcpy(c->sha, info.checksum, 32);
    w->v[w->count++] = c;
    w->last = key;
    return 0;
}

/* 1 when key still has that memory replica on n and still hashes to sha:
 * an answer that disagrees is judged only then (a replica removed or
 * replaced while the node hashed it is nobody's fault). *only (may be NULL)
 * is then whether it is the object's only complete replica. */
static int mem_still_there(master *m, const fsck_node *n, const mem_check *c, int *only)
{
    obj_replica reps[FSCK_SETTLE_REPLICAS];
    size_t k = 0, complete = 0;
    int found = 0;
    smp_object_info info = {.struct_size = sizeof(info)};
    if (obj_object_info(master_objs(m), c->key, &info) < 0 || memcmp(info.checksum, c->sha, 32) != 0 ||
        obj_object_replicas(master_objs(m), c->key, reps, FSCK_SETTLE_REPLICAS, &k) < 0)
        return 0;
    for (size_t i = 0; i < k && i < FSCK_SETTLE_REPLICAS; i++) {
        complete += reps[i].status == OBJ_REPLICA_COMPLETE;
        if (reps[i].kind == SMP_REPLICA_MEMORY && reps[i].offset == c->offset &&
            strcmp(reps[i].node, n->node) == 0 && strcmp(reps[i].segment, n->segment) == 0)
            found = 1;
    }
    if (only != NULL) *only = complete <= 1;
    return found;
}

static void mem_pump(master *m, fsck_node *n);

static void on_mem_verified(master *m, void *arg, int status, const TaskResult *res)
{
    mem_check *c = arg;
    fsck_node *n = c->n;
    int rc = status == SMP_OK ? res->status : status, only = 0;
    n->mem_inflight--;
    if (rc < 0) {
        char why[400];
        snprintf(why, sizeof(why), "hashing the memory replica of %.200s: %s", c->key,
                 task_why(status, res) ? task_why(status, res) : smp_strerror(rc));
        set_error_why(n, rc, why);
    } else if (res->sha256.len == 32 && memcmp(res->sha256.data, c->sha, 32) == 0) {
        n->mem_checked++;
    } else if (mem_still_there(m, n, c, &only)) {
        n->mem_checked++;
        if (n->n_mem_bad == n->cap_mem_bad) {
            size_t cap = n->cap_mem_bad ? n->cap_mem_bad * 2 : 8;
            fsck_mem *v = realloc(n->mem_bad, cap * sizeof(*v));
            if (v == NULL) {
                set_error(n, SMP_ENOMEM, NULL);
                goto done;
            }
            n->mem_bad = v;
            n->cap_mem_bad = cap;
        }
        fprintf(stderr, "store_master: fsck: node %s: memory replica of %s at %s+%llu does not hold "
                "its bytes\n", n->node, c->key, n->segment, (unsigned long long)c->offset);
        fsck_mem *bad = &n->mem_bad[n->n_mem_bad++];
        *bad = (fsck_mem){.key = c->key, .offset = c->offset, .length = c->length};
        memcpy(bad->sha, c->sha, 32);
        bad->only = only;
        c->key = NULL;
    }
done:
    free(c->key);
    free(c);
    mem_pump(m, n);
    task_ended(n->run);
}

/* Send the node VERIFY tasks for its memory replicas on from where the walk
 * stopped, until FSCK_VERIFY_WINDOW are out (once no more than half are);
 * once the walk is over and every answer came, repair the node (--repair)
 * -- not after an error: nothing is repaired on a partial check. */
static void mem_pump(master *m, fsck_node *n)
{
    fsck_run *r = n->run;
    if (n->error != NULL) n->mem_walking = 0;
    while (n->mem_walking && n->mem_inflight <= FSCK_VERIFY_WINDOW / 2) {
        mem_walk w = {.m = m, .n = n, .want = FSCK_VERIFY_WINDOW - n->mem_inflight};
        char *after = NULL;
        if ((w.v = calloc(w.want, sizeof(*w.v))) == NULL) w.failed = 1;
        else obj_visit_replicas_after(master_objs(m), n->node, n->mem_after, mem_collect, &w);
        if (!w.failed && w.last != NULL && (after = strdup(w.last)) == NULL) w.failed = 1;
        if (after != NULL) {
            free(n->mem_after);
            n->mem_after = after;
        }
        n->mem_walking = w.stopped && !w.failed;
        if (w.failed) set_error(n, SMP_ENOMEM, NULL);
        for (size_t i = 0; i < w.count; i++) {
            mem_check *c = w.v[i];
            r->outstanding++;
            int rc = w.failed ? SMP_ENOMEM
                              : master_node_task(m, n->node, TASK_KIND__TASK_VERIFY, c->key, c->offset,
                                                 c->length, c->sha, NULL, on_mem_verified, c);
            if (rc < 0) {
                r->outstanding--;
                if (!w.failed) set_error_why(n, rc, "hashing the memory replicas");
                n->mem_walking = 0;
                free(c->key);
                free(c);
                continue;
            }
            n->mem_inflight++;
        }
        free(w.v);
    }
    if (n->mem_walking || n->mem_inflight > 0 || n->mem_done) return;
    n->mem_done = 1;
    if (r->repair && n->error == NULL) repair_node(m, n);
}

/* A corrupt memory replica hashed again right before its drop: the walk
 * took time, and the object may have been removed and put again since, its
 * new replica at the same place (the allocator reuses the lowest hole).
 * Dropped only when it still does not hold the bytes of the object judged
 * and is still that object's replica -- in this loop turn, so nothing can
 * change in between; otherwise left alone, logged. */
static void on_mem_rehashed(master *m, void *arg, int status, const TaskResult *res)
{
    mem_check *c = arg;
    fsck_node *n = c->n;
    int rc = status == SMP_OK ? res->status : status;
    if (rc < 0) {
        set_repair_error(n, rc, MEM_REHASHING);
    } else if ((res->sha256.len != 32 || memcmp(res->sha256.data, c->sha, 32) != 0) &&
               mem_still_there(m, n, c, NULL)) {
        obj_replica bad = {.kind = SMP_REPLICA_MEMORY, .node = n->node, .segment = n->segment,
                           .offset = c->offset, .length = c->length};
        n->run->outstanding++;
        rc = master_drop_replica(m, c->key, &bad, on_memory_dropped, n);
        if (rc < 0) {
            n->run->outstanding--;
            if (rc != SMP_ENOTFOUND) /* gone meanwhile */
                set_repair_error(n, rc, MEM_DROPPING);
        }
    } else {
        fprintf(stderr, "store_master: fsck: node %s: memory replica of %s at %s+%llu was rewritten "
                "or replaced since it was checked: left alone\n", n->node, c->key, n->segment,
                (unsigned long long)c->offset);
    }
    free(c->key);
    free(c);
    task_ended(n->run);
}

/* Hash each corrupt memory replica again (on_mem_rehashed drops it). */
static void mem_repair(master *m, fsck_node *n)
{
    for (size_t k = 0; k < n->n_mem_bad; k++) {
        const fsck_mem *b = &n->mem_bad[k];
        mem_check *c = calloc(1, sizeof(*c));
        if (c == NULL || (c->key = strdup(b->key)) == NULL) {
            free(c);
            set_repair_error(n, SMP_ENOMEM, MEM_DROPPING);
            return;
        }
        c->n = n;
        c->offset = b->offset;
        c->length = b->length;
        memcpy(c->sha, b->sha, 32);
        n->run->outstanding++;
        int rc = master_node_task(m, n->node, TASK_KIND__TASK_VERIFY, c->key, c->offset, c->length,
                                  c->sha, NULL, on_mem_rehashed, c);
        if (rc < 0) {
            n->run->outstanding--;
            set_repair_error(n, rc, MEM_REHASHING);
            free(c->key);
            free(c);
        }
    }
}

static void on_scanned(master *m, void *arg, int status, const TaskResult *res);

/* Tell a background run's progress hook the nodes it still owes. */
static void report_progress(fsck_run *r)
{
    size_t n = 0;
    master_fsck_cursor *c = owed_of(r, &n);
    if (c == NULL) return; /* the place is written at the next page or the end */
    r->progress(r->m, c, n);
    free(c);
}

/* Ask n's node for a SCAN page: the first (ranges, after "") or the one
 * after n->after. SMP_OK (one more outstanding task), or the error. */
static int ask_page(master *m, fsck_node *n, const uint64_t *ranges, size_t n_ranges)
{
    fsck_run *r = n->run;
    /* A background run's page is a second of its pace: the node reads in
     * short bursts, not 1 GiB at full speed. */
    master_scan_page p = {ranges, n_ranges, n->after, FSCK_PAGE_BYTES, r->segment_only, r->deep,
                          r->background ? r->bytes_per_s : 0,
                          r->repair && !r->segment_only && !r->background};
    r->outstanding++;
    int rc = master_node_task_scan(m, n->node, &p, on_scanned, n);
    if (rc < 0) r->outstanding--;
    return rc;
}

/* Forget the files not settled yet (the node's check ended unfinished:
 * nothing is judged an orphan on a partial listing). */
static void drop_candidates(fsck_node *n)
{
    named_free(&n->expect);
    for (size_t k = 0; k < n->n_orphans; k++) {
        free(n->orphans[k].name);
        free(n->orphans[k].key);
    }
    n->n_orphans = 0;
}

/* A page answered: checked and taken, then the next asked, or (the last)
 * the node judged and, with repair, repaired. A page refused ends the
 * node's check with the cause: nothing is repaired there. */
static void on_scanned(master *m, void *arg, int status, const TaskResult *res)
{
    fsck_node *n = arg;
    char why[400];
    int rc = status;
    if (n->run->abandoned) goto ended; /* the master is stopping: nothing more is asked or judged */
    if (rc == SMP_OK && res->status != 0) rc = res->status;
    if (rc < 0) {
        set_error_why(n, rc, task_why(status, res));
        drop_candidates(n);
        n->finished = 1;
        goto ended;
    }
    if ((rc = page_check(n, res, why, sizeof(why))) < 0) {
        fprintf(stderr, "store_master: fsck: node %s: %s\n", n->node, why);
        set_error_why(n, rc, why);
        drop_candidates(n);
        n->finished = 1;
        goto ended;
    }
    uint64_t bytes_before = n->cold_bytes;
    size_t candidates_before = n->n_orphans;
    if ((rc = take_files(m, n, res)) == SMP_OK && n->pages == 0) rc = take_dirty(n, res);
    if (rc == SMP_OK && n->pages == 0) rc = master_fsck_tmps_take(&n->tmps, res);
    if (rc == SMP_OK && n->run->background) rc = judge_corrupt_now(m, n, candidates_before);
    n->pages++;
    if (rc == SMP_OK && res->page_bytes != 0 && res->more) {
        char *after = strdup(res->files[res->n_files - 1]->name);
        if (after == NULL) {
            rc = SMP_ENOMEM;
        } else {
            free(n->after);
            n->after = after;
            if (n->run->background) {
                /* paced: the page's bytes at bytes_per_s (at least a turn of the timer) */
                uint64_t ms = (n->cold_bytes - bytes_before) * 1000 / n->run->bytes_per_s;
                n->page_due_ms = master_now_ms() + (ms > 0 ? ms : 1);
                n->run->outstanding++;
                report_progress(n->run);
            } else {
                rc = ask_page(m, n, NULL, 0);
            }
        }
        if (rc == SMP_OK) goto ended;
    }
    n->finished = 1;
    if (rc == SMP_OK && n->pages > 1)
        fprintf(stderr, "store_master: fsck: node %s: %llu cold files in %u scan pages\n", n->node,
                (unsigned long long)n->cold_files, (unsigned)n->pages);
    if (rc == SMP_OK && (rc = judge_files(m, n)) == SMP_OK && (rc = judge_missing(m, n)) == SMP_OK)
        rc = judge_ranges(m, n);
    if (rc < 0) {
        set_error(n, rc, NULL);
        drop_candidates(n);
    } else if (n->run->deep && !n->run->segment_only && !n->run->background) {
        n->mem_walking = 1; /* then the memory replicas are hashed; repaired after */
        mem_pump(m, n);
    } else if (n->run->repair) {
        repair_node(m, n);
    }
ended:
    task_ended(n->run);
}

/* -- the call ---------------------------------------------------------------------- */

static int add_segment(void *arg, const char *segment, const char *node)
{
    fsck_run *r = arg;
    if (r->only_node != NULL && strcmp(node, r->only_node) != 0) return 0;
    const char *after = ""; /* a background run over the nodes it owed: the cursor */
    if (r->only != NULL) {
        size_t i = 0;
        while (i < r->n_only && strcmp(r->only[i].node, node) != 0) i++;
        if (i == r->n_only) return 0; /* not owed a check */
        after = r->only[i].after;
    }
    if (!master_node_readable(r->m, node)) {
        r->nodes_down++;
        return r->background ? master_fsck_owe(&r->down, &r->n_down, node, after, 0) : 0;
    }
    if (r->n_nodes == r->cap_nodes) {
        size_t cap = r->cap_nodes ? r->cap_nodes * 2 : 4;
        fsck_node *v = realloc(r->nodes, cap * sizeof(*v));
        if (v == NULL) return SMP_ENOMEM;
        r->nodes = v;
        r->cap_nodes = cap;
    }
    fsck_node *n = &r->nodes[r->n_nodes];
    memset(n, 0, sizeof(*n));
    n->run = r;
    n->node = strdup(node);
    n->segment = strdup(segment);
    n->after = strdup(after);
    r->n_nodes++;
    return n->node && n->segment && n->after ? 0 : SMP_ENOMEM;
}

/* A background run over the nodes owed: say which of them hold no segment
 * any more (removed from the cluster, or a name fsck.last made up), and
 * are forgotten. */
static void forget_gone(const fsck_run *r)
{
    for (size_t i = 0; r->only != NULL && i < r->n_only; i++) {
        const char *node = r->only[i].node;
        int known = 0;
        for (size_t k = 0; k < r->n_nodes && !known; k++) known = strcmp(r->nodes[k].node, node) == 0;
        for (size_t k = 0; k < r->n_down && !known; k++) known = strcmp(r->down[k].node, node) == 0;
        if (!known)
            fprintf(stderr, "store_master: background fsck: node %s, owed a check, holds no "
                    "segment: forgotten\n", node);
    }
}

/* Send every node of r the first SCAN page with its unoccupied ranges; the last answer
 * (or this call, when there is nothing to wait for) ends the run. */
static int run_start(fsck_run *r)
{
    master *m = r->m;
    int rc;
    if ((rc = obj_visit_segments(master_objs(m), add_segment, r)) != 0) return rc < 0 ? rc : SMP_ENOMEM;
    forget_gone(r);
    /* Every node's nodes[] entry is in place before the first callback. */
    r->outstanding = 1;
    for (size_t i = 0; i < r->n_nodes; i++) {
        fsck_node *n = &r->nodes[i];
        uint64_t *ranges = NULL;
        size_t n_ranges = 0;
        /* a background run reads the cold files alone: no segment range */
        rc = r->background ? SMP_OK
                           : obj_segment_free_ranges(master_objs(m), n->segment, &ranges, &n_ranges,
                                                     NULL, NULL);
        /* a check also finds the replicas whose file is gone (judge_missing) */
        if (rc == SMP_OK && !r->background && !r->segment_only &&
            obj_visit_replicas(master_objs(m), n->node, note_expected, &n->expect) < 0) {
            named_free(&n->expect);
            rc = SMP_ENOMEM;
        }
        if (rc == SMP_OK) rc = ask_page(m, n, ranges, n_ranges);
        free(ranges);
        if (rc < 0) set_error(n, rc, NULL);
    }
    task_ended(r);
    return SMP_OK;
}

int master_fsck_h(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    int rc;
    FsckRequest *req = fsck_request__unpack(NULL, len, body);
    if (req == NULL) return rpc_reply_error(call, SMP_EPROTO, "body does not decode as FsckRequest");
    int repair = req->repair, deep = req->deep;
    fsck_request__free_unpacked(req, NULL);
    if (!master_is_leader(m))
        return rpc_reply_error(call, SMP_ESTATE, "fsck: this master is not the leader");
    fsck_run *r = calloc(1, sizeof(*r));
    if (r == NULL) return rpc_reply_error(call, SMP_ENOMEM, "fsck: out of memory");
    r->m = m;
    r->call = call;
    r->repair = repair;
    r->deep = deep;
    if ((rc = run_start(r)) < 0) {
        run_free(r);
        return rpc_reply_error(call, rc, "fsck: out of memory");
    }
    return SMP_OK;
}

int master_fsck_sweep_node(master *m, const char *node)
{
    int rc;
    fsck_run *r = calloc(1, sizeof(*r));
    if (r == NULL) return SMP_ENOMEM;
    r->m = m;
    r->repair = 1;
    r->segment_only = 1;
    r->only_node = node;
    if ((rc = run_start(r)) < 0) run_free(r);
    return rc;
}

/* -- the background run ------------------------------------------------------------- */

int master_fsck_owe(master_fsck_cursor **v, size_t *n, const char *node, const char *after,
                    int failed)
{
    master_fsck_cursor *nv = realloc(*v, (*n + 1) * sizeof(*nv));
    if (nv == NULL) return SMP_ENOMEM;
    *v = nv;
    char *nd = strdup(node), *af = strdup(after);
    if (nd == NULL || af == NULL) {
        free(nd);
        free(af);
        return SMP_ENOMEM;
    }
    nv[(*n)++] = (master_fsck_cursor){nd, af, failed};
    return SMP_OK;
}

void master_fsck_owed_free(master_fsck_cursor *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free((char *)v[i].node);
        free((char *)v[i].after);
    }
    free(v);
}

int master_fsck_background_start(master *m, uint64_t bytes_per_s, const master_fsck_cursor *only,
                                 size_t n_only, master_fsck_progress_fn progress,
                                 master_fsck_done_fn done)
{
    int rc;
    if (m->fsck_background != NULL) return SMP_EBUSY;
    if (bytes_per_s == 0 || done == NULL || progress == NULL) return SMP_EINVAL;
    fsck_run *r = calloc(1, sizeof(*r));
    if (r == NULL) return SMP_ENOMEM;
    r->m = m;
    r->repair = 1;
    r->deep = 1;
    r->background = 1;
    r->bytes_per_s = bytes_per_s;
    r->done = done;
    r->progress = progress;
    r->only = only;
    r->n_only = n_only;
    m->fsck_background = r;
    rc = run_start(r);
    if (rc == SMP_OK && m->fsck_background == r) r->only = NULL; /* borrowed for the start only */
    if (rc < 0) {
        m->fsck_background = NULL;
        run_free(r);
    }
    return rc;
}

void master_fsck_background_tick(master *m, uint64_t now)
{
    fsck_run *r = m->fsck_background;
    if (r == NULL) return;
    r->outstanding++; /* the run outlives the loop: a node's wait ends in it */
    for (size_t i = 0; i < r->n_nodes; i++) {
        fsck_node *n = &r->nodes[i];
        if (n->page_due_ms == 0 || now < n->page_due_ms) continue;
        n->page_due_ms = 0;
        r->outstanding--; /* its wait */
        int rc = master_node_readable(m, n->node) ? ask_page(m, n, NULL, 0) : SMP_EIO;
        if (rc < 0) {
            set_error_why(n, rc, rc == SMP_EIO ? "the node went down during the check" : NULL);
            drop_candidates(n);
            n->finished = 1;
        }
    }
    task_ended(r);
}

void master_fsck_background_stop(master *m)
{
    fsck_run *r = m->fsck_background;
    if (r == NULL) return;
    m->fsck_background = NULL;
    report_progress(r); /* where a resumed run goes on */
    r->abandoned = 1;
    for (size_t i = 0; i < r->n_nodes; i++)
        if (r->nodes[i].page_due_ms != 0) {
            r->nodes[i].page_due_ms = 0;
            r->outstanding--;
        }
    /* Tasks still out end it when the nodes' queues are failed. */
    if (r->outstanding == 0) run_free(r);
}
