/* test_node_cold_faults.c -- the list of cold files a node's readers found
 * corrupt (host_shim/node/node_cold_faults.h): each name once, oldest first,
 * bounded, moved out by a take and noted again by a caller that could not
 * deliver, and safe between the data server's thread and the poll thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <pthread.h>

#include "node_cold_faults.h"

static void name_of(int i, char out[COLD_NAME_MAX])
{
    snprintf(out, COLD_NAME_MAX, "%064x.cold", i);
}

static void test_each_name_once_oldest_first(void **state)
{
    (void)state;
    cold_faults *f = cold_faults_new();
    char a[COLD_NAME_MAX], b[COLD_NAME_MAX], out[4][COLD_NAME_MAX];
    assert_non_null(f);
    name_of(1, a);
    name_of(2, b);
    assert_int_equal(cold_faults_note(f, a), 1);
    assert_int_equal(cold_faults_note(f, b), 1);
    assert_int_equal(cold_faults_note(f, a), 0); /* held already */
    assert_int_equal(cold_faults_take(f, out, 1), 1);
    assert_string_equal(out[0], a);
    assert_int_equal(cold_faults_take(f, out, 4), 1);
    assert_string_equal(out[0], b);
    assert_int_equal(cold_faults_take(f, out, 4), 0);
    /* Taken, then not delivered: noted again, and held once more. */
    assert_int_equal(cold_faults_note(f, a), 1);
    assert_int_equal(cold_faults_take(f, out, 4), 1);
    assert_string_equal(out[0], a);
    cold_faults_free(f);
}

static void test_bad_arguments_and_the_bound(void **state)
{
    (void)state;
    cold_faults *f = cold_faults_new();
    char name[COLD_NAME_MAX], long_name[COLD_NAME_MAX + 8];
    static char out[COLD_FAULTS_MAX + 1][COLD_NAME_MAX];
    assert_non_null(f);
    assert_int_equal(cold_faults_note(NULL, "x.cold"), 0);
    assert_int_equal(cold_faults_note(f, NULL), 0);
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    assert_int_equal(cold_faults_note(f, long_name), 0);
    assert_int_equal(cold_faults_take(NULL, out, 4), 0);
    assert_int_equal(cold_faults_take(f, NULL, 4), 0);
    for (int i = 0; i < COLD_FAULTS_MAX; i++) {
        name_of(i, name);
        assert_int_equal(cold_faults_note(f, name), 1);
    }
    name_of(COLD_FAULTS_MAX, name);
    assert_int_equal(cold_faults_note(f, name), 0); /* full: dropped */
    assert_int_equal(cold_faults_take(f, out, COLD_FAULTS_MAX + 1), COLD_FAULTS_MAX);
    name_of(COLD_FAULTS_MAX - 1, name);
    assert_string_equal(out[COLD_FAULTS_MAX - 1], name);
    cold_faults_free(f);
    cold_faults_free(NULL);
}

typedef struct noter {
    cold_faults *f;
    int from;
} noter;

static void *note_many(void *arg)
{
    noter *n = arg;
    char name[COLD_NAME_MAX];
    for (int round = 0; round < 200; round++)
        for (int i = 0; i < 8; i++) {
            name_of(n->from + i, name);
            cold_faults_note(n->f, name);
        }
    return NULL;
}

/* Two threads note while a third takes: every name taken is one of theirs,
 * and none is held twice at a time. */
static void test_noted_and_taken_from_other_threads(void **state)
{
    (void)state;
    cold_faults *f = cold_faults_new();
    noter a = {f, 0}, b = {f, 100};
    pthread_t ta, tb;
    static char out[COLD_FAULTS_MAX][COLD_NAME_MAX];
    assert_non_null(f);
    assert_int_equal(pthread_create(&ta, NULL, note_many, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, note_many, &b), 0);
    size_t taken = 0;
    for (int i = 0; i < 2000; i++) {
        size_t k = cold_faults_take(f, out, COLD_FAULTS_MAX);
        assert_true(k <= 16);
        for (size_t x = 0; x < k; x++) {
            unsigned v = 0;
            assert_int_equal(sscanf(out[x], "%64x.cold", &v), 1);
            assert_true(v < 8 || (v >= 100 && v < 108));
            for (size_t y = 0; y < x; y++) assert_string_not_equal(out[x], out[y]);
        }
        taken += k;
    }
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    taken += cold_faults_take(f, out, COLD_FAULTS_MAX);
    assert_true(taken >= 16); /* each name was noted at least once */
    cold_faults_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_name_once_oldest_first),
        cmocka_unit_test(test_bad_arguments_and_the_bound),
        cmocka_unit_test(test_noted_and_taken_from_other_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
