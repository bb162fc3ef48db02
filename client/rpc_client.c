/* rpc_client.c -- blocking RPC transport over plain sockets and poll(2).
 *
 * Every wait is bounded by the deadline of the current call. A call's
 * answer, when nothing of it is buffered yet, is waited for before the first
 * recv. On a plain TCP socket that wait is the recv itself: the socket is
 * blocking, the recv bounded by SO_RCVTIMEO (the connection's timeout), and
 * every other send and recv says MSG_DONTWAIT -- a call costs a send and a
 * recv. A Unix socket and a TLS one are non-blocking and wait in poll (on a
 * Unix socket a recv that blocked cost the master, whose reply wakes it, more
 * than the client saved: bench/JOURNAL.md, "The client's wait for an answer").
 * The rest of an answer that came in parts is waited for in poll on all.
 * Incoming bytes collect in one buffer that grows with what arrives (never
 * past 4 + max_frame_bytes), so a timeout in the middle of a response loses
 * nothing and the next rpcc_recv goes on where it stopped.
 * Decoded responses for other request ids wait in a FIFO until claimed.
 * A connection becomes "broken" once its byte stream can no longer be trusted
 * (peer closed, partial send, undecodable or oversized frame); from then on
 * every call returns the code that broke it, unless the caller asked for
 * failover (rpcc_call_ex) or reconnects (rpcc_reconnect).
 *
 * The endpoint is a master list (master_list.h). A connection is one socket
 * to one of its endpoints at a time; it "moves" -- the stream is dropped and
 * the list is walked from the next endpoint (or from the leader a standby
 * named) -- when a call is answered SMP_ENOTLEADER (a standby applied
 * nothing, so the same request is always sent again), and, for calls made
 * with RPCC_FAILOVER, when the stream is lost before the request left
 * (always safe) or, with RPCC_IDEMPOTENT, after it left. A move never
 * happens with other requests in flight: their answers would be lost.
 * A paused or hung master still has its connections accepted by the
 * kernel, so on a list a new socket must answer a first request (an empty
 * auth.HELLO, whose answer also says whether that master leads) within
 * RPCC_ATTEMPT_MS before a call uses it; a call that waits in silence asks
 * another master whether the one it waits on still leads, and a call that
 * timed out gives the stream up for the next (rpc_client_watch.c). The
 * connects and moves themselves are in rpc_client_connect.c. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "host_rpc.pb-c.h"
#include "rpc_client.h"
#include "rpc_envelope.h"
#include "wc_tls.h"
#include "wm_errbuf.h"

#include "rpc_client_internal.h"

void rpcc_conn_err(rpcc_conn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
}

/* Mark the stream unusable with code rc (the message is already set). */
static int conn_break(rpcc_conn *c, int rc)
{
    if (!c->broken)
        c->broken = rc;
    return rc;
}

int64_t rpcc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t rpcc_deadline_of(int timeout_ms)
{
    return timeout_ms > 0 ? rpcc_now_ms() + timeout_ms : -1;
}

int64_t rpcc_op_deadline(const rpcc_conn *c)
{
    if (!c->call_ends || c->call_end < 0)
        return rpcc_deadline_of(c->timeout_ms);
    if (!c->call_resent)
        return c->call_end;
    /* The request a move or a paced resend sent near the call's end still
     * gets an attempt's time for its answer (a standby's NOT_LEADER, a
     * refusal, or the result), which the call then returns: a request that
     * left is never given up on at once, with its fate unknown. */
    int64_t floor = rpcc_now_ms() + RPCC_ATTEMPT_MS;
    return c->call_end > floor ? c->call_end : floor;
}

/* send(2) / recv(2) on the stream, through its TLS session if any: bytes
 * moved, 0 at the end of the stream (recv), or -1 with errno (EAGAIN: wait
 * for c->want, then try again). */
static ssize_t io_send(rpcc_conn *c, const void *buf, size_t len)
{
    c->want = POLLOUT;
    if (c->ssl == NULL)
        return send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    int n = SSL_write(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    if (n > 0) return n;
    int e = SSL_get_error(c->ssl, n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        c->want = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        errno = EAGAIN;
        return -1;
    }
    ERR_clear_error();
    errno = e == SSL_ERROR_SYSCALL && errno != 0 ? errno : EPIPE;
    return -1;
}

static ssize_t io_recv(rpcc_conn *c, void *buf, size_t len)
{
    c->want = POLLIN;
    if (c->ssl == NULL)
        return recv(c->fd, buf, len, MSG_DONTWAIT);
    int n = SSL_read(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    if (n > 0) return n;
    int e = SSL_get_error(c->ssl, n);
    if (e == SSL_ERROR_ZERO_RETURN) return 0;
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        c->want = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        errno = EAGAIN;
        return -1;
    }
    if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
        ERR_clear_error();
        return 0; /* the peer closed without close_notify */
    }
#ifdef SSL_R_UNEXPECTED_EOF_WHILE_READING
    if (e == SSL_ERROR_SSL &&
        ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        ERR_clear_error();
        return 0; /* the same, as OpenSSL 3 reports it: said as a close, not a TLS failure */
    }
#endif
    wc_tls_why(c->tls_why, sizeof(c->tls_why)); /* e.g. the master's alert */
    errno = EPROTO;
    return -1;
}

