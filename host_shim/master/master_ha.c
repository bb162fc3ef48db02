/* master_ha.c -- the master's part in an HA cluster (ha.enabled).
 *
 * The OpLog lives in etcd (oplog_etcd.c) and snapshots in ha.snapshot_dir,
 * which every master reads. A master starts as a standby: recovery loads the
 * newest snapshot and replays the log after it, exactly as a single master
 * does, then the log is followed and every new record goes through the same
 * apply (master_apply_record) as recovery. Meanwhile the election
 * (ha_election.c) campaigns for it once it is ready. A standby answers
 * status and nothing else: every other request gets SMP_ENOTLEADER with the
 * leader's endpoint, so clients and nodes move on. A record the standby
 * cannot replay (an unknown type) stops following, takes it out of the
 * election, and shows in /health, /role and a metric.
 *
 * Elected, it promotes the log (catch up to the durable head under the
 * term's fence, then become its writer), and only then serves as the
 * leader: the plugins get the role change, the reconcile ticks wait for the
 * nodes to register again (master_nodes_settled), and persisted operations
 * resume from the state that was replayed. Deposed (its lease could not be
 * renewed in time, or a write found another leader's fence), it stops
 * serving at once and restarts as a standby from the newest snapshot: the
 * process re-executes itself (MASTER_EXIT_RESTART), which drops every piece
 * of leader-only state without a special path. A standby whose log was
 * garbage-collected past it, or that could not reach etcd for the
 * follower's unreachable_ms, restarts the same way. A restarted master
 * waits for etcd without bound (a first start gives up after
 * MASTER_HA_ETCD_WAIT_MS: its endpoints may be wrong), so an etcd outage
 * of any length ends with the masters back as standbys and a leader
 * elected, without an operator. Each master remembers the last seq it
 * applied in data_dir/ha.applied (at most every second, synced at a stop) and
 * refuses to start on a log that ends before it: an etcd that came back
 * wiped, or from an older backup, must not become an empty cluster whose
 * registration sweeps delete the nodes' data as orphans; a log that ends
 * before the newest snapshot is refused the same way, naming the snapshot.
 * A running standby that finds the log behind what it applied leaves the
 * election and reads the head again every second: once etcd holds the log
 * again (restored), with the same record at its last seq, it follows on and
 * campaigns again, without a restart. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "etcd_client.h"
#include "ha_election.h"
#include "host_rpc.pb-c.h"
#include "master_internal.h"

#define MASTER_HA_ETCD_TIMEOUT_MS 2000u
#define MASTER_HA_ETCD_WAIT_MS 10000u /* how long a first start waits for etcd */
#define MASTER_HA_ETCD_SAY_MS 5000u   /* a wait for etcd is logged this often */
#define MASTER_HA_APPLIED_FILE "ha.applied" /* in data_dir: the last seq applied, and the prefix */
#define MASTER_HA_APPLIED_MS 1000u          /* it is written at most this often */
/* How long a standby holds a request while no leader is known, to answer
 * it with the leader's endpoint the moment one is (rpc_hold.c): about an
 * election with fast_failover, well under the call timeouts of the
 * project's clients (a node's 10 s, libweightclient's 60 s). */
#define MASTER_HA_HOLD_MS 500u

const char *master_role_name(const master *m)
{
    if (!m->cfg->ha_enabled) return "active";
    switch (m->ha_role) {
    case MASTER_HA_LEADER: return "leader";
    case MASTER_HA_STANDBY: return "standby";
    default: return "candidate";
    }
}

int master_is_leader(const master *m)
{
    if (!m->cfg->ha_enabled) return 1;
    return m->ha_role == MASTER_HA_LEADER && m->election != NULL &&
           ha_election_is_leader(m->election);
}

/* The endpoint this master advertises. */
static const char *advertised(const master *m)
{
    return m->cfg->ha_advertise[0] ? m->cfg->ha_advertise : m->cfg->listen_tcp;
}

