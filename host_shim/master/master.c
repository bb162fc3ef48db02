/* master.c -- one Store Master process from start to clean exit.
 *
 * Startup order matters and is fail-closed: the files the config names are
 * read first (TLS, the embedded node's token: host_config_load_files, the
 * check --check runs too), plugins load next (their OpLog
 * types and sections must be known before recovery), then the OpLog opens
 * (a torn tail is cut, corruption refuses), recovery rebuilds the state, and
 * only then do the RPC and admin endpoints accept anyone -- the embedded
 * node among them, which registers its segment like any other node. The
 * housekeeping timer runs the plugins' reconcile ticks (once every node
 * holding a segment has registered again, or node.timeout_ms has passed:
 * master_nodes_settled), cleans up stale puts, evicts under memory pressure
 * and takes snapshots every snapshot.every_records records; each round first
 * measures how late it started (the loop lag /health and /metrics report),
 * and every tick is timed against its deadline by the plugin host. SIGINT or SIGTERM
 * stops accepting (an HA leader first lets the calls it took end and then
 * resigns: master_drain.c), flushes the OpLog and unloads the plugins; SIGHUP reloads
 * every plugin in place (master_plugins.c). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "master.h"
#include "host_records.pb-c.h"
#include "master_internal.h"
#include "node_runtime.h"
#include "net_addr.h"
#include "rpc_auth.h"

static int master_auth_start(master *m, char *err, size_t errlen);

/* Create the directories of path that are missing, mode 0755: all of them,
 * or (parents_only) all but the last, which its owner creates with the mode
 * it needs. SMP_OK, SMP_EINVAL (empty or too long) or SMP_EIO (errno set). */
static int mkdir_path(const char *path, int parents_only)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(buf)) return SMP_EINVAL;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST) return SMP_EIO;
        *p = '/';
    }
    if (!parents_only && mkdir(buf, 0755) < 0 && errno != EEXIST) return SMP_EIO;
    return SMP_OK;
}

static int mkdir_p(const char *path) { return mkdir_path(path, 0); }

/* Take <data_dir>/LOCK with an exclusive non-blocking flock and write our
 * pid into it, so that a second master started on the same data_dir stops at
 * once instead of interleaving its records with ours (the next start would
 * refuse the log). The lock goes with the process, even on SIGKILL. Returns
 * 0 with m->data_lock_fd set, SMP_EBUSY naming the holder's pid, or SMP_EIO. */
static int lock_data_dir(master *m, char *err, size_t errlen)
{
    char path[4200], held[32] = "";
    snprintf(path, sizeof(path), "%s/LOCK", m->cfg->data_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "data_dir %s: cannot open LOCK: %s", m->cfg->data_dir,
                 strerror(errno));
        return SMP_EIO;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        ssize_t n = pread(fd, held, sizeof(held) - 1, 0);
        held[n > 0 ? n : 0] = '\0';
        held[strcspn(held, "\n")] = '\0';
        close(fd);
        if (e != EWOULDBLOCK) {
            snprintf(err, errlen, "data_dir %s: cannot lock: %s", m->cfg->data_dir, strerror(e));
            return SMP_EIO;
        }
        snprintf(err, errlen,
                 "data_dir %s is in use by another store_master (pid %s); two masters on "
                 "one data_dir would interleave their OpLogs",
                 m->cfg->data_dir, held[0] ? held : "unknown");
        return SMP_EBUSY;
    }
    int w = snprintf(held, sizeof(held), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, held, (size_t)w, 0) != w) {
        snprintf(err, errlen, "data_dir %s: cannot write LOCK: %s", m->cfg->data_dir,
                 strerror(errno));
        close(fd);
        return SMP_EIO;
    }
    m->data_lock_fd = fd;
    return SMP_OK;
}

/* -- guard wiring: the object store asks the plugins' guards --------------- */

static int guard_check(void *ctx, const char *owner, const smp_guard_request *req, int *asked)
{
    master *m = ctx;
    return host_plugins_guard_check_owner(m->plugins, owner, req, asked);
}

static int guard_active(void *ctx, const char *owner)
{
    master *m = ctx;
    return host_plugins_is_active(m->plugins, owner);
}

