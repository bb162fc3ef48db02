/* config_auth.c -- the auth: section of the master's config (config.h):
 * the credentials (auth.tokens, each a SHA-256, a tenant and a role; a
 * plaintext token is refused; auth.certificates, each a cn or san_uri of a
 * client certificate, a tenant and a role) and the rules that tie auth to
 * the rest of the file (tokens or certificate mappings and the embedded
 * node's token file when it is on, certificate mappings only with verified
 * TLS clients on listen.tcp, a
 * non-loopback listen.admin only with TLS or auth.allow_insecure, no auth
 * key doing nothing when it is off, a non-loopback listen.tcp or
 * listen.admin only with auth or auth.allow_insecure), and the limits against abuse
 * (auth.limits, rpc_limits.h: request rate, in-flight bytes, revisions). Messages go through the loader's
 * cfg_fail (config_internal.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"
#include "net_addr.h"

static int check_limit_tenants(cfg_ctx *c, const host_config *cfg, const host_config_node *root);

/* The tenant or role key n of an entry at kp into tenant / *role (v its
 * scalar). 1 when n is neither (the caller's key), 0 when stored, or the
 * load's code for a bad value. */
static int apply_identity_key(cfg_ctx *c, host_config_node *n, const char *v, const char *kp,
                              char tenant[RPC_AUTH_TENANT_MAX + 1], smp_role *role)
{
    if (strcmp(n->key, "tenant") == 0) {
        char why[300];
        if (rpc_auth_tenant_check(v, why, sizeof(why)) < 0)
            return cfg_fail(c, SMP_EINVAL, n->line, kp, "%s", why);
        memcpy(tenant, v, strlen(v) + 1);
        return 0;
    }
    if (strcmp(n->key, "role") == 0) {
        if (rpc_auth_role_parse(v, role) < 0)
            return cfg_fail(c, SMP_EINVAL, n->line, kp, "\"%s\" is not a role (reader, "
                            "writer or admin)", v);
        return 0;
    }
    return 1;
}

/* auth.tokens: each entry a map of sha256 (64 hex digits of the SHA-256 of
 * the token), tenant (a name) and role (reader, writer, admin). A token
 * itself is refused: the file names credentials only by their hash. */
int cfg_apply_tokens(cfg_ctx *c, host_config *cfg, host_config_node *seq, const char *path)
{
    if (seq->n_items == 0) return 0;
    if ((cfg->auth_tokens = calloc(seq->n_items, sizeof(*cfg->auth_tokens))) == NULL)
        return cfg_oom(c);
    for (size_t i = 0; i < seq->n_items; i++) {
        host_config_node *e = seq->items[i];
        rpc_auth_token *t = &cfg->auth_tokens[i];
        char ep[CFG_KEY_PATH_MAX], kp[CFG_KEY_PATH_MAX];
        int have = 0;
        cfg_path_index(ep, path, i);
        if (e->kind != HOST_CFG_MAP)
            return cfg_fail(c, SMP_EINVAL, e->line, ep, "expected a mapping {sha256, tenant, role}, "
                            "found %s", cfg_node_kind_name(e));
        cfg->auth_n_tokens = i + 1;
        for (size_t k = 0; k < e->n_items; k++) {
            host_config_node *n = e->items[k];
            const char *v = n->kind == HOST_CFG_SCALAR && !cfg_node_is_null(n) ? n->scalar : NULL;
            cfg_path_key(kp, ep, n->key);
            if (strcmp(n->key, "token") == 0 || strcmp(n->key, "secret") == 0 ||
                strcmp(n->key, "password") == 0)
                return cfg_fail(c, SMP_EINVAL, n->key_line, kp, "a plaintext token is refused: "
                                "give sha256: <the SHA-256 of the token, 64 hex digits> "
                                "(e.g. printf %%s TOKEN | sha256sum)");
            if (strcmp(n->key, "sha256") != 0 && strcmp(n->key, "tenant") != 0 &&
                strcmp(n->key, "role") != 0)
                return cfg_fail(c, SMP_EINVAL, n->key_line, kp, "unknown key");
            if (v == NULL)
                return cfg_fail(c, SMP_EINVAL, n->line, kp, "expected a string");
            if (strcmp(n->key, "sha256") == 0) {
                if (rpc_auth_parse_sha256(v, t->sha256) < 0)
                    return cfg_fail(c, SMP_EINVAL, n->line, kp, "is not 64 hex digits (the SHA-256 "
                                    "of the token; a plaintext token is refused)");
                for (size_t j = 0; j < i; j++)
                    if (memcmp(cfg->auth_tokens[j].sha256, t->sha256, 32) == 0)
                        return cfg_fail(c, SMP_EINVAL, n->line, kp, "duplicate token: auth.tokens[%zu] "
                                        "has the same hash", j);
                have |= 1;
            } else {
                int rc = apply_identity_key(c, n, v, kp, t->tenant, &t->role);
                if (rc < 0) return rc;
                have |= strcmp(n->key, "tenant") == 0 ? 2 : 4;
            }
        }
        if (have != 7)
            return cfg_fail(c, SMP_EINVAL, e->line, ep, "missing %s",
                            !(have & 1) ? "sha256" : !(have & 2) ? "tenant" : "role");
    }
    return 0;
}

