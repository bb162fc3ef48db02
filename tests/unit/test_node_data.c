/* test_node_data.c -- the node's TCP data server and its blocking client.
 *
 * A real server on 127.0.0.1 (port 0) on a libuv loop in a thread, a real
 * segment file under /tmp, and clients in the test thread. Round trips of
 * ranged reads and ticketed writes; forged, tampered, expired, misused and
 * missing tickets refused with nothing written (the bytes are checked);
 * out-of-range and unknown segments refused with the connection kept;
 * malformed frames and random bytes close only their own connection while
 * another client is still served; read tickets when the node demands them;
 * a node without a secret refuses writes; stalled and idle connections are
 * closed when an idle timeout is set. READ_COLD: ranges of a cold file
 * persisted by node_cold.c come back byte for byte across chunk bounds;
 * names that leave the cold directory, unknown and malformed files, and
 * ranges past the data are refused with the connection kept, while a
 * second client is served; a node without a cold tier refuses them.
 * CHECK_COLD: the node hashes a whole file for a reader whose bytes did not
 * verify, and a client that finds it busy with another check asks again.
 * A connect to a port nobody listens on says "Connection refused". */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cmocka.h>
#include <openssl/sha.h>
#include <uv.h>

#include "node_cold.h"
#include "node_data.h"
#include "node_data_client.h"
#include "node_data_wire.h"

#define SEG_BYTES (4u << 20)
#define PATTERN 0xA5

typedef struct harness {
    uv_loop_t loop;
    uv_async_t stop;
    uv_thread_t th;
    data_server *srv;
    seg_segment *seg;
    data_server_stats stats;
    char endpoint[64];
} harness;

static char g_dir[256];
static ticket_secret g_secret;

static void on_stop(uv_async_t *a)
{
    harness *h = a->data;
    data_server_get_stats(h->srv, &h->stats);
    data_server_close(h->srv);
    uv_close((uv_handle_t *)a, NULL);
}

static void loop_thread(void *arg)
{
    harness *h = arg;
    uv_run(&h->loop, UV_RUN_DEFAULT);
}

/* Start a server on a fresh segment filled with PATTERN, serving the cold
 * files of ct (NULL: none) and noting the corrupt ones in faults (NULL:
 * nowhere). */
static harness *harness_start_with(const char *seg_id, const ticket_secret *secret,
                                   int read_tickets, uint64_t idle_ms, const cold_tier *ct,
                                   cold_faults *faults)
{
    harness *h = calloc(1, sizeof(*h));
    seg_options so = { .dir = g_dir, .id = seg_id, .size = SEG_BYTES };
    /* The tests' tickets name key id 0 (their claims start zeroed). */
    ticket_keyring ring = { .current_id = 0 };
    if (secret != NULL)
        ring.current = *secret;
    data_server_options o = { .listen_tcp = "127.0.0.1:0", .keys = secret ? &ring : NULL,
                              .allow_unticketed_reads = !read_tickets,
                              .idle_timeout_ms = idle_ms };
    char err[256];
    assert_non_null(h);
    assert_int_equal(seg_open(&so, &h->seg, err, sizeof(err)), SMP_OK);
    memset(seg_ptr(h->seg, 0, SEG_BYTES), PATTERN, SEG_BYTES);
    assert_int_equal(uv_loop_init(&h->loop), 0);
    assert_int_equal(data_server_create(&h->loop, &o, &h->srv, err, sizeof(err)), SMP_OK);
    assert_int_equal(data_server_add_segment(h->srv, h->seg), SMP_OK);
    assert_int_equal(data_server_add_segment(h->srv, h->seg), SMP_EEXIST);
    data_server_set_cold(h->srv, ct, faults);
    assert_int_equal(data_server_start(h->srv, err, sizeof(err)), SMP_OK);
    snprintf(h->endpoint, sizeof(h->endpoint), "127.0.0.1:%d", data_server_tcp_port(h->srv));
    uv_async_init(&h->loop, &h->stop, on_stop);
    h->stop.data = h;
    assert_int_equal(uv_thread_create(&h->th, loop_thread, h), 0);
    return h;
}

static harness *harness_start_cold(const char *seg_id, const ticket_secret *secret,
                                   int read_tickets, uint64_t idle_ms, const cold_tier *ct)
{
    return harness_start_with(seg_id, secret, read_tickets, idle_ms, ct, NULL);
}

static harness *harness_start_idle(const char *seg_id, const ticket_secret *secret,
                                   int read_tickets, uint64_t idle_ms)
{
    return harness_start_cold(seg_id, secret, read_tickets, idle_ms, NULL);
}

static harness *harness_start(const char *seg_id, const ticket_secret *secret, int read_tickets)
{
    return harness_start_idle(seg_id, secret, read_tickets, 0);
}

/* Stop the server and the loop; *stats (may be NULL) gets the final counters. */
static void harness_stop_stats(harness *h, data_server_stats *stats)
{
    uv_async_send(&h->stop);
    uv_thread_join(&h->th);
    assert_int_equal(uv_loop_close(&h->loop), 0);
    seg_destroy(h->seg);
    if (stats != NULL)
        *stats = h->stats;
    free(h);
}

static void harness_stop(harness *h)
{
    harness_stop_stats(h, NULL);
}

static ndc_conn *connect_to(const harness *h)
{
    ndc_conn *c = NULL;
    ndc_options o = { .timeout_ms = 5000 };
    char err[256];
    assert_int_equal(ndc_connect(h->endpoint, &o, &c, err, sizeof(err)), SMP_OK);
    return c;
}

static size_t mint(const ticket_secret *sec, uint8_t op, const char *seg, uint64_t off,
                   uint64_t len, int64_t ttl_ms, uint8_t *out)
{
    ticket_claims c;
    size_t n = 0;
    memset(&c, 0, sizeof(c));
    c.op = op;
    snprintf(c.segment, sizeof(c.segment), "%s", seg);
    snprintf(c.key, sizeof(c.key), "obj/%llu", (unsigned long long)off);
    c.offset = off;
    c.length = len;
    c.expiry_ms = (uint64_t)((int64_t)ticket_now_ms() + ttl_ms);
    assert_int_equal(ticket_mint(sec, &c, out, TICKET_MAX_BYTES, &n), SMP_OK);
    return n;
}

/* 1 when every byte of [off, off + len) of the segment is PATTERN. */
static int untouched(harness *h, uint64_t off, uint64_t len)
{
    const uint8_t *p = seg_ptr(h->seg, off, len);
    for (uint64_t i = 0; i < len; i++)
        if (p[i] != PATTERN)
            return 0;
    return 1;
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof(g_dir), "/tmp/wm-test-data-%d", (int)getpid());
    return ticket_secret_generate(&g_secret, 32) == SMP_OK ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[600];
    (void)state;
    /* the cold fixtures' directory too: a test that failed left it */
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s.cold'", g_dir, g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A ticketed write lands in exactly its range; reads return it, whole and
 * in pieces, on one connection. */
