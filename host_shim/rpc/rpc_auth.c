/* rpc_auth.c -- the master's credential table: tokens known by their
 * SHA-256, each proving one tenant and role, and the client certificate
 * mappings (matched in rpc_auth_cert.c) (rpc_auth.h).
 *
 * A presented token is hashed once (OpenSSL's EVP) and compared with every
 * configured hash in constant time (CRYPTO_memcmp, no early exit), so the
 * time of a refusal says nothing about how close a guess was. The table is
 * small (one entry per credential) and read-only after creation.
 *
 * It also serves the host's auth service (4): HELLO, which sets the identity
 * of the connection it came on, and RULES, the routing table's rules; and,
 * with certificate mappings, identifies each verified client certificate
 * for the server (rpc_server_set_cert_identify). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "host_rpc.pb-c.h"
#include "rpc.h"
#include "rpc_auth.h"
#include "wm_errbuf.h"

struct rpc_auth {
    int enabled;
    rpc_auth_token *tokens;
    size_t n;
    rpc_auth_cert *certs; /* rpc_auth_set_certificates */
    size_t n_certs;
    rpc_server *srv; /* rpc_auth_serve */
};

int rpc_auth_create(int enabled, const rpc_auth_token *tokens, size_t n, rpc_auth **out)
{
    rpc_auth *a;
    if (out == NULL || (n > 0 && tokens == NULL)) return SMP_EINVAL;
    *out = NULL;
    for (size_t i = 0; i < n; i++) {
        if (tokens[i].role < SMP_ROLE_READER || tokens[i].role > SMP_ROLE_ADMIN ||
            tokens[i].tenant[0] == '\0')
            return SMP_EINVAL;
        for (size_t j = 0; j < i; j++)
            if (memcmp(tokens[i].sha256, tokens[j].sha256, 32) == 0) return SMP_EINVAL;
    }
    if ((a = calloc(1, sizeof(*a))) == NULL) return SMP_ENOMEM;
    if (n > 0 && (a->tokens = malloc(n * sizeof(*a->tokens))) == NULL) {
        free(a);
        return SMP_ENOMEM;
    }
    if (n > 0) memcpy(a->tokens, tokens, n * sizeof(*a->tokens));
    a->n = n;
    a->enabled = enabled != 0;
    *out = a;
    return SMP_OK;
}

void rpc_auth_free(rpc_auth *a)
{
    if (a == NULL) return;
    free(a->tokens);
    free(a->certs);
    free(a);
}

int rpc_auth_set_certificates(rpc_auth *a, const rpc_auth_cert *certs, size_t n)
{
    rpc_auth_cert *copy = NULL;
    if (a == NULL || (n > 0 && certs == NULL)) return SMP_EINVAL;
    for (size_t i = 0; i < n; i++) {
        const rpc_auth_cert *e = &certs[i];
        if (e->role < SMP_ROLE_READER || e->role > SMP_ROLE_ADMIN || e->tenant[0] == '\0' ||
            e->value[0] == '\0' || (e->match != RPC_CERT_CN && e->match != RPC_CERT_SAN_URI))
            return SMP_EINVAL;
        for (size_t j = 0; j < i; j++)
            if (certs[j].match == e->match && strcmp(certs[j].value, e->value) == 0)
                return SMP_EINVAL;
    }
    if (n > 0) {
        if ((copy = malloc(n * sizeof(*copy))) == NULL) return SMP_ENOMEM;
        memcpy(copy, certs, n * sizeof(*copy));
    }
    free(a->certs);
    a->certs = copy;
    a->n_certs = n;
    return SMP_OK;
}

int rpc_auth_identify_cert(const rpc_auth *a, struct x509_st *leaf, const char **tenant,
                           smp_role *role, char *note, size_t cap)
{
    const rpc_auth_cert *e = NULL;
    int rc = a != NULL ? rpc_auth_cert_find(a->certs, a->n_certs, leaf, &e, note, cap)
                       : SMP_ENOTFOUND;
    if (rc < 0) return rc;
    *tenant = e->tenant;
    *role = e->role;
    return SMP_OK;
}

