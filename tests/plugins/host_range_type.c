/* host_range_type.c -- a test plugin that registers OpLog type 3, a number in
 * the host range 1..7, after a section and a metric, then ignores the refusal
 * and returns 0 from init(). The host must still fail the load (fail closed)
 * with the range message, and drop the section and the metric. */
#include <stddef.h>

#include "store_plugin.h"

static int replay(void *plugin, const smp_record *rec) { (void)plugin, (void)rec; return SMP_OK; }
static int save(void *plugin, smp_writer *w) { (void)plugin, (void)w; return SMP_OK; }
static int load(void *plugin, smp_reader *r, uint16_t encver) { (void)plugin, (void)r, (void)encver; return SMP_OK; }

static const smp_snapshot_section section = {sizeof(smp_snapshot_section), "host_range_section", 1, save, load};
static const smp_metric_desc metric = {sizeof(smp_metric_desc), SMP_METRIC_GAUGE, "host_range_gauge", "g", NULL};
static const smp_oplog_type three = {sizeof(smp_oplog_type), 3, 1, 1, "HOST_THREE", NULL, replay, NULL};

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    smp_metric *m = NULL;
    (void)plugin;
    if (api->register_snapshot_section(h, &section) < 0) return SMP_EINVAL;
    if (api->register_metric(h, &metric, &m) < 0) return SMP_EINVAL;
    (void)api->register_oplog_type(h, &three); /* refused; the error is ignored */
    return SMP_OK;
}

static void fini(void *plugin) { (void)plugin; }

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "host_range_type", "1.0", 0, 0, 0, init, fini,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
