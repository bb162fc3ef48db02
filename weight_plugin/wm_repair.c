/* wm_repair.c -- keeping published revisions where their residency says,
 * after replicas are lost.
 *
 * Three duties, all on the active master's tick and all bounded per round:
 *   - manifest replicas: the manifest of every READY or DEGRADED revision
 *     gets a verified cold copy (ensure_cold) and keeps it until deletion, so
 *     the loss of memory (a reboot empties /dev/shm) loses no revision; a
 *     manifest that lost its memory replica gets it back from the cold copy
 *     (ensure_memory). The lifecycle releases no payload memory before the
 *     manifest's cold copy exists (wm_manifest_has_cold). A revision that
 *     becomes READY (a publish, the end of a repair) is handed over by its
 *     durable record (wm_repair_ready) and cared for from a queue, first,
 *     so publishing costs a lookup per revision and no walk of the store.
 *     What no record shows -- a replica lost, a node up, a start or a role
 *     change (wm_repair_manifests_due) -- sends the scan round every
 *     revision once, in laps from a cursor, WM_MANIFEST_SCAN per round (the
 *     tick asks for the next round at once while a lap runs); a lap that
 *     ends with nothing to retry lets the scan rest. An idle tick looks at
 *     no revision;
 *   - validation: a revision is checked against its actual replicas after a
 *     start or a role change (all revisions, by cursor), and after a
 *     replica-lost report of one of its members or a read that found one
 *     missing (SMP_EVENT_READ_MISS; both through wm_repair_note). Its
 *     residency and observed hot ratio are recomputed from what exists; a
 *     member that no longer has the replica the recorded residency needs
 *     (memory for a HOT unit, cold for a COLD one) but still has another
 *     readable replica starts a persisted REPAIRING operation toward the
 *     recorded residency, in the same record that corrects the residency; a
 *     member with nothing readable makes the revision DEGRADED;
 *   - the explicit REPAIR RPC (weightctl repair), which starts the same
 *     operation on a READY or DEGRADED revision under CAS.
 * REPAIRING operations are executed by weight_lifecycle.c with the
 * migration machinery (batches of affinity units, progress and cursor
 * persisted per batch, retries with backoff, resumption after a restart or
 * failover from the persisted cursor) except that they never release a
 * replica; they end SUCCEEDED with the revision READY, or FAILED with it
 * DEGRADED when a member has nothing left to restore from, or FAILED after
 * repair_max_attempts failed batches (the persisted attempt count, so a
 * restart does not reset it) with the revision's availability unchanged.
 * The tick starts no new repair of a revision whose last one gave up
 * until the revision changes (an explicit REPAIR, a migration, a loss
 * reported, a change of leader): retries are bounded, not re-armed by the
 * next validation. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weight_residency_planner.h"
#include "wm_mgmt.h"

#define WM_MANIFEST_SCAN 512     /* manifests a lap looks at per round */
#define WM_MANIFEST_TASKS 64     /* manifest replica tasks in flight at most */
#define WM_READY_QUEUE (1u << 20) /* revisions waiting for care at most (then a lap) */
#define WM_VALIDATE_QUEUE 4096   /* groups waiting for validation at most */
#define WM_RATIO_SLACK 1e-9      /* hot ratios this close are the same */

/* A manifest replica task in flight, or one that failed and waits for its
 * retry. Allocated one by one: the task callback holds the pointer. */
typedef struct wm_mtask {
    struct wm_mtask *next;
    char *key;              /* the manifest key (owned) */
    int in_flight;
    int cold;               /* the step: 1 ensure_cold, 0 ensure_memory */
    uint32_t attempts;
    uint64_t not_before_ms; /* host clock */
    wm_plugin *p;
} wm_mtask;

