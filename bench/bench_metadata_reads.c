/* bench_metadata_reads.c -- metadata reads against a master holding many
 * revisions, next to Redis GETs on the same machine in the same run.
 *
 * Starts a master (file OpLog, embedded node, segments under /dev/shm),
 * publishes N small revisions through libweightclient from 8 threads, each
 * of OBJECTS objects (default 10, the 100k revisions and about 1M
 * objects): OBJECTS - 1 tensors of 4 KiB, each its own payload object at
 * the smallest payload bound, and the manifest (the metadata is what is
 * measured, not payloads),
 * reports the publish rate and the master's anonymous memory per revision,
 * waits until the master and the machine are idle (a store just published persists and
 * snapshots in the background for a while: the reads are measured on a
 * settled store, as Redis's are; the wait is printed), then runs
 * weight_get_metadata and weight_is_exist on random revisions for
 * SECONDS with 1 and 50 clients (one request in flight per client, over the
 * master's Unix socket) in two client models: through libweightclient, one
 * thread and one connection per client, and as RPCs from one epoll thread
 * over as many connections (rpc_load.h, redis-benchmark's model). The
 * baseline is redis-server (in memory) over its Unix socket, filled with as
 * many keys (DEBUG POPULATE), then GETs with the same client counts and no
 * pipelining, from redis-benchmark and from rpc_load's same one thread; a
 * libweightclient figure is set against redis-benchmark's, an RPC figure
 * against the same driver's. Then it restarts the master (clean stop,
 * start, until a weight_get_metadata is answered: snapshot plus OpLog tail)
 * next to Redis loading an RDB of as many keys as the master has objects,
 * twice: keys valued value:N (a few bytes each), and values as large as the
 * master's snapshot holds per object, so that Redis loads as many bytes as
 * the master does (rdbcompression off: DEBUG POPULATE's values are padded
 * with zeros). Then both again, each start after twice the master's
 * anonymous memory was mapped and freed (guest_memory.h: on a virtual
 * machine whose balloon hands free memory back to the host, a start on a
 * quiet machine waits for the host to back all it builds; this is the
 * restart where the host need not). Prints each figure and the ratio.
 *
 * On the way up it stops at 1,000 and 10,000 revisions (those below N) and
 * at N, waits until the master and the machine are idle (the cold copies of the manifests
 * just published run for a while, longer at each step: a checkpoint taken
 * while they run compares a busy tick with an idle one), and measures the
 * costs that must not grow with the count: the weight
 * plugin's idle reconcile tick (mean duration over 2 s windows, from
 * host_plugin_tick_seconds, once the plugin ticks at its idle cadence of
 * at most 2 a second: the median of TICK_WINDOWS such windows, since a
 * window holds two ticks and one tick that meets cold caches moves its
 * mean by half; "never idle" is printed when it does not within two
 * minutes), a weight_list page of 100 (the median of five rounds' means,
 * each over 200 pages walked with their tokens), and a snapshot (time of the admin snapshot RPC
 * and the file's size, as MB/s; how long its capture held the master's loop
 * and how long it took to encode, from the master's store_snapshot_*
 * gauges), with the master's anonymous memory per
 * revision and per object. The 100k/1k ratios of tick and list page are
 * printed (asked <= 1.3). Every figure also goes out as a "summary |" line
 * that bench/run_all.sh gathers into one table.
 *
 * The read phase runs WM_BENCH_ROUNDS rounds (default 1); each measures
 * the master and Redis back to back at 1 and at 50 clients, so that a
 * change in the machine's load hits both figures of a ratio alike, and
 * prints the median of each figure with the CPU the master and the
 * benchmark's client threads spent per read.
 *
 * WM_BENCH_RESTART=DIR (same DIR and REVISIONS) runs the restart alone on
 * kept data: starts a master on DIR, times it to the first answered read
 * (with its CPU), stops it, then loads Redis with as many keys as the
 * master holds objects and times its two RDB loads, then the pair again with
 * the machine's free memory backed. The restarts append a few
 * records each (DIR is not restored).
 *
 * WM_BENCH_READS=DIR runs the read phase alone on data a run with
 * WM_BENCH_KEEP=1 left (DIR is the master directory it printed; REVISIONS
 * at most the count it published): it starts a master on DIR, waits until
 * the master is idle (its embedded node registers its cold files first),
 * measures, stops it and leaves DIR as it was, to compare builds quickly.
 *
 * Usage: bench_metadata_reads [DIR (/tmp)] [REVISIONS (100000)] [SECONDS (3)]
 *                             [OBJECTS per revision (10), 2..65] */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_clock.h"
#include "harness.h"
#include "kv_client.h"
#include "bench_summary.h"
#include "guest_memory.h"
#include "redis_box.h"
#include "rpc_load.h"
#include "weight_rpc.pb-c.h"
#include "weightclient.h"

#define PUT_THREADS 8
#define LIST_PAGE 100
#define LIST_PAGES 200
#define LIST_ROUNDS 5
#define CHECKPOINTS_MAX 3
#define TENSOR_FLOATS 1024 /* 4 KiB: one payload object at the smallest bound */
#define OBJECTS_MAX 65

