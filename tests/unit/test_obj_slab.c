/* test_obj_slab.c -- the slab a snapshot load builds its objects in
 * (obj_store_records.c): what obj_slab_take hands out, and that it maps the
 * slab's pages a window ahead of the objects rather than one fault at a
 * time.
 *
 * The mapping is read back with mincore(): a page of the slab's anonymous
 * mapping is resident once it has been mapped (populated or written), and
 * not before. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "host_bulk.h"
#include "obj_store_internal.h"

/* How many of the pages of [off, off+len) of sl are resident. */
static size_t resident_pages(const obj_slab *sl, size_t off, size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t n = (len + page - 1) / page;
    unsigned char *vec = calloc(n, 1);
    assert_non_null(vec);
    assert_int_equal(mincore((char *)sl + off, len, vec), 0);
    size_t in = 0;
    for (size_t i = 0; i < n; i++) in += vec[i] & 1;
    free(vec);
    return in;
}

/* A slab of 2.5 windows: the first take maps the first window whole and
 * nothing after it; a take reaching into the second maps the second; one
 * reaching into the last, shorter window maps it up to the slab's end. Each
 * take is zeroed, follows the one before, and holds a reference. */
static void test_take_maps_a_window_ahead(void **state)
{
    (void)state;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t w = HOST_BULK_AHEAD;
    obj_slab *sl = obj_slab_new(2 * w + w / 2);
    assert_non_null(sl);
    assert_int_equal(sl->refs, 1);
    assert_int_equal(sl->ready, 0);

    char *a = obj_slab_take(sl, 256);
    assert_ptr_equal(a, (char *)sl + (sl->used - 256));
    assert_int_equal(sl->refs, 2);
    assert_int_equal(sl->ready, w);
    assert_int_equal(resident_pages(sl, 0, w), w / page);
    assert_int_equal(resident_pages(sl, w, w), 0);
    for (size_t i = 0; i < 256; i++) assert_int_equal(a[i], 0);
    memset(a, 0xab, 256);

    /* up to the window's last byte: nothing more is mapped */
    char *b = obj_slab_take(sl, w - sl->used);
    assert_ptr_equal(b, a + 256);
    assert_int_equal(sl->used, w);
    assert_int_equal(sl->ready, w);
    assert_int_equal(resident_pages(sl, w, w), 0);

    /* one byte into the second window maps it whole */
    char *c = obj_slab_take(sl, 64);
    assert_ptr_equal(c, (char *)sl + w);
    assert_int_equal(sl->ready, 2 * w);
    assert_int_equal(resident_pages(sl, w, w), w / page);
    assert_int_equal(resident_pages(sl, 2 * w, sl->len - 2 * w), 0);

    /* into the last window: mapped to the slab's end, not past it */
    (void)obj_slab_take(sl, 2 * w - sl->used + 64);
    assert_int_equal(sl->ready, sl->len);
    assert_int_equal(resident_pages(sl, 2 * w, sl->len - 2 * w),
                     (sl->len - 2 * w + page - 1) / page);
    assert_int_equal(sl->refs, 5);
    for (size_t i = 0; i < 256; i++) assert_int_equal((unsigned char)a[i], 0xab);

    for (int i = 0; i < 5; i++) obj_slab_unref(sl);
}

/* Takes that end exactly at the slab's end fill it, and every byte of it
 * can be written. */
static void test_takes_fill_the_slab(void **state)
{
    (void)state;
    obj_slab *sl = obj_slab_new(HOST_BULK_AHEAD + 4096);
    assert_non_null(sl);
    size_t n = 0;
    while (sl->len - sl->used >= 4096) {
        memset(obj_slab_take(sl, 4096), 0x5a, 4096);
        n++;
    }
    assert_int_equal(sl->ready, sl->len);
    assert_int_equal(sl->refs, n + 1);
    while (n-- > 0) obj_slab_unref(sl);
    obj_slab_unref(sl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_take_maps_a_window_ahead),
        cmocka_unit_test(test_takes_fill_the_slab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
