/* weightctl_master.h -- weightctl's side of the master: the global options
 * that say where the master is and how to answer (--master, --tenant,
 * --json, --bytes, --progress, $WEIGHTCTL_MASTER, $WEIGHTCTL_TENANT), taken
 * before or after the command, the connection of the
 * plain commands, and `weightctl status`. The commands themselves are
 * main_weightctl.c's. */
#ifndef WM_WEIGHTCTL_MASTER_H
#define WM_WEIGHTCTL_MASTER_H

#include "kv_client.h"
#include "weightclient.h"

/* Must match listen.tcp of config/embedded.yaml (a test checks it). */
#define WEIGHTCTL_DEFAULT_MASTER "127.0.0.1:7600"

/* --progress: a bar on a terminal (auto), one line per 5 % (plain), none. */
typedef enum wctl_progress_mode {
    WCTL_PROGRESS_AUTO = 0,
    WCTL_PROGRESS_PLAIN = 1,
    WCTL_PROGRESS_NONE = 2
} wctl_progress_mode;

typedef struct ctl {
    const char *master;
    const char *tenant;
    int json;
    int bytes;                  /* --bytes: raw byte counts, not KiB/MiB/... */
    wctl_progress_mode progress;
    int argc;                   /* the command and its own arguments */
    char **argv;                /* (argv[0] is the command), globals taken out */
    kvc *c;
    weight_store *ws;
} ctl;

/* Fill *x from the environment and the global options, which may stand
 * before or after the command (up to a "--", after which nothing is an
 * option): --master/-m ADDR, --tenant/-T T, --json/-j, --bytes,
 * --progress auto|plain|none (also --opt=VALUE). x->argv/x->argc get the
 * command and its remaining arguments (x->argv points into a copy owned by
 * the process). Returns 0, WCTL_HELP for --help/-h before any command,
 * WCTL_VERSION for --version, or WCTL_USAGE after printing one line that
 * names the flag and the value (an unknown option before the command, a
 * missing or bad value, a master list that does not parse). */
#define WCTL_HELP (-1)
#define WCTL_USAGE (-2)
#define WCTL_VERSION (-4)
int wctl_parse_global(ctl *x, int argc, char **argv);

/* Connect x->c to the master for the plain commands. 0, or -1 with the
 * cause on stderr. */
int wctl_connect_master(ctl *x);

/* Print s as a JSON string literal. */
void wctl_json_str(const char *s);

/* `weightctl status`: the answering master's role, nodes, segments,
 * capacity and use; of an HA cluster also its id and applied sequence, the
 * leader, and every master (id, role, endpoint, applied sequence, lag,
 * ready or why not) -- in --json the members master_id, applied_seq,
 * leader, endpoint and the array masters, left out without HA. The exit
 * status. */
int wctl_cmd_status(ctl *x);
/* `gate confirm NAME`: confirm a capability gate on the leader; 0 once it is. */
int wctl_cmd_gate_confirm(ctl *x, const char *name);

#endif /* WM_WEIGHTCTL_MASTER_H */
