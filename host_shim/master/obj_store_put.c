/* obj_store_put.c -- the store's write paths that prepare records: puts
 * (placement, start, end, revoke, stale cleanup), pins and replica counts,
 * reserving and adding memory replicas, and segment and group records. Part
 * of obj_store (see obj_store.c). */
#include "obj_store_internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Puts                                                                      */
/* ------------------------------------------------------------------------ */

int obj_lease_active(const obj_object *o, uint64_t now)
{
    return o->lease_expiry > now;
}

typedef struct obj_seg_choice {
    obj_segment *seg;
    int preferred;
    int has_copy; /* holds a memory replica of the object to copy */
    uint64_t free_bytes;
} obj_seg_choice;

static int obj_seg_choice_cmp(const void *a, const void *b)
{
    const obj_seg_choice *x = a, *y = b;
    if (x->preferred != y->preferred) return x->preferred ? -1 : 1;
    if (x->has_copy != y->has_copy) return x->has_copy ? 1 : -1;
    if (x->free_bytes != y->free_bytes) return x->free_bytes > y->free_bytes ? -1 : 1;
    return strcmp(x->seg->id, y->seg->id);
}

/* 1 when o (NULL: none) has a memory replica in s. */
static int obj_has_replica_in(const obj_object *o, const obj_segment *s)
{
    for (size_t i = 0; o && i < o->nreps; i++)
        if (o->reps[i].kind == SMP_REPLICA_MEMORY && o->reps[i].seg == s) return 1;
    return 0;
}

/* Reserve len bytes in the segment with the most free bytes that can hold
 * them (ties by id), trying the segments of prefer_node (NULL: none) first
 * and, among those equally preferred, segments without a memory replica of
 * copy_of (NULL: none) first. Only segments whose node the place hook
 * allows for tenant are considered. zone_wait non-NULL: in the segment's
 * write zone (obj_zone_alloc, which sets it). SMP_ENOSPC, SMP_ENOMEM. */
static int obj_place(obj_store *st,
                     const char *tenant,
                     uint64_t len,
                     const char *prefer_node,
                     const obj_object *copy_of,
                     obj_segment **seg,
                     uint64_t *off,
                     int *zone_wait)
{
    size_t n = st->segments.count;
    if (n == 0) return SMP_ENOSPC;
    obj_seg_choice *v = malloc(n * sizeof(*v));
    if (!v) return SMP_ENOMEM;
    size_t i = 0;
    for (obj_sl_node *x = obj_sl_after(&st->segments, NULL, 0); x; x = x->next[0]) {
        obj_segment *s = x->val;
        if (st->place_ok != NULL && !st->place_ok(st->place_ctx, s->node, obj_str(tenant)))
            continue; /* dedicated to another tenant */
        v[i].seg = s;
        v[i].preferred = prefer_node && strcmp(prefer_node, s->node) == 0;
        v[i].has_copy = obj_has_replica_in(copy_of, s);
        v[i].free_bytes = s->capacity - s->used;
        i++;
    }
    n = i;
    qsort(v, n, sizeof(*v), obj_seg_choice_cmp);
    int rc = SMP_ENOSPC;
    for (i = 0; i < n && rc == SMP_ENOSPC; i++) {
        if (v[i].free_bytes < len) continue;
        rc = zone_wait ? obj_zone_alloc(v[i].seg, len, off, zone_wait)
                       : obj_seg_alloc(v[i].seg, len, off);
        if (rc == SMP_OK) *seg = v[i].seg;
    }
    free(v);
    return rc;
}

