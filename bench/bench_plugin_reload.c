/* bench_plugin_reload.c -- what an in-place reload of weight_mgmt.so costs
 * the clients reading weights, next to the same load without a reload in
 * the same run.
 *
 * Starts build/bin/store_master (HOT, MANUAL defaults: nothing moves by
 * itself), publishes a revision of 1 MiB (16 F32 tensors), and runs THREADS
 * client threads (default 4), each with its own weight_store, doing
 * weight_get of the whole revision in a loop and timing every call on the
 * monotonic clock. First SECONDS (default 3) without reloads: the baseline
 * p50, p99 and max. Then the same load while the plugin is reloaded RELOADS
 * times (default 10, one every 300 ms) through the admin RPC (what
 * `weightctl plugin reload` sends): each reload's wall time as the client
 * saw it and as the master reported it, the time the master held the
 * plugin's calls, and the reload pause -- the longest weight_get that
 * overlapped a reload. Printed: the pause next to the baseline p99, as a
 * ratio. Every get is checked byte for byte; a failed or wrong get fails the
 * bench. Usage: bench_plugin_reload [THREADS] [RELOADS] [DIR] (DIR: where
 * the master's data_dir goes, default /tmp). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_clock.h"
#include "bench_summary.h"
#include "harness.h"
#include "host_rpc.pb-c.h"
#include "rpc_client.h"
#include "weightclient.h"

#define N_TENSORS 16
#define ROWS 128
#define COLS 128
#define TENSOR_BYTES (ROWS * COLS * 4) /* 64 KiB */
#define BASE_SECONDS 3.0
#define MAX_SAMPLES 2000000

static uint8_t model[N_TENSORS][TENSOR_BYTES];
static const char *names[N_TENSORS] = {"t0", "t1", "t2",  "t3",  "t4",  "t5",  "t6",  "t7",
                                       "t8", "t9", "t10", "t11", "t12", "t13", "t14", "t15"};

typedef struct sample {
    double start, end;
} sample;

typedef struct worker {
    const hx_master *m;
    volatile int *stop;
    sample *samples;
    size_t n, cap;
    unsigned long failed, wrong;
    char error[512];
} worker;

