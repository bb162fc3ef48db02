/* oplog_etcd.c -- the etcd backend of the OpLog.
 *
 * The records live in etcd: <prefix>log/<seq %020llu> holds one record and
 * <prefix>log_head the sequence of the last durable one, in decimal. A log
 * opens read-only (a standby): it can replay what is there, or follow the
 * log as another master writes it. oplog_etcd_promote makes it the writer:
 * one txn checks the election's fence (the leader key is attached to our
 * lease and was created in our term) and reads the head, the records up to
 * that head are delivered to the caller, and appends continue at head + 1.
 *
 * Writing goes through the OpLog pipeline the file backend uses too
 * (oplog_pipe.c): the loop hands its appends over once per turn, the
 * backend's thread takes whatever queued while the previous txn was in
 * flight (up to max_batch_records and max_batch_bytes) and writes it as ONE
 * txn:
 *   compare  leader key LEASE == lease_id, leader key CREATE == create_revision,
 *            log_head MOD == the mod revision this writer last wrote or read
 *   success  put every record key, put log_head = the batch's last seq
 *   failure  range the leader key (to name who holds it)
 * and the durable callbacks run on the loop thread, in order, through the
 * pipeline's uv_async_t. A failed compare means another writer (a new
 * leader) exists: the log is fenced -- every owed callback gets
 * SMP_EDURABILITY, the log is read-only, on_fenced runs. A transport error leaves the outcome unknown:
 * the head and the batch's first key are read back (one txn, no compare) --
 * applied if the head is the batch's last seq and the key holds our bytes,
 * not applied if the head is still ours, fenced otherwise -- and the batch
 * is retried with backoff until the lease's TTL passed, then fenced.
 *
 * Following runs on the same thread: a paged read of the records after the
 * caller's position pinned to one revision R, then a watch of <prefix>log/
 * from R + 1; a broken watch or a compacted revision starts over with a
 * read from the next sequence needed, so nothing is lost or repeated.
 * Records reach the loop through the same uv_async_t (at most
 * FOLLOW_QUEUE_MAX waiting). Every value is verified (magic, sequence equal
 * to its key's, length, checksum) and sequences must be contiguous: a
 * record that does not verify stops replay and following with SMP_EPROTO,
 * never a crash and never a skip. Nothing here knows what a record means.
 *
 * Record value, little-endian (the file backend's record with another magic):
 *   u32 magic "WOE1" | u64 seq | u16 type | u16 encver | u32 len |
 *   payload[len] | u64 XXH64(everything before, seed 0) */
#include "oplog_etcd_internal.h"

static const oplog_ops etcd_ops;

/* -- little helpers -------------------------------------------------------- */

uint64_t oel_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Emit one log line through opt.log_line (or stderr). Any thread. */

void oel_log_line(const etcd_log *el, const char *fmt, ...)
{
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (el->opt.log_line != NULL)
        el->opt.log_line(el->opt.log_arg, line);
    else
        fprintf(stderr, "%s\n", line);
}

