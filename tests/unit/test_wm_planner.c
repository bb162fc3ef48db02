/* test_wm_planner.c -- the side-effect-free residency planner.
 *
 * MIXED selection (the default ratio, overrides, a ratio no split can meet,
 * units never split, a unit larger than the target, no split at all, the
 * scaled and greedy searches on large inputs, determinism), the AUTO
 * demotion filter and order, and the bounding of one reconcile round. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "weight_residency_planner.h"
#include "wm_test_records.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static uint64_t sum_of(const uint64_t *b, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) s += b[i];
    return s;
}

/* The plan must describe exactly the flagged units, with at least one unit
 * on each side. */
static void assert_plan_consistent(const uint64_t *b, size_t n, const unsigned char *hot,
                                   const wm_mixed_plan *p)
{
    uint64_t hb = 0;
    size_t hu = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(hot[i] == 0 || hot[i] == 1);
        if (hot[i]) {
            hb += b[i];
            hu++;
        }
    }
    assert_int_equal(hb, p->hot_bytes);
    assert_int_equal(hu, p->hot_units);
    assert_true(p->hot_bytes > 0 && p->hot_bytes < p->total_bytes);
    assert_true(fabs(p->observed_hot_ratio - (double)hb / (double)p->total_bytes) < 1e-12);
}

static void test_mixed_default_half(void **state)
{
    (void)state;
    const uint64_t b[] = {10, 20, 30, 40};
    unsigned char hot[N(b)];
    wm_mixed_plan p;
    assert_int_equal(wm_plan_mixed(b, N(b), 100, WM_DEFAULT_MIXED_HOT_RATIO, hot, &p), WM_OK);
    assert_plan_consistent(b, N(b), hot, &p);
    assert_int_equal(p.target_bytes, 50);
    assert_int_equal(p.hot_bytes, 50);
    assert_true(p.observed_hot_ratio == 0.5);
    assert_int_equal(p.method, WM_PLAN_EXACT);
    /* {10, 40} and {20, 30} tie; the one formed from earlier units first wins
     * and is the same on every run. */
    assert_int_equal(hot[0], 0);
    assert_int_equal(hot[1], 1);
    assert_int_equal(hot[2], 1);
    assert_int_equal(hot[3], 0);
}

static void test_mixed_ratio_overrides(void **state)
{
    (void)state;
    const uint64_t b[] = {10, 20, 30, 40};
    unsigned char hot[N(b)];
    wm_mixed_plan p;
    assert_int_equal(wm_plan_mixed(b, N(b), 100, 0.1, hot, &p), WM_OK);
    assert_plan_consistent(b, N(b), hot, &p);
    assert_int_equal(p.hot_bytes, 10);
    assert_true(hot[0] && !hot[1] && !hot[2] && !hot[3]);
    assert_int_equal(wm_plan_mixed(b, N(b), 100, 0.9, hot, &p), WM_OK);
    assert_plan_consistent(b, N(b), hot, &p);
    assert_int_equal(p.hot_bytes, 90);
    assert_true(!hot[0] && hot[1] && hot[2] && hot[3]);
    assert_true(fabs(p.observed_hot_ratio - 0.9) < 1e-12);
}

static void test_mixed_impossible_ratio_reports_observed(void **state)
{
    (void)state;
    /* Two tensors of 30 and 70: 50% cannot be met; 30 and 70 are equally
     * far, and the tie goes to fewer HOT bytes. */
    const uint64_t b[] = {30, 70};
    unsigned char hot[N(b)];
    wm_mixed_plan p;
    assert_int_equal(wm_plan_mixed(b, N(b), 100, 0.5, hot, &p), WM_OK);
    assert_plan_consistent(b, N(b), hot, &p);
    assert_int_equal(p.hot_bytes, 30);
    assert_true(fabs(p.observed_hot_ratio - 0.3) < 1e-12);
    /* At 0.55 the target is 55: 70 is nearer than 30. */
    assert_int_equal(wm_plan_mixed(b, N(b), 100, 0.55, hot, &p), WM_OK);
    assert_int_equal(p.hot_bytes, 70);
    assert_true(fabs(p.observed_hot_ratio - 0.7) < 1e-12);
}

