/* test_auth_rules.c -- every RPC method of a running master (the host's
 * services and the weight plugin's) against every kind of caller it must
 * refuse, table-driven from the master's own routing table (issue 19).
 *
 * The master lists its registered methods and their rules (auth.RULES). Each
 * must appear in this file's table with the role expected of it: a method
 * added without a rule ("none"), with another rule, or missing from the
 * table fails the test, so no RPC is added without deciding who may call
 * it. Then each method is called
 *   - on a connection that presented no token          -> SMP_EAUTH,
 *   - on one whose token was refused                   -> SMP_EAUTH,
 *   - with a reader's token where a writer is needed,
 *     or a writer's or a reader's where an admin is    -> SMP_EFORBIDDEN,
 *   - with another tenant's writer token, on tenant a's
 *     revision, operation or objects                   -> as if absent
 *     (NOT_FOUND, exists false, an empty list), FORBIDDEN for admin methods,
 * each with a message naming the cause, and the state the admin sees (every
 * object key, both tenants' revisions and their generations, the object
 * count) is the same afterwards: nothing changed. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "auth_fixture.h"
#include "weight_model.h"
#include "host_rpc.pb-c.h"

#define AUTH_SVC HOST_SERVICE__HOST_SERVICE_AUTH

/* Every method a master with the weight plugin serves, and its rule. */
typedef struct rule {
    const char *service;
    const char *method;
    const char *role;
    int other_tenant; /* what tenant b's writer gets on tenant a's things */
} rule;

enum { OT_NOT_FOUND_WM = 1, OT_NOT_FOUND, OT_FORBIDDEN, OT_EMPTY_OK, OT_SKIP };

static const rule table[] = {
    {"objects", "put_start", "writer", OT_FORBIDDEN},
    {"objects", "put_end", "writer", OT_NOT_FOUND},
    {"objects", "put_revoke", "writer", OT_NOT_FOUND},
    {"objects", "get_replicas", "reader", OT_NOT_FOUND},
    {"objects", "exists", "reader", OT_EMPTY_OK},
    {"objects", "remove", "writer", OT_NOT_FOUND},
    {"objects", "remove_prefix", "admin", OT_FORBIDDEN},
    {"objects", "list", "reader", OT_EMPTY_OK},
    {"objects", "group_set_managed", "admin", OT_FORBIDDEN},
    {"objects", "release_read_leases", "reader", OT_NOT_FOUND},
    {"objects", "report_corrupt", "reader", OT_NOT_FOUND},
    {"admin", "status", "admin", OT_FORBIDDEN},
    {"admin", "snapshot", "admin", OT_FORBIDDEN},
    {"admin", "gate_confirm", "admin", OT_FORBIDDEN},
    {"admin", "plugin_list", "admin", OT_FORBIDDEN},
    {"admin", "plugin_reload", "admin", OT_FORBIDDEN},
    {"admin", "plugin_disable", "admin", OT_FORBIDDEN},
    {"admin", "plugin_enable", "admin", OT_FORBIDDEN},
    {"admin", "fsck", "admin", OT_FORBIDDEN},
    {"nodes", "register", "admin", OT_FORBIDDEN},
    {"nodes", "poll", "admin", OT_FORBIDDEN},
    {"nodes", "inventory", "admin", OT_FORBIDDEN},
    {"auth", "HELLO", "anyone", OT_SKIP},
    {"auth", "RULES", "admin", OT_FORBIDDEN},
    {"weight", "IMPORT_BEGIN", "writer", OT_NOT_FOUND_WM},
    {"weight", "IMPORT_COMMIT", "writer", OT_NOT_FOUND_WM},
    {"weight", "IMPORT_ABORT", "writer", OT_NOT_FOUND_WM},
    {"weight", "GET_METADATA", "reader", OT_NOT_FOUND_WM},
    {"weight", "IS_EXIST", "reader", OT_NOT_FOUND_WM},
    {"weight", "GET_SIZE", "reader", OT_NOT_FOUND_WM},
    {"weight", "LIST", "reader", OT_EMPTY_OK},
    {"weight", "UPDATE_POLICY", "writer", OT_NOT_FOUND_WM},
    {"weight", "LEASE_ACQUIRE", "reader", OT_NOT_FOUND_WM},
    {"weight", "LEASE_RENEW", "reader", OT_NOT_FOUND_WM},
    {"weight", "LEASE_RELEASE", "reader", OT_NOT_FOUND_WM},
    {"weight", "MIGRATE", "writer", OT_NOT_FOUND_WM},
    {"weight", "GET_OPERATION", "reader", OT_NOT_FOUND_WM},
    {"weight", "REMOVE", "writer", OT_NOT_FOUND_WM},
    {"weight", "UPSERT_BEGIN", "writer", OT_NOT_FOUND_WM},
    {"weight", "UPSERT_STATUS", "reader", OT_NOT_FOUND_WM},
    {"weight", "REPAIR", "writer", OT_NOT_FOUND_WM},
};
#define N_RULES (sizeof(table) / sizeof(table[0]))

