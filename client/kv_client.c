/* kv_client.c -- the plain object service, one blocking RPC per call.
 *
 * Each call packs its request message, sends it through the RPC transport
 * (rpc_client.c), and unpacks the reply or keeps the master's error message.
 * Nothing is cached: every answer is the master's. The transport follows a
 * standby to the leader by itself; what this file adds is which calls may
 * be sent again after the connection to a master is lost (resend_flags). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <sys/stat.h>
#include <time.h>

#include "host_rpc.pb-c.h"
#include "kv_client.h"
#include "node_data_client.h"
#include "rpc_client.h"
#include "seg_map.h"

#define KVC_MAPS 4
#define KVC_NODES 4

struct kvc {
    rpcc_conn *conn;
    kvc_transport transport;
    struct { char path[512]; seg_map map; } maps[KVC_MAPS];     /* co-located segments */
    struct { char addr[128]; ndc_conn *conn; } nodes[KVC_NODES]; /* remote data servers */
    SSL_CTX *node_tls;    /* TLS to nodes (a reference), NULL: the environment's */
    int transport_failed; /* the last call never got the master's answer */
    int track_leases;     /* kvc_track_read_leases */
    char **leased;        /* keys looked up, one per lookup, not given back yet */
    size_t n_leased, cap_leased;
    uint64_t leased_moves; /* rpcc_moves() when they were looked up */
    /* The master this connection is at answered release_read_leases as an
     * unknown method (an older master): rpcc_moves() then, +1 (0: not so). */
    uint64_t no_release_at;
    char err[1024];
};

/* Read leases given back per request (the master takes up to 4096). */
#define KVC_RELEASE_BATCH 1024

int kvc_connect(const char *endpoint, int timeout_ms, kvc **out, char *err, size_t errlen)
{
    return kvc_connect_token(endpoint, timeout_ms, NULL, out, err, errlen);
}

int kvc_connect_token(const char *endpoint, int timeout_ms, const char *token, kvc **out,
                      char *err, size_t errlen)
{
    rpcc_options opt = {.timeout_ms = timeout_ms, .token = token};
    return kvc_connect_opts(endpoint, &opt, NULL, out, err, errlen);
}

int kvc_connect_opts(const char *endpoint, const rpcc_options *opt, SSL_CTX *node_tls, kvc **out,
                     char *err, size_t errlen)
{
    kvc *c = calloc(1, sizeof(*c));
    if (c == NULL) return SMP_ENOMEM;
    int rc = rpcc_connect(endpoint, opt, &c->conn, err, errlen);
    if (rc < 0) {
        free(c);
        return rc;
    }
    if (node_tls != NULL && SSL_CTX_up_ref(node_tls) != 1) {
        rpcc_close(c->conn);
        free(c);
        return SMP_ENOMEM;
    }
    c->node_tls = node_tls;
    *out = c;
    return SMP_OK;
}

void kvc_close(kvc *c)
{
    if (c == NULL) return;
    for (int i = 0; i < KVC_MAPS; i++) seg_map_close(&c->maps[i].map);
    for (int i = 0; i < KVC_NODES; i++) ndc_close(c->nodes[i].conn);
    rpcc_close(c->conn);
    SSL_CTX_free(c->node_tls);
    for (size_t i = 0; i < c->n_leased; i++) free(c->leased[i]);
    free(c->leased);
    free(c);
}

const char *kvc_error(const kvc *c)
{
    return c->err;
}

int kvc_transport_failed(const kvc *c)
{
    return c->transport_failed;
}

uint64_t kvc_moves(const kvc *c)
{
    return rpcc_moves(c->conn);
}

const char *kvc_endpoint(const kvc *c)
{
    return rpcc_endpoint(c->conn);
}

/* When a call may go again to a master after the connection was lost (the
 * master restarted, or a failover). Every call goes again when its request
 * never left whole. Queries, and setting a group's managed flag to a value,
 * also go again when the request may have arrived: repeating them cannot
 * change the outcome. Put start, put end, revoke, remove, remove by prefix
 * and snapshot may have been applied before the connection broke: their
 * transport error is returned (kvc_transport_failed() says so), as it was
 * before lists. */