static void test_mixed_unit_larger_than_target(void **state)
{
    (void)state;
    /* Target 70 of 100: the 80-byte unit alone is nearest, although it is
     * larger than the target; it is taken whole. */
    const uint64_t b[] = {80, 20};
    unsigned char hot[N(b)];
    wm_mixed_plan p;
    assert_int_equal(wm_plan_mixed(b, N(b), 100, 0.7, hot, &p), WM_OK);
    assert_plan_consistent(b, N(b), hot, &p);
    assert_true(hot[0] && !hot[1]);
    /* A ratio so small that the smallest unit overshoots it still leaves one
     * unit HOT: MIXED means some units HOT. */
    const uint64_t c[] = {500, 400, 100};
    unsigned char hc[N(c)];
    assert_int_equal(wm_plan_mixed(c, N(c), 1000, 0.001, hc, &p), WM_OK);
    assert_plan_consistent(c, N(c), hc, &p);
    assert_int_equal(p.hot_bytes, 100);
    /* And one so large that all but the smallest go HOT. */
    assert_int_equal(wm_plan_mixed(c, N(c), 1000, 0.999, hc, &p), WM_OK);
    assert_plan_consistent(c, N(c), hc, &p);
    assert_int_equal(p.hot_bytes, 900);
}

static void test_mixed_without_a_split(void **state)
{
    (void)state;
    const uint64_t one[] = {100};
    unsigned char hot[3];
    wm_mixed_plan p;
    assert_int_equal(wm_plan_mixed(one, 1, 100, 0.3, hot, &p), WM_EPOLICY_UNSATISFIABLE);
    assert_int_equal(hot[0], 0);
    assert_int_equal(p.hot_bytes, 0);
    assert_true(p.observed_hot_ratio == 0.0);
    assert_int_equal(wm_plan_mixed(one, 1, 100, 0.7, hot, &p), WM_EPOLICY_UNSATISFIABLE);
    assert_int_equal(hot[0], 1);
    assert_true(p.observed_hot_ratio == 1.0);
    /* Zero-byte units do not make a split and stay COLD. */
    const uint64_t z[] = {0, 100, 0};
    assert_int_equal(wm_plan_mixed(z, 3, 100, 0.7, hot, &p), WM_EPOLICY_UNSATISFIABLE);
    assert_true(!hot[0] && hot[1] && !hot[2]);
    assert_int_equal(wm_plan_mixed(NULL, 0, 0, 0.5, NULL, &p), WM_EPOLICY_UNSATISFIABLE);
    assert_int_equal(p.total_bytes, 0);
    const uint64_t z2[] = {0, 60, 40, 0};
    unsigned char h2[4];
    assert_int_equal(wm_plan_mixed(z2, 4, 100, 0.5, h2, &p), WM_OK);
    assert_true(!h2[0] && !h2[3]);
    assert_int_equal(p.hot_bytes, 40);
}

static void test_mixed_refuses_bad_input(void **state)
{
    (void)state;
    const uint64_t b[] = {10, 20};
    unsigned char hot[2];
    wm_mixed_plan p;
    assert_int_equal(wm_plan_mixed(b, 2, 31, 0.5, hot, &p), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_plan_mixed(b, 2, 30, 0.0, hot, &p), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_plan_mixed(b, 2, 30, 1.0, hot, &p), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_plan_mixed(b, 2, 30, NAN, hot, &p), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_plan_mixed(b, 2, 30, 0.5, NULL, &p), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_plan_mixed(b, 2, 30, 0.5, hot, NULL), WM_EINVALID_ARGUMENT);
    const uint64_t big[] = {UINT64_MAX, 2};
    assert_int_equal(wm_plan_mixed(big, 2, 1, 0.5, hot, &p), WM_EINVALID_ARGUMENT);
}

