/* test_cold_usage.c -- the cold tier's report between a node, the master
 * and weightctl, decoded as the other side sees it.
 *
 * A registration or poll from a store_node from before the report carries
 * no ColdTierUsage: the master keeps the node's cold tier unknown (not 0
 * bytes, not 0 failures), whatever it knew before; one with a report makes
 * it known. On the client side a NodeStatus whose
 * node does not report is unknown, one without a cold directory none, one
 * whose statvfs failed an error with its failures still counted; a status
 * answer from a master before the per-node status holds no nodes.
 * The master's log line for a change between two reports: a tier that
 * became nearly full (under 5 % free), or has room again, and cold writes
 * that failed for lack of space since the last report -- once, not with
 * every poll. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "host_rpc.pb-c.h"
#include "kv_client.h"
#include "master_cold_usage.h"
#include "node_rpc.pb-c.h"

/* msg packed and unpacked again, as the master receives it. */
static NodeRegisterRequest *through_the_wire(const NodeRegisterRequest *msg)
{
    size_t len = node_register_request__get_packed_size(msg);
    uint8_t *buf = malloc(len + 1);
    assert_non_null(buf);
    node_register_request__pack(msg, buf);
    NodeRegisterRequest *r = node_register_request__unpack(NULL, len, buf);
    free(buf);
    assert_non_null(r);
    return r;
}

static void test_a_registration_without_the_report_is_unknown_not_zero(void **state)
{
    (void)state;
    NodeRegisterRequest old = NODE_REGISTER_REQUEST__INIT;
    old.node_id = "n";
    old.cold_dir = "/cold";
    NodeRegisterRequest *r = through_the_wire(&old);
    assert_null(r->cold_usage);
    master_cold_usage u;
    memset(&u, 0xff, sizeof(u)); /* what an earlier registration left */
    master_cold_usage_take(&u, r->cold_usage);
    assert_int_equal(u.reported, 0);
    assert_int_equal(u.total_bytes, 0);
    assert_int_equal(u.failures_no_space + u.failures_other, 0);
    node_register_request__free_unpacked(r, NULL);
}

static void test_a_registration_with_the_report_is_known(void **state)
{
    (void)state;
    NodeRegisterRequest req = NODE_REGISTER_REQUEST__INIT;
    ColdTierUsage cu = COLD_TIER_USAGE__INIT;
    cu.total_bytes = 1000;
    cu.free_bytes = 30;
    cu.used_bytes = 960;
    cu.write_failures_no_space = 2;
    cu.write_failures_other = 1;
    req.node_id = "n";
    req.cold_dir = "/cold";
    req.cold_usage = &cu;
    NodeRegisterRequest *r = through_the_wire(&req);
    master_cold_usage u;
    master_cold_usage_take(&u, r->cold_usage);
    assert_int_equal(u.reported, 1);
    assert_int_equal(u.total_bytes, 1000);
    assert_int_equal(u.free_bytes, 30);
    assert_int_equal(u.used_bytes, 960);
    assert_string_equal(u.error, "");
    assert_int_equal(u.failures_no_space, 2);
    assert_int_equal(u.failures_other, 1);
    node_register_request__free_unpacked(r, NULL);
}

static void test_a_node_that_does_not_report_is_unknown_to_the_client(void **state)
{
    (void)state;
    NodeStatus ns = NODE_STATUS__INIT;
    kvc_node k;
    ns.id = "old";
    ns.up = 1;
    ns.cold_dir = "/cold";
    kvc_node_decode(&k, &ns); /* cold_reported false: the node sent nothing */
    assert_string_equal(k.id, "old");
    assert_int_equal(k.up, 1);
    assert_int_equal(k.cold, KVC_COLD_UNKNOWN);

    ns.cold_dir = "";
    kvc_node_decode(&k, &ns);
    assert_int_equal(k.cold, KVC_COLD_NONE);

    ns.cold_dir = "/cold";
    ns.cold_reported = 1;
    ns.cold_error = "statvfs of /cold: Input/output error";
    ns.cold_write_failures_other = 4;
    kvc_node_decode(&k, &ns);
    assert_int_equal(k.cold, KVC_COLD_ERROR);
    assert_string_equal(k.cold_error, "statvfs of /cold: Input/output error");
    assert_int_equal(k.cold_fail_other, 4);

    ns.cold_error = "";
    ns.cold_total_bytes = 100;
    ns.cold_free_bytes = 4;
    ns.cold_used_bytes = 96;
    kvc_node_decode(&k, &ns);
    assert_int_equal(k.cold, KVC_COLD_KNOWN);
    assert_int_equal(k.cold_total, 100);
    assert_int_equal(k.cold_free, 4);
}

