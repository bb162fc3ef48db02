/* master_snapshot.c -- taking snapshots without stopping the loop.
 *
 * A snapshot captures the applied state at applied_seq: on the loop thread
 * the host's objects, every plugin's section (its save() writes into memory),
 * the carried sections and the carried records are put into a snap_builder;
 * a libuv worker then writes the file durably (snapshot.c). Once the done
 * callback reports it durable, the OpLog before it is truncated. Only one
 * snapshot runs at a time. The carried records section is a simple frame
 * sequence, little-endian: seq u64, type u16, encver u16, len u32, payload. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "master_internal.h"

typedef struct master_snapshot_waiter {
    master_snapshot_cb done;
    void *arg;
    struct master_snapshot_waiter *next;
} master_snapshot_waiter;

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#define CARRIED_HDR 16

int master_carried_records_save(const master *m, smp_writer *w)
{
    int rc;
    for (size_t i = 0; i < m->n_carried_recs; i++) {
        const master_carried_record *r = &m->carried_recs[i];
        uint8_t hdr[CARRIED_HDR];
        put_le(hdr, r->seq, 8);
        put_le(hdr + 8, r->type, 2);
        put_le(hdr + 10, r->encver, 2);
        put_le(hdr + 12, r->len, 4);
        if ((rc = snap_writer_write(w, hdr, sizeof(hdr))) < 0) return rc;
        if ((rc = snap_writer_write(w, r->payload, r->len)) < 0) return rc;
    }
    return SMP_OK;
}

int master_carried_records_load(master *m, const uint8_t *data, size_t len, char *err, size_t errlen)
{
    size_t off = 0;
    uint64_t prev = 0;
    while (off < len) {
        if (len - off < CARRIED_HDR) goto malformed;
        uint64_t seq = get_le(data + off, 8);
        uint16_t type = (uint16_t)get_le(data + off + 8, 2);
        uint16_t encver = (uint16_t)get_le(data + off + 10, 2);
        uint32_t rlen = (uint32_t)get_le(data + off + 12, 4);
        off += CARRIED_HDR;
        if (rlen > len - off || seq <= prev || type <= SMP_OPLOG_HOST_TYPE_MAX) goto malformed;
        master_carried_record *recs =
            realloc(m->carried_recs, (m->n_carried_recs + 1) * sizeof(*recs));
        if (recs == NULL) return SMP_ENOMEM;
        m->carried_recs = recs;
        uint8_t *copy = malloc(rlen ? rlen : 1);
        if (copy == NULL) return SMP_ENOMEM;
        memcpy(copy, data + off, rlen);
        recs[m->n_carried_recs++] = (master_carried_record){seq, type, encver, copy, rlen};
        off += rlen;
        prev = seq;
    }
    return SMP_OK;
malformed:
    snprintf(err, errlen, "snapshot: section '%s' is malformed at byte %zu", MASTER_SECTION_CARRIED, off);
    return SMP_EPROTO;
}

static int write_objects(void *ctx, const void *buf, size_t len)
{
    return snap_writer_write(ctx, buf, len);
}

/* Fill a builder with everything the snapshot holds. */
static int build(master *m, snap_builder *b)
{
    smp_writer *w = NULL;
    int rc;
    if ((rc = snap_builder_begin_section(b, MASTER_SECTION_OBJECTS, MASTER_SECTION_ENCVER, &w)) < 0)
        return rc;
    rc = obj_store_save(m->objs, write_objects, w);
    int end = snap_builder_end_section(b);
    if (rc < 0 || end < 0) return rc < 0 ? rc : end;

    if (m->n_gates > 0) {
        if ((rc = snap_builder_begin_section(b, MASTER_SECTION_GATES, MASTER_SECTION_ENCVER, &w)) < 0)
            return rc;
        rc = master_gates_save(m, w);
        end = snap_builder_end_section(b);
        if (rc < 0 || (rc = end) < 0) return rc;
    }
    if (m->n_carried_recs > 0) {
        if ((rc = snap_builder_begin_section(b, MASTER_SECTION_CARRIED, MASTER_SECTION_ENCVER, &w)) < 0)
            return rc;
        rc = master_carried_records_save(m, w);
        end = snap_builder_end_section(b);
        if (rc < 0 || end < 0) return rc < 0 ? rc : end;
    }
    for (size_t i = 0; i < host_plugins_n_sections(m->plugins); i++) {
        const host_section_reg *reg = host_plugins_section_at(m->plugins, i);
        if ((rc = snap_builder_begin_section(b, reg->s.name, reg->s.encver, &w)) < 0) return rc;
        rc = reg->s.save(host_plugin_state(reg->owner), w);
        end = snap_builder_end_section(b);
        if (rc < 0 || end < 0) {
            fprintf(stderr, "store_master: snapshot: section '%s' of %s failed to save: %s\n",
                    reg->s.name, host_plugin_desc(reg->owner)->name, smp_strerror(rc < 0 ? rc : end));
            return rc < 0 ? rc : end;
        }
    }
    for (size_t i = 0; i < m->n_carried_secs; i++) {
        const master_carried_section *s = &m->carried_secs[i];
        if ((rc = snap_builder_add_raw(b, s->name, s->encver, s->data, s->len)) < 0) return rc;
    }
    return SMP_OK;
}

