/* fuzz_auth_certs.c -- fuzz target: client certificates as identities
 * (auth.certificates) and auth.HELLO on a certificate's connection, in the
 * matcher and on a real store_master's TLS port (issue 19).
 *
 * Each input describes a leaf certificate, which the target builds and
 * signs with the test CA in memory (OpenSSL; one key for every leaf):
 * up to 3 subject commonNames and up to 7 subjectAltName URIs (plus, when
 * asked, 64..319 more), each one of the configured values exactly, one of
 * them with a byte changed, a NUL put in or cut short, raw bytes, or a long
 * run of one byte (up to 20,000); commonNames as UTF8String, BMPString or
 * T61String. Then up to 4 steps on one connection, each an optional
 * auth.HELLO (no token, the empty token, one of four real tokens, the
 * token of the certificate's own identity, or fuzzed bytes) followed by a
 * request (a method of the master's own auth.RULES, a fuzzed body).
 *
 * What it holds, besides no crash and the master staying up and serving:
 *  - in process: rpc_auth_cert_find over the master's table of mappings
 *    gives exactly what this file's model says (the entry of exactly one
 *    commonName equal byte for byte to a cn value, or of a URI equal byte
 *    for byte to a san_uri value; entries of different identities
 *    matching: none), with a note naming the subject whenever none, in
 *    UTF-8 without control characters;
 *  - on the master (a connection with that certificate, no token): the
 *    identity it answers is the model's; each HELLO is answered as the
 *    model of the connection's state says (a certificate's identity keeps
 *    answering an empty token or its own identity's token, any other token
 *    is EAUTH and ends the identity; elsewhere the token path: empty EAUTH,
 *    unknown EAUTH, known then ESTATE); and each request is refused EAUTH
 *    while unauthenticated, EFORBIDDEN below its rule, and never refused
 *    either way when the model's identity may make it. A request the model
 *    allows whose rule is admin is replaced by auth.RULES (the target does
 *    not reload or disable plugins). A mismatch aborts the run with the
 *    input in ./fuzz-crash-input (driver.c) and the master's log. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "etcd_fixture.h"
#include "fuzz.h"
#include "harness.h"
#include "host_rpc.pb-c.h"
#include "master_fuzz.h"
#include "rpc_auth.h"
#include "rpc_client.h"

#define TARGET "fuzz_auth_certs"
#define AUTH_SVC 4
#define MAX_RULES 128
#define MAX_CN 3
#define MAX_SAN 400
#define LONG_MAX_BYTES 20000

static hx_master master;
static int started;
static unsigned long inputs;
static char tcp[64], ca_path[300], leaf_pem[300], leaf_key_path[300];
static EVP_PKEY *ca_key, *leaf_key;
static X509 *ca_cert;
static long serial = 1;
/* What the run reached, printed at exit: connections whose certificate
 * mapped / did not, handshakes refused, HELLOs by answer, requests the
 * model allowed / refused. */
static struct {
    unsigned long mapped, unmapped, refused, hello_ok, hello_eauth, hello_estate, allowed, denied;
} seen;

/* The tokens (role 1 reader, 2 writer, 3 admin) and their identities. */
static const struct {
    const char *token, *tenant;
    smp_role role;
} tokens[] = {
    {"fzc-a-reader-61", "a", SMP_ROLE_READER},
    {"fzc-a-writer-62", "a", SMP_ROLE_WRITER},
    {"fzc-b-writer-63", "b", SMP_ROLE_WRITER},
    {"fzc-admin-64", "ops", SMP_ROLE_ADMIN},
};
#define N_TOKENS 4

/* The master's auth.certificates, in this order (the in-process table is
 * the same). Entries 0 and 4 are one identity, so a certificate matching
 * both maps. */
static rpc_auth_cert table[8];
static size_t n_table;
static char long_cn[RPC_AUTH_CERT_VALUE_MAX + 1];

/* Values the inputs pick from: the table's, then near misses. */
static const char *const near_misses[] = {
    "A-READER", "a-reader ", "a-reade", "spiffe://test.example/tenant/a/writer/",
    "spiffe://test.example/tenant/a", "ops-admin\n", "",
};
#define N_VALUES (n_table + sizeof(near_misses) / sizeof(near_misses[0]))

