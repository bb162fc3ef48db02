/* weightctl_get.c -- `weightctl get`: TP ranks of a revision, resharded
 * from whatever layout was written by the --split / --replicate rules, each
 * written as DIR/rank<R>-of-<N>.safetensors.
 *
 * DIR (with its parents) is created and checked writable once the ID is
 * resolved, before the load asks for a lease; the directories it made are
 * removed again when the get fails with nothing written in them. The file is written as the bytes arrive: once the
 * placement of every tensor is known (weight_get asks for all placements
 * before the first buffer), the safetensors header is laid out, the
 * temporary file DIR/.rank<R>-of-<N>.safetensors.tmp sized and mapped
 * MAP_SHARED, and each tensor's buffer is its place in that mapping; the
 * load runs with WEIGHT_OPT_RELEASE_PAGES, so the pages of each copied
 * window go back to the page cache and this process never holds the model.
 * Then fsync, rename, fsync of DIR. A failure or Ctrl-C (cancels the load,
 * releases its lease, exit 130) removes the temporary file. Without --rank
 * (or with --all-ranks) every rank is written, one load each. A split of a
 * dimension --tp does not divide is refused naming the tensor unless
 * --allow-uneven. Each file's __metadata__ carries its provenance
 * (weightctl_tp.c: tp, rank, source, split), which put --tp checks. A revision published from a model
 * directory (put --from-dir) carries its other files as attachments: they are
 * written next to the tensors (each through a temporary file), and at TP 1
 * the tensors go to DIR/model.safetensors, so DIR loads as a model directory. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wc_safetensors.h"
#include "weightctl.h"

/* -- one rank's file -------------------------------------------------------- */

typedef struct out_tensor {
    char *name;
    wc_dtype dtype;
    uint32_t ndim;
    uint64_t shape[WC_MAX_NDIM];
    uint64_t bytes;
    uint64_t offset;        /* in the file */
    int split_dim;          /* the dimension it was split along, -1: replicated */
} out_tensor;

/* An attachment of the revision (a file of its model directory), held in
 * memory (they are small: WEIGHT_ATTACHMENT_MAX_BYTES at most) -- in shared
 * anonymous memory, since WEIGHT_OPT_RELEASE_PAGES gives back the pages of
 * every destination (heap memory would lose its bytes). */
typedef struct out_file {
    char *name;
    uint8_t *data;          /* MAP_SHARED | MAP_ANONYMOUS, bytes long; NULL if 0 */
    uint64_t bytes;
    int loaded;             /* its buffer was handed out */
} out_file;

typedef struct getcli {
    uint32_t tp, rank;
    const wctl_rules *rules;
    int allow_uneven;       /* --allow-uneven: a dimension tp does not divide may split */
    const char *source;     /* the revision's ID, for weight_mgmt.source */
    out_tensor *out;        /* in placement (manifest) order */
    size_t n_out, cap_out;
    wc_st_meta *src_meta;   /* the revision's file metadata (its source's __metadata__) */
    size_t n_src_meta, cap_src_meta;
    out_file *att;          /* the attachments, in manifest order */
    size_t n_att, cap_att;
    size_t next;            /* the tensor the next provide is expected for */
    int fd;                 /* the temporary file */
    uint8_t *map;
    uint64_t map_len;
    char err[512];          /* why provide refused, for the report */
    int follow;             /* the caller named no generation: a retired one is not printed */
    int retired_rc;         /* get_rank's 3: the code (NOT_READY, NOT_FOUND) ... */
    char retired_msg[1024]; /* ... and the store's message, for the caller to print */
} getcli;

/* Make room for element n of the array *arr (*cap elements of size bytes),
 * doubling it. 0 or -1 (out of memory; *arr unchanged). */
static int room_for_one(void **arr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap) return 0;
    size_t c = *cap ? *cap * 2 : 16;
    void *a = realloc(*arr, c * size);
    if (a == NULL) return -1;
    *arr = a;
    *cap = c;
    return 0;
}

/* One pair of the revision's file metadata, kept for the header (a
 * weight_mgmt.* key is not kept: each file's provenance is its own). */
