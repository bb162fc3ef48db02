/* wm_config.c -- the keys weight_mgmt reads from its config block, checked
 * once at init.
 *
 * The host hands a plugin its block unchecked. This file is the block's
 * schema: every key the plugin reads, its range and what it is for. At init
 * every key of the block must be one of them (listed with the host's
 * config_keys, ABI 1.4) and every value an integer within its range;
 * anything else fails the plugin's init with one log line naming the key, its
 * line and what was wrong, so the master does not start on a block it would
 * have half ignored. The readers (wm_plugin_u64 and the tick period) look
 * the values up again later; after this check a present value is always
 * valid, and an absent one takes the default. */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "wm_plugin.h"

typedef struct wm_config_key {
    const char *name;
    int64_t min, max;
} wm_config_key;

static const wm_config_key wm_keys[] = {
    {"tick_period_ms", 10, 60000},
    {"import_ttl_ms", 0, INT64_MAX},
    {"record_retention_ms", 0, INT64_MAX},
    {"repair_max_attempts", 1, 1000},
    {"degraded_migration_wait_ms", 0, INT64_MAX},
};
#define WM_N_KEYS (sizeof(wm_keys) / sizeof(wm_keys[0]))

typedef struct check_ctx {
    smp_host *h;
    const smp_host_api *api;
    int rc;
} check_ctx;

static const wm_config_key *wm_key_find(const char *name)
{
    for (size_t i = 0; i < WM_N_KEYS; i++)
        if (strcmp(wm_keys[i].name, name) == 0) return &wm_keys[i];
    return NULL;
}

/* The known keys, comma-separated, for the message about an unknown one. */
static void wm_key_names(char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < WM_N_KEYS && used < cap; i++) {
        int n = snprintf(out + used, cap - used, "%s%s", i ? ", " : "", wm_keys[i].name);
        if (n < 0) break;
        used += (size_t)n;
    }
}

/* One key of the block: known, an integer, within its range. */
static int wm_check_key(void *arg, const char *key, uint32_t line)
{
    check_ctx *c = arg;
    const wm_config_key *k = wm_key_find(key);
    smp_config_value v;
    if (k == NULL) {
        char names[256];
        wm_key_names(names, sizeof(names));
        c->api->log(c->h, SMP_LOG_ERROR, "config key %s (line %" PRIu32 "): unknown; weight_mgmt reads %s",
                    key, line, names);
        c->rc = SMP_EINVAL;
        return 1;
    }
    memset(&v, 0, sizeof(v));
    v.struct_size = sizeof(v);
    if (c->api->config_get(c->h, SMP_CONFIG_PLUGIN, key, &v) == SMP_OK && v.type == SMP_CONFIG_INT &&
        (v.i < k->min || v.i > k->max)) {
        c->api->log(c->h, SMP_LOG_ERROR,
                    "config key %s (line %" PRIu32 "): %" PRId64 " is outside %" PRId64 "..%" PRId64,
                    key, line, v.i, k->min, k->max);
        c->rc = SMP_EINVAL;
        return 1;
    }
    if (v.type != SMP_CONFIG_INT) {
        c->api->log(c->h, SMP_LOG_ERROR,
                    "config key %s (line %" PRIu32 "): \"%s\" is not an integer in %" PRId64 "..%" PRId64 "%s",
                    key, line, v.s != NULL ? v.s : "(not a scalar)", k->min, k->max,
                    v.type == SMP_CONFIG_STRING ? " (a string: quoted, or not a number)" : "");
        c->rc = SMP_EINVAL;
        return 1;
    }
    return 0;
}

int wm_config_check(smp_host *h, const smp_host_api *api)
{
    check_ctx c = {h, api, SMP_OK};
    /* A 1.4 plugin loads only in a host of ABI 1.4 or newer, which has it. */
    int rc = api->config_keys(h, SMP_CONFIG_PLUGIN, "", wm_check_key, &c);
    if (rc < 0) {
        api->log(h, SMP_LOG_ERROR, "config block cannot be listed: %s", smp_strerror(rc));
        return rc;
    }
    return c.rc;
}