struct wm_repair {
    wm_mtask *tasks;
    size_t n_in_flight;
    size_t manifest_cursor;  /* revision index the next manifest scan starts at */
    size_t manifest_lap;     /* revisions the scan still looks at before it rests (0: resting) */
    char **ready;            /* group keys of revisions that became READY, to care for (owned) */
    size_t ready_head, n_ready, ready_cap; /* ready[ready_head .. n_ready) wait */
    char **queue;            /* group keys to validate (owned) */
    size_t n_queue;
    int validate_all;        /* after a start or a role change */
    size_t all_cursor;       /* revision index of the validate-all walk */
    char **gave_up;          /* groups whose last repair gave up (owned) */
    size_t n_gave_up;
};

static wm_repair *wm_repair_get(wm_plugin *p)
{
    if (p->repair == NULL && (p->repair = calloc(1, sizeof(*p->repair))) != NULL) {
        p->repair->validate_all = 1; /* the first tick after a start */
        p->repair->manifest_lap = SIZE_MAX;
    }
    return p->repair;
}

void wm_repair_release(wm_plugin *p)
{
    wm_repair *r = p->repair;
    if (r == NULL) return;
    while (r->tasks != NULL) {
        wm_mtask *t = r->tasks;
        r->tasks = t->next;
        free(t->key);
        free(t);
    }
    for (size_t i = 0; i < r->n_queue; i++) free(r->queue[i]);
    free(r->queue);
    for (size_t i = r->ready_head; i < r->n_ready; i++) free(r->ready[i]);
    free(r->ready);
    for (size_t i = 0; i < r->n_gave_up; i++) free(r->gave_up[i]);
    free(r->gave_up);
    free(r);
    p->repair = NULL;
}

uint32_t wm_repair_max_attempts(wm_plugin *p)
{
    uint64_t v = wm_plugin_u64(p, "repair_max_attempts", WM_REPAIR_MAX_ATTEMPTS_DEFAULT);
    return v >= 1 && v <= WM_REPAIR_MAX_ATTEMPTS_LIMIT ? (uint32_t)v : WM_REPAIR_MAX_ATTEMPTS_DEFAULT;
}

int wm_manifest_has_cold(wm_plugin *p, const wm_revision *rev)
{
    smp_object_info o;
    wm_replicas_of(p, rev->manifest_key, &o);
    return o.complete && o.cold_replicas_readable > 0;
}

/* ------------------------------------------------------------------------ */
/* Manifest replicas                                                         */
/* ------------------------------------------------------------------------ */

static wm_mtask *wm_mtask_find(wm_repair *r, const char *key)
{
    for (wm_mtask *t = r->tasks; t != NULL; t = t->next)
        if (strcmp(t->key, key) == 0) return t;
    return NULL;
}

