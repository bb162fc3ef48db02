/* rpc_client_watch.c -- a call on a list of masters that waits in
 * silence.
 *
 * A paused or hung master (SIGSTOP, a stalled disk, a host cut off) still
 * has its connections accepted by the kernel and its streams open, so a
 * call there would wait its whole timeout while another master leads.
 * Three things here keep a client moving:
 *  - masters found silent are noted for the whole process, so its other
 *    connections try the others first and leave one before a request goes;
 *  - a call that waits without a byte of its answer asks another master of
 *    the list, on a connection of its own, whether the one waited on still
 *    leads (hedge): a query is sent where the leader is now, and any other
 *    call fails without being sent twice;
 *  - a call that timed out leaves that master for the next call.
 * A master that is only slow is still named leader by the others: its
 * calls wait for it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_client_internal.h"
#include "store_plugin.h"

/* -- Masters found silent, shared by the process's connections ------------ */

/* A master that accepted a connection and did not answer its first request,
 * or left a call waiting to its timeout or past its lease, is noted for
 * RPCC_SILENT_MS: every connection of the process on a list then tries the
 * others first when it connects, and one at that master moves before its
 * next request leaves (a client's connections -- its queries', its
 * transfers', its leases' -- do not each wait to learn it). A connect that
 * it answers clears the note: one a standby names as the leader is still
 * tried first (the hint is newer news), so a note can only cost a master
 * that came back its place at the head of walks, and it lasts long enough
 * that a master that stays silent costs a 2 s probe every few minutes, not
 * every few seconds. */
#define RPCC_SILENT_MAX 16
#define RPCC_SILENT_MS 300000

static pthread_mutex_t silent_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char ep[ML_ENDPOINT_MAX];
    int64_t until_ms; /* 0: a free slot */
} silent_eps[RPCC_SILENT_MAX];
static atomic_uint silent_gen; /* grows with every note */

void rpcc_silent_note(const char *ep, int silent)
{
    int64_t now = rpcc_now_ms();
    size_t slot = RPCC_SILENT_MAX, oldest = 0;
    if (ep[0] == '\0') return;
    pthread_mutex_lock(&silent_lock);
    for (size_t i = 0; i < RPCC_SILENT_MAX; i++) {
        if (silent_eps[i].until_ms != 0 && strcmp(silent_eps[i].ep, ep) == 0) slot = i;
        if (silent_eps[i].until_ms < silent_eps[oldest].until_ms) oldest = i;
    }
    if (slot == RPCC_SILENT_MAX && silent) {
        slot = oldest; /* a free or the soonest-ending slot */
        snprintf(silent_eps[slot].ep, sizeof(silent_eps[slot].ep), "%s", ep);
    }
    if (slot < RPCC_SILENT_MAX) silent_eps[slot].until_ms = silent ? now + RPCC_SILENT_MS : 0;
    pthread_mutex_unlock(&silent_lock);
    if (silent) atomic_fetch_add(&silent_gen, 1u);
}

static int silent_now(const char *ep)
{
    int64_t now = rpcc_now_ms();
    int found = 0;
    pthread_mutex_lock(&silent_lock);
    for (size_t i = 0; i < RPCC_SILENT_MAX && !found; i++)
        found = silent_eps[i].until_ms > now && strcmp(silent_eps[i].ep, ep) == 0;
    pthread_mutex_unlock(&silent_lock);
    return found;
}

/* Where a walk of the list starts (a first connect, a move not to a leader
 * a standby named): past the endpoints noted silent, unless every one is. */
void rpcc_skip_silent(rpcc_conn *c)
{
    size_t start = c->ml.cur, round = master_list_round(&c->ml);
    if (round < 2)
        return;
    for (size_t k = 0; k < round; k++) {
        if (!silent_now(master_list_current(&c->ml))) return;
        master_list_next(&c->ml);
    }
    c->ml.cur = start;
}

/* 1 when c's stream is at a master another connection of the process has
 * since found silent (rpcc_silent_note), and nothing is in flight on it: the
 * request goes elsewhere first. */
int rpcc_at_silent_master(rpcc_conn *c)
{
    unsigned gen = atomic_load_explicit(&silent_gen, memory_order_relaxed);
    if (gen == c->silent_seen || c->ml.n < 2 || c->fd < 0 || c->in_flight > 0 || c->head != NULL)
        return 0; /* a move now would lose the answers on their way */
    c->silent_seen = gen;
    return silent_now(c->endpoint);
}

/* A call on a list of several masters went unanswered for its whole
 * timeout: the master may be paused or hung (a paused leader is replaced
 * within its lease), and every later call on this stream would wait there
 * too. The stream is left: the next request moves to the next master, whose
 * connect checks that it answers, before it leaves; the call itself still
 * returns its SMP_EAGAIN, with this cause. Nothing else was in flight. */
