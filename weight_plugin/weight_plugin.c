/* weight_plugin.c -- the ABI entry point of weight_mgmt.so and its wiring. */
#include "store_plugin.h"

__attribute__((visibility("default"))) const smp_plugin_desc *smp_plugin_entry(void);

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT,
    "weight_mgmt", "0.1.0", 0, 0, 0, NULL, NULL,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
