/* weight_lifecycle.c -- what the weight plugin does on its own.
 *
 * The object guard that keeps the generic store lifecycle away from managed
 * weight groups, and the reconcile tick the host calls on the active master.
 * Each round of the tick, within the host's budget (members, bytes,
 * deadline):
 *   - ends expired leases (a durable type-11 record each);
 *   - marks READY revisions that lost every readable replica of a member
 *     DEGRADED, and brings DEGRADED revisions whose members are all readable
 *     again back to READY; a read that found a member missing
 *     (SMP_EVENT_READ_MISS) has its revision validated by wm_repair.c;
 *   - executes the RUNNING operations in start order: MIGRATING (to HOT,
 *     COLD or MIXED, in batches of complete affinity units, cold replicas
 *     verified before memory is released, nothing released while a lease is
 *     held or before the manifest has its cold copy), REPAIRING (the same
 *     batches toward the recorded residency, started by wm_repair.c; it
 *     restores replicas and releases none, and ends READY, or FAILED with
 *     the revision DEGRADED when a member has nothing to restore from) and
 *     DELETING (payloads in batches, the manifest last, the group verified
 *     empty, then the DELETED + ABSENT tombstone);
 *   - hands manifest replica care and validation to wm_repair_tick;
 *   - persists last accesses noted in memory (wm_access.c);
 *   - reclaims (wm_reclaim.c): aborts imports idle past their TTL, forgets
 *     tombstones and ended operations past their retention;
 *   - has wm_auto.c move AUTO revisions by themselves (one step colder
 *     under memory pressure, back toward preferred after it).
 * Every completed batch persists the operation's cursor and progress in a
 * type-8 record that repeats the revision's generation; an operation ends in
 * one record that carries it SUCCEEDED (or FAILED: a migration or repair
 * whose batches failed repair_max_attempts times, wm_job_give_up) and
 * clears the revision's operation_id. Nothing here trusts remembered progress alone: members are
 * re-read with object_get before each step and before completion, so after a
 * restart or failover the same operation resumes from its cursor and whatever
 * the replicas really are decides what is left. The working state (jobs,
 * suspects) lives in memory only and is rebuilt from the
 * store. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weight_residency_planner.h"
#include "weight_lineage.h"
#include "wm_plugin.h"
#include "wm_suspects.h"
/* The guard. A managed group is a revision's lifecycle boundary:
 *  - a put or overwrite into it is allowed only while its revision is
 *    IMPORTING, no commit of it is in flight, and the key is the manifest or
 *    a payload key of that revision;
 *  - the revocation of a put that never finished (stale-put cleanup) is
 *    allowed while the revision is IMPORTING or DELETING, refused otherwise;
 *  - every other generic action on a member (eviction, quota eviction,
 *    removal by key, prefix or all, cold-replica eviction) is refused: the
 *    plugin removes members itself with remove_object, which bypasses the
 *    guard.
 * Objects outside managed groups are not the plugin's business. Refusals are
 * counted per reason (published by wm_metrics_refresh; the guard must not
 * call the host). */
int wm_guard_check(wm_plugin *p, const smp_guard_request *req)
{
    if (req == NULL) return SMP_GUARD_VETO;
    if (!req->group_managed) return SMP_GUARD_ALLOW;
    unsigned reason = (unsigned)req->reason;
    const wm_revision *rev = req->group ? wm_store_get_group(p->store, req->group) : NULL;
    /* An upload that never finished is not a member: its revocation frees
     * space and removes nothing of the revision, whatever the revision's
     * state -- and since the host asks again at put end, a put left over from
     * the import can never join a published group, only be freed. */
    if (reason == SMP_GUARD_STALE_PUT_CLEANUP && rev != NULL)
        return SMP_GUARD_ALLOW;
    if (reason == SMP_GUARD_PUT_INTO_GROUP || reason == SMP_GUARD_UPSERT_INTO_GROUP) {
        wm_identity_buf kid;
        wm_key_kind kind;
        if (rev != NULL && rev->availability == WM_AVAIL_IMPORTING &&
            !wm_pending_metadata(p, rev->group_key) && req->key != NULL &&
            wm_key_parse(req->key, &kid, &kind, NULL) == WM_OK && kind != WM_KEY_GROUP &&
            wm_identity_cmp(&kid.id, &rev->id) == 0)
            return SMP_GUARD_ALLOW;
    }
    if (reason <= SMP_GUARD_REASON_MAX) p->guard_skips[reason]++;
    return SMP_GUARD_VETO;
}

/* End expired leases, at most min(budget, WM_LEASE_SWEEP_MAX) per round, in
 * lease-id order from *cursor (the next id to look at). */
static int wm_sweep_leases(wm_plugin *p, const smp_tick_budget *budget, uint64_t *cursor)
{
    uint64_t now = p->api->wall_ms(p->host);
    uint64_t max = budget && budget->max_members ? budget->max_members : WM_LEASE_SWEEP_MAX;
    if (max > WM_LEASE_SWEEP_MAX) max = WM_LEASE_SWEEP_MAX;
    size_t i = wm_store_lease_lower_bound(p->store, *cursor);
    uint64_t done = 0;
    for (; i < wm_store_lease_count(p->store) && done < max; i++) {
        const wm_lease *l = wm_store_lease_at(p->store, i);
        *cursor = l->id + 1;
        if (l->expiry_ms > now || wm_pending_lease_end(p, l->id)) continue;
        wm_lease copy = *l;
        int rc = wm_submit_lease_end(p, &copy, WM_LEASE_EXPIRED);
        if (rc < 0) {
            p->api->log(p->host, SMP_LOG_WARN, "lease %" PRIu64 " expired but its end record "
                        "could not be appended: %s", copy.id, smp_strerror(rc));
            return SMP_TICK_DONE; /* next period */
        }
        done++;
    }
    if (i < wm_store_lease_count(p->store)) return SMP_TICK_MORE;
    *cursor = 0;
    return SMP_TICK_DONE;
}

/* ------------------------------------------------------------------------ */
/* Working state                                                             */
/* ------------------------------------------------------------------------ */

#define WM_RETRY_BASE_MS 200      /* backoff after a failed batch, doubled */
#define WM_RETRY_MAX_MS 5000
#define WM_REPASS_MS 100          /* wait before walking the members again */
#define WM_LEASE_WAIT_MS 100      /* look again whether the lease is gone */
#define WM_CHECKS_PER_ROUND 2048  /* object_get calls per round for checks */
#define WM_DEGRADED_RECHECK_MS 500
#define WM_DEGRADED_MIGRATION_WAIT_MS 30000 /* plugin key degraded_migration_wait_ms */

typedef struct wm_job wm_job;

/* One member of a batch in flight; the context of its replica tasks. */
typedef struct wm_item {
    wm_job *job;
    char *key;          /* owned */
    uint64_t bytes;     /* logical bytes counted for progress */
    int want_hot;       /* migration: a memory replica is the goal */
    int step;           /* the task in flight (WM_STEP_*) */
    int done;
    int status;         /* first failure */
} wm_item;

enum { WM_STEP_NONE = 0, WM_STEP_MEMORY, WM_STEP_COLD, WM_STEP_RELEASE, WM_STEP_REMOVE };

/* A member of a migration plan, in affinity order. A unit's bytes are
 * counted on its first member. */
typedef struct wm_member {
    char *key;
    uint64_t bytes;
    uint32_t unit;
    unsigned char want_hot;
} wm_member;

enum { WM_DEL_REMOVE = 0, WM_DEL_UNMANAGE = 1, WM_DEL_TOMBSTONE = 2 };

