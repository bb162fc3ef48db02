/* test_nodes.c -- a master and two store_node processes: bytes across nodes,
 * a node killed and restarted (every replica of its kept segment checked,
 * a client's pooled data connection to it redialled for the next read,
 * a changed one dropped), a stalled master, a node busy with a long
 * batch of tasks and a node stuck in one task (none to be taken for dead),
 * cold replicas (loaded back, and read straight from a node's cold file),
 * forged tickets.
 *
 * The master runs without its embedded node; nodes A and B register over its
 * Unix socket. The replica_probe test plugin drives the host's replica tasks
 * (ensure cold / ensure memory / release memory) and counts replica-lost
 * events, so the ABI wiring is exercised as a plugin sees it. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "hx_threads.h"
#include "host_rpc.pb-c.h"
#include "node_cold.h"
#include "node_data_client.h"
#include "node_runtime.h"
#include "weight_model.h"
#include "rpc_client.h"

#define OBJECTS 16
#define SEGMENT (32ull << 20)

typedef struct fx {
    hx_master m;
    hx_node a, b;
    kvc *c;
} fx;

/* The fixture's config, the nodes given up after node_timeout_ms. */
static char *config_waiting(int node_timeout_ms)
{
    static char buf[1024];
    snprintf(buf, sizeof(buf),
             "node:\n  embedded: false\n  timeout_ms: %d\n  poll_ms: 50\n"
             "plugins:\n"
             "  - path: \"%s/lib/weight_mgmt.so\"\n"
             "  - path: \"%s/lib/testplugins/replica_probe.so\"\n",
             node_timeout_ms, BUILD_DIR, BUILD_DIR);
    return buf;
}

static char *config(void)
{
    return config_waiting(600);
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    assert_int_equal(hx_init(&f->m, "nodes", config()), 0);
    assert_int_equal(hx_start(&f->m, 10000), 0);
    assert_int_equal(hx_node_start(&f->m, &f->a, "node-a", SEGMENT), 0);
    assert_int_equal(hx_node_start(&f->m, &f->b, "node-b", SEGMENT), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, 10000), 0);
    f->c = hx_client(&f->m);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    kvc_close(f->c);
    hx_node_kill(&f->a);
    hx_node_kill(&f->b);
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

static void fill(char *buf, size_t len, int seed)
{
    for (size_t i = 0; i < len; i++) buf[i] = (char)((i * 131 + (size_t)seed * 7) & 0xff);
}

static size_t obj_len(int i)
{
    return 1000 + (size_t)i * 4096;
}

/* Put OBJECTS objects; return which node each landed on (0 A, 1 B). The
 * lookups that tell give back their read leases, so the tests can release
 * the objects' memory at once (the host refuses it while one lasts). */
static void put_all(fx *f, int where[OBJECTS])
{
    char key[32];
    char *buf = malloc(obj_len(OBJECTS));
    uint32_t released = 0;
    kvc_track_read_leases(f->c, 1);
    for (int i = 0; i < OBJECTS; i++) {
        snprintf(key, sizeof(key), "obj/%02d", i);
        fill(buf, obj_len(i), i);
        assert_int_equal(kvc_put_bytes(f->c, key, buf, obj_len(i), SMP_DATA_KV, NULL, 0, NULL), 0);
        kvc_object o;
        assert_int_equal(kvc_get(f->c, key, &o), 0);
        assert_int_equal(o.n_replicas, 1);
        where[i] = strcmp(o.replicas[0].node, "node-a") == 0 ? 0 : 1;
    }
    assert_int_equal(kvc_release_read_leases(f->c, &released), 0);
    assert_int_equal(released, OBJECTS);
    kvc_track_read_leases(f->c, 0);
    free(buf);
}

static void assert_bytes(kvc *c, int i)
{
    char key[32];
    size_t len = obj_len(i);
    char *want = malloc(len);
    snprintf(key, sizeof(key), "obj/%02d", i);
    fill(want, len, i);
    assert_int_equal(hx_reads_back(c, key, want, len), 0);
    free(want);
}

/* Objects spread over both nodes and read back byte for byte, through the
 * mapped segment file and through the nodes' TCP data servers. */
static void test_put_and_get_across_two_nodes(void **state)
{
    fx *f = *state;
    int where[OBJECTS], on[2] = {0, 0};
    put_all(f, where);
    for (int i = 0; i < OBJECTS; i++) on[where[i]]++;
    assert_true(on[0] > 0 && on[1] > 0);
    for (int i = 0; i < OBJECTS; i++) assert_bytes(f->c, i);
    kvc_set_transport(f->c, KVC_REMOTE);
    for (int i = 0; i < OBJECTS; i++) assert_bytes(f->c, i);
    kvc_set_transport(f->c, KVC_AUTO);
}

static unsigned lost_events(const hx_master *m, const char *key)
{
    int status;
    unsigned n;
    assert_int_equal(hx_replica_probe(m, 4, key, &status, &n), 0);
    assert_int_equal(status, 0);
    return n;
}

/* A node killed with SIGKILL is marked down: its objects stop being served
 * and the plugin hears replica-lost; the other node's objects are unaffected.
 * Restarted on its surviving segment file, it registers, the master verifies
 * its ranges, and its objects are readable again. */
static void test_killed_node_then_restarted_with_its_segment(void **state)
{
    fx *f = *state;
    int where[OBJECTS];
    char key[32];
    put_all(f, where);
    hx_node_kill(&f->a);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    for (int i = 0; i < OBJECTS; i++) {
        snprintf(key, sizeof(key), "obj/%02d", i);
        if (where[i] == 0) {
            kvc_object o;
            assert_int_equal(kvc_get(f->c, key, &o), SMP_EAGAIN);
            assert_true(lost_events(&f->m, key) >= 1);
        } else {
            assert_bytes(f->c, i);
        }
    }
    assert_int_equal(hx_node_start(&f->m, &f->a, "node-a", SEGMENT), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, 10000), 0);
    for (int i = 0; i < OBJECTS; i++) assert_bytes(f->c, i);
}

/* A client's pooled data connection to node A outlives A: A is killed
 * (SIGKILL) and restarted on the same data port and segment. The client's
 * next TCP read of A's object finds that connection dropped (EPIPE on the
 * send or EOF before any reply byte) and is sent once more on a fresh
 * connection: it succeeds, byte for byte, the first time. */
static void test_a_read_on_a_pooled_connection_to_a_restarted_node_is_redialled(void **state)
{
    fx *f = *state;
    int where[OBJECTS], on_a = -1;
    char key[32], addr[128];
    put_all(f, where);
    for (int i = 0; i < OBJECTS && on_a < 0; i++)
        if (where[i] == 0) on_a = i;
    assert_true(on_a >= 0);
    kvc_set_transport(f->c, KVC_REMOTE);
    assert_bytes(f->c, on_a); /* opens the pooled connection to A's data port */
    kvc_object o;
    snprintf(key, sizeof(key), "obj/%02d", on_a);
    assert_int_equal(kvc_get(f->c, key, &o), 0);
    assert_true(o.replicas[0].data_addr[0] != '\0');
    snprintf(addr, sizeof(addr), "%s", o.replicas[0].data_addr);

    hx_node_kill(&f->a);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    const char *const extra[] = {"--listen", addr, NULL};
    assert_int_equal(hx_node_start_args(&f->m, &f->a, "node-a", SEGMENT, extra), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, 10000), 0);
    assert_int_equal(kvc_get(f->c, key, &o), 0);
    assert_string_equal(o.replicas[0].data_addr, addr); /* the pooled connection's address */
    assert_bytes(f->c, on_a);
    for (int i = 0; i < OBJECTS; i++) assert_bytes(f->c, i);
}

#define MANY 2100 /* more than two of the master's verify windows (1024) */

/* A node restarted on its surviving segment has every complete memory
 * replica there checked against its checksum, a window of VERIFY tasks at
 * a time (the test has more replicas than two windows): the one whose bytes
 * changed while the node was away is dropped and reported lost once more,
 * every other one is checked, kept and read back, and the master says how
 * the check went when the last answer is in. */
