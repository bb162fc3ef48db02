/* test_auth_config.c -- the auth section of the master's config
 * (host_shim/config.c) and the credential table it feeds (rpc/rpc_auth.c).
 *
 * Every bad auth config named by issue 19 is refused with one message naming
 * the key and the cause, and the config comes back zeroed (nothing half
 * applied): a plaintext token, a hash that is not 64 hex digits, an unknown
 * role, a bad tenant, a duplicate token, auth on without tokens or without
 * the embedded node's token file, auth keys while auth is off, and listen.tcp
 * on a non-loopback address with auth off unless auth.allow_insecure. The
 * credential table finds a token by its SHA-256 and nothing else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "rpc_auth.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auth_off_by_default_on_loopback),
        cmocka_unit_test(test_auth_refuses_plaintext_token),
        cmocka_unit_test(test_auth_refuses_unknown_role_and_bad_tenant),
        cmocka_unit_test(test_auth_refuses_duplicate_token),
        cmocka_unit_test(test_auth_refuses_non_loopback_listen_without_auth),
        cmocka_unit_test(test_auth_refuses_incomplete_or_idle_settings),
        cmocka_unit_test(test_auth_table_checks_tokens_by_hash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
