/* test_auth_config.c -- the auth section of the master's config
 * (host_shim/config.c) and the credential table it feeds (rpc/rpc_auth.c).
 *
 * Every bad auth config named by issue 19 is refused with one message naming
 * the key and the cause, and the config comes back zeroed (nothing half
 * applied): a plaintext token, a hash that is not 64 hex digits, an unknown
 * role, a bad tenant, a duplicate token, auth on without tokens or without
 * the embedded node's token file, auth keys while auth is off, and listen.tcp
 * on a non-loopback address with auth off unless auth.allow_insecure, and
 * with auth on listen.admin on a non-loopback address without tls.cert
 * unless auth.allow_insecure, with auth off listen.admin on a non-loopback
 * address unless auth.allow_insecure. The
 * credential table finds a token by its SHA-256 and nothing else.
 *
 * auth.limits (rpc_limits.h): the connection limits, the tenant default and
 * a per-tenant override load field by field; an unknown key, a value that is
 * not a positive integer or over its bound, a burst without a rate, an
 * override of a tenant no token has, and limits while auth is off are
 * refused naming the key. The running table's token bucket refuses a
 * request when empty and refills at the rate (time given explicitly), a
 * tenant's bucket is shared, and the revision quota refuses at the limit;
 * every refusal is counted per tenant.
 *
 * auth.certificates: the config that maps client certificates to tenants
 * and roles (config_auth.c) and the matching of a certificate against it
 * (rpc/rpc_auth_cert.c).
 *
 * A good list loads entry by entry (cn, san_uri, tenant, role) and a config
 * with certificate mappings but no tokens is allowed. Every bad one is
 * refused with one message naming the key and the cause, and the config
 * comes back zeroed: an unknown key, an entry with both cn and san_uri or
 * neither, a missing tenant or role, a bad tenant, role, commonName or URI,
 * a duplicate, and mappings without auth.enabled, without
 * tls.verify_clients (or its cert, key, ca), or without listen.tcp.
 *
 * The matcher, on certificates built in memory: a cn entry matches only a
 * subject with exactly that one commonName (not a prefix, not a different
 * case, not a subject with two commonNames); a san_uri entry matches any
 * one of several URIs exactly; entries of different identities matching
 * one certificate map it to none, and the note names the certificate's
 * subject and the entries' indexes but no tenant. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "config.h"
#include "rpc_auth.h"
#include "rpc_limits.h"

/* SHA-256 of "test" and of "other" */
#define H_TEST "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
#define H_OTHER "d9298a10d1b0735837dc4bd85dac641b0f3cef27a47e5d53a54f2f3f5b2fcffa"

static int is_zeroed(const host_config *cfg)
{
    static const host_config zero;
    return memcmp(cfg, &zero, sizeof(zero)) == 0;
}

static void expect_refused(const char *yaml, const char *want)
{
    host_config cfg;
    char err[512] = "";
    memset(&cfg, 0xa5, sizeof(cfg));
    int rc = host_config_load_string("x.yaml", yaml, "/etc/wm", &cfg, err, sizeof(err));
    if (rc >= 0 || strstr(err, want) == NULL)
        fail_msg("yaml:\n%s\nrc=%d\nmessage: [%s]\nwanted: [%s]", yaml, rc, err, want);
    assert_true(is_zeroed(&cfg));
}

static void load_ok(const char *yaml, host_config *cfg)
{
    char err[512] = "";
    int rc = host_config_load_string("x.yaml", yaml, "/etc/wm", cfg, err, sizeof(err));
    if (rc != 0) fail_msg("yaml:\n%s\nrc=%d message: %s", yaml, rc, err);
}

/* The default is off, and a loopback listen.tcp needs nothing more. */
static void test_auth_off_by_default_on_loopback(void **state)
{
    (void)state;
    host_config c;
    load_ok("", &c);
    assert_int_equal(c.auth_enabled, 0);
    assert_int_equal(c.auth_n_tokens, 0);
    host_config_free(&c);
    load_ok("listen: {tcp: \"[::1]:7600\"}\n", &c);
    host_config_free(&c);
}

static void test_auth_refuses_plaintext_token(void **state)
{
    (void)state;
    expect_refused("auth:\n  enabled: true\n  node_token_file: t\n  tokens:\n"
                   "    - {token: s3cret, tenant: a, role: reader}\n",
                   "x.yaml:5: auth.tokens[0].token: a plaintext token is refused");
    /* a value that is not a SHA-256 (e.g. the token itself) under sha256 */
    expect_refused("auth:\n  enabled: true\n  node_token_file: t\n  tokens:\n"
                   "    - {sha256: s3cret, tenant: a, role: reader}\n",
                   "auth.tokens[0].sha256: is not 64 hex digits");
}

