/* bench_master_mutations.c -- durable mutations per second through a real
 * master, next to a plain fdatasync loop on the same file system and a bare
 * group-commit server.
 *
 * Usage: bench_master_mutations [dir] [seconds]
 *        [put|remove|redis|thread|instructions|etcd|all]
 *        [clients,...]
 * (defaults /tmp, 3, all, 1,16,64; the first client count is the one the
 * others are compared with).
 *
 * Starts build/bin/store_master (data_dir under dir). A client is one
 * connection with one request outstanding at a time; a durable mutation is
 * one the master answers only after its OpLog record was fdatasync'ed. For 1,
 * 16 and 64 concurrent clients:
 *   put     put start + put end of fresh keys for `seconds`: two round trips,
 *           of which the put end is the durable mutation (the put start only
 *           allocates a range; nothing of it is logged);
 *   remove  remove of keys put beforehand (by 64 connections, not timed):
 *           one round trip per durable mutation; a fixed number of keys,
 *           twice what the put run of as many clients managed in `seconds`.
 *           The client counts take turns for WM_BENCH_ROUNDS rounds
 *           (default 3), and the medians are compared: this VM's disk and
 *           CPU drift by 20% from one minute to the next. Each remove run
 *           is followed by the same requests to raw_commit.h's server: the
 *           ceiling of group commit on this machine, measured alongside;
 *   redis   the baseline a user would reach for: redis-server 7 (Debian's)
 *           in a directory under dir, AOF with appendfsync always, SET of
 *           random keys by redis-benchmark with as many clients, one request
 *           outstanding each -- Redis writes and fsyncs what one round of its
 *           event loop took before it answers, its own group commit;
 *   thread  put again, with one blocking thread per client;
 *   etcd    (not part of all) put and remove through one HA master on its
 *           own 1-member etcd, next to raw etcd puts from as many C threads
 *           (bench/raw_etcd.c) in the same run;
 *   instructions (not part of all) the master and the raw server under
 *           valgrind's callgrind: user-space instructions per durable
 *           remove of 20,000 keys from 64 clients, and the master's per
 *           put of those keys (start + end) -- figures the VM's drift
 *           does not move, for changes to the hot path
 *           (WM_BENCH_CALLGRIND=DIR keeps the master's dumps in DIR).
 * put and remove drive their connections from two threads waiting on epoll
 * (one per core here), the way redis-benchmark and memtier drive many
 * clients; thread is how independent processes behave, and on a small
 * machine spends much of its CPU switching between client threads, which
 * the master shares.
 *
 * The baseline, measured in the same run, is a loop of write(256 B) +
 * fdatasync on one file in the same directory: what one client would get
 * with no group commit at all. Per run it prints mutations/s, fsyncs/s,
 * mutations per fsync, the ratios to one client of the same workload and to
 * the baseline, and the CPU spent per mutation by the master (all its
 * threads) and by the clients, with how many of the machine's cores were
 * busy: when they all are, the figure is bound by CPU, not by the disk. */
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_clock.h"
#include "etcd_client.h"
#include "etcd_fixture.h"
#include "harness.h"
#include "host_rpc.pb-c.h"
#include "raw_commit.h"
#include "raw_etcd.h"
#include "bench_summary.h"
#include "redis_box.h"
#include "rpc_client.h"

#define EVENT_THREADS 2
#define REMOVE_ROUNDS_MAX 9
#define INSTRUCTION_KEYS 20000 /* removes counted under callgrind */

/* CPU seconds used so far by process pid, all its threads. */
static double process_cpu(pid_t pid)
{
    char path[64], buf[1024];
    unsigned long ut = 0, st = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Busy CPU seconds of the whole machine so far (user, nice, system, irq,
 * softirq, steal). */
static double machine_busy(void)
{
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL) return 0;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 8) return 0;
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)sysconf(_SC_CLK_TCK);
}