/* A cn value: 1 to RPC_AUTH_CERT_VALUE_MAX bytes, no control characters.
 * A san_uri value: as long, printable ASCII without spaces (an IA5String
 * URI), starting with a scheme (a letter, then letters, digits, + - .) and
 * ':'. 0 when good, else -1. */
static int check_cert_value(int san_uri, const char *v)
{
    size_t len = strlen(v), i = 0;
    if (len == 0 || len > RPC_AUTH_CERT_VALUE_MAX) return -1;
    for (size_t j = 0; j < len; j++) {
        unsigned char ch = (unsigned char)v[j];
        if (ch < 0x20 || ch == 0x7f || (san_uri && (ch <= 0x20 || ch > 0x7e))) return -1;
    }
    if (!san_uri) return 0;
    if (!((v[0] >= 'a' && v[0] <= 'z') || (v[0] >= 'A' && v[0] <= 'Z'))) return -1;
    for (i = 1; i < len && ((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= 'A' && v[i] <= 'Z') ||
                            (v[i] >= '0' && v[i] <= '9') || v[i] == '+' || v[i] == '-' ||
                            v[i] == '.'); i++) {
    }
    return i < len && v[i] == ':' ? 0 : -1;
}

/* auth.certificates: each entry a map of one of cn (the exact commonName of
 * a client certificate's subject) or san_uri (an exact subjectAltName URI,
 * e.g. a SPIFFE ID), a tenant and a role (rpc_auth_cert_find says how they
 * match). Two entries matching the same name are refused. */
int cfg_apply_certificates(cfg_ctx *c, host_config *cfg, host_config_node *seq, const char *path)
{
    if (seq->n_items == 0) return 0;
    if ((cfg->auth_certs = calloc(seq->n_items, sizeof(*cfg->auth_certs))) == NULL)
        return cfg_oom(c);
    for (size_t i = 0; i < seq->n_items; i++) {
        host_config_node *e = seq->items[i];
        rpc_auth_cert *t = &cfg->auth_certs[i];
        char ep[CFG_KEY_PATH_MAX], kp[CFG_KEY_PATH_MAX];
        int have = 0, rc;
        cfg_path_index(ep, path, i);
        if (e->kind != HOST_CFG_MAP)
            return cfg_fail(c, SMP_EINVAL, e->line, ep, "expected a mapping {cn or san_uri, "
                            "tenant, role}, found %s", cfg_node_kind_name(e));
        cfg->auth_n_certs = i + 1;
        for (size_t k = 0; k < e->n_items; k++) {
            host_config_node *n = e->items[k];
            const char *v = n->kind == HOST_CFG_SCALAR && !cfg_node_is_null(n) ? n->scalar : NULL;
            int san = strcmp(n->key, "san_uri") == 0;
            cfg_path_key(kp, ep, n->key);
            if (!san && strcmp(n->key, "cn") != 0 && strcmp(n->key, "tenant") != 0 &&
                strcmp(n->key, "role") != 0)
                return cfg_fail(c, SMP_EINVAL, n->key_line, kp, "unknown key (expected cn or "
                                "san_uri, tenant, role)");
            if (v == NULL)
                return cfg_fail(c, SMP_EINVAL, n->line, kp, "expected a string");
            if ((rc = apply_identity_key(c, n, v, kp, t->tenant, &t->role)) <= 0) {
                if (rc < 0) return rc;
                have |= strcmp(n->key, "tenant") == 0 ? 2 : 4;
                continue;
            }
            if (have & 1)
                return cfg_fail(c, SMP_EINVAL, n->key_line, kp, "an entry matches one name: give "
                                "cn or san_uri, not both (two entries map both)");
            if (check_cert_value(san, v) < 0)
                return cfg_fail(c, SMP_EINVAL, n->line, kp, san
                                ? "\"%.64s\" is not a URI (scheme:rest, printable ASCII without "
                                  "spaces, at most %d bytes), e.g. spiffe://example.org/team-a"
                                : "\"%.64s\" is not a commonName (1 to %d bytes, no control "
                                  "characters)", v, RPC_AUTH_CERT_VALUE_MAX);
            t->match = san ? RPC_CERT_SAN_URI : RPC_CERT_CN;
            memcpy(t->value, v, strlen(v) + 1);
            for (size_t j = 0; j < i; j++)
                if (cfg->auth_certs[j].match == t->match &&
                    strcmp(cfg->auth_certs[j].value, t->value) == 0)
                    return cfg_fail(c, SMP_EINVAL, n->line, kp, "duplicate: "
                                    "auth.certificates[%zu] has the same %s", j, n->key);
            have |= 1;
        }
        if (have != 7)
            return cfg_fail(c, SMP_EINVAL, e->line, ep, "missing %s",
                            !(have & 1) ? "cn or san_uri" : !(have & 2) ? "tenant" : "role");
    }
    return 0;
}

