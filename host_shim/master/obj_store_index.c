/* obj_store_index.c -- the store's building blocks: the string-keyed skip
 * list every index uses, key and name validation, and the per-segment
 * allocator (a free list of byte ranges sorted by offset, first fit,
 * coalescing on free). Part of obj_store (see obj_store.c). */
#include "obj_store_internal.h"

#include "utf8_valid.h"

#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Skip list keyed by string                                                 */
/* ------------------------------------------------------------------------ */

/* Initialise an empty list. SMP_ENOMEM. The head has forward links only:
 * the back links (OBJ_SL_PREV) are read from real nodes, never the head; its
 * tail[] follows them. A hashed list (one of the store's few big ones) gets
 * all OBJ_SL_MAX_LEVEL links at once; an ordered one (a group's members: one
 * list per revision, of its objects) starts with OBJ_SL_ORDERED_LEVELS and
 * grows its head when a node rises above it (obj_sl_grow_head). */
static int obj_sl_init_as(obj_sl *sl, int hashed)
{
    int levels = hashed ? OBJ_SL_MAX_LEVEL : OBJ_SL_ORDERED_LEVELS;
    sl->head = calloc(1, sizeof(obj_sl_node) + 2 * (size_t)levels * sizeof(obj_sl_node *));
    if (!sl->head) return SMP_ENOMEM;
    sl->head->level = levels;
    sl->level = 1;
    sl->hashed = hashed;
    sl->tail = &sl->head->next[levels];
    obj_ix_init(&sl->ix);
    sl->count = 0;
    sl->rng = UINT64_C(0x9E3779B97F4A7C15);
    return SMP_OK;
}

/* Give an ordered list's head at least lvl forward links (doubling, at most
 * OBJ_SL_MAX_LEVEL): a new head takes over the links, and the first node of
 * each level links back to it. SMP_ENOMEM leaves the list unchanged. */
static int obj_sl_grow_head(obj_sl *sl, int lvl)
{
    obj_sl_node *old = sl->head;
    if (lvl <= old->level) return SMP_OK;
    int levels = old->level * 2;
    if (levels < lvl) levels = lvl;
    if (levels > OBJ_SL_MAX_LEVEL) levels = OBJ_SL_MAX_LEVEL;
    obj_sl_node *h = calloc(1, sizeof(obj_sl_node) + 2 * (size_t)levels * sizeof(obj_sl_node *));
    if (!h) return SMP_ENOMEM;
    h->level = levels;
    obj_sl_node **tail = &h->next[levels];
    for (int i = 0; i < old->level; i++) {
        h->next[i] = old->next[i];
        if (h->next[i]) OBJ_SL_PREV(h->next[i], i) = h;
        tail[i] = sl->tail[i];
    }
    sl->head = h;
    sl->tail = tail;
    free(old);
    return SMP_OK;
}

int obj_sl_init(obj_sl *sl)
{
    return obj_sl_init_as(sl, 1);
}

int obj_sl_init_ordered(obj_sl *sl)
{
    return obj_sl_init_as(sl, 0);
}

void obj_sl_node_free(obj_sl_node *n)
{
    if (n->slab != NULL)
        obj_slab_unref(n->slab);
    else
        free(n);
}

/* Free the nodes (not keys or values). */
void obj_sl_fini(obj_sl *sl)
{
    if (!sl->head) return;
    obj_ix_fini(&sl->ix);
    obj_sl_node *n = sl->head->next[0];
    while (n) {
        obj_sl_node *nx = n->next[0];
        obj_sl_node_free(n);
        n = nx;
    }
    free(sl->head);
    sl->head = NULL;
    sl->count = 0;
}

static int obj_sl_random_level(obj_sl *sl)
{
    /* xorshift64: deterministic, the level only affects speed. */
    uint64_t x = sl->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    sl->rng = x;
    int lvl = 1;
    while ((x & 3) == 0 && lvl < OBJ_SL_MAX_LEVEL) {
        lvl++;
        x >>= 2;
    }
    return lvl;
}

