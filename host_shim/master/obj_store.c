/* obj_store.c -- the master's in-memory metadata for objects, replicas,
 * groups, tenants and memory segments: the object and group bookkeeping
 * (indexing, LRU, reservations), the store's life, reads and queries.
 *
 * Layout: six skip lists keyed by string (objects by key, groups by name,
 * tenants by name, segments by id, in-flight puts by key, replica
 * reservations by key) give ordered access for cursors and prefix listings,
 * each with a hash for exact lookups; each group holds a skip list of its
 * members (keys borrowed from the objects) without a hash: there is a group
 * per revision, and an O(log n) walk of its levels costs less than a table
 * each (obj_sl_init_ordered). Holds (keys whose removal or replacement is
 * in the OpLog) are only looked up by key: a plain hash. Objects with a
 * complete memory replica are also on a doubly linked LRU list ordered by
 * last access, which eviction walks from the oldest end. Each segment keeps
 * a free list of byte ranges sorted by offset (first fit, coalescing on
 * free); a segment always has room in its free array for one more extent
 * than it has allocations, so freeing never allocates and rollbacks cannot
 * fail.
 *
 * Mutations of durable state happen only in obj_apply_record() (and the
 * snapshot loader, which uses the same code); prepare functions only read the
 * state and encode records. Apply checks that the record is well formed
 * before it changes anything, decides races from durable state alone
 * (incarnations, replicas that no longer fit are left out, in-flight puts
 * yield their ranges), and performs every fallible allocation before the
 * first infallible change, so a failed apply leaves the state as it was.
 * See obj_store.h for the choices and the record mapping; the rest of the
 * store is split by role: obj_store_index.c (skip list, names, segment
 * allocator), obj_store_records.c (record encode/decode/apply, holds),
 * obj_store_put.c (puts, pins, replicas, segments, groups),
 * obj_store_remove.c (guard, removal, eviction), obj_store_snapshot.c (with
 * obj_snap_decode.c, the section's decoder). */
#include "obj_store_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Thread_local const obj_store *obj_loading_here;

void obj_store_loading_begin(obj_store *st)
{
    st->loading = 1;
}

void obj_store_loading_end(obj_store *st)
{
    st->loading = 0;
}

/* Loud on purpose: a caller that reached the store while a snapshot loads
 * into it on another thread races that thread, and nothing later would
 * show it. Not reachable from input: only from a path missing its wait. */
void obj_check_caller(const obj_store *st, const char *fn)
{
    if (st == NULL || !st->loading || obj_loading_here == st) return;
    fprintf(stderr,
            "obj_store: %s called while a snapshot loads into the store on another thread "
            "(master code reaches the store through master_objs, which waits for the load)\n",
            fn);
    abort();
}

/* ------------------------------------------------------------------------ */
/* Objects, puts, groups, tenants                                            */
/* ------------------------------------------------------------------------ */

void obj_rep_clear(obj_rep *r)
{
    obj_node_release(r->node);
    free(r->path);
    r->node = NULL;
    r->path = NULL;
}

void obj_object_free(obj_object *o)
{
    if (!o) return;
    for (size_t i = 0; i < o->nreps; i++) obj_rep_clear(&o->reps[i]);
    if (o->reps_own) free(o->reps);
    if (o->slab) obj_slab_unref(o->slab);
    else free(o);
}

void obj_put_free(obj_put *p)
{
    if (!p) return;
    free(p->key);
    free(p->group);
    free(p->tenant);
    free(p);
}

void obj_store_set_abandon_hook(obj_store *st, obj_abandon_fn fn, void *ctx)
{
    OBJ_CHECK_CALLER(st);
    st->abandon = fn;
    st->abandon_ctx = ctx;
}

void obj_store_set_place_hook(obj_store *st, obj_place_fn fn, void *ctx)
{
    OBJ_CHECK_CALLER(st);
    st->place_ok = fn;
    st->place_ctx = ctx;
}

void obj_store_keep_uncopied(obj_store *st, int keep)
{
    OBJ_CHECK_CALLER(st);
    st->evict_keep_uncopied = keep != 0;
}

const char *obj_segment_foreign_key(const obj_store *st, const char *id, const char *tenant)
{
    OBJ_CHECK_CALLER(st);
    const obj_segment *s = id ? obj_sl_get(&st->segments, id) : NULL;
    if (s == NULL) return NULL;
    tenant = obj_str(tenant);
    for (obj_sl_node *x = obj_sl_after(&st->objects, NULL, 0); x != NULL; x = x->next[0]) {
        const obj_object *o = x->val;
        if (strcmp(obj_str(o->tenant), tenant) == 0) continue;
        for (size_t i = 0; i < o->nreps; i++)
            if (o->reps[i].kind == SMP_REPLICA_MEMORY && o->reps[i].seg == s) return o->key;
        const obj_reservation *r = obj_sl_get(&st->reserves, o->key);
        if (r != NULL && r->seg == s) return o->key;
    }
    for (obj_sl_node *x = obj_sl_after(&st->puts, NULL, 0); x != NULL; x = x->next[0]) {
        const obj_put *p = x->val;
        if (p->seg == s && strcmp(obj_str(p->tenant), tenant) != 0) return p->key;
    }
    return NULL;
}

