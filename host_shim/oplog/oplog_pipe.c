/* oplog_pipe.c -- the pipeline both OpLog backends share (see oplog_pipe.h):
 * staging appends on the loop thread and handing them over once per turn,
 * taking and posting batches on the worker thread around the backend's write
 * function, and delivering the completions back on the loop in order. Nothing
 * here knows where records are kept or what they mean; the record layout
 * (oplog_pipe.h) is filled in here up to the checksum, which the backend
 * writes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oplog_le.h"
#include "oplog_pipe.h"
#include "wm_errbuf.h"

/* -- entry lists ------------------------------------------------------------- */

void oplog_entry_list_push(oplog_entry_list *l, oplog_entry *e)
{
    e->next = NULL;
    if (l->tail != NULL)
        l->tail->next = e;
    else
        l->head = e;
    l->tail = e;
}

void oplog_entry_list_splice(oplog_entry_list *dst, oplog_entry_list *src)
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

oplog_entry *oplog_entry_list_pop(oplog_entry_list *l)
{
    oplog_entry *e = l->head;
    if (e != NULL) {
        l->head = e->next;
        if (l->head == NULL)
            l->tail = NULL;
        e->next = NULL;
    }
    return e;
}

/* -- life cycle ---------------------------------------------------------------- */

int oplog_pipe_init(oplog_pipe *p, const oplog_pipe_conf *conf, char *err, size_t errlen)
{
    pthread_condattr_t ca;
    int rc;

    p->conf = *conf;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        wm_errbuf(err, errlen, "oplog: cannot create a mutex");
        return SMP_ENOMEM;
    }
    if (pthread_condattr_init(&ca) != 0) {
        rc = SMP_ENOMEM;
        goto destroy_mutex;
    }
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        rc = SMP_ENOMEM;
        goto destroy_mutex;
    }
    return 0;

destroy_mutex:
    wm_errbuf(err, errlen, "oplog: cannot create a condition variable");
    pthread_mutex_destroy(&p->mu);
    return rc;
}

void oplog_pipe_destroy_locks(oplog_pipe *p)
{
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
}

void oplog_pipe_stop_thread(oplog_pipe *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
}

static void on_async(uv_async_t *h)
{
    oplog_pipe *p = h->data;
    if (p->conf.deliver != NULL)
        p->conf.deliver(p->conf.be);
    else
        oplog_pipe_deliver(p);
}

static void on_after_io(uv_check_t *h)
{
    oplog_pipe_hand_over(h->data);
}

static void on_before_io(uv_prepare_t *h)
{
    oplog_pipe_hand_over(h->data);
}

int oplog_pipe_start_handles(oplog_pipe *p, uv_loop_t *loop, char *err, size_t errlen)
{
    int rc;
    if ((rc = uv_async_init(loop, &p->async, on_async)) < 0) {
        wm_errbuf(err, errlen, "oplog: cannot create the async handle: %s", uv_strerror(rc));
        return SMP_EIO;
    }
    p->async.data = p;
    uv_unref((uv_handle_t *)&p->async);
    /* Neither fails on a valid loop; they never keep the loop alive (the
     * async handle does while callbacks are owed). */
    uv_check_init(loop, &p->after_io);
    uv_prepare_init(loop, &p->before_io);
    p->after_io.data = p;
    p->before_io.data = p;
    uv_check_start(&p->after_io, on_after_io);
    uv_prepare_start(&p->before_io, on_before_io);
    uv_unref((uv_handle_t *)&p->after_io);
    uv_unref((uv_handle_t *)&p->before_io);
    p->handles_open = 3;
    return 0;
}

static void on_closed(uv_handle_t *h)
{
    oplog_pipe *p = h->data;
    if (--p->handles_open > 0)
        return;
    oplog_pipe_destroy_locks(p);
    p->conf.release(p->conf.be);
}

