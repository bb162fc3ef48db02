/* test_store_tls.c -- libweightclient's per-store TLS settings
 * (weight_store_open_tls), with a real master whose control RPC and
 * embedded node's data port speak TLS 1.3, and certificates made at test
 * time in the test's own directory (hx_make_certs).
 *
 * With the environment's WM_TLS_* unset, a store given the CA reaches the
 * master over TLS and its node's data port too (a remote put and get, every
 * tensor compared); a wrong CA in the environment does not matter when the
 * handle names the right one, and a handle without a CA falls back to the
 * environment. server_name replaces the host the master's certificate must
 * name: a name the certificate carries is served, another is refused
 * naming it. With tls.verify_clients the handle's client certificate is
 * presented and served; without it the master refuses (at the handshake or,
 * TLS 1.3, at the first call). Every bad setting
 * (a missing CA file, a CA that is not PEM, a certificate without its key
 * and the reverse, a key that does not match its certificate, a
 * certificate without a CA, a struct_size below the first version's, an
 * over-long server_name) is WEIGHT_EINVALID_ARGUMENT naming the cause, with
 * no store made and no connection made: the "master" is a listening socket
 * of the test's that must have nothing to accept. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "etcd_fixture.h"
#include "harness.h"
#include "weight_model.h"

enum { N_TENSORS = 3 };
enum { CA, SRV_CERT, SRV_KEY, CLI_CERT, CLI_KEY, OTHER_CA, OTHER_KEY, N_PEM };

typedef struct fx {
    hx_master m;
    int port;
    char tcp[64];
    char pem[N_PEM][400];
    wx_tensor t[N_TENSORS];
} fx;

static void clear_env(void)
{
    unsetenv("WM_TLS_CA");
    unsetenv("WM_TLS_CERT");
    unsetenv("WM_TLS_KEY");
}

static int setup(void **state)
{
    static const char *names[N_PEM] = {"ca.pem", "server.pem", "server.key", "client.pem",
                                       "client.key", "other-ca.pem", "other.key"};
    static const char *tensors[N_TENSORS] = {"embed.weight", "layers.0.mlp.weight", "lm_head.weight"};
    fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(hx_init(&f->m, "store-tls", NULL), 0);
    assert_int_equal(hx_make_certs(f->m.dir), 0);
    for (int i = 0; i < N_PEM; i++)
        snprintf(f->pem[i], sizeof(f->pem[i]), "%s/%s", f->m.dir, names[i]);
    f->port = etcd_fixture_free_port();
    assert_true(f->port > 0);
    snprintf(f->tcp, sizeof(f->tcp), "127.0.0.1:%d", f->port);
    snprintf(f->m.listen_tcp, sizeof(f->m.listen_tcp), "%s", f->tcp);
    for (int i = 0; i < N_TENSORS; i++) {
        f->t[i].name = tensors[i];
        f->t[i].shape[0] = 16;
        f->t[i].shape[1] = 64;
    }
    wx_model_fill(f->t, N_TENSORS, 11);
    clear_env();
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    clear_env();
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

/* The master with the server certificate on its TCP port and its embedded
 * node's data port; with verify, clients must present a certificate of the
 * test CA. */
static void start_tls(fx *f, int verify)
{
    char extra[2048];
    snprintf(extra, sizeof(extra), "tls:\n  cert: \"%s\"\n  key: \"%s\"\n%s%s%s",
             f->pem[SRV_CERT], f->pem[SRV_KEY], verify ? "  ca: \"" : "",
             verify ? f->pem[CA] : "", verify ? "\"\n  verify_clients: true\n" : "");
    assert_int_equal(hx_reconfigure(&f->m, extra), 0);
    assert_int_equal(hx_start(&f->m, 15000), 0);
}

static weight_tls_options tls_opts(const char *ca, const char *cert, const char *key,
                                   const char *server_name)
{
    weight_tls_options o = {.struct_size = sizeof(o), .ca = ca, .cert = cert, .key = key,
                            .server_name = server_name};
    return o;
}

