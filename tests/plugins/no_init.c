/* no_init.c -- a test plugin whose descriptor passes every version check but
 * has no init(). The host must refuse it ("descriptor has no init"). */
#include <stddef.h>

#include "store_plugin.h"

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "no_init", "1.0", 0, 0, 0, NULL, NULL,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
