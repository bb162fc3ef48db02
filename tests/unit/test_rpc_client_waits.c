/* test_rpc_client_waits.c -- how the blocking RPC client waits for an answer.
 *
 * On plain TCP the client's first recv after a request blocks for the
 * answer (bounded by SO_RCVTIMEO, the connection's timeout) instead of a
 * poll and then a recv; whatever that recv leaves -- a part of a frame, the
 * timeout -- is waited for in poll up to the call's deadline. On a Unix
 * socket every answer is waited for in poll first (rpc_client.c says why).
 * These tests pin what that must keep: an answer sent in parts is read
 * whole, a half answer that stops ends at the timeout and loses nothing of
 * what came, a changed timeout (a longer one, or none) is the bound of the
 * next wait, and on TCP an answer that comes whole costs no poll at all, on
 * a Unix socket one; silence before any answer names the endpoint (a hung
 * master, or another service), and a peer that closes every connection
 * unanswered ends an idempotent call at once. poll is counted through the linker's --wrap
 * (tests/CMakeLists.txt): a count, never a time.
 *
 * The server is a plain socket served by a thread of the test, on 127.0.0.1
 * (ephemeral port) and on a Unix socket under /tmp named after the pid: it
 * reads each request frame and echoes its body, whole or as the test's
 * script says. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "rpc_client.h"
#include "rpc_envelope.h"

#define SVC 300
#define M_ECHO 1
#define HEAD_BYTES 3 /* what a split answer sends first: not even the length */
#define LATE_MS 1500 /* past a timeout of 1 s, which valgrind's pace leaves whole calls */

/* How the server answers the next request. */
enum script {
    ANSWER_WHOLE,      /* at once, one write */
    ANSWER_IN_PARTS,   /* HEAD_BYTES, 50 ms later the rest */
    ANSWER_LATE,       /* whole, LATE_MS after the request */
    ANSWER_HALF,       /* HEAD_BYTES, the rest once the test sets `release` */
    CLOSE_UNANSWERED,  /* the connection closed without a byte (g_vanish unlinked first) */
};

static atomic_int g_script = ANSWER_WHOLE;
static atomic_int g_release;
static atomic_int g_accepts;            /* connections the server accepted */
static const char *_Atomic g_vanish;    /* a path CLOSE_UNANSWERED unlinks, or NULL */

/* poll(2) counted: the client's waits that were not the blocking recv. */
static atomic_int g_polls;
int __real_poll(struct pollfd *fds, nfds_t n, int timeout);
int __wrap_poll(struct pollfd *fds, nfds_t n, int timeout)
{
    atomic_fetch_add(&g_polls, 1);
    return __real_poll(fds, n, timeout);
}

