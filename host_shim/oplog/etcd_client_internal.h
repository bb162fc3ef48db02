/* etcd_client_internal.h -- what the files of the etcd client share: the
 * client and watch structures, the gRPC method names, and the transport
 * calls of etcd_client.c (ecl_ prefix) that etcd_client_calls.c (KV, Txn,
 * Lease, Status) and etcd_client_watch.c (Watch) are built on. Not for use
 * outside host_shim/oplog/etcd_client*.c. */
#ifndef HOST_ETCD_CLIENT_INTERNAL_H
#define HOST_ETCD_CLIENT_INTERNAL_H

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "etcd_client.h"
#include "etcd_kv.pb-c.h"
#include "etcd_rpc.pb-c.h"

#define ETCD_DEFAULT_TIMEOUT_MS 2000u
#define ETCD_MAX_ENDPOINTS 16
#define ETCD_EP_MAX 256

#define M_RANGE "/etcdserverpb.KV/Range"
#define M_PUT "/etcdserverpb.KV/Put"
#define M_DELETE "/etcdserverpb.KV/DeleteRange"
#define M_TXN "/etcdserverpb.KV/Txn"
#define M_COMPACT "/etcdserverpb.KV/Compact"
#define M_GRANT "/etcdserverpb.Lease/LeaseGrant"
#define M_REVOKE "/etcdserverpb.Lease/LeaseRevoke"
#define M_KEEPALIVE "/etcdserverpb.Lease/LeaseKeepAlive"
#define M_WATCH "/etcdserverpb.Watch/Watch"
#define M_STATUS "/etcdserverpb.Maintenance/Status"
#define M_AUTHENTICATE "/etcdserverpb.Auth/Authenticate"

#define ETCD_TOKEN_MAX 512       /* etcd's simple tokens are ~30 bytes, JWTs a few hundred */

/* A call in flight, linked into its client so etcd_client_close can
 * cancel it. Lives in the calling thread's stack frame. */
typedef struct etcd_active {
    grpc_call *call;
    struct etcd_active *next;
} etcd_active;

/* A channel to each member over one set of credentials. A reload of the
 * TLS files (etcd_client_reload_tls) makes a new set current; a set goes
 * once the last call or watch made on it is done with it. */
typedef struct ecl_channels {
    grpc_channel_credentials *creds; /* plaintext or TLS: every channel's */
    grpc_channel *ch[ETCD_MAX_ENDPOINTS];
    size_t n;                /* channels made (the client's n_ep once whole) */
    unsigned users;          /* (client's mu) holders: calls and watches, + 1 while current */
} ecl_channels;

struct etcd_client {
    size_t n_ep;
    char ep[ETCD_MAX_ENDPOINTS][ETCD_EP_MAX];   /* "host:port" */
    ecl_channels *chans;     /* (mu) the current set: ecl_channels_hold */
    int tls;                 /* the channels speak TLS (said in a failed connection's message) */
    uint32_t timeout_ms;
    pthread_mutex_t mu;
    pthread_cond_t idle;     /* signalled when active becomes empty */
    size_t current;          /* the member to try first (mu) */
    int closing;             /* (mu) */
    etcd_active *active;     /* (mu) */
    /* Password auth (etcd_client_auth.c): NULL user when off. The token is
     * "" until the first call authenticates, and again once etcd no longer
     * takes it. */
    char *user;
    char *password;          /* (mu) wiped when replaced and when the client is closed */
    char *password_file;     /* NULL: the password given is the only one */
    int password_file_failing; /* (mu) its last read failed (said once) */
    char token[ETCD_TOKEN_MAX]; /* (mu) */
    int auth_off;            /* (mu) etcd said its auth is off: no token */
};

struct etcd_watch {
    etcd_client *c;
    char ep[ETCD_EP_MAX];
    grpc_completion_queue *cq;
    grpc_call *call;
    ecl_channels *chans;     /* the set its call was made on, held until closed */
    grpc_metadata_array initial_md;
    grpc_byte_buffer *recv_buf;
    int recv_pending;        /* a RECV_MESSAGE batch is started, not plucked */
    int broken;              /* the stream ended or failed: only close works */
};

