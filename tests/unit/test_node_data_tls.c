/* test_node_data_tls.c -- the node's TLS 1.3 data port and its client when
 * the other side goes away mid-transfer, and ranges that cross the node's
 * record and chunk bounds.
 *
 * Real processes over real loopback sockets: the data server runs in a
 * forked child on its own libuv loop with a self-signed P-256 certificate
 * made by the openssl CLI in the test's directory; clients run in this
 * process or in forked children whose SIGPIPE is the default action (so a
 * write to a closed socket that raised it would kill them).
 *   - a node killed mid-write: the writing client gets SMP_EIO with a
 *     sentence naming the send, and lives;
 *   - a node killed between two reads of one connection: the client gets
 *     SMP_EIO and lives;
 *   - a client gone mid-read (its socket closed with a range half sent):
 *     the node lives and serves the next client byte for byte;
 *   - ranges of 0, 1, a record +-1, a chunk +-1 and odd offsets read back
 *     exactly what a ticketed write put there;
 *   - a cold file of three chunks and a bit, whole and in a range across
 *     its chunks, comes back exactly. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <uv.h>

#include "node_data.h"
#include "node_data_client.h"
#include "node_data_wire.h"
#include "wc_tls.h"

#define SEG_BYTES (24u << 20)
#define PIECE (64u << 10)
#define COLD_BYTES ((3u << 20) + 5) /* three of the node's cold chunks and a bit */

static char g_dir[256], g_cert[320], g_key[320], g_cold[320];
static char g_cold_name[COLD_NAME_MAX];
static ticket_keyring g_keys;
static pid_t g_node_pid;        /* the node running now, killed by teardown if a test failed */

typedef struct node {
    pid_t pid;
    int reaped;             /* killed and reaped at a client's request */
    int ask, done;          /* a client child: ask the test to kill the node, hear it did */
    char endpoint[64];
} node;

static uint8_t byte_at(uint64_t i)
{
    return (uint8_t)((i * 2654435761u) >> 13);
}

/* Child: serve a fresh segment "seg" and the cold tier g_cold over TLS;
 * the port goes to fd. */
static void node_main(int fd)
{
    uv_loop_t loop;
    data_server *srv;
    seg_segment *seg;
    cold_tier *ct = NULL;
    SSL_CTX *tls = NULL;
    char err[256];
    seg_options so = { .dir = g_dir, .id = "seg", .size = SEG_BYTES };
    data_server_options o = { .listen_tcp = "127.0.0.1:0", .keys = &g_keys };
    int port;
    if (seg_open(&so, &seg, err, sizeof(err)) < 0 || cold_open(g_cold, &ct, err, sizeof(err)) < 0 ||
        data_server_tls_ctx(g_cert, g_key, NULL, &tls, err, sizeof(err)) < 0)
        _exit(2);
    for (uint64_t i = 0; i < SEG_BYTES; i++)
        ((uint8_t *)seg_ptr(seg, 0, SEG_BYTES))[i] = byte_at(i);
    o.tls = tls;
    if (uv_loop_init(&loop) != 0 || data_server_create(&loop, &o, &srv, err, sizeof(err)) < 0 ||
        data_server_add_segment(srv, seg) < 0 || data_server_start(srv, err, sizeof(err)) < 0)
        _exit(3);
    data_server_set_cold(srv, ct, NULL);
    port = data_server_tcp_port(srv);
    if (write(fd, &port, sizeof(port)) != sizeof(port))
        _exit(4);
    close(fd);
    uv_run(&loop, UV_RUN_DEFAULT);
    _exit(0);
}

static void node_start(node *n)
{
    int ports[2], port = 0;
    memset(n, 0, sizeof(*n));
    assert_int_equal(pipe(ports), 0);
    n->pid = fork();
    assert_true(n->pid >= 0);
    if (n->pid == 0) {
        close(ports[0]);
        node_main(ports[1]);
    }
    g_node_pid = n->pid;
    close(ports[1]);
    assert_int_equal(read(ports[0], &port, sizeof(port)), (ssize_t)sizeof(port));
    close(ports[0]);
    snprintf(n->endpoint, sizeof(n->endpoint), "127.0.0.1:%d", port);
}

