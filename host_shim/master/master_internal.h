/* master_internal.h -- the state one Store Master process shares among its
 * master_*.c files.
 *
 * Everything here belongs to the loop thread. The files split the master by
 * concern: master.c (startup, loop, timers, shutdown), master_recovery.c
 * (snapshot load and OpLog replay), master_snapshot.c (taking snapshots),
 * master_commit.c (the prepare -> durable append -> apply path every mutation
 * takes), master_objects.c (the host's object RPC service), master_admin.c
 * (admin RPC, /metrics, /health, /role) and master_backend.c (the services
 * plugins call through the host API table). */
#ifndef HOST_MASTER_INTERNAL_H
#define HOST_MASTER_INTERNAL_H

#include <stdint.h>
#include <protobuf-c/protobuf-c.h>
#include <uv.h>

#include "admin_http.h"
#include "config.h"
#include "log_limit.h"
#include "metrics.h"
#include "obj_store.h"
#include "oplog.h"
#include "plugin_host.h"
#include "rpc.h"
#include "snapshot.h"

/* Snapshot section names of the host. */
#define MASTER_SECTION_OBJECTS "host_objects"
#define MASTER_SECTION_CARRIED "host_carried_records"
#define MASTER_SECTION_GATES "host_gates"
/* The host record type of a runtime gate confirmation (master_gates.c); the
 * other host types are obj_store's. */
#define MASTER_REC_GATE_CONFIRM 4
#define MASTER_SECTION_ENCVER 1

#define MASTER_TIMER_MS 50              /* housekeeping period */
#define MASTER_LOOP_LAG_WINDOW_MS 10000 /* host_loop_lag_seconds: the largest lag of this window and the last */
#define MASTER_SNAPSHOT_RETRY_MS 5000  /* an automatic snapshot after a failed one */
#define MASTER_RESWEEP_MS 5000          /* second sweep of a segment after a registration */
#define MASTER_READ_LEASE_MS 10000      /* read lease of a replica lookup */
#define MASTER_RELEASE_MAX_KEYS 4096    /* keys per release_read_leases request */
#define MASTER_LIST_DEFAULT 1000        /* keys per page when the client says 0 */
#define MASTER_LIST_MAX 10000

/* A record of a type no loaded plugin replays (its plugin is absent or
 * disabled), kept verbatim at recovery. */
typedef struct master_carried_record {
    uint64_t seq;
    uint16_t type;
    uint16_t encver;
    uint8_t *payload;
    uint32_t len;
} master_carried_record;

/* A snapshot section no loaded plugin claims, kept verbatim. */
typedef struct master_carried_section {
    char *name;
    uint16_t encver;
    uint8_t *data;
    size_t len;
} master_carried_section;

typedef struct master_pending_key master_pending_key; /* keys with a mutation in flight */
typedef struct master_node master_node;               /* a registered node (master_nodes.c) */
typedef struct master_inventory master_inventory;     /* inventory pages (master_inventory.c) */
typedef struct master_busy_key master_busy_key;       /* keys being persisted (master_replicas.c) */
typedef struct master_fresh_cold master_fresh_cold;   /* cold files just written (master_replicas.c) */
/* How a check of a cold file before a release of memory ended
 * (store_release_cold_checks_total{result}). */
typedef enum master_release_check_result {
    MASTER_RELEASE_CHECK_INTACT,
    MASTER_RELEASE_CHECK_CORRUPT,
    MASTER_RELEASE_CHECK_FAILED,
    MASTER_RELEASE_CHECK_RESULTS
} master_release_check_result;
typedef struct master_scrub master_scrub;             /* ranges being zeroed (master_scrub.c) */
typedef struct master_reports master_reports;         /* reported corrupt replicas (master_corrupt_reports.c) */
/* What became of reports of corrupt memory replicas
 * (store_corrupt_reports_total{result}): received (well-formed reports of a
 * memory replica the master has; each key is checked at most once a while),
 * and per replica hashed: confirmed (its bytes did not hash to the object's
 * SHA-256: dropped), refuted (they did, or it was gone or replaced by the
 * time they were judged: left alone), failed (not hashed: its node down or
 * the hash failed). */
typedef enum master_report_result {
    MASTER_REPORT_RECEIVED,
    MASTER_REPORT_CONFIRMED,
    MASTER_REPORT_REFUTED,
    MASTER_REPORT_FAILED,
    MASTER_REPORT_RESULTS
} master_report_result;
typedef struct master_node_wait master_node_wait;     /* calls waiting for a node (master_node_wait.c) */

#define MASTER_SERVICE_NODES 3

/* Where an HA master stands (master_ha.c). */
typedef enum master_ha_role {
    MASTER_HA_CANDIDATE = 0,    /* starting, or stepping down */
    MASTER_HA_STANDBY = 1,      /* following the log, campaigning when ready */
    MASTER_HA_PROMOTING = 2,    /* elected, catching up to the durable head */
    MASTER_HA_LEADER = 3        /* writing the log, serving */
} master_ha_role;

struct etcd_client;
struct ha_election;
struct ha_member;

/* A set of node ids (master_nodes.c), small: searched in order. */
typedef struct master_node_ids {
    char **ids;
    size_t n;
} master_node_ids;

