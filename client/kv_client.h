/* kv_client.h -- a blocking client of the master's plain object service.
 *
 * What weightctl's kv commands, the benchmarks and the integration tests use
 * to talk to a master: one connection (TCP "host:port" or a Unix socket path,
 * or a list of them "a,b,c" of an HA cluster: the transport finds the leader
 * and follows it, see rpc_client.h), one call at a time, each mapping to one
 * RPC of proto/host_rpc.proto.
 * Payload bytes do not travel here -- put start returns where the bytes go,
 * put end makes the object durable and visible. Every call returns 0 or a
 * negative SMP_E* code (the master's status, or the transport's); the
 * master's message for the last failure is kvc_error(). */
#ifndef WM_KV_CLIENT_H
#define WM_KV_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "node_data_wire.h"
#include "store_plugin.h"

typedef struct kvc kvc;

#define KVC_MAX_REPLICAS 8
#define KVC_REPLICA_COMPLETE 1  /* kvc_replica.status: 0 pending, 1 complete, 2 failed */

typedef struct kvc_replica {
    int kind;              /* SMP_REPLICA_MEMORY / SMP_REPLICA_COLD */
    int status;
    char node[64];
    char segment[64];
    uint64_t offset;
    uint64_t length;
    char path[512];          /* cold: the file (its last component is the cold name) */
    char data_addr[128];     /* the node's data server (memory and cold replicas) */
    char segment_path[512];  /* memory: the segment file (co-located clients; shared node, auth off) */
    char local_socket[108];  /* memory: the dedicated node's socket handing out the segment */
    uint8_t ticket[NDW_TICKET_MAX]; /* put start: the write ticket; get: the read ticket */
    size_t ticket_len;
    int data_tls;            /* the node's data server speaks TLS only (the master says) */
} kvc_replica;

typedef struct kvc_object {
    uint64_t size;
    int data_type;
    char group[256];
    uint8_t sha256[32];
    size_t n_replicas;
    kvc_replica replicas[KVC_MAX_REPLICAS];
} kvc_object;

#define KVC_MAX_MASTERS 16

/* One master of an HA cluster as the answering master knows it. */
typedef struct kvc_master {
    char id[64];
    char role[16];           /* "leader", "standby", "candidate" */
    char endpoint[256];
    uint64_t applied_seq;
    uint64_t lag;            /* records behind the durable head of the OpLog */
    int ready;               /* 0: it cannot replay (reason says why) */
    char reason[256];
} kvc_master;

/* A capability gate (StatusResponse.gates, ADMIN_GATE_CONFIRM). */
typedef struct kvc_gate {
    char name[129];
    int confirmed;
    char how[16];            /* "config", "record" (confirmed at runtime), "" */
    char blocked_by[512];    /* why it cannot be confirmed now, "" when it can */
} kvc_gate;

#define KVC_MAX_GATES 16

typedef struct kvc_status {
    char role[16];
    uint64_t objects;
    uint64_t memory_used;
    uint64_t memory_capacity;
    uint32_t segments;
    uint32_t nodes;
    uint64_t oplog_last_seq;
    uint64_t snapshot_seq;
    uint64_t oplog_appends;
    uint64_t oplog_fsyncs;
    int oplog_read_only;     /* the OpLog failed: read-only until a restart */
    uint64_t oplog_failed_seq;
    char oplog_failed_why[512]; /* its cause, "" when not failed */
    /* HA ("" / 0 / none without it): */
    char master_id[64];      /* the master that answered */
    uint64_t applied_seq;    /* the last OpLog record it applied */
    char leader[256];        /* the leader's endpoint, "" when unknown */
    size_t n_masters;        /* masters[0, n_masters): every master registered */
    size_t n_masters_total;  /* as many as the answer held (more than fit: n_masters is the cap) */
    kvc_master masters[KVC_MAX_MASTERS];
    size_t n_gates;          /* gates[0, n_gates): every gate a loaded plugin names */
    kvc_gate gates[KVC_MAX_GATES];
    char etcd_unreachable[700]; /* HA: the master that answered cannot reach etcd: since when,
                                   why ("": it can, or a master before this field) */
} kvc_status;

/* Connect to endpoint, a master list (rpcc_connect); timeout_ms bounds the
 * connect and every call (<= 0: none). err names the cause. */
int kvc_connect(const char *endpoint, int timeout_ms, kvc **out, char *err, size_t errlen);
/* The same, presenting token (rpcc_options.token: NULL is WEIGHT_TOKEN). */
int kvc_connect_token(const char *endpoint, int timeout_ms, const char *token, kvc **out,
                      char *err, size_t errlen);