/* The in-memory side of one RUNNING operation. */
struct wm_job {
    wm_plugin *p;
    wm_job *next;
    wm_identity id;            /* points into ids: the job may outlive its revision */
    wm_identity_buf ids;
    char group_key[WM_KEY_MAX + 1];
    uint64_t op_id;
    int stale;                 /* from another leadership term: discarded */
    wm_operation op;           /* working copy of the record */
    unsigned refs;             /* callbacks owed: tasks, records, group flag */
    int dirty;                 /* op changed, not yet durable */
    int final_sent;            /* the ending record is in flight or durable */
    int retry_pending;         /* the next batch is a retry (metric) */
    int gave_up;               /* a repair's ending record after its last attempt */
    uint64_t not_before_ms;    /* host clock */
    uint64_t degraded_since_ms; /* a migration waiting on a DEGRADED revision (0: not) */
    /* migration */
    wm_member *plan;
    size_t n_plan;
    int planned;
    size_t next_idx;           /* first member not handled in this pass */
    size_t obs_idx;            /* completion check: next member to read */
    wm_member_replicas *obs;
    /* deletion */
    int del_phase;
    /* the batch in flight */
    wm_item *items;
    size_t n_items;
    int batch_failed;
    char batch_error[WM_ERROR_TEXT_MAX + 1];
};

struct wm_lc {
    wm_job *jobs;
    wm_suspects suspects;      /* members reported lost, for the next round */
    int recheck;               /* NODE_UP: look at DEGRADED revisions now */
    uint64_t last_recheck_ms;
    size_t recheck_cursor;     /* a pass cut by the deadline goes on here */
    int recheck_running;       /* a pass is under way (across ticks) */
};

static wm_lc *wm_lc_get(wm_plugin *p)
{
    if (p->lc == NULL) p->lc = calloc(1, sizeof(*p->lc));
    return p->lc;
}

static void wm_items_free(wm_job *j)
{
    for (size_t i = 0; i < j->n_items; i++) free(j->items[i].key);
    free(j->items);
    j->items = NULL;
    j->n_items = 0;
}

static void wm_plan_free(wm_job *j)
{
    for (size_t i = 0; i < j->n_plan; i++) free(j->plan[i].key);
    free(j->plan);
    free(j->obs);
    j->plan = NULL;
    j->obs = NULL;
    j->n_plan = 0;
    j->planned = 0;
}

static void wm_job_free(wm_job *j)
{
    wm_items_free(j);
    wm_plan_free(j);
    free(j);
}

void wm_lifecycle_release(wm_plugin *p)
{
    wm_lc *lc = p->lc;
    wm_auto_release(p);
    if (lc == NULL) return;
    while (lc->jobs != NULL) {
        wm_job *j = lc->jobs;
        lc->jobs = j->next;
        wm_job_free(j);
    }
    wm_suspects_clear(&lc->suspects);
    free(lc);
    p->lc = NULL;
}

/* A lease on the revision is held or being granted: nothing may be
 * released. */
static int wm_lease_active(wm_plugin *p, const wm_revision *rev)
{
    return rev->lease_count > 0 || wm_pending_lease_grants(p, rev->group_key);
}

/* What the host says of one key; 0 with zeros when it does not exist. */
int wm_replicas_of(wm_plugin *p, const char *key, smp_object_info *info)
{
    memset(info, 0, sizeof(*info));
    info->struct_size = sizeof(*info);
    int rc = p->api->object_get(p->host, key, info);
    if (rc < 0) {
        memset(info, 0, sizeof(*info));
        info->struct_size = sizeof(*info);
    }
    return rc;
}

static int wm_info_readable(const smp_object_info *o)
{
    return o->complete && o->memory_replicas_readable + o->cold_replicas_readable > 0;
}

/* When a reader's read lease on key ends (host monotonic ms), 0 when none
 * is active or the host cannot tell (an ABI 1.5 host: its refusal then
 * costs a retry on the backoff). The host refuses remove_object while one
 * is active; a deletion waits for the end instead, looking again at least
 * every WM_LEASE_WAIT_MS, since a reader that gives its lease back ends it
 * early. */
static uint64_t wm_read_leased(wm_plugin *p, const char *key, uint64_t now)
{
    if (!SMP_HOST_HAS(p->api, object_read_lease_end) || p->api->object_read_lease_end == NULL)
        return 0;
    uint64_t end = p->api->object_read_lease_end(p->host, key);
    return end > now ? end : 0;
}

uint64_t wm_backoff(uint32_t attempts)
{
    uint64_t d = WM_RETRY_BASE_MS;
    for (uint32_t i = 1; i < attempts && d < WM_RETRY_MAX_MS; i++) d *= 2;
    return d < WM_RETRY_MAX_MS ? d : WM_RETRY_MAX_MS;
}

/* Remember a member of a READY revision that may have no readable replica
 * left; the next tick reads it and marks the revision DEGRADED if so. At
 * most WM_SUSPECTS_MAX are kept; a report past them (a node that held more
 * members went down, or came back without its memory) starts the walk that
 * validates every revision against its replicas, bounded per round as after
 * a start, so the revisions of the reports not kept turn DEGRADED too
 * rather than stay READY until a read misses. A report costs a lookup,
 * however many are kept (wm_suspects.c). */
static void wm_suspect_add(wm_plugin *p, wm_lc *lc, const char *group, const char *key)
{
    const wm_revision *rev = wm_store_get_group(p->store, group);
    if (rev == NULL || rev->availability != WM_AVAIL_READY) return;
    if (lc->suspects.n >= WM_SUSPECTS_MAX || wm_suspects_add(&lc->suspects, group, key) < 0)
        wm_repair_validate_all(p);
}

/* ------------------------------------------------------------------------ */
/* Records                                                                   */
/* ------------------------------------------------------------------------ */

static void wm_job_written(wm_plugin *p, void *arg, int status);

/* Persist the job's operation (progress: the revision repeats its
 * generation). A migration's or repair's READY revision carries the
 * residency and hot ratio its replicas have now, so ls and info show how
 * far the move is (a migration to COLD that released 5 of 8 members read
 * HOT 1.000 until it ended; trial); a member with no readable replica
 * left is wm_migration_check's. Returns 1 when the record is in flight, 0
 * when it has to wait (another mutation of the revision is in flight, or
 * the append failed). */
static int wm_job_write_progress(wm_plugin *p, wm_job *j, const wm_revision *rev)
{
    if (wm_pending_metadata(p, rev->group_key)) return 0;
    j->op.updated_ms = wm_now(p, NULL) > j->op.updated_ms ? wm_now(p, NULL) : j->op.updated_ms;
    wm_revision next = *rev;
    wm_observation ob;
    if (j->op.kind != WM_OPK_DELETING && rev->availability == WM_AVAIL_READY &&
        wm_repair_observe(p, rev, &ob) == WM_OK && ob.availability == WM_AVAIL_READY) {
        next.residency = ob.residency;
        next.observed_hot_ratio = ob.observed_hot_ratio;
    }
    j->refs++;
    int rc = wm_submit_upsert(p, &next, &j->op, 1, wm_job_written, j);
    if (rc < 0) {
        j->refs--;
        p->api->log(p->host, SMP_LOG_WARN, "progress of operation %" PRIu64 " on %s not persisted: %s",
                    j->op_id, rev->group_key, wm_status_name(rc));
        return 0;
    }
    return 1;
}

static void wm_job_written(wm_plugin *p, void *arg, int status)
{
    wm_job *j = arg;
    (void)p;
    j->refs--;
    if (status == WM_OK) j->dirty = 0;
}

/* The ending record was applied (or not: then the operation stays RUNNING
 * in the store and the job starts over from what is persisted). */
