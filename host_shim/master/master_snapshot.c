/* master_snapshot.c -- taking snapshots without stopping the loop.
 *
 * A snapshot is the applied state at applied_seq. The loop thread forks a
 * child (like Redis's BGSAVE) and goes on serving: the fork copies the page
 * tables, not the memory, which the kernel shares copy-on-write, so the
 * loop waits for the fork alone (store_snapshot_capture_seconds), whatever
 * the state's size. The child, a frozen copy of the state at the fork,
 * puts the host's objects, the gates, the carried records, every plugin's
 * section (its save() runs in the child) and the carried sections into a
 * snap_builder, writes the file durably (snapshot.c), reports the result
 * over a pipe and exits. Once the report says durable, the OpLog before it
 * is truncated; a child that dies or ends without a report fails the
 * snapshot closed (nothing truncated), and so does one still running
 * snapshot.write_timeout_s after the fork: it is killed, since a child
 * stuck for good (a save() waiting on a lock some thread held at the fork,
 * a write that never returns) would otherwise hold back every later
 * snapshot while the OpLog grows. Only one snapshot runs at a time.
 *
 * Why a fork and not the two other ways (issue 20): encoding faster on the
 * loop (direct protobuf encoding into the builder) still grows with the
 * state -- 80 MB at 100,000 revisions is tens of milliseconds at memcpy
 * speed, seconds with protobuf-c -- and an incremental capture over several
 * loop turns needs a copy-on-write of every entry changed meanwhile, in the
 * host's store and in every plugin: the kernel does exactly that for a
 * forked child, for all of them at once, with the encoding (and old
 * snapshots) unchanged. The cost is memory: pages the parent writes while
 * the child runs are copied, at most the state's size.
 *
 * The carried records section is a simple frame sequence, little-endian:
 * seq u64, type u16, encver u16, len u32, payload. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
    rc = obj_store_save(master_objs(m), write_objects, w);
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

/* What a snapshot child tells its parent, in one write (well under
 * PIPE_BUF, so it arrives whole or not at all) once its file is durable or
 * its write failed. */
typedef struct snap_report {
    int32_t status;     /* snap_write_file's answer, or the build's error */
    uint32_t reserved;
    uint64_t bytes;     /* the file's size (status SMP_OK) */
    double encode_s;    /* building the sections */
    double write_s;     /* writing, syncing and renaming the file */
} snap_report;

/* One snapshot in flight: the child writing it and what the loop watches. */
typedef struct snap_job {
    master *m;
    uint64_t seq;
    pid_t pid;
    int fd;             /* read end of the report pipe */
    uv_poll_t poll;     /* readable: the report, or EOF when the child ended */
    uv_timer_t reap;    /* waits for the child's exit after EOF */
    uv_timer_t deadline; /* snapshot.write_timeout_s after the fork */
    int handles;        /* of poll, reap and deadline, still open */
    int timed_out;      /* the deadline killed the child */
    snap_report report;
    size_t got;         /* bytes of report read so far */
    int extra;          /* more bytes than a report came: not trusted */
    int exit_status;    /* waitpid's, once reaped; -1 when not known */
    double capture_s;   /* how long the fork held the loop */
    double captured_at; /* snap_seconds() when the fork returned */
} snap_job;

#define SNAP_REAP_POLL_MS 5

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
    if (status < 0) m->snapshot_failed_ms = master_now_ms();
    while (w != NULL) {
        master_snapshot_waiter *next = w->next;
        if (w->done) w->done(m, w->arg, status, seq, path);
        free(w);
        w = next;
    }
}

/* The child: the forked copy of the loop thread, alone in a copy of the
 * process's memory as it was at the fork -- exactly the applied state at
 * job->seq, whatever the parent does meanwhile. It builds every section,
 * writes the file durably (snapshot.c), reports on wfd and exits without
 * running anything of the parent's (no atexit handlers, no stdio flush of
 * the parent's buffers). It touches only memory and the files it opens:
 * the other threads do not exist here, so nothing it calls may wait for a
 * lock one of them could have held at the fork (plugin save() functions
 * included; store_plugin.h says so); malloc and stdio are safe, glibc
 * takes their locks around fork(). */
static void snap_child(master *m, uint64_t seq, int wfd, pid_t parent, const sigset_t *mask)
    __attribute__((noreturn));
