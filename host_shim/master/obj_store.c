/* obj_store.c -- the master's in-memory metadata for objects, replicas,
 * groups, tenants and memory segments, and the host's OpLog records.
 *
 * Layout: six skip lists keyed by string (objects by key, groups by name,
 * tenants by name, segments by id, in-flight puts by key, replica
 * reservations by key) give ordered access for cursors and prefix listings,
 * each with a hash for exact lookups; each group holds a skip list of its
 * members (keys borrowed from the objects). Holds (keys whose removal or
 * replacement is in the OpLog) are only looked up by key: a plain hash. Objects with a
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
 * See obj_store.h for the choices and the record mapping. */
#include "obj_store.h"

#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_uthash.h"
#include "host_records.pb-c.h"
#include "pb_arena.h"

/* ------------------------------------------------------------------------ */
/* Skip list keyed by string                                                 */
/* ------------------------------------------------------------------------ */

#define OBJ_SL_MAX_LEVEL 24

typedef struct obj_sl_node {
    const char *key; /* borrowed from val's owner */
    void *val;
    int level;
    UT_hash_handle hh; /* exact lookups go through the hash, not the levels */
    /* next[0..level) forward, then level back links (OBJ_SL_PREV): a node
     * found through the hash is unlinked without searching the levels. */
    struct obj_sl_node *next[];
} obj_sl_node;

#define OBJ_SL_PREV(n, i) ((n)->next[(n)->level + (i)])

typedef struct obj_sl {
    obj_sl_node *head;
    obj_sl_node *hash; /* the same nodes, by key */
    int level;
    size_t count;
    uint64_t rng;
} obj_sl;

/* Initialise an empty list. SMP_ENOMEM. */
static int obj_sl_init(obj_sl *sl)
{
    sl->head = calloc(1, sizeof(obj_sl_node) + 2 * OBJ_SL_MAX_LEVEL * sizeof(obj_sl_node *));
    if (!sl->head) return SMP_ENOMEM;
    sl->head->level = OBJ_SL_MAX_LEVEL;
    sl->level = 1;
    sl->hash = NULL;
    sl->count = 0;
    sl->rng = UINT64_C(0x9E3779B97F4A7C15);
    return SMP_OK;
}