typedef struct bench {
    const char *socket;
    long n_revisions;         /* the count the reads and the restart run at */
    long target;              /* publish: up to this count (a checkpoint) */
    int objects;              /* publish: objects per revision (tensors + manifest) */
    double seconds;
    _Atomic long next;        /* publish: the next revision to put */
    _Atomic int failed;
    int exist;                /* read: weight_is_exist instead of get_metadata */
    int pinned;               /* read: the phase runs pinned (place_reads) */
    _Atomic long ops;
    _Atomic int stop;
} bench;

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
    static const float data[TENSOR_FLOATS];
    uint64_t shape[1] = {TENSOR_FLOATS};
    if (s == NULL ||
        weight_store_set_option(s, WEIGHT_OPT_PAYLOAD_BYTES, sizeof(data)) != WEIGHT_OK) {
        atomic_store(&b->failed, 1);
        weight_store_close(s);
        return NULL;
    }
    for (long i; (i = atomic_fetch_add(&b->next, 1)) < b->target && !atomic_load(&b->failed);) {
        weight_identity id;
        weight_writer *w = NULL;
        identity_of(&id, i);
        int rc = weight_put_begin(s, &id, NULL, &w);
        for (int t = 0; rc == WEIGHT_OK && t < b->objects - 1; t++) {
            char name[16];
            snprintf(name, sizeof(name), "w%02d", t);
            rc = weight_writer_add_tensor(w, name, "F32", 1, shape, data);
        }
        if (rc != WEIGHT_OK && w != NULL) weight_writer_abort(w); /* commit frees it otherwise */
        if (rc != WEIGHT_OK || weight_writer_commit(w, NULL) != WEIGHT_OK) {
            if (atomic_load(&b->failed) == 0)
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

/* CPU seconds a process has used (utime + stime of /proc/PID/stat), -1;
 * *minflt (may be NULL) gets its minor page faults. */
static double proc_cpu_flt(pid_t pid, double *minflt)
{
    char path[64], buf[1024];
    unsigned long ut = 0, st = 0, mf = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command may hold spaces */
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %lu %*u %*u %*u %lu %lu", &mf,
                            &ut, &st) != 3)
        return -1;
    if (minflt != NULL) *minflt = (double)mf;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double proc_cpu_s(pid_t pid)
{
    return proc_cpu_flt(pid, NULL);
}

/* CPU seconds the main thread of pid (the master's loop) has run, to the
 * nanosecond (/proc/PID/task/PID/schedstat); -1 where the kernel keeps no
 * schedstat. Unlike wall time, it leaves out the time the loop waited for
 * a core on a busy machine; it keeps the time it waited for memory. */
static double loop_cpu_s(pid_t pid)
{
    char path[96];
    unsigned long long ns = 0;
    snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    int ok = fscanf(f, "%llu", &ns) == 1;
    fclose(f);
    return ok ? (double)ns / 1e9 : -1;
}

/* One figure of the read phase: reads per second and the CPU the master
 * and the benchmark's client threads spent per read. */
typedef struct read_fig {
    double rate, master_us, client_us, master_cs;
} read_fig;

static long proc_status_kib(pid_t pid, const char *field);

/* Context switches so far of a process's main thread -- the master's loop
 * thread -- voluntary and involuntary (/proc/PID/status), -1. */
static double proc_switches(pid_t pid)
{
    double v = proc_status_kib(pid, "voluntary_ctxt_switches:"),
           n = proc_status_kib(pid, "nonvoluntary_ctxt_switches:");
    return v < 0 || n < 0 ? -1 : v + n;
}

/* The kinds of read figure: weight_get_metadata and weight_is_exist through
 * libweightclient (a blocking thread per client), then the same two RPCs
 * from one epoll thread over as many connections (rpc_load.h: the client
 * model of redis-benchmark), with the host's object lookup (OBJ_EXISTS of
 * a revision's manifest key) beside them. */
enum { READ_MD, READ_EX, READ_MD_EV, READ_EX_EV, READ_OBJ_EV, READ_KINDS };
static const char *const read_kind_name[READ_KINDS] = {
    "weight_get_metadata", "weight_is_exist", "get_metadata RPC", "is_exist RPC",
    "object exists RPC"};
static const uint32_t read_kind_method[READ_KINDS] = {
    0, 0, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, WMRPC__WEIGHT_METHOD__WEIGHT_IS_EXIST,
    RPC_LOAD_OBJ_EXISTS};

/* Reads of kind (READ_*) with `clients` clients for b->seconds into *f;
 * -1 on failure. */
static int measure_reads(bench *b, pid_t master, int clients, int kind, read_fig *f)
{
    pthread_t t[64];
    b->exist = kind == READ_EX;
    atomic_store(&b->ops, 0);
    atomic_store(&b->stop, 0);
    double m0 = proc_cpu_s(master), c0 = bench_rusage_s(RUSAGE_SELF), s0 = proc_switches(master), t0 = bench_now_s();
    if (kind >= READ_MD_EV) {
        rpc_load_opts o = {b->socket, clients, b->seconds, read_kind_method[kind], b->n_revisions};
        rpc_load_result res;
        char err[256];
        if (rpc_load_run(&o, &res, err, sizeof(err)) < 0) {
            fprintf(stderr, "bench: %s from one thread: %s\n", read_kind_name[kind], err);
            return -1;
        }
        atomic_store(&b->ops, res.replies);
        t0 = bench_now_s() - res.seconds; /* the rate over the requests' own window */
    } else {
        for (int i = 0; i < clients; i++) pthread_create(&t[i], NULL, read_thread, b);
        usleep((useconds_t)(b->seconds * 1e6));
        atomic_store(&b->stop, 1);
        for (int i = 0; i < clients; i++) pthread_join(t[i], NULL);
    }
    double dt = bench_now_s() - t0, ops = (double)atomic_load(&b->ops);
    if (atomic_load(&b->failed) || ops <= 0) return -1;
    f->rate = ops / dt;
    f->master_us = (proc_cpu_s(master) - m0) / ops * 1e6;
    f->client_us = (bench_rusage_s(RUSAGE_SELF) - c0) / ops * 1e6;
    f->master_cs = (proc_switches(master) - s0) / ops;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of n values (n >= 1); sorts v. */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define READ_ROUNDS_MAX 9
static const int read_clients[2] = {1, 50};

/* Every thread of process pid onto the CPUs of set (a thread that comes
 * later inherits its creator's). 0, or -1 when one could not be moved. */
static int pin_process(pid_t pid, const cpu_set_t *set)
{
    char path[64];
    int rc = 0;
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL) return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid > 0 && sched_setaffinity(tid, sizeof(*set), set) < 0) rc = -1;
    }
    closedir(d);
    return rc;
}

