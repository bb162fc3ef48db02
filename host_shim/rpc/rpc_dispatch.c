/* rpc_dispatch.c -- what the RPC server does with a request: routing,
 * authorization, limits, admission, calls and their replies.
 *
 * A decoded RpcRequest (rpc_envelope.h: the handler's body points into the
 * frame, nothing is copied) is routed through the service table to its
 * handler; the handler answers, now or later, with rpc_reply(), which frees
 * the call and sends the encoded RpcResponse unless its connection is gone.
 *
 * Authorization (rpc_auth.h): with credentials set (rpc_server_set_auth), a
 * connection proves who it is once, with auth.HELLO or (on TLS) with a
 * client certificate mapped at the handshake, and every request is
 * checked against its method's rule before admission and before its handler:
 * not authenticated SMP_EAUTH, a role below the rule SMP_EFORBIDDEN, a
 * method without a rule refused to everyone. The handler asks who called
 * with rpc_server_call_caller().
 *
 * Limits (rpc_limits.h, rpc_server_set_limits): every decoded request takes
 * one from its connection's and tenant's buckets or is answered SMP_EAGAIN;
 * a frame is charged to its connection and tenant when its length arrives
 * (a refused one is skipped unread and answered under the request_id of its
 * first bytes) and given back when it is answered. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_internal.h"
#include "rpc_envelope.h"
#include "rpc.pb-c.h"

/* -- Routing table --------------------------------------------------------- */

static rpc_service *find_service(rpc_server *s, uint32_t id)
{
    for (size_t i = 0; i < s->n_services; i++)
        if (s->services[i].id == id)
            return &s->services[i];
    return NULL;
}

static const rpc_method *find_method(const rpc_service *svc, uint32_t id)
{
    for (size_t i = 0; i < svc->n_methods; i++)
        if (svc->methods[i].id == id)
            return &svc->methods[i];
    return NULL;
}

/* The body a handler is given: never NULL (store_plugin.h), so an empty
 * one (the envelope decodes it as NULL) points at no bytes. */
static const uint8_t *rpc_body(const uint8_t *body)
{
    static const uint8_t none[1];
    return body != NULL ? body : none;
}

int rpc_server_add_service(rpc_server *s,
                           uint16_t service_id,
                           const char *name,
                           const smp_rpc_method *methods,
                           size_t n,
                           void *ctx)
{
    int rc = SMP_OK;
    size_t stride, i, j;
    const size_t need = offsetof(smp_rpc_method, handler) + sizeof(smp_rpc_handler);
    rpc_method *ms = NULL;
    rpc_service *grown;
    char *sname = NULL;

    if (s == NULL || (n > 0 && methods == NULL))
        return SMP_EINVAL;
    if (find_service(s, service_id) != NULL)
        return SMP_EEXIST;
    stride = n > 0 ? methods[0].struct_size : sizeof(smp_rpc_method);
    if (stride < need || stride % _Alignof(smp_rpc_method) != 0)
        return SMP_EINVAL;
    if (n > 0 && (ms = calloc(n, sizeof(*ms))) == NULL)
        return SMP_ENOMEM;
    for (i = 0; i < n; i++) {
        smp_rpc_method m;
        const uint8_t *p = (const uint8_t *)methods + i * stride;
        memset(&m, 0, sizeof(m));
        memcpy(&m, p, stride < sizeof(m) ? stride : sizeof(m));
        if (m.struct_size < need || m.handler == NULL) {
            rc = SMP_EINVAL;
            goto free_methods;
        }
        for (j = 0; j < i; j++) {
            if (ms[j].id == m.method_id) {
                rc = SMP_EINVAL;
                goto free_methods;
            }
        }
        ms[i].id = m.method_id;
        ms[i].handler = m.handler;
        /* a table older than ABI 1.2 has no rule; a plugin may not make a
         * method callable without authentication */
        ms[i].role = stride >= offsetof(smp_rpc_method, min_role) + sizeof(smp_role) ? m.min_role
                                                                                     : SMP_ROLE_NONE;
        if (ms[i].role > SMP_ROLE_ADMIN &&
            (ms[i].role != RPC_ROLE_ANYONE || service_id > SMP_RPC_HOST_SERVICE_MAX))
            ms[i].role = SMP_ROLE_NONE;
        if ((ms[i].name = rpc_dup_str(m.name)) == NULL) {
            rc = SMP_ENOMEM;
            goto free_methods;
        }
    }
    if ((sname = rpc_dup_str(name)) == NULL) {
        rc = SMP_ENOMEM;
        goto free_methods;
    }
    grown = realloc(s->services, (s->n_services + 1) * sizeof(*grown));
    if (grown == NULL) {
        rc = SMP_ENOMEM;
        goto free_name;
    }
    s->services = grown;
    s->services[s->n_services].id = service_id;
    s->services[s->n_services].name = sname;
    s->services[s->n_services].ctx = ctx;
    s->services[s->n_services].methods = ms;
    s->services[s->n_services].n_methods = n;
    s->n_services++;
    return SMP_OK;

free_name:
    free(sname);
free_methods:
    for (j = 0; ms != NULL && j < n; j++)
        free(ms[j].name);
    free(ms);
    return rc;
}

