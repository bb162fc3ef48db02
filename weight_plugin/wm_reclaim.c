/* wm_reclaim.c -- what the weight plugin gives back on its own.
 *
 * Each reconcile round on the active master, within a bound, this file
 *   - aborts an import that has stayed IMPORTING without progress for longer
 *     than the plugin key import_ttl_ms (default one hour; 0 never): progress
 *     is a change of its group's member count seen by a round, or the
 *     revision's last update; the abort (wm_import_abort_start) removes the
 *     uploads and then forgets the revision, so its name is free again;
 *   - forgets a DELETED tombstone, and an ended operation, whose last update
 *     is older than the plugin key record_retention_ms (default 24 hours; 0
 *     keeps them forever), each with a type-9 record (reasons
 *     TOMBSTONE_EXPIRED and OPERATIONS_EXPIRED).
 * A replacement claim stuck on its target is handled the same way: the
 * target's idle import is aborted here (the claim then sees it fail), and a
 * PUT_FIRST claim whose target never began ends ABORTED after the same TTL
 * (weight_lineage.c, wm_import_ttl_ms).
 * Everything it decides from is persisted (updated_ms of the records), so
 * after a restart or failover the pruning goes on where it was; only the
 * progress of imports is observed in memory, and a restart counts as
 * progress (an import is never aborted sooner because the master
 * restarted). At most min(WM_RECLAIM_MAX, the round's member budget)
 * records are appended per round, after looking at most WM_RECLAIM_SCAN
 * revisions and operations, each from a cursor that goes round the table;
 * the revisions' cursor rests between laps while nothing can be due (no
 * import, no tombstone expiring yet, no change), so an idle tick looks at
 * no revision (wm_reclaim_revisions).
 * Metrics: weight_records_pruned_total{kind} and
 * weight_imports_expired_total. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weight_lineage.h"
#include "wm_plugin.h"

#define WM_SEEN_MAX 4096 /* imports whose progress is tracked */

/* An import's member count as a round last saw it, and since when. */
typedef struct wm_seen {
    char *group;
    uint64_t members;
    uint64_t since_ms; /* wall clock */
} wm_seen;

struct wm_reclaim {
    wm_seen *seen;
    size_t n_seen;
    size_t rev_cursor;  /* index of the next revision to look at */
    uint64_t op_cursor; /* id of the next operation to look at */
    /* The revisions are looked at in laps (wm_reclaim_revisions). */
    size_t rev_lap;         /* revisions this lap still looks at (0: resting) */
    uint64_t rev_changes;   /* the store's revision_changes when last looked */
    int lap_imports;        /* this lap met an import that may expire */
    uint64_t lap_due_ms;    /* the earliest expiry of a tombstone this lap met (wall) */
    uint64_t rest_until_ms; /* resting: when the next lap starts (wall; UINT64_MAX: on a change) */
};

void wm_reclaim_release(wm_plugin *p)
{
    struct wm_reclaim *rc = p->reclaim;
    if (rc == NULL) return;
    for (size_t i = 0; i < rc->n_seen; i++) free(rc->seen[i].group);
    free(rc->seen);
    free(rc);
    p->reclaim = NULL;
}

/* An integer key of the plugin's own block; dflt when absent, not an
 * integer or negative. */
uint64_t wm_plugin_u64(wm_plugin *p, const char *key, uint64_t dflt)
{
    smp_config_value v;
    memset(&v, 0, sizeof(v));
    v.struct_size = sizeof(v);
    if (p->api->config_get == NULL || p->api->config_get(p->host, SMP_CONFIG_PLUGIN, key, &v) < 0 ||
        v.type != SMP_CONFIG_INT || v.i < 0)
        return dflt;
    return (uint64_t)v.i;
}

/* Forget tracked imports that are no longer IMPORTING. */
static void wm_seen_gc(wm_plugin *p, struct wm_reclaim *rc)
{
    size_t kept = 0;
    for (size_t i = 0; i < rc->n_seen; i++) {
        const wm_revision *r = wm_store_get_group(p->store, rc->seen[i].group);
        if (r != NULL && r->availability == WM_AVAIL_IMPORTING) rc->seen[kept++] = rc->seen[i];
        else free(rc->seen[i].group);
    }
    rc->n_seen = kept;
}

/* Since when the import of r has made no progress: its last update, or the
 * last change of its member count a round saw (the first sighting counts as
 * one). */
