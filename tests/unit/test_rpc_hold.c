/* test_rpc_hold.c -- answers held back, on the real server of
 * rpc_test_server.h.
 *
 * A standby's NOT_LEADER answers held while no leader is known
 * (rpc_hold.c), the server playing a standby: its admission function turns
 * away every echo request but the counters without naming a leader, and a
 * control service tells it the leader (rpc_server_leader_known on the loop
 * thread, as the master's election report does). Pins: a held request is
 * answered the moment the leader is known, naming it, and the connection
 * goes on; one held for the whole hold is answered that no leader is known;
 * several held on one connection count in flight there; a connection
 * closed while its requests are held loses only their answers; the
 * counters say what was held.
 *
 * A call marked held by its holder (rpc_server_call_hold, as the master
 * marks what waits for a node): an answer to it is refused and the call
 * kept, until the holder clears the mark and answers it.
 *
 * Answers to calls admitted RPC_ADMIT_ASIDE (a stopping master's status and
 * authentication) are not counted as work (rpc_server_ms_since_answer). */
#include "rpc_test_server.h"

#define SVC_CTL 102
#define M_LEADER 1 /* body: the leader's endpoint; rpc_server_leader_known */
#define HOLD_MS 300

static int leader_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    fixture *fx = ctx;
    char ep[128];
    snprintf(ep, sizeof(ep), "%.*s", (int)len, (const char *)body);
    rpc_server_leader_known(fx->srv, ep);
    return rpc_reply(call, SMP_OK, NULL, 0);
}

static const smp_rpc_method ctl_methods[] = {
    {sizeof(smp_rpc_method), M_LEADER, "leader", leader_handler, SMP_ROLE_ADMIN},
};

/* A standby that knows no leader: echo requests are turned away, but for
 * the counters. */
static int standby_admit(void *arg, uint64_t conn, uint32_t service, uint32_t method,
                         const char **leader)
{
    (void)arg;
    (void)conn;
    if (service != SVC_ECHO || method == M_STATS) return 0;
    *leader = "";
    return SMP_ENOTLEADER;
}

static void as_standby(fixture *fx)
{
    assert_int_equal(rpc_server_add_service(fx->srv, SVC_CTL, "ctl", ctl_methods, 1, fx), SMP_OK);
    rpc_server_set_admission(fx->srv, standby_admit, fx);
    rpc_server_set_not_leader_hold(fx->srv, HOLD_MS);
}

static int setup_standby(void **state)
{
    g_before_run = as_standby;
    int rc = fixture_start(state, NULL);
    g_before_run = NULL;
    return rc;
}

/* Send echo request id on the raw connection fd. */
static void send_echo(int fd, uint64_t id)
{
    RpcRequest req = RPC_REQUEST__INIT;
    uint8_t buf[64];
    req.request_id = id;
    req.service = SVC_ECHO;
    req.method = M_ECHO;
    req.body.data = (uint8_t *)"hi";
    req.body.len = 2;
    size_t n = rpc_request__get_packed_size(&req);
    assert_true(n < sizeof(buf) - 4);
    buf[0] = buf[1] = buf[2] = 0;
    buf[3] = (uint8_t)n;
    rpc_request__pack(&req, buf + 4);
    raw_send(fd, buf, 4 + n);
}

/* Tell the server the leader is at ep, over a connection of its own. */
static void leader_known(fixture *fx, const char *ep)
{
    rpcc_conn *c = open_client(fx->tcp_ep);
    int status = 1;
    assert_int_equal(rpcc_call(c, SVC_CTL, M_LEADER, (const uint8_t *)ep, strlen(ep), &status, NULL,
                               NULL, NULL),
                     SMP_OK);
    assert_int_equal(status, 0);
    rpcc_close(c);
}

/* The next answer on fd: NOT_LEADER for request id, naming leader. */
static void expect_not_leader(int fd, uint64_t id, const char *leader)
{
    RpcResponse *m = raw_read_response(fd);
    assert_int_equal(m->request_id, id);
    assert_int_equal(m->status, SMP_ENOTLEADER);
    assert_string_equal(m->leader, leader);
    if (leader[0] == '\0') assert_non_null(strstr(m->error, "no leader is known yet"));
    else assert_non_null(strstr(m->error, leader));
    rpc_response__free_unpacked(m, NULL);
}