/* weight_store_open_tls to master with o: the code, the store in *s (NULL
 * on failure) and the message in err. */
static int open_with(const char *master, const weight_tls_options *o, weight_store **s,
                     char *err, size_t cap)
{
    err[0] = '\0';
    *s = (weight_store *)&err; /* must become NULL on failure */
    int rc = weight_store_open_tls(master, "acme", NULL, o, NULL, s, err, cap);
    if (rc != WEIGHT_OK) assert_null(*s);
    return rc;
}

/* weight_store_open_tls to the test master's TCP port with o, which must
 * succeed: the store. */
static weight_store *open_ok(fx *f, const weight_tls_options *o)
{
    weight_store *s;
    char err[1024];
    if (open_with(f->tcp, o, &s, err, sizeof(err)) != WEIGHT_OK)
        fail_msg("weight_store_open_tls: %s", err);
    return s;
}

/* A remote (TCP) put and get of a revision through s: every tensor exact,
 * none of it through a mapping (the node's data port, over TLS). */
static void remote_round_trip(fx *f, weight_store *s, const char *rev)
{
    weight_identity id;
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_PAYLOAD_BYTES, 4096), 0);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_TRANSPORT, 2), 0);
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "store-tls", rev, 1), 0);
    wx_put_model(s, &id, f->t, N_TENSORS);
    assert_int_equal(wx_get_and_compare(s, &id, f->t, N_TENSORS), 0);
}

/* The handle's CA, with nothing in the environment: the master's RPC and
 * the node's data port both over TLS; a wrong CA in the environment is
 * ignored when the handle names one; without a CA in the handle the
 * environment's is used (and a wrong one there is refused). */
static void test_store_tls_settings_reach_master_and_node(void **state)
{
    fx *f = *state;
    weight_store *s;
    char err[1024];
    start_tls(f, 0);
    weight_tls_options o = tls_opts(f->pem[CA], NULL, NULL, NULL);
    s = open_ok(f, &o);
    remote_round_trip(f, s, "handle-ca");
    weight_store_close(s);

    setenv("WM_TLS_CA", f->pem[OTHER_CA], 1);
    assert_int_equal(open_with(f->tcp, &o, &s, err, sizeof(err)), WEIGHT_OK);
    remote_round_trip(f, s, "handle-over-env");
    weight_store_close(s);

    weight_tls_options none = tls_opts(NULL, NULL, NULL, NULL);
    assert_int_equal(open_with(f->tcp, &none, &s, err, sizeof(err)), WEIGHT_EIO);
    assert_true(hx_says(err, "master's certificate is not trusted"));
    setenv("WM_TLS_CA", f->pem[CA], 1);
    assert_int_equal(open_with(f->tcp, &none, &s, err, sizeof(err)), WEIGHT_OK);
    remote_round_trip(f, s, "env-fallback");
    weight_store_close(s);
    assert_true(hx_alive(&f->m));
}

/* server_name: dialled by IP address, the certificate's DNS name
 * (localhost) is accepted; a name it does not carry is refused, naming it. */
static void test_store_tls_server_name(void **state)
{
    fx *f = *state;
    weight_store *s;
    char err[1024];
    start_tls(f, 0);
    weight_tls_options o = tls_opts(f->pem[CA], NULL, NULL, "localhost");
    s = open_ok(f, &o);
    weight_identity id;
    int exists = -1;
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "store-tls", "none", 1), 0);
    assert_int_equal(weight_is_exist(s, &id, &exists), WEIGHT_OK); /* a call answered over TLS */
    assert_int_equal(exists, 0);
    weight_store_close(s);
    o.server_name = "weights.example.com";
    assert_int_equal(open_with(f->tcp, &o, &s, err, sizeof(err)), WEIGHT_EIO);
    assert_true(hx_says(err, "does not name weights.example.com"));
    assert_true(hx_alive(&f->m));
}

/* tls.verify_clients: the handle's client certificate is presented and
 * served; the same CA without a certificate is refused. */
