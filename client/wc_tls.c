/* wc_tls.c -- see wc_tls.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "store_plugin.h"
#include "wc_tls.h"
#include "wm_errbuf.h"

void wc_tls_why(char *out, size_t cap)
{
    unsigned long e = ERR_get_error();
    out[0] = '\0';
    if (e != 0)
        ERR_error_string_n(e, out, cap);
    ERR_clear_error();
}

int wc_tls_client_ctx(const char *ca,
                      const char *cert,
                      const char *key,
                      SSL_CTX **out,
                      char *err,
                      size_t errlen)
{
    char why[256];
    SSL_CTX *ctx;
    *out = NULL;
    if (ca == NULL || ca[0] == '\0') {
        ca = getenv("WM_TLS_CA");
        cert = getenv("WM_TLS_CERT");
        key = getenv("WM_TLS_KEY");
    }
    if (ca == NULL || ca[0] == '\0') {
        if ((cert && cert[0]) || (key && key[0])) {
            wm_errbuf(err, errlen, "TLS: a client certificate needs the CA of the master (--tls-ca "
                      "or WM_TLS_CA)");
            return SMP_EINVAL;
        }
        return SMP_OK;
    }
    if ((cert && cert[0]) != (key && key[0])) {
        wm_errbuf(err, errlen, "TLS: the client certificate and its key come together");
        return SMP_EINVAL;
    }
    ERR_clear_error();
    if ((ctx = SSL_CTX_new(TLS_client_method())) == NULL ||
        SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1) {
        SSL_CTX_free(ctx);
        wm_errbuf(err, errlen, "TLS: cannot create a TLS 1.3 context");
        return SMP_EIO;
    }
    if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
        wc_tls_why(why, sizeof(why));
        wm_errbuf(err, errlen, "TLS CA %s: %s", ca, why);
        SSL_CTX_free(ctx);
        return SMP_EINVAL;
    }
    if (cert && cert[0] &&
        (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
         SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
         SSL_CTX_check_private_key(ctx) != 1)) {
        wc_tls_why(why, sizeof(why));
        wm_errbuf(err, errlen, "TLS client certificate %s / key %s: %s", cert, key, why);
        SSL_CTX_free(ctx);
        return SMP_EINVAL;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    *out = ctx;
    return SMP_OK;
}

static pthread_mutex_t env_lock = PTHREAD_MUTEX_INITIALIZER;
static SSL_CTX *env_ctx;       /* built from env_key */
static char env_key[3 * 1024];  /* "ca\ncert\nkey" it was built from */

int wc_tls_env_ctx(SSL_CTX **out, char *err, size_t errlen)
{
    const char *ca = getenv("WM_TLS_CA"), *cert = getenv("WM_TLS_CERT"), *key = getenv("WM_TLS_KEY");
    char now[sizeof(env_key)];
    int rc = SMP_OK;
    *out = NULL;
    if (ca == NULL || ca[0] == '\0')
        return SMP_OK;
    snprintf(now, sizeof(now), "%s\n%s\n%s", ca, cert ? cert : "", key ? key : "");
    pthread_mutex_lock(&env_lock);
    if (env_ctx == NULL || strcmp(now, env_key) != 0) {
        SSL_CTX *fresh = NULL;
        if ((rc = wc_tls_client_ctx(ca, cert, key, &fresh, err, errlen)) == SMP_OK) {
            SSL_CTX_free(env_ctx); /* sessions made with it hold their own references */
            env_ctx = fresh;
            memcpy(env_key, now, sizeof(env_key));
        }
    }
    if (rc == SMP_OK && env_ctx != NULL) {
        SSL_CTX_up_ref(env_ctx);
        *out = env_ctx;
    }
    pthread_mutex_unlock(&env_lock);
    return rc;
}

