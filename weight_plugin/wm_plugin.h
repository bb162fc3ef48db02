/* wm_plugin.h -- the state weight_mgmt.so shares between its parts.
 *
 * One wm_plugin value lives from init to fini: the host handles, the
 * revision store, the cluster's default policy, the list of mutations whose
 * OpLog record is appended but not yet durable, and the metric handles.
 * weight_management.c and the wm_mgmt_*.c files (RPCs and the
 * append/publish machinery, see wm_mgmt.h),
 * weight_lifecycle.c (guard, tick) and weight_plugin.c (ABI wiring) all work
 * on it; everything runs on the master's loop thread. */
#ifndef WM_PLUGIN_H
#define WM_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "log_limit.h"
#include "weight_management.h"
#include "weight_metadata_store.h"
#include "weight_residency_planner.h"
#include "wm_codec.h"

#define WM_RPC_SERVICE_ID 16
#define WM_LEASE_TTL_DEFAULT_MS 30000
#define WM_LEASE_TTL_MAX_MS 600000
#define WM_LIST_LIMIT_DEFAULT 100
#define WM_LIST_LIMIT_MAX 1000
#define WM_COMMIT_MAX_PAYLOADS (1u << 20)
#define WM_LEASE_SWEEP_MAX 256 /* lease expiries appended per tick round */

/* Reasons an AUTO revision moved (metric label). */
typedef enum wm_auto_reason {
    WM_AUTO_PROMOTE_ON_ACCESS = 0,
    WM_AUTO_DEMOTE_ON_PRESSURE = 1,
    WM_AUTO_PROMOTE_ON_RELIEF = 2, /* pressure is gone: back toward preferred */
    WM_AUTO_REASONS = 3
} wm_auto_reason;

typedef struct wm_txn wm_txn;
typedef struct wm_lc wm_lc; /* the lifecycle's working state (weight_lifecycle.c) */
typedef struct wm_lin wm_lin; /* generation replacement's state (weight_lineage.c) */
typedef struct wm_repair wm_repair; /* validation and repair state (wm_repair.c) */
typedef struct wm_auto wm_auto; /* AUTO moves' state (wm_auto.c) */

/* A lease granted while the lease record type's gate is closed (an HA
 * upgrade in progress): held in the leader's memory only, never logged
 * (wm_mgmt_lease.c). */
typedef struct wm_vlease {
    wm_lease lease;               /* id_of points into strs */
    char group_key[WM_KEY_MAX + 1];
    char *strs;                   /* owned: lease.id_of's strings */
} wm_vlease;

