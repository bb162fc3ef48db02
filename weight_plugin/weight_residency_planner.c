/* weight_residency_planner.c -- side-effect-free MIXED and AUTO decisions.
 *
 * Pure computations the lifecycle code asks before and after it moves a
 * byte: the MIXED split of a revision's affinity units (a bounded subset-sum
 * search, exact on small inputs and deterministic always), the availability
 * and residency its replicas really give it, the demotion order of AUTO
 * revisions under memory pressure, and the prefix of a plan that one bounded
 * reconcile round may process. Inputs are borrowed, outputs
 * are written only into the caller's buffers, and scratch memory is freed
 * before return; nothing here reads a clock or calls the host. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "weight_residency_planner.h"

/* ------------------------------------------------------------------------ */
/* MIXED selection                                                           */
/* ------------------------------------------------------------------------ */

static uint64_t wm_dist(uint64_t a, uint64_t b)
{
    return a > b ? a - b : b - a;
}

/* 1 when a sum `s` at distance d is better than the best so far. */
static int wm_better(uint64_t d, uint64_t s, int have, uint64_t best_d, uint64_t best_s)
{
    if (!have) return 1;
    if (d != best_d) return d < best_d;
    return s < best_s;
}

/* Subset-sum DP over the positive units pos[0..np) with sizes scaled by
 * `scale` (1 = exact). via[s] is the unit that first reached scaled sum s
 * (-1: unreached), real[s] the true bytes of that first subset. Picks the
 * reachable proper sum (not empty, not all) whose true bytes are nearest the
 * target and marks its units in hot_out. */
static int wm_plan_dp(const uint64_t *w,
                      const size_t *pos,
                      size_t np,
                      uint64_t scale,
                      uint64_t target,
                      unsigned char *hot_out)
{
    int rc = WM_OK;
    uint64_t *sw = NULL, *real = NULL;
    long *via = NULL;
    size_t total_s = 0;

    sw = malloc(np * sizeof(*sw));
    if (sw == NULL) return SMP_ENOMEM;
    for (size_t k = 0; k < np; k++) {
        uint64_t v = w[pos[k]] / scale + ((w[pos[k]] % scale) * 2 >= scale ? 1 : 0);
        sw[k] = v == 0 ? 1 : v;
        total_s += (size_t)sw[k];
    }
    via = malloc((total_s + 1) * sizeof(*via));
    real = malloc((total_s + 1) * sizeof(*real));
    if (via == NULL || real == NULL) {
        rc = SMP_ENOMEM;
        goto free_tables;
    }
    for (size_t s = 0; s <= total_s; s++) via[s] = -1;
    via[0] = (long)np; /* reached by the empty set */
    real[0] = 0;
    size_t reach = 0;
    for (size_t k = 0; k < np; k++) {
        size_t wk = (size_t)sw[k];
        reach += wk;
        for (size_t s = reach; s >= wk; s--) {
            if (via[s] < 0 && via[s - wk] >= 0) {
                via[s] = (long)k;
                real[s] = real[s - wk] + w[pos[k]];
            }
            if (s == wk) break;
        }
    }
    int have = 0;
    size_t best = 0;
    uint64_t best_d = 0, best_real = 0;
    for (size_t s = 1; s < total_s; s++) {
        if (via[s] < 0) continue;
        uint64_t d = wm_dist(real[s], target);
        if (wm_better(d, real[s], have, best_d, best_real)) {
            have = 1;
            best = s;
            best_d = d;
            best_real = real[s];
        }
    }
    /* np >= 2 and every size >= 1, so a single unit is a proper sum. */
    for (size_t s = best; have && s > 0;) {
        size_t k = (size_t)via[s];
        hot_out[pos[k]] = 1;
        s -= (size_t)sw[k];
    }
free_tables:
    free(via);
    free(real);
    free(sw);
    return rc;
}

/* A unit as the greedy pass sorts it. */
typedef struct wm_sized {
    uint64_t bytes;
    size_t index;
} wm_sized;