/* Bytes from etcd as text for a message: non-printable bytes become '?'. */
void oel_printable(char *dst, size_t dstlen, const void *src, size_t len)
{
    const uint8_t *s = src;
    size_t i = 0;
    if (dstlen == 0)
        return;
    for (; i < len && i + 1 < dstlen; i++)
        dst[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '?';
    dst[i] = '\0';
}

void oel_make_key(const etcd_log *el, uint64_t seq, char *buf)
{
    /* key_len + 1 bytes: the prefix, "log/", 20 digits and a NUL. */
    memcpy(buf, el->log_begin, el->log_begin_len);
    snprintf(buf + el->log_begin_len, SEQ_DIGITS + 1, "%0*" PRIu64, SEQ_DIGITS, seq);
}

/* The sequence a record key names; 0 when it is not a record key. */
uint64_t oel_key_seq(const etcd_log *el, const uint8_t *key, size_t len)
{
    uint64_t v = 0;
    if (len != el->key_len || memcmp(key, el->log_begin, el->log_begin_len) != 0)
        return 0;
    for (size_t i = el->log_begin_len; i < len; i++) {
        if (key[i] < '0' || key[i] > '9')
            return 0;
        if (v > (UINT64_MAX - 9) / 10)
            return 0;
        v = v * 10 + (uint64_t)(key[i] - '0');
    }
    return v;
}

/* Parse a head value (decimal, 1..20 digits, no sign). Returns 0 or
 * SMP_EPROTO. */
int oel_parse_head(const uint8_t *v, size_t len, uint64_t *out)
{
    uint64_t x = 0;
    if (len == 0 || len > SEQ_DIGITS)
        return SMP_EPROTO;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return SMP_EPROTO;
        if (x > (UINT64_MAX - (uint64_t)(v[i] - '0')) / 10)
            return SMP_EPROTO;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    *out = x;
    return 0;
}

/* Check a record value read from the key naming seq. On success fills *rec
 * (payload points into v). Returns 0, or SMP_EPROTO with err naming why. */
int oel_verify_value(uint64_t seq,
                     const uint8_t *v,
                     size_t len,
                     oplog_record *rec,
                     char *err,
                     size_t errlen)
{
    uint32_t plen;
    if (v == NULL || len < VAL_FRAME) {
        wm_errbuf(err, errlen, "oplog: record %" PRIu64 " is %zu bytes, shorter than "
                  "its framing", seq, v == NULL ? 0 : len);
        return SMP_EPROTO;
    }
    if (get_le32(v) != VAL_MAGIC) {
        wm_errbuf(err, errlen, "oplog: record %" PRIu64 " has a bad magic", seq);
        return SMP_EPROTO;
    }
    plen = get_le32(v + 16);
    if ((uint64_t)plen + VAL_FRAME != len) {
        wm_errbuf(err, errlen, "oplog: record %" PRIu64 " says %" PRIu32 " payload bytes "
                  "but its value has %zu", seq, plen, len - VAL_FRAME);
        return SMP_EPROTO;
    }
    if (XXH64(v, VAL_HDR + (size_t)plen, 0) != get_le64(v + VAL_HDR + plen)) {
        wm_errbuf(err, errlen, "oplog: record %" PRIu64 " does not verify (checksum "
                  "mismatch)", seq);
        return SMP_EPROTO;
    }
    if (get_le64(v + 4) != seq) {
        wm_errbuf(err, errlen, "oplog: the key of record %" PRIu64 " holds record %"
                  PRIu64, seq, get_le64(v + 4));
        return SMP_EPROTO;
    }
    rec->seq = seq;
    rec->type = get_le16(v + 12);
    rec->encver = get_le16(v + 14);
    rec->payload = v + VAL_HDR;
    rec->len = plen;
    return 0;
}

static void frec_splice(frec_list *dst, frec_list *src)
{
    if (src->head == NULL)
        return;
    if (dst->tail != NULL)
        dst->tail->next = src->head;
    else
        dst->head = src->head;
    dst->tail = src->tail;
    src->head = src->tail = NULL;
}

static frec *frec_pop(frec_list *l)
{
    frec *r = l->head;
    if (r != NULL) {
        l->head = r->next;
        if (l->head == NULL)
            l->tail = NULL;
        r->next = NULL;
    }
    return r;
}

/* Wait on cv for up to ms (mu held). Returns when signalled or timed out. */
void oel_timed_wait_locked(etcd_log *el, uint32_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&el->pipe.cv, &el->pipe.mu, &ts);
}

/* Sleep ms on the thread (mu not held); a request from the loop (stop,
 * promote, a follow change) cuts it short when wake is set. */
void oel_nap(etcd_log *el, uint32_t ms, int wake)
{
    uint64_t until = oel_now_ns() + (uint64_t)ms * 1000000u;
    pthread_mutex_lock(&el->pipe.mu);
    for (;;) {
        uint64_t t = oel_now_ns();
        if (t >= until)
            break;
        if (wake && (el->pipe.stop || el->promote_req || el->follow_req ||
                     (el->cancel_sess != 0 && el->cancel_sess == el->f_sess)))
            break;
        oel_timed_wait_locked(el, (uint32_t)((until - t + 999999u) / 1000000u));
    }
    pthread_mutex_unlock(&el->pipe.mu);
}

/* -- the loop side: handing over and delivering ------------------------------ */

/* Hold the loop alive while callbacks are owed, a promote is pending or the
 * log follows. */
static void update_ref(etcd_log *el)
{
    el->pipe.hold = el->promote_pending || el->following;
    oplog_pipe_update_ref(&el->pipe);
}

