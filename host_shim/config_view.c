/* config_view.c -- read-only lookups into a parsed config.
 *
 * What a plugin sees of the configuration: its own block (host_config_node
 * tree, looked up by a dotted key path) and the cluster defaults (looked up by
 * their RFC names). Values are typed on lookup from the scalar's text, so the
 * plugin block needs no schema in the host. Parsing lives in config.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

/* Give a scalar its natural type: bool, integer, number, else string. */
static void scalar_value(const char *text, smp_config_value *out)
{
    char *end = NULL;
    memset(out, 0, sizeof(*out));
    out->struct_size = sizeof(*out);
    out->s = text;
    if (strcmp(text, "true") == 0 || strcmp(text, "false") == 0) {
        out->type = SMP_CONFIG_BOOL;
        out->b = text[0] == 't';
        return;
    }
    if (*text != '\0') {
        errno = 0;
        long long i = strtoll(text, &end, 10);
        if (errno == 0 && *end == '\0') {
            out->type = SMP_CONFIG_INT;
            out->i = i;
            out->d = (double)i;
            return;
        }
        errno = 0;
        double d = strtod(text, &end);
        if (errno == 0 && *end == '\0') {
            out->type = SMP_CONFIG_DOUBLE;
            out->d = d;
            return;
        }
    }
    out->type = SMP_CONFIG_STRING;
}

static const host_config_node *map_child(const host_config_node *map,
                                         const char *key,
                                         size_t key_len)
{
    if (map == NULL || map->kind != HOST_CFG_MAP) return NULL;
    for (size_t i = 0; i < map->n_items; i++) {
        const host_config_node *c = map->items[i];
        if (c->key && strlen(c->key) == key_len && memcmp(c->key, key, key_len) == 0)
            return c;
    }
    return NULL;
}

int host_config_node_get(const host_config_node *block,
                         const char *key,
                         smp_config_value *out)
{
    const host_config_node *n = block;
    const char *p = key;
    if (key == NULL || out == NULL) return SMP_EINVAL;
    while (n != NULL) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        n = map_child(n, p, len);
        if (dot == NULL) break;
        p = dot + 1;
    }
    if (n == NULL || n->kind != HOST_CFG_SCALAR || n->scalar == NULL) return SMP_ENOTFOUND;
    scalar_value(n->scalar, out);
    if (n->quoted) out->type = SMP_CONFIG_STRING; /* "100" is a string, as for the host's keys */
    return SMP_OK;
}

int host_config_node_keys(const host_config_node *block,
                          const char *path,
                          int (*visit)(void *arg, const char *key, uint32_t line),
                          void *arg)
{
    const host_config_node *n = block;
    const char *p = path;
    if (path == NULL || visit == NULL) return SMP_EINVAL;
    if (block == NULL) return path[0] == '\0' ? SMP_OK : SMP_ENOTFOUND;
    while (n != NULL && *p != '\0') {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        n = map_child(n, p, len);
        p = dot ? dot + 1 : p + len;
    }
    if (n == NULL) return SMP_ENOTFOUND;
    if (n->kind != HOST_CFG_MAP) return SMP_EINVAL;
    for (size_t i = 0; i < n->n_items; i++) {
        const host_config_node *c = n->items[i];
        int line = c->key_line > 0 ? c->key_line : c->line;
        int rc = visit(arg, c->key ? c->key : "", (uint32_t)(line > 0 ? line : 0));
        if (rc != 0) return rc;
    }
    return SMP_OK;
}

const char *host_residency_name(host_residency r)
{
    switch (r) {
    case HOST_RESIDENCY_HOT: return "hot";
    case HOST_RESIDENCY_COLD: return "cold";
    case HOST_RESIDENCY_MIXED: return "mixed";
    }
    return "unknown";
}

const char *host_migration_mode_name(host_migration_mode m)
{
    switch (m) {
    case HOST_MODE_PINNED: return "pinned";
    case HOST_MODE_MANUAL: return "manual";
    case HOST_MODE_AUTO: return "auto";
    }
    return "unknown";
}

static void set_string(smp_config_value *out, const char *s)
{
    out->type = SMP_CONFIG_STRING;
    out->s = s;
}

static void set_u64(smp_config_value *out, uint64_t v)
{
    out->type = SMP_CONFIG_INT;
    out->i = (int64_t)v;
    out->d = (double)v;
}

static void set_bool(smp_config_value *out, int b)
{
    out->type = SMP_CONFIG_BOOL;
    out->b = b != 0;
}

int host_config_cluster_get(const host_config *cfg,
                            const char *key,
                            smp_config_value *out)
{
    const host_cluster_defaults *c = &cfg->cluster;
    if (key == NULL || out == NULL) return SMP_EINVAL;
    memset(out, 0, sizeof(*out));
    out->struct_size = sizeof(*out);
    if (strcmp(key, "default_weight_preferred_residency") == 0)
        set_string(out, host_residency_name(c->default_weight_preferred_residency));
    else if (strcmp(key, "default_weight_mixed_hot_ratio") == 0) {
        out->type = SMP_CONFIG_DOUBLE;
        out->d = c->default_weight_mixed_hot_ratio;
    } else if (strcmp(key, "default_weight_migration_mode") == 0)
        set_string(out, host_migration_mode_name(c->default_weight_migration_mode));
    else if (strcmp(key, "weight_management_oplog_capability_confirmed") == 0)
        set_bool(out, c->weight_management_oplog_capability_confirmed);
    else if (strcmp(key, "weight_lineage_oplog_capability_confirmed") == 0)
        set_bool(out, c->weight_lineage_oplog_capability_confirmed);
    else if (strcmp(key, "weight_migration_cooldown_ms") == 0)
        set_u64(out, c->weight_migration_cooldown_ms);
    else if (strcmp(key, "weight_migration_max_members_per_round") == 0)
        set_u64(out, c->weight_migration_max_members_per_round);
    else if (strcmp(key, "weight_migration_max_bytes_per_round") == 0)
        set_u64(out, c->weight_migration_max_bytes_per_round);
    else
        return SMP_ENOTFOUND;
    return SMP_OK;
}
