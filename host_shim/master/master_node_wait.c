/* master_node_wait.c -- requests that need a node wait, while the master
 * waits for its nodes to register after it began serving.
 *
 * A master that starts, or a standby promoted to leader, knows the nodes
 * holding segments from its state, but none of them is up until it
 * registers again: the embedded node a few milliseconds after the master
 * serves, a store_node within its next poll, a failover's nodes within 20
 * ms of the election. A replica lookup whose only replicas are on such a
 * node, and a put start that found no registered node with room, would be
 * refused in that window (SMP_EAGAIN, "no replica on a live node" / "no
 * node is up"), and every client would have to retry a restart or a
 * failover it should not see.
 *
 * Instead the handler parks the call here (master_node_wait_park, when
 * master_replicas_awaited says a replica it needs is on such a node; a
 * plugin's handler through smp_host_api.rpc_wait_for_nodes): its body
 * is copied and the call is held unanswered. It runs again from the start
 * -- the handler decodes and checks it anew (rpc_server_redispatch) --
 * after the next node registered (master_node_wait_wake, run in the loop's
 * check phase), and at the timer's next round once no node is waited for
 * any more or its own wait ended: node.timeout_ms after it arrived, the
 * longest the master waits for a node since serving began. Run again, the
 * handler may park it once more (another node may bring its replica) while
 * both waits last; past either it answers as it would have at once. The
 * wait for the nodes is master_nodes.c's (master_nodes_waiting,
 * master_node_awaited): a node given up, or refused, is not waited for.
 *
 * At most MASTER_NODE_WAIT_MAX calls wait at once; beyond that, or out of
 * memory, a call is answered at once as before. A held call is marked so
 * (rpc_server_call_hold): a handler -- a plugin's -- that asked for it to
 * be held and answered it anyway is refused SMP_EBUSY, and the call stays
 * with this list instead of being freed under it. A call whose connection
 * closed while it waited is not run again (no put is placed, no read lease
 * taken, for a client that left). At exit the calls still waiting are
 * answered SMP_EAGAIN (dropped, as every answer is once the RPC server
 * closed its connections). Loop thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master_internal.h"

#define MASTER_NODE_WAIT_MAX 4096 /* calls waiting at once */

typedef struct waiting_call {
    smp_rpc_call *call;
    uint8_t *body;
    size_t len;
    uint64_t until_ms;            /* its own wait ends (master_now_ms) */
    struct waiting_call *next;
} waiting_call;

struct master_node_wait {
    waiting_call *head, **tail;   /* in arrival order */
    size_t n;
    int woken;                    /* a node registered: run them at the check */
    waiting_call *running;        /* the call being run again, or NULL */
    int parked_again;             /* its handler parked it once more */
};

static void append(master_node_wait *w, waiting_call *c)
{
    c->next = NULL;
    *w->tail = c;
    w->tail = &c->next;
    w->n++;
}

int master_replicas_awaited(const master *m, const obj_replica *reps, size_t n, uint64_t now)
{
    int awaited = 0;
    if (m->nodes_settled) return 0; /* no node is waited for: every lookup after the start */
    for (size_t i = 0; i < n; i++) {
        if (reps[i].status != OBJ_REPLICA_COMPLETE) continue;
        if (master_node_readable(m, reps[i].node)) return 0;
        awaited |= master_node_awaited(m, reps[i].node, now);
    }
    return awaited;
}

int master_node_wait_park(master *m, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    uint64_t now = master_now_ms();
    master_node_wait *w = m->node_wait;
    if (w != NULL && w->running != NULL && w->running->call == call) {
        /* run again and still short of a node: back in line, same wait */
        if (now >= w->running->until_ms || m->stopping) return 0;
        w->parked_again = 1;
        rpc_server_call_hold(call, 1);
        return 1;
    }
    if (m->stopping || (w != NULL && w->n >= MASTER_NODE_WAIT_MAX)) return 0;
    if (w == NULL) {
        if ((w = calloc(1, sizeof(*w))) == NULL) return 0;
        w->tail = &w->head;
        m->node_wait = w;
    }
    waiting_call *c = calloc(1, sizeof(*c));
    if (c == NULL || (len > 0 && (c->body = malloc(len)) == NULL)) {
        free(c);
        return 0;
    }
    if (len > 0) memcpy(c->body, body, len);
    c->len = len;
    c->call = call;
    c->until_ms = now + m->cfg->node_timeout_ms;
    rpc_server_call_hold(call, 1); /* its handler may not answer it now */
    append(w, c);
    host_metric_add(m->m.node_wait_calls, NULL, 1);
    return 1;
}

void master_node_wait_wake(master *m)
{
    if (m->node_wait != NULL && m->node_wait->n > 0) m->node_wait->woken = 1;
}

/* Run every waiting call's handler again, oldest first; those it parks
 * again keep their place behind the others. */
static void run_all(master *m)
{
    master_node_wait *w = m->node_wait;
    waiting_call *c = w->head;
    w->head = NULL;
    w->tail = &w->head;
    w->n = 0;
    w->woken = 0;
    while (c != NULL) {
        waiting_call *next = c->next;
        rpc_server_call_hold(c->call, 0);
        if (!rpc_server_call_open(c->call)) {
            /* its client left: nothing to run it for (the answer frees it) */
            rpc_reply_error(c->call, SMP_ECANCELED, "the connection closed");
            free(c->body);
            free(c);
            c = next;
            continue;
        }
        w->running = c;
        w->parked_again = 0;
        rpc_server_redispatch(m->rpc, c->call, c->body, c->len);
        w->running = NULL;
        if (w->parked_again) {
            append(w, c);
        } else {
            free(c->body);
            free(c);
        }
        c = next;
    }
}

void master_node_wait_check(master *m)
{
    if (m->node_wait != NULL && m->node_wait->woken && m->rpc != NULL) run_all(m);
}

void master_node_wait_tick(master *m, uint64_t now)
{
    master_node_wait *w = m->node_wait;
    if (w == NULL || w->head == NULL || m->rpc == NULL) return;
    int due = !master_nodes_waiting(m, now);
    for (const waiting_call *c = w->head; c != NULL && !due; c = c->next)
        due = now >= c->until_ms;
    if (due) run_all(m);
}

size_t master_node_wait_count(const master *m)
{
    return m->node_wait != NULL ? m->node_wait->n : 0;
}

void master_node_wait_free(master *m)
{
    master_node_wait *w = m->node_wait;
    if (w == NULL) return;
    while (w->head != NULL) {
        waiting_call *c = w->head;
        w->head = c->next;
        rpc_server_call_hold(c->call, 0);
        rpc_reply_error(c->call, SMP_EAGAIN, "the master stopped while the request waited "
                                             "for a node to register; retry");
        free(c->body);
        free(c);
    }
    free(w);
    m->node_wait = NULL;
}
