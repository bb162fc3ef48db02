/* test_bad_frames.c -- bad input on one connection never harms another.
 *
 * One real store_master (listen.max_frame_bytes 65536) serves a good client A
 * for the whole program. Each test opens a second connection B and sends one
 * kind of bad input: a frame cut short by a close, a frame longer than
 * max_frame_bytes, a body that is not an RpcRequest, a zero-length frame
 * (each of those is fatal for B: one error response with request_id 0 naming
 * the cause, then the master closes B), or a well-formed envelope with an
 * unknown method, an unknown service or a body that does not decode for its
 * method (each answered with an error, and B stays usable), including the
 * weight plugin's identity reads, which decode on the master's stack. After every case
 * the master is alive, holds the same objects as before, and A is served: a
 * status call and a put/get round trip.
 *
 * Fatal cases are observed twice: through rpc_client (rpcc_send_raw, then
 * the refusal as the client library reports it) and through a plain socket,
 * which is the only way to see that the master really closed B. */
#include <errno.h>
#include <poll.h>
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

#include "harness.h"
#include "host_rpc.pb-c.h"
#include "rpc.pb-c.h"
#include "rpc_client.h"
#include "weight_rpc.pb-c.h"

#define MAX_FRAME 65536
#define WAIT_MS 10000 /* generous bound for an asynchronous effect */

typedef struct fixture {
    hx_master m;
    kvc *a;           /* the good client, connected before any bad input */
    int round;        /* makes each round trip's key unique */
} fixture;

/* -- frames ------------------------------------------------------------------- */

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* -- a plain socket, to see what the master does with B ------------------------ */

static int raw_connect(const char *path)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    assert_true(strlen(path) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, path, strlen(path));
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static void raw_send(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        assert_true(w > 0);
        p += w;
        n -= (size_t)w;
    }
}

/* Read until the master closes the connection (end of stream, or a reset
 * because it closed with our bytes unread); fail if it stays open for
 * WAIT_MS. Returns what arrived before (malloc'd, *n bytes). */
static uint8_t *raw_read_until_closed(int fd, size_t *n)
{
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    assert_non_null(buf);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, WAIT_MS);
        if (r < 0 && errno == EINTR) continue;
        assert_true(r > 0); /* r == 0: the master kept the connection open */
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        ssize_t k = recv(fd, buf + len, cap - len, 0);
        if (k == 0 || (k < 0 && errno == ECONNRESET)) break;
        if (k < 0 && errno == EINTR) continue;
        assert_true(k > 0);
        len += (size_t)k;
    }
    *n = len;
    return buf;
}

/* The master's answer on a connection it refused: exactly one frame, an
 * RpcResponse with request_id 0, this status, and a message holding both
 * needles; then the connection was closed. */
static void expect_raw_refusal(const char *socket, const uint8_t *bytes, size_t len, int status,
                               const char *needle1, const char *needle2)
{
    int fd = raw_connect(socket);
    raw_send(fd, bytes, len);
    size_t n = 0;
    uint8_t *in = raw_read_until_closed(fd, &n);
    close(fd);
    assert_true(n >= 4);
    uint32_t flen = (uint32_t)in[0] << 24 | (uint32_t)in[1] << 16 | (uint32_t)in[2] << 8 | in[3];
    assert_int_equal(n, 4 + (size_t)flen); /* one frame, nothing after it */
    RpcResponse *resp = rpc_response__unpack(NULL, flen, in + 4);
    assert_non_null(resp);
    assert_int_equal(resp->request_id, 0);
    assert_int_equal(resp->status, status);
    assert_non_null(strstr(resp->error, needle1));
    assert_non_null(strstr(resp->error, needle2));
    rpc_response__free_unpacked(resp, NULL);
    free(in);
}

/* The same bytes through the client library: the refusal is the return code
 * of the next receive and its message the connection's last error. */
