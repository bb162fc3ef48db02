/* wc_get.h -- what the parts of libweightclient's load share behind
 * weightclient.h.
 *
 * A load is cut in four: weight_get.c (weight_get itself: lease, manifest,
 * placement and bindings, plan, transfer, release), wc_lease_keeper.c (the
 * revision leases and the store's thread that renews them), wc_transfer.c (the plan's
 * bytes read, verified and scattered by a pool of threads) and
 * weight_get_mapped.c (views in place, no transfer). This header is the seam
 * between them. Not installed, not exported. */
#ifndef WC_GET_H
#define WC_GET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "wc_manifest.h"
#include "wc_plan.h"
#include "wc_store.h"

/* -- the revision lease and its renewal (wc_lease_keeper.c) ------------------ */

/* A revision lease kept alive by its store's renewer: set id, lease_id,
 * lease_gen, ttl_ms and interval_ms (and, for a view, asked_ms and
 * on_lost), then wc_lease_keeper_start. lost and lost_msg are the
 * renewer's to write (lost last), anyone's to read. */
typedef struct wc_lease_keeper {
    wc_renewer *r;            /* the renewer keeping it; NULL when not kept */
    struct wc_lease_keeper *next;
    weight_identity id;
    uint64_t lease_id;
    uint64_t lease_gen;       /* the generation it was granted at: the renewal's fence */
    uint64_t ttl_ms;          /* asked at each renewal */
    uint64_t interval_ms;
    uint64_t due_ms;          /* the next renewal (CLOCK_MONOTONIC) */
    atomic_int lost;          /* 0, or the code a renewal failed with */
    char lost_msg[1200];
    /* Fail closed (a view): called once, on the renewer's threads, as soon
     * as the lease is known lost -- a refused renewal, or no renewal by
     * deadline_ms (the master may end the lease at the TTL and reuse what
     * it protected) -- after lost is set and before anything else of k is
     * done; k stays valid for the call (wc_lease_keeper_stop waits for it).
     * NULL: nothing to fence (a copy, which stops at lost). It must not
     * call back into the renewer. Needs a non-zero ttl_ms. */
    void (*on_lost)(struct wc_lease_keeper *k);
    uint64_t asked_ms;        /* when the acquire was sent (wc_mono_ms); 0: at start */
    uint64_t deadline_ms;     /* the renewer's: the last renewal's send + TTL - margin */
} wc_lease_keeper;

/* Report to the master, on k's renewer's connection (one call at a time
 * with the renewals), that bytes of key read from the memory replica at
 * segment+offset on node did not match the manifest (kvc_report_corrupt's
 * request): a view reports what it verifies after its store may be closed.
 * Best effort: WEIGHT_OK once the master took it, else the code (k not
 * kept: WEIGHT_EIO). */
int wc_lease_keeper_report_corrupt(wc_lease_keeper *k, const char *key, const char *node,
                                   const char *segment, uint64_t offset);

/* The TTL a view asks for when its store sets none (WEIGHT_OPT_LEASE_TTL_MS
 * 0): the weight plugin's default (WM_LEASE_TTL_DEFAULT_MS), asked
 * explicitly so that the view's fence deadline knows it. */
#define WC_VIEW_LEASE_TTL_MS 30000

/* CLOCK_MONOTONIC in milliseconds: the clock of due_ms, asked_ms and
 * deadline_ms. */
uint64_t wc_mono_ms(void);

/* How long before the TTL runs out (counted from the last renewal's send)
 * a kept lease with on_lost is given up and fenced: a fifth of the TTL, at
 * least 20 ms (the TTL's own length when it is shorter). Two renewals in a
 * row must fail for it to come (they are due every third of the TTL). */
uint64_t wc_lease_fence_margin(uint64_t ttl_ms);

/* One call of the weight service's lease methods (LEASE_ACQUIRE, _RENEW,
 * _RELEASE) for id on *conn; resp NULL ignores the reply. An acquire is
 * patient (wc_call_patient: BUSY is waited out), the others are one
 * wc_call. Returns as wc_call does, the cause in s->err. */
int wc_lease_call(weight_store *s, rpcc_conn **conn, uint32_t method, const weight_identity *id,
                  uint64_t lease_id, uint64_t lease_gen, uint64_t ttl_ms,
                  Wmrpc__LeaseResponse **resp);

/* Have s's renewer (made with its connection and thread on s's first
 * lease) renew k's lease every k->interval_ms from now until
 * wc_lease_keeper_stop; k holds a reference on the renewer meanwhile, so k
 * may outlive s. A renewal the master refuses sets k->lost and ends the
 * renewals; a transport failure is retried at the next interval. WEIGHT_OK,
 * or WEIGHT_EIO (the renewer's connection) / WEIGHT_ENOMEM with the cause in
 * s->err and k not kept. */
int wc_lease_keeper_start(weight_store *s, wc_lease_keeper *k);

/* Stop renewing k (waiting for a renewal or a fence of it in flight); with release,
 * give the lease back on the renewer's connection (a failure leaves it to
 * expire). Drops k's reference on the renewer. A k not kept is left. */
void wc_lease_keeper_stop(wc_lease_keeper *k, int release);

/* How often to renew a lease that expires at expires_ms (wall clock): a
 * third of what is left of its TTL, at least every 50 ms. */
uint64_t wc_lease_renew_interval(const weight_store *s, uint64_t expires_ms);

/* -- shared by weight_get and weight_get_mapped (weight_get.c) ---------------- */

/* Chunks of an object read through a mapping that one job takes at most
 * (split_mapped_jobs, weight_mapped_verify): threads take jobs one at a
 * time, so the last job bounds how long one thread works on while the
 * others are done. */
#define WC_MAPPED_JOB_CHUNKS 16

/* kvc_get, once more on a new connection when the first one was lost (a
 * master restart): a replica lookup may be repeated. */
int wc_kv_get(weight_store *s, const char *key, kvc_object *obj);
/* Tell the master that bytes of key read from the memory replica at
 * segment+offset on node (node "": not known) did not match the object's
 * digest (kvc_report_corrupt), best effort: s->err is left as it was.
 * WEIGHT_OK when the master took the report, else the refusal's code. */
int wc_report_corrupt(weight_store *s, const char *key, const char *node, const char *segment,
                      uint64_t offset);

/* Read and verify the manifest named by md into *m: its SHA-256 against
 * the one sealed at commit, and that it describes id (tenant the resolved
 * tenant). WEIGHT_OK, or the error with its cause in s->err and *m empty. */
int wc_load_manifest(weight_store *s, const weight_metadata *md, const char *tenant,
                     const weight_identity *id, wc_manifest *m);

/* The public description of tensor i of m (strings borrowed from m). */
void wc_tensor_info(const wc_manifest *m, size_t i, weight_tensor_info *ti);

/* -- the transfer (wc_transfer.c) --------------------------------------------- */

/* Read, verify and scatter every op of plan (over manifest m) into the
 * buffers bufs (one per tensor) with s->threads threads, while the
 * store's renewer keeps k's lease (a lost lease or weight_store_cancel stops it).
 * Returns WEIGHT_OK, or the first failure with its cause in s->err. Once
 * the jobs are built, stats (may be NULL) get what was moved, with
 * n_placed as its tensors, whatever the outcome. */
int wc_transfer(weight_store *s,
                const wc_manifest *m,
                const wc_plan *plan,
                uint8_t *const *bufs,
                wc_lease_keeper *k,
                uint64_t n_placed,
                weight_get_stats *stats);

#endif /* WC_GET_H */