static fzm_rule rules[MAX_RULES];
static size_t n_rules;

static void die(const char *what)
{
    fzm_die(&master, TARGET, what);
}

static void add_entry(rpc_cert_match match, const char *value, const char *tenant, smp_role role)
{
    rpc_auth_cert *e = &table[n_table++];
    memset(e, 0, sizeof(*e));
    e->match = match;
    snprintf(e->value, sizeof(e->value), "%s", value);
    snprintf(e->tenant, sizeof(e->tenant), "%s", tenant);
    e->role = role;
}

static const char *value_at(size_t i)
{
    return i < n_table ? table[i].value : near_misses[i - n_table];
}

static void stop_master(void)
{
    if (!started) return;
    fprintf(stderr, TARGET ": %lu connections mapped, %lu unmapped, %lu handshakes refused; "
            "HELLO answered 0 %lu, EAUTH %lu, ESTATE %lu; requests allowed %lu, refused %lu\n",
            seen.mapped, seen.unmapped, seen.refused, seen.hello_ok, seen.hello_eauth,
            seen.hello_estate, seen.allowed, seen.denied);
    if (master.pid > 0) {
        fzm_check_serving(&master, TARGET);
        hx_stop(&master);
    }
    hx_cleanup(&master);
}

static void load_pki(void)
{
    char path[400];
    FILE *f;
    snprintf(path, sizeof(path), "%s/ca.key", master.dir);
    if ((f = fopen(path, "r")) == NULL ||
        (ca_key = PEM_read_PrivateKey(f, NULL, NULL, NULL)) == NULL)
        die("cannot read the test CA's key");
    fclose(f);
    if ((f = fopen(ca_path, "r")) == NULL || (ca_cert = PEM_read_X509(f, NULL, NULL, NULL)) == NULL)
        die("cannot read the test CA");
    fclose(f);
    if ((leaf_key = EVP_EC_gen("P-256")) == NULL) die("cannot make the leaves' key");
    snprintf(leaf_key_path, sizeof(leaf_key_path), "%s/leaf.key", master.dir);
    snprintf(leaf_pem, sizeof(leaf_pem), "%s/leaf.pem", master.dir);
    if ((f = fopen(leaf_key_path, "w")) == NULL ||
        !PEM_write_PrivateKey(f, leaf_key, NULL, NULL, 0, NULL, NULL))
        die("cannot write the leaves' key");
    fclose(f);
}

