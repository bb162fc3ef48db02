/* test_tenant_local_socket.c -- a dedicated node's local socket
 * (host_shim/node/node_local.h) and the client that asks it for the segment
 * (client/seg_local.h, seg_map_open_at).
 *
 * Real segment files and Unix sockets in a scratch directory under /tmp,
 * one process: the peer list is made to include or exclude this process's
 * own uid and gid. A listed peer receives a descriptor of the segment and
 * maps the node's bytes (also one listed through a supplementary group
 * only, as root); the descriptor carries none of the node's lock (a
 * restarted node reopens its segment while the client still holds it); a
 * grown file and a restarted node are seen by seg_map_check. An unlisted
 * peer is refused with the node's cause, and asking again is refused
 * without a new connection. Bad --local-peer specs are refused naming the
 * spec; a stale socket file is replaced, a live one and a non-socket are
 * refused with the file left as it was. A socket that accepts nothing
 * (backlog full) ends the ask after its 5 s, naming the timed-out connect. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <grp.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "full_backlog.h"
#include "node_local.h"
#include "rpc_auth.h"
#include "node_segment.h"
#include "seg_local.h"
#include "seg_map.h"

#define SIZE (1u << 20)

static char g_dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof(g_dir), "/tmp/wm-test-local-%d", (int)getpid());
    return mkdir(g_dir, 0700) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[512];
    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static seg_segment *open_seg(const char *id, uint64_t size)
{
    seg_options o = {.dir = g_dir, .id = id, .size = size, .preallocate = 1};
    seg_segment *s = NULL;
    char err[256];
    assert_int_equal(seg_open(&o, &s, err, sizeof(err)), SMP_OK);
    return s;
}

static void sock_path(const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s.sock", g_dir, name);
}

static node_local_peers peers_of(const char *spec)
{
    node_local_peers p;
    char err[256];
    memset(&p, 0, sizeof(p));
    assert_int_equal(node_local_add_peer(&p, spec, err, sizeof(err)), SMP_OK);
    return p;
}

static void test_tenant_local_peer_specs(void **state)
{
    node_local_peers p;
    char err[256];
    (void)state;
    memset(&p, 0, sizeof(p));
    assert_int_equal(node_local_add_peer(&p, "uid:1001", err, sizeof(err)), SMP_OK);
    assert_int_equal(node_local_add_peer(&p, "gid:0", err, sizeof(err)), SMP_OK);
    assert_true(node_local_peer_allowed(&p, 1001, 77, NULL, 0));
    assert_true(node_local_peer_allowed(&p, 5, 0, NULL, 0));
    assert_false(node_local_peer_allowed(&p, 1002, 77, NULL, 0));
    const gid_t groups[] = {12, 0};
    assert_true(node_local_peer_allowed(&p, 1002, 77, groups, 2));  /* a supplementary group */
    assert_false(node_local_peer_allowed(&p, 1002, 77, groups, 1));
    const char *bad[] = {"", "uid:", "uid:-1", "uid:+1", "uid:1x", "user:1", "gid:4294967295",
                         "uid:99999999999999999999", "uid 1", "UID:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        node_local_peers before = p;
        assert_int_equal(node_local_add_peer(&p, bad[i], err, sizeof(err)), SMP_EINVAL);
        assert_non_null(strstr(err, "expected uid:N or gid:N"));
        assert_memory_equal(&before, &p, sizeof(p)); /* nothing added */
    }
    memset(&p, 0, sizeof(p));
    for (int i = 0; i < NODE_LOCAL_PEERS_MAX; i++) {
        char spec[32];
        snprintf(spec, sizeof(spec), "uid:%d", i);
        assert_int_equal(node_local_add_peer(&p, spec, err, sizeof(err)), SMP_OK);
    }
    assert_int_equal(node_local_add_peer(&p, "uid:9999", err, sizeof(err)), SMP_ERANGE);
    assert_int_equal(p.n_uids, NODE_LOCAL_PEERS_MAX);
    char why[300], longest[130];
    memset(longest, 'a', 128);
    longest[128] = '\0';
    assert_int_equal(rpc_auth_tenant_check("team-a.1", why, sizeof(why)), SMP_OK);
    assert_int_equal(rpc_auth_tenant_check(longest, why, sizeof(why)), SMP_OK);
    assert_int_equal(rpc_auth_tenant_check("Weights", why, sizeof(why)), SMP_OK);
    assert_int_equal(rpc_auth_tenant_check("weights-a", why, sizeof(why)), SMP_OK);
    const char *not_names[] = {".x", "a/b", "", "a b", NULL};
    for (size_t i = 0; i < sizeof(not_names) / sizeof(not_names[0]); i++) {
        assert_int_equal(rpc_auth_tenant_check(not_names[i], why, sizeof(why)), SMP_EINVAL);
        assert_non_null(strstr(why, "is not a tenant (1 to 128 of"));
    }
    longest[128] = 'a';
    longest[129] = '\0';
    assert_int_equal(rpc_auth_tenant_check(longest, why, sizeof(why)), SMP_EINVAL);
    /* the weight revisions' prefix: that tenant's objects would lie among them */
    assert_int_equal(rpc_auth_tenant_check("weights", why, sizeof(why)), SMP_EINVAL);
    assert_non_null(strstr(why, "\"weights\" cannot be a tenant"));
    assert_int_equal(rpc_auth_tenant_check("weights", NULL, 0), SMP_EINVAL);
}

