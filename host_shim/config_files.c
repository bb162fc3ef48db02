/* config_files.c -- the files a loaded config names, read and checked the
 * way the master's start needs them (config.h, host_config_load_files).
 *
 * host_config_load() checks the text of the file; the files it names are
 * read here, once, by `store_master --check` and by the start alike, so
 * that a config --check accepts is not refused by the start for a file:
 *
 *  - tls.cert, tls.key, tls.ca: loaded into the RPC port's TLS context
 *    (rpc_tls_server_ctx: present, regular, PEM, the key matching the
 *    certificate, the CA a bundle), which the start then serves with;
 *  - the embedded node's trust: without listen.unix the node dials the TLS
 *    port and must trust tls.cert as it will (config_node_tls.c: the chain,
 *    the dates, the address it dials); without tls.ca it trusts tls.cert
 *    alone, which verifies only a self-signed certificate;
 *  - ha.etcd_tls_ca, ha.etcd_tls_cert, ha.etcd_tls_key: loaded into a TLS
 *    client context as a check (the CA a bundle, the key matching the
 *    certificate: wc_tls_client_ctx), then read as text, which the etcd
 *    client hands to gRPC;
 *  - ha.etcd_password_file: the password of ha.etcd_user, read as a token
 *    file is (wc_token_read_file: the trailing newline dropped, not empty);
 *  - auth.node_token_file: read (wc_token_read_file), and its token must be
 *    one of auth.tokens with role admin, since the embedded node registers
 *    with it (nodes.register needs admin): anything else would be a master
 *    that says it serves while its node is refused forever.
 *
 * Every message is "FILE:LINE: key: cause", LINE the line of the value that
 * names the file (left out when the file did not set it), as the loader's. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "config.h"
#include "config_internal.h"
#include "rpc_tls.h"
#include "wc_tls.h"
#include "wc_token.h"

/* err = "SOURCE:LINE: " + the formatted rest (":LINE" left out when 0). */
static void files_fail(const host_config *cfg, int line, char *err, size_t errlen,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void files_fail(const host_config *cfg, int line, char *err, size_t errlen,
                       const char *fmt, ...)
{
    char msg[1024];
    char where[32] = "";
    va_list ap;
    if (err == NULL || errlen == 0) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (line > 0) snprintf(where, sizeof(where), ":%d", line);
    snprintf(err, errlen, "%s%s: %s", cfg->source != NULL ? cfg->source : "<config>", where, msg);
}

/* The line of the tls.* key a message of rpc_tls_server_ctx starts with
 * ("tls.key: ..."): the key it is about. Others go on tls.cert's line. */
static int tls_message_line(const host_config *cfg, const char *msg)
{
    if (strncmp(msg, "tls.key:", 8) == 0) return cfg->tls_key_line;
    if (strncmp(msg, "tls.ca:", 7) == 0) return cfg->tls_ca_line;
    return cfg->tls_cert_line;
}

/* Without tls.ca the embedded node, dialing this master's TLS port, trusts
 * tls.cert itself: that verifies only a self-signed certificate. SMP_OK
 * when cert's first certificate is self-issued, else SMP_EINVAL with err
 * naming the issuer and the key to set (rather than a node that never
 * registers). The file parsed as a certificate already (the TLS context). */
static int own_cert_is_anchor(const host_config *cfg, char *err, size_t errlen)
{
    FILE *f = fopen(cfg->tls_cert, "r");
    X509 *x = f != NULL ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
    int rc = SMP_OK;
    if (f != NULL) fclose(f);
    if (x == NULL) return SMP_OK; /* unreadable: the TLS context said so first */
    if (X509_check_issued(x, x) != X509_V_OK) {
        char issuer[256];
        X509_NAME_oneline(X509_get_issuer_name(x), issuer, sizeof(issuer));
        files_fail(cfg, cfg->tls_cert_line, err, errlen,
                   "tls.cert: tls.ca is not set, so the embedded node (which reaches this "
                   "master over TCP: listen.unix is off) would trust tls.cert %s alone, but it "
                   "is issued by %s, not self-signed: set tls.ca to the CA that signed it",
                   cfg->tls_cert, issuer);
        rc = SMP_EINVAL;
    }
    X509_free(x);
    return rc;
}

/* The embedded node's token: read from auth.node_token_file into out, and
 * one of auth.tokens with role admin (the node registers with it). SMP_OK,
 * or the reader's code / SMP_EINVAL with err naming the key. */
static int node_token(const host_config *cfg, host_config_files *out, char *err, size_t errlen)
{
    char why[600];
    uint8_t digest[32];
    unsigned dlen = 0;
    const rpc_auth_token *found = NULL;
    size_t index = 0;
    int line = cfg->auth_node_token_file_line;
    int rc = wc_token_read_file(cfg->auth_node_token_file, out->node_token,
                                sizeof(out->node_token), why, sizeof(why));
    if (rc < 0) {
        files_fail(cfg, line, err, errlen, "auth.node_token_file: %s", why);
        return rc;
    }
    if (!EVP_Digest(out->node_token, strlen(out->node_token), digest, &dlen, EVP_sha256(), NULL) ||
        dlen != 32) {
        files_fail(cfg, line, err, errlen, "auth.node_token_file: %s: cannot hash its token",
                   cfg->auth_node_token_file);
        return SMP_EIO;
    }
    for (size_t i = 0; i < cfg->auth_n_tokens; i++)
        if (CRYPTO_memcmp(digest, cfg->auth_tokens[i].sha256, 32) == 0) {
            found = &cfg->auth_tokens[i];
            index = i;
        }
    if (found == NULL) {
        files_fail(cfg, line, err, errlen,
                   "auth.node_token_file: the token in %s is none of auth.tokens, so the "
                   "embedded node's registration would be refused (nodes.register needs role "
                   "admin): add its SHA-256 to auth.tokens with role: admin",
                   cfg->auth_node_token_file);
        return SMP_EINVAL;
    }
    if (found->role != SMP_ROLE_ADMIN) {
        files_fail(cfg, line, err, errlen,
                   "auth.node_token_file: the token in %s is auth.tokens[%zu] (tenant %s, role "
                   "%s), so the embedded node's registration would be refused (nodes.register "
                   "needs role admin): give the node a token of role admin",
                   cfg->auth_node_token_file, index, found->tenant,
                   rpc_auth_role_name(found->role));
        return SMP_EINVAL;
    }
    return SMP_OK;
}

#define ETCD_PEM_MAX (1u << 20) /* a CA bundle, a certificate chain or a key */

int cfg_read_text(const char *path, size_t max, char **out, size_t *out_len, char *why,
                  size_t whylen)
{
    int rc = SMP_OK;
    size_t len = 0, cap = 4096;
    char *buf = NULL;
    FILE *f = fopen(path, "rb");
    *out = NULL;
    if (f == NULL) {
        snprintf(why, whylen, "cannot open: %s", strerror(errno));
        return SMP_EIO;
    }
    if ((buf = malloc(cap)) == NULL) {
        rc = SMP_ENOMEM;
        goto close_file;
    }
    for (;;) {
        if (len + 1 == cap) {
            char *bigger = realloc(buf, cap * 2);
            if (bigger == NULL) {
                rc = SMP_ENOMEM;
                goto free_buf;
            }
            buf = bigger;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - 1 - len, f);
        len += got;
        if (len > max) {
            snprintf(why, whylen, "larger than %zu bytes", max);
            rc = SMP_EINVAL;
            goto free_buf;
        }
        if (got == 0) break;
    }
    if (ferror(f)) {
        snprintf(why, whylen, "cannot read: %s", strerror(errno));
        rc = SMP_EIO;
        goto free_buf;
    }
    buf[len] = '\0';
    *out = buf;
    if (out_len != NULL) *out_len = len;
    fclose(f);
    return SMP_OK;
free_buf:
    free(buf);
close_file:
    if (rc == SMP_ENOMEM) snprintf(why, whylen, "out of memory");
    fclose(f);
    return rc;
}

int host_config_load_etcd_tls(const host_config *cfg, host_config_files *out, char *err,
                              size_t errlen)
{
    char why[1024];
    SSL_CTX *ctx = NULL;
    const char *cert = cfg->ha_etcd_tls_cert[0] ? cfg->ha_etcd_tls_cert : NULL;
    int rc = wc_tls_client_ctx(cfg->ha_etcd_tls_ca, cert, cert ? cfg->ha_etcd_tls_key : NULL,
                               &ctx, why, sizeof(why));
    SSL_CTX_free(ctx);
    if (rc < 0) {
        int of_ca = strncmp(why, "TLS CA", 6) == 0;
        files_fail(cfg, of_ca ? cfg->ha_etcd_tls_ca_line : cfg->ha_etcd_tls_cert_line, err, errlen,
                   "%s: %s", of_ca ? "ha.etcd_tls_ca" : "ha.etcd_tls_cert", why);
        return rc;
    }
    struct { const char *key, *path; int line; char **slot; } files[] = {
        {"ha.etcd_tls_ca", cfg->ha_etcd_tls_ca, cfg->ha_etcd_tls_ca_line, &out->etcd_ca_pem},
        {"ha.etcd_tls_cert", cert, cfg->ha_etcd_tls_cert_line, &out->etcd_cert_pem},
        {"ha.etcd_tls_key", cert ? cfg->ha_etcd_tls_key : NULL, cfg->ha_etcd_tls_key_line,
         &out->etcd_key_pem},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        if (files[i].path == NULL) continue;
        if ((rc = cfg_read_text(files[i].path, ETCD_PEM_MAX, files[i].slot, NULL, why,
                                sizeof(why))) < 0) {
            files_fail(cfg, files[i].line, err, errlen, "%s: %s: %s", files[i].key, files[i].path,
                       why);
            return rc;
        }
    }
    return SMP_OK;
}

int host_config_load_tls(const host_config *cfg, struct ssl_ctx_st **out, char *err,
                         size_t errlen)
{
    char why[1400] = "";
    SSL_CTX *ctx = NULL;
    rpc_tls_config tc = {.cert = cfg->tls_cert, .key = cfg->tls_key, .ca = cfg->tls_ca,
                         .verify_clients = cfg->tls_verify_clients};
    int rc;
    *out = NULL;
    if ((rc = rpc_tls_server_ctx(&tc, &ctx, why, sizeof(why))) < 0) {
        files_fail(cfg, tls_message_line(cfg, why), err, errlen, "%s", why);
        return rc;
    }
    if (cfg->node_embedded && cfg->listen_unix[0] == '\0') {
        if (cfg->tls_ca[0] == '\0' && (rc = own_cert_is_anchor(cfg, err, errlen)) < 0)
            goto fail;
        if ((rc = host_config_node_trust(cfg, why, sizeof(why))) < 0) {
            files_fail(cfg, cfg->tls_cert_line, err, errlen, "%s", why);
            goto fail;
        }
    }
    *out = ctx;
    return SMP_OK;
fail:
    SSL_CTX_free(ctx);
    return rc;
}

int host_config_load_files(const host_config *cfg, host_config_files *out, char *err,
                           size_t errlen)
{
    char why[1400];
    int rc = SMP_OK;
    memset(out, 0, sizeof(*out));
    if (err != NULL && errlen > 0) err[0] = '\0';
    if (cfg->tls_cert != NULL && cfg->tls_cert[0] != '\0' &&
        (rc = host_config_load_tls(cfg, &out->tls, err, errlen)) < 0)
        goto cleanup;
    if (cfg->auth_enabled && cfg->node_embedded && (rc = node_token(cfg, out, err, errlen)) < 0)
        goto cleanup;
    if (cfg->ha_enabled && cfg->ha_etcd_tls_ca[0] != '\0' &&
        (rc = host_config_load_etcd_tls(cfg, out, err, errlen)) < 0)
        goto cleanup;
    if (cfg->ha_enabled && cfg->ha_etcd_password_file[0] != '\0' &&
        (rc = wc_token_read_file(cfg->ha_etcd_password_file, out->etcd_password,
                                 sizeof(out->etcd_password), why, sizeof(why))) < 0) {
        files_fail(cfg, cfg->ha_etcd_password_file_line, err, errlen, "ha.etcd_password_file: %s",
                   why);
        goto cleanup;
    }
    return SMP_OK;
cleanup:
    host_config_files_free(out);
    return rc;
}

void host_config_files_free(host_config_files *f)
{
    if (f == NULL) return;
    SSL_CTX_free(f->tls);
    OPENSSL_cleanse(f->node_token, sizeof(f->node_token));
    OPENSSL_cleanse(f->etcd_password, sizeof(f->etcd_password));
    if (f->etcd_key_pem != NULL) OPENSSL_cleanse(f->etcd_key_pem, strlen(f->etcd_key_pem));
    free(f->etcd_ca_pem);
    free(f->etcd_cert_pem);
    free(f->etcd_key_pem);
    memset(f, 0, sizeof(*f));
}
