/* host_bulk.h -- memory for the few large, short-lived buffers of a restart.
 *
 * A restart reads the snapshot file into one buffer and decodes the object
 * store's section in one arena, each tens of MB at 100,000 revisions. Taken
 * from malloc, such a buffer is faulted in 4 KiB at a time as it is first
 * written, and on a virtual machine each such fault is an exit costing
 * microseconds: a fifth of a restart's CPU was page faults. These buffers are
 * mapped on their own and asked for transparent huge pages (madvise
 * MADV_HUGEPAGE; the kernel may still give 4 KiB pages: nothing depends on
 * it), so they fault in 2 MiB at a time; only what is touched is resident,
 * and the whole mapping goes back to the kernel when it is released. */
#ifndef HOST_BULK_H
#define HOST_BULK_H

#include <stddef.h>

/* len bytes (len > 0) of zeroed memory, aligned for any object, or NULL
 * (errno set) when the mapping fails. Release with host_bulk_free(p, len),
 * the same len. */
void *host_bulk_alloc(size_t len);

/* Release what host_bulk_alloc(len) returned. NULL is a no-op. */
void host_bulk_free(void *p, size_t len);

#endif /* HOST_BULK_H */
