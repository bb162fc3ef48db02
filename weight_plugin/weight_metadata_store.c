/* weight_metadata_store.c -- the revision tables.
 *
 * The in-memory tables (weight_metadata_store.h): revisions by identity with
 * the reverse index group key -> revision and the identity order, operations
 * and leases by id, the lineage table, the next-id counters, and the
 * weight_metadata section. Every record is checked by the rules of
 * weight_metadata_rules.c before it is applied. It never calls the host and
 * never changes a store object.
 *
 * For the lifecycle (weight_lifecycle.c), the API to build on:
 *   - read: wm_store_get / _get_group / _affinity / _operation / _lease, and
 *     iterate with wm_store_revision_count/_at (identity order) and
 *     wm_store_lease_count/_at/_lower_bound (id order, for sweeps with a
 *     cursor). A revision's active operation is rev->operation_id.
 *   - change: never write the tables directly. Build the complete next
 *     record (wm_metadata_upsert: the revision at metadata_generation + 1
 *     when the revision changes, plus every operation the step changed),
 *     check it with wm_metadata_mutation_check, and hand it to
 *     wm_submit_upsert / wm_submit_delete (wm_plugin.h), which append it,
 *     hold the revision busy while it is in flight, apply it with
 *     wm_store_apply_upsert from the durable callback -- the same function
 *     replay uses -- and then call back. When an operation ends, the record
 *     must carry it (SUCCEEDED/FAILED) together with the revision whose
 *     operation_id is cleared; a RUNNING operation that is not its
 *     revision's active one is refused. Progress-only records may repeat the
 *     revision at its current generation (equal generations are re-applied),
 *     so clients' CAS fences are not disturbed by background progress.
 *   - before a mutation: nothing of that revision in flight
 *     (wm_pending_metadata), CAS on expected_metadata_generation for client
 *     mutations; a DELETING revision ends as a DELETED + ABSENT tombstone
 *     (type 8), record 9 is for forgetting a tombstone.
 *   - lease_count is derived from the lease table on every apply. */
#include <inttypes.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "weight_lineage.h"
#include "weight_management.h"
#include "weight_metadata_store.h"
#include "wm_bulk.h"
#include "wm_codec.h"
#include "wm_index.h"

/* ------------------------------------------------------------------------ */
/* The tables                                                                */
/* ------------------------------------------------------------------------ */

/* The entries a snapshot load creates come from one mapping of their own
 * (wm_bulk.h) sized for all of them: no malloc per entry (a malloc each
 * was 14% of a restart at 100,000 revisions). The section's revisions are
 * decoded straight into them (wm_section_place): an array of fixed-size
 * entries, then every entry's keys; their affinity
 * summaries go to chunks of the slab as they are decoded (borrowed
 * summaries: an apply that replaces one puts a malloc'ed copy in its
 * place). An entry of the slab is released on its own like any other (a
 * delete, a failed load); the mapping and its chunks go when its last
 * entry and the load that made it (one reference) are gone, so the memory
 * of deleted revisions returns only then. */
typedef struct wm_slab_chunk wm_slab_chunk;

typedef struct wm_slab {
    size_t len;  /* bytes mapped, this header included */
    size_t used; /* bytes handed out, this header included */
    size_t refs; /* entries not released, plus one while the load runs */
    wm_slab_chunk *summaries; /* the entries' affinity summaries (borrowed) */
} wm_slab;

/* The entries' affinity summaries are placed as they are decoded (their
 * sizes are not known before) in chunks of their own, which go with the
 * slab: no malloc per unit, member array and key. */
struct wm_slab_chunk {
    wm_slab_chunk *next;
    size_t len;  /* bytes mapped, this header included */
    size_t used; /* bytes handed out, this header included */
};

#define WM_SLAB_ALIGN alignof(max_align_t)
#define WM_SLAB_CHUNK ((size_t)2 << 20) /* the summaries' chunks */

/* One revision and its sealed affinity summary. Indexed twice (by identity,
 * by group key: wm_index.h) and referenced from the identity order. The
 * revision's group and manifest keys and its identity's four strings live
 * in keys[], allocated with the entry at their exact length (an identity
 * and its keys never change, so an apply keeps them): an entry takes the
 * bytes its strings need. */
typedef struct wm_rev_entry {
    wm_revision rev;
    wm_affinity aff;
    uint64_t readable_at; /* the host's (loss) version at which weight_is_exist
                           * last found every key readable; 0: none (every
                           * apply of the revision resets it) */
    wm_slab *slab; /* the mapping it lives in; NULL: malloc'ed */
    char *req;     /* the request id an apply changed it to (owned); NULL:
                    * the revision's request id is in keys[] or none */
    char keys[];   /* group key, NUL, manifest key, NUL, the identity
                    * (wm_identity_pack), then the request id and its NUL
                    * when it has one (malloc'ed entries; a slab keeps its
                    * entries' keys after the entry array, in the order
                    * wm_decode_section_placed writes them) */
} wm_rev_entry;

/* The bytes of an entry whose keys take keys_len bytes, rounded up so the
 * next entry of a slab is aligned. SIZE_MAX on overflow. */
static size_t wm_entry_size(size_t keys_len)
{
    size_t n = sizeof(wm_rev_entry) + keys_len;
    if (n < keys_len || n > SIZE_MAX - WM_SLAB_ALIGN) return SIZE_MAX;
    return (n + WM_SLAB_ALIGN - 1) & ~(size_t)(WM_SLAB_ALIGN - 1);
}

/* A slab of bytes (the entries' wm_entry_size sum), holding the load's
 * reference; NULL when it cannot be mapped (entries then come from malloc). */
static wm_slab *wm_slab_new(size_t bytes)
{
    size_t hdr = (sizeof(wm_slab) + WM_SLAB_ALIGN - 1) & ~(size_t)(WM_SLAB_ALIGN - 1);
    if (bytes == 0 || bytes > SIZE_MAX - hdr) return NULL;
    wm_slab *sl = wm_bulk_alloc(hdr + bytes);
    if (sl == NULL) return NULL;
    sl->len = hdr + bytes;
    sl->used = hdr;
    sl->refs = 1;
    sl->summaries = NULL;
    return sl;
}

/* Drop one reference; the last unmaps the slab and its summaries' chunks.
 * NULL is a no-op. */
static void wm_slab_unref(wm_slab *sl)
{
    if (sl == NULL || --sl->refs != 0) return;
    while (sl->summaries != NULL) {
        wm_slab_chunk *c = sl->summaries;
        sl->summaries = c->next;
        wm_bulk_free(c, c->len);
    }
    wm_bulk_free(sl, sl->len);
}

/* len bytes for an affinity summary of the slab's entries, aligned as a
 * slab entry; NULL on ENOMEM. */
