/* pb_arena.h -- a bump allocator for protobuf-c decodes whose pieces are
 * all released together.
 *
 * Decoding one small request with protobuf-c's default allocator costs a
 * malloc per message, string, bytes field and repeated array (four to eight
 * on the master's mutation path), and as many frees after. An arena hands
 * those pieces out of one buffer the caller owns -- on the stack for a
 * request decoded and dropped within one call, or inside one allocation for
 * a record kept until it is durable -- and sends only what does not fit to
 * malloc. Use:
 *
 *   uint8_t mem[PB_ARENA_SMALL];
 *   pb_arena a;
 *   pb_arena_init(&a, mem, sizeof(mem));
 *   KeyRequest *req = key_request__unpack(&a.alloc, len, body);
 *   ...
 *   pb_arena_free_unpacked(&a, &req->base);  // frees only the overflow
 *
 * The arena never grows, never moves what it handed out, and keeps no list,
 * only a count of the pieces that went to malloc. While that count is zero
 * there is nothing to free; otherwise protobuf-c's free_unpacked walks the
 * message and returns every piece, and the arena's free ignores the ones
 * inside its buffer. Single-threaded, like the decode it serves.
 *
 * Header-only (static inline), like pb_wire.h: the master and the client
 * library (its replies) each get their own copy, with no symbol between
 * them. */
#ifndef PB_ARENA_H
#define PB_ARENA_H

#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <protobuf-c/protobuf-c.h>

/* Enough for any fixed-size request of the host's services and one key. */
#define PB_ARENA_SMALL 1024

typedef struct pb_arena {
    ProtobufCAllocator alloc; /* pass &arena.alloc to unpack and free_unpacked */
    uint8_t *base;
    size_t cap;
    size_t used;
    size_t spilled; /* pieces handed out by malloc */
} pb_arena;

#define PB_ARENA_ALIGN alignof(max_align_t)

static inline size_t pb_arena_round_up(size_t n)
{
    return (n + PB_ARENA_ALIGN - 1) & ~(size_t)(PB_ARENA_ALIGN - 1);
}

/* A piece from the buffer while it lasts, then from malloc. */
static inline void *pb_arena_piece(void *data, size_t size)
{
    pb_arena *a = data;
    size_t need = pb_arena_round_up(size ? size : 1);
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
static inline void pb_arena_piece_free(void *data, void *p)
{
    pb_arena *a = data;
    uintptr_t q = (uintptr_t)p, base = (uintptr_t)a->base;
    if (q >= base && q - base < a->cap) return;
    free(p);
}

/* Hand out mem[0, cap) (mem aligned for any object: a uint8_t array on the
 * stack is aligned by pb_arena_init rounding up its start). */
static inline void pb_arena_init(pb_arena *a, void *mem, size_t cap)
{
    uintptr_t start = (uintptr_t)mem, aligned = pb_arena_round_up(start);
    a->alloc.alloc = pb_arena_piece;
    a->alloc.free = pb_arena_piece_free;
    a->alloc.allocator_data = a;
    a->base = (uint8_t *)aligned;
    a->cap = cap > aligned - start ? cap - (aligned - start) : 0;
    a->used = 0;
    a->spilled = 0;
}

/* Release msg (NULL ok), unpacked or built with a's allocator: only its
 * pieces that went to malloc need freeing, and a walk of the message is
 * made only when there are some. */
static inline void pb_arena_free_unpacked(pb_arena *a, ProtobufCMessage *msg)
{
    if (msg && a->spilled) protobuf_c_message_free_unpacked(msg, &a->alloc);
}

#endif /* PB_ARENA_H */