static unsigned resend_flags(uint32_t service, uint32_t method)
{
    if (service == HOST_SERVICE__HOST_SERVICE_ADMIN)
        /* A gate confirmed twice is confirmed once. */
        return method == ADMIN_METHOD__ADMIN_STATUS || method == ADMIN_METHOD__ADMIN_GATE_CONFIRM
                   ? RPCC_IDEMPOTENT
                   : RPCC_FAILOVER;
    switch (method) {
    case OBJECTS_METHOD__OBJ_GET_REPLICAS:
    case OBJECTS_METHOD__OBJ_EXISTS:
    case OBJECTS_METHOD__OBJ_LIST:
    case OBJECTS_METHOD__OBJ_GROUP_SET_MANAGED:
        return RPCC_IDEMPOTENT;
    default:
        return RPCC_FAILOVER;
    }
}

/* Send req to (service, method); on success unpack the reply with desc into
 * *resp (NULL desc: the reply is ignored). The master's message of a refusal
 * is kept for kvc_error(). */
static int call(kvc *c, uint32_t service, uint32_t method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp)
{
    char *msg = NULL;
    int status = 0;
    c->err[0] = '\0';
    c->transport_failed = 0;
    int rc = rpcc_call_msg_ex(c->conn, resend_flags(service, method), service, method, req, desc,
                              resp, &status, NULL, NULL, &msg);
    if (rc < 0) {
        snprintf(c->err, sizeof(c->err), "%s", rpcc_last_error(c->conn));
        c->transport_failed = rc != SMP_EPROTO && rc != SMP_ENOMEM;
    } else if (status != 0) {
        snprintf(c->err, sizeof(c->err), "%s", msg && msg[0] ? msg : smp_strerror(status));
        rc = status;
    }
    free(msg);
    return rc;
}

#define OBJ(method) HOST_SERVICE__HOST_SERVICE_OBJECTS, OBJECTS_METHOD__OBJ_##method

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

static void copy_replica(kvc_replica *r, const ReplicaLocation *l)
{
    r->kind = (int)l->kind;
    r->status = (int)l->status;
    copy_str(r->node, sizeof(r->node), l->node);
    copy_str(r->segment, sizeof(r->segment), l->segment);
    r->offset = l->offset;
    r->length = l->length;
    copy_str(r->path, sizeof(r->path), l->path);
    copy_str(r->data_addr, sizeof(r->data_addr), l->data_addr);
    copy_str(r->segment_path, sizeof(r->segment_path), l->segment_path);
    copy_str(r->local_socket, sizeof(r->local_socket), l->local_socket);
    r->ticket_len = l->ticket.len <= sizeof(r->ticket) ? l->ticket.len : 0;
    if (r->ticket_len) memcpy(r->ticket, l->ticket.data, r->ticket_len);
    r->data_tls = l->data_tls;
}

int kvc_put_start(kvc *c, const char *key, uint64_t size, smp_data_type type, const char *group,
                  int overwrite, kvc_replica *where)
{
    PutStartRequest req = PUT_START_REQUEST__INIT;
    PutStartResponse *resp = NULL;
    req.key = (char *)key;
    req.size = size;
    req.data_type = (DataType)type;
    req.group = (char *)(group ? group : "");
    req.overwrite = overwrite != 0;
    int rc = call(c, OBJ(PUT_START), &req.base, &put_start_response__descriptor,
                  (ProtobufCMessage **)&resp);
    if (rc < 0) return rc;
    if (where && resp->n_replicas > 0) copy_replica(where, resp->replicas[0]);
    put_start_response__free_unpacked(resp, NULL);
    return SMP_OK;
}

int kvc_put_end(kvc *c, const char *key, const uint8_t sha256[32], uint64_t *seq)
{
    PutEndRequest req = PUT_END_REQUEST__INIT;
    PutEndResponse *resp = NULL;
    req.key = (char *)key;
    req.sha256.data = (uint8_t *)sha256;
    req.sha256.len = 32;
    int rc = call(c, OBJ(PUT_END), &req.base, &put_end_response__descriptor,
                  (ProtobufCMessage **)&resp);
    if (rc < 0) return rc;
    if (seq) *seq = resp->seq;
    put_end_response__free_unpacked(resp, NULL);
    return SMP_OK;
}

static int key_call(kvc *c, uint32_t method, const char *key)
{
    KeyRequest req = KEY_REQUEST__INIT;
    req.key = (char *)key;
    return call(c, HOST_SERVICE__HOST_SERVICE_OBJECTS, method, &req.base, NULL, NULL);
}

int kvc_put_revoke(kvc *c, const char *key)
{
    return key_call(c, OBJECTS_METHOD__OBJ_PUT_REVOKE, key);
}

int kvc_remove(kvc *c, const char *key)
{
    return key_call(c, OBJECTS_METHOD__OBJ_REMOVE, key);
}