static void expect_rpcc_refusal(const char *socket, const uint8_t *bytes, size_t len, int status,
                                const char *needle)
{
    char err[256];
    rpcc_conn *b = NULL;
    rpcc_options opt = {.timeout_ms = WAIT_MS};
    assert_int_equal(rpcc_connect(socket, &opt, &b, err, sizeof(err)), 0);
    assert_int_equal(rpcc_send_raw(b, bytes, len), 0);
    int st = 0;
    assert_int_equal(rpcc_recv(b, 0, NULL, &st, NULL, NULL, NULL), status);
    assert_non_null(strstr(rpcc_last_error(b), needle));
    /* The stream is unusable after a refusal: later calls fail at once. */
    assert_int_equal(rpcc_call(b, HOST_SERVICE__HOST_SERVICE_ADMIN, ADMIN_METHOD__ADMIN_STATUS,
                               NULL, 0, &st, NULL, NULL, NULL),
                     status);
    rpcc_close(b);
}

/* -- what must hold after every case ------------------------------------------ */

static uint64_t object_count(fixture *f)
{
    kvc_status st;
    assert_int_equal(kvc_status_get(f->a, &st), 0);
    return st.objects;
}

/* The master is alive, still holds `objects` objects, and serves A. */
static void assert_a_served(fixture *f, uint64_t objects)
{
    char key[64], content[64];
    unsigned char sha[32];
    kvc_replica where;
    kvc_object obj;
    assert_true(hx_alive(&f->m));
    assert_int_equal(object_count(f), objects);
    snprintf(key, sizeof(key), "a/round-%d", ++f->round);
    snprintf(content, sizeof(content), "content of round %d", f->round);
    hx_sha256(content, strlen(content), sha);
    assert_int_equal(kvc_put_start(f->a, key, strlen(content), SMP_DATA_KV, NULL, 0, &where), 0);
    assert_int_equal(kvc_put_end(f->a, key, sha, NULL), 0);
    assert_int_equal(kvc_get(f->a, key, &obj), 0);
    assert_int_equal(obj.size, strlen(content));
    assert_memory_equal(obj.sha256, sha, 32);
    assert_int_equal(object_count(f), objects + 1);
}

/* B is still usable: a status call on it is answered. */
static void assert_b_usable(rpcc_conn *b)
{
    int st = -1;
    uint8_t *body = NULL;
    size_t len = 0;
    assert_int_equal(rpcc_call(b, HOST_SERVICE__HOST_SERVICE_ADMIN, ADMIN_METHOD__ADMIN_STATUS,
                               NULL, 0, &st, &body, &len, NULL),
                     0);
    assert_int_equal(st, 0);
    StatusResponse *resp = status_response__unpack(NULL, len, body);
    assert_non_null(resp);
    assert_string_equal(resp->role, "active");
    status_response__free_unpacked(resp, NULL);
    free(body);
}

/* Send one envelope on a fresh B and return the master's answer to it. */
static void send_envelope(const char *socket, uint32_t service, uint32_t method,
                          const uint8_t *body, size_t body_len, int *status, char **errmsg,
                          rpcc_conn **b_out)
{
    char err[256];
    rpcc_conn *b = NULL;
    rpcc_options opt = {.timeout_ms = WAIT_MS};
    size_t len = 0;
    uint8_t *frame = hx_frame_request(4242, service, method, body, body_len, &len);
    assert_non_null(frame);
    assert_int_equal(rpcc_connect(socket, &opt, &b, err, sizeof(err)), 0);
    assert_int_equal(rpcc_send_raw(b, frame, len), 0);
    uint64_t got = 0;
    assert_int_equal(rpcc_recv(b, 4242, &got, status, NULL, NULL, errmsg), 0);
    assert_int_equal(got, 4242);
    free(frame);
    *b_out = b;
}

/* -- fixture ---------------------------------------------------------------- */

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (f == NULL || hx_init(&f->m, "badframes", NULL) < 0) return -1;
    snprintf(f->m.listen_extra, sizeof(f->m.listen_extra), "  max_frame_bytes: %d\n", MAX_FRAME);
    if (hx_reconfigure(&f->m, NULL) < 0 || hx_start(&f->m, 10000) < 0) goto fail;
    if ((f->a = hx_client(&f->m)) == NULL) goto fail;
    *state = f;
    return 0;
fail:
    hx_cleanup(&f->m);
    free(f);
    return -1;
}

