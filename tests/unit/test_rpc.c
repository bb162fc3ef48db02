/* test_rpc.c -- the RPC server and its blocking client, end to end, on the
 * real server of rpc_test_server.h: round trips over TCP and a Unix socket,
 * pipelining, deferred and held replies, malformed and oversized frames
 * (and a client's answer from a peer of another protocol),
 * connection and in-flight limits, rates, authentication states, reroutes. */
#include "full_backlog.h"
#include "rpc_test_server.h"

/* -- Tests: the happy paths ------------------------------------------------ */

/* One call over TCP comes back with the same body and status 0. */
static void test_round_trip_over_tcp(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    expect_echo(c, "hello over tcp");
    expect_echo(c, "x");
    rpcc_close(c);
}

/* The same over the Unix socket, with both spellings of the endpoint. */
static void test_round_trip_over_unix_socket(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->unix_ep);
    expect_echo(c, "hello over unix");
    rpcc_close(c);
    c = open_client(fx->unix_path);
    expect_echo(c, "hello over /path");
    rpcc_close(c);
}

/* An empty request body is legal and comes back empty; the handler gets
 * it at an address, not NULL, also when the call is routed again
 * (rpc_server_redispatch). */
static void test_empty_body_round_trip(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    int status = 1;
    uint8_t *body = (uint8_t *)"not touched";
    size_t len = 99;
    atomic_store(&echo_null_body, 0);
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, NULL, 0, &status, &body, &len, NULL), SMP_OK);
    assert_int_equal(atomic_load(&echo_null_body), 0);
    assert_int_equal(status, 0);
    assert_null(body);
    assert_int_equal(len, 0);
    status = 1;
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_REROUTE, NULL, 0, &status, &body, &len, NULL),
                     SMP_OK);
    assert_int_equal(atomic_load(&echo_null_body), 0);
    assert_int_equal(status, 0);
    assert_null(body);
    assert_int_equal(len, 0);
    rpcc_close(c);
}

/* 100 requests sent back to back on one connection are each answered once,
 * with the body of the request that carried that id. */
static void test_pipelined_100_requests_answered_by_id(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    uint64_t ids[100];
    int seen[100] = {0};
    char text[32];

    for (int i = 0; i < 100; i++) {
        snprintf(text, sizeof(text), "request-%d", i);
        assert_int_equal(rpcc_send(c, SVC_ECHO, M_ECHO, (const uint8_t *)text, strlen(text), &ids[i]),
                         SMP_OK);
    }
    for (int n = 0; n < 100; n++) {
        uint64_t got = 0;
        int status = 1, idx = -1;
        uint8_t *body = NULL;
        size_t len = 0;
        assert_int_equal(rpcc_recv(c, 0, &got, &status, &body, &len, NULL), SMP_OK);
        for (int i = 0; i < 100; i++)
            if (ids[i] == got)
                idx = i;
        assert_true(idx >= 0);
        assert_int_equal(seen[idx], 0);
        seen[idx] = 1;
        snprintf(text, sizeof(text), "request-%d", idx);
        assert_int_equal(status, 0);
        assert_int_equal(len, strlen(text));
        assert_memory_equal(body, text, len);
        free(body);
    }
    expect_echo(c, "still fine");
    rpcc_close(c);
}

/* A deferred reply to an earlier request arrives after the immediate reply
 * to a later one: responses leave in completion order. */
static void test_deferred_reply_arrives_after_later_immediate_one(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    uint8_t req[64];
    size_t n = defer_body(req, 150, "late");
    uint64_t id_late, id_early, got = 0;
    uint8_t *body = NULL;
    size_t len = 0;
    int status = 1;

    assert_int_equal(rpcc_send(c, SVC_DEFER, M_DEFER, req, n, &id_late), SMP_OK);
    assert_int_equal(rpcc_send(c, SVC_ECHO, M_ECHO, (const uint8_t *)"early", 5, &id_early), SMP_OK);
    assert_int_equal(rpcc_recv(c, 0, &got, &status, &body, &len, NULL), SMP_OK);
    assert_true(got == id_early);
    assert_int_equal(len, 5);
    assert_memory_equal(body, "early", 5);
    free(body);
    assert_int_equal(rpcc_recv(c, 0, &got, &status, &body, &len, NULL), SMP_OK);
    assert_true(got == id_late);
    assert_int_equal(status, 0);
    assert_int_equal(len, 4);
    assert_memory_equal(body, "late", 4);
    free(body);
    rpcc_close(c);
}

/* rpcc_recv for a given id keeps the responses to other ids for later. */
static void test_recv_by_id_keeps_other_responses(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->unix_ep);
    uint64_t a, b, got = 0;
    uint8_t *body = NULL;
    size_t len = 0;

    assert_int_equal(rpcc_send(c, SVC_ECHO, M_ECHO, (const uint8_t *)"a", 1, &a), SMP_OK);
    assert_int_equal(rpcc_send(c, SVC_ECHO, M_ECHO, (const uint8_t *)"b", 1, &b), SMP_OK);
    assert_int_equal(rpcc_recv(c, b, &got, NULL, &body, &len, NULL), SMP_OK);
    assert_true(got == b);
    assert_memory_equal(body, "b", 1);
    free(body);
    assert_int_equal(rpcc_recv(c, a, &got, NULL, &body, &len, NULL), SMP_OK);
    assert_true(got == a);
    assert_memory_equal(body, "a", 1);
    free(body);
    rpcc_close(c);
}