typedef struct master {
    const host_config *cfg;
    uv_loop_t loop;
    host_metrics *metrics;
    host_plugins *plugins;
    host_backend backend;
    /* The object store, reached only through master_objs(m): while a
     * snapshot's objects section loads on a thread of its own
     * (master_recovery.c), loading is set and the accessor waits for that
     * thread first. Nothing but master_recovery.c (the load) and master.c
     * (create, destroy) names these fields. */
    struct {
        obj_store *store;
        struct master_objs_load *loading; /* NULL: no load running */
    } objs_;
    oplog *log;
    rpc_server *rpc;
    struct rlease_table *read_leases; /* holders of the read leases (master_objects.c) */
    struct rpc_auth *auth;      /* credentials (rpc_auth.h), served on m->rpc */
    host_config_files files;    /* the TLS context and the embedded node's token
                                   (config.h, host_config_load_files), read first */
    admin_http *admin;
    uv_signal_t sig_int;
    uv_signal_t sig_term;
    uv_signal_t sig_hup;
    uv_timer_t timer;
    uv_timer_t tick_soon;       /* a plugin's tick_soon: the due ticks at once */
    uv_prepare_t io_prepare;    /* the loop's I/O clock (on_io_prepare, on_io_check) */
    uv_check_t io_check;
    uv_idle_t plugin_idle;      /* polls a plugin reload or disable in progress */
    uint16_t *plugin_svcs;      /* plugin service ids routed in the RPC server */
    size_t n_plugin_svcs;
    int hup_running;            /* SIGHUP: reloading every plugin, one at a time */
    size_t hup_next;            /* the next plugin index to reload */

    char oplog_dir[4096];
    char snap_dir[4096];
    int data_lock_fd;           /* <data_dir>/LOCK, flock'ed while we run; -1 */

    /* Durability. */
    uint64_t applied_seq;       /* every record up to it is durable and applied */
    int log_failed;             /* the OpLog turned read-only: refuse mutations */
    /* master_recover is running: the log is not replayed yet, and nothing
     * may be appended before it is (a plugin's call inside its section
     * load() or a replay callback): master_commit and master_append_plugin
     * answer SMP_ESTATE. */
    int recovering;
    master_pending_key *pending;
    master_busy_key *persisting; /* keys with a cold file being written and recorded */
    master_fresh_cold *fresh_cold; /* cold files written and read back in the last minute */
    uint64_t release_checks[MASTER_RELEASE_CHECK_RESULTS]; /* by master_release_check_result */
    master_scrub *scrub;         /* freed ranges being zeroed, put starts waiting on them */
    master_reports *reports;     /* reported corrupt memory replicas being checked (NULL: none yet) */
    master_node_wait *node_wait; /* calls waiting for a node to register */

    /* Snapshots. */
    int snapshot_running;
    uint64_t snapshot_seq;      /* last included sequence of the newest snapshot */
    uint64_t snapshot_wall_ms;  /* when it was written (0: never) */
    struct master_snapshot_waiter *snapshot_waiters;
    /* The newest snapshot that became durable this run (metrics): how long
     * its capture held the loop, how long it took to encode and to write
     * and sync (from the end of the capture until durable), its size. */
    double snapshot_capture_s;
    uint64_t snapshot_failed_ms; /* master_now_ms of the last failure (0: none) */
    char snapshot_why[512];      /* why the last snapshot failed, "" */
    /* The log lines of failed snapshots (an automatic one is retried every
     * MASTER_SNAPSHOT_RETRY_MS): a few a window, the rest summed up;
     * reset by a snapshot written (master_snapshot.c). */
    log_limit snapshot_fail_log;
    double snapshot_encode_s;
    double snapshot_write_s;
    uint64_t snapshot_bytes;

    /* What recovery could not hand to anyone, carried into every snapshot. */
    master_carried_record *carried_recs;
    size_t n_carried_recs;
    master_carried_section *carried_secs;
    size_t n_carried_secs;

    /* Nodes (soft state: up only once registered since this start). */
    master_node *nodes;
    master_inventory *inventories; /* pages awaiting their registration, by node id */
    uint64_t next_task_id;
    struct node_runtime *embedded_node;

    /* Housekeeping. */
    int evicting;               /* an eviction plan is being applied */
    int pressure;               /* above the high watermark at the last look */
    int pressure_told;          /* "nothing may be evicted" logged since use was last
                                   under the high watermark */
    uint64_t last_cleanup_ms;
    struct fsck_run *fsck_background; /* the background fsck running, NULL */
    struct master_fsck_schedule *fsck_schedule; /* when it runs (master_fsck_schedule.c) */
    /* Loop lag: how late the housekeeping timer fires. libuv reschedules a
     * repeating timer at loop time + period before running it, so the next
     * round is due at uv_now() + MASTER_TIMER_MS as read in this round; the
     * lag is the monotonic time the next round starts minus that. */
    uint64_t timer_due_ms;      /* when the next round is due (uv_now clock); 0: not yet known */
    double loop_lag_s;          /* largest lag in the current window */
    double loop_lag_prev_s;     /* largest lag in the window before */
    uint64_t loop_lag_window_ms;/* start of the current window (uv_now clock) */
    /* The loop's I/O clock: io_looking_ms is when the loop last went to
     * read its sockets (master_now_ms), io_heard_ms the same once what it
     * read has been handled. Whatever a node sent before io_heard_ms has
     * been heard; master_nodes.c judges silence up to it, not up to now, so
     * a loop that was busy (a snapshot captured on it, a long tick) does not
     * count its own stall as the nodes' silence. */
    uint64_t io_looking_ms;
    uint64_t io_heard_ms;
    int serving;                /* RPC accepting */
    uint64_t serving_since_ms;  /* when serving began (master_now_ms) */
    int nodes_settled;          /* see master_nodes_settled */
    int placing_put;            /* a put start places: registered nodes only */
    /* Until the nodes settle (master_nodes_settled): the nodes given up
     * (marked down before they registered), and those whose registration
     * was refused -- what they send no longer lengthens the wait. */
    master_node_ids nodes_given_up;
    master_node_ids nodes_refused;
    int stopping;
    int exit_status;
    /* A leader told to stop lets its open calls end first (master_drain.c). */
    int draining;
    uint64_t drain_until_ms;    /* master_now_ms when it stops anyway */
    uv_timer_t drain_timer;
    int drain_timer_open;
    int drain_handoff;          /* MASTER_HANDOFF_*: the open puts' PUT_HANDOFF */
    int drain_awaited;          /* of its records (and WRITE_ZONES), not durable yet */
    int put_open_unrecorded;    /* large put starts go unrecorded (said once) */
    int zones_off;              /* small puts placed outside write zones (said once) */
    int zones_gate_asked;       /* the write zones' gate was asked, */
    uint64_t zones_gate_read;   /* at this registry read (ha_election_members_read) */

    /* HA (ha.enabled): see master_ha.c. */
    /* The notAfter (Unix seconds) of the certificates this master
     * presents, 0 when none: tls.cert's, ha.etcd_tls_cert's
     * (master_tls_note_expiry, at the start and after each reload). */
    int64_t tls_not_after, etcd_cert_not_after;

    struct etcd_client *etcd;   /* the OpLog's client */
    struct ha_election *election;
    master_ha_role ha_role;
    int ha_ready;               /* 0: cannot replay (ha_reason says why) */
    int ha_apply_failed;        /* the stop came from applying a record */
    uint64_t ha_replay_stopped; /* times following stopped on a record (metric) */
    char ha_reason[512];
    uint64_t ha_applied_saved;    /* the seq data_dir/ha.applied holds (master_ha.c) */
    int ha_log_behind;            /* etcd's log head is behind applied_seq (master_ha.c) */
    uint64_t ha_applied_saved_ms; /* when it was written */
    char ha_leader[256];        /* the leader's endpoint as last seen, "" */
    int restart_requested;      /* exit with MASTER_EXIT_RESTART */
    int restarted;              /* this start re-executed such an exit */

    /* Capability gates confirmed durably at runtime (master_gates.c). */
    char **gates;
    size_t n_gates;

    /* Host metric families. */
    struct {
        host_metric *objects;        /* {data_type} */
        host_metric *object_bytes;   /* {data_type} */
        host_metric *replicas;       /* {kind} */
        host_metric *replica_bytes;  /* {kind} */
        host_metric *memory_used;
        host_metric *memory_capacity;
        host_metric *puts_in_flight;
        host_metric *puts_taken_over; /* {result} */
        host_metric *zone_bytes_held;
        host_metric *oplog_appends;
        host_metric *oplog_fsyncs;
        host_metric *oplog_batches;
        host_metric *oplog_max_batch;
        host_metric *oplog_bytes;
        host_metric *oplog_durable_seconds_sum;
        host_metric *oplog_durable_count;
        host_metric *oplog_failed;
        host_metric *snapshot_age;
        host_metric *snapshot_seq;
        host_metric *snapshot_capture;     /* seconds the loop was held */
        host_metric *snapshot_encode;
        host_metric *snapshot_write;
        host_metric *snapshot_bytes;
        host_metric *host_refusals;  /* {reason} */
        host_metric *rpc_requests;
        host_metric *rpc_errors;
        host_metric *rpc_connections;
        host_metric *rpc_auth_refusals;    /* {reason} (rpc_auth.h) */
        host_metric *rpc_auth_hellos;      /* {result} */
        host_metric *rpc_auth_certs;       /* {result}: client certificates mapped or not */
        host_metric *rpc_refused;          /* {reason, tenant} (rpc_limits.h) */
        host_metric *admin_refusals;       /* {reason} (admin_http.h) */
        host_metric *cert_expiry;          /* {certificate}: tls, etcd (master_tls_reload.c) */
        host_metric *evictions;
        host_metric *fsck_runs;
        host_metric *fsck_corrupt;
        host_metric *fsck_running;
        host_metric *read_leases;          /* unexpired read leases (per holder and key) */
        host_metric *read_leases_ended;    /* {how}: released, connection_closed */
        host_metric *read_lease_refusals;  /* releases of leases the caller did not hold */
        host_metric *cold_reclaimed;       /* cold files deleted (master_reclaim.c) */
        host_metric *release_checks;       /* {result}: cold files hashed before a release */
        host_metric *corrupt_reports;      /* {result}: reports of corrupt memory replicas */
        host_metric *scrub_tasks;          /* SCRUB tasks sent (master_scrub.c) */
        host_metric *scrub_ranges;         /* ranges those tasks carried */
        host_metric *node_wait_calls;      /* calls that waited for a node (master_node_wait.c) */
        host_metric *node_wait_now;        /* of them, waiting now */
        host_metric *node_cold_capacity;   /* {node}: its cold file system's size (master_cold_usage.c) */
        host_metric *node_cold_free;       /* {node}: what it may still write there */
        host_metric *node_cold_write_failures; /* {node, cause}: failed cold writes */
        host_metric *ha_is_leader;         /* 1 on the leader */
        host_metric *ha_ready;             /* 0: cannot replay */
        host_metric *ha_replay_stopped;    /* following stopped on a record */
        host_metric *ha_applied_seq;
        host_metric *ha_lag;               /* records behind the durable head */
        host_metric *rpc_not_leader;       /* requests sent to the leader */
        host_metric *rpc_not_leader_held;  /* of them, held until the leader was known */
        host_metric *loop_lag;             /* seconds, see master_loop_lag_s */
        host_plugin_timing plugin_timing;  /* host_plugin_{tick,guard}_{seconds,overrun_total} */
    } m;
} master;

