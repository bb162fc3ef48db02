/* node_data.c -- the node's TCP data server on a libuv loop.
 *
 * Each connection is a small state machine: HDR (the fixed request header),
 * VAR (segment id and ticket), PAYLOAD (the bytes of an accepted write),
 * BUSY (a read's bytes are being sent; reading is paused). The alloc
 * callback hands libuv exactly the buffer the state needs -- the rest of the
 * header, the rest of the variable part, or the segment mapping at the write
 * position -- so no byte is ever read past the current request and a write's
 * payload lands in the segment without a staging copy. A read is one
 * uv_write of the response header and the mapping pointer. Every response
 * has its own write request (a CONTINUE and a FINAL may be in flight
 * together); a response flagged close_after closes the connection once sent.
 * A segment carries a count of transfers in progress, so it cannot be
 * removed while its mapping is being read or written.
 *
 * Cold files (READ_COLD, CHECK_COLD) are served by node_data_cold.c, on
 * libuv's threadpool; a connection holds at most one such transfer.
 *
 * TLS (data_server_options.tls): a connection is an OpenSSL session on the
 * loop. libuv reads ciphertext into the connection's buffer, which goes into
 * the session's memory BIO (rpc_tls.h); the session decrypts it straight
 * into the buffer the state machine would have handed libuv (header,
 * variable part, or the segment at the write position), so the states are
 * the same. Sealed records collect in the connection's stash and go to the
 * socket with one send per step (node_tls_out.h); a read's payload is
 * sealed TLS_SEAL_STEP at a time, up to TLS_OUT_CHUNK per turn of the loop,
 * and sealing stops as soon as the socket takes no more: what it did not
 * take is written by libuv, and the next step is sealed once that is out --
 * so a connection holds at most one step of ciphertext, never the range.
 * The first byte a client sends decides: not a TLS handshake record (0x16)
 * is a plaintext client, answered with one plaintext refusal frame naming
 * the cause, then closed; the server keeps serving. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>

#include "node_data_internal.h"
#include "wm_errbuf.h"
#include "net_addr.h"


/* See node_data_internal.h. */
void data_server_maybe_free(data_server *s)
{
    if (s->closing && s->handles == 0 && s->cold_checks == 0) {
        data_seg *d = s->segs, *nx;
        for (; d != NULL; d = nx) {
            nx = d->next;
            free(d);
        }
        used_ticket *u, *tmp;
        HASH_ITER(hh, s->used, u, tmp) {
            HASH_DEL(s->used, u);
            free(u->key);
            free(u->segment);
            free(u);
        }
        pthread_mutex_destroy(&s->writing_lock);
        free(s->listen_tcp);
        SSL_CTX_free(s->tls);
        OPENSSL_cleanse(&s->keys, sizeof(s->keys));
        free(s);
    }
}

static int keys_ok(const ticket_keyring *k)
{
    return k->current.len >= TICKET_SECRET_MIN && k->current.len <= TICKET_SECRET_MAX &&
           k->previous.len <= TICKET_SECRET_MAX;
}

int data_server_set_keys(data_server *s, const ticket_keyring *keys)
{
    if (s == NULL || keys == NULL || !keys_ok(keys))
        return SMP_EINVAL;
    s->keys = *keys;
    s->have_keys = 1;
    return SMP_OK;
}

int data_server_tls_ctx(const char *cert,
                        const char *key,
                        const char *key_prefix,
                        SSL_CTX **out,
                        char *err,
                        size_t errlen)
{
    rpc_tls_config tc = {.cert = cert, .key = key, .key_prefix = key_prefix};
    int rc = rpc_tls_server_ctx(&tc, out, err, errlen);
    if (rc < 0)
        return rc;
    if (SSL_CTX_set_ciphersuites(*out, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                                       "TLS_CHACHA20_POLY1305_SHA256") != 1) {
        ERR_clear_error();
        SSL_CTX_free(*out);
        *out = NULL;
        wm_errbuf(err, errlen, "data server: this OpenSSL lacks the TLS 1.3 cipher suites");
        return SMP_EIO;
    }
    SSL_CTX_set_options(*out, SSL_OP_CIPHER_SERVER_PREFERENCE);
    return SMP_OK;
}

