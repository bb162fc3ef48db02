/* test_node_fsck_tmps.c -- the stale temporary cold files a node's SCAN
 * reports (node_fsck.c), against a real segment file and cold directory
 * under /tmp.
 *
 * 300 temporaries two minutes old and one young: the first page of a plain
 * SCAN counts all 300 with their bytes, names at most 100 and never more
 * than half the page asks, deletes none (each still on disk) and says the
 * young one nowhere; a later page (after a name) reports none; the first
 * page of a SCAN asking for removal (fsck --repair) deletes the 300, says
 * so, and leaves the young one; a SCAN of a master from before pages (one
 * answer) reports them too. */
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "node_cold.h"
#include "node_fsck.h"
#include "node_rpc.pb-c.h"
#include "node_segment.h"

#define STALE 300
#define PAGE 16384u

static char g_dir[256], g_cold[300];
static seg_segment *g_seg;
static cold_tier *g_ct;
static node_fsck *g_fsck;

static void tmp_file(int i, int age_s)
{
    char path[500];
    snprintf(path, sizeof(path), "%s/%064d.cold.%016d.tmp", g_cold, i, i);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 10), 0);
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= age_s;
    t[1] = t[0];
    assert_int_equal(futimens(fd, t), 0);
    close(fd);
}

/* Temporaries in the cold directory now. */
static int tmps_on_disk(void)
{
    int n = 0;
    DIR *d = opendir(g_cold);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d)) != NULL;) n += strstr(de->d_name, ".tmp") != NULL;
    closedir(d);
    return n;
}

static int setup(void **state)
{
    (void)state;
    char err[256];
    snprintf(g_dir, sizeof(g_dir), "/tmp/wm-fscktmps-XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    snprintf(g_cold, sizeof(g_cold), "%s/cold", g_dir);
    seg_options o = {.dir = g_dir, .id = "seg", .size = 1 << 20};
    assert_int_equal(seg_open(&o, &g_seg, err, sizeof(err)), 0);
    assert_int_equal(cold_open(g_cold, &g_ct, err, sizeof(err)), 0);
    assert_int_equal(node_fsck_new(g_seg, g_ct, g_cold, &g_fsck), 0);
    for (int i = 0; i < STALE; i++) tmp_file(i, 120);
    tmp_file(STALE, 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    node_fsck_free(g_fsck);
    cold_close(g_ct);
    seg_close(g_seg);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

/* Run a SCAN: after (""), page bytes (0: one answer), removal asked. */
static TaskResult *scan(const char *after, uint32_t page, int remove)
{
    NodeTask t = NODE_TASK__INIT;
    char err[256] = "";
    TaskResult *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    task_result__init(r);
    t.kind = TASK_KIND__TASK_SCAN;
    t.after = (char *)after;
    t.page_bytes = page;
    t.remove_stale_tmp = remove;
    if (node_fsck_scan(g_fsck, &t, r, err, sizeof(err)) != 0) fail_msg("scan: %s", err);
    return r;
}

/* Free r as the node does: what the scan allocated. */
static void result_free(TaskResult *r)
{
    /* the scan's strings and lists are the heap's; protobuf-c frees them so */
    task_result__free_unpacked(r, NULL);
}

static void assert_reported(const TaskResult *r, uint64_t removed)
{
    char young[128];
    snprintf(young, sizeof(young), "%064d.cold.%016d.tmp", STALE, STALE);
    assert_true(r->tmp_reported);
    assert_int_equal(r->stale_tmps_total, STALE);
    assert_int_equal(r->stale_tmp_bytes_total, STALE * 10);
    assert_int_equal(r->stale_tmps_removed, removed);
    assert_true(r->n_stale_tmps > 0 && r->n_stale_tmps <= 100);
    for (size_t i = 0; i < r->n_stale_tmps; i++) {
        assert_string_not_equal(r->stale_tmps[i]->name, young);
        assert_int_equal(r->stale_tmps[i]->bytes, 10);
        assert_true(r->stale_tmps[i]->age_s >= 119);
        assert_int_equal(r->stale_tmps[i]->removed, removed > 0);
    }
}

static void test_a_plain_scan_reports_and_a_repair_scan_deletes(void **state)
{
    (void)state;
    TaskResult *r = scan("", PAGE, 0);
    assert_reported(r, 0);
    assert_true(task_result__get_packed_size(r) <= PAGE / 2);
    result_free(r);
    assert_int_equal(tmps_on_disk(), STALE + 1);

    r = scan("0", PAGE, 0); /* a later page */
    assert_false(r->tmp_reported);
    assert_int_equal(r->stale_tmps_total + r->n_stale_tmps, 0);
    result_free(r);
    assert_int_equal(tmps_on_disk(), STALE + 1);

    r = scan("", PAGE, 1);
    assert_reported(r, STALE);
    result_free(r);
    assert_int_equal(tmps_on_disk(), 1); /* the young one */
}

static void test_a_one_answer_scan_reports_them_too(void **state)
{
    (void)state;
    TaskResult *r = scan("", 0, 0);
    assert_reported(r, 0);
    result_free(r);
    assert_int_equal(tmps_on_disk(), STALE + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_plain_scan_reports_and_a_repair_scan_deletes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_one_answer_scan_reports_them_too, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