/* Forget the lookups noted before the connection last moved: their leases
 * were the old connection's, and ended when it closed; the master the
 * connection is at now holds none of them (it would refuse each key). */
static void forget_moved_leases(kvc *c)
{
    uint64_t moves = rpcc_moves(c->conn);
    if (c->leased_moves == moves) return;
    for (size_t i = 0; i < c->n_leased; i++) free(c->leased[i]);
    c->n_leased = 0;
    c->leased_moves = moves;
}

/* Note one lookup of key for kvc_release_read_leases; out of memory: not
 * noted (that lease expires on its own). */
static void note_lease(kvc *c, const char *key)
{
    forget_moved_leases(c);
    if (c->n_leased == c->cap_leased) {
        size_t cap = c->cap_leased ? c->cap_leased * 2 : 64;
        char **keys = realloc(c->leased, cap * sizeof(*keys));
        if (keys == NULL) return;
        c->leased = keys;
        c->cap_leased = cap;
    }
    if ((c->leased[c->n_leased] = strdup(key)) != NULL) c->n_leased++;
}

/* 1 when the master this connection is at does not take releases: it
 * answered one as an unknown method and the connection has not moved since
 * (a move -- a failover, a redirect, a reconnect -- may reach another
 * master, which is asked again). */
static int release_unknown_here(kvc *c)
{
    if (c->no_release_at != 0 && c->no_release_at != rpcc_moves(c->conn) + 1)
        c->no_release_at = 0;
    return c->no_release_at != 0;
}

/* How long in all a lookup refused SMP_EBUSY is asked again (kvc_get). */
#define KVC_BUSY_RETRY_MS 1000

