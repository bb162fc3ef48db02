/* oplog_pipe.h -- the pipeline both OpLog backends share: records appended on
 * the loop thread, made durable by one worker thread in batches, their
 * completions delivered back on the loop thread in sequence order.
 *
 * The loop stages its appends and hands them over to the worker once per turn
 * of the event loop (a uv_check after the I/O callbacks, a uv_prepare for
 * appends made elsewhere): one lock per turn instead of one per record. The
 * worker takes what queued while its previous batch was being made durable
 * (up to max_batch_records and max_batch_bytes of payload), calls the
 * backend's write function without the lock, and posts the batch back through
 * a uv_async_t, where the durable callbacks run in order. A failed batch makes
 * the log read-only: it and everything queued after it fail with
 * SMP_EDURABILITY, later hand-overs fail the same way (through the async
 * handle, never from inside an append), and once a failure was delivered every
 * append is refused (failed_seen). The async handle keeps the loop alive only
 * while callbacks are owed or the backend holds it (hold).
 *
 * What stays the backend's: the record's magic and checksum, how a
 * batch is made durable (segments and fdatasync; an etcd transaction under a
 * fence), the worker's loop around oplog_pipe_write_batch_locked (other
 * requests it serves), truncation, recovery and replay. A backend embeds an
 * oplog_pipe in its handle and is called back with conf.be. Nothing outside
 * host_shim/oplog includes this header. */
#ifndef HOST_OPLOG_PIPE_H
#define HOST_OPLOG_PIPE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "oplog.h"

/* One appended record on its way to durability and back to its callback.
 * The worker only reads the fields before rec (it writes status only when a
 * batch fails, and the backend's write function may fill bytes of rec), so
 * the loop finds them still in its cache when the callback is due. */
typedef struct oplog_entry {
    struct oplog_entry *next;
    uint64_t seq;
    uint64_t t_append_ns;
    oplog_durable_fn cb;
    void *arg;
    int status;
    size_t rec_len;  /* OPLOG_REC_FRAME + payload length */
    uint8_t rec[];   /* the record as the backend writes it */
} oplog_entry;

typedef struct oplog_entry_list {
    oplog_entry *head;
    oplog_entry *tail;
} oplog_entry_list;

/* Worker thread, mu not held: make the n entries of batch durable, in order.
 * Returns 0 and *bytes (what the stats count as written), or a negative code:
 * the pipe then fails the batch and everything queued, and the log is
 * read-only. */
typedef int (*oplog_pipe_write_fn)(void *be, oplog_entry_list *batch, size_t n,
                                   uint64_t *bytes);

typedef struct oplog_pipe_conf {
    void *be;                   /* handed to the functions below */
    uint32_t max_batch_records; /* records per batch, >= 1 */
    uint32_t max_batch_bytes;   /* payload bytes per batch (a first record always
                                   goes); 0: no limit */
    oplog_pipe_write_fn write;
    /* Loop thread, when the worker posted something: deliver it. NULL:
     * oplog_pipe_deliver. A backend that posts more than completions (the
     * etcd follower's records) takes the completions with
     * oplog_pipe_take_done_locked and runs them with oplog_pipe_run_ready. */
    void (*deliver)(void *be);
    /* Loop thread, once the pipe's uv handles are all closed and its mutex
     * and condition destroyed: free the backend. */
    void (*release)(void *be);
} oplog_pipe_conf;

typedef struct oplog_pipe {
    oplog_pipe_conf conf;
    uv_async_t async;
    uv_check_t after_io;    /* hand over what the I/O callbacks appended */
    uv_prepare_t before_io; /* and what anything else appended */
    int handles_open;       /* of the three; conf.release runs when none is */
    pthread_t thread;

    /* Loop thread only. */
    int closing;
    int failed_seen;        /* a callback reported a failure: refuse appends */
    int hold;               /* the backend wants the loop kept alive too */
    int ref_held;           /* the async handle keeps the loop alive */
    uint64_t durable_seq;   /* last delivered with status 0 (backends may set
                               it too: open, replay, a standby) */
    oplog_entry_list ready; /* taken from done, callbacks being delivered */
    oplog_entry_list staged;/* appended this turn, not yet handed over */
    size_t n_staged;
    uint64_t turn_ns;       /* when the first staged record was appended:
                               durable latency counts from there */
    uint64_t owed;          /* callbacks not yet run */
    uint64_t n_appends;
    uint64_t lat_sum_ns;
    uint64_t n_durable;
    uint64_t n_failed;

    /* Shared between the loop and the worker, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* CLOCK_MONOTONIC */
    oplog_entry_list queue; /* handed over, not yet taken by the worker */
    size_t n_queued;
    oplog_entry_list done;  /* made durable or failed, callbacks owed */
    int stop;
    int failed;             /* read-only after a failed batch (or as the
                               backend decides, under mu) */
    uint64_t failed_seq;    /* the first record of the batch that failed (0: none) */
    char failed_why[320];   /* why, as the backend said it ("": it did not) */
    uint64_t trunc_req;     /* the backend's truncation request; 0: none */
    uint64_t n_bytes;
    uint64_t n_syncs;
    uint64_t n_batches;
    uint64_t max_batch;
} oplog_pipe;

