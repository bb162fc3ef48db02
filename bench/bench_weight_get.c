/* bench_weight_get.c -- weight_get on the co-located HOT path, next to a
 * plain single-thread memcpy of the same bytes in the same run.
 *
 * Starts build/bin/store_master with its embedded node's segment under
 * /dev/shm (big enough for two revisions), publishes a revision of
 * argv[1] GiB (default 4) of BF16 tensors twice -- once as whole tensors
 * (TP 1) and once as the fragments of a TP 4 writer -- and then measures:
 *
 *   TP1:      weight_get of the whole TP 1 revision into caller buffers,
 *             against memcpy of the same number of bytes (target >= 0.8);
 *   TP4->TP2: weight_get of rank 0 of a TP 2 split (dim 0) of the TP 4
 *             revision, against memcpy of that rank's bytes (target >= 0.7).
 *
 * Each figure is the best of five runs after one warm-up get (which maps
 * the segment once per store, as a long-lived loader would); the first,
 * cold get is printed too. Destination buffers are touched beforehand for
 * both sides, so page faults on them count for neither. weight_get verifies
 * every chunk it reads (XXH3) before scattering it. Usage:
 *   bench_weight_get [GIB] [DATA_DIR]
 * (the master's data_dir goes under DATA_DIR, default /tmp; the segment
 * under $WM_BENCH_SHM, default /dev/shm; memory needed: about 4 x GIB). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench_summary.h"
#include "harness.h"
#include "weightclient.h"

#define TENSOR_ROWS 4096ull
#define TENSOR_COLS 8192ull /* BF16: 64 MiB per tensor */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct bench {
    size_t n_tensors;
    uint64_t tensor_bytes;
    uint8_t *src;        /* all tensors back to back */
    uint8_t *dst;        /* the get's buffers, back to back */
    char (*names)[32];
    uint32_t tp, rank;   /* the get's placement */
} bench;

static int place(void *ctx, const weight_tensor_info *t, weight_tensor_place *out)
{
    bench *b = ctx;
    (void)t;
    if (b->tp > 1) *out = (weight_tensor_place){WEIGHT_PLACE_SPLIT, 0, b->tp, b->rank};
    else *out = (weight_tensor_place){WEIGHT_PLACE_REPLICATED, 0, 1, 0};
    return 0;
}

static int provide(void *ctx, const weight_tensor_info *t, const weight_tensor_place *p,
                   const uint64_t *shape, uint64_t bytes, void **out)
{
    bench *b = ctx;
    (void)p;
    (void)shape;
    size_t i = (size_t)atoi(t->name + 1);
    if (i >= b->n_tensors || bytes > b->tensor_bytes) return WEIGHT_EINVALID_ARGUMENT;
    *out = b->dst + i * bytes;
    return 0;
}

static int publish(weight_store *s, bench *b, const char *rev, uint32_t tp)
{
    weight_identity id;
    weight_writer *w = NULL;
    uint64_t shape[2] = {TENSOR_ROWS, TENSOR_COLS};
    weight_identity_set(&id, NULL, "bench", "model", rev, 1);
    int rc = weight_put_begin(s, &id, NULL, &w);
    for (size_t i = 0; rc == 0 && i < b->n_tensors; i++) {
        const uint8_t *data = b->src + i * b->tensor_bytes;
        if (tp == 1) {
            rc = weight_writer_add_tensor(w, b->names[i], "BF16", 2, shape, data);
            continue;
        }
        for (uint32_t r = 0; rc == 0 && r < tp; r++) {
            uint64_t rows = TENSOR_ROWS / tp;
            uint64_t off[2] = {r * rows, 0}, local[2] = {rows, TENSOR_COLS};
            rc = weight_writer_add_fragment(w, b->names[i], "BF16", 2, shape, off, local,
                                            data + r * rows * TENSOR_COLS * 2);
        }
    }
    if (rc == 0) return weight_writer_commit(w, NULL);
    weight_writer_abort(w);
    return rc;
}

