/* test_ha_etcd_tls.c -- HA on an etcd that speaks only TLS.
 *
 * A real etcd (etcd_fixture_start_tls) serves its client port with a
 * certificate for 127.0.0.1 signed by a CA the test makes, and asks every
 * client for a certificate that CA signed (--client-cert-auth). The
 * project's etcd client, given the CA and a client certificate, reads and
 * writes; without TLS, without a certificate, or trusting another CA, it
 * is refused and says so. Three masters configured with ha.etcd_tls_ca,
 * ha.etcd_tls_cert and ha.etcd_tls_key elect a leader, serve writes and
 * fail over with none lost; a master etcd does not accept (in plaintext,
 * without a certificate, trusting another CA) does not lead, says why it
 * waits, and stops cleanly. With etcd's auth on, masters known by their
 * certificate are kept to their prefix; masters and the client given a
 * user and its password (ha.etcd_user, ha.etcd_password_file) authenticate,
 * and again whenever etcd no longer takes their token (a simple token etcd
 * forgot, a JWT older than a change of roles), reading the file again each
 * time: a password rotated while they serve needs no restart. Masters
 * renew their etcd client certificate on SIGHUP. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "admin_https.h"
#include "etcd_client.h"
#include "etcd_fixture.h"
#include "ha_cluster_fixture.h"
#include "harness.h"
#include "kv_client.h"
#include "store_plugin.h"

#define WAIT_MS 20000

static char err[1024];

/* -- the client ------------------------------------------------------------ */

static int etcd_setup(void **state)
{
    static etcd_fixture f;
    if (etcd_fixture_start_tls(&f, "etcd-tls", 1, WAIT_MS, 1) < 0) return -1;
    *state = &f;
    return 0;
}

static int etcd_teardown(void **state)
{
    etcd_fixture_cleanup(*state);
    return 0;
}

/* A file of the fixture's certificates, read (caller frees). */
static char *cert_file(const etcd_fixture *f, const char *name)
{
    char path[400];
    size_t len = 0;
    snprintf(path, sizeof(path), "%s/%s", f->certs, name);
    char *pem = (char *)hx_read_file(path, &len);
    assert_non_null(pem);
    return pem;
}

/* A put through a client of o: its code, err saying why. */
static int put_with(const etcd_client_options *o)
{
    etcd_client *c = NULL;
    int64_t rev = 0;
    assert_int_equal(etcd_client_open(o, &c, err, sizeof(err)), 0);
    int rc = etcd_put(c, "tls/k", 5, "v", 1, 0, &rev, err, sizeof(err));
    etcd_client_close(c);
    return rc;
}

/* With the CA and a client certificate it signed: puts, reads, and asks
 * a member for its status over TLS. */
static void test_a_client_with_its_certificate_reads_and_writes(void **state)
{
    etcd_fixture *f = *state;
    etcd_client_options o = {.endpoints = etcd_fixture_endpoints(f), .timeout_ms = 2000};
    etcd_fixture_client_tls(f, &o);
    etcd_client *c = NULL;
    int64_t rev = 0;
    etcd_range_result r;
    etcd_member_status st;
    assert_int_equal(etcd_client_open(&o, &c, err, sizeof(err)), 0);
    assert_int_equal(etcd_put(c, "tls/a", 5, "over tls", 8, 0, &rev, err, sizeof(err)), 0);
    assert_int_equal(etcd_range(c, "tls/a", 5, NULL, 0, 0, 0, 0, &r, err, sizeof(err)), 0);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.kvs[0].value_len, 8);
    assert_memory_equal(r.kvs[0].value, "over tls", 8);
    etcd_range_result_free(&r);
    assert_int_equal(etcd_member_status_get(c, etcd_fixture_endpoint(f, 0), &st, err, sizeof(err)), 0);
    assert_true(st.leader_id != 0);
    etcd_client_close(c);
}

/* Plaintext, TLS without a client certificate, and TLS trusting a CA that
 * did not sign the member's certificate: each put fails as a transport
 * error (SMP_EIO, no member answered), naming the member and how the
 * client tried to reach it. */
static void test_a_client_etcd_does_not_accept_is_refused(void **state)
{
    etcd_fixture *f = *state;
    char *other = cert_file(f, "other-ca.pem");
    etcd_client_options plain = {.endpoints = etcd_fixture_endpoints(f), .timeout_ms = 1000};
    etcd_client_options no_cert = plain, other_ca = plain;
    no_cert.tls_ca_pem = f->tls_pem[0];
    etcd_fixture_client_tls(f, &other_ca);
    other_ca.tls_ca_pem = other;
    const etcd_client_options *cases[] = {&plain, &no_cert, &other_ca};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(put_with(cases[i]), SMP_EIO);
        assert_non_null(strstr(err, etcd_fixture_endpoint(f, 0)));
        assert_non_null(strstr(err, i == 0 ? "no connection to the member in plaintext"
                                           : "no connection to the member over TLS"));
    }
    free(other);
}

/* What a writer thread of the reload test does: puts until stop. */
typedef struct reload_writer {
    etcd_client *c;
    int id;
    _Atomic int *stop;
    int puts, failed;
    char why[256];
} reload_writer;

