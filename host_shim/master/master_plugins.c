/* master_plugins.c -- the master's side of plugin reload, disable and enable.
 *
 * Plugin RPC services are routed through one handler here
 * (master_plugin_rpc), which asks the plugin host who serves the service
 * now: the registry switches instances under a reload without the RPC
 * server knowing, calls to a quiescing plugin are parked by the host and
 * routed again through rpc_server_redispatch once the change ended, and a
 * disabled plugin's services answer its refusal. master_plugins_route
 * mirrors the registry's services into the RPC server (at start and after
 * every switch).
 *
 * The admin RPC methods ADMIN_PLUGIN_LIST / RELOAD / DISABLE / ENABLE
 * (weightctl plugin ...) and SIGHUP (reload every loaded plugin from its
 * configured path, one after the other) start changes; while one is in
 * progress an idle handle polls the host after every loop iteration, so
 * the quiesce ends as soon as the last owed callback ran. Every outcome is
 * logged on stderr with its reason and timing; a refusal is also the RPC's
 * error reply. Nothing here can stop the master: a refused reload leaves the
 * old instance serving. In an HA cluster the commands act on the master
 * that answers, standbys included (master_ha.c admits them), and a switch
 * re-advertises what the master replays. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_rpc.pb-c.h"
#include "master_internal.h"

/* -- Routing ---------------------------------------------------------------- */

static int master_plugin_rpc(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    char err[600];
    int rc = host_plugins_dispatch(m->plugins, (uint16_t)call->service, (uint16_t)call->method,
                                   call, body, len, err, sizeof(err));
    if (rc < 0 && err[0] != '\0') {
        rpc_reply_error(call, rc, err);
        return SMP_OK;
    }
    return rc;
}

/* The RPC server's table of plugin services = the registry's, every method
 * handled by master_plugin_rpc. The previous set is removed first (the
 * switch is one step on the loop thread: no request runs in between). */
int master_plugins_route(master *m, char *err, size_t errlen)
{
    for (size_t i = 0; i < m->n_plugin_svcs; i++) rpc_server_remove_service(m->rpc, m->plugin_svcs[i]);
    m->n_plugin_svcs = 0;
    size_t n = host_plugins_n_rpc_services(m->plugins);
    uint16_t *ids = realloc(m->plugin_svcs, (n ? n : 1) * sizeof(*ids));
    if (ids == NULL) goto no_memory;
    m->plugin_svcs = ids;
    for (size_t i = 0; i < n; i++) {
        const host_rpc_reg *r = host_plugins_rpc_service_at(m->plugins, i);
        smp_rpc_method *methods = calloc(r->s.n_methods ? r->s.n_methods : 1, sizeof(*methods));
        if (methods == NULL) goto no_memory;
        for (size_t k = 0; k < r->s.n_methods; k++)
            methods[k] = (smp_rpc_method){sizeof(smp_rpc_method), r->s.methods[k].method_id,
                                          r->s.methods[k].name, master_plugin_rpc,
                                          r->s.methods[k].min_role};
        int rc = rpc_server_add_service(m->rpc, r->s.service_id, r->s.name, methods, r->s.n_methods, m);
        free(methods);
        if (rc < 0) {
            snprintf(err, errlen, "rpc: service %u (%s) of %s cannot be added: %s",
                     (unsigned)r->s.service_id, r->s.name, host_plugin_desc(r->owner)->name,
                     smp_strerror(rc));
            return rc;
        }
        m->plugin_svcs[m->n_plugin_svcs++] = r->s.service_id;
    }
    return SMP_OK;
no_memory:
    snprintf(err, errlen, "rpc: out of memory routing the plugin services");
    return SMP_ENOMEM;
}

/* A reload switched the registrations: route the services again and, in
 * an HA cluster, advertise the record types and plugin versions now served
 * (what the gates and `weightctl status` go by). */
static void be_services_changed(void *ctx)
{
    master *m = ctx;
    char err[512];
    if (m->rpc != NULL && master_plugins_route(m, err, sizeof(err)) < 0)
        fprintf(stderr, "store_master: %s\n", err);
    if (m->cfg->ha_enabled) master_ha_advertise(m);
}

static void be_redispatch(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    if (m->rpc == NULL) rpc_reply_error(call, SMP_ECANCELED, "the master is shutting down");
    else rpc_server_redispatch(m->rpc, call, body, len);
}

void master_plugins_backend(master *m)
{
    m->backend.services_changed = be_services_changed;
    m->backend.redispatch = be_redispatch;
}

/* -- Polling a change in progress --------------------------------------------- */

static void on_idle(uv_idle_t *h)
{
    master *m = h->data;
    host_plugins_poll(m->plugins);
    if (!host_plugins_changing(m->plugins)) uv_idle_stop(h);
}