static int get_file_meta(void *ctx, const char *key, const char *value)
{
    getcli *g = ctx;
    if (strncmp(key, WCTL_TP_KEY_PREFIX, strlen(WCTL_TP_KEY_PREFIX)) == 0) return 0;
    if (room_for_one((void **)&g->src_meta, &g->cap_src_meta, g->n_src_meta,
                     sizeof *g->src_meta) < 0)
        return WEIGHT_ENOMEM;
    wc_st_meta *p = &g->src_meta[g->n_src_meta];
    p->key = strdup(key);
    p->value = strdup(value);
    if (p->key == NULL || p->value == NULL) {
        free(p->key);
        free(p->value);
        return WEIGHT_ENOMEM;
    }
    g->n_src_meta++;
    return 0;
}

/* Where tensor t goes on this rank; also records its name, dtype and local
 * shape for the header (an attachment: its name and size). */
static int get_place(void *ctx, const weight_tensor_info *t, weight_tensor_place *out)
{
    getcli *g = ctx;
    uint32_t dim = 0;
    int split = wctl_rules_decide(g->rules, t->name, t->ndim, &dim);
    if (g->map != NULL || t->ndim > WC_MAX_NDIM) return WEIGHT_EINVALID_ARGUMENT;
    if (t->attachment) { /* a file of the model directory: every rank writes it */
        if (room_for_one((void **)&g->att, &g->cap_att, g->n_att, sizeof *g->att) < 0)
            return WEIGHT_ENOMEM;
        out_file *f = &g->att[g->n_att];
        memset(f, 0, sizeof *f);
        if ((f->name = strdup(t->name)) == NULL) return WEIGHT_ENOMEM;
        f->bytes = t->ndim == 1 ? t->shape[0] : 0;
        g->n_att++;
        out->kind = WEIGHT_PLACE_REPLICATED;
        return 0;
    }
    if (room_for_one((void **)&g->out, &g->cap_out, g->n_out, sizeof *g->out) < 0)
        return WEIGHT_ENOMEM;
    out_tensor *o = &g->out[g->n_out];
    memset(o, 0, sizeof *o);
    if ((o->name = strdup(t->name)) == NULL) return WEIGHT_ENOMEM;
    o->dtype = wc_dtype_from_name(t->dtype, strlen(t->dtype));
    o->ndim = t->ndim;
    o->bytes = t->item_size;
    for (uint32_t d = 0; d < t->ndim; d++) o->shape[d] = t->shape[d];
    o->split_dim = -1;
    g->n_out++;
    if (g->tp <= 1 || !split) {
        out->kind = WEIGHT_PLACE_REPLICATED;
    } else {
        /* The split weight_get makes: the first size % tp ranks one more. */
        uint64_t size = t->shape[dim], q = size / g->tp, rem = size % g->tp;
        if (rem != 0 && !g->allow_uneven) {
            snprintf(g->err, sizeof g->err, "tensor %s: dimension %u (%" PRIu64 ") does not split "
                     "evenly into %u parts; --allow-uneven gives the first %" PRIu64 " rank(s) one "
                     "more, or --replicate it or --split it along another dimension", t->name,
                     dim, size, g->tp, rem);
            return WEIGHT_EINVALID_ARGUMENT;
        }
        o->shape[dim] = q + (g->rank < rem ? 1 : 0);
        o->split_dim = (int)dim;
        out->kind = WEIGHT_PLACE_SPLIT;
        out->dim = dim;
        out->parts = g->tp;
        out->rank = g->rank;
    }
    for (uint32_t d = 0; d < t->ndim; d++) o->bytes *= o->shape[d];
    return 0;
}

/* Lay out the header of every placed tensor, size the temporary file and
 * map it. 0, or a WEIGHT_E* code with g->err set. */
