/* test_ha_failover.c -- three real masters on a real etcd.
 *
 * Every test starts Debian's etcd through etcd_fixture (its own ports, data
 * directory and key prefix), three store_master processes in HA mode (their
 * own Unix sockets and data dirs, one shared snapshot directory) and, where
 * objects need a home, one store_node given the list of all three masters.
 * Nothing is mocked: leaders are killed with SIGKILL, paused with SIGSTOP,
 * an etcd member is killed, and the assertions read what the masters answer
 * afterwards: no acknowledged write lost, a deposed leader never writes, a
 * standby that cannot replay a record says so and never leads, and a
 * standby started after the OpLog was garbage-collected catches up from the
 * snapshot. */
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fault_proxy.h"
#include "ha_cluster_fixture.h"
#include "harness.h"
#include "host_rpc.pb-c.h"
#include "rpc.pb-c.h"
#include "weight_model.h"

#define N_MASTERS HC_MASTERS
#define WAIT_MS 20000
#define RECORDER_SERVICE 40
#define RECORDER_SET_NEXT 1
#define RECORDER_LIST 2

/* with_recorder: the recorder test plugin (OpLog type 20), ungated or behind
 * the capability gate "recorder_gate" (closed in config). */
enum { RECORDER_NONE = 0, RECORDER_UNGATED = 1, RECORDER_GATED = 2 };

typedef struct cluster {
    hc_cluster hc;
    int with_recorder[N_MASTERS];
    int every_records;       /* snapshot.every_records, 0: the default */
    int fsck_every_s;        /* fsck.every_s (at 1 MiB/s), 0: the default */
    int paused;              /* the master SIGSTOPped now (-1: none): not asked for its role */
} cluster;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Write master i's config: a GC margin of 5 records, both weight gates
 * confirmed, the weight plugin and, as asked, the recorder. */
static int write_config(cluster *c, int i)
{
    char extra[2048];
    int n = snprintf(extra, sizeof(extra),
                     "  gc_keep_records: 5\n"
                     "cluster:\n  weight_management_oplog_capability_confirmed: true\n"
                     "  weight_lineage_oplog_capability_confirmed: true\n");
    if (c->every_records > 0)
        n += snprintf(extra + n, sizeof(extra) - (size_t)n, "snapshot:\n  every_records: %d\n",
                      c->every_records);
    if (c->fsck_every_s > 0)
        n += snprintf(extra + n, sizeof(extra) - (size_t)n,
                      "fsck:\n  every_s: %d\n  bytes_per_s: 1048576\n", c->fsck_every_s);
    n += snprintf(extra + n, sizeof(extra) - (size_t)n,
                  "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n", BUILD_DIR);
    if (c->with_recorder[i])
        snprintf(extra + n, sizeof(extra) - (size_t)n,
                 "  - path: \"%s/lib/testplugins/recorder.so\"\n%s", BUILD_DIR,
                 c->with_recorder[i] == RECORDER_GATED
                     ? "    config:\n      gate: recorder_gate\n      recorder_gate: false\n"
                     : "");
    return hc_configure(&c->hc, i, extra);
}

static int setup_n(void **state, size_t etcd_members)
{
    cluster *c = calloc(1, sizeof(*c));
    if (c == NULL) return -1;
    *state = c;
    for (int i = 0; i < N_MASTERS; i++) c->with_recorder[i] = RECORDER_UNGATED;
    c->paused = -1;
    if (hc_init(&c->hc, "ha-failover", etcd_members) < 0) {
        free(c);
        *state = NULL;
        return -1;
    }
    return 0;
}

static int setup(void **state)
{
    return setup_n(state, 1);
}

static int setup_three_etcd_members(void **state)
{
    return setup_n(state, 3);
}

static int teardown(void **state)
{
    cluster *c = *state;
    hc_cleanup(&c->hc);
    free(c);
    return 0;
}

static void start_master(cluster *c, int i)
{
    assert_int_equal(write_config(c, i), 0);
    if (hx_start(&c->hc.m[i], WAIT_MS) < 0) fail_msg("master %d did not start (%s)", i, c->hc.m[i].log);
}

/* The one master that leads (not `not`); fails the test after WAIT_MS. */
static int wait_leader(cluster *c, int not)
{
    int leader = hc_wait_leader(&c->hc, not, WAIT_MS);
    if (leader < 0) fail_msg("no single leader within %d ms", WAIT_MS);
    return leader;
}

static void wait_role(cluster *c, int i, const char *want)
{
    if (hc_wait_role(&c->hc, i, want, WAIT_MS) < 0) fail_msg("master %d is not %s", i, want);
}

/* Wait until master i has a snapshot (snapshot_last_seq past 0); its
 * log is printed when none comes. */
static void wait_snapshot(cluster *c, int i)
{
    for (long long end = hx_now_ms() + WAIT_MS;; sleep_ms(100)) {
        if (hx_metric(&c->hc.m[i], "snapshot_last_seq") > 0) return;
        if (hx_now_ms() > end) {
            hx_print_log(&c->hc.m[i]);
            fail_msg("master %d took no snapshot", i);
        }
    }
}

static void start_cluster(cluster *c)
{
    for (int i = 0; i < N_MASTERS; i++) start_master(c, i);
}

static void start_node(cluster *c)
{
    assert_int_equal(hc_node_start(&c->hc, "n1", 16u << 20), 0);
}

/* Wait until the leader has the node registered. */
static void wait_node(cluster *c, int leader)
{
    if (hc_wait_node(&c->hc, leader, WAIT_MS) < 0) fail_msg("node not registered with master %d", leader);
}

static kvc *client_of(const cluster *c, int i)
{
    kvc *k = hx_client(&c->hc.m[i]);
    if (k == NULL) fail_msg("cannot connect to master %d", i);
    return k;
}

static void put_n(kvc *k, const char *prefix, int from, int to)
{
    for (int i = from; i < to; i++) {
        char key[64], val[64];
        snprintf(key, sizeof(key), "%s/%04d", prefix, i);
        int len = snprintf(val, sizeof(val), "value-%d", i);
        int rc = kvc_put_bytes(k, key, val, (uint64_t)len, SMP_DATA_KV, NULL, 0, NULL);
        if (rc != 0) fail_msg("put %s: %d (%s)", key, rc, kvc_error(k));
    }
}

/* put_n through whichever master leads, across failovers: a key whose put
 * failed in transit (the leader died or stepped down) is put again on the
 * next leader -- SMP_EEXIST then means the first attempt had applied. */
static void put_n_any_leader(cluster *c, const char *prefix, int from, int to)
{
    for (int i = from; i < to; i++) {
        char key[64], val[64];
        snprintf(key, sizeof(key), "%s/%04d", prefix, i);
        int len = snprintf(val, sizeof(val), "value-%d", i), rc = -1, tried = 0;
        for (long long end = hx_now_ms() + WAIT_MS; rc != 0 && hx_now_ms() < end;) {
            int leader = hc_wait_leader(&c->hc, c->paused, WAIT_MS);
            kvc *w = leader >= 0 && hc_wait_node(&c->hc, leader, WAIT_MS) == 0
                         ? hx_client(&c->hc.m[leader])
                         : NULL;
            if (w != NULL) {
                rc = kvc_put_bytes(w, key, val, (uint64_t)len, SMP_DATA_KV, NULL, 0, NULL);
                if (rc == SMP_EEXIST && tried) rc = 0;
                tried = 1;
                kvc_close(w);
            }
            if (rc != 0) sleep_ms(100);
        }
        if (rc != 0) fail_msg("put %s: not acknowledged by any leader within %d ms", key, WAIT_MS);
    }
}

