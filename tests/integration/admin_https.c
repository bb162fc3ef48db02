/* admin_https.c -- an HTTPS client of the admin endpoint (admin_https.h). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "admin_https.h"

void hx_reply_free(hx_reply *r)
{
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof(*r));
}

/* A TCP connection to 127.0.0.1:port with 10 s send and receive timeouts,
 * or -1. */
static int connect_port(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct timeval tv = {10, 0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Split an HTTP/1.x answer of len bytes into r (status, head, body). */
static void parse_reply(const char *buf, size_t len, hx_reply *r)
{
    const char *end = strstr(buf, "\r\n\r\n");
    if (len == 0 || sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) {
        snprintf(r->err, sizeof(r->err), "no HTTP answer (%zu bytes)", len);
        r->status = -1;
        return;
    }
    r->head = strndup(buf, end != NULL ? (size_t)(end - buf) : len);
    r->body = strdup(end != NULL ? end + 4 : "");
}

/* The client context o asks for, or NULL with r->err saying why. */
static SSL_CTX *client_ctx(const hx_https_opts *o, hx_reply *r)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        snprintf(r->err, sizeof(r->err), "no SSL_CTX");
        return NULL;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    if ((o->ca != NULL && SSL_CTX_load_verify_locations(ctx, o->ca, NULL) != 1) ||
        (o->max_version && SSL_CTX_set_max_proto_version(ctx, o->max_version) != 1) ||
        (o->cert != NULL && (SSL_CTX_use_certificate_chain_file(ctx, o->cert) != 1 ||
                             SSL_CTX_use_PrivateKey_file(ctx, o->key, SSL_FILETYPE_PEM) != 1))) {
        snprintf(r->err, sizeof(r->err), "client settings refused by OpenSSL (ca %s, cert %s)",
                 o->ca ? o->ca : "-", o->cert ? o->cert : "-");
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/* Read until the server closes: a malloc'd, NUL-terminated buffer and its
 * length, or NULL (out of memory). */
static char *read_all(SSL *ssl, size_t *len)
{
    size_t cap = 1 << 16;
    char *buf = malloc(cap);
    *len = 0;
    while (buf != NULL) {
        if (*len + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) break;
            buf = nb;
            cap *= 2;
        }
        int got = SSL_read(ssl, buf + *len, (int)(cap - *len - 1));
        if (got <= 0) {
            buf[*len] = '\0';
            ERR_clear_error();
            return buf;
        }
        *len += (size_t)got;
    }
    free(buf);
    return NULL;
}

/* The SHA-256 of x, 64 hex digits into out. */
static void cert_sha256(X509 *x, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    out[0] = '\0';
    if (X509_digest(x, EVP_sha256(), md, &n) != 1) return;
    for (unsigned i = 0; i < n && i < 32; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
}

int hx_pem_sha256(const char *path, char out[65])
{
    FILE *f = fopen(path, "r");
    X509 *x = f != NULL ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
    if (f != NULL) fclose(f);
    if (x == NULL) return -1;
    cert_sha256(x, out);
    X509_free(x);
    return out[0] != '\0' ? 0 : -1;
}

/* A TLS session with 127.0.0.1:port (the server verified against o's CA
 * for the IP 127.0.0.1). */
typedef struct session {
    SSL_CTX *ctx;
    SSL *ssl;
    int fd;
} session;

static void close_session(session *t)
{
    SSL_free(t->ssl);
    if (t->fd >= 0) close(t->fd);
    SSL_CTX_free(t->ctx);
}

/* Open *t: 0, or -1 with err saying why (t closed). */
static int open_session(int port, const hx_https_opts *o, session *t, char *err, size_t errlen)
{
    hx_reply r = {.status = -1};
    *t = (session){.fd = -1};
    if ((t->ctx = client_ctx(o, &r)) == NULL) {
        snprintf(err, errlen, "%s", r.err);
        return -1;
    }
    if ((t->fd = connect_port(port)) < 0) {
        snprintf(err, errlen, "cannot connect to port %d", port);
        goto fail;
    }
    if ((t->ssl = SSL_new(t->ctx)) == NULL) {
        snprintf(err, errlen, "no SSL");
        goto fail;
    }
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), "127.0.0.1");
    SSL_set_fd(t->ssl, t->fd);
    if (SSL_connect(t->ssl) != 1) {
        unsigned long e = ERR_get_error();
        snprintf(err, errlen, "handshake: %s", e ? ERR_reason_error_string(e) : "closed");
        ERR_clear_error();
        goto fail;
    }
    return 0;
fail:
    close_session(t);
    return -1;
}

long long hx_pem_not_after(const char *path)
{
    FILE *f = fopen(path, "r");
    X509 *x = f != NULL ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
    struct tm tm;
    long long t = -1;
    if (f != NULL) fclose(f);
    if (x != NULL && ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) == 1) t = (long long)timegm(&tm);
    X509_free(x);
    return t;
}

int hx_tls_peer(int port, const hx_https_opts *o, char out[65], char *err, size_t errlen)
{
    session t;
    out[0] = '\0';
    if (open_session(port, o, &t, err, errlen) < 0) return -1;
    X509 *x = SSL_get1_peer_certificate(t.ssl);
    if (x != NULL) {
        cert_sha256(x, out);
        X509_free(x);
    }
    close_session(&t);
    if (out[0] != '\0') return 0;
    snprintf(err, errlen, "port %d presented no certificate", port);
    return -1;
}

hx_reply hx_https(int port, const hx_https_opts *o, const char *method, const char *path,
                  const char *body)
{
    hx_reply r = {.status = -1};
    char req[8192], *buf;
    size_t len = 0;
    session t;
    int n;
    if (open_session(port, o, &t, r.err, sizeof(r.err)) < 0) return r;
    SSL *ssl = t.ssl;
    r.version = SSL_version(ssl);
    n = snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n%s%s%s"
                 "Content-Length: %zu\r\n\r\n%s", method, path,
                 o->authz ? "Authorization: " : "", o->authz ? o->authz : "",
                 o->authz ? "\r\n" : "", body ? strlen(body) : 0, body ? body : "");
    if (n < 0 || (size_t)n >= sizeof(req) || SSL_write(ssl, req, n) != n) {
        snprintf(r.err, sizeof(r.err), "the request was not sent");
        goto close;
    }
    if ((buf = read_all(ssl, &len)) == NULL) {
        snprintf(r.err, sizeof(r.err), "out of memory for the answer");
        goto close;
    }
    parse_reply(buf, len, &r);
    free(buf);
close:
    close_session(&t);
    return r;
}
