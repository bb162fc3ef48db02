/* test_managed_groups.c -- a managed group is never partly removed, evicted
 * or added to, with the weight plugin loaded and with it disabled.
 *
 * The same story runs against a real store_master twice: once with
 * weight_mgmt.so loaded (its object guard vetoes), once with the plugin entry
 * present but `enabled: false` (the host's own managed-group rule decides).
 * Objects go into group "g", some ungrouped objects beside them, the group is
 * marked managed; then a single-key remove of a member, a remove by prefix
 * covering part of the group, a put into the group and an overwrite of a
 * member are refused, and memory pressure on a 1 MiB segment (watermarks 0.5
 * and 0.2) evicts ungrouped objects only -- although the members are the
 * oldest, first in line for eviction. The managed flag survives a restart. */
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
#include "host_rpc.pb-c.h"
#include "rpc_client.h"

#define SEGMENT_BYTES 1048576
#define HIGH_WATERMARK 0.5
#define MEMBER_BYTES 16384
#define FILL_BYTES 32768
#define MAX_FILL 64 /* 2 MiB of puts into a 1 MiB segment: pressure is certain */
#define WAIT_MS 10000

static const char *const members[] = {"w/a", "w/b", "z/c"};
#define N_MEMBERS 3

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Start a master on a 1 MiB segment with weight_mgmt.so loaded or disabled. */
static void start_master(hx_master *m, const char *name, int plugin_enabled)
{
    char extra[1024];
    assert_int_equal(hx_init(m, name, NULL), 0);
    snprintf(extra, sizeof(extra),
             "plugins:\n  - path: \"%s/lib/weight_mgmt.so\"\n    enabled: %s\n"
             "node:\n  segment_dir: \"%s/shm\"\n  segment_bytes: %d\n"
             "memory:\n  high_watermark: %.1f\n  low_watermark: 0.2\n",
             BUILD_DIR, plugin_enabled ? "true" : "false", m->dir, SEGMENT_BYTES, HIGH_WATERMARK);
    assert_int_equal(hx_reconfigure(m, extra), 0);
    assert_int_equal(hx_start(m, 10000), 0);
}

/* The plugins the master reports as loaded, comma-separated, into out. */
static void loaded_plugins(const hx_master *m, char *out, size_t cap)
{
    char err[256];
    rpcc_conn *c = NULL;
    int st = -1;
    uint8_t *body = NULL;
    size_t len = 0;
    assert_int_equal(rpcc_connect(m->socket, NULL, &c, err, sizeof(err)), 0);
    assert_int_equal(rpcc_call(c, HOST_SERVICE__HOST_SERVICE_ADMIN, ADMIN_METHOD__ADMIN_STATUS,
                               NULL, 0, &st, &body, &len, NULL),
                     0);
    assert_int_equal(st, 0);
    StatusResponse *resp = status_response__unpack(NULL, len, body);
    assert_non_null(resp);
    out[0] = '\0';
    for (size_t i = 0; i < resp->n_plugins; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? "," : "", resp->plugins[i]);
    status_response__free_unpacked(resp, NULL);
    free(body);
    rpcc_close(c);
}

static void put(kvc *c, const char *key, uint64_t size, const char *group)
{
    unsigned char sha[32];
    hx_sha256(key, strlen(key), sha);
    assert_int_equal(kvc_put_start(c, key, size, SMP_DATA_KV, group, 0, NULL), 0);
    assert_int_equal(kvc_put_end(c, key, sha, NULL), 0);
}

/* Exists without a read (a read would lease the object against removal). */
static int exists(kvc *c, const char *key)
{
    int e = -1;
    assert_int_equal(kvc_exists(c, key, &e), 0);
    return e;
}

static void assert_members_intact(kvc *c)
{
    for (int i = 0; i < N_MEMBERS; i++) {
        if (!exists(c, members[i])) fail_msg("managed member %s is gone", members[i]);
    }
}

static uint64_t object_count(kvc *c)
{
    kvc_status st;
    assert_int_equal(kvc_status_get(c, &st), 0);
    return st.objects;
}

/* Every refusal of an action on the group: SMP_EVETO naming the key, and
 * nothing changed. */
static void assert_group_refuses_changes(kvc *c)
{
    uint64_t before = object_count(c);

    /* Single-key remove of a member. */
    assert_int_equal(kvc_remove(c, "w/a"), SMP_EVETO);
    assert_non_null(strstr(kvc_error(c), "w/a"));
    assert_non_null(strstr(kvc_error(c), "SMP_EVETO"));

    /* A put of a new object into the group, and an overwrite of a member. */
    assert_int_equal(kvc_put_start(c, "z/new", 100, SMP_DATA_KV, "g", 0, NULL), SMP_EVETO);
    assert_non_null(strstr(kvc_error(c), "z/new"));
    assert_int_equal(exists(c, "z/new"), 0);
    assert_int_equal(kvc_put_start(c, "w/b", 100, SMP_DATA_KV, "g", 1, NULL), SMP_EVETO);
    assert_non_null(strstr(kvc_error(c), "w/b"));

    assert_members_intact(c);
    assert_int_equal(object_count(c), before);
}

