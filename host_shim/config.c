/* config.c -- parse the Store Master's YAML configuration, strictly.
 *
 * Loading is two steps. First libyaml's event stream is turned into a tree of
 * host_config_node (config_tree.c, which refuses what the tree cannot
 * express faithfully). Then the tree is walked against a closed schema (the
 * field tables below) that fills a host_config which started from the
 * defaults. The first problem ends the
 * load with one "FILE:LINE: key.path: cause" message and a zeroed config;
 * nothing half-filled survives. Each plugin's "config:" block is not checked:
 * its subtree is moved out of the document tree into the plugin entry as is.
 * Relative paths are resolved against the config file's directory at the end,
 * once data_dir is known (node.cold_dir defaults to <data_dir>/cold). Lookups
 * into the parsed config live in config_view.c. */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "config_internal.h"
#include "net_addr.h"

#define CFG_MAX_FILE_BYTES (16u << 20)     /* larger files are refused */

/* ------------------------------------------------------------------------ */
/* The schema                                                                */
/* ------------------------------------------------------------------------ */

typedef enum field_kind {
    FK_SECTION,     /* a mapping described by `sub` */
    FK_PLUGINS,     /* the plugins sequence */
    FK_ADDR,        /* "host:port" or "" (off) */
    FK_PATH,        /* a non-empty path */
    FK_PATH_OR_OFF, /* a path or "" (off) */
    FK_NAME,        /* an identifier: 1..64 of [A-Za-z0-9._-] */
    FK_U32,
    FK_U64,
    FK_RATIO,       /* a number in (0, 1) */
    FK_BOOL,
    FK_BACKEND,
    FK_RESIDENCY,
    FK_MODE,
    FK_ENDPOINTS,   /* "host:port[,host:port...]" (ports 1..65535) or "" */
    FK_PREFIX,      /* an etcd key prefix: "/", then printable ASCII, ending in "/" */
    FK_REMOVED,     /* a key that no longer exists: refused with `removed` */
    FK_AUTH_TOKENS, /* auth.tokens: a sequence of {sha256, tenant, role} */
    FK_AUTH_LIMITS, /* auth.limits: a mapping (config_auth.c) */
    FK_AUTH_CERTS,  /* auth.certificates: a sequence of {cn | san_uri, tenant, role} */
    FK_LOCAL_PEERS  /* node.local_peers: a sequence of "uid:N" / "gid:N" (config_node.c) */
} field_kind;

typedef struct field_spec {
    const char *key;
    field_kind kind;
    size_t offset;                 /* into host_config */
    uint64_t min, max;             /* FK_U32, FK_U64 */
    const struct field_spec *sub;  /* FK_SECTION */
    const char *removed;           /* FK_REMOVED: why, and what to do instead */
} field_spec;

#define F_U32(k, m, lo, hi) { k, FK_U32, offsetof(host_config, m), lo, hi, NULL, NULL }
#define F_U64(k, m, lo, hi) { k, FK_U64, offsetof(host_config, m), lo, hi, NULL, NULL }
#define F_OF(k, kind, m) { k, kind, offsetof(host_config, m), 0, 0, NULL, NULL }
#define F_SEC(k, t) { k, FK_SECTION, 0, 0, 0, t, NULL }
#define F_REMOVED(k, why) { k, FK_REMOVED, 0, 0, 0, NULL, why }
#define F_END { NULL, FK_SECTION, 0, 0, 0, NULL, NULL }

static const field_spec listen_fields[] = {
    F_OF("tcp", FK_ADDR, listen_tcp),
    F_OF("unix", FK_PATH_OR_OFF, listen_unix),
    F_OF("admin", FK_ADDR, listen_admin),
    F_U32("max_frame_bytes", max_frame_bytes, 1024, 1073741824u),
    F_END
};

static const field_spec oplog_fields[] = {
    F_OF("backend", FK_BACKEND, oplog_backend),
    F_U64("segment_bytes", oplog_segment_bytes, 4096, UINT64_MAX),
    F_U32("max_batch_records", oplog_max_batch_records, 1, UINT32_MAX),
    F_OF("preallocate", FK_BOOL, oplog_preallocate),
    F_REMOVED("carry_unknown_types",
              "was removed: records and snapshot sections of a plugin that is absent or "
              "disabled are always kept verbatim, so delete this key"),
    F_END
};

static const field_spec snapshot_fields[] = {
    F_U64("every_records", snapshot_every_records, 0, UINT64_MAX),
    F_U32("keep", snapshot_keep, 1, UINT32_MAX),
    F_U32("write_timeout_s", snapshot_write_timeout_s, 1, 604800),
    F_END
};

static const field_spec fsck_fields[] = {
    F_U32("every_s", fsck_every_s, 0, UINT32_MAX),
    F_U64("bytes_per_s", fsck_bytes_per_s, 1048576, UINT64_MAX),
    F_END
};

static const field_spec memory_fields[] = {
    F_OF("high_watermark", FK_RATIO, memory_high_watermark),
    F_OF("low_watermark", FK_RATIO, memory_low_watermark),
    F_OF("evict_without_cold_copy", FK_BOOL, memory_evict_without_cold_copy),
    F_END
};

static const field_spec ha_fields[] = {
    F_OF("enabled", FK_BOOL, ha_enabled),
    F_OF("id", FK_NAME, ha_id),
    F_OF("etcd_endpoints", FK_ENDPOINTS, ha_etcd_endpoints),
    F_OF("prefix", FK_PREFIX, ha_prefix),
    F_U32("lease_ttl_s", ha_lease_ttl_s, 1, 60),
    F_OF("advertise", FK_PATH_OR_OFF, ha_advertise),
    F_OF("snapshot_dir", FK_PATH, ha_snapshot_dir),
    F_U64("gc_keep_records", ha_gc_keep_records, 0, UINT64_MAX),
    F_OF("fast_failover", FK_BOOL, ha_fast_failover),
    F_OF("etcd_tls_ca", FK_PATH, ha_etcd_tls_ca),
    F_OF("etcd_tls_cert", FK_PATH, ha_etcd_tls_cert),
    F_OF("etcd_tls_key", FK_PATH, ha_etcd_tls_key),
    F_OF("etcd_user", FK_NAME, ha_etcd_user),
    F_OF("etcd_password_file", FK_PATH, ha_etcd_password_file),
    F_END
};

