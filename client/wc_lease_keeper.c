/* wc_lease_keeper.c -- the revision leases of a store's loads and views,
 * and the one thread and connection that renew them.
 *
 * weight_get and weight_get_mapped acquire a generation-fenced lease on the
 * revision they read (the reply carries the metadata: manifest key and
 * SHA-256) and hand it to their store's renewer, which renews every lease
 * it keeps at a third of its TTL on a connection of its own, from a thread
 * of its own. One renewer per store, not one per load: a view is held for
 * as long as its caller likes, and a serving loop that takes a view per
 * request would otherwise open a connection (left in TIME-WAIT at its
 * close) and start a thread per request. A renewal the master refuses (the
 * lease is gone) marks its keeper lost and renews it no more, which stops
 * a transfer and is what weight_mapped_status reports; transport hiccups
 * are retried at the next interval.
 *
 * A view fails closed: its keeper has an on_lost callback (the fence that
 * makes its bytes inaccessible, weight_get_mapped.c) and a deadline, the
 * last renewal's send time plus the TTL minus a margin
 * (wc_lease_fence_margin): after the TTL the master may end the lease,
 * delete the revision and hand its memory to another one. A second thread,
 * the fencer, watches the deadlines, since a renewal call may block for
 * longer than a TTL (WC_RPC_TIMEOUT_MS); a refused renewal fences at once on
 * the renewer's thread. The renewer is counted: the store holds a reference
 * and so does each kept lease, so views may outlive weight_store_close; the
 * last reference stops both threads. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host_rpc.pb-c.h"
#include "wc_get.h"
#include "wc_reported.h"

#define M(name) WMRPC__WEIGHT_METHOD__WEIGHT_##name

struct wc_renewer {
    pthread_mutex_t lock;        /* refs, stop, keepers, renewing, fencing, last_fail */
    pthread_cond_t wake;         /* the thread: a lease added, or stop */
    pthread_cond_t fence_wake;   /* the fencer: a lease added, or stop */
    pthread_cond_t done;         /* a renewal or fence ended (a keeper's stop waits for its own) */
    unsigned refs;
    int stop;
    pthread_t thread;
    pthread_t fencer;            /* the deadlines' thread (fencer_main) */
    wc_lease_keeper *keepers;    /* kept leases, linked by next */
    wc_lease_keeper *renewing;   /* the one whose renewal (or its fence) is in flight, or NULL */
    wc_lease_keeper *fencing;    /* the one the fencer is fencing, or NULL */
    char last_fail[sizeof(((wc_lease_keeper *)0)->lost_msg)]; /* the last renewal's transport
                                                               failure, "" after a success */
    /* One call at a time on conn (the thread's renewals, a view's release);
     * shadow is the calls' master, tenant and error buffer. */
    pthread_mutex_t call_lock;
    rpcc_conn *conn;
    weight_store shadow;
};

int wc_lease_call(weight_store *s, rpcc_conn **conn, uint32_t method, const weight_identity *id,
                  uint64_t lease_id, uint64_t lease_gen, uint64_t ttl_ms,
                  Wmrpc__LeaseResponse **resp)
{
    Wmrpc__LeaseRequest req = WMRPC__LEASE_REQUEST__INIT;
    Wmrpc__WeightIdentity wid;
    char tenant[WEIGHT_ID_MAX + 1];
    wc_wire_identity(s, id, &wid, tenant);
    req.identity = &wid;
    req.lease_id = lease_id;
    req.metadata_generation = lease_gen;
    req.ttl_ms = ttl_ms;
    const ProtobufCMessageDescriptor *desc = resp ? &wmrpc__lease_response__descriptor : NULL;
    if (method == M(LEASE_ACQUIRE)) /* BUSY: wait out the metadata change in flight */
        return wc_call_patient(s, conn, method, &req.base, desc, (ProtobufCMessage **)resp);
    return wc_call(s, conn, method, &req.base, desc, (ProtobufCMessage **)resp);
}

uint64_t wc_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t wc_lease_fence_margin(uint64_t ttl_ms)
{
    uint64_t m = ttl_ms / 5 > 20 ? ttl_ms / 5 : 20;
    return m < ttl_ms ? m : ttl_ms;
}

/* The deadline of a lease whose renewal (or acquire) was sent at sent_ms:
 * no deadline for a keeper without a fence or a TTL. */
