/* bench_metadata_reads.c -- metadata reads against a master holding many
 * revisions, next to Redis GETs on the same machine in the same run.
 *
 * Starts a master (file OpLog, embedded node, segments under /dev/shm),
 * publishes N small revisions through libweightclient from 8 threads (one
 * 16-byte tensor each: the metadata is what is measured, not payloads),
 * reports the publish rate and the master's anonymous memory per revision,
 * then runs weight_get_metadata and weight_is_exist on random revisions for
 * SECONDS with 1 and 50 clients (one thread and one connection each, one
 * request in flight per client, over the master's Unix socket). The
 * baseline is redis-server (in memory) over its Unix socket, filled with as
 * many keys by redis-benchmark SETs, then redis-benchmark GETs with the same
 * client counts and no pipelining. Then it restarts the master (clean stop,
 * start, until a weight_get_metadata is answered: snapshot plus OpLog tail)
 * next to Redis loading an RDB of as many keys as the master has objects.
 * Prints each figure and the ratio.
 *
 * Usage: bench_metadata_reads [DIR (/tmp)] [REVISIONS (100000)] [SECONDS (3)] */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "redis_box.h"
#include "weightclient.h"

#define PUT_THREADS 8

typedef struct bench {
    const char *socket;
    long n_revisions;
    double seconds;
    _Atomic long next;        /* publish: the next revision to put */
    _Atomic int failed;
    int exist;                /* read: weight_is_exist instead of get_metadata */
    _Atomic long ops;
    _Atomic int stop;
} bench;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void identity_of(weight_identity *id, long i)
{
    char res[64];
    snprintf(res, sizeof(res), "model-%07ld", i);
    weight_identity_set(id, NULL, "bench", res, "r1", 1);
}

static weight_store *open_store(const bench *b)
{
    weight_store *s = NULL;
    char err[256];
    if (weight_store_open(b->socket, NULL, NULL, &s, err, sizeof(err)) != WEIGHT_OK) {
        fprintf(stderr, "bench: cannot open the store: %s\n", err);
        return NULL;
    }
    return s;
}

static void *put_thread(void *arg)
{
    bench *b = arg;
    weight_store *s = open_store(b);
    float data[4] = {1, 2, 3, 4};
    uint64_t shape[1] = {4};
    if (s == NULL) {
        atomic_store(&b->failed, 1);
        return NULL;
    }
    for (long i; (i = atomic_fetch_add(&b->next, 1)) < b->n_revisions && !atomic_load(&b->failed);) {
        weight_identity id;
        weight_writer *w = NULL;
        identity_of(&id, i);
        if (weight_put_begin(s, &id, NULL, &w) != WEIGHT_OK ||
            weight_writer_add_tensor(w, "w", "F32", 1, shape, data) != WEIGHT_OK ||
            weight_writer_commit(w, NULL) != WEIGHT_OK) {
            if (w != NULL && atomic_load(&b->failed) == 0)
                fprintf(stderr, "bench: put %ld: %s\n", i, weight_store_last_error(s));
            atomic_store(&b->failed, 1);
        }
    }
    weight_store_close(s);
    return NULL;
}

static void *read_thread(void *arg)
{
    bench *b = arg;
    weight_store *s = open_store(b);
    uint64_t x = (uint64_t)(uintptr_t)&s ^ (uint64_t)time(NULL);
    long ops = 0;
    if (s == NULL) {
        atomic_store(&b->failed, 1);
        return NULL;
    }
    while (!atomic_load(&b->stop)) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        weight_identity id;
        identity_of(&id, (long)(x % (uint64_t)b->n_revisions));
        int rc, exists = 0;
        weight_metadata md;
        if (b->exist)
            rc = weight_is_exist(s, &id, &exists);
        else
            rc = weight_get_metadata(s, &id, &md, NULL);
        if (rc != WEIGHT_OK || (b->exist && !exists)) {
            fprintf(stderr, "bench: read: %d %s\n", rc, weight_store_last_error(s));
            atomic_store(&b->failed, 1);
            break;
        }
        ops++;
    }
    atomic_fetch_add(&b->ops, ops);
    weight_store_close(s);
    return NULL;
}

/* Reads per second with `clients` threads for b->seconds; -1 on failure. */
static double measure_reads(bench *b, int clients, int exist)
{
    pthread_t t[64];
    b->exist = exist;
    atomic_store(&b->ops, 0);
    atomic_store(&b->stop, 0);
    double t0 = now_s();
    for (int i = 0; i < clients; i++) pthread_create(&t[i], NULL, read_thread, b);
    usleep((useconds_t)(b->seconds * 1e6));
    atomic_store(&b->stop, 1);
    for (int i = 0; i < clients; i++) pthread_join(t[i], NULL);
    double dt = now_s() - t0;
    return atomic_load(&b->failed) ? -1 : (double)atomic_load(&b->ops) / dt;
}

/* The value of a metric line starting with `name` in the master's
 * /metrics (name includes its labels), or -1. */
static double metric_of(const hx_master *m, const char *name)
{
    char *body = NULL;
    double v = -1;
    if (hx_http_get(m, "/metrics", &body) == 200 && body != NULL) {
        for (char *line = body; line != NULL && *line; line = strchr(line, '\n')) {
            if (*line == '\n') line++;
            if (strncmp(line, name, strlen(name)) == 0 && line[strlen(name)] == ' ') {
                v = atof(line + strlen(name) + 1);
                break;
            }
        }
    }
    free(body);
    return v;
}

/* Restart the master (clean stop, then start) and return the seconds from
 * the start until a weight_get_metadata is answered, or -1. */