/* Stop the thread following session sess. Loop thread. */
static void cancel_follow(etcd_log *el, uint64_t sess)
{
    pthread_mutex_lock(&el->pipe.mu);
    el->cancel_sess = sess;
    pthread_cond_signal(&el->pipe.cv);
    pthread_mutex_unlock(&el->pipe.mu);
}

/* Following ended: tell the caller once. Loop thread. */
static void end_following(etcd_log *el, int status, const char *why)
{
    void (*on_stop)(void *, int, const char *) = el->on_stop;
    if (!el->following)
        return;
    el->following = 0;
    el->on_stop = NULL;
    update_ref(el);
    if (on_stop != NULL && !el->pipe.closing)
        on_stop(el->stop_arg, status, why);
}

/* Everything the thread posted, in order: records, the end of following,
 * the promote's outcome, durable callbacks, fencing. Loop thread.
 * Re-entrant: a callback that closes the log makes the nested call continue
 * from the same lists; el stays allocated until the uv close callbacks. */
static void deliver(void *be)
{
    etcd_log *el = be;
    frec *r;
    int stop_evt, prom_evt, fenced_evt, behind_evt;
    int stop_status = 0, prom_status = 0, prom_follow_ended = 0, behind_state = 0;
    uint64_t stop_sess = 0, prom_sess = 0, prom_head = 0, behind_sess = 0;
    char stop_why[384], fenced_why[512], behind_why[384];

    pthread_mutex_lock(&el->pipe.mu);
    frec_splice(&el->ready_recs, &el->recs);
    if (el->n_recs >= FOLLOW_QUEUE_MAX)
        pthread_cond_signal(&el->pipe.cv);
    el->n_recs = 0;
    oplog_pipe_take_done_locked(&el->pipe);
    stop_evt = el->stop_evt;
    if (stop_evt) {
        stop_status = el->stop_status;
        stop_sess = el->stop_sess;
        memcpy(stop_why, el->stop_why, sizeof(stop_why));
        el->stop_evt = 0;
    }
    prom_evt = el->prom_evt;
    if (prom_evt) {
        prom_status = el->prom_status;
        prom_follow_ended = el->prom_follow_ended;
        prom_sess = el->prom_sess;
        prom_head = el->prom_head;
        el->prom_evt = 0;
    }
    fenced_evt = el->fenced_evt;
    if (fenced_evt) {
        memcpy(fenced_why, el->fenced_why, sizeof(fenced_why));
        el->fenced_evt = 0;
    }
    behind_evt = el->behind_evt;
    if (behind_evt) {
        behind_state = el->behind_state;
        behind_sess = el->behind_sess;
        memcpy(behind_why, el->behind_why, sizeof(behind_why));
        el->behind_evt = 0;
    }
    pthread_mutex_unlock(&el->pipe.mu);

    while ((r = frec_pop(&el->ready_recs)) != NULL) {
        int rc;
        if (el->pipe.closing || r->sess != el->sess || r->sess == el->dead_sess) {
            free(r);
            continue;
        }
        rc = r->fn(r->arg, &r->rec);
        if (rc < 0) {
            char why[160];
            snprintf(why, sizeof(why), "oplog: the replay callback stopped at seq %"
                     PRIu64 ": %s", r->rec.seq, smp_strerror(rc));
            el->dead_sess = r->sess;
            el->dead_code = rc;
            cancel_follow(el, r->sess);
            free(r);
            end_following(el, rc, why);
            continue;
        }
        el->applied_seq = r->rec.seq;
        if (!el->writable)
            el->last_seq = el->pipe.durable_seq = r->rec.seq;
        if (r->rec.seq > el->head_seen)
            el->head_seen = r->rec.seq;
        free(r);
    }
    if (behind_evt && behind_sess == el->sess && el->following && !el->pipe.closing &&
        el->opt.on_behind != NULL)
        el->opt.on_behind(el->opt.behind_arg, behind_state, behind_why);
    if (stop_evt && stop_sess == el->sess && stop_sess != el->dead_sess)
        end_following(el, stop_status, stop_why);
    if (prom_evt && el->promote_pending) {
        void (*cb)(void *, int) = el->promote_cb;
        int status = prom_status;
        el->promote_pending = 0;
        el->promote_cb = NULL;
        if (el->pipe.closing)
            status = SMP_ECANCELED;
        else if (prom_sess == el->dead_sess)
            status = el->dead_code; /* the caller's fn refused a record */
        if (status == 0) {
            el->writable = 1;
            el->following = 0;
            el->on_stop = NULL;
            el->last_seq = el->pipe.durable_seq = el->applied_seq = prom_head;
            if (prom_head > el->head_seen)
                el->head_seen = prom_head;
        } else if (prom_follow_ended && prom_sess == el->sess) {
            char why[96];
            snprintf(why, sizeof(why), "oplog: following ended with the failed promote: %s",
                     smp_strerror(status));
            end_following(el, status, why);
        }
        update_ref(el);
        if (cb != NULL)
            cb(el->promote_arg, status);
    }
    oplog_pipe_run_ready(&el->pipe); /* oplog_etcd_head counts durable_seq */
    if (fenced_evt) {
        el->pipe.failed_seen = 1;
        if (el->opt.on_fenced != NULL && !el->pipe.closing)
            el->opt.on_fenced(el->opt.fenced_arg, fenced_why);
    }
}