/* -- master_commit.c ---------------------------------------------------------- */

/* Place small puts and replica loads in write zones when every registered
 * master can replay their records (HA), or alone: asked by each put start
 * and the leader's timer, answered anew once the registry was read again. */
void master_zones_gate(master *m);

/* The master begins to lead: hold the write zones of the one before back
 * (obj_zones_take_over), saying how many bytes in the log. */
void master_take_over_zones(master *m);

/* Called once a committed record is durable and applied (status 0), or
 * failed (the state is unchanged). seq is the record's sequence. */
typedef void (*master_commit_cb)(master *m, void *arg, int status, uint64_t seq);

/* Append a host record and apply it once durable, then call done. Takes the
 * record's buffer (freed whatever happens). When key is not NULL the key is
 * marked as having a mutation in flight until then; SMP_EBUSY if it already
 * has one. On an error return done is never called. */
int master_commit(master *m,
                  obj_record *rec,
                  const char *key,
                  master_commit_cb done,
                  void *arg);

/* 1 when key has a mutation in flight. */
int master_key_pending(const master *m, const char *key);

/* Append a plugin's record; the plugin's callback runs once it is durable,
 * after the host has advanced applied_seq. The host_backend oplog_append. */
int master_append_plugin(void *ctx,
                         uint16_t type,
                         uint16_t encver,
                         const void *payload,
                         size_t len,
                         smp_durable_cb cb,
                         void *arg);