static void test_write_then_read_round_trip(void **state)
{
    harness *h = harness_start("rt", &g_secret, 0);
    ndc_conn *c = connect_to(h);
    uint8_t tk[TICKET_MAX_BYTES];
    const uint64_t off = 4096 + 64, len = (2u << 20) + 77;
    uint8_t *src = malloc(len), *dst = malloc(len);
    size_t n;
    (void)state;
    for (uint64_t i = 0; i < len; i++)
        src[i] = (uint8_t)(i * 31 + 7);
    n = mint(&g_secret, TICKET_OP_WRITE, "rt", off, len, 60000, tk);
    assert_int_equal(ndc_write(c, "rt", off, len, src, tk, n), SMP_OK);
    assert_memory_equal(seg_ptr(h->seg, off, len), src, len);
    assert_true(untouched(h, 0, off));
    assert_true(untouched(h, off + len, SEG_BYTES - off - len));

    assert_int_equal(ndc_read(c, "rt", off, len, dst, NULL, 0), SMP_OK);
    assert_memory_equal(dst, src, len);
    memset(dst, 0, len);
    assert_int_equal(ndc_read(c, "rt", off + 100, 1000, dst, NULL, 0), SMP_OK);
    assert_memory_equal(dst, src + 100, 1000);
    assert_int_equal(ndc_read(c, "rt", 0, 0, dst, NULL, 0), SMP_OK);
    /* a zero-length write with its ticket */
    n = mint(&g_secret, TICKET_OP_WRITE, "rt", 0, 0, 60000, tk);
    assert_int_equal(ndc_write(c, "rt", 0, 0, src, tk, n), SMP_OK);
    ndc_close(c);
    harness_stop(h);
    free(src);
    free(dst);
}

/* Forged, tampered, expired, misused and missing tickets: refused with
 * their codes, nothing written, and the connection keeps working. */
static void test_bad_tickets_write_nothing(void **state)
{
    harness *h = harness_start("tk", &g_secret, 0);
    ndc_conn *c = connect_to(h);
    ticket_secret other;
    uint8_t tk[TICKET_MAX_BYTES], src[8192];
    size_t n;
    (void)state;
    memset(src, 0x11, sizeof(src));
    assert_int_equal(ticket_secret_generate(&other, 32), SMP_OK);

    n = mint(&other, TICKET_OP_WRITE, "tk", 0, sizeof(src), 60000, tk);
    assert_int_equal(ndc_write(c, "tk", 0, sizeof(src), src, tk, n), SMP_EINVAL);
    assert_non_null(strstr(ndc_last_error(c), "ticket"));

    n = mint(&g_secret, TICKET_OP_WRITE, "tk", 0, sizeof(src), 60000, tk);
    tk[12] ^= 1; /* the length field */
    assert_int_equal(ndc_write(c, "tk", 0, sizeof(src), src, tk, n), SMP_EINVAL);

    n = mint(&g_secret, TICKET_OP_WRITE, "tk", 0, sizeof(src), -1000, tk);
    assert_int_equal(ndc_write(c, "tk", 0, sizeof(src), src, tk, n), SMP_ESTATE);
    assert_non_null(strstr(ndc_last_error(c), "expired"));

    n = mint(&g_secret, TICKET_OP_WRITE, "tk", 0, sizeof(src), 60000, tk);
    assert_int_equal(ndc_write(c, "tk", 64, sizeof(src), src, tk, n), SMP_ERANGE);
    assert_int_equal(ndc_write(c, "tk", 0, sizeof(src) * 2, src, tk, n), SMP_ERANGE);

    n = mint(&g_secret, TICKET_OP_READ, "tk", 0, sizeof(src), 60000, tk);
    assert_int_equal(ndc_write(c, "tk", 0, sizeof(src), src, tk, n), SMP_EINVAL);

    assert_int_equal(ndc_write(c, "tk", 0, sizeof(src), src, NULL, 0), SMP_EINVAL);
    assert_int_equal(ndc_write(c, "tk", 0, sizeof(src), src, tk, 10), SMP_EPROTO);

    assert_true(untouched(h, 0, SEG_BYTES));

    /* still usable: a good ticket writes */
    n = mint(&g_secret, TICKET_OP_WRITE, "tk", 0, sizeof(src), 60000, tk);
    assert_int_equal(ndc_write(c, "tk", 0, sizeof(src), src, tk, n), SMP_OK);
    assert_memory_equal(seg_ptr(h->seg, 0, sizeof(src)), src, sizeof(src));
    ndc_close(c);
    {
        data_server_stats st;
        harness_stop_stats(h, &st);
        assert_int_equal(st.refused_ticket, 8);
        assert_int_equal(st.writes, 1);
        assert_int_equal(st.bytes_written, sizeof(src));
    }
}

/* Out-of-range reads and writes and unknown segments are refused; the
 * connection stays. */
static void test_range_and_segment_refusals(void **state)
{
    harness *h = harness_start("rg", &g_secret, 0);
    ndc_conn *c = connect_to(h);
    uint8_t buf[256], tk[TICKET_MAX_BYTES];
    size_t n;
    (void)state;
    assert_int_equal(ndc_read(c, "rg", SEG_BYTES - 10, 11, buf, NULL, 0), SMP_ERANGE);
    assert_int_equal(ndc_read(c, "rg", UINT64_MAX - 1, 16, buf, NULL, 0), SMP_ERANGE);
    assert_int_equal(ndc_read(c, "nope", 0, 16, buf, NULL, 0), SMP_ENOTFOUND);
    n = mint(&g_secret, TICKET_OP_WRITE, "rg", SEG_BYTES - 8, 16, 60000, tk);
    assert_int_equal(ndc_write(c, "rg", SEG_BYTES - 8, 16, buf, tk, n), SMP_ERANGE);
    assert_true(untouched(h, SEG_BYTES - 8, 8));
    assert_int_equal(ndc_read(c, "rg", 0, sizeof(buf), buf, NULL, 0), SMP_OK);
    assert_int_equal(buf[0], PATTERN);
    ndc_close(c);
    harness_stop(h);
}

/* A malformed frame gets SMP_EPROTO and closes that connection only;
 * random bytes and a client vanishing mid-write do not disturb a second
 * client, which is served throughout. */
