/* test_cold_capacity.c -- what an operator sees of the nodes' cold tiers:
 * how full each cold directory is and how many cold writes failed
 * (`weightctl status`, its --json, the master's /metrics), and fsck's
 * report of stale temporary cold files, which only --repair deletes.
 *
 * A master without its embedded node and with the replica_probe test
 * plugin (service 42: 1 ensure cold, 3 release memory) drives the persists;
 * one real store_node, node-a, holds the objects. Nodes that register by
 * hand over the node service stand for a store_node from before the cold
 * report (no ColdTierUsage: unknown, never 0) and for a node without a cold
 * directory (none). A real ENOSPC comes from a small tmpfs the test mounts
 * as node-a's cold directory (root only, as CI runs; skipped and said
 * otherwise); any other failure from a cold directory replaced by a file
 * under the running node. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "kv_client.h"
#include "node_rpc.pb-c.h"
#include "rpc_client.h"
#include "weight_model.h"

#define SEGMENT (32ull << 20)
#define NODE_SERVICE 3
#define OUT_CAP (1 << 16)

typedef struct fx {
    hx_master m;
    hx_node a;
    char cold_a[320];   /* node-a's cold directory (known before it starts) */
    int mounted;        /* a tmpfs is mounted there */
    kvc *c;
    char *out;
} fx;

static const char *config(void)
{
    static char buf[512];
    snprintf(buf, sizeof(buf),
             "node:\n  embedded: false\n  timeout_ms: 60000\n  poll_ms: 50\n"
             "plugins:\n  - path: \"%s/lib/testplugins/replica_probe.so\"\n",
             BUILD_DIR);
    return buf;
}

static int setup_with(void **state, const char *tmpfs_size)
{
    fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->out = malloc(OUT_CAP);
    assert_int_equal(hx_init(&f->m, "coldcap", config()), 0);
    snprintf(f->cold_a, sizeof(f->cold_a), "%s/cold-node-a", f->m.dir);
    if (tmpfs_size != NULL) {
        char opts[64];
        assert_int_equal(mkdir(f->cold_a, 0700), 0);
        snprintf(opts, sizeof(opts), "size=%s,mode=0700", tmpfs_size);
        if (mount("tmpfs", f->cold_a, "tmpfs", 0, opts) == 0) f->mounted = 1;
    }
    assert_int_equal(hx_start(&f->m, 10000), 0);
    assert_int_equal(hx_node_start(&f->m, &f->a, "node-a", SEGMENT), 0);
    assert_string_equal(f->a.cold_dir, f->cold_a);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 10000), 0);
    f->c = hx_client(&f->m);
    assert_non_null(f->c);
    *state = f;
    return 0;
}

static int setup(void **state)
{
    return setup_with(state, NULL);
}

/* node-a's cold directory a 256 KiB tmpfs (when the test may mount one). */
static int setup_small_tmpfs(void **state)
{
    return setup_with(state, "256k");
}

/* Stop both cleanly (a sanitizer build reports at exit) and fail when
 * either log holds a sanitizer's report. */
static int teardown(void **state)
{
    fx *f = *state;
    kvc_close(f->c);
    if (hx_node_stop(&f->a) != 0) hx_node_kill(&f->a);
    if (f->m.pid > 0) hx_stop(&f->m);
    int reported = hx_log_contains(&f->m, "Sanitizer") || hx_log_contains(&f->m, "runtime error") ||
                   hx_file_contains(f->a.log, "Sanitizer") ||
                   hx_file_contains(f->a.log, "runtime error");
    if (reported) {
        hx_print_log(&f->m);
        char node_log[4096];
        hx_read_text(f->a.log, node_log, sizeof(node_log));
        fprintf(stderr, "node-a's log:\n%s\n", node_log);
    }
    if (f->mounted) umount2(f->cold_a, MNT_DETACH);
    hx_cleanup(&f->m);
    free(f->out);
    free(f);
    assert_false(reported);
    return 0;
}

/* -- helpers ------------------------------------------------------------------ */

/* The number after `"field":` in the first object of json that follows
 * `anchor` (-1: none, or not a number). */