static int teardown(void **state)
{
    fixture *f = *state;
    int rc = 0;
    if (f == NULL) return -1; /* setup failed and cleaned up */
    kvc_close(f->a);
    if (hx_stop(&f->m) != 0) {
        fprintf(stderr, "the master did not shut down cleanly\n");
        rc = -1;
    }
    hx_cleanup(&f->m);
    free(f);
    return rc;
}

/* -- tests ---------------------------------------------------------------------- */

/* A client that announces 100 bytes, sends 10 and hangs up costs the master
 * only that connection. */
static void test_truncated_frame_closes_only_that_connection(void **state)
{
    fixture *f = *state;
    uint64_t before = object_count(f);
    uint8_t bytes[14];
    put_be32(bytes, 100);
    memset(bytes + 4, 0x0a, 10);
    int fd = raw_connect(f->m.socket);
    raw_send(fd, bytes, sizeof(bytes));
    close(fd);
    /* The same through the client library, which then closes too. */
    char err[256];
    rpcc_conn *b = NULL;
    assert_int_equal(rpcc_connect(f->m.socket, NULL, &b, err, sizeof(err)), 0);
    assert_int_equal(rpcc_send_raw(b, bytes, sizeof(bytes)), 0);
    rpcc_close(b);
    assert_a_served(f, before);
}

/* A frame longer than listen.max_frame_bytes is refused before its body is
 * read: SMP_ERANGE naming both sizes, then the connection is closed. */
static void test_oversized_frame_is_refused_naming_sizes_and_closed(void **state)
{
    fixture *f = *state;
    uint64_t before = object_count(f);
    uint8_t hdr[4 + 16];
    put_be32(hdr, MAX_FRAME + 1);
    memset(hdr + 4, 0, 16);
    expect_raw_refusal(f->m.socket, hdr, sizeof(hdr), SMP_ERANGE, "65537", "65536");
    expect_rpcc_refusal(f->m.socket, hdr, 4, SMP_ERANGE,
                        "frame of 65537 bytes exceeds max_frame_bytes 65536");
    assert_a_served(f, before);
}

/* Bytes that are not an RpcRequest: SMP_EPROTO, then closed. */
static void test_garbage_frame_body_is_refused_and_closed(void **state)
{
    fixture *f = *state;
    uint64_t before = object_count(f);
    uint8_t bytes[4 + 16];
    put_be32(bytes, 16);
    memset(bytes + 4, 0xff, 16); /* an endless varint: never a valid message */
    expect_raw_refusal(f->m.socket, bytes, sizeof(bytes), SMP_EPROTO, "16 bytes",
                       "does not decode as RpcRequest");
    expect_rpcc_refusal(f->m.socket, bytes, sizeof(bytes), SMP_EPROTO,
                        "does not decode as RpcRequest");
    assert_a_served(f, before);
}

/* A frame of length zero carries no request: SMP_EPROTO, then closed. */
static void test_zero_length_frame_is_refused_and_closed(void **state)
{
    fixture *f = *state;
    uint64_t before = object_count(f);
    uint8_t bytes[4] = {0, 0, 0, 0};
    expect_raw_refusal(f->m.socket, bytes, sizeof(bytes), SMP_EPROTO, "zero-length", "frame");
    expect_rpcc_refusal(f->m.socket, bytes, sizeof(bytes), SMP_EPROTO, "zero-length frame");
    assert_a_served(f, before);
}

/* An unknown method of the objects service is answered SMP_ENOTFOUND naming
 * the service and the method; the connection stays usable. */
static void test_unknown_method_is_not_found_and_connection_stays_open(void **state)
{
    fixture *f = *state;
    uint64_t before = object_count(f);
    int status = 0;
    char *msg = NULL;
    rpcc_conn *b = NULL;
    send_envelope(f->m.socket, HOST_SERVICE__HOST_SERVICE_OBJECTS, 99, NULL, 0, &status, &msg, &b);
    assert_int_equal(status, SMP_ENOTFOUND);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "service 1 (objects) has no method 99"));
    free(msg);
    assert_b_usable(b);
    rpcc_close(b);
    assert_a_served(f, before);
}