static void wm_job_final_written(wm_plugin *p, void *arg, int status)
{
    wm_job *j = arg;
    j->refs--;
    if (status != WM_OK) {
        j->final_sent = 0;
        j->op.state = WM_OPS_RUNNING; /* the store still has it RUNNING */
        j->not_before_ms = p->api->now_ms(p->host) + WM_RETRY_BASE_MS;
        return;
    }
    if (j->op.kind == WM_OPK_MIGRATING) {
        p->migrations_completed++;
        uint64_t now = wm_now(p, NULL);
        p->migration_ms_total += now > j->op.created_ms ? now - j->op.created_ms : 0;
    } else if (j->op.kind == WM_OPK_REPAIRING) {
        if (j->op.state == WM_OPS_SUCCEEDED) {
            p->repairs_succeeded++;
        } else {
            p->repairs_failed++;
            if (j->gave_up) {
                p->repairs_gave_up++;
                wm_repair_gave_up(p, j->group_key);
            }
        }
    }
}

/* Send the record that ends the operation in state `end` (SUCCEEDED, or
 * FAILED with j->op.error saying why) with `next` as the revision. */
static void wm_job_end(wm_plugin *p, wm_job *j, const wm_revision *rev, wm_revision *next,
                       wm_op_state end)
{
    char why[512] = "";
    int rc;
    next->metadata_generation = rev->metadata_generation + 1;
    next->operation_id = 0;
    next->updated_ms = wm_now(p, rev);
    j->op.state = end;
    if (end == WM_OPS_SUCCEEDED) {
        j->op.members_done = j->op.members_total;
        j->op.bytes_done = j->op.bytes_total;
    }
    j->op.updated_ms = next->updated_ms > j->op.updated_ms ? next->updated_ms : j->op.updated_ms;
    if ((rc = wm_metadata_mutation_check(rev, next, why, sizeof(why))) < 0) {
        p->api->log(p->host, SMP_LOG_ERROR, "operation %" PRIu64 " on %s cannot end: %s", j->op_id,
                    rev->group_key, why);
        j->op.state = WM_OPS_RUNNING;
        j->not_before_ms = p->api->now_ms(p->host) + WM_RETRY_MAX_MS;
        return;
    }
    j->refs++;
    j->final_sent = 1;
    if ((rc = wm_submit_upsert(p, next, &j->op, 1, wm_job_final_written, j)) < 0) {
        j->refs--;
        j->final_sent = 0;
        j->op.state = WM_OPS_RUNNING;
        j->not_before_ms = p->api->now_ms(p->host) + WM_RETRY_BASE_MS;
    }
}

static void wm_job_finish(wm_plugin *p, wm_job *j, const wm_revision *rev, wm_revision *next)
{
    wm_job_end(p, j, rev, next, WM_OPS_SUCCEEDED);
}

