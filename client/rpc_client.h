/* rpc_client.h -- the blocking client transport of the master's RPC.
 *
 * One rpcc_conn is one socket to a Store Master (TCP "host:port", or a Unix
 * socket given as "unix:/path" or "/path") chosen from a master list
 * ("a,b,c", master_list.h; one endpoint is a list of one), speaking the frames of
 * proto/rpc.proto: a 4-byte big-endian length and an RpcRequest out, the same
 * framing and an RpcResponse back. rpcc_call() is the synchronous form;
 * rpcc_send() / rpcc_recv() pipeline many requests on one connection, with
 * responses matched by request_id (responses that arrive for other ids while
 * waiting are kept for their own rpcc_recv). Plain sockets, no event loop:
 * a call waits for its answer in a recv bounded by the timeout (plain TCP)
 * or in poll(2) (a Unix socket, TLS, and the rest of an answer that came in
 * parts). A connection is used by one thread at a time.
 *
 * Every function returns SMP_OK or a negative SMP_E* code for the transport
 * (the server's own status for a request is returned through *status), and
 * leaves a message naming the cause in rpcc_last_error(). A response with
 * request_id 0 is the server refusing the connection itself (oversized or
 * undecodable frame, too many connections): its status becomes the return
 * code, its message the last error, and the connection is unusable after.
 *
 * HA: a standby answers every request but status with SMP_ENOTLEADER and
 * the leader's endpoint. rpcc_call and rpcc_call_msg follow such an answer
 * by themselves -- reconnect to the named leader at once (after a pause
 * only when the leader named last time refused too), or, with no leader
 * named, to the other endpoints of the list in turn, pausing between
 * rounds -- and send the same request again, for up to the connection's
 * timeout from the first move (30 s without one) -- unless other requests
 * are in flight on the connection (rpcc_send), whose answers a reconnect
 * would lose: then the
 * NOT_LEADER answer is returned as it is, and rpcc_reconnect() goes to the
 * leader it named. A lost stream is only taken up again with
 * rpcc_call_ex's flags or rpcc_reconnect(); plain calls report it as
 * before.
 *
 * Authentication: with a token (rpcc_options.token or WEIGHT_TOKEN) every
 * socket the connection opens -- the first, and each after a redirect,
 * failover or reconnect -- presents it with auth.HELLO before anything else
 * and waits for the answer; a refused token fails the connect with the
 * master's SMP_EAUTH and its message. */
#ifndef WM_RPC_CLIENT_H
#define WM_RPC_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "store_plugin.h"

#define RPCC_DEFAULT_MAX_FRAME_BYTES (64u << 20)

typedef struct rpcc_conn rpcc_conn;

typedef struct rpcc_options {
    int timeout_ms;            /* per connect / call / recv; <= 0: wait forever */
    uint32_t max_frame_bytes;  /* largest frame sent or accepted; 0: 64 MiB */
    /* TLS 1.3 to TCP endpoints (Unix sockets stay plain): the CA the master's
     * certificate must chain to (its name must match the endpoint's host or
     * IP address), and optionally a client certificate and key. NULL CA:
     * the environment's WM_TLS_CA / WM_TLS_CERT / WM_TLS_KEY, and without
     * those plaintext. */
    const char *tls_ca;
    const char *tls_cert;
    const char *tls_key;
    /* Added with authentication: the token presented (auth.HELLO) on every
     * connection this rpcc_conn opens, before any other request. NULL: the
     * environment's WEIGHT_TOKEN when set, else none; "": none. Copied.
     * Without a token, a TLS connection with a client certificate asks the
     * master which identity the certificate maps to (auth.certificates;
     * rpcc_auth_tenant then says it), and goes on unauthenticated when none. */
    const char *token;
    /* Added with per-store TLS settings: the name the master's certificate
     * must carry instead of each endpoint's host (NULL or "": the host).
     * Copied. */
    const char *tls_server_name;
    /* Added for nodes, whose registration gates every write after a
     * failover: the longest pause between two attempts at finding a master
     * that serves -- the rounds of a list, the moves after a NOT_LEADER --
     * which otherwise double from 20 ms to 100 ms. 0 or less: 100 ms; 1 to
     * 19: 20 ms. */
    int follow_pause_max_ms;
    /* Added for a master alone's restarts: when set, a call that a master
     * alone refuses because it is stopping (SMP_EAGAIN, RpcResponse.stopping;
     * nothing of it applied) is sent again every pause (as above) until that
     * master closes the connection, and then, like a call whose connection
     * was lost and that may go again (RPCC_FAILOVER, RPCC_IDEMPOTENT), to
     * the master back at that endpoint: a move to a single endpoint then
     * keeps trying it until the call's end instead of once. The first
     * connect (rpcc_connect) still tries a single endpoint once. 0: such a
     * refusal is returned at once, as before. */
    int await_restart;
} rpcc_options;