int rpc_server_remove_service(rpc_server *s, uint16_t service_id)
{
    rpc_service *svc;
    if (s == NULL)
        return SMP_EINVAL;
    if ((svc = find_service(s, service_id)) == NULL)
        return SMP_ENOTFOUND;
    for (size_t j = 0; j < svc->n_methods; j++)
        free(svc->methods[j].name);
    free(svc->methods);
    free(svc->name);
    *svc = s->services[s->n_services - 1];
    s->n_services--;
    return SMP_OK;
}

/* -- Calls ----------------------------------------------------------------- */

/* Send the answer of a call (unless its connection is gone) and free it. */
static int call_finish(smp_rpc_call *call,
                       int status,
                       const char *message,
                       const uint8_t *body,
                       size_t len)
{
    rpc_conn *c;
    rpc_server *s;
    int rc, aside;

    if (call == NULL)
        return SMP_EINVAL;
    if (call->held) {
        fprintf(stderr, "rpc: an answer to held service %" PRIu32 " method %" PRIu32
                " request %" PRIu64 " refused: the call waits for its holder\n",
                call->service, call->method, call->request_id);
        return SMP_EBUSY;
    }
    c = call->conn;
    s = c->srv;
    if (call == s->cur_call)
        s->cur_replied = 1;
    if (c->draining || c->closing) {
        s->st.replies_dropped++;
        rc = SMP_OK;
    } else {
        rc = rpc_conn_send(c, call->request_id, status, message, body, len);
    }
    rpc_limits_uncharge(&c->lim, call->charged_tenant, call->charged);
    aside = call->aside;
    free(call);
    c->ncalls--;
    s->st.calls_outstanding--;
    if (!aside)
        s->last_answer_ms = uv_now(s->loop);
    rpc_conn_set_reading(c);
    rpc_conn_unref(c);
    return rc;
}

int rpc_reply(smp_rpc_call *call, int status, const uint8_t *body, size_t len)
{
    char msg[96];
    const char *m = NULL;
    if (call != NULL && status < 0) {
        snprintf(msg, sizeof(msg), "service %" PRIu32 " method %" PRIu32 ": %s",
                 call->service, call->method, smp_strerror(status));
        m = msg;
    }
    return call_finish(call, status, m, body, len);
}

int rpc_reply_error(smp_rpc_call *call, int status, const char *message)
{
    return call_finish(call, status, message, NULL, 0);
}

void rpc_server_set_admission(rpc_server *s, rpc_admit_fn fn, void *arg)
{
    s->admit = fn;
    s->admit_arg = arg;
}

/* Answer a request SMP_ENOTLEADER with the leader's endpoint in field 5 of
 * RpcResponse. Rare (a client that found a standby), so protobuf-c packs it,
 * into the pending output like every reply (in order, through the TLS
 * session on a TLS connection). */