static void test_auth_refuses_unknown_role_and_bad_tenant(void **state)
{
    (void)state;
    expect_refused("auth:\n  enabled: true\n  node_token_file: t\n  tokens:\n"
                   "    - {sha256: " H_TEST ", tenant: a, role: root}\n",
                   "auth.tokens[0].role: \"root\" is not a role (reader, writer or admin)");
    expect_refused("auth:\n  enabled: true\n  node_token_file: t\n  tokens:\n"
                   "    - {sha256: " H_TEST ", tenant: \"a/b\", role: reader}\n",
                   "auth.tokens[0].tenant: \"a/b\" is not a tenant");
    expect_refused("auth:\n  enabled: true\n  node_token_file: t\n  tokens:\n"
                   "    - {sha256: " H_TEST ", tenant: weights, role: writer}\n",
                   "auth.tokens[0].tenant: \"weights\" cannot be a tenant: a tenant's objects are "
                   "named '<tenant>/...' and every tenant's weight revisions 'weights/<tenant>/...'");
    expect_refused("auth:\n  enabled: true\n  node_token_file: t\n  tokens:\n"
                   "    - {sha256: " H_TEST ", role: reader}\n",
                   "auth.tokens[0]: missing tenant");
    expect_refused("auth:\n  enabled: true\n  node_token_file: t\n  tokens:\n"
                   "    - {sha256: " H_TEST ", tenant: a, role: reader, expires: 1}\n",
                   "auth.tokens[0].expires: unknown key");
}

static void test_auth_refuses_duplicate_token(void **state)
{
    (void)state;
    expect_refused("auth:\n  enabled: true\n  node_token_file: t\n  tokens:\n"
                   "    - {sha256: " H_TEST ", tenant: a, role: reader}\n"
                   "    - {sha256: " H_OTHER ", tenant: b, role: writer}\n"
                   "    - {sha256: \"" H_TEST "\", tenant: c, role: admin}\n",
                   "x.yaml:7: auth.tokens[2].sha256: duplicate token: auth.tokens[0] has the "
                   "same hash");
}

static void test_auth_refuses_non_loopback_listen_without_auth(void **state)
{
    (void)state;
    expect_refused("listen: {tcp: \"0.0.0.0:7600\"}\n",
                   "x.yaml:1: listen.tcp: 0.0.0.0:7600 is not a loopback address and "
                   "auth.enabled is false");
    expect_refused("listen: {tcp: \"[::]:7600\"}\n", "is not a loopback address");
    expect_refused("listen: {tcp: \"10.1.2.3:7600\"}\nauth: {enabled: false}\n",
                   "is not a loopback address");
    host_config c;
    load_ok("listen: {tcp: \"0.0.0.0:7600\"}\nauth: {allow_insecure: true}\n", &c);
    assert_int_equal(c.auth_allow_insecure, 1);
    host_config_free(&c);
    load_ok("listen: {tcp: \"0.0.0.0:7600\"}\nnode: {embedded: false}\n"
            "auth:\n  enabled: true\n  tokens:\n"
            "    - {sha256: " H_TEST ", tenant: a, role: admin}\n",
            &c);
    assert_int_equal(c.auth_enabled, 1);
    host_config_free(&c);
}

/* With auth on, an admin endpoint off loopback asks for an admin token:
 * without TLS that token would cross the network in plaintext, so it is
 * refused unless auth.allow_insecure; with tls.cert, or on loopback, it
 * loads. With auth off no token is asked (the next test's rule applies). */
static void test_auth_refuses_non_loopback_admin_without_tls(void **state)
{
    (void)state;
    host_config c;
#define AUTH_ON "node: {embedded: false}\nauth:\n  enabled: true\n  tokens:\n" \
                "    - {sha256: " H_TEST ", tenant: ops, role: admin}\n"
    expect_refused("listen: {admin: \"0.0.0.0:7680\"}\n" AUTH_ON,
                   "x.yaml:1: listen.admin: 0.0.0.0:7680 is not a loopback address and tls.cert "
                   "is not set: the admin token its clients present would cross the network in "
                   "plaintext; set tls.cert and tls.key, or auth.allow_insecure: true");
    expect_refused("listen: {admin: \"10.1.2.3:7680\"}\n" AUTH_ON, "listen.admin: 10.1.2.3:7680");
    load_ok("listen: {admin: \"0.0.0.0:7680\"}\ntls: {cert: c.pem, key: k.pem}\n" AUTH_ON, &c);
    host_config_free(&c);
    load_ok("listen: {admin: \"0.0.0.0:7680\"}\n" AUTH_ON "  allow_insecure: true\n", &c);
    assert_int_equal(c.auth_allow_insecure, 1);
    host_config_free(&c);
    load_ok("listen: {admin: \"127.0.0.1:7680\"}\n" AUTH_ON, &c);
    host_config_free(&c);
#undef AUTH_ON
}

