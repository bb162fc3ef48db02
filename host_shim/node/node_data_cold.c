/* node_data_cold.c -- the data server's requests on cold files: READ_COLD
 * (a range of a file's data) and CHECK_COLD (hash a whole file against its
 * header, asked by a client whose read of it did not verify).
 *
 * A READ_COLD cannot stream from a mapping: the file is on disk (or a DFS
 * mount) and blocking I/O must stay off the loop. It is a cold_xfer whose
 * steps run on libuv's threadpool: first the open and header check. On a
 * plaintext connection each later step is a sendfile of up to
 * COLD_SEND_STEP bytes from the file's cached pages to the socket, through
 * a dup of the socket that the connection keeps for this (send_fd): no
 * copy through the node's memory. The socket is non-blocking: a step that
 * meets a full socket ends there, and the loop waits for it to be writable
 * (send_poll on send_fd) before queueing the next, so a client that stops
 * reading holds no thread. The loop touches the socket meanwhile only to
 * close it; the dup keeps it open until the step returns. A TLS connection
 * (and a plaintext one whose header is still queued) takes the other way:
 * each chunk is pread into one bounded buffer (COLD_XFER_CHUNK), which the
 * loop seals and sends before the next pread is queued. A transfer is
 * always in exactly one place -- a work item, a chunk write, or the wait
 * for a writable socket -- and the connection's close frees it, unless a
 * work item is still out: then the work's completion does (the work touches
 * only the transfer, never the connection). Either way, a file that fails
 * half way (shorter than its header said, or unreadable) closes the
 * connection: the response header promised every byte, so the client sees
 * a short transfer, never a complete one.
 *
 * A CHECK_COLD is one work item: cold_check with the data hashed, which
 * reads the whole file. A file it finds corrupt is noted for the node's
 * next poll (node_cold_faults.h), which has the master drop its replica, as
 * a READ_COLD that finds a bad header does -- or finds no file at all (one
 * deleted under its replica is as lost as a rotted one: left alone, every
 * read would fail on it while the master kept offering it). The node judges the file by its
 * own reading, never by the client's word; at most COLD_CHECKS_MAX run at
 * once, so clients cannot fill the threadpool with hashing. A check whose
 * reader left ends all the same: it keeps its slot until its hash is done
 * and notes a corrupt file (it holds the server meanwhile:
 * data_server_maybe_free waits for it). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include "node_data_internal.h"

/* -- transfers ------------------------------------------------------------- */

void data_cold_free(cold_xfer *x)
{
    if (x->fd >= 0)
        close(x->fd);
    if (x->owns_sock)
        close(x->sock);
    free(x->cipher);
    free(x);
}

/* -- READ_COLD ------------------------------------------------------------- */

/* Threadpool, a send step: sendfile up to COLD_SEND_STEP bytes from pos to
 * x->sock. x->chunk gets what went out; x->blocked is set when the socket
 * took no more (not an error: the loop waits for it). */
static void cold_send_step(cold_xfer *x)
{
    size_t step = x->remaining < COLD_SEND_STEP ? (size_t)x->remaining : COLD_SEND_STEP;
    off_t off = (off_t)(COLD_HEADER_BYTES + x->pos);
    x->chunk = 0;
    x->blocked = 0;
    x->rc = SMP_OK;
    while (x->chunk < step) {
        ssize_t n = sendfile(x->sock, x->fd, &off, step - x->chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            x->blocked = 1;
            return;
        }
        if (n <= 0) {
            /* EPROTO: the file got shorter; EIO: it or the socket failed */
            x->peer_gone = n < 0 && (errno == EPIPE || errno == ECONNRESET);
            x->rc = n < 0 ? SMP_EIO : SMP_EPROTO;
            return;
        }
        x->chunk += (size_t)n;
    }
}

/* Threadpool: the open step, a send step, or the next chunk's pread.
 * Touches x only. */
static void cold_work(uv_work_t *w)
{
    cold_xfer *x = w->data;
    uint64_t off;
    size_t got = 0;
    if (x->check) {
        cold_entry e;
        char name[COLD_NAME_MAX];
        x->rc = cold_check(x->ct, x->name, 1, &e, x->key, name);
        return;
    }
    if (!x->opened) {
        x->rc = cold_open_data(x->ct, x->name, &x->fd, &x->data_len);
        return;
    }
    if (x->sock >= 0) {
        cold_send_step(x);
        return;
    }
    x->chunk = x->remaining < COLD_XFER_CHUNK ? (size_t)x->remaining : COLD_XFER_CHUNK;
    off = COLD_HEADER_BYTES + x->pos;
    x->rc = SMP_OK;
    while (got < x->chunk) {
        ssize_t n = pread(x->fd, x->buf + got, x->chunk - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            x->rc = n < 0 ? SMP_EIO : SMP_EPROTO; /* EPROTO: the file got shorter */
            return;
        }
        got += (size_t)n;
    }
}

static void cold_after_work(uv_work_t *w, int status);

