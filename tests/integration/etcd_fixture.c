/* etcd_fixture.c -- starting, pausing, killing and removing real etcd members.
 *
 * See etcd_fixture.h. Members are spawned the way harness.c spawns masters
 * (fork, PR_SET_PDEATHSIG, output into a log file, exec), and a member is
 * "up" once a Status call through the project's own etcd client answers
 * with a leader. Fixtures that are running are remembered so an atexit
 * handler can stop them when a test ends without its cleanup. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "etcd_client.h"
#include "harness.h"
#include "etcd_fixture.h"

#define ETCD_BIN "/usr/bin/etcd"
#define LIVE_MAX 8

static etcd_fixture *g_live[LIVE_MAX];
static int g_atexit_registered;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void live_atexit(void)
{
    for (size_t i = 0; i < LIVE_MAX; i++)
        if (g_live[i] != NULL) etcd_fixture_cleanup(g_live[i]);
}

static void live_add(etcd_fixture *f)
{
    if (!g_atexit_registered) {
        atexit(live_atexit);
        g_atexit_registered = 1;
    }
    for (size_t i = 0; i < LIVE_MAX; i++) {
        if (g_live[i] == NULL) {
            g_live[i] = f;
            return;
        }
    }
}

static void live_remove(etcd_fixture *f)
{
    for (size_t i = 0; i < LIVE_MAX; i++)
        if (g_live[i] == f) g_live[i] = NULL;
}

/* Bind port 0 on 127.0.0.1 and return the socket (caller closes), with
 * *port the port the kernel chose; -1 on failure. */
static int bind_ephemeral(int *port)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

int etcd_fixture_free_port(void)
{
    int port = -1;
    int fd = bind_ephemeral(&port);
    if (fd < 0) return -1;
    close(fd);
    return port;
}

static void print_log_tail(const etcd_fixture_member *m)
{
    static char buf[1 << 16];
    FILE *f = fopen(m->log, "r");
    if (f == NULL) return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long from = size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0;
    fseek(f, from, SEEK_SET);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* the last 40 lines */
    int lines = 0;
    char *p = buf + n;
    while (p > buf && lines <= 40) {
        p--;
        if (*p == '\n') lines++;
    }
    fprintf(stderr, "---- tail of %s ----\n%s\n----\n", m->log, p);
}

static pid_t spawn_member(const etcd_fixture *f, const etcd_fixture_member *m)
{
    char client_url[96], peer_url[64], cert[320], key[320], ca[320];
    const char *argv[40];
    size_t n = 0;
    snprintf(client_url, sizeof(client_url), "%s://%s", f->certs[0] ? "https" : "http",
             m->endpoint);
    snprintf(peer_url, sizeof(peer_url), "http://127.0.0.1:%d", m->peer_port);
    snprintf(cert, sizeof(cert), "%s/server.pem", f->certs);
    snprintf(key, sizeof(key), "%s/server.key", f->certs);
    snprintf(ca, sizeof(ca), "%s/ca.pem", f->certs);
    const char *base[] = {"etcd", "--name", m->name, "--data-dir", m->data_dir,
                          "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                          "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                          "--initial-cluster", f->initial_cluster, "--initial-cluster-token",
                          f->token, "--initial-cluster-state", "new", "--heartbeat-interval", "50",
                          "--election-timeout", "500"};
    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++) argv[n++] = base[i];
    if (f->certs[0]) {
        argv[n++] = "--cert-file";
        argv[n++] = cert;
        argv[n++] = "--key-file";
        argv[n++] = key;
        if (f->client_cert_auth) {
            argv[n++] = "--trusted-ca-file";
            argv[n++] = ca;
            argv[n++] = "--client-cert-auth";
        }
    }
    char ttl[16];
    if (f->auth_token_ttl_s > 0) {
        snprintf(ttl, sizeof(ttl), "%u", f->auth_token_ttl_s);
        argv[n++] = "--auth-token-ttl";
        argv[n++] = ttl;
    }
    if (f->auth_token[0] != '\0') {
        argv[n++] = "--auth-token";
        argv[n++] = f->auth_token;
    }
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid != 0) return pid;
    hx_child_setup(m->log);
    execv(ETCD_BIN, (char *const *)argv);
    _exit(127);
}