void oplog_pipe_close_handles(oplog_pipe *p)
{
    uv_close((uv_handle_t *)&p->async, on_closed);
    uv_close((uv_handle_t *)&p->after_io, on_closed);
    uv_close((uv_handle_t *)&p->before_io, on_closed);
}

void oplog_pipe_stop(oplog_pipe *p)
{
    p->closing = 1;
    oplog_pipe_hand_over(p); /* the worker drains what it has before it stops */
    oplog_pipe_stop_thread(p);
}

/* -- the loop side ------------------------------------------------------------- */

/* A new entry for seq with rec_len bytes of record (left to the caller),
 * stamped with the turn's append time. NULL when out of memory (nothing
 * counted then). */
static oplog_entry *entry_new(oplog_pipe *p,
                              uint64_t seq,
                              size_t rec_len,
                              oplog_durable_fn cb,
                              void *arg)
{
    oplog_entry *e = malloc(sizeof(*e) + rec_len);
    if (e == NULL)
        return NULL;
    e->next = NULL;
    e->seq = seq;
    if (p->n_staged++ == 0)
        p->turn_ns = uv_hrtime(); /* one clock read per turn of the loop */
    e->t_append_ns = p->turn_ns;
    e->cb = cb;
    e->arg = arg;
    e->status = 0;
    e->rec_len = rec_len;
    return e;
}

oplog_entry *oplog_pipe_record_new(oplog_pipe *p,
                                   uint32_t magic,
                                   uint64_t seq,
                                   uint16_t type,
                                   uint16_t encver,
                                   const void *payload,
                                   size_t len,
                                   oplog_durable_fn cb,
                                   void *arg)
{
    oplog_entry *e = entry_new(p, seq, OPLOG_REC_FRAME + len, cb, arg);
    if (e == NULL)
        return NULL;
    put_le32(e->rec, magic);
    put_le64(e->rec + 4, seq);
    put_le16(e->rec + 12, type);
    put_le16(e->rec + 14, encver);
    put_le32(e->rec + 16, (uint32_t)len);
    if (len > 0)
        memcpy(e->rec + OPLOG_REC_HDR, payload, len);
    return e;
}

void oplog_pipe_stage(oplog_pipe *p, oplog_entry *e)
{
    oplog_entry_list_push(&p->staged, e);
    p->owed++;
    oplog_pipe_update_ref(p);
    p->n_appends++;
}