static void test_restarted_node_checks_every_replica_of_its_segment(void **state)
{
    fx *f = *state;
    char key[32], msg[160];
    char *buf = malloc(64);
    kvc_object bad;
    uint32_t released = 0;
    /* Node B away: every object lands on node A (B's segment, the emptier,
     * is not chosen while B is down: each put placed there failed). */
    hx_node_kill(&f->b);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    kvc_track_read_leases(f->c, 1);
    for (int i = 0; i < MANY; i++) {
        snprintf(key, sizeof(key), "many/%04d", i);
        fill(buf, 64, i);
        assert_int_equal(kvc_put_bytes(f->c, key, buf, 64, SMP_DATA_KV, NULL, 0, NULL), 0);
    }
    /* More than node A can hold: no room on a node that is up, and the
     * answer counts B out rather than offering its free bytes. */
    char *big = calloc(1, SEGMENT + (1u << 20));
    assert_non_null(big);
    assert_int_equal(kvc_put_bytes(f->c, "many/big", big, SEGMENT + (1u << 20), SMP_DATA_KV, NULL,
                                   0, NULL),
                     SMP_ENOSPC);
    assert_true(hx_says(kvc_error(f->c), "the largest free range on a node that is up (1 node(s) "
                                         "down excluded) is "));
    free(big);
    kvc_object absent;
    assert_int_equal(kvc_get(f->c, "many/big", &absent), SMP_ENOTFOUND);
    assert_int_equal(kvc_get(f->c, "many/2099", &bad), 0);
    assert_int_equal(bad.n_replicas, 1);
    assert_string_equal(bad.replicas[0].node, "node-a");
    assert_int_equal(kvc_release_read_leases(f->c, &released), 0);
    kvc_track_read_leases(f->c, 0);

    hx_node_kill(&f->a);
    assert_int_equal(hx_wait_nodes(&f->m, 0, 10000), 0);
    unsigned lost_bad = lost_events(&f->m, "many/2099"), lost_good = lost_events(&f->m, "many/0000");
    assert_true(lost_bad >= 1 && lost_good >= 1); /* the node going down */
    /* With both nodes down a put has nowhere to go: refused as one to try
     * again (not as a lack of room), saying why; nothing is stored. */
    kvc_object none;
    assert_int_equal(kvc_put_bytes(f->c, "many/none", buf, 64, SMP_DATA_KV, NULL, 0, NULL),
                     SMP_EAGAIN);
    assert_true(hx_says(kvc_error(f->c), "no node is up to place it on (2 node(s) down); retry "
                                         "once one registers again"));
    assert_int_equal(kvc_get(f->c, "many/none", &none), SMP_ENOTFOUND);
    /* One byte of the last object changed in the segment file meanwhile. */
    int fd = open(bad.replicas[0].segment_path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b = 0;
    assert_int_equal(pread(fd, &b, 1, (off_t)bad.replicas[0].offset + 10), 1);
    b ^= 0xff;
    assert_int_equal(pwrite(fd, &b, 1, (off_t)bad.replicas[0].offset + 10), 1);
    close(fd);

    assert_int_equal(hx_node_start(&f->m, &f->a, "node-a", SEGMENT), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    snprintf(msg, sizeof(msg), "node node-a: %d memory replicas of its kept segment checked: "
             "%d held their bytes, 1 did not, 0 could not be checked", MANY, MANY - 1);
    assert_true(hx_wait_log(&f->m, msg, 10000));
    assert_true(hx_log_contains(&f->m, "memory replica of many/2099 does not hold its bytes"));
    for (int i = 0; i < 1000 && lost_events(&f->m, "many/2099") == lost_bad; i++) usleep(10 * 1000);
    assert_int_equal(lost_events(&f->m, "many/2099"), lost_bad + 1); /* the drop, once durable */
    assert_int_equal(lost_events(&f->m, "many/0000"), lost_good);
    kvc_object o;
    assert_int_not_equal(kvc_get(f->c, "many/2099", &o), 0); /* no replica left to read */
    for (int i = 0; i < MANY - 1; i++) {
        char got[64];
        uint64_t n = 0;
        snprintf(key, sizeof(key), "many/%04d", i);
        fill(buf, 64, i);
        assert_int_equal(kvc_get_into(f->c, key, got, sizeof(got), &n, 1), 0);
        assert_int_equal(n, 64);
        assert_memory_equal(got, buf, 64);
    }
    free(buf);
}

/* A master restarted while node B is gone for good: once node.timeout_ms
 * passed without B (given up, the ticks start), every put lands on node A
 * -- B's segment, the emptier, took them and failed each before. */
static void test_node_gone_since_the_restart_takes_no_new_objects(void **state)
{
    fx *f = *state;
    char key[32], buf[64];
    hx_node_kill(&f->b);
    kvc_close(f->c);
    assert_int_equal(hx_stop(&f->m), 0);
    assert_int_equal(hx_start(&f->m, 10000), 0);
    f->c = hx_client(&f->m);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0); /* A registers again */
    assert_true(hx_wait_log(&f->m, "node node-b down (not heard from since the start)", 10000));
    assert_true(hx_wait_log(&f->m, "reconcile ticks start", 10000));
    kvc_track_read_leases(f->c, 1);
    for (int i = 0; i < 40; i++) {
        kvc_object o;
        snprintf(key, sizeof(key), "after/%02d", i);
        fill(buf, sizeof(buf), i);
        assert_int_equal(kvc_put_bytes(f->c, key, buf, sizeof(buf), SMP_DATA_KV, NULL, 0, NULL), 0);
        assert_int_equal(kvc_get(f->c, key, &o), 0);
        assert_string_equal(o.replicas[0].node, "node-a");
    }
    uint32_t released = 0;
    assert_int_equal(kvc_release_read_leases(f->c, &released), 0);
    kvc_track_read_leases(f->c, 0);
}

/* Restart the master while both nodes are stopped (SIGSTOP: the test
 * continues them), waiting for them up to 4 s after it serves: long enough
 * for a test's calls to arrive within the wait. The fixture's client is
 * closed. */
static void restart_with_nodes_stopped(fx *f)
{
    kvc_close(f->c);
    f->c = NULL;
    assert_int_equal(kill(f->a.pid, SIGSTOP), 0);
    assert_int_equal(kill(f->b.pid, SIGSTOP), 0);
    assert_int_equal(hx_stop(&f->m), 0);
    assert_int_equal(hx_reconfigure(&f->m, config_waiting(4000)), 0);
    assert_int_equal(hx_start(&f->m, 10000), 0);
}

/* A request made on its own connection and thread, as a reader or writer
 * that arrives while the master waits for its nodes: a lookup of key
 * (put 0) or a put of 64 bytes under it (put 1). */
typedef struct side_call {
    const hx_master *m;
    char key[32];
    int put;
    int rc;
    char node[64];  /* the lookup's first replica */
    char err[512];
    int done;       /* set (atomically) once answered */
    pthread_t thread;
} side_call;

static void *run_side_call(void *arg)
{
    side_call *sc = arg;
    kvc *c = hx_client(sc->m);
    char buf[64];
    kvc_object o;
    fill(buf, sizeof(buf), 99);
    if (c == NULL) sc->rc = -1000;
    else if (sc->put) sc->rc = kvc_put_bytes(c, sc->key, buf, sizeof(buf), SMP_DATA_KV, NULL, 0, NULL);
    else if ((sc->rc = kvc_get(c, sc->key, &o)) == 0 && o.n_replicas > 0)
        snprintf(sc->node, sizeof(sc->node), "%s", o.replicas[0].node);
    if (c != NULL && sc->rc != 0) snprintf(sc->err, sizeof(sc->err), "%s", kvc_error(c));
    kvc_close(c);
    __atomic_store_n(&sc->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void side_call_start(side_call *sc, const hx_master *m, const char *key, int put)
{
    memset(sc, 0, sizeof(*sc));
    sc->m = m;
    snprintf(sc->key, sizeof(sc->key), "%s", key);
    sc->put = put;
    assert_int_equal(pthread_create(&sc->thread, NULL, run_side_call, sc), 0);
}

static int side_call_done(side_call *sc)
{
    return __atomic_load_n(&sc->done, __ATOMIC_ACQUIRE);
}

/* Wait (20 s at most) until the master's metric series reads want. */
static int wait_metric(const hx_master *m, const char *series, double want)
{
    for (int i = 0; i < 2000; i++) {
        if (hx_metric(m, series) == want) return 1;
        usleep(10 * 1000);
    }
    return 0;
}

/* Restarted while both nodes are stopped, the master holds what needs a
 * node -- the lookups of objects on A and on B, a put start with no
 * registered node to place it on -- instead of refusing it, until a node
 * registers or its wait for the nodes ends (node.timeout_ms). B comes
 * back: the lookup of B's object is answered from B and the put is placed
 * on B and ends, although A's emptier segment is not registered; a put
 * start whose client left meanwhile is dropped, not placed. A does not
 * come back: the lookup of A's object is refused once the master stopped
 * waiting for A, saying why, and A's object is served again once A is. */
static void test_requests_wait_for_the_nodes_after_a_restart(void **state)
{
    fx *f = *state;
    int where[OBJECTS], on_a = -1, on_b = -1;
    char key_a[32], key_b[32];
    put_all(f, where);
    for (int i = 0; i < OBJECTS; i++) {
        if (where[i] == 0 && on_a < 0) on_a = i;
        if (where[i] == 1 && on_b < 0) on_b = i;
    }
    assert_true(on_a >= 0 && on_b >= 0);
    snprintf(key_a, sizeof(key_a), "obj/%02d", on_a);
    snprintf(key_b, sizeof(key_b), "obj/%02d", on_b);
    restart_with_nodes_stopped(f);

    side_call la, lb, put;
    side_call_start(&la, &f->m, key_a, 0);
    side_call_start(&lb, &f->m, key_b, 0);
    side_call_start(&put, &f->m, "waited/put", 1);
    assert_true(wait_metric(&f->m, "store_node_wait_calls", 3));
    assert_false(side_call_done(&la) || side_call_done(&lb) || side_call_done(&put));
    /* a fourth, a put start whose client leaves while it waits: it is not
     * run again, so no put is placed for it */
    PutStartRequest req = PUT_START_REQUEST__INIT;
    req.key = (char *)"waited/left";
    req.size = 64;
    req.data_type = DATA_TYPE__DATA_KV;
    uint8_t body[128];
    size_t body_len = put_start_request__pack(&req, body), frame_len = 0;
    uint8_t *frame = hx_frame_request(77, HOST_SERVICE__HOST_SERVICE_OBJECTS,
                                      OBJECTS_METHOD__OBJ_PUT_START, body, body_len, &frame_len);
    rpcc_conn *left = NULL;
    rpcc_options opt = {.timeout_ms = 10000};
    char err[256];
    assert_non_null(frame);
    assert_int_equal(rpcc_connect(f->m.socket, &opt, &left, err, sizeof(err)), 0);
    assert_int_equal(rpcc_send_raw(left, frame, frame_len), 0);
    free(frame);
    assert_true(wait_metric(&f->m, "store_node_wait_calls", 4));
    rpcc_close(left);

    assert_int_equal(kill(f->b.pid, SIGCONT), 0);
    assert_int_equal(pthread_join(lb.thread, NULL), 0);
    assert_int_equal(pthread_join(put.thread, NULL), 0);
    if (lb.rc != 0 || put.rc != 0) hx_print_log(&f->m);
    assert_int_equal(lb.rc, 0);
    assert_string_equal(lb.node, "node-b");
    assert_int_equal(put.rc, 0);
    f->c = hx_client(&f->m);
    kvc_object o;
    assert_int_equal(kvc_get(f->c, "waited/put", &o), 0);
    assert_string_equal(o.replicas[0].node, "node-b");
    assert_true(hx_metric(&f->m, "store_puts_in_flight") == 0); /* none for the one that left */
    assert_false(side_call_done(&la)); /* A is still waited for */

    assert_int_equal(pthread_join(la.thread, NULL), 0);
    assert_int_equal(la.rc, SMP_EAGAIN);
    assert_true(hx_says(la.err, "no replica on a live node"));
    assert_true(hx_wait_log(&f->m, "node node-a down (not heard from since the start)", 10000));
    assert_true(hx_metric(&f->m, "store_node_wait_calls_total") >= 4);
    assert_true(hx_metric(&f->m, "store_node_wait_calls") == 0);

    assert_int_equal(kill(f->a.pid, SIGCONT), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, 10000), 0);
    assert_bytes(f->c, on_a);
}

/* weight_is_exist on its own thread (the store is used by it alone). */
typedef struct exist_call {
    weight_store *s;
    const weight_identity *id;
    int rc, exists;
    atomic_int done;
} exist_call;

static void *run_exist_call(void *arg)
{
    exist_call *e = arg;
    e->rc = weight_is_exist(e->s, e->id, &e->exists);
    atomic_store(&e->done, 1);
    return NULL;
}

/* The weight plugin's weight_is_exist waits with the master too (ABI 1.8,
 * rpc_wait_for_nodes): a READY revision whose replicas are on nodes not
 * registered since the restart is not answered "does not exist"; the call
 * is held and answered true once the nodes are back. */
static void test_weight_is_exist_waits_for_the_nodes_after_a_restart(void **state)
{
    fx *f = *state;
    static const char *names[4] = {"embed.weight", "layers.0.attn.weight", "layers.0.mlp.weight",
                                   "lm_head.weight"};
    wx_tensor t[4];
    weight_identity id;
    for (int i = 0; i < 4; i++) {
        t[i].name = names[i];
        t[i].shape[0] = 16;
        t[i].shape[1] = 64;
    }
    wx_model_fill(t, 4, 11);
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "x", "v1", 1), 0);
    weight_store *s = wx_open_store(&f->m);
    wx_put_model(s, &id, t, 4);
    int exists = 0;
    assert_int_equal(weight_is_exist(s, &id, &exists), 0);
    assert_int_equal(exists, 1);
    weight_store_close(s);

    restart_with_nodes_stopped(f);
    exist_call e = {.s = wx_open_store(&f->m), .id = &id, .rc = -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, run_exist_call, &e), 0);
    int held = wait_metric(&f->m, "store_node_wait_calls", 1);
    int early = atomic_load(&e.done);
    assert_int_equal(kill(f->a.pid, SIGCONT), 0);
    assert_int_equal(kill(f->b.pid, SIGCONT), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(held);
    assert_false(early);
    assert_int_equal(e.rc, 0);
    assert_int_equal(e.exists, 1);
    weight_store_close(e.s);
}

