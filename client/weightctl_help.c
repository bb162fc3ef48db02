/* weightctl_help.c -- what weightctl says about itself: the usage (every
 * command in a line or two), `weightctl COMMAND --help` (one command's
 * synopsis, what it does and examples that run as written against `make
 * run`), --version, and the one-line refusals of a bad command line (the flag
 * and the value named, a pointer to COMMAND --help, never the whole usage). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "weightctl.h"

#ifndef WEIGHTCTL_VERSION
#define WEIGHTCTL_VERSION "unknown"
#endif

void wctl_usage(FILE *out)
{
    fprintf(out,
            "usage: weightctl [--master ADDR] [--tenant T] [--json] [--bytes] [--progress MODE]\n"
            "                 [--token-file FILE] [--tls-ca FILE [--tls-cert FILE --tls-key FILE]\n"
            "                 [--tls-server-name NAME]] COMMAND ...\n"
            "  put --namespace NS --resource R --revision V [--generation G]\n"
            "      [--policy hot|cold|mixed[:RATIO]] [--mode pinned|manual|auto]\n"
            "      [--tie NAME=TARGET]... [--payload-bytes N] FILE...\n"
            "                         publish safetensors files as one revision\n"
            "      [--tp N [--split PATTERN=DIM]... [--replicate PATTERN]...] RANK0 ... RANK<N-1>\n"
            "                         or N files holding one TP rank's shards each (as get\n"
            "                         --tp writes them), split and replicated by the rules below\n"
            "      --from-dir MODEL_DIR  or a Hugging Face model directory: its shards and, as\n"
            "                         attachments, its other files (config, tokenizer, ...)\n"
            "  ls [--namespace NS [--resource R]] [--limit N] [--page-token T] [--all]\n"
            "                         list revisions (--all: tombstones and uncommitted\n"
            "                         imports, IMPORTING, too)\n"
            "  info ID                identity, state, policy, operation, bytes, manifest\n"
            "  exists ID              exit 0 only when READY and readable\n"
            "  size ID                logical payload bytes\n"
            "  get ID --out DIR [--tp N [--rank R|--all-ranks] [--allow-uneven]]\n"
            "      [--split PATTERN=DIM]... [--replicate PATTERN]...\n"
            "                         write this rank's tensors (every rank's without --rank) as\n"
            "                         DIR/rank<R>-of-<N>.safetensors;\n"
            "                         the first rule whose glob matches (and, for --split, whose\n"
            "                         DIM the tensor has) decides, else >= 2 dims split along 0\n"
            "  policy ID [--preferred hot|cold|mixed[:RATIO]] [--mode M] [--expect GEN]\n"
            "  migrate ID --to hot|cold|mixed[:RATIO] [--expect GEN] [--wait [--timeout S]]\n"
            "                         start a residency migration (--wait: until it ends)\n"
            "  repair ID [--expect GEN]   restore the replicas ID's residency needs\n"
            "  op OPID [--wait [--timeout S]]\n"
            "                         an operation's progress (--wait: until it ends)\n"
            "  rm ID [--expect GEN] [--wait [--timeout S]]\n"
            "                         delete the revision, keep a tombstone (--wait: for its\n"
            "                         revision leases and operation first, then until DELETED)\n"
            "  abort ID [--expect GEN]  abort an import never committed (IMPORTING: a put that\n"
            "                         died) and free what it wrote (without @GEN the newest\n"
            "                         IMPORTING generation)\n"
            "  upsert BASE_ID --generation G [--mode put-first|delete-first] [--request-id X]\n"
            "      [--expect-generation M] [--policy P] [--tie N=T]... [--wait] FILE...|--from-dir DIR\n"
            "      [--tp N [--split PATTERN=DIM]... [--replicate PATTERN]...] RANK0 ... RANK<N-1>\n"
            "                         replace BASE_ID by generation G of its lineage (one claim\n"
            "                         per lineage; --wait: until COMMITTED or ABORTED)\n"
            "  upsert status ID       the lineage's current or last replacement claim\n"
            "  upsert abort ID        abort the lineage's open put-first claim (base intact)\n"
            "  status                 the master's role, nodes, segments, capacity and use; of\n"
            "                         an HA cluster every master's role, applied seq and lag,\n"
            "                         and each capability gate, confirmed or what blocks it\n"
            "  gate confirm GATE      open a capability gate (HA) once every master can replay\n"
            "                         its record types; durable, kept across failovers\n"
            "  plugin list            the loaded plugins: version, state, ABI, reloadable, path\n"
            "  plugin reload NAME [--path LIB.so]\n"
            "                         reload a plugin in place, handing its state over; a\n"
            "                         refusal leaves the old one serving and says why\n"
            "                         (LIB.so is opened by the master; a relative path is\n"
            "                         resolved against weightctl's working directory)\n"
            "  plugin disable NAME    quiesce a plugin and refuse its RPCs (plain KV store)\n"
            "  plugin enable NAME     serve a disabled plugin again\n"
            "  fsck [--deep] [--repair]\n"
            "                         report (and with --repair remove) cold files and segment\n"
            "                         bytes that nothing owns, and replicas whose file is corrupt\n"
            "  kv put KEY FILE|-      store FILE's bytes (-: stdin) as object KEY\n"
            "  kv get KEY FILE|-      write object KEY's bytes (checked) to FILE (-: stdout)\n"
            "  kv ls [PREFIX]         list object keys\n"
            "  kv rm KEY              remove an object\n"
            "ID is NAMESPACE/RESOURCE/REVISION[@GENERATION] (GENERATION from 1; without it the\n"
            "newest live one), components percent-encoded where they hold '/', '@' or '%%'.\n"
            "ADDR is host:port or a Unix socket path, or the masters of an HA cluster as a list\n"
            "a,b,c (the leader is found and followed) (default %s, or\n"
            "$WEIGHTCTL_MASTER). Global options may also follow the command.\n"
            "--token-file FILE: the token to present to a master with auth on (default\n"
            "$WEIGHT_TOKEN; the token decides the tenant unless --tenant names one).\n"
            "--bytes: raw byte counts instead of KiB, MiB, ...; --progress auto (a\n"
            "bar on a terminal, else none), plain (one line per 5 %%) or none.\n"
            "--tls-ca FILE: TLS 1.3 to a TCP master and to node data ports that speak TLS,\n"
            "whose certificates must chain to FILE (default $WM_TLS_CA); --tls-cert FILE\n"
            "--tls-key FILE: a client certificate and its key, both or neither (default\n"
            "$WM_TLS_CERT, $WM_TLS_KEY); --tls-server-name NAME: the name the master's\n"
            "certificate must carry when ADDR is not that name. A flag replaces its variable;\n"
            "the files are checked before anything connects (exit 2 naming the file).\n"
            "--version.\n"
            "weightctl COMMAND --help: that command, with examples.\n",
            WEIGHTCTL_DEFAULT_MASTER);
}

typedef struct cmd_help {
    const char *name;
    const char *text; /* synopsis, description, then "examples:" */
} cmd_help;

