/* master_admin.c -- what an operator sees: admin RPC, /metrics, /health, /role.
 *
 * The admin RPC service (2) reports status and takes a snapshot on demand.
 * The HTTP endpoint renders on the loop thread: /metrics refreshes the host's
 * gauges and counters from the object store, the OpLog and the RPC server,
 * then prints every family (the host's and the plugins') in Prometheus text
 * format; /health answers 200 while the OpLog accepts writes (saying so
 * while the reconcile ticks still wait for nodes after a start) and 503
 * after it failed or while a stop drains, its first line the verdict and
 * its second the loop lag;
 * /role names this master's role. Each node's cold tier (how full, failed
 * writes) comes from master_cold_usage.c, in /metrics and in the status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_rpc.pb-c.h"
#include "ha_election.h"
#include "master_cold_usage.h"
#include "master_internal.h"
#include "read_lease.h"

static const char *const data_type_names[] = {"kv", "metadata", "weight"};
static const char *const replica_kind_names[] = {"memory", "cold"};

/* -- metrics ---------------------------------------------------------------- */

typedef struct metric_def {
    size_t offset; /* of the host_metric * in master.m */
    smp_metric_kind kind;
    const char *name;
    const char *help;
    const char *label;
} metric_def;

#define M(field) offsetof(master, m.field)
static const metric_def metric_defs[] = {
    {M(objects), SMP_METRIC_GAUGE, "store_objects", "Complete objects by data type", "data_type"},
    {M(object_bytes), SMP_METRIC_GAUGE, "store_object_bytes", "Logical bytes of complete objects by data type", "data_type"},
    {M(replicas), SMP_METRIC_GAUGE, "store_replicas", "Complete replicas by kind", "kind"},
    {M(replica_bytes), SMP_METRIC_GAUGE, "store_replica_bytes", "Bytes of complete replicas by kind", "kind"},
    {M(memory_used), SMP_METRIC_GAUGE, "store_memory_used_bytes", "Bytes allocated in memory segments", NULL},
    {M(memory_capacity), SMP_METRIC_GAUGE, "store_memory_capacity_bytes", "Capacity of all memory segments", NULL},
    {M(puts_in_flight), SMP_METRIC_GAUGE, "store_puts_in_flight", "Puts started and not yet ended", NULL},
    {M(puts_taken_over), SMP_METRIC_COUNTER, "store_puts_taken_over_total", "Open puts another master handed on (a stopping master's PUT_HANDOFF, the record of a large put's start, a snapshot) still open when this master began to lead (taken), or that it could not take (not_taken: their range or key was taken meanwhile)", "result"},
    {M(zone_bytes_held), SMP_METRIC_GAUGE, "store_write_zone_held_bytes", "Free bytes of the write zones of the master before this one, held back from placement for a stale put's time after this master began to lead (its writers of puts under 1 MiB may still copy there)", NULL},
    {M(oplog_appends), SMP_METRIC_COUNTER, "oplog_appends_total", "Records appended to the OpLog", NULL},
    {M(oplog_fsyncs), SMP_METRIC_COUNTER, "oplog_fsyncs_total", "Data syncs of the OpLog", NULL},
    {M(oplog_batches), SMP_METRIC_COUNTER, "oplog_batches_total", "Group commits written", NULL},
    {M(oplog_max_batch), SMP_METRIC_GAUGE, "oplog_max_batch_records", "Most records in one group commit", NULL},
    {M(oplog_bytes), SMP_METRIC_COUNTER, "oplog_bytes_total", "Record bytes made durable", NULL},
    {M(oplog_durable_seconds_sum), SMP_METRIC_COUNTER, "oplog_durable_latency_seconds_sum", "Sum of append-to-durable latencies", NULL},
    {M(oplog_durable_count), SMP_METRIC_COUNTER, "oplog_durable_latency_seconds_count", "Records made durable", NULL},
    {M(oplog_failed), SMP_METRIC_COUNTER, "oplog_failed_total", "Records that could not be made durable", NULL},
    {M(snapshot_age), SMP_METRIC_GAUGE, "snapshot_age_seconds", "Seconds since the newest snapshot was written (-1: none this run)", NULL},
    {M(snapshot_seq), SMP_METRIC_GAUGE, "snapshot_last_seq", "Last OpLog sequence included in the newest snapshot", NULL},
    {M(snapshot_capture), SMP_METRIC_GAUGE, "store_snapshot_capture_seconds", "Seconds the newest snapshot written this run held the loop thread to capture the state", NULL},
    {M(snapshot_encode), SMP_METRIC_GAUGE, "store_snapshot_encode_seconds", "Seconds the newest snapshot written this run took to encode its sections", NULL},
    {M(snapshot_write), SMP_METRIC_GAUGE, "store_snapshot_write_seconds", "Seconds from the end of the newest snapshot's capture until its file was durable", NULL},
    {M(snapshot_bytes), SMP_METRIC_GAUGE, "store_snapshot_bytes", "Size of the newest snapshot file written this run", NULL},
    {M(host_refusals), SMP_METRIC_COUNTER, "host_managed_group_refusals_total", "Actions on managed groups the host refused itself (owner plugin not active, or without a guard)", "reason"},
    {M(rpc_requests), SMP_METRIC_COUNTER, "rpc_requests_total", "RPC requests decoded", NULL},
    {M(rpc_errors), SMP_METRIC_COUNTER, "rpc_errors_total", "RPC replies with an error status", NULL},
    {M(rpc_connections), SMP_METRIC_GAUGE, "rpc_connections", "Open RPC connections", NULL},
    {M(rpc_auth_refusals), SMP_METRIC_COUNTER, "store_rpc_auth_refusals_total", "RPC requests refused by authorization (unauthenticated: no accepted token or mapped client certificate; forbidden: role below the method's rule; no_rule: the method has none)", "reason"},
    {M(admin_refusals), SMP_METRIC_COUNTER, "store_admin_http_refusals_total", "Admin HTTP requests refused, by reason (method: not GET or HEAD; client_cert: no client certificate of tls.ca; unauthenticated: no, malformed or unknown token; forbidden: a token below admin)", "reason"},
    {M(cert_expiry), SMP_METRIC_GAUGE, "store_tls_certificate_expiry_timestamp_seconds", "The notAfter, in Unix seconds, of a certificate this master presents (tls: tls.cert, on the RPC port, the admin endpoint and the embedded node's data port; etcd: ha.etcd_tls_cert, to etcd), as loaded at the start or by the last SIGHUP; no series for one not configured", "certificate"},
    {M(rpc_auth_hellos), SMP_METRIC_COUNTER, "store_rpc_auth_hellos_total", "Tokens presented with auth.HELLO, by result (contradicts_certificate: a token of another identity on a connection its client certificate authenticated)", "result"},
    {M(rpc_auth_certs), SMP_METRIC_COUNTER, "store_rpc_auth_certificates_total", "Verified TLS client certificates at the handshake, by result (mapped: an auth.certificates entry authenticated the connection; unmapped: none, or entries of different identities, matched)", "result"},
    {M(read_leases), SMP_METRIC_GAUGE, "store_read_leases", "Unexpired read leases of replica lookups, counted once per connection and object", NULL},
    {M(read_leases_ended), SMP_METRIC_COUNTER, "store_read_leases_ended_total", "Read leases given back before their expiry, by how (released: one lookup's lease, by its reader; connection_closed: every lease of a connection that closed)", "how"},
    {M(read_lease_refusals), SMP_METRIC_COUNTER, "store_read_lease_release_refusals_total", "Keys of release_read_leases requests on which the caller's connection held no read lease (nothing released)", NULL},
    {M(evictions), SMP_METRIC_COUNTER, "store_eviction_rounds_total", "Eviction plans applied under memory pressure", NULL},
    {M(fsck_runs), SMP_METRIC_COUNTER, "store_fsck_background_runs_total", "Background fsck runs (fsck.every_s) ended since this master started", NULL},
    {M(fsck_corrupt), SMP_METRIC_COUNTER, "store_fsck_background_corrupt_total", "Corrupt cold files the background fsck runs found since this master started (their replicas are dropped)", NULL},
    {M(fsck_running), SMP_METRIC_GAUGE, "store_fsck_background_running", "1 while a background fsck runs", NULL},
    {M(cold_reclaimed), SMP_METRIC_COUNTER, "store_cold_files_reclaimed_total", "Cold files of replicas the state no longer has, deleted on their nodes", NULL},
    {M(release_checks), SMP_METRIC_COUNTER, "store_release_cold_checks_total", "Cold files hashed whole on their node before the memory replicas of their object were released, by result (intact: released; corrupt: the file did not hold the object's bytes, its replica was dropped and memory kept; failed: not checked -- node down or from before the check -- and memory kept)", "result"},
    {M(corrupt_reports), SMP_METRIC_COUNTER, "store_corrupt_reports_total", "Reports by readers of memory replicas whose bytes did not match the object's digest, by result (received: well-formed reports of a memory replica the master has, each key checked at most once a while; confirmed: a replica its node hashed and found corrupt, dropped for the owning plugin to repair; refuted: a replica that held its bytes, or was gone or replaced by then, left alone; failed: a replica not hashed -- its node down or the hash failed)", "result"},
    {M(scrub_tasks), SMP_METRIC_COUNTER, "store_scrub_tasks_total", "SCRUB tasks sent to nodes to zero memory ranges the state freed (the ranges freed in one turn of the loop go in one task a node)", NULL},
    {M(scrub_ranges), SMP_METRIC_COUNTER, "store_scrub_ranges_total", "Freed memory ranges sent to their nodes in SCRUB tasks", NULL},
    {M(node_wait_calls), SMP_METRIC_COUNTER, "store_node_wait_calls_total", "Requests held, after the master began serving, until a node they needed registered (or the wait for it ended) instead of being refused: replica lookups, put starts, and plugin calls that asked (weight_is_exist)", NULL},
    {M(node_wait_now), SMP_METRIC_GAUGE, "store_node_wait_calls", "Of them, held at this moment", NULL},
    {M(ha_is_leader), SMP_METRIC_GAUGE, "ha_is_leader", "1 while this master leads (always 1 without HA)", NULL},
    {M(ha_ready), SMP_METRIC_GAUGE, "ha_standby_ready", "0 when this master cannot replay the OpLog (out of the election)", NULL},
    {M(ha_replay_stopped), SMP_METRIC_COUNTER, "ha_replay_stopped_total", "Times following the OpLog stopped on a record this master cannot apply", NULL},
    {M(ha_applied_seq), SMP_METRIC_GAUGE, "ha_applied_seq", "Last OpLog record applied here", NULL},
    {M(ha_lag), SMP_METRIC_GAUGE, "ha_replay_lag_records", "Records between the durable head of the OpLog and the last one applied here", NULL},
    {M(rpc_not_leader), SMP_METRIC_COUNTER, "rpc_not_leader_total", "Requests a standby answered with the leader's endpoint", NULL},
    {M(rpc_not_leader_held), SMP_METRIC_COUNTER, "rpc_not_leader_held_total", "Requests a standby held while no leader was known, to answer them with its endpoint once one was", NULL},
    {M(loop_lag), SMP_METRIC_GAUGE, "host_loop_lag_seconds", "Largest delay of the housekeeping timer behind its schedule over the last 10 to 20 s", NULL},
    {M(plugin_timing.tick_overruns), SMP_METRIC_COUNTER, "host_plugin_tick_overrun_total", "Reconcile ticks that returned after their deadline, by plugin", "plugin"},
    {M(plugin_timing.guard_overruns), SMP_METRIC_COUNTER, "host_plugin_guard_overrun_total", "Object guard calls that took longer than 1 ms, by plugin", "plugin"},
};

