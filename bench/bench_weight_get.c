/* bench_weight_get.c -- publishing and loading a revision, each next to
 * the raw operation on the same bytes measured in the same run.
 *
 * Starts build/bin/store_master with its embedded node's segment under
 * /dev/shm (big enough for two revisions), and with a revision of argv[1]
 * GiB (default 4) of BF16 tensors measures:
 *
 *   put co-located: weight_put of whole tensors (TP 1) through the mapped
 *             segment, SHA-256 and chunk sums included, against one core's
 *             SHA-256 (OpenSSL) of the same bytes (target >= 0.9x);
 *   put TCP:  weight_put of the fragments of a TP 4 writer over the node's
 *             data server (WEIGHT_OPT_TRANSPORT 2), against the same
 *             (taken before and after each pair of puts, the faster);
 *   put again, TCP again: each put is a publisher's first revision; then
 *             (the whole bench and `put`) that revision is removed, its
 *             memory freed, and the same store publishes the next one:
 *             the same process, into the freed ranges (first fit), so into
 *             pages its mapping of the segment (co-located) or the node's
 *             (TCP) has written already -- a trainer's steady state, where
 *             the first put pays each page's first touch;
 *   sha256sum: the first puts against `sha256sum` (coreutils) of a file
 *             of the same bytes in the page cache, what a publisher's
 *             script checks a checkpoint with (reported; the whole bench
 *             and `put`);
 *   HOT:      weight_get of the whole TP 1 revision through the mapping,
 *             against memcpy of the same bytes on as many threads as the
 *             get's transfer threads (target >= 0.8); a one-thread memcpy
 *             is printed next to it;
 *   TCP:      the same get over the node's data server, against a raw
 *             loopback TCP transfer of the same bytes (target >= 0.7);
 *   TP4->TP2: weight_get of rank 0 of a TP 2 split (dim 0) of the TP 4
 *             revision, against memcpy of that rank's bytes, threads as for
 *             HOT (target >= 0.7);
 *   COLD:     the TP 1 revision migrated to COLD, its cold files dropped
 *             from the page cache, then weight_get of it (served from the
 *             cold files by the node), against a plain read() of a file of
 *             the same bytes, written, synced and dropped from the page
 *             cache the same way (posix_fadvise DONTNEED; target >= 0.7);
 *             with the CPU per GiB of the client and of the master (its
 *             embedded node serves the files).
 *
 * Each HOT/TCP/TP4->TP2 figure is the best of five runs after one warm-up
 * get (which maps the segment once per store, as a long-lived loader
 * would); the first get is printed too, and the CPU time of this process
 * per GiB got (mean of the five, and the first's: on a shared machine it
 * moves less than wall time). The gets use WEIGHT_OPT_THREADS transfer threads: the
 * default (the cores, at most 4), or $WM_BENCH_THREADS, which sets the
 * memcpy baseline's threads too. The puts are one run each; COLD is three
 * rounds, raw read and get taking turns, and the round of the median ratio
 * is reported (cold_gets says why not the best of each).
 * Destination buffers are touched beforehand, so page faults on them count
 * for neither side. weight_get verifies every chunk it reads (XXH3) before
 * scattering it; every get is compared with the source bytes once. The
 * puts also print the CPU time of the whole client process per GiB next to
 * the SHA-256's, and the master's (whose embedded node receives the TCP
 * put): on a shared machine that ratio moves less than wall time.
 * The node runs with node.segment_prefault (WM_BENCH_PREFAULT=0: without).
 * Usage:
 *   bench_weight_get [GIB] [DATA_DIR] [put|get|cold]
 * (`put`: the two puts only, for a profile or a quick comparison; `get`:
 * both revisions put co-located, then the HOT and TP4->TP2 gets only, the
 * node without node.segment_prefault unless WM_BENCH_PREFAULT=1; `cold`:
 * the TP 1 put, then COLD only)
 * (the master's data_dir and the raw file go under DATA_DIR, default /tmp;
 * the segment under $WM_BENCH_SHM, default /dev/shm; memory needed: about
 * 4 x GIB). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench_clock.h"
#include "bench_summary.h"
#include "harness.h"
#include "node_segment.h"
#include "weightclient.h"

#define TENSOR_ROWS 4096ull
#define TENSOR_COLS 8192ull /* BF16: 64 MiB per tensor */
#define GIB ((double)(1ull << 30))

/* CPU seconds (user + system) and minor page faults of a process. */
typedef struct usage {
    double cpu;
    double faults;
} usage;

/* This process's usage, all threads. */
static usage self_usage(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (usage){bench_rusage_s(RUSAGE_SELF), (double)ru.ru_minflt};
}

/* Process pid's usage, from /proc ({-1, -1} when unknown). */
static usage proc_usage(pid_t pid)
{
    char path[64], buf[1024];
    unsigned long long flt = 0, ut = 0, st = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return (usage){-1, -1};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command may hold spaces */
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %llu %*u %*u %*u %llu %llu", &flt,
                            &ut, &st) != 3)
        return (usage){-1, -1};
    return (usage){(double)(ut + st) / (double)sysconf(_SC_CLK_TCK), (double)flt};
}