/* With auth off, an admin endpoint off loopback would show every tenant's
 * metrics to anyone who reaches it: refused at load, naming the key and its
 * line, unless auth.allow_insecure; on loopback, or turned off, it loads. */
static void test_auth_refuses_non_loopback_admin_without_auth(void **state)
{
    (void)state;
    host_config c;
    expect_refused("node: {embedded: true}\nlisten:\n  admin: \"0.0.0.0:7680\"\n",
                   "x.yaml:3: listen.admin: 0.0.0.0:7680 is not a loopback address and "
                   "auth.enabled is false: anyone who reaches it could read every tenant's "
                   "metrics; turn auth on, or set auth.allow_insecure: true");
    expect_refused("listen: {admin: \"[::]:7680\"}\n", "listen.admin: [::]:7680 is not a loopback");
    expect_refused("listen: {admin: \"10.1.2.3:7680\"}\nauth: {enabled: false}\n",
                   "x.yaml:1: listen.admin: 10.1.2.3:7680 is not a loopback address and "
                   "auth.enabled is false");
    expect_refused("listen: {admin: \"0.0.0.0:7680\"}\ntls: {cert: c.pem, key: k.pem}\n",
                   "listen.admin: 0.0.0.0:7680 is not a loopback address and auth.enabled is "
                   "false");
    load_ok("listen: {admin: \"0.0.0.0:7680\"}\nauth: {allow_insecure: true}\n", &c);
    assert_int_equal(c.auth_allow_insecure, 1);
    assert_string_equal(c.listen_admin, "0.0.0.0:7680");
    host_config_free(&c);
    load_ok("listen: {admin: \"[::1]:7680\"}\n", &c);
    host_config_free(&c);
    load_ok("listen: {admin: \"\"}\n", &c);
    host_config_free(&c);
}

static void test_auth_refuses_incomplete_or_idle_settings(void **state)
{
    (void)state;
    expect_refused("auth: {enabled: true, node_token_file: t}\n",
                   "auth.tokens: missing: auth.enabled true needs at least one token");
    expect_refused("auth:\n  enabled: true\n  tokens:\n"
                   "    - {sha256: " H_TEST ", tenant: a, role: admin}\n",
                   "auth.node_token_file: missing: the embedded node registers");
    expect_refused("auth:\n  tokens:\n    - {sha256: " H_TEST ", tenant: a, role: admin}\n",
                   "auth.tokens: is set but auth.enabled is false (it would do nothing)");
    expect_refused("auth: {enabled: yes}\n", "auth.enabled: ");
    expect_refused("auth: {tokens: {a: b}}\n", "auth.tokens: expected a sequence");
}

/* The table finds a token by its hash, in constant time over every entry;
 * anything else -- an unknown token, an empty one, a prefix -- is EAUTH. */
static void test_auth_table_checks_tokens_by_hash(void **state)
{
    (void)state;
    rpc_auth_token t[2];
    rpc_auth *a = NULL;
    const rpc_auth_token *who = NULL;
    memset(t, 0, sizeof(t));
    assert_int_equal(rpc_auth_parse_sha256(H_TEST, t[0].sha256), SMP_OK);
    assert_int_equal(rpc_auth_parse_sha256(H_OTHER, t[1].sha256), SMP_OK);
    strcpy(t[0].tenant, "a");
    t[0].role = SMP_ROLE_READER;
    strcpy(t[1].tenant, "b");
    t[1].role = SMP_ROLE_ADMIN;
    assert_int_equal(rpc_auth_create(1, t, 2, &a), SMP_OK);
    assert_int_equal(rpc_auth_check(a, (const uint8_t *)"test", 4, &who), SMP_OK);
    assert_string_equal(who->tenant, "a");
    assert_int_equal(who->role, SMP_ROLE_READER);
    assert_int_equal(rpc_auth_check(a, (const uint8_t *)"other", 5, &who), SMP_OK);
    assert_string_equal(who->tenant, "b");
    assert_int_equal(rpc_auth_check(a, (const uint8_t *)"tes", 3, &who), SMP_EAUTH);
    assert_null(who);
    assert_int_equal(rpc_auth_check(a, (const uint8_t *)"", 0, &who), SMP_EAUTH);
    assert_int_equal(rpc_auth_check(a, (const uint8_t *)H_TEST, 64, &who), SMP_EAUTH);
    rpc_auth_free(a);
    /* a duplicate hash or a bad role is refused by the table too */
    t[1] = t[0];
    assert_int_equal(rpc_auth_create(1, t, 2, &a), SMP_EINVAL);
    t[1].sha256[0] ^= 1;
    t[1].role = SMP_ROLE_NONE;
    assert_int_equal(rpc_auth_create(1, t, 2, &a), SMP_EINVAL);
    assert_int_equal(rpc_auth_parse_sha256("zz", t[0].sha256), SMP_EINVAL);
}

