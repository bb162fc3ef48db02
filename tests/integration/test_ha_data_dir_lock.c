/* test_ha_data_dir_lock.c -- one data_dir, one master.
 *
 * Two masters writing one file OpLog interleave their records, and the next
 * start refuses the log: every acknowledged write after the second master
 * came up is lost. The master therefore holds an exclusive flock on
 * <data_dir>/LOCK for its whole life. These tests start real store_master
 * processes on one data_dir and check that the second one stops at once,
 * naming the first one's pid, while the first keeps serving; and that the
 * lock goes with its holder, even with a SIGKILL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

typedef struct fixture {
    hx_master first;
    hx_master second;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    if (f == NULL || hx_init(&f->first, "lock-first", NULL) < 0 ||
        hx_init(&f->second, "lock-second", NULL) < 0)
        return -1;
    /* The second master runs the first one's config: same data_dir, same
     * socket, same segment. Only its log (its own directory) differs. */
    FILE *in = fopen(f->first.config, "r");
    FILE *out = fopen(f->second.config, "w");
    if (in == NULL || out == NULL) return -1;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0) fwrite(buf, 1, n, out);
    fclose(in);
    fclose(out);
    snprintf(f->second.socket, sizeof(f->second.socket), "%s", f->first.socket);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    hx_cleanup(&f->second);
    hx_cleanup(&f->first);
    free(f);
    return 0;
}

/* One status call answers: the master is alive and serving. */
static void assert_serving(const hx_master *m)
{
    kvc *c = hx_client(m);
    assert_non_null(c);
    kvc_status st;
    assert_int_equal(kvc_status_get(c, &st), 0);
    kvc_close(c);
}

/* A second master on a data_dir in use exits 1 at once and names the
 * holder's pid; the first one goes on serving and its records stay
 * readable after a restart. */
static void test_second_master_on_one_data_dir_is_refused(void **state)
{
    fixture *f = *state;
    assert_int_equal(hx_start(&f->first, 20000), 0);
    kvc *c = hx_client(&f->first);
    assert_non_null(c);
    assert_int_equal(kvc_put_bytes(c, "kv/before", "abc", 3, SMP_DATA_KV, NULL, 0, NULL), 0);
    kvc_close(c);

    assert_int_equal(hx_run_to_exit(&f->second, 10000), 1);
    char needle[128];
    snprintf(needle, sizeof(needle), "is in use by another store_master (pid %ld)",
             (long)f->first.pid);
    if (!hx_log_contains(&f->second, needle)) fail_msg("no \"%s\" in %s", needle, f->second.log);

    assert_serving(&f->first);
    c = hx_client(&f->first);
    assert_non_null(c);
    assert_int_equal(kvc_put_bytes(c, "kv/after", "defg", 4, SMP_DATA_KV, NULL, 0, NULL), 0);
    kvc_close(c);
    assert_int_equal(hx_stop(&f->first), 0);

    /* The log the first master wrote replays whole: nothing was interleaved. */
    assert_int_equal(hx_start(&f->first, 20000), 0);
    c = hx_client(&f->first);
    assert_non_null(c);
    int exists = 0;
    assert_int_equal(kvc_exists(c, "kv/before", &exists), 0);
    assert_true(exists);
    assert_int_equal(kvc_exists(c, "kv/after", &exists), 0);
    assert_true(exists);
    kvc_close(c);
}

/* The lock belongs to the process: after a clean stop or a SIGKILL of the
 * holder, the next master on the data_dir starts. */
static void test_lock_goes_with_its_holder(void **state)
{
    fixture *f = *state;
    assert_int_equal(hx_start(&f->first, 20000), 0);
    assert_int_equal(hx_stop(&f->first), 0);
    assert_int_equal(hx_start(&f->second, 20000), 0);
    assert_serving(&f->second);
    hx_kill(&f->second);
    assert_int_equal(hx_start(&f->first, 20000), 0);
    assert_serving(&f->first);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_second_master_on_one_data_dir_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lock_goes_with_its_holder, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