void master_pending_free(master *m);

/* -- master.c ------------------------------------------------------------------- */

/* Stop accepting, close the endpoints and the timers: the loop ends once
 * what is in flight finished. Idempotent. */
void master_stop(master *m);

/* -- master_drain.c ---------------------------------------------------------------- */

/* A signal asked the master to stop: a serving master drains first -- new
 * calls are refused (an HA leader's SMP_ENOTLEADER naming no leader, a
 * master alone's SMP_EAGAIN), the open calls and puts end here for at most
 * MASTER_DRAIN_MS -- then stops (master_stop, which resigns a leadership).
 * A standby, a master not serving yet, or a second signal: master_stop at
 * once. */
void master_stop_gracefully(master *m);
/* 1 when a call of (service, method) that came on connection conn is
 * taken: always, except while draining, when only the end or revoke of a
 * put started here is, and the put start of a connection that has a put
 * open here (the rest of a writer's batch) until the open puts are handed
 * on. */
int master_drain_admits(master *m, uint64_t conn, uint32_t service, uint32_t method);
/* Close the drain's timer, if it runs (master_stop). */
void master_drain_close(master *m);

/* The loop lag as exported: the largest delay of the housekeeping timer
 * over the current and the previous MASTER_LOOP_LAG_WINDOW_MS window (10 to
 * 20 s), in seconds; 0 before the timer's second round. */
double master_loop_lag_s(const master *m);

/* -- master_ha.c ----------------------------------------------------------------- */

/* "active" (no HA), "leader", "standby" or "candidate". */
const char *master_role_name(const master *m);
/* 1 when this master may mutate: always without HA; with it, while it holds
 * a promoted term whose lease is certainly valid. */
int master_is_leader(const master *m);
/* Open the etcd OpLog read-only into m->log. */
int master_ha_open_log(master *m, char *err, size_t errlen);
/* After recovery: SMP_ESTATE (err says why and what to do) when the OpLog
 * ends before the seq this master remembers applying in data_dir/ha.applied
 * -- etcd lost records (wiped, or restored from an older backup): starting
 * would begin a cluster without them and the nodes' data would go as
 * orphans. 0 otherwise. */
int master_ha_check_log(master *m, char *err, size_t errlen);
/* Recovery failed with rc: when etcd's log ends before the newest snapshot
 * (etcd lost records), replace err with what happened and the two ways out
 * (restore etcd, or move the snapshots aside and remove data_dir/ha.applied)
 * and return SMP_ESTATE; rc and err unchanged otherwise. */
int master_ha_explain_short_log(master *m, int rc, char *err, size_t errlen);
/* After recovery, with the RPC server created: turn away what a standby
 * must not serve, start the election and follow the log. */
int master_ha_start(master *m, char *err, size_t errlen);
/* Advertise again what this master replays and which plugin versions it
 * runs (after a plugin reload switched them). No-op without an election. */
void master_ha_advertise(master *m);
/* Housekeeping round: publish role, applied sequence and readiness. */
void master_ha_tick(master *m);
/* Resign and stop the election (master_stop); close the etcd client once
 * the log is closed (master_ha_close). */
void master_ha_stop(master *m);
void master_ha_close(master *m);
/* The registry of masters (up to cap into out; returns how many there are). */
size_t master_ha_members(master *m, struct ha_member *out, size_t cap);
/* 1 when every registered master advertises feature (HA_FEATURE_*), and
 * always without HA; else 0 with why naming the first that does not (or
 * that none registered yet). */
int master_ha_all_have(master *m, unsigned feature, char *why, size_t cap);
/* The rows a status shows (up to cap into out, sorted by id; returns how
 * many it filled): the registry as last read, and this master's own entry
 * when the registry does not hold it yet (no read made, or none answered).
 * Never for a decision: a gate counts only registered masters. */
size_t master_ha_rows(master *m, struct ha_member *out, size_t cap);
/* The durable head of the OpLog as this master last saw it. */
uint64_t master_ha_head(const master *m);
/* 1 when etcd has not answered this HA master's election for a while
 * (ha_election_etcd_silent_ms), with out[cap] saying so: for how long, why,
 * and what it means for this master; 0 and "" otherwise (or without HA). */
int master_ha_etcd_unreachable(master *m, char *out, size_t cap);

/* -- master_gates.c --------------------------------------------------------------- */

/* 1 when the gate was confirmed by a GATE_CONFIRM record (the host_backend
 * gate_confirmed; ctx is the master). */
int master_gate_confirmed(void *ctx, const char *gate);
/* Apply a GATE_CONFIRM record's payload. SMP_EPROTO when it does not decode. */
int master_gates_apply(master *m, const uint8_t *payload, size_t len);
void master_gates_free(master *m);
/* The "host_gates" snapshot section. */
int master_gates_save(const master *m, smp_writer *w);
int master_gates_load(master *m, const uint8_t *data, size_t len, char *err, size_t errlen);
/* ADMIN_GATE_CONFIRM: GateRequest -> GateInfo, once the record is durable. */
int master_gates_h_confirm(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len);
/* Every gate the loaded plugins name, for StatusResponse.gates: fills a view
 * (*out, freed with free()) and returns how many; the pointers to hand out
 * are master_gates_view_ptrs(*out). */
typedef struct master_gates_view master_gates_view;
struct GateInfo;
size_t master_gates_view_fill(master *m, master_gates_view **out);
struct GateInfo **master_gates_view_ptrs(master_gates_view *v);

/* -- master_recovery.c --------------------------------------------------------- */

/* Apply one durable record to the state: a host record to the object store,
 * a plugin record to its plugin. A record no loaded plugin replays is carried
 * verbatim when carry is set (recovery: its plugin is absent or disabled)
 * and refused otherwise (an HA standby following the leader must replay all
 * it writes). Recovery and an HA standby's following both come through here.
 * Advances applied_seq; a refusal is named in err. */
int master_apply_record(master *m, const oplog_record *rec, int carry, char *err, size_t errlen);

