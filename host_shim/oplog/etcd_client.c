/* etcd_client.c -- a small blocking client of etcd's v3 API over gRPC.
 *
 * See etcd_client.h. Every call packs one request message with protobuf-c
 * (proto/etcd_rpc.proto, etcd's field numbers), runs one gRPC exchange on
 * the gRPC C core with a completion queue of its own (so calls from several
 * threads never share one), and unpacks the answer; the result structures
 * the caller gets are plain C copies, so nothing of protobuf-c or gRPC
 * escapes these files. KV, Lease Grant/Revoke, Compact and Status are unary
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
 * A call to the only member waits for a connection up to its deadline,
 * through as many connect attempts as fit (ecl_channel_wait_ready).
 * gRPC statuses map to SMP_E* codes in ecl_status_to_rc.
 *
 * This file is the transport: channels, one exchange, member failover, open
 * and close, and the copies of results; etcd_client_calls.c holds the
 * unary calls and etcd_client_watch.c the watches
 * (etcd_client_internal.h is what they share). */
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "etcd_client_internal.h"
#include "log_limit.h"
#include "store_plugin.h"

void ecl_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (err == NULL || errlen == 0) return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

const char *ecl_status_name(grpc_status_code s)
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
int ecl_status_to_rc(grpc_status_code s, const char *details, etcd_fail *fail)
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

/* gRPC's own log lines, on stderr as the master's are, at most
 * GRPC_LOG_BURST a minute (the rest counted and summed up): the cause of
 * a refused TLS handshake is told only there, and told again at every
 * reconnect, about once a second for as long as it lasts. An assertion's
 * line, before gRPC aborts, always goes through. */
#define GRPC_LOG_BURST 6
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static log_limit g_log = {.burst = GRPC_LOG_BURST, .window_ms = 60000};

static void grpc_log(gpr_log_func_args *a)
{
    struct timespec ts;
    uint64_t summary = 0;
    const char *file = strrchr(a->file, '/');
    clock_gettime(CLOCK_MONOTONIC, &ts);
    pthread_mutex_lock(&g_log_mu);
    int admit = log_limit_admit(&g_log, (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000,
                                &summary);
    pthread_mutex_unlock(&g_log_mu);
    if (summary > 0)
        fprintf(stderr, "etcd client: %" PRIu64 " more lines of gRPC's left out in a minute\n",
                summary);
    if (admit || strstr(a->message, "assertion failed") != NULL)
        fprintf(stderr, "etcd client: gRPC %s: %s (%s:%d)\n", gpr_log_severity_string(a->severity),
                a->message, file != NULL ? file + 1 : a->file, a->line);
}

static void library_ref(void)
{
    pthread_mutex_lock(&g_init_mu);
    if (g_clients++ == 0) {
        gpr_set_log_function(grpc_log);
        grpc_init();
    }
    pthread_mutex_unlock(&g_init_mu);
}

static void library_unref(void)
{
    pthread_mutex_lock(&g_init_mu);
    if (--g_clients == 0) grpc_shutdown_blocking();
    pthread_mutex_unlock(&g_init_mu);
}

/* -- channels and calls ---------------------------------------------------- */

/* A channel to one member over creds (plaintext or TLS): short reconnect
 * backoff (a restarted member is found again within a second or two) and
 * HTTP/2 keepalive, so a watch on a member that stopped answering breaks
 * instead of waiting forever. etcd refuses pings more often than every 5 s. */
grpc_channel *ecl_channel_open(const char *ep, grpc_channel_credentials *creds)
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
    return grpc_channel_create(ep, creds, &ca);
}

/* A set of channels to c's members over creds (taken over; released with
 * the set). NULL when out of memory (creds released). */
static ecl_channels *channels_new(const etcd_client *c, grpc_channel_credentials *creds)
{
    ecl_channels *s = creds != NULL ? calloc(1, sizeof(*s)) : NULL;
    if (s == NULL) {
        if (creds != NULL) grpc_channel_credentials_release(creds);
        return NULL;
    }
    s->creds = creds;
    s->users = 1;
    for (s->n = 0; s->n < c->n_ep; s->n++)
        if ((s->ch[s->n] = ecl_channel_open(c->ep[s->n], creds)) == NULL) break;
    return s;
}

