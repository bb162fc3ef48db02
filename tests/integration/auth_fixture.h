/* auth_fixture.h -- a real store_master with authentication on, for the
 * auth and tenant tests (test_auth_rules.c, test_tenant_isolation.c).
 *
 * af_start writes four credentials into the master's config by their
 * SHA-256 -- an admin (tenant "ops"), a writer and a reader of tenant "a",
 * a writer of tenant "b" -- and the admin token into the file the embedded
 * node presents, starts the master (with the weight plugin) and connects the
 * fixture's clients as the admin (af_start_with adds more auth: keys, e.g.
 * auth.limits, for test_auth_limits.c). af_as reconnects them as another token
 * (through WEIGHT_TOKEN, which every client connection presents), or with no
 * token at all. */
#ifndef TEST_AUTH_FIXTURE_H
#define TEST_AUTH_FIXTURE_H

#include "weight_rpc.h"

typedef enum af_who {
    AF_NONE = 0,   /* no token */
    AF_ADMIN = 1,  /* tenant ops, admin */
    AF_A_WRITER,   /* tenant a, writer */
    AF_A_READER,   /* tenant a, reader */
    AF_B_WRITER,   /* tenant b, writer */
    AF_WRONG       /* a token the master does not know */
} af_who;

/* The token of who ("" for AF_NONE). */
const char *af_token(af_who who);

/* hx_init(name) + the auth config + hx_start + connect as the admin
 * (asserts each). */
void af_start(wr_fixture *f, const char *name);

/* af_start with more YAML under auth: (indented by two spaces, e.g.
 * "  limits:\n    tenant: {max_revisions: 2}\n"); NULL: none. */
void af_start_with(wr_fixture *f, const char *name, const char *auth_extra);

/* The auth: block af_start writes (the four tokens by their SHA-256), with
 * node_token_file (NULL: none, e.g. for HA masters without an embedded
 * node) and auth_extra appended, into out (asserts that it fits). */
void af_auth_yaml(const char *node_token_file, const char *auth_extra, char *out, size_t cap);

/* Reconnect f->rpc and f->kv presenting who's token (asserts that the
 * connections open; AF_WRONG is refused at connect, so it is not allowed
 * here: use af_raw). */
void af_as(wr_fixture *f, af_who who);

/* A bare connection to f's master presenting no token (rpcc_options.token
 * ""), for tests that send auth.HELLO themselves. */
rpcc_conn *af_raw(wr_fixture *f);

/* Publish revision ns/res/main generation 1 of the tenant f is connected as
 * (two small payloads, HOT, MANUAL; asserts each step); its metadata
 * generation. */
uint64_t af_publish(wr_fixture *f, const char *res);

/* Send auth.HELLO with token on c: the status the master answered. */
int af_hello(rpcc_conn *c, const char *token);

/* -- client certificates (auth.certificates) ------------------------------ */

#define AF_SPIFFE_A_WRITER "spiffe://test.example/tenant/a/writer"

/* A key and a certificate dir/name.pem, name.key for subject CN cn (and a
 * SAN URI when uri is not NULL), signed by the CA whose certificate and key
 * are dir/ca_pem and dir/ca_key (openssl CLI, output in dir/certs.log;
 * asserts that it worked). */
void af_make_leaf(const char *dir, const char *name, const char *cn, const char *uri,
                  const char *ca_pem, const char *ca_key);

/* hx_make_certs(dir) and one leaf per identity af_cert_yaml maps, all
 * signed by dir/ca.pem: a-reader (tenant a, reader; by its CN), a-writer
 * (tenant a, writer; by its SAN URI AF_SPIFFE_A_WRITER under the unrelated
 * CN workload-7), b-writer (tenant b, writer; CN), ops-admin (tenant ops,
 * admin; CN); and rogue, the CN a-reader signed by other-ca.pem. The
 * fixture's client.pem (CN=client) stays unmapped. Asserts. */
void af_make_cert_pki(const char *dir);

/* The auth.certificates block (indented under auth:) mapping the leaves
 * af_make_cert_pki makes, into out (asserts that it fits). */
void af_cert_yaml(char *out, size_t cap);

/* af_start's master with TLS too (name tags its directory): a free
 * loopback TCP port with af_make_cert_pki's server certificate (made in
 * the master's directory), tls.ca, tls.verify_clients, and af_cert_yaml's
 * auth.certificates beside the four tokens; hx_http_get presents the
 * ops-admin certificate. The TCP address goes to tcp, the extra YAML
 * written to yaml (for a later hx_reconfigure); f is not connected and
 * WEIGHT_TOKEN is unset afterwards. Asserts each step. */
void af_start_certs(wr_fixture *f, const char *name, char *tcp, size_t tcp_cap, char *yaml,
                    size_t yaml_cap);

/* af_start_certs with more YAML under auth: (as af_start_with's, e.g.
 * auth.limits); NULL: none. */
void af_start_certs_with(wr_fixture *f, const char *name, const char *auth_extra, char *tcp,
                         size_t tcp_cap, char *yaml, size_t yaml_cap);

/* Point WM_TLS_CA, WM_TLS_CERT and WM_TLS_KEY at the CA of f's master and
 * the certificate name of its directory (af_make_cert_pki's). */
void af_use_cert(const wr_fixture *f, const char *name);

/* Reconnect f->rpc and f->kv to tcp over TLS with certificate name and no
 * token (asserts that both open). */
void af_as_cert(wr_fixture *f, const char *tcp, const char *name);

#endif /* TEST_AUTH_FIXTURE_H */