int obj_put_start(obj_store *st,
                  const obj_put_params *p,
                  uint64_t now,
                  obj_put_ticket *out)
{
    OBJ_CHECK_CALLER(st);
    int rc;
    if (!p || obj_validate_key(p->key) < 0 || !obj_name_ok(p->group, OBJ_GROUP_MAX, 1) ||
        !obj_name_ok(p->tenant, OBJ_NAME_MAX, 1) || (unsigned)p->data_type > SMP_DATA_WEIGHT)
        return SMP_EINVAL;
    const char *group = obj_str(p->group);
    uint64_t alloc = obj_ext_len(p->size);
    if (alloc == 0) return SMP_EINVAL;
    if (obj_sl_get(&st->puts, p->key)) return SMP_EBUSY;
    obj_object *old = obj_sl_get(&st->objects, p->key);
    if (old && !p->overwrite) return SMP_EEXIST;
    if (old && obj_lease_active(old, now)) return SMP_EBUSY;

    int new_managed = obj_group_managed_flag(st, group);
    if (old) {
        int old_managed = obj_group_managed_flag(st, old->group);
        if ((old->group[0] || group[0]) &&
            (rc = obj_guard_decide(st, SMP_GUARD_UPSERT_INTO_GROUP, p->key,
                                   old_managed || !group[0] ? old->group : group,
                                   p->data_type, SMP_REPLICA_MEMORY,
                                   old_managed || new_managed)) < 0)
            return rc;
    } else if (new_managed &&
               (rc = obj_guard_decide(st, SMP_GUARD_PUT_INTO_GROUP, p->key, group,
                                      p->data_type, SMP_REPLICA_MEMORY, 1)) < 0) {
        return rc;
    }

    /* Before anything is placed: the zones of the master before. */
    if (!st->zones_live && (rc = obj_zones_take_over(st, now)) < 0) return rc;

    obj_put *put = calloc(1, sizeof(*put));
    if (!put) return SMP_ENOMEM;
    put->key = strdup(p->key);
    put->group = strdup(group);
    put->tenant = strdup(obj_str(p->tenant));
    if (!put->key || !put->group || !put->tenant) { rc = SMP_ENOMEM; goto free_put; }
    put->size = p->size;
    put->data_type = p->data_type;
    put->pinned = p->hard_pinned ? 1 : 0;
    put->alloc = alloc;
    put->started = now;
    put->put_id = st->next_put_id;
    put->owner = p->owner;
    int zone_wait = 0;
    put->zoned = st->zones_on && p->size < OBJ_ZONE_PUT_MAX;
    if ((rc = obj_place(st, put->tenant, alloc, p->prefer_node, NULL, &put->seg, &put->offset,
                        put->zoned ? &zone_wait : NULL)) < 0)
        goto free_put;
    if ((rc = obj_sl_put(&st->puts, put->key, put)) < 0) goto free_range;
    st->stats.puts_in_flight++;
    if (st->next_put_id < UINT64_MAX) st->next_put_id++;
    if (out) {
        out->segment = put->seg->id;
        out->node = put->seg->node;
        out->offset = put->offset;
        out->length = put->size;
        out->zone_wait = zone_wait;
    }
    return SMP_OK;

free_range:
    obj_seg_free(put->seg, put->offset, put->alloc);
free_put:
    obj_put_free(put);
    return rc;
}

int obj_prepare_put_end(obj_store *st,
                        const char *key,
                        const uint8_t checksum[32],
                        uint64_t now,
                        obj_record *out)
{
    OBJ_CHECK_CALLER(st);
    if (obj_validate_key(key) < 0 || !checksum || !out) return SMP_EINVAL;
    obj_put *p = obj_sl_get(&st->puts, key);
    if (!p) return SMP_ENOTFOUND;
    obj_object *old = obj_sl_get(&st->objects, key);
    if (old && obj_lease_active(old, now)) return SMP_EBUSY;
    /* A put into a managed group is asked again at its end: the group's
     * owner may have sealed it since the put started (a revision published
     * meanwhile must not gain a member). */
    const char *group = obj_str(p->group);
    int old_managed = old != NULL && obj_group_managed_flag(st, old->group);
    if (obj_group_managed_flag(st, group) || old_managed) {
        int rc = obj_guard_decide(st, old ? SMP_GUARD_UPSERT_INTO_GROUP : SMP_GUARD_PUT_INTO_GROUP,
                                  p->key, old_managed ? old->group : group, p->data_type,
                                  SMP_REPLICA_MEMORY, 1);
        if (rc < 0) return rc;
    }
    obj_object o;
    memset(&o, 0, sizeof(o));
    o.key = p->key;
    o.group = p->group;
    o.tenant = p->tenant;
    o.size = p->size;
    o.data_type = p->data_type;
    memcpy(o.checksum, checksum, 32);
    o.pinned = p->pinned;
    o.last_access = now;
    o.put_id = p->put_id;
    obj_replica r = {SMP_REPLICA_MEMORY, OBJ_REPLICA_COMPLETE, p->seg->node, p->seg->id,
                     p->offset, p->size, NULL};
    return obj_encode_object(&o, &r, 1, 0, out);
}