static void test_store_tls_client_certificate(void **state)
{
    fx *f = *state;
    weight_store *s;
    char err[1024];
    start_tls(f, 1);
    weight_tls_options o = tls_opts(f->pem[CA], f->pem[CLI_CERT], f->pem[CLI_KEY], NULL);
    s = open_ok(f, &o);
    remote_round_trip(f, s, "client-cert");
    weight_store_close(s);
    weight_tls_options bare = tls_opts(f->pem[CA], NULL, NULL, NULL);
    /* TLS 1.3: the master's refusal may arrive with the first read */
    if (open_with(f->tcp, &bare, &s, err, sizeof(err)) == WEIGHT_OK) {
        weight_identity id;
        int exists = -1;
        assert_int_equal(weight_identity_set(&id, NULL, "llm", "store-tls", "client-cert", 1), 0);
        assert_true(weight_is_exist(s, &id, &exists) < 0);
        weight_store_close(s);
    }
    assert_true(hx_alive(&f->m));
    assert_true(hx_log_contains(&f->m, "TLS handshake refused"));
}

/* Every bad setting: WEIGHT_EINVALID_ARGUMENT naming the cause, no store,
 * and nothing connected to the listening socket given as the master. */
static void test_store_tls_bad_settings_refused(void **state)
{
    fx *f = *state;
    weight_store *s;
    char err[1024], garbage[450], master[64], long_name[300];
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    assert_true(ls >= 0);
    assert_int_equal(bind(ls, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(ls, 8), 0);
    assert_int_equal(getsockname(ls, (struct sockaddr *)&a, &al), 0);
    snprintf(master, sizeof(master), "127.0.0.1:%d", ntohs(a.sin_port));
    snprintf(garbage, sizeof(garbage), "%s/garbage.pem", f->m.dir);
    FILE *g = fopen(garbage, "w");
    assert_non_null(g);
    fputs("this is not a certificate\n", g);
    fclose(g);
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    char missing[450];
    snprintf(missing, sizeof(missing), "%s/no-such-ca.pem", f->m.dir);

    struct {
        weight_tls_options o;
        const char *needle;
    } bad[] = {
        {tls_opts(missing, NULL, NULL, NULL), "no-such-ca.pem"},
        {tls_opts(garbage, NULL, NULL, NULL), "garbage.pem"},
        {tls_opts(f->pem[CA], f->pem[CLI_CERT], NULL, NULL), "come together"},
        {tls_opts(f->pem[CA], NULL, f->pem[CLI_KEY], NULL), "come together"},
        {tls_opts(f->pem[CA], f->pem[CLI_CERT], f->pem[OTHER_KEY], NULL), "client.pem"},
        {tls_opts(f->pem[CA], missing, f->pem[CLI_KEY], NULL), "no-such-ca.pem"},
        {tls_opts(NULL, f->pem[CLI_CERT], f->pem[CLI_KEY], NULL), "cert and key need ca"},
        {tls_opts(f->pem[CA], NULL, NULL, long_name), "server_name is longer than 255"},
        {{.struct_size = 8, .ca = f->pem[CA]}, "struct_size 8 is below"},
    };
    setenv("WM_TLS_CA", f->pem[CA], 1); /* the environment does not rescue a bad handle */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = open_with(master, &bad[i].o, &s, err, sizeof(err));
        if (rc != WEIGHT_EINVALID_ARGUMENT || !hx_says(err, bad[i].needle))
            fail_msg("case %zu: rc %d, message [%s], wanted [%s]", i, rc, err, bad[i].needle);
        struct pollfd p = {.fd = ls, .events = POLLIN};
        assert_int_equal(poll(&p, 1, 0), 0); /* nobody dialled the "master" */
    }
    assert_int_equal(accept(ls, NULL, NULL), -1);
    assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
    close(ls);
    unlink(garbage);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_store_tls_settings_reach_master_and_node, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_store_tls_server_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_tls_client_certificate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_tls_bad_settings_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
