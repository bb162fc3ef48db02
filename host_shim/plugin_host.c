/* plugin_host.c -- the plugin loader and the registry of what plugins extend.
 *
 * Loading is one transaction: dlopen(RTLD_NOW | RTLD_LOCAL), resolve the
 * entry symbol, check the descriptor field by field (size, ABI major, minor,
 * tag, required capabilities, init), then call init() with this plugin's own
 * host API table while its in_init flag is set. Every register_* member
 * validates and copies what it is given into the registry, tagged with its
 * owner; the first refusal is remembered. If init() fails or anything was
 * refused, the load fails closed: the owner's entries are dropped from every
 * table (preserving the order of the others), its metric families are
 * unregistered, fini() is not called, the library is closed and the plugin
 * record freed, so the registry is exactly what it was before the call.
 *
 * Every reconcile tick and guard call goes through here and is timed on the
 * monotonic clock: durations go to the histograms the master hands over
 * (host_plugins_set_timing), overruns (a tick past its deadline, a guard
 * call over HOST_GUARD_BUDGET_NS) to counters and to stderr, at most one
 * line per plugin and kind every HOST_OVERRUN_LOG_INTERVAL_MS.
 *
 * The rest of the API table forwards to the master through host_backend,
 * except what the loader owns itself: metrics, config lookups, clocks, the
 * gate and leader checks in front of oplog_append, logging and allocation.
 * Single-threaded (the loop thread), no locks. */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plugin_host.h"
#include "wm_errbuf.h"

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
};

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
};

/* -- Small helpers ------------------------------------------------------------ */

static int vec_push(host_vec *vec, void *item)
{
    if (vec->n == vec->cap) {
        size_t cap = vec->cap ? vec->cap * 2 : 8;
        void **grown = realloc(vec->v, cap * sizeof(*grown));
        if (grown == NULL) return SMP_ENOMEM;
        vec->v = grown;
        vec->cap = cap;
    }
    vec->v[vec->n++] = item;
    return SMP_OK;
}

/* Free and drop every entry whose owner (the host_plugin * stored at
 * owner_off inside the entry) is p, keeping the others in order. */
static void vec_drop_owner(host_vec *vec, const host_plugin *p, size_t owner_off)
{
    size_t kept = 0;
    for (size_t i = 0; i < vec->n; i++) {
        host_plugin *owner;
        memcpy(&owner, (char *)vec->v[i] + owner_off, sizeof(owner));
        if (owner == p) free(vec->v[i]);
        else vec->v[kept++] = vec->v[i];
    }
    vec->n = kept;
}

static void vec_free(host_vec *vec)
{
    free(vec->v);
    vec->v = NULL;
    vec->n = vec->cap = 0;
}

static const char *file_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

static const char *str_or(const char *s, const char *dflt)
{
    return s != NULL ? s : dflt;
}

static uint64_t offered_caps(const host_plugins *reg)
{
    return reg->be.host_caps != 0 ? reg->be.host_caps : SMP_HOST_CAPS_V1;
}

