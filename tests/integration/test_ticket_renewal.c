/* test_ticket_renewal.c -- weight_put and weight_get that outlive the node
 * tickets they started with, over a real slow link.
 *
 * A real master mints tickets valid for node.ticket_ttl_ms = 1000 ms (the
 * least its config allows); a real store_node listens on 127.0.0.1:P and
 * advertises 127.0.0.2, where a relay (fault_proxy) on the same port P
 * throttles every byte between the client and the node's data port: the
 * client goes through the slow link without knowing it. The client uses the
 * TCP transport only.
 *
 *   - a put whose writes run six TTLs past their WRITE tickets, and past
 *     node.put_timeout_ms, commits: the node checks a write's ticket before
 *     its first byte, not after, and reports the writes it is receiving with
 *     each poll, which keeps their puts on the master;
 *   - a get of two 12 MiB objects in 8 MiB windows at 4 MiB/s (six TTLs,
 *     with a lease TTL of 1 s too) succeeds byte for byte: the node refuses
 *     each window whose ticket expired, the client asks the master for fresh
 *     tickets (stats.ticket_refreshes) and goes on from that window, and the
 *     renew thread keeps the lease; the same from the node's cold files for a
 *     revision put preferring COLD (READ_COLD tickets);
 *   - a forged ticket (its MAC changed in flight) and a ticket used on
 *     another range (the request's offset changed in flight) are refused by
 *     the node with the cause, and the client does not retry: the node sees
 *     exactly one such request, no fresh ticket is asked for, nothing lands
 *     in the caller's buffers, and the revision still reads back after;
 *   - a link that delays each payload request longer than a ticket lives
 *     (the relay holds it 1.5 s) makes even a fresh ticket arrive expired:
 *     the client asks for one fresh ticket, and when that one is refused as
 *     expired too it stops, naming the clocks, instead of asking forever. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fault_proxy.h"
#include "harness.h"
#include "node_data_wire.h"
#include "weight_check.h"
#include "weightclient.h"

#define TTL_MS 1000
#define SEGMENT (64ull << 20)
#define OBJ_BYTES (12ull << 20)     /* one tensor per payload object */
#define SLOW_GET (4ul << 20)        /* bytes a second: an 8 MiB window takes 2 TTLs */
#define SLOW_PUT (4ul << 20)        /* both objects' writes together: 6 s */
#define PUT_TIMEOUT_MS 2500         /* node.put_timeout_ms: the least for TTL_MS and poll_ms 50 */
#define SHIFT (32ull << 20)         /* a wrong range: inside the segment, off the ticket's */

static const char *const names[2] = {"a.weight", "b.weight"};

/* What the relay does to the client's READ requests of at least 1 MiB (the
 * payload windows; the manifest's read is smaller). */
typedef enum tamper_mode { TAMPER_NONE, TAMPER_FORGE, TAMPER_RANGE, TAMPER_DELAY } tamper_mode;
#define DELAY_MS 1500               /* TAMPER_DELAY: longer than a ticket lives */

#define TRACK 64
typedef struct conn_parse {
    unsigned conn;
    uint8_t hdr[NDW_REQ_HDR];
    size_t hdr_got;
    uint64_t left;                  /* bytes of segment id and ticket still to come */
    int hit;
} conn_parse;

typedef struct tamper {
    _Atomic int mode;
    atomic_uint tampered;           /* requests changed in flight */
    conn_parse conns[TRACK];        /* the relay thread's only */
} tamper;

typedef struct fx {
    hx_master m;
    hx_node n;
    fault_proxy *proxy;
    tamper t;
    uint8_t *data[2];
    weight_identity id;
} fx;

/* The relay's filter: follow the request frames of each connection (a
 * reader sends nothing else) and change the ones tamper.mode names. */