/* Queue x's next work item. SMP_OK, or SMP_EIO (nothing queued). */
static int cold_queue(data_conn *c, cold_xfer *x)
{
    if (uv_queue_work(c->srv->loop, &x->work, cold_work, cold_after_work) < 0)
        return SMP_EIO;
    x->in_work = 1;
    return SMP_OK;
}

/* The transfer is over (served or refused): drop it and take the next
 * request. */
static void cold_end(data_conn *c)
{
    data_cold_free(c->cold);
    c->cold = NULL;
    c->state = CS_HDR;
    c->got = 0;
    data_idle_arm(c);
    data_conn_resume(c);
}

static void cold_chunk_sent(uv_write_t *w, int status)
{
    cold_xfer *x = w->data;
    data_conn *c = x->conn;
    if (status < 0 || c->state == CS_CLOSING) {
        data_conn_close(c); /* the close frees x */
        return;
    }
    c->srv->stats.bytes_read += x->chunk;
    x->pos += x->chunk;
    x->remaining -= x->chunk;
    if (x->remaining > 0) {
        if (cold_queue(c, x) < 0)
            data_conn_close(c);
        return;
    }
    c->srv->stats.cold_reads++;
    cold_end(c);
}

/* Answer c's cold request with status and no payload (a READ_COLD's
 * refusal, or a CHECK_COLD's verdict): drop the transfer, resume reading. */
static void cold_answer(data_conn *c, int status, const char *fmt, ...)
{
    char msg[NDW_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (data_send_reply(c, status, NDW_KIND_FINAL, msg, NULL, 0, 0) < 0)
        return; /* closing: the close frees the transfer */
    cold_end(c);
}

/* The socket a send step may sendfile to: the connection's send_fd (made
 * on first use, with its poll handle), when the connection is plaintext
 * and nothing it queued is still unsent (the response header went out
 * whole, so the file's bytes follow it). -1: pread and write instead. */
static int send_socket(data_conn *c)
{
    uv_os_fd_t fd;
    if (c->tls.ssl != NULL || uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) != 0)
        return -1;
    if (c->send_fd >= 0)
        return c->send_fd;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) < 0)
        return -1;
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0)
        return -1;
    if (uv_poll_init(c->srv->loop, &c->send_poll, d) < 0) {
        close(d);
        return -1;
    }
    c->send_poll.data = c;
    c->send_fd = d;
    c->open_handles++;
    return d;
}

/* send_fd is writable again: queue the next send step. */
static void cold_writable(uv_poll_t *p, int status, int events)
{
    data_conn *c = p->data;
    (void)events;
    uv_poll_stop(p);
    if (c->state == CS_CLOSING || c->cold == NULL)
        return;
    if (status < 0 || cold_queue(c, c->cold) < 0)
        data_conn_close(c);
}

/* A send step returned without error: count what went out, then end the
 * transfer, wait for the socket, or queue the next step. */
static void cold_sent(data_conn *c, cold_xfer *x)
{
    c->srv->stats.bytes_read += x->chunk;
    x->pos += x->chunk;
    x->remaining -= x->chunk;
    if (x->remaining == 0) {
        c->srv->stats.cold_reads++;
        cold_end(c);
    } else if (x->blocked) {
        if (uv_poll_start(&c->send_poll, UV_WRITABLE, cold_writable) < 0)
            data_conn_close(c);
    } else if (cold_queue(c, x) < 0) {
        data_conn_close(c);
    }
}

/* A cold file found corrupt (how, in why): noted once for the node's next
 * poll, which tells the master (node_cold_faults.h). */
static void note_corrupt(data_server *s, const char *name_or_path, const char *why)
{
    char name[COLD_NAME_MAX];
    if (s->cold_faults == NULL || cold_resolve(s->cold, name_or_path, name) < 0) return;
    if (cold_faults_note(s->cold_faults, name))
        fprintf(stderr, "store_node: cold file %s: %s: reported to the master\n", name, why);
}

/* -- CHECK_COLD ------------------------------------------------------------ */

/* The hash of x's file is done (x->rc), its reader there or not: give the
 * slot back, count it, and note the file when it is corrupt. */
static void check_ended(data_server *s, const cold_xfer *x)
{
    s->cold_checks--;
    s->stats.cold_checks++;
    if (x->rc == SMP_EPROTO) {
        s->stats.cold_checks_corrupt++;
        note_corrupt(s, x->name, "corrupt (checked at a client's request)");
    } else if (x->rc == SMP_ENOTFOUND) {
        note_corrupt(s, x->name, "no such file on this node (missing; checked at a client's request)");
    }
}

/* The hash of x's file is done (x->rc): end it, answer the check and take
 * the next request. */
static void check_done(data_conn *c, cold_xfer *x)
{
    check_ended(c->srv, x);
    cold_answer(c, x->rc, "cold file %s: %s", x->name,
                x->rc == SMP_OK       ? "its data matches the SHA-256 its header records"
                : x->rc == SMP_EPROTO ? "corrupt (its header, its size, or its data against the "
                                        "header's SHA-256); reported to the master, which "
                                        "drops the replica"
                : x->rc == SMP_ENOTFOUND ? "no such file on this node; reported to the master, "
                                           "which drops the replica"
                                         : smp_strerror(x->rc));
}

