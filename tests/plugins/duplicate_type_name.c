/* duplicate_type_name.c -- a test plugin that registers two OpLog types with
 * different numbers (20, 21) but the same name. The second must be refused
 * with a message naming both, and the first dropped with it. */
#include <stddef.h>

#include "store_plugin.h"

static int replay(void *plugin, const smp_record *rec) { (void)plugin, (void)rec; return SMP_OK; }

static const smp_oplog_type a = {sizeof(smp_oplog_type), 20, 1, 1, "SAME_NAME", NULL, replay, NULL};
static const smp_oplog_type b = {sizeof(smp_oplog_type), 21, 1, 1, "SAME_NAME", NULL, replay, NULL};

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    int rc;
    (void)plugin;
    if ((rc = api->register_oplog_type(h, &a)) < 0) return rc;
    return api->register_oplog_type(h, &b);
}

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "duplicate_type_name", "1.0", 0, 0, 0, init, NULL,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
