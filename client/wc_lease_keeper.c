/* wc_lease_keeper.c -- the revision lease of a load and the thread that
 * renews it.
 *
 * weight_get and weight_get_mapped acquire a generation-fenced lease on the
 * revision they read (the reply carries the metadata: manifest key and
 * SHA-256), then start a helper thread that renews it at a third of its TTL
 * on a connection of its own while the load runs or the views are held. A
 * renewal the master refuses (the lease is gone) marks the keeper lost,
 * which stops a transfer and is what weight_mapped_status reports;
 * transport hiccups are retried at the next interval. The release is the
 * caller's (wc_lease_call with LEASE_RELEASE). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "wc_get.h"

#define M(name) WMRPC__WEIGHT_METHOD__WEIGHT_##name

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

/* The renew thread: renew every interval until told to stop; a failed
 * renewal that the master answered (the lease is gone) marks the keeper
 * lost, which stops the transfer. Transport hiccups are retried. */
void *wc_lease_renew_main(void *arg)
{
    wc_lease_keeper *k = arg;
    /* The thread's own error buffer: wc_call writes into a store's err. */
    weight_store shadow;
    memset(&shadow, 0, sizeof shadow);
    snprintf(shadow.master, sizeof shadow.master, "%s", k->s->master);
    snprintf(shadow.tenant, sizeof shadow.tenant, "%s", k->s->tenant);
    pthread_mutex_lock(&k->lock);
    while (!k->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (k->interval_ms % 1000) * 1000000ull;
        ts.tv_sec += (time_t)(k->interval_ms / 1000 + ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        int w = pthread_cond_timedwait(&k->cond, &k->lock, &ts);
        if (k->stop) break;
        if (w != ETIMEDOUT) continue;
        pthread_mutex_unlock(&k->lock);
        int rc = wc_lease_call(&shadow, &k->s->renew_rpc, M(LEASE_RENEW), &k->id, k->lease_id,
                            k->lease_gen, k->s->lease_ttl_ms, NULL);
        pthread_mutex_lock(&k->lock);
        if (rc < 0 && rc != WEIGHT_EIO && rc != WEIGHT_EAGAIN) {
            snprintf(k->lost_msg, sizeof k->lost_msg, "lease renewal: %s", shadow.err);
            atomic_store(&k->lost, rc == WEIGHT_ENOT_FOUND ? WEIGHT_ELEASE_EXPIRED : rc);
            break;
        }
    }
    pthread_mutex_unlock(&k->lock);
    return NULL;
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

void wc_lease_keeper_stop(wc_lease_keeper *k)
{
    if (!k->running) return;
    pthread_mutex_lock(&k->lock);
    k->stop = 1;
    pthread_cond_signal(&k->cond);
    pthread_mutex_unlock(&k->lock);
    pthread_join(k->thread, NULL);
    k->running = 0;
}