/* Histograms of plugin callback durations, in seconds. A tick's budget is
 * MASTER_TIMER_MS (50 ms) at most; a guard's is HOST_GUARD_BUDGET_NS (1 ms). */
typedef struct histogram_def {
    size_t offset;
    const char *name;
    const char *help;
    const double *bounds;
    size_t n_bounds;
} histogram_def;

static const double tick_bounds[] = {0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                     0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};
static const double guard_bounds[] = {0.000001, 0.000005, 0.00001, 0.000025, 0.00005, 0.0001,
                                      0.00025, 0.0005, 0.001, 0.0025, 0.01, 0.1};
static const histogram_def histogram_defs[] = {
    {M(plugin_timing.tick_seconds), "host_plugin_tick_seconds", "Duration of plugin reconcile ticks, by plugin",
     tick_bounds, sizeof(tick_bounds) / sizeof(tick_bounds[0])},
    {M(plugin_timing.guard_seconds), "host_plugin_guard_seconds", "Duration of plugin object guard calls, by plugin",
     guard_bounds, sizeof(guard_bounds) / sizeof(guard_bounds[0])},
};
static const char *const plugin_label[] = {"plugin", NULL};

int master_metrics_register(master *m)
{
    for (size_t i = 0; i < sizeof(metric_defs) / sizeof(metric_defs[0]); i++) {
        const metric_def *d = &metric_defs[i];
        const char *labels[2] = {d->label, NULL};
        host_metric **slot = (host_metric **)((char *)m + d->offset);
        int rc = host_metrics_register(m->metrics, d->kind, d->name, d->help,
                                       d->label ? labels : NULL, slot);
        if (rc < 0) return rc;
    }
    static const char *const refused_labels[] = {"reason", "tenant", NULL};
    int rc = host_metrics_register(m->metrics, SMP_METRIC_COUNTER, "store_rpc_refused_total",
                                   "Requests refused by a limit of auth.limits, by reason (rate: "
                                   "request rate; inflight: in-flight request bytes; revisions: "
                                   "live revisions of the tenant) and tenant (\"\": a connection "
                                   "that has not authenticated)", refused_labels,
                                   &m->m.rpc_refused);
    if (rc < 0) return rc;
    if ((rc = master_cold_usage_register(m)) < 0) return rc;
    for (size_t i = 0; i < sizeof(histogram_defs) / sizeof(histogram_defs[0]); i++) {
        const histogram_def *d = &histogram_defs[i];
        host_metric **slot = (host_metric **)((char *)m + d->offset);
        int rc = host_metrics_register_histogram(m->metrics, d->name, d->help, plugin_label,
                                                 d->bounds, d->n_bounds, slot);
        if (rc < 0) return rc;
    }
    return SMP_OK;
}

