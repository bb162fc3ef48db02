/* rpc.h -- the Store Master's RPC server: framing, routing, replies.
 *
 * The server accepts connections on a TCP "host:port" and/or a Unix socket
 * path and reads frames: a 4-byte big-endian length, then that many bytes of
 * one RpcRequest (proto/rpc.proto). A request is routed by (service, method)
 * to a handler with the ABI signature smp_rpc_handler; the handler answers
 * through rpc_reply(), right away or later (a deferred reply, e.g. once an
 * OpLog record is durable). Many requests may be in flight on one connection
 * and their responses go out in whatever order they complete, each carrying
 * its request's request_id. Replies are written in batches: those a loop
 * iteration makes leave together, one write per connection, after the
 * iteration's reads and before the loop waits again; a connection has at
 * most 32 requests dispatched per read or turn, so a pipelining client
 * takes turns with the others.
 *
 * Everything here runs on the master's loop thread, which owns the server, its
 * connections and every outstanding call: no locks. A call keeps its
 * connection's memory alive (reference count) until it is answered, so a
 * reply after the client went away is dropped safely, and the call is freed
 * either way. Bad input from the network -- an oversized, empty, truncated or
 * undecodable frame -- closes only the connection that sent it (after an
 * error response with request_id 0 when one can be sent); an unknown service
 * or method gets an SMP_ENOTFOUND response and the connection stays open. */
#ifndef HOST_RPC_H
#define HOST_RPC_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "store_plugin.h"

#define RPC_DEFAULT_MAX_FRAME_BYTES (64u << 20)   /* 64 MiB */
#define RPC_DEFAULT_MAX_OUTPUT_BYTES (8u << 20)   /* unsent bytes per connection */
#define RPC_DEFAULT_MAX_INFLIGHT 1024u            /* unanswered calls per connection */
#define RPC_DEFAULT_BACKLOG 128
#define RPC_MAX_FRAME_LIMIT (1u << 30)            /* max_frame_bytes may not exceed 1 GiB */

typedef struct rpc_server rpc_server;

/* Options of one server. Zero means "the default" for every number; a NULL
 * or empty listen string turns that endpoint off. Strings are copied. */
typedef struct rpc_server_options {
    const char *listen_tcp;        /* "host:port", "[v6]:port", ":port" = any */
    const char *listen_unix;       /* path of the Unix socket */
    uint32_t max_frame_bytes;      /* largest request (and reply) frame body */
    uint32_t max_connections;      /* simultaneous connections, 0 = unlimited */
    size_t max_output_bytes;       /* stop reading a conn above this much unsent output */
    uint32_t max_inflight;         /* stop reading a conn above this many unanswered calls */
    int backlog;                   /* listen(2) backlog */
    struct ssl_ctx_st *tls;        /* TLS on the TCP endpoint (rpc_tls.h; the server
                                      takes a reference); NULL: plaintext. The Unix
                                      socket is never TLS (a local peer). */
} rpc_server_options;

/* Admission of a decoded request before its handler runs, given the
 * serial of the connection it came on (rpc_server_call_conn's value; 0 for
 * the leadership question of rpc_server_leadership): 0 lets it run;
 * RPC_ADMIT_ASIDE lets it run as a question about the server (status,
 * authentication), whose answer is not counted as work done
 * (rpc_server_ms_since_answer);
 * SMP_ENOTLEADER answers it with that status, *named (the leader's RPC
 * endpoint, "" or NULL when none is known, borrowed until the call returns)
 * in RpcResponse.leader -- how an HA standby turns away everything it must
 * not serve; any other negative code answers it with that status and
 * *named as its message; RPC_ADMIT_STOPPING answers it SMP_EAGAIN with
 * *named and RpcResponse.stopping set -- how a master alone that is
 * stopping refuses new calls (master_drain.c), telling its clients that
 * nothing new is applied on the connection. Either way its handler never
 * runs. */
typedef int (*rpc_admit_fn)(void *arg, uint64_t conn, uint32_t service, uint32_t method,
                            const char **named);
#define RPC_ADMIT_ASIDE 1
#define RPC_ADMIT_STOPPING 2