static void *wm_slab_summary(wm_slab *sl, size_t len)
{
    size_t hdr = (sizeof(wm_slab_chunk) + WM_SLAB_ALIGN - 1) & ~(size_t)(WM_SLAB_ALIGN - 1);
    if (len > SIZE_MAX - hdr - WM_SLAB_ALIGN) return NULL;
    len = (len + WM_SLAB_ALIGN - 1) & ~(size_t)(WM_SLAB_ALIGN - 1);
    wm_slab_chunk *c = sl->summaries;
    if (c == NULL || c->len - c->used < len) {
        size_t want = hdr + len > WM_SLAB_CHUNK ? hdr + len : WM_SLAB_CHUNK;
        if ((c = wm_bulk_alloc(want)) == NULL) return NULL;
        c->next = sl->summaries;
        c->len = want;
        c->used = hdr;
        sl->summaries = c;
    }
    void *p = (char *)c + c->used;
    c->used += len;
    return p;
}

/* A new malloc'ed entry holding a copy of rev, its keys and identity in the
 * entry's own storage. NULL on OOM. */
static wm_rev_entry *wm_entry_new(const wm_revision *rev)
{
    size_t g = strlen(rev->group_key) + 1, m = strlen(rev->manifest_key) + 1;
    size_t r = rev->request_id != NULL && rev->request_id[0] ? strlen(rev->request_id) + 1 : 0;
    size_t need = wm_entry_size(g + m + wm_identity_packed_len(&rev->id) + r);
    wm_rev_entry *e;
    if (need == SIZE_MAX || (e = malloc(need)) == NULL) return NULL;
    memset(e, 0, sizeof(*e));
    memcpy(e->keys, rev->group_key, g);
    memcpy(e->keys + g, rev->manifest_key, m);
    e->rev = *rev;
    e->rev.group_key = e->keys;
    e->rev.manifest_key = e->keys + g;
    char *rq = wm_identity_pack(&rev->id, e->keys + g + m, &e->rev.id);
    e->rev.request_id = NULL;
    if (r > 0) {
        memcpy(rq, rev->request_id, r);
        e->rev.request_id = rq;
    }
    return e;
}

/* Release an entry (its affinity summary already cleared): back to its slab
 * or to malloc. */
static void wm_entry_release(wm_rev_entry *e)
{
    free(e->req);
    if (e->slab != NULL) wm_slab_unref(e->slab);
    else free(e);
}

/* The request id of rev, "" for none. */
static const char *wm_request_of(const wm_revision *rev)
{
    return rev->request_id != NULL ? rev->request_id : "";
}

/* What an apply of rev to e needs for its request id, before anything
 * changes: *req NULL when the entry's can stay (the same, or none is
 * wanted), else a malloc'ed copy for wm_entry_set. SMP_ENOMEM. */
static int wm_entry_request_prepare(const wm_rev_entry *e, const wm_revision *rev, char **req)
{
    const char *want = wm_request_of(rev);
    *req = NULL;
    if (want[0] == '\0' || strcmp(want, wm_request_of(&e->rev)) == 0) return WM_OK;
    size_t n = strlen(want) + 1;
    if ((*req = malloc(n)) == NULL) return SMP_ENOMEM;
    memcpy(*req, want, n);
    return WM_OK;
}

/* Overwrite the entry's revision with rev (same identity, so same keys),
 * keeping the keys and the identity's strings in the entry. The request
 * id: req when wm_entry_request_prepare made one (the entry takes it),
 * else the entry's own when rev names the same, else none. */
static void wm_entry_set(wm_rev_entry *e, const wm_revision *rev, char *req)
{
    const char *g = e->rev.group_key, *m = e->rev.manifest_key, *held = e->rev.request_id;
    int none = wm_request_of(rev)[0] == '\0';
    wm_identity id = e->rev.id;
    e->rev = *rev;
    e->readable_at = 0;
    e->rev.group_key = g;
    e->rev.manifest_key = m;
    e->rev.id = id;
    e->rev.request_id = none ? NULL : req != NULL ? req : held;
    if (req != NULL || none) {
        free(e->req);
        e->req = req;
    }
}

/* How many walks of the identity order (LIST clients paging through) are
 * remembered at once: more than that at a time fall back to the search. */
#define WM_WALKS 8

struct wm_store {
    wm_index by_id;            /* entries by wm_identity_hash */
    wm_index by_group;         /* entries by wm_str_hash of the group key */
    wm_rev_entry **order;      /* sorted by identity */
    size_t n_revs, cap_revs;
    wm_operation *ops;         /* sorted by id; each id_of owns its strings
                                * (one malloc'ed wm_identity_pack, which
                                * id_of.tenant_id points at: wm_op_put) */
    size_t n_ops, cap_ops;
    wm_lease *leases;          /* sorted by id; each id_of borrows the strings
                                * of its revision's entry, which outlives it
                                * (a delete drops the leases naming it) */
    size_t n_leases, cap_leases;
    wm_lineage_entry *lineages; /* sorted by lineage (weight_lineage.c rules);
                                 * each claim's identities borrow the entry's
                                 * lineage (wm_lineage_entry_bind after a move) */
    size_t n_lineages, cap_lineages;
    uint64_t next_op_id;
    uint64_t next_lease_id;
    wm_store_stats stats;
    struct {                   /* where recent walks stopped (wm_store_walk_note) */
        size_t i;
        const wm_rev_entry *e; /* order[i] then; compared, read only while still there */
        uint64_t hash;         /* wm_identity_hash of its identity: the slot to read */
    } walks[WM_WALKS];
    unsigned walk_next;        /* the slot the next note takes */
};

static uint64_t wm_fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= UINT64_C(1099511628211);
    }
    return h;
}

#define WM_FNV_INIT UINT64_C(14695981039346656037)

static uint64_t wm_identity_hash(const wm_identity *id)
{
    uint64_t h = WM_FNV_INIT;
    h = wm_fnv(h, id->tenant_id, strlen(id->tenant_id) + 1);
    h = wm_fnv(h, id->ns, strlen(id->ns) + 1);
    h = wm_fnv(h, id->resource_id, strlen(id->resource_id) + 1);
    h = wm_fnv(h, id->revision, strlen(id->revision) + 1);
    return wm_fnv(h, &id->weight_generation, sizeof(id->weight_generation));
}

static uint64_t wm_str_hash(const char *s)
{
    return wm_fnv(WM_FNV_INIT, s, strlen(s));
}

int wm_store_create(wm_store **out)
{
    wm_store *st = calloc(1, sizeof(*st));
    if (st == NULL) return SMP_ENOMEM;
    if (wm_index_init(&st->by_id) < 0 || wm_index_init(&st->by_group) < 0) {
        wm_index_fini(&st->by_id);
        free(st);
        return SMP_ENOMEM;
    }
    st->next_op_id = 1;
    st->next_lease_id = 1;
    *out = st;
    return WM_OK;
}

