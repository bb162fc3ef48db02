/* reload_probe.c -- a test plugin with the ABI 1.1 hot-reload hooks, whose
 * every step can be made to refuse (tests/unit/test_plugin_runtime.c).
 *
 * It registers OpLog type 30 (PROBE_RECORD), section probe_section, RPC
 * service 41 (method 1) and the counter reload_probe_total, and claims the
 * key space "probe/" (ABI 1.9: the new instance claims it while the old one
 * still holds it). Its state
 * (reload_probe_state, mirrored by the test) holds a value handed over by
 * export/import, and counts resumes with the last reason. The string `fail`
 * of its config block, read at each call, makes one step refuse: "quiesce"
 * (quiesce answers SMP_EIO), "busy" (quiesce answers SMP_EAGAIN), "import"
 * (import_state refuses with a sentence), "self_check" (the self-check
 * refuses), "type" (init does not register type 30: the negotiation must
 * refuse). Each instance is its own copy of the library (the host copies it
 * for a reload), so nothing here is shared between the old and new one. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_plugin.h"

typedef struct reload_probe_state {
    uint64_t value;          /* handed over by a reload */
    int resumes;
    int last_reason;
    smp_host *h;
    const smp_host_api *api;
} reload_probe_state;

static int failing(reload_probe_state *st, const char *step)
{
    smp_config_value v;
    memset(&v, 0, sizeof(v));
    v.struct_size = sizeof(v);
    return st->api->config_get(st->h, SMP_CONFIG_PLUGIN, "fail", &v) == SMP_OK &&
           v.type == SMP_CONFIG_STRING && strcmp(v.s, step) == 0;
}

static int replay(void *plugin, const smp_record *rec) { (void)plugin, (void)rec; return SMP_OK; }
static int save(void *plugin, smp_writer *w) { (void)plugin, (void)w; return SMP_OK; }
static int load(void *plugin, smp_reader *r, uint16_t encver) { (void)plugin, (void)r, (void)encver; return SMP_OK; }
static int rpc(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len) { (void)plugin, (void)call, (void)body, (void)len; return SMP_OK; }

static const smp_oplog_type record_type = {sizeof(smp_oplog_type), 30, 1, 1, "PROBE_RECORD", NULL, replay, NULL};
static const smp_snapshot_section section = {sizeof(smp_snapshot_section), "probe_section", 1, save, load};
static const smp_rpc_method methods[] = {{sizeof(smp_rpc_method), 1, "probe", rpc, SMP_ROLE_ADMIN}};
static const smp_rpc_service service = {sizeof(smp_rpc_service), 41, "probe_service", methods, 1};
static const smp_metric_desc counter = {sizeof(smp_metric_desc), SMP_METRIC_COUNTER, "reload_probe_total", "Probe counter.", NULL};

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    int rc;
    smp_metric *m = NULL;
    reload_probe_state *st = calloc(1, sizeof(*st));
    if (st == NULL) return SMP_ENOMEM;
    st->h = h;
    st->api = api;
    if ((!failing(st, "type") && (rc = api->register_oplog_type(h, &record_type)) < 0) ||
        (rc = api->register_snapshot_section(h, &section)) < 0 ||
        (rc = api->register_rpc_service(h, &service)) < 0 ||
        (rc = api->register_metric(h, &counter, &m)) < 0 ||
        (rc = api->claim_key_space(h, "probe/")) < 0) {
        free(st);
        return rc;
    }
    *plugin = st;
    return SMP_OK;
}

static void fini(void *plugin) { free(plugin); }

static int quiesce(void *plugin)
{
    reload_probe_state *st = plugin;
    if (failing(st, "quiesce")) return SMP_EIO;
    return failing(st, "busy") ? SMP_EAGAIN : SMP_OK;
}

static int export_state(void *plugin, smp_handoff *out)
{
    reload_probe_state *st = plugin;
    uint64_t *v = st->api->alloc(sizeof(*v));
    if (v == NULL) return SMP_ENOMEM;
    *v = st->value;
    out->format = 7;
    out->data = v;
    out->len = sizeof(*v);
    return SMP_OK;
}

static int import_state(void *plugin, const smp_handoff *in, char *why, size_t cap)
{
    reload_probe_state *st = plugin;
    if (failing(st, "import")) {
        snprintf(why, cap, "probe refuses the handoff of %zu bytes", in->len);
        return SMP_EPROTO;
    }
    if (in->format != 7 || in->len != sizeof(uint64_t)) {
        snprintf(why, cap, "format %u of %zu bytes is not the probe's", (unsigned)in->format, in->len);
        return SMP_ENOTSUP;
    }
    memcpy(&st->value, in->data, sizeof(st->value));
    return SMP_OK;
}

static int self_check(void *plugin, char *why, size_t cap)
{
    reload_probe_state *st = plugin;
    if (!failing(st, "self_check")) return SMP_OK;
    snprintf(why, cap, "probe self-check says no (value %llu)", (unsigned long long)st->value);
    return SMP_EINVAL;
}

static void resume(void *plugin, smp_resume_reason reason)
{
    reload_probe_state *st = plugin;
    st->resumes++;
    st->last_reason = (int)reason;
}

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "reload_probe", "2.0", SMP_HOST_CAP_DURABLE_OPLOG, 0,
    SMP_PLUGIN_CAP_HOT_RELOAD, init, fini,
    quiesce, export_state, import_state, self_check, resume,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
