/* tick_probe.c -- a test plugin that records what the host's scheduler and
 * event dispatch hand it, and reports it over its RPC service (id 41).
 *
 * Its tick (period 10 ms, leader only) asks to be called again (MORE) while
 * the cursor is below 3, advancing it, then says DONE; it remembers the first
 * cursors it saw and the budget. Its event handler counts object-completed,
 * role-change, memory-pressure and read-miss events. Method 1 answers one
 * line of text: "ticks=N cursors=a,b,... members=M bytes=B completed=C
 * roles=R pressure=P read_misses=X miss_key=MK last_key=K". A counter
 * tick_probe_ticks_total shows on /metrics. */
#include <stdio.h>
#include <string.h>

#include "store_plugin.h"

__attribute__((visibility("default"))) const smp_plugin_desc *smp_plugin_entry(void);

#define MAX_SEEN 16

static struct {
    smp_host *h;
    const smp_host_api *api;
    smp_metric *ticks_metric;
    unsigned ticks;
    uint64_t cursors[MAX_SEEN];
    uint64_t members, bytes;
    unsigned completed, roles, pressure, read_misses;
    char last_key[128];
    char miss_key[128];
} S;

static int probe_tick(void *plugin, const smp_tick_budget *b, uint64_t *cursor)
{
    (void)plugin;
    if (S.ticks < MAX_SEEN) S.cursors[S.ticks] = *cursor;
    S.ticks++;
    S.members = b->max_members;
    S.bytes = b->max_bytes;
    S.api->metric_add(S.ticks_metric, NULL, 1);
    if (*cursor < 3) {
        (*cursor)++;
        return SMP_TICK_MORE;
    }
    return SMP_TICK_DONE;
}

static void probe_event(void *plugin, const smp_event *ev)
{
    (void)plugin;
    if (ev->type == SMP_EVENT_OBJECT_COMPLETED) {
        S.completed++;
        snprintf(S.last_key, sizeof(S.last_key), "%s", ev->key ? ev->key : "");
    } else if (ev->type == SMP_EVENT_ROLE_CHANGE) {
        S.roles++;
    } else if (ev->type == SMP_EVENT_MEMORY_PRESSURE) {
        S.pressure++;
    } else if (ev->type == SMP_EVENT_READ_MISS) {
        S.read_misses++;
        snprintf(S.miss_key, sizeof(S.miss_key), "%s", ev->key ? ev->key : "");
    }
}

static int probe_report(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    char out[512], cur[256] = "";
    size_t off = 0;
    (void)plugin;
    (void)body;
    (void)len;
    for (unsigned i = 0; i < S.ticks && i < MAX_SEEN; i++)
        off += (size_t)snprintf(cur + off, sizeof(cur) - off, "%s%llu", i ? "," : "",
                                (unsigned long long)S.cursors[i]);
    int n = snprintf(out, sizeof(out),
                     "ticks=%u cursors=%s members=%llu bytes=%llu completed=%u roles=%u pressure=%u "
                     "read_misses=%u miss_key=%s last_key=%s",
                     S.ticks, cur, (unsigned long long)S.members, (unsigned long long)S.bytes,
                     S.completed, S.roles, S.pressure, S.read_misses, S.miss_key, S.last_key);
    return S.api->rpc_reply(call, SMP_OK, (const uint8_t *)out, (size_t)n);
}

static const smp_tick tick = {sizeof(smp_tick), 10, 1, probe_tick};
static const smp_event_handler events = {
    sizeof(smp_event_handler),
    SMP_EVENT_MASK(SMP_EVENT_OBJECT_COMPLETED) | SMP_EVENT_MASK(SMP_EVENT_ROLE_CHANGE) |
        SMP_EVENT_MASK(SMP_EVENT_MEMORY_PRESSURE) | SMP_EVENT_MASK(SMP_EVENT_READ_MISS),
    probe_event,
};
static const smp_rpc_method methods[] = {{sizeof(smp_rpc_method), 1, "report", probe_report, SMP_ROLE_ADMIN}};
static const smp_rpc_service service = {sizeof(smp_rpc_service), 41, "tick_probe", methods, 1};
static const smp_metric_desc metric = {sizeof(smp_metric_desc), SMP_METRIC_COUNTER,
                                       "tick_probe_ticks_total", "Ticks the probe received", NULL};

static int probe_init(smp_host *h, const smp_host_api *api, void **plugin)
{
    int rc;
    memset(&S, 0, sizeof(S));
    S.h = h;
    S.api = api;
    if ((rc = api->register_tick(h, &tick)) < 0) return rc;
    if ((rc = api->register_event_handler(h, &events)) < 0) return rc;
    if ((rc = api->register_rpc_service(h, &service)) < 0) return rc;
    if ((rc = api->register_metric(h, &metric, &S.ticks_metric)) < 0) return rc;
    *plugin = &S;
    return SMP_OK;
}

static void probe_fini(void *plugin)
{
    (void)plugin;
}

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "tick_probe", "1.0", 0, 0, 0, probe_init, probe_fini,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void)
{
    return &desc;
}
