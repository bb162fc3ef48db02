/* rpc_refusal_log.c -- the master's log lines for clients it turns away
 * for their credentials or their protocol.
 *
 * A token the master does not know, a token that contradicts the
 * connection's client certificate, a plaintext client on the TLS port and
 * a refused TLS handshake are answered to the client and counted in
 * store_rpc_auth_* and store_rpc_tls_*; an operator looking for the
 * misconfigured client also needs its address, in the log. But anyone who
 * reaches the port can cause these, so at most RPC_REFUSAL_LOG_BURST lines
 * are written a minute (log_limit.h, set up by rpc_server_create); the rest
 * are counted and summed up in one line when the next minute opens, and at
 * the server's close. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "rpc_internal.h"

/* "client ADDR:PORT" of a TCP connection, "client uid U pid P (Unix
 * socket)" of a local one, or "a client" when the kernel does not say. */
static void peer_text(rpc_conn *c, char *out, size_t cap)
{
    snprintf(out, cap, "a client");
    if (c->h.handle.type == UV_TCP) {
        struct sockaddr_storage ss;
        int len = (int)sizeof(ss);
        char host[INET6_ADDRSTRLEN] = "";
        if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&ss, &len) != 0) return;
        if (ss.ss_family == AF_INET) {
            const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
            snprintf(out, cap, "client %s:%u", host, (unsigned)ntohs(a->sin_port));
        } else if (ss.ss_family == AF_INET6) {
            const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
            snprintf(out, cap, "client [%s]:%u", host, (unsigned)ntohs(a->sin6_port));
        }
        return;
    }
    uv_os_fd_t fd;
    struct ucred cred;
    socklen_t clen = sizeof(cred);
    if (uv_fileno(&c->h.handle, &fd) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0)
        snprintf(out, cap, "client uid %u pid %d (Unix socket)", (unsigned)cred.uid,
                 (int)cred.pid);
}

/* The line summing up n refusals not logged (none when n is 0). */
static void say_unlogged(uint64_t n)
{
    if (n == 0) return;
    fprintf(stderr, "store_master: rpc: %" PRIu64 " more client%s refused for credentials or "
            "protocol, not logged (at most %d a minute are)\n", n, n == 1 ? "" : "s",
            RPC_REFUSAL_LOG_BURST);
}

void rpc_conn_log_refusal(rpc_conn *c, const char *why)
{
    rpc_server *s = c->srv;
    uint64_t left_out;
    char peer[96];
    int say = log_limit_admit(&s->refusal_log, uv_now(s->loop), &left_out);
    say_unlogged(left_out);
    if (!say) return;
    peer_text(c, peer, sizeof(peer));
    fprintf(stderr, "store_master: rpc: %s: %s\n", peer, why);
}

void rpc_server_log_refusals_end(rpc_server *s)
{
    say_unlogged(log_limit_flush(&s->refusal_log));
}
