/* test_tenant_local.c -- nodes dedicated to a tenant, and the co-located
 * shared-memory path handed out by uid (issue 19).
 *
 * A master with authentication on and no embedded node; three store_node
 * processes: "na" dedicated to tenant a (its local socket hands the segment
 * to this test's uid), "nb" dedicated to tenant b (it hands the segment only
 * to uid 65534, not to this test), and "shared". Puts of a land on na (or
 * shared), b's on nb (or shared), the admin's tenant only on shared, and a
 * put of a that only nb could hold is refused for room with nothing placed.
 * Replica locations name a dedicated node's socket, never a segment path,
 * and name nothing to map for a shared node. A process of tenant a's uid
 * maps na's segment through the socket and reads zero-copy (the local
 * transport succeeds; weight_get copies every byte from the mapping); this
 * process is refused nb's segment (the node's cause names its uid) and
 * still writes and reads b's objects through the data port with tickets.
 * Run as root, a child that drops to uid 65534 is refused na's segment,
 * cannot open na's segment file by path, and maps nb's, finding b's bytes.
 * The embedded node dedicated by config (node.tenant) does the same.
 * Bad store_node flags are refused naming the cause with nothing started,
 * and a node restarted as dedicated to b while its segment holds a's bytes
 * is refused by the master (a's bytes come back when it returns as a's). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "auth_fixture.h"
#include "seg_local.h"
#include "weight_model.h"

#define OTHER_UID 65534u /* nb's only local peer; the root child becomes it */
#define MiB (1024ull * 1024ull)

typedef struct cluster {
    hx_node na, nb, shared;
    char sock_a[400], sock_b[400];
} cluster;

static cluster g;

static void start_na(wr_fixture *f, const char *tenant)
{
    char peer[32];
    snprintf(peer, sizeof(peer), "uid:%u", (unsigned)getuid());
    const char *args[] = {"--tenant", tenant, "--local-socket", g.sock_a, "--local-peer", peer, NULL};
    setenv("WEIGHT_TOKEN", af_token(AF_ADMIN), 1); /* the node's credential */
    assert_int_equal(hx_node_start_args(&f->m, &g.na, "na", 16 * MiB, args), 0);
}

/* The master and the three nodes, connected as the admin. */
static void start_cluster(wr_fixture *f)
{
    char peer[32];
    memset(&g, 0, sizeof(g));
    /* the YAML after auth: ends that section: a top-level node: key */
    af_start_with(f, "tenant-local", "node:\n  embedded: false\n");
    /* other users may walk to the sockets (and find the 0600 segment files) */
    assert_int_equal(chmod(f->m.dir, 0711), 0);
    snprintf(g.sock_a, sizeof(g.sock_a), "%s/na.sock", f->m.dir);
    snprintf(g.sock_b, sizeof(g.sock_b), "%s/nb.sock", f->m.dir);
    start_na(f, "a");
    snprintf(peer, sizeof(peer), "uid:%u", OTHER_UID);
    const char *bargs[] = {"--tenant", "b", "--local-socket", g.sock_b, "--local-peer", peer, NULL};
    assert_int_equal(hx_node_start_args(&f->m, &g.nb, "nb", 32 * MiB, bargs), 0);
    assert_int_equal(hx_node_start(&f->m, &g.shared, "shared", 4 * MiB), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 3, 20000), 0);
}

static void stop_cluster(void)
{
    hx_node_kill(&g.na);
    hx_node_kill(&g.nb);
    hx_node_kill(&g.shared);
}

static void fill(uint8_t *buf, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(seed * 131u + i * 7u + (i >> 9));
}

/* Put n bytes of pattern seed under key as the connected tenant (asserts). */
static void put(wr_fixture *f, const char *key, size_t n, unsigned seed)
{
    uint8_t *buf = malloc(n);
    assert_non_null(buf);
    fill(buf, n, seed);
    int rc = kvc_put_bytes(f->kv, key, buf, n, SMP_DATA_KV, "", 0, NULL);
    if (rc != 0) fail_msg("put %s: %d %s", key, rc, kvc_error(f->kv));
    free(buf);
}

/* Read key back and compare with pattern seed; returns kvc_get_into's rc. */
static int read_back(wr_fixture *f, const char *key, size_t n, unsigned seed)
{
    uint8_t *want = malloc(n), *got = malloc(n);
    uint64_t len = 0;
    assert_non_null(want);
    assert_non_null(got);
    fill(want, n, seed);
    int rc = kvc_get_into(f->kv, key, got, n, &len, 1);
    if (rc == 0) {
        assert_int_equal(len, n);
        assert_memory_equal(got, want, n);
    }
    free(want);
    free(got);
    return rc;
}

