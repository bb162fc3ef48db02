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

/* Every registered method has the rule this table expects, and every method
 * is refused to a caller without a token, with a refused token, with too low
 * a role and (on tenant a's things) with tenant b's token; nothing changes. */
static void test_auth_every_method_refuses_bad_callers(void **state)
{
    wr_fixture *f = *state;
    target t;
    wr_upload u;
    char msg[2048];
    af_start(f, "auth-rules");

    /* tenant a publishes a revision and migrates it (an operation) */
    af_as(f, AF_A_WRITER);
    memset(&t, 0, sizeof(t));
    memset(&u, 0, sizeof(u));
    wr_set_identity(&t.id, "a", "ns", "model", 1);
    u.n = 2;
    u.sizes[0] = 4096;
    u.sizes[1] = 4096;
    Wmrpc__MetadataResponse *pub = wr_publish(f, &t.id, WR_RS_HOT, WR_MODE_MANUAL, &u);
    Wmrpc__MetadataResponse *mig = NULL;
    assert_int_equal(wr_migrate(f, &t.id, WR_RS_COLD, pub->metadata->metadata_generation, &mig), 0);
    t.op_id = mig->metadata->operation_id;
    assert_true(t.op_id > 0);
    wmrpc__operation_response__free_unpacked(wr_wait_op(f, t.op_id, 30000), NULL);
    wr_payload_key(&u, 0, t.payload_key, sizeof(t.payload_key));
    wmrpc__metadata_response__free_unpacked(pub, NULL);
    wmrpc__metadata_response__free_unpacked(mig, NULL);

    af_as(f, AF_ADMIN);
    char *before = state_text(f);
    AuthRulesResponse *rules = fetch_rules(f);

    /* the table and the master agree on every method and its rule */
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

    rpcc_conn *anon = af_raw(f);   /* no token */
    rpcc_conn *wrong = af_raw(f);  /* a token the master does not know */
    assert_int_equal(af_hello(wrong, af_token(AF_WRONG)), SMP_EAUTH);
    /* a refused connection cannot try another identity */
    assert_int_equal(af_hello(wrong, af_token(AF_ADMIN)), SMP_ESTATE);

    for (size_t i = 0; i < rules->n_rules; i++) {
        const AuthRule *r = rules->rules[i];
        const rule *want = rule_of(r);
        int st;
        if (strcmp(r->role, "anyone") == 0) continue; /* HELLO itself */

        st = call(anon, r, &t, msg, sizeof(msg), NULL, NULL);
        if (st != SMP_EAUTH || strstr(msg, "present a token first") == NULL)
            fail_msg("%s.%s without a token: %d '%s'", r->service_name, r->method_name, st, msg);
        st = call(wrong, r, &t, msg, sizeof(msg), NULL, NULL);
        if (st != SMP_EAUTH || strstr(msg, "was refused") == NULL)
            fail_msg("%s.%s with a refused token: %d '%s'", r->service_name, r->method_name, st, msg);

        /* every role below the rule: a writer's rule is refused to a
         * reader, an admin's to a writer and to a reader */
        for (af_who low = AF_A_WRITER; low <= AF_A_READER; low++) {
            if (role_rank(r->role) <= (low == AF_A_WRITER ? 2 : 1)) continue;
            af_as(f, low);
            st = call(f->rpc, r, &t, msg, sizeof(msg), NULL, NULL);
            if (st != SMP_EFORBIDDEN || strstr(msg, "needs role") == NULL)
                fail_msg("%s.%s as %s: %d '%s'", r->service_name, r->method_name,
                         low == AF_A_WRITER ? "a writer" : "a reader", st, msg);
        }

        /* tenant b's writer on tenant a's things */
        uint8_t *resp = NULL;
        size_t rlen = 0;
        af_as(f, AF_B_WRITER);
        st = call(f->rpc, r, &t, msg, sizeof(msg), &resp, &rlen);
        switch (want->other_tenant) {
        case OT_NOT_FOUND_WM:
            if (st != WR_E_NOT_FOUND || strstr(msg, "no ") == NULL)
                fail_msg("%s.%s as tenant b: %d '%s'", r->service_name, r->method_name, st, msg);
            break;
        case OT_NOT_FOUND:
            if (st != SMP_ENOTFOUND)
                fail_msg("%s.%s as tenant b: %d '%s'", r->service_name, r->method_name, st, msg);
            break;
        case OT_FORBIDDEN:
            if (st != SMP_EFORBIDDEN || strstr(msg, "tenant") == NULL)
                fail_msg("%s.%s as tenant b: %d '%s'", r->service_name, r->method_name, st, msg);
            break;
        case OT_EMPTY_OK:
            if (st != 0) fail_msg("%s.%s as tenant b: %d '%s'", r->service_name, r->method_name, st, msg);
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
    rpcc_close(anon);
    rpcc_close(wrong);

    /* each kind of refusal was counted */
    char *metrics = NULL;
    assert_int_equal(hx_http_get(&f->m, "/metrics", &metrics), 200);
    assert_non_null(strstr(metrics, "store_rpc_auth_refusals_total{reason=\"unauthenticated\"} "));
    assert_non_null(strstr(metrics, "store_rpc_auth_refusals_total{reason=\"forbidden\"} "));
    assert_null(strstr(metrics, "store_rpc_auth_refusals_total{reason=\"unauthenticated\"} 0\n"));
    free(metrics);

    af_as(f, AF_ADMIN);
    char *after = state_text(f);
    assert_string_equal(before, after);
    free(before);
    free(after);
    auth_rules_response__free_unpacked(rules, NULL);
}

/* A token the master does not know fails the client's connect with the
 * master's reason; the same client with the right token is served. */
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
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_auth_every_method_refuses_bad_callers, wr_setup,
                                        wr_teardown),
        cmocka_unit_test_setup_teardown(test_auth_refused_token_fails_connect, wr_setup,
                                        wr_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