#define AUTH_A "auth:\n  enabled: true\n  node_token_file: t\n  tokens:\n" \
               "    - {sha256: " H_TEST ", tenant: a, role: writer}\n" \
               "    - {sha256: " H_OTHER ", tenant: b, role: reader}\n"

/* The three levels load; an override keeps the default's other fields. */
static void test_auth_limits_load_with_overrides(void **state)
{
    (void)state;
    host_config c;
    load_ok(AUTH_A "  limits:\n"
            "    connection: {rate: 50, burst: 100, inflight_bytes: 1048576}\n"
            "    tenants:\n      b: {rate: 7, max_revisions: 9}\n"
            "    tenant: {rate: 200, inflight_bytes: 8388608, max_revisions: 1000}\n",
            &c);
    const rpc_limits_config *l = &c.auth_limits;
    assert_int_equal(l->connection.rate, 50);
    assert_int_equal(l->connection.burst, 100);
    assert_int_equal(l->connection.inflight_bytes, 1048576);
    assert_int_equal(l->connection.max_revisions, 0);
    assert_int_equal(l->tenant.rate, 200);
    assert_int_equal(l->tenant.burst, 0);
    assert_int_equal(l->tenant.max_revisions, 1000);
    assert_int_equal(l->n_tenants, 1);
    assert_string_equal(l->tenants[0].tenant, "b");
    assert_int_equal(l->tenants[0].v.rate, 7);
    assert_int_equal(l->tenants[0].v.max_revisions, 9);
    assert_int_equal(l->tenants[0].v.inflight_bytes, 8388608); /* the default's */
    host_config_free(&c);
    /* no limits: every field 0 (unlimited) */
    load_ok(AUTH_A, &c);
    assert_int_equal(c.auth_limits.connection.rate, 0);
    assert_int_equal(c.auth_limits.tenant.max_revisions, 0);
    assert_null(c.auth_limits.tenants);
    host_config_free(&c);
}

static void test_auth_limits_refuse_bad_keys_and_values(void **state)
{
    (void)state;
    expect_refused(AUTH_A "  limits: {burst_rate: 5}\n",
                   "auth.limits.burst_rate: unknown key (expected connection, tenant, tenants)");
    expect_refused(AUTH_A "  limits:\n    connection: {max_revisions: 5}\n",
                   "x.yaml:8: auth.limits.connection.max_revisions: unknown key (expected rate, "
                   "burst, inflight_bytes)");
    expect_refused(AUTH_A "  limits:\n    tenant: {rate: 0}\n",
                   "auth.limits.tenant.rate: 0 is outside 1 .. 1000000");
    expect_refused(AUTH_A "  limits:\n    connection: {inflight_bytes: 100}\n",
                   "auth.limits.connection.inflight_bytes: 100 is outside 8192 .. 1099511627776");
    expect_refused(AUTH_A "  limits:\n    tenant: {rate: -3}\n",
                   "auth.limits.tenant.rate: -3 must not be negative");
    expect_refused(AUTH_A "  limits:\n    tenant: {inflight_bytes: lots}\n",
                   "auth.limits.tenant.inflight_bytes: \"lots\" is not an integer");
    expect_refused(AUTH_A "  limits:\n    tenant: {max_revisions: }\n",
                   "auth.limits.tenant.max_revisions: expected an integer");
    expect_refused(AUTH_A "  limits:\n    connection: {burst: 10}\n",
                   "auth.limits.connection.burst: is set without a rate");
    expect_refused(AUTH_A "  limits:\n    tenants:\n      c: {rate: 1}\n",
                   "auth.limits.tenants.c: no token of auth.tokens (nor entry of auth.certificates) has tenant \"c\"");
    expect_refused(AUTH_A "  limits:\n    tenants: [a]\n",
                   "auth.limits.tenants: expected a mapping of tenant names");
    expect_refused(AUTH_A "  limits: 5\n", "auth.limits: expected a mapping");
    expect_refused("auth:\n  limits: {tenant: {rate: 5}}\n",
                   "auth.limits: is set but auth.enabled is false (it would do nothing)");
}

/* The running table: buckets with explicit times, shared per tenant, the
 * revision quota, and the refusal counts per tenant. */
static void count_visit(void *arg, const char *tenant, const uint64_t *refused)
{
    uint64_t *sums = arg;
    if (strcmp(tenant, "a") == 0)
        for (int r = 0; r < RPC_REFUSED_KINDS; r++) sums[r] += refused[r];
}

