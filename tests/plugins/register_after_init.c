/* register_after_init.c -- a test plugin that registers nothing in init()
 * but keeps the host handle and API table, and exports
 * register_after_init_try_all(), which calls every register_* member and
 * claim_key_space after init. Each must answer SMP_ESTATE and add nothing;
 * the function returns how many did. */
#include <stddef.h>

#include "store_plugin.h"

static smp_host *g_host;
static const smp_host_api *g_api;

static int replay(void *plugin, const smp_record *rec) { (void)plugin, (void)rec; return SMP_OK; }
static int save(void *plugin, smp_writer *w) { (void)plugin, (void)w; return SMP_OK; }
static int load(void *plugin, smp_reader *r, uint16_t encver) { (void)plugin, (void)r, (void)encver; return SMP_OK; }
static int check(void *plugin, const smp_guard_request *req) { (void)plugin, (void)req; return SMP_GUARD_VETO; }
static int tick(void *plugin, const smp_tick_budget *b, uint64_t *cursor) { (void)plugin, (void)b, (void)cursor; return SMP_TICK_DONE; }
static void on_event(void *plugin, const smp_event *ev) { (void)plugin, (void)ev; }

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    (void)plugin;
    g_host = h, g_api = api;
    return SMP_OK;
}

int register_after_init_try_all(void)
{
    static const smp_oplog_type t = {sizeof(smp_oplog_type), 60, 1, 1, "LATE_TYPE", NULL, replay, NULL};
    static const smp_snapshot_section s = {sizeof(smp_snapshot_section), "late_section", 1, save, load};
    static const smp_guard g = {sizeof(smp_guard), check};
    static const smp_tick k = {sizeof(smp_tick), 100, 0, tick};
    static const smp_rpc_service r = {sizeof(smp_rpc_service), 60, "late_service", NULL, 0};
    static const smp_event_handler e = {sizeof(smp_event_handler), 0xff, on_event};
    static const smp_metric_desc m = {sizeof(smp_metric_desc), SMP_METRIC_COUNTER, "late_total", "h", NULL};
    smp_metric *out = NULL;
    int n = 0;
    n += g_api->register_oplog_type(g_host, &t) == SMP_ESTATE;
    n += g_api->register_snapshot_section(g_host, &s) == SMP_ESTATE;
    n += g_api->register_guard(g_host, &g) == SMP_ESTATE;
    n += g_api->register_tick(g_host, &k) == SMP_ESTATE;
    n += g_api->register_rpc_service(g_host, &r) == SMP_ESTATE;
    n += g_api->register_event_handler(g_host, &e) == SMP_ESTATE;
    n += g_api->register_metric(g_host, &m, &out) == SMP_ESTATE;
    n += g_api->claim_key_space(g_host, "late/") == SMP_ESTATE;
    return n;
}

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "register_after_init", "1.0", 0, 0, 0, init, NULL,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