/* Connect to endpoint, a master list: to its first endpoint that accepts
 * the connection. A single endpoint is tried once; a list of several is
 * tried in turn, in rounds with a short pause between them (20 ms doubling
 * to 0.1 s, or to opt's follow_pause_max_ms; each TCP connect for at most
 * 2 s) until opt's timeout (none: one round). opt may be NULL (defaults).
 * On success *out is a new connection (rpcc_close frees it). On failure
 * returns SMP_EINVAL (a bad list or endpoint, its item named), SMP_EIO
 * (refused, unreachable), SMP_EAGAIN (timed out), SMP_EPROTO (a TLS
 * handshake refused: the master's certificate not trusted or not naming the
 * host, not a TLS port, a client certificate wanted) or SMP_ENOMEM, and
 * writes the cause into err (may be NULL): for a list, each endpoint's last
 * cause. */
int rpcc_connect(const char *endpoint,
                 const rpcc_options *opt,
                 rpcc_conn **out,
                 char *err,
                 size_t errlen);

/* Close the socket and free everything, including unclaimed responses.
 * NULL is a no-op. */
void rpcc_close(rpcc_conn *c);

/* Change the timeout of later calls (<= 0: wait forever). */
void rpcc_set_timeout(rpcc_conn *c, int timeout_ms);

/* The message of the last failure on this connection ("" if none). */
const char *rpcc_last_error(const rpcc_conn *c);

/* Send one request and wait for its response (following a standby's
 * SMP_ENOTLEADER answer as the header says). On SMP_OK, *status is the
 * server's status, *resp_body / *resp_len its body (malloc'd, NULL when empty;
 * caller frees) and *errmsg its error message (malloc'd, NULL when empty;
 * caller frees); any of the out pointers may be NULL to ignore that part.
 * Transport errors: SMP_ERANGE (request or response over max_frame_bytes),
 * SMP_EIO (connection lost), SMP_EAGAIN (timed out), SMP_EPROTO (a response
 * that does not decode), SMP_ENOMEM, or the status of a connection-level
 * error response (see above). After SMP_EIO, SMP_EPROTO or a timeout in the
 * middle of sending, the connection is broken and every later call fails. */
int rpcc_call(rpcc_conn *c,
              uint32_t service,
              uint32_t method,
              const uint8_t *req_body,
              size_t req_len,
              int *status,
              uint8_t **resp_body,
              size_t *resp_len,
              char **errmsg);

/* rpcc_call with protobuf-c messages: pack req, call, and when the server's
 * *status is 0 unpack the reply body with desc into *resp (desc NULL: the
 * body is ignored). When *status is not 0, *body / *body_len (may be NULL)
 * get the reply body -- a service's message, by convention -- and *errmsg
 * (may be NULL) the envelope's message; the caller frees them. Returns the
 * transport code of rpcc_call, SMP_ENOMEM, or SMP_EPROTO for a reply body
 * that does not decode (then *status is 0 and *resp NULL). */
int rpcc_call_msg(rpcc_conn *c,
                  uint32_t service,
                  uint32_t method,
                  const ProtobufCMessage *req,
                  const ProtobufCMessageDescriptor *desc,
                  ProtobufCMessage **resp,
                  int *status,
                  uint8_t **body,
                  size_t *body_len,
                  char **errmsg);