static void test_mixed_scaled_dp_on_real_sizes(void **state)
{
    (void)state;
    /* 300 tensors between 1 MiB and about 300 MiB. */
    enum { n = 300 };
    uint64_t b[n];
    unsigned char hot[n], again[n];
    for (size_t i = 0; i < n; i++) b[i] = ((uint64_t)(i * 7919 % 300) + 1) * 1048576 + i * 13;
    uint64_t total = sum_of(b, n);
    const double ratios[] = {0.1, 0.37, 0.5, 0.9};
    for (size_t k = 0; k < N(ratios); k++) {
        wm_mixed_plan p, q;
        assert_int_equal(wm_plan_mixed(b, n, total, ratios[k], hot, &p), WM_OK);
        assert_int_equal(p.method, WM_PLAN_SCALED);
        assert_plan_consistent(b, n, hot, &p);
        assert_true(fabs(p.observed_hot_ratio - ratios[k]) < 0.01);
        assert_int_equal(wm_plan_mixed(b, n, total, ratios[k], again, &q), WM_OK);
        assert_memory_equal(hot, again, n);
        assert_memory_equal(&p, &q, sizeof(p));
    }
}

static void test_mixed_greedy_on_many_units(void **state)
{
    (void)state;
    enum { n = WM_PLAN_DP_MAX_UNITS + 1000 };
    uint64_t *b = calloc(n, sizeof(*b));
    unsigned char *hot = calloc(n, 1);
    assert_non_null(b);
    assert_non_null(hot);
    for (size_t i = 0; i < n; i++) b[i] = 4096 + (i * 2654435761u) % 100000;
    uint64_t total = sum_of(b, n);
    wm_mixed_plan p;
    assert_int_equal(wm_plan_mixed(b, n, total, 0.25, hot, &p), WM_OK);
    assert_int_equal(p.method, WM_PLAN_GREEDY);
    assert_plan_consistent(b, n, hot, &p);
    assert_true(fabs(p.observed_hot_ratio - 0.25) < 0.001);
    free(b);
    free(hot);
}

static void test_mixed_exact_is_optimal_on_small_inputs(void **state)
{
    (void)state;
    /* Compare with brute force on every subset of 10 small units. */
    const uint64_t b[] = {13, 7, 101, 55, 3, 89, 34, 21, 8, 144};
    const size_t n = N(b);
    uint64_t total = sum_of(b, n);
    for (int r = 1; r < 100; r += 7) {
        double ratio = r / 100.0;
        unsigned char hot[N(b)];
        wm_mixed_plan p;
        assert_int_equal(wm_plan_mixed(b, n, total, ratio, hot, &p), WM_OK);
        assert_int_equal(p.method, WM_PLAN_EXACT);
        uint64_t best = UINT64_MAX;
        for (unsigned mask = 1; mask + 1 < (1u << n); mask++) {
            uint64_t s = 0;
            for (size_t i = 0; i < n; i++)
                if (mask & (1u << i)) s += b[i];
            uint64_t d = s > p.target_bytes ? s - p.target_bytes : p.target_bytes - s;
            if (d < best) best = d;
        }
        uint64_t got = p.hot_bytes > p.target_bytes ? p.hot_bytes - p.target_bytes
                                                    : p.target_bytes - p.hot_bytes;
        assert_int_equal(got, best);
    }
}

/* ------------------------------------------------------------------------ */
/* Observed state                                                            */
/* ------------------------------------------------------------------------ */

