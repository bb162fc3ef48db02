/* master_reclaim.c -- cold files of replicas the state no longer has are
 * deleted on their nodes.
 *
 * A cold replica leaves the state in two ways: its object is removed
 * (REMOVE, or a PUT_END replacing the incarnation) or its replica list is
 * rewritten without it (a corrupt file dropped, a replica released). The
 * file stays on the node's disk until someone deletes it, so the commit path
 * asks here before and after applying such a record: the cold replicas of
 * the keys the record touches are noted before, and every one the state
 * lacks after gets a DELETE_COLD task on its node. This is live work only
 * (recovery and a standby's replay never come through here): a node that is
 * down at that moment, or a crash between the durable record and the
 * unlink, leaves the file behind, and the node's next registration deletes
 * every file of its inventory that no replica names
 * (master_reclaim_inventory). Both are counted in
 * store_cold_files_reclaimed_total. The memory ranges such a record frees
 * are zeroed the same way (master_scrub.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_records.pb-c.h"
#include "master_internal.h"
#include "node_rpc.pb-c.h"

typedef struct reclaim_file {
    char *key;
    char *node;
    char *path;      /* COLD: the file; NULL for a memory replica */
    char *segment;   /* MEMORY: the range */
    uint64_t offset, length;
} reclaim_file;

struct master_reclaim {
    reclaim_file *v;
    size_t n, cap;
};

static void reclaim_free(master_reclaim *r)
{
    if (r == NULL) return;
    for (size_t i = 0; i < r->n; i++) {
        free(r->v[i].key);
        free(r->v[i].node);
        free(r->v[i].path);
        free(r->v[i].segment);
    }
    free(r->v);
    free(r);
}

/* Note the cold and memory replicas of key (a missing object has none). */
static int note_key(master *m, master_reclaim *r, const char *key)
{
    obj_replica reps[16];
    size_t n = 0;
    if (obj_object_replicas(master_objs(m), key, reps, 16, &n) < 0) return SMP_OK;
    if (n > 16) n = 16;
    for (size_t i = 0; i < n; i++) {
        int cold = reps[i].kind == SMP_REPLICA_COLD;
        if (cold ? reps[i].path == NULL : reps[i].segment == NULL) continue;
        if (r->n == r->cap) {
            size_t cap = r->cap ? r->cap * 2 : 8;
            reclaim_file *v = realloc(r->v, cap * sizeof(*v));
            if (v == NULL) return SMP_ENOMEM;
            r->v = v;
            r->cap = cap;
        }
        reclaim_file *f = &r->v[r->n];
        memset(f, 0, sizeof(*f));
        f->key = strdup(key);
        f->node = strdup(reps[i].node);
        if (cold) f->path = strdup(reps[i].path);
        else f->segment = strdup(reps[i].segment);
        f->offset = reps[i].offset;
        f->length = reps[i].length;
        if (!f->key || !f->node || !(cold ? f->path : f->segment)) {
            free(f->key);
            free(f->node);
            free(f->path);
            free(f->segment);
            return SMP_ENOMEM;
        }
        r->n++;
    }
    return SMP_OK;
}

/* The record as its hold decoded it when that is a message of d, else
 * buf[0..len) unpacked into *own (the caller frees it); NULL when it does
 * not decode. */
static const ProtobufCMessage *held_or_unpacked(const ProtobufCMessage *held,
                                                const ProtobufCMessageDescriptor *d,
                                                const uint8_t *buf, size_t len,
                                                ProtobufCMessage **own)
{
    if (held != NULL && held->descriptor == d) return held;
    return *own = protobuf_c_message_unpack(d, NULL, len, buf);
}

master_reclaim *master_reclaim_before(master *m, uint16_t type, const uint8_t *buf, size_t len,
                                      const obj_held *held)
{
    master_reclaim *r;
    ProtobufCMessage *own = NULL;
    if (type != OBJ_REC_PUT_END && type != OBJ_REC_REMOVE) return NULL;
    if ((r = calloc(1, sizeof(*r))) == NULL) return NULL;
    if (type == OBJ_REC_REMOVE) {
        const Hostrec__RemoveRecord *rm = (const Hostrec__RemoveRecord *)held_or_unpacked(
            obj_held_message(held), &hostrec__remove_record__descriptor, buf, len, &own);
        for (size_t i = 0; rm != NULL && i < rm->n_keys; i++) note_key(m, r, rm->keys[i]);
    } else {
        const Hostrec__ObjectRecord *o = (const Hostrec__ObjectRecord *)held_or_unpacked(
            obj_held_message(held), &hostrec__object_record__descriptor, buf, len, &own);
        /* an add-replica record only adds a memory replica */
        if (o != NULL && o->add_replica == NULL) note_key(m, r, o->key);
    }
    if (own != NULL) protobuf_c_message_free_unpacked(own, NULL);
    if (r->n == 0) {
        reclaim_free(r);
        return NULL;
    }
    return r;
}