static void *worker_main(void *arg)
{
    etcd_log *el = arg;
    pthread_mutex_lock(&el->pipe.mu);
    for (;;) {
        if (el->cancel_sess != 0) {
            if (el->cancel_sess == el->f_sess) {
                pthread_mutex_unlock(&el->pipe.mu);
                oel_close_watch(el);
                pthread_mutex_lock(&el->pipe.mu);
                el->f_active = 0;
            }
            el->cancel_sess = 0;
            continue;
        }
        if (el->follow_req) {
            el->follow_req = 0;
            pthread_mutex_unlock(&el->pipe.mu);
            oel_close_watch(el);
            pthread_mutex_lock(&el->pipe.mu);
            el->f_active = 1;
            el->f_sess = el->follow_req_sess;
            el->f_next = el->follow_after + 1;
            el->f_fn = el->follow_req_fn;
            el->f_arg = el->follow_req_arg;
            el->f_down_since_ns = 0;
            el->f_backoff_ms = BACKOFF_MIN_MS;
            el->f_behind = 0;
            el->f_last_sum = 0;
            continue;
        }
        if (el->pipe.queue.head != NULL) {
            oplog_pipe_write_batch_locked(&el->pipe);
            continue;
        }
        if (el->promote_req && !el->pipe.stop) {
            el->promote_req = 0;
            pthread_mutex_unlock(&el->pipe.mu);
            oel_do_promote(el);
            pthread_mutex_lock(&el->pipe.mu);
            continue;
        }
        if (el->pipe.trunc_req != 0) {
            uint64_t seq = el->pipe.trunc_req;
            el->pipe.trunc_req = 0;
            if (!el->pipe.failed && el->fence_ok) {
                pthread_mutex_unlock(&el->pipe.mu);
                oel_truncate_records(el, seq);
                pthread_mutex_lock(&el->pipe.mu);
            }
            continue;
        }
        if (el->pipe.stop)
            break;
        if (el->f_active) {
            if (el->n_recs >= FOLLOW_QUEUE_MAX) {
                oel_timed_wait_locked(el, FOLLOW_POLL_MS);
                continue;
            }
            pthread_mutex_unlock(&el->pipe.mu);
            oel_follow_step(el);
            pthread_mutex_lock(&el->pipe.mu);
            continue;
        }
        pthread_cond_wait(&el->pipe.cv, &el->pipe.mu);
    }
    pthread_mutex_unlock(&el->pipe.mu);
    oel_close_watch(el);
    return NULL;
}

/* -- the ops ------------------------------------------------------------------ */

static int etcd_append(oplog *log,
                       uint16_t type,
                       uint16_t encver,
                       const void *payload,
                       size_t len,
                       oplog_durable_fn cb,
                       void *arg,
                       uint64_t *out_seq)
{
    etcd_log *el = (etcd_log *)log;
    uint64_t seq = el->last_seq + 1;
    oplog_entry *e;

    if (el->pipe.closing)
        return SMP_ESTATE;
    if (el->pipe.failed_seen)
        return SMP_EDURABILITY;
    if (!el->writable || el->demoted)
        return SMP_ENOTLEADER;
    if (len > el->opt.max_batch_bytes)
        return SMP_ERANGE;
    e = oplog_pipe_record_new(&el->pipe, VAL_MAGIC, seq, type, encver, payload, len,
                              cb, arg);
    if (e == NULL)
        return SMP_ENOMEM;
    put_le64(e->rec + VAL_HDR + len, XXH64(e->rec, VAL_HDR + len, 0));

    oplog_pipe_stage(&el->pipe, e);
    el->last_seq = seq;
    if (out_seq != NULL)
        *out_seq = seq;
    return 0;
}

