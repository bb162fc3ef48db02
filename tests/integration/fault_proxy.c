/* fault_proxy.c -- a loopback TCP relay whose connections a test can cut,
 * slow down or tamper with (fault_proxy.h). One thread polls the listener, a
 * wake-up pipe and both ends of every relayed connection; bytes are copied
 * as they come (throttled: a piece at a time, sleeping for its share of
 * the rate after each). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fault_proxy.h"

#define FP_PAIRS 64

struct fault_proxy {
    pthread_t thread;
    int listen_fd;
    int wake[2];
    struct sockaddr_in upstream;
    pthread_mutex_t mu;
    pthread_cond_t applied_cv;
    int cut;
    unsigned cut_asked;        /* fault_proxy_cut calls so far */
    unsigned cut_applied;      /* of them, those the thread has acted on */
    int stop;
    int pair[FP_PAIRS][2];     /* client, upstream; -1: free slot */
    unsigned conn[FP_PAIRS];   /* the pair's connection number (filter) */
    unsigned long long sent[FP_PAIRS]; /* client bytes relayed on the pair */
    unsigned accepted;
    unsigned long rate;        /* bytes a second, 0: unthrottled */
    fault_proxy_filter filter;
    void *filter_ctx;
};

static void close_pair(fault_proxy *p, int i)
{
    for (int k = 0; k < 2; k++) {
        if (p->pair[i][k] >= 0) close(p->pair[i][k]);
        p->pair[i][k] = -1;
    }
}

/* Copy what pair i's end k has to the other end (k 0: the client's bytes,
 * which the filter sees); -1 when either end is done. */
static int relay(fault_proxy *p, int i, int k)
{
    unsigned char buf[65536];
    int from = p->pair[i][k], to = p->pair[i][1 - k];
    pthread_mutex_lock(&p->mu);
    unsigned long rate = p->rate;
    fault_proxy_filter filter = p->filter;
    void *fctx = p->filter_ctx;
    pthread_mutex_unlock(&p->mu);
    size_t want = sizeof(buf);
    if (rate > 0 && rate / 20 < want) want = rate / 20 > 0 ? rate / 20 : 1; /* ~50 ms a piece */
    ssize_t n = read(from, buf, want);
    if (n <= 0) return -1;
    if (k == 0 && filter != NULL) filter(fctx, p->conn[i], p->sent[i], buf, (size_t)n);
    if (k == 0) p->sent[i] += (unsigned long long)n;
    if (rate > 0) {
        unsigned long long ns = (unsigned long long)n * 1000000000ull / rate;
        struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
    for (ssize_t off = 0; off < n;) {
        ssize_t w = write(to, buf + off, (size_t)(n - off));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        off += w;
    }
    return 0;
}

static void accept_one(fault_proxy *p, int cut)
{
    int c = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) return;
    if (cut) {
        close(c);
        return;
    }
    int u = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (u < 0 || connect(u, (struct sockaddr *)&p->upstream, sizeof(p->upstream)) < 0) {
        if (u >= 0) close(u);
        close(c);
        return;
    }
    /* Each piece goes on at once, as it came: without this, Nagle on one
     * side and a delayed ACK on the other held small writes (a TLS record
     * of gRPC's) some 40 ms, which the real link does not. */
    int one = 1;
    (void)setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    (void)setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    for (int i = 0; i < FP_PAIRS; i++) {
        if (p->pair[i][0] < 0) {
            p->pair[i][0] = c;
            p->pair[i][1] = u;
            p->conn[i] = ++p->accepted;
            p->sent[i] = 0;
            return;
        }
    }
    close(u);
    close(c);
}

static void *proxy_thread(void *arg)
{
    fault_proxy *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int cut = p->cut, stop = p->stop;
        unsigned asked = p->cut_asked;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        if (cut)
            for (int i = 0; i < FP_PAIRS; i++) close_pair(p, i);
        pthread_mutex_lock(&p->mu);
        p->cut_applied = asked;
        pthread_cond_broadcast(&p->applied_cv);
        pthread_mutex_unlock(&p->mu);
        struct pollfd fds[2 + 2 * FP_PAIRS];
        int idx[2 + 2 * FP_PAIRS], n = 0;
        fds[n] = (struct pollfd){.fd = p->wake[0], .events = POLLIN};
        idx[n++] = -1;
        fds[n] = (struct pollfd){.fd = p->listen_fd, .events = POLLIN};
        idx[n++] = -2;
        for (int i = 0; i < FP_PAIRS; i++) {
            for (int k = 0; k < 2 && p->pair[i][0] >= 0; k++) {
                fds[n] = (struct pollfd){.fd = p->pair[i][k], .events = POLLIN};
                idx[n++] = i * 2 + k;
            }
        }
        if (poll(fds, (nfds_t)n, -1) < 0 && errno != EINTR) break;
        for (int j = 0; j < n; j++) {
            if (fds[j].revents == 0) continue;
            if (idx[j] == -1) {
                char b[64];
                if (read(p->wake[0], b, sizeof(b)) < 0) { /* drained below */ }
            } else if (idx[j] == -2) {
                accept_one(p, cut);
            } else {
                int i = idx[j] / 2, k = idx[j] % 2;
                if (p->pair[i][k] >= 0 && relay(p, i, k) < 0)
                    close_pair(p, i);
            }
        }
    }
    for (int i = 0; i < FP_PAIRS; i++) close_pair(p, i);
    return NULL;
}