/* Fill upd[] with the last node at each level whose key < key. */
static obj_sl_node *obj_sl_seek(const obj_sl *sl, const char *key, obj_sl_node **upd)
{
    obj_sl_node *x = sl->head;
    for (int i = sl->level - 1; i >= 0; i--) {
        while (x->next[i] && strcmp(x->next[i]->key, key) < 0) x = x->next[i];
        if (upd) upd[i] = x;
    }
    return x->next[0];
}

obj_sl_node *obj_sl_find(const obj_sl *sl, const char *key)
{
    obj_sl_node *n = NULL;
    if (!sl->hashed) {
        n = obj_sl_seek(sl, key, NULL);
        return n && strcmp(n->key, key) == 0 ? n : NULL;
    }
    /* A key above the last one is absent: no hash probe (a cache miss at
     * 200,000 objects) for each record of a snapshot, saved in key order. */
    if (sl->tail[0] == NULL || strcmp(sl->tail[0]->key, key) < 0) return NULL;
    return obj_ix_find(&sl->ix, key);
}

void *obj_sl_get(const obj_sl *sl, const char *key)
{
    obj_sl_node *n = obj_sl_find(sl, key);
    return n ? n->val : NULL;
}

int obj_sl_put(obj_sl *sl, const char *key, void *val)
{
    return obj_sl_put_from(sl, key, val, NULL);
}

/* Insert key -> val, or replace key pointer and value when the key exists
 * (replacement never allocates). SMP_ENOMEM leaves the list unchanged. */
int obj_sl_put_from(obj_sl *sl, const char *key, void *val, struct obj_slab *slab)
{
    obj_sl_node *upd[OBJ_SL_MAX_LEVEL];
    obj_sl_node *n = NULL;
    uint64_t h = 0;
    /* A key above the last one (each key of a snapshot, saved in order) is
     * not there, and goes after the tails: no probe, no search. */
    int above = sl->tail[0] == NULL || strcmp(sl->tail[0]->key, key) < 0;
    if (sl->hashed) {
        h = obj_ix_key_hash(&sl->ix, key);
        if (!above) n = obj_ix_find_h(&sl->ix, key, h);
    } else if (!above && (n = obj_sl_seek(sl, key, upd)) != NULL && strcmp(n->key, key) != 0) {
        n = NULL;
    }
    if (n) {
        n->key = key; /* same bytes, same hash: the index does not change */
        n->val = val;
        return SMP_OK;
    }
    if (sl->hashed && obj_ix_reserve(&sl->ix) < 0) return SMP_ENOMEM;
    int lvl = obj_sl_random_level(sl);
    obj_sl_node *old_head = sl->head;
    if (obj_sl_grow_head(sl, lvl) < 0) return SMP_ENOMEM;
    size_t bytes = sizeof(*n) + 2 * (size_t)lvl * sizeof(obj_sl_node *);
    size_t taken = (bytes + alignof(max_align_t) - 1) & ~(alignof(max_align_t) - 1);
    if (slab != NULL && obj_slab_room(slab) >= taken) {
        /* A load's: the slab's pages are readied ahead (obj_slab_take), and
         * the node lies next to its object. */
        n = obj_slab_take(slab, taken);
        n->slab = slab;
    } else {
        if ((n = malloc(bytes)) == NULL) return SMP_ENOMEM;
        n->slab = NULL;
    }
    /* Only the node's own lvl levels are linked, so only they need their
     * predecessor: the tails when it goes last (a snapshot's keys, most at
     * one level), else the search's (done above for an unhashed list, from
     * a head that may since have grown into a new one). */
    if (above) {
        for (int i = 0; i < lvl; i++) upd[i] = sl->tail[i] ? sl->tail[i] : sl->head;
    } else {
        if (sl->hashed)
            obj_sl_seek(sl, key, upd);
        else
            for (int i = 0; i < lvl && i < sl->level; i++)
                if (upd[i] == old_head) upd[i] = sl->head;
        for (int i = sl->level; i < lvl; i++) upd[i] = sl->head;
    }
    if (lvl > sl->level) sl->level = lvl;
    n->key = key;
    n->val = val;
    n->level = lvl;
    if (sl->hashed) obj_ix_insert_h(&sl->ix, n, h);
    for (int i = 0; i < lvl; i++) {
        n->next[i] = upd[i]->next[i];
        OBJ_SL_PREV(n, i) = upd[i];
        if (n->next[i]) OBJ_SL_PREV(n->next[i], i) = n;
        upd[i]->next[i] = n;
        if (!n->next[i]) sl->tail[i] = n;
    }
    sl->count++;
    return SMP_OK;
}