static double baseline(const char *dir, double seconds)
{
    char path[512];
    char buf[256];
    memset(buf, 'x', sizeof(buf));
    snprintf(path, sizeof(path), "%s/bench-fdatasync.tmp", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return 0;
    long n = 0;
    double t0 = bench_now_s(), t;
    do {
        if (write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf) || fdatasync(fd) != 0) break;
        n++;
        t = bench_now_s();
    } while (t - t0 < seconds);
    close(fd);
    unlink(path);
    return (double)n / (bench_now_s() - t0);
}

typedef enum workload { W_PUT, W_REMOVE } workload;

/* What the clients talk to: the master (fsyncs from its status), or the
 * raw group-commit server (fsyncs from its shared counters). */
typedef struct target {
    const char *socket;
    pid_t pid;
    const hx_master *m;
    const rawc_counters *raw;
} target;

/* fsyncs done so far by t's server; -1 when it cannot say. */
static double target_fsyncs(const target *t)
{
    kvc_status st;
    double v = -1;
    if (t->raw) return (double)t->raw->fsyncs;
    kvc *k = hx_client(t->m);
    if (k != NULL && kvc_status_get(k, &st) == 0) v = (double)st.oplog_fsyncs;
    kvc_close(k);
    return v;
}

/* One client: a connection working through key numbers [next, end) of its
 * driver's key space -- key f is "<prefix>/c<f / per>/<f % per>", so that
 * the keys one set of connections puts can be removed by another set. */
typedef struct client {
    rpcc_conn *c;
    long next, end;
    int ending; /* put: 0 while its put start is in flight, 1 its put end */
} client;

/* A driver thread: n clients, until `until` or until each has done its
 * range (fixed-count runs set until to infinity). */
typedef struct driver {
    const target *t;
    workload w;
    char prefix[16];
    long per;
    int n;
    client *cs;
    double until;
    long done;
    int failed;
} driver;

/* Send the client's next request: a put start of its current key, or its
 * put end once the start was answered, or a remove. */
static int client_send(const driver *d, client *cl)
{
    char key[64];
    uint8_t body[256];
    unsigned char sha[32] = {0};
    size_t len;
    uint32_t method;
    snprintf(key, sizeof(key), "%s/c%ld/%ld", d->prefix, cl->next / d->per, cl->next % d->per);
    if (d->w == W_REMOVE) {
        KeyRequest req = KEY_REQUEST__INIT;
        req.key = key;
        len = key_request__pack(&req, body);
        method = OBJECTS_METHOD__OBJ_REMOVE;
    } else if (!cl->ending) {
        PutStartRequest req = PUT_START_REQUEST__INIT;
        req.key = key;
        req.size = 1;
        req.data_type = DATA_TYPE__DATA_KV;
        len = put_start_request__pack(&req, body);
        method = OBJECTS_METHOD__OBJ_PUT_START;
    } else {
        PutEndRequest req = PUT_END_REQUEST__INIT;
        req.key = key;
        req.sha256.data = sha;
        req.sha256.len = sizeof(sha);
        len = put_end_request__pack(&req, body);
        method = OBJECTS_METHOD__OBJ_PUT_END;
    }
    return rpcc_send(cl->c, HOST_SERVICE__HOST_SERVICE_OBJECTS, method, body, len, NULL);
}

/* Take the client's response and send its next request, if its range has
 * one. 1 when a durable mutation (put end, remove) was acknowledged, 0 for
 * a put start, -1 on any failure. */
static int client_step(const driver *d, client *cl)
{
    int status = 1, acked;
    if (rpcc_recv(cl->c, 0, NULL, &status, NULL, NULL, NULL) < 0 || status != 0) return -1;
    acked = d->w == W_REMOVE || cl->ending;
    if (acked) cl->next++;
    if (d->w == W_PUT) cl->ending = !cl->ending;
    if (cl->next < cl->end && client_send(d, cl) < 0) return -1;
    return acked;
}

static int client_open(const driver *d, client *cl)
{
    char err[256];
    if (rpcc_connect(d->t->socket, NULL, &cl->c, err, sizeof(err)) < 0) {
        fprintf(stderr, "bench: %s\n", err);
        return -1;
    }
    return cl->next < cl->end ? client_send(d, cl) : SMP_OK;
}