/* -- the socket BIO of a client session ------------------------------------
 * OpenSSL's own socket BIO writes with write(2): on a connection the peer
 * has closed, the kernel raises SIGPIPE, which kills an application that
 * did not ignore it. This one moves the same bytes with send(MSG_NOSIGNAL)
 * and recv, so a vanished peer is an EPIPE the caller reports. It has the
 * socket BIO's retry and end-of-stream semantics, answers BIO_get_fd (so
 * SSL_get_fd works) and never closes the descriptor (the caller owns it). */

static BIO_METHOD *nosig_method;
static pthread_once_t nosig_once = PTHREAD_ONCE_INIT;

static int nosig_fd(BIO *b)
{
    return (int)(intptr_t)BIO_get_data(b);
}

/* An errno after which the call is to be made again (as
 * BIO_sock_non_fatal_error says for OpenSSL's socket BIO). */
static int nosig_retry(int e)
{
    return e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == EINPROGRESS || e == EALREADY ||
           e == ENOTCONN;
}

static int nosig_write(BIO *b, const char *buf, int len)
{
    ssize_t n;
    errno = 0;
    n = send(nosig_fd(b), buf, (size_t)len, MSG_NOSIGNAL);
    BIO_clear_retry_flags(b);
    if (n < 0 && nosig_retry(errno))
        BIO_set_retry_write(b);
    return (int)n;
}

static int nosig_read(BIO *b, char *buf, int len)
{
    ssize_t n;
    if (buf == NULL)
        return 0;
    errno = 0;
    n = recv(nosig_fd(b), buf, (size_t)len, 0);
    BIO_clear_retry_flags(b);
    if (n < 0 && nosig_retry(errno))
        BIO_set_retry_read(b);
    else if (n == 0)
        BIO_set_flags(b, BIO_FLAGS_IN_EOF);
    return (int)n;
}

static int nosig_puts(BIO *b, const char *str)
{
    return nosig_write(b, str, (int)strlen(str));
}

static long nosig_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num;
    switch (cmd) {
    case BIO_C_GET_FD:
        if (!BIO_get_init(b))
            return -1;
        if (ptr != NULL)
            *(int *)ptr = nosig_fd(b);
        return nosig_fd(b);
    case BIO_CTRL_EOF:
        return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
    case BIO_CTRL_GET_CLOSE:
        return BIO_NOCLOSE;
    case BIO_CTRL_FLUSH:
    case BIO_CTRL_DUP:
        return 1;
    default:
        return 0;
    }
}

static void nosig_make(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK |
                                 BIO_TYPE_DESCRIPTOR, "socket, MSG_NOSIGNAL");
    if (m == NULL || BIO_meth_set_write(m, nosig_write) != 1 ||
        BIO_meth_set_read(m, nosig_read) != 1 || BIO_meth_set_puts(m, nosig_puts) != 1 ||
        BIO_meth_set_ctrl(m, nosig_ctrl) != 1) {
        BIO_meth_free(m);
        return;
    }
    nosig_method = m; /* lives as long as the process */
}

BIO *wc_tls_socket_bio(int fd)
{
    BIO *b;
    if (pthread_once(&nosig_once, nosig_make) != 0 || nosig_method == NULL ||
        (b = BIO_new(nosig_method)) == NULL)
        return NULL;
    BIO_set_data(b, (void *)(intptr_t)fd);
    BIO_set_init(b, 1);
    return b;
}

/* The host part of a TCP endpoint "host:port" / "[v6]:port" into host. */
static void endpoint_host(const char *ep, char *host, size_t cap)
{
    const char *colon = strrchr(ep, ':');
    size_t n = colon != NULL ? (size_t)(colon - ep) : strlen(ep);
    if (ep[0] == '[' && n >= 2 && ep[n - 1] == ']') {
        ep++;
        n -= 2;
    }
    if (n >= cap) n = cap - 1;
    memcpy(host, ep, n);
    host[n] = '\0';
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int wc_wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events, .revents = 0};
        int ms = -1, r;
        if (deadline >= 0) {
            int64_t left = deadline - mono_ms();
            if (left <= 0)
                return 0;
            ms = left > 1000000 ? 1000000 : (int)left;
        }
        r = poll(&p, 1, ms);
        if (r > 0)
            return 1;
        if (r == 0) {
            if (deadline >= 0 && mono_ms() >= deadline)
                return 0;
            continue;
        }
        if (errno != EINTR)
            return -errno;
    }
}

