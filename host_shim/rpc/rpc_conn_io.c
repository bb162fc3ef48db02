/* rpc_conn_io.c -- one RPC connection's input: reading, framing, TLS, turns.
 *
 * Each connection reads length-prefixed frames into a buffer that grows with
 * the bytes that actually arrive (a header that claims 64 MiB costs nothing
 * until 64 MiB come) and hands each complete frame to rpc_conn_dispatch
 * (rpc_dispatch.c). One read, or one turn, dispatches at most
 * RPC_BATCH_REQUESTS frames: what a pipelining client sent beyond that waits
 * in the connection (reading stopped) for its next turn, which the server's
 * check handle gives it once per loop iteration after every other readable
 * connection was read, so one client cannot hold the loop from the others.
 * Replies leave through rpc_output.c.
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
 * handshake closes the connection. Neither affects other connections. A
 * finished handshake may authenticate the connection by its client
 * certificate (rpc_conn_identify_cert, rpc_dispatch.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>

#include "rpc_internal.h"
#include "rpc_envelope.h"

/* -- Closing --------------------------------------------------------------- */

static void on_conn_closed(uv_handle_t *h)
{
    rpc_conn_unref((rpc_conn *)h->data);
}

/* Close a connection now: unlink it from the server, stop reading frames
 * and let libuv cancel its pending writes. Idempotent. Outstanding calls keep
 * the memory alive; their replies are dropped. The frame buffer goes with
 * the last reference: a handler that closed the connection by replying may
 * still be reading the body it was given, which points into it. */
void rpc_conn_close(rpc_conn *c)
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
    if (s->close_hook != NULL) s->close_hook(s->close_hook_arg, c->serial);
    uv_close(&c->h.handle, on_conn_closed);
}

/* The fatal error response is written (or cancelled): close for good. */
static void on_shutdown(uv_shutdown_t *req, int status)
{
    rpc_sreq *sr = (rpc_sreq *)req;
    rpc_conn *c = sr->conn;
    (void)status;
    free(sr);
    rpc_conn_close(c);
    rpc_conn_unref(c);
}

/* A fatal error on a connection: stop reading, send one error response with
 * request_id 0 and close once it has been written (shutdown waits for the
 * queued writes). */
void rpc_conn_fatal(rpc_conn *c, int status, const char *message)
{
    rpc_sreq *sr;
    if (c->closing || c->draining)
        return;
    c->draining = 1;
    if (c->reading) {
        uv_read_stop(&c->h.stream);
        c->reading = 0;
    }
    if (rpc_conn_send(c, 0, status, message, NULL, 0) < 0 || rpc_conn_flush(c) < 0)
        return; /* already closed */
    if ((sr = malloc(sizeof(*sr))) == NULL) {
        rpc_conn_close(c);
        return;
    }
    sr->conn = c;
    if (uv_shutdown(&sr->req, &c->h.stream, on_shutdown) < 0) {
        free(sr);
        rpc_conn_close(c);
        return;
    }
    rpc_conn_ref(c);
}

/* -- Reading --------------------------------------------------------------- */

/* Start or stop reading so that a connection reads only while its unsent
 * output (pending and queued) and its unanswered calls are within bounds
 * and no input of an earlier read waits for its turn. A failing
 * uv_read_start closes the connection. */
void rpc_conn_set_reading(rpc_conn *c)
{
    rpc_server *s = c->srv;
    int bounded, want;
    if (c->closing || c->draining)
        return;
    bounded = c->out_bytes + c->olen <= s->max_output && c->ncalls < s->max_inflight;
    want = bounded && c->in_len == 0 && !c->tls_more;
    if (want && !c->reading) {
        if (uv_read_start(&c->h.stream, rpc_conn_on_alloc, rpc_conn_on_read) == 0) {
            c->reading = 1;
        } else {
            s->st.err_io++;
            rpc_conn_close(c);
        }
    } else if (!want && c->reading) {
        uv_read_stop(&c->h.stream);
        c->reading = 0;
        if (!bounded) /* not for a turn: that is not backpressure */
            s->st.backpressure_pauses++;
    }
}

void rpc_conn_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
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
 * the connection goes fatal or closes, or before a frame when c's budget of
 * frames is spent. Returns how many bytes it consumed (all of them unless
 * the budget stopped it). */
