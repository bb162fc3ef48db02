/* obj_store_records.c -- the host's OpLog records for the store: encoding
 * objects, removals and key batches, decoding and applying every record type
 * (the only place durable state changes, with the snapshot loader), and the
 * holds that keep keys whose removal or replacement is in the OpLog. Part of
 * obj_store (see obj_store.c). */
#include "obj_store_internal.h"

#include "host_bulk.h"
#include "pb_wire.h"

#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int readable;   /* the hold lets readers through (obj_keeps_memory) */
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
    h->readable = 0;
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
void obj_record_list_truncate(obj_record_list *l, size_t n)
{
    while (l->n > n) obj_record_free(&l->recs[--l->n]);
}

/* Pack msg into a malloc'd buffer as a record of type. SMP_ENOMEM. */
int obj_encode(const ProtobufCMessage *msg, uint16_t type, obj_record *out)
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

int obj_list_push(obj_record_list *l, obj_record *r)
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

void obj_rep_view(const obj_rep *r, obj_replica *v)
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
int obj_encode_object_add(const obj_object *o,
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
    m.group = (char *)o->group; /* read only, like the key */
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

int obj_encode_object(const obj_object *o,
                      const obj_replica *views,
                      size_t n,
                      int update_only,
                      obj_record *out)
{
    return obj_encode_object_add(o, views, n, update_only, NULL, out);
}

/* Encode a RemoveRecord of keys[n], each only while it is incarnation
 * put_ids[i]. */
/* The RemoveRecord is written by hand, byte for byte what protobuf-c's pack
 * gives (test_obj_records: test_remove_record_is_protobuf_c_s_bytes): each
 * key as field 1, then the put ids as one packed field 2 (proto3). Its
 * generic walk of the descriptor cost a durable remove some 500
 * instructions. */
int obj_encode_remove(const char *const *keys,
                      const uint64_t *put_ids,
                      size_t n,
                      obj_record *out)
{
    size_t len = 0, ids = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = strlen(keys[i]);
        len += pbw_tag_len(1) + pbw_varint_len(k) + k;
        ids += pbw_varint_len(put_ids[i]);
    }
    if (n > 0) len += pbw_tag_len(2) + pbw_varint_len(ids) + ids;
    uint8_t *buf = malloc(len ? len : 1), *p = buf;
    if (!buf) return SMP_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        size_t k = strlen(keys[i]);
        p = pbw_put_tag(p, 1, PBW_LEN);
        p = pbw_put_varint(p, k);
        memcpy(p, keys[i], k);
        p += k;
    }
    if (n > 0) {
        p = pbw_put_tag(p, 2, PBW_LEN);
        p = pbw_put_varint(p, ids);
        for (size_t i = 0; i < n; i++) p = pbw_put_varint(p, put_ids[i]);
    }
    *out = (obj_record){.type = OBJ_REC_REMOVE, .encver = OBJ_REC_ENCVER, .buf = buf, .len = len};
    int rc = obj_held_remove(keys, put_ids, n, &out->held);
    if (rc < 0) obj_record_free(out);
    return rc;
}

int obj_keybatch_flush(obj_keybatch *b, obj_record_list *out)
{
    if (b->n == 0) return SMP_OK;
    obj_record r = {0};
    int rc = obj_encode_remove(b->keys, b->put_ids, b->n, &r);
    if (rc < 0) return rc;
    if ((rc = obj_list_push(out, &r)) < 0) obj_record_free(&r);
    b->n = 0;
    return rc;
}

int obj_keybatch_add(obj_keybatch *b, const obj_object *o, obj_record_list *out)
{
    b->keys[b->n] = o->key;
    b->put_ids[b->n] = o->put_id;
    b->n++;
    return b->n == OBJ_REMOVE_BATCH ? obj_keybatch_flush(b, out) : SMP_OK;
}

/* ------------------------------------------------------------------------ */
/* Records: decoding and apply                                               */
/* ------------------------------------------------------------------------ */

/* 1 when s is known, a name the store already holds (it passed the same
 * check when it came in): the hints, which a run of records names again
 * and again, are compared instead of checked. */
static int obj_known(const char *known, const char *s)
{
    return known != NULL && strcmp(known, s) == 0;
}