/* Free an in-flight put's range and the put (every caller gives the put up:
 * a put end consumes its put otherwise), telling the abandon hook. */
void obj_put_forget(obj_store *st, obj_put *p)
{
    if (st->abandon) st->abandon(st->abandon_ctx, p->seg->node, p->seg->id, p->offset, p->alloc);
    obj_seg_free(p->seg, p->offset, p->alloc);
    obj_sl_del(&st->puts, p->key);
    obj_put_free(p);
    st->stats.puts_in_flight--;
}

/* Drop a put a PUT_HANDOFF gave, which a later record supersedes (a later
 * handoff, or a durable object over its range): the master that wrote that
 * record had freed it (its writer went stale there), so its range is not
 * scrubbed (no abandon hook: a writer of the later put may be filling it,
 * or the object is there). Counted in puts_cancelled. */
void obj_handed_drop(obj_store *st, obj_put *p)
{
    obj_seg_free(p->seg, p->offset, p->alloc);
    obj_sl_del(&st->puts, p->key);
    obj_put_free(p);
    st->stats.puts_in_flight--;
    st->stats.puts_cancelled++;
}

/* Unlink a reservation and free it; its range is freed when free_range. */
void obj_reservation_forget(obj_store *st, obj_reservation *r, int free_range)
{
    if (free_range) obj_seg_free(r->seg, r->offset, r->alloc);
    obj_sl_del(&st->reserves, r->key);
    free(r->key);
    free(r);
    st->stats.reservations_in_flight--;
}

void obj_reservation_abandon(obj_store *st, obj_reservation *r)
{
    if (st->abandon) st->abandon(st->abandon_ctx, r->seg->node, r->seg->id, r->offset, r->alloc);
    obj_reservation_forget(st, r, 1);
}

static void obj_group_free(obj_group *g)
{
    if (!g) return;
    obj_sl_fini(&g->members);
    free(g->owner);
    free(g);
}

obj_group *obj_group_find(const obj_store *st, const char *name)
{
    if (!name || !name[0]) return NULL;
    return obj_sl_get(&st->groups, name);
}

/* The group of name, created (unmanaged, empty) when absent. *created tells
 * whether it was. NULL on SMP_ENOMEM. */
/* The groups' node of name: the hint (the group found last), the one after
 * it (a snapshot's objects meet their groups in order), or a lookup. The
 * hint follows. */
static obj_sl_node *obj_group_node(obj_store *st, const char *name)
{
    obj_sl_node *n = st->group_hint;
    if (n != NULL && strcmp(n->key, name) != 0) {
        n = n->next[0];
        if (n != NULL && strcmp(n->key, name) != 0) n = NULL;
    }
    if (n == NULL) n = obj_sl_find(&st->groups, name);
    if (n != NULL) st->group_hint = n;
    return n;
}

obj_group *obj_group_get_or_create(obj_store *st, const char *name, int *created)
{
    *created = 0;
    obj_sl_node *at = obj_group_node(st, name);
    obj_group *g = at ? at->val : NULL;
    if (g) return g;
    size_t nl = strlen(name) + 1;
    g = calloc(1, sizeof(*g) + nl); /* the name in the same piece */
    if (!g) return NULL;
    g->name = memcpy(g->name_buf, name, nl);
    if (obj_sl_init_ordered(&g->members) < 0) goto free_group;
    if (obj_sl_put(&st->groups, g->name, g) < 0) goto free_group;
    *created = 1;
    /* A snapshot's groups come in order: each is the last node. */
    at = st->groups.tail[0];
    st->group_hint = at != NULL && at->val == g ? at : obj_sl_find(&st->groups, g->name);
    return g;
free_group:
    obj_group_free(g);
    return NULL;
}

/* Drop a group that is neither managed nor has members. */
void obj_group_gc(obj_store *st, obj_group *g)
{
    if (g && !g->owner && g->members.count == 0) {
        if (st->group_hint != NULL && st->group_hint->val == g) st->group_hint = NULL;
        obj_sl_del(&st->groups, g->name);
        obj_group_free(g);
    }
}

int obj_group_managed_flag(const obj_store *st, const char *name)
{
    obj_group *g = obj_group_find(st, name);
    return g && g->owner ? 1 : 0;
}

static obj_tenant *obj_tenant_get_or_create(obj_store *st, const char *name, int *created)
{
    *created = 0;
    obj_tenant *t = obj_sl_get(&st->tenants, name);
    if (t) return t;
    t = calloc(1, sizeof(*t));
    if (!t) return NULL;
    t->name = strdup(name);
    if (!t->name || obj_sl_put(&st->tenants, t->name, t) < 0) {
        free(t->name);
        free(t);
        return NULL;
    }
    *created = 1;
    return t;
}

static void obj_tenant_drop(obj_store *st, obj_tenant *t)
{
    obj_sl_del(&st->tenants, t->name);
    free(t->name);
    free(t);
}

