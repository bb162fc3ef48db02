/* test_metrics.c -- the metric registry and its Prometheus text output.
 *
 * Pins registration rules (names, label counts, duplicates), series keyed by
 * label tuples, counter/gauge updates, unregistering, and the exact rendered
 * text: HELP and TYPE lines, escaping, and the stable order (families in
 * registration order, series in creation order). Histograms: their
 * registration rules, and the exact text of cumulative _bucket lines ending
 * with le="+Inf", _sum and _count. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "metrics.h"

static int setup(void **state)
{
    host_metrics *m = NULL;
    if (host_metrics_create(&m) != SMP_OK) return -1;
    *state = m;
    return 0;
}

static int teardown(void **state)
{
    host_metrics_destroy(*state);
    return 0;
}

static char *render(host_metrics *m)
{
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(host_metrics_render(m, &text, &len), SMP_OK);
    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    return text;
}

/* An empty registry renders as the empty string. */
static void test_empty_registry_renders_nothing(void **state)
{
    char *text = render(*state);
    assert_string_equal(text, "");
    free(text);
}

/* Bad names, too many labels, duplicate label names and duplicate families
 * are refused with the documented codes; nothing is added. */
static void test_registration_rules(void **state)
{
    host_metrics *m = *state;
    host_metric *f = NULL;
    const char *five[] = {"a", "b", "c", "d", "e", NULL};
    const char *dup[] = {"a", "a", NULL};
    const char *reserved[] = {"__x", NULL};
    const char *digit[] = {"1a", NULL};

    assert_int_equal(host_metrics_register(m, SMP_METRIC_COUNTER, "1bad", "h", NULL, &f), SMP_EINVAL);
    assert_int_equal(host_metrics_register(m, SMP_METRIC_COUNTER, "bad-name", "h", NULL, &f), SMP_EINVAL);
    assert_int_equal(host_metrics_register(m, SMP_METRIC_COUNTER, "", "h", NULL, &f), SMP_EINVAL);
    assert_int_equal(host_metrics_register(m, SMP_METRIC_COUNTER, NULL, "h", NULL, &f), SMP_EINVAL);
    assert_int_equal(host_metrics_register(m, (smp_metric_kind)7, "x", "h", NULL, &f), SMP_EINVAL);
    assert_int_equal(host_metrics_register(m, SMP_METRIC_COUNTER, "x", "h", five, &f), SMP_EINVAL);
    assert_int_equal(host_metrics_register(m, SMP_METRIC_COUNTER, "x", "h", dup, &f), SMP_EINVAL);
    assert_int_equal(host_metrics_register(m, SMP_METRIC_COUNTER, "x", "h", reserved, &f), SMP_EINVAL);
    assert_int_equal(host_metrics_register(m, SMP_METRIC_COUNTER, "x", "h", digit, &f), SMP_EINVAL);
    assert_null(host_metrics_find(m, "x"));

    assert_int_equal(host_metrics_register(m, SMP_METRIC_GAUGE, "ns:x_total", "h", NULL, &f), SMP_OK);
    assert_ptr_equal(host_metrics_find(m, "ns:x_total"), f);
    assert_int_equal(host_metrics_register(m, SMP_METRIC_COUNTER, "ns:x_total", "other", NULL, NULL),
                     SMP_EEXIST);
}

/* Each distinct label tuple is its own series; add accumulates, set
 * replaces; an unknown tuple reads as 0. */
static void test_series_by_label_tuple(void **state)
{
    host_metrics *m = *state;
    host_metric *f = NULL;
    const char *labels[] = {"reason", "tier", NULL};
    const char *a[] = {"evict", "hot"};
    const char *b[] = {"evict", "cold"};
    const char *c[] = {"remove", "hot"};

    assert_int_equal(host_metrics_register(m, SMP_METRIC_COUNTER, "x_total", "h", labels, &f), SMP_OK);
    host_metric_add(f, a, 1);
    host_metric_add(f, a, 2);
    host_metric_add(f, b, 5);
    assert_true(host_metric_value(f, a) == 3);
    assert_true(host_metric_value(f, b) == 5);
    assert_true(host_metric_value(f, c) == 0);
    host_metric_set(f, b, 1.5);
    assert_true(host_metric_value(f, b) == 1.5);
    /* A labelled family ignores an update without values instead of crashing. */
    host_metric_add(f, NULL, 1);
    host_metric_add(NULL, a, 1);
    assert_true(host_metric_value(f, NULL) == 0);
}

/* The exact text: families in registration order with HELP/TYPE, series in
 * creation order, an unlabelled family rendered with its 0 series, label
 * values escaped, help newlines and backslashes escaped. */
