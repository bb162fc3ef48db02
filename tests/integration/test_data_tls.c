/* test_data_tls.c -- TLS 1.3 on the node data port, with a real master, its
 * embedded node, a store_node process and certificates made at test time in
 * the test's own directory (hx_make_certs).
 *
 * A remote (TCP, not co-located) weight_put and weight_get round trip over
 * TLS, every tensor compared by SHA-256, with the embedded node (which takes
 * the master's tls.cert) and with a store_node given --data-tls-cert/-key; a
 * client without a CA is told the node speaks TLS only. A plaintext client on
 * a TLS data port is refused with a sentence saying so, and the node serves
 * TLS clients afterwards; a client trusting another CA is refused in the
 * handshake, naming why; bad data-port TLS files (missing, a key that does
 * not match the certificate) stop store_node at start, naming the flag and
 * the cause; a certificate without its key (or the reverse) is refused
 * with the other bad arguments: exit 2, and no segment file made. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "node_data_client.h"
#include "weight_model.h"

/* More than one sealed chunk of the node (1 MiB) and not a multiple of it. */
enum { N_TENSORS = 3, OBJ_BYTES = (3 << 20) + 12345 };

typedef struct fx {
    hx_master m;
    char ca[400], cert[400], key[400], other_ca[400], other_key[400];
    wx_tensor t[N_TENSORS];
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    char extra[2048];
    assert_int_equal(hx_init(&f->m, "data-tls", NULL), 0);
    assert_int_equal(hx_make_certs(f->m.dir), 0);
    snprintf(f->ca, sizeof(f->ca), "%s/ca.pem", f->m.dir);
    snprintf(f->cert, sizeof(f->cert), "%s/server.pem", f->m.dir);
    snprintf(f->key, sizeof(f->key), "%s/server.key", f->m.dir);
    snprintf(f->other_ca, sizeof(f->other_ca), "%s/other-ca.pem", f->m.dir);
    snprintf(f->other_key, sizeof(f->other_key), "%s/other.key", f->m.dir);
    snprintf(extra, sizeof(extra), "tls:\n  cert: \"%s\"\n  key: \"%s\"\n", f->cert, f->key);
    assert_int_equal(hx_reconfigure(&f->m, extra), 0);
    static const char *names[N_TENSORS] = {"embed.weight", "layers.0.attn.weight", "lm_head.weight"};
    for (int i = 0; i < N_TENSORS; i++) {
        f->t[i].name = names[i];
        f->t[i].shape[0] = 16;
        f->t[i].shape[1] = 64;
    }
    wx_model_fill(f->t, N_TENSORS, 7);
    unsetenv("WM_TLS_CA");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    unsetenv("WM_TLS_CA");
    hx_cleanup(&f->m);
    free(f);
    return 0;
}

/* A kv object of OBJ_BYTES (pattern seed) put through the node's data port
 * (the remote transport: over TLS when the node speaks it); its memory
 * replica (data address, READ ticket) into *r, its bytes into data. */
static void put_object(fx *f, const char *key, uint8_t seed, uint8_t *data, kvc_replica *r)
{
    kvc *c = hx_client(&f->m);
    kvc_object o;
    assert_non_null(c);
    kvc_set_transport(c, KVC_REMOTE);
    for (size_t i = 0; i < OBJ_BYTES; i++) data[i] = (uint8_t)(i * 13 + seed);
    setenv("WM_TLS_CA", f->ca, 1);
    if (kvc_put_bytes(c, key, data, OBJ_BYTES, SMP_DATA_KV, NULL, 0, NULL) != SMP_OK)
        fail_msg("put %s: %s", key, kvc_error(c));
    assert_int_equal(kvc_get(c, key, &o), SMP_OK);
    assert_true(o.n_replicas >= 1);
    assert_int_equal(o.replicas[0].kind, SMP_REPLICA_MEMORY);
    *r = o.replicas[0];
    kvc_close(c);
}

/* ndc_read of r's whole range over a connection with the environment's CA
 * (tls) or plaintext: its status, with the node's words in why. */