static void test_auth_limits_buckets_and_quota(void **state)
{
    (void)state;
    rpc_auth_token t[2];
    rpc_limits_config cfg;
    rpc_limit_tenant over;
    rpc_limits *l = NULL;
    memset(t, 0, sizeof(t));
    memset(&cfg, 0, sizeof(cfg));
    strcpy(t[0].tenant, "a");
    strcpy(t[1].tenant, "a"); /* a second token of a: one state */
    cfg.connection.rate = 1000; /* never the one that runs dry here */
    cfg.tenant.rate = 1;
    cfg.tenant.burst = 2;
    memset(&over, 0, sizeof(over));
    strcpy(over.tenant, "a");
    over.v = cfg.tenant;
    over.v.max_revisions = 2;
    cfg.tenants = &over;
    cfg.n_tenants = 1;
    assert_int_equal(rpc_limits_create(&cfg, t, 2, &l), SMP_OK);
    rpc_tenant_state *a = rpc_limits_tenant(l, "a");
    assert_non_null(a);
    assert_null(rpc_limits_tenant(l, "b"));
    rpc_bucket c1, c2;
    memset(&c1, 0, sizeof(c1));
    memset(&c2, 0, sizeof(c2));
    int which = -1;
    /* two connections of a share its burst of 2 */
    assert_int_equal(rpc_bucket_take2(&c1, &cfg.connection, a, 1000, &which), 1);
    assert_int_equal(rpc_bucket_take2(&c2, &cfg.connection, a, 1000, &which), 1);
    assert_int_equal(rpc_bucket_take2(&c1, &cfg.connection, a, 1000, &which), 0);
    assert_int_equal(which, 1);
    assert_int_equal(rpc_bucket_take2(&c2, &cfg.connection, a, 1999, &which), 0);
    /* one second later one request has flowed in */
    assert_int_equal(rpc_bucket_take2(&c2, &cfg.connection, a, 2000, &which), 1);
    assert_int_equal(rpc_bucket_take2(&c1, &cfg.connection, a, 2000, &which), 0);
    /* never more than the burst, however long it waited */
    assert_int_equal(rpc_bucket_take2(&c1, &cfg.connection, a, 90000, &which), 1);
    assert_int_equal(rpc_bucket_take2(&c1, &cfg.connection, a, 90000, &which), 1);
    assert_int_equal(rpc_bucket_take2(&c1, &cfg.connection, a, 90000, &which), 0);
    /* the connection's own bucket: rate 1000 burst 1000 */
    rpc_limit_values tight = {.rate = 1, .burst = 1};
    rpc_bucket c3;
    memset(&c3, 0, sizeof(c3));
    assert_int_equal(rpc_bucket_take2(&c3, &tight, NULL, 5, &which), 1);
    assert_int_equal(rpc_bucket_take2(&c3, &tight, NULL, 5, &which), 0);
    assert_int_equal(which, 0);
    rpc_limits_count(l, a, RPC_REFUSED_RATE);
    rpc_limits_count(l, a, RPC_REFUSED_RATE);
    /* the revision quota */
    uint64_t limit = 99;
    assert_int_equal(rpc_limits_revision_quota(l, "a", 1, &limit), SMP_OK);
    assert_int_equal(limit, 2);
    assert_int_equal(rpc_limits_revision_quota(l, "a", 2, &limit), SMP_ENOSPC);
    assert_int_equal(rpc_limits_revision_quota(l, "zz", 500, &limit), SMP_OK);
    assert_int_equal(limit, 0);
    uint64_t sums[RPC_REFUSED_KINDS] = {0};
    rpc_limits_each(l, count_visit, sums);
    assert_int_equal(sums[RPC_REFUSED_RATE], 2);
    assert_int_equal(sums[RPC_REFUSED_INFLIGHT], 0);
    assert_int_equal(sums[RPC_REFUSED_REVISIONS], 1);
    rpc_limits_free(l);
    /* an override of a tenant no token has */
    strcpy(over.tenant, "nobody");
    assert_int_equal(rpc_limits_create(&cfg, t, 2, &l), SMP_EINVAL);
    assert_null(l);
}

/* -- auth.certificates ---------------------------------------------------- */

#define TLS_OK "tls: {cert: s.pem, key: s.key, ca: ca.pem, verify_clients: true}\n" \
               "listen: {tcp: \"127.0.0.1:7600\"}\n"
#define AUTH_ON "auth:\n  enabled: true\n  node_token_file: t\n"

