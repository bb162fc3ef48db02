/* test_obj_hold.c -- which records in flight refuse reads of their key.
 *
 * A record held between its append and its apply (obj_hold_record) makes
 * obj_get_replica_list answer SMP_EBUSY when applying it frees bytes a
 * reader could be given (a removal, a replacement, a release of memory).
 * Recording a verified cold copy keeps every memory replica as it is: the
 * memory replica stays readable while that record is made durable -- the
 * cold copy of a published manifest must not make weight_get BUSY (eviction
 * plans still skip every held key). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "obj_test_store.h"


/* The record of k's replicas plus a cold one (what ensure_cold appends);
 * with drop_memory, without its memory replica (what release appends). */
static void prepare_replicas(obj_store *st, int drop_memory, obj_record *out)
{
    obj_replica v[4];
    size_t n = 0;
    assert_int_equal(obj_object_replicas(st, "k", v, 3, &n), SMP_OK);
    assert_int_equal(n, 1);
    v[n++] = (obj_replica){.kind = SMP_REPLICA_COLD, .status = OBJ_REPLICA_COMPLETE, .node = "n0",
                           .length = 500, .path = "k.cold"};
    const obj_replica *from = drop_memory ? &v[1] : v;
    assert_int_equal(obj_prepare_set_replicas(st, "k", from, drop_memory ? 1 : n, out), SMP_OK);
}

/* While the record that adds a cold replica is in flight, the memory
 * replica is served; once applied, both are. */
static void test_cold_copy_in_flight_keeps_memory_readable(void **state)
{
    (void)state;
    obj_store *st = store_with_object();
    obj_record r = {0};
    obj_held *held = NULL;
    obj_replica reps[4];
    size_t n = 0;
    prepare_replicas(st, 0, &r);
    assert_int_equal(obj_hold_record(st, &r, &held), SMP_OK);
    assert_non_null(held);
    assert_int_equal(obj_get_replica_list(st, "k", 10, 0, reps, 4, &n), SMP_OK);
    assert_int_equal(n, 1);
    assert_int_equal(reps[0].kind, SMP_REPLICA_MEMORY);
    assert_int_equal(obj_apply_held(st, held), SMP_OK);
    obj_release_hold(st, held);
    obj_record_free(&r);
    assert_int_equal(obj_get_replica_list(st, "k", 12, 0, reps, 4, &n), SMP_OK);
    assert_int_equal(n, 2);
    obj_store_destroy(st);
}

/* A record that drops the memory replica refuses reads while in flight,
 * also when a cold-copy record holds the key at the same time. */
static void test_memory_release_in_flight_refuses_reads(void **state)
{
    (void)state;
    obj_store *st = store_with_object();
    obj_record cold = {0}, rel = {0};
    obj_held *hc = NULL, *hr = NULL;
    obj_replica reps[4];
    size_t n = 0;
    prepare_replicas(st, 0, &cold);
    prepare_replicas(st, 1, &rel);
    assert_int_equal(obj_hold_record(st, &cold, &hc), SMP_OK);
    assert_int_equal(obj_hold_record(st, &rel, &hr), SMP_OK);
    assert_int_equal(obj_get_replica_list(st, "k", 10, 0, reps, 4, &n), SMP_EBUSY);
    obj_release_hold(st, hr);
    assert_int_equal(obj_get_replica_list(st, "k", 10, 0, reps, 4, &n), SMP_OK);
    obj_release_hold(st, hc);
    obj_record_free(&cold);
    obj_record_free(&rel);
    obj_store_destroy(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cold_copy_in_flight_keeps_memory_readable),
        cmocka_unit_test(test_memory_release_in_flight_refuses_reads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
