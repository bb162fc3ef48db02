/* weightctl_put.c -- the commands that write a revision: `put` (safetensors
 * files as one revision, tensors byte-identical to an earlier one stored once
 * as aliases, or with --tp N one file per rank joined by the --split /
 * --replicate rules and checked by weightctl_tp.c first, or with --from-dir a
 * Hugging Face model directory: its shards and, as attachments, its other
 * small files) and `upsert` (generation G of a lineage replacing its base,
 * from files, TP rank files (--tp N, as put) or a model directory, put-first or delete-first, optionally
 * waited for). The files' own __metadata__ goes with the revision. */
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "wc_safetensors.h"
#include "weightctl.h"

/* -- put ------------------------------------------------------------------- */


/* The tensor called name in files[0..n) (the first one holding it; *file
 * set to its index), or NULL. */
static const wc_st_tensor *find_in_files(const wc_st_file *files, size_t n, const char *name,
                                         size_t *file)
{
    for (size_t i = 0; i < n; i++) {
        long k = wc_st_find(&files[i].header, name);
        if (k >= 0) {
            *file = i;
            return &files[i].header.tensors[k];
        }
    }
    return NULL;
}

/* t's dtype and shape as "F32 [2, 3]" into out[cap]. */
static void tensor_kind(const wc_st_tensor *t, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "%s [", wc_dtype_name(t->dtype));
    for (uint32_t d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(out + n, cap - n, "%s%" PRIu64, d ? ", " : "", t->shape[d]);
    if (n < cap) snprintf(out + n, cap - n, "]");
}

/* Print "weightctl: CMD: INVALID_ARGUMENT: --tie NAME=TARGET: cause" and
 * return WEIGHT_EINVALID_ARGUMENT. */
static int tie_error(const char *cmd, const wctl_tie *t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int tie_error(const char *cmd, const wctl_tie *t, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "weightctl: %s: INVALID_ARGUMENT: --tie %s=%s: ", cmd, t->name, t->target);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return WEIGHT_EINVALID_ARGUMENT;
}

/* One --tie against the tensors of files[0..n) (paths alike): a tie asserts
 * that NAME and TARGET are the same storage, so both must be tensors there,
 * TARGET not tied itself, and the two of one dtype, shape and bytes. 0, or
 * WEIGHT_EINVALID_ARGUMENT printed naming the tie and the cause. */
static int check_tie(const char *cmd, char **paths, const wc_st_file *files, size_t n,
                     const wctl_tie *ties, size_t n_ties, size_t j)
{
    const wctl_tie *tie = &ties[j];
    size_t fn = 0, ft = 0;
    const wc_st_tensor *name = find_in_files(files, n, tie->name, &fn);
    const wc_st_tensor *target = find_in_files(files, n, tie->target, &ft);
    const char *where = n == 1 ? paths[0] : "the files";
    for (size_t k = 0; k < j; k++)
        if (strcmp(ties[k].name, tie->name) == 0)
            return tie_error(cmd, tie, "%s is tied twice (also to %s)", tie->name, ties[k].target);
    if (name == NULL) return tie_error(cmd, tie, "%s is not a tensor of %s", tie->name, where);
    if (target == NULL) return tie_error(cmd, tie, "%s is not a tensor of %s", tie->target, where);
    for (size_t k = 0; k < n_ties; k++)
        if (strcmp(ties[k].name, tie->target) == 0)
            return tie_error(cmd, tie, "%s is itself tied (to %s): tie %s to %s", tie->target,
                             ties[k].target, tie->name, ties[k].target);
    if (name->dtype != target->dtype || name->ndim != target->ndim ||
        memcmp(name->shape, target->shape, name->ndim * sizeof *name->shape) != 0) {
        char a[256], b[256];
        tensor_kind(name, a, sizeof a);
        tensor_kind(target, b, sizeof b);
        return tie_error(cmd, tie, "%s is %s (in %s), %s is %s (in %s): a tie is one storage",
                         tie->name, a, paths[fn], tie->target, b, paths[ft]);
    }
    if (memcmp(files[fn].base + name->offset, files[ft].base + target->offset, name->bytes) != 0)
        return tie_error(cmd, tie, "the bytes of %s (in %s) differ from those of %s (in %s): a tie "
                         "is one storage", tie->name, paths[fn], tie->target, paths[ft]);
    return 0;
}

/* Everything about the tensors of the input files put and upsert check
 * before an import begins. Whole files (tp 1): no tensor name in two files.
 * Every --tie (with tp > 1 in each rank's file): check_tie. 0, or
 * WEIGHT_EINVALID_ARGUMENT printed as "weightctl: CMD: INVALID_ARGUMENT: ...". */