static void on_client_bytes(void *ctx, unsigned conn, unsigned long long at, unsigned char *buf,
                            size_t n)
{
    tamper *t = ctx;
    conn_parse *c = &t->conns[conn % TRACK];
    int mode = atomic_load(&t->mode);
    (void)at;
    if (c->conn != conn) {
        memset(c, 0, sizeof *c);
        c->conn = conn;
    }
    for (size_t i = 0; i < n; i++) {
        if (c->hdr_got < NDW_REQ_HDR) {
            c->hdr[c->hdr_got++] = buf[i];
            if (c->hdr_got < NDW_REQ_HDR) continue;
            c->left = (uint64_t)ndw_get_u16(c->hdr + 6) + ndw_get_u32(c->hdr + 24);
            c->hit = mode != TAMPER_NONE && c->hdr[4] == NDW_OP_READ &&
                     ndw_get_u64(c->hdr + 16) >= (1u << 20);
            if (c->hit && mode == TAMPER_RANGE) {
                if (i + 1 < NDW_REQ_HDR) {
                    c->hit = 0; /* the offset went out in an earlier piece */
                } else {
                    uint8_t *h = buf + i + 1 - NDW_REQ_HDR;
                    ndw_put_u64(h + 8, ndw_get_u64(h + 8) + SHIFT);
                }
            }
            if (c->hit) atomic_fetch_add(&t->tampered, 1);
            if (c->hit && mode == TAMPER_DELAY) { /* the ticket reaches the node DELAY_MS late */
                struct timespec ts = {DELAY_MS / 1000, (long)(DELAY_MS % 1000) * 1000000L};
                nanosleep(&ts, NULL);
            }
            continue;
        }
        if (--c->left == 0) {
            if (c->hit && mode == TAMPER_FORGE) buf[i] ^= 0x01; /* the MAC's last byte */
            c->hdr_got = 0;
        }
    }
}

/* Monotonic milliseconds: the relay's throttle puts a lower bound on how
 * long a transfer takes, which these check (the premise of each test). */
static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static weight_store *open_store(fx *f, unsigned threads, uint64_t lease_ttl_ms)
{
    weight_store *s = NULL;
    char err[256];
    if (weight_store_open(f->m.socket, "acme", NULL, &s, err, sizeof err) != 0)
        fail_msg("weight_store_open: %s", err);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_TRANSPORT, 2), 0);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_PAYLOAD_BYTES, OBJ_BYTES), 0);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_THREADS, threads), 0);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_LEASE_TTL_MS, lease_ttl_ms), 0);
    return s;
}

/* Start the relay on 127.0.0.2:P and the node's data port on 127.0.0.1:P,
 * and wait for the node to register. P was free on 127.0.0.2 when the relay
 * took it, but a process beside this test (another suite's listener on
 * 127.0.0.1:0) may hold it on 127.0.0.1: the node then exits, naming the
 * address, and this tries another P. 0, or -1 with the cause and the
 * node's log on stderr. */
static int start_node_behind_relay(fx *f)
{
    for (int attempt = 0; attempt < 8; attempt++) {
        char listen[64], node_listen[64];
        int status;
        if (fault_proxy_start_at("127.0.0.2", "127.0.0.1:0", &f->proxy, listen, sizeof listen) < 0) {
            fprintf(stderr, "cannot start the relay on 127.0.0.2\n");
            return -1;
        }
        fault_proxy_set_filter(f->proxy, on_client_bytes, &f->t);
        snprintf(node_listen, sizeof node_listen, "127.0.0.1:%s", strrchr(listen, ':') + 1);
        const char *args[] = {"--listen", node_listen, "--advertise", "127.0.0.2", NULL};
        if (hx_node_start_args(&f->m, &f->n, "node-r", SEGMENT, args) < 0) {
            fprintf(stderr, "cannot start store_node\n");
            return -1;
        }
        for (long long end = hx_now_ms() + 20000; hx_now_ms() < end;) {
            if (hx_wait_nodes(&f->m, 1, 200) == 0) return 0;
            if (waitpid(f->n.pid, &status, WNOHANG) == f->n.pid) {
                f->n.pid = 0;
                break;
            }
        }
        int taken = f->n.pid == 0 && hx_file_contains(f->n.log, "cannot listen on");
        if (!taken) {
            char text[8192];
            hx_read_text(f->n.log, text, sizeof text);
            fprintf(stderr, "store_node behind the relay (%s) did not register:\n%s\n", node_listen,
                    text);
            return -1;
        }
        fprintf(stderr, "%s is taken; another port\n", node_listen);
        unlink(f->n.log); /* the next attempt's log starts empty */
        fault_proxy_stop(f->proxy);
        f->proxy = NULL;
    }
    fprintf(stderr, "no port free on both 127.0.0.1 and 127.0.0.2 in 8 tries\n");
    return -1;
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    char extra[256];
    if (f == NULL) return -1;
    *state = f; /* teardown frees what a failed setup leaves */
    for (int k = 0; k < 2; k++) {
        if ((f->data[k] = malloc(OBJ_BYTES)) == NULL) return -1;
        uint64_t x = 0x9E3779B97F4A7C15ull + (uint64_t)k;
        for (uint64_t b = 0; b < OBJ_BYTES; b++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            f->data[k][b] = (uint8_t)x;
        }
    }
    snprintf(extra, sizeof extra,
             "node:\n  embedded: false\n  timeout_ms: 2000\n  poll_ms: 50\n"
             "  ticket_ttl_ms: %d\n  put_timeout_ms: %d\n"
             "cluster:\n  default_weight_preferred_residency: hot\n", TTL_MS, PUT_TIMEOUT_MS);
    if (hx_init(&f->m, "ticket-renewal", extra) < 0 || hx_start(&f->m, 20000) < 0) {
        hx_print_log(&f->m);
        return -1;
    }
    if (start_node_behind_relay(f) < 0) return -1;
    assert_int_equal(weight_identity_set(&f->id, NULL, "llm", "slow", "r1", 1), 0);
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    if (f == NULL) return 0;
    fault_proxy_stop(f->proxy);
    hx_node_kill(&f->n);
    hx_cleanup(&f->m);
    for (int k = 0; k < 2; k++) free(f->data[k]);
    free(f);
    return 0;
}