/* assert_all_present through whichever master leads: a read that fails in
 * transit (the leader changed, the node is re-registering) is read again from
 * the leader then; a key that is not there, or holds other bytes, fails. */
static void assert_all_present_any_leader(cluster *c, const char *prefix, int from, int to)
{
    for (int i = from; i < to; i++) {
        char key[64], want[64], got[64];
        uint64_t len = 0;
        snprintf(key, sizeof(key), "%s/%04d", prefix, i);
        int wl = snprintf(want, sizeof(want), "value-%d", i), rc = -1;
        for (long long end = hx_now_ms() + WAIT_MS; rc != 0 && hx_now_ms() < end;) {
            int leader = hc_wait_leader(&c->hc, c->paused, WAIT_MS);
            kvc *r = leader >= 0 ? hx_client(&c->hc.m[leader]) : NULL;
            if (r != NULL) {
                rc = kvc_get_into(r, key, got, sizeof(got), &len, 1);
                kvc_close(r);
            }
            if (rc == SMP_ENOTFOUND) fail_msg("acknowledged %s lost", key);
            if (rc != 0) sleep_ms(100);
        }
        if (rc != 0) fail_msg("%s: not readable from any leader within %d ms", key, WAIT_MS);
        assert_int_equal(len, (uint64_t)wl);
        assert_memory_equal(got, want, (size_t)wl);
    }
}

static void assert_all_present(kvc *k, const char *prefix, int from, int to)
{
    for (int i = from; i < to; i++) {
        char key[64], want[64], got[64];
        uint64_t len = 0;
        snprintf(key, sizeof(key), "%s/%04d", prefix, i);
        int wl = snprintf(want, sizeof(want), "value-%d", i);
        int rc = kvc_get_into(k, key, got, sizeof(got), &len, 1);
        if (rc != 0) fail_msg("acknowledged %s lost after failover: %d (%s)", key, rc, kvc_error(k));
        assert_int_equal(len, (uint64_t)wl);
        assert_memory_equal(got, want, (size_t)wl);
    }
}

/* Start the node, wait until the leader has it, and write n keys under
 * prefix through the leader (acknowledged). */
static void node_and_write(cluster *c, int leader, const char *prefix, int n)
{
    start_node(c);
    wait_node(c, leader);
    kvc *k = client_of(c, leader);
    put_n(k, prefix, 0, n);
    kvc_close(k);
}

/* The whole cluster with its node, and n writes under prefix acknowledged by
 * the leader; returns the leader. */
static int start_cluster_and_write(cluster *c, const char *prefix, int n)
{
    start_cluster(c);
    int leader = wait_leader(c, -1);
    node_and_write(c, leader, prefix, n);
    return leader;
}

/* Master i's applied sequence, or 0 while it does not answer (restarting). */
static uint64_t applied_or_0(const cluster *c, int i)
{
    kvc *k = hx_client(&c->hc.m[i]);
    kvc_status st;
    int rc = k != NULL ? kvc_status_get(k, &st) : -1;
    if (k != NULL) kvc_close(k);
    return rc == 0 ? st.oplog_last_seq : 0;
}

static uint64_t applied_of(const cluster *c, int i)
{
    kvc *k = client_of(c, i);
    kvc_status st;
    assert_int_equal(kvc_status_get(k, &st), 0);
    kvc_close(k);
    return st.oplog_last_seq;
}

/* One request written as raw bytes on a fresh connection to a master's
 * socket, and its RpcResponse as the master sent it (no client library in
 * between, so a redirect is seen, not followed). Caller frees *out. */
static void raw_call_n(const hx_master *m, uint32_t service, uint32_t method, const char *body,
                       size_t body_len, RpcResponse **out)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct timeval tv = {WAIT_MS / 1000, 0}; /* a master that never answers fails the call */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%.107s", m->socket);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    size_t flen = 0;
    uint8_t *frame = hx_frame_request(7, service, method, (const uint8_t *)body, body_len, &flen);
    assert_non_null(frame);
    assert_int_equal(write(fd, frame, flen), (ssize_t)flen);
    free(frame);
    uint8_t hdr[4];
    size_t got = 0;
    while (got < 4) {
        ssize_t n = read(fd, hdr + got, 4 - got);
        assert_true(n > 0);
        got += (size_t)n;
    }
    size_t len = (size_t)hdr[0] << 24 | (size_t)hdr[1] << 16 | (size_t)hdr[2] << 8 | hdr[3];
    uint8_t *buf = malloc(len ? len : 1);
    assert_non_null(buf);
    for (got = 0; got < len;) {
        ssize_t n = read(fd, buf + got, len - got);
        assert_true(n > 0);
        got += (size_t)n;
    }
    close(fd);
    *out = rpc_response__unpack(NULL, len, buf);
    free(buf);
    assert_non_null(*out);
}

static void raw_call(const hx_master *m, uint32_t service, uint32_t method, const char *body,
                     RpcResponse **out)
{
    raw_call_n(m, service, method, body, strlen(body), out);
}

/* -- tests ------------------------------------------------------------------------- */

/* A standby answers status but nothing else: a mutation sent to it comes
 * back SMP_ENOTLEADER naming the leader, and changes nothing. */
static void test_ha_standby_redirects_to_the_leader(void **state)
{
    cluster *c = *state;
    start_cluster(c);
    int leader = wait_leader(c, -1);
    int standby = (leader + 1) % N_MASTERS;
    wait_role(c, standby, "standby");

    RpcResponse *resp = NULL;
    raw_call(&c->hc.m[standby], RECORDER_SERVICE, RECORDER_SET_NEXT, "x", &resp);
    assert_int_equal(resp->status, SMP_ENOTLEADER);
    assert_string_equal(resp->leader, c->hc.m[leader].socket);
    assert_non_null(strstr(resp->error, "not the leader"));
    rpc_response__free_unpacked(resp, NULL);
    /* Nothing was written: the leader's log did not move. */
    uint64_t before = applied_of(c, leader);
    raw_call(&c->hc.m[standby], RECORDER_SERVICE, RECORDER_SET_NEXT, "y", &resp);
    assert_int_equal(resp->status, SMP_ENOTLEADER);
    rpc_response__free_unpacked(resp, NULL);
    assert_int_equal(applied_of(c, leader), before);
    /* The leader takes it. */
    raw_call(&c->hc.m[leader], RECORDER_SERVICE, RECORDER_SET_NEXT, "z", &resp);
    assert_int_equal(resp->status, 0);
    rpc_response__free_unpacked(resp, NULL);
    assert_int_equal(applied_of(c, leader), before + 1);

    /* `weightctl status` given the masters' list shows the leader's view
     * (nodes register with it alone), though a standby answered first;
     * given that standby alone, its own view, saying whose the nodes are */
    start_node(c);
    wait_node(c, leader);
    char args[1200], out[8192], want[400];
    snprintf(args, sizeof(args), "--master %s,%s status", c->hc.m[standby].socket,
             c->hc.m[leader].socket);
    assert_int_equal(wx_weightctl(&c->hc.m[standby], out, sizeof(out), args), 0);
    snprintf(want, sizeof(want), "master    %s (leader, id m%d, ", c->hc.m[leader].socket, leader);
    if (strstr(out, want) == NULL || strstr(out, "\nnodes     1\n") == NULL)
        fail_msg("status of the list: %s", out);
    assert_int_equal(wx_weightctl(&c->hc.m[standby], out, sizeof(out), "status"), 0);
    snprintf(want, sizeof(want), "\nnodes     - (they register with the leader, %s)\n",
             c->hc.m[leader].socket);
    if (strstr(out, "(standby, id ") == NULL || strstr(out, want) == NULL)
        fail_msg("status of a standby: %s", out);
}

