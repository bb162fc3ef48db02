/* bench_oplog.c -- what group commit buys over one fdatasync per record.
 *
 * Usage: bench_oplog [dir] [seconds]   (defaults: /tmp, 2)
 *
 * First a baseline on a file in a scratch directory under dir: a plain loop of
 * write(256 bytes) + fdatasync. Then the file OpLog in another scratch
 * directory with C concurrent "clients" (C = 1, 16, 64): each has one append
 * of a 256-byte payload outstanding and issues the next from its durable
 * callback, for `seconds` per setting. Prints records/s, fsyncs/s, records per
 * fsync and the ratio to the baseline. Scratch files are removed. Not a test:
 * the numbers depend on the disk. */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_summary.h"
#include "oplog.h"
#include "oplog_drive.h"

#define PAYLOAD OPLOG_DRIVE_PAYLOAD

/* Remove the files of dir and dir itself (one level). */
static void remove_dir(const char *dir)
{
    struct dirent *de;
    DIR *d = opendir(dir);
    if (d != NULL) {
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            unlinkat(dirfd(d), de->d_name, 0);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* Records per second of write(256) + fdatasync, or a negative value. */
static double baseline(const char *scratch, double seconds)
{
    char path[1024];
    uint8_t buf[PAYLOAD];
    uint64_t n = 0, t0, end;
    int fd;

    memset(buf, 0xab, sizeof(buf));
    snprintf(path, sizeof(path), "%s/baseline.dat", scratch);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        perror("bench_oplog: baseline file");
        return -1;
    }
    t0 = uv_hrtime();
    end = t0 + (uint64_t)(seconds * 1e9);
    while (uv_hrtime() < end) {
        if (write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf) || fdatasync(fd) < 0) {
            perror("bench_oplog: baseline write");
            close(fd);
            return -1;
        }
        n++;
    }
    close(fd);
    unlink(path);
    return (double)n / ((double)(uv_hrtime() - t0) / 1e9);
}

/* Run one setting with `clients` concurrent clients; prints one row. */
static int run_setting(const char *scratch, int clients, double seconds, double base)
{
    char dir[1024], err[512] = "";
    oplog_file_options opt = {0};
    oplog_stats st;
    uv_loop_t loop;
    oplog *log;
    oplog_drive b;
    uint64_t elapsed;
    double secs, rps;
    int rc;

    snprintf(dir, sizeof(dir), "%s/oplog_c%d", scratch, clients);
    opt.dir = dir;
    if (uv_loop_init(&loop) != 0)
        return -1;
    if ((rc = oplog_file_open(&loop, &opt, &log, err, sizeof(err))) < 0) {
        fprintf(stderr, "bench_oplog: %s\n", err);
        uv_loop_close(&loop);
        return rc;
    }
    elapsed = oplog_drive_run(&b, log, "bench_oplog", &loop, clients, seconds);
    oplog_stats_get(log, &st);
    oplog_close(log);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    remove_dir(dir);

    secs = (double)elapsed / 1e9;
    rps = (double)b.done / secs;
    printf("clients %3d  records/s %10.0f  fsyncs/s %8.0f  records/fsync %7.2f  "
           "mean durable latency %8.1f us  x%.1f baseline\n",
           clients, rps, (double)st.syncs / secs,
           st.syncs ? (double)b.done / (double)st.syncs : 0.0,
           st.durable_count ? (double)st.durable_lat_ns_sum / (double)st.durable_count / 1e3 : 0.0,
           base > 0 ? rps / base : 0.0);
    char w[64], f1[32], f2[48];
    bench_summary(bench_fmt(w, sizeof(w), "file OpLog durable appends, %d appender%s", clients,
                            clients > 1 ? "s" : ""),
                  bench_fmt(f1, sizeof(f1), "%.0f/s", rps),
                  bench_fmt(f2, sizeof(f2), "write + fdatasync %.0f/s", base), base > 0 ? rps / base : -1,
                  "");
    return b.failed ? -1 : 0;
}

int main(int argc, char **argv)
{
    const char *parent = argc > 1 ? argv[1] : "/tmp";
    double seconds = argc > 2 ? atof(argv[2]) : 2.0;
    static const int settings[] = {1, 16, 64};
    char scratch[512];
    double base;
    int rc = 0;

    if (seconds <= 0 || seconds > 60) {
        fprintf(stderr, "usage: bench_oplog [dir] [seconds 0..60]\n");
        return 2;
    }
    snprintf(scratch, sizeof(scratch), "%s/bench_oplog_XXXXXX", parent);
    if (mkdtemp(scratch) == NULL) {
        perror("bench_oplog: mkdtemp");
        return 1;
    }
    printf("bench_oplog: dir %s, %d-byte payloads, %.1f s per setting\n",
           parent, PAYLOAD, seconds);
    base = baseline(scratch, seconds);
    if (base < 0) {
        rc = 1;
        goto remove_scratch;
    }
    printf("baseline     records/s %10.0f  (write %d B + fdatasync per record)\n",
           base, PAYLOAD);
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++)
        if (run_setting(scratch, settings[i], seconds, base) < 0)
            rc = 1;
remove_scratch:
    remove_dir(scratch);
    return rc;
}