static void test_render_exact_text(void **state)
{
    host_metrics *m = *state;
    host_metric *req = NULL, *mem = NULL, *up = NULL;
    const char *labels[] = {"path", NULL};
    const char *p1[] = {"z/second"};
    const char *p2[] = {"a\\b\"c\nd"};
    char *text;

    assert_int_equal(host_metrics_register(m, SMP_METRIC_COUNTER, "zz_requests_total",
                                           "Requests by path.", labels, &req), SMP_OK);
    assert_int_equal(host_metrics_register(m, SMP_METRIC_GAUGE, "aa_memory_bytes",
                                           "Memory \\ in \"use\"\nnow.", NULL, &mem), SMP_OK);
    assert_int_equal(host_metrics_register(m, SMP_METRIC_GAUGE, "up", NULL, NULL, &up), SMP_OK);
    host_metric_add(req, p1, 3);
    host_metric_add(req, p2, 1);
    host_metric_set(mem, NULL, 1073741824.0);

    text = render(m);
    assert_string_equal(text,
                        "# HELP zz_requests_total Requests by path.\n"
                        "# TYPE zz_requests_total counter\n"
                        "zz_requests_total{path=\"z/second\"} 3\n"
                        "zz_requests_total{path=\"a\\\\b\\\"c\\nd\"} 1\n"
                        "# HELP aa_memory_bytes Memory \\\\ in \"use\"\\nnow.\n"
                        "# TYPE aa_memory_bytes gauge\n"
                        "aa_memory_bytes 1073741824\n"
                        "# HELP up \n"
                        "# TYPE up gauge\n"
                        "up 0\n");
    free(text);
}

/* Fractions print as the shortest text that reads back exactly, integral
 * values as plain digits; non-finite values use the exposition format's
 * spellings. */
static void test_render_values(void **state)
{
    host_metrics *m = *state;
    host_metric *f = NULL;
    const char *labels[] = {"k", NULL};
    const char *a[] = {"a"}, *b[] = {"b"}, *c[] = {"c"}, *d[] = {"d"};
    char *text;

    assert_int_equal(host_metrics_register(m, SMP_METRIC_GAUGE, "g", "h", labels, &f), SMP_OK);
    host_metric_set(f, a, 0.1);
    host_metric_set(f, b, -2.5);
    host_metric_set(f, c, INFINITY);
    host_metric_set(f, d, NAN);
    const char *e[] = {"e"}, *g[] = {"g"};
    host_metric_set(f, e, 1234567); /* integral: digits, never 1.234567e+06 */
    host_metric_set(f, g, 10);
    text = render(m);
    assert_string_equal(text,
                        "# HELP g h\n# TYPE g gauge\n"
                        "g{k=\"a\"} 0.1\n"
                        "g{k=\"b\"} -2.5\n"
                        "g{k=\"c\"} +Inf\n"
                        "g{k=\"d\"} NaN\n"
                        "g{k=\"e\"} 1234567\n"
                        "g{k=\"g\"} 10\n");
    free(text);
}

/* Unregistering removes the family from rendering and lookup, keeps the
 * others in order, and frees its series (valgrind/ASan check the latter). */
static void test_unregister(void **state)
{
    host_metrics *m = *state;
    host_metric *a = NULL, *b = NULL, *c = NULL;
    const char *labels[] = {"k", NULL};
    const char *v[] = {"x"};
    char *text;

    assert_int_equal(host_metrics_register(m, SMP_METRIC_COUNTER, "a", "A", NULL, &a), SMP_OK);
    assert_int_equal(host_metrics_register(m, SMP_METRIC_COUNTER, "b", "B", labels, &b), SMP_OK);
    assert_int_equal(host_metrics_register(m, SMP_METRIC_COUNTER, "c", "C", NULL, &c), SMP_OK);
    host_metric_add(b, v, 1);
    host_metrics_unregister(m, b);
    host_metrics_unregister(m, NULL);
    assert_null(host_metrics_find(m, "b"));
    text = render(m);
    assert_string_equal(text,
                        "# HELP a A\n# TYPE a counter\na 0\n"
                        "# HELP c C\n# TYPE c counter\nc 0\n");
    free(text);
    /* The name is free again. */
    assert_int_equal(host_metrics_register(m, SMP_METRIC_GAUGE, "b", "B2", NULL, &b), SMP_OK);
}

