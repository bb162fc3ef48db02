/* oplog_etcd_internal.h -- what the three files of the etcd OpLog share:
 * the log's state (etcd_log, which embeds the OpLog pipeline of
 * oplog_pipe.h for its appends), the records it hands to the loop, and the
 * functions one file calls in another.
 * oplog_etcd.c is the backend itself (open, append, the loop side, the
 * worker thread, close, the public calls); oplog_etcd_write.c writes
 * batches under the fence and truncates; oplog_etcd_follow.c reads, follows
 * and promotes. Nothing outside these three includes it. */
#ifndef HOST_OPLOG_ETCD_INTERNAL_H
#define HOST_OPLOG_ETCD_INTERNAL_H

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "etcd_client.h"
#include "oplog.h"
#include "oplog_le.h"
#include "oplog_pipe.h"
#include "wm_errbuf.h"

#define VAL_MAGIC 0x31454F57u /* bytes 'W' 'O' 'E' '1' */
#define VAL_HDR OPLOG_REC_HDR /* the layout of oplog_pipe.h */
#define VAL_SUM OPLOG_REC_SUM
#define VAL_FRAME OPLOG_REC_FRAME
#define SEQ_DIGITS 20
#define MAX_TXN_RECORDS 127u
#define DEFAULT_BATCH_BYTES (1u << 20)
#define PAGE_RECORDS 1000
#define FOLLOW_POLL_MS 100u
#define FOLLOW_QUEUE_MAX 4096u
#define BACKOFF_MIN_MS 20u
#define BACKOFF_MAX_MS 1000u
#define DEFAULT_TTL_MS 10000u
#define DEFAULT_UNREACHABLE_MS 30000u
#define FOLLOW_BEHIND_POLL_MS 1000u /* a head behind what was delivered is read again this often */
#define FOLLOW_BEHIND 1 /* follow_sync: the head is behind what was delivered (err says so) */

/* One record read from etcd on its way to a replay callback on the loop. */
typedef struct frec {
    struct frec *next;
    uint64_t sess;     /* the follow or promote session it belongs to */
    oplog_replay_fn fn;
    void *arg;
    oplog_record rec;  /* payload points at data */
    uint8_t data[];
} frec;

typedef struct frec_list {
    frec *head;
    frec *tail;
} frec_list;