static void snap_child(master *m, uint64_t seq, int wfd, pid_t parent, const sigset_t *mask)
{
    snap_report r = {.status = SMP_ENOMEM};
    /* The parent's handlers would write into pipes the parent's loop reads
     * (libuv's signal pipe): a SIGTERM meant for this child must not stop
     * the master. Then the child dies with its parent: it must never
     * outlive a killed master. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++) (void)sigaction(sig, &dfl, NULL);
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    (void)pthread_sigmask(SIG_SETMASK, mask, NULL);
    /* Nothing of the parent's descriptors but stdio: a connection the
     * parent closes while this child runs must close for its peer (a
     * client, a node, etcd), the listening sockets are the parent's alone,
     * and the copy of the data_dir lock goes, so a master restarted at once
     * is not refused. The child opens the snapshot's files itself. */
    if (wfd > 3) (void)close_range(3, (unsigned)wfd - 1, 0);
    (void)close_range((unsigned)wfd + 1, ~0u, 0);

    double t0 = snap_seconds();
    snap_builder *b = snap_builder_new(seq);
    if (b != NULL) r.status = build(m, b);
    double t1 = snap_seconds();
    r.encode_s = t1 - t0;
    if (r.status >= 0) {
        char path[sizeof(m->snap_dir) + 64];
        struct stat st;
        r.status = snap_write_file(b, m->snap_dir, m->cfg->snapshot_keep, path, sizeof(path));
        if (r.status == SMP_OK && stat(path, &st) == 0) r.bytes = (uint64_t)st.st_size;
    }
    r.write_s = snap_seconds() - t1;
    ssize_t k;
    do {
        k = write(wfd, &r, sizeof(r));
    } while (k < 0 && errno == EINTR);
    _exit(k == (ssize_t)sizeof(r) ? 0 : 1);
}

static void job_closed(uv_handle_t *h)
{
    snap_job *job = h->data;
    if (--job->handles == 0) free(job);
}

/* Describe how the child ended into buf (for the log and the RPC error). */
static void describe_exit(const snap_job *job, char *buf, size_t cap)
{
    int st = job->exit_status;
    if (st == -1)
        snprintf(buf, cap, "its exit status is not known");
    else if (WIFSIGNALED(st))
        snprintf(buf, cap, "it was killed by signal %d", WTERMSIG(st));
    else
        snprintf(buf, cap, "it exited with status %d", WEXITSTATUS(st));
}

/* Failed snapshots logged a window (the rest are counted and summed up). */
#define SNAPSHOT_FAIL_LOG_BURST 3
#define SNAPSHOT_FAIL_LOG_WINDOW_MS (10 * 60 * 1000)

/* Log m->snapshot_why, a failed snapshot: the first SNAPSHOT_FAIL_LOG_BURST
 * of a window, then a count when the next window opens (a full disk fails
 * the retry every MASTER_SNAPSHOT_RETRY_MS; the RPC still names each). */
static void say_failed(master *m)
{
    uint64_t left_out = 0;
    log_limit *l = &m->snapshot_fail_log;
    if (l->burst == 0)
        *l = (log_limit){.burst = SNAPSHOT_FAIL_LOG_BURST, .window_ms = SNAPSHOT_FAIL_LOG_WINDOW_MS};
    int say = log_limit_admit(l, master_now_ms(), &left_out);
    if (left_out > 0)
        fprintf(stderr, "store_master: %llu more failed snapshots were not logged\n",
                (unsigned long long)left_out);
    if (say)
        fprintf(stderr, "store_master: %s%s\n", m->snapshot_why,
                l->logged == l->burst ? " (more failures are counted, logged once every 10 minutes, "
                                        "until a snapshot is written)" : "");
}

/* A snapshot at seq was written: say how many failures before it went
 * unlogged, and log the next failure at once. */
static void say_written(master *m, uint64_t seq)
{
    uint64_t left_out = log_limit_flush(&m->snapshot_fail_log);
    if (left_out > 0)
        fprintf(stderr, "store_master: snapshot at %llu written; %llu failed snapshots before it "
                "were not logged\n", (unsigned long long)seq, (unsigned long long)left_out);
    m->snapshot_fail_log = (log_limit){0};
}

/* The child is gone and reaped (or cannot be): settle the snapshot. Only a
 * whole report saying SMP_OK makes it durable; anything else -- the child
 * killed, crashed, or silent -- fails it closed: nothing is truncated, and
 * what the child may have left (a .tmp) is removed by the next write. */