int data_server_create(uv_loop_t *loop,
                       const data_server_options *opt,
                       data_server **out,
                       char *err,
                       size_t errlen)
{
    data_server *s;
    if (loop == NULL || opt == NULL || out == NULL || opt->listen_tcp == NULL ||
        opt->listen_tcp[0] == '\0') {
        wm_errbuf(err, errlen, "data server: no listen address");
        return SMP_EINVAL;
    }
    if (opt->keys != NULL && !keys_ok(opt->keys)) {
        wm_errbuf(err, errlen, "data server: the ticket key has %zu bytes (%d..%d allowed)",
                opt->keys->current.len, TICKET_SECRET_MIN, TICKET_SECRET_MAX);
        return SMP_EINVAL;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return SMP_ENOMEM;
    s->listen_tcp = strdup(opt->listen_tcp);
    if (s->listen_tcp == NULL) {
        free(s);
        return SMP_ENOMEM;
    }
    s->loop = loop;
    pthread_mutex_init(&s->writing_lock, NULL);
    if (opt->keys != NULL) {
        s->keys = *opt->keys;
        s->have_keys = 1;
    }
    s->allow_unticketed_reads = opt->allow_unticketed_reads;
    s->clock_skew_ms = opt->clock_skew_ms;
    s->sockbuf = opt->socket_buffer_bytes;
    s->max_connections = opt->max_connections;
    s->idle_ms = opt->idle_timeout_ms;
    s->backlog = opt->backlog > 0 ? opt->backlog : 128;
    if (opt->tls != NULL) {
        SSL_CTX_up_ref(opt->tls);
        s->tls = opt->tls;
    }
    *out = s;
    return SMP_OK;
}

int data_server_set_tls(data_server *s, SSL_CTX *ctx)
{
    return s != NULL ? rpc_tls_swap_ctx(&s->tls, ctx) : SMP_EINVAL;
}

static data_seg *find_seg(const data_server *s, const char *id)
{
    data_seg *d;
    for (d = s->segs; d != NULL; d = d->next)
        if (strcmp(seg_id(d->seg), id) == 0)
            return d;
    return NULL;
}

int data_server_add_segment(data_server *s, seg_segment *seg)
{
    data_seg *d;
    if (s == NULL || seg == NULL)
        return SMP_EINVAL;
    if (find_seg(s, seg_id(seg)) != NULL)
        return SMP_EEXIST;
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        return SMP_ENOMEM;
    d->seg = seg;
    d->next = s->segs;
    s->segs = d;
    return SMP_OK;
}

void data_server_set_cold(data_server *s, const cold_tier *ct, cold_faults *faults)
{
    if (s == NULL)
        return;
    s->cold = ct;
    s->cold_faults = faults;
}

/* -- connections ----------------------------------------------------------- */

static void on_conn_closed(uv_handle_t *h)
{
    data_conn *c = h->data;
    data_server *s = c->srv;
    if (--c->open_handles > 0)
        return;
    if (c->cold != NULL && c->cold->in_work) {
        c->cold->conn = NULL; /* the work's completion frees it (a check: and
                                 gives its slot back, noting a corrupt file) */
        if (c->send_fd >= 0 && c->cold->sock == c->send_fd) {
            c->cold->owns_sock = 1; /* the work may be sending on it */
            c->send_fd = -1;
        }
    } else if (c->cold != NULL) {
        data_cold_free(c->cold);
    }
    if (c->send_fd >= 0)
        close(c->send_fd);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    rpc_tls_session_free(&c->tls);
    tls_out_free(&c->out);
    free(c->cin);
    free(c);
    s->stats.connections_open--;
    s->handles--;
    data_server_maybe_free(s);
}

/* Close both handles of a connection; it is freed when both have closed. */
static void conn_close_handles(data_conn *c)
{
    c->state = CS_CLOSING;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    if (c->srv->idle_ms > 0)
        uv_close((uv_handle_t *)&c->idle, on_conn_closed);
    if (c->send_fd >= 0)
        uv_close((uv_handle_t *)&c->send_poll, on_conn_closed);
}

/* Take u off the writing list (its write completed or broke). */
static void writing_unlink(data_server *s, used_ticket *u)
{
    if (!u->in_progress)
        return;
    pthread_mutex_lock(&s->writing_lock);
    if (u->wprev != NULL)
        u->wprev->wnext = u->wnext;
    else
        s->writing = u->wnext;
    if (u->wnext != NULL)
        u->wnext->wprev = u->wprev;
    pthread_mutex_unlock(&s->writing_lock);
    u->wprev = u->wnext = NULL;
    u->in_progress = 0;
    free(u->key);
    free(u->segment);
    u->key = u->segment = NULL;
}

static void release_wticket(data_conn *c)
{
    if (c->wticket != NULL) {
        writing_unlink(c->srv, c->wticket);
        HASH_DEL(c->srv->used, c->wticket);
        c->srv->n_used--;
        free(c->wticket);
        c->wticket = NULL;
    }
}

/* A write completed: its ticket stays used until it expires. */
static void write_done(data_conn *c)
{
    if (c->wticket != NULL) {
        writing_unlink(c->srv, c->wticket);
        c->wticket = NULL;
    }
    c->srv->stats.writes++;
}

void data_conn_close(data_conn *c)
{
    if (c->state == CS_CLOSING)
        return;
    release_wticket(c);
    if (c->state == CS_HDR && c->got > 0)
        c->srv->stats.truncated++;
    else if (c->state == CS_VAR || c->state == CS_PAYLOAD)
        c->srv->stats.truncated++;
    conn_close_handles(c);
}

static void on_idle(uv_timer_t *t)
{
    data_conn *c = t->data;
    c->srv->stats.idle_closed++;
    data_conn_close(c);
}

/* (Re)arm the idle timer: the peer owes us bytes from now on. */
void data_idle_arm(data_conn *c)
{
    if (c->srv->idle_ms > 0 && c->state != CS_CLOSING)
        uv_timer_start(&c->idle, on_idle, c->srv->idle_ms, 0);
}

/* Stop the idle timer: we owe the peer bytes (a read being sent). */
void data_idle_disarm(data_conn *c)
{
    if (c->srv->idle_ms > 0 && c->state != CS_CLOSING)
        uv_timer_stop(&c->idle);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void tls_pump(data_conn *c);

/* -- the byte stream: plain, or through the connection's TLS session ------ */

/* TLS: send what the session sealed as far as the socket takes it now,
 * then queue w with cb, writing the rest (possibly nothing: cb then comes
 * on the next turn of the loop); *cipher (freed first) holds those bytes
 * until cb. 0, or < 0 when nothing was queued. */
static int tls_queue(data_conn *c, uv_write_t *w, uint8_t **cipher, uv_write_cb cb)
{
    size_t len;
    uv_buf_t b;
    if (tls_out_flush(&c->out) < 0)
        return SMP_EIO;
    tls_out_take(&c->out, cipher, &len);
    b = uv_buf_init(*cipher != NULL ? (char *)*cipher : (char *)c->scratch, (unsigned)len);
    return uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, cb);
}

/* TLS: seal len bytes of p into the stash. 0 or SMP_EIO (the session
 * failed, or memory ran out). */
static int tls_seal(data_conn *c, const void *p, size_t len)
{
    size_t done = 0;
    if (len > 0 && (SSL_write_ex(c->tls.ssl, p, len, &done) != 1 || done != len)) {
        ERR_clear_error();
        return SMP_EIO;
    }
    return SMP_OK;
}

/* Queue bufs on c's stream with w and cb: as they are, or (TLS) sealed
 * (*cipher then holds what the socket did not take, until cb). 0, or < 0
 * when nothing was queued (the caller closes the connection). */
int data_conn_write(data_conn *c, uv_write_t *w, const uv_buf_t *bufs, unsigned nbufs,
                      uint8_t **cipher, uv_write_cb cb)
{
    if (c->tls.ssl == NULL)
        return uv_write(w, (uv_stream_t *)&c->tcp, bufs, nbufs, cb);
    for (unsigned i = 0; i < nbufs; i++)
        if (tls_seal(c, bufs[i].base, bufs[i].len) < 0)
            return SMP_EIO;
    return tls_queue(c, w, cipher, cb);
}

/* Take requests again after a response: read the socket, and (TLS) act on
 * what the session already holds -- bytes that arrived with the last
 * request would otherwise wait for the next packet. */
void data_conn_resume(data_conn *c)
{
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0) {
        data_conn_close(c);
        return;
    }
    if (c->tls.ssl != NULL && c->tls.established &&
        (SSL_pending(c->tls.ssl) > 0 || BIO_ctrl_pending(c->tls.rbio) > 0))
        tls_pump(c);
}