static int read_range(const kvc_replica *r, int tls, uint8_t *out, char *why, size_t cap)
{
    ndc_options o = {.timeout_ms = 10000, .tls = tls};
    ndc_conn *n = NULL;
    int rc = ndc_connect(r->data_addr, &o, &n, why, cap);
    if (rc < 0) return rc;
    rc = ndc_read(n, r->segment, r->offset, r->length, out, r->ticket, r->ticket_len);
    snprintf(why, cap, "%s", ndc_last_error(n));
    ndc_close(n);
    return rc;
}

/* Remote put and get through the embedded node's TLS data port: the
 * master says the node speaks TLS, the client trusts the CA, every tensor
 * comes back exact and none through a mapping. Without a CA the client is
 * told what it needs. */
static void test_remote_weight_round_trip_over_tls(void **state)
{
    fx *f = *state;
    weight_identity id;
    assert_int_equal(hx_start(&f->m, 15000), 0);
    setenv("WM_TLS_CA", f->ca, 1);
    weight_store *s = wx_open_store(&f->m);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_TRANSPORT, 2), 0);
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "tls", "remote", 1), 0);
    wx_put_model(s, &id, f->t, N_TENSORS);
    assert_int_equal(wx_get_and_compare(s, &id, f->t, N_TENSORS), 0); /* nothing mapped */
    weight_store_close(s);

    kvc_replica r;
    uint8_t *data = malloc(OBJ_BYTES), *back = calloc(1, OBJ_BYTES);
    char why[512];
    put_object(f, "tls/flag", 1, data, &r);
    assert_true(r.data_tls); /* the master passes on what the node registered */
    unsetenv("WM_TLS_CA");
    assert_int_equal(read_range(&r, 1, back, why, sizeof(why)), SMP_EINVAL);
    assert_true(hx_says(why, "speaks TLS only"));
    assert_true(hx_says(why, "WM_TLS_CA"));
    free(data);
    free(back);
}

/* A kv object put over TLS, then read by a first client -- plaintext
 * (tls 0) or TLS trusting first_ca -- that must be refused with code and
 * needle in its error, no byte given; the node is alive and a client
 * trusting the right CA reads the object exact afterwards. */
static void refused_then_served(fx *f, const char *key, uint8_t seed, int tls,
                                const char *first_ca, int code, const char *needle)
{
    kvc_replica r;
    uint8_t *data = malloc(OBJ_BYTES), *back = calloc(1, OBJ_BYTES), *zero = calloc(1, OBJ_BYTES);
    char why[512];
    assert_int_equal(hx_start(&f->m, 15000), 0);
    put_object(f, key, seed, data, &r);
    if (first_ca != NULL)
        setenv("WM_TLS_CA", first_ca, 1);
    else
        unsetenv("WM_TLS_CA");
    assert_int_equal(read_range(&r, tls, back, why, sizeof(why)), code);
    assert_true(hx_says(why, needle));
    assert_memory_equal(back, zero, OBJ_BYTES); /* no byte given */
    assert_true(hx_alive(&f->m));
    setenv("WM_TLS_CA", f->ca, 1);
    assert_int_equal(read_range(&r, 1, back, why, sizeof(why)), SMP_OK);
    assert_memory_equal(back, data, OBJ_BYTES);
    free(data);
    free(back);
    free(zero);
}

/* A plaintext client is told the data port speaks TLS and the connection
 * closes; the node serves TLS clients afterwards. */
static void test_plaintext_client_refused_by_tls_data_port(void **state)
{
    refused_then_served(*state, "tls/plain", 2, 0, NULL, SMP_EPROTO, "speaks TLS");
}

/* A client that trusts another CA is refused in the handshake, naming
 * why; the node serves a client with the right CA afterwards. */
static void test_client_without_the_ca_refused_by_data_port(void **state)
{
    fx *f = *state;
    refused_then_served(f, "tls/untrusted", 3, 1, f->other_ca, SMP_EPROTO,
                        "node's certificate is not trusted");
}