static long long json_after(const char *json, const char *anchor, const char *field)
{
    char pat[96];
    const char *at = strstr(json, anchor);
    if (at == NULL) return -1;
    snprintf(pat, sizeof(pat), "\"%s\":", field);
    const char *p = strstr(at, pat);
    if (p == NULL) return -1;
    p += strlen(pat);
    if (*p < '0' || *p > '9') return -1;
    return strtoll(p, NULL, 10);
}

/* The sizes of dir's file system as the node computes them. */
static void dir_sizes(const char *dir, unsigned long long *total, unsigned long long *avail)
{
    struct statvfs sv;
    assert_int_equal(statvfs(dir, &sv), 0);
    unsigned long long unit = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
    *total = (unsigned long long)sv.f_blocks * unit;
    *avail = (unsigned long long)sv.f_bavail * unit;
}

/* |a - b| within tol. */
static int near(long long a, unsigned long long b, unsigned long long tol)
{
    unsigned long long d = a > (long long)b ? (unsigned long long)a - b : b - (unsigned long long)a;
    return a >= 0 && d <= tol;
}

/* Call replica_probe's method on key; its status. */
static int probe(const hx_master *m, uint32_t method, const char *key)
{
    int status;
    unsigned answer;
    assert_int_equal(hx_replica_probe(m, method, key, &status, &answer), 0);
    return status;
}

/* Put len bytes under key (on node-a, the only node). */
static void put_object(fx *f, const char *key, size_t len)
{
    char *buf = malloc(len);
    assert_non_null(buf);
    for (size_t i = 0; i < len; i++) buf[i] = (char)(i * 131 + 7);
    assert_int_equal(kvc_put_bytes(f->c, key, buf, len, SMP_DATA_KV, NULL, 0, NULL), 0);
    free(buf);
}

/* Register a node by hand, as a store_node would, over the node service:
 * cold_dir as given, with no ColdTierUsage (a node from before the report). */
static void register_by_hand(const hx_master *m, const char *id, const char *cold_dir)
{
    NodeRegisterRequest r = NODE_REGISTER_REQUEST__INIT;
    uint8_t secret[32];
    r.node_id = (char *)id;
    r.segment_id = (char *)id;
    r.data_addr = "127.0.0.1:1";
    r.segment_path = "/nonexistent";
    r.segment_bytes = 1 << 20;
    r.cold_dir = (char *)cold_dir;
    memset(secret, 7, sizeof(secret));
    r.ticket_secret.data = secret;
    r.ticket_secret.len = sizeof(secret);
    rpcc_conn *c = NULL;
    char err[256];
    assert_int_equal(rpcc_connect(m->socket, NULL, &c, err, sizeof(err)), 0);
    size_t len = node_register_request__get_packed_size(&r);
    uint8_t *body = malloc(len + 1), *resp = NULL;
    size_t rlen = 0;
    char *msg = NULL;
    int status = -1;
    node_register_request__pack(&r, body);
    assert_int_equal(rpcc_call(c, NODE_SERVICE, NODE_METHOD__NODE_REGISTER, body, len, &status,
                               &resp, &rlen, &msg), 0);
    if (status != 0) fail_msg("register %s: %s", id, msg ? msg : "?");
    free(body);
    free(resp);
    free(msg);
    rpcc_close(c);
}

/* The metric's value, waiting (bounded) until it is at least want. */
static double metric_at_least(const hx_master *m, const char *series, double want)
{
    double v = -1;
    for (long long end = hx_now_ms() + 10000; hx_now_ms() < end; usleep(20000))
        if ((v = hx_metric(m, series)) >= want) break;
    return v;
}

/* -- tests -------------------------------------------------------------------- */

/* status, its --json and /metrics give node-a's cold directory's file system
 * (total as statvfs says; free within a tolerance, others write to the same
 * disk), 0 failed writes; a node from before the report shows unknown
 * (null in --json, no series), never 0; a node without a cold directory
 * shows none. */