/* Free the strings a stored operation owns (see struct wm_store). */
static void wm_op_strings_free(wm_operation *op)
{
    free((char *)op->id_of.tenant_id);
    op->id_of.tenant_id = NULL;
}

static void wm_lineages_free(wm_lineage_entry *v)
{
    free(v);
}

void wm_store_free(wm_store *st)
{
    if (st == NULL) return;
    for (size_t i = 0; i < st->n_revs; i++) {
        wm_affinity_clear(&st->order[i]->aff);
        wm_entry_release(st->order[i]);
    }
    free(st->order);
    wm_index_fini(&st->by_id);
    wm_index_fini(&st->by_group);
    for (size_t i = 0; i < st->n_ops; i++) wm_op_strings_free(&st->ops[i]);
    free(st->ops);
    free(st->leases);
    wm_lineages_free(st->lineages);
    free(st);
}

/* wm_index_find's equality of an entry and an identity, a group key. */
static int wm_entry_is_id(const void *item, const void *key)
{
    return wm_identity_cmp(&((const wm_rev_entry *)item)->rev.id, key) == 0;
}

static int wm_entry_is_group(const void *item, const void *key)
{
    return strcmp(((const wm_rev_entry *)item)->rev.group_key, key) == 0;
}

static wm_rev_entry *wm_find_entry(const wm_store *st, const wm_identity *id)
{
    return wm_index_find(&st->by_id, wm_identity_hash(id), wm_entry_is_id, id);
}

static wm_rev_entry *wm_find_group(const wm_store *st, const char *group)
{
    return wm_index_find(&st->by_group, wm_str_hash(group), wm_entry_is_group, group);
}

