/* obj_store_hash.c -- the exact-key index of the store's big skip lists
 * (objects, groups, tenants, segments, puts, reservations): an open-addressed
 * table of (64-bit hash, node) slots, probed linearly, a power of two in
 * size and at most 3/4 full. A probe compares the stored hash before it
 * touches a node or its key, so a lookup at 200,000 keys reads one or two
 * cache lines of slots, then the node and the key it finds -- where the
 * chained hash it replaces walked a chain of nodes, a cache miss each.
 *
 * Removal shifts the entries after the freed slot back (no tombstones in
 * the table being filled). Growth does not rehash at once: the full table
 * becomes the old one, a table of twice the size the new one; every insert
 * and removal then moves up to OBJ_IX_STEP old slots to the new table
 * (their old slots become tombstones, which lookups in the old table step
 * over), and lookups try both until the old one is empty and freed. An old
 * table always drains long before the new one fills (see obj_ix_step), so
 * no operation pays for more than OBJ_IX_STEP moves.
 *
 * Ordered iteration stays the skip list's; nothing here walks the table
 * except a drain. Part of obj_store (see obj_store.c). */
#include "obj_store_internal.h"

#include "host_bulk.h"

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

/* Old slots examined per insert or removal while a table drains. */
#define OBJ_IX_STEP 64
#define OBJ_IX_MIN 16

/* A slot of the old table whose entry moved to the new one. */
static obj_sl_node obj_ix_moved_mark;
#define OBJ_IX_MOVED (&obj_ix_moved_mark)

/* A table of at least this many bytes is a mapping of its own with
 * transparent huge pages asked for (host_bulk.h); a smaller one is calloc'ed.
 * An insert or a lookup reads a slot at a random place of the table: at
 * 200,000 objects (512 Ki slots, 8 MiB) in 4 KiB pages nearly every one
 * missed the TLB as well as the cache (a two-level page walk on a virtual
 * machine), and the table faulted in 2,048 times. Which allocator a table
 * came from follows from its slot count alone. */
#define OBJ_IX_BULK_BYTES ((size_t)2 << 20)

/* cap zeroed slots (cap * sizeof(obj_ix_slot) does not overflow), or NULL. */
static obj_ix_slot *obj_ix_table_new(size_t cap)
{
    size_t bytes = cap * sizeof(obj_ix_slot);
    if (bytes >= OBJ_IX_BULK_BYTES) return host_bulk_alloc_huge(bytes);
    return calloc(cap, sizeof(obj_ix_slot));
}

/* Release a table of cap slots from obj_ix_table_new. NULL is a no-op. */
static void obj_ix_table_free(obj_ix_slot *t, size_t cap)
{
    size_t bytes = cap * sizeof(obj_ix_slot);
    if (bytes >= OBJ_IX_BULK_BYTES)
        host_bulk_free(t, bytes);
    else
        free(t);
}

uint64_t obj_ix_hash_default(const char *key, size_t len)
{
    return XXH3_64bits(key, len);
}

void obj_ix_init(obj_ix *ix)
{
    memset(ix, 0, sizeof(*ix));
    ix->hash = obj_ix_hash_default;
}

void obj_ix_fini(obj_ix *ix)
{
    obj_ix_table_free(ix->slots, ix->cap);
    obj_ix_table_free(ix->old, ix->old_cap);
    ix->slots = ix->old = NULL;
    ix->cap = ix->old_cap = ix->count = ix->old_count = ix->old_next = 0;
}

/* The slot of the new table holding node n (hash h), or NULL. */
static obj_ix_slot *obj_ix_slot_of(obj_ix_slot *t, size_t cap, uint64_t h, const obj_sl_node *n)
{
    if (cap == 0) return NULL;
    size_t mask = cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        if (t[i].node == NULL) return NULL;
        if (t[i].node == n) return &t[i];
    }
}

/* Probe table t (cap slots; tombstones allowed) for key with hash h. */
static obj_sl_node *obj_ix_probe(const obj_ix_slot *t, size_t cap, uint64_t h, const char *key)
{
    if (cap == 0) return NULL;
    size_t mask = cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        const obj_sl_node *n = t[i].node;
        if (n == NULL) return NULL;
        if (t[i].hash == h && n != OBJ_IX_MOVED && strcmp(n->key, key) == 0)
            return (obj_sl_node *)n;
    }
}

uint64_t obj_ix_key_hash(const obj_ix *ix, const char *key)
{
    return ix->hash(key, strlen(key));
}

obj_sl_node *obj_ix_find_h(const obj_ix *ix, const char *key, uint64_t h)
{
    obj_sl_node *n = obj_ix_probe(ix->slots, ix->cap, h, key);
    if (n == NULL && ix->old_count > 0) n = obj_ix_probe(ix->old, ix->old_cap, h, key);
    return n;
}

void obj_ix_prefetch(const obj_ix *ix, const char *key)
{
    if (ix->cap == 0) return;
    uint64_t h = obj_ix_key_hash(ix, key);
    __builtin_prefetch(&ix->slots[(size_t)h & (ix->cap - 1)], 1);
}

obj_sl_node *obj_ix_find(const obj_ix *ix, const char *key)
{
    if (ix->count + ix->old_count == 0) return NULL;
    return obj_ix_find_h(ix, key, obj_ix_key_hash(ix, key));
}

/* Put (h, n) into the first free slot of the new table from h's home. The
 * table has room (count < cap); it holds no tombstones. */
