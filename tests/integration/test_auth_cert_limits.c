/* test_auth_cert_limits.c -- auth.limits on connections a client
 * certificate authenticated (auth.certificates), and admins under
 * max_revisions, on a real master's TLS control port (auth_fixture.c's
 * certificates, made by the openssl CLI in the test's directory).
 *
 * The master holds every tenant to 3 live revisions and tenant b to 2, at
 * 5 requests a second (burst 5):
 * - weightctl with b's certificate (no token) runs ls seven times in a row,
 *   then exists and info: its HELLO on each new connection takes from b's
 *   bucket too, and is paced like every call (never answered as if the
 *   connection had no identity): every ls lists both of b's revisions,
 *   exists and info find them, and the refusals did happen (counted in
 *   store_rpc_refused_total);
 * - an admin (the ops-admin certificate, then the admin token) publishes a
 *   fourth revision of tenant ops and one past tenant a's limit: admins are
 *   not limited; tenant a's writer is refused its fourth (SMP_ENOSPC
 *   naming the limit);
 * - weightctl exists / info of tenant a's revision as b: "no" (exit 1) as for
 *   an absent revision, and info's NOT_FOUND names the connection's tenant
 *   b, never "default". */
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

#define LIMITS "  limits:\n    tenant: {max_revisions: 3}\n" \
               "    tenants:\n      b: {max_revisions: 2, rate: 5, burst: 5}\n"

typedef struct fx {
    wr_fixture w;
    char tcp[64];
    char yaml[8192];
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    af_start_certs_with(&f->w, "auth_cert_limits", LIMITS, f->tcp, sizeof(f->tcp), f->yaml,
                        sizeof(f->yaml));
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
    /* stop cleanly (a sanitizer build reports at exit) and fail on a report */
    (void)hx_stop(&f->w.m);
    int reported = hx_log_contains(&f->w.m, "Sanitizer") || hx_log_contains(&f->w.m, "runtime error");
    if (reported) hx_print_log(&f->w.m);
    hx_cleanup(&f->w.m);
    free(f);
    assert_false(reported);
    return 0;
}

/* Run weightctl as certificate name (no token) with args; its output
 * (stdout and stderr) into out; its exit status. */
static int ctl_as(fx *f, const char *name, const char *args, char *out, size_t cap)
{
    char cmd[2048];
    const char *d = f->w.m.dir;
    snprintf(cmd, sizeof(cmd),
             "env -u WEIGHT_TOKEN -u WM_TLS_CA -u WM_TLS_CERT -u WM_TLS_KEY '%s/bin/weightctl' "
             "--master %s --tls-ca '%s/ca.pem' --tls-cert '%s/%s.pem' --tls-key '%s/%s.key' %s 2>&1",
             BUILD_DIR, f->tcp, d, d, name, d, name, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A fresh IMPORT_BEGIN of ns/res/main@1 of the connected tenant (tenant ""
 * = its own): the status. */
static int begin(fx *f, const char *tenant, const char *res)
{
    Wmrpc__ImportBeginRequest req = WMRPC__IMPORT_BEGIN_REQUEST__INIT;
    Wmrpc__WeightIdentity id;
    wr_set_identity(&id, tenant, "ns", res, 1);
    req.identity = &id;
    return wr_call(&f->w, WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_BEGIN, &req.base, NULL, NULL);
}

static double refused(fx *f, const char *reason, const char *tenant)
{
    char series[160];
    snprintf(series, sizeof(series), "store_rpc_refused_total{reason=\"%s\",tenant=\"%s\"}", reason,
             tenant);
    return hx_metric(&f->w.m, series);
}

/* b's certificate: seven weightctl ls in a row over b's rate limit each
 * list both of b's revisions; exists and info find them. */
static void test_cert_rate_limit_keeps_the_identity(void **state)
{
    fx *f = *state;
    char out[8192];
    af_as_cert(&f->w, f->tcp, "b-writer");
    af_publish(&f->w, "b1");
    af_publish(&f->w, "b2");
    wr_disconnect(&f->w);
    for (int k = 0; k < 7; k++) {
        int rc = ctl_as(f, "b-writer", "ls", out, sizeof(out));
        if (rc != 0 || strstr(out, "ns/b1/main") == NULL || strstr(out, "ns/b2/main") == NULL)
            fail_msg("ls run %d (exit %d) does not list b's two revisions:\n%s", k + 1, rc, out);
    }
    for (int k = 0; k < 3; k++) {
        int rc = ctl_as(f, "b-writer", "exists ns/b2/main@1", out, sizeof(out));
        if (rc != 0 || strstr(out, "yes") == NULL) fail_msg("exists (exit %d): %s", rc, out);
        rc = ctl_as(f, "b-writer", "info ns/b2/main@1", out, sizeof(out));
        if (rc != 0 || strstr(out, "b2") == NULL) fail_msg("info (exit %d): %s", rc, out);
    }
    /* the limit did refuse requests: the runs above were paced */
    assert_true(refused(f, "rate", "b") >= 1);
}

/* Admins (certificate and token) are not held to max_revisions; a writer
 * is. */
static void test_admins_not_held_to_max_revisions(void **state)
{
    fx *f = *state;
    af_as_cert(&f->w, f->tcp, "ops-admin");
    for (int i = 0; i < 4; i++) {
        char res[16];
        snprintf(res, sizeof(res), "c%d", i);
        af_publish(&f->w, res); /* asserts that each succeeds */
    }
    /* the admin token too, and into a tenant at its limit */
    af_as(&f->w, AF_A_WRITER); /* a token; the node's data port still wants WM_TLS_CA */
    af_publish(&f->w, "a0");
    af_publish(&f->w, "a1");
    af_publish(&f->w, "a2");
    assert_int_equal(begin(f, "", "a3"), SMP_ENOSPC);
    assert_true(hx_says(f->w.last_error, "tenant a holds 3 live revisions"));
    af_as(&f->w, AF_ADMIN);
    af_publish(&f->w, "t4"); /* ops' fifth */
    assert_int_equal(begin(f, "a", "a3"), 0);
    assert_true(refused(f, "revisions", "ops") == 0);
}

/* As b: tenant a's revision is absent for exists (no, exit 1) and info
 * names b's connection. */
static void test_other_tenant_is_absent_and_named(void **state)
{
    fx *f = *state;
    char out[8192];
    af_as_cert(&f->w, f->tcp, "a-writer");
    af_publish(&f->w, "a1");
    wr_disconnect(&f->w);
    int rc = ctl_as(f, "b-writer", "--tenant a exists ns/a1/main@1", out, sizeof(out));
    if (rc != 1 || strcmp(out, "no\n") != 0) fail_msg("exists --tenant a (exit %d): %s", rc, out);
    rc = ctl_as(f, "b-writer", "exists ns/a1/main@1", out, sizeof(out));
    if (rc != 1 || strcmp(out, "no\n") != 0) fail_msg("exists (exit %d): %s", rc, out);
    rc = ctl_as(f, "b-writer", "info ns/a1/main@1", out, sizeof(out));
    if (rc == 0 || strstr(out, "default") != NULL || strstr(out, "b/ns/a1/main@1") == NULL)
        fail_msg("info (exit %d): %s", rc, out);
    rc = ctl_as(f, "b-writer", "--tenant a info ns/a1/main@1", out, sizeof(out));
    if (rc == 0 || strstr(out, "a/ns/a1/main@1 for this connection of tenant b") == NULL)
        fail_msg("info --tenant a (exit %d): %s", rc, out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cert_rate_limit_keeps_the_identity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_admins_not_held_to_max_revisions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_tenant_is_absent_and_named, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