static void channels_free(ecl_channels *s)
{
    if (s == NULL) return;
    for (size_t i = 0; i < s->n; i++) grpc_channel_destroy(s->ch[i]);
    grpc_channel_credentials_release(s->creds);
    free(s);
}

ecl_channels *ecl_channels_hold(etcd_client *c)
{
    pthread_mutex_lock(&c->mu);
    ecl_channels *s = c->chans;
    s->users++;
    pthread_mutex_unlock(&c->mu);
    return s;
}

void ecl_channels_release(etcd_client *c, ecl_channels *s)
{
    pthread_mutex_lock(&c->mu);
    int last = --s->users == 0;
    pthread_mutex_unlock(&c->mu);
    if (last) channels_free(s);
}

const char *ecl_transport_said(const etcd_client *c)
{
    return c->tls ? " over TLS (a refused TLS handshake ends so too: the \"etcd client: "
                    "gRPC\" lines of this log name its cause)"
                  : " in plaintext";
}

/* The credentials of o's transport: TLS with o's CA (and client
 * certificate), or plaintext. NULL on a lack of memory. */
static grpc_channel_credentials *credentials_of(const etcd_client_options *o)
{
    if (o->tls_ca_pem == NULL) return grpc_insecure_credentials_create();
    grpc_ssl_pem_key_cert_pair pair = {.private_key = o->tls_key_pem,
                                       .cert_chain = o->tls_cert_pem};
    return grpc_ssl_credentials_create(o->tls_ca_pem, o->tls_cert_pem != NULL ? &pair : NULL,
                                       NULL, NULL);
}

gpr_timespec ecl_deadline_in(uint32_t ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_millis((int64_t)ms, GPR_TIMESPAN));
}

const char *ecl_state_name(grpc_connectivity_state st)
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
 * would never finish reconnecting). With other members to try, gives up at
 * deadline, after ETCD_CONNECT_WAIT_MS (a member in backoff gets one more
 * attempt: the longest backoff is 1 s), or as soon as an attempt made here
 * failed -- the call moves on. The only member (only != 0) is given every
 * attempt up to the deadline: an attempt fails after gRPC's connect timeout
 * of 1 s (GRPC_ARG_MIN_RECONNECT_BACKOFF_MS), which a member slow to answer
 * its handshake (just resumed, loaded, far away) can take, and there is
 * nowhere else to go. Returns 0 when READY, else -1 with *state the last
 * state seen. */
