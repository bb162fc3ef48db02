/* config.h -- the Store Master's configuration, parsed strictly from YAML.
 *
 * host_config_load() reads one YAML file with libyaml into a host_config. The
 * schema is closed: an unknown key, a value of the wrong type, a number out of
 * its range or an unknown enumeration name fails the whole load with one
 * message of the form "FILE:LINE: key.path: what is wrong". Every key has a
 * default, so an empty file is a valid config. Relative paths are resolved
 * against the directory of the config file. The files it names (TLS, the
 * embedded node's token) are read by host_config_load_files (config_files.c),
 * the one check --check and the master's start share.
 *
 * Each plugin entry carries its own block ("config:") verbatim as a tree of
 * host_config_node; the host never interprets it and hands it to the plugin
 * as a read-only view (smp_host_api.config_get with SMP_CONFIG_PLUGIN). */
#ifndef HOST_CONFIG_H
#define HOST_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "node_local.h"
#include "rpc_auth.h"
#include "rpc_limits.h"
#include "store_plugin.h"

/* A node of a plugin's own config block. */
typedef enum host_config_node_kind {
    HOST_CFG_SCALAR = 1,
    HOST_CFG_MAP = 2,
    HOST_CFG_SEQ = 3
} host_config_node_kind;

typedef struct host_config_node {
    host_config_node_kind kind;
    int line;                        /* 1-based line in the file */
    char *key;                       /* the key in its parent map, or NULL */
    char *scalar;                    /* HOST_CFG_SCALAR: the text */
    struct host_config_node **items; /* MAP / SEQ children, in file order */
    size_t n_items;
    /* Added with config.c: */
    int key_line;                    /* 1-based line of the key; 0 when no key */
    int quoted;                      /* SCALAR: 1 when written quoted or as a
                                        block scalar (| or >): a string, never
                                        a null, boolean or number */
} host_config_node;

typedef struct host_config_plugin {
    char *path;              /* resolved against the config file's directory */
    int enabled;             /* default 1 */
    host_config_node *block; /* the "config:" map; never NULL (empty map) */
    int line;                /* line of the entry, for messages */
    int path_line;           /* line of its path's value (0: not from a file) */
    int config_line;         /* line of its "config:" key (0: none written) */
} host_config_plugin;

/* Residency and migration-mode names of the RFC. */
typedef enum host_residency {
    HOST_RESIDENCY_HOT = 1,
    HOST_RESIDENCY_COLD = 2,
    HOST_RESIDENCY_MIXED = 3
} host_residency;

typedef enum host_migration_mode {
    HOST_MODE_PINNED = 1,
    HOST_MODE_MANUAL = 2,
    HOST_MODE_AUTO = 3
} host_migration_mode;

typedef enum host_oplog_backend {
    HOST_OPLOG_FILE = 1,
    HOST_OPLOG_ETCD = 2
} host_oplog_backend;

/* The cluster defaults of the RFC's Configuration section. */
typedef struct host_cluster_defaults {
    host_residency default_weight_preferred_residency; /* mixed */
    double default_weight_mixed_hot_ratio;             /* 0.5, in (0, 1) */
    host_migration_mode default_weight_migration_mode; /* auto */
    int weight_management_oplog_capability_confirmed;  /* false */
    int weight_lineage_oplog_capability_confirmed;     /* false */
    uint64_t weight_migration_cooldown_ms;             /* 30000 */
    uint64_t weight_migration_max_members_per_round;   /* 64, > 0 */
    uint64_t weight_migration_max_bytes_per_round;     /* 1 GiB, > 0 */
} host_cluster_defaults;

