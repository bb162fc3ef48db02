/* config_node_tls.c -- whether the embedded node will trust the master's
 * certificate (config.h, host_config_node_dial, host_config_node_trust).
 *
 * Without listen.unix the embedded node reaches its master over TCP: it
 * dials host_config_node_dial's endpoint and, with tls.cert, verifies the
 * master's certificate as every TLS client of the master does
 * (client/wc_tls.c): the chain against tls.ca (or, without it, against
 * tls.cert itself), now between notBefore and notAfter, the address it
 * dialed named by the certificate (an IP in its subjectAltName, or a DNS
 * name for a host name), for a TLS server. With tls.verify_clients it
 * presents the master's certificate in turn, which the master verifies
 * against tls.ca for a TLS client. A certificate that fails any of these
 * is a master that serves while its node is refused forever ("node NAME
 * down"), so host_config_load_files -- `store_master --check` and the start
 * alike -- refuses it here, before anything serves. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include "config.h"

void host_config_node_dial(const host_config *cfg, int port, char *out, size_t cap)
{
    const char *colon = strrchr(cfg->listen_tcp, ':');
    int hl = colon != NULL ? (int)(colon - cfg->listen_tcp) : 0;
    snprintf(out, cap, "%.*s:%d", hl > 0 ? hl : 9, hl > 0 ? cfg->listen_tcp : "127.0.0.1", port);
}

/* The host part of host_config_node_dial's endpoint, brackets of an IPv6
 * address taken off (what wc_tls_connect_as matches the certificate to). */
static void dial_host(const host_config *cfg, char *host, size_t cap)
{
    char ep[300];
    host_config_node_dial(cfg, 0, ep, sizeof(ep));
    char *colon = strrchr(ep, ':');
    if (colon != NULL) *colon = '\0';
    size_t n = strlen(ep);
    if (ep[0] == '[' && n >= 2 && ep[n - 1] == ']') {
        ep[n - 1] = '\0';
        snprintf(host, cap, "%s", ep + 1);
    } else {
        snprintf(host, cap, "%s", ep);
    }
}

/* The certificates of a PEM file: the first into *leaf, the others (the
 * chain the TLS port sends with it, SSL_CTX_use_certificate_chain_file)
 * into *chain. 0, or -1 when it holds none (*leaf NULL). */
static int read_chain(const char *path, X509 **leaf, STACK_OF(X509) **chain)
{
    BIO *b = BIO_new_file(path, "r");
    X509 *x;
    *leaf = NULL;
    *chain = sk_X509_new_null();
    if (b == NULL || *chain == NULL) goto fail;
    if ((*leaf = PEM_read_bio_X509(b, NULL, NULL, NULL)) == NULL) goto fail;
    while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL)
        if (!sk_X509_push(*chain, x)) {
            X509_free(x);
            goto fail;
        }
    BIO_free(b);
    return 0;
fail:
    BIO_free(b);
    X509_free(*leaf);
    *leaf = NULL;
    sk_X509_pop_free(*chain, X509_free);
    *chain = NULL;
    return -1;
}

/* asn1 time as text ("Jan  1 00:00:00 2020 GMT") into out. */
static void time_text(const ASN1_TIME *t, char *out, size_t cap)
{
    BIO *b = BIO_new(BIO_s_mem());
    int n = 0;
    out[0] = '\0';
    if (b != NULL && t != NULL && ASN1_TIME_print(b, t)) n = BIO_read(b, out, (int)cap - 1);
    out[n > 0 ? n : 0] = '\0';
    BIO_free(b);
}

/* Verify leaf (with chain) against the certificates of anchors for purpose
 * ("ssl_server": as the node verifies the master; "ssl_client": as the
 * master verifies the node's certificate), matching host when not NULL, at
 * the security level of a default TLS client. X509_V_OK, an X509_V_ERR_*
 * code, or -1 when the check itself could not run (out of memory, anchors
 * unreadable: the TLS context read them first and said so). */
static long verify_as(X509 *leaf, STACK_OF(X509) *chain, const char *anchors,
                      const char *purpose, const char *host)
{
    X509_STORE *store = X509_STORE_new();
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    SSL_CTX *client = SSL_CTX_new(TLS_client_method());
    struct in6_addr a6;
    struct in_addr a4;
    long rc = -1;
    if (store == NULL || ctx == NULL || client == NULL) goto cleanup;
    if (X509_STORE_load_locations(store, anchors, NULL) != 1) goto cleanup;
    if (X509_STORE_CTX_init(ctx, store, leaf, chain) != 1) goto cleanup;
    if (X509_STORE_CTX_set_default(ctx, purpose) != 1) goto cleanup;
    X509_VERIFY_PARAM *p = X509_STORE_CTX_get0_param(ctx);
    X509_VERIFY_PARAM_set_auth_level(p, SSL_CTX_get_security_level(client));
    if (host != NULL) {
        int ok = inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1
                     ? X509_VERIFY_PARAM_set1_ip_asc(p, host)
                     : X509_VERIFY_PARAM_set1_host(p, host, 0);
        if (ok != 1) goto cleanup;
    }
    rc = X509_verify_cert(ctx) == 1 ? X509_V_OK : X509_STORE_CTX_get_error(ctx);
cleanup:
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(store);
    SSL_CTX_free(client);
    ERR_clear_error();
    return rc;
}

