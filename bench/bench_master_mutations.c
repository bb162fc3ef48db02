/* bench_master_mutations.c -- durable mutations per second through a real
 * master, next to a plain fdatasync loop on the same file system.
 *
 * Starts build/bin/store_master (data_dir under the directory given as
 * argv[1], default /tmp; argv[2] seconds per run, default 3), then for 1, 16
 * and 64 concurrent clients -- each its own connection doing put start + put
 * end of fresh keys, one request outstanding at a time -- counts put ends
 * acknowledged (each answered only after its OpLog record was fdatasync'ed)
 * and reads the master's fsync count.
 *
 * Clients are driven two ways. "event": the connections are spread over two
 * threads (one per core here) that wait on epoll, the way redis-benchmark and
 * memtier drive many clients. "thread": one blocking thread per connection,
 * as independent processes would behave. Both are printed; on a small machine
 * the thread model spends much of the CPU switching between client threads,
 * which the master shares.
 *
 * The baseline, measured in the same run, is a loop of write(256 B) +
 * fdatasync on one file in the same directory: what one client would get
 * with no group commit at all. Per run it prints mutations/s, fsyncs/s,
 * mutations per fsync, the ratios to one client and to the baseline, and the
 * CPU spent per mutation by the master (all its threads) and by the clients,
 * with how many of the machine's cores were busy: when they all are, the
 * figure is bound by CPU, not by the disk. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "host_rpc.pb-c.h"
#include "rpc_client.h"

#define EVENT_THREADS 2

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

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
    double t0 = now_s(), t;
    do {
        if (write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf) || fdatasync(fd) != 0) break;
        n++;
        t = now_s();
    } while (t - t0 < seconds);
    close(fd);
    unlink(path);
    return (double)n / (now_s() - t0);
}

/* One client: a connection putting keys "<model><round>/c<id>/<i>". */
typedef struct client {
    rpcc_conn *c;
    int id;
    long i;
    int ending; /* 0: its put start is in flight, 1: its put end */
} client;

/* A driver thread: `n` clients from `first`, until `until`. */
typedef struct driver {
    const hx_master *m;
    char prefix[16];
    int first, n;
    double until;
    long done;
    int failed;
} driver;

/* Send the client's next request: a put start of its current key, or its
 * put end once the start was answered. */