/* A master stopped while a lookup waits for a node exits cleanly (what
 * waited is freed with it) and the lookup ends in an error, not a hang:
 * like every call in flight at a stop, its connection closes unanswered. */
static void test_a_stop_ends_the_requests_waiting_for_a_node(void **state)
{
    fx *f = *state;
    int where[OBJECTS];
    char key[32];
    put_all(f, where);
    snprintf(key, sizeof(key), "obj/%02d", 0);
    restart_with_nodes_stopped(f);
    side_call l;
    side_call_start(&l, &f->m, key, 0);
    assert_true(wait_metric(&f->m, "store_node_wait_calls", 1));
    assert_int_equal(hx_stop(&f->m), 0);
    assert_int_equal(pthread_join(l.thread, NULL), 0);
    assert_true(l.rc < 0);
    assert_int_equal(kill(f->a.pid, SIGCONT), 0);
    assert_int_equal(kill(f->b.pid, SIGCONT), 0);
}

/* A master whose loop stalls for longer than node.timeout_ms (here the
 * whole process stopped for three timeouts, as a snapshot of 100,000
 * revisions captured on the loop stalls it for seconds) takes no live node
 * for dead: both nodes stay up, no replica-lost event is emitted, every
 * object is served. Before, the first housekeeping round after the stall
 * counted the stall as the nodes' silence and marked both down. A node
 * that really stops polling is still marked down. */
