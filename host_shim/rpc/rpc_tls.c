/* rpc_tls.c -- see rpc_tls.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "rpc_tls.h"
#include "wm_errbuf.h"

void rpc_tls_error(char *err, size_t errlen)
{
    unsigned long e = ERR_get_error();
    char buf[256] = "";
    if (e != 0)
        ERR_error_string_n(e, buf, sizeof(buf));
    ERR_clear_error();
    wm_errbuf(err, errlen, "%s", buf);
}

/* A readable regular file, or SMP_EINVAL with what is wrong with it. */
static int check_file(const char *kp, const char *what, const char *path, char *err,
                      size_t errlen)
{
    struct stat st;
    if (path == NULL || path[0] == '\0') {
        wm_errbuf(err, errlen, "%s%s: no file given", kp, what);
        return SMP_EINVAL;
    }
    if (stat(path, &st) != 0) {
        wm_errbuf(err, errlen, "%s%s: %s: %s", kp, what, path, strerror(errno));
        return SMP_EINVAL;
    }
    if (!S_ISREG(st.st_mode)) {
        wm_errbuf(err, errlen, "%s%s: %s is not a regular file", kp, what, path);
        return SMP_EINVAL;
    }
    return SMP_OK;
}

int rpc_tls_server_ctx(const rpc_tls_config *cfg, SSL_CTX **out, char *err, size_t errlen)
{
    char why[256];
    SSL_CTX *ctx = NULL;
    int rc = SMP_EINVAL;
    int have_ca = cfg->ca != NULL && cfg->ca[0] != '\0';
    const char *kp = cfg->key_prefix != NULL ? cfg->key_prefix : "tls.";

    *out = NULL;
    ERR_clear_error();
    if (check_file(kp, "cert", cfg->cert, err, errlen) < 0 ||
        check_file(kp, "key", cfg->key, err, errlen) < 0 ||
        (have_ca && check_file(kp, "ca", cfg->ca, err, errlen) < 0))
        return SMP_EINVAL;
    if (cfg->verify_clients && !have_ca) {
        wm_errbuf(err, errlen, "%sverify_clients needs %sca", kp, kp);
        return SMP_EINVAL;
    }
    if ((ctx = SSL_CTX_new(TLS_server_method())) == NULL) {
        rpc_tls_error(why, sizeof(why));
        wm_errbuf(err, errlen, "tls: cannot create a context: %s", why);
        return SMP_EIO;
    }
    if (SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1) {
        wm_errbuf(err, errlen, "tls: this OpenSSL cannot require TLS 1.3");
        rc = SMP_EIO;
        goto fail;
    }
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg->cert) != 1) {
        rpc_tls_error(why, sizeof(why));
        wm_errbuf(err, errlen, "%scert: %s is not a PEM certificate: %s", kp, cfg->cert, why);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, cfg->key, SSL_FILETYPE_PEM) != 1) {
        rpc_tls_error(why, sizeof(why));
        if (strstr(why, "mismatch") != NULL) /* OpenSSL checks the pair here already */
            wm_errbuf(err, errlen, "%skey: %s does not match the certificate of %scert %s: %s",
                      kp, cfg->key, kp, cfg->cert, why);
        else
            wm_errbuf(err, errlen, "%skey: %s is not a PEM private key: %s", kp, cfg->key, why);
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        rpc_tls_error(why, sizeof(why));
        wm_errbuf(err, errlen, "%skey: %s does not match the certificate of %scert %s: %s",
                  kp, cfg->key, kp, cfg->cert, why);
        goto fail;
    }
    if (have_ca) {
        STACK_OF(X509_NAME) *names;
        if (SSL_CTX_load_verify_locations(ctx, cfg->ca, NULL) != 1) {
            rpc_tls_error(why, sizeof(why));
            wm_errbuf(err, errlen, "%sca: %s is not a PEM CA bundle: %s", kp, cfg->ca, why);
            goto fail;
        }
        if ((names = SSL_load_client_CA_file(cfg->ca)) != NULL)
            SSL_CTX_set_client_CA_list(ctx, names);
    }
    if (cfg->verify_clients)
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    /* No session tickets sent after the handshake: a client that only
     * sends and reads frames never needs them, and they cost a write. */
    SSL_CTX_set_num_tickets(ctx, 0);
    *out = ctx;
    return SMP_OK;
fail:
    SSL_CTX_free(ctx);
    return rc;
}

void rpc_tls_describe(SSL_CTX *ctx, char *out, size_t cap)
{
    X509 *x = ctx != NULL ? SSL_CTX_get0_certificate(ctx) : NULL;
    char subject[256] = "?", serial[80] = "?", until[64] = "?";
    BIO *b = NULL;
    if (x == NULL) {
        wm_errbuf(out, cap, "no certificate");
        return;
    }
    X509_NAME_oneline(X509_get_subject_name(x), subject, sizeof(subject));
    BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
    char *hex = bn != NULL ? BN_bn2hex(bn) : NULL;
    if (hex != NULL) snprintf(serial, sizeof(serial), "%s", hex);
    OPENSSL_free(hex);
    BN_free(bn);
    if ((b = BIO_new(BIO_s_mem())) != NULL && ASN1_TIME_print(b, X509_get0_notAfter(x)) == 1) {
        int n = BIO_read(b, until, (int)sizeof(until) - 1);
        until[n > 0 ? n : 0] = '\0';
    }
    BIO_free(b);
    ERR_clear_error();
    wm_errbuf(out, cap, "subject %s, serial %s, valid until %s", subject, serial, until);
}

int rpc_tls_not_after(SSL_CTX *ctx, const char *pem, int64_t *out)
{
    X509 *owned = NULL, *x = ctx != NULL ? SSL_CTX_get0_certificate(ctx) : NULL;
    struct tm tm;
    int rc = -1;
    if (x == NULL && pem != NULL) {
        BIO *b = BIO_new_mem_buf(pem, -1);
        x = owned = b != NULL ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
        BIO_free(b);
    }
    if (x != NULL && ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) == 1) {
        *out = (int64_t)timegm(&tm);
        rc = 0;
    }
    X509_free(owned);
    ERR_clear_error();
    return rc;
}

int rpc_tls_swap_ctx(SSL_CTX **slot, SSL_CTX *ctx)
{
    if (*slot == NULL || ctx == NULL || SSL_CTX_up_ref(ctx) != 1) return SMP_EINVAL;
    SSL_CTX_free(*slot);
    *slot = ctx;
    return SMP_OK;
}

int rpc_tls_session_init(rpc_tls_session *t, SSL_CTX *ctx)
{
    memset(t, 0, sizeof(*t));
    if ((t->ssl = SSL_new(ctx)) == NULL)
        return SMP_ENOMEM;
    t->rbio = BIO_new(BIO_s_mem());
    t->wbio = BIO_new(BIO_s_mem());
    if (t->rbio == NULL || t->wbio == NULL) {
        BIO_free(t->rbio);
        BIO_free(t->wbio);
        SSL_free(t->ssl);
        memset(t, 0, sizeof(*t));
        return SMP_ENOMEM;
    }
    BIO_set_mem_eof_return(t->rbio, -1); /* empty means "wait", not end of stream */
    SSL_set_bio(t->ssl, t->rbio, t->wbio); /* the SSL owns both from here */
    SSL_set_accept_state(t->ssl);
    return SMP_OK;
}

void rpc_tls_session_free(rpc_tls_session *t)
{
    if (t->ssl != NULL)
        SSL_free(t->ssl);
    memset(t, 0, sizeof(*t));
}
