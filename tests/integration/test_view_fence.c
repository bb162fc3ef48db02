/* test_view_fence.c -- a zero-copy view whose lease is lost fails closed,
 * on a real master with its embedded node.
 *
 * A view (weight_get_mapped) points into the process's mapping of the
 * node's segment; once its revision lease is lost the master may delete the
 * revision and put later generations in its ranges. The store's renewer
 * then fences the view: the pages of its objects are made inaccessible, so
 * a stale read faults (a child process that touches the view dies of
 * SIGSEGV) instead of returning another generation's bytes. Pinned here,
 * for both ways a lease is lost -- renewals refused (a PUT_FIRST upsert
 * fences the base, generations are published after it) and renewals that
 * cannot get through before the TTL (the store's link to the master cut,
 * through fault_proxy) -- and with the views that must keep reading: one
 * of a neighbouring revision whose object shares a page with the fenced
 * one, one of the same revision held through another store (its lease
 * live), and one taken after the fence. The master outlives it all. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "etcd_fixture.h"
#include "fault_proxy.h"
#include "harness.h"
#include "weight_check.h"
#include "weightclient.h"

/* The TTL of a store whose views lose their lease (short: the deadline
 * comes soon), and of one whose views must keep it (long enough that a
 * loaded machine renews in time). */
#define SHORT_TTL_MS 600
#define LONG_TTL_MS 5000
#define BIG_BYTES (256u * 1024u)   /* "big": 64 pages, most wholly its own */
#define MARK_BYTES 200u            /* "gen_marker": shares a page with what follows */
#define NEIGH_BYTES 3000u

typedef struct fixture {
    hx_master m;
    fault_proxy *proxy;
    char link[64];                 /* the proxy's address: the master's TCP port through it */
} fixture;

static int setup(void **state)
{
    char cfg[1024], tcp[64];
    fixture *f = calloc(1, sizeof *f);
    if (f == NULL || hx_init(&f->m, "viewfence", NULL) < 0) goto fail;
    snprintf(tcp, sizeof tcp, "127.0.0.1:%d", etcd_fixture_free_port());
    snprintf(f->m.listen_tcp, sizeof f->m.listen_tcp, "%s", tcp);
    /* the plugin's tick every 50 ms: expired leases end and drained bases
     * go soon after their TTL */
    snprintf(cfg, sizeof cfg,
             "cluster:\n  default_weight_preferred_residency: hot\n"
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    config:\n      tick_period_ms: 50\n",
             BUILD_DIR);
    if (hx_reconfigure(&f->m, cfg) < 0 || hx_start(&f->m, 20000) < 0) goto fail;
    if (fault_proxy_start(tcp, &f->proxy, f->link, sizeof f->link) < 0) goto fail;
    *state = f;
    return 0;
fail:
    if (f != NULL) hx_cleanup(&f->m);
    free(f);
    return -1;
}

static int teardown(void **state)
{
    fixture *f = *state;
    fault_proxy_stop(f->proxy);
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static weight_store *open_store(const char *master, uint64_t ttl_ms)
{
    weight_store *s = NULL;
    char err[256];
    int rc = weight_store_open(master, "acme", NULL, &s, err, sizeof err);
    if (rc != 0) fail_msg("weight_store_open %s: %s", master, err);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_LEASE_TTL_MS, ttl_ms), 0);
    return s;
}

static weight_identity ident(const char *res, uint64_t gen)
{
    weight_identity id;
    assert_int_equal(weight_identity_set(&id, "acme", "llm", res, "main", gen), 0);
    return id;
}

/* The bytes of generation gen: "big" and "gen_marker" (every byte gen). */
static uint8_t g_big[BIG_BYTES], g_mark[MARK_BYTES];

static void add_model(weight_store *s, weight_writer *w, uint64_t gen)
{
    uint64_t big_shape[1] = {BIG_BYTES}, mark_shape[1] = {MARK_BYTES};
    for (size_t i = 0; i < BIG_BYTES; i++) g_big[i] = (uint8_t)(i * 13 + gen * 101);
    memset(g_mark, (int)gen, sizeof g_mark);
    CHECK(s, weight_writer_add_tensor(w, "big", "U8", 1, big_shape, g_big));
    CHECK(s, weight_writer_add_tensor(w, "gen_marker", "U8", 1, mark_shape, g_mark));
}

static void put_model(weight_store *s, const char *res, uint64_t gen)
{
    weight_writer *w = NULL;
    weight_identity id = ident(res, gen);
    weight_policy pol = {WEIGHT_RES_HOT, 0.0, WEIGHT_MODE_MANUAL};
    CHECK(s, weight_put_begin(s, &id, &pol, &w));
    add_model(s, w, gen);
    CHECK(s, weight_writer_commit(w, NULL));
}