static void test_bad_frames_close_only_their_connection(void **state)
{
    harness *h = harness_start("bf", &g_secret, 0);
    ndc_conn *good = connect_to(h), *bad;
    uint8_t hdr[NDW_REQ_HDR], buf[4096], tk[TICKET_MAX_BYTES];
    ndw_request r = { .op = NDW_OP_READ, .seg_len = 2, .offset = 0, .length = 16 };
    size_t n;
    (void)state;

    /* bad magic */
    bad = connect_to(h);
    memset(hdr, 'x', sizeof(hdr));
    assert_int_equal(ndc_send_raw(bad, hdr, sizeof(hdr)), SMP_OK);
    assert_int_equal(ndc_recv_status(bad), SMP_EPROTO);
    assert_int_equal(ndc_read(bad, "bf", 0, 16, buf, NULL, 0), SMP_EIO);
    ndc_close(bad);
    assert_int_equal(ndc_read(good, "bf", 0, 16, buf, NULL, 0), SMP_OK);

    /* unknown op, oversize segment id, oversize ticket, segment id with a slash */
    for (int k = 0; k < 4; k++) {
        ndw_request q = r;
        bad = connect_to(h);
        ndw_encode_request(hdr, &q);
        if (k == 0)
            hdr[4] = 9;
        if (k == 1)
            ndw_put_u16(hdr + 6, NDW_SEGMENT_MAX + 1);
        if (k == 2)
            ndw_put_u32(hdr + 24, NDW_TICKET_MAX + 1);
        assert_int_equal(ndc_send_raw(bad, hdr, sizeof(hdr)), SMP_OK);
        if (k == 3)
            assert_int_equal(ndc_send_raw(bad, "./", 2), SMP_OK);
        assert_int_equal(ndc_recv_status(bad), SMP_EPROTO);
        ndc_close(bad);
        assert_int_equal(ndc_read(good, "bf", 0, 16, buf, NULL, 0), SMP_OK);
    }

    /* a client that sends a partial header and goes away */
    bad = connect_to(h);
    assert_int_equal(ndc_send_raw(bad, "WMD1", 4), SMP_OK);
    ndc_close(bad);

    /* a client that is accepted for a write and vanishes mid-payload */
    bad = connect_to(h);
    n = mint(&g_secret, TICKET_OP_WRITE, "bf", 0, sizeof(buf), 60000, tk);
    r.op = NDW_OP_WRITE;
    r.length = sizeof(buf);
    r.ticket_len = (uint32_t)n;
    ndw_encode_request(hdr, &r);
    assert_int_equal(ndc_send_raw(bad, hdr, sizeof(hdr)), SMP_OK);
    assert_int_equal(ndc_send_raw(bad, "bf", 2), SMP_OK);
    assert_int_equal(ndc_send_raw(bad, tk, n), SMP_OK);
    assert_int_equal(ndc_recv_status(bad), SMP_OK); /* CONTINUE */
    memset(buf, 0x22, sizeof(buf));
    assert_int_equal(ndc_send_raw(bad, buf, 100), SMP_OK);
    ndc_close(bad);

    /* two requests pipelined, then gone before the answers */
    bad = connect_to(h);
    r.op = NDW_OP_READ;
    r.length = SEG_BYTES;
    r.ticket_len = 0;
    ndw_encode_request(hdr, &r);
    {
        uint8_t two[2 * (NDW_REQ_HDR + 2)];
        memcpy(two, hdr, NDW_REQ_HDR);
        memcpy(two + NDW_REQ_HDR, "bf", 2);
        memcpy(two + NDW_REQ_HDR + 2, hdr, NDW_REQ_HDR);
        memcpy(two + 2 * NDW_REQ_HDR + 2, "bf", 2);
        assert_int_equal(ndc_send_raw(bad, two, sizeof(two)), SMP_OK);
    }
    ndc_close(bad);

    /* random bytes on many connections */
    srand(42);
    for (int k = 0; k < 40; k++) {
        uint8_t junk[200];
        for (size_t i = 0; i < sizeof(junk); i++)
            junk[i] = (uint8_t)rand();
        if (k % 2 == 0)
            memcpy(junk, NDW_REQ_MAGIC, 4);
        bad = connect_to(h);
        (void)ndc_send_raw(bad, junk, (size_t)(rand() % (int)sizeof(junk)) + 1);
        ndc_close(bad);
    }

    assert_int_equal(ndc_read(good, "bf", 0, sizeof(buf), buf, NULL, 0), SMP_OK);
    ndc_close(good);
    {
        data_server_stats st;
        harness_stop_stats(h, &st);
        assert_true(st.bad_frames >= 5);
        assert_true(st.truncated >= 2);
        assert_int_equal(st.writes, 0);
        assert_true(st.reads >= 6);
    }
}

/* A node that demands read tickets refuses reads without one or outside it
 * and serves reads inside it. */
static void test_read_tickets_when_required(void **state)
{
    harness *h = harness_start("rd", &g_secret, 1);
    ndc_conn *c = connect_to(h);
    uint8_t tk[TICKET_MAX_BYTES], buf[1024];
    size_t n;
    (void)state;
    assert_int_equal(ndc_read(c, "rd", 0, 16, buf, NULL, 0), SMP_EINVAL);
    n = mint(&g_secret, TICKET_OP_READ, "rd", 1024, 1024, 60000, tk);
    assert_int_equal(ndc_read(c, "rd", 1024, 1024, buf, tk, n), SMP_OK);
    assert_int_equal(ndc_read(c, "rd", 1500, 100, buf, tk, n), SMP_OK);
    assert_int_equal(ndc_read(c, "rd", 0, 100, buf, tk, n), SMP_ERANGE);
    n = mint(&g_secret, TICKET_OP_WRITE, "rd", 1024, 1024, 60000, tk);
    assert_int_equal(ndc_read(c, "rd", 1024, 1024, buf, tk, n), SMP_EINVAL);
    ndc_close(c);
    harness_stop(h);
}

/* A write ticket writes once: the same ticket again is refused with
 * SMP_EEXIST and the bytes stay the first write's; a write whose
 * connection broke in the middle gives its ticket back. */
static void test_write_ticket_is_single_use(void **state)
{
    harness *h = harness_start("su", &g_secret, 1);
    ndc_conn *c = connect_to(h);
    uint8_t tk[TICKET_MAX_BYTES], a[4096], b[4096];
    size_t n = mint(&g_secret, TICKET_OP_WRITE, "su", 0, sizeof(a), 60000, tk);
    (void)state;
    memset(a, 0x0a, sizeof(a));
    memset(b, 0x0b, sizeof(b));
    assert_int_equal(ndc_write(c, "su", 0, sizeof(a), a, tk, n), SMP_OK);
    assert_int_equal(ndc_write(c, "su", 0, sizeof(b), b, tk, n), SMP_EEXIST);
    assert_non_null(strstr(ndc_last_error(c), "already used"));
    ndc_close(c);
    c = connect_to(h);
    assert_int_equal(ndc_write(c, "su", 0, sizeof(b), b, tk, n), SMP_EEXIST);
    assert_memory_equal(seg_ptr(h->seg, 0, sizeof(a)), a, sizeof(a));
    ndc_close(c);
    harness_stop(h);
}

/* Without a secret a node takes no writes at all. */
static void test_no_secret_no_writes(void **state)
{
    harness *h = harness_start("ns", NULL, 0);
    ndc_conn *c = connect_to(h);
    uint8_t tk[TICKET_MAX_BYTES], buf[64] = { 0 };
    size_t n = mint(&g_secret, TICKET_OP_WRITE, "ns", 0, sizeof(buf), 60000, tk);
    (void)state;
    assert_int_equal(ndc_write(c, "ns", 0, sizeof(buf), buf, tk, n), SMP_ENOTSUP);
    assert_true(untouched(h, 0, 4096));
    ndc_close(c);
    harness_stop(h);
}