/* A change was accepted: poll after every loop iteration until it ended. */
static void watch_change(master *m)
{
    if (!m->stopping && host_plugins_changing(m->plugins)) uv_idle_start(&m->plugin_idle, on_idle);
}

void master_plugins_init(master *m)
{
    uv_idle_init(&m->loop, &m->plugin_idle);
    m->plugin_idle.data = m;
}

void master_plugins_close(master *m)
{
    uv_idle_stop(&m->plugin_idle);
    uv_close((uv_handle_t *)&m->plugin_idle, NULL);
}

void master_plugins_free(master *m)
{
    free(m->plugin_svcs);
    m->plugin_svcs = NULL;
    m->n_plugin_svcs = 0;
}

/* -- Outcomes ------------------------------------------------------------------ */

static void log_change(const char *what, const host_plugin_change_result *res)
{
    if (res->status < 0)
        fprintf(stderr, "store_master: plugin %s: %s refused, the serving instance (%s) serves on: "
                        "%s\n", res->name, what, res->old_version, res->reason);
    else if (strcmp(what, "reload") == 0)
        fprintf(stderr, "store_master: plugin %s: reloaded %s -> %s from %s in %.3f ms (calls held "
                        "%.3f ms)\n", res->name, res->old_version, res->new_version, res->path,
                (double)res->wall_ns / 1e6, (double)res->pause_ns / 1e6);
    else
        fprintf(stderr, "store_master: plugin %s: %sd in %.3f ms\n", res->name, what,
                (double)res->wall_ns / 1e6);
}

static void info_fill(const host_plugin *p, PluginInfo *pi)
{
    const smp_plugin_desc *d = host_plugin_desc(p);
    plugin_info__init(pi);
    pi->name = (char *)(d->name ? d->name : "");
    pi->version = (char *)(d->version ? d->version : "");
    pi->path = (char *)host_plugin_path(p);
    pi->abi_major = d->abi_major;
    pi->abi_minor = d->abi_minor;
    pi->state = (char *)host_plugin_run_name(host_plugin_run_state(p));
    pi->reloadable = host_plugin_can_reload(p) != 0;
    pi->reloads = host_plugin_reloads(p);
}

/* Answer an admin call with how the change ended. */
static void reply_change(master *m, smp_rpc_call *call, const host_plugin_change_result *res)
{
    if (res->status < 0) {
        char msg[1200];
        snprintf(msg, sizeof(msg), "%s", res->reason);
        rpc_reply_error(call, res->status, msg);
        return;
    }
    PluginChange pc = PLUGIN_CHANGE__INIT;
    PluginInfo pi;
    const host_plugin *p = host_plugins_find(m->plugins, res->name);
    if (p == NULL) {
        rpc_reply_error(call, SMP_ENOTFOUND, "the plugin is gone");
        return;
    }
    info_fill(p, &pi);
    pc.plugin = &pi;
    pc.old_version = (char *)res->old_version;
    pc.wall_us = res->wall_ns / 1000u;
    pc.pause_us = res->pause_ns / 1000u;
    master_reply_msg(call, &pc.base);
}

typedef struct admin_change {
    master *m;
    smp_rpc_call *call;
    const char *what;
} admin_change;

static void on_admin_change(void *arg, const host_plugin_change_result *res)
{
    admin_change *a = arg;
    log_change(a->what, res);
    reply_change(a->m, a->call, res);
    free(a);
}

/* -- Admin RPC ------------------------------------------------------------------ */

static PluginRequest *decode_request(smp_rpc_call *call, const uint8_t *body, size_t len, int need_name)
{
    PluginRequest *req = plugin_request__unpack(NULL, len, body);
    if (req == NULL) {
        rpc_reply_error(call, SMP_EPROTO, "PluginRequest does not decode");
        return NULL;
    }
    if (need_name && req->name[0] == '\0') {
        rpc_reply_error(call, SMP_EINVAL, "no plugin name given");
        plugin_request__free_unpacked(req, NULL);
        return NULL;
    }
    return req;
}

int master_plugins_h_list(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    PluginRequest *req = decode_request(call, body, len, 0);
    if (req == NULL) return SMP_OK;
    plugin_request__free_unpacked(req, NULL);
    size_t n = host_plugins_count(m->plugins);
    PluginInfo *infos = calloc(n ? n : 1, sizeof(*infos));
    PluginInfo **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
    if (infos == NULL || ptrs == NULL) {
        free(infos);
        free(ptrs);
        return SMP_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        info_fill(host_plugins_at(m->plugins, i), &infos[i]);
        ptrs[i] = &infos[i];
    }
    PluginList list = PLUGIN_LIST__INIT;
    list.n_plugins = n;
    list.plugins = ptrs;
    master_reply_msg(call, &list.base);
    free(ptrs);
    free(infos);
    return SMP_OK;
}