/* -- housekeeping ------------------------------------------------------------- */

/* Run the plugins' ticks that are due (their period ended, they asked for
 * more, or tick_soon asked for them). */
static void run_ticks(master *m, uint64_t now)
{
    if (!m->serving || !master_nodes_settled(m, now)) return;
    const host_cluster_defaults *c = &m->cfg->cluster;
    for (size_t i = 0; i < host_plugins_n_ticks(m->plugins); i++) {
        host_tick_reg *t = host_plugins_tick_at(m->plugins, i);
        if (now < t->next_due_ms && !t->soon) continue;
        t->soon = 0;
        smp_tick_budget b = {sizeof(b), c->weight_migration_max_members_per_round,
                             c->weight_migration_max_bytes_per_round, now + MASTER_TIMER_MS};
        /* Timed: overruns of the deadline are counted and logged there. */
        int rc = host_plugins_run_tick(m->plugins, t, &b);
        if (rc != SMP_TICK_MORE) {
            if (rc < 0)
                fprintf(stderr, "store_master: tick of %s failed: %s\n",
                        host_plugin_desc(t->owner)->name, smp_strerror(rc));
            t->cursor = 0;
        }
        /* More work, or tick_soon from inside the tick: the next timer round. */
        t->next_due_ms = rc == SMP_TICK_MORE || t->soon ? now : now + t->t.period_ms;
        t->soon = 0;
    }
}

static void on_tick_soon(uv_timer_t *h)
{
    master *m = h->data;
    if (master_is_leader(m)) run_ticks(m, master_now_ms());
}

/* host_backend.tick_soon: a plugin asked for its tick at once (ABI 1.10).
 * A zero timer runs it in this loop iteration's timer phase or the next,
 * after the callbacks being run now; requests until then are one. */
static void be_tick_soon(void *ctx)
{
    master *m = ctx;
    if (m->stopping || uv_is_active((uv_handle_t *)&m->tick_soon)) return;
    uv_timer_start(&m->tick_soon, on_tick_soon, 0, 0);
}

typedef struct evict_ctx {
    size_t outstanding;
} evict_ctx;

static void on_evicted(master *m, void *arg, int status, uint64_t seq)
{
    evict_ctx *c = arg;
    (void)status;
    (void)seq;
    if (--c->outstanding > 0) return;
    m->evicting = 0;
    free(c);
}

#define EVICT_NAMED 8 /* removed objects an eviction's log line names */

/* An eviction removes data (an object with no cold copy goes whole): never
 * silently. Log what the plan recs does -- the objects it removes (the
 * first EVICT_NAMED named), and those that keep only their cold copy --
 * before it is committed. */
static void log_eviction(const master *m, const obj_record_list *recs, uint64_t used, uint64_t cap,
                         uint64_t planned)
{
    char named[EVICT_NAMED * 140 + 32] = "";
    size_t removed = 0, to_cold = 0, len = 0;
    for (size_t i = 0; i < recs->n; i++) {
        const obj_record *r = &recs->recs[i];
        if (r->type != OBJ_REC_REMOVE) {
            to_cold++; /* its memory replicas dropped, its cold one kept */
            continue;
        }
        Hostrec__RemoveRecord *rm = hostrec__remove_record__unpack(NULL, r->len, r->buf);
        for (size_t k = 0; rm != NULL && k < rm->n_keys; k++, removed++)
            if (removed < EVICT_NAMED && len < sizeof(named))
                len += (size_t)snprintf(named + len, sizeof(named) - len, "%s%.128s",
                                        removed ? ", " : "", rm->keys[k]);
        if (rm != NULL) hostrec__remove_record__free_unpacked(rm, NULL);
    }
    if (removed > EVICT_NAMED && len < sizeof(named))
        snprintf(named + len, sizeof(named) - len, " and %zu more", removed - EVICT_NAMED);
    fprintf(stderr, "store_master: memory: %llu of %llu bytes in use, above memory.high_watermark "
            "%.2f: evicting %llu bytes, least recently used first: %zu objects removed (they had "
            "no cold copy)%s%s, %zu keep only their cold copy\n", (unsigned long long)used,
            (unsigned long long)cap, m->cfg->memory_high_watermark, (unsigned long long)planned,
            removed, removed ? ": " : "", named, to_cold);
}