/* Free the nodes (not keys or values). */
static void obj_sl_fini(obj_sl *sl)
{
    if (!sl->head) return;
    HASH_CLEAR(hh, sl->hash);
    obj_sl_node *n = sl->head->next[0];
    while (n) {
        obj_sl_node *nx = n->next[0];
        free(n);
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

static obj_sl_node *obj_sl_find(const obj_sl *sl, const char *key)
{
    obj_sl_node *n = NULL;
    HASH_FIND(hh, sl->hash, key, strlen(key), n);
    return n;
}

static void *obj_sl_get(const obj_sl *sl, const char *key)
{
    obj_sl_node *n = obj_sl_find(sl, key);
    return n ? n->val : NULL;
}

/* Insert key -> val, or replace key pointer and value when the key exists
 * (replacement never allocates). SMP_ENOMEM leaves the list unchanged. */
static int obj_sl_put(obj_sl *sl, const char *key, void *val)
{
    obj_sl_node *upd[OBJ_SL_MAX_LEVEL];
    obj_sl_node *n = NULL;
    HASH_FIND(hh, sl->hash, key, strlen(key), n);
    if (n) {
        n->key = key;
        n->hh.key = key; /* same bytes, same hash: only the pointer moves */
        n->val = val;
        return SMP_OK;
    }
    obj_sl_seek(sl, key, upd);
    int lvl = obj_sl_random_level(sl);
    n = malloc(sizeof(*n) + 2 * (size_t)lvl * sizeof(obj_sl_node *));
    if (!n) return SMP_ENOMEM;
    for (int i = sl->level; i < lvl; i++) upd[i] = sl->head;
    if (lvl > sl->level) sl->level = lvl;
    n->key = key;
    n->val = val;
    n->level = lvl;
    HASH_ADD_KEYPTR(hh, sl->hash, n->key, strlen(n->key), n);
    for (int i = 0; i < lvl; i++) {
        n->next[i] = upd[i]->next[i];
        OBJ_SL_PREV(n, i) = upd[i];
        if (n->next[i]) OBJ_SL_PREV(n->next[i], i) = n;
        upd[i]->next[i] = n;
    }
    sl->count++;
    return SMP_OK;
}

/* Unlink and free node n of sl; returns its value. */
static void *obj_sl_unlink(obj_sl *sl, obj_sl_node *n)
{
    for (int i = 0; i < n->level; i++) {
        OBJ_SL_PREV(n, i)->next[i] = n->next[i];
        if (n->next[i]) OBJ_SL_PREV(n->next[i], i) = OBJ_SL_PREV(n, i);
    }
    HASH_DEL(sl->hash, n);
    while (sl->level > 1 && !sl->head->next[sl->level - 1]) sl->level--;
    void *val = n->val;
    free(n);
    sl->count--;
    return val;
}

/* Unlink key; returns its value or NULL when absent. */
static void *obj_sl_del(obj_sl *sl, const char *key)
{
    obj_sl_node *n = obj_sl_find(sl, key);
    return n ? obj_sl_unlink(sl, n) : NULL;
}

/* First node with key > key (>= when inclusive); key NULL: the first node. */
static obj_sl_node *obj_sl_after(const obj_sl *sl, const char *key, int inclusive)
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
/* State                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct obj_extent {
    uint64_t off;
    uint64_t len;
} obj_extent;

typedef struct obj_segment {
    char *id;
    char *node;
    uint64_t capacity;
    uint64_t used;
    size_t nalloc;      /* allocated ranges */
    obj_extent *free;   /* sorted by offset, never adjacent */
    size_t nfree;
    size_t capfree;     /* always >= nalloc + 2 */
} obj_segment;

typedef struct obj_rep {
    smp_replica_kind kind;
    obj_replica_status status;
    char *node;
    obj_segment *seg;   /* MEMORY */
    uint64_t offset;    /* MEMORY */
    uint64_t length;
    char *path;         /* COLD */
} obj_rep;

typedef struct obj_object {
    char *key;             /* key, group and tenant are in strings[] below: */
    char *group;           /* one allocation per object, and the key a */
    char *tenant;          /* lookup compares sits next to the fields */
    uint64_t size;
    smp_data_type data_type;
    uint8_t checksum[32];
    int pinned;
    uint64_t last_access;
    uint64_t put_id;       /* incarnation */
    uint64_t lease_expiry; /* soft */
    obj_rep *reps;
    size_t nreps;
    int in_lru;            /* on the LRU list: has a complete memory replica */
    struct obj_object *lru_prev;
    struct obj_object *lru_next;
    char strings[];
} obj_object;

typedef struct obj_put {
    char *key;
    char *group;
    char *tenant;
    uint64_t size;
    smp_data_type data_type;
    int pinned;
    obj_segment *seg;
    uint64_t offset;
    uint64_t alloc;
    uint64_t started;
    uint64_t put_id;
    int consuming;      /* its PUT_END is being applied: range already freed */
} obj_put;

/* A range reserved for one more memory replica of a complete object
 * (obj_reserve_replica): soft state tied to the incarnation put_id. */
typedef struct obj_reservation {
    char *key;
    obj_segment *seg;
    uint64_t offset;
    uint64_t length;    /* the object's size */
    uint64_t alloc;
    uint64_t started;
    uint64_t put_id;
} obj_reservation;

typedef struct obj_group {
    char *name;
    int managed;
    obj_sl members; /* key -> obj_object */
} obj_group;

typedef struct obj_tenant {
    char *name;
    uint64_t objects;
    uint64_t bytes;
} obj_tenant;

/* A soft hold on a key whose removal or replacement is in the OpLog. Holds
 * are only ever looked up by key, so they live in a plain hash, one
 * allocation each. */
typedef struct obj_hold {
    UT_hash_handle hh;
    uint64_t count;
    char key[];
} obj_hold;

struct obj_store {
    obj_sl objects;
    obj_sl groups;
    obj_sl tenants;
    obj_sl segments;
    obj_sl puts;
    obj_sl reserves;      /* key -> obj_reservation */
    obj_hold *holds;      /* by key */
    uint64_t next_put_id; /* > every incarnation seen */
    obj_object *lru_head; /* oldest access */
    obj_object *lru_tail;
    int bulk_load;        /* LRU appends unsorted; resorted at the end */
    obj_guard_ops guard;
    obj_stats stats;      /* counters; memory fields computed on demand */
};

/* ------------------------------------------------------------------------ */
/* Validation helpers                                                        */
/* ------------------------------------------------------------------------ */

/* 1 when s[0..len) is valid UTF-8 (no overlongs, surrogates or > U+10FFFF). */
static int obj_utf8_valid(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        unsigned cp, min;
        if ((c & 0xE0) == 0xC0) { n = 1; cp = c & 0x1F; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { n = 2; cp = c & 0x0F; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { n = 3; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (len - i <= n) return 0;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += n + 1;
    }
    return 1;
}

/* A string of at most max bytes of valid UTF-8, non-empty unless allowed. */
static int obj_name_ok(const char *s, size_t max, int allow_empty)
{
    if (!s) return allow_empty;
    size_t len = strnlen(s, max + 1);
    if (len > max) return 0;
    if (len == 0) return allow_empty;
    return obj_utf8_valid((const unsigned char *)s, len);
}

int obj_validate_key(const char *key)
{
    return obj_name_ok(key, OBJ_KEY_MAX, 0) ? SMP_OK : SMP_EINVAL;
}

static const char *obj_str(const char *s)
{
    return s ? s : "";
}

/* Bytes a memory replica of length occupies; 0 on overflow. */
static uint64_t obj_ext_len(uint64_t length)
{
    if (length > UINT64_MAX - OBJ_ALIGN) return 0;
    if (length == 0) return OBJ_ALIGN;
    return (length + OBJ_ALIGN - 1) / OBJ_ALIGN * OBJ_ALIGN;
}

static int obj_has_prefix(const char *s, const char *prefix, size_t plen)
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
static int obj_seg_alloc(obj_segment *s, uint64_t len, uint64_t *off)
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
static int obj_seg_reserve(obj_segment *s, uint64_t off, uint64_t len)
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
static void obj_seg_free(obj_segment *s, uint64_t off, uint64_t len)
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

/* Grow the capacity to cap; a smaller cap leaves the segment as it is
 * (shrinking is unmount and mount again), so concurrent updates converge on
 * the largest. Never allocates (capfree >= nalloc + 2 >= nfree + 1). */
static void obj_seg_grow_capacity(obj_segment *s, uint64_t cap)
{
    if (cap <= s->capacity) return;
    obj_extent *last = s->nfree ? &s->free[s->nfree - 1] : NULL;
    if (last && last->off + last->len == s->capacity) last->len += cap - s->capacity;
    else obj_seg_insert_ext(s, s->nfree, s->capacity, cap - s->capacity);
    s->capacity = cap;
}

/* Make sure extra more allocations need no growth of the free array. */
static int obj_seg_ensure(obj_segment *s, size_t extra)
{
    size_t need = s->nalloc + 3 + extra;
    if (s->capfree >= need) return SMP_OK;
    obj_extent *nf = realloc(s->free, need * sizeof(*nf));
    if (!nf) return SMP_ENOMEM;
    s->free = nf;
    s->capfree = need;
    return SMP_OK;
}

static void obj_segment_free(obj_segment *s)
{
    if (!s) return;
    free(s->id);
    free(s->node);
    free(s->free);
    free(s);
}

static obj_segment *obj_segment_new(const char *id, const char *node, uint64_t cap)
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

/* ------------------------------------------------------------------------ */
/* Objects, puts, groups, tenants                                            */
/* ------------------------------------------------------------------------ */

static void obj_rep_clear(obj_rep *r)
{
    free(r->node);
    free(r->path);
    r->node = NULL;
    r->path = NULL;
}

static void obj_object_free(obj_object *o)
{
    if (!o) return;
    for (size_t i = 0; i < o->nreps; i++) obj_rep_clear(&o->reps[i]);
    free(o->reps);
    free(o);
}

static void obj_put_free(obj_put *p)
{
    if (!p) return;
    free(p->key);
    free(p->group);
    free(p->tenant);
    free(p);
}

/* Free an in-flight put's range and the put. */
static void obj_put_forget(obj_store *st, obj_put *p)
{
    obj_seg_free(p->seg, p->offset, p->alloc);
    obj_sl_del(&st->puts, p->key);
    obj_put_free(p);
    st->stats.puts_in_flight--;
}

/* Unlink a reservation and free it; its range is freed when free_range. */
static void obj_reservation_forget(obj_store *st, obj_reservation *r, int free_range)
{
    if (free_range) obj_seg_free(r->seg, r->offset, r->alloc);
    obj_sl_del(&st->reserves, r->key);
    free(r->key);
    free(r);
    st->stats.reservations_in_flight--;
}

static void obj_group_free(obj_group *g)
{
    if (!g) return;
    obj_sl_fini(&g->members);
    free(g->name);
    free(g);
}

static obj_group *obj_group_find(const obj_store *st, const char *name)
{
    if (!name || !name[0]) return NULL;
    return obj_sl_get(&st->groups, name);
}

/* The group of name, created (unmanaged, empty) when absent. *created tells
 * whether it was. NULL on SMP_ENOMEM. */
static obj_group *obj_group_get_or_create(obj_store *st, const char *name, int *created)
{
    *created = 0;
    obj_group *g = obj_sl_get(&st->groups, name);
    if (g) return g;
    g = calloc(1, sizeof(*g));
    if (!g) return NULL;
    g->name = strdup(name);
    if (!g->name || obj_sl_init(&g->members) < 0) goto free_group;
    if (obj_sl_put(&st->groups, g->name, g) < 0) goto free_group;
    *created = 1;
    return g;
free_group:
    obj_group_free(g);
    return NULL;
}

/* Drop a group that is neither managed nor has members. */
static void obj_group_gc(obj_store *st, obj_group *g)
{
    if (g && !g->managed && g->members.count == 0) {
        obj_sl_del(&st->groups, g->name);
        obj_group_free(g);
    }
}

static int obj_group_managed_flag(const obj_store *st, const char *name)
{
    obj_group *g = obj_group_find(st, name);
    return g ? g->managed : 0;
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

static int obj_has_memory(const obj_object *o)
{
    for (size_t i = 0; i < o->nreps; i++)
        if (o->reps[i].kind == SMP_REPLICA_MEMORY && o->reps[i].status == OBJ_REPLICA_COMPLETE)
            return 1;
    return 0;
}

static void obj_lru_unlink(obj_store *st, obj_object *o)
{
    if (!o->in_lru) return;
    o->in_lru = 0;
    if (o->lru_prev) o->lru_prev->lru_next = o->lru_next;
    else st->lru_head = o->lru_next;
    if (o->lru_next) o->lru_next->lru_prev = o->lru_prev;
    else st->lru_tail = o->lru_prev;
    o->lru_prev = o->lru_next = NULL;
}

/* Insert keeping the list sorted by last access (searching from the newest
 * end: accesses mostly arrive in time order). Bulk load appends. Objects
 * without a complete memory replica stay off the list. */
static void obj_lru_insert(obj_store *st, obj_object *o)
{
    if (o->in_lru || !obj_has_memory(o)) return;
    o->in_lru = 1;
    obj_object *p = st->lru_tail;
    if (!st->bulk_load)
        while (p && p->last_access > o->last_access) p = p->lru_prev;
    o->lru_prev = p;
    o->lru_next = p ? p->lru_next : st->lru_head;
    if (o->lru_next) o->lru_next->lru_prev = o;
    else st->lru_tail = o;
    if (p) p->lru_next = o;
    else st->lru_head = o;
}

static int obj_lru_cmp(const void *a, const void *b)
{
    const obj_object *x = *(const obj_object *const *)a;
    const obj_object *y = *(const obj_object *const *)b;
    if (x->last_access != y->last_access) return x->last_access < y->last_access ? -1 : 1;
    return strcmp(x->key, y->key);
}

/* Sort the LRU list after a bulk load. SMP_ENOMEM leaves it unsorted (still
 * a valid list; eviction order is then approximate). */
static int obj_lru_resort(obj_store *st)
{
    size_t n = 0;
    for (obj_object *o = st->lru_head; o; o = o->lru_next) n++;
    if (n < 2) return SMP_OK;
    obj_object **v = malloc(n * sizeof(*v));
    if (!v) return SMP_ENOMEM;
    size_t i = 0;
    for (obj_object *o = st->lru_head; o && i < n; o = o->lru_next) v[i++] = o;
    qsort(v, i, sizeof(*v), obj_lru_cmp);
    st->lru_head = st->lru_tail = NULL;
    for (size_t k = 0; k < i; k++) {
        v[k]->lru_prev = st->lru_tail;
        v[k]->lru_next = NULL;
        if (st->lru_tail) st->lru_tail->lru_next = v[k];
        else st->lru_head = v[k];
        st->lru_tail = v[k];
    }
    free(v);
    return SMP_OK;
}

/* Add (sign +1) or subtract (-1) an object's contribution to the counters. */
static void obj_stats_account(obj_store *st, const obj_object *o, int sign)
{
    uint64_t one = (uint64_t)(int64_t)sign;
    st->stats.objects_by_type[o->data_type] += one;
    st->stats.bytes_by_type[o->data_type] += one * o->size;
    for (size_t i = 0; i < o->nreps; i++) {
        if (o->reps[i].status != OBJ_REPLICA_COMPLETE) continue;
        st->stats.replicas_by_kind[o->reps[i].kind] += one;
        st->stats.replica_bytes_by_kind[o->reps[i].kind] += one * o->reps[i].length;
    }
}

static void obj_put_forget(obj_store *st, obj_put *p);

/* Cancel the in-flight puts and replica reservations (soft state)
 * overlapping [off, off+len) of seg: a durable record outranks them, and
 * replay, which has neither, must come to the same state. Returns how many
 * were cancelled. */
static int obj_cancel_puts_in(obj_store *st, const obj_segment *seg, uint64_t off, uint64_t len)
{
    int n = 0;
    for (obj_sl_node *x = obj_sl_after(&st->puts, NULL, 0); x;) {
        obj_put *p = x->val;
        x = x->next[0];
        if (p->consuming || p->seg != seg || p->offset >= off + len ||
            off >= p->offset + p->alloc)
            continue;
        obj_put_forget(st, p);
        st->stats.puts_cancelled++;
        n++;
    }
    for (obj_sl_node *x = obj_sl_after(&st->reserves, NULL, 0); x;) {
        obj_reservation *r = x->val;
        x = x->next[0];
        if (r->seg != seg || r->offset >= off + len || off >= r->offset + r->alloc) continue;
        obj_reservation_forget(st, r, 1);
        st->stats.reservations_cancelled++;
        n++;
    }
    return n;
}

/* Reserve the ranges of o's memory replicas, cancelling in-flight puts in
 * the way. A replica whose range is still not free is left out of o and
 * counted (a record that lost a race with another one; replay makes the
 * same choice). SMP_ENOMEM with nothing reserved. */
static int obj_object_reserve(obj_store *st, obj_object *o)
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

static void obj_object_release(obj_object *o)
{
    for (size_t i = 0; i < o->nreps; i++) {
        obj_rep *r = &o->reps[i];
        if (r->kind == SMP_REPLICA_MEMORY)
            obj_seg_free(r->seg, r->offset, obj_ext_len(r->length));
    }
}

/* Take the object of node at (a node of st->objects) out of every index,
 * free its ranges, and free it. */
static void obj_object_drop(obj_store *st, obj_sl_node *at)
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
    obj_object_release(o);
    obj_object_free(o);
}

/* Put n (ranges already reserved) into the indexes in place of old (NULL:
 * none; its ranges already released). Every allocation happens before the
 * first change: on SMP_ENOMEM nothing changed. old is not freed. */
static int obj_object_index(obj_store *st, obj_object *n, obj_object *old)
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
            if ((rc = obj_sl_put(&g->members, n->key, n)) < 0) goto drop_group;
            member_added = 1;
        }
    }
    if (!old && (rc = obj_sl_put(&st->objects, n->key, n)) < 0) goto drop_member;

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
        obj_stats_account(st, old, -1);
        obj_lru_unlink(st, old);
    }
    if (t) {
        t->objects++;
        t->bytes += n->size;
    }
    if (old && old->tenant[0]) {
        obj_tenant *ot = obj_sl_get(&st->tenants, old->tenant);
        if (ot && ot->objects == 0) obj_tenant_drop(st, ot);
    }
    obj_stats_account(st, n, +1);
    obj_lru_insert(st, n);
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
/* Guard                                                                     */
/* ------------------------------------------------------------------------ */

