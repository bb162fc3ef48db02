/* objects_probe.c -- a test plugin that asks the host about objects while
 * its own snapshot section loads.
 *
 * The host loads its objects section on a thread of its own while plugins
 * load theirs (master_recovery.c); a plugin that asks about objects meanwhile
 * must see every object of the snapshot, as it did when the objects loaded
 * first. This plugin's section ("objects_probe", empty) load asks, before
 * anything else: the member count of the group named by `group` in its config
 * block (default "probe"), every member by group_list in pages of 64, each
 * listed key again by object_get, and the host's memory usage. It keeps what
 * it saw as text: "count=C listed=L found=F used=U" (U the used bytes), which
 * RPC service 43 method 1 (`seen`) replies with ("" before any load).
 *
 * With `fail_load: true` in its block, the load asks the same and then
 * refuses the section with SMP_EIO: how a test makes the plugins' side of
 * the section load fail while the objects load beside it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_plugin.h"

#define PROBE_SERVICE 43
#define PROBE_SEEN 1
#define PROBE_PAGE 64

typedef struct probe {
    smp_host *host;
    const smp_host_api *api;
    char group[256];
    int fail_load;
    char seen[256];
} probe;

typedef struct page {
    probe *p;
    char last[1024];    /* the last key visited ("" none) */
    uint64_t found;     /* listed keys object_get found again */
    int bad;            /* a key too long to keep, or not found */
} page;

static int visit(void *arg, const smp_object_info *obj)
{
    page *pg = arg;
    smp_object_info again;
    memset(&again, 0, sizeof(again));
    again.struct_size = sizeof(again);
    size_t n = strlen(obj->key);
    if (n >= sizeof(pg->last)) {
        pg->bad = 1;
        return 0;
    }
    memcpy(pg->last, obj->key, n + 1);
    if (pg->p->api->object_get(pg->p->host, pg->last, &again) == SMP_OK) pg->found++;
    return 0;
}

/* Ask the host about the group's objects and keep the answers in p->seen. */
static void ask(probe *p)
{
    uint64_t count = p->api->group_count(p->host, p->group);
    uint64_t listed = 0, used = 0, capacity = 0;
    page pg = {p, "", 0, 0};
    for (;;) {
        int k = p->api->group_list(p->host, p->group, pg.last[0] ? pg.last : NULL, PROBE_PAGE,
                                   visit, &pg);
        if (k <= 0 || pg.bad) break;
        listed += (uint64_t)k;
        if (k < PROBE_PAGE) break;
    }
    p->api->memory_usage(p->host, &used, &capacity);
    snprintf(p->seen, sizeof(p->seen), "count=%llu listed=%llu found=%llu used=%llu",
             (unsigned long long)count, (unsigned long long)listed,
             (unsigned long long)pg.found, (unsigned long long)used);
}

static int probe_save(void *plugin, smp_writer *w)
{
    (void)plugin;
    (void)w;
    return SMP_OK; /* an empty section: it exists to be loaded */
}

static int probe_load(void *plugin, smp_reader *r, uint16_t encver)
{
    probe *p = plugin;
    (void)r;
    (void)encver;
    ask(p);
    return p->fail_load ? SMP_EIO : SMP_OK;
}

static int rpc_seen(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    probe *p = plugin;
    (void)body;
    (void)len;
    return p->api->rpc_reply(call, SMP_OK, (const uint8_t *)p->seen, strlen(p->seen));
}

static const smp_rpc_method methods[] = {
    {sizeof(smp_rpc_method), PROBE_SEEN, "seen", rpc_seen, SMP_ROLE_ADMIN},
};

static const smp_rpc_service service = {sizeof(smp_rpc_service), PROBE_SERVICE, "objects_probe",
                                        methods, 1};

static const smp_snapshot_section section = {sizeof(smp_snapshot_section), "objects_probe", 1,
                                              probe_save, probe_load};

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    int rc;
    smp_config_value v;
    probe *p = calloc(1, sizeof(*p));
    if (p == NULL) return SMP_ENOMEM;
    p->host = h;
    p->api = api;
    snprintf(p->group, sizeof(p->group), "probe");
    if (api->config_get(h, SMP_CONFIG_PLUGIN, "group", &v) == SMP_OK) {
        if (v.type != SMP_CONFIG_STRING || strlen(v.s) >= sizeof(p->group)) {
            api->log(h, SMP_LOG_ERROR, "group must be a name shorter than 256 bytes");
            rc = SMP_EINVAL;
            goto free_probe;
        }
        snprintf(p->group, sizeof(p->group), "%s", v.s);
    }
    if (api->config_get(h, SMP_CONFIG_PLUGIN, "fail_load", &v) == SMP_OK) {
        if (v.type != SMP_CONFIG_BOOL) {
            api->log(h, SMP_LOG_ERROR, "fail_load must be true or false");
            rc = SMP_EINVAL;
            goto free_probe;
        }
        p->fail_load = v.b;
    }
    if ((rc = api->register_snapshot_section(h, &section)) < 0 ||
        (rc = api->register_rpc_service(h, &service)) < 0)
        goto free_probe;
    *plugin = p;
    return SMP_OK;
free_probe:
    free(p);
    return rc;
}

static void fini(void *plugin)
{
    free(plugin);
}

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "objects_probe", "1.0.0", SMP_HOST_CAP_RPC_DISPATCH, 0, 0, init, fini,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
