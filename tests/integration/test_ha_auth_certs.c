/* test_ha_auth_certs.c -- client certificates (auth.certificates) and TLS
 * across a failover of a real HA cluster (issue 19).
 *
 * Debian's etcd (one member, etcd_fixture), three store_master processes in
 * HA mode with the weight plugin, each with TLS on its TCP port
 * (tls.verify_clients, the test CA), the auth fixture's four tokens and the
 * four certificate mappings of af_cert_yaml; each advertises its TCP port,
 * so a standby sends TLS clients there. One store_node follows the list of
 * the three TCP ports with the ops-admin certificate and NO token (its
 * registration and polls are authorized by the certificate alone), and
 * serves its data port over TLS (--data-tls-cert). The PKI is made by the
 * openssl CLI in the test's directory.
 *
 * Every client below presents a certificate and no token, and is given the
 * list of the three TCP ports:
 * - libweightclient stores of a's writer (SAN URI), a's reader (CN) and b's
 *   writer publish and read through the leader: a's revision read back byte
 *   for byte by a's reader over the node's TLS data port with tickets, its
 *   remove refused FORBIDDEN (the revision unchanged), b's writer gets
 *   NOT_FOUND for a's revision (no lease, so no ticket for its objects)
 *   and sees nothing of a in its list;
 * - a standby reached directly with a certificate: the certificate's
 *   identity is answered (auth.HELLO is served by any master), a request
 *   the identity may make is answered SMP_ENOTLEADER and following it lands
 *   on the leader's TCP port, still as that identity; a request above the
 *   identity's role is FORBIDDEN there and the unmapped certificate EAUTH,
 *   without a redirect -- exactly what the same identity's token gets;
 * - weightctl --tls-cert/--tls-key lists a's revision.
 * Then the leader is SIGKILLed. The SAME store handles, without reopening,
 * go on with the new leader: a's reader reads the revision byte for byte,
 * a's writer publishes a second one (tenant a, READY), a's reader is still
 * refused remove, b's writer still gets NOT_FOUND; the node registers with
 * the new leader on its certificate; the standby checks and weightctl hold
 * against the new cluster. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "auth_fixture.h"
#include "etcd_fixture.h"
#include "ha_cluster_fixture.h"
#include "host_rpc.pb-c.h"
#include "weight_check.h"
#include "weight_model.h"

#define WAIT_MS 20000
#define N_TENSORS 2

typedef struct cluster {
    hc_cluster hc;
    char pki[256];          /* the certificates (the etcd fixture's directory) */
    char ca[300];
    char tcp[HC_MASTERS][64];
    char tcp_list[256];     /* every master's TCP port, comma-separated */
    weight_store *a_writer, *a_reader, *b_writer;
    wx_tensor t[N_TENSORS];
} cluster;

static void cert_paths(const cluster *c, const char *name, char *pem, char *key, size_t cap)
{
    snprintf(pem, cap, "%s/%s.pem", c->pki, name);
    snprintf(key, cap, "%s/%s.key", c->pki, name);
}