typedef struct host_config {
    char *source;            /* the file it was read from */
    char *base_dir;          /* its directory */

    /* listen: */
    char *listen_tcp;        /* "host:port" of the RPC endpoint, "" = off */
    char *listen_unix;       /* path of the RPC Unix socket, "" = off */
    char *listen_admin;      /* "host:port" of /metrics /health /role, "" = off */
    uint32_t max_frame_bytes;/* largest RPC frame accepted (64 MiB) */

    char *data_dir;          /* OpLog and snapshots */

    /* oplog: */
    host_oplog_backend oplog_backend;
    uint64_t oplog_segment_bytes;     /* roll a segment past this size */
    uint32_t oplog_max_batch_records; /* one group commit at most, > 0 */
    int oplog_preallocate;            /* allocate each segment whole when made */

    /* snapshot: */
    uint64_t snapshot_every_records;  /* take one after this many appends, 0 = never */
    uint32_t snapshot_keep;           /* newest snapshots kept, >= 1 */
    uint32_t snapshot_write_timeout_s; /* a writer still running this long is killed */

    /* fsck: the background deep check of every node's cold files */
    uint32_t fsck_every_s;            /* one starts this long after the last began, 0 = never */
    uint64_t fsck_bytes_per_s;        /* how fast it reads each node's cold files */

    /* memory: eviction watermarks as ratios of capacity */
    double memory_high_watermark;     /* (0, 1) */
    double memory_low_watermark;      /* (0, high) */
    int memory_evict_without_cold_copy; /* 0 (default): eviction keeps objects with no cold copy */

    /* ha: one of several masters sharing an OpLog in etcd */
    int ha_enabled;
    char *ha_id;                      /* this master's name in the cluster, "" = unset */
    char *ha_etcd_endpoints;          /* "host:port[,host:port...]" of etcd's members */
    char *ha_prefix;                  /* the cluster's keys in etcd, "/weight_mgmt/" */
    uint32_t ha_lease_ttl_s;          /* leader lease TTL, 2 */
    char *ha_advertise;               /* RPC endpoint clients are sent to, "" = listen.tcp */
    char *ha_snapshot_dir;            /* snapshots every master reads, "" = unset */
    uint64_t ha_gc_keep_records;      /* OpLog records kept below the newest snapshot */
    int ha_fast_failover;             /* standbys watch the leader's process, 1 */
    char *ha_etcd_tls_ca;             /* PEM CA bundle of etcd's server certificates: TLS to
                                         etcd; "" = plaintext */
    char *ha_etcd_tls_cert;           /* the masters' client certificate for etcd, "" = none */
    char *ha_etcd_tls_key;            /* its PEM private key */
    char *ha_etcd_user;               /* etcd's password auth: the masters' user, "" = none */
    char *ha_etcd_password_file;      /* a file holding its password (needs ha.etcd_tls_ca) */

    /* node: the embedded node of the master process */
    int node_embedded;                /* default 1 */
    char *node_segment_dir;           /* default /dev/shm/weight_mgmt */
    uint64_t node_segment_bytes;      /* default 1 GiB */
    char *node_cold_dir;              /* default <data_dir>/cold */
    char *node_id;                    /* default "embedded" */
    char *node_data_listen;           /* data server "host:port", default 127.0.0.1:0 */
    uint32_t node_poll_ms;            /* a node polls (heartbeats) this often, default 200 */
    uint32_t node_timeout_ms;         /* silent this long: the master marks it down, 3000 */
    int node_cold_verify_from_device; /* re-read a persisted file from the device, default 0 */
    int node_segment_prefault;        /* touch the segment's pages in the background, default 0 */
    uint32_t node_ticket_ttl_ms;      /* life of the tickets the master mints, default 60000 */
    uint32_t node_put_timeout_ms;     /* a put silent this long is taken back, default 65000 */
    int node_require_read_tickets;    /* the embedded node's reads need tickets, default 1 */
    int node_allow_insecure_reads;    /* needed to set node_require_read_tickets to 0 */
    char *node_tenant;                /* the embedded node dedicated to it; NULL/"": shared */
    char *node_local_socket;          /* dedicated: where the segment is handed out */
    node_local_peers node_local_peers; /* dedicated: who may map it (uids, gids) */
    char *tls_cert;                   /* PEM certificate (chain) of the RPC TCP port, "" = no TLS */
    char *tls_key;                    /* its PEM private key */
    char *tls_ca;                     /* PEM CA bundle the client certificates must chain to */
    int tls_verify_clients;           /* TLS clients must present a certificate of tls_ca */

    host_cluster_defaults cluster;

    host_config_plugin *plugins;
    size_t n_plugins;

    /* auth: credentials and roles (rpc_auth.h). Off by default (the
     * embedded `make run`); off with listen.tcp on a non-loopback address
     * is refused unless allow_insecure. */
    int auth_enabled;
    int auth_allow_insecure;
    char *auth_node_token_file;       /* the embedded node's token (admin), NULL/"" = none */
    rpc_auth_token *auth_tokens;      /* auth.tokens: SHA-256, tenant, role */
    size_t auth_n_tokens;
    rpc_limits_config auth_limits;    /* auth.limits (rpc_limits.h); all 0: unlimited */
    rpc_auth_cert *auth_certs;        /* auth.certificates: cn or san_uri, tenant, role */
    size_t auth_n_certs;

    /* The lines of the values that name files (0: not set in the file), for
     * the messages of host_config_load_files (config_files.c). */
    int tls_cert_line, tls_key_line, tls_ca_line, auth_node_token_file_line;
    int ha_etcd_tls_ca_line, ha_etcd_tls_cert_line, ha_etcd_tls_key_line;
    int ha_etcd_password_file_line;
} host_config;

