/* weightctl_get.c -- `weightctl get`: one TP rank of a revision, resharded
 * from whatever layout was written by the --split / --replicate rules,
 * written as DIR/rank<R>-of-<N>.safetensors (through a temporary file,
 * fsynced, renamed); Ctrl-C cancels the load and releases its lease. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wc_safetensors.h"
#include "weightctl.h"

/* -- get ------------------------------------------------------------------- */

typedef struct getcli {
    uint32_t tp, rank;
    const wctl_rules *rules;
    /* What came back, in manifest order. */
    struct out_tensor {
        char *name;
        char dtype[16];
        uint32_t ndim;
        uint64_t shape[8];
        void *data;
        uint64_t bytes;
    } *out;
    size_t n_out, cap_out;
} getcli;

static int get_place(void *ctx, const weight_tensor_info *t, weight_tensor_place *out)
{
    getcli *g = ctx;
    uint32_t dim = 0;
    int split = wctl_rules_decide(g->rules, t->name, t->ndim, &dim);
    if (g->tp <= 1 || !split) {
        out->kind = WEIGHT_PLACE_REPLICATED;
        return 0;
    }
    out->kind = WEIGHT_PLACE_SPLIT;
    out->dim = dim;
    out->parts = g->tp;
    out->rank = g->rank;
    return 0;
}

static int get_provide(void *ctx, const weight_tensor_info *t, const weight_tensor_place *p,
                       const uint64_t *shape, uint64_t bytes, void **out)
{
    getcli *g = ctx;
    (void)p;
    if (g->n_out == g->cap_out) {
        size_t cap = g->cap_out ? g->cap_out * 2 : 64;
        struct out_tensor *n = realloc(g->out, cap * sizeof *n);
        if (n == NULL) return WEIGHT_ENOMEM;
        g->out = n;
        g->cap_out = cap;
    }
    struct out_tensor *o = &g->out[g->n_out];
    memset(o, 0, sizeof *o);
    if ((o->name = strdup(t->name)) == NULL || (o->data = malloc(bytes ? bytes : 1)) == NULL) {
        free(o->name);
        return WEIGHT_ENOMEM;
    }
    snprintf(o->dtype, sizeof o->dtype, "%s", t->dtype);
    o->ndim = t->ndim;
    for (uint32_t d = 0; d < t->ndim && d < 8; d++) o->shape[d] = shape[d];
    o->bytes = bytes;
    g->n_out++;
    *out = o->data;
    return 0;
}

/* Ctrl-C during get: cancel the load (its lease is released), exit 130. */
static weight_store *volatile g_cancel_store;
static volatile sig_atomic_t g_interrupted;
static void on_sigint(int sig)
{
    (void)sig;
    g_interrupted = 1;
    if (g_cancel_store) weight_store_cancel(g_cancel_store);
}

int wctl_cmd_get(ctl *x, int argc, char **argv)
{
    static const struct option opts[] = {
        {"out", required_argument, NULL, 'o'},     {"tp", required_argument, NULL, 't'},
        {"rank", required_argument, NULL, 'r'},    {"split", required_argument, NULL, 's'},
        {"replicate", required_argument, NULL, 'R'}, {NULL, 0, NULL, 0}};
    const char *dir = NULL;
    uint64_t tp = 1, rank = 0;
    wctl_rules rs = {.n = 0};
    getcli g;
    int c, status = 1, rc;
    memset(&g, 0, sizeof g);
    g.rules = &rs;
    optind = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'o': dir = optarg; break;
        case 't':
            if (wctl_parse_u64(optarg, &tp) < 0 || tp == 0 || tp > 4096) goto usage;
            break;
        case 'r':
            if (wctl_parse_u64(optarg, &rank) < 0) goto usage;
            break;
        case 's':
        case 'R':
            if (wctl_rules_add(&rs, optarg, c == 's') < 0) goto usage;
            break;
        default: goto usage;
        }
    }
    if (dir == NULL || optind != argc - 1 || rank >= tp) goto usage;
    g.tp = (uint32_t)tp;
    g.rank = (uint32_t)rank;
    weight_identity id;
    char text[2048], what[2100], path[4096], err[512];
    if ((rc = wctl_resolve_id(x, argv[optind], "get", &id, text, sizeof text, what, sizeof what)) != 0)
        return rc;
    wctl_progress pr = {isatty(2) && !x->json, "get", wctl_now(), 0, 0};
    weight_placement pl = {get_place, &g};
    weight_bindings bd = {NULL, 0, get_provide, &g};
    weight_get_stats st;
    weight_store_set_progress(x->ws, wctl_progress_cb, &pr);
    g_cancel_store = x->ws;
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, &old_sa);
    double t0 = wctl_now();
    rc = weight_get(x->ws, &id, &pl, &bd, &st);
    double dt = wctl_now() - t0;
    sigaction(SIGINT, &old_sa, NULL);
    g_cancel_store = NULL;
    wctl_progress_end(&pr);
    if (rc < 0) {
        status = wctl_failed(x, what, rc);
        if (rc == WEIGHT_ECANCELED && g_interrupted) status = 130;
        goto free_out;
    }
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/rank%u-of-%u.safetensors", dir, g.rank, g.tp);
    wc_st_entry *entries = calloc(g.n_out ? g.n_out : 1, sizeof *entries);
    if (entries == NULL) goto free_out;
    for (size_t i = 0; i < g.n_out; i++) {
        entries[i].name = g.out[i].name;
        entries[i].dtype = wc_dtype_from_name(g.out[i].dtype, strlen(g.out[i].dtype));
        entries[i].ndim = g.out[i].ndim;
        entries[i].shape = g.out[i].shape;
        entries[i].data = g.out[i].data;
        entries[i].bytes = g.out[i].bytes;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || wc_st_write_fd(fd, entries, g.n_out, NULL, 0, err, sizeof err) < 0 ||
        fsync(fd) != 0 || close(fd) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "weightctl: %s: %s: %s\n", what, path, fd < 0 ? strerror(errno) : err);
        if (fd >= 0) unlink(tmp);
        free(entries);
        goto free_out;
    }
    fd = -1;
    free(entries);
    if (x->json) {
        printf("{\"file\":");
        wctl_json_str(path);
        printf(",\"tensors\":%zu,\"bytes\":%" PRIu64 ",\"objects\":%" PRIu64
               ",\"local_bytes\":%" PRIu64 ",\"seconds\":%.3f}\n",
               g.n_out, st.bytes, st.objects, st.local_bytes, dt);
    } else {
        char b[32], r[32];
        wctl_human((double)st.bytes, b, sizeof b);
        wctl_human(dt > 0 ? (double)st.bytes / dt : 0, r, sizeof r);
        printf("wrote %s: %zu tensors, %s (rank %u of %u) in %.2f s, %s/s%s\n", path, g.n_out, b,
               g.rank, g.tp, dt, r, st.local_bytes == st.bytes && st.bytes ? ", zero-copy" : "");
    }
    status = 0;
free_out:
    for (size_t i = 0; i < g.n_out; i++) {
        free(g.out[i].name);
        free(g.out[i].data);
    }
    free(g.out);
    return status;
usage:
    wctl_usage(stderr);
    return 2;
}