/* A service nobody registered is answered SMP_ENOTFOUND naming it; the
 * connection stays usable. */
static void test_unknown_service_is_not_found_and_connection_stays_open(void **state)
{
    fixture *f = *state;
    uint64_t before = object_count(f);
    int status = 0;
    char *msg = NULL;
    rpcc_conn *b = NULL;
    send_envelope(f->m.socket, 77, 1, NULL, 0, &status, &msg, &b);
    assert_int_equal(status, SMP_ENOTFOUND);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "unknown service 77"));
    free(msg);
    assert_b_usable(b);
    rpcc_close(b);
    assert_a_served(f, before);
}

/* A valid envelope whose body is not the method's message is answered
 * SMP_EPROTO naming the expected message; nothing is put, and the
 * connection stays usable. */
static void test_undecodable_method_body_is_eproto_and_connection_stays_open(void **state)
{
    fixture *f = *state;
    uint64_t before = object_count(f);
    int status = 0;
    char *msg = NULL;
    rpcc_conn *b = NULL;
    uint8_t garbage[8];
    memset(garbage, 0xff, sizeof(garbage));
    send_envelope(f->m.socket, HOST_SERVICE__HOST_SERVICE_OBJECTS, OBJECTS_METHOD__OBJ_PUT_START,
                  garbage, sizeof(garbage), &status, &msg, &b);
    assert_int_equal(status, SMP_EPROTO);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "does not decode as PutStartRequest"));
    free(msg);
    assert_b_usable(b);
    rpcc_close(b);
    assert_a_served(f, before);
}

/* The one-key object RPCs (their KeyRequest is decoded by hand) answer a
 * body that does not decode SMP_EPROTO naming the message, and a key past
 * the decoder's inline room whole: a remove of an absent 300-byte key is
 * SMP_ENOTFOUND naming all of it. Nothing changes, each connection stays
 * usable, A is served. */
static void test_key_requests_refuse_bad_bodies_and_stay_open(void **state)
{
    fixture *f = *state;
    uint64_t before = object_count(f);
    const uint32_t methods[4] = {OBJECTS_METHOD__OBJ_REMOVE, OBJECTS_METHOD__OBJ_PUT_REVOKE,
                                 OBJECTS_METHOD__OBJ_GET_REPLICAS, OBJECTS_METHOD__OBJ_EXISTS};
    const uint8_t bad[3][4] = {{0x08, 0x05}, {0x0a, 0x05, 'a', 'b'}, {0xff, 0xff, 0xff, 0xff}};
    const size_t bad_len[3] = {2, 4, 4}; /* the key as a varint, past the end, a bad tag */
    int status = 0;
    char *msg = NULL;
    rpcc_conn *b = NULL;
    for (int i = 0; i < 4; i++) {
        for (int k = 0; k < 3; k++) {
            send_envelope(f->m.socket, HOST_SERVICE__HOST_SERVICE_OBJECTS, methods[i], bad[k],
                          bad_len[k], &status, &msg, &b);
            assert_int_equal(status, SMP_EPROTO);
            assert_non_null(msg);
            if (strstr(msg, "does not decode as KeyRequest") == NULL)
                fail_msg("method %u, body %d: %s", methods[i], k, msg);
            free(msg);
            msg = NULL;
            assert_b_usable(b);
            rpcc_close(b);
        }
    }
    char key[301];
    memset(key, 'k', 300);
    key[300] = '\0';
    KeyRequest req = KEY_REQUEST__INIT;
    req.key = key;
    uint8_t body[320];
    size_t len = key_request__get_packed_size(&req);
    assert_true(len <= sizeof(body));
    key_request__pack(&req, body);
    send_envelope(f->m.socket, HOST_SERVICE__HOST_SERVICE_OBJECTS, OBJECTS_METHOD__OBJ_REMOVE, body,
                  len, &status, &msg, &b);
    assert_int_equal(status, SMP_ENOTFOUND);
    assert_non_null(msg);
    assert_non_null(strstr(msg, key));
    free(msg);
    assert_b_usable(b);
    rpcc_close(b);
    assert_a_served(f, before);
}

