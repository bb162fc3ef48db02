/* read_lease.c -- the read leases of replica lookups, per holder and key
 * (see read_lease.h). Two uthash tables: keys, each with the small array of
 * its holders' leases (holder, count of lookups, end), and holders, each
 * with the keys it took a lease on, so a closing connection ends its leases
 * without a scan. Expired entries are dropped whenever their key or holder
 * is touched. */
#include "read_lease.h"

#include <stdlib.h>
#include <string.h>

#include "host_uthash.h"
#include "store_plugin.h"

typedef struct rl_hold {
    uint64_t holder;
    uint64_t expiry;  /* end of the lease; expired at or before now */
    uint32_t count;   /* lookups not given back */
} rl_hold;

typedef struct rl_key {
    char *key;        /* owned; the hash key */
    rl_hold *holds;
    uint32_t n, cap;
    UT_hash_handle hh;
} rl_key;

typedef struct rl_holder {
    uint64_t holder;  /* the hash key */
    char **keys;      /* owned; keys it took a lease on (some may have ended) */
    size_t n, cap;
    UT_hash_handle hh;
} rl_holder;

struct rlease_table {
    rl_key *keys;
    rl_holder *holders;
    rlease_stats st;
};

rlease_table *rlease_create(void)
{
    return calloc(1, sizeof(rlease_table));
}

static void rl_key_free(rlease_table *t, rl_key *k)
{
    HASH_DEL(t->keys, k);
    free(k->holds);
    free(k->key);
    free(k);
}

static void rl_holder_free(rlease_table *t, rl_holder *h)
{
    HASH_DEL(t->holders, h);
    for (size_t i = 0; i < h->n; i++) free(h->keys[i]);
    free(h->keys);
    free(h);
}

void rlease_destroy(rlease_table *t)
{
    if (t == NULL) return;
    rl_key *k, *kt;
    rl_holder *h, *ht;
    HASH_ITER(hh, t->keys, k, kt) rl_key_free(t, k);
    HASH_ITER(hh, t->holders, h, ht) rl_holder_free(t, h);
    free(t);
}

static rl_key *rl_key_find(const rlease_table *t, const char *key)
{
    rl_key *k = NULL;
    HASH_FIND_STR(t->keys, key, k);
    return k;
}

static rl_holder *rl_holder_find(const rlease_table *t, uint64_t holder)
{
    rl_holder *h = NULL;
    HASH_FIND(hh, t->holders, &holder, sizeof(holder), h);
    return h;
}

/* Drop k's expired leases; free k when none is left (then NULL). */
static rl_key *rl_key_prune(rlease_table *t, rl_key *k, uint64_t now)
{
    uint32_t w = 0;
    for (uint32_t i = 0; i < k->n; i++)
        if (k->holds[i].expiry > now) k->holds[w++] = k->holds[i];
    k->n = w;
    if (w > 0) return k;
    rl_key_free(t, k);
    return NULL;
}

static rl_hold *rl_hold_of(rl_key *k, uint64_t holder)
{
    for (uint32_t i = 0; k != NULL && i < k->n; i++)
        if (k->holds[i].holder == holder) return &k->holds[i];
    return NULL;
}

static uint64_t rl_key_ends(const rl_key *k, uint64_t now)
{
    uint64_t end = 0;
    for (uint32_t i = 0; k != NULL && i < k->n; i++)
        if (k->holds[i].expiry > now && k->holds[i].expiry > end) end = k->holds[i].expiry;
    return end;
}

/* Remove the hold of holder from k (it must be there); k may be freed. */
static void rl_hold_remove(rlease_table *t, rl_key *k, rl_hold *h, uint64_t now)
{
    *h = k->holds[--k->n];
    (void)rl_key_prune(t, k, now);
}

/* Forget the keys of h on which h holds no unexpired lease any more (and
 * the keys' expired leases with them). */
static void rl_holder_compact(rlease_table *t, rl_holder *h, uint64_t now)
{
    size_t w = 0;
    for (size_t i = 0; i < h->n; i++) {
        rl_key *k = rl_key_find(t, h->keys[i]);
        if (k != NULL) k = rl_key_prune(t, k, now);
        if (k != NULL && rl_hold_of(k, h->holder) != NULL) h->keys[w++] = h->keys[i];
        else free(h->keys[i]);
    }
    h->n = w;
}

/* Note that holder took a lease on key (a new hold). */
static int rl_holder_add(rlease_table *t, uint64_t holder, const char *key, uint64_t now)
{
    rl_holder *h = rl_holder_find(t, holder);
    if (h == NULL) {
        if ((h = calloc(1, sizeof(*h))) == NULL) return SMP_ENOMEM;
        h->holder = holder;
        HASH_ADD(hh, t->holders, holder, sizeof(h->holder), h);
    }
    /* Full: compact, and grow when that left it more than half full, so
     * that at least half of the list is new keys between two compactions
     * (each walks the list). */
    if (h->n == h->cap) {
        rl_holder_compact(t, h, now);
        if (h->cap == 0 || h->n * 2 > h->cap) {
            size_t cap = h->cap ? h->cap * 2 : 8;
            char **keys = realloc(h->keys, cap * sizeof(*keys));
            if (keys == NULL) return SMP_ENOMEM;
            h->keys = keys;
            h->cap = cap;
        }
    }
    if ((h->keys[h->n] = strdup(key)) == NULL) return SMP_ENOMEM;
    h->n++;
    return SMP_OK;
}

