/* weightctl.h -- what weightctl's own files share: the commands (one
 * wctl_cmd_* per command, main_weightctl.c dispatches), argument parsing and
 * the store handle (weightctl_args.c), output and progress
 * (weightctl_output.c). Nothing here is part of libweightclient; these
 * files build into the weightctl program only. The global options and
 * `status` are weightctl_master.h's. */
#ifndef WM_WEIGHTCTL_H
#define WM_WEIGHTCTL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "wc_safetensors.h"
#include "weightclient.h"
#include "weightctl_master.h"

/* -- weightctl_help.c -------------------------------------------------------- */

/* The usage text (every command, one line or two each) on out. */
void wctl_usage(FILE *out);
/* `weightctl CMD --help` on stdout: synopsis, what it does, examples. 0, or
 * -1 when cmd is not a command. */
int wctl_cmd_help(const char *cmd);
/* `weightctl --version` on stdout. */
void wctl_version(void);
/* The one-line refusals of a command line; each returns 2 (the exit code).
 * "weightctl: CMD: FLAG: 'VALUE' is not EXPECTED" */
int wctl_bad_value(const char *cmd, const char *flag, const char *value, const char *expected);
/* "weightctl: CMD: WHY (weightctl CMD --help)" */
int wctl_bad_usage(const char *cmd, const char *why);
/* After getopt_long (optstring starting with ':') returned c, '?' or ':':
 * the unknown option, or the one missing its value, in that form. */
int wctl_opt_error(const char *cmd, int c, char **argv);

/* -- weightctl_plugin.c ----------------------------------------------------- */

/* `plugin list|reload|disable|enable ...` (args[0] is "plugin"): the exit
 * status (0 done, 1 refused or unreachable, 2 usage). */
int wctl_cmd_plugin(ctl *x, int nargs, char **args);
/* One call of the master's admin service (2) to x->master: 0 with *resp
 * (unpacked with desc; the caller frees it), or 1 with "weightctl: WHAT:
 * cause" on stderr (unreachable, or the master's refusal and reason). */
struct ProtobufCMessage;
struct ProtobufCMessageDescriptor;
int wctl_admin_call(ctl *x, const char *what, uint32_t method, const struct ProtobufCMessage *req,
                    const struct ProtobufCMessageDescriptor *desc, struct ProtobufCMessage **resp);

/* -- weightctl_fsck.c ------------------------------------------------------- */

/* `fsck [--deep] [--repair]`: the exit status (0 clean or repaired, 1 orphans found
 * without --repair, a node not checked, or refused; 2 usage). */
int wctl_cmd_fsck(ctl *x, int argc, char **argv);

/* -- weightctl_args.c: arguments and the store ------------------------------ */

/* Open x->ws on x->master for x->tenant. 0, or -1 with the cause on stderr. */
int wctl_open_weights(ctl *x);

/* Say on stderr that x->master could not be used, with err: "the master at
 * M refused this client" when one answered and refused it (refused: a
 * token or certificate it does not accept), "cannot reach the master at M"
 * otherwise (code, when not NULL, is the error's name). */
void wctl_say_unconnected(const ctl *x, int refused, const char *code, const char *err);

/* Ctrl-C: while armed, SIGINT cancels the weight_get or weight_writer_commit
 * running on s (weight_store_cancel: a get releases its lease, a commit
 * aborts its import) instead of killing weightctl; disarm restores the
 * previous handler. wctl_interrupted: whether SIGINT came since the arm (the
 * command then exits 130). */
void wctl_sigint_arm(weight_store *s);
void wctl_sigint_disarm(void);
int wctl_interrupted(void);
/* Print "weightctl: WHAT: NAME: cause" and return 1. */
int wctl_failed(ctl *x, const char *what, int rc);
/* Parse an ID; without "@GEN" take the newest live generation of it. 0, or
 * the exit code with the cause already printed. */
int wctl_parse_id(ctl *x, const char *text, weight_identity *id);
/* Parse an ID; without "@GEN" take the newest IMPORTING generation of it
 * (abort). 0, or the exit code with the cause already printed. */
int wctl_parse_importing_id(ctl *x, const char *text, weight_identity *id);
/* Parse an ID only (*has_gen: whether "@GEN" was given; generation 0 is
 * refused). 0, or 2 with "weightctl: 'TEXT' is not NAMESPACE/...: WHY"
 * printed (the component that is empty or over WEIGHT_ID_MAX, a bad
 * escape, the generation, ...). */