static int obj_guard_loaded(const obj_store *st)
{
    if (st->guard.loaded) return st->guard.loaded(st->guard.ctx) ? 1 : 0;
    return st->guard.check != NULL;
}

/* Decide one guarded action. host_forbids: the host's managed-group rule
 * refuses it when no plugin guard is loaded. With a guard loaded the guard
 * alone decides. Returns SMP_OK or SMP_EVETO, counting refusals. */
static int obj_guard_decide(obj_store *st,
                            smp_guard_reason reason,
                            const char *key,
                            const char *group,
                            smp_data_type data_type,
                            smp_replica_kind kind,
                            int host_forbids)
{
    if (!obj_guard_loaded(st)) {
        if (!host_forbids) return SMP_OK;
        st->stats.host_refusals[reason]++;
        return SMP_EVETO;
    }
    smp_guard_request req;
    memset(&req, 0, sizeof(req));
    req.struct_size = sizeof(req);
    req.reason = reason;
    req.key = key;
    req.group = obj_str(group);
    req.group_managed = obj_group_managed_flag(st, group);
    req.data_type = data_type;
    req.replica_kind = kind;
    int r = st->guard.check ? st->guard.check(st->guard.ctx, &req) : SMP_GUARD_VETO;
    if (r == SMP_GUARD_ALLOW) return SMP_OK;
    st->stats.guard_vetoes[reason]++;
    return SMP_EVETO;
}

/* ------------------------------------------------------------------------ */
/* Records: encoding                                                         */
/* ------------------------------------------------------------------------ */

/* What a hold keeps until its release: the record's decoded message, which
 * names the held keys and is what obj_apply_held applies. Its pieces come
 * from an arena in the same allocation (pb_arena.h), so a hold costs one
 * malloc; room for twice the record's bytes covers the strings and arrays
 * a decode makes, and anything beyond goes to malloc. */
struct obj_held {
    ProtobufCMessage *m;
    pb_arena arena;
    uint8_t mem[];
};

#define OBJ_HELD_SLACK 512

/* A hold with an arena of cap bytes and no message yet, or NULL. */
static obj_held *obj_held_new(size_t cap)
{
    obj_held *h = malloc(sizeof(*h) + cap);
    if (!h) return NULL;
    h->m = NULL;
    pb_arena_init(&h->arena, h->mem, cap);
    return h;
}

static void obj_held_free(obj_held *h)
{
    if (!h) return;
    pb_arena_free_unpacked(&h->arena, h->m);
    free(h);
}

/* The hold of the REMOVE record of keys[n] (incarnations put_ids[n]), built
 * from them rather than decoded from the record: the message a decode of
 * the record gives, its pieces from the hold's arena. SMP_ENOMEM. */
static int obj_held_remove(const char *const *keys,
                           const uint64_t *put_ids,
                           size_t n,
                           obj_held **out)
{
    const size_t piece = alignof(max_align_t); /* the arena's rounding */
    size_t cap = sizeof(Hostrec__RemoveRecord) + n * (sizeof(char *) + sizeof(uint64_t)) +
                 (n + 3) * piece;
    for (size_t i = 0; i < n; i++) cap += strlen(keys[i]) + 1;
    obj_held *h = obj_held_new(cap);
    if (!h) return SMP_ENOMEM;
    ProtobufCAllocator *a = &h->arena.alloc;
    Hostrec__RemoveRecord *r = a->alloc(a->allocator_data, sizeof(*r));
    if (!r) goto fail;
    hostrec__remove_record__init(r);
    h->m = &r->base;
    if (n == 0) goto done;
    r->keys = a->alloc(a->allocator_data, n * sizeof(char *));
    r->put_ids = a->alloc(a->allocator_data, n * sizeof(uint64_t));
    if (!r->keys || !r->put_ids) goto fail; /* the counts bound what gets freed */
    memcpy(r->put_ids, put_ids, n * sizeof(uint64_t));
    r->n_put_ids = n;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(keys[i]);
        if ((r->keys[i] = a->alloc(a->allocator_data, len + 1)) == NULL) goto fail;
        memcpy(r->keys[i], keys[i], len + 1);
        r->n_keys = i + 1;
    }
done:
    *out = h;
    return SMP_OK;
fail:
    obj_held_free(h);
    return SMP_ENOMEM;
}

void obj_record_free(obj_record *r)
{
    if (!r) return;
    free(r->buf);
    obj_held_free(r->held);
    memset(r, 0, sizeof(*r));
}

void obj_record_list_free(obj_record_list *l)
{
    if (!l) return;
    for (size_t i = 0; i < l->n; i++) obj_record_free(&l->recs[i]);
    free(l->recs);
    memset(l, 0, sizeof(*l));
}

/* Truncate l back to n records (undo of a failed plan). */
static void obj_record_list_truncate(obj_record_list *l, size_t n)
{
    while (l->n > n) obj_record_free(&l->recs[--l->n]);
}

/* Pack msg into a malloc'd buffer as a record of type. SMP_ENOMEM. */
static int obj_encode(const ProtobufCMessage *msg, uint16_t type, obj_record *out)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return SMP_ENOMEM;
    protobuf_c_message_pack(msg, buf);
    out->type = type;
    out->encver = OBJ_REC_ENCVER;
    out->buf = buf;
    out->len = len;
    out->held = NULL;
    return SMP_OK;
}

static int obj_list_push(obj_record_list *l, obj_record *r)
{
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 8;
        obj_record *nr = realloc(l->recs, ncap * sizeof(*nr));
        if (!nr) return SMP_ENOMEM;
        l->recs = nr;
        l->cap = ncap;
    }
    l->recs[l->n++] = *r;
    memset(r, 0, sizeof(*r));
    return SMP_OK;
}

/* Fill m from a replica view. Strings are borrowed (cast: packing only). */
static void obj_msg_replica(Hostrec__Replica *m, const obj_replica *r)
{
    hostrec__replica__init(m);
    m->kind = (uint32_t)r->kind;
    m->status = (uint32_t)r->status;
    m->node = (char *)obj_str(r->node);
    m->length = r->length;
    if (r->kind == SMP_REPLICA_MEMORY) {
        m->segment = (char *)obj_str(r->segment);
        m->offset = r->offset;
    } else {
        m->path = (char *)obj_str(r->path);
    }
}

static void obj_rep_view(const obj_rep *r, obj_replica *v)
{
    v->kind = r->kind;
    v->status = r->status;
    v->node = r->node;
    v->segment = r->seg ? r->seg->id : NULL;
    v->offset = r->offset;
    v->length = r->length;
    v->path = r->path;
}

/* Encode o as an ObjectRecord (type PUT_END) with the replica list views[n]
 * (NULL: o's own); update_only marks a change of an existing incarnation;
 * added (NULL: none) makes it an add-replica record of that memory replica.
 * SMP_ENOMEM. */
