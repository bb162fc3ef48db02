/* store_plugin.h -- the Store Master plugin ABI, version 1.10.
 *
 * This header is the whole contract between the Store Master (the host) and a
 * plugin shared library. A plugin exports exactly one symbol,
 * smp_plugin_entry(), which returns a static descriptor. The host checks the
 * descriptor (size, ABI major and minor, ABI tag, required capabilities) before
 * it calls anything else, then calls init() with the host API table. Inside
 * init() -- and only there -- the plugin registers what it extends: OpLog record
 * types, snapshot sections, the object guard, the reconcile tick, RPC services,
 * event handlers and metrics, and (ABI 1.9) claims its key spaces. After init()
 * returns every register_* call, and claim_key_space, fails with SMP_ESTATE.
 *
 * Versioning. SMP_ABI_MAJOR changes only when an existing struct, field,
 * function or meaning changes; the host refuses a plugin whose major differs.
 * SMP_ABI_MINOR grows when something is appended; the host refuses a plugin
 * built against a newer minor than its own. Every struct that crosses the
 * boundary starts with struct_size and only ever grows at its end, so either
 * side can tell which fields the other knows. A plugin that calls a host API
 * member newer than ABI 1.0 checks host_api->struct_size first (see
 * SMP_HOST_HAS()).
 *
 * ABI 1.1 appends the hot-reload hooks to smp_plugin_desc (quiesce,
 * export_state, import_state, self_check, resume; see "Hot reload" below).
 * A 1.0 plugin (a descriptor without them) still loads in a 1.1 host: it
 * cannot be reloaded in place, and can still be disabled and enabled. A 1.1
 * plugin is refused by a 1.0 host (its minor is newer), as for any minor.
 *
 * ABI 1.2 appends authentication: the error codes SMP_EAUTH and SMP_EFORBIDDEN,
 * the role a caller needs for each RPC method (smp_rpc_method.min_role) and
 * the host API member rpc_caller(), which tells a handler the authenticated
 * tenant and role of the connection a call came on. A method of a plugin built
 * against 1.0 or 1.1 has no role: while the host's authentication is on, every
 * call of it is refused (fail closed); with authentication off it runs.
 *
 * ABI 1.3 appends the host API member rpc_revision_quota(), which tells a
 * plugin that keeps revisions per tenant (weight_mgmt) whether the host's
 * limits (auth.limits max_revisions) let a tenant hold one more, and counts
 * the refusal in the host's metrics.
 *
 * ABI 1.4 appends the host API member config_keys(), which lists the keys of
 * a mapping in the plugin's config block with their lines, so a plugin can
 * refuse a key it does not know (the host does not check the block).
 *
 * ABI 1.5 appends the host API member objects_version(), a number that
 * changes whenever what object_get() says about whether any object is
 * complete and readable may change, so a plugin can keep such answers (the
 * weight plugin's weight_is_exist does) and ask again only after it moved.
 *
 * ABI 1.6 appends the host API member object_read_lease_end(), when the read
 * leases readers hold on an object end, so a plugin whose remove_object() was
 * (or would be) refused for them waits for that instead of guessing.
 *
 * ABI 1.7 appends the host API member objects_loss_version(), the part of
 * objects_version() that can take a readable replica away: a plugin that
 * keeps "complete and readable" answers (weight_is_exist) keeps them while
 * objects are only added or gain replicas, as when other revisions are
 * published or copied to the cold tier.
 *
 * ABI 1.8 appends the host API member rpc_wait_for_nodes(): right after a
 * master starts or is promoted, its nodes register again one by one, and a
 * call that needs an object only a node still away holds (weight_is_exist)
 * can be held by the host until that node registers, instead of being
 * answered as if the object were unreadable.
 *
 * ABI 1.9 appends the host API member claim_key_space(): inside init() a
 * plugin reserves a key prefix as its own key space, and the host refuses
 * clients' object puts and removals there (see the member for exactly
 * what), so keys the plugin lays out can only change through its calls.
 *
 * ABI 1.10 appends the host API member tick_soon(): a plugin whose RPC or
 * durable callback just made work possible asks for its reconcile tick at
 * once instead of waiting out its period (the weight plugin steps a
 * replacement claim this way, one phase per durable record).
 *
 * Threading. Every callback into the plugin runs on the master's event-loop
 * thread, which owns all metadata; callbacks must not block and must not call
 * back into a host service that the function's comment says is not re-entrant
 * (the guard). Host services may be called only from the loop thread unless
 * their comment says otherwise.
 *
 * Ownership. Pointers passed into a callback are borrowed for the duration of
 * that call; whatever a plugin keeps it copies. Pointers a plugin passes in a
 * registration (names, method tables, descriptors) must stay valid until fini()
 * returns -- static storage is the usual answer. Memory returned by a host
 * service is owned by the caller only where the comment says so.
 *
 * Errors. Every function returning int returns SMP_OK (0) or a negative
 * SMP_E* code. When a call that takes a completion callback fails, the callback
 * is never invoked; when it succeeds, the callback is invoked exactly once,
 * later, on the loop thread -- never from inside the call itself.
 *
 * The header compiles as C11 and as C++. */
#ifndef STORE_PLUGIN_H
#define STORE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Versions and the ABI tag                                                  */
/* ------------------------------------------------------------------------ */

#define SMP_ABI_MAJOR 1
#define SMP_ABI_MINOR 10

/* The ABI tag pins what C cannot check across a dlopen: pointer width and byte
 * order. It is 'S' 'M' <pointer bytes> <1 little endian | 2 big endian>. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define SMP_ABI_ENDIAN 2u
#else
#define SMP_ABI_ENDIAN 1u
#endif
#define SMP_ABI_TAG                                                          \
    ((uint32_t)(('S' << 24) | ('M' << 16) | ((unsigned)sizeof(void *) << 8) | \
                SMP_ABI_ENDIAN))

/* The one symbol a plugin exports. */
#define SMP_PLUGIN_ENTRY_SYMBOL "smp_plugin_entry"

