/* etcd_client.c -- a small blocking client of etcd's v3 API over gRPC.
 *
 * See etcd_client.h. Every call packs one request message with protobuf-c
 * (proto/etcd_rpc.proto, etcd's field numbers), runs one gRPC exchange on
 * the gRPC C core with a completion queue of its own (so calls from several
 * threads never share one), and unpacks the answer; the result structures
 * the caller gets are plain C copies, so nothing of protobuf-c or gRPC
 * escapes this file. KV, Lease Grant/Revoke, Compact and Status are unary
 * calls; a KeepAlive is one request and its answer on the bidirectional
 * LeaseKeepAlive stream (sent, half-closed and read in one batch); a watch
 * keeps its Watch stream open and reads one WatchResponse per
 * etcd_watch_next.
 *
 * Failover: the client keeps one channel per member and starts each call
 * on the member that answered last. A transport failure (UNAVAILABLE,
 * DEADLINE_EXCEEDED) is retried once on the next member -- for a call that
 * changes the store (put, delete, txn, compact, lease grant) only when the
 * request never left (no connection to the member), since otherwise it may
 * have been applied -- and the calls after it start on that next member.
 * gRPC statuses map to SMP_E* codes in status_to_rc. */
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_client.h"
#include "etcd_kv.pb-c.h"
#include "etcd_rpc.pb-c.h"
#include "store_plugin.h"

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

/* A call in flight, linked into its client so etcd_client_close can
 * cancel it. Lives in the calling thread's stack frame. */
typedef struct etcd_active {
    grpc_call *call;
    struct etcd_active *next;
} etcd_active;

struct etcd_client {
    size_t n_ep;
    char ep[ETCD_MAX_ENDPOINTS][ETCD_EP_MAX];   /* "host:port" */
    grpc_channel *ch[ETCD_MAX_ENDPOINTS];
    uint32_t timeout_ms;
    pthread_mutex_t mu;
    pthread_cond_t idle;     /* signalled when active becomes empty */
    size_t current;          /* the member to try first (mu) */
    int closing;             /* (mu) */
    etcd_active *active;     /* (mu) */
};

struct etcd_watch {
    etcd_client *c;
    char ep[ETCD_EP_MAX];
    grpc_completion_queue *cq;
    grpc_call *call;
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

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (err == NULL || errlen == 0) return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static const char *status_name(grpc_status_code s)
{
    switch (s) {
    case GRPC_STATUS_OK: return "OK";
    case GRPC_STATUS_CANCELLED: return "CANCELLED";
    case GRPC_STATUS_UNKNOWN: return "UNKNOWN";
    case GRPC_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case GRPC_STATUS_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case GRPC_STATUS_NOT_FOUND: return "NOT_FOUND";
    case GRPC_STATUS_ALREADY_EXISTS: return "ALREADY_EXISTS";
    case GRPC_STATUS_PERMISSION_DENIED: return "PERMISSION_DENIED";
    case GRPC_STATUS_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case GRPC_STATUS_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case GRPC_STATUS_ABORTED: return "ABORTED";
    case GRPC_STATUS_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case GRPC_STATUS_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case GRPC_STATUS_INTERNAL: return "INTERNAL";
    case GRPC_STATUS_UNAVAILABLE: return "UNAVAILABLE";
    case GRPC_STATUS_DATA_LOSS: return "DATA_LOSS";
    case GRPC_STATUS_UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "?";
    }
}

/* The SMP_E* code of a gRPC status etcd (or the transport) ended a call
 * with, and whether another member may be tried. etcd reports a lease that
 * is gone as NOT_FOUND ("requested lease not found") and a compacted or
 * future revision as OUT_OF_RANGE; UNAVAILABLE covers both a member that
 * cannot be reached and etcd's own "no leader" / "request timed out". */
static int status_to_rc(grpc_status_code s, const char *details, etcd_fail *fail)
{
    switch (s) {
    case GRPC_STATUS_OK:
        *fail = FAIL_NONE;
        return 0;
    case GRPC_STATUS_UNAVAILABLE:
        /* gRPC's words when no connection could be made: nothing was sent. */
        *fail = (strstr(details, "ailed to connect") != NULL ||
                 strstr(details, "onnection refused") != NULL) ? FAIL_UNSENT : FAIL_TRANSPORT;
        return SMP_EIO;
    case GRPC_STATUS_DEADLINE_EXCEEDED:
    case GRPC_STATUS_CANCELLED:
        *fail = FAIL_TRANSPORT;
        return SMP_EIO;
    case GRPC_STATUS_NOT_FOUND:
        *fail = FAIL_ETCD;
        return SMP_ENOTFOUND;
    case GRPC_STATUS_OUT_OF_RANGE:
        *fail = FAIL_ETCD;
        return SMP_ERANGE;
    case GRPC_STATUS_INVALID_ARGUMENT:
        *fail = FAIL_ETCD;
        return SMP_EINVAL;
    default:
        *fail = FAIL_ETCD;
        return SMP_EPROTO;
    }
}

/* -- gRPC library lifetime ------------------------------------------------ */

static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned g_clients;

static void library_ref(void)
{
    pthread_mutex_lock(&g_init_mu);
    if (g_clients++ == 0) grpc_init();
    pthread_mutex_unlock(&g_init_mu);
}

static void library_unref(void)
{
    pthread_mutex_lock(&g_init_mu);
    if (--g_clients == 0) grpc_shutdown_blocking();
    pthread_mutex_unlock(&g_init_mu);
}

/* -- channels and calls ---------------------------------------------------- */

/* A channel to one member: short reconnect backoff (a restarted member is
 * found again within a second or two) and HTTP/2 keepalive, so a watch on a member
 * that stopped answering breaks instead of waiting forever. etcd refuses
 * pings more often than every 5 s. */
static grpc_channel *channel_open(const char *ep)
{
    grpc_arg args[7];
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS;
    args[0].value.integer = 100;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MIN_RECONNECT_BACKOFF_MS; /* also the connect timeout */
    args[1].value.integer = 1000;
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = (char *)GRPC_ARG_MAX_RECONNECT_BACKOFF_MS;
    args[2].value.integer = 1000;
    args[3].type = GRPC_ARG_INTEGER;
    args[3].key = (char *)GRPC_ARG_KEEPALIVE_TIME_MS;
    args[3].value.integer = 10000;
    args[4].type = GRPC_ARG_INTEGER;
    args[4].key = (char *)GRPC_ARG_KEEPALIVE_TIMEOUT_MS;
    args[4].value.integer = 5000;
    args[5].type = GRPC_ARG_INTEGER;
    args[5].key = (char *)GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA;
    args[5].value.integer = 0;
    args[6].type = GRPC_ARG_INTEGER;
    args[6].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[6].value.integer = -1;
    grpc_channel_args ca = {sizeof(args) / sizeof(args[0]), args};
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    if (creds == NULL) return NULL;
    grpc_channel *ch = grpc_channel_create(ep, creds, &ca);
    grpc_channel_credentials_release(creds);
    return ch;
}

static gpr_timespec deadline_in(uint32_t ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_millis((int64_t)ms, GPR_TIMESPAN));
}

static const char *state_name(grpc_connectivity_state st)
{
    switch (st) {
    case GRPC_CHANNEL_IDLE: return "IDLE";
    case GRPC_CHANNEL_CONNECTING: return "CONNECTING";
    case GRPC_CHANNEL_READY: return "READY";
    case GRPC_CHANNEL_TRANSIENT_FAILURE: return "TRANSIENT_FAILURE";
    case GRPC_CHANNEL_SHUTDOWN: return "SHUTDOWN";
    default: return "?";
    }
}