static void test_auth_certificates_load(void **state)
{
    (void)state;
    host_config c;
    load_ok(TLS_OK AUTH_ON "  certificates:\n"
            "    - {cn: team-a-reader, tenant: a, role: reader}\n"
            "    - {san_uri: \"spiffe://example.org/ns/a/sa/writer\", tenant: a, role: writer}\n",
            &c);
    assert_int_equal(c.auth_n_certs, 2);
    assert_int_equal(c.auth_n_tokens, 0);
    assert_int_equal(c.auth_certs[0].match, RPC_CERT_CN);
    assert_string_equal(c.auth_certs[0].value, "team-a-reader");
    assert_string_equal(c.auth_certs[0].tenant, "a");
    assert_int_equal(c.auth_certs[0].role, SMP_ROLE_READER);
    assert_int_equal(c.auth_certs[1].match, RPC_CERT_SAN_URI);
    assert_string_equal(c.auth_certs[1].value, "spiffe://example.org/ns/a/sa/writer");
    assert_int_equal(c.auth_certs[1].role, SMP_ROLE_WRITER);
    host_config_free(&c);
}

static void test_auth_certificates_refuse_bad_entries(void **state)
{
    (void)state;
#define CERTS TLS_OK AUTH_ON "  certificates:\n"
    expect_refused(CERTS "    - {cn: x, tenant: a, role: reader, subject: y}\n",
                   "auth.certificates[0].subject: unknown key (expected cn or san_uri, tenant, "
                   "role)");
    expect_refused(CERTS "    - {cn: x, san_uri: \"spiffe://e/x\", tenant: a, role: reader}\n",
                   "auth.certificates[0].san_uri: an entry matches one name: give cn or "
                   "san_uri, not both");
    expect_refused(CERTS "    - {tenant: a, role: reader}\n",
                   "auth.certificates[0]: missing cn or san_uri");
    expect_refused(CERTS "    - {cn: x, role: reader}\n", "auth.certificates[0]: missing tenant");
    expect_refused(CERTS "    - {cn: x, tenant: a}\n", "auth.certificates[0]: missing role");
    expect_refused(CERTS "    - {cn: x, tenant: \"a b\", role: reader}\n",
                   "auth.certificates[0].tenant: \"a b\" is not a tenant");
    expect_refused(CERTS "    - {cn: x, tenant: a, role: root}\n",
                   "auth.certificates[0].role: \"root\" is not a role (reader, writer or admin)");
    expect_refused(CERTS "    - {cn: \"\", tenant: a, role: reader}\n",
                   "auth.certificates[0].cn: \"\" is not a commonName");
    expect_refused(CERTS "    - {san_uri: \"not a uri\", tenant: a, role: reader}\n",
                   "auth.certificates[0].san_uri: \"not a uri\" is not a URI");
    expect_refused(CERTS "    - {san_uri: \"//no-scheme\", tenant: a, role: reader}\n",
                   "is not a URI");
    expect_refused(CERTS "    - {cn: [x], tenant: a, role: reader}\n",
                   "auth.certificates[0].cn: expected a string");
    expect_refused(CERTS "    - cn\n", "auth.certificates[0]: expected a mapping {cn or san_uri");
    expect_refused(CERTS "    - {cn: x, tenant: a, role: reader}\n"
                         "    - {cn: x, tenant: b, role: writer}\n",
                   "auth.certificates[1].cn: duplicate: auth.certificates[0] has the same cn");
    expect_refused(TLS_OK AUTH_ON "  certificates: {cn: x}\n",
                   "auth.certificates: expected a sequence");
#undef CERTS
}

static void test_auth_certificates_need_verified_tls(void **state)
{
    (void)state;
    const char *entry = "  certificates:\n    - {cn: x, tenant: a, role: reader}\n";
    char yaml[1024];
    /* auth off */
    snprintf(yaml, sizeof(yaml), TLS_OK "auth:\n%s", entry);
    expect_refused(yaml, "auth.certificates: is set but auth.enabled is false");
    /* no TLS at all */
    snprintf(yaml, sizeof(yaml), AUTH_ON "%s", entry);
    expect_refused(yaml, "auth.certificates: needs tls.verify_clients: true (with tls.cert, "
                         "tls.key and tls.ca)");
    /* TLS without client verification */
    snprintf(yaml, sizeof(yaml), "tls: {cert: s.pem, key: s.key, ca: ca.pem}\n" AUTH_ON "%s",
             entry);
    expect_refused(yaml, "auth.certificates: needs tls.verify_clients: true");
    /* verify_clients without its ca is tls.'s own refusal */
    snprintf(yaml, sizeof(yaml), "tls: {cert: s.pem, key: s.key, verify_clients: true}\n"
             AUTH_ON "%s", entry);
    expect_refused(yaml, "tls.verify_clients: true needs tls.cert, tls.key and tls.ca");
    /* no TCP port: certificates never arrive */
    snprintf(yaml, sizeof(yaml), "tls: {cert: s.pem, key: s.key, ca: ca.pem, "
             "verify_clients: true}\nlisten: {tcp: \"\", unix: /tmp/m.sock}\n" AUTH_ON "%s", entry);
    expect_refused(yaml, "auth.certificates: needs listen.tcp");
    /* neither tokens nor certificates */
    expect_refused(TLS_OK AUTH_ON, "auth.tokens: missing: auth.enabled true needs at least one "
                                   "token (or an auth.certificates entry)");
    /* auth.limits.tenants may name a tenant only a certificate has */
    host_config c;
    snprintf(yaml, sizeof(yaml), TLS_OK AUTH_ON "  tokens:\n    - {sha256: " H_TEST
             ", tenant: ops, role: admin}\n%s  limits:\n    tenants:\n      a: {rate: 5}\n",
             entry);
    load_ok(yaml, &c);
    host_config_free(&c);
}

