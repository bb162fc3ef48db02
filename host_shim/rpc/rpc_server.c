/* rpc_server.c -- the master's RPC server on the libuv loop: its lifecycle.
 *
 * Creating, starting (listening on TCP and/or a Unix socket), accepting
 * connections, the reference counts that keep connections and the server
 * alive while anything still points at them (rpc_internal.h), the loop
 * handles that give connections their turns and write the replies once per
 * loop iteration, counters and closing. A connection's input is
 * rpc_conn_io.c's, its output rpc_output.c's; what a request does is
 * rpc_dispatch.c's. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "rpc_internal.h"
#include "wm_errbuf.h"
#include "net_addr.h"

char *rpc_dup_str(const char *s)
{
    size_t n;
    char *d;
    if (s == NULL)
        s = "";
    n = strlen(s) + 1;
    d = malloc(n);
    if (d != NULL)
        memcpy(d, s, n);
    return d;
}

/* -- Reference counts ------------------------------------------------------ */

static void server_free(rpc_server *s)
{
    for (size_t i = 0; i < s->n_services; i++) {
        for (size_t j = 0; j < s->services[i].n_methods; j++)
            free(s->services[i].methods[j].name);
        free(s->services[i].methods);
        free(s->services[i].name);
    }
    free(s->services);
    free(s->listen_tcp);
    free(s->listen_unix);
    SSL_CTX_free(s->tls);
    rpc_limits_free(s->limits);
    free(s);
}

static void server_unref(rpc_server *s)
{
    if (--s->refs == 0)
        server_free(s);
}

void rpc_conn_ref(rpc_conn *c)
{
    c->refs++;
}

/* Drop one reference; the last one frees the connection and releases the
 * server reference it held (which may free the server). */
void rpc_conn_unref(rpc_conn *c)
{
    rpc_server *s;
    if (--c->refs > 0)
        return;
    s = c->srv;
    free(c->body);
    free(c->in);
    free(c->ob);
    if (c->use_tls)
        rpc_tls_session_free(&c->tls);
    free(c);
    server_unref(s);
}

/* -- Once per loop iteration ---------------------------------------------- */

/* Nothing: an active idle handle only keeps the loop from waiting for I/O
 * (the check handle does the work). */
static void on_idle(uv_idle_t *h)
{
    (void)h;
}

/* After the I/O phase: every connection that was readable has been read.
 * Give the connections with input left their next turn, write every
 * pending reply, and keep the loop from waiting while input is left. */
static void on_check(uv_check_t *h)
{
    rpc_server *s = h->data;
    rpc_server_resume(s);
    rpc_server_flush(s);
    if (s->resume_head != NULL)
        uv_idle_start(&s->resume_idle, on_idle);
    else
        uv_idle_stop(&s->resume_idle);
}

/* Before the loop waits for I/O: replies made outside the I/O phase
 * (timers, write callbacks, other handles) leave now. */
static void on_prepare(uv_prepare_t *h)
{
    rpc_server_flush(h->data);
}

static void on_loop_handle_closed(uv_handle_t *h)
{
    server_unref(h->data);
}

/* Start the check and prepare handles (unreferenced: they never keep the
 * loop alive) and initialise the idle one and the hold timer (rpc_hold.c);
 * each holds a server reference until it is closed. SMP_EIO when libuv
 * refuses. */
static int loop_handles_start(rpc_server *s)
{
    if (uv_check_init(s->loop, &s->flush_check) < 0) return SMP_EIO;
    s->flush_check.data = s;
    if (uv_prepare_init(s->loop, &s->flush_prepare) < 0) goto close_check;
    s->flush_prepare.data = s;
    if (uv_idle_init(s->loop, &s->resume_idle) < 0) goto close_prepare;
    s->resume_idle.data = s;
    if (rpc_hold_start(s) < 0) goto close_idle;
    s->loop_handles = 1;
    s->refs += 4;
    uv_check_start(&s->flush_check, on_check);
    uv_prepare_start(&s->flush_prepare, on_prepare);
    uv_unref((uv_handle_t *)&s->flush_check);
    uv_unref((uv_handle_t *)&s->flush_prepare);
    uv_unref((uv_handle_t *)&s->resume_idle);
    return SMP_OK;

close_idle:
    s->refs++;
    uv_close((uv_handle_t *)&s->resume_idle, on_loop_handle_closed);
close_prepare:
    s->refs++;
    uv_close((uv_handle_t *)&s->flush_prepare, on_loop_handle_closed);
close_check:
    s->refs++;
    uv_close((uv_handle_t *)&s->flush_check, on_loop_handle_closed);
    return SMP_EIO;
}