static size_t conn_feed(rpc_conn *c, const uint8_t *p, size_t n)
{
    rpc_server *s = c->srv;
    const uint8_t *start = p;
    char msg[160];
    while (n > 0 && !c->closing && !c->draining) {
        if (!c->in_body) {
            if (c->hdr_have == 0 && c->budget == 0)
                break;
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
                rpc_conn_fatal(c, SMP_EPROTO, "zero-length frame");
                return (size_t)(p - start);
            }
            if (c->body_len > s->max_frame) {
                s->st.err_oversized_frame++;
                snprintf(msg, sizeof(msg),
                         "frame of %" PRIu32 " bytes exceeds max_frame_bytes %" PRIu32,
                         c->body_len, s->max_frame);
                rpc_conn_fatal(c, SMP_ERANGE, msg);
                return (size_t)(p - start);
            }
            c->in_body = 1;
            c->body_have = 0;
            if (s->limits != NULL &&
                (c->skip_status = rpc_limits_charge_frame(s->limits, &c->lim, c->body_len,
                                                          c->skip_msg, sizeof(c->skip_msg))) < 0) {
                /* over the in-flight bytes: it may pass once earlier
                 * requests are answered (a size over the cap never will) */
                c->skip_retry_ms = c->skip_status == SMP_EAGAIN ? RPC_INFLIGHT_RETRY_MS : 0;
                c->skipping = 1;
                c->skip_have = 0;
                continue;
            }
            if (n >= c->body_len) {
                /* the whole body is here: dispatch in place */
                size_t len = c->body_len;
                c->in_body = 0;
                c->budget--;
                rpc_conn_dispatch(c, p, len);
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
                c->budget--;
                rpc_conn_send_refusal(c, rpc_prefix_request_id(c->skip_prefix, c->skip_have),
                                      c->skip_status, c->skip_msg, c->skip_retry_ms, 0);
            }
            continue;
        }
        {
            size_t k = c->body_len - c->body_have;
            if (k > n)
                k = n;
            if (body_append(c, p, k) < 0) {
                rpc_conn_fatal(c, SMP_ENOMEM, "out of memory for the request frame");
                return (size_t)(p - start);
            }
            p += k;
            n -= k;
            if (c->body_have == c->body_len) {
                c->in_body = 0;
                c->budget--;
                rpc_conn_dispatch(c, c->body, c->body_have);
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
    return (size_t)(p - start);
}

/* Put c on its server's resume list (once; the list holds a reference). */
static void want_resume(rpc_conn *c)
{
    rpc_server *s = c->srv;
    if (c->resume_queued) return;
    c->resume_queued = 1;
    c->resume_next = s->resume_head;
    s->resume_head = c;
    rpc_conn_ref(c);
}

/* Feed n bytes of plaintext; what c's budget leaves undispatched is kept
 * in c->in for c's next turn (reading stops meanwhile). Out of memory for
 * that is fatal for the connection. */
static void conn_take(rpc_conn *c, const uint8_t *p, size_t n)
{
    size_t k = conn_feed(c, p, n);
    size_t left = c->in_len - c->in_off;
    uint8_t *nb;
    if (k == n || c->closing || c->draining)
        return;
    p += k;
    n -= k;
    if ((nb = malloc(left + n)) == NULL) {
        rpc_conn_fatal(c, SMP_ENOMEM, "out of memory for the connection's input");
        return;
    }
    if (left > 0) memcpy(nb, c->in + c->in_off, left);
    memcpy(nb + left, p, n);
    free(c->in);
    c->in = nb;
    c->in_off = 0;
    c->in_len = left + n;
    want_resume(c);
}

static void tls_pump(rpc_conn *c);

void rpc_server_resume(rpc_server *s)
{
    rpc_conn *list = s->resume_head, *c;
    s->resume_head = NULL; /* a connection with input still left queues itself again */
    while ((c = list) != NULL) {
        list = c->resume_next;
        c->resume_next = NULL;
        c->resume_queued = 0;
        rpc_conn_resume(c);
        rpc_conn_unref(c);
    }
}

void rpc_conn_resume(rpc_conn *c)
{
    if (c->closing || c->draining)
        return;
    rpc_conn_ref(c);
    c->budget = RPC_BATCH_REQUESTS;
    if (c->in_len > 0) {
        c->in_off += conn_feed(c, c->in + c->in_off, c->in_len - c->in_off);
        if (c->in_off == c->in_len) {
            free(c->in);
            c->in = NULL;
            c->in_off = c->in_len = 0;
        } else if (!c->closing && !c->draining) {
            want_resume(c);
        }
    }
    if (c->in_len == 0 && c->tls_more && !c->closing && !c->draining)
        tls_pump(c);
    rpc_conn_set_reading(c);
    rpc_conn_unref(c);
}

/* Hand the plaintext c's TLS session yields to the frame parser until it
 * wants more ciphertext or c's budget is spent (c->tls_more: the rest is
 * read on c's next turn). A close_notify or a broken record closes c. */
static void tls_pump(rpc_conn *c)
{
    rpc_server *s = c->srv;
    c->tls_more = 0;
    while (!c->closing && !c->draining) {
        if (c->budget == 0 || c->in_len > 0) {
            c->tls_more = 1;
            want_resume(c);
            break;
        }
        int k = SSL_read(c->tls.ssl, s->tlsbuf, (int)sizeof(s->tlsbuf));
        if (k > 0) {
            conn_take(c, (const uint8_t *)s->tlsbuf, (size_t)k);
            continue;
        }
        int e = SSL_get_error(c->tls.ssl, k);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            break;
        if (e != SSL_ERROR_ZERO_RETURN)
            s->st.err_io++;
        ERR_clear_error();
        rpc_conn_close(c); /* close_notify or a broken record */
        return;
    }
    if (!c->closing && BIO_ctrl_pending(c->tls.wbio) > 0)
        rpc_conn_want_flush(c);
}

/* A plaintext client on the TLS port: tell it in plaintext, then close. */
static void tls_refuse_plaintext(rpc_conn *c)
{
    static const char why[] = "this master's TCP port speaks TLS: connect with TLS (weightctl "
                              "--tls-ca FILE, or WM_TLS_CA) or through its Unix socket";
    c->srv->st.tls_plaintext_refused++;
    rpc_conn_log_refusal(c, "refused: it spoke plaintext on the TLS port");
    c->use_tls = 0; /* the refusal goes out as it is */
    rpc_tls_session_free(&c->tls);
    rpc_conn_fatal(c, SMP_EPROTO, why);
}

/* Ciphertext arrived: run the handshake (its messages are written at once),
 * then hand the plaintext to the frame parser (tls_pump). */
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
        rpc_conn_close(c);
        return;
    }
    if (!c->tls.established) {
        int r = SSL_do_handshake(c->tls.ssl);
        if (r != 1) {
            int e = SSL_get_error(c->tls.ssl, r);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
                rpc_conn_flush(c);
                return;
            }
            char line[320];
            rpc_tls_error(why, sizeof(why));
            s->st.tls_refused++;
            snprintf(line, sizeof(line), "TLS handshake refused: %s", why[0] ? why : "peer gone");
            rpc_conn_log_refusal(c, line);
            /* the alert the session wrote tells the client why */
            if (rpc_conn_flush(c) == SMP_OK) {
                c->draining = 1;
                if (c->reading) {
                    uv_read_stop(&c->h.stream);
                    c->reading = 0;
                }
                rpc_sreq *sr = malloc(sizeof(*sr));
                if (sr != NULL) {
                    sr->conn = c;
                    if (uv_shutdown(&sr->req, &c->h.stream, on_shutdown) == 0) {
                        rpc_conn_ref(c);
                        return;
                    }
                    free(sr);
                }
                rpc_conn_close(c);
            }
            return;
        }
        c->tls.established = 1;
        s->st.tls_handshakes++;
        rpc_conn_identify_cert(c);
        if (rpc_conn_flush(c) < 0) return;
    }
    tls_pump(c);
}

