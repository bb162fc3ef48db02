/* harness.c -- starting, stopping and killing real masters for tests.
 *
 * See harness.h. The base config sets listen (Unix socket, admin HTTP on
 * an ephemeral port read back from the master's log, plus the caller's
 * listen_extra lines) and data_dir; when the caller's YAML has no `plugins:`
 * key the real weight_mgmt.so is loaded, and when it has no `node:` key the
 * embedded node gets a 64 MiB segment. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <openssl/sha.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "admin_https.h"
#include "harness.h"
#include "node_cold.h"
#include "rpc.pb-c.h"
#include "rpc_client.h"

#ifndef BUILD_DIR
#error "BUILD_DIR must be defined"
#endif

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

long long hx_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait up to timeout_ms for pid to exit: its wait status in *status and 0,
 * or -1 after killing it (what printed its log is the caller's). */
static int reap_within(pid_t pid, int *status, int timeout_ms)
{
    for (long long end = hx_now_ms() + timeout_ms; hx_now_ms() < end;) {
        if (waitpid(pid, status, WNOHANG) == pid) return 0;
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, status, 0);
    return -1;
}

static int write_config(hx_master *m, const char *extra)
{
    m->expect_nodes = extra && strstr(extra, "embedded: false") ? 0 : 1;
    /* A node: section of the test's replaces the one below: an embedded
     * node must then still get the test's own segment_dir, or it would use
     * the default /dev/shm/weight_mgmt, a developer's `make run`'s. */
    if (extra != NULL && strstr(extra, "node:") != NULL && m->expect_nodes &&
        strstr(extra, "segment_dir") == NULL) {
        fprintf(stderr, "harness: a node: section for an embedded node needs a segment_dir\n");
        return -1;
    }
    FILE *f = fopen(m->config, "w");
    if (f == NULL) return -1;
    fprintf(f,
            "listen:\n  tcp: \"%s\"\n  unix: \"%s\"\n  admin: \"%s\"\n%s"
            "data_dir: \"%s/data\"\n",
            m->listen_tcp, m->socket, m->listen_admin[0] ? m->listen_admin : "127.0.0.1:0",
            m->listen_extra, m->dir);
    if (extra == NULL || strstr(extra, "plugins:") == NULL)
        fprintf(f, "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n", BUILD_DIR);
    if (extra == NULL || strstr(extra, "node:") == NULL)
        fprintf(f, "node:\n  segment_dir: \"%s/shm\"\n  segment_bytes: 67108864\n", m->dir);
    if (extra) fputs(extra, f);
    return fclose(f) == 0 ? 0 : -1;
}

int hx_init(hx_master *m, const char *name, const char *extra)
{
    memset(m, 0, sizeof(*m));
    const char *tmp = getenv("TMPDIR");
    snprintf(m->dir, sizeof(m->dir), "%s/wm-%s-XXXXXX", tmp && tmp[0] ? tmp : "/tmp", name);
    hx_sweep_leftovers();
    if (mkdtemp(m->dir) == NULL) return -1;
    if (hx_own_dir(m->dir) < 0) {
        fprintf(stderr, "harness: cannot mark %s as this test's\n", m->dir);
        hx_remove_dir(m->dir);
        return -1;
    }
    snprintf(m->config, sizeof(m->config), "%s/config.yaml", m->dir);
    snprintf(m->socket, sizeof(m->socket), "%s/master.sock", m->dir);
    snprintf(m->log, sizeof(m->log), "%s/master.log", m->dir);
    return write_config(m, extra);
}

int hx_ha_yaml(const hx_master *m, const char *id, const char *etcd_endpoints,
               const char *prefix, const char *snapdir, unsigned ttl_s, char *out, size_t cap)
{
    char own[300];
    if (snapdir == NULL) {
        snprintf(own, sizeof(own), "%s/shared-snapshots", m->dir);
        snapdir = own;
    }
    int n = snprintf(out, cap,
                     "oplog:\n  backend: etcd\n"
                     "ha:\n  enabled: true\n  id: %s\n  etcd_endpoints: \"%s\"\n"
                     "  prefix: \"%s\"\n  lease_ttl_s: %u\n  advertise: \"%s\"\n"
                     "  snapshot_dir: \"%s\"\n",
                     id, etcd_endpoints, prefix, ttl_s ? ttl_s : 1,
                     m->listen_tcp[0] != '\0' ? m->listen_tcp : m->socket, snapdir);
    return n > 0 && (size_t)n < cap ? n : -1;
}

