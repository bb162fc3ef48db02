/* rpc_client_connect.c -- how an RPC connection reaches a master: the
 * connect of one endpoint (a Unix socket or TCP, TLS on TCP when asked),
 * the walk of a master list in rounds until one answers its HELLO, the
 * connection's creation, and the moves of a stream from one master to the
 * next (rpc_client.c says when a call moves). */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include "wc_tls.h"
#include "wm_errbuf.h"

#include "rpc_client_internal.h"

/* Connect to the Unix socket at path by deadline (-1: no bound). A Unix
 * connect does not go on in the background as a TCP one does: while the
 * listener's backlog is full (a server that does not accept) a blocking
 * connect sleeps until it accepts, for ever if it never does, and a
 * nonblocking one fails at once with EAGAIN, which poll cannot wait out
 * (the socket is not connecting). So the connect blocks with SO_SNDTIMEO
 * set to what is left of the deadline: Linux waits that long for room in
 * the backlog, woken as soon as the server accepts, then fails it EAGAIN.
 * That is SMP_EAGAIN, "timed out", as a TCP connect's timeout is; other
 * failures (nothing listens: ECONNREFUSED, ENOENT) are SMP_EIO. The socket
 * is handed back nonblocking, without the send timeout. */
static int connect_unix(const char *path, int64_t deadline, int *fd_out,
                        char *err, size_t errlen)
{
    struct sockaddr_un sa;
    struct timeval tv = {0, 0};
    int fd, r;

    if (strlen(path) >= sizeof(sa.sun_path)) {
        wm_errbuf(err, errlen, "unix socket path '%s' is longer than %zu bytes",
                   path, sizeof(sa.sun_path) - 1);
        return SMP_EINVAL;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, path);
    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) {
        wm_errbuf(err, errlen, "socket: %s", strerror(errno));
        return SMP_EIO;
    }
    for (;;) {
        if (deadline >= 0) {
            int64_t left = deadline - rpcc_now_ms();
            if (left < 1)
                left = 1; /* 0 would be no bound: one short wait past the deadline */
            tv.tv_sec = (time_t)(left / 1000);
            tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
            if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) {
                wm_errbuf(err, errlen, "setsockopt(SO_SNDTIMEO): %s", strerror(errno));
                r = SMP_EIO;
                goto close_fd;
            }
        }
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            break;
        /* a signal ended the wait before it connected anything: wait on */
        if (errno == EINTR && (deadline < 0 || rpcc_now_ms() < deadline))
            continue;
        if (errno == EAGAIN || errno == EINTR) {
            wm_errbuf(err, errlen, "connect to unix:%s: timed out (the server accepts no "
                      "connection: its backlog is full)", path);
            r = SMP_EAGAIN;
        } else {
            wm_errbuf(err, errlen, "connect to unix:%s: %s", path, strerror(errno));
            r = SMP_EIO;
        }
        goto close_fd;
    }
    tv.tv_sec = 0;
    tv.tv_usec = 0;
    if ((deadline >= 0 && setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) ||
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
        wm_errbuf(err, errlen, "after connecting to unix:%s: %s", path, strerror(errno));
        r = SMP_EIO;
        goto close_fd;
    }
    *fd_out = fd;
    return SMP_OK;

close_fd:
    close(fd);
    return r;
}

/* Connect one address with a deadline. Returns the fd or a negative errno. */
static int connect_addr(const struct addrinfo *ai, int64_t deadline)
{
    int fd, r, soerr = 0, one = 1;
    socklen_t sl = sizeof(soerr);

    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0)
        return -errno;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (errno != EINPROGRESS) {
            r = -errno;
            goto close_fd;
        }
        if ((r = wc_wait_fd(fd, POLLOUT, deadline)) <= 0) {
            r = r == 0 ? -ETIMEDOUT : r;
            goto close_fd;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0) {
            r = -errno;
            goto close_fd;
        }
        if (soerr != 0) {
            r = -soerr;
            goto close_fd;
        }
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;

close_fd:
    close(fd);
    return r;
}