static const field_spec node_fields[] = {
    F_OF("embedded", FK_BOOL, node_embedded),
    F_OF("segment_dir", FK_PATH, node_segment_dir),
    F_U64("segment_bytes", node_segment_bytes, 1048576, UINT64_MAX),
    F_OF("cold_dir", FK_PATH, node_cold_dir),
    F_OF("id", FK_NAME, node_id),
    F_OF("data_listen", FK_ADDR, node_data_listen),
    F_U32("poll_ms", node_poll_ms, 10, 60000),
    F_U32("timeout_ms", node_timeout_ms, 100, 3600000),
    F_OF("cold_verify_from_device", FK_BOOL, node_cold_verify_from_device),
    F_OF("segment_prefault", FK_BOOL, node_segment_prefault),
    F_U32("ticket_ttl_ms", node_ticket_ttl_ms, 1000, 3600000),
    F_U32("put_timeout_ms", node_put_timeout_ms, 1000, 86400000),
    F_OF("require_read_tickets", FK_BOOL, node_require_read_tickets),
    F_OF("allow_insecure_reads", FK_BOOL, node_allow_insecure_reads),
    F_OF("tenant", FK_PATH_OR_OFF, node_tenant),
    F_OF("local_socket", FK_PATH_OR_OFF, node_local_socket),
    { "local_peers", FK_LOCAL_PEERS, 0, 0, 0, NULL, NULL },
    F_END
};

static const field_spec cluster_fields[] = {
    F_OF("default_weight_preferred_residency", FK_RESIDENCY,
         cluster.default_weight_preferred_residency),
    F_OF("default_weight_mixed_hot_ratio", FK_RATIO, cluster.default_weight_mixed_hot_ratio),
    F_OF("default_weight_migration_mode", FK_MODE, cluster.default_weight_migration_mode),
    F_OF("weight_management_oplog_capability_confirmed", FK_BOOL,
         cluster.weight_management_oplog_capability_confirmed),
    F_OF("weight_lineage_oplog_capability_confirmed", FK_BOOL,
         cluster.weight_lineage_oplog_capability_confirmed),
    F_U64("weight_migration_cooldown_ms", cluster.weight_migration_cooldown_ms, 0, UINT64_MAX),
    F_U64("weight_migration_max_members_per_round",
          cluster.weight_migration_max_members_per_round, 1, UINT64_MAX),
    F_U64("weight_migration_max_bytes_per_round",
          cluster.weight_migration_max_bytes_per_round, 1, UINT64_MAX),
    F_END
};

static const field_spec tls_fields[] = {
    F_OF("cert", FK_PATH_OR_OFF, tls_cert),
    F_OF("key", FK_PATH_OR_OFF, tls_key),
    F_OF("ca", FK_PATH_OR_OFF, tls_ca),
    F_OF("verify_clients", FK_BOOL, tls_verify_clients),
    F_END
};

static const field_spec auth_fields[] = {
    F_OF("enabled", FK_BOOL, auth_enabled),
    F_OF("allow_insecure", FK_BOOL, auth_allow_insecure),
    F_OF("node_token_file", FK_PATH, auth_node_token_file),
    { "tokens", FK_AUTH_TOKENS, 0, 0, 0, NULL, NULL },
    { "limits", FK_AUTH_LIMITS, 0, 0, 0, NULL, NULL },
    { "certificates", FK_AUTH_CERTS, 0, 0, 0, NULL, NULL },
    F_END
};

static const field_spec top_fields[] = {
    F_SEC("listen", listen_fields),
    F_OF("data_dir", FK_PATH, data_dir),
    F_SEC("oplog", oplog_fields),
    F_SEC("snapshot", snapshot_fields),
    F_SEC("fsck", fsck_fields),
    F_SEC("memory", memory_fields),
    F_SEC("ha", ha_fields),
    F_SEC("node", node_fields),
    F_SEC("cluster", cluster_fields),
    F_SEC("tls", tls_fields),
    { "plugins", FK_PLUGINS, 0, 0, 0, NULL, NULL },
    F_SEC("auth", auth_fields),
    F_END
};

static const char *const backend_names[] = { "file", "etcd", NULL };
static const char *const residency_names[] = { "hot", "cold", "mixed", NULL };
static const char *const mode_names[] = { "pinned", "manual", "auto", NULL };

/* What a field expects, for "expected X, found Y" messages. */
static const char *field_expects(field_kind k)
{
    switch (k) {
    case FK_SECTION:
    case FK_AUTH_LIMITS: return "a mapping";
    case FK_PLUGINS:
    case FK_LOCAL_PEERS:
    case FK_AUTH_TOKENS:
    case FK_AUTH_CERTS: return "a sequence";
    case FK_U32:
    case FK_U64: return "an integer";
    case FK_RATIO: return "a number";
    case FK_BOOL: return "a boolean (true or false)";
    default: return "a string";
    }
}

/* Parse decimal digits into *out. Returns 0, -1 when the text is not an
 * unsigned decimal integer, -2 when it is negative, -3 when it overflows. */