/* -- entry lists (no locking; the caller owns the lists) -------------------- */

void oplog_entry_list_push(oplog_entry_list *l, oplog_entry *e);
/* Move all of src to the end of dst; src is left empty. */
void oplog_entry_list_splice(oplog_entry_list *dst, oplog_entry_list *src);
/* The first entry, unlinked, or NULL. */
oplog_entry *oplog_entry_list_pop(oplog_entry_list *l);

/* -- life cycle ------------------------------------------------------------------ */

/* Set p up with *conf (copied) and create its mutex and condition variable;
 * no thread and no uv handle yet. Returns 0, or SMP_ENOMEM with err naming
 * what failed (nothing to undo then). */
int oplog_pipe_init(oplog_pipe *p, const oplog_pipe_conf *conf, char *err, size_t errlen);

/* Destroy the mutex and condition of a pipe whose handles were never
 * started (an open failing early). */
void oplog_pipe_destroy_locks(oplog_pipe *p);

/* Set stop, wake the worker (the backend starts it as p->thread) and join
 * it; its loop drains what is queued
 * before it returns. Any thread but the worker. */
void oplog_pipe_stop_thread(oplog_pipe *p);

/* Create and start the uv handles on loop: the async handle (unreferenced
 * until callbacks are owed) and the check/prepare pair that hands appends
 * over (never referenced). Returns 0, or SMP_EIO with err set and no handle
 * left behind. Loop thread. */
int oplog_pipe_start_handles(oplog_pipe *p, uv_loop_t *loop, char *err, size_t errlen);

/* Close the three handles; once the last close callback ran, the mutex and
 * condition are destroyed and conf.release(conf.be) frees the backend, so the
 * loop must run once more. Loop thread. */
void oplog_pipe_close_handles(oplog_pipe *p);

/* Begin closing: set closing (appends fail from now on), hand the staged
 * records over, then stop and join the worker, which makes them durable
 * first. The caller delivers what was posted and closes the handles. */
void oplog_pipe_stop(oplog_pipe *p);

/* -- the loop side --------------------------------------------------------------- */

/* The record layout both backends write (little-endian; they differ in the
 * magic and in when the checksum is filled in):
 *   u32 magic | u64 seq | u16 type | u16 encver | u32 len | payload[len] |
 *   u64 XXH64(everything before, seed 0) */
#define OPLOG_REC_HDR 20u
#define OPLOG_REC_SUM 8u
#define OPLOG_REC_FRAME (OPLOG_REC_HDR + OPLOG_REC_SUM)

/* A new entry for seq holding a record in that layout, stamped with the
 * turn's append time: the header and the payload (len bytes, borrowed; may
 * be NULL when len is 0) are filled in, the checksum is left to the backend.
 * Stage it with oplog_pipe_stage at once. NULL when out of memory (nothing
 * counted then). */
oplog_entry *oplog_pipe_record_new(oplog_pipe *p,
                                   uint32_t magic,
                                   uint64_t seq,
                                   uint16_t type,
                                   uint16_t encver,
                                   const void *payload,
                                   size_t len,
                                   oplog_durable_fn cb,
                                   void *arg);

/* Queue e for the next hand-over and count it as appended and owed. */
void oplog_pipe_stage(oplog_pipe *p, oplog_entry *e);

/* Hand the records staged since the last hand-over to the worker (the check
 * and prepare handles do this every turn). When the log failed meanwhile
 * they fail too, and their callbacks come through the async handle, never
 * from inside here. */
void oplog_pipe_hand_over(oplog_pipe *p);

/* Reference the async handle while callbacks are owed or p->hold is set,
 * and never once closing; the backend calls it after changing hold. */
void oplog_pipe_update_ref(oplog_pipe *p);

/* Move the posted completions to the loop's ready list (mu held). */
void oplog_pipe_take_done_locked(oplog_pipe *p);

/* Run the ready callbacks in sequence order, counting latency, durable and
 * failed ones and setting durable_seq / failed_seen. Re-entrant: a callback
 * that closes the log makes the nested call continue from the same list, so
 * order holds; the pipe stays allocated until the close callbacks. */
void oplog_pipe_run_ready(oplog_pipe *p);

/* Take the posted completions and run them (the default conf.deliver). */
void oplog_pipe_deliver(oplog_pipe *p);

/* Ask the worker to truncate below seq (kept when larger than a pending
 * request). Returns 0, or SMP_EDURABILITY when the log is read-only. */
int oplog_pipe_request_truncate(oplog_pipe *p, uint64_t seq);

/* Copy the counters into *out. */
void oplog_pipe_stats(oplog_pipe *p, oplog_stats *out);

/* -- the worker side ------------------------------------------------------------- */

/* Worker thread, mu held and the queue not empty: take one batch, have
 * conf.write make it durable with mu released, count it, and post it to the
 * loop; on failure the log turns read-only and the batch and everything
 * queued fail with SMP_EDURABILITY. A log already read-only fails the whole
 * queue without writing. Returns with mu held. */
void oplog_pipe_write_batch_locked(oplog_pipe *p);

#endif /* HOST_OPLOG_PIPE_H */