typedef struct replay_ctx {
    oplog_replay_fn fn;
    void *arg;
    uint64_t last;
} replay_ctx;

static int replay_one(etcd_log *el, void *arg, const oplog_record *rec)
{
    replay_ctx *c = arg;
    int rc = c->fn(c->arg, rec);
    (void)el;
    if (rc == 0)
        c->last = rec->seq;
    return rc;
}

/* Synchronous on the calling thread: blocks on etcd (see oplog.h). */
static int etcd_replay(oplog *log,
                       uint64_t after_seq,
                       oplog_replay_fn fn,
                       void *arg,
                       char *err,
                       size_t errlen)
{
    etcd_log *el = (etcd_log *)log;
    replay_ctx c = {fn, arg, after_seq};
    uint64_t head, first;
    int64_t mod, rev;
    int gone = 0;
    int rc;

    if (el->pipe.closing || el->writable || el->following || el->promote_pending) {
        wm_errbuf(err, errlen, "oplog: replay needs a standby log that neither follows "
                  "nor promotes");
        return SMP_ESTATE;
    }
    if ((rc = oel_read_head(el, 0, &head, &mod, &rev, err, errlen)) < 0)
        return rc;
    if (head > el->head_seen)
        el->head_seen = head;
    if (head < after_seq) {
        wm_errbuf(err, errlen, "oplog: the log ends at seq %" PRIu64 ", before seq %"
                  PRIu64 " that replay starts after", head, after_seq);
        return SMP_EPROTO;
    }
    rc = oel_scan(el, after_seq + 1, head, rev, replay_one, &c, &gone, &first, err, errlen);
    if (c.last > after_seq || rc == 0)
        el->applied_seq = el->last_seq = el->pipe.durable_seq = c.last;
    return rc;
}

static uint64_t etcd_last_seq(const oplog *log)
{
    return ((const etcd_log *)log)->last_seq;
}

static uint64_t etcd_durable_seq(const oplog *log)
{
    return ((const etcd_log *)log)->pipe.durable_seq;
}

static int etcd_truncate_before(oplog *log, uint64_t seq)
{
    etcd_log *el = (etcd_log *)log;
    if (el->pipe.closing)
        return SMP_ESTATE;
    if (el->pipe.failed_seen)
        return SMP_EDURABILITY;
    if (!el->writable || el->demoted)
        return SMP_ESTATE;
    return oplog_pipe_request_truncate(&el->pipe, seq);
}

static void etcd_stats(const oplog *log, oplog_stats *out)
{
    oplog_pipe_stats(&((etcd_log *)log)->pipe, out);
}

static void free_log(etcd_log *el)
{
    frec *r;
    while ((r = frec_pop(&el->recs)) != NULL)
        free(r);
    while ((r = frec_pop(&el->ready_recs)) != NULL)
        free(r);
    free(el->fence_key);
    free(el->keys);
    free(el->ops);
    free(el->prefix);
    free(el->head_key);
    free(el->log_begin);
    free(el->log_end);
    free(el);
}

/* The pipe's handles are closed: free the log. */
static void release_log(void *be)
{
    free_log(be);
}

static void etcd_close(oplog *log)
{
    etcd_log *el = (etcd_log *)log;
    if (el->pipe.closing)
        return;
    oplog_pipe_stop(&el->pipe); /* the thread writes what it has first */
    deliver(el);
    el->following = 0;
    if (el->promote_pending) {
        void (*cb)(void *, int) = el->promote_cb;
        el->promote_pending = 0;
        el->promote_cb = NULL;
        if (cb != NULL)
            cb(el->promote_arg, SMP_ECANCELED);
    }
    oplog_pipe_close_handles(&el->pipe);
}

static const oplog_ops etcd_ops = {
    .name = "etcd",
    .replay = etcd_replay,
    .append = etcd_append,
    .last_seq = etcd_last_seq,
    .durable_seq = etcd_durable_seq,
    .truncate_before = etcd_truncate_before,
    .stats = etcd_stats,
    .close = etcd_close,
};