/* event: d->n connections on one epoll set. */
static void *event_driver(void *arg)
{
    driver *d = arg;
    struct epoll_event evs[64];
    int ep = epoll_create1(EPOLL_CLOEXEC), open = 0, active = 0;
    d->failed = 1;
    if (ep < 0) goto out;
    for (; open < d->n; open++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)open};
        if (client_open(d, &d->cs[open]) < 0 ||
            epoll_ctl(ep, EPOLL_CTL_ADD, rpcc_fd(d->cs[open].c), &ev) < 0)
            goto out;
        active += d->cs[open].next < d->cs[open].end;
    }
    while (active > 0 && bench_now_s() < d->until) {
        int k = epoll_wait(ep, evs, 64, 100);
        if (k < 0) goto out;
        for (int j = 0; j < k; j++) {
            client *cl = &d->cs[evs[j].data.u32];
            int r = client_step(d, cl);
            if (r < 0) goto out;
            d->done += r;
            active -= cl->next == cl->end;
        }
    }
    d->failed = 0;
out:
    for (int i = 0; i < open; i++) rpcc_close(d->cs[i].c);
    if (ep >= 0) close(ep);
    return NULL;
}

/* thread: one blocking connection (d->n == 1). */
static void *thread_driver(void *arg)
{
    driver *d = arg;
    client *cl = &d->cs[0];
    int r = 0;
    d->failed = 1;
    if (client_open(d, cl) == 0) {
        while (cl->next < cl->end && bench_now_s() < d->until && (r = client_step(d, cl)) >= 0)
            d->done += r;
        d->failed = r < 0;
    }
    rpcc_close(cl->c);
    return NULL;
}

/* One run: `clients` connections split over the threads of the model. With
 * keys > 0 the key numbers [0, keys) are split evenly among the connections
 * and the run ends when all are done; otherwise connection i takes numbers
 * from i * per on, for `seconds`. */
typedef struct run_spec {
    const char *model; /* "event" or "thread" */
    workload w;
    const char *prefix;
    int clients;
    long per;
    long keys;
    double seconds;
} run_spec;

typedef struct run_result {
    long total;
    double dt, fsyncs, master_cpu, client_cpu, busy;
} run_result;

static int run(const target *t, const run_spec *rs, run_result *out)
{
    int event = strcmp(rs->model, "event") == 0;
    int nthreads = event ? (rs->clients < EVENT_THREADS ? rs->clients : EVENT_THREADS) : rs->clients;
    driver *ds = calloc((size_t)nthreads, sizeof(*ds));
    client *cs = calloc((size_t)rs->clients, sizeof(*cs));
    pthread_t *th = calloc((size_t)nthreads, sizeof(*th));
    double f0 = target_fsyncs(t), f1;
    int failed = 0;
    if (ds == NULL || cs == NULL || th == NULL || f0 < 0) {
        failed = 1;
        goto out;
    }
    for (long i = 0; i < rs->clients; i++) {
        if (rs->keys > 0) {
            long q = rs->keys / rs->clients, rem = rs->keys % rs->clients;
            cs[i].next = i * q + (i < rem ? i : rem);
            cs[i].end = cs[i].next + q + (i < rem);
        } else {
            cs[i].next = i * rs->per;
            cs[i].end = cs[i].next + rs->per;
        }
    }
    memset(out, 0, sizeof(*out));
    double t0 = bench_now_s(), m0 = process_cpu(t->pid), c0 = process_cpu(getpid()), b0 = machine_busy();
    for (int i = 0, first = 0; i < nthreads; i++) {
        ds[i].t = t;
        ds[i].w = rs->w;
        snprintf(ds[i].prefix, sizeof(ds[i].prefix), "%s", rs->prefix);
        ds[i].per = rs->per;
        ds[i].n = rs->clients / nthreads + (i < rs->clients % nthreads);
        ds[i].cs = cs + first;
        ds[i].until = rs->keys > 0 ? 1e300 : t0 + rs->seconds;
        first += ds[i].n;
        pthread_create(&th[i], NULL, event ? event_driver : thread_driver, &ds[i]);
    }
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
        out->total += ds[i].done;
        failed |= ds[i].failed;
    }
    out->dt = bench_now_s() - t0;
    out->master_cpu = process_cpu(t->pid) - m0;
    out->client_cpu = process_cpu(getpid()) - c0;
    out->busy = machine_busy() - b0;
    if ((f1 = target_fsyncs(t)) < 0) failed = 1;
    out->fsyncs = f1 - f0;
