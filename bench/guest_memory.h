/* guest_memory.h -- the state of the machine's free memory, set before a
 * start that is timed: on a virtual machine whose balloon reports free
 * memory to the host (virtio-balloon free page reporting), a free 2 MiB
 * block unused for about two seconds is handed back to the host, and its
 * next first use waits for the host to back it again (about 2.5 ms per MiB
 * on the guest of bench/JOURNAL.md, against 0.05 ms for memory still
 * backed). A process that starts on a quiet machine pays that for all the
 * memory it builds; bench_back_memory puts the machine in the other state,
 * the one a host without reporting is always in, so that a figure can be
 * taken in both. Header-only (static inline), like bench_clock.h. */
#ifndef BENCH_GUEST_MEMORY_H
#define BENCH_GUEST_MEMORY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include "bench_clock.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Map bytes of anonymous memory on huge pages, have the kernel back every
 * page of it (MADV_POPULATE_WRITE), and unmap it: the free blocks it
 * leaves are backed by the host for the next process that asks within
 * about two seconds. Returns the seconds it took (long when the blocks had
 * been handed back), or -1 when the memory could not be had. */
static inline double bench_back_memory(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    size_t len = (bytes + huge - 1) & ~(huge - 1);
    double t0 = bench_now_s();
    if (len == 0) return 0;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return -1;
    (void)madvise(p, len, MADV_HUGEPAGE);
    int rc = madvise(p, len, MADV_POPULATE_WRITE);
    munmap(p, len);
    return rc == 0 ? bench_now_s() - t0 : -1;
}

#endif