static void host_log(smp_host *h, smp_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Remember the first refused registration of a plugin in init (its message
 * becomes the load's, later ones are only returned), and return rc for the
 * plugin. Only reached inside init: outside_init() answers first. */
static int refuse(smp_host *h, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int refuse(smp_host *h, int rc, const char *fmt, ...)
{
    va_list ap;
    if (h->refused_rc != 0) return rc;
    h->refused_rc = rc;
    va_start(ap, fmt);
    vsnprintf(h->refused, sizeof(h->refused), fmt, ap);
    va_end(ap);
    return rc;
}

/* Copy an ABI struct the plugin passed, honouring its struct_size: smaller
 * than ABI 1.0 is SMP_EINVAL; otherwise min(struct_size, host size) bytes are
 * copied, the rest zeroed, and the copy's struct_size is that minimum. */
static int copy_abi(void *dst, size_t host_size, const void *src, size_t v1_size)
{
    uint32_t ss;
    memcpy(&ss, src, sizeof(ss));
    if (ss < v1_size) return SMP_EINVAL;
    if (ss > host_size) ss = (uint32_t)host_size;
    memset(dst, 0, host_size);
    memcpy(dst, src, ss);
    memcpy(dst, &ss, sizeof(ss)); /* the copy's size: the fields it holds */
    return SMP_OK;
}

static int outside_init(smp_host *h, const char *what)
{
    if (h->in_init) return 0;
    host_log(h, SMP_LOG_WARN, "%s: %s called outside init", h->file, what);
    return 1;
}

static uint32_t struct_size_of(const void *p)
{
    uint32_t ss;
    memcpy(&ss, p, sizeof(ss));
    return ss;
}

/* -- Registration members ----------------------------------------------------- */

static int reg_oplog_type(smp_host *h, const smp_oplog_type *t)
{
    host_plugins *reg = h->reg;
    host_oplog_type_reg *e;
    smp_oplog_type c;
    smp_config_value v;
    int rc;

    if (outside_init(h, "register_oplog_type")) return SMP_ESTATE;
    if (t == NULL) return refuse(h, SMP_EINVAL, "%s: register_oplog_type with no type", h->file);
    if (copy_abi(&c, sizeof(c), t, V1_OPLOG_TYPE) < 0)
        return refuse(h, SMP_EINVAL, "%s: oplog type struct_size %" PRIu32
                      " is smaller than ABI 1.0's %zu", h->file, struct_size_of(t), V1_OPLOG_TYPE);
    if (c.name == NULL || c.replay == NULL)
        return refuse(h, SMP_EINVAL, "%s: oplog type %u (%s) has no %s", h->file,
                      (unsigned)c.type, str_or(c.name, "?"), c.name == NULL ? "name" : "replay");
    if (c.type == 0)
        return refuse(h, SMP_ERANGE, "%s: oplog type 0 (%s) is reserved; plugin types start "
                      "above the host range 1..%d", h->file, c.name, SMP_OPLOG_HOST_TYPE_MAX);
    if (c.type <= SMP_OPLOG_HOST_TYPE_MAX)
        return refuse(h, SMP_ERANGE, "%s: oplog type %u (%s) is in the host range 1..%d",
                      h->file, (unsigned)c.type, c.name, SMP_OPLOG_HOST_TYPE_MAX);
    if (c.min_encver == 0 || c.min_encver > c.max_encver)
        return refuse(h, SMP_ERANGE, "%s: oplog type %u (%s) has encoding versions %u..%u "
                      "(need 1 <= min <= max)", h->file, (unsigned)c.type, c.name,
                      (unsigned)c.min_encver, (unsigned)c.max_encver);
    for (size_t i = 0; i < reg->types.n; i++) {
        const host_oplog_type_reg *o = reg->types.v[i];
        if (o->t.type == c.type)
            return refuse(h, SMP_EEXIST, "%s: oplog type %u (%s) is already registered as %s by %s",
                          h->file, (unsigned)c.type, c.name, o->t.name, o->owner->file);
        if (strcmp(o->t.name, c.name) == 0)
            return refuse(h, SMP_EEXIST, "%s: oplog type %u (%s) has the name of type %u (%s) "
                          "registered by %s", h->file, (unsigned)c.type, c.name,
                          (unsigned)o->t.type, o->t.name, o->owner->file);
    }
    if (c.gate != NULL) {
        int is_bool = host_config_cluster_get(reg->cfg, c.gate, &v) == SMP_OK &&
                      v.type == SMP_CONFIG_BOOL;
        if (!is_bool && h->pc->block != NULL)
            is_bool = host_config_node_get(h->pc->block, c.gate, &v) == SMP_OK &&
                      v.type == SMP_CONFIG_BOOL;
        if (!is_bool)
            return refuse(h, SMP_EINVAL, "%s: oplog type %u (%s) gate '%s' is not a boolean "
                          "config flag", h->file, (unsigned)c.type, c.name, c.gate);
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) return refuse(h, SMP_ENOMEM, "%s: out of memory registering oplog type %u",
                                 h->file, (unsigned)c.type);
    e->t = c;
    e->owner = h;
    if ((rc = vec_push(&reg->types, e)) < 0) {
        free(e);
        return refuse(h, rc, "%s: out of memory registering oplog type %u", h->file, (unsigned)c.type);
    }
    return SMP_OK;
}

static int reg_section(smp_host *h, const smp_snapshot_section *s)
{
    host_plugins *reg = h->reg;
    host_section_reg *e;
    smp_snapshot_section c;
    int rc;

    if (outside_init(h, "register_snapshot_section")) return SMP_ESTATE;
    if (s == NULL) return refuse(h, SMP_EINVAL, "%s: register_snapshot_section with no section", h->file);
    if (copy_abi(&c, sizeof(c), s, V1_SECTION) < 0)
        return refuse(h, SMP_EINVAL, "%s: snapshot section struct_size %" PRIu32
                      " is smaller than ABI 1.0's %zu", h->file, struct_size_of(s), V1_SECTION);
    if (c.name == NULL || c.save == NULL || c.load == NULL)
        return refuse(h, SMP_EINVAL, "%s: snapshot section '%s' has no %s", h->file,
                      str_or(c.name, "?"), c.name == NULL ? "name" : c.save == NULL ? "save" : "load");
    for (size_t i = 0; i < reg->sections.n; i++) {
        const host_section_reg *o = reg->sections.v[i];
        if (strcmp(o->s.name, c.name) == 0)
            return refuse(h, SMP_EEXIST, "%s: snapshot section '%s' is already registered by %s",
                          h->file, c.name, o->owner->file);
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) return refuse(h, SMP_ENOMEM, "%s: out of memory registering section '%s'", h->file, c.name);
    e->s = c;
    e->owner = h;
    if ((rc = vec_push(&reg->sections, e)) < 0) {
        free(e);
        return refuse(h, rc, "%s: out of memory registering section '%s'", h->file, c.name);
    }
    return SMP_OK;
}

static int reg_guard(smp_host *h, const smp_guard *g)
{
    smp_guard c;

    if (outside_init(h, "register_guard")) return SMP_ESTATE;
    if (g == NULL) return refuse(h, SMP_EINVAL, "%s: register_guard with no guard", h->file);
    if (copy_abi(&c, sizeof(c), g, V1_GUARD) < 0)
        return refuse(h, SMP_EINVAL, "%s: guard struct_size %" PRIu32 " is smaller than ABI 1.0's %zu",
                      h->file, struct_size_of(g), V1_GUARD);
    if (c.check == NULL) return refuse(h, SMP_EINVAL, "%s: guard has no check", h->file);
    if (h->has_guard)
        return refuse(h, SMP_EEXIST, "%s: a second object guard is refused (one per plugin)", h->file);
    h->guard = c;
    h->has_guard = 1;
    return SMP_OK;
}

static int reg_tick(smp_host *h, const smp_tick *t)
{
    host_tick_reg *e;
    smp_tick c;
    int rc;

    if (outside_init(h, "register_tick")) return SMP_ESTATE;
    if (t == NULL) return refuse(h, SMP_EINVAL, "%s: register_tick with no tick", h->file);
    if (copy_abi(&c, sizeof(c), t, V1_TICK) < 0)
        return refuse(h, SMP_EINVAL, "%s: tick struct_size %" PRIu32 " is smaller than ABI 1.0's %zu",
                      h->file, struct_size_of(t), V1_TICK);
    if (c.tick == NULL) return refuse(h, SMP_EINVAL, "%s: tick has no callback", h->file);
    if (c.period_ms == 0) return refuse(h, SMP_ERANGE, "%s: tick period_ms 0 is not allowed", h->file);
    if (h->has_tick)
        return refuse(h, SMP_EEXIST, "%s: a second reconcile tick is refused (one per plugin)", h->file);
    e = calloc(1, sizeof(*e));
    if (e == NULL) return refuse(h, SMP_ENOMEM, "%s: out of memory registering the tick", h->file);
    e->t = c;
    e->owner = h;
    if ((rc = vec_push(&h->reg->ticks, e)) < 0) {
        free(e);
        return refuse(h, rc, "%s: out of memory registering the tick", h->file);
    }
    h->has_tick = 1;
    return SMP_OK;
}

static int reg_rpc_service(smp_host *h, const smp_rpc_service *s)
{
    host_plugins *reg = h->reg;
    host_rpc_reg *e;
    smp_rpc_service c;
    int rc;

    if (outside_init(h, "register_rpc_service")) return SMP_ESTATE;
    if (s == NULL) return refuse(h, SMP_EINVAL, "%s: register_rpc_service with no service", h->file);
    if (copy_abi(&c, sizeof(c), s, V1_RPC_SERVICE) < 0)
        return refuse(h, SMP_EINVAL, "%s: rpc service struct_size %" PRIu32
                      " is smaller than ABI 1.0's %zu", h->file, struct_size_of(s), V1_RPC_SERVICE);
    if (c.name == NULL || (c.n_methods > 0 && c.methods == NULL))
        return refuse(h, SMP_EINVAL, "%s: rpc service %u has no %s", h->file, (unsigned)c.service_id,
                      c.name == NULL ? "name" : "methods");
    if (c.service_id <= SMP_RPC_HOST_SERVICE_MAX)
        return refuse(h, SMP_ERANGE, "%s: rpc service %u (%s) is in the host range 0..%d",
                      h->file, (unsigned)c.service_id, c.name, SMP_RPC_HOST_SERVICE_MAX);
    /* The method array is indexed with the host's sizeof(smp_rpc_method),
     * which is the plugin's as long as ABI 1.x has not grown that struct; a
     * minor that grows it must switch to a stride of methods[0].struct_size
     * here and in the RPC dispatcher. */
    for (size_t i = 0; i < c.n_methods; i++) {
        const smp_rpc_method *m = &c.methods[i];
        if (m->struct_size < V1_RPC_METHOD || m->name == NULL || m->handler == NULL)
            return refuse(h, SMP_EINVAL, "%s: rpc service %u (%s) method %zu is malformed "
                          "(struct_size, name or handler)", h->file, (unsigned)c.service_id, c.name, i);
        for (size_t j = 0; j < i; j++)
            if (c.methods[j].method_id == m->method_id)
                return refuse(h, SMP_EEXIST, "%s: rpc service %u (%s) has two methods with id %u "
                              "(%s and %s)", h->file, (unsigned)c.service_id, c.name,
                              (unsigned)m->method_id, c.methods[j].name, m->name);
    }
    for (size_t i = 0; i < reg->rpcs.n; i++) {
        const host_rpc_reg *o = reg->rpcs.v[i];
        if (o->s.service_id == c.service_id)
            return refuse(h, SMP_EEXIST, "%s: rpc service %u (%s) is already registered as %s by %s",
                          h->file, (unsigned)c.service_id, c.name, o->s.name, o->owner->file);
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) return refuse(h, SMP_ENOMEM, "%s: out of memory registering rpc service %u",
                                 h->file, (unsigned)c.service_id);
    e->s = c;
    e->owner = h;
    if ((rc = vec_push(&reg->rpcs, e)) < 0) {
        free(e);
        return refuse(h, rc, "%s: out of memory registering rpc service %u", h->file,
                      (unsigned)c.service_id);
    }
    return SMP_OK;
}

static int reg_event_handler(smp_host *h, const smp_event_handler *eh)
{
    host_event_reg *e;
    smp_event_handler c;
    int rc;

    if (outside_init(h, "register_event_handler")) return SMP_ESTATE;
    if (eh == NULL) return refuse(h, SMP_EINVAL, "%s: register_event_handler with no handler", h->file);
    if (copy_abi(&c, sizeof(c), eh, V1_EVENT_HANDLER) < 0)
        return refuse(h, SMP_EINVAL, "%s: event handler struct_size %" PRIu32
                      " is smaller than ABI 1.0's %zu", h->file, struct_size_of(eh), V1_EVENT_HANDLER);
    if (c.on_event == NULL) return refuse(h, SMP_EINVAL, "%s: event handler has no on_event", h->file);
    e = calloc(1, sizeof(*e));
    if (e == NULL) return refuse(h, SMP_ENOMEM, "%s: out of memory registering an event handler", h->file);
    e->e = c;
    e->owner = h;
    if ((rc = vec_push(&h->reg->handlers, e)) < 0) {
        free(e);
        return refuse(h, rc, "%s: out of memory registering an event handler", h->file);
    }
    return SMP_OK;
}

static int reg_metric(smp_host *h, const smp_metric_desc *d, smp_metric **out)
{
    smp_metric_desc c;
    host_metric *f = NULL;
    host_plugin_metric *grown;
    int rc;

    if (outside_init(h, "register_metric")) return SMP_ESTATE;
    if (d == NULL || out == NULL)
        return refuse(h, SMP_EINVAL, "%s: register_metric with no descriptor or out", h->file);
    if (copy_abi(&c, sizeof(c), d, V1_METRIC_DESC) < 0)
        return refuse(h, SMP_EINVAL, "%s: metric struct_size %" PRIu32 " is smaller than ABI 1.0's %zu",
                      h->file, struct_size_of(d), V1_METRIC_DESC);
    grown = realloc(h->metrics, (h->n_metrics + 1) * sizeof(*grown));
    if (grown == NULL) return refuse(h, SMP_ENOMEM, "%s: out of memory registering a metric", h->file);
    h->metrics = grown;
    rc = host_metrics_register(h->reg->metrics, c.kind, c.name, c.help, c.label_names, &f);
    if (rc == SMP_EEXIST)
        return refuse(h, rc, "%s: metric '%s' is already registered", h->file, c.name);
    if (rc < 0)
        return refuse(h, rc, "%s: metric '%s' is refused: %s (bad kind or name, or more than %d "
                      "labels)", h->file, str_or(c.name, "?"), smp_strerror(rc), SMP_METRIC_MAX_LABELS);
    h->metrics[h->n_metrics].f = f;
    h->metrics[h->n_metrics].name = c.name;
    h->n_metrics++;
    *out = f;
    return SMP_OK;
}

/* -- Metrics and environment members ------------------------------------------ */

static void api_metric_add(smp_metric *m, const char *const *values, double v)
{
    host_metric_add(m, values, v);
}

static void api_metric_set(smp_metric *m, const char *const *values, double v)
{
    host_metric_set(m, values, v);
}

static int enotsup_writer_write(smp_writer *w, const void *buf, size_t len)
{
    (void)w, (void)buf, (void)len;
    return SMP_ENOTSUP;
}

static void empty_reader_data(smp_reader *r, const uint8_t **data, size_t *len)
{
    (void)r;
    if (data != NULL) *data = NULL;
    if (len != NULL) *len = 0;
}

static int enotsup_rpc_reply(smp_rpc_call *call, int status, const uint8_t *body, size_t len)
{
    (void)call, (void)status, (void)body, (void)len;
    return SMP_ENOTSUP;
}

static int api_is_leader(smp_host *h)
{
    const host_backend *be = &h->reg->be;
    return be->is_leader != NULL ? be->is_leader(be->ctx) : 1;
}

static int api_ha_mode(smp_host *h)
{
    return h->reg->cfg->ha_enabled != 0;
}

/* Append a record of a type this plugin registered. Checks in order: the
 * type is this plugin's (SMP_ENOTFOUND), encver within its range
 * (SMP_ERANGE), the gate confirmed when HA is on (SMP_EGATE), this master
 * leads (SMP_ENOTLEADER); then the backend does the append and owns cb. */
static int api_oplog_append(smp_host *h, uint16_t type, uint16_t encver, const void *payload,
                            size_t len, smp_durable_cb cb, void *arg)
{
    const host_oplog_type_reg *t = host_plugins_oplog_type(h->reg, type);
    const host_backend *be = &h->reg->be;

    if (t == NULL || t->owner != h) return SMP_ENOTFOUND;
    if (payload == NULL && len > 0) return SMP_EINVAL;
    if (encver < t->t.min_encver || encver > t->t.max_encver) return SMP_ERANGE;
    if (h->reg->cfg->ha_enabled && t->t.gate != NULL &&
        !host_plugins_gate_confirmed(h->reg, h, t->t.gate))
        return SMP_EGATE;
    if (!api_is_leader(h)) return SMP_ENOTLEADER;
    if (be->oplog_append == NULL) return SMP_ENOTSUP;
    return be->oplog_append(be->ctx, type, encver, payload, len, cb, arg);
}

static int api_object_get(smp_host *h, const char *key, smp_object_info *out)
{
    const host_backend *be = &h->reg->be;
    if (key == NULL || out == NULL) return SMP_EINVAL;
    return be->object_get != NULL ? be->object_get(be->ctx, key, out) : SMP_ENOTSUP;
}

static int api_group_list(smp_host *h, const char *group, const char *after_key, size_t max,
                          smp_object_visit_fn fn, void *arg)
{
    const host_backend *be = &h->reg->be;
    if (group == NULL || fn == NULL) return SMP_EINVAL;
    return be->group_list != NULL ? be->group_list(be->ctx, group, after_key, max, fn, arg)
                                  : SMP_ENOTSUP;
}

static uint64_t api_group_count(smp_host *h, const char *group)
{
    const host_backend *be = &h->reg->be;
    if (group == NULL) return 0;
    return be->group_count != NULL ? be->group_count(be->ctx, group) : 0;
}

static int api_group_set_managed(smp_host *h, const char *group, int managed, smp_done_cb cb,
                                 void *arg)
{
    const host_backend *be = &h->reg->be;
    if (group == NULL) return SMP_EINVAL;
    return be->group_set_managed != NULL ? be->group_set_managed(be->ctx, group, managed, cb, arg)
                                         : SMP_ENOTSUP;
}

typedef int (*host_task_fn)(void *ctx, const char *key, smp_done_cb cb, void *arg);

static int run_task(smp_host *h, host_task_fn fn, const char *key, smp_done_cb cb, void *arg)
{
    if (key == NULL) return SMP_EINVAL;
    return fn != NULL ? fn(h->reg->be.ctx, key, cb, arg) : SMP_ENOTSUP;
}

static int api_ensure_cold(smp_host *h, const char *key, smp_done_cb cb, void *arg)
{
    return run_task(h, h->reg->be.ensure_cold, key, cb, arg);
}

static int api_ensure_memory(smp_host *h, const char *key, smp_done_cb cb, void *arg)
{
    return run_task(h, h->reg->be.ensure_memory, key, cb, arg);
}

static int api_release_memory(smp_host *h, const char *key, smp_done_cb cb, void *arg)
{
    return run_task(h, h->reg->be.release_memory, key, cb, arg);
}

static int api_remove_object(smp_host *h, const char *key, smp_done_cb cb, void *arg)
{
    return run_task(h, h->reg->be.remove_object, key, cb, arg);
}

static void api_memory_usage(smp_host *h, uint64_t *used, uint64_t *capacity)
{
    const host_backend *be = &h->reg->be;
    uint64_t u = 0, c = 0;
    if (be->memory_usage != NULL) be->memory_usage(be->ctx, &u, &c);
    if (used != NULL) *used = u;
    if (capacity != NULL) *capacity = c;
}

/* Look a key up in the plugin's block or the cluster defaults; *out is
 * written only on success. */
static int api_config_get(smp_host *h, smp_config_scope scope, const char *key, smp_config_value *out)
{
    smp_config_value v;
    int rc;
    if (key == NULL || out == NULL) return SMP_EINVAL;
    if (scope == SMP_CONFIG_PLUGIN) {
        if (h->pc->block == NULL) return SMP_ENOTFOUND;
        rc = host_config_node_get(h->pc->block, key, &v);
    } else if (scope == SMP_CONFIG_CLUSTER) {
        rc = host_config_cluster_get(h->reg->cfg, key, &v);
    } else {
        return SMP_EINVAL;
    }
    if (rc == SMP_OK) *out = v;
    return rc;
}

static uint64_t clock_ms(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t clock_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Record one timed call of p: its duration (took_ns) in the histogram, and
 * when it overran its budget (budget_ns, for the message) the counter and a
 * line on stderr -- unless a line for this plugin and kind was written less
 * than HOST_OVERRUN_LOG_INTERVAL_MS before; then it is only counted as
 * suppressed, and the next line says how many were. start_ns: when the call
 * began (monotonic), the time the rate limit goes by. */
static void timing_record(host_plugin *p,
                          host_metric *seconds,
                          host_metric *overruns,
                          host_overrun_log *log,
                          const char *what,
                          uint64_t took_ns,
                          int overran,
                          uint64_t budget_ns,
                          uint64_t start_ns)
{
    const char *values[1] = {str_or(p->desc.name, p->file)};
    uint64_t now_ms = (start_ns + took_ns) / 1000000u;
    host_metric_observe(seconds, values, (double)took_ns / 1e9);
    if (!overran) return;
    host_metric_add(overruns, values, 1);
    if (log->logged && now_ms - log->last_ms < HOST_OVERRUN_LOG_INTERVAL_MS) {
        log->suppressed++;
        return;
    }
    if (log->logged)
        fprintf(stderr,
                "store_master: plugin %s: %s overran its budget: took %.3f ms, budget %.3f ms "
                "(%" PRIu64 " more not logged since the last line)\n",
                values[0], what, (double)took_ns / 1e6, (double)budget_ns / 1e6, log->suppressed);
    else
        fprintf(stderr,
                "store_master: plugin %s: %s overran its budget: took %.3f ms, budget %.3f ms "
                "(logged at most once every %u s)\n",
                values[0], what, (double)took_ns / 1e6, (double)budget_ns / 1e6,
                HOST_OVERRUN_LOG_INTERVAL_MS / 1000u);
    log->logged = 1;
    log->last_ms = now_ms;
    log->suppressed = 0;
}

static uint64_t api_now_ms(smp_host *h)
{
    (void)h;
    return clock_ms(CLOCK_MONOTONIC);
}

static uint64_t api_wall_ms(smp_host *h)
{
    (void)h;
    return clock_ms(CLOCK_REALTIME);
}

static const char *level_name(smp_log_level level)
{
    switch (level) {
    case SMP_LOG_DEBUG: return "DEBUG";
    case SMP_LOG_INFO: return "INFO";
    case SMP_LOG_WARN: return "WARN";
    case SMP_LOG_ERROR: return "ERROR";
    }
    return "LOG";
}

/* One line on stderr: "[<plugin name>] LEVEL message". Formatted into one
 * buffer first so concurrent lines do not interleave. */
static void host_log(smp_host *h, smp_log_level level, const char *fmt, ...)
{
    char line[1024];
    int n;
    va_list ap;
    const char *who = h->desc.name != NULL ? h->desc.name : h->file;

    n = snprintf(line, sizeof(line), "[%s] %s ", who, level_name(level));
    if (n < 0 || (size_t)n >= sizeof(line)) n = 0;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}

static void *api_alloc(size_t n)
{
    return malloc(n);
}

static void api_free(void *p)
{
    free(p);
}

/* Point the three context-free members (their object carries its own state)
 * straight at the backend, or at the refusing stubs. */
static void api_bind_backend(smp_host_api *api, const host_backend *be)
{
    api->writer_write = be->writer_write != NULL ? be->writer_write : enotsup_writer_write;
    api->reader_data = be->reader_data != NULL ? be->reader_data : empty_reader_data;
    api->rpc_reply = be->rpc_reply != NULL ? be->rpc_reply : enotsup_rpc_reply;
}

static void api_fill(smp_host *h)
{
    smp_host_api *a = &h->api;
    memset(a, 0, sizeof(*a));
    a->struct_size = sizeof(*a);
    a->abi_major = SMP_ABI_MAJOR;
    a->abi_minor = SMP_ABI_MINOR;
    a->host_caps = offered_caps(h->reg);
    a->register_oplog_type = reg_oplog_type;
    a->register_snapshot_section = reg_section;
    a->register_guard = reg_guard;
    a->register_tick = reg_tick;
    a->register_rpc_service = reg_rpc_service;
    a->register_event_handler = reg_event_handler;
    a->register_metric = reg_metric;
    a->metric_add = api_metric_add;
    a->metric_set = api_metric_set;
    a->oplog_append = api_oplog_append;
    a->object_get = api_object_get;
    a->group_list = api_group_list;
    a->group_count = api_group_count;
    a->group_set_managed = api_group_set_managed;
    a->ensure_cold = api_ensure_cold;
    a->ensure_memory = api_ensure_memory;
    a->release_memory = api_release_memory;
    a->remove_object = api_remove_object;
    a->memory_usage = api_memory_usage;
    a->config_get = api_config_get;
    a->now_ms = api_now_ms;
    a->wall_ms = api_wall_ms;
    a->is_leader = api_is_leader;
    a->ha_mode = api_ha_mode;
    a->log = host_log;
    a->alloc = api_alloc;
    a->free = api_free;
    api_bind_backend(a, &h->reg->be);
}

/* -- The registry -------------------------------------------------------------- */

static const char *const guard_reason_label[] = {"reason", NULL};

/* Create the registry and register the host's own family
 * host_guard_vetoes_total{reason} with every reason at 0 (so a metrics
 * registry holds at most one plugin registry: a second gets SMP_EEXIST).
 * The backend is copied; cfg and metrics are borrowed. */
int host_plugins_create(host_plugins **out, const host_config *cfg, host_metrics *metrics,
                        const host_backend *be)
{
    int rc;
    host_plugins *reg;

    if (out == NULL || cfg == NULL || metrics == NULL) return SMP_EINVAL;
    reg = calloc(1, sizeof(*reg));
    if (reg == NULL) return SMP_ENOMEM;
    reg->cfg = cfg;
    reg->metrics = metrics;
    if (be != NULL) reg->be = *be;
    rc = host_metrics_register(metrics, SMP_METRIC_COUNTER, "host_guard_vetoes_total",
                               "Actions an object guard vetoed, by reason.", guard_reason_label,
                               &reg->guard_vetoes);
    if (rc < 0) goto free_reg;
    /* Every reason is exported from the start, at 0. */
    for (int r = 1; r <= SMP_GUARD_REASON_MAX; r++) {
        const char *values[1] = {host_guard_reason_name((smp_guard_reason)r)};
        host_metric_add(reg->guard_vetoes, values, 0);
    }
    *out = reg;
    return SMP_OK;

free_reg:
    free(reg);
    return rc;
}

void host_plugins_set_backend(host_plugins *reg, const host_backend *be)
{
    if (reg == NULL) return;
    if (be != NULL) reg->be = *be;
    else memset(&reg->be, 0, sizeof(reg->be));
    for (size_t i = 0; i < reg->plugins.n; i++) {
        host_plugin *p = reg->plugins.v[i];
        p->api.host_caps = offered_caps(reg);
        api_bind_backend(&p->api, &reg->be);
    }
}

/* Remove everything p registered from the registry (order of the rest kept)
 * and unregister its metric families. Does not call fini or dlclose. */
static void undo_registrations(host_plugin *p)
{
    host_plugins *reg = p->reg;
    vec_drop_owner(&reg->types, p, offsetof(host_oplog_type_reg, owner));
    vec_drop_owner(&reg->sections, p, offsetof(host_section_reg, owner));
    vec_drop_owner(&reg->rpcs, p, offsetof(host_rpc_reg, owner));
    vec_drop_owner(&reg->ticks, p, offsetof(host_tick_reg, owner));
    vec_drop_owner(&reg->handlers, p, offsetof(host_event_reg, owner));
    for (size_t i = 0; i < p->n_metrics; i++) host_metrics_unregister(reg->metrics, p->metrics[i].f);
    free(p->metrics);
    p->metrics = NULL;
    p->n_metrics = 0;
    p->has_guard = 0;
    p->has_tick = 0;
}

static void plugin_free(host_plugin *p)
{
    if (p == NULL) return;
    free(p->metrics);
    free(p->path);
    free(p);
}

/* Unload a plugin that finished init: fini, drop its registrations, close
 * the library, free the record. The caller removes it from reg->plugins. */
static void plugin_unload(host_plugin *p)
{
    if (p->desc.fini != NULL) p->desc.fini(p->state);
    undo_registrations(p);
    dlclose(p->dl);
    plugin_free(p);
}

/* Check the descriptor in the documented order; on refusal write the message
 * and return the code. On success p->desc is the descriptor's copy. */
static int check_desc(host_plugin *p, const smp_plugin_desc *d, char *err, size_t errlen)
{
    uint32_t ss;
    uint64_t offered = offered_caps(p->reg);
    uint64_t missing;

    if (d == NULL) {
        wm_errbuf(err, errlen, "%s: smp_plugin_entry returned no descriptor", p->file);
        return SMP_EINVAL;
    }
    ss = struct_size_of(d);
    if (ss < V1_DESC) {
        wm_errbuf(err, errlen, "%s: descriptor struct_size %" PRIu32 " is smaller than ABI 1.0's %zu",
                p->file, ss, V1_DESC);
        return SMP_EINVAL;
    }
    copy_abi(&p->desc, sizeof(p->desc), d, V1_DESC);
    if (p->desc.abi_major != SMP_ABI_MAJOR) {
        wm_errbuf(err, errlen, "%s: ABI major %u does not match host ABI major %u", p->file,
                (unsigned)p->desc.abi_major, (unsigned)SMP_ABI_MAJOR);
        return SMP_ENOTSUP;
    }
    if (p->desc.abi_minor > SMP_ABI_MINOR) {
        wm_errbuf(err, errlen, "%s: ABI minor %u is newer than host ABI minor %u", p->file,
                (unsigned)p->desc.abi_minor, (unsigned)SMP_ABI_MINOR);
        return SMP_ENOTSUP;
    }
    if (p->desc.abi_tag != SMP_ABI_TAG) {
        wm_errbuf(err, errlen, "%s: ABI tag 0x%08" PRIx32 " does not match host ABI tag 0x%08" PRIx32,
                p->file, p->desc.abi_tag, (uint32_t)SMP_ABI_TAG);
        return SMP_ENOTSUP;
    }
    missing = p->desc.required_host_caps & ~offered;
    if (missing != 0) {
        wm_errbuf(err, errlen, "%s: required host capabilities 0x%" PRIx64
                " are not offered (host offers 0x%" PRIx64 ")", p->file, missing, offered);
        return SMP_ENOTSUP;
    }
    if (p->desc.init == NULL) {
        wm_errbuf(err, errlen, "%s: descriptor has no init", p->file);
        return SMP_EINVAL;
    }
    return SMP_OK;
}

/* Load one library as one transaction (see the file comment). pc is borrowed
 * for as long as the plugin stays loaded (its block answers config_get and
 * gates); cfg->plugins entries satisfy that. On failure: a negative code, the
 * one message in err, and the registry exactly as before. */
int host_plugins_load(host_plugins *reg, const host_config_plugin *pc, char *err, size_t errlen)
{
    int rc;
    host_plugin *p;
    smp_plugin_entry_fn entry;
    void *sym;
    const char *dl_msg;
    size_t path_len;

    if (err != NULL && errlen > 0) err[0] = '\0';
    if (reg == NULL || pc == NULL || pc->path == NULL) {
        wm_errbuf(err, errlen, "plugin: no path to load");
        return SMP_EINVAL;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) goto no_memory;
    path_len = strlen(pc->path) + 1;
    p->path = malloc(path_len);
    if (p->path == NULL) goto no_memory;
    memcpy(p->path, pc->path, path_len);
    p->file = file_name(p->path);
    p->reg = reg;
    p->pc = pc;

    p->dl = dlopen(p->path, RTLD_NOW | RTLD_LOCAL);
    if (p->dl == NULL) {
        dl_msg = dlerror();
        wm_errbuf(err, errlen, "%s: cannot load: %s", p->file, str_or(dl_msg, "unknown error"));
        rc = SMP_EIO;
        goto free_plugin;
    }
    dlerror();
    sym = dlsym(p->dl, SMP_PLUGIN_ENTRY_SYMBOL);
    if (sym == NULL) {
        dl_msg = dlerror();
        wm_errbuf(err, errlen, "%s: no entry symbol %s (%s)", p->file, SMP_PLUGIN_ENTRY_SYMBOL,
                str_or(dl_msg, "symbol is NULL"));
        rc = SMP_ENOTFOUND;
        goto close_library;
    }
    memcpy(&entry, &sym, sizeof(entry)); /* POSIX: object to function pointer */
    if ((rc = check_desc(p, entry(), err, errlen)) < 0) goto close_library;

    /* The plugin list grows before init so that a later push cannot fail
     * after a successful init. */
    if ((rc = vec_push(&reg->plugins, p)) < 0) {
        wm_errbuf(err, errlen, "%s: out of memory", p->file);
        goto close_library;
    }
    reg->plugins.n--;

    api_fill(p);
    p->in_init = 1;
    rc = p->desc.init(p, &p->api, &p->state);
    p->in_init = 0;
    if (p->refused_rc != 0) {
        wm_errbuf(err, errlen, "%s", p->refused);
        rc = p->refused_rc;
        goto undo_init;
    }
    if (rc != SMP_OK) {
        wm_errbuf(err, errlen, "%s: init failed: %s (%d)", p->file, smp_strerror(rc), rc);
        if (rc > 0) rc = SMP_EINVAL;
        goto undo_init;
    }
    reg->plugins.v[reg->plugins.n++] = p;
    return SMP_OK;

undo_init:
    undo_registrations(p);
close_library:
    dlclose(p->dl);
free_plugin:
    plugin_free(p);
    return rc;

no_memory:
    wm_errbuf(err, errlen, "%s: out of memory", file_name(pc->path));
    plugin_free(p);
    return SMP_ENOMEM;
}

/* Unload the plugins after the first `keep`, newest first. */
static void unload_after(host_plugins *reg, size_t keep)
{
    while (reg->plugins.n > keep) {
        host_plugin *p = reg->plugins.v[reg->plugins.n - 1];
        reg->plugins.n--;
        plugin_unload(p);
    }
}

/* Load every enabled entry of the config in order. On the first failure the
 * plugins this call loaded are unloaded again (newest first, with fini);
 * plugins loaded before the call stay. */
int host_plugins_load_all(host_plugins *reg, char *err, size_t errlen)
{
    size_t before;
    if (reg == NULL) return SMP_EINVAL;
    before = reg->plugins.n;
    for (size_t i = 0; i < reg->cfg->n_plugins; i++) {
        const host_config_plugin *pc = &reg->cfg->plugins[i];
        int rc;
        if (!pc->enabled) continue;
        rc = host_plugins_load(reg, pc, err, errlen);
        if (rc < 0) {
            unload_after(reg, before);
            return rc;
        }
    }
    return SMP_OK;
}

void host_plugins_destroy(host_plugins *reg)
{
    if (reg == NULL) return;
    unload_after(reg, 0);
    host_metrics_unregister(reg->metrics, reg->guard_vetoes);
    vec_free(&reg->plugins);
    vec_free(&reg->types);
    vec_free(&reg->sections);
    vec_free(&reg->rpcs);
    vec_free(&reg->ticks);
    vec_free(&reg->handlers);
    free(reg);
}

/* -- What was registered --------------------------------------------------------- */

size_t host_plugins_count(const host_plugins *reg)
{
    return reg != NULL ? reg->plugins.n : 0;
}

host_plugin *host_plugins_at(const host_plugins *reg, size_t i)
{
    return reg != NULL && i < reg->plugins.n ? reg->plugins.v[i] : NULL;
}

const smp_plugin_desc *host_plugin_desc(const host_plugin *p)
{
    return p != NULL ? &p->desc : NULL;
}

const char *host_plugin_path(const host_plugin *p)
{
    return p != NULL ? p->path : NULL;
}

void *host_plugin_state(const host_plugin *p)
{
    return p != NULL ? p->state : NULL;
}

const host_oplog_type_reg *host_plugins_oplog_type(const host_plugins *reg, uint16_t type)
{
    if (reg == NULL) return NULL;
    for (size_t i = 0; i < reg->types.n; i++) {
        const host_oplog_type_reg *t = reg->types.v[i];
        if (t->t.type == type) return t;
    }
    return NULL;
}

size_t host_plugins_n_oplog_types(const host_plugins *reg)
{
    return reg != NULL ? reg->types.n : 0;
}

const host_oplog_type_reg *host_plugins_oplog_type_at(const host_plugins *reg, size_t i)
{
    return reg != NULL && i < reg->types.n ? reg->types.v[i] : NULL;
}

const host_section_reg *host_plugins_section(const host_plugins *reg, const char *name)
{
    if (reg == NULL || name == NULL) return NULL;
    for (size_t i = 0; i < reg->sections.n; i++) {
        const host_section_reg *s = reg->sections.v[i];
        if (strcmp(s->s.name, name) == 0) return s;
    }
    return NULL;
}

size_t host_plugins_n_sections(const host_plugins *reg)
{
    return reg != NULL ? reg->sections.n : 0;
}

const host_section_reg *host_plugins_section_at(const host_plugins *reg, size_t i)
{
    return reg != NULL && i < reg->sections.n ? reg->sections.v[i] : NULL;
}

const host_rpc_reg *host_plugins_rpc_service(const host_plugins *reg, uint16_t id)
{
    if (reg == NULL) return NULL;
    for (size_t i = 0; i < reg->rpcs.n; i++) {
        const host_rpc_reg *r = reg->rpcs.v[i];
        if (r->s.service_id == id) return r;
    }
    return NULL;
}

size_t host_plugins_n_rpc_services(const host_plugins *reg)
{
    return reg != NULL ? reg->rpcs.n : 0;
}

const host_rpc_reg *host_plugins_rpc_service_at(const host_plugins *reg, size_t i)
{
    return reg != NULL && i < reg->rpcs.n ? reg->rpcs.v[i] : NULL;
}

size_t host_plugins_n_ticks(const host_plugins *reg)
{
    return reg != NULL ? reg->ticks.n : 0;
}

host_tick_reg *host_plugins_tick_at(host_plugins *reg, size_t i)
{
    return reg != NULL && i < reg->ticks.n ? reg->ticks.v[i] : NULL;
}

int host_plugins_has_guard(const host_plugins *reg)
{
    for (size_t i = 0; reg != NULL && i < reg->plugins.n; i++)
        if (((host_plugin *)reg->plugins.v[i])->has_guard) return 1;
    return 0;
}

const char *host_guard_reason_name(smp_guard_reason r)
{
    switch (r) {
    case SMP_GUARD_BATCH_EVICT: return "batch_evict";
    case SMP_GUARD_QUOTA_EVICT: return "quota_evict";
    case SMP_GUARD_REMOVE_KEY: return "remove_key";
    case SMP_GUARD_REMOVE_ALL: return "remove_all";
    case SMP_GUARD_REMOVE_PATTERN: return "remove_pattern";
    case SMP_GUARD_STALE_PUT_CLEANUP: return "stale_put_cleanup";
    case SMP_GUARD_COLD_EVICT: return "cold_evict";
    case SMP_GUARD_PUT_INTO_GROUP: return "put_into_group";
    case SMP_GUARD_UPSERT_INTO_GROUP: return "upsert_into_group";
    }
    return "unknown";
}

/* Every loaded guard is asked (each may keep its own statistics); anything
 * but SMP_GUARD_ALLOW vetoes, and one vetoed request counts once. Each call
 * is timed on its own (timing_record). */
int host_plugins_guard_check(host_plugins *reg, const smp_guard_request *req)
{
    int verdict = SMP_GUARD_ALLOW;
    if (reg == NULL || req == NULL) return SMP_GUARD_VETO;
    for (size_t i = 0; i < reg->plugins.n; i++) {
        host_plugin *p = reg->plugins.v[i];
        if (!p->has_guard) continue;
        uint64_t start = clock_ns();
        int r = p->guard.check(p->state, req);
        uint64_t took = clock_ns() - start;
        timing_record(p, reg->timing.guard_seconds, reg->timing.guard_overruns, &p->guard_log,
                      "object guard call", took, took > HOST_GUARD_BUDGET_NS, HOST_GUARD_BUDGET_NS,
                      start);
        if (r != SMP_GUARD_ALLOW) verdict = SMP_GUARD_VETO;
    }
    if (verdict == SMP_GUARD_VETO) {
        const char *values[1] = {host_guard_reason_name(req->reason)};
        host_metric_add(reg->guard_vetoes, values, 1);
    }
    return verdict;
}

/* The deadline is on the now_ms clock (CLOCK_MONOTONIC, whole ms): the tick
 * overran when that clock reads past it on return. Its budget in the line
 * is the time it had from its start to the deadline (0 when it started
 * late, behind another plugin's tick of the same round). */
int host_plugins_run_tick(host_plugins *reg, host_tick_reg *t, const smp_tick_budget *b)
{
    if (reg == NULL || t == NULL || b == NULL) return SMP_EINVAL;
    host_plugin *p = t->owner;
    uint64_t start = clock_ns();
    int rc = t->t.tick(p->state, b, &t->cursor);
    uint64_t end = clock_ns();
    uint64_t start_ms = start / 1000000u, end_ms = end / 1000000u;
    uint64_t budget_ms = b->deadline_ms > start_ms ? b->deadline_ms - start_ms : 0;
    timing_record(p, reg->timing.tick_seconds, reg->timing.tick_overruns, &p->tick_log,
                  "reconcile tick", end - start, end_ms > b->deadline_ms, budget_ms * 1000000u,
                  start);
    return rc;
}

void host_plugins_set_timing(host_plugins *reg, const host_plugin_timing *t)
{
    if (reg == NULL) return;
    if (t == NULL) {
        memset(&reg->timing, 0, sizeof(reg->timing));
        return;
    }
    reg->timing = *t;
    for (size_t i = 0; i < reg->plugins.n; i++) {
        host_plugin *p = reg->plugins.v[i];
        const char *values[1] = {str_or(p->desc.name, p->file)};
        if (p->has_tick) {
            host_metric_touch(reg->timing.tick_seconds, values);
            host_metric_touch(reg->timing.tick_overruns, values);
        }
        if (p->has_guard) {
            host_metric_touch(reg->timing.guard_seconds, values);
            host_metric_touch(reg->timing.guard_overruns, values);
        }
    }
}

/* Call every handler whose mask has the event's bit, in registration order.
 * A type outside the mask's 32 bits reaches nobody. */
void host_plugins_emit(host_plugins *reg, const smp_event *ev)
{
    uint32_t bit;
    if (reg == NULL || ev == NULL || (unsigned)ev->type >= 32) return;
    bit = SMP_EVENT_MASK(ev->type);
    for (size_t i = 0; i < reg->handlers.n; i++) {
        const host_event_reg *e = reg->handlers.v[i];
        if (e->e.mask & bit) e->e.on_event(e->owner->state, ev);
    }
}

/* A gate is confirmed when the cluster key of that name is a true bool, or
 * (no cluster key of that name) the owner's block has a true bool of that
 * name, or the master confirmed it durably at runtime (the backend's
 * gate_confirmed). NULL gate: nothing to confirm (1). */
int host_plugins_gate_confirmed(const host_plugins *reg, const host_plugin *owner, const char *gate)
{
    smp_config_value v;
    if (gate == NULL) return 1;
    if (reg == NULL) return 0;
    if (host_config_cluster_get(reg->cfg, gate, &v) == SMP_OK) {
        if (v.type == SMP_CONFIG_BOOL && v.b) return 1;
    } else if (owner != NULL && owner->pc != NULL && owner->pc->block != NULL &&
               host_config_node_get(owner->pc->block, gate, &v) == SMP_OK &&
               v.type == SMP_CONFIG_BOOL && v.b) {
        return 1;
    }
    return reg->be.gate_confirmed != NULL && reg->be.gate_confirmed(reg->be.ctx, gate);
}

/* -- describe ------------------------------------------------------------------------ */

static const char *const host_cap_names[] = {
    "groups", "cold_tier", "durable_oplog", "ha_standby", "rpc_dispatch", "metrics", "state_handoff",
};
static const char *const plugin_cap_names[] = {"object_guard", "hot_reload", "weights", "lineage"};
static const char *const event_names[] = {
    NULL, "object_completed", "replica_lost", "node_up", "node_down", "memory_pressure", "role_change",
};

/* "0x<hex> (name,name,bit40)" -- or "(-)" when no bit is set. */
static void print_bits(FILE *out, uint64_t bits, const char *const *names, size_t n_names)
{
    int first = 1;
    fprintf(out, "0x%" PRIx64 " (", bits);
    for (unsigned b = 0; b < 64; b++) {
        if (!(bits & (UINT64_C(1) << b))) continue;
        fputs(first ? "" : ",", out);
        if (b < n_names && names[b] != NULL) fputs(names[b], out);
        else fprintf(out, "bit%u", b);
        first = 0;
    }
    fputs(first ? "-)" : ")", out);
}

/* One plugin: name and version, path, ABI and tag, capabilities in hex and
 * by name, then its OpLog types, sections, guard, tick, RPC services, event
 * mask and metric families, each on its own line in registration order. */
static void describe_plugin(const host_plugins *reg, const host_plugin *p, FILE *out)
{
    uint32_t mask = 0;
    int any_tick = 0;
    const smp_plugin_desc *d = &p->desc;

    fprintf(out, "plugin %s %s\n", str_or(d->name, "?"), str_or(d->version, "?"));
    fprintf(out, "  path %s\n", p->path);
    fprintf(out, "  abi %u.%u (host %u.%u) tag 0x%08" PRIx32 "\n", (unsigned)d->abi_major,
            (unsigned)d->abi_minor, (unsigned)SMP_ABI_MAJOR, (unsigned)SMP_ABI_MINOR, d->abi_tag);
    fputs("  required host caps ", out);
    print_bits(out, d->required_host_caps, host_cap_names, 7);
    fputs("\n  optional host caps ", out);
    print_bits(out, d->optional_host_caps, host_cap_names, 7);
    fputs("\n  plugin caps ", out);
    print_bits(out, d->plugin_caps, plugin_cap_names, 4);
    fputs("\n", out);
    for (size_t i = 0; i < reg->types.n; i++) {
        const host_oplog_type_reg *t = reg->types.v[i];
        if (t->owner != p) continue;
        fprintf(out, "  type %u %s encver %u..%u gate %s\n", (unsigned)t->t.type, t->t.name,
                (unsigned)t->t.min_encver, (unsigned)t->t.max_encver, str_or(t->t.gate, "-"));
    }
    for (size_t i = 0; i < reg->sections.n; i++) {
        const host_section_reg *s = reg->sections.v[i];
        if (s->owner == p) fprintf(out, "  section %s encver %u\n", s->s.name, (unsigned)s->s.encver);
    }
    fprintf(out, "  guard %s\n", p->has_guard ? "yes" : "no");
    for (size_t i = 0; i < reg->ticks.n; i++) {
        const host_tick_reg *t = reg->ticks.v[i];
        if (t->owner != p) continue;
        fprintf(out, "  tick period %" PRIu32 " ms leader_only %s\n", t->t.period_ms,
                t->t.leader_only ? "yes" : "no");
        any_tick = 1;
    }
    if (!any_tick) fputs("  tick no\n", out);
    for (size_t i = 0; i < reg->rpcs.n; i++) {
        const host_rpc_reg *r = reg->rpcs.v[i];
        if (r->owner != p) continue;
        fprintf(out, "  rpc service %u %s methods", (unsigned)r->s.service_id, r->s.name);
        for (size_t m = 0; m < r->s.n_methods; m++)
            fprintf(out, " %u:%s", (unsigned)r->s.methods[m].method_id, r->s.methods[m].name);
        fputs(r->s.n_methods == 0 ? " -\n" : "\n", out);
    }
    for (size_t i = 0; i < reg->handlers.n; i++) {
        const host_event_reg *e = reg->handlers.v[i];
        if (e->owner == p) mask |= e->e.mask;
    }
    fputs("  events ", out);
    print_bits(out, mask, event_names, 7);
    fputs("\n", out);
    for (size_t i = 0; i < p->n_metrics; i++)
        fprintf(out, "  metric %s\n", p->metrics[i].name);
}

/* A header line with the host's ABI and capabilities, then one block per
 * plugin in load order (see describe_plugin). The format is pinned by
 * test_plugin_loader and read by store_master --check users: change it only
 * by appending lines. */
/* One line per capability gate the registered types name: the types it
 * guards and where it stands by this config (a runtime confirmation lives in
 * the OpLog, which --check does not read: `weightctl status` shows it). */
static void describe_gates(const host_plugins *reg, FILE *out)
{
    const char *seen[64];
    size_t n = 0;
    for (size_t i = 0; i < reg->types.n && n < 64; i++) {
        const host_oplog_type_reg *t = reg->types.v[i];
        int dup = t->t.gate == NULL;
        for (size_t k = 0; k < n && !dup; k++) dup = strcmp(seen[k], t->t.gate) == 0;
        if (!dup) seen[n++] = t->t.gate;
    }
    fprintf(out, "gates %zu\n", n);
    for (size_t k = 0; k < n; k++) {
        const host_plugin *owner = NULL;
        fprintf(out, "  gate %s types", seen[k]);
        for (size_t i = 0; i < reg->types.n; i++) {
            const host_oplog_type_reg *t = reg->types.v[i];
            if (t->t.gate == NULL || strcmp(t->t.gate, seen[k]) != 0) continue;
            fprintf(out, " %u", (unsigned)t->t.type);
            owner = t->owner;
        }
        if (!reg->cfg->ha_enabled)
            fprintf(out, ": not enforced (ha.enabled is false)\n");
        else if (host_plugins_gate_confirmed(reg, owner, seen[k]))
            fprintf(out, ": confirmed in config\n");
        else
            fprintf(out, ": closed in config: the leader refuses these types until every master "
                         "replays them and `weightctl gate confirm %s` (status names who blocks "
                         "it)\n", seen[k]);
    }
}

void host_plugins_describe(const host_plugins *reg, FILE *out)
{
    if (reg == NULL || out == NULL) return;
    fprintf(out, "host abi %u.%u tag 0x%08" PRIx32 " caps ", (unsigned)SMP_ABI_MAJOR,
            (unsigned)SMP_ABI_MINOR, (uint32_t)SMP_ABI_TAG);
    print_bits(out, offered_caps(reg), host_cap_names, 7);
    fprintf(out, "\nplugins %zu\n", reg->plugins.n);
    for (size_t i = 0; i < reg->plugins.n; i++) describe_plugin(reg, reg->plugins.v[i], out);
    describe_gates(reg, out);
}