int obj_prepare_put_revoke(obj_store *st, const char *key, obj_record *out)
{
    OBJ_CHECK_CALLER(st);
    if (obj_validate_key(key) < 0 || !out) return SMP_EINVAL;
    obj_put *p = obj_sl_get(&st->puts, key);
    if (!p) return SMP_ENOTFOUND;
    Hostrec__PutRevokeRecord m = HOSTREC__PUT_REVOKE_RECORD__INIT;
    m.key = p->key;
    m.segment = p->seg->id;
    m.offset = p->offset;
    m.length = p->size;
    return obj_encode(&m.base, OBJ_REC_PUT_REVOKE, out);
}

void obj_handed_of(const obj_put *p, Hostrec__HandedPut *h)
{
    hostrec__handed_put__init(h);
    h->key = p->key;
    h->size = p->size;
    h->data_type = (uint32_t)p->data_type;
    h->group = p->group;
    h->tenant = p->tenant;
    h->hard_pinned = p->pinned != 0;
    h->put_id = p->put_id;
    h->segment = p->seg->id;
    h->offset = p->offset;
}

/* Encode the PUT_HANDOFF of the n puts at ptrs into *out. */
static int obj_encode_handoff(Hostrec__HandedPut **ptrs, size_t n, obj_record *out)
{
    Hostrec__PutHandoffRecord m = HOSTREC__PUT_HANDOFF_RECORD__INIT;
    m.puts = ptrs;
    m.n_puts = n;
    int rc = obj_encode(&m.base, OBJ_REC_PUT_REVOKE, out);
    if (rc == SMP_OK) out->encver = OBJ_REC_HANDOFF_ENCVER;
    return rc;
}

int obj_prepare_put_handoff(obj_store *st, obj_record *out, size_t *n)
{
    OBJ_CHECK_CALLER(st);
    *n = 0;
    size_t cap = (size_t)st->stats.puts_in_flight;
    if (cap == 0) return SMP_ENOTFOUND;
    Hostrec__HandedPut *puts = calloc(cap, sizeof(*puts));
    Hostrec__HandedPut **ptrs = calloc(cap, sizeof(*ptrs));
    int rc = SMP_ENOMEM;
    if (puts == NULL || ptrs == NULL) goto done;
    size_t k = 0;
    for (obj_sl_node *x = obj_sl_after(&st->puts, NULL, 0); x != NULL && k < cap; x = x->next[0]) {
        const obj_put *p = x->val;
        if (p->consuming) continue; /* its PUT_END is applying: nothing to hand on */
        obj_handed_of(p, &puts[k]);
        ptrs[k] = &puts[k];
        k++;
    }
    rc = SMP_ENOTFOUND;
    if (k == 0) goto done;
    if ((rc = obj_encode_handoff(ptrs, k, out)) < 0) goto done;
    *n = k;
done:
    free(ptrs);
    free(puts);
    return rc;
}

int obj_prepare_put_open(obj_store *st, const char *key, obj_record *out)
{
    OBJ_CHECK_CALLER(st);
    if (obj_validate_key(key) < 0 || !out) return SMP_EINVAL;
    const obj_put *p = obj_sl_get(&st->puts, key);
    if (p == NULL || p->consuming) return SMP_ENOTFOUND;
    Hostrec__HandedPut h, *ptr = &h;
    obj_handed_of(p, &h);
    return obj_encode_handoff(&ptr, 1, out);
}

int obj_put_touch(obj_store *st, const char *key, const char *segment, uint64_t offset,
                  uint64_t now)
{
    OBJ_CHECK_CALLER(st);
    obj_put *p = key != NULL ? obj_sl_get(&st->puts, key) : NULL;
    if (p == NULL || p->consuming || segment == NULL || strcmp(p->seg->id, segment) != 0 ||
        p->offset != offset)
        return SMP_ENOTFOUND;
    if (now > p->started) p->started = now;
    return SMP_OK;
}

int obj_puts_owned(const obj_store *st, uint64_t owner)
{
    OBJ_CHECK_CALLER(st);
    for (obj_sl_node *x = obj_sl_after(&st->puts, NULL, 0); owner != 0 && x; x = x->next[0]) {
        const obj_put *p = x->val;
        if (p->owner == owner && !p->consuming) return 1;
    }
    return 0;
}

