/* wm_index.c -- the open-addressed hash index of the revision store.
 *
 * Linear probing over one array of {hash, item} slots, at most three
 * quarters full, with backward-shift removal (wm_index.h says why). The
 * lookup itself is inline in the header; here are growth, insertion and
 * removal. Nothing here hashes, owns an item or calls the host. */
#include <stdlib.h>
#include <string.h>

#include "store_plugin.h"
#include "weight_management.h"
#include "wm_bulk.h"
#include "wm_index.h"

#define WM_INDEX_MIN_SLOTS 64

/* A table of at least this many bytes is a mapping of its own with
 * transparent huge pages asked for (wm_bulk.h); a smaller one is calloc'ed.
 * An insert or a lookup reads a slot at a random place of the table: at
 * 100,000 revisions (256 Ki slots, 4 MiB a table) in 4 KiB pages nearly
 * every one missed the TLB as well as the cache (a two-level page walk on a
 * virtual machine), and each table faulted in 1,024 times. Which allocator
 * a table came from follows from its slot count alone. */
#define WM_INDEX_BULK_BYTES ((size_t)2 << 20)

/* n zeroed slots (n * sizeof(wm_index_slot) does not overflow), or NULL. */
static wm_index_slot *wm_index_table_new(size_t n)
{
    size_t bytes = n * sizeof(wm_index_slot);
    if (bytes >= WM_INDEX_BULK_BYTES) return wm_bulk_alloc_huge(bytes);
    return calloc(n, sizeof(wm_index_slot));
}

/* Release a table of n slots from wm_index_table_new. NULL is a no-op. */
static void wm_index_table_free(wm_index_slot *t, size_t n)
{
    size_t bytes = n * sizeof(wm_index_slot);
    if (bytes >= WM_INDEX_BULK_BYTES)
        wm_bulk_free(t, bytes);
    else
        free(t);
}

/* Whether an index of `slots` slots holds n items within the load limit. */
static int wm_index_fits(size_t slots, size_t n)
{
    return n <= slots / 4 * 3;
}

/* Put item into the first empty slot of its probe run (no growth, no
 * duplicate check: the caller made room). */
static void wm_index_place(wm_index_slot *slots, size_t mask, unsigned shift, uint64_t hash,
                           void *item)
{
    wm_index tmp = {slots, mask, shift, 0};
    size_t i = wm_index_home(&tmp, hash);
    while (slots[i].item != NULL) i = (i + 1) & mask;
    slots[i].hash = hash;
    slots[i].item = item;
}

/* Rebuild the index with `n_slots` slots (a power of two that fits every
 * item). SMP_ENOMEM with the index unchanged. */
static int wm_index_resize(wm_index *ix, size_t n_slots)
{
    unsigned shift = 64;
    for (size_t s = n_slots; s > 1; s >>= 1) shift--;
    wm_index_slot *slots = wm_index_table_new(n_slots);
    if (slots == NULL) return SMP_ENOMEM;
    if (ix->slots != NULL)
        for (size_t i = 0; i <= ix->mask; i++)
            if (ix->slots[i].item != NULL)
                wm_index_place(slots, n_slots - 1, shift, ix->slots[i].hash, ix->slots[i].item);
    if (ix->slots != NULL) wm_index_table_free(ix->slots, ix->mask + 1);
    ix->slots = slots;
    ix->mask = n_slots - 1;
    ix->shift = shift;
    return WM_OK;
}

int wm_index_init(wm_index *ix)
{
    memset(ix, 0, sizeof(*ix));
    return wm_index_resize(ix, WM_INDEX_MIN_SLOTS);
}

void wm_index_fini(wm_index *ix)
{
    if (ix->slots != NULL) wm_index_table_free(ix->slots, ix->mask + 1);
    memset(ix, 0, sizeof(*ix));
}

int wm_index_reserve(wm_index *ix, size_t n)
{
    size_t slots = ix->mask + 1;
    if (wm_index_fits(slots, n)) return WM_OK;
    while (!wm_index_fits(slots, n)) {
        if (slots > SIZE_MAX / 2 / sizeof(wm_index_slot)) return SMP_ENOMEM;
        slots *= 2;
    }
    return wm_index_resize(ix, slots);
}

int wm_index_insert(wm_index *ix, uint64_t hash, void *item)
{
    int rc;
    if ((rc = wm_index_reserve(ix, ix->count + 1)) < 0) return rc;
    wm_index_place(ix->slots, ix->mask, ix->shift, hash, item);
    ix->count++;
    return WM_OK;
}

int wm_index_remove(wm_index *ix, uint64_t hash, const void *item)
{
    size_t i = wm_index_home(ix, hash);
    while (ix->slots[i].item != item) {
        if (ix->slots[i].item == NULL) return 0;
        i = (i + 1) & ix->mask;
    }
    if (ix->slots[i].hash != hash) return 0;
    /* Backward shift: walk the run after the hole; an item whose home is
     * not cyclically in (hole, j] would be cut off from its home by the
     * hole, so it moves into the hole, which moves to where it was. */
    for (size_t j = i;;) {
        j = (j + 1) & ix->mask;
        if (ix->slots[j].item == NULL) break;
        size_t home = wm_index_home(ix, ix->slots[j].hash);
        int stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            ix->slots[i] = ix->slots[j];
            i = j;
        }
    }
    ix->slots[i].item = NULL;
    ix->slots[i].hash = 0;
    ix->count--;
    return 1;
}
