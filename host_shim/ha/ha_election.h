/* ha_election.h -- who leads an HA cluster of masters, decided through etcd.
 *
 * Each master grants itself an etcd lease (ha.lease_ttl_s) and keeps it alive.
 * Leadership is the key <prefix>leader, created only while absent and bound
 * to the winner's lease: when the leader dies or stops renewing, etcd deletes
 * the key at the lease's expiry and the next candidate's create succeeds. The
 * key's lease and create revision form the fence the etcd OpLog checks in
 * every write, so a deposed leader cannot append even if it has not noticed.
 *
 * A leader steps down by itself before its lease can expire: the election
 * tracks, on the loop thread, the time up to which the lease is certainly
 * still valid (the send time of the last successful renewal plus the TTL,
 * less a margin), and reports the loss once that passes without a renewal,
 * whether etcd is slow, partitioned or SIGSTOPped.
 *
 * Every master also registers <prefix>masters/<id> under its lease (role,
 * endpoint, applied sequence, readiness), refreshed while it runs, and the
 * election reads the whole registry back, so any master can say who is in
 * the cluster (weightctl status).
 *
 * The etcd calls run on the election's own thread; everything reported to
 * the caller runs on the loop thread given at start. */
#ifndef HOST_HA_ELECTION_H
#define HOST_HA_ELECTION_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "etcd_client.h"

typedef struct ha_election ha_election;

/* What the fence of a term is: the leader key as created by this master. */
typedef struct ha_term {
    const char *leader_key;    /* "<prefix>leader" */
    size_t leader_key_len;
    int64_t lease_id;
    int64_t create_revision;
} ha_term;

#define HA_MAX_TYPES 64

/* Features a registry entry may advertise (MasterInfo.features), as bits of
 * ha_member.features; this build advertises them all. */
#define HA_FEATURE_PUT_HANDOFF 1u /* "put_handoff": it replays PUT_HANDOFF */
#define HA_FEATURE_WRITE_ZONES 2u /* "write_zones": it replays WRITE_ZONES */

/* One master of the registry, as it last wrote itself. */
typedef struct ha_member {
    char id[65];
    char role[16];             /* "leader", "standby", "candidate" */
    char endpoint[256];
    uint64_t applied_seq;
    int ready;
    char reason[160];
    uint16_t types[HA_MAX_TYPES];   /* the record types it can replay */
    size_t n_types;
    unsigned features;              /* HA_FEATURE_* it advertises */
} ha_member;

typedef struct ha_election_events {
    /* This master won: the term's fence (borrowed for the call). */
    void (*on_elected)(void *arg, const ha_term *term);
    /* This master led and no longer may (why names the cause). */
    void (*on_deposed)(void *arg, const char *why);
    /* The leader as seen from here changed: its id and endpoint, "" when no
     * leader is known. */
    void (*on_leader)(void *arg, const char *id, const char *endpoint);
    void *arg;
} ha_election_events;

typedef struct ha_election_options {
    etcd_client_options etcd;  /* etcd's members and TLS (the election sets the timeout) */
    const char *prefix;        /* the cluster's keys, "/weight_mgmt/" */
    const char *id;            /* this master's name */
    const char *endpoint;      /* where clients reach this master */
    uint32_t ttl_s;            /* lease TTL, >= 1 */
    int fast_failover;         /* watch the leader's process (ha_exit_watch.h) */
    ha_election_events events;
} ha_election_options;

/* Start the election thread: grant the lease, register, and campaign once
 * ha_election_set_eligible(e, 1) was called (a master that has not caught
 * up, or cannot replay, must not lead). Returns 0, SMP_EINVAL, SMP_ENOMEM, or
 * SMP_EIO when etcd cannot be reached to grant the lease (err says why). */
int ha_election_start(uv_loop_t *loop,
                      const ha_election_options *o,
                      ha_election **out,       /* OUT */
                      char *err,
                      size_t errlen);

/* The election's etcd client takes a renewed CA / client certificate
 * (etcd_client_reload_tls: PEM text, cert and key both or neither) for
 * its calls from now on. Any thread. etcd_client_reload_tls's codes. */
int ha_election_reload_tls(ha_election *e, const char *ca_pem, const char *cert_pem,
                           const char *key_pem, char *err, size_t errlen);

/* Allow (1) or forbid (0) campaigning. Forbidding does not resign a term
 * already won. Loop thread. */
void ha_election_set_eligible(ha_election *e, int eligible);

/* What this master writes into its registry entry (copied). Loop thread. */
void ha_election_set_status(ha_election *e,
                            const char *role,
                            uint64_t applied_seq,
                            int ready,
                            const char *reason);

/* What this master advertises it can replay: the record types (host and
 * plugins') and a line per loaded plugin ("name version (ABI x.y)"); copied,
 * at most HA_MAX_TYPES types and 16 plugins. Loop thread. */
void ha_election_set_replay(ha_election *e,
                            const uint16_t *types,
                            size_t n_types,
                            const char *const *plugins,
                            size_t n_plugins);

/* 1 while this master holds the leader key and its lease is certainly
 * valid. Loop thread. */
int ha_election_is_leader(const ha_election *e);

/* The leader's endpoint as last seen ("" when none). Loop thread; the
 * pointer stays valid until the next loop turn. */
const char *ha_election_leader_endpoint(const ha_election *e);

/* 1 when the watcher noticed the leader's exit (ha_exit_watch.h) and this
 * loop has not yet taken the change: the leader the loop last saw (and
 * told on_leader) is dead, so no client should be sent to it. Loop thread;
 * one atomic read. */
int ha_election_leader_gone(const ha_election *e);

/* How long etcd has not answered this master's election (its lease
 * renewals, grants and registry reads; an error of etcd's own is an answer),
 * in ms, once that is at least half the lease TTL (at least 1 s: a few
 * renewals missed), else 0; why[cap] gets the last failure's cause. The
 * registry (ha_election_members) is then as last read that long ago, and a
 * leader's lease is in doubt. Loop thread. */
uint64_t ha_election_etcd_silent_ms(ha_election *e, char *why, size_t cap);

/* Copy up to cap registry entries into out (sorted by id); returns how many
 * there are. Loop thread. */
size_t ha_election_members(ha_election *e, ha_member *out, size_t cap);

/* How many times the registry was read: what ha_election_members gives
 * may differ only once it moved (a cheap question for every call). */
uint64_t ha_election_members_read(ha_election *e);

/* rows[0, n) (sorted by id, room for cap) with self in its place unless a
 * row already has its id; when the rows are full the last one gives way.
 * Returns the new count (n when cap is 0). */
size_t ha_rows_with(ha_member *rows, size_t n, size_t cap, const ha_member *self);

/* This master's own entry, as its next registry write will carry it, into
 * *out: the row a status shows for itself before its first registry read
 * (or after one it could not make). Loop thread. */
void ha_election_self(ha_election *e, ha_member *out);

/* Resign (delete the leader key if held, revoke the lease), stop the thread
 * and close the loop handles; the memory goes with the close callbacks, so
 * the loop must run once more. NULL is a no-op. */
void ha_election_stop(ha_election *e);

#endif /* HOST_HA_ELECTION_H */
