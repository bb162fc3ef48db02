/* test_obj_info.c -- obj_object_info_replicas, the one-lookup answer behind
 * the plugins' object_get.
 *
 * It must say what obj_object_info and obj_object_replicas say of the same
 * key, asked separately: for a complete object (its info, every replica
 * whatever its status, their count even past the caller's room), for a put
 * in flight (its info with complete 0, no replica), for an unknown key
 * (SMP_ENOTFOUND, nothing), and refuse bad arguments (SMP_EINVAL) without
 * touching the store. The store's readable version (behind the plugins'
 * objects_version) stays while only questions are asked, and moves with
 * every change an answer depends on: a replica dropped, an object
 * completed or removed, a segment unmounted, a node's state (the master's
 * obj_readable_changed). Its loss version (behind objects_loss_version)
 * moves only with the changes that can take a complete replica away, and
 * stays when objects are completed or gain replicas. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "obj_store.h"

static void apply(obj_store *st, obj_record *r)
{
    assert_int_equal(obj_apply_record(st, r->type, r->encver, r->buf, r->len), SMP_OK);
    obj_record_free(r);
}

/* A store with one segment, a complete 500-byte object "k" with its memory
 * replica and a cold one, and a put of "p" in flight. */
static obj_store *store_with_objects(void)
{
    obj_store *st = NULL;
    obj_record r = {0};
    uint8_t sum[32] = {7};
    assert_int_equal(obj_store_create(&st, NULL), SMP_OK);
    assert_int_equal(obj_prepare_segment_mount(st, "s0", "n0", 8192, &r), SMP_OK);
    apply(st, &r);
    obj_put_params k = {"k", 500, SMP_DATA_WEIGHT, "g", "t1", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(st, &k, 1, NULL), SMP_OK);
    assert_int_equal(obj_prepare_put_end(st, "k", sum, 1, &r), SMP_OK);
    apply(st, &r);
    obj_replica v[2];
    size_t n = 0;
    assert_int_equal(obj_object_replicas(st, "k", v, 1, &n), SMP_OK);
    assert_int_equal(n, 1);
    v[1] = (obj_replica){.kind = SMP_REPLICA_COLD, .status = OBJ_REPLICA_COMPLETE, .node = "n1",
                         .length = 500, .path = "k.cold"};
    assert_int_equal(obj_prepare_set_replicas(st, "k", v, 2, &r), SMP_OK);
    apply(st, &r);
    obj_put_params p = {"p", 100, SMP_DATA_KV, "", "t1", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(st, &p, 2, NULL), SMP_OK);
    return st;
}

/* info must be what obj_object_info fills for the same key. */
static void assert_same_info(const smp_object_info *a, const smp_object_info *b)
{
    assert_string_equal(a->key, b->key);
    assert_int_equal(a->size, b->size);
    assert_int_equal(a->data_type, b->data_type);
    assert_int_equal(a->complete, b->complete);
    assert_int_equal(a->hard_pinned, b->hard_pinned);
    assert_int_equal(a->memory_replicas_readable, b->memory_replicas_readable);
    assert_int_equal(a->cold_replicas_readable, b->cold_replicas_readable);
    assert_memory_equal(a->checksum, b->checksum, 32);
}

/* A complete object: its info and both replicas, in the order
 * obj_object_replicas gives them; a caller with room for one gets one and
 * the count of two. */
static void test_complete_object_answers_info_and_replicas(void **state)
{
    (void)state;
    obj_store *st = store_with_objects();
    smp_object_info want = {.struct_size = sizeof(want)}, got = {.struct_size = sizeof(got)};
    obj_replica rw[4], rg[4];
    size_t nw = 0, ng = 99;
    assert_int_equal(obj_object_info(st, "k", &want), SMP_OK);
    assert_int_equal(obj_object_replicas(st, "k", rw, 4, &nw), SMP_OK);
    assert_int_equal(obj_object_info_replicas(st, "k", &got, rg, 4, &ng), SMP_OK);
    assert_same_info(&got, &want);
    assert_int_equal(got.complete, 1);
    assert_int_equal(got.memory_replicas_readable, 1);
    assert_int_equal(got.cold_replicas_readable, 1);
    assert_int_equal(ng, 2);
    assert_int_equal(nw, 2);
    for (size_t i = 0; i < ng; i++) {
        assert_int_equal(rg[i].kind, rw[i].kind);
        assert_int_equal(rg[i].status, rw[i].status);
        assert_string_equal(rg[i].node, rw[i].node);
    }
    ng = 0;
    assert_int_equal(obj_object_info_replicas(st, "k", &got, rg, 1, &ng), SMP_OK);
    assert_int_equal(ng, 2);
    assert_int_equal(rg[0].kind, rw[0].kind);
    obj_store_destroy(st);
}

