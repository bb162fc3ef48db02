/* master_scrub.c -- memory ranges the state freed are zeroed on their node
 * before anyone is given them to write.
 *
 * When a record takes a memory replica out of the state (master_reclaim.c
 * notes them), its range returns to the allocator at apply, still holding
 * the object's bytes: data no object owns, which fsck would report. So the
 * range is zeroed on its node by a SCRUB task right away. The allocator may
 * hand the range out again meanwhile; the two writers that could then race
 * with the zeroing are kept behind it:
 *   - a put: its start is answered (with the write ticket, without which
 *     nothing is written) only once every scrub of an overlapping range on
 *     that segment ended -- the reply is parked here, not refused, so a
 *     DELETE_FIRST upsert that frees memory for its import sees no ENOSPC;
 *   - a load into a reserved range: it is a task of the same node, queued
 *     after the SCRUB, and a node runs its tasks in order.
 * The ranges freed in one turn of the loop (a group commit's removes
 * arrive together) go to their node as one SCRUB task each node, sent at
 * the end of the turn (master_scrub_flush, from the loop's check phase):
 * a task and its result cost the node's poll more than zeroing a range
 * does. A range waits in the running list from the moment it is freed, so
 * put starts wait for it while it is gathered as well; and any other task
 * queued for a node sends that node's gathered ranges first
 * (master_scrub_flush_node, from the task queue), so a node still zeroes
 * a freed range before it runs a LOAD into it, or a SCAN of it, that the
 * master asked for after the range was freed.
 * A node that is not up when the range is freed, or a master that stops
 * before the SCRUB ran, leaves the bytes; `weightctl fsck --repair` zeroes
 * them. Puts and reservations given up before they became replicas (revoked,
 * cancelled, timed out, a failed load) are scrubbed the same way, through
 * the object store's abandon hook. Everything here is soft state of the loop
 * thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master_internal.h"
#include "node_rpc.pb-c.h"

#define SCRUB_BATCH_MAX 4096 /* ranges in one task (64 KiB of them in its message) */

typedef struct scrub_range {
    char *segment;
    uint64_t off, len;
    struct scrub_range *next;      /* the running list */
    struct scrub_range **pprev;    /* what points at it there (NULL: off it) */
    struct scrub_range *next_in;   /* its batch */
} scrub_range;

/* The ranges of one node gathered in this turn, then one task's. */
typedef struct scrub_batch {
    char *node;
    scrub_range *ranges;
    size_t n;
    uint64_t bytes;
    struct scrub_batch *next;      /* the gathering list */
} scrub_batch;

typedef struct parked_reply {
    smp_rpc_call *call;
    char *segment;
    uint64_t off, len;
    uint8_t *body;
    size_t body_len;
    struct parked_reply *next;
} parked_reply;

struct master_scrub {
    scrub_range *running;          /* gathered or being zeroed */
    scrub_batch *gathering;        /* this turn's, one per node */
    parked_reply *parked;
};

static int overlaps(const master_scrub *s, const char *segment, uint64_t off, uint64_t len)
{
    for (const scrub_range *r = s ? s->running : NULL; r != NULL; r = r->next)
        if (strcmp(r->segment, segment) == 0 && off < r->off + r->len && r->off < off + len)
            return 1;
    return 0;
}

/* Send every parked reply whose range no scrub overlaps any more. */
static void release_parked(master *m)
{
    parked_reply **pp = &m->scrub->parked;
    while (*pp != NULL) {
        parked_reply *p = *pp;
        if (overlaps(m->scrub, p->segment, p->off, p->len)) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        rpc_reply(p->call, SMP_OK, p->body, p->body_len);
        free(p->segment);
        free(p->body);
        free(p);
    }
}

/* Take range r off the running list (when it is on one) and free it: in
 * constant time, so a batch of thousands of ranges ends in one pass. */
static void range_done(scrub_range *r)
{
    if (r->pprev != NULL) {
        *r->pprev = r->next;
        if (r->next != NULL) r->next->pprev = r->pprev;
    }
    free(r->segment);
    free(r);
}

/* Free batch b and every range of it; put starts that waited only for
 * them are answered. */
static void batch_done(master *m, scrub_batch *b)
{
    while (b->ranges != NULL) {
        scrub_range *r = b->ranges;
        b->ranges = r->next_in;
        range_done(r);
    }
    free(b->node);
    free(b);
    if (m->scrub != NULL) release_parked(m);
}

static void on_scrubbed(master *m, void *arg, int status, const TaskResult *res)
{
    scrub_batch *b = arg;
    if (status < 0 || res == NULL || res->status != 0)
        fprintf(stderr, "store_master: zeroing %zu range(s), %llu bytes, of segment %s failed: %s; "
                        "the node's next registration (or `weightctl fsck --repair`) zeroes them\n",
                b->n, (unsigned long long)b->bytes, b->ranges ? b->ranges->segment : "?",
                res && res->error && res->error[0] ? res->error : smp_strerror(status));
    batch_done(m, b);
}

static int pair_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

size_t master_scrub_join(uint64_t *pairs, size_t n)
{
    size_t k = 0;
    if (n == 0) return 0;
    qsort(pairs, n, 2 * sizeof(uint64_t), pair_cmp);
    for (size_t i = 1; i < n; i++) {
        if (pairs[2 * k] + pairs[2 * k + 1] == pairs[2 * i]) {
            pairs[2 * k + 1] += pairs[2 * i + 1];
            continue;
        }
        k++;
        pairs[2 * k] = pairs[2 * i];
        pairs[2 * k + 1] = pairs[2 * i + 1];
    }
    return k + 1;
}

/* Send batch b (taken off the gathering list) as one SCRUB task, its
 * adjacent ranges joined. A node that went down since leaves its bytes
 * (fsck --repair): the ranges are dropped. */
