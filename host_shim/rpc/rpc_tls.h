/* rpc_tls.h -- TLS for the master's RPC server: the server context, and one
 * session per connection driven through memory BIOs (libuv owns the socket;
 * ciphertext goes between libuv's buffers and the session, plaintext
 * between the session and the frame parser).
 *
 * The context is TLS 1.3 only (TLS1_3_VERSION minimum), with the
 * certificate chain and private key of the configured files, the key
 * checked against the certificate, and -- when clients are verified -- the
 * CA bundle the client certificates must chain to (a client without one is
 * refused in the handshake). Creating it names the file and the cause of
 * any failure (missing, unreadable, not PEM, key not matching).
 *
 * A session starts by looking at the first byte a client sends: a TLS
 * handshake record begins with 0x16; anything else is a plaintext client,
 * which the server answers in plaintext with one refusal frame (so it
 * learns why) before closing. */
#ifndef HOST_RPC_TLS_H
#define HOST_RPC_TLS_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

#include "store_plugin.h"

typedef struct rpc_tls_config {
    const char *cert;         /* PEM certificate chain */
    const char *key;          /* PEM private key */
    const char *ca;           /* PEM CA bundle for client certificates; NULL or "": none */
    int verify_clients;       /* clients must present a certificate of ca */
    const char *key_prefix;   /* how errors name the settings: "tls." (NULL) makes
                                 "tls.cert"; a node's data port uses "--data-tls-" */
} rpc_tls_config;

/* A server context for cfg, or SMP_EINVAL / SMP_EIO with err naming the
 * setting, the file and the cause. Free with SSL_CTX_free. Shared by the
 * master's RPC port and the node's data port (node_data.h). */
int rpc_tls_server_ctx(const rpc_tls_config *cfg, SSL_CTX **out, char *err, size_t errlen);

/* What ctx serves, for a log line: "subject S, serial N, valid until D"
 * of its certificate ("no certificate" without one). */
void rpc_tls_describe(SSL_CTX *ctx, char *out, size_t cap);

/* The notAfter of the certificate ctx serves, or of the first certificate
 * in the PEM text pem (either may be NULL), as Unix seconds into *out.
 * 0, or -1 (no certificate, or no date OpenSSL can read). */
int rpc_tls_not_after(SSL_CTX *ctx, const char *pem, int64_t *out);

/* A reload's swap of a server's context: *slot (the context served, never
 * NULL: TLS stays on) becomes a reference of ctx, the old reference given
 * up (sessions hold their own). SMP_EINVAL when *slot or ctx is NULL. */
int rpc_tls_swap_ctx(SSL_CTX **slot, SSL_CTX *ctx);

/* One connection's session. */
typedef struct rpc_tls_session {
    SSL *ssl;
    BIO *rbio;                /* ciphertext in (written by us, read by SSL) */
    BIO *wbio;                /* ciphertext out (written by SSL, drained by us) */
    int checked_first;        /* the first byte was looked at */
    int established;          /* the handshake is done */
} rpc_tls_session;

/* Start a server-side session on ctx. SMP_OK or SMP_ENOMEM. */
int rpc_tls_session_init(rpc_tls_session *t, SSL_CTX *ctx);

/* Free the session (NULL members are fine). */
void rpc_tls_session_free(rpc_tls_session *t);

/* The last OpenSSL error as a short sentence into err ("" when none), and
 * the error queue cleared. */
void rpc_tls_error(char *err, size_t errlen);

#endif /* HOST_RPC_TLS_H */
