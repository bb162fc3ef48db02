/* weight_store.c -- the weight_store handle and the management calls of
 * libweightclient.
 *
 * Opening a store connects twice to the master: once to the weight plugin's
 * RPC service (proto/weight_rpc.proto) and once to the plain object service
 * (kv_client.h, used by the writer and the reader for object lookups),
 * both with the handle's TLS settings (weight_store_open_tls: read and
 * checked before anything connects) or the environment's.
 * Everything else here is one RPC per call: weight_is_exist,
 * weight_get_metadata, weight_get_size, weight_list, weight_update_policy,
 * weight_migrate, weight_get_operation, weight_remove -- request built from
 * the public structs, reply copied back into them, a failing status returned
 * as the RFC's code with the plugin's message in weight_store_last_error().
 * Also the identity helpers (the command-line form NS/RES/REV@GEN) and the
 * names of codes and states. The writer is weight_put.c, the load
 * weight_get.c (its parts: wc_get.h). */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include "pb_arena.h"
#include "wc_store.h"
#include "wc_tls.h"

/* -- names ------------------------------------------------------------------ */

const char *weight_error_name(int rc)
{
    switch (rc) {
    case WEIGHT_OK: return "OK";
    case WEIGHT_EINVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case WEIGHT_ENOT_FOUND: return "NOT_FOUND";
    case WEIGHT_ENOT_READY: return "NOT_READY";
    case WEIGHT_ECONFLICT: return "CONFLICT";
    case WEIGHT_ESTALE_GENERATION: return "STALE_GENERATION";
    case WEIGHT_EBUSY: return "BUSY";
    case WEIGHT_ELEASE_EXPIRED: return "LEASE_EXPIRED";
    case WEIGHT_EDURABILITY_FAILED: return "DURABILITY_FAILED";
    case WEIGHT_EPOLICY_UNSATISFIABLE: return "POLICY_UNSATISFIABLE";
    case WEIGHT_EDIGEST_MISMATCH: return "DIGEST_MISMATCH";
    case WEIGHT_EAUTH: return "AUTH";
    case WEIGHT_EFORBIDDEN: return "FORBIDDEN";
    default: return smp_strerror(rc);
    }
}

const char *weight_availability_name(int v)
{
    static const char *n[] = {"?", "IMPORTING", "READY", "DEGRADED", "DELETING", "DELETED"};
    return v >= 1 && v <= 5 ? n[v] : "?";
}

const char *weight_residency_name(int v)
{
    static const char *n[] = {"UNKNOWN", "HOT", "COLD", "MIXED", "ABSENT"};
    return v >= 0 && v <= 4 ? n[v] : "?";
}

const char *weight_mode_name(int v)
{
    static const char *n[] = {"DEFAULT", "PINNED", "MANUAL", "AUTO"};
    return v >= 0 && v <= 3 ? n[v] : "?";
}

const char *weight_operation_kind_name(int v)
{
    static const char *n[] = {"?", "MIGRATING", "REPAIRING", "DELETING", "IMPORTING"};
    return v >= 1 && v <= 4 ? n[v] : "?";
}

const char *weight_operation_state_name(int v)
{
    static const char *n[] = {"?", "RUNNING", "SUCCEEDED", "FAILED"};
    return v >= 1 && v <= 3 ? n[v] : "?";
}

/* -- identity --------------------------------------------------------------- */

static int set_component(char *dst, const char *src, int may_be_empty)
{
    if (src == NULL) src = "";
    size_t len = strlen(src);
    if ((len == 0 && !may_be_empty) || len > WEIGHT_ID_MAX) return WEIGHT_EINVALID_ARGUMENT;
    memcpy(dst, src, len + 1);
    return WEIGHT_OK;
}

int weight_identity_set(weight_identity *out, const char *tenant_id, const char *namespace_id,
                        const char *resource_id, const char *revision, uint64_t generation)
{
    weight_identity id;
    if (out == NULL) return WEIGHT_EINVALID_ARGUMENT;
    memset(&id, 0, sizeof id);
    if (set_component(id.tenant_id, tenant_id, 1) < 0 ||
        set_component(id.namespace_id, namespace_id, 0) < 0 ||
        set_component(id.resource_id, resource_id, 0) < 0 ||
        set_component(id.revision, revision, 0) < 0)
        return WEIGHT_EINVALID_ARGUMENT;
    id.generation = generation;
    *out = id;
    return WEIGHT_OK;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decode [in, in + len) into out (WEIGHT_ID_MAX + 1 bytes). A '%'
 * needs two hex digits; a decoded NUL, an empty result or one over
 * WEIGHT_ID_MAX bytes is refused. */
static int pct_decode(const char *in, size_t len, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        int c = (unsigned char)in[i];
        if (c == '%') {
            if (len - i < 3) return WEIGHT_EINVALID_ARGUMENT;
            int hi = hexval(in[i + 1]), lo = hexval(in[i + 2]);
            if (hi < 0 || lo < 0) return WEIGHT_EINVALID_ARGUMENT;
            c = hi * 16 + lo;
            i += 2;
        }
        if (c == 0 || o >= WEIGHT_ID_MAX) return WEIGHT_EINVALID_ARGUMENT;
        out[o++] = (char)c;
    }
    if (o == 0) return WEIGHT_EINVALID_ARGUMENT;
    out[o] = '\0';
    return WEIGHT_OK;
}