int obj_has_memory(const obj_object *o)
{
    for (size_t i = 0; i < o->nreps; i++)
        if (o->reps[i].kind == SMP_REPLICA_MEMORY && o->reps[i].status == OBJ_REPLICA_COMPLETE)
            return 1;
    return 0;
}

void obj_lru_unlink(obj_store *st, obj_object *o)
{
    if (!o->in_lru) return;
    o->in_lru = 0;
    if (o->lru_prev) o->lru_prev->lru_next = o->lru_next;
    else st->lru_head = o->lru_next;
    if (o->lru_next) o->lru_next->lru_prev = o->lru_prev;
    else st->lru_tail = o->lru_prev;
    o->lru_prev = o->lru_next = NULL;
}

/* Whether a belongs after b in the order obj_lru_resort gives the list:
 * by last access, then by key. */
static int obj_lru_after(const obj_object *a, const obj_object *b)
{
    if (a->last_access != b->last_access) return a->last_access > b->last_access;
    return strcmp(a->key, b->key) > 0;
}

/* Insert keeping the list sorted by last access (searching from the newest
 * end: accesses mostly arrive in time order). Bulk load appends, and an
 * append after an object it should precede (by last access, then key)
 * leaves the list to be sorted when it is first needed (obj_lru_resort).
 * Objects without a complete memory replica stay off the list. */
void obj_lru_insert(obj_store *st, obj_object *o)
{
    if (o->in_lru || !obj_has_memory(o)) return;
    o->in_lru = 1;
    obj_object *p = st->lru_tail;
    if (!st->bulk_load) {
        while (p && p->last_access > o->last_access) p = p->lru_prev;
    } else if (p && !st->lru_unsorted && obj_lru_after(p, o)) {
        st->lru_unsorted = 1;
    }
    o->lru_prev = p;
    o->lru_next = p ? p->lru_next : st->lru_head;
    if (o->lru_next) o->lru_next->lru_prev = o;
    else st->lru_tail = o;
    if (p) p->lru_next = o;
    else st->lru_head = o;
}

/* Put n where old is in the LRU list (old leaves it): in place when n has
 * memory and the same last access -- a record that changes an object's
 * replicas, not its use, must not walk the list from the newest end, which
 * costs the distance to the object's place (all of it for old objects) --
 * else unlink old and insert n by its last access. old may be NULL. */
static void obj_lru_replace(obj_store *st, obj_object *old, obj_object *n)
{
    if (old == NULL || !old->in_lru || n->in_lru || !obj_has_memory(n) ||
        n->last_access != old->last_access) {
        if (old != NULL) obj_lru_unlink(st, old);
        obj_lru_insert(st, n);
        return;
    }
    n->in_lru = 1;
    n->lru_prev = old->lru_prev;
    n->lru_next = old->lru_next;
    if (n->lru_prev) n->lru_prev->lru_next = n;
    else st->lru_head = n;
    if (n->lru_next) n->lru_next->lru_prev = n;
    else st->lru_tail = n;
    old->in_lru = 0;
    old->lru_prev = old->lru_next = NULL;
}

/* An LRU entry as obj_lru_resort sorts it: the last access beside the
 * object, so that only a tie reads the objects (their keys). */
typedef struct obj_lru_ent {
    uint64_t last_access;
    obj_object *o;
} obj_lru_ent;

static int obj_lru_cmp(const void *a, const void *b)
{
    const obj_lru_ent *x = a, *y = b;
    if (x->last_access != y->last_access) return x->last_access < y->last_access ? -1 : 1;
    return strcmp(x->o->key, y->o->key);
}

void obj_store_bulk_begin(obj_store *st)
{
    OBJ_CHECK_CALLER(st);
    st->bulk_load = 1;
}

int obj_store_bulk_end(obj_store *st)
{
    OBJ_CHECK_CALLER(st);
    st->bulk_load = 0;
    return SMP_OK;
}

/* Sort the LRU list after bulk loads, by last access then key, when one
 * appended out of that order; the eviction plan, the list's one reader,
 * asks first. Sorting 200,000 objects takes some 80 ms, which a restart
 * no longer spends before it serves. SMP_ENOMEM leaves it unsorted (still
 * a valid list; eviction order is then approximate, and the next plan
 * tries again). */
int obj_lru_resort(obj_store *st)
{
    if (!st->lru_unsorted) return SMP_OK;
    size_t n = 0;
    for (obj_object *o = st->lru_head; o; o = o->lru_next) n++;
    if (n < 2) {
        st->lru_unsorted = 0;
        return SMP_OK;
    }
    obj_lru_ent *v = malloc(n * sizeof(*v));
    if (!v) return SMP_ENOMEM;
    size_t i = 0;
    for (obj_object *o = st->lru_head; o && i < n; o = o->lru_next)
        v[i++] = (obj_lru_ent){o->last_access, o};
    qsort(v, i, sizeof(*v), obj_lru_cmp);
    st->lru_head = st->lru_tail = NULL;
    for (size_t k = 0; k < i; k++) {
        obj_object *o = v[k].o;
        o->lru_prev = st->lru_tail;
        o->lru_next = NULL;
        if (st->lru_tail) st->lru_tail->lru_next = o;
        else st->lru_head = o;
        st->lru_tail = o;
    }
    free(v);
    st->lru_unsorted = 0;
    return SMP_OK;
}

