/* node_tls_out.c -- see node_tls_out.h. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "node_tls_out.h"

static BIO_METHOD *out_method;
static pthread_once_t out_once = PTHREAD_ONCE_INIT;

/* Append n bytes to the stash. 0, or -1 when out of memory. */
static int stash_add(tls_out *o, const uint8_t *p, size_t n)
{
    if (o->len + n > o->cap) {
        size_t cap = o->cap > 0 ? o->cap : 64u << 10;
        uint8_t *s;
        while (cap < o->len + n)
            cap *= 2;
        if ((s = realloc(o->stash, cap)) == NULL)
            return -1;
        o->stash = s;
        o->cap = cap;
    }
    memcpy(o->stash + o->len, p, n);
    o->len += n;
    return 0;
}

/* Keep the record in the stash; tls_out_flush sends it. The whole record
 * counts as written, or -1 (no retry) when memory ran out. */
static int out_write(BIO *b, const char *buf, int len)
{
    tls_out *o = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (len <= 0)
        return 0;
    return stash_add(o, (const uint8_t *)buf, (size_t)len) < 0 ? -1 : len;
}

int tls_out_flush(tls_out *o)
{
    size_t sent = 0;
    uv_os_fd_t fd;
    if (o->len == 0 || uv_stream_get_write_queue_size((uv_stream_t *)o->tcp) != 0)
        return 0;
    if (uv_fileno((uv_handle_t *)o->tcp, &fd) != 0)
        return -EBADF;
    while (sent < o->len) {
        ssize_t n = send(fd, o->stash + sent, o->len - sent,
                         MSG_NOSIGNAL | MSG_DONTWAIT | (o->more ? MSG_MORE : 0));
        if (n > 0) {
            sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        return n < 0 ? -errno : -EPIPE; /* EPIPE, ECONNRESET, ...: the peer is gone */
    }
    memmove(o->stash, o->stash + sent, o->len - sent);
    o->len -= sent;
    return 0;
}

static int out_read(BIO *b, char *buf, int len)
{
    (void)b;
    (void)buf;
    (void)len;
    return -1;
}

static long out_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b;
    (void)num;
    (void)ptr;
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1; /* nothing is held that the caller does not see in the stash */
    default:
        return 0;
    }
}

static void out_make(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "node TLS out");
    if (m == NULL || BIO_meth_set_write(m, out_write) != 1 ||
        BIO_meth_set_read(m, out_read) != 1 || BIO_meth_set_ctrl(m, out_ctrl) != 1) {
        BIO_meth_free(m);
        return;
    }
    out_method = m; /* lives as long as the process */
}

BIO *tls_out_bio(tls_out *o)
{
    BIO *b;
    if (pthread_once(&out_once, out_make) != 0 || out_method == NULL ||
        (b = BIO_new(out_method)) == NULL)
        return NULL;
    BIO_set_data(b, o);
    BIO_set_init(b, 1);
    return b;
}

void tls_out_take(tls_out *o, uint8_t **buf, size_t *len)
{
    free(*buf);
    *buf = o->stash;
    *len = o->len;
    o->stash = NULL;
    o->len = o->cap = 0;
}

void tls_out_free(tls_out *o)
{
    free(o->stash);
    o->stash = NULL;
    o->len = o->cap = 0;
}
