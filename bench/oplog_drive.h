/* oplog_drive.h -- the appenders bench_oplog and bench_etcd_oplog put on an
 * OpLog: C clients, each with one append of a fixed payload outstanding,
 * issuing the next from its durable callback until a deadline. Header-only
 * (static inline), like bench_clock.h. */
#ifndef BENCH_OPLOG_DRIVE_H
#define BENCH_OPLOG_DRIVE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <uv.h>

#include "oplog.h"

#define OPLOG_DRIVE_PAYLOAD 256

typedef struct oplog_drive {
    oplog *log;
    const char *who;       /* the program, for its error lines */
    uint64_t deadline_ns;  /* uv_hrtime() past which no append is issued */
    uint64_t done;         /* appends made durable */
    int outstanding;       /* clients still appending */
    int failed;            /* an append was refused or failed */
    uint8_t payload[OPLOG_DRIVE_PAYLOAD];
} oplog_drive;

static void oplog_drive_durable(void *arg, int status, uint64_t seq);

/* One append for a client; a refused one stops the client and the run. */
static inline void oplog_drive_issue(oplog_drive *d)
{
    int rc = oplog_append(d->log, 1, 1, d->payload, sizeof(d->payload), oplog_drive_durable, d,
                          NULL);
    if (rc < 0) {
        fprintf(stderr, "%s: append failed: %s\n", d->who, smp_strerror(rc));
        d->failed = 1;
        d->outstanding--;
    }
}

static void oplog_drive_durable(void *arg, int status, uint64_t seq)
{
    oplog_drive *d = arg;
    (void)seq;
    if (status != 0) {
        d->failed = 1;
        d->outstanding--;
        return;
    }
    d->done++;
    if (uv_hrtime() < d->deadline_ns && !d->failed)
        oplog_drive_issue(d);
    else
        d->outstanding--;
}

/* Drive log (open on loop, ready for appends) with clients appenders for
 * seconds; returns the nanoseconds until the last one stopped, with
 * d->done and d->failed set. */
static inline uint64_t oplog_drive_run(oplog_drive *d, oplog *log, const char *who,
                                       uv_loop_t *loop, int clients, double seconds)
{
    uint64_t t0 = uv_hrtime();
    d->log = log;
    d->who = who;
    d->done = 0;
    d->failed = 0;
    memset(d->payload, 0x5c, sizeof(d->payload));
    d->deadline_ns = t0 + (uint64_t)(seconds * 1e9);
    d->outstanding = clients;
    for (int i = 0; i < clients && !d->failed; i++) oplog_drive_issue(d);
    while (d->outstanding > 0) uv_run(loop, UV_RUN_ONCE);
    return uv_hrtime() - t0;
}

#endif
