/* weight_management.c -- the weight plugin's management RPC service (16):
 * its method table, its registration and the plugin's metrics.
 *
 * The methods live in the files named in wm_mgmt.h, one per responsibility
 * (records in flight, import, queries, policy and migration and removal,
 * leases); this file wires them into the host's RPC dispatch at init, reads
 * the cluster default policy, registers the metric families and publishes
 * the store's counts and the plugin's counters as metrics. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "weight_lineage.h"
#include "wm_mgmt.h"

/* ------------------------------------------------------------------------ */
/* Registration and metrics                                                  */
/* ------------------------------------------------------------------------ */

/* Each method with the least role allowed to call it (ABI 1.2): readers
 * discover, lease and read; writers also publish, change and remove. */
#define R SMP_ROLE_READER
#define W SMP_ROLE_WRITER
#define M(id, name, fn, role) {sizeof(smp_rpc_method), id, name, fn, role}
static const smp_rpc_method wm_methods[] = {
    M(WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_BEGIN, "IMPORT_BEGIN", wm_rpc_import_begin, W),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_COMMIT, "IMPORT_COMMIT", wm_rpc_import_commit, W),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_ABORT, "IMPORT_ABORT", wm_rpc_import_abort, W),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, "GET_METADATA", wm_rpc_get_metadata, R),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_IS_EXIST, "IS_EXIST", wm_rpc_is_exist, R),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_GET_SIZE, "GET_SIZE", wm_rpc_get_size, R),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_LIST, "LIST", wm_rpc_list, R),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_UPDATE_POLICY, "UPDATE_POLICY", wm_rpc_update_policy, W),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE, "LEASE_ACQUIRE", wm_rpc_lease_acquire, R),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW, "LEASE_RENEW", wm_rpc_lease_renew, R),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE, "LEASE_RELEASE", wm_rpc_lease_release, R),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_MIGRATE, "MIGRATE", wm_rpc_migrate, W),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_GET_OPERATION, "GET_OPERATION", wm_rpc_get_operation, R),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, "REMOVE", wm_rpc_remove, W),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_UPSERT_BEGIN, "UPSERT_BEGIN", wm_rpc_upsert_begin, W),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_UPSERT_STATUS, "UPSERT_STATUS", wm_rpc_upsert_status, R),
    M(WMRPC__WEIGHT_METHOD__WEIGHT_REPAIR, "REPAIR", wm_rpc_repair, W),
};
#undef M
#undef R
#undef W

static const smp_rpc_service wm_service = {
    sizeof(smp_rpc_service), WM_RPC_SERVICE_ID, "weight", wm_methods,
    sizeof(wm_methods) / sizeof(wm_methods[0]),
};

static const char *const wm_l_availability[] = {"availability", NULL};
static const char *const wm_l_residency[] = {"residency", NULL};
static const char *const wm_l_reason[] = {"reason", NULL};
static const char *const wm_l_auto[] = {"direction", "reason", NULL};
static const char *const wm_l_kind[] = {"kind", NULL};
static const char *const wm_l_result[] = {"result", NULL};
static const char *const wm_l_task[] = {"task", NULL};

typedef struct wm_metric_spec {
    smp_metric_kind kind;
    const char *name;
    const char *help;
    const char *const *labels;
    size_t offset;
} wm_metric_spec;