/* What tenant a owns, for the bodies of the calls. */
typedef struct target {
    Wmrpc__WeightIdentity id;
    char payload_key[1200];
    uint64_t op_id;
} target;

/* The request body for a method: each names tenant a's revision (identity
 * first: every weight request but LIST and GET_OPERATION starts with it),
 * operation or payload object. Other services: empty. malloc'd. */
static uint8_t *body_for(const AuthRule *r, const target *t, size_t *len)
{
    uint8_t *b;
    if (strcmp(r->service_name, "weight") == 0) {
        if (strcmp(r->method_name, "LIST") == 0) {
            Wmrpc__ListRequest q = WMRPC__LIST_REQUEST__INIT;
            q.tenant = "a";
            *len = wmrpc__list_request__get_packed_size(&q);
            b = malloc(*len + 1);
            wmrpc__list_request__pack(&q, b);
        } else if (strcmp(r->method_name, "GET_OPERATION") == 0) {
            Wmrpc__OperationRequest q = WMRPC__OPERATION_REQUEST__INIT;
            q.operation_id = t->op_id;
            *len = wmrpc__operation_request__get_packed_size(&q);
            b = malloc(*len + 1);
            wmrpc__operation_request__pack(&q, b);
        } else {
            Wmrpc__IdentityRequest q = WMRPC__IDENTITY_REQUEST__INIT;
            q.identity = (Wmrpc__WeightIdentity *)&t->id;
            *len = wmrpc__identity_request__get_packed_size(&q);
            b = malloc(*len + 1);
            wmrpc__identity_request__pack(&q, b);
        }
    } else if (strcmp(r->service_name, "objects") == 0) {
        KeyRequest q = KEY_REQUEST__INIT; /* key (or prefix, group) is field 1 of each */
        q.key = (char *)t->payload_key;
        *len = key_request__get_packed_size(&q);
        b = malloc(*len + 1);
        key_request__pack(&q, b);
    } else {
        *len = 0;
        b = malloc(1);
    }
    assert_non_null(b);
    return b;
}

/* Call r's method on c with t's body: the status, the error message (or the
 * body's text) in msg, the reply body in *out (caller frees). */
static int call(rpcc_conn *c, const AuthRule *r, const target *t, char *msg, size_t cap,
                uint8_t **out, size_t *out_len)
{
    size_t len;
    uint8_t *body = body_for(r, t, &len), *resp = NULL;
    size_t rlen = 0;
    char *err = NULL;
    int status = 0;
    int rc = rpcc_call(c, r->service, r->method, body, len, &status, &resp, &rlen, &err);
    free(body);
    if (rc < 0) fail_msg("%s.%s: transport %d %s", r->service_name, r->method_name, rc,
                         rpcc_last_error(c));
    /* the host's message, and a weight refusal's sentence (its body) */
    snprintf(msg, cap, "%s | %.*s", err ? err : "", status != 0 ? (int)rlen : 0,
             status != 0 && resp != NULL ? (const char *)resp : "");
    free(err);
    if (out != NULL) {
        *out = resp;
        *out_len = rlen;
    } else {
        free(resp);
    }
    return status;
}

