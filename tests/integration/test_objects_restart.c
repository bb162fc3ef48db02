/* test_objects_restart.c -- the plain object service on a real master, across
 * a clean restart, a SIGKILL and a snapshot.
 *
 * Puts, reads, lists and removes through kv_client against build/bin/
 * store_master with weight_mgmt.so loaded, then checks that what was
 * acknowledged is exactly what a restarted master serves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

static void put(kvc *c, const char *key, const char *content)
{
    assert_int_equal(kvc_put_bytes(c, key, content, strlen(content), SMP_DATA_KV, NULL, 0, NULL), 0);
}

static void assert_object(kvc *c, const char *key, const char *content)
{
    char buf[256];
    uint64_t len = 0;
    assert_int_equal(kvc_get_into(c, key, buf, sizeof(buf), &len, 1), 0);
    assert_int_equal(len, strlen(content));
    assert_memory_equal(buf, content, len);
}

static void assert_absent(kvc *c, const char *key)
{
    int exists = 1;
    assert_int_equal(kvc_exists(c, key, &exists), 0);
    assert_int_equal(exists, 0);
    kvc_object obj;
    assert_int_equal(kvc_get(c, key, &obj), SMP_ENOTFOUND);
}

/* Acknowledged puts and removes survive a clean restart, a SIGKILL, and a
 * snapshot followed by more changes. */
static void test_acknowledged_changes_survive_restarts(void **state)
{
    (void)state;
    hx_master m;
    assert_int_equal(hx_init(&m, "objects", NULL), 0);
    assert_int_equal(hx_start(&m, 10000), 0);
    kvc *c = hx_client(&m);
    assert_non_null(c);
    put(c, "a/1", "one");
    put(c, "a/2", "two");
    put(c, "b/1", "three");
    put(c, "b/2", "four");
    assert_int_equal(kvc_remove(c, "a/2"), 0);
    assert_int_equal(kvc_put_start(c, "a/pending", 10, SMP_DATA_KV, NULL, 0, NULL), 0);
    kvc_close(c);

    assert_int_equal(hx_stop(&m), 0);
    assert_int_equal(hx_start(&m, 10000), 0);
    c = hx_client(&m);
    assert_object(c, "a/1", "one");
    assert_object(c, "b/1", "three");
    assert_absent(c, "a/2");
    assert_absent(c, "a/pending"); /* a put never ended is not an object */

    uint64_t seq = 0;
    assert_int_equal(kvc_snapshot(c, &seq), 0);
    assert_true(seq > 0);
    put(c, "c/1", "after the snapshot");
    /* a/1 was just read: its read lease keeps it until the lease expires. */
    assert_int_equal(kvc_remove(c, "a/1"), SMP_EBUSY);
    assert_int_equal(kvc_remove(c, "b/2"), 0);
    kvc_close(c);

    hx_kill(&m);
    assert_int_equal(hx_start(&m, 10000), 0);
    c = hx_client(&m);
    assert_object(c, "b/1", "three");
    assert_object(c, "c/1", "after the snapshot");
    assert_absent(c, "b/2");

    char **keys = NULL, *next = NULL;
    size_t n = 0;
    assert_int_equal(kvc_list(c, "", "", 0, &keys, &n, &next), 0);
    assert_int_equal(n, 3);
    assert_string_equal(keys[0], "a/1");
    assert_string_equal(keys[1], "b/1");
    assert_string_equal(keys[2], "c/1");
    assert_string_equal(next, "");
    kvc_list_free(keys, n, next);
    kvc_close(c);
    assert_int_equal(hx_stop(&m), 0);
    hx_cleanup(&m);
}

/* Listing pages through every key exactly once with the cursor. */
static void test_list_pagination(void **state)
{
    (void)state;
    hx_master m;
    char key[32];
    assert_int_equal(hx_init(&m, "list", NULL), 0);
    assert_int_equal(hx_start(&m, 10000), 0);
    kvc *c = hx_client(&m);
    for (int i = 0; i < 25; i++) {
        snprintf(key, sizeof(key), "p/%02d", i);
        put(c, key, key);
    }
    put(c, "q/other", "not under the prefix");
    char cursor[64] = "";
    int seen = 0;
    for (int page = 0; page < 10; page++) {
        char **keys = NULL, *next = NULL;
        size_t n = 0;
        assert_int_equal(kvc_list(c, "p/", cursor, 7, &keys, &n, &next), 0);
        for (size_t i = 0; i < n; i++) {
            snprintf(key, sizeof(key), "p/%02d", seen++);
            assert_string_equal(keys[i], key);
        }
        snprintf(cursor, sizeof(cursor), "%s", next);
        kvc_list_free(keys, n, next);
        if (cursor[0] == '\0') break;
    }
    assert_int_equal(seen, 25);
    kvc_close(c);
    assert_int_equal(hx_stop(&m), 0);
    hx_cleanup(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acknowledged_changes_survive_restarts),
        cmocka_unit_test(test_list_pagination),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
