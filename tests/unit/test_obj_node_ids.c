/* test_obj_node_ids.c -- the node ids of replicas, interned per store.
 *
 * Every replica on a node points at the store's one copy of that node's id
 * (what lets a read compare node pointers instead of strings), counted by
 * the replicas that hold it: the copy goes when its last replica does
 * (removal of the objects, unmount of the node's segment) and comes back
 * when the node holds a replica again. A snapshot of a store with interned
 * ids is byte for byte the one its records replayed into a fresh store
 * give, and loads back to the same bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "obj_store_internal.h"

static void apply(obj_store *st, obj_record *r)
{
    assert_int_equal(obj_apply_record(st, r->type, r->encver, r->buf, r->len), SMP_OK);
    obj_record_free(r);
}

static void mount(obj_store *st, const char *id, const char *node)
{
    obj_record r = {0};
    assert_int_equal(obj_prepare_segment_mount(st, id, node, 1 << 20, &r), SMP_OK);
    apply(st, &r);
}

/* A complete object key with its memory replica (where the put placed it)
 * and a cold replica on node cold_node. */
static void put_object(obj_store *st, const char *key, const char *cold_node)
{
    obj_record r = {0};
    uint8_t sum[32] = {1};
    obj_put_params p = {key, 100, SMP_DATA_WEIGHT, "g", "t", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(st, &p, 1, NULL), SMP_OK);
    assert_int_equal(obj_prepare_put_end(st, key, sum, 1, &r), SMP_OK);
    apply(st, &r);
    obj_replica v[2];
    size_t n = 0;
    assert_int_equal(obj_object_replicas(st, key, v, 1, &n), SMP_OK);
    assert_int_equal(n, 1);
    v[1] = (obj_replica){.kind = SMP_REPLICA_COLD, .status = OBJ_REPLICA_COMPLETE,
                         .node = cold_node, .length = 100, .path = key};
    assert_int_equal(obj_prepare_set_replicas(st, key, v, 2, &r), SMP_OK);
    apply(st, &r);
}

/* The replicas of key, in order. */
static size_t reps_of(obj_store *st, const char *key, obj_replica *v)
{
    size_t n = 0;
    assert_int_equal(obj_object_replicas(st, key, v, 4, &n), SMP_OK);
    return n;
}

/* The references the store holds on node id `id` (0: no copy). */
static size_t refs_of(obj_store *st, const char *id)
{
    obj_node_name *e = NULL;
    HASH_FIND(hh, st->node_names, id, strlen(id), e);
    return e ? e->refs : 0;
}

typedef struct buf {
    uint8_t *p;
    size_t n;
} buf;

static int buf_write(void *ctx, const void *data, size_t len)
{
    buf *b = ctx;
    uint8_t *np = realloc(b->p, b->n + len);
    if (np == NULL) return SMP_ENOMEM;
    memcpy(np + b->n, data, len);
    b->p = np;
    b->n += len;
    return 0;
}

/* Replicas on the same node share one copy of its id, across objects and
 * kinds; each node's copy is counted by its replicas. */
static void test_replicas_on_a_node_share_its_id(void **state)
{
    (void)state;
    obj_store *st = NULL;
    assert_int_equal(obj_store_create(&st, NULL), SMP_OK);
    mount(st, "s0", "n0");
    put_object(st, "a", "n1");
    put_object(st, "b", "n0");
    obj_replica va[4], vb[4];
    assert_int_equal(reps_of(st, "a", va), 2);
    assert_int_equal(reps_of(st, "b", vb), 2);
    assert_string_equal(va[0].node, "n0");
    assert_ptr_equal(va[0].node, vb[0].node); /* memory replicas of a and b */
    assert_ptr_equal(vb[1].node, vb[0].node); /* b's cold replica, same node */
    assert_string_equal(va[1].node, "n1");
    assert_int_equal(refs_of(st, "n0"), 3);
    assert_int_equal(refs_of(st, "n1"), 1);
    assert_int_equal(HASH_COUNT(st->node_names), 2);
    obj_store_destroy(st);
}

/* The copy goes with the node's last replica (removal, unmount) and is made
 * again when the node holds a replica again (a node that re-registers). */
static void test_a_node_id_goes_with_its_last_replica(void **state)
{
    (void)state;
    obj_store *st = NULL;
    obj_record r = {0};
    assert_int_equal(obj_store_create(&st, NULL), SMP_OK);
    mount(st, "s0", "n0");
    put_object(st, "a", "n1");
    put_object(st, "b", "n1");
    assert_int_equal(obj_prepare_remove(st, "a", 2, &r), SMP_OK);
    apply(st, &r);
    assert_int_equal(refs_of(st, "n0"), 1);
    assert_int_equal(refs_of(st, "n1"), 1);
    /* the node's segment goes: its memory replicas and with them its id */
    assert_int_equal(obj_prepare_segment_unmount(st, "s0", &r), SMP_OK);
    apply(st, &r);
    assert_int_equal(refs_of(st, "n0"), 0);
    assert_int_equal(HASH_COUNT(st->node_names), 1);
    obj_replica v[4];
    assert_int_equal(reps_of(st, "b", v), 1);
    assert_string_equal(v[0].node, "n1");
    /* the node comes back with a new segment and holds replicas again */
    mount(st, "s1", "n0");
    put_object(st, "c", "n0");
    assert_int_equal(reps_of(st, "c", v), 2);
    assert_string_equal(v[0].node, "n0");
    assert_ptr_equal(v[0].node, v[1].node);
    assert_int_equal(refs_of(st, "n0"), 2);
    assert_int_equal(obj_prepare_remove(st, "b", 3, &r), SMP_OK);
    apply(st, &r);
    assert_int_equal(obj_prepare_remove(st, "c", 3, &r), SMP_OK);
    apply(st, &r);
    assert_null(st->node_names);
    obj_store_destroy(st);
}

/* A snapshot of interned replicas loads into a store whose replicas are
 * interned again, and saves to the same bytes. */
static void test_snapshot_bytes_unchanged(void **state)
{
    (void)state;
    obj_store *st = NULL, *back = NULL;
    buf a = {0}, b = {0};
    assert_int_equal(obj_store_create(&st, NULL), SMP_OK);
    mount(st, "s0", "n0");
    put_object(st, "a", "n1");
    put_object(st, "b", "n0");
    assert_int_equal(obj_store_save(st, buf_write, &a), SMP_OK);
    assert_int_equal(obj_store_create(&back, NULL), SMP_OK);
    assert_int_equal(obj_store_load(back, a.p, a.n), SMP_OK);
    assert_int_equal(obj_store_save(back, buf_write, &b), SMP_OK);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.p, b.p, a.n);
    assert_int_equal(refs_of(back, "n0"), 3);
    assert_int_equal(refs_of(back, "n1"), 1);
    free(a.p);
    free(b.p);
    obj_store_destroy(st);
    obj_store_destroy(back);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replicas_on_a_node_share_its_id),
        cmocka_unit_test(test_a_node_id_goes_with_its_last_replica),
        cmocka_unit_test(test_snapshot_bytes_unchanged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