int hx_reconfigure(hx_master *m, const char *extra)
{
    return write_config(m, extra);
}

void hx_child_setup(const char *log)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        dup2(fd, 2); /* dup2 leaves FD_CLOEXEC off on 1 and 2 */
        dup2(fd, 1);
    }
    close_range(3, ~0u, 0);
}

static pid_t spawn(hx_master *m)
{
    const char *bin = m->binary != NULL ? m->binary : BUILD_DIR "/bin/store_master";
    pid_t pid = fork();
    if (pid != 0) return pid;
    hx_child_setup(m->log);
    if (m->wrap != NULL) {
        const char *argv[32];
        size_t n = 0;
        while (m->wrap[n] != NULL && n < 28) {
            argv[n] = m->wrap[n];
            n++;
        }
        argv[n++] = bin;
        argv[n++] = "--config";
        argv[n++] = m->config;
        argv[n] = NULL;
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "harness: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    execl(bin, "store_master", "--config", m->config, (char *)NULL);
    fprintf(stderr, "harness: cannot run %s: %s\n", bin, strerror(errno)); /* into the log */
    _exit(127);
}

void hx_print_log(const hx_master *m)
{
    char line[1024];
    FILE *f = fopen(m->log, "r");
    if (f == NULL) return;
    fprintf(stderr, "---- %s ----\n", m->log);
    while (fgets(line, sizeof(line), f)) fputs(line, stderr);
    fclose(f);
}

/* The admin port from the master's "serving:" line (last one in the log). */
static int read_admin_port(const hx_master *m)
{
    char line[1024];
    int port = -1;
    FILE *f = fopen(m->log, "r");
    if (f == NULL) return -1;
    while (fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, "admin port ");
        if (p && strstr(line, "serving:")) port = atoi(p + strlen("admin port "));
    }
    fclose(f);
    return port;
}

/* hx_http_get over HTTPS, trusting m->admin_ca (and presenting m->admin_cert). */
static int https_get(const hx_master *m, const char *path, char **body)
{
    hx_https_opts o = {.ca = m->admin_ca,
                       .cert = m->admin_cert[0] ? m->admin_cert : NULL,
                       .key = m->admin_key[0] ? m->admin_key : NULL};
    hx_reply r = hx_https(m->admin_port, &o, "GET", path, NULL);
    int status = r.status;
    if (status >= 0) {
        *body = r.body;
        r.body = NULL;
    }
    hx_reply_free(&r);
    return status;
}

/* A TCP socket whose reads and writes give up after 10 s: a master that
 * accepts and never answers fails the GET instead of hanging the test. */
static int http_socket(void)
{
    struct timeval tv = {10, 0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    }
    return fd;
}

int hx_http_get(const hx_master *m, const char *path, char **body)
{
    if (m->admin_ca[0] != '\0') return https_get(m, path, body);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)m->admin_port)};
    char req[512];
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    int fd = http_socket();
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (buf == NULL || fd < 0) goto fail;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        /* An HA master that restarted itself (same pid) serves admin on a
         * new ephemeral port: its newest "serving:" line says which. */
        int port = read_admin_port(m);
        if (port <= 0 || port == m->admin_port) goto fail;
        sa.sin_port = htons((uint16_t)port);
        close(fd);
        if ((fd = http_socket()) < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
            goto fail;
    }
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (write(fd, req, (size_t)n) != n) goto fail;
    for (;;) {
        if (len + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) goto fail;
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + len, cap - len - 1);
        if (r < 0) goto fail;
        if (r == 0) break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = '\0';
    int status = 0;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1) {
        free(buf);
        return -1;
    }
    char *start = strstr(buf, "\r\n\r\n");
    *body = strdup(start ? start + 4 : "");
    free(buf);
    return status;
fail:
    if (fd >= 0) close(fd);
    free(buf);
    return -1;
}

/* Where the harness reaches the master: its Unix socket, or without one
 * (socket "") its TCP port. */