/* A client timeout leaves the connection usable: the late response is
 * still delivered by a later rpcc_recv. */
static void test_client_timeout_then_resume(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    uint8_t req[64];
    size_t n = defer_body(req, 300, "slow");
    uint64_t id;
    uint8_t *body = NULL;
    size_t len = 0;

    rpcc_set_timeout(c, 50);
    assert_int_equal(rpcc_send(c, SVC_DEFER, M_DEFER, req, n, &id), SMP_OK);
    assert_int_equal(rpcc_recv(c, id, NULL, NULL, &body, &len, NULL), SMP_EAGAIN);
    assert_non_null(strstr(rpcc_last_error(c), "50 ms"));
    rpcc_set_timeout(c, 5000);
    assert_int_equal(rpcc_recv(c, id, NULL, NULL, &body, &len, NULL), SMP_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(body, "slow", 4);
    free(body);
    expect_echo(c, "after timeout");
    rpcc_close(c);
}

/* -- Tests: errors that keep the connection -------------------------------- */

/* An unknown service is answered with SMP_ENOTFOUND naming the ids; the
 * connection keeps working. */
static void test_unknown_service_answered_and_connection_kept(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    int status = 0;
    char *msg = NULL;
    assert_int_equal(rpcc_call(c, 999, 7, NULL, 0, &status, NULL, NULL, &msg), SMP_OK);
    assert_int_equal(status, SMP_ENOTFOUND);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "999"));
    assert_non_null(strstr(msg, "7"));
    free(msg);
    /* 65536 + SVC_ECHO must not alias the 16-bit service id */
    assert_int_equal(rpcc_call(c, 65536 + SVC_ECHO, M_ECHO, NULL, 0, &status, NULL, NULL, NULL), SMP_OK);
    assert_int_equal(status, SMP_ENOTFOUND);
    expect_echo(c, "still served");
    assert_true(get_stats(fx).err_unknown_service >= 2);
    rpcc_close(c);
}

/* An unknown method of a known service: SMP_ENOTFOUND naming the service and
 * the method; the connection keeps working. */
static void test_unknown_method_answered_and_connection_kept(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->unix_ep);
    int status = 0;
    char *msg = NULL;
    assert_int_equal(rpcc_call(c, SVC_ECHO, 42, NULL, 0, &status, NULL, NULL, &msg), SMP_OK);
    assert_int_equal(status, SMP_ENOTFOUND);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "echo"));
    assert_non_null(strstr(msg, "42"));
    free(msg);
    expect_echo(c, "still served");
    assert_true(get_stats(fx).err_unknown_method >= 1);
    rpcc_close(c);
}

/* A handler that returns a negative code without replying has that code
 * sent as the status with a message naming it; rpc_reply_error carries the
 * handler's own message. */
static void test_handler_error_status_propagated(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    int status = 0;
    char *msg = NULL;
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_FAIL, NULL, 0, &status, NULL, NULL, &msg), SMP_OK);
    assert_int_equal(status, SMP_EBUSY);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "SMP_EBUSY"));
    assert_non_null(strstr(msg, "fail"));
    free(msg);
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_FAIL_MSG, NULL, 0, &status, NULL, NULL, &msg), SMP_OK);
    assert_int_equal(status, SMP_EVETO);
    assert_string_equal(msg, "vetoed by test");
    free(msg);
    expect_echo(c, "still served");
    assert_true(get_stats(fx).err_handler >= 1);
    rpcc_close(c);
}

/* A reply larger than max_frame_bytes is replaced by SMP_ERANGE naming both
 * sizes; the connection stays usable. */
static void test_reply_over_max_frame_becomes_erange(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    uint32_t n = TEST_MAX_FRAME + 10;
    int status = 0;
    char *msg = NULL;
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_BIG, (const uint8_t *)&n, sizeof(n), &status, NULL,
                               NULL, &msg),
                     SMP_OK);
    assert_int_equal(status, SMP_ERANGE);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "1048576"));
    free(msg);
    n = 200000; /* a large reply within bounds crosses several reads */
    {
        uint8_t *body = NULL;
        size_t len = 0;
        assert_int_equal(rpcc_call(c, SVC_ECHO, M_BIG, (const uint8_t *)&n, sizeof(n), &status,
                                   &body, &len, NULL),
                         SMP_OK);
        assert_int_equal(status, 0);
        assert_int_equal(len, n);
        free(body);
    }
    expect_echo(c, "still served");
    rpcc_close(c);
}

/* The client refuses to send a request over its own max_frame_bytes and the
 * connection is not harmed. */
static void test_client_refuses_oversized_request(void **state)
{
    fixture *fx = *state;
    rpcc_options o = {.timeout_ms = 5000, .max_frame_bytes = 1024};
    rpcc_conn *c = NULL;
    uint8_t big[2048];
    memset(big, 'z', sizeof(big));
    assert_int_equal(rpcc_connect(fx->tcp_ep, &o, &c, NULL, 0), SMP_OK);
    assert_int_equal(rpcc_send(c, SVC_ECHO, M_ECHO, big, sizeof(big), NULL), SMP_ERANGE);
    assert_non_null(strstr(rpcc_last_error(c), "1024"));
    expect_echo(c, "small is fine");
    rpcc_close(c);
}