static const wm_metric_spec wm_metric_specs[] = {
    {SMP_METRIC_GAUGE, "weight_revisions", "Weight revisions by availability", wm_l_availability,
     offsetof(wm_plugin, m_revisions)},
    {SMP_METRIC_GAUGE, "weight_revisions_by_residency", "Weight revisions by observed residency",
     wm_l_residency, offsetof(wm_plugin, m_residency)},
    {SMP_METRIC_GAUGE, "weight_operations_active", "Weight revisions with an active operation", NULL,
     offsetof(wm_plugin, m_active_ops)},
    {SMP_METRIC_COUNTER, "weight_operation_failures_total", "Weight operation attempts that failed",
     NULL, offsetof(wm_plugin, m_op_failures)},
    {SMP_METRIC_COUNTER, "weight_operation_retries_total", "Weight operation attempts retried", NULL,
     offsetof(wm_plugin, m_op_retries)},
    {SMP_METRIC_COUNTER, "weight_deletion_read_lease_waits_total",
     "Deletion rounds that held back members a reader still had a read lease on, to remove them "
     "once it ended instead of being refused", NULL, offsetof(wm_plugin, m_read_lease_waits)},
    {SMP_METRIC_COUNTER, "weight_migration_read_lease_waits_total",
     "Memory releases of migrations put off because a reader still had a read lease on the member "
     "(released by a later pass once it ended)", NULL, offsetof(wm_plugin, m_release_lease_waits)},
    {SMP_METRIC_COUNTER, "weight_migration_processed_bytes_total",
     "Logical bytes moved by weight migrations", NULL, offsetof(wm_plugin, m_mig_processed)},
    {SMP_METRIC_GAUGE, "weight_migration_remaining_bytes",
     "Logical bytes active weight migrations still have to move", NULL,
     offsetof(wm_plugin, m_mig_remaining)},
    {SMP_METRIC_GAUGE, "weight_leases_active", "Active weight revision leases", NULL,
     offsetof(wm_plugin, m_leases_active)},
    {SMP_METRIC_COUNTER, "weight_leases_expired_total", "Weight revision leases ended by expiry",
     NULL, offsetof(wm_plugin, m_leases_expired)},
    {SMP_METRIC_COUNTER, "weight_auto_migrations_total",
     "AUTO promotions and demotions by trigger", wm_l_auto, offsetof(wm_plugin, m_auto_triggers)},
    {SMP_METRIC_COUNTER, "weight_guard_skips_total",
     "Generic store actions on managed weight groups refused by the guard", wm_l_reason,
     offsetof(wm_plugin, m_guard_skips)},
    {SMP_METRIC_COUNTER, "weight_migrations_completed_total",
     "Weight migrations that reached their target", NULL, offsetof(wm_plugin, m_mig_completed)},
    {SMP_METRIC_COUNTER, "weight_migration_duration_seconds_total",
     "Time from creation to completion of weight migrations, summed", NULL,
     offsetof(wm_plugin, m_mig_duration)},
    {SMP_METRIC_COUNTER, "weight_records_pruned_total",
     "Weight records forgotten with a type-9 record: aborted imports, tombstones and ended "
     "operations past their retention",
     wm_l_kind, offsetof(wm_plugin, m_pruned)},
    {SMP_METRIC_COUNTER, "weight_imports_expired_total",
     "Weight imports aborted by the tick after making no progress for import_ttl_ms", NULL,
     offsetof(wm_plugin, m_imports_expired)},
    {SMP_METRIC_COUNTER, "weight_repairs_total",
     "REPAIRING operations the tick started (explicit ones not counted) and how repairs ended "
     "(gave_up: failed after repair_max_attempts, also counted as failed)",
     wm_l_result, offsetof(wm_plugin, m_repairs)},
    {SMP_METRIC_COUNTER, "weight_repair_restored_bytes_total",
     "Logical bytes of members whose replicas a repair restored", NULL,
     offsetof(wm_plugin, m_repair_bytes)},
    {SMP_METRIC_COUNTER, "weight_read_misses_total",
     "Reads (get-replicas) that found a member of a READY revision unknown or without a readable "
     "replica; each has the revision validated against its replicas", NULL,
     offsetof(wm_plugin, m_read_misses)},
    {SMP_METRIC_COUNTER, "weight_access_records_total",
     "Type-8 records that persisted a revision's last access (lease renewals and releases, "
     "volatile grants) at its metadata generation, batched by the tick", NULL,
     offsetof(wm_plugin, m_access_records)},
    {SMP_METRIC_COUNTER, "weight_manifest_replica_tasks_total",
     "Manifest replica tasks by the tick: cold copies made, memory replicas restored from the "
     "cold copy, attempts that failed",
     wm_l_task, offsetof(wm_plugin, m_manifest_tasks)},
};

static const char *const wm_guard_reason_names[SMP_GUARD_REASON_MAX + 1] = {
    "none", "batch_evict", "quota_evict", "remove_key", "remove_all", "remove_pattern",
    "stale_put_cleanup", "cold_evict", "put_into_group", "upsert_into_group",
};