/* Seconds of one weight_get, or -1. */
static double timed_get(weight_store *s, bench *b, const char *rev, uint32_t tp, uint32_t rank,
                        uint64_t *bytes)
{
    weight_identity id;
    weight_get_stats st;
    weight_identity_set(&id, NULL, "bench", "model", rev, 1);
    b->tp = tp;
    b->rank = rank;
    weight_placement pl = {place, b};
    weight_bindings bd = {NULL, 0, provide, b};
    double t0 = now_s();
    int rc = weight_get(s, &id, &pl, &bd, &st);
    double dt = now_s() - t0;
    if (rc != 0) {
        fprintf(stderr, "weight_get %s: %s: %s\n", rev, weight_error_name(rc),
                weight_store_last_error(s));
        return -1;
    }
    *bytes = st.bytes;
    return dt;
}

static double timed_memcpy(uint8_t *dst, const uint8_t *src, uint64_t bytes)
{
    double t0 = now_s();
    memcpy(dst, src, bytes);
    return now_s() - t0;
}

/* Seconds of one core's SHA-256 (OpenSSL) over bytes: the work weight_put
 * cannot avoid, whatever it overlaps it with. */
static double timed_sha256(const uint8_t *src, uint64_t bytes)
{
    unsigned char md[32];
    double t0 = now_s();
    hx_sha256(src, bytes, md);
    return now_s() - t0;
}

static void report(const char *what, double get_s, double first_s, double copy_s, uint64_t bytes,
                   double target)
{
    double gib = (double)bytes / (double)(1ull << 30);
    double ratio = copy_s / get_s;
    printf("%-9s %6.2f GiB  weight_get %6.2f GiB/s (first %5.2f GiB/s)  memcpy %6.2f GiB/s  "
           "ratio %.2f (target %.1f) %s\n",
           what, gib, gib / get_s, gib / first_s, gib / copy_s, ratio, target,
           ratio >= target ? "ok" : "BELOW");
    char w[64], f1[48], f2[48], tg[16];
    bench_summary(bench_fmt(w, sizeof(w), "weight_get HOT co-located, %s, %.2f GiB", what, gib),
                  bench_fmt(f1, sizeof(f1), "%.2f GiB/s", gib / get_s),
                  bench_fmt(f2, sizeof(f2), "memcpy %.2f GiB/s", gib / copy_s), ratio,
                  bench_fmt(tg, sizeof(tg), ">= %.1fx", target));
}

