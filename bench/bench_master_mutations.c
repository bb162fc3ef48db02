/* bench_master_mutations.c -- durable mutations per second through a real
 * master, next to a plain fdatasync loop on the same file system.
 *
 * Starts build/bin/store_master (data_dir under the directory given as
 * argv[1], default /tmp), then for 1, 16 and 64 concurrent clients -- each a
 * thread with its own connection doing put start + put end of fresh keys --
 * counts put ends acknowledged (each one answered only after its OpLog record
 * was fdatasync'ed) over a fixed time, and reads the master's fsync count.
 * The baseline, measured in the same run, is a loop of write(256 B) +
 * fdatasync on one file in the same directory: what one client would get
 * with no group commit at all. Prints mutations/s, fsyncs/s, mutations per
 * fsync and the ratios (the issue asks 64 clients >= 20x one client). */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
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

typedef struct client {
    const hx_master *m;
    int id;
    int round;
    double until;
    long done;
} client;

static void *client_main(void *arg)
{
    client *c = arg;
    kvc *k = hx_client(c->m);
    unsigned char sha[32] = {0};
    char key[64];
    if (k == NULL) return NULL;
    for (long i = 0; now_s() < c->until; i++) {
        snprintf(key, sizeof(key), "r%d/c%d/%ld", c->round, c->id, i);
        if (kvc_put_start(k, key, 1, SMP_DATA_KV, NULL, 0, NULL) < 0) break;
        if (kvc_put_end(k, key, sha, NULL) < 0) break;
        c->done++;
    }
    kvc_close(k);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    double seconds = argc > 2 ? atof(argv[2]) : 3.0;
    int counts[] = {1, 16, 64};
    hx_master m;
    char extra[512];
    setenv("TMPDIR", dir, 1);
    snprintf(extra, sizeof(extra), "snapshot:\n  every_records: 0\n");
    if (hx_init(&m, "bench", extra) < 0 || hx_start(&m, 20000) < 0) {
        fprintf(stderr, "bench: cannot start the master\n");
        return 1;
    }
    double base = baseline(m.dir, seconds);
    printf("baseline: write(256 B)+fdatasync loop on the same file system: %.0f ops/s\n", base);
    double single = 0;
    for (size_t r = 0; r < sizeof(counts) / sizeof(counts[0]); r++) {
        int n = counts[r];
        client *cs = calloc((size_t)n, sizeof(*cs));
        pthread_t *th = calloc((size_t)n, sizeof(*th));
        kvc *k = hx_client(&m);
        kvc_status s0, s1;
        kvc_status_get(k, &s0);
        double t0 = now_s();
        for (int i = 0; i < n; i++) {
            cs[i] = (client){&m, i, (int)r, t0 + seconds, 0};
            pthread_create(&th[i], NULL, client_main, &cs[i]);
        }
        long total = 0;
        for (int i = 0; i < n; i++) {
            pthread_join(th[i], NULL);
            total += cs[i].done;
        }
        double dt = now_s() - t0;
        kvc_status_get(k, &s1);
        kvc_close(k);
        double rate = (double)total / dt;
        double fsyncs = (double)(s1.oplog_fsyncs - s0.oplog_fsyncs) / dt;
        if (n == 1) single = rate;
        printf("clients %2d: %8.0f durable mutations/s  %7.0f fsyncs/s  %6.2f mutations/fsync"
               "  x%.1f one client  x%.2f baseline\n",
               n, rate, fsyncs, fsyncs > 0 ? rate / fsyncs : 0, single > 0 ? rate / single : 0,
               base > 0 ? rate / base : 0);
        free(cs);
        free(th);
    }
    hx_stop(&m);
    hx_cleanup(&m);
    return 0;
}
