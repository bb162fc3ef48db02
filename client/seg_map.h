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
 * ticket here; the file's permissions are the boundary (the segment file is
 * 0600, owned by the node's user). Only processes the node's operator runs
 * on that host can use it; everyone else goes through the TCP data server.
 *
 * A mapping is created and closed by one thread; seg_map_get / seg_map_put
 * may run on any thread for disjoint ranges. The mapping never changes size.
 * A node grows its file in place (node.segment_bytes raised): this mapping
 * stays valid for its range, and the callers that cache mappings map the
 * file again when it is larger than theirs. A node cuts its file only past
 * every occupied range, so no range a client is given lies there. */
#ifndef WM_SEG_MAP_H
#define WM_SEG_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "store_plugin.h"

typedef struct seg_map {
    uint8_t *base;  /* NULL when closed */
    uint64_t size;
    int writable;
    uint64_t dev, ino; /* the file mapped (a node that restarts on a new
                          segment file leaves this mapping on the old one) */
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

/* Unmap and zero *m. NULL or a closed map is a no-op. */
void seg_map_close(seg_map *m);

/* Copy length bytes from the mapping at offset into dst (get) or from src
 * into the mapping (put). SMP_OK; SMP_ERANGE (outside the mapping, nothing
 * copied); SMP_ESTATE (put on a read-only or closed mapping). */
int seg_map_get(const seg_map *m, uint64_t offset, void *dst, uint64_t length);
int seg_map_put(seg_map *m, uint64_t offset, const void *src, uint64_t length);

#endif /* WM_SEG_MAP_H */