static void *reload_writer_main(void *arg)
{
    reload_writer *w = arg;
    char key[32], why[256];
    while (!atomic_load(w->stop)) {
        snprintf(key, sizeof(key), "tls/reload/%d/%d", w->id, w->puts % 16);
        if (etcd_put(w->c, key, strlen(key), "v", 1, 0, NULL, why, sizeof(why)) == 0) {
            w->puts++;
        } else if (w->failed++ == 0) {
            snprintf(w->why, sizeof(w->why), "%s", why);
        }
    }
    return NULL;
}

/* Renewed TLS files handed to a client while calls run: four threads put
 * without a pause, a watch stays open, and the client takes the same files
 * again 30 times, each a new set of channels while calls hold the old
 * ones. Every put succeeds, the watch made before the first reload still
 * delivers the puts made after the last, and a plaintext client is refused
 * a reload (SMP_EINVAL). Under ASan this is where a channel freed under a
 * call would show. */
static void test_a_client_takes_renewed_tls_files_while_calls_run(void **state)
{
    etcd_fixture *f = *state;
    etcd_client_options o = {.endpoints = etcd_fixture_endpoints(f), .timeout_ms = 5000};
    etcd_fixture_client_tls(f, &o);
    etcd_client *c = NULL;
    etcd_watch *w = NULL;
    _Atomic int stop = 0;
    reload_writer writers[4];
    pthread_t th[4];
    assert_int_equal(etcd_client_open(&o, &c, err, sizeof(err)), 0);
    assert_int_equal(etcd_watch_open(c, "tls/reload/w", 12, NULL, 0, 0, &w, err, sizeof(err)), 0);
    for (int i = 0; i < 4; i++) {
        writers[i] = (reload_writer){.c = c, .id = i, .stop = &stop};
        assert_int_equal(pthread_create(&th[i], NULL, reload_writer_main, &writers[i]), 0);
    }
    for (int i = 0; i < 30; i++) {
        if (etcd_client_reload_tls(c, o.tls_ca_pem, o.tls_cert_pem, o.tls_key_pem, err,
                                   sizeof(err)) != 0)
            fail_msg("reload %d: %s", i, err);
        usleep(20 * 1000);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        if (writers[i].failed) fail_msg("writer %d: %d puts failed: %s", i, writers[i].failed, writers[i].why);
        assert_true(writers[i].puts > 0);
    }
    assert_int_equal(etcd_put(c, "tls/reload/w", 12, "after", 5, 0, NULL, err, sizeof(err)), 0);
    etcd_watch_batch b = {0};
    assert_int_equal(etcd_watch_next(w, 5000, &b, err, sizeof(err)), 1);
    assert_true(b.n >= 1);
    etcd_watch_batch_free(&b);
    etcd_watch_close(w);
    etcd_client_close(c);

    etcd_client_options plain = {.endpoints = etcd_fixture_endpoints(f), .timeout_ms = 1000};
    assert_int_equal(etcd_client_open(&plain, &c, err, sizeof(err)), 0);
    assert_int_equal(etcd_client_reload_tls(c, o.tls_ca_pem, NULL, NULL, err, sizeof(err)),
                     SMP_EINVAL);
    assert_non_null(strstr(err, "plaintext"));
    etcd_client_close(c);
}

/* A client certificate without its key, or either without a CA, is
 * refused at open (SMP_EINVAL), before any call. */
static void test_a_client_certificate_needs_its_key_and_a_ca(void **state)
{
    etcd_fixture *f = *state;
    etcd_client *c = NULL;
    etcd_client_options o = {.endpoints = etcd_fixture_endpoints(f)};
    etcd_fixture_client_tls(f, &o);
    etcd_client_options no_key = o, no_cert = o, no_ca = o;
    no_key.tls_key_pem = NULL;
    no_cert.tls_cert_pem = NULL;
    no_ca.tls_ca_pem = NULL;
    const etcd_client_options *cases[] = {&no_key, &no_cert, &no_ca};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(etcd_client_open(cases[i], &c, err, sizeof(err)), SMP_EINVAL);
        assert_null(c);
        assert_non_null(strstr(err, "a client certificate needs its key and a CA"));
    }
}

/* -- the masters ------------------------------------------------------------ */

static int cluster_setup(void **state)
{
    hc_cluster *c = calloc(1, sizeof(*c));
    if (c == NULL || hc_init_tls(c, "etcd-tls-ha", 1, 1) < 0) {
        free(c);
        return -1;
    }
    *state = c;
    return 0;
}

static int cluster_teardown(void **state)
{
    hc_cleanup(*state);
    free(*state);
    return 0;
}

/* Master i's config: HA on the TLS etcd, trusting the fixture's CA file
 * ca (NULL: no TLS to etcd), presenting the client certificate when
 * with_cert, then more (YAML; ha: keys first, indented; may be NULL). */
static void configure_more(hc_cluster *c, int i, const char *ca, int with_cert, const char *more)
{
    char extra[2000] = "";
    int n = 0;
    if (ca != NULL)
        n = snprintf(extra, sizeof(extra), "  etcd_tls_ca: \"%s/%s\"\n", c->etcd.certs, ca);
    if (with_cert)
        n += snprintf(extra + n, sizeof(extra) - (size_t)n,
                      "  etcd_tls_cert: \"%s/client.pem\"\n  etcd_tls_key: \"%s/client.key\"\n",
                      c->etcd.certs, c->etcd.certs);
    snprintf(extra + n, sizeof(extra) - (size_t)n, "%s", more ? more : "");
    assert_int_equal(hc_configure(c, i, extra), 0);
}