/* The same with the transport options opt (rpcc_connect: token, TLS to the
 * master; timeout_ms as above) and the client context node_tls for nodes
 * whose data port speaks TLS (NULL: the environment's, as ndc_connect;
 * else a reference is taken for the connection's life). */
struct rpcc_options;
struct ssl_ctx_st;
int kvc_connect_opts(const char *endpoint, const struct rpcc_options *opt,
                     struct ssl_ctx_st *node_tls, kvc **out, char *err, size_t errlen);
/* The endpoint connected now (the one that answered last). */
const char *kvc_endpoint(const kvc *c);
void kvc_close(kvc *c);
/* The message of the last failed call ("" if none). */
const char *kvc_error(const kvc *c);
/* 1 when the last call failed in transport (the master's answer never came:
 * whether it acted is unknown); 0 when the master answered. Queries went
 * again to the next master of the list before failing; mutations only when
 * their request never left (see kv_client.c's resend_flags). */
int kvc_transport_failed(const kvc *c);
/* How often the connection moved to another master (a failover, a
 * NOT_LEADER followed, a reconnect): a put started before a move is not
 * known where the connection is now. */
uint64_t kvc_moves(const kvc *c);

int kvc_put_start(kvc *c, const char *key, uint64_t size, smp_data_type type, const char *group,
                  int overwrite, kvc_replica *where);
int kvc_put_end(kvc *c, const char *key, const uint8_t sha256[32], uint64_t *seq);
int kvc_put_revoke(kvc *c, const char *key);
/* Look key up: its size, type, group, SHA-256 and readable replicas. A
 * lookup met while a change that frees the object's bytes is being made
 * durable (SMP_EBUSY, for a commit's milliseconds) is asked again for about
 * 1 s, then SMP_EBUSY. SMP_ENOTFOUND, SMP_EAGAIN (no readable replica). */
int kvc_get(kvc *c, const char *key, kvc_object *out);
/* Read leases. Every kvc_get (and kvc_get_into) that succeeds takes a read
 * lease on the object for this connection: the master refuses to remove it
 * until the lease expires (10 s) or is given back. With tracking on, the
 * client notes each lookup answered by a master that takes releases
 * (GetReplicasResponse.lease_release; an older master does not, and its
 * leases only expire), and kvc_release_read_leases gives them all back at
 * once and forgets them -- call it once the bytes are read (or the read
 * failed). Off by default: a caller that never releases keeps nothing.
 * kvc_release_read_leases returns SMP_OK also when the master held none of
 * them any more (they expired, or the connection was lost and with it its
 * leases) and when it does not know the method (a master from before
 * releases, reached after the lookups: the leases expire; the connection
 * then notes and sends nothing until it moves to another master), else the
 * failure (the leases then expire on their own); *released (may be NULL)
 * counts the leases the master gave back. Lookups noted before the
 * connection moved (a lost master, a failover, a redirect) are forgotten,
 * not sent: their leases ended with the connection that took them, and the
 * master reached since holds none of them. */
void kvc_track_read_leases(kvc *c, int on);
/* Give back one lookup's read lease of this connection per key listed (at
 * most 4096), whatever was noted: SMP_OK with *released and *not_held (may
 * be NULL) as the master counted them, or its refusal -- SMP_ENOTFOUND when
 * this connection held none of them, or a key is outside the caller's
 * tenant (kvc_error() says which). */
int kvc_release_keys(kvc *c, const char *const *keys, size_t n, uint32_t *released,
                     uint32_t *not_held);
int kvc_release_read_leases(kvc *c, uint32_t *released);
/* Lookups noted on the connection as it is now and not given back yet
 * (tracking on). */
size_t kvc_read_leases_noted(const kvc *c);
/* Tell the master that bytes of key read from a memory replica did not
 * match the object's digest: node, segment and offset name the replica
 * read (node NULL or "": not known, every memory replica of key is
 * checked). The master checks it itself (the node hashes the replica) and
 * drops it only when it really is corrupt. SMP_OK with *queued (may be
 * NULL) 1 when this report queued a check (0: the key was checked
 * recently, or is being checked), or the master's refusal (SMP_ENOTFOUND:
 * no such key, or outside the caller's tenant; SMP_EINVAL: no such
 * replica; SMP_EAGAIN: too many checks waiting), kvc_error() saying why. */
