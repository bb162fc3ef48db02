/* test_admin_tls.c -- the master's admin endpoint over HTTPS and its admin
 * token off loopback (issue 19), with a real master process, certificates
 * made at test time in the test's own directory (hx_make_certs), and the
 * harness's HTTPS client on OpenSSL (admin_https.h: the master's certificate
 * verified for 127.0.0.1 against the test's CA).
 *
 * - HTTPS round trip: /health, /metrics, /role and HEAD over TLS 1.3; a
 *   client trusting another CA is refused in the handshake;
 * - a plaintext HTTP request to the HTTPS port gets no HTTP answer, a client
 *   that speaks at most TLS 1.2 is refused in the handshake, and the master
 *   serves HTTPS on after each; libmicrohttpd's messages about them reach
 *   the master's log prefixed "store_master: admin: " and at most 5 a
 *   minute, the rest summed up in one line (at the stop at the latest);
 * - auth on and the endpoint on a non-loopback address (0.0.0.0): every
 *   path but /health needs an admin's token -- none, another scheme, an
 *   unknown token (401) and a reader's or a writer's token (403) are each
 *   refused with a body saying why; on loopback no token is asked;
 * - POST, PUT and DELETE are answered 405 with Allow: GET, HEAD;
 * - with tls.verify_clients a client without a certificate, or with one
 *   tls.ca did not sign, gets 403 saying so; one of tls.ca is served;
 * - a non-loopback endpoint with auth on and no TLS stops the master (and
 *   `store_master --check`) naming listen.admin, unless auth.allow_insecure;
 *   a missing certificate and a key file that is not PEM stop the master
 *   naming tls.cert and tls.key.
 * Each refusal leaves the master's state as it was (its object count and
 * the RPC requests it counted), and the master serving, and is counted in
 * store_admin_http_refusals_total{reason}. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <openssl/ssl.h>

#include "admin_https.h"
#include "auth_fixture.h"
#include "harness.h"

typedef struct fx {
    hx_master m;
    char ca[300], cert[300], key[300], cli_cert[300], cli_key[300], other_ca[300], other_key[300];
} fx;

/* GET path trusting the test's CA, presenting authz (NULL: none). */
static hx_reply get_as(const fx *f, const char *path, const char *authz)
{
    hx_https_opts o = {.ca = f->ca, .authz = authz};
    return hx_https(f->m.admin_port, &o, "GET", path, NULL);
}