static void configure(hc_cluster *c, int i, const char *ca, int with_cert)
{
    configure_more(c, i, ca, with_cert, NULL);
}

/* Bytes of object i of the test. */
static void fill(uint8_t *buf, size_t len, int i)
{
    for (size_t k = 0; k < len; k++) buf[k] = (uint8_t)(k * 7 + (size_t)i * 13);
}

#define OBJ_LEN 3000

/* Put (or, with check, read back byte for byte) objects prefix/0..n-1. */
static void objects(kvc *k, const char *prefix, int n, int check)
{
    uint8_t want[OBJ_LEN];
    char key[64];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s/%02d", prefix, i);
        fill(want, OBJ_LEN, i);
        if (check)
            assert_int_equal(hx_reads_back(k, key, want, OBJ_LEN), 0);
        else if (kvc_put_bytes(k, key, want, OBJ_LEN, SMP_DATA_KV, NULL, 0, NULL) != 0)
            fail_msg("put %s: %s", key, kvc_error(k));
    }
}

/* The one leader of the masters started, once node (started here) has
 * registered with it. */
static int leader_with_node(hc_cluster *c, const char *node)
{
    int leader = hc_wait_leader(c, -1, WAIT_MS);
    assert_true(leader >= 0);
    assert_int_equal(hc_node_start(c, node, 32ull << 20), 0);
    assert_int_equal(hc_wait_node(c, leader, WAIT_MS), 0);
    return leader;
}

/* Put objects prefix/0..19 through a client of master i. */
static void put_through(hc_cluster *c, int i, const char *prefix)
{
    kvc *k = hx_client(&c->m[i]);
    assert_non_null(k);
    objects(k, prefix, 20, 0);
    kvc_close(k);
}

/* SIGKILL the leader; a client of the next one, once the node follows it. */
static kvc *fail_over(hc_cluster *c, int leader)
{
    hx_kill(&c->m[leader]);
    int next = hc_wait_leader(c, leader, WAIT_MS);
    assert_true(next >= 0);
    assert_int_equal(hc_wait_node(c, next, WAIT_MS), 0);
    kvc *k = hx_client(&c->m[next]);
    assert_non_null(k);
    return k;
}

/* Three masters with the CA and the client certificate: one leads, the
 * others stand by; writes acknowledged by the leader (through the node)
 * are all there after it is SIGKILLed and a standby leads, which takes
 * writes in turn. Every OpLog record, lease, election and registry read
 * went over TLS: etcd serves nothing else. */
static void test_masters_lead_and_fail_over_on_a_tls_etcd(void **state)
{
    hc_cluster *c = *state;
    for (int i = 0; i < HC_MASTERS; i++) {
        configure(c, i, "ca.pem", 1);
        if (hx_start(&c->m[i], WAIT_MS) < 0) fail_msg("master %d did not start", i);
    }
    int leader = leader_with_node(c, "node-tls");
    put_through(c, leader, "kv/tls");
    kvc *k = fail_over(c, leader);
    objects(k, "kv/tls", 20, 1);
    objects(k, "kv/tls/after", 1, 0);
    kvc_close(k);
}

/* A master etcd does not accept -- in plaintext, over TLS without a client
 * certificate, or trusting a CA that did not sign etcd's certificate --
 * never leads: it waits for etcd, saying how it tried and that no
 * connection came of it (and, from gRPC's log, why the handshake was
 * refused), and stops cleanly (exit 0) when told to. The three masters
 * wait side by side. */
static void test_a_master_etcd_does_not_accept_waits_and_says_why(void **state)
{
    hc_cluster *c = *state;
    static const char *const said[HC_MASTERS] = {"no connection to the member in plaintext",
                                                 "no connection to the member over TLS",
                                                 "no connection to the member over TLS"};
    /* gRPC's lines, through the etcd client's: etcd refused the handshake
     * of a client without a certificate; the master refused etcd's */
    static const char *const cause[HC_MASTERS] = {
        NULL, "etcd client: gRPC E: error:0A000412:SSL routines::sslv3 alert bad certificate",
        "etcd client: gRPC E: Handshake failed with fatal error SSL_ERROR_SSL: "
        "error:0A000086:SSL routines::certificate verify failed"};
    configure(c, 0, NULL, 0);
    configure(c, 1, "ca.pem", 0);
    configure(c, 2, "other-ca.pem", 1);
    for (int i = 0; i < HC_MASTERS; i++) assert_int_equal(hx_spawn(&c->m[i]), 0);
    int waiting[HC_MASTERS] = {0, 0, 0};
    for (long long end = hx_now_ms() + WAIT_MS; hx_now_ms() < end;) {
        int all = 1;
        for (int i = 0; i < HC_MASTERS; i++)
            all &= waiting[i] = waiting[i] || hx_log_contains(&c->m[i], said[i]);
        if (all) break;
        usleep(50 * 1000);
    }
    for (int i = 0; i < HC_MASTERS; i++) {
        if (!waiting[i]) {
            hx_print_log(&c->m[i]);
            fail_msg("master %d did not say \"%s\"", i, said[i]);
        }
        assert_true(hx_log_contains(&c->m[i], "ha: waiting for etcd to answer"));
        assert_int_equal(hx_stop(&c->m[i]), 0);
        assert_true(hx_log_contains(&c->m[i], "store_master: ha: stopped while waiting for etcd"));
        assert_false(hx_log_contains(&c->m[i], "leader"));
        if (cause[i] != NULL && !hx_log_contains(&c->m[i], cause[i])) {
            hx_print_log(&c->m[i]);
            fail_msg("master %d's log does not name the cause \"%s\"", i, cause[i]);
        }
    }
}