static int connect_tcp(const char *spec, int64_t deadline, int *fd_out,
                       char *err, size_t errlen)
{
    char host[256];
    const char *colon, *hs = spec, *he;
    struct addrinfo hints, *res = NULL, *ai;
    int r, fd = -ETIMEDOUT;

    colon = strrchr(spec, ':');
    if (colon == NULL || colon[1] == '\0')
        goto bad;
    he = colon;
    if (spec[0] == '[') {
        hs = spec + 1;
        if (he == spec || he[-1] != ']')
            goto bad;
        he--;
    }
    if (he <= hs || (size_t)(he - hs) >= sizeof(host))
        goto bad;
    memcpy(host, hs, (size_t)(he - hs));
    host[he - hs] = '\0';
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    if ((r = getaddrinfo(host, colon + 1, &hints, &res)) != 0) {
        wm_errbuf(err, errlen, "cannot resolve '%s': %s", spec, gai_strerror(r));
        return r == EAI_NONAME || r == EAI_SERVICE ? SMP_EINVAL : SMP_EIO;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        if ((fd = connect_addr(ai, deadline)) >= 0)
            break;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        wm_errbuf(err, errlen, "connect to %s: %s", spec,
                   fd == -ETIMEDOUT ? "timed out" : strerror(-fd));
        return fd == -ETIMEDOUT ? SMP_EAGAIN : SMP_EIO;
    }
    *fd_out = fd;
    return SMP_OK;

bad:
    wm_errbuf(err, errlen, "endpoint '%s' is not host:port, unix:/path or /path", spec);
    return SMP_EINVAL;
}

/* Connect one endpoint (checked by master_list) by the deadline. */
static int connect_endpoint(const char *endpoint, int64_t deadline, int *fd,
                            char *err, size_t errlen)
{
    const char *path = master_list_unix_path(endpoint);
    if (path != NULL)
        return connect_unix(path, deadline, fd, err, errlen);
    return connect_tcp(endpoint, deadline, fd, err, errlen);
}

