/* soon_probe.c -- a test plugin for tick_soon (ABI 1.10): a tick of period
 * 60 s (leader only) that only counts, so that every tick sooner than a
 * minute after the last is one the plugin asked for.
 *
 * RPC service 44:
 *   1 report: "ticks=N before_reg=R soon=S inside=I" -- ticks so far; what
 *     tick_soon answered in init before register_tick; what the last `soon`
 *     call answered; what the tick's own tick_soon answered (0 until one).
 *   2 soon: calls tick_soon three times (one request) and replies "ok" or
 *     the first failure's code.
 *   3 soon_inside: the next tick calls tick_soon from inside itself, once.
 * The tick returns SMP_TICK_DONE every time. */
#include <stdio.h>
#include <string.h>

#include "store_plugin.h"

__attribute__((visibility("default"))) const smp_plugin_desc *smp_plugin_entry(void);

static struct {
    smp_host *h;
    const smp_host_api *api;
    unsigned ticks;
    int before_reg, soon, inside;
    int ask_inside;
} S;

static int soon_tick(void *plugin, const smp_tick_budget *b, uint64_t *cursor)
{
    (void)plugin;
    (void)b;
    (void)cursor;
    S.ticks++;
    if (S.ask_inside) {
        S.ask_inside = 0;
        S.inside = S.api->tick_soon(S.h);
    }
    return SMP_TICK_DONE;
}

static int reply_text(smp_rpc_call *call, const char *text)
{
    return S.api->rpc_reply(call, SMP_OK, (const uint8_t *)text, strlen(text));
}

static int soon_report(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    char out[160];
    (void)plugin, (void)body, (void)len;
    snprintf(out, sizeof(out), "ticks=%u before_reg=%d soon=%d inside=%d", S.ticks, S.before_reg,
             S.soon, S.inside);
    return reply_text(call, out);
}

static int soon_ask(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    (void)plugin, (void)body, (void)len;
    S.soon = SMP_OK;
    for (int i = 0; i < 3 && S.soon == SMP_OK; i++) S.soon = S.api->tick_soon(S.h);
    return reply_text(call, S.soon == SMP_OK ? "ok" : "failed");
}

static int soon_inside(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    (void)plugin, (void)body, (void)len;
    S.ask_inside = 1;
    return reply_text(call, "ok");
}

static const smp_tick tick = {sizeof(smp_tick), 60000, 1, soon_tick};
static const smp_rpc_method methods[] = {
    {sizeof(smp_rpc_method), 1, "report", soon_report, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), 2, "soon", soon_ask, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), 3, "soon_inside", soon_inside, SMP_ROLE_ADMIN},
};
static const smp_rpc_service service = {sizeof(smp_rpc_service), 44, "soon_probe", methods, 3};

static int soon_init(smp_host *h, const smp_host_api *api, void **plugin)
{
    int rc;
    memset(&S, 0, sizeof(S));
    S.h = h;
    S.api = api;
    if (!SMP_HOST_HAS(api, tick_soon) || api->tick_soon == NULL) return SMP_ENOTSUP;
    S.before_reg = api->tick_soon(h); /* no tick registered yet */
    if ((rc = api->register_tick(h, &tick)) < 0) return rc;
    if ((rc = api->register_rpc_service(h, &service)) < 0) return rc;
    *plugin = &S;
    return SMP_OK;
}

static void soon_fini(void *plugin)
{
    (void)plugin;
}

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "soon_probe", "1.0", 0, 0, 0, soon_init, soon_fini,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void)
{
    return &desc;
}