int wm_submit_availability(wm_plugin *p, const wm_revision *rev, wm_availability a,
                           const wm_observation *obs)
{
    char why[512] = "";
    wm_revision next = *rev;
    wm_operation op;
    size_t n_ops = 0;
    /* The active operation travels along unchanged (same state). */
    const wm_operation *cur = rev->operation_id ? wm_store_operation(p->store, rev->operation_id) : NULL;
    wm_revision_set_availability(&next, rev, cur, a);
    if (obs != NULL) {
        next.residency = obs->residency;
        next.observed_hot_ratio = obs->observed_hot_ratio;
    }
    next.metadata_generation = rev->metadata_generation + 1;
    next.updated_ms = wm_now(p, rev);
    int rc = wm_metadata_mutation_check(rev, &next, why, sizeof(why));
    if (rc < 0) {
        p->api->log(p->host, SMP_LOG_ERROR, "%s cannot become %s: %s", rev->group_key,
                    wm_availability_name((int)a), why);
        return rc;
    }
    if (cur != NULL) {
        op = *cur;
        n_ops = 1;
    }
    rc = wm_submit_upsert(p, &next, n_ops ? &op : NULL, n_ops, NULL, NULL);
    if (rc == WM_OK && next.degraded_from != WM_RES_UNKNOWN && rev->availability != WM_AVAIL_DEGRADED)
        p->api->log(p->host, SMP_LOG_INFO,
                    "%s becomes %s (it belongs %s: it goes there once its manifest and members are readable)",
                    rev->group_key, wm_availability_name((int)a),
                    wm_residency_name((int)next.degraded_from));
    else if (rc == WM_OK)
        p->api->log(p->host, SMP_LOG_INFO, "%s becomes %s", rev->group_key, wm_availability_name((int)a));
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Migration                                                                 */
/* ------------------------------------------------------------------------ */

/* A repair or a migration whose batches failed repair_max_attempts times
 * ends FAILED with the last error. The revision keeps its availability
 * (READY while its data is readable, DEGRADED when it was); a migration's
 * revision records the residency its replicas have now (no replica is
 * dropped: a member moving to COLD releases its memory only once its cold
 * copy is verified), so a removal or another migration is accepted again.
 * wm_repair_gave_up keeps the tick from starting the same repair again by
 * itself. */
static void wm_job_give_up(wm_plugin *p, wm_job *j, const wm_revision *rev)
{
    if (wm_pending_metadata(p, rev->group_key)) return;
    int repair = j->op.kind == WM_OPK_REPAIRING;
    wm_revision next = *rev;
    if (!repair && rev->availability == WM_AVAIL_READY) {
        wm_observation ob;
        if (wm_repair_observe(p, rev, &ob) < 0) {
            j->not_before_ms = p->api->now_ms(p->host) + WM_RETRY_MAX_MS;
            return;
        }
        if (ob.availability != WM_AVAIL_READY) return; /* wm_migration_check makes it DEGRADED */
        next.residency = ob.residency;
        next.observed_hot_ratio = ob.observed_hot_ratio;
    }
    static const char prefix[] = "gave up after ";
    char last[WM_ERROR_TEXT_MAX + 1];
    snprintf(last, sizeof(last), "%s", j->op.error);
    if (strncmp(last, prefix, sizeof(prefix) - 1) != 0) /* not when ending again */
        snprintf(j->op.error, sizeof(j->op.error), "%s%" PRIu32 " attempts (repair_max_attempts): %.190s",
                 prefix, j->op.attempts, last);
    wm_job_end(p, j, rev, &next, WM_OPS_FAILED);
    if (!j->final_sent) {
        snprintf(j->op.error, sizeof(j->op.error), "%s", last); /* tried again next round */
        return;
    }
    j->gave_up = repair;
    if (repair)
        p->api->log(p->host, SMP_LOG_WARN, "repair %" PRIu64 " of %s %s; the revision stays %s",
                    j->op_id, rev->group_key, j->op.error, wm_availability_name((int)rev->availability));
    else
        p->api->log(p->host, SMP_LOG_WARN,
                    "migration %" PRIu64 " of %s to %s %s; the revision stays %s %s", j->op_id,
                    rev->group_key, wm_residency_name((int)j->op.target), j->op.error,
                    wm_availability_name((int)next.availability), wm_residency_name((int)next.residency));
}

/* Build the plan: every payload in affinity order, with its goal. */
static int wm_job_plan(wm_plugin *p, wm_job *j)
{
    const wm_affinity *aff = wm_store_affinity(p->store, &j->id);
    if (aff == NULL || aff->n_units == 0) return WM_EINVALID_ARGUMENT;
    size_t n = 0;
    for (size_t u = 0; u < aff->n_units; u++) n += aff->units[u].n_members;
    if (n == 0) return WM_EINVALID_ARGUMENT;
    unsigned char *hot = calloc(aff->n_units, 1);
    uint64_t *ub = calloc(aff->n_units, sizeof(uint64_t));
    j->plan = calloc(n, sizeof(*j->plan));
    j->obs = calloc(n, sizeof(*j->obs));
    int rc = WM_OK;
    if (hot == NULL || ub == NULL || j->plan == NULL || j->obs == NULL) {
        rc = SMP_ENOMEM;
        goto free_tmp;
    }
    uint64_t total = 0;
    for (size_t u = 0; u < aff->n_units; u++) {
        ub[u] = aff->units[u].logical_bytes;
        total += ub[u];
    }
    rc = wm_plan_unit_goals(ub, aff->n_units, total, j->op.target, j->op.target_hot_ratio, hot);
    if (rc < 0) goto free_tmp;
    size_t k = 0;
    for (size_t u = 0; u < aff->n_units && rc == WM_OK; u++)
        for (size_t m = 0; m < aff->units[u].n_members; m++, k++) {
            j->plan[k].key = strdup(aff->units[u].members[m]);
            if (j->plan[k].key == NULL) {
                rc = SMP_ENOMEM;
                break;
            }
            j->plan[k].bytes = m == 0 ? ub[u] : 0;
            j->plan[k].unit = (uint32_t)u;
            j->plan[k].want_hot = hot[u];
        }
    j->n_plan = n;
    if (rc == WM_OK) {
        /* Resume after the persisted cursor (the last member handled). */
        j->next_idx = 0;
        if (j->op.cursor[0] != '\0')
            for (size_t i = 0; i < n; i++)
                if (strcmp(j->plan[i].key, j->op.cursor) == 0) {
                    j->next_idx = i + 1;
                    break;
                }
        j->planned = 1;
    }
free_tmp:
    free(hot);
    free(ub);
    if (rc < 0) wm_plan_free(j);
    return rc;
}

static void wm_batch_end(wm_job *j);

static void wm_item_issue(wm_item *it);

/* Memory replicas of the job's revision stay: a repair only adds, a lease
 * protects the existing replicas, and nothing is released before the
 * manifest has its verified cold copy (so the revision survives the loss of
 * memory). */
static int wm_keep_memory(wm_plugin *p, const wm_job *j, const wm_revision *rev)
{
    return j->op.kind == WM_OPK_REPAIRING || wm_lease_active(p, rev) || !wm_manifest_has_cold(p, rev);
}

/* Whether a migration releases a member's memory replica now: not when the
 * revision keeps its memory (keep: wm_keep_memory), and not while a reader
 * holds a read lease on the member -- the host refuses that release, so it
 * is put off (counted) and a later pass of the job makes it once the lease
 * ended. */
static int wm_may_release(wm_plugin *p, int keep, const char *key)
{
    if (keep) return 0;
    if (wm_read_leased(p, key, p->api->now_ms(p->host)) == 0) return 1;
    p->release_lease_waits++;
    return 0;
}

/* Completion of one replica task of a batch item. */
static void wm_item_done(void *arg, int status)
{
    wm_item *it = arg;
    wm_job *j = it->job;
    wm_plugin *p = j->p;
    j->refs--;
    if (status == SMP_EBUSY && it->step == WM_STEP_RELEASE) {
        /* A reader leased the member after wm_may_release looked: its
         * memory goes in a later pass, as for one leased before -- a wait,
         * not a failed attempt (repair_max_attempts would end the
         * migration of a revision that is read all the time). */
        p->release_lease_waits++;
        status = 0;
    }
    if (status < 0) {
        it->status = status;
        if (!j->batch_failed) {
            j->batch_failed = 1;
            snprintf(j->batch_error, sizeof(j->batch_error), "%s of %.180s failed: %s",
                     it->step == WM_STEP_COLD ? "cold replica" :
                     it->step == WM_STEP_MEMORY ? "memory replica" :
                     it->step == WM_STEP_RELEASE ? "memory release" : "removal",
                     it->key, smp_strerror(status));
        }
    } else if (it->step == WM_STEP_COLD && !j->stale) {
        /* The cold replica exists and is verified: a migration releases
         * memory unless a lease protects the existing replicas, the
         * manifest has no cold copy yet or a reader is still reading the
         * member; a repair releases nothing. */
        const wm_revision *rev = wm_store_get(p->store, &j->id);
        if (rev != NULL && wm_may_release(p, wm_keep_memory(p, j, rev), it->key)) {
            it->step = WM_STEP_RELEASE;
            wm_item_issue(it);
        } else {
            it->done = 1; /* created; released in a later pass */
        }
    } else {
        it->done = 1;
    }
    if (j->refs == 0 && j->items != NULL) wm_batch_end(j);
}

/* Start the item's current step; a refusal is the item's failure. */
static void wm_item_issue(wm_item *it)
{
    wm_job *j = it->job;
    wm_plugin *p = j->p;
    int rc;
    switch (it->step) {
    case WM_STEP_MEMORY: rc = p->api->ensure_memory(p->host, it->key, wm_item_done, it); break;
    case WM_STEP_COLD: rc = p->api->ensure_cold(p->host, it->key, wm_item_done, it); break;
    case WM_STEP_RELEASE: rc = p->api->release_memory(p->host, it->key, wm_item_done, it); break;
    case WM_STEP_REMOVE: rc = p->api->remove_object(p->host, it->key, wm_item_done, it); break;
    default: it->done = 1; return;
    }
    if (rc == SMP_EBUSY && it->step == WM_STEP_RELEASE) { /* leased meanwhile: see wm_item_done */
        p->release_lease_waits++;
        it->done = 1;
        return;
    }
    if (rc < 0) {
        it->status = rc;
        if (!j->batch_failed) {
            j->batch_failed = 1;
            /* EAGAIN from a copy: the host found no readable replica of
               it to copy from (every one lost, or on nodes that are down). */
            int no_source = rc == SMP_EAGAIN && (it->step == WM_STEP_MEMORY || it->step == WM_STEP_COLD);
            snprintf(j->batch_error, sizeof(j->batch_error), "%.180s %s: %s", it->key,
                     no_source ? "has no readable replica to copy from" : "refused by the host",
                     smp_strerror(rc));
        }
        return;
    }
    j->refs++;
}

/* Every task of the batch answered: move the cursor over the finished
 * prefix, record a failure, and persist. */
static void wm_batch_end(wm_job *j)
{
    wm_plugin *p = j->p;
    size_t k = 0;
    uint64_t bytes = 0;
    while (k < j->n_items && j->items[k].done && j->items[k].status == 0) bytes += j->items[k++].bytes;
    if (j->op.kind != WM_OPK_DELETING) {
        j->next_idx += k;
        if (k > 0) snprintf(j->op.cursor, sizeof(j->op.cursor), "%s", j->plan[j->next_idx - 1].key);
        uint64_t done = j->next_idx, done_bytes = 0;
        for (size_t i = 0; i < j->next_idx; i++) done_bytes += j->plan[i].bytes;
        if (done > j->op.members_total) done = j->op.members_total;
        if (done_bytes > j->op.bytes_total) done_bytes = j->op.bytes_total;
        if (done > j->op.members_done) j->op.members_done = done;
        if (done_bytes > j->op.bytes_done) j->op.bytes_done = done_bytes;
        if (j->op.kind == WM_OPK_MIGRATING) p->migration_bytes_processed += bytes;
        else p->repair_bytes_processed += bytes;
    } else {
        /* Deletion: every removed member counts, in any order. */
        uint64_t removed = 0, rbytes = 0;
        for (size_t i = 0; i < j->n_items; i++)
            if (j->items[i].done && j->items[i].status == 0) {
                wm_identity_buf cid;
                wm_key_kind kind;
                removed++;
                rbytes += j->items[i].bytes;
                if (wm_key_parse(j->items[i].key, &cid, &kind, NULL) == WM_OK && kind != WM_KEY_GROUP &&
                    wm_identity_cmp(&cid.id, &j->id) == 0)
                    snprintf(j->op.cursor, sizeof(j->op.cursor), "%s", j->items[i].key);
            }
        j->op.members_done += removed;
        if (j->op.members_done > j->op.members_total) j->op.members_done = j->op.members_total;
        j->op.bytes_done += rbytes;
        if (j->op.bytes_done > j->op.bytes_total) j->op.bytes_done = j->op.bytes_total;
    }
    if (j->batch_failed) {
        /* A member that failed may have nothing readable left. */
        for (size_t i = 0; i < j->n_items; i++)
            if (j->items[i].status < 0 && j->items[i].key != NULL && p->lc != NULL)
                wm_suspect_add(p, p->lc, j->group_key, j->items[i].key);
        j->op.attempts++;
        snprintf(j->op.error, sizeof(j->op.error), "%s", j->batch_error);
        p->op_failures++;
        j->retry_pending = 1;
        j->not_before_ms = p->api->now_ms(p->host) + wm_backoff(j->op.attempts);
        p->api->log(p->host, SMP_LOG_WARN, "operation %" PRIu64 " on %s: %s (attempt %" PRIu32 ")",
                    j->op_id, j->group_key, j->batch_error, j->op.attempts);
    } else if (j->op.error[0] != '\0') {
        j->op.error[0] = '\0'; /* a retry went through */
    }
    j->batch_failed = 0;
    wm_items_free(j);
    j->dirty = 1;
    const wm_revision *rev = wm_store_get(p->store, &j->id);
    if (!j->stale && rev != NULL && rev->operation_id == j->op_id) wm_job_write_progress(p, j, rev);
}

/* Start the next migration batch: complete units from the job's next
 * member while the round's remaining budget holds, the first unit always
 * when nothing else started this round (wm_batch_bound; a unit is never
 * split). Each member is read first and only the missing step is asked for:
 * a memory replica for a HOT member; for a COLD member a verified cold
 * replica, then the release of memory -- skipped while wm_may_release says
 * no (a repair runs the same batches and never releases). Adds what it
 * takes to *used_members / *used_bytes. */
static void wm_migration_batch(wm_plugin *p, wm_job *j, const wm_revision *rev, uint64_t max_members,
                               uint64_t max_bytes, int first_of_round, uint64_t *used_members,
                               uint64_t *used_bytes)
{
    size_t left = j->n_plan - j->next_idx;
    size_t window = max_members >= left ? left : (size_t)max_members + 1;
    /* Never cut the first unit short: extend the window to its end. */
    while (window < left && j->plan[j->next_idx + window].unit == j->plan[j->next_idx].unit) window++;
    wm_batch_member *bm = calloc(window, sizeof(*bm));
    if (bm == NULL) return;
    for (size_t i = 0; i < window; i++) {
        bm[i].unit = j->plan[j->next_idx + i].unit;
        bm[i].bytes = j->plan[j->next_idx + i].bytes;
    }
    wm_batch b;
    int rc = wm_batch_bound(bm, window, max_members ? max_members : 1, max_bytes ? max_bytes : 1, &b);
    free(bm);
    if (rc < 0 || b.members == 0) return;
    if (!first_of_round && (b.members > max_members || b.bytes > max_bytes)) return; /* next round */
    j->items = calloc(b.members, sizeof(*j->items));
    if (j->items == NULL) return;
    j->n_items = b.members;
    *used_members += b.members;
    *used_bytes += b.bytes;
    if (j->retry_pending) {
        p->op_retries++;
        j->retry_pending = 0;
    }
    int keep = wm_keep_memory(p, j, rev);
    for (size_t i = 0; i < b.members; i++) {
        const wm_member *m = &j->plan[j->next_idx + i];
        wm_item *it = &j->items[i];
        it->job = j;
        it->key = strdup(m->key);
        it->bytes = m->bytes;
        it->want_hot = m->want_hot;
        if (it->key == NULL) {
            it->status = SMP_ENOMEM;
            j->batch_failed = 1;
            snprintf(j->batch_error, sizeof(j->batch_error), "out of memory");
            continue;
        }
    }
    j->refs++; /* hold the batch open while its tasks are issued */
    for (size_t i = 0; i < b.members; i++) {
        wm_item *it = &j->items[i];
        smp_object_info o;
        if (it->key == NULL) continue;
        wm_replicas_of(p, it->key, &o);
        if (it->want_hot) {
            it->step = o.memory_replicas_readable > 0 ? WM_STEP_NONE : WM_STEP_MEMORY;
        } else if (o.cold_replicas_readable == 0) {
            it->step = WM_STEP_COLD;
        } else if (o.memory_replicas_readable > 0) {
            it->step = wm_may_release(p, keep, it->key) ? WM_STEP_RELEASE : WM_STEP_NONE;
        } else {
            it->step = WM_STEP_NONE;
        }
        wm_item_issue(it);
    }
    j->refs--;
    if (j->refs == 0) wm_batch_end(j);
}

/* Read members for the completion check, at most *checks of them; then
 * decide: end the operation, mark the revision DEGRADED, wait for a lease,
 * or walk the members again. */
static void wm_migration_check(wm_plugin *p, wm_job *j, const wm_revision *rev, uint64_t *checks)
{
    smp_object_info o;
    while (j->obs_idx < j->n_plan && *checks > 0) {
        wm_replicas_of(p, j->plan[j->obs_idx].key, &o);
        j->obs[j->obs_idx].memory = o.complete && o.memory_replicas_readable > 0;
        j->obs[j->obs_idx].cold = o.complete && o.cold_replicas_readable > 0;
        j->obs_idx++;
        (*checks)--;
    }
    if (j->obs_idx < j->n_plan) return;
    j->obs_idx = 0;
    wm_replicas_of(p, rev->manifest_key, &o);
    int manifest_ok = wm_info_readable(&o);
    wm_observation ob;
    const wm_affinity *aff = wm_store_affinity(p->store, &j->id);
    if (wm_residency_observe(aff, j->obs, j->n_plan, manifest_ok, &ob) < 0) {
        j->not_before_ms = p->api->now_ms(p->host) + WM_RETRY_MAX_MS;
        return;
    }
    int repair = j->op.kind == WM_OPK_REPAIRING;
    if (ob.availability != WM_AVAIL_READY) {
        if (wm_pending_metadata(p, rev->group_key)) return;
        if (!repair) {
            wm_submit_availability(p, rev, WM_AVAIL_DEGRADED, &ob);
            return;
        }
        /* A member with no readable replica left: nothing to restore it
         * from. The repair ends FAILED, the revision DEGRADED. */
        wm_revision next = *rev;
        wm_revision_set_availability(&next, rev, &j->op, WM_AVAIL_DEGRADED);
        next.residency = ob.residency; /* what its replicas left */
        next.observed_hot_ratio = ob.observed_hot_ratio;
        snprintf(j->op.error, sizeof(j->op.error),
                 "%" PRIu64 " member(s)%s have no readable replica to restore from",
                 ob.unreadable_members, manifest_ok ? "" : " and the manifest");
        wm_job_end(p, j, rev, &next, WM_OPS_FAILED);
        return;
    }
    int converged = 1, only_releases = 1;
    for (size_t i = 0; i < j->n_plan; i++) {
        const wm_member_replicas *r = &j->obs[i];
        int ok = j->plan[i].want_hot ? r->memory : (r->cold && (repair || !r->memory));
        if (ok) continue;
        converged = 0;
        if (j->plan[i].want_hot || !r->cold) only_releases = 0;
    }
    if (converged) {
        if (wm_pending_metadata(p, rev->group_key)) return;
        wm_revision next = *rev;
        wm_revision_set_availability(&next, rev, NULL, WM_AVAIL_READY); /* a repair ends DEGRADED */
        next.residency = ob.residency;
        next.observed_hot_ratio = ob.observed_hot_ratio;
        wm_job_finish(p, j, rev, &next);
        return;
    }
    uint64_t now = p->api->now_ms(p->host);
    if (only_releases && wm_keep_memory(p, j, rev)) {
        /* A lease keeps the existing memory replicas, or the manifest's
         * cold copy is not there yet: wait for it. */
        j->not_before_ms = now + WM_LEASE_WAIT_MS;
        return;
    }
    /* What the replicas really are disagrees with the pass: walk again
     * (members already in place cost nothing). */
    j->next_idx = 0;
    j->op.cursor[0] = '\0';
    j->dirty = 1;
    j->not_before_ms = now + WM_REPASS_MS;
}

/* ------------------------------------------------------------------------ */
/* Deletion                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct wm_listing {
    const char *skip;  /* the manifest: removed last */
    char **keys;
    uint64_t *sizes;
    size_t n, cap;
    uint64_t bytes, max_bytes;
} wm_listing;

