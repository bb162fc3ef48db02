/* bench_data_plane.c -- the node data plane against the baselines it must
 * come close to.
 *
 * Usage: bench_data_plane [total_MiB] [cold_parent_dir] [object_MiB] [rounds] [part]
 *        (defaults: 2048, /tmp, 64, 2, all)
 *
 * part picks what runs: `all`; `remote` (the remote rows only); `tls` or
 * `tcp` (only the get over TLS, or only the plaintext get, each round and
 * nothing else after the set-up: what a profile of the get wants); `cold`
 * (the persist rows only).
 * Each get's row is followed by the CPU time the client and the node child
 * spent in it per GiB (clock_getcpuclockid); on a paravirtualised guest that
 * clock counts the process's waits for the hypervisor too, so compare it
 * between builds of one path, not between paths.
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
 *     mapping to this process (one child for every round; >= 0.7); each
 *     server, the raw sender as the data servers, first makes one untimed
 *     transfer, so that no round pays a fresh process's first one;
 *   - remote TLS get: the same reads from a second data server child whose
 *     port speaks TLS 1.3 (a self-signed P-256 certificate made with the
 *     openssl CLI in a scratch directory), against the plaintext data
 *     server's figure of the same round (>= 0.8), with the AES-GCM rate of
 *     one core (EVP, the cipher the session negotiated, 1 MiB updates over
 *     the same bytes) printed beside it: the natural ceiling of one stream;
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
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <uv.h>

#include "bench_clock.h"
#include "bench_summary.h"
#include "harness.h"
#include "node_cold.h"
#include "node_data.h"
#include "node_data_client.h"
#include "node_segment.h"
#include "seg_map.h"
#include "wc_tls.h"

typedef struct bench {
    const char *part;           /* all, remote, tls, tcp */
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

    t0 = bench_now_s();
    if (seg_map_writable(seg_path(b->seg), 1, &m, err, sizeof(err)) < 0)
        die("seg_map_writable", err);
    map_s = bench_now_s() - t0;
    for (int r = 0; r < b->rounds; r++) {
        t0 = bench_now_s();
        for (uint64_t i = 0; i < b->nobj; i++)
            memcpy(b->dst + i * b->obj, b->src + i * b->obj, obj_len(b, i));
        if (bench_now_s() - t0 < best_cp)
            best_cp = bench_now_s() - t0;
        t0 = bench_now_s();
        for (uint64_t i = 0; i < b->nobj; i++)
            if (seg_map_put(&m, i * b->obj, b->src + i * b->obj, obj_len(b, i)) < 0)
                die("seg_map_put", "out of range");
        if (bench_now_s() - t0 < best_put)
            best_put = bench_now_s() - t0;
        memset(b->dst, 0, b->total);
        t0 = bench_now_s();
        for (uint64_t i = 0; i < b->nobj; i++)
            if (seg_map_get(&m, i * b->obj, b->dst + i * b->obj, obj_len(b, i)) < 0)
                die("seg_map_get", "out of range");
        if (bench_now_s() - t0 < best_get)
            best_get = bench_now_s() - t0;
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

/* Child: serve the segment on 127.0.0.1:0 (TLS with tls, else plaintext),
 * report the port on fd, run. */
static void node_child(bench *b, int fd, SSL_CTX *tls)
{
    uv_loop_t loop;
    data_server *srv;
    data_server_options o = { .listen_tcp = "127.0.0.1:0", .keys = &g_keys, .tls = tls };
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

/* Child: accept connections on the listening socket ls, one at a time, and
 * send the whole segment through each from the mapping, until killed. */
static void raw_child(bench *b, int ls, int ready)
{
    const uint8_t *seg = seg_ptr(b->seg, 0, b->total);
    prefault_segment(b);
    if (write(ready, "r", 1) != 1)
        _exit(1);
    close(ready);
    for (;;) {
        const uint8_t *p = seg;
        uint64_t left = b->total;
        int c = accept(ls, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR)
                continue;
            _exit(1);
        }
        while (left > 0) {
            ssize_t n = send(c, p, left, MSG_NOSIGNAL);
            if (n <= 0)
                break;
            p += n;
            left -= (uint64_t)n;
        }
        close(c);
    }
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

/* Fork the raw sender child, listening on a loopback port written into *a.
 * One child serves every round: on the benches' PVM guest a sender forked
 * for each transfer moved a fifth of the bytes per second a long-lived one
 * does (0.45-0.54 against 2.3-2.8 GiB/s, whatever its send size or socket
 * buffer), which made the baseline, not the get, the figure measured. */
static pid_t raw_start(bench *b, struct sockaddr_in *a)
{
    socklen_t al = sizeof(*a);
    int ls = socket(AF_INET, SOCK_STREAM, 0), fds[2];
    char x;
    pid_t pid;
    memset(a, 0, sizeof(*a));
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (ls < 0 || bind(ls, (struct sockaddr *)a, sizeof(*a)) < 0 || listen(ls, 1) < 0 ||
        getsockname(ls, (struct sockaddr *)a, &al) < 0)
        die("raw socket", strerror(errno));
    if (pipe(fds) < 0)
        die("pipe", strerror(errno));
    pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a bench that dies leaves no server */
        close(fds[0]);
        raw_child(b, ls, fds[1]);
    }
    close(fds[1]);
    close(ls);
    if (pid < 0 || read(fds[0], &x, 1) != 1)
        die("raw child", "did not get ready");
    close(fds[0]);
    return pid;
}

/* Seconds of one transfer of the whole segment from the raw child at a
 * into this process's buffer. */
static double raw_transfer(bench *b, const struct sockaddr_in *a)
{
    int c = socket(AF_INET, SOCK_STREAM, 0);
    double t0 = bench_now_s(), t;
    if (c < 0 || connect(c, (const struct sockaddr *)a, sizeof(*a)) < 0)
        die("raw connect", strerror(errno));
    recv_exact(c, b->dst, b->total);
    t = bench_now_s() - t0;
    close(c);
    return t;
}

/* Fork a data server child (TLS with tls); its endpoint into ep. */
static pid_t start_node(bench *b, SSL_CTX *tls, char *ep, size_t cap)
{
    int fds[2], port = 0;
    pid_t pid;
    if (pipe(fds) < 0)
        die("pipe", strerror(errno));
    pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a bench that dies leaves no server */
        close(fds[0]);
        node_child(b, fds[1], tls);
    }
    close(fds[1]);
    if (read(fds[0], &port, sizeof(port)) != sizeof(port))
        die("node child", "did not report its port");
    close(fds[0]);
    snprintf(ep, cap, "127.0.0.1:%d", port);
    return pid;
}