void etcd_fixture_client_tls(const etcd_fixture *f, etcd_client_options *o)
{
    if (!f->certs[0]) return;
    o->tls_ca_pem = f->tls_pem[0];
    o->tls_cert_pem = f->tls_pem[1];
    o->tls_key_pem = f->tls_pem[2];
}

/* Make f's certificates in <dir>/certs and read what its client uses. */
static int make_certs(etcd_fixture *f)
{
    static const char *const names[3] = {"ca.pem", "client.pem", "client.key"};
    snprintf(f->certs, sizeof(f->certs), "%s/certs", f->dir);
    if (mkdir(f->certs, 0700) < 0 || hx_make_certs(f->certs) < 0) return -1;
    for (int i = 0; i < 3; i++) {
        char path[400];
        size_t len = 0;
        snprintf(path, sizeof(path), "%s/%s", f->certs, names[i]);
        if ((f->tls_pem[i] = (char *)hx_read_file(path, &len)) == NULL) return -1;
    }
    return 0;
}

/* 1 while member m runs (reaps it when it exited). */
static int member_alive(etcd_fixture_member *m)
{
    int status;
    if (m->pid <= 0) return 0;
    if (waitpid(m->pid, &status, WNOHANG) == m->pid) {
        fprintf(stderr, "etcd member %s exited (status 0x%x)\n", m->name, status);
        m->pid = 0;
        return 0;
    }
    return 1;
}

/* Wait until member i answers a Status call naming a leader. */
static int wait_member(etcd_fixture *f, size_t i, long long deadline)
{
    etcd_fixture_member *m = &f->m[i];
    etcd_client *c = NULL;
    etcd_client_options o = {.endpoints = m->endpoint, .timeout_ms = 500};
    char err[512] = "";
    etcd_fixture_client_tls(f, &o);
    int rc = -1;
    if (etcd_client_open(&o, &c, err, sizeof(err)) < 0) {
        fprintf(stderr, "etcd fixture: %s\n", err);
        return -1;
    }
    while (now_ms() < deadline) {
        etcd_member_status st;
        if (!member_alive(m)) break;
        if (etcd_member_status_get(c, m->endpoint, &st, err, sizeof(err)) == 0 &&
            st.leader_id != 0) {
            rc = 0;
            break;
        }
        sleep_ms(50);
    }
    etcd_client_close(c);
    if (rc < 0) {
        fprintf(stderr, "etcd fixture: member %s (%s) did not come up: %s\n", m->name,
                m->endpoint, err);
        print_log_tail(m);
    }
    return rc;
}

/* 1 when member m's log says a port it was given was taken first: the
 * ports are chosen by binding port 0 and closing, and until etcd binds them
 * another process's outgoing connection may take one (the same range). */
static int port_was_taken(const etcd_fixture_member *m)
{
    char line[1024];
    int taken = 0;
    FILE *f = fopen(m->log, "r");
    if (f == NULL) return 0;
    while (!taken && fgets(line, sizeof(line), f) != NULL)
        taken = strstr(line, "address already in use") != NULL;
    fclose(f);
    return taken;
}

/* One try of etcd_fixture_start; *taken is set when it failed because a
 * member's port was taken before etcd bound it. */