/* The master's rules, asked as the admin. */
static AuthRulesResponse *fetch_rules(wr_fixture *f)
{
    int status = -1;
    uint8_t *resp = NULL;
    size_t rlen = 0;
    assert_int_equal(rpcc_call(f->rpc, AUTH_SVC, AUTH_METHOD__AUTH_RULES, NULL, 0, &status, &resp,
                               &rlen, NULL),
                     0);
    assert_int_equal(status, 0);
    AuthRulesResponse *r = auth_rules_response__unpack(NULL, rlen, resp);
    free(resp);
    assert_non_null(r);
    return r;
}

/* Everything the admin sees that a refused call could have changed. */
static char *state_text(wr_fixture *f)
{
    size_t cap = 1 << 16, used = 0;
    char *s = calloc(1, cap);
    char **keys = NULL, *next = NULL;
    size_t n = 0;
    kvc_status st;
    assert_non_null(s);
    assert_int_equal(kvc_list(f->kv, "", NULL, 1000, &keys, &n, &next), 0);
    for (size_t i = 0; i < n; i++) used += (size_t)snprintf(s + used, cap - used, "key %s\n", keys[i]);
    kvc_list_free(keys, n, next);
    const char *tenants[] = {"a", "b"};
    for (int t = 0; t < 2; t++) {
        Wmrpc__ListRequest q = WMRPC__LIST_REQUEST__INIT;
        Wmrpc__ListResponse *lr = NULL;
        q.tenant = (char *)tenants[t];
        q.include_deleted = 1;
        assert_int_equal(wr_call(f, WMRPC__WEIGHT_METHOD__WEIGHT_LIST, &q.base,
                                 &wmrpc__list_response__descriptor, (ProtobufCMessage **)&lr),
                         0);
        for (size_t i = 0; i < lr->n_revisions; i++) {
            const Wmrpc__WeightMetadata *m = lr->revisions[i];
            used += (size_t)snprintf(s + used, cap - used, "rev %s/%s/%s@%" PRIu64 " av %u gen %" PRIu64
                                     " op %" PRIu64 "\n", m->identity->tenant,
                                     m->identity->namespace_id, m->identity->resource_id,
                                     m->identity->generation, m->availability,
                                     m->metadata_generation, m->operation_id);
        }
        wmrpc__list_response__free_unpacked(lr, NULL);
    }
    assert_int_equal(kvc_status_get(f->kv, &st), 0);
    snprintf(s + used, cap - used, "objects %" PRIu64 "\n", st.objects);
    return s;
}

/* The admin's view now is before's (which is freed). */
static void assert_unchanged(wr_fixture *f, char *before)
{
    af_as(f, AF_ADMIN);
    char *after = state_text(f);
    assert_string_equal(before, after);
    free(before);
    free(after);
}

static const rule *rule_of(const AuthRule *r)
{
    for (size_t i = 0; i < N_RULES; i++)
        if (strcmp(table[i].service, r->service_name) == 0 &&
            strcmp(table[i].method, r->method_name) == 0)
            return &table[i];
    return NULL;
}

static int role_rank(const char *role)
{
    return strcmp(role, "reader") == 0 ? 1 : strcmp(role, "writer") == 0 ? 2
         : strcmp(role, "admin") == 0  ? 3 : 0;
}

/* Who calls, for the refusal matrix: one connection per kind of caller,
 * each proving its identity the same way (tokens, or client certificates). */
