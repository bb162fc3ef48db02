/* weight_plugin.c -- the ABI entry point of weight_mgmt.so and its wiring.
 *
 * This file only connects the plugin to the host: it exports the descriptor,
 * and in init() registers the plugin's OpLog types (8-12, with their gates),
 * its snapshot section, its object guard and its reconcile tick. The
 * behaviour behind each registration lives in the files DESIGN.md section 6
 * names. Until the revision store exists, the plugin holds no revisions: its
 * section saves as empty, a non-empty section or a record of its types stops
 * recovery with an error naming it (fail closed, never skipped), and the guard
 * protects every managed group from the generic store lifecycle. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weight_management.h"

__attribute__((visibility("default"))) const smp_plugin_desc *smp_plugin_entry(void);

typedef struct wm_plugin {
    smp_host *host;
    const smp_host_api *api;
} wm_plugin;

/* Replay of a weight record. No record of these types can have been written
 * by this build, so one in the log comes from a newer plugin: refuse it and
 * let recovery stop with the type named. */
static int wm_replay(void *plugin, const smp_record *rec)
{
    wm_plugin *p = plugin;
    p->api->log(p->host, SMP_LOG_ERROR,
                "record %llu of type %u cannot be replayed by this build",
                (unsigned long long)rec->seq, (unsigned)rec->type);
    return SMP_ENOTSUP;
}

static int wm_describe(void *plugin, const smp_record *rec, char *buf, size_t cap)
{
    (void)plugin;
    int n = snprintf(buf, cap, "weight record type %u, %zu bytes", (unsigned)rec->type, rec->len);
    return n < 0 ? SMP_EINVAL : n;
}

/* The revision table is empty: the section is empty. */
static int wm_section_save(void *plugin, smp_writer *w)
{
    (void)plugin;
    (void)w;
    return SMP_OK;
}

static int wm_section_load(void *plugin, smp_reader *r, uint16_t encver)
{
    wm_plugin *p = plugin;
    const uint8_t *data = NULL;
    size_t len = 0;
    p->api->reader_data(r, &data, &len);
    if (len == 0) return SMP_OK;
    p->api->log(p->host, SMP_LOG_ERROR,
                "section %s (encver %u, %zu bytes) holds revisions this build cannot load",
                WM_SECTION_NAME, (unsigned)encver, len);
    return SMP_ENOTSUP;
}

/* A managed group is a weight revision's lifecycle boundary: the generic
 * store lifecycle may never act on one of its members. */
static int wm_guard(void *plugin, const smp_guard_request *req)
{
    (void)plugin;
    return req->group_managed ? SMP_GUARD_VETO : SMP_GUARD_ALLOW;
}

static int wm_tick(void *plugin, const smp_tick_budget *budget, uint64_t *cursor)
{
    (void)plugin;
    (void)budget;
    *cursor = 0;
    return SMP_TICK_DONE;
}

static const smp_oplog_type wm_types[] = {
    {sizeof(smp_oplog_type), WM_OP_METADATA_UPSERT, WM_RECORD_ENCVER, WM_RECORD_ENCVER,
     "WEIGHT_METADATA_UPSERT", WM_GATE_MANAGEMENT, wm_replay, wm_describe},
    {sizeof(smp_oplog_type), WM_OP_METADATA_DELETE, WM_RECORD_ENCVER, WM_RECORD_ENCVER,
     "WEIGHT_METADATA_DELETE", WM_GATE_MANAGEMENT, wm_replay, wm_describe},
    {sizeof(smp_oplog_type), WM_OP_LEASE_UPSERT, WM_RECORD_ENCVER, WM_RECORD_ENCVER,
     "WEIGHT_LEASE_UPSERT", WM_GATE_MANAGEMENT, wm_replay, wm_describe},
    {sizeof(smp_oplog_type), WM_OP_LEASE_DELETE, WM_RECORD_ENCVER, WM_RECORD_ENCVER,
     "WEIGHT_LEASE_DELETE", WM_GATE_MANAGEMENT, wm_replay, wm_describe},
    {sizeof(smp_oplog_type), WM_OP_LINEAGE_CLAIM, WM_RECORD_ENCVER, WM_RECORD_ENCVER,
     "WEIGHT_LINEAGE_CLAIM", WM_GATE_LINEAGE, wm_replay, wm_describe},
};

static const smp_snapshot_section wm_section = {
    sizeof(smp_snapshot_section), WM_SECTION_NAME, WM_SECTION_ENCVER,
    wm_section_save, wm_section_load,
};

static const smp_guard wm_guard_reg = {sizeof(smp_guard), wm_guard};

static const smp_tick wm_tick_reg = {sizeof(smp_tick), 1000, 1, wm_tick};

/* Register everything; the host undoes it all if any step fails. */
static int wm_init(smp_host *h, const smp_host_api *api, void **out)
{
    int rc;
    wm_plugin *p = calloc(1, sizeof(*p));
    if (p == NULL) return SMP_ENOMEM;
    p->host = h;
    p->api = api;
    for (size_t i = 0; i < sizeof(wm_types) / sizeof(wm_types[0]); i++)
        if ((rc = api->register_oplog_type(h, &wm_types[i])) < 0) goto free_plugin;
    if ((rc = api->register_snapshot_section(h, &wm_section)) < 0) goto free_plugin;
    if ((rc = api->register_guard(h, &wm_guard_reg)) < 0) goto free_plugin;
    if ((rc = api->register_tick(h, &wm_tick_reg)) < 0) goto free_plugin;
    *out = p;
    return SMP_OK;
free_plugin:
    free(p);
    return rc;
}

static void wm_fini(void *plugin)
{
    free(plugin);
}

static const smp_plugin_desc wm_desc = {
    SMP_PLUGIN_DESC_INIT,
    "weight_mgmt",
    "0.1.0",
    SMP_HOST_CAP_GROUPS | SMP_HOST_CAP_DURABLE_OPLOG,
    SMP_HOST_CAP_COLD_TIER | SMP_HOST_CAP_HA_STANDBY | SMP_HOST_CAP_RPC_DISPATCH |
        SMP_HOST_CAP_METRICS,
    SMP_PLUGIN_CAP_OBJECT_GUARD | SMP_PLUGIN_CAP_WEIGHTS | SMP_PLUGIN_CAP_LINEAGE,
    wm_init,
    wm_fini,
};

const smp_plugin_desc *smp_plugin_entry(void)
{
    return &wm_desc;
}