static int wm_list_visit(void *arg, const smp_object_info *o)
{
    wm_listing *l = arg;
    if (o->key == NULL || strcmp(o->key, l->skip) == 0) return 0;
    if (l->n == l->cap) return 1;
    if (l->n > 0 && l->bytes + o->size > l->max_bytes) return 1;
    if ((l->keys[l->n] = strdup(o->key)) == NULL) return 1;
    l->sizes[l->n] = o->size;
    l->bytes += o->size;
    l->n++;
    return 0;
}

static void wm_unmanaged(void *arg, int status)
{
    wm_job *j = arg;
    wm_plugin *p = j->p;
    j->refs--;
    if (status < 0) {
        p->api->log(p->host, SMP_LOG_WARN, "group %s could not be unmanaged: %s", j->group_key,
                    smp_strerror(status));
        j->not_before_ms = p->api->now_ms(p->host) + wm_backoff(++j->op.attempts);
        return;
    }
    j->del_phase = WM_DEL_TOMBSTONE;
}

/* The end of an aborted import's deletion: the group is empty and
 * unmanaged, so one type-9 record forgets the revision and its operation
 * (no tombstone: the name is free for a retry). */
static void wm_job_forget(wm_plugin *p, wm_job *j, const wm_revision *rev)
{
    if (wm_lineage_target_open(p, &rev->id)) {
        /* The target of an open claim: kept until the claim ended on it. */
        j->not_before_ms = p->api->now_ms(p->host) + WM_LEASE_WAIT_MS;
        return;
    }
    wm_metadata_delete d;
    memset(&d, 0, sizeof(d));
    d.id = rev->id;
    d.metadata_generation = rev->metadata_generation;
    d.reason = WM_DEL_IMPORT_ABORTED;
    d.operation_ids = &j->op_id;
    d.n_operation_ids = 1;
    j->refs++;
    j->final_sent = 1;
    int rc = wm_submit_delete(p, &d, wm_job_final_written, j);
    if (rc < 0) {
        j->refs--;
        j->final_sent = 0;
        j->not_before_ms = p->api->now_ms(p->host) + WM_RETRY_BASE_MS;
        p->api->log(p->host, SMP_LOG_WARN, "aborted import %s not forgotten yet: %s",
                    rev->group_key, wm_status_name(rc));
    }
}