/* SIGKILL of the leader under writes: a standby takes over within the
 * lease, every acknowledged write is there, new writes work, and the old
 * leader comes back as a standby that catches up. */
static void test_ha_leader_sigkill_loses_no_acknowledged_write(void **state)
{
    cluster *c = *state;
    int leader = start_cluster_and_write(c, "kv/a", 200);
    hx_kill(&c->hc.m[leader]);

    int next = wait_leader(c, leader);
    wait_node(c, next); /* the node followed the new leader by itself */
    kvc *k = client_of(c, next);
    assert_all_present(k, "kv/a", 0, 200);
    kvc_close(k);
    /* through whichever master leads: on a loaded machine (ASan, the suite at
     * -j4 on two cores) the new leader may miss a renewal and step down */
    put_n_any_leader(c, "kv/b", 0, 50);

    start_master(c, leader);
    wait_role(c, leader, "standby");
    uint64_t want = applied_of(c, next);
    for (long long end = hx_now_ms() + WAIT_MS; applied_of(c, leader) < want;) {
        if (hx_now_ms() > end) fail_msg("restarted master did not catch up to %llu",
                                       (unsigned long long)want);
        sleep_ms(50);
    }
}

/* A lookup through a client of the master list, on its own thread. */
typedef struct list_lookup {
    const char *masters;
    const char *key;
    int rc;
    char node[64];
    atomic_int done;
} list_lookup;

static void *run_list_lookup(void *arg)
{
    list_lookup *l = arg;
    char err[256];
    kvc *k = NULL;
    kvc_object o;
    l->rc = kvc_connect(l->masters, WAIT_MS, &k, err, sizeof(err));
    if (l->rc == 0 && (l->rc = kvc_get(k, l->key, &o)) == 0 && o.n_replicas > 0)
        snprintf(l->node, sizeof(l->node), "%s", o.replicas[0].node);
    if (k != NULL) kvc_close(k);
    atomic_store(&l->done, 1);
    return NULL;
}

/* A standby promoted to leader waits for the node to register with it, and
 * so does a lookup that needs the node: with the node stopped through the
 * failover, a lookup of an object on it, sent through the master list, is
 * held by the new leader (its store_node_wait_calls reads 1), not refused
 * "no replica on a live node"; once the node continues and registers with
 * the new leader, the lookup is answered from it. */
static void test_ha_new_leader_holds_a_lookup_until_the_node_registers(void **state)
{
    cluster *c = *state;
    int leader = start_cluster_and_write(c, "kv/a", 5);
    assert_int_equal(kill(c->hc.node.pid, SIGSTOP), 0);
    hx_kill(&c->hc.m[leader]);
    (void)wait_leader(c, leader);
    list_lookup l = {.masters = c->hc.masters, .key = "kv/a/0003"};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, run_list_lookup, &l), 0);
    int held = 0;
    for (long long end = hx_now_ms() + WAIT_MS; !held && hx_now_ms() < end;) {
        for (int i = 0; i < N_MASTERS && !held; i++)
            held = i != leader && hx_metric(&c->hc.m[i], "store_node_wait_calls") == 1;
        if (!held) sleep_ms(10);
    }
    int early = atomic_load(&l.done);
    assert_int_equal(kill(c->hc.node.pid, SIGCONT), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(held);
    assert_false(early);
    assert_int_equal(l.rc, 0);
    assert_string_equal(l.node, "n1");
}

/* A SIGKILLed leader is replaced through the standbys' connections to it,
 * not by its lease's expiry: with a 10 s lease, a standby reads end-of-file
 * from the dead leader, revokes its lease (its log says so), and the new
 * leader has every acknowledged write. From the moment a standby noticed,
 * it never names the dead leader to a client: a request it turns away is
 * held until it knows the new leader, and names that one. */
static void test_ha_leader_exit_is_noticed_through_its_connection(void **state)
{
    static const char noticed[] = "closed its connection (its process is gone); its lease";
    static const char exists_k[] = "\x0a\x01k"; /* KeyRequest{key: "k"} */
    cluster *c = *state;
    c->hc.lease_ttl_s = 10;
    int leader = start_cluster_and_write(c, "kv/a", 20);
    hx_kill(&c->hc.m[leader]);
    int revoked = 0;
    for (long long end = hx_now_ms() + WAIT_MS; !revoked && hx_now_ms() < end;) {
        for (int i = 0; i < N_MASTERS && !revoked; i++) {
            if (i == leader || !hx_log_contains(&c->hc.m[i], noticed)) continue;
            revoked = 1;
            RpcResponse *resp = NULL;
            raw_call_n(&c->hc.m[i], HOST_SERVICE__HOST_SERVICE_OBJECTS, OBJECTS_METHOD__OBJ_EXISTS,
                       exists_k, sizeof(exists_k) - 1, &resp);
            if (resp->status == SMP_ENOTLEADER && strcmp(resp->leader, c->hc.m[leader].socket) == 0)
                fail_msg("m%d named the dead leader after it noticed its exit: %s", i, resp->error);
            rpc_response__free_unpacked(resp, NULL);
        }
        if (!revoked) sleep_ms(2);
    }
    assert_true(revoked);
    int next = wait_leader(c, leader);
    wait_node(c, next);
    assert_all_present_any_leader(c, "kv/a", 0, 20);
}

/* A leader told to stop (SIGTERM) exits 0, whoever revokes its lease
 * meanwhile: its shutdown closes its sockets, the standbys' exit watch may
 * then revoke its lease before it is done, and the fence or deposal that
 * follows must not turn the stop into a restart as a standby (it did once,
 * with a manifest write in flight, and the master never exited). The race
 * is not forced here: three leaders in turn are stopped under writes, each
 * given 20 s to exit 0. */
static void test_ha_stopped_leader_exits_even_when_its_lease_is_revoked(void **state)
{
    cluster *c = *state;
    start_cluster_and_write(c, "kv/a", 10);
    for (int round = 0; round < 3; round++) {
        int leader = wait_leader(c, -1);
        hx_master *m = &c->hc.m[leader];
        put_n_any_leader(c, "kv/b", round * 5, round * 5 + 5);
        assert_int_equal(kill(m->pid, SIGTERM), 0);
        int status = -1, exited = 0;
        for (long long end = hx_now_ms() + WAIT_MS; !exited && hx_now_ms() < end;) {
            pid_t r = waitpid(m->pid, &status, WNOHANG);
            if (r == m->pid) exited = 1;
            else sleep_ms(50);
        }
        if (!exited) {
            kill(m->pid, SIGKILL);
            waitpid(m->pid, NULL, 0);
            m->pid = 0;
            fail_msg("master %d did not exit within %d ms of SIGTERM (%s)", leader, WAIT_MS, m->log);
        }
        m->pid = 0;
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        start_master(c, leader); /* back as a standby for the next round */
        wait_role(c, leader, "standby");
    }
    assert_all_present_any_leader(c, "kv/a", 0, 10);
    assert_all_present_any_leader(c, "kv/b", 0, 15);
}

/* SIGSTOP of the leader: it is deposed when its lease expires, a standby
 * leads and takes writes; on SIGCONT the old leader writes nothing -- it
 * restarts as a standby -- and every write of the new term stands. The
 * writes go through whichever master leads: under ASan on a loaded machine
 * the new leader missed a renewal once and the third master took over
 * (the node followed it, and a test bound to the first new leader failed
 * waiting for the node there). */