int obj_cleanup_stale_puts(obj_store *st, uint64_t now, uint64_t timeout_ms)
{
    OBJ_CHECK_CALLER(st);
    int n = 0;
    if (!st->zones_live) (void)obj_zones_take_over(st, now); /* ENOMEM: next time */
    obj_zones_release(st, now, timeout_ms);
    for (obj_sl_node *x = obj_sl_after(&st->puts, NULL, 0); x;) {
        obj_put *p = x->val;
        x = x->next[0];
        if (p->untimed) { /* handed on (PUT_HANDOFF): its time runs from here */
            p->untimed = 0;
            p->started = now;
            st->stats.puts_taken_over++;
            continue;
        }
        if (now < p->started || now - p->started < timeout_ms) continue;
        if (obj_guard_decide(st, SMP_GUARD_STALE_PUT_CLEANUP, p->key, p->group, p->data_type,
                             SMP_REPLICA_MEMORY, 0) < 0)
            continue;
        obj_put_forget(st, p);
        if (n < INT32_MAX) n++;
    }
    for (obj_sl_node *x = obj_sl_after(&st->reserves, NULL, 0); x;) {
        obj_reservation *r = x->val;
        x = x->next[0];
        if (now < r->started || now - r->started < timeout_ms) continue;
        obj_reservation_abandon(st, r);
        if (n < INT32_MAX) n++;
    }
    return n;
}

/* ------------------------------------------------------------------------ */
/* Other object changes                                                      */
/* ------------------------------------------------------------------------ */

int obj_prepare_set_pin(obj_store *st, const char *key, int pinned, obj_record *out)
{
    OBJ_CHECK_CALLER(st);
    if (obj_validate_key(key) < 0 || !out) return SMP_EINVAL;
    obj_object *o = obj_sl_get(&st->objects, key);
    if (!o) return SMP_ENOTFOUND;
    obj_object copy = *o;
    copy.pinned = pinned ? 1 : 0;
    return obj_encode_object(&copy, NULL, 0, 1, out);
}

int obj_prepare_set_replicas(obj_store *st,
                             const char *key,
                             const obj_replica *reps,
                             size_t n,
                             obj_record *out)
{
    OBJ_CHECK_CALLER(st);
    if (obj_validate_key(key) < 0 || !out || (n && !reps) || n > OBJ_REPLICAS_MAX)
        return SMP_EINVAL;
    obj_object *o = obj_sl_get(&st->objects, key);
    if (!o) return SMP_ENOTFOUND;
    for (size_t i = 0; i < n; i++) {
        const obj_replica *r = &reps[i];
        if ((unsigned)r->status > OBJ_REPLICA_FAILED) return SMP_EINVAL;
        if (r->kind == SMP_REPLICA_COLD) {
            if (!obj_name_ok(r->node, OBJ_NAME_MAX, 0) || !obj_name_ok(r->path, OBJ_PATH_MAX, 0))
                return SMP_EINVAL;
            continue;
        }
        if (r->kind != SMP_REPLICA_MEMORY || !r->segment) return SMP_EINVAL;
        int found = 0;
        for (size_t k = 0; k < o->nreps && !found; k++) {
            const obj_rep *e = &o->reps[k];
            found = e->kind == SMP_REPLICA_MEMORY && strcmp(e->seg->id, r->segment) == 0 &&
                    e->offset == r->offset && e->length == r->length;
        }
        for (size_t k = 0; k < i && found; k++)
            found = !(reps[k].kind == SMP_REPLICA_MEMORY &&
                      strcmp(reps[k].segment, r->segment) == 0 && reps[k].offset == r->offset);
        if (!found) return SMP_EINVAL;
    }
    /* The memory replicas keep the segment's node whatever the caller says. */
    obj_replica *v = calloc(n ? n : 1, sizeof(*v));
    if (!v) return SMP_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        v[i] = reps[i];
        if (v[i].kind == SMP_REPLICA_MEMORY) {
            obj_segment *s = obj_sl_get(&st->segments, v[i].segment);
            v[i].node = s->node;
            v[i].path = NULL;
        } else {
            v[i].segment = NULL;
        }
    }
    int rc = obj_encode_object(o, v, n, 1, out);
    free(v);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Adding a memory replica                                                   */