/* A store_node with --data-tls-cert/--data-tls-key: remote put and get
 * over TLS through it. */
static void test_store_node_with_data_tls(void **state)
{
    fx *f = *state;
    hx_node n;
    weight_identity id;
    char extra[2048];
    snprintf(extra, sizeof(extra), "tls:\n  cert: \"%s\"\n  key: \"%s\"\nnode:\n  embedded: false\n",
             f->cert, f->key);
    assert_int_equal(hx_reconfigure(&f->m, extra), 0);
    assert_int_equal(hx_start(&f->m, 15000), 0);
    const char *args[] = {"--data-tls-cert", f->cert, "--data-tls-key", f->key, NULL};
    assert_int_equal(hx_node_start_args(&f->m, &n, "tls-node", 64ull << 20, args), 0);
    assert_int_equal(hx_wait_nodes(&f->m, 1, 15000), 0);
    assert_true(hx_file_contains(n.log, "(TLS)"));
    setenv("WM_TLS_CA", f->ca, 1);
    weight_store *s = wx_open_store(&f->m);
    assert_int_equal(weight_store_set_option(s, WEIGHT_OPT_TRANSPORT, 2), 0);
    assert_int_equal(weight_identity_set(&id, NULL, "llm", "tls", "node", 1), 0);
    wx_put_model(s, &id, f->t, N_TENSORS);
    assert_int_equal(wx_get_and_compare(s, &id, f->t, N_TENSORS), 0);
    weight_store_close(s);
    hx_node_kill(&n);
}

/* store_node with bad data-port TLS files: exit status and stderr. */
static int bad_node(fx *f, const char *cert, const char *key, const char *needle1,
                    const char *needle2)
{
    char cmd[4096], log[400];
    snprintf(log, sizeof(log), "%s/bad-node.log", f->m.dir);
    snprintf(cmd, sizeof(cmd),
             "'%s/bin/store_node' --master '%s/none.sock' --id bad --segment-dir '%s' "
             "--segment-bytes 1048576 --cold-dir '%s' %s%s%s %s%s%s > '%s' 2>&1",
             BUILD_DIR, f->m.dir, f->m.dir, f->m.dir, cert ? "--data-tls-cert '" : "",
             cert ? cert : "", cert ? "'" : "", key ? "--data-tls-key '" : "", key ? key : "",
             key ? "'" : "", log);
    int rc = system(cmd);
    assert_true(WIFEXITED(rc));
    assert_true(hx_file_contains(log, needle1));
    assert_true(hx_file_contains(log, needle2));
    return WEXITSTATUS(rc);
}

/* Bad data-port TLS settings stop store_node at start, naming the cause;
 * one of the pair without the other is an argument error (exit 2). */
static void test_bad_node_tls_config_refused_at_start(void **state)
{
    fx *f = *state;
    char missing[512];
    snprintf(missing, sizeof(missing), "%s/no-such.pem", f->m.dir);
    assert_int_equal(bad_node(f, missing, f->key, "--data-tls-cert", "No such file"), 1);
    assert_int_equal(bad_node(f, f->cert, f->other_key, "--data-tls-key",
                              "does not match the certificate"), 1);
    assert_int_equal(bad_node(f, f->key, f->key, "--data-tls-cert", "is not a PEM certificate"), 1);
    /* one without the other: an argument error, before the segment is made */
    char seg[512];
    snprintf(seg, sizeof(seg), "%s/bad.seg", f->m.dir);
    unlink(seg);
    assert_int_equal(bad_node(f, f->cert, NULL, "--data-tls-cert needs --data-tls-key",
                              "(and the other way round)"), 2);
    assert_int_equal(bad_node(f, NULL, f->key, "--data-tls-cert needs --data-tls-key",
                              "(and the other way round)"), 2);
    assert_int_not_equal(access(seg, F_OK), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_remote_weight_round_trip_over_tls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plaintext_client_refused_by_tls_data_port, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_client_without_the_ca_refused_by_data_port, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_store_node_with_data_tls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_node_tls_config_refused_at_start, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