void wm_metrics_refresh(wm_plugin *p)
{
    const smp_host_api *a = p->api;
    wm_store_stats s;
    if (p->m_revisions == NULL) return;
    wm_store_stats_get(p->store, &s);
    for (int v = WM_AVAIL_IMPORTING; v <= WM_AVAIL_DELETED; v++) {
        const char *l[1] = {wm_availability_name(v)};
        a->metric_set(p->m_revisions, l, (double)s.by_availability[v]);
    }
    for (int v = WM_RES_UNKNOWN; v <= WM_RES_ABSENT; v++) {
        const char *l[1] = {wm_residency_name(v)};
        a->metric_set(p->m_residency, l, (double)s.by_residency[v]);
    }
    a->metric_set(p->m_active_ops, NULL, (double)s.active_operations);
    a->metric_set(p->m_op_failures, NULL, (double)p->op_failures);
    a->metric_set(p->m_op_retries, NULL, (double)p->op_retries);
    a->metric_set(p->m_read_lease_waits, NULL, (double)p->read_lease_waits);
    a->metric_set(p->m_release_lease_waits, NULL, (double)p->release_lease_waits);
    a->metric_set(p->m_mig_processed, NULL, (double)p->migration_bytes_processed);
    /* Over the operations, not the revisions: this runs after every record
     * (replay included), and the revisions are many more. */
    uint64_t remaining = 0;
    size_t n = wm_store_operation_count(p->store);
    for (size_t i = 0; i < n; i++) {
        const wm_operation *o = wm_store_operation_at(p->store, i);
        if (o->kind == WM_OPK_MIGRATING && o->state == WM_OPS_RUNNING)
            remaining += o->bytes_total - o->bytes_done;
    }
    a->metric_set(p->m_mig_remaining, NULL, (double)remaining);
    a->metric_set(p->m_mig_completed, NULL, (double)p->migrations_completed);
    a->metric_set(p->m_mig_duration, NULL, (double)p->migration_ms_total / 1000.0);
    a->metric_set(p->m_leases_active, NULL, (double)s.leases);
    a->metric_set(p->m_leases_expired, NULL, (double)p->leases_expired);
    {
        const char *l[2] = {"promote", "access"};
        a->metric_set(p->m_auto_triggers, l, (double)p->auto_triggers[WM_AUTO_PROMOTE_ON_ACCESS]);
        l[0] = "demote";
        l[1] = "memory_pressure";
        a->metric_set(p->m_auto_triggers, l, (double)p->auto_triggers[WM_AUTO_DEMOTE_ON_PRESSURE]);
        l[0] = "promote";
        l[1] = "pressure_relief";
        a->metric_set(p->m_auto_triggers, l, (double)p->auto_triggers[WM_AUTO_PROMOTE_ON_RELIEF]);
    }
    {
        static const char *const kinds[WM_DEL_REASONS] = {NULL, "aborted_import", "tombstone",
                                                          "operation"};
        for (int k = 1; k < WM_DEL_REASONS; k++) {
            const char *l[1] = {kinds[k]};
            a->metric_set(p->m_pruned, l, (double)p->records_pruned[k]);
        }
        a->metric_set(p->m_imports_expired, NULL, (double)p->imports_expired);
    }
    {
        const char *l[1] = {"started"};
        a->metric_set(p->m_repairs, l, (double)p->repairs_started);
        l[0] = "succeeded";
        a->metric_set(p->m_repairs, l, (double)p->repairs_succeeded);
        l[0] = "failed";
        a->metric_set(p->m_repairs, l, (double)p->repairs_failed);
        l[0] = "gave_up";
        a->metric_set(p->m_repairs, l, (double)p->repairs_gave_up);
        a->metric_set(p->m_repair_bytes, NULL, (double)p->repair_bytes_processed);
        a->metric_set(p->m_read_misses, NULL, (double)p->read_misses);
        a->metric_set(p->m_access_records, NULL, (double)p->access_records);
        l[0] = "cold_copy";
        a->metric_set(p->m_manifest_tasks, l, (double)p->manifest_cold_copies);
        l[0] = "memory_restore";
        a->metric_set(p->m_manifest_tasks, l, (double)p->manifest_memory_restores);
        l[0] = "failed";
        a->metric_set(p->m_manifest_tasks, l, (double)p->manifest_task_failures);
    }
    for (int r = 1; r <= SMP_GUARD_REASON_MAX; r++) {
        const char *l[1] = {wm_guard_reason_names[r]};
        a->metric_set(p->m_guard_skips, l, (double)p->guard_skips[r]);
    }
    wm_lineage_metrics(p);
}

/* The cluster default policy from the master's configuration. */
static int wm_read_cluster_policy(wm_plugin *p)
{
    smp_config_value pref, ratio, mode;
    char msg[256];
    memset(&pref, 0, sizeof(pref));
    memset(&ratio, 0, sizeof(ratio));
    memset(&mode, 0, sizeof(mode));
    pref.struct_size = ratio.struct_size = mode.struct_size = sizeof(smp_config_value);
    p->cluster_policy = wm_policy_default();
    if (p->api->config_get(p->host, SMP_CONFIG_CLUSTER, "default_weight_preferred_residency", &pref) < 0 ||
        p->api->config_get(p->host, SMP_CONFIG_CLUSTER, "default_weight_mixed_hot_ratio", &ratio) < 0 ||
        p->api->config_get(p->host, SMP_CONFIG_CLUSTER, "default_weight_migration_mode", &mode) < 0)
        return WM_OK; /* a host without the keys: the built-in default */
    if (wm_policy_from_names(pref.s, ratio.d, mode.s, &p->cluster_policy, msg, sizeof(msg)) < 0) {
        p->api->log(p->host, SMP_LOG_ERROR, "cluster default weight policy refused: %s", msg);
        return WM_EINVALID_ARGUMENT;
    }
    return WM_OK;
}

int wm_mgmt_register(wm_plugin *p)
{
    int rc;
    if ((rc = wm_read_cluster_policy(p)) < 0) return rc;
    if ((p->api->host_caps & SMP_HOST_CAP_RPC_DISPATCH) &&
        (rc = p->api->register_rpc_service(p->host, &wm_service)) < 0)
        return rc;
    if (p->api->host_caps & SMP_HOST_CAP_METRICS) {
        for (size_t i = 0; i < sizeof(wm_metric_specs) / sizeof(wm_metric_specs[0]); i++) {
            const wm_metric_spec *s = &wm_metric_specs[i];
            smp_metric_desc d = {sizeof(smp_metric_desc), s->kind, s->name, s->help, s->labels};
            smp_metric **slot = (smp_metric **)((char *)p + s->offset);
            if ((rc = p->api->register_metric(p->host, &d, slot)) < 0) return rc;
        }
    }
    return wm_lineage_register(p); /* last: nothing after it can fail */
}
