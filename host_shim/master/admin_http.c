/* admin_http.c -- the admin HTTP endpoint, served from the loop thread.
 *
 * libmicrohttpd runs its own polling thread. Its access handler suspends each
 * GET or HEAD request and queues it; a uv_async_t wakes the loop, which
 * checks the request's token (when one is asked) and renders every queued
 * request with the caller's callback and resumes it; the handler then queues
 * the response. The loop never waits on the HTTP thread and the HTTP thread
 * never touches master state. Other methods, and (with verify_clients) a
 * client without a good certificate, are answered on the HTTP thread
 * without reaching the loop.
 *
 * TLS is libmicrohttpd's (GnuTLS): the PEM files are read into memory here,
 * the priorities allow TLS 1.3 only, and a client certificate is verified
 * per request against the trust list libmicrohttpd built from the CA. Where
 * a token is asked, a verified client certificate that auth.certificates
 * maps stands in for it (an admin's is served, any other role's gets 403);
 * one it does not map leaves the token asked.
 *
 * libmicrohttpd's own messages (a plaintext request or a TLS 1.2 client on
 * the HTTPS port: "Error: received handshake message out of context.") go
 * through on_mhd_log: prefixed "store_master: admin: " and at most
 * ADMIN_LOG_BURST a minute, the rest counted and summed up in one line when
 * the minute is over (at the next message) and at the stop -- anyone who
 * reaches the port must not be able to fill the master's log. */
#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "admin_http.h"
#include "log_limit.h"
#include "net_addr.h"
#include "store_plugin.h"

/* TLS 1.3 only: GnuTLS's defaults with every version removed but 1.3. */
#define ADMIN_TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3"
#define ADMIN_PEM_MAX (1u << 20) /* bytes of a certificate, key or CA file */
#define ADMIN_LOG_BURST 5        /* libmicrohttpd lines logged per window */
#define ADMIN_LOG_WINDOW_MS 60000

typedef struct admin_req {
    struct MHD_Connection *conn;
    char path[256];
    char *authz;          /* the Authorization header, when a token is asked */
    int needs_token;      /* the loop checks authz before rendering */
    int queued;           /* handed to the loop */
    int done;             /* answer ready */
    int status;
    char *body;
    size_t len;
    const char *content_type;
    const char *allow;    /* an Allow header (405), or NULL */
    int challenge;        /* add WWW-Authenticate: Bearer (401) */
    struct admin_req *next;
} admin_req;

struct admin_http {
    uv_loop_t *loop;
    uv_async_t wake;
    struct MHD_Daemon *mhd;
    admin_render_fn render;
    void *ctx;
    const rpc_auth *auth;   /* NULL: no token asked */
    int verify_clients;
    char *cert_pem, *key_pem, *ca_pem; /* what libmicrohttpd was given */
    size_t key_len;
    _Atomic uint64_t refused[ADMIN_REFUSAL_KINDS]; /* counted on either thread */
    pthread_mutex_t lock;
    admin_req *head, *tail; /* suspended, waiting for the loop */
    int port;
    struct sockaddr_storage sa;  /* the address it listens on */
    char addr[80];               /* as listen.admin gave it, for messages */
    int stopping;
    /* on_mhd_log's rate limit (either thread: under log_lock) */
    pthread_mutex_t log_lock;
    log_limit log;
};

/* Set r's answer to a plain-text body made from fmt. */
static void answer(admin_req *r, int status, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    r->status = status;
    r->body = strdup(text);
    r->len = r->body ? strlen(r->body) : 0;
    r->content_type = "text/plain; charset=utf-8";
    r->done = 1;
}

static void count(admin_http *a, admin_refusal k)
{
    atomic_fetch_add_explicit(&a->refused[k], 1, memory_order_relaxed);
}

const char *admin_refusal_name(admin_refusal k)
{
    static const char *const names[ADMIN_REFUSAL_KINDS] = {"method", "client_cert",
                                                           "unauthenticated", "forbidden"};
    return (unsigned)k < ADMIN_REFUSAL_KINDS ? names[k] : "unknown";
}

void admin_http_refusals(const admin_http *a, uint64_t out[ADMIN_REFUSAL_KINDS])
{
    for (int k = 0; k < ADMIN_REFUSAL_KINDS; k++)
        out[k] = atomic_load_explicit(&((admin_http *)a)->refused[k], memory_order_relaxed);
}

