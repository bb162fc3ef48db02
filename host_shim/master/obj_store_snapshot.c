/* obj_store_snapshot.c -- the store's section of a host snapshot: saving
 * the state as records and loading it back through apply, and segment
 * visits. Part of obj_store (see obj_store.c). */
#include "obj_store_internal.h"

#include "host_bulk.h"

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

/* The arena a section of len bytes decodes in: protobuf-c's pieces of the
 * host's records take about 2.5x their encoded size (9 MB -> 23 MB at 20,000
 * revisions); what does not fit goes to malloc. */
static size_t obj_load_arena_len(size_t len)
{
    return len > (SIZE_MAX - (64u << 10)) / 4 ? SIZE_MAX : len * 4 + (64u << 10);
}

int obj_store_load(obj_store *st, const uint8_t *data, size_t len)
{
    int rc = SMP_OK;
    if (!obj_store_is_empty(st)) return SMP_ESTATE;
    if (!data && len) return SMP_EINVAL;
    static const uint8_t empty[1];
    /* One arena for the whole decode (host_bulk.h): no malloc and free per
     * record piece, and its pages fault in 2 MiB at a time. */
    size_t arena_len = obj_load_arena_len(len);
    void *arena_mem = host_bulk_alloc(arena_len);
    if (arena_mem == NULL) return SMP_ENOMEM;
    pb_arena arena;
    pb_arena_init(&arena, arena_mem, arena_len);
    Hostrec__HostSnapshot *m =
        hostrec__host_snapshot__unpack(&arena.alloc, len, data ? data : empty);
    if (!m) {
        rc = SMP_EPROTO;
        goto free_arena;
    }
    if (m->format != OBJ_SNAPSHOT_FORMAT) { rc = SMP_EPROTO; goto free_msg; }
    uint64_t dropped = st->stats.replicas_dropped;
    st->bulk_load = 1;
    /* The objects' slab, sized from the section (a failed size or mapping
     * leaves them to calloc). */
    size_t slab_bytes = 0;
    for (size_t i = 0; i < m->n_objects && slab_bytes != SIZE_MAX; i++) {
        size_t n = m->objects[i]->key && m->objects[i]->group && m->objects[i]->tenant
                       ? obj_object_bytes(m->objects[i])
                       : 0;
        slab_bytes = n > SIZE_MAX - slab_bytes ? SIZE_MAX : slab_bytes + n;
    }
    st->load_slab = slab_bytes != SIZE_MAX ? obj_slab_new(slab_bytes) : NULL;
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
        rc = obj_set_group_managed(st, m->groups[i]->name, obj_group_msg_owner(m->groups[i]));
        if (rc < 0) goto clear;
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
    goto unref_slab;

clear:
    rc = obj_load_rc(rc);
    st->stats.replicas_dropped = dropped;
    st->bulk_load = 0;
    obj_store_clear(st);
unref_slab:
    obj_slab_unref(st->load_slab); /* the load's reference: the objects hold the rest */
    st->load_slab = NULL;
free_msg:
    pb_arena_free_unpacked(&arena, &m->base);
free_arena:
    host_bulk_free(arena_mem, arena_len);
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
