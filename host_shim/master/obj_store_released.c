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

/* v (of elements of size el, *cap of them) grown, when full at n, to hold
 * one more: the array to use from now on (v itself when it had room), or
 * NULL when out of memory (v is left as it was). */
static void *grow(void *v, size_t *cap, size_t n, size_t el)
{
    if (n < *cap) return v;
    size_t ncap = *cap ? *cap * 2 : 16;
    void *nv = realloc(v, ncap * el);
    if (nv != NULL) *cap = ncap;
    return nv;
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
    obj_released_file *files = grow(r->files, &r->capfiles, r->nfiles, sizeof(*r->files));
    if (files == NULL) return;
    r->files = files;
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
        obj_released_range *ranges =
            rep->seg ? grow(r->ranges, &r->capranges, r->nranges, sizeof(*r->ranges)) : NULL;
        if (ranges == NULL) continue;
        r->ranges = ranges;
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
