/* rpc_server.c -- the master's RPC server on the libuv loop.
 *
 * Listeners accept connections; each connection reads length-prefixed frames
 * into a buffer that grows with the bytes that actually arrive (a header that
 * claims 64 MiB costs nothing until 64 MiB come), decodes an RpcRequest
 * (rpc_envelope.h: the handler's body points into the frame, nothing is
 * copied), routes it through the service table to its handler and sends the
 * encoded RpcResponse when the handler (now or later) calls rpc_reply().
 *
 * Lifetimes are reference counts on the loop thread: a connection is held by
 * its libuv handle (until the close callback), by every write or shutdown
 * request in flight and by every unanswered call; the server is held by its
 * owner (until rpc_server_close), by each listener handle and by each
 * connection. Whatever drops the last reference frees the object, so a reply
 * that arrives after the client, the connection or even the server went away
 * touches only memory that is still alive, and never a closed handle.
 *
 * Authorization (rpc_auth.h): with credentials set (rpc_server_set_auth), a
 * connection proves who it is once, with auth.HELLO, and every request is
 * checked against its method's rule before admission and before its handler:
 * not authenticated SMP_EAUTH, a role below the rule SMP_EFORBIDDEN, a
 * method without a rule refused to everyone. The handler asks who called
 * with rpc_server_call_caller().
 *
 * Limits (rpc_limits.h, rpc_server_set_limits): every decoded request takes
 * one from its connection's and tenant's buckets or is answered SMP_EAGAIN;
 * a frame is charged to its connection and tenant when its length arrives
 * (a refused one is skipped unread and answered under the request_id of its
 * first bytes) and given back when it is answered.
 *
 * Fatal frame errors (oversized, empty, undecodable) stop reading, queue one
 * error response with request_id 0 and shut the connection down once that is
 * written. Reading also stops while a connection has too much unsent output
 * or too many unanswered calls, and resumes when both are back in bounds.
 *
 * TLS (rpc_tls.h): on a server with a TLS context every TCP connection is a
 * session on memory BIOs. Ciphertext from libuv goes into the session, the
 * plaintext it yields into the frame parser; a reply's frame goes through
 * the session and its ciphertext into the write queue. A client whose first
 * byte is not a TLS handshake record gets one plaintext refusal frame
 * (SMP_EPROTO, request_id 0) naming the cause and is closed; a failed
 * handshake closes the connection. Neither affects other connections. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "rpc.h"
#include "rpc_tls.h"
#include <openssl/err.h>
#include "rpc_auth.h"
#include "rpc_limits.h"
#include "wm_errbuf.h"
#include "net_addr.h"
#include "rpc_envelope.h"
#include "rpc.pb-c.h"

#define RPC_READ_CHUNK (64u * 1024u)
#define RPC_DIRECT_REPLY_BYTES 4096u /* replies up to this size skip the write queue */

typedef struct rpc_method {
    uint16_t id;
    char *name;
    smp_rpc_handler handler;
    smp_role role; /* the least role allowed (rpc_auth.h); SMP_ROLE_NONE: no rule */
} rpc_method;

typedef struct rpc_service {
    uint16_t id;
    char *name;
    void *ctx;
    rpc_method *methods;
    size_t n_methods;
} rpc_service;

typedef struct rpc_listener {
    union {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } h;
    rpc_server *srv;
    int is_tcp;
    int active; /* initialised: must be closed */
} rpc_listener;

typedef struct rpc_conn {
    union {
        uv_handle_t handle;
        uv_stream_t stream;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } h;
    rpc_server *srv;
    struct rpc_conn *prev, *next; /* srv->conns while open */
    unsigned refs;
    uint64_t serial;
    int closing;   /* uv_close requested: nothing more is sent */
    int draining;  /* a fatal error response is queued: no more reading */
    int reading;   /* uv_read_start is in effect */
    /* frame assembly */
    uint8_t hdr[4];
    size_t hdr_have;
    int in_body;
    uint32_t body_len;
    size_t body_have;
    uint8_t *body;
    size_t body_cap;
    /* output and calls */
    size_t out_bytes; /* queued in uv_write, not completed */
    uint32_t ncalls;
    int use_tls;      /* a TLS session (TCP on a TLS server) */
    rpc_tls_session tls;
    /* authentication (rpc_server_authenticate) */
    int auth_state; /* 0 none yet, 1 authenticated, -1 its token was refused */
    smp_role role;
    char tenant[RPC_AUTH_TENANT_MAX + 1];
    rpc_conn_limits lim;       /* rate and in-flight bytes (rpc_limits.h) */
    int skipping;              /* the frame being read was refused: its bytes are dropped */
    int skip_status;           /* its refusal */
    uint8_t skip_prefix[16];   /* its first bytes, for its request_id */
    size_t skip_have;
    char skip_msg[320];        /* its refusal's sentence */
} rpc_conn;