/* 0 once etcd's history below the masters' first writes is compacted (a
 * read of the cluster's log head at revision 2 is SMP_ERANGE), through a
 * client with the masters' certificate, putting small objects through k
 * meanwhile: a compaction comes a snapshot after the deletion it reaches,
 * and snapshots come with records; -1 after WAIT_MS. */
static int wait_compacted(hc_cluster *c, kvc *k)
{
    etcd_client_options o = {.endpoints = etcd_fixture_endpoints(&c->etcd), .timeout_ms = 2000};
    etcd_fixture_client_tls(&c->etcd, &o);
    etcd_client *ec = NULL;
    char head[128];
    int rc = -1, got = -1;
    snprintf(head, sizeof(head), "%slog_head", c->prefix);
    if (etcd_client_open(&o, &ec, err, sizeof(err)) < 0) return -1;
    for (long long end = hx_now_ms() + WAIT_MS; rc < 0 && hx_now_ms() < end;) {
        etcd_range_result r;
        got = etcd_range(ec, head, strlen(head), NULL, 0, 0, 2, 1, &r, err, sizeof(err));
        if (got == 0) etcd_range_result_free(&r);
        if (got == SMP_ERANGE) {
            rc = 0;
        } else {
            char key[48];
            snprintf(key, sizeof(key), "kv/rbac/more/%lld", hx_now_ms());
            (void)kvc_put_bytes(k, key, "more", 4, SMP_DATA_KV, NULL, 0, NULL);
            usleep(100 * 1000);
        }
    }
    if (rc < 0)
        fprintf(stderr, "wait_compacted: revision 2 of %s %s\n", head,
                got == 0 ? "is still readable" : err);
    etcd_client_close(ec);
    return rc;
}

/* etcd's auth on, the masters known by their certificate: etcd takes the
 * client certificate's CN (client) as the user, whose only role reads and
 * writes the cluster's prefix. Two masters lead and fail over as before
 * (leases, the OpLog, its watch, the registry), and the leader's snapshots
 * let it delete the records below them and compact etcd's history (a
 * revision read at the start is compacted away); a third master,
 * configured with a prefix outside the role, is refused at its start (exit
 * 1), naming the key etcd would not let it read, ha.prefix and the
 * permission. */
static void test_etcd_rbac_by_certificate_keeps_masters_to_their_prefix(void **state)
{
    hc_cluster *c = *state;
    char grant[256], refused[512];
    snprintf(grant, sizeof(grant), "role grant-permission wm readwrite '%s' --prefix=true",
             c->prefix);
    const char *steps[] = {"user add root --new-user-password=root-of-the-test",
                           "user add client --new-user-password=unused-the-cn-is-enough",
                           "role add wm", grant, "user grant-role client wm", "auth enable"};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
        if (etcd_fixture_etcdctl(&c->etcd, NULL, steps[i]) < 0)
            fail_msg("etcdctl %s failed (%s/etcdctl.log)", steps[i], c->etcd.dir);
    for (int i = 0; i < 2; i++) {
        configure_more(c, i, "ca.pem", 1, "  gc_keep_records: 0\nsnapshot:\n  every_records: 4\n");
        if (hx_start(&c->m[i], WAIT_MS) < 0) fail_msg("master %d did not start", i);
    }
    int leader = leader_with_node(c, "node-rbac");
    kvc *k = hx_client(&c->m[leader]);
    assert_non_null(k);
    objects(k, "kv/rbac", 20, 0);
    assert_int_equal(wait_compacted(c, k), 0);
    kvc_close(k);
    k = fail_over(c, leader);
    objects(k, "kv/rbac", 20, 1);
    kvc_close(k);

    char own[sizeof(c->prefix)];
    snprintf(own, sizeof(own), "%s", c->prefix);
    snprintf(c->prefix, sizeof(c->prefix), "/elsewhere/");
    configure(c, 2, "ca.pem", 1);
    snprintf(c->prefix, sizeof(c->prefix), "%s", own);
    snprintf(refused, sizeof(refused),
             "store_master: ha: etcd refused to read /elsewhere/log_head (under ha.prefix "
             "/elsewhere/; with etcd's auth on, this master's user needs read and write on that "
             "prefix): etcd %s /etcdserverpb.KV/Range: gRPC status 7 (PERMISSION_DENIED): "
             "etcdserver: permission denied", etcd_fixture_endpoint(&c->etcd, 0));
    assert_int_equal(hx_run_to_exit(&c->m[2], WAIT_MS), 1);
    if (!hx_log_contains(&c->m[2], refused)) {
        hx_print_log(&c->m[2]);
        fail_msg("master 2 did not say: %s", refused);
    }
}

/* Masters 0 and 1 report the notAfter of the certificate file name (of
 * the fixture's directory) as the expiry of the one they present to etcd. */
static void etcd_cert_expiry_is(hc_cluster *c, const char *name)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/%s", c->etcd.certs, name);
    long long want = hx_pem_not_after(path);
    assert_true(want > 0);
    for (int i = 0; i < 2; i++) {
        double got = hx_metric(&c->m[i], "store_tls_certificate_expiry_timestamp_seconds"
                                          "{certificate=\"etcd\"}");
        if (got != (double)want)
            fail_msg("master %d: the etcd certificate's expiry reads %.0f, %s's is %lld", i, got,
                     name, want);
    }
}