static void test_ha_leader_sigstop_is_deposed_and_never_writes_again(void **state)
{
    cluster *c = *state;
    int old = start_cluster_and_write(c, "kv/a", 20);
    assert_int_equal(kill(c->hc.m[old].pid, SIGSTOP), 0);
    c->paused = old; /* its admin port takes the GET and never answers */
    wait_leader(c, old);
    put_n_any_leader(c, "kv/b", 0, 20); /* the node gives up on the paused master and follows */

    assert_int_equal(kill(c->hc.m[old].pid, SIGCONT), 0);
    c->paused = -1;
    wait_role(c, old, "standby");
    assert_true(hx_log_contains(&c->hc.m[old], "restarting as a standby"));
    assert_all_present_any_leader(c, "kv/a", 0, 20);
    assert_all_present_any_leader(c, "kv/b", 0, 20);
    put_n_any_leader(c, "kv/c", 0, 5);
    assert_all_present_any_leader(c, "kv/c", 0, 5);
}

/* One read of kv/a/<i> through k: 0 with the bytes checked, or the code. */
static int read_one(kvc *k, int i)
{
    char key[64], want[64], got[64];
    uint64_t len = 0;
    snprintf(key, sizeof(key), "kv/a/%04d", i);
    int wl = snprintf(want, sizeof(want), "value-%d", i);
    int rc = kvc_get_into(k, key, got, sizeof(got), &len, 1);
    if (rc == 0 && (len != (uint64_t)wl || memcmp(got, want, (size_t)wl) != 0))
        fail_msg("%s read back other bytes", key);
    return rc;
}

/* A paused master (SIGSTOP) still has its connections accepted by the
 * kernel. Clients given the list pass it over:
 *  - a new connection must answer a first request, so a paused standby
 *    first in the list costs a moment, not the call;
 *  - a read waiting on a leader that was paused asks another master after
 *    2 s, and is answered by the new leader once the standbys name it (the
 *    node left the paused leader too, so the new one serves its replicas);
 *  - a mutation, which is not sent twice, fails once another master leads
 *    (it is not known whether it was applied), without waiting for its
 *    timeout, and the next call goes to the new leader. */
static void test_ha_a_paused_master_is_passed_over_by_clients(void **state)
{
    cluster *c = *state;
    int leader = start_cluster_and_write(c, "kv/a", 5);
    int standby = (leader + 1) % N_MASTERS, third = (leader + 2) % N_MASTERS;
    const hx_master *m = c->hc.m;
    char list[1200], err[512];
    kvc *k = NULL;

    wait_role(c, standby, "standby");
    assert_int_equal(kill(m[standby].pid, SIGSTOP), 0);
    c->paused = standby;
    snprintf(list, sizeof(list), "%s,%s,%s", m[standby].socket, m[third].socket,
             m[leader].socket);
    if (kvc_connect(list, 5000, &k, err, sizeof(err)) < 0)
        fail_msg("connect through %s: %s", list, err);
    int rc = read_one(k, 0);
    if (rc != 0) fail_msg("a read through a list led by a paused standby: %d (%s)", rc, kvc_error(k));
    assert_string_equal(kvc_endpoint(k), m[leader].socket);
    kvc_close(k);
    assert_int_equal(kill(m[standby].pid, SIGCONT), 0);
    c->paused = -1;
    wait_role(c, standby, "standby");

    snprintf(list, sizeof(list), "%s,%s,%s", m[leader].socket, m[standby].socket,
             m[third].socket);
    if (kvc_connect(list, 12000, &k, err, sizeof(err)) < 0)
        fail_msg("connect through %s: %s", list, err);
    assert_int_equal(read_one(k, 1), 0);
    assert_int_equal(kill(m[leader].pid, SIGSTOP), 0);
    c->paused = leader;
    rc = read_one(k, 2);
    if (rc != 0) fail_msg("a read sent to a leader then paused: %d (%s)", rc, kvc_error(k));
    int next = wait_leader(c, leader);
    assert_string_equal(kvc_endpoint(k), m[next].socket);
    if (!hx_file_contains(c->hc.node.log, "lost the master at "))
        fail_msg("the node did not leave the paused leader");
    assert_int_equal(kill(m[leader].pid, SIGCONT), 0);
    c->paused = -1;
    wait_role(c, leader, "standby");

    /* The new leader paused under a put start (not sent twice). */
    assert_int_equal(read_one(k, 3), 0);
    assert_int_equal(kill(m[next].pid, SIGSTOP), 0);
    c->paused = next;
    rc = kvc_put_bytes(k, "kv/b/0000", "b", 1, SMP_DATA_KV, NULL, 0, NULL);
    if (rc != SMP_EIO || strstr(kvc_error(k), " leads now: whether the request was applied is not "
                                              "known (it is not sent again)") == NULL)
        fail_msg("a put sent to a leader then paused: %d (%s)", rc, kvc_error(k));
    int last = wait_leader(c, next);
    rc = kvc_put_bytes(k, "kv/b/0001", "b", 1, SMP_DATA_KV, NULL, 0, NULL);
    if (rc != 0) fail_msg("the put after: %d (%s)", rc, kvc_error(k));
    assert_string_equal(kvc_endpoint(k), m[last].socket);
    assert_int_equal(read_one(k, 4), 0);
    kvc_close(k);
    assert_int_equal(kill(m[next].pid, SIGCONT), 0);
    c->paused = -1;
    wait_role(c, next, "standby");
}

/* A standby without the plugin that owns a record type stops following at
 * that record: /health is 503 naming the cause, /role says not-ready, and it
 * never leads -- when the leader dies, the other standby takes over. Should
 * it find the leader key under its own lease (a create of its own, applied
 * before it left the election, whose answer was lost: written here by the
 * test), it gives the key back, and the other master leads again; kept, the
 * key would have stood as long as the standby renews its lease, with nobody
 * leading. */
static void test_ha_standby_stops_visibly_on_an_unknown_record_type(void **state)
{
    cluster *c = *state;
    c->with_recorder[2] = RECORDER_NONE;
    start_cluster(c);
    int leader = wait_leader(c, -1);
    if (leader == 2) { /* make a master with the recorder lead */
        hx_kill(&c->hc.m[2]);
        leader = wait_leader(c, 2);
        start_master(c, 2);
    }
    wait_role(c, 2, "standby");

    RpcResponse *resp = NULL;
    raw_call(&c->hc.m[leader], RECORDER_SERVICE, RECORDER_SET_NEXT, "abc", &resp);
    assert_int_equal(resp->status, 0);
    rpc_response__free_unpacked(resp, NULL);

    wait_role(c, 2, "standby not-ready");
    char *body = NULL;
    assert_int_equal(hx_http_get(&c->hc.m[2], "/health", &body), 503);
    assert_non_null(strstr(body, "has type 20 but no loaded plugin replays it"));
    free(body);
    assert_int_equal(hx_http_get(&c->hc.m[2], "/metrics", &body), 200);
    assert_non_null(strstr(body, "ha_standby_ready 0"));
    assert_non_null(strstr(body, "ha_replay_stopped_total 1"));
    free(body);

    hx_kill(&c->hc.m[leader]);
    int next = wait_leader(c, leader);
    assert_int_not_equal(next, 2);
    wait_role(c, 2, "standby not-ready");

    int stepped_down = hx_file_count(c->hc.m[next].log, "; restarting as a standby");
    assert_int_equal(hc_leader_key_of(&c->hc, 2), 0);
    /* next steps down (its key is gone, or another's: deposed or fenced) */
    for (long long end = hx_now_ms() + WAIT_MS;
         hx_file_count(c->hc.m[next].log, "; restarting as a standby") <= stepped_down;)
        if (hx_now_ms() > end) fail_msg("m%d did not step down", next);
        else sleep_ms(20);
    assert_int_equal(wait_leader(c, 2), next); /* elected again, once m2 gave the key back */
    assert_true(hx_log_contains(&c->hc.m[2], "but it is out of the election: the key is given back"));
    wait_role(c, 2, "standby not-ready");
}

