/* test_tickets.c -- tickets on every node data path, with a real master and
 * a real store_node process over TCP.
 *
 * Writes and reads both need the master's HMAC ticket: no ticket, a forged
 * one, one with its key id changed, one used on another range or object,
 * an expired one and a replayed write ticket are each refused by the node
 * with a sentence naming the cause, and nothing is written (the segment
 * file is read back directly) or read (the caller's buffer is untouched).
 * A read ticket may be used again until it expires (what the design
 * allows). The node's ticket key is rotated with SIGHUP while a client
 * reads over TCP without pause: the first rotation is taken right after the
 * node's start (it forgets no key), no read fails, a ticket signed with the
 * previous key still reads after the master switched, a second rotation
 * too soon is refused (logged, naming the key it would forget) and, once
 * allowed, forgets the first key. */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "node_data_client.h"

#define SEGMENT (16ull << 20)
#define TTL_MS 2000
#define OBJ_BYTES 8192

typedef struct fx {
    hx_master m;
    hx_node n;
    kvc *c;
} fx;

static int setup(void **state)
{
    char extra[256];
    fx *f = calloc(1, sizeof(*f));
    snprintf(extra, sizeof(extra),
             "node:\n  embedded: false\n  timeout_ms: 2000\n  poll_ms: 50\n"
             "  ticket_ttl_ms: %d\n", TTL_MS);
    assert_int_equal(hx_init(&f->m, "tickets", extra), 0);
    assert_int_equal(hx_start(&f->m, 10000), 0);
    assert_int_equal(hx_node_start(&f->m, &f->n, "node-t", SEGMENT), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    f->c = hx_client(&f->m);
    assert_non_null(f->c);
    kvc_set_transport(f->c, KVC_REMOTE); /* over the data port, not the mapping */
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    kvc_close(f->c);
    hx_node_kill(&f->n);
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The bytes of r's range as they are in the node's segment file. */
static void seg_read(const kvc_replica *r, uint8_t *out, size_t len)
{
    int fd = open(r->segment_path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, out, len, (off_t)r->offset), (ssize_t)len);
    close(fd);
}

static ndc_conn *connect_to(const kvc_replica *r)
{
    char err[256];
    ndc_conn *n = NULL;
    assert_int_equal(ndc_connect(r->data_addr, NULL, &n, err, sizeof(err)), SMP_OK);
    return n;
}

/* The key id a ticket names (node_ticket.h: u32 at byte 46). */
static uint32_t key_id_of(const kvc_replica *r)
{
    assert_true(r->ticket_len > 50);
    return (uint32_t)r->ticket[46] << 24 | (uint32_t)r->ticket[47] << 16 |
           (uint32_t)r->ticket[48] << 8 | r->ticket[49];
}

static void get_memory_replica(kvc *c, const char *key, kvc_replica *out)
{
    kvc_object o;
    assert_int_equal(kvc_get(c, key, &o), SMP_OK);
    assert_true(o.n_replicas >= 1);
    assert_int_equal(o.replicas[0].kind, SMP_REPLICA_MEMORY);
    assert_true(o.replicas[0].ticket_len > 0);
    *out = o.replicas[0];
}

/* No ticket, forged, re-keyed, wrong range, a read ticket, expired: each
 * refused with its cause, nothing written. The genuine ticket writes once;
 * the same ticket again is refused and the bytes stay the first write's. */
static void test_write_tickets_refused_and_nothing_written(void **state)
{
    fx *f = *state;
    kvc_replica w, w2, rd;
    uint8_t data[OBJ_BYTES], other[OBJ_BYTES], before[OBJ_BYTES], now[OBJ_BYTES];
    uint8_t bad[sizeof(w.ticket)];
    memset(data, 0xab, sizeof(data));
    memset(other, 0xcd, sizeof(other));
    assert_int_equal(kvc_put_start(f->c, "w", sizeof(data), SMP_DATA_KV, NULL, 0, &w), SMP_OK);
    assert_true(w.ticket_len > 0);
    seg_read(&w, before, sizeof(before));
    ndc_conn *n = connect_to(&w);

    assert_int_equal(ndc_write(n, w.segment, w.offset, sizeof(data), data, NULL, 0), SMP_EINVAL);
    assert_true(hx_says(ndc_last_error(n), "needs a ticket"));

    memcpy(bad, w.ticket, w.ticket_len);
    bad[w.ticket_len - 1] ^= 1; /* the MAC */
    assert_int_equal(ndc_write(n, w.segment, w.offset, sizeof(data), data, bad, w.ticket_len),
                     SMP_EINVAL);
    assert_true(hx_says(ndc_last_error(n), "bad signature"));

    memcpy(bad, w.ticket, w.ticket_len);
    bad[49] ^= 1; /* the key id: another key, and the MAC covers it */
    assert_int_equal(ndc_write(n, w.segment, w.offset, sizeof(data), data, bad, w.ticket_len),
                     SMP_EINVAL);

    assert_int_equal(ndc_write(n, w.segment, w.offset + OBJ_BYTES, sizeof(data), data, w.ticket,
                               w.ticket_len), SMP_ERANGE);
    assert_true(hx_says(ndc_last_error(n), "not the ticket's"));
    assert_int_equal(ndc_write(n, w.segment, w.offset, sizeof(data) / 2, data, w.ticket,
                               w.ticket_len), SMP_ERANGE);
    seg_read(&w, now, sizeof(now));
    assert_memory_equal(now, before, sizeof(now));

    /* The genuine ticket writes its range once. */
    assert_int_equal(ndc_write(n, w.segment, w.offset, sizeof(data), data, w.ticket, w.ticket_len),
                     SMP_OK);
    seg_read(&w, now, sizeof(now));
    assert_memory_equal(now, data, sizeof(now));
    /* Replayed (same connection, then another one): refused, unchanged. */
    assert_int_equal(ndc_write(n, w.segment, w.offset, sizeof(other), other, w.ticket,
                               w.ticket_len), SMP_EEXIST);
    assert_true(hx_says(ndc_last_error(n), "already used"));
    ndc_close(n);
    n = connect_to(&w);
    assert_int_equal(ndc_write(n, w.segment, w.offset, sizeof(other), other, w.ticket,
                               w.ticket_len), SMP_EEXIST);
    seg_read(&w, now, sizeof(now));
    assert_memory_equal(now, data, sizeof(now));
    uint8_t sha[32];
    hx_sha256(data, sizeof(data), sha);
    assert_int_equal(kvc_put_end(f->c, "w", sha, NULL), SMP_OK);

    /* A read ticket does not write. */
    get_memory_replica(f->c, "w", &rd);
    assert_int_equal(ndc_write(n, rd.segment, rd.offset, sizeof(other), other, rd.ticket,
                               rd.ticket_len), SMP_EINVAL);
    seg_read(&rd, now, sizeof(now));
    assert_memory_equal(now, data, sizeof(now));

    /* Expired: refused, nothing written. */
    assert_int_equal(kvc_put_start(f->c, "w2", sizeof(data), SMP_DATA_KV, NULL, 0, &w2), SMP_OK);
    seg_read(&w2, before, sizeof(before));
    sleep_ms(TTL_MS + 300);
    assert_int_equal(ndc_write(n, w2.segment, w2.offset, sizeof(data), data, w2.ticket,
                               w2.ticket_len), SMP_ESTATE);
    assert_true(hx_says(ndc_last_error(n), "expired"));
    seg_read(&w2, now, sizeof(now));
    assert_memory_equal(now, before, sizeof(now));
    assert_int_equal(kvc_put_revoke(f->c, "w2"), SMP_OK);
    ndc_close(n);
}

/* Reads: no ticket, forged, another object's ticket, past the ticket's
 * range, expired -- refused, the buffer untouched. The genuine ticket reads
 * its range and any part of it, again and again until it expires. */
static void test_read_tickets_refused_and_nothing_read(void **state)
{
    fx *f = *state;
    kvc_replica a, b;
    uint8_t da[OBJ_BYTES], db[OBJ_BYTES], buf[OBJ_BYTES + 64], sentinel[sizeof(buf)];
    uint8_t bad[sizeof(a.ticket)];
    memset(da, 0x11, sizeof(da));
    memset(db, 0x22, sizeof(db));
    assert_int_equal(kvc_put_bytes(f->c, "a", da, sizeof(da), SMP_DATA_KV, NULL, 0, NULL), SMP_OK);
    assert_int_equal(kvc_put_bytes(f->c, "b", db, sizeof(db), SMP_DATA_KV, NULL, 0, NULL), SMP_OK);
    get_memory_replica(f->c, "a", &a);
    get_memory_replica(f->c, "b", &b);
    memset(sentinel, 0x5a, sizeof(sentinel));
    ndc_conn *n = connect_to(&a);

#define UNTOUCHED() assert_memory_equal(buf, sentinel, sizeof(buf))
    memcpy(buf, sentinel, sizeof(buf));
    assert_int_equal(ndc_read(n, a.segment, a.offset, OBJ_BYTES, buf, NULL, 0), SMP_EINVAL);
    assert_true(hx_says(ndc_last_error(n), "needs a ticket"));
    UNTOUCHED();
    memcpy(bad, a.ticket, a.ticket_len);
    bad[60] ^= 0x40; /* inside the signed segment id / key */
    assert_true(ndc_read(n, a.segment, a.offset, OBJ_BYTES, buf, bad, a.ticket_len) < 0);
    UNTOUCHED();
    /* a's ticket on b's bytes, and past a's own range */
    assert_int_equal(ndc_read(n, b.segment, b.offset, OBJ_BYTES, buf, a.ticket, a.ticket_len),
                     SMP_ERANGE);
    assert_true(hx_says(ndc_last_error(n), "not the ticket's"));
    UNTOUCHED();
    assert_int_equal(ndc_read(n, a.segment, a.offset, OBJ_BYTES + 64, buf, a.ticket, a.ticket_len),
                     SMP_ERANGE);
    UNTOUCHED();
    assert_int_equal(ndc_read(n, a.segment, a.offset - 64, 64, buf, a.ticket, a.ticket_len),
                     SMP_ERANGE);
    UNTOUCHED();

    /* genuine, again (a read ticket is not single use), and a part of it */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ndc_read(n, a.segment, a.offset, OBJ_BYTES, buf, a.ticket, a.ticket_len),
                         SMP_OK);
        assert_memory_equal(buf, da, OBJ_BYTES);
    }
    assert_int_equal(ndc_read(n, a.segment, a.offset + 100, 100, buf, a.ticket, a.ticket_len),
                     SMP_OK);
    assert_memory_equal(buf, da, 100);

    sleep_ms(TTL_MS + 300);
    memcpy(buf, sentinel, sizeof(buf));
    assert_int_equal(ndc_read(n, a.segment, a.offset, OBJ_BYTES, buf, a.ticket, a.ticket_len),
                     SMP_ESTATE);
    assert_true(hx_says(ndc_last_error(n), "expired"));
    UNTOUCHED();
