/* bad_gate.c -- a test plugin whose OpLog type 80 is gated by 'foo', which is
 * not a cluster key. It loads only when its own config block has a boolean
 * foo; otherwise the gate is refused as not a boolean config flag. */
#include <stddef.h>

#include "store_plugin.h"

static int replay(void *plugin, const smp_record *rec) { (void)plugin, (void)rec; return SMP_OK; }

static const smp_oplog_type t = {sizeof(smp_oplog_type), 80, 1, 1, "GATED", "foo", replay, NULL};

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    (void)plugin;
    return api->register_oplog_type(h, &t);
}

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "bad_gate", "1.0", 0, 0, 0, init, NULL,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