typedef struct wm_plugin {
    smp_host *host;
    const smp_host_api *api;
    wm_store *store;
    wm_policy cluster_policy;  /* the master's defaults for new revisions */
    wm_txn *pending;           /* appended, not yet durable */
    log_limit durability_log;  /* "did not become durable" lines (wm_mgmt_txn.c) */
    wm_vlease *vleases;        /* volatile leases, by grant order */
    size_t n_vleases;
    size_t cap_vleases;
    uint64_t vleases_granted;  /* volatile grants since start */

    /* Counters the guard may bump (it must not call the host); published by
     * wm_metrics_refresh(). */
    uint64_t guard_skips[SMP_GUARD_REASON_MAX + 1];
    uint64_t leases_expired;
    uint64_t op_failures;
    uint64_t op_retries;
    uint64_t read_lease_waits;     /* deletion rounds that waited for readers' read leases */
    uint64_t release_lease_waits;  /* migration memory releases put off for a read lease */
    uint64_t auto_triggers[WM_AUTO_REASONS];
    uint64_t migration_bytes_processed;
    uint64_t migrations_completed;
    uint64_t migration_ms_total;   /* creation to completion, summed */

    wm_lc *lc;                 /* created by the first tick or event */
    wm_auto *auto_state;       /* the same (wm_auto.c) */
    smp_tick tick_reg;         /* registered with the host (period from config) */

    smp_metric *m_revisions;       /* gauge {availability} */
    smp_metric *m_residency;       /* gauge {residency} */
    smp_metric *m_active_ops;      /* gauge */
    smp_metric *m_op_failures;     /* counter */
    smp_metric *m_op_retries;      /* counter */
    smp_metric *m_read_lease_waits; /* counter */
    smp_metric *m_release_lease_waits; /* counter */
    smp_metric *m_mig_processed;   /* counter (bytes) */
    smp_metric *m_mig_remaining;   /* gauge (bytes) */
    smp_metric *m_leases_active;   /* gauge */
    smp_metric *m_leases_expired;  /* counter */
    smp_metric *m_auto_triggers;   /* counter {direction, reason} */
    smp_metric *m_guard_skips;     /* counter {reason} */
    smp_metric *m_mig_completed;   /* counter */
    smp_metric *m_mig_duration;    /* counter (seconds) */

    wm_lin *lin;               /* created at registration (weight_lineage.c) */

    /* Reclamation (wm_reclaim.c): records that left the table by type-9
     * reason, imports the tick aborted for idling past their TTL, and the
     * tick's working state. */
    uint64_t records_pruned[WM_DEL_REASONS];
    uint64_t imports_expired;
    struct wm_reclaim *reclaim;
    smp_metric *m_pruned;          /* counter {kind} */
    smp_metric *m_imports_expired; /* counter */

    /* Repair (wm_repair.c, weight_lifecycle.c): REPAIRING operations the
     * tick started and how they ended, the bytes they restored, and the
     * manifest replica tasks (cold copies made, memory replicas restored,
     * attempts that failed). */
    wm_repair *repair;
    uint64_t repairs_started;
    uint64_t repairs_succeeded;
    uint64_t repairs_failed;
    uint64_t repairs_gave_up;      /* ended FAILED after repair_max_attempts */
    uint64_t repair_bytes_processed;
    uint64_t manifest_cold_copies;
    uint64_t manifest_memory_restores;
    uint64_t manifest_task_failures;
    smp_metric *m_repairs;         /* counter {result} */
    smp_metric *m_repair_bytes;    /* counter (bytes) */
    smp_metric *m_manifest_tasks;  /* counter {task} */
    uint64_t read_misses;          /* reads that found a READY member missing */
    smp_metric *m_read_misses;     /* counter */

    /* Last access (wm_access.c): revisions whose in-memory last access is
     * ahead of their records, the records that persisted one, and the
     * accesses not remembered because too many revisions waited. */
    struct wm_access *access;
    uint64_t access_records;
    uint64_t access_dropped;
    smp_metric *m_access_records;  /* counter */

    /* Hot reload (weight_plugin.c, wm_handoff.c). */
    int quiesced;                  /* the host stopped it; nothing new starts */
    uint8_t *handoff_section;      /* the section imported, until the self-check */
    size_t handoff_len;
} wm_plugin;

/* -- weight_management.c, wm_mgmt_txn.c ----------------------------------- */

/* Read the cluster default policy, register the RPC service and the metric
 * families. Only inside init. SMP_E* / WM_EINVALID_ARGUMENT (a cluster
 * default the plugin refuses, logged). */
int wm_mgmt_register(wm_plugin *p);

/* Publish the store's counts and the plugin's counters as metrics. */
void wm_metrics_refresh(wm_plugin *p);

/* Release every pending mutation's memory (at fini; their callbacks will not
 * run any more). */
void wm_mgmt_release(wm_plugin *p);

/* A mutation in flight on the revision of group_key (its record appended
 * and not yet durable): metadata records, and lease grants -- a volatile
 * lease (not logged while the gate is closed) counts as one. */
int wm_pending_metadata(const wm_plugin *p, const char *group_key);
int wm_pending_lease_grants(const wm_plugin *p, const char *group_key);

/* What keeps rev from taking an operation, for a BUSY message, in out:
 * "active operation N (KIND)", or a metadata change of it still on its way
 * to the OpLog (wm_pending_metadata) -- 1 -- else "no operation" and 0. */
int wm_busy_reason(const wm_plugin *p, const wm_revision *rev, char *out, size_t n);

/* -- wm_mgmt_lease.c: volatile leases --------------------------------------- */

/* 1 when a live volatile lease names the revision of group_key. */
int wm_vleases_on(const wm_plugin *p, const char *group_key);
/* Hold l (on the revision of group_key) as a volatile lease: a grant, or
 * one handed over by a reload (wm_handoff.c). SMP_OK or SMP_ENOMEM. */
int wm_vlease_add(wm_plugin *p, const wm_lease *l, const char *group_key);
/* Drop the expired volatile leases; while the gate is open, make each live
 * one durable (a LEASE_UPSERT record with the same id and expiry; from its
 * append the pending grant protects the revision). Called by the tick. */