/* Bad endpoints and refused connections are errors with messages. */
static void test_client_connect_errors(void **state)
{
    char err[256] = "";
    rpcc_conn *c = NULL;
    (void)state;
    assert_int_equal(rpcc_connect("no-port-here", NULL, &c, err, sizeof(err)), SMP_EINVAL);
    assert_null(c);
    assert_non_null(strstr(err, "no-port-here"));
    assert_int_equal(rpcc_connect("unix:/tmp/wm-test-rpc-nonexistent.sock", NULL, &c, err,
                                  sizeof(err)),
                     SMP_EIO);
    assert_non_null(strstr(err, "nonexistent"));
}

typedef struct connect_call {
    const char *endpoint;
    int timeout_ms;
    int rc;
    char err[512];
} connect_call;

static void connect_main(void *arg)
{
    connect_call *cc = arg;
    rpcc_options opt = {.timeout_ms = cc->timeout_ms};
    rpcc_conn *c = NULL;
    cc->rc = rpcc_connect(cc->endpoint, &opt, &c, cc->err, sizeof(cc->err));
    rpcc_close(c);
}

/* A connect to a Unix socket whose server never accepts (its backlog is
 * full) ends at the connection's timeout with SMP_EAGAIN "timed out", as a
 * TCP connect does, instead of waiting for an accept that never comes. The
 * call runs on a thread given 30 s (100 times its timeout) to end; a
 * connect still waiting then fails the test, and closing the listener
 * ends it. */
static void test_unix_connect_to_a_full_backlog_ends_at_its_timeout(void **state)
{
    char path[108], ep[128];
    int queued[FULL_BACKLOG_MAX];
    size_t n_queued = 0;
    bg_call bg;
    connect_call cc = {.endpoint = ep, .timeout_ms = 300};
    (void)state;
    snprintf(path, sizeof(path), "/tmp/wm-test-rpc-full-%d.sock", (int)getpid());
    snprintf(ep, sizeof(ep), "unix:%s", path);
    int l = full_unix_listener(path, queued, &n_queued);
    assert_true(l >= 0);
    assert_int_equal(bg_call_start(&bg, connect_main, &cc), 0);
    int ended = bg_call_wait(&bg, 30);
    full_backlog_close(l, queued, &n_queued); /* a connect still waiting is refused now */
    bg_call_join(&bg);
    unlink(path);
    if (!ended) fail_msg("rpcc_connect to a full backlog still waited after 30 s (timeout 300 ms)");
    assert_int_equal(cc.rc, SMP_EAGAIN);
    assert_non_null(strstr(cc.err, "timed out"));
    assert_non_null(strstr(cc.err, path));
}

/* -- Tests: bad frames close only their own connection --------------------- */

/* A peer that closes in the middle of a frame is just closed; a client
 * connected before keeps being served. */
static void test_truncated_frame_closes_only_that_connection(void **state)
{
    fixture *fx = *state;
    rpcc_conn *bystander = open_client(fx->tcp_ep);
    uint64_t before = get_stats(fx).err_truncated_frame;
    int fd = raw_connect(fx);
    uint8_t part[10] = {0};
    raw_send_header(fd, 100);
    raw_send(fd, part, sizeof(part));
    close(fd);
    wait_stat(fx, STAT(err_truncated_frame), before + 1);
    expect_echo(bystander, "bystander after truncated frame");
    rpcc_close(bystander);
}

/* A frame longer than max_frame_bytes gets SMP_ERANGE naming both sizes,
 * without the body being read, and the connection is closed. */
static void test_oversized_frame_answered_and_closed(void **state)
{
    fixture *fx = *state;
    rpcc_conn *bystander = open_client(fx->unix_ep);
    int fd = raw_connect(fx);
    RpcResponse *m;
    raw_send_header(fd, 2u * TEST_MAX_FRAME);
    m = raw_read_response(fd);
    assert_true(m->request_id == 0);
    assert_int_equal(m->status, SMP_ERANGE);
    assert_non_null(strstr(m->error, "2097152"));
    assert_non_null(strstr(m->error, "1048576"));
    rpc_response__free_unpacked(m, NULL);
    raw_expect_closed(fd);
    close(fd);
    expect_echo(bystander, "bystander after oversized frame");
    assert_true(get_stats(fx).err_oversized_frame >= 1);
    rpcc_close(bystander);
}

/* The client library reports the server's connection-level refusal as the
 * return code with the server's message. */
static void test_client_sees_oversized_refusal_as_erange(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    uint8_t *big = calloc(1, TEST_MAX_FRAME + 100);
    int status = 0;
    assert_non_null(big);
    /* the client accepts up to 64 MiB, the server only 1 MiB */
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, big, TEST_MAX_FRAME + 100, &status, NULL, NULL,
                               NULL),
                     SMP_ERANGE);
    assert_non_null(strstr(rpcc_last_error(c), "max_frame_bytes"));
    /* the connection is gone for good */
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, NULL, 0, &status, NULL, NULL, NULL), SMP_ERANGE);
    free(big);
    rpcc_close(c);
}

/* A peer of another protocol: listens on a Unix socket, takes one
 * connection, reads what comes and answers `answer`, then waits for the
 * client to close -- or, for answer NULL, closes without a word (an HTTP
 * server whose request line never came, at its timeout). */