/* Loop thread: 0 when r's Authorization header carries the token of an
 * admin of a->auth; otherwise 1 with r answered -- 401 without a header,
 * with another scheme than Bearer, or with a token the master does not
 * know; 403 with a token whose role is below admin. */
static int token_refused(const admin_http *a, admin_req *r)
{
    const rpc_auth_token *t = NULL;
    const char *tok;
    size_t len;
    r->challenge = 1;
    if (r->authz == NULL) {
        answer(r, 401, "%s needs an admin token (auth is on and this endpoint listens on a "
               "non-loopback address): send Authorization: Bearer TOKEN\n", r->path);
        return 1;
    }
    if (strncasecmp(r->authz, "Bearer ", 7) != 0) {
        answer(r, 401, "the Authorization header is not \"Bearer TOKEN\"; %s needs an admin "
               "token\n", r->path);
        return 1;
    }
    for (tok = r->authz + 7; *tok == ' '; tok++) {
    }
    for (len = strlen(tok); len > 0 && tok[len - 1] == ' '; len--) {
    }
    if (rpc_auth_check(a->auth, (const uint8_t *)tok, len, &t) < 0) {
        answer(r, 401, "the token is not known to this master; %s needs an admin token\n",
               r->path);
        return 1;
    }
    r->challenge = 0;
    if (t->role != SMP_ROLE_ADMIN) {
        answer(r, 403, "the token of tenant %s has role %s; %s needs role admin\n", t->tenant,
               rpc_auth_role_name(t->role), r->path);
        return 1;
    }
    return 0;
}

/* HTTP thread: 0 when the connection's client presented a certificate that
 * verifies against the CA libmicrohttpd was given; otherwise 1 with r
 * answered 403 saying what was wrong. */
static int client_cert_refused(struct MHD_Connection *conn, admin_req *r)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    unsigned status = 0;
    gnutls_datum_t why = {NULL, 0};
    int rc;
    if (ci == NULL || ci->tls_session == NULL) {
        answer(r, 403, "a client certificate of tls.ca is required (tls.verify_clients), and "
               "this connection has no TLS session\n");
        return 1;
    }
    rc = gnutls_certificate_verify_peers2((gnutls_session_t)ci->tls_session, &status);
    if (rc == GNUTLS_E_NO_CERTIFICATE_FOUND) {
        answer(r, 403, "a client certificate of tls.ca is required (tls.verify_clients): none "
               "was presented\n");
        return 1;
    }
    if (rc < 0) {
        answer(r, 403, "the client certificate could not be verified against tls.ca: %s\n",
               gnutls_strerror(rc));
        return 1;
    }
    if (status == 0) return 0;
    if (gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &why, 0) < 0)
        why.data = NULL;
    answer(r, 403, "the client certificate does not verify against tls.ca: %s\n",
           why.data != NULL ? (const char *)why.data : "rejected");
    gnutls_free(why.data);
    return 1;
}

/* HTTP thread: the identity auth.certificates gives the connection's
 * client certificate (verified by client_cert_refused): 1 with *tenant and
 * *role, 0 when there is none or it maps to nothing (a token is then
 * asked). */
static int cert_identity(const admin_http *a, struct MHD_Connection *conn, const char **tenant,
                         smp_role *role)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    const gnutls_datum_t *chain;
    unsigned n = 0;
    const unsigned char *der;
    X509 *leaf;
    int ok;
    if (ci == NULL || ci->tls_session == NULL) return 0;
    chain = gnutls_certificate_get_peers((gnutls_session_t)ci->tls_session, &n);
    if (chain == NULL || n == 0) return 0;
    der = chain[0].data;
    if ((leaf = d2i_X509(NULL, &der, (long)chain[0].size)) == NULL) return 0;
    ok = rpc_auth_identify_cert(a->auth, leaf, tenant, role, NULL, 0) == SMP_OK;
    X509_free(leaf);
    return ok;
}

/* Loop thread: render everything queued and resume it. */
static void on_wake(uv_async_t *h)
{
    admin_http *a = h->data;
    pthread_mutex_lock(&a->lock);
    admin_req *r = a->head;
    a->head = a->tail = NULL;
    pthread_mutex_unlock(&a->lock);
    while (r != NULL) {
        admin_req *next = r->next;
        r->next = NULL;
        if (a->stopping) {
            answer(r, 503, "shutting down\n");
        } else if (r->needs_token && token_refused(a, r)) {
            count(a, r->status == 403 ? ADMIN_REFUSED_FORBIDDEN : ADMIN_REFUSED_UNAUTHENTICATED);
        } else {
            a->render(a->ctx, r->path, &r->status, &r->body, &r->len, &r->content_type);
            if (r->body == NULL) answer(r, 500, "render failed\n");
            r->done = 1;
        }
        MHD_resume_connection(r->conn);
        r = next;
    }
}