typedef struct server {
    int tcp_fd, unix_fd;
    char tcp_ep[64], unix_path[108], unix_ep[128];
    pthread_t thread;
    int stop[2];          /* a pipe: teardown writes a byte */
    atomic_int conn;      /* the connection served now, or -1 */
} server;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Read exactly n bytes; 0, or -1 at the end of the stream or an error. */
static int read_exact(int fd, uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int write_exact(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Serve one connection until its client goes: each request's body back as
 * the script says. */
static void serve(int fd)
{
    uint8_t head[4], req[4096], resp[4200];
    for (;;) {
        rpc_env_request r;
        if (read_exact(fd, head, 4) < 0) return;
        uint32_t len = (uint32_t)head[0] << 24 | (uint32_t)head[1] << 16 |
                       (uint32_t)head[2] << 8 | head[3];
        if (len > sizeof(req) || read_exact(fd, req, len) < 0) return;
        if (rpc_env_decode_request(req, len, &r) != 0) return;
        size_t n = rpc_env_encode_response(resp + 4, r.request_id, 0, NULL, 0, r.body,
                                           r.body_len);
        resp[0] = (uint8_t)(n >> 24);
        resp[1] = (uint8_t)(n >> 16);
        resp[2] = (uint8_t)(n >> 8);
        resp[3] = (uint8_t)n;
        n += 4;
        const char *vanish;
        switch (atomic_load(&g_script)) {
        case CLOSE_UNANSWERED:
            if ((vanish = atomic_load(&g_vanish)) != NULL) unlink(vanish);
            return;
        case ANSWER_WHOLE:
            if (write_exact(fd, resp, n) < 0) return;
            break;
        case ANSWER_IN_PARTS:
            if (write_exact(fd, resp, HEAD_BYTES) < 0) return;
            sleep_ms(50);
            if (write_exact(fd, resp + HEAD_BYTES, n - HEAD_BYTES) < 0) return;
            break;
        case ANSWER_LATE:
            sleep_ms(LATE_MS);
            if (write_exact(fd, resp, n) < 0) return;
            break;
        case ANSWER_HALF:
            if (write_exact(fd, resp, HEAD_BYTES) < 0) return;
            while (!atomic_load(&g_release)) sleep_ms(5);
            if (write_exact(fd, resp + HEAD_BYTES, n - HEAD_BYTES) < 0) return;
            break;
        }
    }
}

/* Accept on either listener and serve each connection in turn (the tests
 * use one at a time) until the stop pipe has a byte. */
static void *server_main(void *arg)
{
    server *s = arg;
    for (;;) {
        struct pollfd p[3] = {{s->tcp_fd, POLLIN, 0}, {s->unix_fd, POLLIN, 0},
                              {s->stop[0], POLLIN, 0}};
        if (__real_poll(p, 3, -1) < 0) {
            if (errno == EINTR) continue;
            return NULL;
        }
        if (p[2].revents) return NULL;
        for (int i = 0; i < 2; i++) {
            if (!p[i].revents) continue;
            int fd = accept(p[i].fd, NULL, NULL);
            if (fd < 0) continue;
            atomic_fetch_add(&g_accepts, 1);
            atomic_store(&s->conn, fd);
            serve(fd);
            atomic_store(&s->conn, -1);
            close(fd);
        }
    }
}

static int setup(void **state)
{
    static unsigned seq;
    server *s = calloc(1, sizeof(*s));
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = 0};
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    socklen_t sl = sizeof(in);
    if (s == NULL) return -1;
    in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    snprintf(s->unix_path, sizeof(s->unix_path), "/tmp/wm-rpcc-waits-%ld-%u.sock",
             (long)getpid(), seq++);
    memcpy(un.sun_path, s->unix_path, strlen(s->unix_path) + 1);
    unlink(s->unix_path);
    s->tcp_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    s->unix_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->tcp_fd < 0 || s->unix_fd < 0 ||
        bind(s->tcp_fd, (struct sockaddr *)&in, sizeof(in)) < 0 || listen(s->tcp_fd, 4) < 0 ||
        getsockname(s->tcp_fd, (struct sockaddr *)&in, &sl) < 0 ||
        bind(s->unix_fd, (struct sockaddr *)&un, sizeof(un)) < 0 || listen(s->unix_fd, 4) < 0 ||
        pipe(s->stop) < 0)
        return -1;
    snprintf(s->tcp_ep, sizeof(s->tcp_ep), "127.0.0.1:%d", ntohs(in.sin_port));
    snprintf(s->unix_ep, sizeof(s->unix_ep), "unix:%s", s->unix_path);
    atomic_store(&g_script, ANSWER_WHOLE);
    atomic_store(&g_release, 0);
    atomic_store(&g_accepts, 0);
    atomic_store(&g_vanish, NULL);
    atomic_store(&s->conn, -1);
    if (pthread_create(&s->thread, NULL, server_main, s) != 0) return -1;
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    server *s = *state;
    /* A test that failed left its client connected: the server's read of
     * the next request ends here instead. */
    atomic_store(&g_release, 1);
    int fd = atomic_load(&s->conn);
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
    if (write(s->stop[1], "x", 1) != 1) return -1;
    pthread_join(s->thread, NULL);
    close(s->tcp_fd);
    close(s->unix_fd);
    close(s->stop[0]);
    close(s->stop[1]);
    unlink(s->unix_path);
    free(s);
    return 0;
}

static rpcc_conn *open_client(const char *ep, int timeout_ms)
{
    rpcc_options o = {.timeout_ms = timeout_ms, .token = ""};
    rpcc_conn *c = NULL;
    char err[256];
    if (rpcc_connect(ep, &o, &c, err, sizeof(err)) != SMP_OK) fail_msg("connect %s: %s", ep, err);
    return c;
}

