/* test_host_bulk.c -- the feed of host_bulk.h: a thread that readies a
 * buffer's pages ahead of the one thread filling it.
 *
 * What the feed has readied is read back with mincore(): a page of an
 * anonymous mapping is resident once it has been mapped, and not before.
 * The tests only ever write below what host_bulk_feed_wait returned, as a
 * filler must. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "host_bulk.h"
#include "resident_pages.h"

/* A filler going through a buffer of 2.5 leads in steps: each wait returns
 * at least what was asked, never past the end, at most half a lead past what
 * was asked (it is asked again before the thread runs out of room); what it
 * returned is resident and reads zero; what the filler wrote stays (the
 * thread never writes); a wait past the end is the whole buffer. */
static void test_feed_hands_over_ready_pages_in_order(void **state)
{
    (void)state;
    const size_t lead = HOST_BULK_FEED_LEAD;
    const size_t len = 2 * lead + lead / 2 + 12345;
    unsigned char *buf = host_bulk_alloc(len);
    assert_non_null(buf);
    host_bulk_feed *f = host_bulk_feed_start(buf, len);
    assert_non_null(f);

    size_t filled = 0, calls = 0;
    while (filled < len) {
        size_t want = filled + 3 * 4096 + 17 < len ? filled + 3 * 4096 + 17 : len;
        size_t got = host_bulk_feed_wait(f, want);
        calls++;
        assert_true(got >= want);
        assert_true(got <= len);
        assert_true(got <= want + lead / 2);
        size_t page = page_bytes();
        size_t from = filled / page * page;
        assert_int_equal(resident_pages(buf, from, got - from), pages_of(got - from));
        for (size_t i = filled; i < got; i += 1024) assert_int_equal(buf[i], 0);
        memset(buf + filled, (int)(calls & 0xff) | 1, got - filled);
        filled = got;
    }
    assert_int_equal(host_bulk_feed_wait(f, len + 4096), len);
    host_bulk_feed_stop(f);
    /* every byte was handed over once and kept what the filler wrote */
    for (size_t i = 0; i < len; i += 4096) assert_int_not_equal(buf[i], 0);
    assert_int_not_equal(buf[len - 1], 0);
    host_bulk_free(buf, len);
}

/* The thread stays within its lead of the filler: stopped (and so joined)
 * after one wait near the start of a buffer of many leads, it has readied
 * what that wait returned and at most a lead and a window past what it
 * asked for; the rest of the buffer was never touched. */
static void test_feed_stays_within_its_lead(void **state)
{
    (void)state;
    const size_t lead = HOST_BULK_FEED_LEAD;
    const size_t len = 8 * lead;
    unsigned char *buf = host_bulk_alloc(len);
    assert_non_null(buf);
    host_bulk_feed *f = host_bulk_feed_start(buf, len);
    assert_non_null(f);
    const size_t want = 5000;
    size_t got = host_bulk_feed_wait(f, want);
    assert_true(got >= want);
    /* Time for a thread that ignored its lead to run far past it (no
     * figure depends on it: a thread within its lead waits all along). */
    usleep(300 * 1000);
    host_bulk_feed_stop(f);
    size_t page = page_bytes();
    size_t most = (want + lead + HOST_BULK_AHEAD + page - 1) / page * page;
    assert_int_equal(resident_pages(buf, 0, got), pages_of(got));
    assert_int_equal(resident_pages(buf, most, len - most), 0);
    host_bulk_free(buf, len);
}

/* A buffer shorter than a window is readied whole at the first wait;
 * stopping a feed whose thread is done, and stopping NULL, are fine. */
static void test_feed_of_a_small_buffer(void **state)
{
    (void)state;
    const size_t len = 3 * 4096;
    unsigned char *buf = host_bulk_alloc(len);
    assert_non_null(buf);
    host_bulk_feed *f = host_bulk_feed_start(buf, len);
    assert_non_null(f);
    assert_int_equal(host_bulk_feed_wait(f, 1), len);
    assert_int_equal(resident_pages(buf, 0, len), 3);
    memset(buf, 0x77, len);
    host_bulk_feed_stop(f);
    host_bulk_feed_stop(NULL);
    assert_int_equal(buf[len - 1], 0x77);
    host_bulk_free(buf, len);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_feed_hands_over_ready_pages_in_order),
        cmocka_unit_test(test_feed_stays_within_its_lead),
        cmocka_unit_test(test_feed_of_a_small_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