static enum MHD_Result on_request(void *cls,
                                  struct MHD_Connection *conn,
                                  const char *url,
                                  const char *method,
                                  const char *version,
                                  const char *upload_data,
                                  size_t *upload_data_size,
                                  void **req_cls)
{
    admin_http *a = cls;
    admin_req *r = *req_cls;
    (void)version;
    (void)upload_data;
    if (r == NULL) {
        r = calloc(1, sizeof(*r));
        if (r == NULL) return MHD_NO;
        r->conn = conn;
        snprintf(r->path, sizeof(r->path), "%s", url);
        *req_cls = r;
        if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
            answer(r, 405, "%.32s is not served: this endpoint only reads (GET, HEAD); changes "
                   "are admin RPCs (weightctl)\n", method);
            r->allow = "GET, HEAD";
            count(a, ADMIN_REFUSED_METHOD);
        } else if (a->verify_clients && client_cert_refused(conn, r)) {
            count(a, ADMIN_REFUSED_CLIENT_CERT);
        } else if (a->auth != NULL && strcmp(r->path, "/health") != 0) {
            const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                        MHD_HTTP_HEADER_AUTHORIZATION);
            const char *tenant = NULL;
            smp_role role = SMP_ROLE_NONE;
            if (a->verify_clients && cert_identity(a, conn, &tenant, &role)) {
                if (role != SMP_ROLE_ADMIN) { /* the certificate speaks: no token asked */
                    answer(r, 403, "the client certificate of tenant %.128s has role %s; %s needs "
                           "role admin\n", tenant, rpc_auth_role_name(role), r->path);
                    count(a, ADMIN_REFUSED_FORBIDDEN);
                }
                return MHD_YES;
            }
            r->needs_token = 1;
            if (h != NULL && (r->authz = strdup(h)) == NULL) return MHD_NO;
        }
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        *upload_data_size = 0; /* ignore bodies */
        return MHD_YES;
    }
    if (!r->done && !r->queued) {
        r->queued = 1;
        MHD_suspend_connection(conn);
        pthread_mutex_lock(&a->lock);
        if (a->tail) a->tail->next = r;
        else a->head = r;
        a->tail = r;
        pthread_mutex_unlock(&a->lock);
        uv_async_send(&a->wake);
        return MHD_YES;
    }
    if (!r->done) return MHD_YES;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) return MHD_NO;
    r->body = NULL; /* owned by the response now */
    MHD_add_response_header(resp, "Content-Type", r->content_type);
    if (r->allow != NULL) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (r->challenge)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                "Bearer realm=\"store_master admin\"");
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void on_completed(void *cls,
                         struct MHD_Connection *conn,
                         void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    admin_req *r = *req_cls;
    if (r == NULL) return;
    free(r->body);
    if (r->authz != NULL) OPENSSL_cleanse(r->authz, strlen(r->authz));
    free(r->authz);
    free(r);
    *req_cls = NULL;
}

/* "host:port" into an IPv4 socket address (the admin endpoint is IPv4). */
/* Bind a socket of ss's family to ss and close it again: 0, or -errno of
 * the bind (libmicrohttpd's own failure line names "port 0" for an address
 * it is handed, so the cause is found here first). */
static int probe_bind(const struct sockaddr_storage *ss)
{
    int one = 1, rc = 0;
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)); /* as libmicrohttpd does */
    if (bind(fd, (const struct sockaddr *)ss, ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                                      : sizeof(struct sockaddr_in)) < 0)
        rc = -errno;
    close(fd);
    return rc;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The line summing up n messages on_mhd_log left out (none when n is 0). */
static void say_left_out(uint64_t n)
{
    if (n == 0) return;
    fprintf(stderr, "store_master: admin: %llu more message%s of libmicrohttpd not logged (at "
            "most %d a minute are)\n", (unsigned long long)n, n == 1 ? "" : "s",
            ADMIN_LOG_BURST);
}

