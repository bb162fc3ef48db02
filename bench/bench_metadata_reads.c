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
 * On the way up it stops at 1,000 and 10,000 revisions (those below N) and
 * at N to measure the costs that must not grow with the count: the weight
 * plugin's reconcile tick (mean duration of the idle ticks over 2 s, from
 * host_plugin_tick_seconds), a weight_list page of 100 (mean over 200 pages
 * walked with their tokens), and a snapshot (time of the admin snapshot RPC
 * and the file's size, as MB/s; how long its capture held the master's loop
 * and how long it took to encode, from the master's store_snapshot_*
 * gauges), with the master's anonymous memory per
 * revision and per object. The 100k/1k ratios of tick and list page are
 * printed (asked <= 1.3). Every figure also goes out as a "summary |" line
 * that bench/run_all.sh gathers into one table.
 *
 * Usage: bench_metadata_reads [DIR (/tmp)] [REVISIONS (100000)] [SECONDS (3)] */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "kv_client.h"
#include "bench_summary.h"
#include "redis_box.h"
#include "weightclient.h"

#define PUT_THREADS 8
#define LIST_PAGE 100
#define LIST_PAGES 200
#define CHECKPOINTS_MAX 3

typedef struct bench {
    const char *socket;
    long n_revisions;         /* the count the reads and the restart run at */
    long target;              /* publish: up to this count (a checkpoint) */
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
    for (long i; (i = atomic_fetch_add(&b->next, 1)) < b->target && !atomic_load(&b->failed);) {
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

/* Mean duration in microseconds of the weight plugin's reconcile ticks
 * over 2 s (host_plugin_tick_seconds sum / count), -1 when none ran. */
static double tick_mean_us(const hx_master *m, double *ticks_per_s)
{
    const char *sum = "host_plugin_tick_seconds_sum{plugin=\"weight_mgmt\"}";
    const char *count = "host_plugin_tick_seconds_count{plugin=\"weight_mgmt\"}";
    double s0 = hx_metric(m, sum), c0 = hx_metric(m, count), t0 = now_s();
    usleep(2000000);
    double s1 = hx_metric(m, sum), c1 = hx_metric(m, count);
    *ticks_per_s = (c1 - c0) / (now_s() - t0);
    if (s0 < 0 || c0 < 0 || c1 <= c0) return -1;
    return (s1 - s0) / (c1 - c0) * 1e6;
}

/* Mean microseconds of a weight_list page of LIST_PAGE revisions, over
 * LIST_PAGES pages walked with their tokens (from the first page again at
 * the end), -1 on failure. */
static double list_page_us(const bench *b)
{
    weight_store *s = open_store(b);
    weight_list_query q = {.namespace_id = "bench", .limit = LIST_PAGE};
    char token[1024] = "", next[1024];
    double t0 = now_s(), us = -1;
    if (s == NULL) return -1;
    int i;
    for (i = 0; i < LIST_PAGES; i++) {
        weight_metadata *page = NULL;
        size_t n = 0;
        if (weight_list(s, &q, token, &page, &n, next, sizeof(next)) != WEIGHT_OK || n == 0) {
            fprintf(stderr, "bench: list: %s\n", weight_store_last_error(s));
            weight_list_free(page);
            break;
        }
        weight_list_free(page);
        memcpy(token, next, sizeof(token));
    }
    if (i == LIST_PAGES) us = (now_s() - t0) / LIST_PAGES * 1e6;
    weight_store_close(s);
    return us;
}

/* Take a snapshot through the admin RPC: its seconds and the size in MB of
 * the newest file in the master's snapshot directory. -1 on failure. */
static int snapshot_cost(const hx_master *m, double *seconds, double *mb)
{
    char dir[320], path[600], err[256];
    kvc *c = NULL;
    uint64_t seq = 0;
    struct stat st;
    /* Not hx_client's 10 s: 100,000 revisions are some 80 MB to write. */
    if (kvc_connect(m->socket, 600000, &c, err, sizeof(err)) < 0) {
        fprintf(stderr, "bench: snapshot: %s\n", err);
        return -1;
    }
    double t0 = now_s();
    int rc = kvc_snapshot(c, &seq);
    *seconds = now_s() - t0;
    kvc_close(c);
    if (rc < 0) {
        fprintf(stderr, "bench: the snapshot RPC failed after %.1f s (rc %d)\n", *seconds, rc);
        return -1;
    }
    snprintf(dir, sizeof(dir), "%s/data/snapshots", m->dir);
    DIR *d = opendir(dir);
    time_t newest = 0;
    *mb = -1;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_mtime >= newest) {
            newest = st.st_mtime;
            *mb = (double)st.st_size / 1e6;
        }
    }
    if (d != NULL) closedir(d);
    return *mb > 0 ? 0 : -1;
}