/* Have the test process kill the node and reap it, and wait until it has:
 * from then on the node's sockets are closed. Called in a client child. */
static void node_kill(node *n)
{
    char x = 'k';
    if (write(n->ask, &x, 1) != 1 || read(n->done, &x, 1) != 1)
        _exit(5);
}

/* In the test process while a client child runs: kill and reap the node
 * when the child asks, then tell it. */
static void serve_kill(node *n, int ask_rd, int done_wr)
{
    char x;
    int st;
    if (read(ask_rd, &x, 1) == 1) {
        kill(n->pid, SIGKILL);
        waitpid(n->pid, &st, 0);
        n->reaped = 1;
        g_node_pid = 0;
        if (write(done_wr, &x, 1) != 1)
            fail_msg("cannot tell the client the node is gone");
    }
}

/* Stop the node (if still running) and reap it; 1 when it was alive. */
static int node_stop(node *n)
{
    int st = 0, alive;
    if (n->reaped)
        return 0;
    alive = waitpid(n->pid, &st, WNOHANG) == 0;
    kill(n->pid, SIGKILL);
    waitpid(n->pid, &st, 0);
    g_node_pid = 0;
    return alive; /* the segment file stays for the next node; teardown removes it */
}

static ndc_conn *tls_connect(const node *n)
{
    SSL_CTX *ctx = NULL;
    ndc_conn *c = NULL;
    char err[256];
    ndc_options o = { .timeout_ms = 10000, .tls = 1 };
    if (wc_tls_client_ctx(g_cert, NULL, NULL, &ctx, err, sizeof(err)) < 0 || ctx == NULL)
        return NULL;
    o.tls_ctx = ctx;
    if (ndc_connect(n->endpoint, &o, &c, err, sizeof(err)) < 0)
        c = NULL;
    SSL_CTX_free(ctx);
    return c;
}

/* A ticket for op on [off, +len) of segment (or cold file) what. */
static size_t mint_for(const char *what, uint8_t op, uint64_t off, uint64_t len, uint8_t *out)
{
    ticket_claims cl;
    size_t n = 0;
    memset(&cl, 0, sizeof(cl));
    cl.op = op;
    cl.key_id = g_keys.current_id;
    snprintf(cl.segment, sizeof(cl.segment), "%s", what);
    snprintf(cl.key, sizeof(cl.key), "obj");
    cl.offset = off;
    cl.length = len;
    cl.expiry_ms = ticket_now_ms() + 600000;
    if (ticket_mint(&g_keys.current, &cl, out, TICKET_MAX_BYTES, &n) < 0)
        return 0;
    return n;
}

static size_t mint(uint8_t op, uint64_t off, uint64_t len, uint8_t *out)
{
    return mint_for("seg", op, off, len, out);
}

/* What a client child reports to the test through a pipe. */
typedef struct outcome {
    int rc;
    char msg[256];
} outcome;

/* Run fn(n, out) in a forked child with SIGPIPE at its default action; its
 * outcome into *out. Fails the test when the child died of a signal. */
static void in_child(node *n, void (*fn)(node *, outcome *), outcome *out)
{
    int fds[2], ask[2], done[2], st = 0;
    pid_t pid;
    assert_int_equal(pipe(fds), 0);
    assert_int_equal(pipe(ask), 0);
    assert_int_equal(pipe(done), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        outcome o = { .rc = -9999 };
        close(fds[0]);
        close(ask[0]);
        close(done[1]);
        n->ask = ask[1];
        n->done = done[0];
        signal(SIGPIPE, SIG_DFL);
        fn(n, &o);
        _exit(write(fds[1], &o, sizeof(o)) == sizeof(o) ? 0 : 1);
    }
    close(fds[1]);
    close(ask[1]);
    close(done[0]);
    serve_kill(n, ask[0], done[1]); /* returns at once when the child exits without asking */
    close(ask[0]);
    close(done[1]);
    memset(out, 0, sizeof(*out));
    ssize_t got = read(fds[0], out, sizeof(*out));
    close(fds[0]);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (WIFSIGNALED(st))
        fail_msg("the client process was killed by signal %d (%s)", WTERMSIG(st),
                 strsignal(WTERMSIG(st)));
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(got, (ssize_t)sizeof(*out));
}