typedef struct foreign_peer {
    int fd;
    const char *answer;
    pthread_t thread;
} foreign_peer;

static void *foreign_peer_run(void *arg)
{
    foreign_peer *p = arg;
    uint8_t buf[4096];
    int c = accept(p->fd, NULL, NULL);
    if (c < 0) return NULL;
    if (read(c, buf, sizeof(buf)) > 0 && p->answer != NULL &&
        write(c, p->answer, strlen(p->answer)) < 0) {
        /* the client went away: its error is what the test looks at */
    }
    if (p->answer == NULL) shutdown(c, SHUT_RDWR);
    while (read(c, buf, sizeof(buf)) > 0) {
    }
    close(c);
    return NULL;
}

/* One call to a peer that answers `answer`: the code and message. */
static int call_foreign_peer(const char *answer, char *msg, size_t cap)
{
    foreign_peer p = {.answer = answer};
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "/tmp/wm-test-rpc-foreign-%d.sock", (int)getpid());
    unlink(sa.sun_path);
    p.fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(p.fd >= 0);
    assert_int_equal(bind(p.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(p.fd, 1), 0);
    assert_int_equal(pthread_create(&p.thread, NULL, foreign_peer_run, &p), 0);
    rpcc_options o = {.timeout_ms = 5000};
    rpcc_conn *c = NULL;
    char err[256], ep[128];
    snprintf(ep, sizeof(ep), "unix:%s", sa.sun_path);
    assert_int_equal(rpcc_connect(ep, &o, &c, err, sizeof(err)), SMP_OK);
    int status = 0;
    int rc = rpcc_call(c, SVC_ECHO, M_ECHO, (const uint8_t *)"hi\n", 3, &status, NULL, NULL, NULL);
    snprintf(msg, cap, "%s", rpcc_last_error(c));
    rpcc_close(c);
    pthread_join(p.thread, NULL);
    close(p.fd);
    unlink(sa.sun_path);
    return rc;
}

/* A peer that answers HTTP (an admin or metrics port given as the
 * master's address) is said to be one, not read as a frame of 1213486160
 * bytes; another text answer over max_frame_bytes keeps the size refusal
 * and says the length reads as text. */
static void test_client_names_a_peer_of_another_protocol(void **state)
{
    (void)state;
    char msg[512];
    assert_int_equal(call_foreign_peer("HTTP/1.1 400 Bad Request\r\n\r\n", msg, sizeof(msg)),
                     SMP_EPROTO);
    assert_string_equal(msg, "the peer answered HTTP, not the master's RPC protocol (is this the "
                             "admin/metrics port?)");
    assert_int_equal(call_foreign_peer("SSH-2.0-OpenSSH_9.2\r\n", msg, sizeof(msg)), SMP_ERANGE);
    assert_non_null(strstr(msg, "response frame of 1397966893 bytes exceeds max_frame_bytes"));
    assert_non_null(strstr(msg, "its length reads as text 'SSH-'"));
    /* closed before a word: said so, naming the endpoint and what it should be */
    assert_int_equal(call_foreign_peer(NULL, msg, sizeof(msg)), SMP_EIO);
    assert_non_null(strstr(msg, "connection closed by the server before it answered anything (is "
                                "unix:/tmp/wm-test-rpc-foreign-"));
    assert_non_null(strstr(msg, ".sock the master's RPC endpoint, its listen.tcp or listen.unix, "
                                "and not another service such as its admin endpoint?)"));
}

/* A body that does not decode as RpcRequest: SMP_EPROTO, then closed. */
static void test_garbage_body_answered_eproto_and_closed(void **state)
{
    fixture *fx = *state;
    rpcc_conn *bystander = open_client(fx->tcp_ep);
    int fd = raw_connect(fx);
    uint8_t garbage[11];
    RpcResponse *m;
    memset(garbage, 0xff, sizeof(garbage)); /* a varint tag that never ends */
    raw_send_header(fd, sizeof(garbage));
    raw_send(fd, garbage, sizeof(garbage));
    m = raw_read_response(fd);
    assert_true(m->request_id == 0);
    assert_int_equal(m->status, SMP_EPROTO);
    assert_non_null(strstr(m->error, "RpcRequest"));
    rpc_response__free_unpacked(m, NULL);
    raw_expect_closed(fd);
    close(fd);
    expect_echo(bystander, "bystander after garbage");
    assert_true(get_stats(fx).err_bad_request >= 1);
    rpcc_close(bystander);
}

/* A zero-length frame: SMP_EPROTO, then closed. */
static void test_zero_length_frame_answered_eproto_and_closed(void **state)
{
    fixture *fx = *state;
    rpcc_conn *bystander = open_client(fx->unix_ep);
    int fd = raw_connect(fx);
    RpcResponse *m;
    raw_send_header(fd, 0);
    m = raw_read_response(fd);
    assert_true(m->request_id == 0);
    assert_int_equal(m->status, SMP_EPROTO);
    assert_non_null(strstr(m->error, "zero-length"));
    rpc_response__free_unpacked(m, NULL);
    raw_expect_closed(fd);
    close(fd);
    expect_echo(bystander, "bystander after zero-length frame");
    assert_true(get_stats(fx).err_empty_frame >= 1);
    rpcc_close(bystander);
}

