/* register_probe.c -- a test plugin whose init() runs a hook the test
 * installs (register_probe_hook, set through dlsym before the host loads the
 * library). A test uses it to make one specific malformed registration,
 * assert its return code inside init(), and then check that the load fails
 * closed even though the hook returns 0. */
#include <stddef.h>

#include "store_plugin.h"

int (*register_probe_hook)(smp_host *h, const smp_host_api *api);

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    (void)plugin;
    return register_probe_hook != NULL ? register_probe_hook(h, api) : SMP_OK;
}

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "register_probe", "1.0", 0, 0, 0, init, NULL,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
