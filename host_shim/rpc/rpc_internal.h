/* rpc_internal.h -- what the RPC server's files share: its objects and the
 * functions one file calls in another. Not for use outside host_shim/rpc.
 *
 * The server is four files: rpc_server.c (reference counts, listeners,
 * accepting, the once-per-iteration loop handles, the server's lifecycle),
 * rpc_conn_io.c (a connection's reading, framing, TLS feed, turns and
 * closing), rpc_output.c (its replies: pending output and the flush) and
 * rpc_dispatch.c (the routing table, decoding, authorization, limits and
 * admission of a request, calls and their replies). Everything runs on the
 * master's loop thread.
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
#include "log_limit.h"
#include "rpc_limits.h"

#define RPC_READ_CHUNK (64u * 1024u)
#define RPC_BATCH_REQUESTS 32u /* frames dispatched per connection per read or turn */
#define RPC_INFLIGHT_RETRY_MS 20u
#define RPC_REFUSAL_LOG_BURST 5 /* refusal lines a minute (rpc_refusal_log.c) */ /* a request over the in-flight bytes is asked again after */

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
    /* input the last read or turn left undispatched (RPC_BATCH_REQUESTS) */
    uint8_t *in;              /* plaintext not yet fed to the frame parser */
    size_t in_off, in_len;
    unsigned budget;          /* frames this read or turn may still dispatch */
    int tls_more;             /* the TLS session may hold plaintext not yet read */
    struct rpc_conn *resume_next; /* srv->resume_head while queued */
    int resume_queued;
    /* output (rpc_output.c) and calls */
    struct rpc_wreq *ob;      /* pending output: replies not yet written, in order */
    size_t olen, ocap;        /* its bytes and capacity */
    struct rpc_conn *flush_next; /* srv->flush_head while queued */
    int flush_queued;
    size_t out_bytes; /* queued in uv_write, not completed */
    uint32_t ncalls;
    int use_tls;      /* a TLS session (TCP on a TLS server) */
    rpc_tls_session tls;
    /* authentication (rpc_server_authenticate) */
    int auth_state; /* 0 none yet, 1 authenticated, -1 its token was refused */
    int auth_by_cert; /* authenticated by its client certificate (rpc_conn_identify_cert) */
    char auth_note[288]; /* why it is not authenticated, when not the usual ("": usual) */
    smp_role role;
    char tenant[RPC_AUTH_TENANT_MAX + 1];
    rpc_conn_limits lim;       /* rate and in-flight bytes (rpc_limits.h) */
    int skipping;              /* the frame being read was refused: its bytes are dropped */
    int skip_status;           /* its refusal */
    uint8_t skip_prefix[16];   /* its first bytes, for its request_id */
    size_t skip_have;
    char skip_msg[320];        /* its refusal's sentence */
    uint32_t skip_retry_ms;    /* when it may pass (SMP_EAGAIN), sent with it */
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
    uint64_t last_answer_ms; /* loop time of the last answer to a dispatched call, 0 none */
    rpc_admit_fn admit;
    void *admit_arg;
    SSL_CTX *tls;     /* TLS on TCP connections, or NULL */
    int auth_on; /* rpc_server_set_auth(s, 1) */
    rpc_cert_identify_fn cert_identify; /* rpc_server_set_cert_identify, or NULL */
    void *cert_identify_arg;
    rpc_limits *limits; /* rpc_server_set_limits, owned; NULL: nothing limited */
    rpc_close_hook_fn close_hook; /* rpc_server_set_close_hook, or NULL */
    void *close_hook_arg;
    rpc_server_stats st;
    log_limit refusal_log; /* rpc_refusal_log.c: a few lines a minute */
    /* Once per loop iteration (rpc_output.c): the check handle resumes the
     * connections with input left (resume_head) and flushes every pending
     * output (flush_head); the prepare handle flushes what callbacks outside
     * the I/O phase answered before the loop waits; the idle handle keeps it
     * from waiting while input is left. Each list holds a reference on its
     * connections. */
    uv_check_t flush_check;
    uv_prepare_t flush_prepare;
    uv_idle_t resume_idle;
    int loop_handles; /* the three are initialised: must be closed */
    rpc_conn *flush_head;
    rpc_conn *resume_head;
    /* NOT_LEADER answers held while no leader is known (rpc_hold.c): oldest
     * first, so deadlines only grow; the timer fires at the first one's. */
    uint32_t hold_ms;
    struct rpc_held *held_head, *held_tail;
    uv_timer_t hold_timer;
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

/* -- rpc_server.c ---------------------------------------------------------- */

/* A copy of s ("" for NULL), or NULL when out of memory. */
char *rpc_dup_str(const char *s);

/* Take a reference on c. */
void rpc_conn_ref(rpc_conn *c);

/* Drop one reference; the last one frees the connection and releases the
 * server reference it held (which may free the server). */