/* Requests that precede a bad frame in the same read are still answered
 * before the connection is refused. */
static void test_good_request_before_bad_frame_is_answered(void **state)
{
    fixture *fx = *state;
    int fd = raw_connect(fx);
    RpcRequest req = RPC_REQUEST__INIT;
    uint8_t buf[128];
    size_t n;
    RpcResponse *m;
    req.request_id = 7;
    req.service = SVC_ECHO;
    req.method = M_ECHO;
    req.body.data = (uint8_t *)"ok";
    req.body.len = 2;
    n = rpc_request__get_packed_size(&req);
    buf[0] = 0;
    buf[1] = 0;
    buf[2] = 0;
    buf[3] = (uint8_t)n;
    rpc_request__pack(&req, buf + 4);
    memset(buf + 4 + n, 0, 4); /* then a zero-length frame */
    raw_send(fd, buf, 4 + n + 4);
    m = raw_read_response(fd);
    assert_true(m->request_id == 7);
    assert_int_equal(m->status, 0);
    rpc_response__free_unpacked(m, NULL);
    m = raw_read_response(fd);
    assert_true(m->request_id == 0);
    assert_int_equal(m->status, SMP_EPROTO);
    rpc_response__free_unpacked(m, NULL);
    raw_expect_closed(fd);
    close(fd);
}

/* Random byte streams (random lengths, random bodies, cut anywhere) never
 * bring the server down; a client connected before keeps being served. */
static void test_random_bytes_never_crash_the_server(void **state)
{
    fixture *fx = *state;
    rpcc_conn *bystander = open_client(fx->unix_ep);
    unsigned seed = 12345;
    uint8_t buf[300];
    for (int i = 0; i < 200; i++) {
        int fd = raw_connect(fx);
        size_t n = 1 + (size_t)(rand_r(&seed) % sizeof(buf));
        for (size_t k = 0; k < n; k++)
            buf[k] = (uint8_t)rand_r(&seed);
        if (i % 2 == 0) {
            /* a plausible length so that the body is parsed */
            uint32_t len = (uint32_t)(rand_r(&seed) % 64);
            buf[0] = 0;
            buf[1] = 0;
            buf[2] = 0;
            buf[3] = (uint8_t)len;
        }
        send(fd, buf, n, MSG_NOSIGNAL);
        close(fd);
    }
    expect_echo(bystander, "bystander after random bytes");
    rpcc_close(bystander);
}

/* -- Tests: lifetimes ------------------------------------------------------ */

/* The client disconnects while its deferred call is outstanding; the later
 * reply is dropped, the call freed, and the server carries on (ASan and
 * valgrind check there is no use after free and no leak). */
static void test_disconnect_with_deferred_call_outstanding(void **state)
{
    fixture *fx = *state;
    rpc_server_stats st = get_stats(fx);
    uint64_t dropped = st.replies_dropped;
    rpcc_conn *c = open_client(fx->tcp_ep);
    uint8_t req[64];
    size_t n = defer_body(req, 300, "nobody listens");
    assert_int_equal(rpcc_send(c, SVC_DEFER, M_DEFER, req, n, NULL), SMP_OK);
    /* the deferred call is dispatched (the stats call itself is the other) */
    wait_stat(fx, STAT(calls_outstanding), 2);
    rpcc_close(c);
    wait_stat(fx, STAT(replies_dropped), dropped + 1);
    st = get_stats(fx);
    assert_true(st.calls_outstanding == 1); /* only the stats call itself */
    c = open_client(fx->tcp_ep);
    expect_echo(c, "server still fine");
    rpcc_close(c);
}

/* A client that sends requests and vanishes without reading its answers:
 * the server's writes fail (EPIPE or reset, never a fatal SIGPIPE), that
 * connection is closed and the server keeps serving. */
static void test_client_vanishing_with_replies_in_flight(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    uint8_t body[8000];
    uint32_t big = 500000;
    memset(body, 'v', sizeof(body));
    for (int i = 0; i < 20; i++) {
        assert_int_equal(rpcc_send(c, SVC_ECHO, M_ECHO, body, sizeof(body), NULL), SMP_OK);
        assert_int_equal(rpcc_send(c, SVC_ECHO, M_BIG, (const uint8_t *)&big, sizeof(big), NULL),
                         SMP_OK);
    }
    rpcc_close(c);
    c = open_client(fx->tcp_ep);
    expect_echo(c, "server survived");
    for (int i = 0; i < 500 && get_stats_on(c).connections_open != 1; i++)
        usleep(10 * 1000);
    assert_true(get_stats_on(c).connections_open == 1); /* the vanished one is gone */
    rpcc_close(c);
}

/* The server is closed while a deferred call is outstanding: the loop ends
 * once the timer has answered (reply dropped) and everything is freed. */
static void test_server_close_with_deferred_call_outstanding(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->unix_ep);
    uint8_t req[64];
    size_t n = defer_body(req, 300, "too late");
    uint64_t id;
    uint8_t *body = NULL;
    size_t len = 0;
    assert_int_equal(rpcc_send(c, SVC_DEFER, M_DEFER, req, n, &id), SMP_OK);
    wait_stat(fx, STAT(calls_outstanding), 2); /* the deferred call is dispatched */
    fixture_stop(fx);
    assert_int_equal(rpcc_recv(c, id, NULL, NULL, &body, &len, NULL), SMP_EIO);
    rpcc_close(c);
    /* teardown joins the loop thread: it ends after the timer fires */
}