/* ------------------------------------------------------------------------ */
/* Error codes                                                               */
/* ------------------------------------------------------------------------ */

enum {
    SMP_OK = 0,
    SMP_EINVAL = -1,      /* bad argument or malformed input */
    SMP_ENOMEM = -2,      /* allocation failed */
    SMP_ENOTFOUND = -3,   /* no such key, group, type or section */
    SMP_EEXIST = -4,      /* duplicate registration or key */
    SMP_EBUSY = -5,       /* conflicting operation in progress */
    SMP_ESTATE = -6,      /* call not allowed now (e.g. register after init) */
    SMP_ERANGE = -7,      /* number outside the allowed range */
    SMP_EIO = -8,         /* disk or network I/O failed */
    SMP_EVETO = -9,       /* an object guard refused the action */
    SMP_EAGAIN = -10,     /* try again later (capacity, not leader yet) */
    SMP_ENOTSUP = -11,    /* capability not offered */
    SMP_EGATE = -12,      /* a capability gate flag is not confirmed */
    SMP_EPROTO = -13,     /* a message or record did not decode */
    SMP_EDURABILITY = -14,/* the OpLog could not make a record durable */
    SMP_ENOSPC = -15,     /* no memory or disk capacity left */
    SMP_ENOTLEADER = -16, /* this master is a standby */
    SMP_ECANCELED = -17,  /* the host shut down before completion */
    /* ABI 1.2: */
    SMP_EAUTH = -18,      /* no credentials, or credentials the host does not know */
    SMP_EFORBIDDEN = -19  /* the caller's role does not allow the request */
};

/* A stable name for a code ("SMP_EGATE"); never NULL. */
static inline const char *smp_strerror(int rc)
{
    switch (rc) {
    case SMP_OK: return "SMP_OK";
    case SMP_EINVAL: return "SMP_EINVAL";
    case SMP_ENOMEM: return "SMP_ENOMEM";
    case SMP_ENOTFOUND: return "SMP_ENOTFOUND";
    case SMP_EEXIST: return "SMP_EEXIST";
    case SMP_EBUSY: return "SMP_EBUSY";
    case SMP_ESTATE: return "SMP_ESTATE";
    case SMP_ERANGE: return "SMP_ERANGE";
    case SMP_EIO: return "SMP_EIO";
    case SMP_EVETO: return "SMP_EVETO";
    case SMP_EAGAIN: return "SMP_EAGAIN";
    case SMP_ENOTSUP: return "SMP_ENOTSUP";
    case SMP_EGATE: return "SMP_EGATE";
    case SMP_EPROTO: return "SMP_EPROTO";
    case SMP_EDURABILITY: return "SMP_EDURABILITY";
    case SMP_ENOSPC: return "SMP_ENOSPC";
    case SMP_ENOTLEADER: return "SMP_ENOTLEADER";
    case SMP_ECANCELED: return "SMP_ECANCELED";
    case SMP_EAUTH: return "SMP_EAUTH";
    case SMP_EFORBIDDEN: return "SMP_EFORBIDDEN";
    default: return "SMP_E(unknown)";
    }
}

/* ------------------------------------------------------------------------ */
/* Capabilities                                                              */
/* ------------------------------------------------------------------------ */

/* What the host offers. A plugin lists the bits it cannot work without in
 * required_host_caps (any bit the host lacks, or does not know, refuses the
 * load) and the bits it can use in optional_host_caps (unknown ones ignored). */
#define SMP_HOST_CAP_GROUPS        (UINT64_C(1) << 0) /* object groups, managed flag */
#define SMP_HOST_CAP_COLD_TIER     (UINT64_C(1) << 1) /* cold replicas on files */
#define SMP_HOST_CAP_DURABLE_OPLOG (UINT64_C(1) << 2) /* oplog_append + replay */
#define SMP_HOST_CAP_HA_STANDBY    (UINT64_C(1) << 3) /* standbys replay plugin types */
#define SMP_HOST_CAP_RPC_DISPATCH  (UINT64_C(1) << 4) /* plugin RPC services */
#define SMP_HOST_CAP_METRICS       (UINT64_C(1) << 5) /* plugin metrics on /metrics */
#define SMP_HOST_CAP_STATE_HANDOFF (UINT64_C(1) << 6) /* hot reload with section handoff */
#define SMP_HOST_CAPS_V1           (UINT64_C(0x7f))   /* every bit ABI 1.0 defines */

/* What a plugin offers; the host reports them and gates features on them. */
#define SMP_PLUGIN_CAP_OBJECT_GUARD (UINT64_C(1) << 0) /* protects managed groups */
#define SMP_PLUGIN_CAP_HOT_RELOAD   (UINT64_C(1) << 1) /* supports state handoff */
#define SMP_PLUGIN_CAP_WEIGHTS      (UINT64_C(1) << 2) /* weight revision lifecycle */
#define SMP_PLUGIN_CAP_LINEAGE      (UINT64_C(1) << 3) /* generation replacement */

/* ------------------------------------------------------------------------ */
/* Opaque host objects                                                       */
/* ------------------------------------------------------------------------ */

typedef struct smp_host smp_host;         /* the host, one per loaded plugin */
typedef struct smp_writer smp_writer;     /* a snapshot section being written */
typedef struct smp_reader smp_reader;     /* a snapshot section being read */
typedef struct smp_rpc_call smp_rpc_call; /* one RPC awaiting its reply */
typedef struct smp_metric smp_metric;     /* a registered metric family */

/* ------------------------------------------------------------------------ */
/* OpLog record types                                                        */
/* ------------------------------------------------------------------------ */

/* Host record types occupy 1..SMP_OPLOG_HOST_TYPE_MAX; a plugin registers
 * numbers above it. The weight plugin uses 8..12. */
#define SMP_OPLOG_HOST_TYPE_MAX 7
#define SMP_OPLOG_TYPE_MAX 65535