/* Bytes arrived, or the stream ended. At most RPC_BATCH_REQUESTS frames
 * are dispatched now; the rest waits for c's next turn (rpc_conn_resume)
 * with reading stopped, so one pipelining client cannot hold the loop from
 * the others. End of stream (after writing the replies still pending: a
 * peer that only shut its side down reads them) or a read error closes the
 * connection (counted as truncated when it cut a frame). The connection is
 * held across the feed: a handler may drop the last other reference. */
void rpc_conn_on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    rpc_conn *c = st->data;
    rpc_server *s = c->srv;
    if (nread < 0) {
        if (nread != UV_EOF)
            s->st.err_io++;
        else if (c->in_body || c->hdr_have > 0)
            s->st.err_truncated_frame++;
        if (nread == UV_EOF)
            rpc_conn_flush(c);
        rpc_conn_close(c);
        return;
    }
    s->st.bytes_in += (uint64_t)nread;
    rpc_conn_ref(c);
    c->budget = RPC_BATCH_REQUESTS;
    if (c->use_tls)
        tls_feed(c, (const uint8_t *)buf->base, (size_t)nread);
    else
        conn_take(c, (const uint8_t *)buf->base, (size_t)nread);
    rpc_conn_set_reading(c);
    rpc_conn_unref(c);
}
