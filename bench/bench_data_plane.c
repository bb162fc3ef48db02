/* bench_data_plane.c -- the node data plane against the baselines it must
 * come close to.
 *
 * Usage: bench_data_plane [total_MiB] [cold_parent_dir] [object_MiB] [rounds]
 *        (defaults: 2048, /tmp, 64, 2)
 *
 * An object set of total_MiB in objects of object_MiB lives in one segment
 * file under /dev/shm. Printed side by side, best of `rounds`:
 *   - co-located put / get: a client maps the segment file (seg_map, page
 *     tables prefaulted; the mapping time is printed apart) and copies each
 *     object into / out of it, against a single-thread memcpy of the same
 *     bytes between two prefaulted private buffers (target ratio >= 0.8);
 *   - remote TCP get: the node's data server in a child process, the client
 *     (ndc_read of every object into a buffer) in this one, against a raw
 *     TCP transfer of the same bytes from a child process's copy of the
 *     mapping to this process (>= 0.7);
 *   - persist to cold: cold_persist of every object into a scratch directory
 *     under cold_parent_dir (write, read back, SHA-256, fsync, rename, fsync
 *     dir), against write + fdatasync of every object to its own file in the
 *     same directory (>= 0.8); and once more with COLD_VERIFY_FROM_DISK
 *     (the file's cached pages dropped and hashed again from the device),
 *     for information.
 * Scratch files are removed. Not a test: the numbers depend on the machine. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <uv.h>

#include "bench_summary.h"
#include "node_cold.h"
#include "node_data.h"
#include "node_data_client.h"
#include "node_segment.h"
#include "seg_map.h"

typedef struct bench {
    uint64_t total;
    uint64_t obj;
    uint64_t nobj;
    int rounds;
    seg_segment *seg;
    uint8_t *src;
    uint8_t *dst;
    uint8_t (*sha)[32];
    char seg_dir[256];
    char cold_dir[512];
} bench;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double gibps(uint64_t bytes, double secs)
{
    return secs > 0 ? (double)bytes / secs / (double)(1u << 30) : 0;
}

static void die(const char *what, const char *why)
{
    fprintf(stderr, "bench_data_plane: %s: %s\n", what, why);
    exit(1);
}

static uint64_t obj_len(const bench *b, uint64_t i)
{
    uint64_t off = i * b->obj;
    return b->total - off < b->obj ? b->total - off : b->obj;
}

/* A private buffer that child processes do not inherit (so a fork neither
 * copies its page tables nor makes its pages copy-on-write), starting at
 * byte skew of a page: source, destination and the segment mapping get
 * different offsets within a page, so no copy pairs two addresses 4 KiB
 * apart (4K aliasing would slow the baseline and the measured copies
 * alike, by amounts that depend on the pairing). */