/* Counters for /metrics. Monotonic unless marked as a gauge. */
typedef struct rpc_server_stats {
    uint64_t not_leader;             /* requests turned away by the admission function */
    uint64_t admission_refused;      /* refused by it with another status (a stopping master) */
    uint64_t connections_accepted;
    uint64_t connections_open;       /* gauge */
    uint64_t connections_rejected;   /* over max_connections */
    uint64_t requests;               /* decoded requests */
    uint64_t responses_ok;           /* replies sent with status 0 */
    uint64_t responses_error;        /* replies sent with status != 0 */
    uint64_t replies_dropped;        /* answered after the connection closed */
    uint64_t calls_outstanding;      /* gauge: dispatched, not yet answered */
    uint64_t err_unknown_service;
    uint64_t err_unknown_method;
    uint64_t err_handler;            /* a handler returned a negative code */
    uint64_t err_oversized_frame;
    uint64_t err_empty_frame;
    uint64_t err_bad_request;        /* the frame body did not decode */
    uint64_t err_truncated_frame;    /* the peer closed mid-frame */
    uint64_t err_io;                 /* read / write / accept failures */
    uint64_t err_reply_too_large;    /* a reply exceeded max_frame_bytes */
    uint64_t backpressure_pauses;    /* reading stopped for output or in-flight bounds */
    uint64_t bytes_in;
    uint64_t bytes_out;
    uint64_t tls_handshakes;         /* TLS sessions established */
    uint64_t tls_refused;            /* failed handshakes (untrusted, no client certificate, ...) */
    uint64_t tls_plaintext_refused;  /* plaintext clients on the TLS port */
    /* authentication (rpc_auth.h) */
    uint64_t auth_hello_ok;          /* connections that proved a credential */
    uint64_t auth_hello_refused;     /* connections whose token was refused */
    uint64_t auth_unauthenticated;   /* requests refused: no accepted token (SMP_EAUTH) */
    uint64_t auth_forbidden;         /* requests refused: role below the rule */
    uint64_t auth_no_rule;           /* requests refused: the method has no rule */
    uint64_t auth_cert_ok;           /* connections a client certificate authenticated */
    uint64_t auth_cert_unmapped;     /* verified client certificates mapped to no identity */
    uint64_t auth_hello_mismatch;    /* HELLO tokens that contradicted the certificate's identity */
    uint64_t not_leader_held;        /* NOT_LEADER answers held until the leader was known */
    uint64_t not_leader_held_now;    /* gauge: held at this moment */
} rpc_server_stats;

/* Create a server on loop (borrowed; must outlive the server's handles).
 * Nothing listens until rpc_server_start(). opt may be NULL (defaults, no
 * endpoint). Returns SMP_OK, SMP_ENOMEM, SMP_ERANGE (max_frame_bytes above
 * RPC_MAX_FRAME_LIMIT) or SMP_EINVAL (Unix path too long), with a message in
 * err (err may be NULL). */
int rpc_server_create(uv_loop_t *loop,
                      const rpc_server_options *opt,
                      rpc_server **out,
                      char *err,
                      size_t errlen);

/* Add a service to the routing table. methods has n entries, each read with
 * the stride methods[0].struct_size (so a table built against a newer ABI
 * minor is read correctly); method ids, names and handlers are copied, name
 * may be NULL. ctx is passed to every handler (the plugin's state). Returns
 * SMP_EEXIST for a service id already present, SMP_EINVAL for a method with
 * a too small struct_size, a NULL handler or a duplicate method id,
 * SMP_ENOMEM. Services may be added before or after start. */
int rpc_server_add_service(rpc_server *s,
                           uint16_t service_id,
                           const char *name,
                           const smp_rpc_method *methods,
                           size_t n,
                           void *ctx);

/* Remove a service (plugin unload). Calls already dispatched stay valid and
 * must still be answered. SMP_ENOTFOUND when the id is not present. */
int rpc_server_remove_service(rpc_server *s, uint16_t service_id);

/* Bind and listen on the configured endpoints. A stale Unix socket file at
 * the path is replaced; any other file there is refused. SIGPIPE is set to
 * ignored if it still has its default action (a vanished peer must not kill
 * the master; writes then fail with EPIPE and close that connection). On failure nothing
 * listens, the code is returned (SMP_EIO, SMP_EINVAL, SMP_ESTATE when already
 * started or closed) and err names the endpoint and the cause. */
int rpc_server_start(rpc_server *s, char *err, size_t errlen);

/* Ask fn (NULL: none, every request runs) before each request's handler. */
void rpc_server_set_admission(rpc_server *s, rpc_admit_fn fn, void *arg);

/* Whether the master serving call leads, as its admission function answers
 * for a route that only a leader serves (service 0, method 0):
 * RPC_LEADS (also with no admission function: a master alone), or
 * RPC_STANDBY with *leader the leader it names ("" when none is known; the
 * string lives until the loop turns). auth.HELLO tells a client so. */