/* Stop serving and come back as a standby (see the file comment). */
static void restart_as_standby(master *m, const char *why)
{
    /* A master told to stop stays stopped: its shutdown closes its sockets,
     * so standbys may revoke its lease (ha_exit_watch.h) before it is done,
     * and a stop turned into a restart would never exit. */
    if (m->restart_requested || m->stopping) return;
    fprintf(stderr, "store_master: %s; restarting as a standby\n", why);
    m->restart_requested = 1;
    m->ha_role = MASTER_HA_CANDIDATE;
    oplog_etcd_demote(m->log);
    master_stop(m);
}

static void publish_status(master *m)
{
    if (m->election == NULL) return;
    ha_election_set_status(m->election, master_role_name(m), m->applied_seq, m->ha_ready,
                           m->ha_reason);
}

/* -- following the log ----------------------------------------------------------- */

static int follow_apply(void *arg, const oplog_record *rec)
{
    master *m = arg;
    int rc = master_apply_record(m, rec, 0, m->ha_reason, sizeof(m->ha_reason));
    if (rc < 0) m->ha_apply_failed = 1;
    return rc;
}

static void on_follow_stop(void *arg, int status, const char *why)
{
    master *m = arg;
    if (m->stopping) return;
    if (!m->ha_apply_failed && (status == SMP_ERANGE || status == SMP_EIO)) {
        /* Left behind by garbage collection, or etcd gone longer than the
         * follower retries: start over from the newest snapshot, waiting
         * for etcd as long as it takes. */
        char line[600];
        snprintf(line, sizeof(line), "%s (%s)",
                 status == SMP_EIO ? "the OpLog cannot be followed"
                                   : "the OpLog was garbage-collected past this standby",
                 why ? why : "");
        restart_as_standby(m, line);
        return;
    }
    m->ha_ready = 0;
    m->ha_replay_stopped++;
    if (!m->ha_apply_failed || m->ha_reason[0] == '\0')
        snprintf(m->ha_reason, sizeof(m->ha_reason), "%s", why ? why : smp_strerror(status));
    fprintf(stderr, "store_master: standby cannot replay: %s; out of the election\n",
            m->ha_reason);
    ha_election_set_eligible(m->election, 0);
    publish_status(m);
}

/* etcd's log went behind what this standby applied (behind 1: out of the
 * election, the reason says why and what brings it back), or holds it again
 * (0: back in, unless something else keeps it out). */
static void on_follow_behind(void *arg, int behind, const char *why)
{
    master *m = arg;
    if (m->stopping) return;
    if (behind) {
        m->ha_log_behind = 1;
        m->ha_ready = 0;
        snprintf(m->ha_reason, sizeof(m->ha_reason),
                 "%s; waiting for etcd to hold the log again (restore etcd's data; "
                 "checked every second)", why);
        fprintf(stderr, "store_master: standby cannot follow: %s; out of the election\n",
                m->ha_reason);
        ha_election_set_eligible(m->election, 0);
    } else if (m->ha_log_behind) {
        m->ha_log_behind = 0;
        m->ha_ready = 1;
        m->ha_reason[0] = '\0';
        fprintf(stderr, "store_master: etcd holds the log again; following it from seq %" PRIu64
                ", back in the election\n", m->applied_seq + 1);
        ha_election_set_eligible(m->election, 1);
    }
    publish_status(m);
}

/* -- the election's reports ------------------------------------------------------ */

static void on_promoted(void *arg, int status)
{
    master *m = arg;
    if (m->stopping) return;
    if (status < 0) {
        char why[256];
        snprintf(why, sizeof(why), "promotion failed: %s", smp_strerror(status));
        restart_as_standby(m, why);
        return;
    }
    m->ha_role = MASTER_HA_LEADER;
    master_take_over_zones(m); /* before anything is placed */
    rpc_server_leader_known(m->rpc, advertised(m)); /* held requests come back here */
    master_nodes_unsettle(m);
    fprintf(stderr, "store_master: leader of the cluster (%s), applied seq %" PRIu64 "\n",
            m->cfg->ha_id, m->applied_seq);
    publish_status(m);
    smp_event ev = {.struct_size = sizeof(ev), .type = SMP_EVENT_ROLE_CHANGE, .is_leader = 1};
    master_emit(m, &ev);
}

