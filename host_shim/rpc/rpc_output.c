/* rpc_output.c -- one RPC connection's replies on their way out.
 *
 * A reply is encoded into its connection's pending output (plaintext, in
 * request order) and the connection is put on the server's flush list; it
 * is not written then. The server flushes the list once per loop iteration,
 * after the I/O phase (a uv_check handle: every connection that became
 * readable in this iteration has been read and dispatched by then) and
 * again just before the loop would wait for I/O (a uv_prepare handle:
 * replies made by timers, write callbacks and other handles outside the
 * I/O phase). So the loop answers in batches, as Redis does: it reads every
 * ready request first and writes every connection's replies with one write
 * each afterwards, instead of waking one client per reply while other
 * requests wait to be read.
 *
 * A flush hands the pending bytes straight to the socket (uv_try_write)
 * when nothing is queued before them; what the socket does not take goes
 * into libuv's write queue as one request, the pending buffer itself, so
 * nothing is copied. On a TLS session the pending plaintext is encrypted at
 * flush time (one SSL_write for the batch) and the session's ciphertext is
 * written the same way. Unsent output (pending plus queued) counts against
 * max_output_bytes (rpc_conn_set_reading). A closing connection sends
 * nothing: its pending output is dropped with it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_internal.h"
#include "rpc_envelope.h"

#define RPC_OUT_MIN 1024u             /* first size of a pending output buffer */
#define RPC_OUT_KEEP (16u * 1024u)    /* larger ones are not kept once written */

/* A queued write left (or failed: that closes the connection). Releases its
 * bytes and connection reference; may resume reading. */
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
static void rpc_frame_header(uint8_t *p, size_t size)
{
    p[0] = (uint8_t)(size >> 24);
    p[1] = (uint8_t)(size >> 16);
    p[2] = (uint8_t)(size >> 8);
    p[3] = (uint8_t)size;
}

/* Put c on its server's flush list (once; the list holds a reference). */
static void want_flush(rpc_conn *c)
{
    rpc_server *s = c->srv;
    if (c->flush_queued) return;
    c->flush_queued = 1;
    c->flush_next = s->flush_head;
    s->flush_head = c;
    rpc_conn_ref(c);
}

/* Room for n more bytes at the end of c's pending output. SMP_OK with *p
 * set, or SMP_ENOMEM after closing c. */
static int out_reserve(rpc_conn *c, size_t n, uint8_t **p)
{
    size_t need = c->olen + n;
    if (need > c->ocap) {
        size_t cap = c->ocap ? c->ocap : RPC_OUT_MIN;
        rpc_wreq *w;
        while (cap < need)
            cap *= 2;
        if ((w = realloc(c->ob, sizeof(*w) + cap)) == NULL) {
            rpc_conn_close(c);
            return SMP_ENOMEM;
        }
        w->conn = c;
        c->ob = w;
        c->ocap = cap;
    }
    *p = c->ob->data + c->olen;
    return SMP_OK;
}

int rpc_conn_frame_begin(rpc_conn *c, size_t size, uint8_t **body)
{
    uint8_t *p;
    int rc;
    if (c->use_tls && !c->tls.established) {
        /* nothing can be encrypted yet, and a peer that has not finished
         * its handshake could not read a refusal */
        rpc_conn_close(c);
        return SMP_EIO;
    }
    if ((rc = out_reserve(c, 4 + size, &p)) < 0) return rc;
    rpc_frame_header(p, size);
    *body = p + 4;
    return SMP_OK;
}

void rpc_conn_frame_end(rpc_conn *c, size_t size)
{
    c->olen += 4 + size;
    want_flush(c);
}

/* Encode one response into c's pending output (it leaves with the next
 * flush). A reply larger than max_frame_bytes is replaced by an SMP_ERANGE
 * error naming both sizes. Returns SMP_OK, or SMP_ENOMEM / SMP_EIO after
 * closing the connection (a client must never wait for a response that will
 * not come). Nothing is sent on a closing connection (SMP_OK: the reply is
 * dropped by design). */
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
    uint8_t *p;
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
    if ((rc = rpc_conn_frame_begin(c, size, &p)) < 0) return rc;
    rpc_env_encode_response(p, request_id, status, message, mlen, body, len);
    rpc_conn_frame_end(c, size);
    if (status == 0)
        s->st.responses_ok++;
    else
        s->st.responses_error++;
    return SMP_OK;
}