/* The neighbour: one small tensor, put right after a model so that its
 * object starts on the page the model's last object ends on. */
static uint8_t g_neigh[NEIGH_BYTES];

static void put_neighbour(weight_store *s, const char *res)
{
    weight_writer *w = NULL;
    weight_identity id = ident(res, 1);
    weight_policy pol = {WEIGHT_RES_HOT, 0.0, WEIGHT_MODE_MANUAL};
    uint64_t shape[1] = {NEIGH_BYTES};
    for (size_t i = 0; i < NEIGH_BYTES; i++) g_neigh[i] = (uint8_t)(i * 29 + 5);
    CHECK(s, weight_put_begin(s, &id, &pol, &w));
    CHECK(s, weight_writer_add_tensor(w, "n", "U8", 1, shape, g_neigh));
    CHECK(s, weight_writer_commit(w, NULL));
}

/* The address of tensor `name` of view v (fails when it is not in place). */
static const uint8_t *view_data(weight_mapped *v, const char *name)
{
    weight_mapped_tensor t;
    const void *data = NULL;
    for (size_t i = 0; i < weight_mapped_count(v); i++)
        if (weight_mapped_get_tensor(v, i, &t) == WEIGHT_OK && strcmp(t.name, name) == 0) {
            assert_int_equal(weight_mapped_data(v, i, &data), WEIGHT_OK);
            if (data == NULL) fail_msg("tensor %s is not readable in place", name);
            return data;
        }
    fail_msg("no tensor %s in the view", name);
    return NULL;
}

/* How a child that reads the byte at p ends: 0 when it read it (exit 0),
 * else the signal that ended it. */
static int child_touch(const uint8_t *p)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL; /* not a sanitizer's handler: the plain fault */
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        volatile uint8_t b = *(const volatile uint8_t *)p;
        (void)b;
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (WIFSIGNALED(st)) return WTERMSIG(st);
    assert_true(WIFEXITED(st));
    return 0;
}

/* Wait (up to 20 s) until view v reports its lease lost; the code. */
static int wait_lost(weight_mapped *v)
{
    for (int i = 0; i < 400; i++) {
        int rc = weight_mapped_status(v);
        if (rc != WEIGHT_OK) return rc;
        sleep_ms(50);
    }
    return WEIGHT_OK;
}

/* The page (4 KiB or what the system uses) of address p. */
static uintptr_t page_of(const void *p)
{
    return (uintptr_t)p / (uintptr_t)sysconf(_SC_PAGESIZE);
}

/* The trial's story: a holder keeps a view of gen 1 while a PUT_FIRST
 * upsert replaces it and later generations are published. Its renewals
 * are refused, so the view is fenced: its status is LEASE_EXPIRED,
 * weight_mapped_data hands nothing out, and a read of "big" through the
 * pointer taken before faults (a child touching it dies of SIGSEGV) instead
 * of showing a later generation's bytes. The view of a neighbouring
 * revision, whose object begins on the page "gen_marker" ends on, still
 * reads every byte; that page was frozen (a private copy), so "gen_marker"
 * still reads generation 1 -- the trial read the later generations there --
 * and the master is alive and answers. */