/* One step of a deletion within the round's budget: remove a batch of
 * payloads (whatever the group still lists, so a retry or a restart goes on
 * with what is left); when only the manifest is left, remove it; when the
 * group is empty, unmanage it; then the tombstone (wm_job_finish), or for
 * an aborted import the record that forgets it (wm_job_forget). */
static void wm_deletion_step(wm_plugin *p, wm_job *j, const wm_revision *rev, uint64_t max_members,
                             uint64_t max_bytes, int first_of_round, uint64_t *used_members,
                             uint64_t *used_bytes)
{
    if (j->del_phase == WM_DEL_TOMBSTONE) {
        if (p->api->group_count(p->host, rev->group_key) != 0) {
            j->del_phase = WM_DEL_REMOVE; /* something came back: remove it too */
            return;
        }
        if (wm_pending_metadata(p, rev->group_key)) return;
        if (rev->residency == WM_RES_UNKNOWN) {
            wm_job_forget(p, j, rev); /* an aborted import, never sealed */
            return;
        }
        wm_revision next = *rev;
        wm_revision_set_availability(&next, rev, NULL, WM_AVAIL_DELETED);
        next.residency = WM_RES_ABSENT;
        next.observed_hot_ratio = 0.0;
        next.lease_count = 0;
        wm_job_finish(p, j, rev, &next);
        return;
    }
    if (!first_of_round && max_members == 0) return;
    /* At most the members and bytes left in the round; the first member
     * always (wm_list_visit). */
    wm_listing l = {.skip = rev->manifest_key, .max_bytes = max_bytes};
    l.cap = max_members > 0 && max_members < 4096 ? (size_t)max_members : max_members ? 4096 : 1;
    l.keys = calloc(l.cap, sizeof(char *));
    l.sizes = calloc(l.cap, sizeof(uint64_t));
    if (l.keys == NULL || l.sizes == NULL) goto free_listing;
    p->api->group_list(p->host, rev->group_key, NULL, l.cap + 1, wm_list_visit, &l);
    if (l.n == 0) {
        smp_object_info o;
        uint64_t left = p->api->group_count(p->host, rev->group_key);
        if (left == 1 && wm_replicas_of(p, rev->manifest_key, &o) == SMP_OK) {
            /* Every payload is gone: the manifest goes last. */
            l.keys[0] = strdup(rev->manifest_key);
            l.sizes[0] = o.size;
            if (l.keys[0] != NULL) l.n = 1;
        } else if (left == 0) {
            j->del_phase = WM_DEL_UNMANAGE;
            j->refs++;
            int rc = p->api->group_set_managed(p->host, rev->group_key, 0, wm_unmanaged, j);
            if (rc < 0) {
                j->refs--;
                j->not_before_ms = p->api->now_ms(p->host) + wm_backoff(++j->op.attempts);
                j->del_phase = WM_DEL_REMOVE;
            }
            goto free_listing;
        } else {
            /* Members the listing does not show yet (puts in flight). */
            j->not_before_ms = p->api->now_ms(p->host) + WM_RETRY_BASE_MS;
            goto free_listing;
        }
    }
    /* Members a reader still holds a read lease on would be refused: they
     * wait for it (wm_read_leased), the others go now. */
    uint64_t now = p->api->now_ms(p->host), lease_end = 0;
    size_t kept = 0;
    for (size_t i = 0; i < l.n; i++) {
        uint64_t end = wm_read_leased(p, l.keys[i], now);
        if (end == 0) {
            l.keys[kept] = l.keys[i];
            l.sizes[kept++] = l.sizes[i];
            continue;
        }
        if (lease_end == 0 || end < lease_end) lease_end = end;
        free(l.keys[i]);
    }
    l.n = kept;
    if (lease_end != 0) {
        p->read_lease_waits++;
        uint64_t wait = lease_end - now < WM_LEASE_WAIT_MS ? lease_end - now : WM_LEASE_WAIT_MS;
        j->not_before_ms = now + wait;
        if (l.n == 0) goto free_listing;
    }
    j->items = calloc(l.n, sizeof(*j->items));
    if (j->items == NULL) goto free_listing;
    j->n_items = l.n;
    if (j->retry_pending) {
        p->op_retries++;
        j->retry_pending = 0;
    }
    for (size_t i = 0; i < l.n; i++) {
        j->items[i].job = j;
        j->items[i].key = l.keys[i];
        j->items[i].bytes = l.sizes[i];
        j->items[i].step = WM_STEP_REMOVE;
        l.keys[i] = NULL;
        *used_bytes += l.sizes[i];
    }
    *used_members += l.n;
    j->refs++;
    for (size_t i = 0; i < j->n_items; i++) wm_item_issue(&j->items[i]);
    j->refs--;
    if (j->refs == 0) wm_batch_end(j);
free_listing:
    for (size_t i = 0; l.keys != NULL && i < l.n; i++) free(l.keys[i]);
    free(l.keys);
    free(l.sizes);
}

/* ------------------------------------------------------------------------ */
/* Operations                                                                */
/* ------------------------------------------------------------------------ */

