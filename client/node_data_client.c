/* node_data_client.c -- blocking reads and ticketed writes of node ranges.
 *
 * The socket is blocking with SO_RCVTIMEO / SO_SNDTIMEO as the per-wait
 * timeout; sends use MSG_NOSIGNAL so a vanished node is an error, not a
 * SIGPIPE. A read receives the payload straight into the caller's buffer; a
 * write sends the header, waits for the node's CONTINUE, then sends the
 * caller's buffer as is. A connection is "broken" once its byte stream can no
 * longer be trusted; from then on every call returns the code that broke it.
 * With TLS the same loops go through SSL_write / SSL_read on the blocking
 * socket (a socket timeout surfaces as SSL_ERROR_WANT_*: timed out). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

#include "node_data_client.h"
#include "node_data_wire.h"
#include "wc_tls.h"
#include "wm_errbuf.h"

struct ndc_conn {
    int fd;
    SSL *ssl;     /* the TLS session, or NULL (plain) */
    int broken;   /* 0, or the code that broke the stream */
    int sys_errno;   /* errno of the last failed send / recv (0: the peer closed) */
    uint64_t rx;     /* bytes received since the current read was sent */
    int unanswered;  /* the last read failed before any reply byte: closed or reset */
    char err[NDW_MESSAGE_MAX + 128];
};

static void conn_err(ndc_conn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
}

static int conn_break(ndc_conn *c, int rc)
{
    if (c->broken == 0)
        c->broken = rc;
    return rc;
}

/* Connect fd to ai within timeout_ms (<= 0: blocking connect): SMP_OK,
 * SMP_EAGAIN (timed out) or SMP_EIO with the connect's own cause in *cause
 * (an errno: for a nonblocking connect the socket's SO_ERROR once poll says
 * it is done, e.g. ECONNREFUSED -- never the EINPROGRESS of its start). */
static int connect_timed(int fd, const struct addrinfo *ai, int timeout_ms, int *cause)
{
    struct pollfd p = { .fd = fd, .events = POLLOUT };
    int soerr = 0, n;
    socklen_t sl = sizeof(soerr);
    *cause = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
        return SMP_OK;
    *cause = errno;
    if (timeout_ms <= 0 || (errno != EINPROGRESS && errno != EAGAIN))
        return SMP_EIO;
    while ((n = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
    }
    if (n == 0) {
        *cause = ETIMEDOUT;
        return SMP_EAGAIN;
    }
    if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0) {
        *cause = errno;
        return SMP_EIO;
    }
    if (soerr != 0) {
        *cause = soerr;
        return SMP_EIO;
    }
    return SMP_OK;
}

int ndc_connect(const char *endpoint,
                const ndc_options *opt,
                ndc_conn **out,
                char *err,
                size_t errlen)
{
    char host[256], port[16];
    const char *colon, *hs, *he;
    struct addrinfo hints, *res = NULL, *ai;
    int rc = SMP_EIO, fd = -1, one = 1, timeout = opt != NULL ? opt->timeout_ms : 0, cause = 0;
    ndc_conn *c;

    if (endpoint == NULL || out == NULL || (colon = strrchr(endpoint, ':')) == NULL ||
        strlen(colon + 1) == 0 || strlen(colon + 1) >= sizeof(port)) {
        wm_errbuf(err, errlen, "node data: endpoint '%s' is not host:port", endpoint ? endpoint : "");
        return SMP_EINVAL;
    }
    *out = NULL;
    hs = endpoint;
    he = colon;
    if (hs[0] == '[' && he > hs && he[-1] == ']') {
        hs++;
        he--;
    }
    if (he <= hs || (size_t)(he - hs) >= sizeof(host)) {
        wm_errbuf(err, errlen, "node data: endpoint '%s' has no host", endpoint);
        return SMP_EINVAL;
    }
    memcpy(host, hs, (size_t)(he - hs));
    host[he - hs] = '\0';
    strcpy(port, colon + 1);
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_family = AF_UNSPEC;
    if (getaddrinfo(host, port, &hints, &res) != 0 || res == NULL) {
        wm_errbuf(err, errlen, "node data: cannot resolve '%s'", endpoint);
        return SMP_EINVAL;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC |
                    (timeout > 0 ? SOCK_NONBLOCK : 0), ai->ai_protocol);
        if (fd < 0) {
            cause = errno;
            continue;
        }
        if (opt != NULL && opt->socket_buffer_bytes > 0) {
            int v = opt->socket_buffer_bytes;
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
        }
        rc = connect_timed(fd, ai, timeout, &cause);
        if (rc == SMP_OK)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        wm_errbuf(err, errlen, "node data: cannot connect to %s: %s", endpoint,
                rc == SMP_EAGAIN ? "timed out" : strerror(cause));
        return rc;
    }
    if (timeout > 0) {
        struct timeval tv = { .tv_sec = timeout / 1000, .tv_usec = (timeout % 1000) * 1000 };
        int fl = fcntl(fd, F_GETFL);
        /* back to blocking, each wait bounded by the socket timeouts */
        if (fl >= 0)
            (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        close(fd);
        return SMP_ENOMEM;
    }
    c->fd = fd;
    if (opt != NULL && opt->tls) {
        struct timespec ts;
        int64_t deadline = -1;
        SSL_CTX *ctx = opt->tls_ctx;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if (timeout > 0)
            deadline = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + timeout;
        if (ctx == NULL) {
            rc = wc_tls_env_ctx(&ctx, err, errlen);
            if (rc == SMP_OK && ctx == NULL) {
                wm_errbuf(err, errlen, "node data: %s speaks TLS only: the client needs the CA "
                          "that signed its certificate (WM_TLS_CA, weightctl --tls-ca)", endpoint);
                rc = SMP_EINVAL;
            }
        } else {
            SSL_CTX_up_ref(ctx);
        }
        if (rc == SMP_OK)
            rc = wc_tls_connect(ctx, fd, endpoint, deadline, "node", &c->ssl, err, errlen);
        SSL_CTX_free(ctx); /* the session holds its own reference */
        if (rc < 0) {
            ndc_close(c);
            return rc;
        }
        /* whole records per recv, not a header and a body each */
        SSL_set_read_ahead(c->ssl, 1);
    }
    *out = c;
    return SMP_OK;
}