/* A put in flight is the put's info (complete 0) with no replica; an unknown
 * key is SMP_ENOTFOUND with no replica. */
static void test_put_in_flight_and_unknown_key(void **state)
{
    (void)state;
    obj_store *st = store_with_objects();
    smp_object_info want = {.struct_size = sizeof(want)}, got = {.struct_size = sizeof(got)};
    obj_replica r[4];
    size_t n = 99;
    assert_int_equal(obj_object_info(st, "p", &want), SMP_OK);
    assert_int_equal(obj_object_info_replicas(st, "p", &got, r, 4, &n), SMP_OK);
    assert_same_info(&got, &want);
    assert_int_equal(got.complete, 0);
    assert_int_equal(n, 0);
    n = 99;
    assert_int_equal(obj_object_info_replicas(st, "nothing", &got, r, 4, &n), SMP_ENOTFOUND);
    assert_int_equal(n, 0);
    obj_store_destroy(st);
}

/* NULL key, info or count, or no room pointer with room, are refused, and
 * the store is as it was. */
static void test_bad_arguments_are_refused(void **state)
{
    (void)state;
    obj_store *st = store_with_objects();
    smp_object_info info = {.struct_size = sizeof(info)};
    obj_replica r[2];
    size_t n = 0;
    assert_int_equal(obj_object_info_replicas(st, NULL, &info, r, 2, &n), SMP_EINVAL);
    assert_int_equal(obj_object_info_replicas(st, "k", NULL, r, 2, &n), SMP_EINVAL);
    assert_int_equal(obj_object_info_replicas(st, "k", &info, NULL, 2, &n), SMP_EINVAL);
    assert_int_equal(obj_object_info_replicas(st, "k", &info, r, 2, NULL), SMP_EINVAL);
    assert_true(obj_exists(st, "k"));
    assert_int_equal(obj_object_replicas(st, "k", r, 2, &n), SMP_OK);
    assert_int_equal(n, 2);
    obj_store_destroy(st);
}

/* The readable version moves with every change of an object or its
 * replicas and with nothing else: questions and a put started (an
 * in-flight put is not readable before or after) leave it. */
static void test_readable_version_moves_with_every_change(void **state)
{
    (void)state;
    obj_store *st = store_with_objects();
    obj_record r = {0};
    smp_object_info info = {.struct_size = sizeof(info)};
    obj_replica v[4];
    size_t n = 0;
    uint64_t v0 = obj_readable_version(st);
    assert_true(v0 > 0);

    assert_int_equal(obj_object_info_replicas(st, "k", &info, v, 4, &n), SMP_OK);
    assert_int_equal(obj_object_replicas(st, "k", v, 4, &n), SMP_OK);
    obj_put_params q = {"q", 100, SMP_DATA_KV, "", "t1", 0, 0, NULL, 0};
    assert_int_equal(obj_put_start(st, &q, 3, NULL), SMP_OK);
    assert_int_equal(obj_readable_version(st), v0);

    /* The cold replica of k dropped: k has one readable replica left. */
    assert_int_equal(n, 2);
    assert_int_equal(obj_prepare_set_replicas(st, "k", v, 1, &r), SMP_OK);
    apply(st, &r);
    uint64_t v1 = obj_readable_version(st);
    assert_true(v1 > v0);
    assert_int_equal(obj_object_info_replicas(st, "k", &info, v, 4, &n), SMP_OK);
    assert_int_equal(info.cold_replicas_readable, 0);

    /* The put of p ended: p is complete now. */
    uint8_t sum[32] = {9};
    assert_int_equal(obj_prepare_put_end(st, "p", sum, 2, &r), SMP_OK);
    apply(st, &r);
    uint64_t v2 = obj_readable_version(st);
    assert_true(v2 > v1);

    /* k removed. */
    assert_int_equal(obj_prepare_remove_unguarded(st, "k", 1, &r), SMP_OK);
    apply(st, &r);
    uint64_t v3 = obj_readable_version(st);
    assert_true(v3 > v2);
    assert_int_equal(obj_object_info_replicas(st, "k", &info, v, 4, &n), SMP_ENOTFOUND);

    /* The segment of p's memory replica unmounted. */
    assert_int_equal(obj_prepare_segment_unmount(st, "s0", &r), SMP_OK);
    apply(st, &r);
    uint64_t v4 = obj_readable_version(st);
    assert_true(v4 > v3);

    /* A node going up or down (the master says so). */
    obj_readable_changed(st, 1);
    assert_true(obj_readable_version(st) > v4);
    obj_store_destroy(st);
}