/* One durable record handed to replay (or describe). Borrowed for the call. */
typedef struct smp_record {
    uint32_t struct_size;
    uint64_t seq;           /* position in the log, strictly increasing */
    uint16_t type;
    uint16_t encver;        /* encoding version the payload was written with */
    const uint8_t *payload; /* the bytes given to oplog_append */
    size_t len;
    /* Fields above: ABI 1.0. */
} smp_record;

/* A plugin-defined record type. Replay must be idempotent (the payload carries
 * the complete post-mutation record) and deterministic: the same records give
 * the same state on the active master and on every standby. A replay that
 * returns an error stops recovery -- the host never skips a record. */
typedef struct smp_oplog_type {
    uint32_t struct_size;
    uint16_t type;          /* > SMP_OPLOG_HOST_TYPE_MAX, unique */
    uint16_t min_encver;    /* the range this build can replay */
    uint16_t max_encver;    /* and the version it writes */
    const char *name;       /* unique, e.g. "WEIGHT_METADATA_UPSERT" */
    /* Config flag that must be true before the active master may append this
     * type in HA mode (NULL: ungated). oplog_append answers SMP_EGATE while the
     * flag is false; replay is never gated. */
    const char *gate;
    int (*replay)(void *plugin, const smp_record *rec);
    /* Optional: one line of text for a log dump tool; returns the length it
     * would need (like snprintf) or a negative code. */
    int (*describe)(void *plugin, const smp_record *rec, char *buf, size_t cap);
    /* Fields above: ABI 1.0. */
} smp_oplog_type;

/* Completion of oplog_append: status SMP_OK with the record's sequence once it
 * is durable, or a negative code (SMP_EDURABILITY) when it never will be. */
typedef void (*smp_durable_cb)(void *arg, int status, uint64_t seq);

/* ------------------------------------------------------------------------ */
/* Snapshot sections                                                         */
/* ------------------------------------------------------------------------ */

/* A named section of the master's snapshot. The host frames and checksums
 * each section, so it can carry a section no loaded plugin claims verbatim.
 * save() runs in a child process the host forks from the loop thread, on a
 * copy-on-write copy of the state exactly as applied when the snapshot was
 * taken, while the master serves on; the child writes the file and exits.
 * So save() only reads the plugin's state and writes through the writer:
 * whatever it changes is lost with the child; only the forking thread
 * exists there, so it must not wait for a lock, condition or reply another
 * thread of the master or of the plugin could hold or owe (malloc and
 * stdio are safe); of the host API it calls only writer_write and log.
 * load() is given the whole
 * section; a snapshot without the section calls load() with an empty reader,
 * and a load() error fails the recovery closed (nothing half-loaded).
 * load() runs on the loop thread while the host may still be loading its own
 * objects on another; an object or group query (or any other call that reads
 * or changes objects) made inside load() waits for them, so it sees every
 * object of the snapshot. The OpLog is replayed after every section loaded,
 * so nothing can be appended yet: inside load() (and a record's replay) a
 * call that would append -- oplog_append, group_set_managed, remove_object,
 * a replica task that would change replicas -- answers SMP_ESTATE and changes
 * nothing, after the checks that need no append (SMP_ENOTFOUND for a key
 * that is absent, SMP_EVETO, ...). */
typedef struct smp_snapshot_section {
    uint32_t struct_size;
    const char *name;   /* unique, e.g. "weight_metadata" */
    uint16_t encver;    /* version save() writes; load() receives the stored one */
    int (*save)(void *plugin, smp_writer *w);
    int (*load)(void *plugin, smp_reader *r, uint16_t encver);
    /* Fields above: ABI 1.0. */
} smp_snapshot_section;

/* ------------------------------------------------------------------------ */
/* Object guard                                                              */
/* ------------------------------------------------------------------------ */

/* Every generic path that would remove, evict or rewrite an object or replica
 * asks the guard first, with one of these reasons. */
typedef enum smp_guard_reason {
    SMP_GUARD_BATCH_EVICT = 1,       /* eviction under memory pressure */
    SMP_GUARD_QUOTA_EVICT = 2,       /* eviction to honour a tenant quota */
    SMP_GUARD_REMOVE_KEY = 3,        /* single-key remove */
    SMP_GUARD_REMOVE_ALL = 4,        /* remove every object */
    SMP_GUARD_REMOVE_PATTERN = 5,    /* remove by prefix or pattern */
    SMP_GUARD_STALE_PUT_CLEANUP = 6, /* revoke of a put that never finished */
    SMP_GUARD_COLD_EVICT = 7,        /* eviction of a cold replica */
    SMP_GUARD_PUT_INTO_GROUP = 8,    /* put of a new object into a group */
    SMP_GUARD_UPSERT_INTO_GROUP = 9  /* overwrite of an object in a group */
} smp_guard_reason;
#define SMP_GUARD_REASON_MAX 9

typedef enum smp_data_type {
    SMP_DATA_KV = 0,
    SMP_DATA_METADATA = 1,
    SMP_DATA_WEIGHT = 2
} smp_data_type;

typedef enum smp_replica_kind {
    SMP_REPLICA_MEMORY = 0,
    SMP_REPLICA_COLD = 1
} smp_replica_kind;

typedef struct smp_guard_request {
    uint32_t struct_size;
    smp_guard_reason reason;
    const char *key;         /* the object (NULL for a whole-prefix request) */
    const char *group;       /* its group ("" when none) */
    int group_managed;       /* the host's persisted managed flag */
    smp_data_type data_type;
    smp_replica_kind replica_kind; /* which replica the action touches */
    /* Fields above: ABI 1.0. */
} smp_guard_request;

#define SMP_GUARD_ALLOW 0
#define SMP_GUARD_VETO 1

/* check() answers SMP_GUARD_ALLOW or SMP_GUARD_VETO. It must not block and
 * must not call any host service (it may be asked from inside one); a
 * negative return counts as a veto. The host counts vetoes per reason. */