static int setup(void **state)
{
    cluster *c = calloc(1, sizeof(*c));
    if (c == NULL) return -1;
    *state = c;
    if (hc_init(&c->hc, "ha-certs", 1) < 0) {
        free(c);
        *state = NULL;
        return -1;
    }
    /* a 3 s lease: three ASan masters and TLS handshakes on a loaded machine
     * kept a 1 s lease from settling on one leader (the SIGKILL is noticed at
     * once either way: ha.fast_failover) */
    c->hc.lease_ttl_s = 3;
    snprintf(c->pki, sizeof(c->pki), "%s", c->hc.etcd.dir);
    snprintf(c->ca, sizeof(c->ca), "%s/ca.pem", c->pki);
    af_make_cert_pki(c->pki);
    size_t used = 0;
    for (int i = 0; i < HC_MASTERS; i++) {
        hx_master *m = &c->hc.m[i];
        int port = etcd_fixture_free_port();
        if (port <= 0) return -1;
        snprintf(c->tcp[i], sizeof(c->tcp[i]), "127.0.0.1:%d", port);
        snprintf(m->listen_tcp, sizeof(m->listen_tcp), "%s", c->tcp[i]);
        used += (size_t)snprintf(c->tcp_list + used, sizeof(c->tcp_list) - used, "%s%s",
                                 i ? "," : "", c->tcp[i]);
        /* the admin endpoint speaks HTTPS and verifies clients too */
        snprintf(m->admin_ca, sizeof(m->admin_ca), "%s", c->ca);
        cert_paths(c, "ops-admin", m->admin_cert, m->admin_key, sizeof(m->admin_cert));
    }
    wx_model_fill(c->t, N_TENSORS, 19);
    c->t[0].name = "layers.0.weight";
    c->t[0].shape[0] = 16;
    c->t[0].shape[1] = 64;
    c->t[1].name = "layers.1.weight";
    c->t[1].shape[0] = 32;
    c->t[1].shape[1] = 32;
    return 0;
}

static int teardown(void **state)
{
    cluster *c = *state;
    if (c == NULL) return 0;
    weight_store_close(c->a_writer);
    weight_store_close(c->a_reader);
    weight_store_close(c->b_writer);
    hc_cleanup(&c->hc);
    free(c);
    unsetenv("WEIGHT_TOKEN");
    unsetenv("WM_TLS_CA");
    unsetenv("WM_TLS_CERT");
    unsetenv("WM_TLS_KEY");
    return 0;
}

/* Master i: HA (advertising its TCP port), TLS verifying clients, the four
 * tokens and the four certificate mappings, both capability gates. */
static void write_config(cluster *c, int i)
{
    char certs[1024], auth[4096], extra[8192];
    af_cert_yaml(certs, sizeof(certs));
    af_auth_yaml(NULL, certs, auth, sizeof(auth));
    snprintf(extra, sizeof(extra),
             "tls:\n  cert: \"%s/server.pem\"\n  key: \"%s/server.key\"\n  ca: \"%s\"\n"
             "  verify_clients: true\n"
             "cluster:\n  weight_management_oplog_capability_confirmed: true\n"
             "  weight_lineage_oplog_capability_confirmed: true\n%s",
             c->pki, c->pki, c->ca, auth);
    assert_int_equal(hc_configure(&c->hc, i, extra), 0);
}

/* The node: the TCP list, the ops-admin certificate and no token, its data
 * port over TLS with the masters' certificate (it names 127.0.0.1). */
static void start_node(cluster *c)
{
    char pem[400], key[400], server_pem[400], server_key[400];
    hx_master view;
    assert_int_equal(hc_list_view(&c->hc, &view), 0);
    snprintf(view.socket, sizeof(view.socket), "%s", c->tcp_list);
    cert_paths(c, "ops-admin", pem, key, sizeof(pem));
    cert_paths(c, "server", server_pem, server_key, sizeof(server_pem));
    const char *extra[] = {"--data-tls-cert", server_pem, "--data-tls-key", server_key, NULL};
    setenv("WM_TLS_CA", c->ca, 1);
    setenv("WM_TLS_CERT", pem, 1);
    setenv("WM_TLS_KEY", key, 1);
    unsetenv("WEIGHT_TOKEN");
    assert_int_equal(hx_node_start_args(&view, &c->hc.node, "n1", 32u << 20, extra), 0);
    unsetenv("WM_TLS_CA");
    unsetenv("WM_TLS_CERT");
    unsetenv("WM_TLS_KEY");
    setenv("WEIGHT_TOKEN", af_token(AF_ADMIN), 1); /* the harness's status calls (Unix socket) */
}

