/* rpc_limits.h -- limits against abuse on the master's RPC (auth.limits):
 * the request rate and the in-flight request bytes of each connection and of
 * each tenant, and the most live weight revisions a tenant may hold.
 *
 * A rate is a token bucket: `rate` requests a second flow into a bucket of
 * `burst` requests, each request takes one, and a request that finds the
 * bucket empty is refused (SMP_EAGAIN) -- never delayed, so an accepted
 * request, and the durable acknowledgement it waits for, goes exactly as fast
 * as without limits. In-flight bytes are the bytes of request frames the
 * server has read (or, for the frame being read, been announced) and not yet
 * answered: the frame being assembled in the connection's buffer plus, for
 * every dispatched call, the frame it came in. A frame that would take a
 * connection or its tenant over its cap is skipped unread (never buffered)
 * and answered with its request_id: SMP_ERANGE when the frame alone exceeds
 * the cap (it can never be served), SMP_EAGAIN when it would fit once
 * earlier calls are answered. The connection stays usable after either.
 *
 * Connection limits apply to every connection that has not authenticated as
 * an admin; tenant limits to every connection authenticated as a reader or
 * writer, all of a tenant's connections sharing its bucket and byte count.
 * Admin connections (the nodes' registration and heartbeats, operators) are
 * not limited: a limit must never cut the cluster's own control traffic.
 * Revisions are counted by the weight plugin, which asks before an import
 * starts (smp_host_api.rpc_revision_quota, ABI 1.3); an admin's import is
 * not limited either, whichever tenant it names. Every refusal is counted
 * per reason and tenant for store_rpc_refused_total. A limit that is not
 * configured (0) does not apply. Loop thread only. */
#ifndef HOST_RPC_LIMITS_H
#define HOST_RPC_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#include "rpc_auth.h"

/* The least inflight_bytes the config allows: a HELLO with the longest
 * token (RPC_AUTH_TOKEN_MAX) and its envelope fit, so no limit can keep an
 * admin (a node) from authenticating. */
#define RPC_LIMITS_MIN_INFLIGHT 8192u

/* One set of limits; 0 in a field = no limit of that kind. */
typedef struct rpc_limit_values {
    uint32_t rate;           /* requests per second flowing into the bucket */
    uint32_t burst;          /* size of the bucket (requests); rate when 0 */
    uint64_t inflight_bytes; /* request bytes read and not yet answered */
    uint64_t max_revisions;  /* live weight revisions (tenant limits only) */
} rpc_limit_values;

/* The limits of one tenant that auth.limits.tenants names: the default
 * tenant limits with the fields it sets replaced. */
typedef struct rpc_limit_tenant {
    char tenant[RPC_AUTH_TENANT_MAX + 1];
    rpc_limit_values v;
} rpc_limit_tenant;

/* auth.limits as the config loads it (config_auth.c). */
typedef struct rpc_limits_config {
    rpc_limit_values connection; /* each connection */
    rpc_limit_values tenant;     /* each tenant, unless tenants[] names it */
    rpc_limit_tenant *tenants;   /* overrides, owned by the config */
    size_t n_tenants;
} rpc_limits_config;

/* Why a request was refused: the label reason of store_rpc_refused_total. */
typedef enum rpc_refusal {
    RPC_REFUSED_RATE = 0,
    RPC_REFUSED_INFLIGHT = 1,
    RPC_REFUSED_REVISIONS = 2,
    RPC_REFUSED_KINDS = 3
} rpc_refusal;

/* "rate", "inflight", "revisions". */
const char *rpc_refusal_name(rpc_refusal r);

/* A token bucket in thousandths of a request. */
typedef struct rpc_bucket {
    uint64_t milli;  /* thousandths of a request in the bucket */
    uint64_t at_ms;  /* when milli was last brought up to date */
    int started;
} rpc_bucket;

/* The running state of one tenant: its limits, bucket, bytes, refusals. */
typedef struct rpc_tenant_state {
    char tenant[RPC_AUTH_TENANT_MAX + 1];
    rpc_limit_values v;
    rpc_bucket bucket;
    uint64_t inflight;                      /* bytes charged to the tenant now */
    uint64_t refused[RPC_REFUSED_KINDS];
} rpc_tenant_state;

