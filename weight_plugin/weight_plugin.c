/* weight_plugin.c -- the ABI entry point of weight_mgmt.so and its wiring.
 *
 * This file only connects the plugin to the host: it exports the descriptor,
 * and in init() creates the revision store and registers the plugin's OpLog
 * types (8-12, with their gates), its snapshot section, its object guard, its
 * key space "weights/" (ABI 1.9), its reconcile tick, its RPC service and
 * metrics; and it wires the ABI 1.1
 * hot-reload hooks (quiesce, export/import through wm_handoff.c, the
 * self-check, resume). Built with WM_TEST_REFUSE_HANDOFF it is the test
 * variant weight_mgmt_refuse_handoff.so, whose import refuses every
 * handoff (test_plugin_reload's rollback); built with WM_TEST_NO_LINEAGE
 * it is weight_mgmt_no_lineage.so, a build from before record type 12
 * (it neither registers nor advertises it: the old side of
 * test_upgrade_volatile_leases' rolling upgrade). Replay and the section go
 * straight to the store (weight_metadata_store.c); the RPCs live in
 * weight_management.c and wm_mgmt_*.c, the guard and the tick in weight_lifecycle.c. A record
 * or section the store refuses stops recovery with a log line naming the
 * cause (fail closed, never skipped). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wm_plugin.h"

__attribute__((visibility("default"))) const smp_plugin_desc *smp_plugin_entry(void);

/* Replay one durable record into the store (idempotent). */
static int wm_replay(void *plugin, const smp_record *rec)
{
    wm_plugin *p = plugin;
    char why[512] = "";
    int rc = wm_store_replay(p->store, rec->type, rec->payload, rec->len, why, sizeof(why));
    if (rc < 0) {
        p->api->log(p->host, SMP_LOG_ERROR, "record %llu (type %u) refused: %s",
                    (unsigned long long)rec->seq, (unsigned)rec->type, why);
        return rc == SMP_ENOMEM || rc == SMP_ENOTSUP ? rc : SMP_EPROTO;
    }
    wm_metrics_refresh(p);
    return SMP_OK;
}

static int wm_describe(void *plugin, const smp_record *rec, char *buf, size_t cap)
{
    (void)plugin;
    int n = snprintf(buf, cap, "weight record type %u, %zu bytes", (unsigned)rec->type, rec->len);
    return n < 0 ? SMP_EINVAL : n;
}

static int wm_section_save(void *plugin, smp_writer *w)
{
    wm_plugin *p = plugin;
    uint8_t *buf = NULL;
    size_t len = 0;
    char why[512] = "";
    int rc = wm_store_save(p->store, &buf, &len, why, sizeof(why));
    if (rc < 0) {
        p->api->log(p->host, SMP_LOG_ERROR, "section %s cannot be saved: %s", WM_SECTION_NAME, why);
        return rc == SMP_ENOMEM ? rc : SMP_EPROTO;
    }
    rc = len > 0 ? p->api->writer_write(w, buf, len) : SMP_OK;
    free(buf);
    return rc;
}

static int wm_section_load(void *plugin, smp_reader *r, uint16_t encver)
{
    wm_plugin *p = plugin;
    const uint8_t *data = NULL;
    size_t len = 0;
    char why[512] = "";
    if (encver > WM_SECTION_ENCVER) {
        p->api->log(p->host, SMP_LOG_ERROR, "section %s has encver %u; this build reads up to %u",
                    WM_SECTION_NAME, (unsigned)encver, (unsigned)WM_SECTION_ENCVER);
        return SMP_ENOTSUP;
    }
    p->api->reader_data(r, &data, &len);
    int rc = wm_store_load(p->store, data, len, why, sizeof(why));
    if (rc < 0) {
        p->api->log(p->host, SMP_LOG_ERROR, "section %s (%zu bytes) refused: %s", WM_SECTION_NAME,
                    len, why);
        return rc == SMP_ENOMEM ? rc : SMP_EPROTO;
    }
    wm_metrics_refresh(p);
    return SMP_OK;
}

static int wm_guard(void *plugin, const smp_guard_request *req)
{
    return wm_guard_check(plugin, req);
}