/* Two clients interleave large transfers; both get their bytes. */
static void test_two_clients_interleaved(void **state)
{
    harness *h = harness_start("tc", &g_secret, 0);
    ndc_conn *a = connect_to(h), *b = connect_to(h);
    const uint64_t len = 1u << 20;
    uint8_t *x = malloc(len), *y = malloc(len), *out = malloc(len), tk[TICKET_MAX_BYTES];
    size_t n;
    (void)state;
    memset(x, 1, len);
    memset(y, 2, len);
    n = mint(&g_secret, TICKET_OP_WRITE, "tc", 0, len, 60000, tk);
    assert_int_equal(ndc_write(a, "tc", 0, len, x, tk, n), SMP_OK);
    n = mint(&g_secret, TICKET_OP_WRITE, "tc", len, len, 60000, tk);
    assert_int_equal(ndc_write(b, "tc", len, len, y, tk, n), SMP_OK);
    assert_int_equal(ndc_read(b, "tc", 0, len, out, NULL, 0), SMP_OK);
    assert_memory_equal(out, x, len);
    assert_int_equal(ndc_read(a, "tc", len, len, out, NULL, 0), SMP_OK);
    assert_memory_equal(out, y, len);
    ndc_close(a);
    ndc_close(b);
    harness_stop(h);
    free(x);
    free(y);
    free(out);
}

/* With an idle timeout, a client that stalls inside a request or sits idle
 * between requests is disconnected; one that keeps talking is served. */
static void test_idle_connections_are_closed(void **state)
{
    harness *h = harness_start_idle("id", &g_secret, 0, 300);
    ndc_conn *stalled = connect_to(h), *idle = connect_to(h), *busy = connect_to(h);
    uint8_t buf[64];
    data_server_stats st;
    (void)state;
    assert_int_equal(ndc_send_raw(stalled, "WMD1", 4), SMP_OK);
    for (int i = 0; i < 12; i++) {
        assert_int_equal(ndc_read(busy, "id", 0, sizeof(buf), buf, NULL, 0), SMP_OK);
        usleep(50 * 1000);
    }
    assert_int_equal(ndc_recv_status(stalled), SMP_EIO);
    assert_int_equal(ndc_read(idle, "id", 0, sizeof(buf), buf, NULL, 0), SMP_EIO);
    assert_int_equal(ndc_read(busy, "id", 0, sizeof(buf), buf, NULL, 0), SMP_OK);
    ndc_close(stalled);
    ndc_close(idle);
    ndc_close(busy);
    harness_stop_stats(h, &st);
    assert_int_equal(st.idle_closed, 2);
    assert_int_equal(st.truncated, 1);
}

/* -- READ_COLD ------------------------------------------------------------- */

#define COLD_OBJ_BYTES ((5u << 19) + 123) /* 2.5 MiB + 123: several server chunks */

static uint8_t cold_byte(uint64_t i)
{
    return (uint8_t)((i * 2654435761u) >> 13);
}

/* A cold tier under g_dir with one persisted object of `bytes` bytes; its
 * name in name. */
static cold_tier *cold_fixture_sized(char name[COLD_NAME_MAX], uint8_t **data_out, uint64_t bytes)
{
    char dir[300], err[256];
    cold_tier *ct = NULL;
    uint8_t sha[32];
    uint8_t *data = malloc(bytes);
    assert_non_null(data);
    for (uint64_t i = 0; i < bytes; i++)
        data[i] = cold_byte(i);
    snprintf(dir, sizeof(dir), "%s.cold", g_dir);
    assert_int_equal(cold_open(dir, &ct, err, sizeof(err)), SMP_OK);
    SHA256(data, bytes, sha);
    assert_int_equal(cold_persist(ct, "model/w0", data, bytes, sha, 0, name, err, sizeof(err)),
                     SMP_OK);
    *data_out = data;
    return ct;
}

static cold_tier *cold_fixture(char name[COLD_NAME_MAX], uint8_t **data_out)
{
    return cold_fixture_sized(name, data_out, COLD_OBJ_BYTES);
}

static void cold_fixture_done(cold_tier *ct, uint8_t *data)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cold_dir(ct));
    cold_close(ct);
    assert_int_equal(system(cmd), 0);
    free(data);
}

/* With read tickets required (the default), a cold file's data needs a
 * READ ticket naming that file; another file's ticket, a range past it or
 * none is refused and nothing is sent. */
static void test_cold_reads_need_their_ticket(void **state)
{
    char name[COLD_NAME_MAX];
    uint8_t *data, buf[4096], tk[TICKET_MAX_BYTES];
    cold_tier *ct = cold_fixture(name, &data);
    harness *h = harness_start_cold("ck", &g_secret, 1, 0, ct);
    ndc_conn *c = connect_to(h);
    size_t n;
    (void)state;
    memset(buf, 0x5a, sizeof(buf));
    assert_int_equal(ndc_read_cold(c, name, 0, sizeof(buf), buf, NULL, 0), SMP_EINVAL);
    n = mint(&g_secret, TICKET_OP_READ, "0000000000000000000000000000000000000000000000000000000000000000.cold",
             0, COLD_OBJ_BYTES, 60000, tk);
    assert_int_equal(ndc_read_cold(c, name, 0, sizeof(buf), buf, tk, n), SMP_EINVAL);
    n = mint(&g_secret, TICKET_OP_READ, name, 0, 1024, 60000, tk);
    assert_int_equal(ndc_read_cold(c, name, 0, sizeof(buf), buf, tk, n), SMP_ERANGE);
    for (size_t i = 0; i < sizeof(buf); i++)
        assert_int_equal(buf[i], 0x5a);
    n = mint(&g_secret, TICKET_OP_READ, name, 0, COLD_OBJ_BYTES, 60000, tk);
    assert_int_equal(ndc_read_cold(c, name, 0, sizeof(buf), buf, tk, n), SMP_OK);
    assert_memory_equal(buf, data, sizeof(buf));
    ndc_close(c);
    harness_stop(h);
    cold_fixture_done(ct, data);
}

/* A cold file's data comes back whole, in ranges that straddle the node's
 * chunks, empty, and at its very end; the header is never part of it. */