static uint64_t wm_idle_since(wm_plugin *p, struct wm_reclaim *rc, const wm_revision *r,
                              uint64_t now)
{
    uint64_t members = p->api->group_count(p->host, r->group_key);
    uint64_t since = r->updated_ms;
    for (size_t i = 0; i < rc->n_seen; i++) {
        wm_seen *s = &rc->seen[i];
        if (strcmp(s->group, r->group_key) != 0) continue;
        if (s->members != members) {
            s->members = members;
            s->since_ms = now;
        }
        return s->since_ms > since ? s->since_ms : since;
    }
    if (rc->n_seen < WM_SEEN_MAX) {
        wm_seen *grown = realloc(rc->seen, (rc->n_seen + 1) * sizeof(*grown));
        char *g = strdup(r->group_key);
        if (grown != NULL) rc->seen = grown;
        if (grown != NULL && g != NULL) {
            rc->seen[rc->n_seen++] = (wm_seen){g, members, now};
            return now > since ? now : since;
        }
        free(g);
    }
    return since; /* untracked (table full or no memory): its last update */
}

/* Abort the idle import r if nothing stands in the way. 1 when started. */
static int wm_expire_import(wm_plugin *p, const wm_revision *r, uint64_t idle_ms, uint64_t ttl)
{
    char why[512];
    if (wm_pending_metadata(p, r->group_key)) return 0;
    if (wm_lineage_abort_check(p, &r->id, why, sizeof(why)) < 0) return 0; /* resumed instead */
    wm_revision copy = *r;
    int rc = wm_import_abort_start(p, &copy, NULL);
    if (rc < 0) {
        p->api->log(p->host, SMP_LOG_WARN, "idle import %s not aborted yet: %s", copy.group_key,
                    wm_status_name(rc));
        return 0;
    }
    p->imports_expired++;
    p->api->log(p->host, SMP_LOG_INFO,
                "import %s made no progress for %" PRIu64 " ms (import_ttl_ms %" PRIu64
                "): aborted, its objects are freed",
                copy.group_key, idle_ms, ttl);
    return 1;
}

/* Forget the DELETED tombstone r. 1 when its record is in flight. */
static int wm_expire_tombstone(wm_plugin *p, const wm_revision *r)
{
    if (wm_pending_metadata(p, r->group_key)) return 0;
    wm_metadata_delete d;
    memset(&d, 0, sizeof(d));
    d.id = r->id;
    d.metadata_generation = r->metadata_generation;
    d.reason = WM_DEL_TOMBSTONE_EXPIRED;
    int rc = wm_submit_delete(p, &d, NULL, NULL);
    if (rc < 0) {
        p->api->log(p->host, SMP_LOG_WARN, "tombstone %s not forgotten yet: %s", r->group_key,
                    wm_status_name(rc));
        return 0;
    }
    return 1;
}

/* Forget the ended operation op. 1 when its record is in flight. */
static int wm_expire_operation(wm_plugin *p, const wm_operation *op)
{
    if (wm_pending_delete_op(p, op->id)) return 0;
    const wm_revision *r = wm_store_get(p->store, &op->id_of);
    if (r != NULL && r->operation_id == op->id) return 0; /* still named: not ended */
    uint64_t id = op->id;
    wm_metadata_delete d;
    memset(&d, 0, sizeof(d));
    d.id = op->id_of;
    d.metadata_generation = r != NULL ? r->metadata_generation : 1;
    d.reason = WM_DEL_OPERATIONS_EXPIRED;
    d.operation_ids = &id;
    d.n_operation_ids = 1;
    int rc = wm_submit_delete(p, &d, NULL, NULL);
    if (rc < 0) {
        p->api->log(p->host, SMP_LOG_WARN, "operation %" PRIu64 " not forgotten yet: %s", id,
                    wm_status_name(rc));
        return 0;
    }
    return 1;
}

uint64_t wm_import_ttl_ms(wm_plugin *p)
{
    return wm_plugin_u64(p, "import_ttl_ms", WM_IMPORT_TTL_DEFAULT_MS);
}

/* Look at up to WM_RECLAIM_SCAN revisions from the cursor for idle imports
 * and expired tombstones, appending at most max - *done records. The
 * revisions are looked at in laps, and only while the store counts an
 * import or a tombstone that could expire: a lap ends after each was
 * looked at once; the next one starts at once when that lap met an import
 * (its progress is watched), else when the earliest tombstone it met
 * expires, or when the revision table changed (a change during a lap makes
 * it go round once more). Between laps the scan rests: an idle tick looks
 * at no revision. */