static void on_elected(void *arg, const ha_term *t)
{
    master *m = arg;
    if (m->stopping || m->restart_requested) return;
    m->ha_role = MASTER_HA_PROMOTING;
    oplog_etcd_fence f = {.leader_key = t->leader_key, .leader_key_len = t->leader_key_len,
                          .lease_id = t->lease_id, .create_revision = t->create_revision,
                          .lease_ttl_ms = m->cfg->ha_lease_ttl_s * 1000u};
    fprintf(stderr, "store_master: elected (lease %" PRId64 "); catching up\n", t->lease_id);
    int rc = oplog_etcd_promote(m->log, &f, NULL, NULL, on_promoted, m);
    if (rc < 0) {
        char why[256];
        snprintf(why, sizeof(why), "promotion refused: %s", smp_strerror(rc));
        restart_as_standby(m, why);
    }
}

static void on_deposed(void *arg, const char *why)
{
    master *m = arg;
    char line[320];
    snprintf(line, sizeof(line), "deposed: %s", why);
    restart_as_standby(m, line);
}

static void on_leader(void *arg, const char *id, const char *endpoint)
{
    master *m = arg;
    snprintf(m->ha_leader, sizeof(m->ha_leader), "%s", endpoint);
    fprintf(stderr, "store_master: the leader is %s%s%s\n", id[0] ? id : "(none)",
            endpoint[0] ? " at " : "", endpoint);
    /* requests held while no leader was known go there now (this master,
     * elected, sends them to itself once it serves: on_promoted) */
    if (endpoint[0] && strcmp(endpoint, advertised(m)) != 0) rpc_server_leader_known(m->rpc, endpoint);
}

static void on_fenced(void *arg, const char *why)
{
    master *m = arg;
    char line[320];
    snprintf(line, sizeof(line), "fenced out of the OpLog: %s", why);
    restart_as_standby(m, line);
}

/* A standby serves status only; the rest goes to the leader. Route (0, 0)
 * is no request's: rpc_server_leadership asks with it whether this master
 * leads, and which one does. */
static int admit(void *arg, uint64_t conn, uint32_t service, uint32_t method, const char **leader)
{
    master *m = arg;
    /* A draining leader (master_drain.c) is a standby to new calls. */
    if (master_is_leader(m) && master_drain_admits(m, conn, service, method)) return 0;
    /* Questions about this master, answered aside: a draining leader does
     * not wait for a quiet spell in them (master_drain.c). */
    if (service == HOST_SERVICE__HOST_SERVICE_ADMIN && method == ADMIN_METHOD__ADMIN_STATUS)
        return RPC_ADMIT_ASIDE;
    /* A client authenticates with whichever master it reached first. */
    if (service == HOST_SERVICE__HOST_SERVICE_AUTH) return RPC_ADMIT_ASIDE;
    /* The plugin commands act on the master that answers (a rolling upgrade
     * reloads the standbys first): a standby serves them itself. */
    if (service == HOST_SERVICE__HOST_SERVICE_ADMIN && method >= ADMIN_METHOD__ADMIN_PLUGIN_LIST &&
        method <= ADMIN_METHOD__ADMIN_PLUGIN_ENABLE)
        return 0;
    /* A leader whose exit the watcher noticed is named to nobody, even
       before this loop turn took the change: the request waits for the next
       leader instead. */
    int gone = m->election != NULL && ha_election_leader_gone(m->election);
    *leader = gone || strcmp(m->ha_leader, advertised(m)) == 0 ? "" : m->ha_leader;
    return SMP_ENOTLEADER;
}

