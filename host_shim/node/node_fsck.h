/* node_fsck.h -- the node's side of fsck (master_fsck.c): the SCAN and
 * SCRUB tasks.
 *
 * A SCAN answers with every .cold file of the node's directory (corrupt ones
 * with key "" and no checksum) and the non-zero 64-byte blocks of the
 * segment ranges the master says nothing occupies; a SCRUB zeroes ranges the
 * master holds for it. The calls run on the node's task thread, one at a
 * time; a node_fsck borrows the segment and cold tier it was made with. */
#ifndef HOST_NODE_FSCK_H
#define HOST_NODE_FSCK_H

#include <stddef.h>

#include "node_cold.h"
#include "node_segment.h"

/* The smallest SCAN page a node serves: one cold file's entry (a key of
 * COLD_KEY_MAX bytes, its name, length and SHA-256) with room to spare. */
#define NODE_FSCK_PAGE_MIN 4096u

typedef struct node_fsck node_fsck;
struct NodeTask;
struct TaskResult;

/* A new fsck runner over seg and cold (cold_dir names it in errors; all
 * three borrowed, they must outlive it). SMP_OK or SMP_ENOMEM. */
int node_fsck_new(seg_segment *seg, cold_tier *cold, const char *cold_dir, node_fsck **out);
/* Free it (NULL: no-op). */
void node_fsck_free(node_fsck *f);
/* Run the SCAN task t into r (the caller frees r): one page of files (see
 * node_rpc.proto: after, page_bytes, more; none with segment_only) and the
 * non-zero blocks of t's ranges; with page_bytes 0 every file at once.
 * SMP_OK, or a negative SMP_E* with err saying why (a range outside the
 * segment, an unreadable directory or range, a page too small for one file
 * or for the blocks, no memory). */
int node_fsck_scan(node_fsck *f, const struct NodeTask *t, struct TaskResult *r, char *err,
                   size_t errlen);
/* Zero each range of the SCRUB task t. SMP_OK, or SMP_ERANGE (a range
 * outside the segment; err says which). */
int node_fsck_scrub(node_fsck *f, const struct NodeTask *t, char *err, size_t errlen);

#endif