size_t wm_store_revision_lower_bound(const wm_store *st, const wm_identity *id)
{
    size_t lo = 0, hi = st->n_revs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (wm_identity_cmp(&st->order[mid]->rev.id, id) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

size_t wm_store_revision_after(const wm_store *st, const wm_identity *id, int *walk)
{
    *walk = -1;
    uint64_t h = wm_identity_hash(id);
    for (unsigned k = 0; k < WM_WALKS; k++) {
        size_t i = st->walks[k].i;
        /* the hash and the pointer first: only the walk's own entry, still
         * at its place, is read */
        if (st->walks[k].e != NULL && st->walks[k].hash == h && i < st->n_revs &&
            st->order[i] == st->walks[k].e && wm_identity_cmp(&st->order[i]->rev.id, id) == 0) {
            *walk = (int)k;
            return i + 1;
        }
    }
    size_t i = wm_store_revision_lower_bound(st, id);
    if (i < st->n_revs && wm_identity_cmp(&st->order[i]->rev.id, id) == 0) i++;
    return i;
}

void wm_store_walk_note(wm_store *st, size_t i, int walk)
{
    if (i >= st->n_revs) return;
    unsigned k = walk >= 0 && walk < WM_WALKS ? (unsigned)walk : st->walk_next;
    if (k == st->walk_next) st->walk_next = (st->walk_next + 1) % WM_WALKS;
    st->walks[k].i = i;
    st->walks[k].e = st->order[i];
    st->walks[k].hash = wm_identity_hash(&st->order[i]->rev.id);
}

/* Room for n revisions in the order and both indexes. SMP_ENOMEM (what
 * was grown stays grown; nothing else changed). */
static int wm_revs_reserve(wm_store *st, size_t n)
{
    int rc;
    if (n > st->cap_revs) {
        size_t nc = st->cap_revs ? st->cap_revs : 16;
        while (nc < n) nc *= 2;
        wm_rev_entry **no = realloc(st->order, nc * sizeof(*no));
        if (no == NULL) return SMP_ENOMEM;
        st->order = no;
        st->cap_revs = nc;
    }
    if ((rc = wm_index_reserve(&st->by_id, n)) < 0) return rc;
    return wm_index_reserve(&st->by_group, n);
}

/* Link a new entry into both indexes and the order. SMP_ENOMEM (nothing
 * linked). */
static int wm_entry_insert(wm_store *st, wm_rev_entry *e)
{
    int rc;
    if ((rc = wm_revs_reserve(st, st->n_revs + 1)) < 0) return rc;
    /* A snapshot's revisions come in identity order: each goes last. */
    size_t at = st->n_revs > 0 && wm_identity_cmp(&st->order[st->n_revs - 1]->rev.id,
                                                  &e->rev.id) < 0
                    ? st->n_revs
                    : wm_store_revision_lower_bound(st, &e->rev.id);
    memmove(&st->order[at + 1], &st->order[at], (st->n_revs - at) * sizeof(*st->order));
    st->order[at] = e;
    st->n_revs++;
    /* Reserved above: neither insert can fail. */
    (void)wm_index_insert(&st->by_id, wm_identity_hash(&e->rev.id), e);
    (void)wm_index_insert(&st->by_group, wm_str_hash(e->rev.group_key), e);
    return WM_OK;
}

static void wm_entry_unlink(wm_store *st, wm_rev_entry *e)
{
    wm_index_remove(&st->by_id, wm_identity_hash(&e->rev.id), e);
    wm_index_remove(&st->by_group, wm_str_hash(e->rev.group_key), e);
    size_t at = wm_store_revision_lower_bound(st, &e->rev.id);
    if (at < st->n_revs && st->order[at] == e) {
        memmove(&st->order[at], &st->order[at + 1], (st->n_revs - at - 1) * sizeof(*st->order));
        st->n_revs--;
    }
}

static size_t wm_op_lower_bound(const wm_store *st, uint64_t id)
{
    size_t lo = 0, hi = st->n_ops;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (st->ops[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

size_t wm_store_lease_lower_bound(const wm_store *st, uint64_t id)
{
    size_t lo = 0, hi = st->n_leases;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (st->leases[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

const wm_revision *wm_store_get(const wm_store *st, const wm_identity *id)
{
    const wm_rev_entry *e = wm_find_entry(st, id);
    return e ? &e->rev : NULL;
}

const wm_revision *wm_store_get_group(const wm_store *st, const char *group_key)
{
    const wm_rev_entry *e = group_key ? wm_find_group(st, group_key) : NULL;
    return e ? &e->rev : NULL;
}

int wm_store_touch(wm_store *st, const wm_identity *id, uint64_t access_ms)
{
    wm_rev_entry *e = wm_find_entry(st, id);
    if (e == NULL || access_ms <= e->rev.last_access_ms) return 0;
    e->rev.last_access_ms = access_ms;
    return 1;
}

const wm_affinity *wm_store_affinity(const wm_store *st, const wm_identity *id)
{
    const wm_rev_entry *e = wm_find_entry(st, id);
    return e ? &e->aff : NULL;
}

const wm_revision *wm_store_get_exist(wm_store *st, const wm_identity *id,
                                      const wm_affinity **aff, uint64_t **readable_at)
{
    wm_rev_entry *e = wm_find_entry(st, id);
    *aff = e ? &e->aff : NULL;
    *readable_at = e ? &e->readable_at : NULL;
    return e ? &e->rev : NULL;
}

const wm_operation *wm_store_operation(const wm_store *st, uint64_t op_id)
{
    size_t at = wm_op_lower_bound(st, op_id);
    return at < st->n_ops && st->ops[at].id == op_id ? &st->ops[at] : NULL;
}

const wm_lease *wm_store_lease(const wm_store *st, uint64_t lease_id)
{
    size_t at = wm_store_lease_lower_bound(st, lease_id);
    return at < st->n_leases && st->leases[at].id == lease_id ? &st->leases[at] : NULL;
}

size_t wm_store_revision_count(const wm_store *st) { return st->n_revs; }
const wm_revision *wm_store_revision_at(const wm_store *st, size_t i)
{
    return i < st->n_revs ? &st->order[i]->rev : NULL;
}

#define WM_LINE 64

/* Prefetch the cache lines of [from, to) for reading. */
static void wm_prefetch_span(const char *from, const char *to)
{
    uintptr_t a = (uintptr_t)from & ~(uintptr_t)(WM_LINE - 1);
    for (; a < (uintptr_t)to; a += WM_LINE) __builtin_prefetch((const void *)a, 0, 3);
}

void wm_store_prefetch_fields(const wm_store *st, size_t i)
{
    if (i >= st->n_revs) return;
    const wm_rev_entry *e = st->order[i]; /* the order array is read in sequence */
    wm_prefetch_span((const char *)&e->rev, (const char *)(&e->rev + 1));
}

/* The last of a revision's strings in memory ends within this many bytes
 * of its start for the names a list shows in practice (a manifest key of
 * up to 64 bytes, a revision name of up to 64); a longer one costs a miss,
 * never a wrong answer. */
#define WM_PREFETCH_TAIL 64

void wm_store_prefetch_keys(const wm_store *st, size_t i)
{
    if (i >= st->n_revs) return;
    const wm_revision *r = &st->order[i]->rev;
    const char *s[6] = {r->group_key, r->manifest_key, r->id.tenant_id,
                        r->id.ns,        r->id.resource_id, r->id.revision};
    uintptr_t lo = (uintptr_t)s[0], hi = lo; /* addresses: the strings may lie apart */
    for (int k = 1; k < 6; k++) {
        if ((uintptr_t)s[k] < lo) lo = (uintptr_t)s[k];
        if ((uintptr_t)s[k] > hi) hi = (uintptr_t)s[k];
    }
    /* A malloc'ed entry keeps its strings together behind it (group key,
     * manifest key, identity: wm_entry_new), a slab's entry in the slab's
     * key area (identity, group key, manifest key); anything else gets a
     * line or two per string. */
    if (hi - lo <= 8 * WM_LINE) {
        wm_prefetch_span((const char *)lo, (const char *)(hi + WM_PREFETCH_TAIL));
        return;
    }
    for (int k = 0; k < 6; k++) wm_prefetch_span(s[k], s[k] + WM_PREFETCH_TAIL);
}

size_t wm_store_operation_count(const wm_store *st) { return st->n_ops; }
const wm_operation *wm_store_operation_at(const wm_store *st, size_t i)
{
    return i < st->n_ops ? &st->ops[i] : NULL;
}
size_t wm_store_operation_lower_bound(const wm_store *st, uint64_t op_id)
{
    return wm_op_lower_bound(st, op_id);
}
size_t wm_store_lease_count(const wm_store *st) { return st->n_leases; }
const wm_lease *wm_store_lease_at(const wm_store *st, size_t i)
{
    return i < st->n_leases ? &st->leases[i] : NULL;
}

uint64_t wm_store_reserve_operation_id(wm_store *st) { return st->next_op_id++; }
uint64_t wm_store_reserve_lease_id(wm_store *st) { return st->next_lease_id++; }

void wm_store_stats_get(const wm_store *st, wm_store_stats *out)
{
    *out = st->stats;
    out->operations = st->n_ops;
    out->leases = st->n_leases;
}

/* Take a revision out of (sign -1) or into (+1) the counts. */
static void wm_stats_count(wm_store *st, const wm_revision *r, int sign)
{
    uint64_t d = (uint64_t)(int64_t)sign;
    st->stats.revision_changes++;
    if (wm_availability_valid((int)r->availability)) st->stats.by_availability[r->availability] += d;
    if (wm_residency_valid((int)r->residency)) st->stats.by_residency[r->residency] += d;
    if (r->operation_id != 0) st->stats.active_operations += d;
}

/* Insert or replace one operation by id. The stored copy owns its
 * identity's strings: a replacement naming the same identity keeps the
 * ones held, anything else gets a malloc'ed copy. SMP_ENOMEM (nothing
 * changed). */
static int wm_op_put(wm_store *st, const wm_operation *op)
{
    size_t at = wm_op_lower_bound(st, op->id);
    int found = at < st->n_ops && st->ops[at].id == op->id;
    wm_identity id;
    if (found && wm_identity_cmp(&st->ops[at].id_of, &op->id_of) == 0) {
        id = st->ops[at].id_of;
    } else {
        char *strs = malloc(wm_identity_packed_len(&op->id_of));
        if (strs == NULL) return SMP_ENOMEM;
        wm_identity_pack(&op->id_of, strs, &id);
    }
    if (found) {
        if (id.tenant_id != st->ops[at].id_of.tenant_id) wm_op_strings_free(&st->ops[at]);
        st->ops[at] = *op;
        st->ops[at].id_of = id;
    } else {
        if (st->n_ops == st->cap_ops) {
            size_t nc = st->cap_ops ? st->cap_ops * 2 : 16;
            wm_operation *no = realloc(st->ops, nc * sizeof(*no));
            if (no == NULL) {
                free((char *)id.tenant_id);
                return SMP_ENOMEM;
            }
            st->ops = no;
            st->cap_ops = nc;
        }
        memmove(&st->ops[at + 1], &st->ops[at], (st->n_ops - at) * sizeof(*st->ops));
        st->ops[at] = *op;
        st->ops[at].id_of = id;
        st->n_ops++;
    }
    if (op->id >= st->next_op_id) st->next_op_id = op->id + 1;
    return WM_OK;
}

static void wm_op_drop(wm_store *st, uint64_t id)
{
    size_t at = wm_op_lower_bound(st, id);
    if (at < st->n_ops && st->ops[at].id == id) {
        wm_op_strings_free(&st->ops[at]);
        memmove(&st->ops[at], &st->ops[at + 1], (st->n_ops - at - 1) * sizeof(*st->ops));
        st->n_ops--;
    }
}

static uint32_t wm_leases_naming(const wm_store *st, const wm_identity *id)
{
    uint32_t n = 0;
    for (size_t i = 0; i < st->n_leases; i++)
        if (wm_identity_cmp(&st->leases[i].id_of, id) == 0) n++;
    return n;
}

/* ------------------------------------------------------------------------ */
/* Apply                                                                     */
/* ------------------------------------------------------------------------ */

/* What an upsert may not do to the revision held (e): change the sealed
 * manifest reference and payload summary once past IMPORTING, or leave the
 * active operation without ending it (the record must carry that operation
 * in a final state). WM_OK or WM_EINVALID_ARGUMENT with a sentence. */
static int wm_upsert_fits_held(const wm_store *st,
                               const wm_rev_entry *e,
                               const wm_metadata_upsert *u,
                               char *msg,
                               size_t cap)
{
    const wm_revision *before = &e->rev, *after = &u->revision;
    if (before->availability != WM_AVAIL_IMPORTING && !wm_sealed_equal(before, after))
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "revision %s: the sealed manifest reference and payload summary cannot "
                       "change",
                       before->group_key);
    if (before->operation_id == 0 || after->operation_id == before->operation_id ||
        wm_store_operation(st, before->operation_id) == NULL)
        return WM_OK;
    for (size_t i = 0; i < u->n_operations; i++)
        if (u->operations[i].id == before->operation_id &&
            u->operations[i].state != WM_OPS_RUNNING)
            return WM_OK;
    return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                   "revision %s leaves its active operation %" PRIu64 " without ending it",
                   before->group_key, before->operation_id);
}

/* The checks of an upsert against the store, shared by check and apply:
 * *held gets the entry it replaces (NULL for a new revision) and *next the
 * revision as it would be stored. 1 when the record is older than what is
 * held (applying it changes nothing), WM_OK, or WM_EINVALID_ARGUMENT with a
 * sentence. */
static int wm_upsert_plan(const wm_store *st,
                          const wm_metadata_upsert *u,
                          wm_rev_entry **held_out,
                          wm_revision *next_out,
                          char *msg,
                          size_t cap)
{
    int rc;
    if (st == NULL || u == NULL)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "upsert is missing");
    wm_rev_entry *e = wm_find_entry(st, &u->revision.id);
    *held_out = e;
    if (e != NULL && u->revision.metadata_generation < e->rev.metadata_generation) return 1;

    wm_revision *next = next_out;
    *next = u->revision;
    next->lease_count = wm_leases_naming(st, &next->id);
    if ((rc = wm_metadata_check(next, msg, cap)) < 0) return rc;
    for (size_t i = 0; i < u->n_operations; i++)
        if ((rc = wm_operation_check(&u->operations[i], next, msg, cap)) < 0) return rc;
    if (next->operation_id != 0) {
        int named = 0;
        for (size_t i = 0; i < u->n_operations; i++)
            named |= u->operations[i].id == next->operation_id;
        const wm_operation *held = wm_store_operation(st, next->operation_id);
        if (!named && (held == NULL || wm_operation_check(held, next, NULL, 0) < 0))
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "revision names active operation %" PRIu64
                           ", which is neither in the record nor held RUNNING",
                           next->operation_id);
    }
    if (e != NULL && (rc = wm_upsert_fits_held(st, e, u, msg, cap)) < 0) return rc;
    for (size_t i = 0; i < u->n_operations; i++) {
        const wm_operation *held = wm_store_operation(st, u->operations[i].id);
        if (held != NULL && wm_identity_cmp(&held->id_of, &next->id) != 0)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "operation %" PRIu64 " belongs to another revision", held->id);
    }
    if (u->has_lease) {
        const wm_lease *held = wm_store_lease(st, u->lease.id);
        if ((rc = wm_lease_check(&u->lease, msg, cap)) < 0) return rc;
        if (wm_identity_cmp(&u->lease.id_of, &next->id) != 0 ||
            (held != NULL && wm_identity_cmp(&held->id_of, &next->id) != 0))
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "lease %" PRIu64 " in the record of %s names another revision",
                           u->lease.id, next->group_key);
        if ((next->availability != WM_AVAIL_READY && next->availability != WM_AVAIL_DEGRADED) ||
            u->lease.metadata_generation != next->metadata_generation)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "lease %" PRIu64 " must be granted on the READY or DEGRADED revision "
                           "at the record's generation %" PRIu64,
                           u->lease.id, next->metadata_generation);
    }
    if (u->has_affinity) return wm_affinity_check(&u->affinity, next, msg, cap);
    if (next->availability == WM_AVAIL_READY || next->availability == WM_AVAIL_DEGRADED) {
        /* the summary held must be the one the revision seals */
        if (e == NULL || e->aff.n_units == 0)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "%s revision arrives without its affinity summary",
                           wm_availability_name((int)next->availability));
        return wm_affinity_check(&e->aff, next, msg, cap);
    }
    return WM_OK;
}