/* The CPU seconds process pid (0: this one) has used so far. */
static double cpu_s(pid_t pid)
{
    clockid_t id = CLOCK_PROCESS_CPUTIME_ID;
    struct timespec ts;
    if ((pid != 0 && clock_getcpuclockid(pid, &id) != 0) || clock_gettime(id, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds a get spent, summed over rounds: in this process (the client)
 * and in the node child. */
typedef struct cpu_use {
    double client, node;
    int rounds;
} cpu_use;

/* Every object read over c (served by the node child pid) into b->dst,
 * checked; the seconds it took. The CPU time both processes spent in it is
 * added to *cpu. */
static double read_all(bench *b, ndc_conn *c, pid_t pid, cpu_use *cpu, const uint8_t *ticket,
                       size_t ticket_len)
{
    double t0, t, c0, n0;
    memset(b->dst, 0, b->total);
    c0 = cpu_s(0);
    n0 = cpu_s(pid);
    t0 = bench_now_s();
    for (uint64_t i = 0; i < b->nobj; i++)
        if (ndc_read(c, "bench", i * b->obj, obj_len(b, i), b->dst + i * b->obj, ticket,
                     ticket_len) < 0)
            die("ndc_read", ndc_last_error(c));
    t = bench_now_s() - t0;
    cpu->client += cpu_s(0) - c0;
    cpu->node += cpu_s(pid) - n0;
    cpu->rounds++;
    if (memcmp(b->dst, b->src, b->total) != 0)
        die("remote get", "bytes differ");
    return t;
}

/* A self-signed certificate for 127.0.0.1 and its key in a scratch
 * directory (dir, filled in); the server context from them, and a client
 * context trusting the certificate. */
static void make_tls(char *dir, size_t cap, SSL_CTX **server, SSL_CTX **client)
{
    char cmd[2048], cert[600], key[600], err[512];
    snprintf(dir, cap, "/tmp/wm-bench-tls-XXXXXX");
    if (mkdtemp(dir) == NULL)
        die("mkdtemp", strerror(errno));
    if (hx_own_dir(dir) < 0) /* a bench killed before its end leaves it to the next sweep */
        die("mark the TLS directory", strerror(errno));
    snprintf(cert, sizeof(cert), "%s/node.pem", dir);
    snprintf(key, sizeof(key), "%s/node.key", dir);
    snprintf(cmd, sizeof(cmd),
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 "
             "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout '%s' -out '%s' "
             ">'%s/openssl.log' 2>&1", key, cert, dir);
    if (system(cmd) != 0)
        die("openssl req", "cannot make a certificate (see the scratch directory's openssl.log)");
    if (data_server_tls_ctx(cert, key, NULL, server, err, sizeof(err)) < 0)
        die("server TLS context", err);
    if (wc_tls_client_ctx(cert, NULL, NULL, client, err, sizeof(err)) < 0 || *client == NULL)
        die("client TLS context", err);
}

/* One core sealing b->src with cipher (as a TLS 1.3 record layer does:
 * AEAD updates of 1 MiB): the seconds it took. */
static double aead_seconds(bench *b, const EVP_CIPHER *cipher)
{
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    static uint8_t out[(1u << 20) + 64];
    uint8_t key[32] = {1}, iv[12] = {2}, tag[16];
    int n;
    double t0 = bench_now_s();
    if (x == NULL || EVP_EncryptInit_ex(x, cipher, NULL, key, iv) != 1)
        die("EVP", "cannot set up the cipher");
    for (uint64_t off = 0; off < b->total; off += 1u << 20) {
        uint64_t len = b->total - off < (1u << 20) ? b->total - off : (1u << 20);
        if (EVP_EncryptUpdate(x, out, &n, b->src + off, (int)len) != 1)
            die("EVP", "encrypt failed");
    }
    EVP_EncryptFinal_ex(x, out, &n);
    EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_GET_TAG, 16, tag);
    EVP_CIPHER_CTX_free(x);
    return bench_now_s() - t0;
}

/* The CPU time per GiB moved of a get, client and node (see the file
 * comment for what it counts on a virtual machine). */
static void print_cpu(const char *name, const bench *b, const cpu_use *u)
{
    double gib = (double)b->total * u->rounds / (double)(1u << 30);
    printf("  %-18s CPU per GiB: client %.0f ms + node %.0f ms = %.0f ms\n", name,
           u->client * 1e3 / gib, u->node * 1e3 / gib, (u->client + u->node) * 1e3 / gib);
}

static void bench_remote(bench *b)
{
    int st;
    pid_t pid, tls_pid, raw_pid = -1;
    struct sockaddr_in raw_at;
    char ep[64], tls_ep[64], err[256], tls_dir[64];
    ndc_conn *c, *tlc;
    SSL_CTX *server_ctx = NULL, *client_ctx = NULL;
    double best_node = 1e30, best_raw = 1e30, best_tls = 1e30, best_aead = 1e30, t0;
    const char *suite = "?";
    int only_tls = strcmp(b->part, "tls") == 0, only_tcp = strcmp(b->part, "tcp") == 0;
    cpu_use cpu_plain = {0, 0, 0}, cpu_tls = {0, 0, 0};

    uint8_t ticket[TICKET_MAX_BYTES];
    size_t ticket_len = 0;
    ticket_claims tc = { .op = TICKET_OP_READ, .segment = "bench", .length = b->total,
                         .key_id = 1, .expiry_ms = ticket_now_ms() + 3600000 };
    if (ticket_keyring_init(&g_keys) < 0 ||
        ticket_mint(&g_keys.current, &tc, ticket, sizeof(ticket), &ticket_len) < 0)
        die("ticket", "cannot make a key or mint a read ticket");
    make_tls(tls_dir, sizeof(tls_dir), &server_ctx, &client_ctx);
    pid = start_node(b, NULL, ep, sizeof(ep));
    tls_pid = start_node(b, server_ctx, tls_ep, sizeof(tls_ep));
    if (!only_tls && !only_tcp) {
        raw_pid = raw_start(b, &raw_at);
        (void)raw_transfer(b, &raw_at); /* the first, untimed */
    }
    ndc_options to = { .tls = 1, .tls_ctx = client_ctx };
    if (ndc_connect(ep, NULL, &c, err, sizeof(err)) < 0)
        die("ndc_connect", err);
    if (ndc_connect(tls_ep, &to, &tlc, err, sizeof(err)) < 0)
        die("ndc_connect (TLS)", err);
    suite = ndc_tls_cipher(tlc);
    const EVP_CIPHER *cipher = strstr(suite, "AES_128") ? EVP_aes_128_gcm() : EVP_aes_256_gcm();
    /* A first, untimed read from each server, as from the raw sender: no
     * round (nor the CPU per GiB) pays a fresh process's first transfer. */
    cpu_use warm = {0, 0, 0};
    if (!only_tls) (void)read_all(b, c, pid, &warm, ticket, ticket_len);
    if (!only_tcp) (void)read_all(b, tlc, tls_pid, &warm, ticket, ticket_len);
    for (int r = 0; r < b->rounds; r++) {
        if (!only_tls && (t0 = read_all(b, c, pid, &cpu_plain, ticket, ticket_len)) < best_node)
            best_node = t0;
        if (!only_tcp && (t0 = read_all(b, tlc, tls_pid, &cpu_tls, ticket, ticket_len)) < best_tls)
            best_tls = t0;
        if (only_tls || only_tcp)
            continue;
        if ((t0 = raw_transfer(b, &raw_at)) < best_raw)
            best_raw = t0;
        if ((t0 = aead_seconds(b, cipher)) < best_aead)
            best_aead = t0;
    }
    ndc_close(c);
    ndc_close(tlc);
    kill(pid, SIGTERM);
    kill(tls_pid, SIGTERM);
    waitpid(pid, &st, 0);
    waitpid(tls_pid, &st, 0);
    if (raw_pid > 0) {
        kill(raw_pid, SIGTERM);
        waitpid(raw_pid, &st, 0);
    }
    SSL_CTX_free(server_ctx);
    SSL_CTX_free(client_ctx);
    hx_remove_dir(tls_dir); /* the certificate, its key and the run's mark */
    printf("remote TCP over 127.0.0.1 (node data servers in child processes)\n");
    if (!only_tls && !only_tcp)
        print_row("get (ndc_read)", gibps(b->total, best_node), "raw socket",
                  gibps(b->total, best_raw), 0.7);
    else if (only_tcp) /* the get alone: no baseline measured, no ratio */
        printf("  %-18s %7.2f GiB/s\n", "get (ndc_read)", gibps(b->total, best_node));
    if (!only_tls && !only_tcp)
        print_row("get over TLS", gibps(b->total, best_tls), "plain TCP get",
                  gibps(b->total, best_node), 0.8);
    else if (only_tls)
        printf("  %-18s %7.2f GiB/s\n", "get over TLS", gibps(b->total, best_tls));
    if (!only_tls)
        print_cpu("plain TCP get", b, &cpu_plain);
    if (!only_tcp)
        print_cpu("get over TLS", b, &cpu_tls);
    if (only_tls || only_tcp)
        return;
    printf("  %-18s %7.2f GiB/s   (%s, one core sealing the same bytes: the ceiling of one TLS "
           "stream; no target)\n", "AES-GCM one core", gibps(b->total, best_aead), suite);
    char f1[48];
    bench_summary("data plane: AES-GCM one core (TLS ceiling)",
                  bench_fmt(f1, sizeof(f1), "%.2f GiB/s", gibps(b->total, best_aead)), NULL, -1, NULL);
}

/* -- cold ------------------------------------------------------------------ */

static double write_fdatasync_all(bench *b)
{
    char path[1024];
    double t0 = bench_now_s(), t;
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
    t = bench_now_s() - t0;
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
    t0 = bench_now_s();
    for (uint64_t i = 0; i < b->nobj; i++) {
        snprintf(key, sizeof(key), "bench/object/%" PRIu64, i);
        if (cold_persist(ct, key, seg_ptr(b->seg, i * b->obj, obj_len(b, i)), obj_len(b, i),
                         b->sha[i], flags, names[i], err, sizeof(err)) < 0)
            die("cold_persist", err);
    }
    t = bench_now_s() - t0;
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
    b.part = argc > 5 ? argv[5] : "all";
    if (b.total == 0 || b.obj == 0 || b.rounds <= 0 ||
        (strcmp(b.part, "all") != 0 && strcmp(b.part, "remote") != 0 &&
         strcmp(b.part, "tls") != 0 && strcmp(b.part, "tcp") != 0 &&
         strcmp(b.part, "cold") != 0))
        die("usage", "bench_data_plane [total_MiB] [cold_parent_dir] [object_MiB] [rounds] "
                     "[all|remote|tls|tcp|cold]");
    b.nobj = (b.total + b.obj - 1) / b.obj;
    snprintf(b.seg_dir, sizeof(b.seg_dir), "/dev/shm/wm-bench-%d", (int)getpid());
    /* The run's (a run killed before its end leaves it to the next sweep). */
    if (hx_own_new_dir(b.seg_dir) < 0)
        die("mkdir", strerror(errno));
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

    if (strcmp(b.part, "all") == 0)
        bench_colocated(&b); /* also fills the segment with the object set */
    else
        memcpy(seg_ptr(b.seg, 0, b.total), b.src, b.total);
    if (strcmp(b.part, "cold") != 0)
        bench_remote(&b);
    if (strcmp(b.part, "all") == 0 || strcmp(b.part, "cold") == 0)
        bench_cold(&b, cold_parent);

    seg_destroy(b.seg);
    hx_remove_dir(b.seg_dir);
    free_buffer(b.src, b.total, 1024);
    free_buffer(b.dst, b.total, 3072);
    free(b.sha);
    return 0;
}