/* Add (sign +1) or subtract (-1) an object's contribution to the counters.
 * Every change of an object's presence or replicas passes here (the object
 * leaves the counters, changes, and enters them again), so this is also
 * where the readable version moves (obj_readable_version). */
static void obj_stats_add(obj_store *st, const obj_object *o, int sign)
{
    uint64_t one = (uint64_t)(int64_t)sign;
    st->readable_version++;
    st->stats.objects_by_type[o->data_type] += one;
    st->stats.bytes_by_type[o->data_type] += one * o->size;
    for (size_t i = 0; i < o->nreps; i++) {
        if (o->reps[i].status != OBJ_REPLICA_COMPLETE) continue;
        st->stats.replicas_by_kind[o->reps[i].kind] += one;
        st->stats.replica_bytes_by_kind[o->reps[i].kind] += one * o->reps[i].length;
    }
}

/* obj_stats_add; an object leaving (-1) may be losing a readable replica or
 * going away, so the loss version moves too (obj_loss_version). A change
 * that only adds passes through obj_stats_leave_keeping instead: whatever
 * does not say so counts as a loss. */
void obj_stats_account(obj_store *st, const obj_object *o, int sign)
{
    if (sign < 0) st->loss_version++;
    obj_stats_add(st, o, sign);
}

/* The object leaves the counters to enter them again with every complete
 * replica it has now (and maybe more): no loss. */
void obj_stats_leave_keeping(obj_store *st, const obj_object *o)
{
    obj_stats_add(st, o, -1);
}

/* 1 when n has a complete replica of the same kind on the same node for
 * every complete replica of old: whatever object_get could read of old it
 * can read of n. */
int obj_reps_cover(const obj_object *n, const obj_object *old)
{
    for (size_t i = 0; i < old->nreps; i++) {
        const obj_rep *r = &old->reps[i];
        if (r->status != OBJ_REPLICA_COMPLETE) continue;
        size_t k = 0;
        while (k < n->nreps && (n->reps[k].status != OBJ_REPLICA_COMPLETE ||
                                n->reps[k].kind != r->kind || strcmp(n->reps[k].node, r->node) != 0))
            k++;
        if (k == n->nreps) return 0;
    }
    return 1;
}


/* Cancel the in-flight puts and replica reservations (soft state)
 * overlapping [off, off+len) of seg: a durable record outranks them, and
 * replay, which has neither, must come to the same state. Returns how many
 * were cancelled. */
int obj_cancel_puts_in(obj_store *st, const obj_segment *seg, uint64_t off, uint64_t len)
{
    int n = 0;
    for (obj_sl_node *x = obj_sl_after(&st->puts, NULL, 0); x;) {
        obj_put *p = x->val;
        x = x->next[0];
        if (p->consuming || p->seg != seg || p->offset >= off + len ||
            off >= p->offset + p->alloc)
            continue;
        if (p->handed) { /* a durable object is in its range: never scrubbed */
            obj_handed_drop(st, p);
        } else {
            obj_put_forget(st, p);
            st->stats.puts_cancelled++;
        }
        n++;
    }
    for (obj_sl_node *x = obj_sl_after(&st->reserves, NULL, 0); x;) {
        obj_reservation *r = x->val;
        x = x->next[0];
        if (r->seg != seg || r->offset >= off + len || off >= r->offset + r->alloc) continue;
        obj_reservation_abandon(st, r);
        st->stats.reservations_cancelled++;
        n++;
    }
    return n;
}

/* Reserve the ranges of o's memory replicas, cancelling in-flight puts in
 * the way. A replica whose range is still not free is left out of o and
 * counted (a record that lost a race with another one; replay makes the
 * same choice). SMP_ENOMEM with nothing reserved. */
int obj_object_reserve(obj_store *st, obj_object *o)
{
    for (size_t i = 0; i < o->nreps; i++)
        if (o->reps[i].kind == SMP_REPLICA_MEMORY && obj_seg_ensure(o->reps[i].seg, o->nreps) < 0)
            return SMP_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < o->nreps; i++) {
        obj_rep *r = &o->reps[i];
        uint64_t ext = obj_ext_len(r->length);
        if (r->kind == SMP_REPLICA_MEMORY && obj_seg_reserve(r->seg, r->offset, ext) < 0 &&
            (obj_cancel_puts_in(st, r->seg, r->offset, ext) == 0 ||
             obj_seg_reserve(r->seg, r->offset, ext) < 0)) {
            obj_rep_clear(r);
            st->stats.replicas_dropped++;
            continue;
        }
        o->reps[k++] = *r;
    }
    o->nreps = k;
    return SMP_OK;
}

