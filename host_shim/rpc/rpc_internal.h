/* rpc_internal.h -- what the RPC server's files share: its objects and the
 * functions one file calls in another. Not for use outside host_shim/rpc.
 *
 * The server is three files: rpc_server.c (reference counts, listeners,
 * accepting, the server's lifecycle), rpc_conn_io.c (a connection's reading,
 * framing, TLS feed, output and closing) and rpc_dispatch.c (the routing
 * table, decoding, authorization, limits and admission of a request, calls
 * and their replies). Everything runs on the master's loop thread.
 *
 * Lifetimes are reference counts on the loop thread: a connection is held by
 * its libuv handle (until the close callback), by every write or shutdown
 * request in flight and by every unanswered call; the server is held by its
 * owner (until rpc_server_close), by each listener handle and by each
 * connection. Whatever drops the last reference frees the object, so a reply
 * that arrives after the client, the connection or even the server went away
 * touches only memory that is still alive, and never a closed handle. */
#ifndef HOST_RPC_INTERNAL_H
#define HOST_RPC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "rpc.h"
#include "rpc_tls.h"
#include "rpc_auth.h"
#include "rpc_limits.h"

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

void rpc_conn_close(rpc_conn *c);

/* -- rpc_server.c ---------------------------------------------------------- */

/* A copy of s ("" for NULL), or NULL when out of memory. */
char *rpc_dup_str(const char *s);

/* Take a reference on c. */
void rpc_conn_ref(rpc_conn *c);

/* Drop one reference; the last one frees the connection and releases the
 * server reference it held (which may free the server). */
void rpc_conn_unref(rpc_conn *c);

/* -- rpc_conn_io.c --------------------------------------------------------- */

/* Start or stop reading so that a connection reads only while its unsent
 * output and its unanswered calls are within bounds. A failing
 * uv_read_start closes the connection. */
void rpc_conn_set_reading(rpc_conn *c);

/* The 4-byte big-endian length that precedes every frame. */
void rpc_frame_header(uint8_t *p, size_t size);

/* A write request for len bytes of c, or NULL after closing c (out of
 * memory). */
rpc_wreq *rpc_wreq_new(rpc_conn *c, size_t len);

/* Queue w's bytes behind c's pending output; on_write releases it. SMP_OK,
 * or SMP_EIO after freeing w and closing c. */
int rpc_conn_queue(rpc_conn *c, rpc_wreq *w);

/* Encode and send one response (see rpc_conn_io.c). SMP_OK, or SMP_ENOMEM /
 * SMP_EIO after closing the connection; a reply on a closing connection is
 * dropped (SMP_OK). */
int rpc_conn_send(rpc_conn *c,
                  uint64_t request_id,
                  int status,
                  const char *message,
                  const uint8_t *body,
                  size_t len);

/* Close a connection now (idempotent); outstanding calls keep its memory. */
void rpc_conn_close(rpc_conn *c);

/* Stop reading, send one error response with request_id 0 and close once
 * it has been written. */
void rpc_conn_fatal(rpc_conn *c, int status, const char *message);

/* The libuv read callbacks of a connection. */
void rpc_conn_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
void rpc_conn_on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

/* -- rpc_dispatch.c -------------------------------------------------------- */

/* Decode one complete frame and route it (see rpc_dispatch.c). The handler
 * borrows the body for the call only. */
void rpc_conn_dispatch(rpc_conn *c, const uint8_t *data, size_t len);

/* The request_id of a frame from its first n bytes; 0 when it is not there. */
uint64_t rpc_prefix_request_id(const uint8_t *p, size_t n);

#endif /* HOST_RPC_INTERNAL_H */
