/* full_backlog.h -- a Unix socket that accepts nothing, and a call run on a
 * thread that the test waits for with a bound: what the tests of connects
 * to a silent server share (test_rpc, test_tenant_local_socket).
 *
 * full_unix_listener listens with backlog 0 and fills it with non-blocking
 * connects until one would wait, so the next connect to path blocks for
 * an accept that never comes. bg_call runs the call under test on its own
 * thread; bg_call_wait gives it a bound in seconds (a call that is still
 * waiting then fails the test, not CTest's timeout), and closing the
 * listener (full_backlog_close) refuses a connect still waiting, so that
 * bg_call_join returns. Header-only: each test links it alone. */
#ifndef TEST_FULL_BACKLOG_H
#define TEST_FULL_BACKLOG_H

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define FULL_BACKLOG_MAX 64

/* A listener on path whose backlog is full; queued[*n_queued] its queued
 * connections (at most FULL_BACKLOG_MAX). The listener, or -1 (nothing
 * left open). */
static int full_unix_listener(const char *path, int *queued, size_t *n_queued)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    int l;
    *n_queued = 0;
    if (len >= sizeof(sa.sun_path)) return -1; /* would not fit: never cut short */
    memcpy(sa.sun_path, path, len + 1);
    if ((l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) return -1;
    unlink(path);
    if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 0) < 0) goto close_l;
    while (*n_queued < FULL_BACKLOG_MAX) {
        int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (c < 0) goto close_l;
        if (connect(c, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
            int e = errno;
            close(c);
            if (e == EAGAIN) return l; /* full: the next connect has to wait */
            goto close_l;
        }
        queued[(*n_queued)++] = c;
    }
close_l:
    while (*n_queued > 0) close(queued[--*n_queued]);
    close(l);
    unlink(path);
    return -1;
}

/* Close the listener l and its queued connections (a connect still waiting
 * is refused now); the socket file stays. */
static void full_backlog_close(int l, int *queued, size_t *n_queued)
{
    close(l);
    while (*n_queued > 0) close(queued[--*n_queued]);
}

/* A call on its own thread: fn(arg), then done. */
typedef struct bg_call {
    void (*fn)(void *);
    void *arg;
    pthread_t th;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
} bg_call;

static void *bg_call_main(void *p)
{
    bg_call *c = p;
    c->fn(c->arg);
    pthread_mutex_lock(&c->lock);
    c->done = 1;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* Start fn(arg) on a thread. 0, or -1 (nothing started). */
static int bg_call_start(bg_call *c, void (*fn)(void *), void *arg)
{
    c->fn = fn;
    c->arg = arg;
    c->done = 0;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    if (pthread_create(&c->th, NULL, bg_call_main, c) == 0) return 0;
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    return -1;
}

/* 1 when the call ended within seconds, else 0 (it is still running). */
static int bg_call_wait(bg_call *c, int seconds)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += seconds;
    pthread_mutex_lock(&c->lock);
    while (!c->done && pthread_cond_timedwait(&c->cond, &c->lock, &until) != ETIMEDOUT) {}
    int done = c->done;
    pthread_mutex_unlock(&c->lock);
    return done;
}

/* Wait for the call's thread (unblock it first) and free the call. */
static void bg_call_join(bg_call *c)
{
    pthread_join(c->th, NULL);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
}

#endif /* TEST_FULL_BACKLOG_H */
