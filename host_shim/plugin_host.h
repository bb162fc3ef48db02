/* plugin_host.h -- loading plugins and keeping what they registered.
 *
 * host_plugins is the registry of every loaded plugin and of everything it
 * registered during init(): OpLog types, snapshot sections, its guard, tick,
 * RPC services, event handlers, metrics and the key spaces it claimed. The
 * loader opens a library with dlopen(RTLD_NOW | RTLD_LOCAL), resolves the one
 * entry symbol, checks the descriptor (struct size, ABI major exactly, minor
 * not newer than the host's, ABI tag, required capabilities), builds the host
 * API table and calls init().
 * A registration outside init() is refused with SMP_ESTATE. Any refused
 * registration, or a failing init(), unloads the plugin: everything it
 * registered is removed and the library is closed. Every refusal produces one
 * message naming the library, the field and both values.
 *
 * The services the table offers (OpLog append, objects, replica tasks,
 * snapshot I/O, RPC replies) are the master's; it supplies them through a
 * host_backend. A member left NULL makes the matching API call answer
 * SMP_ENOTSUP. Everything here runs on the loop thread. */
#ifndef HOST_PLUGIN_HOST_H
#define HOST_PLUGIN_HOST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "metrics.h"
#include "store_plugin.h"

/* What the master provides behind the host API table. ctx is passed back. */
typedef struct host_backend {
    void *ctx;
    uint64_t host_caps; /* SMP_HOST_CAP_* offered; 0 means SMP_HOST_CAPS_V1 */
    int (*oplog_append)(void *ctx, uint16_t type, uint16_t encver,
                        const void *payload, size_t len,
                        smp_durable_cb cb, void *arg);
    int (*object_get)(void *ctx, const char *key, smp_object_info *out);
    int (*group_list)(void *ctx, const char *group, const char *after_key,
                      size_t max, smp_object_visit_fn fn, void *arg);
    uint64_t (*group_count)(void *ctx, const char *group);
    /* owner: the descriptor name of the plugin that asks (it owns the group
     * from then on when managed is 1). */
    int (*group_set_managed)(void *ctx, const char *owner, const char *group, int managed,
                             smp_done_cb cb, void *arg);
    int (*ensure_cold)(void *ctx, const char *key, smp_done_cb cb, void *arg);
    int (*ensure_memory)(void *ctx, const char *key, smp_done_cb cb, void *arg);
    int (*release_memory)(void *ctx, const char *key, smp_done_cb cb, void *arg);
    int (*remove_object)(void *ctx, const char *key, smp_done_cb cb, void *arg);
    void (*memory_usage)(void *ctx, uint64_t *used, uint64_t *capacity);
    int (*is_leader)(void *ctx);
    int (*writer_write)(smp_writer *w, const void *buf, size_t len);
    void (*reader_data)(smp_reader *r, const uint8_t **data, size_t *len);
    int (*rpc_reply)(smp_rpc_call *call, int status, const uint8_t *body, size_t len);
    /* 1 when the gate was confirmed durably at runtime (may be NULL). */
    int (*gate_confirmed)(void *ctx, const char *gate);
    /* The set of plugin RPC services changed (a reload switched them): route
     * host_plugins_rpc_service_at() again (may be NULL). */
    void (*services_changed)(void *ctx);
    /* Route a call host_plugins_dispatch parked, once the reload or disable
     * ended, as if it had just arrived (NULL: it is answered SMP_ECANCELED). */
    void (*redispatch)(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len);
    /* smp_host_api.rpc_caller (ABI 1.2; NULL: every caller is an admin of no
     * tenant, authentication off). */
    int (*rpc_caller)(const smp_rpc_call *call, smp_caller *out);
    /* smp_host_api.rpc_revision_quota (ABI 1.3; NULL: no limits). */
    int (*rpc_revision_quota)(const smp_rpc_call *call, const char *tenant, uint64_t live,
                              uint64_t *limit);
    /* smp_host_api.objects_version (ABI 1.5; NULL: the plugins get 0, no
     * version, and ask object_get every time). */
    uint64_t (*objects_version)(void *ctx);
    /* smp_host_api.object_read_lease_end (ABI 1.6; NULL: the plugins get 0,
     * no lease known). */
    uint64_t (*object_read_lease_end)(void *ctx, const char *key);
    /* smp_host_api.objects_loss_version (ABI 1.7; NULL: the plugins get 0,
     * no version, and ask object_get every time). */
    uint64_t (*objects_loss_version)(void *ctx);
    /* smp_host_api.rpc_wait_for_nodes (ABI 1.8; NULL: the plugins get 0,
     * nothing is held). */
    int (*rpc_wait_for_nodes)(void *ctx, smp_rpc_call *call, const char *key,
                              const uint8_t *body, size_t len);
    /* smp_host_api.tick_soon (ABI 1.10): a tick was asked for at once (its
     * host_tick_reg.soon is set); run the due ticks once the loop is free
     * (NULL: they run at the next housekeeping round). */
    void (*tick_soon)(void *ctx);
} host_backend;

