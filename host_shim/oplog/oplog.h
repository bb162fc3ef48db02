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
    int read_only;               /* a write failed: the log takes no more (until reopened) */
    uint64_t failed_seq;         /* the first record of the batch that failed (0: none) */
    char failed_why[320];        /* the backend's cause ("" when none was said) */
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

/* The first sequence the log still holds (records below it were truncated
 * away): replay from a snapshot at S needs first <= S + 1. 0 when the log
 * is empty or its backend does not tell (the etcd one). */
uint64_t oplog_first_seq(const oplog *log);

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
    uint64_t (*first_seq)(const oplog *log); /* NULL: the backend does not know */
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

/* -- the etcd backend (oplog_etcd.c) -------------------------------------- */

/* The records live in etcd under a cluster prefix: <prefix>log/<seq %020llu>
 * holds one record (its value verifies itself: sequence, type, encoding
 * version, length and an XXH64 checksum), <prefix>log_head the sequence of
 * the last durable record in decimal. A log is opened read-only (a standby);
 * it becomes the writer through oplog_etcd_promote, which checks an election
 * fence, and every batch it writes afterwards is one etcd transaction that
 * re-checks that fence and that log_head is still where this writer left it,
 * so a deposed leader cannot append. All calls below are made on the loop
 * thread and never wait for etcd, except oplog_etcd_open and oplog_replay,
 * which block the calling thread (call them before the loop serves
 * anything).
 *
 * Generic calls on this backend: oplog_replay works only while the log is
 * neither writable nor following nor promoting (else SMP_ESTATE), any number
 * of times; it pages through the records with reads pinned to one revision.
 * oplog_append fails with SMP_ENOTLEADER until a promote succeeded and after
 * oplog_etcd_demote, with SMP_EDURABILITY once fenced, and with SMP_ERANGE
 * for a payload over max_batch_bytes. oplog_last_seq / oplog_durable_seq of a
 * standby are the last record delivered by replay or follow (the head read
 * at open before that). oplog_truncate_before deletes <prefix>log/0.. up to
 * seq (exclusive, at most the last durable record + 1) in one fenced
 * DeleteRange on the backend's thread; SMP_ESTATE unless writable. In
 * oplog_stats, syncs and batches count successful write transactions and
 * bytes the record values written. oplog_close writes what is queued (under
 * the fence; while etcd does not answer that can take up to the fence's lease
 * TTL), runs the owed durable callbacks, a pending promote's callback with
 * SMP_ECANCELED, and never follow's on_stop. A following or promoting
 * log keeps the loop alive, like owed durable callbacks. */
typedef struct etcd_client etcd_client; /* etcd_client.h */

typedef struct oplog_etcd_options {
    etcd_client *client;          /* borrowed; outlives the log */
    const char *prefix;           /* cluster prefix, e.g. "/weight_mgmt/" (copied) */
    uint32_t max_batch_records;   /* records per txn, 1..127 (etcd's default
                                     --max-txn-ops is 128: the head put takes
                                     one); 0 = 127 */
    uint32_t max_batch_bytes;     /* payload bytes per txn, and the largest
                                     payload; 0 = 1 MiB (etcd's default request
                                     limit is 1.5 MiB) */
    oplog_log_fn log_line;        /* may be NULL (stderr); thread-safe */
    void *log_arg;
    /* Loop thread: a batch's fence compare failed (another leader), or a
     * batch's outcome stayed unknown for the lease TTL; the log is read-only
     * from then on. May be NULL. */
    void (*on_fenced)(void *arg, const char *why);
    void *fenced_arg;
    /* Added for the etcd backend's tests and operators (0 = default): */
    uint32_t unreachable_ms;      /* follow gives up with SMP_EIO once etcd
                                     stayed unreachable this long; 0 = 30000 */
    /* Loop thread, while following: etcd's log head went behind the last
     * record delivered (behind 1, why says so: etcd lost records -- wiped, or
     * restored from an older backup; following waits, reading the head again
     * every FOLLOW_BEHIND_POLL_MS), or etcd holds the log again up to that
     * record, with the same record there (behind 0, why ""; following goes on
     * from it). A record there that differs from the one delivered (a new
     * history) stops following with SMP_EPROTO instead. May be NULL. */
    void (*on_behind)(void *arg, int behind, const char *why);
    void *behind_arg;
} oplog_etcd_options;

