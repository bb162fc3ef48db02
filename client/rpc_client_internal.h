/* rpc_client_internal.h -- what rpc_client.c (the transport),
 * rpc_client_connect.c (reaching a master) and rpc_client_watch.c (a call
 * that waits in silence on a list of masters) share: the connection's fields and the few steps both take. Not part of
 * the client's interface (rpc_client.h). */
#ifndef WM_RPC_CLIENT_INTERNAL_H
#define WM_RPC_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

#include "master_list.h"
#include "rpc_client.h"
#include "rpc_envelope.h"

#define RPCC_READ_CHUNK (64u * 1024u)
#define RPCC_BACKOFF_MIN_MS 20   /* pause before a second round or a second move */
#define RPCC_BACKOFF_MAX_MS 100  /* doubling up to this (or the connection's
                                  * follow_pause_max_ms): a client waiting out an
                                  * election reaches the new leader within 0.1 s of it */
#define RPCC_ATTEMPT_MS 2000     /* one connect of a list of several, with its first answer */
#define RPCC_FOLLOW_MS 30000     /* how long a call without a timeout moves on */
#define RPCC_AWAIT_SLACK_MS 20   /* how far past its deadline a call's blocking recv may end */
enum { RPCC_LEADS = 1, RPCC_STANDBY = 2 }; /* AuthHelloResponse.leadership */

/* A response taken off the stream: its frame, and the fields decoded from
 * it (pointing into frame). */
typedef struct rpcc_pending {
    struct rpcc_pending *next;
    rpc_env_response r;
    uint8_t frame[];
} rpcc_pending;

struct rpcc_conn {
    int fd;
    int timeout_ms;
    uint32_t max_frame;
    uint64_t next_id;
    int broken;             /* 0, or the code that broke the stream */
    char err[512];
    uint8_t *in;            /* received, not yet decoded */
    size_t in_len;
    size_t in_cap;
    rpcc_pending *head;     /* decoded responses not yet claimed */
    rpcc_pending *tail;
    size_t in_flight;       /* requests sent whose responses were not delivered */
    master_list ml;         /* the endpoints; ml's position may run ahead of */
    char endpoint[ML_ENDPOINT_MAX]; /* the one connected now ("" after a failed move) */
    int hinted;             /* ml is at the leader the last NOT_LEADER named */
    uint64_t moves;
    SSL_CTX *tls;           /* TLS to TCP endpoints, or NULL */
    SSL *ssl;               /* the session of the stream (TLS, TCP) */
    short want;             /* the poll event the session waits for */
    char tls_why[200];      /* OpenSSL's reason for the last failed SSL_read ("": none) */
    int await_reply;        /* a request just left with nothing buffered: wait before
                               the first recv (a plain socket; see read_frame) */
    int recv_blocks;        /* plain TCP: that wait is a blocking recv */
    int rcvtimeo_ms;        /* the blocking socket's SO_RCVTIMEO (0: none) */
    int pause_max_ms;       /* the longest pause between two rounds or moves */
    char *token;            /* presented on each new socket (NULL: none) */
    char tls_name[256];     /* the master certificate's name ("": each endpoint's host) */
    char auth_tenant[136];  /* what HELLO answered on the current socket */
    int answered;           /* a frame came on the current socket */
    char auth_role[16];
    int relocate;           /* the stream was left for a silent master: the next
                               request moves to another before it leaves */
    int always_hello;       /* ask HELLO on every socket (a side connection) */
    int leadership;         /* what HELLO said of the master: RPCC_LEADS,
                               RPCC_STANDBY, 0 not said (none asked, older) */
    char hello_leader[ML_ENDPOINT_MAX]; /* the leader a standby named in HELLO */
    size_t hedge_at;        /* the endpoint the next hedge asks first (hedge()) */
    int quiet_ms;           /* how long a call waits in silence before a hedge
                               (0: RPCC_ATTEMPT_MS; rpcc_set_quiet) */
    unsigned silent_seen;   /* silent_gen when the connection last looked */
    uint32_t retry_after_ms; /* the last response's: a refusal of auth.limits, when
                                the same request may pass (0: none said) */
    int64_t call_end;       /* while rpcc_call_ex runs (call_ends set): the end of the
                               whole call -- its sends, waits and moves -- the timeout
                               after it began (-1: none) */
    int call_ends;
    int call_resent;        /* the running call sent its request again: moved to another
                               master, or paced after a refusal of auth.limits */
    int await_restart;      /* rpcc_options.await_restart */
    int peer_stopping;      /* the master of this stream said it is stopping (a refusal
                               with RpcResponse.stopping): it applies nothing sent on it
                               any more */
};

