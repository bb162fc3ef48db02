/* oplog_etcd_write.c -- the etcd OpLog's writing, on the backend's thread:
 * a batch is one transaction under the election's fence (see oplog_etcd.c),
 * an outcome left unknown by a transport error is read back before anything
 * is retried, a failed fence turns the log read-only, and truncation deletes
 * the records below a snapshot in one fenced DeleteRange. */
#include "oplog_etcd_internal.h"

/* -- the thread: writing ------------------------------------------------------ */

/* Post a fencing to the loop and make the log read-only (mu not held). */
static void post_fenced(etcd_log *el, const char *why)
{
    oel_log_line(el, "%s: the log is read-only now", why);
    pthread_mutex_lock(&el->pipe.mu);
    el->pipe.failed = 1;
    if (el->pipe.failed_why[0] == '\0')
        snprintf(el->pipe.failed_why, sizeof(el->pipe.failed_why), "%.300s", why);
    if (!el->fenced_evt) {
        el->fenced_evt = 1;
        snprintf(el->fenced_why, sizeof(el->fenced_why), "%s", why);
    }
    pthread_mutex_unlock(&el->pipe.mu);
    uv_async_send(&el->pipe.async);
}

/* Name why the fence compare failed, from the failure branch's range of the
 * leader key. */
void oel_fenced_reason(etcd_log *el, const etcd_txn_result *res, char *why, size_t len)
{
    char key[128];
    const oplog_etcd_fence *f = &el->fence;
    oel_printable(key, sizeof(key), f->leader_key, f->leader_key_len);
    if (res->n_ranges == 0 || res->ranges[0].n == 0) {
        snprintf(why, len, "oplog: fenced: the leader key %s is gone (our lease %" PRId64
                 " expired or was revoked)", key, f->lease_id);
    } else {
        const etcd_kv *kv = &res->ranges[0].kvs[0];
        if (kv->lease != f->lease_id || kv->create_revision != f->create_revision) {
            char holder[128];
            oel_printable(holder, sizeof(holder), kv->value, kv->value_len);
            snprintf(why, len, "oplog: fenced: the leader key %s is held by \"%s\" (lease %"
                     PRId64 ", created at revision %" PRId64 "), not by our lease %" PRId64
                     " of revision %" PRId64, key, holder, kv->lease, kv->create_revision,
                     f->lease_id, f->create_revision);
        } else {
            snprintf(why, len, "oplog: fenced: %s was changed by another writer (expected "
                     "mod revision %" PRId64 ", head %" PRIu64 ")", el->head_key,
                     el->head_mod, el->written);
        }
    }
}

/* 1 when the failure branch's range shows the leader key still attached
 * to our lease in our term (so only log_head's compare failed). */
static int still_ours(const etcd_log *el, const etcd_txn_result *res)
{
    const etcd_kv *kv;
    if (res->n_ranges == 0 || res->ranges[0].n == 0)
        return 0;
    kv = &res->ranges[0].kvs[0];
    return kv->lease == el->fence.lease_id && kv->create_revision == el->fence.create_revision;
}

/* After a transport error: did the batch first..last apply? Reads the head
 * and the first record's key in one txn without compares. Returns 1 applied
 * (head_mod updated), 0 not applied (the head is still ours), SMP_EIO
 * unknown still, or SMP_EDURABILITY (someone else moved the head; why set). */
static int check_outcome(etcd_log *el,
                         const oplog_entry *first,
                         uint64_t last,
                         char *why,
                         size_t whylen)
{
    etcd_op ops[2];
    etcd_txn_result res;
    char key[256 + SEQ_DIGITS + 8];
    char err[256];
    uint64_t head = 0;
    int64_t mod = 0;
    int rc;

    oel_make_key(el, first->seq, key);
    memset(ops, 0, sizeof(ops));
    ops[0].type = ETCD_OP_RANGE;
    ops[0].key = el->head_key;
    ops[0].key_len = el->head_key_len;
    ops[1].type = ETCD_OP_RANGE;
    ops[1].key = key;
    ops[1].key_len = el->key_len;
    rc = etcd_txn(el->client, NULL, 0, ops, 2, NULL, 0, &res, err, sizeof(err));
    if (rc < 0) {
        oel_log_line(el, "oplog: cannot read back the head after a failed write: %s", err);
        return SMP_EIO;
    }
    rc = SMP_EDURABILITY;
    if (res.n_ranges != 2) {
        snprintf(why, whylen, "oplog: the read-back of the head answered %zu ranges",
                 res.n_ranges);
        goto free_res;
    }
    if (res.ranges[0].n > 0) {
        if (oel_parse_head(res.ranges[0].kvs[0].value, res.ranges[0].kvs[0].value_len,
                       &head) < 0) {
            snprintf(why, whylen, "oplog: %s does not hold a sequence", el->head_key);
            goto free_res;
        }
        mod = res.ranges[0].kvs[0].mod_revision;
    }
    if (head == last && res.ranges[1].n > 0 &&
        res.ranges[1].kvs[0].value_len == first->rec_len &&
        memcmp(res.ranges[1].kvs[0].value, first->rec, first->rec_len) == 0) {
        el->head_mod = mod;
        rc = 1;
    } else if (head == el->written && mod == el->head_mod) {
        rc = 0;
    } else {
        snprintf(why, whylen, "oplog: fenced: %s moved to %" PRIu64 " (mod revision %"
                 PRId64 ") while our batch %" PRIu64 "..%" PRIu64 " was in doubt",
                 el->head_key, head, mod, first->seq, last);
    }
free_res:
    etcd_txn_result_free(&res);
    return rc;
}