/* libmicrohttpd's logger (MHD_OPTION_EXTERNAL_LOGGER), on its thread or in
 * MHD_start_daemon: the message on one line prefixed "store_master: admin:
 * ", at most ADMIN_LOG_BURST per ADMIN_LOG_WINDOW_MS (log_limit.h); the
 * others are counted and summed up when the window is over (at the next
 * message) and at the stop. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    admin_http *a = cls;
    char msg[512];
    size_t n;
    uint64_t left_out;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (msg[i] == '\n' || msg[i] == '\r') msg[i] = ' ';
    pthread_mutex_lock(&a->log_lock);
    int say = log_limit_admit(&a->log, mono_ms(), &left_out);
    say_left_out(left_out);
    if (say) fprintf(stderr, "store_master: admin: %s\n", msg);
    pthread_mutex_unlock(&a->log_lock);
}

/* Free a and what it holds (the key's copy wiped first). */
static void admin_free(admin_http *a)
{
    pthread_mutex_destroy(&a->lock);
    pthread_mutex_destroy(&a->log_lock);
    free(a->cert_pem);
    if (a->key_pem != NULL) OPENSSL_cleanse(a->key_pem, a->key_len);
    free(a->key_pem);
    free(a->ca_pem);
    free(a);
}

static void on_wake_closed(uv_handle_t *h)
{
    admin_free(h->data);
}

/* Free a endpoint whose daemon never started (NULL: nothing): through its
 * wake-up's close when that was made, else at once. */
static void admin_drop(admin_http *a)
{
    if (a == NULL) return;
    if (a->wake.data == a) uv_close((uv_handle_t *)&a->wake, on_wake_closed);
    else admin_free(a);
}

/* Read the PEM file at path (the setting `key` names it) into a malloc'd,
 * NUL-terminated *out, as libmicrohttpd takes it; *len (when not NULL) its
 * allocated size, for wiping. SMP_OK, or SMP_EIO / SMP_EINVAL / SMP_ENOMEM
 * with err naming the key, the file and the cause. */
static int read_pem(const char *key, const char *path, char **out, size_t *len, char *err,
                    size_t errlen)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    char *buf = NULL;
    size_t size;
    int rc = SMP_OK;
    if (f == NULL) {
        snprintf(err, errlen, "admin http: %s %s: %s", key, path, strerror(errno));
        return SMP_EIO;
    }
    if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > ADMIN_PEM_MAX) {
        snprintf(err, errlen, "admin http: %s %s: not a regular file of at most %u bytes", key,
                 path, ADMIN_PEM_MAX);
        rc = SMP_EINVAL;
        goto close_file;
    }
    size = (size_t)st.st_size;
    if ((buf = malloc(size + 1)) == NULL) {
        rc = SMP_ENOMEM;
        goto close_file;
    }
    if (fread(buf, 1, size, f) != size) {
        snprintf(err, errlen, "admin http: %s %s: cannot read it", key, path);
        OPENSSL_cleanse(buf, size + 1);
        free(buf);
        rc = SMP_EIO;
        goto close_file;
    }
    buf[size] = '\0';
    *out = buf;
    if (len != NULL) *len = size + 1;
close_file:
    fclose(f);
    return rc;
}

/* Read the TLS files of o (cert, key, and the CA when clients are
 * verified) into a, as libmicrohttpd takes them. SMP_OK, SMP_ENOTSUP
 * (libmicrohttpd without TLS) or read_pem's codes, with err saying why. */
static int read_tls_files(admin_http *a, const char *addr, const char *cert, const char *key,
                          const char *ca, char *err, size_t errlen)
{
    int rc;
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        snprintf(err, errlen, "admin http: tls.cert is set but this libmicrohttpd is built "
                 "without TLS (GnuTLS), so the admin endpoint on %s cannot speak HTTPS; install "
                 "Debian's libmicrohttpd (linked with GnuTLS) or set listen.admin: \"\"", addr);
        return SMP_ENOTSUP;
    }
    if ((rc = read_pem("tls.cert", cert, &a->cert_pem, NULL, err, errlen)) < 0 ||
        (rc = read_pem("tls.key", key, &a->key_pem, &a->key_len, err, errlen)) < 0)
        return rc;
    if (a->verify_clients && (rc = read_pem("tls.ca", ca, &a->ca_pem, NULL, err, errlen)) < 0)
        return rc;
    return SMP_OK;
}

/* Whether GnuTLS takes a's certificate, key and CA as libmicrohttpd will
 * (a reload checks before it lets the serving daemon go). SMP_OK, or
 * SMP_EINVAL with err naming the file and GnuTLS's cause. */