static void test_cold_read_round_trip(void **state)
{
    char name[COLD_NAME_MAX];
    uint8_t *data, *out = malloc(COLD_OBJ_BYTES);
    cold_tier *ct = cold_fixture(name, &data);
    harness *h = harness_start_cold("cr", &g_secret, 0, 0, ct);
    ndc_conn *c = connect_to(h);
    data_server_stats st;
    const uint64_t mib = 1u << 20;
    (void)state;
    assert_int_equal(ndc_read_cold(c, name, 0, COLD_OBJ_BYTES, out, NULL, 0), SMP_OK);
    assert_memory_equal(out, data, COLD_OBJ_BYTES);
    assert_int_equal(ndc_read_cold(c, name, mib - 7, mib + 20, out, NULL, 0), SMP_OK);
    assert_memory_equal(out, data + mib - 7, mib + 20);
    assert_int_equal(ndc_read_cold(c, name, 5, 0, out, NULL, 0), SMP_OK);
    assert_int_equal(ndc_read_cold(c, name, COLD_OBJ_BYTES - 1, 1, out, NULL, 0), SMP_OK);
    assert_int_equal(out[0], data[COLD_OBJ_BYTES - 1]);
    assert_int_equal(ndc_read_cold(c, name, COLD_OBJ_BYTES, 0, out, NULL, 0), SMP_OK);
    /* memory reads on the same connection are unaffected */
    assert_int_equal(ndc_read(c, "cr", 0, 16, out, NULL, 0), SMP_OK);
    assert_int_equal(out[0], PATTERN);
    ndc_close(c);
    harness_stop_stats(h, &st);
    assert_int_equal(st.cold_reads, 5);
    assert_int_equal(st.reads, 1);
    assert_int_equal(st.bytes_read, COLD_OBJ_BYTES + mib + 20 + 1 + 16);
    cold_fixture_done(ct, data);
    free(out);
}

/* Build a raw READ_COLD frame whose name is the n bytes at name. */
static size_t raw_cold_frame(uint8_t *out, const char *name, size_t n, uint64_t len)
{
    ndw_request r = { .op = NDW_OP_READ_COLD, .seg_len = (uint16_t)n, .offset = 0,
                      .length = len, .ticket_len = 0 };
    ndw_encode_request(out, &r);
    memcpy(out + NDW_REQ_HDR, name, n);
    return NDW_REQ_HDR + n;
}

/* Names that leave the cold directory (a "../", a slash, an absolute path,
 * a symlink in the directory), names not of the cold form, an embedded NUL,
 * unknown and malformed files, and ranges past the data are refused; the
 * connection stays usable, and a second client is served meanwhile. */
static void test_cold_read_refusals(void **state)
{
    char name[COLD_NAME_MAX], other[COLD_NAME_MAX], bad[400], path[400];
    uint8_t *data, buf[256], frame[NDW_REQ_HDR + 300], sha[32];
    cold_tier *ct = cold_fixture(name, &data);
    harness *h = harness_start_cold("cf", &g_secret, 0, 0, ct);
    ndc_conn *c = connect_to(h), *c2 = connect_to(h);
    data_server_stats st;
    FILE *f;
    size_t n;
    (void)state;

    snprintf(bad, sizeof(bad), "../%s", name);
    assert_int_equal(ndc_read_cold(c, bad, 0, 16, buf, NULL, 0), SMP_EINVAL);
    snprintf(bad, sizeof(bad), "%s/%s", cold_dir(ct), name); /* a path, even the right one */
    assert_int_equal(ndc_read_cold(c, bad, 0, 16, buf, NULL, 0), SMP_EINVAL);
    snprintf(bad, sizeof(bad), "sub/%s", name);
    assert_int_equal(ndc_read_cold(c, bad, 0, 16, buf, NULL, 0), SMP_EINVAL);
    assert_int_equal(ndc_read_cold(c, "/etc/passwd", 0, 16, buf, NULL, 0), SMP_EINVAL);
    assert_int_equal(ndc_read_cold(c, "..", 0, 16, buf, NULL, 0), SMP_EINVAL);
    assert_int_equal(ndc_read_cold(c, "cf", 0, 16, buf, NULL, 0), SMP_EINVAL); /* a segment id */
    snprintf(bad, sizeof(bad), "%.64s.tmp", name);
    assert_int_equal(ndc_read_cold(c, bad, 0, 16, buf, NULL, 0), SMP_EINVAL);
    /* served between refusals: the other client */
    assert_int_equal(ndc_read_cold(c2, name, 0, sizeof(buf), buf, NULL, 0), SMP_OK);
    assert_memory_equal(buf, data, sizeof(buf));

    /* a NUL inside the name: the whole name is checked, not its first part */
    memcpy(bad, name, strlen(name));
    bad[strlen(name)] = '\0';
    memcpy(bad + strlen(name) + 1, "/../x", 5);
    n = raw_cold_frame(frame, bad, strlen(name) + 6, 16);
    assert_int_equal(ndc_send_raw(c, frame, n), SMP_OK);
    assert_int_equal(ndc_recv_status(c), SMP_EINVAL);

    /* a well-formed name of no file */
    memset(sha, 7, sizeof(sha));
    assert_int_equal(cold_name_for("model/none", sha, other), SMP_OK);
    assert_int_equal(ndc_read_cold(c, other, 0, 16, buf, NULL, 0), SMP_ENOTFOUND);
    /* a file of that name that is no cold file */
    snprintf(path, sizeof(path), "%s/%s", cold_dir(ct), other);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("not a cold file", f);
    fclose(f);
    assert_int_equal(ndc_read_cold(c, other, 0, 4, buf, NULL, 0), SMP_EPROTO);
    /* a symlink with a cold name, out of the directory: not followed */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(symlink("/etc/passwd", path), 0);
    assert_true(ndc_read_cold(c, other, 0, 4, buf, NULL, 0) < 0);
    assert_int_equal(unlink(path), 0);

    /* ranges past the data, and one that would wrap */
    assert_int_equal(ndc_read_cold(c, name, COLD_OBJ_BYTES - 10, 11, buf, NULL, 0), SMP_ERANGE);
    assert_int_equal(ndc_read_cold(c, name, COLD_OBJ_BYTES + 1, 0, buf, NULL, 0), SMP_ERANGE);
    assert_int_equal(ndc_read_cold(c, name, UINT64_MAX - 1, 16, buf, NULL, 0), SMP_ERANGE);

    /* the refused connection still reads */
    assert_int_equal(ndc_read_cold(c, name, 100, sizeof(buf), buf, NULL, 0), SMP_OK);
    assert_memory_equal(buf, data + 100, sizeof(buf));
    /* a next request on each connection: the node has booked the cold reads */
    assert_int_equal(ndc_read(c, "cf", 0, 16, buf, NULL, 0), SMP_OK);
    assert_int_equal(ndc_read(c2, "cf", 0, 16, buf, NULL, 0), SMP_OK);
    ndc_close(c);
    ndc_close(c2);
    harness_stop_stats(h, &st);
    assert_int_equal(st.cold_reads, 2);
    assert_int_equal(st.refused_cold, 11);
    assert_int_equal(st.refused_range, 3);
    assert_int_equal(st.bad_frames, 0);
    cold_fixture_done(ct, data);
}

/* Clients that vanish in the middle of cold reads -- before the answer, or
 * with most of the bytes unread -- cost the node nothing: the transfer is
 * dropped (its file closed, its buffer freed) and others are served; a
 * client gone is not counted as a cold file that failed. */