/* One echo call that must succeed with text back. */
static void expect_echo(rpcc_conn *c, const char *text)
{
    int status = 1;
    uint8_t *body = NULL;
    size_t len = 0;
    int rc = rpcc_call(c, SVC, M_ECHO, (const uint8_t *)text, strlen(text), &status, &body, &len,
                       NULL);
    if (rc != SMP_OK) fail_msg("echo \"%s\": %d (%s)", text, rc, rpcc_last_error(c));
    assert_int_equal(status, 0);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(body, text, len);
    free(body);
}

/* Send text and expect the call to end at the connection's timeout
 * (timeout_ms) with SMP_EAGAIN naming it, nothing delivered. Returns the
 * request's id, whose answer is still owed. */
static uint64_t send_timed_out(rpcc_conn *c, const char *text, int timeout_ms)
{
    uint64_t id = 0;
    uint8_t *body = NULL;
    size_t len = 0;
    char want[64];
    assert_int_equal(rpcc_send(c, SVC, M_ECHO, (const uint8_t *)text, strlen(text), &id), SMP_OK);
    assert_int_equal(rpcc_recv(c, id, NULL, NULL, &body, &len, NULL), SMP_EAGAIN);
    snprintf(want, sizeof(want), "no response within %d ms", timeout_ms);
    assert_non_null(strstr(rpcc_last_error(c), want));
    assert_null(body);
    return id;
}