typedef struct host_plugins host_plugins;
typedef struct smp_host host_plugin; /* one loaded plugin is its own smp_host */

/* Where a loaded plugin stands (plugin_reload.c). */
typedef enum host_plugin_run {
    HOST_PLUGIN_ACTIVE = 0,    /* serving: RPCs, ticks, events, guard */
    HOST_PLUGIN_QUIESCING = 1, /* a reload or disable waits for its work in flight */
    HOST_PLUGIN_DISABLED = 2   /* RPCs refused, no tick, events or guard; replay and
                                  snapshot sections still go through it */
} host_plugin_run;

/* A registered OpLog type, as the host keeps it. */
typedef struct host_oplog_type_reg {
    smp_oplog_type t;     /* copied; fields the plugin did not know are zero */
    host_plugin *owner;
} host_oplog_type_reg;

typedef struct host_section_reg {
    smp_snapshot_section s;
    host_plugin *owner;
} host_section_reg;

typedef struct host_rpc_reg {
    smp_rpc_service s;    /* methods point at own[] (names into the plugin, valid until fini) */
    host_plugin *owner;
    smp_rpc_method own[]; /* the methods in the host's layout (min_role NONE before ABI 1.2) */
} host_rpc_reg;

typedef struct host_tick_reg {
    smp_tick t;
    host_plugin *owner;
    uint64_t cursor;
    uint64_t next_due_ms;
    int soon;    /* tick_soon() asked for it since it last ran (ABI 1.10) */
    int running; /* inside its tick (host_plugins_run_tick) */
} host_tick_reg;

/* Create an empty registry. cfg and metrics are borrowed and must outlive it.
 * be may be NULL (every service answers SMP_ENOTSUP). */
int host_plugins_create(host_plugins **out,
                        const host_config *cfg,
                        host_metrics *metrics,
                        const host_backend *be);

/* Replace the backend (the master sets it once its parts exist). */
void host_plugins_set_backend(host_plugins *reg, const host_backend *be);

/* Load one plugin. On failure returns a negative SMP_E* code, writes the
 * reason into err, and leaves the registry exactly as before. */
int host_plugins_load(host_plugins *reg,
                      const host_config_plugin *pc,
                      char *err,
                      size_t errlen);

/* Load every enabled plugin of cfg in order; on the first failure unload the
 * ones already loaded and return its code and message. With a config read
 * from a file (cfg->source set) the message names the entry as the
 * loader's do: "FILE:LINE: plugins[i].path: ..." for a library that did not
 * load or was refused, "FILE:LINE: plugins[i].config: ..." (the line of its
 * config: key, else of its path) when the plugin's init failed. */
int host_plugins_load_all(host_plugins *reg, char *err, size_t errlen);

/* Call fini() of every plugin (last loaded first), close the libraries and
 * free the registry. NULL is a no-op. */
void host_plugins_destroy(host_plugins *reg);

/* -- What was registered --------------------------------------------------- */

size_t host_plugins_count(const host_plugins *reg);
host_plugin *host_plugins_at(const host_plugins *reg, size_t i);
const smp_plugin_desc *host_plugin_desc(const host_plugin *p);
/* The library serving now (a reload with another path changes it). */
const char *host_plugin_path(const host_plugin *p);
/* The path its config entry names (what SIGHUP reloads from). */
const char *host_plugin_config_path(const host_plugin *p);
void *host_plugin_state(const host_plugin *p);

/* NULL when no loaded plugin registered the type. */
const host_oplog_type_reg *host_plugins_oplog_type(const host_plugins *reg, uint16_t type);
size_t host_plugins_n_oplog_types(const host_plugins *reg);
const host_oplog_type_reg *host_plugins_oplog_type_at(const host_plugins *reg, size_t i);

const host_section_reg *host_plugins_section(const host_plugins *reg, const char *name);
size_t host_plugins_n_sections(const host_plugins *reg);
const host_section_reg *host_plugins_section_at(const host_plugins *reg, size_t i);

const host_rpc_reg *host_plugins_rpc_service(const host_plugins *reg, uint16_t id);
size_t host_plugins_n_rpc_services(const host_plugins *reg);
const host_rpc_reg *host_plugins_rpc_service_at(const host_plugins *reg, size_t i);
size_t host_plugins_n_ticks(const host_plugins *reg);
host_tick_reg *host_plugins_tick_at(host_plugins *reg, size_t i);

