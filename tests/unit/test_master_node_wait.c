/* test_master_node_wait.c -- how long a restarted master waits for a node
 * holding a segment before it gives the node up, and how long a node waits
 * for the answer to an inventory page.
 *
 * The wait ends node.timeout_ms after serving began, or after the last word
 * from the node when that came later (an inventory page, its registration
 * request): a node whose large inventory is still arriving is not silent. A
 * word from before serving began (a node heard in an earlier term of an HA
 * master) does not lengthen it. A page's answer is waited for as long as a
 * registration of the files sent so far. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "master_internal.h"
#include "node_runtime.h"

#define START 1000000u
#define TIMEOUT 3000u

/* Never heard from: given up node.timeout_ms after serving began, as before
 * inventory pages counted. */
static void test_a_node_never_heard_from_is_waited_for_the_timeout(void **state)
{
    (void)state;
    assert_int_equal(master_node_wait_ends_ms(START, 0, TIMEOUT), START + TIMEOUT);
}

/* Each page moves the end of the wait: pages at 2.9 s and 5.8 s keep a
 * node waited for until 8.8 s, nearly three times the timeout. */
static void test_each_inventory_page_moves_the_end_of_the_wait(void **state)
{
    (void)state;
    uint64_t end = master_node_wait_ends_ms(START, START + 2900, TIMEOUT);
    assert_int_equal(end, START + 5900);
    end = master_node_wait_ends_ms(START, START + 5800, TIMEOUT);
    assert_int_equal(end, START + 8800);
}

/* A word from before this start (an earlier term) counts as none. */
static void test_a_word_from_before_the_start_does_not_count(void **state)
{
    (void)state;
    assert_int_equal(master_node_wait_ends_ms(START, START - 1, TIMEOUT), START + TIMEOUT);
    assert_int_equal(master_node_wait_ends_ms(START, START, TIMEOUT), START + TIMEOUT);
}

/* The page timeout grows with the files sent: 10 s for the first pages of
 * a small inventory, 60 s once 100,000 files went, never past the
 * registration's ceiling. */
static void test_a_page_waits_as_long_as_a_registration_of_its_files(void **state)
{
    (void)state;
    assert_int_equal(node_inventory_page_call_ms(1600), 10000 + 800);
    assert_int_equal(node_inventory_page_call_ms(100000), 60000);
    assert_int_equal(node_inventory_page_call_ms(100000), node_register_call_ms(100000));
    assert_int_equal(node_inventory_page_call_ms(SIZE_MAX), NODE_REGISTER_CALL_MAX_MS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_node_never_heard_from_is_waited_for_the_timeout),
        cmocka_unit_test(test_each_inventory_page_moves_the_end_of_the_wait),
        cmocka_unit_test(test_a_word_from_before_the_start_does_not_count),
        cmocka_unit_test(test_a_page_waits_as_long_as_a_registration_of_its_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
