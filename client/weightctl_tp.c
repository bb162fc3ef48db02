/* weightctl_tp.c -- tensor-parallel rank files: the provenance `get --tp`
 * writes into each file's safetensors __metadata__, and the checks `put`
 * makes before one byte of an import exists on the master.
 *
 * A rank file written by get carries four pairs (beside the metadata the
 * source revision keeps): weight_mgmt.tp (N), weight_mgmt.rank (R),
 * weight_mgmt.source (the revision's ID) and weight_mgmt.split (a JSON object
 * naming every tensor that was split, with its dimension; the others were
 * replicated). put --tp N checks them: every file carries them or none does,
 * each names --tp N, the ranks are 0 .. N-1 in the order given (a swapped or
 * repeated file is refused naming it), one source, one split, and the split
 * is the one the --split / --replicate rules given resolve to. Files without
 * them are checked by what their shapes and bytes can show (the shapes of
 * add_shards, and no two ranks holding the same bytes in every split tensor);
 * README says what that cannot detect. A plain put refuses a file that says
 * it is one rank of several. Every refusal names the file and the cause. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "weightctl.h"

/* The command the refusals of rank files name: put, or upsert
 * (wctl_tp_command). weightctl runs one command per process. */
static const char *tp_cmd = "put";

void wctl_tp_command(const char *cmd) { tp_cmd = cmd; }

/* Print "weightctl: CMD: INVALID_ARGUMENT: PATH: [tensor NAME: ]..." (name
 * NULL: no tensor) and return INVALID_ARGUMENT. */
