/* obj_store_remove.c -- the decisions that take objects away: the guard
 * (plugin or host managed-group rule), removal of one key, a prefix or a
 * managed group, and eviction planning. Part of obj_store (see
 * obj_store.c). */
#include "obj_store_internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Guard                                                                     */
/* ------------------------------------------------------------------------ */

/* Decide one guarded action on key, a member of group (or of none). When
 * group is managed by an owner that is not active, the host refuses. When
 * the owner is active, only its guard is asked; an owner without a guard
 * gets the host's rule: host_forbids refuses. An object in no managed group
 * is asked of every active guard. Returns SMP_OK or SMP_EVETO, counting
 * refusals (host_refusals or guard_vetoes by reason). */
int obj_guard_decide(obj_store *st,
                     smp_guard_reason reason,
                     const char *key,
                     const char *group,
                     smp_data_type data_type,
                     smp_replica_kind kind,
                     int host_forbids)
{
    const char *owner = obj_group_owner(st, group);
    if (owner && st->guard.active && !st->guard.active(st->guard.ctx, owner)) {
        st->stats.host_refusals[reason]++;
        return SMP_EVETO;
    }
    smp_guard_request req;
    memset(&req, 0, sizeof(req));
    req.struct_size = sizeof(req);
    req.reason = reason;
    req.key = key;
    req.group = obj_str(group);
    req.group_managed = owner != NULL;
    req.data_type = data_type;
    req.replica_kind = kind;
    int asked = 0;
    int r = st->guard.check ? st->guard.check(st->guard.ctx, owner, &req, &asked) : SMP_GUARD_ALLOW;
    if (asked == 0) {
        if (!owner || !host_forbids) return SMP_OK;
        st->stats.host_refusals[reason]++;
        return SMP_EVETO;
    }
    if (r == SMP_GUARD_ALLOW) return SMP_OK;
    st->stats.guard_vetoes[reason]++;
    return SMP_EVETO;
}

/* ------------------------------------------------------------------------ */
/* Removal and eviction                                                      */
/* ------------------------------------------------------------------------ */

/* Single-key removal; guarded unless the plugin itself asks. */
static int obj_prepare_remove_one(obj_store *st,
                                  const char *key,
                                  uint64_t now,
                                  int guarded,
                                  obj_record *out)
{
    if (obj_validate_key(key) < 0 || !out) return SMP_EINVAL;
    obj_object *o = obj_sl_get(&st->objects, key);
    if (!o) return SMP_ENOTFOUND;
    if (obj_lease_active(o, now)) return SMP_EBUSY;
    int rc = guarded ? obj_guard_decide(st, SMP_GUARD_REMOVE_KEY, o->key, o->group,
                                        o->data_type, SMP_REPLICA_MEMORY,
                                        obj_group_managed_flag(st, o->group))
                     : SMP_OK;
    if (rc < 0) return rc;
    const char *keys[1] = {o->key};
    return obj_encode_remove(keys, &o->put_id, 1, out);
}

int obj_prepare_remove(obj_store *st, const char *key, uint64_t now, obj_record *out)
{
    OBJ_CHECK_CALLER(st);
    return obj_prepare_remove_one(st, key, now, 1, out);
}

int obj_prepare_remove_unguarded(obj_store *st, const char *key, uint64_t now, obj_record *out)
{
    OBJ_CHECK_CALLER(st);
    return obj_prepare_remove_one(st, key, now, 0, out);
}

/* Decide a managed group for a prefix removal: removed whole (its own REMOVE
 * record) or skipped whole. Counts in *rep. */