static int check_tensors(const char *cmd, char **paths, const wc_st_file *files, size_t n_files,
                         uint32_t tp, const wctl_tie *ties, size_t n_ties)
{
    /* each file's names are sorted: look each one up in the files before it */
    for (size_t i = 1; tp == 1 && i < n_files; i++) {
        const wc_st_header *h = &files[i].header;
        for (size_t k = 0; k < h->n_tensors; k++) {
            size_t first = 0;
            if (find_in_files(files, i, h->tensors[k].name, &first) == NULL) continue;
            fprintf(stderr, "weightctl: %s: INVALID_ARGUMENT: tensor %s is in both %s and %s: a "
                    "revision holds each name once\n", cmd, h->tensors[k].name, paths[first],
                    paths[i]);
            return WEIGHT_EINVALID_ARGUMENT;
        }
    }
    for (size_t j = 0; j < n_ties; j++) {
        for (uint32_t r = 0; r < (tp > 1 ? tp : 1); r++) {
            int rc = tp > 1 ? check_tie(cmd, paths + r, files + r, 1, ties, n_ties, j)
                            : check_tie(cmd, paths, files, n_files, ties, n_ties, j);
            if (rc < 0) return rc;
        }
    }
    return 0;
}

/* Add every tensor of the files to w. Explicit ties become aliases; a
 * tensor byte-identical to an earlier one of the same dtype and shape is
 * stored once (an alias), unless a tie names it as its target (an alias
 * cannot be a target). The ties were checked (check_tensors). 0 or the
 * writer's error. */
static int add_files(weight_writer *w, const wc_st_file *files, size_t n_files, const wctl_tie *ties,
                     size_t n_ties)
{
    int rc;
    for (size_t i = 0; i < n_files; i++) {
        const wc_st_header *h = &files[i].header;
        for (size_t k = 0; k < h->n_tensors; k++) {
            const wc_st_tensor *t = &h->tensors[k];
            const char *target = NULL;
            int is_target = 0;
            for (size_t j = 0; j < n_ties && !target; j++)
                if (strcmp(ties[j].name, t->name) == 0) target = ties[j].target;
            for (size_t j = 0; j < n_ties; j++)
                if (strcmp(ties[j].target, t->name) == 0) is_target = 1;
            for (size_t fi = 0; fi <= i && !target && !is_target && t->bytes > 0; fi++) {
                const wc_st_header *h2 = &files[fi].header;
                for (size_t k2 = 0; k2 < h2->n_tensors && !target; k2++) {
                    const wc_st_tensor *u = &h2->tensors[k2];
                    if (fi == i && k2 >= k) break;
                    int tied_u = 0;
                    for (size_t j = 0; j < n_ties; j++)
                        if (strcmp(ties[j].name, u->name) == 0) tied_u = 1;
                    if (!tied_u && u->dtype == t->dtype && u->ndim == t->ndim &&
                        u->bytes == t->bytes &&
                        memcmp(u->shape, t->shape, t->ndim * sizeof *t->shape) == 0 &&
                        memcmp(files[fi].base + u->offset, files[i].base + t->offset, t->bytes) == 0)
                        target = u->name;
                }
            }
            if (target) rc = weight_writer_alias(w, t->name, target);
            else rc = weight_writer_add_tensor(w, t->name, wc_dtype_name(t->dtype), t->ndim,
                                               t->shape, files[i].base + t->offset);
            if (rc < 0) return rc;
        }
    }
    return 0;
}

/* The __metadata__ pairs of the files (weight_mgmt.* aside: the provenance
 * of rank files, which weightctl_tp.c checks) added to w as the revision's
 * file metadata, so that get writes them back; a key in several files must
 * have one value. w NULL: only check. 0, the writer's error, or
 * INVALID_ARGUMENT printed naming both files. */
static int add_file_metadata(weight_writer *w, const char *cmd, char **paths,
                             const wc_st_file *files, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const wc_st_header *h = &files[i].header;
        for (size_t k = 0; k < h->n_meta; k++) {
            const wc_st_meta *p = &h->meta[k];
            int seen = 0, rc;
            if (strncmp(p->key, WCTL_TP_KEY_PREFIX, strlen(WCTL_TP_KEY_PREFIX)) == 0) continue;
            for (size_t j = 0; j < i && !seen; j++) {
                const wc_st_header *e = &files[j].header;
                for (size_t q = 0; q < e->n_meta && !seen; q++) {
                    if (strcmp(e->meta[q].key, p->key) != 0) continue;
                    if (strcmp(e->meta[q].value, p->value) != 0) {
                        fprintf(stderr, "weightctl: %s: INVALID_ARGUMENT: %s: __metadata__ '%s' is "
                                "'%s', but '%s' in %s\n", cmd, paths[i], p->key, p->value,
                                e->meta[q].value, paths[j]);
                        return WEIGHT_EINVALID_ARGUMENT;
                    }
                    seen = 1;
                }
            }
            if (!seen && w && (rc = weight_writer_add_file_metadata(w, p->key, p->value)) < 0)
                return rc;
        }
    }
    return 0;
}

/* wctl_failed for the commit of an import (what: the failed step); a
 * refusal for room in the segments also points to --payload-bytes of cmd.
 * Returns 1. */