/* Sleep ms milliseconds (none when ms <= 0). */
static void sleep_ms(int64_t ms)
{
    if (ms <= 0) return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void rpcc_sleep_until(int64_t until)
{
    sleep_ms(until - rpcc_now_ms());
}

void rpcc_sleep_capped(int ms, int64_t deadline)
{
    /* one reading of the clock: the pause is ms unless the deadline is
     * nearer (two readings could shave a millisecond off between them) */
    int64_t left = deadline - rpcc_now_ms();
    sleep_ms(left < ms ? left : ms);
}

/* The pause after one of `pause` ms (0: none yet): RPCC_BACKOFF_MIN_MS, then
 * doubling up to c's longest. */
int rpcc_next_pause(const rpcc_conn *c, int pause)
{
    if (pause == 0) return RPCC_BACKOFF_MIN_MS;
    return pause * 2 < c->pause_max_ms ? pause * 2 : c->pause_max_ms;
}

/* Connect c (no socket now) to the endpoint c->ml is at or, when it does
 * not answer, to the next ones in turn. A single endpoint is tried once, as
 * before there were lists: its code and message are returned as they are;
 * with again set (a call that waits out its master's restart) it is tried
 * in rounds as a list is. Several are tried in rounds, each TCP connect
 * for at most RPCC_ATTEMPT_MS, with a pause between rounds
 * (RPCC_BACKOFF_MIN_MS doubling to c->pause_max_ms), until deadline (-1:
 * one round); then
 * SMP_EAGAIN (a connect timed out) or SMP_EIO, with the cause of each
 * endpoint in err, as the last round the deadline did not cut short found
 * them: an attempt the deadline ended (a connect to a refusing port still
 * in progress, a round begun after a late wakeup) learnt nothing about its
 * endpoint, and "timed out" would turn endpoints that all refused into a
 * try-again. On success ml is at the endpoint connected. */
int rpcc_list_connect(rpcc_conn *c, int64_t deadline, int again, char *err, size_t errlen)
{
    int64_t started = rpcc_now_ms();
    int backoff = RPCC_BACKOFF_MIN_MS, rounds = 0, rc = SMP_EIO;
    int decided = 0, decided_timed_out = 0; /* the last whole round's verdict */
    char causes[1024], decided_causes[1024] = "";

    for (;;) {
        size_t round = master_list_round(&c->ml), used = 0;
        int timed_out = 0, cut = 0, once = round == 1 && !again;
        causes[0] = '\0';
        rounds++;
        for (size_t i = 0; i < round; i++) {
            char one[320];
            const char *ep = master_list_current(&c->ml);
            int64_t limit = deadline;
            int fd = -1, tcp = master_list_unix_path(ep) == NULL;
            if (round > 1 && (limit < 0 || limit > rpcc_now_ms() + RPCC_ATTEMPT_MS))
                limit = rpcc_now_ms() + RPCC_ATTEMPT_MS;
            one[0] = '\0';
            rc = connect_endpoint(ep, limit, &fd, one, sizeof(one));
            if (rc == SMP_OK && c->tls != NULL && tcp &&
                (rc = wc_tls_connect_as(c->tls, fd, ep, c->tls_name, limit, "master", &c->ssl, one,
                                       sizeof(one))) < 0) {
                close(fd);
                fd = -1;
            }
            if (rc == SMP_OK) {
                c->fd = fd;
                c->answered = 0;
                c->rcvtimeo_ms = 0;
                /* A plain TCP socket blocks only in io_recv_awaited (the top
                 * of this file). */
                c->recv_blocks = c->ssl == NULL && tcp &&
                                 fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0;
                snprintf(c->endpoint, sizeof(c->endpoint), "%s", ep);
                if ((rc = rpcc_hello(c, limit, round > 1, one, sizeof(one))) == SMP_OK) {
                    if (round > 1)
                        rpcc_silent_note(ep, 0);
                    return SMP_OK;
                }
                if (rc == SMP_EAGAIN && round > 1 && !c->answered)
                    rpcc_silent_note(ep, 1); /* not a master that answered "later" */
                rpcc_drop_stream(c);
                if (rc == SMP_EAUTH || rc == SMP_EFORBIDDEN || once) {
                    /* a refused credential is not a reason to try elsewhere */
                    wm_errbuf(err, errlen, "%s: %s", ep, one);
                    return rc;
                }
            }
            if (once) {
                wm_errbuf(err, errlen, "%s", one);
                return rc;
            }
            if (rc == SMP_EAGAIN && limit == deadline && decided)
                cut = 1; /* the call's deadline ended it, not the endpoint */
            else if (rc == SMP_EAGAIN)
                timed_out = 1;
            if (used < sizeof(causes)) {
                int k = snprintf(causes + used, sizeof(causes) - used, "%s%s", used ? "; " : "",
                                 one);
                used += k > 0 ? (size_t)k : 0;
            }
            master_list_next(&c->ml);
        }
        if (!cut) {
            decided = 1;
            decided_timed_out = timed_out;
            memcpy(decided_causes, causes, sizeof(causes));
        }
        if (deadline < 0 || rpcc_now_ms() + backoff >= deadline)
            break;
        rpcc_sleep_until(rpcc_now_ms() + backoff);
        backoff = rpcc_next_pause(c, backoff);
    }
    if (master_list_round(&c->ml) == 1)
        wm_errbuf(err, errlen, "no master answered at %s (%d attempt%s in %lld ms): %s",
                  master_list_current(&c->ml), rounds, rounds == 1 ? "" : "s",
                  (long long)(rpcc_now_ms() - started), decided_causes);
    else
        wm_errbuf(err, errlen, "no master answered (%zu endpoints, %d round%s in %lld ms): %s",
                  master_list_round(&c->ml), rounds, rounds == 1 ? "" : "s",
                  (long long)(rpcc_now_ms() - started), decided_causes);
    return decided_timed_out ? SMP_EAGAIN : SMP_EIO;
}

int rpcc_connect(const char *endpoint,
                 const rpcc_options *opt,
                 rpcc_conn **out,
                 char *err,
                 size_t errlen)
{
    rpcc_conn *c;
    int rc;

    if (out == NULL || endpoint == NULL) {
        wm_errbuf(err, errlen, "no endpoint or no result pointer");
        return SMP_EINVAL;
    }
    *out = NULL;
    if ((c = calloc(1, sizeof(*c))) == NULL) {
        wm_errbuf(err, errlen, "out of memory");
        return SMP_ENOMEM;
    }
    c->fd = -1;
    c->timeout_ms = opt != NULL ? opt->timeout_ms : 0;
    c->pause_max_ms = opt == NULL || opt->follow_pause_max_ms <= 0 ? RPCC_BACKOFF_MAX_MS
                      : opt->follow_pause_max_ms < RPCC_BACKOFF_MIN_MS ? RPCC_BACKOFF_MIN_MS
                                                                      : opt->follow_pause_max_ms;
    c->max_frame = opt != NULL && opt->max_frame_bytes ? opt->max_frame_bytes
                                                       : RPCC_DEFAULT_MAX_FRAME_BYTES;
    c->next_id = 1;
    c->await_restart = opt != NULL && opt->await_restart;
    if ((rc = wc_tls_client_ctx(opt != NULL ? opt->tls_ca : NULL, opt != NULL ? opt->tls_cert : NULL,
                                 opt != NULL ? opt->tls_key : NULL, &c->tls, err, errlen)) < 0)
        goto free_conn;
    {
        const char *tok = opt != NULL && opt->token != NULL ? opt->token : getenv("WEIGHT_TOKEN");
        if (tok != NULL && tok[0] != '\0' && (c->token = strdup(tok)) == NULL) {
            wm_errbuf(err, errlen, "out of memory");
            rc = SMP_ENOMEM;
            goto free_conn;
        }
    }
    if (opt != NULL && opt->tls_server_name != NULL)
        snprintf(c->tls_name, sizeof(c->tls_name), "%s", opt->tls_server_name);
    if ((rc = master_list_parse(endpoint, &c->ml, err, errlen)) < 0)
        goto free_conn;
    rpcc_skip_silent(c);
    if ((rc = rpcc_list_connect(c, rpcc_deadline_of(c->timeout_ms), 0, err, errlen)) < 0)
        goto free_conn;
    *out = c;
    return SMP_OK;

free_conn:
    SSL_CTX_free(c->tls);
    free(c->token);
    free(c->in);
    free(c);
    return rc;
}

/* Forget the stream: the socket, buffered bytes, unclaimed responses. */
void rpcc_drop_stream(rpcc_conn *c)
{
    rpcc_pending *p, *next;
    for (p = c->head; p != NULL; p = next) {
        next = p->next;
        free(p);
    }
    c->head = c->tail = NULL;
    if (c->ssl != NULL)
        SSL_free(c->ssl);
    c->ssl = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->in_len = 0;
    c->in_flight = 0;
    c->broken = 0;
    c->peer_stopping = 0;
    c->endpoint[0] = '\0';
}

/* Drop the stream and connect again: at the leader the last NOT_LEADER
 * named, else from the endpoint after the one in use, walking the list
 * until deadline (a single endpoint too when c awaits restarts). On
 * failure the connection stays broken with the cause, and the cause of the
 * move (the error the stream ended with, or the master's word that it was
 * stopping) after it. */
int rpcc_conn_move(rpcc_conn *c, int64_t deadline)
{
    char why[sizeof(c->err)], lost[sizeof(c->err)];
    int rc;
    /* what ended the stream, if anything did (an answer clears it); with
     * no stream, the failure that ended it was told already */
    if (c->peer_stopping)
        snprintf(lost, sizeof(lost), "%s said it is stopping", c->endpoint);
    else if (c->fd >= 0)
        memcpy(lost, c->err, sizeof(lost));
    else
        lost[0] = '\0';
    rpcc_drop_stream(c);
    c->relocate = 0;
    if (!c->hinted) {
        master_list_next(&c->ml);
        rpcc_skip_silent(c);
    }
    c->hinted = 0;
    if ((rc = rpcc_list_connect(c, deadline, c->await_restart, why, sizeof(why))) < 0) {
        /* A connect that failed only because the call's time ran out says
         * little: what made the call move says why (a peer that closed
         * every connection unanswered, e.g. another service's port). */
        if (lost[0] != '\0' && strcmp(lost, why) != 0)
            rpcc_conn_err(c, "%s, after: %s", why, lost);
        else
            rpcc_conn_err(c, "%s", why);
        c->broken = rc;
        return rc;
    }
    c->moves++;
    return SMP_OK;
}

int rpcc_reconnect(rpcc_conn *c)
{
    if (c == NULL)
        return SMP_EINVAL;
    return rpcc_conn_move(c, rpcc_deadline_of(c->timeout_ms));
}