static void test_view_fenced_when_renewal_refused(void **state)
{
    fixture *f = *state;
    weight_store *s = open_store(f->m.socket, SHORT_TTL_MS);
    weight_store *keep = open_store(f->m.socket, LONG_TTL_MS);
    weight_mapped *v = NULL, *vn = NULL;
    weight_identity base = ident("trial", 1), neigh = ident("neigh", 1);
    put_model(s, "trial", 1);
    put_neighbour(s, "neigh");
    CHECK(s, weight_get_mapped(s, &base, &v));
    CHECK(keep, weight_get_mapped(keep, &neigh, &vn));
    const uint8_t *big = view_data(v, "big"), *mark = view_data(v, "gen_marker");
    const uint8_t *n = view_data(vn, "n");
    assert_int_equal(mark[0], 1);
    /* the premise: the neighbour's object starts on a page of the model's */
    if (page_of(n) != page_of(big + BIG_BYTES - 1) && page_of(n) != page_of(mark + MARK_BYTES - 1))
        fail_msg("the neighbour (%p) shares no page with the model (big %p, gen_marker %p)",
                 (const void *)n, (const void *)big, (const void *)mark);

    for (uint64_t gen = 2; gen <= 4; gen++) {
        weight_identity from = ident("trial", gen - 1);
        weight_upsert_claim c;
        weight_writer *w = NULL;
        weight_metadata md;
        CHECK(s, weight_get_metadata(s, &from, &md, NULL));
        CHECK(s, weight_upsert(s, &from, gen, WEIGHT_UPSERT_PUT_FIRST, NULL,
                               md.metadata_generation, NULL, 0, &c, &w));
        add_model(s, w, gen);
        CHECK(s, weight_writer_commit(w, NULL));
        if (gen == 2) assert_int_equal(wait_lost(v), WEIGHT_ELEASE_EXPIRED);
        for (int i = 0; i < 400; i++) { /* the base drained and deleted */
            CHECK(s, weight_upsert_status(s, &from, &c));
            if (c.phase == WEIGHT_PHASE_COMMITTED) break;
            sleep_ms(50);
        }
        assert_int_equal(c.phase, WEIGHT_PHASE_COMMITTED);
    }

    const void *data = (const void *)1;
    assert_int_equal(weight_mapped_data(v, 0, &data), WEIGHT_ELEASE_EXPIRED);
    assert_int_equal(child_touch(big + BIG_BYTES / 2), SIGSEGV);
    assert_int_equal(child_touch(big), SIGSEGV);
    /* the page "gen_marker" shares with the live neighbour was frozen: it
     * reads its own generation, never a later one put in its range */
    for (size_t i = 0; i < MARK_BYTES; i++)
        if (mark[i] != 1) fail_msg("gen_marker byte %zu reads %u, not 1", i, mark[i]);
    assert_memory_equal(n, g_neigh, NEIGH_BYTES);
    assert_int_equal(child_touch(n), 0);
    assert_true(hx_alive(&f->m));
    weight_metadata md;
    weight_identity last = ident("trial", 4);
    CHECK(s, weight_get_metadata(s, &last, &md, NULL));
    weight_mapped_release(v);
    weight_mapped_release(vn);
    weight_store_close(keep);
    weight_store_close(s);
}

/* Renewals that cannot get through: the store whose link to the master is
 * cut (fault_proxy) has its view fenced by the lease's deadline, before the
 * TTL runs out at the master (status LEASE_EXPIRED). A view of the same
 * revision held through a store on the master's own socket keeps its lease
 * and reads every byte at the same address (the process maps the segment
 * once); released, the pages no live view reads are fenced too (a child
 * touching the lost view's "big" dies of SIGSEGV), while the neighbour's
 * view reads on. A view of the revision taken afterwards maps the segment
 * anew and reads it right; the master is alive. */
static void test_view_fenced_when_renewals_cannot_get_through(void **state)
{
    fixture *f = *state;
    weight_store *cut = open_store(f->link, SHORT_TTL_MS);
    weight_store *s = open_store(f->m.socket, LONG_TTL_MS);
    weight_mapped *lost = NULL, *live = NULL, *vn = NULL, *after = NULL;
    weight_identity id = ident("served", 1), neigh = ident("neigh2", 1);
    put_model(s, "served", 1);
    put_neighbour(s, "neigh2");
    CHECK(cut, weight_get_mapped(cut, &id, &lost));
    CHECK(s, weight_get_mapped(s, &id, &live));
    CHECK(s, weight_get_mapped(s, &neigh, &vn));
    const uint8_t *big = view_data(lost, "big"), *n = view_data(vn, "n");
    assert_ptr_equal(view_data(live, "big"), big);

    fault_proxy_cut(f->proxy, 1);
    assert_int_equal(wait_lost(lost), WEIGHT_ELEASE_EXPIRED);
    assert_int_equal(weight_mapped_status(live), WEIGHT_OK);
    sleep_ms(2 * SHORT_TTL_MS); /* the lost lease ends at the master meanwhile */
    assert_int_equal(weight_mapped_status(live), WEIGHT_OK);
    assert_memory_equal(view_data(live, "big"), g_big, BIG_BYTES);
    assert_memory_equal(view_data(live, "gen_marker"), g_mark, MARK_BYTES);
    assert_int_equal(child_touch(big + BIG_BYTES / 2), 0); /* the live view reads it */

    weight_mapped_release(live);
    assert_int_equal(child_touch(big + BIG_BYTES / 2), SIGSEGV);
    assert_memory_equal(n, g_neigh, NEIGH_BYTES);

    CHECK(s, weight_get_mapped(s, &id, &after));
    const uint8_t *again = view_data(after, "big");
    assert_memory_equal(again, g_big, BIG_BYTES);
    assert_memory_equal(view_data(after, "gen_marker"), g_mark, MARK_BYTES);
    assert_int_equal(child_touch(again + BIG_BYTES / 2), 0);

    fault_proxy_cut(f->proxy, 0);
    assert_true(hx_alive(&f->m));
    weight_mapped_release(after);
    weight_mapped_release(vn);
    weight_mapped_release(lost);
    weight_store_close(cut);
    weight_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_view_fenced_when_renewal_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_view_fenced_when_renewals_cannot_get_through, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