/* Advertise what this master can replay: the host's record types (1-7) and
 * every type a loaded plugin registered, and each plugin's version and ABI,
 * so that the leader can tell whether a gate may be confirmed. */
static void advertise_replay(master *m)
{
    uint16_t types[HA_MAX_TYPES];
    char lines[16][160];
    const char *plugins[16];
    size_t nt = 0, np = 0;
    for (uint16_t t = 1; t <= SMP_OPLOG_HOST_TYPE_MAX; t++) types[nt++] = t;
    for (size_t i = 0; i < host_plugins_n_oplog_types(m->plugins) && nt < HA_MAX_TYPES; i++)
        types[nt++] = host_plugins_oplog_type_at(m->plugins, i)->t.type;
    for (size_t i = 0; i < host_plugins_count(m->plugins) && np < 16; i++) {
        const smp_plugin_desc *d = host_plugin_desc(host_plugins_at(m->plugins, i));
        snprintf(lines[np], sizeof(lines[np]), "%s %s (ABI %u.%u)", d->name,
                 d->version ? d->version : "?", (unsigned)d->abi_major, (unsigned)d->abi_minor);
        plugins[np] = lines[np];
        np++;
    }
    ha_election_set_replay(m->election, types, nt, plugins, np);
}

void master_ha_advertise(master *m)
{
    if (m->election != NULL) advertise_replay(m);
}

/* -- lifecycle ------------------------------------------------------------------ */

/* SIGINT or SIGTERM came while the master waited for etcd. */
static volatile sig_atomic_t stop_while_waiting;

static void on_stop_while_waiting(int sig)
{
    (void)sig;
    stop_while_waiting = 1;
}

/* Wait until etcd answers a read of the OpLog's head key: for at most
 * MASTER_HA_ETCD_WAIT_MS at a first start, as long as it takes when this
 * process restarted itself (deposed, or a standby etcd left too long: the
 * endpoints worked, etcd is what went away, and it is back when it is
 * back). A master started beside an etcd that is starting, electing a
 * leader or too busy to answer in time waits for it, logging the first
 * failed try and then the first one MASTER_HA_ETCD_SAY_MS after the last
 * line (a try takes up to its deadline: about every 6 s), instead of exiting
 * on the first deadline. 0, or the last error (err says it gave up); an
 * answer that is an error of etcd's own is not waited on; SMP_ECANCELED
 * once a SIGINT or SIGTERM came (wait_for_etcd catches them). */
static int wait_for_etcd_until_stopped(master *m, char *err, size_t errlen)
{
    char key[320];
    int len = snprintf(key, sizeof(key), "%slog_head", m->cfg->ha_prefix);
    if (len < 0 || (size_t)len >= sizeof(key)) {
        snprintf(err, errlen, "ha: the prefix is too long");
        return SMP_EINVAL;
    }
    uint64_t began = master_now_ms(), said = 0;
    for (;;) {
        etcd_range_result r;
        int rc = etcd_range(m->etcd, key, (size_t)len, NULL, 0, 1, 0, 1, &r, err, errlen);
        if (rc == 0) etcd_range_result_free(&r);
        if (stop_while_waiting) { /* also when etcd answered that very try */
            snprintf(err, errlen, "ha: stopped while waiting for etcd");
            return SMP_ECANCELED;
        }
        if (rc < 0 && rc != SMP_EIO) { /* etcd answered: a refusal, e.g. its RBAC */
            char why[512];
            snprintf(why, sizeof(why), "%s", err);
            snprintf(err, errlen, "ha: etcd refused to read %s (under ha.prefix %s; with etcd's "
                     "auth on, this master's user needs read and write on that prefix): %s",
                     key, m->cfg->ha_prefix, why);
            return rc;
        }
        if (rc != SMP_EIO) return rc;
        uint64_t now = master_now_ms();
        if (!m->restarted && now - began >= MASTER_HA_ETCD_WAIT_MS) {
            char last[512];
            snprintf(last, sizeof(last), "%s", err);
            snprintf(err, errlen, "ha: etcd (ha.etcd_endpoints %s) did not answer within %u s; "
                     "giving up: %s", m->cfg->ha_etcd_endpoints, MASTER_HA_ETCD_WAIT_MS / 1000,
                     last);
            return rc;
        }
        if (said == 0 || now - said >= MASTER_HA_ETCD_SAY_MS) {
            fprintf(stderr, "store_master: ha: waiting for etcd to answer (%" PRIu64 " s%s): %s\n",
                    (now - began) / 1000, m->restarted ? ", as long as it takes" : "", err);
            said = now;
        }
        struct timespec pause = {0, 100 * 1000000L};
        nanosleep(&pause, NULL);
    }
}