int rlease_take(rlease_table *t, uint64_t holder, const char *key, uint64_t now, uint64_t lease_ms)
{
    if (lease_ms == 0) return SMP_EINVAL; /* a lease that ended when taken */
    uint64_t exp = now > UINT64_MAX - lease_ms ? UINT64_MAX : now + lease_ms;
    rl_key *k = rl_key_find(t, key);
    if (k != NULL) k = rl_key_prune(t, k, now);
    rl_hold *h = rl_hold_of(k, holder);
    if (h != NULL) {
        if (h->count < UINT32_MAX) h->count++;
        if (exp > h->expiry) h->expiry = exp;
        t->st.taken++;
        return SMP_OK;
    }
    int created = 0;
    if (k == NULL) {
        if ((k = calloc(1, sizeof(*k))) == NULL) return SMP_ENOMEM;
        if ((k->key = strdup(key)) == NULL) {
            free(k);
            return SMP_ENOMEM;
        }
        HASH_ADD_KEYPTR(hh, t->keys, k->key, strlen(k->key), k);
        created = 1;
    }
    if (k->n == k->cap) {
        uint32_t cap = k->cap ? k->cap * 2 : 2;
        rl_hold *holds = realloc(k->holds, cap * sizeof(*holds));
        if (holds == NULL) goto undo_key;
        k->holds = holds;
        k->cap = cap;
    }
    /* The hold first: live, it keeps k from being pruned by the compaction
     * rl_holder_add may run (the holder's list can name this key from an
     * earlier, expired lease). Then the key goes on the holder's list, so
     * that its close finds the hold; if it cannot, the hold goes again. */
    k->holds[k->n++] = (rl_hold){.holder = holder, .expiry = exp, .count = 1};
    if (rl_holder_add(t, holder, key, now) < 0) {
        k = rl_key_find(t, key);
        rl_hold *mine = rl_hold_of(k, holder);
        if (mine != NULL) rl_hold_remove(t, k, mine, now);
        return SMP_ENOMEM;
    }
    t->st.taken++;
    return SMP_OK;
undo_key:
    if (created) rl_key_free(t, k);
    return SMP_ENOMEM;
}

int rlease_held(const rlease_table *t, uint64_t holder, const char *key, uint64_t now)
{
    const rl_hold *h = rl_hold_of(rl_key_find(t, key), holder);
    return h != NULL && h->expiry > now;
}

int rlease_release(rlease_table *t, uint64_t holder, const char *key, uint64_t now, uint64_t *ends)
{
    rl_key *k = rl_key_find(t, key);
    if (k != NULL) k = rl_key_prune(t, k, now);
    rl_hold *h = rl_hold_of(k, holder);
    if (h == NULL) {
        t->st.refused++;
        return SMP_ENOTFOUND;
    }
    if (--h->count == 0) {
        rl_hold_remove(t, k, h, now);
        k = rl_key_find(t, key);
    }
    t->st.released++;
    if (ends) *ends = rl_key_ends(k, now);
    return SMP_OK;
}

size_t rlease_drop_holder(rlease_table *t,
                          uint64_t holder,
                          uint64_t now,
                          void (*ended)(void *arg, const char *key, uint64_t ends),
                          void *arg)
{
    rl_holder *h = rl_holder_find(t, holder);
    size_t dropped = 0;
    if (h == NULL) return 0;
    for (size_t i = 0; i < h->n; i++) {
        rl_key *k = rl_key_find(t, h->keys[i]);
        rl_hold *hold = rl_hold_of(k, holder);
        if (hold == NULL) continue; /* already given back */
        int live = hold->expiry > now;
        rl_hold_remove(t, k, hold, now);
        if (!live) continue;
        dropped++;
        if (ended) ended(arg, h->keys[i], rl_key_ends(rl_key_find(t, h->keys[i]), now));
    }
    t->st.closed += dropped;
    rl_holder_free(t, h);
    return dropped;
}

uint64_t rlease_ends(const rlease_table *t, const char *key, uint64_t now)
{
    return rl_key_ends(rl_key_find(t, key), now);
}

uint64_t rlease_count(const rlease_table *t, uint64_t now)
{
    uint64_t n = 0;
    for (const rl_key *k = t->keys; k != NULL; k = k->hh.next)
        for (uint32_t i = 0; i < k->n; i++) n += k->holds[i].expiry > now;
    return n;
}

void rlease_get_stats(const rlease_table *t, rlease_stats *out)
{
    *out = t->st;
}

size_t rlease_holder_noted(const rlease_table *t, uint64_t holder)
{
    const rl_holder *h = rl_holder_find(t, holder);
    return h != NULL ? h->n : 0;
}