/* A listed uid maps the node's bytes, and may write them; the descriptor
 * does not hold the node's lock; growth and a node restart are seen. */
static void test_tenant_local_peer_maps_the_segment(void **state)
{
    char path[300], err[800], spec[32];
    uint8_t in[256], out[256];
    (void)state;
    seg_segment *s = open_seg("n1", SIZE);
    for (size_t i = 0; i < sizeof(in); i++) in[i] = (uint8_t)(i * 3 + 1);
    assert_int_equal(seg_write(s, 8192, in, sizeof(in)), SMP_OK);
    sock_path("n1", path, sizeof(path));
    snprintf(spec, sizeof(spec), "uid:%u", (unsigned)geteuid());
    node_local_peers p = peers_of(spec);
    node_local *l = NULL;
    assert_int_equal(node_local_start(path, "n1", "a", &p, s, &l, err, sizeof(err)), SMP_OK);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0666);

    seg_map m;
    assert_int_equal(seg_map_open_at("", path, 1, 0, &m, err, sizeof(err)), SMP_OK);
    assert_int_equal(m.size, SIZE);
    assert_int_equal(seg_map_get(&m, 8192, out, sizeof(out)), SMP_OK);
    assert_memory_equal(in, out, sizeof(in));
    assert_int_equal(seg_map_put(&m, 0, in, 16), SMP_OK); /* the node sees it */
    assert_int_equal(seg_read(s, 0, out, 16), SMP_OK);
    assert_memory_equal(in, out, 16);
    assert_int_equal(seg_map_check(&m, path), SEG_MAP_CURRENT);

    /* the file grows (a node restarted with a larger segment_bytes) */
    int fd = open(seg_path(s), O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 2 * SIZE), 0);
    close(fd);
    assert_int_equal(seg_map_check(&m, path), SEG_MAP_GROWN);

    /* the node stops and comes back while the client holds its descriptor:
     * the segment opens (no lock travelled with it) and the socket is new */
    node_local_stop(l);
    seg_close(s);
    assert_int_equal(seg_map_check(&m, path), SEG_MAP_REPLACED);
    s = open_seg("n1", 2 * SIZE);
    assert_int_equal(node_local_start(path, "n1", "a", &p, s, &l, err, sizeof(err)), SMP_OK);
    assert_int_equal(seg_map_check(&m, path), SEG_MAP_REPLACED);
    seg_map_close(&m);
    assert_int_equal(seg_map_open_at("", path, 0, 0, &m, err, sizeof(err)), SMP_OK);
    assert_int_equal(m.size, 2 * SIZE);
    assert_int_equal(seg_map_put(&m, 0, in, 1), SMP_ESTATE); /* mapped read-only */
    seg_map_close(&m);
    node_local_stop(l);
    seg_close(s);
}

/* A peer listed by its gid only is granted too. */
static void test_tenant_local_peer_by_gid(void **state)
{
    char path[300], err[800], spec[32];
    (void)state;
    seg_segment *s = open_seg("n2", SIZE);
    sock_path("n2", path, sizeof(path));
    snprintf(spec, sizeof(spec), "gid:%u", (unsigned)getegid());
    node_local_peers p = peers_of(spec);
    char other[32];
    snprintf(other, sizeof(other), "uid:%u", (unsigned)geteuid() + 1);
    assert_int_equal(node_local_add_peer(&p, other, err, sizeof(err)), SMP_OK);
    node_local *l = NULL;
    assert_int_equal(node_local_start(path, "n2", "a", &p, s, &l, err, sizeof(err)), SMP_OK);
    seg_map m;
    assert_int_equal(seg_map_open_at("", path, 0, 0, &m, err, sizeof(err)), SMP_OK);
    seg_map_close(&m);
    node_local_stop(l);
    seg_close(s);
}