/* -- a work item done, and a request started ----------------------------- */

static void cold_after_work(uv_work_t *w, int status)
{
    cold_xfer *x = w->data;
    data_conn *c = x->conn;
    data_server *s;
    uint64_t off, len;
    uv_buf_t b;
    (void)status; /* never cancelled */
    x->in_work = 0;
    if (c == NULL) {
        /* the connection is gone; a check still ends as if its reader had
           stayed (its slot given back, a corrupt file noted) */
        data_server *srv = x->srv;
        int check = x->check;
        if (check) check_ended(srv, x);
        data_cold_free(x);
        if (check) data_server_maybe_free(srv);
        return;
    }
    if (x->check) {
        check_done(c, x);
        return;
    }
    s = c->srv;
    off = c->req.offset;
    len = c->req.length;
    if (!x->opened) {
        x->opened = 1;
        if (x->rc < 0) {
            s->stats.refused_cold++;
            if (x->rc == SMP_EPROTO)
                note_corrupt(s, x->name, "bad header or size (corrupted)");
            else if (x->rc == SMP_ENOTFOUND) /* deleted under a replica: as lost as a rotted one */
                note_corrupt(s, x->name, "no such file on this node (missing)");
            cold_answer(c, x->rc, "cold file %s: %s", x->name,
                        x->rc == SMP_ENOTFOUND ? "no such file on this node; reported to the "
                                                 "master, which drops the replica"
                        : x->rc == SMP_EPROTO  ? "bad header or size (corrupted cold file)"
                                               : smp_strerror(x->rc));
            return;
        }
        if (off > x->data_len || len > x->data_len - off) {
            s->stats.refused_range++;
            cold_answer(c, SMP_ERANGE, "[%" PRIu64 ", +%" PRIu64 ") is outside cold file %s of %"
                        PRIu64 " bytes", off, len, x->name, x->data_len);
            return;
        }
        if (data_send_reply(c, SMP_OK, NDW_KIND_FINAL, NULL, NULL, len, 0) < 0)
            return; /* closing */
        x->pos = off;
        x->remaining = len;
        x->sock = len > 0 ? send_socket(c) : -1;
        if (len == 0) {
            s->stats.cold_reads++;
            cold_end(c);
        } else if (cold_queue(c, x) < 0) {
            data_conn_close(c);
        }
        return;
    }
    if (x->rc < 0) {
        /* The header promised len bytes: closing is the only honest answer.
           A client that went away is no error of the file. */
        if (!x->peer_gone)
            s->stats.cold_read_errors++;
        data_conn_close(c);
        return;
    }
    if (x->sock >= 0) {
        cold_sent(c, x);
        return;
    }
    b = uv_buf_init((char *)x->buf, (unsigned)x->chunk);
    if (data_conn_write(c, &x->wreq, &b, 1, &x->cipher, cold_chunk_sent) < 0)
        data_conn_close(c);
}

/* See node_data_internal.h. */
void data_cold_start(data_conn *c, const char *name, int check)
{
    data_server *s = c->srv;
    char bare[COLD_NAME_MAX];
    cold_xfer *x;
    if (s->cold == NULL) {
        data_refuse(c, SMP_ENOTSUP, "this node serves no cold files");
        return;
    }
    /* A bare name only: no directory, no NUL inside, the form cold_resolve
     * accepts -- so nothing outside the cold directory can be named. */
    if (strlen(name) != c->req.seg_len || strchr(name, '/') != NULL ||
        cold_resolve(s->cold, name, bare) < 0) {
        s->stats.refused_cold++;
        data_refuse(c, SMP_EINVAL, "'%.80s' is not the name of a cold file", name);
        return;
    }
    /* A check reads as much as a read of the whole file: it needs a ticket
     * that lets its client read the file, for the range it names. */
    if ((!s->allow_unticketed_reads || c->req.ticket_len > 0) &&
        data_check_ticket(c, bare, TICKET_OP_READ) < 0)
        return;
    if (check && s->cold_checks >= COLD_CHECKS_MAX) {
        data_refuse(c, SMP_EBUSY, "cold file %s: %d check(s) of cold files already run on this "
                    "node; try again", bare, s->cold_checks);
        return;
    }
    x = calloc(1, sizeof(*x));
    if (x == NULL) {
        data_refuse(c, SMP_ENOMEM, "out of memory");
        return;
    }
    x->work.data = x;
    x->wreq.data = x;
    x->conn = c;
    x->ct = s->cold;
    x->srv = s;
    x->check = check;
    x->fd = -1;
    x->sock = -1;
    memcpy(x->name, bare, sizeof(bare));
    c->state = CS_BUSY;
    uv_read_stop((uv_stream_t *)&c->tcp);
    data_idle_disarm(c);
    c->cold = x;
    if (cold_queue(c, x) < 0) {
        cold_answer(c, SMP_EIO, "cannot queue the %s of cold file %s", check ? "check" : "read",
                    bare);
        return;
    }
    if (check) s->cold_checks++;
}