static const char *endpoint_of(const hx_master *m)
{
    return m->socket[0] != '\0' ? m->socket : m->listen_tcp;
}

int hx_start(hx_master *m, int timeout_ms)
{
    char err[256];
    m->pid = spawn(m);
    if (m->pid < 0) return -1;
    for (long long end = hx_now_ms() + timeout_ms; hx_now_ms() < end;) {
        int status;
        if (waitpid(m->pid, &status, WNOHANG) == m->pid) {
            m->pid = 0;
            hx_print_log(m);
            if (WIFEXITED(status))
                fprintf(stderr, "harness: store_master exited with status %d before serving\n",
                        WEXITSTATUS(status));
            else
                fprintf(stderr, "harness: store_master died of signal %d before serving\n",
                        WTERMSIG(status));
            return -1;
        }
        kvc *c = NULL;
        if (kvc_connect(endpoint_of(m), 1000, &c, err, sizeof(err)) == 0) {
            kvc_status st;
            int rc = kvc_status_get(c, &st);
            kvc_close(c);
            /* Serving means the embedded node registered too (unless off). */
            if (rc == 0 && st.nodes < (uint32_t)m->expect_nodes) rc = -1;
            if (rc == 0) {
                m->admin_port = read_admin_port(m);
                return 0;
            }
        }
        sleep_ms(10);
    }
    hx_print_log(m);
    fprintf(stderr, "harness: store_master did not serve within %d ms; killed\n", timeout_ms);
    hx_kill(m);
    return -1;
}

int hx_spawn(hx_master *m)
{
    m->pid = spawn(m);
    if (m->pid > 0) return 0;
    m->pid = 0;
    return -1;
}

