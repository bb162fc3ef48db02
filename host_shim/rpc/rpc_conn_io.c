/* rpc_conn_io.c -- one RPC connection's bytes: reading, framing, TLS, output.
 *
 * Each connection reads length-prefixed frames into a buffer that grows with
 * the bytes that actually arrive (a header that claims 64 MiB costs nothing
 * until 64 MiB come) and hands each complete frame to rpc_conn_dispatch
 * (rpc_dispatch.c). Responses are encoded here and written: a small one
 * straight to the socket when nothing is queued, otherwise through libuv's
 * write queue.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>

#include "rpc_internal.h"
#include "rpc_envelope.h"

/* -- Output ---------------------------------------------------------------- */

/* Start or stop reading so that a connection reads only while its unsent
 * output and its unanswered calls are within bounds. A failing
 * uv_read_start closes the connection. */
void rpc_conn_set_reading(rpc_conn *c)
{
    rpc_server *s = c->srv;
    int want;
    if (c->closing || c->draining)
        return;
    want = c->out_bytes <= s->max_output && c->ncalls < s->max_inflight;
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
        rpc_conn_close(c);
    }
    free(w);
    rpc_conn_set_reading(c);
    rpc_conn_unref(c);
}

/* The 4-byte big-endian length that precedes every frame. */
void rpc_frame_header(uint8_t *p, size_t size)
{
    p[0] = (uint8_t)(size >> 24);
    p[1] = (uint8_t)(size >> 16);
    p[2] = (uint8_t)(size >> 8);
    p[3] = (uint8_t)size;
}

/* A write request for len bytes of c, or NULL after closing c (out of
 * memory). */
rpc_wreq *rpc_wreq_new(rpc_conn *c, size_t len)
{
    rpc_wreq *w = malloc(sizeof(*w) + len);
    if (w == NULL) {
        rpc_conn_close(c);
        return NULL;
    }
    w->conn = c;
    w->len = len;
    return w;
}

/* Queue w's bytes behind c's pending output; on_write releases it. SMP_OK,
 * or SMP_EIO after freeing w and closing c. */