/* Unlink and free node n of sl; returns its value. */
void *obj_sl_unlink(obj_sl *sl, obj_sl_node *n)
{
    for (int i = 0; i < n->level; i++) {
        OBJ_SL_PREV(n, i)->next[i] = n->next[i];
        if (n->next[i]) OBJ_SL_PREV(n->next[i], i) = OBJ_SL_PREV(n, i);
        if (sl->tail[i] == n)
            sl->tail[i] = OBJ_SL_PREV(n, i) == sl->head ? NULL : OBJ_SL_PREV(n, i);
    }
    if (sl->hashed) obj_ix_remove(&sl->ix, n);
    while (sl->level > 1 && !sl->head->next[sl->level - 1]) sl->level--;
    void *val = n->val;
    obj_sl_node_free(n);
    sl->count--;
    return val;
}

/* Unlink key; returns its value or NULL when absent. */
void *obj_sl_del(obj_sl *sl, const char *key)
{
    obj_sl_node *n = obj_sl_find(sl, key);
    return n ? obj_sl_unlink(sl, n) : NULL;
}

/* First node with key > key (>= when inclusive); key NULL: the first node. */
obj_sl_node *obj_sl_after(const obj_sl *sl, const char *key, int inclusive)
{
    if (!key) return sl->head->next[0];
    obj_sl_node *x = sl->head;
    for (int i = sl->level - 1; i >= 0; i--) {
        while (x->next[i]) {
            int c = strcmp(x->next[i]->key, key);
            if (c < 0 || (c == 0 && !inclusive)) x = x->next[i];
            else break;
        }
    }
    return x->next[0];
}

/* ------------------------------------------------------------------------ */
/* Validation helpers                                                        */
/* ------------------------------------------------------------------------ */

/* A string of at most max bytes of valid UTF-8, non-empty unless allowed. */
int obj_name_ok(const char *s, size_t max, int allow_empty)
{
    if (!s) return allow_empty;
    size_t len = strnlen(s, max + 1);
    if (len > max) return 0;
    if (len == 0) return allow_empty;
    return utf8_valid((const unsigned char *)s, len);
}

int obj_validate_key(const char *key)
{
    return obj_name_ok(key, OBJ_KEY_MAX, 0) ? SMP_OK : SMP_EINVAL;
}

/* ------------------------------------------------------------------------ */
/* Node ids, interned                                                        */
/* ------------------------------------------------------------------------ */

char *obj_node_intern(obj_store *st, const char *id)
{
    obj_node_name *e = st->node_hint;
    if (e != NULL && strcmp(e->id, id) == 0) {
        e->refs++;
        return e->id;
    }
    size_t len = strlen(id);
    HASH_FIND(hh, st->node_names, id, len, e);
    if (e == NULL) {
        e = malloc(sizeof(*e) + len + 1);
        if (e == NULL) return NULL;
        memcpy(e->id, id, len + 1);
        e->table = &st->node_names;
        e->hint = &st->node_hint;
        e->refs = 0;
        HASH_ADD_KEYPTR(hh, st->node_names, e->id, len, e);
    }
    e->refs++;
    st->node_hint = e;
    return e->id;
}

void obj_node_release(char *id)
{
    if (id == NULL) return;
    obj_node_name *e = (obj_node_name *)(id - offsetof(obj_node_name, id));
    if (--e->refs > 0) return;
    if (*e->hint == e) *e->hint = NULL;
    HASH_DEL(*e->table, e);
    free(e);
}