static wm_job *wm_job_find(wm_lc *lc, uint64_t op_id)
{
    for (wm_job *j = lc->jobs; j != NULL; j = j->next)
        if (j->op_id == op_id && !j->stale) return j;
    return NULL;
}

static wm_job *wm_job_new(wm_plugin *p, wm_lc *lc, const wm_revision *rev, const wm_operation *op)
{
    wm_job *j = calloc(1, sizeof(*j));
    if (j == NULL) return NULL;
    j->p = p;
    wm_identity_buf_set(&j->ids, &rev->id);
    j->id = j->ids.id;
    snprintf(j->group_key, sizeof(j->group_key), "%s", rev->group_key);
    j->op_id = op->id;
    j->op = *op;
    j->op.id_of = j->id; /* the operation's revision (wm_operation_check) */
    if (op->kind == WM_OPK_DELETING) j->del_phase = WM_DEL_REMOVE;
    j->next = lc->jobs;
    lc->jobs = j;
    return j;
}

/* Drop jobs whose operation is no longer active and that owe nothing. */
static void wm_jobs_gc(wm_plugin *p, wm_lc *lc)
{
    for (wm_job **pp = &lc->jobs; *pp != NULL;) {
        wm_job *j = *pp;
        const wm_revision *rev = wm_store_get(p->store, &j->id);
        int active = !j->stale && rev != NULL && rev->operation_id == j->op_id;
        if (!active && j->refs == 0) {
            *pp = j->next;
            wm_job_free(j);
            continue;
        }
        pp = &j->next;
    }
}

/* A migration whose revision is DEGRADED waits for the lost members to
 * become readable again (their node comes back). A member whose last
 * replica is gone never will, and the operation would keep the revision
 * from being deleted: after the plugin key degraded_migration_wait_ms
 * (default 30 s) the migration ends FAILED, naming why, and the revision
 * stays DEGRADED, recording the migration's target as where it belongs
 * (degraded_from): it goes there once its manifest and members are readable again. */
static void wm_migration_wait_degraded(wm_plugin *p, wm_job *j, const wm_revision *rev, uint64_t now)
{
    uint64_t wait = wm_plugin_u64(p, "degraded_migration_wait_ms", WM_DEGRADED_MIGRATION_WAIT_MS);
    if (j->degraded_since_ms == 0) {
        j->degraded_since_ms = now;
        return;
    }
    if (now - j->degraded_since_ms < wait || wm_pending_metadata(p, rev->group_key)) return;
    snprintf(j->op.error, sizeof(j->op.error),
             "the revision stayed DEGRADED for %" PRIu64 " ms (degraded_migration_wait_ms; a member "
             "has no readable replica); it goes to %s by itself once its manifest and members are readable",
             wait, wm_residency_name((int)j->op.target));
    p->api->log(p->host, SMP_LOG_WARN, "operation %" PRIu64 " on %s: %s", j->op_id, rev->group_key, j->op.error);
    wm_revision next = *rev;
    wm_job_end(p, j, rev, &next, WM_OPS_FAILED);
}

/* Run the RUNNING operations in the order they were started (operation
 * id) within the budget. Returns 1 when an operation is still active. */
static int wm_run_operations(wm_plugin *p, wm_lc *lc, const smp_tick_budget *budget,
                             uint64_t *checks)
{
    uint64_t max_members = budget && budget->max_members ? budget->max_members : 64;
    uint64_t max_bytes = budget && budget->max_bytes ? budget->max_bytes : UINT64_MAX;
    uint64_t used_members = 0, used_bytes = 0;
    int started = 0, active = 0;
    /* Over the operations table (far smaller than the revisions), by id:
     * the next one is looked up after each, so records applied meanwhile
     * cannot make the walk skip or repeat one. */
    uint64_t after = 0;
    for (size_t k = 0; k < wm_store_operation_count(p->store);
         k = wm_store_operation_lower_bound(p->store, after + 1)) {
        const wm_operation *op = wm_store_operation_at(p->store, k);
        after = op->id;
        if (op->state != WM_OPS_RUNNING) continue;
        if (op->kind != WM_OPK_MIGRATING && op->kind != WM_OPK_DELETING &&
            op->kind != WM_OPK_REPAIRING)
            continue;
        const wm_revision *rev = wm_store_get(p->store, &op->id_of);
        if (rev == NULL || rev->operation_id != op->id) continue;
        active = 1;
        wm_job *j = wm_job_find(lc, op->id);
        if (j == NULL && (j = wm_job_new(p, lc, rev, op)) == NULL) continue;
        if (j->refs > 0 || j->final_sent) continue;
        uint64_t now = p->api->now_ms(p->host);
        if (now < j->not_before_ms) continue;
        if (started && budget && budget->deadline_ms && now >= budget->deadline_ms) break;
        if (j->dirty) {
            wm_job_write_progress(p, j, rev);
            continue;
        }
        if ((op->kind == WM_OPK_REPAIRING || op->kind == WM_OPK_MIGRATING) &&
            j->op.attempts >= wm_repair_max_attempts(p)) {
            wm_job_give_up(p, j, rev);
            continue;
        }
        uint64_t mleft = used_members < max_members ? max_members - used_members : 0;
        uint64_t bleft = used_bytes < max_bytes ? max_bytes - used_bytes : 0;
        if (started && (mleft == 0 || bleft == 0)) continue;
        uint64_t before = used_members;
        if (op->kind == WM_OPK_DELETING) {
            if (rev->availability != WM_AVAIL_DELETING) continue;
            wm_deletion_step(p, j, rev, mleft, bleft, !started, &used_members, &used_bytes);
        } else {
            /* A migrating DEGRADED revision waits until its members are
             * readable; a repair is what makes them so. */
            if (rev->availability != WM_AVAIL_READY &&
                !(op->kind == WM_OPK_REPAIRING && rev->availability == WM_AVAIL_DEGRADED)) {
                if (rev->availability == WM_AVAIL_DEGRADED) wm_migration_wait_degraded(p, j, rev, now);
                continue;
            }
            j->degraded_since_ms = 0;
            if (!j->planned) {
                int rc = wm_job_plan(p, j);
                if (rc < 0) {
                    p->api->log(p->host, SMP_LOG_ERROR, "operation %" PRIu64 " on %s: no plan (%s)",
                                j->op_id, rev->group_key, wm_status_name(rc));
                    j->not_before_ms = now + WM_RETRY_MAX_MS;
                    continue;
                }
            }
            if (j->next_idx < j->n_plan)
                wm_migration_batch(p, j, rev, mleft, bleft, !started, &used_members, &used_bytes);
            else
                wm_migration_check(p, j, rev, checks);
        }
        if (used_members > before) started = 1;
    }
    return active;
}

/* ------------------------------------------------------------------------ */
/* DEGRADED                                                                  */
/* ------------------------------------------------------------------------ */

int wm_past_deadline(wm_plugin *p, const smp_tick_budget *budget)
{
    return budget != NULL && budget->deadline_ms != 0 &&
           p->api->now_ms(p->host) >= budget->deadline_ms;
}

/* Replica-lost reports: a READY revision whose member has no readable
 * replica left becomes DEGRADED; one whose member is still readable is
 * handed to wm_repair_note. Past the deadline the rest wait for the next
 * round (at least one report is handled per round). */
