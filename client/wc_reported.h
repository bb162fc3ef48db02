/* wc_reported.h -- the memory replicas this process reported corrupt.
 *
 * A reader that meets a corrupt memory replica reports it to the master
 * (wc_report_corrupt, wc_lease_keeper_report_corrupt), which has the node
 * hash it and drops it when the node agrees. A second read of the same
 * bytes -- Python's zero-copy load refuses the object in place (reported by
 * the view), then copies it through weight_get, whose tickets still name
 * the replica -- may report it after the master dropped it: the master
 * refuses that report (no such replica any more), yet the replica was
 * reported. The get's message says so when either report got through:
 * every accepted report is noted here (the last WC_REPORTED_MAX, process
 * wide, under a lock), and wc_reported_seen answers whether one was. */
#ifndef WC_REPORTED_H
#define WC_REPORTED_H

#include <stdint.h>

#define WC_REPORTED_MAX 16

/* Note that the master accepted a report of key's memory replica at
 * node/segment/offset (the oldest note is forgotten beyond
 * WC_REPORTED_MAX). A key too long to note is not noted. */
void wc_reported_note(const char *key, const char *node, const char *segment, uint64_t offset);

/* 1 when that replica's report was noted (wc_reported_note), else 0. */
int wc_reported_seen(const char *key, const char *node, const char *segment, uint64_t offset);

#endif /* WC_REPORTED_H */
