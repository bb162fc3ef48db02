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
 * inside its buffer. Single-threaded, like the decode it serves. */
#ifndef HOST_PB_ARENA_H
#define HOST_PB_ARENA_H

#include <stddef.h>
#include <stdint.h>

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

/* Hand out mem[0, cap) (mem aligned for any object: a uint8_t array on the
 * stack is aligned by pb_arena_init rounding up its start). */
void pb_arena_init(pb_arena *a, void *mem, size_t cap);

/* Release msg (NULL ok), unpacked or built with a's allocator: only its
 * pieces that went to malloc need freeing, and a walk of the message is
 * made only when there are some. */
void pb_arena_free_unpacked(pb_arena *a, ProtobufCMessage *msg);

#endif /* HOST_PB_ARENA_H */
