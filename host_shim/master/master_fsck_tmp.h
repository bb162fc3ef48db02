/* master_fsck_tmp.h -- fsck's report of a node's stale temporary cold files.
 *
 * A node writes a cold file through a temporary ("<name>.cold.<16 hex>.tmp")
 * that it renames once verified; a crash mid-write leaves the temporary.
 * A node deletes those older than a minute when it starts; after that only
 * fsck --repair does: a SCAN's first page names the ones it found (as many
 * as fit, all counted) and, asked to (NodeTask.remove_stale_tmp), deletes
 * them. This keeps what a node's answer said and puts it in the node's
 * FsckNode (stale_temporaries and the counts after it). */
#ifndef HOST_MASTER_FSCK_TMP_H
#define HOST_MASTER_FSCK_TMP_H

#include <stddef.h>
#include <stdint.h>

typedef struct master_fsck_tmp {
    char *name;
    uint64_t bytes;
    uint64_t age_s;
    int removed;
    char *error;          /* its deletion failed: why ("" else) */
} master_fsck_tmp;

typedef struct master_fsck_tmps {
    int checked;          /* the node reported its temporaries (a node from before did not) */
    master_fsck_tmp *v;   /* the named ones */
    size_t n;
    uint64_t total, bytes, removed;
} master_fsck_tmps;

struct TaskResult;
struct FsckNode;
/* Take the temporaries a SCAN page reported into t (nothing when the page
 * reported none: not the first, or a node from before). SMP_OK, SMP_ENOMEM. */
int master_fsck_tmps_take(master_fsck_tmps *t, const struct TaskResult *res);
/* Fill o's temporaries from t: o->stale_temporaries is allocated (freed by
 * master_fsck_tmps_report_free), its strings borrowed from t. */
void master_fsck_tmps_report(const master_fsck_tmps *t, struct FsckNode *o);
void master_fsck_tmps_report_free(struct FsckNode *o);
void master_fsck_tmps_free(master_fsck_tmps *t);

#endif