/* ------------------------------------------------------------------------ */

int obj_reserve_replica(obj_store *st,
                        const char *key,
                        const char *prefer_node,
                        uint64_t now,
                        obj_put_ticket *out)
{
    OBJ_CHECK_CALLER(st);
    int rc;
    if (obj_validate_key(key) < 0) return SMP_EINVAL;
    obj_object *o = obj_sl_get(&st->objects, key);
    if (!o) return SMP_ENOTFOUND;
    if (obj_sl_get(&st->reserves, key)) return SMP_EBUSY;
    if (o->nreps >= OBJ_REPLICAS_MAX) return SMP_ERANGE;
    if (!st->zones_live && (rc = obj_zones_take_over(st, now)) < 0) return rc;
    obj_reservation *r = calloc(1, sizeof(*r));
    if (!r) return SMP_ENOMEM;
    if (!(r->key = strdup(key))) { rc = SMP_ENOMEM; goto free_reservation; }
    r->length = o->size;
    r->alloc = obj_ext_len(o->size);
    r->started = now;
    r->put_id = o->put_id;
    if ((rc = obj_place(st, o->tenant, r->alloc, prefer_node, o, &r->seg, &r->offset, NULL)) < 0)
        goto free_reservation;
    if ((rc = obj_sl_put(&st->reserves, r->key, r)) < 0) goto free_range;
    st->stats.reservations_in_flight++;
    if (out) {
        out->segment = r->seg->id;
        out->node = r->seg->node;
        out->offset = r->offset;
        out->length = r->length;
        /* a node fills it without a record: name it in the zones first */
        out->zone_wait = st->zones_on && !obj_zones_cover(r->seg, (obj_extent){r->offset, r->alloc});
    }
    return SMP_OK;

free_range:
    obj_seg_free(r->seg, r->offset, r->alloc);
free_reservation:
    free(r->key);
    free(r);
    return rc;
}

int obj_prepare_add_replica(obj_store *st,
                            const char *key,
                            const obj_put_ticket *where,
                            obj_record *out)
{
    OBJ_CHECK_CALLER(st);
    if (obj_validate_key(key) < 0 || !out) return SMP_EINVAL;
    obj_object *o = obj_sl_get(&st->objects, key);
    obj_reservation *r = obj_sl_get(&st->reserves, key);
    if (!o || !r || r->put_id != o->put_id) return SMP_ENOTFOUND;
    if (o->nreps >= OBJ_REPLICAS_MAX) return SMP_ERANGE;
    if (where && (!where->segment || strcmp(where->segment, r->seg->id) != 0 ||
                  (where->node && strcmp(where->node, r->seg->node) != 0) ||
                  where->offset != r->offset || where->length != r->length))
        return SMP_EINVAL;
    obj_replica *v = calloc(o->nreps + 1, sizeof(*v));
    if (!v) return SMP_ENOMEM;
    for (size_t i = 0; i < o->nreps; i++) obj_rep_view(&o->reps[i], &v[i]);
    obj_replica *added = &v[o->nreps];
    added->kind = SMP_REPLICA_MEMORY;
    added->status = OBJ_REPLICA_COMPLETE;
    added->node = r->seg->node;
    added->segment = r->seg->id;
    added->offset = r->offset;
    added->length = r->length;
    int rc = obj_encode_object_add(o, v, o->nreps + 1, 1, added, out);
    free(v);
    return rc;
}

int obj_release_reservation(obj_store *st, const char *key)
{
    OBJ_CHECK_CALLER(st);
    if (obj_validate_key(key) < 0) return SMP_EINVAL;
    obj_reservation *r = obj_sl_get(&st->reserves, key);
    if (!r) return SMP_ENOTFOUND;
    obj_reservation_abandon(st, r);
    return SMP_OK;
}

int obj_reservation_holds(const obj_store *st, const char *key, const char *segment,
                          uint64_t offset)
{
    OBJ_CHECK_CALLER(st);
    const obj_reservation *r = obj_validate_key(key) < 0 ? NULL : obj_sl_get(&st->reserves, key);
    return r != NULL && r->offset == offset && strcmp(r->seg->id, segment) == 0;
}