static int obj_encode_object_add(const obj_object *o,
                                 const obj_replica *views,
                                 size_t n,
                                 int update_only,
                                 const obj_replica *added,
                                 obj_record *out)
{
    int rc;
    obj_replica *own = NULL;
    Hostrec__Replica *rm = NULL;
    Hostrec__Replica **rp = NULL;
    if (!views) {
        n = o->nreps;
        own = calloc(n ? n : 1, sizeof(*own));
        if (!own) return SMP_ENOMEM;
        for (size_t i = 0; i < n; i++) obj_rep_view(&o->reps[i], &own[i]);
        views = own;
    }
    rm = calloc(n ? n : 1, sizeof(*rm));
    rp = calloc(n ? n : 1, sizeof(*rp));
    if (!rm || !rp) { rc = SMP_ENOMEM; goto free_msgs; }
    for (size_t i = 0; i < n; i++) {
        obj_msg_replica(&rm[i], &views[i]);
        rp[i] = &rm[i];
    }
    Hostrec__ObjectRecord m = HOSTREC__OBJECT_RECORD__INIT;
    m.key = o->key;
    m.size = o->size;
    m.data_type = (uint32_t)o->data_type;
    m.group = o->group;
    m.tenant = o->tenant;
    m.checksum.data = (uint8_t *)o->checksum;
    m.checksum.len = sizeof(o->checksum);
    m.hard_pinned = o->pinned ? 1 : 0;
    m.last_access_ms = o->last_access;
    m.n_replicas = n;
    m.replicas = rp;
    m.put_id = o->put_id;
    m.update_only = update_only ? 1 : 0;
    Hostrec__Replica am;
    if (added) {
        obj_msg_replica(&am, added);
        m.add_replica = &am;
    }
    rc = obj_encode(&m.base, OBJ_REC_PUT_END, out);
free_msgs:
    free(rp);
    free(rm);
    free(own);
    return rc;
}

static int obj_encode_object(const obj_object *o,
                             const obj_replica *views,
                             size_t n,
                             int update_only,
                             obj_record *out)
{
    return obj_encode_object_add(o, views, n, update_only, NULL, out);
}

/* Encode a RemoveRecord of keys[n], each only while it is incarnation
 * put_ids[i]. */
static int obj_encode_remove(const char *const *keys,
                             const uint64_t *put_ids,
                             size_t n,
                             obj_record *out)
{
    Hostrec__RemoveRecord m = HOSTREC__REMOVE_RECORD__INIT;
    m.n_keys = n;
    m.keys = (char **)keys;
    m.n_put_ids = n;
    m.put_ids = (uint64_t *)put_ids;
    int rc = obj_encode(&m.base, OBJ_REC_REMOVE, out);
    if (rc == SMP_OK && (rc = obj_held_remove(keys, put_ids, n, &out->held)) < 0)
        obj_record_free(out);
    return rc;
}

/* Keys collected for REMOVE records of at most OBJ_REMOVE_BATCH keys. */
typedef struct obj_keybatch {
    const char *keys[OBJ_REMOVE_BATCH];
    uint64_t put_ids[OBJ_REMOVE_BATCH];
    size_t n;
} obj_keybatch;

static int obj_keybatch_flush(obj_keybatch *b, obj_record_list *out)
{
    if (b->n == 0) return SMP_OK;
    obj_record r = {0};
    int rc = obj_encode_remove(b->keys, b->put_ids, b->n, &r);
    if (rc < 0) return rc;
    if ((rc = obj_list_push(out, &r)) < 0) obj_record_free(&r);
    b->n = 0;
    return rc;
}

static int obj_keybatch_add(obj_keybatch *b, const obj_object *o, obj_record_list *out)
{
    b->keys[b->n] = o->key;
    b->put_ids[b->n] = o->put_id;
    b->n++;
    return b->n == OBJ_REMOVE_BATCH ? obj_keybatch_flush(b, out) : SMP_OK;
}

/* ------------------------------------------------------------------------ */
/* Records: decoding and apply                                               */
/* ------------------------------------------------------------------------ */

/* 1 when every field of an object record is well formed. */
static int obj_object_msg_ok(const Hostrec__ObjectRecord *m)
{
    if (!obj_name_ok(m->key, OBJ_KEY_MAX, 0) || !obj_name_ok(m->group, OBJ_GROUP_MAX, 1) ||
        !obj_name_ok(m->tenant, OBJ_NAME_MAX, 1) || m->data_type > SMP_DATA_WEIGHT ||
        m->checksum.len != 32 || m->n_replicas > OBJ_REPLICAS_MAX)
        return 0;
    for (size_t i = 0; i < m->n_replicas; i++) {
        const Hostrec__Replica *r = m->replicas[i];
        if (r->kind > SMP_REPLICA_COLD || r->status > OBJ_REPLICA_FAILED ||
            !obj_name_ok(r->node, OBJ_NAME_MAX, 0))
            return 0;
        if (r->kind == SMP_REPLICA_MEMORY) {
            if (!obj_name_ok(r->segment, OBJ_NAME_MAX, 0) || obj_ext_len(r->length) == 0 ||
                r->offset % OBJ_ALIGN != 0)
                return 0;
        } else if (!obj_name_ok(r->path, OBJ_PATH_MAX, 0)) {
            return 0;
        }
    }
    return 1;
}

/* Whether a memory replica of a record can exist in this state: its segment
 * is mounted on its node and holds the range, and -- for an update of the
 * incarnation `only` -- `only` has that very replica. */
static obj_segment *obj_memory_rep_place(obj_store *st,
                                         const Hostrec__Replica *r,
                                         const obj_object *only)
{
    obj_segment *s = obj_sl_get(&st->segments, r->segment);
    if (!s || strcmp(s->node, r->node) != 0 || r->offset > s->capacity ||
        obj_ext_len(r->length) > s->capacity - r->offset)
        return NULL;
    if (!only) return s;
    for (size_t i = 0; i < only->nreps; i++) {
        const obj_rep *e = &only->reps[i];
        if (e->kind == SMP_REPLICA_MEMORY && e->seg == s && e->offset == r->offset &&
            e->length == r->length)
            return s;
    }
    return NULL;
}

/* Build an object from a well-formed record. Memory replicas that cannot
 * exist here (see obj_memory_rep_place) are left out and counted. SMP_ENOMEM.
 * Nothing is reserved or indexed. */
static int obj_object_build(obj_store *st,
                            const Hostrec__ObjectRecord *m,
                            const obj_object *only,
                            obj_object **out)
{
    size_t kl = strlen(m->key) + 1, gl = strlen(m->group) + 1, tl = strlen(m->tenant) + 1;
    obj_object *o = calloc(1, sizeof(*o) + kl + gl + tl);
    if (!o) return SMP_ENOMEM;
    o->key = memcpy(o->strings, m->key, kl);
    o->group = memcpy(o->strings + kl, m->group, gl);
    o->tenant = memcpy(o->strings + kl + gl, m->tenant, tl);
    o->reps = calloc(m->n_replicas ? m->n_replicas : 1, sizeof(obj_rep));
    if (!o->reps) goto free_object;
    o->size = m->size;
    o->data_type = (smp_data_type)m->data_type;
    memcpy(o->checksum, m->checksum.data, 32);
    o->pinned = m->hard_pinned ? 1 : 0;
    o->last_access = m->last_access_ms;
    o->put_id = m->put_id;
    for (size_t i = 0; i < m->n_replicas; i++) {
        const Hostrec__Replica *r = m->replicas[i];
        obj_segment *seg = NULL;
        if (r->kind == SMP_REPLICA_MEMORY && !(seg = obj_memory_rep_place(st, r, only))) {
            st->stats.replicas_dropped++;
            continue;
        }
        obj_rep *d = &o->reps[o->nreps++];
        d->kind = (smp_replica_kind)r->kind;
        d->status = (obj_replica_status)r->status;
        d->length = r->length;
        d->node = strdup(r->node);
        if (!d->node) goto free_object;
        if (d->kind == SMP_REPLICA_MEMORY) {
            d->seg = seg;
            d->offset = r->offset;
        } else {
            d->path = strdup(r->path);
            if (!d->path) goto free_object;
        }
    }
    *out = o;
    return SMP_OK;
free_object:
    obj_object_free(o);
    return SMP_ENOMEM;
}

/* 1 when the add_replica of a well-formed record is well formed: a memory
 * replica of the object's size in an update-only record. */
static int obj_add_msg_ok(const Hostrec__ObjectRecord *m)
{
    const Hostrec__Replica *a = m->add_replica;
    return m->update_only && a->kind == SMP_REPLICA_MEMORY && a->status <= OBJ_REPLICA_FAILED &&
           obj_name_ok(a->node, OBJ_NAME_MAX, 0) && obj_name_ok(a->segment, OBJ_NAME_MAX, 0) &&
           a->length == m->size && obj_ext_len(a->length) != 0 && a->offset % OBJ_ALIGN == 0;
}

/* PUT_END with add_replica: add that one memory replica to incarnation
 * put_id and change nothing else (the rest of the record is for readers that
 * do not know the field). Decided from durable state alone, like replay:
 * the replica is added when the object is that incarnation, lacks it, has
 * room for one more replica, and the segment is mounted on the replica's
 * node with the range free once soft state yields; otherwise the record is a
 * no-op (counted in replicas_dropped when the replica could not exist). The
 * reservation the record was prepared from (same key, incarnation and range)
 * is consumed in every case; no other is touched but by yielding its range. */