/* The segment id names (mounted), from the hint when it is the one found
 * last -- the memory replicas of a run of records are in one segment --
 * else from the index. NULL when none is. */
obj_segment *obj_segment_get(obj_store *st, const char *id)
{
    obj_segment *s = st->seg_hint;
    if (s != NULL && strcmp(s->id, id) == 0) return s;
    s = obj_sl_get(&st->segments, id);
    if (s != NULL) st->seg_hint = s;
    return s;
}

const char *obj_str(const char *s)
{
    return s ? s : "";
}

/* Bytes a memory replica of length occupies; 0 on overflow. */
uint64_t obj_ext_len(uint64_t length)
{
    if (length > UINT64_MAX - OBJ_ALIGN) return 0;
    if (length == 0) return OBJ_ALIGN;
    return (length + OBJ_ALIGN - 1) / OBJ_ALIGN * OBJ_ALIGN;
}

int obj_has_prefix(const char *s, const char *prefix, size_t plen)
{
    return strncmp(s, prefix, plen) == 0;
}

/* ------------------------------------------------------------------------ */
/* Segment allocator                                                         */
/* ------------------------------------------------------------------------ */

/* Make room for one more allocation (keeps capfree >= nalloc + 2 after it). */
static int obj_seg_grow(obj_segment *s)
{
    if (s->capfree >= s->nalloc + 3) return SMP_OK;
    size_t ncap = s->capfree * 2;
    if (ncap < s->nalloc + 3) ncap = s->nalloc + 3;
    obj_extent *nf = realloc(s->free, ncap * sizeof(*nf));
    if (!nf) return SMP_ENOMEM;
    s->free = nf;
    s->capfree = ncap;
    return SMP_OK;
}

static void obj_seg_remove_ext(obj_segment *s, size_t i)
{
    memmove(&s->free[i], &s->free[i + 1], (s->nfree - i - 1) * sizeof(obj_extent));
    s->nfree--;
}

static void obj_seg_insert_ext(obj_segment *s, size_t i, uint64_t off, uint64_t len)
{
    memmove(&s->free[i + 1], &s->free[i], (s->nfree - i) * sizeof(obj_extent));
    s->free[i].off = off;
    s->free[i].len = len;
    s->nfree++;
}

/* First fit: reserve len bytes (a multiple of OBJ_ALIGN). SMP_ENOSPC. */
int obj_seg_alloc(obj_segment *s, uint64_t len, uint64_t *off)
{
    int rc = obj_seg_grow(s);
    if (rc < 0) return rc;
    for (size_t i = 0; i < s->nfree; i++) {
        if (s->free[i].len < len) continue;
        *off = s->free[i].off;
        s->free[i].off += len;
        s->free[i].len -= len;
        if (s->free[i].len == 0) obj_seg_remove_ext(s, i);
        s->used += len;
        s->nalloc++;
        return SMP_OK;
    }
    return SMP_ENOSPC;
}

/* Reserve exactly [off, off+len). SMP_ESTATE when it is not wholly free. */
int obj_seg_reserve(obj_segment *s, uint64_t off, uint64_t len)
{
    if (len == 0 || off > s->capacity || len > s->capacity - off) return SMP_ESTATE;
    int rc = obj_seg_grow(s);
    if (rc < 0) return rc;
    size_t lo = 0, hi = s->nfree; /* first extent with off > off */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->free[mid].off <= off) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return SMP_ESTATE;
    obj_extent *e = &s->free[lo - 1];
    if (off + len > e->off + e->len) return SMP_ESTATE;
    uint64_t head = off - e->off;
    uint64_t tail = e->off + e->len - (off + len);
    if (head && tail) {
        e->len = head;
        obj_seg_insert_ext(s, lo, off + len, tail);
    } else if (head) {
        e->len = head;
    } else if (tail) {
        e->off = off + len;
        e->len = tail;
    } else {
        obj_seg_remove_ext(s, lo - 1);
    }
    s->used += len;
    s->nalloc++;
    return SMP_OK;
}