/* A store on the TCP list as certificate name, no token. */
static weight_store *open_cert_store(cluster *c, const char *name)
{
    char pem[400], key[400], err[512];
    weight_store *s = NULL;
    cert_paths(c, name, pem, key, sizeof(pem));
    weight_tls_options o = {sizeof(o), c->ca, pem, key, NULL};
    int rc = weight_store_open_tls(c->tcp_list, "", "", &o, NULL, &s, err, sizeof(err));
    if (rc != 0) fail_msg("weight_store_open_tls as %s: %s", name, err);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_PAYLOAD_BYTES, 4096), 0);
    return s;
}

/* The leader (other than skip), once the node registered with it. */
static int wait_leader_and_node(cluster *c, int skip)
{
    int leader = hc_wait_leader(&c->hc, skip, WAIT_MS);
    if (leader < 0) fail_msg("no single leader within %d ms", WAIT_MS);
    if (hc_wait_node(&c->hc, leader, WAIT_MS) < 0)
        fail_msg("node not registered with master %d", leader);
    return leader;
}

/* The rules of tenant a's revision id, whichever master leads. */
static void check_stores(cluster *c, const weight_identity *id, uint64_t gen)
{
    weight_metadata md;
    weight_identity theirs = *id;
    int exists = 0;
    /* a's reader: reads byte for byte (no mapping with auth on: the node's
     * TLS data port with tickets), may not remove */
    assert_int_equal(wx_get_and_compare(c->a_reader, id, c->t, N_TENSORS), 0);
    assert_int_equal(weight_remove(c->a_reader, id, gen, NULL), WEIGHT_EFORBIDDEN);
    assert_true(hx_says(weight_store_last_error(c->a_reader), "tenant a has role reader"));
    CHECK(c->a_reader, weight_get_metadata(c->a_reader, id, &md, NULL));
    assert_string_equal(md.identity.tenant_id, "a");
    assert_int_equal(md.availability, WEIGHT_READY);
    assert_int_equal(md.metadata_generation, gen);
    /* b's writer: a's revision does not exist for it */
    snprintf(theirs.tenant_id, sizeof(theirs.tenant_id), "a");
    assert_int_equal(weight_get_metadata(c->b_writer, &theirs, &md, NULL), WEIGHT_ENOT_FOUND);
    exists = 1;
    assert_int_equal(weight_is_exist(c->b_writer, &theirs, &exists), 0); /* as absent */
    assert_false(exists);
    assert_int_equal(weight_remove(c->b_writer, &theirs, gen, NULL), WEIGHT_ENOT_FOUND);
    weight_mapped *v = NULL; /* no lease, so no ticket for a's objects */
    assert_int_equal(weight_get_mapped(c->b_writer, &theirs, &v), WEIGHT_ENOT_FOUND);
    assert_null(v);
    weight_metadata *list = NULL;
    size_t n = 9;
    char next[256];
    weight_list_query q = {NULL, NULL, 100, 1};
    CHECK(c->b_writer, weight_list(c->b_writer, &q, NULL, &list, &n, next, sizeof(next)));
    for (size_t i = 0; i < n; i++) assert_string_equal(list[i].identity.tenant_id, "b");
    weight_list_free(list);
}

/* A call of service/method with body on c (transport asserted): status,
 * the master's message into msg. */
static int raw_call(rpcc_conn *c, uint32_t service, uint32_t method, const uint8_t *body,
                    size_t len, char *msg, size_t cap)
{
    int status = 0;
    char *em = NULL;
    int rc = rpcc_call(c, service, method, body, len, &status, NULL, NULL, &em);
    if (rc < 0) fail_msg("transport %d: %s", rc, rpcc_last_error(c));
    snprintf(msg, cap, "%s", em != NULL ? em : "");
    free(em);
    return status;
}

/* A connection to endpoint as certificate name (NULL: client.pem, the
 * unmapped one) with token (NULL: none). */