/* Load the newest snapshot and replay the OpLog after it. Fails closed: a
 * damaged snapshot, a section a plugin refuses or a record of a too new
 * encoding version stops recovery (records of unknown types are carried); err
 * names the cause. */
int master_recover(master *m, char *err, size_t errlen);
/* Wait for (join) the thread loading a snapshot's objects section and
 * clear m->objs_.loading; called by master_objs only. */
void master_objs_settle(master *m);

/* The object store, once no snapshot load is running into it: the one way
 * master code reaches the objects. While the objects section loads on its
 * own thread (master_recovery.c) the first call waits for that thread, so
 * every path -- a plugin's host API call, an RPC handler, the tick, the
 * admin endpoint, a node's RPC -- sees the whole snapshot and never races
 * the load. Afterwards it costs one predictable branch. Loop thread only;
 * never from the loading thread (it would wait for itself). */
static inline obj_store *master_objs(master *m)
{
    if (__builtin_expect(m->objs_.loading != NULL, 0)) master_objs_settle(m);
    return m->objs_.store;
}

void master_carried_free(master *m);

/* -- master_snapshot.c --------------------------------------------------------- */

/* Take a snapshot of the applied state now, write it off the loop, truncate
 * the log before it once durable. done (may be NULL) runs when it ended.
 * SMP_EBUSY when one is running. */
typedef void (*master_snapshot_cb)(master *m, void *arg, int status, uint64_t seq, const char *path);
int master_snapshot_take(master *m, master_snapshot_cb done, void *arg);

/* Encode/decode the carried records section. */
int master_carried_records_save(const master *m, smp_writer *w);
int master_carried_records_load(master *m, const uint8_t *data, size_t len, char *err, size_t errlen);

/* -- master_objects.c / master_admin.c ----------------------------------------- */

int master_objects_register(master *m);
/* Free the read-lease table (after the RPC server is closed). */
void master_objects_free(master *m);
/* Pack msg and answer the call with it (SMP_ENOMEM reply if it cannot). */
void master_reply_msg(smp_rpc_call *call, const ProtobufCMessage *msg);
int master_admin_register(master *m);
/* admin_http render callback. */
void master_admin_render(void *ctx, const char *path, int *status, char **body,
                         size_t *len, const char **content_type);
int master_metrics_register(master *m);
void master_metrics_refresh(master *m);

/* -- master_key_request.c ------------------------------------------------------- */

/* A KeyRequest decoded by hand, as key_request__unpack would give it: key
 * points into room (or heap, for a key that does not fit), "" when the
 * body has none. */
typedef struct master_key_req {
    const char *key;
    char *heap;
    char room[256];
} master_key_req;
/* Decode body[0..len) into r: 0, -1 for a body protobuf-c refuses,
 * SMP_ENOMEM. master_key_req_free releases it (after any outcome). */
int master_key_req_decode(master_key_req *r, const uint8_t *body, size_t len);
void master_key_req_free(master_key_req *r);

/* -- master_plugins.c ------------------------------------------------------------- */

/* The idle handle (init with the loop; close in master_stop) and the
 * routing table's memory (free at exit). */
void master_plugins_init(master *m);
void master_plugins_close(master *m);
void master_plugins_free(master *m);
/* Set the backend members a reload needs (services_changed, redispatch). */
void master_plugins_backend(master *m);
/* Mirror the registry's plugin services into the RPC server, every method
 * routed through the plugin host. SMP_OK, or the cause in err. */
int master_plugins_route(master *m, char *err, size_t errlen);
/* SIGHUP: reload every plugin from its configured path, one after the other. */
void master_plugins_on_hangup(master *m);
/* SIGHUP: read tls.cert, tls.key and tls.ca again and serve them from the
 * next connection on, and ha.etcd_tls_* for the etcd clients' next
 * connections (master_tls_reload.c); files that fail a check leave what
 * was served, logged either way. */
void master_reload_tls(master *m);
/* Note the notAfter of the certificates m->files holds, for the metric
 * store_tls_certificate_expiry_timestamp_seconds. */
void master_tls_note_expiry(master *m);
/* ADMIN_PLUGIN_LIST / RELOAD / DISABLE / ENABLE. */
int master_plugins_h_list(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len);
int master_plugins_h_reload(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len);
int master_plugins_h_disable(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len);
int master_plugins_h_enable(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len);

/* -- master_inventory.c ----------------------------------------------------------- */

/* At most this many cold files in one node's inventory (pages refused past it). */
#define MASTER_INVENTORY_MAX_FILES (1u << 24)
/* Pages no registration took are dropped this long after the newest one. */
#define MASTER_INVENTORY_IDLE_MS 600000u

struct InventoryFile;
/* NODE_INVENTORY: add a page to its node's pending inventory of its session
 * (a page of a new session drops the older one's). Answers the count of
 * the session's files received; SMP_EPROTO, SMP_EINVAL (no node id, session
 * 0), SMP_ERANGE (past MASTER_INVENTORY_MAX_FILES: the session is dropped),
 * SMP_ENOMEM. */
int master_inventory_h_page(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len);
/* Take the pending inventory of node_id for a registration naming session
 * and files: SMP_OK with *out the caller's (master_inventory_free), or
 * SMP_ESTATE with msg naming what arrived (none, another session, another
 * count: the session is dropped) -- the node sends its pages again. */
int master_inventory_take(master *m, const char *node_id, uint64_t session, uint64_t files,
                          master_inventory **out, char *msg, size_t cap);
/* The files of a taken inventory, in the order sent (owned by it); *n and
 * *pages (each may be NULL) how many and how many pages brought them. */
struct InventoryFile **master_inventory_files(const master_inventory *inv, size_t *n,
                                              size_t *pages);
void master_inventory_free(master_inventory *inv);
/* When the newest page of node_id's pending inventory arrived
 * (master_now_ms), or 0 when none is held. */
uint64_t master_inventory_heard_ms(const master *m, const char *node_id);
/* Drop pending inventories idle for MASTER_INVENTORY_IDLE_MS (the tick). */
void master_inventory_expire(master *m, uint64_t now);
/* Drop every pending inventory (the master stops). */
void master_inventory_clear(master *m);