static void start_master(void)
{
    char yaml[8192], path[400], hex[N_TOKENS][65];
    size_t used = 0;
    FILE *tf;
    signal(SIGPIPE, SIG_IGN);
    memset(long_cn, 'L', RPC_AUTH_CERT_VALUE_MAX);
    add_entry(RPC_CERT_CN, "a-reader", "a", SMP_ROLE_READER);
    add_entry(RPC_CERT_SAN_URI, "spiffe://test.example/tenant/a/writer", "a", SMP_ROLE_WRITER);
    add_entry(RPC_CERT_CN, "b-writer", "b", SMP_ROLE_WRITER);
    add_entry(RPC_CERT_CN, "ops-admin", "ops", SMP_ROLE_ADMIN);
    add_entry(RPC_CERT_SAN_URI, "spiffe://test.example/tenant/a/reader", "a", SMP_ROLE_READER);
    add_entry(RPC_CERT_CN, "\xc3\xbc" "n\xc3\xaf" "code-\xc3\x9f", "u", SMP_ROLE_READER);
    add_entry(RPC_CERT_CN, long_cn, "l", SMP_ROLE_WRITER);
    add_entry(RPC_CERT_SAN_URI, "urn:test:odd%00name", "b", SMP_ROLE_READER);
    if (hx_init(&master, "fuzz-auth-certs", NULL) < 0) die("cannot make the master's directory");
    if (hx_make_certs(master.dir) < 0) die("cannot make the test PKI (openssl CLI)");
    snprintf(ca_path, sizeof(ca_path), "%s/ca.pem", master.dir);
    snprintf(path, sizeof(path), "%s/node.token", master.dir);
    if ((tf = fopen(path, "w")) == NULL) die("cannot write the node's token");
    fputs(tokens[3].token, tf);
    fclose(tf);
    for (int i = 0; i < N_TOKENS; i++) {
        unsigned char d[32];
        hx_sha256(tokens[i].token, strlen(tokens[i].token), d);
        for (int k = 0; k < 32; k++) sprintf(hex[i] + 2 * k, "%02x", d[k]);
    }
    used += (size_t)snprintf(yaml + used, sizeof(yaml) - used,
                             "snapshot:\n  every_records: 200\n"
                             "tls:\n  cert: \"%s/server.pem\"\n  key: \"%s/server.key\"\n"
                             "  ca: \"%s\"\n  verify_clients: true\n"
                             "auth:\n  enabled: true\n  node_token_file: \"%s\"\n  tokens:\n"
                             "    - {sha256: %s, tenant: a, role: reader}\n"
                             "    - {sha256: %s, tenant: a, role: writer}\n"
                             "    - {sha256: %s, tenant: b, role: writer}\n"
                             "    - {sha256: %s, tenant: ops, role: admin}\n"
                             "  certificates:\n",
                             master.dir, master.dir, ca_path, path, hex[0], hex[1], hex[2], hex[3]);
    for (size_t i = 0; i < n_table; i++)
        used += (size_t)snprintf(yaml + used, sizeof(yaml) - used,
                                 "    - {%s: \"%s\", tenant: %s, role: %s}\n",
                                 table[i].match == RPC_CERT_CN ? "cn" : "san_uri", table[i].value,
                                 table[i].tenant, rpc_auth_role_name(table[i].role));
    if (used >= sizeof(yaml)) die("the config does not fit");
    int port = etcd_fixture_free_port();
    if (port <= 0) die("no free port");
    snprintf(tcp, sizeof(tcp), "127.0.0.1:%d", port);
    snprintf(master.listen_tcp, sizeof(master.listen_tcp), "%s", tcp);
    snprintf(master.admin_ca, sizeof(master.admin_ca), "%s", ca_path);
    snprintf(master.admin_cert, sizeof(master.admin_cert), "%s/client.pem", master.dir);
    snprintf(master.admin_key, sizeof(master.admin_key), "%s/client.key", master.dir);
    setenv("WEIGHT_TOKEN", tokens[3].token, 1); /* hx_start's and the checks' status calls */
    unsetenv("WM_TLS_CA");
    unsetenv("WM_TLS_CERT");
    unsetenv("WM_TLS_KEY");
    if (hx_reconfigure(&master, yaml) < 0 || hx_start(&master, 20000) < 0)
        die("cannot start the master");
    started = 1;
    atexit(stop_master);
    n_rules = fzm_load_rules(&master, TARGET, tokens[3].token, rules, MAX_RULES);
    load_pki();
}

/* -- the input ------------------------------------------------------------ */

typedef struct cursor {
    const uint8_t *p;
    size_t n;
} cursor;

static unsigned take(cursor *c)
{
    if (c->n == 0) return 0;
    c->n--;
    return *c->p++;
}

/* One name into out (cap at least LONG_MAX_BYTES + 1); its length. A
 * selector byte s: s & 7 is 3 for a value changed (then how, where and
 * maybe the byte), 4 or 5 for raw bytes (a length byte, then the bytes), 6
 * for a run of one byte (two length bytes, modulo LONG_MAX_BYTES, then the
 * byte), anything else for a value exactly; the value is s >> 3 among the
 * table's and the near misses. */
/* n bytes of the input into out (n <= 255), zeros where the input has ended. */
static void take_bytes(cursor *c, uint8_t *out, size_t n)
{
    size_t have = n < c->n ? n : c->n;
    memcpy(out, c->p, have);
    memset(out + have, 0, n - have);
    c->p += have;
    c->n -= have;
}

