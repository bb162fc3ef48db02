// abi_cxx_check.cpp -- proves plugin_api/store_plugin.h compiles as C++ with
// the project's warnings as errors, and that its constants are usable there.
#include "store_plugin.h"

static_assert(sizeof(smp_plugin_desc) >= 8, "descriptor starts with size and versions");
static_assert(SMP_ABI_MAJOR == 1, "this build is ABI 1");

extern "C" const char *abi_cxx_check_name(int rc) { return smp_strerror(rc); }