typedef struct callers {
    const char *how;           /* "token" or "certificate", for messages */
    rpcc_conn *anon;           /* not authenticated */
    rpcc_conn *wrong;          /* its credential refused */
    const char *anon_says, *wrong_says; /* what their refusals must say */
    rpcc_conn *a_writer, *a_reader, *b_writer;
} callers;

static void callers_close(callers *k)
{
    rpcc_close(k->anon);
    rpcc_close(k->wrong);
    rpcc_close(k->a_writer);
    rpcc_close(k->a_reader);
    rpcc_close(k->b_writer);
}

/* A connection to endpoint presenting token ("": none). */
static rpcc_conn *connect_token(const char *endpoint, const char *token)
{
    char err[512];
    rpcc_conn *c = NULL;
    rpcc_options o = {.timeout_ms = 10000, .token = token};
    if (rpcc_connect(endpoint, &o, &c, err, sizeof(err)) < 0) fail_msg("connect: %s", err);
    return c;
}

/* Tenant a (f connected as its writer) publishes a revision and migrates
 * it (an operation); t names them and a payload object. */
static void publish_target(wr_fixture *f, target *t)
{
    wr_upload u;
    memset(t, 0, sizeof(*t));
    memset(&u, 0, sizeof(u));
    wr_set_identity(&t->id, "a", "ns", "model", 1);
    u.n = 2;
    u.sizes[0] = 4096;
    u.sizes[1] = 4096;
    Wmrpc__MetadataResponse *pub = wr_publish(f, &t->id, WR_RS_HOT, WR_MODE_MANUAL, &u);
    Wmrpc__MetadataResponse *mig = NULL;
    assert_int_equal(wr_migrate(f, &t->id, WR_RS_COLD, pub->metadata->metadata_generation, &mig), 0);
    t->op_id = mig->metadata->operation_id;
    assert_true(t->op_id > 0);
    wmrpc__operation_response__free_unpacked(wr_wait_op(f, t->op_id, 30000), NULL);
    wr_payload_key(&u, 0, t->payload_key, sizeof(t->payload_key));
    wmrpc__metadata_response__free_unpacked(pub, NULL);
    wmrpc__metadata_response__free_unpacked(mig, NULL);
}

/* The table and the master agree on every method and its rule. */
static void check_table(const AuthRulesResponse *rules)
{
    size_t seen = 0;
    for (size_t i = 0; i < rules->n_rules; i++) {
        const AuthRule *r = rules->rules[i];
        const rule *want = rule_of(r);
        if (want == NULL)
            fail_msg("%s.%s (service %u method %u) is registered with rule '%s' but this test's "
                     "table has no entry for it: decide its role and add it",
                     r->service_name, r->method_name, r->service, r->method, r->role);
        if (strcmp(r->role, "none") == 0)
            fail_msg("%s.%s has no authorization rule", r->service_name, r->method_name);
        if (strcmp(want->role, r->role) != 0)
            fail_msg("%s.%s: the master's rule is '%s', expected '%s'", r->service_name,
                     r->method_name, r->role, want->role);
        seen++;
    }
    assert_int_equal(seen, N_RULES);
}

/* Every method refused to k's unauthenticated and refused callers, to every
 * role below its rule, and (on tenant a's things) to tenant b's writer. */