static void on_reply_sent(uv_write_t *w, int status)
{
    data_reply *r = (data_reply *)w;
    data_conn *c = r->conn;
    if (c->state != CS_CLOSING) {
        if (status < 0 || r->close_after) {
            data_conn_close(c);
        } else if (r->resume_after) {
            c->srv->stats.reads++;
            c->srv->stats.bytes_read += r->payload;
            c->state = CS_HDR;
            c->got = 0;
            data_idle_arm(c);
            data_conn_resume(c);
        }
    }
    free(r->cipher);
    free(r);
}

static void on_reply_part_sent(uv_write_t *w, int status);

/* TLS: seal r's payload from r->src on and send it, TLS_SEAL_STEP at a
 * time, until TLS_OUT_CHUNK went this turn, all of it did, or the socket
 * took less than it was given; then queue the rest with r (its callback
 * comes back here until the payload is out). 0, or < 0 when nothing was
 * queued. */
static int tls_send_payload(data_conn *c, data_reply *r)
{
    size_t turn = 0;
    while (r->src_left > 0 && turn < TLS_OUT_CHUNK && c->out.len == 0) {
        size_t n = r->src_left < TLS_SEAL_STEP ? (size_t)r->src_left : TLS_SEAL_STEP;
        c->out.more = n < r->src_left;
        if (tls_seal(c, r->src, n) < 0 || tls_out_flush(&c->out) < 0) {
            c->out.more = 0;
            return SMP_EIO;
        }
        r->src += n;
        r->src_left -= n;
        turn += n;
    }
    c->out.more = 0;
    return tls_queue(c, &r->req, &r->cipher,
                     r->src_left > 0 ? on_reply_part_sent : on_reply_sent);
}