/* fn in a client child (in_child) against a node of its own, stopped
 * after; the child must have got SMP_EIO with needle in its message. */
static void expect_eio(void (*fn)(node *, outcome *), const char *needle, outcome *out)
{
    node n;
    node_start(&n);
    in_child(&n, fn, out);
    node_stop(&n);
    assert_int_equal(out->rc, SMP_EIO);
    assert_non_null(strstr(out->msg, needle));
}

/* The source of the mid-write kill: the first piece kills the node; every
 * piece is PIECE bytes of zeros. */
typedef struct killer {
    node *n;
    int calls;
    uint8_t piece[PIECE];
} killer;

static int next_after_kill(void *ctx, const void **data, size_t *len)
{
    killer *k = ctx;
    if (k->calls++ == 0)
        node_kill(k->n);
    *data = k->piece;
    *len = PIECE;
    return SMP_OK;
}

static void write_while_node_dies(node *n, outcome *o)
{
    uint8_t tok[TICKET_MAX_BYTES];
    size_t tl = mint(TICKET_OP_WRITE, 0, SEG_BYTES, tok);
    ndc_conn *c = tls_connect(n);
    killer *k = calloc(1, sizeof(*k));
    if (c == NULL || tl == 0 || k == NULL) {
        o->rc = -10000;
        free(k);
        ndc_close(c);
        return;
    }
    k->n = n;
    o->rc = ndc_write_stream(c, "seg", 0, SEG_BYTES, next_after_kill, k, tok, tl);
    snprintf(o->msg, sizeof(o->msg), "%s", ndc_last_error(c));
    /* a second call on the broken connection answers the same, no write */
    if (ndc_write_stream(c, "seg", 0, SEG_BYTES, next_after_kill, k, tok, tl) != o->rc)
        o->rc = -10001;
    ndc_close(c);
    free(k);
}

/* A node killed while a client streams a write into it: the client's next
 * send finds the socket closed and reports it; it is not killed by SIGPIPE
 * (its sends go through MSG_NOSIGNAL). */
static void test_tls_node_killed_mid_write(void **state)
{
    outcome o;
    (void)state;
    expect_eio(write_while_node_dies, "node data: send: ", &o);
    assert_true(strstr(o.msg, strerror(EPIPE)) != NULL || strstr(o.msg, strerror(ECONNRESET)) != NULL);
}

static void read_while_node_dies(node *n, outcome *o)
{
    uint8_t tok[TICKET_MAX_BYTES];
    size_t tl = mint(TICKET_OP_READ, 0, SEG_BYTES, tok);
    ndc_conn *c = tls_connect(n);
    uint8_t *buf = malloc(SEG_BYTES);
    if (c == NULL || tl == 0 || buf == NULL) {
        o->rc = -10000;
    } else {
        /* a first read proves the session works; the node dies before the second */
        o->rc = ndc_read(c, "seg", 0, 1000, buf, tok, tl);
        if (o->rc == SMP_OK) {
            node_kill(n);
            o->rc = ndc_read(c, "seg", 0, SEG_BYTES, buf, tok, tl);
            snprintf(o->msg, sizeof(o->msg), "%s", ndc_last_error(c));
        } else {
            o->rc = -10002;
        }
    }
    free(buf);
    ndc_close(c);
}

/* A node gone between two reads of one connection: the client's request
 * and its wait for the answer fail with SMP_EIO and a sentence; it lives. */
static void test_tls_node_killed_between_reads(void **state)
{
    outcome o;
    (void)state;
    expect_eio(read_while_node_dies, "node", &o);
}