/* -- master_nodes.c --------------------------------------------------------------- */

struct TaskResult;
/* Completion of a node task: status SMP_OK with the node's result (whose own
 * status may still be an error), or SMP_EIO when the node went away. */
typedef void (*master_task_cb)(master *m, void *arg, int status, const struct TaskResult *res);

int master_nodes_register(master *m);
void master_nodes_tick(master *m, uint64_t now);
void master_nodes_free(master *m);
master_node *master_node_find(const master *m, const char *id);
/* 1 when the node is registered and heartbeating: its replicas are served. */
int master_node_readable(const master *m, const char *id);
/* Whether every node holding a segment has registered since this start, or
 * was given up: node.timeout_ms passed without a word from it -- counted
 * from when serving began, or from its newest inventory page or
 * registration request (a node sending a large inventory is not silent;
 * one whose registration was refused for its ids, tenant or segment size
 * is, whatever it sends after).
 * A node given up is down: the plugins get node-down and replica-lost
 * events for it, as for a node that stopped polling. Until then a replica
 * on a node not yet heard from is unknown, not lost: the plugins'
 * reconcile ticks wait, so that a restart or failover is not mistaken for
 * a loss (a revision marked DEGRADED, a migration judged on replicas
 * nobody has looked at). Latched once true. */
int master_nodes_settled(master *m, uint64_t now);
/* The same question without settling anything (no events, no latch): 1
 * while the ticks would still wait. For /health. */
int master_nodes_waiting(master *m, uint64_t now);
/* 1 while node, which has not registered since serving began, is still
 * waited for (as master_nodes_waiting counts it); 0 for a node that is up,
 * given up, or once the nodes settled. */
int master_node_awaited(const master *m, const char *node, uint64_t now);
/* Wait for the nodes again (a standby promoted): nothing settled, nobody
 * given up, serving counted from now. */
void master_nodes_unsettle(master *m);
/* The end of the wait for a node holding a segment that has not registered
 * since serving began at serving_since_ms: timeout_ms after serving began,
 * or after heard_ms when it was heard from later (its newest inventory page
 * or registration request; 0: never). Pure. */
uint64_t master_node_wait_ends_ms(uint64_t serving_since_ms, uint64_t heard_ms,
                                  uint32_t timeout_ms);
const char *master_node_data_addr(const master *m, const char *id);
/* The object store's place hook (obj_store_set_place_hook, ctx the master):
 * 1 when node id may hold objects of tenant -- it is up and shared or
 * dedicated to tenant, or not registered since this start while the nodes
 * are still waited for (master_nodes_settled), except for a put start
 * (placing_put); 0 for a node that went down and has not registered
 * again, and for one the nodes settled without. */
int master_node_place_ok(void *ctx, const char *id, const char *tenant);
/* How many registered nodes are dedicated to a tenant other than tenant. */
size_t master_nodes_closed_to(const master *m, const char *tenant);
/* How many nodes are up and may hold tenant's objects (shared, or
 * dedicated to tenant). */
size_t master_nodes_open_up(const master *m, const char *tenant);
/* How many nodes registered since this start are down now. */
size_t master_nodes_down(const master *m);
/* Fill loc's co-located fields for a memory replica of an object of tenant
 * on node id: a node dedicated to that tenant gives its local socket (the
 * node checks the peer's uid); a shared node gives its segment path only
 * with authentication off (the file's owner is then trusted with every
 * tenant's bytes); otherwise both stay "" and the client reads through the
 * data port with its ticket. The strings are the registry's. */
struct ReplicaLocation;
void master_node_locate(const master *m, const char *id, const char *tenant, int auth_enabled,
                        struct ReplicaLocation *loc);
/* Whether node id's data server speaks TLS only (it said so at registration). */
int master_node_data_tls(const master *m, const char *id);
size_t master_nodes_up(const master *m);
/* Answer every deferred node poll at once (a drain's start). */
void master_nodes_answer_polls(master *m);
/* Call fn for every node the master knows (up or not), with its id, whether
 * it is up, the cold directory it registered with ("" none) and its cold
 * tier's last report (master_cold_usage.h); everything borrowed for the call. */
struct master_cold_usage;
typedef void (*master_node_visit_fn)(void *arg, const char *id, int up, const char *cold_dir,
                                     const struct master_cold_usage *cold);
void master_nodes_each(const master *m, master_node_visit_fn fn, void *arg);
/* Queue a task (TaskKind of node_rpc.proto) for a node; cb runs when it
 * reports back. SMP_EAGAIN when the node is not up. */
int master_node_task(master *m, const char *node_id, int kind, const char *key,
                     uint64_t offset, uint64_t length, const uint8_t sha256[32],
                     const char *cold_name, master_task_cb cb, void *arg);
/* The same with segment ranges (n_ranges offset, length pairs, copied) for
 * the SCAN and SCRUB tasks of fsck. */
int master_node_task_ranges(master *m, const char *node_id, int kind, const char *key,
                            uint64_t offset, uint64_t length, const uint8_t sha256[32],
                            const char *cold_name, const uint64_t *ranges, size_t n_ranges,
                            master_task_cb cb, void *arg);
/* A SCAN page asked of a node (master_fsck.c): ranges (n_ranges offset,
 * length pairs, copied) of the first page, the name after which the page
 * starts ("" or NULL: the first), its bound, and whether files are left out. */
typedef struct master_scan_page {
    const uint64_t *ranges;
    size_t n_ranges;
    const char *after;
    uint32_t page_bytes;
    int segment_only;
    int deep;           /* hash each cold file's data too (fsck --deep) */
    uint64_t deep_bytes; /* deep: a page's reading at most (0: the node's 1 GiB) */
    int remove_stale_tmp; /* delete the stale temporary cold files (fsck --repair) */
} master_scan_page;
/* Queue that SCAN task (node_rpc.proto's after / page_bytes / segment_only)
 * like master_node_task_ranges. */
