/* weightctl_master.h -- weightctl's side of the master: the global options
 * that say where the master is, how to reach it and how to answer
 * (--master, --tenant, --token-file, --tls-*, --json, --bytes, --progress,
 * $WEIGHTCTL_MASTER, $WEIGHTCTL_TENANT), taken before or after the command,
 * the TLS settings every connection uses (weightctl_tls.c), the connection
 * of the plain commands, and `weightctl status`. The commands themselves are
 * main_weightctl.c's. */
#ifndef WM_WEIGHTCTL_MASTER_H
#define WM_WEIGHTCTL_MASTER_H

#include "kv_client.h"
#include "rpc_client.h"
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
    /* --tls-* as given (NULL: not given) */
    const char *tls_ca_flag;
    const char *tls_cert_flag;
    const char *tls_key_flag;
    const char *tls_server_name_flag;
    /* What wctl_tls_resolve made of them and $WM_TLS_*: with a CA, the
     * settings (tls.struct_size set) and the client context for node data
     * ports; without, plaintext (tls_ctx NULL, tls all zero). */
    weight_tls_options tls;
    struct ssl_ctx_st *tls_ctx;
} ctl;

/* Fill *x from the environment and the global options, which may stand
 * before or after the command (up to a "--", after which nothing is an
 * option): --master/-m ADDR, --tenant/-T T, --token-file FILE, --tls-ca
 * FILE, --tls-cert FILE, --tls-key FILE, --tls-server-name NAME, --json/-j,
 * --bytes, --progress auto|plain|none (also --opt=VALUE); the TLS flags
 * are only kept (main resolves them with wctl_tls_resolve before a command
 * runs). x->argv/x->argc get the
 * command and its remaining arguments (x->argv points into a copy owned by
 * the process). Returns 0, WCTL_HELP for --help/-h before any command,
 * WCTL_VERSION for --version, or WCTL_USAGE after printing one line that
 * names the flag and the value (an unknown option before the command, a
 * missing or bad value, a master list that does not parse). */
#define WCTL_HELP (-1)
#define WCTL_USAGE (-2)
#define WCTL_VERSION (-4)
int wctl_parse_global(ctl *x, int argc, char **argv);

/* -- weightctl_tls.c ------------------------------------------------------- */

/* Resolve x's TLS settings, before anything connects: the CA is --tls-ca,
 * else $WM_TLS_CA; the client certificate and key are --tls-cert and
 * --tls-key when either is given (then both must be), else $WM_TLS_CERT and
 * $WM_TLS_KEY; --tls-server-name is the name the master's certificate must
 * carry. Every file named is opened and read (a regular file holding a PEM
 * certificate; the key an unencrypted PEM private key of that certificate)
 * and x->tls / x->tls_ctx are set. No CA anywhere: plaintext (0, x->tls_ctx
 * NULL), and a client certificate or a server name without one is refused.
 * 0, or WCTL_USAGE after one line naming the flag (or variable), the file
 * and the cause. */
int wctl_tls_resolve(ctl *x);
/* The transport options of a connection to the master: timeout_ms and x's
 * TLS settings (the token stays the environment's: --token-file set it). */
rpcc_options wctl_rpc_options(const ctl *x, int timeout_ms);
/* Free what wctl_tls_resolve made. */
void wctl_tls_free(ctl *x);

/* Connect x->c to the master for the plain commands. 0, or -1 with the
 * cause on stderr. */
int wctl_connect_master(ctl *x);

/* Print s as a JSON string literal. */
void wctl_json_str(const char *s);

/* `weightctl status`: the answering master's role, nodes, segments,
 * capacity and use; of an HA cluster also its id and applied sequence, the
 * leader, and every master (id, role, endpoint, applied sequence, lag,
 * ready or why not) -- in --json the members master_id, applied_seq,
 * leader, endpoint and the array masters, left out without HA. Then each
 * node the master knows with its cold tier (weightctl_status_nodes.c). The
 * exit status. */
int wctl_cmd_status(ctl *x);

/* A cold tier with less than this percentage of its file system free is
 * "nearly full" in status. */
#define WCTL_COLD_NEARLY_FULL_PCT 5
/* 1 when node's cold tier is known and below WCTL_COLD_NEARLY_FULL_PCT free. */
int wctl_cold_nearly_full(const kvc_node *node);
/* status's lines of nodes[0, n): one per node with its cold tier, and a
 * warning line under each whose cold tier is nearly full. */
void wctl_status_nodes_text(const ctl *x, const kvc_node *nodes, size_t n);
/* status --json's member ,"node_list":[...] of nodes[0, n). */
void wctl_status_nodes_json(const kvc_node *nodes, size_t n);
/* `gate confirm NAME`: confirm a capability gate on the leader; 0 once it is. */
int wctl_cmd_gate_confirm(ctl *x, const char *name);

#endif /* WM_WEIGHTCTL_MASTER_H */
