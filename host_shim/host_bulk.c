/* host_bulk.c -- large buffers and index tables in mappings of their own
 * (see host_bulk.h). */
#include "host_bulk.h"

#include <sys/mman.h>

void *host_bulk_alloc(size_t len)
{
    if (len == 0) return NULL;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void *host_bulk_alloc_huge(size_t len)
{
    void *p = host_bulk_alloc(len);
#ifdef MADV_HUGEPAGE
    if (p != NULL) (void)madvise(p, len, MADV_HUGEPAGE); /* advice only: 4 KiB pages still work */
#endif
    return p;
}

size_t host_bulk_ready(void *base, size_t ready, size_t upto, size_t len)
{
    if (upto <= ready) return ready;
    /* a multiple of the window: the page boundary madvise asks for */
    size_t to = (upto + HOST_BULK_AHEAD - 1) / HOST_BULK_AHEAD * HOST_BULK_AHEAD;
    if (to > len) to = len;
#ifdef MADV_POPULATE_WRITE
    (void)madvise((char *)base + ready, to - ready, MADV_POPULATE_WRITE);
#else
    (void)base;
#endif
    return to;
}

void host_bulk_free(void *p, size_t len)
{
    if (p != NULL) (void)munmap(p, len);
}
