/* plugin_reload.c -- reloading a plugin in place, disabling and enabling it.
 *
 * A reload (store_plugin.h, "Hot reload") opens the new library from a
 * temporary copy beside the old one and runs its init() with its
 * registrations staged (plugin_host_api.c checks them against the registry
 * less the old instance's entries). Negotiation then compares the two
 * instances: same name, both offering the ABI 1.1 hooks, the new one's
 * plugin capabilities, OpLog types (with their encoding ranges) and
 * sections including the old one's. Everything up to here is refused at
 * once with the registry untouched.
 *
 * Then the old instance quiesces: it stops getting ticks and events, and
 * calls to its RPC services are parked here (body copied) instead of
 * dispatched. host_plugins_poll, which the master runs after every loop
 * iteration while a change is in progress, asks quiesce() and looks at the
 * callbacks the host still owes the instance (plugin_host_api.c counts
 * them); once both say idle, the old instance exports its state, the new
 * one imports it and checks itself, the registrations switch in one step
 * (the old instance's entries leave the tables, the staged ones join,
 * metric families of the same name stay), the new instance resumes, the
 * old one is finalised and closed, and the parked calls are routed again --
 * to the new instance. Any refusal on the way rolls back: the new instance
 * is finalised and closed, the old one resumes and gets the parked calls.
 * A quiesce that does not finish within HOST_QUIESCE_TIMEOUT_MS is a
 * refusal too.
 *
 * A disable is the same quiesce without a new instance; it ends with the
 * plugin loaded but withheld (HOST_PLUGIN_DISABLED): its services answer a
 * clear refusal, the registry stops giving it ticks, events and guard
 * calls. Enable resumes it. Loop thread only, one change at a time. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin_host_internal.h"
#include "wm_errbuf.h"

/* The descriptor size of ABI 1.1: up to resume. */
#define V11_DESC ABI_V1_SIZE(smp_plugin_desc, resume)

typedef enum hp_change_kind {
    HP_RELOAD = 1,
    HP_DISABLE = 2
} hp_change_kind;

struct hp_change {
    hp_change_kind kind;
    host_plugin *old;            /* the instance quiescing */
    host_plugin *cand;           /* reload: the new instance, staged */
    uint64_t start_ns;           /* the request */
    uint64_t quiesce_ns;         /* when the old instance stopped serving */
    uint64_t deadline_ns;        /* quiesce timeout */
    host_plugin_change_fn done;
    void *arg;
};

/* -- Looking plugins up ----------------------------------------------------- */

host_plugin *host_plugins_find(const host_plugins *reg, const char *name)
{
    for (size_t i = 0; reg != NULL && name != NULL && i < reg->plugins.n; i++) {
        host_plugin *p = reg->plugins.v[i];
        if (p->desc.name != NULL && strcmp(p->desc.name, name) == 0) return p;
    }
    return NULL;
}

host_plugin_run host_plugin_run_state(const host_plugin *p)
{
    return p != NULL ? p->run : HOST_PLUGIN_DISABLED;
}

const char *host_plugin_run_name(host_plugin_run r)
{
    switch (r) {
    case HOST_PLUGIN_ACTIVE: return "active";
    case HOST_PLUGIN_QUIESCING: return "quiescing";
    case HOST_PLUGIN_DISABLED: return "disabled";
    }
    return "unknown";
}

uint64_t host_plugin_reloads(const host_plugin *p)
{
    return p != NULL ? p->reloads : 0;
}

int host_plugin_can_reload(const host_plugin *p)
{
    const smp_plugin_desc *d = &p->desc;
    return d->struct_size >= V11_DESC && (d->plugin_caps & SMP_PLUGIN_CAP_HOT_RELOAD) &&
           d->quiesce != NULL && d->export_state != NULL && d->import_state != NULL &&
           d->resume != NULL;
}

int host_plugins_changing(const host_plugins *reg)
{
    return reg != NULL && reg->change != NULL;
}

/* "a, b" -- the names of the loaded plugins, for a refusal. */
static void loaded_names(const host_plugins *reg, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < reg->plugins.n && used < cap; i++) {
        const host_plugin *p = reg->plugins.v[i];
        int n = snprintf(out + used, cap - used, "%s%s", i ? ", " : "", hp_str_or(p->desc.name, p->file));
        if (n < 0) break;
        used += (size_t)n;
    }
    if (reg->plugins.n == 0) snprintf(out, cap, "none");
}

