/* test_obj_sl.c -- the object store's string-keyed skip list.
 *
 * A list appends a key above every key without searching (its tail per
 * level: how a snapshot's records, saved in order, load, into the objects'
 * hashed list and each group's ordered member list); the tails must follow
 * every insert and removal so that the order, the lookups and the walk stay
 * those of a plain skip list, whichever mix of appends, inserts in the
 * middle and removals (of the last key too) came before. An ordered list
 * starts with a short head that grows when a node rises above it; the first
 * nodes then link back to the new head, and the tails move with it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "obj_store_internal.h"

#define N_KEYS 600

static char keys[N_KEYS][16];

/* Walk sl at every level: each level is sorted, the level-0 walk holds
 * exactly the n keys of want[] (sorted), and each tail is its level's last
 * node. */
static void check_list(const obj_sl *sl, const char **want, size_t n)
{
    size_t i = 0;
    for (obj_sl_node *x = obj_sl_after(sl, NULL, 0); x; x = x->next[0], i++) {
        assert_true(i < n);
        assert_string_equal(x->key, want[i]);
        assert_ptr_equal(obj_sl_get(sl, want[i]), x->val);
    }
    assert_int_equal(i, n);
    assert_int_equal(sl->count, n);
    for (int lv = 0; lv < sl->head->level; lv++) {
        obj_sl_node *last = NULL;
        for (obj_sl_node *x = sl->head->next[lv]; x; x = x->next[lv]) {
            if (last) assert_true(strcmp(last->key, x->key) < 0);
            last = x;
        }
        assert_ptr_equal(sl->tail[lv], last);
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Appends, then keys in the middle, then removals of the last key and of
 * others, then appends again: after each step the list is the sorted set.
 * For a hashed list (init: obj_sl_init) or an ordered one. */
static void appends_inserts_and_removals(int (*init)(obj_sl *))
{
    obj_sl sl;
    const char *want[N_KEYS];
    size_t n = 0;
    assert_int_equal(init(&sl), SMP_OK);
    for (int i = 0; i < N_KEYS; i++) snprintf(keys[i], sizeof(keys[i]), "k%05d", i * 2);

    for (int i = 0; i < N_KEYS / 2; i++) { /* ascending: the append path */
        assert_int_equal(obj_sl_put(&sl, keys[i], keys[i]), SMP_OK);
        want[n++] = keys[i];
    }
    check_list(&sl, want, n);

    static char mid[50][16];
    for (int i = 0; i < 50; i++) { /* odd keys between the even ones: searched */
        snprintf(mid[i], sizeof(mid[i]), "k%05d", i * 6 + 1);
        assert_int_equal(obj_sl_put(&sl, mid[i], mid[i]), SMP_OK);
        want[n++] = mid[i];
    }
    qsort(want, n, sizeof(want[0]), cmp_str);
    check_list(&sl, want, n);

    /* Remove the last key 20 times (each time the new last), then every
     * third key. */
    for (int r = 0; r < 20; r++) {
        assert_ptr_equal(obj_sl_del(&sl, want[n - 1]), want[n - 1]);
        n--;
        check_list(&sl, want, n);
    }
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % 3 == 0) {
            assert_non_null(obj_sl_del(&sl, want[i]));
        } else {
            want[kept++] = want[i];
        }
    }
    n = kept;
    check_list(&sl, want, n);

    for (int i = N_KEYS / 2; i < N_KEYS; i++) { /* appends after the removals */
        assert_int_equal(obj_sl_put(&sl, keys[i], keys[i]), SMP_OK);
        want[n++] = keys[i];
    }
    check_list(&sl, want, n);

    /* Empty it from the end, then one append into the empty list. */
    while (n > 0) {
        assert_non_null(obj_sl_del(&sl, want[n - 1]));
        n--;
    }
    check_list(&sl, want, 0);
    assert_int_equal(obj_sl_put(&sl, keys[0], keys[0]), SMP_OK);
    want[n++] = keys[0];
    check_list(&sl, want, n);
    obj_sl_fini(&sl);
}

static void test_appends_inserts_and_removals_keep_order_and_tails(void **state)
{
    (void)state;
    appends_inserts_and_removals(obj_sl_init);
}

static void test_ordered_appends_inserts_and_removals_keep_order_and_tails(void **state)
{
    (void)state;
    appends_inserts_and_removals(obj_sl_init_ordered);
}

/* A list without the hash (a group's members) keeps its order and its
 * tails the same way, keys given in any order. */
static void test_ordered_list_keeps_order_and_tails(void **state)
{
    (void)state;
    obj_sl sl;
    const char *want[3] = {"a", "b", "c"};
    assert_int_equal(obj_sl_init_ordered(&sl), SMP_OK);
    assert_int_equal(obj_sl_put(&sl, "c", "c"), SMP_OK);
    assert_int_equal(obj_sl_put(&sl, "a", "a"), SMP_OK);
    assert_int_equal(obj_sl_put(&sl, "b", "b"), SMP_OK);
    check_list(&sl, want, 3);
    obj_sl_fini(&sl);
}

/* An ordered list's head starts short and grows as nodes rise above it;
 * removing the first keys afterwards (each linked back to the head at its
 * levels) keeps every level sorted, and so do inserts before them. */
static void test_ordered_head_grows(void **state)
{
    (void)state;
    obj_sl sl;
    const char *want[N_KEYS];
    assert_int_equal(obj_sl_init_ordered(&sl), SMP_OK);
    assert_int_equal(sl.head->level, OBJ_SL_ORDERED_LEVELS);
    for (int i = 0; i < N_KEYS; i++) snprintf(keys[i], sizeof(keys[i]), "k%05d", i);
    for (int i = N_KEYS - 1; i >= 0; i -= 2) assert_int_equal(obj_sl_put(&sl, keys[i], keys[i]), SMP_OK);
    for (int i = 0; i < N_KEYS; i += 2) assert_int_equal(obj_sl_put(&sl, keys[i], keys[i]), SMP_OK);
    assert_true(sl.head->level > OBJ_SL_ORDERED_LEVELS);
    assert_true(sl.level > OBJ_SL_ORDERED_LEVELS);
    for (int i = 0; i < N_KEYS; i++) want[i] = keys[i];
    check_list(&sl, want, N_KEYS);
    for (int i = 0; i < N_KEYS / 2; i++) assert_ptr_equal(obj_sl_del(&sl, keys[i]), keys[i]);
    check_list(&sl, want + N_KEYS / 2, N_KEYS / 2);
    for (int i = 0; i < N_KEYS / 2; i++) assert_int_equal(obj_sl_put(&sl, keys[i], keys[i]), SMP_OK);
    check_list(&sl, want, N_KEYS);
    obj_sl_fini(&sl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_appends_inserts_and_removals_keep_order_and_tails),
        cmocka_unit_test(test_ordered_appends_inserts_and_removals_keep_order_and_tails),
        cmocka_unit_test(test_ordered_list_keeps_order_and_tails),
        cmocka_unit_test(test_ordered_head_grows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
