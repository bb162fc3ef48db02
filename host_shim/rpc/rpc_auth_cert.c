/* rpc_auth_cert.c -- which auth.certificates entry a verified client
 * certificate stands for (rpc_auth.h).
 *
 * Matching is exact and byte for byte: a cn entry matches a leaf whose
 * subject carries exactly one commonName whose UTF-8 form equals the value
 * (two commonNames match nothing: which one would count is not guessed);
 * a san_uri entry matches a leaf one of whose subjectAltName URIs equals
 * the value. No case folding, no wildcards, no prefix match: a SPIFFE ID or
 * a CN names one identity. Every entry is tried; entries that match with
 * different tenants or roles make the certificate ambiguous, which maps it
 * to nothing. The caller has verified the chain (the TLS handshake against
 * tls.ca); nothing here looks at signatures or dates. */
#include <stdio.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "rpc_auth.h"
#include "wm_errbuf.h"

/* 1 when the subject of leaf has exactly one commonName and it is value. */
static int cn_matches(X509 *leaf, const char *value)
{
    const X509_NAME *name = X509_get_subject_name(leaf);
    int at = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
    unsigned char *utf8 = NULL;
    int len, ok;
    if (at < 0 || X509_NAME_get_index_by_NID(name, NID_commonName, at) >= 0) return 0;
    len = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, at)));
    if (len < 0) return 0;
    ok = (size_t)len == strlen(value) && memcmp(utf8, value, (size_t)len) == 0;
    OPENSSL_free(utf8);
    return ok;
}

/* 1 when one subjectAltName URI of leaf is value. */
static int san_uri_matches(X509 *leaf, const char *value)
{
    GENERAL_NAMES *names = X509_get_ext_d2i(leaf, NID_subject_alt_name, NULL, NULL);
    int ok = 0;
    for (int i = 0; names != NULL && i < sk_GENERAL_NAME_num(names) && !ok; i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(names, i);
        if (g->type != GEN_URI) continue;
        ok = (size_t)ASN1_STRING_length(g->d.uniformResourceIdentifier) == strlen(value) &&
             memcmp(ASN1_STRING_get0_data(g->d.uniformResourceIdentifier), value,
                    strlen(value)) == 0;
    }
    GENERAL_NAMES_free(names);
    return ok;
}

/* n, less the bytes of a UTF-8 character that s[0, n) ends inside of (a
 * cut made at a byte count). */
static size_t utf8_whole(const char *s, size_t n)
{
    size_t i = n, cont = 0, want;
    while (i > 0 && cont < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--, cont++;
    if (i == 0) return n;
    unsigned char lead = (unsigned char)s[i - 1];
    if (lead < 0xC0) return n; /* ASCII (or not UTF-8 at all): nothing to mend */
    want = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : 1;
    return cont >= want ? n : i - 1;
}

/* The subject of leaf, one line (RFC 2253, UTF-8), into buf ("?" when it
 * cannot be printed). A subject longer than buf is cut at a character
 * boundary and ends in "..." (the sentence it goes into reaches clients,
 * which decode it as UTF-8). cap is at least 8. */
static void subject_line(X509 *leaf, char *buf, size_t cap)
{
    BIO *b = BIO_new(BIO_s_mem());
    int n = 0;
    buf[0] = '\0';
    if (b != NULL && X509_NAME_print_ex(b, X509_get_subject_name(leaf), 0,
                                        XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB) >= 0)
        n = BIO_read(b, buf, (int)cap - 1);
    if (n > 0 && BIO_pending(b) > 0) { /* cut: end at a character, then "..." */
        size_t k = utf8_whole(buf, (size_t)n - 3);
        memcpy(buf + k, "...", 3);
        n = (int)k + 3;
    }
    BIO_free(b);
    buf[n > 0 ? n : 0] = '\0';
    if (buf[0] == '\0') snprintf(buf, cap, "?");
}

int rpc_auth_cert_find(const rpc_auth_cert *certs, size_t n, X509 *leaf,
                       const rpc_auth_cert **out, char *note, size_t cap)
{
    const rpc_auth_cert *found = NULL;
    size_t first = 0, other = 0;
    char subject[160];
    *out = NULL;
    for (size_t i = 0; leaf != NULL && i < n; i++) {
        const rpc_auth_cert *e = &certs[i];
        int hit = e->match == RPC_CERT_CN ? cn_matches(leaf, e->value)
                : e->match == RPC_CERT_SAN_URI ? san_uri_matches(leaf, e->value) : 0;
        if (!hit) continue;
        if (found == NULL) {
            found = e;
            first = i;
        } else if (other == 0 && (strcmp(found->tenant, e->tenant) != 0 || found->role != e->role)) {
            other = i;
        }
    }
    if (found != NULL && other == 0) {
        *out = found;
        return SMP_OK;
    }
    if (note != NULL && cap > 0) {
        if (leaf != NULL) subject_line(leaf, subject, sizeof(subject));
        else snprintf(subject, sizeof(subject), "none");
        if (found != NULL)
            wm_errbuf(note, cap, "its client certificate (subject %s) matches "
                      "auth.certificates[%zu] and [%zu], which give different tenants or "
                      "roles, so it maps to none", subject, first, other);
        else
            wm_errbuf(note, cap, "its client certificate (subject %s) matches no "
                      "auth.certificates entry", subject);
    }
    return found != NULL ? SMP_EEXIST : SMP_ENOTFOUND;
}