/* 1 when text contains needle (both printed otherwise). */
static int says(const char *text, const char *needle)
{
    return hx_says(text != NULL ? text : "(null)", needle);
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    assert_int_equal(hx_init(&f->m, "admin-tls", NULL), 0);
    assert_int_equal(hx_make_certs(f->m.dir), 0);
    snprintf(f->ca, sizeof(f->ca), "%s/ca.pem", f->m.dir);
    snprintf(f->cert, sizeof(f->cert), "%s/server.pem", f->m.dir);
    snprintf(f->key, sizeof(f->key), "%s/server.key", f->m.dir);
    snprintf(f->cli_cert, sizeof(f->cli_cert), "%s/client.pem", f->m.dir);
    snprintf(f->cli_key, sizeof(f->cli_key), "%s/client.key", f->m.dir);
    snprintf(f->other_ca, sizeof(f->other_ca), "%s/other-ca.pem", f->m.dir);
    snprintf(f->other_key, sizeof(f->other_key), "%s/other.key", f->m.dir);
    setenv("WEIGHT_TOKEN", af_token(AF_ADMIN), 1); /* hx_start's status call, with auth on */
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    unsetenv("WEIGHT_TOKEN");
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

/* Write the config: no embedded node; TLS with cert/key when given (and ca,
 * verify_clients); auth (the fixture's four tokens) when auth; more YAML
 * under auth: in auth_extra; admin on admin_addr (NULL: 127.0.0.1:0). */
static void configure(fx *f, const char *cert, const char *key, int verify, int auth,
                      const char *auth_extra, const char *admin_addr)
{
    char extra[8192], authy[4096] = "";
    snprintf(f->m.listen_admin, sizeof(f->m.listen_admin), "%s",
             admin_addr != NULL ? admin_addr : "");
    if (auth) af_auth_yaml(NULL, auth_extra, authy, sizeof(authy));
    int n = snprintf(extra, sizeof(extra), "node:\n  embedded: false\n%s%s%s%s%s%s%s%s",
                     cert ? "tls:\n  cert: \"" : "", cert ? cert : "", cert ? "\"\n  key: \"" : "",
                     cert ? key : "", cert ? "\"\n" : "",
                     verify ? "  ca: \"" : "", verify ? f->ca : "",
                     verify ? "\"\n  verify_clients: true\n" : "");
    assert_true(n > 0 && (size_t)n < sizeof(extra));
    snprintf(extra + n, sizeof(extra) - (size_t)n, "%s", authy);
    assert_int_equal(hx_reconfigure(&f->m, extra), 0);
}

/* Empty the master's log, so a refusal's line is the next run's own. */
static void fresh_log(const fx *f)
{
    FILE *l = fopen(f->m.log, "w");
    assert_non_null(l);
    fclose(l);
}

static void start(fx *f, const char *cert, const char *key, int verify, int auth,
                  const char *admin_addr)
{
    configure(f, cert, key, verify, auth, NULL, admin_addr);
    snprintf(f->m.admin_ca, sizeof(f->m.admin_ca), "%s", cert != NULL ? f->ca : "");
    assert_int_equal(hx_start(&f->m, 15000), 0);
    assert_true(f->m.admin_port > 0);
}

/* The value of the /metrics line `series`, read as the admin over HTTPS. */
static double metric(const fx *f, const char *series)
{
    char bearer[256];
    snprintf(bearer, sizeof(bearer), "Bearer %s", af_token(AF_ADMIN));
    hx_reply r = get_as(f, "/metrics", bearer);
    double v = -1;
    size_t n = strlen(series);
    assert_int_equal(r.status, 200);
    for (const char *l = r.body; l != NULL && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : "")
        if (strncmp(l, series, n) == 0 && l[n] == ' ') v = strtod(l + n + 1, NULL);
    hx_reply_free(&r);
    return v;
}

/* What a refusal must leave as it was: the RPC requests the master counted
 * and its objects (the admin endpoint changes nothing). */
typedef struct snapshot {
    double requests, objects;
} snapshot;

static snapshot state_of(const fx *f)
{
    snapshot s = {metric(f, "rpc_requests_total"), metric(f, "store_objects{data_type=\"kv\"}")};
    assert_true(s.requests >= 0 && s.objects >= 0);
    return s;
}

/* The master serves on, in the state it had. */
static void assert_unchanged(fx *f, snapshot before)
{
    snapshot after = state_of(f);
    assert_true(hx_alive(&f->m));
    assert_true(before.requests == after.requests && before.objects == after.objects);
}

/* r has status (-1: no HTTP answer) and, when needle is not NULL, its body
 * (its error, for -1) says needle; r is freed. */
static void expect(hx_reply r, int status, const char *needle)
{
    if (r.status != status)
        fail_msg("status %d (%s), expected %d", r.status, r.status < 0 ? r.err : r.body, status);
    if (needle != NULL) assert_true(says(status < 0 ? r.err : r.body, needle));
    hx_reply_free(&r);
}

/* GET path with "Bearer " + who's token. */
static hx_reply get_bearer(const fx *f, const char *path, af_who who)
{
    char bearer[256];
    snprintf(bearer, sizeof(bearer), "Bearer %s", af_token(who));
    return get_as(f, path, bearer);
}

/* /health, /metrics, /role and HEAD over HTTPS, TLS 1.3, verified against
 * the test's CA; a client trusting only another CA fails the handshake. */
static void test_admin_tls_round_trip(void **state)
{
    fx *f = *state;
    start(f, f->cert, f->key, 0, 0, NULL);
    assert_true(hx_log_contains(&f->m, "admin endpoint: HTTPS (TLS 1.3, tls.cert)"));
    hx_reply r = get_as(f, "/health", NULL);
    assert_int_equal(r.version, TLS1_3_VERSION);
    expect(r, 200, "ok");
    expect(get_as(f, "/metrics", NULL), 200, "rpc_requests_total ");
    r = get_as(f, "/role", NULL);
    assert_string_equal(r.body, "active\n");
    expect(r, 200, NULL);
    hx_https_opts o = {.ca = f->ca};
    r = hx_https(f->m.admin_port, &o, "HEAD", "/health", NULL);
    assert_string_equal(r.body, "");
    expect(r, 200, NULL);

    o.ca = f->other_ca;
    expect(hx_https(f->m.admin_port, &o, "GET", "/health", NULL), -1,
           "certificate verify failed");
    assert_true(hx_alive(&f->m));
}

/* What the master's log says of libmicrohttpd's messages: the lines logged
 * ("store_master: admin: " but not a summary), the summaries and the lines
 * they say were left out, and lines that came unprefixed (libmicrohttpd's
 * own "Error: ..."). */
typedef struct mhd_lines {
    int logged, summaries, unprefixed;
    unsigned long long left_out;
} mhd_lines;

static mhd_lines mhd_lines_of(const fx *f)
{
    static const char prefix[] = "store_master: admin: ";
    mhd_lines n = {0, 0, 0, 0};
    char line[2048];
    FILE *l = fopen(f->m.log, "r");
    assert_non_null(l);
    while (fgets(line, sizeof(line), l) != NULL) {
        unsigned long long k;
        if (strncmp(line, "Error", 5) == 0) n.unprefixed++;
        if (strncmp(line, prefix, sizeof(prefix) - 1) != 0) continue;
        if (sscanf(line + sizeof(prefix) - 1, "%llu more message", &k) == 1 &&
            strstr(line, "of libmicrohttpd not logged (at most 5 a minute are)") != NULL) {
            n.summaries++;
            n.left_out += k;
        } else {
            n.logged++;
        }
    }
    fclose(l);
    return n;
}

/* A plaintext request and a TLS 1.2 client get nothing served; the master
 * serves HTTPS on after each. What libmicrohttpd says of them is prefixed
 * and rate-limited: at most 5 lines a minute (however long the test took:
 * 5 per window, a window ending with its summary), every other one counted
 * in a summary, the last at the stop. */
static void test_admin_tls_plaintext_and_tls12_refused(void **state)
{
    fx *f = *state;
    char *body = NULL;
    enum { PLAINTEXT = 12, TLS12 = 4 };
    start(f, f->cert, f->key, 0, 0, NULL);
    snapshot before = state_of(f);
    fresh_log(f);

    f->m.admin_ca[0] = '\0'; /* hx_http_get speaks plain HTTP */
    for (int i = 0; i < PLAINTEXT; i++) {
        assert_int_equal(hx_http_get(&f->m, "/metrics", &body), -1); /* the port speaks TLS */
        free(body);
        body = NULL;
    }
    assert_true(hx_alive(&f->m));

    hx_https_opts o = {.ca = f->ca, .max_version = TLS1_2_VERSION};
    for (int i = 0; i < TLS12; i++)
        expect(hx_https(f->m.admin_port, &o, "GET", "/metrics", NULL), -1, "handshake");
    assert_true(hx_alive(&f->m));

    expect(get_as(f, "/health", NULL), 200, "ok");
    assert_unchanged(f, before);

    mhd_lines n = mhd_lines_of(f);
    assert_int_equal(n.unprefixed, 0);
    assert_false(hx_log_contains(&f->m, "EXTERNAL_LOGGER")); /* installed first, as it must */
    assert_true(n.logged >= 1);
    assert_true(n.logged <= 5 * (n.summaries + 1));
    assert_int_equal(hx_stop(&f->m), 0);
    n = mhd_lines_of(f);
    assert_int_equal(n.unprefixed, 0);
    assert_true(n.summaries >= 1);
    assert_true(n.logged <= 5 * n.summaries);
    /* every refused client left at least one message, logged or counted */
    assert_true((unsigned long long)n.logged + n.left_out >= PLAINTEXT + TLS12);
}

/* Auth on, the endpoint on 0.0.0.0: /health is open, every other path
 * wants an admin's token; each refusal says why and changes nothing. */
static void test_admin_auth_token_off_loopback(void **state)
{
    fx *f = *state;
    start(f, f->cert, f->key, 0, 1, "0.0.0.0:0");
    assert_true(hx_log_contains(&f->m, "an admin token is asked for every path but /health"));
    snapshot before = state_of(f);

    expect(get_as(f, "/health", NULL), 200, "ok");
    static const char *const paths[] = {"/metrics", "/role", "/nothing"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        hx_reply r = get_as(f, paths[i], NULL);
        assert_true(says(r.head, "WWW-Authenticate: Bearer"));
        assert_true(says(r.body, "Authorization: Bearer"));
        expect(r, 401, "needs an admin token");
        expect(get_as(f, paths[i], "Basic b3BzOnNlY3JldA=="), 401, "is not \"Bearer TOKEN\"");
        expect(get_bearer(f, paths[i], AF_WRONG), 401, "the token is not known to this master");
        r = get_bearer(f, paths[i], AF_A_READER);
        assert_true(says(r.body, "needs role admin"));
        expect(r, 403, "the token of tenant a has role reader");
        expect(get_bearer(f, paths[i], AF_A_WRITER), 403, "has role writer");
    }
    hx_reply r = get_bearer(f, "/role", AF_ADMIN);
    assert_string_equal(r.body, "active\n");
    expect(r, 200, NULL);
    assert_unchanged(f, before);
    /* each refusal counted by its reason */
    assert_true(metric(f, "store_admin_http_refusals_total{reason=\"unauthenticated\"}") == 9);
    assert_true(metric(f, "store_admin_http_refusals_total{reason=\"forbidden\"}") == 6);
    assert_true(metric(f, "store_admin_http_refusals_total{reason=\"method\"}") == 0);
}

/* Auth on, the endpoint on loopback: no token is asked. */
static void test_admin_auth_loopback_open(void **state)
{
    fx *f = *state;
    start(f, f->cert, f->key, 0, 1, NULL);
    assert_true(hx_log_contains(&f->m, "no token asked"));
    expect(get_as(f, "/metrics", NULL), 200, "store_rpc_auth_hellos_total");
    /* the harness's own reads speak HTTPS to it (hx_master.admin_ca) */
    assert_true(hx_metric(&f->m, "rpc_requests_total") > 0);
}

/* POST, PUT and DELETE are answered 405 (with Allow), whatever the path
 * and the token, and change nothing. */
static void test_admin_methods_refused(void **state)
{
    fx *f = *state;
    char bearer[256];
    start(f, f->cert, f->key, 0, 1, "0.0.0.0:0");
    snapshot before = state_of(f);
    snprintf(bearer, sizeof(bearer), "Bearer %s", af_token(AF_ADMIN));
    static const char *const methods[] = {"POST", "PUT", "DELETE"};
    for (size_t i = 0; i < 3; i++) {
        hx_https_opts o = {.ca = f->ca, .authz = bearer};
        hx_reply r = hx_https(f->m.admin_port, &o, methods[i], "/metrics", "snapshot=now");
        assert_true(says(r.head, "Allow: GET, HEAD"));
        expect(r, 405, "is not served: this endpoint only reads (GET, HEAD)");
        o.authz = NULL;
        expect(hx_https(f->m.admin_port, &o, methods[i], "/health", NULL), 405, "is not served");
    }
    assert_unchanged(f, before);
    assert_true(metric(f, "store_admin_http_refusals_total{reason=\"method\"}") == 6);
}

/* tls.verify_clients: a certificate of tls.ca is served; none, or one of
 * another CA, gets 403 saying so. */
static void test_admin_tls_verify_clients(void **state)
{
    fx *f = *state;
    start(f, f->cert, f->key, 1, 0, NULL);
    hx_https_opts o = {.ca = f->ca};
    hx_reply r = hx_https(f->m.admin_port, &o, "GET", "/health", NULL);
    assert_true(says(r.body, "none was presented"));
    expect(r, 403, "a client certificate of tls.ca is required");
    o.cert = f->other_ca;
    o.key = f->other_key;
    expect(hx_https(f->m.admin_port, &o, "GET", "/health", NULL), 403,
           "does not verify against tls.ca");
    o.cert = f->cli_cert;
    o.key = f->cli_key;
    expect(hx_https(f->m.admin_port, &o, "GET", "/metrics", NULL), 200,
           "store_admin_http_refusals_total{reason=\"client_cert\"} 2\n");
}

/* store_master --check on the test's config: its exit status, its output
 * in out (cap bytes). */
static int check_config(const fx *f, char *out, size_t cap)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "'%s/bin/store_master' --config '%s' --check > '%s/check.out' 2>&1",
             BUILD_DIR, f->m.config, f->m.dir);
    int rc = system(cmd);
    snprintf(cmd, sizeof(cmd), "%s/check.out", f->m.dir);
    FILE *in = fopen(cmd, "r");
    size_t n = in != NULL ? fread(out, 1, cap - 1, in) : 0;
    out[n] = '\0';
    if (in != NULL) fclose(in);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Auth on, a non-loopback endpoint without TLS: refused at start and by
 * --check, naming listen.admin; auth.allow_insecure lets it start, and the
 * token is still asked (over plain HTTP). */