static void refusal_matrix(const AuthRulesResponse *rules, const target *t, const callers *k)
{
    char msg[2048];
    for (size_t i = 0; i < rules->n_rules; i++) {
        const AuthRule *r = rules->rules[i];
        const rule *want = rule_of(r);
        int st;
        if (strcmp(r->role, "anyone") == 0) continue; /* HELLO itself */

        st = call(k->anon, r, t, msg, sizeof(msg), NULL, NULL);
        if (st != SMP_EAUTH || strstr(msg, k->anon_says) == NULL)
            fail_msg("%s.%s unauthenticated (%s): %d '%s'", r->service_name, r->method_name, k->how,
                     st, msg);
        st = call(k->wrong, r, t, msg, sizeof(msg), NULL, NULL);
        if (st != SMP_EAUTH || strstr(msg, k->wrong_says) == NULL)
            fail_msg("%s.%s with a refused %s: %d '%s'", r->service_name, r->method_name, k->how, st,
                     msg);

        /* every role below the rule: a writer's rule is refused to a
         * reader, an admin's to a writer and to a reader */
        for (af_who low = AF_A_WRITER; low <= AF_A_READER; low++) {
            if (role_rank(r->role) <= (low == AF_A_WRITER ? 2 : 1)) continue;
            st = call(low == AF_A_WRITER ? k->a_writer : k->a_reader, r, t, msg, sizeof(msg), NULL,
                      NULL);
            if (st != SMP_EFORBIDDEN || strstr(msg, "needs role") == NULL)
                fail_msg("%s.%s as %s by %s: %d '%s'", r->service_name, r->method_name,
                         low == AF_A_WRITER ? "a writer" : "a reader", k->how, st, msg);
        }

        /* tenant b's writer on tenant a's things */
        uint8_t *resp = NULL;
        size_t rlen = 0;
        st = call(k->b_writer, r, t, msg, sizeof(msg), &resp, &rlen);
        switch (want->other_tenant) {
        case OT_NOT_FOUND_WM:
            if (st != WR_E_NOT_FOUND || strstr(msg, "no ") == NULL)
                fail_msg("%s.%s as tenant b (%s): %d '%s'", r->service_name, r->method_name, k->how,
                         st, msg);
            break;
        case OT_NOT_FOUND:
            if (st != SMP_ENOTFOUND)
                fail_msg("%s.%s as tenant b (%s): %d '%s'", r->service_name, r->method_name, k->how,
                         st, msg);
            break;
        case OT_FORBIDDEN:
            if (st != SMP_EFORBIDDEN || strstr(msg, "tenant") == NULL)
                fail_msg("%s.%s as tenant b (%s): %d '%s'", r->service_name, r->method_name, k->how,
                         st, msg);
            break;
        case OT_EMPTY_OK:
            if (st != 0)
                fail_msg("%s.%s as tenant b (%s): %d '%s'", r->service_name, r->method_name, k->how,
                         st, msg);
            if (strcmp(r->method_name, "exists") == 0) {
                ExistsResponse *e = exists_response__unpack(NULL, rlen, resp);
                assert_non_null(e);
                assert_false(e->exists);
                exists_response__free_unpacked(e, NULL);
            } else if (strcmp(r->service_name, "objects") == 0) {
                ListResponse *l = list_response__unpack(NULL, rlen, resp);
                assert_non_null(l);
                assert_int_equal(l->n_keys, 0);
                list_response__free_unpacked(l, NULL);
            } else {
                Wmrpc__ListResponse *l = wmrpc__list_response__unpack(NULL, rlen, resp);
                assert_non_null(l);
                assert_int_equal(l->n_revisions, 0);
                wmrpc__list_response__free_unpacked(l, NULL);
            }
            break;
        default:
            break;
        }
        free(resp);
    }
}

/* Every registered method has the rule this table expects, and every method
 * is refused to a caller without a token, with a refused token, with too low
 * a role and (on tenant a's things) with tenant b's token; nothing changes. */