int wctl_parse_id_text(ctl *x, const char *text, weight_identity *id, int *has_gen);
/* The newest live (listed) generation of id's revision into id->generation:
 * 0, WEIGHT_ENOT_FOUND when there is none, or weight_list's error (nothing
 * printed). */
int wctl_newest_generation(ctl *x, weight_identity *id);
/* A read of id, whose caller named no generation (id->generation is the
 * newest live one, wctl_newest_generation), failed with rc. When rc says
 * that generation may have been retired by a replacement meanwhile
 * (NOT_READY: fenced, DELETED; NOT_FOUND) and a higher generation is now
 * the newest, set it into id and return 1: read again. Else 0 (id
 * unchanged). *tries counts the calls; after WCTL_NEWEST_ATTEMPTS reads
 * in all, 0. The store's last error is overwritten either way (the
 * listing): keep the failure's message before. */
#define WCTL_NEWEST_ATTEMPTS 5
int wctl_follow_newest(ctl *x, weight_identity *id, int rc, int *tries);
/* The components put is given (--tenant, --namespace, --resource,
 * --revision): 0, or 2 with "weightctl: CMD: INVALID_ARGUMENT: the revision
 * (--revision) is N bytes, over the 256-byte limit ..." (or empty) printed. */
int wctl_check_components(const char *cmd, const char *tenant, const char *ns, const char *res,
                          const char *rev);
/* wctl_parse_id of arg, then its text into text[tcap] and "CMD TEXT" (what a
 * failure names) into what[wcap]. Returns wctl_parse_id's status. */
int wctl_resolve_id(ctl *x, const char *arg, const char *cmd, weight_identity *id, char *text,
                    size_t tcap, char *what, size_t wcap);
/* What --policy, --preferred and --to take, for their refusals. */
#define WCTL_RESIDENCY_FORMS "hot, cold, mixed or mixed:RATIO (0 < RATIO < 1)"
/* "hot", "cold", "mixed" or "mixed:0.3" into a residency and ratio; -1 if not one. */
int wctl_parse_residency(const char *s, weight_residency *res, double *ratio);
/* "pinned", "manual" or "auto"; -1 if not one. */
int wctl_parse_mode(const char *s, weight_migration_mode *m);
/* The metadata generation a mutation of id is fenced on: *expect when the
 * user gave --expect, else the current one, read now. Says on stderr which
 * one is used (the C calls never read it themselves). 0, or the exit code
 * with the cause printed. */
int wctl_fence(ctl *x, const char *cmd, const weight_identity *id, uint64_t *expect);
/* A decimal unsigned number, nothing else; -1 if not one. */
int wctl_parse_u64(const char *s, uint64_t *out);

/* --split PATTERN=DIM and --replicate PATTERN, in command-line order: the
 * first rule whose glob matches a tensor's name (and, for a split, whose DIM
 * the tensor has) decides; without one, tensors of 2 or more dimensions are
 * split along 0 and the rest replicated. */
typedef struct wctl_rule {
    const char *pattern;
    int split;            /* 1: split along dim, 0: replicate */
    uint32_t dim;
} wctl_rule;

typedef struct wctl_rules {
    wctl_rule r[128];
    size_t n;
} wctl_rules;

/* Add a --split (arg "PATTERN=DIM", cut in place) or --replicate rule. 0, or
 * -1 for a usage error. */
int wctl_rules_add(wctl_rules *rs, char *arg, int split);
/* 1 with *dim when tensor name (ndim dimensions) is split, 0 when it is
 * replicated. */
int wctl_rules_decide(const wctl_rules *rs, const char *name, uint32_t ndim, uint32_t *dim);

/* --tie NAME=TARGET: NAME is stored as an alias of TARGET. */
typedef struct wctl_tie {
    char *name;
    const char *target;
} wctl_tie;

/* One --tie NAME=TARGET into ties[*n_ties] (at most 64; arg is split in
 * place). 0, or -1 for a usage error. */
int wctl_parse_tie(char *arg, wctl_tie *ties, size_t *n_ties);

/* -- weightctl_tp.c: tensor-parallel rank files ------------------------------ */