void ndc_close(ndc_conn *c)
{
    if (c == NULL)
        return;
    if (c->ssl != NULL)
        SSL_free(c->ssl);
    close(c->fd);
    free(c);
}

int ndc_unanswered(const ndc_conn *c)
{
    return c != NULL && c->unanswered;
}

const char *ndc_last_error(const ndc_conn *c)
{
    return c != NULL ? c->err : "";
}

/* SSL_write (out) or SSL_read of up to len bytes as send(2) / recv(2)
 * would answer: bytes moved, 0 when the node ended the stream, -1 with errno
 * (EAGAIN: the socket timeout passed; EPROTO: a TLS failure). */
static ssize_t tls_io(ndc_conn *c, void *buf, size_t len, int out)
{
    int want = len > INT32_MAX ? INT32_MAX : (int)len, e;
    int n;
    errno = 0;
    n = out ? SSL_write(c->ssl, buf, want) : SSL_read(c->ssl, buf, want);
    if (n > 0)
        return n;
    e = SSL_get_error(c->ssl, n);
    ERR_clear_error();
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        errno = EAGAIN;
        return -1;
    }
    if (e == SSL_ERROR_SYSCALL) {
        if (errno == 0 && !out)
            return 0; /* closed without close_notify */
        if (errno == 0)
            errno = EPIPE;
        return -1;
    }
    errno = EPROTO;
    return -1;
}

/* Send all of buf. SMP_OK, or breaks the connection: SMP_EAGAIN (timed
 * out), SMP_EIO. */
static int send_all(ndc_conn *c, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = c->ssl != NULL ? tls_io(c, (void *)p, len, 1)
                                   : send(c->fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            c->sys_errno = errno;
            conn_err(c, "node data: send: %s", errno == EAGAIN ? "timed out" : strerror(errno));
            return conn_break(c, errno == EAGAIN || errno == EWOULDBLOCK ? SMP_EAGAIN : SMP_EIO);
        }
        p += n;
        len -= (size_t)n;
    }
    return SMP_OK;
}

/* Receive exactly len bytes into buf. SMP_OK, or breaks the connection:
 * SMP_EIO (closed or failed), SMP_EAGAIN (timed out). */
static int recv_all(ndc_conn *c, void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = c->ssl != NULL ? tls_io(c, p, len, 0) : recv(c->fd, p, len, MSG_WAITALL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            c->sys_errno = errno;
            conn_err(c, "node data: recv: %s", errno == EAGAIN ? "timed out" : strerror(errno));
            return conn_break(c, errno == EAGAIN || errno == EWOULDBLOCK ? SMP_EAGAIN : SMP_EIO);
        }
        if (n == 0) {
            c->sys_errno = 0;
            conn_err(c, "node data: the node closed the connection");
            return conn_break(c, SMP_EIO);
        }
        c->rx += (uint64_t)n;
        p += n;
        len -= (size_t)n;
    }
    return SMP_OK;
}

/* Receive one response header and its message (kept as the last error
 * when the status is an error). */