static size_t take_name(cursor *c, uint8_t *out)
{
    unsigned s = take(c);
    size_t len = 0;
    switch (s & 7) {
    case 3: { /* a value changed: a byte replaced, a NUL (or a byte) put in, cut short */
        const char *v = value_at((s >> 3) % N_VALUES);
        unsigned how = take(c), at = take(c);
        len = strlen(v);
        memcpy(out, v, len);
        size_t pos = at % (len + 1);
        if (how % 3 == 0 && pos < len) {
            out[pos] = (uint8_t)take(c);
        } else if (how % 3 == 1) {
            memmove(out + pos + 1, out + pos, len - pos);
            out[pos] = (uint8_t)(how / 3 % 2 ? take(c) : 0);
            len++;
        } else if (len > 0) {
            len = pos < len ? pos : len - 1;
        }
        break;
    }
    case 4: /* raw bytes */
    case 5:
        len = take(c);
        for (size_t i = 0; i < len; i++) out[i] = (uint8_t)take(c);
        break;
    case 6: { /* a long run of one byte */
        unsigned hi = take(c), lo = take(c);
        len = ((size_t)hi << 8 | lo) % LONG_MAX_BYTES;
        memset(out, (int)take(c), len);
        break;
    }
    default: { /* a value exactly */
        const char *v = value_at((s >> 3) % N_VALUES);
        len = strlen(v);
        memcpy(out, v, len);
        break;
    }
    }
    return len;
}

/* -- the certificate ------------------------------------------------------ */

typedef struct leaf_desc {
    int n_cn, n_san;
    int cn_type[MAX_CN];
    uint8_t *cn[MAX_CN];
    size_t cn_len[MAX_CN];
    uint8_t *san[MAX_SAN];
    size_t san_len[MAX_SAN];
} leaf_desc;

static void leaf_free(leaf_desc *d)
{
    for (int i = 0; i < d->n_cn; i++) free(d->cn[i]);
    for (int i = 0; i < d->n_san; i++) free(d->san[i]);
}

static uint8_t *dup_bytes(const uint8_t *b, size_t n)
{
    uint8_t *p = malloc(n + 1);
    if (p == NULL) die("out of memory");
    memcpy(p, b, n);
    return p;
}

static void take_leaf(cursor *c, leaf_desc *d)
{
    static uint8_t name[LONG_MAX_BYTES + 8];
    static const int types[] = {V_ASN1_UTF8STRING, V_ASN1_BMPSTRING, V_ASN1_T61STRING};
    unsigned shape = take(c);
    memset(d, 0, sizeof(*d));
    int want_cn = (int)(shape % 4), want_san = (int)(shape / 4 % 8);
    for (int i = 0; i < want_cn && i < MAX_CN; i++) {
        unsigned t = take(c);
        size_t len = take_name(c, name);
        d->cn_type[d->n_cn] = types[t % 3];
        if (t % 3 == 1 && t / 3 % 2 == 0) { /* BMP of the bytes as UCS-2 code points */
            uint8_t *bmp = malloc(2 * len + 1);
            if (bmp == NULL) die("out of memory");
            for (size_t k = 0; k < len; k++) bmp[2 * k] = 0, bmp[2 * k + 1] = name[k];
            d->cn[d->n_cn] = bmp;
            d->cn_len[d->n_cn] = 2 * len;
        } else {
            d->cn[d->n_cn] = dup_bytes(name, len);
            d->cn_len[d->n_cn] = len;
        }
        d->n_cn++;
    }
    for (int i = 0; i < want_san; i++) {
        size_t len = take_name(c, name);
        d->san[d->n_san] = dup_bytes(name, len);
        d->san_len[d->n_san++] = len;
    }
    if (shape & 0x80) { /* many more URIs, none matching */
        int more = 64 + (int)take(c);
        for (int i = 0; i < more && d->n_san < MAX_SAN; i++) {
            char u[64];
            int n = snprintf(u, sizeof(u), "spiffe://test.example/noise/%d", i);
            d->san[d->n_san] = dup_bytes((const uint8_t *)u, (size_t)n);
            d->san_len[d->n_san++] = (size_t)n;
        }
    }
}

/* The leaf of d, signed by the test CA. NULL when OpenSSL refuses to build
 * it (e.g. a BMPString of odd length): the input is then done. */