int wm_store_check_upsert(const wm_store *st, const wm_metadata_upsert *u, char *msg, size_t cap)
{
    wm_rev_entry *held;
    wm_revision next;
    int rc = wm_upsert_plan(st, u, &held, &next, msg, cap);
    return rc < 0 ? rc : WM_OK;
}

/* Room for one more lease, so that inserting it cannot fail later.
 * SMP_ENOMEM. */
static int wm_leases_reserve(wm_store *st)
{
    if (st->n_leases < st->cap_leases) return WM_OK;
    size_t nc = st->cap_leases ? st->cap_leases * 2 : 16;
    wm_lease *nl = realloc(st->leases, nc * sizeof(*nl));
    if (nl == NULL) return SMP_ENOMEM;
    st->leases = nl;
    st->cap_leases = nc;
    return WM_OK;
}

/* Insert lease l of revision e, or replace the lease of that id (checked
 * by the caller; room reserved with wm_leases_reserve). The stored lease
 * borrows e's identity strings. A new lease counts on e and moves e's last
 * access to its grant time: an access is recorded without a new metadata
 * generation. */
static void wm_lease_put(wm_store *st, wm_rev_entry *e, const wm_lease *l)
{
    size_t at = wm_store_lease_lower_bound(st, l->id);
    if (at < st->n_leases && st->leases[at].id == l->id) {
        st->leases[at] = *l;
        st->leases[at].id_of = e->rev.id;
    } else {
        memmove(&st->leases[at + 1], &st->leases[at], (st->n_leases - at) * sizeof(*st->leases));
        st->leases[at] = *l;
        st->leases[at].id_of = e->rev.id;
        st->n_leases++;
        e->rev.lease_count++;
        if (l->granted_ms > e->rev.last_access_ms) e->rev.last_access_ms = l->granted_ms;
    }
    if (l->id >= st->next_lease_id) st->next_lease_id = l->id + 1;
}

