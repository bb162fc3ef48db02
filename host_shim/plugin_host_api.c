/* plugin_host_api.c -- the host API table each plugin gets.
 *
 * The register_* members (and claim_key_space) validate what a plugin
 * registers inside init() and copy it into the registry tagged with its
 * owner; the first refusal is remembered and fails the load (plugin_host.c
 * undoes it). The rest of the table forwards to the master through
 * host_backend, except what the plugin host owns itself: metrics, config
 * lookups, clocks, the gate and leader checks in front of oplog_append,
 * logging and allocation. A backend member left NULL makes the matching call
 * answer SMP_ENOTSUP. Loop thread only. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plugin_host_internal.h"
#include "utf8_valid.h"

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
int hp_copy_abi(void *dst, size_t host_size, const void *src, size_t v1_size)
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
    hp_host_log(h, SMP_LOG_WARN, "%s: %s called outside init", h->file, what);
    return 1;
}

uint32_t hp_struct_size_of(const void *p)
{
    uint32_t ss;
    memcpy(&ss, p, sizeof(ss));
    return ss;
}

/* -- Registration members ----------------------------------------------------- */

/* What a registration of h is checked against for duplicates: the
 * registry's table, then h's own staging table (empty unless h is a
 * reload's new instance; the old instance's entries are skipped by the
 * caller, owner == h->replaces). */
static size_t visible_n(const smp_host *h, const host_vec *main, const host_vec *staged)
{
    return main->n + (h->replaces != NULL ? staged->n : 0);
}

static void *visible_at(const smp_host *h, const host_vec *main, const host_vec *staged, size_t i)
{
    (void)h;
    return i < main->n ? main->v[i] : staged->v[i - main->n];
}

