/* etcd_client.h -- a small blocking client of etcd's v3 API over gRPC.
 *
 * The HA parts of the master (the etcd OpLog, the leader election, standby
 * tailing) talk to etcd only through this header. It covers the subset they
 * need: KV Range / Put / DeleteRange / Txn, Lease Grant / KeepAlive / Revoke,
 * Watch, and the Maintenance Status of one member. Messages are encoded with
 * protobuf-c from the project's own subset of etcd's rpc.proto
 * (proto/etcd_rpc.proto, same field numbers); the transport is Debian's gRPC
 * C core.
 *
 * Threading. Every call blocks the calling thread until etcd answers or the
 * client's per-call deadline passes, so none is ever made on the master's
 * loop thread. One etcd_client may be used from several threads at once;
 * an etcd_watch belongs to the thread that opened it.
 *
 * Transport: plaintext gRPC, or TLS to every member (a CA, and a client
 * certificate where etcd asks for one: etcd_client_options).
 *
 * Password auth: given a user and password (over TLS only), the client
 * authenticates on the first call and sends the token etcd gave with every
 * call and watch after it; a call etcd refuses because the token is no
 * longer good (etcd restarted, it expired, the password changed, a JWT
 * older than a change of roles) authenticates
 * again and is made once more, which is safe: etcd refuses before applying.
 * Given the password's file too, each login reads it again: write the new
 * password there, then change it in etcd (which makes every token old), and
 * the next login sends the new one.
 *
 * Endpoints. The client is given every member ("h1:p1,h2:p2"). A call that
 * fails with a transport error (member down, deadline) is retried once on the
 * next member; etcd's own refusals (a failed compare is not one: it is a
 * result) are not retried. Calls start on the member that answered last
 * (after a transport failure on it, on the next one). A member that cannot
 * be connected to costs a call at most about 1.5 s, not its whole deadline.
 *
 * Errors are negative SMP_E* codes (store_plugin.h); err (may be NULL) then
 * names the cause with the member and gRPC status where there is one:
 *   SMP_EINVAL   bad arguments
 *   SMP_ENOMEM   allocation failed
 *   SMP_EIO      no member answered in time, or a transport error
 *   SMP_ENOTFOUND  a lease that no longer exists (KeepAlive, Revoke)
 *   SMP_ERANGE   a watch start revision that etcd has compacted away
 *   SMP_EPROTO   an answer that did not decode, or an error status etcd sent
 * Results own their memory and are released with the matching _free call. */
#ifndef HOST_ETCD_CLIENT_H
#define HOST_ETCD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

typedef struct etcd_client etcd_client;
typedef struct etcd_watch etcd_watch;

typedef struct etcd_client_options {
    const char *endpoints;  /* "host:port[,host:port...]", at least one */
    uint32_t timeout_ms;    /* deadline of one call on one member; 0 = 2000 */
    /* TLS to every member: the PEM text (not a path) of the CA certificates
     * the members' server certificates must chain to, each member's
     * certificate checked against the host it is dialled at. NULL:
     * plaintext. */
    const char *tls_ca_pem;
    /* With tls_ca_pem: this client's certificate (chain) and private key,
     * PEM text, presented to members that ask for one (etcd's
     * --client-cert-auth). Both or neither. */
    const char *tls_cert_pem;
    const char *tls_key_pem;
    /* etcd's password auth: a user and its password (both or neither, and
     * only with tls_ca_pem: the password is sent to every member). NULL:
     * none (etcd's auth off, or the client certificate's CN is the user). */
    const char *user;
    const char *password;
    /* With user: the file password was read from (wc_token_read_file), read
     * again before each Authenticate. A password changed there is used
     * from that login on; a file that cannot be read leaves the password
     * held. Each is said on stderr. NULL: password is the only one. */
    const char *password_file;
} etcd_client_options;

/* Create a client. Makes no call yet (a member that is down, or whose TLS
 * handshake fails, is found out by the first call). Returns 0 and *out, or
 * SMP_EINVAL (no endpoint, a bad "host:port", a client certificate without
 * its key or either without a CA, a user without its password or the
 * reverse, or either without a CA) / SMP_ENOMEM. gRPC is initialised on the first open and shut
 * down with the last close. */
int etcd_client_open(const etcd_client_options *o,
                     etcd_client **out,          /* OUT */
                     char *err,
                     size_t errlen);

/* A renewed client certificate (or CA): new channels to every member over
 * TLS with ca_pem and, both or neither, cert_pem / key_pem (PEM text, as
 * at open), used by every call and watch started from now on. Calls and
 * watches already made finish on the channels they started on, which go
 * with the last of them. Any thread. SMP_OK, SMP_EINVAL (a plaintext
 * client, no CA, a certificate without its key) or SMP_ENOMEM, with err;
 * nothing changes then. */