typedef struct etcd_log {
    struct oplog base;
    oplog_pipe pipe;        /* appends; an entry's rec is the record value;
                               pipe.hold while promoting or following */
    etcd_client *client;
    oplog_etcd_options opt; /* defaults applied; opt.prefix points at prefix */
    char *prefix;
    char *head_key;         /* <prefix>log_head */
    size_t head_key_len;
    char *log_begin;        /* <prefix>log/ */
    size_t log_begin_len;
    char *log_end;          /* <prefix>log0: the end of the record range */
    size_t log_end_len;
    size_t key_len;         /* of one record key */

    /* Loop thread only. */
    uint64_t last_seq;      /* writer: last assigned; standby: applied_seq
                               (pipe.durable_seq: the writer's last called
                               back with status 0; a standby's applied_seq) */
    uint64_t applied_seq;   /* last record delivered by replay or follow */
    uint64_t head_seen;
    int writable;
    int demoted;
    int following;
    oplog_replay_fn follow_fn;
    void *follow_arg;
    void (*on_stop)(void *arg, int status, const char *why);
    void *stop_arg;
    uint64_t sess;          /* the current follow or promote session */
    uint64_t next_sess;
    uint64_t dead_sess;     /* its fn failed: its records are dropped */
    int dead_code;
    int promote_pending;
    void (*promote_cb)(void *arg, int status);
    void *promote_arg;
    frec_list ready_recs;   /* taken from recs, being delivered */

    /* Shared between the loop and the thread, under pipe.mu (pipe.failed:
     * read-only, fenced or a fatal write error). */
    frec_list recs;         /* records for the loop */
    size_t n_recs;
    int follow_req;         /* start following: */
    uint64_t follow_after;
    uint64_t follow_req_sess;
    oplog_replay_fn follow_req_fn;
    void *follow_req_arg;
    uint64_t cancel_sess;   /* stop following this session; 0: none */
    int promote_req;        /* promote with: */
    uint8_t *fence_key;     /* owned copy of the leader key */
    oplog_etcd_fence fence; /* leader_key points at fence_key */
    uint64_t promote_from;
    uint64_t promote_sess;
    oplog_replay_fn promote_fn;
    void *promote_fn_arg;
    uint64_t t_head;        /* the newest head the thread saw (read or
                               received), maybe not delivered yet */
    int stop_evt;           /* following ended (thread side): */
    int stop_status;
    uint64_t stop_sess;
    char stop_why[384];
    int prom_evt;           /* the promote's outcome: */
    int prom_status;
    int prom_follow_ended;
    uint64_t prom_sess;
    uint64_t prom_head;
    int fenced_evt;
    char fenced_why[512];
    int behind_evt;         /* the head went behind what was delivered, or holds it again: */
    int behind_state;       /* 1 behind, 0 holds it again */
    uint64_t behind_sess;
    char behind_why[384];

    /* The thread only (after open). */
    int fence_ok;           /* promoted: head_mod and written are ours */
    int64_t head_mod;       /* log_head's mod revision as we wrote or read it */
    uint64_t written;       /* the head as we wrote or read it */
    int64_t gc_revision;    /* etcd revision of the last truncation, compacted at the next */
    etcd_watch *watch;
    int f_active;
    uint64_t f_next;        /* the next sequence the session needs */
    uint64_t f_sess;
    oplog_replay_fn f_fn;
    void *f_arg;
    uint64_t f_down_since_ns; /* etcd unreachable since; 0: it answers */
    int f_behind;           /* the head was behind f_next - 1: waiting for etcd to hold it */
    char f_behind_why[384]; /* what was posted about it last */
    uint64_t f_last_sum;    /* XXH64 of the record f_next - 1 as delivered (0: none yet) */
    uint32_t f_backoff_ms;
    char *keys;             /* max_batch_records record keys */
    etcd_op *ops;           /* max_batch_records + 1 */
} etcd_log;

/* What oel_scan hands each verified record to; a negative return stops it. */
typedef int (*scan_fn)(etcd_log *el, void *arg, const oplog_record *rec);

/* -- calls across the three files; each is described where it is defined ----- */

/* oplog_etcd.c: helpers */
uint64_t oel_now_ns(void);
void oel_log_line(const etcd_log *el, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void oel_printable(char *dst, size_t dstlen, const void *src, size_t len);
void oel_make_key(const etcd_log *el, uint64_t seq, char *buf);
uint64_t oel_key_seq(const etcd_log *el, const uint8_t *key, size_t len);
int oel_parse_head(const uint8_t *v, size_t len, uint64_t *out);
int oel_verify_value(uint64_t seq, const uint8_t *v, size_t len, oplog_record *rec, char *err,
                     size_t errlen);
void oel_timed_wait_locked(etcd_log *el, uint32_t ms);
void oel_nap(etcd_log *el, uint32_t ms, int wake);

/* oplog_etcd_follow.c: reading, following, promoting */
int oel_read_head(etcd_log *el, int64_t rev, uint64_t *head, int64_t *mod, int64_t *at_rev,
                  char *err, size_t errlen);
int oel_scan(etcd_log *el, uint64_t from, uint64_t upto, int64_t rev, scan_fn fn, void *arg,
             int *gone, uint64_t *first, char *err, size_t errlen);
void oel_close_watch(etcd_log *el);
void oel_follow_step(etcd_log *el);
void oel_do_promote(etcd_log *el);

/* oplog_etcd_write.c: writing under the fence */
void oel_fenced_reason(etcd_log *el, const etcd_txn_result *res, char *why, size_t len);
int oel_write_batch(void *be, oplog_entry_list *batch, size_t n, uint64_t *bytes);
void oel_truncate_records(etcd_log *el, uint64_t seq);

#endif /* HOST_OPLOG_ETCD_INTERNAL_H */