int weight_identity_parse(const char *text, const char *tenant, weight_identity *out,
                          int *has_generation)
{
    weight_identity id;
    const char *parts[3];
    size_t lens[3];
    if (text == NULL || out == NULL) return WEIGHT_EINVALID_ARGUMENT;
    memset(&id, 0, sizeof id);
    if (set_component(id.tenant_id, tenant, 1) < 0) return WEIGHT_EINVALID_ARGUMENT;
    const char *at = strchr(text, '@');
    size_t body = at ? (size_t)(at - text) : strlen(text);
    int has_gen = 0;
    if (at != NULL) {
        const char *g = at + 1;
        char *end = NULL;
        if (*g < '0' || *g > '9' || strchr(g, '@') != NULL) return WEIGHT_EINVALID_ARGUMENT;
        unsigned long long v = strtoull(g, &end, 10);
        if (*end != '\0' || (v == ~0ull)) return WEIGHT_EINVALID_ARGUMENT;
        id.generation = (uint64_t)v;
        has_gen = 1;
    }
    const char *p = text;
    for (int k = 0; k < 3; k++) {
        const char *slash = k < 2 ? memchr(p, '/', body - (size_t)(p - text)) : NULL;
        parts[k] = p;
        lens[k] = slash ? (size_t)(slash - p) : body - (size_t)(p - text);
        if (k < 2 && slash == NULL) return WEIGHT_EINVALID_ARGUMENT;
        p = slash ? slash + 1 : p + lens[k];
    }
    if (memchr(parts[2], '/', lens[2]) != NULL) return WEIGHT_EINVALID_ARGUMENT;
    if (pct_decode(parts[0], lens[0], id.namespace_id) < 0 ||
        pct_decode(parts[1], lens[1], id.resource_id) < 0 ||
        pct_decode(parts[2], lens[2], id.revision) < 0)
        return WEIGHT_EINVALID_ARGUMENT;
    *out = id;
    if (has_generation) *has_generation = has_gen;
    return WEIGHT_OK;
}

/* Append s to out at *o with '/', '@', '%' and control bytes percent-encoded. */
static int fmt_component(const char *s, char *out, size_t cap, size_t *o)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '/' || c == '@' || c == '%' || c < 0x20 || c == 0x7f) {
            if (*o + 3 >= cap) return WEIGHT_EINVALID_ARGUMENT;
            snprintf(out + *o, 4, "%%%02X", c);
            *o += 3;
        } else {
            if (*o + 1 >= cap) return WEIGHT_EINVALID_ARGUMENT;
            out[(*o)++] = (char)c;
        }
    }
    out[*o] = '\0';
    return WEIGHT_OK;
}

int weight_identity_format(const weight_identity *id, char *out, size_t cap)
{
    size_t o = 0;
    if (id == NULL || out == NULL || cap == 0) return WEIGHT_EINVALID_ARGUMENT;
    out[0] = '\0';
    const char *parts[3] = {id->namespace_id, id->resource_id, id->revision};
    for (int k = 0; k < 3; k++) {
        if (fmt_component(parts[k], out, cap, &o) < 0) return WEIGHT_EINVALID_ARGUMENT;
        if (k < 2) {
            if (o + 1 >= cap) return WEIGHT_EINVALID_ARGUMENT;
            out[o++] = '/';
        }
    }
    int n = snprintf(out + o, cap - o, "@%" PRIu64, id->generation);
    if (n < 0 || (size_t)n >= cap - o) return WEIGHT_EINVALID_ARGUMENT;
    return (int)(o + (size_t)n);
}

/* -- the handle ------------------------------------------------------------- */

int wc_fail(weight_store *s, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return rc;
}

void wc_progress(weight_store *s, uint64_t done, uint64_t total)
{
    if (s->progress) s->progress(s->progress_ctx, done, total);
}