static int map_output(getcli *g)
{
    wctl_tp_meta meta;
    wc_st_entry *e = calloc(g->n_out ? g->n_out : 1, sizeof *e);
    size_t *order = calloc(g->n_out ? g->n_out : 1, sizeof *order);
    const char **names = calloc(g->n_out ? g->n_out : 1, sizeof *names);
    int *dims = calloc(g->n_out ? g->n_out : 1, sizeof *dims);
    size_t n_pairs = g->n_src_meta + sizeof meta.pairs / sizeof meta.pairs[0];
    wc_st_meta *pairs = calloc(n_pairs, sizeof *pairs);
    uint8_t *header = NULL;
    size_t header_len = 0;
    int rc = WEIGHT_ENOMEM;
    memset(&meta, 0, sizeof meta);
    if (e == NULL || order == NULL || names == NULL || dims == NULL || pairs == NULL)
        goto free_arrays;
    for (size_t i = 0; i < g->n_out; i++) {
        names[i] = g->out[i].name;
        dims[i] = g->out[i].split_dim;
    }
    if ((rc = wctl_tp_meta_init(&meta, g->tp, g->rank, g->source, names, dims, g->n_out)) < 0) {
        snprintf(g->err, sizeof g->err, "the provenance metadata: %s", weight_error_name(rc));
        goto free_arrays;
    }
    /* The header only: data is not read, but must not be NULL when bytes > 0. */
    for (size_t i = 0; i < g->n_out; i++)
        e[i] = (wc_st_entry){g->out[i].name, g->out[i].dtype, g->out[i].ndim, g->out[i].shape,
                             g, g->out[i].bytes};
    /* The source's own pairs, then this file's provenance. */
    if (g->n_src_meta) memcpy(pairs, g->src_meta, g->n_src_meta * sizeof *pairs);
    memcpy(pairs + g->n_src_meta, meta.pairs, sizeof meta.pairs);
    if (wc_st_encode_header(e, g->n_out, pairs, n_pairs, &header, &header_len, order, g->err,
                            sizeof g->err) < 0) {
        rc = WEIGHT_EINVALID_ARGUMENT;
        goto free_arrays;
    }
    uint64_t at = header_len;
    for (size_t k = 0; k < g->n_out; k++) {
        g->out[order[k]].offset = at;
        at += g->out[order[k]].bytes;
    }
    if (ftruncate(g->fd, (off_t)at) != 0) {
        snprintf(g->err, sizeof g->err, "sizing the file to %" PRIu64 " bytes: %s", at,
                 strerror(errno));
        rc = WEIGHT_EIO;
        goto free_header;
    }
    void *m = mmap(NULL, at, PROT_READ | PROT_WRITE, MAP_SHARED, g->fd, 0);
    if (m == MAP_FAILED) {
        snprintf(g->err, sizeof g->err, "mapping the file: %s", strerror(errno));
        rc = WEIGHT_EIO;
        goto free_header;
    }
    g->map = m;
    g->map_len = at;
    memcpy(g->map, header, header_len);
    rc = 0;
free_header:
    free(header);
free_arrays:
    wctl_tp_meta_free(&meta);
    free(pairs);
    free(dims);
    free(names);
    free(order);
    free(e);
    return rc;
}

/* The buffer of tensor t: its place in the mapped file. */
static int get_provide(void *ctx, const weight_tensor_info *t, const weight_tensor_place *p,
                       const uint64_t *shape, uint64_t bytes, void **out)
{
    getcli *g = ctx;
    int rc;
    (void)p;
    (void)shape;
    if (t->attachment) {
        for (size_t k = 0; k < g->n_att; k++) {
            out_file *f = &g->att[k];
            if (strcmp(f->name, t->name) != 0 || f->loaded) continue;
            if (f->bytes != bytes) return WEIGHT_EINVALID_ARGUMENT;
            if (bytes > 0) {
                void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                               -1, 0);
                if (m == MAP_FAILED) return WEIGHT_ENOMEM;
                f->data = m;
            }
            f->loaded = 1;
            *out = f->data;
            return 0;
        }
        snprintf(g->err, sizeof g->err, "attachment %s was not placed", t->name);
        return WEIGHT_EINVALID_ARGUMENT;
    }
    if (g->map == NULL && (rc = map_output(g)) < 0) return rc;
    size_t i = g->next < g->n_out && strcmp(g->out[g->next].name, t->name) == 0 ? g->next : g->n_out;
    for (size_t k = 0; i == g->n_out && k < g->n_out; k++)
        if (strcmp(g->out[k].name, t->name) == 0) i = k;
    if (i == g->n_out || g->out[i].bytes != bytes) {
        snprintf(g->err, sizeof g->err, "tensor %s: %" PRIu64 " bytes, the header holds %" PRIu64,
                 t->name, bytes, i == g->n_out ? 0 : g->out[i].bytes);
        return WEIGHT_EINVALID_ARGUMENT;
    }
    g->next = i + 1;
    *out = g->map + g->out[i].offset;
    return 0;
}

