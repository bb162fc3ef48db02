/* raw_commit.h -- a bare group-commit server, the baseline that
 * bench_master_mutations puts next to the master.
 *
 * It speaks the master's framing (4-byte length + RpcRequest / RpcResponse)
 * on a Unix socket and does the least any server that answers only durable
 * mutations must do: read a request, append it to a log file, fdatasync what
 * one writer pass took (group commit, the master's scheme), answer each
 * request of the pass. No object table, no validation, no libuv: what it
 * reaches on a machine is the ceiling of that design there, so the master's
 * figure can be read against it. */
#ifndef RAW_COMMIT_H
#define RAW_COMMIT_H

#include <stdint.h>
#include <sys/types.h>

/* Counters the server process updates in memory shared with its parent. */
typedef struct rawc_counters {
    volatile uint64_t fsyncs;
    volatile uint64_t records;
} rawc_counters;

typedef struct rawc_server {
    char dir[512];    /* its own directory: socket and log file */
    char socket[600];
    pid_t pid;
    rawc_counters *counters; /* shared with the server process */
} rawc_server;

/* The argument that makes a program that calls rawc_serve_main serve. */
#define RAWC_SERVE_ARG "--raw-commit-serve"

/* Start the server in a child process with a directory of its own under
 * parent; returns once it accepts connections. 0, or -1 (message on
 * stderr; call rawc_stop anyway). wrap NULL: the child serves at once and
 * keeps the counters. Otherwise the child runs `wrap... <this program>
 * RAWC_SERVE_ARG dir` (valgrind, say), so the calling program must pass
 * such arguments to rawc_serve_dir; the counters then stay 0. */
int rawc_start(rawc_server *s, const char *parent, const char *const *wrap);

/* Serve in this process from directory dir until killed, updating counters
 * (NULL: none). Returns -1 when it cannot start (message on stderr). */
int rawc_serve_dir(const char *dir, rawc_counters *counters);

/* Stop the server (SIGTERM) and remove its directory. */
void rawc_stop(rawc_server *s);

#endif /* RAW_COMMIT_H */