static int obj_remove_managed_group(obj_store *st,
                                    obj_group *g,
                                    const char *prefix,
                                    smp_guard_reason reason,
                                    uint64_t now,
                                    obj_record_list *out,
                                    obj_remove_report *rep)
{
    size_t plen = strlen(prefix);
    uint64_t count = g->members.count;
    int leased = 0;
    for (obj_sl_node *m = obj_sl_after(&g->members, NULL, 0); m; m = m->next[0]) {
        if (!obj_has_prefix(m->key, prefix, plen)) {
            rep->skipped_partial += count;
            st->stats.host_refusals[reason] += count;
            return SMP_OK;
        }
        if (obj_lease_active(m->val, now)) leased = 1;
    }
    if (leased) {
        rep->skipped_leased += count;
        return SMP_OK;
    }
    for (obj_sl_node *m = obj_sl_after(&g->members, NULL, 0); m; m = m->next[0]) {
        const obj_object *o = m->val;
        if (obj_guard_decide(st, reason, o->key, o->group, o->data_type, SMP_REPLICA_MEMORY,
                             0) < 0) {
            rep->skipped_vetoed += count;
            return SMP_OK;
        }
    }
    const char **keys = malloc((count ? count : 1) * sizeof(*keys));
    uint64_t *ids = malloc((count ? count : 1) * sizeof(*ids));
    if (!keys || !ids) {
        free(keys);
        free(ids);
        return SMP_ENOMEM;
    }
    size_t i = 0;
    for (obj_sl_node *m = obj_sl_after(&g->members, NULL, 0); m; m = m->next[0]) {
        keys[i] = m->key;
        ids[i++] = ((const obj_object *)m->val)->put_id;
    }
    obj_record r = {0};
    int rc = obj_encode_remove(keys, ids, i, &r);
    free(keys);
    free(ids);
    if (rc < 0) return rc;
    if ((rc = obj_list_push(out, &r)) < 0) {
        obj_record_free(&r);
        return rc;
    }
    rep->removed += count;
    return SMP_OK;
}

int obj_prepare_remove_prefix(obj_store *st,
                              const char *prefix,
                              uint64_t now,
                              obj_record_list *out,
                              obj_remove_report *rep)
{
    OBJ_CHECK_CALLER(st);
    int rc = SMP_OK;
    obj_remove_report local;
    if (!out) return SMP_EINVAL;
    prefix = obj_str(prefix);
    if (!obj_name_ok(prefix, OBJ_KEY_MAX, 1)) return SMP_EINVAL;
    if (!rep) rep = &local;
    memset(rep, 0, sizeof(*rep));
    smp_guard_reason reason = prefix[0] ? SMP_GUARD_REMOVE_PATTERN : SMP_GUARD_REMOVE_ALL;
    size_t plen = strlen(prefix), n_entry = out->n;
    obj_sl seen; /* managed groups already decided */
    if (obj_sl_init(&seen) < 0) return SMP_ENOMEM;
    obj_keybatch *batch = calloc(1, sizeof(*batch));
    if (!batch) { rc = SMP_ENOMEM; goto free_seen; }

    for (obj_sl_node *x = obj_sl_after(&st->objects, prefix, 1);
         x && obj_has_prefix(x->key, prefix, plen); x = x->next[0]) {
        obj_object *o = x->val;
        obj_group *g = obj_group_find(st, o->group);
        if (g && g->owner) {
            if (obj_sl_get(&seen, g->name)) continue;
            if ((rc = obj_sl_put(&seen, g->name, g)) < 0) goto undo;
            if ((rc = obj_remove_managed_group(st, g, prefix, reason, now, out, rep)) < 0)
                goto undo;
            continue;
        }
        if (obj_lease_active(o, now)) {
            rep->skipped_leased++;
            continue;
        }
        if (obj_guard_decide(st, reason, o->key, o->group, o->data_type, SMP_REPLICA_MEMORY,
                             0) < 0) {
            rep->skipped_vetoed++;
            continue;
        }
        if ((rc = obj_keybatch_add(batch, o, out)) < 0) goto undo;
        rep->removed++;
    }
    if ((rc = obj_keybatch_flush(batch, out)) < 0) goto undo;
    goto free_batch;

undo:
    obj_record_list_truncate(out, n_entry);
free_batch:
    free(batch);
free_seen:
    obj_sl_fini(&seen);
    return rc;
}

