/* test_obj_slab.c -- the slab a snapshot load builds its objects in
 * (obj_store_records.c): what obj_slab_take hands out, and that its pages
 * are ready before they are handed out: mapped a window ahead of the
 * objects rather than one fault at a time, or readied by a feed's thread
 * (host_bulk.h).
 *
 * The mapping is read back with mincore(): a page of the slab's anonymous
 * mapping is resident once it has been mapped (populated or written), and
 * not before. */
#include <setjmp.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "host_bulk.h"
#include "obj_store_internal.h"
#include "resident_pages.h"

/* A slab of 2.5 windows: the first take maps the first window whole and
 * nothing after it; a take reaching into the second maps the second; one
 * reaching into the last, shorter window maps it up to the slab's end. Each
 * take is zeroed, follows the one before, and holds a reference. */
static void test_take_maps_a_window_ahead(void **state)
{
    (void)state;
    const size_t page = page_bytes();
    const size_t w = HOST_BULK_AHEAD;
    obj_slab *sl = obj_slab_new(2 * w + w / 2, 0);
    assert_non_null(sl);
    assert_int_equal(sl->refs, 1);
    assert_int_equal(sl->ready, w); /* its header's window */
    assert_int_equal(resident_pages(sl, w, w), 0);

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
                     pages_of(sl->len - 2 * w));
    assert_int_equal(sl->refs, 5);
    for (size_t i = 0; i < 256; i++) assert_int_equal((unsigned char)a[i], 0xab);

    for (int i = 0; i < 5; i++) obj_slab_unref(sl);
}

/* Takes that end exactly at the slab's end fill it, and every byte of it
 * can be written. */
static void test_takes_fill_the_slab(void **state)
{
    (void)state;
    obj_slab *sl = obj_slab_new(HOST_BULK_AHEAD + 4096, 0);
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

/* A fed slab (a load's): its feed readies the pages the takes hand out
 * (zeroed, resident when handed out); filled to its end, every take keeps
 * what was written in it; obj_slab_filled stops the feed and drops the
 * load's reference only. */
static void test_fed_slab_takes_ready_pages(void **state)
{
    (void)state;
    const size_t page = page_bytes();
    const size_t piece = 3 * 1024 + 64;
    obj_slab *sl = obj_slab_new(3 * HOST_BULK_FEED_LEAD + 5000, 1);
    assert_non_null(sl);
    assert_non_null(sl->feed);
    assert_true(sl->ready >= sl->used);
    size_t n = 0;
    while (sl->len - sl->used >= piece) {
        size_t at = sl->used;
        unsigned char *p = obj_slab_take(sl, piece);
        assert_ptr_equal(p, (unsigned char *)sl + at);
        assert_true(sl->ready >= sl->used && sl->ready <= sl->len);
        size_t from = at / page * page;
        assert_int_equal(resident_pages(sl, from, sl->used - from),
                         pages_of(sl->used - from));
        assert_int_equal(p[0], 0);
        assert_int_equal(p[piece - 1], 0);
        memset(p, (int)(n % 251) + 1, piece);
        n++;
    }
    assert_int_equal(sl->refs, n + 1);
    for (size_t i = 0; i < n; i++) {
        const unsigned char *p = (const unsigned char *)sl + sl->used - (n - i) * piece;
        assert_int_equal(p[0], (int)(i % 251) + 1);
        assert_int_equal(p[piece - 1], (int)(i % 251) + 1);
    }
    obj_slab_filled(sl);
    assert_null(sl->feed);
    assert_int_equal(sl->refs, n);
    while (n-- > 0) obj_slab_unref(sl);
}

/* A skip list given a slab takes its new nodes from it, each holding a
 * reference the node's removal returns, and malloc's once the slab has no
 * room; a key already there is replaced in place, taking nothing. */
static void test_list_nodes_from_a_slab(void **state)
{
    (void)state;
    obj_slab *sl = obj_slab_new(4096, 0);
    assert_non_null(sl);
    obj_sl list;
    assert_int_equal(obj_sl_init(&list), SMP_OK);
    static char keys[200][8];
    size_t from_slab = 0;
    for (int i = 0; i < 200; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%03d", i);
        size_t refs = sl->refs, used = sl->used;
        assert_int_equal(obj_sl_put_from(&list, keys[i], keys[i], sl), SMP_OK);
        obj_sl_node *n = obj_sl_find(&list, keys[i]);
        assert_non_null(n);
        if (n->slab != NULL) {
            assert_ptr_equal(n->slab, sl);
            assert_ptr_equal((char *)n, (char *)sl + used);
            assert_int_equal(sl->refs, refs + 1);
            assert_int_equal((sl->used - used) % alignof(max_align_t), 0);
            from_slab++;
        } else {
            assert_int_equal(sl->refs, refs); /* no room: malloc'ed */
            size_t bytes = sizeof(obj_sl_node) + 2 * sizeof(obj_sl_node *) * (size_t)n->level;
            assert_true(obj_slab_room(sl) < bytes + alignof(max_align_t));
        }
    }
    assert_true(from_slab > 20 && from_slab < 200);
    assert_int_equal(sl->refs, from_slab + 1);
    size_t used = sl->used;
    assert_int_equal(obj_sl_put_from(&list, keys[5], keys[6], sl), SMP_OK);
    assert_int_equal(sl->used, used);
    assert_ptr_equal(obj_sl_get(&list, keys[5]), keys[6]);
    /* removed one by one, then the rest with the list */
    for (int i = 0; i < 200; i += 2) assert_non_null(obj_sl_del(&list, keys[i]));
    assert_int_equal(list.count, 100);
    size_t left = 0;
    for (obj_sl_node *n = list.head->next[0]; n != NULL; n = n->next[0]) left += n->slab != NULL;
    assert_int_equal(sl->refs, left + 1);
    obj_sl_fini(&list);
    assert_int_equal(sl->refs, 1);
    obj_slab_unref(sl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_take_maps_a_window_ahead),
        cmocka_unit_test(test_takes_fill_the_slab),
        cmocka_unit_test(test_fed_slab_takes_ready_pages),
        cmocka_unit_test(test_list_nodes_from_a_slab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