/* The first recv of a call's answer on a plain TCP socket, blocking for at
 * most the connection's timeout (SO_RCVTIMEO, set here when it changed; none
 * for a timeout of 0). That bound is the deadline's when the deadline is the
 * timeout from about now, as for a call; when the deadline is nearer (a
 * connect's attempt at one endpoint of several) the recv is not made.
 * Returns as io_recv; EAGAIN when the timeout passed, or when no such recv
 * was made (the caller then waits in poll up to the deadline). */
static ssize_t io_recv_awaited(rpcc_conn *c, void *buf, size_t len, int64_t deadline)
{
    int ms = c->timeout_ms > 0 ? c->timeout_ms : 0;
    c->want = POLLIN;
    if (deadline >= 0 && (ms == 0 || ms > deadline - rpcc_now_ms() + RPCC_AWAIT_SLACK_MS)) {
        errno = EAGAIN;
        return -1;
    }
    if (ms != c->rcvtimeo_ms) {
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) {
            errno = EAGAIN;
            return -1;
        }
        c->rcvtimeo_ms = ms;
    }
    return recv(c->fd, buf, len, 0);
}

/* A recv failed with errno: set the sentence -- OpenSSL's reason when the
 * session failed (an alert from the master says why it refused us), else
 * strerror -- and return the code to break the stream with: SMP_EAUTH when
 * the master refused our certificate (none given, unknown CA, bad or
 * expired: another try would be refused the same way, so a call does not
 * reconnect and retry until its deadline), else SMP_EIO. Clears the kept
 * reason. */
static int recv_failed(rpcc_conn *c)
{
    int rc = SMP_EIO;
    if (errno == EPROTO && c->tls_why[0] != '\0') {
        int no_cert = strstr(c->tls_why, "certificate required") != NULL;
        if (strstr(c->tls_why, " alert ") != NULL &&
            (strstr(c->tls_why, "certificate") != NULL || strstr(c->tls_why, "unknown ca") != NULL ||
             strstr(c->tls_why, "access denied") != NULL))
            rc = SMP_EAUTH;
        rpcc_conn_err(c, "recv: TLS: %s%s", c->tls_why,
                      no_cert ? " (this master verifies clients: give a client certificate and its "
                                "key, --tls-cert/--tls-key or WM_TLS_CERT/WM_TLS_KEY)"
                              : "");
    } else {
        rpcc_conn_err(c, "recv: %s", strerror(errno));
    }
    c->tls_why[0] = '\0';
    return rc;
}

const char *rpcc_auth_tenant(const rpcc_conn *c)
{
    return c != NULL ? c->auth_tenant : "";
}

const char *rpcc_auth_role(const rpcc_conn *c)
{
    return c != NULL ? c->auth_role : "";
}

const char *rpcc_endpoint(const rpcc_conn *c)
{
    return c != NULL ? c->endpoint : "";
}

uint64_t rpcc_moves(const rpcc_conn *c)
{
    return c != NULL ? c->moves : 0;
}

void rpcc_set_quiet(rpcc_conn *c, int quiet_ms)
{
    if (c != NULL)
        c->quiet_ms = quiet_ms > 0 ? quiet_ms : 0;
}

void rpcc_close(rpcc_conn *c)
{
    if (c == NULL)
        return;
    rpcc_drop_stream(c);
    SSL_CTX_free(c->tls);
    free(c->in);
    free(c->token);
    free(c);
}

void rpcc_set_timeout(rpcc_conn *c, int timeout_ms)
{
    if (c != NULL)
        c->timeout_ms = timeout_ms;
}

const char *rpcc_last_error(const rpcc_conn *c)
{
    return c != NULL ? c->err : "no connection";
}

/* Move the stream left for a silent master (c->relocate) before a request
 * leaves: to the leader a hedge named, else to the next endpoint. SMP_OK,
 * or the connect's error with the connection broken. */
static int relocate(rpcc_conn *c)
{
    return rpcc_conn_move(c, rpcc_deadline_of(c->timeout_ms));
}

/* -- Sending --------------------------------------------------------------- */

static int salvage_refusal(rpcc_conn *c);

/* Write all of buf. A timeout before the first byte leaves the stream intact
 * (SMP_EAGAIN); after a partial write the stream is broken. */