static void batch_send(master *m, scrub_batch *b)
{
    uint64_t *pairs = malloc(b->n * 2 * sizeof(uint64_t));
    size_t k = 0;
    int rc = SMP_ENOMEM;
    if (pairs != NULL) {
        for (scrub_range *r = b->ranges; r != NULL; r = r->next_in) {
            pairs[2 * k] = r->off;
            pairs[2 * k + 1] = r->len;
            k++;
        }
        k = master_scrub_join(pairs, k);
        rc = master_node_task_ranges(m, b->node, TASK_KIND__TASK_SCRUB, "", 0, 0, NULL, NULL,
                                     pairs, k, on_scrubbed, b);
        free(pairs);
    }
    if (rc < 0) {
        batch_done(m, b);
        return;
    }
    host_metric_add(m->m.scrub_tasks, NULL, 1);
    host_metric_add(m->m.scrub_ranges, NULL, (double)b->n); /* as freed, before the joins */
}

void master_scrub_flush(master *m)
{
    while (m->scrub != NULL && m->scrub->gathering != NULL) {
        scrub_batch *b = m->scrub->gathering;
        m->scrub->gathering = b->next;
        batch_send(m, b);
    }
}

void master_scrub_flush_node(master *m, const char *node)
{
    if (m->scrub == NULL) return;
    for (scrub_batch **bp = &m->scrub->gathering; *bp != NULL; bp = &(*bp)->next) {
        if (strcmp((*bp)->node, node) != 0) continue;
        scrub_batch *b = *bp;
        *bp = b->next;
        batch_send(m, b);
        return;
    }
}

static int scrub_state(master *m)
{
    if (m->scrub == NULL && (m->scrub = calloc(1, sizeof(*m->scrub))) == NULL) return SMP_ENOMEM;
    return SMP_OK;
}

int master_scrub_range(master *m, const char *node, const char *segment, uint64_t off, uint64_t len)
{
    int rc;
    if ((rc = scrub_state(m)) < 0) return rc;
    scrub_batch **bp = &m->scrub->gathering;
    while (*bp != NULL && strcmp((*bp)->node, node) != 0) bp = &(*bp)->next;
    scrub_batch *b = *bp;
    if (b == NULL) {
        if ((b = calloc(1, sizeof(*b))) == NULL || (b->node = strdup(node)) == NULL) {
            free(b);
            return SMP_ENOMEM;
        }
        *bp = b; /* appended: batches go in the order their nodes came */
    }
    scrub_range *r = calloc(1, sizeof(*r));
    if (r == NULL || (r->segment = strdup(segment)) == NULL) {
        free(r);
        rc = SMP_ENOMEM;
        goto drop_empty;
    }
    r->off = off;
    r->len = len;
    r->next_in = b->ranges;
    b->ranges = r;
    b->n++;
    b->bytes += len;
    r->next = m->scrub->running;
    if (r->next != NULL) r->next->pprev = &r->next;
    r->pprev = &m->scrub->running;
    m->scrub->running = r;
    if (b->n >= SCRUB_BATCH_MAX) { /* a full one goes now */
        *bp = b->next;
        batch_send(m, b);
    }
    return SMP_OK;
drop_empty:
    if (b->n == 0) {
        *bp = b->next;
        free(b->node);
        free(b);
    }
    return rc;
}

void master_scrub_abandoned(void *ctx, const char *node, const char *segment, uint64_t off,
                            uint64_t len)
{
    master *m = ctx;
    /* Only the leader that serves commands a node: a leader that resigned
     * (and is stopping, or replays its successor's records) may hold a put
     * of its own whose range the successor has given to a committed object
     * since, and zeroing it would destroy that object. */
    if (m->stopping || !master_is_leader(m)) return;
    if (node != NULL && segment != NULL && master_node_readable(m, node))
        (void)master_scrub_range(m, node, segment, off, len); /* ENOMEM: fsck --repair */
}

int master_scrub_reply(master *m, smp_rpc_call *call, const char *segment, uint64_t off,
                       uint64_t len, const ProtobufCMessage *msg)
{
    if (!overlaps(m->scrub, segment, off, len)) {
        master_reply_msg(call, msg);
        return SMP_OK;
    }
    parked_reply *p = calloc(1, sizeof(*p));
    size_t n = protobuf_c_message_get_packed_size(msg);
    if (p == NULL || (p->segment = strdup(segment)) == NULL || (p->body = malloc(n ? n : 1)) == NULL) {
        if (p) free(p->segment);
        free(p);
        return SMP_ENOMEM;
    }
    protobuf_c_message_pack(msg, p->body);
    p->body_len = n;
    p->call = call;
    p->off = off;
    p->len = len;
    p->next = m->scrub->parked;
    m->scrub->parked = p;
    return SMP_OK;
}

void master_scrub_free(master *m)
{
    if (m->scrub == NULL) return;
    while (m->scrub->parked != NULL) {
        parked_reply *p = m->scrub->parked;
        m->scrub->parked = p->next;
        rpc_reply_error(p->call, SMP_EAGAIN, "put start: the master stopped");
        free(p->segment);
        free(p->body);
        free(p);
    }
    /* ranges of batches not sent leave their bytes (fsck --repair); those
     * sent belong to their tasks (freed by on_scrubbed when the tasks
     * fail): detach them */
    master_scrub *s = m->scrub;
    m->scrub = NULL;
    while (s->gathering != NULL) {
        scrub_batch *b = s->gathering;
        s->gathering = b->next;
        batch_done(m, b);
    }
    while (s->running != NULL) {
        scrub_range *r = s->running;
        s->running = r->next;
        r->next = NULL;
        r->pprev = NULL;
    }
    free(s);
}
