/* etcd_client_watch.c -- etcd watches: a Watch stream kept open per
 * etcd_watch, created on the member that answers (with the same failover as
 * the unary calls), read one WatchResponse per etcd_watch_next, and closed
 * by cancelling the call. A compacted start revision or a cancelled watch
 * is SMP_ERANGE; a broken stream is SMP_EIO and only etcd_watch_close works
 * after it. */
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

#include "etcd_client_internal.h"
#include "store_plugin.h"

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
        ecl_set_err(err, errlen, "etcd %s watch: the stream broke", w->ep);
        goto destroy;
    }
    grpc_event ev = grpc_completion_queue_pluck(w->cq, TAG_STATUS,
                                                ecl_deadline_in(w->c->timeout_ms), NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
        grpc_call_cancel(w->call, NULL);
        ev = grpc_completion_queue_pluck(w->cq, TAG_STATUS, gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                         NULL);
    }
    size_t dlen = GRPC_SLICE_LENGTH(details);
    if (dlen >= sizeof(text)) dlen = sizeof(text) - 1;
    memcpy(text, GRPC_SLICE_START_PTR(details), dlen);
    text[dlen] = '\0';
    int mapped = ecl_status_to_rc(status, text, &fail);
    if (mapped < 0) rc = mapped;
    ecl_set_err(err, errlen, "etcd %s watch: the stream ended with gRPC status %d (%s): %s", w->ep,
            (int)status, ecl_status_name(status), text);
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
        ecl_set_err(err, errlen, "etcd %s watch: could not start a read", w->ep);
        return rc;
    }
    grpc_event ev = grpc_completion_queue_pluck(w->cq, TAG_RECV, deadline, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) return 0;
    w->recv_pending = 0;
    if (!ev.success || w->recv_buf == NULL) return watch_end(w, err, errlen);
    rc = ecl_byte_buffer_copy(w->recv_buf, &body, &len);
    grpc_byte_buffer_destroy(w->recv_buf);
    w->recv_buf = NULL;
    if (rc < 0) {
        w->broken = 1;
        ecl_set_err(err, errlen, "etcd %s watch: could not read an answer", w->ep);
        return rc;
    }
    *resp = etcdserverpb__watch_response__unpack(NULL, len, body);
    free(body);
    if (*resp == NULL) {
        w->broken = 1;
        ecl_set_err(err, errlen, "etcd %s watch: an answer (%zu bytes) does not decode", w->ep, len);
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
        ecl_set_err(err, errlen, "etcd %s watch: revisions up to %lld are compacted", w->ep,
                (long long)r->compact_revision);
        return SMP_ERANGE;
    }
    ecl_set_err(err, errlen, "etcd %s watch: canceled by etcd: %s", w->ep,
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
    if (w->chans != NULL) ecl_channels_release(w->c, w->chans);
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
    grpc_metadata md;
    grpc_byte_buffer *send_buf = NULL;
    Etcdserverpb__WatchResponse *resp = NULL;
    char token[ETCD_TOKEN_MAX];

    *out = NULL;
    *fail = FAIL_ETCD;
    etcd_watch *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        ecl_set_err(err, errlen, "etcd_watch_open: out of memory");
        return SMP_ENOMEM;
    }
    w->c = c;
    w->chans = ecl_channels_hold(c);
    grpc_channel *ch = w->chans->ch[ep];
    if ((rc = ecl_auth_token(c, ch, c->ep[ep], token, sizeof(token), fail, err, errlen)) < 0)
        goto free_watch; /* watch_free takes the zeroed rest as it is */
    snprintf(w->ep, sizeof(w->ep), "%s", c->ep[ep]);
    grpc_metadata_array_init(&w->initial_md);
    if ((w->cq = grpc_completion_queue_create_for_pluck(NULL)) == NULL) {
        ecl_set_err(err, errlen, "etcd_watch_open: no completion queue");
        rc = SMP_ENOMEM;
        goto free_watch;
    }
    gpr_timespec deadline = ecl_deadline_in(c->timeout_ms);
    grpc_connectivity_state state;
    if (ecl_channel_wait_ready(ch, w->cq, deadline, c->n_ep == 1, &state) < 0) {
        ecl_set_err(err, errlen, "etcd %s watch: no connection to the member%s (channel %s)",
                    w->ep, ecl_transport_said(c), ecl_state_name(state));
        *fail = FAIL_UNSENT;
        rc = SMP_EIO;
        goto free_watch;
    }
    w->call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, w->cq,
                                       grpc_slice_from_static_string(M_WATCH), NULL,
                                       gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    if (w->call == NULL) {
        ecl_set_err(err, errlen, "etcd %s watch: could not create the call", w->ep);
        rc = SMP_ENOMEM;
        goto free_watch;
    }
    send_buf = ecl_byte_buffer_of(req, req_len);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ecl_auth_metadata(&ops[0], &md, token); /* sent by the batch waited for below */
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send_buf;
    if (grpc_call_start_batch(w->call, ops, 2, TAG_SEND, NULL) != GRPC_CALL_OK) {
        ecl_set_err(err, errlen, "etcd %s watch: could not start the stream", w->ep);
        rc = SMP_EIO;
        goto free_watch;
    }
    grpc_event ev = grpc_completion_queue_pluck(w->cq, TAG_SEND, deadline, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
        grpc_call_cancel(w->call, NULL);
        grpc_completion_queue_pluck(w->cq, TAG_SEND, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        ecl_set_err(err, errlen, "etcd %s watch: no answer in %u ms", w->ep, c->timeout_ms);
        *fail = FAIL_TRANSPORT;
        rc = SMP_EIO;
        goto free_watch;
    }
    if ((rc = watch_start_recv(w, 1)) < 0) {
        ecl_set_err(err, errlen, "etcd %s watch: could not start a read", w->ep);
        goto free_watch;
    }
    /* Wait for "created"; an answer without it (none is expected) is skipped. */
    for (;;) {
        rc = watch_read(w, deadline, &resp, err, errlen);
        if (rc == 0) {
            ecl_set_err(err, errlen, "etcd %s watch: no answer in %u ms", w->ep, c->timeout_ms);
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
            /* etcd cancels a watch whose token it no longer takes as
             * "permission denied": the next open authenticates again */
            if (resp->cancel_reason != NULL && strstr(resp->cancel_reason, "permission denied"))
                ecl_auth_token_refused(c, token, GRPC_STATUS_UNAUTHENTICATED, "");
            goto free_resp;
        }
        if (resp->created) break;
        etcdserverpb__watch_response__free_unpacked(resp, NULL);
        resp = NULL;
    }
    etcdserverpb__watch_response__free_unpacked(resp, NULL);
    grpc_byte_buffer_destroy(send_buf);
    explicit_bzero(token, sizeof(token));
    *fail = FAIL_NONE;
    *out = w;
    return 0;
free_resp:
    etcdserverpb__watch_response__free_unpacked(resp, NULL);
free_watch:
    if (send_buf) grpc_byte_buffer_destroy(send_buf);
    watch_free(w);
    explicit_bzero(token, sizeof(token));
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
    if (c == NULL || out == NULL || !ecl_key_ok(key, key_len, range_end, range_end_len) ||
        start_revision < 0) {
        ecl_set_err(err, errlen, "etcd_watch_open: bad arguments");
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
            ecl_set_err(err, errlen, "%s", probe_err);
            return rc;
        }
    }
    create.key = ecl_bin(key, key_len);
    create.range_end = ecl_bin(range_end, range_end_len);
    create.start_revision = start_revision;
    req.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    req.create_request = &create;
    size_t len = etcdserverpb__watch_request__get_packed_size(&req);
    uint8_t *body = malloc(len ? len : 1);
    if (body == NULL) {
        ecl_set_err(err, errlen, "etcd_watch_open: out of memory");
        return SMP_ENOMEM;
    }
    etcdserverpb__watch_request__pack(&req, body);
    size_t first = ecl_member_first(c);
    size_t attempts = c->n_ep > 1 ? 2 : 1;
    rc = SMP_EIO;
    for (size_t i = 0; i < attempts; i++) {
        size_t ep = (first + i) % c->n_ep;
        rc = watch_open_on(c, ep, body, len, out, &fail, err, errlen);
        if (rc == 0) {
            ecl_member_answered(c, ep);
            break;
        }
        if (fail == FAIL_ETCD) break;
        ecl_member_failed(c, ep);
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
        ecl_set_err(err, errlen, "etcd_watch_next: bad arguments");
        return SMP_EINVAL;
    }
    if (w->broken) {
        ecl_set_err(err, errlen, "etcd %s watch: the stream is broken; open a new watch", w->ep);
        return SMP_EIO;
    }
    gpr_timespec deadline = ecl_deadline_in(timeout_ms);
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
        ecl_set_err(err, errlen, "etcd_watch_next: out of memory");
        rc = SMP_ENOMEM;
        goto free_resp;
    }
    for (size_t i = 0; i < resp->n_events; i++) {
        const Mvccpb__Event *e = resp->events[i];
        etcd_event *o = &out->events[i];
        if (e == NULL || (e->type != MVCCPB__EVENT__EVENT_TYPE__PUT &&
                          e->type != MVCCPB__EVENT__EVENT_TYPE__DELETE)) {
            ecl_set_err(err, errlen, "etcd %s watch: an event of unknown type", w->ep);
            etcd_watch_batch_free(out);
            w->broken = 1;
            rc = SMP_EPROTO;
            goto free_resp;
        }
        o->type = e->type == MVCCPB__EVENT__EVENT_TYPE__PUT ? ETCD_EVENT_PUT : ETCD_EVENT_DELETE;
        if (ecl_kv_copy(e->kv, o->type == ETCD_EVENT_PUT, &o->kv) < 0) {
            ecl_set_err(err, errlen, "etcd_watch_next: out of memory");
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