int wm_store_apply_upsert(wm_store *st, const wm_metadata_upsert *u, char *msg, size_t cap)
{
    int rc;
    wm_affinity aff_copy = {0};
    int have_copy = 0;

    wm_rev_entry *e;
    wm_revision next;
    if ((rc = wm_upsert_plan(st, u, &e, &next, msg, cap)) != WM_OK)
        return rc < 0 ? rc : WM_OK; /* 1: older than what is held, already applied */
    if (u->has_lease && (rc = wm_leases_reserve(st)) < 0) return rc;
    if (u->has_affinity) {
        if ((rc = wm_affinity_copy(&u->affinity, &aff_copy)) < 0) return rc;
        have_copy = 1;
    }
    /* An access recorded by a lease record meanwhile is not undone. */
    if (e != NULL && e->rev.last_access_ms > next.last_access_ms)
        next.last_access_ms = e->rev.last_access_ms;

    if (e == NULL) {
        e = wm_entry_new(&next);
        if (e == NULL) {
            rc = SMP_ENOMEM;
            goto free_copy;
        }
        if ((rc = wm_entry_insert(st, e)) < 0) {
            wm_entry_release(e);
            goto free_copy;
        }
    } else {
        char *req;
        if ((rc = wm_entry_request_prepare(e, &next, &req)) < 0) goto free_copy;
        wm_stats_count(st, &e->rev, -1);
        wm_entry_set(e, &next, req);
    }
    wm_stats_count(st, &e->rev, +1);
    if (have_copy) {
        wm_affinity_clear(&e->aff);
        e->aff = aff_copy;
        have_copy = 0;
    }
    for (size_t i = 0; i < u->n_operations; i++)
        if ((rc = wm_op_put(st, &u->operations[i])) < 0) return rc;
    if (u->has_lease) wm_lease_put(st, e, &u->lease);
    return WM_OK;
free_copy:
    if (have_copy) wm_affinity_clear(&aff_copy);
    return rc;
}

/* The checks of a delete, shared by check and apply: *held gets the entry
 * to drop. 1 when there is nothing to drop (absent, or held above d's
 * generation), WM_OK, or WM_EINVALID_ARGUMENT with a sentence. */
static int wm_delete_plan(const wm_store *st,
                          const wm_metadata_delete *d,
                          wm_rev_entry **held,
                          char *msg,
                          size_t cap)
{
    if (st == NULL || d == NULL)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "delete is missing");
    wm_rev_entry *e = wm_find_entry(st, &d->id);
    *held = e;
    if (d->reason == WM_DEL_OPERATIONS_EXPIRED) {
        /* Only ended operations of d's revision (present or not) go. */
        for (size_t i = 0; i < d->n_operation_ids; i++) {
            const wm_operation *op = wm_store_operation(st, d->operation_ids[i]);
            if (op == NULL) continue;
            if (wm_identity_cmp(&op->id_of, &d->id) != 0 || op->state == WM_OPS_RUNNING ||
                (e != NULL && e->rev.operation_id == op->id))
                return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                               "operation %" PRIu64 " is not an ended operation of the revision "
                               "the delete names",
                               op->id);
        }
        return WM_OK;
    }
    if (e == NULL || e->rev.metadata_generation > d->metadata_generation) return 1;
    for (size_t i = 0; i < d->n_operation_ids; i++) {
        const wm_operation *op = wm_store_operation(st, d->operation_ids[i]);
        if (op != NULL && wm_identity_cmp(&op->id_of, &d->id) != 0)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "delete of %s lists operation %" PRIu64 ", which belongs to another "
                           "revision",
                           e->rev.group_key, op->id);
    }
    return WM_OK;
}

int wm_store_check_delete(const wm_store *st, const wm_metadata_delete *d, char *msg, size_t cap)
{
    wm_rev_entry *held;
    int rc = wm_delete_plan(st, d, &held, msg, cap);
    return rc < 0 ? rc : WM_OK;
}

int wm_store_apply_delete(wm_store *st, const wm_metadata_delete *d, char *msg, size_t cap)
{
    wm_rev_entry *e;
    int rc = wm_delete_plan(st, d, &e, msg, cap);
    if (rc != WM_OK) return rc < 0 ? rc : WM_OK; /* 1: nothing to drop */
    for (size_t i = 0; i < d->n_operation_ids; i++) wm_op_drop(st, d->operation_ids[i]);
    if (d->reason == WM_DEL_OPERATIONS_EXPIRED) return WM_OK;
    for (size_t i = 0; i < st->n_leases;) {
        if (wm_identity_cmp(&st->leases[i].id_of, &d->id) == 0) {
            memmove(&st->leases[i], &st->leases[i + 1], (st->n_leases - i - 1) * sizeof(*st->leases));
            st->n_leases--;
        } else {
            i++;
        }
    }
    if (e->rev.operation_id != 0) wm_op_drop(st, e->rev.operation_id);
    wm_stats_count(st, &e->rev, -1);
    wm_entry_unlink(st, e);
    wm_affinity_clear(&e->aff);
    wm_entry_release(e);
    return WM_OK;
}

/* The checks of a lease grant or renewal, shared by check and apply: *held
 * gets the revision's entry. WM_OK or WM_EINVALID_ARGUMENT with a sentence. */
static int wm_lease_plan(const wm_store *st, const wm_lease *l, wm_rev_entry **held_rev, char *msg,
                         size_t cap)
{
    int rc;
    if (st == NULL || l == NULL) return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "lease is missing");
    if ((rc = wm_lease_check(l, msg, cap)) < 0) return rc;
    wm_rev_entry *e = wm_find_entry(st, &l->id_of);
    if (e == NULL || (e->rev.availability != WM_AVAIL_READY &&
                      e->rev.availability != WM_AVAIL_DEGRADED))
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "lease %" PRIu64 " names a revision that is not READY or DEGRADED",
                       l->id);
    if (l->metadata_generation > e->rev.metadata_generation)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                       "lease %" PRIu64 " is fenced on generation %" PRIu64
                       ", above the revision's %" PRIu64,
                       l->id, l->metadata_generation, e->rev.metadata_generation);
    const wm_lease *held = wm_store_lease(st, l->id);
    if (held != NULL) {
        if (wm_identity_cmp(&held->id_of, &l->id_of) != 0)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "lease %" PRIu64 " changes its revision", l->id);
        /* A renewal extends the lease; the generation it was granted at
         * is its fence and never moves. */
        if (held->metadata_generation != l->metadata_generation ||
            held->granted_ms != l->granted_ms)
            return wm_fail(WM_EINVALID_ARGUMENT, msg, cap,
                           "lease %" PRIu64 " was granted at generation %" PRIu64
                           "; a renewal cannot move its fence",
                           l->id, held->metadata_generation);
    }
    *held_rev = e;
    return WM_OK;
}