static void getcli_reset(getcli *g)
{
    if (g->map) munmap(g->map, g->map_len);
    for (size_t i = 0; i < g->n_out; i++) free(g->out[i].name);
    for (size_t i = 0; i < g->n_att; i++) {
        free(g->att[i].name);
        if (g->att[i].data) munmap(g->att[i].data, g->att[i].bytes);
    }
    for (size_t i = 0; i < g->n_src_meta; i++) {
        free(g->src_meta[i].key);
        free(g->src_meta[i].value);
    }
    free(g->src_meta);
    g->src_meta = NULL;
    g->n_src_meta = g->cap_src_meta = 0;
    free(g->out);
    free(g->att);
    g->out = NULL;
    g->att = NULL;
    g->map = NULL;
    g->n_out = g->cap_out = g->next = g->n_att = g->cap_att = 0;
    g->err[0] = '\0';
}

/* mkdir -p dir, then check that it is a directory this process can write
 * into. The first directory it made (the top of those it made, each
 * under the one before) goes to made[4096], "" when all were there, for
 * unmake_dir. 0, or -1 with the cause printed as "weightctl: get: --out
 * DIR: ...". */
static int prepare_dir(const char *dir, char *made)
{
    char path[4096];
    struct stat st;
    made[0] = '\0';
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        fprintf(stderr, "weightctl: get: --out %s: path too long\n", dir);
        return -1;
    }
    for (char *s = path + 1; *s; s++) {
        if (*s != '/' || s[-1] == '/') continue;
        *s = '\0';
        if (mkdir(path, 0755) == 0) {
            if (made[0] == '\0') snprintf(made, 4096, "%s", path);
        } else if (errno != EEXIST) {
            goto failed;
        }
        *s = '/';
    }
    if (mkdir(path, 0755) == 0) {
        if (made[0] == '\0') snprintf(made, 4096, "%s", path);
    } else if (errno != EEXIST) {
        goto failed;
    }
    if (stat(path, &st) != 0) goto failed;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        goto failed;
    }
    if (access(path, W_OK | X_OK) != 0) goto failed;
    return 0;
failed:
    fprintf(stderr, "weightctl: get: --out %s: %s%s%s\n", dir, strerror(errno),
            strcmp(path, dir) ? " at " : "", strcmp(path, dir) ? path : "");
    return -1;
}

/* A get that failed before writing anything: remove the directories
 * prepare_dir made for dir (made: the top one), deepest first; rmdir
 * leaves any that holds something (a rank file written before). */
static void unmake_dir(const char *dir, const char *made)
{
    char path[4096];
    if (made[0] == '\0') return;
    snprintf(path, sizeof path, "%s", dir);
    for (;;) {
        size_t n = strlen(path);
        while (n > 1 && path[n - 1] == '/') path[--n] = '\0';
        if (rmdir(path) != 0 || strcmp(path, made) == 0) return;
        char *slash = strrchr(path, '/');
        if (slash == NULL || slash == path) return;
        *slash = '\0';
    }
}

/* Write len bytes of data as DIR/name durably (a temporary file, fsync,
 * rename). 0, or -1 with errno set. */
static int write_file(const char *dir, const char *name, const uint8_t *data, uint64_t len)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    while (len > 0) {
        ssize_t w = write(fd, data, len > (1u << 30) ? (1u << 30) : (size_t)len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) goto failed;
        data += w;
        len -= (uint64_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        fd = -1;
        goto failed;
    }
    if (rename(tmp, path) == 0) return 0;
    fd = -1;
failed: {
        int e = errno ? errno : EIO;
        if (fd >= 0) close(fd);
        unlink(tmp);
        errno = e;
        return -1;
    }
}

/* Load rank g->rank of id into DIR/rank<R>-of-<N>.safetensors -- or, for a
 * revision published from a model directory (it has attachments) at TP 1,
 * DIR/model.safetensors -- and write its attachments next to it, so that DIR
 * is a loadable model directory again. The exit status (0, 1, or 130 after
 * Ctrl-C), the cause printed -- or, with g->follow, 3 and nothing printed
 * when the load failed NOT_READY or NOT_FOUND (g->retired_rc and
 * retired_msg: the generation may have been retired by a replacement). */