enum { RPC_LEADS = 1, RPC_STANDBY = 2 };
int rpc_server_leadership(const smp_rpc_call *call, const char **leader);

/* While an election runs, a standby knows no leader to name. With a hold of
 * hold_ms (> 0; 0, the default, answers at once), a request the admission
 * function turns away without naming a leader is not answered right away:
 * its NOT_LEADER answer waits until rpc_server_leader_known names the leader
 * (then it carries that endpoint, and the client goes there at once instead
 * of asking the list again after a pause), or until it has waited hold_ms
 * (then it says that no leader is known, as without a hold). A held request
 * counts as one in flight on its connection. Keep hold_ms well under the
 * clients' call timeouts. Loop thread only. */
void rpc_server_set_not_leader_hold(rpc_server *s, uint32_t hold_ms);
/* The leader is known to be at endpoint (not empty): every held request is
 * answered NOT_LEADER naming it. Loop thread only. */
void rpc_server_leader_known(rpc_server *s, const char *endpoint);

/* Authentication (rpc_auth.h). on 1: every request is authorized against its
 * method's rule and the identity its connection proved; 0 (the default):
 * every request runs and every caller counts as an admin of no tenant. */
void rpc_server_set_auth(rpc_server *s, int on);
int rpc_server_auth_on(const rpc_server *s);

/* Limits against abuse (rpc_limits.h): the server takes l (freed with the
 * server; NULL: nothing limited) and applies it to every request from now
 * on. */
struct rpc_limits;
void rpc_server_set_limits(rpc_server *s, struct rpc_limits *l);
/* smp_host_api.rpc_revision_quota: rpc_limits_revision_quota with the
 * limits of call's server (no limits, or call came on a connection
 * authenticated as an admin: SMP_OK, *limit 0). */
int rpc_server_revision_quota(const smp_rpc_call *call, const char *tenant, uint64_t live,
                              uint64_t *limit);

/* Visit the refusal counts of every tenant (rpc_limits_each); none without limits. */
typedef void (*rpc_server_refusals_fn)(void *arg, const char *tenant, const uint64_t *refused);
void rpc_server_limits_each(const rpc_server *s, rpc_server_refusals_fn fn, void *arg);

/* Set the identity of the connection call came on (auth.HELLO's handler):
 * tenant (copied) and role; tenant NULL records that the token presented
 * was refused (later requests get SMP_EAUTH naming that). SMP_ESTATE when
 * the connection already presented a token (it cannot change identity),
 * SMP_EINVAL for a bad role or a tenant over RPC_AUTH_TENANT_MAX bytes. */
int rpc_server_authenticate(smp_rpc_call *call, const char *tenant, smp_role role);

/* Client certificates (rpc_auth.h): after every TLS handshake whose client
 * certificate verified against the server's CA, fn (NULL: none) is asked
 * for its identity: SMP_OK with *tenant (borrowed for the call) and *role
 * authenticates the connection; anything else leaves it unauthenticated,
 * with note (a sentence fn wrote naming the cause) in the refusals of its
 * requests until a token authenticates it. Runs on the loop thread. */
struct x509_st;
typedef int (*rpc_cert_identify_fn)(void *arg, struct x509_st *leaf, const char **tenant,
                                    smp_role *role, char *note, size_t cap);
void rpc_server_set_cert_identify(rpc_server *s, rpc_cert_identify_fn fn, void *arg);

/* 1 with the identity in *tenant (borrowed until the call is answered) and
 * *role when call's connection was authenticated by its client
 * certificate; 0 otherwise. */
int rpc_server_cert_identity(const smp_rpc_call *call, const char **tenant, smp_role *role);

/* The connection of call loses its identity (credentials that disagree;
 * counted in auth_hello_mismatch): its later requests are refused with
 * SMP_EAUTH naming why (copied). */
void rpc_server_deauthenticate(smp_rpc_call *call, const char *why);

/* Who made call (smp_host_api.rpc_caller): see smp_caller. The tenant
 * pointer is borrowed until the call is answered. SMP_EINVAL for NULL. */
int rpc_server_call_caller(const smp_rpc_call *call, smp_caller *out);

/* The connection call came on, as a number no other connection of this
 * server has had or will have (its serial): what a per-connection resource
 * (the master's read leases) is keyed by. 0 for NULL. */
uint64_t rpc_server_call_conn(const smp_rpc_call *call);

/* 1 while the connection call came on is open (an answer would be sent);
 * 0 once it is closing or closed, or for NULL. */
int rpc_server_call_open(const smp_rpc_call *call);

