/* test_obj_released.c -- what an apply lets go of (obj_store_released.c):
 * the memory ranges a REMOVE or PUT_END frees and the cold files it drops
 * are told after the apply, only while tracking is on, only for an apply
 * that succeeded, and a range the new state still holds is not. */
#include "obj_test_store.h"

typedef struct told_range {
    char node[32], segment[32];
    uint64_t offset, length;
} told_range;

typedef struct told_file {
    char key[32], node[32], path[32];
} told_file;

typedef struct told {
    told_range ranges[8];
    size_t nranges;
    told_file files[8];
    size_t nfiles;
} told;

static void on_range(void *ctx, const char *node, const char *segment, uint64_t offset,
                     uint64_t length)
{
    told *t = ctx;
    assert_true(t->nranges < 8);
    told_range *r = &t->ranges[t->nranges++];
    snprintf(r->node, sizeof(r->node), "%s", node);
    snprintf(r->segment, sizeof(r->segment), "%s", segment);
    r->offset = offset;
    r->length = length;
}

static void on_file(void *ctx, const char *key, const char *node, const char *path)
{
    told *t = ctx;
    assert_true(t->nfiles < 8);
    told_file *f = &t->files[t->nfiles++];
    snprintf(f->key, sizeof(f->key), "%s", key);
    snprintf(f->node, sizeof(f->node), "%s", node);
    snprintf(f->path, sizeof(f->path), "%s", path);
}

/* What obj_store_take_released tells now (applied as given). */
static told take(obj_store *st, int applied)
{
    told t = {0};
    obj_released_ops ops = {on_range, on_file, &t};
    obj_store_take_released(st, applied, &ops);
    return t;
}

/* The offset of key's memory replica. */
static uint64_t memory_offset(obj_store *st, const char *key)
{
    obj_replica reps[4];
    size_t n = 0;
    assert_int_equal(obj_object_replicas(st, key, reps, 4, &n), SMP_OK);
    for (size_t i = 0; i < n; i++)
        if (reps[i].kind == SMP_REPLICA_MEMORY) return reps[i].offset;
    fail_msg("%s has no memory replica", key);
    return 0;
}

/* Give key (with one memory replica) a cold replica on node at path too. */
static void add_cold(obj_store *st, const char *key, const char *node, const char *path)
{
    obj_replica reps[4];
    size_t n = 0;
    assert_int_equal(obj_object_replicas(st, key, reps, 4, &n), SMP_OK);
    assert_int_equal(n, 1);
    reps[1] = (obj_replica){SMP_REPLICA_COLD, OBJ_REPLICA_COMPLETE, node, NULL, 0, 0, path};
    reps[1].length = reps[0].length;
    obj_record r = {0};
    assert_int_equal(obj_prepare_set_replicas(st, key, reps, 2, &r), SMP_OK);
    apply_rec(st, &r);
}

/* A store with segment s0 on n0 and two objects: "a" (300 bytes, also
 * cold on n1 at /c/a) and "b" (100 bytes). */
static obj_store *two_objects(void)
{
    obj_store *st = new_store(NULL);
    mount(st, "s0", "n0", 4096);
    assert_int_equal(put_full(st, "a", 300, "", "", 1), SMP_OK);
    assert_int_equal(put_full(st, "b", 100, "", "", 1), SMP_OK);
    add_cold(st, "a", "n1", "/c/a");
    return st;
}

static void test_a_remove_tells_its_range_and_its_file(void **state)
{
    (void)state;
    obj_store *st = two_objects();
    uint64_t off = memory_offset(st, "a");
    uint64_t used = used_of(st);
    obj_store_track_released(st);
    remove_key(st, "a", 2);
    told t = take(st, 1);
    assert_int_equal(t.nranges, 1);
    assert_string_equal(t.ranges[0].node, "n0");
    assert_string_equal(t.ranges[0].segment, "s0");
    assert_int_equal(t.ranges[0].offset, off);
    assert_int_equal(t.ranges[0].length, used - 128); /* a's whole extent; b keeps 128 */
    assert_int_equal(t.nfiles, 1);
    assert_string_equal(t.files[0].key, "a");
    assert_string_equal(t.files[0].node, "n1");
    assert_string_equal(t.files[0].path, "/c/a");
    /* told once: tracking is off and nothing is left */
    t = take(st, 1);
    assert_int_equal(t.nranges + t.nfiles, 0);
    remove_key(st, "b", 3);
    t = take(st, 1);
    assert_int_equal(t.nranges + t.nfiles, 0);
    assert_int_equal(used_of(st), 0);
    obj_store_destroy(st);
}