static void test_cold_read_client_vanishes(void **state)
{
    char name[COLD_NAME_MAX];
    uint8_t *data, frame[NDW_REQ_HDR + COLD_NAME_MAX], buf[64];
    cold_tier *ct = cold_fixture(name, &data);
    harness *h = harness_start_cold("cv", &g_secret, 0, 0, ct);
    ndc_conn *ok = connect_to(h);
    data_server_stats st;
    size_t n = raw_cold_frame(frame, name, strlen(name), COLD_OBJ_BYTES);
    (void)state;
    for (int i = 0; i < 8; i++) {
        ndc_conn *gone = connect_to(h);
        assert_int_equal(ndc_send_raw(gone, frame, n), SMP_OK);
        if (i % 2 == 1)
            usleep(20 * 1000); /* let the transfer start */
        ndc_close(gone);
        assert_int_equal(ndc_read_cold(ok, name, 7, sizeof(buf), buf, NULL, 0), SMP_OK);
        assert_memory_equal(buf, data + 7, sizeof(buf));
    }
    ndc_close(ok);
    harness_stop_stats(h, &st);
    assert_int_equal(st.cold_read_errors, 0);
    cold_fixture_done(ct, data);
}

#define COLD_BIG_BYTES (40ull << 20) /* far more than loopback socket buffers hold */

/* A plain TCP connection to the harness's server (the tests below read
 * the payload at their own pace). */
static int raw_connect(const harness *h)
{
    struct sockaddr_in a = { .sin_family = AF_INET };
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    a.sin_port = htons((uint16_t)atoi(strrchr(h->endpoint, ':') + 1));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    struct timeval tv = { .tv_sec = 10 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Send a READ_COLD of [off, +len) of name and read the response header. */
static ndw_response raw_cold_request(int fd, const char *name, uint64_t off, uint64_t len)
{
    uint8_t frame[NDW_REQ_HDR + COLD_NAME_MAX], hdr[NDW_RESP_HDR];
    ndw_request r = { .op = NDW_OP_READ_COLD, .seg_len = (uint16_t)strlen(name), .offset = off,
                      .length = len };
    ndw_response resp;
    ndw_encode_request(frame, &r);
    memcpy(frame + NDW_REQ_HDR, name, strlen(name));
    assert_int_equal(send(fd, frame, NDW_REQ_HDR + strlen(name), 0),
                     (ssize_t)(NDW_REQ_HDR + strlen(name)));
    assert_int_equal(recv(fd, hdr, sizeof(hdr), MSG_WAITALL), (ssize_t)sizeof(hdr));
    assert_int_equal(ndw_decode_response(hdr, &resp), 0);
    return resp;
}

/* Receive up to len bytes into out (NULL: dropped), in pieces of at most
 * piece bytes; returns what came before the connection ended. */
static uint64_t raw_recv(int fd, uint8_t *out, uint64_t len, size_t piece)
{
    static uint8_t sink[1 << 20];
    uint64_t got = 0;
    while (got < len) {
        size_t want = len - got < piece ? (size_t)(len - got) : piece;
        if (want > sizeof(sink))
            want = sizeof(sink);
        ssize_t n = recv(fd, out != NULL ? out + got : sink, want, 0);
        if (n <= 0)
            break;
        got += (uint64_t)n;
    }
    return got;
}

/* A cold file that gets shorter in the middle of a read is never delivered
 * as complete: the node has promised every byte in the header, sent what
 * it could, and then closes the connection, so the client counts fewer
 * bytes than the length it was promised. Another client is served, and the
 * shorter file is refused from then on. */
static void test_cold_read_cut_short_is_never_complete(void **state)
{
    char name[COLD_NAME_MAX], path[400];
    uint8_t *data, buf[64];
    cold_tier *ct = cold_fixture_sized(name, &data, COLD_BIG_BYTES);
    harness *h = harness_start_cold("cs", &g_secret, 0, 0, ct);
    int fd = raw_connect(h);
    data_server_stats st;
    (void)state;
    ndw_response r = raw_cold_request(fd, name, 0, COLD_BIG_BYTES);
    assert_int_equal(r.status, SMP_OK);
    assert_int_equal(r.payload, COLD_BIG_BYTES);
    /* the first MiB, then the file loses all but its first 16 MiB */
    assert_int_equal(raw_recv(fd, NULL, 1u << 20, 1u << 20), 1u << 20);
    snprintf(path, sizeof(path), "%s/%s", cold_dir(ct), name);
    assert_int_equal(truncate(path, COLD_HEADER_BYTES + (16u << 20)), 0);
    uint64_t got = (1u << 20) + raw_recv(fd, NULL, COLD_BIG_BYTES - (1u << 20), 1u << 20);
    assert_true(got <= 16u << 20);
    assert_true(got < COLD_BIG_BYTES);
    assert_int_equal(recv(fd, buf, 1, 0), 0); /* closed: nothing more comes */
    close(fd);
    ndc_conn *c = connect_to(h);
    assert_int_equal(ndc_read_cold(c, name, 0, sizeof(buf), buf, NULL, 0), SMP_EPROTO);
    assert_int_equal(ndc_read(c, "cs", 0, 16, buf, NULL, 0), SMP_OK);
    ndc_close(c);
    harness_stop_stats(h, &st);
    assert_int_equal(st.cold_read_errors, 1);
    assert_int_equal(st.cold_reads, 0);
    assert_int_equal(st.refused_cold, 1);
    cold_fixture_done(ct, data);
}

/* A client that reads slowly fills the socket: the node waits until it is
 * writable again and goes on where it stopped, so every byte arrives in
 * order; the connection then serves its next request. */
static void test_cold_read_waits_for_a_slow_reader(void **state)
{
    char name[COLD_NAME_MAX];
    uint8_t *data, *out = malloc(COLD_BIG_BYTES);
    cold_tier *ct = cold_fixture_sized(name, &data, COLD_BIG_BYTES);
    harness *h = harness_start_cold("sr", &g_secret, 0, 0, ct);
    int fd = raw_connect(h);
    data_server_stats st;
    (void)state;
    assert_non_null(out);
    ndw_response r = raw_cold_request(fd, name, 0, COLD_BIG_BYTES);
    assert_int_equal(r.status, SMP_OK);
    usleep(100 * 1000); /* the node fills the socket and waits */
    for (uint64_t got = 0; got < COLD_BIG_BYTES;) {
        uint64_t n = raw_recv(fd, out + got, COLD_BIG_BYTES - got < (4u << 20)
                                                 ? COLD_BIG_BYTES - got : 4u << 20, 64u << 10);
        assert_true(n > 0);
        got += n;
        if (got < (12u << 20))
            usleep(20 * 1000);
    }
    assert_memory_equal(out, data, COLD_BIG_BYTES);
    r = raw_cold_request(fd, name, COLD_BIG_BYTES - 100, 100);
    assert_int_equal(r.status, SMP_OK);
    assert_int_equal(raw_recv(fd, out, 100, 100), 100);
    assert_memory_equal(out, data + COLD_BIG_BYTES - 100, 100);
    /* answered once the node has ended (and booked) the read before it */
    r = raw_cold_request(fd, name, COLD_BIG_BYTES, 1);
    assert_int_equal(r.status, SMP_ERANGE);
    close(fd);
    harness_stop_stats(h, &st);
    assert_int_equal(st.cold_reads, 2);
    assert_int_equal(st.refused_range, 1);
    assert_int_equal(st.cold_read_errors, 0);
    assert_int_equal(st.bytes_read, COLD_BIG_BYTES + 100);
    cold_fixture_done(ct, data);
    free(out);
}

/* Flip every bit of the byte at off of the file at path. */
static void flip_file_byte(const char *path, off_t off)
{
    uint8_t b;
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &b, 1, off), 1);
    b ^= 0xff;
    assert_int_equal(pwrite(fd, &b, 1, off), 1);
    close(fd);
}