int main(int argc, char **argv)
{
    double gib = 4.0;
    const char *shm = getenv("WM_BENCH_SHM") ? getenv("WM_BENCH_SHM") : "/dev/shm";
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        double v = strtod(argv[i], &end);
        if (end != argv[i] && *end == '\0' && v > 0) gib = v;
        else setenv("TMPDIR", argv[i], 1); /* run_all.sh's data directory */
    }
    bench b;
    hx_master m;
    char extra[1024], segdir[512], err[512];
    weight_store *s = NULL;
    int status = 1;
    memset(&b, 0, sizeof b);
    b.tensor_bytes = TENSOR_ROWS * TENSOR_COLS * 2;
    b.n_tensors = (size_t)(gib * (double)(1ull << 30) / (double)b.tensor_bytes);
    if (b.n_tensors < 1) b.n_tensors = 1;
    uint64_t total = b.n_tensors * b.tensor_bytes;
    uint64_t seg_bytes = 2 * total + (512ull << 20);

    snprintf(segdir, sizeof segdir, "%s/wm-bench-weight-get-%d", shm, (int)getpid());
    snprintf(extra, sizeof extra,
             "node:\n  segment_dir: \"%s\"\n  segment_bytes: %llu\n"
             "cluster:\n  default_weight_preferred_residency: hot\n"
             "snapshot:\n  every_records: 0\n",
             segdir, (unsigned long long)seg_bytes);
    if (hx_init(&m, "bench-get", extra) < 0 || hx_start(&m, 60000) < 0) {
        fprintf(stderr, "bench: cannot start the master\n");
        return 1;
    }
    b.src = malloc(total);
    b.dst = malloc(total);
    b.names = calloc(b.n_tensors, sizeof *b.names);
    if (b.src == NULL || b.dst == NULL || b.names == NULL) {
        fprintf(stderr, "bench: cannot allocate 2 x %llu bytes\n", (unsigned long long)total);
        goto stop;
    }
    for (size_t i = 0; i < b.n_tensors; i++) snprintf(b.names[i], sizeof b.names[i], "t%04zu", i);
    for (uint64_t i = 0; i < total; i += 8) {
        uint64_t v = i * 0x9E3779B97F4A7C15ull;
        memcpy(b.src + i, &v, 8);
    }
    memset(b.dst, 1, total); /* touched: no page faults in either measurement */
    if (weight_store_open(m.socket, "bench", NULL, &s, err, sizeof err) != 0) {
        fprintf(stderr, "bench: %s\n", err);
        goto stop;
    }
    printf("revision: %zu BF16 tensors [%llu, %llu], %.2f GiB; segment %s; %ld cores\n",
           b.n_tensors, TENSOR_ROWS, TENSOR_COLS, (double)total / (double)(1ull << 30), segdir,
           sysconf(_SC_NPROCESSORS_ONLN));
    double t0 = now_s();
    int rc = publish(s, &b, "tp1", 1);
    double put_s = now_s() - t0;
    if (rc == 0) rc = publish(s, &b, "tp4", 4);
    if (rc != 0) {
        fprintf(stderr, "bench: put: %s: %s\n", weight_error_name(rc), weight_store_last_error(s));
        goto close_store;
    }
    double sha_s = timed_sha256(b.src, total), copy_s = timed_memcpy(b.dst, b.src, total);
    double put_gib = (double)total / (double)(1ull << 30);
    char f1[48], f2[96], w[64];
    printf("weight_put (TP1, SHA-256 + chunk sums, co-located): %.2f GiB/s   SHA-256 of the same "
           "bytes on one core %.2f GiB/s (x%.2f)   memcpy %.2f GiB/s\n",
           put_gib / put_s, put_gib / sha_s, sha_s / put_s, put_gib / copy_s);
    bench_summary(bench_fmt(w, sizeof(w), "weight_put co-located, %.2f GiB", put_gib),
                  bench_fmt(f1, sizeof(f1), "%.2f GiB/s", put_gib / put_s),
                  bench_fmt(f2, sizeof(f2), "one core's SHA-256 %.2f GiB/s (memcpy %.2f GiB/s)",
                            put_gib / sha_s, put_gib / copy_s),
                  sha_s / put_s, ">= 0.9x");

    const int runs = 5;
    uint64_t bytes = 0;
    double first, best = 1e9, copy = 1e9;
    /* TP1: the whole revision. */
    if ((first = timed_get(s, &b, "tp1", 1, 0, &bytes)) < 0) goto close_store;
    if (memcmp(b.dst, b.src, total) != 0) {
        fprintf(stderr, "bench: TP1 bytes differ\n");
        goto close_store;
    }
    for (int r = 0; r < runs; r++) {
        double t = timed_get(s, &b, "tp1", 1, 0, &bytes);
        if (t < 0) goto close_store;
        if (t < best) best = t;
        t = timed_memcpy(b.dst, b.src, total);
        if (t < copy) copy = t;
    }
    report("TP1", best, first, copy, bytes, 0.8);

    /* TP4 -> TP2: rank 0 reads half of every tensor (two of its four fragments). */
    best = copy = 1e9;
    if ((first = timed_get(s, &b, "tp4", 2, 0, &bytes)) < 0) goto close_store;
    for (size_t i = 0; i < b.n_tensors; i++)
        if (memcmp(b.dst + i * (b.tensor_bytes / 2), b.src + i * b.tensor_bytes, b.tensor_bytes / 2)) {
            fprintf(stderr, "bench: TP4->TP2 bytes of tensor %zu differ\n", i);
            goto close_store;
        }
    for (int r = 0; r < runs; r++) {
        double t = timed_get(s, &b, "tp4", 2, 0, &bytes);
        if (t < 0) goto close_store;
        if (t < best) best = t;
        t = timed_memcpy(b.dst, b.src, bytes);
        if (t < copy) copy = t;
    }
    report("TP4->TP2", best, first, copy, bytes, 0.7);
    status = 0;
close_store:
    weight_store_close(s);
stop:
    hx_stop(&m);
    hx_cleanup(&m);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", segdir);
    if (system(cmd) != 0) fprintf(stderr, "bench: could not remove %s\n", segdir);
    free(b.src);
    free(b.dst);
    free(b.names);
    return status;
}