void wm_vleases_tick(wm_plugin *p);
/* Free the table (fini: a failover or stop drops volatile leases). */
void wm_vleases_free(wm_plugin *p);
/* An end record for this lease is in flight. */
int wm_pending_lease_end(const wm_plugin *p, uint64_t lease_id);
/* A type-9 record listing this operation is in flight. */
int wm_pending_delete_op(const wm_plugin *p, uint64_t op_id);

/* Abort the IMPORTING revision rev (wm_mgmt_import.c; the caller checked
 * the lineage and the fence): uploads present, DELETING with its operation
 * (the lifecycle removes them and forgets the revision); none, the group is
 * unmanaged and a type-9 record forgets it. call NULL (the tick): nobody
 * is answered and failures are returned and logged. SMP_OK or SMP_E*. */
int wm_import_abort_start(wm_plugin *p, const wm_revision *rev, smp_rpc_call *call);

/* Append a type-11 record ending lease `l` for `reason`; applied to the store
 * when durable. No reply. SMP_E* from oplog_append (nothing in flight then). */
int wm_submit_lease_end(wm_plugin *p, const wm_lease *l, wm_lease_end reason);

/* Called once a record submitted below was applied (status WM_OK) or could
 * not be made durable or applied (negative; the store is unchanged). */
typedef void (*wm_applied_fn)(wm_plugin *p, void *arg, int status);

/* For the lifecycle: append a type-8 record holding `rev` (the complete next
 * state) and up to two operations it changed (copied; no affinity: the
 * sealed one is kept), apply it from the durable callback, then call cb (may
 * be NULL). While it is in flight the revision is busy for every other
 * mutation (wm_pending_metadata). The record is checked before the append:
 * WM_EINVALID_ARGUMENT (with a log line naming the fault) if the store
 * would refuse it; otherwise SMP_E* from oplog_append (SMP_EGATE in HA mode
 * before the gate is confirmed). On failure cb is never called. */
/* An access record: wm_submit_upsert of rev unchanged (the caller keeps its
 * metadata generation) with no operation, which does not hold the revision
 * busy (wm_access.c); counted in access_records once applied (durable). */
int wm_submit_access(wm_plugin *p, const wm_revision *rev);
int wm_submit_upsert(wm_plugin *p, const wm_revision *rev, const wm_operation *ops, size_t n_ops,
                     wm_applied_fn cb, void *arg);

/* For the lifecycle: append a type-9 record (a tombstone forgotten, an
 * import that never became visible, or ended operations past their
 * retention -- that one does not hold the revision busy), same contract as
 * wm_submit_upsert. At most one operation id. */
int wm_submit_delete(wm_plugin *p, const wm_metadata_delete *d, wm_applied_fn cb, void *arg);

/* Answer call with error rc and a sentence as the body (always SMP_OK). */
__attribute__((format(printf, 4, 5)))
int wm_reply_error(wm_plugin *p, smp_rpc_call *call, int rc, const char *fmt, ...);

/* The text of an error status for clients and logs: the RFC's name, or the
 * host's, with a hint for the HA gate. */
const char *wm_status_name(int rc);

/* -- weight_lifecycle.c ---------------------------------------------------- */

/* The object guard (see weight_lifecycle.c). Never calls the host. */
int wm_guard_check(wm_plugin *p, const smp_guard_request *req);

/* One reconcile round within budget; SMP_TICK_DONE or SMP_TICK_MORE. */
int wm_lifecycle_tick(wm_plugin *p, const smp_tick_budget *budget, uint64_t *cursor);

/* React to a host event (replica lost, node up, memory pressure). Never
 * blocks; the work happens in the next ticks. */
void wm_lifecycle_event(wm_plugin *p, const smp_event *ev);

/* Free the lifecycle's working state (at fini, after the host's last
 * callback; also called by wm_mgmt_release). */
void wm_lifecycle_release(wm_plugin *p);

/* What the host says of one key into *info (zeros when it does not exist);
 * object_get's status. */
int wm_replicas_of(wm_plugin *p, const char *key, smp_object_info *info);

/* The wait before retry number `attempts` of a failed step: 200 ms doubled
 * per attempt, at most 5 s. */
uint64_t wm_backoff(uint32_t attempts);

/* After a change of leader and after a resume (enable, a reload's handoff,
 * a refused reload): drop the working copies (rebuilt from the store),
 * recheck DEGRADED revisions and re-validate every revision against its
 * replicas (wm_repair_validate_all). */
void wm_lifecycle_revalidate(wm_plugin *p);

