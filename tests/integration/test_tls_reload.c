/* test_tls_reload.c -- SIGHUP serves a renewed certificate without a
 * restart, with a real master, its embedded node, a store_node process and
 * certificates made at test time with the openssl CLI (hx_make_certs, and
 * here a second server certificate of the same CA).
 *
 * The master runs with tls.cert / tls.key of files the test then replaces.
 * After SIGHUP its RPC port, its admin endpoint and its embedded node's
 * data port present the new certificate to new connections (each port's
 * handshake checked for the certificate's SHA-256), while a client
 * connected before keeps working, and the admin endpoint's refusal counts
 * go on; a store_node given --data-tls-cert does
 * the same on its SIGHUP. Files that do not pass the start's checks -- a
 * key that does not match, a key where the certificate belongs, a file
 * gone -- are refused with the cause in the log, and every port keeps
 * presenting the certificate it had; the master and the node serve on.
 * The reload runs the start's checks (host_config_load_tls): a master
 * without a Unix socket, whose embedded node dials its TLS port, refuses a
 * certificate that node would not trust (test_tls refuses one at start). */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "admin_https.h"
#include "etcd_fixture.h"
#include "harness.h"

#define WAIT_MS 15000

typedef struct fx {
    hx_master m;
    char tcp[64];
    int tcp_port;
    char ca[320], live_cert[320], live_key[320];
} fx;

/* A file of the test's directory. */
static void path_of(const fx *f, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", f->m.dir, name);
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    char cmd[2048];
    if (f == NULL) return -1;
    *state = f;
    if (hx_init(&f->m, "tls-reload", NULL) < 0 || hx_make_certs(f->m.dir) < 0) return -1;
    /* next.pem: another certificate of the same CA for 127.0.0.1, valid a
     * day longer than server.pem (hx_make_certs: 2 days); elsewhere.pem:
     * one of the same CA that names only 10.9.9.9 */
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && exec >>certs.log 2>&1 && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=next "
             "  -keyout next.key -out next.csr && "
             "openssl x509 -req -in next.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3 "
             "  -extfile san.ext -out next.pem && "
             "printf 'subjectAltName=IP:10.9.9.9\\n' > elsewhere.ext && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=elsewhere "
             "  -keyout elsewhere.key -out elsewhere.csr && "
             "openssl x509 -req -in elsewhere.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
             "  -days 3 -extfile elsewhere.ext -out elsewhere.pem",
             f->m.dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "openssl failed: %s/certs.log\n", f->m.dir);
        return -1;
    }
    path_of(f, "ca.pem", f->ca, sizeof(f->ca));
    path_of(f, "live.pem", f->live_cert, sizeof(f->live_cert));
    path_of(f, "live.key", f->live_key, sizeof(f->live_key));
    f->tcp_port = etcd_fixture_free_port();
    if (f->tcp_port <= 0) return -1;
    snprintf(f->tcp, sizeof(f->tcp), "127.0.0.1:%d", f->tcp_port);
    snprintf(f->m.listen_tcp, sizeof(f->m.listen_tcp), "%s", f->tcp);
    snprintf(f->m.admin_ca, sizeof(f->m.admin_ca), "%s", f->ca);
    setenv("WM_TLS_CA", f->ca, 1);
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    unsetenv("WM_TLS_CA");
    if (f == NULL) return 0;
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

/* Make the live files (what the config names) copies of the certificate
 * cert and key key of the test's directory, each through a rename, as a
 * certificate manager renews them. */
static void install(const fx *f, const char *cert, const char *key)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && cp '%s' live.pem.new && cp '%s' live.key.new && "
             "mv live.key.new live.key && mv live.pem.new live.pem", f->m.dir, cert, key);
    assert_int_equal(system(cmd), 0);
}

/* The master's store_tls_certificate_expiry_timestamp_seconds for tls.cert
 * is the notAfter of the certificate file name of the test's directory. */
static void expiry_is(fx *f, const char *name)
{
    char path[400];
    path_of(f, name, path, sizeof(path));
    long long want = hx_pem_not_after(path);
    double got = hx_metric(&f->m, "store_tls_certificate_expiry_timestamp_seconds{certificate=\"tls\"}");
    assert_true(want > 0);
    if (got != (double)want) fail_msg("the expiry metric reads %.0f, %s expires at %lld", got, name, want);
}