/* Return [off, off+len) to the free list, coalescing with its neighbours.
 * Never allocates. A range overlapping free space (a bug) is ignored. */
void obj_seg_free(obj_segment *s, uint64_t off, uint64_t len)
{
    size_t lo = 0, hi = s->nfree;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->free[mid].off <= off) lo = mid + 1;
        else hi = mid;
    }
    if (lo > 0 && s->free[lo - 1].off + s->free[lo - 1].len > off) return;
    if (lo < s->nfree && off + len > s->free[lo].off) return;
    int join_prev = lo > 0 && s->free[lo - 1].off + s->free[lo - 1].len == off;
    int join_next = lo < s->nfree && off + len == s->free[lo].off;
    if (join_prev && join_next) {
        s->free[lo - 1].len += len + s->free[lo].len;
        obj_seg_remove_ext(s, lo);
    } else if (join_prev) {
        s->free[lo - 1].len += len;
    } else if (join_next) {
        s->free[lo].off = off;
        s->free[lo].len += len;
    } else {
        obj_seg_insert_ext(s, lo, off, len); /* capfree >= nalloc + 2 > nfree */
    }
    s->used -= len;
    s->nalloc--;
}

int obj_seg_is_free(const obj_segment *s, uint64_t off, uint64_t len)
{
    if (len == 0 || off > s->capacity || len > s->capacity - off) return 0;
    size_t lo = 0, hi = s->nfree; /* first extent with off > off */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->free[mid].off <= off) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && off + len <= s->free[lo - 1].off + s->free[lo - 1].len;
}

/* Grow the capacity to cap; a smaller cap leaves the segment as it is (a
 * remount never shrinks; obj_seg_set_capacity does, when the tail is free).
 * Never allocates (capfree >= nalloc + 2 >= nfree + 1). */
void obj_seg_grow_capacity(obj_segment *s, uint64_t cap)
{
    if (cap <= s->capacity) return;
    obj_extent *last = s->nfree ? &s->free[s->nfree - 1] : NULL;
    if (last && last->off + last->len == s->capacity) last->len += cap - s->capacity;
    else obj_seg_insert_ext(s, s->nfree, s->capacity, cap - s->capacity);
    s->capacity = cap;
}

/* Set the capacity to cap: grow as obj_seg_grow_capacity, or shrink when
 * [cap, capacity) is wholly free (else nothing changes: a range was taken
 * there since the record was prepared). Never allocates. */
void obj_seg_set_capacity(obj_segment *s, uint64_t cap)
{
    if (cap >= s->capacity) {
        obj_seg_grow_capacity(s, cap);
        return;
    }
    if (obj_seg_tail_used(s) > cap) return;
    obj_extent *last = &s->free[s->nfree - 1]; /* ends at capacity: tail_used <= cap < capacity */
    last->len -= s->capacity - cap;
    if (last->len == 0) obj_seg_remove_ext(s, s->nfree - 1);
    s->capacity = cap;
}

/* The end of the last occupied byte: capacity unless the last free range
 * reaches it, then that range's start. */
uint64_t obj_seg_tail_used(const obj_segment *s)
{
    if (s->nfree > 0 && s->free[s->nfree - 1].off + s->free[s->nfree - 1].len == s->capacity)
        return s->free[s->nfree - 1].off;
    return s->capacity;
}

/* Make sure extra more allocations need no growth of the free array. The
 * array at least doubles when it grows, as obj_seg_grow's does: grown to
 * the exact need, every object of a snapshot load (each reserving its
 * memory replica after this) reallocated it by one extent, some 200,000
 * reallocations of an array of up to 3 MiB, each a copy into fresh pages
 * whenever the allocator could not grow it in place. */
