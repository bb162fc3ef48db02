/* master_fuzz.h -- what the fuzz targets that drive a real store_master
 * (fuzz_rpc.c, fuzz_auth.c) share: stopping the run with the master's log
 * when it died or stopped answering, and a connection to its Unix socket. */
#ifndef WM_MASTER_FUZZ_H
#define WM_MASTER_FUZZ_H

#include <stddef.h>
#include <stdint.h>

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

/* One rule of auth.RULES: a method and the role it needs (fzm_role_of). */
typedef struct fzm_rule {
    uint32_t service, method;
    int role;
} fzm_rule;

#define FZM_ROLE_UNKNOWN 9

/* The role a rule or HELLO answer names: SMP_ROLE_NONE for "anyone",
 * SMP_ROLE_READER .. SMP_ROLE_ADMIN, FZM_ROLE_UNKNOWN for anything else. */
int fzm_role_of(const char *name);

/* The rules m enforces, asked over its Unix socket with admin_token: at
 * most cap into out; their count. Aborts (fzm_die) when the call fails. */
size_t fzm_load_rules(const hx_master *m, const char *target, const char *admin_token,
                      fzm_rule *out, size_t cap);

#endif /* WM_MASTER_FUZZ_H */