/* store_rpc_refused_total of one tenant (rpc_server_limits_each). */
static void refused_series(void *arg, const char *tenant, const uint64_t *refused)
{
    for (int r = 0; r < RPC_REFUSED_KINDS; r++) {
        const char *l[2] = {rpc_refusal_name((rpc_refusal)r), tenant};
        host_metric_set(arg, l, (double)refused[r]);
    }
}

void master_metrics_refresh(master *m)
{
    obj_stats os;
    oplog_stats ls;
    rpc_server_stats rs;
    obj_store_stats(master_objs(m), &os);
    for (int t = 0; t < 3; t++) {
        const char *l[1] = {data_type_names[t]};
        host_metric_set(m->m.objects, l, (double)os.objects_by_type[t]);
        host_metric_set(m->m.object_bytes, l, (double)os.bytes_by_type[t]);
    }
    for (int k = 0; k < 2; k++) {
        const char *l[1] = {replica_kind_names[k]};
        host_metric_set(m->m.replicas, l, (double)os.replicas_by_kind[k]);
        host_metric_set(m->m.replica_bytes, l, (double)os.replica_bytes_by_kind[k]);
    }
    if (m->read_leases != NULL) {
        rlease_stats rl;
        const char *const rel[] = {"released"}, *const closed[] = {"connection_closed"};
        rlease_get_stats(m->read_leases, &rl);
        host_metric_set(m->m.read_leases, NULL, (double)rlease_count(m->read_leases, master_now_ms()));
        host_metric_set(m->m.read_leases_ended, rel, (double)rl.released);
        host_metric_set(m->m.read_leases_ended, closed, (double)rl.closed);
        host_metric_set(m->m.read_lease_refusals, NULL, (double)rl.refused);
    }
    static const char *const check_results[MASTER_RELEASE_CHECK_RESULTS] = {"intact", "corrupt", "failed"};
    for (int r = 0; r < MASTER_RELEASE_CHECK_RESULTS; r++) {
        const char *l[1] = {check_results[r]};
        host_metric_set(m->m.release_checks, l, (double)m->release_checks[r]);
    }
    static const char *const report_results[MASTER_REPORT_RESULTS] = {"received", "confirmed",
                                                                      "refuted", "failed"};
    uint64_t reported[MASTER_REPORT_RESULTS];
    master_reports_counts(m, reported);
    for (int r = 0; r < MASTER_REPORT_RESULTS; r++) {
        const char *l[1] = {report_results[r]};
        host_metric_set(m->m.corrupt_reports, l, (double)reported[r]);
    }
    host_metric_set(m->m.memory_used, NULL, (double)os.memory_used);
    host_metric_set(m->m.memory_capacity, NULL, (double)os.memory_capacity);
    host_metric_set(m->m.puts_in_flight, NULL, (double)os.puts_in_flight);
    host_metric_set(m->m.zone_bytes_held, NULL, (double)os.zone_bytes_held);
    const char *taken[1] = {"taken"}, *not_taken[1] = {"not_taken"};
    host_metric_set(m->m.puts_taken_over, taken, (double)os.puts_taken_over);
    host_metric_set(m->m.puts_taken_over, not_taken, (double)os.puts_not_taken_over);
    for (int r = 1; r <= SMP_GUARD_REASON_MAX; r++) {
        const char *l[1] = {host_guard_reason_name((smp_guard_reason)r)};
        host_metric_set(m->m.host_refusals, l, (double)os.host_refusals[r]);
    }
    if (m->log) {
        oplog_stats_get(m->log, &ls);
        host_metric_set(m->m.oplog_appends, NULL, (double)ls.appends);
        host_metric_set(m->m.oplog_fsyncs, NULL, (double)ls.syncs);
        host_metric_set(m->m.oplog_batches, NULL, (double)ls.batches);
        host_metric_set(m->m.oplog_max_batch, NULL, (double)ls.max_batch);
        host_metric_set(m->m.oplog_bytes, NULL, (double)ls.bytes);
        host_metric_set(m->m.oplog_durable_seconds_sum, NULL, (double)ls.durable_lat_ns_sum / 1e9);
        host_metric_set(m->m.oplog_durable_count, NULL, (double)ls.durable_count);
        host_metric_set(m->m.oplog_failed, NULL, (double)ls.failed);
    }
    host_metric_set(m->m.snapshot_age, NULL,
                    m->snapshot_wall_ms ? (double)(master_wall_ms() - m->snapshot_wall_ms) / 1e3 : -1.0);
    host_metric_set(m->m.snapshot_seq, NULL, (double)m->snapshot_seq);
    host_metric_set(m->m.fsck_runs, NULL, (double)master_fsck_schedule_runs(m));
    host_metric_set(m->m.fsck_corrupt, NULL, (double)master_fsck_schedule_corrupt(m));
    host_metric_set(m->m.fsck_running, NULL, m->fsck_background != NULL ? 1.0 : 0.0);
    host_metric_set(m->m.snapshot_capture, NULL, m->snapshot_capture_s);
    host_metric_set(m->m.snapshot_encode, NULL, m->snapshot_encode_s);
    host_metric_set(m->m.snapshot_write, NULL, m->snapshot_write_s);
    host_metric_set(m->m.snapshot_bytes, NULL, (double)m->snapshot_bytes);
    host_metric_set(m->m.node_wait_now, NULL, (double)master_node_wait_count(m));
    master_cold_usage_refresh(m);
    if (m->rpc) {
        rpc_server_get_stats(m->rpc, &rs);
        host_metric_set(m->m.rpc_requests, NULL, (double)rs.requests);
        host_metric_set(m->m.rpc_errors, NULL, (double)rs.responses_error);
        host_metric_set(m->m.rpc_connections, NULL, (double)rs.connections_open);
        host_metric_set(m->m.rpc_not_leader, NULL, (double)rs.not_leader);
        host_metric_set(m->m.rpc_not_leader_held, NULL, (double)rs.not_leader_held);
        const char *const unauth[] = {"unauthenticated"}, *const forbid[] = {"forbidden"},
                          *const norule[] = {"no_rule"}, *const ok[] = {"accepted"},
                          *const bad[] = {"refused"};
        host_metric_set(m->m.rpc_auth_refusals, unauth, (double)rs.auth_unauthenticated);
        host_metric_set(m->m.rpc_auth_refusals, forbid, (double)rs.auth_forbidden);
        host_metric_set(m->m.rpc_auth_refusals, norule, (double)rs.auth_no_rule);
        host_metric_set(m->m.rpc_auth_hellos, ok, (double)rs.auth_hello_ok);
        host_metric_set(m->m.rpc_auth_hellos, bad, (double)rs.auth_hello_refused);
        const char *const mism[] = {"contradicts_certificate"}, *const mapped[] = {"mapped"},
                          *const unmapped[] = {"unmapped"};
        host_metric_set(m->m.rpc_auth_hellos, mism, (double)rs.auth_hello_mismatch);
        host_metric_set(m->m.rpc_auth_certs, mapped, (double)rs.auth_cert_ok);
        host_metric_set(m->m.rpc_auth_certs, unmapped, (double)rs.auth_cert_unmapped);
        rpc_server_limits_each(m->rpc, refused_series, m->m.rpc_refused);
    }
    const char *const tls_cert[] = {"tls"}, *const etcd_cert[] = {"etcd"};
    if (m->tls_not_after > 0) host_metric_set(m->m.cert_expiry, tls_cert, (double)m->tls_not_after);
    if (m->etcd_cert_not_after > 0)
        host_metric_set(m->m.cert_expiry, etcd_cert, (double)m->etcd_cert_not_after);
    if (m->admin) {
        uint64_t refused[ADMIN_REFUSAL_KINDS];
        admin_http_refusals(m->admin, refused);
        for (int k = 0; k < ADMIN_REFUSAL_KINDS; k++) {
            const char *l[1] = {admin_refusal_name((admin_refusal)k)};
            host_metric_set(m->m.admin_refusals, l, (double)refused[k]);
        }
    }
    uint64_t head = master_ha_head(m);
    host_metric_set(m->m.ha_is_leader, NULL, master_is_leader(m) ? 1.0 : 0.0);
    host_metric_set(m->m.ha_ready, NULL, !m->cfg->ha_enabled || m->ha_ready ? 1.0 : 0.0);
    host_metric_set(m->m.ha_replay_stopped, NULL, (double)m->ha_replay_stopped);
    host_metric_set(m->m.ha_applied_seq, NULL, (double)m->applied_seq);
    host_metric_set(m->m.ha_lag, NULL, head > m->applied_seq ? (double)(head - m->applied_seq) : 0.0);
    host_metric_set(m->m.loop_lag, NULL, master_loop_lag_s(m));
}