/* The plugin named `name` that a change may start on, or NULL with the
 * refusal in err and *rc. */
static host_plugin *change_target(host_plugins *reg, const char *name, const char *what, int *rc,
                                  char *err, size_t errlen)
{
    char names[512];
    host_plugin *p;
    if (reg->change != NULL) {
        wm_errbuf(err, errlen, "a %s of plugin %s is in progress; try again when it ended",
                  reg->change->kind == HP_RELOAD ? "reload" : "disable",
                  hp_str_or(reg->change->old->desc.name, reg->change->old->file));
        *rc = SMP_EBUSY;
        return NULL;
    }
    if ((p = host_plugins_find(reg, name)) == NULL) {
        loaded_names(reg, names, sizeof(names));
        wm_errbuf(err, errlen, "no plugin named '%s' is loaded (loaded: %s)", name, names);
        *rc = SMP_ENOTFOUND;
        return NULL;
    }
    if (p->run == HOST_PLUGIN_DISABLED) {
        wm_errbuf(err, errlen, "plugin %s is disabled: %s", name,
                  strcmp(what, "disable") == 0 ? "it is already"
                                               : "enable it first (weightctl plugin enable)");
        *rc = SMP_ESTATE;
        return NULL;
    }
    return p;
}

/* -- Negotiation ----------------------------------------------------------------- */

static const host_oplog_type_reg *staged_type(const host_plugin *cand, uint16_t type)
{
    for (size_t i = 0; i < cand->s_types.n; i++) {
        const host_oplog_type_reg *t = cand->s_types.v[i];
        if (t->t.type == type) return t;
    }
    return NULL;
}

static int staged_section(const host_plugin *cand, const char *name)
{
    for (size_t i = 0; i < cand->s_sections.n; i++)
        if (strcmp(((const host_section_reg *)cand->s_sections.v[i])->s.name, name) == 0) return 1;
    return 0;
}

/* Whether the new instance can take the old one's place: same name, the
 * reload hooks, every capability, OpLog type (encoding range) and section
 * of the old one. SMP_OK, or a refusal with err naming the field and both
 * sides. */
static int negotiate(const host_plugins *reg, const host_plugin *old, const host_plugin *cand,
                     char *err, size_t errlen)
{
    const char *oname = hp_str_or(old->desc.name, old->file);
    uint64_t dropped = old->desc.plugin_caps & ~cand->desc.plugin_caps;
    if (cand->desc.name == NULL || strcmp(cand->desc.name, oname) != 0) {
        wm_errbuf(err, errlen, "%s: plugin name '%s' is not '%s', the plugin it would replace",
                  cand->file, hp_str_or(cand->desc.name, "(none)"), oname);
        return SMP_EINVAL;
    }
    if (!host_plugin_can_reload(cand)) {
        wm_errbuf(err, errlen, "%s: ABI %u.%u plugin without state handoff (it needs "
                  "SMP_PLUGIN_CAP_HOT_RELOAD and the ABI 1.1 hooks quiesce, export_state, "
                  "import_state, resume)", cand->file, (unsigned)cand->desc.abi_major,
                  (unsigned)cand->desc.abi_minor);
        return SMP_ENOTSUP;
    }
    if (dropped != 0) {
        wm_errbuf(err, errlen, "%s: plugin capabilities 0x%" PRIx64 " lack 0x%" PRIx64
                  " that the serving instance offers (0x%" PRIx64 ")", cand->file,
                  cand->desc.plugin_caps, dropped, old->desc.plugin_caps);
        return SMP_ENOTSUP;
    }
    for (size_t i = 0; i < reg->types.n; i++) {
        const host_oplog_type_reg *o = reg->types.v[i];
        const host_oplog_type_reg *n;
        if (o->owner != old) continue;
        if ((n = staged_type(cand, o->t.type)) == NULL) {
            wm_errbuf(err, errlen, "%s: does not replay OpLog type %u (%s), which the serving "
                      "instance replays", cand->file, (unsigned)o->t.type, o->t.name);
            return SMP_ENOTSUP;
        }
        if (n->t.min_encver > o->t.min_encver || n->t.max_encver < o->t.max_encver) {
            wm_errbuf(err, errlen, "%s: replays OpLog type %u (%s) at encodings %u..%u, the "
                      "serving instance at %u..%u", cand->file, (unsigned)o->t.type, o->t.name,
                      (unsigned)n->t.min_encver, (unsigned)n->t.max_encver,
                      (unsigned)o->t.min_encver, (unsigned)o->t.max_encver);
            return SMP_ENOTSUP;
        }
    }
    for (size_t i = 0; i < reg->sections.n; i++) {
        const host_section_reg *o = reg->sections.v[i];
        if (o->owner == old && !staged_section(cand, o->s.name)) {
            wm_errbuf(err, errlen, "%s: does not register snapshot section '%s', which the "
                      "serving instance does", cand->file, o->s.name);
            return SMP_ENOTSUP;
        }
    }
    return SMP_OK;
}