static X509 *build_leaf(const leaf_desc *d)
{
    X509 *x = X509_new();
    X509_NAME *nm = X509_NAME_new();
    GENERAL_NAMES *gens = sk_GENERAL_NAME_new_null();
    int ok = x != NULL && nm != NULL && gens != NULL;
    ok = ok && X509_set_version(x, 2) && ASN1_INTEGER_set(X509_get_serialNumber(x), serial++) &&
         X509_gmtime_adj(X509_getm_notBefore(x), -300) != NULL &&
         X509_gmtime_adj(X509_getm_notAfter(x), 86400) != NULL && X509_set_pubkey(x, leaf_key);
    for (int i = 0; ok && i < d->n_cn; i++) {
        X509_NAME_ENTRY *e = X509_NAME_ENTRY_create_by_NID(NULL, NID_commonName, d->cn_type[i],
                                                           d->cn[i], (int)d->cn_len[i]);
        ok = e != NULL && X509_NAME_add_entry(nm, e, -1, 0);
        X509_NAME_ENTRY_free(e);
    }
    ok = ok && X509_set_subject_name(x, nm) &&
         X509_set_issuer_name(x, X509_get_subject_name(ca_cert));
    for (int i = 0; ok && i < d->n_san; i++) {
        GENERAL_NAME *g = GENERAL_NAME_new();
        ASN1_IA5STRING *s = ASN1_IA5STRING_new();
        ok = g != NULL && s != NULL && ASN1_STRING_set(s, d->san[i], (int)d->san_len[i]);
        if (ok) {
            GENERAL_NAME_set0_value(g, GEN_URI, s);
            s = NULL;
            ok = sk_GENERAL_NAME_push(gens, g) > 0;
            if (ok) g = NULL;
        }
        ASN1_IA5STRING_free(s);
        GENERAL_NAME_free(g);
    }
    if (ok && d->n_san > 0) ok = X509_add1_ext_i2d(x, NID_subject_alt_name, gens, 0, 0) == 1;
    ok = ok && X509_sign(x, ca_key, EVP_sha256()) > 0;
    GENERAL_NAMES_free(gens);
    X509_NAME_free(nm);
    if (!ok) {
        X509_free(x);
        return NULL;
    }
    return x;
}

/* -- the model ------------------------------------------------------------ */

/* The UTF-8 form OpenSSL gives commonName i of d (NULL when it has none). */
static unsigned char *cn_utf8(const leaf_desc *d, int i, int *len)
{
    ASN1_STRING *s = ASN1_STRING_type_new(d->cn_type[i]);
    unsigned char *out = NULL;
    *len = -1;
    if (s != NULL && ASN1_STRING_set(s, d->cn[i], (int)d->cn_len[i]))
        *len = ASN1_STRING_to_UTF8(&out, s);
    ASN1_STRING_free(s);
    return *len >= 0 ? out : NULL;
}

/* Which entry d maps to: its index, or -1 (none, or entries of different
 * identities). */
static int model_entry(const leaf_desc *d)
{
    int found = -1, other = 0;
    int cn_len = -1;
    unsigned char *cn = d->n_cn == 1 ? cn_utf8(d, 0, &cn_len) : NULL;
    for (size_t i = 0; i < n_table; i++) {
        const rpc_auth_cert *e = &table[i];
        size_t vl = strlen(e->value);
        int hit = 0;
        if (e->match == RPC_CERT_CN)
            hit = cn != NULL && (size_t)cn_len == vl && memcmp(cn, e->value, vl) == 0;
        for (int k = 0; e->match == RPC_CERT_SAN_URI && k < d->n_san && !hit; k++)
            hit = d->san_len[k] == vl && memcmp(d->san[k], e->value, vl) == 0;
        if (!hit) continue;
        if (found < 0) found = (int)i;
        else if (strcmp(table[found].tenant, e->tenant) != 0 || table[found].role != e->role)
            other = 1;
    }
    OPENSSL_free(cn);
    return other ? -1 : found;
}

/* The connection's identity as the master keeps it (rpc_dispatch.c). */
typedef struct conn_model {
    int state;        /* 0 none yet, 1 authenticated, -1 refused */
    int by_cert;
    const char *tenant;
    int role;         /* SMP_ROLE_* */
} conn_model;