/* An answer from a master before node_status: no node, nothing made up. */
static void test_a_status_from_an_older_master_has_no_nodes(void **state)
{
    (void)state;
    StatusResponse old = STATUS_RESPONSE__INIT;
    old.role = "active";
    old.nodes = 2;
    size_t len = status_response__get_packed_size(&old);
    uint8_t *buf = malloc(len + 1);
    assert_non_null(buf);
    status_response__pack(&old, buf);
    StatusResponse *r = status_response__unpack(NULL, len, buf);
    free(buf);
    assert_non_null(r);
    assert_int_equal(r->n_node_status, 0);
    assert_int_equal(r->nodes, 2);
    status_response__free_unpacked(r, NULL);
}

/* A known report of total MiB with free MiB and failed no-space writes. */
static master_cold_usage report(uint64_t total_mib, uint64_t free_mib, uint64_t failed)
{
    master_cold_usage u;
    memset(&u, 0, sizeof(u));
    u.reported = 1;
    u.total_bytes = total_mib << 20;
    u.free_bytes = free_mib << 20;
    u.used_bytes = u.total_bytes - u.free_bytes;
    u.failures_no_space = failed;
    return u;
}

static void test_the_log_says_a_crossing_once(void **state)
{
    (void)state;
    master_cold_usage none, roomy = report(1000, 500, 0), full = report(1000, 40, 0),
                           full_failed = report(1000, 40, 3), bad = report(1000, 40, 3);
    char line[320] = "";
    memset(&none, 0, sizeof(none));
    snprintf(bad.error, sizeof(bad.error), "statvfs: Permission denied");
    /* a first report with room, and an unknown one: nothing */
    assert_int_equal(master_cold_usage_change(&none, &roomy, line, sizeof(line)), 0);
    assert_int_equal(master_cold_usage_change(&roomy, &none, line, sizeof(line)), 0);
    assert_int_equal(master_cold_usage_change(&roomy, &roomy, line, sizeof(line)), 0);
    /* the crossing, once; at 5.0 % free it is not nearly full yet */
    master_cold_usage edge = report(1000, 50, 0);
    assert_int_equal(master_cold_usage_change(&roomy, &edge, line, sizeof(line)), 0);
    assert_int_equal(master_cold_usage_change(&roomy, &full, line, sizeof(line)), 1);
    assert_string_equal(line, "cold tier nearly full: 40.0 MiB free of 1000.0 MiB (4.0%, below "
                              "5%)");
    assert_int_equal(master_cold_usage_change(&full, &full, line, sizeof(line)), 0);
    /* a first report of a full tier is said */
    assert_int_equal(master_cold_usage_change(&none, &full, line, sizeof(line)), 1);
    /* writes failing while full: said with their count, then not again */
    assert_int_equal(master_cold_usage_change(&full, &full_failed, line, sizeof(line)), 1);
    assert_string_equal(line, "cold tier nearly full: 40.0 MiB free of 1000.0 MiB (4.0%, below "
                              "5%); 3 cold writes failed for lack of space since the last report");
    assert_int_equal(master_cold_usage_change(&full_failed, &full_failed, line, sizeof(line)), 0);
    /* room again */
    master_cold_usage freed = report(1000, 600, 3);
    assert_int_equal(master_cold_usage_change(&full_failed, &freed, line, sizeof(line)), 1);
    assert_string_equal(line, "cold tier has room again: 600.0 MiB free of 1000.0 MiB");
    /* unreadable sizes: not a crossing either way */
    assert_int_equal(master_cold_usage_change(&full_failed, &bad, line, sizeof(line)), 0);
}

static void test_the_log_says_failed_writes_with_room(void **state)
{
    (void)state;
    master_cold_usage before = report(1000, 500, 2), after = report(1000, 500, 3);
    char line[320] = "";
    /* a quota, or a file bigger than what is free: one failure, one line */
    assert_int_equal(master_cold_usage_change(&before, &after, line, sizeof(line)), 1);
    assert_string_equal(line, "1 cold write failed for lack of space since the last report (the "
                              "file system's free bytes are not a quota's)");
    /* a node that restarted counts from 0: its count is all new */
    master_cold_usage restarted = report(1000, 500, 1);
    assert_int_equal(master_cold_usage_change(&after, &restarted, line, sizeof(line)), 1);
    assert_non_null(strstr(line, "1 cold write failed"));
    restarted.failures_no_space = 0;
    assert_int_equal(master_cold_usage_change(&after, &restarted, line, sizeof(line)), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_registration_without_the_report_is_unknown_not_zero),
        cmocka_unit_test(test_a_registration_with_the_report_is_known),
        cmocka_unit_test(test_a_node_that_does_not_report_is_unknown_to_the_client),
        cmocka_unit_test(test_a_status_from_an_older_master_has_no_nodes),
        cmocka_unit_test(test_the_log_says_a_crossing_once),
        cmocka_unit_test(test_the_log_says_failed_writes_with_room),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