/* The masters' etcd client certificate renewed while they serve, etcd's
 * auth on and a certificate's CN its user: the files ha.etcd_tls_cert and
 * _key name hold user client's certificate, then are replaced by one of
 * user client2 (the same role) and both masters get SIGHUP, each saying it
 * reloaded them, and their expiry metric follows. Before that, client2's
 * certificate beside client's key is refused on SIGHUP, naming the cause,
 * and the masters go on with what they had. User client is then
 * deleted from etcd, so that only the
 * new certificate is let in: the leader takes writes, and once it is
 * SIGKILLed the standby leads with every write there and takes more,
 * neither restarted. Without the reload the writes after the deletion are
 * refused. */
static void test_masters_renew_their_etcd_certificate_on_sighup(void **state)
{
    hc_cluster *c = *state;
    char grant[256], cmd[2048], more[1024];
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && exec >>renew.log 2>&1 && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=client2 "
             "  -keyout client2.key -out client2.csr && "
             "openssl x509 -req -in client2.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3 "
             "  -out client2.pem && cp client.pem live.pem && cp client.key live.key",
             c->etcd.certs);
    assert_int_equal(system(cmd), 0);
    snprintf(grant, sizeof(grant), "role grant-permission wm readwrite '%s' --prefix=true",
             c->prefix);
    const char *steps[] = {"user add root --new-user-password=root-of-the-test",
                           "user add client --new-user-password=unused-the-cn-is-enough",
                           "user add client2 --new-user-password=unused-the-cn-is-enough",
                           "role add wm", grant, "user grant-role client wm",
                           "user grant-role client2 wm", "auth enable"};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
        if (etcd_fixture_etcdctl(&c->etcd, NULL, steps[i]) < 0)
            fail_msg("etcdctl %s failed (%s/etcdctl.log)", steps[i], c->etcd.dir);
    snprintf(more, sizeof(more), "  etcd_tls_cert: \"%s/live.pem\"\n  etcd_tls_key: \"%s/live.key\"\n",
             c->etcd.certs, c->etcd.certs);
    pid_t pids[2];
    for (int i = 0; i < 2; i++) {
        configure_more(c, i, "ca.pem", 0, more);
        if (hx_start(&c->m[i], WAIT_MS) < 0) fail_msg("master %d did not start", i);
        pids[i] = c->m[i].pid;
    }
    int leader = leader_with_node(c, "node-renew");
    put_through(c, leader, "kv/renew");
    etcd_cert_expiry_is(c, "client.pem");

    /* client2's certificate with client's key: refused, nothing changes */
    snprintf(cmd, sizeof(cmd), "cd '%s' && cp client2.pem live.pem.new && mv live.pem.new live.pem",
             c->etcd.certs);
    assert_int_equal(system(cmd), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(kill(c->m[i].pid, SIGHUP), 0);
        if (!hx_wait_log(&c->m[i], "SIGHUP: etcd TLS files not reloaded, the ones loaded before "
                                   "serve on", WAIT_MS) ||
            !hx_log_contains(&c->m[i], "ha.etcd_tls_cert: TLS client certificate")) {
            hx_print_log(&c->m[i]);
            fail_msg("master %d did not refuse a certificate with another's key", i);
        }
        assert_false(hx_log_contains(&c->m[i], "SIGHUP: etcd TLS files reloaded"));
    }
    etcd_cert_expiry_is(c, "client.pem");
    put_through(c, leader, "kv/renew/refused");

    snprintf(cmd, sizeof(cmd),
             "cd '%s' && cp client2.pem live.pem.new && cp client2.key live.key.new && "
             "mv live.key.new live.key && mv live.pem.new live.pem", c->etcd.certs);
    assert_int_equal(system(cmd), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(kill(c->m[i].pid, SIGHUP), 0);
        if (!hx_wait_log(&c->m[i], "SIGHUP: etcd TLS files reloaded", WAIT_MS)) {
            hx_print_log(&c->m[i]);
            fail_msg("master %d did not reload its etcd TLS files", i);
        }
    }
    etcd_cert_expiry_is(c, "client2.pem"); /* a day later */
    assert_int_equal(etcd_fixture_etcdctl(&c->etcd, "root:root-of-the-test", "user delete client"), 0);
    put_through(c, leader, "kv/renew/after");
    kvc *k = fail_over(c, leader);
    int next = 1 - leader;
    assert_int_equal(c->m[next].pid, pids[next]);
    objects(k, "kv/renew", 20, 1);
    objects(k, "kv/renew/after", 20, 1);
    objects(k, "kv/renew/refused", 20, 1);
    objects(k, "kv/renew/next", 20, 0);
    kvc_close(k);
}

/* -- password auth ------------------------------------------------------------ */

#define PW_USER "wm"
#define PW_SECRET "the-masters-password"

/* SIGKILL c's one etcd member and start it again. 0 or -1. */
static int restart_etcd(hc_cluster *c)
{
    if (etcd_fixture_kill(&c->etcd, 0) < 0) return -1;
    return etcd_fixture_restart(&c->etcd, 0, WAIT_MS);
}

/* A TLS etcd that asks for no client certificate, its auth on: user root,
 * and user wm (password PW_SECRET, in <certs>/wm.pw; <certs>/wrong.pw holds
 * another) whose one role reads and writes the cluster's prefix. Its
 * tokens expire once unused for TOKEN_TTL_S. */