void rpc_conn_send_not_leader(rpc_conn *c, uint64_t request_id, const char *leader)
{
    rpc_server *s = c->srv;
    char msg[320];
    RpcResponse r = RPC_RESPONSE__INIT;
    uint8_t *p;
    if (c->closing) {
        s->st.replies_dropped++;
        return;
    }
    if (leader == NULL) leader = "";
    snprintf(msg, sizeof(msg), "this master is not the leader; %s%.256s",
             leader[0] ? "the leader is at " : "no leader is known yet", leader);
    r.request_id = request_id;
    r.status = SMP_ENOTLEADER;
    r.error = msg;
    r.leader = (char *)leader;
    size_t size = rpc_response__get_packed_size(&r);
    if (rpc_conn_frame_begin(c, size, &p) < 0) return;
    rpc_response__pack(&r, p);
    rpc_conn_frame_end(c, size);
    s->st.not_leader++;
    s->st.responses_error++;
    rpc_conn_set_reading(c);
}

/* The rule of method m of svc against the identity of connection c: SMP_OK,
 * or the refusal's code with a sentence naming the cause in msg. */
static int authorize(rpc_conn *c, const rpc_service *svc, const rpc_method *m, char *msg,
                     size_t cap)
{
    rpc_server *s = c->srv;
    if (m->role == RPC_ROLE_ANYONE) return SMP_OK;
    if (m->role < SMP_ROLE_READER || m->role > SMP_ROLE_ADMIN) {
        s->st.auth_no_rule++;
        snprintf(msg, cap, "auth: %s.%s has no authorization rule, so it is refused to everyone",
                 svc->name, m->name);
        return SMP_EFORBIDDEN;
    }
    if (c->auth_state != 1) {
        s->st.auth_unauthenticated++;
        snprintf(msg, cap, "auth: %s.%s needs an authenticated connection: %s%s%s", svc->name,
                 m->name, c->auth_note, c->auth_note[0] && c->auth_state == 0 ? "; " : "",
                 c->auth_state < 0 ? (c->auth_note[0] ? ""
                                      : "the token this connection presented was refused")
                                   : "present a token first (auth.HELLO; WEIGHT_TOKEN or "
                                     "--token-file for weightctl)");
        return SMP_EAUTH;
    }
    if (c->role < m->role) {
        s->st.auth_forbidden++;
        snprintf(msg, cap, "auth: %s.%s needs role %s; tenant %.128s has role %s", svc->name,
                 m->name, rpc_auth_role_name(m->role), c->tenant, rpc_auth_role_name(c->role));
        return SMP_EFORBIDDEN;
    }
    return SMP_OK;
}

void rpc_server_set_auth(rpc_server *s, int on)
{
    s->auth_on = on != 0;
}

int rpc_server_auth_on(const rpc_server *s)
{
    return s != NULL && s->auth_on;
}

/* -- Limits (rpc_limits.h) ------------------------------------------------ */

void rpc_server_set_limits(rpc_server *s, rpc_limits *l)
{
    rpc_limits_free(s->limits);
    s->limits = l;
}

int rpc_server_revision_quota(const smp_rpc_call *call, const char *tenant, uint64_t live,
                              uint64_t *limit)
{
    if (call == NULL || tenant == NULL) return SMP_EINVAL;
    /* an admin (an operator, a node) is not limited, as for rate and bytes */
    if (call->conn->srv->limits == NULL || call->conn->lim.exempt) {
        if (limit != NULL) *limit = 0;
        return SMP_OK;
    }
    return rpc_limits_revision_quota(call->conn->srv->limits, tenant, live, limit);
}

void rpc_server_limits_each(const rpc_server *s, rpc_server_refusals_fn fn, void *arg)
{
    if (s->limits != NULL) rpc_limits_each(s->limits, fn, arg);
}

/* The request_id of a frame from its first n bytes: field 1 comes first in
 * what every encoder of RpcRequest writes (rpc_envelope.c, protobuf-c);
 * 0 when it is not there. */