/* Ask for the whole segment, take the first bytes only, and vanish. */
static void read_and_vanish(node *n, outcome *o)
{
    uint8_t tok[TICKET_MAX_BYTES], hdr[NDW_REQ_HDR];
    size_t tl = mint(TICKET_OP_READ, 0, SEG_BYTES, tok);
    ndw_request r = { .op = NDW_OP_READ, .seg_len = 3, .offset = 0, .length = SEG_BYTES,
                      .ticket_len = (uint32_t)tl };
    ndc_conn *c = tls_connect(n);
    if (c == NULL || tl == 0) {
        o->rc = -10000;
        ndc_close(c);
        return;
    }
    /* The request by hand: ndc_read would take the whole range. */
    ndw_encode_request(hdr, &r);
    o->rc = ndc_send_raw(c, hdr, sizeof(hdr));
    if (o->rc == SMP_OK)
        o->rc = ndc_send_raw(c, "seg", 3);
    if (o->rc == SMP_OK)
        o->rc = ndc_send_raw(c, tok, tl);
    if (o->rc == SMP_OK)
        o->rc = ndc_recv_status(c); /* the header of the answer: OK, payload follows */
    ndc_close(c); /* the range is far from read: the node's sends meet a closed socket */
}

/* A client gone with a read half sent: the node closes that connection,
 * lives, and serves the next client exactly. */
static void test_tls_client_gone_mid_read(void **state)
{
    node n;
    outcome o;
    uint8_t tok[TICKET_MAX_BYTES];
    uint8_t *buf = malloc(SEG_BYTES);
    size_t tl;
    ndc_conn *c;
    (void)state;
    assert_non_null(buf);
    node_start(&n);
    for (int i = 0; i < 3; i++) {
        in_child(&n, read_and_vanish, &o);
        assert_int_equal(o.rc, SMP_OK);
    }
    c = tls_connect(&n);
    assert_non_null(c);
    tl = mint(TICKET_OP_READ, 0, SEG_BYTES, tok);
    assert_int_equal(ndc_read(c, "seg", 0, SEG_BYTES, buf, tok, tl), SMP_OK);
    for (uint64_t i = 0; i < SEG_BYTES; i++)
        if (buf[i] != byte_at(i))
            fail_msg("byte %llu differs", (unsigned long long)i);
    ndc_close(c);
    assert_int_equal(node_stop(&n), 1);
    free(buf);
}

/* Writes then reads of ranges around the sizes the node seals at once (a
 * 16 KiB record, its sending step, its chunk), at odd offsets, on one
 * connection: every byte comes back. */
static void test_tls_ranges_round_trip(void **state)
{
    static const uint64_t lens[] = { 0, 1, 16383, 16384, 16385, 65536 + 3, (256u << 10) - 1,
                                     (1u << 20) - 1, 1u << 20, (1u << 20) + 1, (5u << 20) + 77 };
    node n;
    uint8_t tok[TICKET_MAX_BYTES];
    uint8_t *src = malloc(SEG_BYTES), *dst = malloc(SEG_BYTES);
    uint64_t off = 3;
    ndc_conn *c;
    (void)state;
    assert_non_null(src);
    assert_non_null(dst);
    for (uint64_t i = 0; i < SEG_BYTES; i++)
        src[i] = (uint8_t)(i * 7 + 1);
    node_start(&n);
    c = tls_connect(&n);
    assert_non_null(c);
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        size_t tl = mint(TICKET_OP_WRITE, off, lens[i], tok);
        assert_int_equal(ndc_write(c, "seg", off, lens[i], src + off, tok, tl), SMP_OK);
        memset(dst, 0, lens[i] + 1);
        tl = mint(TICKET_OP_READ, off, lens[i], tok);
        assert_int_equal(ndc_read(c, "seg", off, lens[i], dst, tok, tl), SMP_OK);
        assert_memory_equal(dst, src + off, lens[i]);
        off += lens[i] + 4093;
    }
    assert_true(off < SEG_BYTES);
    ndc_close(c);
    assert_int_equal(node_stop(&n), 1);
    free(src);
    free(dst);
}

