/* node_cold_watch.h -- how full the node's cold tier is, kept fresh by a
 * thread of its own.
 *
 * The node tells the master with every poll how full its cold directory's
 * file system is (ColdTierUsage). statvfs of a DFS mount that hangs would
 * hang the poll with it, and a node that stops polling is taken for dead:
 * so the sizes are read here, once at the start and then every
 * COLD_WATCH_MS on this module's thread, and a poll takes the last reading
 * without touching the file system. A reading that hangs leaves the last
 * one in place (its age says how old it is). */
#ifndef HOST_NODE_COLD_WATCH_H
#define HOST_NODE_COLD_WATCH_H

#include <stdint.h>

#include "node_cold.h"

#define COLD_WATCH_MS 1000

typedef struct cold_watch cold_watch;

/* Read ct's usage once (cold_usage_get) and start the thread that reads it
 * again every COLD_WATCH_MS; ct is borrowed and must outlive the watch.
 * SMP_OK, SMP_ENOMEM (no thread: nothing runs). */
int cold_watch_start(cold_tier *ct, cold_watch **out);
/* The last reading into *out; *age_ms (may be NULL): how long ago it was
 * taken. Any thread; never blocks on the file system. */
void cold_watch_get(cold_watch *w, cold_usage *out, uint64_t *age_ms);
/* Stop the thread (waiting for a reading under way) and free w. NULL ok. */
void cold_watch_stop(cold_watch *w);

#endif