/* Called with a connection's serial once it closes, whatever closed it (the
 * peer, an error, rpc_server_close), before its outstanding calls are
 * answered (their replies are dropped). Loop thread; fn must not close the
 * server. NULL fn: none. */
typedef void (*rpc_close_hook_fn)(void *arg, uint64_t conn);
void rpc_server_set_close_hook(rpc_server *s, rpc_close_hook_fn fn, void *arg);

/* Visit every registered method with its rule (role, rpc_auth.h); fn returns
 * non-zero to stop. Returns the number visited. */
typedef int (*rpc_method_visit_fn)(void *arg, uint32_t service, const char *service_name,
                                   uint32_t method, const char *method_name, smp_role role);
int rpc_server_each_method(const rpc_server *s, rpc_method_visit_fn fn, void *arg);

/* The bound TCP port (useful with port 0), or -1 when TCP is off. */
int rpc_server_tcp_port(const rpc_server *s);

/* Serve TLS on the TCP endpoint with ctx from the next connection on (a
 * reloaded certificate; the server takes a reference and lets its old
 * context go). Connections already accepted keep the session they have.
 * Loop thread only. SMP_EINVAL when the endpoint is plaintext or ctx is
 * NULL: a reload changes the certificate, never whether TLS is spoken. */
int rpc_server_set_tls(rpc_server *s, struct ssl_ctx_st *ctx);

/* Stop listening, close every connection and give the server up. The
 * handles finish closing when the loop next runs (uv_run until it returns).
 * Outstanding calls stay valid: answering one later drops the reply and
 * frees it; the server's memory goes with the last of them. The Unix socket
 * file is removed. NULL is a no-op; s must not be used afterwards. */
void rpc_server_close(rpc_server *s);

/* A copy of the counters. */
void rpc_server_get_stats(const rpc_server *s, rpc_server_stats *out);

/* Milliseconds (loop time) since the last answer to a dispatched call --
 * refusals by admission, limits or routing do not count, nor calls
 * admitted RPC_ADMIT_ASIDE -- or UINT64_MAX when none was answered yet. A
 * stopping master waits for a quiet spell (master_drain.c): a client that
 * just had its answer may already be sending its next request on the same
 * connection. Loop thread only. */
uint64_t rpc_server_ms_since_answer(const rpc_server *s);

/* -- Calls ----------------------------------------------------------------- */

/* One dispatched request awaiting its reply: the connection it came on (a
 * counted reference), its request_id and route. Owned by the server; the
 * handler may keep the pointer until it answers. */
struct smp_rpc_call {
    struct rpc_conn *conn;
    uint64_t request_id;
    uint32_t service;
    uint32_t method;
    uint32_t charged;                       /* in-flight bytes of its frame (rpc_limits.h) */
    struct rpc_tenant_state *charged_tenant; /* the tenant they were charged to, or NULL */
    int held;                               /* rpc_server_call_hold: answers refused */
    int aside;                              /* admitted RPC_ADMIT_ASIDE */
};

/* Mark call held (on 1) or not (0): while held, rpc_reply and
 * rpc_reply_error refuse to answer it (SMP_EBUSY, the call kept), so a
 * handler that asked for it to be held and then answered it anyway cannot
 * free it under its holder. The holder clears the mark before it answers
 * the call or routes it again. */
void rpc_server_call_hold(smp_rpc_call *call, int on);

/* Answer a call (smp_host_api.rpc_reply): status 0 with a body, or a negative
 * code (the body, if any, is sent as well). body is copied. Exactly once per
 * call; the call is freed whatever happens, except that a held call
 * (rpc_server_call_hold) is refused SMP_EBUSY and kept. If the connection
 * is gone the reply is dropped and SMP_OK returned. SMP_ENOMEM when the
 * response could not be built (the connection is then closed, the client
 * never waits forever); SMP_EINVAL for a NULL call. */
int rpc_reply(smp_rpc_call *call, int status, const uint8_t *body, size_t len);

/* Route a call again that a handler held back instead of answering (the
 * plugin host parks calls while a plugin is reloaded), as if its request had
 * just been decoded: to the handler registered now for its service and
 * method (body borrowed for the call). An unknown route, or a handler's
 * negative return without a reply, is answered as on arrival. Loop thread;
 * not from inside a handler. */
void rpc_server_redispatch(rpc_server *s, smp_rpc_call *call, const uint8_t *body, size_t len);

/* Answer a call with a status and a message for RpcResponse.error (copied;
 * NULL for none) and no body. Same contract as rpc_reply(). */
int rpc_reply_error(smp_rpc_call *call, int status, const char *message);

#endif /* HOST_RPC_H */