out:
    free(ds);
    free(cs);
    free(th);
    if (failed || out->total == 0) {
        fprintf(stderr, "bench: a %s client failed (%s)\n", rs->model, rs->prefix);
        return -1;
    }
    return 0;
}

/* -- Redis baseline ------------------------------------------------------- */

/* -- instructions: user-space work per durable remove ---------------------- */

/* callgrind_control `what` ("-z" zero, "-d" dump) for process pid. 0 or -1. */
static int callgrind_control(const char *what, pid_t pid)
{
    char p[16], out[1024];
    char *argv[] = {"callgrind_control", (char *)what, p, NULL};
    snprintf(p, sizeof(p), "%d", (int)pid);
    return bench_run_capture(argv, out, sizeof(out)) == 0 ? 0 : -1;
}

/* Instructions in the newest dump of out_file (callgrind writes dumps as
 * out_file.1, .2, ...); -1 when there is none. */
static double callgrind_last_dump(const char *out_file)
{
    char path[800], line[512];
    struct stat sb;
    int n = 0;
    double ir = -1;
    while (snprintf(path, sizeof(path), "%s.%d", out_file, n + 1) > 0 && stat(path, &sb) == 0) n++;
    if (n == 0) return -1;
    snprintf(path, sizeof(path), "%s.%d", out_file, n);
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "summary:", 8) == 0) ir = atof(line + 8);
    fclose(f);
    return ir;
}

/* User-space instructions per remove of the server behind t (running
 * under callgrind, writing to out_file): counters zeroed, `keys` removes
 * from 64 clients, counters dumped. -1 on failure. */
static double instructions_per_remove(const target *t, const char *out_file, const char *prefix,
                                      long per)
{
    run_result r;
    run_spec rs = {"event", W_REMOVE, prefix, 64, per, per * 64, 0};
    double ir;
    if (callgrind_control("-z", t->pid) < 0 || run(t, &rs, &r) < 0 ||
        callgrind_control("-d", t->pid) < 0 || (ir = callgrind_last_dump(out_file)) < 0)
        return -1;
    return ir / (double)r.total;
}

/* The master and the raw group-commit server under valgrind's callgrind:
 * the instructions each executes per durable remove (keys put beforehand,
 * then removed by 64 clients). Unlike the rates, these do not move with
 * the machine's mood, so a change to the hot path shows here first. */
