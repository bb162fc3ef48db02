/* master_drain.c -- the graceful stop of a master (SIGTERM, SIGINT).
 *
 * A master that stopped at once would close its connections with calls in
 * them: a put end whose record was on its way to the OpLog got no answer,
 * the client could not tell whether it landed, and its import failed (and
 * was left IMPORTING). A SIGKILL does no better, but a rolling restart or
 * an upgrade stops masters on purpose and must not fail the calls it meets.
 * So a master told to stop first drains:
 *  - new calls are refused. An HA leader refuses them SMP_ENOTLEADER naming
 *    no leader, as a standby refuses them during an election (the HELLO of
 *    a new connection says so too), and such refusals are not held: the
 *    client walks its master list at once. A master alone has nobody to
 *    send a client to: it refuses them SMP_EAGAIN saying that it is
 *    stopping, but still answers status and authentication. Nothing
 *    refused was applied, so every client may send it again;
 *  - the calls it already accepted run to their answer (a put end is
 *    answered once its record is durable, never before), and so may the
 *    puts it started: their put end and revoke are still taken, so that a
 *    payload or manifest being written when the signal came is ended here
 *    instead of failing, and so is the put start of a connection that has
 *    a put open here (a writer starting a batch of puts ends none of them
 *    before all started);
 *  - when no call is open, no put is in flight and no call was answered
 *    for MASTER_DRAIN_QUIET_MS, or after MASTER_DRAIN_MS, whichever comes
 *    first, it stops as before. Puts still open then (a payload of
 *    gigabytes still being copied) are handed on first: a PUT_HANDOFF
 *    record carries their ranges to the master that replays the log next
 *    (the next leader, or this one restarted), which keeps the ranges from
 *    other puts and takes the writers' put ends. Then a WRITE_ZONES record
 *    drops this master's write zones (every writer in them is handed on),
 *    so that the next master holds none of their bytes back. In HA each is
 *    written only when every registered master advertises that it replays
 *    it (an older build would stop on it); the master stops once they are
 *    durable and the put ends taken meanwhile are answered, or
 *    MASTER_HANDOFF_MS after they were appended
 *    (master_stop): an HA leader's election resigns (the lease is revoked,
 *    so a standby is elected at once, not after the lease's TTL), the log
 *    is flushed and the connections close.
 * A node's polls are new calls too: its deferred poll is answered at the
 * drain's start, and its next one is refused, so that a drain with nothing
 * else open ends at once. A second signal stops at once, and so
 * does a standby, which has no call of its own open. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#include "ha_election.h"
#include "host_rpc.pb-c.h"
#include "master_internal.h"
#include "obj_store.h"

/* The longest a leader drains before it stops anyway: longer than a put of
 * a payload object takes, well under the clients' call timeouts (a node's
 * 10 s, libweightclient's 60 s), which a refused call walks on within. */
#define MASTER_DRAIN_MS 5000u
#define MASTER_DRAIN_POLL_MS 5u
/* A client that has just had its answer may be sending its next request on
 * the same connection: one that arrived after the connections closed would
 * fail with its fate unknown to the client (a reset), when it could have
 * been refused, which sends the client on. So the drain ends only once no
 * call was answered for this long -- a client's turn from one call to the
 * next, with room for a loaded machine. Refusals do not count, nor answers
 * to status and authentication (RPC_ADMIT_ASIDE), so clients and nodes that
 * walk their master lists past this one, saying HELLO to each, do not hold
 * it up. */
#define MASTER_DRAIN_QUIET_MS 100u
/* The longest a stopping master waits for its PUT_HANDOFF to be durable. */
#define MASTER_HANDOFF_MS 3000u

enum { MASTER_HANDOFF_NONE, MASTER_HANDOFF_WAITING, MASTER_HANDOFF_DONE };

/* What is still open: calls dispatched and not answered, puts started and
 * not ended; and the new calls a master alone refused so far (only its
 * drain refuses with a status of its own). */
static void drain_open(master *m, uint64_t *calls, uint64_t *puts, uint64_t *refused)
{
    rpc_server_stats rs = {0};
    obj_stats os = {0};
    rpc_server_get_stats(m->rpc, &rs);
    obj_store_stats(master_objs(m), &os);
    *calls = rs.calls_outstanding;
    *puts = os.puts_in_flight;
    *refused = rs.admission_refused;
}

/* One of the records a stopping master waits for is durable, or failed. */
static void drain_record_done(master *m)
{
    if (m->drain_awaited > 0 && --m->drain_awaited == 0) m->drain_handoff = MASTER_HANDOFF_DONE;
}

