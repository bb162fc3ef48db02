/* wm_auto.c -- AUTO revisions moving by themselves.
 *
 * A revision whose policy is AUTO moves without being asked, one operation
 * at a time for the whole plugin so that memory moves incrementally: under
 * memory pressure (SMP_EVENT_MEMORY_PRESSURE) the first eligible AUTO
 * revision in wm_auto_order's order goes one step colder (HOT -> MIXED ->
 * COLD); once usage is well below where the pressure ended
 * (WM_PRESSURE_HYSTERESIS under it), the AUTO revision accessed last whose
 * promotion keeps usage below that mark goes back toward its preferred
 * residency. Eligible: READY, no operation, no lease, nothing in flight,
 * its cooldown (weight_migration_cooldown_ms) over -- the cooldown holds a
 * promotion on access too (wm_mgmt_lease.c). The operation is an
 * ordinary MIGRATING one, executed by weight_lifecycle.c; what is kept
 * here (the pressure seen, the operation in flight) lives in memory only
 * and is rebuilt from events and the store. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "weight_residency_planner.h"
#include "wm_mgmt.h"

#define WM_PRESSURE_HYSTERESIS 0.10

struct wm_auto {
    int pressure;           /* MEMORY_PRESSURE seen, usage not down yet */
    double pressure_clear;  /* usage ratio below which it ends (0: never seen) */
    wm_auto_reason reason;  /* of the AUTO operation in flight */
    uint64_t op;            /* the AUTO operation in flight (0: none) */
    int pending;            /* its record is in flight */
};

static wm_auto *wm_auto_get(wm_plugin *p)
{
    if (p->auto_state == NULL) p->auto_state = calloc(1, sizeof(*p->auto_state));
    return p->auto_state;
}

void wm_auto_release(wm_plugin *p)
{
    free(p->auto_state);
    p->auto_state = NULL;
}

void wm_auto_pressure(wm_plugin *p, uint64_t used, uint64_t capacity)
{
    wm_auto *a = wm_auto_get(p);
    if (a == NULL || capacity == 0) return;
    double ratio = (double)used / (double)capacity;
    a->pressure = 1;
    a->pressure_clear = ratio > WM_PRESSURE_HYSTERESIS ? ratio - WM_PRESSURE_HYSTERESIS : 0.0;
}

void wm_auto_forget_op(wm_plugin *p)
{
    if (p->auto_state != NULL) p->auto_state->op = 0;
}

static void wm_auto_applied(wm_plugin *p, void *arg, int status)
{
    (void)arg;
    wm_auto *a = p->auto_state;
    if (a == NULL) return;
    a->pending = 0;
    if (status == WM_OK) p->auto_triggers[a->reason]++;
    else a->op = 0;
}

uint64_t wm_migration_cooldown_ms(wm_plugin *p)
{
    smp_config_value v;
    memset(&v, 0, sizeof(v));
    v.struct_size = sizeof(v);
    if (p->api->config_get == NULL ||
        p->api->config_get(p->host, SMP_CONFIG_CLUSTER, "weight_migration_cooldown_ms", &v) < 0 ||
        v.type != SMP_CONFIG_INT || v.i < 0)
        return 30000;
    return (uint64_t)v.i;
}

/* Append an AUTO MIGRATING operation of r toward `to` (one at a time).
 * Returns 1 when its record is in flight. */
static int wm_auto_start(wm_plugin *p, wm_auto *a, const wm_revision *r, wm_residency to,
                         wm_auto_reason reason)
{
    wm_revision next = *r;
    wm_operation op;
    char why[512] = "";
    uint64_t now = wm_now(p, r);
    wm_op_migrating(p, &op, r, to, r->policy.mixed_hot_ratio, now);
    next.metadata_generation = r->metadata_generation + 1;
    next.updated_ms = now;
    next.operation_id = op.id;
    if (wm_metadata_mutation_check(r, &next, why, sizeof(why)) < 0) return 0;
    a->pending = 1;
    a->reason = reason;
    if (wm_submit_upsert(p, &next, &op, 1, wm_auto_applied, NULL) < 0) {
        a->pending = 0;
        return 0;
    }
    a->op = op.id;
    p->api->log(p->host, SMP_LOG_INFO, "%s: %s moves toward %s (operation %" PRIu64 ")",
                reason == WM_AUTO_DEMOTE_ON_PRESSURE ? "memory pressure" : "pressure relieved",
                r->group_key, wm_residency_name((int)to), op.id);
    return 1;
}

/* An AUTO revision may move by itself now: READY, no operation, no lease,
 * nothing in flight, cooldown over. */