static int write_all(rpcc_conn *c, const uint8_t *buf, size_t len, int64_t deadline)
{
    size_t done = 0;
    while (done < len) {
        ssize_t w = io_send(c, buf + done, len - done);
        if (w > 0) {
            done += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int r = wc_wait_fd(c->fd, c->want, deadline);
            if (r > 0)
                continue;
            if (r == 0) {
                rpcc_conn_err(c, "send timed out after %d ms (%zu of %zu bytes sent)",
                              c->timeout_ms, done, len);
                return done > 0 ? conn_break(c, SMP_EAGAIN) : SMP_EAGAIN;
            }
            errno = -r;
        }
        rpcc_conn_err(c, "send: %s", w < 0 ? strerror(errno) : "no progress");
        return conn_break(c, SMP_EIO);
    }
    return SMP_OK;
}

int rpcc_send_raw(rpcc_conn *c, const uint8_t *bytes, size_t len)
{
    int rc, r;
    if (c == NULL || (bytes == NULL && len > 0))
        return SMP_EINVAL;
    if ((c->relocate || rpcc_at_silent_master(c)) && (rc = relocate(c)) < 0)
        return rc;
    if (c->broken)
        return c->broken;
    rc = write_all(c, bytes, len, rpcc_deadline_of(c->timeout_ms));
    if (rc == SMP_EIO && (r = salvage_refusal(c)) < 0)
        return r;
    return rc;
}

int rpcc_send(rpcc_conn *c,
              uint32_t service,
              uint32_t method,
              const uint8_t *req_body,
              size_t req_len,
              uint64_t *request_id)
{
    uint8_t small[512], *frame = small;
    size_t size;
    int rc, r;

    if (c == NULL || (req_body == NULL && req_len > 0))
        return SMP_EINVAL;
    if ((c->relocate || rpcc_at_silent_master(c)) && (rc = relocate(c)) < 0)
        return rc;
    if (c->broken)
        return c->broken;
    size = rpc_env_request_size(c->next_id, service, method, req_len);
    if (size > c->max_frame) {
        rpcc_conn_err(c, "request of %zu bytes exceeds max_frame_bytes %" PRIu32, size,
                      c->max_frame);
        return SMP_ERANGE;
    }
    if (4 + size > sizeof(small) && (frame = malloc(4 + size)) == NULL) {
        rpcc_conn_err(c, "out of memory for a request of %zu bytes", size);
        return SMP_ENOMEM;
    }
    frame[0] = (uint8_t)(size >> 24);
    frame[1] = (uint8_t)(size >> 16);
    frame[2] = (uint8_t)(size >> 8);
    frame[3] = (uint8_t)size;
    rpc_env_encode_request(frame + 4, c->next_id, service, method, req_body, req_len);
    rc = write_all(c, frame, 4 + size, rpcc_op_deadline(c));
    if (frame != small)
        free(frame);
    if (rc == SMP_EIO && (r = salvage_refusal(c)) < 0)
        return r;
    if (rc < 0)
        return rc;
    if (request_id != NULL)
        *request_id = c->next_id;
    c->next_id++;
    c->in_flight++;
    c->await_reply = c->in_len == 0;
    return SMP_OK;
}

/* -- Receiving ------------------------------------------------------------- */

/* 1 when the 4 bytes b, read as a frame length, are text: a peer of
 * another protocol answering (an HTTP status line, an SSH banner, ...). */
static int text_bytes(const uint8_t *b)
{
    for (int i = 0; i < 4; i++)
        if (b[i] < 0x20 || b[i] > 0x7e)
            return 0;
    return 1;
}

/* Read and decode the next response frame. SMP_EAGAIN on timeout (the
 * partial frame stays buffered); the other errors break the stream. A
 * length that reads "HTTP" is said to be an HTTP answer (the master's
 * admin/metrics port given as its RPC address), one over max_frame_bytes
 * that is text is said to be text. */
