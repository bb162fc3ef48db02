/* wm_bulk.c -- mappings of their own and a protobuf-c arena for section loads
 * (see wm_bulk.h). */
#include "wm_bulk.h"

#include <stdalign.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "store_plugin.h"

#define WM_ARENA_ALIGN alignof(max_align_t)

void *wm_bulk_alloc(size_t len)
{
    if (len == 0) return NULL;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void *wm_bulk_alloc_huge(size_t len)
{
    void *p = wm_bulk_alloc(len);
#ifdef MADV_HUGEPAGE
    if (p != NULL) (void)madvise(p, len, MADV_HUGEPAGE); /* advice only: 4 KiB pages still work */
#endif
    return p;
}

void wm_bulk_free(void *p, size_t len)
{
    if (p != NULL) (void)munmap(p, len);
}

/* A piece from the mapping while it lasts, then from malloc. */
static void *wm_arena_alloc(void *data, size_t size)
{
    wm_arena *a = data;
    size_t need = ((size ? size : 1) + WM_ARENA_ALIGN - 1) & ~(size_t)(WM_ARENA_ALIGN - 1);
    if (need >= size && need <= a->cap - a->used) {
        void *p = a->base + a->used;
        a->used += need;
        return p;
    }
    void *p = malloc(size);
    if (p != NULL) a->spilled++;
    return p;
}

/* Pieces inside the mapping go with it; the rest were malloc'ed. */
static void wm_arena_free(void *data, void *p)
{
    wm_arena *a = data;
    uintptr_t q = (uintptr_t)p, base = (uintptr_t)a->base;
    if (q >= base && q - base < a->cap) return;
    free(p);
}

int wm_arena_init(wm_arena *a, size_t cap)
{
    a->alloc.alloc = wm_arena_alloc;
    a->alloc.free = wm_arena_free;
    a->alloc.allocator_data = a;
    a->used = 0;
    a->spilled = 0;
    a->base = wm_bulk_alloc(cap);
    a->cap = a->base != NULL ? cap : 0;
    return a->base != NULL ? SMP_OK : SMP_ENOMEM;
}

void wm_arena_free_unpacked(wm_arena *a, ProtobufCMessage *msg)
{
    if (msg != NULL && a->spilled > 0) protobuf_c_message_free_unpacked(msg, &a->alloc);
}

void wm_arena_fini(wm_arena *a)
{
    wm_bulk_free(a->base, a->cap);
    a->base = NULL;
    a->cap = 0;
}