/* The reads' placement. Unpinned, the scheduler puts a client on the
 * server's vCPU or on the other one from round to round, and each read of
 * either server costs four to seven times more CPU on the other one
 * (bench/JOURNAL.md, "Reads: the identity request decoded by hand, and
 * where the kernel time goes"): the ratio then says where the threads
 * landed. Pinned, both servers (every thread of the master, redis-server)
 * run on CPU 0 and every client (the benchmark's threads, redis-benchmark)
 * on CPU 1, the same for both. pin 1 places them so, pin 0 gives them the
 * CPUs this process had before (the servers were started with those).
 * -1 when a placement failed (fewer than two CPUs). */
static int place_reads(pid_t master, const redis_box *rb, int pin)
{
    static cpu_set_t all; /* this process's CPUs before pin 1 */
    cpu_set_t servers, clients;
    CPU_ZERO(&servers);
    CPU_ZERO(&clients);
    if (pin && (sysconf(_SC_NPROCESSORS_ONLN) < 2 || sched_getaffinity(0, sizeof(all), &all) < 0 ||
                !CPU_ISSET(0, &all) || !CPU_ISSET(1, &all)))
        return -1;
    CPU_SET(0, &servers);
    CPU_SET(1, &clients);
    int rc = pin_process(master, pin ? &servers : &all);
    if (rb != NULL && pin_process(rb->pid, pin ? &servers : &all) < 0) rc = -1;
    if (sched_setaffinity(0, sizeof(clients), pin ? &clients : &all) < 0) rc = -1;
    return rc;
}

/* Redis GETs per second from rpc_load's one thread over `clients`
 * connections for b->seconds (the keys redis_populate put, as many as the
 * master's revisions); *server_us gets redis-server's CPU per GET. -1
 * (said) when the run failed. */
static double redis_one_thread(const bench *b, const redis_box *rb, int clients, double *server_us)
{
    rpc_load_opts o = {rb->sock, clients, b->seconds, RPC_LOAD_REDIS_GET, b->n_revisions};
    rpc_load_result res;
    char err[256];
    double c0 = proc_cpu_s(rb->pid);
    if (rpc_load_run(&o, &res, err, sizeof(err)) < 0) {
        fprintf(stderr, "bench: redis GET from one thread: %s\n", err);
        return -1;
    }
    *server_us = (proc_cpu_s(rb->pid) - c0) / (double)res.replies * 1e6;
    return (double)res.replies / res.seconds;
}

/* The read phase: WM_BENCH_ROUNDS rounds (default 1, at most 9), each
 * running every kind of read (READ_*) and (rb not NULL) Redis GET -- from
 * redis-benchmark, then from rpc_load's one thread -- at 1 and at 50
 * clients back to back, printing each round; fig[kind][clients] and
 * rd[source][clients] get the median of every figure (rd -1 without
 * Redis). pinned: servers
 * on CPU 0, clients on CPU 1 (place_reads) for the phase. -1 when a read
 * failed or the placement could not be made. */
static int read_phase_at(bench *b, pid_t master, const redis_box *rb, read_fig fig[READ_KINDS][2],
                         double rd[2][2]);

static int read_phase(bench *b, pid_t master, const redis_box *rb, int pinned,
                      read_fig fig[READ_KINDS][2], double rd[2][2])
{
    if (pinned && place_reads(master, rb, 1) < 0) {
        place_reads(master, rb, 0); /* what was placed before the failure, back */
        fprintf(stderr, "bench: the pinned reads need CPUs 0 and 1 and sched_setaffinity\n");
        return -1;
    }
    b->pinned = pinned;
    int rc = read_phase_at(b, master, rb, fig, rd);
    if (pinned) place_reads(master, rb, 0);
    b->pinned = 0;
    return rc;
}

static int read_phase_at(bench *b, pid_t master, const redis_box *rb, read_fig fig[READ_KINDS][2],
                         double rd[2][2])
{
    const char *env = getenv("WM_BENCH_ROUNDS");
    int rounds = env != NULL ? atoi(env) : 1;
    if (rounds < 1) rounds = 1;
    if (rounds > READ_ROUNDS_MAX) rounds = READ_ROUNDS_MAX;
    double v[READ_KINDS][2][4][READ_ROUNDS_MAX], r[2][2][READ_ROUNDS_MAX];
    /* v: [kind][clients][field][round]; r: [source][clients][round] */
    read_fig warm;
    double secs = b->seconds;
    b->seconds = secs / 4 < 0.5 ? secs / 4 : 0.5; /* a warm-up, not counted: a master just
                                                      started may still be settling */
    int wrc = measure_reads(b, master, read_clients[0], READ_MD, &warm);
    b->seconds = secs;
    if (wrc < 0) return -1;
    for (int k = 0; k < rounds; k++) {
        for (int i = 0; i < 2; i++) {
            read_fig f[READ_KINDS];
            for (int j = 0; j < READ_KINDS; j++)
                if (measure_reads(b, master, read_clients[i], j, &f[j]) < 0) return -1;
            r[0][i][k] = rb != NULL ? redis_bench(rb, "get", read_clients[i],
                                                  (long)(b->seconds * (read_clients[i] == 1 ? 25000 : 60000)))
                                    : -1;
            double redis_us = -1;
            r[1][i][k] = rb != NULL ? redis_one_thread(b, rb, read_clients[i], &redis_us) : -1;
            if (rb != NULL && r[1][i][k] < 0) return -1;
            printf("%sround %d, clients %2d:", b->pinned ? "pinned " : "", k + 1, read_clients[i]);
            for (int j = 0; j < READ_KINDS; j++) {
                v[j][i][0][k] = f[j].rate;
                v[j][i][1][k] = f[j].master_us;
                v[j][i][2][k] = f[j].client_us;
                v[j][i][3][k] = f[j].master_cs;
                printf(" %s %.0f/s (CPU/read: master %.1f us, client %.1f us; master switches/read "
                       "%.2f)%s", read_kind_name[j], f[j].rate, f[j].master_us, f[j].client_us,
                       f[j].master_cs, j == READ_EX ? ";  one thread:" : "  ");
            }
            printf(" redis GET %.0f/s (redis-benchmark), %.0f/s (one thread; redis-server CPU/GET "
                   "%.1f us)\n", r[0][i][k], r[1][i][k], redis_us);
            fflush(stdout);
        }
    }
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < READ_KINDS; j++)
            fig[j][i] = (read_fig){median(v[j][i][0], rounds), median(v[j][i][1], rounds),
                                   median(v[j][i][2], rounds), median(v[j][i][3], rounds)};
        rd[0][i] = median(r[0][i], rounds);
        rd[1][i] = median(r[1][i], rounds);
    }
    return 0;
}