#define TAG_STATE ((void *)4)
#define ETCD_CONNECT_WAIT_MS 1500u

/* Bring ch to READY before a call, driving the connection attempts on cq
 * (gRPC core makes progress on a connection only while some completion
 * queue interested in it is polled, so a channel left alone between calls
 * would never finish reconnecting). Gives up at deadline, after
 * ETCD_CONNECT_WAIT_MS (a member in backoff gets one more attempt: the
 * longest backoff is 1 s), or as soon as an attempt made here failed.
 * Returns 0 when READY, else -1 with *state the last state seen. */
static int channel_wait_ready(grpc_channel *ch,
                              grpc_completion_queue *cq,
                              gpr_timespec deadline,
                              grpc_connectivity_state *state)
{
    gpr_timespec bound = deadline_in(ETCD_CONNECT_WAIT_MS);
    int attempted = 0;
    if (gpr_time_cmp(bound, deadline) > 0) bound = deadline;
    grpc_connectivity_state st = grpc_channel_check_connectivity_state(ch, 1);
    while (st != GRPC_CHANNEL_READY) {
        if (st == GRPC_CHANNEL_SHUTDOWN) break;
        if (st == GRPC_CHANNEL_TRANSIENT_FAILURE && attempted) break;
        if (st == GRPC_CHANNEL_CONNECTING) attempted = 1;
        grpc_channel_watch_connectivity_state(ch, st, bound, cq, TAG_STATE);
        grpc_event ev = grpc_completion_queue_pluck(cq, TAG_STATE,
                                                    gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        st = grpc_channel_check_connectivity_state(ch, 1);
        if (!ev.success) break; /* bound reached */
    }
    *state = st;
    return st == GRPC_CHANNEL_READY ? 0 : -1;
}

/* Link a call into the client (cancelled by etcd_client_close). Returns 0,
 * or -1 when the client is closing (the call must not start). */
static int active_add(etcd_client *c, etcd_active *a)
{
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (c->closing) {
        rc = -1;
    } else {
        a->next = c->active;
        c->active = a;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Give a linked call its gRPC call, so a close cancels it. Returns 0, or
 * -1 when the client started closing meanwhile. */
static int active_set_call(etcd_client *c, etcd_active *a, grpc_call *call)
{
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (c->closing) rc = -1;
    else a->call = call;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Unlink a call. Returns 1 when the client is closing (the call may have
 * been cancelled by it), else 0. */
static int active_remove(etcd_client *c, etcd_active *a)
{
    pthread_mutex_lock(&c->mu);
    for (etcd_active **p = &c->active; *p != NULL; p = &(*p)->next) {
        if (*p == a) {
            *p = a->next;
            break;
        }
    }
    int closing = c->closing;
    if (c->active == NULL) pthread_cond_broadcast(&c->idle);
    pthread_mutex_unlock(&c->mu);
    return closing;
}

/* Copy a received message out of gRPC. Returns 0 with *out (malloc'd, at
 * least 1 byte) and *out_len, or SMP_ENOMEM. */
static int byte_buffer_copy(grpc_byte_buffer *bb, uint8_t **out, size_t *out_len)
{
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, bb)) return SMP_EPROTO;
    grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    size_t len = GRPC_SLICE_LENGTH(s);
    uint8_t *p = malloc(len ? len : 1);
    if (p == NULL) {
        grpc_slice_unref(s);
        return SMP_ENOMEM;
    }
    memcpy(p, GRPC_SLICE_START_PTR(s), len);
    grpc_slice_unref(s);
    *out = p;
    *out_len = len;
    return 0;
}

static grpc_byte_buffer *byte_buffer_of(const uint8_t *data, size_t len)
{
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)data, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

/* One request and its one answer on member ep (channel ch): a unary call,
 * or a bidirectional stream that sends one message, half-closes and reads
 * one message (LeaseKeepAlive). Returns 0 with *resp (malloc'd) and
 * *resp_len, or an SMP_E* code with err set and *fail saying whether
 * another member may be tried. Never waits past the client's deadline. */
static int exchange(etcd_client *c,
                    grpc_channel *ch,
                    const char *ep,
                    const char *method,
                    const uint8_t *req,
                    size_t req_len,
                    uint8_t **resp,
                    size_t *resp_len,
                    etcd_fail *fail,
                    char *err,
                    size_t errlen)
{
    int rc;
    grpc_op ops[6];
    grpc_metadata_array initial_md, trailing_md;
    grpc_byte_buffer *send_buf = NULL, *recv_buf = NULL;
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    etcd_active act = {NULL, NULL};
    grpc_call *call = NULL;
    char detail_text[256];

    *fail = FAIL_TRANSPORT;
    *resp = NULL;
    *resp_len = 0;
    grpc_metadata_array_init(&initial_md);
    grpc_metadata_array_init(&trailing_md);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    if (cq == NULL) {
        set_err(err, errlen, "etcd %s %s: no completion queue", ep, method);
        *fail = FAIL_ETCD;
        rc = SMP_ENOMEM;
        goto destroy_md;
    }
    /* Registered before the channel is used, so etcd_client_close waits
     * for this thread to be done with it. */
    if (active_add(c, &act) < 0) {
        set_err(err, errlen, "etcd %s %s: the client is closing", ep, method);
        *fail = FAIL_ETCD;
        rc = SMP_EIO;
        goto destroy_cq;
    }
    gpr_timespec deadline = deadline_in(c->timeout_ms);
    grpc_connectivity_state state;
    if (channel_wait_ready(ch, cq, deadline, &state) < 0) {
        set_err(err, errlen, "etcd %s %s: no connection to the member (channel %s)", ep, method,
                state_name(state));
        *fail = FAIL_UNSENT;
        rc = SMP_EIO;
        goto remove_active;
    }
    call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                    grpc_slice_from_static_string(method), NULL, deadline, NULL);
    if (call == NULL) {
        set_err(err, errlen, "etcd %s %s: could not create the call", ep, method);
        *fail = FAIL_ETCD;
        rc = SMP_ENOMEM;
        goto remove_active;
    }
    if (active_set_call(c, &act, call) < 0) {
        set_err(err, errlen, "etcd %s %s: the client is closing", ep, method);
        *fail = FAIL_ETCD;
        rc = SMP_EIO;
        goto remove_active;
    }
    send_buf = byte_buffer_of(req, req_len);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = 0;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send_buf;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv_buf;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trailing_md;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &details;
    grpc_call_error ce = grpc_call_start_batch(call, ops, 6, (void *)&act, NULL);
    if (ce != GRPC_CALL_OK) {
        set_err(err, errlen, "etcd %s %s: grpc_call_start_batch failed (%d)", ep, method, (int)ce);
        *fail = FAIL_ETCD;
        rc = SMP_EIO;
        goto remove_active;
    }
    /* The call carries the deadline, so the batch completes by then; the
     * pluck bound is a second guard that cancels a call gRPC left hanging. */
    grpc_event ev = grpc_completion_queue_pluck(cq, &act, gpr_time_add(deadline,
                                                gpr_time_from_millis(1000, GPR_TIMESPAN)), NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
        grpc_call_cancel(call, NULL);
        ev = grpc_completion_queue_pluck(cq, &act, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    }
    size_t dlen = GRPC_SLICE_LENGTH(details);
    if (dlen >= sizeof(detail_text)) dlen = sizeof(detail_text) - 1;
    memcpy(detail_text, GRPC_SLICE_START_PTR(details), dlen);
    detail_text[dlen] = '\0';
    if (!ev.success) {
        set_err(err, errlen, "etcd %s %s: the call failed in gRPC", ep, method);
        rc = SMP_EIO;
        goto remove_active;
    }
    if ((rc = status_to_rc(status, detail_text, fail)) < 0) {
        set_err(err, errlen, "etcd %s %s: gRPC status %d (%s): %s", ep, method, (int)status,
                status_name(status), detail_text);
        goto remove_active;
    }
    if (recv_buf == NULL) {
        set_err(err, errlen, "etcd %s %s: status OK without an answer", ep, method);
        *fail = FAIL_ETCD;
        rc = SMP_EPROTO;
        goto remove_active;
    }
    if ((rc = byte_buffer_copy(recv_buf, resp, resp_len)) < 0) {
        set_err(err, errlen, "etcd %s %s: could not read the answer", ep, method);
        *fail = FAIL_ETCD;
    }
remove_active:
    if (active_remove(c, &act) && rc < 0) {
        /* cancelled by etcd_client_close: no other member is tried */
        set_err(err, errlen, "etcd %s %s: the client was closed", ep, method);
        *fail = FAIL_ETCD;
        rc = SMP_EIO;
    }
    if (call) grpc_call_unref(call);
destroy_cq:
    grpc_completion_queue_shutdown(cq);
    grpc_completion_queue_destroy(cq);
destroy_md:
    if (send_buf) grpc_byte_buffer_destroy(send_buf);
    if (recv_buf) grpc_byte_buffer_destroy(recv_buf);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&initial_md);
    grpc_metadata_array_destroy(&trailing_md);
    return rc;
}

/* The member calls start on: the one that answered last; after a transport
 * failure on it, the next one (so a dead member costs one attempt, and the
 * calls that follow start elsewhere). */
static size_t member_first(etcd_client *c)
{
    pthread_mutex_lock(&c->mu);
    size_t ep = c->current;
    pthread_mutex_unlock(&c->mu);
    return ep;
}

static void member_answered(etcd_client *c, size_t ep)
{
    pthread_mutex_lock(&c->mu);
    c->current = ep;
    pthread_mutex_unlock(&c->mu);
}

static void member_failed(etcd_client *c, size_t ep)
{
    pthread_mutex_lock(&c->mu);
    if (c->current == ep) c->current = (ep + 1) % c->n_ep;
    pthread_mutex_unlock(&c->mu);
}

/* Pack req, run it on the member that answered last and, after a transport
 * failure, once on the next member (a call that changes the store only when
 * the first attempt was never sent), and unpack the answer as resp_desc.
 * Returns 0 with *out (free with protobuf_c_message_free_unpacked), or an
 * SMP_E* code with err set (SMP_EPROTO: the answer did not decode). */
static int call_unary(etcd_client *c,
                      const char *method,
                      int changes_store,
                      const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *resp_desc,
                      ProtobufCMessage **out,
                      char *err,
                      size_t errlen)
{
    int rc;
    uint8_t *body = NULL, *answer = NULL;
    size_t answer_len = 0;
    etcd_fail fail = FAIL_NONE;
    size_t len = protobuf_c_message_get_packed_size(req);

    *out = NULL;
    body = malloc(len ? len : 1);
    if (body == NULL) {
        set_err(err, errlen, "etcd %s: out of memory", method);
        return SMP_ENOMEM;
    }
    protobuf_c_message_pack(req, body);
    size_t first = member_first(c);
    size_t attempts = c->n_ep > 1 ? 2 : 1;
    size_t ep = first;
    char first_err[256] = "";
    for (size_t i = 0; i < attempts; i++) {
        ep = (first + i) % c->n_ep;
        rc = exchange(c, c->ch[ep], c->ep[ep], method, body, len, &answer, &answer_len,
                      &fail, err, errlen);
        if (rc == 0) break;
        if (i == 0 && err != NULL) {
            snprintf(first_err, sizeof(first_err), "%s", err);
        } else if (err != NULL && first_err[0] != '\0') {
            /* both members failed: name both */
            size_t n = strlen(err);
            if (n + 1 < errlen) snprintf(err + n, errlen - n, "; before: %s", first_err);
        }
        if (fail == FAIL_ETCD) goto free_body;
        member_failed(c, ep);
        if (fail == FAIL_TRANSPORT && changes_store) {
            size_t n = err ? strlen(err) : 0;
            if (err && n + 1 < errlen)
                snprintf(err + n, errlen - n, " (it may have been applied)");
            goto free_body;
        }
    }
    if (rc < 0) goto free_body;
    member_answered(c, ep);
    *out = protobuf_c_message_unpack(resp_desc, NULL, answer_len, answer);
    if (*out == NULL) {
        set_err(err, errlen, "etcd %s %s: the answer (%zu bytes) does not decode as %s",
                c->ep[ep], method, answer_len, resp_desc->name);
        rc = SMP_EPROTO;
    }
free_body:
    free(answer);
    free(body);
    return rc;
}

/* -- open / close ------------------------------------------------------------ */

/* Split "h1:p1,h2:p2" into c->ep. Returns 0 or SMP_EINVAL with err set. */
static int parse_endpoints(etcd_client *c, const char *list, char *err, size_t errlen)
{
    const char *p = list;
    c->n_ep = 0;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
        if (len == 0 || len >= ETCD_EP_MAX) {
            set_err(err, errlen, "etcd endpoints \"%s\": an empty or overlong entry", list);
            return SMP_EINVAL;
        }
        if (c->n_ep == ETCD_MAX_ENDPOINTS) {
            set_err(err, errlen, "etcd endpoints \"%s\": more than %d members", list,
                    ETCD_MAX_ENDPOINTS);
            return SMP_EINVAL;
        }
        char *ep = c->ep[c->n_ep];
        memcpy(ep, p, len);
        ep[len] = '\0';
        char *colon = strrchr(ep, ':');
        int port_ok = colon != NULL && colon != ep && colon[1] != '\0' && strlen(colon + 1) <= 5;
        unsigned long port = 0;
        for (const char *d = colon ? colon + 1 : ""; port_ok && *d; d++) {
            if (*d < '0' || *d > '9') port_ok = 0;
            else port = port * 10 + (unsigned long)(*d - '0');
        }
        if (!port_ok || port == 0 || port > 65535 || strchr(ep, '/') != NULL) {
            set_err(err, errlen, "etcd endpoint \"%s\" is not host:port", ep);
            return SMP_EINVAL;
        }
        c->n_ep++;
        if (end == NULL) break;
        p = end + 1;
    }
    return 0;
}