void rpcc_leave_silent_master(rpcc_conn *c)
{
    char why[sizeof(c->err)], ep[sizeof(c->endpoint)];
    memcpy(why, c->err, sizeof(why));
    memcpy(ep, c->endpoint, sizeof(ep));
    rpcc_drop_stream(c);
    c->hinted = 0;
    c->relocate = 1;
    rpcc_silent_note(ep, 1);
    rpcc_conn_err(c, "%s: %s (the next call tries the other masters)", ep, why);
}

/* -- A call that waits in silence: asking another master ------------------- */

/* A connection of c's kind (TLS, token, frame limit) to the one endpoint
 * ep, connected by deadline; NULL when none could be made. */
static rpcc_conn *side_connect(const rpcc_conn *c, const char *ep, int64_t deadline)
{
    rpcc_conn *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->fd = -1;
    s->always_hello = 1; /* its answer says whether ep leads */
    s->timeout_ms = c->timeout_ms;
    s->max_frame = c->max_frame;
    s->next_id = 1;
    s->pause_max_ms = c->pause_max_ms;
    memcpy(s->tls_name, c->tls_name, sizeof(s->tls_name));
    if (c->tls != NULL && SSL_CTX_up_ref(c->tls) == 1)
        s->tls = c->tls;
    if ((c->tls != NULL && s->tls == NULL) ||
        (c->token != NULL && (s->token = strdup(c->token)) == NULL) ||
        master_list_parse(ep, &s->ml, NULL, 0) < 0 || rpcc_list_connect(s, deadline, 0, NULL, 0) < 0) {
        rpcc_close(s);
        return NULL;
    }
    return s;
}

/* c takes the stream of s, a side connection that answered (a request's
 * read leases belong to the connection that asked): c's list is positioned
 * at s's endpoint, and s is left without a stream. */
static void stream_adopt(rpcc_conn *c, rpcc_conn *s)
{
    uint8_t *in = c->in;
    size_t in_cap = c->in_cap;
    rpcc_drop_stream(c);
    c->fd = s->fd;
    c->ssl = s->ssl;
    c->want = s->want;
    c->in = s->in;
    c->in_len = s->in_len;
    c->in_cap = s->in_cap;
    c->head = s->head;
    c->tail = s->tail;
    c->in_flight = s->in_flight;
    c->recv_blocks = s->recv_blocks;
    c->rcvtimeo_ms = s->rcvtimeo_ms;
    c->answered = s->answered;
    c->await_reply = 0;
    memcpy(c->endpoint, s->endpoint, sizeof(c->endpoint));
    memcpy(c->auth_tenant, s->auth_tenant, sizeof(c->auth_tenant));
    memcpy(c->auth_role, s->auth_role, sizeof(c->auth_role));
    c->leadership = s->leadership;
    memcpy(c->hello_leader, s->hello_leader, sizeof(c->hello_leader));
    master_list_set_leader(&c->ml, s->endpoint, strlen(s->endpoint));
    c->hinted = 0;
    c->moves++;
    s->fd = -1;
    s->ssl = NULL;
    s->in = in;
    s->in_cap = in_cap;
    s->in_len = 0;
    s->head = s->tail = NULL;
    s->in_flight = 0;
}

/* What asking another master said of a call that waits (hedge). */
enum { HEDGE_WAIT = 0, HEDGE_ANSWERED = 1, HEDGE_MOVE = RPCC_HEDGE_MOVE };

/* The verdict when another master says leader leads ("": none known):
 * HEDGE_MOVE with c->ml at it when that is not the master waited on (noted
 * silent), else HEDGE_WAIT. */
static int hedge_move(rpcc_conn *c, const char *leader)
{
    if (leader[0] == '\0' || strcmp(leader, c->endpoint) == 0)
        return HEDGE_WAIT;
    rpcc_silent_note(c->endpoint, 1);
    c->hinted = master_list_set_leader(&c->ml, leader, strlen(leader));
    return HEDGE_MOVE;
}

