/* obj_store_snapshot.c -- the store's section of a host snapshot: saving
 * the state as records and loading it back through apply, and segment
 * visits. Part of obj_store (see obj_store.c). */
#include "obj_store_internal.h"

#include "obj_snap_decode.h"
#include "pb_wire.h"

#include <stdlib.h>

/* ------------------------------------------------------------------------ */
/* Snapshot                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct obj_snap_writer {
    int (*write)(void *ctx, const void *buf, size_t len);
    void *ctx;
    uint8_t *tmp;
    size_t tmpcap;
} obj_snap_writer;

/* Write msg as one occurrence of the length-delimited field `field`. */
static int obj_snap_field(obj_snap_writer *w, uint32_t field, const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t hdr[20];
    size_t h = (size_t)(pbw_put_varint(pbw_put_tag(hdr, field, PBW_LEN), len) - hdr);
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
    OBJ_CHECK_CALLER(st);
    int rc;
    if (!write) return SMP_EINVAL;
    obj_snap_writer w = {write, ctx, NULL, 0};
    uint8_t hdr[12];
    size_t h = (size_t)(pbw_put_varint(pbw_put_tag(hdr, 1, PBW_VARINT), OBJ_SNAPSHOT_FORMAT) - hdr);
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
        if (!g->owner) continue;
        Hostrec__GroupRecord m = HOSTREC__GROUP_RECORD__INIT;
        m.name = g->name;
        m.managed = 1;
        m.owner = g->owner;
        if ((rc = obj_snap_field(&w, 3, &m.base)) < 0) goto free_tmp;
    }
    for (obj_sl_node *x = obj_sl_after(&st->objects, NULL, 0); x; x = x->next[0]) {
        obj_record r = {0};
        if ((rc = obj_encode_object(x->val, NULL, 0, 0, &r)) < 0) goto free_tmp;
        uint8_t oh[20];
        size_t n = (size_t)(pbw_put_varint(pbw_put_tag(oh, 4, PBW_LEN), r.len) - oh);
        rc = write(ctx, oh, n);
        if (rc >= 0 && r.len) rc = write(ctx, r.buf, r.len);
        obj_record_free(&r);
        if (rc < 0) goto free_tmp;
    }
    /* the puts in flight, whose writers may still copy after a restart
     * from this snapshot (one whose PUT_END is applying is an object) */
    for (obj_sl_node *x = obj_sl_after(&st->puts, NULL, 0); x; x = x->next[0]) {
        const obj_put *p = x->val;
        if (p->consuming) continue;
        Hostrec__HandedPut h;
        obj_handed_of(p, &h);
        if ((rc = obj_snap_field(&w, 5, &h.base)) < 0) goto free_tmp;
    }
    /* where writers of puts with no record may still copy */
    for (obj_sl_node *x = obj_sl_after(&st->segments, NULL, 0); x; x = x->next[0]) {
        Hostrec__WriteZones z;
        if ((rc = obj_write_zones_of(x->val, &z)) <= 0) {
            if (rc < 0) goto free_tmp;
            continue;
        }
        rc = obj_snap_field(&w, 6, &z.base);
        obj_write_zones_fini(&z);
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

/* What the passes of a load share. */
typedef struct obj_load_ctx {
    obj_store *st;
    uint64_t dropped;  /* replicas_dropped before the load */
} obj_load_ctx;

/* The decode's callback: apply one entry. A negative return stops the
 * load, which clears the store. */
static int obj_load_apply(void *arg, unsigned what, const ProtobufCMessage *msg)
{
    obj_load_ctx *c = arg;
    obj_store *st = c->st;
    if (what == OBJ_SNAP_SEGMENTS) {
        const Hostrec__SegmentRecord *m = (const Hostrec__SegmentRecord *)msg;
        if (!obj_segment_msg_ok(m) || obj_sl_get(&st->segments, m->id)) return SMP_EPROTO;
        return obj_apply_segment_mount(st, m);
    }
    if (what == OBJ_SNAP_GROUPS) {
        const Hostrec__GroupRecord *m = (const Hostrec__GroupRecord *)msg;
        if (!m->managed) return SMP_EPROTO;
        return obj_set_group_managed(st, m->name, obj_group_msg_owner(m));
    }
    if (what == OBJ_SNAP_ZONES) {
        /* one entry a segment, of a segment the snapshot has */
        const Hostrec__WriteZones *z = (const Hostrec__WriteZones *)msg;
        if (z->segment == NULL || obj_sl_get(&st->segments, z->segment) == NULL)
            return SMP_EPROTO;
        return obj_apply_write_zones(st, z);
    }
    if (what == OBJ_SNAP_OPEN_PUTS) {
        /* one image: its range is free and its key has no newer object */
        const Hostrec__HandedPut *h = (const Hostrec__HandedPut *)msg;
        if (!obj_handed_ok(h)) return SMP_EPROTO;
        int rc = obj_take_handed(st, h);
        if (rc == 1) obj_note_put_id(st, h->put_id);
        return rc < 0 ? rc : rc == 1 ? SMP_OK : SMP_EPROTO;
    }
    const Hostrec__ObjectRecord *m = (const Hostrec__ObjectRecord *)msg;
    /* Its index slot, a cache miss at a random place of the table, is
     * fetched while the object is checked and built. */
    obj_ix_prefetch(&st->objects.ix, m->key);
    if (m->update_only) return SMP_EPROTO;
    size_t before = st->objects.count;
    int rc = obj_apply_object(st, m);
    if (rc < 0) return rc;
    /* A snapshot is one consistent image: every object is new (a key seen
     * before leaves the count as it was, whichever incarnation won) and
     * every replica fits. */
    if (st->objects.count != before + 1) return SMP_EPROTO;
    return st->stats.replicas_dropped != c->dropped ? SMP_EPROTO : SMP_OK;
}

/* Ready st for a load of a section of len bytes holding about n_groups
 * managed groups and n_objects objects: bulk mode, the objects' slab, the
 * indexes at their size. */
static void obj_load_prepare(obj_store *st, size_t len, size_t n_groups, size_t n_objects)
{
    st->bulk_load = 1;
    /* The objects' slab, in chunks of the section's size (an object takes
     * about twice its record's bytes, so two or three chunks); a chunk that
     * cannot be mapped leaves the objects after it to calloc. */
    st->load_chunk = len > OBJ_LOAD_CHUNK_MIN ? len : OBJ_LOAD_CHUNK_MIN;
    st->load_slab = n_objects > 0 ? obj_slab_new(st->load_chunk, 1) : NULL;
    /* The objects' and groups' indexes at their final size: no growth and
     * drain during the load (when this fails, or the size was guessed
     * short, the inserts grow them as usual). */
    (void)obj_ix_presize(&st->objects.ix, n_objects);
    (void)obj_ix_presize(&st->groups.ix, n_groups);
}

/* End a load that returned rc: on failure the store is cleared (it was
 * empty before) and rc becomes the load's answer. */
static int obj_load_end(obj_store *st, obj_load_ctx *c, obj_snap_dec *dec, int rc)
{
    st->bulk_load = 0; /* the LRU list is sorted when an eviction plan needs it */
    if (rc < 0) {
        rc = obj_load_rc(rc);
        st->stats.replicas_dropped = c->dropped;
        obj_store_clear(st);
    }
    obj_slab_filled(st->load_slab); /* the load's reference: the objects hold the rest */
    st->load_slab = NULL;
    obj_snap_dec_fini(dec);
    return rc < 0 ? rc : SMP_OK;
}

static int obj_store_load_here(obj_store *st, const uint8_t *data, size_t len)
{
    int rc = SMP_OK;
    if (!obj_store_is_empty(st)) return SMP_ESTATE;
    if (!data && len) return SMP_EINVAL;
    /* The section is decoded by hand (obj_snap_decode.c), one record at a
     * time into scratch storage reused by the next, instead of unpacked
     * whole by protobuf-c into an arena of some 2.5x its size. A walk of
     * the top-level framing reads the format and the counts (the indexes
     * are sized from them); then segments, managed groups, objects, open
     * puts and write zones are applied in that order, each in the order of
     * the bytes (as the unpacked message's arrays were): in one decode when
     * the section has them in that order, as a save writes it, else in one
     * decode each.
     * Bytes protobuf-c refuses inside a record are found as it is applied:
     * the load then fails with SMP_EPROTO and clears what it applied, as
     * for a record that does not apply (the store was empty before). */
    obj_snap_dec dec = {0};
    obj_snap_frame fr;
    obj_load_ctx c = {st, st->stats.replicas_dropped};
    if ((rc = obj_snap_frame_scan(data, len, &fr)) < 0) return rc;
    if (fr.format != OBJ_SNAPSHOT_FORMAT) return SMP_EPROTO;
    obj_load_prepare(st, len, fr.n[1], fr.n[2]);
    static const unsigned passes[] = {OBJ_SNAP_SEGMENTS, OBJ_SNAP_GROUPS, OBJ_SNAP_OBJECTS,
                                      OBJ_SNAP_OPEN_PUTS, OBJ_SNAP_ZONES};
    if (fr.in_kind_order) {
        rc = obj_snap_decode(&dec, data, len, OBJ_SNAP_ALL, NULL, obj_load_apply, &c);
    } else {
        for (size_t i = 0; rc >= 0 && i < sizeof(passes) / sizeof(passes[0]); i++)
            rc = obj_snap_decode(&dec, data, len, passes[i], NULL, obj_load_apply, &c);
    }
    return obj_load_end(st, &c, &dec, rc);
}

/* The bytes a fed load waits for first, to size the indexes from. */
#define OBJ_LOAD_SAMPLE ((size_t)1 << 20)

/* obj_store_load_fed's load. The first MiB sizes the indexes (its counts
 * scaled to the section's length: a guess, which the inserts correct by
 * growing); the records are then applied in one decode as they come, which
 * needs them in a save's order. Whatever does not end well -- another
 * order, a record refused, a format other than the store's (found at the
 * end; a save writes it first) -- clears the store and leaves the answer to
 * the whole load, once every byte is in. */
static int obj_store_load_fed_here(obj_store *st, const uint8_t *data, size_t len,
                                   size_t (*wait)(void *arg, size_t upto), void *arg)
{
    if (!obj_store_is_empty(st)) return SMP_ESTATE;
    if (!data && len) return SMP_EINVAL;
    size_t sample = len < OBJ_LOAD_SAMPLE ? len : OBJ_LOAD_SAMPLE;
    size_t avail = wait(arg, sample);
    if (avail < sample) return SMP_EPROTO; /* the bytes stopped */
    if (avail >= len) return obj_store_load_here(st, data, len);
    obj_snap_frame fr;
    size_t used;
    if (obj_snap_frame_scan_prefix(data, len, avail, &fr, &used) < 0) return SMP_EPROTO;
    double scale = used > 0 ? (double)len / (double)used : 0;
    obj_snap_dec dec = {0};
    obj_load_ctx c = {st, st->stats.replicas_dropped};
    obj_load_prepare(st, len, (size_t)((double)fr.n[1] * scale), (size_t)((double)fr.n[2] * scale));
    uint32_t format = 0;
    int rc = obj_snap_decode_fed(&dec, data, len, &format, wait, arg, obj_load_apply, &c);
    if (rc == SMP_OK && format == OBJ_SNAPSHOT_FORMAT) return obj_load_end(st, &c, &dec, rc);
    /* Anything else is decided by the whole load, as if the bytes had all
     * been in at the start: it gives the same answer as one pass for a
     * section in a save's order, and loads another order kind by kind. */
    (void)obj_load_end(st, &c, &dec, SMP_EPROTO);
    if (wait(arg, len) < len) return SMP_EPROTO; /* the bytes stopped */
    return obj_store_load_here(st, data, len);
}

int obj_store_load(obj_store *st, const uint8_t *data, size_t len)
{
    return obj_store_load_fed(st, data, len, NULL, NULL);
}

/* The thread inside the load owns the store meanwhile (obj_check_caller):
 * the entry points it calls pass. */
int obj_store_load_fed(obj_store *st,
                       const uint8_t *data,
                       size_t len,
                       size_t (*wait)(void *arg, size_t upto),
                       void *arg)
{
    const obj_store *was = obj_loading_here;
    obj_loading_here = st;
    int rc = wait != NULL ? obj_store_load_fed_here(st, data, len, wait, arg)
                          : obj_store_load_here(st, data, len);
    obj_loading_here = was;
    return rc;
}

int obj_visit_segments(const obj_store *st,
                       int (*fn)(void *arg, const char *id, const char *node),
                       void *arg)
{
    OBJ_CHECK_CALLER(st);
    for (obj_sl_node *n = st->segments.head->next[0]; n != NULL; n = n->next[0]) {
        const obj_segment *s = n->val;
        int rc = fn(arg, s->id, s->node);
        if (rc != 0) return rc;
    }
    return 0;
}

int obj_segment_info(const obj_store *st, const char *id, const char **node, uint64_t *capacity)
{
    OBJ_CHECK_CALLER(st);
    obj_segment *s = id ? obj_sl_get(&st->segments, id) : NULL;
    if (s == NULL) return SMP_ENOTFOUND;
    if (node) *node = s->node;
    if (capacity) *capacity = s->capacity;
    return SMP_OK;
}