void obj_object_release(obj_store *st, obj_object *o)
{
    obj_released_note(st, o);
    for (size_t i = 0; i < o->nreps; i++) {
        obj_rep *r = &o->reps[i];
        if (r->kind == SMP_REPLICA_MEMORY)
            obj_seg_free(r->seg, r->offset, obj_ext_len(r->length));
    }
}

/* Take the object of node at (a node of st->objects) out of every index,
 * free its ranges, and free it. */
void obj_object_drop(obj_store *st, obj_sl_node *at)
{
    obj_object *o = obj_sl_unlink(&st->objects, at);
    obj_group *g = obj_group_find(st, o->group);
    if (g) {
        obj_sl_del(&g->members, o->key);
        obj_group_gc(st, g);
    }
    if (o->tenant[0]) {
        obj_tenant *t = obj_sl_get(&st->tenants, o->tenant);
        if (t) {
            t->objects--;
            t->bytes -= o->size;
            if (t->objects == 0) obj_tenant_drop(st, t);
        }
    }
    obj_stats_account(st, o, -1);
    obj_lru_unlink(st, o);
    obj_object_release(st, o);
    obj_object_free(o);
}

/* Put n (ranges already reserved) into the indexes in place of old (NULL:
 * none; its ranges already released). Every allocation happens before the
 * first change: on SMP_ENOMEM nothing changed. old is not freed. Once
 * indexed, n's group is its group's own name; old's group may be gone with
 * the group it leaves, so old's group is not read again. */
int obj_object_index(obj_store *st, obj_object *n, obj_object *old)
{
    int rc = SMP_OK;
    int t_created = 0, g_created = 0, member_added = 0;
    obj_tenant *t = NULL;
    obj_group *g = NULL;
    int same_group = old && strcmp(old->group, n->group) == 0;

    if (n->tenant[0]) {
        t = obj_tenant_get_or_create(st, n->tenant, &t_created);
        if (!t) return SMP_ENOMEM;
    }
    if (n->group[0]) {
        g = obj_group_get_or_create(st, n->group, &g_created);
        if (!g) { rc = SMP_ENOMEM; goto drop_tenant; }
        if (!same_group) {
            if ((rc = obj_sl_put_from(&g->members, n->key, n, st->load_slab)) < 0)
                goto drop_group;
            member_added = 1;
        }
    }
    if (!old && (rc = obj_sl_put_from(&st->objects, n->key, n, st->load_slab)) < 0)
        goto drop_member;

    /* From here on nothing fails. */
    if (old) {
        obj_sl_put(&st->objects, n->key, n); /* replaces in place */
        obj_group *og = obj_group_find(st, old->group);
        if (og && same_group) {
            obj_sl_put(&og->members, n->key, n);
        } else if (og) {
            obj_sl_del(&og->members, old->key);
            obj_group_gc(st, og);
        }
        if (old->tenant[0]) {
            obj_tenant *ot = obj_sl_get(&st->tenants, old->tenant);
            if (ot) {
                ot->objects--;
                ot->bytes -= old->size;
            }
        }
        if (obj_reps_cover(n, old)) obj_stats_leave_keeping(st, old);
        else obj_stats_account(st, old, -1);
    }
    if (g) n->group = g->name;
    if (t) {
        t->objects++;
        t->bytes += n->size;
    }
    if (old && old->tenant[0]) {
        obj_tenant *ot = obj_sl_get(&st->tenants, old->tenant);
        if (ot && ot->objects == 0) obj_tenant_drop(st, ot);
    }
    obj_stats_account(st, n, +1);
    obj_lru_replace(st, old, n);
    return SMP_OK;

drop_member:
    if (member_added) obj_sl_del(&g->members, n->key);
drop_group:
    if (g_created) obj_group_gc(st, g);
drop_tenant:
    if (t_created) obj_tenant_drop(st, t);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Life                                                                      */
/* ------------------------------------------------------------------------ */

/* Free every entry and leave empty lists (counters of refusals are kept). */
void obj_store_clear(obj_store *st)
{
    for (obj_sl_node *x = obj_sl_after(&st->objects, NULL, 0); x; x = x->next[0])
        obj_object_free(x->val);
    for (obj_sl_node *x = obj_sl_after(&st->puts, NULL, 0); x; x = x->next[0])
        obj_put_free(x->val);
    for (obj_sl_node *x = obj_sl_after(&st->reserves, NULL, 0); x; x = x->next[0]) {
        obj_reservation *r = x->val;
        free(r->key);
        free(r);
    }
    for (obj_sl_node *x = obj_sl_after(&st->groups, NULL, 0); x; x = x->next[0])
        obj_group_free(x->val);
    st->group_hint = NULL;
    for (obj_sl_node *x = obj_sl_after(&st->tenants, NULL, 0); x; x = x->next[0]) {
        obj_tenant *t = x->val;
        free(t->name);
        free(t);
    }
    for (obj_sl_node *x = obj_sl_after(&st->segments, NULL, 0); x; x = x->next[0])
        obj_segment_free(x->val);
    st->seg_hint = NULL;
    obj_hold *h, *tmp;
    HASH_ITER(hh, st->holds, h, tmp) {
        HASH_DEL(st->holds, h);
        free(h);
    }
    obj_sl *lists[] = {&st->objects, &st->puts, &st->groups, &st->tenants, &st->segments,
                       &st->reserves};
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
        obj_sl_node *h = lists[i]->head;
        obj_ix_fini(&lists[i]->ix); /* keeps its hash function */
        for (obj_sl_node *x = h->next[0]; x;) {
            obj_sl_node *nx = x->next[0];
            obj_sl_node_free(x);
            x = nx;
        }
        memset(h->next, 0, OBJ_SL_MAX_LEVEL * sizeof(obj_sl_node *));
        memset(lists[i]->tail, 0, OBJ_SL_MAX_LEVEL * sizeof(obj_sl_node *));
        lists[i]->level = 1;
        lists[i]->count = 0;
    }
    st->lru_head = st->lru_tail = NULL;
    st->lru_unsorted = 0;
    memset(st->stats.objects_by_type, 0, sizeof(st->stats.objects_by_type));
    memset(st->stats.bytes_by_type, 0, sizeof(st->stats.bytes_by_type));
    memset(st->stats.replicas_by_kind, 0, sizeof(st->stats.replicas_by_kind));
    memset(st->stats.replica_bytes_by_kind, 0, sizeof(st->stats.replica_bytes_by_kind));
    st->stats.puts_in_flight = 0;
    st->stats.reservations_in_flight = 0;
    st->readable_version++;
    st->loss_version++;
}