#undef UNTOUCHED
    ndc_close(n);
    /* The client's own path (fresh tickets with every lookup) reads. */
    uint64_t got = 0;
    assert_int_equal(kvc_get_into(f->c, "a", buf, sizeof(buf), &got, 1), SMP_OK);
    assert_int_equal(got, OBJ_BYTES);
    assert_memory_equal(buf, da, OBJ_BYTES);
}

typedef struct reader {
    const hx_master *m;
    atomic_int stop;
    unsigned long ok, failed;
    char first_error[512];
} reader;

#define KEYS 8

static void *read_loop(void *arg)
{
    reader *r = arg;
    kvc *c = hx_client(r->m);
    uint8_t buf[OBJ_BYTES];
    char key[32];
    if (c == NULL) {
        r->failed++;
        return NULL;
    }
    kvc_set_transport(c, KVC_REMOTE);
    for (unsigned i = 0; !atomic_load(&r->stop); i++) {
        uint64_t got = 0;
        snprintf(key, sizeof(key), "load-%u", i % KEYS);
        int rc = kvc_get_into(c, key, buf, sizeof(buf), &got, 1);
        if (rc == SMP_OK && got == OBJ_BYTES && buf[0] == (uint8_t)(i % KEYS)) {
            r->ok++;
        } else {
            if (r->failed++ == 0)
                snprintf(r->first_error, sizeof(r->first_error), "%s: %d %s", key, rc,
                         kvc_error(c));
        }
    }
    kvc_close(c);
    return NULL;
}