/* Close the four handles and drop what the flush, resume and hold lists
 * hold (their connections are closed by now: nothing is sent). */
static void loop_handles_close(rpc_server *s)
{
    rpc_conn *c;
    rpc_hold_close(s);
    while ((c = s->flush_head) != NULL) {
        s->flush_head = c->flush_next;
        c->flush_queued = 0;
        rpc_conn_unref(c);
    }
    while ((c = s->resume_head) != NULL) {
        s->resume_head = c->resume_next;
        c->resume_queued = 0;
        rpc_conn_unref(c);
    }
    if (!s->loop_handles) return;
    s->loop_handles = 0;
    uv_close((uv_handle_t *)&s->flush_check, on_loop_handle_closed);
    uv_close((uv_handle_t *)&s->flush_prepare, on_loop_handle_closed);
    uv_close((uv_handle_t *)&s->resume_idle, on_loop_handle_closed);
    uv_close((uv_handle_t *)&s->hold_timer, on_loop_handle_closed);
}

/* -- Accepting ------------------------------------------------------------- */

static void on_rejected_closed(uv_handle_t *h)
{
    free(h->data);
}

/* Accept one connection on a listener. Past max_connections it is still
 * accepted, so that it can be told why (SMP_EAGAIN, request_id 0), and then
 * shut down. Accept failures are counted, never fatal for the server. */
static void on_connection(uv_stream_t *lst, int status)
{
    rpc_listener *l = lst->data;
    rpc_server *s = l->srv;
    rpc_conn *c;
    char msg[96];
    int rc;

    if (status < 0 || s->closing) {
        s->st.err_io++;
        return;
    }
    if ((c = calloc(1, sizeof(*c))) == NULL) {
        s->st.err_io++;
        return;
    }
    rc = l->is_tcp ? uv_tcp_init(s->loop, &c->h.tcp) : uv_pipe_init(s->loop, &c->h.pipe, 0);
    if (rc < 0) {
        free(c);
        s->st.err_io++;
        return;
    }
    c->h.handle.data = c;
    if (uv_accept(lst, &c->h.stream) < 0) {
        s->st.err_io++;
        uv_close(&c->h.handle, on_rejected_closed);
        return;
    }
    if (l->is_tcp)
        uv_tcp_nodelay(&c->h.tcp, 1);
    if (l->is_tcp && s->tls != NULL) {
        if (rpc_tls_session_init(&c->tls, s->tls) < 0) {
            s->st.err_io++;
            uv_close(&c->h.handle, on_rejected_closed);
            return;
        }
        c->use_tls = 1;
    }
    c->srv = s;
    s->refs++;
    c->refs = 1; /* the handle, until on_conn_closed */
    c->serial = ++s->next_serial;
    c->next = s->conns;
    if (s->conns != NULL)
        s->conns->prev = c;
    s->conns = c;
    s->st.connections_accepted++;
    s->st.connections_open++;
    if (s->max_conns != 0 && s->st.connections_open > s->max_conns) {
        s->st.connections_rejected++;
        snprintf(msg, sizeof(msg), "too many connections (max_connections %" PRIu32 ")",
                 s->max_conns);
        rpc_conn_fatal(c, SMP_EAGAIN, msg);
        return;
    }
    rpc_conn_set_reading(c);
}

/* -- Server ---------------------------------------------------------------- */