/* Losing one member of a three-member etcd -- the one every master talks
 * to first -- leaves the cluster writable (the leader's calls move to the
 * other members; on a slow machine the leader may miss a renewal and a
 * standby take over, which the writes follow), nothing acknowledged is
 * lost, and a failover still works afterwards. */
static void test_ha_etcd_member_sigkill_keeps_the_cluster_writable(void **state)
{
    cluster *c = *state;
    c->hc.lease_ttl_s = 2; /* the default: a dead member costs calls a deadline of TTL/4 */
    start_cluster_and_write(c, "kv/a", 20);
    assert_int_equal(etcd_fixture_kill(&c->hc.etcd, 0), 0);
    put_n_any_leader(c, "kv/b", 0, 20);
    int leader = wait_leader(c, -1);
    hx_kill(&c->hc.m[leader]);
    assert_all_present_any_leader(c, "kv/a", 0, 20);
    assert_all_present_any_leader(c, "kv/b", 0, 20);
}

/* A SIGSTOPped etcd member -- alive to TCP, silent to requests, the case
 * that hangs clients waiting on it -- costs the masters one deadline: their
 * calls move to the other members, the cluster stays writable (after a
 * failover if the leader could not renew in time), nothing acknowledged is
 * lost, and after SIGCONT the member rejoins. */
static void test_ha_etcd_member_sigstop_keeps_the_cluster_writable(void **state)
{
    cluster *c = *state;
    c->hc.lease_ttl_s = 2; /* the default: a silent member costs calls a deadline of TTL/4 */
    start_cluster_and_write(c, "kv/a", 20);
    /* Every master lists member 0 first: it is the one they talk to. */
    assert_int_equal(etcd_fixture_pause(&c->hc.etcd, 0), 0);
    put_n_any_leader(c, "kv/b", 0, 20);
    assert_all_present_any_leader(c, "kv/a", 0, 20);

    assert_int_equal(etcd_fixture_resume(&c->hc.etcd, 0), 0);
    assert_all_present_any_leader(c, "kv/a", 0, 20);
    assert_all_present_any_leader(c, "kv/b", 0, 20);
}

/* A master started while etcd does not answer (SIGSTOPped: alive to TCP,
 * silent to requests, like a member busy or electing) waits for it, says
 * so, and leads once etcd answers, instead of exiting on the first
 * deadline. A child process resumes the member once the master's log says
 * it waits, while the test waits for the master to start. */
static void test_ha_master_starts_while_etcd_is_silent(void **state)
{
    cluster *c = *state;
    c->hc.lease_ttl_s = 2; /* the default: a call's deadline is TTL/4 */
    assert_int_equal(etcd_fixture_pause(&c->hc.etcd, 0), 0);
    pid_t resumer = fork();
    assert_true(resumer >= 0);
    if (resumer == 0) {
        for (int waited = 0; !hx_log_contains(&c->hc.m[0], "waiting for etcd to answer");
             waited += 50) {
            if (waited > WAIT_MS) break;
            sleep_ms(50);
        }
        _exit(etcd_fixture_resume(&c->hc.etcd, 0) == 0 ? 0 : 1);
    }
    start_master(c, 0);
    int status = 0;
    assert_int_equal(waitpid(resumer, &status, 0), resumer);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_true(hx_log_contains(&c->hc.m[0], "waiting for etcd to answer"));
    assert_int_equal(wait_leader(c, -1), 0);
    node_and_write(c, 0, "kv/late", 5);
    assert_all_present_any_leader(c, "kv/late", 0, 5);
}

/* etcd gone for longer than a standby's follower retries (30 s), every
 * master of the cluster with it: the leader cannot renew and is deposed,
 * the standbys stop following -- and each restarts as a standby that waits
 * for etcd as long as it takes (a first start gives up after 10 s), so when
 * etcd is back a leader is elected and the node registers without an
 * operator, with every acknowledged write there and the cluster writable.
 * A master stopped while it waits exits 0. */
static void test_ha_cluster_comes_back_after_a_long_etcd_outage(void **state)
{
    cluster *c = *state;
    c->hc.lease_ttl_s = 2;
    start_cluster_and_write(c, "kv/a", 20);
    assert_int_equal(etcd_fixture_kill(&c->hc.etcd, 0), 0);
    for (int i = 0; i < N_MASTERS; i++) {
        for (long long end = hx_now_ms() + 60000;
             !hx_log_contains(&c->hc.m[i], " s, as long as it takes): ");) {
            if (hx_now_ms() > end) {
                hx_print_log(&c->hc.m[i]);
                fail_msg("master %d did not restart to wait for etcd", i);
            }
            sleep_ms(200);
        }
    }
    /* by now the first to restart has waited far longer than a first start would */
    for (int i = 0; i < N_MASTERS; i++)
        if (!hx_alive(&c->hc.m[i])) fail_msg("master %d exited while etcd was away", i);
    /* one told to stop meanwhile stops, cleanly */
    assert_int_equal(hx_stop(&c->hc.m[2]), 0);
    assert_true(hx_log_contains(&c->hc.m[2], "store_master: ha: stopped while waiting for etcd"));
    assert_int_equal(etcd_fixture_restart(&c->hc.etcd, 0, 20000), 0);
    start_master(c, 2);
    int leader = wait_leader(c, -1);
    wait_node(c, leader);
    assert_all_present_any_leader(c, "kv/a", 0, 20);
    put_n_any_leader(c, "kv/b", 0, 20);
    assert_all_present_any_leader(c, "kv/b", 0, 20);
}

/* On the new leader: a recorder record is written (the gate is open) and
 * status says recorder_gate is confirmed by a record. */
static void assert_recorder_gate_open_after_failover(cluster *c, int leader, const char *body)
{
    RpcResponse *resp = NULL;
    raw_call(&c->hc.m[leader], RECORDER_SERVICE, RECORDER_SET_NEXT, body, &resp);
    assert_int_equal(resp->status, 0);
    rpc_response__free_unpacked(resp, NULL);
    kvc *k = client_of(c, leader);
    kvc_status st;
    assert_int_equal(kvc_status_get(k, &st), 0);
    int open = 0;
    for (size_t i = 0; i < st.n_gates; i++)
        open |= strcmp(st.gates[i].name, "recorder_gate") == 0 && st.gates[i].confirmed &&
                strcmp(st.gates[i].how, "record") == 0;
    assert_true(open);
    kvc_close(k);
}

/* Wait until master i's log holds needle (fails the test after WAIT_MS). */
static void wait_log(cluster *c, int i, const char *needle)
{
    for (long long end = hx_now_ms() + WAIT_MS; !hx_log_contains(&c->hc.m[i], needle);) {
        if (hx_now_ms() > end) {
            hx_print_log(&c->hc.m[i]);
            fail_msg("master %d never logged \"%s\"", i, needle);
        }
        sleep_ms(50);
    }
}