static int wm_auto_movable(wm_plugin *p, const wm_revision *r, uint64_t cooldown, uint64_t wall)
{
    return r->availability == WM_AVAIL_READY && r->policy.mode == WM_MODE_AUTO &&
           r->operation_id == 0 && r->lease_count == 0 && !wm_pending_metadata(p, r->group_key) &&
           !wm_pending_lease_grants(p, r->group_key) && r->updated_ms + cooldown <= wall;
}

/* Pressure is over and usage is well below where it ended: bring back
 * toward preferred the AUTO revision accessed last whose promotion keeps
 * usage below that mark (so it cannot start the pressure again). */
static void wm_auto_relief(wm_plugin *p, wm_auto *a, uint64_t used, uint64_t cap, uint64_t cooldown)
{
    double mark = (a->pressure_clear - WM_PRESSURE_HYSTERESIS) * (double)cap;
    if (a->pressure_clear <= 0.0 || (double)used >= mark) return;
    uint64_t wall = p->api->wall_ms(p->host);
    const wm_revision *best = NULL;
    wm_residency best_to = WM_RES_UNKNOWN;
    size_t n = wm_store_revision_count(p->store);
    for (size_t i = 0; i < n; i++) {
        const wm_revision *r = wm_store_revision_at(p->store, i);
        if (!wm_auto_movable(p, r, cooldown, wall)) continue;
        wm_residency to = wm_auto_promotion_target(r->residency, r->policy.preferred);
        if (to == WM_RES_UNKNOWN) continue;
        double ratio = to == WM_RES_HOT ? 1.0 : r->policy.mixed_hot_ratio;
        double added = (ratio - r->observed_hot_ratio) * (double)r->logical_bytes;
        if ((double)used + added >= mark) continue;
        /* Last accessed first; identity order breaks ties (first wins). */
        if (best == NULL || r->last_access_ms > best->last_access_ms) {
            best = r;
            best_to = to;
        }
    }
    if (best != NULL) wm_auto_start(p, a, best, best_to, WM_AUTO_PROMOTE_ON_RELIEF);
}

/* AUTO residency, one operation at a time so memory moves incrementally.
 * Under memory pressure: demote (one step colder) the first eligible AUTO
 * revision in wm_auto_order's order whose cooldown has passed. After the
 * pressure: promote back toward preferred (wm_auto_relief). */
static void wm_auto_run(wm_plugin *p, wm_auto *a)
{
    if (a->pending || p->api->memory_usage == NULL) return;
    if (a->op != 0) {
        const wm_operation *op = wm_store_operation(p->store, a->op);
        if (op != NULL && op->state == WM_OPS_RUNNING) return;
        a->op = 0;
    }
    if (!a->pressure && a->pressure_clear <= 0.0) return; /* never under pressure */
    uint64_t used = 0, cap = 0;
    p->api->memory_usage(p->host, &used, &cap);
    if (cap == 0) return;
    uint64_t cooldown = wm_migration_cooldown_ms(p);
    if (a->pressure && (double)used < a->pressure_clear * (double)cap) a->pressure = 0;
    if (!a->pressure) {
        wm_auto_relief(p, a, used, cap, cooldown);
        return;
    }
    size_t n = wm_store_revision_count(p->store);
    if (n == 0) return;
    wm_auto_candidate *c = calloc(n, sizeof(*c));
    size_t *order = calloc(n, sizeof(*order));
    size_t n_order = 0;
    if (c == NULL || order == NULL) goto free_tmp;
    for (size_t i = 0; i < n; i++) {
        const wm_revision *r = wm_store_revision_at(p->store, i);
        c[i].id = &r->id;
        c[i].last_access_ms = r->last_access_ms;
        c[i].availability = r->availability;
        c[i].mode = r->policy.mode;
        c[i].residency = r->residency;
        c[i].operation_id = r->operation_id;
        c[i].lease_count = r->lease_count;
        double frees = r->residency == WM_RES_HOT ? 1.0 - r->policy.mixed_hot_ratio : r->observed_hot_ratio;
        c[i].releasable_hot_bytes = (uint64_t)(frees * (double)r->logical_bytes);
    }
    if (wm_auto_order(c, n, order, &n_order) < 0) goto free_tmp;
    uint64_t wall = p->api->wall_ms(p->host);
    for (size_t k = 0; k < n_order; k++) {
        const wm_revision *r = wm_store_revision_at(p->store, order[k]);
        if (!wm_auto_movable(p, r, cooldown, wall)) continue;
        wm_residency to = wm_auto_next_demotion(r->residency);
        if (to == WM_RES_UNKNOWN) continue;
        if (wm_auto_start(p, a, r, to, WM_AUTO_DEMOTE_ON_PRESSURE)) break;
    }
free_tmp:
    free(c);
    free(order);
}

/* ------------------------------------------------------------------------ */

int wm_auto_tick(wm_plugin *p)
{
    wm_auto *a = wm_auto_get(p);
    if (a == NULL) return 0;
    wm_auto_run(p, a);
    return a->pending;
}