int obj_store_create(obj_store **out, const obj_guard_ops *guard)
{
    obj_store *st = calloc(1, sizeof(*st));
    if (!st) return SMP_ENOMEM;
    obj_sl *lists[] = {&st->objects, &st->puts, &st->groups, &st->tenants, &st->segments,
                       &st->reserves};
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
        if (obj_sl_init(lists[i]) < 0) {
            for (size_t k = 0; k < i; k++) obj_sl_fini(lists[k]);
            free(st);
            return SMP_ENOMEM;
        }
    }
    if (guard) st->guard = *guard;
    st->next_put_id = 1;
    st->readable_version = 1;
    st->loss_version = 1;
    *out = st;
    return SMP_OK;
}

void obj_store_destroy(obj_store *st)
{
    OBJ_CHECK_CALLER(st);
    if (!st) return;
    obj_store_clear(st);
    obj_sl_fini(&st->objects);
    obj_sl_fini(&st->puts);
    obj_sl_fini(&st->groups);
    obj_sl_fini(&st->tenants);
    obj_sl_fini(&st->segments);
    obj_sl_fini(&st->reserves);
    obj_released_fini(&st->released);
    free(st);
}

void obj_store_set_guard(obj_store *st, const obj_guard_ops *guard)
{
    OBJ_CHECK_CALLER(st);
    if (guard) st->guard = *guard;
    else memset(&st->guard, 0, sizeof(st->guard));
}

/* ------------------------------------------------------------------------ */
/* Reads                                                                     */
/* ------------------------------------------------------------------------ */

int obj_get_replica_list(obj_store *st,
                         const char *key,
                         uint64_t now,
                         uint64_t lease_ms,
                         obj_replica *out,
                         size_t cap,
                         size_t *n_out)
{
    OBJ_CHECK_CALLER(st);
    if (obj_validate_key(key) < 0 || (cap && !out)) return SMP_EINVAL;
    obj_object *o = obj_sl_get(&st->objects, key);
    if (!o) return SMP_ENOTFOUND;
    const obj_hold *h = obj_hold_find(st, key);
    if (h && h->count > h->readable) return SMP_EBUSY; /* bytes about to be freed */
    size_t n = 0;
    for (size_t i = 0; i < o->nreps; i++) {
        if (o->reps[i].status != OBJ_REPLICA_COMPLETE) continue;
        if (n < cap) obj_rep_view(&o->reps[i], &out[n]);
        n++;
    }
    if (n_out) *n_out = n;
    if (n == 0) return SMP_EAGAIN;
    if (now > o->last_access) {
        o->last_access = now;
        obj_lru_unlink(st, o);
        obj_lru_insert(st, o);
    }
    if (lease_ms) {
        uint64_t exp = now > UINT64_MAX - lease_ms ? UINT64_MAX : now + lease_ms;
        if (exp > o->lease_expiry) o->lease_expiry = exp;
    }
    return SMP_OK;
}

int obj_set_lease_end(obj_store *st, const char *key, uint64_t ends)
{
    OBJ_CHECK_CALLER(st);
    if (obj_validate_key(key) < 0) return SMP_EINVAL;
    obj_object *o = obj_sl_get(&st->objects, key);
    if (!o) return SMP_ENOTFOUND;
    if (ends < o->lease_expiry) o->lease_expiry = ends;
    return SMP_OK;
}

uint64_t obj_lease_end(const obj_store *st, const char *key, uint64_t now)
{
    OBJ_CHECK_CALLER(st);
    if (obj_validate_key(key) < 0) return 0;
    const obj_object *o = obj_sl_get(&st->objects, key);
    return o != NULL && obj_lease_active(o, now) ? o->lease_expiry : 0;
}

