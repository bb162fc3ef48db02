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
 * a progress bar (bytes, rate, ETA) when stderr is a terminal; `--json`
 * prints machine-readable output. A failure prints the RFC's error name and
 * the cause on stderr and exits 1 (2 for usage errors; `exists` exits 1
 * when the revision is not READY and readable). */
#include <stdio.h>
#include <string.h>

#include "weightctl.h"

void wctl_usage(FILE *out)
{
    fprintf(out,
            "usage: weightctl [--master ADDR] [--tenant T] [--json] COMMAND ...\n"
            "  put --namespace NS --resource R --revision V [--generation G]\n"
            "      [--policy hot|cold|mixed[:RATIO]] [--mode pinned|manual|auto]\n"
            "      [--tie NAME=TARGET]... [--payload-bytes N] FILE...\n"
            "                         publish safetensors files as one revision\n"
            "      [--tp N [--split PATTERN=DIM]... [--replicate PATTERN]...] RANK0 ... RANK<N-1>\n"
            "                         or N files holding one TP rank's shards each (as get\n"
            "                         --tp writes them), split and replicated by the rules below\n"
            "  ls [--namespace NS [--resource R]] [--limit N] [--page-token T] [--all]\n"
            "                         list revisions (--all: tombstones too)\n"
            "  info ID                identity, state, policy, operation, bytes, manifest\n"
            "  exists ID              exit 0 only when READY and readable\n"
            "  size ID                logical payload bytes\n"
            "  get ID --out DIR [--tp N --rank R] [--split PATTERN=DIM]... [--replicate PATTERN]...\n"
            "                         write this rank's tensors as DIR/rank<R>-of-<N>.safetensors;\n"
            "                         the first rule whose glob matches (and, for --split, whose\n"
            "                         DIM the tensor has) decides, else >= 2 dims split along 0\n"
            "  policy ID [--preferred hot|cold|mixed[:RATIO]] [--mode M] [--expect GEN]\n"
            "  migrate ID --to hot|cold|mixed[:RATIO] [--expect GEN]\n"
            "  op OPID [--wait]       an operation's progress (--wait: until it ends)\n"
            "  rm ID [--expect GEN] [--wait]   delete the revision, keep a tombstone\n"
            "  upsert BASE_ID --generation G [--mode put-first|delete-first] [--request-id X]\n"
            "      [--expect-generation M] [--policy P] [--tie N=T]... [--wait] FILE...\n"
            "                         replace BASE_ID by generation G of its lineage (one claim\n"
            "                         per lineage; --wait: until COMMITTED or ABORTED)\n"
            "  status                 the master's role, nodes, segments, capacity and use; of\n"
            "                         an HA cluster every master's role, applied seq and lag,\n"
            "                         and each capability gate, confirmed or what blocks it\n"
            "  gate confirm GATE      open a capability gate (HA) once every master can replay\n"
            "                         its record types; durable, kept across failovers\n"
            "  kv put KEY FILE        store FILE's bytes as object KEY\n"
            "  kv get KEY FILE        write object KEY's bytes (checked) to FILE\n"
            "  kv ls [PREFIX]         list object keys\n"
            "  kv rm KEY              remove an object\n"
            "ID is NAMESPACE/RESOURCE/REVISION[@GENERATION], components percent-encoded where\n"
            "they hold '/', '@' or '%%'. ADDR is host:port or a Unix socket path, or the\n"
            "masters of an HA cluster as a list a,b,c (the leader is found and followed)\n"
            "(default %s, or $WEIGHTCTL_MASTER)\n",
            WEIGHTCTL_DEFAULT_MASTER);
}

int main(int argc, char **argv)
{
    ctl x = {0};
    int first = wctl_parse_global(&x, argc, argv);
    if (first == WCTL_HELP) {
        wctl_usage(stdout);
        return 0;
    }
    if (first == WCTL_USAGE) {
        wctl_usage(stderr);
        return 2;
    }
    if (first == WCTL_BAD_MASTER) return 2;
    int nargs = argc - first;
    char **args = argv + first;
    if (nargs < 1) {
        wctl_usage(stderr);
        return 2;
    }
    int status = 2;
    static const char *weight_cmds[] = {"put", "ls", "info", "exists", "size", "get",
                                        "policy", "migrate", "op", "rm", "upsert"};
    int is_weight = 0;
    for (size_t i = 0; i < sizeof weight_cmds / sizeof weight_cmds[0]; i++)
        if (strcmp(args[0], weight_cmds[i]) == 0) is_weight = 1;
    if (is_weight) {
        if (wctl_open_weights(&x) < 0) return 1;
        if (strcmp(args[0], "put") == 0) status = wctl_cmd_put(&x, nargs, args);
        else if (strcmp(args[0], "ls") == 0) status = wctl_cmd_ls(&x, nargs, args);
        else if (strcmp(args[0], "get") == 0) status = wctl_cmd_get(&x, nargs, args);
        else if (strcmp(args[0], "policy") == 0) status = wctl_cmd_policy(&x, nargs, args);
        else if (strcmp(args[0], "migrate") == 0) status = wctl_cmd_migrate(&x, nargs, args);
        else if (strcmp(args[0], "op") == 0) status = wctl_cmd_op(&x, nargs, args);
        else if (strcmp(args[0], "rm") == 0) status = wctl_cmd_rm(&x, nargs, args);
        else if (strcmp(args[0], "upsert") == 0) status = wctl_cmd_upsert(&x, nargs, args);
        else if (nargs != 2) wctl_usage(stderr);
        else if (strcmp(args[0], "info") == 0) status = wctl_cmd_info(&x, args[1]);
        else if (strcmp(args[0], "exists") == 0) status = wctl_cmd_exists(&x, args[1]);
        else if (strcmp(args[0], "size") == 0) status = wctl_cmd_size(&x, args[1]);
        weight_store_close(x.ws);
        return status;
    }
    if (strcmp(args[0], "status") == 0 && nargs == 1) {
        status = wctl_connect_master(&x) < 0 ? 1 : wctl_cmd_status(&x);
    } else if (strcmp(args[0], "gate") == 0 && nargs == 3 && strcmp(args[1], "confirm") == 0) {
        status = wctl_connect_master(&x) < 0 ? 1 : wctl_cmd_gate_confirm(&x, args[2]);
    } else if (strcmp(args[0], "kv") == 0 && nargs >= 2 && strcmp(args[1], "ls") == 0 && nargs <= 3) {
        status = wctl_connect_master(&x) < 0 ? 1 : wctl_cmd_kv_ls(&x, nargs == 3 ? args[2] : "");
    } else if (strcmp(args[0], "kv") == 0 && nargs == 4 && strcmp(args[1], "put") == 0) {
        status = wctl_connect_master(&x) < 0 ? 1 : wctl_cmd_kv_put(&x, args[2], args[3]);
    } else if (strcmp(args[0], "kv") == 0 && nargs == 4 && strcmp(args[1], "get") == 0) {
        status = wctl_connect_master(&x) < 0 ? 1 : wctl_cmd_kv_get(&x, args[2], args[3]);
    } else if (strcmp(args[0], "kv") == 0 && nargs == 3 && strcmp(args[1], "rm") == 0) {
        status = wctl_connect_master(&x) < 0 ? 1 : wctl_cmd_kv_rm(&x, args[2]);
    } else {
        wctl_usage(stderr);
    }
    kvc_close(x.c);
    return status;
}
