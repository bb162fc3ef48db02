/* oplog.h -- the OpLog: durable, ordered records of every metadata mutation.
 *
 * The master's loop thread appends a record, keeps the mutation invisible, and
 * publishes it from the durable callback (durable before visible). At start it
 * replays the records after the newest snapshot. This header is backend
 * neutral: a backend (file today, etcd later) provides an open function that
 * returns an `oplog` whose generic calls below dispatch through the backend's
 * ops table, so callers never name the backend after opening it.
 *
 * Threading. Every call is made on the loop thread that owns the uv loop given
 * to the backend's open function; durable callbacks run on that thread too,
 * never from inside oplog_append (except from oplog_close, see there). The log
 * keeps the loop alive only while durable callbacks are owed, so uv_run
 * (UV_RUN_DEFAULT) returns once every appended record has been called back
 * when nothing else is active.
 *
 * Errors are negative SMP_E* codes (store_plugin.h). When oplog_append fails
 * its callback is never invoked; when it succeeds the callback runs exactly
 * once. */
#ifndef HOST_OPLOG_H
#define HOST_OPLOG_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "store_plugin.h"

typedef struct oplog oplog;

/* One record as replay delivers it. payload is borrowed for the callback. */
typedef struct oplog_record {
    uint64_t seq;
    uint16_t type;
    uint16_t encver;
    const uint8_t *payload;
    uint32_t len;
} oplog_record;

/* Durable completion: status 0 once the record with sequence seq is durable,
 * SMP_EDURABILITY when it never will be. Runs on the loop thread, in sequence
 * order across all records of one oplog. Same shape as smp_durable_cb. */
typedef void (*oplog_durable_fn)(void *arg, int status, uint64_t seq);

/* Replay callback: 0 to continue; a negative code stops replay and is returned
 * by oplog_replay. */
typedef int (*oplog_replay_fn)(void *arg, const oplog_record *rec);

/* Counters for metrics; monotonic since open. */
typedef struct oplog_stats {
    uint64_t appends;            /* records accepted by oplog_append */
    uint64_t bytes;              /* record bytes made durable, framing included */
    uint64_t syncs;              /* successful data syncs (fdatasync) */
    uint64_t batches;            /* group commits written */
    uint64_t max_batch;          /* most records in one group commit */
    uint64_t durable_lat_ns_sum; /* append -> durable callback, summed (ns) */
    uint64_t durable_count;      /* callbacks delivered with status 0 */
    uint64_t failed;             /* callbacks delivered with SMP_EDURABILITY */
} oplog_stats;

/* -- generic calls -------------------------------------------------------- */

/* Deliver, in sequence order, every durable record with seq > after_seq to fn.
 * Call it after open and before the first oplog_append (afterwards it fails
 * with SMP_ESTATE); it runs synchronously on the calling thread. A negative
 * return of fn stops replay and is returned as is. Records the log no longer
 * holds (it starts after after_seq + 1) or a log that ends before after_seq
 * fail with SMP_EPROTO, as does a record that no longer verifies; err (may be
 * NULL) then names the cause. Returns 0 when everything was delivered. */
int oplog_replay(oplog *log,
                 uint64_t after_seq,
                 oplog_replay_fn fn,
                 void *arg,
                 char *err,
                 size_t errlen);

/* Append one record. Assigns the next sequence (*out_seq, may be NULL), copies
 * payload (borrowed for the call; may be NULL when len is 0) and queues it;
 * cb (may be NULL) runs later on the loop thread with status 0 once the record
 * is durable, or SMP_EDURABILITY when it cannot be made durable. Callbacks run
 * in sequence order. Returns 0, or without ever calling cb: SMP_EINVAL (bad
 * arguments), SMP_ERANGE (payload larger than the backend's record limit),
 * SMP_EDURABILITY (the log failed earlier and is read-only), SMP_ESTATE (the
 * log is closing), SMP_ENOMEM. */
int oplog_append(oplog *log,
                 uint16_t type,
                 uint16_t encver,
                 const void *payload,
                 size_t len,
                 oplog_durable_fn cb,
                 void *arg,
                 uint64_t *out_seq);  /* OUT, may be NULL */

/* The last sequence assigned (appended, maybe not yet durable); after open,
 * the last sequence found in the log (0 for an empty log). */