int etcd_client_open(const etcd_client_options *o, etcd_client **out, char *err, size_t errlen)
{
    int rc;
    if (out) *out = NULL;
    if (o == NULL || out == NULL || o->endpoints == NULL) {
        set_err(err, errlen, "etcd_client_open: missing options, endpoints or out");
        return SMP_EINVAL;
    }
    etcd_client *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        set_err(err, errlen, "etcd_client_open: out of memory");
        return SMP_ENOMEM;
    }
    if ((rc = parse_endpoints(c, o->endpoints, err, errlen)) < 0) goto free_client;
    c->timeout_ms = o->timeout_ms ? o->timeout_ms : ETCD_DEFAULT_TIMEOUT_MS;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->idle, NULL);
    library_ref();
    for (size_t i = 0; i < c->n_ep; i++) {
        c->ch[i] = channel_open(c->ep[i]);
        if (c->ch[i] == NULL) {
            set_err(err, errlen, "etcd %s: could not create a gRPC channel", c->ep[i]);
            rc = SMP_ENOMEM;
            goto close_channels;
        }
    }
    *out = c;
    return 0;
close_channels:
    for (size_t i = 0; i < c->n_ep; i++)
        if (c->ch[i]) grpc_channel_destroy(c->ch[i]);
    library_unref();
    pthread_cond_destroy(&c->idle);
    pthread_mutex_destroy(&c->mu);