/* A cold file of COLD_BYTES read over TLS, whole and in a range across its
 * chunks: the node sends its header, then each chunk sealed, and every
 * byte comes back. */
static void test_tls_cold_read_round_trip(void **state)
{
    node n;
    uint8_t tok[TICKET_MAX_BYTES];
    uint8_t *dst = malloc(COLD_BYTES);
    uint64_t off = (1u << 20) - 3, len = (2u << 20) + 1;
    size_t tl;
    ndc_conn *c;
    (void)state;
    assert_non_null(dst);
    node_start(&n);
    c = tls_connect(&n);
    assert_non_null(c);
    tl = mint_for(g_cold_name, TICKET_OP_READ, 0, COLD_BYTES, tok);
    assert_int_equal(ndc_read_cold(c, g_cold_name, 0, COLD_BYTES, dst, tok, tl), SMP_OK);
    for (uint64_t i = 0; i < COLD_BYTES; i++)
        if (dst[i] != byte_at(i))
            fail_msg("cold byte %llu differs", (unsigned long long)i);
    memset(dst, 0, COLD_BYTES);
    tl = mint_for(g_cold_name, TICKET_OP_READ, off, len, tok);
    assert_int_equal(ndc_read_cold(c, g_cold_name, off, len, dst, tok, tl), SMP_OK);
    for (uint64_t i = 0; i < len; i++)
        if (dst[i] != byte_at(off + i))
            fail_msg("cold byte %llu differs", (unsigned long long)(off + i));
    ndc_close(c);
    assert_int_equal(node_stop(&n), 1);
    free(dst);
}

/* The cold tier g_cold with one object of COLD_BYTES (byte_at); its name
 * into g_cold_name. 0 or -1. */
static int make_cold(void)
{
    cold_tier *ct = NULL;
    char err[256];
    uint8_t sha[32], *data = malloc(COLD_BYTES);
    int rc = -1;
    if (data == NULL)
        return -1;
    for (uint64_t i = 0; i < COLD_BYTES; i++)
        data[i] = byte_at(i);
    SHA256(data, COLD_BYTES, sha);
    if (cold_open(g_cold, &ct, err, sizeof(err)) == SMP_OK &&
        cold_persist(ct, "model/w0", data, COLD_BYTES, sha, 0, g_cold_name, err,
                     sizeof(err)) == SMP_OK)
        rc = 0;
    if (ct != NULL)
        cold_close(ct);
    free(data);
    return rc;
}

static int setup(void **state)
{
    char cmd[2048];
    (void)state;
    snprintf(g_dir, sizeof(g_dir), "/tmp/wm-test-data-tls-%d", (int)getpid());
    snprintf(g_cert, sizeof(g_cert), "%s/node.pem", g_dir);
    snprintf(g_key, sizeof(g_key), "%s/node.key", g_dir);
    snprintf(g_cold, sizeof(g_cold), "%s/cold", g_dir);
    snprintf(cmd, sizeof(cmd),
             "mkdir -p '%s' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
             "-nodes -days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 "
             "-keyout '%s' -out '%s' >'%s/openssl.log' 2>&1", g_dir, g_key, g_cert, g_dir);
    if (system(cmd) != 0)
        return -1;
    return ticket_keyring_init(&g_keys) == SMP_OK && make_cold() == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[512];
    int st;
    (void)state;
    if (g_node_pid > 0) { /* a test failed with its node running */
        kill(g_node_pid, SIGKILL);
        waitpid(g_node_pid, &st, 0);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tls_node_killed_mid_write),
        cmocka_unit_test(test_tls_node_killed_between_reads),
        cmocka_unit_test(test_tls_client_gone_mid_read),
        cmocka_unit_test(test_tls_ranges_round_trip),
        cmocka_unit_test(test_tls_cold_read_round_trip),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