#define TOKEN_TTL_S 2
static int password_setup(void **state)
{
    hc_cluster *c = calloc(1, sizeof(*c));
    char grant[256], path[400];
    if (c == NULL || hc_init_tls(c, "etcd-password", 1, 0) < 0) {
        free(c);
        return -1;
    }
    *state = c;
    c->etcd.auth_token_ttl_s = TOKEN_TTL_S; /* from its next start */
    /* The leader keeps its lease through the masters' test's restart of
     * etcd (a second or two), so that its writes after it meet a leader
     * that stays one; its failover is a SIGKILL, which standbys see at once. */
    c->lease_ttl_s = 10;
    if (restart_etcd(c) < 0) return -1;
    snprintf(grant, sizeof(grant), "role grant-permission wm readwrite '%s' --prefix=true", c->prefix);
    const char *steps[] = {"user add root --new-user-password=root-of-the-test",
                           "user add " PW_USER " --new-user-password=" PW_SECRET, "role add wm",
                           grant, "user grant-role " PW_USER " wm", "auth enable"};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
        if (etcd_fixture_etcdctl(&c->etcd, NULL, steps[i]) < 0) {
            fprintf(stderr, "etcdctl %s failed (%s/etcdctl.log)\n", steps[i], c->etcd.dir);
            return -1;
        }
    static const char *const pw[][2] = {{"wm.pw", PW_SECRET "\n"}, {"wrong.pw", "not-it\n"}};
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/%s", c->etcd.certs, pw[i][0]);
        if (hx_replace_file(path, pw[i][1]) < 0) return -1;
    }
    return 0;
}

/* A put of key under c's prefix through client ec: its code. */
static int put_under_prefix(hc_cluster *c, etcd_client *ec, const char *key)
{
    char k[128];
    snprintf(k, sizeof(k), "%s%s", c->prefix, key);
    return etcd_put(ec, k, strlen(k), "v", 1, 0, NULL, err, sizeof(err));
}

/* Given the user and its password, the client authenticates and writes
 * under the prefix its role allows. A token left unused past etcd's TTL is
 * forgotten: the next call is refused for it ("invalid auth token"),
 * authenticates again and succeeds (it fails with the refused token kept).
 * Calls go on through a restart of etcd and a change of roles. A wrong
 * password is refused naming etcd's cause and the user; no user at all,
 * with etcd's auth on, is refused too; a user without a CA is refused at
 * open. */
static void test_a_client_authenticates_and_again_when_etcd_forgets(void **state)
{
    hc_cluster *c = *state;
    char *ca = cert_file(&c->etcd, "ca.pem");
    etcd_client_options o = {.endpoints = etcd_fixture_endpoints(&c->etcd), .timeout_ms = 5000,
                             .tls_ca_pem = ca, .user = PW_USER, .password = PW_SECRET};
    etcd_client *ec = NULL;
    assert_int_equal(etcd_client_open(&o, &ec, err, sizeof(err)), 0);
    if (put_under_prefix(c, ec, "first") != 0) fail_msg("put: %s", err);
    sleep(TOKEN_TTL_S + 2);
    if (put_under_prefix(c, ec, "after-expiry") != 0) fail_msg("put after the token expired: %s", err);

    assert_int_equal(restart_etcd(c), 0);
    if (put_under_prefix(c, ec, "after-restart") != 0) fail_msg("put after etcd's restart: %s", err);

    assert_int_equal(etcd_fixture_etcdctl(&c->etcd, "root:root-of-the-test", "role add another"), 0);
    if (put_under_prefix(c, ec, "after-roles") != 0) fail_msg("put after a role change: %s", err);
    etcd_range_result r;
    char from[128], to[128];
    snprintf(from, sizeof(from), "%s", c->prefix);
    snprintf(to, sizeof(to), "%s", c->prefix);
    to[strlen(to) - 1]++; /* the prefix's range, which the role grants */
    if (etcd_range(ec, from, strlen(from), to, strlen(to), 0, 0, 1, &r, err, sizeof(err)) != 0)
        fail_msg("range: %s", err);
    assert_int_equal(r.n, 4);
    etcd_range_result_free(&r);
    etcd_client_close(ec);

    o.password = "not-it";
    assert_int_equal(etcd_client_open(&o, &ec, err, sizeof(err)), 0);
    assert_int_equal(put_under_prefix(c, ec, "refused"), SMP_EINVAL);
    assert_non_null(strstr(err, "authentication failed"));
    assert_non_null(strstr(err, "(authenticating as user \"" PW_USER "\")"));
    etcd_client_close(ec);
    o.user = o.password = NULL;
    assert_int_equal(etcd_client_open(&o, &ec, err, sizeof(err)), 0);
    assert_true(put_under_prefix(c, ec, "refused") < 0);
    assert_non_null(strstr(err, "user name is empty"));
    etcd_client_close(ec);

    o.user = PW_USER;
    o.password = PW_SECRET;
    o.tls_ca_pem = NULL;
    assert_int_equal(etcd_client_open(&o, &ec, err, sizeof(err)), SMP_EINVAL);
    assert_non_null(strstr(err, "a user needs its password and a CA"));
    free(ca);
}

/* etcd giving JWTs (--auth-token jwt, RS256 keys made here): each carries
 * the auth revision it was signed at, so a change of roles makes every
 * token given before it old ("revision of auth store is old"); the
 * client's next call is refused for that, logs in again and succeeds. */
