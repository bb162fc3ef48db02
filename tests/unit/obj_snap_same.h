/* obj_snap_same.h -- the host objects section's hand-written decoder
 * (host_shim/master/obj_snap_decode.c) held against protobuf-c: for the
 * same bytes both must accept or both refuse, and give the same format and
 * the same records in the same order. Records are compared by packing both
 * with protobuf-c (unknown fields, which the decoder skips, are left out of
 * both sides; add_replica is compared by presence only, see
 * obj_snap_decode.h). The fed decoder (obj_snap_decode_fed), given the
 * bytes a few at a time, must agree too: refuse what protobuf-c refuses,
 * and hand out the same records, stopping with OBJ_SNAP_OUT_OF_ORDER only
 * where the records are not in kind order. Shared by test_obj_snap_decode
 * and fuzz_snapshot. */
#ifndef OBJ_SNAP_SAME_H
#define OBJ_SNAP_SAME_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_records.pb-c.h"
#include "obj_snap_decode.h"
#include "store_plugin.h"

typedef struct snap_same_ctx {
    const Hostrec__HostSnapshot *ref;
    size_t seen[5]; /* segments, groups, objects, open puts, zones handed out so far */
    int same;
} snap_same_ctx;

/* 1 when a and b pack to the same bytes. */
static int snap_same_packed(const ProtobufCMessage *a, const ProtobufCMessage *b)
{
    size_t na = protobuf_c_message_get_packed_size(a);
    size_t nb = protobuf_c_message_get_packed_size(b);
    if (na != nb) return 0;
    uint8_t *pa = malloc(na ? na : 1), *pb = malloc(nb ? nb : 1);
    if (pa == NULL || pb == NULL) abort();
    protobuf_c_message_pack(a, pa);
    protobuf_c_message_pack(b, pb);
    int same = memcmp(pa, pb, na) == 0;
    free(pa);
    free(pb);
    return same;
}

/* Compare a decoded record with protobuf-c's, its unknown fields (and its
 * replicas') hidden for the packing and put back after. */
static int snap_same_record(const ProtobufCMessage *got, ProtobufCMessage *ref)
{
    if (got->descriptor != &hostrec__object_record__descriptor) {
        /* the few records the decoder has protobuf-c unpack (open puts,
         * zones) keep their unknown fields: hidden on both sides */
        ProtobufCMessage *g = (ProtobufCMessage *)got;
        size_t nu = ref->n_unknown_fields, gu = g->n_unknown_fields;
        ref->n_unknown_fields = 0;
        g->n_unknown_fields = 0;
        int same = snap_same_packed(got, ref);
        ref->n_unknown_fields = nu;
        g->n_unknown_fields = gu;
        return same;
    }
    Hostrec__ObjectRecord g = *(const Hostrec__ObjectRecord *)got;
    Hostrec__ObjectRecord *r = (Hostrec__ObjectRecord *)ref;
    if ((g.add_replica != NULL) != (r->add_replica != NULL) || g.n_replicas != r->n_replicas)
        return 0;
    Hostrec__ObjectRecord rc = *r;
    g.add_replica = rc.add_replica = NULL;
    rc.base.n_unknown_fields = 0;
    Hostrec__Replica *reps = calloc(rc.n_replicas + 1, sizeof(*reps));
    Hostrec__Replica **repp = calloc(rc.n_replicas + 1, sizeof(*repp));
    if (reps == NULL || repp == NULL) abort();
    for (size_t i = 0; i < rc.n_replicas; i++) {
        reps[i] = *r->replicas[i];
        reps[i].base.n_unknown_fields = 0;
        repp[i] = &reps[i];
    }
    rc.replicas = repp;
    int same = snap_same_packed(&g.base, &rc.base);
    free(reps);
    free(repp);
    return same;
}

static int snap_same_fn(void *arg, unsigned what, const ProtobufCMessage *msg)
{
    snap_same_ctx *c = arg;
    size_t k = what == OBJ_SNAP_SEGMENTS    ? 0
               : what == OBJ_SNAP_GROUPS    ? 1
               : what == OBJ_SNAP_OBJECTS   ? 2
               : what == OBJ_SNAP_OPEN_PUTS ? 3
                                            : 4;
    size_t n = k == 0   ? c->ref->n_segments
               : k == 1 ? c->ref->n_groups
               : k == 2 ? c->ref->n_objects
               : k == 3 ? c->ref->n_open_puts
                        : c->ref->n_zones;
    ProtobufCMessage *ref = NULL;
    if (c->seen[k] < n)
        ref = k == 0   ? &c->ref->segments[c->seen[k]]->base
              : k == 1 ? &c->ref->groups[c->seen[k]]->base
              : k == 2 ? &c->ref->objects[c->seen[k]]->base
              : k == 3 ? &c->ref->open_puts[c->seen[k]]->base
                       : &c->ref->zones[c->seen[k]]->base;
    c->seen[k]++;
    if (ref == NULL || !snap_same_record(msg, ref)) c->same = 0;
    return SMP_OK;
}