static void test_auth_every_method_refuses_bad_callers(void **state)
{
    wr_fixture *f = *state;
    target t;
    af_start(f, "auth-rules");
    af_as(f, AF_A_WRITER);
    publish_target(f, &t);

    af_as(f, AF_ADMIN);
    char *before = state_text(f);
    AuthRulesResponse *rules = fetch_rules(f);
    check_table(rules);

    callers k = {
        .how = "token",
        .anon = af_raw(f),  /* no token */
        .wrong = af_raw(f), /* a token the master does not know */
        .anon_says = "present a token first",
        .wrong_says = "was refused",
        .a_writer = connect_token(f->m.socket, af_token(AF_A_WRITER)),
        .a_reader = connect_token(f->m.socket, af_token(AF_A_READER)),
        .b_writer = connect_token(f->m.socket, af_token(AF_B_WRITER)),
    };
    assert_int_equal(af_hello(k.wrong, af_token(AF_WRONG)), SMP_EAUTH);
    /* a refused connection cannot try another identity */
    assert_int_equal(af_hello(k.wrong, af_token(AF_ADMIN)), SMP_ESTATE);
    refusal_matrix(rules, &t, &k);
    callers_close(&k);

    /* each kind of refusal was counted */
    char *metrics = NULL;
    assert_int_equal(hx_http_get(&f->m, "/metrics", &metrics), 200);
    assert_non_null(strstr(metrics, "store_rpc_auth_refusals_total{reason=\"unauthenticated\"} "));
    assert_non_null(strstr(metrics, "store_rpc_auth_refusals_total{reason=\"forbidden\"} "));
    assert_null(strstr(metrics, "store_rpc_auth_refusals_total{reason=\"unauthenticated\"} 0\n"));
    free(metrics);

    assert_unchanged(f, before);
    auth_rules_response__free_unpacked(rules, NULL);
}

/* A connection to tcp over TLS with certificate name and no token. */
static rpcc_conn *connect_cert(wr_fixture *f, const char *tcp, const char *name)
{
    char ca[300], pem[300], key[300], err[512];
    rpcc_conn *c = NULL;
    snprintf(ca, sizeof(ca), "%s/ca.pem", f->m.dir);
    snprintf(pem, sizeof(pem), "%s/%s.pem", f->m.dir, name);
    snprintf(key, sizeof(key), "%s/%s.key", f->m.dir, name);
    rpcc_options o = {.timeout_ms = 10000, .tls_ca = ca, .tls_cert = pem, .tls_key = key, .token = ""};
    if (rpcc_connect(tcp, &o, &c, err, sizeof(err)) < 0) fail_msg("connect as %s: %s", name, err);
    return c;
}

/* Methods that change nothing, called by identities their rule admits. */
static int read_only(const AuthRule *r)
{
    static const char *const names[] = {
        "objects.get_replicas", "objects.exists", "objects.list", "admin.status",
        "admin.plugin_list", "auth.RULES", "weight.GET_METADATA", "weight.IS_EXIST",
        "weight.GET_SIZE", "weight.LIST", "weight.GET_OPERATION", "weight.UPSERT_STATUS",
    };
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", r->service_name, r->method_name);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(names[i], full) == 0) return 1;
    return 0;
}

/* The same matrix with client certificates (auth.certificates, no token)
 * on the master's TLS port: unauthenticated is the unmapped certificate,
 * refused is a certificate whose connection presented another identity's
 * token; the roles and tenant b are certificates. Then every method that
 * changes nothing, called by each identity its rule admits, answers a
 * certificate exactly as it answers the same identity's token (status, and
 * the body but for get_replicas' tickets and status' counters); nothing
 * changed. */
