/* tick_overrun.c -- a test plugin whose reconcile tick and object guard take
 * too long on demand, for the host's timing of plugin callbacks.
 *
 * Its tick (period 10 ms, leader only, so once every housekeeping round)
 * returns at once unless its block sets `tick_overrun_ms` (integer): then it
 * sleeps until that many ms past the budget's deadline on the host clock,
 * so every tick returns late. Its guard allows everything; a key starting
 * with `slow/` makes it sleep `guard_sleep_us` (integer, default 0)
 * microseconds first. It counts what it did in its own counters, which
 * /metrics shows next to the host's timing families:
 * tick_overrun_ticks_total (ticks), tick_overrun_late_total (ticks that saw
 * their deadline pass before returning) and tick_overrun_guard_calls_total
 * (guard calls). Used by tests/integration/test_tick_budget.c. */
#include <string.h>
#include <time.h>

#include "store_plugin.h"

__attribute__((visibility("default"))) const smp_plugin_desc *smp_plugin_entry(void);

static struct {
    smp_host *h;
    const smp_host_api *api;
    uint64_t tick_overrun_ms;   /* 0: ticks return at once */
    uint64_t guard_sleep_us;    /* for slow/ keys */
    smp_metric *ticks, *late, *guard_calls;
} S;

static void sleep_us(uint64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static int overrun_tick(void *plugin, const smp_tick_budget *b, uint64_t *cursor)
{
    (void)plugin;
    (void)cursor;
    S.api->metric_add(S.ticks, NULL, 1);
    if (S.tick_overrun_ms == 0) return SMP_TICK_DONE;
    /* Past the deadline by tick_overrun_ms on the clock the host checks. */
    while (S.api->now_ms(S.h) <= b->deadline_ms + S.tick_overrun_ms) sleep_us(1000);
    if (S.api->now_ms(S.h) > b->deadline_ms) S.api->metric_add(S.late, NULL, 1);
    return SMP_TICK_DONE;
}

static int overrun_guard(void *plugin, const smp_guard_request *req)
{
    (void)plugin;
    S.api->metric_add(S.guard_calls, NULL, 1);
    if (req->key != NULL && strncmp(req->key, "slow/", 5) == 0 && S.guard_sleep_us > 0)
        sleep_us(S.guard_sleep_us);
    return SMP_GUARD_ALLOW;
}

static const smp_tick tick = {sizeof(smp_tick), 10, 1, overrun_tick};
static const smp_guard guard = {sizeof(smp_guard), overrun_guard};
static const smp_metric_desc m_ticks = {sizeof(smp_metric_desc), SMP_METRIC_COUNTER,
                                        "tick_overrun_ticks_total", "Ticks the plugin ran", NULL};
static const smp_metric_desc m_late = {sizeof(smp_metric_desc), SMP_METRIC_COUNTER,
                                       "tick_overrun_late_total",
                                       "Ticks that saw their deadline pass before returning", NULL};
static const smp_metric_desc m_guard = {sizeof(smp_metric_desc), SMP_METRIC_COUNTER,
                                        "tick_overrun_guard_calls_total",
                                        "Guard calls the plugin answered", NULL};

/* An unsigned integer of the block, or dflt when absent or not an integer. */
static uint64_t block_uint(const char *key, uint64_t dflt)
{
    smp_config_value v;
    memset(&v, 0, sizeof(v));
    v.struct_size = sizeof(v);
    if (S.api->config_get(S.h, SMP_CONFIG_PLUGIN, key, &v) != SMP_OK) return dflt;
    if (v.type != SMP_CONFIG_INT || v.i < 0) return dflt;
    return (uint64_t)v.i;
}

static int overrun_init(smp_host *h, const smp_host_api *api, void **plugin)
{
    int rc;
    memset(&S, 0, sizeof(S));
    S.h = h;
    S.api = api;
    S.tick_overrun_ms = block_uint("tick_overrun_ms", 0);
    S.guard_sleep_us = block_uint("guard_sleep_us", 0);
    if ((rc = api->register_tick(h, &tick)) < 0) return rc;
    if ((rc = api->register_guard(h, &guard)) < 0) return rc;
    if ((rc = api->register_metric(h, &m_ticks, &S.ticks)) < 0) return rc;
    if ((rc = api->register_metric(h, &m_late, &S.late)) < 0) return rc;
    if ((rc = api->register_metric(h, &m_guard, &S.guard_calls)) < 0) return rc;
    *plugin = &S;
    return SMP_OK;
}

static void overrun_fini(void *plugin)
{
    (void)plugin;
}

static const smp_plugin_desc desc = {
    SMP_PLUGIN_DESC_INIT, "tick_overrun", "1.0", 0, 0, 0, overrun_init, overrun_fini,
    SMP_PLUGIN_NO_RELOAD,
};

const smp_plugin_desc *smp_plugin_entry(void)
{
    return &desc;
}
