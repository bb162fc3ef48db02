/* fuzz_config.c -- fuzz target: the master's YAML config.
 *
 * The input is a config file's text, parsed with host_config_load_string
 * (libyaml events into the strict schema). A refusal must come with a
 * message; an accepted config is read back the way the master and its
 * plugins read it (every cluster key, a few keys of each plugin block) and
 * freed. Crashes, leaks and sanitizer reports are the failures.
 *
 * Seeds: config/embedded.yaml as committed, and variants with every section
 * written out, plugin blocks with nested maps, anchors and odd scalars. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzz.h"

static const char *const cluster_keys[] = {
    "default_weight_preferred_residency",
    "default_weight_mixed_hot_ratio",
    "default_weight_migration_mode",
    "weight_management_oplog_capability_confirmed",
    "weight_lineage_oplog_capability_confirmed",
    "weight_migration_cooldown_ms",
    "weight_migration_max_members_per_round",
    "weight_migration_max_bytes_per_round",
    "no_such_key",
};

static const char *const plugin_keys[] = {"a", "a.b", "a.b.c", "limits.max", "", "."};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), err[512];
    host_config cfg;
    smp_config_value v;
    if (text == NULL) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    err[0] = '\0';
    if (host_config_load_string("fuzz.yaml", text, "/nonexistent", &cfg, err, sizeof(err)) < 0) {
        if (err[0] == '\0') {
            fprintf(stderr, "fuzz_config: a refused config came without a message\n");
            abort();
        }
        free(text);
        return 0;
    }
    for (size_t i = 0; i < sizeof(cluster_keys) / sizeof(cluster_keys[0]); i++)
        (void)host_config_cluster_get(&cfg, cluster_keys[i], &v);
    for (size_t p = 0; p < cfg.n_plugins; p++)
        for (size_t i = 0; i < sizeof(plugin_keys) / sizeof(plugin_keys[0]); i++)
            (void)host_config_node_get(cfg.plugins[p].block, plugin_keys[i], &v);
    host_config_free(&cfg);
    host_config_free(&cfg); /* documented as safe twice */
    free(text);
    return 0;
}

static const char *const variants[] = {
    "listen:\n  tcp: \"127.0.0.1:0\"\n  unix: /tmp/wm.sock\n  admin: \"\"\n"
    "data_dir: /tmp/wm-data\n"
    "oplog:\n  backend: file\n  segment_bytes: 1048576\n  preallocate: false\n"
    "snapshot:\n  every_records: 1000\n  keep: 2\n"
    "node:\n  embedded: false\n",
    "plugins:\n  - path: /nonexistent/weight_mgmt.so\n    enabled: false\n"
    "    config:\n      a:\n        b:\n          c: 7\n      limits: {max: 1.5, names: [x, y]}\n",
    "cluster: &c\n  default_weight_mixed_hot_ratio: 0.25\n"
    "  default_weight_preferred_residency: hot\n"
    "  weight_migration_cooldown_ms: 0\n",
    "cluster:\n  default_weight_mixed_hot_ratio: 1.5\n",
    "listen: [1, 2]\n",
    "data_dir: !!binary aGVsbG8=\n",
    "? complex\n: key\n",
    "plugins:\n  - path: a.so\n  - path: a.so\n",
};

int fuzz_seeds(const char *dir)
{
    char path[512], name[32];
    int n = 0;
    FILE *f;
    snprintf(path, sizeof(path), "%s/config/embedded.yaml", SOURCE_DIR);
    if ((f = fopen(path, "rb")) != NULL) {
        char buf[16384];
        size_t len = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        if (fuzz_seed(dir, "embedded.yaml", (const uint8_t *)buf, len) < 0) return -1;
        n++;
    }
    for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
        snprintf(name, sizeof(name), "variant-%zu.yaml", i);
        if (fuzz_seed(dir, name, (const uint8_t *)variants[i], strlen(variants[i])) < 0) return -1;
        n++;
    }
    return n;
}
