/* bench_upsert.c -- how fast a trainer can publish generations: weight_upsert
 * of a lineage to COMMITTED, next to weight_put of the same bytes as a new
 * revision, in the same run.
 *
 * Starts build/bin/store_master (HOT, MANUAL defaults: nothing moves by
 * itself; the plugin's default tick of 1 s), publishes generation 1 of a
 * lineage, a model of 1 MiB (16 F32 tensors of 64 KiB), then ROUNDS rounds
 * (default 20), each three timed steps on the monotonic clock:
 *   - PUT_FIRST: weight_upsert of the next generation, its import, and
 *     weight_upsert_status every millisecond until the claim is COMMITTED
 *     (the base retired, drained and deleted);
 *   - DELETE_FIRST on a second lineage, the same way;
 *   - the baseline: weight_put of the same bytes as a new revision of a
 *     third resource (the import alone, no replacement).
 * Every round's bytes differ (no aliasing across rounds). Printed: each
 * step's median and slowest, and the medians' ratio (put / upsert: what the
 * replacement costs on top of the import). An upsert that fails or ends
 * ABORTED fails the bench. Usage: bench_upsert [ROUNDS] [DIR] (DIR: where
 * the master's data_dir goes, default /tmp). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"
#include "bench_summary.h"
#include "harness.h"
#include "weightclient.h"

#define N_TENSORS 16
#define ROWS 128
#define COLS 128
#define TENSOR_BYTES (ROWS * COLS * 4) /* 64 KiB */
#define MAX_ROUNDS 1000

static uint8_t model[N_TENSORS][TENSOR_BYTES];

static void fill(int round)
{
    for (int t = 0; t < N_TENSORS; t++)
        for (int i = 0; i < TENSOR_BYTES; i++)
            model[t][i] = (uint8_t)(i * 13 + t * 7 + (i >> 9) + round * 101);
}