/* Bytes for obj_snap_decode_fed: what is asked and 7 more, up to len. */
typedef struct snap_same_feed {
    size_t avail, len;
} snap_same_feed;

static size_t snap_same_wait(void *arg, size_t upto)
{
    snap_same_feed *f = arg;
    if (upto > f->avail) f->avail = upto + 7;
    if (f->avail > f->len) f->avail = f->len;
    return f->avail;
}

/* The fed decode of data[0..len) against protobuf-c's ref (NULL: refused). */
static int snap_same_fed(const uint8_t *data, size_t len, const Hostrec__HostSnapshot *ref)
{
    obj_snap_dec d = {0};
    obj_snap_frame fr;
    snap_same_feed f = {0, len};
    uint32_t format = 0;
    snap_same_ctx c = {ref, {0, 0, 0, 0, 0}, 1};
    int rc = obj_snap_decode_fed(&d, data, len, &format, snap_same_wait, &f,
                                 ref ? snap_same_fn : NULL, &c);
    int in_order = obj_snap_frame_scan(data, len, &fr) == SMP_OK && fr.in_kind_order;
    int same = 1;
    if (ref == NULL && rc == SMP_OK) {
        fprintf(stderr, "obj_snap_same: the fed decoder accepts what protobuf-c refuses\n");
        same = 0;
    } else if (ref != NULL && rc == OBJ_SNAP_OUT_OF_ORDER && in_order) {
        fprintf(stderr, "obj_snap_same: the fed decoder finds records in kind order out of it\n");
        same = 0;
    } else if (ref != NULL && rc != SMP_OK && rc != SMP_ENOMEM && rc != OBJ_SNAP_OUT_OF_ORDER) {
        fprintf(stderr, "obj_snap_same: the fed decoder refuses what protobuf-c accepts (%d)\n", rc);
        same = 0;
    } else if (ref != NULL && (!c.same || (rc == SMP_OK && (format != ref->format ||
                                                           c.seen[0] != ref->n_segments ||
                                                           c.seen[1] != ref->n_groups ||
                                                           c.seen[2] != ref->n_objects ||
                                                           c.seen[3] != ref->n_open_puts ||
                                                           c.seen[4] != ref->n_zones)))) {
        fprintf(stderr, "obj_snap_same: the fed decoder's records differ from protobuf-c's\n");
        same = 0;
    }
    obj_snap_dec_fini(&d);
    return same;
}

/* 1 when obj_snap_decode and hostrec__host_snapshot__unpack agree on
 * data[0..len) (an out-of-memory decode counts as agreeing), and the fed
 * decode with them; 0 otherwise, with the difference on stderr. */
static int obj_snap_same(const uint8_t *data, size_t len)
{
    static const uint8_t empty[1];
    Hostrec__HostSnapshot *ref = hostrec__host_snapshot__unpack(NULL, len, len ? data : empty);
    obj_snap_dec d = {0};
    uint32_t format = 0;
    int rc;
    int same = 1;
    if (ref == NULL) {
        rc = obj_snap_decode(&d, data, len, OBJ_SNAP_ALL, &format, NULL, NULL);
        if (rc == SMP_OK) {
            fprintf(stderr, "obj_snap_same: the decoder accepts what protobuf-c refuses\n");
            same = 0;
        }
        obj_snap_dec_fini(&d);
        return same && snap_same_fed(data, len, NULL);
    }
    snap_same_ctx c = {ref, {0, 0, 0, 0, 0}, 1};
    rc = obj_snap_decode(&d, data, len, OBJ_SNAP_ALL, &format, snap_same_fn, &c);
    if (rc != SMP_OK && rc != SMP_ENOMEM) {
        fprintf(stderr, "obj_snap_same: the decoder refuses what protobuf-c accepts (%d)\n", rc);
        same = 0;
    } else if (rc == SMP_OK && (!c.same || format != ref->format ||
                                c.seen[0] != ref->n_segments || c.seen[1] != ref->n_groups ||
                                c.seen[2] != ref->n_objects || c.seen[3] != ref->n_open_puts ||
                                c.seen[4] != ref->n_zones)) {
        fprintf(stderr, "obj_snap_same: the decoder's records differ from protobuf-c's\n");
        same = 0;
    }
    obj_snap_dec_fini(&d);
    same = same && snap_same_fed(data, len, ref);
    hostrec__host_snapshot__free_unpacked(ref, NULL);
    return same;
}

#endif /* OBJ_SNAP_SAME_H */
