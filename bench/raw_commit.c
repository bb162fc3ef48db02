/* raw_commit.c -- a bare group-commit server (see raw_commit.h).
 *
 * One loop thread on epoll owns the connections; one writer thread owns the
 * log file. The loop appends each request it reads to the open batch; the
 * writer takes the whole batch whenever it is idle (what arrived while the
 * previous fdatasync ran), writes it with one pwrite into a preallocated
 * file, fdatasyncs, and hands the batch's callers back through an eventfd;
 * the loop then answers them. That is the master's scheme with nothing
 * else around it. The file wraps around at its end: only the cost of the
 * writes matters here, not what they hold. */
#include "raw_commit.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rpc.pb-c.h"

#define RAWC_LOG_BYTES (64u << 20) /* as the master's OpLog segment */
#define RAWC_MAX_FRAME (1u << 20)
#define RAWC_MAX_FDS 4096

/* A caller waiting for its batch: the connection (fd and the generation
 * it had, so a reused fd is not answered) and its request id. */
typedef struct rawc_waiter {
    int fd;
    uint32_t gen;
    uint64_t request_id;
} rawc_waiter;

typedef struct rawc_batch {
    uint8_t *bytes;
    size_t len, cap;
    rawc_waiter *w;
    size_t nw, capw;
} rawc_batch;

typedef struct rawc_conn {
    uint32_t gen;
    int open;
    uint8_t *in;
    size_t len, cap;
} rawc_conn;

typedef struct rawc_state {
    int log_fd, event_fd;
    rawc_counters *counters;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rawc_batch open;  /* filled by the loop */
    rawc_batch done;  /* synced, waiting for the loop to answer */
    rawc_conn conns[RAWC_MAX_FDS];
} rawc_state;

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    size_t c = *cap ? *cap : 64;
    void *np;
    if (need <= *cap) return 0;
    while (c < need) c *= 2;
    if ((np = realloc(*p, c * elem)) == NULL) return -1;
    *p = np;
    *cap = c;
    return 0;
}

/* Append src's waiters to dst (the done list). -1 out of memory. */
static int waiters_move(rawc_batch *dst, rawc_batch *src)
{
    if (grow((void **)&dst->w, &dst->capw, dst->nw + src->nw, sizeof(rawc_waiter)) < 0) return -1;
    memcpy(dst->w + dst->nw, src->w, src->nw * sizeof(rawc_waiter));
    dst->nw += src->nw;
    src->nw = 0;
    return 0;
}

/* The writer: take the open batch, write and sync it, hand it back. */
static void *rawc_writer(void *arg)
{
    rawc_state *st = arg;
    rawc_batch flight = {0};
    uint64_t off = 0, one = 1;
    for (;;) {
        rawc_batch t;
        pthread_mutex_lock(&st->mu);
        while (st->open.nw == 0) pthread_cond_wait(&st->cv, &st->mu);
        t = st->open;
        st->open = flight;
        st->open.len = 0;
        st->open.nw = 0;
        pthread_mutex_unlock(&st->mu);
        flight = t;
        if (off + flight.len > RAWC_LOG_BYTES) off = 0;
        if (pwrite(st->log_fd, flight.bytes, flight.len, (off_t)off) != (ssize_t)flight.len ||
            fdatasync(st->log_fd) < 0) {
            perror("raw_commit: log");
            _exit(1);
        }
        off += flight.len;
        st->counters->fsyncs++;
        st->counters->records += flight.nw;
        pthread_mutex_lock(&st->mu);
        if (waiters_move(&st->done, &flight) < 0) _exit(1);
        pthread_mutex_unlock(&st->mu);
        if (write(st->event_fd, &one, sizeof(one)) < 0 && errno != EAGAIN) _exit(1);
    }
    return NULL;
}

static void conn_close(rawc_state *st, int ep, int fd)
{
    rawc_conn *c = &st->conns[fd];
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
    c->open = 0;
    c->gen++;
    c->len = 0;
}

/* Answer everyone whose batch is durable. A connection whose reply does
 * not go out whole is closed (replies are tiny; the bench's clients keep
 * one request outstanding). */