static void test_observe_residency_from_replicas(void **state)
{
    (void)state;
    /* Units: {p0, p1} 60 bytes, {p2} 30 bytes, {p3} 10 bytes. */
    static char k0[] = "p0", k1[] = "p1", k2[] = "p2", k3[] = "p3";
    char *m0[] = {k0, k1}, *m1[] = {k2}, *m2[] = {k3};
    wm_affinity_unit units[] = {{m0, 2, 60}, {m1, 1, 30}, {m2, 1, 10}};
    wm_affinity aff = {units, 3, 0};
    wm_observation o;
    wm_member_replicas r[4];

    for (int i = 0; i < 4; i++) r[i] = (wm_member_replicas){1, 0};
    assert_int_equal(wm_residency_observe(&aff, r, 4, 1, &o), WM_OK);
    assert_int_equal(o.availability, WM_AVAIL_READY);
    assert_int_equal(o.residency, WM_RES_HOT);
    assert_true(o.observed_hot_ratio == 1.0);

    for (int i = 0; i < 4; i++) r[i] = (wm_member_replicas){0, 1};
    assert_int_equal(wm_residency_observe(&aff, r, 4, 1, &o), WM_OK);
    assert_int_equal(o.residency, WM_RES_COLD);
    assert_true(o.observed_hot_ratio == 0.0);

    /* Unit 0 hot, the rest cold: MIXED at 0.6. A unit half in memory is not
     * HOT: with p1 cold-only the ratio drops to 0. */
    r[0] = r[1] = (wm_member_replicas){1, 1};
    assert_int_equal(wm_residency_observe(&aff, r, 4, 1, &o), WM_OK);
    assert_int_equal(o.residency, WM_RES_MIXED);
    assert_true(fabs(o.observed_hot_ratio - 0.6) < 1e-12);
    assert_int_equal(o.hot_bytes, 60);
    r[1] = (wm_member_replicas){0, 1};
    assert_int_equal(wm_residency_observe(&aff, r, 4, 1, &o), WM_OK);
    assert_int_equal(o.residency, WM_RES_COLD);

    /* A member with nothing readable degrades the revision; so does the
     * manifest. */
    r[3] = (wm_member_replicas){0, 0};
    assert_int_equal(wm_residency_observe(&aff, r, 4, 1, &o), WM_OK);
    assert_int_equal(o.availability, WM_AVAIL_DEGRADED);
    assert_int_equal(o.unreadable_members, 1);
    r[3] = (wm_member_replicas){0, 1};
    assert_int_equal(wm_residency_observe(&aff, r, 4, 0, &o), WM_OK);
    assert_int_equal(o.availability, WM_AVAIL_DEGRADED);
    for (int i = 0; i < 4; i++) r[i] = (wm_member_replicas){0, 0};
    assert_int_equal(wm_residency_observe(&aff, r, 4, 1, &o), WM_OK);
    assert_int_equal(o.residency, WM_RES_ABSENT);
    assert_int_equal(o.availability, WM_AVAIL_DEGRADED);

    /* Wrong member count, empty summary. */
    assert_int_equal(wm_residency_observe(&aff, r, 3, 1, &o), WM_EINVALID_ARGUMENT);
    wm_affinity empty = {NULL, 0, 0};
    assert_int_equal(wm_residency_observe(&empty, r, 0, 1, &o), WM_EINVALID_ARGUMENT);
}

static void test_observation_passes_the_invariants(void **state)
{
    (void)state;
    /* Every replica pattern of a 3-unit revision yields a record that the
     * combination invariants accept. */
    const uint64_t bytes[] = {5, 0, 7};
    wm_revision rev;
    wm_affinity aff;
    wmt_ready_revision(&rev, &aff, "obs", 1, bytes, 3);
    for (unsigned mask = 0; mask < 64; mask++) {
        wm_member_replicas r[3];
        for (int i = 0; i < 3; i++) {
            r[i].memory = (mask >> (2 * i)) & 1;
            r[i].cold = (mask >> (2 * i + 1)) & 1;
        }
        for (int manifest = 0; manifest <= 1; manifest++) {
            wm_observation o;
            char msg[200] = "";
            assert_int_equal(wm_residency_observe(&aff, r, 3, manifest, &o), WM_OK);
            wm_revision x = rev;
            x.availability = o.availability;
            x.residency = o.residency;
            x.observed_hot_ratio = o.observed_hot_ratio;
            if (wm_metadata_check(&x, msg, sizeof(msg)) != WM_OK)
                fail_msg("replicas %#x manifest %d: %s", mask, manifest, msg);
        }
    }
    wm_affinity_clear(&aff);
}