/* How a failed exchange failed: whether another member may be tried. */
typedef enum etcd_fail {
    FAIL_NONE = 0,
    FAIL_ETCD,        /* etcd (or the call's arguments) refused: no retry */
    FAIL_UNSENT,      /* no connection: the request never reached the member */
    FAIL_TRANSPORT    /* transport or deadline: it may have reached etcd */
} etcd_fail;

ProtobufCBinaryData ecl_bin(const void *p, size_t len);

int ecl_byte_buffer_copy(grpc_byte_buffer *bb, uint8_t **out, size_t *out_len);

grpc_byte_buffer *ecl_byte_buffer_of(const uint8_t *data, size_t len);

int ecl_call_unary(etcd_client *c,
                      const char *method,
                      int changes_store,
                      const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *resp_desc,
                      ProtobufCMessage **out,
                      char *err,
                      size_t errlen);

grpc_channel *ecl_channel_open(const char *ep, grpc_channel_credentials *creds);

/* The current set of channels, held for a call or a watch (it outlives a
 * reload until released). Never NULL on an open client. */
ecl_channels *ecl_channels_hold(etcd_client *c);

/* Let go of s; the last holder of a set no longer current frees it. */
void ecl_channels_release(etcd_client *c, ecl_channels *s);

/* How c reaches its members, for a message about a failed connection:
 * " over TLS (...)" or " in plaintext". */
const char *ecl_transport_said(const etcd_client *c);

int ecl_channel_wait_ready(grpc_channel *ch,
                              grpc_completion_queue *cq,
                              gpr_timespec deadline,
                              int only,
                              grpc_connectivity_state *state);

gpr_timespec ecl_deadline_in(uint32_t ms);

int ecl_exchange(etcd_client *c,
                    grpc_channel *ch,
                    const char *ep,
                    const char *method,
                    const uint8_t *req,
                    size_t req_len,
                    uint8_t **resp,
                    size_t *resp_len,
                    etcd_fail *fail,
                    char *err,
                    size_t errlen);

int ecl_key_ok(const void *key, size_t key_len, const void *range_end, size_t range_end_len);

int ecl_kv_copy(const Mvccpb__KeyValue *in, int with_value, etcd_kv *out);

void ecl_member_answered(etcd_client *c, size_t ep);

void ecl_member_failed(etcd_client *c, size_t ep);

size_t ecl_member_first(etcd_client *c);

int ecl_parse_endpoints(etcd_client *c, const char *list, char *err, size_t errlen);

int ecl_range_copy(const Etcdserverpb__RangeResponse *in, int keys_only, etcd_range_result *out);

void ecl_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

const char *ecl_state_name(grpc_connectivity_state st);

const char *ecl_status_name(grpc_status_code s);

int ecl_status_to_rc(grpc_status_code s, const char *details, etcd_fail *fail);

/* -- password auth (etcd_client_auth.c) ---------------------------------- */

/* Copy the user's password, and its file's path, into c (o->user set; both
 * or neither checked by the caller). 0 or SMP_ENOMEM. */
int ecl_auth_init(etcd_client *c, const etcd_client_options *o);

/* Wipe and free what ecl_auth_init kept. */
void ecl_auth_free(etcd_client *c);

/* The token a call of c's to member ep (channel ch) carries, into out: ""
 * without password auth, else the one held, or a new one from an
 * Authenticate call on that member. 0, or an SMP_E* code with err and
 * *fail set as ecl_exchange's. */
int ecl_auth_token(etcd_client *c, grpc_channel *ch, const char *ep, char *out, size_t cap,
                   etcd_fail *fail, char *err, size_t errlen);

/* Make op (a SEND_INITIAL_METADATA) carry token in md, etcd's "token"
 * metadata; nothing for "". Neither token nor md may go before the batch
 * holding op completes. */
void ecl_auth_metadata(grpc_op *op, grpc_metadata *md, const char *token);

/* 1 when a call that failed with status s and details said so because its
 * token is no longer good (etcd restarted, the token expired, or the users
 * changed since): the token is then dropped from c, if still held, so that
 * the next call authenticates again. */
int ecl_auth_token_refused(etcd_client *c, const char *token, grpc_status_code s,
                           const char *details);

#endif