static void answer_done(rawc_state *st, int ep, rawc_batch *mine)
{
    uint64_t n;
    if (read(st->event_fd, &n, sizeof(n)) < 0 && errno != EAGAIN) _exit(1);
    pthread_mutex_lock(&st->mu);
    rawc_batch t = st->done;
    st->done = *mine;
    pthread_mutex_unlock(&st->mu);
    for (size_t i = 0; i < t.nw; i++) {
        rawc_waiter *w = &t.w[i];
        rawc_conn *c = &st->conns[w->fd];
        RpcResponse resp = RPC_RESPONSE__INIT;
        uint8_t frame[64];
        size_t len;
        if (!c->open || c->gen != w->gen) continue;
        resp.request_id = w->request_id;
        len = rpc_response__pack(&resp, frame + 4);
        frame[0] = (uint8_t)(len >> 24);
        frame[1] = (uint8_t)(len >> 16);
        frame[2] = (uint8_t)(len >> 8);
        frame[3] = (uint8_t)len;
        if (write(w->fd, frame, 4 + len) != (ssize_t)(4 + len)) conn_close(st, ep, w->fd);
    }
    t.nw = 0;
    *mine = t;
}

/* Take every whole frame of c: log its request into the open batch. -1
 * when the stream is bad (the connection is then closed). */
static int conn_frames(rawc_state *st, int fd)
{
    rawc_conn *c = &st->conns[fd];
    size_t at = 0;
    int wake = 0, rc = 0;
    pthread_mutex_lock(&st->mu);
    while (c->len - at >= 4) {
        const uint8_t *p = c->in + at;
        uint32_t n = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        RpcRequest *req;
        rawc_batch *b = &st->open;
        if (n == 0 || n > RAWC_MAX_FRAME) {
            rc = -1;
            break;
        }
        if (c->len - at < 4 + (size_t)n) break;
        if ((req = rpc_request__unpack(NULL, n, p + 4)) == NULL ||
            grow((void **)&b->bytes, &b->cap, b->len + 4 + n, 1) < 0 ||
            grow((void **)&b->w, &b->capw, b->nw + 1, sizeof(rawc_waiter)) < 0) {
            if (req) rpc_request__free_unpacked(req, NULL);
            rc = -1;
            break;
        }
        memcpy(b->bytes + b->len, p, 4 + (size_t)n); /* the record: the frame */
        b->len += 4 + (size_t)n;
        b->w[b->nw++] = (rawc_waiter){fd, c->gen, req->request_id};
        wake |= b->nw == 1;
        rpc_request__free_unpacked(req, NULL);
        at += 4 + (size_t)n;
    }
    if (wake) pthread_cond_signal(&st->cv);
    pthread_mutex_unlock(&st->mu);
    memmove(c->in, c->in + at, c->len - at);
    c->len -= at;
    return rc;
}

static void conn_read(rawc_state *st, int ep, int fd)
{
    rawc_conn *c = &st->conns[fd];
    ssize_t r;
    if (grow((void **)&c->in, &c->cap, c->len + 4096, 1) < 0) {
        conn_close(st, ep, fd);
        return;
    }
    r = read(fd, c->in + c->len, c->cap - c->len);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (r <= 0) {
        conn_close(st, ep, fd);
        return;
    }
    c->len += (size_t)r;
    if (conn_frames(st, fd) < 0) conn_close(st, ep, fd);
}

/* The child: serve until killed. */
static void rawc_serve(rawc_state *st, int lfd)
{
    struct epoll_event evs[64], ev = {.events = EPOLLIN};
    rawc_batch mine = {0};
    pthread_t th;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) _exit(1);
    ev.data.fd = lfd;
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    ev.data.fd = st->event_fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, st->event_fd, &ev);
    if (pthread_create(&th, NULL, rawc_writer, st) != 0) _exit(1);
    for (;;) {
        int k = epoll_wait(ep, evs, 64, -1);
        if (k < 0 && errno != EINTR) _exit(1);
        for (int i = 0; i < k; i++) {
            int fd = evs[i].data.fd;
            if (fd == st->event_fd) {
                answer_done(st, ep, &mine);
            } else if (fd == lfd) {
                int cfd;
                while ((cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    if (cfd >= RAWC_MAX_FDS) {
                        close(cfd);
                        continue;
                    }
                    st->conns[cfd].open = 1;
                    ev.data.fd = cfd;
                    if (epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &ev) < 0) conn_close(st, ep, cfd);
                }
            } else if (st->conns[fd].open) {
                conn_read(st, ep, fd);
            }
        }
    }
}