static int instructions(const char *dir, long keys)
{
    hx_master m;
    rawc_server raw = {0};
    char mopt[700], ropt[600], mfile[600], rfile[700] = "";
    long per = keys / 64 > 0 ? keys / 64 : 1;
    double im = -1, ir = -1, iput = -1;
    run_result r;
    if (hx_init(&m, "bench-instr", "snapshot:\n  every_records: 0\n") < 0) return -1;
    /* WM_BENCH_CALLGRIND=DIR keeps the master's dumps there, for
     * callgrind_annotate: .1 the puts, .2 the removes */
    const char *keep = getenv("WM_BENCH_CALLGRIND");
    snprintf(mfile, sizeof(mfile), "%s/callgrind.out", keep && keep[0] ? keep : m.dir);
    snprintf(mopt, sizeof(mopt), "--callgrind-out-file=%s", mfile);
    const char *mwrap[] = {"valgrind", "-q", "--tool=callgrind", mopt, NULL};
    m.wrap = mwrap;
    if (hx_start(&m, 120000) == 0) {
        target mt = {m.socket, m.pid, &m, NULL};
        run_spec fill = {"event", W_PUT, "i", 64, per, per * 64, 0};
        /* the keys' puts (start + end each) are counted too */
        if (callgrind_control("-z", m.pid) == 0 && run(&mt, &fill, &r) == 0 &&
            callgrind_control("-d", m.pid) == 0 && (iput = callgrind_last_dump(mfile)) >= 0) {
            iput /= (double)r.total;
            im = instructions_per_remove(&mt, mfile, "i", per);
        }
        hx_stop(&m);
    }
    hx_cleanup(&m);
    snprintf(ropt, sizeof(ropt), "--callgrind-out-file=%s/raw-callgrind.%%p", dir);
    const char *rwrap[] = {"valgrind", "-q", "--tool=callgrind", ropt, NULL};
    if (im > 0 && rawc_start(&raw, dir, rwrap) == 0) {
        target rt = {raw.socket, raw.pid, NULL, raw.counters};
        snprintf(rfile, sizeof(rfile), "%s/raw-callgrind.%d", dir, (int)raw.pid);
        ir = instructions_per_remove(&rt, rfile, "i", per);
    }
    rawc_stop(&raw);
    if (rfile[0]) { /* its output at exit, and the dump */
        char path[800];
        snprintf(path, sizeof(path), "%s.1", rfile);
        unlink(path);
        unlink(rfile);
    }
    if (im < 0 || ir < 0) {
        fprintf(stderr, "bench: instructions: a run under valgrind failed\n");
        return -1;
    }
    printf("%-13s clients 64: master %.0f, raw commit %.0f user-space instructions per durable"
           " mutation (callgrind, %ld keys)  x%.1f raw commit; a put (start + end) %.0f\n",
           "instructions", im, ir, per * 64, im / ir, iput);
    char f1[64], f2[64];
    bench_summary("instructions per durable remove, 64 clients (callgrind)",
                  bench_fmt(f1, sizeof(f1), "%.0f", im),
                  bench_fmt(f2, sizeof(f2), "raw group-commit server %.0f", ir), im / ir, "");
    return 0;
}