static int token_index(const uint8_t *t, size_t n)
{
    for (int i = 0; i < N_TOKENS; i++)
        if (strlen(tokens[i].token) == n && memcmp(tokens[i].token, t, n) == 0) return i;
    return -1;
}

/* HELLO with token t on m: the status the master must answer; m moves. */
static int model_hello(conn_model *m, const uint8_t *t, size_t n)
{
    int k = token_index(t, n);
    if (m->state == 1 && m->by_cert) {
        if (n > 0 && (k < 0 || strcmp(tokens[k].tenant, m->tenant) != 0 ||
                      (int)tokens[k].role != m->role)) {
            m->state = -1;
            m->by_cert = 0;
            return SMP_EAUTH;
        }
        return 0;
    }
    if (n == 0) return SMP_EAUTH;
    if (m->state != 0) return SMP_ESTATE;
    if (k < 0) {
        m->state = -1;
        return SMP_EAUTH;
    }
    m->state = 1;
    m->tenant = tokens[k].tenant;
    m->role = (int)tokens[k].role;
    return 0;
}

/* -- one input ------------------------------------------------------------ */

static void check_in_process(const leaf_desc *d, X509 *leaf, int want)
{
    const rpc_auth_cert *got = NULL;
    char note[512] = "";
    int rc = rpc_auth_cert_find(table, n_table, leaf, &got, note, sizeof(note));
    int idx = got != NULL ? (int)(got - table) : -1;
    int same = want < 0 ? rc != SMP_OK && got == NULL
                        : rc == SMP_OK && got != NULL &&
                              strcmp(got->tenant, table[want].tenant) == 0 &&
                              got->role == table[want].role;
    if (!same) {
        char msg[256];
        snprintf(msg, sizeof(msg), "rpc_auth_cert_find: rc %d entry %d, the model says entry %d "
                 "(%d commonNames, %d URIs)", rc, idx, want, d->n_cn, d->n_san);
        die(msg);
    }
    if (want < 0 && strstr(note, "its client certificate (subject ") == NULL) die(note);
    /* the sentence reaches clients: UTF-8, no control characters */
    for (const unsigned char *p = (const unsigned char *)note; want < 0 && *p != '\0';) {
        size_t more = *p < 0x80 ? 0 : (*p & 0xE0) == 0xC0 ? 1 : (*p & 0xF0) == 0xE0 ? 2
                    : (*p & 0xF8) == 0xF0 ? 3 : 9;
        int bad = more == 9 || *p < 0x20 || *p == 0x7f;
        p++;
        for (size_t i = 0; !bad && i < more; i++, p++) bad = (*p & 0xC0) != 0x80;
        if (bad) die("the refusal's note is not UTF-8 without control characters");
    }
}

static void write_leaf(X509 *leaf)
{
    FILE *f = fopen(leaf_pem, "w");
    if (f == NULL || !PEM_write_X509(f, leaf)) die("cannot write the leaf");
    fclose(f);
}

/* One request of rule r with body on c, judged against m. */
static void request(rpcc_conn *c, const conn_model *m, size_t r, const uint8_t *body, size_t blen)
{
    uint32_t service = rules[r].service, method = rules[r].method;
    int need = rules[r].role;
    int status = 0;
    char msg[200];
    if (need == SMP_ROLE_NONE) return; /* HELLO: the steps send it on purpose */
    int allowed = m->state == 1 && m->role >= need;
    if (allowed && need == SMP_ROLE_ADMIN) { /* no plugin reloads or snapshots */
        service = AUTH_SVC;
        method = AUTH_METHOD__AUTH_RULES;
        body = NULL;
        blen = 0;
    }
    char *em = NULL;
    if (rpcc_call(c, service, method, body, blen, &status, NULL, NULL, &em) < 0) return;
    int want = m->state != 1 ? SMP_EAUTH : m->role < need ? SMP_EFORBIDDEN : 0;
    if (want == 0) seen.allowed++;
    else seen.denied++;
    /* allowed: not refused by the rules (a handler may still refuse
     * another tenant's key FORBIDDEN, in its own words) */
    int ruled = status == SMP_EAUTH || (status == SMP_EFORBIDDEN && em != NULL &&
                                        strstr(em, " needs role ") != NULL);
    free(em);
    if ((want != 0 && status != want) || (want == 0 && ruled)) {
        snprintf(msg, sizeof(msg), "service %u method %u (rule %d): status %d, the model says %d "
                 "(state %d, role %d)", service, method, need, status, want, m->state, m->role);
        die(msg);
    }
}

