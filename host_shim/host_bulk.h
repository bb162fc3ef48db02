/* host_bulk.h -- memory for the few large buffers of a restart.
 *
 * A restart builds the objects in slabs, hundreds of MB at 100,000 revisions
 * of 10 objects, and the index tables at their final size. Each is a mapping
 * of its own, so that the whole of it goes back to the kernel when it is
 * released, and only what is touched is resident.
 *
 * Which pages to ask for depends on how the memory is filled and read:
 *  - host_bulk_alloc: the kernel's default (4 KiB pages where transparent
 *    huge pages are "madvise", as on Debian): a snapshot's section buffers,
 *    mapped a window ahead of the writes by host_bulk_ready, and the slabs a
 *    load's objects are built in, readied by a feed (below) or a window at a
 *    time as well. A slab was on huge pages once; on a guest whose balloon
 *    hands free memory back to its host, a huge page taken from that memory
 *    costs some 2 ms per MiB to back again, a 4 KiB page a fifth of that,
 *    and the restart of 1M objects took twice as long (bench/JOURNAL.md,
 *    "The guest of 2026-12-07, and the restart's objects' slab on 4 KiB
 *    pages"). An object is read after its index slot, so its page's TLB
 *    miss is one per lookup: no change showed in the reads.
 *  - host_bulk_alloc_huge: asked for transparent huge pages (MADV_HUGEPAGE;
 *    the kernel may still give 4 KiB pages: nothing depends on it). For the
 *    hash tables probed at random places while they are built and for as
 *    long as the master runs, where 4 KiB pages miss the TLB on nearly every
 *    probe: on 4 KiB pages the same restart was slower ("Restart at 1M
 *    objects: two page experiments"). */
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
 * that mapped a window at a time (bench/JOURNAL.md); the window keeps what
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

/* A thread that makes a buffer's pages ready ahead of the one thread
 * filling it in order, so that the filler does not wait for them.
 *
 * On the PVM guest of the benches a page the kernel has mapped (a fault,
 * MADV_POPULATE_WRITE) still costs some 6 us at its first touch from user
 * space, whichever thread makes it, and nothing after: the hypervisor fills
 * its shadow page table then. host_bulk_ready only halves the cost of a
 * page; the feed's thread maps a window and reads a byte of each of its
 * pages, on another core when there is one, and hands it over.
 *
 * The thread stays at most HOST_BULK_FEED_LEAD bytes ahead of where the
 * filler said it is (what is ready but never filled is resident: at most
 * that much), and never touches a byte it has handed over: the filler owns
 * [0, what host_bulk_feed_wait returned), the thread the rest. */
typedef struct host_bulk_feed host_bulk_feed;

#define HOST_BULK_FEED_LEAD ((size_t)16 << 20)

/* Start a feed over base[0, len) (a page boundary, none of it touched
 * yet). NULL when the thread cannot start (errno set): fill the buffer
 * with host_bulk_ready then. */
host_bulk_feed *host_bulk_feed_start(void *base, size_t len);

/* The filler is about to write below upto (<= the buffer's len): wait until
 * the feed has readied that far, and return how far it may write before it
 * calls again: a value >= upto, at most the buffer's len (it calls again
 * before the feed's lead runs out, so the thread keeps working ahead). */
size_t host_bulk_feed_wait(host_bulk_feed *f, size_t upto);

/* Stop the feed's thread, wait for it, and free the feed. The buffer stays
 * as it is. NULL is a no-op. */
void host_bulk_feed_stop(host_bulk_feed *f);

/* Release what host_bulk_alloc(len) returned. NULL is a no-op. */
void host_bulk_free(void *p, size_t len);

#endif /* HOST_BULK_H */
