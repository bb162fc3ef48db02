/* auth_fixture.c -- a store_master with authentication on (auth_fixture.h). */
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

static const char *const tokens[] = {
    "", "tok-admin-3f9c", "tok-a-writer-81d2", "tok-a-reader-5e07", "tok-b-writer-c4aa",
    "tok-nobody-0000",
};

const char *af_token(af_who who)
{
    return tokens[who];
}

static void hex_of(const char *token, char out[65])
{
    unsigned char d[32];
    hx_sha256(token, strlen(token), d);
    for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

void af_start(wr_fixture *f, const char *name)
{
    af_start_with(f, name, NULL);
}

void af_auth_yaml(const char *node_token_file, const char *auth_extra, char *out, size_t cap)
{
    char h[4][65], ntf[480] = "";
    for (int i = 0; i < 4; i++) hex_of(af_token((af_who)(i + 1)), h[i]);
    if (node_token_file != NULL) snprintf(ntf, sizeof(ntf), "  node_token_file: \"%s\"\n", node_token_file);
    int n = snprintf(out, cap,
                     "auth:\n"
                     "  enabled: true\n"
                     "%s"
                     "  tokens:\n"
                     "    - {sha256: %s, tenant: ops, role: admin}\n"
                     "    - {sha256: %s, tenant: a, role: writer}\n"
                     "    - {sha256: %s, tenant: a, role: reader}\n"
                     "    - {sha256: %s, tenant: b, role: writer}\n"
                     "%s",
                     ntf, h[0], h[1], h[2], h[3], auth_extra != NULL ? auth_extra : "");
    assert_true(n > 0 && (size_t)n < cap);
}

void af_start_with(wr_fixture *f, const char *name, const char *auth_extra)
{
    char yaml[4096], path[400];
    FILE *tf;
    assert_int_equal(hx_init(&f->m, name, NULL), 0);
    snprintf(path, sizeof(path), "%s/node.token", f->m.dir);
    assert_non_null(tf = fopen(path, "w"));
    fprintf(tf, "%s\n", af_token(AF_ADMIN));
    assert_int_equal(fclose(tf), 0);
    af_auth_yaml(path, auth_extra, yaml, sizeof(yaml));
    assert_int_equal(hx_reconfigure(&f->m, yaml), 0);
    /* hx_start asks the admin service whether the master is up */
    setenv("WEIGHT_TOKEN", af_token(AF_ADMIN), 1);
    assert_int_equal(hx_start(&f->m, 15000), 0);
    assert_true(hx_log_contains(&f->m, "auth: on, 4 tokens"));
    wr_connect(f);
}

void af_as(wr_fixture *f, af_who who)
{
    wr_disconnect(f);
    if (who == AF_NONE) unsetenv("WEIGHT_TOKEN");
    else setenv("WEIGHT_TOKEN", af_token(who), 1);
    wr_connect(f);
}

rpcc_conn *af_raw(wr_fixture *f)
{
    char err[512];
    rpcc_conn *c = NULL;
    rpcc_options o = {.timeout_ms = 10000, .token = ""};
    if (rpcc_connect(f->m.socket, &o, &c, err, sizeof(err)) < 0) fail_msg("connect: %s", err);
    return c;
}

uint64_t af_publish(wr_fixture *f, const char *res)
{
    Wmrpc__WeightIdentity id;
    wr_upload u;
    wr_set_identity(&id, "", "ns", res, 1);
    memset(&u, 0, sizeof(u));
    u.n = 2;
    u.sizes[0] = 4096;
    u.sizes[1] = 2048;
    Wmrpc__MetadataResponse *r = wr_publish(f, &id, WR_RS_HOT, WR_MODE_MANUAL, &u);
    uint64_t gen = r->metadata->metadata_generation;
    wmrpc__metadata_response__free_unpacked(r, NULL);
    return gen;
}

int af_hello(rpcc_conn *c, const char *token)
{
    AuthHelloRequest req = AUTH_HELLO_REQUEST__INIT;
    uint8_t buf[256];
    int status = 0;
    req.token.data = (uint8_t *)token;
    req.token.len = strlen(token);
    size_t len = auth_hello_request__pack(&req, buf);
    assert_int_equal(rpcc_call(c, HOST_SERVICE__HOST_SERVICE_AUTH, AUTH_METHOD__AUTH_HELLO, buf, len,
                               &status, NULL, NULL, NULL),
                     0);
    return status;
}

void af_make_leaf(const char *dir, const char *name, const char *cn, const char *uri,
                  const char *ca_pem, const char *ca_key)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && exec >>certs.log 2>&1 && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj '/CN=%s' "
             "  -keyout %s.key -out %s.csr && "
             "printf '%s%s\\n' > %s.ext && "
             "openssl x509 -req -in %s.csr -CA %s -CAkey %s -CAcreateserial -days 2 "
             "  -extfile %s.ext -out %s.pem",
             dir, cn, name, name, uri != NULL ? "subjectAltName=URI:" : "keyUsage=digitalSignature",
             uri != NULL ? uri : "", name, name, ca_pem, ca_key, name, name);
    int rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
}