static int read_frame(rpcc_conn *c, int64_t deadline, rpcc_pending **out)
{
    for (;;) {
        if (c->in_len >= 4) {
            uint32_t len = (uint32_t)c->in[0] << 24 | (uint32_t)c->in[1] << 16 |
                           (uint32_t)c->in[2] << 8 | (uint32_t)c->in[3];
            if (len == 0) {
                rpcc_conn_err(c, "server sent a zero-length frame");
                return conn_break(c, SMP_EPROTO);
            }
            if (memcmp(c->in, "HTTP", 4) == 0) {
                rpcc_conn_err(c, "the peer answered HTTP, not the master's RPC protocol (is this "
                                 "the admin/metrics port?)");
                return conn_break(c, SMP_EPROTO);
            }
            if (len > c->max_frame) {
                rpcc_conn_err(c, "response frame of %" PRIu32 " bytes exceeds max_frame_bytes "
                                 "%" PRIu32 "%s%.4s%s",
                              len, c->max_frame,
                              text_bytes(c->in) ? " (its length reads as text '" : "",
                              text_bytes(c->in) ? (const char *)c->in : "",
                              text_bytes(c->in) ? "': a peer of another protocol?)" : "");
                return conn_break(c, SMP_ERANGE);
            }
            if (c->in_len >= 4 + (size_t)len) {
                rpcc_pending *p = malloc(sizeof(*p) + len);
                if (p == NULL) {
                    rpcc_conn_err(c, "out of memory for a response of %" PRIu32 " bytes", len);
                    return SMP_ENOMEM; /* the frame stays buffered */
                }
                memcpy(p->frame, c->in + 4, len);
                if (rpc_env_decode_response(p->frame, len, &p->r) < 0) {
                    free(p);
                    rpcc_conn_err(c, "response frame of %" PRIu32 " bytes does not decode", len);
                    return conn_break(c, SMP_EPROTO);
                }
                memmove(c->in, c->in + 4 + len, c->in_len - 4 - len);
                c->in_len -= 4 + (size_t)len;
                c->answered = 1;
                *out = p;
                return SMP_OK;
            }
        }
        {
            /* in_len < 4 + max_frame here, so the buffer stays bounded */
            size_t want = c->in_len + RPCC_READ_CHUNK;
            ssize_t r;
            if (want > c->in_cap) {
                size_t cap = c->in_cap ? c->in_cap : RPCC_READ_CHUNK;
                uint8_t *nb;
                while (cap < want)
                    cap *= 2;
                if ((nb = realloc(c->in, cap)) == NULL) {
                    rpcc_conn_err(c, "out of memory for a response");
                    return SMP_ENOMEM;
                }
                c->in = nb;
                c->in_cap = cap;
            }
            if (c->await_reply && c->ssl == NULL && deadline != 0) {
                /* Its answer cannot be here yet in the common case: on TCP
                 * a recv that blocks for it, on a Unix socket a wait before
                 * the recv, rather than a recv that would only say EAGAIN.
                 * What the blocking recv leaves -- a part of a frame, EINTR,
                 * the timeout -- goes on as below, whose wait ends at the
                 * deadline. Not for a look without waiting (deadline 0). */
                c->await_reply = 0;
                if (c->recv_blocks) {
                    r = io_recv_awaited(c, c->in + c->in_len, c->in_cap - c->in_len, deadline);
                } else {
                    c->want = POLLIN;
                    r = -1;
                    errno = EAGAIN;
                }
            } else {
                c->await_reply = 0;
                r = io_recv(c, c->in + c->in_len, c->in_cap - c->in_len);
            }
            if (r > 0) {
                c->in_len += (size_t)r;
                continue;
            }
            if (r == 0) {
                if (!c->answered && c->in_len == 0)
                    /* e.g. an HTTP server waiting for a request line, then timing out */
                    rpcc_conn_err(c, "connection closed by the server before it answered "
                                  "anything (is %s the master's RPC endpoint, its listen.tcp or "
                                  "listen.unix, and not another service such as its admin "
                                  "endpoint?)", c->endpoint);
                else
                    rpcc_conn_err(c, "connection closed by the server%s",
                                  c->in_len > 0 ? " in the middle of a frame" : "");
                return conn_break(c, SMP_EIO);
            }
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                int w = wc_wait_fd(c->fd, c->want, deadline);
                if (w > 0)
                    continue;
                if (w == 0) {
                    if (!c->answered && c->in_len == 0)
                        /* a hung master, or a service that waits for
                         * more of its own protocol (an HTTP request line) */
                        rpcc_conn_err(c, "no response within %d ms: %s accepted the connection "
                                      "but has answered nothing on it (a hung master, or not "
                                      "the master's RPC endpoint?)", c->timeout_ms, c->endpoint);
                    else
                        rpcc_conn_err(c, "no response within %d ms", c->timeout_ms);
                    return SMP_EAGAIN;
                }
                errno = -w;
            }
            return conn_break(c, recv_failed(c));
        }
    }
}

/* Present the connection's token on the socket just opened (auth.HELLO,
 * service 4 method 1) and wait for the answer until deadline, so that no
 * other request goes before it. SMP_OK (also without a token: nothing is
 * sent), the master's refusal (SMP_EAUTH) or a transport error, with the
 * cause in err. Records the tenant and role the master answered. Without a
 * token but with a client certificate on TLS, HELLO goes with an empty
 * token, which asks the identity the certificate maps to (auth.certificates);
 * a refusal of that (no mapping, or an older master) is not an error: the
 * connection stays as it is and the master's refusals name the cause.
 * A refusal by auth.limits (SMP_EAGAIN with retry_after_ms) is paced: the
 * HELLO goes again when the master says, and one still refused at the
 * deadline is that error, never a connection without its identity (whose
 * identities would then name another tenant).
 *
 * With probe set (a list of several masters) that empty HELLO goes on
 * every socket: a kernel accepts a connection for a process that is paused
 * or hung, and without an answer here the first call would wait its whole
 * timeout there instead of trying the next master. A HELLO not answered by
 * deadline is SMP_EAGAIN, said so in err. */
static size_t error_text_len(const rpc_env_response *r);