static int get_rank(ctl *x, const weight_identity *id, const char *what, const char *dir,
                    getcli *g)
{
    char path[4096], tmp[4200];
    int status = 1, rc;
    snprintf(path, sizeof path, "%s/rank%u-of-%u.safetensors", dir, g->rank, g->tp);
    snprintf(tmp, sizeof tmp, "%s/.rank%u-of-%u.safetensors.tmp", dir, g->rank, g->tp);
    g->fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (g->fd < 0) {
        fprintf(stderr, "weightctl: %s: %s: %s\n", what, tmp, strerror(errno));
        return 1;
    }
    char label[64];
    snprintf(label, sizeof label, g->tp > 1 ? "get rank %u" : "get", g->rank);
    wctl_progress pr;
    wctl_progress_init(x, &pr, label);
    weight_placement pl = {get_place, g};
    weight_bindings bd = {NULL, 0, get_provide, g};
    weight_get_stats st;
    weight_store_set_progress(x->ws, wctl_progress_cb, &pr);
    weight_store_set_file_metadata_fn(x->ws, get_file_meta, g);
    double t0 = wctl_now();
    rc = weight_get(x->ws, id, &pl, &bd, &st);
    weight_store_set_file_metadata_fn(x->ws, NULL, NULL);
    double dt = wctl_now() - t0;
    wctl_progress_end(&pr);
    if (rc < 0 && g->follow && !g->err[0] && (rc == WEIGHT_ENOT_READY || rc == WEIGHT_ENOT_FOUND)) {
        g->retired_rc = rc; /* retired by a replacement, maybe: the caller decides */
        snprintf(g->retired_msg, sizeof g->retired_msg, "%s", weight_store_last_error(x->ws));
        status = 3;
        goto remove_tmp;
    }
    if (rc < 0) {
        if (g->err[0]) fprintf(stderr, "weightctl: %s: %s: %s\n", what, weight_error_name(rc), g->err);
        else wctl_failed(x, what, rc);
        if (rc == WEIGHT_ECANCELED && wctl_interrupted()) status = 130;
        goto remove_tmp;
    }
    if (g->map == NULL && (rc = map_output(g)) < 0) { /* a revision without tensors */
        fprintf(stderr, "weightctl: %s: %s\n", what, g->err);
        goto remove_tmp;
    }
    if (g->n_att > 0 && g->tp == 1) snprintf(path, sizeof path, "%s/model.safetensors", dir);
    for (size_t k = 0; k < g->n_att; k++) {
        const char *base = strrchr(path, '/') + 1;
        if (strcmp(g->att[k].name, base) == 0 || !g->att[k].loaded) {
            fprintf(stderr, "weightctl: %s: attachment %s: %s\n", what, g->att[k].name,
                    g->att[k].loaded ? "has the name of the tensor file" : "not loaded");
            goto remove_tmp;
        }
        if (write_file(dir, g->att[k].name, g->att[k].data, g->att[k].bytes) != 0) {
            fprintf(stderr, "weightctl: %s: %s/%s: %s\n", what, dir, g->att[k].name,
                    strerror(errno));
            goto remove_tmp;
        }
    }
    if (msync(g->map, g->map_len, MS_SYNC) != 0 || fsync(g->fd) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "weightctl: %s: %s: %s\n", what, path, strerror(errno));
        goto remove_tmp;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    if (x->json) {
        printf("{\"file\":");
        wctl_json_str(path);
        printf(",\"rank\":%u,\"tp\":%u,\"tensors\":%zu,\"attachments\":%zu,\"bytes\":%" PRIu64
               ",\"objects\":%" PRIu64 ",\"local_bytes\":%" PRIu64 ",\"seconds\":%.3f}\n",
               g->rank, g->tp, g->n_out, g->n_att, st.bytes, st.objects, st.local_bytes, dt);
    } else {
        char b[32], r[32];
        wctl_size_text((double)st.bytes, x->bytes, b, sizeof b);
        wctl_human(dt > 0 ? (double)st.bytes / dt : 0, r, sizeof r);
        printf("wrote %s: %zu tensors, %s (rank %u of %u) in %.2f s, %s/s%s", path, g->n_out, b,
               g->rank, g->tp, dt, r, st.local_bytes == st.bytes && st.bytes ? ", zero-copy" : "");
        if (g->n_att) printf("; %zu attachment file(s)", g->n_att);
        putchar('\n');
    }
    status = 0;
    goto close_fd;
remove_tmp:
    unlink(tmp);
close_fd:
    close(g->fd);
    g->fd = -1;
    return status;
}