int rpc_auth_check(const rpc_auth *a, const uint8_t *token, size_t len,
                   const rpc_auth_token **out)
{
    uint8_t digest[32];
    unsigned dlen = 0;
    const rpc_auth_token *found = NULL;
    if (out != NULL) *out = NULL;
    if (a == NULL || token == NULL || len == 0 || len > RPC_AUTH_TOKEN_MAX) return SMP_EAUTH;
    if (!EVP_Digest(token, len, digest, &dlen, EVP_sha256(), NULL) || dlen != 32) return SMP_EAUTH;
    for (size_t i = 0; i < a->n; i++)
        if (CRYPTO_memcmp(digest, a->tokens[i].sha256, 32) == 0) found = &a->tokens[i];
    if (found == NULL) return SMP_EAUTH;
    if (out != NULL) *out = found;
    return SMP_OK;
}

const char *rpc_auth_role_name(smp_role r)
{
    switch ((int)r) {
    case SMP_ROLE_READER: return "reader";
    case SMP_ROLE_WRITER: return "writer";
    case SMP_ROLE_ADMIN: return "admin";
    case RPC_ROLE_ANYONE: return "anyone";
    default: return "none";
    }
}

int rpc_auth_tenant_check(const char *name, char *why, size_t cap)
{
    size_t len = name != NULL ? strlen(name) : 0;
    int ok = len >= 1 && len <= RPC_AUTH_TENANT_MAX && name[0] != '.';
    for (size_t i = 0; ok && i < len; i++) {
        char c = name[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
             c == '_' || c == '-';
    }
    if (!ok) {
        wm_errbuf(why, cap, "\"%.200s\" is not a tenant (1 to %d of A-Z a-z 0-9 . _ -, not starting "
                  "with .)", name != NULL ? name : "", RPC_AUTH_TENANT_MAX);
        return SMP_EINVAL;
    }
    if (strcmp(name, "weights") == 0) {
        wm_errbuf(why, cap, "\"weights\" cannot be a tenant: a tenant's objects are named "
                  "'<tenant>/...' and every tenant's weight revisions 'weights/<tenant>/...', so its "
                  "objects would lie among the revisions");
        return SMP_EINVAL;
    }
    return SMP_OK;
}

int rpc_auth_role_parse(const char *name, smp_role *out)
{
    static const struct { const char *name; smp_role role; } roles[] = {
        {"reader", SMP_ROLE_READER}, {"writer", SMP_ROLE_WRITER}, {"admin", SMP_ROLE_ADMIN}};
    for (size_t i = 0; name != NULL && i < sizeof(roles) / sizeof(roles[0]); i++) {
        if (strcmp(name, roles[i].name) == 0) {
            *out = roles[i].role;
            return SMP_OK;
        }
    }
    return SMP_EINVAL;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int rpc_auth_parse_sha256(const char *hex, uint8_t out[32])
{
    if (hex == NULL || strlen(hex) != 64) return SMP_EINVAL;
    for (size_t i = 0; i < 32; i++) {
        int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return SMP_EINVAL;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return SMP_OK;
}

int rpc_auth_enabled(const rpc_auth *a)
{
    return a != NULL && a->enabled;
}

/* Pack msg and answer call with it (or SMP_ENOMEM). */
static int reply_msg(smp_rpc_call *call, const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t stackbuf[512];
    uint8_t *buf = len <= sizeof(stackbuf) ? stackbuf : malloc(len);
    int rc;
    if (buf == NULL) return rpc_reply_error(call, SMP_ENOMEM, "auth: out of memory for the reply");
    protobuf_c_message_pack(msg, buf);
    rc = rpc_reply(call, SMP_OK, buf, len);
    if (buf != stackbuf) free(buf);
    return rc;
}

/* Every answer of auth.HELLO says whether this master leads, and a
 * standby which master does: a client given a list learns it from the
 * first request it makes on a socket (rpc_client.c asks it of another
 * master while a call waits in silence). */
static void say_leadership(const smp_rpc_call *call, AuthHelloResponse *resp)
{
    const char *leader = "";
    resp->leadership = (uint32_t)rpc_server_leadership(call, &leader);
    resp->leader = (char *)leader;
}

/* auth.HELLO on a connection its client certificate authenticated as
 * tenant/role: an empty token, or one proving the same identity, is answered
 * with it; any other token is refused SMP_EAUTH and the connection loses
 * its identity (which credential was meant is not guessed). The refusal
 * names the certificate's identity, never what the token would prove. */
static int hello_on_cert(rpc_auth *a, smp_rpc_call *call, const AuthHelloRequest *req,
                         const char *tenant, smp_role role)
{
    AuthHelloResponse resp = AUTH_HELLO_RESPONSE__INIT;
    const rpc_auth_token *t = NULL;
    char why[RPC_AUTH_TENANT_MAX + 192];
    if (req->token.len > 0 && (rpc_auth_check(a, req->token.data, req->token.len, &t) < 0 ||
                               strcmp(t->tenant, tenant) != 0 || t->role != role)) {
        snprintf(why, sizeof(why), "auth.HELLO: this connection's client certificate proves "
                 "tenant %s, role %s, and the token presented does not", tenant,
                 rpc_auth_role_name(role));
        rpc_server_deauthenticate(call, why);
        return rpc_reply_error(call, SMP_EAUTH, why);
    }
    resp.enabled = 1;
    resp.tenant = (char *)tenant;
    resp.role = (char *)rpc_auth_role_name(role);
    say_leadership(call, &resp);
    return reply_msg(call, &resp.base);
}

/* auth.HELLO: check the token and set the connection's identity. A refused
 * token is answered SMP_EAUTH and remembered on the connection (its later
 * requests are refused naming that); a second HELLO is SMP_ESTATE. On a
 * connection its client certificate authenticated: hello_on_cert. An empty
 * token elsewhere asks which identity a certificate maps to: SMP_EAUTH,
 * and the connection may still present a token. */
static int h_hello(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    rpc_auth *a = ctx;
    AuthHelloRequest *req = auth_hello_request__unpack(NULL, len, body);
    AuthHelloResponse resp = AUTH_HELLO_RESPONSE__INIT;
    const rpc_auth_token *t = NULL;
    const char *cert_tenant = NULL;
    smp_role cert_role = SMP_ROLE_NONE;
    int rc;
    if (req == NULL) return rpc_reply_error(call, SMP_EPROTO, "auth.HELLO: the body does not decode");
    if (!a->enabled) {
        auth_hello_request__free_unpacked(req, NULL);
        resp.enabled = 0;
        resp.tenant = (char *)"";
        resp.role = (char *)rpc_auth_role_name(SMP_ROLE_ADMIN);
        say_leadership(call, &resp);
        return reply_msg(call, &resp.base);
    }
    if (rpc_server_cert_identity(call, &cert_tenant, &cert_role)) {
        rc = hello_on_cert(a, call, req, cert_tenant, cert_role);
        auth_hello_request__free_unpacked(req, NULL);
        return rc;
    }
    if (req->token.len == 0) { /* a question (which identity?), not a credential */
        auth_hello_request__free_unpacked(req, NULL);
        return rpc_reply_error(call, SMP_EAUTH, "auth.HELLO: no token, and no client "
                                                "certificate of this connection maps to an "
                                                "identity (auth.certificates)");
    }
    rc = rpc_auth_check(a, req->token.data, req->token.len, &t);
    auth_hello_request__free_unpacked(req, NULL);
    if (rc < 0) {
        if (rpc_server_authenticate(call, NULL, SMP_ROLE_NONE) == SMP_ESTATE)
            return rpc_reply_error(call, SMP_ESTATE, "auth.HELLO: this connection already "
                                                     "presented a token");
        return rpc_reply_error(call, SMP_EAUTH, "auth.HELLO: the token is not known to this "
                                                "master");
    }
    if ((rc = rpc_server_authenticate(call, t->tenant, t->role)) < 0)
        return rpc_reply_error(call, rc, rc == SMP_ESTATE ? "auth.HELLO: this connection already "
                                                            "presented a token"
                                                          : "auth.HELLO: bad identity");
    resp.enabled = 1;
    resp.tenant = (char *)t->tenant;
    resp.role = (char *)rpc_auth_role_name(t->role);
    say_leadership(call, &resp);
    return reply_msg(call, &resp.base);
}

typedef struct rules_acc {
    AuthRule *rules;
    AuthRule **ptrs;
    size_t n, cap;
} rules_acc;

static int count_rule(void *arg, uint32_t service, const char *sname, uint32_t method,
                      const char *mname, smp_role role)
{
    (void)service, (void)sname, (void)method, (void)mname, (void)role;
    ((rules_acc *)arg)->cap++;
    return 0;
}

static int add_rule(void *arg, uint32_t service, const char *sname, uint32_t method,
                    const char *mname, smp_role role)
{
    rules_acc *acc = arg;
    AuthRule *r;
    if (acc->n >= acc->cap) return 1;
    r = &acc->rules[acc->n];
    auth_rule__init(r);
    r->service = service;
    r->service_name = (char *)sname;
    r->method = method;
    r->method_name = (char *)mname;
    r->role = (char *)rpc_auth_role_name(role);
    acc->ptrs[acc->n++] = r;
    return 0;
}

/* auth.RULES: every registered method and its rule, in routing-table order. */
static int h_rules(void *ctx, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    rpc_auth *a = ctx;
    rules_acc acc = {0};
    AuthRulesResponse resp = AUTH_RULES_RESPONSE__INIT;
    int rc;
    (void)body, (void)len;
    rpc_server_each_method(a->srv, count_rule, &acc);
    acc.rules = calloc(acc.cap ? acc.cap : 1, sizeof(*acc.rules));
    acc.ptrs = calloc(acc.cap ? acc.cap : 1, sizeof(*acc.ptrs));
    if (acc.rules == NULL || acc.ptrs == NULL) {
        rc = rpc_reply_error(call, SMP_ENOMEM, "auth.RULES: out of memory");
        goto free_acc;
    }
    rpc_server_each_method(a->srv, add_rule, &acc);
    resp.n_rules = acc.n;
    resp.rules = acc.ptrs;
    rc = reply_msg(call, &resp.base);
free_acc:
    free(acc.rules);
    free(acc.ptrs);
    return rc;
}

/* rpc_cert_identify_fn of the server: rpc_auth_identify_cert. */
static int identify_cert(void *arg, struct x509_st *leaf, const char **tenant, smp_role *role,
                         char *note, size_t cap)
{
    return rpc_auth_identify_cert(arg, leaf, tenant, role, note, cap);
}

static const smp_rpc_method auth_methods[] = {
    {sizeof(smp_rpc_method), AUTH_METHOD__AUTH_HELLO, "HELLO", h_hello, RPC_ROLE_ANYONE},
    {sizeof(smp_rpc_method), AUTH_METHOD__AUTH_RULES, "RULES", h_rules, SMP_ROLE_ADMIN},
};

int rpc_auth_serve(rpc_auth *a, rpc_server *srv)
{
    int rc;
    if (a == NULL || srv == NULL) return SMP_EINVAL;
    a->srv = srv;
    rc = rpc_server_add_service(srv, HOST_SERVICE__HOST_SERVICE_AUTH, "auth", auth_methods,
                                sizeof(auth_methods) / sizeof(auth_methods[0]), a);
    if (rc == SMP_OK) rpc_server_set_auth(srv, a->enabled);
    if (rc == SMP_OK && a->enabled && a->n_certs > 0)
        rpc_server_set_cert_identify(srv, identify_cert, a);
    return rc;
}