static void on_handed(master *m, void *arg, int status, uint64_t seq)
{
    size_t n = (size_t)(uintptr_t)arg;
    if (status == SMP_OK)
        fprintf(stderr, "store_master: %zu open put%s handed on (PUT_HANDOFF, record %" PRIu64
                "): the next master keeps their ranges and takes their put ends\n", n,
                n == 1 ? "" : "s", seq);
    else
        fprintf(stderr, "store_master: the open puts were not handed on (%s): the next master "
                "does not know their ranges\n", smp_strerror(status));
    drain_record_done(m);
}

static void on_zones_dropped(master *m, void *arg, int status, uint64_t seq)
{
    (void)arg;
    if (status == SMP_OK)
        fprintf(stderr, "store_master: write zones dropped (WRITE_ZONES, record %" PRIu64
                "): the next master holds back nothing of them\n", seq);
    else
        fprintf(stderr, "store_master: the write zones were not dropped (%s): the next master "
                "holds their free bytes back for a while\n", smp_strerror(status));
    drain_record_done(m);
}

/* Append the PUT_HANDOFF of the puts still open (puts: how many), then a
 * WRITE_ZONES that drops this master's write zones once its writers are all
 * handed on, so that the next master holds nothing of them back. SMP_OK:
 * stop once they are durable (on_handed, on_zones_dropped); otherwise stop
 * now (nothing to write, or it cannot be: said in the log). */
static int hand_off_puts(master *m, uint64_t puts)
{
    char why[200];
    obj_record rec = {0}, zones = {0};
    size_t n = 0;
    int rc = SMP_ENOTFOUND, zrc = SMP_ENOTFOUND;
    if (!master_ha_all_have(m, HA_FEATURE_PUT_HANDOFF, why, sizeof(why))) {
        if (puts != 0)
            fprintf(stderr, "store_master: the open puts are not handed on (%s): the next "
                    "master does not know their ranges\n", why);
        return SMP_ENOTSUP;
    }
    m->drain_awaited = 0;
    if (puts != 0 && (rc = obj_prepare_put_handoff(master_objs(m), &rec, &n)) == SMP_OK) {
        m->drain_awaited++; /* durable callbacks come from the loop, after this */
        if ((rc = master_commit(m, &rec, NULL, on_handed, (void *)(uintptr_t)n)) < 0)
            m->drain_awaited--;
    }
    if (rc < 0 && rc != SMP_ENOTFOUND)
        fprintf(stderr, "store_master: the open puts were not handed on (%s): the next "
                "master does not know their ranges\n", smp_strerror(rc));
    /* the zones go only with every writer in them handed on */
    if ((rc == SMP_OK || rc == SMP_ENOTFOUND) &&
        master_ha_all_have(m, HA_FEATURE_WRITE_ZONES, why, sizeof(why)) &&
        (zrc = obj_prepare_write_zones(master_objs(m), NULL, 1, &zones)) == SMP_OK) {
        m->drain_awaited++;
        if ((zrc = master_commit(m, &zones, NULL, on_zones_dropped, NULL)) < 0)
            m->drain_awaited--;
    }
    if (m->drain_awaited == 0) return rc < 0 ? rc : zrc;
    m->drain_handoff = MASTER_HANDOFF_WAITING;
    return SMP_OK;
}

static void on_drain_timer(uv_timer_t *t)
{
    master *m = t->data;
    uint64_t calls, puts, refused, now = master_now_ms();
    char said[64] = "";
    drain_open(m, &calls, &puts, &refused);
    if (m->drain_handoff != MASTER_HANDOFF_NONE) {
        /* the put ends taken meanwhile are answered too, once durable */
        int late = now >= m->drain_until_ms + MASTER_HANDOFF_MS;
        if (!late && (m->drain_handoff == MASTER_HANDOFF_WAITING || calls != 0)) return;
        if (m->drain_handoff == MASTER_HANDOFF_WAITING)
            fprintf(stderr, "store_master: the PUT_HANDOFF was not durable within %u ms: "
                    "stopping without it\n", MASTER_HANDOFF_MS);
        master_stop(m);
        return;
    }
    if ((calls != 0 || puts != 0 || rpc_server_ms_since_answer(m->rpc) < MASTER_DRAIN_QUIET_MS) &&
        now < m->drain_until_ms)
        return;
    if (!m->cfg->ha_enabled)
        snprintf(said, sizeof(said), ", %" PRIu64 " new call%s refused", refused,
                 refused == 1 ? "" : "s");
    if (calls != 0 || puts != 0)
        fprintf(stderr, "store_master: drained for %u ms, %" PRIu64 " call%s and %" PRIu64
                " put%s still open%s%s: stopping\n",
                MASTER_DRAIN_MS, calls, calls == 1 ? "" : "s", puts, puts == 1 ? "" : "s",
                m->cfg->ha_enabled ? " (their clients find the next leader)" : "", said);
    else
        fprintf(stderr, "store_master: drained in %" PRIu64 " ms, every call answered%s: "
                "stopping\n", now - (m->drain_until_ms - MASTER_DRAIN_MS), said);
    if (hand_off_puts(m, puts) == SMP_OK) return; /* stop once it is durable */
    master_stop(m);
}