free_client:
    free(c);
    return rc;
}

void etcd_client_close(etcd_client *c)
{
    if (c == NULL) return;
    pthread_mutex_lock(&c->mu);
    c->closing = 1;
    for (etcd_active *a = c->active; a != NULL; a = a->next)
        if (a->call) grpc_call_cancel(a->call, NULL);
    while (c->active != NULL) pthread_cond_wait(&c->idle, &c->mu);
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; i < c->n_ep; i++) grpc_channel_destroy(c->ch[i]);
    pthread_cond_destroy(&c->idle);
    pthread_mutex_destroy(&c->mu);
    free(c);
    library_unref();
}

/* -- results ----------------------------------------------------------------- */

static void kv_clear(etcd_kv *kv)
{
    free(kv->key);
    free(kv->value);
    memset(kv, 0, sizeof(*kv));
}

/* A NUL-terminated copy of bytes (the NUL is not counted), NULL when out of
 * memory. */
static uint8_t *bytes_dup(const ProtobufCBinaryData *b)
{
    uint8_t *p = malloc(b->len + 1);
    if (p == NULL) return NULL;
    if (b->len) memcpy(p, b->data, b->len);
    p[b->len] = '\0';
    return p;
}

/* Copy a KeyValue (in may be NULL: an empty kv). Keys and values are
 * NUL-terminated for the caller's convenience. */
static int kv_copy(const Mvccpb__KeyValue *in, int with_value, etcd_kv *out)
{
    memset(out, 0, sizeof(*out));
    if (in == NULL) return 0;
    if ((out->key = bytes_dup(&in->key)) == NULL) return SMP_ENOMEM;
    out->key_len = in->key.len;
    if (with_value) {
        if ((out->value = bytes_dup(&in->value)) == NULL) {
            kv_clear(out);
            return SMP_ENOMEM;
        }
        out->value_len = in->value.len;
    }
    out->create_revision = in->create_revision;
    out->mod_revision = in->mod_revision;
    out->version = in->version;
    out->lease = in->lease;
    return 0;
}

void etcd_range_result_free(etcd_range_result *r)
{
    if (r == NULL) return;
    for (size_t i = 0; i < r->n; i++) kv_clear(&r->kvs[i]);
    free(r->kvs);
    memset(r, 0, sizeof(*r));
}

static int range_copy(const Etcdserverpb__RangeResponse *in, int keys_only, etcd_range_result *out)
{
    memset(out, 0, sizeof(*out));
    if (in->n_kvs > 0) {
        out->kvs = calloc(in->n_kvs, sizeof(*out->kvs));
        if (out->kvs == NULL) return SMP_ENOMEM;
    }
    for (size_t i = 0; i < in->n_kvs; i++) {
        if (kv_copy(in->kvs[i], !keys_only, &out->kvs[i]) < 0) {
            etcd_range_result_free(out);
            return SMP_ENOMEM;
        }
        out->n++;
    }
    out->more = in->more ? 1 : 0;
    out->count = in->count;
    out->revision = in->header ? in->header->revision : 0;
    return 0;
}

void etcd_txn_result_free(etcd_txn_result *r)
{
    if (r == NULL) return;
    for (size_t i = 0; i < r->n_ranges; i++) etcd_range_result_free(&r->ranges[i]);
    free(r->ranges);
    memset(r, 0, sizeof(*r));
}

void etcd_watch_batch_free(etcd_watch_batch *b)
{
    if (b == NULL) return;
    for (size_t i = 0; i < b->n; i++) kv_clear(&b->events[i].kv);
    free(b->events);
    memset(b, 0, sizeof(*b));
}

/* -- KV -------------------------------------------------------------------- */

/* A key is required; a range end is NULL (the one key) or non-empty. */
static int key_ok(const void *key, size_t key_len, const void *range_end, size_t range_end_len)
{
    if (key == NULL || key_len == 0) return 0;
    if (range_end != NULL && range_end_len == 0) return 0;
    return 1;
}

static ProtobufCBinaryData bin(const void *p, size_t len)
{
    ProtobufCBinaryData b;
    b.len = p ? len : 0;
    b.data = (uint8_t *)p;
    return b;
}

int etcd_range(etcd_client *c,
               const void *key,
               size_t key_len,
               const void *range_end,
               size_t range_end_len,
               int64_t limit,
               int64_t revision,
               int keys_only,
               etcd_range_result *out,
               char *err,
               size_t errlen)
{
    int rc;
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;

    if (out) memset(out, 0, sizeof(*out));
    if (c == NULL || out == NULL || !key_ok(key, key_len, range_end, range_end_len) ||
        limit < 0 || revision < 0) {
        set_err(err, errlen, "etcd_range: bad arguments");
        return SMP_EINVAL;
    }
    req.key = bin(key, key_len);
    req.range_end = bin(range_end, range_end_len);
    req.limit = limit;
    req.revision = revision;
    req.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
    req.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__KEY;
    req.keys_only = keys_only ? 1 : 0;
    if ((rc = call_unary(c, M_RANGE, 0, &req.base, &etcdserverpb__range_response__descriptor,
                         &resp, err, errlen)) < 0)
        return rc;
    if ((rc = range_copy((Etcdserverpb__RangeResponse *)resp, keys_only, out)) < 0)
        set_err(err, errlen, "etcd_range: out of memory");
    protobuf_c_message_free_unpacked(resp, NULL);
    return rc;
}

int etcd_put(etcd_client *c,
             const void *key,
             size_t key_len,
             const void *value,
             size_t value_len,
             int64_t lease,
             int64_t *out_revision,
             char *err,
             size_t errlen)
{
    int rc;
    Etcdserverpb__PutRequest req = ETCDSERVERPB__PUT_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;

    if (c == NULL || !key_ok(key, key_len, NULL, 0) || (value == NULL && value_len > 0) ||
        lease < 0) {
        set_err(err, errlen, "etcd_put: bad arguments");
        return SMP_EINVAL;
    }
    req.key = bin(key, key_len);
    req.value = bin(value, value_len);
    req.lease = lease;
    if ((rc = call_unary(c, M_PUT, 1, &req.base, &etcdserverpb__put_response__descriptor, &resp,
                         err, errlen)) < 0)
        return rc;
    Etcdserverpb__PutResponse *r = (Etcdserverpb__PutResponse *)resp;
    if (out_revision) *out_revision = r->header ? r->header->revision : 0;
    protobuf_c_message_free_unpacked(resp, NULL);
    return 0;
}

