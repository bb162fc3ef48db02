/* test_plugin_hooks.c -- the master runs a plugin's tick (at its period, after
 * MORE, and at once on tick_soon), delivers events and routes its RPC
 * service, and serves /metrics, /health and /role.
 *
 * A real master loads tests/plugins/tick_probe.so next to weight_mgmt.so
 * (or soon_probe.so alone); the probe reports over its own RPC service what
 * the host handed it. */
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
#include "rpc_client.h"

static const char *config_extra(void)
{
    static char buf[1024];
    snprintf(buf, sizeof(buf),
             "cluster:\n"
             "  weight_migration_max_members_per_round: 7\n"
             "  weight_migration_max_bytes_per_round: 12345\n"
             "plugins:\n"
             "  - path: \"%s/lib/weight_mgmt.so\"\n"
             "  - path: \"%s/lib/testplugins/tick_probe.so\"\n",
             BUILD_DIR, BUILD_DIR);
    return buf;
}

/* The reply of method of service svc (no body), as text. */
static void call_text(const hx_master *m, uint16_t svc, uint16_t method, char *out, size_t cap)
{
    rpcc_conn *c = NULL;
    char err[256];
    int status = -1;
    uint8_t *body = NULL;
    size_t len = 0;
    char *msg = NULL;
    assert_int_equal(rpcc_connect(m->socket, NULL, &c, err, sizeof(err)), 0);
    assert_int_equal(rpcc_call(c, svc, method, NULL, 0, &status, &body, &len, &msg), 0);
    assert_int_equal(status, 0);
    snprintf(out, cap, "%.*s", (int)len, (const char *)body);
    free(body);
    free(msg);
    rpcc_close(c);
}

/* The probe's one-line report. */
static void report(const hx_master *m, char *out, size_t cap)
{
    call_text(m, 41, 1, out, cap);
}

static unsigned field(const char *rep, const char *name)
{
    const char *p = strstr(rep, name);
    return p ? (unsigned)strtoul(p + strlen(name), NULL, 10) : 0;
}

