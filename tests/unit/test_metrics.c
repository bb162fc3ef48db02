/* test_metrics.c -- the metric registry and its Prometheus text output.
 *
 * Pins registration rules (names, label counts, duplicates), series keyed by
 * label tuples, counter/gauge updates, unregistering, and the exact rendered
 * text: HELP and TYPE lines, escaping, and the stable order (families in
 * registration order, series in creation order). */
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

/* Fractions print as the shortest text that reads back exactly; non-finite
 * values use the exposition format's spellings. */
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
    text = render(m);
    assert_string_equal(text,
                        "# HELP g h\n# TYPE g gauge\n"
                        "g{k=\"a\"} 0.1\n"
                        "g{k=\"b\"} -2.5\n"
                        "g{k=\"c\"} +Inf\n"
                        "g{k=\"d\"} NaN\n");
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