static void test_nothing_is_told_untracked_or_after_a_failed_apply(void **state)
{
    (void)state;
    obj_store *st = two_objects();
    remove_key(st, "b", 2); /* not tracked */
    told t = take(st, 1);
    assert_int_equal(t.nranges + t.nfiles, 0);
    obj_store_track_released(st);
    remove_key(st, "a", 3);
    t = take(st, 0); /* the apply is taken as failed: forgotten, not told */
    assert_int_equal(t.nranges + t.nfiles, 0);
    t = take(st, 1);
    assert_int_equal(t.nranges + t.nfiles, 0);
    obj_store_destroy(st);
}

/* A replica list rewritten: the replica left out is told, the one kept is
 * not -- its range is still the object's. */
static void test_a_rewritten_replica_list_tells_only_what_it_drops(void **state)
{
    (void)state;
    obj_store *st = two_objects();
    uint64_t off = memory_offset(st, "a");
    obj_replica reps[4];
    size_t n = 0;
    assert_int_equal(obj_object_replicas(st, "a", reps, 4, &n), SMP_OK);
    assert_int_equal(n, 2);
    size_t mem = reps[0].kind == SMP_REPLICA_MEMORY ? 0 : 1;
    obj_record r = {0};
    /* the cold copy dropped, the memory one kept */
    obj_store_track_released(st);
    assert_int_equal(obj_prepare_set_replicas(st, "a", &reps[mem], 1, &r), SMP_OK);
    apply_rec(st, &r);
    told t = take(st, 1);
    assert_int_equal(t.nranges, 0);
    assert_int_equal(t.nfiles, 1);
    assert_string_equal(t.files[0].path, "/c/a");
    /* the memory copy dropped, the new cold one kept (an eviction's shape) */
    add_cold(st, "a", "n1", "/c/a2");
    assert_int_equal(obj_object_replicas(st, "a", reps, 4, &n), SMP_OK);
    size_t cold = reps[0].kind == SMP_REPLICA_COLD ? 0 : 1;
    obj_store_track_released(st);
    assert_int_equal(obj_prepare_set_replicas(st, "a", &reps[cold], 1, &r), SMP_OK);
    apply_rec(st, &r);
    t = take(st, 1);
    assert_int_equal(t.nfiles, 0);
    assert_int_equal(t.nranges, 1);
    assert_int_equal(t.ranges[0].offset, off);
    obj_store_destroy(st);
}

/* A new incarnation replaces the object: the old one's range is told, the
 * new one's (in use) is not. */
static void test_a_replaced_incarnation_tells_its_old_range(void **state)
{
    (void)state;
    obj_store *st = two_objects();
    uint64_t old = memory_offset(st, "b");
    obj_put_params p = {"b", 100, SMP_DATA_KV, "", "", 0, 1, NULL, 0};
    uint8_t sum[32] = {7};
    obj_record r = {0};
    assert_int_equal(obj_put_start(st, &p, 5, NULL), SMP_OK);
    obj_store_track_released(st);
    assert_int_equal(obj_prepare_put_end(st, "b", sum, 5, &r), SMP_OK);
    apply_rec(st, &r);
    told t = take(st, 1);
    assert_int_not_equal(memory_offset(st, "b"), old);
    assert_int_equal(t.nranges, 1);
    assert_int_equal(t.ranges[0].offset, old);
    assert_int_equal(t.ranges[0].length, 128);
    assert_int_equal(t.nfiles, 0);
    obj_store_destroy(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_remove_tells_its_range_and_its_file),
        cmocka_unit_test(test_nothing_is_told_untracked_or_after_a_failed_apply),
        cmocka_unit_test(test_a_rewritten_replica_list_tells_only_what_it_drops),
        cmocka_unit_test(test_a_replaced_incarnation_tells_its_old_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