/* A change of availability alone (READY <-> DEGRADED), generation + 1, the
 * active operation carried along; with obs, the residency and hot ratio
 * observed (a DEGRADED one shows what its replicas left, ABSENT when
 * none). Logged, with where a revision turning DEGRADED belongs. WM_OK
 * once appended, or the refusal (logged). */
int wm_submit_availability(wm_plugin *p, const wm_revision *rev, wm_availability a,
                           const wm_observation *obs);

/* -- wm_auto.c: AUTO revisions moving by themselves ------------------------ */

/* Memory pressure reported: used of capacity bytes (capacity 0: ignored). */
void wm_auto_pressure(wm_plugin *p, uint64_t used, uint64_t capacity);
/* Forget the AUTO operation in flight (another term may have ended it;
 * the next tick looks at the store again). */
void wm_auto_forget_op(wm_plugin *p);

/* The cluster's weight_migration_cooldown_ms (30000 when unset): how long
 * after its last update an AUTO revision moves by itself -- demoted,
 * promoted after pressure, or promoted by an access (wm_mgmt_lease.c). */
uint64_t wm_migration_cooldown_ms(wm_plugin *p);
/* Start at most one AUTO migration, when none runs and the pressure (or
 * its end) calls for one. 1 while its record is in flight. */
int wm_auto_tick(wm_plugin *p);
/* Free the state (wm_lifecycle_release calls it). */
void wm_auto_release(wm_plugin *p);

/* The host's wall clock, never below rev's updated_ms (rev may be NULL). */
uint64_t wm_now(wm_plugin *p, const wm_revision *rev);

/* -- wm_handoff.c ---------------------------------------------------------- */

#define WM_HANDOFF_FORMAT 2  /* 1: without the volatile leases (still read) */

/* export_state: the section's bytes and the in-memory counters (out->data
 * allocated with the API's alloc). SMP_OK or SMP_E*. */
int wm_handoff_export(wm_plugin *p, smp_handoff *out);
/* import_state into a fresh instance: SMP_OK, or a refusal with a sentence
 * in why (another format, a newer section encver, bytes that do not decode
 * or a section the store refuses). */
int wm_handoff_import(wm_plugin *p, const smp_handoff *in, char *why, size_t cap);
/* self_check after import: the store saves to the bytes it was given. */
int wm_handoff_self_check(wm_plugin *p, char *why, size_t cap);

/* -- wm_reclaim.c ---------------------------------------------------------- */

#define WM_IMPORT_TTL_DEFAULT_MS 3600000ull   /* plugin key import_ttl_ms */
#define WM_RETENTION_DEFAULT_MS 86400000ull   /* plugin key record_retention_ms */
#define WM_RECLAIM_SCAN 256     /* revisions and operations looked at per round */
#define WM_RECLAIM_MAX 32       /* records appended per round (also <= the budget) */

/* One reclamation round (called by the tick, active master only): abort
 * imports idle past import_ttl_ms, forget DELETED tombstones and ended
 * operations past record_retention_ms. Bounded; returns 1 when it stopped
 * with work left. */
int wm_reclaim_tick(wm_plugin *p, const smp_tick_budget *budget);

/* The non-negative integer plugin key `key` of the plugin's config block, or
 * dflt when it is absent, negative or not an integer. */
uint64_t wm_plugin_u64(wm_plugin *p, const char *key, uint64_t dflt);

/* Check the plugin's config block (wm_config.c): every key known, every
 * value an integer in its range. SMP_OK, or SMP_EINVAL after logging the
 * first offending key with its line. */
int wm_config_check(smp_host *h, const smp_host_api *api);

/* The plugin key import_ttl_ms (0: imports never expire). */
uint64_t wm_import_ttl_ms(wm_plugin *p);

/* Free the reclamation state (at fini; from wm_mgmt_release). */
void wm_reclaim_release(wm_plugin *p);

/* -- wm_repair.c ----------------------------------------------------------- */

/* 1 when the revision's manifest has a complete, readable (verified) cold
 * replica on a live node. */
int wm_manifest_has_cold(wm_plugin *p, const wm_revision *rev);

/* One round: manifest replica care, then validation of the queued
 * revisions and of the validate-all walk, spending *checks (object reads);
 * past the budget's deadline no further revision is validated this round
 * (at least one is). Returns 1 when work is left. */
int wm_repair_tick(wm_plugin *p, const smp_tick_budget *budget, uint64_t *checks);

/* 1 once the round's deadline has passed (a budget without one, or NULL,
 * never passes). weight_lifecycle.c. */