/* TLS: what was queued of a read's payload is out; go on with the rest. */
static void on_reply_part_sent(uv_write_t *w, int status)
{
    data_reply *r = (data_reply *)w;
    data_conn *c = r->conn;
    if (status < 0 || c->state == CS_CLOSING) {
        on_reply_sent(w, status < 0 ? status : UV_ECANCELED);
        return;
    }
    if (tls_send_payload(c, r) < 0)
        on_reply_sent(w, UV_EIO);
}

/* TLS: write what the session sealed on its own (handshake messages,
 * alerts); close the connection once it is out when close_after. */
static void tls_flush(data_conn *c, int close_after)
{
    data_reply *r;
    if (c->state == CS_CLOSING)
        return;
    if (tls_out_flush(&c->out) < 0) {
        data_conn_close(c);
        return;
    }
    if (c->out.len == 0) {
        if (close_after)
            data_conn_close(c); /* what was sealed is in the socket already */
        return;
    }
    if ((r = calloc(1, sizeof(*r))) == NULL) {
        data_conn_close(c);
        return;
    }
    r->conn = c;
    r->close_after = close_after;
    if (tls_queue(c, &r->req, &r->cipher, on_reply_sent) < 0) {
        free(r->cipher);
        free(r);
        data_conn_close(c);
    }
}

/* Send a response: header, message, and (for a READ) payload bytes straight
 * from the mapping. Flags as in data_reply. Returns 0, or -1 when it could
 * not be queued: the connection is then closing. */
int data_send_reply(data_conn *c, int status, uint8_t kind, const char *msg,
                       const uint8_t *payload, uint64_t plen, int close_after)
{
    ndw_response resp;
    uv_buf_t bufs[2];
    size_t mlen = msg != NULL ? strlen(msg) : 0;
    data_reply *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        data_conn_close(c);
        return -1;
    }
    if (mlen > NDW_MESSAGE_MAX)
        mlen = NDW_MESSAGE_MAX;
    r->conn = c;
    r->close_after = close_after;
    r->resume_after = payload != NULL;
    r->payload = plen;
    resp.status = status;
    resp.payload = plen;
    resp.msg_len = (uint16_t)mlen;
    resp.kind = kind;
    ndw_encode_response(r->buf, &resp);
    if (mlen > 0)
        memcpy(r->buf + NDW_RESP_HDR, msg, mlen);
    bufs[0] = uv_buf_init((char *)r->buf, (unsigned)(NDW_RESP_HDR + mlen));
    bufs[1] = uv_buf_init((char *)payload, 0);
    if (payload != NULL)
        bufs[1].len = (size_t)plen; /* size_t on Unix: a whole range in one write */
    if (c->tls.ssl != NULL) {
        /* the header, then the payload (a cold read's comes later, chunk
         * by chunk) step by step; MSG_MORE keeps the header with it */
        int rc;
        r->src = payload;
        r->src_left = payload != NULL ? plen : 0;
        c->out.more = r->src_left > 0;
        rc = tls_seal(c, bufs[0].base, bufs[0].len);
        c->out.more = 0;
        if (rc == SMP_OK && (rc = tls_send_payload(c, r)) == SMP_OK)
            return 0;
    } else if (uv_write(&r->req, (uv_stream_t *)&c->tcp, bufs, payload != NULL ? 2 : 1,
                        on_reply_sent) == 0) {
        return 0;
    }
    free(r->cipher);
    free(r);
    data_conn_close(c);
    return -1;
}