static void test_status_and_metrics_show_each_node_cold_tier(void **state)
{
    fx *f = *state;
    unsigned long long total, avail;
    const unsigned long long tol = 256ull << 20;
    register_by_hand(&f->m, "old-node", "/var/tmp/old-node-cold");
    register_by_hand(&f->m, "bare-node", "");

    assert_int_equal(wx_weightctl(&f->m, f->out, OUT_CAP, "--json status"), 0);
    dir_sizes(f->cold_a, &total, &avail);
    const char *a = "\"id\":\"node-a\"";
    if (json_after(f->out, a, "total_bytes") != (long long)total)
        fail_msg("total %llu; status: %s", total, f->out);
    if (!near(json_after(f->out, a, "free_bytes"), avail, tol))
        fail_msg("free %llu; status: %s", avail, f->out);
    assert_true(json_after(f->out, a, "used_bytes") > 0);
    assert_int_equal(json_after(f->out, a, "write_failures"), 0);
    assert_true(hx_says(f->out, "\"id\":\"node-a\",\"up\":true,\"cold\":{\"state\":\"ok\",\"dir\":"));
    if (!hx_says(f->out, "{\"id\":\"old-node\",\"up\":true,\"cold\":{\"state\":\"unknown\","
                         "\"dir\":\"/var/tmp/old-node-cold\",\"total_bytes\":null,"
                         "\"free_bytes\":null,\"used_bytes\":null,\"nearly_full\":null,"
                         "\"write_failures\":null,"))
        fail_msg("status: %s", f->out);
    assert_true(hx_says(f->out, "{\"id\":\"bare-node\",\"up\":true,\"cold\":{\"state\":\"none\","
                                "\"dir\":\"\",\"total_bytes\":null,"));

    assert_int_equal(wx_weightctl(&f->m, f->out, OUT_CAP, "status --bytes"), 0);
    char want[700];
    snprintf(want, sizeof(want), "node      node-a (up); cold: ");
    if (!hx_says(f->out, want) || !hx_says(f->out, " bytes free to the node (") ||
        !hx_says(f->out, " bytes in use by all its files), 0 failed writes\n"))
        fail_msg("status: %s", f->out);
    /* the figures are said to be the file system's, not the cold tier's own use */
    snprintf(want, sizeof(want), "node      node-a (up); cold: file system of %llu bytes with ",
             total);
    if (!hx_says(f->out, want)) fail_msg("status: %s", f->out);
    assert_true(hx_says(f->out, "node      old-node (up); cold: unknown (the node does not report "
                                "its cold tier: a store_node from before the report)\n"));
    assert_true(hx_says(f->out, "node      bare-node (up); cold: none (no cold directory)\n"));
    assert_null(strstr(f->out, "nearly full"));

    assert_true(hx_metric(&f->m, "store_node_cold_capacity_bytes{node=\"node-a\"}") == (double)total);
    double fr = hx_metric(&f->m, "store_node_cold_free_bytes{node=\"node-a\"}");
    assert_true(near((long long)fr, avail, tol));
    assert_true(hx_metric(&f->m, "store_node_cold_write_failures_total{node=\"node-a\",cause=\"no_space\"}") == 0);
    assert_true(hx_metric(&f->m, "store_node_cold_write_failures_total{node=\"node-a\",cause=\"other\"}") == 0);
    const char *absent[] = {"store_node_cold_capacity_bytes{node=\"old-node\"}",
                            "store_node_cold_free_bytes{node=\"old-node\"}",
                            "store_node_cold_write_failures_total{node=\"old-node\",cause=\"other\"}",
                            "store_node_cold_capacity_bytes{node=\"bare-node\"}",
                            "store_node_cold_free_bytes{node=\"bare-node\"}",
                            "store_node_cold_write_failures_total{node=\"bare-node\",cause=\"other\"}"};
    for (size_t i = 0; i < sizeof(absent) / sizeof(absent[0]); i++)
        if (hx_metric(&f->m, absent[i]) != -1) fail_msg("a series for it: %s", absent[i]);
}

/* A cold write that fails for another cause than space (node-a's cold
 * directory replaced by a file while it runs): the persist fails, and
 * status and /metrics count one failed write of cause other. */
