/* admin_https.h -- an HTTPS client of a master's admin endpoint, for tests.
 *
 * OpenSSL, one HTTP/1.0 request per connection (the server closes after its
 * answer), the server's certificate verified against the caller's CA for
 * the IP address 127.0.0.1. What a test varies is an option: its own client
 * certificate, the highest TLS version it speaks, an Authorization header,
 * the method and a body. The harness's hx_http_get uses it for a master
 * whose admin endpoint speaks TLS (hx_master.admin_ca). hx_tls_peer makes
 * only the handshake, with any TLS port of 127.0.0.1 (the RPC port, a data
 * port), for the certificate the server presents. */
#ifndef TEST_ADMIN_HTTPS_H
#define TEST_ADMIN_HTTPS_H

typedef struct hx_https_opts {
    const char *ca;           /* PEM CA the client trusts; NULL: none (the handshake fails) */
    const char *cert, *key;   /* the client's certificate and key; NULL: none */
    int max_version;          /* highest TLS version it speaks (TLS1_2_VERSION ...); 0: any */
    const char *authz;        /* an Authorization header's value; NULL: none */
} hx_https_opts;

/* What came back. */
typedef struct hx_reply {
    int status;               /* HTTP status; -1: no HTTP answer (err says why) */
    int version;              /* the negotiated TLS version (0: no handshake) */
    char *head;               /* status line and headers (malloc'd) */
    char *body;               /* (malloc'd) */
    char err[512];
} hx_reply;

/* method path (body: NULL for none) to 127.0.0.1:port over HTTPS with o.
 * Never fails the test itself: look at status and err. */
hx_reply hx_https(int port, const hx_https_opts *o, const char *method, const char *path,
                  const char *body);

/* A TLS handshake with 127.0.0.1:port as o says (its CA verifying the
 * server for the IP 127.0.0.1), then close: 0 with out the SHA-256 of the
 * certificate the server presented (64 hex digits), or -1 with err saying
 * why. */
int hx_tls_peer(int port, const hx_https_opts *o, char out[65], char *err, size_t errlen);

/* The SHA-256 of the (first) certificate in the PEM file at path, as
 * hx_tls_peer gives it: 0, or -1 when the file holds none. */
int hx_pem_sha256(const char *path, char out[65]);

/* The notAfter of the (first) certificate in the PEM file at path, in Unix
 * seconds, or -1. */
long long hx_pem_not_after(const char *path);

/* Free what r holds (and zero it). */
void hx_reply_free(hx_reply *r);

#endif /* TEST_ADMIN_HTTPS_H */
