/* weightctl_tls.c -- weightctl's TLS settings: --tls-ca, --tls-cert,
 * --tls-key and --tls-server-name over $WM_TLS_CA, $WM_TLS_CERT and
 * $WM_TLS_KEY.
 *
 * The settings are resolved once, after the command line is parsed and
 * before anything connects: a flag replaces its variable (the client
 * certificate and its key as a pair), every file named is opened and read
 * as what it must be (CA and certificate: PEM certificates; key: an
 * unencrypted PEM private key that is the certificate's), and the client
 * context for node data ports is built from them. Each refusal is one line
 * naming the flag (or the variable) and the file. From then on every
 * connection weightctl opens -- the store handle (master RPC, reconnects,
 * lease renewals, node data ports), the plain commands' object client and
 * its node data ports, the admin calls -- gets these settings explicitly;
 * nothing reads $WM_TLS_* again. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "rpc_client.h"
#include "wc_tls.h"
#include "weightctl_master.h"

/* Where one setting came from, for messages: the flag or the variable. */
typedef struct tls_source {
    const char *path;   /* NULL: unset */
    const char *name;   /* "--tls-ca", "$WM_TLS_CA", ... */
} tls_source;

/* The flag's value when given, else the variable's (NULL when neither or
 * empty). */
static tls_source pick(const char *flag_value, const char *flag, const char *var)
{
    tls_source s = {NULL, flag};
    if (flag_value != NULL) {
        s.path = flag_value;
        return s;
    }
    const char *v = getenv(var + 1); /* var is "$NAME" */
    if (v != NULL && v[0] != '\0') {
        s.path = v;
        s.name = var;
    }
    return s;
}

/* A password callback that gives none: an encrypted key is refused, never
 * prompted for. */
static int no_password(char *buf, int size, int rwflag, void *u)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)u;
    return 0;
}

/* Open s's file, which must be a regular file. A BIO over it (BIO_free
 * it), or NULL with "weightctl: NAME PATH: cause" on stderr. */
static BIO *open_setting(const tls_source *s)
{
    struct stat st;
    BIO *b = NULL;
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "weightctl: %s %s: cannot open: %s\n", s->name, s->path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "weightctl: %s %s: not a regular file\n", s->name, s->path);
        goto close_fd;
    }
    if ((b = BIO_new_fd(fd, BIO_CLOSE)) == NULL) {
        fprintf(stderr, "weightctl: %s %s: cannot read: %s\n", s->name, s->path, strerror(errno));
        goto close_fd;
    }
    return b;
close_fd:
    close(fd);
    return NULL;
}

/* The first PEM certificate of s's file, or NULL with the cause on stderr
 * (what: "CA certificate", "certificate"). */
static X509 *read_cert(const tls_source *s, const char *what)
{
    BIO *b = open_setting(s);
    if (b == NULL) return NULL;
    ERR_clear_error();
    X509 *x = PEM_read_bio_X509(b, NULL, no_password, NULL);
    BIO_free(b);
    ERR_clear_error();
    if (x == NULL)
        fprintf(stderr, "weightctl: %s %s: holds no PEM %s\n", s->name, s->path, what);
    return x;
}

/* The PEM private key of s's file, or NULL with the cause on stderr. */
static EVP_PKEY *read_key(const tls_source *s)
{
    BIO *b = open_setting(s);
    if (b == NULL) return NULL;
    ERR_clear_error();
    EVP_PKEY *k = PEM_read_bio_PrivateKey(b, NULL, no_password, NULL);
    BIO_free(b);
    ERR_clear_error();
    if (k == NULL)
        fprintf(stderr, "weightctl: %s %s: holds no unencrypted PEM private key\n", s->name,
                s->path);
    return k;
}

/* Check that cert's file holds a certificate and key's its private key.
 * 0, or -1 with the cause on stderr. */