/* A call on a list has waited c->quiet_ms (RPCC_ATTEMPT_MS by default)
 * without a byte of its answer from the master it was sent to
 * (c->endpoint). Another master of the list is asked, on a connection of
 * its own whose HELLO says whether it leads, by deadline:
 *  - a standby naming another leader, or a master that leads: the one
 *    waited on no longer does (deposed, or paused past its lease).
 *    HEDGE_MOVE, c->ml at that leader -- except for an idempotent call
 *    to a master that leads: the request goes there too, and when it
 *    answers, HEDGE_ANSWERED with the answer in *st, *body, *len, *msg and
 *    c takes that connection (a lookup's read lease belongs to it);
 *  - a standby naming the master waited on (it leads and is slow) or
 *    nobody yet (an election), or no master that answers: HEDGE_WAIT.
 * An older master's HELLO says nothing of leadership: an idempotent call
 * is sent to it and read as above (an answer, or NOT_LEADER naming the
 * leader); any other call waits. The endpoints take turns from one hedge
 * to the next (c->hedge_at). */
static int hedge(rpcc_conn *c, unsigned flags, uint32_t service, uint32_t method,
                 const uint8_t *req, size_t req_len, int64_t deadline, int *st, uint8_t **body,
                 size_t *len, char **msg)
{
    size_t round = master_list_round(&c->ml);
    int idempotent = (flags & RPCC_IDEMPOTENT) != 0;
    for (size_t k = 0; k < round && rpcc_now_ms() < deadline; k++) {
        size_t i = (c->hedge_at + k) % round;
        const char *ep = i < c->ml.n ? c->ml.ep[i] : c->ml.leader;
        char leader[ML_ENDPOINT_MAX];
        rpcc_conn *s;
        uint64_t id;
        int rc, verdict;
        if (strcmp(ep, c->endpoint) == 0 || (s = side_connect(c, ep, deadline)) == NULL)
            continue;
        c->hedge_at = i + 1;
        if (s->leadership == RPCC_STANDBY || (s->leadership == RPCC_LEADS && !idempotent)) {
            snprintf(leader, sizeof(leader), "%s",
                     s->leadership == RPCC_LEADS ? s->endpoint : s->hello_leader);
            rpcc_close(s);
            return hedge_move(c, leader);
        }
        if (!idempotent) { /* an older master: its word on leadership is not had */
            rpcc_close(s);
            return HEDGE_WAIT;
        }
        rc = rpcc_send(s, service, method, req, req_len, &id);
        if (rc == SMP_OK)
            rc = rpcc_recv_by(s, id, deadline, NULL, st, body, len, msg);
        if (rc == SMP_OK && *st != SMP_ENOTLEADER) {
            rpcc_silent_note(c->endpoint, 1); /* it leads, not the one waited on */
            stream_adopt(c, s);
            rpcc_close(s);
            return HEDGE_ANSWERED;
        }
        verdict = HEDGE_WAIT;
        if (rc == SMP_OK) {
            verdict = hedge_move(c, s->hinted ? master_list_current(&s->ml) : "");
            if (body != NULL) {
                free(*body);
                *body = NULL;
            }
            if (msg != NULL) {
                free(*msg);
                *msg = NULL;
            }
        }
        rpcc_close(s);
        if (rc == SMP_OK)
            return verdict; /* a standby's word is enough */
    }
    return HEDGE_WAIT;
}

/* The answer to request id, just sent by a call: rpcc_recv's, except that
 * on a list of several masters, with nothing else in flight, another
 * master is asked (hedge) each time the call has waited c->quiet_ms
 * without a byte of its answer. Returns as rpcc_recv, or HEDGE_MOVE
 * (positive) when another master leads now: an idempotent call is sent
 * there, any other fails without being sent again. */
int rpcc_recv_watched(rpcc_conn *c, unsigned flags, uint32_t service, uint32_t method,
                      const uint8_t *req, size_t req_len, uint64_t id, int *st, uint8_t **body,
                      size_t *len, char **msg)
{
    int64_t end = rpcc_op_deadline(c);
    int quiet = c->quiet_ms > 0 ? c->quiet_ms : RPCC_ATTEMPT_MS;
    if (master_list_round(&c->ml) < 2 || c->in_flight != 1 || c->head != NULL)
        return rpcc_recv_by(c, id, end, NULL, st, body, len, msg);
    for (;;) {
        int64_t slice = rpcc_now_ms() + quiet;
        int rc, v;
        if (end >= 0 && slice >= end)
            return rpcc_recv_by(c, id, end, NULL, st, body, len, msg);
        if ((rc = rpcc_recv_by(c, id, slice, NULL, st, body, len, msg)) != SMP_EAGAIN)
            return rc;
        if (c->in_len > 0)
            continue; /* its answer is arriving */
        slice = rpcc_now_ms() + RPCC_ATTEMPT_MS;
        if ((v = hedge(c, flags, service, method, req, req_len,
                       end >= 0 && end < slice ? end : slice, st, body, len, msg)) ==
            HEDGE_ANSWERED)
            return SMP_OK;
        if (v == HEDGE_MOVE)
            return HEDGE_MOVE;
    }
}

