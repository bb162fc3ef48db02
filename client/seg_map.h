/* seg_map.h -- a client's own mapping of a node's segment file.
 *
 * The zero-copy path of a client on the same host as a node: instead of
 * asking the node for bytes over a socket, the client maps the node's
 * segment file (node_segment.h names it <dir>/<id>.seg) and copies straight
 * between the mapping and its own buffers -- one memcpy, no socket, no
 * staging buffer. The master still decides which range belongs to which
 * object: a client writes only the range of its put and reads only ranges a
 * replica lookup returned under a read lease.
 *
 * Trust: this path bypasses the node, so the node cannot check a write
 * ticket here. The file's permissions are one boundary (the segment file is
 * 0600, owned by the node's user): a shared node's file is mapped by path,
 * and the master names that path only with authentication off. A node
 * dedicated to one tenant hands its file over its local socket instead
 * (seg_local.h), to the uids and gids it lists for that tenant; the master
 * names the socket, never the path. Everyone else goes through the TCP data
 * server with tickets.
 *
 * A mapping is created and closed by one thread; seg_map_get / seg_map_put
 * may run on any thread for disjoint ranges. The mapping never changes size.
 * A node grows its file in place (node.segment_bytes raised): this mapping
 * stays valid for its range, and the callers that cache mappings map the
 * file again when it is larger than theirs. A node cuts its file only past
 * every occupied range, so no range a client is given lies there. */
#ifndef WM_SEG_MAP_H
#define WM_SEG_MAP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "store_plugin.h"

typedef struct seg_map {
    uint8_t *base;  /* NULL when closed */
    uint64_t size;
    int writable;
    uint64_t dev, ino; /* the file mapped (a node that restarts on a new
                          segment file leaves this mapping on the old one) */
    int has_fd;        /* mapped from a node's local socket (seg_map_open_at): */
    int fd;            /* the descriptor it handed over, kept to see growth */
    uint64_t sock_dev, sock_ino; /* the socket file that handed it over, and */
    uint64_t sock_ctime_ns;      /* its ctime (a reused inode number differs) */
    /* One bit per page of this mapping, set once seg_map_prefault made its
     * page-table entry present (NULL: nothing is remembered). */
    _Atomic uint64_t *present;
    uint64_t page;               /* the page size the bits count */
} seg_map;

struct stat;

/* 1 when st (a stat of the segment's path) is the file m maps (same device
 * and inode), 0 when the path now names another file. */
int seg_map_same_file(const seg_map *m, const struct stat *st);

/* Map path read-only (seg_map_readonly) or read-write (seg_map_writable).
 * populate != 0 prefaults the page tables now (MAP_POPULATE), so the first
 * copies do not pay a page fault per 4 KiB. On success fills *m and returns
 * SMP_OK; otherwise SMP_ENOTFOUND (no such file), SMP_EINVAL (not a regular
 * file, or empty), SMP_EIO (open or mmap failed), with err (may be NULL)
 * naming the file and the cause; *m is zeroed. */
int seg_map_readonly(const char *path, int populate, seg_map *m, char *err, size_t errlen);
int seg_map_writable(const char *path, int populate, seg_map *m, char *err, size_t errlen);

/* Map the descriptor fd (a segment file) read-only or read-write; fd is
 * borrowed (the caller closes it). Results as seg_map_readonly; what names
 * the file in err. */
int seg_map_fd(int fd, const char *what, int writable, int populate, seg_map *m, char *err,
               size_t errlen);

/* Map a memory replica's segment the way the master located it: through
 * the node's local socket when socket is not "" (seg_local_fetch; the
 * descriptor is kept in *m to see the file grow), else the file at path.
 * SMP_EFORBIDDEN when the node refused this process (err is the node's
 * cause); otherwise as seg_map_readonly. */
int seg_map_open_at(const char *path, const char *socket, int writable, int populate, seg_map *m,
                    char *err, size_t errlen);

/* What seg_map_open_at(path, socket, ...) maps from: socket when it is not
 * "", else path. Callers that cache mappings key them by it. */
const char *seg_map_where(const char *path, const char *socket);

/* Whether mapping m, made by seg_map_open_at from where (seg_map_where),
 * still maps what where names: SEG_MAP_CURRENT; SEG_MAP_GROWN (the node
 * grew the file: map again to reach the new tail); SEG_MAP_REPLACED (the
 * path names another file, or the socket belongs to a restarted node, or
 * is gone: never copy through m again). */
#define SEG_MAP_CURRENT 0
#define SEG_MAP_GROWN 1
#define SEG_MAP_REPLACED 2
int seg_map_check(const seg_map *m, const char *where);

/* Make the page-table entries of [offset, offset + length) of m present
 * (MADV_POPULATE_READ), so a copy out of it does not take a fault per page,
 * skipping the pages this mapping already made present: a reader that reads
 * the same ranges again (a loader getting a revision once more through the
 * store's cached mapping) pays the walk once per mapping, not per read. A
 * new mapping (a replaced or grown segment) starts with nothing present.
 * Only a hint: a failed populate is not an error (the copy then faults the
 * pages), and nothing is marked for it. Safe for disjoint or overlapping
 * ranges from several threads. Returns the bytes (whole pages) populated
 * by this call. */
uint64_t seg_map_prefault(const seg_map *m, uint64_t offset, uint64_t length);

/* Give back the page-table entries of the pages that [offset, offset +
 * length) of m touches (MADV_DONTNEED: the bytes stay in the segment) and
 * forget that they were present. */
void seg_map_release(const seg_map *m, uint64_t offset, uint64_t length);

/* Unmap, close a kept descriptor and zero *m. NULL or a closed map is a
 * no-op. */
void seg_map_close(seg_map *m);

/* Copy length bytes from the mapping at offset into dst (get) or from src
 * into the mapping (put). SMP_OK; SMP_ERANGE (outside the mapping, nothing
 * copied); SMP_ESTATE (put on a read-only or closed mapping). */
int seg_map_get(const seg_map *m, uint64_t offset, void *dst, uint64_t length);
int seg_map_put(seg_map *m, uint64_t offset, const void *src, uint64_t length);

#endif /* WM_SEG_MAP_H */