uint64_t oplog_last_seq(const oplog *log);

/* The highest sequence whose durable callback has run with status 0, or the
 * last sequence found at open. Everything up to it is durable. */
uint64_t oplog_durable_seq(const oplog *log);

/* Drop the storage of records entirely below seq -- called once a snapshot
 * including seq - 1 is durable. Backends drop whole units (segments) only, so
 * records below seq may survive; replay skips them by after_seq. The work may
 * happen later, off the loop thread; a failure to drop is logged, not fatal.
 * Returns 0, SMP_EDURABILITY when the log is read-only, or SMP_ESTATE from a
 * callback run by oplog_close. Must not overlap a running oplog_replay. */
int oplog_truncate_before(oplog *log, uint64_t seq);

/* Copy the counters into *out. */
void oplog_stats_get(const oplog *log, oplog_stats *out);

/* Flush and close. Every record appended so far is written and synced; the
 * callbacks still owed run from inside this call, in order (status 0 when
 * durable), and an oplog_append from such a callback fails with SMP_ESTATE.
 * Then the backend's thread is stopped and its uv handles are closed: the
 * memory is released by a close callback, so the caller must run the loop
 * (uv_run) once more before uv_loop_close. log is invalid after the call.
 * NULL is a no-op. */
void oplog_close(oplog *log);

/* -- backend interface ---------------------------------------------------- */

/* What a backend implements; the generic calls above check their arguments
 * and dispatch here. A backend's handle struct starts with `struct oplog`. */
typedef struct oplog_ops {
    const char *name; /* "file", "etcd" */
    int (*replay)(oplog *log, uint64_t after_seq, oplog_replay_fn fn, void *arg,
                  char *err, size_t errlen);
    int (*append)(oplog *log, uint16_t type, uint16_t encver,
                  const void *payload, size_t len,
                  oplog_durable_fn cb, void *arg, uint64_t *out_seq);
    uint64_t (*last_seq)(const oplog *log);
    uint64_t (*durable_seq)(const oplog *log);
    int (*truncate_before)(oplog *log, uint64_t seq);
    void (*stats)(const oplog *log, oplog_stats *out);
    void (*close)(oplog *log);
} oplog_ops;

struct oplog {
    const oplog_ops *ops;
};

/* -- the file backend (oplog_file.c) -------------------------------------- */

/* One log line (no trailing newline), e.g. that a torn tail was cut. Called
 * on the thread that calls oplog_file_open, or on the writer thread (a failed
 * sync, a segment that could not be dropped): it must be thread-safe. */
typedef void (*oplog_log_fn)(void *arg, const char *line);

typedef struct oplog_file_options {
    const char *dir;            /* segment directory; created if missing */
    uint64_t segment_bytes;     /* roll to a new segment past this; 0: 64 MiB */
    uint32_t max_batch_records; /* records per group commit at most; 0: 1024 */
    uint32_t max_record_bytes;  /* payload limit; 0: 16 MiB */
    int preallocate;            /* give each segment segment_bytes when it is made */
    oplog_log_fn log_fn;        /* NULL: lines go to stderr */
    void *log_arg;
    /* TEST ONLY: 0 = off; N > 0 makes the Nth data sync (1-based) and every
     * later one fail with EIO, since a real disk cannot fail on demand. */
    uint32_t test_fail_sync_at;
} oplog_file_options;

/* Open (or create) the file OpLog in opt->dir (its parent must exist) and
 * recover it: segments are read in order (zeros from a record boundary to the
 * end of a segment are unwritten space, not damage), a torn tail of the last
 * segment is cut (ftruncate + fsync, and a log line), and the writer thread is
 * started.
 * Corruption that is not a torn tail (a bad record followed by valid data, or
 * in a segment that is not the last), a sequence gap, or an unreadable file
 * refuses the open with SMP_EPROTO / SMP_EIO and a message in err naming the
 * file, offset and sequence; nothing is modified then. Options are copied (dir included).
 * Returns 0 and *out, or a negative code (and *out untouched); on failure no
 * uv handle is left behind. Loop thread only. */
int oplog_file_open(uv_loop_t *loop,
                    const oplog_file_options *opt,
                    oplog **out,
                    char *err,
                    size_t errlen);

#endif /* HOST_OPLOG_H */