void wc_realtime_in_ms(struct timespec *ts, long ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

int weight_store_open(const char *master, const char *tenant, const weight_policy *default_policy,
                      weight_store **out, char *err, size_t errlen)
{
    return weight_store_open_token(master, tenant, NULL, default_policy, out, err, errlen);
}

int weight_store_open_token(const char *master, const char *tenant, const char *token,
                            const weight_policy *default_policy, weight_store **out, char *err,
                            size_t errlen)
{
    return weight_store_open_tls(master, tenant, token, NULL, default_policy, out, err, errlen);
}

/* A copy of v into *dst when set (NULL or "": *dst stays NULL). 0, or -1
 * when out of memory. */
static int dup_setting(char **dst, const char *v)
{
    if (v == NULL || v[0] == '\0') return 0;
    return (*dst = strdup(v)) != NULL ? 0 : -1;
}

/* Take tls's settings into s and build the client context for nodes from
 * them (files read and checked now, before anything connects). tls NULL or
 * without a CA: the environment's (s->tls_ctx stays NULL), only the server
 * name kept. WEIGHT_OK, WEIGHT_EINVALID_ARGUMENT (err names the field, the
 * file and the cause), WEIGHT_ENOMEM. */
static int take_tls(weight_store *s, const weight_tls_options *tls, char *err, size_t errlen)
{
    char why[768];
    int rc;
    if (tls == NULL) return WEIGHT_OK;
    if (tls->struct_size < offsetof(weight_tls_options, server_name) + sizeof(tls->server_name)) {
        if (err && errlen)
            snprintf(err, errlen, "weight_store_open_tls: struct_size %u is below the first "
                     "version's %zu", tls->struct_size,
                     offsetof(weight_tls_options, server_name) + sizeof(tls->server_name));
        return WEIGHT_EINVALID_ARGUMENT;
    }
    if (tls->server_name != NULL && strlen(tls->server_name) > 255) {
        if (err && errlen)
            snprintf(err, errlen, "weight_store_open_tls: server_name is longer than 255 bytes");
        return WEIGHT_EINVALID_ARGUMENT;
    }
    if ((tls->ca == NULL || tls->ca[0] == '\0') &&
        ((tls->cert && tls->cert[0]) || (tls->key && tls->key[0]))) {
        if (err && errlen)
            snprintf(err, errlen, "weight_store_open_tls: cert and key need ca (the CA of the "
                     "master's certificate) in the same settings");
        return WEIGHT_EINVALID_ARGUMENT;
    }
    if (dup_setting(&s->tls_ca, tls->ca) < 0 || dup_setting(&s->tls_cert, tls->cert) < 0 ||
        dup_setting(&s->tls_key, tls->key) < 0 ||
        dup_setting(&s->tls_server_name, tls->server_name) < 0)
        return WEIGHT_ENOMEM;
    if (s->tls_ca == NULL) return WEIGHT_OK;
    why[0] = '\0';
    rc = wc_tls_client_ctx(s->tls_ca, s->tls_cert, s->tls_key, &s->tls_ctx, why, sizeof why);
    if (rc < 0) {
        if (err && errlen) snprintf(err, errlen, "weight_store_open_tls: %s", why);
        return rc == SMP_ENOMEM ? WEIGHT_ENOMEM : WEIGHT_EINVALID_ARGUMENT;
    }
    return WEIGHT_OK;
}

int weight_store_open_tls(const char *master, const char *tenant, const char *token,
                          const weight_tls_options *tls, const weight_policy *default_policy,
                          weight_store **out, char *err, size_t errlen)
{
    int rc;
    weight_store *s = NULL;
    rpcc_options opt;
    if (out) *out = NULL;
    if (master == NULL || master[0] == '\0' || out == NULL ||
        strlen(master) >= sizeof s->master || (tenant && strlen(tenant) > WEIGHT_ID_MAX)) {
        if (err && errlen) snprintf(err, errlen, "weight_store_open: missing or too long argument");
        return WEIGHT_EINVALID_ARGUMENT;
    }
    if ((s = calloc(1, sizeof *s)) == NULL) return WEIGHT_ENOMEM;
    pthread_mutex_init(&s->seg_lock, NULL);
    if (token != NULL && (s->token = strdup(token)) == NULL) {
        weight_store_close(s);
        return WEIGHT_ENOMEM;
    }
    if ((rc = take_tls(s, tls, err, errlen)) < 0) {
        weight_store_close(s);
        return rc;
    }
    opt = wc_rpc_options(s);
    snprintf(s->master, sizeof s->master, "%s", master);
    snprintf(s->tenant, sizeof s->tenant, "%s", tenant && tenant[0] ? tenant : "default");
    if (default_policy) {
        s->has_default_policy = 1;
        s->default_policy = *default_policy;
    }
    s->payload_bytes = WC_DEFAULT_PAYLOAD_BYTES;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    s->threads = cores > 0 && (unsigned long)cores < WC_DEFAULT_THREADS ? (unsigned)cores
                                                                       : WC_DEFAULT_THREADS;
    if ((rc = rpcc_connect(master, &opt, &s->rpc, err, errlen)) < 0) goto free_store;
    if ((rc = kvc_connect_opts(master, &opt, s->tls_ctx, &s->kv, err, errlen)) < 0)
        goto free_store;
    kvc_track_read_leases(s->kv, 1); /* weight_get gives its read leases back */
    /* with authentication, identities without a tenant are the token's tenant's */
    if ((tenant == NULL || tenant[0] == '\0') && rpcc_auth_tenant(s->rpc)[0] != '\0')
        snprintf(s->tenant, sizeof s->tenant, "%s", rpcc_auth_tenant(s->rpc));
    *out = s;
    return WEIGHT_OK;
free_store:
    weight_store_close(s);
    return rc == SMP_ENOMEM ? WEIGHT_ENOMEM : rc == SMP_EINVAL ? WEIGHT_EINVALID_ARGUMENT
         : rc == SMP_EAUTH ? WEIGHT_EAUTH : WEIGHT_EIO;
}

void weight_store_close(weight_store *s)
{
    if (s == NULL) return;
    for (int i = 0; i < WC_SEG_MAPS; i++) seg_map_close(&s->segs[i].map);
    pthread_mutex_destroy(&s->seg_lock);
    rpcc_close(s->rpc);
    wc_renewer_put(s->renewer); /* views still held keep it */
    kvc_close(s->kv);
    free(s->token);
    free(s->tls_ca);
    free(s->tls_cert);
    free(s->tls_key);
    free(s->tls_server_name);
    SSL_CTX_free(s->tls_ctx);
    free(s);
}

const char *weight_store_last_error(const weight_store *s)
{
    return s ? s->err : "no store";
}

int weight_store_set_option(weight_store *s, weight_option opt, uint64_t value)
{
    if (s == NULL) return WEIGHT_EINVALID_ARGUMENT;
    switch (opt) {
    case WEIGHT_OPT_PAYLOAD_BYTES:
        if (value < 4096) return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "payload bound below 4096");
        s->payload_bytes = value;
        return WEIGHT_OK;
    case WEIGHT_OPT_THREADS:
        if (value < 1 || value > WC_MAX_THREADS)
            return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "threads must be 1..%u", WC_MAX_THREADS);
        s->threads = (unsigned)value;
        return WEIGHT_OK;
    case WEIGHT_OPT_TRANSPORT:
        if (value > 2) return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "transport must be 0, 1 or 2");
        s->transport = (int)value;
        kvc_set_transport(s->kv, (kvc_transport)value);
        return WEIGHT_OK;
    case WEIGHT_OPT_LEASE_TTL_MS:
        s->lease_ttl_ms = value;
        return WEIGHT_OK;
    case WEIGHT_OPT_RELEASE_PAGES:
        if (value > 1) return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "release pages must be 0 or 1");
        s->release_pages = (int)value;
        return WEIGHT_OK;
    case WEIGHT_OPT_ATTACHMENTS:
        if (value > 1) return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "attachments must be 0 or 1");
        s->attachments = (int)value;
        return WEIGHT_OK;
    }
    return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "unknown option %d", (int)opt);
}

void weight_store_set_progress(weight_store *s, weight_progress_fn fn, void *ctx)
{
    if (s == NULL) return;
    s->progress = fn;
    s->progress_ctx = ctx;
}

void weight_store_set_file_metadata_fn(weight_store *s, weight_file_metadata_fn fn, void *ctx)
{
    if (s == NULL) return;
    s->file_meta = fn;
    s->file_meta_ctx = ctx;
}

