/* wm_index.h -- an open-addressed hash index of borrowed items by a 64-bit
 * hash.
 *
 * The revision store's two lookups (identity -> entry, group key -> entry)
 * are hit by every weight_get_metadata and weight_is_exist; with chained
 * buckets each step of a chain read another entry (a cache miss at 100,000
 * revisions). Here the slots are one array of {hash, item} with linear
 * probing: a lookup reads a short contiguous run of slots and compares the
 * stored hash before it touches an item, so it reads an item only when the
 * full 64-bit hash matches -- nearly always the one it is looking for, never
 * a miss's. A removal shifts back the run behind the emptied slot (no
 * tombstones), so probes do not lengthen with deletions. The table stays at
 * most three quarters full and doubles when an insert would pass that.
 *
 * The index never hashes and never owns its items: the caller hashes its
 * keys, keeps its items alive while they are indexed and decides equality
 * (wm_index_find's eq). So a test can give many items one hash (forced
 * collisions). The order of items in the table is no order anyone reads:
 * the store's iteration orders are its own arrays. */
#ifndef WM_INDEX_H
#define WM_INDEX_H

#include <stddef.h>
#include <stdint.h>

typedef struct wm_index_slot {
    uint64_t hash;
    void *item; /* NULL: empty */
} wm_index_slot;

typedef struct wm_index {
    wm_index_slot *slots;
    size_t mask;    /* slots - 1 (a power of two minus one) */
    unsigned shift; /* 64 - log2(slots): the home slot is the hash's top bits */
    size_t count;   /* items indexed */
} wm_index;

/* An empty index of 64 slots. SMP_ENOMEM (*ix zeroed then). */
int wm_index_init(wm_index *ix);
/* Release the slots (not the items); *ix is zeroed. A zeroed index is a
 * no-op. */
void wm_index_fini(wm_index *ix);

/* Room for n items in all without growing again. WM_OK or SMP_ENOMEM (the
 * index unchanged). */
int wm_index_reserve(wm_index *ix, size_t n);

/* Index item (not NULL, not indexed already) under hash, growing first
 * when needed. WM_OK or SMP_ENOMEM (nothing changed). An index reserved
 * for one more item never fails. */
int wm_index_insert(wm_index *ix, uint64_t hash, void *item);

/* Remove item (compared by address) indexed under hash. 1 when removed, 0
 * when it was not indexed under hash. */
int wm_index_remove(wm_index *ix, uint64_t hash, const void *item);

/* The slot a hash starts probing at (Fibonacci hashing of all 64 bits, so
 * a weak low half of the caller's hash does not cluster the table). */
static inline size_t wm_index_home(const wm_index *ix, uint64_t hash)
{
    return (size_t)((hash * UINT64_C(0x9E3779B97F4A7C15)) >> ix->shift);
}

/* The item indexed under hash for which eq(item, key) is nonzero, or NULL.
 * eq is called only for items whose stored hash equals hash. Inline, so a
 * caller's constant eq is inlined too. */
static inline void *wm_index_find(const wm_index *ix, uint64_t hash,
                                  int (*eq)(const void *item, const void *key), const void *key)
{
    for (size_t i = wm_index_home(ix, hash);; i = (i + 1) & ix->mask) {
        const wm_index_slot *s = &ix->slots[i];
        if (s->item == NULL) return NULL;
        if (s->hash == hash && eq(s->item, key)) return s->item;
    }
}

#endif /* WM_INDEX_H */