static usage usage_since(usage now, usage then)
{
    return (usage){now.cpu - then.cpu, now.faults - then.faults};
}

typedef struct bench {
    size_t n_tensors;
    uint64_t tensor_bytes;
    uint64_t total;
    uint8_t *src;        /* all tensors back to back */
    uint8_t *dst;        /* the get's buffers, back to back */
    char (*names)[32];
    uint32_t tp, rank;   /* the get's placement */
    int raw_written;     /* the raw file holds src (written for sha256sum) */
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

/* Remove revision rev (generation 1) and wait until the master holds no
 * more than `left` bytes of memory replicas (its ranges freed for the next
 * put, first fit), up to 120 s. 0, or -1 with the cause on stderr. */
static int remove_and_wait(weight_store *s, const hx_master *m, const char *rev, uint64_t left)
{
    weight_identity id;
    weight_metadata md;
    weight_identity_set(&id, NULL, "bench", "model", rev, 1);
    int rc = weight_get_metadata(s, &id, &md, NULL);
    if (rc == 0) rc = weight_remove(s, &id, md.metadata_generation, NULL);
    if (rc != 0) {
        fprintf(stderr, "bench: remove %s: %s: %s\n", rev, weight_error_name(rc),
                weight_store_last_error(s));
        return -1;
    }
    for (int i = 0; i < 1200; i++) {
        double used = hx_metric(m, "store_memory_used_bytes");
        if (used >= 0 && used <= (double)left) return 0;
        usleep(100 * 1000);
    }
    fprintf(stderr, "bench: %s's memory was not freed within 120 s\n", rev);
    return -1;
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

/* Seconds of one weight_get, or -1; *st its statistics. */
static double timed_get_stats(weight_store *s, bench *b, const char *rev, uint32_t tp,
                              uint32_t rank, weight_get_stats *st)
{
    weight_identity id;
    weight_identity_set(&id, NULL, "bench", "model", rev, 1);
    b->tp = tp;
    b->rank = rank;
    weight_placement pl = {place, b};
    weight_bindings bd = {NULL, 0, provide, b};
    double t0 = bench_now_s();
    int rc = weight_get(s, &id, &pl, &bd, st);
    double dt = bench_now_s() - t0;
    if (rc != 0) {
        fprintf(stderr, "weight_get %s: %s: %s\n", rev, weight_error_name(rc),
                weight_store_last_error(s));
        return -1;
    }
    return dt;
}

/* Seconds of one weight_get, or -1; *bytes the bytes it got. */
static double timed_get(weight_store *s, bench *b, const char *rev, uint32_t tp, uint32_t rank,
                        uint64_t *bytes)
{
    weight_get_stats st;
    double dt = timed_get_stats(s, b, rev, tp, rank, &st);
    *bytes = st.bytes;
    return dt;
}

/* One thread's share of a memcpy baseline. */
typedef struct copy_part {
    uint8_t *dst;
    const uint8_t *src;
    uint64_t bytes;
} copy_part;

static void *copy_part_main(void *arg)
{
    copy_part *c = arg;
    memcpy(c->dst, c->src, c->bytes);
    return NULL;
}

/* Seconds of copying bytes from src to dst with memcpy on `threads`
 * threads (this one and threads - 1 more), each a contiguous share cut at
 * 1 MiB: the baseline of a weight_get that uses as many transfer threads. */
static double timed_memcpy(uint8_t *dst, const uint8_t *src, uint64_t bytes, unsigned threads)
{
    pthread_t th[64];
    copy_part parts[64];
    uint64_t share = (bytes / threads + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);
    unsigned n = 0;
    double t0 = bench_now_s();
    for (uint64_t off = 0; off < bytes && n < threads && n < 64; n++, off += share)
        parts[n] = (copy_part){dst + off, src + off, bytes - off < share ? bytes - off : share};
    unsigned started = 1;
    for (; started < n; started++)
        if (pthread_create(&th[started], NULL, copy_part_main, &parts[started]) != 0) break;
    for (unsigned i = started; i < n; i++) copy_part_main(&parts[i]); /* not started: here */
    copy_part_main(&parts[0]);
    for (unsigned i = 1; i < started; i++) pthread_join(th[i], NULL);
    return bench_now_s() - t0;
}

/* 0 when dst holds rank `rank` of a TP `tp` split (dim 0) of every tensor. */
static int check_bytes(const bench *b, uint32_t tp, uint32_t rank)
{
    uint64_t part = b->tensor_bytes / tp;
    for (size_t i = 0; i < b->n_tensors; i++)
        if (memcmp(b->dst + i * part, b->src + i * b->tensor_bytes + rank * part, part) != 0) {
            fprintf(stderr, "bench: bytes of tensor %zu differ after a TP%u get\n", i, tp);
            return -1;
        }
    return 0;
}

/* -- baselines ---------------------------------------------------------------- */

/* Seconds of one core's SHA-256 (OpenSSL) over bytes: the work weight_put
 * cannot avoid, whatever it overlaps it with. *cpu: its CPU seconds; md:
 * the digest. */
static double timed_sha256(const uint8_t *src, uint64_t bytes, double *cpu, unsigned char md[32])
{
    double c0 = bench_rusage_s(RUSAGE_SELF), t0 = bench_now_s();
    hx_sha256(src, bytes, md);
    double dt = bench_now_s() - t0;
    *cpu = bench_rusage_s(RUSAGE_SELF) - c0;
    return dt;
}

/* The sending side of the raw socket baseline: accept one connection on
 * the listening socket and send the bytes. */
typedef struct raw_sender {
    int ls;
    const uint8_t *src;
    uint64_t bytes;
} raw_sender;

static void *raw_send_main(void *arg)
{
    raw_sender *r = arg;
    int cs = accept(r->ls, NULL, NULL);
    for (uint64_t off = 0; cs >= 0 && off < r->bytes;) {
        ssize_t n = send(cs, r->src + off, r->bytes - off, MSG_NOSIGNAL);
        if (n <= 0) break;
        off += (uint64_t)n;
    }
    if (cs >= 0) close(cs);
    return NULL;
}

/* Seconds of sending bytes from src over a loopback TCP connection (a
 * thread of this process sends, this one receives into dst): what the TCP
 * get's bytes cost the kernel at the least. -1 on failure. */
static double timed_raw_socket(const uint8_t *src, uint8_t *dst, uint64_t bytes)
{
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    raw_sender r = {socket(AF_INET, SOCK_STREAM, 0), src, bytes};
    pthread_t th;
    int c = -1;
    double t = -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (r.ls < 0 || bind(r.ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(r.ls, 1) < 0 ||
        getsockname(r.ls, (struct sockaddr *)&a, &al) < 0 ||
        pthread_create(&th, NULL, raw_send_main, &r) != 0) {
        perror("bench: raw socket");
        if (r.ls >= 0) close(r.ls);
        return -1;
    }
    double t0 = bench_now_s();
    if ((c = socket(AF_INET, SOCK_STREAM, 0)) >= 0 &&
        connect(c, (struct sockaddr *)&a, sizeof a) == 0) {
        uint64_t off = 0;
        while (off < bytes) {
            ssize_t n = recv(c, dst + off, bytes - off, MSG_WAITALL);
            if (n <= 0) break;
            off += (uint64_t)n;
        }
        if (off == bytes) t = bench_now_s() - t0;
    }
    if (c >= 0) close(c);
    else shutdown(r.ls, SHUT_RDWR); /* the sender's accept returns */
    pthread_join(th, NULL);
    close(r.ls);
    return t;
}

/* Drop the page cache of one file (its dirty pages written first). */
static void drop_file_cache(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

/* Drop the page cache of every file in dir (not recursive). */
static void drop_dir_cache(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[1024];
    if (d == NULL) return;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        drop_file_cache(path);
    }
    closedir(d);
}

/* Write src to path and sync it (the raw read's file). 0 or -1. */
static int write_raw_file(const char *path, const uint8_t *src, uint64_t bytes)
{
    const uint64_t piece = 8ull << 20;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        fprintf(stderr, "bench: %s: %s\n", path, strerror(errno));
        return -1;
    }
    for (uint64_t off = 0; off < bytes;) {
        ssize_t n = write(fd, src + off, bytes - off < piece ? bytes - off : piece);
        if (n <= 0) {
            close(fd);
            return -1;
        }
        off += (uint64_t)n;
    }
    int rc = fdatasync(fd);
    close(fd);
    return rc < 0 ? -1 : 0;
}

/* Seconds of `sha256sum` (coreutils, one process) over path, a file of
 * the bytes whose SHA-256 is md (written by write_raw_file, so in the page
 * cache): what a publisher checking a file with the command-line tool
 * pays. -1 when the tool cannot run or prints another digest. */
static double timed_sha256sum(const char *path, const unsigned char md[32])
{
    char cmd[700], line[160], hex[65];
    if (strchr(path, '\'') != NULL) return -1;
    snprintf(cmd, sizeof cmd, "sha256sum -- '%s'", path);
    double t0 = bench_now_s();
    FILE *p = popen(cmd, "r");
    if (p == NULL) return -1;
    int got = fgets(line, sizeof line, p) != NULL;
    int rc = pclose(p);
    double dt = bench_now_s() - t0;
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    if (!got || rc != 0 || strncmp(line, hex, 64) != 0) {
        fprintf(stderr, "bench: sha256sum %s: %s\n", path, got ? "another digest" : "no output");
        return -1;
    }
    return dt;
}

/* Drop path (written by write_raw_file) from the page cache and return the
 * seconds of reading it into dst with read() in 8 MiB calls (what a loader
 * reading the same bytes from disk does at the least). -1 on failure. */
static double timed_raw_read(const char *path, uint8_t *dst, uint64_t bytes)
{
    const uint64_t piece = 8ull << 20;
    double t = -1;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, "bench: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) goto close_fd;
    double t0 = bench_now_s();
    uint64_t off = 0;
    while (off < bytes) {
        ssize_t n = read(fd, dst + off, bytes - off < piece ? bytes - off : piece);
        if (n <= 0) break;
        off += (uint64_t)n;
    }
    if (off == bytes) t = bench_now_s() - t0;
close_fd:
    close(fd);
    return t;
}

/* -- reporting ---------------------------------------------------------------- */

static void report_put(const char *what, double put_s, usage client, usage master, double sha_s,
                       double sha_cpu, double copy_s, uint64_t bytes)
{
    double gib = (double)bytes / GIB;
    printf("weight_put %-10s %5.2f GiB: %.2f GiB/s   SHA-256 of the same bytes on one core %.2f "
           "GiB/s (x%.2f)   memcpy %.2f GiB/s   CPU %.2f s/GiB (SHA-256 %.2f s/GiB, master %.2f "
           "s/GiB)   page faults per GiB: client %.0f, master %.0f\n",
           what, gib, gib / put_s, gib / sha_s, sha_s / put_s, gib / copy_s, client.cpu / gib,
           sha_cpu / gib, master.cpu / gib, client.faults / gib, master.faults / gib);
    char w[64], f1[48], f2[96];
    bench_summary(bench_fmt(w, sizeof w, "weight_put %s, %.2f GiB", what, gib),
                  bench_fmt(f1, sizeof f1, "%.2f GiB/s", gib / put_s),
                  bench_fmt(f2, sizeof f2, "one core's SHA-256 %.2f GiB/s", gib / sha_s),
                  sha_s / put_s, ">= 0.9x");
}

/* What a put is compared with: one core's SHA-256 of the same bytes (its
 * wall and CPU seconds) and a one-thread memcpy of them. */
typedef struct put_base {
    double sha_s, sha_cpu, copy_s;
} put_base;

/* One put as measured: its wall seconds, and the CPU and page faults of
 * this process and of the master over it. */
typedef struct put_run {
    const char *what;
    double put_s;
    usage client, master;
} put_run;

/* publish() timed into *run. Its code. */
static int timed_put(weight_store *s, const hx_master *m, bench *b, const char *rev, uint32_t tp,
                     put_run *run)
{
    usage c0 = self_usage(), n0 = proc_usage(m->pid);
    double t0 = bench_now_s();
    int rc = publish(s, b, rev, tp);
    run->put_s = bench_now_s() - t0;
    run->client = usage_since(self_usage(), c0);
    run->master = usage_since(proc_usage(m->pid), n0);
    return rc;
}

/* Take SHA-256 once more after the puts it is held against, keeping the
 * faster reading: right after the program before it freed its gigabytes,
 * a reading on this guest ran at half the rate of the next one. */
static void sha_again(put_base *base, const bench *b)
{
    unsigned char md[32];
    double cpu, sha_s = timed_sha256(b->src, b->total, &cpu, md);
    if (sha_s < base->sha_s) {
        base->sha_s = sha_s;
        base->sha_cpu = cpu;
    }
}

/* Report the first n runs against base. */
static void report_puts(const put_run *runs, int n, const put_base *base, uint64_t bytes)
{
    for (int i = 0; i < n; i++)
        report_put(runs[i].what, runs[i].put_s, runs[i].client, runs[i].master, base->sha_s,
                   base->sha_cpu, base->copy_s, bytes);
}

/* The first puts against `sha256sum` of the same bytes (sum_s seconds). */
static void report_sha256sum(double sum_s, const put_run *co, const put_run *tcp, uint64_t bytes)
{
    double gib = (double)bytes / GIB;
    printf("sha256sum of the same bytes (coreutils, the file in the page cache) %5.2f GiB: %.2f "
           "GiB/s   weight_put co-located x%.2f, TCP (TP4) x%.2f\n",
           gib, gib / sum_s, sum_s / co->put_s, sum_s / tcp->put_s);
    char w[64], f1[48], f2[96];
    bench_summary(bench_fmt(w, sizeof w, "weight_put co-located, %.2f GiB, against sha256sum", gib),
                  bench_fmt(f1, sizeof f1, "%.2f GiB/s", gib / co->put_s),
                  bench_fmt(f2, sizeof f2, "sha256sum of a file of them %.2f GiB/s", gib / sum_s),
                  sum_s / co->put_s, "reported");
}

/* One get line; cpu and first_cpu (seconds per get, < 0: not measured)
 * are printed per GiB, base1_s (< 0: none) is the one-thread memcpy next to
 * base_s. */
static void report_get(const char *what, double get_s, double first_s, double cpu,
                       double first_cpu, const char *base_name, double base_s, double base1_s,
                       uint64_t bytes, double target)
{
    double gib = (double)bytes / GIB;
    double ratio = base_s / get_s;
    char cpu_txt[64] = "", one_txt[48] = "";
    if (cpu >= 0)
        snprintf(cpu_txt, sizeof cpu_txt, " CPU %.3f s/GiB (first %.3f)", cpu / gib,
                 first_cpu / gib);
    if (base1_s > 0) snprintf(one_txt, sizeof one_txt, " (1 thread %.2f GiB/s)", gib / base1_s);
    printf("%-9s %6.2f GiB  weight_get %6.2f GiB/s (first %5.2f GiB/s)%s  %s %6.2f GiB/s%s  "
           "ratio %.2f (target %.1f) %s\n",
           what, gib, gib / get_s, gib / first_s, cpu_txt, base_name, gib / base_s, one_txt, ratio,
           target, ratio >= target ? "ok" : "BELOW");
    char w[64], f1[48], f2[48], tg[16];
    bench_summary(bench_fmt(w, sizeof w, "weight_get %s, %.2f GiB", what, gib),
                  bench_fmt(f1, sizeof f1, "%.2f GiB/s", gib / get_s),
                  bench_fmt(f2, sizeof f2, "%s %.2f GiB/s", base_name, gib / base_s), ratio,
                  bench_fmt(tg, sizeof tg, ">= %.1fx", target));
}

/* What best_gets measured. */
typedef struct gets {
    double first, best;   /* seconds of the first get and of the best after it */
    double cpu;           /* CPU seconds of this process per get after the first (mean) */
    double first_cpu;     /* CPU seconds of the first get */
    double copy, copy1;   /* best memcpy of the same bytes on `threads` threads, on one */
    uint64_t bytes;
} gets;

/* Best of `runs` gets (after the first) and of as many memcpy's of the
 * same bytes on as many threads as the get's transfer threads, and on one,
 * taking turns; each get's bytes checked once. 0 or -1. */
static int best_gets(weight_store *s, bench *b, const char *rev, uint32_t tp, int runs,
                     unsigned threads, int with_copy, gets *g)
{
    *g = (gets){.best = 1e9, .copy = 1e9, .copy1 = 1e9};
    double c0 = bench_rusage_s(RUSAGE_SELF);
    if ((g->first = timed_get(s, b, rev, tp, 0, &g->bytes)) < 0) return -1;
    g->first_cpu = bench_rusage_s(RUSAGE_SELF) - c0;
    if (check_bytes(b, tp, 0) < 0) return -1;
    for (int r = 0; r < runs; r++) {
        double c0 = bench_rusage_s(RUSAGE_SELF);
        double t = timed_get(s, b, rev, tp, 0, &g->bytes);
        if (t < 0) return -1;
        g->cpu += (bench_rusage_s(RUSAGE_SELF) - c0) / runs;
        if (t < g->best) g->best = t;
        if (!with_copy) continue;
        if ((t = timed_memcpy(b->dst, b->src, g->bytes, threads)) < g->copy) g->copy = t;
        if ((t = timed_memcpy(b->dst, b->src, g->bytes, 1)) < g->copy1) g->copy1 = t;
    }
    return 0;
}

/* Migrate rev to COLD and wait until the operation is done and the
 * revision READY. 0 or -1. */
static int migrate_cold(weight_store *s, const char *rev)
{
    weight_identity id;
    weight_metadata md;
    weight_operation op;
    weight_identity_set(&id, NULL, "bench", "model", rev, 1);
    int rc = weight_get_metadata(s, &id, &md, NULL);
    if (rc == 0) rc = weight_migrate(s, &id, WEIGHT_RES_COLD, 0, md.metadata_generation, &op);
    while (rc == 0 && op.state == 1) {
        usleep(100 * 1000);
        rc = weight_get_operation(s, op.id, &op);
    }
    if (rc != 0 || op.state != 2) {
        fprintf(stderr, "bench: migrate %s to COLD: %s: %s %s\n", rev, weight_error_name(rc),
                weight_store_last_error(s), rc == 0 ? op.error : "");
        return -1;
    }
    /* A node the master took for down on a loaded machine leaves the
     * revision DEGRADED until the repair it starts has run: wait for READY. */
    for (int i = 0; i < 1200; i++) {
        if ((rc = weight_get_metadata(s, &id, &md, NULL)) != 0) break;
        if (md.availability == WEIGHT_READY) return 0;
        usleep(100 * 1000);
    }
    fprintf(stderr, "bench: %s is %s after its migration to COLD\n", rev,
            rc == 0 ? weight_availability_name((int)md.availability) : weight_error_name(rc));
    return -1;
}

/* Set rev's migration mode to MANUAL: the master moves it no more by
 * itself (an AUTO revision got back toward preferred HOT once its cooldown
 * was over). 0 or -1. */
static int set_manual(weight_store *s, const char *rev)
{
    weight_identity id;
    weight_metadata md;
    weight_policy pol = {.mode = WEIGHT_MODE_MANUAL};
    weight_identity_set(&id, NULL, "bench", "model", rev, 1);
    int rc = weight_get_metadata(s, &id, &md, NULL);
    if (rc == 0) rc = weight_update_policy(s, &id, &pol, md.metadata_generation, NULL);
    if (rc != 0) {
        fprintf(stderr, "bench: policy of %s: %s: %s\n", rev, weight_error_name(rc),
                weight_store_last_error(s));
        return -1;
    }
    return 0;
}

#define COLD_ROUNDS 3

/* COLD: migrate tp1 to COLD, then COLD_ROUNDS times, taking turns, read
 * the raw file (written once, the same bytes) with the page cache dropped,
 * and get tp1 with its cold files dropped from the page cache. Each round
 * is a pair measured back to back; the round whose ratio is the median of
 * the rounds' is reported (its get and its raw read). The disk's rate is
 * not the guest's to hold still: on the benches' virtual disks a read the
 * guest dropped may come from the host's cache at memory speed or from the
 * device at a tenth of that, from one round to the next, so a best of each
 * side paired rounds that did not see the same disk. Then the CPU per GiB
 * of this process (the client) and of the master (whose embedded node
 * serves the cold files), the mean of the rounds. 0 or -1. */
static int cold_gets(weight_store *s, const hx_master *m, bench *b, const char *raw_path,
                     const char *cold_dir)
{
    double raw_t[COLD_ROUNDS], get_t[COLD_ROUNDS], client_cpu = 0, node_cpu = 0, raw_cpu = 0;
    const int rounds = COLD_ROUNDS;
    uint64_t bytes = 0;
    if (migrate_cold(s, "tp1") < 0) return -1;
    if (!b->raw_written && write_raw_file(raw_path, b->src, b->total) < 0) return -1;
    if (set_manual(s, "tp1") < 0) return -1; /* no move back between rounds */
    for (int r = 0; r < rounds; r++) {
        double r0 = bench_rusage_s(RUSAGE_SELF);
        if ((raw_t[r] = timed_raw_read(raw_path, b->dst, b->total)) < 0) return -1;
        raw_cpu += (bench_rusage_s(RUSAGE_SELF) - r0) / rounds;
        memset(b->dst, 1, b->total);
        drop_dir_cache(cold_dir);
        usage c0 = self_usage(), n0 = proc_usage(m->pid);
        weight_get_stats st;
        get_t[r] = timed_get_stats(s, b, "tp1", 1, 0, &st);
        usage c = usage_since(self_usage(), c0), n = usage_since(proc_usage(m->pid), n0);
        if (get_t[r] < 0 || check_bytes(b, 1, 0) < 0) return -1;
        bytes = st.bytes;
        if (st.local_bytes > 0) {
            /* a memory replica came back (the master moved the revision) */
            fprintf(stderr, "bench: the COLD get read %llu bytes from memory\n",
                    (unsigned long long)st.local_bytes);
            return -1;
        }
        printf("COLD TP1    round %d: raw read %.2f GiB/s, weight_get %.2f GiB/s, ratio %.2f\n",
               r + 1, (double)b->total / GIB / raw_t[r], (double)bytes / GIB / get_t[r],
               raw_t[r] / get_t[r]);
        client_cpu += c.cpu / rounds;
        node_cpu += n.cpu / rounds;
    }
    /* the median round: rounds / 2 of the others below it (ties by order) */
    int med = 0;
    for (int r = 0; r < rounds; r++) {
        int below = 0;
        for (int q = 0; q < rounds; q++) {
            double rq = raw_t[q] / get_t[q], rr = raw_t[r] / get_t[r];
            below += rq < rr || (rq == rr && q < r);
        }
        if (below == rounds / 2) med = r;
    }
    printf("COLD TP1    the median round of %d: round %d\n", rounds, med + 1);
    report_get("COLD TP1", get_t[med], get_t[med], -1, -1, "raw read", raw_t[med], -1, bytes, 0.7);
    double gib = (double)bytes / GIB;
    printf("COLD TP1    CPU per GiB: client %.3f s + master (node) %.3f s; raw read %.3f s "
           "(mean of %d)\n", client_cpu / gib, node_cpu / gib, raw_cpu / gib, rounds);
    return 0;
}

int main(int argc, char **argv)
{
    double gib = 4.0;
    const char *shm = getenv("WM_BENCH_SHM") ? getenv("WM_BENCH_SHM") : "/dev/shm";
    int puts_only = 0, gets_only = 0, cold_only = 0;
    /* WM_BENCH_PREFAULT=0: the node without node.segment_prefault (for a before/after) */
    int prefault = getenv("WM_BENCH_PREFAULT") == NULL || atoi(getenv("WM_BENCH_PREFAULT")) != 0;
    /* the get's transfer threads and the memcpy baseline's: weight_get's
     * default (the cores, at most 4) unless WM_BENCH_THREADS says */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned threads = cores > 0 && cores < 4 ? (unsigned)cores : 4;
    if (getenv("WM_BENCH_THREADS") && atoi(getenv("WM_BENCH_THREADS")) > 0)
        threads = (unsigned)atoi(getenv("WM_BENCH_THREADS"));
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (strcmp(argv[i], "get") == 0 && getenv("WM_BENCH_PREFAULT") == NULL) prefault = 0;
        double v = strtod(argv[i], &end);
        if (end != argv[i] && *end == '\0' && v > 0) gib = v;
        else if (strcmp(argv[i], "put") == 0) puts_only = 1;
        else if (strcmp(argv[i], "get") == 0) gets_only = 1;
        else if (strcmp(argv[i], "cold") == 0) cold_only = 1;
        else
            setenv("TMPDIR", argv[i], 1); /* run_all.sh's data directory: the master's and the raw file's */
    }
    bench b;
    hx_master m;
    char extra[1024], segdir[512], err[512], raw_path[600], cold_dir[300];
    weight_store *s = NULL, *tcp = NULL;
    int status = 1;
    memset(&b, 0, sizeof b);
    b.tensor_bytes = TENSOR_ROWS * TENSOR_COLS * 2;
    b.n_tensors = (size_t)(gib * GIB / (double)b.tensor_bytes);
    if (b.n_tensors < 1) b.n_tensors = 1;
    b.total = b.n_tensors * b.tensor_bytes;
    /* room for both revisions (`cold`: the TP 1 one only) */
    uint64_t seg_bytes = (cold_only ? 1 : 2) * b.total + (512ull << 20);

    snprintf(segdir, sizeof segdir, "%s/wm-bench-weight-get-%d", shm, (int)getpid());
    snprintf(extra, sizeof extra,
             "node:\n  segment_dir: \"%s\"\n  segment_bytes: %llu\n  segment_prefault: %s\n"
             "cluster:\n  default_weight_preferred_residency: hot\n"
             "snapshot:\n  every_records: 0\n",
             segdir, (unsigned long long)seg_bytes, prefault ? "true" : "false");
    /* The segment's directory and the raw file (in the master's directory)
     * are the run's: a run killed before its end leaves them to the next
     * test or bench's sweep (hx_sweep_leftovers), not gigabytes for good. */
    if (hx_own_new_dir(segdir) < 0) {
        fprintf(stderr, "bench: cannot make %s: %s\n", segdir, strerror(errno));
        return 1;
    }
    if (hx_init(&m, "bench-get", extra) < 0) {
        fprintf(stderr, "bench: cannot set up the master\n");
        hx_remove_dir(segdir); /* and the mark in it */
        return 1;
    }
    snprintf(raw_path, sizeof raw_path, "%s/raw-read.bin", m.dir);
    if (hx_start(&m, 60000) < 0) {
        fprintf(stderr, "bench: cannot start the master\n");
        goto stop; /* its segment may be there: removed below */
    }
    snprintf(cold_dir, sizeof cold_dir, "%s/data/cold", m.dir);
    b.src = malloc(b.total);
    b.dst = malloc(b.total);
    b.names = calloc(b.n_tensors, sizeof *b.names);
    if (b.src == NULL || b.dst == NULL || b.names == NULL) {
        fprintf(stderr, "bench: cannot allocate 2 x %llu bytes\n", (unsigned long long)b.total);
        goto stop;
    }
    for (size_t i = 0; i < b.n_tensors; i++) snprintf(b.names[i], sizeof b.names[i], "t%04zu", i);
    for (uint64_t i = 0; i < b.total; i += 8) {
        uint64_t v = i * 0x9E3779B97F4A7C15ull;
        memcpy(b.src + i, &v, 8);
    }
    memset(b.dst, 1, b.total); /* touched: no page faults in either measurement */
    if (weight_store_open(m.socket, "bench", NULL, &s, err, sizeof err) != 0 ||
        weight_store_open(m.socket, "bench", NULL, &tcp, err, sizeof err) != 0 ||
        weight_store_set_option(tcp, WEIGHT_OPT_TRANSPORT, 2) != 0 ||
        weight_store_set_option(s, WEIGHT_OPT_THREADS, threads) != 0 ||
        weight_store_set_option(tcp, WEIGHT_OPT_THREADS, threads) != 0) {
        fprintf(stderr, "bench: %s\n", err);
        goto close_store;
    }
    /* what bounds the co-located put where a fault is dear (node_segment.h) */
    char pages[96];
    (void)seg_mount_pages(NULL, segdir, pages, sizeof pages);
    printf("revision: %zu BF16 tensors [%llu, %llu], %.2f GiB; segment %s (%s); %ld cores; "
           "weight_get and memcpy on %u threads\n",
           b.n_tensors, TENSOR_ROWS, TENSOR_COLS, (double)b.total / GIB, segdir, pages, cores,
           threads);

    /* With node.segment_prefault the node touches its segment's pages once in
     * the background after its start (node_segment.h: seg_prefaulted): the
     * puts are measured after it is done. */
    for (int i = 0; prefault && i < 6000 && !hx_log_contains(&m, "bytes pre-faulted in"); i++)
        usleep(100 * 1000);
    if (prefault && !hx_log_contains(&m, "bytes pre-faulted in"))
        fprintf(stderr, "bench: the node's segment is not pre-faulted after 600 s\n");

    /* Publishing: co-located (TP 1), then over TCP (TP 4 fragments); each a
     * publisher's first revision, then (the whole bench or `put`) its next
     * one once the first is removed: the same process, the freed ranges
     * (first fit), so pages its mapping of the segment touched already. */
    put_base base;
    put_run co[2] = {{.what = "co-located"}, {.what = "again"}};
    put_run tr[2] = {{.what = "TCP (TP4)"}, {.what = "TCP again"}};
    int again = !cold_only && !gets_only, n;
    unsigned char md[32];
    base.sha_s = timed_sha256(b.src, b.total, &base.sha_cpu, md);
    /* and `sha256sum` of a file of them, what a publisher's script runs */
    b.raw_written = again && write_raw_file(raw_path, b.src, b.total) == 0;
    double sum_s = b.raw_written ? timed_sha256sum(raw_path, md) : -1;
    base.copy_s = timed_memcpy(b.dst, b.src, b.total, 1);
    int rc = timed_put(s, &m, &b, again ? "first" : "tp1", 1, &co[0]);
    n = rc == 0;
    if (rc == 0 && again && (rc = remove_and_wait(s, &m, "first", b.total / 8)) == 0 &&
        (rc = timed_put(s, &m, &b, "tp1", 1, &co[1])) == 0)
        n = 2;
    sha_again(&base, &b);
    report_puts(co, n, &base, b.total);
    if (rc == 0 && !cold_only) {
        base.sha_s = timed_sha256(b.src, b.total, &base.sha_cpu, md);
        rc = timed_put(gets_only ? s : tcp, &m, &b, again ? "first4" : "tp4", 4, &tr[0]);
        n = rc == 0 && !gets_only;
        if (rc == 0 && again &&
            (rc = remove_and_wait(tcp, &m, "first4", b.total + b.total / 8)) == 0 &&
            (rc = timed_put(tcp, &m, &b, "tp4", 4, &tr[1])) == 0)
            n = 2;
        sha_again(&base, &b);
        report_puts(tr, n, &base, b.total);
    }
    if (rc != 0) {
        fprintf(stderr, "bench: put: %s: %s %s\n", weight_error_name(rc), weight_store_last_error(s),
                weight_store_last_error(tcp));
        goto close_store;
    }
    if (sum_s > 0) report_sha256sum(sum_s, &co[0], &tr[0], b.total);
    if (puts_only) {
        status = 0;
        goto close_store;
    }

    const int runs = 5;
    double raw = 1e9;
    gets g;
    if (cold_only) goto cold;
    /* HOT co-located: the whole revision through the mapping. */
    if (best_gets(s, &b, "tp1", 1, runs, threads, 1, &g) < 0) goto close_store;
    report_get("HOT TP1", g.best, g.first, g.cpu, g.first_cpu, "memcpy", g.copy, g.copy1, g.bytes,
               0.8);

    /* TP4 -> TP2: rank 0 reads half of every tensor (two of its four fragments). */
    if (best_gets(s, &b, "tp4", 2, runs, threads, 1, &g) < 0) goto close_store;
    report_get("TP4->TP2", g.best, g.first, g.cpu, g.first_cpu, "memcpy", g.copy, g.copy1,
               g.bytes, 0.7);
    if (gets_only) {
        status = 0;
        goto close_store;
    }

    /* TCP: the same get from the node's data server. */
    if (best_gets(tcp, &b, "tp1", 1, runs, threads, 0, &g) < 0) goto close_store;
    for (int r = 0; r < runs; r++) {
        double t = timed_raw_socket(b.src, b.dst, g.bytes);
        if (t < 0) goto close_store;
        if (t < raw) raw = t;
    }
    report_get("TCP TP1", g.best, g.first, g.cpu, g.first_cpu, "raw socket", raw, -1, g.bytes, 0.7);

cold:
    /* COLD: from the node's cold files, page cache dropped, against read(). */
    if (cold_gets(s, &m, &b, raw_path, cold_dir) < 0) goto close_store;
    status = 0;
close_store:
    weight_store_close(tcp);
    weight_store_close(s);
stop:
    hx_stop(&m);
    hx_cleanup(&m); /* the raw file with the master's directory */
    hx_remove_dir(segdir);
    free(b.src);
    free(b.dst);
    free(b.names);
    return status;
}