int ecl_channel_wait_ready(grpc_channel *ch,
                              grpc_completion_queue *cq,
                              gpr_timespec deadline,
                              int only,
                              grpc_connectivity_state *state)
{
    gpr_timespec bound = ecl_deadline_in(ETCD_CONNECT_WAIT_MS);
    int attempted = 0;
    if (only || gpr_time_cmp(bound, deadline) > 0) bound = deadline;
    grpc_connectivity_state st = grpc_channel_check_connectivity_state(ch, 1);
    while (st != GRPC_CHANNEL_READY) {
        if (st == GRPC_CHANNEL_SHUTDOWN) break;
        if (st == GRPC_CHANNEL_TRANSIENT_FAILURE && attempted && !only) break;
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
int ecl_byte_buffer_copy(grpc_byte_buffer *bb, uint8_t **out, size_t *out_len)
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

grpc_byte_buffer *ecl_byte_buffer_of(const uint8_t *data, size_t len)
{
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)data, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

/* ecl_exchange's one attempt, carrying token ("" none); *token_refused
 * set when etcd refused it for the token (ecl_auth_token_refused). */
static int exchange_once(etcd_client *c,
                         grpc_channel *ch,
                         const char *ep,
                         const char *method,
                         const uint8_t *req,
                         size_t req_len,
                         const char *token,
                         int *token_refused,
                         uint8_t **resp,
                         size_t *resp_len,
                         etcd_fail *fail,
                         char *err,
                         size_t errlen)
{
    int rc;
    grpc_metadata md;
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
        ecl_set_err(err, errlen, "etcd %s %s: no completion queue", ep, method);
        *fail = FAIL_ETCD;
        rc = SMP_ENOMEM;
        goto destroy_md;
    }
    /* Registered before the channel is used, so etcd_client_close waits
     * for this thread to be done with it. */
    if (active_add(c, &act) < 0) {
        ecl_set_err(err, errlen, "etcd %s %s: the client is closing", ep, method);
        *fail = FAIL_ETCD;
        rc = SMP_EIO;
        goto destroy_cq;
    }
    gpr_timespec deadline = ecl_deadline_in(c->timeout_ms);
    grpc_connectivity_state state;
    if (ecl_channel_wait_ready(ch, cq, deadline, c->n_ep == 1, &state) < 0) {
        ecl_set_err(err, errlen, "etcd %s %s: no connection to the member%s (channel %s)", ep,
                    method, ecl_transport_said(c), ecl_state_name(state));
        *fail = FAIL_UNSENT;
        rc = SMP_EIO;
        goto remove_active;
    }
    call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                    grpc_slice_from_static_string(method), NULL, deadline, NULL);
    if (call == NULL) {
        ecl_set_err(err, errlen, "etcd %s %s: could not create the call", ep, method);
        *fail = FAIL_ETCD;
        rc = SMP_ENOMEM;
        goto remove_active;
    }
    if (active_set_call(c, &act, call) < 0) {
        ecl_set_err(err, errlen, "etcd %s %s: the client is closing", ep, method);
        *fail = FAIL_ETCD;
        rc = SMP_EIO;
        goto remove_active;
    }
    send_buf = ecl_byte_buffer_of(req, req_len);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ecl_auth_metadata(&ops[0], &md, token); /* both outlive the call */
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
        ecl_set_err(err, errlen, "etcd %s %s: grpc_call_start_batch failed (%d)", ep, method, (int)ce);
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
        ecl_set_err(err, errlen, "etcd %s %s: the call failed in gRPC", ep, method);
        rc = SMP_EIO;
        goto remove_active;
    }
    if ((rc = ecl_status_to_rc(status, detail_text, fail)) < 0) {
        ecl_set_err(err, errlen, "etcd %s %s: gRPC status %d (%s): %s", ep, method, (int)status,
                ecl_status_name(status), detail_text);
        *token_refused = ecl_auth_token_refused(c, token, status, detail_text);
        goto remove_active;
    }
    if (recv_buf == NULL) {
        ecl_set_err(err, errlen, "etcd %s %s: status OK without an answer", ep, method);
        *fail = FAIL_ETCD;
        rc = SMP_EPROTO;
        goto remove_active;
    }
    if ((rc = ecl_byte_buffer_copy(recv_buf, resp, resp_len)) < 0) {
        ecl_set_err(err, errlen, "etcd %s %s: could not read the answer", ep, method);
        *fail = FAIL_ETCD;
    }
remove_active:
    if (active_remove(c, &act) && rc < 0) {
        /* cancelled by etcd_client_close: no other member is tried */
        ecl_set_err(err, errlen, "etcd %s %s: the client was closed", ep, method);
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

/* One request and its one answer on member ep (channel ch): a unary call,
 * or a bidirectional stream that sends one message, half-closes and reads
 * one message (LeaseKeepAlive). With password auth the call carries the
 * client's token (authenticating first when there is none), and once more
 * with a new one when etcd refused the token. Returns 0 with *resp
 * (malloc'd) and *resp_len, or an SMP_E* code with err set and *fail
 * saying whether another member may be tried. Never waits past the
 * client's deadline (twice, with a new token). */
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
                    size_t errlen)
{
    char token[ETCD_TOKEN_MAX] = "";
    int rc = SMP_EIO;
    for (int attempt = 0; attempt < 2; attempt++) {
        int refused = 0;
        if (strcmp(method, M_AUTHENTICATE) != 0 &&
            (rc = ecl_auth_token(c, ch, ep, token, sizeof(token), fail, err, errlen)) < 0)
            break;
        rc = exchange_once(c, ch, ep, method, req, req_len, token, &refused, resp, resp_len, fail,
                           err, errlen);
        if (rc == 0 || !refused) break;
    }
    explicit_bzero(token, sizeof(token));
    return rc;
}