const seg_map *wc_seg_get(weight_store *s, const kvc_replica *r, int writable)
{
    char err[800];
    const seg_map *found = NULL;
    const char *path = seg_map_where(r->segment_path, r->local_socket);
    if (s->transport == 2 || path[0] == '\0') return NULL;
    pthread_mutex_lock(&s->seg_lock);
    for (int i = 0; i < WC_SEG_MAPS && found == NULL; i++) {
        wc_seg *g = &s->segs[i];
        if (g->map.base == NULL || strcmp(g->path, path) != 0) continue;
        int state = seg_map_check(&g->map, path);
        if (state == SEG_MAP_REPLACED) {
            /* The node restarted on a new file: never copy into or out of
             * the old one. Retired, not unmapped: views a get handed out may
             * still point into it (unmapped with the store). */
            g->path[0] = '\0';
            continue;
        }
        if (state == SEG_MAP_GROWN) {
            /* the node grew its segment: map it again below (no copy through
             * this store runs while it maps, as for the writable upgrade) */
            seg_map_close(&g->map);
            continue;
        }
        if (writable && !g->map.writable) {
            seg_map w;
            if (seg_map_open_at(r->segment_path, r->local_socket, 1, 0, &w, err, sizeof err) < 0)
                break;
            seg_map_close(&g->map); /* no reader is running while a writer maps */
            g->map = w;
        }
        found = &g->map;
    }
    if (found == NULL) {
        for (int i = 0; i < WC_SEG_MAPS; i++) {
            wc_seg *g = &s->segs[i];
            if (g->map.base != NULL) continue;
            if (seg_map_open_at(r->segment_path, r->local_socket, writable, 0, &g->map, err,
                                sizeof err) < 0)
                break;
            snprintf(g->path, sizeof g->path, "%s", path);
            found = &g->map;
            break;
        }
    }
    pthread_mutex_unlock(&s->seg_lock);
    return found;
}

/* -- the RPC helper and conversions ----------------------------------------- */

/* Methods whose repetition cannot change the outcome: queries, and the
 * calls the plugin answers idempotently (a repeated begin returns the open
 * import, a repeated commit the committed result). After a lost connection
 * these are sent again once on a new one; other mutations are not (their
 * first attempt may have landed) and fail with WEIGHT_EIO. */
static int retry_safe(uint32_t method)
{
    switch (method) {
    case WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_BEGIN:
    case WMRPC__WEIGHT_METHOD__WEIGHT_IMPORT_COMMIT:
    case WMRPC__WEIGHT_METHOD__WEIGHT_UPSERT_BEGIN:  /* idempotent by request id */
    case WMRPC__WEIGHT_METHOD__WEIGHT_UPSERT_STATUS:
    case WMRPC__WEIGHT_METHOD__WEIGHT_GET_METADATA:
    case WMRPC__WEIGHT_METHOD__WEIGHT_IS_EXIST:
    case WMRPC__WEIGHT_METHOD__WEIGHT_GET_SIZE:
    case WMRPC__WEIGHT_METHOD__WEIGHT_LIST:
    case WMRPC__WEIGHT_METHOD__WEIGHT_GET_OPERATION:
    case WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RENEW:
    case WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_RELEASE:
    /* A repeated acquire whose first attempt landed leaves one extra lease
     * that expires by its TTL: the price of surviving a master restart. */
    case WMRPC__WEIGHT_METHOD__WEIGHT_LEASE_ACQUIRE:
        return 1;
    default:
        return 0;
    }
}

/* Connect *conn to a master again (the stream is broken after a transport
 * failure): the same connection walks s->master's list from the endpoint
 * after the lost one (or goes to a leader a standby named), a missing one
 * is made anew. SMP_OK or the connect error. */
static int reconnect_rpc(weight_store *s, rpcc_conn **conn, int left_ms)
{
    rpcc_options opt = wc_rpc_options(s);
    rpcc_conn *fresh = NULL;
    if (*conn != NULL) {
        rpcc_set_timeout(*conn, left_ms);
        return rpcc_reconnect(*conn);
    }
    opt.timeout_ms = left_ms;
    int rc = rpcc_connect(s->master, &opt, &fresh, NULL, 0);
    if (rc < 0) return rc;
    rpcc_close(*conn);
    *conn = fresh;
    return SMP_OK;
}