/* The SHA-256 of the certificate file name of the test's directory. */
static void sha_of(const fx *f, const char *name, char out[65])
{
    char path[400];
    path_of(f, name, path, sizeof(path));
    assert_int_equal(hx_pem_sha256(path, out), 0);
}

/* Wait until port presents the certificate whose SHA-256 is want (a data
 * port takes a reload on its own thread, a moment after the log line). */
static void presents(const fx *f, int port, const char *want, const char *what)
{
    hx_https_opts o = {.ca = f->ca};
    char got[65] = "", err[512] = "";
    for (long long end = hx_now_ms() + 5000;;) {
        if (hx_tls_peer(port, &o, got, err, sizeof(err)) == 0 && strcmp(got, want) == 0) return;
        if (hx_now_ms() >= end) break;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    fail_msg("%s (port %d) presents %s, not %s%s%s", what, port, got[0] ? got : "nothing", want,
             err[0] ? ": " : "", err);
}

/* The port of the data address of key's first memory replica. */
static int data_port_of(kvc *c, const char *key)
{
    kvc_object o;
    assert_int_equal(kvc_get(c, key, &o), SMP_OK);
    assert_true(o.n_replicas >= 1);
    const char *colon = strrchr(o.replicas[0].data_addr, ':');
    assert_non_null(colon);
    return atoi(colon + 1);
}

/* put key (100 kB) through c over the remote transport, and read it back. */
static void round_trip(kvc *c, const char *key)
{
    static uint8_t data[100000], back[sizeof(data)];
    uint64_t got = 0;
    for (size_t i = 0; i < sizeof(data); i++) data[i] = (uint8_t)(i * 7 + (uint8_t)key[0]);
    if (kvc_put_bytes(c, key, data, sizeof(data), SMP_DATA_KV, NULL, 0, NULL) != SMP_OK)
        fail_msg("put %s: %s", key, kvc_error(c));
    if (kvc_get_into(c, key, back, sizeof(back), &got, 1) != SMP_OK)
        fail_msg("get %s: %s", key, kvc_error(c));
    assert_int_equal(got, sizeof(data));
    assert_memory_equal(back, data, sizeof(data));
}

/* A client of the master's TLS port, remote transport (payloads through
 * the node's data port). */
static kvc *tls_client(const fx *f)
{
    kvc *c = NULL;
    char err[512];
    if (kvc_connect(f->tcp, 10000, &c, err, sizeof(err)) < 0) fail_msg("connect: %s", err);
    kvc_set_transport(c, KVC_REMOTE);
    return c;
}

/* Start the master on the live files (the certificate of cert), with
 * tls.ca and an embedded node unless embedded is 0. */
static void start_master(fx *f, const char *cert, const char *key, int embedded)
{
    char extra[2048];
    char cert_path[400], key_path[400];
    path_of(f, cert, cert_path, sizeof(cert_path));
    path_of(f, key, key_path, sizeof(key_path));
    install(f, cert_path, key_path);
    snprintf(extra, sizeof(extra), "tls:\n  cert: \"%s\"\n  key: \"%s\"\n  ca: \"%s\"\n%s",
             f->live_cert, f->live_key, f->ca, embedded ? "" : "node:\n  embedded: false\n");
    assert_int_equal(hx_reconfigure(&f->m, extra), 0);
    assert_int_equal(hx_start(&f->m, WAIT_MS), 0);
}

/* Wait until the file at path says needle at least n times. */
static void wait_said(const char *path, const char *needle, int n)
{
    for (long long end = hx_now_ms() + WAIT_MS; hx_file_count(path, needle) < n;) {
        if (hx_now_ms() >= end) fail_msg("%s does not say \"%s\" %d times", path, needle, n);
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* SIGHUP the master and wait for its log to say needle. */
static void hangup(fx *f, const char *needle)
{
    assert_int_equal(kill(f->m.pid, SIGHUP), 0);
    if (!hx_wait_log(&f->m, needle, WAIT_MS)) {
        hx_print_log(&f->m);
        fail_msg("the master did not log \"%s\" after SIGHUP", needle);
    }
}

/* Renewed on disk and SIGHUPed: the RPC port, the admin endpoint and the
 * embedded node's data port present the new certificate; a client
 * connected before and a new one both put and read back; the admin
 * endpoint still counts the refusal of before; the master is the same
 * process. */
static void test_sighup_serves_the_renewed_certificate_on_every_port(void **state)
{
    fx *f = *state;
    char first[65], next[65];
    sha_of(f, "server.pem", first);
    sha_of(f, "next.pem", next);
    start_master(f, "server.pem", "server.key", 1);
    pid_t pid = f->m.pid;
    kvc *before = tls_client(f);
    round_trip(before, "k/before");
    int data_port = data_port_of(before, "k/before");
    presents(f, f->tcp_port, first, "the RPC port");
    presents(f, f->m.admin_port, first, "the admin endpoint");
    presents(f, data_port, first, "the embedded node's data port");
    expiry_is(f, "server.pem");
    hx_https_opts ho = {.ca = f->ca};
    hx_reply r = hx_https(f->m.admin_port, &ho, "POST", "/metrics", NULL);
    assert_int_equal(r.status, 405); /* counted as a refusal */
    hx_reply_free(&r);

    char next_cert[400], next_key[400];
    path_of(f, "next.pem", next_cert, sizeof(next_cert));
    path_of(f, "next.key", next_key, sizeof(next_key));
    install(f, next_cert, next_key);
    hangup(f, "TLS certificate reloaded from");
    assert_true(hx_log_contains(&f->m, "subject /CN=next"));
    presents(f, f->tcp_port, next, "the RPC port");
    presents(f, f->m.admin_port, next, "the admin endpoint");
    presents(f, data_port, next, "the embedded node's data port");
    expiry_is(f, "next.pem"); /* a day later */

    round_trip(before, "k/after-old-conn"); /* its session stays */
    kvc *after = tls_client(f);
    round_trip(after, "k/after-new-conn");
    kvc_close(after);
    kvc_close(before);
    /* the new admin daemon goes on counting from the old one's */
    assert_true(hx_metric(&f->m, "store_admin_http_refusals_total{reason=\"method\"}") == 1.0);
    assert_int_equal(f->m.pid, pid);
    assert_int_equal(hx_alive(&f->m), 1);
}

/* Files that do not pass are refused with the cause, each port keeps its
 * certificate, and the master serves on: a key of another certificate, a
 * key file where the certificate belongs, a certificate file gone. Then
 * good files are taken. */
static void test_files_that_fail_leave_the_certificate_served(void **state)
{
    fx *f = *state;
    char first[65], next[65], cert[400], key[400];
    sha_of(f, "server.pem", first);
    sha_of(f, "next.pem", next);
    start_master(f, "server.pem", "server.key", 1);
    kvc *c = tls_client(f);
    round_trip(c, "k/0");
    int data_port = data_port_of(c, "k/0");
    static const struct {
        const char *cert, *key, *why;
    } bad[] = {
        {"next.pem", "server.key", "does not match the certificate"},
        {"next.key", "next.key", "is not a PEM certificate"},
        {NULL, NULL, "No such file or directory"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (bad[i].cert != NULL) {
            path_of(f, bad[i].cert, cert, sizeof(cert));
            path_of(f, bad[i].key, key, sizeof(key));
            install(f, cert, key);
        } else {
            assert_int_equal(unlink(f->live_cert), 0);
        }
        assert_int_equal(hx_file_count(f->m.log, "TLS certificate not reloaded"), (int)i);
        assert_int_equal(kill(f->m.pid, SIGHUP), 0);
        wait_said(f->m.log, "TLS certificate not reloaded", (int)i + 1);
        if (!hx_log_contains(&f->m, bad[i].why)) {
            hx_print_log(&f->m);
            fail_msg("bad files %zu: the refusal does not say \"%s\"", i, bad[i].why);
        }
        presents(f, f->tcp_port, first, "the RPC port");
        presents(f, f->m.admin_port, first, "the admin endpoint");
        presents(f, data_port, first, "the embedded node's data port");
        expiry_is(f, "server.pem");
        char k[32];
        snprintf(k, sizeof(k), "k/%zu", i + 1);
        round_trip(c, k);
    }
    assert_false(hx_log_contains(&f->m, "TLS certificate reloaded from"));
    path_of(f, "next.pem", cert, sizeof(cert));
    path_of(f, "next.key", key, sizeof(key));
    install(f, cert, key);
    hangup(f, "TLS certificate reloaded from");
    presents(f, f->tcp_port, next, "the RPC port");
    presents(f, data_port, next, "the embedded node's data port");
    round_trip(c, "k/last");
    kvc_close(c);
}

/* Without a Unix socket the embedded node reaches its master over the TLS
 * port and verifies the certificate it is shown. A renewal to a
 * certificate of the same CA that names another address (a good file the
 * node would refuse, so its next registration would fail) is refused on
 * SIGHUP, naming why; the RPC port keeps the certificate it had, the node
 * stays up and the store serves. A good one is then taken. */
static void test_a_certificate_the_embedded_node_would_refuse_is_not_reloaded(void **state)
{
    fx *f = *state;
    char first[65], next[65], cert[400], key[400];
    sha_of(f, "server.pem", first);
    sha_of(f, "next.pem", next);
    f->m.socket[0] = '\0';
    start_master(f, "server.pem", "server.key", 1); /* its node registered over TLS */
    kvc *c = tls_client(f);
    round_trip(c, "t/0");

    path_of(f, "elsewhere.pem", cert, sizeof(cert));
    path_of(f, "elsewhere.key", key, sizeof(key));
    install(f, cert, key);
    assert_int_equal(kill(f->m.pid, SIGHUP), 0);
    wait_said(f->m.log, "TLS certificate not reloaded", 1);
    if (!hx_log_contains(&f->m, "the embedded node would not trust")) {
        hx_print_log(&f->m);
        fail_msg("the refusal does not say that the embedded node would not trust it");
    }
    presents(f, f->tcp_port, first, "the RPC port");
    expiry_is(f, "server.pem");
    round_trip(c, "t/1");
    assert_int_equal(hx_wait_nodes(&f->m, 1, WAIT_MS), 0);

    path_of(f, "next.pem", cert, sizeof(cert));
    path_of(f, "next.key", key, sizeof(key));
    install(f, cert, key);
    hangup(f, "TLS certificate reloaded from");
    presents(f, f->tcp_port, next, "the RPC port");
    round_trip(c, "t/2");
    kvc *after = tls_client(f);
    round_trip(after, "t/3");
    kvc_close(after);
    kvc_close(c);
}

/* store_node with --data-tls-cert on the live files: its SIGHUP serves the
 * renewed certificate on its data port; a key that does not match is
 * refused, logged, and the port keeps the certificate it had. */
static void test_store_node_sighup_serves_the_renewed_certificate(void **state)
{
    fx *f = *state;
    char first[65], next[65], cert[400], key[400];
    hx_node n;
    sha_of(f, "server.pem", first);
    sha_of(f, "next.pem", next);
    start_master(f, "server.pem", "server.key", 0);
    const char *args[] = {"--data-tls-cert", f->live_cert, "--data-tls-key", f->live_key, NULL};
    assert_int_equal(hx_node_start_args(&f->m, &n, "tls-node", 32ull << 20, args), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 1, WAIT_MS), 0);
    kvc *c = tls_client(f);
    round_trip(c, "n/0");
    int data_port = data_port_of(c, "n/0");
    presents(f, data_port, first, "store_node's data port");

    path_of(f, "next.pem", cert, sizeof(cert));
    path_of(f, "server.key", key, sizeof(key));
    install(f, cert, key);
    assert_int_equal(kill(n.pid, SIGHUP), 0);
    wait_said(n.log, "data port certificate not reloaded", 1);
    assert_true(hx_file_contains(n.log, "does not match the certificate"));
    presents(f, data_port, first, "store_node's data port");
    round_trip(c, "n/1");

    path_of(f, "next.key", key, sizeof(key));
    install(f, cert, key);
    assert_int_equal(kill(n.pid, SIGHUP), 0);
    wait_said(n.log, "data port certificate reloaded from", 1);
    presents(f, data_port, next, "store_node's data port");
    round_trip(c, "n/2");
    kvc_close(c);
    hx_node_kill(&n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sighup_serves_the_renewed_certificate_on_every_port,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_files_that_fail_leave_the_certificate_served, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_store_node_sighup_serves_the_renewed_certificate,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_certificate_the_embedded_node_would_refuse_is_not_reloaded, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