static void wm_mtask_forget(wm_repair *r, wm_mtask *t)
{
    for (wm_mtask **pp = &r->tasks; *pp != NULL; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    free(t->key);
    free(t);
}

/* A manifest task answered: done (forgotten), or failed (retried later with
 * backoff; the first failure of a run of them is logged). */
static void wm_mtask_done(void *arg, int status)
{
    wm_mtask *t = arg;
    wm_plugin *p = t->p;
    wm_repair *r = p->repair;
    t->in_flight = 0;
    if (r != NULL && r->n_in_flight > 0) r->n_in_flight--;
    if (status >= 0) {
        if (t->cold) p->manifest_cold_copies++;
        else p->manifest_memory_restores++;
        if (r != NULL) wm_mtask_forget(r, t);
        return;
    }
    t->attempts++;
    p->manifest_task_failures++;
    if (r != NULL) r->manifest_lap = SIZE_MAX; /* a lap finds it again, due or not */
    t->not_before_ms = p->api->now_ms(p->host) + wm_backoff(t->attempts);
    if (t->attempts == 1)
        p->api->log(p->host, SMP_LOG_WARN, "%s of manifest %s failed: %s (retried)",
                    t->cold ? "cold copy" : "memory replica", t->key, smp_strerror(status));
}

/* Start the task a manifest needs, if any: a cold copy from memory, or a
 * memory replica from the cold copy. */
static void wm_manifest_care(wm_plugin *p, wm_repair *r, const wm_revision *rev, uint64_t now)
{
    wm_mtask *t = wm_mtask_find(r, rev->manifest_key);
    if (t != NULL && (t->in_flight || now < t->not_before_ms)) return;
    smp_object_info o;
    wm_replicas_of(p, rev->manifest_key, &o);
    int cold = 0;
    if (!o.complete) return;
    if (o.cold_replicas_readable == 0 && o.memory_replicas_readable > 0) cold = 1;
    else if (o.memory_replicas_readable == 0 && o.cold_replicas_readable > 0) cold = 0;
    else {
        if (t != NULL) wm_mtask_forget(r, t); /* both exist (again) */
        return;
    }
    if (t == NULL) {
        if ((t = calloc(1, sizeof(*t))) == NULL) return;
        if ((t->key = strdup(rev->manifest_key)) == NULL) {
            free(t);
            return;
        }
        t->p = p;
        t->next = r->tasks;
        r->tasks = t;
    }
    t->cold = cold;
    t->in_flight = 1;
    r->n_in_flight++;
    int rc = cold ? p->api->ensure_cold(p->host, t->key, wm_mtask_done, t)
                  : p->api->ensure_memory(p->host, t->key, wm_mtask_done, t);
    if (rc < 0) wm_mtask_done(t, rc); /* a refusal is a failure (never called back) */
}

/* Forget the tasks waiting for a retry whose revision is no longer READY or
 * DEGRADED (deleted, or going): nothing will visit them again. */
static void wm_mtasks_prune(wm_plugin *p, wm_repair *r)
{
    for (wm_mtask *t = r->tasks, *next; t != NULL; t = next) {
        next = t->next;
        wm_identity_buf id;
        wm_key_kind kind;
        const wm_revision *rev =
            wm_key_parse(t->key, &id, &kind, NULL) == WM_OK ? wm_store_get(p->store, &id.id) : NULL;
        if (!t->in_flight && (rev == NULL || (rev->availability != WM_AVAIL_READY &&
                                              rev->availability != WM_AVAIL_DEGRADED)))
            wm_mtask_forget(r, t);
    }
}

void wm_repair_manifests_due(wm_plugin *p)
{
    wm_repair *r = wm_repair_get(p);
    if (r != NULL) r->manifest_lap = SIZE_MAX;
}

/* 1 when a manifest task failed and waits for its retry. */
static int wm_mtasks_waiting(const wm_repair *r)
{
    for (const wm_mtask *t = r->tasks; t != NULL; t = t->next)
        if (!t->in_flight) return 1;
    return 0;
}

void wm_repair_ready(wm_plugin *p, const char *group_key)
{
    wm_repair *r = wm_repair_get(p);
    if (r == NULL || group_key == NULL) return;
    if (r->ready_head > 0 && r->ready_head == r->n_ready) r->ready_head = r->n_ready = 0;
    if (r->n_ready == r->ready_cap && r->ready_head > 0) { /* reuse the consumed front */
        memmove(r->ready, r->ready + r->ready_head, (r->n_ready - r->ready_head) * sizeof(*r->ready));
        r->n_ready -= r->ready_head;
        r->ready_head = 0;
    }
    if (r->n_ready == r->ready_cap) {
        size_t cap = r->ready_cap ? r->ready_cap * 2 : 64;
        char **grown = cap <= WM_READY_QUEUE ? realloc(r->ready, cap * sizeof(*grown)) : NULL;
        if (grown == NULL) {
            r->manifest_lap = SIZE_MAX; /* too many (or no memory): a lap finds it */
            return;
        }
        r->ready = grown;
        r->ready_cap = cap;
    }
    char *key = strdup(group_key);
    if (key == NULL) {
        r->manifest_lap = SIZE_MAX;
        return;
    }
    r->ready[r->n_ready++] = key;
}

/* Care for the revisions handed over by wm_repair_ready, oldest first,
 * while tasks may start: a lookup each. */
static void wm_ready_round(wm_plugin *p, wm_repair *r, uint64_t now)
{
    while (r->ready_head < r->n_ready && r->n_in_flight < WM_MANIFEST_TASKS) {
        char *key = r->ready[r->ready_head++];
        const wm_revision *rev = wm_store_get_group(p->store, key);
        if (rev != NULL && (rev->availability == WM_AVAIL_READY || rev->availability == WM_AVAIL_DEGRADED))
            wm_manifest_care(p, r, rev, now);
        free(key);
    }
}

/* One round of manifest care: the revisions that became READY, then the
 * lap from the cursor, if one runs: READY and DEGRADED revisions only (an
 * IMPORTING manifest is not sealed, a DELETING one is going). A lap ends
 * after every revision was looked at once, and another starts only when a
 * task waits for its retry (else the scan rests: nothing it could find has
 * changed). */
static void wm_manifests_round(wm_plugin *p, wm_repair *r)
{
    if (r->ready_head < r->n_ready) wm_ready_round(p, r, p->api->now_ms(p->host));
    if (r->manifest_lap == 0) return; /* resting: an idle tick looks at no revision */
    wm_mtasks_prune(p, r);
    size_t n = wm_store_revision_count(p->store);
    if (n == 0) {
        r->manifest_lap = 0;
        return;
    }
    if (r->manifest_lap > n) r->manifest_lap = n;
    uint64_t now = p->api->now_ms(p->host);
    size_t at = r->manifest_cursor < n ? r->manifest_cursor : 0;
    for (size_t k = 0; k < WM_MANIFEST_SCAN && r->manifest_lap > 0; k++, at = (at + 1) % n) {
        if (r->n_in_flight >= WM_MANIFEST_TASKS) break;
        const wm_revision *rev = wm_store_revision_at(p->store, at);
        r->manifest_lap--;
        if (rev->availability != WM_AVAIL_READY && rev->availability != WM_AVAIL_DEGRADED) continue;
        wm_manifest_care(p, r, rev, now);
    }
    r->manifest_cursor = at;
    if (r->manifest_lap == 0 && wm_mtasks_waiting(r)) r->manifest_lap = n;
}

/* ------------------------------------------------------------------------ */
/* Validation                                                                */
/* ------------------------------------------------------------------------ */

void wm_repair_note(wm_plugin *p, const char *group_key)
{
    wm_repair *r = wm_repair_get(p);
    if (r == NULL || group_key == NULL) return;
    for (size_t i = 0; i < r->n_queue; i++)
        if (strcmp(r->queue[i], group_key) == 0) return;
    if (r->n_queue >= WM_VALIDATE_QUEUE) {
        r->validate_all = 1; /* too many: walk them all instead */
        return;
    }
    char **grown = realloc(r->queue, (r->n_queue + 1) * sizeof(*grown));
    if (grown == NULL) return;
    r->queue = grown;
    if ((r->queue[r->n_queue] = strdup(group_key)) != NULL) r->n_queue++;
}

#define WM_GAVE_UP_MAX 1024 /* groups remembered; the oldest is dropped */

void wm_repair_gave_up(wm_plugin *p, const char *group_key)
{
    wm_repair *r = wm_repair_get(p);
    if (r == NULL || group_key == NULL) return;
    for (size_t i = 0; i < r->n_gave_up; i++)
        if (strcmp(r->gave_up[i], group_key) == 0) return;
    if (r->n_gave_up == WM_GAVE_UP_MAX) {
        free(r->gave_up[0]);
        memmove(r->gave_up, r->gave_up + 1, (r->n_gave_up - 1) * sizeof(*r->gave_up));
        r->n_gave_up--;
    }
    char **grown = realloc(r->gave_up, (r->n_gave_up + 1) * sizeof(*grown));
    if (grown == NULL) return;
    r->gave_up = grown;
    if ((r->gave_up[r->n_gave_up] = strdup(group_key)) != NULL) r->n_gave_up++;
    wm_repair_note(p, group_key); /* record what the replicas are */
}

/* 1 when the last repair of group_key gave up (the mark is taken: the
 * next loss or validation may repair again). */
static int wm_gave_up_take(wm_repair *r, const char *group_key)
{
    for (size_t i = 0; i < r->n_gave_up; i++)
        if (strcmp(r->gave_up[i], group_key) == 0) {
            free(r->gave_up[i]);
            r->gave_up[i] = r->gave_up[--r->n_gave_up];
            return 1;
        }
    return 0;
}

void wm_repair_validate_all(wm_plugin *p)
{
    wm_repair *r = wm_repair_get(p);
    if (r == NULL) return;
    r->validate_all = 1;
    r->all_cursor = 0;
    r->manifest_lap = SIZE_MAX;
}

/* The residency a repair of rev restores, and its ratio: where a DEGRADED
 * revision belongs when its record says (degraded_from), else
 * what the record says it is (WM_RES_UNKNOWN when that is no payload
 * residency: a DEGRADED record from before degraded_from, ABSENT). */
static wm_residency wm_repair_target(const wm_revision *rev, double *ratio)
{
    wm_residency res = rev->residency;
    double x = rev->observed_hot_ratio;
    if (rev->availability == WM_AVAIL_DEGRADED && rev->degraded_from != WM_RES_UNKNOWN) {
        res = rev->degraded_from;
        x = rev->degraded_from_hot_ratio;
    }
    *ratio = 0.0;
    if (res != WM_RES_HOT && res != WM_RES_COLD && res != WM_RES_MIXED) return WM_RES_UNKNOWN;
    if (res == WM_RES_MIXED) *ratio = isfinite(x) && x > 0.0 && x < 1.0 ? x : rev->policy.mixed_hot_ratio;
    return res;
}

/* The facts of one revision: every member's replicas, the manifest's
 * readability, the observation, and how many members lack the replica the
 * target residency needs -- for HOT memory, for COLD a cold replica; for
 * MIXED, whose HOT units are whichever the migration chose, the loss shows
 * as an observed ratio below the target's (missing is then 1). */
typedef struct wm_facts {
    wm_observation ob;
    int manifest_readable;
    uint64_t missing;
    uint64_t members;
} wm_facts;

static int wm_repair_facts(wm_plugin *p, const wm_revision *rev, wm_residency target, double ratio,
                           wm_facts *out)
{
    const wm_affinity *aff = wm_store_affinity(p->store, &rev->id);
    if (aff == NULL || aff->n_units == 0) return WM_EINVALID_ARGUMENT;
    size_t total = 0;
    for (size_t u = 0; u < aff->n_units; u++) total += aff->units[u].n_members;
    wm_member_replicas *m = calloc(total ? total : 1, sizeof(*m));
    uint64_t *ub = calloc(aff->n_units, sizeof(*ub));
    unsigned char *hot = calloc(aff->n_units, 1);
    int rc = SMP_ENOMEM;
    if (m == NULL || ub == NULL || hot == NULL) goto free_tmp;
    uint64_t bytes = 0;
    for (size_t u = 0; u < aff->n_units; u++) bytes += (ub[u] = aff->units[u].logical_bytes);
    if (target != WM_RES_UNKNOWN &&
        (rc = wm_plan_unit_goals(ub, aff->n_units, bytes, target, ratio, hot)) < 0)
        goto free_tmp;
    memset(out, 0, sizeof(*out));
    smp_object_info o;
    size_t k = 0;
    for (size_t u = 0; u < aff->n_units; u++)
        for (size_t x = 0; x < aff->units[u].n_members; x++, k++) {
            wm_replicas_of(p, aff->units[u].members[x], &o);
            m[k].memory = o.complete && o.memory_replicas_readable > 0;
            m[k].cold = o.complete && o.cold_replicas_readable > 0;
            int has = hot[u] ? m[k].memory : m[k].cold;
            if ((target == WM_RES_HOT || target == WM_RES_COLD) && !has) out->missing++;
        }
    out->members = total;
    wm_replicas_of(p, rev->manifest_key, &o);
    out->manifest_readable = o.complete && o.memory_replicas_readable + o.cold_replicas_readable > 0;
    rc = wm_residency_observe(aff, m, total, out->manifest_readable, &out->ob);
    if (rc == WM_OK && target == WM_RES_MIXED && out->ob.observed_hot_ratio < ratio - WM_RATIO_SLACK)
        out->missing = 1;
free_tmp:
    free(m);
    free(ub);
    free(hot);
    return rc;
}

int wm_repair_observe(wm_plugin *p, const wm_revision *rev, wm_observation *out)
{
    wm_facts f;
    int rc = wm_repair_facts(p, rev, WM_RES_UNKNOWN, 0.0, &f);
    if (rc == WM_OK) *out = f.ob;
    return rc;
}

static void wm_repair_logged(wm_plugin *p, void *arg, int status)
{
    (void)arg;
    if (status != WM_OK) p->repairs_failed++;
}

/* Fill op as a new REPAIRING operation of rev toward target, created now. */
static void wm_op_repairing(wm_plugin *p, wm_operation *op, const wm_revision *rev,
                            wm_residency target, double ratio, uint64_t now)
{
    wm_op_migrating(p, op, rev, target, ratio, now);
    op->kind = WM_OPK_REPAIRING;
}

/* Check rev against its replicas and act (see the file comment). Returns 1
 * when rev is settled for now, 0 when it has to be looked at again (a
 * mutation of it is in flight, or the record could not be appended). */
static int wm_validate(wm_plugin *p, const wm_revision *rev, uint64_t *checks)
{
    if (rev->availability != WM_AVAIL_READY && rev->availability != WM_AVAIL_DEGRADED) return 1;
    if (rev->operation_id != 0) return 1; /* the operation's own checks see the replicas */
    if (wm_pending_metadata(p, rev->group_key)) return 0;
    double ratio;
    wm_residency target = wm_repair_target(rev, &ratio);
    wm_facts f;
    if (wm_repair_facts(p, rev, target, ratio, &f) < 0) return 1;
    *checks = *checks > f.members ? *checks - f.members : 0;
    if (f.ob.availability != WM_AVAIL_READY) {
        /* Nothing readable for some member: DEGRADED (the recheck brings
         * it back when a replica returns). */
        if (rev->availability == WM_AVAIL_DEGRADED) return 1;
        return wm_submit_availability(p, rev, WM_AVAIL_DEGRADED, &f.ob) == WM_OK;
    }
    wm_revision next = *rev;
    wm_revision_set_availability(&next, rev, NULL, WM_AVAIL_READY);
    next.residency = f.ob.residency;
    next.observed_hot_ratio = f.ob.observed_hot_ratio;
    next.metadata_generation = rev->metadata_generation + 1;
    next.updated_ms = wm_now(p, rev);
    /* After a repair that gave up: the residency is recorded as it is and
     * no new repair starts by itself (an explicit REPAIR still does) --
     * unless the revision comes back from DEGRADED: members readable
     * again are a change, and it goes back where it belongs. */
    int gave_up = p->repair != NULL && wm_gave_up_take(p->repair, rev->group_key) &&
                  rev->availability != WM_AVAIL_DEGRADED;
    /* Back from DEGRADED with more in memory than where it belongs (a
     * policy update or a migration toward less memory came while it was
     * DEGRADED): a migration takes it there, releasing what a repair
     * would keep. */
    double goal = wm_residency_hot_ratio(target, ratio);
    int excess = rev->availability == WM_AVAIL_DEGRADED && f.ob.observed_hot_ratio > goal + WM_RATIO_SLACK;
    if ((f.missing > 0 || excess) && target != WM_RES_UNKNOWN && !gave_up) {
        wm_operation op;
        if (excess) wm_op_migrating(p, &op, rev, target, ratio, next.updated_ms);
        else wm_op_repairing(p, &op, rev, target, ratio, next.updated_ms);
        next.operation_id = op.id;
        int rc = wm_submit_upsert(p, &next, &op, 1, excess ? NULL : wm_repair_logged, NULL);
        if (rc != WM_OK) return 0;
        if (excess) {
            p->api->log(p->host, SMP_LOG_INFO,
                        "%s is READY again and %s (ratio %.3f); it belongs %s (ratio %.3f): migrating "
                        "(operation %" PRIu64 ")",
                        rev->group_key, wm_residency_name((int)f.ob.residency), f.ob.observed_hot_ratio,
                        wm_residency_name((int)target), goal, op.id);
            return 1;
        }
        p->repairs_started++;
        if (target == WM_RES_MIXED)
            p->api->log(p->host, SMP_LOG_INFO,
                        "%s: its hot ratio %.3f is below MIXED's %.3f; repairing (operation %" PRIu64
                        ", observed %s)",
                        rev->group_key, f.ob.observed_hot_ratio, ratio, op.id,
                        wm_residency_name((int)f.ob.residency));
        else
            p->api->log(p->host, SMP_LOG_INFO,
                        "%s: %" PRIu64 " member(s) lost the replica %s needs; repairing "
                        "(operation %" PRIu64 ", observed %s)",
                        rev->group_key, f.missing, wm_residency_name((int)target), op.id,
                        wm_residency_name((int)f.ob.residency));
        return 1;
    }
    if (rev->availability == WM_AVAIL_READY && next.residency == rev->residency &&
        next.observed_hot_ratio == rev->observed_hot_ratio)
        return 1; /* as recorded */
    if (wm_submit_upsert(p, &next, NULL, 0, NULL, NULL) != WM_OK) return 0;
    p->api->log(p->host, SMP_LOG_INFO, "%s is READY and %s (ratio %.3f) as its replicas are",
                rev->group_key, wm_residency_name((int)next.residency), next.observed_hot_ratio);
    return 1;
}

/* The queued groups, then the validate-all walk, within *checks and, after
 * the first revision, the round's deadline (the rest wait for the next
 * round: the walk keeps its cursor). A validation may append a record, so
 * without the deadline the walk after a start could hold the loop for
 * seconds at 100,000 revisions. */
static void wm_validate_round(wm_plugin *p, wm_repair *r, const smp_tick_budget *budget,
                              uint64_t *checks)
{
    size_t kept = 0, looked = 0;
    for (size_t i = 0; i < r->n_queue; i++) {
        const wm_revision *rev = wm_store_get_group(p->store, r->queue[i]);
        int keep = 0;
        if (rev != NULL) {
            if (*checks == 0 || (looked > 0 && wm_past_deadline(p, budget))) {
                keep = 1;
            } else {
                looked++;
                keep = !wm_validate(p, rev, checks);
            }
        }
        if (keep) r->queue[kept++] = r->queue[i];
        else free(r->queue[i]);
    }
    r->n_queue = kept;
    if (!r->validate_all) return;
    size_t n = wm_store_revision_count(p->store);
    while (r->all_cursor < n && *checks > 0) {
        if (looked++ > 0 && wm_past_deadline(p, budget)) break;
        const wm_revision *rev = wm_store_revision_at(p->store, r->all_cursor);
        if (!wm_validate(p, rev, checks)) {
            wm_repair_note(p, rev->group_key); /* looked at again from the queue */
        }
        r->all_cursor++;
    }
    if (r->all_cursor >= n) {
        r->validate_all = 0;
        r->all_cursor = 0;
    }
}

int wm_repair_tick(wm_plugin *p, const smp_tick_budget *budget, uint64_t *checks)
{
    wm_repair *r = wm_repair_get(p);
    if (r == NULL) return 0;
    wm_manifests_round(p, r);
    wm_validate_round(p, r, budget, checks);
    return r->n_queue > 0 || r->validate_all || r->n_in_flight > 0 || r->manifest_lap > 0 ||
           r->ready_head < r->n_ready;
}

/* ------------------------------------------------------------------------ */
/* REPAIR (explicit)                                                         */
/* ------------------------------------------------------------------------ */

/* What an explicit repair of rev restores: when rev's newest operation is
 * a REPAIRING one that FAILED (gave up, or found nothing to restore from),
 * that repair's target again -- the tick recorded the residency the
 * replicas had when it began, so the record alone would ask for less --
 * else the recorded residency (wm_repair_target). O(operations), which
 * the retention keeps small. */
static wm_residency wm_explicit_target(wm_plugin *p, const wm_revision *rev, double *ratio)
{
    for (size_t i = wm_store_operation_count(p->store); i-- > 0;) {
        const wm_operation *op = wm_store_operation_at(p->store, i);
        if (wm_identity_cmp(&op->id_of, &rev->id) != 0) continue;
        if (op->kind == WM_OPK_REPAIRING && op->state == WM_OPS_FAILED &&
            (op->target == WM_RES_HOT || op->target == WM_RES_COLD || op->target == WM_RES_MIXED)) {
            *ratio = op->target == WM_RES_MIXED ? op->target_hot_ratio : 0.0;
            return op->target;
        }
        break; /* the newest operation of rev is another one */
    }
    return wm_repair_target(rev, ratio);
}

/* Start a REPAIRING operation on a READY or DEGRADED revision now, toward
 * its recorded residency (or the target of its last repair when that one
 * FAILED: wm_explicit_target), whatever its members look like (a repair
 * with nothing to restore ends at its first check) -- except a DEGRADED
 * revision with a member that has no readable replica, which has nothing
 * to repair from (NOT_READY). CAS-fenced and idempotent by
 * request id like MIGRATE; BUSY while an operation is active; NOT_READY for
 * another availability. Answered with the metadata once durable. */
int wm_rpc_repair(void *plugin, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    wm_plugin *p = plugin;
    char msg[512];
    wm_identity_buf idb;
    WM_DECODE(req, Wmrpc__IdentityRequest, wmrpc__identity_request__unpack, p, call, body, len);
    const wm_revision *rev = wm_lookup(p, call, req->identity, &idb);
    if (rev == NULL) goto free_req;
    uint64_t digest = wm_request_digest(WMRPC__WEIGHT_METHOD__WEIGHT_REPAIR, NULL, 0);
    if (wm_request_replayed(p, call, rev, req->request_id, digest,
                            req->expected_metadata_generation) ||
        !wm_check_cas(p, call, rev, req->expected_metadata_generation))
        goto free_req;
    if (rev->availability != WM_AVAIL_READY && rev->availability != WM_AVAIL_DEGRADED) {
        wm_reply_error(p, call, WM_ENOT_READY,
                       "revision %s is %s; only a READY or DEGRADED revision is repaired",
                       rev->group_key, wm_availability_name((int)rev->availability));
        goto free_req;
    }
    char busy[96];
    if (wm_busy_reason(p, rev, busy, sizeof(busy))) {
        wm_reply_error(p, call, WM_EBUSY, "revision %s already has %s", rev->group_key, busy);
        goto free_req;
    }
    double ratio;
    wm_residency target = wm_explicit_target(p, rev, &ratio);
    if (target == WM_RES_UNKNOWN) {
        wm_reply_error(p, call, WM_ECONFLICT,
                       "revision %s records residency %s: there is no residency to restore",
                       rev->group_key, wm_residency_name((int)rev->residency));
        goto free_req;
    }
    wm_facts f;
    if (rev->availability == WM_AVAIL_DEGRADED && wm_repair_facts(p, rev, target, ratio, &f) == WM_OK &&
        f.ob.availability != WM_AVAIL_READY) {
        /* A repair copies from a readable replica; there is none (the
         * members' node is down, or lost them). It would only fail its
         * attempts, holding the revision BUSY meanwhile. */
        wm_reply_error(p, call, WM_ENOT_READY,
                       "revision %s is DEGRADED: %" PRIu64 " member(s)%s have no readable replica to "
                       "repair from (their node is down, or lost them); it is repaired by itself "
                       "once they are readable again, or it can be removed",
                       rev->group_key, f.ob.unreadable_members,
                       f.manifest_readable ? "" : " and the manifest");
        goto free_req;
    }
    wm_txn *t = wm_txn_next(p, call, rev);
    if (t == NULL) goto free_req;
    wm_op_repairing(p, &t->ops[0], &t->up.revision, target, ratio, t->up.revision.updated_ms);
    t->up.revision.operation_id = t->ops[0].id;
    t->up.n_operations = 1;
    wm_txn_request(t, req->request_id, digest, req->expected_metadata_generation);
    wm_check_submit(p, call, rev, t, "repair", "repair", msg, sizeof(msg));
free_req:
    wmrpc__identity_request__free_unpacked(req, NULL);
    return SMP_OK;
}