static int check_tls_files(const admin_http *a, const char *cert, const char *ca, char *err,
                           size_t errlen)
{
    gnutls_certificate_credentials_t cred;
    gnutls_datum_t c = {(unsigned char *)a->cert_pem, (unsigned)strlen(a->cert_pem)};
    gnutls_datum_t k = {(unsigned char *)a->key_pem, (unsigned)strlen(a->key_pem)};
    int rc = gnutls_certificate_allocate_credentials(&cred);
    if (rc < 0) {
        snprintf(err, errlen, "admin http: GnuTLS: %s", gnutls_strerror(rc));
        return SMP_ENOMEM;
    }
    if ((rc = gnutls_certificate_set_x509_key_mem2(cred, &c, &k, GNUTLS_X509_FMT_PEM, NULL, 0)) <
        0) {
        snprintf(err, errlen, "admin http: tls.cert %s with tls.key: %s", cert, gnutls_strerror(rc));
    } else if (a->ca_pem != NULL) {
        gnutls_datum_t t = {(unsigned char *)a->ca_pem, (unsigned)strlen(a->ca_pem)};
        rc = gnutls_certificate_set_x509_trust_mem(cred, &t, GNUTLS_X509_FMT_PEM);
        if (rc <= 0)
            snprintf(err, errlen, "admin http: tls.ca %s: %s", ca,
                     rc < 0 ? gnutls_strerror(rc) : "no certificate in it");
        rc = rc <= 0 ? -1 : 0;
    }
    gnutls_certificate_free_credentials(cred);
    return rc < 0 ? SMP_EINVAL : SMP_OK;
}

/* A new endpoint (not yet serving) for the loop, render and auth of o. */
static admin_http *admin_new(uv_loop_t *loop, const admin_http_options *o, int tls,
                             admin_render_fn render, void *ctx)
{
    admin_http *a = calloc(1, sizeof(*a));
    if (a == NULL) return NULL;
    a->loop = loop;
    a->render = render;
    a->ctx = ctx;
    a->auth = o->auth;
    a->verify_clients = tls && o->verify_clients;
    pthread_mutex_init(&a->lock, NULL);
    pthread_mutex_init(&a->log_lock, NULL);
    a->log = (log_limit){.burst = ADMIN_LOG_BURST, .window_ms = ADMIN_LOG_WINDOW_MS};
    return a;
}

/* Start a's daemon on sa, or on the listening socket fd (fd >= 0: the one
 * a reload took over), with a's TLS files when a holds them, and its loop
 * wake-up. SMP_OK, or SMP_EIO with err saying why (a's wake-up is then
 * not initialised). */
