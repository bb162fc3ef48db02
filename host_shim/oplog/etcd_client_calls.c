/* etcd_client_calls.c -- the unary calls of the etcd client: KV (Range,
 * Put, DeleteRange, Compact), Txn, Lease (Grant, KeepAlive, Revoke) and the
 * Maintenance Status of one member. Each packs its request with protobuf-c,
 * runs it through ecl_call_unary (etcd_client.c: member failover and the
 * rules for what may be retried) and copies the answer into the plain C
 * results of etcd_client.h. */
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

/* -- KV -------------------------------------------------------------------- */


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
    if (c == NULL || out == NULL || !ecl_key_ok(key, key_len, range_end, range_end_len) ||
        limit < 0 || revision < 0) {
        ecl_set_err(err, errlen, "etcd_range: bad arguments");
        return SMP_EINVAL;
    }
    req.key = ecl_bin(key, key_len);
    req.range_end = ecl_bin(range_end, range_end_len);
    req.limit = limit;
    req.revision = revision;
    req.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
    req.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__KEY;
    req.keys_only = keys_only ? 1 : 0;
    if ((rc = ecl_call_unary(c, M_RANGE, 0, &req.base, &etcdserverpb__range_response__descriptor,
                         &resp, err, errlen)) < 0)
        return rc;
    if ((rc = ecl_range_copy((Etcdserverpb__RangeResponse *)resp, keys_only, out)) < 0)
        ecl_set_err(err, errlen, "etcd_range: out of memory");
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

    if (c == NULL || !ecl_key_ok(key, key_len, NULL, 0) || (value == NULL && value_len > 0) ||
        lease < 0) {
        ecl_set_err(err, errlen, "etcd_put: bad arguments");
        return SMP_EINVAL;
    }
    req.key = ecl_bin(key, key_len);
    req.value = ecl_bin(value, value_len);
    req.lease = lease;
    if ((rc = ecl_call_unary(c, M_PUT, 1, &req.base, &etcdserverpb__put_response__descriptor, &resp,
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

    if (c == NULL || !ecl_key_ok(key, key_len, range_end, range_end_len)) {
        ecl_set_err(err, errlen, "etcd_delete_range: bad arguments");
        return SMP_EINVAL;
    }
    req.key = ecl_bin(key, key_len);
    req.range_end = ecl_bin(range_end, range_end_len);
    if ((rc = ecl_call_unary(c, M_DELETE, 1, &req.base,
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
        ecl_set_err(err, errlen, "etcd_compact: bad arguments");
        return SMP_EINVAL;
    }
    req.revision = revision;
    req.physical = 1;
    if ((rc = ecl_call_unary(c, M_COMPACT, 1, &req.base,
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
    if (!ecl_key_ok(k->key, k->key_len, NULL, 0)) return 0;
    if (k->target == ETCD_CMP_VALUE && k->value == NULL && k->value_len > 0) return 0;
    return 1;
}

static int op_ok(const etcd_op *op)
{
    if ((unsigned)op->type > ETCD_OP_RANGE) return 0;
    if (!ecl_key_ok(op->key, op->key_len, op->range_end, op->range_end_len)) return 0;
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
        b->puts[i].key = ecl_bin(op->key, op->key_len);
        b->puts[i].value = ecl_bin(op->value, op->value_len);
        b->puts[i].lease = op->lease;
        r->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
        r->request_put = &b->puts[i];
        break;
    case ETCD_OP_DELETE:
        etcdserverpb__delete_range_request__init(&b->dels[i]);
        b->dels[i].key = ecl_bin(op->key, op->key_len);
        b->dels[i].range_end = ecl_bin(op->range_end, op->range_end_len);
        r->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
        r->request_delete_range = &b->dels[i];
        break;
    case ETCD_OP_RANGE:
        etcdserverpb__range_request__init(&b->ranges[i]);
        b->ranges[i].key = ecl_bin(op->key, op->key_len);
        b->ranges[i].range_end = ecl_bin(op->range_end, op->range_end_len);
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
        ecl_set_err(err, errlen, "etcd_txn: bad arguments");
        return SMP_EINVAL;
    }
    for (size_t i = 0; i < n_cmp; i++) {
        if (!compare_ok(&cmp[i])) {
            ecl_set_err(err, errlen, "etcd_txn: compare %zu is malformed", i);
            return SMP_EINVAL;
        }
    }
    for (size_t i = 0; i < n_ops; i++) {
        const etcd_op *op = i < n_success ? &success[i] : &failure[i - n_success];
        if (!op_ok(op)) {
            ecl_set_err(err, errlen, "etcd_txn: %s op %zu is malformed",
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
        ecl_set_err(err, errlen, "etcd_txn: out of memory");
        rc = SMP_ENOMEM;
        goto free_build;
    }
    for (size_t i = 0; i < n_cmp; i++) {
        Etcdserverpb__Compare *k = &b.cmp[i];
        etcdserverpb__compare__init(k);
        b.cmp_p[i] = k;
        k->key = ecl_bin(cmp[i].key, cmp[i].key_len);
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
            k->value = ecl_bin(cmp[i].value, cmp[i].value_len);
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
    if ((rc = ecl_call_unary(c, M_TXN, 1, &req.base, &etcdserverpb__txn_response__descriptor, &resp,
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
        ecl_set_err(err, errlen, "etcd_txn: out of memory");
        rc = SMP_ENOMEM;
        goto free_resp;
    }
    for (size_t i = 0; i < r->n_responses; i++) {
        const Etcdserverpb__ResponseOp *ro = r->responses[i];
        if (ro == NULL || ro->response_case != ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE ||
            ro->response_range == NULL)
            continue;
        if ((rc = ecl_range_copy(ro->response_range, 0, &out->ranges[out->n_ranges])) < 0) {
            ecl_set_err(err, errlen, "etcd_txn: out of memory");
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
        ecl_set_err(err, errlen, "etcd_lease_grant: bad arguments");
        return SMP_EINVAL;
    }
    req.ttl = ttl_s;
    /* A grant that may have reached etcd is not repeated: a second lease
     * would be granted and never revoked. */
    if ((rc = ecl_call_unary(c, M_GRANT, 1, &req.base, &etcdserverpb__lease_grant_response__descriptor,
                         &resp, err, errlen)) < 0)
        return rc;
    Etcdserverpb__LeaseGrantResponse *r = (Etcdserverpb__LeaseGrantResponse *)resp;
    if (r->error != NULL && r->error[0] != '\0') {
        ecl_set_err(err, errlen, "etcd lease grant: %s", r->error);
        rc = SMP_EPROTO;
    } else if (r->id <= 0) {
        ecl_set_err(err, errlen, "etcd lease grant: answer without a lease id");
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
        ecl_set_err(err, errlen, "etcd_lease_keepalive: bad arguments");
        return SMP_EINVAL;
    }
    req.id = id;
    /* A renewal is idempotent: it may be retried on another member. */
    if ((rc = ecl_call_unary(c, M_KEEPALIVE, 0, &req.base,
                         &etcdserverpb__lease_keep_alive_response__descriptor, &resp, err,
                         errlen)) < 0)
        return rc;
    Etcdserverpb__LeaseKeepAliveResponse *r = (Etcdserverpb__LeaseKeepAliveResponse *)resp;
    if (r->ttl <= 0) {
        /* etcd answers a renewal of an unknown lease with TTL 0. */
        ecl_set_err(err, errlen, "etcd lease keepalive: lease %lld not found", (long long)id);
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
        ecl_set_err(err, errlen, "etcd_lease_revoke: bad arguments");
        return SMP_EINVAL;
    }
    req.id = id;
    /* Repeating a revoke that did apply answers NOT_FOUND, which is what
     * the caller wanted; so it may be retried on another member. */
    if ((rc = ecl_call_unary(c, M_REVOKE, 0, &req.base,
                         &etcdserverpb__lease_revoke_response__descriptor, &resp, err,
                         errlen)) < 0)
        return rc;
    protobuf_c_message_free_unpacked(resp, NULL);
    return 0;
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
        ecl_set_err(err, errlen, "etcd_member_status_get: bad arguments");
        return SMP_EINVAL;
    }
    ecl_channels *chans = ecl_channels_hold(c);
    for (size_t i = 0; i < c->n_ep; i++)
        if (strcmp(c->ep[i], endpoint) == 0) ch = chans->ch[i];
    if (ch == NULL) {
        etcd_client probe;
        if (ecl_parse_endpoints(&probe, endpoint, err, errlen) < 0 || probe.n_ep != 1) {
            ecl_set_err(err, errlen, "etcd_member_status_get: \"%s\" is not one host:port", endpoint);
            rc = SMP_EINVAL;
            goto release;
        }
        if ((ch = own = ecl_channel_open(endpoint, chans->creds)) == NULL) {
            ecl_set_err(err, errlen, "etcd %s: could not create a gRPC channel", endpoint);
            rc = SMP_ENOMEM;
            goto release;
        }
    }
    size_t len = etcdserverpb__status_request__pack(&req, body);
    if ((rc = ecl_exchange(c, ch, endpoint, M_STATUS, body, len, &answer, &answer_len, &fail, err,
                       errlen)) < 0)
        goto destroy_channel;
    if ((r = etcdserverpb__status_response__unpack(NULL, answer_len, answer)) == NULL) {
        ecl_set_err(err, errlen, "etcd %s status: the answer (%zu bytes) does not decode", endpoint,
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
release:
    ecl_channels_release(c, chans);
    return rc;
}

