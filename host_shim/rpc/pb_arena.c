/* pb_arena.c -- a bump allocator for protobuf-c decodes (see pb_arena.h). */
#include "pb_arena.h"

#include <stdalign.h>
#include <stdlib.h>

#define PB_ALIGN alignof(max_align_t)

static size_t round_up(size_t n)
{
    return (n + PB_ALIGN - 1) & ~(size_t)(PB_ALIGN - 1);
}

/* A piece from the buffer while it lasts, then from malloc. */
static void *arena_alloc(void *data, size_t size)
{
    pb_arena *a = data;
    size_t need = round_up(size ? size : 1);
    if (need <= a->cap - a->used) {
        void *p = a->base + a->used;
        a->used += need;
        return p;
    }
    void *p = malloc(size);
    if (p) a->spilled++;
    return p;
}

/* Pieces inside the buffer go with it; the rest were malloc'ed. */
static void arena_free(void *data, void *p)
{
    pb_arena *a = data;
    uintptr_t q = (uintptr_t)p, base = (uintptr_t)a->base;
    if (q >= base && q - base < a->cap) return;
    free(p);
}

void pb_arena_init(pb_arena *a, void *mem, size_t cap)
{
    uintptr_t start = (uintptr_t)mem, aligned = round_up(start);
    a->alloc.alloc = arena_alloc;
    a->alloc.free = arena_free;
    a->alloc.allocator_data = a;
    a->base = (uint8_t *)aligned;
    a->cap = cap > aligned - start ? cap - (aligned - start) : 0;
    a->used = 0;
    a->spilled = 0;
}

void pb_arena_free_unpacked(pb_arena *a, ProtobufCMessage *msg)
{
    if (msg && a->spilled) protobuf_c_message_free_unpacked(msg, &a->alloc);
}