int obj_object_replicas(const obj_store *st,
                        const char *key,
                        obj_replica *out,
                        size_t cap,
                        size_t *n_out)
{
    OBJ_CHECK_CALLER(st);
    if (obj_validate_key(key) < 0 || (cap && !out)) return SMP_EINVAL;
    const obj_object *o = obj_sl_get(&st->objects, key);
    if (!o) return SMP_ENOTFOUND;
    for (size_t i = 0; i < o->nreps && i < cap; i++) obj_rep_view(&o->reps[i], &out[i]);
    if (n_out) *n_out = o->nreps;
    return SMP_OK;
}

int obj_visit_replicas(const obj_store *st,
                       const char *node,
                       int (*fn)(void *arg, const char *key, const obj_replica *rep),
                       void *arg)
{
    OBJ_CHECK_CALLER(st);
    return obj_visit_replicas_after(st, node, NULL, fn, arg);
}

int obj_visit_replicas_after(const obj_store *st,
                             const char *node,
                             const char *after,
                             int (*fn)(void *arg, const char *key, const obj_replica *rep),
                             void *arg)
{
    OBJ_CHECK_CALLER(st);
    if (!fn) return SMP_EINVAL;
    int n = 0;
    for (obj_sl_node *x = obj_sl_after(&st->objects, after, 0); x; x = x->next[0]) {
        const obj_object *o = x->val;
        for (size_t i = 0; i < o->nreps; i++) {
            if (node && strcmp(o->reps[i].node, node) != 0) continue;
            obj_replica v;
            obj_rep_view(&o->reps[i], &v);
            if (n < INT32_MAX) n++;
            if (fn(arg, o->key, &v) != 0) return n;
        }
    }
    return n;
}

uint64_t obj_visit_unreplicated(const obj_store *st, int (*fn)(void *arg, const char *key), void *arg)
{
    OBJ_CHECK_CALLER(st);
    uint64_t n = 0;
    for (obj_sl_node *x = obj_sl_after(&st->objects, NULL, 0); x; x = x->next[0]) {
        const obj_object *o = x->val;
        size_t i = 0;
        while (i < o->nreps && o->reps[i].status != OBJ_REPLICA_COMPLETE) i++;
        if (i < o->nreps) continue;
        n++;
        if (fn != NULL && fn(arg, o->key) != 0) break;
    }
    return n;
}

uint64_t obj_readable_version(const obj_store *st)
{
    OBJ_CHECK_CALLER(st);
    return st->readable_version;
}

void obj_readable_changed(obj_store *st, int lost)
{
    OBJ_CHECK_CALLER(st);
    st->readable_version++;
    if (lost) st->loss_version++;
}

uint64_t obj_loss_version(const obj_store *st)
{
    OBJ_CHECK_CALLER(st);
    return st->loss_version;
}

int obj_exists(const obj_store *st, const char *key)
{
    OBJ_CHECK_CALLER(st);
    return key && obj_sl_get(&st->objects, key) != NULL;
}

#define OBJ_INFO_HAS(info, field) \
    ((info)->struct_size >= offsetof(smp_object_info, field) + sizeof((info)->field))

static void obj_fill_info(const obj_object *o, smp_object_info *info)
{
    uint32_t mem = 0, cold = 0;
    for (size_t i = 0; i < o->nreps; i++) {
        if (o->reps[i].status != OBJ_REPLICA_COMPLETE) continue;
        if (o->reps[i].kind == SMP_REPLICA_MEMORY) mem++;
        else cold++;
    }
    if (OBJ_INFO_HAS(info, key)) info->key = o->key;
    if (OBJ_INFO_HAS(info, group)) info->group = o->group;
    if (OBJ_INFO_HAS(info, size)) info->size = o->size;
    if (OBJ_INFO_HAS(info, data_type)) info->data_type = o->data_type;
    if (OBJ_INFO_HAS(info, complete)) info->complete = 1;
    if (OBJ_INFO_HAS(info, hard_pinned)) info->hard_pinned = o->pinned;
    if (OBJ_INFO_HAS(info, memory_replicas_readable)) info->memory_replicas_readable = mem;
    if (OBJ_INFO_HAS(info, cold_replicas_readable)) info->cold_replicas_readable = cold;
    if (OBJ_INFO_HAS(info, checksum)) memcpy(info->checksum, o->checksum, 32);
}

int obj_object_info(const obj_store *st, const char *key, smp_object_info *info)
{
    OBJ_CHECK_CALLER(st);
    if (!key || !info) return SMP_EINVAL;
    obj_object *o = obj_sl_get(&st->objects, key);
    if (o) {
        obj_fill_info(o, info);
        return SMP_OK;
    }
    obj_put *p = obj_sl_get(&st->puts, key);
    if (!p) return SMP_ENOTFOUND;
    if (OBJ_INFO_HAS(info, key)) info->key = p->key;
    if (OBJ_INFO_HAS(info, group)) info->group = p->group;
    if (OBJ_INFO_HAS(info, size)) info->size = p->size;
    if (OBJ_INFO_HAS(info, data_type)) info->data_type = p->data_type;
    if (OBJ_INFO_HAS(info, complete)) info->complete = 0;
    if (OBJ_INFO_HAS(info, hard_pinned)) info->hard_pinned = p->pinned;
    if (OBJ_INFO_HAS(info, memory_replicas_readable)) info->memory_replicas_readable = 0;
    if (OBJ_INFO_HAS(info, cold_replicas_readable)) info->cold_replicas_readable = 0;
    if (OBJ_INFO_HAS(info, checksum)) memset(info->checksum, 0, 32);
    return SMP_OK;
}