/* why = the cause of code for leaf, in words: the dates for a time error,
 * the address for a name error, use ("TLS server") for a purpose error,
 * the verifier's string otherwise. */
static void describe(long code, X509 *leaf, const char *host, const char *use, char *why,
                     size_t cap)
{
    char when[64];
    switch (code) {
    case X509_V_ERR_CERT_HAS_EXPIRED:
        time_text(X509_get0_notAfter(leaf), when, sizeof(when));
        snprintf(why, cap, "certificate has expired (notAfter %s)", when);
        break;
    case X509_V_ERR_CERT_NOT_YET_VALID:
        time_text(X509_get0_notBefore(leaf), when, sizeof(when));
        snprintf(why, cap, "certificate is not yet valid (notBefore %s)", when);
        break;
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
    case X509_V_ERR_HOSTNAME_MISMATCH:
        snprintf(why, cap, "it does not name %s, listen.tcp's host (its subjectAltName needs "
                 "%s:%s, or set listen.unix: the node then registers through it)", host,
                 code == X509_V_ERR_IP_ADDRESS_MISMATCH ? "IP" : "DNS", host);
        break;
    case X509_V_ERR_INVALID_PURPOSE:
        snprintf(why, cap, "its extendedKeyUsage does not allow a %s (unsuitable certificate "
                 "purpose)", use);
        break;
    default:
        snprintf(why, cap, "%s", X509_verify_cert_error_string(code));
        break;
    }
}

int host_config_node_trust(const host_config *cfg, char *why, size_t cap)
{
    const char *anchors = cfg->tls_ca[0] != '\0' ? cfg->tls_ca : cfg->tls_cert;
    char host[300], cause[1024];
    X509 *leaf = NULL;
    STACK_OF(X509) *chain = NULL;
    long code;
    int rc = SMP_OK;
    why[0] = '\0';
    if (read_chain(cfg->tls_cert, &leaf, &chain) < 0) {
        /* the TLS context read it already: out of memory */
        snprintf(why, cap, "tls.cert: cannot read %s again to check whether the embedded node "
                 "would trust it", cfg->tls_cert);
        return SMP_EIO;
    }
    dial_host(cfg, host, sizeof(host));
    code = verify_as(leaf, chain, anchors, "ssl_server", host);
    if (code < 0) {
        snprintf(why, cap, "tls.cert: cannot check whether the embedded node would trust %s "
                 "(out of memory, or %s unreadable)", cfg->tls_cert, anchors);
        rc = SMP_EIO;
        goto cleanup;
    }
    if (code > 0) {
        describe(code, leaf, host, "TLS server", cause, sizeof(cause));
        if (cfg->tls_ca[0] != '\0')
            snprintf(why, cap, "tls.cert: the embedded node would not trust %s: %s; it dials "
                     "this master at %s over TLS and verifies the certificate against tls.ca "
                     "%s", cfg->tls_cert, cause, host, anchors);
        else
            snprintf(why, cap, "tls.cert: the embedded node would not trust %s: %s; it dials "
                     "this master at %s over TLS and trusts tls.cert alone (tls.ca is not set)",
                     cfg->tls_cert, cause, host);
        rc = SMP_EINVAL;
        goto cleanup;
    }
    /* With verify_clients the node presents this certificate, which the
     * master verifies against tls.ca (rpc_tls_server_ctx) for a client. */
    if (cfg->tls_verify_clients && cfg->tls_ca[0] != '\0') {
        code = verify_as(leaf, chain, cfg->tls_ca, "ssl_client", NULL);
        if (code < 0) {
            snprintf(why, cap, "tls.cert: cannot check whether this master would accept %s from "
                     "the embedded node (out of memory, or %s unreadable)", cfg->tls_cert,
                     cfg->tls_ca);
            rc = SMP_EIO;
        } else if (code > 0) {
            describe(code, leaf, host, "TLS client", cause, sizeof(cause));
            snprintf(why, cap, "tls.cert: with tls.verify_clients the embedded node presents %s "
                     "to this master, which would refuse it: %s (verified against tls.ca %s for "
                     "a TLS client)", cfg->tls_cert, cause, cfg->tls_ca);
            rc = SMP_EINVAL;
        }
    }
cleanup:
    X509_free(leaf);
    sk_X509_pop_free(chain, X509_free);
    return rc;
}
