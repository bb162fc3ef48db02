/* oplog_etcd_follow.c -- the etcd OpLog's reading, on the backend's thread:
 * the head and paged, verified reads of the records pinned to one revision
 * (replay), following the log with a watch as another master writes it, and
 * promotion -- catching up under the election's fence before this log
 * becomes the writer (see oplog_etcd.c). */
#include "oplog_etcd_internal.h"

/* -- reading the log (any thread but the loop's once it runs) ---------------- */

/* Read log_head at revision rev (0: newest). *head is 0 and *mod 0 when the
 * key does not exist; *at_rev is the revision the answer reflects. */
int oel_read_head(etcd_log *el,
                  int64_t rev,
                  uint64_t *head,
                  int64_t *mod,
                  int64_t *at_rev,
                  char *err,
                  size_t errlen)
{
    etcd_range_result r;
    int rc = etcd_range(el->client, el->head_key, el->head_key_len, NULL, 0, 1, rev, 0,
                        &r, err, errlen);
    if (rc < 0)
        return rc;
    *head = 0;
    *mod = 0;
    *at_rev = r.revision;
    if (r.n > 0) {
        if ((rc = oel_parse_head(r.kvs[0].value, r.kvs[0].value_len, head)) < 0) {
            char shown[48];
            oel_printable(shown, sizeof(shown), r.kvs[0].value, r.kvs[0].value_len);
            wm_errbuf(err, errlen, "oplog: %s holds \"%s\", not a sequence",
                      el->head_key, shown);
        }
        *mod = r.kvs[0].mod_revision;
    }
    etcd_range_result_free(&r);
    return rc;
}

/* Read the records from..upto at revision rev, page by page, verify each and
 * require contiguous sequences starting at from, and hand them to fn in
 * order. Returns 0 when every one was delivered; *gone set (and
 * SMP_EPROTO) when the log no longer holds from (the first record found is
 * later: it was garbage-collected), with *first the first sequence found
 * (upto + 1 when none); SMP_EPROTO for a record that does not verify or a
 * gap; SMP_EIO and the like from etcd; or fn's code. err names the cause. */