static uint64_t deadline_of(const wc_lease_keeper *k, uint64_t sent_ms)
{
    if (k->on_lost == NULL || k->ttl_ms == 0) return UINT64_MAX;
    return sent_ms + k->ttl_ms - wc_lease_fence_margin(k->ttl_ms);
}

/* Mark k lost with code and cause (r->lock held): 1 when this call did,
 * 0 when it was lost already (the other thread got there first). */
static int mark_lost(wc_lease_keeper *k, int code, const char *cause)
{
    if (atomic_load(&k->lost) != 0) return 0;
    snprintf(k->lost_msg, sizeof k->lost_msg, "%s", cause);
    atomic_store(&k->lost, code);
    return 1;
}

static void unlink_keeper(wc_renewer *r, wc_lease_keeper *k)
{
    for (wc_lease_keeper **p = &r->keepers; *p != NULL; p = &(*p)->next)
        if (*p == k) {
            *p = k->next;
            k->next = NULL;
            return;
        }
}

/* Wait on cond (r->lock held) until due_ms (CLOCK_MONOTONIC), or a signal. */
static void wait_until(wc_renewer *r, pthread_cond_t *cond, uint64_t due_ms)
{
    struct timespec ts;
    uint64_t now = wc_mono_ms();
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (due_ms > now ? due_ms - now : 0) * 1000000ull;
    ts.tv_sec += (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    (void)pthread_cond_timedwait(cond, &r->lock, &ts);
}

/* The renewer's thread: renew the kept lease due first, sleep until the
 * next one is due, until the last reference goes. A renewal the master
 * answered with a refusal marks its keeper lost, drops it and fences it
 * (on_lost) before the next renewal; one that succeeded moves the
 * keeper's deadline to its send time + TTL - margin. */
static void *renewer_main(void *arg)
{
    wc_renewer *r = arg;
    pthread_mutex_lock(&r->lock);
    while (!r->stop) {
        wc_lease_keeper *k = NULL;
        for (wc_lease_keeper *i = r->keepers; i != NULL; i = i->next)
            if (k == NULL || i->due_ms < k->due_ms) k = i;
        uint64_t now = wc_mono_ms();
        if (k == NULL || k->due_ms > now) {
            if (k == NULL) {
                pthread_cond_wait(&r->wake, &r->lock);
            } else {
                wait_until(r, &r->wake, k->due_ms);
            }
            continue;
        }
        r->renewing = k;
        pthread_mutex_unlock(&r->lock);
        char cause[sizeof k->lost_msg];
        uint64_t sent = wc_mono_ms();
        pthread_mutex_lock(&r->call_lock);
        int rc = wc_lease_call(&r->shadow, &r->conn, M(LEASE_RENEW), &k->id, k->lease_id,
                               k->lease_gen, k->ttl_ms, NULL);
        snprintf(cause, sizeof cause, "lease renewal: %s", r->shadow.err);
        pthread_mutex_unlock(&r->call_lock);
        pthread_mutex_lock(&r->lock);
        int fence = 0;
        if (atomic_load(&k->lost) != 0) {
            /* fenced by its deadline while the call was in flight (the
             * fencer unlinked it): a late success does not bring it back */
        } else if (rc < 0 && rc != WEIGHT_EIO && rc != WEIGHT_EAGAIN) {
            fence = mark_lost(k, rc == WEIGHT_ENOT_FOUND ? WEIGHT_ELEASE_EXPIRED : rc, cause) &&
                    k->on_lost != NULL;
            unlink_keeper(r, k);
        } else {
            k->due_ms = wc_mono_ms() + k->interval_ms;
            if (rc == 0) {
                k->deadline_ms = deadline_of(k, sent);
                r->last_fail[0] = '\0';
            } else {
                memcpy(r->last_fail, cause, sizeof r->last_fail); /* shadow.err is call_lock's */
            }
        }
        if (fence) {
            pthread_mutex_unlock(&r->lock);
            k->on_lost(k);
            pthread_mutex_lock(&r->lock);
        }
        r->renewing = NULL;
        pthread_cond_broadcast(&r->done);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* The fencer's thread: sleep until the earliest deadline of a kept lease
 * with a fence; a lease whose deadline passed without a renewal is marked
 * lost (its cause: the last transport failure, if any), dropped and fenced,
 * even while its renewal call is still in flight on the renewer's thread. */
static void *fencer_main(void *arg)
{
    wc_renewer *r = arg;
    pthread_mutex_lock(&r->lock);
    while (!r->stop) {
        wc_lease_keeper *k = NULL;
        for (wc_lease_keeper *i = r->keepers; i != NULL; i = i->next)
            if (i->on_lost != NULL && atomic_load(&i->lost) == 0 &&
                (k == NULL || i->deadline_ms < k->deadline_ms))
                k = i;
        if (k == NULL || k->deadline_ms == UINT64_MAX) {
            pthread_cond_wait(&r->fence_wake, &r->lock);
            continue;
        }
        if (k->deadline_ms > wc_mono_ms()) {
            wait_until(r, &r->fence_wake, k->deadline_ms);
            continue;
        }
        char cause[sizeof k->lost_msg];
        snprintf(cause, sizeof cause,
                 "lease renewal: lease %" PRIu64 " not renewed within %" PRIu64
                 " ms of its %" PRIu64 " ms TTL (%.600s); the master may end it and reuse the revision's memory, so its "
                 "view was made inaccessible",
                 k->lease_id, k->ttl_ms - wc_lease_fence_margin(k->ttl_ms), k->ttl_ms,
                 r->last_fail[0] ? r->last_fail : "the renewal did not answer in time");
        (void)mark_lost(k, WEIGHT_ELEASE_EXPIRED, cause);
        unlink_keeper(r, k);
        r->fencing = k;
        pthread_mutex_unlock(&r->lock);
        k->on_lost(k);
        pthread_mutex_lock(&r->lock);
        r->fencing = NULL;
        pthread_cond_broadcast(&r->done);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* Close r's connection and free it (its threads are joined or never ran). */
static void renewer_free(wc_renewer *r)
{
    rpcc_close(r->conn);
    pthread_cond_destroy(&r->fence_wake);
    pthread_cond_destroy(&r->done);
    pthread_cond_destroy(&r->wake);
    pthread_mutex_destroy(&r->call_lock);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

/* s's renewer, made with its connection and thread on first use; a new
 * reference on it in *out. WEIGHT_OK, WEIGHT_EIO (the connection) or
 * WEIGHT_ENOMEM, the cause in s->err. */
static int renewer_of(weight_store *s, wc_renewer **out)
{
    wc_renewer *r = s->renewer;
    char rpc_err[512];
    if (r == NULL) {
        pthread_condattr_t attr;
        if ((r = calloc(1, sizeof *r)) == NULL) return wc_fail(s, WEIGHT_ENOMEM, "out of memory");
        rpcc_options opt = wc_rpc_options(s);
        if (rpcc_connect(s->master, &opt, &r->conn, rpc_err, sizeof rpc_err) < 0) {
            free(r);
            return wc_fail(s, WEIGHT_EIO, "lease renewal connection: %s", rpc_err);
        }
        snprintf(r->shadow.master, sizeof r->shadow.master, "%s", s->master);
        snprintf(r->shadow.tenant, sizeof r->shadow.tenant, "%s", s->tenant);
        pthread_mutex_init(&r->lock, NULL);
        pthread_mutex_init(&r->call_lock, NULL);
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&r->wake, &attr);
        pthread_cond_init(&r->fence_wake, &attr);
        pthread_condattr_destroy(&attr);
        pthread_cond_init(&r->done, NULL);
        r->refs = 1; /* the store's */
        if (pthread_create(&r->thread, NULL, renewer_main, r) != 0) {
            renewer_free(r);
            return wc_fail(s, WEIGHT_ENOMEM, "cannot start the lease renewal thread");
        }
        if (pthread_create(&r->fencer, NULL, fencer_main, r) != 0) {
            pthread_mutex_lock(&r->lock);
            r->stop = 1;
            pthread_cond_signal(&r->wake);
            pthread_mutex_unlock(&r->lock);
            pthread_join(r->thread, NULL);
            renewer_free(r);
            return wc_fail(s, WEIGHT_ENOMEM, "cannot start the lease fence thread");
        }
        s->renewer = r;
    }
    pthread_mutex_lock(&r->lock);
    r->refs++;
    pthread_mutex_unlock(&r->lock);
    *out = r;
    return WEIGHT_OK;
}

void wc_renewer_put(wc_renewer *r)
{
    if (r == NULL) return;
    pthread_mutex_lock(&r->lock);
    unsigned left = --r->refs;
    if (left == 0) {
        r->stop = 1;
        pthread_cond_signal(&r->wake);
        pthread_cond_signal(&r->fence_wake);
    }
    pthread_mutex_unlock(&r->lock);
    if (left > 0) return;
    pthread_join(r->thread, NULL);
    pthread_join(r->fencer, NULL);
    renewer_free(r);
}

int wc_lease_keeper_start(weight_store *s, wc_lease_keeper *k)
{
    wc_renewer *r;
    int rc = renewer_of(s, &r);
    if (rc < 0) return rc;
    k->r = r;
    atomic_store(&k->lost, 0);
    k->lost_msg[0] = '\0';
    pthread_mutex_lock(&r->lock);
    k->due_ms = wc_mono_ms() + k->interval_ms;
    k->deadline_ms = deadline_of(k, k->asked_ms ? k->asked_ms : wc_mono_ms());
    /* an acquire that waited out a BUSY for much of the TTL: renew at once
     * rather than be fenced before the first renewal */
    if (k->deadline_ms != UINT64_MAX && k->deadline_ms < k->due_ms + k->interval_ms)
        k->due_ms = wc_mono_ms();
    k->next = r->keepers;
    r->keepers = k;
    pthread_cond_signal(&r->wake);
    pthread_cond_signal(&r->fence_wake);
    pthread_mutex_unlock(&r->lock);
    return WEIGHT_OK;
}

void wc_lease_keeper_stop(wc_lease_keeper *k, int release)
{
    wc_renewer *r = k->r;
    if (r == NULL) return;
    pthread_mutex_lock(&r->lock);
    while (r->renewing == k || r->fencing == k) pthread_cond_wait(&r->done, &r->lock);
    unlink_keeper(r, k);
    pthread_mutex_unlock(&r->lock);
    if (release && k->lease_id != 0) {
        pthread_mutex_lock(&r->call_lock);
        (void)wc_lease_call(&r->shadow, &r->conn, M(LEASE_RELEASE), &k->id, k->lease_id, 0, 0,
                            NULL);
        pthread_mutex_unlock(&r->call_lock);
    }
    k->r = NULL;
    wc_renewer_put(r);
}

int wc_lease_keeper_report_corrupt(wc_lease_keeper *k, const char *key, const char *node,
                                   const char *segment, uint64_t offset)
{
    wc_renewer *r = k->r;
    ReportCorruptRequest req = REPORT_CORRUPT_REQUEST__INIT;
    uint8_t *buf, *rbody = NULL;
    size_t len, rlen = 0;
    char *msg = NULL;
    int status = 0, rc = WEIGHT_EIO;
    if (r == NULL) return WEIGHT_EIO;
    req.key = (char *)key;
    if (node != NULL && node[0] != '\0') {
        req.node = (char *)node;
        req.segment = (char *)(segment ? segment : "");
        req.offset = offset;
    }
    len = report_corrupt_request__get_packed_size(&req);
    if ((buf = malloc(len ? len : 1)) == NULL) return WEIGHT_ENOMEM;
    report_corrupt_request__pack(&req, buf);
    pthread_mutex_lock(&r->call_lock);
    if (r->conn != NULL)
        rc = rpcc_call_ex(r->conn, 0, HOST_SERVICE__HOST_SERVICE_OBJECTS,
                          OBJECTS_METHOD__OBJ_REPORT_CORRUPT, buf, len, &status, &rbody, &rlen, &msg);
    pthread_mutex_unlock(&r->call_lock);
    free(buf);
    free(rbody);
    free(msg);
    rc = rc < 0 ? rc : status < 0 ? status : WEIGHT_OK;
    if (rc == WEIGHT_OK) wc_reported_note(key, node, segment, offset);
    return rc;
}

/* How often to renew a lease that expires at expires_ms (wall clock): a
 * third of what is left of its TTL, at least every 50 ms. */
uint64_t wc_lease_renew_interval(const weight_store *s, uint64_t expires_ms)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t wall = (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
    uint64_t ttl = expires_ms > wall ? expires_ms - wall : 0;
    if (ttl == 0) ttl = s->lease_ttl_ms ? s->lease_ttl_ms : 30000;
    return ttl / 3 > 50 ? ttl / 3 : 50;
}
