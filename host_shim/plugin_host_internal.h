/* plugin_host_internal.h -- what the plugin host's files share.
 *
 * The plugin host is cut in three: plugin_host.c (the registry, the loader,
 * and the calls the master makes into plugins: guards, ticks, events),
 * plugin_host_api.c (the host API table each plugin gets: registration
 * members and the services it forwards to the master) and
 * plugin_host_describe.c (what --check prints). This header holds the
 * registry's structures and the helpers the files call across (prefix hp_).
 * Loop thread only. */
#ifndef HOST_PLUGIN_HOST_INTERNAL_H
#define HOST_PLUGIN_HOST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "plugin_host.h"

/* The size of each ABI struct as ABI 1.0 defined it: the end of its last 1.0
 * field. Frozen; a struct_size below it cannot hold every 1.0 field. */
#define ABI_V1_SIZE(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))
#define V1_DESC ABI_V1_SIZE(smp_plugin_desc, fini)
#define V1_OPLOG_TYPE ABI_V1_SIZE(smp_oplog_type, describe)
#define V1_SECTION ABI_V1_SIZE(smp_snapshot_section, load)
#define V1_GUARD ABI_V1_SIZE(smp_guard, check)
#define V1_TICK ABI_V1_SIZE(smp_tick, tick)
#define V1_RPC_SERVICE ABI_V1_SIZE(smp_rpc_service, n_methods)
#define V1_RPC_METHOD ABI_V1_SIZE(smp_rpc_method, handler)
#define V1_EVENT_HANDLER ABI_V1_SIZE(smp_event_handler, on_event)
#define V1_METRIC_DESC ABI_V1_SIZE(smp_metric_desc, label_names)

#define HOST_ERR_MAX 512

/* A registered event handler (internal: the header exposes no accessor). */
typedef struct host_event_reg {
    smp_event_handler e;
    host_plugin *owner;
} host_event_reg;

/* An ordered table of pointers to individually allocated entries, so a
 * pointer handed out stays valid while its entry is registered. */
typedef struct host_vec {
    void **v;
    size_t n;
    size_t cap;
} host_vec;

/* A metric family a plugin registered; name is the plugin's (valid until
 * fini), kept for describe. */
typedef struct host_plugin_metric {
    host_metric *f;
    const char *name;
    int shared;                      /* a reload's new instance took the old one's family */
} host_plugin_metric;

/* Rate limit of one plugin's overrun lines of one kind (tick or guard). */
typedef struct host_overrun_log {
    int logged;                      /* a line was written */
    uint64_t last_ms;                /* when (monotonic ms) */
    uint64_t suppressed;             /* overruns since then, not logged */
} host_overrun_log;

/* One loaded (or loading) plugin. */
struct smp_host {
    host_plugins *reg;               /* back pointer to the registry */
    char *path;                      /* copy of the config path */
    const char *file;                /* file name inside path, for messages */
    void *dl;                        /* dlopen handle */
    smp_plugin_desc desc;            /* copy; fields it did not know are zero */
    void *state;                     /* what init() stored in *plugin */
    const host_config_plugin *pc;    /* its config entry (borrowed) */
    int in_init;                     /* registrations accepted while set */
    int refused_rc;                  /* first refused registration (0: none) */
    char refused[HOST_ERR_MAX];      /* and its message */
    smp_guard guard;
    int has_guard;
    int has_tick;
    host_plugin_metric *metrics;     /* families it registered */
    size_t n_metrics;
    host_overrun_log tick_log;       /* its tick overrun lines */
    host_overrun_log guard_log;      /* its guard overrun lines */
    smp_host_api api;                /* the table handed to init() */
    char *key_spaces[HOST_KEY_SPACES_MAX]; /* prefixes it claimed (ABI 1.9), copies */
    size_t n_key_spaces;

    /* Hot reload, disable and enable (plugin_reload.c). */
    host_plugin_run run;             /* active, quiescing or disabled */
    unsigned inflight;               /* host callbacks it is owed (appends, tasks) */
    int quiesce_called;              /* quiesce() was called since the last resume */
    host_plugin *replaces;           /* non-NULL: a reload's new instance, staged */
    host_vec s_types;                /* its registrations while staged */
    host_vec s_sections;
    host_vec s_rpcs;
    host_vec s_ticks;
    host_vec s_handlers;
    uint64_t reloads;                /* successful reloads into this plugin's slot */
};