/* -- the etcd calls ----------------------------------------------------------- */

static char *concat(const char *a, const char *b, size_t *len)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (s == NULL)
        return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    if (len != NULL)
        *len = la + lb;
    return s;
}

int oplog_etcd_open(uv_loop_t *loop,
                    const oplog_etcd_options *o,
                    oplog **out,
                    char *err,
                    size_t errlen)
{
    etcd_log *el;
    oplog_pipe_conf pc;
    int64_t mod, rev;
    uint64_t head = 0;
    int rc;

    if (loop == NULL || o == NULL || o->client == NULL || o->prefix == NULL ||
        out == NULL) {
        wm_errbuf(err, errlen, "oplog: etcd open needs a loop, options with a client and "
                  "a prefix, and out");
        return SMP_EINVAL;
    }
    if (strlen(o->prefix) > 256) {
        wm_errbuf(err, errlen, "oplog: the etcd prefix is longer than 256 bytes");
        return SMP_EINVAL;
    }
    if (o->max_batch_records > MAX_TXN_RECORDS) {
        wm_errbuf(err, errlen, "oplog: max_batch_records %" PRIu32 " is outside 1..%u "
                  "(etcd's --max-txn-ops is 128 and the head put takes one)",
                  o->max_batch_records, MAX_TXN_RECORDS);
        return SMP_EINVAL;
    }
    if (o->max_batch_bytes > UINT32_MAX - VAL_FRAME) {
        wm_errbuf(err, errlen, "oplog: max_batch_bytes %" PRIu32 " is too large",
                  o->max_batch_bytes);
        return SMP_EINVAL;
    }
    el = calloc(1, sizeof(*el));
    if (el == NULL) {
        wm_errbuf(err, errlen, "oplog: out of memory");
        return SMP_ENOMEM;
    }
    el->base.ops = &etcd_ops;
    el->client = o->client;
    el->opt = *o;
    if (el->opt.max_batch_records == 0)
        el->opt.max_batch_records = MAX_TXN_RECORDS;
    if (el->opt.max_batch_bytes == 0)
        el->opt.max_batch_bytes = DEFAULT_BATCH_BYTES;
    if (el->opt.unreachable_ms == 0)
        el->opt.unreachable_ms = DEFAULT_UNREACHABLE_MS;
    el->prefix = strdup(o->prefix);
    el->head_key = concat(o->prefix, "log_head", &el->head_key_len);
    el->log_begin = concat(o->prefix, "log/", &el->log_begin_len);
    el->log_end = concat(o->prefix, "log0", &el->log_end_len);
    el->key_len = el->log_begin_len + SEQ_DIGITS;
    el->keys = malloc((size_t)el->opt.max_batch_records * (el->key_len + 1));
    el->ops = calloc((size_t)el->opt.max_batch_records + 1, sizeof(*el->ops));
    if (el->prefix == NULL || el->head_key == NULL || el->log_begin == NULL ||
        el->log_end == NULL || el->keys == NULL || el->ops == NULL) {
        wm_errbuf(err, errlen, "oplog: out of memory");
        rc = SMP_ENOMEM;
        goto free_log;
    }
    el->opt.prefix = el->prefix;
    if ((rc = oel_read_head(el, 0, &head, &mod, &rev, err, errlen)) < 0)
        goto free_log;
    el->last_seq = el->pipe.durable_seq = el->applied_seq = el->head_seen = head;
    el->written = head;
    el->head_mod = mod;

    pc = (oplog_pipe_conf){.be = el, .max_batch_records = el->opt.max_batch_records,
                           .max_batch_bytes = el->opt.max_batch_bytes,
                           .write = oel_write_batch,
                           .deliver = deliver, .release = release_log};
    if ((rc = oplog_pipe_init(&el->pipe, &pc, err, errlen)) < 0)
        goto free_log;
    /* The thread sends on the handle only after a request or an append, and
     * none can come before open returns. */
    if ((rc = oplog_pipe_start_handles(&el->pipe, loop, err, errlen)) < 0)
        goto destroy_locks;
    if (pthread_create(&el->pipe.thread, NULL, worker_main, el) != 0) {
        wm_errbuf(err, errlen, "oplog: cannot start the etcd thread");
        /* The handles must be closed through the loop; the memory goes
         * with them. */
        oplog_pipe_close_handles(&el->pipe);
        return SMP_ENOMEM;
    }
    *out = &el->base;
    return 0;

destroy_locks:
    oplog_pipe_destroy_locks(&el->pipe);
free_log:
    free_log(el);
    return rc;
}