static void test_a_failed_cold_write_is_counted(void **state)
{
    fx *f = *state;
    put_object(f, "obj/1", 10000);
    /* the directory goes (the node's descriptor of it stays), a file takes its name */
    assert_int_equal(rmdir(f->cold_a), 0);
    int fd = open(f->cold_a, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    close(fd);
    assert_true(probe(&f->m, 1, "obj/1") < 0); /* ensure cold fails */
    double other = metric_at_least(
        &f->m, "store_node_cold_write_failures_total{node=\"node-a\",cause=\"other\"}", 1);
    assert_true(other >= 1);
    assert_true(hx_metric(&f->m, "store_node_cold_write_failures_total{node=\"node-a\",cause=\"no_space\"}") == 0);
    assert_int_equal(wx_weightctl(&f->m, f->out, OUT_CAP, "status"), 0);
    char want[200];
    snprintf(want, sizeof(want), ", %.0f failed write%s (0 no space, %.0f other)\n", other,
             other == 1 ? "" : "s", other);
    if (!hx_says(f->out, want)) fail_msg("status lacks '%s': %s", want, f->out);
    assert_int_equal(wx_weightctl(&f->m, f->out, OUT_CAP, "--json status"), 0);
    assert_int_equal(json_after(f->out, "\"id\":\"node-a\"", "write_failures_other"), (long long)other);
    assert_int_equal(json_after(f->out, "\"id\":\"node-a\"", "write_failures_no_space"), 0);
}

/* node-a's cold directory is a 256 KiB tmpfs: status gives its size
 * exactly; filled by a file to under 5 % free, status says the cold tier is
 * nearly full; a persist then fails with a real ENOSPC, counted as no space. */
static void test_a_full_cold_tier_is_said_and_its_enospc_counted(void **state)
{
    fx *f = *state;
    unsigned long long total, avail;
    if (!f->mounted) {
        fprintf(stderr, "test_cold_capacity: cannot mount a tmpfs (%s): the ENOSPC check is "
                "skipped (needs root)\n", strerror(errno));
        skip();
    }
    dir_sizes(f->cold_a, &total, &avail);
    assert_int_equal(total, 256u << 10);
    assert_int_equal(wx_weightctl(&f->m, f->out, OUT_CAP, "--json status"), 0);
    assert_int_equal(json_after(f->out, "\"id\":\"node-a\"", "total_bytes"), (long long)total);
    assert_true(hx_says(f->out, "\"nearly_full\":false"));

    /* all but 8 KiB taken by a file of the test's */
    char filler[400];
    snprintf(filler, sizeof(filler), "%s/filler", f->cold_a);
    int fd = open(filler, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(posix_fallocate(fd, 0, (off_t)(total - (8u << 10))), 0);
    close(fd);
    dir_sizes(f->cold_a, &total, &avail);
    assert_true(avail * 100 < total * 5);
    /* the node reports with its next poll */
    for (long long end = hx_now_ms() + 10000; hx_now_ms() < end; usleep(20000)) {
        assert_int_equal(wx_weightctl(&f->m, f->out, OUT_CAP, "status"), 0);
        if (strstr(f->out, "cold tier nearly full") != NULL) break;
    }
    if (!hx_says(f->out, "warning   node node-a: cold tier nearly full: 8.0 KiB free of 256.0 KiB "
                         "(3.1%, below 5%) in "))
        fail_msg("status: %s", f->out);
    assert_int_equal(wx_weightctl(&f->m, f->out, OUT_CAP, "--json status"), 0);
    assert_true(hx_says(f->out, "\"nearly_full\":true"));
    /* the master's log says it once */
    assert_true(hx_log_contains(&f->m, "store_master: node node-a: cold tier nearly full: 8.0 KiB "
                                       "free of 256.0 KiB (3.1%, below 5%)\n"));

    put_object(f, "obj/big", 64u << 10);
    assert_int_equal(probe(&f->m, 1, "obj/big"), SMP_ENOSPC);
    double no_space = metric_at_least(
        &f->m, "store_node_cold_write_failures_total{node=\"node-a\",cause=\"no_space\"}", 1);
    assert_true(no_space >= 1);
    assert_true(hx_metric(&f->m, "store_node_cold_write_failures_total{node=\"node-a\",cause=\"other\"}") == 0);
    assert_int_equal(wx_weightctl(&f->m, f->out, OUT_CAP, "status"), 0);
    char want[200];
    snprintf(want, sizeof(want), " failed write%s (%.0f no space, 0 other)\n",
             no_space == 1 ? "" : "s", no_space);
    if (!hx_says(f->out, want)) fail_msg("status lacks '%s': %s", want, f->out);
    assert_true(hx_log_contains(&f->m, "failed for lack of space since the last report"));
    assert_int_equal(unlink(filler), 0);
}

/* A temporary cold file as the node names those of its writes, of len
 * bytes, last written age_s seconds ago, in dir; its name into name. */
static void tmp_cold_file(const char *dir, int i, size_t len, int age_s, char *name, size_t cap)
{
    char path[700];
    snprintf(name, cap, "%064d.cold.%016d.tmp", i, i);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
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

static int exists_in(const char *dir, const char *name)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* A stale temporary (two minutes old) is reported by a plain fsck -- name,
 * size, age, what --repair does -- and is still there afterwards (exit 1:
 * something to repair); --json names it too; a young one is neither
 * reported nor touched. fsck --repair deletes the stale one (and says so),
 * keeps the young one, and the next fsck is clean. */
static void test_fsck_reports_stale_temporaries_and_only_repair_deletes_them(void **state)
{
    fx *f = *state;
    char stale[128], young[128], want[400];
    tmp_cold_file(f->cold_a, 1, 1000, 120, stale, sizeof(stale));
    tmp_cold_file(f->cold_a, 2, 500, 0, young, sizeof(young));

    assert_int_equal(wx_weightctl(&f->m, f->out, OUT_CAP, "fsck"), 1);
    snprintf(want, sizeof(want), "  stale temporary cold file %s, 1000 bytes, ", stale);
    if (!hx_says(f->out, want) || !hx_says(f->out, " s old (a write that did not finish)\n"))
        fail_msg("fsck: %s", f->out);
    assert_true(hx_says(f->out, "  1 stale temporary cold files, 1000 bytes; 0 deleted\n"));
    assert_true(hx_says(f->out, "1 stale temporary cold files (writes that did not finish left "
                                "them; nothing was deleted): `weightctl fsck --repair` deletes them\n"));
    assert_null(strstr(f->out, young));
    assert_null(strstr(f->out, "clean"));
    assert_true(exists_in(f->cold_a, stale));
    assert_true(exists_in(f->cold_a, young));

    assert_int_equal(wx_weightctl(&f->m, f->out, OUT_CAP, "--json fsck"), 1);
    snprintf(want, sizeof(want), "\"temporaries_checked\":true,\"stale_temporaries\":[{\"name\":\"%s\","
             "\"bytes\":1000,\"age_s\":", stale);
    if (!hx_says(f->out, want)) fail_msg("fsck --json: %s", f->out);
    long long age = json_after(f->out, "\"stale_temporaries\":[", "age_s");
    assert_true(age >= 119 && age < 100000);
    assert_true(hx_says(f->out, ",\"removed\":false,\"error\":\"\"}],\"stale_temporaries_total\":1,"
                                "\"stale_temporary_bytes\":1000,\"temporaries_removed\":0}"));
    assert_true(exists_in(f->cold_a, stale));

    assert_int_equal(wx_weightctl(&f->m, f->out, OUT_CAP, "fsck --repair"), 0);
    snprintf(want, sizeof(want), "  removed stale temporary cold file %s, 1000 bytes, ", stale);
    if (!hx_says(f->out, want)) fail_msg("fsck --repair: %s", f->out);
    assert_true(hx_says(f->out, "1 of 1 stale temporary cold files deleted\n"));
    assert_false(exists_in(f->cold_a, stale));
    assert_true(exists_in(f->cold_a, young));

    assert_int_equal(wx_weightctl(&f->m, f->out, OUT_CAP, "fsck"), 0);
    if (!hx_says(f->out, "clean\n") || strstr(f->out, "stale temporary") != NULL)
        fail_msg("fsck after the repair: %s", f->out);
    assert_true(exists_in(f->cold_a, young));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_status_and_metrics_show_each_node_cold_tier, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_failed_cold_write_is_counted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_full_cold_tier_is_said_and_its_enospc_counted,
                                        setup_small_tmpfs, teardown),
        cmocka_unit_test_setup_teardown(test_fsck_reports_stale_temporaries_and_only_repair_deletes_them,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