/* Open the log read-only (a standby). Reads the head once (blocking, before
 * the loop runs) so oplog_last_seq / oplog_durable_seq report it, and starts
 * the backend's thread. Returns 0 and *out, or SMP_EINVAL (bad options),
 * SMP_EIO (etcd did not answer), SMP_EPROTO (a head that does not parse),
 * SMP_ENOMEM; err names the cause. */
int oplog_etcd_open(uv_loop_t *loop,
                    const oplog_etcd_options *o,
                    oplog **out,
                    char *err,
                    size_t errlen);

/* Standby tailing: deliver, on the loop thread and in sequence order, every
 * record with seq > after_seq as it becomes durable in etcd (a paged read
 * pinned to one revision, then a watch on <prefix>log/ from the next
 * revision, run on the backend's thread; records reach the loop through a
 * uv_async). fn returning < 0 stops following. on_stop (may be NULL) runs
 * once on the loop thread when following ends for any reason other than a
 * successful promote or close: SMP_ERANGE when records after after_seq are
 * gone (garbage-collected: re-bootstrap from a snapshot), SMP_EPROTO for a
 * record that does not verify or a gap in sequences, fn's code, SMP_EIO when
 * etcd stayed unreachable for unreachable_ms (transient errors are retried
 * with backoff until then). A head behind the records delivered (etcd lost
 * records) is not an end: following waits for it (on_behind in the
 * options). Returns 0, SMP_EINVAL, or SMP_ESTATE (already
 * following, promoting, writable or closing). */
int oplog_etcd_follow(oplog *log,
                      uint64_t after_seq,
                      oplog_replay_fn fn,
                      void *arg,
                      void (*on_stop)(void *arg, int status, const char *why),
                      void *stop_arg);

typedef struct oplog_etcd_fence {
    const void *leader_key;       /* the election's leader key (copied) ... */
    size_t leader_key_len;
    int64_t lease_id;             /* ... must be attached to this lease ... */
    int64_t create_revision;      /* ... and created at this revision (this term) */
    /* Added: the lease's TTL; a batch whose outcome stays unknown this long
     * (etcd unreachable) fails as fenced. 0 = 10000. */
    uint32_t lease_ttl_ms;
} oplog_etcd_fence;

/* Become the writer. Asynchronous: on the backend's thread one txn checks the
 * fence and reads the head; the records up to that head not yet delivered
 * are delivered on the loop thread (to the running follow's fn, or, when not
 * following, to fn from the record after the last one replay or follow
 * delivered -- the head read at open if none), then following stops, the
 * log becomes writable with the next sequence head + 1, and cb(arg, 0) runs
 * on the loop thread. cb(arg, status < 0): SMP_ENOTLEADER (the fence does not
 * hold; a log line names who holds the key), SMP_EIO (etcd unreachable) --
 * following, if it ran, goes on after both; SMP_ERANGE / SMP_EPROTO (records
 * to catch up on are gone or do not verify) or fn's code -- following ends
 * then, with on_stop too. Every later batch is one txn comparing the fence
 * and log_head's mod revision (see oplog_etcd.c). Returns 0 (cb will run
 * exactly once), or without calling cb: SMP_EINVAL (no fence key, no cb, no
 * fn while not following), SMP_ESTATE (writable, promoting or closing),
 * SMP_ENOMEM. */
int oplog_etcd_promote(oplog *log,
                       const oplog_etcd_fence *f,
                       oplog_replay_fn fn,     /* may be NULL while following */
                       void *fn_arg,
                       void (*cb)(void *arg, int status),
                       void *cb_arg);

/* Stop following (a master shutting down): no record is delivered and
 * on_stop does not run after this, and the log no longer keeps the loop
 * alive for it. No-op when not following. */
void oplog_etcd_stop_following(oplog *log);

/* Step down without being fenced (the election could not renew): appends
 * fail with SMP_ENOTLEADER from now on; records already queued are still
 * written under the fence (they succeed only while the lease holds) and
 * called back. NULL or a log of another backend: no-op. */
void oplog_etcd_demote(oplog *log);

/* The newest head the backend has seen (from open, replay, its own writes,
 * or following: what the thread read from etcd, which may be ahead of what
 * fn was given yet -- head minus oplog_last_seq is a standby's lag). 0 for
 * NULL. */
uint64_t oplog_etcd_head(const oplog *log);

#endif /* HOST_OPLOG_H */