/* Above the high watermark: tell the plugins, and plan and commit an
 * eviction that brings use down to the low watermark. */
static void relieve_pressure(master *m)
{
    uint64_t used = 0, cap = 0;
    obj_memory_usage(master_objs(m), &used, &cap);
    int above = cap > 0 && (double)used > m->cfg->memory_high_watermark * (double)cap;
    if (above && !m->pressure) {
        smp_event ev = {.struct_size = sizeof(ev), .type = SMP_EVENT_MEMORY_PRESSURE,
                        .used = used, .capacity = cap};
        master_emit(m, &ev);
    }
    if (!above) m->pressure_told = 0;
    if (!above && !m->pressure) return;
    m->pressure = 0;
    if (m->evicting || m->log_failed) return;
    obj_record_list recs = {0};
    uint64_t planned = 0;
    int rc = obj_plan_eviction(master_objs(m), m->cfg->memory_high_watermark,
                               m->cfg->memory_low_watermark, master_now_ms(), &recs, &planned);
    if (rc < 0 || recs.n == 0) {
        obj_record_list_free(&recs);
        if (rc == SMP_OK && above && !m->pressure_told) {
            /* once, until use is back under the watermark */
            m->pressure_told = 1;
            fprintf(stderr, "store_master: memory: %llu of %llu bytes in use, above "
                    "memory.high_watermark %.2f, and nothing may be evicted (pinned, leased, "
                    "kept by a plugin%s): puts that do not fit fail with SMP_ENOSPC\n",
                    (unsigned long long)used, (unsigned long long)cap,
                    m->cfg->memory_high_watermark,
                    m->cfg->memory_evict_without_cold_copy
                        ? ""
                        : ", or without a cold copy (memory.evict_without_cold_copy: false)");
        }
        m->pressure = above;
        return;
    }
    evict_ctx *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        obj_record_list_free(&recs);
        return;
    }
    log_eviction(m, &recs, used, cap, planned);
    m->evicting = 1;
    c->outstanding = 1;
    for (size_t i = 0; i < recs.n; i++) {
        c->outstanding++;
        if (master_commit(m, &recs.recs[i], NULL, on_evicted, c) < 0) c->outstanding--;
    }
    host_metric_add(m->m.evictions, NULL, 1);
    obj_record_list_free(&recs);
    on_evicted(m, c, SMP_OK, 0);
}

/* Measure how late this round of the housekeeping timer started (see
 * master_internal.h: timer_due_ms), keep the largest per window, and note
 * when the next round is due. Runs on leaders and standbys alike. */
static void measure_loop_lag(master *m)
{
    uint64_t loop_now = uv_now(&m->loop);
    if (m->timer_due_ms != 0) {
        /* In whole microseconds: the clocks agree to a millisecond at best. */
        int64_t lag_us = (int64_t)(uv_hrtime() / 1000u) - (int64_t)m->timer_due_ms * 1000;
        double lag = lag_us > 0 ? (double)lag_us / 1e6 : 0; /* seconds */
        if (loop_now - m->loop_lag_window_ms >= MASTER_LOOP_LAG_WINDOW_MS) {
            m->loop_lag_prev_s = m->loop_lag_s;
            m->loop_lag_s = 0;
            m->loop_lag_window_ms = loop_now;
        }
        if (lag > m->loop_lag_s) m->loop_lag_s = lag;
    } else {
        m->loop_lag_window_ms = loop_now;
    }
    m->timer_due_ms = loop_now + MASTER_TIMER_MS;
}

double master_loop_lag_s(const master *m)
{
    return m->loop_lag_s > m->loop_lag_prev_s ? m->loop_lag_s : m->loop_lag_prev_s;
}