static int refuse(const char *cmd, const char *path, const char *name, const char *fmt,
                  va_list ap)
{
    fprintf(stderr, "weightctl: %s: INVALID_ARGUMENT: %s: ", cmd, path);
    if (name != NULL) fprintf(stderr, "tensor %s: ", name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    return WEIGHT_EINVALID_ARGUMENT;
}

/* Why a file is refused, as refuse prints it. */
static int file_error(const char *cmd, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int file_error(const char *cmd, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = refuse(cmd, path, NULL, fmt, ap);
    va_end(ap);
    return rc;
}

/* -- what get writes ---------------------------------------------------------- */

int wctl_tp_meta_init(wctl_tp_meta *m, uint32_t tp, uint32_t rank, const char *source,
                      const char *const *names, const int *split_dim, size_t n)
{
    memset(m, 0, sizeof *m);
    json_t *split = json_object();
    if (split == NULL) return WEIGHT_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (split_dim[i] < 0) continue;
        if (json_object_set_new(split, names[i], json_integer(split_dim[i])) < 0) {
            json_decref(split);
            return WEIGHT_EINVALID_ARGUMENT; /* a name that is not UTF-8 */
        }
    }
    m->split = json_dumps(split, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(split);
    m->source = strdup(source);
    if (m->split == NULL || m->source == NULL) {
        wctl_tp_meta_free(m);
        return WEIGHT_ENOMEM;
    }
    snprintf(m->tp, sizeof m->tp, "%" PRIu32, tp);
    snprintf(m->rank, sizeof m->rank, "%" PRIu32, rank);
    m->pairs[0] = (wc_st_meta){(char *)WCTL_TP_KEY_RANK, m->rank};
    m->pairs[1] = (wc_st_meta){(char *)WCTL_TP_KEY_SOURCE, m->source};
    m->pairs[2] = (wc_st_meta){(char *)WCTL_TP_KEY_SPLIT, m->split};
    m->pairs[3] = (wc_st_meta){(char *)WCTL_TP_KEY_TP, m->tp};
    return 0;
}

void wctl_tp_meta_free(wctl_tp_meta *m)
{
    if (m == NULL) return;
    free(m->split);
    free(m->source);
    memset(m, 0, sizeof *m);
}

/* -- what put checks ---------------------------------------------------------- */

/* The value of __metadata__ key in h, or NULL. */
static const char *meta_get(const wc_st_header *h, const char *key)
{
    for (size_t i = 0; i < h->n_meta; i++)
        if (strcmp(h->meta[i].key, key) == 0) return h->meta[i].value;
    return NULL;
}

int wctl_tp_check_whole(const char *cmd, char **paths, const wc_st_file *files, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *tp = meta_get(&files[i].header, WCTL_TP_KEY_TP);
        const char *rank = meta_get(&files[i].header, WCTL_TP_KEY_RANK);
        if (tp == NULL || strcmp(tp, "1") == 0) continue;
        return file_error(cmd, paths[i],
                          "rank %s of a %s-way split (" WCTL_TP_KEY_TP " in its __metadata__), "
                          "not a whole model: %s every rank's file with --tp %s",
                          rank ? rank : "?", tp, cmd, tp);
    }
    return 0;
}

/* The target of name among the --tie rules, or NULL. */
static const char *tie_target(const wctl_tie *ties, size_t n_ties, const char *name)
{
    for (size_t j = 0; j < n_ties; j++)
        if (strcmp(ties[j].name, name) == 0) return ties[j].target;
    return NULL;
}

/* The split recorded in rank 0's file against the one rs resolves to, for
 * every tensor of the file that is not tied. 0 or INVALID_ARGUMENT (printed). */
static int check_split(const char *path, const wc_st_header *h, const char *text,
                       const wctl_rules *rs, const wctl_tie *ties, size_t n_ties)
{
    json_error_t jerr;
    const char *name;
    json_t *v;
    int rc = 0;
    json_t *split = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(split)) {
        json_decref(split);
        return file_error(tp_cmd, path, WCTL_TP_KEY_SPLIT " in its __metadata__ is not a JSON "
                          "object of tensor names and dimensions");
    }
    json_object_foreach(split, name, v) {
        long i = wc_st_find(h, name);
        if (!json_is_integer(v) || i < 0 || json_integer_value(v) < 0 ||
            json_integer_value(v) >= h->tensors[i].ndim) {
            rc = file_error(tp_cmd, path, WCTL_TP_KEY_SPLIT " in its __metadata__ names "
                            "tensor %s, %s", name, i < 0 ? "which is not in the file"
                                                         : "with no such dimension");
            goto free_split;
        }
    }
    for (size_t k = 0; k < h->n_tensors; k++) {
        const wc_st_tensor *t = &h->tensors[k];
        uint32_t dim = 0;
        if (tie_target(ties, n_ties, t->name)) continue;
        int split_now = wctl_rules_decide(rs, t->name, t->ndim, &dim);
        json_t *was = json_object_get(split, t->name);
        if (was == NULL && !split_now) continue;
        if (was != NULL && split_now && (uint32_t)json_integer_value(was) == dim) continue;
        char cut[64], given[64];
        if (was) snprintf(cut, sizeof cut, "split along dimension %" JSON_INTEGER_FORMAT,
                          json_integer_value(was));
        else snprintf(cut, sizeof cut, "replicated");
        if (split_now) snprintf(given, sizeof given, "split it along dimension %" PRIu32, dim);
        else snprintf(given, sizeof given, "replicate it");
        rc = file_error(tp_cmd, path, "tensor %s was cut %s (" WCTL_TP_KEY_SPLIT " in its "
                        "__metadata__), the --split / --replicate rules given %s: give the "
                        "rules the files were cut with", t->name, cut, given);
        goto free_split;
    }
free_split:
    json_decref(split);
    return rc;
}

/* The provenance pairs of every rank file against each other, --tp and the
 * rules. 0 or INVALID_ARGUMENT (printed). */