/* One request of the weight service (16) on B with a raw body: the status
 * and the plugin's message (its reply body, NUL-terminated; caller frees). */
static void weight_call(rpcc_conn *b, uint64_t id, uint32_t method, const uint8_t *body,
                        size_t body_len, int *status, char **text)
{
    size_t len = 0;
    uint8_t *frame = hx_frame_request(id, 16, method, body, body_len, &len);
    uint8_t *rbody = NULL;
    size_t rlen = 0;
    uint64_t got = 0;
    assert_non_null(frame);
    assert_int_equal(rpcc_send_raw(b, frame, len), 0);
    free(frame);
    assert_int_equal(rpcc_recv(b, id, &got, status, &rbody, &rlen, NULL), 0);
    assert_int_equal(got, id);
    *text = calloc(1, rlen + 1);
    assert_non_null(*text);
    if (rlen > 0) memcpy(*text, rbody, rlen);
    free(rbody);
}

/* The identity reads (GET_METADATA, IS_EXIST, GET_SIZE) decode their
 * request into an arena on the master's stack: a body that is no
 * IdentityRequest is SMP_EPROTO naming the message; one larger than the
 * arena (a 3,000-byte resource id, decoded partly from malloc) is decoded
 * all the same and refused as an invalid identity. B stays usable, nothing
 * changes, A is served. */
static void test_identity_reads_refuse_bad_bodies_and_stay_open(void **state)
{
    fixture *f = *state;
    uint64_t before = object_count(f);
    const uint32_t methods[3] = {WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA,
                                 WMRPC__WEIGHT_METHOD__WEIGHT_IS_EXIST,
                                 WMRPC__WEIGHT_METHOD__WEIGHT_GET_SIZE};
    char err[256], *text = NULL, big[3001];
    rpcc_options opt = {.timeout_ms = WAIT_MS};
    rpcc_conn *b = NULL;
    uint8_t garbage[8];
    int status = 0;
    memset(garbage, 0xff, sizeof(garbage));
    memset(big, 'r', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    Wmrpc__WeightIdentity wid = WMRPC__WEIGHT_IDENTITY__INIT;
    Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
    wid.namespace_id = "ns";
    wid.resource_id = big;
    wid.revision = "r1";
    wid.generation = 1;
    req.identity = &wid;
    size_t len = wmrpc__identity_request__get_packed_size(&req);
    uint8_t *packed = malloc(len);
    assert_non_null(packed);
    wmrpc__identity_request__pack(&req, packed);
    assert_int_equal(rpcc_connect(f->m.socket, &opt, &b, err, sizeof(err)), 0);
    for (int i = 0; i < 3; i++) {
        weight_call(b, 100 + (uint64_t)i, methods[i], garbage, sizeof(garbage), &status, &text);
        assert_int_equal(status, SMP_EPROTO);
        assert_non_null(strstr(text, "does not decode as Wmrpc__IdentityRequest"));
        free(text);
        weight_call(b, 200 + (uint64_t)i, methods[i], packed, len, &status, &text);
        assert_int_not_equal(status, 0);
        assert_non_null(strstr(text, "invalid identity"));
        assert_non_null(strstr(text, "3000 bytes"));
        free(text);
    }
    free(packed);
    assert_b_usable(b);
    rpcc_close(b);
    assert_a_served(f, before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncated_frame_closes_only_that_connection),
        cmocka_unit_test(test_oversized_frame_is_refused_naming_sizes_and_closed),
        cmocka_unit_test(test_garbage_frame_body_is_refused_and_closed),
        cmocka_unit_test(test_zero_length_frame_is_refused_and_closed),
        cmocka_unit_test(test_unknown_method_is_not_found_and_connection_stays_open),
        cmocka_unit_test(test_unknown_service_is_not_found_and_connection_stays_open),
        cmocka_unit_test(test_undecodable_method_body_is_eproto_and_connection_stays_open),
        cmocka_unit_test(test_identity_reads_refuse_bad_bodies_and_stay_open),
        cmocka_unit_test(test_key_requests_refuse_bad_bodies_and_stay_open),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