/* When a call may be sent again after the connection was lost (flags of
 * rpcc_call_ex and rpcc_call_msg_ex). A request that did not leave whole
 * (the stream was already broken, or broke while sending) never reached a
 * master, so RPCC_FAILOVER sends it again on a new connection, walking the
 * list from the next endpoint. One that left may have been applied by a
 * leader before the connection broke: only RPCC_IDEMPOTENT calls (queries,
 * and mutations whose repetition cannot change the outcome) are sent
 * again then; the others return the transport error, and the connection
 * stays broken (the next RPCC_FAILOVER call reconnects it). A peer that
 * closed the call's connections before answering anything on them -- twice
 * in a row, and each endpoint of a list once -- is no master (another
 * service's port): the call ends there with that error. A reconnect that
 * fails says what it failed after.
 *
 * On a list of several masters, a call that waits 2 s (rpcc_set_quiet)
 * without a byte of its answer asks another master, over a connection of
 * its own, whether the one it waits on still leads. When another leads, an
 * RPCC_IDEMPOTENT call is sent there (and the connection stays with the
 * master that answered), and any other call fails SMP_EIO without being
 * sent again, the next call going to that leader. A call that timed out
 * returns its SMP_EAGAIN and leaves that master for the next call. */
#define RPCC_FAILOVER 1u
#define RPCC_IDEMPOTENT 2u /* implies RPCC_FAILOVER */

/* rpcc_call and rpcc_call_msg with those flags (0: as the plain calls). */
int rpcc_call_ex(rpcc_conn *c,
                 unsigned flags,
                 uint32_t service,
                 uint32_t method,
                 const uint8_t *req_body,
                 size_t req_len,
                 int *status,
                 uint8_t **resp_body,
                 size_t *resp_len,
                 char **errmsg);
int rpcc_call_msg_ex(rpcc_conn *c,
                     unsigned flags,
                     uint32_t service,
                     uint32_t method,
                     const ProtobufCMessage *req,
                     const ProtobufCMessageDescriptor *desc,
                     ProtobufCMessage **resp,
                     int *status,
                     uint8_t **body,
                     size_t *body_len,
                     char **errmsg);

/* Drop the stream (and any answers not yet claimed) and connect again: to
 * the leader the last SMP_ENOTLEADER answer named, else to the endpoint
 * after the one in use, walking the list as rpcc_connect does until the
 * connection's timeout (a single endpoint too, again and again, when the
 * connection awaits restarts). SMP_OK, or the connect error (the
 * connection is then broken, the cause in rpcc_last_error). */
int rpcc_reconnect(rpcc_conn *c);

/* The tenant the token proved on the current socket ("" without a token or
 * when the master runs without authentication), and its role ("" likewise). */
const char *rpcc_auth_tenant(const rpcc_conn *c);
const char *rpcc_auth_role(const rpcc_conn *c);

/* The endpoint connected now ("" after a reconnect that failed). */
const char *rpcc_endpoint(const rpcc_conn *c);

/* How many times the connection moved (a followed redirect, a failover, a
 * reconnect): when it changed, the master answering may be another. */
uint64_t rpcc_moves(const rpcc_conn *c);

/* How long a call on a list waits without a byte of its answer before it
 * asks another master whether the one it waits on still leads (0: 2 s). A
 * request the master may rightly hold longer (a node's poll, held up to
 * node.poll_ms) sets more for its calls. */
void rpcc_set_quiet(rpcc_conn *c, int quiet_ms);

/* Send one request without waiting; *request_id (may be NULL) receives its
 * id (never 0). Errors as rpcc_call's sending half. */
int rpcc_send(rpcc_conn *c,
              uint32_t service,
              uint32_t method,
              const uint8_t *req_body,
              size_t req_len,
              uint64_t *request_id);

/* Wait for the response to request_id, or to any request when request_id is
 * 0 (*got_id says which; may be NULL). Outputs as rpcc_call. A timeout
 * (SMP_EAGAIN) leaves the connection usable: a later rpcc_recv resumes. */
int rpcc_recv(rpcc_conn *c,
              uint64_t request_id,
              uint64_t *got_id,
              int *status,
              uint8_t **resp_body,
              size_t *resp_len,
              char **errmsg);

/* The connection's socket, for a caller that multiplexes many connections
 * with poll(2): readable means rpcc_recv() has a response to read (it may
 * still wait for the rest of a frame). Never read, write, close or change
 * its flags (a plain TCP socket is blocking; the client says MSG_DONTWAIT where
 * it must not block); rpcc_close() closes it. */
int rpcc_fd(const rpcc_conn *c);

/* Send raw bytes as they are (tests and fuzzing of the server's framing). */
int rpcc_send_raw(rpcc_conn *c, const uint8_t *bytes, size_t len);

#endif /* WM_RPC_CLIENT_H */
