/* test_master_scrub_join.c -- the ranges of a SCRUB task are sorted by
 * offset and each run of adjacent ranges sent as one (master_scrub_join):
 * what is zeroed is exactly what was freed, in fewer pairs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "master_internal.h"

static void test_nothing_and_one_range_stay_as_they_are(void **state)
{
    (void)state;
    uint64_t one[2] = {4096, 64};
    assert_int_equal(master_scrub_join(NULL, 0), 0);
    assert_int_equal(master_scrub_join(one, 1), 1);
    assert_int_equal(one[0], 4096);
    assert_int_equal(one[1], 64);
}

/* Freed out of order (64 clients' removes in one group commit): sorted,
 * each run joined, the gaps kept. */
static void test_adjacent_ranges_in_any_order_are_joined(void **state)
{
    (void)state;
    uint64_t p[] = {
        192, 64,    /* run 1: 0..320 */
        1024, 128,  /* run 2: 1024..1216 */
        0, 128,
        128, 64,
        4096, 64,   /* alone */
        1152, 64,
        256, 64,
    };
    size_t n = master_scrub_join(p, sizeof(p) / sizeof(p[0]) / 2);
    assert_int_equal(n, 3);
    uint64_t want[] = {0, 320, 1024, 192, 4096, 64};
    for (size_t i = 0; i < 6; i++) assert_int_equal(p[i], want[i]);
}

/* Ranges that touch no other are all kept, in offset order. */
static void test_ranges_with_gaps_are_only_sorted(void **state)
{
    (void)state;
    uint64_t p[] = {640, 64, 0, 64, 320, 128};
    assert_int_equal(master_scrub_join(p, 3), 3);
    uint64_t want[] = {0, 64, 320, 128, 640, 64};
    for (size_t i = 0; i < 6; i++) assert_int_equal(p[i], want[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nothing_and_one_range_stay_as_they_are),
        cmocka_unit_test(test_adjacent_ranges_in_any_order_are_joined),
        cmocka_unit_test(test_ranges_with_gaps_are_only_sorted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