static uint8_t *alloc_buffer(uint64_t len, size_t skew)
{
    void *p = mmap(NULL, (size_t)len + 4096, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        die("mmap", strerror(errno));
    (void)madvise(p, (size_t)len + 4096, MADV_DONTFORK);
    return (uint8_t *)p + skew;
}

static void free_buffer(uint8_t *p, uint64_t len, size_t skew)
{
    munmap(p - skew, (size_t)len + 4096);
}

/* Touch every page of the segment mapping, so a freshly forked process does
 * not pay its page faults inside a timed transfer. */
static void prefault_segment(bench *b)
{
    const volatile uint8_t *p = seg_ptr(b->seg, 0, b->total);
    uint8_t sum = 0;
    for (uint64_t i = 0; i < b->total; i += 4096)
        sum ^= p[i];
    (void)sum;
}

static void print_row(const char *name, double t, const char *base, double tb, double target)
{
    printf("  %-18s %7.2f GiB/s   %-16s %7.2f GiB/s   ratio %.2f (target >= %.1f)\n", name, t,
           base, tb, tb > 0 ? t / tb : 0, target);
    char what[64], f1[32], f2[64], tg[16];
    bench_summary(bench_fmt(what, sizeof(what), "data plane: %s", name),
                  bench_fmt(f1, sizeof(f1), "%.2f GiB/s", t), bench_fmt(f2, sizeof(f2), "%s %.2f GiB/s", base, tb),
                  tb > 0 ? t / tb : -1, bench_fmt(tg, sizeof(tg), ">= %.1fx", target));
}

/* -- co-located ------------------------------------------------------------ */

static void bench_colocated(bench *b)
{
    seg_map m;
    char err[256];
    double t0, best_cp = 1e30, best_put = 1e30, best_get = 1e30, map_s;

    t0 = now_s();
    if (seg_map_writable(seg_path(b->seg), 1, &m, err, sizeof(err)) < 0)
        die("seg_map_writable", err);
    map_s = now_s() - t0;
    for (int r = 0; r < b->rounds; r++) {
        t0 = now_s();
        for (uint64_t i = 0; i < b->nobj; i++)
            memcpy(b->dst + i * b->obj, b->src + i * b->obj, obj_len(b, i));
        if (now_s() - t0 < best_cp)
            best_cp = now_s() - t0;
        t0 = now_s();
        for (uint64_t i = 0; i < b->nobj; i++)
            if (seg_map_put(&m, i * b->obj, b->src + i * b->obj, obj_len(b, i)) < 0)
                die("seg_map_put", "out of range");
        if (now_s() - t0 < best_put)
            best_put = now_s() - t0;
        memset(b->dst, 0, b->total);
        t0 = now_s();
        for (uint64_t i = 0; i < b->nobj; i++)
            if (seg_map_get(&m, i * b->obj, b->dst + i * b->obj, obj_len(b, i)) < 0)
                die("seg_map_get", "out of range");
        if (now_s() - t0 < best_get)
            best_get = now_s() - t0;
        if (memcmp(b->dst, b->src, b->total) != 0)
            die("co-located get", "bytes differ");
    }
    seg_map_close(&m);
    printf("co-located (client maps %s: %.3f s to map and prefault)\n", seg_path(b->seg), map_s);
    print_row("put (mapping)", gibps(b->total, best_put), "memcpy", gibps(b->total, best_cp), 0.8);
    print_row("get (mapping)", gibps(b->total, best_get), "memcpy", gibps(b->total, best_cp), 0.8);
}

/* -- remote TCP ------------------------------------------------------------ */

/* The node's ticket keys (made before the fork: the child checks, the
 * parent mints) -- reads carry a READ ticket as every client's do. */
static ticket_keyring g_keys;

/* Child: serve the segment on 127.0.0.1:0, report the port on fd, run. */
static void node_child(bench *b, int fd)
{
    uv_loop_t loop;
    data_server *srv;
    data_server_options o = { .listen_tcp = "127.0.0.1:0", .keys = &g_keys };
    char err[256];
    int port;
    uv_loop_init(&loop);
    if (data_server_create(&loop, &o, &srv, err, sizeof(err)) < 0 ||
        data_server_add_segment(srv, b->seg) < 0 || data_server_start(srv, err, sizeof(err)) < 0)
        die("data server", err);
    port = data_server_tcp_port(srv);
    prefault_segment(b);
    if (write(fd, &port, sizeof(port)) != sizeof(port))
        _exit(1);
    close(fd);
    uv_run(&loop, UV_RUN_DEFAULT);
    _exit(0);
}

/* Child: accept one connection on the listening socket ls and send the
 * whole segment through it from the mapping. */
static void raw_child(bench *b, int ls, int ready)
{
    int c;
    const uint8_t *p = seg_ptr(b->seg, 0, b->total);
    uint64_t left = b->total;
    prefault_segment(b);
    if (write(ready, "r", 1) != 1)
        _exit(1);
    close(ready);
    c = accept(ls, NULL, NULL);
    if (c < 0)
        _exit(1);
    while (left > 0) {
        ssize_t n = send(c, p, left, MSG_NOSIGNAL);
        if (n <= 0)
            _exit(1);
        p += n;
        left -= (uint64_t)n;
    }
    close(c);
    _exit(0);
}

/* Receive exactly len bytes. */
static void recv_exact(int fd, uint8_t *p, uint64_t len)
{
    while (len > 0) {
        ssize_t n = recv(fd, p, len, MSG_WAITALL);
        if (n <= 0)
            die("raw recv", n == 0 ? "closed" : strerror(errno));
        p += n;
        len -= (uint64_t)n;
    }
}

static double raw_transfer(bench *b)
{
    struct sockaddr_in a;
    socklen_t al = sizeof(a);
    int ls = socket(AF_INET, SOCK_STREAM, 0), c, st, fds[2];
    double t0, t;
    char x;
    pid_t pid;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(ls, 1) < 0 ||
        getsockname(ls, (struct sockaddr *)&a, &al) < 0)
        die("raw socket", strerror(errno));
    if (pipe(fds) < 0)
        die("pipe", strerror(errno));
    pid = fork();
    if (pid == 0) {
        close(fds[0]);
        raw_child(b, ls, fds[1]);
    }
    close(fds[1]);
    close(ls);
    if (read(fds[0], &x, 1) != 1)
        die("raw child", "did not get ready");
    close(fds[0]);
    c = socket(AF_INET, SOCK_STREAM, 0);
    t0 = now_s();
    if (connect(c, (struct sockaddr *)&a, sizeof(a)) < 0)
        die("raw connect", strerror(errno));
    recv_exact(c, b->dst, b->total);
    t = now_s() - t0;
    close(c);
    waitpid(pid, &st, 0);
    return t;
}

