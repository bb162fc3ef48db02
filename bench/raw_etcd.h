/* raw_etcd.h -- etcd written to directly from C threads, the baseline the
 * etcd OpLog and an HA master are put next to (bench_etcd_oplog,
 * bench_master_mutations etcd): what a backend without batching would get. */
#ifndef RAW_ETCD_H
#define RAW_ETCD_H

#include "etcd_client.h"

#define RAW_ETCD_PAYLOAD 256
#define RAW_ETCD_MAX_THREADS 64

/* Durable writes per second from `threads` threads for `seconds`, each
 * thread to keys of its own under /bench/: with txn 0 one etcd_put of a
 * 256-byte value per write; with txn 1 one transaction of the OpLog's shape
 * per write (a 284-byte record key and the thread's head key, comparing the
 * head's mod revision; run numbers the runs so each starts on fresh heads).
 * A negative value when a write failed (the cause is printed). */
double raw_etcd_rate(etcd_client *cli, int threads, double seconds, int txn, int run);

#endif /* RAW_ETCD_H */
