/* redis_box.h -- a redis-server of a benchmark's own, and redis-benchmark
 * run against it: the baseline a user would reach for, measured in the same
 * run as the project's figure. Debian's redis-server and redis-tools (make
 * bench installs them). */
#ifndef BENCH_REDIS_BOX_H
#define BENCH_REDIS_BOX_H

#include <stddef.h>
#include <sys/types.h>

typedef struct redis_box {
    char dir[512];
    char sock[600];
    pid_t pid;
    int durable;
} redis_box;

/* Start redis-server under a new directory in parent, on a Unix socket
 * only (no TCP port). durable 1: AOF with appendfsync always (Redis syncs
 * what one event-loop round took before it answers: its group commit);
 * 0: in memory only. 0, or -1 (nothing left running). */
int redis_start(redis_box *r, const char *parent, int durable);

/* Fill the server with n keys, key:0 .. key:N-1, each valued value:N (DEBUG
 * POPULATE). 0 or -1. */
int redis_populate(const redis_box *r, long n);

/* Remove every key (FLUSHALL). 0 or -1. */
int redis_flush(const redis_box *r);

/* The same with values of value_bytes each (DEBUG POPULATE's size: the
 * value padded with zero bytes, written to the RDB as they are, since the
 * server runs with rdbcompression off). 0 or -1. */
int redis_populate_sized(const redis_box *r, long n, long value_bytes);

/* Write an RDB (SAVE), restart the server on it, and return the seconds it
 * took to load it as the server reports ("DB loaded from disk"), or -1.
 * back > 0: between the stop and the start, that many bytes of the
 * machine's free memory are backed (bench_back_memory, guest_memory.h). */
double redis_reload_seconds(redis_box *r, size_t back);

/* The size of the server's RDB file (dump.rdb) in bytes, -1 if none. */
double redis_rdb_bytes(const redis_box *r);

/* Stop the server (SIGTERM) and remove its directory. */
void redis_stop(redis_box *r);

/* Requests per second of `redis-benchmark -t test` (test: "set", "get")
 * with `clients` connections, `requests` requests on random keys of a
 * 100M key space, no pipelining; -1 when it failed. */
double redis_bench(const redis_box *r, const char *test, int clients, long requests);

/* Run argv to its end with its standard output into out (cap bytes, NUL
 * terminated); stderr is discarded. Returns the exit status or -1. */
int bench_run_capture(char *const argv[], char *out, size_t cap);

#endif