/* Milliseconds since t0 (CLOCK_MONOTONIC). */
static int64_t ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)(t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

int wc_kv_reconnect(weight_store *s)
{
    kvc *fresh = NULL;
    rpcc_options opt = wc_rpc_options(s);
    int rc = kvc_connect_opts(s->master, &opt, s->tls_ctx, &fresh, NULL, 0);
    if (rc < 0) return rc;
    kvc_close(s->kv); /* the leases it noted ended with its connection */
    s->kv = fresh;
    kvc_set_transport(s->kv, (kvc_transport)s->transport);
    kvc_track_read_leases(s->kv, 1);
    return SMP_OK;
}

#define WC_CALL_SMALL 1024

int wc_call(weight_store *s, rpcc_conn **conn, uint32_t method, const ProtobufCMessage *req,
            const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp)
{
    return wc_call_with(s, conn, method, req, desc, NULL, resp);
}

int wc_call_with(weight_store *s, rpcc_conn **conn, uint32_t method, const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *desc, ProtobufCAllocator *alloc,
                 ProtobufCMessage **resp)
{
    size_t len = protobuf_c_message_get_packed_size(req);
    uint8_t small[WC_CALL_SMALL]; /* an identity request fits: no malloc per call */
    uint8_t *buf = len <= sizeof(small) ? small : malloc(len);
    uint8_t *rbody = NULL;
    size_t rlen = 0;
    char *msg = NULL;
    int status = 0;
    int rc;
    struct timespec t0;
    if (buf == NULL) return wc_fail(s, WEIGHT_ENOMEM, "out of memory");
    clock_gettime(CLOCK_MONOTONIC, &t0);
    protobuf_c_message_pack(req, buf);
    /* A query or an idempotent step is hedged by the transport when its
     * master goes silent on a list (a paused leader), and followed there;
     * any other goes again when it never left (its master closed the
     * stream while it was idle: a restart, a failover). */
    unsigned flags = retry_safe(method) ? RPCC_IDEMPOTENT : RPCC_FAILOVER;
    rc = *conn ? rpcc_call_ex(*conn, flags, WC_WEIGHT_SERVICE, method, buf, len, &status, &rbody,
                              &rlen, &msg)
               : SMP_EIO;
    if (rc < 0 && rc != SMP_ENOMEM && rc != SMP_ERANGE) {
        /* The connection is gone (a master restart, a failover): reconnect
         * for this call if it may be repeated, for the next one otherwise. */
        char first[512];
        snprintf(first, sizeof first, "%s", *conn ? rpcc_last_error(*conn) : "not connected");
        /* The reconnect and the second attempt get what is left of the
         * call's timeout, not a timeout each: the whole call fails within
         * WC_RPC_TIMEOUT_MS (the transport's own moves already walked the
         * list for the first attempt). */
        int64_t left = (int64_t)WC_RPC_TIMEOUT_MS - ms_since(&t0);
        int again = left > 0 && reconnect_rpc(s, conn, (int)left) == SMP_OK && retry_safe(method);
        if (again) {
            rc = rpcc_call_ex(*conn, flags, WC_WEIGHT_SERVICE, method, buf, len, &status, &rbody,
                              &rlen, &msg);
        }
        if (*conn != NULL) rpcc_set_timeout(*conn, WC_RPC_TIMEOUT_MS);
        if (!again) {
            if (left <= 0)
                wc_fail(s, WEIGHT_EIO, "master %s: %s (the call's %d s timeout is spent)",
                        s->master, first, WC_RPC_TIMEOUT_MS / 1000);
            else
                wc_fail(s, WEIGHT_EIO, "master %s: %s", s->master, first);
            if (buf != small) free(buf);
            return WEIGHT_EIO;
        }
    }
    if (buf != small) free(buf);
    if (rc < 0) {
        wc_fail(s, rc == SMP_EAGAIN ? WEIGHT_EAGAIN : WEIGHT_EIO, "master %s: %s", s->master,
                rpcc_last_error(*conn));
        rc = rc == SMP_EAGAIN ? WEIGHT_EAGAIN : rc == SMP_ENOMEM ? WEIGHT_ENOMEM : WEIGHT_EIO;
    } else if (status != 0) {
        /* The plugin's reply body carries its UTF-8 message; the host's
         * error field is the fallback (a host-level refusal). */
        const char *text = NULL;
        char body[800];
        if (rlen > 0) {
            size_t n = rlen < sizeof body - 1 ? rlen : sizeof body - 1;
            memcpy(body, rbody, n);
            body[n] = '\0';
            text = body;
        } else if (msg && msg[0]) {
            text = msg;
        }
        rc = wc_fail(s, status, "%s", text ? text : weight_error_name(status));
    } else if (desc != NULL) {
        *resp = protobuf_c_message_unpack(desc, alloc, rlen, rbody);
        if (*resp == NULL) rc = wc_fail(s, WEIGHT_EPROTO, "reply does not decode as %s", desc->name);
    }
    free(rbody);
    free(msg);
    return rc;
}

int wc_call_patient(weight_store *s, rpcc_conn **conn, uint32_t method,
                    const ProtobufCMessage *req, const ProtobufCMessageDescriptor *desc,
                    ProtobufCMessage **resp)
{
    int rc;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned attempt = 0;; attempt++) {
        rc = wc_call(s, conn, method, req, desc, resp);
        if (rc != WEIGHT_EBUSY || !retry_safe(method)) break;
        clock_gettime(CLOCK_MONOTONIC, &t);
        int64_t waited_ms = (int64_t)(t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (waited_ms >= (int64_t)WC_PATIENCE_MS) break;
        usleep((attempt < 6 ? 1u << attempt : 64u) * 1000u); /* 1 ms doubling, 64 ms cap */
    }
    return rc;
}

/* src (NULL: "") into dst[cap], cut to cap - 1 bytes as snprintf's "%s"
 * would, without its format machinery (a metadata reply copies six). */
static void copy_s(char *dst, size_t cap, const char *src)
{
    size_t n = src != NULL ? strnlen(src, cap - 1) : 0;
    if (n > 0) memcpy(dst, src, n);
    dst[n] = '\0';
}

void wc_wire_identity(const weight_store *s, const weight_identity *id, Wmrpc__WeightIdentity *w,
                      char *tenant_buf)
{
    wmrpc__weight_identity__init(w);
    copy_s(tenant_buf, WEIGHT_ID_MAX + 1, id->tenant_id[0] ? id->tenant_id : s->tenant);
    w->tenant = tenant_buf;
    w->namespace_id = (char *)id->namespace_id;
    w->resource_id = (char *)id->resource_id;
    w->revision = (char *)id->revision;
    w->generation = id->generation;
}

void wc_from_wire_identity(const Wmrpc__WeightIdentity *w, weight_identity *out)
{
    memset(out, 0, sizeof *out);
    if (w == NULL) return;
    copy_s(out->tenant_id, sizeof out->tenant_id, w->tenant);
    copy_s(out->namespace_id, sizeof out->namespace_id, w->namespace_id);
    copy_s(out->resource_id, sizeof out->resource_id, w->resource_id);
    copy_s(out->revision, sizeof out->revision, w->revision);
    out->generation = w->generation;
}

void wc_from_wire_metadata(const Wmrpc__WeightMetadata *w, weight_metadata *out)
{
    memset(out, 0, sizeof *out);
    if (w == NULL) return;
    wc_from_wire_identity(w->identity, &out->identity);
    if (w->policy) {
        out->policy.preferred = (weight_residency)w->policy->preferred_residency;
        out->policy.mixed_hot_ratio = w->policy->mixed_hot_ratio;
        out->policy.mode = (weight_migration_mode)w->policy->migration_mode;
    }
    out->availability = (weight_availability)w->availability;
    out->residency = (weight_residency)w->residency;
    out->observed_hot_ratio = w->observed_hot_ratio;
    out->metadata_generation = w->metadata_generation;
    out->operation_id = w->operation_id;
    copy_s(out->manifest_key, sizeof out->manifest_key, w->manifest_key);
    if (w->manifest_sha256.len == 32) memcpy(out->manifest_sha256, w->manifest_sha256.data, 32);
    out->payload_count = w->payload_count;
    out->logical_bytes = w->logical_bytes;
    out->affinity_count = w->affinity_count;
    out->created_ms = w->created_ms;
    out->updated_ms = w->updated_ms;
    out->last_access_ms = w->last_access_ms;
    out->active_leases = w->active_leases;
}

void wc_from_wire_operation(const Wmrpc__WeightOperation *w, weight_operation *out)
{
    memset(out, 0, sizeof *out);
    if (w == NULL) return;
    out->id = w->id;
    wc_from_wire_identity(w->identity, &out->identity);
    out->kind = (int)w->kind;
    out->target = (weight_residency)w->target_residency;
    out->target_hot_ratio = w->target_hot_ratio;
    out->state = (int)w->state;
    out->members_done = w->members_done;
    out->members_total = w->members_total;
    out->bytes_done = w->bytes_done;
    out->bytes_total = w->bytes_total;
    copy_s(out->error, sizeof out->error, w->error);
    out->attempts = w->attempts;
    out->created_ms = w->created_ms;
    out->updated_ms = w->updated_ms;
}

/* -- management calls ------------------------------------------------------- */

#define M(name) WMRPC__WEIGHT_METHOD__WEIGHT_##name

/* Check the arguments every identity call shares. */
static int check_id(weight_store *s, const weight_identity *id)
{
    if (s == NULL) return WEIGHT_EINVALID_ARGUMENT;
    s->err[0] = '\0';
    if (id == NULL || id->namespace_id[0] == '\0' || id->resource_id[0] == '\0' ||
        id->revision[0] == '\0')
        return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "identity needs namespace, resource and revision");
    return WEIGHT_OK;
}

