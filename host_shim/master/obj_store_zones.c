/* obj_store_zones.c -- write zones: where a master places the puts it starts
 * without a record, so that the master after it knows where their writers
 * may still be copying. Part of obj_store (see obj_store.c).
 *
 * A put under OBJ_ZONE_PUT_MAX starts without a record (a large one's
 * start is a PUT_HANDOFF). With zones on, such a put is placed only in its
 * segment's arena, a range of the segment this master chose; the arena is
 * durable in a WRITE_ZONES record before the first put placed in it is
 * answered. The record names every range of the segment an unrecorded
 * writer of this master may be in: the arena, the zoned puts still open
 * outside it (placed in an arena before), and the zones of the master
 * before it that it still holds back. So a store that replays the log or
 * loads a snapshot knows a superset of where such writers are.
 *
 * A range reserved for a replica (obj_reserve_replica), which a node fills
 * from a cold file without a record, is named the same way: with zones
 * on, the master sends the node its task once a record naming the range
 * is durable.
 *
 * Such a store, once it leads, takes the zones over before it places
 * anything: it holds back every free byte of them (allocated, so no put,
 * replica or reservation lands there) for a stale put's time, after which
 * a writer of the master before would have been given up anyway, and then
 * gives them back through the abandon hook (a writer's bytes may be left).
 * Bytes of the zones that objects or handed puts occupy are theirs.
 *
 * An arena is a sixteenth of its segment, at most OBJ_ZONE_ARENA_MAX bytes
 * and at least the put that opens it, so a new arena, and its record, comes
 * once per many small puts, and a master after a crash holds little of a
 * segment back. */
#include "obj_store_internal.h"

#include <stdlib.h>
#include <string.h>

#define OBJ_ZONE_ARENA_MAX (64ull << 20)
/* The most ranges one segment's zones may name (a record or snapshot with
 * more is refused as malformed; placement refuses a put that would need
 * more with SMP_EBUSY). */
#define OBJ_ZONES_MAX 65536

void obj_zones_enable(obj_store *st, int on)
{
    OBJ_CHECK_CALLER(st);
    st->zones_on = on ? 1 : 0;
}

/* The bytes of a new arena of s for a put of need bytes. */
static uint64_t arena_len(const obj_segment *s, uint64_t need)
{
    uint64_t len = s->capacity / 16 / OBJ_ALIGN * OBJ_ALIGN;
    if (len > OBJ_ZONE_ARENA_MAX) len = OBJ_ZONE_ARENA_MAX;
    return len < need ? need : len;
}

/* The first free range of s that ends after lo (s->nfree: none). */
static size_t free_ending_after(const obj_segment *s, uint64_t lo)
{
    size_t a = 0, b = s->nfree;
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        if (s->free[mid].off + s->free[mid].len <= lo) a = mid + 1;
        else b = mid;
    }
    return a;
}

/* First fit of len bytes inside [lo, hi) of s. SMP_ENOSPC. */
static int alloc_in(obj_segment *s, uint64_t len, uint64_t lo, uint64_t hi, uint64_t *off)
{
    for (size_t i = free_ending_after(s, lo); i < s->nfree; i++) {
        const obj_extent *e = &s->free[i];
        if (e->off >= hi) break;
        uint64_t a = e->off > lo ? e->off : lo;
        uint64_t b = e->off + e->len < hi ? e->off + e->len : hi;
        if (b - a < len) continue;
        *off = a;
        return obj_seg_reserve(s, a, len);
    }
    return SMP_ENOSPC;
}

/* 1 when r lies wholly in z. */
static int extent_within(obj_extent r, obj_extent z)
{
    return z.off <= r.off && r.off + r.len <= z.off + z.len;
}

int obj_zones_cover(const obj_segment *s, obj_extent r)
{
    for (size_t i = 0; i < s->nzones; i++)
        if (extent_within(r, s->zones[i])) return 1;
    return 0;
}

int obj_zone_alloc(obj_segment *s, uint64_t len, uint64_t *off, int *wait)
{
    int rc = SMP_ENOSPC;
    if (s->arena.len > 0)
        rc = alloc_in(s, len, s->arena.off, s->arena.off + s->arena.len, off);
    if (rc == SMP_ENOSPC) {
        /* a new arena, from the first free range that holds the put */
        size_t i = 0;
        while (i < s->nfree && s->free[i].len < len) i++;
        if (i == s->nfree) return SMP_ENOSPC;
        obj_extent a = {s->free[i].off, arena_len(s, len)};
        if (a.len > s->capacity - a.off) a.len = s->capacity - a.off;
        if ((rc = alloc_in(s, len, a.off, a.off + a.len, off)) < 0) return rc;
        s->arena = a;
    }
    if (rc == SMP_OK) *wait = !obj_zones_cover(s, s->arena);
    return rc;
}

