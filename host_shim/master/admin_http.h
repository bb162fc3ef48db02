/* admin_http.h -- the master's admin HTTP endpoint (/metrics, /health, /role).
 *
 * libmicrohttpd accepts and parses requests on its own thread; every answer is
 * produced on the master's loop thread, which owns the state it describes. A
 * request is suspended, handed to the loop through a uv_async_t, answered by
 * the render callback there, and resumed. Only GET and HEAD are served: the
 * endpoint changes nothing (changes are admin RPCs, authorized by role), and
 * any other method is answered 405.
 *
 * With a certificate the endpoint speaks HTTPS only, TLS 1.3 at least
 * (libmicrohttpd's GnuTLS, priorities "NORMAL:-VERS-ALL:+VERS-TLS1.3"),
 * optionally verifying client certificates against a CA. With a credential
 * table every path but /health needs an admin's token (Authorization: Bearer
 * TOKEN), looked up with rpc_auth_check on the loop thread. */
#ifndef HOST_ADMIN_HTTP_H
#define HOST_ADMIN_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "rpc_auth.h"

typedef struct admin_http admin_http;

/* Produce the answer to GET `path` on the loop thread: set *status (HTTP),
 * *body (malloc'd, taken over by the caller) and *len, and *content_type
 * (static string). */
typedef void (*admin_render_fn)(void *ctx,
                                const char *path,
                                int *status,
                                char **body,
                                size_t *len,
                                const char **content_type);

typedef struct admin_http_options {
    const char *addr;         /* "host:port" (IPv4 literal or "localhost") */
    const char *tls_cert;     /* PEM certificate chain; NULL or "": plain HTTP */
    const char *tls_key;      /* its PEM private key (with tls_cert) */
    const char *tls_ca;       /* PEM CA bundle client certificates must chain to */
    int verify_clients;       /* a client without a certificate of tls_ca gets 403 */
    const rpc_auth *auth;     /* non-NULL: every path but /health needs an admin
                                 token of this table (borrowed; must outlive the
                                 endpoint). NULL: no token asked */
} admin_http_options;

/* Listen as o says. Returns 0, or a negative SMP_E* code with err naming the
 * address or the setting and the cause (SMP_ENOTSUP: a certificate was
 * given but libmicrohttpd is built without TLS). The files were checked by
 * the RPC's TLS context first (rpc_tls.h), so a file error here is one
 * GnuTLS alone refuses. */
int admin_http_start(uv_loop_t *loop,
                     const admin_http_options *o,
                     admin_render_fn render,
                     void *ctx,
                     admin_http **out,
                     char *err,
                     size_t errlen);

/* Why a request was refused, for store_admin_http_refusals_total{reason}. */
typedef enum admin_refusal {
    ADMIN_REFUSED_METHOD = 0,        /* "method": not GET or HEAD (405) */
    ADMIN_REFUSED_CLIENT_CERT,       /* "client_cert": none, or not of the CA (403) */
    ADMIN_REFUSED_UNAUTHENTICATED,   /* "unauthenticated": no, malformed or unknown token (401) */
    ADMIN_REFUSED_FORBIDDEN,         /* "forbidden": a token below admin (403) */
    ADMIN_REFUSAL_KINDS
} admin_refusal;

/* The label of a refusal kind ("method", "client_cert", ...). */
const char *admin_refusal_name(admin_refusal k);

/* The requests refused so far, by kind, into out (any thread; each count
 * read on its own). */
void admin_http_refusals(const admin_http *a, uint64_t out[ADMIN_REFUSAL_KINDS]);

/* The port actually bound (useful with port 0). */
int admin_http_port(const admin_http *a);

/* Serve the certificate and key of the files cert and key (and, when the
 * endpoint verifies clients, the CA of ca) from the next connection on: a
 * new daemon, the files checked by GnuTLS first, takes over the listening
 * socket of *a (never closed meanwhile), and the old one answers what it
 * holds and stops; *a is the new endpoint, its refusal counts carried
 * over. Files that do not load leave *a serving, with err naming the file
 * and the cause: SMP_EINVAL (also for a plain-HTTP endpoint), SMP_EIO,
 * SMP_ENOMEM. Should the new daemon not start once the socket was handed
 * over (no memory, no thread: GnuTLS took the files), the old one stops
 * all the same and *a is NULL: the endpoint is gone. Loop thread only.
 * Connections to the old daemon are answered what it holds, then closed. */
int admin_http_reload_tls(admin_http **a, const char *cert, const char *key, const char *ca,
                          char *err, size_t errlen);

/* Stop accepting, answer queued requests with 503, stop the server thread and
 * free. Must run on the loop thread; the uv handle is closed asynchronously,
 * so the loop must run once more before it is closed. NULL is a no-op. */
void admin_http_stop(admin_http *a);

#endif /* HOST_ADMIN_HTTP_H */