/* -- HTTP ------------------------------------------------------------------- */

static char *text(const char *s, size_t *len)
{
    char *b = strdup(s);
    *len = b ? strlen(b) : 0;
    return b;
}

void master_admin_render(void *ctx, const char *path, int *status, char **body,
                         size_t *len, const char **content_type)
{
    master *m = ctx;
    *content_type = "text/plain; charset=utf-8";
    if (strcmp(path, "/metrics") == 0) {
        master_metrics_refresh(m);
        *content_type = "text/plain; version=0.0.4; charset=utf-8";
        if (host_metrics_render(m->metrics, body, len) < 0) *body = NULL;
        *status = 200;
    } else if (strcmp(path, "/health") == 0) {
        char what[1024] = "ok\n", etcd[700];
        int unready = m->cfg->ha_enabled && !m->ha_ready;
        int no_etcd = master_ha_etcd_unreachable(m, etcd, sizeof(etcd));
        if (m->draining)
            snprintf(what, sizeof(what), "stopping: new calls are refused while the calls it "
                     "took end\n");
        else if (m->log_failed)
            snprintf(what, sizeof(what), "oplog failed: read-only\n");
        else if (no_etcd)
            snprintf(what, sizeof(what), "etcd unreachable: %s\n", etcd);
        else if (unready)
            snprintf(what, sizeof(what), "not ready: cannot replay the OpLog: %s\n", m->ha_reason);
        else if (master_is_leader(m) && master_nodes_waiting(m, master_now_ms()))
            snprintf(what, sizeof(what),
                     "ok; reconcile waits for the nodes holding segments to register\n");
        /* The first line is the verdict; the loop lag follows on its own. */
        size_t used = strlen(what);
        snprintf(what + used, sizeof(what) - used,
                 "loop lag %.1f ms (largest housekeeping timer delay, last 10-20 s)\n",
                 master_loop_lag_s(m) * 1e3);
        *status = m->draining || m->log_failed || unready || no_etcd ? 503 : 200;
        *body = text(what, len);
    } else if (strcmp(path, "/role") == 0) {
        char what[700];
        if (m->cfg->ha_enabled && !m->ha_ready)
            snprintf(what, sizeof(what), "%s not-ready: %s\n", master_role_name(m), m->ha_reason);
        else
            snprintf(what, sizeof(what), "%s\n", master_role_name(m));
        *status = 200;
        *body = text(what, len);
    } else {
        *status = 404;
        *body = text("not found: try /metrics, /health or /role\n", len);
    }
}