/* The one memory replica of key (asserts there is exactly one). */
static kvc_replica replica_of(wr_fixture *f, const char *key)
{
    kvc_object obj;
    int rc = kvc_get(f->kv, key, &obj);
    if (rc != 0) fail_msg("get replicas %s: %d %s", key, rc, kvc_error(f->kv));
    assert_int_equal(obj.n_replicas, 1);
    assert_int_equal(obj.replicas[0].kind, SMP_REPLICA_MEMORY);
    return obj.replicas[0];
}

/* The cluster, then key (n bytes of pattern seed) put as who: its replica. */
static kvc_replica start_and_put(wr_fixture *f, af_who who, const char *key, size_t n, unsigned seed)
{
    start_cluster(f);
    af_as(f, who);
    put(f, key, n, seed);
    return replica_of(f, key);
}

/* A libweightclient store presenting who's token, with 4 KiB payload
 * objects (one per tensor of the small model). */
static weight_store *open_store(wr_fixture *f, af_who who)
{
    weight_store *s = NULL;
    char err[512];
    if (weight_store_open_token(f->m.socket, "", af_token(who), NULL, &s, err, sizeof err) != 0)
        fail_msg("weight_store_open_token: %s", err);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_PAYLOAD_BYTES, 4096), 0);
    return s;
}

static void test_tenant_placement_keeps_dedicated_nodes_to_their_tenant(void **state)
{
    wr_fixture *f = *state;
    char key[64];
    start_cluster(f);

    af_as(f, AF_A_WRITER);
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "a/p%d", i);
        put(f, key, 1 * MiB, (unsigned)i);
        kvc_replica r = replica_of(f, key);
        /* na has the most room of the nodes open to a */
        assert_string_equal(r.node, "na");
    }
    af_as(f, AF_B_WRITER);
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "b/q%d", i);
        put(f, key, 1 * MiB, 100u + (unsigned)i);
        assert_string_equal(replica_of(f, key).node, "nb");
    }
    /* the admin's tenant (ops) has no dedicated node: only the shared one */
    af_as(f, AF_ADMIN);
    put(f, "ops/z", 1 * MiB, 7);
    assert_string_equal(replica_of(f, "ops/z").node, "shared");

    /* 20 MiB fits only in nb (28 MiB free): refused for a, nothing placed */
    af_as(f, AF_A_WRITER);
    uint8_t *big = calloc(1, 20 * MiB);
    assert_non_null(big);
    assert_int_equal(kvc_put_bytes(f->kv, "a/big", big, 20 * MiB, SMP_DATA_KV, "", 0, NULL),
                     SMP_ENOSPC);
    free(big);
    assert_non_null(strstr(kvc_error(f->kv), "open to tenant 'a' (1 node(s) dedicated to other "
                                             "tenants excluded)"));
    int exists = 1;
    assert_int_equal(kvc_exists(f->kv, "a/big", &exists), 0);
    assert_false(exists);
    af_as(f, AF_B_WRITER);
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "b/q%d", i);
        assert_int_equal(read_back(f, key, 1 * MiB, 100u + (unsigned)i), 0);
    }
}

static void test_tenant_local_peer_maps_its_dedicated_segment_zero_copy(void **state)
{
    wr_fixture *f = *state;
    /* the location names na's socket, not its segment file */
    kvc_replica r = start_and_put(f, AF_A_WRITER, "a/auto", 256 * 1024, 3);
    assert_string_equal(r.local_socket, g.sock_a);
    assert_string_equal(r.segment_path, "");

    /* the local transport never touches the data port: it must map */
    kvc_set_transport(f->kv, KVC_LOCAL);
    put(f, "a/local", 256 * 1024, 4);
    assert_int_equal(read_back(f, "a/local", 256 * 1024, 4), 0);
    assert_int_equal(read_back(f, "a/auto", 256 * 1024, 3), 0);
    kvc_set_transport(f->kv, KVC_AUTO);

    /* libweightclient: every byte of the revision copied from the mapping */
    weight_store *s = open_store(f, AF_A_WRITER);
    wx_tensor t[3] = {{.name = "w0", .shape = {32, 32}},
                      {.name = "w1", .shape = {32, 32}},
                      {.name = "w2", .shape = {32, 32}}};
    wx_model_fill(t, 3, 11);
    weight_identity id;
    assert_int_equal(weight_identity_set(&id, "", "ns", "m", "r1", 1), 0);
    wx_put_model(s, &id, t, 3);
    assert_int_equal(wx_get_and_compare(s, &id, t, 3), 3 * sizeof(t[0].data));
    weight_store_close(s);
    assert_false(hx_file_contains(g.na.log, "refused"));
}