static void job_settle(snap_job *job)
{
    master *m = job->m;
    char path[sizeof(m->snap_dir) + 64];
    int status;
    if (job->got == sizeof(job->report) && !job->extra) {
        status = job->report.status >= 0 ? SMP_OK : job->report.status;
        if (status == SMP_EEXIST)
            snprintf(m->snapshot_why, sizeof(m->snapshot_why),
                     "snapshot at %llu: not written: %.200s already holds a snapshot at or after "
                     "that seq (written by another master of the cluster, or a copy put back "
                     "by hand); a snapshot never replaces or precedes another",
                     (unsigned long long)job->seq, m->snap_dir);
        else if (status < 0)
            snprintf(m->snapshot_why, sizeof(m->snapshot_why),
                     "snapshot at %llu: its writer failed: %s", (unsigned long long)job->seq,
                     smp_strerror(status));
    } else if (job->timed_out) {
        status = SMP_EIO;
        snprintf(m->snapshot_why, sizeof(m->snapshot_why),
                 "snapshot at %llu: the child writing it (pid %ld) had not finished after "
                 "snapshot.write_timeout_s (%u s) and was killed",
                 (unsigned long long)job->seq, (long)job->pid, m->cfg->snapshot_write_timeout_s);
    } else {
        char how[96];
        describe_exit(job, how, sizeof(how));
        status = SMP_EIO;
        snprintf(m->snapshot_why, sizeof(m->snapshot_why),
                 "snapshot at %llu: the child writing it (pid %ld) ended without a report: %s",
                 (unsigned long long)job->seq, (long)job->pid, how);
    }
    uv_timer_stop(&job->deadline);
    uv_close((uv_handle_t *)&job->deadline, job_closed);
    if (status == SMP_OK && snap_file_path(m->snap_dir, job->seq, path, sizeof(path)) == SMP_OK) {
        m->snapshot_capture_s = job->capture_s;
        m->snapshot_encode_s = job->report.encode_s;
        m->snapshot_write_s = snap_seconds() - job->captured_at;
        m->snapshot_bytes = job->report.bytes;
        m->snapshot_seq = job->seq;
        m->snapshot_wall_ms = master_wall_ms();
        /* HA keeps ha.gc_keep_records below the snapshot, so a standby a
         * little behind goes on following instead of starting over. */
        uint64_t keep = m->cfg->ha_enabled ? m->cfg->ha_gc_keep_records : 0;
        if (!m->log_failed && job->seq + 1 > keep) oplog_truncate_before(m->log, job->seq + 1 - keep);
        say_written(m, job->seq);
        finish(m, SMP_OK, job->seq, path);
    } else {
        if (status == SMP_OK) {
            status = SMP_ERANGE;
            snprintf(m->snapshot_why, sizeof(m->snapshot_why),
                     "snapshot at %llu: its path does not fit", (unsigned long long)job->seq);
        }
        say_failed(m);
        finish(m, status, job->seq, NULL);
    }
}

/* The child has run snapshot.write_timeout_s: kill it. Its end of the
 * pipe closes with it, so on_report sees EOF and settles the snapshot,
 * failed (job_settle names the timeout). */
static void on_deadline(uv_timer_t *t)
{
    snap_job *job = t->data;
    if (job->fd < 0) return; /* already ended, being reaped */
    job->timed_out = 1;
    (void)kill(job->pid, SIGKILL);
}