/* Answer a refusal (the connection stays) and wait for the next request. */
void data_refuse(data_conn *c, int status, const char *fmt, ...)
{
    char msg[NDW_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->state = CS_HDR;
    c->got = 0;
    data_send_reply(c, status, NDW_KIND_FINAL, msg, NULL, 0, 0);
}

/* A frame that does not parse: answer SMP_EPROTO and close. */
static void protocol_error(data_conn *c, const char *why)
{
    c->srv->stats.bad_frames++;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->state = CS_BUSY; /* not CLOSING yet: the reply must go out first */
    data_send_reply(c, SMP_EPROTO, NDW_KIND_FINAL, why, NULL, 0, 1);
}

/* Forget the write tickets that expired (not the ones still writing). */
static void prune_used(data_server *s, uint64_t now)
{
    used_ticket *u, *tmp;
    if (now < s->next_prune_ms)
        return;
    s->next_prune_ms = now + USED_PRUNE_MS;
    HASH_ITER(hh, s->used, u, tmp) {
        if (!u->in_progress && u->expiry_ms + s->clock_skew_ms <= now) {
            HASH_DEL(s->used, u);
            s->n_used--;
            free(u);
        }
    }
}

/* Claim a verified write ticket for c: SMP_OK, SMP_EEXIST (used: it wrote,
 * or its write runs), SMP_EBUSY (too many remembered), SMP_ENOMEM. */
static int claim_write_ticket(data_conn *c, const ticket_claims *cl, uint64_t now)
{
    data_server *s = c->srv;
    used_ticket *u = NULL;
    prune_used(s, now);
    HASH_FIND(hh, s->used, cl->nonce, sizeof(cl->nonce), u);
    if (u != NULL)
        return SMP_EEXIST;
    if (s->n_used >= USED_TICKETS_MAX)
        return SMP_EBUSY;
    if ((u = calloc(1, sizeof(*u))) == NULL)
        return SMP_ENOMEM;
    u->key = strdup(cl->key);
    u->segment = strdup(cl->segment);
    if (u->key == NULL || u->segment == NULL) {
        free(u->key);
        free(u->segment);
        free(u);
        return SMP_ENOMEM;
    }
    memcpy(u->nonce, cl->nonce, sizeof(u->nonce));
    u->expiry_ms = cl->expiry_ms;
    u->offset = cl->offset;
    u->in_progress = 1;
    HASH_ADD(hh, s->used, nonce, sizeof(u->nonce), u);
    s->n_used++;
    pthread_mutex_lock(&s->writing_lock);
    u->wnext = s->writing;
    if (s->writing != NULL)
        s->writing->wprev = u;
    s->writing = u;
    pthread_mutex_unlock(&s->writing_lock);
    c->wticket = u;
    return SMP_OK;
}

/* Verify the request's ticket for its op and range (and, for a write, that
 * it has not written before). SMP_OK or the refusal code (the refusal has
 * been sent). */
int data_check_ticket(data_conn *c, const char *segid, uint8_t op)
{
    data_server *s = c->srv;
    ticket_claims *cl;
    int rc;
    uint64_t now = ticket_now_ms();
    const uint8_t *tok = c->var + c->req.seg_len;
    const char *what = op == TICKET_OP_WRITE ? "write" : "read";

    if (!s->have_keys) {
        data_refuse(c, SMP_ENOTSUP, "this node has no ticket key: it accepts no ticketed %ss", what);
        return SMP_ENOTSUP;
    }
    if (c->req.ticket_len == 0) {
        s->stats.refused_ticket++;
        data_refuse(c, SMP_EINVAL, "a %s of segment %s needs a ticket from the master", what, segid);
        return SMP_EINVAL;
    }
    cl = malloc(sizeof(*cl));
    if (cl == NULL) {
        data_refuse(c, SMP_ENOMEM, "out of memory");
        return SMP_ENOMEM;
    }
    now = now > s->clock_skew_ms ? now - s->clock_skew_ms : 0;
    rc = ticket_verify_ring(&s->keys, tok, c->req.ticket_len, now, cl);
    if (rc == SMP_OK)
        rc = ticket_check_use(cl, op, segid, c->req.offset, c->req.length);
    if (rc == SMP_OK && op == TICKET_OP_WRITE)
        rc = claim_write_ticket(c, cl, ticket_now_ms());
    free(cl);
    if (rc < 0) {
        s->stats.refused_ticket++;
        data_refuse(c, rc, "%s ticket refused: %s", what,
               rc == SMP_EINVAL   ? "bad signature (forged, tampered, or signed by a key this "
                                    "node no longer holds) or not for this operation and segment"
               : rc == SMP_ESTATE ? "expired"
               : rc == SMP_ERANGE ? "the range is not the ticket's"
               : rc == SMP_EPROTO ? "malformed"
               : rc == SMP_EEXIST ? "already used (a write ticket writes once)"
               : rc == SMP_EBUSY  ? "too many write tickets in use, try again"
                                  : smp_strerror(rc));
    }
    return rc;
}


/* The header and variable part of a request are in: act on it. */
static void handle_request(data_conn *c)
{
    data_server *s = c->srv;
    char segid[NDW_SEGMENT_MAX + 1];
    data_seg *d;
    uint8_t *p;

    memcpy(segid, c->var, c->req.seg_len);
    segid[c->req.seg_len] = '\0';
    if (c->req.op == NDW_OP_READ_COLD || c->req.op == NDW_OP_CHECK_COLD) {
        data_cold_start(c, segid, c->req.op == NDW_OP_CHECK_COLD);
        return;
    }
    if (seg_validate_id(segid) < 0) {
        protocol_error(c, "the segment id is not a valid id");
        return;
    }
    d = find_seg(s, segid);
    if (d == NULL) {
        s->stats.refused_segment++;
        data_refuse(c, SMP_ENOTFOUND, "no segment %s on this node", segid);
        return;
    }
    if (seg_check_range(d->seg, c->req.offset, c->req.length) < 0) {
        s->stats.refused_range++;
        data_refuse(c, SMP_ERANGE, "[%" PRIu64 ", +%" PRIu64 ") is outside segment %s of %" PRIu64
               " bytes", c->req.offset, c->req.length, segid, seg_size(d->seg));
        return;
    }
    if (c->req.op == NDW_OP_READ) {
        if ((!s->allow_unticketed_reads || c->req.ticket_len > 0) &&
            data_check_ticket(c, segid, TICKET_OP_READ) < 0)
            return;
        p = seg_ptr(d->seg, c->req.offset, c->req.length);
        c->state = CS_BUSY;
        uv_read_stop((uv_stream_t *)&c->tcp);
        data_idle_disarm(c);
        data_send_reply(c, SMP_OK, NDW_KIND_FINAL, NULL, p, c->req.length, 0);
        return;
    }
    if (data_check_ticket(c, segid, TICKET_OP_WRITE) < 0)
        return; /* refused: nothing was written */
    c->dst = seg_ptr(d->seg, c->req.offset, c->req.length);
    c->remaining = c->req.length;
    if (data_send_reply(c, SMP_OK, NDW_KIND_CONTINUE, NULL, NULL, 0, 0) < 0)
        return; /* closing */
    if (c->remaining == 0) {
        write_done(c);
        c->state = CS_HDR;
        c->got = 0;
        data_send_reply(c, SMP_OK, NDW_KIND_FINAL, NULL, NULL, 0, 0);
        return;
    }
    c->state = CS_PAYLOAD;
}

/* The plaintext buffer the state expects next: the rest of the header or of
 * the variable part, the segment at the write position, or scratch. */
static void want_buf(data_conn *c, uv_buf_t *buf)
{
    switch (c->state) {
    case CS_HDR:
        *buf = uv_buf_init((char *)c->hdr + c->got, (unsigned)(NDW_REQ_HDR - c->got));
        break;
    case CS_VAR:
        *buf = uv_buf_init((char *)c->var + c->got,
                           (unsigned)(c->req.seg_len + c->req.ticket_len - c->got));
        break;
    case CS_PAYLOAD:
        buf->base = (char *)c->dst;
        buf->len = c->remaining < (64u << 20) ? (size_t)c->remaining : (64u << 20);
        break;
    default:
        *buf = uv_buf_init((char *)c->scratch, sizeof(c->scratch));
        break;
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    data_conn *c = h->data;
    (void)suggested;
    if (c->tls.ssl != NULL)
        *buf = uv_buf_init((char *)c->cin, TLS_IN_CHUNK);
    else
        want_buf(c, buf);
}

/* nread plaintext bytes arrived in the buffer want_buf handed out: advance
 * the state machine. */
static void consume(data_conn *c, size_t nread)
{
    data_server *s = c->srv;
    switch (c->state) {
    case CS_HDR:
        c->got += nread;
        if (c->got < NDW_REQ_HDR)
            return;
        if (ndw_decode_request(c->hdr, &c->req) < 0) {
            protocol_error(c, "malformed request header");
            return;
        }
        c->state = CS_VAR;
        c->got = 0;
        return;
    case CS_VAR:
        c->got += nread;
        if (c->got < (size_t)c->req.seg_len + c->req.ticket_len)
            return;
        handle_request(c);
        return;
    case CS_PAYLOAD:
        c->dst += nread;
        c->remaining -= (uint64_t)nread;
        s->stats.bytes_written += (uint64_t)nread;
        if (c->remaining > 0)
            return;
        write_done(c);
        c->state = CS_HDR;
        c->got = 0;
        data_send_reply(c, SMP_OK, NDW_KIND_FINAL, NULL, NULL, 0, 0);
        return;
    case CS_DRAIN:
        c->got += nread;
        if (c->got > DRAIN_MAX)
            data_conn_close(c);
        return;
    default:
        /* bytes while a response is owed: the peer does not follow the protocol */
        protocol_error(c, "request sent before the previous response");
        return;
    }
}

/* A plaintext client on a TLS port: one plaintext refusal, then close. */
static void refuse_plaintext(data_conn *c)
{
    rpc_tls_session_free(&c->tls);
    c->srv->stats.refused_plaintext++;
    c->state = CS_DRAIN;
    c->got = 0;
    if (data_send_reply(c, SMP_EPROTO, NDW_KIND_FINAL,
                   "this node's data port speaks TLS: connect with TLS, trusting the CA that "
                   "signed the node's certificate (WM_TLS_CA, weightctl --tls-ca)", NULL, 0,
                   0) < 0)
        return; /* closing */
    /* FIN after the refusal; the client's close (or DRAIN_MAX) ends it */
    if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, NULL) < 0)
        data_conn_close(c);
}