int wc_tls_connect(SSL_CTX *ctx,
                   int fd,
                   const char *endpoint,
                   int64_t deadline,
                   const char *peer,
                   SSL **out,
                   char *err,
                   size_t errlen)
{
    return wc_tls_connect_as(ctx, fd, endpoint, NULL, deadline, peer, out, err, errlen);
}

int wc_tls_connect_as(SSL_CTX *ctx,
                      int fd,
                      const char *endpoint,
                      const char *name,
                      int64_t deadline,
                      const char *peer,
                      SSL **out,
                      char *err,
                      size_t errlen)
{
    char host[256], why[256];
    SSL *ssl = SSL_new(ctx);
    BIO *bio = wc_tls_socket_bio(fd);
    struct in6_addr a6;
    struct in_addr a4;
    if (ssl == NULL || bio == NULL) {
        SSL_free(ssl);
        BIO_free(bio);
        wm_errbuf(err, errlen, "TLS: out of memory");
        return SMP_ENOMEM;
    }
    SSL_set_bio(ssl, bio, bio); /* the session owns the BIO from here */
    /* Room for several records per recv when read-ahead is on (the node
     * data client turns it on): one syscall brings ~8 records, not one. */
    SSL_set_default_read_buffer_len(ssl, WC_TLS_READ_BUFFER);
    if (name != NULL && name[0] != '\0')
        snprintf(host, sizeof(host), "%s", name);
    else
        endpoint_host(endpoint, host, sizeof(host));
    if (inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host);
    } else {
        SSL_set_tlsext_host_name(ssl, host);
        SSL_set1_host(ssl, host);
    }
    ERR_clear_error();
    for (;;) {
        int r = SSL_connect(ssl);
        if (r == 1) {
            *out = ssl;
            return SMP_OK;
        }
        int e = SSL_get_error(ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            int w = wc_wait_fd(fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline);
            if (w > 0) continue;
            SSL_free(ssl);
            wm_errbuf(err, errlen, "TLS handshake with %s: %s", endpoint,
                      w == 0 ? "timed out" : strerror(-w));
            return w == 0 ? SMP_EAGAIN : SMP_EIO;
        }
        long vr = SSL_get_verify_result(ssl);
        int plaintext = ERR_GET_REASON(ERR_peek_error()) == SSL_R_WRONG_VERSION_NUMBER;
        wc_tls_why(why, sizeof(why));
        if (plaintext)
            /* its first bytes are no TLS record: a port that speaks plaintext */
            wm_errbuf(err, errlen, "TLS handshake with %s refused: the %s answered in plaintext: "
                      "that port does not speak TLS (a CA is set, by --tls-ca or WM_TLS_CA, so "
                      "this client speaks TLS to every TCP endpoint; %s)", endpoint, peer, why);
        else if (vr != X509_V_OK)
            wm_errbuf(err, errlen, "TLS handshake with %s refused: the %s's certificate is not "
                      "trusted (%s%s%s)", endpoint, peer, X509_verify_cert_error_string(vr),
                      vr == X509_V_ERR_HOSTNAME_MISMATCH || vr == X509_V_ERR_IP_ADDRESS_MISMATCH
                          ? ": it does not name " : "",
                      vr == X509_V_ERR_HOSTNAME_MISMATCH || vr == X509_V_ERR_IP_ADDRESS_MISMATCH
                          ? host : "");
        else
            wm_errbuf(err, errlen, "TLS handshake with %s refused: %s%s%s", endpoint,
                      why[0] ? why : "the ", why[0] ? "" : peer,
                      why[0] ? "" : " closed the connection (not a TLS port, or it wants a "
                                    "client certificate)");
        SSL_free(ssl);
        return SMP_EPROTO;
    }
}