static void test_stalled_master_marks_no_live_node_down(void **state)
{
    fx *f = *state;
    int where[OBJECTS];
    char key[32];
    put_all(f, where);
    for (int stall = 0; stall < 3; stall++) {
        assert_int_equal(kill(f->m.pid, SIGSTOP), 0);
        usleep(3 * 600 * 1000);
        assert_int_equal(kill(f->m.pid, SIGCONT), 0);
        usleep(4 * 50 * 1000); /* the housekeeping rounds after the stall */
        kvc_status st;
        assert_int_equal(kvc_status_get(f->c, &st), 0);
        assert_int_equal(st.nodes, 2);
    }
    assert_false(hx_log_contains(&f->m, "down (silent"));
    for (int i = 0; i < OBJECTS; i++) {
        snprintf(key, sizeof(key), "obj/%02d", i);
        assert_int_equal(lost_events(&f->m, key), 0);
        assert_bytes(f->c, i);
    }
    assert_int_equal(kill(f->a.pid, SIGSTOP), 0); /* SIGKILL in the teardown ends it */
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    assert_true(hx_log_contains(&f->m, "node node-a down (silent"));
}

#define BATCH_KEYS 128

typedef struct probe_arg {
    const hx_master *m;
    uint32_t method; /* replica_probe's; 0: ensure_cold */
    char key[32];
    int status;      /* the call's, -2 when it could not be made */
} probe_arg;

/* One replica_probe call, on a thread of its own (ensure_cold answers
 * once persisted, ensure_memory once loaded). */
static void *probe_one(void *arg)
{
    probe_arg *a = arg;
    unsigned ignored;
    if (hx_replica_probe(a->m, a->method ? a->method : 1, a->key, &a->status, &ignored) < 0)
        a->status = -2;
    return NULL;
}

/* Restart the master with node.timeout_ms 300 and node.poll_ms 20. */
static void short_timeout(fx *f)
{
    char extra[1024];
    kvc_close(f->c);
    assert_int_equal(hx_stop(&f->m), 0);
    snprintf(extra, sizeof(extra), "%s", config());
    char *at = strstr(extra, "timeout_ms: 600\n  poll_ms: 50");
    assert_non_null(at);
    memcpy(at, "timeout_ms: 300\n  poll_ms: 20", strlen("timeout_ms: 300\n  poll_ms: 20"));
    assert_int_equal(hx_reconfigure(&f->m, extra), 0);
    assert_int_equal(hx_start(&f->m, 10000), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, 10000), 0);
    f->c = hx_client(&f->m);
}

/* A node running a batch of tasks that takes longer than node.timeout_ms
 * (128 persists asked at once, up to 64 per answer, each a write, an fsync
 * and a read back; here with a timeout of 300 ms) stays up: it polls
 * "busy" between its tasks every poll_ms, reporting what is done, and the
 * master answers at once. Every persist succeeds, no node is marked down,
 * no replica-lost event. Before, the node polled only after the whole
 * batch and was marked down in the middle of it (its tasks failed, its
 * replicas went unreadable). */
static void test_node_busy_with_a_long_batch_stays_up(void **state)
{
    fx *f = *state;
    static probe_arg args[BATCH_KEYS];
    pthread_t t[BATCH_KEYS];
    char buf[16384];
    short_timeout(f);
    for (int i = 0; i < BATCH_KEYS; i++) {
        snprintf(args[i].key, sizeof(args[i].key), "batch/%03d", i);
        fill(buf, sizeof(buf), i);
        assert_int_equal(kvc_put_bytes(f->c, args[i].key, buf, sizeof(buf), SMP_DATA_KV, NULL, 0, NULL), 0);
        args[i].m = &f->m;
    }
    for (int i = 0; i < BATCH_KEYS; i++) assert_int_equal(pthread_create(&t[i], NULL, probe_one, &args[i]), 0);
    for (int i = 0; i < BATCH_KEYS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < BATCH_KEYS; i++) {
        if (args[i].status != 0) fail_msg("persist of %s: status %d", args[i].key, args[i].status);
        assert_int_equal(lost_events(&f->m, args[i].key), 0);
    }
    assert_false(hx_log_contains(&f->m, "down (silent"));
    kvc_status st;
    assert_int_equal(kvc_status_get(f->c, &st), 0);
    assert_int_equal(st.nodes, 2);
}

/* One task that runs far longer than node.timeout_ms (a persist of a
 * multi-GiB object on a slow disk) does not make the node look dead: the
 * node's task thread is stopped with ptrace (only that thread: the fault a
 * slow disk produces, on demand) while the master hands it a persist, for
 * five times the timeout. The control thread keeps polling "busy": the node
 * stays up, no replica is lost, and once the thread runs again the persist
 * succeeds. Before, the control thread ran the task itself and the master
 * marked the node down in the middle of it. */
static void test_node_with_one_long_task_stays_up(void **state)
{
    fx *f = *state;
    probe_arg arg = {.m = &f->m};
    pthread_t t;
    char buf[16384];
    short_timeout(f);
    snprintf(arg.key, sizeof(arg.key), "slow/one");
    fill(buf, sizeof(buf), 7);
    assert_int_equal(kvc_put_bytes(f->c, arg.key, buf, sizeof(buf), SMP_DATA_KV, NULL, 0, NULL), 0);
    kvc_object o;
    assert_int_equal(kvc_get(f->c, arg.key, &o), 0);
    assert_int_equal(o.n_replicas, 1);
    const hx_node *n = strcmp(o.replicas[0].node, "node-a") == 0 ? &f->a : &f->b;
    pid_t tid = hx_thread_named(n->pid, "node-tasks");
    assert_true(tid > 0);
    assert_int_equal(hx_thread_stop(tid), 0);
    assert_int_equal(pthread_create(&t, NULL, probe_one, &arg), 0);
    usleep(5 * 300 * 1000);
    kvc_status s;
    assert_int_equal(kvc_status_get(f->c, &s), 0);
    int nodes_while_stuck = s.nodes;
    int down_while_stuck = hx_log_contains(&f->m, "down (silent");
    assert_int_equal(hx_thread_release(tid), 0);
    pthread_join(t, NULL);
    assert_int_equal(nodes_while_stuck, 2);
    assert_false(down_while_stuck);
    assert_int_equal(arg.status, 0);
    assert_int_equal(lost_events(&f->m, arg.key), 0);
    assert_false(hx_log_contains(&f->m, "down (silent"));
}

/* The node's log holds needle (a line it printed). */
static int node_log_contains(const hx_node *n, const char *needle)
{
    char line[1024];
    int found = 0;
    FILE *fp = fopen(n->log, "r");
    while (fp != NULL && !found && fgets(line, sizeof(line), fp) != NULL)
        found = strstr(line, needle) != NULL;
    if (fp != NULL) fclose(fp);
    return found;
}

/* store_node --segment-prefault (node.segment_prefault of the embedded
 * node) touches its whole segment once in the background and says so; the
 * bytes it held survive the touch and objects put afterwards read back. */
static void test_standalone_node_prefaults_its_segment(void **state)
{
    fx *f = *state;
    int where[OBJECTS];
    static const char *const prefault[] = {"--segment-prefault", NULL};
    put_all(f, where);
    hx_node_kill(&f->a);
    assert_int_equal(hx_node_start_args(&f->m, &f->a, "node-a", SEGMENT, prefault), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, 10000), 0);
    for (int t = 0; t < 1000 && !node_log_contains(&f->a, "bytes pre-faulted"); t++) usleep(10000);
    assert_true(node_log_contains(&f->a, "bytes pre-faulted"));
    for (int i = 0; i < OBJECTS; i++) assert_bytes(f->c, i);
}

/* A node whose segment file did not survive comes back empty: the master
 * drops the memory replicas it persisted there (durably) and the plugin
 * hears replica-lost for each. */
static void test_restarted_node_without_its_segment_loses_its_replicas(void **state)
{
    fx *f = *state;
    int where[OBJECTS];
    char key[32], path[400];
    put_all(f, where);
    hx_node_kill(&f->a);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0); /* else 2 may still be the old one */
    snprintf(path, sizeof(path), "%s/node-a.seg", f->a.segment_dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(hx_node_start(&f->m, &f->a, "node-a", SEGMENT), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, 10000), 0);
    for (int i = 0; i < OBJECTS; i++) {
        snprintf(key, sizeof(key), "obj/%02d", i);
        kvc_object o;
        if (where[i] == 0) {
            assert_int_equal(kvc_get(f->c, key, &o), SMP_EAGAIN); /* dropped before up */
        } else {
            assert_bytes(f->c, i);
        }
    }
}

/* Call replica_probe's method on key; its status. */
static int probe(const hx_master *m, uint32_t method, const char *key)
{
    int status;
    unsigned answer;
    assert_int_equal(hx_replica_probe(m, method, key, &status, &answer), 0);
    return status;
}

