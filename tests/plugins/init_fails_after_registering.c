/* init_fails_after_registering.c -- a test plugin that registers one of
 * everything (type, section, guard, tick, RPC service, event handler,
 * metric), all accepted, and then fails init() with SMP_EIO. The host must
 * report "init failed: SMP_EIO (-8)", undo every registration and never call
 * fini() (its fini traps, so a host that called it would crash the test). */
#include <stddef.h>

#include "store_plugin.h"

static int replay(void *plugin, const smp_record *rec) { (void)plugin, (void)rec; return SMP_OK; }
static int save(void *plugin, smp_writer *w) { (void)plugin, (void)w; return SMP_OK; }
static int load(void *plugin, smp_reader *r, uint16_t encver) { (void)plugin, (void)r, (void)encver; return SMP_OK; }
static int check(void *plugin, const smp_guard_request *req) { (void)plugin, (void)req; return SMP_GUARD_VETO; }
static int tick(void *plugin, const smp_tick_budget *b, uint64_t *cursor) { (void)plugin, (void)b, (void)cursor; return SMP_TICK_DONE; }
static int rpc(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len) { (void)plugin, (void)call, (void)body, (void)len; return SMP_OK; }
static void on_event(void *plugin, const smp_event *ev) { (void)plugin, (void)ev; }

static const smp_oplog_type t = {sizeof(smp_oplog_type), 70, 1, 1, "FAILING_RECORD",
                                 "weight_lineage_oplog_capability_confirmed", replay, NULL};
static const smp_snapshot_section s = {sizeof(smp_snapshot_section), "failing_section", 1, save, load};
static const smp_guard g = {sizeof(smp_guard), check};
static const smp_tick k = {sizeof(smp_tick), 100, 1, tick};
static const smp_rpc_method methods[] = {{sizeof(smp_rpc_method), 1, "call", rpc, SMP_ROLE_ADMIN}};
static const smp_rpc_service r = {sizeof(smp_rpc_service), 17, "failing_service", methods, 1};
static const smp_event_handler e = {sizeof(smp_event_handler), 0xfe, on_event};
static const smp_metric_desc m = {sizeof(smp_metric_desc), SMP_METRIC_COUNTER, "failing_total", "h", NULL};

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    smp_metric *out = NULL;
    (void)plugin;
    if (api->register_oplog_type(h, &t) < 0 || api->register_snapshot_section(h, &s) < 0 ||
        api->register_guard(h, &g) < 0 || api->register_tick(h, &k) < 0 ||
        api->register_rpc_service(h, &r) < 0 || api->register_event_handler(h, &e) < 0 ||
        api->register_metric(h, &m, &out) < 0)
        return SMP_EINVAL;
    return SMP_EIO;
}

static void fini(void *plugin)
{
    (void)plugin;
    __builtin_trap(); /* fini of a plugin whose init failed must never run */
}

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "init_fails_after_registering", "1.0", 0, 0, 0, init, fini,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