static etcd_log *as_etcd(oplog *log)
{
    return log != NULL && log->ops == &etcd_ops ? (etcd_log *)log : NULL;
}

int oplog_etcd_follow(oplog *log,
                      uint64_t after_seq,
                      oplog_replay_fn fn,
                      void *arg,
                      void (*on_stop)(void *arg, int status, const char *why),
                      void *stop_arg)
{
    etcd_log *el = as_etcd(log);
    if (el == NULL || fn == NULL)
        return SMP_EINVAL;
    if (el->pipe.closing || el->writable || el->following || el->promote_pending)
        return SMP_ESTATE;
    el->sess = ++el->next_sess;
    el->following = 1;
    el->follow_fn = fn;
    el->follow_arg = arg;
    el->on_stop = on_stop;
    el->stop_arg = stop_arg;
    pthread_mutex_lock(&el->pipe.mu);
    el->follow_req = 1;
    el->follow_after = after_seq;
    el->follow_req_sess = el->sess;
    el->follow_req_fn = fn;
    el->follow_req_arg = arg;
    pthread_cond_signal(&el->pipe.cv);
    pthread_mutex_unlock(&el->pipe.mu);
    update_ref(el);
    return 0;
}

int oplog_etcd_promote(oplog *log,
                       const oplog_etcd_fence *f,
                       oplog_replay_fn fn,
                       void *fn_arg,
                       void (*cb)(void *arg, int status),
                       void *cb_arg)
{
    etcd_log *el = as_etcd(log);
    uint8_t *key;
    if (el == NULL || f == NULL || f->leader_key == NULL || f->leader_key_len == 0 ||
        cb == NULL || (fn == NULL && !el->following))
        return SMP_EINVAL;
    if (el->pipe.closing || el->writable || el->promote_pending)
        return SMP_ESTATE;
    key = malloc(f->leader_key_len);
    if (key == NULL)
        return SMP_ENOMEM;
    memcpy(key, f->leader_key, f->leader_key_len);
    if (!el->following) {
        el->sess = ++el->next_sess;
        el->follow_fn = fn;
        el->follow_arg = fn_arg;
    }
    el->promote_pending = 1;
    el->promote_cb = cb;
    el->promote_arg = cb_arg;
    pthread_mutex_lock(&el->pipe.mu);
    /* The thread reads the fence only while promoting or writing, and neither
     * runs now (not writable, no promote pending). */
    free(el->fence_key);
    el->fence_key = key;
    el->fence = *f;
    el->fence.leader_key = key;
    el->promote_req = 1;
    el->promote_sess = el->sess;
    el->promote_from = el->applied_seq + 1;
    el->promote_fn = el->follow_fn;
    el->promote_fn_arg = el->follow_arg;
    pthread_cond_signal(&el->pipe.cv);
    pthread_mutex_unlock(&el->pipe.mu);
    update_ref(el);
    return 0;
}

void oplog_etcd_stop_following(oplog *log)
{
    etcd_log *el = as_etcd(log);
    if (el == NULL || !el->following)
        return;
    el->dead_sess = el->sess; /* records of it still queued are dropped */
    el->dead_code = SMP_ECANCELED;
    cancel_follow(el, el->sess);
    el->following = 0;
    el->on_stop = NULL;
    update_ref(el);
}

void oplog_etcd_demote(oplog *log)
{
    etcd_log *el = as_etcd(log);
    if (el != NULL)
        el->demoted = 1;
}

uint64_t oplog_etcd_head(const oplog *log)
{
    etcd_log *el = as_etcd((oplog *)log);
    uint64_t head;
    if (el == NULL)
        return 0;
    pthread_mutex_lock(&el->pipe.mu);
    head = el->t_head;
    pthread_mutex_unlock(&el->pipe.mu);
    /* The pipe sets durable_seq as callbacks run; head_seen the rest. */
    if (el->pipe.durable_seq > head)
        head = el->pipe.durable_seq;
    return head > el->head_seen ? head : el->head_seen;
}
