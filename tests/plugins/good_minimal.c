/* good_minimal.c -- a test plugin that loads and uses every extension point.
 *
 * It registers one OpLog type (8, gated by the cluster key
 * weight_management_oplog_capability_confirmed), a snapshot section, an
 * object guard, a reconcile tick, an RPC service with two methods, an event
 * handler and a labelled counter. Its guard vetoes anything in a managed
 * group and answers an error for keys starting with "error/". Besides the
 * entry symbol it exports good_minimal_* functions a test resolves with dlsym
 * to act as the plugin after init (register late, append, read counters). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "store_plugin.h"

typedef struct good_state {
    int events[8];
    int guard_calls;
    int durable_calls;
} good_state;

static smp_host *g_host;
static const smp_host_api *g_api;
static good_state *g_state;
static smp_metric *g_events_metric;

static int replay(void *plugin, const smp_record *rec) { (void)plugin, (void)rec; return SMP_OK; }
static int save(void *plugin, smp_writer *w) { (void)plugin, (void)w; return SMP_OK; }
static int load(void *plugin, smp_reader *r, uint16_t encver) { (void)plugin, (void)r, (void)encver; return SMP_OK; }
static int tick(void *plugin, const smp_tick_budget *b, uint64_t *cursor) { (void)plugin, (void)b, (void)cursor; return SMP_TICK_DONE; }
static int rpc(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len) { (void)plugin, (void)call, (void)body, (void)len; return SMP_OK; }

static int check(void *plugin, const smp_guard_request *req)
{
    good_state *st = plugin;
    st->guard_calls++;
    if (req->key != NULL && strncmp(req->key, "error/", 6) == 0) return SMP_EIO;
    return req->group_managed ? SMP_GUARD_VETO : SMP_GUARD_ALLOW;
}

static void on_event(void *plugin, const smp_event *ev)
{
    good_state *st = plugin;
    const char *type[1] = {ev->type == SMP_EVENT_OBJECT_COMPLETED ? "object_completed" : "node_down"};
    st->events[ev->type]++;
    g_api->metric_add(g_events_metric, type, 1);
}

static const smp_oplog_type record_type = {sizeof(smp_oplog_type), 8, 1, 2, "GOOD_RECORD",
                                           "weight_management_oplog_capability_confirmed", replay, NULL};
static const smp_snapshot_section section = {sizeof(smp_snapshot_section), "good_section", 3, save, load};
static const smp_guard guard = {sizeof(smp_guard), check};
static const smp_tick tick_reg = {sizeof(smp_tick), 500, 1, tick};
static const smp_rpc_method methods[] = {
    {sizeof(smp_rpc_method), 1, "ping", rpc, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), 2, "echo", rpc, SMP_ROLE_ADMIN},
};
static const smp_rpc_service service = {sizeof(smp_rpc_service), 16, "good_service", methods, 2};
static const smp_event_handler handler = {
    sizeof(smp_event_handler), SMP_EVENT_MASK(SMP_EVENT_OBJECT_COMPLETED) | SMP_EVENT_MASK(SMP_EVENT_NODE_DOWN),
    on_event};
static const char *const metric_labels[] = {"type", NULL};
static const smp_metric_desc metric = {sizeof(smp_metric_desc), SMP_METRIC_COUNTER,
                                       "good_minimal_events_total", "Events seen by type.", metric_labels};

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    int rc;
    good_state *st = api->alloc(sizeof(*st));
    if (st == NULL) return SMP_ENOMEM;
    memset(st, 0, sizeof(*st));
    if ((rc = api->register_oplog_type(h, &record_type)) < 0 ||
        (rc = api->register_snapshot_section(h, &section)) < 0 ||
        (rc = api->register_guard(h, &guard)) < 0 ||
        (rc = api->register_tick(h, &tick_reg)) < 0 ||
        (rc = api->register_rpc_service(h, &service)) < 0 ||
        (rc = api->register_event_handler(h, &handler)) < 0 ||
        (rc = api->register_metric(h, &metric, &g_events_metric)) < 0) {
        api->free(st);
        return rc;
    }
    /* Only a successful init takes over the globals: a second, refused load
     * of this same library must not clobber the first one's. */
    g_host = h, g_api = api, g_state = st;
    *plugin = st;
    return SMP_OK;
}

static void fini(void *plugin)
{
    free(plugin); /* api->free is malloc's free */
    g_host = NULL, g_api = NULL, g_state = NULL;
}

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "good_minimal", "1.2.3",
    SMP_HOST_CAP_GROUPS | SMP_HOST_CAP_DURABLE_OPLOG,
    SMP_HOST_CAP_METRICS | (UINT64_C(1) << 40), /* an unknown optional bit is ignored */
    SMP_PLUGIN_CAP_OBJECT_GUARD, init, fini,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }

/* -- Hooks for the test (resolved with dlsym) ------------------------------- */

int good_minimal_register_late(void)
{
    static const smp_oplog_type late = {sizeof(smp_oplog_type), 30, 1, 1, "GOOD_LATE", NULL, replay, NULL};
    return g_api->register_oplog_type(g_host, &late);
}

static void durable(void *arg, int status, uint64_t seq)
{
    (void)arg, (void)status, (void)seq;
    g_state->durable_calls++;
}

int good_minimal_append(uint16_t type, uint16_t encver)
{
    static const char payload[] = "payload";
    return g_api->oplog_append(g_host, type, encver, payload, sizeof(payload) - 1, durable, NULL);
}

int good_minimal_event_count(int type) { return g_state->events[type]; }
int good_minimal_guard_calls(void) { return g_state->guard_calls; }
int good_minimal_durable_calls(void) { return g_state->durable_calls; }
const smp_host_api *good_minimal_api(void) { return g_api; }
smp_host *good_minimal_host(void) { return g_host; }