int etcd_client_reload_tls(etcd_client *c, const char *ca_pem, const char *cert_pem,
                           const char *key_pem, char *err, size_t errlen);

/* Cancel what is in flight on other threads (they fail with SMP_EIO and
 * try no other member), wait until they returned, and release the client.
 * Open watches must be closed first, and no call may start once close has
 * begun. NULL is a no-op. */
void etcd_client_close(etcd_client *c);

/* -- KV ------------------------------------------------------------------- */

/* One key-value pair as etcd returns it; key and value are owned by the
 * result holding them (value is NULL with keys_only ranges). Both carry a
 * NUL after their bytes (not counted in the length), so text keys and
 * values can be used as strings. */
typedef struct etcd_kv {
    uint8_t *key;
    size_t key_len;
    uint8_t *value;
    size_t value_len;
    int64_t create_revision;
    int64_t mod_revision;
    int64_t version;
    int64_t lease;
} etcd_kv;

typedef struct etcd_range_result {
    etcd_kv *kvs;
    size_t n;
    int more;            /* more keys in the range past limit */
    int64_t count;       /* keys in the range */
    int64_t revision;    /* the store revision the answer reflects */
} etcd_range_result;

void etcd_range_result_free(etcd_range_result *r);

/* Range [key, range_end): range_end NULL means the one key; "\0" (length 1)
 * means every key >= key; a non-NULL range_end of length 0 is SMP_EINVAL, as
 * is an empty key. limit 0 = no limit; revision 0 = newest (SMP_ERANGE for
 * a compacted or future revision). Keys come sorted ascending by key. */
int etcd_range(etcd_client *c,
               const void *key,
               size_t key_len,
               const void *range_end,   /* may be NULL */
               size_t range_end_len,
               int64_t limit,
               int64_t revision,
               int keys_only,
               etcd_range_result *out,  /* OUT, zeroed on error */
               char *err,
               size_t errlen);

/* Put one key (lease 0: none). *out_revision (may be NULL) is the store
 * revision the put created. */
int etcd_put(etcd_client *c,
             const void *key,
             size_t key_len,
             const void *value,
             size_t value_len,
             int64_t lease,
             int64_t *out_revision,     /* OUT, may be NULL */
             char *err,
             size_t errlen);

/* Delete [key, range_end) (range_end as in etcd_range). *out_deleted (may
 * be NULL) counts the keys removed. */
int etcd_delete_range(etcd_client *c,
                      const void *key,
                      size_t key_len,
                      const void *range_end,
                      size_t range_end_len,
                      int64_t *out_deleted,  /* OUT, may be NULL */
                      char *err,
                      size_t errlen);

/* Compact the store's history up to revision: older versions of keys are
 * dropped, and reads and watches at a revision below it then fail with
 * SMP_ERANGE. Returns once the compaction is applied (etcd's "physical").
 * SMP_ERANGE when revision is already compacted or in the future. Like a
 * txn, never retried on another member once it may have reached etcd. */
int etcd_compact(etcd_client *c, int64_t revision, char *err, size_t errlen);

/* -- Txn: compares, then the success or the failure ops, atomically -------- */

typedef enum etcd_cmp_target {
    ETCD_CMP_VERSION = 0,  /* number: the key's version (0: the key is absent) */
    ETCD_CMP_CREATE = 1,   /* number: create_revision */
    ETCD_CMP_MOD = 2,      /* number: mod_revision */
    ETCD_CMP_VALUE = 3,    /* value bytes */
    ETCD_CMP_LEASE = 4     /* number: the lease the key is attached to */
} etcd_cmp_target;

typedef enum etcd_cmp_result {
    ETCD_CMP_EQUAL = 0,
    ETCD_CMP_GREATER = 1,
    ETCD_CMP_LESS = 2,
    ETCD_CMP_NOT_EQUAL = 3
} etcd_cmp_result;

typedef struct etcd_compare {
    etcd_cmp_target target;
    etcd_cmp_result result;
    const void *key;
    size_t key_len;
    int64_t number;        /* VERSION, CREATE, MOD, LEASE */
    const void *value;     /* VALUE */
    size_t value_len;
} etcd_compare;

typedef enum etcd_op_type {
    ETCD_OP_PUT = 0,
    ETCD_OP_DELETE = 1,
    ETCD_OP_RANGE = 2
} etcd_op_type;