static int import_failed(ctl *x, const char *cmd, const char *what, int rc)
{
    int status = wctl_failed(x, what, rc);
    if (rc == WEIGHT_EIO)
        fprintf(stderr, "weightctl: %s: the master was lost on the way (a failover, a restart): "
                "the same command again %s\n", cmd,
                strcmp(cmd, "put") == 0
                    ? "goes on with the import, or publishes the revision anew"
                    : "goes on with the claim, or starts a new one when it was aborted");
    if (rc == WEIGHT_ENOSPC && strstr(weight_store_last_error(x->ws), "no memory segment has room"))
        fprintf(stderr, "weightctl: %s: --payload-bytes N (at least 4096) cuts the revision into "
                "smaller payload objects, which may fit the free ranges the segments have left\n",
                cmd);
    return status;
}

/* Open the safetensors files paths[0..n) into files[] (zeroed by the
 * caller), then apply --payload-bytes (0: the default). 0, or 1 with the
 * cause printed as "weightctl: CMD: PATH: cause" (a directory pointed to
 * --from-dir); what was opened stays for the caller to close. */
static int open_inputs(ctl *x, const char *cmd, char **paths, size_t n, wc_st_file *files,
                       uint64_t payload)
{
    char err[512];
    int rc;
    for (size_t i = 0; i < n; i++) {
        if (wc_st_open(paths[i], &files[i], err, sizeof err) < 0) {
            struct stat st;
            int dir = stat(paths[i], &st) == 0 && S_ISDIR(st.st_mode);
            fprintf(stderr, "weightctl: %s: %s: %s%s\n", cmd, paths[i], err,
                    dir ? " (a model directory is read with --from-dir DIR)" : "");
            return 1;
        }
    }
    if (payload && (rc = weight_store_set_option(x->ws, WEIGHT_OPT_PAYLOAD_BYTES, payload)) < 0)
        return wctl_failed(x, cmd, rc);
    return 0;
}

/* "DIR/SHARD" for each shard of h (malloc'd array of malloc'd strings), or
 * NULL (out of memory, said). */
static char **dir_paths(const char *dir, const wctl_hfdir *h)
{
    char **p = calloc(h->n_shards ? h->n_shards : 1, sizeof *p);
    for (size_t i = 0; p && i < h->n_shards; i++) {
        size_t n = strlen(dir) + strlen(h->shards[i]) + 2;
        if ((p[i] = malloc(n)) == NULL) {
            for (size_t k = 0; k < i; k++) free(p[k]);
            free(p);
            p = NULL;
            break;
        }
        snprintf(p[i], n, "%s/%s", dir, h->shards[i]);
    }
    if (p == NULL) fprintf(stderr, "weightctl: put: out of memory\n");
    return p;
}

/* --from-dir: read the model directory into *hf and point *paths / *n at its
 * shards (free with close_inputs). 0, or 1 with the cause printed and
 * nothing left to free. */
static int dir_inputs(ctl *x, const char *dir, wctl_hfdir *hf, char ***paths, size_t *n)
{
    if (wctl_hfdir_read(x, dir, hf) != 0 || (*paths = dir_paths(dir, hf)) == NULL) {
        wctl_hfdir_free(hf);
        return 1;
    }
    *n = hf->n_shards;
    return 0;
}

/* Close the n input files (files may be NULL) and free what dir_inputs made
 * (from_dir NULL: paths are the command line's). */
static void close_inputs(const char *from_dir, wctl_hfdir *hf, char **paths, wc_st_file *files,
                         size_t n)
{
    for (size_t i = 0; files && i < n; i++) wc_st_close(&files[i]);
    free(files);
    if (from_dir != NULL) {
        for (size_t i = 0; i < n; i++) free(paths[i]);
        free(paths);
    }
    wctl_hfdir_free(hf);
}

/* put's and upsert's rank options (c: 'T' --tp, 's' --split, 'R'
 * --replicate) into tp and rs: 0, or the usage exit naming cmd's flag. */
static int tp_option(const char *cmd, int c, char *arg, uint64_t *tp, wctl_rules *rs)
{
    if (c == 'T') {
        if (wctl_parse_u64(arg, tp) < 0 || *tp == 0 || *tp > 4096)
            return wctl_bad_value(cmd, "--tp", arg, "a rank count from 1 to 4096");
        return 0;
    }
    if (wctl_rules_add(rs, arg, c == 's') < 0)
        return wctl_bad_value(cmd, c == 's' ? "--split" : "--replicate", arg,
                              c == 's' ? "PATTERN=DIM (DIM 0..7, at most 128 rules)"
                                       : "a PATTERN (at most 128 rules)");
    return 0;
}