/* -- Tests: limits (setup_limited) ----------------------------------------- */

/* Beyond max_connections a connection is refused with SMP_EAGAIN; the ones
 * within the limit keep working and a slot frees up when one closes. */
static void test_max_connections_refuses_extra(void **state)
{
    fixture *fx = *state;
    rpcc_conn *a = open_client(fx->tcp_ep);
    rpcc_conn *b = open_client(fx->unix_ep);
    rpcc_conn *extra;
    int status = 0;
    expect_echo(a, "a");
    expect_echo(b, "b");
    extra = open_client(fx->tcp_ep);
    assert_int_equal(rpcc_call(extra, SVC_ECHO, M_ECHO, NULL, 0, &status, NULL, NULL, NULL),
                     SMP_EAGAIN);
    assert_non_null(strstr(rpcc_last_error(extra), "max_connections 2"));
    rpcc_close(extra);
    expect_echo(a, "a again");
    rpcc_close(b);
    /* b's slot frees once the server has seen it go; retry until then */
    for (int i = 0; i < 200; i++) {
        extra = open_client(fx->tcp_ep);
        if (rpcc_call(extra, SVC_ECHO, M_ECHO, NULL, 0, &status, NULL, NULL, NULL) == SMP_OK)
            break;
        rpcc_close(extra);
        extra = NULL;
        usleep(10 * 1000);
    }
    assert_non_null(extra);
    rpcc_close(extra);
    rpcc_close(a);
}

/* More calls in flight than max_inflight: reading pauses until replies go
 * out, and every request is still answered. */
static void test_inflight_bound_pauses_reading(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    uint8_t req[64];
    size_t n = defer_body(req, 20, "slowly");
    int status;
    for (int i = 0; i < 20; i++)
        assert_int_equal(rpcc_send(c, SVC_DEFER, M_DEFER, req, n, NULL), SMP_OK);
    for (int i = 0; i < 20; i++) {
        status = 1;
        assert_int_equal(rpcc_recv(c, 0, NULL, &status, NULL, NULL, NULL), SMP_OK);
        assert_int_equal(status, 0);
    }
    assert_true(get_stats_on(c).backpressure_pauses >= 1);
    rpcc_close(c);
}

/* Unsent output over max_output_bytes pauses reading; all answers arrive.
 * (Replies this large always go through the write queue; small ones are
 * written straight to the socket when nothing is queued before them.) */
static void test_output_bound_pauses_reading(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->unix_ep);
    uint8_t body[6000];
    uint64_t before;
    int status;
    memset(body, 'o', sizeof(body));
    before = get_stats_on(c).backpressure_pauses;
    for (int i = 0; i < 30; i++)
        assert_int_equal(rpcc_send(c, SVC_ECHO, M_ECHO, body, sizeof(body), NULL), SMP_OK);
    for (int i = 0; i < 30; i++) {
        uint8_t *got = NULL;
        size_t len = 0;
        status = 1;
        assert_int_equal(rpcc_recv(c, 0, NULL, &status, &got, &len, NULL), SMP_OK);
        assert_int_equal(status, 0);
        assert_int_equal(len, sizeof(body));
        free(got);
    }
    assert_true(get_stats_on(c).backpressure_pauses > before);
    rpcc_close(c);
}

/* Small replies written straight to the socket never cut into a large one
 * still queued: pipelined echoes of mixed sizes all come back whole. */
static void test_mixed_reply_sizes_stay_framed(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->unix_ep);
    static uint8_t big[6000];
    uint8_t small[16];
    uint64_t ids[60];
    int status;
    memset(big, 'B', sizeof(big));
    memset(small, 's', sizeof(small));
    for (int i = 0; i < 60; i++) {
        const uint8_t *b = i % 3 == 0 ? big : small;
        size_t n = i % 3 == 0 ? sizeof(big) : sizeof(small);
        assert_int_equal(rpcc_send(c, SVC_ECHO, M_ECHO, b, n, &ids[i]), SMP_OK);
    }
    for (int i = 0; i < 60; i++) {
        uint8_t *got = NULL;
        size_t len = 0;
        status = 1;
        assert_int_equal(rpcc_recv(c, ids[i], NULL, &status, &got, &len, NULL), SMP_OK);
        assert_int_equal(status, 0);
        assert_int_equal(len, i % 3 == 0 ? sizeof(big) : sizeof(small));
        assert_int_equal(got[0], i % 3 == 0 ? 'B' : 's');
        assert_int_equal(got[len - 1], i % 3 == 0 ? 'B' : 's');
        free(got);
    }
    rpcc_close(c);
}

/* -- Tests: registration --------------------------------------------------- */

/* -- Tests: limits (rpc_limits.h) ----------------------------------------- */

/* A request larger than the connection's in-flight cap is refused SMP_ERANGE
 * under its own request_id (rpcc_call matches it) without being buffered,
 * and the connection goes on. */
static void test_inflight_cap_refuses_larger_request_keeps_connection(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    static uint8_t big[9000];
    int status = 0;
    char *msg = NULL;
    memset(big, 'b', sizeof(big));
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, big, sizeof(big), &status, NULL, NULL, &msg),
                     SMP_OK);
    assert_int_equal(status, SMP_ERANGE);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "is larger than the 4096 request bytes this connection"));
    free(msg);
    expect_echo(c, "still fine");
    rpcc_close(c);
}