int rpc_server_create(uv_loop_t *loop,
                      const rpc_server_options *opt,
                      rpc_server **out,
                      char *err,
                      size_t errlen)
{
    rpc_server_options none;
    rpc_server *s;

    if (loop == NULL || out == NULL) {
        wm_errbuf(err, errlen, "rpc: no loop or no result pointer");
        return SMP_EINVAL;
    }
    *out = NULL;
    if (opt == NULL) {
        memset(&none, 0, sizeof(none));
        opt = &none;
    }
    if (opt->max_frame_bytes > RPC_MAX_FRAME_LIMIT) {
        wm_errbuf(err, errlen, "rpc: max_frame_bytes %" PRIu32 " is above the limit %u",
                opt->max_frame_bytes, RPC_MAX_FRAME_LIMIT);
        return SMP_ERANGE;
    }
    if ((s = calloc(1, sizeof(*s))) == NULL)
        goto no_memory;
    s->loop = loop;
    s->refs = 1;
    s->tcp_port = -1;
    s->max_frame = opt->max_frame_bytes ? opt->max_frame_bytes : RPC_DEFAULT_MAX_FRAME_BYTES;
    s->max_conns = opt->max_connections;
    s->max_output = opt->max_output_bytes ? opt->max_output_bytes : RPC_DEFAULT_MAX_OUTPUT_BYTES;
    s->max_inflight = opt->max_inflight ? opt->max_inflight : RPC_DEFAULT_MAX_INFLIGHT;
    s->refusal_log = (log_limit){.burst = RPC_REFUSAL_LOG_BURST, .window_ms = 60000};
    s->backlog = opt->backlog > 0 ? opt->backlog : RPC_DEFAULT_BACKLOG;
    if (opt->tls != NULL && SSL_CTX_up_ref(opt->tls) == 1)
        s->tls = opt->tls;
    if (opt->listen_tcp != NULL && opt->listen_tcp[0] != '\0' &&
        (s->listen_tcp = rpc_dup_str(opt->listen_tcp)) == NULL)
        goto free_server;
    if (opt->listen_unix != NULL && opt->listen_unix[0] != '\0') {
        if (strlen(opt->listen_unix) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
            wm_errbuf(err, errlen, "rpc: unix socket path '%s' is longer than %zu bytes",
                    opt->listen_unix, sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
            server_free(s);
            return SMP_EINVAL;
        }
        if ((s->listen_unix = rpc_dup_str(opt->listen_unix)) == NULL)
            goto free_server;
    }
    *out = s;
    return SMP_OK;

free_server:
    server_free(s);
no_memory:
    wm_errbuf(err, errlen, "rpc: out of memory");
    return SMP_ENOMEM;
}

/* Split "host:port" / "[v6]:port" / ":port" into a socket address. */
static int parse_tcp(const char *spec, struct sockaddr_storage *ss, char *err, size_t errlen)
{
    if (net_parse_listen(spec, ss) == SMP_OK) return SMP_OK;
    wm_errbuf(err, errlen, "rpc: listen_tcp '%s' is not host:port with a numeric address", spec);
    return SMP_EINVAL;
}

static void on_listener_closed(uv_handle_t *h)
{
    rpc_listener *l = h->data;
    server_unref(l->srv);
}

/* Close a listener once; its close callback drops its server reference. */
static void listener_close(rpc_listener *l)
{
    if (!l->active)
        return;
    l->active = 0;
    uv_close(&l->h.handle, on_listener_closed);
}

/* Bind and listen on listen_tcp; records the bound port. On failure the
 * listener (if initialised) is left for rpc_server_start to close. */
static int start_tcp(rpc_server *s, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    struct sockaddr_storage bound;
    int namelen = sizeof(bound);
    int rc;

    if ((rc = parse_tcp(s->listen_tcp, &ss, err, errlen)) < 0)
        return rc;
    if (uv_tcp_init(s->loop, &s->tcp.h.tcp) < 0) {
        wm_errbuf(err, errlen, "rpc: cannot create the TCP listener");
        return SMP_EIO;
    }
    s->tcp.h.handle.data = &s->tcp;
    s->tcp.srv = s;
    s->tcp.is_tcp = 1;
    s->tcp.active = 1;
    s->refs++;
    if ((rc = uv_tcp_bind(&s->tcp.h.tcp, (const struct sockaddr *)&ss, 0)) < 0 ||
        (rc = uv_listen(&s->tcp.h.stream, s->backlog, on_connection)) < 0) {
        wm_errbuf(err, errlen, "rpc: cannot listen on %s: %s", s->listen_tcp, uv_strerror(rc));
        return SMP_EIO;
    }
    if (uv_tcp_getsockname(&s->tcp.h.tcp, (struct sockaddr *)&bound, &namelen) == 0)
        s->tcp_port = bound.ss_family == AF_INET6
                          ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                          : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    return SMP_OK;
}

/* Bind and listen on listen_unix, replacing a stale socket file (never
 * another kind of file). Same failure contract as start_tcp. */
static int start_unix(rpc_server *s, char *err, size_t errlen)
{
    struct stat sb;
    int rc;

    if (lstat(s->listen_unix, &sb) == 0) {
        if (!S_ISSOCK(sb.st_mode)) {
            wm_errbuf(err, errlen, "rpc: %s exists and is not a socket", s->listen_unix);
            return SMP_EINVAL;
        }
        unlink(s->listen_unix);
    }
    if (uv_pipe_init(s->loop, &s->unix_l.h.pipe, 0) < 0) {
        wm_errbuf(err, errlen, "rpc: cannot create the unix listener");
        return SMP_EIO;
    }
    s->unix_l.h.handle.data = &s->unix_l;
    s->unix_l.srv = s;
    s->unix_l.is_tcp = 0;
    s->unix_l.active = 1;
    s->refs++;
    if ((rc = uv_pipe_bind(&s->unix_l.h.pipe, s->listen_unix)) < 0) {
        wm_errbuf(err, errlen, "rpc: cannot bind %s: %s", s->listen_unix, uv_strerror(rc));
        return SMP_EIO;
    }
    s->unix_created = 1;
    if ((rc = uv_listen(&s->unix_l.h.stream, s->backlog, on_connection)) < 0) {
        wm_errbuf(err, errlen, "rpc: cannot listen on %s: %s", s->listen_unix, uv_strerror(rc));
        return SMP_EIO;
    }
    return SMP_OK;
}

/* libuv writes with write(2): a peer that vanished would raise SIGPIPE and
 * kill the master. Ignore it unless the program installed its own handler. */
static void ignore_sigpipe(void)
{
    struct sigaction old;
    if (sigaction(SIGPIPE, NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
        old.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
}

int rpc_server_start(rpc_server *s, char *err, size_t errlen)
{
    int rc;
    if (s == NULL)
        return SMP_EINVAL;
    if (s->started || s->closing) {
        wm_errbuf(err, errlen, "rpc: server already started or closed");
        return SMP_ESTATE;
    }
    s->started = 1;
    ignore_sigpipe();
    if (s->listen_tcp != NULL && (rc = start_tcp(s, err, errlen)) < 0)
        goto close_listeners;
    if (s->listen_unix != NULL && (rc = start_unix(s, err, errlen)) < 0)
        goto close_listeners;
    if ((rc = loop_handles_start(s)) < 0) {
        wm_errbuf(err, errlen, "rpc: cannot create the loop handles that write the replies");
        goto close_listeners;
    }
    return SMP_OK;

close_listeners:
    listener_close(&s->tcp);
    listener_close(&s->unix_l);
    if (s->unix_created) {
        unlink(s->listen_unix);
        s->unix_created = 0;
    }
    s->tcp_port = -1;
    return rc;
}

int rpc_server_tcp_port(const rpc_server *s)
{
    return s != NULL ? s->tcp_port : -1;
}

int rpc_server_set_tls(rpc_server *s, SSL_CTX *ctx)
{
    return s != NULL ? rpc_tls_swap_ctx(&s->tls, ctx) : SMP_EINVAL;
}

void rpc_server_close(rpc_server *s)
{
    if (s == NULL || s->closing)
        return;
    s->closing = 1;
    rpc_server_log_refusals_end(s);
    listener_close(&s->tcp);
    listener_close(&s->unix_l);
    if (s->unix_created) {
        unlink(s->listen_unix);
        s->unix_created = 0;
    }
    while (s->conns != NULL)
        rpc_conn_close(s->conns);
    loop_handles_close(s);
    server_unref(s);
}

void rpc_server_get_stats(const rpc_server *s, rpc_server_stats *out)
{
    if (s != NULL && out != NULL)
        *out = s->st;
}

uint64_t rpc_server_ms_since_answer(const rpc_server *s)
{
    uint64_t now;
    if (s == NULL || s->last_answer_ms == 0) return UINT64_MAX;
    now = uv_now(s->loop);
    return now > s->last_answer_ms ? now - s->last_answer_ms : 0;
}