int master_node_task_scan(master *m, const char *node_id, const master_scan_page *p,
                          master_task_cb cb, void *arg);
/* What a ticket is minted for: op (TICKET_OP_WRITE / TICKET_OP_READ), the
 * node, its segment (or for a cold replica the file's bare name), the range,
 * the object key and its tenant (NULL or "": none). */
typedef struct master_ticket_req {
    uint8_t op;
    const char *node;
    const char *segment;
    uint64_t offset;
    uint64_t length;
    const char *key;
    const char *tenant;
} master_ticket_req;

/* Mint a ticket for t with the node's current key, valid for
 * node.ticket_ttl_ms. SMP_OK, SMP_EAGAIN (the node is not up), or
 * ticket_mint's errors. */
int master_mint_ticket(const master *m, const master_ticket_req *t, uint8_t *out, size_t cap,
                       size_t *len);
/* Durably drop one replica of key, emit replica-lost, then call done (may
 * be NULL). SMP_ENOTFOUND when key has no such replica (done not called). */
int master_drop_replica(master *m, const char *key, const obj_replica *lost,
                        master_commit_cb done, void *arg);

/* -- master_replicas.c ------------------------------------------------------------ */

/* The host_backend replica tasks (see master_replicas.c). */
int master_ensure_cold(void *ctx, const char *key, smp_done_cb cb, void *arg);
int master_ensure_memory(void *ctx, const char *key, smp_done_cb cb, void *arg);
int master_release_memory(void *ctx, const char *key, smp_done_cb cb, void *arg);
/* 1 while an ensure_cold job of key has its file written but maybe not yet
 * named by a durable replica (fsck leaves such a file alone). */
int master_persist_in_flight(const master *m, const char *key);
void master_replicas_free(master *m);
/* Node node reported the cold files names[0..n) (bare names) corrupt or missing, found
 * so by a client's read: each replica of node naming one is durably
 * dropped (replica-lost goes to the plugins, which see the object
 * unreadable there and repair it from another replica if one exists). A
 * name no replica names, or a failure, is logged; nothing is answered. */
void master_cold_corrupt(master *m, const char *node, char *const *names, size_t n);

/* -- master_corrupt_reports.c ---------------------------------------------------- */

struct ReportCorruptRequest;
/* OBJ_REPORT_CORRUPT (master_objects.c decodes it and applies the tenant
 * rule): refuse a report whose key is unknown, still being put, without a
 * memory replica, or naming a place that is none of its memory replicas
 * (nothing changes); otherwise answer at once and queue a check of the key
 * (and the replica named) unless it is queued, being checked, or was
 * checked recently and found sound -- its node
 * hashes each memory replica the report covers, and one that does not hold
 * the object's bytes is dropped (master_drop_replica), logged with the key,
 * the node and the reporter. SMP_EAGAIN when the queue is full. */
void master_report_corrupt(master *m, smp_rpc_call *call, const struct ReportCorruptRequest *req);
/* The counts of store_corrupt_reports_total, by master_report_result. */
void master_reports_counts(const master *m, uint64_t out[MASTER_REPORT_RESULTS]);
/* Forget every report (master_destroy, after the nodes' tasks ended). */
void master_reports_free(master *m);

/* -- master_reclaim.c ------------------------------------------------------------ */

/* Before applying a host record of type: a PUT_END or REMOVE may take
 * replicas out of the state, so the store is asked to note them
 * (obj_store_track_released); other types take none. */
void master_reclaim_before(master *m, uint16_t type);
/* After that apply (applied 0: it failed, nothing is done): every memory
 * range it freed is zeroed on its node (master_scrub_range) when the node
 * is up, and every cold file no replica names any more gets a DELETE_COLD
 * task on its node. */
void master_reclaim_after(master *m, int applied);
/* Queue a DELETE_COLD task for the cold file name of key on node. SMP_OK,
 * SMP_EAGAIN (the node is not up), SMP_ENOMEM. */
int master_reclaim_cold_file(master *m, const char *node, const char *key, const char *name);
/* A registering node's inventory (n files: keys[i], names[i], lengths[i]
 * data bytes; lengths may be NULL): every file no replica names is deleted,
 * and one line says how many, their bytes and the first few names. Returns
 * how many deletions were queued. */
int master_reclaim_inventory(master *m, const char *node, const char **keys,
                             const char **names, const uint64_t *lengths, size_t n);

/* -- master_scrub.c ---------------------------------------------------------------- */

/* Zero [off, off+len) of segment on node (a range the state just freed):
 * gathered with the other ranges of node freed in this turn of the loop
 * into one SCRUB task, which master_scrub_flush sends; put starts given an
 * overlapping range wait for it from now (master_scrub_reply). SMP_OK or
 * SMP_ENOMEM (the range keeps its bytes). */
int master_scrub_range(master *m, const char *node, const char *segment, uint64_t off, uint64_t len);
/* Send the gathered ranges, one SCRUB task per node; a node no longer up
 * keeps their bytes (fsck --repair). Called at the end of every turn of
 * the loop (its check phase). */
void master_scrub_flush(master *m);
/* Send node's gathered ranges now: called before any other task is queued
 * for node, so that its tasks keep the order in which the master asked
 * for them (a LOAD into a freed range runs after the range's SCRUB). */
void master_scrub_flush_node(master *m, const char *node);

/* Sort the n (offset, length) pairs of pairs[2n] by offset and join each
 * range that ends where the next begins, in place; returns how many pairs
 * are left. A SCRUB task carries its ranges joined: the objects of a
 * revision are placed one after another, so its removal frees one run. */
size_t master_scrub_join(uint64_t *pairs, size_t n);

/* The object store's abandon hook (obj_store_set_abandon_hook, ctx the
 * master): a put or reservation given up before it became a replica has its
 * range scrubbed like a freed replica's (a node that is not up keeps the
 * bytes until `weightctl fsck --repair`). */
void master_scrub_abandoned(void *ctx, const char *node, const char *segment, uint64_t off,
                            uint64_t len);