/* The read figures' lines (medians of the rounds), "pinned " before them
 * for the pinned phase: libweightclient's threads against redis-benchmark,
 * then the RPCs from one thread against Redis GET from the same driver
 * (redis-benchmark's model). */
static void print_reads(const bench *b, int pinned, read_fig fig[READ_KINDS][2], double rd[2][2])
{
    for (int i = 0; i < 2; i++)
        for (int e = 0; e < 2; e++) {
            printf("%sclients %2d%s (%ld revisions):", pinned ? "pinned " : "", read_clients[i],
                   e ? " on one thread (redis-benchmark's model)" : " through libweightclient",
                   b->n_revisions);
            for (int j = e ? READ_MD_EV : READ_MD; j < (e ? READ_KINDS : READ_MD_EV); j++) {
                const read_fig *f = &fig[j][i];
                printf("  %s %.0f/s x%.2f (CPU/read: master %.1f us, client %.1f us; master "
                       "switches/read %.2f);", read_kind_name[j], f->rate,
                       rd[e][i] > 0 ? f->rate / rd[e][i] : 0.0, f->master_us, f->client_us,
                       f->master_cs);
            }
            printf("  redis GET %.0f/s (%s)\n", rd[e][i], e ? "the same driver" : "redis-benchmark");
        }
}

/* Fill m (not started) for the kept master directory kept; -1 (said on
 * stderr, naming mode) when it holds no config.yaml. */
static int kept_master(hx_master *m, const char *kept, const char *mode)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->dir, sizeof(m->dir), "%s", kept);
    snprintf(m->config, sizeof(m->config), "%s/config.yaml", kept);
    snprintf(m->socket, sizeof(m->socket), "%s/master.sock", kept);
    snprintf(m->log, sizeof(m->log), "%s/master.log", kept);
    if (access(m->config, R_OK) == 0) return 0;
    fprintf(stderr, "bench: %s holds no config.yaml (%s wants a kept master directory)\n", kept,
            mode);
    return -1;
}

/* Busy and total jiffies of every CPU (/proc/stat's first line); -1 when
 * unreadable. */
static int machine_jiffies(unsigned long long *busy, unsigned long long *total)
{
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL) return -1;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 8) return -1;
    *total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
    *busy = *total - v[3] - v[4]; /* all but idle and iowait */
    return 0;
}

/* Wait until the master is idle: its CPU stays below 5% of a core for
 * 0.5 s (2 minutes at most), and print how long that took (after what
 * `since` names). The reads are measured on a settled store, as Redis's
 * are: a store just published still persists revisions and writes
 * snapshots in the background for a while, and a just started one
 * registers its node's cold files and checks the bytes of every memory
 * replica its node kept (a SHA-256 of each: some 20 s of CPU at 1M
 * objects). */
static void wait_idle(pid_t pid, const char *since)
{
    double t0 = bench_now_s(), idle_s = -1;
    /* Idle is the master under 5% of a core and the whole machine under 10%
     * of its CPUs for half a second: the embedded node (its own process)
     * and the kernel's writeback keep working after a publish (the cold
     * copies of the manifests, some 100,000 files), and reads measured
     * meanwhile share the cores with them. */
    for (int i = 0; i < 240 && idle_s < 0; i++) {
        unsigned long long b0 = 0, t0j = 0, b1 = 0, t1j = 0;
        int have = machine_jiffies(&b0, &t0j) == 0;
        double c0 = proc_cpu_s(pid);
        usleep(500000);
        have = have && machine_jiffies(&b1, &t1j) == 0 && t1j > t0j;
        int machine_idle = !have || (double)(b1 - b0) < 0.10 * (double)(t1j - t0j);
        if (proc_cpu_s(pid) - c0 < 0.025 && machine_idle) idle_s = bench_now_s() - t0;
    }
    if (idle_s >= 0)
        printf("master idle %.1f s %s\n", idle_s, since);
    else
        printf("master still busy %.0f s %s: measuring anyway\n", bench_now_s() - t0, since);
    fflush(stdout);
}