uint64_t rpc_prefix_request_id(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    if (n < 2 || p[0] != 0x08) return 0;
    for (size_t i = 1; i < n && i <= 10; i++) {
        v |= (uint64_t)(p[i] & 0x7f) << (7 * (i - 1));
        if (!(p[i] & 0x80)) return v;
    }
    return 0;
}

int rpc_server_leadership(const smp_rpc_call *call, const char **leader)
{
    const rpc_server *s = call->conn->srv;
    const char *named = NULL;
    *leader = "";
    if (s->admit == NULL || s->admit(s->admit_arg, 0, 0, 0, &named) != SMP_ENOTLEADER)
        return RPC_LEADS;
    *leader = named != NULL ? named : "";
    return RPC_STANDBY;
}

int rpc_server_authenticate(smp_rpc_call *call, const char *tenant, smp_role role)
{
    rpc_conn *c;
    if (call == NULL) return SMP_EINVAL;
    c = call->conn;
    if (c->auth_state != 0) return SMP_ESTATE;
    if (tenant == NULL) {
        c->auth_state = -1;
        c->srv->st.auth_hello_refused++;
        rpc_conn_log_refusal(c, "auth.HELLO refused: its token is not known to this master");
        return SMP_OK;
    }
    if (strlen(tenant) > RPC_AUTH_TENANT_MAX || role < SMP_ROLE_READER || role > SMP_ROLE_ADMIN)
        return SMP_EINVAL;
    snprintf(c->tenant, sizeof(c->tenant), "%s", tenant);
    c->role = role;
    c->auth_state = 1;
    rpc_limits_identify(c->srv->limits, &c->lim, tenant, role);
    c->srv->st.auth_hello_ok++;
    return SMP_OK;
}

void rpc_server_set_cert_identify(rpc_server *s, rpc_cert_identify_fn fn, void *arg)
{
    s->cert_identify = fn;
    s->cert_identify_arg = arg;
}

void rpc_conn_identify_cert(rpc_conn *c)
{
    rpc_server *s = c->srv;
    const char *tenant = NULL;
    smp_role role = SMP_ROLE_NONE;
    X509 *leaf;
    if (s->cert_identify == NULL || c->auth_state != 0) return;
    leaf = SSL_get0_peer_certificate(c->tls.ssl);
    if (leaf == NULL || SSL_get_verify_result(c->tls.ssl) != X509_V_OK) return;
    if (s->cert_identify(s->cert_identify_arg, leaf, &tenant, &role, c->auth_note,
                         sizeof(c->auth_note)) != SMP_OK ||
        tenant == NULL || strlen(tenant) > RPC_AUTH_TENANT_MAX || role < SMP_ROLE_READER ||
        role > SMP_ROLE_ADMIN) {
        s->st.auth_cert_unmapped++;
        return;
    }
    snprintf(c->tenant, sizeof(c->tenant), "%s", tenant);
    c->role = role;
    c->auth_state = 1;
    c->auth_by_cert = 1;
    c->auth_note[0] = '\0';
    rpc_limits_identify(s->limits, &c->lim, tenant, role);
    s->st.auth_cert_ok++;
}

int rpc_server_cert_identity(const smp_rpc_call *call, const char **tenant, smp_role *role)
{
    const rpc_conn *c = call != NULL ? call->conn : NULL;
    if (c == NULL || c->auth_state != 1 || !c->auth_by_cert) return 0;
    *tenant = c->tenant;
    *role = c->role;
    return 1;
}

void rpc_server_deauthenticate(smp_rpc_call *call, const char *why)
{
    rpc_conn *c = call->conn;
    c->auth_state = -1;
    c->auth_by_cert = 0;
    c->role = SMP_ROLE_NONE;
    c->tenant[0] = '\0';
    rpc_limits_identify(c->srv->limits, &c->lim, "", SMP_ROLE_NONE);
    snprintf(c->auth_note, sizeof(c->auth_note), "%s", why != NULL ? why : "");
    c->srv->st.auth_hello_mismatch++;
    rpc_conn_log_refusal(c, why != NULL ? why : "its token contradicts its client certificate");
}