int wctl_cmd_put(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {
        {"namespace", required_argument, NULL, 'n'}, {"resource", required_argument, NULL, 'r'},
        {"revision", required_argument, NULL, 'v'},  {"generation", required_argument, NULL, 'g'},
        {"policy", required_argument, NULL, 'p'},    {"mode", required_argument, NULL, 'o'},
        {"tie", required_argument, NULL, 't'},       {"payload-bytes", required_argument, NULL, 'b'},
        {"tp", required_argument, NULL, 'T'},        {"split", required_argument, NULL, 's'},
        {"replicate", required_argument, NULL, 'R'}, {"from-dir", required_argument, NULL, 'D'},
        {NULL, 0, NULL, 0}};
    const char *ns = NULL, *res = NULL, *rev = NULL, *from_dir = NULL;
    uint64_t gen = 1, payload = 0, tp = 1;
    wctl_rules rs = {.n = 0};
    weight_policy pol = {WEIGHT_RES_UNKNOWN, 0, WEIGHT_MODE_DEFAULT};
    int has_policy = 0, c, status = 1, rc;
    wctl_tie ties[64];
    size_t n_ties = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 'n': ns = optarg; break;
        case 'r': res = optarg; break;
        case 'v': rev = optarg; break;
        case 'g':
            if (wctl_parse_u64(optarg, &gen) < 0 || gen == 0)
                return wctl_bad_value("put", "--generation", optarg, "a positive integer");
            break;
        case 'p':
            if (wctl_parse_residency(optarg, &pol.preferred, &pol.mixed_hot_ratio) < 0)
                return wctl_bad_value("put", "--policy", optarg, WCTL_RESIDENCY_FORMS);
            has_policy = 1;
            break;
        case 'o':
            if (wctl_parse_mode(optarg, &pol.mode) < 0)
                return wctl_bad_value("put", "--mode", optarg, "pinned, manual or auto");
            has_policy = 1;
            break;
        case 't':
            if (wctl_parse_tie(optarg, ties, &n_ties) < 0)
                return wctl_bad_value("put", "--tie", optarg,
                                      "NAME=TARGET of two tensors (at most 64)");
            break;
        case 'b':
            if (wctl_parse_u64(optarg, &payload) < 0)
                return wctl_bad_value("put", "--payload-bytes", optarg, "a number of bytes");
            break;
        case 'T':
        case 's':
        case 'R':
            if ((rc = tp_option("put", c, optarg, &tp, &rs)) != 0) return rc;
            break;
        case 'D': from_dir = optarg; break;
        default: return wctl_opt_error("put", c, argv);
        }
    }
    if (ns == NULL || res == NULL || rev == NULL)
        return wctl_bad_usage("put", "--namespace, --resource and --revision are required");
    if (from_dir != NULL && (optind < argc || tp > 1))
        return wctl_bad_usage("put", "--from-dir takes the files of the directory: no FILE, no --tp");
    if (from_dir == NULL && optind >= argc) return wctl_bad_usage("put", "no safetensors FILE given");
    if (tp == 1 && rs.n > 0)
        return wctl_bad_usage("put", "--split and --replicate describe rank files: give --tp N");
    if (tp > 1 && (uint64_t)(argc - optind) != tp) {
        fprintf(stderr, "weightctl: put: --tp %" PRIu64 " takes one file per rank, in rank order; "
                "%d given\n", tp, argc - optind);
        return 2;
    }
    weight_identity id;
    if (wctl_check_components("put", x->tenant, ns, res, rev) != 0) return 2;
    if (weight_identity_set(&id, x->tenant, ns, res, rev, gen) < 0) {
        fprintf(stderr, "weightctl: put: INVALID_ARGUMENT: not an identity\n");
        return 2;
    }
    wctl_hfdir hf;
    char **paths = argv + optind;
    size_t n_files = (size_t)(argc - optind);
    memset(&hf, 0, sizeof hf);
    /* the shards and attachments, all checked before any import */
    if (from_dir != NULL && dir_inputs(x, from_dir, &hf, &paths, &n_files) != 0) return 1;
    wc_st_file *files = calloc(n_files, sizeof *files);
    weight_writer *w = NULL;
    wctl_progress pr;
    wctl_progress_init(x, &pr, "put");
    char text[2048];
    if (files == NULL) goto close_files;
    if (wctl_open_weights(x) < 0) goto close_files;
    if (open_inputs(x, "put", paths, n_files, files, payload) != 0) goto close_files;
    if (from_dir != NULL && wctl_hfdir_check(from_dir, &hf, files) != 0) goto close_files;
    if (tp > 1 ? wctl_tp_check_ranks(paths, files, (uint32_t)tp, &rs, ties, n_ties) < 0
               : wctl_tp_check_whole("put", paths, files, n_files) < 0)
        goto close_files; /* refused before anything exists on the master */
    if (check_tensors("put", paths, files, n_files, (uint32_t)tp, ties, n_ties) < 0 ||
        add_file_metadata(NULL, "put", paths, files, n_files) < 0)
        goto close_files;
    wctl_id_text(&id, text, sizeof text);
    if ((rc = weight_put_begin(x->ws, &id, has_policy ? &pol : NULL, &w)) < 0) {
        char what[2100];
        snprintf(what, sizeof what, "put %s", text);
        status = wctl_failed(x, what, rc);
        goto close_files;
    }
    rc = tp > 1 ? wctl_tp_add_shards(w, files, paths, (uint32_t)tp, &rs, ties, n_ties)
                : add_files(w, files, n_files, ties, n_ties);
    if (rc == 0) rc = add_file_metadata(w, "put", paths, files, n_files);
    for (size_t i = 0; rc == 0 && i < hf.n_att; i++)
        rc = weight_writer_add_attachment(w, hf.att[i].name, hf.att[i].data, hf.att[i].bytes);
    if (rc < 0) {
        status = wctl_failed(x, "put", rc);
        weight_writer_abort(w);
        goto close_files;
    }
    weight_metadata md;
    weight_store_set_progress(x->ws, wctl_progress_cb, &pr);
    wctl_sigint_arm(x->ws); /* Ctrl-C: the commit stops and aborts its import */
    rc = weight_writer_commit(w, &md);
    wctl_sigint_disarm();
    wctl_progress_end(&pr);
    if (rc < 0) {
        char what[2100];
        snprintf(what, sizeof what, "put %s", text);
        status = import_failed(x, "put", what, rc);
        if (rc == WEIGHT_ECANCELED && wctl_interrupted()) status = 130;
        goto close_files;
    }
    if (x->json) {
        wctl_json_metadata(&md, NULL);
        putchar('\n');
    } else {
        char b[32];
        wctl_human((double)md.logical_bytes, b, sizeof b);
        printf("published %s: %s (%" PRIu64 " bytes) in %" PRIu64 " payload objects, %s %s%s",
               text, b, md.logical_bytes, md.payload_count, weight_availability_name(md.availability),
               weight_residency_name(md.residency),
               md.operation_id ? " (converging to the preferred residency)" : "");
        if (hf.n_att) printf("; %zu tensor file(s) and %zu attachment(s) from %s", hf.n_shards,
                             hf.n_att, from_dir);
        putchar('\n');
    }
    status = 0;