int rpcc_hello(rpcc_conn *c, int64_t deadline, int probe, char *err, size_t errlen)
{
    AuthHelloRequest req = AUTH_HELLO_REQUEST__INIT;
    AuthHelloResponse *resp;
    uint8_t *body;
    size_t len;
    uint64_t id = 0;
    rpcc_pending *p = NULL;
    int rc;

    int whoami = c->token == NULL;
    c->auth_tenant[0] = c->auth_role[0] = '\0';
    c->leadership = 0;
    c->hello_leader[0] = '\0';
    if (whoami && !probe && !c->always_hello &&
        (c->ssl == NULL || SSL_get_certificate(c->ssl) == NULL))
        return SMP_OK;
    int64_t started = rpcc_now_ms();
    req.token.data = (uint8_t *)(whoami ? "" : c->token);
    req.token.len = whoami ? 0 : strlen(c->token);
    len = auth_hello_request__get_packed_size(&req);
    if ((body = malloc(len ? len : 1)) == NULL) {
        wm_errbuf(err, errlen, "out of memory");
        return SMP_ENOMEM;
    }
    auth_hello_request__pack(&req, body);
    /* A HELLO refused by auth.limits (a certificate's connection takes from
     * its tenant's bucket from the handshake on) is paced as every call is:
     * sent again when the master says it may pass, until the deadline (or
     * the connection's timeout when there is none). */
    for (;;) {
        rc = rpcc_send(c, HOST_SERVICE__HOST_SERVICE_AUTH, AUTH_METHOD__AUTH_HELLO, body, len, &id);
        if (rc == SMP_OK) {
            rc = read_frame(c, deadline, &p);
            c->in_flight = 0;
        }
        if (rc == SMP_OK && p->r.status == SMP_EAGAIN && p->r.retry_after_ms > 0) {
            int64_t at = rpcc_now_ms() + p->r.retry_after_ms;
            int64_t until = deadline >= 0 ? deadline : started + (c->timeout_ms > 0 ? c->timeout_ms
                                                                                   : RPCC_FOLLOW_MS);
            if (at < until) {
                free(p);
                p = NULL;
                rpcc_sleep_until(at);
                continue;
            }
        }
        break;
    }
    free(body);
    if (rc == SMP_EAGAIN && probe)
        wm_errbuf(err, errlen, "%s accepted the connection but did not answer its first "
                  "request within %lld ms (a paused, hung or overloaded master)", c->endpoint,
                  (long long)(rpcc_now_ms() - started));
    else if (rc < 0)
        wm_errbuf(err, errlen, "auth.HELLO: %s", c->err);
    if (rc < 0) {
        c->broken = 0;
        return rc;
    }
    if (p->r.status != 0 && whoami && p->r.status != SMP_EAGAIN) {
        free(p);
        return SMP_OK;
    }
    if (p->r.status != 0) {
        rc = p->r.status;
        wm_errbuf(err, errlen, "%.*s", (int)error_text_len(&p->r), p->r.error ? p->r.error : "");
        if (err != NULL && errlen > 0 && err[0] == '\0')
            wm_errbuf(err, errlen, "auth.HELLO refused: %s", smp_strerror(rc));
        free(p);
        return rc;
    }
    if (p->r.request_id != id ||
        (resp = auth_hello_response__unpack(NULL, p->r.body_len, p->r.body)) == NULL) {
        free(p);
        wm_errbuf(err, errlen, "auth.HELLO: the answer does not decode");
        return SMP_EPROTO;
    }
    snprintf(c->auth_tenant, sizeof(c->auth_tenant), "%s", resp->tenant ? resp->tenant : "");
    snprintf(c->auth_role, sizeof(c->auth_role), "%s", resp->enabled && resp->role ? resp->role : "");
    c->leadership = resp->leadership == RPCC_LEADS || resp->leadership == RPCC_STANDBY
                        ? (int)resp->leadership
                        : 0;
    if (c->leadership == RPCC_STANDBY && resp->leader != NULL &&
        master_list_check(resp->leader, NULL, 0) == SMP_OK)
        snprintf(c->hello_leader, sizeof(c->hello_leader), "%s", resp->leader);
    auth_hello_response__free_unpacked(resp, NULL);
    free(p);
    return SMP_OK;
}

/* The length of a response's error as the caller's C string: it ends at a
 * NUL inside the bytes, as protobuf-c's string did. */
static size_t error_text_len(const rpc_env_response *r)
{
    return r->error != NULL ? strnlen(r->error, r->error_len) : 0;
}

/* Keep a response for a later rpcc_recv (FIFO). */
static void stash_push(rpcc_conn *c, rpcc_pending *p)
{
    p->next = NULL;
    if (c->tail != NULL)
        c->tail->next = p;
    else
        c->head = p;
    c->tail = p;
}

/* Turn a connection-level refusal (request_id 0) into the return code and
 * last error, and break the stream with it. Frees p. */
static int take_refusal(rpcc_conn *c, rpcc_pending *p)
{
    int rc = p->r.status < 0 ? p->r.status : SMP_EPROTO;
    int elen = (int)error_text_len(&p->r);
    if (elen > 0)
        rpcc_conn_err(c, "server: %.*s", elen, p->r.error);
    else
        rpcc_conn_err(c, "server: %s", smp_strerror(rc));
    free(p);
    c->broken = rc;
    return rc;
}