uint64_t rpc_server_call_conn(const smp_rpc_call *call)
{
    return call != NULL && call->conn != NULL ? call->conn->serial : 0;
}

void rpc_server_call_hold(smp_rpc_call *call, int on)
{
    if (call != NULL) call->held = on != 0;
}

int rpc_server_call_open(const smp_rpc_call *call)
{
    return call != NULL && call->conn != NULL && !call->conn->closing;
}

void rpc_server_set_close_hook(rpc_server *s, rpc_close_hook_fn fn, void *arg)
{
    s->close_hook = fn;
    s->close_hook_arg = arg;
}

int rpc_server_call_caller(const smp_rpc_call *call, smp_caller *out)
{
    smp_caller v;
    uint32_t size;
    if (call == NULL || out == NULL || out->struct_size < offsetof(smp_caller, tenant))
        return SMP_EINVAL;
    size = out->struct_size < sizeof(v) ? out->struct_size : (uint32_t)sizeof(v);
    memset(&v, 0, sizeof(v));
    v.struct_size = size;
    if (!call->conn->srv->auth_on) {
        v.auth_enabled = 0;
        v.tenant = NULL;
        v.role = SMP_ROLE_ADMIN;
    } else {
        v.auth_enabled = 1;
        v.tenant = call->conn->tenant;
        v.role = call->conn->auth_state == 1 ? call->conn->role : SMP_ROLE_NONE;
    }
    memcpy(out, &v, size);
    return SMP_OK;
}

int rpc_server_each_method(const rpc_server *s, rpc_method_visit_fn fn, void *arg)
{
    int n = 0;
    for (size_t i = 0; i < s->n_services; i++) {
        const rpc_service *svc = &s->services[i];
        for (size_t j = 0; j < svc->n_methods; j++, n++)
            if (fn(arg, svc->id, svc->name, svc->methods[j].id, svc->methods[j].name,
                   svc->methods[j].role) != 0)
                return n + 1;
    }
    return n;
}

/* Decode one complete frame and route it. A body that does not decode is
 * fatal for the connection; an unknown route is answered and reading goes
 * on. The handler borrows the body for the call only. */