/* node.tenant dedicates the embedded node by config, as --tenant does a
 * store_node: a's objects land on it and are located by its local socket
 * (never the segment file), and this process, its listed peer, maps them
 * with the local transport; b has no node open to it: refused for room,
 * nothing placed. */
static void test_tenant_embedded_node_dedicated_by_config(void **state)
{
    wr_fixture *f = *state;
    char extra[256], sock[400];
    /* a node: section replaces the harness's: keep the segment in the
     * test's directory (relative paths resolve against the config's) */
    snprintf(extra, sizeof(extra),
             "node:\n  segment_dir: shm\n  segment_bytes: 67108864\n  tenant: a\n"
             "  local_socket: emb.sock\n  local_peers: [\"uid:%u\"]\n",
             (unsigned)getuid());
    af_start_with(f, "tenant-embedded", extra);
    snprintf(sock, sizeof(sock), "%s/emb.sock", f->m.dir);

    af_as(f, AF_A_WRITER);
    put(f, "a/e0", 256 * 1024, 21);
    kvc_replica r = replica_of(f, "a/e0");
    assert_string_equal(r.node, "embedded");
    assert_string_equal(r.local_socket, sock);
    assert_string_equal(r.segment_path, "");
    kvc_set_transport(f->kv, KVC_LOCAL);
    put(f, "a/e1", 256 * 1024, 22);
    assert_int_equal(read_back(f, "a/e1", 256 * 1024, 22), 0);
    assert_int_equal(read_back(f, "a/e0", 256 * 1024, 21), 0);
    kvc_set_transport(f->kv, KVC_AUTO);

    af_as(f, AF_B_WRITER);
    uint8_t small[4096] = {0};
    assert_int_equal(kvc_put_bytes(f->kv, "b/e", small, sizeof(small), SMP_DATA_KV, "", 0, NULL),
                     SMP_ENOSPC);
    /* told that no room would help (it was told to raise node.segment_bytes) */
    if (strstr(kvc_error(f->kv), "no node that is up takes objects of tenant 'b': the 1 node(s) "
                                 "up are dedicated to other tenants") == NULL ||
        strstr(kvc_error(f->kv), "segment_bytes") != NULL)
        fail_msg("put with no node open to the tenant: %s", kvc_error(f->kv));
    int exists = 1;
    assert_int_equal(kvc_exists(f->kv, "b/e", &exists), 0);
    assert_false(exists);
}

/* As uid OTHER_UID (a forked child of a root test): refused na's segment,
 * unable to open its file, given nb's and finding b/q0's bytes at r's
 * offset. Exits 0 when all holds, else the number of the failed check. */
static void other_uid_child(const char *seg_a_path, const kvc_replica *r)
{
    int fd = -1;
    struct stat st;
    char err[800];
    if (setgid(OTHER_UID) != 0 || setuid(OTHER_UID) != 0) _exit(10);
    if (seg_local_fetch(g.sock_a, &fd, &st, err, sizeof err) != SMP_EFORBIDDEN) _exit(11);
    if (strstr(err, "is not a local peer of tenant a on node na") == NULL) _exit(12);
    errno = 0;
    if (open(seg_a_path, O_RDONLY) >= 0 || errno != EACCES) _exit(13);
    if (seg_local_fetch(g.sock_b, &fd, &st, err, sizeof err) != SMP_OK) _exit(14);
    uint8_t *base = mmap(NULL, (size_t)(r->offset + r->length), PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) _exit(15);
    uint8_t *want = malloc(r->length);
    if (want == NULL) _exit(16);
    fill(want, r->length, 100u);
    _exit(memcmp(base + r->offset, want, r->length) == 0 ? 0 : 17);
}