static void wm_reclaim_revisions(wm_plugin *p, struct wm_reclaim *rc, uint64_t now, uint64_t ttl,
                                 uint64_t retention, uint64_t max, uint64_t *done)
{
    wm_store_stats stats;
    wm_store_stats_get(p->store, &stats);
    int changed = stats.revision_changes != rc->rev_changes;
    rc->rev_changes = stats.revision_changes;
    if ((ttl == 0 || stats.by_availability[WM_AVAIL_IMPORTING] == 0) &&
        (retention == 0 || stats.by_availability[WM_AVAIL_DELETED] == 0)) {
        rc->rev_lap = 0; /* nothing that could expire: no lap at all */
        rc->rest_until_ms = UINT64_MAX;
        return;
    }
    if (rc->rev_lap == 0 && (changed || now >= rc->rest_until_ms)) {
        rc->lap_imports = 0; /* a new lap */
        rc->lap_due_ms = UINT64_MAX;
    }
    if (changed || (rc->rev_lap == 0 && now >= rc->rest_until_ms)) rc->rev_lap = SIZE_MAX;
    if (rc->rev_lap == 0) return;
    size_t n = wm_store_revision_count(p->store);
    if (rc->rev_lap > n) rc->rev_lap = n;
    if (rc->rev_cursor >= n) rc->rev_cursor = 0;
    for (size_t k = 0; k < WM_RECLAIM_SCAN && rc->rev_lap > 0 && *done < max; k++) {
        const wm_revision *r = wm_store_revision_at(p->store, rc->rev_cursor);
        rc->rev_cursor = rc->rev_cursor + 1 < n ? rc->rev_cursor + 1 : 0;
        rc->rev_lap--;
        if (r == NULL) break;
        if (r->availability == WM_AVAIL_IMPORTING && ttl > 0) {
            rc->lap_imports = 1;
            uint64_t since = wm_idle_since(p, rc, r, now);
            if (now >= since && now - since >= ttl) *done += (uint64_t)wm_expire_import(p, r, now - since, ttl);
        } else if (r->availability == WM_AVAIL_DELETED && retention > 0) {
            uint64_t due = r->updated_ms < UINT64_MAX - retention ? r->updated_ms + retention : UINT64_MAX;
            if (r->updated_ms <= now && now - r->updated_ms >= retention &&
                wm_expire_tombstone(p, r) > 0) {
                (*done)++;
                continue;
            }
            if (due < rc->lap_due_ms) rc->lap_due_ms = due; /* not yet, or retried */
        }
    }
    if (rc->rev_lap == 0) rc->rest_until_ms = rc->lap_imports ? now : rc->lap_due_ms;
}

int wm_reclaim_tick(wm_plugin *p, const smp_tick_budget *budget)
{
    if (p->reclaim == NULL && (p->reclaim = calloc(1, sizeof(*p->reclaim))) == NULL) return 0;
    struct wm_reclaim *rc = p->reclaim;
    uint64_t now = p->api->wall_ms(p->host);
    uint64_t ttl = wm_import_ttl_ms(p);
    uint64_t retention = wm_plugin_u64(p, "record_retention_ms", WM_RETENTION_DEFAULT_MS);
    uint64_t max = WM_RECLAIM_MAX;
    if (budget != NULL && budget->max_members > 0 && budget->max_members < max)
        max = budget->max_members;
    uint64_t done = 0;

    /* Revisions: idle imports, expired tombstones. */
    wm_seen_gc(p, rc);
    wm_reclaim_revisions(p, rc, now, ttl, retention, max, &done);

    /* Ended operations. */
    size_t nops = wm_store_operation_count(p->store);
    size_t i = wm_store_operation_lower_bound(p->store, rc->op_cursor);
    size_t seen_ops = 0;
    if (retention > 0) {
        for (; i < nops && seen_ops < WM_RECLAIM_SCAN && done < max; i++, seen_ops++) {
            const wm_operation *op = wm_store_operation_at(p->store, i);
            rc->op_cursor = op->id + 1;
            if (op->state == WM_OPS_RUNNING || op->updated_ms > now ||
                now - op->updated_ms < retention)
                continue;
            done += (uint64_t)wm_expire_operation(p, op);
        }
        if (i >= nops) rc->op_cursor = 0; /* round again from the first */
    }
    return done >= max;
}