/* The background fsck's schedule is the cluster's: fsck.last lives in the
 * shared ha.snapshot_dir, not in a master's data_dir, so the leader after a
 * failover goes on from what the last one wrote -- here a run due (the
 * test writes a 1970 start there), which it starts. */
static void test_ha_background_fsck_schedule_survives_a_failover(void **state)
{
    cluster *c = *state;
    char last[400], text[4096], own[400];
    snprintf(last, sizeof(last), "%s/fsck.last", c->hc.snapdir);
    FILE *fp = fopen(last, "w");
    assert_non_null(fp);
    fputs("1000\n", fp);
    fclose(fp);
    c->fsck_every_s = 86400;
    int leader = start_cluster_and_write(c, "kv/a", 5);
    wait_log(c, leader, "background fsck: ended: ");
    hx_read_text(last, text, sizeof(text));
    if (strtoull(text, NULL, 10) <= 1000) fail_msg("the shared fsck.last: %s", text);
    snprintf(own, sizeof(own), "%s/data/fsck.last", c->hc.m[leader].dir);
    assert_int_equal(access(own, F_OK), -1);

    fp = fopen(last, "w");
    assert_non_null(fp);
    fputs("1000\n", fp);
    fclose(fp);
    hx_kill(&c->hc.m[leader]);
    int next = wait_leader(c, leader);
    wait_log(c, next, "background fsck: started: ");
    wait_log(c, next, "background fsck: ended: ");
}

/* etcd back with its data wiped and no snapshot yet: the master that
 * applied the lost records refuses to start on the empty log (it would
 * begin an empty cluster, and the node's registration would delete its
 * data as orphans), naming data_dir/ha.applied; nothing of the node is
 * touched. Removing that file is the operator's way to start anew. */
static void test_ha_a_wiped_etcd_is_refused(void **state)
{
    cluster *c = *state;
    char applied[400], text[256], cmd[700];
    start_master(c, 0);
    assert_int_equal(wait_leader(c, -1), 0);
    node_and_write(c, 0, "kv/w", 5);
    uint64_t want = applied_of(c, 0);
    snprintf(applied, sizeof(applied), "%s/data/ha.applied", c->hc.m[0].dir);
    for (long long end = hx_now_ms() + WAIT_MS;; sleep_ms(50)) {
        hx_read_text(applied, text, sizeof(text));
        if (strtoull(text, NULL, 10) >= want) break;
        if (hx_now_ms() > end) fail_msg("%s holds \"%s\", not seq %llu", applied, text,
                                        (unsigned long long)want);
    }
    assert_int_equal(hx_stop(&c->hc.m[0]), 0);
    assert_int_equal(etcd_fixture_kill(&c->hc.etcd, 0), 0);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->hc.etcd.m[0].data_dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(etcd_fixture_restart(&c->hc.etcd, 0, 20000), 0);
    assert_int_equal(write_config(c, 0), 0);
    int status = hx_run_to_exit(&c->hc.m[0], WAIT_MS);
    if (status != 1 ||
        !hx_log_contains(&c->hc.m[0], "etcd lost records (wiped, or restored from an older "
                                      "backup)") ||
        !hx_log_contains(&c->hc.m[0], "ha.applied to start on what etcd holds")) {
        hx_print_log(&c->hc.m[0]);
        fail_msg("a master on a wiped etcd: exit %d", status);
    }
    hx_read_text(applied, text, sizeof(text));
    if (strtoull(text, NULL, 10) < want) fail_msg("the refusal changed %s: %s", applied, text);
    /* the operator's choice: a new cluster */
    assert_int_equal(unlink(applied), 0);
    start_master(c, 0);
    assert_int_equal(wait_leader(c, -1), 0);
}

/* Waits until master i's /health contains needle (any status). */
static void wait_health(cluster *c, int i, const char *needle)
{
    char *body = NULL;
    for (long long end = hx_now_ms() + WAIT_MS;; sleep_ms(100)) {
        int code = hx_http_get(&c->hc.m[i], "/health", &body);
        int found = code > 0 && body != NULL && strstr(body, needle) != NULL;
        if (hx_now_ms() > end && !found) {
            hx_print_log(&c->hc.m[i]);
            fail_msg("master %d's /health never said \"%s\"; last: %d %s", i, needle, code,
                     body ? body : "");
        }
        free(body);
        body = NULL;
        if (found) return;
    }
}

/* etcd wiped under a running cluster, then restored from its data: the
 * standbys find the log's head behind what they applied, leave the election
 * and say why and what brings them back (/health), and once etcd holds the
 * log again they follow on -- no restart -- and one of them takes over from
 * the old leader (which refused the wiped etcd), with every write. */
static void test_ha_standbys_follow_again_once_etcd_is_restored(void **state)
{
    cluster *c = *state;
    char saved[600], cmd[1400];
    int leader = start_cluster_and_write(c, "kv/r", 20);
    uint64_t want = applied_of(c, leader);
    for (int i = 0; i < N_MASTERS; i++)
        for (long long end = hx_now_ms() + WAIT_MS; i != leader && applied_of(c, i) < want;
             sleep_ms(50))
            if (hx_now_ms() > end) fail_msg("standby %d did not catch up", i);
    const char *data = c->hc.etcd.m[0].data_dir;
    snprintf(saved, sizeof(saved), "%s.saved", data);
    assert_int_equal(etcd_fixture_kill(&c->hc.etcd, 0), 0);
    assert_int_equal(rename(data, saved), 0);
    assert_int_equal(etcd_fixture_restart(&c->hc.etcd, 0, 20000), 0); /* empty */
    for (int i = 0; i < N_MASTERS; i++)
        if (i != leader) wait_health(c, i, "waiting for etcd to hold the log again");
    hx_kill(&c->hc.m[leader]); /* it refuses the wiped etcd, or is about to */
    assert_int_equal(etcd_fixture_kill(&c->hc.etcd, 0), 0);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", data);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(rename(saved, data), 0);
    assert_int_equal(etcd_fixture_restart(&c->hc.etcd, 0, 20000), 0); /* restored */
    int next = wait_leader(c, leader);
    for (int i = 0; i < N_MASTERS; i++)
        if (i != leader && i != next) wait_health(c, i, "ok");
    assert_true(hx_log_contains(&c->hc.m[next], "etcd holds the log again"));
    wait_node(c, next);
    kvc *k = client_of(c, next);
    assert_all_present(k, "kv/r", 0, 20);
    put_n(k, "kv/s", 0, 5);
    assert_all_present(k, "kv/s", 0, 5);
    kvc_close(k);
}

/* etcd wiped after a snapshot: the master's start replays after the
 * snapshot's seq, which the empty log does not reach. The refusal names
 * the snapshot and data_dir/ha.applied, and the ways out. */
static void test_ha_a_wiped_etcd_after_a_snapshot_is_refused_naming_both(void **state)
{
    cluster *c = *state;
    char cmd[700];
    c->every_records = 10;
    start_master(c, 0);
    assert_int_equal(wait_leader(c, -1), 0);
    node_and_write(c, 0, "kv/w", 30);
    wait_snapshot(c, 0);
    assert_int_equal(hx_stop(&c->hc.m[0]), 0);
    assert_int_equal(etcd_fixture_kill(&c->hc.etcd, 0), 0);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->hc.etcd.m[0].data_dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(etcd_fixture_restart(&c->hc.etcd, 0, 20000), 0);
    assert_int_equal(write_config(c, 0), 0);
    int status = hx_run_to_exit(&c->hc.m[0], WAIT_MS);
    if (status != 1 || !hx_log_contains(&c->hc.m[0], "etcd lost records") ||
        !hx_log_contains(&c->hc.m[0], "/data/ha.applied") ||
        !hx_log_contains(&c->hc.m[0], "but the newest snapshot ") ||
        !hx_log_contains(&c->hc.m[0], "restore etcd; to start anew on what etcd holds instead, "
                                      "move the snapshots in ha.snapshot_dir")) {
        hx_print_log(&c->hc.m[0]);
        fail_msg("a master on a wiped etcd after a snapshot: exit %d", status);
    }
}

