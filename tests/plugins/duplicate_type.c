/* duplicate_type.c -- a test plugin that registers OpLog type 8 twice (as
 * DUP_A, then DUP_B), after a snapshot section. Alone, the second one is
 * refused; loaded after good_minimal (which owns type 8), the first one is.
 * It passes the refusal on as init()'s result. */
#include <stddef.h>

#include "store_plugin.h"

static int replay(void *plugin, const smp_record *rec) { (void)plugin, (void)rec; return SMP_OK; }
static int save(void *plugin, smp_writer *w) { (void)plugin, (void)w; return SMP_OK; }
static int load(void *plugin, smp_reader *r, uint16_t encver) { (void)plugin, (void)r, (void)encver; return SMP_OK; }

static const smp_snapshot_section section = {sizeof(smp_snapshot_section), "dup_type_section", 1, save, load};
static const smp_oplog_type a = {sizeof(smp_oplog_type), 8, 1, 1, "DUP_A", NULL, replay, NULL};
static const smp_oplog_type b = {sizeof(smp_oplog_type), 8, 1, 1, "DUP_B", NULL, replay, NULL};

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    int rc;
    (void)plugin;
    if ((rc = api->register_snapshot_section(h, &section)) < 0) return rc;
    if ((rc = api->register_oplog_type(h, &a)) < 0) return rc;
    return api->register_oplog_type(h, &b);
}

static void fini(void *plugin) { (void)plugin; }

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "duplicate_type", "1.0", 0, 0, 0, init, fini,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