struct rpc_server {
    uv_loop_t *loop;
    unsigned refs;
    int started;
    int closing;
    char *listen_tcp;
    char *listen_unix;
    uint32_t max_frame;
    uint32_t max_conns;
    size_t max_output;
    uint32_t max_inflight;
    int backlog;
    rpc_listener tcp;
    rpc_listener unix_l;
    int tcp_port;
    int unix_created; /* we bound the path: unlink it on close */
    rpc_service *services;
    size_t n_services;
    rpc_conn *conns;
    uint64_t next_serial;
    /* the call being dispatched, to learn whether its handler replied */
    smp_rpc_call *cur_call;
    int cur_replied;
    rpc_admit_fn admit;
    void *admit_arg;
    SSL_CTX *tls;     /* TLS on TCP connections, or NULL */
    int auth_on; /* rpc_server_set_auth(s, 1) */
    rpc_limits *limits; /* rpc_server_set_limits, owned; NULL: nothing limited */
    rpc_server_stats st;
    /* One read buffer for all connections: libuv delivers one read at a time
     * on the loop thread and on_read consumes it entirely (partial frames
     * are copied into the connection). */
    char rbuf[RPC_READ_CHUNK];
    char tlsbuf[RPC_READ_CHUNK]; /* plaintext out of a TLS session */
};

typedef struct rpc_wreq {
    uv_write_t req;
    rpc_conn *conn;
    size_t len;
    uint8_t data[];
} rpc_wreq;

typedef struct rpc_sreq {
    uv_shutdown_t req;
    rpc_conn *conn;
} rpc_sreq;

static void conn_close(rpc_conn *c);

static char *dup_str(const char *s)
{
    size_t n;
    char *d;
    if (s == NULL)
        s = "";
    n = strlen(s) + 1;
    d = malloc(n);
    if (d != NULL)
        memcpy(d, s, n);
    return d;
}

/* -- Reference counts ------------------------------------------------------ */

static void server_free(rpc_server *s)
{
    for (size_t i = 0; i < s->n_services; i++) {
        for (size_t j = 0; j < s->services[i].n_methods; j++)
            free(s->services[i].methods[j].name);
        free(s->services[i].methods);
        free(s->services[i].name);
    }
    free(s->services);
    free(s->listen_tcp);
    free(s->listen_unix);
    SSL_CTX_free(s->tls);
    rpc_limits_free(s->limits);
    free(s);
}

static void server_unref(rpc_server *s)
{
    if (--s->refs == 0)
        server_free(s);
}

static void conn_ref(rpc_conn *c)
{
    c->refs++;
}

/* Drop one reference; the last one frees the connection and releases the
 * server reference it held (which may free the server). */