/* After a send failed because the server closed: it may have refused the
 * connection with a request_id 0 response just before (oversized frame, too
 * many connections). Take what already arrived, without waiting; responses
 * to earlier requests are kept for rpcc_recv. Returns the refusal's status,
 * or 0 when none arrived (the send failure and its message stand). */
static int salvage_refusal(rpcc_conn *c)
{
    char saved[sizeof(c->err)];
    int broken = c->broken;
    rpcc_pending *p;

    memcpy(saved, c->err, sizeof(saved));
    c->broken = 0;
    while (read_frame(c, 0 /* no wait */, &p) == SMP_OK) {
        if (p->r.request_id == 0)
            return take_refusal(c, p);
        stash_push(c, p);
    }
    memcpy(c->err, saved, sizeof(saved));
    c->broken = broken;
    return 0;
}

/* Hand a response to the caller and free it. */
static int deliver(rpcc_conn *c,
                   rpcc_pending *p,
                   uint64_t *got_id,
                   int *status,
                   uint8_t **resp_body,
                   size_t *resp_len,
                   char **errmsg)
{
    const rpc_env_response *m = &p->r;
    uint8_t *body = NULL;
    char *msg = NULL;
    size_t elen = error_text_len(m);

    if (resp_body != NULL && m->body_len > 0) {
        if ((body = malloc(m->body_len)) == NULL)
            goto no_memory;
        memcpy(body, m->body, m->body_len);
    }
    if (errmsg != NULL && elen > 0) {
        if ((msg = malloc(elen + 1)) == NULL)
            goto free_body;
        memcpy(msg, m->error, elen);
        msg[elen] = '\0';
    }
    if (m->status == SMP_ENOTLEADER)
        c->hinted = master_list_set_leader(&c->ml, m->leader, m->leader_len);
    c->retry_after_ms = m->retry_after_ms;
    if (m->status == SMP_EAGAIN && m->stopping)
        c->peer_stopping = 1;
    if (c->in_flight > 0)
        c->in_flight--;
    if (got_id != NULL)
        *got_id = m->request_id;
    if (status != NULL)
        *status = m->status;
    if (resp_body != NULL)
        *resp_body = body;
    if (resp_len != NULL)
        *resp_len = m->body_len;
    if (errmsg != NULL)
        *errmsg = msg;
    c->err[0] = '\0';
    free(p);
    return SMP_OK;

free_body:
    free(body);
no_memory:
    rpcc_conn_err(c, "out of memory for a response of %zu bytes", m->body_len);
    free(p);
    return SMP_ENOMEM;
}

/* rpcc_recv waiting until deadline (-1: no bound). */
int rpcc_recv_by(rpcc_conn *c,
                 uint64_t request_id,
                 int64_t deadline,
                 uint64_t *got_id,
                 int *status,
                 uint8_t **resp_body,
                 size_t *resp_len,
                 char **errmsg)
{
    rpcc_pending *p, *prev = NULL;
    int rc;

    for (p = c->head; p != NULL; prev = p, p = p->next) {
        if (request_id == 0 || p->r.request_id == request_id) {
            if (prev != NULL)
                prev->next = p->next;
            else
                c->head = p->next;
            if (c->tail == p)
                c->tail = prev;
            return deliver(c, p, got_id, status, resp_body, resp_len, errmsg);
        }
    }
    if (c->broken)
        return c->broken;
    for (;;) {
        if ((rc = read_frame(c, deadline, &p)) < 0)
            return rc;
        if (p->r.request_id == 0)
            return take_refusal(c, p); /* the server refuses the connection itself */
        if (request_id == 0 || p->r.request_id == request_id)
            return deliver(c, p, got_id, status, resp_body, resp_len, errmsg);
        stash_push(c, p);
    }
}

int rpcc_recv(rpcc_conn *c,
              uint64_t request_id,
              uint64_t *got_id,
              int *status,
              uint8_t **resp_body,
              size_t *resp_len,
              char **errmsg)
{
    if (c == NULL)
        return SMP_EINVAL;
    return rpcc_recv_by(c, request_id, rpcc_deadline_of(c->timeout_ms), got_id, status, resp_body,
                        resp_len, errmsg);
}

int rpcc_fd(const rpcc_conn *c)
{
    return c != NULL ? c->fd : -1;
}

/* Before a request that may not be sent twice leaves on a stream with
 * nothing in flight: 1 when the master already closed it (a leader that
 * stopped, a restart), which then breaks with SMP_EIO, so that the call
 * fails over as a request that never left instead of going into a closed
 * stream, where its fate could not be told. A master never half-closes a
 * live connection, so the end of its side of the stream (POLLRDHUP) is the
 * close; bytes that arrived unasked are left for the read that finds them. */