int oel_scan(etcd_log *el,
             uint64_t from,
             uint64_t upto,
             int64_t rev,
             scan_fn fn,
             void *arg,
             int *gone,
             uint64_t *first,
             char *err,
             size_t errlen)
{
    char key[256 + SEQ_DIGITS + 8];
    uint64_t next = from;
    int rc = 0;

    *gone = 0;
    while (next <= upto) {
        etcd_range_result r;
        uint64_t want = upto - next + 1;
        int64_t limit = want < PAGE_RECORDS ? (int64_t)want : PAGE_RECORDS;
        oel_make_key(el, next, key);
        rc = etcd_range(el->client, key, el->key_len, el->log_end, el->log_end_len, limit,
                        rev, 0, &r, err, errlen);
        if (rc == SMP_ERANGE && rev != 0) {
            /* The pinned revision was compacted meanwhile. Records never
             * change once written, so the newest revision serves as well
             * (up to the same head); collected ones show as a gap. */
            rev = 0;
            continue;
        }
        if (rc < 0)
            return rc;
        for (size_t i = 0; i < r.n && next <= upto && rc == 0; i++) {
            oplog_record rec;
            uint64_t seq = oel_key_seq(el, r.kvs[i].key, r.kvs[i].key_len);
            if (seq != next) {
                if (next == from && seq > from) {
                    *gone = 1;
                    *first = seq;
                    wm_errbuf(err, errlen, "oplog: the records before %" PRIu64 " were "
                              "garbage-collected (the log starts at %" PRIu64 ", replay "
                              "needs %" PRIu64 "): re-bootstrap from a snapshot",
                              seq, seq, from);
                } else if (seq == 0) {
                    char shown[96];
                    oel_printable(shown, sizeof(shown), r.kvs[i].key, r.kvs[i].key_len);
                    wm_errbuf(err, errlen, "oplog: \"%s\" in the record range is not a "
                              "record key", shown);
                } else {
                    wm_errbuf(err, errlen, "oplog: sequence gap: record %" PRIu64
                              " follows %" PRIu64, seq, next - 1);
                }
                rc = SMP_EPROTO;
                break;
            }
            if ((rc = oel_verify_value(seq, r.kvs[i].value, r.kvs[i].value_len, &rec, err,
                                   errlen)) < 0)
                break;
            next++;
            if ((rc = fn(el, arg, &rec)) < 0) {
                wm_errbuf(err, errlen, "oplog: replay stopped at seq %" PRIu64 ": %s",
                          seq, smp_strerror(rc));
                break;
            }
        }
        if (rc == 0 && next <= upto && r.n == 0) {
            if (next == from) {
                *gone = 1;
                *first = upto + 1;
                wm_errbuf(err, errlen, "oplog: the records before %" PRIu64 " were "
                          "garbage-collected (the log holds none up to its head %" PRIu64
                          ", replay needs %" PRIu64 "): re-bootstrap from a snapshot",
                          upto + 1, upto, from);
            } else {
                wm_errbuf(err, errlen, "oplog: the records end at %" PRIu64 " but the "
                          "head says %" PRIu64, next - 1, upto);
            }
            rc = SMP_EPROTO;
        }
        etcd_range_result_free(&r);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* -- the thread: following and promoting -------------------------------------- */

/* A record's fingerprint: its sequence, type, version and payload. */
static uint64_t record_sum(const oplog_record *rec)
{
    uint64_t h = XXH64(rec->payload, rec->len, rec->seq);
    uint64_t meta[2] = {h, ((uint64_t)rec->type << 16) | rec->encver};
    h = XXH64(meta, sizeof(meta), 0);
    return h != 0 ? h : 1;
}

/* Copy one record for the loop, waiting while FOLLOW_QUEUE_MAX are queued.
 * Returns 0, SMP_ENOMEM, or SMP_ECANCELED (stopping, or the session was
 * cancelled). Thread. */
static int post_record(etcd_log *el, void *arg, const oplog_record *rec)
{
    frec *r;
    (void)arg;
    r = malloc(sizeof(*r) + rec->len);
    if (r == NULL)
        return SMP_ENOMEM;
    r->next = NULL;
    r->sess = el->f_sess;
    r->fn = el->f_fn;
    r->arg = el->f_arg;
    r->rec = *rec;
    if (rec->len > 0)
        memcpy(r->data, rec->payload, rec->len);
    r->rec.payload = r->data;
    pthread_mutex_lock(&el->pipe.mu);
    while (el->n_recs >= FOLLOW_QUEUE_MAX && !el->pipe.stop && el->cancel_sess != el->f_sess)
        oel_timed_wait_locked(el, FOLLOW_POLL_MS);
    if (el->pipe.stop || el->cancel_sess == el->f_sess) {
        pthread_mutex_unlock(&el->pipe.mu);
        free(r);
        return SMP_ECANCELED;
    }
    if (el->recs.tail != NULL)
        el->recs.tail->next = r;
    else
        el->recs.head = r;
    el->recs.tail = r;
    el->n_recs++;
    if (rec->seq > el->t_head)
        el->t_head = rec->seq;
    pthread_mutex_unlock(&el->pipe.mu);
    uv_async_send(&el->pipe.async);
    el->f_next = rec->seq + 1;
    el->f_last_sum = record_sum(rec);
    return 0;
}

/* Tell the loop that the head is behind what was delivered (behind 1, why)
 * or holds it again (0). Thread. */
static void post_behind(etcd_log *el, int behind, const char *why)
{
    if (behind)
        oel_log_line(el, "%s; waiting for etcd to hold the log again", why);
    else
        oel_log_line(el, "oplog: etcd holds the log again up to seq %" PRIu64
                     "; following goes on", el->f_next - 1);
    snprintf(el->f_behind_why, sizeof(el->f_behind_why), "%s", why);
    pthread_mutex_lock(&el->pipe.mu);
    el->behind_evt = 1;
    el->behind_state = behind;
    el->behind_sess = el->f_sess;
    snprintf(el->behind_why, sizeof(el->behind_why), "%s", why);
    pthread_mutex_unlock(&el->pipe.mu);
    uv_async_send(&el->pipe.async);
}

typedef struct same_ctx {
    uint64_t want;  /* the fingerprint delivered */
    int differs;
} same_ctx;

static int same_record(etcd_log *el, void *arg, const oplog_record *rec)
{
    same_ctx *c = arg;
    (void)el;
    if (record_sum(rec) == c->want)
        return 0;
    c->differs = 1;
    return SMP_EPROTO;
}

/* After the head was behind: the record f_next - 1 at revision rev must be
 * the one delivered, else etcd holds another history (a new cluster began
 * on the lost sequences) that this session must not continue. Returns 0,
 * SMP_ERANGE (collected: the caller re-bootstraps), SMP_EPROTO (err says
 * it differs) or an etcd error. */
static int check_same_history(etcd_log *el, int64_t rev, char *err, size_t errlen)
{
    uint64_t seq = el->f_next - 1, first;
    int gone = 0;
    same_ctx c = {el->f_last_sum, 0};
    if (seq == 0 || el->f_last_sum == 0)
        return 0; /* nothing delivered by this session: nothing to compare */
    int rc = oel_scan(el, seq, seq, rev, same_record, &c, &gone, &first, err, errlen);
    if (gone)
        return SMP_ERANGE;
    if (c.differs)
        wm_errbuf(err, errlen, "oplog: record %" PRIu64 " in etcd is not the one this standby "
                  "applied: etcd holds another history (a cluster started anew on the lost "
                  "records); restart this master to start from what etcd holds", seq);
    return rc;
}

void oel_close_watch(etcd_log *el)
{
    etcd_watch_close(el->watch);
    el->watch = NULL;
}

/* Following ended on the thread: tell the loop why (unless cancelled). */
static void post_follow_stop(etcd_log *el, int status, const char *why)
{
    oel_close_watch(el);
    el->f_active = 0;
    if (status == SMP_ECANCELED)
        return;
    oel_log_line(el, "oplog: following stopped at seq %" PRIu64 ": %s", el->f_next, why);
    pthread_mutex_lock(&el->pipe.mu);
    el->stop_evt = 1;
    el->stop_status = status;
    el->stop_sess = el->f_sess;
    snprintf(el->stop_why, sizeof(el->stop_why), "%.*s", (int)sizeof(el->stop_why) - 1, why);
    pthread_mutex_unlock(&el->pipe.mu);
    uv_async_send(&el->pipe.async);
}

/* Read what the session misses up to the head and start the watch after it.
 * Returns 0; FOLLOW_BEHIND (positive, err says so) when the head is behind
 * what was delivered; or an error with err set (SMP_ERANGE: records are
 * gone; SMP_EPROTO also when, after FOLLOW_BEHIND, the record at the last
 * seq delivered is not the one delivered). */
static int follow_sync(etcd_log *el, char *err, size_t errlen)
{
    uint64_t head, first;
    int64_t mod, rev;
    int gone = 0;
    int rc = oel_read_head(el, 0, &head, &mod, &rev, err, errlen);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&el->pipe.mu);
    if (head > el->t_head)
        el->t_head = head;
    pthread_mutex_unlock(&el->pipe.mu);
    if (head + 1 < el->f_next) {
        wm_errbuf(err, errlen, "oplog: the log's head %" PRIu64 " is behind seq %" PRIu64
                  " already applied: etcd lost records (wiped, or restored from an older "
                  "backup)", head, el->f_next - 1);
        return FOLLOW_BEHIND;
    }
    if (el->f_behind && (rc = check_same_history(el, rev, err, errlen)) < 0)
        return rc;
    rc = oel_scan(el, el->f_next, head, rev, post_record, NULL, &gone, &first, err, errlen);
    if (gone)
        return SMP_ERANGE;
    if (rc < 0)
        return rc;
    rc = etcd_watch_open(el->client, el->log_begin, el->log_begin_len, el->log_end,
                         el->log_end_len, rev + 1, &el->watch, err, errlen);
    if (rc == SMP_ERANGE) { /* compacted meanwhile: the next step reads again */
        el->watch = NULL;
        rc = 0;
    }
    return rc;
}

/* Deliver the records of one watch answer. Returns 0 or an error (err set). */
static int follow_events(etcd_log *el, const etcd_watch_batch *b, char *err, size_t errlen)
{
    for (size_t i = 0; i < b->n; i++) {
        const etcd_event *ev = &b->events[i];
        oplog_record rec;
        uint64_t seq;
        int rc;
        if (ev->type != ETCD_EVENT_PUT)
            continue; /* garbage collection */
        seq = oel_key_seq(el, ev->kv.key, ev->kv.key_len);
        if (seq != el->f_next) {
            if (seq == 0) {
                char shown[96];
                oel_printable(shown, sizeof(shown), ev->kv.key, ev->kv.key_len);
                wm_errbuf(err, errlen, "oplog: \"%s\" in the record range is not a record "
                          "key", shown);
            } else if (seq < el->f_next) {
                wm_errbuf(err, errlen, "oplog: record %" PRIu64 " was written again after %"
                          PRIu64 " was delivered", seq, el->f_next - 1);
            } else {
                wm_errbuf(err, errlen, "oplog: sequence gap: record %" PRIu64 " follows %"
                          PRIu64, seq, el->f_next - 1);
            }
            return SMP_EPROTO;
        }
        if ((rc = oel_verify_value(seq, ev->kv.value, ev->kv.value_len, &rec, err, errlen)) < 0)
            return rc;
        if ((rc = post_record(el, NULL, &rec)) < 0)
            return rc;
    }
    return 0;
}

/* One step of following: (re)synchronise, or wait up to FOLLOW_POLL_MS for
 * the watch. Transient errors back off and retry until unreachable_ms. */
void oel_follow_step(etcd_log *el)
{
    char err[384];
    int rc;

    if (el->watch == NULL) {
        rc = follow_sync(el, err, sizeof(err));
        if (rc == FOLLOW_BEHIND) {
            /* Not an end: an etcd restored from its data holds the log again.
             * Said again only when what is said changes. */
            el->f_down_since_ns = 0;
            el->f_backoff_ms = BACKOFF_MIN_MS;
            if (!el->f_behind || strcmp(el->f_behind_why, err) != 0) {
                el->f_behind = 1;
                post_behind(el, 1, err);
            }
            oel_nap(el, FOLLOW_BEHIND_POLL_MS, 1);
            return;
        }
        if (rc == 0 && el->f_behind) {
            el->f_behind = 0;
            post_behind(el, 0, "");
        }
    } else {
        etcd_watch_batch b;
        rc = etcd_watch_next(el->watch, FOLLOW_POLL_MS, &b, err, sizeof(err));
        if (rc == 0)
            return;
        if (rc == 1) {
            rc = follow_events(el, &b, err, sizeof(err));
            etcd_watch_batch_free(&b);
            if (rc == 0) {
                el->f_down_since_ns = 0;
                el->f_backoff_ms = BACKOFF_MIN_MS;
                return;
            }
        } else {
            oel_close_watch(el);
            if (rc == SMP_ERANGE)
                return; /* compacted past the watch: read again, at once */
        }
    }
    if (rc == 0) {
        el->f_down_since_ns = 0;
        el->f_backoff_ms = BACKOFF_MIN_MS;
        return;
    }
    if (rc == SMP_EIO) {
        uint64_t t = oel_now_ns();
        oel_close_watch(el);
        if (el->f_down_since_ns == 0)
            el->f_down_since_ns = t;
        if (t - el->f_down_since_ns >= (uint64_t)el->opt.unreachable_ms * 1000000u) {
            char why[512];
            snprintf(why, sizeof(why), "oplog: etcd stayed unreachable for %" PRIu32
                     " ms: %s", el->opt.unreachable_ms, err);
            post_follow_stop(el, SMP_EIO, why);
            return;
        }
        oel_nap(el, el->f_backoff_ms, 1);
        el->f_backoff_ms = el->f_backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS
                                                                 : el->f_backoff_ms * 2;
        return;
    }
    post_follow_stop(el, rc, err);
}

/* Post the promote's outcome to the loop. */
static void post_promote(etcd_log *el, int status, int follow_ended, uint64_t sess,
                         uint64_t head)
{
    pthread_mutex_lock(&el->pipe.mu);
    el->prom_evt = 1;
    el->prom_status = status;
    el->prom_follow_ended = follow_ended;
    el->prom_sess = sess;
    el->prom_head = head;
    pthread_mutex_unlock(&el->pipe.mu);
    uv_async_send(&el->pipe.async);
}

/* Promote (see oplog_etcd_promote). Thread; mu not held. */
void oel_do_promote(etcd_log *el)
{
    etcd_compare cmp[2];
    etcd_op ok_op, fail_op;
    etcd_txn_result res;
    char err[384];
    uint64_t head = 0, first;
    int64_t mod = 0, rev;
    int gone = 0;
    int rc;
    const oplog_etcd_fence *f = &el->fence; /* stable while promoting */

    pthread_mutex_lock(&el->pipe.mu);
    if (el->promote_sess != el->f_sess) { /* not this session's follow: start one */
        el->f_sess = el->promote_sess;
        el->f_next = el->promote_from;
        el->f_fn = el->promote_fn;
        el->f_arg = el->promote_fn_arg;
        el->f_active = 0;
        el->f_behind = 0;
        el->f_last_sum = 0;
    }
    pthread_mutex_unlock(&el->pipe.mu);
    if (!el->f_active)
        oel_close_watch(el); /* a follow that ended on an error may have left one */

    cmp[0] = (etcd_compare){.target = ETCD_CMP_LEASE, .result = ETCD_CMP_EQUAL,
                            .key = f->leader_key, .key_len = f->leader_key_len,
                            .number = f->lease_id};
    cmp[1] = (etcd_compare){.target = ETCD_CMP_CREATE, .result = ETCD_CMP_EQUAL,
                            .key = f->leader_key, .key_len = f->leader_key_len,
                            .number = f->create_revision};
    ok_op = (etcd_op){.type = ETCD_OP_RANGE, .key = el->head_key,
                      .key_len = el->head_key_len};
    fail_op = (etcd_op){.type = ETCD_OP_RANGE, .key = f->leader_key,
                        .key_len = f->leader_key_len};
    rc = etcd_txn(el->client, cmp, 2, &ok_op, 1, &fail_op, 1, &res, err, sizeof(err));
    if (rc < 0) {
        oel_log_line(el, "oplog: promote: cannot check the fence: %s", err);
        post_promote(el, rc == SMP_EIO ? SMP_EIO : rc, 0, el->f_sess, 0);
        return;
    }
    if (!res.succeeded) {
        char why[512];
        el->fence_ok = 0;
        oel_fenced_reason(el, &res, why, sizeof(why));
        etcd_txn_result_free(&res);
        oel_log_line(el, "oplog: promote refused (%s)", why + strlen("oplog: fenced: "));
        post_promote(el, SMP_ENOTLEADER, 0, el->f_sess, 0);
        return;
    }
    rev = res.revision;
    if (res.n_ranges == 1 && res.ranges[0].n > 0) {
        rc = oel_parse_head(res.ranges[0].kvs[0].value, res.ranges[0].kvs[0].value_len, &head);
        mod = res.ranges[0].kvs[0].mod_revision;
    } else if (res.n_ranges != 1) {
        rc = SMP_EPROTO;
    }
    etcd_txn_result_free(&res);
    if (rc < 0) {
        oel_log_line(el, "oplog: promote: %s does not hold a sequence", el->head_key);
        oel_close_watch(el);
        el->f_active = 0;
        post_promote(el, SMP_EPROTO, 1, el->f_sess, 0);
        return;
    }
    /* Nobody else can append after head now: catch up to it and stop. */
    oel_close_watch(el);
    if (head + 1 < el->f_next) {
        oel_log_line(el, "oplog: promote: the head %" PRIu64 " is behind seq %" PRIu64
                     " already delivered", head, el->f_next - 1);
        rc = SMP_EPROTO;
    } else {
        rc = oel_scan(el, el->f_next, head, rev, post_record, NULL, &gone, &first, err,
                      sizeof(err));
        if (gone)
            rc = SMP_ERANGE;
        if (rc < 0)
            oel_log_line(el, "oplog: promote: catching up: %s", err);
    }
    el->f_active = 0;
    if (rc < 0) {
        post_promote(el, rc, 1, el->f_sess, 0);
        return;
    }
    el->head_mod = mod;
    el->written = head;
    el->fence_ok = 1;
    oel_log_line(el, "oplog: promoted: the log continues at seq %" PRIu64, head + 1);
    post_promote(el, 0, 1, el->f_sess, head);
}

/* The backend's thread: writes first, then requests, then following. */