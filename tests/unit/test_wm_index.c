/* test_wm_index.c -- the revision store's open-addressed index (wm_index.c).
 *
 * The index takes its hashes from the caller, which is the seam these tests
 * use: items given distinct hashes show that a lookup compares an item only
 * when its stored hash matches (a miss compares none), items given one hash
 * (forced collisions) and hashes chosen to start at the last slot (runs that
 * wrap around the end) show that every item stays reachable through growth
 * and removals, and a random mix of inserts and removals over a handful of
 * hashes is checked against a plain array after every step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "weight_management.h"
#include "wm_index.h"

/* Items are ints; a key is the int's value. eq counts its calls. */
static size_t eq_calls;

static int int_eq(const void *item, const void *key)
{
    eq_calls++;
    return *(const int *)item == *(const int *)key;
}

/* A hash unlike its neighbours' (splitmix64's finalizer). */
static uint64_t spread(uint64_t x)
{
    x += UINT64_C(0x9E3779B97F4A7C15);
    x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
    return x ^ (x >> 31);
}

/* Every slot that is not empty holds an item; count matches; no run cuts an
 * item off from its home (each item is found from its own hash). */
static void assert_consistent(const wm_index *ix, const int *vals, const uint64_t *hashes,
                              const int *present, size_t n)
{
    size_t used = 0;
    for (size_t i = 0; i <= ix->mask; i++)
        if (ix->slots[i].item != NULL) used++;
    assert_int_equal(used, ix->count);
    assert_true(ix->count <= (ix->mask + 1) / 4 * 3);
    size_t want = 0;
    for (size_t i = 0; i < n; i++) {
        const void *got = wm_index_find(ix, hashes[i], int_eq, &vals[i]);
        if (present[i]) {
            want++;
            assert_ptr_equal(got, &vals[i]);
        } else {
            assert_null(got);
        }
    }
    assert_int_equal(want, ix->count);
}

/* 20,000 items inserted one by one: the table doubles from 64 slots, stays
 * at most three quarters full, and finds every item after each growth. */
static void test_growth_keeps_every_item(void **state)
{
    (void)state;
    enum { N = 20000 };
    wm_index ix;
    int *vals = malloc(N * sizeof(*vals));
    assert_int_equal(wm_index_init(&ix), WM_OK);
    assert_int_equal(ix.mask + 1, 64);
    size_t grown = 0, slots = ix.mask + 1;
    for (int i = 0; i < N; i++) {
        vals[i] = i;
        assert_int_equal(wm_index_insert(&ix, spread((uint64_t)i), &vals[i]), WM_OK);
        if (ix.mask + 1 != slots) {
            assert_int_equal(ix.mask + 1, slots * 2);
            slots = ix.mask + 1;
            grown++;
            for (int j = 0; j <= i; j++)
                assert_ptr_equal(wm_index_find(&ix, spread((uint64_t)j), int_eq, &vals[j]),
                                 &vals[j]);
        }
        assert_true(ix.count <= (ix.mask + 1) / 4 * 3);
    }
    assert_int_equal(ix.count, N);
    assert_int_equal(ix.mask + 1, 32768); /* 20,000 > 3/4 of 16,384 */
    assert_int_equal(grown, 9);
    /* A reservation makes room once; inserts up to it do not move the slots. */
    assert_int_equal(wm_index_reserve(&ix, 40000), WM_OK);
    wm_index_slot *before = ix.slots;
    assert_int_equal(ix.mask + 1, 65536);
    assert_int_equal(wm_index_reserve(&ix, 30000), WM_OK);
    assert_ptr_equal(ix.slots, before);
    wm_index_fini(&ix);
    assert_null(ix.slots);
    wm_index_fini(&ix); /* a zeroed index: no-op */
    free(vals);
}

/* Tables of 2 MiB and more are mappings of their own (huge pages), smaller
 * ones come from calloc: growth across that size (65,536 -> 131,072 ->
 * 262,144 slots, the old table released by whichever allocator made it), a
 * reservation straight to a mapped table, removals in one and fini keep
 * every item (and ASan and valgrind see every table released as made). */
static void test_tables_across_the_mapped_size(void **state)
{
    (void)state;
    enum { N = 100000 };
    wm_index ix;
    int *vals = malloc(N * sizeof(*vals));
    assert_non_null(vals);
    assert_int_equal(wm_index_init(&ix), WM_OK);
    for (int i = 0; i < N; i++) {
        vals[i] = i;
        assert_int_equal(wm_index_insert(&ix, spread((uint64_t)i), &vals[i]), WM_OK);
    }
    assert_int_equal(ix.mask + 1, 262144); /* 100,000 > 3/4 of 131,072 */
    for (int i = 0; i < N; i += 2)
        assert_int_equal(wm_index_remove(&ix, spread((uint64_t)i), &vals[i]), 1);
    for (int i = 0; i < N; i++) {
        const void *got = wm_index_find(&ix, spread((uint64_t)i), int_eq, &vals[i]);
        if (i % 2 == 0)
            assert_null(got);
        else
            assert_ptr_equal(got, &vals[i]);
    }
    wm_index_fini(&ix);
    assert_int_equal(wm_index_init(&ix), WM_OK);
    assert_int_equal(wm_index_reserve(&ix, N), WM_OK);
    assert_int_equal(ix.mask + 1, 262144);
    for (size_t i = 0; i <= ix.mask; i++) assert_null(ix.slots[i].item); /* zeroed */
    for (int i = 0; i < N; i++)
        assert_int_equal(wm_index_insert(&ix, spread((uint64_t)i), &vals[i]), WM_OK);
    assert_int_equal(ix.mask + 1, 262144);
    assert_ptr_equal(wm_index_find(&ix, spread(77), int_eq, &vals[77]), &vals[77]);
    wm_index_fini(&ix);
    free(vals);
}

