/* test_read_lease.c -- the master's read-lease table (read_lease.h): leases
 * counted per holder and lookup, given back by their holder only, ended
 * together when a holder's connection closes, expiring on their own, and a
 * holder that never gives back does not grow the table without bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "read_lease.h"
#include "store_plugin.h"

#define LEASE 10000

static int setup(void **state)
{
    *state = rlease_create();
    return *state == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    rlease_destroy(*state);
    return 0;
}

/* Two lookups by one holder are two leases to give back: the key stays
 * leased until the second release, and the end is the later lookup's. */
static void test_lookups_are_counted_per_holder(void **state)
{
    rlease_table *t = *state;
    uint64_t ends = 1;
    assert_int_equal(rlease_take(t, 1, "k", 100, LEASE), SMP_OK);
    assert_int_equal(rlease_take(t, 1, "k", 200, LEASE), SMP_OK);
    assert_int_equal(rlease_ends(t, "k", 300), 200 + LEASE);
    assert_int_equal(rlease_count(t, 300), 1);
    assert_int_equal(rlease_release(t, 1, "k", 300, &ends), SMP_OK);
    assert_int_equal(ends, 200 + LEASE); /* one lookup still holds it */
    assert_int_equal(rlease_release(t, 1, "k", 300, &ends), SMP_OK);
    assert_int_equal(ends, 0);
    assert_int_equal(rlease_ends(t, "k", 300), 0);
    assert_int_equal(rlease_count(t, 300), 0);
    rlease_stats st;
    rlease_get_stats(t, &st);
    assert_int_equal(st.taken, 2);
    assert_int_equal(st.released, 2);
    assert_int_equal(st.refused, 0);
}

/* A holder that took nothing on a key cannot end another holder's lease:
 * refused, and the key's end is unchanged. */
static void test_another_holder_cannot_release(void **state)
{
    rlease_table *t = *state;
    assert_int_equal(rlease_take(t, 1, "k", 100, LEASE), SMP_OK);
    assert_int_equal(rlease_release(t, 2, "k", 200, NULL), SMP_ENOTFOUND);
    assert_int_equal(rlease_release(t, 2, "other", 200, NULL), SMP_ENOTFOUND);
    assert_true(rlease_held(t, 1, "k", 200));
    assert_int_equal(rlease_ends(t, "k", 200), 100 + LEASE);
    rlease_stats st;
    rlease_get_stats(t, &st);
    assert_int_equal(st.refused, 2);
    assert_int_equal(st.released, 0);
}

/* Two holders on one key: the first one's release leaves the second's end. */
static void test_release_leaves_the_others_end(void **state)
{
    rlease_table *t = *state;
    uint64_t ends = 0;
    assert_int_equal(rlease_take(t, 1, "k", 500, LEASE), SMP_OK);
    assert_int_equal(rlease_take(t, 2, "k", 100, LEASE), SMP_OK);
    assert_int_equal(rlease_release(t, 1, "k", 600, &ends), SMP_OK);
    assert_int_equal(ends, 100 + LEASE);
    assert_false(rlease_held(t, 1, "k", 600));
    assert_true(rlease_held(t, 2, "k", 600));
}

typedef struct seen {
    int n;
    char keys[4][16];
    uint64_t ends[4];
} seen;

static void on_ended(void *arg, const char *key, uint64_t ends)
{
    seen *s = arg;
    if (s->n < 4) {
        snprintf(s->keys[s->n], sizeof(s->keys[0]), "%s", key);
        s->ends[s->n] = ends;
    }
    s->n++;
}

/* A closing holder ends all its leases at once and reports each key's new
 * end; another holder's lease on a shared key stays, a lease already
 * given back or expired is not reported. */
