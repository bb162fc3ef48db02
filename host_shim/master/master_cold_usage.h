/* master_cold_usage.h -- the nodes' cold tiers as an operator sees them.
 *
 * Each node reports how full its cold directory is (the file system's size
 * and free bytes, statvfs) and how many of its cold writes failed since it
 * started, by cause, with every registration and poll (node_rpc.proto's
 * ColdTierUsage). The master keeps the last report of each node and shows
 * it per node in /metrics (store_node_cold_capacity_bytes,
 * store_node_cold_free_bytes, store_node_cold_write_failures_total{cause})
 * and in ADMIN_STATUS (StatusResponse.node_status). A node that sends no
 * report (one from before it) is unknown there -- no series, cold_reported
 * false -- never 0 bytes; a node without a cold directory has none. */
#ifndef HOST_MASTER_COLD_USAGE_H
#define HOST_MASTER_COLD_USAGE_H

#include <stddef.h>
#include <stdint.h>

#include "master_internal.h"

#define MASTER_COLD_ERROR_MAX 256

/* A node's cold tier as it last reported it. */
typedef struct master_cold_usage {
    int reported;                 /* 0: the node sends no report (unknown) */
    uint64_t total_bytes;
    uint64_t free_bytes;          /* what the node may still write */
    uint64_t used_bytes;
    char error[MASTER_COLD_ERROR_MAX]; /* the node could not read the sizes: why ("" when it could) */
    uint64_t failures_no_space;   /* cold writes that failed for lack of space, since the node started */
    uint64_t failures_other;      /* ... failed otherwise */
} master_cold_usage;

struct ColdTierUsage;
/* Take a registration's or poll's report u into *dst; u NULL (a node from
 * before the report) makes it unknown. */
void master_cold_usage_take(master_cold_usage *dst, const struct ColdTierUsage *u);

/* Below this share of free bytes a node's cold tier is nearly full: the
 * master logs the crossing (master_cold_usage_change) and weightctl status
 * warns (its WCTL_COLD_NEARLY_FULL_PCT is the same figure). */
#define MASTER_COLD_NEARLY_FULL_PCT 5

/* 1 when u's sizes are known and fewer than MASTER_COLD_NEARLY_FULL_PCT of
 * its bytes are free. */
int master_cold_usage_nearly_full(const master_cold_usage *u);

/* What an operator should read in the master's log about the change from
 * report before to report after of one node: the cold tier became nearly
 * full, or has room again, and cold writes that failed for lack of space
 * since the report before (a node that restarted counts from 0 again:
 * a count below the last is the node's own). Writes the sentence (without
 * the node's name, e.g. "cold tier nearly full: ...") into line[cap] and
 * returns 1, or returns 0 with nothing to say (the first report, an
 * unknown one, no change worth a line). */
int master_cold_usage_change(const master_cold_usage *before, const master_cold_usage *after,
                             char *line, size_t cap);

/* Register the per-node families in m->metrics (master_metrics_register). */
int master_cold_usage_register(master *m);
/* Set every node's series from its last report (master_metrics_refresh):
 * the gauges of a node whose sizes are known, the counter of a node that
 * reports; none for a node that does not, or has no cold directory. */
void master_cold_usage_refresh(master *m);

/* StatusResponse.node_status: every node the master knows, with its cold
 * tier. Fills a view (*out, freed with master_node_status_free) and returns
 * how many; the pointers to hand out are master_node_status_ptrs(*out), their
 * strings borrowed from the node registry until it changes. */
typedef struct master_node_status_view master_node_status_view;
struct NodeStatus;
size_t master_node_status_fill(master *m, master_node_status_view **out);
struct NodeStatus **master_node_status_ptrs(master_node_status_view *v);
void master_node_status_free(master_node_status_view *v);

#endif