/* wait_for_etcd_until_stopped with SIGINT and SIGTERM caught meanwhile
 * (the loop's handlers come later): a master told to stop while it waits
 * for etcd -- without bound, after a restart -- ends the wait within a
 * try's deadline and exits 0 instead of being killed by the signal. */
static int wait_for_etcd(master *m, char *err, size_t errlen)
{
    struct sigaction stop = {.sa_handler = on_stop_while_waiting}, was_int, was_term;
    sigemptyset(&stop.sa_mask);
    sigaction(SIGINT, &stop, &was_int);
    sigaction(SIGTERM, &stop, &was_term);
    int rc = wait_for_etcd_until_stopped(m, err, errlen);
    sigaction(SIGINT, &was_int, NULL);
    sigaction(SIGTERM, &was_term, NULL);
    return rc;
}

/* How this master reaches etcd: ha.etcd_endpoints, over TLS with the
 * PEM text of ha.etcd_tls_* as host_config_load_files read it, as
 * ha.etcd_user with the password of ha.etcd_password_file (read again at
 * each login: a rotated password needs no restart). */
static etcd_client_options etcd_options(const master *m)
{
    etcd_client_options o = {.endpoints = m->cfg->ha_etcd_endpoints,
                             .tls_ca_pem = m->files.etcd_ca_pem,
                             .tls_cert_pem = m->files.etcd_cert_pem,
                             .tls_key_pem = m->files.etcd_key_pem,
                             .user = m->cfg->ha_etcd_user[0] ? m->cfg->ha_etcd_user : NULL,
                             .password = m->cfg->ha_etcd_user[0] ? m->files.etcd_password : NULL,
                             .password_file = m->cfg->ha_etcd_user[0] ? m->cfg->ha_etcd_password_file
                                                                      : NULL};
    return o;
}

int master_ha_open_log(master *m, char *err, size_t errlen)
{
    int rc;
    etcd_client_options eo = etcd_options(m);
    eo.timeout_ms = MASTER_HA_ETCD_TIMEOUT_MS;
    if ((rc = etcd_client_open(&eo, &m->etcd, err, errlen)) < 0) return rc;
    if ((rc = wait_for_etcd(m, err, errlen)) < 0) return rc;
    uint32_t batch = m->cfg->oplog_max_batch_records;
    oplog_etcd_options o = {.client = m->etcd, .prefix = m->cfg->ha_prefix,
                            .max_batch_records = batch < 127 ? batch : 127,
                            .on_fenced = on_fenced, .fenced_arg = m,
                            .on_behind = on_follow_behind, .behind_arg = m};
    return oplog_etcd_open(&m->loop, &o, &m->log, err, errlen);
}