/* The admission of a master alone while it drains (rpc_admit_fn): the end
 * and revoke of a put begun here, and the rest of a batch of put starts,
 * are taken (master_drain_admits); status, authentication and the
 * leadership question (0, 0) are answered aside (a client polling the status
 * does not hold the drain); the rest is refused SMP_EAGAIN, marked stopping
 * (RPC_ADMIT_STOPPING: a client given this master alone waits for the next
 * one and sends the call again there). */
static int alone_admit(void *arg, uint64_t conn, uint32_t service, uint32_t method,
                       const char **named)
{
    master *m = arg;
    if (master_drain_admits(m, conn, service, method)) return 0;
    if ((service == 0 && method == 0) || service == HOST_SERVICE__HOST_SERVICE_AUTH ||
        (service == HOST_SERVICE__HOST_SERVICE_ADMIN && method == ADMIN_METHOD__ADMIN_STATUS))
        return RPC_ADMIT_ASIDE;
    *named = "store_master is stopping: it takes no new call (the calls it had accepted are "
             "answered); send it again once the master is back";
    return RPC_ADMIT_STOPPING;
}

void master_stop_gracefully(master *m)
{
    uint64_t calls, puts, refused;
    int ha = m->cfg->ha_enabled;
    if (m->stopping) return;
    if (m->draining || m->rpc == NULL || !m->serving || (ha && !master_is_leader(m))) {
        master_stop(m); /* a second signal, a standby, a master not serving yet */
        return;
    }
    m->draining = 1;
    master_nodes_answer_polls(m);
    drain_open(m, &calls, &puts, &refused);
    m->drain_until_ms = master_now_ms() + MASTER_DRAIN_MS;
    if (ha) {
        rpc_server_set_not_leader_hold(m->rpc, 0);
    } else {
        rpc_server_set_admission(m->rpc, alone_admit, m);
    }
    fprintf(stderr, "store_master: %s; %" PRIu64 " open call%s and %" PRIu64 " put%s in flight "
            "may end here (at most %u ms)%s\n",
            ha ? "leader stopping: new calls are sent to the other masters"
               : "stopping: new calls are refused",
            calls, calls == 1 ? "" : "s", puts, puts == 1 ? "" : "s", MASTER_DRAIN_MS,
            ha ? ", then the leadership is resigned" : "");
    uv_timer_init(&m->loop, &m->drain_timer);
    m->drain_timer.data = m;
    m->drain_timer_open = 1;
    uv_timer_start(&m->drain_timer, on_drain_timer, 0, MASTER_DRAIN_POLL_MS);
}

int master_drain_admits(master *m, uint64_t conn, uint32_t service, uint32_t method)
{
    if (!m->draining) return 1;
    if (service != HOST_SERVICE__HOST_SERVICE_OBJECTS) return 0;
    if (method == OBJECTS_METHOD__OBJ_PUT_END || method == OBJECTS_METHOD__OBJ_PUT_REVOKE) return 1;
    /* A writer that starts a batch of puts before it writes any (as
     * libweightclient does) ends the puts it began only once the whole
     * batch started: refusing the rest would hold the drain to its cap on
     * puts that never end, while the writer waits for the next master.
     * Once the open puts are handed on, a put started here would not be. */
    return method == OBJECTS_METHOD__OBJ_PUT_START && m->drain_handoff == MASTER_HANDOFF_NONE &&
           obj_puts_owned(master_objs(m), conn);
}

void master_drain_close(master *m)
{
    if (!m->drain_timer_open) return;
    m->drain_timer_open = 0;
    uv_timer_stop(&m->drain_timer);
    uv_close((uv_handle_t *)&m->drain_timer, NULL);
}