/* The member calls start on: the one that answered last; after a transport
 * failure on it, the next one (so a dead member costs one attempt, and the
 * calls that follow start elsewhere). */
size_t ecl_member_first(etcd_client *c)
{
    pthread_mutex_lock(&c->mu);
    size_t ep = c->current;
    pthread_mutex_unlock(&c->mu);
    return ep;
}

void ecl_member_answered(etcd_client *c, size_t ep)
{
    pthread_mutex_lock(&c->mu);
    c->current = ep;
    pthread_mutex_unlock(&c->mu);
}

void ecl_member_failed(etcd_client *c, size_t ep)
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
int ecl_call_unary(etcd_client *c,
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
        ecl_set_err(err, errlen, "etcd %s: out of memory", method);
        return SMP_ENOMEM;
    }
    protobuf_c_message_pack(req, body);
    size_t first = ecl_member_first(c);
    size_t attempts = c->n_ep > 1 ? 2 : 1;
    size_t ep = first;
    char first_err[256] = "";
    ecl_channels *chans = ecl_channels_hold(c);
    for (size_t i = 0; i < attempts; i++) {
        ep = (first + i) % c->n_ep;
        rc = ecl_exchange(c, chans->ch[ep], c->ep[ep], method, body, len, &answer, &answer_len,
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
        ecl_member_failed(c, ep);
        if (fail == FAIL_TRANSPORT && changes_store) {
            size_t n = err ? strlen(err) : 0;
            if (err && n + 1 < errlen)
                snprintf(err + n, errlen - n, " (it may have been applied)");
            goto free_body;
        }
    }
    if (rc < 0) goto free_body;
    ecl_member_answered(c, ep);
    *out = protobuf_c_message_unpack(resp_desc, NULL, answer_len, answer);
    if (*out == NULL) {
        ecl_set_err(err, errlen, "etcd %s %s: the answer (%zu bytes) does not decode as %s",
                c->ep[ep], method, answer_len, resp_desc->name);
        rc = SMP_EPROTO;
    }
free_body:
    ecl_channels_release(c, chans);
    free(answer);
    free(body);
    return rc;
}

/* -- open / close ------------------------------------------------------------ */

/* Split "h1:p1,h2:p2" into c->ep. Returns 0 or SMP_EINVAL with err set. */
int ecl_parse_endpoints(etcd_client *c, const char *list, char *err, size_t errlen)
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
            ecl_set_err(err, errlen, "etcd endpoints \"%s\": an empty or overlong entry", list);
            return SMP_EINVAL;
        }
        if (c->n_ep == ETCD_MAX_ENDPOINTS) {
            ecl_set_err(err, errlen, "etcd endpoints \"%s\": more than %d members", list,
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
            ecl_set_err(err, errlen, "etcd endpoint \"%s\" is not host:port", ep);
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
        ecl_set_err(err, errlen, "etcd_client_open: missing options, endpoints or out");
        return SMP_EINVAL;
    }
    etcd_client *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        ecl_set_err(err, errlen, "etcd_client_open: out of memory");
        return SMP_ENOMEM;
    }
    if ((o->tls_cert_pem == NULL) != (o->tls_key_pem == NULL) ||
        (o->tls_cert_pem != NULL && o->tls_ca_pem == NULL)) {
        ecl_set_err(err, errlen, "etcd_client_open: a client certificate needs its key and a CA");
        rc = SMP_EINVAL;
        goto free_client;
    }
    if ((o->user == NULL) != (o->password == NULL) || (o->user != NULL && o->tls_ca_pem == NULL)) {
        ecl_set_err(err, errlen, "etcd_client_open: a user needs its password and a CA (the "
                                 "password is sent over TLS only)");
        rc = SMP_EINVAL;
        goto free_client;
    }
    if ((rc = ecl_parse_endpoints(c, o->endpoints, err, errlen)) < 0) goto free_client;
    c->timeout_ms = o->timeout_ms ? o->timeout_ms : ETCD_DEFAULT_TIMEOUT_MS;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->idle, NULL);
    library_ref();
    c->chans = channels_new(c, credentials_of(o));
    c->tls = o->tls_ca_pem != NULL;
    if (ecl_auth_init(c, o) < 0) {
        ecl_set_err(err, errlen, "etcd_client_open: out of memory");
        rc = SMP_ENOMEM;
        goto close_channels;
    }
    if (c->chans == NULL || c->chans->n < c->n_ep) {
        ecl_set_err(err, errlen, "etcd %s: could not create a gRPC channel",
                    c->ep[c->chans != NULL ? c->chans->n : 0]);
        rc = SMP_ENOMEM;
        goto close_channels;
    }
    *out = c;
    return 0;