/* TLS: ciphertext arrived in the session. Look at the first byte, drive
 * the handshake, then decrypt into the state machine's buffers for as long
 * as it takes requests and the session has bytes. */
static void tls_pump(data_conn *c)
{
    rpc_tls_session *t = &c->tls;
    if (!t->checked_first) {
        char *p = NULL;
        if (BIO_get_mem_data(t->rbio, &p) <= 0)
            return;
        t->checked_first = 1;
        if ((uint8_t)p[0] != 0x16) {
            refuse_plaintext(c);
            return;
        }
    }
    if (!t->established) {
        int r = SSL_do_handshake(t->ssl);
        if (r != 1) {
            int e = SSL_get_error(t->ssl, r);
            ERR_clear_error();
            if (e == SSL_ERROR_WANT_READ) {
                tls_flush(c, 0);
            } else {
                c->srv->stats.tls_refused++;
                tls_flush(c, 1); /* the alert, then close */
            }
            return;
        }
        t->established = 1;
        c->srv->stats.tls_handshakes++;
    }
    while (c->state == CS_HDR || c->state == CS_VAR || c->state == CS_PAYLOAD) {
        uv_buf_t b;
        int n;
        want_buf(c, &b);
        n = SSL_read(t->ssl, b.base, b.len > INT32_MAX ? INT32_MAX : (int)b.len);
        if (n <= 0) {
            int e = SSL_get_error(t->ssl, n);
            ERR_clear_error();
            if (e == SSL_ERROR_WANT_READ)
                break;
            data_conn_close(c); /* close_notify, or a record that does not decrypt */
            return;
        }
        consume(c, (size_t)n);
    }
    tls_flush(c, 0);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    data_conn *c = st->data;
    (void)buf;
    if (nread == 0 || c->state == CS_CLOSING)
        return;
    if (nread < 0) {
        data_conn_close(c);
        return;
    }
    data_idle_arm(c);
    if (c->tls.ssl == NULL) {
        consume(c, (size_t)nread);
        return;
    }
    if (BIO_write(c->tls.rbio, c->cin, (int)nread) != (int)nread) {
        data_conn_close(c);
        return;
    }
    tls_pump(c);
}