/* auth.certificates maps only what the TLS port verified: tls.verify_clients
 * (which check_tls ties to tls.cert, tls.key and tls.ca) and a listen.tcp
 * (the Unix socket has no certificates). */
static int check_certificates(cfg_ctx *c, const host_config *cfg, const host_config_node *root)
{
    const host_config_node *n = cfg_node_child(cfg_node_child(root, "auth"), "certificates");
    int line = n != NULL ? n->key_line : 0;
    if (cfg->auth_n_certs == 0) return 0;
    if (!cfg->tls_verify_clients)
        return cfg_fail(c, SMP_EINVAL, line, "auth.certificates", "needs tls.verify_clients: "
                        "true (with tls.cert, tls.key and tls.ca): only a client certificate "
                        "verified against tls.ca is mapped to a tenant");
    if (cfg->listen_tcp[0] == '\0')
        return cfg_fail(c, SMP_EINVAL, line, "auth.certificates", "needs listen.tcp: client "
                        "certificates arrive only on the TLS TCP port (the Unix socket has "
                        "none)");
    return 0;
}

/* The auth rules: with auth.enabled true there are tokens or certificate
 * mappings (check_certificates), the embedded node has its token file, and listen.admin on a non-loopback address (where
 * the admin endpoint asks for an admin token) has TLS or allow_insecure:
 * true; with it false no other auth.* key but allow_insecure is set, and
 * listen.tcp or listen.admin on a non-loopback address needs
 * allow_insecure: true (the endpoint would show every tenant's metrics to
 * anyone who reaches it). */