static int start_once(etcd_fixture *f, const char *name, size_t n, int timeout_ms, int tls,
                      int client_cert_auth, int *taken)
{
    int fds[2 * ETCD_FIXTURE_MAX_MEMBERS];
    size_t n_fds = 0;
    const char *tmp = "/tmp";

    memset(f, 0, sizeof(*f));
    if (n != 1 && n != 3) return -1;
    snprintf(f->dir, sizeof(f->dir), "%s/wm-etcd-%s-XXXXXX", tmp, name);
    hx_sweep_leftovers();
    if (mkdtemp(f->dir) == NULL) {
        fprintf(stderr, "etcd fixture: mkdtemp: %s\n", strerror(errno));
        f->dir[0] = '\0';
        return -1;
    }
    if (hx_own_dir(f->dir) < 0) {
        fprintf(stderr, "etcd fixture: cannot mark %s as this test's\n", f->dir);
        rmdir(f->dir);
        f->dir[0] = '\0';
        return -1;
    }
    live_add(f);
    f->client_cert_auth = client_cert_auth;
    if (tls && make_certs(f) < 0) {
        fprintf(stderr, "etcd fixture: cannot make the TLS certificates in %s\n", f->certs);
        goto fail;
    }
    snprintf(f->token, sizeof(f->token), "wm-%s-%d-%lld", name, (int)getpid(), now_ms());
    f->n = n;
    /* Every port is held until all are chosen, so no two are the same. */
    for (size_t i = 0; i < n; i++) {
        etcd_fixture_member *m = &f->m[i];
        snprintf(m->name, sizeof(m->name), "m%u", (unsigned)i);
        snprintf(m->data_dir, sizeof(m->data_dir), "%s/m%u.etcd", f->dir, (unsigned)i);
        snprintf(m->log, sizeof(m->log), "%s/m%u.log", f->dir, (unsigned)i);
        if ((fds[n_fds] = bind_ephemeral(&m->client_port)) < 0) goto fail;
        n_fds++;
        if ((fds[n_fds] = bind_ephemeral(&m->peer_port)) < 0) goto fail;
        n_fds++;
        snprintf(m->endpoint, sizeof(m->endpoint), "127.0.0.1:%d", m->client_port);
    }
    for (size_t i = 0; i < n_fds; i++) close(fds[i]);
    n_fds = 0;
    for (size_t i = 0; i < n; i++) {
        size_t used = strlen(f->initial_cluster), eused = strlen(f->endpoints);
        snprintf(f->initial_cluster + used, sizeof(f->initial_cluster) - used,
                 "%s%s=http://127.0.0.1:%d", i ? "," : "", f->m[i].name, f->m[i].peer_port);
        snprintf(f->endpoints + eused, sizeof(f->endpoints) - eused, "%s%s", i ? "," : "",
                 f->m[i].endpoint);
    }
    for (size_t i = 0; i < n; i++) {
        if ((f->m[i].pid = spawn_member(f, &f->m[i])) < 0) {
            f->m[i].pid = 0;
            goto fail;
        }
    }
    long long deadline = now_ms() + timeout_ms;
    for (size_t i = 0; i < n; i++)
        if (wait_member(f, i, deadline) < 0) goto fail;
    return 0;
fail:
    for (size_t i = 0; i < n_fds; i++) close(fds[i]);
    for (size_t i = 0; i < n; i++) *taken |= port_was_taken(&f->m[i]);
    etcd_fixture_cleanup(f);
    return -1;
}

/* etcd_fixture_start, with TLS when tls is set. */
static int start(etcd_fixture *f, const char *name, size_t n, int timeout_ms, int tls,
                 int client_cert_auth)
{
    for (int attempt = 1;; attempt++) {
        int taken = 0;
        if (start_once(f, name, n, timeout_ms, tls, client_cert_auth, &taken) == 0) return 0;
        if (!taken || attempt == 5) return -1;
        fprintf(stderr, "etcd fixture: a port was taken before etcd bound it; new ports\n");
    }
}

int etcd_fixture_start(etcd_fixture *f, const char *name, size_t n, int timeout_ms)
{
    return start(f, name, n, timeout_ms, 0, 0);
}

int etcd_fixture_start_tls(etcd_fixture *f, const char *name, size_t n, int timeout_ms,
                           int client_cert_auth)
{
    return start(f, name, n, timeout_ms, 1, client_cert_auth);
}

const char *etcd_fixture_endpoints(const etcd_fixture *f)
{
    return f->endpoints;
}

const char *etcd_fixture_endpoint(const etcd_fixture *f, size_t i)
{
    return i < f->n ? f->m[i].endpoint : "";
}

static int signal_member(etcd_fixture *f, size_t i, int sig)
{
    if (i >= f->n || f->m[i].pid <= 0) return -1;
    return kill(f->m[i].pid, sig) == 0 ? 0 : -1;
}