void rpc_conn_dispatch(rpc_conn *c, const uint8_t *data, size_t len)
{
    rpc_server *s = c->srv;
    rpc_env_request req;
    rpc_service *svc;
    const rpc_method *m;
    smp_rpc_call *call;
    char msg[512]; /* the longest: authorize with a certificate note */
    int rc, replied, aside = 0;

    if (rpc_env_decode_request(data, len, &req) < 0) {
        s->st.err_bad_request++;
        snprintf(msg, sizeof(msg),
                 "frame of %zu bytes does not decode as RpcRequest", len);
        rpc_conn_fatal(c, SMP_EPROTO, msg);
        return;
    }
    s->st.requests++;
    if (s->limits != NULL) {
        uint32_t retry_ms = 0;
        if ((rc = rpc_limits_take_rate(s->limits, &c->lim, uv_now(s->loop), msg, sizeof(msg),
                                       &retry_ms)) < 0) {
            rpc_conn_send_refusal(c, req.request_id, rc, msg, retry_ms, 0);
            return;
        }
    }
    if ((svc = find_service(s, req.service)) == NULL) {
        s->st.err_unknown_service++;
        snprintf(msg, sizeof(msg), "unknown service %" PRIu32 " (method %" PRIu32 ")",
                 req.service, req.method);
        rpc_conn_send(c, req.request_id, SMP_ENOTFOUND, msg, NULL, 0);
        return;
    }
    if ((m = find_method(svc, req.method)) == NULL) {
        /* A newer client knows this sentence as an older master's answer
         * to a method it lacks (kv_client.c, release_read_leases): keep its
         * form. */
        s->st.err_unknown_method++;
        snprintf(msg, sizeof(msg), "service %" PRIu32 " (%s) has no method %" PRIu32,
                 req.service, svc->name, req.method);
        rpc_conn_send(c, req.request_id, SMP_ENOTFOUND, msg, NULL, 0);
        return;
    }
    if (s->auth_on && (rc = authorize(c, svc, m, msg, sizeof(msg))) < 0) {
        rpc_conn_send(c, req.request_id, rc, msg, NULL, 0);
        return;
    }
    if (s->admit != NULL) {
        const char *named = NULL;
        rc = s->admit(s->admit_arg, c->serial, req.service, req.method, &named);
        if (rc == SMP_ENOTLEADER) {
            /* no leader to name yet: wait for one (rpc_hold.c) */
            if ((named == NULL || named[0] == '\0') && s->hold_ms > 0 &&
                rpc_hold_add(c, req.request_id) == SMP_OK)
                return;
            rpc_conn_send_not_leader(c, req.request_id, named);
            return;
        }
        if (rc < 0 || rc == RPC_ADMIT_STOPPING) {
            int stopping = rc == RPC_ADMIT_STOPPING;
            s->st.admission_refused++;
            if (stopping) rc = SMP_EAGAIN;
            rpc_conn_send_refusal(c, req.request_id, rc, named != NULL ? named : smp_strerror(rc),
                                  0, stopping);
            return;
        }
        aside = rc == RPC_ADMIT_ASIDE;
    }
    if ((call = malloc(sizeof(*call))) == NULL) {
        rpc_conn_send(c, req.request_id, SMP_ENOMEM, "out of memory for the call", NULL, 0);
        return;
    }
    call->conn = c;
    call->request_id = req.request_id;
    call->service = req.service;
    call->method = req.method;
    call->charged = c->lim.frame_charged;
    call->charged_tenant = c->lim.frame_tenant;
    call->held = 0;
    call->aside = aside;
    c->lim.frame_charged = 0;
    c->lim.frame_tenant = NULL;
    rpc_conn_ref(c);
    c->ncalls++;
    s->st.calls_outstanding++;

    s->cur_call = call;
    s->cur_replied = 0;
    rc = m->handler(svc->ctx, call, rpc_body(req.body), req.body_len);
    replied = s->cur_replied;
    s->cur_call = NULL;
    if (rc < 0 && !replied) {
        /* look the names up again: the handler may have changed the table */
        svc = find_service(s, req.service);
        m = svc != NULL ? find_method(svc, req.method) : NULL;
        s->st.err_handler++;
        snprintf(msg, sizeof(msg), "%s.%s (service %" PRIu32 " method %" PRIu32 "): %s",
                 svc != NULL ? svc->name : "?", m != NULL ? m->name : "?",
                 req.service, req.method, smp_strerror(rc));
        call_finish(call, rc, msg, NULL, 0);
    }
}

void rpc_server_redispatch(rpc_server *s, smp_rpc_call *call, const uint8_t *body, size_t len)
{
    rpc_service *svc = find_service(s, call->service);
    const rpc_method *m = svc != NULL ? find_method(svc, call->method) : NULL;
    char msg[160];
    int rc, replied;
    if (m == NULL) {
        snprintf(msg, sizeof(msg), "service %" PRIu32 " method %" PRIu32 " is not served any more",
                 call->service, call->method);
        call_finish(call, SMP_ENOTFOUND, msg, NULL, 0);
        return;
    }
    s->cur_call = call;
    s->cur_replied = 0;
    rc = m->handler(svc->ctx, call, rpc_body(body), len);
    replied = s->cur_replied;
    s->cur_call = NULL;
    if (rc < 0 && !replied) {
        svc = find_service(s, call->service);
        m = svc != NULL ? find_method(svc, call->method) : NULL;
        s->st.err_handler++;
        snprintf(msg, sizeof(msg), "%s.%s (service %" PRIu32 " method %" PRIu32 "): %s",
                 svc != NULL ? svc->name : "?", m != NULL ? m->name : "?", call->service,
                 call->method, smp_strerror(rc));
        call_finish(call, rc, msg, NULL, 0);
    }
}