static void print_line(const char *label, int clients, const run_result *r, double single,
                       double base)
{
    double rate = (double)r->total / r->dt, fsyncs = r->fsyncs / r->dt;
    printf("%-13s clients %2d: %7.0f durable mutations/s %6.0f fsyncs/s %6.2f mutations/fsync"
           "  x%-5.1f one client  x%-5.2f baseline | cpu/mutation master %5.1f us clients %5.1f us,"
           " %.2f cores busy\n",
           label, clients, rate, fsyncs, fsyncs > 0 ? rate / fsyncs : 0,
           single > 0 ? rate / single : 1.0, base > 0 ? rate / base : 0,
           r->master_cpu * 1e6 / (double)r->total, r->client_cpu * 1e6 / (double)r->total,
           r->busy / r->dt);
    fflush(stdout);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (n <= REMOVE_ROUNDS_MAX; v is left as it was). */
static double median(const double *v, int n)
{
    double s[REMOVE_ROUNDS_MAX];
    memcpy(s, v, (size_t)n * sizeof(*s));
    qsort(s, (size_t)n, sizeof(*s), cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static double min_of(const double *v, int n)
{
    double x = v[0];
    for (int i = 1; i < n; i++) x = v[i] < x ? v[i] : x;
    return x;
}

static double max_of(const double *v, int n)
{
    double x = v[0];
    for (int i = 1; i < n; i++) x = v[i] > x ? v[i] : x;
    return x;
}

/* The median line of n rates at one client count, with its ratio to
 * single (a median too) unless single is 0. */
static void print_median(const char *label, int clients, const double *v, int n, double single)
{
    double med = median(v, n);
    printf("%-13s clients %2d: median %7.0f durable mutations/s of %d runs (%.0f..%.0f)", label,
           clients, med, n, min_of(v, n), max_of(v, n));
    if (single > 0) printf("  x%.1f one client's median", med / single);
    printf("\n");
}

/* Client counts from "1,16,64" into counts (at most max); their number, or
 * -1 when the list is malformed. */
static int parse_counts(const char *list, int *counts, int max)
{
    int n = 0;
    const char *p = list;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 4096 || n == max || (*end != ',' && *end != '\0')) return -1;
        counts[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return n > 0 ? n : -1;
}

/* etcd (not part of all): the put and remove runs through one HA master on
 * its own 1-member etcd (the etcd OpLog: a group commit is one etcd
 * transaction), next to raw etcd puts from as many C threads in the same
 * run -- what the master's batching buys over writing etcd directly. */
static int etcd_runs(double seconds, const int *counts, int ncounts)
{
    etcd_fixture fx;
    hx_master m;
    etcd_client *cli = NULL;
    char yaml[2048], err[256], prefix[16];
    int rc = -1;
    memset(&m, 0, sizeof(m));
    if (etcd_fixture_start(&fx, "bench-mutations", 1, 20000) < 0) return -1;
    int n = hx_init(&m, "bench-ha", NULL) < 0
                ? -1
                : hx_ha_yaml(&m, "m1", etcd_fixture_endpoints(&fx), "/bench-mutations/", NULL, 2,
                             yaml, sizeof(yaml));
    etcd_client_options co = {.endpoints = etcd_fixture_endpoints(&fx)};
    if (n < 0 || snprintf(yaml + n, sizeof(yaml) - (size_t)n, "snapshot:\n  every_records: 0\n") < 0 ||
        hx_reconfigure(&m, yaml) < 0 || hx_start(&m, 20000) < 0 ||
        etcd_client_open(&co, &cli, err, sizeof(err)) < 0) {
        fprintf(stderr, "bench: cannot start the HA master on etcd\n");
        goto out;
    }
    printf("etcd: one HA master on a 1-member etcd (%s); raw = etcd_put of 256 B from as many "
           "C threads, each its own key\n", co.endpoints);
    target mt = {m.socket, m.pid, &m, NULL};
    run_result r;
    double one = 0;
    for (int i = 0; i < ncounts; i++) {
        snprintf(prefix, sizeof(prefix), "e%d", i);
        run_spec put = {"event", W_PUT, prefix, counts[i], LONG_MAX / 64, 0, seconds};
        if (run(&mt, &put, &r) < 0) goto out;
        double put_rate = (double)r.total / r.dt;
        long per = (long)(2.0 * put_rate * seconds / counts[i]) + 100;
        snprintf(prefix, sizeof(prefix), "er%d", i);
        run_spec fill = {"event", W_PUT, prefix, 64, per, per * counts[i], 0};
        run_spec rs = {"event", W_REMOVE, prefix, counts[i], per, per * counts[i], 0};
        if (run(&mt, &fill, &r) < 0 || run(&mt, &rs, &r) < 0) goto out;
        double rate = (double)r.total / r.dt;
        if (i == 0) one = rate;
        print_line("etcd remove", counts[i], &r, i ? one : 0, 0);
        int threads = counts[i] < RAW_ETCD_MAX_THREADS ? counts[i] : RAW_ETCD_MAX_THREADS;
        double raw = raw_etcd_rate(cli, threads, seconds, 0, i);
        if (raw <= 0) goto out;
        printf("%-13s clients %2d: %7.0f durable puts/s   master remove / raw etcd put x%.2f\n",
               "raw etcd put", threads, raw, rate / raw);
        fflush(stdout);
        char what[96], f1[64], f2[64];
        bench_fmt(what, sizeof(what), "durable remove (etcd OpLog), %d client%s", counts[i],
                  counts[i] > 1 ? "s" : "");
        bench_summary(what, bench_fmt(f1, sizeof(f1), "%.0f/s", rate),
                      bench_fmt(f2, sizeof(f2), "raw etcd put %.0f/s (%d threads)", raw, threads),
                      rate / raw, counts[i] == 64 ? ">= 2x raw etcd puts" : "");
    }
    rc = 0;
out:
    etcd_client_close(cli);
    if (m.pid > 0) hx_stop(&m);
    if (m.dir[0]) hx_cleanup(&m);
    etcd_fixture_cleanup(&fx);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], RAWC_SERVE_ARG) == 0) /* rawc_start's child */
        return rawc_serve_dir(argv[2], NULL) < 0 ? 1 : 0;
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    double seconds = argc > 2 ? atof(argv[2]) : 3.0;
    int rounds = getenv("WM_BENCH_ROUNDS") ? atoi(getenv("WM_BENCH_ROUNDS")) : 3;
    const char *only = argc > 3 && strcmp(argv[3], "all") != 0 ? argv[3] : NULL;
    int counts[8] = {1, 16, 64}, ncounts = 3;
    double put_rate[8] = {0}, remove_rate[8] = {0};
    char prefix[16];
    hx_master m;
    rawc_server raw = {0};
    run_result r;
    if (argc > 4 && (ncounts = parse_counts(argv[4], counts, 8)) < 0) {
        fprintf(stderr, "bench: clients must be 1 to 8 numbers in 1..4096, comma separated\n");
        return 2;
    }
    if (rounds < 1 || rounds > REMOVE_ROUNDS_MAX) {
        fprintf(stderr, "bench: WM_BENCH_ROUNDS must be 1..%d\n", REMOVE_ROUNDS_MAX);
        return 2;
    }
    setenv("TMPDIR", dir, 1);
    if (only && strcmp(only, "instructions") == 0) return instructions(dir, INSTRUCTION_KEYS) < 0;
    if (only && strcmp(only, "etcd") == 0) return etcd_runs(seconds, counts, ncounts) < 0;
    if (hx_init(&m, "bench", "snapshot:\n  every_records: 0\n") < 0 || hx_start(&m, 20000) < 0) {
        fprintf(stderr, "bench: cannot start the master\n");
        return 1;
    }
    target mt = {m.socket, m.pid, &m, NULL};
    double base = baseline(m.dir, seconds);
    printf("baseline: write(256 B)+fdatasync loop on the same file system: %.0f ops/s\n", base);

    /* put: put start + put end of fresh keys, for `seconds` (the remove runs
     * size their key sets from these rates, so they run for them too). */
    for (int i = 0; i < ncounts && (!only || (strcmp(only, "thread") != 0 && strcmp(only, "redis") != 0));
         i++) {
        snprintf(prefix, sizeof(prefix), "p%d", i);
        run_spec rs = {"event", W_PUT, prefix, counts[i], LONG_MAX / 64, 0, seconds};
        if (run(&mt, &rs, &r) < 0) goto fail;
        put_rate[i] = (double)r.total / r.dt;
        if (!only || strcmp(only, "put") == 0)
            print_line("event put", counts[i], &r, i ? put_rate[0] : 0, base);
    }
    /* remove: each client removes keys put beforehand (by 64 connections,
     * not timed): twice as many as the put runs did in `seconds`. Each
     * remove run is followed by the same requests to the raw group-commit
     * server (raw_commit.h), the ceiling of the design on this machine. The
     * client counts take turns, `rounds` times, so that a slow minute of the
     * machine's disk or CPU falls on all of them; the medians are compared. */
    double runs[8][REMOVE_ROUNDS_MAX] = {{0}}, raw_runs[8][REMOVE_ROUNDS_MAX] = {{0}};
    int removing = !only || strcmp(only, "remove") == 0;
    target rt = {0};
    if (removing) {
        if (rawc_start(&raw, dir, NULL) < 0) goto fail;
        rt = (target){raw.socket, raw.pid, NULL, raw.counters};
    }
    for (int round = 0; round < rounds && removing; round++) {
        for (int i = 0; i < ncounts; i++) {
            long per = (long)(2.0 * put_rate[i] * seconds / counts[i]) + 100;
            snprintf(prefix, sizeof(prefix), "r%d.%d", round, i);
            run_spec fill = {"event", W_PUT, prefix, 64, per, per * counts[i], 0};
            run_spec rs = {"event", W_REMOVE, prefix, counts[i], per, per * counts[i], 0};
            if (run(&mt, &fill, &r) < 0 || run(&mt, &rs, &r) < 0) goto fail;
            runs[i][round] = (double)r.total / r.dt;
            print_line("event remove", counts[i], &r, i ? runs[0][round] : 0, base);
            if (run(&rt, &rs, &r) < 0) goto fail;
            raw_runs[i][round] = (double)r.total / r.dt;
            print_line("raw commit", counts[i], &r, i ? raw_runs[0][round] : 0, base);
        }
    }
    for (int i = 0; i < ncounts && rounds > 0 && removing; i++) {
        remove_rate[i] = median(runs[i], rounds);
        print_median("event remove", counts[i], runs[i], rounds, i ? remove_rate[0] : 0);
        print_median("raw commit", counts[i], raw_runs[i], rounds, i ? median(raw_runs[0], rounds) : 0);
        printf("  master remove / raw commit %.2f\n", remove_rate[i] / median(raw_runs[i], rounds));
    }
    rawc_stop(&raw);
    /* Redis SET with appendfsync always, as many clients, the same disk:
     * what a user could run instead for durable small writes. */
    if (!only || strcmp(only, "redis") == 0) {
        redis_box rb;
        memset(&rb, 0, sizeof(rb));
        if (redis_start(&rb, dir, 1) < 0) {
            printf("redis: no redis-server could be started (make bench installs redis-server)\n");
        } else {
            double one = 0;
            for (int i = 0; i < ncounts; i++) {
                /* about `seconds` at the rates seen here */
                long requests = (long)(seconds * (counts[i] == 1 ? 6000 : counts[i] < 32 ? 30000 : 90000));
                double rate = redis_bench(&rb, "set", counts[i], requests);
                if (i == 0) one = rate;
                if (rate <= 0) {
                    printf("redis: redis-benchmark failed\n");
                    break;
                }
                printf("%-13s clients %2d: %7.0f durable mutations/s  x%-5.1f one client  x%-5.2f baseline",
                       "redis SET", counts[i], rate, one > 0 ? rate / one : 0,
                       base > 0 ? rate / base : 0);
                if (remove_rate[i] > 0 && put_rate[i] > 0)
                    printf("  | master remove / redis %.2f, master put / redis %.2f",
                           remove_rate[i] / rate, put_rate[i] / rate);
                printf("\n");
                fflush(stdout);
                char what[96], f1[64], f2[64];
                if (remove_rate[i] > 0) {
                    bench_fmt(what, sizeof(what), "durable remove (file OpLog), %d client%s", counts[i],
                              counts[i] > 1 ? "s" : "");
                    bench_summary(what, bench_fmt(f1, sizeof(f1), "%.0f/s", remove_rate[i]),
                                  bench_fmt(f2, sizeof(f2), "redis SET appendfsync always %.0f/s", rate),
                                  remove_rate[i] / rate, counts[i] == 64 ? ">= 20x one client" : "");
                }
                if (put_rate[i] > 0) {
                    bench_fmt(what, sizeof(what), "durable put (file OpLog), %d client%s", counts[i],
                              counts[i] > 1 ? "s" : "");
                    bench_summary(what, bench_fmt(f1, sizeof(f1), "%.0f/s", put_rate[i]),
                                  bench_fmt(f2, sizeof(f2), "redis SET appendfsync always %.0f/s", rate),
                                  put_rate[i] / rate, "");
                }
            }
        }
        redis_stop(&rb);
    }
    /* put again, one blocking thread per client (for reference). */
    double thread_single = 0;
    for (int i = 0; i < ncounts && (!only || strcmp(only, "thread") == 0); i++) {
        snprintf(prefix, sizeof(prefix), "t%d", i);
        run_spec rs = {"thread", W_PUT, prefix, counts[i], LONG_MAX / 64, 0, seconds};
        if (run(&mt, &rs, &r) < 0) goto fail;
        if (i == 0) thread_single = (double)r.total / r.dt;
        print_line("thread put", counts[i], &r, i ? thread_single : 0, base);
    }
    hx_stop(&m);
    hx_cleanup(&m);
    return 0;
fail:
    rawc_stop(&raw);
    hx_stop(&m);
    hx_cleanup(&m);
    return 1;
}