static int obj_apply_add_replica(obj_store *st, const Hostrec__ObjectRecord *m)
{
    const Hostrec__Replica *a = m->add_replica;
    uint64_t ext = obj_ext_len(a->length);
    obj_object *o = obj_sl_get(&st->objects, m->key);
    obj_segment *s = obj_sl_get(&st->segments, a->segment);
    obj_reservation *res = obj_sl_get(&st->reserves, m->key);
    int own = res && s && res->put_id == m->put_id && res->seg == s &&
              res->offset == a->offset && res->alloc == ext;
    if (!o || o->put_id != m->put_id) goto consume; /* removed or replaced since */
    for (size_t i = 0; i < o->nreps; i++) {
        const obj_rep *e = &o->reps[i];
        if (e->kind == SMP_REPLICA_MEMORY && e->seg == s && e->offset == a->offset &&
            e->length == a->length)
            goto consume; /* applied already */
    }
    if (!s || strcmp(s->node, a->node) != 0 || a->offset > s->capacity ||
        ext > s->capacity - a->offset || o->size != a->length || o->nreps >= OBJ_REPLICAS_MAX)
        goto dropped;

    /* Every allocation before the first change. */
    obj_rep *reps = realloc(o->reps, (o->nreps + 1) * sizeof(*reps));
    if (!reps) return SMP_ENOMEM;
    o->reps = reps;
    char *node = strdup(a->node);
    if (!node) return SMP_ENOMEM;
    if (obj_seg_ensure(s, 1) < 0) {
        free(node);
        return SMP_ENOMEM;
    }
    if (own) {
        obj_reservation_forget(st, res, 1);
        own = 0;
    }
    if (obj_seg_reserve(s, a->offset, ext) < 0 &&
        (obj_cancel_puts_in(st, s, a->offset, ext) == 0 ||
         obj_seg_reserve(s, a->offset, ext) < 0)) {
        free(node);
        goto dropped;
    }
    obj_stats_account(st, o, -1);
    obj_rep *d = &o->reps[o->nreps++];
    memset(d, 0, sizeof(*d));
    d->kind = SMP_REPLICA_MEMORY;
    d->status = (obj_replica_status)a->status;
    d->node = node;
    d->seg = s;
    d->offset = a->offset;
    d->length = a->length;
    obj_stats_account(st, o, +1);
    obj_lru_insert(st, o);
    return SMP_OK;

dropped:
    st->stats.replicas_dropped++;
consume:
    if (own) obj_reservation_forget(st, res, 1);
    return SMP_OK;
}

/* PUT_END: replace (or create) the object with the record's state. The
 * in-flight put whose range the record names is consumed. A record about an
 * older incarnation than the current one -- or, when update_only, about any
 * other incarnation or an absent key -- is a no-op. An add-replica record
 * goes to obj_apply_add_replica. */
static int obj_apply_object(obj_store *st, const Hostrec__ObjectRecord *m)
{
    int rc;
    if (!obj_object_msg_ok(m) || (m->add_replica && !obj_add_msg_ok(m))) return SMP_EPROTO;
    if (m->put_id >= st->next_put_id)
        st->next_put_id = m->put_id == UINT64_MAX ? UINT64_MAX : m->put_id + 1;
    if (m->add_replica) return obj_apply_add_replica(st, m);
    obj_object *old = obj_sl_get(&st->objects, m->key);
    if (m->update_only ? (!old || old->put_id != m->put_id) : (old && old->put_id > m->put_id))
        return SMP_OK;
    obj_object *n = NULL;
    if ((rc = obj_object_build(st, m, m->update_only ? old : NULL, &n)) < 0) return rc;
    obj_put *put = obj_sl_get(&st->puts, n->key);
    int consume = 0;
    for (size_t i = 0; put && i < n->nreps; i++) {
        const obj_rep *r = &n->reps[i];
        if (r->kind == SMP_REPLICA_MEMORY && r->seg == put->seg && r->offset == put->offset &&
            obj_ext_len(r->length) == put->alloc)
            consume = 1;
    }
    if (old) {
        n->lease_expiry = old->lease_expiry;
        obj_object_release(old);
    }
    if (consume) {
        obj_seg_free(put->seg, put->offset, put->alloc);
        put->consuming = 1;
    }
    if ((rc = obj_object_reserve(st, n)) < 0) goto restore_ranges;
    if ((rc = obj_object_index(st, n, old)) < 0) goto release_new;
    if (consume) {
        obj_sl_del(&st->puts, put->key);
        obj_put_free(put);
        st->stats.puts_in_flight--;
    }
    obj_object_free(old);
    return SMP_OK;

release_new:
    obj_object_release(n);
restore_ranges:
    if (consume) {
        put->consuming = 0;
        obj_seg_reserve(put->seg, put->offset, put->alloc);
    }
    if (old) obj_object_reserve(st, old);
    obj_object_free(n);
    return rc;
}

static int obj_apply_remove(obj_store *st, const Hostrec__RemoveRecord *m)
{
    if (m->n_put_ids && m->n_put_ids != m->n_keys) return SMP_EPROTO;
    for (size_t i = 0; i < m->n_keys; i++)
        if (!obj_name_ok(m->keys[i], OBJ_KEY_MAX, 0)) return SMP_EPROTO;
    for (size_t i = 0; i < m->n_keys; i++) {
        obj_sl_node *at = obj_sl_find(&st->objects, m->keys[i]);
        obj_object *o = at ? at->val : NULL;
        if (o && (!m->n_put_ids || o->put_id == m->put_ids[i])) obj_object_drop(st, at);
    }
    return SMP_OK;
}

static int obj_apply_put_revoke(obj_store *st, const Hostrec__PutRevokeRecord *m)
{
    if (!obj_name_ok(m->key, OBJ_KEY_MAX, 0) || !obj_name_ok(m->segment, OBJ_NAME_MAX, 1))
        return SMP_EPROTO;
    obj_put *p = obj_sl_get(&st->puts, m->key);
    if (!p || strcmp(p->seg->id, m->segment) != 0 || p->offset != m->offset ||
        p->size != m->length)
        return SMP_OK; /* not in flight here (replay, standby): nothing to free */
    obj_put_forget(st, p);
    return SMP_OK;
}

static int obj_segment_msg_ok(const Hostrec__SegmentRecord *m)
{
    return obj_name_ok(m->id, OBJ_NAME_MAX, 0) && obj_name_ok(m->node, OBJ_NAME_MAX, 0);
}

static int obj_apply_segment_mount(obj_store *st, const Hostrec__SegmentRecord *m)
{
    if (!obj_segment_msg_ok(m)) return SMP_EPROTO;
    uint64_t cap = m->capacity / OBJ_ALIGN * OBJ_ALIGN;
    obj_segment *s = obj_sl_get(&st->segments, m->id);
    if (s) {
        if (strcmp(s->node, m->node) != 0) return SMP_ESTATE; /* a conflicting mount */
        obj_seg_grow_capacity(s, cap);
        return SMP_OK;
    }
    s = obj_segment_new(m->id, m->node, cap);
    if (!s) return SMP_ENOMEM;
    if (obj_sl_put(&st->segments, s->id, s) < 0) {
        obj_segment_free(s);
        return SMP_ENOMEM;
    }
    return SMP_OK;
}

/* Drop the segment, every memory replica in it and every put and replica
 * reservation into it. Scans the objects (unmount is rare). */
static int obj_apply_segment_unmount(obj_store *st, const Hostrec__SegmentUnmountRecord *m)
{
    if (!obj_name_ok(m->id, OBJ_NAME_MAX, 0)) return SMP_EPROTO;
    obj_segment *s = obj_sl_get(&st->segments, m->id);
    if (!s) return SMP_OK;
    for (obj_sl_node *x = obj_sl_after(&st->objects, NULL, 0); x; x = x->next[0]) {
        obj_object *o = x->val;
        size_t k = 0;
        obj_stats_account(st, o, -1);
        for (size_t i = 0; i < o->nreps; i++) {
            if (o->reps[i].kind == SMP_REPLICA_MEMORY && o->reps[i].seg == s)
                obj_rep_clear(&o->reps[i]);
            else
                o->reps[k++] = o->reps[i];
        }
        o->nreps = k;
        obj_stats_account(st, o, +1);
        if (!obj_has_memory(o)) obj_lru_unlink(st, o);
    }
    for (obj_sl_node *x = obj_sl_after(&st->puts, NULL, 0); x;) {
        obj_put *p = x->val;
        x = x->next[0];
        if (p->seg != s) continue;
        obj_sl_del(&st->puts, p->key);
        obj_put_free(p);
        st->stats.puts_in_flight--;
    }
    for (obj_sl_node *x = obj_sl_after(&st->reserves, NULL, 0); x;) {
        obj_reservation *r = x->val;
        x = x->next[0];
        if (r->seg == s) obj_reservation_forget(st, r, 0);
    }
    obj_sl_del(&st->segments, s->id);
    obj_segment_free(s);
    return SMP_OK;
}

/* Set a group's managed flag, creating or dropping the group entry. */
static int obj_set_group_managed(obj_store *st, const char *name, int managed)
{
    if (!obj_name_ok(name, OBJ_GROUP_MAX, 0)) return SMP_EPROTO;
    obj_group *g = obj_sl_get(&st->groups, name);
    if (!g && !managed) return SMP_OK;
    int created;
    if (!g && !(g = obj_group_get_or_create(st, name, &created))) return SMP_ENOMEM;
    g->managed = managed ? 1 : 0;
    obj_group_gc(st, g);
    return SMP_OK;
}

static int obj_apply_update(obj_store *st, const Hostrec__UpdateRecord *m)
{
    switch (m->change_case) {
    case HOSTREC__UPDATE_RECORD__CHANGE_SEGMENT: {
        if (!m->segment || !obj_segment_msg_ok(m->segment)) return SMP_EPROTO;
        /* A segment unmounted (or remounted elsewhere) since: nothing to do. */
        obj_segment *s = obj_sl_get(&st->segments, m->segment->id);
        if (s && strcmp(s->node, m->segment->node) == 0)
            obj_seg_grow_capacity(s, m->segment->capacity / OBJ_ALIGN * OBJ_ALIGN);
        return SMP_OK;
    }
    case HOSTREC__UPDATE_RECORD__CHANGE_GROUP:
        if (!m->group) return SMP_EPROTO;
        return obj_set_group_managed(st, m->group->name, m->group->managed);
    default:
        return SMP_EPROTO;
    }
}