/* A leaf certificate with subject CN=cn[i] for each given cn (NULL ends)
 * and the SAN URIs uris (NULL: no extension). Unsigned: matching does not
 * look at signatures. */
static X509 *leaf(const char *const *cns, const char *uris)
{
    X509 *x = X509_new();
    X509_NAME *n = X509_NAME_new();
    assert_non_null(x);
    for (size_t i = 0; cns[i] != NULL; i++)
        assert_int_equal(X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8,
                                                    (const unsigned char *)cns[i], -1, -1, 0),
                         1);
    assert_int_equal(X509_set_subject_name(x, n), 1);
    X509_NAME_free(n);
    if (uris != NULL) {
        X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, uris);
        assert_non_null(e);
        assert_int_equal(X509_add_ext(x, e, -1), 1);
        X509_EXTENSION_free(e);
    }
    return x;
}

static rpc_auth_cert entry(rpc_cert_match m, const char *value, const char *tenant, smp_role role)
{
    rpc_auth_cert e;
    memset(&e, 0, sizeof(e));
    e.match = m;
    snprintf(e.value, sizeof(e.value), "%s", value);
    snprintf(e.tenant, sizeof(e.tenant), "%s", tenant);
    e.role = role;
    return e;
}

static void test_auth_certificates_match_exactly(void **state)
{
    (void)state;
    rpc_auth_cert t[4];
    const rpc_auth_cert *got = NULL;
    char note[512];
    t[0] = entry(RPC_CERT_CN, "team-a", "a", SMP_ROLE_READER);
    t[1] = entry(RPC_CERT_SAN_URI, "spiffe://e.org/b", "b", SMP_ROLE_WRITER);
    t[2] = entry(RPC_CERT_CN, "both", "a", SMP_ROLE_READER);
    t[3] = entry(RPC_CERT_SAN_URI, "spiffe://e.org/both", "b", SMP_ROLE_ADMIN);

    X509 *x = leaf((const char *const[]){"team-a", NULL}, NULL);
    assert_int_equal(rpc_auth_cert_find(t, 4, x, &got, note, sizeof(note)), SMP_OK);
    assert_ptr_equal(got, &t[0]);
    X509_free(x);
    /* not a prefix, not another case, not one of two commonNames */
    const char *const misses[][3] = {{"team-a2", NULL}, {"Team-A", NULL}, {"team-", NULL},
                                     {"team-a", "team-a", NULL}};
    for (size_t i = 0; i < 4; i++) {
        x = leaf(misses[i], NULL);
        assert_int_equal(rpc_auth_cert_find(t, 4, x, &got, note, sizeof(note)), SMP_ENOTFOUND);
        assert_null(got);
        assert_non_null(strstr(note, "matches no auth.certificates entry"));
        X509_free(x);
    }
    /* one of several URIs; the CN does not matter for a san_uri entry */
    x = leaf((const char *const[]){"whatever", NULL},
             "URI:https://other.example/x,URI:spiffe://e.org/b,DNS:host.example");
    assert_int_equal(rpc_auth_cert_find(t, 4, x, &got, note, sizeof(note)), SMP_OK);
    assert_ptr_equal(got, &t[1]);
    X509_free(x);
    x = leaf((const char *const[]){"whatever", NULL}, "URI:spiffe://e.org/b/extra");
    assert_int_equal(rpc_auth_cert_find(t, 4, x, &got, note, sizeof(note)), SMP_ENOTFOUND);
    assert_non_null(strstr(note, "(subject CN=whatever) matches no auth.certificates entry"));
    X509_free(x);
    /* two entries of different identities: none, and no tenant named */
    x = leaf((const char *const[]){"both", NULL}, "URI:spiffe://e.org/both");
    assert_int_equal(rpc_auth_cert_find(t, 4, x, &got, note, sizeof(note)), SMP_EEXIST);
    assert_null(got);
    assert_non_null(strstr(note, "matches auth.certificates[2] and [3], which give different "
                                 "tenants or roles, so it maps to none"));
    assert_null(strstr(note, "tenant b"));
    /* the same identity twice is that identity */
    t[3] = entry(RPC_CERT_SAN_URI, "spiffe://e.org/both", "a", SMP_ROLE_READER);
    assert_int_equal(rpc_auth_cert_find(t, 4, x, &got, NULL, 0), SMP_OK);
    assert_ptr_equal(got, &t[2]);
    X509_free(x);
}

