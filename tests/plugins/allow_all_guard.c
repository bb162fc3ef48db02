/* allow_all_guard.c -- a second plugin with an object guard that allows
 * everything, to show that another plugin's guard cannot open the weight
 * plugin's managed groups.
 *
 * Its guard answers SMP_GUARD_ALLOW to every request and counts the calls
 * that named a managed group. RPC service 41 has two methods: UNMANAGE (1)
 * asks the host to clear the managed flag of the group named by the request
 * body (api->group_set_managed(group, 0)) and replies with the host's answer
 * once it is known (the record durable, or the refusal); MANAGED_ASKS (2)
 * replies with the count of guard calls about managed groups as decimal
 * text. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_plugin.h"

#define ALLOW_ALL_SERVICE 41
#define ALLOW_ALL_UNMANAGE 1
#define ALLOW_ALL_MANAGED_ASKS 2
#define ALLOW_ALL_GROUP_MAX 1024

typedef struct allow_all {
    smp_host *host;
    const smp_host_api *api;
    uint64_t managed_asks; /* guard calls about a managed group */
} allow_all;

static int allow(void *plugin, const smp_guard_request *req)
{
    allow_all *a = plugin;
    if (req->group_managed) a->managed_asks++;
    return SMP_GUARD_ALLOW;
}

typedef struct unmanage_ctx {
    allow_all *a;
    smp_rpc_call *call;
} unmanage_ctx;

static void on_unmanaged(void *arg, int status)
{
    unmanage_ctx *c = arg;
    c->a->api->rpc_reply(c->call, status, NULL, 0);
    free(c);
}

/* The body is the group name (1..ALLOW_ALL_GROUP_MAX bytes). A refusal the
 * host answers at once is returned, so the host replies with it. */
static int rpc_unmanage(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    allow_all *a = plugin;
    char group[ALLOW_ALL_GROUP_MAX + 1];
    if (len == 0 || len > ALLOW_ALL_GROUP_MAX) return SMP_EINVAL;
    memcpy(group, body, len);
    group[len] = '\0';
    unmanage_ctx *c = malloc(sizeof(*c));
    if (c == NULL) return SMP_ENOMEM;
    c->a = a;
    c->call = call;
    int rc = a->api->group_set_managed(a->host, group, 0, on_unmanaged, c);
    if (rc < 0) free(c);
    return rc;
}

static int rpc_managed_asks(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    allow_all *a = plugin;
    char text[32];
    (void)body;
    (void)len;
    int n = snprintf(text, sizeof(text), "%llu", (unsigned long long)a->managed_asks);
    return a->api->rpc_reply(call, SMP_OK, (const uint8_t *)text, (size_t)n);
}

static const smp_guard guard = {sizeof(smp_guard), allow};

static const smp_rpc_method methods[] = {
    {sizeof(smp_rpc_method), ALLOW_ALL_UNMANAGE, "unmanage", rpc_unmanage, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), ALLOW_ALL_MANAGED_ASKS, "managed_asks", rpc_managed_asks, SMP_ROLE_ADMIN},
};

static const smp_rpc_service service = {sizeof(smp_rpc_service), ALLOW_ALL_SERVICE, "allow_all",
                                        methods, 2};

static int init(smp_host *h, const smp_host_api *api, void **plugin)
{
    int rc;
    allow_all *a = calloc(1, sizeof(*a));
    if (a == NULL) return SMP_ENOMEM;
    a->host = h;
    a->api = api;
    if ((rc = api->register_guard(h, &guard)) < 0 ||
        (rc = api->register_rpc_service(h, &service)) < 0) {
        free(a);
        return rc;
    }
    *plugin = a;
    return SMP_OK;
}

static void fini(void *plugin) { free(plugin); }

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "allow_all_guard", "0.1", SMP_HOST_CAP_GROUPS, 0, 0, init, fini,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void) { return &desc; }