/* 1 when some loaded plugin that is not disabled registered a guard. */
int host_plugins_has_guard(const host_plugins *reg);

/* 1 when a plugin whose descriptor name is plugin_name is loaded and not
 * disabled, else 0 (NULL arguments: 0). The host protects the managed groups
 * a plugin owns itself while the plugin is not active. */
int host_plugins_is_active(const host_plugins *reg, const char *plugin_name);

/* Ask every active (loaded, not disabled) plugin's guard; any veto (or
 * error) vetoes. Counts vetoes per reason in the metric
 * host_guard_vetoes_total{reason=...}. Each guard call is timed (see
 * host_plugin_timing); one over HOST_GUARD_BUDGET_NS is an overrun. Returns
 * SMP_GUARD_ALLOW or SMP_GUARD_VETO. With no guard to ask: ALLOW. */
int host_plugins_guard_check(host_plugins *reg, const smp_guard_request *req);

/* The same, for an object whose managed group belongs to owner: only that
 * plugin's guard is asked (when it is active); owner NULL asks every active
 * guard, as host_plugins_guard_check. *asked (may be NULL) receives how many
 * guards were asked: 0 means the verdict is ALLOW by default and the caller
 * applies its own rule. */
int host_plugins_guard_check_owner(host_plugins *reg,
                                   const char *owner,
                                   const smp_guard_request *req,
                                   int *asked);

/* -- Key spaces (ABI 1.9, claim_key_space) ------------------------------------- */

#define HOST_KEY_SPACE_MAX_BYTES 1024 /* the longest prefix: a key's limit */
#define HOST_KEY_SPACES_MAX 16        /* claims of one plugin */

/* A key prefix a loaded plugin claimed in its init. Claims of different
 * plugins never overlap (neither begins with the other), so a key lies in
 * at most one. The strings are borrowed until the plugin is unloaded or a
 * reload replaces it. */
typedef struct host_key_space {
    const char *prefix;
    const char *plugin;   /* the claiming plugin's descriptor name */
    int disabled;         /* 1 while the plugin is disabled: still claimed */
} host_key_space;

/* Every claim of every loaded plugin (a reload's staged instance's not yet),
 * in load order, then claim order: the count, and the i-th in *out (1; 0
 * when i is past the end). */
size_t host_plugins_n_key_spaces(const host_plugins *reg);
int host_plugins_key_space_at(const host_plugins *reg, size_t i, host_key_space *out);

/* The claim key lies in: 1 with *out filled, else 0 (NULL arguments: 0). */
int host_plugins_key_space_of(const host_plugins *reg, const char *key, host_key_space *out);

/* -- Timing plugin callbacks --------------------------------------------------- */

/* A guard must not block (DESIGN.md section 4): a call taking longer than
 * this (1 ms) is counted and logged as an overrun. A reconcile tick's budget
 * is its own deadline (smp_tick_budget.deadline_ms). */
#define HOST_GUARD_BUDGET_NS 1000000u

/* An overrun is logged at most once per this interval per plugin and kind
 * (tick, guard); the line says how many were not logged since the last. */
#define HOST_OVERRUN_LOG_INTERVAL_MS 10000u

/* The families where timings go, each labelled {plugin} with the plugin's
 * descriptor name. The master registers them (histograms in seconds,
 * counters); any member may be NULL (that metric is not kept). Overruns are
 * logged whether or not the families are set. */
typedef struct host_plugin_timing {
    host_metric *tick_seconds;      /* histogram: every reconcile tick */
    host_metric *tick_overruns;     /* counter: ticks that returned after their deadline */
    host_metric *guard_seconds;     /* histogram: every object guard call */
    host_metric *guard_overruns;    /* counter: guard calls over HOST_GUARD_BUDGET_NS */
} host_plugin_timing;

/* Use these families from now on (copied; the families are borrowed and must
 * outlive the registry or be replaced first). The series of every plugin
 * already loaded with a tick or guard are created at once (0), so they are
 * exported before the first call. NULL: stop recording. */
void host_plugins_set_timing(host_plugins *reg, const host_plugin_timing *t);

/* Call the tick of t with budget b and t's cursor, timed on the monotonic
 * clock: the duration goes to tick_seconds, and a return later than
 * b->deadline_ms (the now_ms clock) counts in tick_overruns and is logged
 * (rate-limited, see HOST_OVERRUN_LOG_INTERVAL_MS) with the plugin's name,
 * the time taken and the budget. Returns what the tick returned. */
int host_plugins_run_tick(host_plugins *reg, host_tick_reg *t, const smp_tick_budget *b);

/* Deliver an event to every handler whose mask wants it. */
void host_plugins_emit(host_plugins *reg, const smp_event *ev);