/* Answer a put start whose range is [off, off+len) of segment with msg:
 * now, or once no scrub overlaps the range. SMP_OK or SMP_ENOMEM (nothing
 * sent). */
int master_scrub_reply(master *m, smp_rpc_call *call, const char *segment, uint64_t off,
                       uint64_t len, const ProtobufCMessage *msg);
/* At exit: parked replies are refused (SMP_EAGAIN). */
void master_scrub_free(master *m);

/* -- master_node_wait.c ------------------------------------------------------------ */

/* From a handler whose call needs a node that the master still waits for
 * (master_node_awaited, master_nodes_waiting): hold call, its body copied,
 * and run its handler again once a node registered, once no node is waited
 * for, or once node.timeout_ms passed since it arrived. 1: held (the
 * handler answers nothing and returns SMP_OK); 0: not (its wait ended,
 * too many wait, out of memory, the master stops): answer it now. */
int master_node_wait_park(master *m, smp_rpc_call *call, const uint8_t *body, size_t len);
/* 1 when none of the n complete replicas in reps is on a node that is up
 * and one is on a node the master still waits for (master_node_awaited):
 * a call that needs one of them waits. Replicas of other statuses do not
 * count. */
int master_replicas_awaited(const master *m, const obj_replica *reps, size_t n, uint64_t now);
/* A node registered: the waiting calls run again at the loop's check. */
void master_node_wait_wake(master *m);
/* The loop's check phase: run them, if a node registered. */
void master_node_wait_check(master *m);
/* The timer: run them once no node is waited for, or one's wait ended. */
void master_node_wait_tick(master *m, uint64_t now);
/* Calls waiting now. */
size_t master_node_wait_count(const master *m);
/* At exit: the calls still waiting are answered SMP_EAGAIN. */
void master_node_wait_free(master *m);

/* -- master_fsck.c ---------------------------------------------------------------- */

/* ADMIN_FSCK: FsckRequest -> FsckReport, answered once every up node's scan
 * (and, with repair, every deletion and zeroing) ended. */
int master_fsck_h(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len);

/* The segment half of `fsck --repair` on one up node, answered to nobody:
 * run when a node registers (and 5 s later), it zeroes what no
 * object, put or reservation occupies and logs what it found. */
int master_fsck_sweep_node(master *m, const char *node);

/* A node a background fsck owes a check: the cold files after the one
 * named after ("": all of them). */
typedef struct master_fsck_cursor {
    const char *node;
    const char *after;
    int failed; /* its check ended in an error (else it was down at the start, or is paging) */
} master_fsck_cursor;

/* What a background fsck found, in all its nodes. */
typedef struct master_fsck_summary {
    size_t nodes;              /* checked (up when it started) */
    size_t nodes_failed;       /* of them, those whose check ended in an error */
    uint32_t nodes_down;       /* holding a segment, not up: not checked */
    uint64_t cold_files, cold_bytes;
    uint64_t corrupt;          /* cold files a replica names whose data did not hash */
    uint64_t dropped;          /* of their replicas, dropped (their plugins copy them again) */
    uint64_t orphans;          /* cold files no replica names (left for fsck --repair) */
    uint64_t objects_without_replica; /* at the end, as fsck counts them */
    const master_fsck_cursor *owed; /* the nodes still owed a check (borrowed for the call): */
    size_t n_owed;                  /* down at the start, or whose check ended in an error */
} master_fsck_summary;
typedef void (*master_fsck_done_fn)(master *m, const master_fsck_summary *sum);
typedef void (*master_fsck_progress_fn)(master *m, const master_fsck_cursor *c, size_t n);
/* Append (node, after, failed), the strings copied, to the list *v[*n]
 * (SMP_ENOMEM leaves it as it was); free such a list. */
int master_fsck_owe(master_fsck_cursor **v, size_t *n, const char *node, const char *after,
                    int failed);
void master_fsck_owed_free(master_fsck_cursor *v, size_t n);

/* Start the background deep check of the cold files of every node holding
 * a segment (only NULL), or of the nodes named in only[n_only] alone, each
 * after its cursor (read at the start only; a node named there that holds
 * no segment any more is forgotten), reading each at bytes_per_s (paced by
 * master_fsck_background_tick) and dropping the replicas it finds corrupt.
 * After each page, and at a stop, progress gets the nodes it still owes a
 * check (borrowed for the call), and done the totals and those nodes once
 * every node's check ended (the nodes' findings are logged). A node that
 * is down is owed, not checked. SMP_EBUSY while one runs, SMP_EINVAL,
 * SMP_ENOMEM. */
int master_fsck_background_start(master *m, uint64_t bytes_per_s, const master_fsck_cursor *only,
                                 size_t n_only, master_fsck_progress_fn progress,
                                 master_fsck_done_fn done);
/* The timer: ask the pages of the background run whose pace allows them. */
void master_fsck_background_tick(master *m, uint64_t now);
/* At exit, before the nodes' tasks are failed: tell progress the nodes
 * still owed (a later start goes on there) and end the background run
 * without judging, repairing or telling done. */
void master_fsck_background_stop(master *m);

/* -- master_fsck_schedule.c ---------------------------------------------------- */

/* The timer, on the leader: start the background fsck when fsck.every_s
 * has passed since the last one began (<data_dir>/fsck.last keeps when,
 * across restarts), once the nodes registered after the start; between
 * two, check the nodes a run still owes once they are up. */
void master_fsck_schedule_tick(master *m, uint64_t now);
/* Background runs ended since the start, and the corrupt files they found. */
uint64_t master_fsck_schedule_runs(const master *m);
uint64_t master_fsck_schedule_corrupt(const master *m);
/* At exit. */
void master_fsck_schedule_free(master *m);

/* -- master_backend.c ----------------------------------------------------------- */

/* Fill m->backend with the master's services for plugins. */
void master_backend_init(master *m);

/* Deliver an event to the plugins (live only: never during recovery). */
void master_emit(master *m, const smp_event *ev);

uint64_t master_now_ms(void);
uint64_t master_wall_ms(void);

#endif /* HOST_MASTER_INTERNAL_H */