static void test_admin_auth_without_tls_refused(void **state)
{
    fx *f = *state;
    char out[4096], *body = NULL;
    configure(f, NULL, NULL, 0, 1, NULL, "0.0.0.0:0");
    assert_int_not_equal(hx_run_to_exit(&f->m, 15000), 0);
    assert_true(hx_log_contains(&f->m, "listen.admin: 0.0.0.0:0 is not a loopback address and "
                                       "tls.cert is not set"));
    assert_int_not_equal(check_config(f, out, sizeof(out)), 0);
    assert_true(says(out, "listen.admin: 0.0.0.0:0 is not a loopback address"));
    assert_true(says(out, "auth.allow_insecure: true"));

    configure(f, NULL, NULL, 0, 1, "  allow_insecure: true\n", "0.0.0.0:0");
    fresh_log(f);
    assert_int_equal(check_config(f, out, sizeof(out)), 0);
    assert_int_equal(hx_start(&f->m, 15000), 0);
    assert_true(hx_log_contains(&f->m, "admin endpoint: plain HTTP; an admin token is asked"));
    assert_int_equal(hx_http_get(&f->m, "/metrics", &body), 401);
    assert_true(says(body, "needs an admin token"));
    free(body);
    body = NULL;
    assert_int_equal(hx_http_get(&f->m, "/health", &body), 200);
    free(body);
}