/* Fresh tickets name key id `want` within timeout_ms. */
static int wait_key(fx *f, uint32_t want, int timeout_ms)
{
    kvc_replica r;
    for (int waited = 0; waited < timeout_ms; waited += 20) {
        get_memory_replica(f->c, "load-0", &r);
        if (key_id_of(&r) == want) return 1;
        sleep_ms(20);
    }
    return 0;
}

/* SIGHUP rotates the node's key while a client reads without pause over
 * TCP: the first at once after the start; no read fails; a ticket of the
 * old key reads after the switch; a rotation too soon is refused; the next
 * forgets key 1. */
static void test_key_rotation_under_load_fails_no_read(void **state)
{
    fx *f = *state;
    uint8_t data[OBJ_BYTES], buf[OBJ_BYTES];
    char key[32];
    kvc_replica old;
    pthread_t th;
    for (int i = 0; i < KEYS; i++) {
        memset(data, i, sizeof(data));
        snprintf(key, sizeof(key), "load-%d", i);
        assert_int_equal(kvc_put_bytes(f->c, key, data, sizeof(data), SMP_DATA_KV, NULL, 0, NULL),
                         SMP_OK);
    }
    reader r = {.m = &f->m};
    assert_int_equal(pthread_create(&th, NULL, read_loop, &r), 0);
    /* The first rotation forgets nothing (key 1 stays accepted): it is
     * taken at once, however young key 1 is. */
    get_memory_replica(f->c, "load-0", &old);
    assert_int_equal(key_id_of(&old), 1);
    assert_int_equal(kill(f->n.pid, SIGHUP), 0);
    assert_true(wait_key(f, 2, 10000));
    assert_true(hx_file_contains(f->n.log, "ticket key rotated to key 2 (key 1 still accepted)"));
    assert_false(hx_file_contains(f->n.log, "ticket key not rotated"));
    /* A ticket signed with key 1 just before still reads. */
    ndc_conn *n = connect_to(&old);
    assert_int_equal(ndc_read(n, old.segment, old.offset, OBJ_BYTES, buf, old.ticket,
                              old.ticket_len), SMP_OK);
    /* Too soon: refused, key 2 stays. */
    assert_int_equal(kill(f->n.pid, SIGHUP), 0);
    for (int waited = 0; waited < 5000 && !hx_file_contains(f->n.log, "ticket key not rotated");
         waited += 20)
        sleep_ms(20);
    assert_true(hx_file_contains(f->n.log, "ticket key not rotated"));
    /* naming the key it would forget: the master has yet to confirm key 2,
       or key 1's tickets may still live */
    assert_true(hx_file_contains(f->n.log, "which may still sign with key 1") ||
                hx_file_contains(f->n.log, "tickets signed with key 1 may live"));
    assert_true(wait_key(f, 2, 1000));
    /* Later: key 3, and key 1 is gone. */
    sleep_ms(TTL_MS + 1200);
    assert_int_equal(kill(f->n.pid, SIGHUP), 0);
    assert_true(wait_key(f, 3, 10000));
    assert_int_equal(ndc_read(n, old.segment, old.offset, OBJ_BYTES, buf, old.ticket,
                              old.ticket_len), SMP_EINVAL);
    assert_true(hx_says(ndc_last_error(n), "no longer holds"));
    ndc_close(n);
    sleep_ms(300);
    atomic_store(&r.stop, 1);
    pthread_join(th, NULL);
    if (r.failed) print_error("first failed read: %s\n", r.first_error);
    assert_int_equal(r.failed, 0);
    assert_true(r.ok > 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_write_tickets_refused_and_nothing_written, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_read_tickets_refused_and_nothing_read, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_key_rotation_under_load_fails_no_read, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