typedef struct smp_guard {
    uint32_t struct_size;
    int (*check)(void *plugin, const smp_guard_request *req);
    /* Fields above: ABI 1.0. */
} smp_guard;

/* ------------------------------------------------------------------------ */
/* Reconcile tick                                                            */
/* ------------------------------------------------------------------------ */

typedef struct smp_tick_budget {
    uint32_t struct_size;
    uint64_t max_members; /* objects the round may touch */
    uint64_t max_bytes;   /* logical bytes the round may move */
    uint64_t deadline_ms; /* host clock (now_ms) by which to return */
    /* Fields above: ABI 1.0. */
} smp_tick_budget;

#define SMP_TICK_DONE 0 /* nothing left: wait for the next period */
#define SMP_TICK_MORE 1 /* work remains: call again soon with the cursor */

/* The host calls tick() every period_ms (sooner after SMP_TICK_MORE), never on
 * a standby when leader_only is set, and keeps *cursor between calls (0 on the
 * first call and after SMP_TICK_DONE). A plugin whose progress must survive a
 * restart persists it itself; the cursor is a hint, not durable state. */
typedef struct smp_tick {
    uint32_t struct_size;
    uint32_t period_ms;
    int leader_only;
    int (*tick)(void *plugin, const smp_tick_budget *budget, uint64_t *cursor);
    /* Fields above: ABI 1.0. */
} smp_tick;

/* ------------------------------------------------------------------------ */
/* RPC services                                                              */
/* ------------------------------------------------------------------------ */

/* A method handler receives the request body (the plugin's own encoding,
 * protobuf-c by convention) and answers through rpc_reply(), now or later:
 * keeping `call` and replying from a durable callback is how a reply waits for
 * durability. Every call must be answered exactly once; if the client has gone
 * the host drops the reply but still frees the call. A handler that returns a
 * negative code without replying gets that code sent as the reply. body is
 * never NULL: an empty body is len 0 at a valid address. */
typedef int (*smp_rpc_handler)(void *plugin,
                               smp_rpc_call *call,
                               const uint8_t *body,
                               size_t len);

/* Roles of an authenticated caller (ABI 1.2), each allowing what the one
 * before allows and more: a reader discovers and reads, a writer also
 * creates, changes and removes, an admin also runs gates, plugins, node and
 * cluster commands and acts across tenants. SMP_ROLE_NONE as a method's
 * min_role means "no rule": refused to everyone while authentication is on. */
typedef enum smp_role {
    SMP_ROLE_NONE = 0,
    SMP_ROLE_READER = 1,
    SMP_ROLE_WRITER = 2,
    SMP_ROLE_ADMIN = 3
} smp_role;

typedef struct smp_rpc_method {
    uint32_t struct_size;
    uint16_t method_id;
    const char *name;
    smp_rpc_handler handler;
    /* Fields above: ABI 1.0. Below: ABI 1.2. */
    smp_role min_role;    /* the least role allowed to call it (see smp_role) */
} smp_rpc_method;

#define SMP_RPC_HOST_SERVICE_MAX 15 /* service ids 0..15 belong to the host */

typedef struct smp_rpc_service {
    uint32_t struct_size;
    uint16_t service_id;  /* > SMP_RPC_HOST_SERVICE_MAX, unique */
    const char *name;
    const smp_rpc_method *methods;
    size_t n_methods;
    /* Fields above: ABI 1.0. */
} smp_rpc_service;

/* ------------------------------------------------------------------------ */
/* Events                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum smp_event_type {
    SMP_EVENT_OBJECT_COMPLETED = 1, /* a put ended: key, group, size */
    SMP_EVENT_REPLICA_LOST = 2,     /* a replica is gone: key, group, replica_kind */
    SMP_EVENT_NODE_UP = 3,          /* node registered: node */
    SMP_EVENT_NODE_DOWN = 4,        /* node stopped heartbeating: node */
    SMP_EVENT_MEMORY_PRESSURE = 5,  /* used crossed the high watermark: used, capacity */
    SMP_EVENT_ROLE_CHANGE = 6,      /* this master became active or standby: is_leader */
    /* Appended in ABI 1.1 (an enum value, no struct change: a plugin that
     * asks for it from a host that never sends it only misses the early
     * notice). A client's get-replicas found nothing to read: the object is
     * unknown (group "") or has no complete replica on a live node. key,
     * group. Sent on the active master per failed read, so a plugin must
     * handle it cheaply. */
    SMP_EVENT_READ_MISS = 7
} smp_event_type;

#define SMP_EVENT_MASK(t) (UINT32_C(1) << (t))

typedef struct smp_event {
    uint32_t struct_size;
    smp_event_type type;
    const char *key;
    const char *group;
    const char *node;
    smp_replica_kind replica_kind;
    uint64_t size;
    uint64_t used;
    uint64_t capacity;
    int is_leader;
    /* Fields above: ABI 1.0. */
} smp_event;

typedef struct smp_event_handler {
    uint32_t struct_size;
    uint32_t mask; /* SMP_EVENT_MASK() of the types wanted */
    void (*on_event)(void *plugin, const smp_event *ev);
    /* Fields above: ABI 1.0. */
} smp_event_handler;

/* ------------------------------------------------------------------------ */
/* Metrics                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum smp_metric_kind {
    SMP_METRIC_COUNTER = 1,
    SMP_METRIC_GAUGE = 2
} smp_metric_kind;

#define SMP_METRIC_MAX_LABELS 4

typedef struct smp_metric_desc {
    uint32_t struct_size;
    smp_metric_kind kind;
    const char *name;  /* Prometheus name, [a-zA-Z_:][a-zA-Z0-9_:]* */
    const char *help;
    const char *const *label_names; /* NULL-terminated, at most MAX_LABELS */
    /* Fields above: ABI 1.0. */
} smp_metric_desc;

/* ------------------------------------------------------------------------ */
/* Data the host reports                                                     */
/* ------------------------------------------------------------------------ */