/* Many series and families grow the tables without losing order. */
static void test_many_series_keep_creation_order(void **state)
{
    host_metrics *m = *state;
    host_metric *f = NULL;
    const char *labels[] = {"i", NULL};
    char name[16];
    char *text;

    assert_int_equal(host_metrics_register(m, SMP_METRIC_COUNTER, "many", "h", labels, &f), SMP_OK);
    for (int i = 99; i >= 0; i--) {
        const char *v[1] = {name};
        snprintf(name, sizeof(name), "%d", i);
        host_metric_add(f, v, i);
    }
    text = render(m);
    assert_non_null(strstr(text, "many{i=\"99\"} 99\nmany{i=\"98\"} 98\n"));
    assert_non_null(strstr(text, "many{i=\"1\"} 1\nmany{i=\"0\"} 0\n"));
    free(text);
}

/* A labelled histogram: each series renders its buckets cumulatively in
 * bound order, le="+Inf" equal to _count, then _sum and _count; le comes
 * after the family's labels; an observation equal to a bound lands in that
 * bound's bucket; one above every bound only in +Inf. */
static void test_histogram_render_exact_text(void **state)
{
    host_metrics *m = *state;
    host_metric *h = NULL;
    const char *labels[] = {"plugin", NULL};
    const double bounds[] = {0.001, 0.01, 0.1};
    const char *a[] = {"a"};
    const char *b[] = {"b\"q"};
    assert_int_equal(host_metrics_register_histogram(m, "tick_seconds", "Tick time", labels, bounds,
                                                     3, &h),
                     SMP_OK);
    host_metric_observe(h, a, 0.0005);
    host_metric_observe(h, a, 0.001); /* on the bound: le="0.001" */
    host_metric_observe(h, a, 0.05);
    host_metric_observe(h, a, 2.5);   /* above every bound: +Inf only */
    host_metric_touch(h, b);          /* exported with no observation */
    char *text = render(m);
    assert_string_equal(text,
                        "# HELP tick_seconds Tick time\n"
                        "# TYPE tick_seconds histogram\n"
                        "tick_seconds_bucket{plugin=\"a\",le=\"0.001\"} 2\n"
                        "tick_seconds_bucket{plugin=\"a\",le=\"0.01\"} 2\n"
                        "tick_seconds_bucket{plugin=\"a\",le=\"0.1\"} 3\n"
                        "tick_seconds_bucket{plugin=\"a\",le=\"+Inf\"} 4\n"
                        "tick_seconds_sum{plugin=\"a\"} 2.5515\n"
                        "tick_seconds_count{plugin=\"a\"} 4\n"
                        "tick_seconds_bucket{plugin=\"b\\\"q\",le=\"0.001\"} 0\n"
                        "tick_seconds_bucket{plugin=\"b\\\"q\",le=\"0.01\"} 0\n"
                        "tick_seconds_bucket{plugin=\"b\\\"q\",le=\"0.1\"} 0\n"
                        "tick_seconds_bucket{plugin=\"b\\\"q\",le=\"+Inf\"} 0\n"
                        "tick_seconds_sum{plugin=\"b\\\"q\"} 0\n"
                        "tick_seconds_count{plugin=\"b\\\"q\"} 0\n");
    free(text);
    uint64_t count = 0;
    double sum = 0;
    host_metric_histogram_get(h, a, &count, &sum);
    assert_int_equal(count, 4);
    assert_true(fabs(sum - 2.5515) < 1e-12);
}

/* An unlabelled histogram is exported (all zero) before its first
 * observation; le is its only label; add and set leave it alone. */
static void test_histogram_unlabelled(void **state)
{
    host_metrics *m = *state;
    host_metric *h = NULL;
    const double bounds[] = {1, 5};
    assert_int_equal(host_metrics_register_histogram(m, "lag_seconds", "Lag", NULL, bounds, 2, &h),
                     SMP_OK);
    char *text = render(m);
    assert_string_equal(text,
                        "# HELP lag_seconds Lag\n"
                        "# TYPE lag_seconds histogram\n"
                        "lag_seconds_bucket{le=\"1\"} 0\n"
                        "lag_seconds_bucket{le=\"5\"} 0\n"
                        "lag_seconds_bucket{le=\"+Inf\"} 0\n"
                        "lag_seconds_sum 0\n"
                        "lag_seconds_count 0\n");
    free(text);
    host_metric_add(h, NULL, 7);
    host_metric_set(h, NULL, 7);
    host_metric_observe(h, NULL, 3);
    host_metric_observe(h, NULL, 3);
    text = render(m);
    assert_string_equal(text,
                        "# HELP lag_seconds Lag\n"
                        "# TYPE lag_seconds histogram\n"
                        "lag_seconds_bucket{le=\"1\"} 0\n"
                        "lag_seconds_bucket{le=\"5\"} 2\n"
                        "lag_seconds_bucket{le=\"+Inf\"} 2\n"
                        "lag_seconds_sum 6\n"
                        "lag_seconds_count 2\n");
    free(text);
}