close_files:
    close_inputs(from_dir, &hf, paths, files, n_files);
    return status;
}

/* -- upsert -------------------------------------------------------------------- */

static int print_claim(ctl *x, const weight_upsert_claim *c)
{
    char b[1200], t[1200];
    wctl_id_text(&c->base, b, sizeof b);
    wctl_id_text(&c->target, t, sizeof t);
    if (x->json) {
        printf("{\"request_id\":");
        wctl_json_str(c->request_id);
        printf(",\"base\":");
        wctl_json_identity(&c->base);
        printf(",\"target\":");
        wctl_json_identity(&c->target);
        printf(",\"mode\":\"%s\",\"phase\":\"%s\",\"expected_metadata_generation\":%" PRIu64
               ",\"committed_watermark\":%" PRIu64 ",\"error\":",
               c->mode == WEIGHT_UPSERT_DELETE_FIRST ? "DELETE_FIRST" : "PUT_FIRST",
               weight_upsert_phase_name(c->phase), c->expected_metadata_generation,
               c->committed_watermark);
        wctl_json_str(c->error);
        printf("}\n");
    } else {
        printf("claim %s: %s -> %s (%s) phase %s, watermark %" PRIu64 "%s%s\n", c->request_id, b, t,
               c->mode == WEIGHT_UPSERT_DELETE_FIRST ? "delete-first" : "put-first",
               weight_upsert_phase_name(c->phase), c->committed_watermark, c->error[0] ? ": " : "",
               c->error);
    }
    return 0;
}

/* What upsert --wait has told of the claim it waits for. */
typedef struct upsert_wait_note {
    int phase;     /* the phase last told (0: none yet) */
    double since;  /* when it was first seen in that phase (wctl_now) */
    double said;   /* when that was last told */
} upsert_wait_note;

#define UPSERT_WAIT_SAY_S 30.0 /* a phase that lasts is told again this often */

/* Tell on stderr each phase the claim --wait waits for enters, and again
 * every UPSERT_WAIT_SAY_S it stays there with what it waits for, so a
 * wait that lasts (leases on the base, a leader that cannot append the
 * next phase) is never silent. */
static void upsert_wait_say(upsert_wait_note *n, const weight_upsert_claim *c)
{
    double now = wctl_now();
    if (c->phase != n->phase) {
        n->phase = c->phase;
        n->since = n->said = now;
        fprintf(stderr, "weightctl: upsert: claim %s: %s\n", c->request_id,
                weight_upsert_phase_name(c->phase));
        return;
    }
    if (now - n->said < UPSERT_WAIT_SAY_S) return;
    n->said = now;
    const char *why = c->phase == WEIGHT_PHASE_DRAINING_BASE
                          ? ": the base's leases must end first (weightctl info shows them)"
                          : ": the leader's log says why";
    fprintf(stderr, "weightctl: upsert: claim %s: still %s after %llu s%s\n", c->request_id,
            weight_upsert_phase_name(c->phase), (unsigned long long)(now - n->since), why);
}

/* upsert BASE_ID --generation G [--mode put-first|delete-first]
 *        [--request-id X] [--expect-generation M] [--policy ..] [--wait]
 *        FILE... | --from-dir DIR (a model directory, as put --from-dir)
 * Without --expect-generation the base's current metadata generation is
 * read first -- unless --request-id names the lineage's claim: a retry
 * then passes the generation that claim was made at (the base may be
 * gone). --wait: until the claim is COMMITTED or ABORTED. Exit 0 on
 * success. */