static void on_timer(uv_timer_t *h)
{
    master *m = h->data;
    measure_loop_lag(m);
    uint64_t now = master_now_ms();
    if (m->cfg->ha_enabled) master_ha_tick(m);
    if (!master_is_leader(m)) return; /* a standby only follows the log */
    master_zones_gate(m);
    master_nodes_tick(m, now);
    master_fsck_schedule_tick(m, now);
    master_node_wait_tick(m, now);
    run_ticks(m, now);
    if (now - m->last_cleanup_ms >= 1000) {
        obj_cleanup_stale_puts(master_objs(m), now, m->cfg->node_put_timeout_ms);
        m->last_cleanup_ms = now;
    }
    relieve_pressure(m);
    uint64_t every = m->cfg->snapshot_every_records;
    /* After a failed snapshot (logged) the next automatic one waits
     * MASTER_SNAPSHOT_RETRY_MS rather than forking again every round. */
    if (every > 0 && !m->snapshot_running && !m->log_failed &&
        m->applied_seq - m->snapshot_seq >= every &&
        (m->snapshot_failed_ms == 0 || now - m->snapshot_failed_ms >= MASTER_SNAPSHOT_RETRY_MS))
        master_snapshot_take(m, NULL, NULL);
}

/* The loop's I/O clock (master_internal.h): prepare runs right before the
 * loop waits for its sockets, check right after the callbacks of what it
 * read. */
static void on_io_prepare(uv_prepare_t *h)
{
    master *m = h->data;
    m->io_looking_ms = master_now_ms();
    master_scrub_flush(m); /* freed after the last check (close callbacks) */
}

static void on_io_check(uv_check_t *h)
{
    master *m = h->data;
    m->io_heard_ms = m->io_looking_ms;
    master_node_wait_check(m); /* calls waiting for a node that registered */
    master_scrub_flush(m); /* what this turn freed, one task a node */
}

/* -- startup and shutdown ------------------------------------------------------ */

void master_stop(master *m)
{
    if (m->stopping) return;
    m->stopping = 1;
    m->serving = 0;
    master_drain_close(m);
    master_ha_stop(m);
    node_runtime_signal_stop(m->embedded_node);
    uv_timer_stop(&m->timer);
    uv_close((uv_handle_t *)&m->timer, NULL);
    uv_timer_stop(&m->tick_soon);
    uv_close((uv_handle_t *)&m->tick_soon, NULL);
    uv_prepare_stop(&m->io_prepare);
    uv_check_stop(&m->io_check);
    uv_close((uv_handle_t *)&m->io_prepare, NULL);
    uv_close((uv_handle_t *)&m->io_check, NULL);
    uv_close((uv_handle_t *)&m->sig_int, NULL);
    uv_close((uv_handle_t *)&m->sig_term, NULL);
    uv_close((uv_handle_t *)&m->sig_hup, NULL);
    master_plugins_close(m);
    admin_http_stop(m->admin);
    m->admin = NULL;
    if (m->rpc) rpc_server_set_close_hook(m->rpc, NULL, NULL); /* leases go with the master */
    rpc_server_close(m->rpc);
    m->rpc = NULL;
}

/* SIGHUP is what operators send to make a daemon reload: the TLS
 * certificate is read again (master_tls_reload.c), every plugin is
 * reloaded in place from its configured path (master_plugins.c); a refusal
 * leaves the old one serving. The embedded node rotates its ticket key
 * (node_runtime.h; refused, and logged, while the previous key may still
 * sign live tickets). A hangup never takes the master down. */
static void on_hangup(uv_signal_t *h, int signum)
{
    master *m = h->data;
    char err[256];
    (void)signum;
    if (m->embedded_node != NULL &&
        node_runtime_rotate_ticket_key(m->embedded_node, err, sizeof(err)) < 0)
        fprintf(stderr, "store_master: SIGHUP: ticket key not rotated: %s\n", err);
    master_reload_tls(m);
    master_plugins_on_hangup(m);
}

static void on_signal(uv_signal_t *h, int signum)
{
    master *m = h->data;
    fprintf(stderr, "store_master: signal %d, shutting down\n", signum);
    master_stop_gracefully(m);
}

/* Start the node that lives in this process: it registers with this master
 * over its own RPC endpoint, like any other node. */