void oplog_pipe_hand_over(oplog_pipe *p)
{
    if (p->staged.head == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    if (p->failed) {
        for (oplog_entry *e = p->staged.head; e != NULL; e = e->next)
            e->status = SMP_EDURABILITY;
        oplog_entry_list_splice(&p->done, &p->staged);
        uv_async_send(&p->async);
    } else {
        oplog_entry_list_splice(&p->queue, &p->staged);
        p->n_queued += p->n_staged;
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    p->n_staged = 0;
}

void oplog_pipe_update_ref(oplog_pipe *p)
{
    int want = (p->owed > 0 || p->hold) && !p->closing;
    if (want == p->ref_held)
        return;
    p->ref_held = want;
    if (want)
        uv_ref((uv_handle_t *)&p->async);
    else
        uv_unref((uv_handle_t *)&p->async);
}

void oplog_pipe_take_done_locked(oplog_pipe *p)
{
    oplog_entry_list_splice(&p->ready, &p->done);
}

void oplog_pipe_run_ready(oplog_pipe *p)
{
    oplog_entry *e;
    uint64_t now = uv_hrtime();
    while ((e = oplog_entry_list_pop(&p->ready)) != NULL) {
        if (--p->owed == 0)
            oplog_pipe_update_ref(p);
        if (e->status == 0) {
            p->durable_seq = e->seq;
            p->lat_sum_ns += now - e->t_append_ns;
            p->n_durable++;
        } else {
            p->n_failed++;
            p->failed_seen = 1;
        }
        if (e->cb != NULL)
            e->cb(e->arg, e->status, e->seq);
        free(e);
    }
}

void oplog_pipe_deliver(oplog_pipe *p)
{
    pthread_mutex_lock(&p->mu);
    oplog_pipe_take_done_locked(p);
    pthread_mutex_unlock(&p->mu);
    oplog_pipe_run_ready(p);
}

int oplog_pipe_request_truncate(oplog_pipe *p, uint64_t seq)
{
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    if (p->failed) {
        rc = SMP_EDURABILITY;
    } else if (seq > p->trunc_req) {
        p->trunc_req = seq;
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void oplog_pipe_stats(oplog_pipe *p, oplog_stats *out)
{
    pthread_mutex_lock(&p->mu);
    out->bytes = p->n_bytes;
    out->syncs = p->n_syncs;
    out->batches = p->n_batches;
    out->max_batch = p->max_batch;
    out->read_only = p->failed;
    out->failed_seq = p->failed_seq;
    snprintf(out->failed_why, sizeof(out->failed_why), "%s", p->failed_why);
    pthread_mutex_unlock(&p->mu);
    out->appends = p->n_appends;
    out->durable_lat_ns_sum = p->lat_sum_ns;
    out->durable_count = p->n_durable;
    out->failed = p->n_failed;
}

/* -- the worker side ----------------------------------------------------------- */

/* Unlink the next batch from the queue into *batch (mu held): whole when it
 * fits, else up to max_batch_records and max_batch_bytes of payload (the
 * first record always goes). Returns how many entries it took. */
static size_t take_batch_locked(oplog_pipe *p, oplog_entry_list *batch)
{
    size_t n = 0;
    uint64_t payload = 0;
    if (p->conf.max_batch_bytes == 0 && p->n_queued <= p->conf.max_batch_records) {
        n = p->n_queued; /* whole: no entry is written to */
        oplog_entry_list_splice(batch, &p->queue);
    } else {
        while (p->queue.head != NULL && n < p->conf.max_batch_records) {
            size_t len = p->queue.head->rec_len - OPLOG_REC_FRAME;
            if (p->conf.max_batch_bytes != 0 && n > 0 &&
                payload + len > p->conf.max_batch_bytes)
                break;
            payload += len;
            oplog_entry_list_push(batch, oplog_entry_list_pop(&p->queue));
            n++;
        }
    }
    p->n_queued -= n;
    return n;
}

void oplog_pipe_write_batch_locked(oplog_pipe *p)
{
    oplog_entry_list batch = {NULL, NULL};
    size_t n = 0;
    uint64_t bytes = 0;
    int rc;

    if (p->failed) {
        rc = SMP_EDURABILITY;
    } else {
        n = take_batch_locked(p, &batch);
        pthread_mutex_unlock(&p->mu);
        rc = p->conf.write(p->conf.be, &batch, n, &bytes);
        pthread_mutex_lock(&p->mu);
    }
    if (rc < 0) {
        if (!p->failed && p->failed_seq == 0 && batch.head != NULL)
            p->failed_seq = batch.head->seq;
        if (p->failed_why[0] == '\0')
            snprintf(p->failed_why, sizeof(p->failed_why), "the write of the batch from seq %llu "
                     "failed (code %d)", (unsigned long long)p->failed_seq, rc);
        p->failed = 1;
        oplog_entry_list_splice(&batch, &p->queue);
        p->n_queued = 0;
        for (oplog_entry *e = batch.head; e != NULL; e = e->next)
            e->status = SMP_EDURABILITY;
    } else {
        p->n_bytes += bytes;
        p->n_syncs++;
        p->n_batches++;
        if (n > p->max_batch)
            p->max_batch = n;
    }
    oplog_entry_list_splice(&p->done, &batch);
    pthread_mutex_unlock(&p->mu);
    uv_async_send(&p->async);
    pthread_mutex_lock(&p->mu);
}
