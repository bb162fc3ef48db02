/* null_descriptor.c -- a test plugin whose entry returns NULL. The host must
 * refuse it ("returned no descriptor") and close it. */
#include <stddef.h>

#include "store_plugin.h"

const smp_plugin_desc *smp_plugin_entry(void) { return NULL; }