/* CHECK_COLD: a client whose read did not verify has the node hash the
 * whole file. A good file is answered intact, nothing noted; a file whose
 * data rotted under an intact header -- still served by READ_COLD, which
 * checks only the header -- is answered corrupt and noted once for the
 * master. The check needs the file's READ ticket like a read, names
 * outside the cold form are refused, a missing file is named and noted
 * for the master, and the connection serves on after each answer. */
static void test_cold_check_hashes_the_whole_file(void **state)
{
    char name[COLD_NAME_MAX], missing[COLD_NAME_MAX], path[400], taken[2][COLD_NAME_MAX];
    uint8_t *data, buf[64], tk[TICKET_MAX_BYTES], sha[32] = { 0 };
    cold_tier *ct = cold_fixture(name, &data);
    cold_faults *faults = cold_faults_new();
    harness *h = harness_start_with("cc", &g_secret, 1, 0, ct, faults);
    ndc_conn *c = connect_to(h);
    data_server_stats st;
    size_t n;
    (void)state;
    assert_non_null(faults);
    assert_int_equal(cold_name_for("model/gone", sha, missing), SMP_OK);
    /* refused before anything is read: no ticket, another file's, a bad name */
    assert_int_equal(ndc_check_cold(c, name, NULL, 0), SMP_EINVAL);
    assert_non_null(strstr(ndc_last_error(c), "needs a ticket"));
    n = mint(&g_secret, TICKET_OP_READ, missing, 0, COLD_OBJ_BYTES, 60000, tk);
    assert_int_equal(ndc_check_cold(c, name, tk, n), SMP_EINVAL);
    assert_int_equal(ndc_check_cold(c, "../x.cold", tk, n), SMP_EINVAL);
    assert_non_null(strstr(ndc_last_error(c), "not the name of a cold file"));
    assert_int_equal(ndc_check_cold(c, missing, tk, n), SMP_ENOTFOUND);
    assert_non_null(strstr(ndc_last_error(c), "no such file"));
    assert_int_equal(cold_faults_take(faults, taken, 2), 1); /* noted for the master */
    assert_string_equal(taken[0], missing);

    n = mint(&g_secret, TICKET_OP_READ, name, 0, COLD_OBJ_BYTES, 60000, tk);
    assert_int_equal(ndc_check_cold(c, name, tk, n), SMP_OK);
    assert_int_equal(cold_faults_take(faults, taken, 2), 0);

    snprintf(path, sizeof(path), "%s/%s", cold_dir(ct), name);
    flip_file_byte(path, COLD_HEADER_BYTES + COLD_OBJ_BYTES / 2);
    assert_int_equal(ndc_read_cold(c, name, 0, sizeof(buf), buf, tk, n), SMP_OK);
    assert_int_equal(ndc_check_cold(c, name, tk, n), SMP_EPROTO);
    assert_non_null(strstr(ndc_last_error(c), "corrupt"));
    assert_non_null(strstr(ndc_last_error(c), "reported to the master"));
    assert_int_equal(ndc_check_cold(c, name, tk, n), SMP_EPROTO); /* noted once */
    assert_int_equal(cold_faults_take(faults, taken, 2), 1);
    assert_string_equal(taken[0], name);
    /* the same connection goes on serving */
    assert_int_equal(ndc_read_cold(c, name, 0, sizeof(buf), buf, tk, n), SMP_OK);
    assert_memory_equal(buf, data, sizeof(buf));
    ndc_close(c);
    harness_stop_stats(h, &st);
    assert_int_equal(st.cold_checks, 4);
    assert_int_equal(st.cold_checks_corrupt, 2);
    cold_faults_free(faults);
    cold_fixture_done(ct, data);
}

/* A stand-in node for the client's side of CHECK_COLD: it accepts one
 * connection and answers its requests, in order, with the statuses of
 * answers (FINAL, no payload), counting them in asked; then it closes. */
typedef struct scripted_node {
    int lfd;
    char endpoint[64];
    const int *answers;
    size_t n_answers;
    size_t asked;
    uv_thread_t th;
} scripted_node;

static void scripted_node_main(void *arg)
{
    scripted_node *b = arg;
    uint8_t h[NDW_REQ_HDR], rest[NDW_SEGMENT_MAX + NDW_TICKET_MAX], rh[NDW_RESP_HDR];
    ndw_request r;
    int fd = accept(b->lfd, NULL, NULL);
    while (fd >= 0 && b->asked < b->n_answers &&
           recv(fd, h, sizeof(h), MSG_WAITALL) == (ssize_t)sizeof(h) &&
           ndw_decode_request(h, &r) == 0 && r.op == NDW_OP_CHECK_COLD &&
           recv(fd, rest, r.seg_len + r.ticket_len, MSG_WAITALL) ==
               (ssize_t)(r.seg_len + r.ticket_len)) {
        int status = b->answers[b->asked++];
        const char *msg = status == SMP_EBUSY   ? "1 check(s) of cold files already run; try again"
                          : status == SMP_EPROTO ? "corrupt; reported to the master"
                                                 : "its data matches";
        ndw_response resp = { .status = status, .payload = 0, .msg_len = (uint16_t)strlen(msg),
                              .kind = NDW_KIND_FINAL };
        ndw_encode_response(rh, &resp);
        if (send(fd, rh, sizeof(rh), MSG_NOSIGNAL) != (ssize_t)sizeof(rh) ||
            send(fd, msg, resp.msg_len, MSG_NOSIGNAL) != (ssize_t)resp.msg_len)
            break;
    }
    if (fd >= 0)
        close(fd);
}

static void scripted_node_start(scripted_node *b, const int *answers, size_t n)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof(a);
    memset(b, 0, sizeof(*b));
    b->answers = answers;
    b->n_answers = n;
    b->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(b->lfd >= 0);
    assert_int_equal(bind(b->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(b->lfd, 1), 0);
    assert_int_equal(getsockname(b->lfd, (struct sockaddr *)&a, &al), 0);
    snprintf(b->endpoint, sizeof(b->endpoint), "127.0.0.1:%d", ntohs(a.sin_port));
    assert_int_equal(uv_thread_create(&b->th, scripted_node_main, b), 0);
}