close_channels:
    channels_free(c->chans);
    ecl_auth_free(c);
    library_unref();
    pthread_cond_destroy(&c->idle);
    pthread_mutex_destroy(&c->mu);
free_client:
    free(c);
    return rc;
}

int etcd_client_reload_tls(etcd_client *c, const char *ca_pem, const char *cert_pem,
                           const char *key_pem, char *err, size_t errlen)
{
    if (!c->tls || ca_pem == NULL || (cert_pem == NULL) != (key_pem == NULL)) {
        ecl_set_err(err, errlen, "etcd_client_reload_tls: %s",
                    !c->tls ? "the client speaks plaintext" : "a CA, and a certificate with its key");
        return SMP_EINVAL;
    }
    etcd_client_options o = {.tls_ca_pem = ca_pem, .tls_cert_pem = cert_pem, .tls_key_pem = key_pem};
    ecl_channels *s = channels_new(c, credentials_of(&o));
    if (s == NULL || s->n < c->n_ep) {
        channels_free(s);
        ecl_set_err(err, errlen, "etcd_client_reload_tls: could not create the gRPC channels");
        return SMP_ENOMEM;
    }
    pthread_mutex_lock(&c->mu);
    ecl_channels *old = c->chans;
    c->chans = s;
    pthread_mutex_unlock(&c->mu);
    ecl_channels_release(c, old); /* freed by its last call or watch */
    return SMP_OK;
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
    ecl_channels_release(c, c->chans); /* the last holder: watches are closed first */
    ecl_auth_free(c);
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
int ecl_kv_copy(const Mvccpb__KeyValue *in, int with_value, etcd_kv *out)
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

int ecl_range_copy(const Etcdserverpb__RangeResponse *in, int keys_only, etcd_range_result *out)
{
    memset(out, 0, sizeof(*out));
    if (in->n_kvs > 0) {
        out->kvs = calloc(in->n_kvs, sizeof(*out->kvs));
        if (out->kvs == NULL) return SMP_ENOMEM;
    }
    for (size_t i = 0; i < in->n_kvs; i++) {
        if (ecl_kv_copy(in->kvs[i], !keys_only, &out->kvs[i]) < 0) {
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


/* -- arguments ------------------------------------------------------------- */

/* A key is required; a range end is NULL (the one key) or non-empty. */
int ecl_key_ok(const void *key, size_t key_len, const void *range_end, size_t range_end_len)
{
    if (key == NULL || key_len == 0) return 0;
    if (range_end != NULL && range_end_len == 0) return 0;
    return 1;
}

ProtobufCBinaryData ecl_bin(const void *p, size_t len)
{
    ProtobufCBinaryData b;
    b.len = p ? len : 0;
    b.data = (uint8_t *)p;
    return b;
}