/* WM_BENCH_READS=DIR: the read phase alone on kept data (see the top). */
static int reads_only(const char *kept, const char *parent, bench *b)
{
    hx_master m;
    redis_box rb;
    read_fig fig[READ_KINDS][2];
    double rd[2][2];
    int status = 1, have_redis;
    if (kept_master(&m, kept, "WM_BENCH_READS") < 0) return 2;
    if (hx_start(&m, 600000) < 0) {
        fprintf(stderr, "bench: cannot start the master on %s\n", kept);
        return 1;
    }
    b->socket = m.socket;
    /* A master just started on kept data is not idle yet: its embedded node
     * goes through its cold files to register them. */
    wait_idle(m.pid, "after it answered");
    memset(&rb, 0, sizeof(rb));
    have_redis = redis_start(&rb, parent, 0) == 0 && redis_populate(&rb, b->n_revisions) == 0;
    if (!have_redis) printf("redis: no redis-server could be started\n");
    if (read_phase(b, m.pid, have_redis ? &rb : NULL, 0, fig, rd) == 0) {
        print_reads(b, 0, fig, rd);
        status = 0;
    }
    if (status == 0 && read_phase(b, m.pid, have_redis ? &rb : NULL, 1, fig, rd) == 0)
        print_reads(b, 1, fig, rd);
    redis_stop(&rb);
    hx_stop(&m);
    return status;
}

/* Start the master (stopped) and return the seconds from the start until a
 * weight_get_metadata is answered, or -1; *cpu_s (may be NULL) gets the
 * master's CPU seconds at that point and *minflt (may be NULL) its minor
 * page faults. The start does not wait for the
 * embedded node: it registers its cold files on its own thread once the
 * master serves, and a metadata read does not need it. */
static double first_read_seconds(hx_master *m, bench *b, double *cpu_s, double *minflt)
{
    double t0 = bench_now_s();
    int expect = m->expect_nodes;
    m->expect_nodes = 0;
    int rc = hx_start(m, 600000);
    m->expect_nodes = expect;
    if (rc < 0) return -1;
    weight_store *s = NULL;
    weight_identity id;
    weight_metadata md;
    identity_of(&id, b->n_revisions - 1);
    for (int i = 0; i < 60000; i++) {
        if (s == NULL) s = open_store(b);
        if (s != NULL && weight_get_metadata(s, &id, &md, NULL) == WEIGHT_OK) break;
        usleep(1000);
    }
    double t = bench_now_s() - t0;
    if (cpu_s != NULL) *cpu_s = proc_cpu_flt(m->pid, minflt);
    weight_store_close(s);
    return t;
}

/* Restart the master (clean stop, then start): first_read_seconds. */
static double restart_seconds(hx_master *m, bench *b, double *cpu_s)
{
    if (hx_stop(m) != 0) return -1;
    return first_read_seconds(m, b, cpu_s, NULL);
}

/* The bytes of the newest snapshot under a master's directory, -1 if none
 * (snapshot-<seq>.snap, the sequence zero-padded: the greatest name). */
static double newest_snapshot_bytes(const char *master_dir)
{
    char dir[600], path[900], best[300] = "";
    struct stat st;
    snprintf(dir, sizeof(dir), "%s/data/snapshots", master_dir);
    DIR *d = opendir(dir);
    if (d == NULL) return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "snapshot-", 9) == 0 && n > 5 && n < sizeof(best) &&
            strcmp(e->d_name + n - 5, ".snap") == 0 && strcmp(e->d_name, best) > 0)
            memcpy(best, e->d_name, n + 1);
    }
    closedir(d);
    snprintf(path, sizeof(path), "%s/%s", dir, best);
    return best[0] && stat(path, &st) == 0 ? (double)st.st_size : -1;
}

/* The Redis side of a restart: the seconds redis-server takes to load an
 * RDB of as many keys as the master holds objects, twice -- load[0] with
 * key:N = value:N (a few bytes a key), load[1] with each value as large as
 * the master's snapshot holds per object (snap_bytes / objects, less 16 for
 * the key and its framing), so that both load as many bytes; rdb[1] that
 * RDB's size. -1 where not measured. rb is running, empty or holding some
 * of the keys key:N = value:N. */
static void redis_loads(redis_box *rb, double objects, double snap_bytes, double load[2],
                        double rdb[2])
{
    load[0] = load[1] = rdb[0] = rdb[1] = -1;
    if (objects <= 0) return;
    if (redis_populate(rb, (long)objects) == 0 && (load[0] = redis_reload_seconds(rb, 0)) > 0)
        rdb[0] = redis_rdb_bytes(rb);
    long value = snap_bytes > 0 ? (long)(snap_bytes / objects) - 16 : -1;
    if (value > 0 && redis_populate_sized(rb, (long)objects, value) == 0 &&
        (load[1] = redis_reload_seconds(rb, 0)) > 0)
        rdb[1] = redis_rdb_bytes(rb);
}

/* The restart line: the master's figure and both Redis loads. */
static void print_restart(double objects, double t, double snap_bytes, const double load[2],
                          const double rdb[2])
{
    printf("  snapshot %.1f MB; redis RDB of %.0f keys: key:N = value:N (%.1f MB) loaded in "
           "%.3f s, %.0f keys/s, x%.2f;   values as large as the snapshot's per object "
           "(%.1f MB) loaded in %.3f s, %.0f keys/s, x%.2f   (target >= 1.0x, serving < 2 s)\n",
           snap_bytes / 1e6, objects, rdb[0] / 1e6, load[0],
           load[0] > 0 ? objects / load[0] : 0.0, load[0] > 0 ? load[0] / t : 0.0,
           rdb[1] / 1e6, load[1], load[1] > 0 ? objects / load[1] : 0.0,
           load[1] > 0 ? load[1] / t : 0.0);
}

/* The restart again, with the machine's free memory backed (see
 * guest_memory.h): m (running, serving the data of the restart just
 * timed) is stopped, back bytes are backed, and it is started and timed
 * to its first answered read (out->restart, out->cpu); then Redis (rb,
 * running) loads its RDB of objects keys key:N = value:N after the same
 * (out->redis). Each is -1 where not measured. */
typedef struct backed_restart {
    double back;    /* bytes backed before each start */
    double back_s;  /* the seconds the master's backing took */
    double restart; /* serving in, seconds */
    double cpu;     /* master CPU to serving */
    double redis;   /* Redis's load, seconds */
} backed_restart;