int cfg_check_auth(cfg_ctx *c, const host_config *cfg, const host_config_node *root)
{
    const host_config_node *auth = cfg_node_child(root, "auth");
    const host_config_node *en = cfg_node_child(auth, "enabled");
    const host_config_node *tcp = cfg_node_child(cfg_node_child(root, "listen"), "tcp");
    const host_config_node *admin = cfg_node_child(cfg_node_child(root, "listen"), "admin");
    int line = en != NULL ? en->line : 0;
    int rc;
    if (cfg->auth_enabled) {
        if (cfg->auth_n_tokens == 0 && cfg->auth_n_certs == 0)
            return cfg_fail(c, SMP_EINVAL, line, "auth.tokens",
                            "missing: auth.enabled true needs at least one token (or an "
                            "auth.certificates entry)");
        if ((rc = check_certificates(c, cfg, root)) < 0) return rc;
        if (cfg->node_embedded &&
            (cfg->auth_node_token_file == NULL || cfg->auth_node_token_file[0] == '\0'))
            return cfg_fail(c, SMP_EINVAL, line, "auth.node_token_file",
                            "missing: the embedded node registers through the RPC and needs an "
                            "admin token (a file holding it)");
        if (!net_listen_is_loopback(cfg->listen_admin) && cfg->tls_cert[0] == '\0' &&
            !cfg->auth_allow_insecure)
            return cfg_fail(c, SMP_EINVAL, admin != NULL ? admin->line : line, "listen.admin",
                            "%s is not a loopback address and tls.cert is not set: the admin "
                            "token its clients present would cross the network in plaintext; "
                            "set tls.cert and tls.key, or auth.allow_insecure: true",
                            cfg->listen_admin);
        return check_limit_tenants(c, cfg, root);
    }
    for (size_t i = 0; auth != NULL && auth->kind == HOST_CFG_MAP && i < auth->n_items; i++) {
        char path[CFG_KEY_PATH_MAX];
        if (strcmp(auth->items[i]->key, "enabled") == 0 ||
            strcmp(auth->items[i]->key, "allow_insecure") == 0)
            continue;
        cfg_path_key(path, "auth", auth->items[i]->key);
        return cfg_fail(c, SMP_EINVAL, auth->items[i]->key_line, path,
                        "is set but auth.enabled is false (it would do nothing)");
    }
    if (!net_listen_is_loopback(cfg->listen_tcp) && !cfg->auth_allow_insecure)
        return cfg_fail(c, SMP_EINVAL, tcp != NULL ? tcp->line : line, "listen.tcp",
                        "%s is not a loopback address and auth.enabled is false: anyone who "
                        "reaches it could act as any tenant; turn auth on, or set "
                        "auth.allow_insecure: true", cfg->listen_tcp);
    if (!net_listen_is_loopback(cfg->listen_admin) && !cfg->auth_allow_insecure)
        return cfg_fail(c, SMP_EINVAL, admin != NULL ? admin->line : line, "listen.admin",
                        "%s is not a loopback address and auth.enabled is false: anyone who "
                        "reaches it could read every tenant's metrics; turn auth on, or set "
                        "auth.allow_insecure: true", cfg->listen_admin);
    return 0;
}


/* One set of limits (auth.limits.connection, .tenant or .tenants.NAME) from
 * map into *v, only the keys it gives (an override keeps the rest);
 * max_revisions only where tenant is 1. Then a burst needs a rate. */
static int apply_limit_values(cfg_ctx *c, host_config_node *map, const char *path, int tenant,
                              rpc_limit_values *v)
{
    char kp[CFG_KEY_PATH_MAX];
    uint64_t u = 0;
    int rc;
    if (map->kind != HOST_CFG_MAP)
        return cfg_fail(c, SMP_EINVAL, map->line, path, "expected a mapping, found %s",
                        cfg_node_kind_name(map));
    for (size_t i = 0; i < map->n_items; i++) {
        host_config_node *n = map->items[i];
        cfg_path_key(kp, path, n->key);
        int rate = strcmp(n->key, "rate") == 0, burst = strcmp(n->key, "burst") == 0;
        int bytes = strcmp(n->key, "inflight_bytes") == 0;
        int revs = tenant && strcmp(n->key, "max_revisions") == 0;
        if (!rate && !burst && !bytes && !revs)
            return cfg_fail(c, SMP_EINVAL, n->key_line, kp, "unknown key (expected rate, burst, "
                            "inflight_bytes%s)", tenant ? ", max_revisions" : "");
        if (n->kind != HOST_CFG_SCALAR || cfg_node_is_null(n))
            return cfg_fail(c, SMP_EINVAL, n->line, kp, "expected an integer (leave the key out "
                            "for no limit)");
        /* a cap below RPC_LIMITS_MIN_INFLIGHT would refuse even the HELLO of
         * an admin (a connection is limited until it has authenticated) */
        if ((rc = cfg_check_uint(c, n, kp, bytes ? RPC_LIMITS_MIN_INFLIGHT : 1,
                                 rate ? 1000000u : burst ? 1000000000u
                                 : bytes ? (uint64_t)1 << 40 : UINT32_MAX,
                                 rate || burst ? UINT32_MAX : UINT64_MAX, &u)) < 0)
            return rc;
        if (rate) v->rate = (uint32_t)u;
        else if (burst) v->burst = (uint32_t)u;
        else if (bytes) v->inflight_bytes = u;
        else v->max_revisions = u;
    }
    if (v->burst != 0 && v->rate == 0) {
        cfg_path_key(kp, path, "burst");
        return cfg_fail(c, SMP_EINVAL, map->line, kp, "is set without a rate (requests a second "
                        "that refill the burst)");
    }
    return 0;
}