/* -- admin RPC ---------------------------------------------------------------- */

static int h_status(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    (void)body;
    (void)len;
    obj_stats os;
    obj_store_stats(master_objs(m), &os);
    size_t np = host_plugins_count(m->plugins);
    char **names = calloc(np ? np : 1, sizeof(*names));
    if (names == NULL) return SMP_ENOMEM;
    for (size_t i = 0; i < np; i++)
        names[i] = (char *)host_plugin_desc(host_plugins_at(m->plugins, i))->name;
    StatusResponse resp = STATUS_RESPONSE__INIT;
    char failed_why[sizeof(((oplog_stats *)0)->failed_why) + 128];
    resp.role = (char *)master_role_name(m);
    resp.master_id = m->cfg->ha_id;
    resp.applied_seq = m->applied_seq;
    resp.leader = m->ha_leader;
    /* The registry of masters, with each one's lag behind the durable head. */
    ha_member members[32];
    MasterInfo infos[32];
    MasterInfo *ptrs[32];
    uint64_t head = master_ha_head(m);
    size_t nm = master_ha_rows(m, members, 32);
    /* Without etcd the registry is an old picture: no row may read as a
     * healthy master, this one's own included. */
    char etcd[700];
    int no_etcd = master_ha_etcd_unreachable(m, etcd, sizeof(etcd));
    if (no_etcd) resp.etcd_unreachable = etcd;
    for (size_t i = 0; i < nm && no_etcd; i++) {
        int self = strcmp(members[i].id, m->cfg->ha_id) == 0;
        members[i].ready = 0;
        snprintf(members[i].reason, sizeof(members[i].reason), "%s",
                 self ? (master_is_leader(m) ? "cannot reach etcd: its lease is in doubt"
                                             : "cannot reach etcd")
                      : "unknown: etcd unreachable from the master answering; as last read");
        if (self) snprintf(members[i].role, sizeof(members[i].role), "%s", master_role_name(m));
    }
    for (size_t i = 0; i < nm; i++) {
        master_info__init(&infos[i]);
        infos[i].id = members[i].id;
        infos[i].role = members[i].role;
        infos[i].endpoint = members[i].endpoint;
        infos[i].applied_seq = members[i].applied_seq;
        infos[i].lag = head > members[i].applied_seq ? head - members[i].applied_seq : 0;
        infos[i].ready = members[i].ready;
        infos[i].reason = members[i].reason;
        ptrs[i] = &infos[i];
    }
    resp.n_masters = nm;
    resp.masters = ptrs;
    master_gates_view *gv = NULL;
    resp.n_gates = master_gates_view_fill(m, &gv);
    resp.gates = master_gates_view_ptrs(gv);
    resp.objects = os.objects_by_type[0] + os.objects_by_type[1] + os.objects_by_type[2];
    resp.memory_used = os.memory_used;
    resp.memory_capacity = os.memory_capacity;
    resp.nodes = (uint32_t)master_nodes_up(m);
    resp.segments = resp.nodes; /* a node contributes exactly one segment */
    resp.oplog_last_seq = m->applied_seq;
    resp.snapshot_seq = m->snapshot_seq;
    if (m->log) {
        oplog_stats ls;
        oplog_stats_get(m->log, &ls);
        resp.oplog_appends = ls.appends;
        resp.oplog_fsyncs = ls.syncs;
        if (m->log_failed) {
            resp.oplog_read_only = 1;
            resp.oplog_failed_seq = ls.failed_seq;
            snprintf(failed_why, sizeof(failed_why), "%s",
                     ls.failed_why[0] ? ls.failed_why
                                      : "a record did not apply or could not be made durable (the "
                                        "master's log says which)");
            resp.oplog_failed_why = failed_why;
        }
    }
    resp.n_plugins = np;
    resp.plugins = names;
    /* every node with its cold tier (a standby knows none: they register
       with the leader) */
    master_node_status_view *nv = NULL;
    resp.n_node_status = master_node_status_fill(m, &nv);
    resp.node_status = master_node_status_ptrs(nv);
    master_reply_msg(call, &resp.base);
    free(names);
    free(gv);
    master_node_status_free(nv);
    return SMP_OK;
}

