/* test_log_limit.c -- a few log lines a window (host_shim/log_limit.c).
 *
 * Pins: the first `burst` lines of a window pass and the rest are counted;
 * the next window hands the count back once, for the summing line, and
 * lets `burst` lines through again; a window is measured from its first
 * line, not from the last; flush hands back what is counted and not said,
 * once; a clock at 0 still opens a window. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "log_limit.h"

static void test_burst_then_counted_then_summed_up(void **state)
{
    (void)state;
    log_limit l = {.burst = 2, .window_ms = 100};
    uint64_t summary = 99;
    assert_int_equal(log_limit_admit(&l, 1000, &summary), 1);
    assert_int_equal(summary, 0);
    assert_int_equal(log_limit_admit(&l, 1001, &summary), 1);
    assert_int_equal(log_limit_admit(&l, 1002, &summary), 0);
    assert_int_equal(log_limit_admit(&l, 1099, &summary), 0); /* the window began at 1000 */
    assert_int_equal(summary, 0);
    assert_int_equal(log_limit_admit(&l, 1100, &summary), 1); /* a new window */
    assert_int_equal(summary, 2);
    assert_int_equal(log_limit_admit(&l, 1101, &summary), 1);
    assert_int_equal(summary, 0);                              /* said once */
    assert_int_equal(log_limit_admit(&l, 1102, &summary), 0);
    assert_int_equal(log_limit_flush(&l), 1);
    assert_int_equal(log_limit_flush(&l), 0);
    assert_int_equal(log_limit_admit(&l, 5000, &summary), 1); /* nothing left to sum up */
    assert_int_equal(summary, 0);
}

static void test_a_clock_at_zero_opens_a_window(void **state)
{
    (void)state;
    log_limit l = {.burst = 1, .window_ms = 60000};
    uint64_t summary = 0;
    assert_int_equal(log_limit_admit(&l, 0, &summary), 1);
    assert_int_equal(log_limit_admit(&l, 0, &summary), 0); /* the same window, not a new one */
    assert_int_equal(log_limit_admit(&l, 30000, &summary), 0);
    assert_int_equal(summary, 0);
    assert_int_equal(log_limit_flush(&l), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_then_counted_then_summed_up),
        cmocka_unit_test(test_a_clock_at_zero_opens_a_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