/* 1 when every field of an object record is well formed. */
static int obj_object_msg_ok(const obj_store *st, const Hostrec__ObjectRecord *m)
{
    const char *group = st->group_hint != NULL ? st->group_hint->key : NULL;
    const char *node = st->node_hint != NULL ? st->node_hint->id : NULL;
    const char *seg = st->seg_hint != NULL ? st->seg_hint->id : NULL;
    if (!obj_name_ok(m->key, OBJ_KEY_MAX, 0) ||
        !(obj_known(group, m->group) || obj_name_ok(m->group, OBJ_GROUP_MAX, 1)) ||
        !obj_name_ok(m->tenant, OBJ_NAME_MAX, 1) || m->data_type > SMP_DATA_WEIGHT ||
        m->checksum.len != 32 || m->n_replicas > OBJ_REPLICAS_MAX)
        return 0;
    for (size_t i = 0; i < m->n_replicas; i++) {
        const Hostrec__Replica *r = m->replicas[i];
        if (r->kind > SMP_REPLICA_COLD || r->status > OBJ_REPLICA_FAILED ||
            !(obj_known(node, r->node) || obj_name_ok(r->node, OBJ_NAME_MAX, 0)))
            return 0;
        if (r->kind == SMP_REPLICA_MEMORY) {
            if (!(obj_known(seg, r->segment) || obj_name_ok(r->segment, OBJ_NAME_MAX, 0)) ||
                obj_ext_len(r->length) == 0 || r->offset % OBJ_ALIGN != 0)
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
    obj_segment *s = obj_segment_get(st, r->segment);
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

size_t obj_object_bytes(const Hostrec__ObjectRecord *m)
{
    const size_t align = alignof(max_align_t);
    size_t n = sizeof(obj_object) + strlen(m->key) + strlen(m->tenant) + 2;
    n = (n + alignof(obj_rep) - 1) & ~(alignof(obj_rep) - 1);
    n += (m->n_replicas ? m->n_replicas : 1) * sizeof(obj_rep);
    return (n + align - 1) & ~(align - 1);
}

obj_slab *obj_slab_new(size_t bytes, int fed)
{
    const size_t align = alignof(max_align_t);
    size_t hdr = (sizeof(obj_slab) + align - 1) & ~(align - 1);
    if (bytes == 0 || bytes > SIZE_MAX - hdr) return NULL;
    void *base = host_bulk_alloc(hdr + bytes); /* 4 KiB pages: see host_bulk.h */
    if (base == NULL) return NULL;
    /* The header's page is the feed's until its first wait hands it over. */
    host_bulk_feed *feed = fed ? host_bulk_feed_start(base, hdr + bytes) : NULL;
    size_t ready = feed != NULL ? host_bulk_feed_wait(feed, hdr)
                                : host_bulk_ready(base, 0, hdr, hdr + bytes);
    obj_slab *sl = base;
    sl->len = hdr + bytes;
    sl->used = hdr;
    sl->ready = ready;
    sl->refs = 1;
    sl->feed = feed;
    return sl;
}

void obj_slab_unref(obj_slab *sl)
{
    if (sl != NULL && --sl->refs == 0) host_bulk_free(sl, sl->len);
}

void obj_slab_filled(obj_slab *sl)
{
    if (sl == NULL) return;
    host_bulk_feed_stop(sl->feed);
    sl->feed = NULL;
    obj_slab_unref(sl);
}

void *obj_slab_take(obj_slab *sl, size_t need)
{
    size_t end = sl->used + need;
    if (end > sl->ready)
        sl->ready = sl->feed ? host_bulk_feed_wait(sl->feed, end)
                             : host_bulk_ready(sl, sl->ready, end, sl->len);
    void *p = (char *)sl + sl->used;
    sl->used = end;
    sl->refs++;
    return p;
}

/* The load's slab with room for need bytes: the current one, or a new
 * one of st->load_chunk bytes in its place (the objects in the full one
 * keep it). The full slab's feed stops before the new one's starts, so
 * the load never has two feed threads on the cores it shares with them.
 * NULL when the load has no slab; when need is more than a slab holds (that
 * object comes from calloc, the slab stays); or when the next slab cannot
 * be mapped (the load goes on without one, its objects from calloc). */
static obj_slab *obj_load_slab_room(obj_store *st, size_t need)
{
    obj_slab *sl = st->load_slab;
    if (sl == NULL || need <= obj_slab_room(sl)) return sl;
    if (need > st->load_chunk) return NULL;
    obj_slab_filled(sl);
    st->load_slab = obj_slab_new(st->load_chunk, 1);
    return st->load_slab;
}

/* Build an object from a well-formed record: in the load's slab while a
 * snapshot loads and it has room (its replica list in the same piece),
 * else from calloc. Memory replicas that cannot exist here (see
 * obj_memory_rep_place) are left out and counted. SMP_ENOMEM. Nothing is
 * reserved or indexed; its group is m's name until obj_object_index, so it
 * is indexed or freed while m lives. */
static int obj_object_build(obj_store *st,
                            const Hostrec__ObjectRecord *m,
                            const obj_object *only,
                            obj_object **out)
{
    size_t kl = strlen(m->key) + 1, tl = strlen(m->tenant) + 1;
    size_t need = st->load_slab ? obj_object_bytes(m) : 0;
    obj_slab *sl = st->load_slab ? obj_load_slab_room(st, need) : NULL;
    obj_object *o;
    if (sl) {
        o = obj_slab_take(sl, need); /* zeroed: fresh mapping */
        o->slab = sl;
        size_t at = (sizeof(*o) + kl + tl + alignof(obj_rep) - 1) & ~(alignof(obj_rep) - 1);
        o->reps = (obj_rep *)((char *)o + at);
    } else {
        o = calloc(1, sizeof(*o) + kl + tl);
        if (!o) return SMP_ENOMEM;
        o->reps = calloc(m->n_replicas ? m->n_replicas : 1, sizeof(obj_rep));
        o->reps_own = 1;
        if (!o->reps) goto free_object;
    }
    o->key = memcpy(o->strings, m->key, kl);
    o->tenant = memcpy(o->strings + kl, m->tenant, tl);
    o->group = m->group[0] ? m->group : ""; /* the group's own once indexed */
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
        d->node = obj_node_intern(st, r->node);
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

    /* Every allocation before the first change. A list in the object's own
     * piece (a loaded object) moves to an allocation of its own. */
    obj_rep *reps = o->reps_own ? realloc(o->reps, (o->nreps + 1) * sizeof(*reps))
                                : malloc((o->nreps + 1) * sizeof(*reps));
    if (!reps) return SMP_ENOMEM;
    if (!o->reps_own && o->nreps) memcpy(reps, o->reps, o->nreps * sizeof(*reps));
    o->reps = reps;
    o->reps_own = 1;
    char *node = obj_node_intern(st, a->node);
    if (!node) return SMP_ENOMEM;
    if (obj_seg_ensure(s, 1) < 0) {
        obj_node_release(node);
        return SMP_ENOMEM;
    }
    if (own) {
        obj_reservation_forget(st, res, 1);
        own = 0;
    }
    if (obj_seg_reserve(s, a->offset, ext) < 0 &&
        (obj_cancel_puts_in(st, s, a->offset, ext) == 0 ||
         obj_seg_reserve(s, a->offset, ext) < 0)) {
        obj_node_release(node);
        goto dropped;
    }
    obj_stats_leave_keeping(st, o); /* a replica more, none less */
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
int obj_apply_object(obj_store *st, const Hostrec__ObjectRecord *m)
{
    int rc;
    if (!obj_object_msg_ok(st, m) || (m->add_replica && !obj_add_msg_ok(m))) return SMP_EPROTO;
    obj_note_put_id(st, m->put_id);
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
        obj_object_release(st, old);
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
    obj_object_release(st, n);
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

int obj_handed_ok(const Hostrec__HandedPut *h)
{
    return obj_validate_key(h->key) == 0 && obj_name_ok(h->group, OBJ_GROUP_MAX, 1) &&
           obj_name_ok(h->tenant, OBJ_NAME_MAX, 1) && h->data_type <= SMP_DATA_WEIGHT &&
           obj_name_ok(h->segment, OBJ_NAME_MAX, 0) && obj_ext_len(h->size) != 0 &&
           h->offset % OBJ_ALIGN == 0;
}

/* Drop the handed puts overlapping [off, off + len) of s; how many. */
static int obj_handed_drop_in(obj_store *st, const obj_segment *s, uint64_t off, uint64_t len)
{
    int n = 0;
    for (obj_sl_node *x = obj_sl_after(&st->puts, NULL, 0); x;) {
        obj_put *p = x->val;
        x = x->next[0];
        if (!p->handed || p->seg != s || p->offset >= off + len || off >= p->offset + p->alloc)
            continue;
        obj_handed_drop(st, p);
        n++;
    }
    return n;
}

int obj_take_handed(obj_store *st, const Hostrec__HandedPut *h)
{
    uint64_t alloc = obj_ext_len(h->size);
    obj_segment *s = obj_sl_get(&st->segments, h->segment);
    const obj_object *o = obj_sl_get(&st->objects, h->key);
    obj_put *busy = obj_sl_get(&st->puts, h->key);
    if ((o != NULL && o->put_id >= h->put_id) ||
        (busy != NULL && (!busy->handed || busy->put_id >= h->put_id)))
        return 0;
    if (s == NULL || h->offset > s->capacity || alloc > s->capacity - h->offset) return 0;
    if (busy != NULL) obj_handed_drop(st, busy);
    obj_put *put = calloc(1, sizeof(*put));
    if (put == NULL) return SMP_ENOMEM;
    put->key = strdup(h->key);
    put->group = strdup(h->group);
    put->tenant = strdup(h->tenant);
    if (!put->key || !put->group || !put->tenant || obj_seg_ensure(s, 1) < 0) goto nomem;
    if (obj_seg_reserve(s, h->offset, alloc) < 0 &&
        (obj_handed_drop_in(st, s, h->offset, alloc) == 0 ||
         obj_seg_reserve(s, h->offset, alloc) < 0)) {
        obj_put_free(put);
        return 0;
    }
    put->size = h->size;
    put->data_type = (smp_data_type)h->data_type;
    put->pinned = h->hard_pinned ? 1 : 0;
    put->seg = s;
    put->offset = h->offset;
    put->alloc = alloc;
    put->put_id = h->put_id;
    put->untimed = 1;
    put->handed = 1;
    if (obj_sl_put(&st->puts, put->key, put) < 0) {
        obj_seg_free(s, h->offset, alloc);
        goto nomem;
    }
    st->stats.puts_in_flight++;
    return 1;
nomem:
    obj_put_free(put);
    return SMP_ENOMEM;
}

/* PUT_HANDOFF: every put of the record is taken as in flight (see
 * obj_take_handed); the record is checked whole before anything changes. */
static int obj_apply_put_handoff(obj_store *st, const Hostrec__PutHandoffRecord *m)
{
    for (size_t i = 0; i < m->n_puts; i++)
        if (!obj_handed_ok(m->puts[i])) return SMP_EPROTO;
    for (size_t i = 0; i < m->n_puts; i++) {
        const Hostrec__HandedPut *h = m->puts[i];
        obj_note_put_id(st, h->put_id);
        const obj_put *own = obj_sl_get(&st->puts, h->key);
        if (own != NULL && own->put_id == h->put_id && own->offset == h->offset &&
            own->size == h->size && strcmp(own->seg->id, h->segment) == 0)
            continue; /* the master that wrote it, or a replay of it */
        int rc = obj_take_handed(st, h);
        if (rc < 0) return rc;
        if (rc == 0) st->stats.puts_not_taken_over++; /* a taken one counts at its first sweep */
    }
    return SMP_OK;
}

int obj_segment_msg_ok(const Hostrec__SegmentRecord *m)
{
    return obj_name_ok(m->id, OBJ_NAME_MAX, 0) && obj_name_ok(m->node, OBJ_NAME_MAX, 0);
}

int obj_apply_segment_mount(obj_store *st, const Hostrec__SegmentRecord *m)
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
    if (st->seg_hint == s) st->seg_hint = NULL;
    obj_sl_del(&st->segments, s->id);
    obj_segment_free(s);
    return SMP_OK;
}

/* Make owner the owner of a managed group (NULL: not managed), creating or
 * dropping the group entry. SMP_EPROTO on a bad name, SMP_ENOMEM (nothing
 * changed). */
int obj_set_group_managed(obj_store *st, const char *name, const char *owner)
{
    if (!obj_name_ok(name, OBJ_GROUP_MAX, 0)) return SMP_EPROTO;
    if (owner && !obj_name_ok(owner, OBJ_NAME_MAX, 0)) return SMP_EPROTO;
    obj_group *g = obj_sl_get(&st->groups, name);
    if (!g && !owner) return SMP_OK;
    char *copy = owner ? strdup(owner) : NULL;
    if (owner && !copy) return SMP_ENOMEM;
    int created;
    if (!g && !(g = obj_group_get_or_create(st, name, &created))) {
        free(copy);
        return SMP_ENOMEM;
    }
    free(g->owner);
    g->owner = copy;
    obj_group_gc(st, g);
    return SMP_OK;
}

/* The owner a GroupRecord names: none when not managed, OBJ_OWNER_DEFAULT
 * for a managed group recorded before owners existed. */
const char *obj_group_msg_owner(const Hostrec__GroupRecord *m)
{
    if (!m->managed) return NULL;
    return m->owner && m->owner[0] ? m->owner : OBJ_OWNER_DEFAULT;
}

static int obj_apply_update(obj_store *st, const Hostrec__UpdateRecord *m)
{
    switch (m->change_case) {
    case HOSTREC__UPDATE_RECORD__CHANGE_SEGMENT: {
        if (!m->segment || !obj_segment_msg_ok(m->segment)) return SMP_EPROTO;
        /* A segment unmounted (or remounted elsewhere) since: nothing to do. */
        obj_segment *s = obj_sl_get(&st->segments, m->segment->id);
        if (s && strcmp(s->node, m->segment->node) == 0)
            obj_seg_set_capacity(s, m->segment->capacity / OBJ_ALIGN * OBJ_ALIGN);
        return SMP_OK;
    }
    case HOSTREC__UPDATE_RECORD__CHANGE_GROUP:
        if (!m->group) return SMP_EPROTO;
        return obj_set_group_managed(st, m->group->name, obj_group_msg_owner(m->group));
    default:
        return SMP_EPROTO;
    }
}

/* 1 when this build replays a host record of type at encver: every type at
 * OBJ_REC_ENCVER, type 2 at OBJ_REC_HANDOFF_ENCVER (PUT_HANDOFF) and type 7
 * at OBJ_REC_ZONES_ENCVER (WRITE_ZONES). */
static int obj_encver_ok(uint16_t type, uint16_t encver)
{
    return encver == OBJ_REC_ENCVER ||
           (type == OBJ_REC_PUT_REVOKE && encver == OBJ_REC_HANDOFF_ENCVER) ||
           (type == OBJ_REC_SEGMENT_UPDATE && encver == OBJ_REC_ZONES_ENCVER);
}

/* A type 7 record at OBJ_REC_ZONES_ENCVER. */
static int obj_is_zones(uint16_t type, uint16_t encver)
{
    return type == OBJ_REC_SEGMENT_UPDATE && encver == OBJ_REC_ZONES_ENCVER;
}

int obj_apply_record(obj_store *st,
                     uint16_t type,
                     uint16_t encver,
                     const uint8_t *payload,
                     size_t len)
{
    OBJ_CHECK_CALLER(st);
    int rc;
    if (type < 1 || type > SMP_OPLOG_HOST_TYPE_MAX || type == 4) return SMP_ENOTFOUND;
    if (!obj_encver_ok(type, encver) || (!payload && len)) return SMP_EPROTO;
    static const uint8_t empty[1];
    if (!payload) payload = empty;
    if (obj_is_zones(type, encver)) {
        Hostrec__WriteZoneRecord *m = hostrec__write_zone_record__unpack(NULL, len, payload);
        if (!m) return SMP_EPROTO;
        rc = obj_apply_write_zone_record(st, m);
        hostrec__write_zone_record__free_unpacked(m, NULL);
        return rc;
    }
    if (encver == OBJ_REC_HANDOFF_ENCVER) {
        Hostrec__PutHandoffRecord *m = hostrec__put_handoff_record__unpack(NULL, len, payload);
        if (!m) return SMP_EPROTO;
        rc = obj_apply_put_handoff(st, m);
        hostrec__put_handoff_record__free_unpacked(m, NULL);
        return rc;
    }
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
    if (!obj_encver_ok(type, encver) || (!payload && len) || (!buf && cap)) return SMP_EPROTO;
    if (!payload) payload = empty;
    if (obj_is_zones(type, encver)) {
        Hostrec__WriteZoneRecord *m = hostrec__write_zone_record__unpack(NULL, len, payload);
        if (!m) return SMP_EPROTO;
        const Hostrec__WriteZones *z = m->n_segments ? m->segments[0] : NULL;
        n = snprintf(buf, cap, "WRITE_ZONES segments=%zu first=%s ranges=%zu first_offset=%llu "
                               "first_length=%llu",
                     m->n_segments, z ? z->segment : "", z ? z->n_offsets : 0,
                     z && z->n_offsets ? (unsigned long long)z->offsets[0] : 0ULL,
                     z && z->n_lengths ? (unsigned long long)z->lengths[0] : 0ULL);
        hostrec__write_zone_record__free_unpacked(m, NULL);
        return n < 0 ? SMP_EPROTO : n;
    }
    if (encver == OBJ_REC_HANDOFF_ENCVER) {
        Hostrec__PutHandoffRecord *m = hostrec__put_handoff_record__unpack(NULL, len, payload);
        if (!m) return SMP_EPROTO;
        const Hostrec__HandedPut *h = m->n_puts ? m->puts[0] : NULL;
        n = snprintf(buf, cap, "PUT_HANDOFF puts=%zu first=%s segment=%s offset=%llu size=%llu "
                               "put_id=%llu",
                     m->n_puts, h ? h->key : "", h ? h->segment : "",
                     h ? (unsigned long long)h->offset : 0ULL,
                     h ? (unsigned long long)h->size : 0ULL,
                     h ? (unsigned long long)h->put_id : 0ULL);
        hostrec__put_handoff_record__free_unpacked(m, NULL);
        return n < 0 ? SMP_EPROTO : n;
    }
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
            n = snprintf(buf, cap, "SEGMENT_UPDATE group=%s managed=%d%s%s", m->group->name,
                         m->group->managed ? 1 : 0, m->group->managed ? " owner=" : "",
                         m->group->managed ? obj_group_msg_owner(m->group) : "");
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

obj_hold *obj_hold_find(const obj_store *st, const char *key)
{
    obj_hold *h = NULL;
    HASH_FIND(hh, st->holds, key, strlen(key), h);
    return h;
}

static int obj_hold_inc(obj_store *st, const char *key, int readable)
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
    if (readable) h->readable++;
    return SMP_OK;
}

static void obj_hold_dec(obj_store *st, const char *key, int readable)
{
    obj_hold *h = obj_hold_find(st, key);
    if (!h) return;
    if (readable && h->readable > 0) h->readable--;
    if (--h->count > 0) return;
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

/* 1 when the PUT_END m only updates the replica list of key's current
 * incarnation and keeps every memory replica the object has as it is
 * (segment, range, status): applying it frees nothing a reader may be
 * given, so its hold need not refuse reads. */
static int obj_keeps_memory(const obj_store *st, const Hostrec__ObjectRecord *m)
{
    if (!m->update_only || m->add_replica || m->key == NULL) return 0;
    const obj_object *o = obj_sl_get(&st->objects, m->key);
    if (!o || o->put_id != m->put_id || o->size != m->size) return 0;
    for (size_t i = 0; i < o->nreps; i++) {
        const obj_rep *e = &o->reps[i];
        if (e->kind != SMP_REPLICA_MEMORY) continue;
        int kept = 0;
        for (size_t k = 0; k < m->n_replicas && !kept; k++) {
            const Hostrec__Replica *r = m->replicas[k];
            kept = r->kind == SMP_REPLICA_MEMORY && r->segment != NULL &&
                   strcmp(r->segment, e->seg->id) == 0 && r->offset == e->offset &&
                   r->length == e->length && r->status == (uint32_t)e->status;
        }
        if (!kept) return 0;
    }
    return 1;
}

/* Decode a PUT_END or REMOVE record into a new obj_held; other types need
 * no hold (*out NULL). SMP_EPROTO, SMP_ENOMEM. */
static int obj_held_decode(const obj_record *rec, obj_held **out)
{
    static const uint8_t empty[1];
    const uint8_t *p = rec->buf ? rec->buf : empty;
    obj_held *h;
    *out = NULL;
    if (!obj_encver_ok(rec->type, rec->encver)) return SMP_EPROTO;
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
    OBJ_CHECK_CALLER(st);
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
    h->readable = h->m->descriptor == &hostrec__object_record__descriptor &&
                  obj_keeps_memory(st, (const Hostrec__ObjectRecord *)h->m);
    for (i = 0; i < n; i++)
        if ((rc = obj_hold_inc(st, keys[i], h->readable)) < 0) break;
    if (rc < 0 || n == 0) {
        while (i-- > 0) obj_hold_dec(st, keys[i], h->readable);
        obj_held_free(h);
        return rc;
    }
    *held = h;
    return SMP_OK;
}

int obj_apply_held(obj_store *st, const obj_held *held)
{
    OBJ_CHECK_CALLER(st);
    const ProtobufCMessage *m = held->m;
    if (m->descriptor == &hostrec__object_record__descriptor)
        return obj_apply_object(st, (const Hostrec__ObjectRecord *)m);
    return obj_apply_remove(st, (const Hostrec__RemoveRecord *)m);
}

void obj_release_hold(obj_store *st, obj_held *held)
{
    OBJ_CHECK_CALLER(st);
    char **keys;
    size_t n;
    if (!held) return;
    obj_held_keys(held->m, &keys, &n);
    for (size_t i = 0; i < n; i++) obj_hold_dec(st, keys[i], held->readable);
    obj_held_free(held);
}