static int read_all(weight_store *s, uint8_t (*buf)[TENSOR_BYTES])
{
    weight_identity id;
    weight_binding b[N_TENSORS];
    weight_identity_set(&id, NULL, "bench", "reload", "v1", 1);
    for (int t = 0; t < N_TENSORS; t++) b[t] = (weight_binding){names[t], buf[t], TENSOR_BYTES};
    weight_bindings bd = {b, N_TENSORS, NULL, NULL};
    return weight_get(s, &id, NULL, &bd, NULL);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    char err[512];
    weight_store *s = NULL;
    uint8_t (*buf)[TENSOR_BYTES] = malloc(sizeof(model));
    if (buf == NULL || weight_store_open(w->m->socket, "bench", NULL, &s, err, sizeof(err)) != 0) {
        w->failed++;
        free(buf);
        return NULL;
    }
    while (!*w->stop && w->n < w->cap) {
        double t0 = bench_now_s();
        int rc = read_all(s, buf);
        double t1 = bench_now_s();
        if (rc != 0) {
            w->failed++;
            snprintf(w->error, sizeof(w->error), "%s: %s", weight_error_name(rc),
                     weight_store_last_error(s));
        } else if (memcmp(buf, model, sizeof(model)) != 0) {
            w->wrong++;
        }
        w->samples[w->n++] = (sample){t0, t1};
    }
    weight_store_close(s);
    free(buf);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One reload through the admin RPC; 0 with the master's wall and held
 * times (us), or -1. */
static int reload(rpcc_conn *c, uint64_t *wall_us, uint64_t *pause_us)
{
    PluginRequest req = PLUGIN_REQUEST__INIT;
    PluginChange *resp = NULL;
    int status = 0;
    char *msg = NULL;
    req.name = "weight_mgmt";
    int rc = rpcc_call_msg(c, HOST_SERVICE__HOST_SERVICE_ADMIN, ADMIN_METHOD__ADMIN_PLUGIN_RELOAD,
                           &req.base, &plugin_change__descriptor, (ProtobufCMessage **)&resp,
                           &status, NULL, NULL, &msg);
    if (rc < 0 || status != 0 || resp == NULL) {
        fprintf(stderr, "bench: reload: %s\n", rc < 0 ? rpcc_last_error(c) : msg ? msg : "refused");
        free(msg);
        return -1;
    }
    *wall_us = resp->wall_us;
    *pause_us = resp->pause_us;
    plugin_change__free_unpacked(resp, NULL);
    free(msg);
    return 0;
}

/* Run the load on `threads` workers until *stop; the samples stay in ws. */
static int start_load(worker *ws, pthread_t *th, int threads)
{
    for (int i = 0; i < threads; i++) {
        ws[i].n = 0;
        if (pthread_create(&th[i], NULL, worker_main, &ws[i]) != 0) return -1;
    }
    return 0;
}

static int join_load(worker *ws, pthread_t *th, int threads)
{
    int bad = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        if (ws[i].failed || ws[i].wrong) {
            fprintf(stderr, "bench: thread %d: %lu failed, %lu wrong bytes (%s)\n", i, ws[i].failed,
                    ws[i].wrong, ws[i].error);
            bad = 1;
        }
    }
    return bad ? -1 : 0;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    int reloads = argc > 2 ? atoi(argv[2]) : 10;
    if (argc > 3) setenv("TMPDIR", argv[3], 1);
    if (threads < 1 || threads > 64 || reloads < 1 || reloads > 1000) {
        fprintf(stderr, "usage: bench_plugin_reload [THREADS 1..64] [RELOADS 1..1000] [DIR]\n");
        return 2;
    }
    for (int t = 0; t < N_TENSORS; t++)
        for (int i = 0; i < TENSOR_BYTES; i++) model[t][i] = (uint8_t)(i * 13 + t * 7 + (i >> 9));

    hx_master m;
    char err[512];
    int status = 1;
    if (hx_init(&m, "bench-reload",
                "snapshot:\n  every_records: 0\n"
                "cluster:\n  default_weight_preferred_residency: hot\n"
                "  default_weight_migration_mode: manual\n") < 0 ||
        hx_start(&m, 60000) < 0) {
        fprintf(stderr, "bench: cannot start the master\n");
        return 1;
    }
    weight_store *s = NULL;
    weight_writer *w = NULL;
    weight_identity id;
    uint64_t shape[2] = {ROWS, COLS};
    weight_identity_set(&id, NULL, "bench", "reload", "v1", 1);
    if (weight_store_open(m.socket, "bench", NULL, &s, err, sizeof(err)) != 0) {
        fprintf(stderr, "bench: %s\n", err);
        goto stop;
    }
    int rc = weight_put_begin(s, &id, NULL, &w);
    for (int t = 0; rc == 0 && t < N_TENSORS; t++)
        rc = weight_writer_add_tensor(w, names[t], "F32", 2, shape, model[t]);
    if (rc == 0) rc = weight_writer_commit(w, NULL);
    else if (w != NULL) weight_writer_abort(w);
    weight_store_close(s);
    if (rc != 0) {
        fprintf(stderr, "bench: publish: %s\n", weight_error_name(rc));
        goto stop;
    }

    volatile int stop = 0;
    worker *ws = calloc((size_t)threads, sizeof(*ws));
    pthread_t *th = calloc((size_t)threads, sizeof(*th));
    size_t cap = MAX_SAMPLES / (size_t)threads;
    for (int i = 0; i < threads; i++) {
        ws[i] = (worker){.m = &m, .stop = &stop, .cap = cap};
        ws[i].samples = malloc(cap * sizeof(sample));
    }
    printf("load: %d threads, weight_get of a %d KiB HOT revision (%d tensors) in a loop; %ld cores\n",
           threads, N_TENSORS * TENSOR_BYTES / 1024, N_TENSORS, sysconf(_SC_NPROCESSORS_ONLN));

    /* Baseline: the same load, no reload. */
    if (start_load(ws, th, threads) < 0) goto free_load;
    usleep((useconds_t)(BASE_SECONDS * 1e6));
    stop = 1;
    if (join_load(ws, th, threads) < 0) goto free_load;
    size_t total = 0;
    for (int i = 0; i < threads; i++) total += ws[i].n;
    double *lat = malloc((total ? total : 1) * sizeof(double));
    size_t k = 0;
    for (int i = 0; i < threads; i++)
        for (size_t j = 0; j < ws[i].n; j++) lat[k++] = ws[i].samples[j].end - ws[i].samples[j].start;
    qsort(lat, k, sizeof(double), cmp_double);
    double p50 = lat[k / 2], p99 = lat[(size_t)((double)k * 0.99)], max0 = lat[k - 1];
    printf("without reload: %zu gets in %.1f s, p50 %.3f ms, p99 %.3f ms, max %.3f ms\n", k,
           BASE_SECONDS, p50 * 1e3, p99 * 1e3, max0 * 1e3);
    free(lat);

    /* The same load while the plugin is reloaded. */
    rpcc_conn *c = NULL;
    rpcc_options opt = {.timeout_ms = 60000};
    if (rpcc_connect(m.socket, &opt, &c, err, sizeof(err)) < 0) {
        fprintf(stderr, "bench: %s\n", err);
        goto free_load;
    }
    double *win0 = calloc((size_t)reloads, sizeof(double)), *win1 = calloc((size_t)reloads, sizeof(double));
    uint64_t *mwall = calloc((size_t)reloads, sizeof(uint64_t)), *mpause = calloc((size_t)reloads, sizeof(uint64_t));
    stop = 0;
    if (start_load(ws, th, threads) < 0) goto close_conn;
    usleep(300000);
    int failed = 0;
    for (int r = 0; r < reloads && !failed; r++) {
        win0[r] = bench_now_s();
        failed = reload(c, &mwall[r], &mpause[r]) < 0;
        win1[r] = bench_now_s();
        usleep(300000);
    }
    stop = 1;
    if (join_load(ws, th, threads) < 0 || failed) goto close_conn;
    double pause = 0, wall_max = 0;
    size_t during = 0, gets = 0;
    double *walls = calloc((size_t)reloads, sizeof(double));
    double *held = calloc((size_t)reloads, sizeof(double));
    for (int r = 0; r < reloads; r++) {
        walls[r] = win1[r] - win0[r];
        held[r] = (double)mpause[r] / 1e6;
        if (walls[r] > wall_max) wall_max = walls[r];
    }
    for (int i = 0; i < threads; i++)
        for (size_t j = 0; j < ws[i].n; j++) {
            const sample *x = &ws[i].samples[j];
            gets++;
            for (int r = 0; r < reloads; r++) {
                if (x->end < win0[r] || x->start > win1[r]) continue;
                during++;
                if (x->end - x->start > pause) pause = x->end - x->start;
                break;
            }
        }
    qsort(walls, (size_t)reloads, sizeof(double), cmp_double);
    qsort(held, (size_t)reloads, sizeof(double), cmp_double);
    printf("with %d reloads: %zu gets, none failed, all byte-identical; %zu overlapped a reload\n",
           reloads, gets, during);
    printf("reload wall time (client, admin RPC): median %.3f ms, max %.3f ms; calls held on the "
           "master: median %.3f ms, max %.3f ms\n",
           walls[reloads / 2] * 1e3, wall_max * 1e3, held[reloads / 2] * 1e3, held[reloads - 1] * 1e3);
    printf("reload pause (longest weight_get overlapping a reload): %.3f ms = x%.2f of the p99 "
           "without reload (%.3f ms)\n",
           pause * 1e3, p99 > 0 ? pause / p99 : 0.0, p99 * 1e3);
    char f1[64], f2[48];
    bench_summary("plugin reload under weight_get load",
                  bench_fmt(f1, sizeof(f1), "0 failed reads, pause %.3f ms", pause * 1e3),
                  bench_fmt(f2, sizeof(f2), "p99 without reload %.3f ms", p99 * 1e3),
                  p99 > 0 ? pause / p99 : -1, "0 failed reads");
    status = 0;
    free(walls);
    free(held);
close_conn:
    rpcc_close(c);
    free(win0);
    free(win1);
    free(mwall);
    free(mpause);
free_load:
    for (int i = 0; i < threads; i++) free(ws[i].samples);
    free(ws);
    free(th);
stop:
    hx_stop(&m);
    hx_cleanup(&m);
    return status;
}