/* 1 when s is well-formed UTF-8 (no sequence cut short, no stray
 * continuation byte). */
static int utf8_ok(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0';) {
        size_t more = *p < 0x80 ? 0 : (*p & 0xE0) == 0xC0 ? 1 : (*p & 0xF0) == 0xE0 ? 2
                    : (*p & 0xF8) == 0xF0 ? 3 : 9;
        if (more == 9) return 0;
        p++;
        for (size_t i = 0; i < more; i++, p++)
            if ((*p & 0xC0) != 0x80) return 0;
    }
    return 1;
}

/* A subject too long for the refusal's sentence is cut at a character,
 * never inside one, and says it was cut: the sentence reaches clients
 * (weightctl prints it, Python decodes it). */
static void test_auth_certificates_long_subject_cut_at_a_character(void **state)
{
    (void)state;
    rpc_auth_cert t[1];
    const rpc_auth_cert *got = NULL;
    char note[512], cn[256] = "x";
    t[0] = entry(RPC_CERT_CN, "team-a", "a", SMP_ROLE_READER);
    for (int i = 0; i < 63; i++) strcat(cn, "\xe2\x82\xac"); /* 64 characters, 190 bytes */
    X509 *x = leaf((const char *const[]){cn, NULL}, NULL);
    assert_int_equal(rpc_auth_cert_find(t, 1, x, &got, note, sizeof(note)), SMP_ENOTFOUND);
    X509_free(x);
    if (!utf8_ok(note)) fail_msg("the note is not UTF-8: %s", note);
    assert_non_null(strstr(note, "(subject CN=x\xe2\x82\xac"));
    assert_non_null(strstr(note, "\xe2\x82\xac...) matches no auth.certificates entry"));
}

static void test_auth_certificates_table_refuses_bad_entries(void **state)
{
    (void)state;
    rpc_auth *a = NULL;
    rpc_auth_cert t[2];
    assert_int_equal(rpc_auth_create(1, NULL, 0, &a), SMP_OK);
    t[0] = entry(RPC_CERT_CN, "x", "a", SMP_ROLE_READER);
    t[1] = entry(RPC_CERT_CN, "x", "b", SMP_ROLE_WRITER);
    assert_int_equal(rpc_auth_set_certificates(a, t, 2), SMP_EINVAL); /* duplicate */
    t[1] = entry(RPC_CERT_CN, "y", "b", SMP_ROLE_NONE);
    assert_int_equal(rpc_auth_set_certificates(a, t, 2), SMP_EINVAL); /* no role */
    t[1] = entry((rpc_cert_match)7, "y", "b", SMP_ROLE_READER);
    assert_int_equal(rpc_auth_set_certificates(a, t, 2), SMP_EINVAL); /* no match kind */
    t[1] = entry(RPC_CERT_SAN_URI, "x", "b", SMP_ROLE_READER);
    assert_int_equal(rpc_auth_set_certificates(a, t, 2), SMP_OK);     /* another kind */
    rpc_auth_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auth_off_by_default_on_loopback),
        cmocka_unit_test(test_auth_refuses_plaintext_token),
        cmocka_unit_test(test_auth_refuses_unknown_role_and_bad_tenant),
        cmocka_unit_test(test_auth_refuses_duplicate_token),
        cmocka_unit_test(test_auth_refuses_non_loopback_listen_without_auth),
        cmocka_unit_test(test_auth_refuses_non_loopback_admin_without_tls),
        cmocka_unit_test(test_auth_refuses_non_loopback_admin_without_auth),
        cmocka_unit_test(test_auth_refuses_incomplete_or_idle_settings),
        cmocka_unit_test(test_auth_table_checks_tokens_by_hash),
        cmocka_unit_test(test_auth_limits_load_with_overrides),
        cmocka_unit_test(test_auth_limits_refuse_bad_keys_and_values),
        cmocka_unit_test(test_auth_limits_buckets_and_quota),
        cmocka_unit_test(test_auth_certificates_load),
        cmocka_unit_test(test_auth_certificates_refuse_bad_entries),
        cmocka_unit_test(test_auth_certificates_need_verified_tls),
        cmocka_unit_test(test_auth_certificates_match_exactly),
        cmocka_unit_test(test_auth_certificates_long_subject_cut_at_a_character),
        cmocka_unit_test(test_auth_certificates_table_refuses_bad_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