static void on_connection(uv_stream_t *server, int status)
{
    data_server *s = server->data;
    data_conn *c;
    if (status < 0 || s->closing)
        return;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return;
    c->srv = s;
    c->send_fd = -1;
    uv_tcp_init(s->loop, &c->tcp);
    c->tcp.data = c;
    c->open_handles = 1;
    if (s->idle_ms > 0) {
        uv_timer_init(s->loop, &c->idle);
        c->idle.data = c;
        c->open_handles++;
    }
    c->next = s->conns;
    if (s->conns != NULL)
        s->conns->prev = c;
    s->conns = c;
    s->handles++;
    s->stats.connections_open++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        data_conn_close(c);
        return;
    }
    if (s->max_connections > 0 && s->stats.connections_open > s->max_connections) {
        s->stats.connections_rejected++;
        c->state = CS_BUSY;
        data_send_reply(c, SMP_EAGAIN, NDW_KIND_FINAL, "too many connections", NULL, 0, 1);
        return;
    }
    s->stats.connections_accepted++;
    if (s->tls != NULL) {
        BIO *out;
        if (rpc_tls_session_init(&c->tls, s->tls) < 0 || (c->cin = malloc(TLS_IN_CHUNK)) == NULL) {
            data_conn_close(c);
            return;
        }
        c->out.tcp = &c->tcp;
        if ((out = tls_out_bio(&c->out)) == NULL) {
            data_conn_close(c);
            return;
        }
        SSL_set0_wbio(c->tls.ssl, out); /* frees the memory BIO it replaces */
        c->tls.wbio = out;
        /* a stream keeps its buffers: releasing them between records costs */
        SSL_clear_mode(c->tls.ssl, SSL_MODE_RELEASE_BUFFERS);
    }
    data_idle_arm(c);
    uv_tcp_nodelay(&c->tcp, 1);
    if (s->sockbuf > 0) {
        int v = s->sockbuf;
        uv_send_buffer_size((uv_handle_t *)&c->tcp, &v);
        v = s->sockbuf;
        uv_recv_buffer_size((uv_handle_t *)&c->tcp, &v);
    }
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
        data_conn_close(c);
}

