/* admin_https.h -- an HTTPS client of a master's admin endpoint, for tests.
 *
 * OpenSSL, one HTTP/1.0 request per connection (the server closes after its
 * answer), the server's certificate verified against the caller's CA for
 * the IP address 127.0.0.1. What a test varies is an option: its own client
 * certificate, the highest TLS version it speaks, an Authorization header,
 * the method and a body. The harness's hx_http_get uses it for a master
 * whose admin endpoint speaks TLS (hx_master.admin_ca). */
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

/* Free what r holds (and zero it). */
void hx_reply_free(hx_reply *r);

#endif /* TEST_ADMIN_HTTPS_H */