static void wm_run_suspects(wm_plugin *p, wm_lc *lc, const smp_tick_budget *budget)
{
    size_t kept = 0;
    wm_suspect *v = lc->suspects.v;
    if (lc->suspects.n == 0) return;
    for (size_t i = 0; i < lc->suspects.n; i++) {
        wm_suspect *s = &v[i];
        if (i > 0 && wm_past_deadline(p, budget)) {
            v[kept++] = *s;
            continue;
        }
        const wm_revision *rev = wm_store_get_group(p->store, s->group);
        int keep = 0;
        if (rev != NULL && rev->availability == WM_AVAIL_READY) {
            smp_object_info o;
            wm_replicas_of(p, s->key, &o);
            if (!wm_info_readable(&o)) {
                /* The residency as the replicas left show it (ABSENT when
                   none is readable), not the one recorded before the loss. */
                wm_observation ob;
                int seen = wm_repair_observe(p, rev, &ob) == WM_OK;
                if (wm_pending_metadata(p, rev->group_key) ||
                    wm_submit_availability(p, rev, WM_AVAIL_DEGRADED, seen ? &ob : NULL) < 0)
                    keep = 1;
            } else {
                /* Still readable, but maybe not where its residency needs
                 * it: validated (and repaired) by wm_repair_tick. */
                wm_repair_note(p, rev->group_key);
            }
        }
        if (keep) {
            v[kept++] = *s;
        } else {
            free(s->group);
            free(s->key);
        }
    }
    wm_suspects_keep(&lc->suspects, kept);
}

/* DEGRADED revisions whose manifest and members are all readable again
 * become READY. One that records where it belongs (degraded_from) and has
 * no operation is handed to the validation (wm_repair_note), which makes
 * it READY and, in the same record, repairs it there when a member lacks
 * the replica that residency needs (memory lost while its node was away, a
 * replica the node's check dropped on its return) or migrates it there
 * when it holds more memory than that; one with an operation becomes READY as observed and
 * its operation goes on toward its own target. A pass over the revisions
 * starts every WM_DEGRADED_RECHECK_MS (or at once after NODE_UP) and goes
 * on from its cursor in later rounds when the checks or the deadline run
 * out, so revisions late in the identity order are rechecked too. No pass
 * while no revision is DEGRADED (the store counts them): an idle tick must
 * not cost a walk of every revision. */
static void wm_run_recheck(wm_plugin *p, wm_lc *lc, const smp_tick_budget *budget,
                           uint64_t *checks)
{
    uint64_t now = p->api->now_ms(p->host);
    wm_store_stats stats;
    wm_store_stats_get(p->store, &stats);
    if (stats.by_availability[WM_AVAIL_DEGRADED] == 0) {
        lc->recheck_running = 0; /* nothing to find: no pass over every revision */
        return;
    }
    if (!lc->recheck_running) {
        if (!lc->recheck && now - lc->last_recheck_ms < WM_DEGRADED_RECHECK_MS) return;
        lc->recheck = 0;
        lc->last_recheck_ms = now;
        lc->recheck_running = 1;
        lc->recheck_cursor = 0;
    }
    size_t n = wm_store_revision_count(p->store);
    size_t i = lc->recheck_cursor, examined = 0;
    for (; i < n && *checks > 0; i++) {
        const wm_revision *rev = wm_store_revision_at(p->store, i);
        if (rev->availability != WM_AVAIL_DEGRADED || wm_pending_metadata(p, rev->group_key)) continue;
        if (examined++ > 0 && wm_past_deadline(p, budget)) break;
        const wm_affinity *aff = wm_store_affinity(p->store, &rev->id);
        if (aff == NULL || aff->n_units == 0) continue;
        size_t total = 0;
        for (size_t u = 0; u < aff->n_units; u++) total += aff->units[u].n_members;
        *checks = *checks > total ? *checks - total : 0;
        wm_observation ob;
        int rc = wm_repair_observe(p, rev, &ob);
        if (rc == SMP_ENOMEM) return;
        if (rc != WM_OK || ob.availability != WM_AVAIL_READY) continue;
        if (rev->degraded_from != WM_RES_UNKNOWN && rev->operation_id == 0)
            wm_repair_note(p, rev->group_key); /* READY, repaired back where it was */
        else
            wm_submit_availability(p, rev, WM_AVAIL_READY, &ob);
    }
    lc->recheck_cursor = i;
    if (i >= n) lc->recheck_running = 0;
}

void wm_lifecycle_revalidate(wm_plugin *p)
{
    wm_lc *lc = wm_lc_get(p);
    if (lc == NULL) return;
    /* Another term (or the time quiesced) may have moved the operations on:
     * working copies are dropped and rebuilt from the store (tasks still in
     * flight finish into a stale job, which is then freed). */
    for (wm_job *j = lc->jobs; j != NULL; j = j->next) j->stale = 1;
    wm_auto_forget_op(p);
    lc->recheck = 1;
    wm_repair_validate_all(p);
}

/* ------------------------------------------------------------------------ */
/* Events and the tick                                                       */
/* ------------------------------------------------------------------------ */

/* A read of key found nothing (the object unknown, or no complete replica
 * on a live node). When key is a member of a READY revision (its group as
 * the host names it, or from the key itself when the host does not know the
 * object) the revision is validated against its replicas in a coming round
 * (wm_repair_note): every member is checked, residency and hot ratio are
 * recomputed, a member with nothing readable makes it DEGRADED and one
 * that lost the replica its residency needs starts a repair. Cheap: called
 * per failed read; other keys cost a parse. */
static void wm_read_miss(wm_plugin *p, const char *group, const char *key)
{
    const wm_revision *rev = NULL;
    if (group != NULL && group[0] != '\0') {
        rev = wm_store_get_group(p->store, group);
    } else if (key != NULL) {
        wm_identity_buf id;
        wm_key_kind kind;
        if (wm_key_parse(key, &id, &kind, NULL) == WM_OK && kind != WM_KEY_GROUP)
            rev = wm_store_get(p->store, &id.id);
    }
    if (rev == NULL || rev->availability != WM_AVAIL_READY) return;
    p->read_misses++;
    wm_repair_note(p, rev->group_key);
}

void wm_lifecycle_event(wm_plugin *p, const smp_event *ev)
{
    wm_lc *lc = wm_lc_get(p);
    if (lc == NULL || ev == NULL) return;
    switch (ev->type) {
    case SMP_EVENT_REPLICA_LOST:
        if (ev->group == NULL || ev->group[0] == '\0' || ev->key == NULL) return;
        wm_suspect_add(p, lc, ev->group, ev->key);
        wm_repair_manifests_due(p); /* a manifest's replica may be the one lost */
        return;
    case SMP_EVENT_READ_MISS:
        wm_read_miss(p, ev->group, ev->key);
        return;
    case SMP_EVENT_NODE_UP:
        lc->recheck = 1;
        wm_repair_manifests_due(p);
        return;
    case SMP_EVENT_ROLE_CHANGE:
        wm_lifecycle_revalidate(p);
        return;
    case SMP_EVENT_MEMORY_PRESSURE:
        wm_auto_pressure(p, ev->used, ev->capacity);
        return;
    default:
        return;
    }
}

int wm_lifecycle_tick(wm_plugin *p, const smp_tick_budget *budget, uint64_t *cursor)
{
    int r = wm_sweep_leases(p, budget, cursor);
    wm_vleases_tick(p);
    wm_lineage_drive(p);
    wm_lc *lc = wm_lc_get(p);
    if (lc != NULL) {
        uint64_t checks = WM_CHECKS_PER_ROUND;
        if (budget != NULL && budget->max_members * 4 > checks) checks = budget->max_members * 4;
        wm_run_suspects(p, lc, budget);
        wm_run_recheck(p, lc, budget, &checks);
        int active = wm_run_operations(p, lc, budget, &checks);
        if (wm_repair_tick(p, budget, &checks)) active = 1;
        if (wm_access_tick(p)) active = 1;
        if (!wm_past_deadline(p, budget) && wm_auto_tick(p)) active = 1; /* else the next round */
        wm_jobs_gc(p, lc);
        if (active || lc->suspects.n > 0 || lc->recheck_running)
            r = SMP_TICK_MORE;
    }
    if (wm_reclaim_tick(p, budget)) r = SMP_TICK_MORE;
    wm_metrics_refresh(p);
    return r;
}