int etcd_delete_range(etcd_client *c,
                      const void *key,
                      size_t key_len,
                      const void *range_end,
                      size_t range_end_len,
                      int64_t *out_deleted,
                      char *err,
                      size_t errlen)
{
    int rc;
    Etcdserverpb__DeleteRangeRequest req = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;

    if (c == NULL || !key_ok(key, key_len, range_end, range_end_len)) {
        set_err(err, errlen, "etcd_delete_range: bad arguments");
        return SMP_EINVAL;
    }
    req.key = bin(key, key_len);
    req.range_end = bin(range_end, range_end_len);
    if ((rc = call_unary(c, M_DELETE, 1, &req.base,
                         &etcdserverpb__delete_range_response__descriptor, &resp, err,
                         errlen)) < 0)
        return rc;
    if (out_deleted) *out_deleted = ((Etcdserverpb__DeleteRangeResponse *)resp)->deleted;
    protobuf_c_message_free_unpacked(resp, NULL);
    return 0;
}

int etcd_compact(etcd_client *c, int64_t revision, char *err, size_t errlen)
{
    int rc;
    Etcdserverpb__CompactionRequest req = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;

    if (c == NULL || revision <= 0) {
        set_err(err, errlen, "etcd_compact: bad arguments");
        return SMP_EINVAL;
    }
    req.revision = revision;
    req.physical = 1;
    if ((rc = call_unary(c, M_COMPACT, 1, &req.base,
                         &etcdserverpb__compaction_response__descriptor, &resp, err, errlen)) < 0)
        return rc;
    protobuf_c_message_free_unpacked(resp, NULL);
    return 0;
}

/* -- Txn ------------------------------------------------------------------- */

/* The request side of a txn: every message lives in these arrays, which the
 * packed TxnRequest points into (nothing is owned by protobuf-c). */
typedef struct txn_build {
    Etcdserverpb__Compare *cmp;
    Etcdserverpb__Compare **cmp_p;
    Etcdserverpb__RequestOp *ops;
    Etcdserverpb__RequestOp **ops_p;
    Etcdserverpb__RangeRequest *ranges;
    Etcdserverpb__PutRequest *puts;
    Etcdserverpb__DeleteRangeRequest *dels;
} txn_build;

static void txn_build_free(txn_build *b)
{
    free(b->cmp);
    free(b->cmp_p);
    free(b->ops);
    free(b->ops_p);
    free(b->ranges);
    free(b->puts);
    free(b->dels);
}

static int compare_ok(const etcd_compare *k)
{
    if ((unsigned)k->target > ETCD_CMP_LEASE || (unsigned)k->result > ETCD_CMP_NOT_EQUAL)
        return 0;
    if (!key_ok(k->key, k->key_len, NULL, 0)) return 0;
    if (k->target == ETCD_CMP_VALUE && k->value == NULL && k->value_len > 0) return 0;
    return 1;
}

static int op_ok(const etcd_op *op)
{
    if ((unsigned)op->type > ETCD_OP_RANGE) return 0;
    if (!key_ok(op->key, op->key_len, op->range_end, op->range_end_len)) return 0;
    if (op->type == ETCD_OP_PUT &&
        ((op->value == NULL && op->value_len > 0) || op->lease < 0 || op->range_end != NULL))
        return 0;
    return 1;
}

/* Fill slot i of b with op. */
static void op_fill(txn_build *b, size_t i, const etcd_op *op)
{
    Etcdserverpb__RequestOp *r = &b->ops[i];
    etcdserverpb__request_op__init(r);
    b->ops_p[i] = r;
    switch (op->type) {
    case ETCD_OP_PUT:
        etcdserverpb__put_request__init(&b->puts[i]);
        b->puts[i].key = bin(op->key, op->key_len);
        b->puts[i].value = bin(op->value, op->value_len);
        b->puts[i].lease = op->lease;
        r->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
        r->request_put = &b->puts[i];
        break;
    case ETCD_OP_DELETE:
        etcdserverpb__delete_range_request__init(&b->dels[i]);
        b->dels[i].key = bin(op->key, op->key_len);
        b->dels[i].range_end = bin(op->range_end, op->range_end_len);
        r->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
        r->request_delete_range = &b->dels[i];
        break;
    case ETCD_OP_RANGE:
        etcdserverpb__range_request__init(&b->ranges[i]);
        b->ranges[i].key = bin(op->key, op->key_len);
        b->ranges[i].range_end = bin(op->range_end, op->range_end_len);
        b->ranges[i].sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
        b->ranges[i].sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__KEY;
        r->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
        r->request_range = &b->ranges[i];
        break;
    }
}

int etcd_txn(etcd_client *c,
             const etcd_compare *cmp,
             size_t n_cmp,
             const etcd_op *success,
             size_t n_success,
             const etcd_op *failure,
             size_t n_failure,
             etcd_txn_result *out,
             char *err,
             size_t errlen)
{
    int rc;
    txn_build b;
    Etcdserverpb__TxnRequest req = ETCDSERVERPB__TXN_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    size_t n_ops = n_success + n_failure;

    memset(&b, 0, sizeof(b));
    if (out) memset(out, 0, sizeof(*out));
    if (c == NULL || out == NULL || (n_cmp > 0 && cmp == NULL) ||
        (n_success > 0 && success == NULL) || (n_failure > 0 && failure == NULL) ||
        n_cmp > 65536 || n_success > 65536 || n_failure > 65536) {
        set_err(err, errlen, "etcd_txn: bad arguments");
        return SMP_EINVAL;
    }
    for (size_t i = 0; i < n_cmp; i++) {
        if (!compare_ok(&cmp[i])) {
            set_err(err, errlen, "etcd_txn: compare %zu is malformed", i);
            return SMP_EINVAL;
        }
    }
    for (size_t i = 0; i < n_ops; i++) {
        const etcd_op *op = i < n_success ? &success[i] : &failure[i - n_success];
        if (!op_ok(op)) {
            set_err(err, errlen, "etcd_txn: %s op %zu is malformed",
                    i < n_success ? "success" : "failure",
                    i < n_success ? i : i - n_success);
            return SMP_EINVAL;
        }
    }
    size_t nc = n_cmp ? n_cmp : 1, no = n_ops ? n_ops : 1;
    b.cmp = calloc(nc, sizeof(*b.cmp));
    b.cmp_p = calloc(nc, sizeof(*b.cmp_p));
    b.ops = calloc(no, sizeof(*b.ops));
    b.ops_p = calloc(no, sizeof(*b.ops_p));
    b.ranges = calloc(no, sizeof(*b.ranges));
    b.puts = calloc(no, sizeof(*b.puts));
    b.dels = calloc(no, sizeof(*b.dels));
    if (!b.cmp || !b.cmp_p || !b.ops || !b.ops_p || !b.ranges || !b.puts || !b.dels) {
        set_err(err, errlen, "etcd_txn: out of memory");
        rc = SMP_ENOMEM;
        goto free_build;
    }
    for (size_t i = 0; i < n_cmp; i++) {
        Etcdserverpb__Compare *k = &b.cmp[i];
        etcdserverpb__compare__init(k);
        b.cmp_p[i] = k;
        k->key = bin(cmp[i].key, cmp[i].key_len);
        k->result = (Etcdserverpb__Compare__CompareResult)cmp[i].result;
        k->target = (Etcdserverpb__Compare__CompareTarget)cmp[i].target;
        switch (cmp[i].target) {
        case ETCD_CMP_VERSION:
            k->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
            k->version = cmp[i].number;
            break;
        case ETCD_CMP_CREATE:
            k->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
            k->create_revision = cmp[i].number;
            break;
        case ETCD_CMP_MOD:
            k->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION;
            k->mod_revision = cmp[i].number;
            break;
        case ETCD_CMP_VALUE:
            k->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
            k->value = bin(cmp[i].value, cmp[i].value_len);
            break;
        case ETCD_CMP_LEASE:
            k->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_LEASE;
            k->lease = cmp[i].number;
            break;
        }
    }
    for (size_t i = 0; i < n_ops; i++)
        op_fill(&b, i, i < n_success ? &success[i] : &failure[i - n_success]);
    req.n_compare = n_cmp;
    req.compare = b.cmp_p;
    req.n_success = n_success;
    req.success = b.ops_p;
    req.n_failure = n_failure;
    req.failure = b.ops_p + n_success;
    if ((rc = call_unary(c, M_TXN, 1, &req.base, &etcdserverpb__txn_response__descriptor, &resp,
                         err, errlen)) < 0)
        goto free_build;

    Etcdserverpb__TxnResponse *r = (Etcdserverpb__TxnResponse *)resp;
    size_t n_ranges = 0;
    for (size_t i = 0; i < r->n_responses; i++) {
        if (r->responses[i] == NULL) continue;
        if (r->responses[i]->response_case == ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE &&
            r->responses[i]->response_range != NULL)
            n_ranges++;
    }
    if (n_ranges > 0 && (out->ranges = calloc(n_ranges, sizeof(*out->ranges))) == NULL) {
        set_err(err, errlen, "etcd_txn: out of memory");
        rc = SMP_ENOMEM;
        goto free_resp;
    }
    for (size_t i = 0; i < r->n_responses; i++) {
        const Etcdserverpb__ResponseOp *ro = r->responses[i];
        if (ro == NULL || ro->response_case != ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE ||
            ro->response_range == NULL)
            continue;
        if ((rc = range_copy(ro->response_range, 0, &out->ranges[out->n_ranges])) < 0) {
            set_err(err, errlen, "etcd_txn: out of memory");
            etcd_txn_result_free(out);
            goto free_resp;
        }
        out->n_ranges++;
    }
    out->succeeded = r->succeeded ? 1 : 0;
    out->revision = r->header ? r->header->revision : 0;
    rc = 0;
free_resp:
    protobuf_c_message_free_unpacked(resp, NULL);
free_build:
    txn_build_free(&b);
    return rc;
}