void obj_memory_usage(const obj_store *st, uint64_t *used, uint64_t *capacity)
{
    OBJ_CHECK_CALLER(st);
    uint64_t u = 0, c = 0;
    for (obj_sl_node *x = obj_sl_after(&st->segments, NULL, 0); x; x = x->next[0]) {
        const obj_segment *s = x->val;
        u += s->used - s->held;
        c += s->capacity;
    }
    if (used) *used = u;
    if (capacity) *capacity = c;
}

int obj_plan_eviction(obj_store *st,
                      double high_watermark,
                      double low_watermark,
                      uint64_t now,
                      obj_record_list *out,
                      uint64_t *planned_free)
{
    OBJ_CHECK_CALLER(st);
    int rc = SMP_OK;
    if (!out || !(low_watermark >= 0.0) || !(low_watermark <= high_watermark) ||
        !(high_watermark <= 1.0))
        return SMP_EINVAL;
    if (planned_free) *planned_free = 0;
    uint64_t used, cap;
    obj_memory_usage(st, &used, &cap);
    if (cap == 0 || (double)used <= high_watermark * (double)cap) return SMP_OK;
    uint64_t target = (uint64_t)(low_watermark * (double)cap);
    uint64_t freed = 0;
    size_t n_entry = out->n;
    (void)obj_lru_resort(st); /* after a load or replay; unsorted on ENOMEM */
    obj_keybatch *batch = calloc(1, sizeof(*batch));
    if (!batch) return SMP_ENOMEM;
    obj_replica *keep = NULL;
    size_t keep_cap = 0;

    for (obj_object *o = st->lru_head; o && used - freed > target; o = o->lru_next) {
        if (o->pinned || obj_lease_active(o, now) || obj_hold_find(st, o->key)) continue;
        uint64_t mem = 0;
        int mem_complete = 0, cold_complete = 0;
        for (size_t i = 0; i < o->nreps; i++) {
            const obj_rep *r = &o->reps[i];
            if (r->kind == SMP_REPLICA_MEMORY) {
                mem += obj_ext_len(r->length);
                mem_complete |= r->status == OBJ_REPLICA_COMPLETE;
            } else {
                cold_complete |= r->status == OBJ_REPLICA_COMPLETE;
            }
        }
        if (!mem_complete || (!cold_complete && st->evict_keep_uncopied)) continue;
        if (obj_guard_decide(st, SMP_GUARD_BATCH_EVICT, o->key, o->group, o->data_type,
                             SMP_REPLICA_MEMORY, obj_group_managed_flag(st, o->group)) < 0)
            continue;
        if (cold_complete) {
            /* Keep the object readable from cold: drop its memory replicas. */
            if (keep_cap < o->nreps) {
                obj_replica *nk = realloc(keep, o->nreps * sizeof(*nk));
                if (!nk) { rc = SMP_ENOMEM; goto undo; }
                keep = nk;
                keep_cap = o->nreps;
            }
            size_t k = 0;
            for (size_t i = 0; i < o->nreps; i++)
                if (o->reps[i].kind != SMP_REPLICA_MEMORY) obj_rep_view(&o->reps[i], &keep[k++]);
            obj_record r = {0};
            if ((rc = obj_encode_object(o, keep, k, 1, &r)) < 0) goto undo;
            if ((rc = obj_list_push(out, &r)) < 0) {
                obj_record_free(&r);
                goto undo;
            }
        } else if ((rc = obj_keybatch_add(batch, o, out)) < 0) {
            goto undo;
        }
        freed += mem;
    }
    if ((rc = obj_keybatch_flush(batch, out)) < 0) goto undo;
    if (planned_free) *planned_free = freed;
    goto free_batch;

undo:
    obj_record_list_truncate(out, n_entry);
free_batch:
    free(keep);
    free(batch);
    return rc;
}