static int check_pair(const tls_source *cert, const tls_source *key)
{
    int rc = -1;
    X509 *x = read_cert(cert, "certificate");
    EVP_PKEY *k = NULL;
    if (x == NULL) return -1;
    if ((k = read_key(key)) == NULL) goto free_cert;
    ERR_clear_error();
    if (X509_check_private_key(x, k) != 1) {
        fprintf(stderr, "weightctl: %s %s is not the private key of %s %s\n", key->name,
                key->path, cert->name, cert->path);
        goto free_key;
    }
    rc = 0;
free_key:
    EVP_PKEY_free(k);
free_cert:
    ERR_clear_error();
    X509_free(x);
    return rc;
}

int wctl_tls_resolve(ctl *x)
{
    char err[768];
    const char *flags[4] = {x->tls_ca_flag, x->tls_cert_flag, x->tls_key_flag,
                            x->tls_server_name_flag};
    static const char *const names[4] = {"--tls-ca", "--tls-cert", "--tls-key",
                                         "--tls-server-name"};
    for (int i = 0; i < 4; i++)
        if (flags[i] != NULL && flags[i][0] == '\0') {
            fprintf(stderr, "weightctl: %s: the value is empty\n", names[i]);
            return WCTL_USAGE;
        }
    tls_source ca = pick(x->tls_ca_flag, "--tls-ca", "$WM_TLS_CA");
    tls_source cert, key;
    if (x->tls_cert_flag != NULL || x->tls_key_flag != NULL) {
        cert = (tls_source){x->tls_cert_flag, "--tls-cert"};
        key = (tls_source){x->tls_key_flag, "--tls-key"};
    } else {
        cert = pick(NULL, "--tls-cert", "$WM_TLS_CERT");
        key = pick(NULL, "--tls-key", "$WM_TLS_KEY");
    }
    if ((cert.path == NULL) != (key.path == NULL)) {
        const tls_source *has = cert.path != NULL ? &cert : &key;
        fprintf(stderr, "weightctl: %s %s without %s: a client certificate and its key come "
                "together\n", has->name, has->path, cert.path != NULL ? "--tls-key" : "--tls-cert");
        return WCTL_USAGE;
    }
    if (ca.path == NULL) {
        if (cert.path != NULL) {
            fprintf(stderr, "weightctl: %s needs --tls-ca (or $WM_TLS_CA): the CA the master's "
                    "certificate chains to\n", cert.name);
            return WCTL_USAGE;
        }
        if (x->tls_server_name_flag != NULL) {
            fprintf(stderr, "weightctl: --tls-server-name needs --tls-ca (or $WM_TLS_CA): "
                    "without a CA nothing speaks TLS\n");
            return WCTL_USAGE;
        }
        return 0; /* plaintext */
    }
    if (x->tls_server_name_flag != NULL && strlen(x->tls_server_name_flag) > 255) {
        fprintf(stderr, "weightctl: --tls-server-name: longer than 255 bytes\n");
        return WCTL_USAGE;
    }
    X509 *ca_cert = read_cert(&ca, "CA certificate");
    if (ca_cert == NULL) return WCTL_USAGE;
    X509_free(ca_cert);
    if (cert.path != NULL && check_pair(&cert, &key) < 0) return WCTL_USAGE;
    err[0] = '\0';
    if (wc_tls_client_ctx(ca.path, cert.path, key.path, &x->tls_ctx, err, sizeof err) < 0) {
        fprintf(stderr, "weightctl: %s\n", err);
        return WCTL_USAGE;
    }
    x->tls = (weight_tls_options){.struct_size = sizeof(weight_tls_options),
                                  .ca = ca.path,
                                  .cert = cert.path,
                                  .key = key.path,
                                  .server_name = x->tls_server_name_flag};
    return 0;
}

rpcc_options wctl_rpc_options(const ctl *x, int timeout_ms)
{
    rpcc_options o = {.timeout_ms = timeout_ms, .await_restart = 1};
    if (x->tls_ctx != NULL) {
        o.tls_ca = x->tls.ca;
        o.tls_cert = x->tls.cert;
        o.tls_key = x->tls.key;
        o.tls_server_name = x->tls.server_name;
    }
    return o;
}

void wctl_tls_free(ctl *x)
{
    SSL_CTX_free(x->tls_ctx);
    x->tls_ctx = NULL;
}
