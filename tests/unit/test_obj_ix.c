/* test_obj_ix.c -- the exact-key index of the store's hashed skip lists
 * (obj_store_hash.c): open addressing with linear probes, the key's hash
 * stored beside its node, removal by shifting back, growth by a drain of
 * the old table spread over later inserts and removals.
 *
 * Each test drives a hashed obj_sl (how the store uses the index) and after
 * every step checks the index against the set of keys it must hold: every
 * key found, every removed or never-put key absent, the table at most 3/4
 * full, every entry reachable from its home slot without a free slot in
 * between, and the counts right. Collisions are forced through the index's
 * hash seam (a hash that puts every key at one home, or at a few, or at the
 * table's last slot so that probes wrap). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "obj_store_internal.h"

#define N_KEYS 5000

static char keys[N_KEYS][24];
static int present[N_KEYS];

/* Every key at home slot 0 of any table: one run of collisions. */
static uint64_t hash_same(const char *key, size_t len)
{
    (void)key;
    (void)len;
    return 0;
}

/* Four homes (the key's last digit mod 4), all colliding in 64 bits. */
static uint64_t hash_four(const char *key, size_t len)
{
    return (uint64_t)(key[len - 1] & 3);
}

/* Every key at the last slot of any table (all bits set): each probe
 * sequence wraps to slot 0. */
static uint64_t hash_last(const char *key, size_t len)
{
    (void)key;
    (void)len;
    return UINT64_MAX;
}

/* Entry t[i] (hash h) is reachable: no free slot between its home and i. */
static void check_reachable(const obj_ix_slot *t, size_t cap, size_t i)
{
    size_t mask = cap - 1;
    for (size_t j = (size_t)t[i].hash & mask; j != i; j = (j + 1) & mask)
        assert_non_null(t[j].node);
}

/* The index of sl holds exactly the present keys, correctly placed. */
static void check_index(const obj_sl *sl, size_t n_keys)
{
    const obj_ix *ix = &sl->ix;
    size_t live = 0, in_new = 0, in_old = 0;
    for (size_t k = 0; k < n_keys; k++) {
        obj_sl_node *n = obj_ix_find(ix, keys[k]);
        if (present[k]) {
            assert_non_null(n);
            assert_string_equal(n->key, keys[k]);
            assert_ptr_equal(n->val, &present[k]);
            assert_ptr_equal(obj_sl_get(sl, keys[k]), &present[k]);
            live++;
        } else {
            assert_null(n);
            assert_null(obj_sl_get(sl, keys[k]));
        }
    }
    assert_int_equal(sl->count, live);
    assert_int_equal(ix->count + ix->old_count, live);
    assert_true(ix->cap == 0 || (ix->cap & (ix->cap - 1)) == 0);
    assert_true(ix->count * 4 <= ix->cap * 3);
    for (size_t i = 0; i < ix->cap; i++) {
        if (ix->slots[i].node == NULL) continue;
        in_new++;
        assert_int_equal(ix->slots[i].hash, obj_ix_key_hash(ix, ix->slots[i].node->key));
        check_reachable(ix->slots, ix->cap, i);
    }
    assert_int_equal(in_new, ix->count);
    if (ix->old == NULL) {
        assert_int_equal(ix->old_count, 0);
        return;
    }
    for (size_t i = 0; i < ix->old_cap; i++) {
        obj_sl_node *n = ix->old[i].node;
        if (n == NULL || n->key == NULL) continue; /* free, or a moved mark */
        check_reachable(ix->old, ix->old_cap, i);
        assert_ptr_equal(obj_ix_find(ix, n->key), n);
        in_old++;
    }
    assert_int_equal(in_old, ix->old_count);
}

static void make_keys(void)
{
    for (size_t k = 0; k < N_KEYS; k++) {
        snprintf(keys[k], sizeof(keys[k]), "weights/t/k%07zu", (k * 7919) % N_KEYS);
        present[k] = 0;
    }
}