/* `upsert status ID`: the claim of ID's lineage (its generation, if given,
 * is ignored: a lineage has one claim at a time). Exit 0 when there is one,
 * 1 on NOT_FOUND or another failure. */
static int upsert_status(ctl *x, int argc, char **argv)
{
    weight_identity id;
    weight_upsert_claim claim;
    int has_gen = 0, rc;
    if (argc != 3) return wctl_bad_usage("upsert", "the form is: upsert status ID");
    if ((rc = wctl_parse_id_text(x, argv[2], &id, &has_gen)) != 0) return rc;
    if (!has_gen) id.generation = 1;
    if (wctl_open_weights(x) < 0) return 1;
    char what[1200];
    snprintf(what, sizeof what, "upsert status %s", argv[2]);
    if ((rc = weight_upsert_status(x->ws, &id, &claim)) < 0) return wctl_failed(x, what, rc);
    return print_claim(x, &claim);
}

/* `upsert abort ID`: abort the open claim of ID's lineage (a trainer that
 * died mid-upsert) the way its own writer would: rejoin it with its request
 * id, base generation, target and mode (weight_upsert answers the target's
 * writer), abort that writer's import, and follow the claim to ABORTED (the
 * lineage takes another target then). Only while the base is intact: a
 * PUT_FIRST claim before its target is READY (CLAIMED, IMPORTING_TARGET).
 * Anything else is refused naming the phase, nothing changed: no open
 * claim, a DELETE_FIRST claim (its base goes first; the same upsert resumes
 * it), a claim past its import (it goes on to COMMITTED). 0 once ABORTED,
 * else 1 with the cause printed. */