int rpc_conn_queue(rpc_conn *c, rpc_wreq *w)
{
    uv_buf_t buf = uv_buf_init((char *)w->data, (unsigned)w->len);
    if (uv_write(&w->req, &c->h.stream, &buf, 1, on_write) < 0) {
        free(w);
        c->srv->st.err_io++;
        rpc_conn_close(c);
        return SMP_EIO;
    }
    rpc_conn_ref(c);
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
        rpc_wreq *w = rpc_wreq_new(c, pending);
        int rc;
        if (w == NULL) return SMP_ENOMEM;
        if (BIO_read(c->tls.wbio, w->data, (int)pending) != (int)pending) {
            free(w);
            rpc_conn_close(c);
            return SMP_EIO;
        }
        if ((rc = rpc_conn_queue(c, w)) < 0) return rc;
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
        rpc_conn_close(c);
        return SMP_EIO;
    }
    while (len > 0) {
        int chunk = len > (1u << 30) ? (1 << 30) : (int)len;
        int n = SSL_write(c->tls.ssl, p, chunk);
        if (n <= 0) {
            rpc_tls_error(why, sizeof(why));
            c->srv->st.err_io++;
            rpc_conn_close(c);
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
int rpc_conn_send(rpc_conn *c,
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
        if ((w = rpc_wreq_new(c, 4 + size)) == NULL) return SMP_ENOMEM;
        rpc_frame_header(w->data, size);
        rpc_env_encode_response(w->data + 4, request_id, status, message, mlen, body, len);
        rc = tls_send(c, w->data, w->len);
        free(w);
        if (rc < 0) return rc;
    } else if (c->out_bytes == 0 && 4 + size <= RPC_DIRECT_REPLY_BYTES) {
        /* Nothing queued: hand a small reply to the socket at once, without
         * a request of its own; only what it did not take is queued. */
        uint8_t direct[RPC_DIRECT_REPLY_BYTES];
        rpc_frame_header(direct, size);
        rpc_env_encode_response(direct + 4, request_id, status, message, mlen, body, len);
        buf = uv_buf_init((char *)direct, (unsigned)(4 + size));
        rc = uv_try_write(&c->h.stream, &buf, 1);
        if (rc < 0 && rc != UV_EAGAIN) {
            s->st.err_io++;
            rpc_conn_close(c);
            return SMP_EIO;
        }
        sent = rc > 0 ? (size_t)rc : 0;
        s->st.bytes_out += sent;
        if (sent < 4 + size) {
            if ((w = rpc_wreq_new(c, 4 + size - sent)) == NULL) return SMP_ENOMEM;
            memcpy(w->data, direct + sent, w->len);
            if ((rc = rpc_conn_queue(c, w)) < 0) return rc;
        }
    } else {
        if ((w = rpc_wreq_new(c, 4 + size)) == NULL) return SMP_ENOMEM;
        rpc_frame_header(w->data, size);
        rpc_env_encode_response(w->data + 4, request_id, status, message, mlen, body, len);
        if ((rc = rpc_conn_queue(c, w)) < 0) return rc;
    }
    if (status == 0)
        s->st.responses_ok++;
    else
        s->st.responses_error++;
    rpc_conn_set_reading(c);
    return SMP_OK;
}

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
    if (rpc_conn_send(c, 0, status, message, NULL, 0) < 0)
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
                rpc_conn_fatal(c, SMP_EPROTO, "zero-length frame");
                return;
            }
            if (c->body_len > s->max_frame) {
                s->st.err_oversized_frame++;
                snprintf(msg, sizeof(msg),
                         "frame of %" PRIu32 " bytes exceeds max_frame_bytes %" PRIu32,
                         c->body_len, s->max_frame);
                rpc_conn_fatal(c, SMP_ERANGE, msg);
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
                rpc_conn_send(c, rpc_prefix_request_id(c->skip_prefix, c->skip_have), c->skip_status,
                          c->skip_msg, NULL, 0);
            }
            continue;
        }
        {
            size_t k = c->body_len - c->body_have;
            if (k > n)
                k = n;
            if (body_append(c, p, k) < 0) {
                rpc_conn_fatal(c, SMP_ENOMEM, "out of memory for the request frame");
                return;
            }
            p += k;
            n -= k;
            if (c->body_have == c->body_len) {
                c->in_body = 0;
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
}

/* A plaintext client on the TLS port: tell it in plaintext, then close. */
static void tls_refuse_plaintext(rpc_conn *c)
{
    static const char why[] = "this master's TCP port speaks TLS: connect with TLS (weightctl "
                              "--tls-ca FILE, or WM_TLS_CA) or through its Unix socket";
    c->srv->st.tls_plaintext_refused++;
    c->use_tls = 0; /* the refusal goes out as it is */
    rpc_tls_session_free(&c->tls);
    rpc_conn_fatal(c, SMP_EPROTO, why);
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
        rpc_conn_close(c);
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
        rpc_conn_close(c); /* close_notify or a broken record */
        return;
    }
    if (!c->closing)
        tls_flush(c);
}

/* Bytes arrived, or the stream ended. End of stream or a read error closes
 * the connection (counted as truncated when it cut a frame). The connection
 * is held across the feed: a handler may drop the last other reference. */
void rpc_conn_on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    rpc_conn *c = st->data;
    rpc_server *s = c->srv;
    if (nread < 0) {
        if (nread != UV_EOF)
            s->st.err_io++;
        else if (c->in_body || c->hdr_have > 0)
            s->st.err_truncated_frame++;
        rpc_conn_close(c);
        return;
    }
    s->st.bytes_in += (uint64_t)nread;
    rpc_conn_ref(c);
    if (c->use_tls)
        tls_feed(c, (const uint8_t *)buf->base, (size_t)nread);
    else
        conn_feed(c, (const uint8_t *)buf->base, (size_t)nread);
    rpc_conn_set_reading(c);
    rpc_conn_unref(c);
}