/* -- Lease ----------------------------------------------------------------- */

int etcd_lease_grant(etcd_client *c,
                     int64_t ttl_s,
                     int64_t *out_id,
                     int64_t *out_ttl_s,
                     char *err,
                     size_t errlen)
{
    int rc;
    Etcdserverpb__LeaseGrantRequest req = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;

    if (c == NULL || out_id == NULL || ttl_s <= 0) {
        set_err(err, errlen, "etcd_lease_grant: bad arguments");
        return SMP_EINVAL;
    }
    req.ttl = ttl_s;
    /* A grant that may have reached etcd is not repeated: a second lease
     * would be granted and never revoked. */
    if ((rc = call_unary(c, M_GRANT, 1, &req.base, &etcdserverpb__lease_grant_response__descriptor,
                         &resp, err, errlen)) < 0)
        return rc;
    Etcdserverpb__LeaseGrantResponse *r = (Etcdserverpb__LeaseGrantResponse *)resp;
    if (r->error != NULL && r->error[0] != '\0') {
        set_err(err, errlen, "etcd lease grant: %s", r->error);
        rc = SMP_EPROTO;
    } else if (r->id <= 0) {
        set_err(err, errlen, "etcd lease grant: answer without a lease id");
        rc = SMP_EPROTO;
    } else {
        *out_id = r->id;
        if (out_ttl_s) *out_ttl_s = r->ttl;
        rc = 0;
    }
    protobuf_c_message_free_unpacked(resp, NULL);
    return rc;
}

int etcd_lease_keepalive(etcd_client *c, int64_t id, int64_t *out_ttl_s, char *err, size_t errlen)
{
    int rc;
    Etcdserverpb__LeaseKeepAliveRequest req = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;

    if (c == NULL || id <= 0) {
        set_err(err, errlen, "etcd_lease_keepalive: bad arguments");
        return SMP_EINVAL;
    }
    req.id = id;
    /* A renewal is idempotent: it may be retried on another member. */
    if ((rc = call_unary(c, M_KEEPALIVE, 0, &req.base,
                         &etcdserverpb__lease_keep_alive_response__descriptor, &resp, err,
                         errlen)) < 0)
        return rc;
    Etcdserverpb__LeaseKeepAliveResponse *r = (Etcdserverpb__LeaseKeepAliveResponse *)resp;
    if (r->ttl <= 0) {
        /* etcd answers a renewal of an unknown lease with TTL 0. */
        set_err(err, errlen, "etcd lease keepalive: lease %lld not found", (long long)id);
        rc = SMP_ENOTFOUND;
    } else {
        if (out_ttl_s) *out_ttl_s = r->ttl;
        rc = 0;
    }
    protobuf_c_message_free_unpacked(resp, NULL);
    return rc;
}

int etcd_lease_revoke(etcd_client *c, int64_t id, char *err, size_t errlen)
{
    int rc;
    Etcdserverpb__LeaseRevokeRequest req = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;

    if (c == NULL || id <= 0) {
        set_err(err, errlen, "etcd_lease_revoke: bad arguments");
        return SMP_EINVAL;
    }
    req.id = id;
    /* Repeating a revoke that did apply answers NOT_FOUND, which is what
     * the caller wanted; so it may be retried on another member. */
    if ((rc = call_unary(c, M_REVOKE, 0, &req.base,
                         &etcdserverpb__lease_revoke_response__descriptor, &resp, err,
                         errlen)) < 0)
        return rc;
    protobuf_c_message_free_unpacked(resp, NULL);
    return 0;
}

/* -- Watch ----------------------------------------------------------------- */

#define TAG_SEND ((void *)1)
#define TAG_RECV ((void *)2)
#define TAG_STATUS ((void *)3)

/* Start reading the next WatchResponse (with the initial metadata the first
 * time). Returns 0 or SMP_EIO. */
static int watch_start_recv(etcd_watch *w, int with_initial_md)
{
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    if (with_initial_md) {
        ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[n].data.recv_initial_metadata.recv_initial_metadata = &w->initial_md;
        n++;
    }
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n].data.recv_message.recv_message = &w->recv_buf;
    n++;
    if (grpc_call_start_batch(w->call, ops, n, TAG_RECV, NULL) != GRPC_CALL_OK) return SMP_EIO;
    w->recv_pending = 1;
    return 0;
}

/* The stream ended (or broke): read its status, bounded by the client's
 * deadline, and describe it in err. Returns SMP_EIO, or the code the status
 * maps to when etcd ended the stream with one. */
static int watch_end(etcd_watch *w, char *err, size_t errlen)
{
    grpc_op op;
    grpc_metadata_array trailing;
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    char text[256];
    etcd_fail fail;
    int rc = SMP_EIO;

    w->broken = 1;
    grpc_metadata_array_init(&trailing);
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op.data.recv_status_on_client.trailing_metadata = &trailing;
    op.data.recv_status_on_client.status = &status;
    op.data.recv_status_on_client.status_details = &details;
    if (grpc_call_start_batch(w->call, &op, 1, TAG_STATUS, NULL) != GRPC_CALL_OK) {
        set_err(err, errlen, "etcd %s watch: the stream broke", w->ep);
        goto destroy;
    }
    grpc_event ev = grpc_completion_queue_pluck(w->cq, TAG_STATUS,
                                                deadline_in(w->c->timeout_ms), NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
        grpc_call_cancel(w->call, NULL);
        ev = grpc_completion_queue_pluck(w->cq, TAG_STATUS, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                         NULL);
    }
    size_t dlen = GRPC_SLICE_LENGTH(details);
    if (dlen >= sizeof(text)) dlen = sizeof(text) - 1;
    memcpy(text, GRPC_SLICE_START_PTR(details), dlen);
    text[dlen] = '\0';
    int mapped = status_to_rc(status, text, &fail);
    if (mapped < 0) rc = mapped;
    set_err(err, errlen, "etcd %s watch: the stream ended with gRPC status %d (%s): %s", w->ep,
            (int)status, status_name(status), text);
destroy:
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&trailing);
    return rc;
}