static void test_auth_every_method_refuses_bad_certificates(void **state)
{
    wr_fixture *f = *state;
    target t;
    char tcp[64], yaml[8192], msg[2048], msg2[2048];
    af_start_certs(f, "auth-rules-certs", tcp, sizeof(tcp), yaml, sizeof(yaml));
    af_as_cert(f, tcp, "a-writer"); /* tenant a's revision, published by a certificate */
    publish_target(f, &t);
    unsetenv("WM_TLS_CA");
    unsetenv("WM_TLS_CERT");
    unsetenv("WM_TLS_KEY");

    af_as(f, AF_ADMIN); /* the Unix socket */
    char *before = state_text(f);
    AuthRulesResponse *rules = fetch_rules(f);
    check_table(rules);

    callers k = {
        .how = "certificate",
        .anon = connect_cert(f, tcp, "client"), /* verified, mapped to nothing */
        .wrong = connect_cert(f, tcp, "a-reader"),
        .anon_says = "(subject CN=client) matches no auth.certificates entry; present a token first",
        .wrong_says = "client certificate proves tenant a, role reader, and the token presented "
                      "does not",
        .a_writer = connect_cert(f, tcp, "a-writer"),
        .a_reader = connect_cert(f, tcp, "a-reader"),
        .b_writer = connect_cert(f, tcp, "b-writer"),
    };
    assert_string_equal(rpcc_auth_tenant(k.anon), "");
    assert_string_equal(rpcc_auth_tenant(k.a_writer), "a");
    assert_string_equal(rpcc_auth_role(k.a_writer), "writer");
    assert_string_equal(rpcc_auth_tenant(k.b_writer), "b");
    assert_int_equal(af_hello(k.wrong, af_token(AF_B_WRITER)), SMP_EAUTH);
    refusal_matrix(rules, &t, &k);

    /* allowed reads: a certificate is answered as its identity's token */
    struct {
        const char *cert;
        af_who token;
        int rank;
    } ids[] = {{"a-reader", AF_A_READER, 1}, {"a-writer", AF_A_WRITER, 2},
               {"b-writer", AF_B_WRITER, 2}, {"ops-admin", AF_ADMIN, 3}};
    size_t compared = 0;
    for (size_t j = 0; j < sizeof(ids) / sizeof(ids[0]); j++) {
        rpcc_conn *by_cert = connect_cert(f, tcp, ids[j].cert);
        rpcc_conn *by_token = connect_token(f->m.socket, af_token(ids[j].token));
        for (size_t i = 0; i < rules->n_rules; i++) {
            const AuthRule *r = rules->rules[i];
            if (!read_only(r) || role_rank(r->role) > ids[j].rank) continue;
            uint8_t *b1 = NULL, *b2 = NULL;
            size_t l1 = 0, l2 = 0;
            int s1 = call(by_cert, r, &t, msg, sizeof(msg), &b1, &l1);
            int s2 = call(by_token, r, &t, msg2, sizeof(msg2), &b2, &l2);
            if (s1 != s2 || strcmp(msg, msg2) != 0)
                fail_msg("%s.%s as %s: certificate %d '%s', token %d '%s'", r->service_name,
                         r->method_name, ids[j].cert, s1, msg, s2, msg2);
            int same_body = strcmp(r->method_name, "get_replicas") == 0 ||
                            strcmp(r->method_name, "status") == 0 ||
                            (l1 == l2 && (l1 == 0 || memcmp(b1, b2, l1) == 0));
            if (!same_body)
                fail_msg("%s.%s as %s: the certificate's answer (%zu bytes) is not the token's "
                         "(%zu bytes)", r->service_name, r->method_name, ids[j].cert, l1, l2);
            free(b1);
            free(b2);
            compared++;
        }
        rpcc_close(by_cert);
        rpcc_close(by_token);
    }
    assert_true(compared >= 30);
    callers_close(&k);

    assert_true(hx_metric(&f->m, "store_rpc_auth_certificates_total{result=\"mapped\"}") >= 8);
    assert_true(hx_metric(&f->m, "store_rpc_auth_hellos_total{result=\"contradicts_certificate\"}") >=
                1);
    assert_unchanged(f, before);
    auth_rules_response__free_unpacked(rules, NULL);
}

/* A token the master does not know fails the client's connect with the
 * master's reason; the same client with the right token is served;
 * weightctl says the master refused it (it said it could not reach it); and
 * the master's log names the client, a few lines a minute, the rest
 * counted. */