/* Write one batch as one txn (see the top of oplog_etcd.c); the pipe's
 * write function, on the thread. Returns 0 when it is durable,
 * SMP_EDURABILITY when fenced (posted) or on a fatal error. */
int oel_write_batch(void *be, oplog_entry_list *batch, size_t n, uint64_t *bytes)
{
    etcd_log *el = be;
    etcd_compare cmp[3];
    etcd_op fail_op;
    char head_val[SEQ_DIGITS + 1];
    char why[512];
    char err[256];
    uint64_t last = batch->tail->seq;
    uint64_t deadline = 0;
    uint32_t backoff = BACKOFF_MIN_MS;
    uint32_t ttl_ms = el->fence.lease_ttl_ms ? el->fence.lease_ttl_ms : DEFAULT_TTL_MS;
    size_t i = 0;
    int rc;

    *bytes = 0;
    for (oplog_entry *e = batch->head; e != NULL; e = e->next, i++) {
        char *key = el->keys + i * (el->key_len + 1);
        oel_make_key(el, e->seq, key);
        el->ops[i] = (etcd_op){.type = ETCD_OP_PUT, .key = key, .key_len = el->key_len,
                               .value = e->rec, .value_len = e->rec_len};
        *bytes += e->rec_len;
    }
    snprintf(head_val, sizeof(head_val), "%" PRIu64, last);
    el->ops[n] = (etcd_op){.type = ETCD_OP_PUT, .key = el->head_key,
                           .key_len = el->head_key_len, .value = head_val,
                           .value_len = strlen(head_val)};
    cmp[0] = (etcd_compare){.target = ETCD_CMP_LEASE, .result = ETCD_CMP_EQUAL,
                            .key = el->fence.leader_key, .key_len = el->fence.leader_key_len,
                            .number = el->fence.lease_id};
    cmp[1] = (etcd_compare){.target = ETCD_CMP_CREATE, .result = ETCD_CMP_EQUAL,
                            .key = el->fence.leader_key, .key_len = el->fence.leader_key_len,
                            .number = el->fence.create_revision};
    cmp[2] = (etcd_compare){.target = ETCD_CMP_MOD, .result = ETCD_CMP_EQUAL,
                            .key = el->head_key, .key_len = el->head_key_len,
                            .number = el->head_mod};
    fail_op = (etcd_op){.type = ETCD_OP_RANGE, .key = el->fence.leader_key,
                        .key_len = el->fence.leader_key_len};

    for (;;) {
        etcd_txn_result res;
        rc = etcd_txn(el->client, cmp, 3, el->ops, n + 1, &fail_op, 1, &res, err,
                      sizeof(err));
        if (rc == 0) {
            if (res.succeeded) {
                el->head_mod = res.revision;
                el->written = last;
                etcd_txn_result_free(&res);
                return 0;
            }
            oel_fenced_reason(el, &res, why, sizeof(why));
            if (deadline != 0 && still_ours(el, &res) &&
                check_outcome(el, batch->head, last, why, sizeof(why)) == 1) {
                /* Our first attempt applied late, after a read-back that
                 * did not see it yet: the head moved by our own hand. */
                etcd_txn_result_free(&res);
                el->written = last;
                return 0;
            }
            etcd_txn_result_free(&res);
            post_fenced(el, why);
            return SMP_EDURABILITY;
        }
        if (rc != SMP_EIO) {
            snprintf(why, sizeof(why), "oplog: the write of records %" PRIu64 "..%" PRIu64
                     " failed: %s", batch->head->seq, last, err);
            oel_log_line(el, "%s: the log is read-only now", why);
            pthread_mutex_lock(&el->pipe.mu);
            el->pipe.failed = 1;
            if (el->pipe.failed_why[0] == '\0')
                snprintf(el->pipe.failed_why, sizeof(el->pipe.failed_why), "%.300s", why);
            pthread_mutex_unlock(&el->pipe.mu);
            return SMP_EDURABILITY;
        }
        if (deadline == 0) {
            deadline = oel_now_ns() + (uint64_t)ttl_ms * 1000000u;
            oel_log_line(el, "oplog: the outcome of records %" PRIu64 "..%" PRIu64 " is unknown "
                         "(%s): reading it back", batch->head->seq, last, err);
                         }
                         /* Unknown outcome: find out, retrying the read-back, then the batch. */
                         for (;;) {
            oel_nap(el, backoff, 0);
            backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
            rc = check_outcome(el, batch->head, last, why, sizeof(why));
            if (rc == 1) {
                el->written = last;
                return 0;
            }
            if (rc == SMP_EDURABILITY) {
                post_fenced(el, why);
                return SMP_EDURABILITY;
            }
            if (oel_now_ns() >= deadline) {
                snprintf(why, sizeof(why), "oplog: fenced: the outcome of records %" PRIu64
                         "..%" PRIu64 " stayed unknown for the lease TTL (%" PRIu32 " ms)",
                         batch->head->seq, last, ttl_ms);
                post_fenced(el, why);
                return SMP_EDURABILITY;
            }
            if (rc == 0)
                break; /* not applied: write it again */
        }
    }
}

