/* rpc_hold.c -- NOT_LEADER answers a standby holds while no leader is known.
 *
 * During an election a standby has no leader to name. Answered at once, a
 * client learns nothing and asks the master list again after a pause that
 * doubles up to 100 ms, so it reaches the new leader up to that long after
 * the election ended. Held (rpc_server_set_not_leader_hold), the answer
 * leaves the moment the standby learns the leader (rpc_server_leader_known)
 * and names it, and the client goes straight there; a request held for
 * the whole hold is answered that no leader is known, as it would have
 * been at once.
 *
 * A held request keeps a reference on its connection and counts as one in
 * flight there (so a client cannot pile up held requests past the
 * connection's in-flight bound). Held requests wait in arrival order, each
 * until arrival + hold_ms: the list is sorted by deadline, and one timer
 * fires at the first. Loop thread only. */
#include <stdlib.h>

#include "rpc_internal.h"

typedef struct rpc_held {
    rpc_conn *c;
    uint64_t request_id;
    uint64_t deadline; /* uv_now */
    struct rpc_held *next;
} rpc_held;

static void on_hold_timer(uv_timer_t *t);

/* Arm the timer for the first held request, or stop it when none is. */
static void arm(rpc_server *s)
{
    if (s->held_head == NULL) {
        uv_timer_stop(&s->hold_timer);
        return;
    }
    uint64_t now = uv_now(s->loop), at = s->held_head->deadline;
    uv_timer_start(&s->hold_timer, on_hold_timer, at > now ? at - now : 0, 0);
}

/* Answer the first held request (naming leader, "" for none) and free it. */
static void answer_first(rpc_server *s, const char *leader)
{
    rpc_held *h = s->held_head;
    s->held_head = h->next;
    if (s->held_head == NULL) s->held_tail = NULL;
    s->st.not_leader_held_now--;
    h->c->ncalls--;
    rpc_conn_send_not_leader(h->c, h->request_id, leader);
    rpc_conn_unref(h->c);
    free(h);
}

static void on_hold_timer(uv_timer_t *t)
{
    rpc_server *s = t->data;
    uint64_t now = uv_now(s->loop);
    while (s->held_head != NULL && s->held_head->deadline <= now) answer_first(s, "");
    arm(s);
}

int rpc_hold_add(rpc_conn *c, uint64_t request_id)
{
    rpc_server *s = c->srv;
    rpc_held *h = malloc(sizeof(*h));
    if (h == NULL) return SMP_ENOMEM;
    h->c = c;
    h->request_id = request_id;
    h->deadline = uv_now(s->loop) + s->hold_ms;
    h->next = NULL;
    rpc_conn_ref(c);
    c->ncalls++;
    if (s->held_tail != NULL) s->held_tail->next = h;
    else s->held_head = h;
    s->held_tail = h;
    s->st.not_leader_held++;
    s->st.not_leader_held_now++;
    if (s->held_head == h) arm(s);
    rpc_conn_set_reading(c); /* one more in flight: maybe at the bound */
    return SMP_OK;
}

void rpc_server_set_not_leader_hold(rpc_server *s, uint32_t hold_ms)
{
    if (s != NULL) s->hold_ms = hold_ms;
}

void rpc_server_leader_known(rpc_server *s, const char *endpoint)
{
    if (s == NULL || s->closing || endpoint == NULL || endpoint[0] == '\0') return;
    while (s->held_head != NULL) answer_first(s, endpoint);
    arm(s);
}

int rpc_hold_start(rpc_server *s)
{
    if (uv_timer_init(s->loop, &s->hold_timer) < 0) return SMP_EIO;
    s->hold_timer.data = s;
    uv_unref((uv_handle_t *)&s->hold_timer);
    return SMP_OK;
}

void rpc_hold_close(rpc_server *s)
{
    while (s->held_head != NULL) {
        rpc_held *h = s->held_head;
        s->held_head = h->next;
        h->c->ncalls--;
        rpc_conn_unref(h->c);
        free(h);
    }
    s->held_tail = NULL;
    s->st.not_leader_held_now = 0;
}