static void run_steps(cursor *cur, rpcc_conn *c, conn_model *m, int entry)
{
    unsigned steps = take(cur) % 5;
    for (unsigned s = 0; s < steps; s++) {
        unsigned kind = take(cur) % 8;
        uint8_t tok[256];
        size_t tn = 0;
        int hello = kind != 0;
        if (kind >= 2 && kind <= 5) {
            tn = strlen(tokens[kind - 2].token);
            memcpy(tok, tokens[kind - 2].token, tn);
        } else if (kind == 6) {
            tn = take(cur);
            take_bytes(cur, tok, tn);
        } else if (kind == 7 && entry >= 0) { /* the certificate's own identity's token */
            for (int k = 0; k < N_TOKENS; k++)
                if (strcmp(tokens[k].tenant, table[entry].tenant) == 0 &&
                    tokens[k].role == table[entry].role) {
                    tn = strlen(tokens[k].token);
                    memcpy(tok, tokens[k].token, tn);
                }
        }
        if (hello) {
            AuthHelloRequest req = AUTH_HELLO_REQUEST__INIT;
            uint8_t body[300], *resp = NULL;
            size_t blen, rlen = 0;
            int status = 0;
            req.token.data = tok;
            req.token.len = tn;
            blen = auth_hello_request__pack(&req, body);
            const char *tenant_before = m->tenant;
            int role_before = m->role;
            int want = model_hello(m, tok, tn);
            if (rpcc_call(c, AUTH_SVC, AUTH_METHOD__AUTH_HELLO, body, blen, &status, &resp, &rlen,
                          NULL) < 0)
                return;
            seen.hello_ok += status == 0;
            seen.hello_eauth += status == SMP_EAUTH;
            seen.hello_estate += status == SMP_ESTATE;
            if (status != want) {
                char msg[200];
                snprintf(msg, sizeof(msg), "auth.HELLO with a %zu-byte token (kind %u): status %d, the "
                         "model says %d", tn, kind, status, want);
                free(resp);
                die(msg);
            }
            if (status == 0) { /* the identity answered is the model's */
                AuthHelloResponse *r = auth_hello_response__unpack(NULL, rlen, resp);
                const char *t = m->state == 1 ? m->tenant : tenant_before;
                int ro = m->state == 1 ? m->role : role_before;
                if (r == NULL || strcmp(r->tenant, t) != 0 || fzm_role_of(r->role) != ro)
                    die("auth.HELLO answered another identity");
                auth_hello_response__free_unpacked(r, NULL);
            }
            free(resp);
        }
        unsigned r = take(cur), blen = take(cur);
        if (blen > cur->n) blen = (unsigned)cur->n;
        request(c, m, r % n_rules, cur->p, blen);
        cur->p += blen;
        cur->n -= blen;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cursor cur = {data, size};
    leaf_desc d;
    char err[512];
    if (!started) start_master();
    take_leaf(&cur, &d);
    X509 *leaf = build_leaf(&d);
    if (leaf == NULL) {
        leaf_free(&d);
        return 0;
    }
    int entry = model_entry(&d);
    check_in_process(&d, leaf, entry);
    write_leaf(leaf);
    X509_free(leaf);

    rpcc_conn *c = NULL;
    rpcc_options o = {.timeout_ms = 10000, .tls_ca = ca_path, .tls_cert = leaf_pem,
                      .tls_key = leaf_key_path, .token = ""};
    if (rpcc_connect(tcp, &o, &c, err, sizeof(err)) == 0) {
        conn_model m = {0, 0, "", (int)SMP_ROLE_NONE};
        if (entry >= 0) seen.mapped++;
        else seen.unmapped++;
        if (entry >= 0) {
            m.state = 1;
            m.by_cert = 1;
            m.tenant = table[entry].tenant;
            m.role = (int)table[entry].role;
        }
        /* the identity the client asked (an empty HELLO) */
        if (strcmp(rpcc_auth_tenant(c), m.tenant) != 0 ||
            (entry >= 0 && fzm_role_of(rpcc_auth_role(c)) != m.role)) {
            char msg[300];
            snprintf(msg, sizeof(msg), "the master answered tenant '%s' role '%s', the model says "
                     "entry %d", rpcc_auth_tenant(c), rpcc_auth_role(c), entry);
            die(msg);
        }
        run_steps(&cur, c, &m, entry);
        rpcc_close(c);
    } else if ((seen.refused++, entry >= 0 && d.n_san < 64 && d.n_cn <= 1)) {
        /* an ordinary mapped certificate must get through the handshake */
        char msg[700];
        snprintf(msg, sizeof(msg), "a certificate of entry %d was refused: %s", entry, err);
        die(msg);
    }
    leaf_free(&d);
    fzm_check_alive(&master, TARGET);
    if (++inputs % 64 == 0) fzm_check_serving(&master, TARGET);
    return 0;
}

/* A seed: a certificate of the given names, then steps. */
static int seed(const char *dir, const char *name, const uint8_t *b, size_t n)
{
    return fuzz_seed(dir, name, b, n) > 0;
}

int fuzz_seeds(const char *dir)
{
    int n = 0;
    /* shape: 1 commonName (UTF8, value i exactly), no URI; 2 steps: a
     * request, then an empty HELLO and a request */
    for (unsigned v = 0; v < 8; v++) {
        char nm[32];
        uint8_t s[] = {1, 0, (uint8_t)(v << 3), 2, 0, 21, 0, 1, 7, 0};
        snprintf(nm, sizeof(nm), "cn-value-%u", v);
        n += seed(dir, nm, s, sizeof(s));
    }
    /* one URI (value 1: a's writer), b's writer's token (a contradiction),
     * then a request */
    {
        uint8_t s[] = {4, 1 << 3, 2, 4, 30, 0, 0, 12, 0};
        n += seed(dir, "san-writer-contradicted", s, sizeof(s));
    }
    /* a's reader by CN and by URI (one identity), its own token */
    {
        uint8_t s[] = {5, 0, 0, 4 << 3, 1, 7, 12, 0};
        n += seed(dir, "cn-and-san-one-identity", s, sizeof(s));
    }
    /* a's reader's CN and a's writer's URI: two identities, none; then b's
     * writer's token authenticates the connection */
    {
        uint8_t s[] = {5, 0, 0, 1 << 3, 2, 0, 12, 0, 4, 13, 0};
        n += seed(dir, "two-identities", s, sizeof(s));
    }
    /* two commonNames, both a-reader */
    {
        uint8_t s[] = {2, 0, 0, 0, 0, 1, 0, 12, 0};
        n += seed(dir, "two-cns", s, sizeof(s));
    }
    /* a NUL put into the CN a-reader; the BMP CN ops-admin; 264 more URIs */
    {
        uint8_t s[] = {1, 0, 3, 1, 4, 1, 0, 5, 0};
        n += seed(dir, "cn-with-nul", s, sizeof(s));
        uint8_t b[] = {1, 1, 3 << 3, 1, 0, 20, 0};
        n += seed(dir, "bmp-admin", b, sizeof(b));
        uint8_t m[] = {0x80 | 4, 1 << 3, 200, 1, 0, 12, 0};
        n += seed(dir, "many-uris", m, sizeof(m));
    }
    /* an unmapped certificate (CN=none) presenting b's writer's token */
    {
        uint8_t s[] = {1, 0, 4, 4, 'n', 'o', 'n', 'e', 2, 4, 30, 0, 0, 12, 0};
        n += seed(dir, "unmapped-then-token", s, sizeof(s));
    }
    /* a 12,000-byte CN */
    {
        uint8_t s[] = {1, 0, 6, 0x2e, 0xe0, 'Q', 1, 0, 12, 0};
        n += seed(dir, "long-cn", s, sizeof(s));
    }
    return n;
}