/* Wait for the pending RECV_MESSAGE until deadline. Returns 1 with
 * *resp decoded, 0 on timeout (the read stays pending), or an error (the
 * stream is broken then). */
static int watch_read(etcd_watch *w,
                      gpr_timespec deadline,
                      Etcdserverpb__WatchResponse **resp,
                      char *err,
                      size_t errlen)
{
    int rc;
    uint8_t *body = NULL;
    size_t len = 0;

    *resp = NULL;
    if (!w->recv_pending && (rc = watch_start_recv(w, 0)) < 0) {
        w->broken = 1;
        set_err(err, errlen, "etcd %s watch: could not start a read", w->ep);
        return rc;
    }
    grpc_event ev = grpc_completion_queue_pluck(w->cq, TAG_RECV, deadline, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) return 0;
    w->recv_pending = 0;
    if (!ev.success || w->recv_buf == NULL) return watch_end(w, err, errlen);
    rc = byte_buffer_copy(w->recv_buf, &body, &len);
    grpc_byte_buffer_destroy(w->recv_buf);
    w->recv_buf = NULL;
    if (rc < 0) {
        w->broken = 1;
        set_err(err, errlen, "etcd %s watch: could not read an answer", w->ep);
        return rc;
    }
    *resp = etcdserverpb__watch_response__unpack(NULL, len, body);
    free(body);
    if (*resp == NULL) {
        w->broken = 1;
        set_err(err, errlen, "etcd %s watch: an answer (%zu bytes) does not decode", w->ep, len);
        return SMP_EPROTO;
    }
    return 1;
}

/* The error of a WatchResponse that cancels the watch. */
static int watch_canceled(etcd_watch *w, const Etcdserverpb__WatchResponse *r, char *err,
                          size_t errlen)
{
    w->broken = 1;
    if (r->compact_revision > 0) {
        set_err(err, errlen, "etcd %s watch: revisions up to %lld are compacted", w->ep,
                (long long)r->compact_revision);
        return SMP_ERANGE;
    }
    set_err(err, errlen, "etcd %s watch: canceled by etcd: %s", w->ep,
            r->cancel_reason ? r->cancel_reason : "");
    return SMP_EIO;
}

static void watch_free(etcd_watch *w)
{
    if (w == NULL) return;
    if (w->call) {
        grpc_call_cancel(w->call, NULL);
        if (w->recv_pending)
            grpc_completion_queue_pluck(w->cq, TAG_RECV, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                        NULL);
        grpc_call_unref(w->call);
    }
    if (w->recv_buf) grpc_byte_buffer_destroy(w->recv_buf);
    if (w->cq) {
        grpc_completion_queue_shutdown(w->cq);
        grpc_completion_queue_destroy(w->cq);
    }
    grpc_metadata_array_destroy(&w->initial_md);
    free(w);
}

/* Open the Watch stream on member ep and wait for etcd's "created".
 * Returns 0 with *out, or an error with *fail as in exchange. */
