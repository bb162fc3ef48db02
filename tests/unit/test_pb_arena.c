/* test_pb_arena.c -- the bump allocator for protobuf-c decodes.
 *
 * Pins: pieces come from the caller's buffer, aligned, until it is used up;
 * what does not fit comes from malloc and is released by free_unpacked (the
 * valgrind run of this test checks nothing leaks); a misaligned buffer is
 * aligned; and a message decoded through an arena equals the same bytes
 * decoded with protobuf-c's own allocator, whether it fits or overflows. */
#include <setjmp.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "host_records.pb-c.h"
#include "pb_arena.h"

static int inside(const pb_arena *a, const void *p)
{
    uintptr_t q = (uintptr_t)p, base = (uintptr_t)a->base;
    return q >= base && q - base < a->cap;
}

static void test_pieces_from_the_buffer_then_malloc(void **state)
{
    (void)state;
    uint8_t mem[256];
    pb_arena a;
    pb_arena_init(&a, mem, sizeof(mem));
    void *p1 = a.alloc.alloc(a.alloc.allocator_data, 10);
    void *p2 = a.alloc.alloc(a.alloc.allocator_data, 1);
    assert_true(inside(&a, p1));
    assert_true(inside(&a, p2));
    assert_int_equal(a.spilled, 0);
    assert_int_equal((uintptr_t)p1 % alignof(max_align_t), 0);
    assert_int_equal((uintptr_t)p2 % alignof(max_align_t), 0);
    assert_true((uint8_t *)p2 >= (uint8_t *)p1 + 10);
    memset(p1, 0xab, 10); /* usable */
    void *big = a.alloc.alloc(a.alloc.allocator_data, 4096);
    assert_non_null(big);
    assert_false(inside(&a, big));
    assert_int_equal(a.spilled, 1);
    memset(big, 0xcd, 4096);
    a.alloc.free(a.alloc.allocator_data, p1); /* no-op */
    a.alloc.free(a.alloc.allocator_data, big); /* freed: valgrind would see a leak */
    assert_int_equal(((uint8_t *)p1)[9], 0xab);
}

static void test_misaligned_buffer_is_aligned(void **state)
{
    (void)state;
    alignas(max_align_t) uint8_t mem[128];
    pb_arena a;
    pb_arena_init(&a, mem + 3, sizeof(mem) - 3);
    assert_int_equal((uintptr_t)a.base % alignof(max_align_t), 0);
    assert_true(a.base + a.cap <= mem + sizeof(mem));
    void *p = a.alloc.alloc(a.alloc.allocator_data, 8);
    assert_true(inside(&a, p));
    pb_arena tiny;
    pb_arena_init(&tiny, mem + 1, 2); /* nothing left once aligned */
    assert_int_equal(tiny.cap, 0);
    void *q = tiny.alloc.alloc(tiny.alloc.allocator_data, 1);
    assert_non_null(q);
    tiny.alloc.free(tiny.alloc.allocator_data, q);
}

/* A REMOVE record of n keys of klen bytes, decoded through an arena of cap
 * bytes and with the default allocator: the same message either way. spills
 * tells whether pieces must have gone to malloc; pb_arena_free_unpacked must
 * then free them (valgrind and ASan see a leak otherwise) and must not touch
 * anything when none did. */
static void decode_both_ways(size_t n, size_t klen, size_t cap, int spills)
{
    Hostrec__RemoveRecord m = HOSTREC__REMOVE_RECORD__INIT;
    char **keys = calloc(n, sizeof(*keys));
    uint64_t *ids = calloc(n, sizeof(*ids));
    assert_non_null(keys);
    assert_non_null(ids);
    for (size_t i = 0; i < n; i++) {
        keys[i] = malloc(klen + 1);
        assert_non_null(keys[i]);
        memset(keys[i], 'a' + (int)(i % 26), klen);
        keys[i][klen] = '\0';
        ids[i] = 1000 + i;
    }
    m.n_keys = n;
    m.keys = keys;
    m.n_put_ids = n;
    m.put_ids = ids;
    size_t len = hostrec__remove_record__get_packed_size(&m);
    uint8_t *buf = malloc(len);
    assert_non_null(buf);
    hostrec__remove_record__pack(&m, buf);

    uint8_t *mem = malloc(cap ? cap : 1);
    assert_non_null(mem);
    pb_arena a;
    pb_arena_init(&a, mem, cap);
    Hostrec__RemoveRecord *x = hostrec__remove_record__unpack(&a.alloc, len, buf);
    Hostrec__RemoveRecord *y = hostrec__remove_record__unpack(NULL, len, buf);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(x->n_keys, n);
    assert_int_equal(x->n_put_ids, n);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(x->keys[i], y->keys[i]);
        assert_string_equal(x->keys[i], keys[i]);
        assert_int_equal(x->put_ids[i], ids[i]);
    }
    if (spills) assert_true(a.spilled > 0);
    else assert_int_equal(a.spilled, 0);
    pb_arena_free_unpacked(&a, &x->base);
    pb_arena_free_unpacked(&a, NULL);
    hostrec__remove_record__free_unpacked(y, NULL);
    free(mem);
    free(buf);
    for (size_t i = 0; i < n; i++) free(keys[i]);
    free(keys);
    free(ids);
}

static void test_decode_fits(void **state)
{
    (void)state;
    decode_both_ways(1, 40, PB_ARENA_SMALL, 0);
}

static void test_decode_overflows_to_malloc(void **state)
{
    (void)state;
    decode_both_ways(300, 200, PB_ARENA_SMALL, 1); /* ~60 KB of keys in 1 KiB */
    decode_both_ways(3, 10, 0, 1);              /* no buffer at all */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pieces_from_the_buffer_then_malloc),
        cmocka_unit_test(test_misaligned_buffer_is_aligned),
        cmocka_unit_test(test_decode_fits),
        cmocka_unit_test(test_decode_overflows_to_malloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