typedef struct rpc_limits rpc_limits;

/* The running limits of a master: one state for every tenant of tokens[0, n)
 * (each tenant once) with its configured values. cfg NULL, or one without any
 * limit, still gives a table (every refusal count at 0, nothing limited).
 * Returns SMP_OK, SMP_EINVAL (an override names a tenant no token has) or
 * SMP_ENOMEM. */
int rpc_limits_create(const rpc_limits_config *cfg, const rpc_auth_token *tokens, size_t n,
                      rpc_limits **out);
void rpc_limits_free(rpc_limits *l);

/* The per-connection limits. */
const rpc_limit_values *rpc_limits_connection(const rpc_limits *l);

/* The state of tenant, or NULL when no token names it. */
rpc_tenant_state *rpc_limits_tenant(rpc_limits *l, const char *tenant);

/* Count a refusal of reason for t (NULL: a connection of no tenant yet). */
void rpc_limits_count(rpc_limits *l, rpc_tenant_state *t, rpc_refusal reason);

/* Take one request from both buckets (b of the connection with conn's
 * values, and t's when t is not NULL) at now_ms, or from neither: 1 when
 * both had one, 0 when either was empty (*which says which: 0 the
 * connection's, 1 the tenant's). A rate of 0 is never empty. */
int rpc_bucket_take2(rpc_bucket *b, const rpc_limit_values *conn, rpc_tenant_state *t,
                     uint64_t now_ms, int *which);

/* What one connection is charged and may take (kept in the connection). */
typedef struct rpc_conn_limits {
    int exempt;                     /* authenticated as an admin: nothing applies */
    rpc_tenant_state *tenant;       /* its tenant's state; NULL: none yet */
    rpc_bucket bucket;              /* its own request rate */
    uint64_t inflight;              /* request bytes read (or announced), not yet answered */
    uint32_t frame_charged;         /* of those, the frame being read or dispatched */
    rpc_tenant_state *frame_tenant; /* the tenant that frame was charged to, or NULL */
} rpc_conn_limits;

/* The connection authenticated as tenant with role: an admin is exempt from
 * then on; a reader or writer takes its tenant's limits too. */
void rpc_limits_identify(rpc_limits *l, rpc_conn_limits *cl, const char *tenant, smp_role role);

/* Charge a frame of len bytes just announced on cl to it and its tenant:
 * SMP_OK, or the refusal with a sentence in msg (counted; nothing charged):
 * SMP_ERANGE when len alone is over a cap, SMP_EAGAIN when it fits once
 * earlier requests are answered. */
int rpc_limits_charge_frame(rpc_limits *l, rpc_conn_limits *cl, uint32_t len, char *msg,
                            size_t cap);

/* Give back len bytes charged to cl and t (NULL: no tenant). */
void rpc_limits_uncharge(rpc_conn_limits *cl, rpc_tenant_state *t, uint32_t len);

/* The frame being read or dispatched is done with (answered at once,
 * refused, or its charge moved to its call): give its bytes back. */
void rpc_limits_release_frame(rpc_conn_limits *cl);

/* Take one request from cl's bucket and its tenant's at now_ms: SMP_OK, or
 * SMP_EAGAIN with a sentence in msg and in *retry_ms how long until the
 * bucket that refused holds a request again (counted; neither bucket taken
 * from). */
int rpc_limits_take_rate(rpc_limits *l, rpc_conn_limits *cl, uint64_t now_ms, char *msg,
                         size_t cap, uint32_t *retry_ms);

/* Visit every tenant's refusal counts (and, first, those of connections of no
 * tenant, with tenant ""). */
typedef void (*rpc_limits_visit_fn)(void *arg, const char *tenant, const uint64_t *refused);
void rpc_limits_each(const rpc_limits *l, rpc_limits_visit_fn fn, void *arg);

/* Whether one more live revision of tenant fits: SMP_OK (and *limit, which
 * may be NULL, 0 when no limit applies), or SMP_ENOSPC when live already
 * reaches the tenant's max_revisions (*limit set to it; the refusal counted).
 * A tenant no token names has no limit. */
int rpc_limits_revision_quota(rpc_limits *l, const char *tenant, uint64_t live, uint64_t *limit);

#endif /* HOST_RPC_LIMITS_H */