static int watch_open_on(etcd_client *c,
                         size_t ep,
                         const uint8_t *req,
                         size_t req_len,
                         etcd_watch **out,
                         etcd_fail *fail,
                         char *err,
                         size_t errlen)
{
    int rc;
    grpc_op ops[2];
    grpc_byte_buffer *send_buf = NULL;
    Etcdserverpb__WatchResponse *resp = NULL;

    *out = NULL;
    *fail = FAIL_ETCD;
    etcd_watch *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        set_err(err, errlen, "etcd_watch_open: out of memory");
        return SMP_ENOMEM;
    }
    w->c = c;
    snprintf(w->ep, sizeof(w->ep), "%s", c->ep[ep]);
    grpc_metadata_array_init(&w->initial_md);
    if ((w->cq = grpc_completion_queue_create_for_pluck(NULL)) == NULL) {
        set_err(err, errlen, "etcd_watch_open: no completion queue");
        rc = SMP_ENOMEM;
        goto free_watch;
    }
    gpr_timespec deadline = deadline_in(c->timeout_ms);
    grpc_connectivity_state state;
    if (channel_wait_ready(c->ch[ep], w->cq, deadline, &state) < 0) {
        set_err(err, errlen, "etcd %s watch: no connection to the member (channel %s)", w->ep,
                state_name(state));
        *fail = FAIL_UNSENT;
        rc = SMP_EIO;
        goto free_watch;
    }
    w->call = grpc_channel_create_call(c->ch[ep], NULL, GRPC_PROPAGATE_DEFAULTS, w->cq,
                                       grpc_slice_from_static_string(M_WATCH), NULL,
                                       gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    if (w->call == NULL) {
        set_err(err, errlen, "etcd %s watch: could not create the call", w->ep);
        rc = SMP_ENOMEM;
        goto free_watch;
    }
    send_buf = byte_buffer_of(req, req_len);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send_buf;
    if (grpc_call_start_batch(w->call, ops, 2, TAG_SEND, NULL) != GRPC_CALL_OK) {
        set_err(err, errlen, "etcd %s watch: could not start the stream", w->ep);
        rc = SMP_EIO;
        goto free_watch;
    }
    grpc_event ev = grpc_completion_queue_pluck(w->cq, TAG_SEND, deadline, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
        grpc_call_cancel(w->call, NULL);
        grpc_completion_queue_pluck(w->cq, TAG_SEND, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        set_err(err, errlen, "etcd %s watch: no answer in %u ms", w->ep, c->timeout_ms);
        *fail = FAIL_TRANSPORT;
        rc = SMP_EIO;
        goto free_watch;
    }
    if ((rc = watch_start_recv(w, 1)) < 0) {
        set_err(err, errlen, "etcd %s watch: could not start a read", w->ep);
        goto free_watch;
    }
    /* Wait for "created"; an answer without it (none is expected) is skipped. */
    for (;;) {
        rc = watch_read(w, deadline, &resp, err, errlen);
        if (rc == 0) {
            set_err(err, errlen, "etcd %s watch: no answer in %u ms", w->ep, c->timeout_ms);
            *fail = FAIL_TRANSPORT;
            rc = SMP_EIO;
            goto free_watch;
        }
        if (rc < 0) {
            if (rc == SMP_EIO) *fail = FAIL_TRANSPORT;
            goto free_watch;
        }
        if (resp->canceled) {
            rc = watch_canceled(w, resp, err, errlen);
            goto free_resp;
        }
        if (resp->created) break;
        etcdserverpb__watch_response__free_unpacked(resp, NULL);
        resp = NULL;
    }
    etcdserverpb__watch_response__free_unpacked(resp, NULL);
    grpc_byte_buffer_destroy(send_buf);
    *fail = FAIL_NONE;
    *out = w;
    return 0;
free_resp:
    etcdserverpb__watch_response__free_unpacked(resp, NULL);
free_watch:
    if (send_buf) grpc_byte_buffer_destroy(send_buf);
    watch_free(w);
    return rc;
}

int etcd_watch_open(etcd_client *c,
                    const void *key,
                    size_t key_len,
                    const void *range_end,
                    size_t range_end_len,
                    int64_t start_revision,
                    etcd_watch **out,
                    char *err,
                    size_t errlen)
{
    int rc;
    Etcdserverpb__WatchRequest req = ETCDSERVERPB__WATCH_REQUEST__INIT;
    Etcdserverpb__WatchCreateRequest create = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    etcd_range_result probe;
    etcd_fail fail = FAIL_NONE;

    if (out) *out = NULL;
    if (c == NULL || out == NULL || !key_ok(key, key_len, range_end, range_end_len) ||
        start_revision < 0) {
        set_err(err, errlen, "etcd_watch_open: bad arguments");
        return SMP_EINVAL;
    }
    /* etcd confirms a watch from a compacted revision and cancels it only
     * afterwards; a range read at that revision finds it out first (a
     * revision in the future is fine for a watch). */
    if (start_revision > 0) {
        char probe_err[256] = "";
        rc = etcd_range(c, key, key_len, range_end, range_end_len, 1, start_revision, 1, &probe,
                        probe_err, sizeof(probe_err));
        if (rc == 0) {
            etcd_range_result_free(&probe);
        } else if (rc != SMP_ERANGE || strstr(probe_err, "compacted") != NULL) {
            set_err(err, errlen, "%s", probe_err);
            return rc;
        }
    }
    create.key = bin(key, key_len);
    create.range_end = bin(range_end, range_end_len);
    create.start_revision = start_revision;
    req.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    req.create_request = &create;
    size_t len = etcdserverpb__watch_request__get_packed_size(&req);
    uint8_t *body = malloc(len ? len : 1);
    if (body == NULL) {
        set_err(err, errlen, "etcd_watch_open: out of memory");
        return SMP_ENOMEM;
    }
    etcdserverpb__watch_request__pack(&req, body);
    size_t first = member_first(c);
    size_t attempts = c->n_ep > 1 ? 2 : 1;
    rc = SMP_EIO;
    for (size_t i = 0; i < attempts; i++) {
        size_t ep = (first + i) % c->n_ep;
        rc = watch_open_on(c, ep, body, len, out, &fail, err, errlen);
        if (rc == 0) {
            member_answered(c, ep);
            break;
        }
        if (fail == FAIL_ETCD) break;
        member_failed(c, ep);
    }
    free(body);
    return rc;
}

int etcd_watch_next(etcd_watch *w,
                    uint32_t timeout_ms,
                    etcd_watch_batch *out,
                    char *err,
                    size_t errlen)
{
    int rc;
    Etcdserverpb__WatchResponse *resp = NULL;

    if (out) memset(out, 0, sizeof(*out));
    if (w == NULL || out == NULL) {
        set_err(err, errlen, "etcd_watch_next: bad arguments");
        return SMP_EINVAL;
    }
    if (w->broken) {
        set_err(err, errlen, "etcd %s watch: the stream is broken; open a new watch", w->ep);
        return SMP_EIO;
    }
    gpr_timespec deadline = deadline_in(timeout_ms);
    for (;;) {
        rc = watch_read(w, deadline, &resp, err, errlen);
        if (rc <= 0) return rc;
        if (resp->canceled) {
            rc = watch_canceled(w, resp, err, errlen);
            goto free_resp;
        }
        if (resp->n_events > 0) break;
        /* created, progress: nothing for the caller */
        etcdserverpb__watch_response__free_unpacked(resp, NULL);
        resp = NULL;
    }
    out->events = calloc(resp->n_events, sizeof(*out->events));
    if (out->events == NULL) {
        set_err(err, errlen, "etcd_watch_next: out of memory");
        rc = SMP_ENOMEM;
        goto free_resp;
    }
    for (size_t i = 0; i < resp->n_events; i++) {
        const Mvccpb__Event *e = resp->events[i];
        etcd_event *o = &out->events[i];
        if (e == NULL || (e->type != MVCCPB__EVENT__EVENT_TYPE__PUT &&
                          e->type != MVCCPB__EVENT__EVENT_TYPE__DELETE)) {
            set_err(err, errlen, "etcd %s watch: an event of unknown type", w->ep);
            etcd_watch_batch_free(out);
            w->broken = 1;
            rc = SMP_EPROTO;
            goto free_resp;
        }
        o->type = e->type == MVCCPB__EVENT__EVENT_TYPE__PUT ? ETCD_EVENT_PUT : ETCD_EVENT_DELETE;
        if (kv_copy(e->kv, o->type == ETCD_EVENT_PUT, &o->kv) < 0) {
            set_err(err, errlen, "etcd_watch_next: out of memory");
            etcd_watch_batch_free(out);
            rc = SMP_ENOMEM;
            goto free_resp;
        }
        out->n++;
    }
    out->revision = resp->header ? resp->header->revision : 0;
    rc = 1;
free_resp:
    etcdserverpb__watch_response__free_unpacked(resp, NULL);
    return rc;
}

void etcd_watch_close(etcd_watch *w)
{
    watch_free(w);
}

/* -- Maintenance ------------------------------------------------------------- */

int etcd_member_status_get(etcd_client *c,
                           const char *endpoint,
                           etcd_member_status *out,
                           char *err,
                           size_t errlen)
{
    int rc;
    Etcdserverpb__StatusRequest req = ETCDSERVERPB__STATUS_REQUEST__INIT;
    uint8_t body[16], *answer = NULL;
    size_t answer_len = 0;
    etcd_fail fail;
    grpc_channel *own = NULL, *ch = NULL;
    Etcdserverpb__StatusResponse *r = NULL;

    if (out) memset(out, 0, sizeof(*out));
    if (c == NULL || endpoint == NULL || out == NULL) {
        set_err(err, errlen, "etcd_member_status_get: bad arguments");
        return SMP_EINVAL;
    }
    for (size_t i = 0; i < c->n_ep; i++)
        if (strcmp(c->ep[i], endpoint) == 0) ch = c->ch[i];
    if (ch == NULL) {
        etcd_client probe;
        if (parse_endpoints(&probe, endpoint, err, errlen) < 0 || probe.n_ep != 1) {
            set_err(err, errlen, "etcd_member_status_get: \"%s\" is not one host:port", endpoint);
            return SMP_EINVAL;
        }
        if ((ch = own = channel_open(endpoint)) == NULL) {
            set_err(err, errlen, "etcd %s: could not create a gRPC channel", endpoint);
            return SMP_ENOMEM;
        }
    }
    size_t len = etcdserverpb__status_request__pack(&req, body);
    if ((rc = exchange(c, ch, endpoint, M_STATUS, body, len, &answer, &answer_len, &fail, err,
                       errlen)) < 0)
        goto destroy_channel;
    if ((r = etcdserverpb__status_response__unpack(NULL, answer_len, answer)) == NULL) {
        set_err(err, errlen, "etcd %s status: the answer (%zu bytes) does not decode", endpoint,
                answer_len);
        rc = SMP_EPROTO;
        goto free_answer;
    }
    out->member_id = r->header ? r->header->member_id : 0;
    out->leader_id = r->leader;
    out->raft_term = (int64_t)r->raftterm;
    out->revision = r->header ? r->header->revision : 0;
    out->db_size = r->dbsize;
    etcdserverpb__status_response__free_unpacked(r, NULL);
free_answer:
    free(answer);
destroy_channel:
    if (own) grpc_channel_destroy(own);
    return rc;
}
