/* test_auth_certs.c -- client certificates mapped to tenants and roles
 * (auth.certificates) on a real master's TLS control port, with no token
 * (issue 19).
 *
 * The test makes its PKI with the openssl CLI (hx_make_certs, then one leaf
 * per identity signed by the test CA): a reader of tenant a matched by its
 * CN, a writer of tenant a matched by a SAN URI (a SPIFFE ID) under an
 * unrelated CN, a writer of tenant b and an admin matched by CN, the
 * fixture's unmapped "client" certificate, and a certificate carrying the
 * reader's CN but signed by another CA. The master also has the auth
 * fixture's four tokens.
 *
 * - the a-writer certificate publishes; the a-reader certificate reads it
 *   (metadata, exists, payload bytes) and is refused a remove and a plain
 *   put (FORBIDDEN, naming its role), with the revision unchanged;
 * - the b-writer certificate does not see tenant a's revision (NOT_FOUND,
 *   an empty list) and publishes its own;
 * - the admin certificate runs an admin RPC (auth.RULES) a reader may not;
 * - the unmapped certificate is served nothing (EAUTH naming its subject
 *   and that it matches no entry) until a token authenticates it;
 * - on a certificate-authenticated connection HELLO with no token or the
 *   same identity's token answers that identity; another identity's token
 *   is refused and the connection loses its identity;
 * - the other CA's certificate is refused in the handshake, nothing served;
 * - weightctl with --tls-cert/--tls-key and no token lists and reads;
 * - the refusals are counted in /metrics without naming tenants;
 * - the admin endpoint on a non-loopback address serves the admin
 *   certificate without a token, refuses a reader's (403) and asks the
 *   unmapped one for a token (401);
 * - bad auth.certificates configs are refused by --check and at start,
 *   naming the key. */
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
#include "host_rpc.pb-c.h"

typedef struct fx {
    wr_fixture w;
    char tcp[64];
    char ca[300];
    char yaml[8192]; /* the config's extra YAML */
} fx;