static rpcc_conn *connect_as(cluster *c, const char *endpoint, const char *cert, const char *token)
{
    char pem[400], key[400], err[512];
    rpcc_conn *conn = NULL;
    cert_paths(c, cert != NULL ? cert : "client", pem, key, sizeof(pem));
    rpcc_options o = {.timeout_ms = 10000, .tls_ca = c->ca, .tls_cert = pem, .tls_key = key,
                      .token = token != NULL ? token : ""};
    if (rpcc_connect(endpoint, &o, &conn, err, sizeof(err)) < 0)
        fail_msg("connect %s: %s", endpoint, err);
    return conn;
}

/* What a standby does with a certificate's connection, next to the same
 * identity's token: the identity answered, a list answered NOT_LEADER and
 * followed to the leader's TCP port as the same identity; a remove above
 * the role FORBIDDEN and the unmapped certificate EAUTH, both unmoved. */
static void check_standby(cluster *c, int standby, int leader)
{
    char msg[512];
    Wmrpc__ListRequest lq = WMRPC__LIST_REQUEST__INIT;
    uint8_t lbody[64];
    size_t llen = wmrpc__list_request__pack(&lq, lbody);
    Wmrpc__WeightIdentity wid;
    Wmrpc__IdentityRequest iq = WMRPC__IDENTITY_REQUEST__INIT;
    uint8_t ibody[512];
    wr_set_identity(&wid, "", "ns", "model", 1);
    iq.identity = &wid;
    size_t ilen = wmrpc__identity_request__pack(&iq, ibody);

    for (int by_token = 0; by_token < 2; by_token++) {
        /* a's reader: by its certificate, or by its token on the unmapped
         * certificate (the TLS port verifies clients: some certificate) */
        rpcc_conn *r = by_token ? connect_as(c, c->tcp[standby], NULL, af_token(AF_A_READER))
                                : connect_as(c, c->tcp[standby], "a-reader", NULL);
        assert_string_equal(rpcc_auth_tenant(r), "a");
        assert_string_equal(rpcc_auth_role(r), "reader");
        assert_string_equal(rpcc_endpoint(r), c->tcp[standby]);
        /* above its role: refused by the standby itself, no redirect */
        assert_int_equal(raw_call(r, WR_SVC, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, ibody,
                                  ilen, msg, sizeof(msg)),
                         SMP_EFORBIDDEN);
        assert_true(hx_says(msg, "needs role writer; tenant a has role reader"));
        assert_int_equal(rpcc_moves(r), 0);
        /* NOT_LEADER as it is (a request in flight), then followed */
        uint64_t id = 0;
        int status = 0;
        assert_int_equal(rpcc_send(r, WR_SVC, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, lbody, llen,
                                   &id),
                         0);
        assert_int_equal(rpcc_recv(r, id, NULL, &status, NULL, NULL, NULL), 0);
        assert_int_equal(status, SMP_ENOTLEADER);
        assert_int_equal(rpcc_reconnect(r), 0);
        assert_string_equal(rpcc_endpoint(r), c->tcp[leader]);
        assert_string_equal(rpcc_auth_tenant(r), "a");
        assert_string_equal(rpcc_auth_role(r), "reader");
        assert_int_equal(raw_call(r, WR_SVC, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, lbody, llen,
                                  msg, sizeof(msg)),
                         0);
        rpcc_close(r);
    }
    /* the unmapped certificate without a token: refused, not redirected */
    rpcc_conn *u = connect_as(c, c->tcp[standby], NULL, NULL);
    assert_string_equal(rpcc_auth_tenant(u), "");
    assert_int_equal(raw_call(u, WR_SVC, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, lbody, llen, msg,
                              sizeof(msg)),
                     SMP_EAUTH);
    assert_true(hx_says(msg, "(subject CN=client) matches no auth.certificates entry"));
    assert_int_equal(rpcc_moves(u), 0);
    rpcc_close(u);
}

/* weightctl on the TCP list with a's reader's certificate and no token:
 * lists every name of want (NULL-terminated). */
