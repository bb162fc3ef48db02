/* node_cold_faults.h -- the cold files a node's readers found corrupt, kept
 * until the node has told its master.
 *
 * The data server reads cold files for clients (READ_COLD); when a file's
 * header or size turns out bad there, or a client whose read did not verify
 * has the node hash the file and it does not match (CHECK_COLD), the node
 * notes its name here and the
 * poll thread hands the names to the master with its next poll
 * (NodePollRequest.corrupt_cold), which drops the replica naming the file
 * so that the object is no longer offered from it (the weight plugin then
 * sees the revision degraded and repairs it from another replica, if one
 * exists). The LOAD task needs none of this: the master runs it and learns
 * its result directly.
 *
 * Thread-safe: noted on the data server's loop, taken on the poll thread.
 * Holds at most COLD_FAULTS_MAX names; a name already held is not added
 * twice, and beyond the bound a name is dropped (the next read of the file
 * notes it again). */
#ifndef HOST_NODE_COLD_FAULTS_H
#define HOST_NODE_COLD_FAULTS_H

#include <stddef.h>

#include "node_cold.h"

#define COLD_FAULTS_MAX 64

typedef struct cold_faults cold_faults;

/* A new, empty list; NULL when out of memory. */
cold_faults *cold_faults_new(void);

/* Free f (NULL: nothing). */
void cold_faults_free(cold_faults *f);

/* Note the bare cold name (as read from the wire, "<64 hex>.cold"). Returns
 * 1 when it was added, 0 when it was held already, the list is full, or f
 * or name is NULL or too long. */
int cold_faults_note(cold_faults *f, const char *name);

/* Move up to max held names into out (emptied from the list, oldest first);
 * returns how many. A caller that could not deliver them notes them again. */
size_t cold_faults_take(cold_faults *f, char out[][COLD_NAME_MAX], size_t max);

#endif
