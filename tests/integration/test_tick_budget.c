/* test_tick_budget.c -- the host times every plugin reconcile tick and guard
 * call, counts and logs (rate-limited) the ones over budget, and reports how
 * late its housekeeping loop runs.
 *
 * A real master loads tests/plugins/tick_overrun.so configured so that every
 * tick sleeps past its deadline and every guard call on a slow/ key sleeps
 * past the host's 1 ms guard budget. The plugin counts its own ticks and
 * guard calls; the test compares those counts with the host's histograms and
 * overrun counters from one /metrics scrape (the loop renders it between
 * callbacks, so both sides are consistent), counts the overrun lines in the
 * master's log against the overruns, and reads the loop lag from /health and
 * /metrics. Every assertion compares counts; no duration is asserted beyond
 * what the plugin's sleeps make certain. */
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

#define TICK_LINE "store_master: plugin tick_overrun: reconcile tick overran its budget"
#define GUARD_LINE "store_master: plugin tick_overrun: object guard call overran its budget"
#define MORE_FIELD "ms ("

static const char *config_extra(void)
{
    static char buf[1024];
    snprintf(buf, sizeof(buf),
             "plugins:\n"
             "  - path: \"%s/lib/testplugins/tick_overrun.so\"\n"
             "    config:\n"
             "      tick_overrun_ms: 20\n"
             "      guard_sleep_us: 3000\n",
             BUILD_DIR);
    return buf;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The value of the sample `series` (name with its labels, exactly as
 * rendered) in a /metrics body; -1 when it is absent. */
static double sample(const char *body, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = body; p != NULL && *p != '\0';) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ') return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p != NULL) p++;
    }
    return -1;
}

static char *scrape(const hx_master *m)
{
    char *body = NULL;
    assert_int_equal(hx_http_get(m, "/metrics", &body), 200);
    assert_non_null(body);
    return body;
}

/* The master's whole log (malloc'd). */
static char *read_log(const hx_master *m)
{
    FILE *f = fopen(m->log, "r");
    assert_non_null(f);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}

/* How many lines of log start with prefix; *suppressed sums the count each
 * one says was not logged since the previous line. */
static unsigned count_lines(const char *log, const char *prefix, unsigned long long *suppressed)
{
    unsigned n = 0;
    *suppressed = 0;
    for (const char *p = strstr(log, prefix); p != NULL; p = strstr(p + 1, prefix)) {
        if (p != log && p[-1] != '\n') continue;
        n++;
        const char *more = strstr(p, MORE_FIELD);
        const char *eol = strchr(p, '\n');
        if (more != NULL && (eol == NULL || more < eol))
            *suppressed += strtoull(more + strlen(MORE_FIELD), NULL, 10);
    }
    return n;
}

/* Every tick of the plugin runs past its deadline: the host's histogram
 * counts each one (as many as the plugin ran, +Inf equal to _count), each
 * one is an overrun, and the log has far fewer overrun lines than overruns
 * -- one, then at most one more per 10 s, each saying how many it left out.
 * Guard calls are timed one by one: the histogram counts as many as the
 * plugin answered, and those on slow/ keys (3 ms each) are overruns. The
 * ticks block the loop past the housekeeping timer's next round, so the
 * loop lag on /metrics and on /health's second line is above zero. */