static void check_weightctl(cluster *c, const char *const *want)
{
    char cmd[4096], out[400], pem[400], key[400];
    cert_paths(c, "a-reader", pem, key, sizeof(pem));
    snprintf(out, sizeof(out), "%s/weightctl.out", c->pki);
    snprintf(cmd, sizeof(cmd),
             "env -u WEIGHT_TOKEN -u WM_TLS_CA -u WM_TLS_CERT -u WM_TLS_KEY '%s/bin/weightctl' "
             "--master %s --tls-ca '%s' --tls-cert '%s' --tls-key '%s' ls > '%s' 2>&1",
             BUILD_DIR, c->tcp_list, c->ca, pem, key, out);
    int rc = system(cmd);
    if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
        hc_print_tail(out);
        fail_msg("weightctl ls with a client certificate failed");
    }
    for (size_t i = 0; want[i] != NULL; i++)
        if (!hx_file_contains(out, want[i])) {
            hc_print_tail(out);
            fail_msg("weightctl ls does not list %s", want[i]);
        }
}

static void test_ha_certificates_hold_after_failover(void **state)
{
    cluster *c = *state;
    weight_identity id, second;
    weight_metadata md;
    setenv("WEIGHT_TOKEN", af_token(AF_ADMIN), 1); /* the harness's checks (Unix socket) */
    for (int i = 0; i < HC_MASTERS; i++) {
        write_config(c, i);
        if (hx_start(&c->hc.m[i], WAIT_MS) < 0) fail_msg("master %d did not start", i);
        assert_true(hx_log_contains(&c->hc.m[i], "auth: on, 4 tokens, 4 certificate mappings"));
    }
    assert_true(hc_wait_leader(&c->hc, -1, WAIT_MS) >= 0);
    start_node(c);
    int leader = wait_leader_and_node(c, -1);
    assert_true(hx_file_contains(c->hc.node.log, " (TLS), master "));

    c->a_writer = open_cert_store(c, "a-writer");
    c->a_reader = open_cert_store(c, "a-reader");
    c->b_writer = open_cert_store(c, "b-writer");
    assert_int_equal(weight_identity_set(&id, "", "ns", "model", "main", 1), 0);
    wx_put_model(c->a_writer, &id, c->t, N_TENSORS);
    wx_put_model(c->b_writer, &id, c->t, N_TENSORS); /* b's own ns/model, tenant b */
    CHECK(c->a_writer, weight_get_metadata(c->a_writer, &id, &md, NULL));
    assert_string_equal(md.identity.tenant_id, "a");
    uint64_t gen = md.metadata_generation;
    check_stores(c, &id, gen);
    check_standby(c, (leader + 1) % HC_MASTERS, leader);
    const char *before[] = {"ns/model/main", NULL};
    check_weightctl(c, before);

    /* the leader dies; the same handles go on with the next one */
    pid_t old = c->hc.m[leader].pid;
    hx_kill(&c->hc.m[leader]);
    int next = wait_leader_and_node(c, leader);
    assert_int_not_equal(next, leader);
    assert_true(c->hc.m[next].pid != old);
    check_stores(c, &id, gen);
    assert_int_equal(weight_identity_set(&second, "", "ns", "after", "main", 1), 0);
    wx_put_model(c->a_writer, &second, c->t, N_TENSORS);
    CHECK(c->a_reader, weight_get_metadata(c->a_reader, &second, &md, NULL));
    assert_string_equal(md.identity.tenant_id, "a");
    assert_int_equal(md.availability, WEIGHT_READY);
    int standby = -1;
    for (int i = 0; i < HC_MASTERS; i++)
        if (i != leader && i != next) standby = i;
    check_standby(c, standby, next);
    const char *after[] = {"ns/model/main", "ns/after/main", NULL};
    check_weightctl(c, after);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ha_certificates_hold_after_failover, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