/* The snapshot RPC on master i: its status, and the seq of the snapshot
 * it answers with (0 when it failed); the error into err. */
static int snapshot_on(cluster *c, int i, uint64_t *seq, char *err, size_t errlen)
{
    RpcResponse *resp = NULL;
    raw_call(&c->hc.m[i], HOST_SERVICE__HOST_SERVICE_ADMIN, ADMIN_METHOD__ADMIN_SNAPSHOT, "",
             &resp);
    int status = resp->status;
    snprintf(err, errlen, "%s", resp->error ? resp->error : "");
    *seq = 0;
    if (status == 0) {
        SnapshotResponse *sr = snapshot_response__unpack(NULL, resp->body.len, resp->body.data);
        assert_non_null(sr);
        *seq = sr->seq;
        snapshot_response__free_unpacked(sr, NULL);
    }
    rpc_response__free_unpacked(resp, NULL);
    return status;
}

/* A new leader with nothing applied since the previous leader's snapshot
 * (the shared directory holds one at the seq it applied, which it did not
 * write itself) answers a snapshot with that one, instead of a writer that
 * fails SMP_EEXIST on it. */
static void test_ha_new_leader_answers_a_snapshot_of_its_seq_with_the_shared_one(void **state)
{
    cluster *c = *state;
    char err[600];
    uint64_t seq = 0, again = 0;
    int leader = start_cluster_and_write(c, "kv/n", 10);
    assert_int_equal(snapshot_on(c, leader, &seq, err, sizeof(err)), 0);
    assert_true(seq > 0);
    for (int i = 0; i < N_MASTERS; i++)
        for (long long end = hx_now_ms() + WAIT_MS; i != leader && applied_of(c, i) < seq;
             sleep_ms(50))
            if (hx_now_ms() > end) fail_msg("standby %d did not catch up", i);
    hx_kill(&c->hc.m[leader]);
    int next = wait_leader(c, leader);
    uint64_t applied = applied_of(c, next);
    int rc = snapshot_on(c, next, &again, err, sizeof(err));
    if (applied == seq && (rc != 0 || again != seq)) {
        hx_print_log(&c->hc.m[next]);
        fail_msg("a snapshot on the new leader at seq %llu: status %d (%s), seq %llu",
                 (unsigned long long)seq, rc, err, (unsigned long long)again);
    }
    assert_int_equal(rc, 0); /* applied > seq: a new one was written */
    assert_false(hx_log_contains(&c->hc.m[next], "SMP_EEXIST"));
}

/* Holds the relay 1.5 s the first time a client sends a LeaseGrant of a
 * 2 s TTL: the gRPC message of LeaseGrantRequest{ttl: 2} is the 5-byte
 * prefix (uncompressed, length 2) and field 1 = 2. gRPC sends every call of
 * a process to one member on one connection, so the bytes, not the
 * connection, tell the grant. */
static void stall_lease_grant(void *ctx, unsigned conn, unsigned long long at, unsigned char *buf,
                              size_t n)
{
    static const unsigned char grant[] = {0, 0, 0, 0, 2, 0x08, 2};
    (void)conn;
    (void)at;
    atomic_int *stalled = ctx;
    for (size_t i = 0; !atomic_load(stalled) && i + sizeof(grant) <= n; i++)
        if (memcmp(buf + i, grant, sizeof(grant)) == 0) {
            atomic_store(stalled, 1);
            sleep_ms(1500);
        }
}

/* etcd answers the lease grant of a starting master after the call's
 * deadline (a loaded machine: the grant is a raft write with an fsync):
 * the master asks again, says so, and leads. A grant whose answer was
 * lost is a lease with no key, which etcd drops after its TTL. The master
 * reaches etcd through a relay that holds the grant's bytes past the
 * 500 ms deadline of a 2 s lease. */
static void test_ha_master_asks_again_for_a_lease_granted_late(void **state)
{
    cluster *c = *state;
    fault_proxy *proxy = NULL;
    char relay[64];
    atomic_int stalled = 0;
    assert_int_equal(fault_proxy_start(etcd_fixture_endpoints(&c->hc.etcd), &proxy, relay,
                                       sizeof(relay)), 0);
    fault_proxy_set_filter(proxy, stall_lease_grant, &stalled);
    c->hc.lease_ttl_s = 2;
    c->hc.etcd_endpoints[0] = relay;
    start_master(c, 0);
    assert_true(atomic_load(&stalled));
    assert_true(hx_log_contains(&c->hc.m[0], "asking etcd for a lease again"));
    assert_int_equal(wait_leader(c, -1), 0);
    node_and_write(c, 0, "kv/late", 5);
    assert_all_present_any_leader(c, "kv/late", 0, 5);
    hx_kill(&c->hc.m[0]);
    fault_proxy_stop(proxy);
}

/* Snapshots go to the shared directory and the OpLog below them is
 * deleted; a standby started afterwards from an empty data_dir loads the
 * snapshot, follows the rest, and can lead with everything. */
static void test_ha_new_standby_after_oplog_gc_bootstraps_from_the_snapshot(void **state)
{
    cluster *c = *state;
    c->every_records = 40;
    start_master(c, 0);
    start_master(c, 1);
    int leader = wait_leader(c, 2);
    node_and_write(c, leader, "kv/a", 150);
    /* The log's first records are gone from etcd once a snapshot is durable. */
    wait_snapshot(c, leader);

    start_master(c, 2); /* empty data_dir: the snapshot, then the log */
    wait_role(c, 2, "standby");
    uint64_t want = applied_of(c, leader);
    for (long long end = hx_now_ms() + WAIT_MS; applied_of(c, 2) < want;) {
        if (hx_now_ms() > end) fail_msg("new standby did not catch up");
        sleep_ms(50);
    }
    assert_true(hx_log_contains(&c->hc.m[2], "applied seq"));
    hx_kill(&c->hc.m[leader]);
    hx_kill(&c->hc.m[1 - leader]);
    assert_int_equal(wait_leader(c, -1), 2);
    wait_node(c, 2);
    kvc *k = client_of(c, 2);
    assert_all_present(k, "kv/a", 0, 150);
    kvc_close(k);
}

/* A standby cut off from etcd while the log moves on: the leader snapshots,
 * deletes the records below each snapshot and compacts etcd's history one
 * truncation behind, so when the standby reaches etcd again the history
 * its watch needs is gone. It restarts itself from the newest snapshot
 * instead of failing, catches up, and leads with every record. (A paused
 * standby does not show this: etcd keeps the events of a watch that stopped
 * reading in its own memory, so it resumes from them.) The cut is a relay
 * between the standby and etcd that drops its connections. */