/* 1 when every thread of pid is in state T (stopped). */
static int all_threads_stopped(pid_t pid)
{
    char path[64], line[512];
    int stopped = 1, seen = 0;
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL) return 0;
    struct dirent *e;
    while (stopped && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(line, sizeof(line), "/proc/%d/task/%s/stat", (int)pid, e->d_name);
        FILE *f = fopen(line, "r");
        if (f == NULL) continue;
        if (fgets(line, sizeof(line), f) != NULL) {
            const char *paren = strrchr(line, ')'); /* the name may hold spaces */
            seen++;
            if (paren == NULL || paren[1] != ' ' || (paren[2] != 'T' && paren[2] != 't'))
                stopped = 0;
        }
        fclose(f);
    }
    closedir(d);
    return stopped && seen > 0;
}

int etcd_fixture_pause(etcd_fixture *f, size_t i)
{
    if (signal_member(f, i, SIGSTOP) < 0) return -1;
    /* kill() returns before every thread has stopped: wait (bounded) */
    for (int n = 0; n < 1000; n++) {
        if (all_threads_stopped(f->m[i].pid)) return 0;
        sleep_ms(5);
    }
    return -1;
}

int etcd_fixture_resume(etcd_fixture *f, size_t i)
{
    return signal_member(f, i, SIGCONT);
}

int etcd_fixture_kill(etcd_fixture *f, size_t i)
{
    int status;
    if (signal_member(f, i, SIGKILL) < 0) return -1;
    waitpid(f->m[i].pid, &status, 0);
    f->m[i].pid = 0;
    return 0;
}

/* Start stopped member i again on its data directory, without waiting. */
static int spawn_again(etcd_fixture *f, size_t i)
{
    if ((f->m[i].pid = spawn_member(f, &f->m[i])) < 0) {
        f->m[i].pid = 0;
        return -1;
    }
    return 0;
}

int etcd_fixture_restart(etcd_fixture *f, size_t i, int timeout_ms)
{
    if (i >= f->n || f->m[i].pid > 0 || spawn_again(f, i) < 0) return -1;
    return wait_member(f, i, now_ms() + timeout_ms);
}

int etcd_fixture_restart_all(etcd_fixture *f, int timeout_ms)
{
    long long deadline = now_ms() + timeout_ms;
    for (size_t i = 0; i < f->n; i++)
        if (f->m[i].pid <= 0 && spawn_again(f, i) < 0) return -1;
    for (size_t i = 0; i < f->n; i++)
        if (wait_member(f, i, deadline) < 0) return -1;
    return 0;
}

int etcd_fixture_etcdctl(const etcd_fixture *f, const char *as, const char *args)
{
    char eps[512] = "", tls[1024] = "", cmd[3072];
    size_t used = 0;
    for (size_t i = 0; i < f->n; i++)
        used += (size_t)snprintf(eps + used, sizeof(eps) - used, "%s%s://%s", i ? "," : "",
                                 f->certs[0] ? "https" : "http", f->m[i].endpoint);
    if (f->certs[0] && f->client_cert_auth)
        snprintf(tls, sizeof(tls), "--cacert '%s/ca.pem' --cert '%s/client.pem' --key '%s/client.key'",
                 f->certs, f->certs, f->certs);
    else if (f->certs[0])
        snprintf(tls, sizeof(tls), "--cacert '%s/ca.pem'", f->certs);
    snprintf(cmd, sizeof(cmd), "ETCDCTL_API=3 etcdctl --endpoints '%s' %s %s%s%s %s >> '%s/etcdctl.log' 2>&1",
             eps, tls, as ? "--user '" : "", as ? as : "", as ? "'" : "", args, f->dir);
    return system(cmd) == 0 ? 0 : -1;
}

void etcd_fixture_cleanup(etcd_fixture *f)
{
    char cmd[400];
    for (size_t i = 0; i < f->n; i++) {
        int status;
        if (f->m[i].pid <= 0) continue;
        kill(f->m[i].pid, SIGKILL);
        waitpid(f->m[i].pid, &status, 0);
        f->m[i].pid = 0;
    }
    live_remove(f);
    for (int i = 0; i < 3; i++) {
        free(f->tls_pem[i]);
        f->tls_pem[i] = NULL;
    }
    if (f->dir[0] == '\0') return;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    if (system(cmd) != 0) fprintf(stderr, "etcd fixture: could not remove %s\n", f->dir);
    f->dir[0] = '\0';
}
