/* auth_fixture.c -- a store_master with authentication on (auth_fixture.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "auth_fixture.h"
#include "host_rpc.pb-c.h"

static const char *const tokens[] = {
    "", "tok-admin-3f9c", "tok-a-writer-81d2", "tok-a-reader-5e07", "tok-b-writer-c4aa",
    "tok-nobody-0000",
};

const char *af_token(af_who who)
{
    return tokens[who];
}

static void hex_of(const char *token, char out[65])
{
    unsigned char d[32];
    hx_sha256(token, strlen(token), d);
    for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

void af_start(wr_fixture *f, const char *name)
{
    char yaml[2048], path[400], h[4][65];
    FILE *tf;
    assert_int_equal(hx_init(&f->m, name, NULL), 0);
    snprintf(path, sizeof(path), "%s/node.token", f->m.dir);
    assert_non_null(tf = fopen(path, "w"));
    fprintf(tf, "%s\n", af_token(AF_ADMIN));
    assert_int_equal(fclose(tf), 0);
    for (int i = 0; i < 4; i++) hex_of(af_token((af_who)(i + 1)), h[i]);
    snprintf(yaml, sizeof(yaml),
             "auth:\n"
             "  enabled: true\n"
             "  node_token_file: \"%s\"\n"
             "  tokens:\n"
             "    - {sha256: %s, tenant: ops, role: admin}\n"
             "    - {sha256: %s, tenant: a, role: writer}\n"
             "    - {sha256: %s, tenant: a, role: reader}\n"
             "    - {sha256: %s, tenant: b, role: writer}\n",
             path, h[0], h[1], h[2], h[3]);
    assert_int_equal(hx_reconfigure(&f->m, yaml), 0);
    /* hx_start asks the admin service whether the master is up */
    setenv("WEIGHT_TOKEN", af_token(AF_ADMIN), 1);
    assert_int_equal(hx_start(&f->m, 15000), 0);
    assert_true(hx_log_contains(&f->m, "auth: on, 4 tokens"));
    wr_connect(f);
}

void af_as(wr_fixture *f, af_who who)
{
    wr_disconnect(f);
    if (who == AF_NONE) unsetenv("WEIGHT_TOKEN");
    else setenv("WEIGHT_TOKEN", af_token(who), 1);
    wr_connect(f);
}

rpcc_conn *af_raw(wr_fixture *f)
{
    char err[512];
    rpcc_conn *c = NULL;
    rpcc_options o = {.timeout_ms = 10000, .token = ""};
    if (rpcc_connect(f->m.socket, &o, &c, err, sizeof(err)) < 0) fail_msg("connect: %s", err);
    return c;
}

int af_hello(rpcc_conn *c, const char *token)
{
    AuthHelloRequest req = AUTH_HELLO_REQUEST__INIT;
    uint8_t buf[256];
    int status = 0;
    req.token.data = (uint8_t *)token;
    req.token.len = strlen(token);
    size_t len = auth_hello_request__pack(&req, buf);
    assert_int_equal(rpcc_call(c, HOST_SERVICE__HOST_SERVICE_AUTH, AUTH_METHOD__AUTH_HELLO, buf, len,
                               &status, NULL, NULL, NULL),
                     0);
    return status;
}