/* The __metadata__ keys of a rank file written by get (see weightctl_tp.c). */
#define WCTL_TP_KEY_PREFIX "weight_mgmt."
#define WCTL_TP_KEY_TP "weight_mgmt.tp"
#define WCTL_TP_KEY_RANK "weight_mgmt.rank"
#define WCTL_TP_KEY_SOURCE "weight_mgmt.source"
#define WCTL_TP_KEY_SPLIT "weight_mgmt.split"

/* The four provenance pairs of one rank file; pairs point into the struct. */
typedef struct wctl_tp_meta {
    wc_st_meta pairs[4];
    char tp[24];
    char rank[24];
    char *split;            /* JSON: {"tensor": dim, ...} of the split tensors */
    char *source;
} wctl_tp_meta;

/* The pairs of rank `rank` of `tp` cut from revision `source` (its ID):
 * names[i] was split along split_dim[i], or replicated when it is -1
 * (n tensors). 0, WEIGHT_ENOMEM, or WEIGHT_EINVALID_ARGUMENT (a name that is
 * not UTF-8). Free with wctl_tp_meta_free, also after a failure. */
int wctl_tp_meta_init(wctl_tp_meta *m, uint32_t tp, uint32_t rank, const char *source,
                      const char *const *names, const int *split_dim, size_t n);
void wctl_tp_meta_free(wctl_tp_meta *m);

/* A put of whole files (no --tp): refuse a file whose __metadata__ says it
 * is one rank of several. 0, or WEIGHT_EINVALID_ARGUMENT printed as
 * "weightctl: CMD: INVALID_ARGUMENT: PATH: ...". */
int wctl_tp_check_whole(const char *cmd, char **paths, const wc_st_file *files, size_t n);

/* The command the refusals of wctl_tp_check_ranks / wctl_tp_add_shards name
 * ("put" unless set: upsert sets "upsert"). */
void wctl_tp_command(const char *cmd);

/* Everything put --tp checks before an import begins: no file given twice,
 * the provenance pairs (when the files carry them) against each other, --tp
 * and the rules, the shards' shapes and replicated bytes (wctl_tp_add_shards
 * without a writer), and without provenance no two ranks with the same bytes
 * in every split tensor. 0, WEIGHT_ENOMEM, or WEIGHT_EINVALID_ARGUMENT
 * printed naming the file and the cause. */
int wctl_tp_check_ranks(char **paths, const wc_st_file *files, uint32_t tp,
                        const wctl_rules *rs, const wctl_tie *ties, size_t n_ties);

/* Add the tensors of tp rank files (files[r] holds rank r's shards) to w.
 * The rules say which tensors are split and along which dimension. A split
 * tensor's shards must agree on dtype and every other dimension and hold the
 * parts of the split get makes (the first size % tp ranks one more); they are
 * added as fragments at their offsets. A replicated one must be
 * byte-identical in every rank and is added once; a tied one (--tie) is an
 * alias. Every rank must hold the same tensor names. w NULL: only check.
 * 0, the writer's error, or WEIGHT_EINVALID_ARGUMENT (printed, naming file
 * and tensor). */
int wctl_tp_add_shards(weight_writer *w, const wc_st_file *files, char **paths, uint32_t tp,
                       const wctl_rules *rs, const wctl_tie *ties, size_t n_ties);

/* -- weightctl_output.c: answers -------------------------------------------- */

/* The progress of put and get on stderr: a bar, or plain lines. */
typedef struct wctl_progress {
    int on;                 /* 0 none, 1 a bar, 2 a line per 5 % */
    const char *label;
    double t0;
    int last_step;          /* plain: the last 5 % step printed, -1 none */
    int drawn;
} wctl_progress;

/* Start *p for x->progress: auto draws a bar when stderr is a terminal
 * (and --json is not given), plain prints "LABEL:  35% of 1.2 GiB (...)"
 * once per 5 % step, none nothing. */
void wctl_progress_init(const ctl *x, wctl_progress *p, const char *label);

/* Seconds on the monotonic clock. */
double wctl_now(void);
/* v bytes as "12 B", "1.5 KiB", ... into out[cap]. */
void wctl_human(double v, char *out, size_t cap);
/* v bytes for a person: wctl_human, or with raw (--bytes) "N bytes". */
void wctl_size_text(double v, int raw, char *out, size_t cap);
/* msg into out[cap] with every "N bytes" of N >= 1024 written as KiB, MiB,
 * ... (unless raw: copied as it is). For causes of failures. */
