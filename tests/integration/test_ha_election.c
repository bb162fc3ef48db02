/* test_ha_election.c -- an election whose winner never heard that it won.
 *
 * Debian's etcd (one member) and two store_master processes in HA mode
 * (ha_cluster_fixture.c). A campaign is one transaction: create the leader
 * key under this master's lease if it is absent. When etcd applies it but
 * its answer misses the call's deadline (etcd slow: SMP_EIO, "it may have
 * been applied"), the master's next round finds the key standing -- under
 * its own lease. It took that key for another master's, so nobody led:
 * the others waited for a key that this master's renewals kept alive. Met
 * with the suite at -j4 beside two busy loops and an etcd member paused
 * (test_ha_failover): "the leader is m2" in m2's own log, and no leader
 * for 20 s.
 *
 * The lost answer is made on demand: with m0 leading and m1 a standby, the
 * test writes the leader key as m1's lost create would have left it (m1's
 * registry entry as the value, under m1's lease). m1 must then lead (its
 * log says why), m0 step down, and the cluster take a put through the
 * master list and read it back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ha_cluster_fixture.h"
#include "harness.h"
#include "kv_client.h"

#define WAIT_MS 20000

typedef struct fx {
    hc_cluster hc;
    hx_master view; /* the list of the masters */
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    if (f == NULL) return -1;
    *state = f;
    if (hc_init(&f->hc, "ha-election", 1) < 0 || hc_list_view(&f->hc, &f->view) < 0) {
        hc_cleanup(&f->hc);
        free(f);
        *state = NULL;
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    if (f == NULL) return 0;
    hc_cleanup(&f->hc);
    free(f);
    return 0;
}

static void test_a_master_that_won_unanswered_leads(void **state)
{
    fx *f = *state;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(hc_configure(&f->hc, i, ""), 0);
        if (hx_start(&f->hc.m[i], WAIT_MS) < 0) fail_msg("master %d did not start", i);
        if (i == 0 && hc_wait_leader(&f->hc, -1, WAIT_MS) != 0) fail_msg("m0 does not lead");
    }
    assert_int_equal(hc_wait_role(&f->hc, 1, "standby", WAIT_MS), 0);

    /* the leader key as m1's lost create would have left it */
    assert_int_equal(hc_leader_key_of(&f->hc, 1), 0);

    /* m1 leads (m0 lost its key and steps down) */
    if (hc_wait_leader(&f->hc, 0, WAIT_MS) != 1) fail_msg("m1 does not lead");
    assert_true(hx_wait_log(&f->hc.m[1], "the leader key stands under this master's own lease",
                            WAIT_MS));
    assert_int_equal(hc_wait_role(&f->hc, 0, "standby", WAIT_MS), 0);
    assert_int_equal(hc_wait_leader(&f->hc, -1, WAIT_MS), 1);

    /* and the cluster takes a put through the list */
    assert_int_equal(hc_node_start(&f->hc, "n1", 16u << 20), 0);
    assert_int_equal(hc_wait_node(&f->hc, 1, WAIT_MS), 0);
    kvc *c = hx_client(&f->view);
    assert_non_null(c);
    uint8_t got[8] = {0};
    uint64_t len = 0;
    assert_int_equal(kvc_put_bytes(c, "kv/after", "elected", 7, SMP_DATA_KV, NULL, 0, NULL), 0);
    assert_int_equal(kvc_get_into(c, "kv/after", got, sizeof(got), &len, 1), 0);
    assert_int_equal(len, 7);
    assert_memory_equal(got, "elected", 7);
    kvc_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_master_that_won_unanswered_leads, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