static int start_embedded_node(master *m, char *err, size_t errlen)
{
    if (!m->cfg->node_embedded) return SMP_OK;
    /* Only their parents: the node creates the directories themselves 0700
     * (seg_open, cold_open), as a store_node does, the segment file 0600
     * in a directory no other user may list. */
    if (mkdir_path(m->cfg->node_cold_dir, 1) < 0 || mkdir_path(m->cfg->node_segment_dir, 1) < 0) {
        snprintf(err, errlen, "node: cannot create the parent directories of %s or %s: %s",
                 m->cfg->node_cold_dir, m->cfg->node_segment_dir, strerror(errno));
        return SMP_EIO;
    }
    /* The node dials the port really bound: listen.tcp may ask for any (0). */
    char tcp[300];
    host_config_node_dial(m->cfg, rpc_server_tcp_port(m->rpc), tcp, sizeof(tcp));
    node_runtime_options o = {
        .token = m->files.node_token[0] ? m->files.node_token : NULL,
        .master = m->cfg->listen_unix[0] ? m->cfg->listen_unix : tcp,
        .node_id = m->cfg->node_id,
        .segment_dir = m->cfg->node_segment_dir,
        .segment_bytes = m->cfg->node_segment_bytes,
        .cold_dir = m->cfg->node_cold_dir,
        .data_listen = m->cfg->node_data_listen,
        .cold_verify_from_device = m->cfg->node_cold_verify_from_device,
        .segment_prefault = m->cfg->node_segment_prefault,
        .allow_unticketed_reads = !m->cfg->node_require_read_tickets,
    };
    /* node.tenant dedicates it as store_node --tenant does (config_node.c
     * checked that the socket and peers come with it). */
    if (m->cfg->node_tenant != NULL && m->cfg->node_tenant[0] != '\0') {
        o.tenant = m->cfg->node_tenant;
        o.local_socket = m->cfg->node_local_socket;
        o.local_peers = &m->cfg->node_local_peers;
    }
    /* Over TCP to a TLS port the node trusts the configured CA (or the
     * master's own certificate, which host_config_load_files found
     * self-signed) and, when clients are verified, presents the master's
     * certificate: it is the same process. */
    if (m->cfg->tls_cert[0] != '\0' && m->cfg->listen_unix[0] == '\0') {
        o.tls_ca = m->cfg->tls_ca[0] ? m->cfg->tls_ca : m->cfg->tls_cert;
        if (m->cfg->tls_verify_clients) {
            o.tls_cert = m->cfg->tls_cert;
            o.tls_key = m->cfg->tls_key;
        }
    }
    /* With tls.cert the embedded node's data port speaks TLS with the same
     * certificate: remote readers are held to the control port's standard. */
    if (m->cfg->tls_cert[0] != '\0') {
        o.data_tls_cert = m->cfg->tls_cert;
        o.data_tls_key = m->cfg->tls_key;
        o.data_tls_key_prefix = "tls.";
    }
    return node_runtime_start(&o, &m->embedded_node, err, errlen);
}

/* The admin endpoint, when listen.admin is set: HTTPS with tls.cert and
 * tls.key (client certificates verified as tls.verify_clients says), and,
 * with auth on and a non-loopback address, an admin token (or a client
 * certificate auth.certificates maps to an admin) asked for every path but /health (config_auth.c refused that without TLS unless
 * auth.allow_insecure). One log line says which. */
static int start_admin(master *m, char *err, size_t errlen)
{
    const host_config *cfg = m->cfg;
    int token = cfg->auth_enabled && !net_listen_is_loopback(cfg->listen_admin);
    admin_http_options o = {
        .addr = cfg->listen_admin,
        .tls_cert = cfg->tls_cert,
        .tls_key = cfg->tls_key,
        .tls_ca = cfg->tls_ca,
        .verify_clients = cfg->tls_verify_clients,
        .auth = token ? m->auth : NULL,
    };
    int rc;
    if (cfg->listen_admin[0] == '\0') return SMP_OK;
    if ((rc = admin_http_start(&m->loop, &o, master_admin_render, m, &m->admin, err, errlen)) < 0)
        return rc;
    fprintf(stderr, "store_master: admin endpoint: %s%s; %s\n",
            cfg->tls_cert[0] ? "HTTPS (TLS 1.3, tls.cert)" : "plain HTTP",
            cfg->tls_verify_clients ? ", client certificates of tls.ca" : "",
            token ? "an admin token is asked for every path but /health (or an admin client "
                    "certificate of auth.certificates)"
                  : "no token asked (auth off, or a loopback address)");
    return SMP_OK;
}