int obj_apply_record(obj_store *st,
                     uint16_t type,
                     uint16_t encver,
                     const uint8_t *payload,
                     size_t len)
{
    int rc;
    if (type < 1 || type > SMP_OPLOG_HOST_TYPE_MAX || type == 4) return SMP_ENOTFOUND;
    if (encver != OBJ_REC_ENCVER || (!payload && len)) return SMP_EPROTO;
    static const uint8_t empty[1];
    if (!payload) payload = empty;
    switch (type) {
    case OBJ_REC_PUT_END: {
        Hostrec__ObjectRecord *m = hostrec__object_record__unpack(NULL, len, payload);
        if (!m) return SMP_EPROTO;
        rc = obj_apply_object(st, m);
        hostrec__object_record__free_unpacked(m, NULL);
        return rc;
    }
    case OBJ_REC_PUT_REVOKE: {
        Hostrec__PutRevokeRecord *m = hostrec__put_revoke_record__unpack(NULL, len, payload);
        if (!m) return SMP_EPROTO;
        rc = obj_apply_put_revoke(st, m);
        hostrec__put_revoke_record__free_unpacked(m, NULL);
        return rc;
    }
    case OBJ_REC_REMOVE: {
        Hostrec__RemoveRecord *m = hostrec__remove_record__unpack(NULL, len, payload);
        if (!m) return SMP_EPROTO;
        rc = obj_apply_remove(st, m);
        hostrec__remove_record__free_unpacked(m, NULL);
        return rc;
    }
    case OBJ_REC_SEGMENT_MOUNT: {
        Hostrec__SegmentRecord *m = hostrec__segment_record__unpack(NULL, len, payload);
        if (!m) return SMP_EPROTO;
        rc = obj_apply_segment_mount(st, m);
        hostrec__segment_record__free_unpacked(m, NULL);
        return rc;
    }
    case OBJ_REC_SEGMENT_UNMOUNT: {
        Hostrec__SegmentUnmountRecord *m =
            hostrec__segment_unmount_record__unpack(NULL, len, payload);
        if (!m) return SMP_EPROTO;
        rc = obj_apply_segment_unmount(st, m);
        hostrec__segment_unmount_record__free_unpacked(m, NULL);
        return rc;
    }
    default: { /* OBJ_REC_SEGMENT_UPDATE */
        Hostrec__UpdateRecord *m = hostrec__update_record__unpack(NULL, len, payload);
        if (!m) return SMP_EPROTO;
        rc = obj_apply_update(st, m);
        hostrec__update_record__free_unpacked(m, NULL);
        return rc;
    }
    }
}

int obj_describe_record(uint16_t type,
                        uint16_t encver,
                        const uint8_t *payload,
                        size_t len,
                        char *buf,
                        size_t cap)
{
    int n = -1;
    static const uint8_t empty[1];
    if (type < 1 || type > SMP_OPLOG_HOST_TYPE_MAX || type == 4) return SMP_ENOTFOUND;
    if (encver != OBJ_REC_ENCVER || (!payload && len) || (!buf && cap)) return SMP_EPROTO;
    if (!payload) payload = empty;
    switch (type) {
    case OBJ_REC_PUT_END: {
        Hostrec__ObjectRecord *m = hostrec__object_record__unpack(NULL, len, payload);
        if (!m) return SMP_EPROTO;
        if (m->add_replica)
            n = snprintf(buf, cap, "PUT_END add_replica key=%s put_id=%llu segment=%s node=%s "
                                   "offset=%llu length=%llu",
                         m->key, (unsigned long long)m->put_id, m->add_replica->segment,
                         m->add_replica->node, (unsigned long long)m->add_replica->offset,
                         (unsigned long long)m->add_replica->length);
        else
            n = snprintf(buf, cap, "PUT_END key=%s size=%llu type=%u group=%s tenant=%s "
                                   "pinned=%d replicas=%zu",
                         m->key, (unsigned long long)m->size, m->data_type, m->group, m->tenant,
                         m->hard_pinned ? 1 : 0, m->n_replicas);
        hostrec__object_record__free_unpacked(m, NULL);
        break;
    }
    case OBJ_REC_PUT_REVOKE: {
        Hostrec__PutRevokeRecord *m = hostrec__put_revoke_record__unpack(NULL, len, payload);
        if (!m) return SMP_EPROTO;
        n = snprintf(buf, cap, "PUT_REVOKE key=%s segment=%s offset=%llu length=%llu", m->key,
                     m->segment, (unsigned long long)m->offset, (unsigned long long)m->length);
        hostrec__put_revoke_record__free_unpacked(m, NULL);
        break;
    }
    case OBJ_REC_REMOVE: {
        Hostrec__RemoveRecord *m = hostrec__remove_record__unpack(NULL, len, payload);
        if (!m) return SMP_EPROTO;
        n = snprintf(buf, cap, "REMOVE keys=%zu first=%s", m->n_keys,
                     m->n_keys ? m->keys[0] : "");
        hostrec__remove_record__free_unpacked(m, NULL);
        break;
    }
    case OBJ_REC_SEGMENT_MOUNT: {
        Hostrec__SegmentRecord *m = hostrec__segment_record__unpack(NULL, len, payload);
        if (!m) return SMP_EPROTO;
        n = snprintf(buf, cap, "SEGMENT_MOUNT id=%s node=%s capacity=%llu", m->id, m->node,
                     (unsigned long long)m->capacity);
        hostrec__segment_record__free_unpacked(m, NULL);
        break;
    }
    case OBJ_REC_SEGMENT_UNMOUNT: {
        Hostrec__SegmentUnmountRecord *m =
            hostrec__segment_unmount_record__unpack(NULL, len, payload);
        if (!m) return SMP_EPROTO;
        n = snprintf(buf, cap, "SEGMENT_UNMOUNT id=%s", m->id);
        hostrec__segment_unmount_record__free_unpacked(m, NULL);
        break;
    }
    default: {
        Hostrec__UpdateRecord *m = hostrec__update_record__unpack(NULL, len, payload);
        if (!m) return SMP_EPROTO;
        if (m->change_case == HOSTREC__UPDATE_RECORD__CHANGE_SEGMENT && m->segment)
            n = snprintf(buf, cap, "SEGMENT_UPDATE segment id=%s node=%s capacity=%llu",
                         m->segment->id, m->segment->node,
                         (unsigned long long)m->segment->capacity);
        else if (m->change_case == HOSTREC__UPDATE_RECORD__CHANGE_GROUP && m->group)
            n = snprintf(buf, cap, "SEGMENT_UPDATE group=%s managed=%d", m->group->name,
                         m->group->managed ? 1 : 0);
        hostrec__update_record__free_unpacked(m, NULL);
        break;
    }
    }
    return n < 0 ? SMP_EPROTO : n;
}

const char *obj_record_type_name(uint16_t type)
{
    switch (type) {
    case OBJ_REC_PUT_END: return "PUT_END";
    case OBJ_REC_PUT_REVOKE: return "PUT_REVOKE";
    case OBJ_REC_REMOVE: return "REMOVE";
    case OBJ_REC_SEGMENT_MOUNT: return "SEGMENT_MOUNT";
    case OBJ_REC_SEGMENT_UNMOUNT: return "SEGMENT_UNMOUNT";
    case OBJ_REC_SEGMENT_UPDATE: return "SEGMENT_UPDATE";
    default: return "UNKNOWN";
    }
}

/* ------------------------------------------------------------------------ */
/* Holds                                                                     */
/* ------------------------------------------------------------------------ */

static obj_hold *obj_hold_find(const obj_store *st, const char *key)
{
    obj_hold *h = NULL;
    HASH_FIND(hh, st->holds, key, strlen(key), h);
    return h;
}

static int obj_hold_inc(obj_store *st, const char *key)
{
    obj_hold *h = obj_hold_find(st, key);
    if (!h) {
        size_t len = strlen(key);
        h = calloc(1, sizeof(*h) + len + 1);
        if (!h) return SMP_ENOMEM;
        memcpy(h->key, key, len + 1);
        HASH_ADD_KEYPTR(hh, st->holds, h->key, len, h);
    }
    h->count++;
    return SMP_OK;
}

static void obj_hold_dec(obj_store *st, const char *key)
{
    obj_hold *h = obj_hold_find(st, key);
    if (!h || --h->count > 0) return;
    HASH_DEL(st->holds, h);
    free(h);
}

/* The keys a decoded PUT_END or REMOVE message holds. */
static void obj_held_keys(const ProtobufCMessage *m, char ***keys, size_t *n)
{
    if (m->descriptor == &hostrec__object_record__descriptor) {
        Hostrec__ObjectRecord *o = (Hostrec__ObjectRecord *)m;
        *keys = &o->key;
        *n = o->add_replica ? 0 : 1;
    } else {
        Hostrec__RemoveRecord *r = (Hostrec__RemoveRecord *)m;
        *keys = r->keys;
        *n = r->n_keys;
    }
}

/* Decode a PUT_END or REMOVE record into a new obj_held; other types need
 * no hold (*out NULL). SMP_EPROTO, SMP_ENOMEM. */
