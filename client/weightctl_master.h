/* weightctl_master.h -- weightctl's side of the master: the global options
 * that say where the master is and how to answer (--master, --tenant,
 * --json, $WEIGHTCTL_MASTER, $WEIGHTCTL_TENANT), the connection of the
 * plain commands, and `weightctl status`. The commands themselves are
 * main_weightctl.c's. */
#ifndef WM_WEIGHTCTL_MASTER_H
#define WM_WEIGHTCTL_MASTER_H

#include "kv_client.h"
#include "weightclient.h"

/* Must match listen.tcp of config/embedded.yaml (a test checks it). */
#define WEIGHTCTL_DEFAULT_MASTER "127.0.0.1:7600"

typedef struct ctl {
    const char *master;
    const char *tenant;
    int json;
    kvc *c;
    weight_store *ws;
} ctl;

/* Fill *x from the environment and the options before the command
 * (getopt_long, stopping at the first non-option). Returns the index of the
 * command in argv, WCTL_HELP for --help, WCTL_USAGE for a bad option
 * (getopt has said which), or WCTL_BAD_MASTER for a master list that does
 * not parse (said on stderr, naming the bad item). */
#define WCTL_HELP (-1)
#define WCTL_USAGE (-2)
#define WCTL_BAD_MASTER (-3)
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