static void run_story(hx_master *m, const char *name, int plugin_enabled)
{
    char names[256], key[64];
    start_master(m, name, plugin_enabled);
    loaded_plugins(m, names, sizeof(names));
    assert_string_equal(names, plugin_enabled ? "weight_mgmt" : "");

    kvc *c = hx_client(m);
    assert_non_null(c);
    for (int i = 0; i < N_MEMBERS; i++) put(c, members[i], MEMBER_BYTES, "g");
    put(c, "w/u1", 1024, NULL);
    put(c, "w/u2", 1024, NULL);
    put(c, "y/u3", 1024, NULL);
    assert_int_equal(kvc_group_set_managed(c, "g", 1), 0);

    assert_group_refuses_changes(c);

    /* Remove by prefix covering two members (not z/c) and two ungrouped
     * objects: the ungrouped ones go, the group stays whole. */
    uint64_t removed = 0, skipped = 0;
    assert_int_equal(kvc_remove_prefix(c, "w/", &removed, &skipped), 0);
    assert_int_equal(removed, 2);
    assert_true(skipped > 0);
    assert_int_equal(exists(c, "w/u1"), 0);
    assert_int_equal(exists(c, "w/u2"), 0);
    assert_int_equal(exists(c, "y/u3"), 1);
    assert_members_intact(c);

    /* Memory pressure: fill with ungrouped objects until a put is refused
     * for space or use is above the high watermark. */
    kvc_status st;
    int filled = 0;
    for (; filled < MAX_FILL; filled++) {
        unsigned char sha[32];
        snprintf(key, sizeof(key), "f/%03d", filled);
        hx_sha256(key, strlen(key), sha);
        int rc = kvc_put_start(c, key, FILL_BYTES, SMP_DATA_KV, NULL, 0, NULL);
        if (rc == SMP_ENOSPC) break;
        assert_int_equal(rc, 0);
        assert_int_equal(kvc_put_end(c, key, sha, NULL), 0);
        assert_int_equal(kvc_status_get(c, &st), 0);
        if ((double)st.memory_used > HIGH_WATERMARK * (double)st.memory_capacity) {
            filled++;
            break;
        }
    }
    assert_true(filled > 0);

    /* Wait for the eviction: use back under the high watermark and some of
     * the ungrouped objects gone. */
    int evicted = 0, waited = 0;
    for (;; waited += 20) {
        assert_int_equal(kvc_status_get(c, &st), 0);
        evicted = 0;
        for (int i = 0; i < filled; i++) {
            snprintf(key, sizeof(key), "f/%03d", i);
            evicted += !exists(c, key);
        }
        if ((double)st.memory_used <= HIGH_WATERMARK * (double)st.memory_capacity && evicted > 0)
            break;
        if (waited >= WAIT_MS)
            fail_msg("no eviction after %d ms: used %llu of %llu, %d of %d evicted", waited,
                     (unsigned long long)st.memory_used, (unsigned long long)st.memory_capacity,
                     evicted, filled);
        sleep_ms(20);
    }
    assert_members_intact(c);
    assert_true(evicted > 0);
    assert_true(evicted < filled); /* eviction stops at the low watermark */
    kvc_close(c);

    /* The managed flag is durable: after a restart the group still refuses. */
    assert_int_equal(hx_stop(m), 0);
    assert_int_equal(hx_start(m, 10000), 0);
    c = hx_client(m);
    assert_non_null(c);
    assert_members_intact(c);
    assert_group_refuses_changes(c);
    kvc_close(c);
    assert_int_equal(hx_stop(m), 0);
}

/* Each test gets a master slot; teardown kills and removes whatever a test
 * left behind, also after a failed assertion. */
static int setup(void **state)
{
    *state = calloc(1, sizeof(hx_master));
    return *state ? 0 : -1;
}

static int teardown(void **state)
{
    hx_cleanup(*state);
    free(*state);
    return 0;
}

/* weight_mgmt.so's guard vetoes every generic action on a managed group. */
static void test_managed_group_stays_whole_with_the_plugin_guard(void **state)
{
    run_story(*state, "managed-guard", 1);
}

/* With the plugin disabled the host's own rule keeps the group whole. */
static void test_managed_group_stays_whole_with_the_plugin_disabled(void **state)
{
    run_story(*state, "managed-host", 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_managed_group_stays_whole_with_the_plugin_guard, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_managed_group_stays_whole_with_the_plugin_disabled, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