/* -- listening ------------------------------------------------------------- */


static void on_listener_closed(uv_handle_t *h)
{
    data_server *s = h->data;
    s->handles--;
    data_server_maybe_free(s);
}

/* libuv writes with write(2): a vanished peer must not kill the node. */
static void ignore_sigpipe(void)
{
    struct sigaction old;
    if (sigaction(SIGPIPE, NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
        old.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
}

int data_server_start(data_server *s, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    int rc;
    if (s == NULL || s->started || s->closing)
        return SMP_ESTATE;
    memset(&ss, 0, sizeof(ss));
    if (net_parse_listen(s->listen_tcp, &ss) < 0) {
        wm_errbuf(err, errlen, "data server: listen address '%s' is not host:port with a numeric "
                "address", s->listen_tcp);
        return SMP_EINVAL;
    }
    ignore_sigpipe();
    uv_tcp_init(s->loop, &s->listener);
    s->listener.data = s;
    s->handles++;
    s->listening = 1;
    if ((rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&ss, 0)) < 0 ||
        (rc = uv_listen((uv_stream_t *)&s->listener, s->backlog, on_connection)) < 0) {
        wm_errbuf(err, errlen, "data server: cannot listen on %s: %s", s->listen_tcp,
                uv_strerror(rc));
        s->listening = 0;
        uv_close((uv_handle_t *)&s->listener, on_listener_closed);
        return SMP_EIO;
    }
    s->started = 1;
    return SMP_OK;
}

int data_server_tcp_port(const data_server *s)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    if (s == NULL || !s->started ||
        uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len) < 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

void data_server_close(data_server *s)
{
    data_conn *c, *nx;
    if (s == NULL || s->closing)
        return;
    s->closing = 1;
    for (c = s->conns; c != NULL; c = nx) {
        nx = c->next;
        if (c->state != CS_CLOSING)
            conn_close_handles(c);
    }
    if (s->listening) {
        s->listening = 0;
        uv_close((uv_handle_t *)&s->listener, on_listener_closed);
    }
    data_server_maybe_free(s);
}

void data_server_get_stats(const data_server *s, data_server_stats *out)
{
    *out = s->stats;
}

size_t data_server_writing(data_server *s, data_write *out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&s->writing_lock);
    for (const used_ticket *u = s->writing; u != NULL; u = u->wnext, n++) {
        if (n >= max)
            continue;
        snprintf(out[n].key, sizeof(out[n].key), "%s", u->key);
        snprintf(out[n].segment, sizeof(out[n].segment), "%s", u->segment);
        out[n].offset = u->offset;
    }
    pthread_mutex_unlock(&s->writing_lock);
    return n;
}