/* The cold file a node writes for an object: named after its key and bytes. */
static void cold_file(const hx_node *n, const char *key, int i, char *out, size_t cap)
{
    char name[COLD_NAME_MAX];
    unsigned char sha[32];
    size_t len = obj_len(i);
    char *buf = malloc(len);
    fill(buf, len, i);
    hx_sha256(buf, len, sha);
    free(buf);
    assert_int_equal(cold_name_for(key, sha, name), 0);
    snprintf(out, cap, "%s/%s", n->cold_dir, name);
}

/* Persist to cold, release memory, load back: the bytes survive the round
 * trip; releasing the last memory replica without a cold one is refused. A
 * cold file corrupted on disk is detected when loaded, dropped, reported
 * lost, and never served. */
static void test_cold_round_trip_and_corrupted_cold_file(void **state)
{
    fx *f = *state;
    int where[OBJECTS];
    put_all(f, where);
    const char *key = "obj/03";
    assert_int_equal(probe(&f->m, 3, key), SMP_ESTATE); /* no cold copy yet */
    assert_int_equal(probe(&f->m, 1, key), 0);          /* ensure cold */
    assert_int_equal(probe(&f->m, 3, key), 0);          /* release memory */
    kvc_object o;
    assert_int_equal(kvc_get(f->c, key, &o), 0);
    assert_int_equal(o.n_replicas, 1);
    assert_int_equal(o.replicas[0].kind, SMP_REPLICA_COLD);
    assert_int_equal(probe(&f->m, 2, key), 0);          /* ensure memory */
    assert_bytes(f->c, 3);

    /* Now corrupt the file of a cold-only object. */
    const char *victim = "obj/05";
    hx_node *n = where[5] == 0 ? &f->a : &f->b;
    assert_int_equal(probe(&f->m, 1, victim), 0);
    assert_int_equal(probe(&f->m, 3, victim), 0);
    char path[700];
    cold_file(n, victim, 5, path, sizeof(path));
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    char byte;
    assert_int_equal(pread(fd, &byte, 1, 4096 + 10), 1);
    byte ^= 0x5a;
    assert_int_equal(pwrite(fd, &byte, 1, 4096 + 10), 1);
    close(fd);
    assert_int_equal(probe(&f->m, 2, victim), SMP_EPROTO); /* ensure memory: detected */
    assert_int_equal(kvc_get(f->c, victim, &o), SMP_EAGAIN); /* nothing readable is served */
    assert_true(lost_events(&f->m, victim) >= 1);
}

/* A load from a cold file (ensure_memory) stalled in the node when its
 * master dies: the node's task thread is stopped by ptrace as it enters
 * the open of the object's cold file, the range the master reserved not
 * written yet, and the master is killed (SIGKILL) and started again. The
 * node does not register with the new master while that load runs (its
 * control thread waits for the running task before it registers again):
 * the new master gives it up after node.timeout_ms, having placed nothing
 * on its segment. Once the thread runs on, the load ends and the node
 * registers; the new master ignores the result of the task it never
 * handed out (the object keeps its one cold replica) and holds back the
 * write zones the old master recorded (the reserved range among them,
 * named before it sent the load). Objects put then, of the object's
 * size, and every object before, the object too once loaded again by the
 * new master, read back byte for byte. */
static void test_a_load_stalled_across_a_master_restart_writes_over_nothing(void **state)
{
    enum { VICTIM = 3, FRESH = 4 };
    fx *f = *state;
    int where[OBJECTS];
    char key[32], path[700];
    pthread_t t;
    hx_node_kill(&f->b); /* every object on node A, the one that loads */
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    put_all(f, where);
    snprintf(key, sizeof(key), "obj/%02d", VICTIM);
    assert_int_equal(probe(&f->m, 1, key), 0); /* ensure cold */
    assert_int_equal(probe(&f->m, 3, key), 0); /* release memory */
    cold_file(&f->a, key, VICTIM, path, sizeof(path));

    pid_t tid = hx_thread_named(f->a.pid, "node-tasks");
    assert_true(tid > 0);
    assert_int_equal(hx_thread_stop(tid), 0);
    probe_arg load = {.m = &f->m, .method = 2};
    snprintf(load.key, sizeof(load.key), "%s", key);
    assert_int_equal(pthread_create(&t, NULL, probe_one, &load), 0);
    int at_open = hx_thread_stop_at_open(tid, strrchr(path, '/') + 1, 20000);
    hx_kill(&f->m);
    pthread_join(t, NULL); /* its call ends with the master */
    kvc_close(f->c);
    f->c = NULL;
    int started = hx_start(&f->m, 20000);
    if (started == 0) f->c = hx_client(&f->m);
    /* until the new master gives the nodes up, or a node registers */
    int lost = 0, gave_up = 0, nodes = 0;
    for (long long end = hx_now_ms() + 20000; f->c != NULL && hx_now_ms() < end && !gave_up;) {
        kvc_status st;
        if (kvc_status_get(f->c, &st) == 0 && (nodes = (int)st.nodes) > 0) break;
        lost = node_log_contains(&f->a, "lost the master");
        gave_up = hx_log_contains(&f->m, "node.timeout_ms passed; reconcile ticks start");
        usleep(10000);
    }
    assert_int_equal(hx_thread_release(tid), 0);
    assert_int_equal(at_open, 0);
    assert_int_equal(started, 0);
    assert_non_null(f->c);
    assert_true(load.status != 0); /* the old master never answered it */
    if (nodes > 0 || !gave_up)
        fail_msg("while the node's load was stopped, %d node(s) registered with the new master, "
                 "which %s them up (none expected: the node registers once the load ends)",
                 nodes, gave_up ? "gave" : "did not give");
    assert_true(lost);

    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    assert_true(hx_metric(&f->m, "store_write_zone_held_bytes") > 0);
    kvc_object o;
    assert_int_equal(kvc_get(f->c, key, &o), 0);
    assert_int_equal(o.n_replicas, 1);
    assert_int_equal(o.replicas[0].kind, SMP_REPLICA_COLD);
    char *buf = malloc(obj_len(VICTIM));
    char fresh[32];
    for (int i = 0; i < FRESH; i++) {
        snprintf(fresh, sizeof(fresh), "fresh/%d", i);
        fill(buf, obj_len(VICTIM), 100 + i);
        assert_int_equal(kvc_put_bytes(f->c, fresh, buf, obj_len(VICTIM), SMP_DATA_KV, NULL, 0, NULL), 0);
    }
    assert_int_equal(probe(&f->m, 2, key), 0); /* ensure memory, by the new master */
    for (int i = 0; i < OBJECTS; i++) assert_bytes(f->c, i);
    for (int i = 0; i < FRESH; i++) {
        snprintf(fresh, sizeof(fresh), "fresh/%d", i);
        fill(buf, obj_len(VICTIM), 100 + i);
        assert_int_equal(hx_reads_back(f->c, fresh, buf, obj_len(VICTIM)), 0);
    }
    free(buf);
}

/* A node that registers again names every cold file it has; the master
 * finds each cold replica's file among them (by name, then key and hash):
 * node a's cold-only objects come back readable, except the one whose file
 * was deleted while the node was down, whose cold replica is reported gone
 * and dropped. */
static void test_restarted_node_reconciles_its_cold_files(void **state)
{
    fx *f = *state;
    int where[OBJECTS], on_a = 0, victim = -1;
    char key[32], path[700];
    put_all(f, where);
    for (int i = 0; i < OBJECTS; i++) {
        if (where[i] != 0) continue;
        snprintf(key, sizeof(key), "obj/%02d", i);
        assert_int_equal(probe(&f->m, 1, key), 0); /* ensure cold */
        assert_int_equal(probe(&f->m, 3, key), 0); /* release memory */
        on_a++;
        if (victim < 0 || i % 2 == 1) victim = i;
    }
    assert_true(on_a >= 2);
    hx_node_kill(&f->a);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    snprintf(key, sizeof(key), "obj/%02d", victim);
    cold_file(&f->a, key, victim, path, sizeof(path));
    assert_int_equal(unlink(path), 0);
    assert_int_equal(hx_node_start(&f->m, &f->a, "node-a", SEGMENT), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, 10000), 0);
    for (int i = 0; i < OBJECTS; i++) {
        if (i == victim) continue;
        assert_bytes(f->c, i);
    }
    kvc_object o;
    assert_int_equal(kvc_get(f->c, key, &o), SMP_EAGAIN);
    char want[128];
    snprintf(want, sizeof(want), "cold replica of %s is gone", key);
    assert_true(hx_log_contains(&f->m, want));
}

