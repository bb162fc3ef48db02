/* unknown_required_cap.c -- a test plugin requiring a host capability bit
 * (0x100) that ABI 1.0 does not define, next to one it does (groups). The
 * host must refuse it naming only the missing bit; init() never runs. */
#include "store_plugin.h"

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    (void)h, (void)api, (void)plugin;
    return SMP_OK;
}

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "unknown_required_cap", "1.0",
    SMP_HOST_CAP_GROUPS | (UINT64_C(1) << 8), 0, 0, init, NULL,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
