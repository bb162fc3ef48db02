/* rpc_auth.h -- who may call what on the master's RPC: credentials, roles and
 * the one table of authorization rules of the host's services.
 *
 * Credentials are tokens, and client certificates. The master's config names each token by the SHA-256 of
 * its bytes (never the token itself) with the tenant and role it proves
 * (host_shim/config.h, auth.tokens). A client presents its token once per
 * connection with the host's auth service (HOST_SERVICE_AUTH, AUTH_HELLO);
 * rpc_server.c keeps the identity on the connection and, before any handler
 * runs, checks the method's rule against it: a connection that has not
 * authenticated gets SMP_EAUTH, a role below the rule SMP_EFORBIDDEN, and a
 * method without a rule (SMP_ROLE_NONE) is refused to everyone.
 *
 * A client certificate proves an identity too (auth.certificates): on a TLS
 * connection whose client certificate was verified against tls.ca, the
 * first entry it matches (rpc_auth_cert_find, rpc_auth_cert.c) sets the
 * connection's tenant and role at the end of the handshake, with no HELLO.
 * A certificate that matches no entry, or entries of different identities,
 * leaves the connection unauthenticated: a token still works on it. A HELLO
 * on a connection its certificate authenticated is answered with that
 * identity when the token proves the same tenant and role (or is empty);
 * a token of another identity is refused and the connection loses its
 * identity (credentials that disagree are not guessed between).
 *
 * Every method declares its rule where it is registered, in the same field
 * for the host's services and the plugins' (smp_rpc_method.min_role, ABI
 * 1.2); rpc_server.c keeps it beside the handler in its routing table, which
 * is therefore the one table of rules the server enforces and the one
 * AUTH_RULES lists (the integration test test_auth_rules holds every entry
 * of it against its own expectations, so a new method without a rule, or
 * with an unexpected one, fails it).
 * Which tenant's data a request may touch is the handler's concern
 * (rpc_server_call_caller): the tenant named in a request is never trusted.
 *
 * Everything here runs on the master's loop thread. */
#ifndef HOST_RPC_AUTH_H
#define HOST_RPC_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "store_plugin.h"

#define RPC_AUTH_TENANT_MAX 128  /* bytes of a tenant name */
#define RPC_AUTH_TOKEN_MAX 4096  /* bytes of a presented token */

/* A method anyone may call, authenticated or not (only auth.HELLO). */
#define RPC_ROLE_ANYONE ((smp_role)100)

/* One configured credential: SHA-256 of the token, its tenant and role. */
typedef struct rpc_auth_token {
    uint8_t sha256[32];
    char tenant[RPC_AUTH_TENANT_MAX + 1];
    smp_role role;
} rpc_auth_token;

/* How an auth.certificates entry matches a verified leaf certificate. */
typedef enum rpc_cert_match {
    RPC_CERT_CN = 1,      /* the subject has exactly one commonName, equal to value */
    RPC_CERT_SAN_URI = 2  /* one subjectAltName URI equals value */
} rpc_cert_match;

#define RPC_AUTH_CERT_VALUE_MAX 1024 /* bytes of a cn or san_uri value */

/* One configured certificate mapping: what to match, its tenant and role. */
typedef struct rpc_auth_cert {
    rpc_cert_match match;
    char value[RPC_AUTH_CERT_VALUE_MAX + 1];
    char tenant[RPC_AUTH_TENANT_MAX + 1];
    smp_role role;
} rpc_auth_cert;

/* The credentials of a master. NULL (or enabled 0) is "authentication off". */
typedef struct rpc_auth rpc_auth;

/* A new credential table with a copy of tokens[0, n); enabled 0 is
 * authentication off (the tokens are then ignored). Returns SMP_OK,
 * SMP_EINVAL (a role outside reader..admin, an empty tenant, or two entries
 * with the same hash) or SMP_ENOMEM. */
int rpc_auth_create(int enabled, const rpc_auth_token *tokens, size_t n, rpc_auth **out);

/* Give a the certificate mappings certs[0, n) (copied), replacing any
 * before. SMP_OK, SMP_EINVAL (a role outside reader..admin, an empty tenant
 * or value, an unknown match kind, or two entries matching the same thing)
 * or SMP_ENOMEM (a keeps its mappings). Before rpc_auth_serve. */
int rpc_auth_set_certificates(rpc_auth *a, const rpc_auth_cert *certs, size_t n);

/* The mapping of a verified leaf certificate among certs[0, n): SMP_OK with
 * the first matching entry in *out (borrowed from certs); SMP_ENOTFOUND when
 * none matches; SMP_EEXIST when entries of different tenants or roles
 * match (nothing is guessed). For any result but SMP_OK, note (when given)
 * gets a sentence naming the certificate's subject and the cause -- the
 * certificate's own names only, never another entry's tenant. leaf is an
 * OpenSSL X509, borrowed. */
struct x509_st;
int rpc_auth_cert_find(const rpc_auth_cert *certs, size_t n, struct x509_st *leaf,
                       const rpc_auth_cert **out, char *note, size_t cap);

/* The identity a verified leaf certificate maps to among a's mappings
 * (rpc_auth_cert_find): SMP_OK with *tenant (borrowed from a) and *role,
 * or its refusal with note. a is read-only once set up, so any thread may
 * ask (the admin endpoint's HTTP thread does). */
int rpc_auth_identify_cert(const rpc_auth *a, struct x509_st *leaf, const char **tenant,
                           smp_role *role, char *note, size_t cap);

/* Serve the auth service (HOST_SERVICE_AUTH) on srv with a's credentials and
 * turn the server's authorization on when a is enabled. a must outlive the
 * service (rpc_server_remove_service, or the server's close). HELLO with
 * authentication off answers enabled false and any token is accepted.
 * Returns rpc_server_add_service's code. */
struct rpc_server;
int rpc_auth_serve(rpc_auth *a, struct rpc_server *srv);

/* 1 when authentication is on. */
int rpc_auth_enabled(const rpc_auth *a);

void rpc_auth_free(rpc_auth *a);

/* Look token[0, len) up: SMP_OK with its entry in *out (borrowed from a),
 * SMP_EAUTH when no entry has its hash (or len is 0 or over
 * RPC_AUTH_TOKEN_MAX). Every entry is compared in constant time. */
int rpc_auth_check(const rpc_auth *a, const uint8_t *token, size_t len,
                   const rpc_auth_token **out);

/* "reader", "writer", "admin", "anyone", "none". */
const char *rpc_auth_role_name(smp_role r);

/* Whether name may be a tenant (an auth credential's, a dedicated node's):
 * 1 to RPC_AUTH_TENANT_MAX of A-Z a-z 0-9 . _ -, not starting with '.', and
 * not "weights" -- a tenant's objects are named "<tenant>/...", every
 * tenant's weight revisions "weights/<tenant>/...", and that tenant's
 * objects would lie among them. SMP_OK, or SMP_EINVAL with why (may be
 * NULL) saying which rule name breaks. */
int rpc_auth_tenant_check(const char *name, char *why, size_t cap);

/* The role a name stands for (reader, writer, admin): SMP_OK, or SMP_EINVAL. */
int rpc_auth_role_parse(const char *name, smp_role *out);

/* Parse 64 hex digits (either case) into out. SMP_OK or SMP_EINVAL. */
int rpc_auth_parse_sha256(const char *hex, uint8_t out[32]);

#endif /* HOST_RPC_AUTH_H */