/* Fill *cfg with every default. Strings are heap copies (freed by
 * host_config_free). Returns 0 or -ENOMEM. */
int host_config_defaults(host_config *cfg);

/* Parse `path` into *cfg (defaults first, then the file). On failure returns a
 * negative code, writes "FILE:LINE: key.path: cause" into err (NUL-terminated,
 * truncated to errlen) and leaves *cfg zeroed: nothing half-filled survives.
 * (config.c:) *cfg is overwritten, not freed, on entry; err may be NULL. The
 * codes: SMP_EINVAL (content refused), SMP_ERANGE (a number outside its
 * range), SMP_EIO (the file cannot be opened or read; the message carries
 * strerror), SMP_ENOMEM. Success: 0, release with host_config_free. */
int host_config_load(const char *path, host_config *cfg, char *err, size_t errlen);

/* Same, from a string in memory (name is used in messages). Relative paths
 * resolve against base_dir (NULL: the working directory). */
int host_config_load_string(const char *name,
                            const char *yaml,
                            const char *base_dir,
                            host_config *cfg,
                            char *err,
                            size_t errlen);

/* Free everything *cfg owns (plugin blocks included) and zero it. Safe on a
 * zeroed config and twice in a row. */
void host_config_free(host_config *cfg);

/* Look up `key` (dots separate map levels: "a.b.c") in a plugin block and
 * fill *out: "true"/"false" -> BOOL, an integer -> INT (d set too), a number
 * -> DOUBLE, anything else -> STRING. SMP_ENOTFOUND if absent or not a
 * scalar. Strings point into the tree. */
int host_config_node_get(const host_config_node *block,
                         const char *key,
                         smp_config_value *out);

/* The keys of the mapping at dotted `path` of a plugin block ("" for the
 * block; a NULL block is an empty one), each with its 1-based line, in file
 * order, until visit returns non-zero (returned). SMP_ENOTFOUND when path
 * names nothing, SMP_EINVAL when it names a scalar or a sequence. */
int host_config_node_keys(const host_config_node *block,
                          const char *path,
                          int (*visit)(void *arg, const char *key, uint32_t line),
                          void *arg);

/* Look up one of the cluster defaults by its RFC name. SMP_ENOTFOUND when the
 * name is not a cluster key. Residency and mode come back as their lowercase
 * names (STRING). */
int host_config_cluster_get(const host_config *cfg,
                            const char *key,
                            smp_config_value *out);

const char *host_residency_name(host_residency r);
const char *host_migration_mode_name(host_migration_mode m);

/* -- config_files.c: the files a config names ------------------------------ */