/* ------------------------------------------------------------------------ */
/* Segments and groups                                                       */
/* ------------------------------------------------------------------------ */

static int obj_encode_segment(uint16_t type,
                              const char *id,
                              const char *node,
                              uint64_t capacity,
                              obj_record *out)
{
    Hostrec__SegmentRecord s = HOSTREC__SEGMENT_RECORD__INIT;
    s.id = (char *)id;
    s.node = (char *)node;
    s.capacity = capacity;
    if (type == OBJ_REC_SEGMENT_MOUNT) return obj_encode(&s.base, type, out);
    Hostrec__UpdateRecord u = HOSTREC__UPDATE_RECORD__INIT;
    u.change_case = HOSTREC__UPDATE_RECORD__CHANGE_SEGMENT;
    u.segment = &s;
    return obj_encode(&u.base, type, out);
}

int obj_prepare_segment_mount(obj_store *st,
                              const char *id,
                              const char *node,
                              uint64_t capacity,
                              obj_record *out)
{
    OBJ_CHECK_CALLER(st);
    if (!obj_name_ok(id, OBJ_NAME_MAX, 0) || !obj_name_ok(node, OBJ_NAME_MAX, 0) || !out)
        return SMP_EINVAL;
    capacity = capacity / OBJ_ALIGN * OBJ_ALIGN;
    obj_segment *s = obj_sl_get(&st->segments, id);
    if (s && (strcmp(s->node, node) != 0 || s->capacity != capacity)) return SMP_EEXIST;
    return obj_encode_segment(OBJ_REC_SEGMENT_MOUNT, id, node, capacity, out);
}

int obj_segment_cancel_puts(obj_store *st, const char *id)
{
    OBJ_CHECK_CALLER(st);
    obj_segment *s = id ? obj_sl_get(&st->segments, id) : NULL;
    return s == NULL ? 0 : obj_cancel_puts_in(st, s, 0, UINT64_MAX);
}

int obj_prepare_segment_unmount(obj_store *st, const char *id, obj_record *out)
{
    OBJ_CHECK_CALLER(st);
    if (!obj_name_ok(id, OBJ_NAME_MAX, 0) || !out) return SMP_EINVAL;
    if (!obj_sl_get(&st->segments, id)) return SMP_ENOTFOUND;
    Hostrec__SegmentUnmountRecord m = HOSTREC__SEGMENT_UNMOUNT_RECORD__INIT;
    m.id = (char *)id;
    return obj_encode(&m.base, OBJ_REC_SEGMENT_UNMOUNT, out);
}

int obj_prepare_segment_update(obj_store *st,
                               const char *id,
                               uint64_t capacity,
                               obj_record *out)
{
    OBJ_CHECK_CALLER(st);
    if (!obj_name_ok(id, OBJ_NAME_MAX, 0) || !out) return SMP_EINVAL;
    obj_segment *s = obj_sl_get(&st->segments, id);
    if (!s) return SMP_ENOTFOUND;
    capacity = capacity / OBJ_ALIGN * OBJ_ALIGN;
    if (capacity == 0 || capacity < obj_seg_tail_used(s)) return SMP_ERANGE;
    return obj_encode_segment(OBJ_REC_SEGMENT_UPDATE, id, s->node, capacity, out);
}

int obj_prepare_group_managed(obj_store *st,
                              const char *group,
                              const char *plugin,
                              int managed,
                              obj_record *out)
{
    OBJ_CHECK_CALLER(st);
    if (!obj_name_ok(group, OBJ_GROUP_MAX, 0) || !obj_name_ok(plugin, OBJ_NAME_MAX, 0) || !out)
        return SMP_EINVAL;
    const char *owner = obj_group_owner(st, group);
    if (owner && strcmp(owner, plugin) != 0) return SMP_EVETO;
    Hostrec__GroupRecord g = HOSTREC__GROUP_RECORD__INIT;
    g.name = (char *)group;
    g.managed = managed ? 1 : 0;
    if (managed) g.owner = (char *)plugin;
    Hostrec__UpdateRecord u = HOSTREC__UPDATE_RECORD__INIT;
    u.change_case = HOSTREC__UPDATE_RECORD__CHANGE_GROUP;
    u.group = &g;
    return obj_encode(&u.base, OBJ_REC_SEGMENT_UPDATE, out);
}