/* A restarted node is counted up only once the replicas its inventory
 * lacks are durably dropped: a client never gets the missing cold file's
 * replica of a node that is up (a read there would be refused as not found,
 * where the object is unreadable). The master's OpLog writer is stopped
 * with ptrace (a slow fdatasync, on demand) while the node registers: the
 * drop is logged, the node is not up yet and the object answers
 * SMP_EAGAIN; once the writer runs, the node is up and the object is still
 * unreadable. Before, the node was up while the drop waited for its
 * fsync, and test_restarted_node_reconciles_its_cold_files failed once
 * under load, reading the object 0 instead of SMP_EAGAIN. */
static void test_restarted_node_is_up_once_its_lost_replicas_are_dropped(void **state)
{
    fx *f = *state;
    int where[OBJECTS], victim = -1;
    char key[32], path[700], want[128];
    put_all(f, where);
    for (int i = 0; i < OBJECTS && victim < 0; i++) {
        if (where[i] != 0) continue;
        victim = i;
        snprintf(key, sizeof(key), "obj/%02d", i);
        assert_int_equal(probe(&f->m, 1, key), 0); /* ensure cold */
        assert_int_equal(probe(&f->m, 3, key), 0); /* release memory */
    }
    assert_true(victim >= 0);
    hx_node_kill(&f->a);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    cold_file(&f->a, key, victim, path, sizeof(path));
    assert_int_equal(unlink(path), 0);

    pid_t writer = hx_thread_named(f->m.pid, "oplog-writer");
    assert_true(writer > 0);
    assert_int_equal(hx_thread_stop(writer), 0);
    assert_int_equal(hx_node_start(&f->m, &f->a, "node-a", SEGMENT), 0);
    snprintf(want, sizeof(want), "cold replica of %s is gone", key);
    for (int t = 0; t < 2000 && !hx_log_contains(&f->m, want); t++) usleep(10000);
    int logged = hx_log_contains(&f->m, want);
    kvc_status st;
    int status_rc = kvc_status_get(f->c, &st);
    kvc_object o;
    int get_while_stopped = kvc_get(f->c, key, &o);
    assert_int_equal(hx_thread_release(writer), 0);
    assert_true(logged);
    assert_int_equal(status_rc, 0);
    assert_int_equal(get_while_stopped, SMP_EAGAIN);
    assert_int_equal(st.nodes, 1);

    assert_int_equal(hx_wait_nodes(&f->m, 2, 10000), 0);
    assert_int_equal(kvc_get(f->c, key, &o), SMP_EAGAIN);
    for (int i = 0; i < OBJECTS; i++)
        if (i != victim) assert_bytes(f->c, i);
}

/* A node that registers again while its earlier registration still waits
 * for its drops to be durable (it restarted twice in a row, the master's
 * disk slow): the earlier one is refused when its drops are done, the
 * newer one brings the node up, once. The OpLog writer is stopped with
 * ptrace across both registrations. */
static void test_a_registration_overtaken_while_its_drops_wait_is_refused(void **state)
{
    fx *f = *state;
    int where[OBJECTS], victim = -1;
    char key[32], path[700], want[128];
    put_all(f, where);
    for (int i = 0; i < OBJECTS && victim < 0; i++) {
        if (where[i] != 0) continue;
        victim = i;
        snprintf(key, sizeof(key), "obj/%02d", i);
        assert_int_equal(probe(&f->m, 1, key), 0); /* ensure cold */
        assert_int_equal(probe(&f->m, 3, key), 0); /* release memory */
    }
    assert_true(victim >= 0);
    hx_node_kill(&f->a);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    cold_file(&f->a, key, victim, path, sizeof(path));
    assert_int_equal(unlink(path), 0);

    pid_t writer = hx_thread_named(f->m.pid, "oplog-writer");
    assert_true(writer > 0);
    assert_int_equal(hx_thread_stop(writer), 0);
    snprintf(want, sizeof(want), "cold replica of %s is gone", key);
    int gone[2] = {0, 0};
    for (int round = 0; round < 2; round++) {
        if (round == 1) hx_node_kill(&f->a);
        assert_int_equal(hx_node_start(&f->m, &f->a, "node-a", SEGMENT), 0);
        for (int t = 0; t < 2000 && hx_file_count(f->m.log, want) <= round; t++) usleep(10000);
        gone[round] = hx_file_count(f->m.log, want);
    }
    assert_int_equal(hx_thread_release(writer), 0);
    assert_int_equal(gone[0], 1);
    assert_int_equal(gone[1], 2);

    assert_int_equal(hx_wait_nodes(&f->m, 2, 10000), 0);
    for (int t = 0; t < 2000 && !hx_log_contains(&f->m, "registration refused: a newer one"); t++)
        usleep(10000);
    assert_true(hx_log_contains(&f->m, "node node-a: registration refused: a newer one came"));
    kvc_object o;
    assert_int_equal(kvc_get(f->c, key, &o), SMP_EAGAIN);
    for (int i = 0; i < OBJECTS; i++)
        if (i != victim) assert_bytes(f->c, i);
}

/* A registration's call waits for the master in proportion to the cold
 * files it names: the 10 s of any call for none, 0.5 ms more per file (the
 * 40,653 files of the 100,000-revision bench got no answer in 10 s), and a
 * ceiling a huge inventory cannot pass. */
static void test_registration_call_grows_with_the_inventory(void **state)
{
    (void)state;
    assert_int_equal(node_register_call_ms(0), 10000);
    assert_int_equal(node_register_call_ms(40653), 10000 + 40653 / 2);
    assert_true(node_register_call_ms(40654) >= node_register_call_ms(40653));
    assert_int_equal(node_register_call_ms(SIZE_MAX), NODE_REGISTER_CALL_MAX_MS);
}

/* A cold-only object (its memory replica released) is read from its node's
 * cold file through the node's data server, with the local-first and the
 * remote transport alike; no memory replica is created for it. A byte
 * flipped in the file's data is not caught by the node as it serves a
 * range (it does not hash them) but by the client's SHA-256 check:
 * SMP_EPROTO. The client then has the node hash the whole file; the node
 * finds it corrupt and reports it, and the master drops the replica. */
