/* duplicate_section.c -- a test plugin that registers an OpLog type and a
 * tick, then the section "weight_metadata" twice. After the refusal its init()
 * returns a different error (SMP_EIO); the load must fail with the section
 * message and code (the refusal is the cause), with everything dropped. */
#include <stddef.h>

#include "store_plugin.h"

static int replay(void *plugin, const smp_record *rec) { (void)plugin, (void)rec; return SMP_OK; }
static int save(void *plugin, smp_writer *w) { (void)plugin, (void)w; return SMP_OK; }
static int load(void *plugin, smp_reader *r, uint16_t encver) { (void)plugin, (void)r, (void)encver; return SMP_OK; }
static int tick(void *plugin, const smp_tick_budget *b, uint64_t *cursor) { (void)plugin, (void)b, (void)cursor; return SMP_TICK_DONE; }

static const smp_oplog_type record_type = {sizeof(smp_oplog_type), 50, 1, 1, "DUP_SECTION_RECORD", NULL, replay, NULL};
static const smp_tick tick_reg = {sizeof(smp_tick), 1000, 0, tick};
static const smp_snapshot_section section = {sizeof(smp_snapshot_section), "weight_metadata", 1, save, load};

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    (void)plugin;
    if (api->register_oplog_type(h, &record_type) < 0) return SMP_EINVAL;
    if (api->register_tick(h, &tick_reg) < 0) return SMP_EINVAL;
    if (api->register_snapshot_section(h, &section) < 0) return SMP_EINVAL;
    if (api->register_snapshot_section(h, &section) < 0) return SMP_EIO;
    return SMP_OK;
}

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "duplicate_section", "1.0", 0, 0, 0, init, NULL,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