/* ------------------------------------------------------------------------ */
/* AUTO                                                                      */
/* ------------------------------------------------------------------------ */

static void test_auto_steps(void **state)
{
    (void)state;
    assert_int_equal(wm_auto_next_demotion(WM_RES_HOT), WM_RES_MIXED);
    assert_int_equal(wm_auto_next_demotion(WM_RES_MIXED), WM_RES_COLD);
    assert_int_equal(wm_auto_next_demotion(WM_RES_COLD), WM_RES_UNKNOWN);
    assert_int_equal(wm_auto_next_demotion(WM_RES_ABSENT), WM_RES_UNKNOWN);
    assert_int_equal(wm_auto_promotion_target(WM_RES_COLD, WM_RES_MIXED), WM_RES_MIXED);
    assert_int_equal(wm_auto_promotion_target(WM_RES_COLD, WM_RES_HOT), WM_RES_HOT);
    assert_int_equal(wm_auto_promotion_target(WM_RES_MIXED, WM_RES_HOT), WM_RES_HOT);
    assert_int_equal(wm_auto_promotion_target(WM_RES_MIXED, WM_RES_MIXED), WM_RES_UNKNOWN);
    assert_int_equal(wm_auto_promotion_target(WM_RES_HOT, WM_RES_COLD), WM_RES_UNKNOWN);
    assert_int_equal(wm_auto_promotion_target(WM_RES_UNKNOWN, WM_RES_HOT), WM_RES_UNKNOWN);
}