static void scripted_node_join(scripted_node *b)
{
    uv_thread_join(&b->th);
    close(b->lfd);
}

/* A node hashes one file at a time for its clients and answers a check
 * that comes meanwhile SMP_EBUSY ("try again"): readers of one rotten file
 * all ask at once. The client asks again until the node answers, so each
 * reader gets the node's verdict -- corrupt or intact -- instead of the
 * refusal. */
static void test_cold_check_asks_again_while_the_node_is_busy(void **state)
{
    static const int corrupt[] = { SMP_EBUSY, SMP_EBUSY, SMP_EPROTO };
    static const int intact[] = { SMP_EBUSY, SMP_OK };
    const uint8_t ticket[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    const char *name = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff.cold";
    scripted_node b;
    ndc_conn *c = NULL;
    ndc_options o = { .timeout_ms = 5000 };
    char err[256];
    (void)state;

    scripted_node_start(&b, corrupt, 3);
    assert_int_equal(ndc_connect(b.endpoint, &o, &c, err, sizeof(err)), SMP_OK);
    assert_int_equal(ndc_check_cold(c, name, ticket, sizeof(ticket)), SMP_EPROTO);
    assert_int_equal(b.asked, 3);
    assert_non_null(strstr(ndc_last_error(c), "corrupt; reported to the master"));
    ndc_close(c);
    scripted_node_join(&b);

    scripted_node_start(&b, intact, 2);
    assert_int_equal(ndc_connect(b.endpoint, &o, &c, err, sizeof(err)), SMP_OK);
    assert_int_equal(ndc_check_cold(c, name, ticket, sizeof(ticket)), SMP_OK);
    assert_int_equal(b.asked, 2);
    ndc_close(c);
    scripted_node_join(&b);
}

/* A node without a cold tier refuses READ_COLD and keeps the connection. */
static void test_cold_read_without_cold_tier(void **state)
{
    harness *h = harness_start("nc", &g_secret, 0);
    ndc_conn *c = connect_to(h);
    char name[COLD_NAME_MAX];
    uint8_t sha[32] = { 0 }, buf[16];
    (void)state;
    assert_int_equal(cold_name_for("k", sha, name), SMP_OK);
    assert_int_equal(ndc_read_cold(c, name, 0, sizeof(buf), buf, NULL, 0), SMP_ENOTSUP);
    assert_int_equal(ndc_read(c, "nc", 0, sizeof(buf), buf, NULL, 0), SMP_OK);
    ndc_close(c);
    harness_stop(h);
}

/* 1 when this process has the file at path open (a descriptor in
 * /proc/self/fd links to it). */
static int file_is_open(const char *path)
{
    char link[300], target[512];
    int found = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    for (struct dirent *e; !found && (e = readdir(d)) != NULL;) {
        snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n > 0) {
            target[n] = '\0';
            found = strcmp(target, path) == 0;
        }
    }
    closedir(d);
    return found;
}

/* A check whose connection is closed while the node hashes its file (the
 * server closing) still ends: the corrupt file is noted, and the server is
 * freed only after (it waits for the hash). The file being open is how the
 * test knows the hash runs. */
static void test_cold_check_cut_off_still_notes_the_file(void **state)
{
    char name[COLD_NAME_MAX], path[400], taken[2][COLD_NAME_MAX];
    uint8_t *data, frame[NDW_REQ_HDR + COLD_NAME_MAX];
    cold_tier *ct = cold_fixture_sized(name, &data, COLD_BIG_BYTES);
    cold_faults *faults = cold_faults_new();
    harness *h = harness_start_with("cl", &g_secret, 0, 0, ct, faults);
    (void)state;
    assert_non_null(faults);
    char real[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", cold_dir(ct), name);
    assert_non_null(realpath(path, real));
    flip_file_byte(path, COLD_HEADER_BYTES + COLD_BIG_BYTES - 1);

    int fd = raw_connect(h);
    ndw_request r = { .op = NDW_OP_CHECK_COLD, .seg_len = (uint16_t)strlen(name) };
    ndw_encode_request(frame, &r);
    memcpy(frame + NDW_REQ_HDR, name, strlen(name));
    assert_int_equal(send(fd, frame, NDW_REQ_HDR + strlen(name), 0),
                     (ssize_t)(NDW_REQ_HDR + strlen(name)));
    int open_seen = 0;
    for (int i = 0; i < 200000 && !(open_seen = file_is_open(real)); i++) {
    }
    assert_true(open_seen);
    harness_stop(h); /* closes the connection under the hash; returns once all ended */
    close(fd);
    assert_int_equal(cold_faults_take(faults, taken, 2), 1);
    assert_string_equal(taken[0], name);
    cold_faults_free(faults);
    cold_fixture_done(ct, data);
}

/* A port nobody listens on (bound by the test, so no one else takes it):
 * the connect's error names the real cause, "Connection refused", with a
 * timeout (a nonblocking connect, its result read with SO_ERROR) and
 * without -- never the "Operation now in progress" of its start. */
static void test_refused_connect_names_its_cause(void **state)
{
    (void)state;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0); /* no listen */
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    char ep[64], err[256];
    snprintf(ep, sizeof(ep), "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
    int timeouts[] = {5000, 0};
    for (size_t i = 0; i < 2; i++) {
        ndc_conn *c = NULL;
        ndc_options o = {.timeout_ms = timeouts[i]};
        err[0] = '\0';
        assert_int_equal(ndc_connect(ep, &o, &c, err, sizeof(err)), SMP_EIO);
        assert_null(c);
        if (strstr(err, "cannot connect to") == NULL || strstr(err, "Connection refused") == NULL)
            fail_msg("timeout %d: %s", timeouts[i], err);
    }
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_connect_names_its_cause),
        cmocka_unit_test(test_write_then_read_round_trip),
        cmocka_unit_test(test_bad_tickets_write_nothing),
        cmocka_unit_test(test_range_and_segment_refusals),
        cmocka_unit_test(test_bad_frames_close_only_their_connection),
        cmocka_unit_test(test_read_tickets_when_required),
        cmocka_unit_test(test_write_ticket_is_single_use),
        cmocka_unit_test(test_cold_reads_need_their_ticket),
        cmocka_unit_test(test_no_secret_no_writes),
        cmocka_unit_test(test_two_clients_interleaved),
        cmocka_unit_test(test_idle_connections_are_closed),
        cmocka_unit_test(test_cold_read_round_trip),
        cmocka_unit_test(test_cold_read_refusals),
        cmocka_unit_test(test_cold_read_client_vanishes),
        cmocka_unit_test(test_cold_read_cut_short_is_never_complete),
        cmocka_unit_test(test_cold_read_waits_for_a_slow_reader),
        cmocka_unit_test(test_cold_read_without_cold_tier),
        cmocka_unit_test(test_cold_check_hashes_the_whole_file),
        cmocka_unit_test(test_cold_check_asks_again_while_the_node_is_busy),
        cmocka_unit_test(test_cold_check_cut_off_still_notes_the_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
