/* read_lease.h -- who holds the read leases of the master's objects.
 *
 * A replica lookup (objects.get_replicas) protects the object it names from
 * removal for MASTER_READ_LEASE_MS: the reader is about to copy bytes out of
 * the replicas it was given. This table records those leases per holder --
 * the RPC connection the lookup came on -- and per key, counted per lookup,
 * so that a reader can give back what it took (objects.release_read_leases)
 * and a connection that closes gives back everything it still held, instead
 * of every object staying unremovable until its last lookup's lease
 * expires. One holder never ends another's lease: a release names keys, and
 * only the caller's own count on each key goes down.
 *
 * The table is volatile, as the leases are: nothing is logged or
 * snapshotted, a restarted or failed-over master starts with none. The
 * object store keeps the effective end of each object's leases
 * (obj_object.lease_expiry, what a removal checks); the caller writes back
 * what rlease_release / rlease_drop_holder report. A lease taken by a
 * client that never releases (an older client) simply expires.
 *
 * Memory: a holder's list of keys is compacted (keys whose lease of this
 * holder expired are forgotten) whenever it would grow, so a long-lived
 * connection that never releases holds at most about twice its live leases.
 * Loop thread only. */
#ifndef READ_LEASE_H
#define READ_LEASE_H

#include <stddef.h>
#include <stdint.h>

typedef struct rlease_table rlease_table;

/* Counters for the master's metrics. */
typedef struct rlease_stats {
    uint64_t taken;          /* lookups that took or extended a lease */
    uint64_t released;       /* leases ended by their holder's release */
    uint64_t closed;         /* leases ended because their connection closed */
    uint64_t refused;        /* releases refused: the caller held no lease on the key */
} rlease_stats;

/* A new, empty table; NULL when out of memory. */
rlease_table *rlease_create(void);

/* Free the table and everything in it. NULL is a no-op. */
void rlease_destroy(rlease_table *t);

/* Record one lookup of key by holder at now: the holder's count on key goes
 * up by one and its lease ends no earlier than now + lease_ms. SMP_OK,
 * SMP_EINVAL for lease_ms 0, or SMP_ENOMEM with the table unchanged. */
int rlease_take(rlease_table *t, uint64_t holder, const char *key, uint64_t now, uint64_t lease_ms);

/* 1 when holder holds an unexpired lease on key at now. */
int rlease_held(const rlease_table *t, uint64_t holder, const char *key, uint64_t now);

/* Give back one lookup's lease of holder on key. SMP_OK with *ends (may be
 * NULL) the end of the key's last unexpired lease of anyone after it (0:
 * none); SMP_ENOTFOUND when holder has no unexpired lease on key (another
 * holder's leases are untouched, nothing changes). */
int rlease_release(rlease_table *t, uint64_t holder, const char *key, uint64_t now, uint64_t *ends);

/* End every lease of holder (its connection closed). For each key whose
 * leases changed, ended(arg, key, ends) tells the new end of its last
 * unexpired lease (0: none). Returns the number of leases ended. */
size_t rlease_drop_holder(rlease_table *t,
                          uint64_t holder,
                          uint64_t now,
                          void (*ended)(void *arg, const char *key, uint64_t ends),
                          void *arg);

/* The end of the last unexpired lease on key at now (0: none). */
uint64_t rlease_ends(const rlease_table *t, const char *key, uint64_t now);

/* Unexpired leases at now, counted per holder and key (a holder's several
 * lookups of one key count once). Walks the table: for metrics. */
uint64_t rlease_count(const rlease_table *t, uint64_t now);

void rlease_get_stats(const rlease_table *t, rlease_stats *out);

/* Keys noted for holder (what its close walks; some may have ended). */
size_t rlease_holder_noted(const rlease_table *t, uint64_t holder);

#endif /* READ_LEASE_H */