/* Reap the child without blocking; 1 once it is reaped (or cannot be). */
static int job_reaped(snap_job *job)
{
    int st;
    pid_t r;
    do {
        r = waitpid(job->pid, &st, WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == 0) return 0;
    job->exit_status = r == job->pid ? st : -1; /* ECHILD: SIGCHLD ignored, already reaped */
    return 1;
}

static void on_reap_timer(uv_timer_t *t)
{
    snap_job *job = t->data;
    if (!job_reaped(job)) return;
    uv_timer_stop(&job->reap);
    uv_close((uv_handle_t *)&job->reap, job_closed);
    job_settle(job);
}

/* The report pipe is readable: read the report; at EOF the child has ended
 * (or closed its end exiting): stop watching and reap it. A child exits
 * some milliseconds after its EOF (its address space is torn down), so the
 * reap polls on a timer rather than blocking the loop in waitpid. */
static void on_report(uv_poll_t *p, int status, int events)
{
    snap_job *job = p->data;
    (void)events;
    int ended = status < 0;
    while (!ended) {
        uint8_t spill[16];
        ssize_t k;
        if (job->got < sizeof(job->report))
            k = read(job->fd, (uint8_t *)&job->report + job->got, sizeof(job->report) - job->got);
        else
            k = read(job->fd, spill, sizeof(spill));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (k <= 0) {
            ended = 1;
        } else if (job->got < sizeof(job->report)) {
            job->got += (size_t)k;
        } else {
            job->extra = 1;
        }
    }
    uv_poll_stop(&job->poll);
    uv_close((uv_handle_t *)&job->poll, job_closed);
    close(job->fd);
    job->fd = -1;
    if (job_reaped(job)) {
        uv_close((uv_handle_t *)&job->reap, job_closed);
        job_settle(job);
        return;
    }
    uv_timer_start(&job->reap, on_reap_timer, SNAP_REAP_POLL_MS, SNAP_REAP_POLL_MS);
}

/* Fork the child that writes the snapshot of job->seq and watch its report
 * pipe. The fork is all the loop waits for: it copies the page tables, not
 * the memory, which the kernel then shares copy-on-write. Returns SMP_OK
 * (the child runs; job belongs to the loop's handles), or SMP_ENOMEM /
 * SMP_EAGAIN (fork refused: nothing was started, the caller frees job) or
 * SMP_EIO. */
static int job_fork(master *m, snap_job *job)
{
    int fds[2];
    sigset_t all, old;
    if (pipe2(fds, O_CLOEXEC) < 0) return SMP_EIO;
    /* No signal handler may run in the child before it has put the
     * defaults back (see snap_child). */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t parent = getpid();
    double t0 = snap_seconds();
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        snap_child(m, job->seq, fds[1], parent, &old);
    }
    int e = errno;
    job->captured_at = snap_seconds();
    job->capture_s = job->captured_at - t0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        snprintf(m->snapshot_why, sizeof(m->snapshot_why),
                 "snapshot at %llu not taken: cannot fork its writer: %s",
                 (unsigned long long)job->seq, strerror(e));
        say_failed(m);
        return e == ENOMEM ? SMP_ENOMEM : SMP_EAGAIN;
    }
    job->pid = pid;
    job->fd = fds[0];
    job->exit_status = -1;
    int fl = fcntl(fds[0], F_GETFL);
    if (fl < 0 || fcntl(fds[0], F_SETFL, fl | O_NONBLOCK) < 0 ||
        uv_poll_init(&m->loop, &job->poll, fds[0]) != 0) {
        /* Never leave a child nobody watches: take it back now. */
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        close(fds[0]);
        return SMP_EIO;
    }
    uv_timer_init(&m->loop, &job->reap);
    uv_timer_init(&m->loop, &job->deadline);
    job->poll.data = job->reap.data = job->deadline.data = job;
    job->handles = 3;
    uv_poll_start(&job->poll, UV_READABLE, on_report);
    uv_timer_start(&job->deadline, on_deadline, (uint64_t)m->cfg->snapshot_write_timeout_s * 1000, 0);
    return SMP_OK;
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
    uint64_t newest = 0, older = 0;
    if (!m->snapshot_running && m->applied_seq > m->snapshot_seq &&
        snap_newest_two(m->snap_dir, &newest, &older) == SMP_OK && newest == m->applied_seq) {
        /* HA: the master that led before (the snapshot directory is
         * shared) wrote the snapshot of this very seq -- the same records,
         * so the same state: it is the answer, and a write would only find
         * it there (SMP_EEXIST). */
        char path[sizeof(m->snap_dir) + 64];
        m->snapshot_seq = newest;
        free(w);
        if (done)
            done(m, arg, SMP_OK, newest,
                 snap_file_path(m->snap_dir, newest, path, sizeof(path)) == SMP_OK ? path : NULL);
        return SMP_OK;
    }
    if (m->snapshot_running) {
        /* Join the one running: it answers everyone when it ends. */
        w->next = m->snapshot_waiters;
        m->snapshot_waiters = w;
        return SMP_OK;
    }
    snap_job *job = calloc(1, sizeof(*job));
    if (job == NULL) {
        rc = SMP_ENOMEM;
        goto free_all;
    }
    job->m = m;
    job->seq = m->applied_seq;
    job->fd = -1;
    if ((rc = job_fork(m, job)) < 0) {
        m->snapshot_failed_ms = master_now_ms(); /* the automatic retry waits */
        goto free_all;
    }
    m->snapshot_why[0] = '\0';
    m->snapshot_running = 1;
    m->snapshot_waiters = w;
    return SMP_OK;
free_all:
    free(job);
    free(w);
    return rc;
}
