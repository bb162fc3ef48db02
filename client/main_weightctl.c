/* main_weightctl.c -- weightctl, the operator's and user's command line.
 *
 * The weight commands go through libweightclient (weightclient.h, linked as
 * libweightclient.so) and nothing else: `put` publishes safetensors files
 * as a revision (whole tensors, or with --tp one file per tensor-parallel
 * rank, shards joined by the same --split / --replicate rules `get` uses),
 * `ls` pages through revisions, `info` / `exists` / `size`
 * query one, `get` loads this rank's shards (resharded from whatever layout
 * was written) and writes them as one safetensors file, `policy`, `migrate`,
 * `op` and `rm` manage it. An identity on the command line is
 * NAMESPACE/RESOURCE/REVISION@GENERATION (the tenant comes from --tenant),
 * components percent-encoded where they hold '/', '@' or '%'; without
 * "@GENERATION" the newest live generation of that revision is taken. The
 * plain object store commands (`kv put KEY FILE`, `kv get KEY FILE`,
 * `kv ls [PREFIX]`, `kv rm KEY`) and `status` talk to the master's object
 * service directly. The master address defaults to the one
 * config/embedded.yaml listens on, so `make run` and then `weightctl status`
 * need no flags; --master or $WEIGHTCTL_MASTER override it (one master, or
 * the list a,b,c of an HA cluster's masters). put and get draw
 * a progress bar (bytes, rate, ETA) when stderr is a terminal (--progress
 * plain: a line per 5 %, for logs); `--json` prints machine-readable output,
 * --bytes raw byte counts. Global options may follow the command; `weightctl
 * COMMAND --help` explains one command with examples, and a bad command line
 * is refused in one line naming the flag and the value. TLS settings
 * (--tls-ca, --tls-cert, --tls-key, --tls-server-name over $WM_TLS_*) are
 * checked before a command connects and serve every connection it opens
 * (weightctl_tls.c). A failure prints
 * the RFC's error name and the cause on stderr and exits 1 (2 for usage
 * errors; `exists` exits 1 when the revision is not READY and readable).
 * This file holds the command table and main; the commands live in the
 * weightctl_*.c files weightctl.h lists. */
#include <stdio.h>
#include <string.h>

#include "weightctl.h"

/* Commands whose arguments are only their ID. */
static int cmd_info(ctl *x, int argc, char **argv)
{
    if (argc != 2) return wctl_bad_usage("info", "takes one ID");
    return wctl_cmd_info(x, argv[1]);
}

static int cmd_exists(ctl *x, int argc, char **argv)
{
    if (argc != 2) return wctl_bad_usage("exists", "takes one ID");
    return wctl_cmd_exists(x, argv[1]);
}

static int cmd_size(ctl *x, int argc, char **argv)
{
    if (argc != 2) return wctl_bad_usage("size", "takes one ID");
    return wctl_cmd_size(x, argv[1]);
}

static int cmd_status(ctl *x, int argc, char **argv)
{
    (void)argv;
    if (argc != 1) return wctl_bad_usage("status", "takes no arguments");
    return wctl_connect_master(x) < 0 ? 1 : wctl_cmd_status(x);
}

static int cmd_gate(ctl *x, int argc, char **argv)
{
    if (argc != 3 || strcmp(argv[1], "confirm") != 0)
        return wctl_bad_usage("gate", "the form is: gate confirm GATE");
    return wctl_connect_master(x) < 0 ? 1 : wctl_cmd_gate_confirm(x, argv[2]);
}

static const struct {
    const char *name;
    int (*run)(ctl *x, int argc, char **argv);
} commands[] = {
    {"put", wctl_cmd_put},       {"ls", wctl_cmd_ls},           {"info", cmd_info},
    {"exists", cmd_exists},      {"size", cmd_size},            {"get", wctl_cmd_get},
    {"policy", wctl_cmd_policy}, {"migrate", wctl_cmd_migrate}, {"op", wctl_cmd_op},
    {"rm", wctl_cmd_rm},         {"upsert", wctl_cmd_upsert},   {"status", cmd_status},
    {"gate", cmd_gate},          {"kv", wctl_cmd_kv},           {"repair", wctl_cmd_repair},
    {"plugin", wctl_cmd_plugin},  {"fsck", wctl_cmd_fsck},       {"abort", wctl_cmd_abort},
};

int main(int argc, char **argv)
{
    ctl x = {0};
    int rc = wctl_parse_global(&x, argc, argv);
    if (rc == WCTL_HELP) {
        wctl_usage(stdout);
        return 0;
    }
    if (rc == WCTL_VERSION) {
        wctl_version();
        return 0;
    }
    if (rc < 0) return 2; /* said in one line */
    if (x.argc < 1) {
        fprintf(stderr, "weightctl: no command given (weightctl --help lists them)\n");
        return 2;
    }
    const char *cmd = x.argv[0];
    int status = -1;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(commands[i].name, cmd) != 0) continue;
        for (int k = 1; k < x.argc && strcmp(x.argv[k], "--") != 0; k++)
            if (strcmp(x.argv[k], "--help") == 0 || strcmp(x.argv[k], "-h") == 0)
                return wctl_cmd_help(cmd) == 0 ? 0 : 2;
        /* the TLS files are checked before any command connects */
        if (wctl_tls_resolve(&x) < 0) return 2; /* said in one line */
        status = commands[i].run(&x, x.argc, x.argv);
        break;
    }
    if (status < 0) {
        fprintf(stderr, "weightctl: unknown command '%s' (weightctl --help lists them)\n", cmd);
        return 2;
    }
    if (x.ws) weight_store_close(x.ws);
    kvc_close(x.c);
    wctl_tls_free(&x);
    return status;
}