/* Log file, eventfd and listening socket in dir (socket dir/raw.sock). */
static int rawc_open(const char *dir, rawc_state *st, int *lfd)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    char path[700];
    snprintf(path, sizeof(path), "%s/raw.log", dir);
    st->log_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (st->log_fd < 0 || posix_fallocate(st->log_fd, 0, RAWC_LOG_BYTES) != 0 ||
        fsync(st->log_fd) < 0) {
        fprintf(stderr, "raw_commit: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if ((st->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) return -1;
    /* bound and listening under a temporary name, then renamed: whoever
     * sees raw.sock can connect */
    char final[700];
    snprintf(path, sizeof(path), "%s/raw.sock.new", dir);
    snprintf(final, sizeof(final), "%s/raw.sock", dir);
    if (strlen(path) >= sizeof(a.sun_path)) {
        fprintf(stderr, "raw_commit: socket path too long: %s\n", path);
        return -1;
    }
    memcpy(a.sun_path, path, strlen(path) + 1);
    *lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (*lfd < 0 || bind(*lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(*lfd, 512) < 0 ||
        rename(path, final) < 0) {
        fprintf(stderr, "raw_commit: %s: %s\n", final, strerror(errno));
        return -1;
    }
    return 0;
}

int rawc_serve_dir(const char *dir, rawc_counters *counters)
{
    static rawc_counters none;
    rawc_state *st = calloc(1, sizeof(*st));
    int lfd = -1;
    if (st == NULL) return -1;
    st->log_fd = st->event_fd = -1;
    st->counters = counters ? counters : &none;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    if (rawc_open(dir, st, &lfd) < 0) return -1; /* the process exits: no cleanup */
    rawc_serve(st, lfd);
    return 0;
}

int rawc_start(rawc_server *s, const char *parent, const char *const *wrap)
{
    struct stat sb;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    memset(s, 0, sizeof(*s));
    if (n <= 0) {
        fprintf(stderr, "raw_commit: /proc/self/exe: %s\n", strerror(errno));
        return -1;
    }
    self[n] = '\0';
    snprintf(s->dir, sizeof(s->dir), "%s/raw-commit-XXXXXX", parent);
    if (mkdtemp(s->dir) == NULL) {
        s->dir[0] = '\0';
        fprintf(stderr, "raw_commit: mkdtemp under %s: %s\n", parent, strerror(errno));
        return -1;
    }
    snprintf(s->socket, sizeof(s->socket), "%s/raw.sock", s->dir);
    s->counters = mmap(NULL, sizeof(*s->counters), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s->counters == MAP_FAILED) {
        s->counters = NULL;
        return -1;
    }
    if ((s->pid = fork()) < 0) return -1;
    if (s->pid == 0) {
        signal(SIGTERM, SIG_DFL);
        if (wrap != NULL) {
            const char *argv[32];
            size_t k = 0;
            while (wrap[k] != NULL && k < 28) {
                argv[k] = wrap[k];
                k++;
            }
            argv[k++] = self; /* not /proc/self/exe: that would be the wrapper */
            argv[k++] = RAWC_SERVE_ARG;
            argv[k++] = s->dir;
            argv[k] = NULL;
            execvp(argv[0], (char *const *)argv);
            _exit(127);
        }
        _exit(rawc_serve_dir(s->dir, s->counters) < 0 ? 1 : 0);
    }
    for (int i = 0; i < 2400; i++) { /* up to a minute: valgrind starts slowly */
        if (stat(s->socket, &sb) == 0) return 0;
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
            s->pid = 0;
            fprintf(stderr, "raw_commit: the server exited before it listened\n");
            return -1;
        }
        usleep(25000);
    }
    fprintf(stderr, "raw_commit: the server did not listen within a minute\n");
    return -1;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void rawc_stop(rawc_server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
    if (s->dir[0] && nftw(s->dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "raw_commit: could not remove %s\n", s->dir);
    s->dir[0] = '\0';
    if (s->counters) munmap(s->counters, sizeof(*s->counters));
    s->counters = NULL;
}