/* Delete the records below seq in one fenced DeleteRange, then compact
 * etcd's history up to the previous truncation's revision: deleted keys
 * keep their values in etcd's history until a compaction, so without one
 * the log would still grow without bound. Compacting one truncation behind
 * leaves a standby a whole snapshot interval to read what it still lacks
 * from the history; a standby further behind finds its watch compacted and
 * its records gone, and bootstraps from the snapshot (SMP_ERANGE to the
 * follower). etcd's compaction is cluster-wide: on an etcd shared with other
 * programs, it cuts their history at the same revision. A failure is
 * logged. Thread. */
void oel_truncate_records(etcd_log *el, uint64_t seq)
{
    char from[256 + SEQ_DIGITS + 8], to[256 + SEQ_DIGITS + 8];
    char err[256];
    etcd_compare cmp[2];
    etcd_op op;
    etcd_txn_result res;
    int rc;

    if (seq > el->written + 1)
        seq = el->written + 1;
    if (seq <= 1)
        return;
    oel_make_key(el, 0, from);
    oel_make_key(el, seq, to);
    cmp[0] = (etcd_compare){.target = ETCD_CMP_LEASE, .result = ETCD_CMP_EQUAL,
                            .key = el->fence.leader_key, .key_len = el->fence.leader_key_len,
                            .number = el->fence.lease_id};
    cmp[1] = (etcd_compare){.target = ETCD_CMP_CREATE, .result = ETCD_CMP_EQUAL,
                            .key = el->fence.leader_key, .key_len = el->fence.leader_key_len,
                            .number = el->fence.create_revision};
    op = (etcd_op){.type = ETCD_OP_DELETE, .key = from, .key_len = el->key_len,
                   .range_end = to, .range_end_len = el->key_len};
    rc = etcd_txn(el->client, cmp, 2, &op, 1, NULL, 0, &res, err, sizeof(err));
    if (rc < 0) {
        oel_log_line(el, "oplog: cannot delete the records below %" PRIu64 ": %s", seq, err);
        return;
    }
    int deleted = res.succeeded;
    int64_t revision = res.revision;
    etcd_txn_result_free(&res);
    if (!deleted) {
        oel_log_line(el, "oplog: the records below %" PRIu64 " were not deleted: the fence "
                     "no longer holds", seq);
        return;
    }
    if (el->gc_revision > 0) {
        rc = etcd_compact(el->client, el->gc_revision, err, sizeof(err));
        /* SMP_ERANGE: etcd's own auto-compaction is ahead of us, which is fine. */
        if (rc < 0 && rc != SMP_ERANGE)
            oel_log_line(el, "oplog: cannot compact etcd's history to revision %" PRId64 ": %s",
                         el->gc_revision, err);
    }
    el->gc_revision = revision;
}