/* A request to a service of a quiescing plugin, held until the reload or
 * disable ends (then dispatched to whoever serves). */
typedef struct hp_parked {
    struct hp_parked *next;
    smp_rpc_call *call;
    uint16_t service;
    uint16_t method;
    uint8_t *body;
    size_t len;
} hp_parked;

/* The reload or disable in progress (at most one). */
typedef struct hp_change hp_change;

struct host_plugins {
    const host_config *cfg;
    host_metrics *metrics;
    host_backend be;                 /* zeroed when none was given */
    host_metric *guard_vetoes;       /* host_guard_vetoes_total{reason} */
    host_plugin_timing timing;       /* the master's timing families (zeroed: none) */
    host_vec plugins;                /* host_plugin *, load order */
    host_vec types;                  /* host_oplog_type_reg * */
    host_vec sections;               /* host_section_reg * */
    host_vec rpcs;                   /* host_rpc_reg * */
    host_vec ticks;                  /* host_tick_reg * */
    host_vec handlers;               /* host_event_reg * */
    hp_change *change;               /* a reload or disable in progress, or NULL */
    hp_parked *parked;               /* calls parked meanwhile, oldest first */
    hp_parked **parked_tail;
    int init_failed;                 /* the last hp_plugin_open failed in the
                                        plugin's init (not a refused registration) */
};

/* -- plugin_host.c ------------------------------------------------------------ */

/* Append item; SMP_ENOMEM when the table cannot grow. */
int hp_vec_push(host_vec *vec, void *item);
/* Free and drop every entry whose owner (the host_plugin * at owner_off
 * inside the entry) is p, keeping the others in order. */
void hp_vec_drop_owner(host_vec *vec, const host_plugin *p, size_t owner_off);
void hp_vec_free(host_vec *vec);
/* The file name inside path (for messages). */
const char *hp_file_name(const char *path);
const char *hp_str_or(const char *s, const char *dflt);
/* The capabilities this host offers (the backend's, else SMP_HOST_CAPS_V1). */
uint64_t hp_offered_caps(const host_plugins *reg);
/* Monotonic nanoseconds. */
uint64_t hp_clock_ns(void);

/* Open the library at path (a temporary copy of it when replaces is set,
 * so that the old instance stays mapped beside it), check the descriptor
 * and run init(); with replaces set, its registrations are staged (see
 * plugin_reload.c). On success *out is the plugin, not yet in the registry.
 * On failure: a negative code, the message in err, nothing left behind. */
int hp_plugin_open(host_plugins *reg,
                   const host_config_plugin *pc,
                   const char *path,
                   host_plugin *replaces,
                   host_plugin **out,
                   char *err,
                   size_t errlen);
/* fini (when init succeeded), drop its registrations (staged or not),
 * close the library, free the record. Not in reg->plugins any more. */
void hp_plugin_unload(host_plugin *p);
/* Drop the registrations of p from the registry's tables and the staged
 * ones; unregister its metric families except those marked shared. */
void hp_undo_registrations(host_plugin *p);
void hp_plugin_free(host_plugin *p);

/* -- plugin_reload.c ------------------------------------------------------------ */

/* At destroy: a change in progress ends as SMP_ECANCELED (the new instance
 * closed, done called), parked calls are answered SMP_ECANCELED. */
void hp_change_abandon(host_plugins *reg);

/* -- plugin_host_api.c -------------------------------------------------------- */

/* Copy an ABI struct the plugin passed, honouring its struct_size: smaller
 * than v1_size is SMP_EINVAL; otherwise min(struct_size, host size) bytes are
 * copied, the rest zeroed, and the copy's struct_size is that minimum. */
int hp_copy_abi(void *dst, size_t host_size, const void *src, size_t v1_size);
uint32_t hp_struct_size_of(const void *p);
/* Fill h->api: every member, the backend's services bound. */
void hp_api_fill(smp_host *h);
/* Point the context-free members (writer, reader, rpc_reply) at the backend. */
void hp_api_bind_backend(smp_host_api *api, const host_backend *be);
/* One log line on stderr, prefixed with the plugin's name. */
void hp_host_log(smp_host *h, smp_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* HOST_PLUGIN_HOST_INTERNAL_H */
