/* wm_bulk.h -- memory for the large buffers of a section load.
 *
 * Loading the weight_metadata section decodes tens of MB at 100,000
 * revisions: protobuf-c's pieces of the message, the array of decoded
 * revisions, the revisions' slab. Each is mapped on its own (released whole),
 * and the protobuf-c decode takes its pieces from one bump arena instead of a
 * malloc and a free each. wm_bulk_alloc takes the kernel's default pages,
 * wm_bulk_alloc_huge asks for transparent huge pages, for the index tables
 * probed at random for as long as the plugin runs; host_bulk.h says why the
 * buffers written once do not. The host has the same two tools (host_bulk.h,
 * pb_arena.h); the plugin carries its own copies because it never links
 * against the host. */
#ifndef WM_BULK_H
#define WM_BULK_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* len bytes (len > 0) of zeroed memory, aligned for any object, or NULL.
 * Release with wm_bulk_free(p, len), the same len; NULL is a no-op there. */
void *wm_bulk_alloc(size_t len);
void *wm_bulk_alloc_huge(size_t len);
void wm_bulk_free(void *p, size_t len);

/* A protobuf-c allocator handing out pieces of one wm_bulk mapping, then
 * (when it is used up) malloc'ed ones. Pass &arena.alloc to unpack; release
 * the message with wm_arena_free_unpacked, then the arena with
 * wm_arena_fini. */
typedef struct wm_arena {
    ProtobufCAllocator alloc;
    uint8_t *base;
    size_t cap;
    size_t used;
    size_t spilled; /* pieces that went to malloc */
} wm_arena;

/* Map cap bytes for a. SMP_OK or SMP_ENOMEM (a then holds nothing). */
int wm_arena_init(wm_arena *a, size_t cap);
/* Release msg (NULL ok), unpacked with a: walks it only when some pieces
 * went to malloc. */
void wm_arena_free_unpacked(wm_arena *a, ProtobufCMessage *msg);
/* Unmap a's buffer. */
void wm_arena_fini(wm_arena *a);

#endif /* WM_BULK_H */