/* The loss version stays while objects are completed and gain replicas
 * (a cold copy added to the list, a memory replica added, the same
 * replicas written again, a node coming up), and moves when a complete
 * replica may be gone: dropped, failed, moved to another node, the object
 * removed, its segment unmounted, a node down. */
static void test_loss_version_moves_only_with_a_loss(void **state)
{
    (void)state;
    obj_store *st = store_with_objects();
    obj_record r = {0};
    obj_replica v[4];
    size_t n = 0;
    uint64_t l0 = obj_loss_version(st);
    assert_true(l0 > 0);

    /* Gains: p completed, a second memory replica of k on n1, k's list
     * written again as it is, a node up. The readable version moves. */
    uint64_t rv = obj_readable_version(st);
    uint8_t sum[32] = {9};
    assert_int_equal(obj_prepare_put_end(st, "p", sum, 2, &r), SMP_OK);
    apply(st, &r);
    assert_int_equal(obj_prepare_segment_mount(st, "s1", "n1", 8192, &r), SMP_OK);
    apply(st, &r);
    assert_int_equal(obj_reserve_replica(st, "k", "n1", 3, NULL), SMP_OK);
    assert_int_equal(obj_prepare_add_replica(st, "k", NULL, &r), SMP_OK);
    apply(st, &r);
    assert_int_equal(obj_object_replicas(st, "k", v, 4, &n), SMP_OK);
    assert_int_equal(n, 3);
    assert_int_equal(obj_prepare_set_replicas(st, "k", v, 3, &r), SMP_OK);
    apply(st, &r);
    obj_readable_changed(st, 0);
    assert_true(obj_readable_version(st) > rv);
    assert_int_equal(obj_loss_version(st), l0);

    /* A cold copy of p added (p's memory replica kept): no loss. */
    assert_int_equal(obj_object_replicas(st, "p", v, 4, &n), SMP_OK);
    assert_int_equal(n, 1);
    v[1] = (obj_replica){.kind = SMP_REPLICA_COLD, .status = OBJ_REPLICA_COMPLETE, .node = "n1",
                         .length = 100, .path = "p.cold"};
    assert_int_equal(obj_prepare_set_replicas(st, "p", v, 2, &r), SMP_OK);
    apply(st, &r);
    assert_int_equal(obj_loss_version(st), l0);

    /* p's cold copy failed: a loss. */
    v[1].status = OBJ_REPLICA_FAILED;
    assert_int_equal(obj_prepare_set_replicas(st, "p", v, 2, &r), SMP_OK);
    apply(st, &r);
    uint64_t l1 = obj_loss_version(st);
    assert_true(l1 > l0);

    /* k's cold replica (on n1) named on n0 instead: moved, a loss. */
    assert_int_equal(obj_object_replicas(st, "k", v, 4, &n), SMP_OK);
    for (size_t i = 0; i < n; i++)
        if (v[i].kind == SMP_REPLICA_COLD) v[i].node = "n0";
    assert_int_equal(obj_prepare_set_replicas(st, "k", v, n, &r), SMP_OK);
    apply(st, &r);
    uint64_t l2 = obj_loss_version(st);
    assert_true(l2 > l1);

    /* A node down. */
    obj_readable_changed(st, 1);
    uint64_t l3 = obj_loss_version(st);
    assert_true(l3 > l2);

    /* k removed. */
    assert_int_equal(obj_prepare_remove_unguarded(st, "k", 1, &r), SMP_OK);
    apply(st, &r);
    uint64_t l4 = obj_loss_version(st);
    assert_true(l4 > l3);

    /* The segment of p's memory replica unmounted. */
    assert_int_equal(obj_prepare_segment_unmount(st, "s0", &r), SMP_OK);
    apply(st, &r);
    assert_true(obj_loss_version(st) > l4);
    obj_store_destroy(st);
}