static int wm_tick(void *plugin, const smp_tick_budget *budget, uint64_t *cursor)
{
    return wm_lifecycle_tick(plugin, budget, cursor);
}

static const smp_oplog_type wm_types[] = {
    {sizeof(smp_oplog_type), WM_OP_METADATA_UPSERT, WM_RECORD_ENCVER, WM_RECORD_ENCVER_2,
     "WEIGHT_METADATA_UPSERT", WM_GATE_MANAGEMENT, wm_replay, wm_describe},
    {sizeof(smp_oplog_type), WM_OP_METADATA_DELETE, WM_RECORD_ENCVER, WM_RECORD_ENCVER_2,
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

static void wm_on_event(void *plugin, const smp_event *ev)
{
    wm_lifecycle_event(plugin, ev);
}

static const smp_event_handler wm_events = {
    sizeof(smp_event_handler),
    SMP_EVENT_MASK(SMP_EVENT_REPLICA_LOST) | SMP_EVENT_MASK(SMP_EVENT_NODE_UP) |
        SMP_EVENT_MASK(SMP_EVENT_MEMORY_PRESSURE) | SMP_EVENT_MASK(SMP_EVENT_ROLE_CHANGE) |
        SMP_EVENT_MASK(SMP_EVENT_READ_MISS),
    wm_on_event,
};

/* Claim the plugin's key space, WM_KEY_PREFIX "/" (every key it lays out:
 * weights/<tenant>/<namespace>/<resource>/<revision>/<generation>/...; the
 * prefix is fixed, not configurable), so that the host refuses clients'
 * plain puts and removals there (ABI 1.9, claim_key_space): a revision's
 * objects are put only into its managed group, which the guard watches,
 * and removed only through this plugin. A host older than 1.9 cannot
 * reserve it: logged, and the plugin runs as before (its managed groups
 * still guarded). Returns what the host answered (SMP_OK without it). */
static int wm_claim_key_space(smp_host *h, const smp_host_api *api)
{
    if (!SMP_HOST_HAS(api, claim_key_space) || api->claim_key_space == NULL) {
        api->log(h, SMP_LOG_INFO, "host ABI %u.%u cannot reserve the key space '%s/': clients' "
                 "plain puts and removals there are not refused (managed groups still are)",
                 (unsigned)api->abi_major, (unsigned)api->abi_minor, WM_KEY_PREFIX);
        return SMP_OK;
    }
    return api->claim_key_space(h, WM_KEY_PREFIX "/");
}

#define WM_TICK_PERIOD_MS 1000

/* The tick period: the plugin block's tick_period_ms (10..60000), else
 * WM_TICK_PERIOD_MS. */
static uint32_t wm_tick_period(smp_host *h, const smp_host_api *api)
{
    smp_config_value v;
    memset(&v, 0, sizeof(v));
    v.struct_size = sizeof(v);
    if (api->config_get(h, SMP_CONFIG_PLUGIN, "tick_period_ms", &v) == SMP_OK &&
        v.type == SMP_CONFIG_INT && v.i >= 10 && v.i <= 60000)
        return (uint32_t)v.i;
    return WM_TICK_PERIOD_MS;
}

/* Register everything; the host undoes it all if any step fails. */
static int wm_init(smp_host *h, const smp_host_api *api, void **out)
{
    int rc;
    wm_plugin *p = calloc(1, sizeof(*p));
    if (p == NULL) return SMP_ENOMEM;
    p->host = h;
    p->api = api;
    if ((rc = wm_config_check(h, api)) < 0) goto free_plugin;
    if ((rc = wm_store_create(&p->store)) < 0) goto free_plugin;
    for (size_t i = 0; i < sizeof(wm_types) / sizeof(wm_types[0]); i++) {
#ifdef WM_TEST_NO_LINEAGE
        if (wm_types[i].type == WM_OP_LINEAGE_CLAIM) continue;
#endif
        if ((rc = api->register_oplog_type(h, &wm_types[i])) < 0) goto free_plugin;
    }
    if ((rc = api->register_snapshot_section(h, &wm_section)) < 0) goto free_plugin;
    if ((rc = api->register_guard(h, &wm_guard_reg)) < 0) goto free_plugin;
    if ((rc = wm_claim_key_space(h, api)) < 0) goto free_plugin;
    p->tick_reg = (smp_tick){sizeof(smp_tick), wm_tick_period(h, api), 1, wm_tick};
    if ((rc = api->register_tick(h, &p->tick_reg)) < 0) goto free_plugin;
    if ((rc = api->register_event_handler(h, &wm_events)) < 0) goto free_plugin;
    if ((rc = wm_mgmt_register(p)) < 0) goto free_plugin;
    wm_metrics_refresh(p);
    *out = p;
    return SMP_OK;
free_plugin:
    wm_store_free(p->store);
    free(p);
    return rc;
}

/* Nothing new starts while quiesced (the host holds RPCs, ticks and
 * events); idle once no mutation awaits its durable callback. */
static int wm_quiesce(void *plugin)
{
    wm_plugin *p = plugin;
    p->quiesced = 1;
    return p->pending != NULL ? SMP_EAGAIN : SMP_OK;
}

static int wm_export_state(void *plugin, smp_handoff *out)
{
    return wm_handoff_export(plugin, out);
}

static int wm_import_state(void *plugin, const smp_handoff *in, char *why, size_t why_cap)
{
#ifdef WM_TEST_REFUSE_HANDOFF
    (void)plugin;
    snprintf(why, why_cap, "this build (the refuse-handoff test variant) takes no handoff of "
             "%zu bytes from version %s", in->len, in->from_version ? in->from_version : "?");
    return SMP_ENOTSUP;
#else
    return wm_handoff_import(plugin, in, why, why_cap);
#endif
}

static int wm_self_check(void *plugin, char *why, size_t why_cap)
{
    return wm_handoff_self_check(plugin, why, why_cap);
}

/* Serving again: whatever happened while quiesced (events were withheld)
 * is found by re-validating the revisions. */
static void wm_resume(void *plugin, smp_resume_reason reason)
{
    wm_plugin *p = plugin;
    p->quiesced = 0;
    p->api->log(p->host, SMP_LOG_INFO, "resumed (%s): re-validating every revision",
                reason == SMP_RESUME_HANDOFF ? "state handed over"
                : reason == SMP_RESUME_ENABLE ? "enabled" : "reload refused");
    wm_lifecycle_revalidate(p);
}

static void wm_fini(void *plugin)
{
    wm_plugin *p = plugin;
    free(p->handoff_section);
    wm_mgmt_release(p);
    wm_vleases_free(p);
    wm_store_free(p->store);
    free(p);
    wm_digest_release();
}

#if defined(WM_TEST_REFUSE_HANDOFF)
#define WM_PLUGIN_VERSION "0.1.0-refuse-handoff"
#elif defined(WM_TEST_NO_LINEAGE)
#define WM_PLUGIN_VERSION "0.0.9-no-lineage"
#else
#define WM_PLUGIN_VERSION "0.1.0"
#endif

#ifdef WM_TEST_NO_LINEAGE
#define WM_CAP_LINEAGE 0
#else
#define WM_CAP_LINEAGE SMP_PLUGIN_CAP_LINEAGE
#endif

static const smp_plugin_desc wm_desc = {
    SMP_PLUGIN_DESC_INIT,
    "weight_mgmt",
    WM_PLUGIN_VERSION,
    SMP_HOST_CAP_GROUPS | SMP_HOST_CAP_DURABLE_OPLOG,
    SMP_HOST_CAP_COLD_TIER | SMP_HOST_CAP_HA_STANDBY | SMP_HOST_CAP_RPC_DISPATCH |
        SMP_HOST_CAP_METRICS | SMP_HOST_CAP_STATE_HANDOFF,
    SMP_PLUGIN_CAP_OBJECT_GUARD | SMP_PLUGIN_CAP_WEIGHTS | WM_CAP_LINEAGE |
        SMP_PLUGIN_CAP_HOT_RELOAD,
    wm_init,
    wm_fini,
    wm_quiesce,
    wm_export_state,
    wm_import_state,
    wm_self_check,
    wm_resume,
};

const smp_plugin_desc *smp_plugin_entry(void)
{
    return &wm_desc;
}
