/* node_segment.h -- a node's memory segment: one file in a directory, mapped.
 *
 * A segment is the memory a node contributes to the store: a file named
 * <dir>/<id>.seg (by default under /dev/shm, so the bytes live in memory)
 * mapped shared into the node. Because the bytes are in a file, they outlive
 * the node process: a node that restarts reopens the same file and comes back
 * with its data, and a client on the same host can map the file itself and
 * copy straight from or into it (client/seg_map.h), with no socket and no
 * staging buffer. The node holds an exclusive flock(2) on the file while it
 * has the segment open, so two nodes never serve the same segment.
 *
 * A segment only checks bounds; which range belongs to which object is the
 * master's business (obj_store.h). Nothing here syncs the mapping: on tmpfs
 * there is nothing to sync, and durability is the cold tier's (node_cold.h).
 * A segment is used by one thread at a time for its life (open, close), but
 * seg_read / seg_write / seg_ptr only touch the mapping and may run on any
 * thread for disjoint ranges. */
#ifndef HOST_NODE_SEGMENT_H
#define HOST_NODE_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "store_plugin.h"

#define SEG_ID_MAX 256             /* bytes of a segment id (OBJ_NAME_MAX) */
#define SEG_DEFAULT_DIR "/dev/shm/weight_mgmt"
#define SEG_FILE_SUFFIX ".seg"

typedef struct seg_segment seg_segment;

typedef struct seg_options {
    const char *dir;     /* directory of the file; NULL: SEG_DEFAULT_DIR */
    const char *id;      /* segment id: 1..SEG_ID_MAX of [A-Za-z0-9._-], not "." first */
    uint64_t size;       /* bytes; a multiple of the page size is not required */
    int preallocate;     /* reserve the bytes now (posix_fallocate) when creating,
                            so a full tmpfs fails here, not with SIGBUS later */
    int prefault;        /* touch every page of the mapping in a background thread
                            (seg_prefaulted), so a write received into it later
                            does not pay the first touch of each page */
} seg_options;

/* SMP_OK when id is a valid segment id (safe as a file name), else SMP_EINVAL. */
int seg_validate_id(const char *id);

/* Write "<dir>/<id>.seg" into buf. SMP_EINVAL for a bad id, SMP_ERANGE when
 * it does not fit in cap. */
int seg_path_for(const char *dir, const char *id, char *buf, size_t cap);

/* The pages a file under dir gets, by the mount that holds it (the longest
 * mount point above it in mounts, the text of /proc/self/mounts; NULL:
 * read that file): into out, "tmpfs, 4 KiB pages" for a tmpfs without a
 * huge= option or with huge=never, "tmpfs, huge=always" (or the option it
 * has), or the file system's type. Returns 1 for a tmpfs of 4 KiB pages,
 * where every process that maps a segment faults each 4 KiB page of it
 * once; 0 for any other; SMP_ENOTFOUND when no mount is found ("?" in
 * out). A relative dir is taken from the working directory; a mount point
 * the kernel escapes (a space in it) is not matched. */
int seg_mount_pages(const char *mounts, const char *dir, char *out, size_t cap);

/* Create the segment file, or reopen it when it exists. The directory is
 * created (one level) when missing. A reopened file keeps its bytes
 * (seg_reopened() says 1); a new file is zero-filled (seg_reopened() says
 * 0). An existing empty file (a create interrupted before it was sized)
 * counts as new. An existing file smaller than size is grown in place to
 * size, its bytes kept (seg_grown_from() says from what); one larger than
 * size is opened whole (seg_size() is its size, seg_requested_size() the
 * size asked for) until seg_shrink. Returns SMP_OK and a new segment in
 * *out, or: SMP_EINVAL (bad id, size 0, or beyond the address space; or the
 * file is another user's or readable by others: planted in a shared
 * directory), SMP_EBUSY (another process holds the segment open),
 * SMP_ENOSPC (the preallocation, or a growth's, did not fit: err names how
 * many bytes; a file being grown keeps its old size), SMP_EIO (open, size
 * or map failed), SMP_ENOMEM. err (may be NULL) names the file and the
 * cause on failure. */
int seg_open(const seg_options *opt, seg_segment **out, char *err, size_t errlen);

