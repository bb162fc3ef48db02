/* rpc_limits.c -- the running state of auth.limits (rpc_limits.h): one
 * token bucket, byte count and set of refusal counters per tenant, the
 * connection limits every connection applies to itself, what each
 * connection is charged (rpc_conn_limits), and the revision quota the weight
 * plugin asks about. The server (rpc_server.c) says when a request arrives,
 * a frame is announced, a call is answered; this file decides and words the
 * refusals. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_limits.h"

struct rpc_limits {
    rpc_limit_values conn;
    rpc_tenant_state *t;
    size_t n;
    uint64_t refused_none[RPC_REFUSED_KINDS]; /* connections of no tenant */
};

const char *rpc_refusal_name(rpc_refusal r)
{
    switch (r) {
    case RPC_REFUSED_RATE: return "rate";
    case RPC_REFUSED_INFLIGHT: return "inflight";
    case RPC_REFUSED_REVISIONS: return "revisions";
    default: return "?";
    }
}

int rpc_limits_create(const rpc_limits_config *cfg, const rpc_auth_token *tokens, size_t n,
                      rpc_limits **out)
{
    rpc_limits *l;
    if (out == NULL || (n > 0 && tokens == NULL)) return SMP_EINVAL;
    *out = NULL;
    if ((l = calloc(1, sizeof(*l))) == NULL) return SMP_ENOMEM;
    if (n > 0 && (l->t = calloc(n, sizeof(*l->t))) == NULL) {
        free(l);
        return SMP_ENOMEM;
    }
    if (cfg != NULL) l->conn = cfg->connection;
    for (size_t i = 0; i < n; i++) {
        if (rpc_limits_tenant(l, tokens[i].tenant) != NULL) continue;
        rpc_tenant_state *t = &l->t[l->n++];
        memcpy(t->tenant, tokens[i].tenant, sizeof(t->tenant));
        if (cfg != NULL) t->v = cfg->tenant;
    }
    for (size_t i = 0; cfg != NULL && i < cfg->n_tenants; i++) {
        rpc_tenant_state *t = rpc_limits_tenant(l, cfg->tenants[i].tenant);
        if (t == NULL) {
            rpc_limits_free(l);
            return SMP_EINVAL;
        }
        t->v = cfg->tenants[i].v;
    }
    *out = l;
    return SMP_OK;
}

void rpc_limits_free(rpc_limits *l)
{
    if (l == NULL) return;
    free(l->t);
    free(l);
}

const rpc_limit_values *rpc_limits_connection(const rpc_limits *l)
{
    return &l->conn;
}

rpc_tenant_state *rpc_limits_tenant(rpc_limits *l, const char *tenant)
{
    for (size_t i = 0; l != NULL && tenant != NULL && i < l->n; i++)
        if (strcmp(l->t[i].tenant, tenant) == 0) return &l->t[i];
    return NULL;
}

void rpc_limits_count(rpc_limits *l, rpc_tenant_state *t, rpc_refusal reason)
{
    if (reason >= RPC_REFUSED_KINDS) return;
    if (t != NULL) t->refused[reason]++;
    else l->refused_none[reason]++;
}

/* Bring b up to now_ms under values v (rate per second, burst). */
static void bucket_refill(rpc_bucket *b, const rpc_limit_values *v, uint64_t now_ms)
{
    uint64_t cap = (uint64_t)(v->burst ? v->burst : v->rate) * 1000u;
    if (!b->started) {
        b->started = 1;
        b->milli = cap;
        b->at_ms = now_ms;
        return;
    }
    if (now_ms > b->at_ms) {
        /* rate requests/s = rate thousandths of a request per ms */
        uint64_t add = (now_ms - b->at_ms) * (uint64_t)v->rate;
        b->milli = add >= cap || b->milli + add >= cap ? cap : b->milli + add;
        b->at_ms = now_ms;
    }
}

int rpc_bucket_take2(rpc_bucket *b, const rpc_limit_values *conn, rpc_tenant_state *t,
                     uint64_t now_ms, int *which)
{
    int conn_limited = conn != NULL && conn->rate > 0;
    int tenant_limited = t != NULL && t->v.rate > 0;
    if (conn_limited) bucket_refill(b, conn, now_ms);
    if (tenant_limited) bucket_refill(&t->bucket, &t->v, now_ms);
    if (conn_limited && b->milli < 1000) {
        if (which != NULL) *which = 0;
        return 0;
    }
    if (tenant_limited && t->bucket.milli < 1000) {
        if (which != NULL) *which = 1;
        return 0;
    }
    if (conn_limited) b->milli -= 1000;
    if (tenant_limited) t->bucket.milli -= 1000;
    return 1;
}