/* The bytes of an unanswered call count: a request that would take the
 * connection over the cap is refused SMP_EAGAIN while the held call is
 * unanswered, and accepted once it is answered. */
static void test_inflight_cap_counts_unanswered_calls(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->unix_ep);
    static uint8_t part[2500];
    uint64_t hold_id = 0, got = 0;
    int status = 0;
    char *msg = NULL;
    uint8_t *body = NULL;
    size_t len = 0;
    memset(part, 'p', sizeof(part));
    assert_int_equal(rpcc_send(c, SVC_ECHO, M_HOLD, part, sizeof(part), &hold_id), SMP_OK);
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, part, sizeof(part), &status, NULL, NULL, &msg),
                     SMP_OK);
    assert_int_equal(status, SMP_EAGAIN);
    assert_non_null(strstr(msg, "retry once they are answered"));
    free(msg);
    /* small requests still fit beside the held one */
    expect_echo(c, "small");
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_RELEASE, NULL, 0, &status, NULL, NULL, NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(rpcc_recv(c, hold_id, &got, &status, &body, &len, NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(len, 8);
    free(body);
    status = 1;
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, part, sizeof(part), &status, NULL, NULL, NULL),
                     SMP_OK);
    assert_int_equal(status, 0);
    rpcc_close(c);
}

/* A tenant's connections share its in-flight bytes: while one holds a call,
 * the other's request that would take the tenant over the cap is refused
 * SMP_EAGAIN; once the call is answered it is accepted. Before the login a
 * connection has no tenant and is not held to the tenant's cap. */