int wctl_cmd_get(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {
        {"out", required_argument, NULL, 'o'},       {"tp", required_argument, NULL, 't'},
        {"rank", required_argument, NULL, 'r'},      {"split", required_argument, NULL, 's'},
        {"replicate", required_argument, NULL, 'R'}, {"all-ranks", no_argument, NULL, 'A'},
        {"allow-uneven", no_argument, NULL, 'U'}, {NULL, 0, NULL, 0}};
    const char *dir = NULL, *rank_arg = NULL;
    uint64_t tp = 1, rank = 0;
    int all = 0, uneven = 0, c, status = 0, rc;
    wctl_rules rs = {.n = 0};
    optind = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 'o': dir = optarg; break;
        case 't':
            if (wctl_parse_u64(optarg, &tp) < 0 || tp == 0 || tp > 4096)
                return wctl_bad_value("get", "--tp", optarg, "a rank count from 1 to 4096");
            break;
        case 'r':
            if (wctl_parse_u64(optarg, &rank) < 0)
                return wctl_bad_value("get", "--rank", optarg, "a rank number");
            rank_arg = optarg;
            break;
        case 'A': all = 1; break;
        case 'U': uneven = 1; break;
        case 's':
        case 'R':
            if (wctl_rules_add(&rs, optarg, c == 's') < 0)
                return wctl_bad_value("get", c == 's' ? "--split" : "--replicate", optarg,
                                      c == 's' ? "PATTERN=DIM (DIM 0..7, at most 128 rules)"
                                               : "a PATTERN (at most 128 rules)");
            break;
        default: return wctl_opt_error("get", c, argv);
        }
    }
    if (optind != argc - 1) return wctl_bad_usage("get", "takes one ID");
    if (dir == NULL || dir[0] == '\0') return wctl_bad_usage("get", "--out DIR is required");
    if (all && rank_arg) return wctl_bad_usage("get", "--rank and --all-ranks exclude each other");
    if (!rank_arg) all = 1; /* every rank (one at TP 1), never rank 0 alone by default */
    if (rank >= tp) {
        char want[64];
        snprintf(want, sizeof want, "a rank below --tp %" PRIu64, tp);
        return wctl_bad_value("get", "--rank", rank_arg, want);
    }
    if (wctl_open_weights(x) < 0) return 1;
    weight_identity id;
    char text[2048], what[2100], made[4096];
    int has_gen = 0, tries = 0;
    if ((rc = wctl_parse_id_text(x, argv[optind], &id, &has_gen)) != 0) return rc;
    if ((rc = wctl_resolve_id(x, argv[optind], "get", &id, text, sizeof text, what, sizeof what)) != 0)
        return rc;
    if ((rc = weight_store_set_option(x->ws, WEIGHT_OPT_RELEASE_PAGES, 1)) < 0 ||
        (rc = weight_store_set_option(x->ws, WEIGHT_OPT_ATTACHMENTS, 1)) < 0)
        return wctl_failed(x, what, rc);
    if (prepare_dir(dir, made) < 0) return 1; /* before the lease; removed if nothing comes */
    wctl_sigint_arm(x->ws); /* Ctrl-C: cancel the load (its lease is released), exit 130 */
    /* Without @GEN, a generation retired by a replacement while it was being
     * read (a trainer upserting the lineage) is followed to the newer one,
     * every rank read again from it (wctl_follow_newest, bounded). */
    for (uint64_t r = all ? 0 : rank; r < (all ? tp : rank + 1) && status == 0; r++) {
        getcli g;
        memset(&g, 0, sizeof g);
        g.rules = &rs;
        g.allow_uneven = uneven;
        g.source = text;
        g.tp = (uint32_t)tp;
        g.rank = (uint32_t)r;
        g.fd = -1;
        g.follow = !has_gen;
        status = get_rank(x, &id, what, dir, &g);
        getcli_reset(&g);
        if (status != 3) continue;
        char held[sizeof g.retired_msg];
        snprintf(held, sizeof held, "%s", g.retired_msg);
        if (wctl_follow_newest(x, &id, g.retired_rc, &tries)) {
            wctl_id_text(&id, text, sizeof text);
            snprintf(what, sizeof what, "get %s", text);
            status = 0;
            r = (all ? 0 : rank) - 1; /* from the first rank again (wraps to it at r++) */
            continue;
        }
        fprintf(stderr, "weightctl: %s: %s: %s\n", what, weight_error_name(g.retired_rc), held);
        status = 1;
    }
    wctl_sigint_disarm();
    if (status != 0) unmake_dir(dir, made);
    return status;
}
