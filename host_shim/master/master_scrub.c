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

typedef struct scrub_range {
    char *segment;
    uint64_t off, len;
    struct scrub_range *next;
} scrub_range;

typedef struct parked_reply {
    smp_rpc_call *call;
    char *segment;
    uint64_t off, len;
    uint8_t *body;
    size_t body_len;
    struct parked_reply *next;
} parked_reply;

struct master_scrub {
    scrub_range *running;
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

static void on_scrubbed(master *m, void *arg, int status, const TaskResult *res)
{
    scrub_range *done = arg;
    if (status < 0 || res == NULL || res->status != 0)
        fprintf(stderr, "store_master: zeroing %llu bytes at %llu of segment %s failed: %s; "
                        "the node's next registration (or `weightctl fsck --repair`) zeroes them\n",
                (unsigned long long)done->len, (unsigned long long)done->off, done->segment,
                res && res->error && res->error[0] ? res->error : smp_strerror(status));
    if (m->scrub != NULL) {
        scrub_range **pp = &m->scrub->running;
        while (*pp != NULL && *pp != done) pp = &(*pp)->next;
        if (*pp == done) *pp = done->next;
    }
    free(done->segment);
    free(done);
    if (m->scrub != NULL) release_parked(m);
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
    scrub_range *r = calloc(1, sizeof(*r));
    if (r == NULL || (r->segment = strdup(segment)) == NULL) {
        free(r);
        return SMP_ENOMEM;
    }
    r->off = off;
    r->len = len;
    uint64_t pair[2] = {off, len};
    rc = master_node_task_ranges(m, node, TASK_KIND__TASK_SCRUB, "", 0, 0, NULL, NULL, pair, 1,
                                 on_scrubbed, r);
    if (rc < 0) {
        free(r->segment);
        free(r);
        return rc;
    }
    r->next = m->scrub->running;
    m->scrub->running = r;
    return SMP_OK;
}

void master_scrub_abandoned(void *ctx, const char *node, const char *segment, uint64_t off,
                            uint64_t len)
{
    master *m = ctx;
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
    /* running ranges belong to their tasks (freed by on_scrubbed when the
     * tasks fail); detach them */
    master_scrub *s = m->scrub;
    m->scrub = NULL;
    free(s);
}