void rpc_conn_unref(rpc_conn *c);

/* Write c's pending output now (its TLS session's too): what the socket
 * does not take is queued. SMP_OK (nothing to do on a closing connection),
 * or a negative code after closing c. */
int rpc_conn_flush(rpc_conn *c);

/* Have c flushed with the next flush of its server (its TLS session holds
 * ciphertext to send). */
void rpc_conn_want_flush(rpc_conn *c);

/* Flush every connection on s's flush list. */
void rpc_server_flush(rpc_server *s);

/* -- rpc_conn_io.c --------------------------------------------------------- */

/* Start or stop reading so that a connection reads only while its unsent
 * output and its unanswered calls are within bounds. A failing
 * uv_read_start closes the connection. */
void rpc_conn_set_reading(rpc_conn *c);

/* -- rpc_output.c ---------------------------------------------------------- */

/* Start a frame of size body bytes at the end of c's pending output: its
 * header is written and *body is where the body goes. SMP_OK, or SMP_ENOMEM
 * / SMP_EIO (a TLS session not established yet) after closing c. */
int rpc_conn_frame_begin(rpc_conn *c, size_t size, uint8_t **body);

/* The frame begun with size is complete: it leaves with the next flush. */
void rpc_conn_frame_end(rpc_conn *c, size_t size);

/* Encode one response into c's pending output (see rpc_output.c). SMP_OK,
 * or SMP_ENOMEM / SMP_EIO after closing the connection; a reply on a
 * closing connection is dropped (SMP_OK). */
int rpc_conn_send(rpc_conn *c,
                  uint64_t request_id,
                  int status,
                  const char *message,
                  const uint8_t *body,
                  size_t len);

/* A refusal that no service saw (status SMP_EAGAIN), as rpc_conn_send with
 * no body: retry_after_ms (auth.limits) says when the same request may
 * pass, which a client of this project waits and sends it again after;
 * stopping says that this master alone is stopping and applies nothing new
 * on the connection (a client may send it again once a master is back). */
int rpc_conn_send_refusal(rpc_conn *c, uint64_t request_id, int status, const char *message,
                          uint32_t retry_after_ms, int stopping);

/* Log that c was refused for its credentials or protocol ("store_master:
 * rpc: client ADDR: WHY", WHY saying what was refused and why), at most a few lines a minute, the rest
 * counted and summed up (rpc_refusal_log.c). Loop thread. */
void rpc_conn_log_refusal(rpc_conn *c, const char *why);

/* The server closes: sum up the refusals not logged yet. */
void rpc_server_log_refusals_end(rpc_server *s);

/* Close a connection now (idempotent); outstanding calls keep its memory. */
void rpc_conn_close(rpc_conn *c);

/* Stop reading, send one error response with request_id 0 and close once
 * it has been written. */
void rpc_conn_fatal(rpc_conn *c, int status, const char *message);

/* Resume every connection on s's resume list (rpc_conn_resume). */
void rpc_server_resume(rpc_server *s);

/* Dispatch another RPC_BATCH_REQUESTS frames of the input c's last read
 * left; queue c again when some is still left. */
void rpc_conn_resume(rpc_conn *c);

/* The libuv read callbacks of a connection. */
void rpc_conn_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
void rpc_conn_on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);

/* -- rpc_dispatch.c -------------------------------------------------------- */

/* Decode one complete frame and route it (see rpc_dispatch.c). The handler
 * borrows the body for the call only. */
void rpc_conn_dispatch(rpc_conn *c, const uint8_t *data, size_t len);

/* c's TLS handshake is done: when its client certificate verified and the
 * server maps certificates, authenticate c as the identity it maps to (or
 * note why it maps to none). */
void rpc_conn_identify_cert(rpc_conn *c);

/* The request_id of a frame from its first n bytes; 0 when it is not there. */
uint64_t rpc_prefix_request_id(const uint8_t *p, size_t n);

/* Answer request_id on c SMP_ENOTLEADER naming leader ("" or NULL: none
 * known yet). */
void rpc_conn_send_not_leader(rpc_conn *c, uint64_t request_id, const char *leader);

/* -- rpc_hold.c ------------------------------------------------------------ */

/* Hold the NOT_LEADER answer of request_id on c (a hold is set): SMP_OK,
 * or SMP_ENOMEM (answer it now). */
int rpc_hold_add(rpc_conn *c, uint64_t request_id);
/* Initialise the hold timer (rpc_server_start; unreferenced, it never keeps
 * the loop alive): SMP_OK or SMP_EIO. */
int rpc_hold_start(rpc_server *s);
/* Drop every held request unanswered (their connections are closed by
 * now) and close the timer (rpc_server_close). */
void rpc_hold_close(rpc_server *s);

#endif /* HOST_RPC_INTERNAL_H */