/* The deadline of what c does now: the running call's end (rpcc_call_ex)
 * -- after a move or a paced resend at least RPCC_ATTEMPT_MS from now, so
 * that the request sent again gets its answer -- else timeout_ms from now
 * (-1: none). */
int64_t rpcc_op_deadline(const rpcc_conn *c);

/* Set c's last error (printf-style). */
void rpcc_conn_err(rpcc_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* CLOCK_MONOTONIC in ms; the deadline timeout_ms from now (-1: none for 0). */
int64_t rpcc_now_ms(void);
int64_t rpcc_deadline_of(int timeout_ms);

/* -- rpc_client_connect.c --------------------------------------------------- */

/* Connect c (no socket now) from the endpoint its list is at, walking it by
 * deadline; a single endpoint is tried once, or until deadline with
 * again set. */
int rpcc_list_connect(rpcc_conn *c, int64_t deadline, int again, char *err, size_t errlen);

/* Forget c's stream: the socket, buffered bytes, unclaimed answers. */
void rpcc_drop_stream(rpcc_conn *c);

/* Drop c's stream and connect again by deadline: at the leader the last
 * NOT_LEADER named, else from the endpoint after the one in use. SMP_OK, or
 * the connect's error with c broken and the cause (and what ended the
 * stream) in c->err. */
int rpcc_conn_move(rpcc_conn *c, int64_t deadline);

/* Sleep until the CLOCK_MONOTONIC ms `until` (at once when it is past). */
void rpcc_sleep_until(int64_t until);

/* Sleep `ms`, but not past the CLOCK_MONOTONIC ms `deadline`. */
void rpcc_sleep_capped(int ms, int64_t deadline);

/* The pause after one of `pause` ms (0: none yet): RPCC_BACKOFF_MIN_MS,
 * then doubling up to c->pause_max_ms. */
int rpcc_next_pause(const rpcc_conn *c, int pause);

/* -- rpc_client.c ------------------------------------------------------------ */

/* auth.HELLO on the socket just opened, by deadline (probe: even without a
 * token, to learn that the master answers and whether it leads). SMP_OK or
 * the refusal / transport error with the cause in err. */
int rpcc_hello(rpcc_conn *c, int64_t deadline, int probe, char *err, size_t errlen);

/* rpcc_recv waiting until deadline (-1: no bound). */
int rpcc_recv_by(rpcc_conn *c, uint64_t request_id, int64_t deadline, uint64_t *got_id,
                 int *status, uint8_t **resp_body, size_t *resp_len, char **errmsg);

/* -- rpc_client_watch.c ----------------------------------------------------- */

/* Note endpoint ep silent (1) for every connection of the process, or
 * answering (0). */
void rpcc_silent_note(const char *ep, int silent);

/* Where a walk of c's list starts: past the endpoints noted silent, unless
 * every one is. */
void rpcc_skip_silent(rpcc_conn *c);

/* 1 when c's stream, with nothing in flight, is at a master noted silent
 * since c last looked: its next request moves first. */
int rpcc_at_silent_master(rpcc_conn *c);

/* A call on a list timed out: c leaves that master for the next call. */
void rpcc_leave_silent_master(rpcc_conn *c);

/* rpcc_recv_watched's answer when another master leads now (positive). */
#define RPCC_HEDGE_MOVE 2

/* The answer to request id, just sent by a call with flags: rpcc_recv's,
 * or RPCC_HEDGE_MOVE (see rpc_client_watch.c). */
int rpcc_recv_watched(rpcc_conn *c, unsigned flags, uint32_t service, uint32_t method,
                      const uint8_t *req, size_t req_len, uint64_t id, int *st, uint8_t **body,
                      size_t *len, char **msg);

#endif /* WM_RPC_CLIENT_INTERNAL_H */