static void test_tenant_inflight_shared_by_its_connections(void **state)
{
    fixture *fx = *state;
    rpcc_conn *a = open_client(fx->tcp_ep), *b = open_client(fx->unix_ep);
    static uint8_t part[2500], big[6000];
    uint64_t hold_id = 0;
    int status = 1;
    char *msg = NULL;
    memset(part, 'p', sizeof(part));
    memset(big, 'g', sizeof(big));
    /* no tenant yet: the tenant's cap does not apply */
    assert_int_equal(rpcc_call(b, SVC_ECHO, M_ECHO, big, sizeof(big), &status, NULL, NULL, NULL),
                     SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(rpcc_call(a, SVC_ECHO, M_LOGIN, NULL, 0, &status, NULL, NULL, NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(rpcc_call(b, SVC_ECHO, M_LOGIN, NULL, 0, &status, NULL, NULL, NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(rpcc_send(a, SVC_ECHO, M_HOLD, part, sizeof(part), &hold_id), SMP_OK);
    /* the refusal itself: the transport would send a refused request again
     * after the 20 ms it is told, for as long as the call's timeout */
    rpcc_set_timeout(b, 10);
    /* wait until the server holds a's call (its bytes are charged then) */
    for (int i = 0; i < 500; i++) {
        assert_int_equal(rpcc_call(b, SVC_ECHO, M_ECHO, part, sizeof(part), &status, NULL, NULL, &msg),
                         SMP_OK);
        if (status != 0)
            break;
        usleep(10 * 1000);
    }
    assert_int_equal(status, SMP_EAGAIN);
    assert_non_null(strstr(msg, "this tenant's connections"));
    free(msg);
    rpcc_set_timeout(b, 5000);
    assert_int_equal(rpcc_call(b, SVC_ECHO, M_RELEASE, NULL, 0, &status, NULL, NULL, NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(rpcc_recv(a, hold_id, NULL, &status, NULL, NULL, NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(rpcc_call(b, SVC_ECHO, M_ECHO, part, sizeof(part), &status, NULL, NULL, NULL),
                     SMP_OK);
    assert_int_equal(status, 0);
    rpcc_close(a);
    rpcc_close(b);
}

/* The bucket runs dry after its burst: the next request is refused
 * SMP_EAGAIN (a call whose timeout is shorter than the wait the refusal
 * names gets it) and the connection stays usable; once the bucket refills
 * (polled, no time threshold) requests succeed again; and a call with time
 * to spare is sent again when the refusal says, so a run of them past the
 * burst all succeed. */
static void test_rate_limit_refuses_then_recovers(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    /* below the second a request of 1 a second waits, and far above an
     * answer's round trip even under valgrind on a loaded machine */
    rpcc_set_timeout(c, 500);
    int status = 0, sent = 0;
    char *msg = NULL;
    while (status == 0 && sent < 100) {
        assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, (const uint8_t *)"x", 1, &status, NULL, NULL,
                                   &msg),
                         SMP_OK);
        sent++;
    }
    assert_int_equal(status, SMP_EAGAIN);
    assert_true(sent >= 3); /* the burst went through */
    assert_non_null(strstr(msg, "rate limit: this connection may send 1 requests a second (burst 3"));
    free(msg);
    msg = NULL;
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, (const uint8_t *)"y", 1, &status, NULL, NULL,
                                   NULL),
                         SMP_OK);
        if (status == 0)
            break;
        assert_int_equal(status, SMP_EAGAIN);
        usleep(20 * 1000);
    }
    assert_int_equal(status, 0);
    rpcc_set_timeout(c, 10000);
    for (int i = 0; i < 5; i++) { /* the burst, then two that wait their turn */
        assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, (const uint8_t *)"z", 1, &status, NULL, NULL,
                                   NULL),
                         SMP_OK);
        assert_int_equal(status, 0);
    }
    rpcc_close(c);
}

static void test_add_service_validates_methods(void **state)
{
    uv_loop_t loop;
    rpc_server *s = NULL;
    smp_rpc_method bad[2] = {
        {sizeof(smp_rpc_method), 1, "a", echo_handler, SMP_ROLE_ADMIN},
        {sizeof(smp_rpc_method), 1, "dup", echo_handler, SMP_ROLE_ADMIN},
    };
    smp_rpc_method nohandler = {sizeof(smp_rpc_method), 1, "x", NULL, SMP_ROLE_ADMIN};
    smp_rpc_method tiny = {4, 1, "x", echo_handler, SMP_ROLE_ADMIN};
    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(rpc_server_create(&loop, NULL, &s, NULL, 0), SMP_OK);
    assert_int_equal(rpc_server_add_service(s, 20, "dup", bad, 2, NULL), SMP_EINVAL);
    assert_int_equal(rpc_server_add_service(s, 20, "nh", &nohandler, 1, NULL), SMP_EINVAL);
    assert_int_equal(rpc_server_add_service(s, 20, "tiny", &tiny, 1, NULL), SMP_EINVAL);
    assert_int_equal(rpc_server_add_service(s, 20, "ok", bad, 1, NULL), SMP_OK);
    assert_int_equal(rpc_server_add_service(s, 20, "again", bad, 1, NULL), SMP_EEXIST);
    assert_int_equal(rpc_server_remove_service(s, 20), SMP_OK);
    assert_int_equal(rpc_server_remove_service(s, 20), SMP_ENOTFOUND);
    assert_int_equal(rpc_server_add_service(s, 20, "back", bad, 1, NULL), SMP_OK);
    assert_int_equal(rpc_server_start(s, NULL, 0), SMP_OK); /* no endpoints: nothing listens */
    assert_int_equal(rpc_server_tcp_port(s), -1);
    rpc_server_close(s);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* A listen address that cannot be parsed, or a max_frame_bytes above the
 * limit, is refused with a message. */
static void test_bad_listen_address_refused(void **state)
{
    uv_loop_t loop;
    rpc_server *s = NULL;
    rpc_server_options o;
    char err[256] = "";
    (void)state;
    memset(&o, 0, sizeof(o));
    o.listen_tcp = "not-an-address";
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(rpc_server_create(&loop, &o, &s, err, sizeof(err)), SMP_OK);
    assert_int_equal(rpc_server_start(s, err, sizeof(err)), SMP_EINVAL);
    assert_non_null(strstr(err, "not-an-address"));
    rpc_server_close(s);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    o.listen_tcp = NULL;
    o.max_frame_bytes = RPC_MAX_FRAME_LIMIT + 1;
    s = NULL;
    assert_int_equal(rpc_server_create(&loop, &o, &s, err, sizeof(err)), SMP_ERANGE);
    assert_null(s);
    assert_non_null(strstr(err, "max_frame_bytes"));
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_over_tcp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_trip_over_unix_socket, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_body_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_100_requests_answered_by_id, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deferred_reply_arrives_after_later_immediate_one, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_recv_by_id_keeps_other_responses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_timeout_then_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_service_answered_and_connection_kept, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unknown_method_answered_and_connection_kept, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_handler_error_status_propagated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reply_over_max_frame_becomes_erange, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_refuses_oversized_request, setup, teardown),
        cmocka_unit_test(test_client_connect_errors),
        cmocka_unit_test(test_client_names_a_peer_of_another_protocol),
        cmocka_unit_test(test_unix_connect_to_a_full_backlog_ends_at_its_timeout),
        cmocka_unit_test_setup_teardown(test_truncated_frame_closes_only_that_connection, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_oversized_frame_answered_and_closed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_sees_oversized_refusal_as_erange, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_garbage_body_answered_eproto_and_closed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_zero_length_frame_answered_eproto_and_closed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_good_request_before_bad_frame_is_answered, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_random_bytes_never_crash_the_server, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disconnect_with_deferred_call_outstanding, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_client_vanishing_with_replies_in_flight, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_server_close_with_deferred_call_outstanding, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_max_connections_refuses_extra, setup_limited, teardown),
        cmocka_unit_test_setup_teardown(test_inflight_bound_pauses_reading, setup_limited, teardown),
        cmocka_unit_test_setup_teardown(test_mixed_reply_sizes_stay_framed, setup_limited, teardown),
        cmocka_unit_test_setup_teardown(test_output_bound_pauses_reading, setup_limited, teardown),
        cmocka_unit_test_setup_teardown(test_inflight_cap_refuses_larger_request_keeps_connection,
                                        setup_inflight, teardown),
        cmocka_unit_test_setup_teardown(test_inflight_cap_counts_unanswered_calls, setup_inflight,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_rate_limit_refuses_then_recovers, setup_rate, teardown),
        cmocka_unit_test_setup_teardown(test_tenant_inflight_shared_by_its_connections,
                                        setup_tenant_inflight, teardown),
        cmocka_unit_test(test_add_service_validates_methods),
        cmocka_unit_test(test_bad_listen_address_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
