/* test_node_cold_usage.c -- how full a cold tier is, its failed writes by
 * cause, the watch that keeps the sizes for the polls, and what a walk does
 * with stale temporaries under a cold_tmp_rule.
 *
 * Real files in a scratch directory under /tmp. cold_usage_get gives the
 * sizes statvfs gives for the directory; a persist into a directory that
 * was removed under the tier counts one failure of cause other, a persist
 * with bad arguments none; cold_watch_get gives a reading from the start on
 * and cold_watch_stop ends its thread. A walk that keeps stale temporaries
 * reports each (name, size, age) and deletes nothing; one that does not
 * keep them deletes and reports them removed; a young one is never
 * reported. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "node_cold.h"
#include "node_cold_watch.h"

static char g_dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof(g_dir), "/tmp/wm-coldusage-XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static void test_usage_is_statvfs_of_the_directory(void **state)
{
    (void)state;
    cold_tier *ct = NULL;
    char err[256];
    cold_usage u;
    struct statvfs sv;
    assert_int_equal(cold_open(g_dir, &ct, err, sizeof(err)), 0);
    cold_usage_get(ct, &u);
    assert_int_equal(statvfs(g_dir, &sv), 0);
    uint64_t unit = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
    assert_int_equal(u.error, 0);
    assert_int_equal(u.total_bytes, (uint64_t)sv.f_blocks * unit);
    assert_true(u.used_bytes <= u.total_bytes && u.free_bytes <= u.total_bytes);
    assert_int_equal(u.write_failures_no_space + u.write_failures_other, 0);

    cold_watch *w = NULL;
    cold_usage wu;
    uint64_t age = 99999;
    assert_int_equal(cold_watch_start(ct, &w), 0);
    cold_watch_get(w, &wu, &age);
    assert_int_equal(wu.total_bytes, u.total_bytes);
    assert_true(age < 99999);
    cold_watch_stop(w);
    cold_close(ct);
}

static void test_failed_writes_are_counted_by_cause(void **state)
{
    (void)state;
    cold_tier *ct = NULL;
    char err[256], sub[300];
    uint8_t data[100] = {1}, sha[32] = {0};
    cold_usage u;
    snprintf(sub, sizeof(sub), "%s/cold", g_dir);
    assert_int_equal(cold_open(sub, &ct, err, sizeof(err)), 0);
    /* bad arguments: no write tried, none counted */
    assert_int_equal(cold_persist(ct, "", data, sizeof(data), sha, 0, NULL, err, sizeof(err)),
                     SMP_EINVAL);
    cold_usage_get(ct, &u);
    assert_int_equal(u.write_failures_no_space + u.write_failures_other, 0);
    /* the directory gone under the tier: the temporary cannot be created */
    assert_int_equal(rmdir(sub), 0);
    assert_true(cold_persist(ct, "k", data, sizeof(data), sha, 0, NULL, err, sizeof(err)) < 0);
    cold_usage_get(ct, &u);
    assert_int_equal(u.write_failures_other, 1);
    assert_int_equal(u.write_failures_no_space, 0);
    cold_close(ct);
}

/* A temporary as a persist names it, len bytes, age_s old; its name. */
static void tmp_file(int i, size_t len, int age_s, char *name, size_t cap)
{
    char path[400];
    snprintf(name, cap, "%064d.cold.%016d.tmp", i, i);
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)len), 0);
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= age_s;
    t[1] = t[0];
    assert_int_equal(futimens(fd, t), 0);
    close(fd);
}

typedef struct seen {
    char name[128];
    uint64_t bytes, age_ms;
    int removed, n;
} seen;

static void note(void *arg, const cold_stale_tmp *t)
{
    seen *s = arg;
    snprintf(s->name, sizeof(s->name), "%s", t->name);
    s->bytes = t->bytes;
    s->age_ms = t->age_ms;
    s->removed = t->removed;
    s->n++;
}

static int present(const char *name)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    return access(path, F_OK) == 0;
}

static void test_a_walk_reports_stale_temporaries_and_deletes_only_when_asked(void **state)
{
    (void)state;
    cold_tier *ct = NULL;
    char err[256], stale[128], young[128], **names = NULL;
    size_t n = 0;
    seen s;
    assert_int_equal(cold_open(g_dir, &ct, err, sizeof(err)), 0);
    tmp_file(1, 700, 120, stale, sizeof(stale));
    tmp_file(2, 300, 0, young, sizeof(young));

    memset(&s, 0, sizeof(s));
    cold_tmp_rule keep = {.stale_ms = 60000, .keep = 1, .fn = note, .arg = &s};
    assert_int_equal(cold_list_names_tmps(ct, &keep, &names, &n), 0);
    cold_names_free(names, n);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.name, stale);
    assert_int_equal(s.bytes, 700);
    assert_true(s.age_ms >= 119000);
    assert_int_equal(s.removed, 0);
    assert_true(present(stale) && present(young));

    memset(&s, 0, sizeof(s));
    cold_inventory_stats st;
    cold_tmp_rule del = {.stale_ms = 60000, .keep = 0, .fn = note, .arg = &s};
    assert_int_equal(cold_inventory_tmps(ct, &del, 0, NULL, NULL, &st), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.removed, 1);
    assert_int_equal(st.tmps_removed, 1);
    assert_int_equal(st.tmps_kept, 1);
    assert_false(present(stale));
    assert_true(present(young));
    cold_close(ct);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_usage_is_statvfs_of_the_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_writes_are_counted_by_cause, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_walk_reports_stale_temporaries_and_deletes_only_when_asked,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