typedef struct smp_object_info {
    uint32_t struct_size;   /* set by the caller to sizeof(smp_object_info) */
    const char *key;        /* borrowed until the host's next mutation */
    const char *group;
    uint64_t size;
    smp_data_type data_type;
    int complete;           /* put ended */
    int hard_pinned;
    uint32_t memory_replicas_readable;
    uint32_t cold_replicas_readable;
    uint8_t checksum[32];   /* SHA-256 of the bytes, when complete */
    /* Fields above: ABI 1.0. */
} smp_object_info;

/* Who made an RPC call (ABI 1.2), as the host authenticated the connection it
 * came on; filled by smp_host_api.rpc_caller. With authentication off,
 * auth_enabled is 0, role is SMP_ROLE_ADMIN and tenant is NULL: every caller
 * may do everything (the embedded default). With it on, tenant is the
 * caller's tenant (never NULL) and role its role; a plugin must answer a
 * non-admin caller only about that tenant's resources, and name another
 * tenant's resource as not found (never as forbidden). */
typedef struct smp_caller {
    uint32_t struct_size; /* set by the plugin to sizeof(smp_caller) */
    int auth_enabled;
    const char *tenant;   /* borrowed until the call is answered */
    smp_role role;
    /* Fields above: ABI 1.2. */
} smp_caller;

/* Visitor for bounded listings: return 0 to go on, non-zero to stop early. */
typedef int (*smp_object_visit_fn)(void *arg, const smp_object_info *obj);

/* Completion of a replica task or group change. */
typedef void (*smp_done_cb)(void *arg, int status);

typedef enum smp_config_scope {
    SMP_CONFIG_PLUGIN = 0,  /* the plugin's own block in the master config */
    SMP_CONFIG_CLUSTER = 1  /* the master's cluster defaults */
} smp_config_scope;

typedef enum smp_config_type {
    SMP_CONFIG_STRING = 1,
    SMP_CONFIG_INT = 2,
    SMP_CONFIG_DOUBLE = 3,
    SMP_CONFIG_BOOL = 4
} smp_config_type;

typedef struct smp_config_value {
    uint32_t struct_size;
    smp_config_type type;
    const char *s;   /* borrowed for the life of the host */
    int64_t i;
    double d;        /* also set for INT values */
    int b;
    /* Fields above: ABI 1.0. */
} smp_config_value;

typedef enum smp_log_level {
    SMP_LOG_DEBUG = 0,
    SMP_LOG_INFO = 1,
    SMP_LOG_WARN = 2,
    SMP_LOG_ERROR = 3
} smp_log_level;

/* ------------------------------------------------------------------------ */
/* The host API table                                                        */
/* ------------------------------------------------------------------------ */