/* A peer listed only through a supplementary group: a child (root drops
 * into groups {GROUP}, keeping uid 0 and gid 0, neither listed) is granted
 * the segment; the same child without the group is refused. */
#define GROUP 4242u
static int child_fetch(const char *path, const gid_t *groups, size_t n)
{
    pid_t pid = fork();
    if (pid == 0) {
        char err[800];
        int fd = -1;
        struct stat st;
        if (setgroups(n, groups) != 0) _exit(10);
        int rc = seg_local_fetch(path, &fd, &st, err, sizeof(err));
        if (rc == SMP_OK) _exit(fd >= 0 ? 0 : 11);
        _exit(rc == SMP_EFORBIDDEN && strstr(err, "is not a local peer") ? 1 : 12);
    }
    int status = -1;
    assert_true(pid > 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_tenant_local_peer_by_supplementary_group(void **state)
{
    char path[300], err[800], spec[32];
    (void)state;
    if (geteuid() != 0 || getegid() == GROUP) skip(); /* setgroups needs root */
    seg_segment *s = open_seg("n4", SIZE);
    sock_path("n4", path, sizeof(path));
    snprintf(spec, sizeof(spec), "gid:%u", GROUP);
    node_local_peers p = peers_of(spec);
    node_local *l = NULL;
    assert_int_equal(node_local_start(path, "n4", "a", &p, s, &l, err, sizeof(err)), SMP_OK);
    const gid_t with[] = {GROUP};
    assert_int_equal(child_fetch(path, with, 1), 0);
    assert_int_equal(child_fetch(path, NULL, 0), 1);
    node_local_stop(l);
    seg_close(s);
}

/* Neither this uid nor this gid listed: refused with the node's cause,
 * nothing handed over, and asked again the answer is the remembered one. */
static void test_tenant_local_other_peer_is_refused(void **state)
{
    char path[300], err[800], spec[32], want[200];
    (void)state;
    seg_segment *s = open_seg("n3", SIZE);
    sock_path("n3", path, sizeof(path));
    snprintf(spec, sizeof(spec), "uid:%u", (unsigned)geteuid() + 1);
    node_local_peers p = peers_of(spec);
    snprintf(spec, sizeof(spec), "gid:%u", (unsigned)getegid() + 1);
    assert_int_equal(node_local_add_peer(&p, spec, err, sizeof(err)), SMP_OK);
    node_local *l = NULL;
    assert_int_equal(node_local_start(path, "n3", "b", &p, s, &l, err, sizeof(err)), SMP_OK);
    int fd = -1;
    struct stat st;
    assert_int_equal(seg_local_fetch(path, &fd, &st, err, sizeof(err)), SMP_EFORBIDDEN);
    assert_int_equal(fd, -1);
    snprintf(want, sizeof(want), "uid %u gid %u is not a local peer of tenant b on node n3",
             (unsigned)geteuid(), (unsigned)getegid());
    assert_string_equal(err, want);
    seg_map m;
    err[0] = '\0';
    assert_int_equal(seg_map_open_at("", path, 0, 0, &m, err, sizeof(err)), SMP_EFORBIDDEN);
    assert_string_equal(err, want);
    assert_null(m.base);
    node_local_stop(l);
    seg_close(s);
    /* nothing listens any more */
    assert_int_equal(seg_local_fetch(path, &fd, &st, err, sizeof(err)), SMP_ENOTFOUND);
}

/* A socket file nobody listens on is replaced; one a live server holds and
 * a path that is no socket are refused and left alone. */
static void test_tenant_local_socket_path_checks(void **state)
{
    char path[300], file[300], err[800];
    (void)state;
    seg_segment *s = open_seg("n4", SIZE);
    sock_path("n4", path, sizeof(path));
    int stale = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, path, strlen(path) + 1);
    assert_int_equal(bind(stale, (struct sockaddr *)&a, sizeof(a)), 0);
    close(stale); /* a killed node's leftover */
    node_local_peers p = peers_of("uid:0");
    node_local *l = NULL, *l2 = NULL;
    assert_int_equal(node_local_start(path, "n4", "a", &p, s, &l, err, sizeof(err)), SMP_OK);
    assert_int_equal(node_local_start(path, "n4", "a", &p, s, &l2, err, sizeof(err)), SMP_EBUSY);
    assert_non_null(strstr(err, "another process listens there"));
    assert_null(l2);
    struct stat st;
    assert_int_equal(stat(path, &st), 0); /* the live one keeps its file */
    node_local_stop(l);

    snprintf(file, sizeof(file), "%s/plain", g_dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("keep", f);
    fclose(f);
    assert_int_equal(node_local_start(file, "n4", "a", &p, s, &l2, err, sizeof(err)), SMP_EEXIST);
    assert_non_null(strstr(err, "exists and is not a socket"));
    char buf[8] = "";
    f = fopen(file, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    assert_string_equal(buf, "keep");
    char longp[200];
    memset(longp, 'x', sizeof(longp) - 1);
    longp[sizeof(longp) - 1] = '\0';
    assert_int_equal(node_local_start(longp, "n4", "a", &p, s, &l2, err, sizeof(err)), SMP_EINVAL);
    seg_close(s);
}

typedef struct fetch_call {
    const char *path;
    int rc;
    char err[800];
} fetch_call;

static void fetch_main(void *arg)
{
    fetch_call *fc = arg;
    int fd = -1;
    struct stat st;
    fc->rc = seg_local_fetch(fc->path, &fd, &st, fc->err, sizeof(fc->err));
    if (fd >= 0) close(fd);
}

/* A node's socket that accepts nothing (listen backlog 0, filled): the ask
 * ends after seg_local's 5 s with SMP_EIO naming the timed-out connect,
 * instead of a connect waiting for an accept that never comes. The ask runs
 * on a thread given 60 s to end; one still waiting then fails the test, and
 * closing the listener ends it. */
static void test_tenant_local_socket_that_accepts_nothing_times_out(void **state)
{
    char path[300];
    int queued[FULL_BACKLOG_MAX];
    size_t n_queued = 0;
    bg_call bg;
    fetch_call fc = {.path = path};
    (void)state;
    sock_path("n5", path, sizeof(path));
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, path, strlen(path) + 1);
    int l = full_unix_listener(path, queued, &n_queued);
    assert_true(l >= 0);
    assert_int_equal(bg_call_start(&bg, fetch_main, &fc), 0);
    int ended = bg_call_wait(&bg, 60);
    full_backlog_close(l, queued, &n_queued); /* an ask still waiting is refused now */
    bg_call_join(&bg);
    if (!ended) fail_msg("seg_local_fetch of a node accepting nothing still waited after 60 s");
    assert_int_equal(fc.rc, SMP_EIO);
    assert_non_null(strstr(fc.err, "connect timed out"));
    assert_non_null(strstr(fc.err, path));

    /* Asked again (the listener is closed now, its file still there): not
     * connected to, the time-out is named -- a get's next mapping goes to
     * the data port at once instead of waiting 5 s more. */
    char err[1024] = "";
    struct stat sst;
    int fd = -1;
    assert_int_equal(seg_local_fetch(path, &fd, &sst, err, sizeof(err)), SMP_EIO);
    assert_int_equal(fd, -1);
    assert_non_null(strstr(err, "connect timed out"));
    assert_non_null(strstr(err, "not asked again"));
    /* a node restarted on a new socket file is asked: nothing listens on
     * this one, and the connect says so */
    unlink(path);
    int l2 = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(l2 >= 0);
    assert_int_equal(bind(l2, (struct sockaddr *)&a, sizeof(a)), 0);
    close(l2);
    err[0] = '\0';
    assert_int_equal(seg_local_fetch(path, &fd, &sst, err, sizeof(err)), SMP_ENOTFOUND);
    assert_null(strstr(err, "not asked again"));
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tenant_local_peer_specs),
        cmocka_unit_test_setup_teardown(test_tenant_local_peer_maps_the_segment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tenant_local_peer_by_gid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tenant_local_peer_by_supplementary_group, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_tenant_local_other_peer_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tenant_local_socket_path_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tenant_local_socket_that_accepts_nothing_times_out,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