int master_ha_start(master *m, char *err, size_t errlen)
{
    int rc;
    m->ha_role = MASTER_HA_STANDBY;
    m->ha_ready = 1;
    rpc_server_set_admission(m->rpc, admit, m);
    rpc_server_set_not_leader_hold(m->rpc, MASTER_HA_HOLD_MS);
    ha_election_options o = {
        .etcd = etcd_options(m),
        .prefix = m->cfg->ha_prefix,
        .id = m->cfg->ha_id,
        .endpoint = advertised(m),
        .ttl_s = m->cfg->ha_lease_ttl_s,
        .fast_failover = m->cfg->ha_fast_failover,
        .events = {on_elected, on_deposed, on_leader, m},
    };
    if ((rc = ha_election_start(&m->loop, &o, &m->election, err, errlen)) < 0) return rc;
    advertise_replay(m);
    publish_status(m);
    if ((rc = oplog_etcd_follow(m->log, m->applied_seq, follow_apply, m, on_follow_stop, m)) < 0) {
        snprintf(err, errlen, "ha: cannot follow the OpLog: %s", smp_strerror(rc));
        return rc;
    }
    ha_election_set_eligible(m->election, 1);
    fprintf(stderr, "store_master: standby %s, applied seq %" PRIu64 "; campaigning\n",
            m->cfg->ha_id, m->applied_seq);
    return SMP_OK;
}

/* -- what this master applied, remembered in data_dir ----------------------------- */

/* data_dir/ha.applied into path[cap]. */
static void applied_path(const master *m, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", m->cfg->data_dir, MASTER_HA_APPLIED_FILE);
}

/* The seq data_dir/ha.applied says this master applied of the log under
 * this ha.prefix (0: none, or another prefix's, or no file). */
static uint64_t applied_remembered(const master *m)
{
    char path[4200], line[1200], prefix[1100];
    unsigned long long seq = 0;
    applied_path(m, path, sizeof(path));
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    int ok = fgets(line, sizeof(line), f) != NULL && sscanf(line, "%llu %1099s", &seq, prefix) == 2 &&
             strcmp(prefix, m->cfg->ha_prefix) == 0;
    fclose(f);
    return ok ? (uint64_t)seq : 0;
}

/* Write "SEQ PREFIX" of applied_seq through a temporary file and a rename;
 * sync: fsync it first (at a stop). The tick's writes are not synced: an
 * fsync a second on the loop thread would stall every request behind it,
 * and a crash that loses the latest value leaves an older one (the rename
 * replaces the file whole), which the check still holds the log to. A
 * failure is logged; the next tick tries again. */