static void test_closing_holder_ends_its_leases(void **state)
{
    rlease_table *t = *state;
    seen s = {0};
    assert_int_equal(rlease_take(t, 7, "a", 100, LEASE), SMP_OK);
    assert_int_equal(rlease_take(t, 7, "b", 100, LEASE), SMP_OK);
    assert_int_equal(rlease_take(t, 7, "c", 100, 50), SMP_OK);   /* expired by 1000 */
    assert_int_equal(rlease_take(t, 7, "d", 100, LEASE), SMP_OK);
    assert_int_equal(rlease_release(t, 7, "d", 200, NULL), SMP_OK);
    assert_int_equal(rlease_take(t, 8, "b", 300, LEASE), SMP_OK);
    assert_int_equal(rlease_drop_holder(t, 7, 1000, on_ended, &s), 2);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.keys[0], "a");
    assert_int_equal(s.ends[0], 0);
    assert_string_equal(s.keys[1], "b");
    assert_int_equal(s.ends[1], 300 + LEASE);
    assert_int_equal(rlease_count(t, 1000), 1);
    assert_int_equal(rlease_drop_holder(t, 7, 1000, on_ended, &s), 0); /* nothing left */
    rlease_stats st;
    rlease_get_stats(t, &st);
    assert_int_equal(st.closed, 2);
}

/* An expired lease is not held: its release is refused and the key is
 * free, as it was before any release existed. */
static void test_expired_lease_is_gone(void **state)
{
    rlease_table *t = *state;
    assert_int_equal(rlease_take(t, 1, "k", 100, LEASE), SMP_OK);
    assert_int_equal(rlease_ends(t, "k", 100 + LEASE - 1), 100 + LEASE);
    assert_int_equal(rlease_ends(t, "k", 100 + LEASE), 0);
    assert_false(rlease_held(t, 1, "k", 100 + LEASE));
    assert_int_equal(rlease_release(t, 1, "k", 100 + LEASE, NULL), SMP_ENOTFOUND);
}

/* A holder that never gives back (an older client) reading a million
 * different keys, each lease long expired before the next thousand: the
 * table keeps about the live ones, not every key ever read. */
static void test_holder_that_never_releases_stays_bounded(void **state)
{
    rlease_table *t = *state;
    char key[32];
    for (uint64_t i = 0; i < 100000; i++) {
        snprintf(key, sizeof(key), "k/%llu", (unsigned long long)i);
        assert_int_equal(rlease_take(t, 1, key, i, 1000), SMP_OK);
    }
    assert_int_equal(rlease_count(t, 100000), 999); /* taken at 99001..99999 */
    /* What a close walks: at most twice the live leases, rounded up to a
     * power of two -- not the 100,000 keys read. */
    assert_true(rlease_holder_noted(t, 1) <= 4096);
    seen s = {0};
    size_t ended = rlease_drop_holder(t, 1, 100000, on_ended, &s);
    assert_int_equal(ended, 999);
    assert_true(s.n == 999);
    assert_int_equal(rlease_count(t, 100000), 0);
}

/* A key read again after its lease expired, by a holder whose list is
 * full and still names the key from the first read: the compaction that
 * makes room finds the new lease live and keeps it (the key is not freed
 * under the lease being taken). */
static void test_key_read_again_when_the_list_is_compacted(void **state)
{
    rlease_table *t = *state;
    char key[32];
    assert_int_equal(rlease_take(t, 1, "again", 0, 10), SMP_OK);
    for (int i = 1; i < 8; i++) { /* fill the first list (8 keys) */
        snprintf(key, sizeof(key), "k/%d", i);
        assert_int_equal(rlease_take(t, 1, key, 0, 10), SMP_OK);
    }
    assert_int_equal(rlease_holder_noted(t, 1), 8);
    assert_int_equal(rlease_take(t, 1, "again", 100, LEASE), SMP_OK); /* compacts */
    assert_int_equal(rlease_holder_noted(t, 1), 2); /* the old entry names the new lease too */
    assert_true(rlease_held(t, 1, "again", 100));
    assert_int_equal(rlease_ends(t, "again", 100), 100 + LEASE);
    assert_int_equal(rlease_release(t, 1, "again", 100, NULL), SMP_OK);
    assert_int_equal(rlease_take(t, 1, "zero", 100, 0), SMP_EINVAL);
    assert_int_equal(rlease_count(t, 100), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lookups_are_counted_per_holder, setup, teardown),
        cmocka_unit_test_setup_teardown(test_another_holder_cannot_release, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_leaves_the_others_end, setup, teardown),
        cmocka_unit_test_setup_teardown(test_closing_holder_ends_its_leases, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expired_lease_is_gone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_holder_that_never_releases_stays_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_read_again_when_the_list_is_compacted, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