void master_take_over_zones(master *m)
{
    obj_stats os;
    if (obj_zones_take_over(master_objs(m), master_now_ms()) < 0) return; /* next sweep */
    obj_store_stats(master_objs(m), &os);
    if (os.zone_bytes_held > 0)
        fprintf(stderr, "store_master: %" PRIu64 " free bytes of the write zones of the master "
                "before held back for %u ms (node.put_timeout_ms): its writers of puts under "
                "1 MiB may still copy there\n", os.zone_bytes_held, m->cfg->node_put_timeout_ms);
}

/* Recovery is done: accept clients (and the embedded node). */
static int start_serving(master *m, char *err, size_t errlen)
{
    int rc;
    /* HA: a standby turns requests away from the first one on. */
    if (m->cfg->ha_enabled && (rc = master_ha_start(m, err, errlen)) < 0) return rc;
    /* Alone, it leads from here: before the first node's registration
     * sweeps the free bytes, the write zones of its last run are held. */
    if (!m->cfg->ha_enabled) master_take_over_zones(m);
    if ((rc = rpc_server_start(m->rpc, err, errlen)) < 0) return rc;
    if ((rc = start_admin(m, err, errlen)) < 0) return rc;
    m->serving_since_ms = master_now_ms();
    if ((rc = start_embedded_node(m, err, errlen)) < 0) return rc;
    m->serving = 1;
    if (!m->cfg->ha_enabled) {
        /* An HA master is a standby until elected; master_ha.c tells the
         * plugins then. */
        smp_event ev = {.struct_size = sizeof(ev), .type = SMP_EVENT_ROLE_CHANGE, .is_leader = 1};
        master_emit(m, &ev);
    }
    fprintf(stderr,
            "store_master: serving: rpc tcp port %d, unix %s, admin port %d, applied seq %llu\n",
            rpc_server_tcp_port(m->rpc), m->cfg->listen_unix[0] ? m->cfg->listen_unix : "off",
            m->admin ? admin_http_port(m->admin) : -1, (unsigned long long)m->applied_seq);
    return SMP_OK;
}

static int open_parts(master *m, char *err, size_t errlen)
{
    int rc;
    /* The files the config names first, as --check reads them: a config
     * --check accepts is not refused here for one, nor the reverse. */
    if ((rc = host_config_load_files(m->cfg, &m->files, err, errlen)) < 0) return rc;
    master_tls_note_expiry(m);
    snprintf(m->oplog_dir, sizeof(m->oplog_dir), "%s/oplog", m->cfg->data_dir);
    if (m->cfg->ha_enabled)
        snprintf(m->snap_dir, sizeof(m->snap_dir), "%s", m->cfg->ha_snapshot_dir);
    else
        snprintf(m->snap_dir, sizeof(m->snap_dir), "%s/snapshots", m->cfg->data_dir);
    if (mkdir_p(m->cfg->data_dir) < 0) {
        snprintf(err, errlen, "data_dir %s: cannot create: %s", m->cfg->data_dir, strerror(errno));
        return SMP_EIO;
    }
    if ((rc = lock_data_dir(m, err, errlen)) < 0) return rc;
    if (mkdir_p(m->snap_dir) < 0) {
        snprintf(err, errlen, "%.900s: cannot create: %s", m->snap_dir, strerror(errno));
        return SMP_EIO;
    }
    if ((rc = host_metrics_create(&m->metrics)) < 0) return rc;
    if ((rc = master_metrics_register(m)) < 0) return rc;
    master_backend_init(m);
    master_plugins_backend(m);
    m->backend.tick_soon = be_tick_soon;
    if ((rc = host_plugins_create(&m->plugins, m->cfg, m->metrics, &m->backend)) < 0) return rc;
    if ((rc = host_plugins_load_all(m->plugins, err, errlen)) < 0) return rc;
    host_plugins_set_timing(m->plugins, &m->m.plugin_timing);
    obj_guard_ops guard = {guard_check, guard_active, m};
    if ((rc = obj_store_create(&m->objs_.store, &guard)) < 0) return rc;
    obj_store_set_abandon_hook(m->objs_.store, master_scrub_abandoned, m);
    obj_store_set_place_hook(m->objs_.store, master_node_place_ok, m);
    obj_store_keep_uncopied(m->objs_.store, !m->cfg->memory_evict_without_cold_copy);

    oplog_file_options lo = {
        .dir = m->oplog_dir,
        .segment_bytes = m->cfg->oplog_segment_bytes,
        .max_batch_records = m->cfg->oplog_max_batch_records,
        .preallocate = m->cfg->oplog_preallocate,
    };
    if (m->cfg->ha_enabled)
        rc = master_ha_open_log(m, err, errlen);
    else
        rc = oplog_file_open(&m->loop, &lo, &m->log, err, errlen);
    if (rc < 0) return rc;
    if ((rc = master_recover(m, err, errlen)) < 0)
        return m->cfg->ha_enabled ? master_ha_explain_short_log(m, rc, err, errlen) : rc;
    if (m->cfg->ha_enabled && (rc = master_ha_check_log(m, err, errlen)) < 0) return rc;

    rpc_server_options ro = {
        .listen_tcp = m->cfg->listen_tcp,
        .listen_unix = m->cfg->listen_unix,
        .max_frame_bytes = m->cfg->max_frame_bytes,
        .tls = m->files.tls, /* NULL without tls.cert; the server takes its own reference */
    };
    if ((rc = rpc_server_create(&m->loop, &ro, &m->rpc, err, errlen)) < 0) return rc;
    if ((rc = master_auth_start(m, err, errlen)) < 0) return rc;
    if ((rc = master_objects_register(m)) < 0 || (rc = master_admin_register(m)) < 0 ||
        (rc = master_nodes_register(m)) < 0) {
        snprintf(err, errlen, "rpc: cannot register the host services: %s", smp_strerror(rc));
        return rc;
    }
    return master_plugins_route(m, err, errlen);
}