static void test_auto_filters_and_orders_candidates(void **state)
{
    (void)state;
    wm_identity id[10];
    const char *names[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"};
    for (int i = 0; i < 10; i++) wmt_identity(&id[i], names[i], 1);
    wm_auto_candidate c[10];
    for (int i = 0; i < 10; i++) {
        c[i].id = &id[i];
        c[i].last_access_ms = 1000;
        c[i].releasable_hot_bytes = 100;
        c[i].availability = WM_AVAIL_READY;
        c[i].mode = WM_MODE_AUTO;
        c[i].residency = WM_RES_HOT;
        c[i].operation_id = 0;
        c[i].lease_count = 0;
    }
    c[0].availability = WM_AVAIL_DEGRADED; /* out: not READY */
    c[1].mode = WM_MODE_MANUAL;            /* out: not AUTO */
    c[2].mode = WM_MODE_PINNED;            /* out */
    c[3].operation_id = 5;                 /* out: busy */
    c[4].lease_count = 1;                  /* out: leased */
    c[5].residency = WM_RES_COLD;          /* out: nothing colder */
    c[6].last_access_ms = 500;             /* oldest: first */
    c[7].releasable_hot_bytes = 300;       /* same age as 8, 9: most bytes first */
    c[8].residency = WM_RES_MIXED;         /* 8 and 9 tie on age and bytes: by identity */
    size_t order[10], n = 99;
    assert_int_equal(wm_auto_order(c, 10, order, &n), WM_OK);
    assert_int_equal(n, 4);
    assert_int_equal(order[0], 6);
    assert_int_equal(order[1], 7);
    assert_int_equal(order[2], 8);
    assert_int_equal(order[3], 9);

    /* Identity breaks the tie whatever the input order. */
    wm_auto_candidate d[2] = {c[9], c[8]};
    assert_int_equal(wm_auto_order(d, 2, order, &n), WM_OK);
    assert_int_equal(n, 2);
    assert_int_equal(order[0], 1);
    assert_int_equal(order[1], 0);

    assert_int_equal(wm_auto_order(NULL, 0, NULL, &n), WM_OK);
    assert_int_equal(n, 0);
    c[3].id = NULL;
    assert_int_equal(wm_auto_order(c, 10, order, &n), WM_EINVALID_ARGUMENT);
}

/* ------------------------------------------------------------------------ */
/* Round bounding                                                            */
/* ------------------------------------------------------------------------ */

static void test_batch_takes_whole_units_within_limits(void **state)
{
    (void)state;
    const wm_batch_member m[] = {{0, 10}, {0, 10}, {1, 30}, {2, 5}, {2, 5}, {2, 5}, {3, 1}};
    wm_batch b;
    assert_int_equal(wm_batch_bound(m, N(m), 64, 1000, &b), WM_OK);
    assert_int_equal(b.members, 7);
    assert_int_equal(b.units, 4);
    assert_int_equal(b.bytes, 66);
    /* Byte limit 50: unit 0 (20) + unit 1 (30) = 50 fits, unit 2 would not. */
    assert_int_equal(wm_batch_bound(m, N(m), 64, 50, &b), WM_OK);
    assert_int_equal(b.members, 3);
    assert_int_equal(b.units, 2);
    assert_int_equal(b.bytes, 50);
    /* Member limit 4: units 0 and 1 (3 members); unit 2 (3 more) would be 6. */
    assert_int_equal(wm_batch_bound(m, N(m), 4, 1000, &b), WM_OK);
    assert_int_equal(b.members, 3);
    assert_int_equal(b.units, 2);
    /* The next round starts where this one stopped. */
    assert_int_equal(wm_batch_bound(m + 3, N(m) - 3, 4, 1000, &b), WM_OK);
    assert_int_equal(b.members, 4);
}

static void test_batch_progresses_with_an_oversized_unit(void **state)
{
    (void)state;
    const wm_batch_member m[] = {{7, 5000}, {7, 5000}, {8, 1}};
    wm_batch b;
    /* The first unit alone exceeds both limits and is still taken whole. */
    assert_int_equal(wm_batch_bound(m, N(m), 1, 100, &b), WM_OK);
    assert_int_equal(b.members, 2);
    assert_int_equal(b.units, 1);
    assert_int_equal(b.bytes, 10000);
    assert_int_equal(wm_batch_bound(m + 2, 1, 1, 100, &b), WM_OK);
    assert_int_equal(b.members, 1);
    /* Empty plans and zero limits. */
    assert_int_equal(wm_batch_bound(m, 0, 1, 1, &b), WM_OK);
    assert_int_equal(b.members, 0);
    assert_int_equal(wm_batch_bound(m, N(m), 0, 100, &b), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_batch_bound(m, N(m), 10, 0, &b), WM_EINVALID_ARGUMENT);
    assert_int_equal(wm_batch_bound(NULL, 3, 10, 10, &b), WM_EINVALID_ARGUMENT);
    /* Byte sums that would overflow stop the round instead of wrapping. */
    const wm_batch_member huge[] = {{0, UINT64_MAX}, {1, 2}};
    assert_int_equal(wm_batch_bound(huge, 2, 10, UINT64_MAX, &b), WM_OK);
    assert_int_equal(b.members, 1);
    assert_int_equal(b.bytes, UINT64_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_default_half),
        cmocka_unit_test(test_mixed_ratio_overrides),
        cmocka_unit_test(test_mixed_impossible_ratio_reports_observed),
        cmocka_unit_test(test_mixed_unit_larger_than_target),
        cmocka_unit_test(test_mixed_without_a_split),
        cmocka_unit_test(test_mixed_refuses_bad_input),
        cmocka_unit_test(test_mixed_scaled_dp_on_real_sizes),
        cmocka_unit_test(test_mixed_greedy_on_many_units),
        cmocka_unit_test(test_mixed_exact_is_optimal_on_small_inputs),
        cmocka_unit_test(test_observe_residency_from_replicas),
        cmocka_unit_test(test_observation_passes_the_invariants),
        cmocka_unit_test(test_auto_steps),
        cmocka_unit_test(test_auto_filters_and_orders_candidates),
        cmocka_unit_test(test_batch_takes_whole_units_within_limits),
        cmocka_unit_test(test_batch_progresses_with_an_oversized_unit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
