/* log_limit.h -- at most a few log lines a window for what strangers can
 * cause.
 *
 * Some log lines are caused by whoever reaches a port: a refused token, a
 * plaintext client on a TLS port, a TLS 1.2 client on the HTTPS admin
 * port. The operator needs the first ones (they name the client), but a
 * line per refusal would let anyone fill the master's log. A log_limit lets
 * `burst` lines through per window of `window_ms`; the others are counted,
 * and the count is handed back when the next window opens (and at a stop,
 * log_limit_flush) for one line that sums them up. Not locked: a caller on
 * several threads holds its own lock around it. */
#ifndef HOST_LOG_LIMIT_H
#define HOST_LOG_LIMIT_H

#include <stdint.h>

typedef struct log_limit {
    unsigned burst;      /* lines a window (set by the caller) */
    uint64_t window_ms;  /* its length (set by the caller) */
    int open;            /* a window began (at began_ms) */
    uint64_t began_ms;
    unsigned logged;     /* lines let through in it */
    uint64_t left_out;   /* lines counted since the last summary */
} log_limit;

/* One line would be written at now_ms (a monotonic clock): 1 when it may
 * be, 0 when it is counted instead. *summary gets the lines left out
 * before a window that opens now, which the caller says first (0: none). */
int log_limit_admit(log_limit *l, uint64_t now_ms, uint64_t *summary);

/* The lines left out and not summed up yet (then 0): for a last line at a
 * stop. */
uint64_t log_limit_flush(log_limit *l);

#endif /* HOST_LOG_LIMIT_H */