static void obj_ix_place(obj_ix *ix, uint64_t h, obj_sl_node *n)
{
    size_t mask = ix->cap - 1;
    size_t i = (size_t)h & mask;
    while (ix->slots[i].node != NULL) i = (i + 1) & mask;
    ix->slots[i].hash = h;
    ix->slots[i].node = n;
    ix->count++;
}

/* Move up to max old slots to the new table; the old table is freed once
 * its last entry moved. Called by every insert and removal while an old
 * table exists: it holds at most 3/4 x old_cap entries when the new table
 * (2 x old_cap) starts, so it is empty after old_cap / OBJ_IX_STEP
 * operations, long before the new table reaches 3/4 (1.5 x old_cap). */
static void obj_ix_step(obj_ix *ix, size_t max)
{
    while (max-- > 0 && ix->old_count > 0 && ix->old_next < ix->old_cap) {
        obj_ix_slot *s = &ix->old[ix->old_next++];
        if (s->node == NULL || s->node == OBJ_IX_MOVED) continue;
        obj_ix_place(ix, s->hash, s->node);
        s->node = OBJ_IX_MOVED;
        ix->old_count--;
    }
    if (ix->old != NULL && ix->old_count == 0) {
        obj_ix_table_free(ix->old, ix->old_cap);
        ix->old = NULL;
        ix->old_cap = ix->old_next = 0;
    }
}

int obj_ix_reserve(obj_ix *ix)
{
    size_t total = ix->count + ix->old_count + 1;
    if (ix->cap != 0 && total * 4 <= ix->cap * 3) return SMP_OK;
    /* a drain not finished yet (only when removals and inserts alternate
     * around the threshold): finish it first, then grow */
    if (ix->old != NULL) obj_ix_step(ix, ix->old_cap);
    size_t ncap = ix->cap ? ix->cap * 2 : OBJ_IX_MIN;
    if (ncap < ix->cap) return SMP_ENOMEM;
    if (ncap > SIZE_MAX / sizeof(obj_ix_slot)) return SMP_ENOMEM;
    obj_ix_slot *t = obj_ix_table_new(ncap);
    if (t == NULL) return SMP_ENOMEM;
    ix->old = ix->slots;
    ix->old_cap = ix->cap;
    ix->old_count = ix->count;
    ix->old_next = 0;
    ix->slots = t;
    ix->cap = ncap;
    ix->count = 0;
    if (ix->old_count == 0) obj_ix_step(ix, 0); /* nothing to move: free it */
    return SMP_OK;
}

int obj_ix_presize(obj_ix *ix, size_t n)
{
    if (ix->count + ix->old_count != 0) return SMP_ESTATE;
    size_t cap = ix->cap ? ix->cap : OBJ_IX_MIN;
    while (n > cap / 4 * 3) {
        if (cap > SIZE_MAX / 2 / sizeof(obj_ix_slot)) return SMP_ENOMEM;
        cap *= 2;
    }
    if (cap == ix->cap) return SMP_OK;
    obj_ix_slot *t = obj_ix_table_new(cap);
    if (t == NULL) return SMP_ENOMEM;
    /* The inserts that follow write all over it from the first one: its
     * pages mapped now in one call rather than a fault each. */
    size_t bytes = cap * sizeof(obj_ix_slot);
    if (bytes >= OBJ_IX_BULK_BYTES) (void)host_bulk_ready(t, 0, bytes, bytes);
    obj_ix_table_free(ix->slots, ix->cap);
    obj_ix_table_free(ix->old, ix->old_cap);
    ix->slots = t;
    ix->cap = cap;
    ix->old = NULL;
    ix->old_cap = ix->old_next = 0;
    return SMP_OK;
}

void obj_ix_insert_h(obj_ix *ix, obj_sl_node *n, uint64_t h)
{
    obj_ix_place(ix, h, n);
    if (ix->old != NULL) obj_ix_step(ix, OBJ_IX_STEP);
}

/* Free slot i of the new table, shifting back the entries after it that
 * may move (those whose home is not in the cyclic range (i, j]). */
static void obj_ix_shift_out(obj_ix *ix, size_t i)
{
    size_t mask = ix->cap - 1;
    for (size_t j = (i + 1) & mask; ix->slots[j].node != NULL; j = (j + 1) & mask) {
        size_t home = (size_t)ix->slots[j].hash & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            ix->slots[i] = ix->slots[j];
            i = j;
        }
    }
    ix->slots[i].node = NULL;
    ix->slots[i].hash = 0;
    ix->count--;
}

void obj_ix_remove(obj_ix *ix, obj_sl_node *n)
{
    uint64_t h = obj_ix_key_hash(ix, n->key);
    obj_ix_slot *s = obj_ix_slot_of(ix->slots, ix->cap, h, n);
    if (s != NULL) {
        obj_ix_shift_out(ix, (size_t)(s - ix->slots));
    } else if (ix->old != NULL) {
        size_t mask = ix->old_cap - 1;
        for (size_t i = (size_t)h & mask; ix->old[i].node != NULL; i = (i + 1) & mask) {
            if (ix->old[i].node != n) continue;
            ix->old[i].node = OBJ_IX_MOVED; /* lookups step over it */
            ix->old_count--;
            break;
        }
    }
    if (ix->old != NULL) obj_ix_step(ix, OBJ_IX_STEP);
}