/* A new read-write descriptor of the segment's file (close-on-exec), for a
 * co-located process (node_local.h): its own open file description, so it
 * carries none of the node's flock -- a client holding it never keeps a
 * restarted node out of its segment. The file is opened by path again and
 * checked to be the very file the segment maps. The descriptor, or
 * SMP_EIO / SMP_ENOTFOUND (the path now names another file). */
int seg_share_fd(const seg_segment *s);

/* Unmap and close; the file and its bytes stay. NULL is a no-op. */
void seg_close(seg_segment *s);

/* Unmap, close and unlink the file: the bytes are gone. NULL is a no-op.
 * Returns SMP_OK or SMP_EIO when the unlink failed (the segment is freed
 * either way). */
int seg_destroy(seg_segment *s);

const char *seg_id(const seg_segment *s);
const char *seg_path(const seg_segment *s);
/* The bytes served: every range is checked against it. */
uint64_t seg_size(const seg_segment *s);
/* The size seg_open was asked for (below seg_size() until seg_shrink when
 * the file was larger). */
uint64_t seg_requested_size(const seg_segment *s);
/* The file's size before seg_open grew it, or 0 when it did not. */
uint64_t seg_grown_from(const seg_segment *s);
/* Serve only the first size bytes (size <= seg_size()) and cut the file
 * there: for a node whose master agreed that nothing lies past size. May
 * run while other threads check ranges (the size is atomic); the mapping
 * keeps its length until seg_close. SMP_OK, SMP_EINVAL, SMP_EIO (the cut
 * failed; the smaller size is served anyway). */
int seg_shrink(seg_segment *s, uint64_t size, char *err, size_t errlen);
/* 1 when seg_open found the file with its bytes (a node restart), else 0. */
int seg_reopened(const seg_segment *s);

/* The bytes of the mapping the background pre-fault (seg_options.prefault)
 * has touched so far: seg_size() once it is done, 0 without it. The touch is
 * a locked add of zero per page through the node's own mapping, so no byte
 * changes, whoever writes the segment meanwhile. On this kind of guest the
 * first touch of a page through a mapping costs the hypervisor far more than
 * the copy into it (bench/JOURNAL.md); a node is long-lived, so it pays that
 * once, off the receive path. It also turns the file's reserved holes into
 * zeroed data (seg_next_data then reports the whole segment). */
uint64_t seg_prefaulted(const seg_segment *s);

/* The first run of the file at or after from that may hold data: [*start,
 * *end) (SEEK_DATA / SEEK_HOLE; what lies in a hole reads as zeros, so a
 * scan for non-zero bytes may skip it). Where the file system cannot tell,
 * the rest of the segment. SMP_OK, or SMP_ENOTFOUND when only holes are
 * left. */
int seg_next_data(const seg_segment *s, uint64_t from, uint64_t *start, uint64_t *end);

/* Copy length bytes at offset with pread(2) rather than through the
 * mapping: on tmpfs, reading reserved pages never written leaves them holes
 * (a fault through the mapping would not). SMP_OK, SMP_ERANGE, SMP_EIO. */
int seg_pread(const seg_segment *s, uint64_t offset, void *dst, uint64_t length);

/* SMP_OK when [offset, offset + length) lies inside the segment (length 0 is
 * fine at any offset <= size), else SMP_ERANGE. Overflow-safe. */
int seg_check_range(const seg_segment *s, uint64_t offset, uint64_t length);

/* The mapping at offset for length bytes, or NULL when out of range. The
 * pointer stays valid until seg_close / seg_destroy. */
uint8_t *seg_ptr(seg_segment *s, uint64_t offset, uint64_t length);

/* Copy length bytes out of / into the segment. SMP_OK or SMP_ERANGE (nothing
 * copied). */
int seg_read(const seg_segment *s, uint64_t offset, void *dst, uint64_t length);
int seg_write(seg_segment *s, uint64_t offset, const void *src, uint64_t length);

/* SHA-256 of a range (the checksum a node reports for a memory replica).
 * SMP_OK, SMP_ERANGE, SMP_ENOMEM (OpenSSL could not allocate). */
int seg_sha256(const seg_segment *s, uint64_t offset, uint64_t length, uint8_t out[32]);

#endif /* HOST_NODE_SEGMENT_H */
