/* test_tls.c -- TLS 1.3 on the master's control RPC, with a real master
 * process and certificates made at test time with the openssl CLI in the
 * test's own directory (a CA, a server certificate for 127.0.0.1 it signs,
 * a client certificate, and a second CA nobody uses).
 *
 * A put and a get round trip over TLS (libweightclient's transport, and
 * weightctl with --tls-ca); a plaintext client on the TLS port is refused
 * with a sentence saying the port speaks TLS, and the master keeps serving
 * (and a TLS client at a plaintext port is told that port speaks plaintext);
 * a client that does not trust the master's CA is refused in the handshake;
 * with tls.verify_clients a client without a certificate is refused and one
 * with a certificate of tls.ca is served; a missing certificate file and a
 * key that does not match the certificate stop the master at start with the
 * cause named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "etcd_fixture.h"
#include "harness.h"

typedef struct fx {
    hx_master m;
    char tcp[64];
    char pem[8][400]; /* ca, server cert, server key, client cert, client key, other ca, other key */
} fx;

enum { CA, SRV_CERT, SRV_KEY, CLI_CERT, CLI_KEY, OTHER_CA, OTHER_KEY };

static int sh(const char *cmd)
{
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Make the test's keys and certificates in its directory (hx_make_certs). */
static void make_certs(fx *f)
{
    static const char *names[] = {"ca.pem", "server.pem", "server.key", "client.pem",
                                  "client.key", "other-ca.pem", "other.key"};
    for (int i = 0; i <= OTHER_KEY; i++)
        snprintf(f->pem[i], sizeof(f->pem[i]), "%s/%s", f->m.dir, names[i]);
    assert_int_equal(hx_make_certs(f->m.dir), 0);
}

static void write_tls_config(fx *f, const char *cert, const char *key, const char *ca, int verify)
{
    char extra[2048];
    snprintf(extra, sizeof(extra), "tls:\n  cert: \"%s\"\n  key: \"%s\"\n%s%s%s%s",
             cert, key, ca ? "  ca: \"" : "", ca ? ca : "", ca ? "\"\n" : "",
             verify ? "  verify_clients: true\n" : "");
    assert_int_equal(hx_reconfigure(&f->m, extra), 0);
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    assert_int_equal(hx_init(&f->m, "tls", NULL), 0);
    make_certs(f);
    int port = etcd_fixture_free_port();
    assert_true(port > 0);
    snprintf(f->tcp, sizeof(f->tcp), "127.0.0.1:%d", port);
    snprintf(f->m.listen_tcp, sizeof(f->m.listen_tcp), "%s", f->tcp);
    unsetenv("WM_TLS_CA");
    unsetenv("WM_TLS_CERT");
    unsetenv("WM_TLS_KEY");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    unsetenv("WM_TLS_CA");
    unsetenv("WM_TLS_CERT");
    unsetenv("WM_TLS_KEY");
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

static void start_tls(fx *f, int verify)
{
    write_tls_config(f, f->pem[SRV_CERT], f->pem[SRV_KEY], verify ? f->pem[CA] : NULL, verify);
    assert_int_equal(hx_start(&f->m, 15000), 0);
}

/* A connection to the TCP port with the environment's TLS settings, or
 * NULL with the cause in err. */
static kvc *tcp_client(fx *f, char *err, size_t cap)
{
    kvc *c = NULL;
    err[0] = '\0';
    if (kvc_connect(f->tcp, 10000, &c, err, cap) < 0) return NULL;
    return c;
}

/* put, get (verified), ls over c: 0 when all worked and the bytes match. */
static void round_trip(kvc *c, const char *key)
{
    uint8_t data[100000], back[sizeof(data)];
    uint64_t got = 0;
    for (size_t i = 0; i < sizeof(data); i++) data[i] = (uint8_t)(i * 7 + 3);
    assert_int_equal(kvc_put_bytes(c, key, data, sizeof(data), SMP_DATA_KV, NULL, 0, NULL), SMP_OK);
    assert_int_equal(kvc_get_into(c, key, back, sizeof(back), &got, 1), SMP_OK);
    assert_int_equal(got, sizeof(data));
    assert_memory_equal(back, data, sizeof(data));
}

/* put/get over TLS with libweightclient's transport and with weightctl. */
static void test_tls_round_trip(void **state)
{
    fx *f = *state;
    char err[512], cmd[2048];
    start_tls(f, 0);
    setenv("WM_TLS_CA", f->pem[CA], 1);
    kvc *c = tcp_client(f, err, sizeof(err));
    if (c == NULL) print_error("%s\n", err);
    assert_non_null(c);
    round_trip(c, "tls/one");
    kvc_close(c);
    unsetenv("WM_TLS_CA");
    snprintf(cmd, sizeof(cmd),
             "'%s/bin/weightctl' --master %s --tls-ca '%s' kv ls tls/ > '%s/ls.out' 2>&1 && "
             "grep -q tls/one '%s/ls.out'",
             BUILD_DIR, f->tcp, f->pem[CA], f->m.dir, f->m.dir);
    assert_int_equal(sh(cmd), 0);
}

/* A plaintext client is told the port speaks TLS; the master serves on. */
static void test_plaintext_client_refused(void **state)
{
    fx *f = *state;
    char err[512];
    kvc_object o;
    start_tls(f, 0);
    kvc *c = tcp_client(f, err, sizeof(err)); /* TCP connects; the first call is refused */
    assert_non_null(c);
    assert_int_equal(kvc_get(c, "nothing", &o), SMP_EPROTO);
    assert_true(hx_says(kvc_error(c), "speaks TLS"));
    kvc_close(c);
    assert_true(hx_alive(&f->m));
    /* the master's log names the client and why */
    assert_true(hx_log_contains(&f->m, "store_master: rpc: client 127.0.0.1:"));
    assert_true(hx_log_contains(&f->m, ": refused: it spoke plaintext on the TLS port"));
    setenv("WM_TLS_CA", f->pem[CA], 1);
    c = tcp_client(f, err, sizeof(err));
    assert_non_null(c);
    round_trip(c, "tls/after-plaintext");
    kvc_close(c);
    /* weightctl without --tls-ca says so too, exit 1 */
    unsetenv("WM_TLS_CA");
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "'%s/bin/weightctl' --master %s kv ls > '%s/pl.out' 2>&1; "
             "test $? -ne 0 && grep -q 'speaks TLS' '%s/pl.out'",
             BUILD_DIR, f->tcp, f->m.dir, f->m.dir);
    assert_int_equal(sh(cmd), 0);
}

/* A client set up for TLS (a CA) at a port that speaks plaintext is told
 * so, not given OpenSSL's "wrong version number" alone; the master serves
 * on, and the same client without the CA is served. */
static void test_tls_client_at_a_plaintext_port_is_told_so(void **state)
{
    fx *f = *state;
    char err[512], cmd[1024];
    assert_int_equal(hx_reconfigure(&f->m, ""), 0); /* the TCP port, without tls: */
    assert_int_equal(hx_start(&f->m, 15000), 0);
    setenv("WM_TLS_CA", f->pem[CA], 1);
    assert_null(tcp_client(f, err, sizeof(err)));
    if (!hx_says(err, "answered in plaintext: that port does not speak TLS"))
        fail_msg("the refusal does not say the port speaks plaintext: %s", err);
    assert_true(hx_alive(&f->m));
    snprintf(cmd, sizeof(cmd), "'%s/bin/weightctl' --master %s kv ls > '%s/tp.out' 2>&1; "
             "test $? -ne 0 && grep -q 'does not speak TLS' '%s/tp.out'",
             BUILD_DIR, f->tcp, f->m.dir, f->m.dir);
    assert_int_equal(sh(cmd), 0);
    unsetenv("WM_TLS_CA");
    kvc *c = tcp_client(f, err, sizeof(err));
    assert_non_null(c);
    round_trip(c, "plain/after-tls");
    kvc_close(c);
}

/* A client trusting another CA is refused in the handshake, naming why. */
static void test_client_without_the_ca_refused(void **state)
{
    fx *f = *state;
    char err[512];
    start_tls(f, 0);
    setenv("WM_TLS_CA", f->pem[OTHER_CA], 1);
    assert_null(tcp_client(f, err, sizeof(err)));
    assert_true(hx_says(err, "not trusted"));
    assert_true(hx_alive(&f->m));
    setenv("WM_TLS_CA", f->pem[CA], 1);
    kvc *c = tcp_client(f, err, sizeof(err));
    assert_non_null(c);
    round_trip(c, "tls/after-untrusted");
    kvc_close(c);
}

/* verify_clients: no client certificate refused; one of tls.ca served. */
static void test_client_certificates_when_verified(void **state)
{
    fx *f = *state;
    char err[512];
    kvc_object o;
    start_tls(f, 1);
    setenv("WM_TLS_CA", f->pem[CA], 1);
    kvc *c = tcp_client(f, err, sizeof(err));
    /* TLS 1.3: the server's refusal may arrive with the first read; the
     * error carries the master's alert and says what to give */
    if (c != NULL) {
        assert_true(kvc_get(c, "nothing", &o) < 0);
        snprintf(err, sizeof(err), "%s", kvc_error(c));
        kvc_close(c);
    }
    assert_true(hx_says(err, "alert certificate required (this master verifies clients: give a "
                             "client certificate and its key"));
    assert_true(hx_alive(&f->m));
    setenv("WM_TLS_CERT", f->pem[CLI_CERT], 1);
    setenv("WM_TLS_KEY", f->pem[CLI_KEY], 1);
    c = tcp_client(f, err, sizeof(err));
    if (c == NULL) print_error("%s\n", err);
    assert_non_null(c);
    round_trip(c, "tls/client-cert");
    kvc_close(c);
    assert_true(hx_log_contains(&f->m, "TLS handshake refused"));
}

/* Bad TLS settings stop the master at start, naming the cause. */
static void test_bad_tls_config_refused_at_start(void **state)
{
    fx *f = *state;
    char missing[512];
    snprintf(missing, sizeof(missing), "%s/no-such.pem", f->m.dir);
    write_tls_config(f, missing, f->pem[SRV_KEY], NULL, 0);
    assert_true(hx_run_to_exit(&f->m, 15000) > 0);
    assert_true(hx_log_contains(&f->m, "tls.cert"));
    assert_true(hx_log_contains(&f->m, "No such file"));

    write_tls_config(f, f->pem[SRV_CERT], f->pem[OTHER_KEY], NULL, 0);
    assert_true(hx_run_to_exit(&f->m, 15000) > 0);
    assert_true(hx_log_contains(&f->m, "does not match the certificate"));

    write_tls_config(f, f->pem[SRV_KEY], f->pem[SRV_KEY], NULL, 0); /* a key as the cert */
    assert_true(hx_run_to_exit(&f->m, 15000) > 0);
    assert_true(hx_log_contains(&f->m, "is not a PEM certificate"));

    assert_int_equal(hx_reconfigure(&f->m, "tls:\n  cert: \"/x.pem\"\n"), 0);
    assert_true(hx_run_to_exit(&f->m, 15000) > 0);
    assert_true(hx_log_contains(&f->m, "tls.cert and tls.key are set together"));

    /* No Unix socket: the embedded node dials the TLS port and, without
     * tls.ca, could trust only a self-signed tls.cert -- this one is the
     * test CA's: refused naming it, not a node that never registers. */
    char socket[sizeof(f->m.socket)];
    snprintf(socket, sizeof(socket), "%s", f->m.socket);
    f->m.socket[0] = '\0';
    write_tls_config(f, f->pem[SRV_CERT], f->pem[SRV_KEY], NULL, 0);
    assert_true(hx_run_to_exit(&f->m, 15000) > 0);
    assert_true(hx_log_contains(&f->m, "tls.ca is not set, so the embedded node"));
    assert_true(hx_log_contains(&f->m, "CN=test-ca, not self-signed: set tls.ca"));
    snprintf(f->m.socket, sizeof(f->m.socket), "%s", socket);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tls_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plaintext_client_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_without_the_ca_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tls_client_at_a_plaintext_port_is_told_so, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_client_certificates_when_verified, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_tls_config_refused_at_start, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