void af_make_cert_pki(const char *dir)
{
    assert_int_equal(hx_make_certs(dir), 0);
    af_make_leaf(dir, "a-reader", "a-reader", NULL, "ca.pem", "ca.key");
    af_make_leaf(dir, "a-writer", "workload-7", AF_SPIFFE_A_WRITER, "ca.pem", "ca.key");
    af_make_leaf(dir, "b-writer", "b-writer", NULL, "ca.pem", "ca.key");
    af_make_leaf(dir, "ops-admin", "ops-admin", NULL, "ca.pem", "ca.key");
    af_make_leaf(dir, "rogue", "a-reader", NULL, "other-ca.pem", "other.key");
}

void af_cert_yaml(char *out, size_t cap)
{
    int n = snprintf(out, cap,
                     "  certificates:\n"
                     "    - {cn: a-reader, tenant: a, role: reader}\n"
                     "    - {san_uri: \"%s\", tenant: a, role: writer}\n"
                     "    - {cn: b-writer, tenant: b, role: writer}\n"
                     "    - {cn: ops-admin, tenant: ops, role: admin}\n",
                     AF_SPIFFE_A_WRITER);
    assert_true(n > 0 && (size_t)n < cap);
}

void af_start_certs(wr_fixture *f, const char *name, char *tcp, size_t tcp_cap, char *yaml,
                    size_t yaml_cap)
{
    af_start_certs_with(f, name, NULL, tcp, tcp_cap, yaml, yaml_cap);
}

void af_start_certs_with(wr_fixture *f, const char *name, const char *auth_extra, char *tcp,
                         size_t tcp_cap, char *yaml, size_t yaml_cap)
{
    char auth[4096], path[300], certs[2048];
    FILE *tf;
    hx_master *m = &f->m;
    assert_int_equal(hx_init(m, name, NULL), 0);
    af_make_cert_pki(m->dir);
    snprintf(path, sizeof(path), "%s/node.token", m->dir);
    assert_non_null(tf = fopen(path, "w"));
    fprintf(tf, "%s\n", af_token(AF_ADMIN));
    assert_int_equal(fclose(tf), 0);
    af_cert_yaml(certs, sizeof(certs));
    if (auth_extra != NULL) {
        size_t used = strlen(certs);
        int k = snprintf(certs + used, sizeof(certs) - used, "%s", auth_extra);
        assert_true(k >= 0 && (size_t)k < sizeof(certs) - used);
    }
    af_auth_yaml(path, certs, auth, sizeof(auth));
    int n = snprintf(yaml, yaml_cap,
                     "tls:\n  cert: \"%s/server.pem\"\n  key: \"%s/server.key\"\n"
                     "  ca: \"%s/ca.pem\"\n  verify_clients: true\n%s",
                     m->dir, m->dir, m->dir, auth);
    assert_true(n > 0 && (size_t)n < yaml_cap);
    int port = etcd_fixture_free_port();
    assert_true(port > 0);
    snprintf(tcp, tcp_cap, "127.0.0.1:%d", port);
    snprintf(m->listen_tcp, sizeof(m->listen_tcp), "%s", tcp);
    snprintf(m->admin_ca, sizeof(m->admin_ca), "%s/ca.pem", m->dir);
    assert_int_equal(hx_reconfigure(m, yaml), 0);
    setenv("WEIGHT_TOKEN", af_token(AF_ADMIN), 1); /* hx_start's status call */
    /* the admin endpoint verifies clients too: hx_http_get presents these */
    snprintf(m->admin_cert, sizeof(m->admin_cert), "%s/ops-admin.pem", m->dir);
    snprintf(m->admin_key, sizeof(m->admin_key), "%s/ops-admin.key", m->dir);
    assert_int_equal(hx_start(m, 15000), 0);
    if (!hx_log_contains(m, "auth: on, 4 tokens, 4 certificate mappings")) fail_msg("log line");
    unsetenv("WEIGHT_TOKEN");
}

void af_use_cert(const wr_fixture *f, const char *name)
{
    char p[400];
    snprintf(p, sizeof(p), "%s/ca.pem", f->m.dir);
    setenv("WM_TLS_CA", p, 1);
    snprintf(p, sizeof(p), "%s/%s.pem", f->m.dir, name);
    setenv("WM_TLS_CERT", p, 1);
    snprintf(p, sizeof(p), "%s/%s.key", f->m.dir, name);
    setenv("WM_TLS_KEY", p, 1);
}

void af_as_cert(wr_fixture *f, const char *tcp, const char *name)
{
    char err[512];
    wr_disconnect(f);
    unsetenv("WEIGHT_TOKEN");
    af_use_cert(f, name);
    if (rpcc_connect(tcp, NULL, &f->rpc, err, sizeof(err)) < 0) fail_msg("rpc: %s", err);
    if (kvc_connect(tcp, 10000, &f->kv, err, sizeof(err)) < 0) fail_msg("kv: %s", err);
}