static int obj_held_decode(const obj_record *rec, obj_held **out)
{
    static const uint8_t empty[1];
    const uint8_t *p = rec->buf ? rec->buf : empty;
    obj_held *h;
    *out = NULL;
    if (rec->encver != OBJ_REC_ENCVER) return SMP_EPROTO;
    if (rec->type != OBJ_REC_PUT_END && rec->type != OBJ_REC_REMOVE) return SMP_OK;
    if ((h = obj_held_new(2 * rec->len + OBJ_HELD_SLACK)) == NULL) return SMP_ENOMEM;
    if (rec->type == OBJ_REC_PUT_END)
        h->m = (ProtobufCMessage *)hostrec__object_record__unpack(&h->arena.alloc, rec->len, p);
    else
        h->m = (ProtobufCMessage *)hostrec__remove_record__unpack(&h->arena.alloc, rec->len, p);
    if (!h->m) {
        free(h);
        return SMP_EPROTO;
    }
    *out = h;
    return SMP_OK;
}

int obj_hold_record(obj_store *st, obj_record *rec, obj_held **held)
{
    obj_held *h;
    char **keys;
    size_t n, i;
    if (!rec || !held) return SMP_EINVAL;
    *held = NULL;
    h = rec->held;
    rec->held = NULL;
    int rc = h ? SMP_OK : obj_held_decode(rec, &h);
    if (rc < 0 || !h) return rc;
    obj_held_keys(h->m, &keys, &n);
    for (i = 0; i < n; i++)
        if ((rc = obj_hold_inc(st, keys[i])) < 0) break;
    if (rc < 0 || n == 0) {
        while (i-- > 0) obj_hold_dec(st, keys[i]);
        obj_held_free(h);
        return rc;
    }
    *held = h;
    return SMP_OK;
}

int obj_apply_held(obj_store *st, const obj_held *held)
{
    const ProtobufCMessage *m = held->m;
    if (m->descriptor == &hostrec__object_record__descriptor)
        return obj_apply_object(st, (const Hostrec__ObjectRecord *)m);
    return obj_apply_remove(st, (const Hostrec__RemoveRecord *)m);
}

void obj_release_hold(obj_store *st, obj_held *held)
{
    char **keys;
    size_t n;
    if (!held) return;
    obj_held_keys(held->m, &keys, &n);
    for (size_t i = 0; i < n; i++) obj_hold_dec(st, keys[i]);
    obj_held_free(held);
}

/* ------------------------------------------------------------------------ */
/* Life                                                                      */
/* ------------------------------------------------------------------------ */

/* Free every entry and leave empty lists (counters of refusals are kept). */
static void obj_store_clear(obj_store *st)
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
    for (obj_sl_node *x = obj_sl_after(&st->tenants, NULL, 0); x; x = x->next[0]) {
        obj_tenant *t = x->val;
        free(t->name);
        free(t);
    }
    for (obj_sl_node *x = obj_sl_after(&st->segments, NULL, 0); x; x = x->next[0])
        obj_segment_free(x->val);
    obj_hold *h, *tmp;
    HASH_ITER(hh, st->holds, h, tmp) {
        HASH_DEL(st->holds, h);
        free(h);
    }
    obj_sl *lists[] = {&st->objects, &st->puts, &st->groups, &st->tenants, &st->segments,
                       &st->reserves};
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
        obj_sl_node *h = lists[i]->head;
        HASH_CLEAR(hh, lists[i]->hash);
        for (obj_sl_node *x = h->next[0]; x;) {
            obj_sl_node *nx = x->next[0];
            free(x);
            x = nx;
        }
        memset(h->next, 0, OBJ_SL_MAX_LEVEL * sizeof(obj_sl_node *));
        lists[i]->level = 1;
        lists[i]->count = 0;
    }
    st->lru_head = st->lru_tail = NULL;
    memset(st->stats.objects_by_type, 0, sizeof(st->stats.objects_by_type));
    memset(st->stats.bytes_by_type, 0, sizeof(st->stats.bytes_by_type));
    memset(st->stats.replicas_by_kind, 0, sizeof(st->stats.replicas_by_kind));
    memset(st->stats.replica_bytes_by_kind, 0, sizeof(st->stats.replica_bytes_by_kind));
    st->stats.puts_in_flight = 0;
    st->stats.reservations_in_flight = 0;
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
    *out = st;
    return SMP_OK;
}

void obj_store_destroy(obj_store *st)
{
    if (!st) return;
    obj_store_clear(st);
    obj_sl_fini(&st->objects);
    obj_sl_fini(&st->puts);
    obj_sl_fini(&st->groups);
    obj_sl_fini(&st->tenants);
    obj_sl_fini(&st->segments);
    obj_sl_fini(&st->reserves);
    free(st);
}

void obj_store_set_guard(obj_store *st, const obj_guard_ops *guard)
{
    if (guard) st->guard = *guard;
    else memset(&st->guard, 0, sizeof(st->guard));
}

/* ------------------------------------------------------------------------ */
/* Puts                                                                      */
/* ------------------------------------------------------------------------ */

static int obj_lease_active(const obj_object *o, uint64_t now)
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
 * copy_of (NULL: none) first. SMP_ENOSPC, SMP_ENOMEM. */