static int check_provenance(char **paths, const wc_st_file *files, uint32_t tp,
                            const wctl_rules *rs, const wctl_tie *ties, size_t n_ties)
{
    const wc_st_header *h0 = &files[0].header;
    const char *src0 = meta_get(h0, WCTL_TP_KEY_SOURCE);
    const char *split0 = meta_get(h0, WCTL_TP_KEY_SPLIT);
    int rc = WEIGHT_ENOMEM;
    uint32_t *holder = malloc(tp * sizeof *holder);    /* by rank: the file holding it */
    if (holder == NULL) return rc;
    for (uint32_t r = 0; r < tp; r++) holder[r] = UINT32_MAX;
    for (uint32_t r = 0; r < tp; r++) {
        const wc_st_header *h = &files[r].header;
        const char *ttext = meta_get(h, WCTL_TP_KEY_TP), *rtext = meta_get(h, WCTL_TP_KEY_RANK);
        const char *src = meta_get(h, WCTL_TP_KEY_SOURCE), *split = meta_get(h, WCTL_TP_KEY_SPLIT);
        uint64_t ftp, frank;
        if (ttext == NULL || rtext == NULL || src == NULL || split == NULL) {
            rc = file_error(tp_cmd, paths[r], "no %s in its __metadata__, which rank 0's %s has "
                            "(files of different gets?)",
                            ttext == NULL ? WCTL_TP_KEY_TP : rtext == NULL ? WCTL_TP_KEY_RANK
                            : src == NULL ? WCTL_TP_KEY_SOURCE : WCTL_TP_KEY_SPLIT, paths[0]);
            goto free_holder;
        }
        if (wctl_parse_u64(ttext, &ftp) < 0 || ftp == 0) {
            rc = file_error(tp_cmd, paths[r], WCTL_TP_KEY_TP " in its __metadata__ is '%s', not "
                            "a rank count", ttext);
            goto free_holder;
        }
        if (ftp != tp) {
            rc = file_error(tp_cmd, paths[r], "cut for --tp %" PRIu64 " (" WCTL_TP_KEY_TP " in its "
                            "__metadata__), not --tp %" PRIu32, ftp, tp);
            goto free_holder;
        }
        if (wctl_parse_u64(rtext, &frank) < 0 || frank >= tp) {
            rc = file_error(tp_cmd, paths[r], WCTL_TP_KEY_RANK " in its __metadata__ is '%s', not "
                            "a rank below %" PRIu32, rtext, tp);
            goto free_holder;
        }
        if (holder[frank] != UINT32_MAX) {
            rc = file_error(tp_cmd, paths[r], "holds rank %" PRIu64 " (" WCTL_TP_KEY_RANK " in its "
                            "__metadata__) as %s does: the same rank's file twice", frank,
                            paths[holder[frank]]);
            goto free_holder;
        }
        holder[frank] = r;
        if (frank != r) {
            rc = file_error(tp_cmd, paths[r], "holds rank %" PRIu64 " (" WCTL_TP_KEY_RANK " in its "
                            "__metadata__) but is given as rank %" PRIu32 ": give the files in "
                            "rank order", frank, r);
            goto free_holder;
        }
        if (strcmp(src, src0) != 0) {
            rc = file_error(tp_cmd, paths[r], "cut from %s, rank 0's %s from %s (" WCTL_TP_KEY_SOURCE
                            " in their __metadata__)", src, paths[0], src0);
            goto free_holder;
        }
        if (strcmp(split, split0) != 0) {
            rc = file_error(tp_cmd, paths[r], "cut by other split rules than rank 0's %s ("
                            WCTL_TP_KEY_SPLIT " in their __metadata__)", paths[0]);
            goto free_holder;
        }
    }
    rc = check_split(paths[0], h0, split0, rs, ties, n_ties);
free_holder:
    free(holder);
    return rc;
}

/* FNV-1a of the first and last 4 KiB of every split tensor's shard in file f
 * (tensors as named by h0): a cheap key under which identical rank files
 * collide. */
static uint64_t shard_fingerprint(const wc_st_file *f, const wc_st_header *h0,
                                  const wctl_rules *rs, const wctl_tie *ties, size_t n_ties)
{
    uint64_t x = 1469598103934665603ull;
    for (size_t k = 0; k < h0->n_tensors; k++) {
        uint32_t dim;
        const wc_st_tensor *t0 = &h0->tensors[k];
        if (tie_target(ties, n_ties, t0->name) || !wctl_rules_decide(rs, t0->name, t0->ndim, &dim))
            continue;
        long i = wc_st_find(&f->header, t0->name);
        if (i < 0) continue;
        const wc_st_tensor *t = &f->header.tensors[i];
        const uint8_t *p = f->base + t->offset;
        uint64_t head = t->bytes < 4096 ? t->bytes : 4096;
        uint64_t tail = t->bytes - head < 4096 ? t->bytes - head : 4096;
        for (uint64_t b = 0; b < head; b++) x = (x ^ p[b]) * 1099511628211ull;
        for (uint64_t b = t->bytes - tail; b < t->bytes; b++) x = (x ^ p[b]) * 1099511628211ull;
        x = (x ^ t->bytes) * 1099511628211ull;
    }
    return x;
}