void rpc_limits_each(const rpc_limits *l, rpc_limits_visit_fn fn, void *arg)
{
    fn(arg, "", l->refused_none);
    for (size_t i = 0; i < l->n; i++) fn(arg, l->t[i].tenant, l->t[i].refused);
}

int rpc_limits_revision_quota(rpc_limits *l, const char *tenant, uint64_t live, uint64_t *limit)
{
    rpc_tenant_state *t = rpc_limits_tenant(l, tenant);
    uint64_t max = t != NULL ? t->v.max_revisions : 0;
    if (limit != NULL) *limit = max;
    if (max == 0 || live < max) return SMP_OK;
    t->refused[RPC_REFUSED_REVISIONS]++;
    return SMP_ENOSPC;
}

void rpc_limits_identify(rpc_limits *l, rpc_conn_limits *cl, const char *tenant, smp_role role)
{
    cl->exempt = role == SMP_ROLE_ADMIN;
    cl->tenant = cl->exempt ? NULL : rpc_limits_tenant(l, tenant);
}

int rpc_limits_charge_frame(rpc_limits *l, rpc_conn_limits *cl, uint32_t len, char *msg,
                            size_t cap)
{
    const rpc_limit_values *v = cl->exempt ? NULL : &l->conn;
    rpc_tenant_state *t = cl->exempt ? NULL : cl->tenant;
    uint64_t limit = 0, have = 0;
    const char *who = NULL;
    if (v != NULL && v->inflight_bytes > 0 && cl->inflight + len > v->inflight_bytes) {
        limit = v->inflight_bytes;
        have = cl->inflight;
        who = "this connection (auth.limits.connection.inflight_bytes)";
    } else if (t != NULL && t->v.inflight_bytes > 0 && t->inflight + len > t->v.inflight_bytes) {
        limit = t->v.inflight_bytes;
        have = t->inflight;
        who = "this tenant's connections (auth.limits, inflight_bytes of the tenant)";
    }
    if (who != NULL) {
        rpc_limits_count(l, t, RPC_REFUSED_INFLIGHT);
        if (len > limit) {
            snprintf(msg, cap, "in-flight limit: a request of %" PRIu32 " bytes is larger than "
                     "the %" PRIu64 " request bytes %s may have unanswered", len, limit, who);
            return SMP_ERANGE;
        }
        snprintf(msg, cap, "in-flight limit: a request of %" PRIu32 " bytes with %" PRIu64
                 " bytes of earlier requests unanswered is over the %" PRIu64 " bytes %s may "
                 "have; retry once they are answered", len, have, limit, who);
        return SMP_EAGAIN;
    }
    cl->inflight += len;
    cl->frame_charged = len;
    if (t != NULL) {
        t->inflight += len;
        cl->frame_tenant = t;
    }
    return SMP_OK;
}

void rpc_limits_uncharge(rpc_conn_limits *cl, rpc_tenant_state *t, uint32_t len)
{
    cl->inflight -= len;
    if (t != NULL) t->inflight -= len;
}

void rpc_limits_release_frame(rpc_conn_limits *cl)
{
    rpc_limits_uncharge(cl, cl->frame_tenant, cl->frame_charged);
    cl->frame_charged = 0;
    cl->frame_tenant = NULL;
}

int rpc_limits_take_rate(rpc_limits *l, rpc_conn_limits *cl, uint64_t now_ms, char *msg,
                         size_t cap, uint32_t *retry_ms)
{
    rpc_tenant_state *t = cl->exempt ? NULL : cl->tenant;
    int which = 0;
    if (cl->exempt || rpc_bucket_take2(&cl->bucket, &l->conn, t, now_ms, &which)) return SMP_OK;
    rpc_limits_count(l, t, RPC_REFUSED_RATE);
    {
        /* a request is 1000 thousandths; rate of them come in a millisecond */
        const rpc_bucket *b = which == 0 ? &cl->bucket : &t->bucket;
        uint32_t rate = which == 0 ? l->conn.rate : t->v.rate;
        uint64_t need = b->milli < 1000 ? 1000 - b->milli : 0;
        *retry_ms = (uint32_t)((need + rate - 1) / rate);
        if (*retry_ms == 0) *retry_ms = 1;
    }
    if (which == 0)
        snprintf(msg, cap, "rate limit: this connection may send %" PRIu32 " requests a second "
                 "(burst %" PRIu32 ", auth.limits.connection); retry later", l->conn.rate,
                 l->conn.burst ? l->conn.burst : l->conn.rate);
    else
        snprintf(msg, cap, "rate limit: tenant %.128s may send %" PRIu32 " requests a second "
                 "(burst %" PRIu32 ", auth.limits); retry later", t->tenant, t->v.rate,
                 t->v.burst ? t->v.burst : t->v.rate);
    return SMP_EAGAIN;
}