static void applied_remember(master *m, int sync)
{
    char path[4200], tmp[4300];
    applied_path(m, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL &&
             fprintf(f, "%" PRIu64 " %s\n", m->applied_seq, m->cfg->ha_prefix) > 0 &&
             fflush(f) == 0 && (!sync || fsync(fileno(f)) == 0);
    if (f != NULL && fclose(f) != 0) ok = 0;
    if (ok && rename(tmp, path) == 0) {
        m->ha_applied_saved = m->applied_seq;
        return;
    }
    fprintf(stderr, "store_master: ha: cannot write %s (%s)\n", path, strerror(errno));
    (void)unlink(tmp);
}

int master_ha_check_log(master *m, char *err, size_t errlen)
{
    uint64_t had = applied_remembered(m);
    if (had > m->applied_seq) {
        char path[4200];
        applied_path(m, path, sizeof(path));
        snprintf(err, errlen, "ha: the OpLog under %s ends at seq %" PRIu64 ", but this master "
                 "applied up to seq %" PRIu64 " (%s): etcd lost records (wiped, or restored from "
                 "an older backup). Starting would begin a cluster without them, and the nodes' "
                 "data would be deleted as orphans: restore etcd, or remove %s to start on what "
                 "etcd holds", m->cfg->ha_prefix, m->applied_seq, had, path, path);
        return SMP_ESTATE;
    }
    m->ha_applied_saved = had;
    return SMP_OK;
}

int master_ha_explain_short_log(master *m, int rc, char *err, size_t errlen)
{
    uint64_t head = oplog_etcd_head(m->log), had = applied_remembered(m);
    if (rc != SMP_EPROTO || m->snapshot_seq == 0 || head >= m->snapshot_seq) return rc;
    char path[4200], snap[4200], also[4400] = "";
    applied_path(m, path, sizeof(path));
    if (snap_file_path(m->snap_dir, m->snapshot_seq, snap, sizeof(snap)) != SMP_OK)
        snprintf(snap, sizeof(snap), "in %s", m->snap_dir);
    if (had > 0)
        snprintf(also, sizeof(also), ", and this master applied up to seq %" PRIu64 " (%s)",
                 had, path);
    snprintf(err, errlen, "ha: the OpLog under %s ends at seq %" PRIu64 ", but the newest "
             "snapshot %s was taken at seq %" PRIu64 "%s: etcd lost records (wiped, or restored "
             "from an older backup). Starting would begin a cluster without them, and the "
             "nodes' data would be deleted as orphans: restore etcd; to start anew on what etcd "
             "holds instead, move the snapshots in ha.snapshot_dir (%s) aside%s%s",
             m->cfg->ha_prefix, head, snap, m->snapshot_seq, also, m->snap_dir,
             had > 0 ? " and remove " : "", had > 0 ? path : "");
    return SMP_ESTATE;
}

void master_ha_tick(master *m)
{
    publish_status(m);
    uint64_t now = master_now_ms();
    if (m->applied_seq > m->ha_applied_saved && now - m->ha_applied_saved_ms >= MASTER_HA_APPLIED_MS) {
        m->ha_applied_saved_ms = now;
        applied_remember(m, 0);
    }
}

void master_ha_stop(master *m)
{
    if (!m->cfg->ha_enabled) return;
    if (m->applied_seq > m->ha_applied_saved) applied_remember(m, 1);
    oplog_etcd_stop_following(m->log); /* else it keeps the loop running */
    ha_election_stop(m->election);
    m->election = NULL;
}

void master_ha_close(master *m)
{
    etcd_client_close(m->etcd);
    m->etcd = NULL;
}

size_t master_ha_members(master *m, ha_member *out, size_t cap)
{
    return m->election != NULL ? ha_election_members(m->election, out, cap) : 0;
}

int master_ha_all_have(master *m, unsigned feature, char *why, size_t cap)
{
    ha_member members[32];
    why[0] = '\0';
    if (!m->cfg->ha_enabled) return 1;
    size_t n = master_ha_members(m, members, 32);
    if (n == 0) {
        snprintf(why, cap, "no master has registered in etcd yet");
        return 0;
    }
    if (n > 32) {
        snprintf(why, cap, "more masters are registered than this master reads");
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (members[i].features & feature) continue;
        snprintf(why, cap, "master %s runs a build that does not advertise it", members[i].id);
        return 0;
    }
    return 1;
}

size_t master_ha_rows(master *m, ha_member *out, size_t cap)
{
    size_t n = master_ha_members(m, out, cap);
    if (m->election == NULL) return n < cap ? n : cap;
    ha_member self;
    ha_election_self(m->election, &self);
    return ha_rows_with(out, n, cap, &self);
}

int master_ha_etcd_unreachable(master *m, char *out, size_t cap)
{
    char why[256];
    out[0] = '\0';
    if (!m->cfg->ha_enabled || m->election == NULL) return 0;
    uint64_t ms = ha_election_etcd_silent_ms(m->election, why, sizeof(why));
    if (ms == 0) return 0;
    snprintf(out, cap, "etcd has not answered this master (%s) for %.1f s (%s): %s",
             m->cfg->ha_id, (double)ms / 1e3, why,
             master_is_leader(m) ? "its leader lease is in doubt and it steps down when the lease "
                                   "can no longer be certain; no append can be made durable"
                                 : "no append can be made durable and the masters' registry is as "
                                   "last read");
    return 1;
}

uint64_t master_ha_head(const master *m)
{
    return m->cfg->ha_enabled ? oplog_etcd_head(m->log) : m->applied_seq;
}