static void test_ha_standby_left_behind_by_gc_restarts_from_the_snapshot(void **state)
{
    enum { N_RECORDS = 200, RECORD_BYTES = 512 };
    cluster *c = *state;
    fault_proxy *proxy = NULL;
    char relay[64];
    assert_int_equal(fault_proxy_start(etcd_fixture_endpoints(&c->hc.etcd), &proxy, relay,
                                       sizeof(relay)), 0);
    c->every_records = 40;
    c->hc.etcd_endpoints[1] = relay; /* m1 reaches etcd through the relay only */
    start_master(c, 0);
    assert_int_equal(wait_leader(c, -1), 0);
    start_master(c, 1);
    wait_role(c, 1, "standby");
    fault_proxy_cut(proxy, 1);

    char body[RECORD_BYTES];
    RpcResponse *resp = NULL;
    for (int i = 0; i < N_RECORDS; i++) {
        memset(body, 'a' + i % 26, sizeof(body));
        raw_call_n(&c->hc.m[0], RECORDER_SERVICE, RECORDER_SET_NEXT, body, sizeof(body), &resp);
        assert_int_equal(resp->status, 0);
        rpc_response__free_unpacked(resp, NULL);
    }
    fault_proxy_cut(proxy, 0);

    for (long long end = hx_now_ms() + WAIT_MS;
         !hx_log_contains(&c->hc.m[1], "garbage-collected past this standby");) {
        if (hx_now_ms() > end) fail_msg("the standby did not find its records gone (%s)",
                                       c->hc.m[1].log);
        sleep_ms(100);
    }
    uint64_t want = applied_of(c, 0);
    for (long long end = hx_now_ms() + WAIT_MS; applied_or_0(c, 1) < want;) {
        if (hx_now_ms() > end) fail_msg("the restarted standby did not catch up");
        sleep_ms(50);
    }
    wait_role(c, 1, "standby");
    hx_kill(&c->hc.m[0]);
    assert_int_equal(wait_leader(c, 0), 1);
    raw_call(&c->hc.m[1], RECORDER_SERVICE, RECORDER_LIST, "", &resp);
    assert_int_equal(resp->status, 0);
    size_t off = 0;
    int n = 0;
    for (; off + 4 <= resp->body.len; n++) {
        const uint8_t *p = resp->body.data + off;
        uint32_t len = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                       (uint32_t)p[3] << 24;
        assert_int_equal(len, RECORD_BYTES);
        assert_true(off + 4 + len <= resp->body.len);
        memset(body, 'a' + n % 26, sizeof(body));
        assert_memory_equal(p + 4, body, RECORD_BYTES);
        off += 4 + len;
    }
    assert_int_equal(n, N_RECORDS);
    assert_int_equal(off, resp->body.len);
    rpc_response__free_unpacked(resp, NULL);
    hx_kill(&c->hc.m[1]);
    fault_proxy_stop(proxy);
}

/* The gate of a record type some master cannot replay stays closed: the
 * leader refuses the type (SMP_EGATE), status names the master that blocks
 * it, and `gate confirm` is refused naming it. Once that master runs the
 * plugin too, the gate opens by command -- durably: a new leader after a
 * failover still has it open, and the type is written. */
static void test_ha_gate_opens_by_command_once_every_master_replays(void **state)
{
    cluster *c = *state;
    c->with_recorder[0] = c->with_recorder[1] = RECORDER_GATED;
    c->with_recorder[2] = RECORDER_NONE;
    start_master(c, 0);
    assert_int_equal(wait_leader(c, -1), 0); /* alone: m0 leads, it has the plugin */
    start_master(c, 1);
    start_master(c, 2);
    wait_role(c, 1, "standby");
    wait_role(c, 2, "standby");

    RpcResponse *resp = NULL;
    raw_call(&c->hc.m[0], RECORDER_SERVICE, RECORDER_SET_NEXT, "closed", &resp);
    assert_int_equal(resp->status, SMP_EGATE);
    rpc_response__free_unpacked(resp, NULL);

    kvc *k = client_of(c, 0);
    kvc_status st;
    kvc_gate g;
    int blocked = 0;
    for (long long end = hx_now_ms() + WAIT_MS; !blocked && hx_now_ms() < end;) {
        assert_int_equal(kvc_status_get(k, &st), 0);
        for (size_t i = 0; i < st.n_gates; i++)
            if (strcmp(st.gates[i].name, "recorder_gate") == 0 && !st.gates[i].confirmed &&
                strstr(st.gates[i].blocked_by, "master m2 cannot replay type 20 (RECORDER_SET)"))
                blocked = 1;
        if (!blocked) sleep_ms(100); /* m2's registry entry comes within a refresh */
    }
    assert_true(blocked);
    assert_int_equal(kvc_gate_confirm(k, "recorder_gate", &g), SMP_EGATE);
    assert_non_null(strstr(kvc_error(k), "master m2 cannot replay type 20"));
    assert_int_equal(kvc_gate_confirm(k, "no_such_gate", &g), SMP_ENOTFOUND);
    kvc_close(k);

    /* "Upgrade" m2: it runs the plugin now. */
    assert_int_equal(hx_stop(&c->hc.m[2]), 0);
    c->with_recorder[2] = RECORDER_GATED;
    start_master(c, 2);
    wait_role(c, 2, "standby");
    k = client_of(c, 0);
    int rc = SMP_EGATE;
    for (long long end = hx_now_ms() + WAIT_MS; rc == SMP_EGATE && hx_now_ms() < end;) {
        rc = kvc_gate_confirm(k, "recorder_gate", &g);
        if (rc == SMP_EGATE) sleep_ms(100); /* until m2's new entry is read back */
    }
    assert_int_equal(rc, 0);
    assert_true(g.confirmed);
    assert_string_equal(g.how, "record");
    kvc_close(k);
    raw_call(&c->hc.m[0], RECORDER_SERVICE, RECORDER_SET_NEXT, "open", &resp);
    assert_int_equal(resp->status, 0);
    rpc_response__free_unpacked(resp, NULL);

    hx_kill(&c->hc.m[0]);
    int next = wait_leader(c, 0);
    assert_recorder_gate_open_after_failover(c, next, "after failover");
}

int main(void)
{
    /* HA_TEST=pattern runs only the matching tests (cmocka's filter). */
    if (getenv("HA_TEST") != NULL) cmocka_set_test_filter(getenv("HA_TEST"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ha_standby_redirects_to_the_leader, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ha_leader_sigkill_loses_no_acknowledged_write, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ha_new_leader_holds_a_lookup_until_the_node_registers,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_ha_leader_exit_is_noticed_through_its_connection,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_ha_stopped_leader_exits_even_when_its_lease_is_revoked,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_ha_leader_sigstop_is_deposed_and_never_writes_again,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_ha_a_paused_master_is_passed_over_by_clients, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ha_standby_stops_visibly_on_an_unknown_record_type,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_ha_etcd_member_sigkill_keeps_the_cluster_writable,
                                        setup_three_etcd_members, teardown),
        cmocka_unit_test_setup_teardown(test_ha_gate_opens_by_command_once_every_master_replays,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_ha_etcd_member_sigstop_keeps_the_cluster_writable,
                                        setup_three_etcd_members, teardown),
        cmocka_unit_test_setup_teardown(test_ha_cluster_comes_back_after_a_long_etcd_outage, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ha_background_fsck_schedule_survives_a_failover,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_ha_a_wiped_etcd_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_ha_a_wiped_etcd_after_a_snapshot_is_refused_naming_both, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ha_standbys_follow_again_once_etcd_is_restored, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_ha_new_leader_answers_a_snapshot_of_its_seq_with_the_shared_one, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ha_master_starts_while_etcd_is_silent, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ha_master_asks_again_for_a_lease_granted_late,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_ha_new_standby_after_oplog_gc_bootstraps_from_the_snapshot, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_ha_standby_left_behind_by_gc_restarts_from_the_snapshot, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