static void bench_remote(bench *b)
{
    int fds[2], port = 0, st;
    pid_t pid;
    char ep[64], err[256];
    ndc_conn *c;
    double best_node = 1e30, best_raw = 1e30, t0;

    uint8_t ticket[TICKET_MAX_BYTES];
    size_t ticket_len = 0;
    ticket_claims tc = { .op = TICKET_OP_READ, .segment = "bench", .length = b->total,
                         .key_id = 1, .expiry_ms = ticket_now_ms() + 3600000 };
    if (ticket_keyring_init(&g_keys) < 0 ||
        ticket_mint(&g_keys.current, &tc, ticket, sizeof(ticket), &ticket_len) < 0)
        die("ticket", "cannot make a key or mint a read ticket");
    if (pipe(fds) < 0)
        die("pipe", strerror(errno));
    pid = fork();
    if (pid == 0) {
        close(fds[0]);
        node_child(b, fds[1]);
    }
    close(fds[1]);
    if (read(fds[0], &port, sizeof(port)) != sizeof(port))
        die("node child", "did not report its port");
    close(fds[0]);
    snprintf(ep, sizeof(ep), "127.0.0.1:%d", port);
    if (ndc_connect(ep, NULL, &c, err, sizeof(err)) < 0)
        die("ndc_connect", err);
    for (int r = 0; r < b->rounds; r++) {
        memset(b->dst, 0, b->total);
        t0 = now_s();
        for (uint64_t i = 0; i < b->nobj; i++)
            if (ndc_read(c, "bench", i * b->obj, obj_len(b, i), b->dst + i * b->obj, ticket,
                         ticket_len) < 0)
                die("ndc_read", ndc_last_error(c));
        if (now_s() - t0 < best_node)
            best_node = now_s() - t0;
        if (memcmp(b->dst, b->src, b->total) != 0)
            die("remote get", "bytes differ");
        t0 = raw_transfer(b);
        if (t0 < best_raw)
            best_raw = t0;
    }
    ndc_close(c);
    kill(pid, SIGTERM);
    waitpid(pid, &st, 0);
    printf("remote TCP over 127.0.0.1 (node data server in a child process)\n");
    print_row("get (ndc_read)", gibps(b->total, best_node), "raw socket", gibps(b->total, best_raw),
              0.7);
}

/* -- cold ------------------------------------------------------------------ */

static double write_fdatasync_all(bench *b)
{
    char path[1024];
    double t0 = now_s(), t;
    for (uint64_t i = 0; i < b->nobj; i++) {
        const uint8_t *p = seg_ptr(b->seg, i * b->obj, obj_len(b, i));
        uint64_t left = obj_len(b, i);
        int fd;
        snprintf(path, sizeof(path), "%s/baseline-%" PRIu64, b->cold_dir, i);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0)
            die(path, strerror(errno));
        while (left > 0) {
            ssize_t n = write(fd, p, left);
            if (n <= 0)
                die("baseline write", strerror(errno));
            p += n;
            left -= (uint64_t)n;
        }
        if (fdatasync(fd) < 0)
            die("fdatasync", strerror(errno));
        close(fd);
    }
    t = now_s() - t0;
    for (uint64_t i = 0; i < b->nobj; i++) {
        snprintf(path, sizeof(path), "%s/baseline-%" PRIu64, b->cold_dir, i);
        unlink(path);
    }
    return t;
}