/* The caller's buffers of a get: one per tensor, filled with 0xEE. */
typedef struct getctx {
    uint8_t *bufs[2];
} getctx;

/* weight_get of the revision (every tensor whole: no placement callback)
 * into fresh buffers; free them with free_get. */
static int get_revision(fx *f, weight_store *s, getctx *g, weight_get_stats *st)
{
    weight_binding b[2];
    for (int k = 0; k < 2; k++) {
        g->bufs[k] = malloc(OBJ_BYTES);
        memset(g->bufs[k], 0xEE, OBJ_BYTES);
        b[k] = (weight_binding){names[k], g->bufs[k], OBJ_BYTES};
    }
    weight_bindings bd = {b, 2, NULL, NULL};
    return weight_get(s, &f->id, NULL, &bd, st);
}

static void free_get(getctx *g)
{
    for (int k = 0; k < 2; k++) free(g->bufs[k]);
}

static int all_bytes(const uint8_t *p, uint8_t v, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

/* Two 12 MiB objects written over the 4 MiB/s link at once: each write runs
 * six times the WRITE ticket's life and more than twice node.put_timeout_ms,
 * and the revision commits READY: the node checks a write's ticket before
 * its first byte, and reports the writes it is receiving with each poll, so
 * the master keeps their puts. */
static void test_put_outlives_its_write_tickets(void **state)
{
    fx *f = *state;
    weight_store *s = open_store(f, 2, 0);
    weight_writer *w = NULL;
    weight_metadata md;
    uint64_t shape[1] = {OBJ_BYTES};
    fault_proxy_throttle(f->proxy, SLOW_PUT);
    CHECK(s, weight_put_begin(s, &f->id, NULL, &w));
    for (int k = 0; k < 2; k++) CHECK(s, weight_writer_add_tensor(w, names[k], "U8", 1, shape, f->data[k]));
    uint64_t t0 = mono_ms();
    CHECK(s, weight_writer_commit(w, &md));
    uint64_t took = mono_ms() - t0;
    fault_proxy_throttle(f->proxy, 0);
    /* 24 MiB through 4 MiB/s: the writes outlived their tickets and the
     * time after which the master takes a silent put back */
    assert_true(took >= 2 * PUT_TIMEOUT_MS);
    assert_int_equal(md.availability, WEIGHT_READY);
    assert_int_equal(md.payload_count, 2);
    weight_store_close(s);
}

/* Six TTLs of reading, one worker: every window after the first of an
 * object meets an expired ticket, gets a fresh one and goes on; the lease
 * (TTL 1 s) is renewed throughout; the bytes are the put's. */
static void test_slow_get_refreshes_expired_tickets(void **state)
{
    fx *f = *state;
    weight_store *s = open_store(f, 1, TTL_MS);
    weight_get_stats st;
    getctx g;
    fault_proxy_throttle(f->proxy, SLOW_GET);
    uint64_t t0 = mono_ms();
    int rc = get_revision(f, s, &g, &st);
    uint64_t took = mono_ms() - t0;
    fault_proxy_throttle(f->proxy, 0);
    if (rc != WEIGHT_OK) fail_msg("weight_get: %s: %s", weight_error_name(rc), weight_store_last_error(s));
    assert_true(took >= 5 * TTL_MS); /* 24 MiB through 4 MiB/s */
    for (int k = 0; k < 2; k++) assert_memory_equal(g.bufs[k], f->data[k], OBJ_BYTES);
    assert_int_equal(st.bytes, 2 * OBJ_BYTES);
    assert_int_equal(st.local_bytes, 0);
    assert_int_equal(st.verified_bytes, 2 * OBJ_BYTES);
    /* obj 1: its second window; obj 2: both (its ticket is from the start) */
    assert_int_equal(st.ticket_refreshes, 3);
    free_get(&g);
    weight_store_close(s);
}

/* The same slow get of a COLD revision (MANUAL, put preferring COLD): the
 * objects come from the node's cold files (READ_COLD), whose tickets expire
 * and are refreshed the same way. */
static void test_slow_cold_get_refreshes_expired_tickets(void **state)
{
    fx *f = *state;
    weight_store *s = open_store(f, 1, TTL_MS);
    weight_policy cold = {WEIGHT_RES_COLD, 0, WEIGHT_MODE_MANUAL};
    weight_identity id = f->id;
    weight_writer *w = NULL;
    weight_metadata md;
    weight_get_stats st;
    getctx g;
    uint64_t shape[1] = {OBJ_BYTES};
    snprintf(f->id.revision, sizeof f->id.revision, "r1-cold");
    CHECK(s, weight_put_begin(s, &f->id, &cold, &w));
    for (int k = 0; k < 2; k++) CHECK(s, weight_writer_add_tensor(w, names[k], "U8", 1, shape, f->data[k]));
    CHECK(s, weight_writer_commit(w, &md));
    for (int i = 0; i < 600; i++) { /* published HOT, then converges to COLD */
        CHECK(s, weight_get_metadata(s, &f->id, &md, NULL));
        if (md.residency == WEIGHT_RES_COLD && md.operation_id == 0) break;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(md.residency, WEIGHT_RES_COLD);
    fault_proxy_throttle(f->proxy, SLOW_GET);
    int rc = get_revision(f, s, &g, &st);
    fault_proxy_throttle(f->proxy, 0);
    f->id = id;
    if (rc != WEIGHT_OK) fail_msg("weight_get: %s: %s", weight_error_name(rc), weight_store_last_error(s));
    for (int k = 0; k < 2; k++) assert_memory_equal(g.bufs[k], f->data[k], OBJ_BYTES);
    assert_int_equal(st.bytes, 2 * OBJ_BYTES);
    assert_int_equal(st.ticket_refreshes, 3);
    free_get(&g);
    weight_store_close(s);
}

/* A get whose payload reads the relay changes (mode): refused by the node
 * with `cause` after exactly `requests` such reads and `refreshes` fresh
 * tickets, nothing written into the buffers; then the revision reads back
 * untouched. */
static void refused_get(fx *f, tamper_mode mode, const char *cause, unsigned requests,
                        uint64_t refreshes)
{
    weight_store *s = open_store(f, 1, 0);
    weight_get_stats st;
    getctx g;
    atomic_store(&f->t.tampered, 0);
    atomic_store(&f->t.mode, mode);
    int rc = get_revision(f, s, &g, &st);
    atomic_store(&f->t.mode, TAMPER_NONE);
    assert_int_equal(rc, WEIGHT_EIO);
    assert_true(hx_says(weight_store_last_error(s), cause));
    assert_int_equal(atomic_load(&f->t.tampered), requests); /* never sent again */
    assert_int_equal(st.ticket_refreshes, refreshes);
    assert_int_equal(st.bytes, 0);
    for (int k = 0; k < 2; k++) assert_true(all_bytes(g.bufs[k], 0xEE, OBJ_BYTES));
    free_get(&g);
    CHECK(s, get_revision(f, s, &g, &st));
    for (int k = 0; k < 2; k++) assert_memory_equal(g.bufs[k], f->data[k], OBJ_BYTES);
    assert_int_equal(st.ticket_refreshes, 0);
    free_get(&g);
    weight_store_close(s);
}

/* Every payload request reaches the node 1.5 s after it left (a ticket
 * lives 1 s): the expired ticket is refreshed once, the fresh one arrives
 * expired too, and the get stops there -- two requests, one refresh. */
static void test_fresh_ticket_expired_again_is_not_refreshed(void **state)
{
    refused_get(*state, TAMPER_DELAY, "the fresh read ticket was refused as expired too", 2, 1);
}

/* A READ ticket whose MAC changed in flight: "bad signature". */
static void test_forged_ticket_is_refused_not_retried(void **state)
{
    refused_get(*state, TAMPER_FORGE, "bad signature", 1, 0);
}

/* A valid READ ticket on a range 32 MiB past its own: "not the ticket's". */
static void test_wrong_range_is_refused_not_retried(void **state)
{
    refused_get(*state, TAMPER_RANGE, "the range is not the ticket's", 1, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_outlives_its_write_tickets),
        cmocka_unit_test(test_slow_get_refreshes_expired_tickets),
        cmocka_unit_test(test_forged_ticket_is_refused_not_retried),
        cmocka_unit_test(test_wrong_range_is_refused_not_retried),
        cmocka_unit_test(test_slow_cold_get_refreshes_expired_tickets),
        cmocka_unit_test(test_fresh_ticket_expired_again_is_not_refreshed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