/* RELOAD and DISABLE: refused at once (the reason is the reply; a reload
 * path that is not absolute among them), or answered once the change
 * ended. */
static int start_change(master *m, smp_rpc_call *call, const uint8_t *body, size_t len, int reload)
{
    char err[1200];
    PluginRequest *req = decode_request(call, body, len, 1);
    if (req == NULL) return SMP_OK;
    if (reload && req->path != NULL && req->path[0] != '\0' && req->path[0] != '/') {
        /* it would name a file of this process's working directory, which
         * the caller knows nothing of (weightctl makes its own absolute) */
        snprintf(err, sizeof(err), "plugin reload %.64s: path '%.512s' is relative: the master "
                 "opens it on its own host, so give it absolute", req->name, req->path);
        fprintf(stderr, "store_master: %s\n", err);
        rpc_reply_error(call, SMP_EINVAL, err);
        plugin_request__free_unpacked(req, NULL);
        return SMP_OK;
    }
    admin_change *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        plugin_request__free_unpacked(req, NULL);
        return SMP_ENOMEM;
    }
    *a = (admin_change){m, call, reload ? "reload" : "disable"};
    int rc = reload ? host_plugins_reload(m->plugins, req->name, req->path, on_admin_change, a, err,
                                          sizeof(err))
                    : host_plugins_disable(m->plugins, req->name, on_admin_change, a, err,
                                           sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "store_master: plugin %s: %s refused: %s\n", req->name, a->what, err);
        rpc_reply_error(call, rc, err);
        free(a);
    } else {
        watch_change(m);
    }
    plugin_request__free_unpacked(req, NULL);
    return SMP_OK;
}

int master_plugins_h_reload(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    return start_change(ctx, call, body, len, 1);
}

int master_plugins_h_disable(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    return start_change(ctx, call, body, len, 0);
}

int master_plugins_h_enable(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    master *m = ctx;
    char err[1000];
    PluginRequest *req = decode_request(call, body, len, 1);
    if (req == NULL) return SMP_OK;
    host_plugin_change_result res;
    memset(&res, 0, sizeof(res));
    snprintf(res.name, sizeof(res.name), "%s", req->name);
    res.status = host_plugins_enable(m->plugins, req->name, err, sizeof(err));
    if (res.status < 0) snprintf(res.reason, sizeof(res.reason), "%s", err);
    const host_plugin *p = host_plugins_find(m->plugins, req->name);
    if (p != NULL) {
        snprintf(res.old_version, sizeof(res.old_version), "%s",
                 host_plugin_desc(p)->version ? host_plugin_desc(p)->version : "?");
        snprintf(res.new_version, sizeof(res.new_version), "%s", res.old_version);
    }
    log_change("enable", &res);
    reply_change(m, call, &res);
    plugin_request__free_unpacked(req, NULL);
    return SMP_OK;
}

/* -- SIGHUP ----------------------------------------------------------------------- */

static void hangup_next(master *m);

static void on_hangup_done(void *arg, const host_plugin_change_result *res)
{
    master *m = arg;
    log_change("reload", res);
    m->hup_next++;
    if (!m->stopping) hangup_next(m);
}

/* Reload the plugins after m->hup_next, one at a time, each from the path
 * its config entry names; one that cannot be reloaded is logged and
 * skipped. */
static void hangup_next(master *m)
{
    char err[1200];
    while (m->hup_next < host_plugins_count(m->plugins)) {
        host_plugin *p = host_plugins_at(m->plugins, m->hup_next);
        const char *name = host_plugin_desc(p)->name;
        const char *path = host_plugin_config_path(p);
        int rc = host_plugins_reload(m->plugins, name ? name : "", path, on_hangup_done, m, err,
                                     sizeof(err));
        if (rc == SMP_OK) {
            watch_change(m);
            return;
        }
        fprintf(stderr, "store_master: SIGHUP: plugin %s not reloaded: %s\n", name ? name : "?", err);
        m->hup_next++;
    }
    m->hup_running = 0;
    fprintf(stderr, "store_master: SIGHUP: every plugin looked at; serving on\n");
}

void master_plugins_on_hangup(master *m)
{
    if (m->hup_running) {
        fprintf(stderr, "store_master: SIGHUP: a reload of every plugin is already running; "
                        "this one is ignored\n");
        return;
    }
    fprintf(stderr, "store_master: SIGHUP: reloading every plugin from its configured path\n");
    m->hup_running = 1;
    m->hup_next = 0;
    hangup_next(m);
}