static void test_auth_refused_token_fails_connect(void **state)
{
    wr_fixture *f = *state;
    char err[512] = "";
    rpcc_conn *c = NULL;
    af_start(f, "auth-connect");
    rpcc_options o = {.timeout_ms = 5000, .token = af_token(AF_WRONG)};
    assert_int_equal(rpcc_connect(f->m.socket, &o, &c, err, sizeof(err)), SMP_EAUTH);
    assert_null(c);
    assert_non_null(strstr(err, "auth.HELLO: the token is not known to this master"));
    o.token = af_token(AF_A_READER);
    assert_int_equal(rpcc_connect(f->m.socket, &o, &c, err, sizeof(err)), 0);
    assert_string_equal(rpcc_auth_tenant(c), "a");
    assert_string_equal(rpcc_auth_role(c), "reader");
    rpcc_close(c);
    /* the refusal is counted */
    char *metrics = NULL;
    assert_int_equal(hx_http_get(&f->m, "/metrics", &metrics), 200);
    assert_non_null(strstr(metrics, "store_rpc_auth_hellos_total{result=\"refused\"} 1"));
    free(metrics);
    /* weightctl says the master refused it, not that it could not reach it
     * (kv goes through the object service, ls through the weight service) */
    char out[2048];
    setenv("WEIGHT_TOKEN", af_token(AF_WRONG), 1);
    const char *cmds[] = {"kv ls", "ls", "plugin list"};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        assert_int_not_equal(wx_weightctl(&f->m, out, sizeof(out), cmds[i]), 0);
        if (strstr(out, "refused this client") == NULL || strstr(out, "not known") == NULL ||
            strstr(out, "cannot reach") != NULL)
            fail_msg("weightctl %s with an unknown token: %s", cmds[i], out);
    }
    unsetenv("WEIGHT_TOKEN");

    /* the master's log names the client: every refusal is a line, or is
     * counted in a line summing up those not logged (a few a minute are:
     * anyone who reaches the port can cause them) -- 12 more to be sure */
    for (int i = 0; i < 12; i++) {
        o.token = af_token(AF_WRONG);
        assert_int_equal(rpcc_connect(f->m.socket, &o, &c, err, sizeof(err)), SMP_EAUTH);
    }
    long long refusals = wx_metric(&f->m, "store_rpc_auth_hellos_total{result=\"refused\"}");
    wr_disconnect(f);
    assert_int_equal(hx_stop(&f->m), 0); /* the last sum is written at the stop */
    size_t len = 0;
    uint8_t *bytes = hx_read_file(f->m.log, &len);
    char *log = bytes != NULL ? calloc(1, len + 1) : NULL, *at; /* as a string */
    long long lines = 0, counted = 0;
    assert_non_null(log);
    memcpy(log, bytes, len);
    free(bytes);
    for (at = log; (at = strstr(at, "store_master: rpc: ")) != NULL; at++) {
        char line[512];
        long long n = 0;
        size_t k = strcspn(at, "\n");
        snprintf(line, sizeof(line), "%.*s", (int)k, at);
        if (sscanf(line, "store_master: rpc: %lld more client", &n) == 1) {
            counted += n;
        } else if (strstr(line, "store_master: rpc: client uid ") == line &&
                   strstr(line, " (Unix socket): auth.HELLO refused: its token is not known to "
                                "this master") != NULL) {
            lines++;
        } else {
            fail_msg("a line of the master's log: %s", line);
        }
    }
    free(log);
    if (lines < 1 || lines > 10 || lines + counted != refusals)
        fail_msg("%lld refusal lines and %lld counted for %lld refusals", lines, counted, refusals);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_auth_every_method_refuses_bad_callers, wr_setup,
                                        wr_teardown),
        cmocka_unit_test_setup_teardown(test_auth_every_method_refuses_bad_certificates, wr_setup,
                                        wr_teardown),
        cmocka_unit_test_setup_teardown(test_auth_refused_token_fails_connect, wr_setup,
                                        wr_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