static void on_snapshot(master *m, void *arg, int status, uint64_t seq, const char *path)
{
    smp_rpc_call *call = arg;
    if (status < 0) {
        rpc_reply_error(call, status, m->snapshot_why[0] ? m->snapshot_why : "snapshot failed");
        return;
    }
    SnapshotResponse resp = SNAPSHOT_RESPONSE__INIT;
    resp.seq = seq;
    resp.path = (char *)(path ? path : "");
    master_reply_msg(call, &resp.base);
}

static int h_snapshot(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    (void)body;
    (void)len;
    return master_snapshot_take(ctx, on_snapshot, call);
}

static const smp_rpc_method admin_methods[] = {
    {sizeof(smp_rpc_method), ADMIN_METHOD__ADMIN_STATUS, "status", h_status, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), ADMIN_METHOD__ADMIN_SNAPSHOT, "snapshot", h_snapshot, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), ADMIN_METHOD__ADMIN_GATE_CONFIRM, "gate_confirm",
     master_gates_h_confirm, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), ADMIN_METHOD__ADMIN_PLUGIN_LIST, "plugin_list", master_plugins_h_list, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), ADMIN_METHOD__ADMIN_PLUGIN_RELOAD, "plugin_reload",
     master_plugins_h_reload, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), ADMIN_METHOD__ADMIN_PLUGIN_DISABLE, "plugin_disable",
     master_plugins_h_disable, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), ADMIN_METHOD__ADMIN_PLUGIN_ENABLE, "plugin_enable",
     master_plugins_h_enable, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), ADMIN_METHOD__ADMIN_FSCK, "fsck", master_fsck_h, SMP_ROLE_ADMIN},
};

int master_admin_register(master *m)
{
    return rpc_server_add_service(m->rpc, HOST_SERVICE__HOST_SERVICE_ADMIN, "admin", admin_methods,
                                  sizeof(admin_methods) / sizeof(admin_methods[0]), m);
}