typedef struct seen {
    char keys[4][16];
    size_t n;
    size_t stop_after; /* 0: never stop */
} seen;

static int note_seen(void *arg, const char *key)
{
    seen *s = arg;
    if (s->n < 4) strncpy(s->keys[s->n], key, sizeof(s->keys[0]) - 1);
    s->n++;
    return s->stop_after != 0 && s->n >= s->stop_after;
}

/* obj_visit_unreplicated meets the complete objects that have no complete
 * replica left, in key order, and nothing else: not an object with a
 * replica (complete, on any node), not a put in flight. An object whose
 * last replica is dropped, or whose only replica is FAILED or still
 * PENDING, is met; fn's non-zero stops the visit. */
static void test_objects_without_a_replica_are_visited(void **state)
{
    (void)state;
    obj_store *st = store_with_objects(); /* k: memory + cold; p: a put in flight */
    obj_record r = {0};
    obj_replica v[2];
    size_t n = 0;
    seen s;
    memset(&s, 0, sizeof(s));
    assert_int_equal(obj_visit_unreplicated(st, note_seen, &s), 0);
    assert_int_equal(s.n, 0);

    /* p completes with its memory replica, then loses it: met. */
    uint8_t sum[32] = {9};
    assert_int_equal(obj_prepare_put_end(st, "p", sum, 2, &r), SMP_OK);
    apply(st, &r);
    assert_int_equal(obj_visit_unreplicated(st, note_seen, &s), 0);
    assert_int_equal(obj_prepare_set_replicas(st, "p", v, 0, &r), SMP_OK);
    apply(st, &r);
    /* k keeps only its cold replica, marked FAILED: met too, before p. */
    assert_int_equal(obj_object_replicas(st, "k", v, 2, &n), SMP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(v[1].kind, SMP_REPLICA_COLD);
    v[0] = (obj_replica){.kind = SMP_REPLICA_COLD, .status = OBJ_REPLICA_FAILED, .node = "n1",
                         .length = 500, .path = "k.cold"}; /* the store's strings go with the change */
    assert_int_equal(obj_prepare_set_replicas(st, "k", v, 1, &r), SMP_OK);
    apply(st, &r);
    memset(&s, 0, sizeof(s));
    assert_int_equal(obj_visit_unreplicated(st, note_seen, &s), 2);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.keys[0], "k");
    assert_string_equal(s.keys[1], "p");
    memset(&s, 0, sizeof(s));
    s.stop_after = 1;
    assert_int_equal(obj_visit_unreplicated(st, note_seen, &s), 1);
    assert_int_equal(obj_visit_unreplicated(st, NULL, NULL), 2); /* counted only */

    /* k's cold replica complete again: k is no longer met. */
    v[0].status = OBJ_REPLICA_COMPLETE;
    assert_int_equal(obj_prepare_set_replicas(st, "k", v, 1, &r), SMP_OK);
    apply(st, &r);
    memset(&s, 0, sizeof(s));
    assert_int_equal(obj_visit_unreplicated(st, note_seen, &s), 1);
    assert_string_equal(s.keys[0], "p");
    obj_store_destroy(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_complete_object_answers_info_and_replicas),
        cmocka_unit_test(test_put_in_flight_and_unknown_key),
        cmocka_unit_test(test_bad_arguments_are_refused),
        cmocka_unit_test(test_readable_version_moves_with_every_change),
        cmocka_unit_test(test_loss_version_moves_only_with_a_loss),
        cmocka_unit_test(test_objects_without_a_replica_are_visited),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