/* IdentityRequest call; reply unpacked with desc into *resp. */
/* A request id given to a management call: NULL, "" or 1..128 bytes of
 * UTF-8 (the master checks the encoding). WEIGHT_OK or INVALID_ARGUMENT. */
static int check_request_id(weight_store *s, const char *request_id)
{
    if (request_id != NULL && strlen(request_id) > 128)
        return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "request id is longer than 128 bytes");
    return WEIGHT_OK;
}

static int id_call_request(weight_store *s, uint32_t method, const weight_identity *id,
                           uint64_t expected, const char *request_id,
                           const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp)
{
    Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
    Wmrpc__WeightIdentity wid;
    char tenant[WEIGHT_ID_MAX + 1];
    int rc = check_id(s, id);
    if (rc < 0) return rc;
    wc_wire_identity(s, id, &wid, tenant);
    req.identity = &wid;
    req.expected_metadata_generation = expected;
    req.request_id = (char *)(request_id ? request_id : "");
    return wc_call(s, &s->rpc, method, &req.base, desc, resp);
}

/* An identity call whose reply's pieces come from alloc (NULL: malloc). */
static int id_call(weight_store *s, uint32_t method, const weight_identity *id, uint64_t expected,
                   const ProtobufCMessageDescriptor *desc, ProtobufCAllocator *alloc,
                   ProtobufCMessage **resp)
{
    Wmrpc__IdentityRequest req = WMRPC__IDENTITY_REQUEST__INIT;
    Wmrpc__WeightIdentity wid;
    char tenant[WEIGHT_ID_MAX + 1];
    int rc = check_id(s, id);
    if (rc < 0) return rc;
    wc_wire_identity(s, id, &wid, tenant);
    req.identity = &wid;
    req.expected_metadata_generation = expected;
    return wc_call_with(s, &s->rpc, method, &req.base, desc, alloc, resp);
}

/* Room for a metadata reply's pieces on the stack: its messages, strings
 * and an operation's error (what does not fit goes to malloc). */
#define WC_REPLY_ARENA 4096

int weight_is_exist(weight_store *s, const weight_identity *id, int *exists)
{
    Wmrpc__IsExistResponse *r = NULL;
    uint8_t mem[PB_ARENA_SMALL];
    pb_arena a;
    if (exists == NULL) return s ? wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "no output") : WEIGHT_EINVALID_ARGUMENT;
    *exists = 0;
    pb_arena_init(&a, mem, sizeof(mem));
    int rc = id_call(s, M(IS_EXIST), id, 0, &wmrpc__is_exist_response__descriptor, &a.alloc,
                     (ProtobufCMessage **)&r);
    /* another tenant's revision is answered NOT_FOUND (the weight plugin's,
     * never the host's SMP_ENOTFOUND): to this caller it does not exist */
    if (rc == WEIGHT_ENOT_FOUND) return WEIGHT_OK;
    if (rc < 0) return rc;
    *exists = r->exists ? 1 : 0;
    pb_arena_free_unpacked(&a, &r->base);
    return WEIGHT_OK;
}

/* The first version of weight_metadata_more ends after its hot ratio. */
#define WC_MORE_V1 (offsetof(weight_metadata_more, degraded_from_hot_ratio) + sizeof(double))

int weight_get_metadata(weight_store *s, const weight_identity *id, weight_metadata *out,
                        weight_operation *op)
{
    return weight_get_metadata_more(s, id, out, op, NULL);
}

