/* obj_store_released.c -- what a tracked apply took out of the state: the
 * memory ranges it returned to the allocator and the cold files no longer
 * named, told to the master once the apply is over (obj_store.h, "What an
 * apply lets go of"). Part of obj_store (see obj_store.c).
 *
 * The replicas are noted where the store releases an object
 * (obj_object_release), so a REMOVE of many keys costs no lookup beyond
 * the apply's own: a range is a segment pointer and two numbers, and only
 * a cold file copies its names (and is looked up once more after the
 * apply: a replica list rewritten keeps most of its files). */
#include "obj_store_internal.h"

#include <stdlib.h>
#include <string.h>

/* Grow *v (of elements of size el, *cap of them) to hold one more than n.
 * SMP_ENOMEM leaves it as it was. */
static int grow(void **v, size_t *cap, size_t n, size_t el)
{
    if (n < *cap) return SMP_OK;
    size_t ncap = *cap ? *cap * 2 : 16;
    void *nv = realloc(*v, ncap * el);
    if (nv == NULL) return SMP_ENOMEM;
    *v = nv;
    *cap = ncap;
    return SMP_OK;
}

/* Free a noted file's names. */
static void file_free(obj_released_file *f)
{
    free(f->key);
    free(f->node);
    free(f->path);
}

/* Note the cold file of rep (a replica of key) with copies of its names;
 * out of memory, it is not noted (the node's next registration deletes it). */
static void note_file(obj_released *r, const char *key, const obj_rep *rep)
{
    if (grow((void **)&r->files, &r->capfiles, r->nfiles, sizeof(*r->files)) < 0) return;
    obj_released_file *f = &r->files[r->nfiles];
    f->key = strdup(key);
    f->node = strdup(rep->node);
    f->path = strdup(rep->path);
    if (f->key == NULL || f->node == NULL || f->path == NULL) {
        file_free(f);
        return;
    }
    r->nfiles++;
}

void obj_released_note(obj_store *st, const obj_object *o)
{
    obj_released *r = &st->released;
    if (!r->on) return;
    for (size_t i = 0; i < o->nreps; i++) {
        const obj_rep *rep = &o->reps[i];
        if (rep->kind == SMP_REPLICA_COLD) {
            if (rep->path != NULL && rep->node != NULL) note_file(r, o->key, rep);
            continue;
        }
        if (rep->seg == NULL ||
            grow((void **)&r->ranges, &r->capranges, r->nranges, sizeof(*r->ranges)) < 0)
            continue;
        r->ranges[r->nranges++] = (obj_released_range){
            .seg = rep->seg, .offset = rep->offset, .length = obj_ext_len(rep->length)};
    }
}

/* 1 when a replica of f's key in the state names f's file on f's node. */
static int still_named(const obj_store *st, const obj_released_file *f)
{
    const obj_object *o = obj_sl_get(&st->objects, f->key);
    for (size_t i = 0; o != NULL && i < o->nreps; i++) {
        const obj_rep *rep = &o->reps[i];
        if (rep->kind == SMP_REPLICA_COLD && rep->path != NULL && strcmp(rep->path, f->path) == 0 &&
            strcmp(rep->node, f->node) == 0)
            return 1;
    }
    return 0;
}

void obj_store_track_released(obj_store *st)
{
    OBJ_CHECK_CALLER(st);
    st->released.on = 1;
}

void obj_store_take_released(obj_store *st, int applied, const obj_released_ops *ops)
{
    OBJ_CHECK_CALLER(st);
    obj_released *r = &st->released;
    r->on = 0;
    for (size_t i = 0; applied && i < r->nranges; i++) {
        const obj_released_range *g = &r->ranges[i];
        if (obj_seg_is_free(g->seg, g->offset, g->length))
            ops->range(ops->ctx, g->seg->node, g->seg->id, g->offset, g->length);
    }
    r->nranges = 0;
    for (size_t i = 0; i < r->nfiles; i++) {
        obj_released_file *f = &r->files[i];
        if (applied && !still_named(st, f)) ops->file(ops->ctx, f->key, f->node, f->path);
        file_free(f);
    }
    r->nfiles = 0;
}

void obj_released_fini(obj_released *r)
{
    for (size_t i = 0; i < r->nfiles; i++) file_free(&r->files[i]);
    free(r->files);
    free(r->ranges);
    memset(r, 0, sizeof(*r));
}