static int recv_response(ndc_conn *c, ndw_response *r)
{
    int rc;
    uint8_t h[NDW_RESP_HDR];
    char msg[NDW_MESSAGE_MAX + 1];
    if ((rc = recv_all(c, h, sizeof(h))) < 0)
        return rc;
    if (ndw_decode_response(h, r) < 0) {
        conn_err(c, "node data: the node's response header does not parse");
        return conn_break(c, SMP_EPROTO);
    }
    if ((rc = recv_all(c, msg, r->msg_len)) < 0)
        return rc;
    msg[r->msg_len] = '\0';
    if (r->status != 0)
        conn_err(c, "node: %s (%s)", msg[0] != '\0' ? msg : "refused", smp_strerror(r->status));
    return SMP_OK;
}

/* Send a request header, the segment id and the ticket. */
static int send_request(ndc_conn *c, uint8_t op, const char *segment, uint64_t offset,
                        uint64_t length, const uint8_t *ticket, size_t ticket_len)
{
    int rc;
    uint8_t h[NDW_REQ_HDR];
    ndw_request r;
    size_t slen = segment != NULL ? strlen(segment) : 0;
    if (slen == 0 || slen > NDW_SEGMENT_MAX || ticket_len > NDW_TICKET_MAX ||
        (ticket == NULL && ticket_len > 0)) {
        conn_err(c, "node data: bad segment id or ticket length");
        return SMP_EINVAL;
    }
    r.op = op;
    r.seg_len = (uint16_t)slen;
    r.offset = offset;
    r.length = length;
    r.ticket_len = (uint32_t)ticket_len;
    ndw_encode_request(h, &r);
    if ((rc = send_all(c, h, sizeof(h))) < 0 || (rc = send_all(c, segment, slen)) < 0)
        return rc;
    if (ticket_len > 0)
        rc = send_all(c, ticket, ticket_len);
    return rc;
}

/* A READ or READ_COLD: the request, then a FINAL with exactly length bytes
 * straight into dst, or a refusal without payload. A CHECK_COLD is one of
 * no bytes (its answer never has any). */
static int read_op(ndc_conn *c,
                   uint8_t op,
                   const char *name,
                   uint64_t offset,
                   uint64_t length,
                   void *dst,
                   const uint8_t *ticket,
                   size_t ticket_len)
{
    int rc;
    ndw_response r;
    if (c == NULL || (dst == NULL && length > 0) || length > SIZE_MAX)
        return SMP_EINVAL;
    if (c->broken)
        return c->broken;
    c->err[0] = '\0';
    c->rx = 0;
    c->unanswered = 0;
    if ((rc = send_request(c, op, name, offset, length, ticket, ticket_len)) < 0) {
        /* the node had closed or reset the connection before this request */
        c->unanswered = rc == SMP_EIO && (c->sys_errno == EPIPE || c->sys_errno == ECONNRESET);
        return rc;
    }
    if ((rc = recv_response(c, &r)) < 0) {
        /* closed or reset with no byte of the reply: nothing was answered */
        c->unanswered = rc == SMP_EIO && c->rx == 0 &&
                        (c->sys_errno == 0 || c->sys_errno == ECONNRESET || c->sys_errno == EPIPE);
        return rc;
    }
    if (r.kind != NDW_KIND_FINAL || (r.status == 0 && r.payload != length) ||
        (r.status != 0 && r.payload != 0)) {
        conn_err(c, "node data: unexpected answer to a %s",
                 op == NDW_OP_READ ? "read" : op == NDW_OP_READ_COLD ? "cold read" : "cold check");
        return conn_break(c, SMP_EPROTO);
    }
    if (r.status != 0)
        return r.status;
    return recv_all(c, dst, (size_t)length);
}

int ndc_read(ndc_conn *c,
             const char *segment,
             uint64_t offset,
             uint64_t length,
             void *dst,
             const uint8_t *ticket,
             size_t ticket_len)
{
    return read_op(c, NDW_OP_READ, segment, offset, length, dst, ticket, ticket_len);
}

int ndc_read_cold(ndc_conn *c,
                  const char *cold_name,
                  uint64_t offset,
                  uint64_t length,
                  void *dst,
                  const uint8_t *ticket,
                  size_t ticket_len)
{
    return read_op(c, NDW_OP_READ_COLD, cold_name, offset, length, dst, ticket, ticket_len);
}

/* Milliseconds on the monotonic clock. */
static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A node hashes one file at a time for its clients (SMP_EBUSY while it
 * hashes another): readers of one rotten file, which all ask at once, take
 * turns instead of being refused. Asked again after 10 ms, the pause
 * doubling up to 200 ms, until NDC_CHECK_BUSY_WAIT_MS passed in all. */