int hx_run_to_exit(hx_master *m, int timeout_ms)
{
    pid_t pid = spawn(m);
    int status = 0;
    if (reap_within(pid, &status, timeout_ms) < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int hx_wait_exit(hx_master *m, int timeout_ms)
{
    int status = 0;
    if (m->pid <= 0) return -1;
    int rc = reap_within(m->pid, &status, timeout_ms);
    m->pid = 0;
    if (rc < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int hx_alive(hx_master *m)
{
    int status;
    if (m->pid <= 0) return 0;
    if (waitpid(m->pid, &status, WNOHANG) == m->pid) {
        m->pid = 0;
        return 0;
    }
    return kill(m->pid, 0) == 0;
}

int hx_stop(hx_master *m)
{
    int status = 0;
    if (m->pid <= 0) return -1;
    kill(m->pid, SIGTERM);
    int rc = reap_within(m->pid, &status, HX_STOP_MS);
    m->pid = 0;
    if (rc < 0) {
        fprintf(stderr, "hx_stop: master did not exit within %d ms of SIGTERM; killed\n", HX_STOP_MS);
        hx_print_log(m);
        return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void hx_kill(hx_master *m)
{
    int status;
    if (m->pid <= 0) return;
    kill(m->pid, SIGKILL);
    waitpid(m->pid, &status, 0);
    m->pid = 0;
}

int hx_reads_back(kvc *c, const char *key, const void *want, size_t len)
{
    uint64_t n = 0;
    uint8_t *got = malloc(len ? len : 1);
    int rc = -1;
    if (got == NULL) return -1;
    if (kvc_get_into(c, key, got, len, &n, 1) < 0)
        fprintf(stderr, "hx_reads_back: %s: %s\n", key, kvc_error(c));
    else if (n != len || memcmp(got, want, len) != 0)
        fprintf(stderr, "hx_reads_back: %s: %llu bytes read, %s the %zu written\n", key,
                (unsigned long long)n, n == len ? "not" : "of", len);
    else
        rc = 0;
    free(got);
    return rc;
}

kvc *hx_client(const hx_master *m)
{
    char err[256];
    kvc *c = NULL;
    if (kvc_connect(endpoint_of(m), 10000, &c, err, sizeof(err)) < 0) {
        fprintf(stderr, "hx_client: %s\n", err);
        return NULL;
    }
    return c;
}

int hx_file_count(const char *path, const char *needle)
{
    size_t len = 0;
    int k = 0;
    char *text = (char *)hx_read_file(path, &len);
    if (text == NULL) return 0;
    text[len] = '\0';
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) k++;
    free(text);
    return k;
}

int hx_write_segment(const char *path, uint64_t offset, const void *data, size_t len)
{
    int fd = open(path, O_RDWR);
    ssize_t n = fd < 0 ? -1 : pwrite(fd, data, len, (off_t)offset);
    if (fd >= 0) close(fd);
    if (n == (ssize_t)len) return 0;
    fprintf(stderr, "hx_write_segment: %s at %llu: %s\n", path, (unsigned long long)offset,
            strerror(errno));
    return -1;
}

int hx_ranges_meet(const kvc_replica *w, const kvc_replica *where, size_t len)
{
    return strcmp(w->segment, where->segment) == 0 &&
           !(w->offset + len <= where->offset || w->offset >= where->offset + len);
}

/* hx_finish_handed_put (known: key's put end is taken, key reads back) and
 * hx_finish_unknown_put (key's put end is refused SMP_ENOTFOUND). */
static int hx_finish_put(kvc *c, const char *key, const kvc_replica *where, const uint8_t *a,
                         const char *other, const uint8_t *b, size_t len, int known, char *why,
                         size_t cap)
{
    kvc_replica w;
    uint8_t sha_a[32], sha_b[32];
    int rc = -1, end = 0;
    SHA256(a, len, sha_a);
    SHA256(b, len, sha_b);
    if (kvc_put_start(c, other, len, SMP_DATA_KV, NULL, 0, &w) < 0) {
        snprintf(why, cap, "put start %s: %s", other, kvc_error(c));
    } else if (hx_ranges_meet(&w, where, len)) {
        snprintf(why, cap, "%s was given [%llu, +%zu), over %s's range at %llu", other,
                 (unsigned long long)w.offset, len, key, (unsigned long long)where->offset);
    } else if (hx_write_segment(w.segment_path, w.offset, b, len) < 0 ||
               kvc_put_end(c, other, sha_b, NULL) < 0) {
        snprintf(why, cap, "writing %s: %s", other, kvc_error(c));
    } else if (hx_write_segment(where->segment_path, where->offset + len / 2, a + len / 2,
                                len - len / 2) < 0) {
        snprintf(why, cap, "the late copy of %s", key);
    } else if ((end = kvc_put_end(c, key, sha_a, NULL)) != (known ? 0 : SMP_ENOTFOUND)) {
        snprintf(why, cap, "the put end of %s: %d (%s)%s", key, end, kvc_error(c),
                 known ? "" : ", not SMP_ENOTFOUND");
    } else if (known && hx_reads_back(c, key, a, len) < 0) {
        snprintf(why, cap, "%s does not read back", key);
    } else if (hx_reads_back(c, other, b, len) < 0) {
        snprintf(why, cap, "%s does not read back", other);
    } else {
        rc = 0;
    }
    return rc;
}

int hx_finish_handed_put(kvc *c, const char *key, const kvc_replica *where, const uint8_t *a,
                         const char *other, const uint8_t *b, size_t len, char *why, size_t cap)
{
    return hx_finish_put(c, key, where, a, other, b, len, 1, why, cap);
}

int hx_finish_unknown_put(kvc *c, const char *key, const kvc_replica *where, const uint8_t *a,
                          const char *other, const uint8_t *b, size_t len, char *why,
                          size_t cap)
{
    return hx_finish_put(c, key, where, a, other, b, len, 0, why, cap);
}

double hx_metric(const hx_master *m, const char *series)
{
    char *body = NULL;
    double v = -1;
    size_t n = strlen(series);
    if (hx_http_get(m, "/metrics", &body) == 200 && body != NULL) {
        for (const char *line = body; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : "") {
            if (strncmp(line, series, n) == 0 && line[n] == ' ') {
                v = strtod(line + n + 1, NULL);
                break;
            }
        }
    }
    free(body);
    return v;
}

int hx_wait_metric(const hx_master *m, const char *series, double want, int timeout_ms)
{
    double v;
    for (long long end = hx_now_ms() + timeout_ms; (v = hx_metric(m, series)) != want; sleep_ms(50)) {
        if (hx_now_ms() > end) {
            fprintf(stderr, "hx_wait_metric: %s reads %g, not %g, after %d ms\n", series, v, want,
                    timeout_ms);
            return -1;
        }
    }
    return 0;
}

int hx_file_contains(const char *path, const char *needle)
{
    /* the whole file, however long (a log of thousands of lines) */
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    FILE *f = fopen(path, "r");
    if (f == NULL || buf == NULL) goto none;
    for (size_t k; (k = fread(buf + n, 1, cap - 1 - n, f)) > 0;) {
        n += k;
        if (n == cap - 1) {
            char *more = realloc(buf, cap * 2);
            if (more == NULL) goto none;
            buf = more;
            cap *= 2;
        }
    }
    fclose(f);
    buf[n] = '\0';
    int found = strstr(buf, needle) != NULL;
    free(buf);
    return found;
none:
    if (f != NULL) fclose(f);
    free(buf);
    return 0;
}

int hx_says(const char *text, const char *needle)
{
    if (strstr(text, needle) != NULL) return 1;
    fprintf(stderr, "'%s' does not say '%s'\n", text, needle);
    return 0;
}

int hx_log_contains(const hx_master *m, const char *needle)
{
    return hx_file_contains(m->log, needle);
}

int hx_wait_log(const hx_master *m, const char *needle, int timeout_ms)
{
    for (long long end = hx_now_ms() + timeout_ms;; sleep_ms(10)) {
        if (hx_log_contains(m, needle)) return 1;
        if (hx_now_ms() >= end) return 0;
    }
}

int hx_replace_file(const char *path, const char *text)
{
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL && fputs(text, f) >= 0;
    if (f != NULL) ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "harness: cannot replace %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

void hx_read_text(const char *path, char *text, size_t cap)
{
    FILE *fp = fopen(path, "r");
    size_t n = fp != NULL ? fread(text, 1, cap - 1, fp) : 0;
    text[n] = '\0';
    if (fp != NULL) fclose(fp);
}

unsigned long long hx_background_fsck_files(const hx_master *m, unsigned k)
{
    char *line = NULL;
    size_t cap = 0;
    unsigned seen = 0;
    unsigned long long files = 0;
    FILE *lf = fopen(m->log, "r");
    if (lf == NULL) return 0;
    while (getline(&line, &cap, lf) > 0) {
        const char *at = strstr(line, "background fsck: ended: ");
        const char *tail = at != NULL ? strstr(at, " not up), ") : NULL;
        if (tail != NULL && ++seen == k) files = strtoull(tail + strlen(" not up), "), NULL, 10);
    }
    free(line);
    fclose(lf);
    return files;
}

void hx_cleanup(hx_master *m)
{
    char cmd[400];
    hx_kill(m);
    if (m->dir[0] == '\0') return;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", m->dir);
    if (system(cmd) != 0) fprintf(stderr, "hx_cleanup: could not remove %s\n", m->dir);
}

void hx_sha256(const void *data, size_t len, unsigned char out[32])
{
    SHA256(data, len, out);
}

int hx_cold_fill(const char *dir, const char *prefix, int n, int key_bytes)
{
    cold_tier *ct = NULL;
    char err[256], key[1025];
    uint8_t data[64];
    unsigned char sha[32];
    int rc = -1;
    if (key_bytes <= 0 || key_bytes >= (int)sizeof(key)) return -1;
    if (cold_open(dir, &ct, err, sizeof(err)) != 0) {
        fprintf(stderr, "harness: cold_open %s: %s\n", dir, err);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        memset(key, 'k', (size_t)key_bytes);
        int len = snprintf(key, sizeof(key), "%s/%05d/", prefix, i);
        if (len <= 0 || len >= key_bytes) goto close;
        key[len] = 'k'; /* keep the padding after the number */
        key[key_bytes] = '\0';
        memset(data, i & 0xff, sizeof(data));
        hx_sha256(data, sizeof(data), sha);
        if (cold_persist(ct, key, data, sizeof(data), sha, 0, NULL, err, sizeof(err)) != 0) {
            fprintf(stderr, "harness: cold file %d in %s: %s\n", i, dir, err);
            goto close;
        }
    }
    rc = 0;
close:
    cold_close(ct);
    return rc;
}

uint8_t *hx_read_file(const char *path, size_t *len)
{
    uint8_t *buf = NULL;
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    if (fstat(fd, &st) != 0 || (buf = malloc((size_t)st.st_size + 1)) == NULL) goto fail;
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r <= 0) goto fail;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0'; /* text files read as strings */
    *len = got;
    return buf;
fail:
    free(buf);
    close(fd);
    return NULL;
}

/* Append "sub/name size sha256\n" for each file of dir, in name order. */
static int fingerprint_dir(const char *dir, const char *sub, char **out, size_t *len, size_t *cap)
{
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort), rc = 0;
    if (n < 0) return -1;
    for (int i = 0; i < n; i++) {
        char path[1024], hex[65];
        unsigned char sha[32];
        size_t flen = 0;
        uint8_t *buf = NULL;
        if (rc != 0 || names[i]->d_name[0] == '.') goto next;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
        if ((buf = hx_read_file(path, &flen)) == NULL) {
            rc = -1;
            goto next;
        }
        hx_sha256(buf, flen, sha);
        for (int k = 0; k < 32; k++) snprintf(hex + 2 * k, 3, "%02x", sha[k]);
        size_t need = strlen(sub) + strlen(names[i]->d_name) + 100;
        if (*len + need > *cap) {
            char *g = realloc(*out, *cap * 2 + need);
            if (g == NULL) {
                rc = -1;
                goto next;
            }
            *out = g;
            *cap = *cap * 2 + need;
        }
        *len += (size_t)snprintf(*out + *len, *cap - *len, "%s/%s %zu %s\n", sub,
                                 names[i]->d_name, flen, hex);
    next:
        free(buf);
        free(names[i]);
    }
    free(names);
    return rc;
}

char *hx_data_fingerprint(const hx_master *m)
{
    static const char *const subdirs[] = {"oplog", "snapshots"};
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    if (out == NULL) return NULL;
    out[0] = '\0';
    for (size_t s = 0; s < 2; s++) {
        char dir[512];
        snprintf(dir, sizeof(dir), "%s/data/%s", m->dir, subdirs[s]);
        if (fingerprint_dir(dir, subdirs[s], &out, &len, &cap) != 0) {
            free(out);
            return NULL;
        }
    }
    return out;
}

int hx_start_refused(hx_master *m, int timeout_ms, const char *needle, const char *also,
                     const char *never)
{
    char *before = hx_data_fingerprint(m), *after = NULL;
    int ok = 0, status = hx_run_to_exit(m, timeout_ms);
    if (before == NULL) {
        fprintf(stderr, "cannot read %s/data before the start\n", m->dir);
        goto out;
    }
    if (status != 1 || !hx_log_contains(m, needle) || (also && !hx_log_contains(m, also)) ||
        (never && hx_log_contains(m, never)) || hx_log_contains(m, "Sanitizer") ||
        hx_log_contains(m, "runtime error")) {
        hx_print_log(m);
        fprintf(stderr, "start not refused with \"%s\"%s%s%s%s (exit status %d)\n", needle,
                also ? " and " : "", also ? also : "", never ? " without " : "",
                never ? never : "", status);
        goto out;
    }
    if ((after = hx_data_fingerprint(m)) == NULL || strcmp(before, after) != 0) {
        fprintf(stderr, "the refused start changed %s/data:\nbefore\n%s\nafter\n%s\n", m->dir,
                before, after ? after : "(unreadable)");
        goto out;
    }
    ok = 1;
out:
    free(before);
    free(after);
    return ok;
}

int hx_make_certs(const char *dir)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && exec >certs.log 2>&1 && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
             "  -subj /CN=test-ca -keyout ca.key -out ca.pem && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 "
             "  -keyout server.key -out server.csr && "
             "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext && "
             "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
             "  -extfile san.ext -out server.pem && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=client "
             "  -keyout client.key -out client.csr && "
             "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
             "  -out client.pem && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
             "  -subj /CN=other-ca -keyout other.key -out other-ca.pem",
             dir);
    int rc = system(cmd);
    return WIFEXITED(rc) && WEXITSTATUS(rc) == 0 ? 0 : -1;
}

int hx_node_start(const hx_master *m, hx_node *n, const char *id, unsigned long long segment_bytes)
{
    return hx_node_start_args(m, n, id, segment_bytes, NULL);
}

int hx_node_start_args(const hx_master *m, hx_node *n, const char *id,
                       unsigned long long segment_bytes, const char *const *extra)
{
    char bytes[32];
    memset(n, 0, sizeof(*n));
    snprintf(n->id, sizeof(n->id), "%s", id);
    snprintf(n->segment_dir, sizeof(n->segment_dir), "%s/nodes", m->dir);
    snprintf(n->cold_dir, sizeof(n->cold_dir), "%s/cold-%s", m->dir, id);
    snprintf(n->log, sizeof(n->log), "%s/node-%s.log", m->dir, id);
    snprintf(bytes, sizeof(bytes), "%llu", segment_bytes);
    mkdir(n->segment_dir, 0755);
    mkdir(n->cold_dir, 0755);
    n->pid = fork();
    if (n->pid < 0) return -1;
    if (n->pid == 0) {
        hx_child_setup(n->log);
        const char *argv[32] = {"store_node",     "--master",        endpoint_of(m),
                                "--id",           id,                "--segment-dir",
                                n->segment_dir,   "--segment-bytes", bytes,
                                "--cold-dir",     n->cold_dir,       "--listen",
                                "127.0.0.1:0"};
        size_t k = 13;
        for (size_t i = 0; extra != NULL && extra[i] != NULL && i < 16; i++) argv[k++] = extra[i];
        argv[k] = NULL;
        execv(BUILD_DIR "/bin/store_node", (char *const *)argv);
        _exit(127);
    }
    return 0;
}

void hx_node_kill(hx_node *n)
{
    int status;
    if (n->pid <= 0) return;
    kill(n->pid, SIGKILL);
    waitpid(n->pid, &status, 0);
    n->pid = 0;
}

int hx_node_stop(hx_node *n)
{
    int status = 0;
    if (n->pid <= 0) return -1;
    kill(n->pid, SIGTERM);
    int rc = reap_within(n->pid, &status, HX_STOP_MS);
    n->pid = 0;
    if (rc < 0) {
        fprintf(stderr, "hx_node_stop: node %s did not exit within %d ms of SIGTERM; killed (%s)\n",
                n->id, HX_STOP_MS, n->log);
        return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int hx_wait_nodes(const hx_master *m, unsigned count, int timeout_ms)
{
    kvc *c = hx_client(m);
    int rc = -1;
    if (c == NULL) return -1;
    for (long long end = hx_now_ms() + timeout_ms; hx_now_ms() < end;) {
        kvc_status st;
        if (kvc_status_get(c, &st) == 0 && st.nodes == count) {
            rc = 0;
            break;
        }
        sleep_ms(10);
    }
    kvc_close(c);
    return rc;
}

uint8_t *hx_frame_request(uint64_t request_id, uint32_t service, uint32_t method,
                          const uint8_t *body, size_t body_len, size_t *len)
{
    RpcRequest req = RPC_REQUEST__INIT;
    req.request_id = request_id;
    req.service = service;
    req.method = method;
    req.body.data = (uint8_t *)body;
    req.body.len = body_len;
    size_t n = rpc_request__get_packed_size(&req);
    uint8_t *buf = malloc(4 + n);
    if (buf == NULL) return NULL;
    buf[0] = (uint8_t)(n >> 24);
    buf[1] = (uint8_t)(n >> 16);
    buf[2] = (uint8_t)(n >> 8);
    buf[3] = (uint8_t)n;
    rpc_request__pack(&req, buf + 4);
    *len = 4 + n;
    return buf;
}

void hx_remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char path[1024];
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

int hx_replica_probe(const hx_master *m, uint32_t method, const char *key, int *status,
                     unsigned *answer)
{
    rpcc_conn *c = NULL;
    char err[128];
    uint8_t *body = NULL;
    size_t len = 0;
    char *msg = NULL;
    int rc = -1;
    *status = -1;
    if (rpcc_connect(endpoint_of(m), NULL, &c, err, sizeof(err)) == 0 &&
        rpcc_call(c, 42, method, (const uint8_t *)key, strlen(key), status, &body, &len, &msg) == 0)
        rc = 0;
    *answer = len == 4 ? body[0] | body[1] << 8 | body[2] << 16 | (unsigned)body[3] << 24 : 0;
    free(body);
    free(msg);
    rpcc_close(c);
    return rc;
}
