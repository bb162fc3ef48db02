/* test_obj_seg.c -- the object store's segment allocator (obj_store_index.c):
 * the free-extent array a segment keeps, and how it grows.
 *
 * Every memory replica reserved on a segment (a put, or a snapshot load
 * placing each object's replica where the snapshot says) first makes room
 * in the array (obj_seg_ensure) so that the reservation itself never
 * allocates. The array must grow geometrically: grown to the exact need,
 * a load of 200,000 objects reallocated it once per object. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "obj_store_internal.h"

/* 20,000 ranges reserved one after another, each after an ensure of one
 * more allocation (what a snapshot load does per object): the array's
 * capacity changes a logarithmic number of times, always keeps room for
 * the next allocation, and the ranges are all allocated. */
static void test_ensure_grows_the_free_array_geometrically(void **state)
{
    (void)state;
    enum { N = 20000 };
    obj_segment *s = obj_segment_new("seg", "node", (uint64_t)N * OBJ_ALIGN);
    assert_non_null(s);
    size_t changes = 0, cap = s->capfree;
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(obj_seg_ensure(s, 1), SMP_OK);
        if (s->capfree != cap) {
            changes++;
            cap = s->capfree;
        }
        assert_true(s->capfree >= s->nalloc + 3);
        assert_int_equal(obj_seg_reserve(s, (uint64_t)i * OBJ_ALIGN, OBJ_ALIGN), SMP_OK);
    }
    assert_int_equal(s->nalloc, N);
    assert_int_equal(s->used, (uint64_t)N * OBJ_ALIGN);
    assert_true(changes <= 16); /* 4 -> 2^15 by doubling; was one per range */
    uint64_t off;
    assert_int_not_equal(obj_seg_alloc(s, OBJ_ALIGN, &off), SMP_OK); /* full */
    obj_segment_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ensure_grows_the_free_array_geometrically),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
