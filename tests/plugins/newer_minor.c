/* newer_minor.c -- a test plugin the host must refuse because it claims an
 * ABI minor one past the host's (SMP_ABI_MINOR + 1).
 *
 * Its init() must never run: if it did, it would register an OpLog type and
 * the test would see it. */
#include "store_plugin.h"

static int replay(void *plugin, const smp_record *rec) { (void)plugin, (void)rec; return SMP_OK; }

static const smp_oplog_type never = {sizeof(smp_oplog_type), 40, 1, 1, "NEVER", NULL, replay, NULL};

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    (void)plugin;
    return api->register_oplog_type(h, &never);
}

static const smp_plugin_desc desc = {
    sizeof(smp_plugin_desc), SMP_ABI_MAJOR, SMP_ABI_MINOR + 1, SMP_ABI_TAG,
    "newer_minor", "1.0", 0, 0, 0, init, NULL,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