int weight_get_metadata_more(weight_store *s, const weight_identity *id, weight_metadata *out,
                             weight_operation *op, weight_metadata_more *more)
{
    Wmrpc__MetadataResponse *r = NULL;
    uint8_t mem[WC_REPLY_ARENA];
    pb_arena a;
    if (more != NULL && more->struct_size < WC_MORE_V1) {
        uint32_t size = more->struct_size;
        return s ? wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "weight_metadata_more: struct_size %u is "
                           "below the first version's %zu", size, WC_MORE_V1)
                 : WEIGHT_EINVALID_ARGUMENT;
    }
    pb_arena_init(&a, mem, sizeof(mem));
    int rc = id_call(s, M(GET_METADATA), id, 0, &wmrpc__metadata_response__descriptor, &a.alloc,
                     (ProtobufCMessage **)&r);
    if (rc < 0) return rc;
    if (r->metadata == NULL) {
        pb_arena_free_unpacked(&a, &r->base);
        return wc_fail(s, WEIGHT_EPROTO, "metadata reply without metadata");
    }
    if (out) wc_from_wire_metadata(r->metadata, out);
    if (op) wc_from_wire_operation(r->operation, op);
    if (more) { /* struct_size >= WC_MORE_V1, checked above: the fields known, newer ones zeroed */
        uint32_t size = more->struct_size;
        memset(more, 0, size);
        more->struct_size = size;
        more->degraded_from = (weight_residency)r->metadata->degraded_from;
        more->degraded_from_hot_ratio = r->metadata->degraded_from_hot_ratio;
    }
    pb_arena_free_unpacked(&a, &r->base);
    return WEIGHT_OK;
}

int weight_get_size(weight_store *s, const weight_identity *id, uint64_t *bytes)
{
    Wmrpc__SizeResponse *r = NULL;
    uint8_t mem[PB_ARENA_SMALL];
    pb_arena a;
    if (bytes == NULL) return s ? wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "no output") : WEIGHT_EINVALID_ARGUMENT;
    pb_arena_init(&a, mem, sizeof(mem));
    int rc = id_call(s, M(GET_SIZE), id, 0, &wmrpc__size_response__descriptor, &a.alloc,
                     (ProtobufCMessage **)&r);
    if (rc < 0) return rc;
    *bytes = r->logical_bytes;
    pb_arena_free_unpacked(&a, &r->base);
    return WEIGHT_OK;
}

int weight_list(weight_store *s, const weight_list_query *q, const char *page_token,
                weight_metadata **out, size_t *n, char *next_token, size_t next_cap)
{
    Wmrpc__ListRequest req = WMRPC__LIST_REQUEST__INIT;
    Wmrpc__ListResponse *r = NULL;
    if (s == NULL) return WEIGHT_EINVALID_ARGUMENT;
    s->err[0] = '\0';
    if (out == NULL || n == NULL)
        return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "weight_list: no output");
    *out = NULL;
    *n = 0;
    if (next_token && next_cap) next_token[0] = '\0';
    req.tenant = s->tenant;
    req.namespace_id = (char *)(q && q->namespace_id ? q->namespace_id : "");
    req.resource_id = (char *)(q && q->resource_id ? q->resource_id : "");
    req.page_token = (char *)(page_token ? page_token : "");
    req.limit = q ? q->limit : 0;
    req.include_deleted = q && (q->include_deleted & WEIGHT_LIST_DELETED);
    req.include_importing = q && (q->include_deleted & WEIGHT_LIST_IMPORTING);
    int rc = wc_call(s, &s->rpc, M(LIST), &req.base, &wmrpc__list_response__descriptor,
                     (ProtobufCMessage **)&r);
    if (rc < 0) return rc;
    weight_metadata *list = calloc(r->n_revisions ? r->n_revisions : 1, sizeof *list);
    if (list == NULL) {
        wmrpc__list_response__free_unpacked(r, NULL);
        return wc_fail(s, WEIGHT_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < r->n_revisions; i++) wc_from_wire_metadata(r->revisions[i], &list[i]);
    if (next_token && next_cap) {
        if (strlen(r->next_page_token) >= next_cap) {
            wmrpc__list_response__free_unpacked(r, NULL);
            free(list);
            return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "next page token longer than %zu bytes",
                           next_cap);
        }
        snprintf(next_token, next_cap, "%s", r->next_page_token);
    }
    *out = list;
    *n = r->n_revisions;
    wmrpc__list_response__free_unpacked(r, NULL);
    return WEIGHT_OK;
}

void weight_list_free(weight_metadata *list)
{
    free(list);
}

/* The current metadata generation when the caller passed 0. */
/* Mutations are fenced by the metadata generation the caller read: 0 says
 * the caller read nothing, and the call never reads one for it (that would
 * fence on a state nobody looked at). WEIGHT_EINVALID_ARGUMENT for 0. */
int wc_require_generation(weight_store *s, const char *call, uint64_t gen)
{
    if (gen != 0) return WEIGHT_OK;
    return wc_fail(s, WEIGHT_EINVALID_ARGUMENT,
                   "%s: expected_metadata_generation 0; pass the metadata generation read with "
                   "weight_get_metadata",
                   call);
}

int weight_update_policy(weight_store *s, const weight_identity *id, const weight_policy *policy,
                         uint64_t expected_metadata_generation, weight_metadata *out)
{
    return weight_update_policy_request(s, id, policy, expected_metadata_generation, NULL, out);
}

int weight_update_policy_request(weight_store *s, const weight_identity *id,
                                 const weight_policy *policy, uint64_t expected_metadata_generation,
                                 const char *request_id, weight_metadata *out)
{
    Wmrpc__UpdatePolicyRequest req = WMRPC__UPDATE_POLICY_REQUEST__INIT;
    Wmrpc__WeightPolicy wp = WMRPC__WEIGHT_POLICY__INIT;
    Wmrpc__WeightIdentity wid;
    Wmrpc__MetadataResponse *r = NULL;
    char tenant[WEIGHT_ID_MAX + 1];
    int rc = check_id(s, id);
    if (rc < 0) return rc;
    if (policy == NULL) return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "no policy");
    if ((rc = check_request_id(s, request_id)) < 0) return rc;
    if ((rc = wc_require_generation(s, "weight_update_policy", expected_metadata_generation)) < 0)
        return rc;
    wc_wire_identity(s, id, &wid, tenant);
    wp.preferred_residency = (uint32_t)policy->preferred;
    wp.mixed_hot_ratio = policy->mixed_hot_ratio;
    wp.migration_mode = (uint32_t)policy->mode;
    req.identity = &wid;
    req.policy = &wp;
    req.expected_metadata_generation = expected_metadata_generation;
    req.request_id = (char *)(request_id ? request_id : "");
    rc = wc_call(s, &s->rpc, M(UPDATE_POLICY), &req.base, &wmrpc__metadata_response__descriptor,
                 (ProtobufCMessage **)&r);
    if (rc < 0) return rc;
    if (out) wc_from_wire_metadata(r->metadata, out);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    return WEIGHT_OK;
}