typedef struct snap_job {
    master *m;
    uint64_t seq;
    double capture_s;   /* the loop held by the capture */
    double written_at;  /* snap_seconds() when the capture ended */
} snap_job;

/* A monotonic clock in seconds, for the snapshot metrics. */
static double snap_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void finish(master *m, int status, uint64_t seq, const char *path)
{
    master_snapshot_waiter *w = m->snapshot_waiters;
    m->snapshot_waiters = NULL;
    m->snapshot_running = 0;
    while (w != NULL) {
        master_snapshot_waiter *next = w->next;
        if (w->done) w->done(m, w->arg, status, seq, path);
        free(w);
        w = next;
    }
}

static void on_written(void *arg, int status, const char *path)
{
    snap_job *job = arg;
    master *m = job->m;
    if (status == SMP_OK) {
        struct stat st;
        m->snapshot_capture_s = job->capture_s;
        m->snapshot_encode_s = job->capture_s;
        m->snapshot_write_s = snap_seconds() - job->written_at;
        m->snapshot_bytes = path != NULL && stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
        m->snapshot_seq = job->seq;
        m->snapshot_wall_ms = master_wall_ms();
        /* HA keeps ha.gc_keep_records below the snapshot, so a standby a
         * little behind goes on following instead of starting over. */
        uint64_t keep = m->cfg->ha_enabled ? m->cfg->ha_gc_keep_records : 0;
        if (!m->log_failed && job->seq + 1 > keep) oplog_truncate_before(m->log, job->seq + 1 - keep);
    } else {
        fprintf(stderr, "store_master: snapshot at %llu failed: %s\n",
                (unsigned long long)job->seq, smp_strerror(status));
    }
    finish(m, status, job->seq, path);
    free(job);
}

int master_snapshot_take(master *m, master_snapshot_cb done, void *arg)
{
    int rc;
    master_snapshot_waiter *w = calloc(1, sizeof(*w));
    if (w == NULL) return SMP_ENOMEM;
    w->done = done;
    w->arg = arg;
    if (!m->snapshot_running && m->snapshot_seq > 0 && m->applied_seq == m->snapshot_seq) {
        /* Nothing happened since the newest snapshot: it is the answer. */
        free(w);
        if (done) done(m, arg, SMP_OK, m->snapshot_seq, NULL);
        return SMP_OK;
    }
    if (m->snapshot_running) {
        /* Join the one running: it answers everyone when it ends. */
        w->next = m->snapshot_waiters;
        m->snapshot_waiters = w;
        return SMP_OK;
    }
    snap_job *job = calloc(1, sizeof(*job));
    snap_builder *b = snap_builder_new(m->applied_seq);
    if (job == NULL || b == NULL) {
        rc = SMP_ENOMEM;
        goto free_all;
    }
    job->m = m;
    job->seq = m->applied_seq;
    double t0 = snap_seconds();
    if ((rc = build(m, b)) < 0) goto free_all;
    job->written_at = snap_seconds();
    job->capture_s = job->written_at - t0;
    if ((rc = snap_write_async(&m->loop, b, m->snap_dir, m->cfg->snapshot_keep, on_written, job)) < 0)
        goto free_all;
    m->snapshot_running = 1;
    m->snapshot_waiters = w;
    return SMP_OK;
free_all:
    snap_builder_free(b);
    free(job);
    free(w);
    return rc;
}