static void test_a_client_logs_in_again_when_its_jwt_is_old(void **state)
{
    hc_cluster *c = *state;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && exec >>jwt.log 2>&1 && openssl genrsa -out jwt.key 2048 && "
             "openssl rsa -in jwt.key -pubout -out jwt.pub", c->etcd.certs);
    assert_int_equal(system(cmd), 0);
    snprintf(c->etcd.auth_token, sizeof(c->etcd.auth_token),
             "jwt,pub-key=%s/jwt.pub,priv-key=%s/jwt.key,sign-method=RS256,ttl=10m",
             c->etcd.certs, c->etcd.certs);
    assert_int_equal(restart_etcd(c), 0);
    char *ca = cert_file(&c->etcd, "ca.pem");
    etcd_client_options o = {.endpoints = etcd_fixture_endpoints(&c->etcd), .timeout_ms = 5000,
                             .tls_ca_pem = ca, .user = PW_USER, .password = PW_SECRET};
    etcd_client *ec = NULL;
    assert_int_equal(etcd_client_open(&o, &ec, err, sizeof(err)), 0);
    if (put_under_prefix(c, ec, "jwt") != 0) fail_msg("put: %s", err);
    for (int i = 0; i < 2; i++) {
        char role[32];
        snprintf(role, sizeof(role), "role add jwt-%d", i);
        assert_int_equal(etcd_fixture_etcdctl(&c->etcd, "root:root-of-the-test", role), 0);
        if (put_under_prefix(c, ec, "jwt/after-roles") != 0)
            fail_msg("put after a change of roles: %s", err);
    }
    etcd_client_close(ec);
    free(ca);
}

/* A client given a user while etcd's auth is off sends no token (etcd's
 * Authenticate says auth is not enabled) and works; once auth is turned on,
 * its next call is refused for the want of a token ("user name is empty"),
 * authenticates, and succeeds. */
static void test_a_client_follows_etcd_turning_its_auth_on(void **state)
{
    hc_cluster *c = *state;
    char *ca = cert_file(&c->etcd, "ca.pem");
    etcd_client_options o = {.endpoints = etcd_fixture_endpoints(&c->etcd), .timeout_ms = 5000,
                             .tls_ca_pem = ca, .user = PW_USER, .password = PW_SECRET};
    etcd_client *ec = NULL;
    assert_int_equal(etcd_fixture_etcdctl(&c->etcd, "root:root-of-the-test", "auth disable"), 0);
    assert_int_equal(etcd_client_open(&o, &ec, err, sizeof(err)), 0);
    if (put_under_prefix(c, ec, "auth-off") != 0) fail_msg("put with auth off: %s", err);
    assert_int_equal(etcd_fixture_etcdctl(&c->etcd, NULL, "auth enable"), 0);
    if (put_under_prefix(c, ec, "auth-on") != 0) fail_msg("put once auth is on: %s", err);
    etcd_client_close(ec);
    free(ca);
}

/* Master i's config for the password test: TLS to etcd, the user and the
 * password file pw (of the certificates' directory). */
static void configure_password(hc_cluster *c, int i, const char *pw)
{
    char more[600];
    snprintf(more, sizeof(more), "  etcd_user: " PW_USER "\n  etcd_password_file: \"%s/%s\"\n",
             c->etcd.certs, pw);
    configure_more(c, i, "ca.pem", 0, more);
}

/* Two masters authenticate as wm: they lead, take writes through a node,
 * ride a restart of etcd (which forgets their tokens, and their leases
 * stay) taking more writes, and fail over with every write there. A third
 * master with a wrong password stops at start, exit 1, saying etcd refused
 * the user. */
static void test_masters_authenticate_with_a_password_through_an_etcd_restart(void **state)
{
    hc_cluster *c = *state;
    for (int i = 0; i < 2; i++) {
        configure_password(c, i, "wm.pw");
        if (hx_start(&c->m[i], WAIT_MS) < 0) fail_msg("master %d did not start", i);
    }
    int leader = leader_with_node(c, "node-pw");
    put_through(c, leader, "kv/pw");
    assert_int_equal(restart_etcd(c), 0);
    leader = hc_wait_leader(c, -1, WAIT_MS);
    assert_true(leader >= 0);
    assert_int_equal(hc_wait_node(c, leader, WAIT_MS), 0);
    put_through(c, leader, "kv/pw/after");
    kvc *k = fail_over(c, leader);
    objects(k, "kv/pw", 20, 1);
    objects(k, "kv/pw/after", 20, 1);
    kvc_close(k);

    configure_password(c, 2, "wrong.pw");
    assert_int_equal(hx_run_to_exit(&c->m[2], WAIT_MS), 1);
    if (!hx_log_contains(&c->m[2], "etcdserver: authentication failed, invalid user ID or password "
                                   "(authenticating as user \"" PW_USER "\")")) {
        hx_print_log(&c->m[2]);
        fail_msg("master 2 did not say that etcd refused its password");
    }
}

/* A client of etcd as PW_USER with password: the code of a put under c's
 * prefix, err naming the cause. */
static int put_as(hc_cluster *c, const char *password)
{
    char *ca = cert_file(&c->etcd, "ca.pem");
    etcd_client_options o = {.endpoints = etcd_fixture_endpoints(&c->etcd), .timeout_ms = 5000,
                             .tls_ca_pem = ca, .user = PW_USER, .password = password};
    etcd_client *ec = NULL;
    int rc = etcd_client_open(&o, &ec, err, sizeof(err));
    if (rc == 0) rc = put_under_prefix(c, ec, "as");
    etcd_client_close(ec);
    free(ca);
    return rc;
}