/* Larger units first, earlier units on ties. */
static int wm_sized_cmp(const void *a, const void *b)
{
    const wm_sized *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Greedy for many units: take a unit (largest first) whenever it brings the
 * sum strictly closer to the target; then make the split proper (at least
 * one unit on each side). SMP_ENOMEM, else WM_OK. */
static int wm_plan_greedy(const uint64_t *w,
                          const size_t *pos,
                          size_t np,
                          uint64_t target,
                          unsigned char *hot_out)
{
    uint64_t sum = 0;
    size_t taken = 0;
    wm_sized *u = malloc(np * sizeof(*u));
    if (u == NULL) return SMP_ENOMEM;
    for (size_t k = 0; k < np; k++) {
        u[k].bytes = w[pos[k]];
        u[k].index = pos[k];
    }
    qsort(u, np, sizeof(*u), wm_sized_cmp);
    for (size_t k = 0; k < np; k++) {
        uint64_t next = sum + u[k].bytes;
        if (wm_dist(next, target) < wm_dist(sum, target)) {
            hot_out[u[k].index] = 1;
            sum = next;
            taken++;
        }
    }
    if (taken == 0) {
        size_t pick = 0;
        for (size_t k = 1; k < np; k++)
            if (wm_dist(u[k].bytes, target) < wm_dist(u[pick].bytes, target)) pick = k;
        hot_out[u[pick].index] = 1;
    } else if (taken == np) {
        hot_out[u[np - 1].index] = 0; /* the smallest unit goes COLD */
    }
    free(u);
    return WM_OK;
}

int wm_plan_mixed(const uint64_t *unit_bytes,
                  size_t n_units,
                  uint64_t total_bytes,
                  double ratio,
                  unsigned char *hot_out,
                  wm_mixed_plan *out)
{
    int rc = WM_OK;
    size_t *pos = NULL, np = 0;
    uint64_t sum = 0;
    wm_mixed_plan plan;

    if (out == NULL || (n_units > 0 && (unit_bytes == NULL || hot_out == NULL)))
        return WM_EINVALID_ARGUMENT;
    if (!isfinite(ratio) || !(ratio > 0.0) || !(ratio < 1.0)) return WM_EINVALID_ARGUMENT;
    for (size_t i = 0; i < n_units; i++) {
        if (sum + unit_bytes[i] < sum) return WM_EINVALID_ARGUMENT;
        sum += unit_bytes[i];
        if (unit_bytes[i] > 0) np++;
    }
    if (sum != total_bytes) return WM_EINVALID_ARGUMENT;

    memset(&plan, 0, sizeof(plan));
    plan.total_bytes = total_bytes;
    double t = ratio * (double)total_bytes + 0.5;
    plan.target_bytes = t >= (double)total_bytes ? total_bytes : (uint64_t)t;
    if (n_units > 0) memset(hot_out, 0, n_units);

    if (np < 2) {
        /* No proper split: report the nearer of all COLD and all HOT. */
        plan.method = WM_PLAN_EXACT;
        if (total_bytes > 0 && wm_dist(total_bytes, plan.target_bytes) < plan.target_bytes) {
            for (size_t i = 0; i < n_units; i++) hot_out[i] = unit_bytes[i] > 0;
        }
        rc = WM_EPOLICY_UNSATISFIABLE;
        goto report;
    }
    pos = malloc(np * sizeof(*pos));
    if (pos == NULL) return SMP_ENOMEM;
    for (size_t i = 0, k = 0; i < n_units; i++)
        if (unit_bytes[i] > 0) pos[k++] = i;

    if (total_bytes <= WM_PLAN_DP_BUCKETS) {
        plan.method = WM_PLAN_EXACT;
        rc = wm_plan_dp(unit_bytes, pos, np, 1, plan.target_bytes, hot_out);
    } else if (np <= WM_PLAN_DP_MAX_UNITS) {
        plan.method = WM_PLAN_SCALED;
        uint64_t scale = total_bytes / WM_PLAN_DP_BUCKETS + (total_bytes % WM_PLAN_DP_BUCKETS != 0);
        rc = wm_plan_dp(unit_bytes, pos, np, scale, plan.target_bytes, hot_out);
    } else {
        plan.method = WM_PLAN_GREEDY;
        rc = wm_plan_greedy(unit_bytes, pos, np, plan.target_bytes, hot_out);
    }
    free(pos);
    if (rc < 0) return rc;
report:
    for (size_t i = 0; i < n_units; i++) {
        if (hot_out[i]) {
            plan.hot_bytes += unit_bytes[i];
            plan.hot_units++;
        }
    }
    plan.observed_hot_ratio = total_bytes > 0 ? (double)plan.hot_bytes / (double)total_bytes : 0.0;
    *out = plan;
    return rc;
}

int wm_plan_unit_goals(const uint64_t *unit_bytes,
                       size_t n_units,
                       uint64_t total_bytes,
                       wm_residency target,
                       double ratio,
                       unsigned char *hot_out)
{
    if (unit_bytes == NULL || hot_out == NULL || n_units == 0) return WM_EINVALID_ARGUMENT;
    if (target == WM_RES_HOT || target == WM_RES_COLD) {
        memset(hot_out, target == WM_RES_HOT, n_units);
        return WM_OK;
    }
    if (target != WM_RES_MIXED) return WM_EINVALID_ARGUMENT;
    wm_mixed_plan mp;
    int rc = wm_plan_mixed(unit_bytes, n_units, total_bytes, ratio, hot_out, &mp);
    return rc == WM_EPOLICY_UNSATISFIABLE ? WM_OK : rc;
}

/* ------------------------------------------------------------------------ */
/* Observed state                                                            */
/* ------------------------------------------------------------------------ */

int wm_residency_observe(const wm_affinity *aff,
                         const wm_member_replicas *members,
                         size_t n_members,
                         int manifest_readable,
                         wm_observation *out)
{
    wm_observation o;
    size_t at = 0, expected = 0;
    uint64_t total = 0;
    int all_units_hot = 1;

    if (aff == NULL || out == NULL || aff->n_units == 0 || aff->units == NULL ||
        (n_members > 0 && members == NULL))
        return WM_EINVALID_ARGUMENT;
    for (size_t i = 0; i < aff->n_units; i++) {
        if (aff->units[i].n_members == 0) return WM_EINVALID_ARGUMENT;
        expected += aff->units[i].n_members;
        if (total + aff->units[i].logical_bytes < total) return WM_EINVALID_ARGUMENT;
        total += aff->units[i].logical_bytes;
    }
    if (expected != n_members) return WM_EINVALID_ARGUMENT;

    memset(&o, 0, sizeof(o));
    for (size_t i = 0; i < aff->n_units; i++) {
        int unit_hot = 1;
        for (size_t j = 0; j < aff->units[i].n_members; j++, at++) {
            if (!members[at].memory) unit_hot = 0;
            if (!members[at].memory && !members[at].cold) o.unreadable_members++;
        }
        if (unit_hot) o.hot_bytes += aff->units[i].logical_bytes;
        else all_units_hot = 0;
    }
    o.availability = manifest_readable && o.unreadable_members == 0 ? WM_AVAIL_READY
                                                                     : WM_AVAIL_DEGRADED;
    if (o.unreadable_members == n_members) {
        o.residency = WM_RES_ABSENT;
        o.hot_bytes = 0;
    } else if (all_units_hot || (total > 0 && o.hot_bytes == total)) {
        o.residency = WM_RES_HOT;
        o.observed_hot_ratio = 1.0;
    } else if (o.hot_bytes == 0) {
        o.residency = WM_RES_COLD;
    } else {
        o.residency = WM_RES_MIXED;
        o.observed_hot_ratio = (double)o.hot_bytes / (double)total;
    }
    *out = o;
    return WM_OK;
}

/* ------------------------------------------------------------------------ */
/* AUTO demotion order                                                       */
/* ------------------------------------------------------------------------ */

wm_residency wm_auto_next_demotion(wm_residency observed)
{
    switch (observed) {
    case WM_RES_HOT: return WM_RES_MIXED;
    case WM_RES_MIXED: return WM_RES_COLD;
    default: return WM_RES_UNKNOWN;
    }
}

/* COLD < MIXED < HOT; 0 for residencies without payload temperature. */
static int wm_warmth(wm_residency r)
{
    switch (r) {
    case WM_RES_COLD: return 1;
    case WM_RES_MIXED: return 2;
    case WM_RES_HOT: return 3;
    default: return 0;
    }
}

wm_residency wm_auto_promotion_target(wm_residency observed, wm_residency preferred)
{
    int o = wm_warmth(observed), p = wm_warmth(preferred);
    if (o == 0 || p == 0 || p <= o) return WM_RES_UNKNOWN;
    return preferred;
}

static int wm_auto_cmp(const void *a, const void *b)
{
    const wm_auto_candidate *x = *(const wm_auto_candidate *const *)a;
    const wm_auto_candidate *y = *(const wm_auto_candidate *const *)b;
    if (x->last_access_ms != y->last_access_ms) return x->last_access_ms < y->last_access_ms ? -1 : 1;
    if (x->releasable_hot_bytes != y->releasable_hot_bytes)
        return x->releasable_hot_bytes > y->releasable_hot_bytes ? -1 : 1;
    int c = wm_identity_cmp(x->id, y->id);
    if (c != 0) return c;
    return x < y ? -1 : x > y; /* input position: the order is total */
}

int wm_auto_order(const wm_auto_candidate *c, size_t n, size_t *order_out, size_t *n_out)
{
    const wm_auto_candidate **pick = NULL;
    size_t k = 0;

    if (n_out == NULL || (n > 0 && (c == NULL || order_out == NULL))) return WM_EINVALID_ARGUMENT;
    for (size_t i = 0; i < n; i++)
        if (c[i].id == NULL) return WM_EINVALID_ARGUMENT;
    *n_out = 0;
    if (n == 0) return WM_OK;
    pick = malloc(n * sizeof(*pick));
    if (pick == NULL) return SMP_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const wm_auto_candidate *x = &c[i];
        if (x->availability != WM_AVAIL_READY || x->mode != WM_MODE_AUTO || x->operation_id != 0 ||
            x->lease_count != 0 || wm_auto_next_demotion(x->residency) == WM_RES_UNKNOWN)
            continue;
        pick[k++] = x;
    }
    qsort(pick, k, sizeof(*pick), wm_auto_cmp);
    for (size_t i = 0; i < k; i++) order_out[i] = (size_t)(pick[i] - c);
    *n_out = k;
    free(pick);
    return WM_OK;
}

/* ------------------------------------------------------------------------ */
/* Round bounding                                                            */
/* ------------------------------------------------------------------------ */

int wm_batch_bound(const wm_batch_member *members,
                   size_t n,
                   uint64_t max_members,
                   uint64_t max_bytes,
                   wm_batch *out)
{
    wm_batch b = {0, 0, 0};
    size_t i = 0;

    if (out == NULL || (n > 0 && members == NULL) || max_members == 0 || max_bytes == 0)
        return WM_EINVALID_ARGUMENT;
    while (i < n) {
        size_t j = i;
        uint64_t ub = 0;
        int overflow = 0;
        while (j < n && members[j].unit == members[i].unit) {
            if (ub + members[j].bytes < ub) overflow = 1;
            ub += members[j].bytes;
            j++;
        }
        size_t um = j - i;
        if (b.units > 0 && (overflow || b.members + um > max_members ||
                            b.bytes + ub < b.bytes || b.bytes + ub > max_bytes))
            break;
        b.members += um;
        b.bytes = overflow || b.bytes + ub < b.bytes ? UINT64_MAX : b.bytes + ub;
        b.units++;
        i = j;
    }
    *out = b;
    return WM_OK;
}
