/* test_eviction_keeps.c -- memory.evict_without_cold_copy: false, the
 * default, keeps every object that has no cold copy through memory pressure.
 *
 * A real store_master (embedded node, a 2 MiB segment, watermarks 0.5 /
 * 0.2, no plugin) is filled with plain objects past the high watermark
 * until a put no longer fits. By default, every acknowledged object
 * reads back byte for byte after the master had time to evict, the put that
 * did not fit was refused SMP_ENOSPC, and the master says once that nothing
 * may be evicted and why; once the objects are removed, puts fit again.
 * With the key true, the same fill is evicted least recently used first, as
 * a cache would be: the objects the master names are gone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "harness.h"

#define SEGMENT_BYTES 2097152
#define FILL_BYTES 65536
#define MAX_FILL 64
#define WAIT_MS 10000

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int setup(void **state)
{
    hx_master *m = calloc(1, sizeof(*m));
    if (m == NULL || hx_init(m, "evict-keeps", NULL) < 0) {
        free(m);
        return -1;
    }
    *state = m;
    return 0;
}

static int teardown(void **state)
{
    hx_master *m = *state;
    hx_cleanup(m);
    free(m);
    return 0;
}

static void start(hx_master *m, const char *evict)
{
    char cfg[1024];
    snprintf(cfg, sizeof(cfg),
             "node:\n  segment_dir: \"%s/shm\"\n  segment_bytes: %d\n"
             "memory:\n  high_watermark: 0.5\n  low_watermark: 0.2\n%s",
             m->dir, SEGMENT_BYTES, evict);
    assert_int_equal(hx_reconfigure(m, cfg), 0);
    assert_int_equal(hx_start(m, 20000), 0);
}

/* The bytes of fill object i. */
static void fill_bytes(uint8_t *data, int i)
{
    for (size_t k = 0; k < FILL_BYTES; k++) data[k] = (uint8_t)(i * 31 + k);
}

/* Put fill/NNN objects until one is refused SMP_ENOSPC (or MAX_FILL);
 * the number acknowledged. */
static int fill_until_full(kvc *c)
{
    uint8_t *data = malloc(FILL_BYTES);
    char key[64];
    int n = 0;
    assert_non_null(data);
    for (; n < MAX_FILL; n++) {
        snprintf(key, sizeof(key), "fill/%03d", n);
        fill_bytes(data, n);
        int rc = kvc_put_bytes(c, key, data, FILL_BYTES, SMP_DATA_KV, NULL, 0, NULL);
        if (rc == SMP_ENOSPC) break;
        if (rc != 0) fail_msg("put %s: %d (%s)", key, rc, kvc_error(c));
    }
    free(data);
    return n;
}

/* How many of fill/000 .. n-1 read back whole (the others must be gone,
 * never changed; one whose eviction is being committed, SMP_EBUSY, is
 * asked again). */
static int readable(kvc *c, int n)
{
    uint8_t *want = malloc(FILL_BYTES), *got = malloc(FILL_BYTES);
    int ok = 0;
    assert_non_null(want);
    assert_non_null(got);
    for (int i = 0; i < n; i++) {
        char key[64];
        uint64_t len = 0;
        snprintf(key, sizeof(key), "fill/%03d", i);
        int rc = kvc_get_into(c, key, got, FILL_BYTES, &len, 1);
        for (int tries = 0; rc == SMP_EBUSY && tries < WAIT_MS / 20; tries++) {
            sleep_ms(20); /* its eviction is being committed */
            rc = kvc_get_into(c, key, got, FILL_BYTES, &len, 1);
        }
        if (rc == SMP_ENOTFOUND) continue;
        if (rc != 0) fail_msg("get %s: %d (%s)", key, rc, kvc_error(c));
        fill_bytes(want, i);
        assert_int_equal(len, FILL_BYTES);
        assert_memory_equal(got, want, FILL_BYTES);
        ok++;
    }
    free(want);
    free(got);
    return ok;
}

static void wait_log(hx_master *m, const char *needle)
{
    for (int waited = 0; !hx_log_contains(m, needle); waited += 20) {
        if (waited >= WAIT_MS) {
            hx_print_log(m);
            fail_msg("the master's log never said '%s'", needle);
        }
        sleep_ms(20);
    }
}

static void test_objects_without_a_cold_copy_are_kept(void **state)
{
    hx_master *m = *state;
    start(m, ""); /* the default: false */
    kvc *c = hx_client(m);
    assert_non_null(c);
    int n = fill_until_full(c);
    kvc_status st;
    assert_int_equal(kvc_status_get(c, &st), 0);
    if (n == MAX_FILL || (double)st.memory_used <= 0.5 * (double)st.memory_capacity)
        fail_msg("%d puts, %llu of %llu bytes used: not full", n,
                 (unsigned long long)st.memory_used, (unsigned long long)st.memory_capacity);
    /* the master looked (its housekeeping runs several times a second) */
    wait_log(m, "and nothing may be evicted (pinned, leased, kept by a plugin, or without a "
                "cold copy (memory.evict_without_cold_copy: false)): puts that do not fit fail "
                "with SMP_ENOSPC");
    assert_int_equal(readable(c, n), n);
    assert_false(hx_log_contains(m, "objects removed"));
    uint8_t *one = calloc(1, FILL_BYTES);
    assert_non_null(one);
    assert_int_equal(kvc_put_bytes(c, "fill/extra", one, FILL_BYTES, SMP_DATA_KV, NULL, 0, NULL),
                     SMP_ENOSPC);
    free(one);
    /* removed by the user (its reads' leases ended with their connection),
     * the room is there again */
    kvc_close(c);
    c = hx_client(m);
    assert_non_null(c);
    uint64_t removed = 0, skipped = 0;
    assert_int_equal(kvc_remove_prefix(c, "fill/", &removed, &skipped), 0);
    assert_int_equal(removed, (uint64_t)n);
    assert_int_equal(skipped, 0);
    assert_true(fill_until_full(c) > 0);
    kvc_close(c);
}

static void test_as_a_cache_the_least_recently_used_are_evicted(void **state)
{
    hx_master *m = *state;
    start(m, "  evict_without_cold_copy: true\n");
    kvc *c = hx_client(m);
    assert_non_null(c);
    int n = fill_until_full(c);
    assert_true(n > 0);
    wait_log(m, "objects removed (they had no cold copy): fill/000");
    int left = readable(c, n);
    if (left >= n) fail_msg("%d of %d objects left after an eviction", left, n);
    kvc_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_objects_without_a_cold_copy_are_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(test_as_a_cache_the_least_recently_used_are_evicted, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