static int peer_closed(rpcc_conn *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN | POLLRDHUP};
    if (c->fd < 0 || c->broken || c->in_flight != 0 || c->head != NULL || c->in_len != 0)
        return 0;
    if (poll(&p, 1, 0) != 1 || !(p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        return 0;
    rpcc_conn_err(c, "connection closed by the server %s while idle", c->endpoint);
    conn_break(c, SMP_EIO);
    return 1;
}

/* The deadline of a call's moves: the call's end (the connection's timeout
 * from the call's start: the wait for a silent master and the moves after it
 * share it), or RPCC_FOLLOW_MS from the first move when it waits forever. */
static int64_t follow_deadline(const rpcc_conn *c)
{
    if (c->call_ends && c->call_end >= 0)
        return c->call_end;
    return rpcc_now_ms() + (c->timeout_ms > 0 ? c->timeout_ms : RPCC_FOLLOW_MS);
}

/* The work of rpcc_call_ex, within c->call_end: send, wait for the answer
 * (hedged on a list), follow NOT_LEADER and a lost stream to the next
 * master while the request may go again, and send a refusal of
 * auth.limits again when it says. */
static int call_ex(rpcc_conn *c,
                   unsigned flags,
                   uint32_t service,
                   uint32_t method,
                   const uint8_t *req_body,
                   size_t req_len,
                   int *status,
                   uint8_t **resp_body,
                   size_t *resp_len,
                   char **errmsg)
{
    int64_t deadline = -1; /* set at the first move: a call that stays costs no clock read */
    int64_t limited_until = -1; /* set at the first refusal of auth.limits */
    int backoff = 0, rc, st = 0, hinted_last = 0;
    size_t unanswered = 0; /* streams in a row closed before anything came on them */
    uint64_t id;

    if (flags & RPCC_IDEMPOTENT)
        flags |= RPCC_FAILOVER;
    for (;;) {
        int sent = 0, lost;
        uint8_t *body = NULL;
        char *msg = NULL;
        size_t len = 0;
        /* An idempotent call goes again after a lost answer anyway. */
        if ((flags & RPCC_FAILOVER) && !(flags & RPCC_IDEMPOTENT))
            peer_closed(c);
        rc = rpcc_send(c, service, method, req_body, req_len, &id);
        if (rc == SMP_OK) {
            sent = 1;
            rc = rpcc_recv_watched(c, flags, service, method, req_body, req_len, id, &st,
                                   resp_body ? &body : NULL, &len, errmsg ? &msg : NULL);
        }
        if (rc == RPCC_HEDGE_MOVE && (flags & RPCC_IDEMPOTENT)) {
            /* Another master leads while the one asked is silent. */
            if (deadline < 0)
                deadline = follow_deadline(c);
            goto move;
        }
        if (rc == RPCC_HEDGE_MOVE) {
            /* Not sent twice: the stream goes, the next call goes there. */
            char ep[sizeof(c->endpoint)];
            memcpy(ep, c->endpoint, sizeof(ep));
            rpcc_drop_stream(c);
            c->relocate = 1;
            rpcc_conn_err(c, "%s stopped answering and %s leads now: whether the request was "
                          "applied is not known (it is not sent again)",
                          ep, master_list_current(&c->ml));
            return SMP_EIO;
        }
        if (sent && rc < 0 && c->in_flight > 0)
            c->in_flight--; /* nobody claims its answer (stashed if it still comes) */
        if (rc == SMP_OK && st == SMP_EAGAIN && c->retry_after_ms > 0) {
            /* Refused by auth.limits before any service saw it: the same
             * request is sent again when the master says it may pass, until
             * the call's end (the refusal is returned then). A resend near
             * the end still gets an attempt's time for its answer. */
            int64_t at = rpcc_now_ms() + c->retry_after_ms;
            if (limited_until < 0)
                limited_until = follow_deadline(c);
            if (at < limited_until) {
                free(body);
                free(msg);
                rpcc_sleep_until(at);
                c->call_resent = 1;
                continue;
            }
        }
        if (rc == SMP_OK && st == SMP_EAGAIN && c->peer_stopping && c->await_restart &&
            c->in_flight == 0) {
            /* A master alone that is stopping applied nothing: the same
             * request goes again, on this stream until the master closes
             * it (a loss of it is then no doubt, below), then to the master
             * back at the endpoint, until the call's end (the refusal is
             * returned then). */
            if (deadline < 0)
                deadline = follow_deadline(c);
            if (rpcc_now_ms() < deadline) {
                free(body);
                free(msg);
                backoff = rpcc_next_pause(c, backoff);
                rpcc_sleep_capped(backoff, deadline);
                c->call_resent = 1;
                continue;
            }
        }
        if (rc == SMP_OK && st == SMP_ENOTLEADER && deadline < 0)
            deadline = follow_deadline(c);
        if (rc == SMP_OK && st == SMP_ENOTLEADER && c->in_flight == 0 && rpcc_now_ms() < deadline) {
            /* A standby: it applied nothing, the request goes to the leader. */
            free(body);
            free(msg);
            goto move;
        }
        /* The stream is gone (closed, reset, or no connection after a move
         * that failed) -- not refused by the master, which would refuse the
         * request again -- before the request left, or after it did; or
         * after its master said it was stopping, when it applies nothing
         * that arrives. */
        lost = rc < 0 && (c->broken == SMP_EIO || c->fd < 0) && c->in_flight == 0 &&
               (((flags & RPCC_FAILOVER) && (!sent || (flags & RPCC_IDEMPOTENT))) ||
                (c->peer_stopping && c->await_restart));
        /* A peer that closes every connection before it answers anything
         * -- twice in a row, and each endpoint of a list once -- is not a
         * master (another service's port): say so now, not at the end. */
        if (lost && sent)
            unanswered = c->answered ? 0 : unanswered + 1;
        if (lost && unanswered >= 2 && unanswered >= c->ml.n)
            lost = 0;
        if (lost && deadline < 0)
            deadline = follow_deadline(c);
        if (lost && rpcc_now_ms() < deadline) {
            c->hinted = 0;
            goto move;
        }
        if (rc == SMP_EAGAIN && sent && c->in_flight == 0 && master_list_round(&c->ml) > 1)
            rpcc_leave_silent_master(c);
        if (rc == SMP_OK) {
            if (status != NULL)
                *status = st;
            if (resp_body != NULL)
                *resp_body = body;
            if (resp_len != NULL)
                *resp_len = len;
            if (errmsg != NULL)
                *errmsg = msg;
        }
        return rc;

    move:
        /* A standby that named the leader is followed at once; a name that
         * led to another refusal (a stale one) is not trusted twice in a
         * row without a pause. */
        if (backoff > 0 && (!c->hinted || hinted_last))
            rpcc_sleep_capped(backoff, deadline);
        hinted_last = c->hinted;
        backoff = rpcc_next_pause(c, backoff);
        c->call_resent = 1;
        if ((rc = rpcc_conn_move(c, deadline)) < 0)
            return rc;
    }
}

/* One call bounded as a whole by the connection's timeout (call_ex does
 * the work). */
int rpcc_call_ex(rpcc_conn *c,
                 unsigned flags,
                 uint32_t service,
                 uint32_t method,
                 const uint8_t *req_body,
                 size_t req_len,
                 int *status,
                 uint8_t **resp_body,
                 size_t *resp_len,
                 char **errmsg)
{
    if (c == NULL)
        return SMP_EINVAL;
    int outer = !c->call_ends; /* a nested call keeps the outer call's end */
    if (outer) {
        c->call_end = rpcc_deadline_of(c->timeout_ms);
        c->call_ends = 1;
        c->call_resent = 0;
    }
    int rc = call_ex(c, flags, service, method, req_body, req_len, status, resp_body, resp_len,
                     errmsg);
    if (outer)
        c->call_ends = 0;
    return rc;
}

int rpcc_call(rpcc_conn *c,
              uint32_t service,
              uint32_t method,
              const uint8_t *req_body,
              size_t req_len,
              int *status,
              uint8_t **resp_body,
              size_t *resp_len,
              char **errmsg)
{
    return rpcc_call_ex(c, 0, service, method, req_body, req_len, status, resp_body, resp_len,
                        errmsg);
}

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
                     char **errmsg)
{
    size_t len = req ? protobuf_c_message_get_packed_size(req) : 0;
    uint8_t *buf = malloc(len ? len : 1);
    uint8_t *rbody = NULL;
    size_t rlen = 0;
    char *msg = NULL;
    int rc;
    if (body) *body = NULL;
    if (body_len) *body_len = 0;
    if (errmsg) *errmsg = NULL;
    if (resp) *resp = NULL;
    if (buf == NULL) return SMP_ENOMEM;
    if (req) protobuf_c_message_pack(req, buf);
    rc = rpcc_call_ex(c, flags, service, method, buf, len, status, &rbody, &rlen, &msg);
    free(buf);
    if (rc < 0) goto free_reply;
    if (*status != 0) {
        if (body) {
            *body = rbody;
            rbody = NULL;
        }
        if (body_len) *body_len = rlen;
        if (errmsg) {
            *errmsg = msg;
            msg = NULL;
        }
    } else if (desc != NULL && resp != NULL) {
        *resp = protobuf_c_message_unpack(desc, NULL, rlen, rbody);
        if (*resp == NULL) {
            rpcc_conn_err(c, "reply does not decode as %s", desc->name);
            rc = SMP_EPROTO;
        }
    }
free_reply:
    free(rbody);
    free(msg);
    return rc;
}

int rpcc_call_msg(rpcc_conn *c,
                  uint32_t service,
                  uint32_t method,
                  const ProtobufCMessage *req,
                  const ProtobufCMessageDescriptor *desc,
                  ProtobufCMessage **resp,
                  int *status,
                  uint8_t **body,
                  size_t *body_len,
                  char **errmsg)
{
    return rpcc_call_msg_ex(c, 0, service, method, req, desc, resp, status, body, body_len,
                            errmsg);
}
