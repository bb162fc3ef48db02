/* test_fault_proxy.c -- the test tools that cut links do cut them.
 *
 * fault_proxy_cut must have closed every relayed connection when it
 * returns, and a server a test starts afterwards (hx_child_setup between
 * fork and exec) must hold none of the test's sockets: otherwise a peer
 * whose connection the test cut keeps a half-open socket that nobody
 * answers -- a node waiting out its call timeout for a master that is
 * long gone, which made test_node_slow_inventory fail now and then. The
 * upstream is a listener of the test's own on a free loopback port; the
 * child is /bin/sleep. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fault_proxy.h"
#include "harness.h"

typedef struct fx {
    int listen_fd;        /* the upstream server */
    fault_proxy *proxy;
    char link[64];        /* the proxy's address */
    int client;           /* a connection through the proxy */
    int server;           /* its upstream end, accepted by the test */
    pid_t child;
    char log[64];
} fx;

static int connect_to(const char *hostport)
{
    char host[32];
    const char *colon = strrchr(hostport, ':');
    if (colon == NULL || (size_t)(colon - hostport) >= sizeof(host)) return -1;
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
        connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* 1 when fd reads end of stream (or a reset) within ms, 0 when it is
 * still open and silent then. */
static int closed_within(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0) return 0;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->client = f->server = -1;
    snprintf(f->log, sizeof(f->log), "/tmp/wm-fproxy-%d.log", (int)getpid());
    f->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_true(f->listen_fd >= 0);
    assert_int_equal(bind(f->listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(f->listen_fd, 8), 0);
    assert_int_equal(getsockname(f->listen_fd, (struct sockaddr *)&sa, &len), 0);
    char upstream[64];
    snprintf(upstream, sizeof(upstream), "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
    assert_int_equal(fault_proxy_start(upstream, &f->proxy, f->link, sizeof(f->link)), 0);
    f->client = connect_to(f->link);
    assert_true(f->client >= 0);
    f->server = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    assert_true(f->server >= 0);
    /* the relay works before anything is cut */
    assert_int_equal(send(f->client, "x", 1, 0), 1);
    char b = 0;
    assert_int_equal(recv(f->server, &b, 1, 0), 1);
    assert_int_equal(b, 'x');
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    if (f->child > 0) {
        kill(f->child, SIGKILL);
        waitpid(f->child, NULL, 0);
    }
    fault_proxy_stop(f->proxy);
    if (f->client >= 0) close(f->client);
    if (f->server >= 0) close(f->server);
    close(f->listen_fd);
    unlink(f->log);
    free(f);
    return 0;
}

/* When fault_proxy_cut(1) returns, the client's connection is closed
 * already: not a moment later, when the relay's thread gets the CPU. */
static void test_a_cut_has_closed_the_links_when_it_returns(void **state)
{
    fx *f = *state;
    fault_proxy_cut(f->proxy, 1);
    assert_int_equal(closed_within(f->client, 0), 1);
    assert_int_equal(closed_within(f->server, 1000), 1);
    /* new connections are closed at once while cut, relayed again after */
    int again = connect_to(f->link);
    assert_true(again >= 0);
    assert_int_equal(closed_within(again, 2000), 1);
    close(again);
    fault_proxy_cut(f->proxy, 0);
    again = connect_to(f->link);
    assert_true(again >= 0);
    assert_int_equal(closed_within(again, 200), 0);
    close(again);
}

/* A server started while a relayed connection is open holds none of the
 * test's sockets: the cut after it still closes the client's link. */
static void test_a_server_started_after_holds_no_relayed_socket(void **state)
{
    fx *f = *state;
    f->child = fork();
    assert_true(f->child >= 0);
    if (f->child == 0) {
        hx_child_setup(f->log);
        execl("/bin/sleep", "sleep", "30", (char *)NULL);
        _exit(127);
    }
    usleep(100 * 1000); /* the child has exec'ed (or would hold them) */
    fault_proxy_cut(f->proxy, 1);
    assert_int_equal(closed_within(f->client, 2000), 1);
    assert_int_equal(closed_within(f->server, 2000), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_cut_has_closed_the_links_when_it_returns, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_server_started_after_holds_no_relayed_socket,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
