/* wc_tls.h -- the client side of TLS 1.3, shared by the control RPC transport
 * (rpc_client.c) and the node data client (node_data_client.c).
 *
 * A client context trusts one CA bundle (and may carry a client certificate);
 * a handshake on a connected socket checks that the peer's certificate
 * chains to that CA and names the endpoint's host (DNS name or IP address).
 * Failures name the file or the peer and the cause. */
#ifndef WC_TLS_H
#define WC_TLS_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

/* The read buffer of a client session (bytes): with read-ahead, what one
 * recv may bring in. */
#define WC_TLS_READ_BUFFER (128u << 10)

/* A TLS 1.3 client context trusting ca, with the client certificate cert /
 * key when given. When ca is NULL or "", the environment's WM_TLS_CA /
 * WM_TLS_CERT / WM_TLS_KEY are used instead; when neither names a CA, *out
 * stays NULL and SMP_OK is returned (no TLS asked for). SMP_EINVAL names the
 * file and the cause (a certificate without its key, a CA that is not PEM);
 * SMP_EIO when OpenSSL cannot make a context. Free with SSL_CTX_free. */
int wc_tls_client_ctx(const char *ca,
                      const char *cert,
                      const char *key,
                      SSL_CTX **out,
                      char *err,
                      size_t errlen);

/* A BIO over the connected socket fd, as OpenSSL's socket BIO but sending
 * with MSG_NOSIGNAL: a peer that closed is an error (EPIPE), never a
 * SIGPIPE. It never closes fd. NULL when out of memory. Every client
 * session (wc_tls_connect) runs over one. */
BIO *wc_tls_socket_bio(int fd);

/* Handshake on the connected socket fd with the peer at endpoint
 * "host:port" / "[v6]:port" (its certificate must chain to ctx's CA and
 * name host), by deadline (CLOCK_MONOTONIC ms; -1: none). peer names the
 * other side in messages ("master", "node"). *out is the session, bound to
 * fd through wc_tls_socket_bio (its writes never raise SIGPIPE), with a
 * read buffer of WC_TLS_READ_BUFFER. SMP_EPROTO
 * (refused: not trusted, wrong name, not a TLS port, a client certificate
 * wanted), SMP_EAGAIN (timed out), SMP_EIO, SMP_ENOMEM, with the
 * cause in err; on failure nothing is left open but fd. */
int wc_tls_connect(SSL_CTX *ctx,
                   int fd,
                   const char *endpoint,
                   int64_t deadline,
                   const char *peer,
                   SSL **out,
                   char *err,
                   size_t errlen);

/* wc_tls_connect, the peer's certificate checked against name (a DNS name
 * or an IP address, also sent as SNI when a DNS name) instead of the host
 * of endpoint; name NULL or "": exactly wc_tls_connect. A name mismatch is
 * SMP_EPROTO, err naming the name. */
int wc_tls_connect_as(SSL_CTX *ctx,
                      int fd,
                      const char *endpoint,
                      const char *name,
                      int64_t deadline,
                      const char *peer,
                      SSL **out,
                      char *err,
                      size_t errlen);

/* A new reference (SSL_CTX_free it) to a process-wide client context built
 * from WM_TLS_CA / WM_TLS_CERT / WM_TLS_KEY as they are now (rebuilt when
 * they changed since), or *out NULL when WM_TLS_CA is not set. Errors as
 * wc_tls_client_ctx. Thread-safe. */
int wc_tls_env_ctx(SSL_CTX **out, char *err, size_t errlen);

/* Wait until fd is ready for events or deadline (CLOCK_MONOTONIC ms; -1:
 * none) passes. 1 when ready, 0 on timeout, a negative errno on a poll
 * failure. Shared with the RPC transport. */
int wc_wait_fd(int fd, short events, int64_t deadline);

/* The last OpenSSL error as a short text into out ("" when none); the
 * queue is cleared. */
void wc_tls_why(char *out, size_t cap);

#endif /* WC_TLS_H */
