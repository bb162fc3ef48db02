/* test_ha_exit_watch.c -- the standby's watch of the leader's process
 * (host_shim/ha/ha_exit_watch.c), against a real Unix-socket server played
 * by the test: end-of-file on a held connection is reported once with the
 * watched endpoint and lease; a server that speaks before closing (the RPC
 * server refusing a connection) is not a death and is dialled again; a
 * watch that is switched off closes its connection and reports nothing. */
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "ha_exit_watch.h"

typedef struct reports {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
    char endpoint[256];
    int64_t lease;
} reports;

typedef struct fixture {
    char dir[64];
    char path[128];
    int listen_fd;
    reports rep;
    ha_exit_watch *w;
} fixture;

static void on_exit_report(void *arg, const char *endpoint, int64_t lease)
{
    reports *r = arg;
    pthread_mutex_lock(&r->mu);
    r->n++;
    snprintf(r->endpoint, sizeof(r->endpoint), "%s", endpoint);
    r->lease = lease;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (f == NULL) return -1;
    snprintf(f->dir, sizeof(f->dir), "/tmp/wm-exitwatch-XXXXXX");
    if (mkdtemp(f->dir) == NULL) return -1;
    snprintf(f->path, sizeof(f->path), "%s/leader.sock", f->dir);
    f->listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", f->path);
    if (f->listen_fd < 0 || bind(f->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(f->listen_fd, 8) < 0)
        return -1;
    pthread_mutex_init(&f->rep.mu, NULL);
    pthread_cond_init(&f->rep.cv, NULL);
    if (ha_exit_watch_start(on_exit_report, &f->rep, &f->w) != 0) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    ha_exit_watch_stop(f->w);
    close(f->listen_fd);
    unlink(f->path);
    rmdir(f->dir);
    pthread_mutex_destroy(&f->rep.mu);
    pthread_cond_destroy(&f->rep.cv);
    free(f);
    return 0;
}

/* The watcher's next connection, as the server accepts it (fails the test
 * after 10 s: the watcher dials within a fraction of a second). */
static int accept_watcher(fixture *f)
{
    struct pollfd p = {.fd = f->listen_fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 10000), 1);
    int c = accept(f->listen_fd, NULL, NULL);
    assert_true(c >= 0);
    return c;
}

/* Wait until n reports arrived (10 s at most). */
static void wait_reports(fixture *f, int n)
{
    pthread_mutex_lock(&f->rep.mu);
    for (int i = 0; i < 100 && f->rep.n < n; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&f->rep.cv, &f->rep.mu, &ts);
    }
    int got = f->rep.n;
    pthread_mutex_unlock(&f->rep.mu);
    assert_int_equal(got, n);
}

static int report_count(fixture *f)
{
    pthread_mutex_lock(&f->rep.mu);
    int n = f->rep.n;
    pthread_mutex_unlock(&f->rep.mu);
    return n;
}

static void test_exit_watch_reports_end_of_file_once_with_the_lease(void **state)
{
    fixture *f = *state;
    ha_exit_watch_set(f->w, f->path, 42);
    int c = accept_watcher(f);
    close(c); /* the leader's process is gone */
    wait_reports(f, 1);
    assert_string_equal(f->rep.endpoint, f->path);
    assert_int_equal(f->rep.lease, 42);
    /* Setting the same pair again is not a new watch: no second dial. */
    ha_exit_watch_set(f->w, f->path, 42);
    struct pollfd p = {.fd = f->listen_fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 300), 0);
    assert_int_equal(report_count(f), 1);
    /* A new term (another lease) is watched afresh. */
    ha_exit_watch_set(f->w, f->path, 43);
    c = accept_watcher(f);
    close(c);
    wait_reports(f, 2);
    assert_int_equal(f->rep.lease, 43);
}

static void test_exit_watch_a_server_that_speaks_before_closing_is_not_a_death(void **state)
{
    fixture *f = *state;
    ha_exit_watch_set(f->w, f->path, 7);
    int c = accept_watcher(f);
    assert_int_equal(write(c, "refused", 7), 7); /* "too many connections" */
    close(c);
    c = accept_watcher(f); /* dialled again, nothing reported */
    assert_int_equal(report_count(f), 0);
    close(c);
    wait_reports(f, 1);
    assert_int_equal(f->rep.lease, 7);
}

static void test_exit_watch_switched_off_closes_and_reports_nothing(void **state)
{
    fixture *f = *state;
    ha_exit_watch_set(f->w, f->path, 9);
    int c = accept_watcher(f);
    ha_exit_watch_set(f->w, "", 0); /* this master leads now */
    char b;
    struct pollfd p = {.fd = c, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 10000), 1);
    assert_int_equal(read(c, &b, 1), 0); /* the watcher hung up */
    close(c);
    p = (struct pollfd){.fd = f->listen_fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 300), 0);
    assert_int_equal(report_count(f), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_exit_watch_reports_end_of_file_once_with_the_lease,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_exit_watch_a_server_that_speaks_before_closing_is_not_a_death, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exit_watch_switched_off_closes_and_reports_nothing,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