/* A missing certificate and a key file that is not PEM stop the master at
 * start, naming the key. */
static void test_admin_tls_bad_files_stop_master(void **state)
{
    fx *f = *state;
    char missing[450], garbage[450];
    snprintf(missing, sizeof(missing), "%s/nothing.pem", f->m.dir);
    snprintf(garbage, sizeof(garbage), "%s/config.yaml", f->m.dir);
    configure(f, missing, f->key, 0, 1, NULL, "0.0.0.0:0");
    assert_int_not_equal(hx_run_to_exit(&f->m, 15000), 0);
    assert_true(hx_log_contains(&f->m, "tls.cert"));
    assert_true(hx_log_contains(&f->m, "nothing.pem"));
    configure(f, f->cert, garbage, 0, 1, NULL, "0.0.0.0:0");
    fresh_log(f);
    assert_int_not_equal(hx_run_to_exit(&f->m, 15000), 0);
    assert_true(hx_log_contains(&f->m, "tls.key"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_admin_tls_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_admin_tls_plaintext_and_tls12_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_admin_auth_token_off_loopback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_admin_auth_loopback_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_admin_methods_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_admin_tls_verify_clients, setup, teardown),
        cmocka_unit_test_setup_teardown(test_admin_auth_without_tls_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_admin_tls_bad_files_stop_master, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
