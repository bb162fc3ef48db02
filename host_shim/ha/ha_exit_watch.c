/* ha_exit_watch.c -- a standby's idle connection to the leader, whose
 * end-of-file says the leader's process is gone (ha_exit_watch.h says why
 * that is safe to act on).
 *
 * One thread, blocked in poll() on the connection and on an eventfd that
 * ha_exit_watch_set and ha_exit_watch_stop write to. The connection carries
 * nothing: the leader's RPC server waits for a frame that never comes, and
 * the kernel closes the socket when the process exits. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ha_exit_watch.h"
#include "store_plugin.h"

#define EXIT_DIAL_MS 500         /* a connect attempt */
#define EXIT_REDIAL_MS 200       /* after a failed attempt */
#define EXIT_REFUSED_MS 1000     /* after the leader spoke and closed */

struct ha_exit_watch {
    pthread_t thread;
    pthread_mutex_t mu;
    int efd;
    ha_exit_fn on_exit;
    void *arg;
    /* Under mu: what to watch, bumped on every change. */
    int stop;
    char want_endpoint[256];
    int64_t want_lease;
    uint64_t want_gen;
    /* The thread's own. */
    int fd;
    char endpoint[256];
    int64_t lease;
    uint64_t gen;
    int reported;                /* on_exit called for this pair */
    uint64_t dial_at_ms;
};

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Split "host:port" or "[v6]:port" into host and port. 0, or -1 when the
 * endpoint is not of that form. */
static int split_endpoint(const char *ep, char *host, size_t hcap, const char **port)
{
    const char *colon = strrchr(ep, ':');
    const char *hs = ep, *he = colon;
    if (colon == NULL || colon[1] == '\0') return -1;
    if (ep[0] == '[') {
        hs = ep + 1;
        if (he == ep || he[-1] != ']') return -1;
        he--;
    }
    if (he <= hs || (size_t)(he - hs) >= hcap) return -1;
    memcpy(host, hs, (size_t)(he - hs));
    host[he - hs] = '\0';
    *port = colon + 1;
    return 0;
}

/* Connect to one address within EXIT_DIAL_MS; the socket or -1. */
static int dial_addr(const struct addrinfo *ai)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
    if (fd < 0) return -1;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) return fd;
    if (errno != EINPROGRESS) goto fail;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t len = sizeof(err);
    if (poll(&p, 1, EXIT_DIAL_MS) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0)
        goto fail;
    return fd;
fail:
    close(fd);
    return -1;
}

/* Connect to a Unix socket path; the socket or -1. */
static int dial_unix(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct addrinfo ai = {.ai_family = AF_UNIX, .ai_socktype = SOCK_STREAM,
                          .ai_addr = (struct sockaddr *)&sa, .ai_addrlen = sizeof(sa)};
    if (strlen(path) >= sizeof(sa.sun_path)) return -1;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    return dial_addr(&ai);
}

/* Connect to endpoint ("host:port", "unix:/path" or "/path"); the socket or
 * -1. */
static int dial(const char *endpoint)
{
    if (strncmp(endpoint, "unix:", 5) == 0) return dial_unix(endpoint + 5);
    if (endpoint[0] == '/') return dial_unix(endpoint);
    char host[256];
    const char *port;
    struct addrinfo hints, *res = NULL;
    int fd = -1;
    if (split_endpoint(endpoint, host, sizeof(host), &port) < 0) return -1;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    if (getaddrinfo(host, port, &hints, &res) != 0) return -1;
    for (const struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next)
        fd = dial_addr(ai);
    freeaddrinfo(res);
    return fd;
}

static void drop_connection(ha_exit_watch *w)
{
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
}

/* Take a new (endpoint, lease) from ha_exit_watch_set. Returns 1 when
 * stopping. */
static int take_target(ha_exit_watch *w)
{
    pthread_mutex_lock(&w->mu);
    int stop = w->stop;
    if (w->want_gen != w->gen) {
        drop_connection(w);
        snprintf(w->endpoint, sizeof(w->endpoint), "%s", w->want_endpoint);
        w->lease = w->want_lease;
        w->gen = w->want_gen;
        w->reported = 0;
        w->dial_at_ms = 0;
    }
    pthread_mutex_unlock(&w->mu);
    return stop;
}

/* The connection is readable: end-of-file or a reset is the process gone;
 * bytes are the leader refusing the connection (not a death). */
static void on_readable(ha_exit_watch *w)
{
    char b;
    ssize_t n = recv(w->fd, &b, 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    int gone = n == 0 || (n < 0 && errno == ECONNRESET);
    drop_connection(w);
    if (!gone) {
        w->dial_at_ms = mono_ms() + (n > 0 ? EXIT_REFUSED_MS : EXIT_REDIAL_MS);
        return;
    }
    w->reported = 1;
    w->on_exit(w->arg, w->endpoint, w->lease);
}

static void *exit_thread(void *arg)
{
    ha_exit_watch *w = arg;
    while (!take_target(w)) {
        int watching = w->endpoint[0] != '\0' && w->lease != 0 && !w->reported;
        int timeout = -1;
        if (watching && w->fd < 0) {
            uint64_t now = mono_ms();
            if (now >= w->dial_at_ms) {
                w->fd = dial(w->endpoint);
                if (w->fd < 0) w->dial_at_ms = now + EXIT_REDIAL_MS;
            }
            if (w->fd < 0) timeout = (int)(w->dial_at_ms > now ? w->dial_at_ms - now : 0);
        }
        struct pollfd p[2] = {{.fd = w->efd, .events = POLLIN},
                              {.fd = w->fd, .events = POLLIN | POLLRDHUP}};
        int n = poll(p, w->fd >= 0 ? 2 : 1, timeout);
        if (n < 0 && errno != EINTR) break;
        if (n <= 0) continue;
        if (p[0].revents != 0) {
            uint64_t v;
            if (read(w->efd, &v, sizeof(v)) < 0 && errno != EAGAIN) break;
        }
        if (w->fd >= 0 && p[1].revents != 0) on_readable(w);
    }
    drop_connection(w);
    return NULL;
}

static void wake(ha_exit_watch *w)
{
    uint64_t one = 1;
    if (write(w->efd, &one, sizeof(one)) < 0) { /* the counter cannot overflow in practice */ }
}

int ha_exit_watch_start(ha_exit_fn on_exit, void *arg, ha_exit_watch **out)
{
    ha_exit_watch *w = calloc(1, sizeof(*w));
    if (w == NULL) return SMP_ENOMEM;
    w->on_exit = on_exit;
    w->arg = arg;
    w->fd = -1;
    w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->efd < 0) {
        free(w);
        return SMP_EIO;
    }
    pthread_mutex_init(&w->mu, NULL);
    if (pthread_create(&w->thread, NULL, exit_thread, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        close(w->efd);
        free(w);
        return SMP_EIO;
    }
    *out = w;
    return 0;
}

void ha_exit_watch_set(ha_exit_watch *w, const char *endpoint, int64_t lease)
{
    if (w == NULL) return;
    if (endpoint == NULL) endpoint = "";
    pthread_mutex_lock(&w->mu);
    if (strcmp(w->want_endpoint, endpoint) != 0 || w->want_lease != lease) {
        snprintf(w->want_endpoint, sizeof(w->want_endpoint), "%s", endpoint);
        w->want_lease = lease;
        w->want_gen++;
        wake(w);
    }
    pthread_mutex_unlock(&w->mu);
}

void ha_exit_watch_stop(ha_exit_watch *w)
{
    if (w == NULL) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    wake(w);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    close(w->efd);
    free(w);
}