/* Add the model's tensors to w and commit it; aborts w on failure. */
static int write_model(weight_writer *w)
{
    static const uint64_t shape[2] = {ROWS, COLS};
    char name[16];
    int rc = 0;
    for (int t = 0; rc == 0 && t < N_TENSORS; t++) {
        snprintf(name, sizeof(name), "t%d", t);
        rc = weight_writer_add_tensor(w, name, "F32", 2, shape, model[t]);
    }
    if (rc == 0) return weight_writer_commit(w, NULL);
    weight_writer_abort(w);
    return rc;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Replace res@gen by gen + 1 in mode and wait for COMMITTED; the seconds it
 * took, or -1 (printed why). */
static double upsert_round(weight_store *s, const char *res, uint64_t gen, weight_upsert_mode mode)
{
    weight_identity base;
    weight_metadata md;
    weight_upsert_claim c;
    weight_writer *w = NULL;
    weight_identity_set(&base, NULL, "bench", res, "v1", gen);
    int rc = weight_get_metadata(s, &base, &md, NULL);
    double t0 = bench_now_s();
    if (rc == 0)
        rc = weight_upsert(s, &base, gen + 1, mode, NULL, md.metadata_generation, NULL, 0, &c, &w);
    if (rc == 0 && w != NULL) rc = write_model(w);
    for (int polls = 0; rc == 0; polls++) {
        if ((rc = weight_upsert_status(s, &base, &c)) != 0) break;
        if (c.phase == WEIGHT_PHASE_COMMITTED) return bench_now_s() - t0;
        if (c.phase == WEIGHT_PHASE_ABORTED) {
            fprintf(stderr, "bench: upsert of %s@%llu ABORTED: %s\n", res,
                    (unsigned long long)gen + 1, c.error);
            return -1;
        }
        if (polls > 120000) {
            fprintf(stderr, "bench: upsert of %s@%llu not COMMITTED after 2 minutes (phase %s)\n",
                    res, (unsigned long long)gen + 1, weight_upsert_phase_name((int)c.phase));
            return -1;
        }
        sleep_ms(1);
    }
    fprintf(stderr, "bench: upsert of %s@%llu: %s: %s\n", res, (unsigned long long)gen + 1,
            weight_error_name(rc), weight_store_last_error(s));
    return -1;
}

/* weight_put of the model as revision r<round> of resource "put"; the
 * seconds it took, or -1. */
static double put_round(weight_store *s, int round)
{
    weight_identity id;
    weight_writer *w = NULL;
    char rev[32];
    snprintf(rev, sizeof(rev), "r%d", round);
    weight_identity_set(&id, NULL, "bench", "put", rev, 1);
    double t0 = bench_now_s();
    int rc = weight_put_begin(s, &id, NULL, &w);
    if (rc == 0) rc = write_model(w);
    if (rc == 0) return bench_now_s() - t0;
    fprintf(stderr, "bench: put of %s: %s: %s\n", rev, weight_error_name(rc),
            weight_store_last_error(s));
    return -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sort v[0..n) and print its median and maximum in ms; the median. */
static double report(const char *what, double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    double med = v[n / 2];
    printf("%-44s median %8.2f ms, slowest %8.2f ms (%d rounds)\n", what, med * 1e3,
           v[n - 1] * 1e3, n);
    return med;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    if (argc > 2) setenv("TMPDIR", argv[2], 1);
    if (rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: bench_upsert [ROUNDS 1..%d] [DIR]\n", MAX_ROUNDS);
        return 2;
    }
    hx_master m;
    char err[512];
    int status = 1;
    static double pf[MAX_ROUNDS], df[MAX_ROUNDS], pt[MAX_ROUNDS];
    if (hx_init(&m, "bench-upsert",
                "cluster:\n  default_weight_preferred_residency: hot\n"
                "  default_weight_migration_mode: manual\n") < 0 ||
        hx_start(&m, 60000) < 0) {
        fprintf(stderr, "bench: cannot start the master\n");
        return 1;
    }
    weight_store *s = NULL;
    if (weight_store_open(m.socket, "bench", NULL, &s, err, sizeof(err)) != 0) {
        fprintf(stderr, "bench: %s\n", err);
        goto stop;
    }
    fill(0);
    for (int l = 0; l < 2; l++) {
        weight_identity id;
        weight_writer *w = NULL;
        weight_identity_set(&id, NULL, "bench", l == 0 ? "pf" : "df", "v1", 1);
        int rc = weight_put_begin(s, &id, NULL, &w);
        if (rc == 0) rc = write_model(w);
        if (rc != 0) {
            fprintf(stderr, "bench: publish: %s: %s\n", weight_error_name(rc),
                    weight_store_last_error(s));
            goto close_store;
        }
    }
    printf("model: %d KiB (%d F32 tensors), HOT; the plugin's tick at its default period\n",
           N_TENSORS * TENSOR_BYTES / 1024, N_TENSORS);
    for (int r = 0; r < rounds; r++) {
        fill(r + 1);
        uint64_t gen = (uint64_t)r + 1;
        if ((pf[r] = upsert_round(s, "pf", gen, WEIGHT_UPSERT_PUT_FIRST)) < 0 ||
            (df[r] = upsert_round(s, "df", gen, WEIGHT_UPSERT_DELETE_FIRST)) < 0 ||
            (pt[r] = put_round(s, r)) < 0)
            goto close_store;
    }
    double mpf = report("weight_upsert PUT_FIRST to COMMITTED", pf, rounds);
    double mdf = report("weight_upsert DELETE_FIRST to COMMITTED", df, rounds);
    double mpt = report("baseline: weight_put of the same bytes", pt, rounds);
    char fig[96], base[96];
    bench_summary("weight_upsert PUT_FIRST of 1 MiB to COMMITTED (median)",
                  bench_fmt(fig, sizeof(fig), "%.1f ms", mpf * 1e3),
                  bench_fmt(base, sizeof(base), "weight_put %.1f ms", mpt * 1e3), mpt / mpf,
                  "reported");
    bench_summary("weight_upsert DELETE_FIRST of 1 MiB to COMMITTED (median)",
                  bench_fmt(fig, sizeof(fig), "%.1f ms", mdf * 1e3),
                  bench_fmt(base, sizeof(base), "weight_put %.1f ms", mpt * 1e3), mpt / mdf,
                  "reported");
    status = 0;
close_store:
    weight_store_close(s);
stop:
    hx_cleanup(&m);
    return status;
}