/* With distinct hashes a hit compares exactly one item and a miss none,
 * however long the runs it walks. */
static void test_probe_compares_only_matching_hashes(void **state)
{
    (void)state;
    enum { N = 3000 };
    wm_index ix;
    int vals[N];
    assert_int_equal(wm_index_init(&ix), WM_OK);
    for (int i = 0; i < N; i++) {
        vals[i] = i;
        assert_int_equal(wm_index_insert(&ix, spread((uint64_t)i), &vals[i]), WM_OK);
    }
    eq_calls = 0;
    for (int i = 0; i < N; i++)
        assert_ptr_equal(wm_index_find(&ix, spread((uint64_t)i), int_eq, &vals[i]), &vals[i]);
    assert_int_equal(eq_calls, N);
    eq_calls = 0;
    for (int i = N; i < 4 * N; i++) {
        int key = i;
        assert_null(wm_index_find(&ix, spread((uint64_t)i), int_eq, &key));
    }
    assert_int_equal(eq_calls, 0);
    /* A key whose hash matches an item's but which is another key: compared,
     * not found. */
    int other = -1;
    eq_calls = 0;
    assert_null(wm_index_find(&ix, spread(7), int_eq, &other));
    assert_int_equal(eq_calls, 1);
    wm_index_fini(&ix);
}

/* 400 items under one hash, then 400 more whose home is the last slot (their
 * run wraps around to slot 0): every item found, removals from the middle,
 * the front and the back of the runs leave the rest reachable, and a
 * removed item or one indexed under another hash is not removed again. */
static void test_forced_collisions_and_wrapping_runs(void **state)
{
    (void)state;
    enum { N = 800 };
    wm_index ix;
    int vals[N], present[N];
    uint64_t hashes[N];
    assert_int_equal(wm_index_init(&ix), WM_OK);
    assert_int_equal(wm_index_reserve(&ix, N), WM_OK); /* slots fixed from here */
    uint64_t last = 0;
    while (wm_index_home(&ix, last) != ix.mask) last++;
    for (int i = 0; i < N; i++) {
        vals[i] = i;
        hashes[i] = i < N / 2 ? UINT64_C(42) : last;
        present[i] = 1;
        assert_int_equal(wm_index_insert(&ix, hashes[i], &vals[i]), WM_OK);
    }
    assert_consistent(&ix, vals, hashes, present, N);
    /* One lookup of the last colliding item compares every item of its hash
     * before it (and nothing of the other run's hash). */
    eq_calls = 0;
    assert_ptr_equal(wm_index_find(&ix, 42, int_eq, &vals[N / 2 - 1]), &vals[N / 2 - 1]);
    assert_int_equal(eq_calls, N / 2);
    for (int i = 0; i < N; i += 3) {
        assert_int_equal(wm_index_remove(&ix, hashes[i], &vals[i]), 1);
        present[i] = 0;
        assert_int_equal(wm_index_remove(&ix, hashes[i], &vals[i]), 0);
    }
    assert_consistent(&ix, vals, hashes, present, N);
    /* An item removed under a hash it is not indexed under stays. */
    assert_int_equal(wm_index_remove(&ix, 42, &vals[N - 1]), 0);
    assert_int_equal(wm_index_remove(&ix, last, &vals[1]), 0);
    for (int i = 0; i < N; i++)
        if (present[i]) {
            assert_int_equal(wm_index_remove(&ix, hashes[i], &vals[i]), 1);
            present[i] = 0;
            if (i % 97 == 0) assert_consistent(&ix, vals, hashes, present, N);
        }
    assert_int_equal(ix.count, 0);
    for (size_t i = 0; i <= ix.mask; i++) assert_null(ix.slots[i].item);
    wm_index_fini(&ix);
}

/* 200,000 random inserts, removals and lookups of 600 items over 16
 * hashes, against a plain array; the whole index checked every 1,000
 * steps. */
static void test_random_mix_against_an_array(void **state)
{
    (void)state;
    enum { N = 600, STEPS = 200000 };
    wm_index ix;
    int vals[N], present[N];
    uint64_t hashes[N];
    uint64_t rnd = 12345;
    assert_int_equal(wm_index_init(&ix), WM_OK);
    for (int i = 0; i < N; i++) {
        vals[i] = i;
        hashes[i] = spread((uint64_t)(i % 16));
        present[i] = 0;
    }
    for (int s = 0; s < STEPS; s++) {
        rnd = spread(rnd);
        int i = (int)(rnd % N);
        switch ((rnd >> 32) % 3) {
        case 0:
            if (!present[i]) {
                assert_int_equal(wm_index_insert(&ix, hashes[i], &vals[i]), WM_OK);
                present[i] = 1;
            }
            break;
        case 1:
            assert_int_equal(wm_index_remove(&ix, hashes[i], &vals[i]), present[i]);
            present[i] = 0;
            break;
        default:
            assert_ptr_equal(wm_index_find(&ix, hashes[i], int_eq, &vals[i]),
                             present[i] ? &vals[i] : NULL);
        }
        if (s % 1000 == 999) assert_consistent(&ix, vals, hashes, present, N);
    }
    wm_index_fini(&ix);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_growth_keeps_every_item),
        cmocka_unit_test(test_tables_across_the_mapped_size),
        cmocka_unit_test(test_probe_compares_only_matching_hashes),
        cmocka_unit_test(test_forced_collisions_and_wrapping_runs),
        cmocka_unit_test(test_random_mix_against_an_array),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