/* 1 when files a and b hold the same bytes in every split tensor (and there
 * is at least one with bytes), 0 otherwise. */
static int same_shards(const wc_st_file *a, const wc_st_file *b, const wc_st_header *h0,
                       const wctl_rules *rs, const wctl_tie *ties, size_t n_ties)
{
    int any = 0;
    for (size_t k = 0; k < h0->n_tensors; k++) {
        uint32_t dim;
        const wc_st_tensor *t0 = &h0->tensors[k];
        if (tie_target(ties, n_ties, t0->name) || !wctl_rules_decide(rs, t0->name, t0->ndim, &dim))
            continue;
        long i = wc_st_find(&a->header, t0->name), j = wc_st_find(&b->header, t0->name);
        if (i < 0 || j < 0) return 0;
        const wc_st_tensor *ta = &a->header.tensors[i], *tb = &b->header.tensors[j];
        if (ta->bytes != tb->bytes) return 0;
        if (ta->bytes == 0) continue;
        if (memcmp(a->base + ta->offset, b->base + tb->offset, ta->bytes) != 0) return 0;
        any = 1;
    }
    return any;
}

/* Without provenance: no two ranks may hold the same bytes in every split
 * tensor (a file given twice, or a copy of it). 0 or INVALID_ARGUMENT. */
static int check_duplicates(char **paths, const wc_st_file *files, uint32_t tp,
                            const wctl_rules *rs, const wctl_tie *ties, size_t n_ties)
{
    uint64_t *fp = malloc(tp * sizeof *fp);
    int rc = 0;
    if (fp == NULL) return WEIGHT_ENOMEM;
    for (uint32_t r = 0; r < tp; r++)
        fp[r] = shard_fingerprint(&files[r], &files[0].header, rs, ties, n_ties);
    for (uint32_t s = 1; s < tp && rc == 0; s++)
        for (uint32_t r = 0; r < s && rc == 0; r++)
            if (fp[r] == fp[s] &&
                same_shards(&files[r], &files[s], &files[0].header, rs, ties, n_ties))
                rc = file_error(tp_cmd, paths[s], "holds the same bytes as rank %" PRIu32 "'s %s in "
                                "every split tensor: the same rank's file twice", r, paths[r]);
    free(fp);
    return rc;
}

int wctl_tp_check_ranks(char **paths, const wc_st_file *files, uint32_t tp,
                        const wctl_rules *rs, const wctl_tie *ties, size_t n_ties)
{
    int rc;
    struct stat *st = calloc(tp, sizeof *st);
    if (st == NULL) return WEIGHT_ENOMEM;
    for (uint32_t r = 0; r < tp; r++) {
        if (stat(paths[r], &st[r]) != 0) {
            rc = file_error(tp_cmd, paths[r], "%s", strerror(errno));
            goto free_stat;
        }
        for (uint32_t q = 0; q < r; q++) {
            if (st[q].st_dev == st[r].st_dev && st[q].st_ino == st[r].st_ino) {
                rc = file_error(tp_cmd, paths[r], "the same file as rank %" PRIu32 "'s %s: "
                                "give each rank's file once, in rank order", q, paths[q]);
                goto free_stat;
            }
        }
    }
    int with = 0;
    for (uint32_t r = 0; r < tp; r++)
        if (meta_get(&files[r].header, WCTL_TP_KEY_TP) != NULL) with = 1;
    if (with) {
        rc = check_provenance(paths, files, tp, rs, ties, n_ties);
        if (rc == 0) rc = wctl_tp_add_shards(NULL, files, paths, tp, rs, ties, n_ties);
    } else {
        rc = wctl_tp_add_shards(NULL, files, paths, tp, rs, ties, n_ties);
        if (rc == 0) rc = check_duplicates(paths, files, tp, rs, ties, n_ties);
    }
free_stat:
    free(st);
    return rc;
}