static void test_cold_only_object_is_read_from_its_cold_file(void **state)
{
    fx *f = *state;
    int where[OBJECTS];
    put_all(f, where);
    const char *key = "obj/07";
    assert_int_equal(probe(&f->m, 1, key), 0); /* ensure cold */
    assert_int_equal(probe(&f->m, 3, key), 0); /* release memory */
    kvc_object o;
    assert_int_equal(kvc_get(f->c, key, &o), 0);
    assert_int_equal(o.n_replicas, 1);
    assert_int_equal(o.replicas[0].kind, SMP_REPLICA_COLD);
    assert_int_equal(o.replicas[0].status, KVC_REPLICA_COMPLETE);
    assert_true(o.replicas[0].data_addr[0] != '\0');

    assert_bytes(f->c, 7);                     /* KVC_AUTO */
    kvc_set_transport(f->c, KVC_REMOTE);
    assert_bytes(f->c, 7);
    kvc_set_transport(f->c, KVC_LOCAL);        /* a cold file needs the data server */
    size_t len = obj_len(7);
    char *got = malloc(len);
    uint64_t n = 0;
    assert_int_equal(kvc_get_into(f->c, key, got, len, &n, 1), SMP_ENOTFOUND);
    kvc_set_transport(f->c, KVC_AUTO);
    assert_int_equal(kvc_get(f->c, key, &o), 0); /* still cold only */
    assert_int_equal(o.n_replicas, 1);

    char path[700];
    cold_file(where[7] == 0 ? &f->a : &f->b, key, 7, path, sizeof(path));
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    char byte;
    assert_int_equal(pread(fd, &byte, 1, 4096 + 33), 1);
    byte ^= 0x01;
    assert_int_equal(pwrite(fd, &byte, 1, 4096 + 33), 1);
    close(fd);
    /* unverified, the flipped byte comes through, with either transport:
       verifying is the reader's job */
    char *want = malloc(len);
    fill(want, len, 7);
    assert_int_equal(kvc_get_into(f->c, key, got, len, &n, 0), SMP_OK);
    assert_int_equal((unsigned char)(got[33] ^ want[33]), 0x01);
    kvc_set_transport(f->c, KVC_REMOTE);
    assert_int_equal(kvc_get_into(f->c, key, got, len, &n, 0), SMP_OK);
    assert_int_equal((unsigned char)(got[33] ^ want[33]), 0x01);
    /* verified, the read fails; the reader has the node hash the file,
       which finds it corrupt and reports it, and the master drops the
       replica: nothing is left to read the object from */
    assert_int_equal(kvc_get_into(f->c, key, got, len, &n, 1), SMP_EPROTO);
    if (!hx_says(kvc_error(f->c), "do not match its SHA-256") ||
        !hx_says(kvc_error(f->c), "corrupt") || !hx_says(kvc_error(f->c), "reported to the master"))
        fail_msg("the verified get said: %s", kvc_error(f->c));
    kvc_set_transport(f->c, KVC_AUTO);
    for (long long end = hx_now_ms() + 20000;; usleep(20 * 1000)) {
        int rc = kvc_get(f->c, key, &o); /* SMP_EAGAIN: no replica to read */
        if (rc == SMP_EAGAIN) break;
        assert_int_equal(rc, 0);
        if (hx_now_ms() > end) fail_msg("the corrupt cold replica of %s was not dropped", key);
    }
    assert_int_equal(kvc_get_into(f->c, key, got, len, &n, 1), SMP_EAGAIN);
    free(want);
    free(got);
}

/* A cold-only object whose cold file was deleted on its node while node
 * and master ran: the read fails naming the missing file, and the node
 * reports it as it reports a corrupt one, so the master drops the replica
 * (the plugin hears replica-lost; nothing is left to read the object from)
 * -- before, the master kept offering the replica to every read until it
 * restarted. */
static void test_a_cold_file_deleted_under_a_live_master_is_dropped_when_read(void **state)
{
    fx *f = *state;
    int where[OBJECTS];
    char path[700], want[300];
    put_all(f, where);
    const char *key = "obj/06";
    assert_int_equal(probe(&f->m, 1, key), 0); /* ensure cold */
    assert_int_equal(probe(&f->m, 3, key), 0); /* release memory */
    unsigned lost_before = lost_events(&f->m, key);
    cold_file(where[6] == 0 ? &f->a : &f->b, key, 6, path, sizeof(path));
    assert_int_equal(unlink(path), 0);

    size_t len = obj_len(6);
    char *got = malloc(len);
    uint64_t n = 0;
    assert_true(kvc_get_into(f->c, key, got, len, &n, 1) < 0);
    if (!hx_says(kvc_error(f->c), "no such file on this node"))
        fail_msg("the get said: %s", kvc_error(f->c));
    kvc_object o;
    for (long long end = hx_now_ms() + 20000;; usleep(20 * 1000)) {
        int rc = kvc_get(f->c, key, &o); /* SMP_EAGAIN: no replica to read */
        if (rc == SMP_EAGAIN) break;
        assert_int_equal(rc, 0);
        if (hx_now_ms() > end) fail_msg("the cold replica of %s, its file gone, was not dropped", key);
    }
    assert_true(lost_events(&f->m, key) > lost_before);
    snprintf(want, sizeof(want), "of %s found corrupt or missing by a read (the node's log says "
             "which): its replica is dropped", key);
    assert_true(hx_log_contains(&f->m, want));
    for (int i = 0; i < OBJECTS; i++)
        if (i != 6) assert_bytes(f->c, i);
    free(got);
}

/* fsck reports a cold replica whose file its node does not have (deleted
 * under a live master) with the corrupt replicas, read-only changing
 * nothing; --repair drops it (the plugin hears replica-lost), and the next
 * fsck is clean. One object keeps its memory replica (it stays readable
 * from there), the other was cold only (nothing is left of it). */
static void test_fsck_reports_and_repair_drops_a_cold_replica_without_its_file(void **state)
{
    fx *f = *state;
    int where[OBJECTS];
    char path[700], want[300], *out = malloc(1 << 16);
    const char *both = "obj/04", *cold_only = "obj/05";
    put_all(f, where);
    assert_int_equal(probe(&f->m, 1, both), 0);      /* ensure cold, memory kept */
    assert_int_equal(probe(&f->m, 1, cold_only), 0); /* ensure cold */
    assert_int_equal(probe(&f->m, 3, cold_only), 0); /* release memory */
    assert_int_equal(wx_weightctl(&f->m, out, 1 << 16, "fsck"), 0); /* clean before */
    cold_file(where[4] == 0 ? &f->a : &f->b, both, 4, path, sizeof(path));
    assert_int_equal(unlink(path), 0);
    cold_file(where[5] == 0 ? &f->a : &f->b, cold_only, 5, path, sizeof(path));
    assert_int_equal(unlink(path), 0);
    unsigned lost_before = lost_events(&f->m, both) + lost_events(&f->m, cold_only);

    assert_int_equal(wx_weightctl(&f->m, out, 1 << 16, "--json fsck"), 1);
    if (!hx_says(out, "\"corrupt_replicas\":2,")) fail_msg("fsck: %s", out);
    snprintf(want, sizeof(want), "\"key\":\"%s\",\"missing\":true}", both);
    assert_true(hx_says(out, want));
    snprintf(want, sizeof(want), "\"key\":\"%s\",\"missing\":true}", cold_only);
    assert_true(hx_says(out, want));
    assert_int_equal(wx_weightctl(&f->m, out, 1 << 16, "fsck"), 1);
    snprintf(want, sizeof(want), ": replica of %s (the node has no such file)", cold_only);
    if (!hx_says(out, want) || !hx_says(out, "  missing cold file ")) fail_msg("fsck: %s", out);
    snprintf(want, sizeof(want), "cold replica of %s names file ", cold_only);
    assert_true(hx_log_contains(&f->m, want));
    assert_true(hx_log_contains(&f->m, "which the node does not have (missing)"));
    /* read-only: both replicas are still there */
    kvc_object o;
    assert_int_equal(kvc_get(f->c, both, &o), 0);
    assert_int_equal(o.n_replicas, 2);
    assert_int_equal(kvc_get(f->c, cold_only, &o), 0);
    assert_int_equal(o.n_replicas, 1);
    assert_int_equal(lost_events(&f->m, both) + lost_events(&f->m, cold_only), lost_before);

    /* exit 1: the cold-only object is left with no replica (said, not hidden) */
    assert_int_equal(wx_weightctl(&f->m, out, 1 << 16, "--json fsck --repair"), 1);
    if (!hx_says(out, "\"objects_without_replica\":1,")) fail_msg("fsck --repair: %s", out);
    assert_int_equal(kvc_get(f->c, both, &o), 0);
    assert_int_equal(o.n_replicas, 1);
    assert_int_equal(o.replicas[0].kind, SMP_REPLICA_MEMORY);
    assert_bytes(f->c, 4);
    assert_int_equal(kvc_get(f->c, cold_only, &o), SMP_EAGAIN);
    assert_true(lost_events(&f->m, both) + lost_events(&f->m, cold_only) >= lost_before + 2);
    assert_int_equal(wx_weightctl(&f->m, out, 1 << 16, "--json fsck"), 1); /* one object without a replica */
    if (!hx_says(out, "\"corrupt_replicas\":0,\"objects_without_replica\":1,"))
        fail_msg("fsck after: %s", out);
    free(out);
}

/* A persist whose node stops answering (SIGSTOP right after the ask: the
 * master sends the task, then marks the node down after timeout_ms) fails,
 * and the master's log line says why instead of "SMP_EIO ()". */