int fault_proxy_start(const char *upstream, fault_proxy **out, char *listen_out, size_t cap)
{
    return fault_proxy_start_at("127.0.0.1", upstream, out, listen_out, cap);
}

int fault_proxy_start_at(const char *listen_host, const char *upstream, fault_proxy **out,
                         char *listen_out, size_t cap)
{
    fault_proxy *p = calloc(1, sizeof(*p));
    const char *colon = strrchr(upstream, ':');
    char host[64];
    if (p == NULL || colon == NULL || (size_t)(colon - upstream) >= sizeof(host)) goto fail_free;
    memcpy(host, upstream, (size_t)(colon - upstream));
    host[colon - upstream] = '\0';
    p->upstream.sin_family = AF_INET;
    p->upstream.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &p->upstream.sin_addr) != 1) goto fail_free;
    for (int i = 0; i < FP_PAIRS; i++) p->pair[i][0] = p->pair[i][1] = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->applied_cv, NULL);
    p->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    if (inet_pton(AF_INET, listen_host, &sa.sin_addr) != 1) goto fail_sock;
    if (p->listen_fd < 0 || bind(p->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(p->listen_fd, 64) < 0 || getsockname(p->listen_fd, (struct sockaddr *)&sa, &len) < 0)
        goto fail_sock;
    if (p->upstream.sin_port == 0) p->upstream.sin_port = sa.sin_port; /* the same port */
    if (pipe2(p->wake, O_CLOEXEC) < 0) goto fail_sock;
    if (pthread_create(&p->thread, NULL, proxy_thread, p) != 0) goto fail_pipe;
    snprintf(listen_out, cap, "%s:%u", listen_host, (unsigned)ntohs(sa.sin_port));
    *out = p;
    return 0;
fail_pipe:
    close(p->wake[0]);
    close(p->wake[1]);
fail_sock:
    if (p->listen_fd >= 0) close(p->listen_fd);
    pthread_cond_destroy(&p->applied_cv);
    pthread_mutex_destroy(&p->mu);
fail_free:
    free(p);
    return -1;
}

static void poke(fault_proxy *p)
{
    if (write(p->wake[1], "x", 1) < 0) { /* the thread wakes on the next event anyway */ }
}

void fault_proxy_cut(fault_proxy *p, int cut)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10; /* a relay sleeps 50 ms at most: only a wedged thread waits this out */
    pthread_mutex_lock(&p->mu);
    p->cut = cut;
    unsigned asked = ++p->cut_asked;
    pthread_mutex_unlock(&p->mu);
    poke(p);
    pthread_mutex_lock(&p->mu);
    while ((int)(p->cut_applied - asked) < 0 && !p->stop &&
           pthread_cond_timedwait(&p->applied_cv, &p->mu, &until) == 0) {
    }
    pthread_mutex_unlock(&p->mu);
}

void fault_proxy_throttle(fault_proxy *p, unsigned long bytes_per_s)
{
    pthread_mutex_lock(&p->mu);
    p->rate = bytes_per_s;
    pthread_mutex_unlock(&p->mu);
}

void fault_proxy_set_filter(fault_proxy *p, fault_proxy_filter fn, void *ctx)
{
    pthread_mutex_lock(&p->mu);
    p->filter = fn;
    p->filter_ctx = ctx;
    pthread_mutex_unlock(&p->mu);
}

void fault_proxy_stop(fault_proxy *p)
{
    if (p == NULL) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_mutex_unlock(&p->mu);
    poke(p);
    pthread_join(p->thread, NULL);
    close(p->listen_fd);
    close(p->wake[0]);
    close(p->wake[1]);
    pthread_cond_destroy(&p->applied_cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