/* -- the record ------------------------------------------------------------ */

static int extent_cmp(const void *a, const void *b)
{
    const obj_extent *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* z[0..*n) sorted by offset, overlaps and neighbours merged (in place). */
static void zones_normalise(obj_extent *z, size_t *n)
{
    size_t m = 0;
    qsort(z, *n, sizeof(*z), extent_cmp);
    for (size_t i = 0; i < *n; i++) {
        if (m > 0 && z[i].off <= z[m - 1].off + z[m - 1].len) {
            uint64_t end = z[i].off + z[i].len;
            if (end > z[m - 1].off + z[m - 1].len) z[m - 1].len = end - z[m - 1].off;
        } else {
            z[m++] = z[i];
        }
    }
    *n = m;
}

/* What an unrecorded writer of this store may be copying into in s: the
 * arena and the zoned puts open outside it unless handing_off (a stopping
 * master hands its open puts on in a PUT_HANDOFF), the ranges reserved for
 * replicas a node may be loading, and what it holds back; sorted and
 * merged into *out (malloc'd, *n of them; NULL when none). SMP_EBUSY past
 * OBJ_ZONES_MAX, SMP_ENOMEM. */
static int zone_ranges(const obj_store *st, const obj_segment *s, int handing_off,
                       obj_extent **out, size_t *n)
{
    size_t cap = s->nwas + 1, k = 0;
    *out = NULL;
    *n = 0;
    if (!handing_off)
        for (obj_sl_node *x = obj_sl_after(&st->puts, NULL, 0); x; x = x->next[0]) {
            const obj_put *p = x->val;
            if (p->zoned && p->seg == s) cap++;
        }
    for (obj_sl_node *x = obj_sl_after(&st->reserves, NULL, 0); x; x = x->next[0])
        cap += ((const obj_reservation *)x->val)->seg == s;
    obj_extent *v = malloc(cap * sizeof(*v));
    if (v == NULL) return SMP_ENOMEM;
    for (size_t i = 0; i < s->nwas; i++) v[k++] = s->was[i];
    for (obj_sl_node *x = obj_sl_after(&st->reserves, NULL, 0); x && k < cap; x = x->next[0]) {
        const obj_reservation *r = x->val;
        if (r->seg == s) v[k++] = (obj_extent){r->offset, r->alloc};
    }
    if (!handing_off && s->arena.len > 0) v[k++] = s->arena;
    if (!handing_off)
        for (obj_sl_node *x = obj_sl_after(&st->puts, NULL, 0); x && k < cap; x = x->next[0]) {
            const obj_put *p = x->val;
            if (!p->zoned || p->seg != s || p->consuming) continue;
            obj_extent r = {p->offset, p->alloc};
            if (s->arena.len == 0 || !extent_within(r, s->arena)) v[k++] = r;
        }
    size_t m = k;
    zones_normalise(v, &m);
    if (m > OBJ_ZONES_MAX) {
        free(v);
        return SMP_EBUSY;
    }
    if (m == 0) {
        free(v);
        v = NULL;
    }
    *out = v;
    *n = m;
    return SMP_OK;
}

void obj_write_zones_fini(Hostrec__WriteZones *z)
{
    free(z->offsets);
    free(z->lengths);
    hostrec__write_zones__init(z);
}

/* z for s's ranges v[0..n) (arrays malloc'd). SMP_ENOMEM. */
static int zones_msg(const obj_segment *s, const obj_extent *v, size_t n, Hostrec__WriteZones *z)
{
    hostrec__write_zones__init(z);
    z->segment = s->id;
    if (n == 0) return SMP_OK;
    z->offsets = malloc(n * sizeof(uint64_t));
    z->lengths = malloc(n * sizeof(uint64_t));
    if (z->offsets == NULL || z->lengths == NULL) {
        obj_write_zones_fini(z);
        return SMP_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        z->offsets[i] = v[i].off;
        z->lengths[i] = v[i].len;
    }
    z->n_offsets = z->n_lengths = n;
    return SMP_OK;
}

int obj_write_zones_of(const obj_segment *s, Hostrec__WriteZones *z)
{
    if (s->nzones == 0) return 0;
    return zones_msg(s, s->zones, s->nzones, z) < 0 ? SMP_ENOMEM : 1;
}

/* 1 when s needs an entry in a record of every segment: it has zones, an
 * arena or held bytes, or a reservation (in a store of res of them). */
static int zones_named(const obj_segment *s, size_t res)
{
    return s->nzones > 0 || s->arena.len > 0 || s->nwas > 0 || res > 0;
}

/* The WriteZones entry of s (arrays malloc'd): zone_ranges, packed. */
static int zones_entry(const obj_store *st, const obj_segment *s, int handing_off,
                       Hostrec__WriteZones *z)
{
    obj_extent *v;
    size_t n;
    int rc = zone_ranges(st, s, handing_off, &v, &n);
    if (rc == SMP_OK) rc = zones_msg(s, v, n, z);
    free(v);
    return rc;
}

int obj_prepare_write_zones(obj_store *st, const char *segment, int handing_off,
                            obj_record *out)
{
    OBJ_CHECK_CALLER(st);
    if (out == NULL) return SMP_EINVAL;
    obj_segment *one = NULL;
    size_t cap = 0;
    if (segment != NULL) {
        if ((one = obj_segment_get(st, segment)) == NULL) return SMP_ENOTFOUND;
        cap = 1;
    } else {
        for (obj_sl_node *x = obj_sl_after(&st->segments, NULL, 0); x; x = x->next[0])
            cap += zones_named(x->val, st->reserves.count);
        if (cap == 0) return SMP_ENOTFOUND;
    }
    Hostrec__WriteZones *zs = calloc(cap, sizeof(*zs));
    Hostrec__WriteZones **ptrs = calloc(cap, sizeof(*ptrs));
    size_t k = 0;
    int rc = SMP_ENOMEM;
    if (zs == NULL || ptrs == NULL) goto done;
    if (one != NULL) {
        if ((rc = zones_entry(st, one, handing_off, &zs[0])) < 0) goto done;
        ptrs[k] = &zs[k];
        k++;
    }
    for (obj_sl_node *x = one ? NULL : obj_sl_after(&st->segments, NULL, 0); x; x = x->next[0]) {
        if (!zones_named(x->val, st->reserves.count)) continue;
        if ((rc = zones_entry(st, x->val, handing_off, &zs[k])) < 0) goto done;
        ptrs[k] = &zs[k];
        k++;
    }
    Hostrec__WriteZoneRecord m = HOSTREC__WRITE_ZONE_RECORD__INIT;
    m.segments = ptrs;
    m.n_segments = k;
    if ((rc = obj_encode(&m.base, OBJ_REC_SEGMENT_UPDATE, out)) == SMP_OK)
        out->encver = OBJ_REC_ZONES_ENCVER;
done:
    for (size_t i = 0; i < k; i++) obj_write_zones_fini(&zs[i]);
    free(ptrs);
    free(zs);
    return rc;
}

/* -- apply ----------------------------------------------------------------- */

int obj_apply_write_zones(obj_store *st, const Hostrec__WriteZones *z)
{
    if (z->segment == NULL || z->n_offsets != z->n_lengths || z->n_offsets > OBJ_ZONES_MAX)
        return SMP_EPROTO;
    for (size_t i = 0; i < z->n_offsets; i++) {
        uint64_t off = z->offsets[i], len = z->lengths[i];
        if (len == 0 || off % OBJ_ALIGN || len % OBJ_ALIGN || off > UINT64_MAX - len)
            return SMP_EPROTO;
    }
    obj_segment *s = obj_segment_get(st, z->segment);
    if (s == NULL) return SMP_OK; /* unmounted since: its zones went with it */
    obj_extent *v = NULL;
    size_t n = 0;
    if (z->n_offsets > 0 && (v = malloc(z->n_offsets * sizeof(*v))) == NULL) return SMP_ENOMEM;
    for (size_t i = 0; i < z->n_offsets; i++) {
        uint64_t off = z->offsets[i], len = z->lengths[i];
        if (off >= s->capacity) continue; /* cut off by a smaller capacity */
        if (len > s->capacity - off) len = s->capacity - off;
        v[n++] = (obj_extent){off, len};
    }
    free(s->zones);
    s->zones = n ? v : NULL;
    s->nzones = n;
    if (n == 0) free(v);
    if (n > 0 && !st->zones_live) st->zones_inherited = 1;
    return SMP_OK;
}

int obj_apply_write_zone_record(obj_store *st, const Hostrec__WriteZoneRecord *m)
{
    for (size_t i = 0; i < m->n_segments; i++) {
        int rc = obj_apply_write_zones(st, m->segments[i]);
        if (rc < 0) return rc;
    }
    return SMP_OK;
}

/* -- taking over ----------------------------------------------------------- */

/* Hold back the free bytes of s inside its zones: one pass over the free
 * list and the zones (a segment of many small free ranges takes no
 * quadratic time), the held pieces into s->quar, the zones, normalised,
 * into s->was (named in this store's records while held). SMP_ENOMEM with
 * s unchanged. */
static int hold_zones(obj_segment *s)
{
    size_t nz = s->nzones, cap = s->nfree + nz, nkeep = 0, nq = 0;
    obj_extent *z = malloc(nz * sizeof(*z));
    obj_extent *keep = malloc(cap * sizeof(*keep)), *q = malloc(cap * sizeof(*q));
    uint64_t held = 0;
    int rc = SMP_ENOMEM;
    if (z == NULL || keep == NULL || q == NULL) goto done;
    memcpy(z, s->zones, nz * sizeof(*z));
    zones_normalise(z, &nz);
    size_t j = 0;
    for (size_t i = 0; i < s->nfree; i++) {
        uint64_t cur = s->free[i].off, end = cur + s->free[i].len;
        while (j < nz && z[j].off + z[j].len <= cur) j++;
        for (size_t k = j; cur < end;) {
            if (k == nz || z[k].off >= end) { /* the rest is outside every zone */
                keep[nkeep++] = (obj_extent){cur, end - cur};
                break;
            }
            if (z[k].off > cur) {
                keep[nkeep++] = (obj_extent){cur, z[k].off - cur};
                cur = z[k].off;
            }
            uint64_t zend = z[k].off + z[k].len, hend = end < zend ? end : zend;
            q[nq++] = (obj_extent){cur, hend - cur};
            held += hend - cur;
            cur = hend;
            if (hend == zend) k++;
        }
    }
    /* nalloc grows by the pieces: the free list's room must follow */
    if (obj_seg_ensure(s, nq) < 0) goto done;
    memcpy(s->free, keep, nkeep * sizeof(*keep));
    s->nfree = nkeep;
    s->used += held;
    s->nalloc += nq;
    free(s->quar);
    s->quar = q;
    s->nquar = nq;
    s->quar_bytes = held;
    free(s->was);
    s->was = z;
    s->nwas = nz;
    q = z = NULL;
    rc = SMP_OK;
done:
    free(z);
    free(keep);
    free(q);
    return rc;
}

int obj_zones_take_over(obj_store *st, uint64_t now)
{
    OBJ_CHECK_CALLER(st);
    if (!st->zones_inherited) {
        st->zones_live = 1;
        return SMP_OK;
    }
    for (obj_sl_node *x = obj_sl_after(&st->segments, NULL, 0); x; x = x->next[0]) {
        obj_segment *s = x->val;
        if (s->nzones > 0 && s->nwas == 0 && hold_zones(s) < 0)
            return SMP_ENOMEM; /* the segments done so far stay held: asked again */
    }
    st->quar_since = now ? now : 1;
    st->zones_inherited = 0;
    st->zones_live = 1;
    return SMP_OK;
}

/* Give s's held pieces back to its free list in one merge (coalescing),
 * telling abandon (may be NULL) of each. */
static void release_held(obj_store *st, obj_segment *s)
{
    size_t n = s->nfree + s->nquar, m = 0, i = 0, k = 0;
    obj_extent *v = malloc((n ? n : 1) * sizeof(*v));
    for (size_t q = 0; q < s->nquar && st->abandon; q++)
        st->abandon(st->abandon_ctx, s->node, s->id, s->quar[q].off, s->quar[q].len);
    if (v == NULL) { /* out of memory: one at a time */
        for (size_t q = 0; q < s->nquar; q++) obj_seg_free(s, s->quar[q].off, s->quar[q].len);
    } else {
        while (i < s->nfree || k < s->nquar) {
            obj_extent e = k == s->nquar || (i < s->nfree && s->free[i].off < s->quar[k].off)
                               ? s->free[i++] : s->quar[k++];
            if (m > 0 && v[m - 1].off + v[m - 1].len == e.off) v[m - 1].len += e.len;
            else v[m++] = e;
        }
        /* m <= nfree + nquar <= the new nalloc + 1 < capfree */
        memcpy(s->free, v, m * sizeof(*v));
        s->nfree = m;
        s->used -= s->quar_bytes;
        s->nalloc -= s->nquar;
        free(v);
    }
    free(s->quar);
    free(s->was);
    s->quar = s->was = NULL;
    s->nquar = s->nwas = 0;
    s->quar_bytes = 0;
}

void obj_zones_release(obj_store *st, uint64_t now, uint64_t timeout_ms)
{
    if (st->quar_since == 0 || now < st->quar_since || now - st->quar_since < timeout_ms) return;
    for (obj_sl_node *x = obj_sl_after(&st->segments, NULL, 0); x; x = x->next[0])
        release_held(st, x->val);
    st->quar_since = 0;
}

uint64_t obj_zones_held_bytes(const obj_store *st)
{
    uint64_t n = 0;
    for (obj_sl_node *x = obj_sl_after(&st->segments, NULL, 0); x; x = x->next[0])
        n += ((const obj_segment *)x->val)->quar_bytes;
    return n;
}

void obj_segment_zones_free(obj_segment *s)
{
    free(s->zones);
    free(s->quar);
    free(s->was);
    s->zones = s->quar = s->was = NULL;
    s->nzones = s->nquar = s->nwas = 0;
    s->quar_bytes = 0;
}
