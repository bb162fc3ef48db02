/* master_fuzz.h -- what the fuzz targets that drive a real store_master
 * (fuzz_rpc.c, fuzz_auth.c) share: stopping the run with the master's log
 * when it died or stopped answering, and a connection to its Unix socket. */
#ifndef WM_MASTER_FUZZ_H
#define WM_MASTER_FUZZ_H

#include "harness.h"

/* Print "TARGET: what" and m's log to stderr, then abort (driver.c keeps
 * the input). */
void fzm_die(const hx_master *m, const char *target, const char *what) __attribute__((noreturn));

/* Abort (fzm_die) when m's process exited or was killed; m->pid is then 0. */
void fzm_check_alive(hx_master *m, const char *target);

/* Abort unless m answers a status request on a new connection (hx_client:
 * with WEIGHT_TOKEN when set). */
void fzm_check_serving(const hx_master *m, const char *target);

/* A new connection to m's Unix socket (aborts when it cannot be made). */
int fzm_connect(const hx_master *m, const char *target);

#endif /* WM_MASTER_FUZZ_H */