static const cmd_help helps[] = {
    {"put",
     "usage: weightctl put --namespace NS --resource R --revision V [--generation G]\n"
     "         [--policy hot|cold|mixed[:RATIO]] [--mode pinned|manual|auto]\n"
     "         [--tie NAME=TARGET]... [--payload-bytes N] FILE...\n"
     "       weightctl put ... --tp N [--split PATTERN=DIM]... [--replicate PATTERN]... RANK0 ... RANK<N-1>\n"
     "       weightctl put ... --from-dir MODEL_DIR\n"
     "Publish safetensors files as one revision (READY, first HOT). A tensor byte-identical\n"
     "to an earlier one is stored once, as an alias; --tie NAME=TARGET names one explicitly:\n"
     "it asserts one storage, so NAME and TARGET must be tensors of the files of one dtype,\n"
     "shape and bytes, TARGET not tied itself (else refused before any import). With\n"
     "--tp N the files are N ranks' shards (as get --tp writes them), joined by the rules.\n"
     "Files written by get --tp record their TP degree, rank, source and split in\n"
     "__metadata__: a swapped or repeated file, another source or --tp, and rules other than\n"
     "those they were cut with are refused naming the file (so is one rank's file put\n"
     "without --tp). Files without it are checked by their shapes and bytes (README: what\n"
     "that misses).\n"
     "--from-dir reads a Hugging Face model directory: the shards model.safetensors.index.json\n"
     "names (all of them, or refused naming the missing one) or model.safetensors, and its\n"
     "other regular files (config.json, tokenizer files, ...; at most 64 MiB each) stored\n"
     "as attachments of the revision, which get --out writes back next to the tensors.\n"
     "--payload-bytes N packs the tensors into payload objects of at most N bytes (default\n"
     "256 MiB, at least 4096); each object needs one free range of a memory segment, so a\n"
     "smaller N fits a fuller or smaller store, in more objects.\n"
     "examples:\n"
     "  weightctl put --namespace llm --resource tiny --revision v1 --from-dir ./tiny-model\n"
     "  weightctl put --namespace llm --resource tiny --revision v1 model.safetensors\n"
     "  weightctl put --namespace llm --resource tiny --revision v1 --policy cold --mode manual \\\n"
     "      model-00001-of-00002.safetensors model-00002-of-00002.safetensors\n"
     "  weightctl put --namespace llm --resource tiny --revision tp2 --tp 2 \\\n"
     "      out/rank0-of-2.safetensors out/rank1-of-2.safetensors\n"},
    {"ls",
     "usage: weightctl ls [--namespace NS [--resource R]] [--limit N] [--page-token T] [--all]\n"
     "List revisions: at most N rows with --limit (then the token to go on from); one page\n"
     "from --page-token; --all shows tombstones (DELETED) and imports never committed\n"
     "(IMPORTING: a put in progress, or one that died; weightctl abort frees one) too.\n"
     "examples:\n"
     "  weightctl ls\n"
     "  weightctl ls --namespace llm --limit 10\n"
     "  weightctl --json ls --namespace llm --resource tiny --all\n"},
    {"info",
     "usage: weightctl info ID\n"
     "A revision's identity, availability, residency, policy, operation, bytes, leases and\n"
     "manifest. Without @GENERATION the newest live generation.\n"
     "examples:\n"
     "  weightctl info llm/tiny/v1\n"
     "  weightctl info llm/tiny/v1@1 --json\n"},
    {"exists",
     "usage: weightctl exists ID\n"
     "Exit 0 when the revision is READY and readable, 1 when not. Without @GENERATION the\n"
     "newest live generation (none: not).\n"
     "examples:\n"
     "  weightctl exists llm/tiny/v1@1 && echo ready\n"
     "  weightctl exists llm/tiny/v1\n"},
    {"size",
     "usage: weightctl size ID\n"
     "The revision's logical payload bytes, as a number.\n"
     "examples:\n"
     "  weightctl size llm/tiny/v1\n"},
    {"get",
     "usage: weightctl get ID --out DIR [--tp N [--rank R | --all-ranks] [--allow-uneven]]\n"
     "         [--split PATTERN=DIM]... [--replicate PATTERN]...\n"
     "Load a rank's tensors, resharded from whatever layout was written, and write them as\n"
     "DIR/rank<R>-of-<N>.safetensors (DIR and its parents are created first; the file is\n"
     "written as the bytes arrive, through DIR/.rank<R>-of-<N>.safetensors.tmp). The first\n"
     "rule whose glob matches (and, for --split, whose DIM the tensor has) decides; without\n"
     "one, tensors of 2 or more dimensions are split along 0. Without --rank every rank is\n"
     "written (as with --all-ranks). A split of a dimension N does not divide is refused\n"
     "naming the tensor, unless --allow-uneven (the first size % N ranks get one more).\n"
     "Each file's __metadata__ keeps the revision's and adds weight_mgmt.tp, .rank, .source\n"
     "and .split (the split tensors and their dimension), which put --tp checks.\n"
     "A revision put --from-dir a model directory gets its other files (config.json, ...)\n"
     "written back too, and at TP 1 its tensors as DIR/model.safetensors: a loadable model\n"
     "directory again.\n"
     "examples:\n"
     "  weightctl get llm/tiny/v1 --out /tmp/tiny\n"
     "  weightctl get llm/tiny/v1 --out /tmp/tiny --tp 2 --rank 1\n"
     "  weightctl get llm/tiny/v1 --out /tmp/tiny --tp 4 --all-ranks --split '*.o_proj.*=1' \\\n"
     "      --replicate '*norm*'\n"},
    {"policy",
     "usage: weightctl policy ID [--preferred hot|cold|mixed[:RATIO]] [--mode pinned|manual|auto]\n"
     "         [--expect GEN]\n"
     "Show the revision's policy, or change what is given (the rest is kept), fenced on\n"
     "the metadata generation (--expect, else the current one).\n"
     "examples:\n"
     "  weightctl policy llm/tiny/v1\n"
     "  weightctl policy llm/tiny/v1 --preferred mixed:0.25 --mode auto\n"},
    {"migrate",
     "usage: weightctl migrate ID --to hot|cold|mixed[:RATIO] [--expect GEN]\n"
     "           [--wait [--timeout SECONDS]]\n"
     "Start a residency migration; --wait follows it until it ends (exit 1 if it FAILED),\n"
     "with --progress plain a line on stderr whenever its members or bytes done, attempts\n"
     "or last error change; --timeout ends the wait after SECONDS (TIMEOUT, exit 1, the\n"
     "operation still running named with its progress and last error: it goes on).\n"
     "examples:\n"
     "  weightctl migrate llm/tiny/v1 --to cold --wait\n"
     "  weightctl --progress plain migrate llm/tiny/v1 --to hot --wait --timeout 600\n"
     "  weightctl migrate llm/tiny/v1 --to mixed:0.5\n"},
    {"repair",
     "usage: weightctl repair ID [--expect GEN]\n"
     "Start a REPAIRING operation: restore the replicas the revision's recorded residency\n"
     "needs (memory from cold, cold from memory) and bring a DEGRADED revision back to\n"
     "READY once every member is readable. The master starts one by itself after a loss;\n"
     "this asks now. Fenced on --expect, else on the generation read now (said on stderr).\n"
     "examples:\n"
     "  weightctl repair llm/tiny/v1@1\n"
     "  weightctl op 12 --wait\n"},
    {"op",
     "usage: weightctl op OPERATION_ID [--wait [--timeout SECONDS]]\n"
     "An operation's kind, state and progress; --wait: until it ends (exit 1 if it FAILED),\n"
     "with --progress plain a line on stderr whenever its members or bytes done, attempts\n"
     "or last error change; --timeout ends the wait after SECONDS (TIMEOUT, exit 1, the\n"
     "operation still running named with its progress and last error: it goes on).\n"
     "examples:\n"
     "  weightctl op 7 --wait\n"
     "  weightctl --progress plain op 7 --wait --timeout 60\n"},
    {"rm",
     "usage: weightctl rm ID [--expect GEN] [--wait [--timeout SECONDS]]\n"
     "Delete the revision (payloads in batches, the manifest last) and keep a tombstone.\n"
     "Refused (BUSY) while a revision lease (a weight_get loading it, until it ends) or an\n"
     "operation is active. A reader's read leases on the payload objects do not refuse it:\n"
     "the deletion holds those members back until the leases end (a get that ended holds\n"
     "nothing). --wait waits for the lease and the operation to end, then for DELETED, at\n"
     "most --timeout seconds (default 300; then TIMEOUT, exit 1); without --expect it\n"
     "fences on the metadata generation read after each wait (an operation's end moves it).\n"
     "examples:\n"
     "  weightctl rm llm/tiny/v1@1\n"
     "  weightctl rm llm/tiny/v1 --wait --timeout 60\n"},
    {"abort",
     "usage: weightctl abort ID [--expect GEN]\n"
     "Abort an import never committed (IMPORTING: a put whose writer was killed, crashed\n"
     "or ran out of space; weightctl ls --all lists them) and free what it wrote: its\n"
     "objects are removed (DELETING), then the revision is forgotten and its name is free\n"
     "for a new put. Without @GENERATION the newest IMPORTING generation. Any other state\n"
     "is refused (CONFLICT, nothing changed; weightctl rm deletes a committed revision); a\n"
     "put still running fails at its next call.\n"
     "examples:\n"
     "  weightctl abort llm/tiny/v1@1\n"
     "  weightctl abort llm/tiny/v1 --expect 1\n"},
    {"upsert",
     "usage: weightctl upsert BASE_ID --generation G [--mode put-first|delete-first]\n"
     "         [--request-id X] [--expect-generation M] [--policy P] [--tie N=T]...\n"
     "         [--payload-bytes N] [--wait] FILE...\n"
     "       weightctl upsert BASE_ID --generation G ... --tp N [--split PATTERN=DIM]...\n"
     "         [--replicate PATTERN]... RANK0 ... RANK<N-1>\n"
     "       weightctl upsert BASE_ID --generation G ... --from-dir MODEL_DIR\n"
     "       weightctl upsert status ID\n"
     "       weightctl upsert abort ID\n"
     "Replace BASE_ID by generation G of its lineage (one claim per lineage). put-first keeps\n"
     "the base readable until the target is READY; delete-first frees its space first.\n"
     "--wait: until COMMITTED or ABORTED, telling each phase on stderr (and every 30 s one\n"
     "lasts, what it waits for). The same command again (after a lost answer or a\n"
     "failover) goes on with the claim still running, or starts a new claim when that one\n"
     "was aborted; with --request-id, it goes on with, or answers, that claim whatever its\n"
     "phase, at the base generation the claim was made at. `upsert\n"
     "status` shows the lineage's current or last claim (ID names the lineage; its\n"
     "generation is ignored). --from-dir reads a Hugging Face model directory as put\n"
     "--from-dir does (shards, other files attached); --tp N with N rank files (--split,\n"
     "--replicate), --tie and --payload-bytes are put's (weightctl put --help).\n"
     "`upsert abort ID` aborts the lineage's open claim (a trainer that died mid-upsert)\n"
     "while its base is intact: a put-first claim before its target is READY; the target's\n"
     "import is aborted and the claim ends ABORTED. Any other claim is refused (CONFLICT).\n"
     "examples:\n"
     "  weightctl upsert llm/tiny/v1@1 --generation 2 --wait model.safetensors\n"
     "  weightctl upsert llm/tiny/v1@1 --generation 2 --wait --from-dir ./tiny-model-v2\n"
     "  weightctl upsert llm/tiny/tp2@1 --generation 2 --tp 2 out/rank0-of-2.safetensors \\\n"
     "      out/rank1-of-2.safetensors\n"
     "  weightctl upsert status llm/tiny/v1\n"
     "  weightctl upsert abort llm/tiny/v1\n"},
    {"status",
     "usage: weightctl status\n"
     "The master's role, nodes, segments, memory capacity and use (KiB, MiB, ...; --bytes\n"
     "for raw numbers), objects and OpLog position; of an HA cluster every master and gate.\n"
     "Per node its cold tier as the node last reported it: the cold directory's file\n"
     "system used, total and free, and cold writes failed since the node started (by\n"
     "cause); 'cold tier nearly full' under 5 % free; 'none' without a cold directory,\n"
     "'unknown' from a store_node that does not report it (--json: node_list).\n"
     "examples:\n"
     "  weightctl status\n"
     "  weightctl status --bytes --json\n"},
    {"gate",
     "usage: weightctl gate confirm GATE\n"
     "Open a capability gate (HA) once every master can replay its record types.\n"
     "examples:\n"
     "  weightctl gate confirm weight_management_oplog_capability_confirmed\n"},
    {"fsck",
     "usage: weightctl fsck [--deep] [--repair]\n"
     "Check what the up nodes hold against what the master's state names: cold files no\n"
     "replica names (orphans, corrupt ones included) and non-zero bytes in segment ranges\n"
     "no object, put or reservation occupies. Read-only unless --repair: then the orphan\n"
     "files are deleted and those ranges zeroed (held meanwhile, so nothing is allocated\n"
     "there). A cold file a replica names whose header or size is bad is reported as a\n"
     "corrupt replica with its object's key; --repair drops that replica (the file then\n"
     "goes as an orphan; a weight revision turns DEGRADED and is repaired from another\n"
     "replica where there is one). --deep also reads every cold file's data and checks it\n"
     "against its SHA-256, reporting a mismatch the same way (it reads the whole cold\n"
     "tier; a node from before --deep ends its check with the cause), and hashes every\n"
     "memory replica against its object's SHA-256: one whose bytes changed is reported\n"
     "as a corrupt memory replica, which --repair drops. Prints the cold\n"
     "bytes on disk and the occupied segment bytes beside the master's cold replica\n"
     "bytes and memory used. Temporary cold files older than a minute (writes a crash\n"
     "cut off) are reported with name, size and age and left in place; --repair deletes\n"
     "them. Exit 0 clean or repaired, 1 orphans, corrupt replicas or stale temporaries\n"
     "found (without --repair), a node not checked, or a repair step that failed\n"
     "(\"not repaired: CAUSE\"; --json: in_repair).\n"
     "examples:\n"
     "  weightctl fsck\n"
     "  weightctl --json fsck --repair\n"
     "  weightctl fsck --deep\n"},
    {"plugin",
     "usage: weightctl plugin list\n"
     "       weightctl plugin reload NAME [--path LIBRARY.so]\n"
     "       weightctl plugin disable NAME\n"
     "       weightctl plugin enable NAME\n"
     "list shows each loaded plugin (name, version, state, ABI, whether it can hand its\n"
     "state over, reloads, library). reload loads the library (--path, else the one it\n"
     "was loaded from) beside the serving one, hands the state over and switches, calls\n"
     "waiting meanwhile; any refusal leaves the old one serving and prints why (exit 1).\n"
     "--path is opened by the master, on the master's host: an absolute path is sent as\n"
     "given; a relative one is resolved against weightctl's working directory and must\n"
     "exist here (else exit 2), so give an absolute path for a library only the\n"
     "master's host has.\n"
     "disable refuses the plugin's RPCs (plain KV store; its groups stay protected);\n"
     "enable serves it again.\n"
     "examples:\n"
     "  weightctl plugin list\n"
     "  weightctl plugin reload weight_mgmt\n"
     "  weightctl plugin reload weight_mgmt --path /opt/weight_mgmt-0.2/weight_mgmt.so\n"
     "  weightctl plugin disable weight_mgmt && weightctl plugin enable weight_mgmt\n"},
    {"kv",
     "usage: weightctl kv put KEY FILE|-\n"
     "       weightctl kv get KEY FILE|-\n"
     "       weightctl kv ls [PREFIX]\n"
     "       weightctl kv rm KEY\n"
     "The plain object store: put stores FILE's bytes (- reads stdin), get writes the\n"
     "object's bytes, checked, to FILE (- writes stdout), ls lists keys, rm removes one.\n"
     "examples:\n"
     "  weightctl kv put notes/readme README.md\n"
     "  echo hello | weightctl kv put notes/hello -\n"
     "  weightctl kv get notes/hello - | cat\n"
     "  weightctl kv ls notes/\n"},
};