void wctl_sizes_text(const char *msg, int raw, char *out, size_t cap);
/* weight_store_set_progress callback: ctx is a wctl_progress. */
void wctl_progress_cb(void *ctx, uint64_t done, uint64_t total);
/* End the bar's line, if one was drawn. */
void wctl_progress_end(wctl_progress *p);
/* An identity as NAMESPACE/RESOURCE/REVISION@GENERATION into out[cap]. */
void wctl_id_text(const weight_identity *id, char *out, size_t cap);
/* JSON values on stdout. */
void wctl_json_hex(const uint8_t *b, size_t n);
void wctl_json_identity(const weight_identity *id);
void wctl_json_operation(const weight_operation *op);
void wctl_json_metadata(const weight_metadata *m, const weight_operation *op);
/* wctl_json_metadata with what info shows beyond it (more: NULL for none). */
void wctl_json_metadata_more(const weight_metadata *m, const weight_operation *op,
                             const weight_metadata_more *more);
/* An operation as text on stdout. */
void wctl_print_operation(const weight_operation *op);
/* Show an operation (a JSON line with --json, else text) and return the
 * exit code it makes: 1 when it FAILED (state 3), else 0. */
int wctl_show_operation(ctl *x, const weight_operation *op);

/* -- weightctl_repair.c ------------------------------------------------------- */

/* repair ID [--expect GEN] */
int wctl_cmd_repair(ctl *x, int argc, char **argv);

/* -- weightctl_hfdir.c: a Hugging Face model directory (put --from-dir) ---- */

typedef struct wctl_hfdir_file {
    char *name;
    uint8_t *data;
    uint64_t bytes;
} wctl_hfdir_file;

typedef struct wctl_hfdir {
    char **shards;            /* safetensors file names, relative to the dir */
    size_t n_shards;
    char **map_tensor;        /* the index's weight_map: tensor -> shards[map_file] */
    size_t *map_file;
    size_t n_map;
    wctl_hfdir_file *att;     /* the other files: the attachments, in name order */
    size_t n_att;
} wctl_hfdir;

/* Read the model directory dir into *h (see weightctl_hfdir.c): 0, or 1
 * with the cause printed (a missing shard named, an attachment over the
 * cap, ...). *h is to be freed with wctl_hfdir_free either way. */
int wctl_hfdir_read(const ctl *x, const char *dir, wctl_hfdir *h);
/* Every tensor of the index is in the file it names (files[] opened from
 * h->shards in order). 0, or 1 with the cause printed. */
int wctl_hfdir_check(const char *dir, const wctl_hfdir *h, const wc_st_file *files);
void wctl_hfdir_free(wctl_hfdir *h);

/* -- the commands: each returns the exit status ----------------------------- */

int wctl_cmd_kv_ls(ctl *x, const char *prefix);         /* weightctl_kv.c */
int wctl_cmd_kv_put(ctl *x, const char *key, const char *path);
int wctl_cmd_kv_get(ctl *x, const char *key, const char *path);
int wctl_cmd_kv_rm(ctl *x, const char *key);
int wctl_cmd_kv(ctl *x, int argc, char **argv);          /* kv SUB ...: one of the above */
int wctl_cmd_put(ctl *x, int argc, char **argv);        /* weightctl_put.c */
int wctl_cmd_upsert(ctl *x, int argc, char **argv);
int wctl_cmd_get(ctl *x, int argc, char **argv);        /* weightctl_get.c */
int wctl_cmd_ls(ctl *x, int argc, char **argv);         /* weightctl_manage.c */
int wctl_cmd_info(ctl *x, const char *arg);
int wctl_cmd_exists(ctl *x, const char *arg);
int wctl_cmd_size(ctl *x, const char *arg);
int wctl_cmd_policy(ctl *x, int argc, char **argv);
int wctl_cmd_migrate(ctl *x, int argc, char **argv);
int wctl_cmd_op(ctl *x, int argc, char **argv);
int wctl_cmd_rm(ctl *x, int argc, char **argv);
int wctl_cmd_abort(ctl *x, int argc, char **argv);

#endif /* WM_WEIGHTCTL_H */