/* -- Parking calls ------------------------------------------------------------------ */

static int park(host_plugins *reg, uint16_t service, uint16_t method, smp_rpc_call *call,
                const uint8_t *body, size_t len)
{
    hp_parked *q = calloc(1, sizeof(*q));
    if (q == NULL || (len > 0 && (q->body = malloc(len)) == NULL)) {
        free(q);
        return SMP_ENOMEM;
    }
    if (len > 0) memcpy(q->body, body, len);
    q->len = len;
    q->call = call;
    q->service = service;
    q->method = method;
    if (reg->parked_tail == NULL) reg->parked_tail = &reg->parked;
    *reg->parked_tail = q;
    reg->parked_tail = &q->next;
    return SMP_OK;
}

/* Route every parked call again, oldest first (to whoever serves now), or
 * answer it SMP_ECANCELED when the master gave no way to (shutdown). */
static void release_parked(host_plugins *reg, int cancel)
{
    hp_parked *q = reg->parked;
    reg->parked = NULL;
    reg->parked_tail = &reg->parked;
    while (q != NULL) {
        hp_parked *next = q->next;
        if (!cancel && reg->be.redispatch != NULL)
            reg->be.redispatch(reg->be.ctx, q->call, q->body, q->len);
        else if (reg->be.rpc_reply != NULL)
            reg->be.rpc_reply(q->call, SMP_ECANCELED, NULL, 0);
        free(q->body);
        free(q);
        q = next;
    }
}

int host_plugins_dispatch(host_plugins *reg, uint16_t service, uint16_t method, smp_rpc_call *call,
                          const uint8_t *body, size_t len, char *err, size_t errlen)
{
    const host_rpc_reg *r = host_plugins_rpc_service(reg, service);
    host_plugin *p;
    if (err != NULL && errlen > 0) err[0] = '\0';
    if (r == NULL) {
        wm_errbuf(err, errlen, "no loaded plugin serves service %u", (unsigned)service);
        return SMP_ENOTFOUND;
    }
    p = r->owner;
    if (p->run == HOST_PLUGIN_DISABLED) {
        wm_errbuf(err, errlen, "plugin %s is disabled: service %u (%s) is refused until "
                  "`weightctl plugin enable %s`", hp_str_or(p->desc.name, p->file),
                  (unsigned)service, r->s.name, hp_str_or(p->desc.name, p->file));
        return SMP_ENOTSUP;
    }
    if (p->run == HOST_PLUGIN_QUIESCING) {
        if (park(reg, service, method, call, body, len) == SMP_OK) return SMP_OK;
        wm_errbuf(err, errlen, "out of memory parking a call to service %u while plugin %s "
                  "is quiesced", (unsigned)service, hp_str_or(p->desc.name, p->file));
        return SMP_ENOMEM;
    }
    for (size_t i = 0; i < r->s.n_methods; i++)
        if (r->s.methods[i].method_id == method)
            return r->s.methods[i].handler(p->state, call, body, len);
    wm_errbuf(err, errlen, "service %u (%s) has no method %u", (unsigned)service, r->s.name,
              (unsigned)method);
    return SMP_ENOTFOUND;
}

/* -- Ending a change -------------------------------------------------------------- */

static void result_init(const hp_change *ch, host_plugin_change_result *res)
{
    memset(res, 0, sizeof(*res));
    snprintf(res->name, sizeof(res->name), "%s", hp_str_or(ch->old->desc.name, ch->old->file));
    snprintf(res->old_version, sizeof(res->old_version), "%s", hp_str_or(ch->old->desc.version, "?"));
    snprintf(res->new_version, sizeof(res->new_version), "%s", res->old_version);
    snprintf(res->path, sizeof(res->path), "%s", ch->old->path);
}