static int client_send(const driver *d, client *cl)
{
    char key[64];
    uint8_t body[256];
    unsigned char sha[32] = {0};
    size_t len;
    uint32_t method;
    snprintf(key, sizeof(key), "%s/c%d/%ld", d->prefix, cl->id, cl->i);
    if (!cl->ending) {
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

/* Take the client's response and send its next request. 1 when a put end
 * was acknowledged, 0 for a put start, -1 on any failure. */
static int client_step(const driver *d, client *cl)
{
    int status = 1, acked;
    if (rpcc_recv(cl->c, 0, NULL, &status, NULL, NULL, NULL) < 0 || status != 0) return -1;
    acked = cl->ending;
    if (cl->ending) cl->i++;
    cl->ending = !cl->ending;
    return client_send(d, cl) < 0 ? -1 : acked;
}

static int client_open(const driver *d, client *cl, int id)
{
    char err[256];
    cl->id = id;
    if (rpcc_connect(d->m->socket, NULL, &cl->c, err, sizeof(err)) < 0) {
        fprintf(stderr, "bench: %s\n", err);
        return -1;
    }
    return client_send(d, cl);
}

/* event: d->n connections on one epoll set. */
static void *event_driver(void *arg)
{
    driver *d = arg;
    client *cs = calloc((size_t)d->n, sizeof(*cs));
    struct epoll_event evs[64];
    int ep = epoll_create1(EPOLL_CLOEXEC);
    d->failed = 1;
    if (cs == NULL || ep < 0) goto out;
    for (int i = 0; i < d->n; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (client_open(d, &cs[i], d->first + i) < 0 ||
            epoll_ctl(ep, EPOLL_CTL_ADD, rpcc_fd(cs[i].c), &ev) < 0)
            goto out;
    }
    while (now_s() < d->until) {
        int k = epoll_wait(ep, evs, 64, 100);
        if (k < 0) goto out;
        for (int j = 0; j < k; j++) {
            int r = client_step(d, &cs[evs[j].data.u32]);
            if (r < 0) goto out;
            d->done += r;
        }
    }
    d->failed = 0;
out:
    for (int i = 0; cs != NULL && i < d->n; i++) rpcc_close(cs[i].c);
    if (ep >= 0) close(ep);
    free(cs);
    return NULL;
}

/* thread: one blocking connection (d->n == 1). */
static void *thread_driver(void *arg)
{
    driver *d = arg;
    client cl = {0};
    int r = 0;
    d->failed = 1;
    if (client_open(d, &cl, d->first) == 0) {
        while (now_s() < d->until && (r = client_step(d, &cl)) >= 0) d->done += r;
        d->failed = r < 0;
    }
    rpcc_close(cl.c);
    return NULL;
}

/* Run `clients` clients for `seconds` with the given model; print the line.
 * Returns mutations/s, or -1 when a client failed. */
static double run(const hx_master *m, const char *model, int round, int clients, double seconds,
                  double single, double base)
{
    int event = strcmp(model, "event") == 0;
    int nthreads = event ? (clients < EVENT_THREADS ? clients : EVENT_THREADS) : clients;
    driver *ds = calloc((size_t)nthreads, sizeof(*ds));
    pthread_t *th = calloc((size_t)nthreads, sizeof(*th));
    kvc *k = hx_client(m);
    kvc_status s0, s1;
    long total = 0;
    int failed = 0;
    if (ds == NULL || th == NULL || k == NULL || kvc_status_get(k, &s0) < 0) return -1;
    double t0 = now_s(), m0 = process_cpu(m->pid), c0 = process_cpu(getpid()), b0 = machine_busy();
    for (int i = 0, first = 0; i < nthreads; i++) {
        ds[i].m = m;
        snprintf(ds[i].prefix, sizeof(ds[i].prefix), "%c%d", model[0], round);
        ds[i].first = first;
        ds[i].n = clients / nthreads + (i < clients % nthreads);
        ds[i].until = t0 + seconds;
        first += ds[i].n;
        pthread_create(&th[i], NULL, event ? event_driver : thread_driver, &ds[i]);
    }
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
        total += ds[i].done;
        failed |= ds[i].failed;
    }
    double dt = now_s() - t0;
    double mcpu = process_cpu(m->pid) - m0, ccpu = process_cpu(getpid()) - c0;
    double busy = machine_busy() - b0;
    if (kvc_status_get(k, &s1) < 0) failed = 1;
    kvc_close(k);
    free(ds);
    free(th);
    if (failed || total == 0) {
        fprintf(stderr, "bench: a %s client failed\n", model);
        return -1;
    }
    double rate = (double)total / dt;
    double fsyncs = (double)(s1.oplog_fsyncs - s0.oplog_fsyncs) / dt;
    if (single <= 0) single = rate;
    printf("%-6s clients %2d: %7.0f durable mutations/s %6.0f fsyncs/s %6.2f mutations/fsync"
           "  x%-5.1f one client  x%-5.2f baseline | cpu/mutation master %5.1f us clients %5.1f us,"
           " %.2f cores busy\n",
           model, clients, rate, fsyncs, fsyncs > 0 ? rate / fsyncs : 0, rate / single,
           base > 0 ? rate / base : 0, mcpu * 1e6 / (double)total, ccpu * 1e6 / (double)total,
           busy / dt);
    fflush(stdout);
    return rate;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    double seconds = argc > 2 ? atof(argv[2]) : 3.0;
    const int counts[] = {1, 16, 64};
    const char *models[] = {"event", "thread"};
    hx_master m;
    int rc = 0;
    setenv("TMPDIR", dir, 1);
    if (hx_init(&m, "bench", "snapshot:\n  every_records: 0\n") < 0 || hx_start(&m, 20000) < 0) {
        fprintf(stderr, "bench: cannot start the master\n");
        return 1;
    }
    double base = baseline(m.dir, seconds);
    printf("baseline: write(256 B)+fdatasync loop on the same file system: %.0f ops/s\n", base);
    for (int mi = 0; mi < 2 && rc == 0; mi++) {
        double single = 0;
        for (int r = 0; r < 3 && rc == 0; r++) {
            double rate = run(&m, models[mi], r, counts[r], seconds, single, base);
            if (rate < 0) rc = 1;
            if (r == 0) single = rate;
        }
    }
    hx_stop(&m);
    hx_cleanup(&m);
    return rc;
}