#define PW_ROTATED "the-masters-next-password"

/* The masters' password is rotated while they serve, with no restart: the
 * new one is written to their password file, then set in etcd, which makes
 * every token old. The leader's next write logs in again, reading the
 * file, and is taken; the standby, which fails over once the leader is
 * SIGKILLed, logs in with the new password too and has every write. Then
 * the file goes away, and etcd restarts, forgetting the tokens: the new
 * leader says it cannot read the file, logs in with the password it read
 * before, and takes writes. */
static void test_masters_take_a_rotated_password_without_a_restart(void **state)
{
    hc_cluster *c = *state;
    char path[400], args[600], said[600];
    snprintf(path, sizeof(path), "%s/rotated.pw", c->etcd.certs);
    assert_int_equal(hx_replace_file(path, PW_SECRET "\n"), 0);
    for (int i = 0; i < 2; i++) {
        configure_password(c, i, "rotated.pw");
        if (hx_start(&c->m[i], WAIT_MS) < 0) fail_msg("master %d did not start", i);
    }
    int leader = leader_with_node(c, "node-rot");
    pid_t standby_pid = c->m[1 - leader].pid;
    put_through(c, leader, "kv/rot");

    assert_int_equal(hx_replace_file(path, PW_ROTATED "\n"), 0);
    snprintf(args, sizeof(args), "user passwd " PW_USER " --interactive=false < '%s'", path);
    assert_int_equal(etcd_fixture_etcdctl(&c->etcd, "root:root-of-the-test", args), 0);
    assert_int_equal(put_as(c, PW_SECRET), SMP_EINVAL); /* etcd took the change */
    assert_non_null(strstr(err, "authentication failed"));
    if (put_as(c, PW_ROTATED) != 0) fail_msg("put with the new password: %s", err);

    put_through(c, leader, "kv/rot/after");
    snprintf(said, sizeof(said), "the password of user \"" PW_USER "\" changed in %s; logging in "
             "with the new one", path);
    if (!hx_log_contains(&c->m[leader], said)) {
        hx_print_log(&c->m[leader]);
        fail_msg("the leader did not say it took the new password");
    }
    kvc *k = fail_over(c, leader);
    int next = 1 - leader;
    assert_int_equal(c->m[next].pid, standby_pid); /* not restarted */
    objects(k, "kv/rot", 20, 1);
    objects(k, "kv/rot/after", 20, 1);
    objects(k, "kv/rot/next", 20, 0);
    assert_true(hx_log_contains(&c->m[next], said));

    assert_int_equal(unlink(path), 0);
    kvc_close(k);
    assert_int_equal(restart_etcd(c), 0); /* it forgets every token */
    assert_int_equal(hc_wait_leader(c, -1, WAIT_MS), next);
    assert_int_equal(hc_wait_node(c, next, WAIT_MS), 0);
    assert_non_null(k = hx_client(&c->m[next]));
    objects(k, "kv/rot/no-file", 20, 0);
    snprintf(said, sizeof(said), "%s: No such file or directory; user \"" PW_USER "\" logs in "
             "with the password read before", path);
    if (!hx_log_contains(&c->m[next], said)) {
        hx_print_log(&c->m[next]);
        fail_msg("the leader did not say it kept the password it read before");
    }
    objects(k, "kv/rot/no-file", 20, 1);
    kvc_close(k);
}

int main(void)
{
    const struct CMUnitTest client[] = {
        cmocka_unit_test(test_a_client_with_its_certificate_reads_and_writes),
        cmocka_unit_test(test_a_client_etcd_does_not_accept_is_refused),
        cmocka_unit_test(test_a_client_certificate_needs_its_key_and_a_ca),
        cmocka_unit_test(test_a_client_takes_renewed_tls_files_while_calls_run),
    };
    const struct CMUnitTest masters[] = {
        cmocka_unit_test_setup_teardown(test_masters_lead_and_fail_over_on_a_tls_etcd,
                                        cluster_setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_a_master_etcd_does_not_accept_waits_and_says_why,
                                        cluster_setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_etcd_rbac_by_certificate_keeps_masters_to_their_prefix,
                                        cluster_setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_masters_renew_their_etcd_certificate_on_sighup,
                                        cluster_setup, cluster_teardown),
    };
    const struct CMUnitTest password[] = {
        cmocka_unit_test_setup_teardown(test_a_client_authenticates_and_again_when_etcd_forgets,
                                        password_setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_a_client_follows_etcd_turning_its_auth_on,
                                        password_setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_a_client_logs_in_again_when_its_jwt_is_old,
                                        password_setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_masters_authenticate_with_a_password_through_an_etcd_restart,
                                        password_setup, cluster_teardown),
        cmocka_unit_test_setup_teardown(test_masters_take_a_rotated_password_without_a_restart,
                                        password_setup, cluster_teardown),
    };
    int failed = cmocka_run_group_tests_name("etcd over TLS: the client", client, etcd_setup,
                                             etcd_teardown);
    failed += cmocka_run_group_tests_name("etcd over TLS: the masters", masters, NULL, NULL);
    failed += cmocka_run_group_tests_name("etcd's password auth", password, NULL, NULL);
    return failed;
}