int kvc_report_corrupt(kvc *c, const char *key, const char *node, const char *segment,
                       uint64_t offset, int *queued);
int kvc_exists(kvc *c, const char *key, int *exists);
int kvc_remove(kvc *c, const char *key);
int kvc_remove_prefix(kvc *c, const char *prefix, uint64_t *removed, uint64_t *skipped);
/* One page of keys under prefix after cursor ("" to start). *keys is an
 * array of *n malloc'd strings and *next a malloc'd cursor ("" at the end);
 * free them with kvc_list_free. */
int kvc_list(kvc *c, const char *prefix, const char *cursor, uint32_t limit,
             char ***keys, size_t *n, char **next);
void kvc_list_free(char **keys, size_t n, char *next);
int kvc_group_set_managed(kvc *c, const char *group, int managed);

/* -- Moving bytes ------------------------------------------------------------ */

/* How payload bytes travel: AUTO maps the node's segment file when it is on
 * this host (a plain memcpy, no socket) and uses the node's TCP data server
 * otherwise; LOCAL and REMOTE force one way (LOCAL fails when the file is
 * not here). */
typedef enum kvc_transport {
    KVC_AUTO = 0,
    KVC_LOCAL = 1,
    KVC_REMOTE = 2
} kvc_transport;
void kvc_set_transport(kvc *c, kvc_transport t);

/* Store len bytes under key: put start, write the range (ticketed), put end
 * with their SHA-256 (durable when this returns 0; *seq, if not NULL, gets
 * its OpLog sequence). On a failure after put start the put is revoked. */
int kvc_put_bytes(kvc *c, const char *key, const void *data, uint64_t len, smp_data_type type,
                  const char *group, int overwrite, uint64_t *seq);

/* Read key into dst (cap bytes): *len gets the object's size (SMP_ERANGE
 * when it exceeds cap, nothing copied). A memory replica is read through
 * its mapped segment or its node's data server; when the object has no
 * memory replica on a live node, a COMPLETE cold replica is read from its
 * node's data server (READ_COLD; not with KVC_LOCAL: SMP_ENOTFOUND). With
 * verify set the bytes must hash to the object's SHA-256 (SMP_EPROTO
 * otherwise) -- the node does not verify a cold file's bytes as it sends
 * them, so a reader of cold replicas should verify. SMP_EAGAIN: no
 * readable replica. */
int kvc_get_into(kvc *c, const char *key, void *dst, uint64_t cap, uint64_t *len, int verify);
int kvc_status_get(kvc *c, kvc_status *out);

/* A node as the master knows it (StatusResponse.node_status): whether it is
 * up, and its cold tier as it last reported it. */
typedef enum kvc_cold_state {
    KVC_COLD_NONE = 0,     /* the node has no cold directory */
    KVC_COLD_UNKNOWN,      /* the node does not report it (a store_node from before the report) */
    KVC_COLD_ERROR,        /* the node could not read the sizes (cold_error says why) */
    KVC_COLD_KNOWN         /* the sizes hold */
} kvc_cold_state;

typedef struct kvc_node {
    char id[64];
    int up;
    char cold_dir[512];
    kvc_cold_state cold;
    uint64_t cold_total;     /* the cold directory's file system, bytes (KVC_COLD_KNOWN) */
    uint64_t cold_free;      /* what the node may still write there */
    uint64_t cold_used;
    char cold_error[256];
    uint64_t cold_fail_no_space; /* cold writes that failed since the node started (not NONE/UNKNOWN) */
    uint64_t cold_fail_other;
} kvc_node;

/* kvc_status_get, and every node the master knows into *nodes (n_nodes of
 * them; malloc'd, the caller frees it; NULL and 0 from a master before the
 * per-node status, or a standby, which knows no nodes). */
int kvc_status_get_nodes(kvc *c, kvc_status *out, kvc_node **nodes, size_t *n_nodes);
/* One node of the answer into *dst (what kvc_status_get_nodes does per node). */
struct NodeStatus;
void kvc_node_decode(kvc_node *dst, const struct NodeStatus *ns);
/* Confirm a capability gate on the leader (durably); *out (may be NULL) is
 * the gate afterwards. The master's refusal (SMP_EGATE naming the master
 * that cannot replay a type, SMP_ENOTFOUND for a gate nobody names) is
 * returned with its message in kvc_error. */
int kvc_gate_confirm(kvc *c, const char *name, kvc_gate *out);
int kvc_snapshot(kvc *c, uint64_t *seq);

#endif /* WM_KV_CLIENT_H */