/* auth.limits: connection {rate, burst, inflight_bytes}, tenant {the same
 * and max_revisions}, the default of every tenant, and tenants {NAME: {any
 * of tenant's keys}}, which replace the default's for one tenant (that
 * tenant must have a token: cfg_check_auth). A key left out is no limit. */
int cfg_apply_limits(cfg_ctx *c, host_config *cfg, host_config_node *map, const char *path)
{
    rpc_limits_config *l = &cfg->auth_limits;
    host_config_node *tenants = NULL;
    char kp[CFG_KEY_PATH_MAX], tp[CFG_KEY_PATH_MAX];
    int rc;
    for (size_t i = 0; i < map->n_items; i++) {
        host_config_node *n = map->items[i];
        cfg_path_key(kp, path, n->key);
        if (strcmp(n->key, "tenants") == 0) {
            tenants = n;
            continue;
        }
        if (strcmp(n->key, "connection") != 0 && strcmp(n->key, "tenant") != 0)
            return cfg_fail(c, SMP_EINVAL, n->key_line, kp, "unknown key (expected connection, "
                            "tenant, tenants)");
        int is_tenant = strcmp(n->key, "tenant") == 0;
        if ((rc = apply_limit_values(c, n, kp, is_tenant, is_tenant ? &l->tenant
                                     : &l->connection)) < 0)
            return rc;
    }
    if (tenants == NULL) return 0;
    cfg_path_key(tp, path, "tenants");
    if (tenants->kind != HOST_CFG_MAP)
        return cfg_fail(c, SMP_EINVAL, tenants->line, tp, "expected a mapping of tenant names, "
                        "found %s", cfg_node_kind_name(tenants));
    if (tenants->n_items == 0) return 0;
    if ((l->tenants = calloc(tenants->n_items, sizeof(*l->tenants))) == NULL) return cfg_oom(c);
    for (size_t i = 0; i < tenants->n_items; i++) {
        host_config_node *n = tenants->items[i];
        rpc_limit_tenant *t = &l->tenants[i];
        cfg_path_key(kp, tp, n->key);
        if (strlen(n->key) > RPC_AUTH_TENANT_MAX)
            return cfg_fail(c, SMP_EINVAL, n->key_line, kp, "is not a tenant (over %d bytes)",
                            RPC_AUTH_TENANT_MAX);
        snprintf(t->tenant, sizeof(t->tenant), "%s", n->key);
        t->v = l->tenant;
        l->n_tenants = i + 1;
        if ((rc = apply_limit_values(c, n, kp, 1, &t->v)) < 0) return rc;
    }
    return 0;
}

/* Every tenant auth.limits.tenants names has a token or a certificate mapping. */
static int check_limit_tenants(cfg_ctx *c, const host_config *cfg, const host_config_node *root)
{
    const host_config_node *tn =
        cfg_node_child(cfg_node_child(cfg_node_child(root, "auth"), "limits"), "tenants");
    for (size_t i = 0; i < cfg->auth_limits.n_tenants; i++) {
        const char *name = cfg->auth_limits.tenants[i].tenant;
        char kp[CFG_KEY_PATH_MAX];
        int found = 0;
        for (size_t j = 0; j < cfg->auth_n_tokens && !found; j++)
            found = strcmp(cfg->auth_tokens[j].tenant, name) == 0;
        for (size_t j = 0; j < cfg->auth_n_certs && !found; j++)
            found = strcmp(cfg->auth_certs[j].tenant, name) == 0;
        if (found) continue;
        cfg_path_key(kp, "auth.limits.tenants", name);
        return cfg_fail(c, SMP_EINVAL, tn != NULL && i < tn->n_items ? tn->items[i]->key_line : 0,
                        kp, "no token of auth.tokens (nor entry of auth.certificates) has tenant "
                        "\"%s\"", name);
    }
    return 0;
}
