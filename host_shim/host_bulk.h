/* host_bulk.h -- memory for the few large buffers of a restart.
 *
 * A restart builds the objects in slabs, hundreds of MB at 100,000 revisions
 * of 10 objects, and the index tables at their final size. Each is a mapping
 * of its own, so that the whole of it goes back to the kernel when it is
 * released, and only what is touched is resident.
 *
 * Which pages to ask for depends on how the memory is read:
 *  - host_bulk_alloc: the kernel's default (4 KiB pages where transparent
 *    huge pages are "madvise", as on Debian). For the slabs a load fills
 *    in order (the reads of the objects afterwards showed no difference
 *    either way), with host_bulk_ready mapping them a window ahead of
 *    the writes. Huge pages are no better there on the guests the benches
 *    ran on: on a Firecracker guest the first touch of a huge page zeroes
 *    2 MiB the host has taken back (free page reporting) at about 0.4 GB/s,
 *    where 4 KiB pages came at about 2 GB/s; on a PVM guest 4 KiB pages
 *    faulted one by one came at 0.3 GB/s, huge pages at 0.5-0.6, and the
 *    restart was no faster with them, while pages mapped a window at a time
 *    were (bench/README.md, "Restart at 1M objects");
 *  - host_bulk_alloc_huge: asked for transparent huge pages (MADV_HUGEPAGE;
 *    the kernel may still give 4 KiB pages: nothing depends on it). For the
 *    hash tables probed at random places for as long as the master runs,
 *    where 4 KiB pages miss the TLB on nearly every probe. */
#ifndef HOST_BULK_H
#define HOST_BULK_H

#include <stddef.h>

/* len bytes (len > 0) of zeroed memory, aligned for any object, or NULL
 * (errno set) when the mapping fails. Release with host_bulk_free(p, len),
 * the same len. */
void *host_bulk_alloc(size_t len);

/* host_bulk_alloc with transparent huge pages asked for. Release with
 * host_bulk_free. */
void *host_bulk_alloc_huge(size_t len);

/* How far ahead of the writes host_bulk_ready maps a buffer filled in
 * order: one call per window instead of a fault per 4 KiB page. On the
 * benches' PVM guest a page faulted on its own costs some 13 us, about half
 * that mapped a window at a time (bench/README.md); the window keeps what
 * is mapped but never written at the end of a buffer small. */
#define HOST_BULK_AHEAD ((size_t)4 << 20)

/* For a buffer of len bytes at base (a page boundary) being filled in
 * order, whose first ready bytes are mapped (0, a multiple of
 * HOST_BULK_AHEAD, or len): when upto reaches past ready, map the pages from
 * ready to the end of the window upto reaches into (at most len) now,
 * writable, in one call (MADV_POPULATE_WRITE). Returns the new ready.
 * Advice: where the kernel cannot (before Linux 5.14, or short of memory)
 * the pages come as they are touched, as without it. */
size_t host_bulk_ready(void *base, size_t ready, size_t upto, size_t len);

/* Release what host_bulk_alloc(len) returned. NULL is a no-op. */
void host_bulk_free(void *p, size_t len);

#endif /* HOST_BULK_H */