/* Hand the result over and forget the change: parked calls first (to the
 * instance serving now), then done (which may start the next change). */
static void change_end(host_plugins *reg, hp_change *ch, host_plugin_change_result *res)
{
    uint64_t now = hp_clock_ns();
    res->wall_ns = now - ch->start_ns;
    res->pause_ns = now - ch->quiesce_ns;
    reg->change = NULL;
    release_parked(reg, 0);
    if (ch->done != NULL) ch->done(ch->arg, res);
    free(ch);
}

/* Refuse the change: the new instance (if any) is finalised and closed,
 * the old one resumes (ROLLBACK) and serves on. */
static void rollback(host_plugins *reg, hp_change *ch, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void rollback(host_plugins *reg, hp_change *ch, int rc, const char *fmt, ...)
{
    host_plugin_change_result res;
    va_list ap;
    result_init(ch, &res);
    res.status = rc < 0 ? rc : SMP_EINVAL;
    va_start(ap, fmt);
    vsnprintf(res.reason, sizeof(res.reason), fmt, ap);
    va_end(ap);
    if (ch->cand != NULL) {
        snprintf(res.new_version, sizeof(res.new_version), "%s", hp_str_or(ch->cand->desc.version, "?"));
        hp_plugin_unload(ch->cand);
        ch->cand = NULL;
    }
    ch->old->run = HOST_PLUGIN_ACTIVE;
    if (ch->old->desc.struct_size >= V11_DESC && ch->old->desc.resume != NULL)
        ch->old->desc.resume(ch->old->state, SMP_RESUME_ROLLBACK);
    change_end(reg, ch, &res);
}

/* Make room for `more` entries so that the switch cannot fail half-way. */
static int vec_reserve(host_vec *vec, size_t more)
{
    size_t need = vec->n + more;
    if (need <= vec->cap) return SMP_OK;
    void **grown = realloc(vec->v, need * sizeof(*grown));
    if (grown == NULL) return SMP_ENOMEM;
    vec->v = grown;
    vec->cap = need;
    return SMP_OK;
}

/* The old instance's entries leave the table, the new one's staged entries
 * join it (room reserved beforehand). */
static void swap_entries(host_vec *main, host_vec *staged, const host_plugin *old, size_t owner_off)
{
    hp_vec_drop_owner(main, old, owner_off);
    for (size_t i = 0; i < staged->n; i++) main->v[main->n++] = staged->v[i];
    staged->n = 0;
}

/* Whether the new instance took over the family f. */
static int cand_shares(const host_plugin *cand, const host_metric *f)
{
    for (size_t i = 0; i < cand->n_metrics; i++)
        if (cand->metrics[i].shared && cand->metrics[i].f == f) return 1;
    return 0;
}

/* Switch the registrations from old to cand in one step (nothing can fail
 * after the reservation), resume cand, finalise and close old. */
static int switch_over(host_plugins *reg, host_plugin *old, host_plugin *cand)
{
    if (vec_reserve(&reg->types, cand->s_types.n) < 0 ||
        vec_reserve(&reg->sections, cand->s_sections.n) < 0 ||
        vec_reserve(&reg->rpcs, cand->s_rpcs.n) < 0 || vec_reserve(&reg->ticks, cand->s_ticks.n) < 0 ||
        vec_reserve(&reg->handlers, cand->s_handlers.n) < 0)
        return SMP_ENOMEM;
    swap_entries(&reg->types, &cand->s_types, old, offsetof(host_oplog_type_reg, owner));
    swap_entries(&reg->sections, &cand->s_sections, old, offsetof(host_section_reg, owner));
    swap_entries(&reg->rpcs, &cand->s_rpcs, old, offsetof(host_rpc_reg, owner));
    swap_entries(&reg->ticks, &cand->s_ticks, old, offsetof(host_tick_reg, owner));
    swap_entries(&reg->handlers, &cand->s_handlers, old, offsetof(host_event_reg, owner));
    for (size_t i = 0; i < old->n_metrics; i++)
        if (!cand_shares(cand, old->metrics[i].f))
            host_metrics_unregister(reg->metrics, old->metrics[i].f);
    old->n_metrics = 0;
    for (size_t i = 0; i < cand->n_metrics; i++) cand->metrics[i].shared = 0;
    for (size_t i = 0; i < reg->plugins.n; i++)
        if (reg->plugins.v[i] == old) reg->plugins.v[i] = cand;
    cand->replaces = NULL;
    cand->run = HOST_PLUGIN_ACTIVE;
    cand->reloads = old->reloads + 1;
    cand->tick_log = old->tick_log;
    cand->guard_log = old->guard_log;
    host_plugins_set_timing(reg, &reg->timing); /* the new instance's series (same names) */
    cand->desc.resume(cand->state, SMP_RESUME_HANDOFF);
    hp_plugin_unload(old);
    if (reg->be.services_changed != NULL) reg->be.services_changed(reg->be.ctx);
    return SMP_OK;
}

/* The old instance is idle: hand its state to the new one and switch, or
 * roll back with the step that refused. */
static void finish_reload(host_plugins *reg, hp_change *ch)
{
    host_plugin *old = ch->old, *cand = ch->cand;
    host_plugin_change_result res;
    smp_handoff h;
    char why[600] = "";
    int rc;

    memset(&h, 0, sizeof(h));
    h.struct_size = sizeof(h);
    if ((rc = old->desc.export_state(old->state, &h)) < 0) {
        free(h.data);
        rollback(reg, ch, rc, "%s: export_state of the serving instance failed: %s", old->file,
                 smp_strerror(rc));
        return;
    }
    h.from_version = old->desc.version;
    rc = cand->desc.import_state(cand->state, &h, why, sizeof(why));
    free(h.data); /* allocated with the API's alloc, which is malloc */
    if (rc < 0) {
        rollback(reg, ch, rc, "%s: the new instance refused the state handoff: %s (%s)", cand->file,
                 why[0] ? why : "no reason given", smp_strerror(rc));
        return;
    }
    if (cand->desc.self_check != NULL &&
        (rc = cand->desc.self_check(cand->state, why, sizeof(why))) < 0) {
        rollback(reg, ch, rc, "%s: self-check of the new instance failed: %s (%s)", cand->file,
                 why[0] ? why : "no reason given", smp_strerror(rc));
        return;
    }
    result_init(ch, &res);
    snprintf(res.new_version, sizeof(res.new_version), "%s", hp_str_or(cand->desc.version, "?"));
    snprintf(res.path, sizeof(res.path), "%s", cand->path);
    if ((rc = switch_over(reg, old, cand)) < 0) {
        rollback(reg, ch, rc, "%s: out of memory switching the registrations", cand->file);
        return;
    }
    ch->cand = NULL;
    change_end(reg, ch, &res);
}

void host_plugins_poll(host_plugins *reg)
{
    hp_change *ch = reg != NULL ? reg->change : NULL;
    host_plugin *old;
    int q = SMP_OK;
    if (ch == NULL) return;
    old = ch->old;
    if (old->desc.struct_size >= V11_DESC && old->desc.quiesce != NULL) {
        q = old->desc.quiesce(old->state);
        old->quiesce_called = 1;
    }
    if (q != SMP_OK && q != SMP_EAGAIN) {
        rollback(reg, ch, q, "%s: quiesce failed: %s", old->file, smp_strerror(q));
        return;
    }
    if (q == SMP_OK && old->inflight == 0) {
        if (ch->kind == HP_RELOAD) {
            finish_reload(reg, ch);
        } else {
            host_plugin_change_result res;
            result_init(ch, &res);
            old->run = HOST_PLUGIN_DISABLED;
            change_end(reg, ch, &res);
        }
        return;
    }
    if (hp_clock_ns() >= ch->deadline_ns)
        rollback(reg, ch, SMP_EBUSY, "%s did not quiesce within %u ms (%u host callbacks still "
                 "owed to it%s)", hp_str_or(old->desc.name, old->file), HOST_QUIESCE_TIMEOUT_MS,
                 old->inflight, q == SMP_EAGAIN ? ", and it reports work in flight" : "");
}

/* -- Starting a change ----------------------------------------------------------- */

static int change_begin(host_plugins *reg, hp_change_kind kind, host_plugin *old, host_plugin *cand,
                        uint64_t start_ns, host_plugin_change_fn done, void *arg)
{
    hp_change *ch = calloc(1, sizeof(*ch));
    if (ch == NULL) return SMP_ENOMEM;
    ch->kind = kind;
    ch->old = old;
    ch->cand = cand;
    ch->start_ns = start_ns;
    ch->quiesce_ns = hp_clock_ns();
    ch->deadline_ns = ch->quiesce_ns + (uint64_t)HOST_QUIESCE_TIMEOUT_MS * 1000000u;
    ch->done = done;
    ch->arg = arg;
    old->run = HOST_PLUGIN_QUIESCING;
    old->quiesce_called = 0;
    reg->change = ch;
    return SMP_OK;
}

int host_plugins_reload(host_plugins *reg, const char *name, const char *path,
                        host_plugin_change_fn done, void *arg, char *err, size_t errlen)
{
    uint64_t start = hp_clock_ns();
    host_plugin *old, *cand = NULL;
    int rc = SMP_OK;

    if (err != NULL && errlen > 0) err[0] = '\0';
    if (reg == NULL || name == NULL) return SMP_EINVAL;
    if ((old = change_target(reg, name, "reload", &rc, err, errlen)) == NULL) return rc;
    if (!host_plugin_can_reload(old)) {
        wm_errbuf(err, errlen, "plugin %s (ABI %u.%u) cannot hand its state over: it lacks "
                  "SMP_PLUGIN_CAP_HOT_RELOAD or the ABI 1.1 hooks; restart the master to load "
                  "another build", name, (unsigned)old->desc.abi_major, (unsigned)old->desc.abi_minor);
        return SMP_ENOTSUP;
    }
    if (path == NULL || path[0] == '\0') path = old->path;
    if ((rc = hp_plugin_open(reg, old->pc, path, old, &cand, err, errlen)) < 0) return rc;
    if ((rc = negotiate(reg, old, cand, err, errlen)) < 0 ||
        (rc = change_begin(reg, HP_RELOAD, old, cand, start, done, arg)) < 0) {
        if (rc == SMP_ENOMEM) wm_errbuf(err, errlen, "out of memory starting the reload of %s", name);
        hp_plugin_unload(cand);
        return rc;
    }
    return SMP_OK;
}

int host_plugins_disable(host_plugins *reg, const char *name, host_plugin_change_fn done, void *arg,
                         char *err, size_t errlen)
{
    host_plugin *p;
    int rc = SMP_OK;
    if (err != NULL && errlen > 0) err[0] = '\0';
    if (reg == NULL || name == NULL) return SMP_EINVAL;
    if ((p = change_target(reg, name, "disable", &rc, err, errlen)) == NULL) return rc;
    if ((rc = change_begin(reg, HP_DISABLE, p, NULL, hp_clock_ns(), done, arg)) < 0)
        wm_errbuf(err, errlen, "out of memory starting the disable of %s", name);
    return rc;
}

int host_plugins_enable(host_plugins *reg, const char *name, char *err, size_t errlen)
{
    host_plugin *p;
    char names[512];
    if (err != NULL && errlen > 0) err[0] = '\0';
    if (reg == NULL || name == NULL) return SMP_EINVAL;
    if ((p = host_plugins_find(reg, name)) == NULL) {
        loaded_names(reg, names, sizeof(names));
        wm_errbuf(err, errlen, "no plugin named '%s' is loaded (loaded: %s)", name, names);
        return SMP_ENOTFOUND;
    }
    if (p->run != HOST_PLUGIN_DISABLED) {
        wm_errbuf(err, errlen, "plugin %s is not disabled (it is %s)", name,
                  host_plugin_run_name(p->run));
        return SMP_ESTATE;
    }
    p->run = HOST_PLUGIN_ACTIVE;
    if (p->desc.struct_size >= V11_DESC && p->desc.resume != NULL)
        p->desc.resume(p->state, SMP_RESUME_ENABLE);
    return SMP_OK;
}

void hp_change_abandon(host_plugins *reg)
{
    hp_change *ch = reg->change;
    host_plugin_change_result res;
    if (ch == NULL) {
        release_parked(reg, 1);
        return;
    }
    result_init(ch, &res);
    res.status = SMP_ECANCELED;
    snprintf(res.reason, sizeof(res.reason), "the master is shutting down");
    reg->change = NULL;
    if (ch->cand != NULL) hp_plugin_unload(ch->cand);
    ch->old->run = HOST_PLUGIN_ACTIVE;
    release_parked(reg, 1);
    if (ch->done != NULL) ch->done(ch->arg, &res);
    free(ch);
}