/* What host_config_load_files read. */
struct ssl_ctx_st;
typedef struct host_config_files {
    struct ssl_ctx_st *tls;                   /* the RPC port's TLS context (OpenSSL
                                                 SSL_CTX) of tls.cert, tls.key and
                                                 tls.ca; NULL: TLS off */
    char node_token[RPC_AUTH_TOKEN_MAX + 1];  /* auth.node_token_file's token, "" when
                                                 not read (auth off, no embedded node) */
    char *etcd_ca_pem;                        /* ha.etcd_tls_ca's text, NULL: plaintext */
    char *etcd_cert_pem;                      /* ha.etcd_tls_cert's, NULL: none */
    char *etcd_key_pem;                       /* ha.etcd_tls_key's (wiped when freed) */
    char etcd_password[RPC_AUTH_TOKEN_MAX + 1]; /* ha.etcd_password_file's password, ""
                                                 when none (wiped when freed) */
} host_config_files;

/* Read and check the files cfg names, as the master's start needs them --
 * the one check `store_master --check` and the start share: with tls.cert,
 * the TLS context of tls.cert, tls.key and tls.ca (each present, regular and
 * PEM, the key matching the certificate) and, when the embedded node dials
 * the TLS port (an embedded node, listen.unix off), that it would trust
 * tls.cert (host_config_node_trust; without tls.ca, that it is self-signed
 * first); with auth on and an embedded node, the token of
 * auth.node_token_file, which must be one of auth.tokens with role admin
 * (the node registers with it); with HA and ha.etcd_tls_ca, the CA and the
 * client certificate and key for etcd, loaded as a TLS client's (the key
 * matching the certificate) and kept as PEM text for the etcd client;
 * with HA and ha.etcd_password_file, etcd's password (read as a token
 * file). SMP_OK with *out filled (release with
 * host_config_files_free), or a negative SMP_E* code (SMP_EINVAL refused,
 * SMP_EIO unreadable) with *out zeroed and err "FILE:LINE: key: cause", LINE
 * that of the value naming the file. */
int host_config_load_files(const host_config *cfg, host_config_files *out, char *err,
                           size_t errlen);

/* The TLS context of tls.cert, tls.key and tls.ca (tls.cert set), read
 * and checked as host_config_load_files does at start, the embedded node's
 * trust included -- what SIGHUP serves from then on. SMP_OK with *out (free
 * with SSL_CTX_free), or host_config_load_files's codes and err. */
int host_config_load_tls(const host_config *cfg, struct ssl_ctx_st **out, char *err,
                         size_t errlen);

/* ha.etcd_tls_ca, _cert and _key (ha.etcd_tls_ca set), checked as a TLS
 * client's CA and certificate (each file present, PEM, the key matching
 * the certificate) as host_config_load_files does, then read into out's
 * etcd_*_pem -- what SIGHUP hands the etcd clients. SMP_OK, or its codes
 * and err (out may then hold some: host_config_files_free). */
int host_config_load_etcd_tls(const host_config *cfg, host_config_files *out, char *err,
                              size_t errlen);

/* Free what *f holds (the token wiped) and zero it; safe on a zeroed one. */
void host_config_files_free(host_config_files *f);

/* -- config_node_tls.c: the embedded node's trust in tls.cert ----------- */

/* The TCP endpoint "host:port" the embedded node dials (listen.unix off):
 * listen.tcp's host, 127.0.0.1 when it names none, and port (the port the
 * master really bound; 0 at --check) into out (cap bytes, truncated). */
void host_config_node_dial(const host_config *cfg, int port, char *out, size_t cap);

/* Whether the embedded node, dialing host_config_node_dial's host over TLS,
 * would trust tls.cert as it will at the start: the chain against tls.ca
 * (tls.cert itself without it), notBefore/notAfter against now, the dialed
 * IP or host name in the certificate, for a TLS server; with
 * tls.verify_clients, the same certificate presented back, verified against
 * tls.ca for a TLS client. Call only with tls.cert set and readable (the TLS
 * context built from it). SMP_OK, or SMP_EINVAL with why "tls.cert: cause"
 * naming the file, the address and the cause in words. */
int host_config_node_trust(const host_config *cfg, char *why, size_t cap);

#endif /* HOST_CONFIG_H */