static int upsert_abort(ctl *x, int argc, char **argv)
{
    weight_identity id;
    weight_upsert_claim claim, now;
    weight_writer *w = NULL;
    int has_gen = 0, rc;
    if (argc != 3) return wctl_bad_usage("upsert", "the form is: upsert abort ID");
    if ((rc = wctl_parse_id_text(x, argv[2], &id, &has_gen)) != 0) return rc;
    if (!has_gen) id.generation = 1;
    if (wctl_open_weights(x) < 0) return 1;
    char what[1200];
    snprintf(what, sizeof what, "upsert abort %s", argv[2]);
    if ((rc = weight_upsert_status(x->ws, &id, &claim)) < 0) return wctl_failed(x, what, rc);
    const char *phase = weight_upsert_phase_name(claim.phase);
    if (claim.phase == WEIGHT_PHASE_COMMITTED || claim.phase == WEIGHT_PHASE_ABORTED) {
        fprintf(stderr, "weightctl: %s: CONFLICT: the lineage has no open claim (claim %s is %s); "
                "nothing to abort\n", what, claim.request_id, phase);
        return 1;
    }
    if (claim.mode != WEIGHT_UPSERT_PUT_FIRST) {
        fprintf(stderr, "weightctl: %s: CONFLICT: claim %s is DELETE_FIRST (phase %s): its base "
                "is deleted before the target, so it cannot be rolled back; the same upsert "
                "resumes it\n", what, claim.request_id, phase);
        return 1;
    }
    if (claim.phase != WEIGHT_PHASE_CLAIMED && claim.phase != WEIGHT_PHASE_IMPORTING_TARGET) {
        fprintf(stderr, "weightctl: %s: CONFLICT: claim %s is past its target's import (phase "
                "%s): the target is READY and the claim goes on to COMMITTED\n", what,
                claim.request_id, phase);
        return 1;
    }
    rc = weight_upsert(x->ws, &claim.base, claim.target.generation, claim.mode, claim.request_id,
                       claim.expected_metadata_generation, NULL, 0, &now, &w);
    if (rc < 0) return wctl_failed(x, what, rc);
    if (w == NULL) {
        fprintf(stderr, "weightctl: %s: CONFLICT: claim %s wrote its target already (phase %s); "
                "it goes on to COMMITTED\n", what, claim.request_id,
                weight_upsert_phase_name(now.phase));
        return 1;
    }
    weight_writer_abort(w); /* the target's import: the claim ends ABORTED, the base intact */
    fprintf(stderr, "weightctl: %s: aborting claim %s (phase %s, target %s@%llu)\n", what,
            claim.request_id, phase, claim.target.revision,
            (unsigned long long)claim.target.generation);
    double deadline = wctl_now() + 60;
    for (;;) {
        if ((rc = weight_upsert_status(x->ws, &id, &now)) < 0) return wctl_failed(x, what, rc);
        if (strcmp(now.request_id, claim.request_id) != 0 || now.phase == WEIGHT_PHASE_ABORTED ||
            now.phase == WEIGHT_PHASE_COMMITTED)
            break;
        if (wctl_now() >= deadline) {
            fprintf(stderr, "weightctl: %s: TIMEOUT: claim %s still %s 60 s after its target's "
                    "import was aborted (weightctl upsert status follows it)\n", what,
                    claim.request_id, weight_upsert_phase_name(now.phase));
            return 1;
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    print_claim(x, &now);
    return now.phase == WEIGHT_PHASE_ABORTED ? 0 : 1;
}

int wctl_cmd_upsert(ctl *x, int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "status") == 0) return upsert_status(x, argc, argv);
    if (argc >= 2 && strcmp(argv[1], "abort") == 0) return upsert_abort(x, argc, argv);
    static const struct option opts[] = {
        {"generation", required_argument, NULL, 'g'}, {"mode", required_argument, NULL, 'm'},
        {"request-id", required_argument, NULL, 'q'}, {"expect-generation", required_argument, NULL, 'e'},
        {"policy", required_argument, NULL, 'p'},     {"tie", required_argument, NULL, 't'},
        {"wait", no_argument, NULL, 'w'},             {"payload-bytes", required_argument, NULL, 'b'},
        {"from-dir", required_argument, NULL, 'D'},   {"tp", required_argument, NULL, 'T'},
        {"split", required_argument, NULL, 's'},      {"replicate", required_argument, NULL, 'R'},
        {NULL, 0, NULL, 0}};
    uint64_t gen = 0, expect = 0, payload = 0, tp = 1;
    wctl_rules rs = {.n = 0};
    weight_upsert_mode mode = WEIGHT_UPSERT_PUT_FIRST;
    const char *request_id = NULL, *from_dir = NULL;
    weight_policy pol = {WEIGHT_RES_UNKNOWN, 0, WEIGHT_MODE_DEFAULT};
    int has_policy = 0, wait = 0, c, status = 1, rc;
    wctl_tie ties[64];
    size_t n_ties = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 'g':
            if (wctl_parse_u64(optarg, &gen) < 0 || gen == 0)
                return wctl_bad_value("upsert", "--generation", optarg, "a positive integer");
            break;
        case 'm':
            if (strcmp(optarg, "put-first") == 0) mode = WEIGHT_UPSERT_PUT_FIRST;
            else if (strcmp(optarg, "delete-first") == 0) mode = WEIGHT_UPSERT_DELETE_FIRST;
            else return wctl_bad_value("upsert", "--mode", optarg, "put-first or delete-first");
            break;
        case 'q': request_id = optarg; break;
        case 'e':
            if (wctl_parse_u64(optarg, &expect) < 0 || expect == 0)
                return wctl_bad_value("upsert", "--expect-generation", optarg, "a positive integer");
            break;
        case 'p':
            if (wctl_parse_residency(optarg, &pol.preferred, &pol.mixed_hot_ratio) < 0)
                return wctl_bad_value("upsert", "--policy", optarg, WCTL_RESIDENCY_FORMS);
            has_policy = 1;
            break;
        case 't':
            if (wctl_parse_tie(optarg, ties, &n_ties) < 0)
                return wctl_bad_value("upsert", "--tie", optarg,
                                      "NAME=TARGET of two tensors (at most 64)");
            break;
        case 'w': wait = 1; break;
        case 'b':
            if (wctl_parse_u64(optarg, &payload) < 0)
                return wctl_bad_value("upsert", "--payload-bytes", optarg, "a number of bytes");
            break;
        case 'D': from_dir = optarg; break;
        case 'T':
        case 's':
        case 'R':
            if ((rc = tp_option("upsert", c, optarg, &tp, &rs)) != 0) return rc;
            break;
        default: return wctl_opt_error("upsert", c, argv);
        }
    }
    if (gen == 0) return wctl_bad_usage("upsert", "--generation is required");
    if (from_dir == NULL && optind + 1 >= argc)
        return wctl_bad_usage("upsert", "give BASE_ID and at least one FILE");
    if (from_dir != NULL && optind + 1 != argc)
        return wctl_bad_usage("upsert", "--from-dir takes the files of the directory: BASE_ID, no FILE");
    if (from_dir != NULL && tp > 1)
        return wctl_bad_usage("upsert", "--from-dir takes the files of the directory: no --tp");
    if (tp == 1 && rs.n > 0)
        return wctl_bad_usage("upsert", "--split and --replicate describe rank files: give --tp N");
    if (tp > 1 && (uint64_t)(argc - optind - 1) != tp) {
        fprintf(stderr, "weightctl: upsert: --tp %" PRIu64 " takes one file per rank, in rank "
                "order; %d given\n", tp, argc - optind - 1);
        return 2;
    }
    wctl_tp_command("upsert");
    weight_identity base;
    if (wctl_open_weights(x) < 0) return 1;
    if ((rc = wctl_parse_id(x, argv[optind], &base)) != 0) return rc;
    optind++;
    char **paths = argv + optind;
    size_t n_files = (size_t)(argc - optind);
    wctl_hfdir hf;
    memset(&hf, 0, sizeof hf);
    /* the shards and attachments, all checked before the claim */
    if (from_dir != NULL && dir_inputs(x, from_dir, &hf, &paths, &n_files) != 0) return 1;
    wc_st_file *files = calloc(n_files ? n_files : 1, sizeof *files);
    weight_writer *w = NULL;
    weight_upsert_claim claim;
    wctl_progress pr;
    wctl_progress_init(x, &pr, "upsert");
    if (files == NULL) goto close_files;
    if (open_inputs(x, "upsert", paths, n_files, files, payload) != 0 ||
        (from_dir != NULL && wctl_hfdir_check(from_dir, &hf, files) != 0) ||
        (tp > 1 ? wctl_tp_check_ranks(paths, files, (uint32_t)tp, &rs, ties, n_ties) < 0
                : wctl_tp_check_whole("upsert", paths, files, n_files) < 0) ||
        check_tensors("upsert", paths, files, n_files, (uint32_t)tp, ties, n_ties) < 0 ||
        add_file_metadata(NULL, "upsert", paths, files, n_files) < 0)
        goto close_files;
    if (expect == 0 && request_id != NULL) {
        /* A retry of the lineage's claim: the generation the first call
         * used, not the base's now (a committed claim deleted the base). */
        weight_upsert_claim prior;
        if (weight_upsert_status(x->ws, &base, &prior) == 0 &&
            strcmp(prior.request_id, request_id) == 0) {
            expect = prior.expected_metadata_generation;
            fprintf(stderr, "weightctl: upsert: request %s is the lineage's claim (phase %s): "
                    "retried with its arguments\n", request_id, weight_upsert_phase_name(prior.phase));
        }
    }
    if ((status = wctl_fence(x, "upsert", &base, &expect)) != 0) goto close_files;
    status = 1;
    rc = weight_upsert(x->ws, &base, gen, mode, request_id, expect, has_policy ? &pol : NULL, 0,
                       &claim, &w);
    char fresh[160];
    if (rc == WEIGHT_ECONFLICT && request_id == NULL && claim.phase == WEIGHT_PHASE_ABORTED) {
        /* The claim these arguments name (their derived id) ended ABORTED,
         * e.g. its import was lost with the master: nothing to go on with,
         * so this run is a new attempt, under an id of its own. */
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        snprintf(fresh, sizeof(fresh), "%.100s-%llx", claim.request_id,
                 (unsigned long long)now.tv_sec * 1000000000ull + (unsigned long long)now.tv_nsec);
        fprintf(stderr, "weightctl: upsert: claim %s of these arguments was aborted (%s): a new "
                "claim %s starts (--request-id %s goes on with it)\n", claim.request_id,
                claim.error[0] ? claim.error : "no reason recorded", fresh, fresh);
        request_id = fresh;
        rc = weight_upsert(x->ws, &base, gen, mode, request_id, expect, has_policy ? &pol : NULL,
                           0, &claim, &w);
    }
    if (rc < 0) {
        status = wctl_failed(x, "upsert", rc);
        goto close_files;
    }
    if (w == NULL)
        /* a retry past the import: the target is what the first call wrote */
        fprintf(stderr, "weightctl: upsert: the target of request %s is written already: the "
                "files given now are not sent (nor compared with it)\n", claim.request_id);
    if (w != NULL) {
        rc = tp > 1 ? wctl_tp_add_shards(w, files, paths, (uint32_t)tp, &rs, ties, n_ties)
                    : add_files(w, files, n_files, ties, n_ties);
        if (rc == 0) rc = add_file_metadata(w, "upsert", paths, files, n_files);
        for (size_t i = 0; rc == 0 && i < hf.n_att; i++)
            rc = weight_writer_add_attachment(w, hf.att[i].name, hf.att[i].data, hf.att[i].bytes);
        if (rc < 0) {
            status = wctl_failed(x, "upsert", rc);
            weight_writer_abort(w); /* refused by the master for a DELETE_FIRST target */
            goto close_files;
        }
        weight_store_set_progress(x->ws, wctl_progress_cb, &pr);
        wctl_sigint_arm(x->ws);
        rc = weight_writer_commit(w, NULL);
        wctl_sigint_disarm();
        wctl_progress_end(&pr);
        if (rc < 0) {
            status = import_failed(x, "upsert", "upsert (target import)", rc);
            if (rc == WEIGHT_ECANCELED && wctl_interrupted()) status = 130;
            goto close_files;
        }
    }
    if ((rc = weight_upsert_status(x->ws, &base, &claim)) < 0) {
        status = wctl_failed(x, "upsert status", rc);
        goto close_files;
    }
    upsert_wait_note note = {0};
    while (wait && claim.phase != WEIGHT_PHASE_COMMITTED && claim.phase != WEIGHT_PHASE_ABORTED) {
        upsert_wait_say(&note, &claim);
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
        if ((rc = weight_upsert_status(x->ws, &base, &claim)) < 0) {
            status = wctl_failed(x, "upsert status", rc);
            goto close_files;
        }
    }
    print_claim(x, &claim);
    status = claim.phase == WEIGHT_PHASE_ABORTED ? 1 : 0;
close_files:
    close_inputs(from_dir, &hf, paths, files, n_files);
    return status;
}