static void test_overrunning_plugin_is_timed_counted_and_logged_once_per_interval(void **state)
{
    (void)state;
    hx_master m;
    char *body = NULL;
    double ticks = 0;
    assert_int_equal(hx_init(&m, "tickbudget", config_extra()), 0);
    assert_int_equal(hx_start(&m, 30000), 0);

    /* A couple of seconds of overrunning ticks (bounded wait, not asserted). */
    for (int i = 0; i < 600 && ticks < 25; i++) {
        sleep_ms(50);
        body = scrape(&m);
        ticks = sample(body, "tick_overrun_ticks_total");
        free(body);
    }
    assert_true(ticks >= 25);

    body = scrape(&m);
    assert_non_null(strstr(body, "# TYPE host_plugin_tick_seconds histogram\n"));
    assert_non_null(strstr(body, "# TYPE host_plugin_tick_overrun_total counter\n"));
    assert_non_null(strstr(body, "# TYPE host_plugin_guard_seconds histogram\n"));
    assert_non_null(strstr(body, "# TYPE host_plugin_guard_overrun_total counter\n"));
    assert_non_null(strstr(body, "# TYPE host_loop_lag_seconds gauge\n"));
    double plugin_ticks = sample(body, "tick_overrun_ticks_total");
    double plugin_late = sample(body, "tick_overrun_late_total");
    double count = sample(body, "host_plugin_tick_seconds_count{plugin=\"tick_overrun\"}");
    double inf = sample(body, "host_plugin_tick_seconds_bucket{plugin=\"tick_overrun\",le=\"+Inf\"}");
    double sum = sample(body, "host_plugin_tick_seconds_sum{plugin=\"tick_overrun\"}");
    double overruns = sample(body, "host_plugin_tick_overrun_total{plugin=\"tick_overrun\"}");
    double lag_metric = sample(body, "host_loop_lag_seconds");
    /* Before any guard call its series are exported at 0. */
    assert_true(sample(body, "host_plugin_guard_seconds_count{plugin=\"tick_overrun\"}") == 0);
    assert_true(sample(body, "host_plugin_guard_overrun_total{plugin=\"tick_overrun\"}") == 0);
    free(body);
    assert_true(plugin_ticks >= 25);
    assert_true(count == plugin_ticks);
    assert_true(inf == count);
    assert_true(sum > 0);
    assert_true(plugin_late == plugin_ticks); /* each tick saw its deadline pass */
    assert_true(overruns == count);           /* and the host counted each one */
    assert_true(lag_metric > 0);

    /* Far fewer lines than overruns: every line stands for itself and the
     * overruns it says it left out, and those add up to no more than the
     * overruns counted. */
    char *log = read_log(&m);
    unsigned long long left_out = 0;
    unsigned lines = count_lines(log, TICK_LINE, &left_out);
    free(log);
    assert_true(lines >= 1);
    assert_true((double)lines + (double)left_out <= overruns);
    assert_true((double)lines * 10 <= overruns);

    /* Guard calls: 5 fast removals, 3 slow ones. */
    kvc *c = hx_client(&m);
    assert_non_null(c);
    unsigned char sha[32] = {0};
    const char *keys[] = {"fast/1", "fast/2", "fast/3", "fast/4", "fast/5",
                          "slow/1", "slow/2", "slow/3"};
    for (size_t i = 0; i < 8; i++) {
        assert_int_equal(kvc_put_start(c, keys[i], 5, SMP_DATA_KV, NULL, 0, NULL), 0);
        assert_int_equal(kvc_put_end(c, keys[i], sha, NULL), 0);
    }
    for (size_t i = 0; i < 8; i++) assert_int_equal(kvc_remove(c, keys[i]), 0);
    kvc_close(c);
    body = scrape(&m);
    double guard_calls = sample(body, "tick_overrun_guard_calls_total");
    double guard_count = sample(body, "host_plugin_guard_seconds_count{plugin=\"tick_overrun\"}");
    double guard_inf =
        sample(body, "host_plugin_guard_seconds_bucket{plugin=\"tick_overrun\",le=\"+Inf\"}");
    double guard_1ms =
        sample(body, "host_plugin_guard_seconds_bucket{plugin=\"tick_overrun\",le=\"0.001\"}");
    double guard_overruns = sample(body, "host_plugin_guard_overrun_total{plugin=\"tick_overrun\"}");
    free(body);
    assert_true(guard_calls >= 8);
    assert_true(guard_count == guard_calls);
    assert_true(guard_inf == guard_count);
    assert_true(guard_overruns >= 3 && guard_overruns <= guard_count);
    assert_true(guard_1ms >= 0 && guard_1ms <= guard_count - 3); /* the slow ones are above 1 ms */
    log = read_log(&m);
    unsigned guard_lines = count_lines(log, GUARD_LINE, &left_out);
    free(log);
    assert_true(guard_lines >= 1);
    assert_true((double)guard_lines + (double)left_out <= guard_overruns);

    /* /health: the verdict first, unchanged; then the loop lag. */
    assert_int_equal(hx_http_get(&m, "/health", &body), 200);
    assert_int_equal(strncmp(body, "ok\n", 3), 0);
    const char *lag = strstr(body, "\nloop lag ");
    assert_non_null(lag);
    char *end = NULL;
    double lag_ms = strtod(lag + strlen("\nloop lag "), &end);
    assert_true(end != NULL && strncmp(end, " ms", 3) == 0);
    assert_true(lag_ms > 0);
    free(body);

    assert_int_equal(hx_stop(&m), 0);
    hx_cleanup(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overrunning_plugin_is_timed_counted_and_logged_once_per_interval),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
