/* node_ranges.h -- the table of object ranges a node's segment holds, kept
 * beside the segment file so that it survives exactly when the bytes do.
 *
 * A node does not decide what lives where in its segment (the master
 * allocates ranges), but after a restart it must tell the master which
 * memory replicas it still holds, with their checksums (the inventory of
 * every (re)registration). This table is that knowledge: the node adds a
 * range once the replica in it is complete (the master's confirmation of a
 * put, or a cold replica loaded into memory) and removes it when the replica
 * is released. It lives in "<dir>/<id>.ranges" next to "<id>.seg": both in
 * tmpfs by default, so a node restart keeps both and a host reboot loses
 * both together. The table records the size of its segment; a table that
 * belongs to a segment of another size (or to none) is discarded on open.
 *
 * File format: a 16-byte header ("WMRANGE1", u64 segment size), then
 * records, appended: u32 body length, body, u64 XXH64 of the body. A body is
 * u8 op then, for ADD (1): u64 offset, u64 length, 32B SHA-256, u16 key
 * length, key; for DEL (2): u64 offset. All integers big-endian. Open replays
 * the records, cuts a torn or corrupt tail, and rewrites the file compactly
 * (temporary file and rename) when dead records dominate. Appends are plain
 * write(2) calls: on tmpfs the page cache is the storage and a process crash
 * loses nothing that write() returned.
 *
 * Not thread-safe: one owner thread (the node's loop). */
#ifndef HOST_NODE_RANGES_H
#define HOST_NODE_RANGES_H

#include <stddef.h>
#include <stdint.h>

#include "node_segment.h"
#include "store_plugin.h"

#define NODE_RANGES_SUFFIX ".ranges"
#define NODE_RANGES_KEY_MAX 1024

typedef struct node_ranges node_ranges;

/* One range as the table holds it; key borrowed until the table changes. */
typedef struct node_range {
    uint64_t offset;
    uint64_t length;
    uint8_t sha256[32];
    const char *key;
} node_range;

typedef struct node_ranges_open_info {
    uint64_t loaded;     /* ranges found */
    int discarded;       /* 1: a table for another segment size was dropped */
    int cut_tail;        /* 1: a torn or corrupt tail was cut */
} node_ranges_open_info;

/* Open (or create) the table of seg: "<dir of seg>/<id of seg>.ranges".
 * info (may be NULL) says what was found. SMP_OK, SMP_EIO, SMP_ENOMEM, with
 * err naming the file and the cause. */
int node_ranges_open(const seg_segment *seg,
                     node_ranges **out,
                     node_ranges_open_info *info,
                     char *err,
                     size_t errlen);

/* Close the table (the file stays). NULL is a no-op. */
void node_ranges_close(node_ranges *r);

/* Close the table and remove its file (the segment is being destroyed). */
void node_ranges_destroy(node_ranges *r);

/* Record that [offset, offset + length) holds a complete replica of key with
 * content sha256. SMP_OK; SMP_EINVAL (empty or too long key); SMP_ERANGE
 * (outside the segment); SMP_EEXIST (overlaps a recorded range: remove it
 * first); SMP_EIO (the append failed: the table is unchanged); SMP_ENOMEM. */
int node_ranges_add(node_ranges *r,
                    const char *key,
                    uint64_t offset,
                    uint64_t length,
                    const uint8_t sha256[32]);

/* Forget the range starting at offset. SMP_OK, SMP_ENOTFOUND, SMP_EIO. */
int node_ranges_remove(node_ranges *r, uint64_t offset);

/* The range starting at offset (SMP_OK) or SMP_ENOTFOUND. */
int node_ranges_get(const node_ranges *r, uint64_t offset, node_range *out);

size_t node_ranges_count(const node_ranges *r);

/* Visit every range in offset order; a non-zero return stops the visit and
 * is returned. */
int node_ranges_visit(const node_ranges *r,
                      int (*fn)(void *arg, const node_range *range),
                      void *arg);

/* Recompute the SHA-256 of every range from the segment's bytes and call
 * fn(arg, range, matches) for each (matches 0: the bytes no longer hash to
 * the recorded checksum -- the replica must not be reported). A non-zero
 * return from fn stops the check and is returned; SMP_ENOMEM. Reads every
 * byte of every range: for a deep inventory, not every heartbeat. */
int node_ranges_verify(const node_ranges *r,
                       const seg_segment *seg,
                       int (*fn)(void *arg, const node_range *range, int matches),
                       void *arg);

#endif /* HOST_NODE_RANGES_H */