/* 1 when key still has the memory replica f noted. */
static int still_mapped(master *m, const reclaim_file *f)
{
    obj_replica reps[16];
    size_t n = 0;
    if (obj_object_replicas(master_objs(m), f->key, reps, 16, &n) < 0) return 0;
    if (n > 16) return 1;
    for (size_t i = 0; i < n; i++)
        if (reps[i].kind == SMP_REPLICA_MEMORY && reps[i].segment &&
            strcmp(reps[i].segment, f->segment) == 0 && reps[i].offset == f->offset)
            return 1;
    return 0;
}

/* Zero the range of a memory replica the state let go of, when the
 * allocator has it free now (the record just freed it). */
static void scrub_freed(master *m, const reclaim_file *f)
{
    uint64_t len = (f->length ? f->length : 1);
    len = (len + OBJ_ALIGN - 1) / OBJ_ALIGN * OBJ_ALIGN;
    if (obj_segment_hold_range(master_objs(m), f->segment, f->offset, len) != SMP_OK) return;
    obj_segment_release_range(master_objs(m), f->segment, f->offset, len);
    if (master_node_readable(m, f->node)) master_scrub_range(m, f->node, f->segment, f->offset, len);
}

/* 1 when key has a cold replica (any status) on node at path. */
static int still_named(master *m, const char *key, const char *node, const char *path)
{
    obj_replica reps[16];
    size_t n = 0;
    if (obj_object_replicas(master_objs(m), key, reps, 16, &n) < 0) return 0;
    if (n > 16) return 1; /* cannot see them all: keep the file */
    for (size_t i = 0; i < n; i++)
        if (reps[i].kind == SMP_REPLICA_COLD && reps[i].path && strcmp(reps[i].node, node) == 0 &&
            strcmp(reps[i].path, path) == 0)
            return 1;
    return 0;
}

typedef struct delete_ctx {
    char *node;
    char *name;
} delete_ctx;

static void on_deleted(master *m, void *arg, int status, const TaskResult *res)
{
    delete_ctx *d = arg;
    if (status == SMP_OK && res != NULL && res->status == 0) {
        host_metric_add(m->m.cold_reclaimed, NULL, 1);
    } else {
        fprintf(stderr, "store_master: node %s: deleting cold file %s failed: %s (%s); "
                        "its next registration retries\n",
                d->node, d->name, smp_strerror(status < 0 ? status : res ? res->status : SMP_EIO),
                res && res->error ? res->error : "");
    }
    free(d->node);
    free(d->name);
    free(d);
}

int master_reclaim_cold_file(master *m, const char *node, const char *key, const char *name)
{
    delete_ctx *d = calloc(1, sizeof(*d));
    int rc;
    if (d == NULL) return SMP_ENOMEM;
    d->node = strdup(node);
    d->name = strdup(name);
    if (!d->node || !d->name) {
        rc = SMP_ENOMEM;
        goto free_ctx;
    }
    rc = master_node_task(m, node, TASK_KIND__TASK_DELETE_COLD, key, 0, 0, NULL, name, on_deleted, d);
    if (rc == SMP_OK) return SMP_OK;
free_ctx:
    free(d->node);
    free(d->name);
    free(d);
    return rc;
}

void master_reclaim_after(master *m, master_reclaim *r, int applied)
{
    if (r == NULL) return;
    for (size_t i = 0; applied && i < r->n; i++) {
        const reclaim_file *f = &r->v[i];
        if (f->segment != NULL) {
            if (!still_mapped(m, f)) scrub_freed(m, f);
            continue;
        }
        if (still_named(m, f->key, f->node, f->path)) continue;
        /* A node that is down deletes it at its next registration. */
        master_reclaim_cold_file(m, f->node, f->key, f->path);
    }
    reclaim_free(r);
}

int master_reclaim_inventory(master *m, const char *node, const char **keys,
                             const char **names, size_t n)
{
    int queued = 0;
    for (size_t i = 0; i < n; i++) {
        if (still_named(m, keys[i], node, names[i]) || master_persist_in_flight(m, keys[i])) continue;
        fprintf(stderr, "store_master: node %s: cold file %s (%s) belongs to no replica; deleting it\n",
                node, names[i], keys[i]);
        if (master_reclaim_cold_file(m, node, keys[i], names[i]) == SMP_OK) queued++;
    }
    return queued;
}