static void conn_unref(rpc_conn *c)
{
    rpc_server *s;
    if (--c->refs > 0)
        return;
    s = c->srv;
    free(c->body);
    if (c->use_tls)
        rpc_tls_session_free(&c->tls);
    free(c);
    server_unref(s);
}

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
        if ((ms[i].name = dup_str(m.name)) == NULL) {
            rc = SMP_ENOMEM;
            goto free_methods;
        }
    }
    if ((sname = dup_str(name)) == NULL) {
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

/* -- Output ---------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

/* Start or stop reading so that a connection reads only while its unsent
 * output and its unanswered calls are within bounds. A failing
 * uv_read_start closes the connection. */
static void conn_set_reading(rpc_conn *c)
{
    rpc_server *s = c->srv;
    int want;
    if (c->closing || c->draining)
        return;
    want = c->out_bytes <= s->max_output && c->ncalls < s->max_inflight;
    if (want && !c->reading) {
        if (uv_read_start(&c->h.stream, on_alloc, on_read) == 0) {
            c->reading = 1;
        } else {
            s->st.err_io++;
            conn_close(c);
        }
    } else if (!want && c->reading) {
        uv_read_stop(&c->h.stream);
        c->reading = 0;
        s->st.backpressure_pauses++;
    }
}

/* A queued response left (or failed: that closes the connection). Releases
 * the request's bytes and connection reference; may resume reading. */
static void on_write(uv_write_t *req, int status)
{
    rpc_wreq *w = (rpc_wreq *)req;
    rpc_conn *c = w->conn;
    c->out_bytes -= w->len;
    if (status < 0 && status != UV_ECANCELED) {
        c->srv->st.err_io++;
        conn_close(c);
    }
    free(w);
    conn_set_reading(c);
    conn_unref(c);
}

/* The 4-byte big-endian length that precedes every frame. */
static void frame_header(uint8_t *p, size_t size)
{
    p[0] = (uint8_t)(size >> 24);
    p[1] = (uint8_t)(size >> 16);
    p[2] = (uint8_t)(size >> 8);
    p[3] = (uint8_t)size;
}

/* A write request for len bytes of c, or NULL after closing c (out of
 * memory). */
static rpc_wreq *wreq_new(rpc_conn *c, size_t len)
{
    rpc_wreq *w = malloc(sizeof(*w) + len);
    if (w == NULL) {
        conn_close(c);
        return NULL;
    }
    w->conn = c;
    w->len = len;
    return w;
}

/* Queue w's bytes behind c's pending output; on_write releases it. SMP_OK,
 * or SMP_EIO after freeing w and closing c. */
static int conn_queue(rpc_conn *c, rpc_wreq *w)
{
    uv_buf_t buf = uv_buf_init((char *)w->data, (unsigned)w->len);
    if (uv_write(&w->req, &c->h.stream, &buf, 1, on_write) < 0) {
        free(w);
        c->srv->st.err_io++;
        conn_close(c);
        return SMP_EIO;
    }
    conn_ref(c);
    c->out_bytes += w->len;
    c->srv->st.bytes_out += w->len;
    return SMP_OK;
}

/* Queue the session's pending ciphertext (handshake messages, records).
 * SMP_OK, or SMP_ENOMEM / SMP_EIO after closing c. */
static int tls_flush(rpc_conn *c)
{
    size_t pending;
    while ((pending = BIO_ctrl_pending(c->tls.wbio)) > 0) {
        rpc_wreq *w = wreq_new(c, pending);
        int rc;
        if (w == NULL) return SMP_ENOMEM;
        if (BIO_read(c->tls.wbio, w->data, (int)pending) != (int)pending) {
            free(w);
            conn_close(c);
            return SMP_EIO;
        }
        if ((rc = conn_queue(c, w)) < 0) return rc;
    }
    return SMP_OK;
}

/* Encrypt len bytes of plaintext and queue the records. Before the
 * handshake is done nothing can be encrypted: the connection is closed
 * (only a refusal would be sent then, and a peer that has not finished its
 * handshake could not read it). */
static int tls_send(rpc_conn *c, const uint8_t *p, size_t len)
{
    char why[256];
    if (!c->tls.established) {
        conn_close(c);
        return SMP_EIO;
    }
    while (len > 0) {
        int chunk = len > (1u << 30) ? (1 << 30) : (int)len;
        int n = SSL_write(c->tls.ssl, p, chunk);
        if (n <= 0) {
            rpc_tls_error(why, sizeof(why));
            c->srv->st.err_io++;
            conn_close(c);
            return SMP_EIO;
        }
        p += n;
        len -= (size_t)n;
    }
    return tls_flush(c);
}

/* Encode and send one response: a small one straight to the socket when
 * nothing is queued before it, otherwise (or for what the socket did not
 * take) through a queued write. A reply larger than max_frame_bytes is
 * replaced by an SMP_ERANGE error naming both sizes. Returns SMP_OK, or
 * SMP_ENOMEM / SMP_EIO after closing the connection (a client must never
 * wait for a response that will not come). Nothing is sent on a closing
 * connection (SMP_OK: the reply is dropped by design). */
static int conn_send(rpc_conn *c,
                     uint64_t request_id,
                     int status,
                     const char *message,
                     const uint8_t *body,
                     size_t len)
{
    rpc_server *s = c->srv;
    char toolarge[160];
    size_t size, mlen;
    rpc_wreq *w;
    uv_buf_t buf;
    size_t sent;
    int rc;

    if (c->closing) {
        s->st.replies_dropped++;
        return SMP_OK;
    }
    if (message == NULL) message = "";
    if (body == NULL) len = 0;
    mlen = strlen(message);
    size = rpc_env_response_size(request_id, status, mlen, len);
    if (size > s->max_frame) {
        snprintf(toolarge, sizeof(toolarge),
                 "reply of %zu bytes exceeds max_frame_bytes %" PRIu32,
                 size, s->max_frame);
        s->st.err_reply_too_large++;
        status = SMP_ERANGE;
        message = toolarge;
        mlen = strlen(toolarge);
        len = 0;
        size = rpc_env_response_size(request_id, status, mlen, len);
    }
    if (c->use_tls) {
        if ((w = wreq_new(c, 4 + size)) == NULL) return SMP_ENOMEM;
        frame_header(w->data, size);
        rpc_env_encode_response(w->data + 4, request_id, status, message, mlen, body, len);
        rc = tls_send(c, w->data, w->len);
        free(w);
        if (rc < 0) return rc;
    } else if (c->out_bytes == 0 && 4 + size <= RPC_DIRECT_REPLY_BYTES) {
        /* Nothing queued: hand a small reply to the socket at once, without
         * a request of its own; only what it did not take is queued. */
        uint8_t direct[RPC_DIRECT_REPLY_BYTES];
        frame_header(direct, size);
        rpc_env_encode_response(direct + 4, request_id, status, message, mlen, body, len);
        buf = uv_buf_init((char *)direct, (unsigned)(4 + size));
        rc = uv_try_write(&c->h.stream, &buf, 1);
        if (rc < 0 && rc != UV_EAGAIN) {
            s->st.err_io++;
            conn_close(c);
            return SMP_EIO;
        }
        sent = rc > 0 ? (size_t)rc : 0;
        s->st.bytes_out += sent;
        if (sent < 4 + size) {
            if ((w = wreq_new(c, 4 + size - sent)) == NULL) return SMP_ENOMEM;
            memcpy(w->data, direct + sent, w->len);
            if ((rc = conn_queue(c, w)) < 0) return rc;
        }
    } else {
        if ((w = wreq_new(c, 4 + size)) == NULL) return SMP_ENOMEM;
        frame_header(w->data, size);
        rpc_env_encode_response(w->data + 4, request_id, status, message, mlen, body, len);
        if ((rc = conn_queue(c, w)) < 0) return rc;
    }
    if (status == 0)
        s->st.responses_ok++;
    else
        s->st.responses_error++;
    conn_set_reading(c);
    return SMP_OK;
}

/* -- Closing --------------------------------------------------------------- */

static void on_conn_closed(uv_handle_t *h)
{
    conn_unref((rpc_conn *)h->data);
}

/* Close a connection now: unlink it from the server, stop reading frames
 * and let libuv cancel its pending writes. Idempotent. Outstanding calls keep
 * the memory alive; their replies are dropped. The frame buffer goes with
 * the last reference: a handler that closed the connection by replying may
 * still be reading the body it was given, which points into it. */
static void conn_close(rpc_conn *c)
{
    rpc_server *s = c->srv;
    if (c->closing)
        return;
    c->closing = 1;
    c->reading = 0;
    rpc_limits_release_frame(&c->lim);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    s->st.connections_open--;
    uv_close(&c->h.handle, on_conn_closed);
}

/* The fatal error response is written (or cancelled): close for good. */
static void on_shutdown(uv_shutdown_t *req, int status)
{
    rpc_sreq *sr = (rpc_sreq *)req;
    rpc_conn *c = sr->conn;
    (void)status;
    free(sr);
    conn_close(c);
    conn_unref(c);
}

/* A fatal error on a connection: stop reading, send one error response with
 * request_id 0 and close once it has been written (shutdown waits for the
 * queued writes). */
static void conn_fatal(rpc_conn *c, int status, const char *message)
{
    rpc_sreq *sr;
    if (c->closing || c->draining)
        return;
    c->draining = 1;
    if (c->reading) {
        uv_read_stop(&c->h.stream);
        c->reading = 0;
    }
    if (conn_send(c, 0, status, message, NULL, 0) < 0)
        return; /* already closed */
    if ((sr = malloc(sizeof(*sr))) == NULL) {
        conn_close(c);
        return;
    }
    sr->conn = c;
    if (uv_shutdown(&sr->req, &c->h.stream, on_shutdown) < 0) {
        free(sr);
        conn_close(c);
        return;
    }
    conn_ref(c);
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
    int rc;

    if (call == NULL)
        return SMP_EINVAL;
    c = call->conn;
    s = c->srv;
    if (call == s->cur_call)
        s->cur_replied = 1;
    if (c->draining || c->closing) {
        s->st.replies_dropped++;
        rc = SMP_OK;
    } else {
        rc = conn_send(c, call->request_id, status, message, body, len);
    }
    rpc_limits_uncharge(&c->lim, call->charged_tenant, call->charged);
    free(call);
    c->ncalls--;
    s->st.calls_outstanding--;
    conn_set_reading(c);
    conn_unref(c);
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
 * RpcResponse. Rare (a client that found a standby), so protobuf-c packs it. */
static void conn_send_not_leader(rpc_conn *c, uint64_t request_id, const char *leader)
{
    rpc_server *s = c->srv;
    char msg[320];
    RpcResponse r = RPC_RESPONSE__INIT;
    rpc_wreq *w;
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
    if ((w = wreq_new(c, 4 + size)) == NULL) return;
    frame_header(w->data, size);
    rpc_response__pack(&r, w->data + 4);
    if (conn_queue(c, w) < 0) return;
    s->st.not_leader++;
    s->st.responses_error++;
    conn_set_reading(c);
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
        snprintf(msg, cap, "auth: %s.%s needs an authenticated connection: %s", svc->name, m->name,
                 c->auth_state < 0 ? "the token this connection presented was refused"
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
    if (call->conn->srv->limits == NULL) {
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
static uint64_t prefix_request_id(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    if (n < 2 || p[0] != 0x08) return 0;
    for (size_t i = 1; i < n && i <= 10; i++) {
        v |= (uint64_t)(p[i] & 0x7f) << (7 * (i - 1));
        if (!(p[i] & 0x80)) return v;
    }
    return 0;
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
static void conn_dispatch(rpc_conn *c, const uint8_t *data, size_t len)
{
    rpc_server *s = c->srv;
    rpc_env_request req;
    rpc_service *svc;
    const rpc_method *m;
    smp_rpc_call *call;
    char msg[320];
    int rc, replied;

    if (rpc_env_decode_request(data, len, &req) < 0) {
        s->st.err_bad_request++;
        snprintf(msg, sizeof(msg),
                 "frame of %zu bytes does not decode as RpcRequest", len);
        conn_fatal(c, SMP_EPROTO, msg);
        return;
    }
    s->st.requests++;
    if (s->limits != NULL &&
        (rc = rpc_limits_take_rate(s->limits, &c->lim, uv_now(s->loop), msg, sizeof(msg))) < 0) {
        conn_send(c, req.request_id, rc, msg, NULL, 0);
        return;
    }
    if ((svc = find_service(s, req.service)) == NULL) {
        s->st.err_unknown_service++;
        snprintf(msg, sizeof(msg), "unknown service %" PRIu32 " (method %" PRIu32 ")",
                 req.service, req.method);
        conn_send(c, req.request_id, SMP_ENOTFOUND, msg, NULL, 0);
        return;
    }
    if ((m = find_method(svc, req.method)) == NULL) {
        s->st.err_unknown_method++;
        snprintf(msg, sizeof(msg), "service %" PRIu32 " (%s) has no method %" PRIu32,
                 req.service, svc->name, req.method);
        conn_send(c, req.request_id, SMP_ENOTFOUND, msg, NULL, 0);
        return;
    }
    if (s->auth_on && (rc = authorize(c, svc, m, msg, sizeof(msg))) < 0) {
        conn_send(c, req.request_id, rc, msg, NULL, 0);
        return;
    }
    if (s->admit != NULL) {
        const char *leader = NULL;
        if (s->admit(s->admit_arg, req.service, req.method, &leader) == SMP_ENOTLEADER) {
            conn_send_not_leader(c, req.request_id, leader);
            return;
        }
    }
    if ((call = malloc(sizeof(*call))) == NULL) {
        conn_send(c, req.request_id, SMP_ENOMEM, "out of memory for the call", NULL, 0);
        return;
    }
    call->conn = c;
    call->request_id = req.request_id;
    call->service = req.service;
    call->method = req.method;
    call->charged = c->lim.frame_charged;
    call->charged_tenant = c->lim.frame_tenant;
    c->lim.frame_charged = 0;
    c->lim.frame_tenant = NULL;
    conn_ref(c);
    c->ncalls++;
    s->st.calls_outstanding++;

    s->cur_call = call;
    s->cur_replied = 0;
    rc = m->handler(svc->ctx, call, req.body, req.body_len);
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
    rc = m->handler(svc->ctx, call, body, len);
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

/* -- Reading --------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    rpc_conn *c = h->data;
    (void)suggested;
    *buf = uv_buf_init(c->srv->rbuf, sizeof(c->srv->rbuf));
}

/* Append n bytes of body; the buffer grows geometrically with what really
 * arrived, never beyond the announced length. */
static int body_append(rpc_conn *c, const uint8_t *p, size_t n)
{
    size_t need = c->body_have + n;
    if (need > c->body_cap) {
        size_t cap = c->body_cap ? c->body_cap : RPC_READ_CHUNK;
        uint8_t *nb;
        while (cap < need)
            cap *= 2;
        if (cap > c->body_len)
            cap = c->body_len;
        if ((nb = realloc(c->body, cap)) == NULL)
            return SMP_ENOMEM;
        c->body = nb;
        c->body_cap = cap;
    }
    memcpy(c->body + c->body_have, p, n);
    c->body_have += n;
    return SMP_OK;
}

/* Cut bytes into frames and dispatch each complete one, stopping as soon as
 * the connection goes fatal or closes. */
static void conn_feed(rpc_conn *c, const uint8_t *p, size_t n)
{
    rpc_server *s = c->srv;
    char msg[160];
    while (n > 0 && !c->closing && !c->draining) {
        if (!c->in_body) {
            size_t k = 4 - c->hdr_have;
            if (k > n)
                k = n;
            memcpy(c->hdr + c->hdr_have, p, k);
            c->hdr_have += k;
            p += k;
            n -= k;
            if (c->hdr_have < 4)
                break;
            c->body_len = (uint32_t)c->hdr[0] << 24 | (uint32_t)c->hdr[1] << 16 |
                          (uint32_t)c->hdr[2] << 8 | (uint32_t)c->hdr[3];
            c->hdr_have = 0;
            if (c->body_len == 0) {
                s->st.err_empty_frame++;
                conn_fatal(c, SMP_EPROTO, "zero-length frame");
                return;
            }
            if (c->body_len > s->max_frame) {
                s->st.err_oversized_frame++;
                snprintf(msg, sizeof(msg),
                         "frame of %" PRIu32 " bytes exceeds max_frame_bytes %" PRIu32,
                         c->body_len, s->max_frame);
                conn_fatal(c, SMP_ERANGE, msg);
                return;
            }
            c->in_body = 1;
            c->body_have = 0;
            if (s->limits != NULL &&
                (c->skip_status = rpc_limits_charge_frame(s->limits, &c->lim, c->body_len,
                                                          c->skip_msg, sizeof(c->skip_msg))) < 0) {
                c->skipping = 1;
                c->skip_have = 0;
                continue;
            }
            if (n >= c->body_len) {
                /* the whole body is here: dispatch in place */
                size_t len = c->body_len;
                c->in_body = 0;
                conn_dispatch(c, p, len);
                rpc_limits_release_frame(&c->lim);
                p += len;
                n -= len;
            }
            continue;
        }
        if (c->skipping) {
            /* a refused frame: keep its first bytes (its request_id), drop the rest */
            size_t k = c->body_len - c->body_have;
            if (k > n)
                k = n;
            if (c->skip_have < sizeof(c->skip_prefix)) {
                size_t keep = sizeof(c->skip_prefix) - c->skip_have;
                if (keep > k)
                    keep = k;
                memcpy(c->skip_prefix + c->skip_have, p, keep);
                c->skip_have += keep;
            }
            c->body_have += k;
            p += k;
            n -= k;
            if (c->body_have == c->body_len) {
                c->in_body = 0;
                c->skipping = 0;
                c->body_have = 0;
                s->st.requests++;
                conn_send(c, prefix_request_id(c->skip_prefix, c->skip_have), c->skip_status,
                          c->skip_msg, NULL, 0);
            }
            continue;
        }
        {
            size_t k = c->body_len - c->body_have;
            if (k > n)
                k = n;
            if (body_append(c, p, k) < 0) {
                conn_fatal(c, SMP_ENOMEM, "out of memory for the request frame");
                return;
            }
            p += k;
            n -= k;
            if (c->body_have == c->body_len) {
                c->in_body = 0;
                conn_dispatch(c, c->body, c->body_have);
                rpc_limits_release_frame(&c->lim);
                if (!c->closing && c->body_cap > RPC_READ_CHUNK) {
                    /* do not keep a large buffer for the next frames */
                    free(c->body);
                    c->body = NULL;
                    c->body_cap = 0;
                }
                c->body_have = 0;
            }
        }
    }
}

/* A plaintext client on the TLS port: tell it in plaintext, then close. */
static void tls_refuse_plaintext(rpc_conn *c)
{
    static const char why[] = "this master's TCP port speaks TLS: connect with TLS (weightctl "
                              "--tls-ca FILE, or WM_TLS_CA) or through its Unix socket";
    c->srv->st.tls_plaintext_refused++;
    c->use_tls = 0; /* the refusal goes out as it is */
    rpc_tls_session_free(&c->tls);
    conn_fatal(c, SMP_EPROTO, why);
}

/* Ciphertext arrived: run the handshake, then hand every byte of plaintext
 * to the frame parser; queue whatever the session wants sent. */
static void tls_feed(rpc_conn *c, const uint8_t *p, size_t n)
{
    rpc_server *s = c->srv;
    char why[256];
    if (!c->tls.checked_first) {
        c->tls.checked_first = 1;
        if (p[0] != 0x16) { /* not a TLS handshake record */
            tls_refuse_plaintext(c);
            return;
        }
    }
    if (BIO_write(c->tls.rbio, p, (int)n) != (int)n) {
        conn_close(c);
        return;
    }
    if (!c->tls.established) {
        int r = SSL_do_handshake(c->tls.ssl);
        if (r != 1) {
            int e = SSL_get_error(c->tls.ssl, r);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
                tls_flush(c);
                return;
            }
            rpc_tls_error(why, sizeof(why));
            s->st.tls_refused++;
            fprintf(stderr, "rpc: TLS handshake refused: %s\n", why[0] ? why : "peer gone");
            /* the alert the session wrote tells the client why */
            if (tls_flush(c) == SMP_OK) {
                c->draining = 1;
                if (c->reading) {
                    uv_read_stop(&c->h.stream);
                    c->reading = 0;
                }
                rpc_sreq *sr = malloc(sizeof(*sr));
                if (sr != NULL) {
                    sr->conn = c;
                    if (uv_shutdown(&sr->req, &c->h.stream, on_shutdown) == 0) {
                        conn_ref(c);
                        return;
                    }
                    free(sr);
                }
                conn_close(c);
            }
            return;
        }
        c->tls.established = 1;
        s->st.tls_handshakes++;
        if (tls_flush(c) < 0) return;
    }
    while (!c->closing && !c->draining) {
        int k = SSL_read(c->tls.ssl, s->tlsbuf, (int)sizeof(s->tlsbuf));
        if (k > 0) {
            conn_feed(c, (const uint8_t *)s->tlsbuf, (size_t)k);
            continue;
        }
        int e = SSL_get_error(c->tls.ssl, k);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            break;
        if (e != SSL_ERROR_ZERO_RETURN)
            s->st.err_io++;
        ERR_clear_error();
        conn_close(c); /* close_notify or a broken record */
        return;
    }
    if (!c->closing)
        tls_flush(c);
}

/* Bytes arrived, or the stream ended. End of stream or a read error closes
 * the connection (counted as truncated when it cut a frame). The connection
 * is held across the feed: a handler may drop the last other reference. */
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    rpc_conn *c = st->data;
    rpc_server *s = c->srv;
    if (nread < 0) {
        if (nread != UV_EOF)
            s->st.err_io++;
        else if (c->in_body || c->hdr_have > 0)
            s->st.err_truncated_frame++;
        conn_close(c);
        return;
    }
    s->st.bytes_in += (uint64_t)nread;
    conn_ref(c);
    if (c->use_tls)
        tls_feed(c, (const uint8_t *)buf->base, (size_t)nread);
    else
        conn_feed(c, (const uint8_t *)buf->base, (size_t)nread);
    conn_set_reading(c);
    conn_unref(c);
}

/* -- Accepting ------------------------------------------------------------- */

static void on_rejected_closed(uv_handle_t *h)
{
    free(h->data);
}

/* Accept one connection on a listener. Past max_connections it is still
 * accepted, so that it can be told why (SMP_EAGAIN, request_id 0), and then
 * shut down. Accept failures are counted, never fatal for the server. */
static void on_connection(uv_stream_t *lst, int status)
{
    rpc_listener *l = lst->data;
    rpc_server *s = l->srv;
    rpc_conn *c;
    char msg[96];
    int rc;

    if (status < 0 || s->closing) {
        s->st.err_io++;
        return;
    }
    if ((c = calloc(1, sizeof(*c))) == NULL) {
        s->st.err_io++;
        return;
    }
    rc = l->is_tcp ? uv_tcp_init(s->loop, &c->h.tcp) : uv_pipe_init(s->loop, &c->h.pipe, 0);
    if (rc < 0) {
        free(c);
        s->st.err_io++;
        return;
    }
    c->h.handle.data = c;
    if (uv_accept(lst, &c->h.stream) < 0) {
        s->st.err_io++;
        uv_close(&c->h.handle, on_rejected_closed);
        return;
    }
    if (l->is_tcp)
        uv_tcp_nodelay(&c->h.tcp, 1);
    if (l->is_tcp && s->tls != NULL) {
        if (rpc_tls_session_init(&c->tls, s->tls) < 0) {
            s->st.err_io++;
            uv_close(&c->h.handle, on_rejected_closed);
            return;
        }
        c->use_tls = 1;
    }
    c->srv = s;
    s->refs++;
    c->refs = 1; /* the handle, until on_conn_closed */
    c->serial = ++s->next_serial;
    c->next = s->conns;
    if (s->conns != NULL)
        s->conns->prev = c;
    s->conns = c;
    s->st.connections_accepted++;
    s->st.connections_open++;
    if (s->max_conns != 0 && s->st.connections_open > s->max_conns) {
        s->st.connections_rejected++;
        snprintf(msg, sizeof(msg), "too many connections (max_connections %" PRIu32 ")",
                 s->max_conns);
        conn_fatal(c, SMP_EAGAIN, msg);
        return;
    }
    conn_set_reading(c);
}

/* -- Server ---------------------------------------------------------------- */

int rpc_server_create(uv_loop_t *loop,
                      const rpc_server_options *opt,
                      rpc_server **out,
                      char *err,
                      size_t errlen)
{
    rpc_server_options none;
    rpc_server *s;

    if (loop == NULL || out == NULL) {
        wm_errbuf(err, errlen, "rpc: no loop or no result pointer");
        return SMP_EINVAL;
    }
    *out = NULL;
    if (opt == NULL) {
        memset(&none, 0, sizeof(none));
        opt = &none;
    }
    if (opt->max_frame_bytes > RPC_MAX_FRAME_LIMIT) {
        wm_errbuf(err, errlen, "rpc: max_frame_bytes %" PRIu32 " is above the limit %u",
                opt->max_frame_bytes, RPC_MAX_FRAME_LIMIT);
        return SMP_ERANGE;
    }
    if ((s = calloc(1, sizeof(*s))) == NULL)
        goto no_memory;
    s->loop = loop;
    s->refs = 1;
    s->tcp_port = -1;
    s->max_frame = opt->max_frame_bytes ? opt->max_frame_bytes : RPC_DEFAULT_MAX_FRAME_BYTES;
    s->max_conns = opt->max_connections;
    s->max_output = opt->max_output_bytes ? opt->max_output_bytes : RPC_DEFAULT_MAX_OUTPUT_BYTES;
    s->max_inflight = opt->max_inflight ? opt->max_inflight : RPC_DEFAULT_MAX_INFLIGHT;
    s->backlog = opt->backlog > 0 ? opt->backlog : RPC_DEFAULT_BACKLOG;
    if (opt->tls != NULL && SSL_CTX_up_ref(opt->tls) == 1)
        s->tls = opt->tls;
    if (opt->listen_tcp != NULL && opt->listen_tcp[0] != '\0' &&
        (s->listen_tcp = dup_str(opt->listen_tcp)) == NULL)
        goto free_server;
    if (opt->listen_unix != NULL && opt->listen_unix[0] != '\0') {
        if (strlen(opt->listen_unix) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
            wm_errbuf(err, errlen, "rpc: unix socket path '%s' is longer than %zu bytes",
                    opt->listen_unix, sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
            server_free(s);
            return SMP_EINVAL;
        }
        if ((s->listen_unix = dup_str(opt->listen_unix)) == NULL)
            goto free_server;
    }
    *out = s;
    return SMP_OK;

free_server:
    server_free(s);
no_memory:
    wm_errbuf(err, errlen, "rpc: out of memory");
    return SMP_ENOMEM;
}

/* Split "host:port" / "[v6]:port" / ":port" into a socket address. */
static int parse_tcp(const char *spec, struct sockaddr_storage *ss, char *err, size_t errlen)
{
    if (net_parse_listen(spec, ss) == SMP_OK) return SMP_OK;
    wm_errbuf(err, errlen, "rpc: listen_tcp '%s' is not host:port with a numeric address", spec);
    return SMP_EINVAL;
}

static void on_listener_closed(uv_handle_t *h)
{
    rpc_listener *l = h->data;
    server_unref(l->srv);
}

/* Close a listener once; its close callback drops its server reference. */
static void listener_close(rpc_listener *l)
{
    if (!l->active)
        return;
    l->active = 0;
    uv_close(&l->h.handle, on_listener_closed);
}

/* Bind and listen on listen_tcp; records the bound port. On failure the
 * listener (if initialised) is left for rpc_server_start to close. */
static int start_tcp(rpc_server *s, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    struct sockaddr_storage bound;
    int namelen = sizeof(bound);
    int rc;

    if ((rc = parse_tcp(s->listen_tcp, &ss, err, errlen)) < 0)
        return rc;
    if (uv_tcp_init(s->loop, &s->tcp.h.tcp) < 0) {
        wm_errbuf(err, errlen, "rpc: cannot create the TCP listener");
        return SMP_EIO;
    }
    s->tcp.h.handle.data = &s->tcp;
    s->tcp.srv = s;
    s->tcp.is_tcp = 1;
    s->tcp.active = 1;
    s->refs++;
    if ((rc = uv_tcp_bind(&s->tcp.h.tcp, (const struct sockaddr *)&ss, 0)) < 0 ||
        (rc = uv_listen(&s->tcp.h.stream, s->backlog, on_connection)) < 0) {
        wm_errbuf(err, errlen, "rpc: cannot listen on %s: %s", s->listen_tcp, uv_strerror(rc));
        return SMP_EIO;
    }
    if (uv_tcp_getsockname(&s->tcp.h.tcp, (struct sockaddr *)&bound, &namelen) == 0)
        s->tcp_port = bound.ss_family == AF_INET6
                          ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                          : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    return SMP_OK;
}

/* Bind and listen on listen_unix, replacing a stale socket file (never
 * another kind of file). Same failure contract as start_tcp. */
static int start_unix(rpc_server *s, char *err, size_t errlen)
{
    struct stat sb;
    int rc;

    if (lstat(s->listen_unix, &sb) == 0) {
        if (!S_ISSOCK(sb.st_mode)) {
            wm_errbuf(err, errlen, "rpc: %s exists and is not a socket", s->listen_unix);
            return SMP_EINVAL;
        }
        unlink(s->listen_unix);
    }
    if (uv_pipe_init(s->loop, &s->unix_l.h.pipe, 0) < 0) {
        wm_errbuf(err, errlen, "rpc: cannot create the unix listener");
        return SMP_EIO;
    }
    s->unix_l.h.handle.data = &s->unix_l;
    s->unix_l.srv = s;
    s->unix_l.is_tcp = 0;
    s->unix_l.active = 1;
    s->refs++;
    if ((rc = uv_pipe_bind(&s->unix_l.h.pipe, s->listen_unix)) < 0) {
        wm_errbuf(err, errlen, "rpc: cannot bind %s: %s", s->listen_unix, uv_strerror(rc));
        return SMP_EIO;
    }
    s->unix_created = 1;
    if ((rc = uv_listen(&s->unix_l.h.stream, s->backlog, on_connection)) < 0) {
        wm_errbuf(err, errlen, "rpc: cannot listen on %s: %s", s->listen_unix, uv_strerror(rc));
        return SMP_EIO;
    }
    return SMP_OK;
}

/* libuv writes with write(2): a peer that vanished would raise SIGPIPE and
 * kill the master. Ignore it unless the program installed its own handler. */
static void ignore_sigpipe(void)
{
    struct sigaction old;
    if (sigaction(SIGPIPE, NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
        old.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
}

int rpc_server_start(rpc_server *s, char *err, size_t errlen)
{
    int rc;
    if (s == NULL)
        return SMP_EINVAL;
    if (s->started || s->closing) {
        wm_errbuf(err, errlen, "rpc: server already started or closed");
        return SMP_ESTATE;
    }
    s->started = 1;
    ignore_sigpipe();
    if (s->listen_tcp != NULL && (rc = start_tcp(s, err, errlen)) < 0)
        goto close_listeners;
    if (s->listen_unix != NULL && (rc = start_unix(s, err, errlen)) < 0)
        goto close_listeners;
    return SMP_OK;

close_listeners:
    listener_close(&s->tcp);
    listener_close(&s->unix_l);
    if (s->unix_created) {
        unlink(s->listen_unix);
        s->unix_created = 0;
    }
    s->tcp_port = -1;
    return rc;
}

int rpc_server_tcp_port(const rpc_server *s)
{
    return s != NULL ? s->tcp_port : -1;
}

void rpc_server_close(rpc_server *s)
{
    if (s == NULL || s->closing)
        return;
    s->closing = 1;
    listener_close(&s->tcp);
    listener_close(&s->unix_l);
    if (s->unix_created) {
        unlink(s->listen_unix);
        s->unix_created = 0;
    }
    while (s->conns != NULL)
        conn_close(s->conns);
    server_unref(s);
}

void rpc_server_get_stats(const rpc_server *s, rpc_server_stats *out)
{
    if (s != NULL && out != NULL)
        *out = s->st;
}