/* Buckets are cumulative: every bucket counts the observations at or below
 * its bound, so the series never decrease along le, and +Inf is the count. */
static void test_histogram_buckets_are_cumulative(void **state)
{
    host_metrics *m = *state;
    host_metric *h = NULL;
    const double bounds[] = {1, 2, 3, 4};
    assert_int_equal(host_metrics_register_histogram(m, "h", "", NULL, bounds, 4, &h), SMP_OK);
    for (int i = 0; i < 10; i++) host_metric_observe(h, NULL, (double)(i % 6)); /* 0..5 */
    char *text = render(m);
    /* 0,1 -> le 1 (4 of them: 0,1,0,1); 2 -> 2 more; 3 -> 2 more; 4 -> 1; 5 -> +Inf only. */
    assert_non_null(strstr(text, "h_bucket{le=\"1\"} 4\n"));
    assert_non_null(strstr(text, "h_bucket{le=\"2\"} 6\n"));
    assert_non_null(strstr(text, "h_bucket{le=\"3\"} 8\n"));
    assert_non_null(strstr(text, "h_bucket{le=\"4\"} 9\n"));
    assert_non_null(strstr(text, "h_bucket{le=\"+Inf\"} 10\n"));
    assert_non_null(strstr(text, "h_sum 21\n"));
    assert_non_null(strstr(text, "h_count 10\n"));
    free(text);
}

/* Histogram registration: bounds must be finite and strictly increasing,
 * 1..HOST_METRIC_MAX_BUCKETS of them, and no label may be called le.
 * Counters and gauges ignore observe. */
static void test_histogram_registration_rules(void **state)
{
    host_metrics *m = *state;
    host_metric *f = NULL;
    const double flat[] = {1, 1};
    const double down[] = {2, 1};
    const double inf[] = {1, INFINITY};
    const double ok[] = {1};
    double many[HOST_METRIC_MAX_BUCKETS + 1];
    const char *le[] = {"le", NULL};
    for (int i = 0; i <= HOST_METRIC_MAX_BUCKETS; i++) many[i] = i + 1;
    assert_int_equal(host_metrics_register_histogram(m, "h", "", NULL, flat, 2, &f), SMP_EINVAL);
    assert_int_equal(host_metrics_register_histogram(m, "h", "", NULL, down, 2, &f), SMP_EINVAL);
    assert_int_equal(host_metrics_register_histogram(m, "h", "", NULL, inf, 2, &f), SMP_EINVAL);
    assert_int_equal(host_metrics_register_histogram(m, "h", "", NULL, ok, 0, &f), SMP_EINVAL);
    assert_int_equal(host_metrics_register_histogram(m, "h", "", NULL, NULL, 1, &f), SMP_EINVAL);
    assert_int_equal(host_metrics_register_histogram(m, "h", "", le, ok, 1, &f), SMP_EINVAL);
    assert_int_equal(host_metrics_register_histogram(m, "h", "", NULL, many,
                                                     HOST_METRIC_MAX_BUCKETS + 1, &f),
                     SMP_EINVAL);
    assert_null(host_metrics_find(m, "h"));
    assert_int_equal(host_metrics_register_histogram(m, "h", "", NULL, many,
                                                     HOST_METRIC_MAX_BUCKETS, &f),
                     SMP_OK);
    assert_int_equal(host_metrics_register_histogram(m, "h", "", NULL, ok, 1, &f), SMP_EEXIST);
    host_metric *c = NULL;
    assert_int_equal(host_metrics_register(m, SMP_METRIC_COUNTER, "c", "", le, &c), SMP_OK);
    const char *v[] = {"x"};
    host_metric_observe(c, v, 1);
    assert_true(host_metric_value(c, v) == 0);
    uint64_t count = 9;
    host_metric_histogram_get(c, v, &count, NULL);
    assert_int_equal(count, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_empty_registry_renders_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_registration_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_series_by_label_tuple, setup, teardown),
        cmocka_unit_test_setup_teardown(test_render_exact_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_render_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unregister, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_series_keep_creation_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_histogram_render_exact_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_histogram_unlabelled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_histogram_buckets_are_cumulative, setup, teardown),
        cmocka_unit_test_setup_teardown(test_histogram_registration_rules, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