static int signed_field(const char *rep, const char *name)
{
    const char *p = strstr(rep, name);
    return p ? (int)strtol(p + strlen(name), NULL, 10) : 0;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The tick is called again at once after MORE with the cursor it left, the
 * cursor starts over after DONE, and the budget comes from the cluster
 * config. */
static void test_tick_gets_budget_and_keeps_cursor(void **state)
{
    (void)state;
    hx_master m;
    char rep[512] = "";
    assert_int_equal(hx_init(&m, "hooks", config_extra()), 0);
    assert_int_equal(hx_start(&m, 10000), 0);
    for (int i = 0; i < 500 && field(rep, "ticks=") < 6; i++) {
        sleep_ms(10);
        report(&m, rep, sizeof(rep));
    }
    assert_true(field(rep, "ticks=") >= 6);
    assert_non_null(strstr(rep, "cursors=0,1,2,3,0,1"));
    assert_int_equal(field(rep, "members="), 7);
    assert_int_equal(field(rep, "bytes="), 12345);
    assert_int_equal(field(rep, "roles="), 1);
    hx_cleanup(&m);
}

/* A put end reaches the plugin as an object-completed event with its key. */
static void test_object_completed_event_after_put_end(void **state)
{
    (void)state;
    hx_master m;
    char rep[512];
    unsigned char sha[32] = {0};
    assert_int_equal(hx_init(&m, "hooks", config_extra()), 0);
    assert_int_equal(hx_start(&m, 10000), 0);
    kvc *c = hx_client(&m);
    report(&m, rep, sizeof(rep));
    assert_int_equal(field(rep, "completed="), 0);
    assert_int_equal(kvc_put_start(c, "events/one", 5, SMP_DATA_KV, NULL, 0, NULL), 0);
    report(&m, rep, sizeof(rep));
    assert_int_equal(field(rep, "completed="), 0); /* a started put is not an object */
    assert_int_equal(kvc_put_end(c, "events/one", sha, NULL), 0);
    report(&m, rep, sizeof(rep));
    assert_int_equal(field(rep, "completed="), 1);
    assert_non_null(strstr(rep, "last_key=events/one"));
    kvc_close(c);
    hx_cleanup(&m);
}

/* A get-replicas that finds nothing reaches the plugin as a read-miss
 * event with the key: an unknown object, and one the plugin may check. A
 * read that finds its object is no miss. */
static void test_read_miss_event_on_get_replicas(void **state)
{
    (void)state;
    hx_master m;
    char rep[512];
    kvc_object o;
    assert_int_equal(hx_init(&m, "hooks", config_extra()), 0);
    assert_int_equal(hx_start(&m, 10000), 0);
    kvc *c = hx_client(&m);
    report(&m, rep, sizeof(rep));
    assert_int_equal(field(rep, "read_misses="), 0);
    assert_true(kvc_get(c, "events/absent", &o) < 0);
    report(&m, rep, sizeof(rep));
    assert_int_equal(field(rep, "read_misses="), 1);
    assert_non_null(strstr(rep, "miss_key=events/absent "));
    assert_int_equal(kvc_put_bytes(c, "events/here", "hello", 5, SMP_DATA_KV, NULL, 0, NULL), 0);
    memset(&o, 0, sizeof(o));
    assert_int_equal(kvc_get(c, "events/here", &o), 0);
    report(&m, rep, sizeof(rep));
    assert_int_equal(field(rep, "read_misses="), 1);
    kvc_close(c);
    hx_cleanup(&m);
}

/* soon_probe's tick count once it reached at least want (10 s at most). */
static unsigned soon_ticks_reach(const hx_master *m, unsigned want, char *rep, size_t cap)
{
    call_text(m, 44, 1, rep, cap);
    for (int i = 0; i < 1000 && field(rep, "ticks=") < want; i++) {
        sleep_ms(10);
        call_text(m, 44, 1, rep, cap);
    }
    return field(rep, "ticks=");
}

/* tick_soon (ABI 1.10): soon_probe ticks once a minute. Its first tick
 * comes at the start and no other follows by itself; a call of tick_soon
 * from an RPC brings one at once (three calls before it runs are one), one
 * from inside the tick brings the next at the next housekeeping round; a
 * plugin with no tick registered gets SMP_ENOTFOUND. */
static void test_tick_soon_brings_the_tick(void **state)
{
    (void)state;
    hx_master m;
    char rep[256], cfg[512], ok[16];
    snprintf(cfg, sizeof(cfg), "plugins:\n  - path: \"%s/lib/testplugins/soon_probe.so\"\n",
             BUILD_DIR);
    assert_int_equal(hx_init(&m, "soon", cfg), 0);
    assert_int_equal(hx_start(&m, 10000), 0);
    assert_int_equal(soon_ticks_reach(&m, 1, rep, sizeof(rep)), 1);
    assert_int_equal(signed_field(rep, "before_reg="), SMP_ENOTFOUND);
    sleep_ms(300);
    call_text(&m, 44, 1, rep, sizeof(rep));
    assert_int_equal(field(rep, "ticks="), 1); /* the period is a minute */

    call_text(&m, 44, 2, ok, sizeof(ok));
    assert_string_equal(ok, "ok");
    assert_int_equal(soon_ticks_reach(&m, 2, rep, sizeof(rep)), 2);
    sleep_ms(300);
    call_text(&m, 44, 1, rep, sizeof(rep));
    assert_int_equal(field(rep, "ticks="), 2); /* three requests, one tick */

    call_text(&m, 44, 3, ok, sizeof(ok)); /* the next tick asks from inside */
    call_text(&m, 44, 2, ok, sizeof(ok));
    assert_int_equal(soon_ticks_reach(&m, 4, rep, sizeof(rep)), 4);
    assert_int_equal(signed_field(rep, "inside="), SMP_OK);
    sleep_ms(300);
    call_text(&m, 44, 1, rep, sizeof(rep));
    assert_int_equal(field(rep, "ticks="), 4);
    assert_int_equal(hx_stop(&m), 0);
    hx_cleanup(&m);
}

/* /metrics carries the host's families and the plugin's; /health and /role
 * answer; anything else is 404. */
static void test_admin_http_endpoints(void **state)
{
    (void)state;
    hx_master m;
    char *body = NULL;
    unsigned char sha[32] = {0};
    assert_int_equal(hx_init(&m, "hooks", config_extra()), 0);
    assert_int_equal(hx_start(&m, 10000), 0);
    assert_true(m.admin_port > 0);
    kvc *c = hx_client(&m);
    assert_int_equal(kvc_put_start(c, "m/1", 5, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(kvc_put_end(c, "m/1", sha, NULL), 0);
    kvc_close(c);

    assert_int_equal(hx_http_get(&m, "/metrics", &body), 200);
    assert_non_null(strstr(body, "# TYPE store_objects gauge"));
    assert_non_null(strstr(body, "store_objects{data_type=\"kv\"} 1"));
    assert_non_null(strstr(body, "oplog_fsyncs_total"));
    assert_non_null(strstr(body, "host_guard_vetoes_total{reason=\"batch_evict\"} 0"));
    assert_non_null(strstr(body, "snapshot_age_seconds"));
    assert_non_null(strstr(body, "tick_probe_ticks_total"));
    free(body);
    assert_int_equal(hx_http_get(&m, "/health", &body), 200);
    assert_int_equal(strncmp(body, "ok\n", 3), 0); /* the verdict; the loop lag follows */
    assert_non_null(strstr(body, "\nloop lag "));
    free(body);
    assert_int_equal(hx_http_get(&m, "/role", &body), 200);
    assert_string_equal(body, "active\n");
    free(body);
    assert_int_equal(hx_http_get(&m, "/nope", &body), 404);
    free(body);
    assert_int_equal(hx_stop(&m), 0);
    hx_cleanup(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tick_gets_budget_and_keeps_cursor),
        cmocka_unit_test(test_object_completed_event_after_put_end),
        cmocka_unit_test(test_read_miss_event_on_get_replicas),
        cmocka_unit_test(test_admin_http_endpoints),
        cmocka_unit_test(test_tick_soon_brings_the_tick),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
