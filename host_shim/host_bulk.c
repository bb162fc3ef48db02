/* host_bulk.c -- huge-page-backed buffers for a restart (see host_bulk.h). */
#include "host_bulk.h"

#include <sys/mman.h>

void *host_bulk_alloc(size_t len)
{
    if (len == 0) return NULL;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, len, MADV_HUGEPAGE); /* advice only: 4 KiB pages still work */
#endif
    return p;
}

void host_bulk_free(void *p, size_t len)
{
    if (p != NULL) (void)munmap(p, len);
}