static int reg_oplog_type(smp_host *h, const smp_oplog_type *t)
{
    host_plugins *reg = h->reg;
    host_oplog_type_reg *e;
    smp_oplog_type c;
    smp_config_value v;
    int rc;

    if (outside_init(h, "register_oplog_type")) return SMP_ESTATE;
    if (t == NULL) return refuse(h, SMP_EINVAL, "%s: register_oplog_type with no type", h->file);
    if (hp_copy_abi(&c, sizeof(c), t, V1_OPLOG_TYPE) < 0)
        return refuse(h, SMP_EINVAL, "%s: oplog type struct_size %" PRIu32
                      " is smaller than ABI 1.0's %zu", h->file, hp_struct_size_of(t), V1_OPLOG_TYPE);
    if (c.name == NULL || c.replay == NULL)
        return refuse(h, SMP_EINVAL, "%s: oplog type %u (%s) has no %s", h->file,
                      (unsigned)c.type, hp_str_or(c.name, "?"), c.name == NULL ? "name" : "replay");
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
    for (size_t i = 0; i < visible_n(h, &reg->types, &h->s_types); i++) {
        const host_oplog_type_reg *o = visible_at(h, &reg->types, &h->s_types, i);
        if (o->owner == h->replaces) continue; /* a reload takes the old instance's place */
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
    if ((rc = hp_vec_push(h->replaces ? &h->s_types : &reg->types, e)) < 0) {
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
    if (hp_copy_abi(&c, sizeof(c), s, V1_SECTION) < 0)
        return refuse(h, SMP_EINVAL, "%s: snapshot section struct_size %" PRIu32
                      " is smaller than ABI 1.0's %zu", h->file, hp_struct_size_of(s), V1_SECTION);
    if (c.name == NULL || c.save == NULL || c.load == NULL)
        return refuse(h, SMP_EINVAL, "%s: snapshot section '%s' has no %s", h->file,
                      hp_str_or(c.name, "?"), c.name == NULL ? "name" : c.save == NULL ? "save" : "load");
    for (size_t i = 0; i < visible_n(h, &reg->sections, &h->s_sections); i++) {
        const host_section_reg *o = visible_at(h, &reg->sections, &h->s_sections, i);
        if (o->owner == h->replaces) continue;
        if (strcmp(o->s.name, c.name) == 0)
            return refuse(h, SMP_EEXIST, "%s: snapshot section '%s' is already registered by %s",
                          h->file, c.name, o->owner->file);
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) return refuse(h, SMP_ENOMEM, "%s: out of memory registering section '%s'", h->file, c.name);
    e->s = c;
    e->owner = h;
    if ((rc = hp_vec_push(h->replaces ? &h->s_sections : &reg->sections, e)) < 0) {
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
    if (hp_copy_abi(&c, sizeof(c), g, V1_GUARD) < 0)
        return refuse(h, SMP_EINVAL, "%s: guard struct_size %" PRIu32 " is smaller than ABI 1.0's %zu",
                      h->file, hp_struct_size_of(g), V1_GUARD);
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
    if (hp_copy_abi(&c, sizeof(c), t, V1_TICK) < 0)
        return refuse(h, SMP_EINVAL, "%s: tick struct_size %" PRIu32 " is smaller than ABI 1.0's %zu",
                      h->file, hp_struct_size_of(t), V1_TICK);
    if (c.tick == NULL) return refuse(h, SMP_EINVAL, "%s: tick has no callback", h->file);
    if (c.period_ms == 0) return refuse(h, SMP_ERANGE, "%s: tick period_ms 0 is not allowed", h->file);
    if (h->has_tick)
        return refuse(h, SMP_EEXIST, "%s: a second reconcile tick is refused (one per plugin)", h->file);
    e = calloc(1, sizeof(*e));
    if (e == NULL) return refuse(h, SMP_ENOMEM, "%s: out of memory registering the tick", h->file);
    e->t = c;
    e->owner = h;
    if ((rc = hp_vec_push(h->replaces ? &h->s_ticks : &h->reg->ticks, e)) < 0) {
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
    if (hp_copy_abi(&c, sizeof(c), s, V1_RPC_SERVICE) < 0)
        return refuse(h, SMP_EINVAL, "%s: rpc service struct_size %" PRIu32
                      " is smaller than ABI 1.0's %zu", h->file, hp_struct_size_of(s), V1_RPC_SERVICE);
    if (c.name == NULL || (c.n_methods > 0 && c.methods == NULL))
        return refuse(h, SMP_EINVAL, "%s: rpc service %u has no %s", h->file, (unsigned)c.service_id,
                      c.name == NULL ? "name" : "methods");
    if (c.service_id <= SMP_RPC_HOST_SERVICE_MAX)
        return refuse(h, SMP_ERANGE, "%s: rpc service %u (%s) is in the host range 0..%d",
                      h->file, (unsigned)c.service_id, c.name, SMP_RPC_HOST_SERVICE_MAX);
    /* The method array is read with the plugin's stride (methods[0].struct_size):
     * ABI 1.2 grew smp_rpc_method by min_role, so a 1.0 or 1.1 table is
     * shorter per entry; it is copied into the host's layout below. */
    size_t stride = c.n_methods > 0 ? c.methods[0].struct_size : sizeof(smp_rpc_method);
    if (stride < V1_RPC_METHOD || stride % _Alignof(smp_rpc_method) != 0)
        return refuse(h, SMP_EINVAL, "%s: rpc service %u (%s) has methods of struct_size %zu "
                      "(at least %zu, a multiple of %zu)", h->file, (unsigned)c.service_id, c.name,
                      stride, V1_RPC_METHOD, (size_t)_Alignof(smp_rpc_method));
    e = calloc(1, sizeof(*e) + c.n_methods * sizeof(smp_rpc_method));
    if (e == NULL) return refuse(h, SMP_ENOMEM, "%s: out of memory registering rpc service %u",
                                 h->file, (unsigned)c.service_id);
    for (size_t i = 0; i < c.n_methods; i++) {
        smp_rpc_method *m = &e->own[i];
        memcpy(m, (const uint8_t *)c.methods + i * stride,
               stride < sizeof(*m) ? stride : sizeof(*m));
        if (m->struct_size < sizeof(*m)) m->min_role = SMP_ROLE_NONE;
        if (m->struct_size < V1_RPC_METHOD || m->name == NULL || m->handler == NULL) {
            free(e);
            return refuse(h, SMP_EINVAL, "%s: rpc service %u (%s) method %zu is malformed "
                          "(struct_size, name or handler)", h->file, (unsigned)c.service_id, c.name, i);
        }
        m->struct_size = sizeof(*m);
        for (size_t j = 0; j < i; j++) {
            if (e->own[j].method_id == m->method_id) {
                rc = refuse(h, SMP_EEXIST, "%s: rpc service %u (%s) has two methods with id %u "
                            "(%s and %s)", h->file, (unsigned)c.service_id, c.name,
                            (unsigned)m->method_id, e->own[j].name, m->name);
                free(e);
                return rc;
            }
        }
    }
    for (size_t i = 0; i < visible_n(h, &reg->rpcs, &h->s_rpcs); i++) {
        const host_rpc_reg *o = visible_at(h, &reg->rpcs, &h->s_rpcs, i);
        if (o->owner == h->replaces) continue;
        if (o->s.service_id == c.service_id) {
            rc = refuse(h, SMP_EEXIST, "%s: rpc service %u (%s) is already registered as %s by %s",
                        h->file, (unsigned)c.service_id, c.name, o->s.name, o->owner->file);
            free(e);
            return rc;
        }
    }
    e->s = c;
    e->s.methods = e->own;
    e->owner = h;
    if ((rc = hp_vec_push(h->replaces ? &h->s_rpcs : &reg->rpcs, e)) < 0) {
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
    if (hp_copy_abi(&c, sizeof(c), eh, V1_EVENT_HANDLER) < 0)
        return refuse(h, SMP_EINVAL, "%s: event handler struct_size %" PRIu32
                      " is smaller than ABI 1.0's %zu", h->file, hp_struct_size_of(eh), V1_EVENT_HANDLER);
    if (c.on_event == NULL) return refuse(h, SMP_EINVAL, "%s: event handler has no on_event", h->file);
    e = calloc(1, sizeof(*e));
    if (e == NULL) return refuse(h, SMP_ENOMEM, "%s: out of memory registering an event handler", h->file);
    e->e = c;
    e->owner = h;
    if ((rc = hp_vec_push(h->replaces ? &h->s_handlers : &h->reg->handlers, e)) < 0) {
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
    if (hp_copy_abi(&c, sizeof(c), d, V1_METRIC_DESC) < 0)
        return refuse(h, SMP_EINVAL, "%s: metric struct_size %" PRIu32 " is smaller than ABI 1.0's %zu",
                      h->file, hp_struct_size_of(d), V1_METRIC_DESC);
    grown = realloc(h->metrics, (h->n_metrics + 1) * sizeof(*grown));
    if (grown == NULL) return refuse(h, SMP_ENOMEM, "%s: out of memory registering a metric", h->file);
    h->metrics = grown;
    /* A reload's new instance takes over the old one's family of the same
     * name (the series go on); the switch keeps it, a rollback leaves it. */
    for (size_t i = 0; h->replaces != NULL && c.name != NULL && i < h->replaces->n_metrics; i++) {
        if (strcmp(h->replaces->metrics[i].name, c.name) != 0) continue;
        h->metrics[h->n_metrics] = (host_plugin_metric){h->replaces->metrics[i].f, c.name, 1};
        h->n_metrics++;
        *out = h->replaces->metrics[i].f;
        return SMP_OK;
    }
    rc = host_metrics_register(h->reg->metrics, c.kind, c.name, c.help, c.label_names, &f);
    if (rc == SMP_EEXIST)
        return refuse(h, rc, "%s: metric '%s' is already registered", h->file, c.name);
    if (rc < 0)
        return refuse(h, rc, "%s: metric '%s' is refused: %s (bad kind or name, or more than %d "
                      "labels)", h->file, hp_str_or(c.name, "?"), smp_strerror(rc), SMP_METRIC_MAX_LABELS);
    h->metrics[h->n_metrics] = (host_plugin_metric){f, c.name, 0};
    h->n_metrics++;
    *out = f;
    return SMP_OK;
}

/* 1 when a key could begin with both prefixes: one begins with the other. */
static int prefixes_overlap(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    return memcmp(a, b, la < lb ? la : lb) == 0;
}

/* Claim prefix as h's key space (ABI 1.9; store_plugin.h says what the host
 * then refuses). Only inside init: after it SMP_ESTATE, logged naming the
 * plugin and the prefix, nothing claimed. Refused (refuse(): the load
 * fails): NULL or empty, not valid UTF-8 (SMP_EINVAL), longer than
 * HOST_KEY_SPACE_MAX_BYTES or a claim past HOST_KEY_SPACES_MAX (SMP_ERANGE),
 * overlapping a claim of h itself or of another loaded plugin (SMP_EEXIST;
 * a reload's new instance does not meet the claims of the instance it
 * replaces). The copy is h's, dropped with its other registrations. */
static int reg_key_space(smp_host *h, const char *prefix)
{
    host_plugins *reg = h->reg;
    const char *me = hp_str_or(h->desc.name, h->file);
    size_t len;
    char *copy;

    if (!h->in_init) {
        hp_host_log(h, SMP_LOG_WARN, "%s: claim_key_space('%.256s') called outside init: refused "
                    "(SMP_ESTATE), plugin %s claims no new key space", h->file,
                    hp_str_or(prefix, "(null)"), me);
        return SMP_ESTATE;
    }
    if (prefix == NULL || prefix[0] == '\0')
        return refuse(h, SMP_EINVAL, "%s: plugin %s claims a key space with %s prefix (it would "
                      "hold every key)", h->file, me, prefix == NULL ? "no" : "an empty");
    len = strlen(prefix);
    if (len > HOST_KEY_SPACE_MAX_BYTES)
        return refuse(h, SMP_ERANGE, "%s: plugin %s claims key space '%.64s...' of %zu bytes, "
                      "longer than a key may be (%d bytes)", h->file, me, prefix, len,
                      HOST_KEY_SPACE_MAX_BYTES);
    if (!utf8_valid((const unsigned char *)prefix, len))
        return refuse(h, SMP_EINVAL, "%s: plugin %s claims key space '%.256s', which is not valid "
                      "UTF-8 (no key is)", h->file, me, prefix);
    for (size_t i = 0; i < h->n_key_spaces; i++)
        if (prefixes_overlap(h->key_spaces[i], prefix))
            return refuse(h, SMP_EEXIST, "%s: plugin %s claims key space '%.256s', which overlaps "
                          "its own key space '%.256s' (one begins with the other)", h->file, me,
                          prefix, h->key_spaces[i]);
    for (size_t i = 0; i < reg->plugins.n; i++) {
        const smp_host *o = reg->plugins.v[i];
        if (o == h || o == h->replaces) continue;
        for (size_t k = 0; k < o->n_key_spaces; k++)
            if (prefixes_overlap(o->key_spaces[k], prefix))
                return refuse(h, SMP_EEXIST, "%s: plugin %s claims key space '%.256s', which "
                              "overlaps key space '%.256s' of plugin %s (one begins with the "
                              "other)", h->file, me, prefix, o->key_spaces[k],
                              hp_str_or(o->desc.name, o->file));
    }
    if (h->n_key_spaces == HOST_KEY_SPACES_MAX)
        return refuse(h, SMP_ERANGE, "%s: plugin %s claims key space '%.256s' beyond its %d key "
                      "spaces", h->file, me, prefix, HOST_KEY_SPACES_MAX);
    if ((copy = malloc(len + 1)) == NULL)
        return refuse(h, SMP_ENOMEM, "%s: out of memory claiming key space '%.256s'", h->file,
                      prefix);
    memcpy(copy, prefix, len + 1);
    h->key_spaces[h->n_key_spaces++] = copy;
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

/* No backend answer: authentication is off, the caller may do everything. */
static int open_rpc_caller(const smp_rpc_call *call, smp_caller *out)
{
    smp_caller v = {sizeof(smp_caller), 0, NULL, SMP_ROLE_ADMIN};
    if (call == NULL || out == NULL || out->struct_size < offsetof(smp_caller, tenant))
        return SMP_EINVAL;
    v.struct_size = out->struct_size < sizeof(v) ? out->struct_size : (uint32_t)sizeof(v);
    memcpy(out, &v, v.struct_size);
    return SMP_OK;
}

/* No backend answer: no limits, every revision fits. */
static int open_revision_quota(const smp_rpc_call *call, const char *tenant, uint64_t live,
                               uint64_t *limit)
{
    (void)live;
    if (call == NULL || tenant == NULL) return SMP_EINVAL;
    if (limit != NULL) *limit = 0;
    return SMP_OK;
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

/* -- Callbacks the host owes a plugin ------------------------------------------ */

/* Every asynchronous service goes through an owed record, so the host knows
 * how many callbacks a plugin still has coming (h->inflight): a reload or
 * disable waits until none is left before the old instance's code can go.
 * The record is freed before the plugin's callback runs. A call without a
 * callback goes to the backend as it is (which refuses it or owes nothing). */
typedef struct hp_owed {
    smp_host *h;
    smp_durable_cb durable;
    smp_done_cb done;
    void *arg;
} hp_owed;

static hp_owed *owed_new(smp_host *h, smp_durable_cb durable, smp_done_cb done, void *arg)
{
    hp_owed *o = malloc(sizeof(*o));
    if (o == NULL) return NULL;
    *o = (hp_owed){h, durable, done, arg};
    h->inflight++;
    return o;
}

/* The backend refused the call: no callback is coming. */
static int owed_cancel(hp_owed *o, int rc)
{
    o->h->inflight--;
    free(o);
    return rc;
}

static void owed_durable(void *arg, int status, uint64_t seq)
{
    hp_owed o = *(hp_owed *)arg;
    free(arg);
    o.h->inflight--;
    if (o.durable != NULL) o.durable(o.arg, status, seq);
}

static void owed_done(void *arg, int status)
{
    hp_owed o = *(hp_owed *)arg;
    free(arg);
    o.h->inflight--;
    if (o.done != NULL) o.done(o.arg, status);
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
    if (cb == NULL) return be->oplog_append(be->ctx, type, encver, payload, len, NULL, arg);
    hp_owed *o = owed_new(h, cb, NULL, arg);
    if (o == NULL) return SMP_ENOMEM;
    int rc = be->oplog_append(be->ctx, type, encver, payload, len, owed_durable, o);
    return rc < 0 ? owed_cancel(o, rc) : rc;
}

static int api_object_get(smp_host *h, const char *key, smp_object_info *out)
{
    const host_backend *be = &h->reg->be;
    if (key == NULL || out == NULL) return SMP_EINVAL;
    return be->object_get != NULL ? be->object_get(be->ctx, key, out) : SMP_ENOTSUP;
}

static uint64_t api_objects_version(smp_host *h)
{
    const host_backend *be = &h->reg->be;
    return be->objects_version != NULL ? be->objects_version(be->ctx) : 0;
}

static uint64_t api_objects_loss_version(smp_host *h)
{
    const host_backend *be = &h->reg->be;
    return be->objects_loss_version != NULL ? be->objects_loss_version(be->ctx) : 0;
}

static int api_rpc_wait_for_nodes(smp_host *h, smp_rpc_call *call, const char *key,
                                  const uint8_t *body, size_t len)
{
    const host_backend *be = &h->reg->be;
    if (call == NULL || key == NULL || (body == NULL && len > 0)) return 0;
    return be->rpc_wait_for_nodes != NULL ? be->rpc_wait_for_nodes(be->ctx, call, key, body, len)
                                          : 0;
}

static uint64_t api_object_read_lease_end(smp_host *h, const char *key)
{
    const host_backend *be = &h->reg->be;
    if (key == NULL) return 0;
    return be->object_read_lease_end != NULL ? be->object_read_lease_end(be->ctx, key) : 0;
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
    if (be->group_set_managed == NULL) return SMP_ENOTSUP;
    if (cb == NULL) return be->group_set_managed(be->ctx, h->desc.name, group, managed, NULL, arg);
    hp_owed *o = owed_new(h, NULL, cb, arg);
    if (o == NULL) return SMP_ENOMEM;
    int rc = be->group_set_managed(be->ctx, h->desc.name, group, managed, owed_done, o);
    return rc < 0 ? owed_cancel(o, rc) : rc;
}

typedef int (*host_task_fn)(void *ctx, const char *key, smp_done_cb cb, void *arg);

static int run_task(smp_host *h, host_task_fn fn, const char *key, smp_done_cb cb, void *arg)
{
    if (key == NULL) return SMP_EINVAL;
    if (fn == NULL) return SMP_ENOTSUP;
    if (cb == NULL) return fn(h->reg->be.ctx, key, NULL, arg); /* the backend's answer to that */
    hp_owed *o = owed_new(h, NULL, cb, arg);
    if (o == NULL) return SMP_ENOMEM;
    int rc = fn(h->reg->be.ctx, key, owed_done, o);
    return rc < 0 ? owed_cancel(o, rc) : rc;
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

/* The keys of a mapping in the plugin's block (ABI 1.4). */
static int api_config_keys(smp_host *h, smp_config_scope scope, const char *path,
                           int (*visit)(void *arg, const char *key, uint32_t line), void *arg)
{
    if (scope != SMP_CONFIG_PLUGIN) return SMP_EINVAL;
    return host_config_node_keys(h->pc->block, path, visit, arg);
}

static uint64_t clock_ms(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
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
void hp_host_log(smp_host *h, smp_log_level level, const char *fmt, ...)
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

/* Ask for h's tick at once (ABI 1.10; store_plugin.h says what the host
 * promises): mark its registration, and have the master run the due ticks
 * once the loop is free -- unless h is inside its tick, whose return then
 * makes it due at the next housekeeping round. */
static int api_tick_soon(smp_host *h)
{
    host_plugins *reg = h->reg;
    for (size_t i = 0; i < reg->ticks.n; i++) {
        host_tick_reg *t = reg->ticks.v[i];
        if (t->owner != h) continue;
        t->soon = 1;
        if (!t->running && reg->be.tick_soon != NULL) reg->be.tick_soon(reg->be.ctx);
        return SMP_OK;
    }
    return SMP_ENOTFOUND;
}

/* Point the context-free members (their object carries its own state)
 * straight at the backend, or at the refusing stubs. */
void hp_api_bind_backend(smp_host_api *api, const host_backend *be)
{
    api->writer_write = be->writer_write != NULL ? be->writer_write : enotsup_writer_write;
    api->reader_data = be->reader_data != NULL ? be->reader_data : empty_reader_data;
    api->rpc_reply = be->rpc_reply != NULL ? be->rpc_reply : enotsup_rpc_reply;
    api->rpc_caller = be->rpc_caller != NULL ? be->rpc_caller : open_rpc_caller;
    api->rpc_revision_quota =
        be->rpc_revision_quota != NULL ? be->rpc_revision_quota : open_revision_quota;
}

void hp_api_fill(smp_host *h)
{
    smp_host_api *a = &h->api;
    memset(a, 0, sizeof(*a));
    a->struct_size = sizeof(*a);
    a->abi_major = SMP_ABI_MAJOR;
    a->abi_minor = SMP_ABI_MINOR;
    a->host_caps = hp_offered_caps(h->reg);
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
    a->config_keys = api_config_keys;
    a->now_ms = api_now_ms;
    a->wall_ms = api_wall_ms;
    a->is_leader = api_is_leader;
    a->ha_mode = api_ha_mode;
    a->log = hp_host_log;
    a->alloc = api_alloc;
    a->free = api_free;
    a->objects_version = api_objects_version;
    a->object_read_lease_end = api_object_read_lease_end;
    a->objects_loss_version = api_objects_loss_version;
    a->rpc_wait_for_nodes = api_rpc_wait_for_nodes;
    a->claim_key_space = reg_key_space;
    a->tick_soon = api_tick_soon;
    hp_api_bind_backend(a, &h->reg->be);
}