int weight_migrate(weight_store *s, const weight_identity *id, weight_residency target,
                   double mixed_hot_ratio, uint64_t expected_metadata_generation,
                   weight_operation *op)
{
    return weight_migrate_request(s, id, target, mixed_hot_ratio, expected_metadata_generation, NULL,
                                  op);
}

int weight_migrate_request(weight_store *s, const weight_identity *id, weight_residency target,
                           double mixed_hot_ratio, uint64_t expected_metadata_generation,
                           const char *request_id, weight_operation *op)
{
    Wmrpc__MigrateRequest req = WMRPC__MIGRATE_REQUEST__INIT;
    Wmrpc__WeightIdentity wid;
    Wmrpc__MetadataResponse *r = NULL;
    char tenant[WEIGHT_ID_MAX + 1];
    int rc = check_id(s, id);
    if (rc < 0) return rc;
    if (target != WEIGHT_RES_HOT && target != WEIGHT_RES_COLD && target != WEIGHT_RES_MIXED)
        return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "migration target must be HOT, COLD or MIXED");
    if ((rc = check_request_id(s, request_id)) < 0) return rc;
    if ((rc = wc_require_generation(s, "weight_migrate", expected_metadata_generation)) < 0) return rc;
    wc_wire_identity(s, id, &wid, tenant);
    req.identity = &wid;
    req.target_residency = (uint32_t)target;
    req.mixed_hot_ratio = mixed_hot_ratio;
    req.expected_metadata_generation = expected_metadata_generation;
    req.request_id = (char *)(request_id ? request_id : "");
    /* The reply is the revision's metadata with its (new) active operation. */
    rc = wc_call(s, &s->rpc, M(MIGRATE), &req.base, &wmrpc__metadata_response__descriptor,
                 (ProtobufCMessage **)&r);
    if (rc < 0) return rc;
    if (op) wc_from_wire_operation(r->operation, op);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    return WEIGHT_OK;
}

int weight_get_operation(weight_store *s, uint64_t operation_id, weight_operation *op)
{
    Wmrpc__OperationRequest req = WMRPC__OPERATION_REQUEST__INIT;
    Wmrpc__OperationResponse *r = NULL;
    if (s == NULL) return WEIGHT_EINVALID_ARGUMENT;
    s->err[0] = '\0';
    if (op == NULL || operation_id == 0)
        return wc_fail(s, WEIGHT_EINVALID_ARGUMENT, "operation id must be >= 1");
    req.operation_id = operation_id;
    int rc = wc_call(s, &s->rpc, M(GET_OPERATION), &req.base, &wmrpc__operation_response__descriptor,
                     (ProtobufCMessage **)&r);
    if (rc < 0) return rc;
    if (r->operation == NULL) {
        wmrpc__operation_response__free_unpacked(r, NULL);
        return wc_fail(s, WEIGHT_EPROTO, "operation reply without operation");
    }
    wc_from_wire_operation(r->operation, op);
    wmrpc__operation_response__free_unpacked(r, NULL);
    return WEIGHT_OK;
}

int weight_repair(weight_store *s, const weight_identity *id, uint64_t expected_metadata_generation,
                  weight_operation *op)
{
    Wmrpc__MetadataResponse *r = NULL;
    int rc = check_id(s, id);
    if (rc < 0) return rc;
    if ((rc = wc_require_generation(s, "weight_repair", expected_metadata_generation)) < 0) return rc;
    rc = id_call_request(s, M(REPAIR), id, expected_metadata_generation, NULL,
                         &wmrpc__metadata_response__descriptor, (ProtobufCMessage **)&r);
    if (rc < 0) return rc;
    if (op) wc_from_wire_operation(r->operation, op);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    return WEIGHT_OK;
}

int weight_remove(weight_store *s, const weight_identity *id, uint64_t expected_metadata_generation,
                  weight_metadata *out)
{
    return weight_remove_request(s, id, expected_metadata_generation, NULL, out);
}

/* IMPORT_ABORT of the revision: see weightclient.h. The reply's metadata is
 * absent when the master forgot the revision at once (nothing uploaded). */
int weight_abort_import(weight_store *s, const weight_identity *id,
                        uint64_t expected_metadata_generation, weight_metadata *out)
{
    Wmrpc__MetadataResponse *r = NULL;
    int rc = check_id(s, id);
    if (rc < 0) return rc;
    if ((rc = wc_require_generation(s, "weight_abort_import", expected_metadata_generation)) < 0)
        return rc;
    rc = id_call_request(s, M(IMPORT_ABORT), id, expected_metadata_generation, NULL,
                         &wmrpc__metadata_response__descriptor, (ProtobufCMessage **)&r);
    if (rc < 0) return rc;
    if (out) wc_from_wire_metadata(r->metadata, out); /* NULL: all zero */
    wmrpc__metadata_response__free_unpacked(r, NULL);
    return WEIGHT_OK;
}

int weight_remove_request(weight_store *s, const weight_identity *id,
                          uint64_t expected_metadata_generation, const char *request_id,
                          weight_metadata *out)
{
    Wmrpc__MetadataResponse *r = NULL;
    int rc = check_id(s, id);
    if (rc < 0) return rc;
    if ((rc = check_request_id(s, request_id)) < 0) return rc;
    if ((rc = wc_require_generation(s, "weight_remove", expected_metadata_generation)) < 0) return rc;
    rc = id_call_request(s, M(REMOVE), id, expected_metadata_generation, request_id,
                         &wmrpc__metadata_response__descriptor, (ProtobufCMessage **)&r);
    if (rc < 0) return rc;
    if (out) wc_from_wire_metadata(r->metadata, out);
    wmrpc__metadata_response__free_unpacked(r, NULL);
    return WEIGHT_OK;
}