/* The answer owed to id, text back, waited for up to 10 s. */
static void expect_owed_answer(rpcc_conn *c, uint64_t id, const char *text)
{
    uint8_t *body = NULL;
    size_t len = 0;
    int status = 1;
    rpcc_set_timeout(c, 10000);
    assert_int_equal(rpcc_recv(c, id, NULL, &status, &body, &len, NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(body, text, len);
    free(body);
}

/* An answer that comes whole is waited for by the recv itself on plain
 * TCP: 50 calls, no poll. On a Unix socket each call waits in one poll
 * before its one recv. */
static void test_whole_answers_wait_in_recv_on_tcp(void **state)
{
    server *s = *state;
    const char *eps[] = {s->tcp_ep, s->unix_ep};
    const int polls[] = {0, 50};
    for (size_t e = 0; e < 2; e++) {
        rpcc_conn *c = open_client(eps[e], 5000);
        atomic_store(&g_polls, 0);
        for (int i = 0; i < 50; i++) {
            char text[32];
            snprintf(text, sizeof(text), "call %d", i);
            expect_echo(c, text);
        }
        assert_int_equal(atomic_load(&g_polls), polls[e]);
        rpcc_close(c);
    }
}

/* An answer that arrives in parts -- a few bytes, not even its length,
 * then the rest 50 ms later -- is read whole, call after call. */
static void test_answer_in_parts_is_read_whole(void **state)
{
    server *s = *state;
    const char *eps[] = {s->tcp_ep, s->unix_ep};
    atomic_store(&g_script, ANSWER_IN_PARTS);
    for (size_t e = 0; e < 2; e++) {
        rpcc_conn *c = open_client(eps[e], 5000);
        for (int i = 0; i < 3; i++) expect_echo(c, "in parts");
        rpcc_close(c);
    }
}

/* Half an answer and then silence: the call ends at the connection's
 * timeout with SMP_EAGAIN naming it, the bytes that came are kept, and once
 * the rest arrives the same request's answer is delivered whole and the
 * connection goes on. */
static void test_half_answer_ends_at_the_timeout_and_loses_nothing(void **state)
{
    server *s = *state;
    rpcc_conn *c = open_client(s->tcp_ep, 200);
    atomic_store(&g_script, ANSWER_HALF);
    uint64_t id = send_timed_out(c, "half", 200);
    atomic_store(&g_script, ANSWER_WHOLE);
    atomic_store(&g_release, 1);
    expect_owed_answer(c, id, "half");
    expect_echo(c, "after the half");
    rpcc_close(c);
}

/* A timeout changed on a TCP connection bounds the next wait: an answer
 * LATE_MS late ends a call of 1 s with SMP_EAGAIN; on a connection whose
 * recv was last bounded at 1 s, such answers are waited for by the recv
 * itself, with no poll, once the timeout is removed (0: no bound) or raised
 * to 10 s -- the recv's own bound followed each change. */
static void test_changed_timeout_bounds_the_next_wait(void **state)
{
    server *s = *state;
    rpcc_conn *c = open_client(s->tcp_ep, 1000);
    atomic_store(&g_script, ANSWER_LATE);
    uint64_t id = send_timed_out(c, "late", 1000);
    expect_owed_answer(c, id, "late"); /* taken before going on */

    int later[] = {0, 10000};
    for (size_t t = 0; t < 2; t++) {
        atomic_store(&g_script, ANSWER_WHOLE);
        rpcc_set_timeout(c, 1000);
        expect_echo(c, "bounded at 1 s");
        atomic_store(&g_script, ANSWER_LATE);
        rpcc_set_timeout(c, later[t]);
        atomic_store(&g_polls, 0);
        expect_echo(c, "late, waited for");
        assert_int_equal(atomic_load(&g_polls), 0);
    }
    rpcc_close(c);
}

/* Silence on a connection that has answered nothing yet may be a hung
 * master or another service that waits for more of its own protocol: the
 * timeout says the endpoint accepted and answered nothing, and names it.
 * Once the connection has answered, a later silence is only the timeout. */
static void test_silence_before_any_answer_names_the_endpoint(void **state)
{
    server *s = *state;
    rpcc_conn *c = open_client(s->tcp_ep, 200);
    char hint[160];
    snprintf(hint, sizeof(hint), "%s accepted the connection but has answered nothing on it",
             s->tcp_ep);
    atomic_store(&g_script, ANSWER_LATE);
    uint64_t id = send_timed_out(c, "first", 200);
    assert_non_null(strstr(rpcc_last_error(c), hint));
    expect_owed_answer(c, id, "first");
    rpcc_set_timeout(c, 200);
    id = send_timed_out(c, "second", 200);
    assert_null(strstr(rpcc_last_error(c), "accepted the connection"));
    expect_owed_answer(c, id, "second");
    rpcc_close(c);
}

/* A peer that closes the connection before answering anything is no
 * master: an idempotent call, which is sent again after a lost stream, ends
 * after its second such connection with what the peer did (not after the
 * call's whole timeout, reconnecting meanwhile). A reconnect that fails says
 * what it failed after. */
static void test_peer_that_closes_unanswered_ends_the_call(void **state)
{
    server *s = *state;
    int status = 1;
    atomic_store(&g_script, CLOSE_UNANSWERED);
    rpcc_conn *c = open_client(s->tcp_ep, 60000);
    assert_int_equal(rpcc_call_ex(c, RPCC_IDEMPOTENT, SVC, M_ECHO, (const uint8_t *)"x", 1,
                                  &status, NULL, NULL, NULL), SMP_EIO);
    assert_non_null(strstr(rpcc_last_error(c), "closed by the server before it answered anything"));
    assert_int_equal(atomic_load(&g_accepts), 2);
    rpcc_close(c);

    /* The Unix socket's file is gone before its connection closes. */
    atomic_store(&g_vanish, s->unix_path);
    c = open_client(s->unix_ep, 60000);
    assert_true(rpcc_call_ex(c, RPCC_IDEMPOTENT, SVC, M_ECHO, (const uint8_t *)"x", 1, &status,
                             NULL, NULL, NULL) < 0);
    assert_non_null(strstr(rpcc_last_error(c), s->unix_path));
    assert_non_null(strstr(rpcc_last_error(c),
                           ", after: connection closed by the server before it answered anything"));
    assert_int_equal(atomic_load(&g_accepts), 3);
    rpcc_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_whole_answers_wait_in_recv_on_tcp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_answer_in_parts_is_read_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_half_answer_ends_at_the_timeout_and_loses_nothing,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_changed_timeout_bounds_the_next_wait, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_silence_before_any_answer_names_the_endpoint, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_peer_that_closes_unanswered_ends_the_call, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