int wm_store_check_lease_upsert(const wm_store *st, const wm_lease *l, char *msg, size_t cap)
{
    wm_rev_entry *e;
    return wm_lease_plan(st, l, &e, msg, cap);
}

int wm_store_apply_lease_upsert(wm_store *st, const wm_lease *l, char *msg, size_t cap)
{
    int rc;
    wm_rev_entry *e = NULL;
    if ((rc = wm_lease_plan(st, l, &e, msg, cap)) < 0) return rc;
    if ((rc = wm_leases_reserve(st)) < 0) return rc;
    wm_lease_put(st, e, l);
    return WM_OK;
}

int wm_store_apply_lease_delete(wm_store *st, const wm_lease_delete *d, char *msg, size_t cap)
{
    if (st == NULL || d == NULL)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "lease end is missing");
    size_t at = wm_store_lease_lower_bound(st, d->lease_id);
    if (at >= st->n_leases || st->leases[at].id != d->lease_id) return WM_OK;
    wm_rev_entry *e = wm_find_entry(st, &st->leases[at].id_of);
    if (e != NULL && e->rev.lease_count > 0) e->rev.lease_count--;
    memmove(&st->leases[at], &st->leases[at + 1], (st->n_leases - at - 1) * sizeof(*st->leases));
    st->n_leases--;
    return WM_OK;
}

/* ------------------------------------------------------------------------ */
/* The lineage table                                                         */
/* ------------------------------------------------------------------------ */