int obj_seg_ensure(obj_segment *s, size_t extra)
{
    size_t need = s->nalloc + 3 + extra;
    if (s->capfree >= need) return SMP_OK;
    size_t ncap = s->capfree * 2 > need ? s->capfree * 2 : need;
    obj_extent *nf = realloc(s->free, ncap * sizeof(*nf));
    if (!nf) return SMP_ENOMEM;
    s->free = nf;
    s->capfree = ncap;
    return SMP_OK;
}

void obj_segment_free(obj_segment *s)
{
    if (!s) return;
    obj_segment_zones_free(s);
    free(s->id);
    free(s->node);
    free(s->free);
    free(s);
}

obj_segment *obj_segment_new(const char *id, const char *node, uint64_t cap)
{
    obj_segment *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->id = strdup(id);
    s->node = strdup(node);
    s->capfree = 4;
    s->free = malloc(s->capfree * sizeof(obj_extent));
    if (!s->id || !s->node || !s->free) {
        obj_segment_free(s);
        return NULL;
    }
    s->capacity = cap;
    if (cap > 0) {
        s->free[0].off = 0;
        s->free[0].len = cap;
        s->nfree = 1;
    }
    return s;
}

/* -- fsck: the unoccupied ranges of a segment ------------------------------- */

int obj_segment_free_ranges(const obj_store *st, const char *id, uint64_t **out, size_t *n_out,
                            uint64_t *used, uint64_t *capacity)
{
    OBJ_CHECK_CALLER(st);
    obj_segment *s = obj_sl_get((obj_sl *)&st->segments, id);
    if (s == NULL) return SMP_ENOTFOUND;
    uint64_t *v = malloc((s->nfree ? s->nfree : 1) * 2 * sizeof(*v));
    if (v == NULL) return SMP_ENOMEM;
    for (size_t i = 0; i < s->nfree; i++) {
        v[2 * i] = s->free[i].off;
        v[2 * i + 1] = s->free[i].len;
    }
    *out = v;
    *n_out = s->nfree;
    if (used) *used = s->used;
    if (capacity) *capacity = s->capacity;
    return SMP_OK;
}

int obj_segment_hold_range(obj_store *st, const char *id, uint64_t off, uint64_t len)
{
    OBJ_CHECK_CALLER(st);
    obj_segment *s = obj_sl_get(&st->segments, id);
    if (s == NULL) return SMP_ENOTFOUND;
    if (off % OBJ_ALIGN != 0 || len % OBJ_ALIGN != 0) return SMP_EINVAL;
    int rc = obj_seg_reserve(s, off, len);
    if (rc == SMP_OK) s->held += len;
    return rc;
}

void obj_segment_release_range(obj_store *st, const char *id, uint64_t off, uint64_t len)
{
    OBJ_CHECK_CALLER(st);
    obj_segment *s = obj_sl_get(&st->segments, id);
    /* A segment unmounted and mounted again since the hold holds nothing of
     * it: its range may be a replica's now. */
    if (s == NULL || len > s->held || off > s->capacity || len > s->capacity - off) return;
    uint64_t before = s->used;
    obj_seg_free(s, off, len);
    s->held -= before - s->used;
}

int obj_segment_tail_used(const obj_store *st, const char *id, uint64_t *end)
{
    OBJ_CHECK_CALLER(st);
    obj_segment *s = obj_sl_get(&st->segments, id);
    if (s == NULL) return SMP_ENOTFOUND;
    *end = obj_seg_tail_used(s);
    return SMP_OK;
}

uint64_t obj_memory_largest_free(const obj_store *st, const char *tenant)
{
    OBJ_CHECK_CALLER(st);
    uint64_t best = 0;
    for (obj_sl_node *x = obj_sl_after(&st->segments, NULL, 0); x != NULL; x = x->next[0]) {
        const obj_segment *s = x->val;
        if (st->place_ok != NULL && !st->place_ok(st->place_ctx, s->node, obj_str(tenant)))
            continue;
        for (size_t i = 0; i < s->nfree; i++)
            if (s->free[i].len > best) best = s->free[i].len;
    }
    return best;
}