static double restart_seconds(hx_master *m, bench *b)
{
    if (hx_stop(m) != 0) return -1;
    double t0 = now_s();
    if (hx_start(m, 600000) < 0) return -1;
    weight_store *s = NULL;
    weight_identity id;
    weight_metadata md;
    identity_of(&id, b->n_revisions - 1);
    for (int i = 0; i < 60000; i++) {
        if (s == NULL) s = open_store(b);
        if (s != NULL && weight_get_metadata(s, &id, &md, NULL) == WEIGHT_OK) break;
        usleep(1000);
    }
    double t = now_s() - t0;
    weight_store_close(s);
    return t;
}

/* A line of /proc/PID/status in KiB ("RssAnon:"), -1 if absent. */
static long proc_status_kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    long v = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, field, strlen(field)) == 0) v = atol(line + strlen(field));
    fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    static bench b;
    b.n_revisions = argc > 2 ? atol(argv[2]) : 100000;
    b.seconds = argc > 3 ? atof(argv[3]) : 3;
    if (b.n_revisions < 1 || b.seconds <= 0) {
        fprintf(stderr, "usage: %s [DIR] [REVISIONS] [SECONDS]\n", argv[0]);
        return 2;
    }
    (void)dir;
    hx_master m;
    char extra[1024], segdir[128], cmd[256];
    int status = 1;
    snprintf(segdir, sizeof(segdir), "/dev/shm/wm-bench-md-%d", (int)getpid());
    snprintf(extra, sizeof(extra),
             "node:\n  segment_dir: \"%s\"\n  segment_bytes: %llu\n"
             "cluster:\n  default_weight_preferred_residency: hot\n",
             segdir, (unsigned long long)(b.n_revisions * 16384ull + (256ull << 20)));
    if (hx_init(&m, "bench-md", extra) < 0 || hx_start(&m, 60000) < 0) {
        fprintf(stderr, "bench: cannot start the master\n");
        return 1;
    }
    b.socket = m.socket;
    long anon0 = proc_status_kib(m.pid, "RssAnon:");
    pthread_t t[PUT_THREADS];
    double t0 = now_s();
    for (int i = 0; i < PUT_THREADS; i++) pthread_create(&t[i], NULL, put_thread, &b);
    for (int i = 0; i < PUT_THREADS; i++) pthread_join(t[i], NULL);
    double put_s = now_s() - t0;
    if (atomic_load(&b.failed)) goto stop;
    long anon1 = proc_status_kib(m.pid, "RssAnon:");
    printf("published %ld revisions in %.1f s (%.0f revisions/s, %d clients); master anonymous "
           "memory %+.1f MiB: %.0f bytes per revision (2 objects each)\n",
           b.n_revisions, put_s, (double)b.n_revisions / put_s, PUT_THREADS,
           (double)(anon1 - anon0) / 1024.0, (double)(anon1 - anon0) * 1024.0 / (double)b.n_revisions);
    fflush(stdout);

    int counts[2] = {1, 50};
    double md[2], ex[2], rd[2] = {-1, -1};
    for (int i = 0; i < 2; i++) {
        if ((md[i] = measure_reads(&b, counts[i], 0)) < 0) goto stop;
        if ((ex[i] = measure_reads(&b, counts[i], 1)) < 0) goto stop;
    }
    double objects = metric_of(&m, "store_objects{data_type=\"weight\"}") +
                     metric_of(&m, "store_objects{data_type=\"metadata\"}");
    double snap_seq = metric_of(&m, "snapshot_last_seq");
    double appends = metric_of(&m, "oplog_appends_total");
    double restart = restart_seconds(&m, &b);
    if (restart < 0) goto stop;

    redis_box rb;
    double redis_load = -1;
    memset(&rb, 0, sizeof(rb));
    if (redis_start(&rb, dir, 0) == 0 && redis_populate(&rb, b.n_revisions) == 0) {
        for (int i = 0; i < 2; i++) rd[i] = redis_bench(&rb, "get", counts[i], counts[i] == 1 ? 100000 : 500000);
        if (objects > 0 && redis_populate(&rb, (long)objects) == 0) redis_load = redis_reload_seconds(&rb);
    } else {
        printf("redis: no redis-server could be started (make bench installs redis-server)\n");
    }
    redis_stop(&rb);
    printf("restart with %ld revisions (%.0f objects; %.0f records appended this run, newest "
           "snapshot at seq %.0f): serving in %.3f s, %.0f objects/s;   redis RDB of %.0f keys "
           "loaded in %.3f s, %.0f keys/s;   x%.2f (target >= 1.0x, serving < 2 s)\n",
           b.n_revisions, objects, appends, snap_seq, restart, objects / restart, objects,
           redis_load, redis_load > 0 ? objects / redis_load : 0.0,
           redis_load > 0 ? (objects / restart) / (objects / redis_load) : 0.0);
    for (int i = 0; i < 2; i++) {
        printf("clients %2d: weight_get_metadata %8.0f/s   weight_is_exist %8.0f/s   redis GET %8.0f/s"
               "   get_metadata/redis x%.2f   is_exist/redis x%.2f   (%ld revisions)\n",
               counts[i], md[i], ex[i], rd[i], rd[i] > 0 ? md[i] / rd[i] : 0.0,
               rd[i] > 0 ? ex[i] / rd[i] : 0.0, b.n_revisions);
    }
    status = 0;
stop:
    hx_stop(&m);
    hx_cleanup(&m);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", segdir); /* the segment, outside the master's dir */
    if (system(cmd) != 0) fprintf(stderr, "bench: could not remove %s\n", segdir);
    return status;
}