int wm_past_deadline(wm_plugin *p, const smp_tick_budget *budget);

/* Look at every manifest's replicas again (a lap of the manifest scan):
 * something may have changed them that no revision record shows (a
 * replica lost, a node up). */
void wm_repair_manifests_due(wm_plugin *p);

/* The revision of group_key became READY (its record is durable): its
 * manifest gets the replica it lacks -- the cold copy, after a publish --
 * in a coming round, without a lap of the store. */
void wm_repair_ready(wm_plugin *p, const char *group_key);

/* Validate the revision of group_key against its replicas in a coming
 * round (a member of it was reported lost). */
void wm_repair_note(wm_plugin *p, const char *group_key);

/* The REPAIRING operation of group_key ended FAILED after
 * repair_max_attempts: its next validation records the residency its
 * replicas have and starts no repair by itself. */
void wm_repair_gave_up(wm_plugin *p, const char *group_key);

/* What rev's replicas show now: the availability and residency they make
 * (wm_residency_observe over every member and the manifest). WM_OK,
 * WM_EINVALID_ARGUMENT (no affinity units), SMP_ENOMEM. */
int wm_repair_observe(wm_plugin *p, const wm_revision *rev, wm_observation *out);

/* Validate every revision again (a role change, a resume; a start does it by
 * itself). */
void wm_repair_validate_all(wm_plugin *p);

/* Free the repair state (at fini; from wm_mgmt_release). */
void wm_repair_release(wm_plugin *p);

#define WM_REPAIR_MAX_ATTEMPTS_DEFAULT 8u  /* plugin key repair_max_attempts */
#define WM_REPAIR_MAX_ATTEMPTS_LIMIT 1000u

/* The plugin key repair_max_attempts: how many failed batches a REPAIRING
 * or MIGRATING operation retries (with wm_backoff between them) before it
 * ends FAILED (weight_lifecycle.c: wm_job_give_up).
 * 1 .. WM_REPAIR_MAX_ATTEMPTS_LIMIT; outside that, the default. */
uint32_t wm_repair_max_attempts(wm_plugin *p);

/* -- wm_access.c ----------------------------------------------------------- */

/* An access of revision id at access_ms that no record of its own carries
 * (a lease renewal or release, a volatile grant): last_access_ms moves in
 * memory now (wm_store_touch) and the tick persists it (wm_access_tick).
 * Nothing happens when the revision is absent or was accessed as late. */
void wm_access_note(wm_plugin *p, const wm_identity *id, uint64_t access_ms);

/* One round (active master only): persist the accesses noted at least
 * WM_ACCESS_DELAY_MS ago, a bounded number of type-8 records that repeat
 * each revision at its metadata generation (wm_submit_access). Returns 1
 * when some that are due wait for another round (the cap). */
int wm_access_tick(wm_plugin *p);

/* Free the state (at fini; from wm_mgmt_release). */
void wm_access_release(wm_plugin *p);

/* -- weight_lineage.c ------------------------------------------------------ */

/* 1 when the revision is the base of an open replacement claim that retired
 * it (PUT_FIRST from BASE_FENCED on, DELETE_FIRST from CLAIMED on), counting
 * a claim record still in flight (the fence holds from its append): its
 * leases may not be renewed and no new ones are granted. */
int wm_revision_fenced(const wm_plugin *p, const wm_revision *rev);

/* -- wm_tenant.c: the tenant a request acts for ----------------------------- */

/* The tenant a request naming wire ("" or NULL: none) acts for, from the
 * caller the host authenticated: wire, the caller's own tenant when wire is
 * empty ("default" with authentication off), or NULL when a non-admin
 * caller names another tenant (answer NOT_FOUND, never FORBIDDEN). */
const char *wm_tenant_of(wm_plugin *p, smp_rpc_call *call, const char *wire);
/* The authenticated caller's own tenant (valid while call is unanswered),
 * or "" with authentication off. */
const char *wm_caller_tenant(wm_plugin *p, smp_rpc_call *call);
/* 1 when the caller of call may see tenant's revisions. */
int wm_tenant_visible(wm_plugin *p, smp_rpc_call *call, const char *tenant);
/* 1 when tenant may start one more live revision under the host's limits;
 * 0 when it may not, call then answered (SMP_ENOSPC naming the count and
 * the limit) and nothing changed. */
int wm_tenant_admit_revision(wm_plugin *p, smp_rpc_call *call, const char *tenant);

#endif /* WM_PLUGIN_H */