static void test_a_persist_without_an_answer_says_why(void **state)
{
    fx *f = *state;
    int where[OBJECTS], status = 0;
    unsigned answer = 0;
    char want[300];
    put_all(f, where);
    int i = where[3] == 0 ? 3 : -1;
    for (int k = 0; k < OBJECTS && i < 0; k++)
        if (where[k] == 0) i = k;
    assert_true(i >= 0);
    char key[32];
    snprintf(key, sizeof(key), "obj/%02d", i);
    assert_int_equal(kill(f->a.pid, SIGSTOP), 0);
    int rc = hx_replica_probe(&f->m, 1, key, &status, &answer); /* ensure cold, on node A */
    assert_int_equal(kill(f->a.pid, SIGCONT), 0);
    assert_int_equal(rc, 0);
    assert_true(status < 0);
    snprintf(want, sizeof(want), "persisting %s on node-a failed: SMP_EIO: the node did not answer "
             "(it went down or stopped polling, and was marked down)", key);
    if (!hx_log_contains(&f->m, want)) fail_msg("the master's log lacks: %s", want);
    assert_false(hx_log_contains(&f->m, "SMP_EIO ()"));
}

/* A temporary cold file as a persist names it, of len bytes, last written
 * age_s seconds ago, in dir; its path into path. */
static void tmp_cold_file(const char *dir, int i, size_t len, int age_s, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%064d.cold.%016d.tmp", dir, i, i);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)len), 0);
    struct timespec t[2];
    assert_int_equal(clock_gettime(CLOCK_REALTIME, &t[0]), 0);
    t[0].tv_sec -= age_s;
    t[1] = t[0];
    assert_int_equal(futimens(fd, t), 0);
    close(fd);
}

/* Temporaries that writes interrupted by a crash left in the cold
 * directory: a node starting removes those older than a minute and says so
 * in one line (how many, their bytes), and keeps a younger one (a write
 * may still be under way). Before, they went silently. */
static void test_node_start_removes_stale_temporaries_in_one_line(void **state)
{
    fx *f = *state;
    char path[700], fresh[700], want[700];
    hx_node_kill(&f->a);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    for (int i = 1; i <= 3; i++)
        tmp_cold_file(f->a.cold_dir, i, 1000u * (unsigned)i, 120, path, sizeof(path));
    tmp_cold_file(f->a.cold_dir, 4, 500, 0, fresh, sizeof(fresh));
    assert_int_equal(hx_node_start(&f->m, &f->a, "node-a", SEGMENT), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 2, 10000), 0);
    snprintf(want, sizeof(want), "store_node node-a: removed 3 temporary cold file(s), 6000 bytes, left "
             "by writes that did not finish (older than 60 s) in %s", f->a.cold_dir);
    char line[1024];
    int lines = 0;
    FILE *fp = fopen(f->a.log, "r");
    assert_non_null(fp);
    while (fgets(line, sizeof(line), fp) != NULL) lines += strstr(line, "temporary cold file") != NULL;
    fclose(fp);
    assert_int_equal(lines, 1);
    if (!hx_file_contains(f->a.log, want)) fail_msg("node log lacks: %s", want);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(access(fresh, F_OK), 0);
}

/* A running node removes a dead write's temporary cold file once it is a
 * minute old, without registering again (a node that a crash stopped in
 * the middle of a persist and that restarted at once found it too young at
 * its registration, and kept it until the next one): its idle task thread
 * sweeps every 10 s. A young one is kept. */
static void test_a_running_node_removes_stale_temporaries(void **state)
{
    fx *f = *state;
    char stale[700], fresh[700], want[700];
    tmp_cold_file(f->a.cold_dir, 1, 1000, 120, stale, sizeof(stale));
    tmp_cold_file(f->a.cold_dir, 2, 500, 0, fresh, sizeof(fresh));
    snprintf(want, sizeof(want), "store_node node-a: removed 1 temporary cold file(s), 1000 bytes, "
             "left by writes that did not finish (older than 60 s) in %s", f->a.cold_dir);
    for (long long end = hx_now_ms() + 30000; !hx_file_contains(f->a.log, want) && hx_now_ms() < end;)
        usleep(100 * 1000);
    if (!hx_file_contains(f->a.log, want)) fail_msg("node log lacks: %s", want);
    assert_int_equal(access(stale, F_OK), -1);
    assert_int_equal(access(fresh, F_OK), 0);
    assert_int_equal(hx_file_count(f->a.log, "registered with the master"), 1);
}

/* The bytes of where's range in the node's segment file (a pending range
 * has no read ticket yet). */
static void replica_pread(const kvc_replica *where, uint8_t *out, size_t len)
{
    int fd = open(where->segment_path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, out, len, (off_t)where->offset), (ssize_t)len);
    close(fd);
}

/* A forged or tampered write ticket is refused by the node and writes
 * nothing; the genuine ticket writes exactly its range. (Every other
 * refusal: test_tickets.) */
static void test_forged_ticket_writes_nothing(void **state)
{
    fx *f = *state;
    kvc_replica where;
    char err[256];
    ndc_conn *n = NULL;
    uint8_t data[4096], back[4096];
    memset(data, 0xab, sizeof(data));
    assert_int_equal(kvc_put_start(f->c, "forged", sizeof(data), SMP_DATA_KV, NULL, 0, &where), 0);
    assert_true(where.ticket_len > 0);
    assert_int_equal(ndc_connect(where.data_addr, NULL, &n, err, sizeof(err)), 0);
    replica_pread(&where, back, sizeof(back));
    uint8_t before[4096];
    memcpy(before, back, sizeof(before));

    uint8_t forged[sizeof(where.ticket)];
    memcpy(forged, where.ticket, where.ticket_len);
    forged[where.ticket_len - 1] ^= 1; /* the MAC */
    assert_true(ndc_write(n, where.segment, where.offset, sizeof(data), data, forged,
                          where.ticket_len) < 0);
    ndc_close(n);
    assert_int_equal(ndc_connect(where.data_addr, NULL, &n, err, sizeof(err)), 0);
    /* The genuine ticket, used on another range, is refused as well. */
    assert_true(ndc_write(n, where.segment, where.offset + 4096, sizeof(data), data, where.ticket,
                          where.ticket_len) < 0);
    ndc_close(n);
    assert_int_equal(ndc_connect(where.data_addr, NULL, &n, err, sizeof(err)), 0);
    replica_pread(&where, back, sizeof(back));
    assert_memory_equal(back, before, sizeof(back));
    /* The genuine ticket on its own range writes. */
    assert_int_equal(ndc_write(n, where.segment, where.offset, sizeof(data), data, where.ticket,
                               where.ticket_len), 0);
    replica_pread(&where, back, sizeof(back));
    assert_memory_equal(back, data, sizeof(back));
    ndc_close(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_and_get_across_two_nodes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_killed_node_then_restarted_with_its_segment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_read_on_a_pooled_connection_to_a_restarted_node_is_redialled,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_stalled_master_marks_no_live_node_down, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_busy_with_a_long_batch_stays_up, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_with_one_long_task_stays_up, setup, teardown),
        cmocka_unit_test_setup_teardown(test_standalone_node_prefaults_its_segment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restarted_node_without_its_segment_loses_its_replicas, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_restarted_node_checks_every_replica_of_its_segment,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_requests_wait_for_the_nodes_after_a_restart, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_weight_is_exist_waits_for_the_nodes_after_a_restart,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_stop_ends_the_requests_waiting_for_a_node, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_node_gone_since_the_restart_takes_no_new_objects, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cold_round_trip_and_corrupted_cold_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_load_stalled_across_a_master_restart_writes_over_nothing,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_forged_ticket_writes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restarted_node_reconciles_its_cold_files, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_restarted_node_is_up_once_its_lost_replicas_are_dropped,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_registration_overtaken_while_its_drops_wait_is_refused,
                                        setup, teardown),
        cmocka_unit_test(test_registration_call_grows_with_the_inventory),
        cmocka_unit_test_setup_teardown(test_a_cold_file_deleted_under_a_live_master_is_dropped_when_read,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_fsck_reports_and_repair_drops_a_cold_replica_without_its_file,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_persist_without_an_answer_says_why, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_start_removes_stale_temporaries_in_one_line, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_running_node_removes_stale_temporaries, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cold_only_object_is_read_from_its_cold_file, setup,
                                        teardown),
    };
    if (getenv("NODES_TEST") != NULL) cmocka_set_test_filter(getenv("NODES_TEST")); /* by name */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