int wctl_cmd_help(const char *cmd)
{
    for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++) {
        if (strcmp(helps[i].name, cmd) == 0) {
            fputs(helps[i].text, stdout);
            printf("global options (before or after the command): --master ADDR, --tenant T, "
                   "--json,\n  --bytes, --progress auto|plain|none, --tls-ca/--tls-cert/--tls-key FILE; "
                   "see weightctl --help\n");
            return 0;
        }
    }
    return -1;
}

void wctl_version(void)
{
    printf("weightctl %s (libweightclient %s)\n", WEIGHTCTL_VERSION, WEIGHTCTL_VERSION);
}

int wctl_bad_value(const char *cmd, const char *flag, const char *value, const char *expected)
{
    fprintf(stderr, "weightctl: %s: %s: '%s' is not %s\n", cmd, flag, value, expected);
    return 2;
}

int wctl_bad_usage(const char *cmd, const char *why)
{
    fprintf(stderr, "weightctl: %s: %s (weightctl %s --help)\n", cmd, why, cmd);
    return 2;
}

int wctl_opt_error(const char *cmd, int c, char **argv)
{
    char why[512];
    const char *arg = argv[optind - 1];
    if (c == ':') snprintf(why, sizeof why, "%s needs a value", arg);
    else snprintf(why, sizeof why, "unknown option %s", arg);
    return wctl_bad_usage(cmd, why);
}