static int sh(const char *cmd)
{
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    af_start_certs(&f->w, "auth_certs", f->tcp, sizeof(f->tcp), f->yaml, sizeof(f->yaml));
    snprintf(f->ca, sizeof(f->ca), "%s/ca.pem", f->w.m.dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    unsetenv("WM_TLS_CA");
    unsetenv("WM_TLS_CERT");
    unsetenv("WM_TLS_KEY");
    unsetenv("WEIGHT_TOKEN");
    wr_disconnect(&f->w);
    hx_cleanup(&f->w.m);
    free(f);
    return 0;
}

/* A bare TLS connection with certificate name and no token. */
static rpcc_conn *raw_cert(fx *f, const char *name)
{
    char err[512];
    rpcc_conn *c = NULL;
    rpcc_options o = {.timeout_ms = 10000, .token = ""};
    af_use_cert(&f->w, name);
    if (rpcc_connect(f->tcp, &o, &c, err, sizeof(err)) < 0) fail_msg("connect: %s", err);
    return c;
}

/* auth.RULES on c: the status, and the envelope's message into msg. */
static int rules(rpcc_conn *c, char *msg, size_t cap)
{
    int status = 0;
    uint8_t *body = NULL;
    size_t len = 0;
    char *em = NULL;
    assert_int_equal(rpcc_call(c, HOST_SERVICE__HOST_SERVICE_AUTH, AUTH_METHOD__AUTH_RULES, NULL, 0,
                               &status, &body, &len, &em),
                     0);
    snprintf(msg, cap, "%s", em != NULL ? em : "");
    free(body);
    free(em);
    return status;
}

/* auth.HELLO with token on c: the status; the identity it answers (on
 * success) into tenant / role. */
static int hello(rpcc_conn *c, const char *token, char *tenant, char *role, size_t cap)
{
    AuthHelloRequest req = AUTH_HELLO_REQUEST__INIT;
    uint8_t buf[256], *body = NULL;
    size_t blen = 0;
    int status = 0;
    req.token.data = (uint8_t *)token;
    req.token.len = strlen(token);
    size_t len = auth_hello_request__pack(&req, buf);
    assert_int_equal(rpcc_call(c, HOST_SERVICE__HOST_SERVICE_AUTH, AUTH_METHOD__AUTH_HELLO, buf, len,
                               &status, &body, &blen, NULL),
                     0);
    tenant[0] = role[0] = '\0';
    if (status == 0) {
        AuthHelloResponse *r = auth_hello_response__unpack(NULL, blen, body);
        assert_non_null(r);
        snprintf(tenant, cap, "%s", r->tenant);
        snprintf(role, cap, "%s", r->role);
        auth_hello_response__free_unpacked(r, NULL);
    }
    free(body);
    return status;
}

/* The a-writer certificate (its SAN URI) publishes; the a-reader
 * certificate (its CN) reads and is refused a remove and a plain put. */
static void test_auth_cert_reader_reads_and_is_refused_writes(void **state)
{
    fx *f = *state;
    Wmrpc__WeightIdentity id;
    Wmrpc__MetadataResponse *md = NULL;
    kvc_object obj;
    af_as_cert(&f->w, f->tcp, "a-writer");
    uint64_t gen = af_publish(&f->w, "model");
    af_as_cert(&f->w, f->tcp, "a-reader");
    wr_set_identity(&id, "", "ns", "model", 1);
    assert_int_equal(wr_ident_call(&f->w, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, &id, 0, &md), 0);
    assert_string_equal(md->metadata->identity->tenant, "a");
    assert_int_equal(md->metadata->metadata_generation, gen);
    wmrpc__metadata_response__free_unpacked(md, NULL);
    assert_int_equal(wr_ident_call(&f->w, WMRPC__WEIGHT_METHOD__WEIGHT_IS_EXIST, &id, 0, NULL), 0);
    /* a reader may not remove, nor put a plain object */
    assert_int_equal(wr_ident_call(&f->w, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &id, gen, NULL),
                     SMP_EFORBIDDEN);
    assert_true(hx_says(f->w.last_error, "needs role writer; tenant a has role reader"));
    assert_int_equal(kvc_put_bytes(f->w.kv, "a/notes.txt", "x", 1, SMP_DATA_KV, "", 0, NULL),
                     SMP_EFORBIDDEN);
    assert_int_equal(kvc_get(f->w.kv, "a/notes.txt", &obj), SMP_ENOTFOUND);
    /* nothing changed */
    md = wr_get_md(&f->w, &id);
    assert_int_equal(md->metadata->metadata_generation, gen);
    wmrpc__metadata_response__free_unpacked(md, NULL);
    assert_true(hx_metric(&f->w.m, "store_rpc_auth_certificates_total{result=\"mapped\"}") >= 3);
}

/* The b-writer certificate does not see tenant a's revision. */
static void test_auth_cert_tenant_b_cannot_see_a(void **state)
{
    fx *f = *state;
    Wmrpc__WeightIdentity theirs, mine;
    af_as_cert(&f->w, f->tcp, "a-writer");
    uint64_t gen = af_publish(&f->w, "model");
    af_as_cert(&f->w, f->tcp, "b-writer");
    wr_set_identity(&theirs, "a", "ns", "model", 1);
    assert_int_equal(wr_ident_call(&f->w, WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA, &theirs, 0, NULL),
                     WR_E_NOT_FOUND);
    assert_true(hx_says(f->w.last_error, "no revision"));
    assert_int_equal(wr_ident_call(&f->w, WMRPC__WEIGHT_METHOD__WEIGHT_REMOVE, &theirs, gen, NULL),
                     WR_E_NOT_FOUND);
    Wmrpc__ListRequest q = WMRPC__LIST_REQUEST__INIT;
    Wmrpc__ListResponse *lr = NULL;
    q.tenant = "a";
    assert_int_equal(wr_call(&f->w, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &q.base,
                             &wmrpc__list_response__descriptor, (ProtobufCMessage **)&lr),
                     0);
    assert_int_equal(lr->n_revisions, 0);
    wmrpc__list_response__free_unpacked(lr, NULL);
    /* its own revision lands in tenant b */
    af_publish(&f->w, "own");
    wr_set_identity(&mine, "", "ns", "own", 1);
    Wmrpc__MetadataResponse *md = wr_get_md(&f->w, &mine);
    assert_string_equal(md->metadata->identity->tenant, "b");
    wmrpc__metadata_response__free_unpacked(md, NULL);
    /* tenant a's revision is untouched */
    af_as_cert(&f->w, f->tcp, "a-reader");
    wr_set_identity(&theirs, "", "ns", "model", 1);
    md = wr_get_md(&f->w, &theirs);
    assert_int_equal(md->metadata->metadata_generation, gen);
    wmrpc__metadata_response__free_unpacked(md, NULL);
}

/* The admin certificate runs an admin RPC; a reader's is refused it. */
static void test_auth_cert_admin_runs_admin_rpcs(void **state)
{
    fx *f = *state;
    char msg[512];
    rpcc_conn *c = raw_cert(f, "ops-admin");
    assert_int_equal(rules(c, msg, sizeof(msg)), 0);
    rpcc_close(c);
    c = raw_cert(f, "a-reader");
    assert_int_equal(rules(c, msg, sizeof(msg)), SMP_EFORBIDDEN);
    assert_true(hx_says(msg, "auth.RULES needs role admin; tenant a has role reader"));
    rpcc_close(c);
}

/* An unmapped certificate is served nothing until a token authenticates
 * its connection; HELLO on a certificate's connection. */
static void test_auth_cert_unmapped_and_hello(void **state)
{
    fx *f = *state;
    char msg[512], tenant[160], role[32];
    rpcc_conn *c = raw_cert(f, "client");
    assert_int_equal(rules(c, msg, sizeof(msg)), SMP_EAUTH);
    assert_true(hx_says(msg, "its client certificate (subject CN=client) matches no "
                             "auth.certificates entry; present a token first"));
    assert_int_equal(hello(c, af_token(AF_ADMIN), tenant, role, sizeof(tenant)), 0);
    assert_string_equal(tenant, "ops");
    assert_int_equal(rules(c, msg, sizeof(msg)), 0);
    rpcc_close(c);
    assert_true(hx_metric(&f->w.m, "store_rpc_auth_certificates_total{result=\"unmapped\"}") >= 1);

    /* on a certificate's connection: no token, or the same identity's,
     * answers it; another identity's token ends it */
    c = raw_cert(f, "a-reader");
    assert_int_equal(hello(c, "", tenant, role, sizeof(tenant)), 0);
    assert_string_equal(tenant, "a");
    assert_string_equal(role, "reader");
    assert_int_equal(hello(c, af_token(AF_A_READER), tenant, role, sizeof(tenant)), 0);
    assert_string_equal(role, "reader");
    assert_int_equal(hello(c, af_token(AF_B_WRITER), tenant, role, sizeof(tenant)), SMP_EAUTH);
    assert_int_equal(rules(c, msg, sizeof(msg)), SMP_EAUTH);
    assert_true(hx_says(msg, "client certificate proves tenant a, role reader, and the token "
                             "presented does not"));
    assert_null(strstr(msg, "tenant b")); /* what the token proves is not said */
    rpcc_close(c);
    assert_true(hx_metric(&f->w.m, "store_rpc_auth_hellos_total{result=\"contradicts_certificate\"}")
                >= 1);
}

/* A certificate of another CA, with a mapped CN, is refused in the
 * handshake; the master serves on. */
static void test_auth_cert_other_ca_refused_at_handshake(void **state)
{
    fx *f = *state;
    char err[512], msg[512];
    rpcc_conn *c = NULL;
    rpcc_options o = {.timeout_ms = 10000, .token = ""};
    af_use_cert(&f->w, "rogue");
    int rc = rpcc_connect(f->tcp, &o, &c, err, sizeof(err));
    if (rc == 0) { /* TLS 1.3: the alert may come with the first read */
        int status = 0;
        rc = rpcc_call(c, HOST_SERVICE__HOST_SERVICE_AUTH, AUTH_METHOD__AUTH_RULES, NULL, 0, &status,
                       NULL, NULL, NULL);
        snprintf(err, sizeof(err), "%s", rpcc_last_error(c));
        rpcc_close(c);
    }
    assert_true(rc < 0);
    assert_true(hx_says(err, "unknown ca"));
    assert_true(hx_log_contains(&f->w.m, "TLS handshake refused"));
    assert_true(hx_alive(&f->w.m));
    c = raw_cert(f, "ops-admin");
    assert_int_equal(rules(c, msg, sizeof(msg)), 0);
    rpcc_close(c);
}

/* weightctl with a certificate and no token: ls and info of tenant a's
 * revision; the reader's certificate cannot rm it. */
static void test_auth_cert_weightctl_without_token(void **state)
{
    fx *f = *state;
    char cmd[4096];
    const char *d = f->w.m.dir;
    af_as_cert(&f->w, f->tcp, "a-writer");
    af_publish(&f->w, "model");
    wr_disconnect(&f->w);
    unsetenv("WM_TLS_CA");
    unsetenv("WM_TLS_CERT");
    unsetenv("WM_TLS_KEY");
    snprintf(cmd, sizeof(cmd),
             "env -u WEIGHT_TOKEN '%s/bin/weightctl' --master %s --tls-ca '%s' "
             "--tls-cert '%s/a-reader.pem' --tls-key '%s/a-reader.key' ls > '%s/ls.out' 2>&1 && "
             "grep -q model '%s/ls.out' && "
             "! env -u WEIGHT_TOKEN '%s/bin/weightctl' --master %s --tls-ca '%s' "
             "--tls-cert '%s/a-reader.pem' --tls-key '%s/a-reader.key' rm ns/model/main@1 "
             "> '%s/rm.out' 2>&1 && grep -q 'needs role writer' '%s/rm.out'",
             BUILD_DIR, f->tcp, f->ca, d, d, d, d, BUILD_DIR, f->tcp, f->ca, d, d, d, d);
    if (sh(cmd) != 0) {
        char show[1024];
        snprintf(show, sizeof(show), "cat '%s/ls.out' '%s/rm.out' 1>&2", d, d);
        (void)sh(show);
        fail_msg("weightctl with a client certificate");
    }
}

/* The admin endpoint on a non-loopback address (a token asked): the admin
 * certificate is served /metrics without a token, a reader's certificate
 * gets 403 naming its role, and the unmapped certificate is asked for a
 * token (401). */
static void test_auth_cert_admin_endpoint(void **state)
{
    fx *f = *state;
    hx_master *m = &f->w.m;
    char *body = NULL;
    int port = etcd_fixture_free_port();
    assert_true(port > 0);
    assert_int_equal(hx_stop(m), 0);
    snprintf(m->listen_admin, sizeof(m->listen_admin), "0.0.0.0:%d", port);
    assert_int_equal(hx_reconfigure(m, f->yaml), 0);
    setenv("WEIGHT_TOKEN", af_token(AF_ADMIN), 1);
    assert_int_equal(hx_start(m, 15000), 0);
    unsetenv("WEIGHT_TOKEN");
    assert_true(hx_log_contains(m, "or an admin client certificate of auth.certificates"));
    assert_int_equal(hx_http_get(m, "/metrics", &body), 200); /* ops-admin */
    assert_non_null(strstr(body, "store_rpc_auth_certificates_total"));
    free(body);
    snprintf(m->admin_cert, sizeof(m->admin_cert), "%s/a-reader.pem", m->dir);
    snprintf(m->admin_key, sizeof(m->admin_key), "%s/a-reader.key", m->dir);
    assert_int_equal(hx_http_get(m, "/metrics", &body), 403);
    assert_true(hx_says(body, "the client certificate of tenant a has role reader; /metrics needs "
                              "role admin"));
    free(body);
    snprintf(m->admin_cert, sizeof(m->admin_cert), "%s/client.pem", m->dir);
    snprintf(m->admin_key, sizeof(m->admin_key), "%s/client.key", m->dir);
    assert_int_equal(hx_http_get(m, "/metrics", &body), 401);
    assert_true(hx_says(body, "needs an admin token"));
    free(body);
    assert_int_equal(hx_http_get(m, "/health", &body), 200);
    free(body);
}

/* Each bad auth.certificates config is refused by store_master --check
 * and at start, with its sentence naming the key. */
static void test_auth_cert_bad_configs_refused_by_check(void **state)
{
    (void)state;
    static const struct {
        const char *tls, *auth, *want;
    } cases[] = {
        {"  verify_clients: false\n", "  certificates:\n    - {cn: x, tenant: a, role: reader}\n",
         "auth.certificates: needs tls.verify_clients: true (with tls.cert, tls.key and tls.ca)"},
        {"  verify_clients: true\n",
         "  certificates:\n    - {cn: x, tenant: a, role: reader}\n    - {cn: x, tenant: b, "
         "role: admin}\n",
         "auth.certificates[1].cn: duplicate: auth.certificates[0] has the same cn"},
        {"  verify_clients: true\n",
         "  certificates:\n    - {cn: x, san_uri: \"spiffe://t/x\", tenant: a, role: reader}\n",
         "give cn or san_uri, not both"},
        {"  verify_clients: true\n",
         "  certificates:\n    - {subject: \"CN=x\", tenant: a, role: reader}\n",
         "auth.certificates[0].subject: unknown key (expected cn or san_uri, tenant, role)"},
        {"  verify_clients: true\n", "  certificates:\n    - {san_uri: x, tenant: a, role: reader}\n",
         "auth.certificates[0].san_uri: \"x\" is not a URI"},
    };
    hx_master m;
    memset(&m, 0, sizeof(m));
    assert_int_equal(hx_init(&m, "auth_certs_check", NULL), 0);
    assert_int_equal(hx_make_certs(m.dir), 0);
    snprintf(m.listen_tcp, sizeof(m.listen_tcp), "127.0.0.1:0");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char yaml[2048], cmd[2048];
        snprintf(yaml, sizeof(yaml),
                 "tls:\n  cert: \"%s/server.pem\"\n  key: \"%s/server.key\"\n  ca: \"%s/ca.pem\"\n"
                 "%sauth:\n  enabled: true\n  node_token_file: \"%s/node.token\"\n%s",
                 m.dir, m.dir, m.dir, cases[i].tls, m.dir, cases[i].auth);
        assert_int_equal(hx_reconfigure(&m, yaml), 0);
        snprintf(cmd, sizeof(cmd), "'%s/bin/store_master' --config '%s' --check > '%s/check.out' 2>&1",
                 BUILD_DIR, m.config, m.dir);
        assert_true(sh(cmd) != 0);
        snprintf(cmd, sizeof(cmd), "%s/check.out", m.dir);
        assert_true(hx_file_contains(cmd, cases[i].want));
        assert_true(hx_run_to_exit(&m, 15000) > 0);
        assert_true(hx_log_contains(&m, cases[i].want));
    }
    hx_cleanup(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_auth_cert_reader_reads_and_is_refused_writes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_auth_cert_tenant_b_cannot_see_a, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_cert_admin_runs_admin_rpcs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_cert_unmapped_and_hello, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_cert_other_ca_refused_at_handshake, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_auth_cert_weightctl_without_token, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_cert_admin_endpoint, setup, teardown),
        cmocka_unit_test(test_auth_cert_bad_configs_refused_by_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
