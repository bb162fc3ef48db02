/* replica_probe.c -- a test plugin that drives the host's replica tasks.
 *
 * RPC service 42: method 1 ensure_cold, 2 ensure_memory, 3 release_memory,
 * 4 count of replica-lost events seen for a key (first 4096 keys); the body
 * is the object key.
 * Methods 1-3 answer once the host's completion callback ran, with its
 * status (or at once with the call's own error). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_plugin.h"

__attribute__((visibility("default"))) const smp_plugin_desc *smp_plugin_entry(void);

static smp_host *H;
static const smp_host_api *API;
#define LOST_KEYS 4096
static struct {
    char key[128];
    unsigned count;
} lost[LOST_KEYS];

static void on_done(void *arg, int status)
{
    API->rpc_reply(arg, status, NULL, 0);
}

static int run(smp_rpc_call *call, const uint8_t *body, size_t len,
               int (*op)(smp_host *, const char *, smp_done_cb, void *))
{
    char key[1100];
    if (len >= sizeof(key)) return SMP_EINVAL;
    memcpy(key, body, len);
    key[len] = '\0';
    int rc = op(H, key, on_done, call);
    if (rc < 0) return API->rpc_reply(call, rc, NULL, 0);
    return SMP_OK;
}

static int m_cold(void *p, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    (void)p;
    return run(call, body, len, API->ensure_cold);
}

static int m_memory(void *p, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    (void)p;
    return run(call, body, len, API->ensure_memory);
}

static int m_release(void *p, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    (void)p;
    return run(call, body, len, API->release_memory);
}

static int m_lost(void *p, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    (void)p;
    unsigned n = 0;
    for (int i = 0; i < LOST_KEYS; i++)
        if (strlen(lost[i].key) == len && len > 0 && memcmp(lost[i].key, body, len) == 0)
            n = lost[i].count;
    uint8_t out[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    return API->rpc_reply(call, SMP_OK, out, sizeof(out));
}

static void on_event(void *p, const smp_event *ev)
{
    (void)p;
    if (ev->type != SMP_EVENT_REPLICA_LOST || ev->key == NULL) return;
    for (int i = 0; i < LOST_KEYS; i++) {
        if (lost[i].key[0] == '\0') snprintf(lost[i].key, sizeof(lost[i].key), "%s", ev->key);
        if (strcmp(lost[i].key, ev->key) == 0) {
            lost[i].count++;
            return;
        }
    }
}

static const smp_rpc_method methods[] = {
    {sizeof(smp_rpc_method), 1, "ensure_cold", m_cold, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), 2, "ensure_memory", m_memory, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), 3, "release_memory", m_release, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), 4, "lost_events", m_lost, SMP_ROLE_ADMIN},
};
static const smp_rpc_service service = {sizeof(smp_rpc_service), 42, "replica_probe", methods, 4};
static const smp_event_handler events = {sizeof(smp_event_handler),
                                         SMP_EVENT_MASK(SMP_EVENT_REPLICA_LOST), on_event};

static int probe_init(smp_host *h, const smp_host_api *api, void **plugin)
{
    int rc;
    H = h;
    API = api;
    memset(lost, 0, sizeof(lost));
    if ((rc = api->register_rpc_service(h, &service)) < 0) return rc;
    if ((rc = api->register_event_handler(h, &events)) < 0) return rc;
    *plugin = NULL;
    return SMP_OK;
}

static void probe_fini(void *plugin)
{
    (void)plugin;
}

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "replica_probe", "1.0", SMP_HOST_CAP_COLD_TIER, 0, 0,
    probe_init, probe_fini,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void)
{
    return &desc;
}
