/* no_entry_symbol.c -- a test library that exports no smp_plugin_entry (only
 * a similarly named function). The host must refuse it and close it. */
#include "store_plugin.h"

int smp_plugin_entry_v0(void) { return 0; }