static int obj_place(obj_store *st,
                     uint64_t len,
                     const char *prefer_node,
                     const obj_object *copy_of,
                     obj_segment **seg,
                     uint64_t *off)
{
    size_t n = st->segments.count;
    if (n == 0) return SMP_ENOSPC;
    obj_seg_choice *v = malloc(n * sizeof(*v));
    if (!v) return SMP_ENOMEM;
    size_t i = 0;
    for (obj_sl_node *x = obj_sl_after(&st->segments, NULL, 0); x; x = x->next[0]) {
        obj_segment *s = x->val;
        v[i].seg = s;
        v[i].preferred = prefer_node && strcmp(prefer_node, s->node) == 0;
        v[i].has_copy = obj_has_replica_in(copy_of, s);
        v[i].free_bytes = s->capacity - s->used;
        i++;
    }
    qsort(v, n, sizeof(*v), obj_seg_choice_cmp);
    int rc = SMP_ENOSPC;
    for (i = 0; i < n && rc == SMP_ENOSPC; i++) {
        if (v[i].free_bytes < len) continue;
        rc = obj_seg_alloc(v[i].seg, len, off);
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
    if ((rc = obj_place(st, alloc, p->prefer_node, NULL, &put->seg, &put->offset)) < 0)
        goto free_put;
    if ((rc = obj_sl_put(&st->puts, put->key, put)) < 0) goto free_range;
    st->stats.puts_in_flight++;
    if (st->next_put_id < UINT64_MAX) st->next_put_id++;
    if (out) {
        out->segment = put->seg->id;
        out->node = put->seg->node;
        out->offset = put->offset;
        out->length = put->size;
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

int obj_cleanup_stale_puts(obj_store *st, uint64_t now, uint64_t timeout_ms)
{
    int n = 0;
    for (obj_sl_node *x = obj_sl_after(&st->puts, NULL, 0); x;) {
        obj_put *p = x->val;
        x = x->next[0];
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
        obj_reservation_forget(st, r, 1);
        if (n < INT32_MAX) n++;
    }
    return n;
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
    if (obj_validate_key(key) < 0 || (cap && !out)) return SMP_EINVAL;
    obj_object *o = obj_sl_get(&st->objects, key);
    if (!o) return SMP_ENOTFOUND;
    if (obj_hold_find(st, key)) return SMP_EBUSY;
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

int obj_object_replicas(const obj_store *st,
                        const char *key,
                        obj_replica *out,
                        size_t cap,
                        size_t *n_out)
{
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
    if (!fn) return SMP_EINVAL;
    int n = 0;
    for (obj_sl_node *x = obj_sl_after(&st->objects, NULL, 0); x; x = x->next[0]) {
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

int obj_exists(const obj_store *st, const char *key)
{
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

int obj_list_prefix(const obj_store *st,
                    const char *prefix,
                    const char *tenant,
                    const char *after,
                    size_t max,
                    const char **keys,
                    size_t *n_out,
                    int *more)
{
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
    return obj_prepare_remove_one(st, key, now, 1, out);
}

int obj_prepare_remove_unguarded(obj_store *st, const char *key, uint64_t now, obj_record *out)
{
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
        if (g && g->managed) {
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
    uint64_t u = 0, c = 0;
    for (obj_sl_node *x = obj_sl_after(&st->segments, NULL, 0); x; x = x->next[0]) {
        const obj_segment *s = x->val;
        u += s->used;
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
        if (!mem_complete) continue;
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

/* ------------------------------------------------------------------------ */
/* Other object changes                                                      */
/* ------------------------------------------------------------------------ */

int obj_prepare_set_pin(obj_store *st, const char *key, int pinned, obj_record *out)
{
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
    int rc;
    if (obj_validate_key(key) < 0) return SMP_EINVAL;
    obj_object *o = obj_sl_get(&st->objects, key);
    if (!o) return SMP_ENOTFOUND;
    if (obj_sl_get(&st->reserves, key)) return SMP_EBUSY;
    if (o->nreps >= OBJ_REPLICAS_MAX) return SMP_ERANGE;
    obj_reservation *r = calloc(1, sizeof(*r));
    if (!r) return SMP_ENOMEM;
    if (!(r->key = strdup(key))) { rc = SMP_ENOMEM; goto free_reservation; }
    r->length = o->size;
    r->alloc = obj_ext_len(o->size);
    r->started = now;
    r->put_id = o->put_id;
    if ((rc = obj_place(st, r->alloc, prefer_node, o, &r->seg, &r->offset)) < 0)
        goto free_reservation;
    if ((rc = obj_sl_put(&st->reserves, r->key, r)) < 0) goto free_range;
    st->stats.reservations_in_flight++;
    if (out) {
        out->segment = r->seg->id;
        out->node = r->seg->node;
        out->offset = r->offset;
        out->length = r->length;
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
    if (obj_validate_key(key) < 0) return SMP_EINVAL;
    obj_reservation *r = obj_sl_get(&st->reserves, key);
    if (!r) return SMP_ENOTFOUND;
    obj_reservation_forget(st, r, 1);
    return SMP_OK;
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
    if (!obj_name_ok(id, OBJ_NAME_MAX, 0) || !obj_name_ok(node, OBJ_NAME_MAX, 0) || !out)
        return SMP_EINVAL;
    capacity = capacity / OBJ_ALIGN * OBJ_ALIGN;
    obj_segment *s = obj_sl_get(&st->segments, id);
    if (s && (strcmp(s->node, node) != 0 || s->capacity != capacity)) return SMP_EEXIST;
    return obj_encode_segment(OBJ_REC_SEGMENT_MOUNT, id, node, capacity, out);
}

int obj_prepare_segment_unmount(obj_store *st, const char *id, obj_record *out)
{
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
    if (!obj_name_ok(id, OBJ_NAME_MAX, 0) || !out) return SMP_EINVAL;
    obj_segment *s = obj_sl_get(&st->segments, id);
    if (!s) return SMP_ENOTFOUND;
    capacity = capacity / OBJ_ALIGN * OBJ_ALIGN;
    if (capacity < s->capacity) return SMP_ERANGE;
    return obj_encode_segment(OBJ_REC_SEGMENT_UPDATE, id, s->node, capacity, out);
}

int obj_prepare_group_managed(obj_store *st, const char *group, int managed, obj_record *out)
{
    (void)st;
    if (!obj_name_ok(group, OBJ_GROUP_MAX, 0) || !out) return SMP_EINVAL;
    Hostrec__GroupRecord g = HOSTREC__GROUP_RECORD__INIT;
    g.name = (char *)group;
    g.managed = managed ? 1 : 0;
    Hostrec__UpdateRecord u = HOSTREC__UPDATE_RECORD__INIT;
    u.change_case = HOSTREC__UPDATE_RECORD__CHANGE_GROUP;
    u.group = &g;
    return obj_encode(&u.base, OBJ_REC_SEGMENT_UPDATE, out);
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
    obj_group *g = obj_group_find(st, group);
    return g ? g->members.count : 0;
}

int obj_group_is_managed(const obj_store *st, const char *group)
{
    return obj_group_managed_flag(st, group);
}

void obj_tenant_usage(const obj_store *st, const char *tenant, uint64_t *objects, uint64_t *bytes)
{
    obj_tenant *t = (tenant && tenant[0]) ? obj_sl_get(&st->tenants, tenant) : NULL;
    if (objects) *objects = t ? t->objects : 0;
    if (bytes) *bytes = t ? t->bytes : 0;
}

void obj_store_stats(const obj_store *st, obj_stats *out)
{
    *out = st->stats;
    obj_memory_usage(st, &out->memory_used, &out->memory_capacity);
}

/* ------------------------------------------------------------------------ */
/* Snapshot                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct obj_snap_writer {
    int (*write)(void *ctx, const void *buf, size_t len);
    void *ctx;
    uint8_t *tmp;
    size_t tmpcap;
} obj_snap_writer;

static size_t obj_put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

/* Write msg as one occurrence of the length-delimited field `field`. */
static int obj_snap_field(obj_snap_writer *w, uint32_t field, const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t hdr[20];
    size_t h = obj_put_varint(hdr, ((uint64_t)field << 3) | 2);
    h += obj_put_varint(hdr + h, len);
    if (len > w->tmpcap) {
        uint8_t *nt = realloc(w->tmp, len);
        if (!nt) return SMP_ENOMEM;
        w->tmp = nt;
        w->tmpcap = len;
    }
    protobuf_c_message_pack(msg, w->tmp);
    int rc = w->write(w->ctx, hdr, h);
    if (rc < 0) return rc;
    return len ? w->write(w->ctx, w->tmp, len) : SMP_OK;
}

int obj_store_save(const obj_store *st,
                   int (*write)(void *ctx, const void *buf, size_t len),
                   void *ctx)
{
    int rc;
    if (!write) return SMP_EINVAL;
    obj_snap_writer w = {write, ctx, NULL, 0};
    uint8_t hdr[12];
    size_t h = obj_put_varint(hdr, (1u << 3) | 0);
    h += obj_put_varint(hdr + h, OBJ_SNAPSHOT_FORMAT);
    if ((rc = write(ctx, hdr, h)) < 0) return rc;
    for (obj_sl_node *x = obj_sl_after(&st->segments, NULL, 0); x; x = x->next[0]) {
        const obj_segment *s = x->val;
        Hostrec__SegmentRecord m = HOSTREC__SEGMENT_RECORD__INIT;
        m.id = s->id;
        m.node = s->node;
        m.capacity = s->capacity;
        if ((rc = obj_snap_field(&w, 2, &m.base)) < 0) goto free_tmp;
    }
    for (obj_sl_node *x = obj_sl_after(&st->groups, NULL, 0); x; x = x->next[0]) {
        const obj_group *g = x->val;
        if (!g->managed) continue;
        Hostrec__GroupRecord m = HOSTREC__GROUP_RECORD__INIT;
        m.name = g->name;
        m.managed = 1;
        if ((rc = obj_snap_field(&w, 3, &m.base)) < 0) goto free_tmp;
    }
    for (obj_sl_node *x = obj_sl_after(&st->objects, NULL, 0); x; x = x->next[0]) {
        obj_record r = {0};
        if ((rc = obj_encode_object(x->val, NULL, 0, 0, &r)) < 0) goto free_tmp;
        uint8_t oh[20];
        size_t n = obj_put_varint(oh, (4u << 3) | 2);
        n += obj_put_varint(oh + n, r.len);
        rc = write(ctx, oh, n);
        if (rc >= 0 && r.len) rc = write(ctx, r.buf, r.len);
        obj_record_free(&r);
        if (rc < 0) goto free_tmp;
    }
    rc = SMP_OK;
free_tmp:
    free(w.tmp);
    return rc;
}

static int obj_store_is_empty(const obj_store *st)
{
    return st->objects.count == 0 && st->segments.count == 0 && st->groups.count == 0 &&
           st->puts.count == 0 && st->reserves.count == 0;
}

/* Map an apply error of a snapshot entry to the load's answer. */
static int obj_load_rc(int rc)
{
    return rc == SMP_ENOMEM ? SMP_ENOMEM : SMP_EPROTO;
}

int obj_store_load(obj_store *st, const uint8_t *data, size_t len)
{
    int rc = SMP_OK;
    if (!obj_store_is_empty(st)) return SMP_ESTATE;
    if (!data && len) return SMP_EINVAL;
    static const uint8_t empty[1];
    Hostrec__HostSnapshot *m = hostrec__host_snapshot__unpack(NULL, len, data ? data : empty);
    if (!m) return SMP_EPROTO;
    if (m->format != OBJ_SNAPSHOT_FORMAT) { rc = SMP_EPROTO; goto free_msg; }
    uint64_t dropped = st->stats.replicas_dropped;
    st->bulk_load = 1;
    for (size_t i = 0; i < m->n_segments; i++) {
        if (!obj_segment_msg_ok(m->segments[i]) ||
            obj_sl_get(&st->segments, m->segments[i]->id)) {
            rc = SMP_EPROTO;
            goto clear;
        }
        if ((rc = obj_apply_segment_mount(st, m->segments[i])) < 0) goto clear;
    }
    for (size_t i = 0; i < m->n_groups; i++) {
        if (!m->groups[i]->managed) { rc = SMP_EPROTO; goto clear; }
        if ((rc = obj_set_group_managed(st, m->groups[i]->name, 1)) < 0) goto clear;
    }
    for (size_t i = 0; i < m->n_objects; i++) {
        const char *key = m->objects[i]->key;
        if (key && obj_sl_get(&st->objects, key)) { rc = SMP_EPROTO; goto clear; }
        if (m->objects[i]->update_only) { rc = SMP_EPROTO; goto clear; }
        if ((rc = obj_apply_object(st, m->objects[i])) < 0) goto clear;
        /* A snapshot is one consistent image: every replica must fit. */
        if (st->stats.replicas_dropped != dropped) { rc = SMP_EPROTO; goto clear; }
    }
    st->bulk_load = 0;
    obj_lru_resort(st);
    rc = SMP_OK;
    goto free_msg;

clear:
    rc = obj_load_rc(rc);
    st->stats.replicas_dropped = dropped;
    st->bulk_load = 0;
    obj_store_clear(st);
free_msg:
    hostrec__host_snapshot__free_unpacked(m, NULL);
    return rc;
}

int obj_visit_segments(const obj_store *st,
                       int (*fn)(void *arg, const char *id, const char *node),
                       void *arg)
{
    for (obj_sl_node *n = st->segments.head->next[0]; n != NULL; n = n->next[0]) {
        const obj_segment *s = n->val;
        int rc = fn(arg, s->id, s->node);
        if (rc != 0) return rc;
    }
    return 0;
}

int obj_segment_info(const obj_store *st, const char *id, const char **node, uint64_t *capacity)
{
    obj_segment *s = id ? obj_sl_get(&st->segments, id) : NULL;
    if (s == NULL) return SMP_ENOTFOUND;
    if (node) *node = s->node;
    if (capacity) *capacity = s->capacity;
    return SMP_OK;
}