const char *obj_put_group(const obj_store *st, const char *key)
{
    OBJ_CHECK_CALLER(st);
    const obj_put *p = key != NULL ? obj_sl_get(&st->puts, key) : NULL;
    return p != NULL ? p->group : NULL;
}

int obj_object_info_replicas(const obj_store *st,
                             const char *key,
                             smp_object_info *info,
                             obj_replica *out,
                             size_t cap,
                             size_t *n_out)
{
    OBJ_CHECK_CALLER(st);
    if (!key || !info || !n_out || (cap && !out)) return SMP_EINVAL;
    const obj_object *o = obj_sl_get(&st->objects, key);
    *n_out = 0;
    if (!o) return obj_object_info(st, key, info); /* a put in flight, or nothing */
    obj_fill_info(o, info);
    for (size_t i = 0; i < o->nreps && i < cap; i++) obj_rep_view(&o->reps[i], &out[i]);
    *n_out = o->nreps;
    return SMP_OK;
}

const char *obj_object_tenant(const obj_store *st, const char *key)
{
    OBJ_CHECK_CALLER(st);
    const obj_object *o = key ? obj_sl_get(&st->objects, key) : NULL;
    return o && o->tenant ? o->tenant : "";
}

int obj_list_prefix(const obj_store *st,
                    const char *prefix,
                    const char *tenant,
                    const char *after,
                    size_t max,
                    const char **keys,
                    size_t *n_out,
                    int *more)
{
    OBJ_CHECK_CALLER(st);
    if ((max && !keys) || !n_out) return SMP_EINVAL;
    prefix = obj_str(prefix);
    size_t plen = strlen(prefix);
    obj_sl_node *x = (after && strcmp(after, prefix) >= 0)
                         ? obj_sl_after(&st->objects, after, 0)
                         : obj_sl_after(&st->objects, prefix, 1);
    size_t n = 0;
    int further = 0;
    for (; x && obj_has_prefix(x->key, prefix, plen); x = x->next[0]) {
        const obj_object *o = x->val;
        if (tenant && strcmp(o->tenant, tenant) != 0) continue;
        if (n == max) {
            further = 1;
            break;
        }
        keys[n++] = o->key;
    }
    *n_out = n;
    if (more) *more = further;
    return SMP_OK;
}

/* ------------------------------------------------------------------------ */
/* Queries                                                                   */
/* ------------------------------------------------------------------------ */

int obj_group_list(const obj_store *st,
                   const char *group,
                   const char *after_key,
                   size_t max,
                   smp_object_visit_fn fn,
                   void *arg)
{
    OBJ_CHECK_CALLER(st);
    obj_group *g = obj_group_find(st, group);
    if (!g || !fn) return 0;
    int n = 0;
    for (obj_sl_node *x = obj_sl_after(&g->members, after_key, 0); x && (size_t)n < max;
         x = x->next[0]) {
        smp_object_info info;
        memset(&info, 0, sizeof(info));
        info.struct_size = sizeof(info);
        obj_fill_info(x->val, &info);
        n++;
        if (fn(arg, &info) != 0 || n == INT32_MAX) break;
    }
    return n;
}

uint64_t obj_group_count(const obj_store *st, const char *group)
{
    OBJ_CHECK_CALLER(st);
    obj_group *g = obj_group_find(st, group);
    return g ? g->members.count : 0;
}

int obj_group_is_managed(const obj_store *st, const char *group)
{
    OBJ_CHECK_CALLER(st);
    return obj_group_managed_flag(st, group);
}

const char *obj_group_owner(const obj_store *st, const char *group)
{
    OBJ_CHECK_CALLER(st);
    const obj_group *g = obj_group_find(st, group);
    return g ? g->owner : NULL;
}

void obj_tenant_usage(const obj_store *st, const char *tenant, uint64_t *objects, uint64_t *bytes)
{
    OBJ_CHECK_CALLER(st);
    obj_tenant *t = (tenant && tenant[0]) ? obj_sl_get(&st->tenants, tenant) : NULL;
    if (objects) *objects = t ? t->objects : 0;
    if (bytes) *bytes = t ? t->bytes : 0;
}

void obj_store_stats(const obj_store *st, obj_stats *out)
{
    OBJ_CHECK_CALLER(st);
    *out = st->stats;
    obj_memory_usage(st, &out->memory_used, &out->memory_capacity);
    out->zone_bytes_held = obj_zones_held_bytes(st);
}
