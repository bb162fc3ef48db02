/* host_bulk.h -- memory for the few large buffers of a restart.
 *
 * A restart reads the snapshot file into one buffer and builds the objects in
 * a slab, hundreds of MB at 100,000 revisions of 10 objects. Each is a
 * mapping of its own, so that the whole of it goes back to the kernel when it
 * is released, and only what is touched is resident.
 *
 * Which pages to ask for depends on how the memory is read:
 *  - host_bulk_alloc: the kernel's default (4 KiB pages where transparent
 *    huge pages are "madvise", as on Debian). For the snapshot buffer and
 *    the slabs a load fills in order (the reads of the objects afterwards
 *    showed no difference either way). On the 2-vCPU Firecracker guest the
 *    benches run on, the first touch of a huge page zeroes 2 MiB of guest
 *    memory the host has taken back (free page reporting) at about
 *    0.4 GB/s, where 4 KiB pages come at about 2 GB/s (bench/README.md,
 *    "Restart at 1M objects");
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

/* Release what host_bulk_alloc(len) returned. NULL is a no-op. */
void host_bulk_free(void *p, size_t len);

#endif /* HOST_BULK_H */