typedef struct etcd_op {
    etcd_op_type type;
    const void *key;
    size_t key_len;
    const void *range_end;  /* DELETE, RANGE; NULL = the one key */
    size_t range_end_len;
    const void *value;      /* PUT */
    size_t value_len;
    int64_t lease;          /* PUT; 0 = none */
} etcd_op;

typedef struct etcd_txn_result {
    int succeeded;               /* the compares held: the success ops ran */
    int64_t revision;            /* store revision after the txn */
    etcd_range_result *ranges;   /* one per RANGE op of the branch that ran, in order */
    size_t n_ranges;
} etcd_txn_result;

void etcd_txn_result_free(etcd_txn_result *r);

/* Run one transaction. A failed compare is a result (succeeded = 0), not an
 * error. A transaction is never retried on another member once it may have
 * reached etcd (SMP_EIO then means: unknown whether it applied). */
int etcd_txn(etcd_client *c,
             const etcd_compare *cmp,
             size_t n_cmp,
             const etcd_op *success,
             size_t n_success,
             const etcd_op *failure,
             size_t n_failure,
             etcd_txn_result *out,  /* OUT, zeroed on error */
             char *err,
             size_t errlen);

/* -- Lease ---------------------------------------------------------------- */

/* Grant a lease of ttl_s seconds. *out_id is its id, *out_ttl_s (may be
 * NULL) the TTL etcd granted. */
int etcd_lease_grant(etcd_client *c,
                     int64_t ttl_s,
                     int64_t *out_id,      /* OUT */
                     int64_t *out_ttl_s,   /* OUT, may be NULL */
                     char *err,
                     size_t errlen);

/* Renew a lease once (one request and its answer on a KeepAlive stream).
 * *out_ttl_s is the TTL etcd restarted it with. SMP_ENOTFOUND when the lease
 * has expired or was revoked. */
int etcd_lease_keepalive(etcd_client *c,
                         int64_t id,
                         int64_t *out_ttl_s,  /* OUT, may be NULL */
                         char *err,
                         size_t errlen);

/* Revoke a lease (its keys are deleted). SMP_ENOTFOUND when it is gone. */
int etcd_lease_revoke(etcd_client *c, int64_t id, char *err, size_t errlen);

/* -- Watch ---------------------------------------------------------------- */

typedef enum etcd_event_type {
    ETCD_EVENT_PUT = 0,
    ETCD_EVENT_DELETE = 1
} etcd_event_type;

typedef struct etcd_event {
    etcd_event_type type;
    etcd_kv kv;              /* for DELETE only key and mod_revision are set */
} etcd_event;

typedef struct etcd_watch_batch {
    etcd_event *events;
    size_t n;
    int64_t revision;        /* the store revision of the answer */
} etcd_watch_batch;

void etcd_watch_batch_free(etcd_watch_batch *b);

/* Watch [key, range_end) from start_revision (0 = from now on). Returns once
 * etcd confirmed the watch; SMP_ERANGE when start_revision was compacted. */
int etcd_watch_open(etcd_client *c,
                    const void *key,
                    size_t key_len,
                    const void *range_end,
                    size_t range_end_len,
                    int64_t start_revision,
                    etcd_watch **out,        /* OUT */
                    char *err,
                    size_t errlen);

/* Wait up to timeout_ms for the next events. Returns 1 with *out filled, 0
 * when the time passed with nothing (out->n = 0), or an error: SMP_ERANGE
 * when etcd compacted past the watch, SMP_EIO when the stream broke (close
 * it and open a new one from the last revision seen + 1). A member that
 * stops answering breaks the stream through the transport keepalive (a
 * ping every 10 s, 5 s to answer), so a silent member is found out within
 * about 15 s of waiting here. */
int etcd_watch_next(etcd_watch *w,
                    uint32_t timeout_ms,
                    etcd_watch_batch *out,   /* OUT */
                    char *err,
                    size_t errlen);

/* Cancel and release a watch. NULL is a no-op. */
void etcd_watch_close(etcd_watch *w);

/* -- Maintenance ---------------------------------------------------------- */

typedef struct etcd_member_status {
    uint64_t member_id;
    uint64_t leader_id;      /* the raft leader this member sees */
    int64_t raft_term;
    int64_t revision;
    int64_t db_size;
} etcd_member_status;

/* Status of one member, by its "host:port" (one of the client's endpoints
 * or not). */
int etcd_member_status_get(etcd_client *c,
                           const char *endpoint,
                           etcd_member_status *out,  /* OUT */
                           char *err,
                           size_t errlen);

#endif /* HOST_ETCD_CLIENT_H */