static void restart_backed(hx_master *m, bench *b, redis_box *rb, double objects, double back,
                           backed_restart *out)
{
    out->back = back;
    out->back_s = out->restart = out->cpu = out->redis = -1;
    if (back <= 0 || hx_stop(m) != 0) return;
    out->back_s = bench_back_memory((size_t)back);
    out->restart = first_read_seconds(m, b, &out->cpu, NULL);
    if (rb != NULL && rb->pid > 0 && objects > 0 && redis_flush(rb) == 0 &&
        redis_populate(rb, (long)objects) == 0)
        out->redis = redis_reload_seconds(rb, (size_t)back);
}

/* The bytes to back before a restart: twice the anonymous memory the
 * master held when it first served (more than a start asks for), or 2 GiB
 * when that cannot be read. */
static double restart_back_bytes(pid_t pid)
{
    long kib = proc_status_kib(pid, "RssAnon:");
    return kib > 0 ? 2.0 * 1024 * (double)kib : (double)(2ULL << 30);
}

/* The line of restart_backed's figures. */
static void print_restart_backed(double objects, const backed_restart *r)
{
    printf("  with the machine's free memory backed (%.2f GB mapped and freed just before each "
           "start; the master's took %.2f s): serving in %.3f s (master CPU %.2f s), %.0f "
           "objects/s; redis RDB of key:N = value:N loaded in %.3f s, %.0f keys/s, x%.2f\n",
           r->back / 1e9, r->back_s, r->restart, r->cpu, r->restart > 0 ? objects / r->restart : 0.0,
           r->redis, r->redis > 0 ? objects / r->redis : 0.0,
           r->redis > 0 && r->restart > 0 ? r->redis / r->restart : 0.0);
}

/* WM_BENCH_RESTART=DIR: the restart alone on kept data, next to Redis
 * loading RDBs of as many keys (see the top). */