/* The name of a guard reason ("batch_evict"), for metrics and messages. */
const char *host_guard_reason_name(smp_guard_reason r);

/* Whether the gate flag is confirmed: in cfg (cluster key, or a bool of the
 * owner's block), or durably at runtime (host_backend.gate_confirmed).
 * Unknown names are never confirmed. */
int host_plugins_gate_confirmed(const host_plugins *reg,
                                const host_plugin *owner,
                                const char *gate);

/* -- Reload, disable, enable (plugin_reload.c) --------------------------------- */

/* The plugin whose descriptor name is name, or NULL. */
host_plugin *host_plugins_find(const host_plugins *reg, const char *name);

host_plugin_run host_plugin_run_state(const host_plugin *p);
/* "active", "quiescing", "disabled". */
const char *host_plugin_run_name(host_plugin_run r);
/* Successful reloads into this plugin's slot since the master started. */
uint64_t host_plugin_reloads(const host_plugin *p);
/* 1 when the plugin offers the ABI 1.1 hooks a reload needs. */
int host_plugin_can_reload(const host_plugin *p);

/* How a reload or disable ended. */
typedef struct host_plugin_change_result {
    int status;                 /* SMP_OK, or why it was refused (rolled back) */
    char reason[1024];          /* the refusal, "" on success */
    char name[128];
    char old_version[64];
    char new_version[64];       /* reload: the new instance's; else the old one's */
    char path[1024];            /* reload: the library now serving */
    uint64_t wall_ns;           /* from the request to the end */
    uint64_t pause_ns;          /* the plugin's calls held: quiesce start to resume */
} host_plugin_change_result;

/* Called once when an accepted reload or disable ended, on the loop thread. */
typedef void (*host_plugin_change_fn)(void *arg, const host_plugin_change_result *res);

/* How long a reload or disable waits for the work in flight before it is
 * refused (rolled back). */
#define HOST_QUIESCE_TIMEOUT_MS 10000u

/* Reload plugin `name` in place from path (NULL: the library it was loaded
 * from), as store_plugin.h's "Hot reload" describes. The steps up to the new
 * instance's init run now: a refusal there (no such plugin, another change
 * in progress, disabled, not reloadable, ABI or capability mismatch,
 * registrations it cannot take) returns a negative code with the reason in
 * err, leaves everything as it was, and done is never called. SMP_OK: the
 * old instance is quiescing; host_plugins_poll() carries the reload on and
 * done reports how it ended (a refusal then rolls back to the old instance,
 * which serves on). */
int host_plugins_reload(host_plugins *reg,
                        const char *name,
                        const char *path,
                        host_plugin_change_fn done,
                        void *arg,
                        char *err,
                        size_t errlen);

/* Disable plugin `name`: quiesce it like a reload, then keep it loaded but
 * withheld (HOST_PLUGIN_DISABLED). Immediate refusals as for a reload
 * (SMP_ENOTFOUND, SMP_EBUSY, SMP_ESTATE when already disabled). */
int host_plugins_disable(host_plugins *reg,
                         const char *name,
                         host_plugin_change_fn done,
                         void *arg,
                         char *err,
                         size_t errlen);

/* Enable a disabled plugin: active again, resume(SMP_RESUME_ENABLE).
 * SMP_ENOTFOUND, SMP_ESTATE (not disabled) with the reason in err. */
int host_plugins_enable(host_plugins *reg, const char *name, char *err, size_t errlen);

/* 1 while a reload or disable is in progress (the master polls then). */
int host_plugins_changing(const host_plugins *reg);

/* Carry a reload or disable on: once the quiescing plugin is idle (its
 * quiesce() answers SMP_OK and no host callback is owed to it), finish it
 * (export, import, self-check, switch, resume) or roll it back; past
 * HOST_QUIESCE_TIMEOUT_MS roll it back. Cheap when nothing is in progress. */
void host_plugins_poll(host_plugins *reg);

/* Route one RPC to the plugin owning service: its method's handler, or
 * parked while the owner is quiescing (answered later, after the change).
 * Returns what the handler returned (SMP_OK when parked), or a negative
 * code the caller answers with err's sentence: SMP_ENOTSUP when the owner
 * is disabled, SMP_ENOTFOUND for no such service or method, SMP_ENOMEM. */
int host_plugins_dispatch(host_plugins *reg,
                          uint16_t service,
                          uint16_t method,
                          smp_rpc_call *call,
                          const uint8_t *body,
                          size_t len,
                          char *err,
                          size_t errlen);

/* Print what was negotiated (per plugin: ABI, capabilities, OpLog types with
 * gates, sections, guard, tick, services) in a stable human-readable form. */
void host_plugins_describe(const host_plugins *reg, FILE *out);

#endif /* HOST_PLUGIN_HOST_H */