/* auth.limits on the RPC server, for every tenant a token or a certificate
 * mapping names (the limits know tenants by the credential entries). */
static int auth_limits_start(master *m, char *err, size_t errlen)
{
    const host_config *cfg = m->cfg;
    size_t n = cfg->auth_n_tokens + cfg->auth_n_certs;
    rpc_auth_token *all = calloc(n ? n : 1, sizeof(*all));
    rpc_limits *lim = NULL;
    int rc;
    if (all == NULL) {
        snprintf(err, errlen, "auth.limits: out of memory");
        return SMP_ENOMEM;
    }
    if (cfg->auth_n_tokens > 0) memcpy(all, cfg->auth_tokens, cfg->auth_n_tokens * sizeof(*all));
    for (size_t i = 0; i < cfg->auth_n_certs; i++) {
        memcpy(all[cfg->auth_n_tokens + i].tenant, cfg->auth_certs[i].tenant,
               sizeof(all->tenant));
        all[cfg->auth_n_tokens + i].role = cfg->auth_certs[i].role;
    }
    rc = rpc_limits_create(&cfg->auth_limits, all, n, &lim);
    free(all);
    if (rc < 0) {
        snprintf(err, errlen, "auth.limits: cannot be set up: %s", smp_strerror(rc));
        return rc;
    }
    rpc_server_set_limits(m->rpc, lim);
    return SMP_OK;
}

/* Credentials: the auth service on the RPC server, authorization on when
 * auth.enabled (the embedded node's token was read with the files), and one log line saying
 * which (off is the embedded default; config.c refused it on a
 * non-loopback listen.tcp unless auth.allow_insecure). */