static int daemon_start(admin_http *a, const struct sockaddr_storage *sa, int fd, const char *addr,
                        char *err, size_t errlen)
{
    struct MHD_OptionItem ops[8];
    size_t n = 0;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    if (sa->ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    if (a->cert_pem != NULL) {
        flags |= MHD_USE_TLS;
        ops[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, a->cert_pem};
        ops[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, a->key_pem};
        ops[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0,
                                           (void *)ADMIN_TLS_PRIORITIES};
        if (a->ca_pem != NULL)
            ops[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, a->ca_pem};
    }
    if (fd >= 0) ops[n++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, fd, NULL};
    else ops[n++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, (void *)sa};
    ops[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    if (uv_async_init(a->loop, &a->wake, on_wake) != 0) {
        snprintf(err, errlen, "admin http: cannot create the loop wake-up");
        return SMP_EIO;
    }
    a->wake.data = a;
    a->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, a,
                              /* first, or libmicrohttpd logs the options before it itself */
                              MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, a,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, a,
                              MHD_OPTION_CONNECTION_LIMIT, 64u,
                              MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                              MHD_OPTION_ARRAY, ops,
                              MHD_OPTION_END);
    if (a->mhd == NULL) {
        if (a->cert_pem != NULL)
            snprintf(err, errlen, "admin http: cannot serve HTTPS on %s with tls.cert and "
                     "tls.key (the address is taken, or GnuTLS refused the files: "
                     "libmicrohttpd's line above says which)", addr);
        else
            snprintf(err, errlen, "admin http: cannot listen on %s", addr);
        /* The handle is closed later by the loop; the caller must not free a
         * before its close callback ran: it frees a. */
        return SMP_EIO;
    }
    return SMP_OK;
}

int admin_http_start(uv_loop_t *loop,
                     const admin_http_options *o,
                     admin_render_fn render,
                     void *ctx,
                     admin_http **out,
                     char *err,
                     size_t errlen)
{
    struct sockaddr_storage sa;
    int tls = o->tls_cert != NULL && o->tls_cert[0] != '\0';
    int rc;
    admin_http *a = NULL;
    if (net_parse_listen(o->addr, &sa) < 0) {
        snprintf(err, errlen, "admin http: '%s' is not host:port with a numeric address", o->addr);
        return SMP_EINVAL;
    }
    if ((rc = probe_bind(&sa)) < 0) {
        snprintf(err, errlen, "admin http: cannot listen on %s: %s", o->addr, strerror(-rc));
        return SMP_EIO;
    }
    if ((a = admin_new(loop, o, tls, render, ctx)) == NULL) return SMP_ENOMEM;
    a->sa = sa;
    if (tls && (rc = read_tls_files(a, o->addr, o->tls_cert, o->tls_key, o->tls_ca, err,
                                    errlen)) < 0) {
        admin_free(a);
        return rc;
    }
    if ((rc = daemon_start(a, &sa, -1, o->addr, err, errlen)) < 0) {
        admin_drop(a);
        return rc;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(a->mhd, MHD_DAEMON_INFO_BIND_PORT);
    a->port = info ? info->port
                   : ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                    : ((struct sockaddr_in *)&sa)->sin_port);
    snprintf(a->addr, sizeof(a->addr), "%s", o->addr);
    *out = a;
    return SMP_OK;
}

int admin_http_port(const admin_http *a)
{
    return a->port;
}

/* Stop a's daemon: no new connection, what is queued answered (503 once
 * stopping is set), its thread gone. Returns the listening socket, which
 * libmicrohttpd then leaves open (-1 when it had none to give). */
static int daemon_stop(admin_http *a)
{
    MHD_socket fd = MHD_quiesce_daemon(a->mhd);
    on_wake(&a->wake);
    a->stopping = 1;
    on_wake(&a->wake); /* what came meanwhile: 503 */
    MHD_stop_daemon(a->mhd);
    a->mhd = NULL;
    pthread_mutex_lock(&a->log_lock); /* its thread is gone: what it left out */
    say_left_out(log_limit_flush(&a->log));
    pthread_mutex_unlock(&a->log_lock);
    return fd == MHD_INVALID_SOCKET ? -1 : (int)fd;
}

void admin_http_stop(admin_http *a)
{
    if (a == NULL) return;
    a->stopping = 1; /* queued requests: 503 */
    int fd = daemon_stop(a);
    if (fd >= 0) close(fd);
    uv_close((uv_handle_t *)&a->wake, on_wake_closed);
}

int admin_http_reload_tls(admin_http **ap, const char *cert, const char *key, const char *ca,
                          char *err, size_t errlen)
{
    admin_http *old = *ap, *a;
    admin_http_options o = {.auth = old->auth, .verify_clients = old->verify_clients};
    int rc;
    if (old->cert_pem == NULL) {
        snprintf(err, errlen, "admin http: the endpoint on %s is plain HTTP", old->addr);
        return SMP_EINVAL;
    }
    if ((a = admin_new(old->loop, &o, 1, old->render, old->ctx)) == NULL) return SMP_ENOMEM;
    a->sa = old->sa;
    a->port = old->port;
    snprintf(a->addr, sizeof(a->addr), "%s", old->addr);
    if ((rc = read_tls_files(a, a->addr, cert, key, ca, err, errlen)) < 0 ||
        (rc = check_tls_files(a, cert, ca, err, errlen)) < 0) {
        admin_free(a);
        return rc;
    }
    /* The serving daemon stops accepting and hands its socket over: the
     * port is never closed, and what old still holds is answered. */
    MHD_socket fd = MHD_quiesce_daemon(old->mhd);
    if (fd == MHD_INVALID_SOCKET) {
        snprintf(err, errlen, "admin http: libmicrohttpd would not hand over the socket of %s",
                 a->addr);
        admin_free(a);
        return SMP_EIO;
    }
    if ((rc = daemon_start(a, &a->sa, (int)fd, a->addr, err, errlen)) < 0) {
        /* Not expected once GnuTLS took the files (no memory, no thread):
         * the endpoint is gone, which the caller says. */
        admin_drop(a);
        a = NULL;
        close(fd);
    }
    daemon_stop(old); /* already quiesced: its socket is a's now */
    if (a != NULL)
        for (int k = 0; k < ADMIN_REFUSAL_KINDS; k++) /* the counters go on */
            atomic_fetch_add(&a->refused[k], atomic_load(&old->refused[k]));
    uv_close((uv_handle_t *)&old->wake, on_wake_closed);
    *ap = a;
    return rc;
}