static void put_key(obj_sl *sl, size_t k)
{
    assert_int_equal(obj_sl_put(sl, keys[k], &present[k]), SMP_OK);
    present[k] = 1;
}

static void del_key(obj_sl *sl, size_t k)
{
    assert_ptr_equal(obj_sl_del(sl, keys[k]), present[k] ? &present[k] : NULL);
    present[k] = 0;
}

/* Growth from empty to N_KEYS keys: the table doubles at 3/4, the old one
 * drains over the next inserts (lookups find a key in either meanwhile) and
 * is freed; a replaced value takes no slot. */
static void test_growth_drains_the_old_table(void **state)
{
    (void)state;
    obj_sl sl;
    make_keys();
    assert_int_equal(obj_sl_init(&sl), SMP_OK);
    check_index(&sl, N_KEYS);
    int drains_seen = 0;
    for (size_t k = 0; k < N_KEYS; k++) {
        put_key(&sl, k);
        if (sl.ix.old != NULL) drains_seen++;
        if (k % 97 == 0 || sl.ix.old != NULL) check_index(&sl, k + 1);
    }
    assert_true(drains_seen > 0);
    /* the same keys again: values replaced, nothing grows */
    size_t cap = sl.ix.cap;
    for (size_t k = 0; k < N_KEYS; k++) put_key(&sl, k);
    assert_int_equal(sl.ix.cap, cap);
    check_index(&sl, N_KEYS);
    /* enough inserts after the last growth: no old table left */
    assert_null(sl.ix.old);
    obj_sl_fini(&sl);
}

/* Every key at one home (a 64-bit hash collision for every pair): lookups
 * compare the keys, removals from the middle of the run shift the rest
 * back, and absent keys stay absent. */
static void test_forced_collisions_and_removal(void **state)
{
    (void)state;
    uint64_t (*seams[])(const char *, size_t) = {hash_same, hash_four, hash_last};
    for (size_t s = 0; s < sizeof(seams) / sizeof(seams[0]); s++) {
        obj_sl sl;
        const size_t n = 300;
        make_keys();
        assert_int_equal(obj_sl_init(&sl), SMP_OK);
        sl.ix.hash = seams[s];
        for (size_t k = 0; k < n; k++) put_key(&sl, k);
        check_index(&sl, N_KEYS);
        for (size_t k = 0; k < n; k += 3) del_key(&sl, k); /* from the middle of runs */
        check_index(&sl, N_KEYS);
        for (size_t k = n; k-- > 0;)
            if (k % 3 == 1) del_key(&sl, k);
        check_index(&sl, N_KEYS);
        for (size_t k = 0; k < n; k += 3) put_key(&sl, k); /* back into shifted runs */
        check_index(&sl, N_KEYS);
        for (size_t k = 0; k < n; k++) del_key(&sl, k);
        check_index(&sl, N_KEYS);
        assert_int_equal(sl.count, 0);
        obj_sl_fini(&sl);
    }
}

/* Removals while an old table drains: a key still in the old table leaves a
 * moved mark there (lookups of the keys after it go on), a key already moved
 * shifts out of the new one; the drain completes and frees the old table. */
static void test_removal_during_a_drain(void **state)
{
    (void)state;
    uint64_t (*seams[])(const char *, size_t) = {obj_ix_hash_default, hash_four};
    for (size_t s = 0; s < sizeof(seams) / sizeof(seams[0]); s++) {
        obj_sl sl;
        make_keys();
        assert_int_equal(obj_sl_init(&sl), SMP_OK);
        sl.ix.hash = seams[s];
        size_t k = 0;
        while (sl.ix.old == NULL || sl.ix.cap < 1024) put_key(&sl, k++);
        assert_non_null(sl.ix.old);
        size_t removed = 0;
        for (size_t j = 0; j < k && sl.ix.old != NULL; j += 2) {
            del_key(&sl, j);
            removed++;
            check_index(&sl, k);
        }
        assert_true(removed > 0);
        assert_null(sl.ix.old);
        check_index(&sl, k);
        obj_sl_fini(&sl);
    }
}

