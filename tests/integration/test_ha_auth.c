/* test_ha_auth.c -- authentication and tenant isolation across a failover
 * of a real HA cluster (issue 19).
 *
 * Debian's etcd (one member, etcd_fixture), three store_master processes in
 * HA mode with the weight plugin and the same auth: block (auth_fixture.c's
 * four tokens, and auth.limits holding tenant a to one live revision), and
 * one store_node that registers with the admin token. Tenants a and b each
 * publish a revision through the leader; then the same rules are checked on
 * the leader and, after the leader is killed with SIGKILL, on the NEW leader
 * (another process, which learned the revisions from the OpLog): a reader
 * reads its tenant's revision but may neither put nor remove
 * (SMP_EFORBIDDEN); a writer of a finds b's revision NOT_FOUND and lists
 * nothing of b; a's second put is refused by its revision limit
 * (SMP_ENOSPC); a connection without a token is refused (SMP_EAUTH); and
 * b's revision is READY at the metadata generation it was published with.
 * The clients are given the list of all three masters and follow
 * SMP_ENOTLEADER to the leader. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "auth_fixture.h"
#include "ha_cluster_fixture.h"

#define WAIT_MS 20000

typedef struct cluster {
    hc_cluster hc;
    wr_fixture f; /* f.m: a view of master 0 whose socket lists all three */
} cluster;

static int setup(void **state)
{
    cluster *c = calloc(1, sizeof(*c));
    if (c == NULL) return -1;
    *state = c;
    if (hc_init(&c->hc, "ha-auth", 1) < 0) {
        free(c);
        *state = NULL;
        return -1;
    }
    return hc_list_view(&c->hc, &c->f.m);
}

static int teardown(void **state)
{
    cluster *c = *state;
    if (c == NULL) return 0;
    wr_disconnect(&c->f);
    hc_cleanup(&c->hc);
    free(c);
    unsetenv("WEIGHT_TOKEN");
    return 0;
}

/* Master i: HA, the weight plugin (added by the harness) with its gates
 * confirmed, and auth on with the fixture's tokens and a's revision limit. */
static int write_config(cluster *c, int i)
{
    char auth[4096], extra[6144];
    af_auth_yaml(NULL, "  limits:\n    tenants:\n      a: {max_revisions: 1}\n", auth, sizeof(auth));
    snprintf(extra, sizeof(extra),
             "cluster:\n  weight_management_oplog_capability_confirmed: true\n"
             "  weight_lineage_oplog_capability_confirmed: true\n%s",
             auth);
    return hc_configure(&c->hc, i, extra);
}

/* The leader (other than skip), once the node registered with it (asked as
 * the admin: af_as changes WEIGHT_TOKEN, which every client presents). */
static int wait_leader_and_node(cluster *c, int skip)
{
    setenv("WEIGHT_TOKEN", af_token(AF_ADMIN), 1);
    int leader = hc_wait_leader(&c->hc, skip, WAIT_MS);
    if (leader < 0) fail_msg("no single leader within %d ms", WAIT_MS);
    if (hc_wait_node(&c->hc, leader, WAIT_MS) < 0) fail_msg("node not registered with master %d", leader);
    return leader;
}

/* The rules, as whichever master leads now enforces them. */
static void check_rules(cluster *c, uint64_t gen_a, uint64_t gen_b)
{
    wr_fixture *f = &c->f;
    Wmrpc__WeightIdentity own, theirs, more;
    wr_set_identity(&own, "", "ns", "model", 1);
    wr_set_identity(&theirs, "b", "ns", "model", 1);
    wr_set_identity(&more, "", "ns", "second", 1);

    /* a reader of a: reads its revision, may not put or remove */
    af_as(f, AF_A_READER);
    Wmrpc__MetadataResponse *md = wr_get_md(f, &own);
    assert_int_equal(md->metadata->availability, WR_AV_READY);
    assert_int_equal(md->metadata->metadata_generation, gen_a);
    wmrpc__metadata_response__free_unpacked(md, NULL);
    assert_int_equal(wr_begin(f, &more, WR_RS_HOT, 0.5, WR_MODE_MANUAL, NULL), SMP_EFORBIDDEN);
    assert_true(hx_says(f->last_error, "needs role writer; tenant a has role reader"));
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &own, gen_a, NULL),
                     SMP_EFORBIDDEN);

    /* a writer of a: b's revision does not exist for it; its own limit holds */
    af_as(f, AF_A_WRITER);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, &theirs, 0, NULL),
                     WR_E_NOT_FOUND);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &theirs, gen_b, NULL),
                     WR_E_NOT_FOUND);
    Wmrpc__ListRequest q = WMRPC__LIST_REQUEST__INIT;
    Wmrpc__ListResponse *lr = NULL;
    q.tenant = (char *)"b";
    assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &q.base,
                             &wmrpc__list_response__descriptor, (ProtobufCMessage **)&lr),
                     0);
    assert_int_equal(lr->n_revisions, 0);
    wmrpc__list_response__free_unpacked(lr, NULL);
    assert_int_equal(wr_begin(f, &more, WR_RS_HOT, 0.5, WR_MODE_MANUAL, NULL), SMP_ENOSPC);
    assert_true(hx_says(f->last_error, "revision limit: tenant a holds 1 live revisions"));

    /* no token: refused */
    af_as(f, AF_NONE);
    q.tenant = NULL;
    assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &q.base,
                             &wmrpc__list_response__descriptor, (ProtobufCMessage **)&lr),
                     SMP_EAUTH);

    /* b finds its revision as it left it, and a's is not there for b */
    af_as(f, AF_B_WRITER);
    wr_set_identity(&own, "", "ns", "model", 1);
    md = wr_get_md(f, &own);
    assert_int_equal(md->metadata->availability, WR_AV_READY);
    assert_int_equal(md->metadata->metadata_generation, gen_b);
    wmrpc__metadata_response__free_unpacked(md, NULL);
    wr_set_identity(&theirs, "a", "ns", "model", 1);
    assert_int_equal(wr_ident_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, &theirs, 0, NULL),
                     WR_E_NOT_FOUND);
}

static void test_ha_auth_rules_hold_after_failover(void **state)
{
    cluster *c = *state;
    setenv("WEIGHT_TOKEN", af_token(AF_ADMIN), 1); /* the harness's checks and the node */
    for (int i = 0; i < HC_MASTERS; i++) {
        assert_int_equal(write_config(c, i), 0);
        if (hx_start(&c->hc.m[i], WAIT_MS) < 0) fail_msg("master %d did not start", i);
        assert_true(hx_log_contains(&c->hc.m[i], "auth: on, 4 tokens"));
    }
    int leader = hc_wait_leader(&c->hc, -1, WAIT_MS);
    assert_true(leader >= 0);
    assert_int_equal(hc_node_start(&c->hc, "n1", 32u << 20), 0);
    leader = wait_leader_and_node(c, -1);

    af_as(&c->f, AF_A_WRITER);
    uint64_t gen_a = af_publish(&c->f, "model");
    af_as(&c->f, AF_B_WRITER);
    uint64_t gen_b = af_publish(&c->f, "model");
    check_rules(c, gen_a, gen_b);

    /* the leader dies; another master takes over with the same rules */
    wr_disconnect(&c->f);
    pid_t old = c->hc.m[leader].pid;
    hx_kill(&c->hc.m[leader]);
    int next = wait_leader_and_node(c, leader);
    assert_int_not_equal(next, leader);
    assert_true(c->hc.m[next].pid != old);
    check_rules(c, gen_a, gen_b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ha_auth_rules_hold_after_failover, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