static void test_a_held_answer_names_the_leader_once_known(void **state)
{
    fixture *fx = *state;
    int fd = raw_connect(fx);
    for (uint64_t id = 11; id <= 12; id++) { /* the connection goes on after an answer */
        send_echo(fd, id);
        wait_stat(fx, STAT(not_leader_held_now), 1);
        leader_known(fx, "10.0.0.9:7600");
        expect_not_leader(fd, id, "10.0.0.9:7600");
    }
    rpc_server_stats st = get_stats(fx);
    assert_int_equal(st.not_leader_held, 2);
    assert_int_equal(st.not_leader_held_now, 0);
    assert_int_equal(st.not_leader, 2);
    close(fd);
}

static void test_a_request_held_the_whole_hold_hears_no_leader(void **state)
{
    fixture *fx = *state;
    int fd = raw_connect(fx);
    send_echo(fd, 21);
    expect_not_leader(fd, 21, ""); /* after HOLD_MS, nobody having named a leader */
    rpc_server_stats st = get_stats(fx);
    assert_int_equal(st.not_leader_held, 1);
    assert_int_equal(st.not_leader_held_now, 0);
    /* a leader known later has nothing left to answer */
    leader_known(fx, "10.0.0.9:7600");
    send_echo(fd, 22);
    wait_stat(fx, STAT(not_leader_held_now), 1);
    leader_known(fx, "10.0.0.8:7600");
    expect_not_leader(fd, 22, "10.0.0.8:7600");
    close(fd);
}

/* Requests held on a connection that closes lose their answers and
 * nothing else: the server still holds and answers others. */
static void test_a_closed_connection_loses_only_its_held_answers(void **state)
{
    fixture *fx = *state;
    int gone = raw_connect(fx), fd = raw_connect(fx);
    send_echo(gone, 31);
    send_echo(gone, 32);
    wait_stat(fx, STAT(not_leader_held_now), 2);
    close(gone);
    send_echo(fd, 33);
    wait_stat(fx, STAT(not_leader_held_now), 3);
    rpc_server_stats before = get_stats(fx);
    leader_known(fx, "10.0.0.7:7600");
    expect_not_leader(fd, 33, "10.0.0.7:7600");
    rpc_server_stats st = get_stats(fx);
    assert_int_equal(st.not_leader_held_now, 0);
    assert_int_equal(st.not_leader_held, 3);
    assert_true(st.replies_dropped >= before.replies_dropped + 2);
    close(fd);
}

/* -- a call marked held ---------------------------------------------------- */

#define SVC_MARK 103
#define M_MARK 1    /* marks the call held, answers it anyway, keeps it */
#define M_UNMARK 2  /* clears the mark of the kept call, answers it, then itself */

static atomic_int mark_reply_rc; /* what M_MARK's answer got */

static int mark_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    fixture *fx = ctx;
    (void)body, (void)len;
    rpc_server_call_hold(call, 1);
    atomic_store(&mark_reply_rc, rpc_reply(call, SMP_OK, (const uint8_t *)"early", 5));
    fx->held = call;
    return SMP_OK;
}

static int unmark_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    fixture *fx = ctx;
    (void)body, (void)len;
    if (fx->held == NULL) return SMP_ENOTFOUND;
    rpc_server_call_hold(fx->held, 0);
    rpc_reply(fx->held, SMP_OK, (const uint8_t *)"released", 8);
    fx->held = NULL;
    return rpc_reply(call, SMP_OK, NULL, 0);
}

static const smp_rpc_method mark_methods[] = {
    {sizeof(smp_rpc_method), M_MARK, "mark", mark_handler, SMP_ROLE_ADMIN},
    {sizeof(smp_rpc_method), M_UNMARK, "unmark", unmark_handler, SMP_ROLE_ADMIN},
};

static void with_marks(fixture *fx)
{
    assert_int_equal(rpc_server_add_service(fx->srv, SVC_MARK, "mark", mark_methods, 2, fx), SMP_OK);
}

static int setup_marks(void **state)
{
    g_before_run = with_marks;
    int rc = fixture_start(state, NULL);
    g_before_run = NULL;
    return rc;
}

/* A handler that marks its call held and answers it anyway is refused
 * (SMP_EBUSY) and the call stays: nothing reaches the client, the call
 * still counts outstanding, and once the mark is cleared the holder's
 * answer is the one the client gets. */