/* An index sized at once for n keys (a snapshot load) takes them without a
 * growth; sizing a non-empty index is refused and changes nothing. */
static void test_presize_takes_n_without_growth(void **state)
{
    (void)state;
    obj_sl sl;
    make_keys();
    assert_int_equal(obj_sl_init(&sl), SMP_OK);
    assert_int_equal(obj_ix_presize(&sl.ix, 3000), SMP_OK);
    size_t cap = sl.ix.cap;
    assert_true(cap * 3 / 4 >= 3000 && cap / 2 * 3 / 4 < 3000);
    for (size_t k = 0; k < 3000; k++) {
        put_key(&sl, k);
        assert_null(sl.ix.old);
    }
    assert_int_equal(sl.ix.cap, cap);
    assert_int_equal(obj_ix_presize(&sl.ix, 100000), SMP_ESTATE);
    assert_int_equal(sl.ix.cap, cap);
    check_index(&sl, N_KEYS);
    obj_sl_fini(&sl);
}

/* Tables of 2 MiB and more are mappings of their own (huge pages), smaller
 * ones come from calloc: growth across that size (65,536 -> 131,072 ->
 * 262,144 slots, each old table drained and released by whichever
 * allocator made it) and a presize straight to a mapped table keep every
 * key (and ASan and valgrind see every table released as made). */
static void test_tables_across_the_mapped_size(void **state)
{
    (void)state;
    enum { N = 100000 };
    static char big[N][16];
    static int val[N];
    obj_sl sl;
    for (size_t k = 0; k < N; k++) snprintf(big[k], sizeof(big[k]), "m/%06zu", k);
    for (int round = 0; round < 2; round++) {
        assert_int_equal(obj_sl_init(&sl), SMP_OK);
        if (round == 1) {
            assert_int_equal(obj_ix_presize(&sl.ix, N), SMP_OK);
            assert_int_equal(sl.ix.cap, 262144);
            for (size_t i = 0; i < sl.ix.cap; i++) assert_null(sl.ix.slots[i].node);
        }
        for (size_t k = 0; k < N; k++) assert_int_equal(obj_sl_put(&sl, big[k], &val[k]), SMP_OK);
        assert_int_equal(sl.ix.cap, 262144);
        assert_int_equal(sl.ix.count + sl.ix.old_count, N);
        for (size_t k = 0; k < N; k += 997) assert_ptr_equal(obj_sl_get(&sl, big[k]), &val[k]);
        for (size_t k = 0; k < N; k += 2) assert_ptr_equal(obj_sl_del(&sl, big[k]), &val[k]);
        assert_null(obj_ix_find(&sl.ix, big[0]));
        assert_ptr_equal(obj_ix_find(&sl.ix, big[1])->val, &val[1]);
        obj_sl_fini(&sl);
    }
}

/* A walk in key order that removes as it goes (what a prefix removal does)
 * keeps the index and the list in step. */
static void test_walk_removing_every_other(void **state)
{
    (void)state;
    obj_sl sl;
    make_keys();
    assert_int_equal(obj_sl_init(&sl), SMP_OK);
    for (size_t k = 0; k < 2000; k++) put_key(&sl, k);
    int odd = 0;
    for (obj_sl_node *x = obj_sl_after(&sl, NULL, 0); x;) {
        obj_sl_node *nx = x->next[0];
        if (odd) {
            int *p = obj_sl_unlink(&sl, x);
            *p = 0;
        }
        odd = !odd;
        x = nx;
    }
    check_index(&sl, 2000);
    assert_int_equal(sl.count, 1000);
    obj_sl_fini(&sl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_growth_drains_the_old_table),
        cmocka_unit_test(test_forced_collisions_and_removal),
        cmocka_unit_test(test_removal_during_a_drain),
        cmocka_unit_test(test_presize_takes_n_without_growth),
        cmocka_unit_test(test_walk_removing_every_other),
        cmocka_unit_test(test_tables_across_the_mapped_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