static int parse_decimal(const char *text, uint64_t *out)
{
    const char *p = text;
    uint64_t v = 0;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    if (*p == '\0') return -1;
    for (; *p != '\0'; p++) {
        if (*p < '0' || *p > '9') return -1;
    }
    if (neg) return -2;
    for (p = text; *p != '\0'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return -3;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* Check an integer scalar against [min, max] and return it in *out. */
int cfg_check_uint(cfg_ctx *c, const host_config_node *n, const char *path,
                      uint64_t min, uint64_t max, uint64_t type_max, uint64_t *out)
{
    char q[CFG_QUOTE_MAX + 16];
    uint64_t v = 0;
    int r;

    cfg_quote_text(q, sizeof(q), n->scalar);
    r = parse_decimal(n->scalar, &v);
    if (n->quoted && r != -1)
        return cfg_fail(c, SMP_EINVAL, n->line, path,
                        "%s is quoted: a string, not an integer", q);
    if (r == -1) return cfg_fail(c, SMP_EINVAL, n->line, path, "%s is not an integer", q);
    if (r == -2) return cfg_fail(c, SMP_ERANGE, n->line, path, "%s must not be negative", n->scalar);
    if (r == -3 || v > type_max)
        return cfg_fail(c, SMP_ERANGE, n->line, path, "%s is too large (at most %" PRIu64 ")",
                        n->scalar, max);
    if (v < min || v > max) {
        if (max != type_max)
            return cfg_fail(c, SMP_ERANGE, n->line, path,
                            "%s is outside %" PRIu64 " .. %" PRIu64, n->scalar, min, max);
        if (min == 1)
            return cfg_fail(c, SMP_ERANGE, n->line, path, "%s must be greater than 0", n->scalar);
        return cfg_fail(c, SMP_ERANGE, n->line, path, "%s must be at least %" PRIu64,
                        n->scalar, min);
    }
    *out = v;
    return 0;
}

/* A number strictly inside (0, 1). Only decimal notation is accepted. */
static int check_ratio(cfg_ctx *c, const host_config_node *n, const char *path, double *out)
{
    char q[CFG_QUOTE_MAX + 16];
    const char *s = n->scalar;
    char *end = NULL;
    double d;

    cfg_quote_text(q, sizeof(q), s);
    if (s[0] == '\0' || strspn(s, "0123456789.eE+-") != strlen(s))
        return cfg_fail(c, SMP_EINVAL, n->line, path, "%s is not a number", q);
    errno = 0;
    d = strtod(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE)
        return cfg_fail(c, SMP_EINVAL, n->line, path, "%s is not a number", q);
    if (n->quoted)
        return cfg_fail(c, SMP_EINVAL, n->line, path, "%s is quoted: a string, not a number", q);
    if (!(d > 0.0 && d < 1.0))
        return cfg_fail(c, SMP_ERANGE, n->line, path, "%s is outside (0, 1)", s);
    *out = d;
    return 0;
}

static int check_bool(cfg_ctx *c, const host_config_node *n, const char *path, int *out)
{
    char q[CFG_QUOTE_MAX + 16];
    int v;
    cfg_quote_text(q, sizeof(q), n->scalar);
    if (strcmp(n->scalar, "true") == 0)
        v = 1;
    else if (strcmp(n->scalar, "false") == 0)
        v = 0;
    else
        return cfg_fail(c, SMP_EINVAL, n->line, path, "%s is not a boolean (true or false)", q);
    if (n->quoted)
        return cfg_fail(c, SMP_EINVAL, n->line, path,
                        "%s is quoted: a string, not a boolean (true or false)", q);
    *out = v;
    return 0;
}

/* Match a name against a NULL-terminated list; *out is its 1-based index
 * (the enums of config.h count from 1 in list order). */
static int check_enum(cfg_ctx *c, const host_config_node *n, const char *path,
                      const char *const *names, int *out)
{
    char q[CFG_QUOTE_MAX + 16];
    char list[128] = "";
    size_t used = 0;
    for (int i = 0; names[i] != NULL; i++) {
        if (strcmp(n->scalar, names[i]) == 0) {
            *out = i + 1;
            return 0;
        }
    }
    for (int i = 0; names[i] != NULL; i++) {
        int w = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", names[i]);
        if (w < 0 || (size_t)w >= sizeof(list) - used) break;
        used += (size_t)w;
    }
    cfg_quote_text(q, sizeof(q), n->scalar);
    return cfg_fail(c, SMP_EINVAL, n->line, path, "%s is not one of %s", q, list);
}

/* "host:port" with a non-empty host net_parse_listen takes (what every
 * listener parses: a numeric address, localhost or *) and a port 0..65535,
 * or "" (off). */
static int check_addr(cfg_ctx *c, const host_config_node *n, const char *path)
{
    char q[CFG_QUOTE_MAX + 16];
    const char *s = n->scalar;
    const char *colon = strrchr(s, ':');
    uint64_t port = 0;
    if (s[0] == '\0') return 0;
    struct sockaddr_storage ss;
    if (colon != NULL && colon != s && colon[1] != '\0' && strlen(colon + 1) <= 5 &&
        parse_decimal(colon + 1, &port) == 0 && port <= 65535 && net_parse_listen(s, &ss) == SMP_OK)
        return 0;
    cfg_quote_text(q, sizeof(q), s);
    return cfg_fail(c, SMP_EINVAL, n->line, path,
                    "%s is not \"host:port\" (port 0..65535; host a numeric IPv4 or [IPv6] "
                    "address, localhost, or * for any) or \"\" (off)", q);
}

/* One "host:port" of a list: a non-empty host without ',' and a port
 * 1..65535. */
static int endpoint_ok(const char *s, size_t len)
{
    const char *colon = memrchr(s, ':', len);
    uint64_t port = 0;
    char digits[8];
    size_t dl;
    if (colon == NULL || colon == s) return 0;
    dl = len - (size_t)(colon + 1 - s);
    if (dl == 0 || dl > 5) return 0;
    memcpy(digits, colon + 1, dl);
    digits[dl] = '\0';
    return parse_decimal(digits, &port) == 0 && port >= 1 && port <= 65535;
}

/* A comma-separated list of "host:port" (etcd's members), or "". The
 * message names the first bad item; a URL (scheme://...) gets its own
 * sentence: TLS to etcd is a key of its own, not a scheme. */
static int check_endpoints(cfg_ctx *c, const host_config_node *n, const char *path)
{
    char q[CFG_QUOTE_MAX + 16];
    const char *s = n->scalar;
    if (s[0] == '\0') return 0;
    for (const char *item = s;;) {
        const char *end = strchr(item, ',');
        size_t len = end != NULL ? (size_t)(end - item) : strlen(item);
        if (memmem(item, len, "://", 3) != NULL) {
            /* A URL (https:// in particular) is refused, never taken as
             * a host name and left to fail, or read as asking for TLS,
             * which ha.etcd_tls_ca turns on for every member. */
            char bad[CFG_QUOTE_MAX];
            snprintf(bad, sizeof(bad), "%.*s", (int)len, item);
            cfg_quote_text(q, sizeof(q), bad);
            return cfg_fail(c, SMP_EINVAL, n->line, path,
                            "item %s is a URL: give etcd's client address as \"host:port\" "
                            "(TLS to etcd is set with ha.etcd_tls_ca, not https://)", q);
        }
        if (!endpoint_ok(item, len)) {
            char bad[CFG_QUOTE_MAX];
            snprintf(bad, sizeof(bad), "%.*s", (int)len, item);
            cfg_quote_text(q, sizeof(q), bad);
            return cfg_fail(c, SMP_EINVAL, n->line, path,
                            "item %s is not \"host:port\" (port 1..65535)", q);
        }
        if (end == NULL) return 0;
        item = end + 1;
    }
}

/* An etcd key prefix: starts and ends with '/', 2..128 printable ASCII
 * characters without spaces. */
static int check_prefix(cfg_ctx *c, const host_config_node *n, const char *path)
{
    char q[CFG_QUOTE_MAX + 16];
    const char *s = n->scalar;
    size_t len = strlen(s);
    int ok = len >= 1 && len <= 128 && s[0] == '/' && s[len - 1] == '/';
    for (size_t i = 0; ok && i < len; i++) ok = s[i] > ' ' && s[i] < 0x7f;
    if (ok) return 0;
    cfg_quote_text(q, sizeof(q), s);
    return cfg_fail(c, SMP_EINVAL, n->line, path,
                    "%s is not a key prefix (\"/\" ... \"/\", at most 128 printable "
                    "characters, no spaces)", q);
}

/* Replace the heap string at *slot with a copy of s. */
static int set_string(cfg_ctx *c, char **slot, const char *s)
{
    char *copy = strdup(s);
    if (copy == NULL) return cfg_oom(c);
    free(*slot);
    *slot = copy;
    return 0;
}

static int apply_map(cfg_ctx *c, host_config *cfg, host_config_node *map,
                     const char *path, const field_spec *fields);
static int apply_plugins(cfg_ctx *c, host_config *cfg, host_config_node *seq,
                         const char *path);

/* Check one value node against its field and store it into cfg. */
static int apply_field(cfg_ctx *c, host_config *cfg, host_config_node *n,
                       const char *path, const field_spec *f)
{
    char *base = (char *)cfg + f->offset;
    int rc;
    int iv = 0;
    uint64_t u = 0;

    if (f->kind == FK_REMOVED) return cfg_fail(c, SMP_EINVAL, n->key_line, path, "%s", f->removed);
    if (f->kind == FK_SECTION || f->kind == FK_PLUGINS || f->kind == FK_AUTH_TOKENS ||
        f->kind == FK_AUTH_LIMITS || f->kind == FK_AUTH_CERTS || f->kind == FK_LOCAL_PEERS) {
        host_config_node_kind want =
            f->kind == FK_SECTION || f->kind == FK_AUTH_LIMITS ? HOST_CFG_MAP : HOST_CFG_SEQ;
        if (cfg_node_is_null(n)) return 0; /* "listen:" with nothing below: all defaults */
        if (n->kind != want)
            return cfg_fail(c, SMP_EINVAL, n->line, path, "expected %s, found %s",
                            field_expects(f->kind), cfg_node_kind_name(n));
        if (f->kind == FK_SECTION) return apply_map(c, cfg, n, path, f->sub);
        if (f->kind == FK_AUTH_TOKENS) return cfg_apply_tokens(c, cfg, n, path);
        if (f->kind == FK_AUTH_LIMITS) return cfg_apply_limits(c, cfg, n, path);
        if (f->kind == FK_AUTH_CERTS) return cfg_apply_certificates(c, cfg, n, path);
        if (f->kind == FK_LOCAL_PEERS) return cfg_apply_local_peers(c, cfg, n, path);
        return apply_plugins(c, cfg, n, path);
    }
    if (n->kind != HOST_CFG_SCALAR)
        return cfg_fail(c, SMP_EINVAL, n->line, path, "expected %s, found %s",
                        field_expects(f->kind), cfg_node_kind_name(n));
    if (cfg_node_is_null(n))
        return cfg_fail(c, SMP_EINVAL, n->line, path, "has no value (expected %s)",
                        field_expects(f->kind));
    switch (f->kind) {
    case FK_ADDR:
        if ((rc = check_addr(c, n, path)) < 0) return rc;
        return set_string(c, (char **)base, n->scalar);
    case FK_PATH:
        if (n->scalar[0] == '\0')
            return cfg_fail(c, SMP_EINVAL, n->line, path, "must not be empty");
        return set_string(c, (char **)base, n->scalar);
    case FK_PATH_OR_OFF:
        return set_string(c, (char **)base, n->scalar);
    case FK_NAME: {
        size_t len = strlen(n->scalar);
        int ok = len >= 1 && len <= 64 && n->scalar[0] != '.';
        for (size_t i = 0; ok && i < len; i++) {
            char ch = n->scalar[i];
            ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '.' || ch == '_' || ch == '-';
        }
        if (!ok)
            return cfg_fail(c, SMP_EINVAL, n->line, path,
                            "\"%s\" is not a name (1 to 64 of A-Z a-z 0-9 . _ -, not starting with .)",
                            n->scalar);
        return set_string(c, (char **)base, n->scalar);
    }
    case FK_U32:
        if ((rc = cfg_check_uint(c, n, path, f->min, f->max, UINT32_MAX, &u)) < 0) return rc;
        *(uint32_t *)base = (uint32_t)u;
        return 0;
    case FK_U64:
        if ((rc = cfg_check_uint(c, n, path, f->min, f->max, UINT64_MAX, &u)) < 0) return rc;
        *(uint64_t *)base = u;
        return 0;
    case FK_RATIO:
        return check_ratio(c, n, path, (double *)base);
    case FK_BOOL:
        return check_bool(c, n, path, (int *)base);
    case FK_BACKEND:
        if ((rc = check_enum(c, n, path, backend_names, &iv)) < 0) return rc;
        *(host_oplog_backend *)base = (host_oplog_backend)iv;
        return 0;
    case FK_ENDPOINTS:
        if ((rc = check_endpoints(c, n, path)) < 0) return rc;
        return set_string(c, (char **)base, n->scalar);
    case FK_PREFIX:
        if ((rc = check_prefix(c, n, path)) < 0) return rc;
        return set_string(c, (char **)base, n->scalar);
    case FK_RESIDENCY:
        if ((rc = check_enum(c, n, path, residency_names, &iv)) < 0) return rc;
        *(host_residency *)base = (host_residency)iv;
        return 0;
    case FK_MODE:
        if ((rc = check_enum(c, n, path, mode_names, &iv)) < 0) return rc;
        *(host_migration_mode *)base = (host_migration_mode)iv;
        return 0;
    default:
        return cfg_fail(c, SMP_EINVAL, n->line, path, "internal: unhandled field kind");
    }
}

/* Apply every pair of a mapping against its field table, in file order.
 * An unknown key fails on the key's line. */
static int apply_map(cfg_ctx *c, host_config *cfg, host_config_node *map,
                     const char *path, const field_spec *fields)
{
    int rc;
    for (size_t i = 0; i < map->n_items; i++) {
        host_config_node *n = map->items[i];
        const field_spec *f = fields;
        char child_path[CFG_KEY_PATH_MAX];

        cfg_path_key(child_path, path, n->key);
        while (f->key != NULL && strcmp(f->key, n->key) != 0) f++;
        if (f->key == NULL) return cfg_fail(c, SMP_EINVAL, n->key_line, child_path, "unknown key");
        if ((rc = apply_field(c, cfg, n, child_path, f)) < 0) return rc;
    }
    return 0;
}

/* Fill one plugins[] entry from its mapping. The "config:" subtree is moved
 * out of the document tree into p->block (its slot in the tree becomes
 * NULL), so p owns it from then on. */
static int apply_plugin(cfg_ctx *c, host_config_node *entry, const char *path,
                        host_config_plugin *p)
{
    int rc;
    char child_path[CFG_KEY_PATH_MAX];
    host_config_node *path_node = NULL;

    p->enabled = 1;
    p->line = entry->line;
    for (size_t i = 0; i < entry->n_items; i++) {
        host_config_node *n = entry->items[i];
        cfg_path_key(child_path, path, n->key);
        if (strcmp(n->key, "path") == 0) {
            if (n->kind != HOST_CFG_SCALAR)
                return cfg_fail(c, SMP_EINVAL, n->line, child_path,
                                "expected a string, found %s", cfg_node_kind_name(n));
            if (cfg_node_is_null(n))
                return cfg_fail(c, SMP_EINVAL, n->line, child_path,
                                "has no value (expected a string)");
            if (n->scalar[0] == '\0')
                return cfg_fail(c, SMP_EINVAL, n->line, child_path, "must not be empty");
            path_node = n;
        } else if (strcmp(n->key, "enabled") == 0) {
            if (n->kind != HOST_CFG_SCALAR)
                return cfg_fail(c, SMP_EINVAL, n->line, child_path,
                                "expected a boolean (true or false), found %s",
                                cfg_node_kind_name(n));
            if ((rc = check_bool(c, n, child_path, &p->enabled)) < 0) return rc;
        } else if (strcmp(n->key, "config") == 0) {
            if (n->kind != HOST_CFG_MAP && !cfg_node_is_null(n))
                return cfg_fail(c, SMP_EINVAL, n->line, child_path,
                                "expected a mapping, found %s", cfg_node_kind_name(n));
        } else {
            return cfg_fail(c, SMP_EINVAL, n->key_line, child_path, "unknown key");
        }
    }
    cfg_path_key(child_path, path, "path");
    if (path_node == NULL) return cfg_fail(c, SMP_EINVAL, entry->line, child_path, "missing");
    if ((rc = set_string(c, &p->path, path_node->scalar)) < 0) return rc;
    p->path_line = path_node->line;
    p->config_line = cfg_node_child(entry, "config") != NULL
                         ? cfg_node_child(entry, "config")->key_line : 0;

    for (size_t i = 0; i < entry->n_items; i++) {
        host_config_node *n = entry->items[i];
        if (n == NULL || strcmp(n->key, "config") != 0 || n->kind != HOST_CFG_MAP) continue;
        entry->items[i] = NULL;
        free(n->key);
        n->key = NULL;
        p->block = n;
    }
    if (p->block == NULL) {
        host_config_node *empty = calloc(1, sizeof(*empty));
        host_config_node *cfg_node = cfg_node_child(entry, "config");
        if (empty == NULL) return cfg_oom(c);
        empty->kind = HOST_CFG_MAP;
        empty->line = cfg_node != NULL ? cfg_node->line : entry->line;
        p->block = empty;
    }
    return 0;
}

static int apply_plugins(cfg_ctx *c, host_config *cfg, host_config_node *seq,
                         const char *path)
{
    int rc;
    if (seq->n_items == 0) return 0;
    cfg->plugins = calloc(seq->n_items, sizeof(*cfg->plugins));
    if (cfg->plugins == NULL) return cfg_oom(c);
    for (size_t i = 0; i < seq->n_items; i++) {
        host_config_node *entry = seq->items[i];
        char entry_path[CFG_KEY_PATH_MAX];

        cfg_path_index(entry_path, path, i);
        if (entry->kind != HOST_CFG_MAP)
            return cfg_fail(c, SMP_EINVAL, entry->line, entry_path,
                            "expected a mapping, found %s", cfg_node_kind_name(entry));
        cfg->n_plugins = i + 1; /* host_config_free frees what is filled */
        if ((rc = apply_plugin(c, entry, entry_path, &cfg->plugins[i])) < 0) return rc;
    }
    return 0;
}

/* The line of a value the file set (0 when it did not). */
static int value_line(const host_config_node *n)
{
    return n != NULL ? n->line : 0;
}

/* ha.<a> and ha.<b> (values va and vb) are set together (or neither: none
 * says what that means), and only over TLS to etcd (why_tls: what needs
 * it). A refusal is on the line of the one set, naming the one missing. */
static int etcd_pair(cfg_ctx *c, const host_config *cfg, const host_config_node *ha,
                     const char *a, const char *va, const char *b, const char *vb,
                     const char *none, const char *why_tls)
{
    char pa[CFG_KEY_PATH_MAX], pb[CFG_KEY_PATH_MAX];
    int set_a = va[0] != '\0', set_b = vb[0] != '\0';
    cfg_path_key(pa, "ha", a);
    cfg_path_key(pb, "ha", b);
    if (set_a != set_b)
        return cfg_fail(c, SMP_EINVAL, value_line(cfg_node_child(ha, set_a ? a : b)),
                        set_a ? pb : pa, "%s and %s are set together (or neither: %s)", pa, pb,
                        none);
    if (set_a && cfg->ha_etcd_tls_ca[0] == '\0')
        return cfg_fail(c, SMP_EINVAL, value_line(cfg_node_child(ha, a)), "ha.etcd_tls_ca",
                        "missing: %s, which needs the CA of etcd's server certificates", why_tls);
    return 0;
}

/* The HA rules: ha.enabled and oplog.backend etcd go together; an enabled
 * master needs its id, etcd's members, the shared snapshot directory and an
 * endpoint to advertise; a client certificate for etcd and a user with its
 * password are each a pair, over TLS (etcd_pair); and no ha.* key is
 * accepted while HA is off (it would do nothing). */
static int check_ha(cfg_ctx *c, const host_config *cfg, const host_config_node *root)
{
    const host_config_node *ha = cfg_node_child(root, "ha");
    const host_config_node *enabled = cfg_node_child(ha, "enabled");
    const host_config_node *backend = cfg_node_child(cfg_node_child(root, "oplog"), "backend");
    int line = enabled != NULL ? enabled->line : 0;
    static const struct { const char *key; size_t offset; } required[] = {
        {"id", offsetof(host_config, ha_id)},
        {"etcd_endpoints", offsetof(host_config, ha_etcd_endpoints)},
        {"snapshot_dir", offsetof(host_config, ha_snapshot_dir)},
    };

    if (!cfg->ha_enabled) {
        for (size_t i = 0; ha != NULL && ha->kind == HOST_CFG_MAP && i < ha->n_items; i++) {
            char path[CFG_KEY_PATH_MAX];
            if (strcmp(ha->items[i]->key, "enabled") == 0) continue;
            cfg_path_key(path, "ha", ha->items[i]->key);
            return cfg_fail(c, SMP_EINVAL, ha->items[i]->key_line, path,
                            "is set but ha.enabled is false (it would do nothing)");
        }
        if (cfg->oplog_backend == HOST_OPLOG_ETCD)
            return cfg_fail(c, SMP_EINVAL, backend != NULL ? backend->line : 0, "oplog.backend",
                            "etcd needs ha.enabled: true (a single master logs to data_dir)");
        return 0;
    }
    if (cfg->oplog_backend != HOST_OPLOG_ETCD)
        return cfg_fail(c, SMP_EINVAL, line, "ha.enabled",
                        "true needs oplog.backend: etcd (the masters share their OpLog there)");
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
        char path[CFG_KEY_PATH_MAX];
        if ((*(char **)((const char *)cfg + required[i].offset))[0] != '\0') continue;
        cfg_path_key(path, "ha", required[i].key);
        return cfg_fail(c, SMP_EINVAL, line, path, "missing (needed with ha.enabled: true)");
    }
    if (cfg->ha_advertise[0] == '\0' && cfg->listen_tcp[0] == '\0')
        return cfg_fail(c, SMP_EINVAL, line, "ha.advertise",
                        "missing: listen.tcp is off, so say where clients reach this master");
    const char *colon = strrchr(cfg->listen_tcp, ':');
    if (cfg->ha_advertise[0] == '\0' && colon != NULL && strcmp(colon, ":0") == 0)
        return cfg_fail(c, SMP_EINVAL, line, "ha.advertise",
                        "missing: listen.tcp asks for any free port (0), so say where clients "
                        "reach this master");
    int rc = etcd_pair(c, cfg, ha, "etcd_tls_cert", cfg->ha_etcd_tls_cert, "etcd_tls_key",
                       cfg->ha_etcd_tls_key, "no client certificate for etcd",
                       "ha.etcd_tls_cert is presented over TLS");
    if (rc == 0)
        rc = etcd_pair(c, cfg, ha, "etcd_user", cfg->ha_etcd_user, "etcd_password_file",
                       cfg->ha_etcd_password_file, "no password auth to etcd",
                       "ha.etcd_user's password is sent to etcd over TLS only");
    return rc;
}

/* tls: cert and key come together; ca and verify_clients only with them;
 * verify_clients needs the ca that signs the clients' certificates. Each
 * message is on the line of the value it is about: the one set (cert or key
 * when the other is missing, ca, verify_clients), else the tls: section's.
 * (Whether the files exist, parse and match is host_config_load_files'.) */
static int check_tls(cfg_ctx *c, const host_config *cfg, const host_config_node *root)
{
    const host_config_node *tls = cfg_node_child(root, "tls");
    int section = value_line(tls);
    int on = cfg->tls_cert[0] != '\0';
    if (on != (cfg->tls_key[0] != '\0')) {
        int set = value_line(cfg_node_child(tls, on ? "cert" : "key"));
        return cfg_fail(c, SMP_EINVAL, set ? set : section, on ? "tls.key" : "tls.cert",
                        "tls.cert and tls.key are set together (or neither: no TLS)");
    }
    if (!on && cfg->tls_ca[0] != '\0') {
        int ca = value_line(cfg_node_child(tls, "ca"));
        return cfg_fail(c, SMP_EINVAL, ca ? ca : section, "tls.ca",
                        "is used only with tls.cert and tls.key (TLS is off without them)");
    }
    if (cfg->tls_verify_clients && (!on || cfg->tls_ca[0] == '\0')) {
        int verify = value_line(cfg_node_child(tls, "verify_clients"));
        return cfg_fail(c, SMP_EINVAL, verify ? verify : section, "tls.verify_clients",
                        "true needs tls.cert, tls.key and tls.ca (the CA of the client certificates)");
    }
    return 0;
}

/* Keep the lines of the values that name files, for the messages of
 * host_config_load_files (the tree is gone by then). */
static void keep_file_lines(host_config *cfg, const host_config_node *root)
{
    const host_config_node *tls = cfg_node_child(root, "tls");
    cfg->tls_cert_line = value_line(cfg_node_child(tls, "cert"));
    cfg->tls_key_line = value_line(cfg_node_child(tls, "key"));
    cfg->tls_ca_line = value_line(cfg_node_child(tls, "ca"));
    cfg->auth_node_token_file_line =
        value_line(cfg_node_child(cfg_node_child(root, "auth"), "node_token_file"));
    const host_config_node *ha = cfg_node_child(root, "ha");
    cfg->ha_etcd_tls_ca_line = value_line(cfg_node_child(ha, "etcd_tls_ca"));
    cfg->ha_etcd_tls_cert_line = value_line(cfg_node_child(ha, "etcd_tls_cert"));
    cfg->ha_etcd_tls_key_line = value_line(cfg_node_child(ha, "etcd_tls_key"));
    cfg->ha_etcd_password_file_line = value_line(cfg_node_child(ha, "etcd_password_file"));
}

/* The rules that span fields: low_watermark < high_watermark (reported on the
 * line of whichever of the two the file set, low first), and those of
 * node.* (config_node.c), tls.*, ha.* and auth.*. */
static int check_cross(cfg_ctx *c, const host_config *cfg, const host_config_node *root)
{
    int rc;
    const host_config_node *mem = cfg_node_child(root, "memory");
    const host_config_node *low = cfg_node_child(mem, "low_watermark");
    const host_config_node *high = cfg_node_child(mem, "high_watermark");

    if ((rc = cfg_check_node(c, cfg, root)) < 0) return rc;
    if ((rc = check_tls(c, cfg, root)) < 0) return rc;
    if ((rc = check_ha(c, cfg, root)) < 0) return rc;
    if ((rc = cfg_check_auth(c, cfg, root)) < 0) return rc;
    if (cfg->memory_low_watermark < cfg->memory_high_watermark) return 0;
    if (low != NULL)
        return cfg_fail(c, SMP_ERANGE, low->line, "memory.low_watermark",
                        "%g must be below memory.high_watermark (%g)",
                        cfg->memory_low_watermark, cfg->memory_high_watermark);
    return cfg_fail(c, SMP_ERANGE, high != NULL ? high->line : 0, "memory.high_watermark",
                    "%g must be above memory.low_watermark (%g)",
                    cfg->memory_high_watermark, cfg->memory_low_watermark);
}

/* ------------------------------------------------------------------------ */
/* Paths                                                                     */
/* ------------------------------------------------------------------------ */

/* base + "/" + rel as a new string (no doubled slash). NULL on ENOMEM. */
static char *path_join(const char *base, const char *rel)
{
    size_t bl = strlen(base);
    size_t rl = strlen(rel);
    size_t slash = bl > 0 && base[bl - 1] == '/' ? 0 : 1;
    char *out = malloc(bl + slash + rl + 1);
    if (out == NULL) return NULL;
    memcpy(out, base, bl);
    if (slash) out[bl] = '/';
    memcpy(out + bl + slash, rel, rl + 1);
    return out;
}

/* Make *slot absolute against base when it is relative and not "" (off). */
static int resolve_in_place(cfg_ctx *c, char **slot, const char *base)
{
    char *joined;
    if (*slot == NULL || (*slot)[0] == '\0' || (*slot)[0] == '/') return 0;
    joined = path_join(base, *slot);
    if (joined == NULL) return cfg_oom(c);
    free(*slot);
    *slot = joined;
    return 0;
}

/* Resolve every path field of cfg against cfg->base_dir and derive the
 * default cold_dir (<data_dir>/cold) when the file did not set one. */
static int resolve_paths(cfg_ctx *c, host_config *cfg, const host_config_node *root)
{
    int rc;
    const char *base = cfg->base_dir;
    if ((rc = resolve_in_place(c, &cfg->data_dir, base)) < 0) return rc;
    if ((rc = resolve_in_place(c, &cfg->listen_unix, base)) < 0) return rc;
    if ((rc = resolve_in_place(c, &cfg->auth_node_token_file, base)) < 0) return rc;
    if ((rc = resolve_in_place(c, &cfg->node_segment_dir, base)) < 0) return rc;
    if ((rc = resolve_in_place(c, &cfg->ha_snapshot_dir, base)) < 0) return rc;
    if ((rc = resolve_in_place(c, &cfg->ha_etcd_tls_ca, base)) < 0) return rc;
    if ((rc = resolve_in_place(c, &cfg->ha_etcd_tls_cert, base)) < 0) return rc;
    if ((rc = resolve_in_place(c, &cfg->ha_etcd_tls_key, base)) < 0) return rc;
    if ((rc = resolve_in_place(c, &cfg->ha_etcd_password_file, base)) < 0) return rc;
    if ((rc = resolve_in_place(c, &cfg->tls_cert, base)) < 0) return rc;
    if ((rc = resolve_in_place(c, &cfg->tls_key, base)) < 0) return rc;
    if ((rc = resolve_in_place(c, &cfg->tls_ca, base)) < 0) return rc;
    if ((rc = resolve_in_place(c, &cfg->node_local_socket, base)) < 0) return rc;
    if (cfg_node_child(cfg_node_child(root, "node"), "cold_dir") != NULL) {
        if ((rc = resolve_in_place(c, &cfg->node_cold_dir, base)) < 0) return rc;
    } else {
        char *cold = path_join(cfg->data_dir, "cold");
        if (cold == NULL) return cfg_oom(c);
        free(cfg->node_cold_dir);
        cfg->node_cold_dir = cold;
    }
    for (size_t i = 0; i < cfg->n_plugins; i++) {
        if ((rc = resolve_in_place(c, &cfg->plugins[i].path, base)) < 0) return rc;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                              */
/* ------------------------------------------------------------------------ */

int host_config_defaults(host_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->listen_tcp = strdup("127.0.0.1:7600");
    cfg->listen_unix = strdup("");
    cfg->listen_admin = strdup("127.0.0.1:7680");
    cfg->max_frame_bytes = 67108864u;
    cfg->data_dir = strdup("var/data");
    cfg->oplog_backend = HOST_OPLOG_FILE;
    cfg->oplog_segment_bytes = 67108864u;
    cfg->oplog_max_batch_records = 4096;
    cfg->oplog_preallocate = 1;
    cfg->snapshot_every_records = 100000;
    cfg->snapshot_keep = 2;
    cfg->snapshot_write_timeout_s = 900;
    cfg->fsck_every_s = 604800;
    cfg->fsck_bytes_per_s = 67108864;
    cfg->memory_high_watermark = 0.95;
    cfg->memory_low_watermark = 0.85;
    cfg->memory_evict_without_cold_copy = 0;
    cfg->ha_enabled = 0;
    cfg->ha_id = strdup("");
    cfg->ha_etcd_endpoints = strdup("");
    cfg->ha_prefix = strdup("/weight_mgmt/");
    cfg->ha_lease_ttl_s = 2;
    cfg->ha_advertise = strdup("");
    cfg->ha_snapshot_dir = strdup("");
    cfg->ha_etcd_tls_ca = strdup("");
    cfg->ha_etcd_tls_cert = strdup("");
    cfg->ha_etcd_tls_key = strdup("");
    cfg->ha_etcd_user = strdup("");
    cfg->ha_etcd_password_file = strdup("");
    cfg->tls_cert = strdup("");
    cfg->tls_key = strdup("");
    cfg->tls_ca = strdup("");
    cfg->ha_gc_keep_records = 10000;
    cfg->ha_fast_failover = 1;
    cfg->node_embedded = 1;
    cfg->node_segment_dir = strdup("/dev/shm/weight_mgmt");
    cfg->node_segment_bytes = 1073741824u;
    cfg->node_cold_dir = strdup("var/data/cold");
    cfg->node_id = strdup("embedded");
    cfg->node_data_listen = strdup("127.0.0.1:0");
    cfg->node_poll_ms = 200;
    cfg->node_timeout_ms = 3000;
    cfg->node_ticket_ttl_ms = 60000;
    cfg->node_put_timeout_ms = 65000;
    cfg->node_require_read_tickets = 1;
    cfg->cluster.default_weight_preferred_residency = HOST_RESIDENCY_MIXED;
    cfg->cluster.default_weight_mixed_hot_ratio = 0.5;
    cfg->cluster.default_weight_migration_mode = HOST_MODE_AUTO;
    cfg->cluster.weight_management_oplog_capability_confirmed = 0;
    cfg->cluster.weight_lineage_oplog_capability_confirmed = 0;
    cfg->cluster.weight_migration_cooldown_ms = 30000;
    cfg->cluster.weight_migration_max_members_per_round = 64;
    cfg->cluster.weight_migration_max_bytes_per_round = 1073741824u;
    if (cfg->listen_tcp == NULL || cfg->listen_unix == NULL || cfg->listen_admin == NULL ||
        cfg->data_dir == NULL || cfg->node_segment_dir == NULL || cfg->node_cold_dir == NULL ||
        cfg->node_id == NULL || cfg->node_data_listen == NULL || cfg->ha_id == NULL ||
        cfg->ha_etcd_endpoints == NULL || cfg->ha_prefix == NULL || cfg->ha_advertise == NULL ||
        cfg->ha_snapshot_dir == NULL || cfg->tls_cert == NULL || cfg->tls_key == NULL ||
        cfg->tls_ca == NULL || cfg->ha_etcd_tls_ca == NULL || cfg->ha_etcd_tls_cert == NULL ||
        cfg->ha_etcd_tls_key == NULL || cfg->ha_etcd_user == NULL ||
        cfg->ha_etcd_password_file == NULL) {
        host_config_free(cfg);
        return -ENOMEM;
    }
    return 0;
}

void host_config_free(host_config *cfg)
{
    if (cfg == NULL) return;
    free(cfg->source);
    free(cfg->base_dir);
    free(cfg->listen_tcp);
    free(cfg->listen_unix);
    free(cfg->listen_admin);
    free(cfg->data_dir);
    free(cfg->node_segment_dir);
    free(cfg->node_cold_dir);
    free(cfg->node_id);
    free(cfg->node_data_listen);
    free(cfg->ha_id);
    free(cfg->ha_etcd_endpoints);
    free(cfg->ha_prefix);
    free(cfg->ha_advertise);
    free(cfg->ha_snapshot_dir);
    free(cfg->ha_etcd_tls_ca);
    free(cfg->ha_etcd_tls_cert);
    free(cfg->ha_etcd_tls_key);
    free(cfg->ha_etcd_user);
    free(cfg->ha_etcd_password_file);
    free(cfg->tls_cert);
    free(cfg->tls_key);
    free(cfg->tls_ca);
    free(cfg->node_tenant);
    free(cfg->node_local_socket);
    for (size_t i = 0; i < cfg->n_plugins; i++) {
        free(cfg->plugins[i].path);
        cfg_node_free(cfg->plugins[i].block);
    }
    free(cfg->plugins);
    free(cfg->auth_node_token_file);
    free(cfg->auth_tokens);
    free(cfg->auth_limits.tenants);
    free(cfg->auth_certs);
    memset(cfg, 0, sizeof(*cfg));
}

/* The common body of both loaders: parse `len` bytes of YAML into *cfg.
 * base_dir is copied. On failure *cfg is zeroed and the message written. */
static int load_buffer(cfg_ctx *c, const char *yaml, size_t len, const char *base_dir,
                       host_config *cfg)
{
    int rc;
    host_config_node *root = NULL;
    host_config tmp;

    if (host_config_defaults(&tmp) < 0) {
        rc = cfg_oom(c);
        goto zero_out;
    }
    tmp.source = strdup(c->name);
    tmp.base_dir = strdup(base_dir);
    if (tmp.source == NULL || tmp.base_dir == NULL) {
        rc = cfg_oom(c);
        goto free_tmp;
    }
    if ((rc = cfg_parse_tree(c, yaml, len, &root)) < 0) goto free_tmp;

    if (root != NULL && !cfg_node_is_null(root)) {
        if (root->kind != HOST_CFG_MAP) {
            rc = cfg_fail(c, SMP_EINVAL, root->line, "", "expected a mapping, found %s",
                          cfg_node_kind_name(root));
            goto free_root;
        }
        if ((rc = apply_map(c, &tmp, root, "", top_fields)) < 0) goto free_root;
        if ((rc = check_cross(c, &tmp, root)) < 0) goto free_root;
        keep_file_lines(&tmp, root);
    }
    if ((rc = resolve_paths(c, &tmp, root)) < 0) goto free_root;
    if ((rc = cfg_check_listeners(c, &tmp, root)) < 0) goto free_root;
    cfg_node_free(root);
    *cfg = tmp;
    return 0;

free_root:
    cfg_node_free(root);
free_tmp:
    host_config_free(&tmp);
zero_out:
    memset(cfg, 0, sizeof(*cfg));
    return rc;
}

int host_config_load_string(const char *name,
                            const char *yaml,
                            const char *base_dir,
                            host_config *cfg,
                            char *err,
                            size_t errlen)
{
    cfg_ctx c = { name ? name : "<string>", err, errlen, 0 };
    char cwd[4096];

    if (err != NULL && errlen > 0) err[0] = '\0';
    if (cfg == NULL) return SMP_EINVAL;
    memset(cfg, 0, sizeof(*cfg));
    if (yaml == NULL) return cfg_fail(&c, SMP_EINVAL, 0, NULL, "no YAML text given");
    if (base_dir == NULL) {
        if (getcwd(cwd, sizeof(cwd)) == NULL)
            return cfg_fail(&c, SMP_EIO, 0, NULL, "cannot get the working directory: %s",
                            strerror(errno));
        base_dir = cwd;
    }
    return load_buffer(&c, yaml, strlen(yaml), base_dir, cfg);
}

/* The directory of `path` as an absolute path (relative ones against the
 * working directory). NULL with errno set on failure. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    char cwd[4096];
    char *dir;
    char *out;

    if (slash == path) return strdup("/");
    dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
    if (dir == NULL || dir[0] == '/') return dir;
    if (getcwd(cwd, sizeof(cwd)) == NULL) {
        free(dir);
        return NULL;
    }
    if (strcmp(dir, ".") == 0)
        out = strdup(cwd);
    else if (strncmp(dir, "./", 2) == 0)
        out = path_join(cwd, dir + 2);
    else
        out = path_join(cwd, dir);
    free(dir);
    return out;
}

/* Read the config file (at most CFG_MAX_FILE_BYTES) into a NUL-terminated
 * heap buffer. Returns 0, or a failure with the message written. */
static int read_file(cfg_ctx *c, const char *path, char **out, size_t *out_len)
{
    char why[300];
    int rc = cfg_read_text(path, CFG_MAX_FILE_BYTES, out, out_len, why, sizeof(why));
    if (rc == SMP_ENOMEM) return cfg_oom(c);
    return rc < 0 ? cfg_fail(c, rc, 0, NULL, "%s", why) : 0;
}

int host_config_load(const char *path, host_config *cfg, char *err, size_t errlen)
{
    int rc;
    cfg_ctx c = { path ? path : "<null>", err, errlen, 0 };
    char *text = NULL;
    size_t len = 0;
    char *dir = NULL;

    if (err != NULL && errlen > 0) err[0] = '\0';
    if (cfg == NULL) return SMP_EINVAL;
    memset(cfg, 0, sizeof(*cfg));
    if (path == NULL) return cfg_fail(&c, SMP_EINVAL, 0, NULL, "no config file given");
    if ((rc = read_file(&c, path, &text, &len)) < 0) return rc;
    dir = dir_of(path);
    if (dir == NULL) {
        rc = errno == ENOMEM ? cfg_oom(&c)
                             : cfg_fail(&c, SMP_EIO, 0, NULL, "cannot resolve its directory: %s",
                                        strerror(errno));
        goto free_text;
    }
    /* The text goes to libyaml with its length: a NUL byte inside the file
     * is seen (and refused) by libyaml rather than ending the input early. */
    rc = load_buffer(&c, text, len, dir, cfg);
    free(dir);
free_text:
    free(text);
    return rc;
}