static int master_auth_start(master *m, char *err, size_t errlen)
{
    const host_config *cfg = m->cfg;
    int rc;
    if ((rc = rpc_auth_create(cfg->auth_enabled, cfg->auth_tokens, cfg->auth_n_tokens, &m->auth)) < 0 ||
        (rc = rpc_auth_set_certificates(m->auth, cfg->auth_certs, cfg->auth_n_certs)) < 0) {
        snprintf(err, errlen, "auth: the credentials cannot be set up: %s", smp_strerror(rc));
        return rc;
    }
    if ((rc = rpc_auth_serve(m->auth, m->rpc)) < 0) {
        snprintf(err, errlen, "rpc: cannot register the auth service: %s", smp_strerror(rc));
        return rc;
    }
    if (cfg->auth_enabled) {
        if ((rc = auth_limits_start(m, err, errlen)) < 0) return rc;
        fprintf(stderr, "store_master: auth: on, %zu token%s, %zu certificate mapping%s; every "
                "request is authorized by the tenant and role its connection proved (a token, "
                "or a client certificate of auth.certificates)\n",
                cfg->auth_n_tokens, cfg->auth_n_tokens == 1 ? "" : "s",
                cfg->auth_n_certs, cfg->auth_n_certs == 1 ? "" : "s");
    }
    else
        fprintf(stderr, "store_master: auth: OFF -- every client may act as an admin of any "
                "tenant (%s); set auth.enabled and auth.tokens to require tokens\n",
                cfg->auth_allow_insecure ? "auth.allow_insecure: true" : "loopback only");
    return SMP_OK;
}

static void close_parts(master *m)
{
    master_stop(m);
    oplog_close(m->log); /* flushes; owed callbacks run now */
    m->log = NULL;
    master_node_wait_free(m);
    master_scrub_free(m);
    master_fsck_background_stop(m);
    master_fsck_schedule_free(m);
    master_nodes_free(m);
    uv_run(&m->loop, UV_RUN_DEFAULT);
    node_runtime_stop(m->embedded_node); /* its link to us is closed: it lets go */
    host_plugins_destroy(m->plugins);
    master_plugins_free(m);
    obj_store_destroy(m->objs_.store);
    master_objects_free(m);
    host_metrics_destroy(m->metrics);
    master_pending_free(m);
    master_replicas_free(m);
    master_reports_free(m);
    master_carried_free(m);
    master_gates_free(m);
    master_ha_close(m);
    rpc_auth_free(m->auth); /* after the server: its auth service is gone with it */
    m->auth = NULL;
    if (m->data_lock_fd >= 0) close(m->data_lock_fd); /* the lock goes with it */
    host_config_files_free(&m->files);
}

int master_main(const host_config *cfg, int restarted)
{
    char err[1024] = "";
    master *m = calloc(1, sizeof(*m));
    if (m == NULL) return 1;
    m->cfg = cfg;
    m->restarted = restarted;
    m->data_lock_fd = -1;
    if (uv_loop_init(&m->loop) != 0) {
        free(m);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGHUP, SIG_IGN); /* never fatal, from the first instruction on (on_hangup) */
    uv_timer_init(&m->loop, &m->timer);
    uv_timer_init(&m->loop, &m->tick_soon);
    uv_prepare_init(&m->loop, &m->io_prepare);
    uv_check_init(&m->loop, &m->io_check);
    uv_signal_init(&m->loop, &m->sig_int);
    uv_signal_init(&m->loop, &m->sig_term);
    uv_signal_init(&m->loop, &m->sig_hup);
    master_plugins_init(m);
    m->io_prepare.data = m->io_check.data = m;
    m->timer.data = m->tick_soon.data = m->sig_int.data = m->sig_term.data = m->sig_hup.data = m;

    int rc = open_parts(m, err, sizeof(err));
    if (rc == SMP_OK) rc = start_serving(m, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "store_master: %s\n", err[0] ? err : smp_strerror(rc));
        m->exit_status = rc == SMP_ECANCELED ? 0 : 1; /* told to stop before it served */
    } else {
        uv_signal_start(&m->sig_int, on_signal, SIGINT);
        uv_signal_start(&m->sig_term, on_signal, SIGTERM);
        uv_signal_start(&m->sig_hup, on_hangup, SIGHUP);
        uv_timer_start(&m->timer, on_timer, MASTER_TIMER_MS, MASTER_TIMER_MS);
        uv_prepare_start(&m->io_prepare, on_io_prepare);
        uv_check_start(&m->io_check, on_io_check);
        uv_run(&m->loop, UV_RUN_DEFAULT);
    }
    close_parts(m);
    uv_loop_close(&m->loop);
    int status = m->restart_requested ? MASTER_EXIT_RESTART : m->exit_status;
    free(m);
    return status;
}
