/* short_descriptor.c -- a test plugin whose descriptor claims struct_size 16,
 * less than ABI 1.0's descriptor. The host must refuse it before reading any
 * field past the size. */
#include "store_plugin.h"

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    (void)h, (void)api, (void)plugin;
    return SMP_OK;
}

static const smp_plugin_desc desc = {
    16, SMP_ABI_MAJOR, SMP_ABI_MINOR, SMP_ABI_TAG, "short_descriptor", "1.0", 0, 0, 0, init, NULL,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