/* Index of the first entry not below lin (n_lineages when none). */
static size_t wm_lineage_lower_bound(const wm_store *st, const wm_lineage *lin)
{
    size_t lo = 0, hi = st->n_lineages;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (wm_lineage_cmp(&st->lineages[mid].lineage, lin) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const wm_lineage_entry *wm_store_lineage(const wm_store *st, const wm_lineage *lin)
{
    size_t at = wm_lineage_lower_bound(st, lin);
    if (at < st->n_lineages && wm_lineage_cmp(&st->lineages[at].lineage, lin) == 0)
        return &st->lineages[at];
    return NULL;
}

size_t wm_store_lineage_count(const wm_store *st)
{
    return st->n_lineages;
}

const wm_lineage_entry *wm_store_lineage_at(const wm_store *st, size_t i)
{
    return i < st->n_lineages ? &st->lineages[i] : NULL;
}

/* Whether e holds a claim still in progress (counted in open_claims). */
static int wm_claim_open(const wm_lineage_entry *e)
{
    return e->has_claim && !wm_claim_terminal(&e->claim);
}

int wm_store_apply_claim(wm_store *st, const wm_lineage_claim *c, char *msg, size_t cap)
{
    int rc;
    wm_lineage_entry e;
    if (st == NULL || c == NULL)
        return wm_fail(WM_EINVALID_ARGUMENT, msg, cap, "lineage claim is missing");
    wm_lineage lin;
    wm_identity_lineage(&c->base, &lin);
    size_t at = wm_lineage_lower_bound(st, &lin);
    int found = at < st->n_lineages && wm_lineage_cmp(&st->lineages[at].lineage, &lin) == 0;
    if (found) {
        e = st->lineages[at];
    } else {
        memset(&e, 0, sizeof(e));
        e.lineage = lin;
    }
    if ((rc = wm_lineage_claim_step(&e, c, msg, cap)) < 0) return rc;
    if (found) {
        if (wm_claim_open(&st->lineages[at])) st->stats.open_claims--;
        if (wm_claim_open(&e)) st->stats.open_claims++;
        st->lineages[at] = e;
        wm_lineage_entry_bind(&st->lineages[at]);
        return WM_OK;
    }
    if (st->n_lineages == st->cap_lineages) {
        size_t nc = st->cap_lineages ? st->cap_lineages * 2 : 8;
        wm_lineage_entry *nl = realloc(st->lineages, nc * sizeof(*nl));
        if (nl == NULL) return SMP_ENOMEM;
        st->lineages = nl;
        st->cap_lineages = nc;
    }
    memmove(&st->lineages[at + 1], &st->lineages[at],
            (st->n_lineages - at) * sizeof(*st->lineages));
    st->lineages[at] = e;
    st->n_lineages++;
    for (size_t i = 0; i < st->n_lineages; i++) wm_lineage_entry_bind(&st->lineages[i]);
    if (wm_claim_open(&e)) st->stats.open_claims++;
    return WM_OK;
}

int wm_store_replay(wm_store *st, uint16_t type, const uint8_t *buf, size_t len, char *msg,
                    size_t cap)
{
    int rc;
    switch (type) {
    case WM_OP_METADATA_UPSERT: {
        wm_metadata_upsert u;
        if ((rc = wm_decode_metadata_upsert(buf, len, &u, msg, cap)) < 0) return rc;
        rc = wm_store_apply_upsert(st, &u, msg, cap);
        wm_metadata_upsert_clear(&u);
        return rc;
    }
    case WM_OP_METADATA_DELETE: {
        wm_metadata_delete d;
        if ((rc = wm_decode_metadata_delete(buf, len, &d, msg, cap)) < 0) return rc;
        rc = wm_store_apply_delete(st, &d, msg, cap);
        wm_metadata_delete_clear(&d);
        return rc;
    }
    case WM_OP_LEASE_UPSERT: {
        wm_lease l;
        wm_identity_buf ids;
        if ((rc = wm_decode_lease_upsert(buf, len, &l, &ids, msg, cap)) < 0) return rc;
        return wm_store_apply_lease_upsert(st, &l, msg, cap);
    }
    case WM_OP_LEASE_DELETE: {
        wm_lease_delete d;
        wm_identity_buf ids;
        if ((rc = wm_decode_lease_delete(buf, len, &d, &ids, msg, cap)) < 0) return rc;
        return wm_store_apply_lease_delete(st, &d, msg, cap);
    }
    case WM_OP_LINEAGE_CLAIM: {
        wm_lineage_claim c;
        wm_identity_buf ids;
        if ((rc = wm_decode_lineage_claim(buf, len, &c, &ids, msg, cap)) < 0) return rc;
        return wm_store_apply_claim(st, &c, msg, cap);
    }
    default:
        return wm_fail(SMP_ENOTSUP, msg, cap,
                       "record type %u is not replayed by this build", (unsigned)type);
    }
}

/* ------------------------------------------------------------------------ */
/* The snapshot section                                                      */
/* ------------------------------------------------------------------------ */

int wm_store_save(const wm_store *st, uint8_t **out, size_t *out_len, char *msg, size_t cap)
{
    int rc;
    wm_section_image img;
    memset(&img, 0, sizeof(img));
    img.n_revisions = st->n_revs;
    if (st->n_revs > 0) {
        img.revisions = malloc(st->n_revs * sizeof(*img.revisions));
        img.affinities = malloc(st->n_revs * sizeof(*img.affinities));
        if (img.revisions == NULL || img.affinities == NULL) {
            rc = SMP_ENOMEM;
            goto free_arrays;
        }
        for (size_t i = 0; i < st->n_revs; i++) {
            img.revisions[i] = st->order[i]->rev;
            img.affinities[i] = st->order[i]->aff; /* borrowed, not cleared */
        }
    }
    img.operations = st->ops;
    img.n_operations = st->n_ops;
    img.leases = st->leases;
    img.n_leases = st->n_leases;
    img.lineages = st->lineages;
    img.n_lineages = st->n_lineages;
    img.next_operation_id = st->next_op_id;
    img.next_lease_id = st->next_lease_id;
    rc = wm_encode_section(&img, out, out_len, msg, cap);
free_arrays:
    free(img.revisions);
    free(img.affinities);
    return rc;
}

static int wm_lineage_entry_cmp(const void *a, const void *b)
{
    const wm_lineage_entry *x = a, *y = b;
    return wm_lineage_cmp(&x->lineage, &y->lineage);
}

/* wm_section_place's alloc for a load: a slab of n entries and keys_len
 * bytes of keys; *ctx (a wm_slab **) gets it with the load's reference. */
static void *wm_load_place(void *ctx, size_t n, size_t keys_len, char **keys)
{
    wm_slab **out = ctx;
    if (n > (SIZE_MAX - keys_len - 2 * WM_SLAB_ALIGN) / sizeof(wm_rev_entry)) return NULL;
    size_t entries = n * sizeof(wm_rev_entry);
    wm_slab *sl = wm_slab_new(entries + keys_len);
    if (sl == NULL) return NULL;
    char *first = (char *)sl + sl->used;
    sl->used += entries + keys_len;
    *keys = first + entries;
    *out = sl;
    return first;
}

/* wm_section_place's aff_alloc for a load: from the slab wm_load_place
 * made (*ctx), which the summaries' entries keep. */
static void *wm_load_place_summary(void *ctx, size_t len)
{
    wm_slab *sl = *(wm_slab **)ctx;
    return sl != NULL ? wm_slab_summary(sl, len) : NULL;
}

int wm_store_load(wm_store *st, const uint8_t *buf, size_t len, char *msg, size_t cap)
{
    int rc;
    wm_section_image img;
    wm_store *fresh = NULL;
    wm_slab *slab = NULL;
    size_t i;
    const wm_section_place place = {wm_load_place, &slab, sizeof(wm_rev_entry),
                                    offsetof(wm_rev_entry, rev), offsetof(wm_rev_entry, aff),
                                    wm_load_place_summary};

    if ((rc = wm_decode_section_placed(buf, len, &place, &img, msg, cap)) < 0) goto unref_slab;
    if ((rc = wm_store_create(&fresh)) < 0) goto clear_image;
    if ((rc = wm_revs_reserve(fresh, img.n_revisions)) < 0) goto free_fresh;
    /* Each entry holds its decoded revision and affinity summary: link it.
     * From here the image's affinities are the entries'. */
    for (i = 0; i < img.n_revisions; i++) {
        wm_rev_entry *e = (wm_rev_entry *)((char *)wm_image_revision(&img, i) -
                                           offsetof(wm_rev_entry, rev));
        e->slab = slab;
        e->req = NULL;
        e->readable_at = 0;
        slab->refs++;
        if ((rc = wm_entry_insert(fresh, e)) < 0) {
            wm_affinity_clear(&e->aff);
            wm_entry_release(e);
            for (i++; i < img.n_revisions; i++) wm_affinity_clear(wm_image_affinity(&img, i));
            img.n_revisions = 0;
            goto free_fresh;
        }
        wm_stats_count(fresh, &e->rev, +1);
    }
    img.n_revisions = 0;
    for (size_t i = 0; i < img.n_operations; i++)
        if ((rc = wm_op_put(fresh, &img.operations[i])) < 0) goto free_fresh;
    for (size_t i = 0; i < img.n_leases; i++) {
        size_t at = wm_store_lease_lower_bound(fresh, img.leases[i].id);
        if (fresh->n_leases == fresh->cap_leases) {
            size_t nc = fresh->cap_leases ? fresh->cap_leases * 2 : 16;
            wm_lease *nl = realloc(fresh->leases, nc * sizeof(*nl));
            if (nl == NULL) {
                rc = SMP_ENOMEM;
                goto free_fresh;
            }
            fresh->leases = nl;
            fresh->cap_leases = nc;
        }
        wm_rev_entry *e = wm_find_entry(fresh, &img.leases[i].id_of);
        if (e == NULL) { /* wm_section_check refuses it before */
            rc = wm_fail(SMP_EPROTO, msg, cap, "lease %" PRIu64 " names no revision",
                         img.leases[i].id);
            goto free_fresh;
        }
        memmove(&fresh->leases[at + 1], &fresh->leases[at],
                (fresh->n_leases - at) * sizeof(*fresh->leases));
        fresh->leases[at] = img.leases[i];
        fresh->leases[at].id_of = e->rev.id;
        fresh->n_leases++;
    }
    if (img.n_lineages > 0) {
        fresh->lineages = malloc(img.n_lineages * sizeof(*fresh->lineages));
        if (fresh->lineages == NULL) {
            rc = SMP_ENOMEM;
            goto free_fresh;
        }
        memcpy(fresh->lineages, img.lineages, img.n_lineages * sizeof(*fresh->lineages));
        fresh->n_lineages = img.n_lineages;
        fresh->cap_lineages = img.n_lineages;
        qsort(fresh->lineages, fresh->n_lineages, sizeof(*fresh->lineages), wm_lineage_entry_cmp);
        for (size_t i = 0; i < fresh->n_lineages; i++) {
            wm_lineage_entry_bind(&fresh->lineages[i]);
            if (wm_claim_open(&fresh->lineages[i])) fresh->stats.open_claims++;
        }
    }
    fresh->next_op_id = img.next_operation_id > fresh->next_op_id ? img.next_operation_id
                                                                   : fresh->next_op_id;
    fresh->next_lease_id = img.next_lease_id > fresh->next_lease_id ? img.next_lease_id
                                                                     : fresh->next_lease_id;

    /* The change count only grows, across a load too. */
    fresh->stats.revision_changes += st->stats.revision_changes + 1;
    /* Swap the contents: the caller's handle now holds the loaded tables. */
    wm_store tmp = *st;
    *st = *fresh;
    *fresh = tmp;
    rc = WM_OK;
free_fresh:
    wm_store_free(fresh);
clear_image:
    wm_section_image_clear(&img);
unref_slab:
    wm_slab_unref(slab); /* the load's reference: the entries hold the rest */
    return rc;
}