int rpc_conn_send_refusal(rpc_conn *c, uint64_t request_id, int status, const char *message,
                          uint32_t retry_after_ms, int stopping)
{
    rpc_server *s = c->srv;
    uint8_t *p;
    int rc;
    if (retry_after_ms == 0 && !stopping)
        return rpc_conn_send(c, request_id, status, message, NULL, 0);
    if (c->closing) {
        s->st.replies_dropped++;
        return SMP_OK;
    }
    size_t mlen = strlen(message);
    size_t size = rpc_env_response_size_refusal(request_id, status, mlen, retry_after_ms, stopping);
    if ((rc = rpc_conn_frame_begin(c, size, &p)) < 0) return rc;
    rpc_env_encode_response_refusal(p, request_id, status, message, mlen, retry_after_ms, stopping);
    rpc_conn_frame_end(c, size);
    s->st.responses_error++;
    return SMP_OK;
}

/* Write len bytes of w: straight to the socket when nothing is queued before
 * them, the rest (or all) as one queued write that owns w. w is c's pending
 * buffer (kept for the next replies when the socket took everything and it
 * is small) or a request of its own (freed then). SMP_OK, or SMP_EIO after
 * closing c (w released either way). */
static int out_write(rpc_conn *c, rpc_wreq *w, size_t len)
{
    rpc_server *s = c->srv;
    int pending_buf = w == c->ob;
    size_t sent = 0;
    uv_buf_t buf;
    int rc;

    if (c->out_bytes == 0) {
        buf = uv_buf_init((char *)w->data, (unsigned)len);
        rc = uv_try_write(&c->h.stream, &buf, 1);
        if (rc < 0 && rc != UV_EAGAIN) {
            s->st.err_io++;
            if (!pending_buf) free(w);
            rpc_conn_close(c);
            return SMP_EIO;
        }
        sent = rc > 0 ? (size_t)rc : 0;
        s->st.bytes_out += sent;
    }
    if (pending_buf) {
        c->olen = 0;
        if (sent == len && c->ocap <= RPC_OUT_KEEP) return SMP_OK;
        c->ob = NULL; /* queued below, or too large to keep */
        c->ocap = 0;
    }
    if (sent == len) {
        free(w);
        return SMP_OK;
    }
    w->conn = c;
    w->len = len - sent;
    buf = uv_buf_init((char *)w->data + sent, (unsigned)w->len);
    if (uv_write(&w->req, &c->h.stream, &buf, 1, on_write) < 0) {
        free(w);
        s->st.err_io++;
        rpc_conn_close(c);
        return SMP_EIO;
    }
    rpc_conn_ref(c);
    c->out_bytes += w->len;
    s->st.bytes_out += w->len;
    return SMP_OK;
}

/* Encrypt c's pending plaintext into its TLS session and write whatever
 * ciphertext the session holds (records, handshake messages, tickets).
 * SMP_OK, or a negative code after closing c. */
static int tls_out(rpc_conn *c)
{
    char why[256];
    size_t off = 0, pending;
    rpc_wreq *w;
    while (off < c->olen) {
        size_t left = c->olen - off;
        int n = SSL_write(c->tls.ssl, c->ob->data + off, left > (1u << 30) ? (1 << 30) : (int)left);
        if (n <= 0) {
            rpc_tls_error(why, sizeof(why));
            c->srv->st.err_io++;
            rpc_conn_close(c);
            return SMP_EIO;
        }
        off += (size_t)n;
    }
    c->olen = 0;
    if (c->ocap > RPC_OUT_KEEP) {
        free(c->ob);
        c->ob = NULL;
        c->ocap = 0;
    }
    if ((pending = BIO_ctrl_pending(c->tls.wbio)) == 0) return SMP_OK;
    if ((w = malloc(sizeof(*w) + pending)) == NULL) {
        rpc_conn_close(c);
        return SMP_ENOMEM;
    }
    if (BIO_read(c->tls.wbio, w->data, (int)pending) != (int)pending) {
        free(w);
        rpc_conn_close(c);
        return SMP_EIO;
    }
    return out_write(c, w, pending);
}

int rpc_conn_flush(rpc_conn *c)
{
    int rc = SMP_OK;
    if (c->closing) return SMP_OK;
    if (c->use_tls)
        rc = tls_out(c);
    else if (c->olen > 0)
        rc = out_write(c, c->ob, c->olen);
    if (rc == SMP_OK) rpc_conn_set_reading(c);
    return rc;
}

void rpc_conn_want_flush(rpc_conn *c)
{
    if (!c->closing) want_flush(c);
}

void rpc_server_flush(rpc_server *s)
{
    rpc_conn *c;
    while ((c = s->flush_head) != NULL) {
        s->flush_head = c->flush_next;
        c->flush_next = NULL;
        c->flush_queued = 0;
        rpc_conn_flush(c);
        rpc_conn_unref(c);
    }
}