int kvc_get(kvc *c, const char *key, kvc_object *out)
{
    KeyRequest req = KEY_REQUEST__INIT;
    GetReplicasResponse *resp = NULL;
    req.key = (char *)key;
    int rc;
    /* SMP_EBUSY: a change that frees the object's bytes (a removal, a
     * replica dropped) is being made durable, which takes a commit's
     * milliseconds; then the object or the replica is gone, or the change
     * failed and it stays. Asked again at 1, 2, 4 ... 64 ms. */
    for (int pause = 1, waited = 0;; waited += pause, pause = pause < 64 ? pause * 2 : 64) {
        rc = call(c, OBJ(GET_REPLICAS), &req.base, &get_replicas_response__descriptor,
                  (ProtobufCMessage **)&resp);
        if (rc != SMP_EBUSY || waited >= KVC_BUSY_RETRY_MS) break;
        struct timespec ts = {0, (long)pause * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (rc < 0) return rc;
    memset(out, 0, sizeof(*out));
    out->size = resp->size;
    out->data_type = (int)resp->data_type;
    copy_str(out->group, sizeof(out->group), resp->group);
    if (resp->sha256.len == 32) memcpy(out->sha256, resp->sha256.data, 32);
    for (size_t i = 0; i < resp->n_replicas && i < KVC_MAX_REPLICAS; i++)
        copy_replica(&out->replicas[out->n_replicas++], resp->replicas[i]);
    if (c->track_leases && resp->lease_release && !release_unknown_here(c)) note_lease(c, key);
    get_replicas_response__free_unpacked(resp, NULL);
    return SMP_OK;
}

void kvc_track_read_leases(kvc *c, int on)
{
    c->track_leases = on != 0;
}

size_t kvc_read_leases_noted(const kvc *c)
{
    return c->leased_moves == rpcc_moves(c->conn) ? c->n_leased : 0;
}

int kvc_release_keys(kvc *c, const char *const *keys, size_t n, uint32_t *released,
                     uint32_t *not_held)
{
    ReleaseReadLeasesRequest req = RELEASE_READ_LEASES_REQUEST__INIT;
    ReleaseReadLeasesResponse *resp = NULL;
    req.keys = (char **)keys;
    req.n_keys = n;
    int rc = call(c, OBJ(RELEASE_READ_LEASES), &req.base, &release_read_leases_response__descriptor,
                  (ProtobufCMessage **)&resp);
    if (rc < 0) return rc;
    if (released) *released = resp->released;
    if (not_held) *not_held = resp->not_held;
    release_read_leases_response__free_unpacked(resp, NULL);
    return SMP_OK;
}

int kvc_release_read_leases(kvc *c, uint32_t *released)
{
    int rc = SMP_OK;
    uint32_t total = 0;
    forget_moved_leases(c);
    for (size_t at = 0; at < c->n_leased && !release_unknown_here(c); at += KVC_RELEASE_BATCH) {
        uint32_t got = 0;
        size_t n = c->n_leased - at < KVC_RELEASE_BATCH ? c->n_leased - at : KVC_RELEASE_BATCH;
        int r = kvc_release_keys(c, (const char *const *)&c->leased[at], n, &got, NULL);
        if (r == SMP_OK) {
            total += got;
        } else if (r == SMP_ENOTFOUND && strncmp(c->err, "service ", 8) == 0 &&
                   strstr(c->err, ") has no method ") != NULL) {
            /* The host's dispatcher answers a method it does not know
             * NOT_FOUND "service S (objects) has no method M" (the release's
             * own refusal begins "release read leases:" and names a key,
             * which may say anything): a master from before releases,
             * which the connection reached after the lookups (a move).
             * Not an error -- its leases expire, as an older master's do --
             * and not asked again while the connection stays there. */
            c->no_release_at = rpcc_moves(c->conn) + 1;
        } else if (r != SMP_ENOTFOUND && rc == SMP_OK) {
            rc = r; /* NOT_FOUND: none was held any more */
        }
    }
    for (size_t i = 0; i < c->n_leased; i++) free(c->leased[i]);
    c->n_leased = 0;
    if (released) *released = total;
    return rc;
}

int kvc_exists(kvc *c, const char *key, int *exists)
{
    KeyRequest req = KEY_REQUEST__INIT;
    ExistsResponse *resp = NULL;
    req.key = (char *)key;
    int rc = call(c, OBJ(EXISTS), &req.base, &exists_response__descriptor,
                  (ProtobufCMessage **)&resp);
    if (rc < 0) return rc;
    *exists = resp->exists;
    exists_response__free_unpacked(resp, NULL);
    return SMP_OK;
}

int kvc_report_corrupt(kvc *c, const char *key, const char *node, const char *segment,
                       uint64_t offset, int *queued)
{
    ReportCorruptRequest req = REPORT_CORRUPT_REQUEST__INIT;
    ReportCorruptResponse *resp = NULL;
    req.key = (char *)key;
    if (node != NULL && node[0] != '\0') {
        req.node = (char *)node;
        req.segment = (char *)(segment ? segment : "");
        req.offset = offset;
    }
    int rc = call(c, OBJ(REPORT_CORRUPT), &req.base, &report_corrupt_response__descriptor,
                  (ProtobufCMessage **)&resp);
    if (rc < 0) return rc;
    if (queued) *queued = resp->check_queued;
    report_corrupt_response__free_unpacked(resp, NULL);
    return SMP_OK;
}

int kvc_remove_prefix(kvc *c, const char *prefix, uint64_t *removed, uint64_t *skipped)
{
    RemovePrefixRequest req = REMOVE_PREFIX_REQUEST__INIT;
    RemovePrefixResponse *resp = NULL;
    req.prefix = (char *)prefix;
    int rc = call(c, OBJ(REMOVE_PREFIX), &req.base, &remove_prefix_response__descriptor,
                  (ProtobufCMessage **)&resp);
    if (rc < 0) return rc;
    if (removed) *removed = resp->removed;
    if (skipped) *skipped = resp->skipped;
    remove_prefix_response__free_unpacked(resp, NULL);
    return SMP_OK;
}

void kvc_list_free(char **keys, size_t n, char *next)
{
    for (size_t i = 0; keys && i < n; i++) free(keys[i]);
    free(keys);
    free(next);
}

int kvc_list(kvc *c, const char *prefix, const char *cursor, uint32_t limit,
             char ***keys, size_t *n, char **next)
{
    ListRequest req = LIST_REQUEST__INIT;
    ListResponse *resp = NULL;
    req.prefix = (char *)(prefix ? prefix : "");
    req.cursor = (char *)(cursor ? cursor : "");
    req.limit = limit;
    int rc = call(c, OBJ(LIST), &req.base, &list_response__descriptor, (ProtobufCMessage **)&resp);
    if (rc < 0) return rc;
    char **out = calloc(resp->n_keys ? resp->n_keys : 1, sizeof(*out));
    char *nx = strdup(resp->next_cursor);
    size_t i = 0;
    rc = out && nx ? SMP_OK : SMP_ENOMEM;
    for (; rc == SMP_OK && i < resp->n_keys; i++)
        if ((out[i] = strdup(resp->keys[i])) == NULL) rc = SMP_ENOMEM;
    list_response__free_unpacked(resp, NULL);
    if (rc < 0) {
        kvc_list_free(out, i, nx);
        return rc;
    }
    *keys = out;
    *n = i;
    *next = nx;
    return SMP_OK;
}

int kvc_group_set_managed(kvc *c, const char *group, int managed)
{
    GroupSetManagedRequest req = GROUP_SET_MANAGED_REQUEST__INIT;
    req.group = (char *)group;
    req.managed = managed != 0;
    return call(c, OBJ(GROUP_SET_MANAGED), &req.base, NULL, NULL);
}

static void gate_copy(kvc_gate *g, const GateInfo *gi)
{
    memset(g, 0, sizeof(*g));
    copy_str(g->name, sizeof(g->name), gi->name);
    g->confirmed = gi->confirmed;
    copy_str(g->how, sizeof(g->how), gi->how);
    copy_str(g->blocked_by, sizeof(g->blocked_by), gi->blocked_by);
}

void kvc_node_decode(kvc_node *dst, const NodeStatus *ns)
{
    memset(dst, 0, sizeof(*dst));
    copy_str(dst->id, sizeof(dst->id), ns->id);
    dst->up = ns->up;
    copy_str(dst->cold_dir, sizeof(dst->cold_dir), ns->cold_dir);
    if (dst->cold_dir[0] == '\0') {
        dst->cold = KVC_COLD_NONE;
        return;
    }
    if (!ns->cold_reported) {
        dst->cold = KVC_COLD_UNKNOWN; /* not 0 bytes: not known */
        return;
    }
    dst->cold_fail_no_space = ns->cold_write_failures_no_space;
    dst->cold_fail_other = ns->cold_write_failures_other;
    if (ns->cold_error != NULL && ns->cold_error[0] != '\0') {
        dst->cold = KVC_COLD_ERROR;
        copy_str(dst->cold_error, sizeof(dst->cold_error), ns->cold_error);
        return;
    }
    dst->cold = KVC_COLD_KNOWN;
    dst->cold_total = ns->cold_total_bytes;
    dst->cold_free = ns->cold_free_bytes;
    dst->cold_used = ns->cold_used_bytes;
}

int kvc_status_get(kvc *c, kvc_status *out)
{
    return kvc_status_get_nodes(c, out, NULL, NULL);
}

int kvc_status_get_nodes(kvc *c, kvc_status *out, kvc_node **nodes, size_t *n_nodes)
{
    StatusRequest req = STATUS_REQUEST__INIT;
    StatusResponse *resp = NULL;
    if (nodes != NULL) *nodes = NULL;
    if (n_nodes != NULL) *n_nodes = 0;
    int rc = call(c, HOST_SERVICE__HOST_SERVICE_ADMIN, ADMIN_METHOD__ADMIN_STATUS, &req.base,
                  &status_response__descriptor, (ProtobufCMessage **)&resp);
    if (rc < 0) return rc;
    if (nodes != NULL && n_nodes != NULL && resp->n_node_status > 0) {
        if ((*nodes = calloc(resp->n_node_status, sizeof(**nodes))) == NULL) {
            status_response__free_unpacked(resp, NULL);
            return SMP_ENOMEM;
        }
        for (size_t i = 0; i < resp->n_node_status; i++)
            kvc_node_decode(&(*nodes)[i], resp->node_status[i]);
        *n_nodes = resp->n_node_status;
    }
    memset(out, 0, sizeof(*out));
    copy_str(out->role, sizeof(out->role), resp->role);
    out->objects = resp->objects;
    out->memory_used = resp->memory_used;
    out->memory_capacity = resp->memory_capacity;
    out->segments = resp->segments;
    out->nodes = resp->nodes;
    out->oplog_last_seq = resp->oplog_last_seq;
    out->snapshot_seq = resp->snapshot_seq;
    out->oplog_appends = resp->oplog_appends;
    out->oplog_fsyncs = resp->oplog_fsyncs;
    out->oplog_read_only = resp->oplog_read_only;
    out->oplog_failed_seq = resp->oplog_failed_seq;
    copy_str(out->oplog_failed_why, sizeof(out->oplog_failed_why), resp->oplog_failed_why);
    copy_str(out->etcd_unreachable, sizeof(out->etcd_unreachable), resp->etcd_unreachable);
    copy_str(out->master_id, sizeof(out->master_id), resp->master_id);
    out->applied_seq = resp->applied_seq;
    copy_str(out->leader, sizeof(out->leader), resp->leader);
    out->n_masters_total = resp->n_masters;
    for (size_t i = 0; i < resp->n_masters && i < KVC_MAX_MASTERS; i++) {
        const MasterInfo *mi = resp->masters[i];
        kvc_master *m = &out->masters[out->n_masters++];
        copy_str(m->id, sizeof(m->id), mi->id);
        copy_str(m->role, sizeof(m->role), mi->role);
        copy_str(m->endpoint, sizeof(m->endpoint), mi->endpoint);
        m->applied_seq = mi->applied_seq;
        m->lag = mi->lag;
        m->ready = mi->ready;
        copy_str(m->reason, sizeof(m->reason), mi->reason);
    }
    for (size_t i = 0; i < resp->n_gates && i < KVC_MAX_GATES; i++)
        gate_copy(&out->gates[out->n_gates++], resp->gates[i]);
    status_response__free_unpacked(resp, NULL);
    return SMP_OK;
}

int kvc_gate_confirm(kvc *c, const char *name, kvc_gate *out)
{
    GateRequest req = GATE_REQUEST__INIT;
    GateInfo *resp = NULL;
    if (name == NULL) return SMP_EINVAL;
    req.name = (char *)name;
    int rc = call(c, HOST_SERVICE__HOST_SERVICE_ADMIN, ADMIN_METHOD__ADMIN_GATE_CONFIRM, &req.base,
                  &gate_info__descriptor, (ProtobufCMessage **)&resp);
    if (rc < 0) return rc;
    if (out != NULL) gate_copy(out, resp);
    gate_info__free_unpacked(resp, NULL);
    return SMP_OK;
}

int kvc_snapshot(kvc *c, uint64_t *seq)
{
    StatusRequest req = STATUS_REQUEST__INIT; /* no fields, same encoding */
    SnapshotResponse *resp = NULL;
    int rc = call(c, HOST_SERVICE__HOST_SERVICE_ADMIN, ADMIN_METHOD__ADMIN_SNAPSHOT, &req.base,
                  &snapshot_response__descriptor, (ProtobufCMessage **)&resp);
    if (rc < 0) return rc;
    if (seq) *seq = resp->seq;
    snapshot_response__free_unpacked(resp, NULL);
    return SMP_OK;
}

/* -- moving bytes ------------------------------------------------------------ */

void kvc_set_transport(kvc *c, kvc_transport t)
{
    c->transport = t;
}

/* The cached writable mapping of replica r's segment on this host (by its
 * path, or from its dedicated node's local socket), or NULL. A mapping of a
 * file the path no longer names (the node restarted on a new segment file)
 * or of a segment since grown is dropped and the file mapped again: nothing
 * here hands out pointers into a mapping beyond one copy. A node's refusal
 * leaves its cause in c->err (the caller reads through the data port). */
static seg_map *local_map(kvc *c, const kvc_replica *r)
{
    char err[800];
    const char *where = seg_map_where(r->segment_path, r->local_socket);
    if (c->transport == KVC_REMOTE || where[0] == '\0') return NULL;
    for (int i = 0; i < KVC_MAPS; i++) {
        if (!c->maps[i].map.base || strcmp(c->maps[i].path, where) != 0) continue;
        if (seg_map_check(&c->maps[i].map, where) == SEG_MAP_CURRENT) return &c->maps[i].map;
        /* the node restarted on a new file, or grew its segment: map again */
        seg_map_close(&c->maps[i].map);
        c->maps[i].path[0] = '\0';
    }
    for (int i = 0; i < KVC_MAPS; i++) {
        if (c->maps[i].map.base) continue;
        if (seg_map_open_at(r->segment_path, r->local_socket, 1, 0, &c->maps[i].map, err,
                            sizeof(err)) < 0) {
            snprintf(c->err, sizeof(c->err), "%s", err);
            return NULL;
        }
        snprintf(c->maps[i].path, sizeof(c->maps[i].path), "%s", where);
        return &c->maps[i].map;
    }
    return NULL;
}

/* The cached connection to a node's data server; *pooled (may be NULL): 1
 * when it is one an earlier call left open (the node may have dropped it
 * since), 0 when it was just made. */
static ndc_conn *node_conn(kvc *c, const char *addr, int tls, int *pooled)
{
    char err[256];
    if (pooled) *pooled = 0;
    for (int i = 0; i < KVC_NODES; i++)
        if (c->nodes[i].conn && strcmp(c->nodes[i].addr, addr) == 0) {
            if (pooled) *pooled = 1;
            return c->nodes[i].conn;
        }
    for (int i = 0; i < KVC_NODES; i++) {
        if (c->nodes[i].conn) continue;
        ndc_options o = {.timeout_ms = 30000, .socket_buffer_bytes = 4 << 20, .tls = tls,
                         .tls_ctx = c->node_tls};
        if (ndc_connect(addr, &o, &c->nodes[i].conn, err, sizeof(err)) < 0) {
            snprintf(c->err, sizeof(c->err), "node %s: %s", addr, err);
            return NULL;
        }
        snprintf(c->nodes[i].addr, sizeof(c->nodes[i].addr), "%s", addr);
        return c->nodes[i].conn;
    }
    snprintf(c->err, sizeof(c->err), "too many nodes for one client");
    return NULL;
}

static void drop_node_conn(kvc *c, ndc_conn *n)
{
    for (int i = 0; i < KVC_NODES; i++)
        if (c->nodes[i].conn == n) {
            ndc_close(n);
            c->nodes[i].conn = NULL;
        }
}

/* Write or read one memory replica's range. */
static int move_range(kvc *c, const kvc_replica *r, void *buf, uint64_t len, int write)
{
    seg_map *map = local_map(c, r);
    if (map != NULL)
        return write ? seg_map_put(map, r->offset, buf, len) : seg_map_get(map, r->offset, buf, len);
    if (c->transport == KVC_LOCAL) {
        if (r->local_socket[0] == '\0' && r->segment_path[0] == '\0')
            snprintf(c->err, sizeof(c->err), "segment %s of node %s cannot be mapped: the master "
                     "names neither its file nor a local socket (a shared node with "
                     "authentication on)", r->segment, r->node);
        return SMP_ENOTFOUND;
    }
    int pooled;
    ndc_conn *n = node_conn(c, r->data_addr, r->data_tls, &pooled);
    if (n == NULL) return SMP_EIO;
    int rc = write ? ndc_write(n, r->segment, r->offset, len, buf, r->ticket, r->ticket_len)
                   : ndc_read(n, r->segment, r->offset, len, buf, r->ticket, r->ticket_len);
    if (rc < 0 && !write && pooled && ndc_unanswered(n)) {
        /* A pooled connection the node had dropped (restarted): the read got
         * no reply byte, so it is sent once more on a fresh connection. */
        drop_node_conn(c, n);
        if ((n = node_conn(c, r->data_addr, r->data_tls, NULL)) == NULL) return SMP_EIO;
        rc = ndc_read(n, r->segment, r->offset, len, buf, r->ticket, r->ticket_len);
    }
    if (rc < 0) {
        snprintf(c->err, sizeof(c->err), "node %s: %s", r->data_addr, ndc_last_error(n));
        drop_node_conn(c, n);
    }
    return rc;
}

int kvc_put_bytes(kvc *c, const char *key, const void *data, uint64_t len, smp_data_type type,
                  const char *group, int overwrite, uint64_t *seq)
{
    kvc_replica where;
    uint8_t sha[32];
    int rc = kvc_put_start(c, key, len, type, group, overwrite, &where);
    if (rc < 0) return rc;
    SHA256(data, len, sha);
    if ((rc = move_range(c, &where, (void *)data, len, 1)) < 0) goto revoke;
    if ((rc = kvc_put_end(c, key, sha, seq)) < 0) goto revoke;
    return SMP_OK;
revoke:;
    char saved[sizeof(c->err)];
    int lost = c->transport_failed;
    memcpy(saved, c->err, sizeof(saved));
    if (!lost) kvc_put_revoke(c, key); /* a lost put end may have landed: leave it */
    memcpy(c->err, saved, sizeof(saved));
    c->transport_failed = lost;
    return rc;
}

/* Read a cold replica's data from its node's data server. */
static int read_cold(kvc *c, const kvc_replica *r, void *buf, uint64_t len)
{
    if (c->transport == KVC_LOCAL) {
        snprintf(c->err, sizeof(c->err), "cold file %s is read through node %s's data server, "
                 "not with the local transport", r->path, r->node);
        return SMP_ENOTFOUND;
    }
    if (r->data_addr[0] == '\0') {
        snprintf(c->err, sizeof(c->err), "node %s has no data server address", r->node);
        return SMP_EAGAIN;
    }
    int pooled;
    ndc_conn *n = node_conn(c, r->data_addr, r->data_tls, &pooled);
    if (n == NULL) return SMP_EIO;
    const char *slash = strrchr(r->path, '/'); /* the node wants the bare name */
    int rc = ndc_read_cold(n, slash != NULL ? slash + 1 : r->path, 0, len, buf, r->ticket,
                           r->ticket_len);
    if (rc < 0 && pooled && ndc_unanswered(n)) { /* as move_range: once, on a fresh one */
        drop_node_conn(c, n);
        if ((n = node_conn(c, r->data_addr, r->data_tls, NULL)) == NULL) return SMP_EIO;
        rc = ndc_read_cold(n, slash != NULL ? slash + 1 : r->path, 0, len, buf, r->ticket,
                           r->ticket_len);
    }
    if (rc < 0) {
        snprintf(c->err, sizeof(c->err), "node %s: %s", r->data_addr, ndc_last_error(n));
        drop_node_conn(c, n);
    }
    return rc;
}

/* The bytes read from cold replica r did not verify: have its node hash the
 * whole file (a node that finds it corrupt reports it to the master, which
 * drops the replica), and add what it answered to c->err. */
static void check_cold(kvc *c, const kvc_replica *r)
{
    char saved[sizeof(c->err)];
    memcpy(saved, c->err, sizeof(saved));
    ndc_conn *nc = node_conn(c, r->data_addr, r->data_tls, NULL); /* sets c->err when it fails */
    memcpy(c->err, saved, sizeof(saved));
    if (nc == NULL) return;
    const char *slash = strrchr(r->path, '/');
    int rc = ndc_check_cold_verdict(nc, r->data_addr, slash != NULL ? slash + 1 : r->path,
                                    r->ticket, r->ticket_len, "", c->err, sizeof(c->err));
    if (rc < 0) drop_node_conn(c, nc);
}

/* The bytes of key read from memory replica r did not verify: report the
 * replica (kvc_report_corrupt; the master has its node hash it), best
 * effort, and say so in c->err, which is kept otherwise. */
static void report_memory(kvc *c, const char *key, const kvc_replica *r)
{
    char saved[sizeof(c->err)];
    int lost = c->transport_failed;
    memcpy(saved, c->err, sizeof(saved));
    int rc = kvc_report_corrupt(c, key, r->node, r->segment, r->offset, NULL);
    memcpy(c->err, saved, sizeof(saved));
    c->transport_failed = lost;
    size_t n = strlen(c->err);
    if (rc == SMP_OK && n < sizeof(c->err))
        snprintf(c->err + n, sizeof(c->err) - n, " (the memory replica read was reported to the "
                 "master, which has its node check it)");
}

int kvc_get_into(kvc *c, const char *key, void *dst, uint64_t cap, uint64_t *len, int verify)
{
    kvc_object obj;
    int rc = kvc_get(c, key, &obj);
    if (rc < 0) return rc;
    *len = obj.size;
    if (obj.size > cap) {
        snprintf(c->err, sizeof(c->err), "%s is %llu bytes, the buffer %llu", key,
                 (unsigned long long)obj.size, (unsigned long long)cap);
        return SMP_ERANGE;
    }
    rc = SMP_EAGAIN;
    const kvc_replica *cold = NULL, *mem = NULL; /* the replica read */
    for (size_t i = 0; i < obj.n_replicas; i++) {
        if (obj.replicas[i].kind != SMP_REPLICA_MEMORY) continue;
        if ((rc = move_range(c, &obj.replicas[i], dst, obj.size, 0)) == SMP_OK) {
            mem = &obj.replicas[i];
            break;
        }
    }
    /* No memory replica: a complete cold one is read from its node's disk. */
    if (rc == SMP_EAGAIN) {
        for (size_t i = 0; i < obj.n_replicas; i++) {
            const kvc_replica *r = &obj.replicas[i];
            if (r->kind != SMP_REPLICA_COLD || r->status != KVC_REPLICA_COMPLETE) continue;
            if ((rc = read_cold(c, r, dst, obj.size)) == SMP_OK) { /* else: the next */
                cold = r;
                break;
            }
        }
    }
    if (rc == SMP_EAGAIN && c->err[0] == '\0')
        snprintf(c->err, sizeof(c->err), "%s has no memory or complete cold replica to read", key);
    if (rc == SMP_OK && verify) {
        uint8_t sha[32];
        SHA256(dst, obj.size, sha);
        if (memcmp(sha, obj.sha256, 32) != 0) {
            snprintf(c->err, sizeof(c->err), "%s: the bytes read do not match its SHA-256", key);
            if (cold != NULL) check_cold(c, cold);
            if (mem != NULL) report_memory(c, key, mem);
            rc = SMP_EPROTO;
        }
    }
    return rc;
}