static void test_tenant_other_uid_is_refused_the_mapping_and_reads_through_tickets(void **state)
{
    wr_fixture *f = *state;
    char err[800];
    start_cluster(f);
    af_as(f, AF_B_WRITER);
    /* the mapping is refused (this uid is not nb's peer): the put writes
     * through the data port with its ticket, and reads come back that way */
    put(f, "b/q0", 1 * MiB, 100u);
    assert_int_equal(read_back(f, "b/q0", 1 * MiB, 100u), 0);
    kvc_replica r = replica_of(f, "b/q0");
    assert_string_equal(r.local_socket, g.sock_b);
    assert_string_equal(r.segment_path, "");
    kvc_set_transport(f->kv, KVC_LOCAL);
    assert_int_equal(read_back(f, "b/q0", 1 * MiB, 100u), SMP_ENOTFOUND);
    snprintf(err, sizeof(err), "uid %u gid %u is not a local peer of tenant b on node nb",
             (unsigned)geteuid(), (unsigned)getegid());
    assert_non_null(strstr(kvc_error(f->kv), err));
    kvc_set_transport(f->kv, KVC_AUTO);
    assert_true(hx_file_contains(g.nb.log, "refused: uid"));
    int fd = -1;
    struct stat st;
    assert_int_equal(seg_local_fetch(g.sock_b, &fd, &st, err, sizeof err), SMP_EFORBIDDEN);
    assert_int_equal(fd, -1);

    /* libweightclient: every byte through the data port, none mapped */
    weight_store *s = open_store(f, AF_B_WRITER);
    wx_tensor t[2] = {{.name = "w0", .shape = {32, 32}}, {.name = "w1", .shape = {32, 32}}};
    wx_model_fill(t, 2, 12);
    weight_identity id;
    assert_int_equal(weight_identity_set(&id, "", "ns", "m", "r1", 1), 0);
    wx_put_model(s, &id, t, 2);
    assert_int_equal(wx_get_and_compare(s, &id, t, 2), 0);
    weight_store_close(s);

    if (getuid() != 0) {
        print_message("skipped the other-uid child: it needs root to become uid %u\n", OTHER_UID);
        return;
    }
    char seg_a[400];
    snprintf(seg_a, sizeof(seg_a), "%s/na.seg", g.na.segment_dir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) other_uid_child(seg_a, &r);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_tenant_shared_node_names_nothing_to_map_with_auth_on(void **state)
{
    wr_fixture *f = *state;
    kvc_replica r = start_and_put(f, AF_ADMIN, "ops/z", 64 * 1024, 9);
    assert_string_equal(r.node, "shared");
    assert_string_equal(r.segment_path, "");
    assert_string_equal(r.local_socket, "");
    kvc_set_transport(f->kv, KVC_LOCAL);
    assert_int_equal(read_back(f, "ops/z", 64 * 1024, 9), SMP_ENOTFOUND);
    assert_non_null(strstr(kvc_error(f->kv), "names neither its file nor a local socket"));
    kvc_set_transport(f->kv, KVC_AUTO);
    assert_int_equal(read_back(f, "ops/z", 64 * 1024, 9), 0);
}

/* Run store_node with args after the usual ones; its exit status, its
 * stderr in out. */
static int run_node(wr_fixture *f, const char *id, const char *const *args, char *out, size_t cap)
{
    char log[400];
    hx_node n;
    snprintf(log, sizeof(log), "%s/node-%s.log", f->m.dir, id);
    assert_int_equal(hx_node_start_args(&f->m, &n, id, 4 * MiB, args), 0);
    int status = 0;
    assert_int_equal(waitpid(n.pid, &status, 0), n.pid);
    FILE *lf = fopen(log, "r");
    assert_non_null(lf);
    size_t len = fread(out, 1, cap - 1, lf);
    out[len] = '\0';
    fclose(lf);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void test_tenant_node_flags_refused_naming_the_cause(void **state)
{
    wr_fixture *f = *state;
    char out[4096], sock[400], plain[400], seg[400];
    struct stat st;
    start_cluster(f);
    snprintf(sock, sizeof(sock), "%s/bad.sock", f->m.dir);
    struct {
        const char *id;
        const char *args[8];
        const char *says;
    } cases[] = {
        {"bad1", {"--tenant", "../x", "--local-socket", sock, "--local-peer", "uid:0", NULL},
         "--tenant: \"../x\" is not a tenant"},
        {"bad2", {"--tenant", "a", "--local-socket", sock, "--local-peer", "user:0", NULL},
         "--local-peer user:0: expected uid:N or gid:N"},
        {"bad3", {"--tenant", "a", "--local-socket", sock, "--local-peer", "uid:12x", NULL},
         "--local-peer uid:12x: expected uid:N or gid:N"},
        {"bad4", {"--local-socket", sock, "--local-peer", "uid:0", NULL}, "they need --tenant"},
        {"bad5", {"--tenant", "a", "--local-socket", sock, NULL},
         "needs --local-socket PATH and at least one --local-peer"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(run_node(f, cases[i].id, cases[i].args, out, sizeof(out)), 2);
        if (strstr(out, cases[i].says) == NULL) fail_msg("%s: %s", cases[i].id, out);
        snprintf(seg, sizeof(seg), "%s/nodes/%s.seg", f->m.dir, cases[i].id);
        assert_int_not_equal(stat(seg, &st), 0); /* nothing started */
        assert_int_not_equal(stat(sock, &st), 0);
    }
    /* a socket path that is a file: the node stops, the file is untouched */
    snprintf(plain, sizeof(plain), "%s/plain", f->m.dir);
    FILE *pf = fopen(plain, "w");
    assert_non_null(pf);
    fputs("keep", pf);
    assert_int_equal(fclose(pf), 0);
    const char *args[] = {"--tenant", "a", "--local-socket", plain, "--local-peer", "uid:0", NULL};
    assert_int_equal(run_node(f, "bad6", args, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "exists and is not a socket"));
    assert_true(hx_file_contains(plain, "keep"));
    /* another node's socket: refused, and na keeps serving it */
    const char *args2[] = {"--tenant", "a", "--local-socket", g.sock_a, "--local-peer", "uid:0", NULL};
    assert_int_equal(run_node(f, "bad7", args2, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "another process listens there"));
    int fd = -1;
    assert_int_equal(seg_local_fetch(g.sock_a, &fd, &st, out, sizeof(out)), SMP_OK);
    close(fd);
    kvc_status ks;
    assert_int_equal(kvc_status_get(f->kv, &ks), 0);
    assert_int_equal(ks.nodes, 3);
}

static void test_tenant_node_rededicated_over_another_tenants_bytes_is_refused(void **state)
{
    wr_fixture *f = *state;
    start_cluster(f);
    af_as(f, AF_A_WRITER);
    put(f, "a/keep", 512 * 1024, 21);
    assert_string_equal(replica_of(f, "a/keep").node, "na");

    /* na comes back dedicated to b: the master refuses it, naming a's key */
    assert_int_equal(hx_node_stop(&g.na), 0);
    start_na(f, "b");
    const char *says = "is dedicated to tenant b but its segment holds 'a/keep' of another tenant";
    for (int i = 0; i < 400 && !hx_file_contains(g.na.log, says); i++) usleep(25000);
    assert_true(hx_file_contains(g.na.log, says));
    assert_true(hx_file_contains(g.na.log, "register refused"));
    assert_int_equal(hx_node_stop(&g.na), 0);

    /* back as a's: a's bytes read as they were */
    start_na(f, "a");
    assert_int_equal(hx_wait_nodes(&f->m, 3, 20000), 0);
    af_as(f, AF_A_WRITER);
    int rc = -1;
    /* until the master has the new registration (it may not have noticed
     * the stop yet, and still name the old data port) */
    for (int i = 0; i < 400 && (rc = read_back(f, "a/keep", 512 * 1024, 21)) != 0; i++)
        usleep(25000);
    if (rc != 0) fail_msg("a/keep after na returned: %d %s", rc, kvc_error(f->kv));
}

/* wr_teardown, after the nodes (also when the test failed half-way). */
static int teardown(void **state)
{
    stop_cluster();
    return wr_teardown(state);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tenant_placement_keeps_dedicated_nodes_to_their_tenant,
                                        wr_setup, teardown),
        cmocka_unit_test_setup_teardown(test_tenant_local_peer_maps_its_dedicated_segment_zero_copy,
                                        wr_setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_tenant_other_uid_is_refused_the_mapping_and_reads_through_tickets, wr_setup,
            teardown),
        cmocka_unit_test_setup_teardown(test_tenant_embedded_node_dedicated_by_config, wr_setup,
                                        wr_teardown),
        cmocka_unit_test_setup_teardown(test_tenant_shared_node_names_nothing_to_map_with_auth_on,
                                        wr_setup, teardown),
        cmocka_unit_test_setup_teardown(test_tenant_node_flags_refused_naming_the_cause, wr_setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_tenant_node_rededicated_over_another_tenants_bytes_is_refused, wr_setup,
            teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