static int restart_only(const char *kept, const char *parent, bench *b)
{
    hx_master m;
    redis_box rb;
    double cpu = -1, minflt = -1, load[2] = {-1, -1}, rdb[2] = {-1, -1};
    if (kept_master(&m, kept, "WM_BENCH_RESTART") < 0) return 2;
    b->socket = m.socket;
    double t = first_read_seconds(&m, b, &cpu, &minflt);
    if (t < 0) {
        fprintf(stderr, "bench: the master on %s answered no read\n", kept);
        hx_stop(&m);
        return 1;
    }
    double objects = hx_metric(&m, "store_objects{data_type=\"weight\"}") +
                     hx_metric(&m, "store_objects{data_type=\"metadata\"}");
    double back = restart_back_bytes(m.pid);
    double snap = newest_snapshot_bytes(m.dir);
    backed_restart br;
    memset(&rb, 0, sizeof(rb));
    int have_redis = redis_start(&rb, parent, 0) == 0;
    if (have_redis) redis_loads(&rb, objects, snap, load, rdb);
    restart_backed(&m, b, have_redis ? &rb : NULL, objects, back, &br);
    redis_stop(&rb);
    hx_stop(&m);
    printf("restart with %ld revisions (%.0f objects, kept data): serving in %.3f s (master CPU "
           "%.2f s, %.1fk minor faults), %.0f objects/s\n",
           b->n_revisions, objects, t, cpu, minflt / 1000, objects / t);
    print_restart(objects, t, snap, load, rdb);
    print_restart_backed(objects, &br);
    return 0;
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
static double tick_window_us(const hx_master *m, double *ticks_per_s)
{
    const char *sum = "host_plugin_tick_seconds_sum{plugin=\"weight_mgmt\"}";
    const char *count = "host_plugin_tick_seconds_count{plugin=\"weight_mgmt\"}";
    double s0 = hx_metric(m, sum), c0 = hx_metric(m, count), t0 = bench_now_s();
    usleep(2000000);
    double s1 = hx_metric(m, sum), c1 = hx_metric(m, count);
    *ticks_per_s = (c1 - c0) / (bench_now_s() - t0);
    if (s0 < 0 || c0 < 0 || c1 <= c0) return -1;
    return (s1 - s0) / (c1 - c0) * 1e6;
}

/* The idle tick: 2 s windows until the plugin ticks at its idle cadence
 * (at most TICK_IDLE_PER_S a second: it asks for quick ticks while it has
 * work, such as the manifests' cold copies after a publish), for at most
 * two minutes; the mean of the last window. *idle says whether it got
 * there. -1 when no tick ran. */
#define TICK_IDLE_PER_S 2.0
#define TICK_WINDOWS 5

static double tick_mean_us(const hx_master *m, double *ticks_per_s, int *idle)
{
    double us = -1, t0 = bench_now_s(), win[TICK_WINDOWS];
    do {
        us = tick_window_us(m, ticks_per_s);
        *idle = us >= 0 && *ticks_per_s <= TICK_IDLE_PER_S;
    } while (!*idle && bench_now_s() - t0 < 120);
    if (!*idle) return us;
    win[0] = us;
    int n = 1;
    for (double tps; n < TICK_WINDOWS; n++) {
        if ((win[n] = tick_window_us(m, &tps)) < 0) break;
        *ticks_per_s = tps;
    }
    return median(win, n);
}

/* Microseconds of a weight_list page of LIST_PAGE revisions: the median of
 * LIST_ROUNDS rounds' means, each over LIST_PAGES pages (WM_BENCH_LIST_PAGES
 * when set: more pages to profile the loop thread over) walked with their
 * tokens (from the first page again at the end); one round is some 40 ms,
 * which a hiccup of this VM's can double. -1 on failure; *loop_us the
 * master loop's CPU per page over all rounds (-1: not known). */
static double list_page_us(const bench *b, pid_t master, double *loop_us)
{
    weight_store *s = open_store(b);
    weight_list_query q = {.namespace_id = "bench", .limit = LIST_PAGE};
    char token[1024] = "", next[1024];
    const char *env = getenv("WM_BENCH_LIST_PAGES");
    int pages = env != NULL && atoi(env) > 0 ? atoi(env) : LIST_PAGES;
    double rounds[LIST_ROUNDS], c0 = loop_cpu_s(master);
    *loop_us = -1;
    if (s == NULL) return -1;
    int r;
    for (r = 0; r < LIST_ROUNDS; r++) {
        double t0 = bench_now_s();
        int i;
        for (i = 0; i < pages; i++) {
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
        if (i < pages) break;
        rounds[r] = (bench_now_s() - t0) / pages * 1e6;
    }
    double us = -1;
    if (r == LIST_ROUNDS) {
        us = median(rounds, LIST_ROUNDS);
        double c1 = loop_cpu_s(master);
        if (c0 >= 0 && c1 >= 0) *loop_us = (c1 - c0) / (pages * LIST_ROUNDS) * 1e6;
    }
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
    double t0 = bench_now_s();
    int rc = kvc_snapshot(c, &seq);
    *seconds = bench_now_s() - t0;
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
    double list_us, list_loop_us; /* a page: wall at the client, CPU of the master's loop */
    double snap_s, snap_mb;
    double capture_ms, encode_s, write_s; /* the master's store_snapshot_* gauges */
    double bytes_per_rev, bytes_per_obj;
} flat_costs;

/* Publish up to b->target revisions; 0, or -1 when a put failed. */
static int publish_to(bench *b, double *seconds)
{
    pthread_t t[PUT_THREADS];
    long from = atomic_load(&b->next);
    double t0 = bench_now_s();
    for (int i = 0; i < PUT_THREADS; i++) pthread_create(&t[i], NULL, put_thread, b);
    for (int i = 0; i < PUT_THREADS; i++) pthread_join(t[i], NULL);
    *seconds = bench_now_s() - t0;
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
    int idle = 0;
    if ((fc->tick_us = tick_mean_us(m, &fc->ticks_per_s, &idle)) < 0) {
        fprintf(stderr, "bench: no reconcile tick ran in 2 s\n");
        return -1;
    }
    if ((fc->list_us = list_page_us(b, m->pid, &fc->list_loop_us)) < 0) return -1;
    if (snapshot_cost(m, &fc->snap_s, &fc->snap_mb) < 0) return -1;
    fc->capture_ms = hx_metric(m, "store_snapshot_capture_seconds") * 1e3;
    fc->encode_s = hx_metric(m, "store_snapshot_encode_seconds");
    fc->write_s = hx_metric(m, "store_snapshot_write_seconds");
    printf("at %7ld revisions: reconcile tick %8.1f us (%.1f ticks/s%s)   list page of %d %8.1f us (master loop CPU %.1f us)   "
           "snapshot %.2f MB in %.3f s (%.0f MB/s; loop held %.1f ms, encode %.3f s, capture end to durable "
           "%.3f s)   anonymous memory %.0f B/revision %.0f B/object\n",
           fc->revisions, fc->tick_us, fc->ticks_per_s, idle ? "" : ", never idle", LIST_PAGE,
           fc->list_us, fc->list_loop_us, fc->snap_mb,
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
    b.objects = argc > 4 ? atoi(argv[4]) : 10;
    if (b.n_revisions < 1 || b.seconds <= 0 || b.objects < 2 || b.objects > OBJECTS_MAX) {
        fprintf(stderr, "usage: %s [DIR] [REVISIONS] [SECONDS] [OBJECTS per revision, 2..%d]\n",
                argv[0], OBJECTS_MAX);
        return 2;
    }
    if (getenv("WM_BENCH_READS") != NULL) return reads_only(getenv("WM_BENCH_READS"), dir, &b);
    if (getenv("WM_BENCH_RESTART") != NULL)
        return restart_only(getenv("WM_BENCH_RESTART"), dir, &b);
    hx_master m;
    char extra[1024], segdir[128], f1[128], f2[128], what[128];
    int status = 1;
    snprintf(segdir, sizeof(segdir), "/dev/shm/wm-bench-md-%d", (int)getpid());
    snprintf(extra, sizeof(extra),
             "node:\n  segment_dir: \"%s\"\n  segment_bytes: %llu\n"
             "cluster:\n  default_weight_preferred_residency: hot\n",
             segdir, (unsigned long long)(b.n_revisions * (16384ull + (uint64_t)(b.objects - 1) *
                                                           TENSOR_FLOATS * sizeof(float)) +
                                         (256ull << 20)));
    /* The segment's directory is marked as this run's, so that a run killed
     * before its end leaves no segment of gigabytes in /dev/shm: the next
     * test or bench sweeps it (hx_sweep_leftovers). */
    if (hx_own_new_dir(segdir) < 0) {
        fprintf(stderr, "bench: cannot make %s: %s\n", segdir, strerror(errno));
        return 1;
    }
    if (hx_init(&m, "bench-md", extra) < 0 || hx_start(&m, 60000) < 0) {
        fprintf(stderr, "bench: cannot start the master\n");
        hx_cleanup(&m);
        hx_remove_dir(segdir);
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
        if (publish_to(&b, &sec) < 0) goto stop;
        put_s += sec;
        snprintf(what, sizeof(what), "after publishing %ld revisions", marks[k]);
        wait_idle(m.pid, what);
        if (measure_flat(&m, &b, anon0, &fc[k]) < 0) goto stop;
    }
    const flat_costs *lo = &fc[0], *hi = &fc[n_marks - 1];
    printf("published %ld revisions at %.0f revisions/s (%d clients); from %ld to %ld revisions: "
           "tick x%.2f, list page x%.2f (asked <= 1.3; its master loop CPU x%.2f)\n",
           b.n_revisions, (double)b.n_revisions / put_s, PUT_THREADS, lo->revisions, hi->revisions,
           hi->tick_us / lo->tick_us, hi->list_us / lo->list_us,
           lo->list_loop_us > 0 ? hi->list_loop_us / lo->list_loop_us : -1.0);
    fflush(stdout);

    /* Redis runs beside the master from here: the reads take turns with it. */
    redis_box rb;
    read_fig fig[2][READ_KINDS][2]; /* [pinned][kind][clients] */
    double rd[2][2][2]; /* [pinned][source][clients] */
    double redis_load[2] = {-1, -1}, rdb[2] = {-1, -1};
    memset(&rb, 0, sizeof(rb));
    int have_redis = redis_start(&rb, dir, 0) == 0 && redis_populate(&rb, b.n_revisions) == 0;
    if (!have_redis)
        printf("redis: no redis-server could be started (make bench installs redis-server)\n");
    wait_idle(m.pid, "after the last publish");
    if (read_phase(&b, m.pid, have_redis ? &rb : NULL, 0, fig[0], rd[0]) < 0 ||
        read_phase(&b, m.pid, have_redis ? &rb : NULL, 1, fig[1], rd[1]) < 0) {
        redis_stop(&rb);
        goto stop;
    }
    double objects = hx_metric(&m, "store_objects{data_type=\"weight\"}") +
                     hx_metric(&m, "store_objects{data_type=\"metadata\"}");
    double snap_seq = hx_metric(&m, "snapshot_last_seq");
    double appends = hx_metric(&m, "oplog_appends_total");
    double restart_cpu = -1;
    double restart = restart_seconds(&m, &b, &restart_cpu);
    if (restart < 0) {
        redis_stop(&rb);
        goto stop;
    }
    double snap_bytes = newest_snapshot_bytes(m.dir);
    double back = restart_back_bytes(m.pid);
    backed_restart br;
    if (have_redis) /* the read phase's keys are among key:0 .. */
        redis_loads(&rb, objects, snap_bytes, redis_load, rdb);
    restart_backed(&m, &b, have_redis ? &rb : NULL, objects, back, &br);
    redis_stop(&rb);
    printf("restart with %ld revisions (%.0f objects; %.0f records appended this run, newest "
           "snapshot at seq %.0f): serving in %.3f s (master CPU %.2f s), %.0f objects/s\n",
           b.n_revisions, objects, appends, snap_seq, restart, restart_cpu, objects / restart);
    print_restart(objects, restart, snap_bytes, redis_load, rdb);
    print_restart_backed(objects, &br);
    print_reads(&b, 0, fig[0], rd[0]);
    print_reads(&b, 1, fig[1], rd[1]);
    const int *counts = read_clients;

    for (int p = 0; p < 2; p++) {
        const char *how = p ? " (pinned: servers on CPU 0, clients on CPU 1)" : "";
        for (int i = 0; i < 2; i++) {
            for (int j = 0; j < READ_KINDS; j++) {
                const read_fig *f = &fig[p][j][i];
                double base = rd[p][j >= READ_MD_EV][i];
                bench_fmt(f2, sizeof(f2), "redis GET %.0f/s%s", base,
                          j >= READ_MD_EV ? " (same driver)" : " (redis-benchmark)");
                bench_fmt(what, sizeof(what), "%s, %d client%s%s, %ld revisions%s", read_kind_name[j],
                          counts[i], counts[i] > 1 ? "s" : "",
                          j >= READ_MD_EV ? " on one thread" : "", b.n_revisions, how);
                bench_summary(what, bench_fmt(f1, sizeof(f1), "%.0f/s", f->rate), f2,
                              base > 0 ? f->rate / base : -1, ">= 1.0x");
            }
        }
    }
    bench_fmt(what, sizeof(what), "restart, %ld revisions (%.0f objects)", b.n_revisions, objects);
    bench_summary(what, bench_fmt(f1, sizeof(f1), "%.2f s, %.0f objects/s", restart, objects / restart),
                  bench_fmt(f2, sizeof(f2), "redis RDB load, key:N = value:N, %.0f keys/s",
                            redis_load[0] > 0 ? objects / redis_load[0] : 0.0),
                  redis_load[0] > 0 ? redis_load[0] / restart : -1, ">= 1.0x, < 2 s");
    bench_fmt(what, sizeof(what), "restart, %ld revisions, the machine's free memory backed",
              b.n_revisions);
    bench_summary(what, bench_fmt(f1, sizeof(f1), "%.2f s, %.0f objects/s", br.restart,
                                  br.restart > 0 ? objects / br.restart : 0.0),
                  bench_fmt(f2, sizeof(f2), "redis RDB load, key:N = value:N, %.0f keys/s",
                            br.redis > 0 ? objects / br.redis : 0.0),
                  br.redis > 0 && br.restart > 0 ? br.redis / br.restart : -1, "reported");
    bench_fmt(what, sizeof(what), "restart, %ld revisions, against as many bytes", b.n_revisions);
    bench_summary(what, bench_fmt(f1, sizeof(f1), "%.2f s (snapshot %.0f MB)", restart, snap_bytes / 1e6),
                  bench_fmt(f2, sizeof(f2), "redis RDB load, %.0f MB, %.0f keys/s", rdb[1] / 1e6,
                            redis_load[1] > 0 ? objects / redis_load[1] : 0.0),
                  redis_load[1] > 0 ? redis_load[1] / restart : -1, ">= 1.0x");
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
    if (getenv("WM_BENCH_KEEP")) { /* to restart the same data by hand (bench/JOURNAL.md) */
        hx_disown_dir(m.dir); /* not a leftover for the next test to sweep */
        hx_disown_dir(segdir);
        printf("kept %s and %s\n", m.dir, segdir);
        return status;
    }
    hx_cleanup(&m);
    hx_remove_dir(segdir); /* the segment, outside the master's dir */
    return status;
}