static double persist_all(bench *b, cold_tier *ct, unsigned flags)
{
    char key[64], err[512];
    char (*names)[COLD_NAME_MAX] = calloc(b->nobj, COLD_NAME_MAX);
    double t0, t;
    if (names == NULL)
        die("persist", "out of memory");
    t0 = now_s();
    for (uint64_t i = 0; i < b->nobj; i++) {
        snprintf(key, sizeof(key), "bench/object/%" PRIu64, i);
        if (cold_persist(ct, key, seg_ptr(b->seg, i * b->obj, obj_len(b, i)), obj_len(b, i),
                         b->sha[i], flags, names[i], err, sizeof(err)) < 0)
            die("cold_persist", err);
    }
    t = now_s() - t0;
    for (uint64_t i = 0; i < b->nobj; i++)
        cold_delete(ct, names[i]);
    free(names);
    return t;
}

static void bench_cold(bench *b, const char *parent)
{
    cold_tier *ct;
    char err[256];
    double best_base = 1e30, best_persist = 1e30, t, t_disk;
    snprintf(b->cold_dir, sizeof(b->cold_dir), "%s/wm-bench-cold-%d", parent, (int)getpid());
    if (cold_open(b->cold_dir, &ct, err, sizeof(err)) < 0)
        die("cold_open", err);
    for (int r = 0; r < b->rounds; r++) {
        if ((t = write_fdatasync_all(b)) < best_base)
            best_base = t;
        if ((t = persist_all(b, ct, 0)) < best_persist)
            best_persist = t;
    }
    t_disk = persist_all(b, ct, COLD_VERIFY_FROM_DISK);
    cold_close(ct);
    rmdir(b->cold_dir);
    printf("cold tier in %s (one file per object)\n", parent);
    print_row("persist", gibps(b->total, best_persist), "write+fdatasync",
              gibps(b->total, best_base), 0.8);
    printf("  %-18s %7.2f GiB/s   (COLD_VERIFY_FROM_DISK: a second read from the device; "
           "one round, no target)\n", "persist+disk read", gibps(b->total, t_disk));
}

int main(int argc, char **argv)
{
    bench b;
    seg_options so;
    char err[256];
    const char *cold_parent = argc > 2 ? argv[2] : "/tmp";
    memset(&b, 0, sizeof(b));
    b.total = (uint64_t)(argc > 1 ? strtoull(argv[1], NULL, 10) : 2048) << 20;
    b.obj = (uint64_t)(argc > 3 ? strtoull(argv[3], NULL, 10) : 64) << 20;
    b.rounds = argc > 4 ? atoi(argv[4]) : 2;
    if (b.total == 0 || b.obj == 0 || b.rounds <= 0)
        die("usage", "bench_data_plane [total_MiB] [cold_parent_dir] [object_MiB] [rounds]");
    b.nobj = (b.total + b.obj - 1) / b.obj;
    snprintf(b.seg_dir, sizeof(b.seg_dir), "/dev/shm/wm-bench-%d", (int)getpid());
    so = (seg_options){ .dir = b.seg_dir, .id = "bench", .size = b.total, .preallocate = 1 };
    if (seg_open(&so, &b.seg, err, sizeof(err)) < 0)
        die("seg_open", err);
    b.src = alloc_buffer(b.total, 1024);
    b.dst = alloc_buffer(b.total, 3072);
    b.sha = calloc(b.nobj, 32);
    if (b.sha == NULL)
        die("malloc", "out of memory");
    for (uint64_t i = 0; i < b.total; i += 8) {
        uint64_t v = i * 0x9E3779B97F4A7C15ull;
        memcpy(b.src + i, &v, b.total - i < 8 ? b.total - i : 8);
    }
    memset(b.dst, 0, b.total);
    for (uint64_t i = 0; i < b.nobj; i++)
        EVP_Digest(b.src + i * b.obj, obj_len(&b, i), b.sha[i], NULL, EVP_sha256(), NULL);
    printf("bench_data_plane: %" PRIu64 " MiB in %" PRIu64 " objects of %" PRIu64
           " MiB, best of %d\n", b.total >> 20, b.nobj, b.obj >> 20, b.rounds);

    bench_colocated(&b); /* also fills the segment with the object set */
    bench_remote(&b);
    bench_cold(&b, cold_parent);

    seg_destroy(b.seg);
    rmdir(b.seg_dir);
    free_buffer(b.src, b.total, 1024);
    free_buffer(b.dst, b.total, 3072);
    free(b.sha);
    return 0;
}