/* The costs that must stay flat, measured at one revision count. */
typedef struct flat_costs {
    long revisions;
    double tick_us, ticks_per_s;
    double list_us;
    double snap_s, snap_mb;
    double capture_ms, encode_s, write_s; /* the master's store_snapshot_* gauges */
    double bytes_per_rev, bytes_per_obj;
} flat_costs;

/* Publish up to b->target revisions; 0, or -1 when a put failed. */
static int publish_to(bench *b, double *seconds)
{
    pthread_t t[PUT_THREADS];
    long from = atomic_load(&b->next);
    double t0 = now_s();
    for (int i = 0; i < PUT_THREADS; i++) pthread_create(&t[i], NULL, put_thread, b);
    for (int i = 0; i < PUT_THREADS; i++) pthread_join(t[i], NULL);
    *seconds = now_s() - t0;
    atomic_store(&b->next, b->target); /* each thread took one index past it */
    if (atomic_load(&b->failed)) return -1;
    printf("published revisions %ld..%ld in %.1f s (%.0f revisions/s, %d clients)\n", from,
           b->target - 1, *seconds, (double)(b->target - from) / *seconds, PUT_THREADS);
    fflush(stdout);
    return 0;
}

/* Measure the flat costs at the current count into *fc; -1 on failure. */
static int measure_flat(const hx_master *m, const bench *b, long anon0, flat_costs *fc)
{
    double objects = hx_metric(m, "store_objects{data_type=\"weight\"}") +
                     hx_metric(m, "store_objects{data_type=\"metadata\"}");
    long anon = proc_status_kib(m->pid, "RssAnon:");
    fc->revisions = b->target;
    fc->bytes_per_rev = (double)(anon - anon0) * 1024.0 / (double)b->target;
    fc->bytes_per_obj = objects > 0 ? (double)(anon - anon0) * 1024.0 / objects : -1;
    if ((fc->tick_us = tick_mean_us(m, &fc->ticks_per_s)) < 0) {
        fprintf(stderr, "bench: no reconcile tick ran in 2 s\n");
        return -1;
    }
    if ((fc->list_us = list_page_us(b)) < 0) return -1;
    if (snapshot_cost(m, &fc->snap_s, &fc->snap_mb) < 0) return -1;
    fc->capture_ms = hx_metric(m, "store_snapshot_capture_seconds") * 1e3;
    fc->encode_s = hx_metric(m, "store_snapshot_encode_seconds");
    fc->write_s = hx_metric(m, "store_snapshot_write_seconds");
    printf("at %7ld revisions: reconcile tick %8.1f us (%.0f ticks/s)   list page of %d %8.1f us   "
           "snapshot %.2f MB in %.3f s (%.0f MB/s; loop held %.1f ms, encode %.3f s, capture end to durable "
           "%.3f s)   anonymous memory %.0f B/revision %.0f B/object\n",
           fc->revisions, fc->tick_us, fc->ticks_per_s, LIST_PAGE, fc->list_us, fc->snap_mb,
           fc->snap_s, fc->snap_mb / fc->snap_s, fc->capture_ms, fc->encode_s, fc->write_s,
           fc->bytes_per_rev, fc->bytes_per_obj);
    fflush(stdout);
    return 0;
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
    hx_master m;
    char extra[1024], segdir[128], cmd[256], f1[128], f2[128], what[128];
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

    /* Publish in steps, measuring the flat costs at each checkpoint. */
    long marks[CHECKPOINTS_MAX];
    flat_costs fc[CHECKPOINTS_MAX];
    int n_marks = 0;
    if (b.n_revisions > 1000) marks[n_marks++] = 1000;
    if (b.n_revisions > 10000) marks[n_marks++] = 10000;
    marks[n_marks++] = b.n_revisions;
    double put_s = 0;
    for (int k = 0; k < n_marks; k++) {
        double sec;
        b.target = marks[k];
        if (publish_to(&b, &sec) < 0 || measure_flat(&m, &b, anon0, &fc[k]) < 0) goto stop;
        put_s += sec;
    }
    const flat_costs *lo = &fc[0], *hi = &fc[n_marks - 1];
    printf("published %ld revisions at %.0f revisions/s (%d clients); from %ld to %ld revisions: "
           "tick x%.2f, list page x%.2f (asked <= 1.3)\n",
           b.n_revisions, (double)b.n_revisions / put_s, PUT_THREADS, lo->revisions, hi->revisions,
           hi->tick_us / lo->tick_us, hi->list_us / lo->list_us);
    fflush(stdout);

    int counts[2] = {1, 50};
    double md[2], ex[2], rd[2] = {-1, -1};
    for (int i = 0; i < 2; i++) {
        if ((md[i] = measure_reads(&b, counts[i], 0)) < 0) goto stop;
        if ((ex[i] = measure_reads(&b, counts[i], 1)) < 0) goto stop;
    }
    double objects = hx_metric(&m, "store_objects{data_type=\"weight\"}") +
                     hx_metric(&m, "store_objects{data_type=\"metadata\"}");
    double snap_seq = hx_metric(&m, "snapshot_last_seq");
    double appends = hx_metric(&m, "oplog_appends_total");
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

    for (int i = 0; i < 2; i++) {
        bench_fmt(f2, sizeof(f2), "redis GET %.0f/s", rd[i]);
        bench_fmt(what, sizeof(what), "weight_get_metadata, %d client%s, %ld revisions", counts[i],
                  counts[i] > 1 ? "s" : "", b.n_revisions);
        bench_summary(what, bench_fmt(f1, sizeof(f1), "%.0f/s", md[i]), f2,
                      rd[i] > 0 ? md[i] / rd[i] : -1, ">= 1.0x");
        bench_fmt(what, sizeof(what), "weight_is_exist, %d client%s, %ld revisions", counts[i],
                  counts[i] > 1 ? "s" : "", b.n_revisions);
        bench_summary(what, bench_fmt(f1, sizeof(f1), "%.0f/s", ex[i]), f2,
                      rd[i] > 0 ? ex[i] / rd[i] : -1, ">= 1.0x");
    }
    bench_fmt(what, sizeof(what), "restart, %ld revisions (%.0f objects)", b.n_revisions, objects);
    bench_summary(what, bench_fmt(f1, sizeof(f1), "%.2f s, %.0f objects/s", restart, objects / restart),
                  bench_fmt(f2, sizeof(f2), "redis RDB load %.0f keys/s", redis_load > 0 ? objects / redis_load : 0.0),
                  redis_load > 0 ? (objects / restart) / (objects / redis_load) : -1, ">= 1.0x, < 2 s");
    bench_fmt(what, sizeof(what), "reconcile tick, %ld vs %ld revisions", hi->revisions, lo->revisions);
    bench_summary(what, bench_fmt(f1, sizeof(f1), "%.1f us", hi->tick_us),
                  bench_fmt(f2, sizeof(f2), "%.1f us", lo->tick_us), hi->tick_us / lo->tick_us, "<= 1.3x");
    bench_fmt(what, sizeof(what), "weight_list page of %d, %ld vs %ld revisions", LIST_PAGE,
              hi->revisions, lo->revisions);
    bench_summary(what, bench_fmt(f1, sizeof(f1), "%.1f us", hi->list_us),
                  bench_fmt(f2, sizeof(f2), "%.1f us", lo->list_us), hi->list_us / lo->list_us, "<= 1.3x");
    bench_fmt(what, sizeof(what), "snapshot write, %ld revisions", hi->revisions);
    bench_summary(what, bench_fmt(f1, sizeof(f1), "%.1f MB in %.2f s, %.0f MB/s", hi->snap_mb, hi->snap_s,
                                  hi->snap_mb / hi->snap_s), NULL, -1, "reported");
    bench_fmt(what, sizeof(what), "snapshot capture (loop held), %ld revisions", hi->revisions);
    bench_summary(what, bench_fmt(f1, sizeof(f1), "%.1f ms", hi->capture_ms),
                  bench_fmt(f2, sizeof(f2), "%.1f ms at %ld", lo->capture_ms, lo->revisions),
                  lo->capture_ms > 0 ? hi->capture_ms / lo->capture_ms : -1, "reported");
    bench_fmt(what, sizeof(what), "master memory, %ld revisions", hi->revisions);
    bench_summary(what, bench_fmt(f1, sizeof(f1), "%.0f B/object, %.0f B/revision", hi->bytes_per_obj,
                                  hi->bytes_per_rev), NULL, -1, "< 2048 B/object");
    status = 0;
stop:
    hx_stop(&m);
    if (getenv("WM_BENCH_KEEP")) { /* to restart the same data by hand (bench/README.md) */
        printf("kept %s and %s\n", m.dir, segdir);
        return status;
    }
    hx_cleanup(&m);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", segdir); /* the segment, outside the master's dir */
    if (system(cmd) != 0) fprintf(stderr, "bench: could not remove %s\n", segdir);
    return status;
}