typedef struct smp_host_api {
    uint32_t struct_size;   /* sizeof as the host was built */
    uint16_t abi_major;
    uint16_t abi_minor;
    uint64_t host_caps;     /* SMP_HOST_CAP_* this host offers */

    /* -- Registration: only inside init(), else SMP_ESTATE. ------------- */

    /* SMP_ERANGE for a number in the host range or a bad encver range,
     * SMP_EEXIST for a duplicate number or name, SMP_EINVAL for a missing
     * name or replay. */
    int (*register_oplog_type)(smp_host *h, const smp_oplog_type *t);
    /* SMP_EEXIST for a duplicate name. */
    int (*register_snapshot_section)(smp_host *h, const smp_snapshot_section *s);
    /* One guard per plugin: SMP_EEXIST for a second one. */
    int (*register_guard)(smp_host *h, const smp_guard *g);
    /* One tick per plugin: SMP_EEXIST for a second one. */
    int (*register_tick)(smp_host *h, const smp_tick *t);
    /* SMP_ERANGE for a host service id, SMP_EEXIST for a duplicate id. */
    int (*register_rpc_service)(smp_host *h, const smp_rpc_service *s);
    int (*register_event_handler)(smp_host *h, const smp_event_handler *e);
    /* *out stays valid until fini() returns. SMP_EEXIST for a duplicate name. */
    int (*register_metric)(smp_host *h, const smp_metric_desc *d, smp_metric **out);

    /* -- Metrics: any time, loop thread. ------------------------------- */

    /* label_values: as many as the family has names (NULL if none). */
    void (*metric_add)(smp_metric *m, const char *const *label_values, double v);
    void (*metric_set)(smp_metric *m, const char *const *label_values, double v);

    /* -- Snapshot section I/O: only inside save() / load(). ------------ */

    int (*writer_write)(smp_writer *w, const void *buf, size_t len);
    /* The whole section: *data borrowed until load() returns. */
    void (*reader_data)(smp_reader *r, const uint8_t **data, size_t *len);

    /* -- RPC ------------------------------------------------------------- */

    /* Answer a call: status SMP_OK with a body, or a negative code with an
     * optional message body. Exactly once per call; frees the call. */
    int (*rpc_reply)(smp_rpc_call *call, int status, const uint8_t *body, size_t len);

    /* -- Durable OpLog ----------------------------------------------------- */

    /* Append a record of a registered type; cb runs once it is durable (or
     * failed). SMP_EGATE when the type is gated and the flag is not confirmed
     * in HA mode, SMP_ENOTLEADER on a standby, SMP_ENOTFOUND for a type this
     * plugin did not register. The payload is copied before return. */
    int (*oplog_append)(smp_host *h,
                        uint16_t type,
                        uint16_t encver,
                        const void *payload,
                        size_t len,
                        smp_durable_cb cb,
                        void *arg);

    /* -- Objects and groups ------------------------------------------------ */

    /* Fill *out for key. SMP_ENOTFOUND when absent. */
    int (*object_get)(smp_host *h, const char *key, smp_object_info *out);
    /* Visit at most max members of group in key order, starting after
     * after_key (NULL: from the start). Returns the number visited. */
    int (*group_list)(smp_host *h,
                      const char *group,
                      const char *after_key,
                      size_t max,
                      smp_object_visit_fn fn,
                      void *arg);
    /* Number of objects in a group (0 when the group does not exist). */
    uint64_t (*group_count)(smp_host *h, const char *group);
    /* Persist the managed flag of a group (an OpLog record of the host's);
     * cb after it is durable. The calling plugin owns the group from then
     * on: only its guard is asked about the members, and while it is not
     * loaded the host refuses every removal, eviction, put into and
     * overwrite of them. SMP_EVETO when another plugin owns the group. */
    int (*group_set_managed)(smp_host *h,
                             const char *group,
                             int managed,
                             smp_done_cb cb,
                             void *arg);

    /* -- Replica tasks: asynchronous, completion on the loop thread. ------- */

    /* Make a verified cold replica of key exist (no-op if one does). */
    int (*ensure_cold)(smp_host *h, const char *key, smp_done_cb cb, void *arg);
    /* Make a memory replica of key exist (loads from cold if needed). */
    int (*ensure_memory)(smp_host *h, const char *key, smp_done_cb cb, void *arg);
    /* Release the memory replica of key. SMP_ESTATE when it is the last
     * readable replica and no verified cold replica exists; SMP_EBUSY while
     * a reader's read lease on key lasts (object_read_lease_end says until
     * when). */
    int (*release_memory)(smp_host *h, const char *key, smp_done_cb cb, void *arg);
    /* Remove key and every replica of it, bypassing the guard (the plugin is
     * the one deciding). */
    int (*remove_object)(smp_host *h, const char *key, smp_done_cb cb, void *arg);

    /* -- Environment --------------------------------------------------------- */

    /* Memory segments in use and their total capacity, in bytes. */
    void (*memory_usage)(smp_host *h, uint64_t *used, uint64_t *capacity);
    /* Look up a key of the plugin's own config block or of the cluster
     * defaults. SMP_ENOTFOUND when absent. Read-only. A scalar of the
     * plugin's block is typed by its text -- true/false BOOL, a decimal
     * integer INT, a number DOUBLE -- unless it is quoted: a quoted scalar
     * ("100") is a STRING, as YAML and the host's own keys have it. */
    int (*config_get)(smp_host *h,
                      smp_config_scope scope,
                      const char *key,
                      smp_config_value *out);
    /* Milliseconds on the host's monotonic clock; and wall-clock ms. */
    uint64_t (*now_ms)(smp_host *h);
    uint64_t (*wall_ms)(smp_host *h);
    /* 1 when this master is the active leader. */
    int (*is_leader)(smp_host *h);
    /* 1 when the master runs in HA mode (gates apply). */
    int (*ha_mode)(smp_host *h);
    /* Log one line, prefixed with the plugin's name. Any thread. */
    void (*log)(smp_host *h, smp_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;
    /* The host's allocator. Any thread. */
    void *(*alloc)(size_t n);
    void (*free)(void *p);

    /* Members above: ABI 1.0. New members go below this line, with the
     * minor version that added them. */

    /* ABI 1.2: fill *out (out->struct_size set by the caller; fields it does
     * not cover are left alone) with the caller of call, which must be a call
     * the plugin has not answered yet. SMP_EINVAL for NULL arguments. */
    int (*rpc_caller)(const smp_rpc_call *call, smp_caller *out);

    /* ABI 1.3: whether tenant, which holds live revisions now, may hold one
     * more under the host's limits for the server call came on (which must
     * not be answered yet). SMP_OK, with *limit (may be NULL) the tenant's
     * maximum or 0 when none applies (a call of an admin connection is not
     * limited); SMP_ENOSPC when live already reaches
     * the maximum (*limit set to it): the host has counted the refusal, the
     * plugin answers the call with SMP_ENOSPC and changes nothing.
     * SMP_EINVAL for a NULL call or tenant. */
    int (*rpc_revision_quota)(const smp_rpc_call *call,
                              const char *tenant,
                              uint64_t live,
                              uint64_t *limit);

    /* ABI 1.4: call visit(arg, key, line) for each key of the mapping at the
     * dotted path of the plugin's own block ("" for the block itself), in
     * file order; line is the key's 1-based line in the config file. Stops
     * at the first non-zero return and returns it. SMP_OK (also for a block
     * left out: it is empty), SMP_ENOTFOUND when path names nothing,
     * SMP_EINVAL when it names something other than a mapping or for a
     * scope other than SMP_CONFIG_PLUGIN. Read-only. */
    int (*config_keys)(smp_host *h,
                       smp_config_scope scope,
                       const char *path,
                       int (*visit)(void *arg, const char *key, uint32_t line),
                       void *arg);

    /* ABI 1.5: the objects' readable version. It moves (grows) whenever an
     * object is completed, replaced or removed, an object gains, loses or
     * changes a replica, or a node goes up or down: everything the complete
     * flag and the readable replica counts of object_get() depend on. While
     * two calls return the same non-zero value, object_get() answered the
     * same about every key's completeness and readable replicas in between,
     * so an answer taken at one version may be reused while the version is
     * unchanged (never after it moved). 0: this host cannot tell; ask
     * object_get() every time. Loop thread. */
    uint64_t (*objects_version)(smp_host *h);

    /* ABI 1.6: when the last read lease on key ends, on the now_ms() clock;
     * 0 when none is active (or key is absent). A replica lookup by a reader
     * takes one (the host's read lease time at most); the reader gives it
     * back when its read ends, its connection closing ends it, else it
     * expires. While one is active remove_object(key) is refused with
     * SMP_EBUSY. The answer can only move earlier by a release or later by a
     * new lookup, so a plugin that waits for it looks again now and then.
     * Loop thread. */
    uint64_t (*object_read_lease_end)(smp_host *h, const char *key);

    /* ABI 1.7: the objects' loss version. It moves (grows) whenever an
     * object might lose a complete replica object_get() counts as readable:
     * the object is removed, or replaced by one that lacks a complete
     * replica of the same kind on the same node for some complete replica
     * it had (a replica dropped, failed or moved to another node); a
     * segment is unmounted; a node goes down. It stays when objects are
     * completed, gain replicas or nodes come up. While two calls return the
     * same non-zero value, every object object_get() found complete in
     * between kept at least the readable replicas it was found with, so an
     * answer "complete, with a readable replica" may be reused while the
     * loss version is unchanged; any other answer may not (objects_version()
     * is for those). 0: this host cannot tell; ask object_get() every time.
     * Loop thread. */
    uint64_t (*objects_loss_version)(smp_host *h);

    /* ABI 1.8: call, not answered yet and whose request body is
     * body[0..len), cannot be answered as it should because key has no
     * readable replica now, and key may be waiting for a node: one that
     * holds a complete replica of it and has not registered since this
     * master began serving (it starts or was promoted, and waits for its
     * nodes for node.timeout_ms). Returns 1 when the host holds call: the
     * handler answers nothing and returns SMP_OK, and the host routes call
     * to the method's handler again, with a copy of the same body, once a
     * node registered or the wait ended (the handler may then hold it once
     * more, up to node.timeout_ms after it arrived); an answer to a held
     * call is refused with SMP_EBUSY and the call stays held. Returns 0 when it does
     * not (no such node is waited for, the call's own wait ended, too many
     * calls wait, or the host stops): the handler answers now. Loop thread,
     * from inside the call's handler. */
    int (*rpc_wait_for_nodes)(smp_host *h,
                              smp_rpc_call *call,
                              const char *key,
                              const uint8_t *body,
                              size_t len);

    /* ABI 1.9: claim every key that begins with prefix (copied; compared
     * byte for byte) as this plugin's key space. Only inside init(), like
     * the register_* members: SMP_ESTATE after it (logged, naming the
     * plugin and the prefix). From then on the host refuses, with
     * SMP_EVETO and a message naming the key (or the prefix asked), the
     * claimed prefix and the plugin, every change a client asks of the
     * host's object service (service 1) in that key space:
     *   - put start, of a new key or an overwrite (upsert), unless the
     *     request names a group this plugin owns (marked managed through
     *     group_set_managed); such a put goes on to the plugin's guard
     *     (SMP_GUARD_PUT_INTO_GROUP / SMP_GUARD_UPSERT_INTO_GROUP) as
     *     before, which decides which keys may join the group;
     *   - put end, unless the put is into such a group (a put started
     *     before the claim existed, across a reload, cannot complete);
     *   - remove of one key, whether it exists or not.
     * A remove by prefix, and remove-all (the prefix ""), skips the objects
     * in the key space (counted as vetoed), as it skips managed groups'
     * members, and removes the others it reaches.
     * Not refused: reads (replica lookups, exists, listing), put revoke
     * (it frees an upload's range and removes nothing stored), and all
     * that is not a client's object request: this plugin's own host
     * services (remove_object, the replica tasks, group_set_managed),
     * OpLog replay, snapshots, the nodes' registrations and replica
     * reports, the host's eviction (asked of the guard as before) and
     * fsck's repairs. A client's tenant rule comes first (another
     * tenant's key is answered as absent, as before).
     * While the plugin is disabled its key space stays refused, the
     * message saying it is disabled; a plugin that is not loaded claims
     * nothing (its managed groups stay under the host's own protection).
     * Claims are not persisted: every start and every reload's new
     * instance makes them again in init (the new instance's replace the
     * old one's).
     * Refusals, each failing the load with a message naming the plugin
     * and the prefix: a NULL or empty prefix or one that is not valid
     * UTF-8 (SMP_EINVAL), one longer than 1024 bytes (a key's limit) or a
     * plugin's 17th claim (SMP_ERANGE), a prefix that overlaps a claim of
     * another plugin or of this one -- either begins with the other
     * (SMP_EEXIST). A host of ABI 1.8 or older has no such member
     * (SMP_HOST_HAS(api, claim_key_space) is false): it cannot reserve a
     * key space and the plugin's keys stay as open as before. */
    int (*claim_key_space)(smp_host *h, const char *prefix);
    /* Fields above: ABI 1.9. */

    /* ABI 1.10: run this plugin's reconcile tick soon: once the loop has
     * handled what it is handling now, rather than when period_ms ends, as
     * if the last tick had returned SMP_TICK_MORE; the cursor is kept. For
     * work that became possible outside a tick (an RPC that asked for it, an
     * append that became durable), which would otherwise wait out the
     * period. Requests made before the tick runs are one request. A request
     * made from inside the plugin's own tick brings the next one at the
     * host's next housekeeping round (as SMP_TICK_MORE does), never at once,
     * so a tick cannot keep the loop to itself. Ticks still run only where
     * they run: not on a standby (leader_only), not while the plugin is
     * quiesced or disabled (a request then is dropped; the tick comes at
     * its period after it resumes). SMP_OK; SMP_ENOTFOUND when the plugin
     * registered no tick. Loop thread. A host of ABI 1.9 or older has no
     * such member (SMP_HOST_HAS(api, tick_soon) is false): the tick comes
     * at its period. */
    int (*tick_soon)(smp_host *h);
    /* Fields above: ABI 1.10. */
} smp_host_api;

/* True when the host's table is large enough to contain `member`. */
#define SMP_HOST_HAS(api, member)                                  \
    ((api)->struct_size >= offsetof(smp_host_api, member) +        \
                               sizeof(((smp_host_api *)0)->member))

/* ------------------------------------------------------------------------ */
/* Hot reload (ABI 1.1)                                                      */
/* ------------------------------------------------------------------------ */

/* The state one plugin instance hands to its successor. The exporter fills
 * format (its own numbering of the bytes) and data / len (allocated with the
 * host API's alloc; the host frees it with free once the import returned);
 * the host sets from_version to the exporter's descriptor version. */
typedef struct smp_handoff {
    uint32_t struct_size;
    uint16_t format;
    void *data;
    size_t len;
    const char *from_version; /* set by the host; borrowed for the import */
    /* Fields above: ABI 1.1. */
} smp_handoff;

/* Why resume() is called. */
typedef enum smp_resume_reason {
    SMP_RESUME_ROLLBACK = 1, /* the reload was refused: the old instance serves on */
    SMP_RESUME_HANDOFF = 2,  /* the new instance, after a successful import */
    SMP_RESUME_ENABLE = 3    /* weightctl plugin enable, after a disable */
} smp_resume_reason;

/* How the host reloads a plugin in place (weightctl plugin reload, SIGHUP),
 * each step on the loop thread:
 *
 *  1. the new library is loaded beside the old one and checked like any
 *     load (ABI, tag, required capabilities); its name must be the old
 *     one's, both must offer SMP_PLUGIN_CAP_HOT_RELOAD with the hooks below,
 *     its plugin capabilities must include the old one's, the OpLog record
 *     types it registers must include every type (and encoding version
 *     range) the old one replays, and its sections every section of the old;
 *  2. its init() runs: registrations go into a staging area (the same
 *     numbers and names as the old instance's are allowed there);
 *  3. the old instance is quiesced: the host stops its ticks, events and
 *     RPCs (new calls to its services wait in the host, parked), and calls
 *     quiesce() until it answers SMP_OK and every host callback the old
 *     instance is owed (oplog_append, group_set_managed, replica tasks) has
 *     run;
 *  4. export_state() of the old, import_state() of the new, self_check() of
 *     the new (when it has one);
 *  5. the registrations switch (OpLog types, sections, guard, tick, RPC
 *     services, event handlers; metric families of the same name are kept),
 *     resume(SMP_RESUME_HANDOFF) on the new, the parked calls go to it, and
 *     the old instance's fini() runs and its library is closed.
 *
 * Any refusal (ABI, capability, registration, quiesce timeout, import,
 * self-check) undoes the new instance (fini() when its init() succeeded,
 * library closed), resumes the old with SMP_RESUME_ROLLBACK and hands it
 * the parked calls: nothing is lost, and the reason is returned.
 *
 * A disabled plugin (weightctl plugin disable) is quiesced the same way and
 * then stays loaded: OpLog replay and its snapshot sections still go
 * through it (its state is kept exactly), but its RPC services answer
 * SMP_ENOTSUP ("plugin NAME is disabled"), its tick, events and guard are
 * not called. Enabling it calls resume(SMP_RESUME_ENABLE).
 *
 * The hooks (members of smp_plugin_desc from ABI 1.1; all NULL in a 1.0
 * descriptor):
 *
 *  quiesce(plugin): stop starting new work. SMP_OK once nothing the plugin
 *    started is still in flight (every RPC it holds answered, no record or
 *    task awaiting its callback); SMP_EAGAIN while something is -- the host
 *    asks again after the loop ran (callbacks keep arriving meanwhile).
 *    Called again after a rollback or enable only through resume().
 *  export_state(plugin, out): fill out (see smp_handoff) with everything the
 *    successor needs: the snapshot sections' bytes and whatever the plugin
 *    keeps only in memory. Called once, on a quiesced instance; the instance
 *    must stay usable (a rollback resumes it).
 *  import_state(plugin, in, why, why_cap): take the exported state into a
 *    freshly initialised instance. A format or version it cannot take is
 *    refused (negative code) with a sentence in why; the instance is then
 *    finalised, never resumed.
 *  self_check(plugin, why, why_cap): optional. After import, verify the
 *    instance is ready to serve; negative with a sentence refuses the reload.
 *  resume(plugin, reason): start ticks' work, events and RPCs again (the
 *    host restarts them); a plugin re-validates what it could have missed
 *    while it was quiesced (events are not delivered meanwhile). */

/* ------------------------------------------------------------------------ */
/* The plugin descriptor                                                     */
/* ------------------------------------------------------------------------ */

/* init() receives the host handle and API table (both valid until fini()
 * returns) and sets *plugin to the pointer every callback receives. It is the
 * only place registrations are accepted. If init() fails, the host undoes
 * everything the plugin registered, does not call fini(), and closes the
 * library. fini() runs once, on the loop thread, after the last callback. */
typedef struct smp_plugin_desc {
    uint32_t struct_size;       /* sizeof(smp_plugin_desc) as the plugin was built */
    uint16_t abi_major;         /* SMP_ABI_MAJOR */
    uint16_t abi_minor;         /* SMP_ABI_MINOR */
    uint32_t abi_tag;           /* SMP_ABI_TAG */
    const char *name;
    const char *version;
    uint64_t required_host_caps;
    uint64_t optional_host_caps;
    uint64_t plugin_caps;
    int (*init)(smp_host *h, const smp_host_api *api, void **plugin);
    void (*fini)(void *plugin);
    /* Fields above: ABI 1.0. Below: ABI 1.1, hot reload (see above). */
    int (*quiesce)(void *plugin);
    int (*export_state)(void *plugin, smp_handoff *out);
    int (*import_state)(void *plugin, const smp_handoff *in, char *why, size_t why_cap);
    int (*self_check)(void *plugin, char *why, size_t why_cap);
    void (*resume)(void *plugin, smp_resume_reason reason);
} smp_plugin_desc;

typedef const smp_plugin_desc *(*smp_plugin_entry_fn)(void);

/* Fill the version fields of a descriptor with the ones this header defines. */
#define SMP_PLUGIN_DESC_INIT                 \
    sizeof(smp_plugin_desc), SMP_ABI_MAJOR, \
        SMP_ABI_MINOR, SMP_ABI_TAG

/* The ABI 1.1 hooks of a plugin that does not hand its state over (it is
 * not reloaded in place; it can still be disabled and enabled). */
#define SMP_PLUGIN_NO_RELOAD NULL, NULL, NULL, NULL, NULL

#ifdef __cplusplus
}
#endif

#endif /* STORE_PLUGIN_H */
