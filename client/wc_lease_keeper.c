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
 * are retried at the next interval. The renewer is counted: the store holds
 * a reference and so does each kept lease, so views may outlive
 * weight_store_close; the last reference stops the thread. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wc_get.h"

#define M(name) WMRPC__WEIGHT_METHOD__WEIGHT_##name

struct wc_renewer {
    pthread_mutex_t lock;        /* refs, stop, keepers, renewing */
    pthread_cond_t wake;         /* the thread: a lease added, or stop */
    pthread_cond_t done;         /* a renewal ended (a keeper's stop waits for its own) */
    unsigned refs;
    int stop;
    pthread_t thread;
    wc_lease_keeper *keepers;    /* kept leases, linked by next */
    wc_lease_keeper *renewing;   /* the one whose renewal is in flight, or NULL */
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

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
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

/* The renewer's thread: renew the kept lease due first, sleep until the
 * next one is due, until the last reference goes. A renewal the master
 * answered with a refusal marks its keeper lost and drops it. */
static void *renewer_main(void *arg)
{
    wc_renewer *r = arg;
    pthread_mutex_lock(&r->lock);
    while (!r->stop) {
        wc_lease_keeper *k = NULL;
        for (wc_lease_keeper *i = r->keepers; i != NULL; i = i->next)
            if (k == NULL || i->due_ms < k->due_ms) k = i;
        uint64_t now = mono_ms();
        if (k == NULL || k->due_ms > now) {
            if (k == NULL) {
                pthread_cond_wait(&r->wake, &r->lock);
            } else {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                uint64_t ns = (uint64_t)ts.tv_nsec + (k->due_ms - now) * 1000000ull;
                ts.tv_sec += (time_t)(ns / 1000000000ull);
                ts.tv_nsec = (long)(ns % 1000000000ull);
                (void)pthread_cond_timedwait(&r->wake, &r->lock, &ts);
            }
            continue;
        }
        r->renewing = k;
        pthread_mutex_unlock(&r->lock);
        char cause[sizeof k->lost_msg];
        pthread_mutex_lock(&r->call_lock);
        int rc = wc_lease_call(&r->shadow, &r->conn, M(LEASE_RENEW), &k->id, k->lease_id,
                               k->lease_gen, k->ttl_ms, NULL);
        snprintf(cause, sizeof cause, "lease renewal: %s", r->shadow.err);
        pthread_mutex_unlock(&r->call_lock);
        pthread_mutex_lock(&r->lock);
        r->renewing = NULL;
        if (rc < 0 && rc != WEIGHT_EIO && rc != WEIGHT_EAGAIN) {
            memcpy(k->lost_msg, cause, sizeof cause);
            atomic_store(&k->lost, rc == WEIGHT_ENOT_FOUND ? WEIGHT_ELEASE_EXPIRED : rc);
            unlink_keeper(r, k);
        } else {
            k->due_ms = mono_ms() + k->interval_ms;
        }
        pthread_cond_broadcast(&r->done);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* Close r's connection and free it (its thread is joined or never ran). */
static void renewer_free(wc_renewer *r)
{
    rpcc_close(r->conn);
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
        pthread_condattr_destroy(&attr);
        pthread_cond_init(&r->done, NULL);
        r->refs = 1; /* the store's */
        if (pthread_create(&r->thread, NULL, renewer_main, r) != 0) {
            renewer_free(r);
            return wc_fail(s, WEIGHT_ENOMEM, "cannot start the lease renewal thread");
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
    }
    pthread_mutex_unlock(&r->lock);
    if (left > 0) return;
    pthread_join(r->thread, NULL);
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
    k->due_ms = mono_ms() + k->interval_ms;
    k->next = r->keepers;
    r->keepers = k;
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->lock);
    return WEIGHT_OK;
}

void wc_lease_keeper_stop(wc_lease_keeper *k, int release)
{
    wc_renewer *r = k->r;
    if (r == NULL) return;
    pthread_mutex_lock(&r->lock);
    while (r->renewing == k) pthread_cond_wait(&r->done, &r->lock);
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