int ndc_check_cold(ndc_conn *c, const char *cold_name, const uint8_t *ticket, size_t ticket_len)
{
    int64_t give_up = mono_ms() + NDC_CHECK_BUSY_WAIT_MS;
    long pause_ms = 10;
    for (;;) {
        int rc = read_op(c, NDW_OP_CHECK_COLD, cold_name, 0, 0, NULL, ticket, ticket_len);
        if (rc != SMP_EBUSY || c->broken || mono_ms() + pause_ms > give_up)
            return rc;
        struct timespec ts = { .tv_sec = 0, .tv_nsec = pause_ms * 1000000L };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
        }
        pause_ms = pause_ms * 2 > 200 ? 200 : pause_ms * 2;
    }
}

int ndc_check_cold_verdict(ndc_conn *c, const char *addr, const char *cold_name,
                           const uint8_t *ticket, size_t ticket_len, const char *cause, char *err,
                           size_t errlen)
{
    size_t n = strlen(err);
    int rc = c != NULL ? ndc_check_cold(c, cold_name, ticket, ticket_len) : SMP_EIO;
    if (n + 1 >= errlen)
        return rc;
    if (rc == SMP_OK)
        wm_errbuf(err + n, errlen - n, "; node %s hashed cold file %s and found it intact: the "
                  "bytes went bad on their way", addr, cold_name);
    else
        wm_errbuf(err + n, errlen - n, "; node %s, asked to check cold file %s: %s%s", addr,
                  cold_name, c != NULL ? ndc_last_error(c) : cause,
                  rc == SMP_ENOTFOUND ? "; deleted since this read: its replica was dropped as "
                                        "corrupt, found so first by another reader's check, fsck "
                                        "--repair or a load" : "");
    return rc;
}

int ndc_write_stream(ndc_conn *c,
                     const char *segment,
                     uint64_t offset,
                     uint64_t length,
                     ndc_source next,
                     void *ctx,
                     const uint8_t *ticket,
                     size_t ticket_len)
{
    int rc;
    ndw_response r;
    if (c == NULL || next == NULL)
        return SMP_EINVAL;
    if (c->broken)
        return c->broken;
    c->err[0] = '\0';
    if ((rc = send_request(c, NDW_OP_WRITE, segment, offset, length, ticket, ticket_len)) < 0)
        return rc;
    if ((rc = recv_response(c, &r)) < 0)
        return rc;
    if (r.payload != 0 || (r.status == 0) != (r.kind == NDW_KIND_CONTINUE)) {
        conn_err(c, "node data: unexpected answer to a write");
        return conn_break(c, SMP_EPROTO);
    }
    if (r.status != 0)
        return r.status; /* refused before any byte was sent */
    for (uint64_t sent = 0; sent < length;) {
        const void *piece = NULL;
        size_t n = 0;
        if ((rc = next(ctx, &piece, &n)) < 0 || n == 0 || n > length - sent || piece == NULL) {
            /* the node waits for bytes that will not come: the range stays
             * unwritten and the connection cannot carry another request */
            conn_err(c, "node data: the writer's source stopped after %" PRIu64 " of %" PRIu64
                     " bytes", sent, length);
            return conn_break(c, rc < 0 ? rc : SMP_EINVAL);
        }
        if ((rc = send_all(c, piece, n)) < 0)
            return rc;
        sent += n;
    }
    if ((rc = recv_response(c, &r)) < 0)
        return rc;
    if (r.kind != NDW_KIND_FINAL || r.payload != 0) {
        conn_err(c, "node data: unexpected answer to a write's payload");
        return conn_break(c, SMP_EPROTO);
    }
    return r.status;
}

/* The source of a one-buffer write: the whole buffer at once. */
typedef struct one_piece {
    const void *src;
    size_t len;
} one_piece;

static int next_one_piece(void *ctx, const void **data, size_t *len)
{
    one_piece *p = ctx;
    *data = p->src;
    *len = p->len;
    return SMP_OK;
}

int ndc_write(ndc_conn *c,
              const char *segment,
              uint64_t offset,
              uint64_t length,
              const void *src,
              const uint8_t *ticket,
              size_t ticket_len)
{
    one_piece p = {src, (size_t)length};
    if (c == NULL || (src == NULL && length > 0) || length > SIZE_MAX)
        return SMP_EINVAL;
    return ndc_write_stream(c, segment, offset, length, next_one_piece, &p, ticket, ticket_len);
}

const char *ndc_tls_cipher(const ndc_conn *c)
{
    return c != NULL && c->ssl != NULL ? SSL_get_cipher_name(c->ssl) : "";
}

int ndc_send_raw(ndc_conn *c, const void *bytes, size_t len)
{
    if (c == NULL)
        return SMP_EINVAL;
    if (c->broken)
        return c->broken;
    return send_all(c, bytes, len);
}

int ndc_recv_status(ndc_conn *c)
{
    int rc;
    ndw_response r;
    if (c == NULL)
        return SMP_EINVAL;
    if (c->broken)
        return c->broken;
    if ((rc = recv_response(c, &r)) < 0)
        return rc;
    return r.status;
}