/* -- joining the shards ------------------------------------------------------- */

/* Print why rank files cannot form one revision; INVALID_ARGUMENT. */
static int shard_error(const char *path, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int shard_error(const char *path, const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = refuse(tp_cmd, path, name, fmt, ap);
    va_end(ap);
    return rc;
}

int wctl_tp_add_shards(weight_writer *w, const wc_st_file *files, char **paths, uint32_t tp,
                       const wctl_rules *rs, const wctl_tie *ties, size_t n_ties)
{
    const wc_st_header *h0 = &files[0].header;
    int rc;
    for (uint32_t r = 1; r < tp; r++)
        for (size_t k = 0; k < files[r].header.n_tensors; k++)
            if (wc_st_find(h0, files[r].header.tensors[k].name) < 0)
                return shard_error(paths[r], files[r].header.tensors[k].name,
                                   "not in rank 0's file %s", paths[0]);
    for (size_t k = 0; k < h0->n_tensors; k++) {
        const wc_st_tensor *t0 = &h0->tensors[k];
        const wc_st_tensor *t[4096];
        uint64_t global[WC_MAX_NDIM], offset[WC_MAX_NDIM] = {0};
        uint32_t dim = 0;
        const char *target = tie_target(ties, n_ties, t0->name);
        if (target) {
            if (w && (rc = weight_writer_alias(w, t0->name, target)) < 0) return rc;
            continue;
        }
        int split = wctl_rules_decide(rs, t0->name, t0->ndim, &dim);
        for (uint32_t r = 0; r < tp; r++) {
            long i = wc_st_find(&files[r].header, t0->name);
            if (i < 0) return shard_error(paths[r], t0->name, "missing in this rank");
            t[r] = &files[r].header.tensors[i];
            if (t[r]->dtype != t0->dtype || t[r]->ndim != t0->ndim)
                return shard_error(paths[r], t0->name, "dtype or rank differs from rank 0's");
            for (uint32_t d = 0; d < t0->ndim; d++)
                if (t[r]->shape[d] != t0->shape[d] && !(split && d == dim))
                    return shard_error(paths[r], t0->name,
                                       "dimension %u is %" PRIu64 ", rank 0 has %" PRIu64
                                       " (only dimension %u may differ)",
                                       d, t[r]->shape[d], t0->shape[d], dim);
            if (!split && memcmp(files[r].base + t[r]->offset, files[0].base + t0->offset,
                                 t0->bytes) != 0)
                return shard_error(paths[r], t0->name,
                                   "replicated by the rules but its bytes differ from rank 0's "
                                   "(name its split with --split PATTERN=DIM)");
        }
        if (!split) {
            if (w && (rc = weight_writer_add_tensor(w, t0->name, wc_dtype_name(t0->dtype),
                                                    t0->ndim, t0->shape,
                                                    files[0].base + t0->offset)) < 0)
                return rc;
            continue;
        }
        memcpy(global, t0->shape, t0->ndim * sizeof *global);
        global[dim] = 0;
        for (uint32_t r = 0; r < tp; r++) global[dim] += t[r]->shape[dim];
        for (uint32_t r = 0; r < tp; r++) { /* the split get makes: the first rem ranks hold one more */
            uint64_t q = global[dim] / tp, rem = global[dim] % tp;
            if (t[r]->shape[dim] != q + (r < rem))
                return shard_error(paths[r], t0->name,
                                   "rank %u holds %" PRIu64 " of dimension %u's %" PRIu64
                                   "; a %u-way split gives it %" PRIu64
                                   " (files of another --tp, or not in rank order?)",
                                   r, t[r]->shape[dim], dim, global[dim], tp, q + (r < rem));
        }
        for (uint32_t r = 0; r < tp && w; r++) {
            rc = weight_writer_add_fragment(w, t0->name, wc_dtype_name(t0->dtype), t0->ndim,
                                            global, offset, t[r]->shape,
                                            files[r].base + t[r]->offset);
            if (rc < 0) return rc;
            offset[dim] += t[r]->shape[dim];
        }
    }
    return 0;
}
