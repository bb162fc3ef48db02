/* master.h -- the Store Master process: recovery, the loop, shutdown.
 *
 * master_main() is everything store_master does after its config parsed: it
 * loads the enabled plugins, recovers the state (newest snapshot, then the
 * OpLog after it), mounts the embedded node's segment, starts the RPC and
 * admin endpoints and runs the event loop until SIGINT or SIGTERM. The
 * pieces live in master_*.c and share master_internal.h. */
#ifndef HOST_MASTER_H
#define HOST_MASTER_H

#include "config.h"

/* The host capabilities this master offers plugins (HA standbys and state
 * handoff join as they are built). */
#define MASTER_HOST_CAPS                                                           \
    (SMP_HOST_CAP_GROUPS | SMP_HOST_CAP_COLD_TIER | SMP_HOST_CAP_DURABLE_OPLOG |     \
     SMP_HOST_CAP_RPC_DISPATCH | SMP_HOST_CAP_METRICS)

/* master_main's answer when an HA master must start over as a standby
 * (deposed, or its log was garbage-collected past it): store_master then
 * re-executes itself with the same arguments. */
#define MASTER_EXIT_RESTART 75

/* Run a master on cfg (borrowed for the call); restarted: this process
 * re-executed itself after MASTER_EXIT_RESTART (an HA master then waits
 * for etcd as long as it takes: it was a member of the cluster, etcd is
 * what went away). Returns the process exit status: 0 after a clean
 * shutdown, 1 when startup or recovery failed (the cause is printed on
 * stderr), MASTER_EXIT_RESTART. */
int master_main(const host_config *cfg, int restarted);

#endif /* HOST_MASTER_H */