static void test_an_answer_to_a_held_call_is_refused_and_the_call_kept(void **state)
{
    fixture *fx = *state;
    atomic_store(&mark_reply_rc, 1);
    int fd = raw_connect(fx);
    RpcRequest req = RPC_REQUEST__INIT;
    uint8_t buf[64];
    req.request_id = 41;
    req.service = SVC_MARK;
    req.method = M_MARK;
    size_t n = rpc_request__get_packed_size(&req);
    buf[0] = buf[1] = buf[2] = 0;
    buf[3] = (uint8_t)n;
    rpc_request__pack(&req, buf + 4);
    raw_send(fd, buf, 4 + n);
    wait_stat(fx, STAT(calls_outstanding), 1);
    assert_int_equal(atomic_load(&mark_reply_rc), SMP_EBUSY);

    rpcc_conn *c = open_client(fx->tcp_ep);
    int status = 1;
    assert_int_equal(rpcc_call(c, SVC_MARK, M_UNMARK, NULL, 0, &status, NULL, NULL, NULL), SMP_OK);
    assert_int_equal(status, 0);
    rpcc_close(c);
    RpcResponse *m = raw_read_response(fd);
    assert_int_equal(m->request_id, 41);
    assert_int_equal(m->status, 0);
    assert_int_equal(m->body.len, 8);
    assert_memory_equal(m->body.data, "released", 8);
    rpc_response__free_unpacked(m, NULL);
    wait_stat(fx, STAT(calls_outstanding), 0);
    close(fd);
}

/* -- answers aside -------------------------------------------------------- */

#define SVC_QUIET 104
#define M_QUIET 1 /* answers rpc_server_ms_since_answer, 8 bytes */

static int quiet_handler(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    fixture *fx = ctx;
    (void)body;
    (void)len;
    uint64_t ms = rpc_server_ms_since_answer(fx->srv);
    return rpc_reply(call, SMP_OK, (const uint8_t *)&ms, sizeof(ms));
}

static const smp_rpc_method quiet_methods[] = {
    {sizeof(smp_rpc_method), M_QUIET, "quiet", quiet_handler, SMP_ROLE_ADMIN},
};

/* A stopping master's admission, in small: the quiet question is admitted
 * aside, everything else as work. */
static int aside_admit(void *arg, uint64_t conn, uint32_t service, uint32_t method,
                       const char **named)
{
    (void)arg;
    (void)conn;
    (void)method;
    (void)named;
    return service == SVC_QUIET ? RPC_ADMIT_ASIDE : 0;
}

static void with_aside(fixture *fx)
{
    assert_int_equal(rpc_server_add_service(fx->srv, SVC_QUIET, "quiet", quiet_methods, 1, fx),
                     SMP_OK);
    rpc_server_set_admission(fx->srv, aside_admit, fx);
}

static int setup_aside(void **state)
{
    g_before_run = with_aside;
    int rc = fixture_start(state, NULL);
    g_before_run = NULL;
    return rc;
}

static uint64_t ms_since_answer(rpcc_conn *c)
{
    int status = 1;
    uint8_t *body = NULL;
    size_t len = 0;
    uint64_t ms;
    assert_int_equal(rpcc_call(c, SVC_QUIET, M_QUIET, NULL, 0, &status, &body, &len, NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_int_equal(len, sizeof(ms));
    memcpy(&ms, body, sizeof(ms));
    free(body);
    return ms;
}

/* Answers to calls admitted RPC_ADMIT_ASIDE are not counted as work: a
 * server that answered only those has answered nothing
 * (rpc_server_ms_since_answer says UINT64_MAX), and the first answer to
 * another call counts. */
static void test_answers_aside_are_not_counted_as_work(void **state)
{
    fixture *fx = *state;
    rpcc_conn *c = open_client(fx->tcp_ep);
    assert_true(ms_since_answer(c) == UINT64_MAX);
    assert_true(ms_since_answer(c) == UINT64_MAX); /* the first one's answer did not count */
    int status = 1;
    assert_int_equal(rpcc_call(c, SVC_ECHO, M_ECHO, (const uint8_t *)"hi", 2, &status, NULL, NULL,
                               NULL), SMP_OK);
    assert_int_equal(status, 0);
    assert_true(ms_since_answer(c) != UINT64_MAX);
    rpcc_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_held_answer_names_the_leader_once_known,
                                        setup_standby, teardown),
        cmocka_unit_test_setup_teardown(test_a_request_held_the_whole_hold_hears_no_leader,
                                        setup_standby, teardown),
        cmocka_unit_test_setup_teardown(test_a_closed_connection_loses_only_its_held_answers,
                                        setup_standby, teardown),
        cmocka_unit_test_setup_teardown(test_an_answer_to_a_held_call_is_refused_and_the_call_kept,
                                        setup_marks, teardown),
        cmocka_unit_test_setup_teardown(test_answers_aside_are_not_counted_as_work, setup_aside,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
